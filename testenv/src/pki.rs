//! The PKI of a throwaway control plane: a CA, the API server's serving certificate (SANs
//! `IP:127.0.0.1` and `DNS:localhost`: rustls insists on the IP SAN when the URL is an IP),
//! client certificates for any user and groups, and the service-account signing key.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

pub struct Pki {
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

/// A client certificate and key written to disk.
pub struct ClientCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn name(cn: &str, orgs: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    for o in orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    dn
}

fn write(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

impl Pki {
    pub fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name = name("nlc-testenv-ca", &[]);
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_cert = ca.self_signed(&ca_key)?;
        let ca_path = dir.join("ca.crt");
        write(&ca_path, &ca_cert.pem())?;
        let issuer = Issuer::new(ca, ca_key);

        let serving_key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        serving.distinguished_name = name("kube-apiserver", &[]);
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving.signed_by(&serving_key, &issuer)?;
        let (serving_cert_path, serving_key_path) = (dir.join("apiserver.crt"), dir.join("apiserver.key"));
        write(&serving_cert_path, &serving_cert.pem())?;
        write(&serving_key_path, &serving_key.serialize_pem())?;

        // ECDSA P-256 is accepted for service-account signing (ES256) and verification.
        let sa_key = KeyPair::generate()?;
        let sa_path = dir.join("sa.key");
        write(&sa_path, &sa_key.serialize_pem())?;
        let sa_pub = dir.join("sa.pub");
        write(&sa_pub, &sa_key.public_key_pem())?;

        Ok(Self {
            dir: dir.to_owned(),
            issuer,
            ca_cert: ca_path,
            serving_cert: serving_cert_path,
            serving_key: serving_key_path,
            sa_key: sa_path,
            sa_pub,
        })
    }

    /// Issues a client certificate for `user` in `groups` (`system:masters` is cluster-admin).
    pub fn client(&self, file_stem: &str, user: &str, groups: &[&str]) -> Result<ClientCert> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = name(user, groups);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        let out = ClientCert {
            cert: self.dir.join(format!("{file_stem}.crt")),
            key: self.dir.join(format!("{file_stem}.key")),
        };
        write(&out.cert, &cert.pem())?;
        write(&out.key, &key.serialize_pem())?;
        Ok(out)
    }
}
