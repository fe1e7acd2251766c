//! TLS configurations built once per profile and shared (rustls keeps its session caches in them), and the peer
//! identity a link certificate carries.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{aws_lc_rs as provider, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use crate::config::TlsFiles;

/// Loaded material of one TLS profile.
#[derive(Clone)]
pub struct Material {
    pub ca: Option<Arc<RootCertStore>>,
    pub chain: Vec<CertificateDer<'static>>,
    pub key: Option<Arc<PrivateKeyDer<'static>>>,
}

/// The crypto provider (aws-lc-rs: its AES-GCM uses the VAES/AVX-512 units of these CPUs; measured 5 % less router
/// CPU per GB over two hops than OpenSSL 3.0 in HAProxy, where *ring* used 5 % more) with the hop cipher policy: TLS 1.3 AES-128-GCM first (cheapest per byte with AES-NI, and
/// its 128-bit strength matches the X25519 and Ed25519 keys that protect it), then AES-256-GCM and ChaCha20-Poly1305;
/// for TLS 1.2 only ECDHE with AEAD (rustls implements no other).
pub fn provider() -> Arc<CryptoProvider> {
    use provider::cipher_suite as cs;
    let mut p = provider::default_provider();
    p.cipher_suites = vec![
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ];
    Arc::new(p)
}

/// Reads a profile's files; an error says which file and why.
pub fn load(files: &TlsFiles) -> Result<Material, String> {
    let ca = match &files.ca {
        None => None,
        Some(path) => {
            let mut roots = RootCertStore::empty();
            let certs = read_certs(path, "ca")?;
            for c in certs {
                roots.add(c).map_err(|e| format!("ca file {path}: {e}"))?;
            }
            Some(Arc::new(roots))
        }
    };
    let chain = match &files.cert {
        None => vec![],
        Some(path) => read_certs(path, "cert")?,
    };
    let key = match files.key.as_ref().or(files.cert.as_ref().filter(|_| files.key.is_none())) {
        None => None,
        Some(path) => Some(Arc::new(
            PrivateKeyDer::from_pem_file(Path::new(path)).map_err(|e| format!("key file {path}: {}", describe(&e)))?,
        )),
    };
    Ok(Material { ca, chain, key })
}

fn describe(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) if io.kind() == std::io::ErrorKind::NotFound => "does not exist".into(),
        rustls::pki_types::pem::Error::NoItemsFound => "holds no PEM item of that kind".into(),
        other => crate::text::truncate(&other.to_string(), 200),
    }
}

fn read_certs(path: &str, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(Path::new(path))
        .map_err(|e| format!("{what} file {path}: {}", describe(&e)))?
        .collect();
    let certs = certs.map_err(|e| format!("{what} file {path}: {}", describe(&e)))?;
    if certs.is_empty() {
        return Err(format!("{what} file {path}: holds no certificate"));
    }
    Ok(certs)
}

static ONLY_TLS12: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS12];
static ONLY_TLS13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];

fn versions(v: &str) -> &'static [&'static rustls::SupportedProtocolVersion] {
    if v == "1.2" {
        &ONLY_TLS12
    } else {
        &ONLY_TLS13
    }
}

fn versions_from(min: &str) -> &'static [&'static rustls::SupportedProtocolVersion] {
    if min == "1.2" {
        rustls::ALL_VERSIONS
    } else {
        &ONLY_TLS13
    }
}

fn cert_and_key(m: &Material, what: &str) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    match (&m.chain, &m.key) {
        (chain, Some(key)) if !chain.is_empty() => Ok((chain.clone(), key.clone_key())),
        _ => Err(format!("{what} needs a certificate and a key")),
    }
}

/// The router access: mutual TLS, clients must present a certificate the site CA signed.
/// `alpn`: the link protocols it speaks, by their ALPN ids.
pub fn access_server(m: &Material, min_version: &str, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, String> {
    let roots = m.ca.clone().ok_or("the router access needs the site CA")?;
    let verifier =
        WebPkiClientVerifier::builder_with_provider(roots, provider()).build().map_err(|e| format!("site CA: {e}"))?;
    let (chain, key) = cert_and_key(m, "the router access")?;
    let mut cfg = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions_from(min_version))
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| format!("server certificate: {e}"))?;
    cfg.alpn_protocols = alpn.iter().map(|id| id.to_vec()).collect();
    cfg.ignore_client_order = true;
    // a TLS 1.3 link's records are protected by `tlsrec` with the traffic secrets rustls hands over
    cfg.enable_secret_extraction = true;
    Ok(Arc::new(cfg))
}

