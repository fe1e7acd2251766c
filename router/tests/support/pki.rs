//! A throw-away PKI for tests: a CA, certificates it signs (common name, DNS names), and a profile directory with
//! the file names upstream's controller mounts for skrouterd's `sslProfile` (`ca.crt`, `tls.crt`, `tls.key`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

pub struct Ca {
    pub cert: rcgen::Certificate,
    pub key: KeyPair,
    pub pem: String,
}

pub fn ca(name: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let cert = p.self_signed(&key).unwrap();
    let pem = cert.pem();
    Ca { cert, key, pem }
}

/// A certificate with common name `cn` signed by `ca`: (certificate PEM, key PEM).
pub fn leaf(ca: &Ca, cn: &str, dns: &[&str]) -> (String, String) {
    let mut p = CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca.cert, &ca.key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// The files of one profile, as upstream names them.
pub struct Profile {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Writes `dir/name/{ca.crt,tls.crt,tls.key}`: trust in `ca_pem`, the holder's certificate and key.
pub fn write_profile(dir: &Path, name: &str, ca_pem: &str, leaf: &(String, String)) -> Profile {
    let base = dir.join(name);
    std::fs::create_dir_all(&base).unwrap();
    let p = Profile { ca: base.join("ca.crt"), cert: base.join("tls.crt"), key: base.join("tls.key") };
    std::fs::write(&p.ca, ca_pem).unwrap();
    std::fs::write(&p.cert, &leaf.0).unwrap();
    std::fs::write(&p.key, &leaf.1).unwrap();
    p
}

impl Profile {
    /// skrouterd's `sslProfile` entity for these files (attribute names from its schema, `skrouter.json`).
    pub fn ssl_profile(&self, name: &str) -> serde_json::Value {
        serde_json::json!(["sslProfile", {"name": name, "caCertFile": self.ca, "certFile": self.cert,
                                          "privateKeyFile": self.key}])
    }

    /// Our router's view of the same files.
    pub fn files(&self) -> snrouter::config::TlsFiles {
        let s = |p: &PathBuf| Some(p.to_string_lossy().into_owned());
        snrouter::config::TlsFiles { ca: s(&self.ca), cert: s(&self.cert), key: s(&self.key) }
    }
}

/// How the router document's `peers` name a certificate: `sha256:<hex>` of its public key (SubjectPublicKeyInfo),
/// from the certificate's key PEM.
pub fn fingerprint(key_pem: &str) -> String {
    let spki = KeyPair::from_pem(key_pem).unwrap().public_key_der();
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &spki);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}
