//! The fields of text log lines, written so that no value can pass for another field or
//! another line: a value with a space, `=`, a quote, a backslash, a control or a format
//! character is quoted and escaped as a Rust string literal; the message keeps its words but
//! has its control and format characters escaped. JSON logs need none of this.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;

use crate::keys::is_invisible_format;

/// The [`FormatFields`] of `--log-format text`.
#[derive(Debug, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = EscapingVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct EscapingVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl EscapingVisitor<'_> {
    fn write(&mut self, field: &Field, text: &str) {
        if self.result.is_err() {
            return;
        }
        let separator = if self.first { "" } else { " " };
        self.first = false;
        self.result = if field.name() == "message" {
            write!(self.writer, "{separator}{}", escaped_message(text))
        } else if needs_quotes(text) {
            write!(self.writer, "{separator}{}={text:?}", field.name())
        } else {
            write!(self.writer, "{separator}{}={text}", field.name())
        };
    }
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut text = String::new();
        // Writing into a String only fails if the value's own Debug fails; keep what it wrote.
        let _ = write!(text, "{value:?}");
        self.write(field, &text);
    }
}

/// A value that could be read as more than one value, or that hides or moves text.
fn needs_quotes(text: &str) -> bool {
    text.is_empty()
        || text
            .chars()
            .any(|c| matches!(c, ' ' | '=' | '"' | '\\') || hides_text(c))
}

fn hides_text(c: char) -> bool {
    c.is_control() || c.is_whitespace() || is_invisible_format(c)
}

/// The message with each control or format character written as its escape (`\n`,
/// `\u{202e}`); spaces stay.
fn escaped_message(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if c != ' ' && hides_text(c) {
            shown.extend(c.escape_debug());
        } else {
            shown.push(c);
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value that carries another field, a line break or a bidi override is quoted with its
    /// characters escaped; plain values and the message's spaces stay as they are.
    #[test]
    fn values_cannot_forge_fields_or_lines() {
        assert!(!needs_quotes("billing-close"));
        assert!(!needs_quotes("redis://127.0.0.1:6379"));
        for forged in [
            "x owner=root",
            "a\nb",
            "evil\u{202e}txt",
            "a\u{2028}b",
            "\"",
            "",
            "tab\tx",
        ] {
            assert!(needs_quotes(forged), "{forged:?}");
        }
        assert_eq!(format!("{:?}", "x owner=root"), "\"x owner=root\"");
        assert_eq!(format!("{:?}", "evil\u{202e}txt"), "\"evil\\u{202e}txt\"");
        assert_eq!(escaped_message("lease lost\nFAKE"), "lease lost\\nFAKE");
        assert_eq!(escaped_message("a\u{202e}b c"), "a\\u{202e}b c");
    }
}
