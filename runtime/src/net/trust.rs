//! What the sandbox trusts when the proxy terminates TLS (a secret's hosts): the system's
//! roots plus the capsule's CA ([`super::tls::Ca`]), written into the bundle as a PEM
//! bundle ([`TRUST_FILE`]) and a Java trust store ([`JAVA_TRUST_FILE`], PKCS#12 made by
//! [`super::pkcs12`]); the exec binds them read-only over the system's own files inside
//! ([`SYSTEM_TRUST_FILES`], [`JAVA_TRUST_FILES`]) and points the variables tools read
//! ([`TRUST_ENV`]) at the first.
//!
//! In tests, the roots of `CAPSULE_PROXY_TEST_UPSTREAM_CA` join the system's here too:
//! they stand for the real roots a real server's certificate chains to, so a client inside
//! verifies a test server whose TLS the proxy only tunnels the way it verifies a real one.

use super::tls::{Ca, TlsError};
use std::path::{Path, PathBuf};

/// The sandbox's trust file (PEM) in the bundle directory.
pub const TRUST_FILE: &str = "proxy-trust.pem";
/// The same certificates as a Java trust store (PKCS#12), in the bundle directory.
pub const JAVA_TRUST_FILE: &str = "proxy-trust.p12";

/// Where systems keep their CA bundle; each that exists as a regular file is covered by
/// the trust file inside.
pub const SYSTEM_TRUST_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Where distributions keep the JDK's trust store (`cacerts`; the JDKs they package link
/// `lib/security/cacerts` there); each that exists as a regular file is covered by the
/// Java trust store inside.
pub const JAVA_TRUST_FILES: &[&str] = &[
    "/etc/ssl/certs/java/cacerts",
    "/etc/pki/ca-trust/extracted/java/cacerts",
    "/var/lib/ca-certificates/java-cacerts",
];

/// Variables naming the trust file, for the tools that read one: OpenSSL and Go
/// (`SSL_CERT_FILE`), Node (`NODE_EXTRA_CA_CERTS`), Python's requests and pip, curl, git,
/// cargo, Deno, the AWS tools, Nix, gRPC.
pub const TRUST_ENV: &[&str] = &[
    "SSL_CERT_FILE",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "DENO_CERT",
    "AWS_CA_BUNDLE",
    "NIX_SSL_CERT_FILE",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
];

/// The trust files of one exec, on the host.
#[derive(Debug, Clone)]
pub struct TrustFiles {
    /// The PEM bundle.
    pub pem: PathBuf,
    /// The Java trust store.
    pub java: PathBuf,
}

/// The system's CA bundle: the first of [`SYSTEM_TRUST_FILES`] that is a regular file.
fn system_bundle() -> Option<(PathBuf, String)> {
    SYSTEM_TRUST_FILES.iter().find_map(|p| {
        let md = std::fs::symlink_metadata(p).ok()?;
        if !md.is_file() {
            return None;
        }
        let s = std::fs::read_to_string(p).ok()?;
        Some((PathBuf::from(p), s))
    })
}

/// The regular files among `paths` here (what is covered inside).
fn existing(paths: &[&str]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .map(PathBuf::from)
        .collect()
}

/// The system trust files to cover inside (those that are regular files here).
pub fn system_trust_paths() -> Vec<PathBuf> {
    existing(SYSTEM_TRUST_FILES)
}

/// The JDK trust stores to cover inside (those that are regular files here).
pub fn java_trust_paths() -> Vec<PathBuf> {
    existing(JAVA_TRUST_FILES)
}

/// Write the sandbox's trust files into `bundle_dir`: the system bundle, then `test_roots`
/// (tests only, see the module docs), then the capsule's CA (`ca`, when the proxy
/// terminates TLS); as PEM and as a Java trust store.
pub fn write(
    bundle_dir: &Path,
    ca: Option<&Ca>,
    test_roots: Option<&str>,
) -> Result<TrustFiles, TlsError> {
    let (_, mut text) =
        system_bundle().ok_or_else(|| TlsError::NoSystemBundle(SYSTEM_TRUST_FILES.join(", ")))?;
    for (what, pem) in [
        ("test roots (CAPSULE_PROXY_TEST_UPSTREAM_CA)", test_roots),
        ("this capsule's secrets proxy CA", ca.map(Ca::pem)),
    ] {
        let Some(pem) = pem else { continue };
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("# capsule: {what}\n"));
        text.push_str(pem);
    }
    let java = super::pkcs12::trust_store(&super::pkcs12::pem_certs(&text));
    Ok(TrustFiles {
        pem: super::tls::write_replace(bundle_dir, TRUST_FILE, text.as_bytes(), 0o644)?,
        java: super::tls::write_replace(bundle_dir, JAVA_TRUST_FILE, &java, 0o644)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_the_system_roots_the_test_roots_and_the_ca() {
        if system_bundle().is_none() {
            return eprintln!("SKIPPED: no system CA bundle here");
        }
        let d = tempfile::tempdir().unwrap();
        let ca = Ca::load_or_create(d.path()).unwrap();
        let extra = rcgen::generate_simple_self_signed(vec!["x.test".into()]).unwrap();
        let t = write(d.path(), Some(&ca), Some(&extra.cert.pem())).unwrap();
        let pem = std::fs::read_to_string(&t.pem).unwrap();
        assert!(pem.ends_with(ca.pem()));
        assert!(pem.contains(&extra.cert.pem()));
        let system = system_bundle().unwrap().1;
        assert!(pem.starts_with(&system));
        let n = super::super::pkcs12::pem_certs(&pem).len();
        assert!(n > 2);
        let java = std::fs::read(&t.java).unwrap();
        assert_eq!(
            java,
            super::super::pkcs12::trust_store(&super::super::pkcs12::pem_certs(&pem))
        );
        // without a CA (no secret: only the test roots)
        let t = write(d.path(), None, Some(&extra.cert.pem())).unwrap();
        let pem = std::fs::read_to_string(&t.pem).unwrap();
        assert!(!pem.contains(ca.pem()) && pem.contains(&extra.cert.pem()));
    }
}
