//! Credentials for the masters that are not part of their URLs, and the one type that holds a
//! password: it never prints it (`Debug` shows `***`), so no log line, error or settings dump
//! carries one by accident.

use std::fmt;

/// A password for the masters. `Debug` shows `***`; [`Password::expose`] is the only way to
/// the text, used where it goes on the wire (`AUTH`) or to fred.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// A password, kept out of every `Debug` and log line.
    pub fn new(password: impl Into<String>) -> Self {
        Self(password.into())
    }

    /// The password itself: for `AUTH`, never for a message.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<&str> for Password {
    fn from(password: &str) -> Self {
        Self::new(password)
    }
}

impl From<String> for Password {
    fn from(password: String) -> Self {
        Self(password)
    }
}

/// The user and password redlease authenticates as on every master (`AUTH [user] password`),
/// for fleets whose URLs carry no credentials. A URL that carries some while these are set is
/// refused: one master's password must not come from two places.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The ACL user; `None`: Redis' `default` user (`AUTH password`).
    pub username: Option<String>,
    /// The password (never printed).
    pub password: Password,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Neither `Debug` of a password nor of credentials shows the password.
    #[test]
    fn debug_never_shows_the_password() {
        let credentials = Credentials {
            username: Some("redlease".into()),
            password: "hunter2-secret".into(),
        };
        let shown = format!("{credentials:?} {:?}", credentials.password);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("redlease") && shown.contains("***"),
            "{shown}"
        );
        assert_eq!(credentials.password.expose(), "hunter2-secret");
    }
}
