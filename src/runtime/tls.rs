//! Serving certificates for the process's HTTPS listeners (the admission webhook, the secure
//! metrics endpoint): read from PEM files and reloaded when the files change (cert-manager
//! rotates them in place), or, for the metrics endpoint when no files are given, a self-signed
//! certificate made at start (as kube-controller-manager and controller-runtime do).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::{Error, Result};

/// The flags that name a listener's certificate and key (for the errors).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Flags {
    pub(crate) cert: &'static str,
    pub(crate) key: &'static str,
}

/// Loads a certificate chain and its key into a rustls `CertifiedKey`.
pub(crate) fn load_certified_key(cert: &Path, key: &Path, flags: Flags) -> Result<CertifiedKey> {
    let cert_err = |problem: String| Error::Tls { flag: flags.cert, path: cert.to_owned(), problem };
    let key_err = |problem: String| Error::Tls { flag: flags.key, path: key.to_owned(), problem };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| cert_err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| cert_err(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert_err("no certificate found".into()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| key_err(e.to_string()))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key_der).map_err(|e| key_err(e.to_string()))?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|e| key_err(format!("does not match the certificate: {e}")))?;
    Ok(certified)
}

/// A self-signed certificate for `localhost` and the pod's host name, made at each start (rcgen's
/// default validity; Prometheus scrapes it with `insecureSkipVerify`, as kubebuilder's default
/// ServiceMonitor does; mount one with `--metrics-tls-cert-file` to verify it).
pub(crate) fn self_signed() -> Result<CertifiedKey> {
    let problem =
        |e: rcgen::Error| Error::Tls { flag: "--metrics-tls-cert-file", path: PathBuf::new(), problem: e.to_string() };
    let mut names = vec!["localhost".to_owned()];
    // The pod's host name, when it is a DNS name (a laptop's may not be; then localhost alone).
    if let Ok(host) = std::env::var("HOSTNAME")
        && !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
    {
        names.push(host);
    }
    let key = rcgen::KeyPair::generate().map_err(problem)?;
    let params = rcgen::CertificateParams::new(names).map_err(problem)?;
    let cert = params.self_signed(&key).map_err(problem)?;
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signer = rustls::crypto::ring::sign::any_supported_type(&key_der).map_err(|e| Error::Tls {
        flag: "--metrics-tls-private-key-file",
        path: PathBuf::new(),
        problem: e.to_string(),
    })?;
    Ok(CertifiedKey::new(vec![cert.der().clone()], signer))
}

/// The gauge of a serving certificate's expiry.
pub(crate) type Expiry = prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>;

/// Sets the gauge to the leaf certificate's notAfter (logged if it cannot be read).
pub(crate) fn report_expiry(k: &CertifiedKey, expiry: &Expiry) {
    match k.cert.first().and_then(|c| nlc_core::x509::not_after(c.as_ref())) {
        Some(at) => {
            expiry.set(at.as_millisecond() as f64 / 1000.0);
        }
        None => tracing::warn!("cannot read the serving certificate's expiry"),
    }
}

/// Serves whatever certificate was loaded last.
#[derive(Debug)]
pub(crate) struct Reloading(RwLock<Arc<CertifiedKey>>);

impl Reloading {
    pub(crate) fn new(first: CertifiedKey) -> Arc<Self> {
        Arc::new(Self(RwLock::new(Arc::new(first))))
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().ok().map(|k| k.clone())
    }
}

/// Client certificates a listener requires: signed by one of these CAs (mTLS).
pub(crate) type ClientRoots = Arc<rustls::RootCertStore>;

/// Loads the CA bundle that client certificates must chain to (`flag` names the file in errors).
pub(crate) fn load_client_roots(path: &Path, flag: &'static str) -> Result<ClientRoots> {
    let err = |problem: String| Error::Tls { flag, path: path.to_owned(), problem };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| err(e.to_string()))? {
        roots.add(cert.map_err(|e| err(e.to_string()))?).map_err(|e| err(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(err("no CA certificate found".into()));
    }
    Ok(Arc::new(roots))
}

/// The TLS acceptor of a listener: safe default protocol versions, the ALPN protocols `alpn`
/// (HTTP/1.1 only unless HTTP/2 was asked for); client certificates required and verified
/// against `clients` when given (a handshake without one fails), else none asked for.
pub(crate) fn acceptor(
    resolver: Arc<Reloading>,
    alpn: Vec<Vec<u8>>,
    flags: Flags,
    clients: Option<ClientRoots>,
) -> Result<tokio_rustls::TlsAcceptor> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let problem = |e: String| Error::Tls { flag: flags.cert, path: PathBuf::new(), problem: e };
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| problem(e.to_string()))?;
    let builder = match clients {
        Some(roots) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| problem(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut tls = builder.with_cert_resolver(resolver);
    tls.alpn_protocols = alpn;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(tls)))
}

fn file_stamp(paths: &[&Path]) -> Vec<Option<(std::time::SystemTime, u64, Vec<u8>)>> {
    paths
        .iter()
        .map(|p| {
            let meta = std::fs::metadata(p).ok()?;
            let content = std::fs::read(p).ok()?;
            Some((meta.modified().ok()?, meta.len(), content))
        })
        .collect()
}

/// Reloads the certificate when its files change; keeps the old one while the new files do not
/// load (cert-manager writes the two files one after the other).
pub(crate) async fn reload(
    cert: PathBuf,
    key: PathBuf,
    flags: Flags,
    every: Duration,
    resolver: Arc<Reloading>,
    expiry: Option<Expiry>,
) {
    let mut stamp = file_stamp(&[&cert, &key]);
    loop {
        tokio::time::sleep(every).await;
        let now = file_stamp(&[&cert, &key]);
        if now == stamp {
            continue;
        }
        match load_certified_key(&cert, &key, flags) {
            Ok(k) => {
                if let Some(expiry) = &expiry {
                    report_expiry(&k, expiry);
                }
                if let Ok(mut cur) = resolver.0.write() {
                    *cur = Arc::new(k);
                }
                stamp = now;
                tracing::info!(cert = %cert.display(), "reloaded the serving certificate");
            }
            Err(e) => {
                tracing::warn!(error = %e, "the changed certificate files do not load yet; keeping the current certificate")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_self_signed_certificate_is_made_for_localhost() {
        let k = super::self_signed().expect("self-signed");
        assert_eq!(k.cert.len(), 1);
        assert!(k.keys_match().is_ok());
    }
}
