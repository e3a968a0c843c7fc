//! TLS for the hosts secrets are for: the capsule's own certificate authority, the
//! certificates the proxy shows the sandbox for exactly those hosts, the trust file the
//! sandbox gets, and the verification of the real upstream server.
//!
//! - The CA ([`Ca::load_or_create`]) is per capsule: its key (with its certificate) is
//!   `proxy-ca.key` (mode 0600), its certificate alone `proxy-ca.pem`, in the bundle
//!   directory, outside every sandbox. The key never enters the sandbox; its certificate does, in the trust file.
//! - [`Ca::server_config`] makes (once per host and exec) a leaf certificate for one host
//!   name or address, signed by the CA, offering only HTTP/1.1 by ALPN.
//! - what the sandbox trusts (the system's roots and this CA) is written by
//!   [`super::trust`];
//! - [`upstream_config`]: the real server's certificate is verified against the system's
//!   roots, read from the system's store (`rustls-native-certs`: the operator's
//!   distribution and corporate roots, as the host's own tools trust them; a compiled-in
//!   list such as `webpki-roots` would ignore both). `CAPSULE_PROXY_TEST_UPSTREAM_CA=PATH`
//!   (a PEM file) adds roots: **for tests only**, like the resolver override.

use super::allowlist::Host;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The CA's key in the bundle directory.
pub const CA_KEY: &str = "proxy-ca.key";
/// The CA's certificate in the bundle directory.
pub const CA_CERT: &str = "proxy-ca.pem";
/// Test-only extra upstream roots (a PEM file).
pub const TEST_UPSTREAM_CA_ENV: &str = "CAPSULE_PROXY_TEST_UPSTREAM_CA";

/// ALPN offered on terminated connections (the proxy reads HTTP/1.x only).
pub const ALPN: &[u8] = b"http/1.1";

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{what} {}: {err}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        err: std::io::Error,
    },
    #[error("certificate authority: {0}")]
    Ca(String),
    #[error("no system CA bundle found (looked for {0})")]
    NoSystemBundle(String),
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "capsule secrets proxy CA");
    dn.push(DnType::OrganizationName, "capsule");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p.not_before = rcgen::date_time_ymd(2025, 1, 1);
    p.not_after = rcgen::date_time_ymd(2045, 1, 1);
    p
}

/// The capsule's certificate authority.
pub struct Ca {
    key: KeyPair,
    cert: rcgen::Certificate,
    /// The certificate as written in the bundle (what the sandbox trusts).
    pem: String,
    leaves: Mutex<HashMap<Host, Arc<rustls::ServerConfig>>>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ca { .. }")
    }
}

/// Read a small file without following a symlink.
fn read_nofollow(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let mut s = String::new();
    Read::by_ref(&mut f)
        .take(64 * 1024)
        .read_to_string(&mut s)?;
    Ok(s)
}

/// Write `data` to `dir/name` through a new temporary file (mode `mode`) renamed over it.
pub(super) fn write_replace(
    dir: &Path,
    name: &str,
    data: &[u8],
    mode: u32,
) -> Result<PathBuf, TlsError> {
    let path = dir.join(name);
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{seq}", std::process::id()));
    let io = |what, err| TlsError::Io {
        what,
        path: path.clone(),
        err,
    };
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(|e| io("cannot write", e))?;
    f.write_all(data).map_err(|e| io("cannot write", e))?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("cannot write", e)
    })?;
    Ok(path)
}

