//! A throwaway certificate authority and a server certificate for
//! 127.0.0.1/localhost, made with the `openssl` command, for TLS tests.

use std::path::{Path, PathBuf};
use std::process::Command;

/// PEM files in a directory of their own.
pub struct TestCerts {
    pub dir: tempfile::TempDir,
}

impl TestCerts {
    /// Generates a CA and a server certificate signed by it.
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let run = |args: &[&str]| {
            let out =
                Command::new("openssl").args(args).current_dir(d).output().expect("openssl runs (is it installed?)");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(&["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2"]
            .into_iter()
            .chain(["-subj", "/CN=ferry test CA"])
            .collect::<Vec<_>>());
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ]);
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )
        .expect("extensions");
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]);
        // The brokers run as other users in some setups: let them read.
        for f in ["ca.crt", "server.crt", "server.key"] {
            let _ = Command::new("chmod").arg("644").arg(d.join(f)).status();
        }
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn ca(&self) -> PathBuf {
        self.path("ca.crt")
    }

    pub fn server_cert(&self) -> PathBuf {
        self.path("server.crt")
    }

    pub fn server_key(&self) -> PathBuf {
        self.path("server.key")
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
