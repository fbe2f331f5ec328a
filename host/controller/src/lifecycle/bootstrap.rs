//! Join credentials: short-lived bootstrap-token Secrets in kube-system, and the CA public-key
//! hash kubeadm pins the API server with.
//!
//! One token per NodeClaim: its ID is derived from (cluster, NodeClaim), so the controller
//! finds and deletes its own token by name (after registration, or when the claim goes) and
//! needs only `create` and `delete` on Secrets in kube-system, never `get` or `list`.

use kk_apis::names::label;
use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rand::Rng;
use sha2::{Digest, Sha256};

/// A bootstrap token: `<6 chars>.<16 chars>` of `[a-z0-9]`.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    pub id: String,
    pub secret: String,
}

impl std::fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BootstrapToken({}.<redacted>)", self.id)
    }
}

const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// The token ID of NodeClaim `nodeclaim` of `cluster`: 6 characters of `[a-z0-9]`.
pub fn token_id(cluster: &str, nodeclaim: &str) -> String {
    Sha256::digest(format!("{cluster}\0{nodeclaim}").as_bytes())
        .iter()
        .take(6)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// The name of the token Secret of NodeClaim `nodeclaim` of `cluster`.
pub fn secret_name(cluster: &str, nodeclaim: &str) -> String {
    format!("bootstrap-token-{}", token_id(cluster, nodeclaim))
}

impl BootstrapToken {
    /// A fresh secret under the NodeClaim's token ID.
    pub fn for_claim(cluster: &str, nodeclaim: &str) -> Self {
        let mut rng = rand::rng();
        BootstrapToken {
            id: token_id(cluster, nodeclaim),
            secret: (0..16)
                .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
                .collect(),
        }
    }

    /// `<id>.<secret>`.
    pub fn token(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    /// The `bootstrap.kubernetes.io/token` Secret for this token, expiring `ttl` from `now`.
    pub fn secret(
        &self,
        nodeclaim: &str,
        now: k8s_openapi::jiff::Timestamp,
        ttl: Duration,
    ) -> Secret {
        let expiration = now
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(
                ttl.as_secs() as i64
            ))
            .unwrap_or(now);
        let data: BTreeMap<String, String> = [
            ("token-id", self.id.clone()),
            ("token-secret", self.secret.clone()),
            ("expiration", expiration.to_string()),
            ("usage-bootstrap-authentication", "true".into()),
            ("usage-bootstrap-signing", "true".into()),
            (
                "auth-extra-groups",
                "system:bootstrappers:kubeadm:default-node-token".into(),
            ),
            (
                "description",
                format!("karpenter-kakaocloud join token for {nodeclaim}"),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        Secret {
            metadata: ObjectMeta {
                name: Some(format!("bootstrap-token-{}", self.id)),
                namespace: Some("kube-system".into()),
                labels: Some([(label::NODECLAIM.to_owned(), nodeclaim.to_owned())].into()),
                ..ObjectMeta::default()
            },
            type_: Some("bootstrap.kubernetes.io/token".into()),
            string_data: Some(data),
            ..Secret::default()
        }
    }
}

/// Why the CA hash could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaError {
    #[error("no PEM certificate found in the CA bundle")]
    NoCertificate,
    #[error("the CA certificate is not valid DER: {0}")]
    Der(&'static str),
}

/// A DER element: (tag, content, the whole element, rest of the buffer).
type DerElement<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

/// One DER element at the start of `buf`.
fn der(buf: &[u8]) -> Result<DerElement<'_>, CaError> {
    let (&tag, rest) = buf.split_first().ok_or(CaError::Der("truncated"))?;
    let (&first, mut rest) = rest.split_first().ok_or(CaError::Der("truncated"))?;
    let len = if first & 0x80 == 0 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(CaError::Der("bad length"));
        }
        let mut len = 0usize;
        for &b in &rest[..n] {
            len = (len << 8) | usize::from(b);
        }
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return Err(CaError::Der("truncated"));
    }
    let header_len = buf.len() - rest.len();
    Ok((tag, &rest[..len], &buf[..header_len + len], &rest[len..]))
}

