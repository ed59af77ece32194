//! TLS masters for the tests: certificates made with the openssl CLI in a temp dir (a CA, a
//! server certificate for 127.0.0.1 and localhost, a client certificate), `redis-server` with
//! a TLS port beside its plain loopback port, and ACL users limited to redlease's documented
//! commands, keys and channels.
//!
//! Both ports come from the kernel. redlease is only ever given the TLS port; the plain one
//! serves the launcher's readiness probe and the test's own setup and inspection (as Redis'
//! unrestricted `default` user).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use crate::resp::{self, Resp};
use crate::RedisServer;

/// The commands redlease's ACL user needs: the ACL line of docs/security.md lists exactly
/// these (a test holds the two together).
pub const ACL_COMMANDS: &[&str] = &[
    "ping",
    "info",
    "select",
    "client|id",
    "client|kill",
    "get",
    "set",
    "del",
    "incr",
    "pttl",
    "pexpire",
    "exists",
    "evalsha",
    "script|load",
    "publish",
    "subscribe",
    "unsubscribe",
    "scan",
    "xadd",
    "xrevrange",
];

/// The rules of `ACL SETUSER <user> …` for redlease with `password`, keys and channels under
/// `redlease:`, and every command of [`ACL_COMMANDS`] but `without`.
pub fn acl_rules(password: &str, without: &[&str]) -> Vec<String> {
    let fixed = [
        "reset",
        "on",
        "resetkeys",
        "~redlease:*",
        "resetchannels",
        "&redlease:*",
    ];
    let mut rules: Vec<String> = fixed.iter().map(|r| r.to_string()).collect();
    rules.insert(2, format!(">{password}"));
    rules.push("-@all".into());
    let granted = ACL_COMMANDS.iter().filter(|c| !without.contains(c));
    rules.extend(granted.map(|command| format!("+{command}")));
    rules
}

/// A CA and the certificates it signed, in a temp dir removed on drop.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A fresh CA (its own key: no other `Pki` trusts it), a server certificate for
    /// 127.0.0.1 and localhost, and a client certificate.
    #[allow(
        clippy::new_without_default,
        reason = "each call makes a new CA with openssl: no default value"
    )]
    pub fn new() -> Self {
        let pki = Self {
            // A temp dir that cannot be made fails the test.
            dir: tempfile::tempdir().unwrap(),
        };
        // A name of its own: a CA of the same name would be taken for the signer.
        let subject = format!("/CN=redlease test CA {:08x}", rand::random::<u32>());
        pki.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            &subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        pki.sign(
            "server",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth",
        );
        pki.sign("client", "extendedKeyUsage=clientAuth");
        pki
    }

    /// The file `name` in the temp dir.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA certificate (`ca.pem`).
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// Writes `text` into the file `name` of the temp dir; its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        // A temp file that cannot be written fails the test.
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `<name>.key` and `<name>.pem`, an X.509 **v1** certificate signed by the CA: what
    /// `openssl x509 -req` makes without `-extfile` (no extensions, so no v3). Rustls refuses
    /// it; the tests check that redlease says so, naming the file.
    pub fn sign_v1(&self, name: &str) {
        self.sign_with(name, None);
    }

    /// `<name>.key` and `<name>.pem`, signed by the CA with the extensions `extensions`.
    fn sign(&self, name: &str, extensions: &str) {
        self.sign_with(name, Some(extensions));
    }

    /// `<name>.key` and `<name>.pem`, signed by the CA; v3 with `extensions` when given.
    fn sign_with(&self, name: &str, extensions: Option<&str>) {
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        let ext = format!("{name}.ext");
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN=redlease test {name}"),
        ]);
        let serial = format!("0x{:016x}", rand::random::<u64>() >> 1);
        let mut args = vec![
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            &serial,
            "-out",
            &pem,
            "-days",
            "2",
        ];
        if let Some(extensions) = extensions {
            let extensions = format!("basicConstraints=CA:FALSE\n{extensions}\n");
            // A temp file that cannot be written fails the test.
            std::fs::write(self.path(&ext), extensions).unwrap();
            args.extend(["-extfile", &ext]);
        }
        self.openssl(&args);
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("openssl (scripts/install-deps.sh installs it): {e}"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "openssl {args:?}: {stderr}");
    }
}

/// A `redis-server` with a TLS port (`rediss://`) beside its plain one.
pub struct TlsMaster {
    /// The server, with its plain port for the test's own commands.
    pub server: RedisServer,
    tls_port: Arc<AtomicU16>,
}

impl TlsMaster {
    /// Starts one with `pki`'s server certificate; with `mutual`, clients must show a
    /// certificate signed by `pki`'s CA (`--tls-auth-clients yes`).
    pub fn start(pki: &Pki, mutual: bool) -> Self {
        let tls_port = Arc::new(AtomicU16::new(0));
        let chosen = Arc::clone(&tls_port);
        let (cert, key, ca) = (pki.path("server.pem"), pki.path("server.key"), pki.ca());
        let server = RedisServer::start_with(move |command| {
            // A fresh port for every spawn, as the launcher does for the plain one.
            // Binding loopback port 0 fails only when the machine is out of ports.
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            chosen.store(port, Ordering::SeqCst);
            command
                .args(["--tls-port", &port.to_string()])
                .args(["--tls-auth-clients", if mutual { "yes" } else { "no" }])
                .arg("--tls-cert-file")
                .arg(&cert)
                .arg("--tls-key-file")
                .arg(&key)
                .arg("--tls-ca-cert-file")
                .arg(&ca);
        });
        Self { server, tls_port }
    }

    /// The TLS port (a fresh one at every spawn).
    pub fn tls_port(&self) -> u16 {
        self.tls_port.load(Ordering::SeqCst)
    }

    /// `rediss://127.0.0.1:<TLS port>`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port())
    }

    /// One command on the plain port, as the `default` user.
    pub fn command(&self, args: &[&str]) -> Resp {
        resp::command(self.server.port(), args)
    }

    /// Creates (or redefines) the ACL user `user` with [`acl_rules`].
    pub fn add_user(&self, user: &str, password: &str, without: &[&str]) {
        let rules = acl_rules(password, without);
        let mut args = vec!["ACL", "SETUSER", user];
        args.extend(rules.iter().map(String::as_str));
        let reply = self.command(&args);
        assert_eq!(reply, Resp::Simple("OK".into()), "ACL SETUSER {rules:?}");
    }

    /// The master's ACL log (denied commands, keys, channels, failed AUTHs), one entry each.
    pub fn acl_log(&self) -> Vec<String> {
        match self.command(&["ACL", "LOG"]) {
            Resp::Array(entries) => entries.iter().map(|e| format!("{e:?}")).collect(),
            other => panic!("ACL LOG answered {other:?}"),
        }
    }

    /// The user of every client connected now to the TLS port, where redlease connects. The
    /// tests' own connections (this one, and an earlier one whose close the server may not have
    /// seen yet) use the plain port as `default`.
    pub fn client_users(&self) -> Vec<String> {
        let list = self.command(&["CLIENT", "LIST"]).bulk().unwrap_or_default();
        let on_tls_port = format!(":{} ", self.tls_port());
        let users = list.lines().filter(|line| {
            line.split(' ')
                .find_map(|f| f.strip_prefix("laddr="))
                .is_some_and(|laddr| format!("{laddr} ").ends_with(&on_tls_port))
        });
        let user = |line: &str| {
            line.split(' ')
                .find_map(|f| f.strip_prefix("user="))
                .map(String::from)
        };
        users.filter_map(user).collect()
    }
}
