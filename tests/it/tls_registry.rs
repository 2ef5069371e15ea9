//! A fixture: Debian's `docker-registry` over HTTPS on 127.0.0.1 with
//! htpasswd auth, its certificate issued by a CA this fixture makes with
//! `openssl` (EC P-256 keys, in a folder of its own). [`TlsRegistry::start`]
//! gives a good certificate; [`TlsRegistry::start_with`] an expired one or
//! one for another name. The address, the CA file and the credentials are
//! fields, and [`TlsRegistry::certs_dir`] lays the CA out as
//! `/etc/docker/certs.d` does (`HOST:PORT/ca.crt`).
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::build::LocalRegistry;
use crate::common::texts;

/// The user the registry lets in.
pub const TLS_USER: &str = "tls-user";
/// Their password.
pub const TLS_PASSWORD: &str = "tls-s3cret-pw";

/// What the registry's certificate is like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cert {
    /// Valid for two days, for `IP:127.0.0.1`.
    Good,
    /// For `IP:127.0.0.1`, valid only on 1-2 January 2020.
    Expired,
    /// Valid, but for `DNS:registry.invalid` only.
    OtherName,
}

/// A running HTTPS registry, stopped (and its files removed) when dropped.
pub struct TlsRegistry {
    /// The registry underneath (its port; its `get` speaks plain HTTP, so
    /// not to this one).
    pub registry: LocalRegistry,
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// The PEM file of the CA that issued its certificate.
    pub ca: PathBuf,
    /// The user and password it lets in.
    pub credentials: (String, String),
    dir: tempfile::TempDir,
}

/// Runs `openssl ARGS` in `dir`; panics with its stderr on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (scripts/setup.sh installs it with ca-certificates)");
    let (_, stderr) = texts(&out);
    assert!(out.status.success(), "openssl {args:?}: {stderr}");
}

/// Makes `prefix.crt` (a CA, `CN=imgctl test CA prefix`) and `prefix.key` in `dir`.
pub fn make_ca(dir: &Path, prefix: &str) -> PathBuf {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{prefix}.key"),
            "-out",
            &format!("{prefix}.crt"),
            "-days",
            "2",
            "-subj",
            &format!("/CN=imgctl test CA {prefix}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    dir.join(format!("{prefix}.crt"))
}

/// Issues `server.crt`/`server.key` in `dir` from the CA `ca` (`ca.crt`,
/// `ca.key`), as `cert` says, with `openssl ca` (the one that takes
/// arbitrary dates).
fn issue(dir: &Path, cert: Cert) {
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=imgctl test registry",
        ],
    );
    let san = match cert {
        Cert::OtherName => "DNS:registry.invalid",
        Cert::Good | Cert::Expired => "IP:127.0.0.1",
    };
    std::fs::write(
        dir.join("ext.cnf"),
        format!("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName={san}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("ca.cnf"),
        "[ca]\ndefault_ca = c\n[c]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\ndefault_md = sha256\npolicy = p\nunique_subject = no\n[p]\ncommonName = supplied\n",
    )
    .unwrap();
    std::fs::write(dir.join("index.txt"), "").unwrap();
    std::fs::write(dir.join("serial"), "1000\n").unwrap();
    let mut args = vec![
        "ca",
        "-batch",
        "-notext",
        "-config",
        "ca.cnf",
        "-cert",
        "ca.crt",
        "-keyfile",
        "ca.key",
        "-in",
        "server.csr",
        "-out",
        "server.crt",
        "-extfile",
        "ext.cnf",
    ];
    match cert {
        Cert::Expired => args.extend([
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200102000000Z",
        ]),
        Cert::Good | Cert::OtherName => args.extend(["-days", "2"]),
    }
    openssl(dir, &args);
}

impl TlsRegistry {
    /// Starts one with a good certificate.
    pub fn start() -> Self {
        Self::start_with(Cert::Good)
    }

    /// Starts one whose certificate is as `cert` says.
    pub fn start_with(cert: Cert) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = make_ca(dir.path(), "ca");
        issue(dir.path(), cert);
        let tls = format!(
            "  tls:\n    certificate: {d}/server.crt\n    key: {d}/server.key\n",
            d = dir.path().display()
        );
        let registry = LocalRegistry::start_with(TLS_USER, TLS_PASSWORD, &tls);
        TlsRegistry {
            address: format!("127.0.0.1:{}", registry.port),
            registry,
            ca,
            credentials: (TLS_USER.to_string(), TLS_PASSWORD.to_string()),
            dir,
        }
    }

    /// A folder laid out as `/etc/docker/certs.d`, with the registry's CA as
    /// `HOST:PORT/ca.crt` (for `IMGCTL_REGISTRY_CERTS_DIR`, or skopeo's
    /// `--cert-dir` with `HOST:PORT` appended).
    pub fn certs_dir(&self) -> PathBuf {
        let root = self.dir.path().join("certs.d");
        let own = root.join(&self.address);
        std::fs::create_dir_all(&own).unwrap();
        std::fs::copy(&self.ca, own.join("ca.crt")).unwrap();
        root
    }

    /// A docker config folder (`dir/config.json`) that logs in to it.
    pub fn docker_config(&self, dir: &Path) {
        self.registry
            .write_docker_config(dir, &self.credentials.0, &self.credentials.1);
    }
}
