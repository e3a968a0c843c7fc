//! A PKCS#12 trust store for Java, written from certificates: what the JDK reads as its
//! `cacerts` (its trust store) without `keytool`, which the host may not have.
//!
//! The store holds only certificates, each in a certificate bag of an unencrypted
//! `SafeContents`, with no integrity MAC and no password: nothing in it is secret, and a
//! store without password or MAC loads whatever `javax.net.ssl.trustStorePassword` says
//! (unset, empty or `changeit`). The JDK takes a certificate without a key as a trusted
//! entry only when its bag carries Oracle's trusted-key-usage attribute
//! (`2.16.840.1.113894.746875.1.1`, here `anyExtendedKeyUsage`), as `keytool -importcert`
//! writes it; each bag also has a `friendlyName`, the alias (`capsule-0`, `capsule-1`...).
//! DER is written with `yasna` (already a dependency of `rcgen`).

use yasna::models::ObjectIdentifier;
use yasna::Tag;

const DATA: &[u64] = &[1, 2, 840, 113549, 1, 7, 1];
const CERT_BAG: &[u64] = &[1, 2, 840, 113549, 1, 12, 10, 1, 3];
const X509_CERTIFICATE: &[u64] = &[1, 2, 840, 113549, 1, 9, 22, 1];
const FRIENDLY_NAME: &[u64] = &[1, 2, 840, 113549, 1, 9, 20];
const ORACLE_TRUSTED_KEY_USAGE: &[u64] = &[2, 16, 840, 1, 113894, 746875, 1, 1];
const ANY_EXTENDED_KEY_USAGE: &[u64] = &[2, 5, 29, 37, 0];

fn oid(arcs: &[u64]) -> ObjectIdentifier {
    ObjectIdentifier::from_slice(arcs)
}

/// A PKCS#12 store (DER) trusting each of `certs` (DER X.509 certificates).
pub fn trust_store<C: AsRef<[u8]>>(certs: &[C]) -> Vec<u8> {
    let safe_contents = yasna::construct_der(|w| {
        w.write_sequence_of(|w| {
            for (i, cert) in certs.iter().enumerate() {
                w.next().write_sequence(|w| {
                    w.next().write_oid(&oid(CERT_BAG));
                    w.next().write_tagged(Tag::context(0), |w| {
                        w.write_sequence(|w| {
                            w.next().write_oid(&oid(X509_CERTIFICATE));
                            w.next()
                                .write_tagged(Tag::context(0), |w| w.write_bytes(cert.as_ref()));
                        })
                    });
                    w.next().write_set_of(|w| {
                        w.next().write_sequence(|w| {
                            w.next().write_oid(&oid(FRIENDLY_NAME));
                            w.next().write_set_of(|w| {
                                w.next().write_bmp_string(&format!("capsule-{i}"))
                            });
                        });
                        w.next().write_sequence(|w| {
                            w.next().write_oid(&oid(ORACLE_TRUSTED_KEY_USAGE));
                            w.next()
                                .write_set_of(|w| w.next().write_oid(&oid(ANY_EXTENDED_KEY_USAGE)));
                        });
                    });
                });
            }
        })
    });
    let data_info = |w: yasna::DERWriter, content: &[u8]| {
        w.write_sequence(|w| {
            w.next().write_oid(&oid(DATA));
            w.next()
                .write_tagged(Tag::context(0), |w| w.write_bytes(content));
        })
    };
    let auth_safe = yasna::construct_der(|w| {
        w.write_sequence_of(|w| data_info(w.next(), &safe_contents));
    });
    yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_u8(3);
            data_info(w.next(), &auth_safe);
        })
    })
}

/// The certificates (DER) of a PEM text; what does not parse is skipped.
pub fn pem_certs(pem: &str) -> Vec<Vec<u8>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .map(|c| c.to_vec())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store read back: its version, and for each bag the certificate, the alias and
    /// the trusted-usage attribute.
    fn read_back(der: &[u8]) -> Vec<(Vec<u8>, String, bool)> {
        let auth_safe = yasna::parse_der(der, |r| {
            r.read_sequence(|r| {
                assert_eq!(r.next().read_u8()?, 3);
                let content = read_data(r.next())?;
                Ok(content)
            })
        })
        .unwrap();
        let safe = yasna::parse_der(&auth_safe, |r| {
            r.collect_sequence_of(|r| read_data(r))
                .map(|mut v| v.remove(0))
        })
        .unwrap();
        yasna::parse_der(&safe, |r| {
            r.collect_sequence_of(|r| {
                r.read_sequence(|r| {
                    assert_eq!(r.next().read_oid()?, oid(CERT_BAG));
                    let cert = r.next().read_tagged(Tag::context(0), |r| {
                        r.read_sequence(|r| {
                            assert_eq!(r.next().read_oid()?, oid(X509_CERTIFICATE));
                            r.next().read_tagged(Tag::context(0), |r| r.read_bytes())
                        })
                    })?;
                    let mut alias = String::new();
                    let mut trusted = false;
                    r.next().read_set_of(|r| {
                        r.read_sequence(|r| {
                            let id = r.next().read_oid()?;
                            if id == oid(FRIENDLY_NAME) {
                                r.next().read_set_of(|r| {
                                    alias = r.read_bmp_string()?;
                                    Ok(())
                                })
                            } else {
                                r.next().read_set_of(|r| {
                                    trusted = id == oid(ORACLE_TRUSTED_KEY_USAGE)
                                        && r.read_oid()? == oid(ANY_EXTENDED_KEY_USAGE);
                                    Ok(())
                                })
                            }
                        })
                    })?;
                    Ok((cert, alias, trusted))
                })
            })
        })
        .unwrap()
    }

    fn read_data(r: yasna::BERReader) -> yasna::ASN1Result<Vec<u8>> {
        r.read_sequence(|r| {
            assert_eq!(r.next().read_oid()?, oid(DATA));
            r.next().read_tagged(Tag::context(0), |r| r.read_bytes())
        })
    }

    #[test]
    fn every_certificate_is_a_trusted_entry() {
        let a = rcgen::generate_simple_self_signed(vec!["a.test".into()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b.test".into()]).unwrap();
        let pem = format!("{}junk\n{}", a.cert.pem(), b.cert.pem());
        let certs = pem_certs(&pem);
        assert_eq!(certs.len(), 2);
        let got = read_back(&trust_store(&certs));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, a.cert.der().to_vec());
        assert_eq!(got[1].0, b.cert.der().to_vec());
        assert_eq!(got[0].1, "capsule-0");
        assert_eq!(got[1].1, "capsule-1");
        assert!(got.iter().all(|g| g.2));
        // an empty store is still a store
        assert!(read_back(&trust_store::<Vec<u8>>(&[])).is_empty());
    }
}