impl Ca {
    /// The CA of the capsule whose bundle is `bundle_dir`: made on first use, then read.
    /// The key and its certificate are kept together in [`CA_KEY`] (mode 0600), made
    /// under a temporary name and linked into place only if none is there yet, so two
    /// execs starting at once agree on one CA; [`CA_CERT`] is the certificate alone, for
    /// tools (written again when missing or different).
    pub fn load_or_create(bundle_dir: &Path) -> Result<Ca, TlsError> {
        let key_path = bundle_dir.join(CA_KEY);
        let ca = |e: rcgen::Error| TlsError::Ca(e.to_string());
        let io = |what, err| TlsError::Io {
            what,
            path: key_path.clone(),
            err,
        };
        let text = match read_nofollow(&key_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = KeyPair::generate().map_err(ca)?;
                let cert = ca_params().self_signed(&key).map_err(ca)?;
                let text = format!("{}{}", key.serialize_pem(), cert.pem());
                static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let tmp = bundle_dir.join(format!(".{CA_KEY}.new.{}.{seq}", std::process::id()));
                let _ = std::fs::remove_file(&tmp);
                let written = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&tmp)
                    .and_then(|mut f| f.write_all(text.as_bytes()));
                let linked = written.and_then(|_| std::fs::hard_link(&tmp, &key_path));
                let _ = std::fs::remove_file(&tmp);
                match linked {
                    // ours, or another exec's made first: the one in place counts
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io("cannot write", e)),
                }
                read_nofollow(&key_path).map_err(|e| io("cannot read", e))?
            }
            Err(e) => return Err(io("cannot read", e)),
        };
        let split = text
            .find("-----BEGIN CERTIFICATE-----")
            .ok_or_else(|| TlsError::Ca(format!("{}: no certificate in it", key_path.display())))?;
        let (key_pem, pem) = text.split_at(split);
        let key = KeyPair::from_pem(key_pem).map_err(ca)?;
        if read_nofollow(&bundle_dir.join(CA_CERT)).ok().as_deref() != Some(pem) {
            write_replace(bundle_dir, CA_CERT, pem.as_bytes(), 0o644)?;
        }
        // the issuer as leaves name it: the same subject and key as the stored certificate
        let cert = ca_params().self_signed(&key).map_err(ca)?;
        Ok(Ca {
            key,
            cert,
            pem: pem.to_string(),
            leaves: Mutex::default(),
        })
    }

    /// The CA certificate (PEM) the sandbox trusts.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The TLS server configuration shown to the sandbox for `host`: a certificate for
    /// exactly that name or address, HTTP/1.1 only.
    pub fn server_config(&self, host: &Host) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut leaves = match self.leaves.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        if let Some(c) = leaves.get(host) {
            return Ok(c.clone());
        }
        let ca = |e: rcgen::Error| TlsError::Ca(e.to_string());
        let mut p = CertificateParams::default();
        p.subject_alt_names = vec![match host {
            Host::Ip(ip) => SanType::IpAddress(*ip),
            Host::Name(n) => SanType::DnsName(n.clone().try_into().map_err(ca)?),
        }];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host.to_string());
        p.distinguished_name = dn;
        p.use_authority_key_identifier_extension = true;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        p.not_before = rcgen::date_time_ymd(2025, 1, 1);
        p.not_after = rcgen::date_time_ymd(2035, 1, 1);
        let key = KeyPair::generate().map_err(ca)?;
        let leaf = p.signed_by(&key, &self.cert, &self.key).map_err(ca)?;
        let chain = vec![leaf.der().clone(), self.cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        let cfg = Arc::new(cfg);
        leaves.insert(host.clone(), cfg.clone());
        Ok(cfg)
    }
}

/// The TLS client configuration for real servers: the system's roots (plus the test-only
/// roots of [`TEST_UPSTREAM_CA_ENV`]), HTTP/1.1 by ALPN.
pub fn upstream_config() -> Result<Arc<rustls::ClientConfig>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!("system roots: {e}");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!("system roots: {added} added, {ignored} ignored");
    if let Some(pem) = test_roots()? {
        let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Ca(format!("{TEST_UPSTREAM_CA_ENV}: {e}")))?;
        roots.add_parsable_certificates(certs);
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(cfg))
}

/// The test-only roots of [`TEST_UPSTREAM_CA_ENV`] (a PEM file), when set: the proxy
/// trusts them upstream, and the sandbox's trust file holds them, as it holds the system's
/// roots (they stand for real roots in tests).
pub fn test_roots() -> Result<Option<String>, TlsError> {
    let Some(p) = std::env::var_os(TEST_UPSTREAM_CA_ENV) else {
        return Ok(None);
    };
    let p = PathBuf::from(p);
    read_nofollow(&p).map(Some).map_err(|err| TlsError::Io {
        what: "cannot read the test roots of CAPSULE_PROXY_TEST_UPSTREAM_CA",
        path: p,
        err,
    })
}

/// The name the upstream certificate must carry for `host`.
pub fn server_name(host: &Host) -> Result<rustls::pki_types::ServerName<'static>, String> {
    match host {
        Host::Ip(ip) => Ok(rustls::pki_types::ServerName::IpAddress((*ip).into())),
        Host::Name(n) => {
            rustls::pki_types::ServerName::try_from(n.clone()).map_err(|e| format!("{n}: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn ca_is_made_once_key_private() {
        let d = tempfile::tempdir().unwrap();
        let a = Ca::load_or_create(d.path()).unwrap();
        let mode = std::fs::metadata(d.path().join(CA_KEY))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = Ca::load_or_create(d.path()).unwrap();
        assert_eq!(a.pem(), b.pem());
        // a leaf per host, cached
        let h = Host::parse("api.test").unwrap();
        let c1 = b.server_config(&h).unwrap();
        let c2 = b.server_config(&h).unwrap();
        assert!(Arc::ptr_eq(&c1, &c2));
        assert_eq!(c1.alpn_protocols, vec![b"http/1.1".to_vec()]);
        b.server_config(&Host::parse("127.0.0.1").unwrap()).unwrap();
    }

    #[test]
    fn refuses_a_symlinked_key() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = d.path().join("elsewhere");
        std::os::unix::fs::symlink(&elsewhere, d.path().join(CA_KEY)).unwrap();
        // the symlink is neither read nor written through
        assert!(Ca::load_or_create(d.path()).is_err());
        assert!(!elsewhere.exists());
    }

    #[test]
    fn execs_starting_at_once_agree_on_one_ca() {
        let d = tempfile::tempdir().unwrap();
        let pems: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| Ca::load_or_create(d.path()).unwrap().pem().to_string()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(pems.iter().all(|p| p == &pems[0]));
        let stored = std::fs::read_to_string(d.path().join(CA_CERT)).unwrap();
        assert_eq!(stored, pems[0]);
    }
}
