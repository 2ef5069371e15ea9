//! Which CAs a registry's HTTPS certificate is checked against, found the
//! way the docker CLI and dockerd find them: every `*.crt` file in
//! `/etc/docker/certs.d/HOST:PORT/` (`IMGCTL_REGISTRY_CERTS_DIR` names
//! another folder), plus one file the caller names. The system's CAs are
//! trusted beside them, except for a loopback registry, which is spoken to
//! over HTTPS only when it has a CA of its own (plain HTTP otherwise, as
//! dockerd treats loopback registries as insecure). Verification is never
//! skipped. It also turns a refused certificate (an unknown CA, an expired
//! certificate, another name) into one line naming the registry and the
//! fix.
//!
//! Part: the build wing (`docs/architecture.md`).
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
use rustls::{CertificateError, RootCertStore};

/// Where the docker CLI and dockerd look for a registry's CA:
/// `CERTS_DIR/HOST:PORT/*.crt` (docs.docker.com, "Verify repository
/// client with certificates").
pub const CERTS_DIR: &str = "/etc/docker/certs.d";

/// The certs.d folder in use: `IMGCTL_REGISTRY_CERTS_DIR` when set and
/// not empty, else [`CERTS_DIR`].
pub fn certs_dir() -> PathBuf {
    std::env::var_os(crate::env_vars::IMGCTL_REGISTRY_CERTS_DIR)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(CERTS_DIR), PathBuf::from)
}

/// The CAs one registry is checked against, besides the system's.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// The files they came from, in the order read.
    pub files: Vec<PathBuf>,
    /// Each certificate and the file it came from.
    certs: Vec<(CertificateDer<'static>, PathBuf)>,
    /// The caller's file, if any, and the flag that named it (for errors).
    extra: Option<(PathBuf, Option<&'static str>)>,
}

impl Trust {
    /// Reads the CAs of `registry` (`HOST:PORT` as docker names it):
    /// `certs_dir()/registry/*.crt` in name order, then `extra` (named by
    /// `flag` in errors, when given). A file that cannot be read or holds
    /// no PEM certificate is an error naming it.
    pub fn load(
        registry: &str,
        extra: Option<&Path>,
        flag: Option<&'static str>,
    ) -> anyhow::Result<Trust> {
        let dir = certs_dir().join(registry);
        let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "crt"))
                .collect(),
            Err(_) => Vec::new(),
        };
        files.sort();
        let mut trust = Trust {
            extra: extra.map(|p| (p.to_path_buf(), flag)),
            ..Trust::default()
        };
        files.extend(extra.map(Path::to_path_buf));
        for file in files {
            let named = match (&trust.extra, flag) {
                (Some((p, _)), Some(f)) if *p == file => format!("{f} {}", file.display()),
                _ => format!("the CA file {}", file.display()),
            };
            let certs =
                read_ca_file(&file).map_err(|e| anyhow!("{named} for registry {registry} {e}"))?;
            trust
                .certs
                .extend(certs.into_iter().map(|c| (c, file.clone())));
            trust.files.push(file);
        }
        Ok(trust)
    }

    /// Whether any CA of the registry's own was found.
    pub fn has_own(&self) -> bool {
        !self.certs.is_empty()
    }

    /// The HTTPS connector for the registry: its own CAs, and the
    /// system's unless `loopback`.
    pub fn connector(&self, loopback: bool) -> anyhow::Result<HttpsConnector<HttpConnector>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        if !loopback {
            // As hyper-rustls's native roots: the ones that parse.
            let native = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(native.certs);
            if added == 0 && !self.has_own() {
                bail!("no CA certificates found on the system (install ca-certificates)");
            }
        }
        for (cert, file) in &self.certs {
            roots.add(cert.clone()).map_err(|e| {
                anyhow!(
                    "the CA file {} is not a CA certificate: {e}",
                    file.display()
                )
            })?;
        }
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http()
            .enable_http1()
            .build())
    }

    /// Where the registry's CA goes, in words: the certs.d file, or the
    /// caller's flag.
    pub fn fix(&self, registry: &str) -> String {
        let file = certs_dir().join(registry).join("ca.crt");
        match self.extra.as_ref().and_then(|(_, f)| *f) {
            Some(flag) => format!(
                "put the registry's CA certificate in {} or pass it with {flag} FILE",
                file.display()
            ),
            None => format!("put the registry's CA certificate in {}", file.display()),
        }
    }

    /// What the certificate was checked against, in words.
    fn checked_against(&self, registry: &str, loopback: bool) -> String {
        let files = self
            .files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        match (files.is_empty(), loopback) {
            (true, _) => format!(
                "no CA in {} and the system's CAs",
                certs_dir().join(registry).display()
            ),
            (false, true) => format!("checked against {files}"),
            (false, false) => format!("checked against {files} and the system's CAs"),
        }
    }

    /// The one line for a refused certificate of `registry`, when `error`
    /// (a connection's error and its sources) is one; `None` otherwise.
    pub fn explain(
        &self,
        registry: &str,
        loopback: bool,
        error: &(dyn std::error::Error + 'static),
    ) -> Option<String> {
        let refused = certificate_error(error)?;
        let detail = refused.to_string();
        Some(match refused {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => format!(
                "registry {registry} presented an expired certificate ({detail}); renew the registry's certificate (no CA can make an expired one valid)"
            ),
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => format!(
                "registry {registry} presented a certificate that is not valid yet ({detail}); check this host's clock and the certificate's dates"
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => format!(
                "registry {registry} presented a certificate for another name ({detail}); reach the registry by a name its certificate holds, or reissue it with {} in its subjectAltName",
                host_of(registry)
            ),
            CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                "registry {registry} presented a certificate that no trusted CA signed ({detail}; {}); {}",
                self.checked_against(registry, loopback),
                self.fix(registry)
            ),
            _ => format!(
                "registry {registry} presented a certificate that was refused ({detail}; {}); {}",
                self.checked_against(registry, loopback),
                self.fix(registry)
            ),
        })
    }
}