/// `sha256:<hex>` of the first certificate's SubjectPublicKeyInfo, kubeadm's `caCertHashes`.
pub fn ca_cert_hash(ca_pem: &str) -> Result<String, CaError> {
    let b64: String = ca_pem
        .split("-----BEGIN CERTIFICATE-----")
        .nth(1)
        .and_then(|s| s.split("-----END CERTIFICATE-----").next())
        .ok_or(CaError::NoCertificate)?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let der_bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| CaError::Der("bad base64"))?;
    let (_, cert, _, _) = der(&der_bytes)?;
    let (_, tbs, _, _) = der(cert)?;
    let mut rest = tbs;
    // Optional [0] version.
    if rest.first() == Some(&0xa0) {
        rest = der(rest)?.3;
    }
    // serial, signature algorithm, issuer, validity, subject.
    for _ in 0..5 {
        rest = der(rest)?.3;
    }
    let (tag, _, spki, _) = der(rest)?;
    if tag != 0x30 {
        return Err(CaError::Der("SubjectPublicKeyInfo is not a SEQUENCE"));
    }
    Ok(format!("sha256:{}", hex::encode(Sha256::digest(spki))))
}

#[cfg(test)]
mod tests {

    #[test]
    fn one_token_name_per_claim_and_cluster() {
        assert_eq!(secret_name("prod", "a"), secret_name("prod", "a"));
        assert_ne!(secret_name("prod", "a"), secret_name("prod", "b"));
        assert_ne!(secret_name("prod", "a"), secret_name("dev", "a"));
        let id = token_id("prod", "a");
        assert_eq!(id.len(), 6);
        assert!(id.bytes().all(|b| ALPHABET.contains(&b)));
        let t = BootstrapToken::for_claim("prod", "a");
        assert_eq!(
            format!("bootstrap-token-{}", t.id),
            secret_name("prod", "a")
        );
        assert_ne!(
            t.secret,
            BootstrapToken::for_claim("prod", "a").secret,
            "fresh secrets"
        );
    }

    use super::*;

    #[test]
    fn tokens_have_the_bootstrap_format() {
        let t = BootstrapToken::for_claim("c", "n");
        assert_eq!(t.id.len(), 6);
        assert_eq!(t.secret.len(), 16);
        assert!(
            t.token()
                .chars()
                .all(|c| c == '.' || c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert!(!format!("{t:?}").contains(&t.secret));
        let s = t.secret(
            "default-abcde",
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            Duration::from_secs(3600),
        );
        assert_eq!(s.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
        assert_eq!(s.metadata.name, Some(format!("bootstrap-token-{}", t.id)));
        let data = s.string_data.unwrap();
        assert_eq!(data["expiration"], "1970-01-01T01:00:00Z");
        assert_eq!(data["usage-bootstrap-authentication"], "true");
    }

    #[test]
    fn ca_hash_covers_the_public_key_only() {
        // A minimal hand-built certificate: SEQUENCE { SEQUENCE(tbs) { [0]{INTEGER 2}, INTEGER 1,
        // SEQUENCE{}, SEQUENCE{}, SEQUENCE{}, SEQUENCE{}, SEQUENCE(spki){ 0x05 0x00 } } }.
        let spki = [0x30, 0x02, 0x05, 0x00];
        let mut tbs = vec![0xa0, 0x03, 0x02, 0x01, 0x02, 0x02, 0x01, 0x01];
        for _ in 0..4 {
            tbs.extend([0x30, 0x00]);
        }
        tbs.extend(spki);
        let mut cert = vec![0x30, tbs.len() as u8];
        cert.extend(&tbs);
        let mut outer = vec![0x30, cert.len() as u8];
        outer.extend(&cert);
        let pem = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            base64::engine::general_purpose::STANDARD.encode(&outer)
        );
        let expect = format!("sha256:{}", hex::encode(Sha256::digest(spki)));
        assert_eq!(ca_cert_hash(&pem).unwrap(), expect);
        assert_eq!(ca_cert_hash("nothing"), Err(CaError::NoCertificate));
        assert!(
            ca_cert_hash("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----").is_err()
        );
    }
}
