//! Plugin authenticity. The userdata renderer decides what runs as root on every new node, so a
//! cluster can require that plugins be signed: with a trust root configured (ed25519 public
//! keys in the Secret the chart names), a plugin ConfigMap loads only when its
//! `karpenter.kakaocloud.com/plugin-signature` verifies under one of those keys over
//! [`kk_apis::plugin_signing::message`]. Unsigned, unknown-key and wrongly signed plugins are
//! refused like any other bad plugin (the last good one keeps serving). Without a trust root,
//! signatures are not checked.
//!
//! Trust root, data key `trust.json` of the Secret:
//! `{"keys":[{"id":"team-a","ed25519":"<base64 of the 32-byte public key>"}]}`.

use std::collections::BTreeMap;

use base64::Engine as _;
use ring::signature::{ED25519, UnparsedPublicKey};

use super::PluginError;
use super::registry::Source;
use kk_apis::plugin_signing;

/// Data key of the trust root in its Secret.
pub const SECRET_KEY: &str = "trust.json";
const PUBLIC_KEY_BYTES: usize = 32;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustFile {
    keys: Vec<TrustKey>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustKey {
    id: String,
    ed25519: String,
}

/// The public keys plugins must be signed with.
#[derive(Clone)]
pub struct TrustRoot {
    keys: BTreeMap<String, Vec<u8>>,
}

impl std::fmt::Debug for TrustRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustRoot")
            .field("keys", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl TrustRoot {
    /// Parses `trust.json`; a root without keys is an error (it would refuse every plugin while
    /// looking configured).
    pub fn from_json(raw: &[u8]) -> Result<TrustRoot, String> {
        let file: TrustFile =
            serde_json::from_slice(raw).map_err(|e| format!("{SECRET_KEY} is not valid: {e}"))?;
        if file.keys.is_empty() {
            return Err(format!("{SECRET_KEY} lists no keys"));
        }
        let mut keys = BTreeMap::new();
        for k in file.keys {
            if k.id.is_empty() || k.id.contains(':') {
                return Err(format!("key id {:?} must be non-empty without ':'", k.id));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(k.ed25519.trim())
                .map_err(|_| format!("key {:?} is not valid base64", k.id))?;
            if bytes.len() != PUBLIC_KEY_BYTES {
                return Err(format!(
                    "key {:?} has {} bytes; an ed25519 public key has {PUBLIC_KEY_BYTES}",
                    k.id,
                    bytes.len()
                ));
            }
            if keys.insert(k.id.clone(), bytes).is_some() {
                return Err(format!("key id {:?} appears more than once", k.id));
            }
        }
        Ok(TrustRoot { keys })
    }

    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Whether `source` (whose component digest was already checked) is signed by a trusted key.
    pub fn verify(&self, source: &Source) -> Result<(), PluginError> {
        let refuse = |why: String| PluginError::Unsigned {
            plugin: source.name.clone(),
            why,
        };
        let value = source.signature.as_deref().ok_or_else(|| {
            refuse("it carries no signature and a trust root is configured".into())
        })?;
        let (key_id, sig) = plugin_signing::parse_annotation(value)
            .ok_or_else(|| refuse("the signature annotation is not <keyID>:<base64>".into()))?;
        let key = self
            .keys
            .get(key_id)
            .ok_or_else(|| refuse(format!("key {key_id:?} is not in the trust root")))?;
        let sig = base64::engine::general_purpose::STANDARD
            .decode(sig)
            .map_err(|_| refuse("the signature is not valid base64".into()))?;
        let message = plugin_signing::message(source.kind.world(), &source.digest, &source.config);
        UnparsedPublicKey::new(&ED25519, key)
            .verify(&message, &sig)
            .map_err(|_| {
                refuse(format!(
                    "the signature does not verify under key {key_id:?} for this component, world and config"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;
    use ring::signature::{Ed25519KeyPair, KeyPair};

    fn keypair(seed: u8) -> Ed25519KeyPair {
        Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).unwrap()
    }

    fn root(pairs: &[(&str, &Ed25519KeyPair)]) -> TrustRoot {
        let keys: Vec<serde_json::Value> = pairs
            .iter()
            .map(|(id, kp)| {
                serde_json::json!({"id": id, "ed25519":
                    base64::engine::general_purpose::STANDARD.encode(kp.public_key().as_ref())})
            })
            .collect();
        TrustRoot::from_json(serde_json::json!({ "keys": keys }).to_string().as_bytes()).unwrap()
    }

    fn signed(kp: &Ed25519KeyPair, key_id: &str, kind: Kind, config: &str) -> Source {
        let mut s = Source::new("p", kind, b"component bytes".to_vec(), config);
        let sig = kp.sign(&plugin_signing::message(kind.world(), &s.digest, config));
        s.signature = Some(plugin_signing::annotation(
            key_id,
            &base64::engine::general_purpose::STANDARD.encode(sig.as_ref()),
        ));
        s
    }

    #[test]
    fn a_signature_verifies_only_for_its_key_world_component_and_config() {
        let (a, b) = (keypair(1), keypair(2));
        let trust = root(&[("a", &a)]);
        trust
            .verify(&signed(&a, "a", Kind::Userdata, "{}"))
            .expect("signed by a trusted key");

        let cases: Vec<(&str, Source)> = vec![
            ("unsigned", {
                let mut s = signed(&a, "a", Kind::Userdata, "{}");
                s.signature = None;
                s
            }),
            ("unknown key", signed(&b, "b", Kind::Userdata, "{}")),
            (
                "other key under a trusted id",
                signed(&b, "a", Kind::Userdata, "{}"),
            ),
            ("other world", {
                let mut s = signed(&a, "a", Kind::Userdata, "{}");
                s.kind = Kind::Selector;
                s
            }),
            ("other config", {
                let mut s = signed(&a, "a", Kind::Userdata, "{}");
                s.config = r#"{"mode":"trap"}"#.into();
                s
            }),
            ("other component", {
                let mut s = signed(&a, "a", Kind::Userdata, "{}");
                s.digest = "0".repeat(64);
                s
            }),
            ("garbage", {
                let mut s = signed(&a, "a", Kind::Userdata, "{}");
                s.signature = Some("a:!!!".into());
                s
            }),
        ];
        for (what, source) in cases {
            let err = trust.verify(&source).expect_err(what);
            assert_eq!(err.kind(), "signature", "{what}: {err}");
            assert!(err.to_string().contains("plugin p"), "{what}: {err}");
        }
    }

    #[test]
    fn malformed_trust_roots_are_refused_and_debug_shows_no_key_bytes() {
        for bad in [
            r#"{"keys":[]}"#,
            r#"{"keys":[{"id":"a","ed25519":"AAAA"}]}"#,
            r#"{"keys":[{"id":"","ed25519":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}]}"#,
            r#"{"keys":[{"id":"a","ed25519":"not base64"}]}"#,
            r#"{"key":[]}"#,
        ] {
            assert!(TrustRoot::from_json(bad.as_bytes()).is_err(), "{bad}");
        }
        let kp = keypair(3);
        let trust = root(&[("a", &kp), ("b", &keypair(4))]);
        assert!(
            TrustRoot::from_json(
                br#"{"keys":[{"id":"a","ed25519":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="},{"id":"a","ed25519":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}]}"#
            )
            .is_err(),
            "duplicate ids"
        );
        assert_eq!(format!("{trust:?}"), r#"TrustRoot { keys: ["a", "b"] }"#);
    }
}