/// The certificates of the PEM file `path`; an error (worded to follow
/// the file's name) when it cannot be read, is not PEM or holds none.
pub fn read_ca_file(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    // A regular file of at most 1 MiB (a CA bundle is a few hundred KiB):
    // `--registry-ca /dev/zero` or a certs.d link to it grew to 21 GB (#50 M8).
    let pem = crate::sys::fs::read_regular(path, 1024 * 1024)
        .map_err(|e| anyhow!("cannot be read: {e}"))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("is not PEM: {e}"))?;
    if certs.is_empty() {
        bail!("holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
    Ok(certs)
}

/// `HOST` of `HOST:PORT` (`[v6]:port` → `v6`).
fn host_of(registry: &str) -> &str {
    if let Some(rest) = registry.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match registry.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            host
        }
        _ => registry,
    }
}

/// The certificate error in `error`'s chain (rustls's, as tokio-rustls and
/// hyper-rustls wrap it in `io::Error`s, whose `source` skips the error
/// they wrap), if any.
fn certificate_error(error: &(dyn std::error::Error + 'static)) -> Option<CertificateError> {
    if let Some(rustls::Error::InvalidCertificate(c)) = error.downcast_ref::<rustls::Error>() {
        return Some(c.clone());
    }
    let wrapped = error
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .and_then(|inner| certificate_error(inner));
    wrapped.or_else(|| error.source().and_then(certificate_error))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_ca_file_that_is_a_device_is_refused_not_read_without_end() {
        // #50 M8: `--registry-ca /dev/zero` grew to 21.6 GB.
        let e = read_ca_file(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    use super::*;

    #[test]
    fn hosts_of_registries() {
        assert_eq!(host_of("127.0.0.1:5000"), "127.0.0.1");
        assert_eq!(host_of("reg.example"), "reg.example");
        assert_eq!(host_of("[::1]:5000"), "::1");
    }

    #[test]
    fn a_refused_certificate_is_found_inside_an_io_error() {
        let io = std::io::Error::other(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ));
        let t = Trust::default();
        let line = t.explain("127.0.0.1:5000", true, &io).unwrap();
        assert!(
            line.starts_with(
                "registry 127.0.0.1:5000 presented a certificate that no trusted CA signed"
            ),
            "{line}"
        );
        assert!(!line.contains('\n'));
        let other = std::io::Error::other("connection refused");
        assert!(t.explain("127.0.0.1:5000", true, &other).is_none());
    }

    #[test]
    fn a_file_without_a_certificate_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ca.pem");
        std::fs::write(&f, "not a certificate\n").unwrap();
        let e = Trust::load("127.0.0.1:1", Some(&f), Some("--registry-ca"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "--registry-ca {} for registry 127.0.0.1:1 holds no PEM certificate",
                f.display()
            )),
            "{e}"
        );
        let missing = dir.path().join("absent.crt");
        let e = Trust::load("127.0.0.1:1", Some(&missing), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be read"), "{e}");
    }
}