/// A link: the client certificate the remote site issued, the remote site CA as the only trust anchor, names not
/// checked (the dedicated CA is the anchor; the identity is the certificate's common name). `alpn`: the ALPN id the
/// link asks for (none for an AMQP link, as upstream's routers dial).
pub fn link_client(m: &Material, version: &str, alpn: Option<&[u8]>) -> Result<Arc<ClientConfig>, String> {
    let roots = m.ca.clone().ok_or("a link needs the remote site CA")?;
    let (chain, key) = cert_and_key(m, "a link")?;
    let verifier = AnyName::new(roots)?;
    let mut cfg = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions(version))
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("client certificate: {e}"))?;
    cfg.alpn_protocols = alpn.iter().map(|id| id.to_vec()).collect();
    // No session resumption: upstream's router (OpenSSL, peer verification on, no session id context) fails a
    // handshake that offers a session it ticketed ("session id context uninitialized"), so every redial after the
    // first would fail. Links are long-lived; a full handshake per dial costs little.
    cfg.resumption = rustls::client::Resumption::disabled();
    cfg.enable_secret_extraction = true;
    Ok(Arc::new(cfg))
}

/// A Listener that terminates TLS (client certificates required with `authenticatePeer`).
pub fn listener_server(m: &Material, authenticate_peer: bool) -> Result<Arc<ServerConfig>, String> {
    let (chain, key) = cert_and_key(m, "a TLS listener")?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| e.to_string())?;
    let builder = if authenticate_peer {
        let roots = m.ca.clone().ok_or("authenticatePeer needs the profile's CA")?;
        let v =
            WebPkiClientVerifier::builder_with_provider(roots, provider()).build().map_err(|e| format!("CA: {e}"))?;
        builder.with_client_cert_verifier(v)
    } else {
        builder.with_no_client_auth()
    };
    Ok(Arc::new(builder.with_single_cert(chain, key).map_err(|e| format!("certificate: {e}"))?))
}

/// A Connector that originates TLS to its targets.
pub fn connector_client(
    m: &Material,
    use_client_cert: bool,
    verify_hostname: bool,
) -> Result<Arc<ClientConfig>, String> {
    let roots = m.ca.clone().ok_or("a TLS connector needs the profile's CA")?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| e.to_string())?;
    let builder = if verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        builder.dangerous().with_custom_certificate_verifier(AnyName::new(roots)?)
    };
    let cfg = if use_client_cert {
        let (chain, key) = cert_and_key(m, "useClientCert")?;
        builder.with_client_auth_cert(chain, key).map_err(|e| format!("client certificate: {e}"))?
    } else {
        builder.with_no_client_auth()
    };
    Ok(Arc::new(cfg))
}

/// Chain validation against the given roots, without matching the server's names.
#[derive(Debug)]
struct AnyName {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
}

impl AnyName {
    fn new(roots: Arc<RootCertStore>) -> Result<Arc<Self>, String> {
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| format!("CA: {e}"))?;
        Ok(Arc::new(AnyName { inner }))
    }
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The common name of a certificate's subject (the identity a link certificate gives its holder).
pub fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = parsed.subject().iter_common_name().next()?.as_str().ok()?.to_string();
    Some(cn)
}

/// Whether a router may call itself `router_id` with a certificate whose common name is `cn`: the id is the
/// name, or the name followed by `/` and the router's own part (the routers of one site share its identity).
pub fn identity_allows(cn: &str, router_id: &str) -> bool {
    !cn.is_empty()
        && (router_id == cn
            || (router_id.len() > cn.len() && router_id.starts_with(cn) && router_id.as_bytes()[cn.len()] == b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_the_name_or_below_it() {
        assert!(identity_allows("site-1", "site-1"));
        assert!(identity_allows("site-1", "site-1/skupper-router-2"));
        assert!(!identity_allows("site-1", "site-10"));
        assert!(!identity_allows("site-1", "east"));
        assert!(!identity_allows("", "east"));
    }
}
