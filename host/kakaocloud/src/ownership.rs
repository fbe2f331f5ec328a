//! Signed instance ownership.
//!
//! After launching an instance the controller writes a tag into its
//! description that binds (cluster identity, NodeClaim name, instance ID) with
//! HMAC-SHA256 under the keyring's active key. Deletion and garbage
//! collection act only on instances whose tag verifies.
//!
//! Tag: `kk:1:<keyID>:<nodeclaim>:<mac>`, where `mac` is the first 16 bytes
//! of the HMAC (RFC 2104 allows truncation to half the hash) in unpadded
//! base64url. The fixed part is 36 characters with a 7-character key ID, so
//! NodeClaim names up to 64 characters fit the 100-character description
//! limit; a longer name is a [`SignError::TooLong`], never a silently
//! shortened tag. The cluster and instance ID are not in the text (the
//! verifier knows them) but are in the MAC, so a tag copied to another
//! instance or another cluster does not verify. The text uses only characters
//! KakaoCloud accepts in a description and has no spaces, so it can sit next
//! to human text.
//!
//! The keyring is the `keyring.json` key of the `karpenter-sigkey` Secret:
//! `{"activeKeyID":"k1","keys":[{"id":"k1","key":"<base64 of 32 bytes>"}]}`.
//! Rotation: add a key, switch `activeKeyID`; tags under older keys still
//! verify while their key stays in the ring.
//!
//! **Create markers.** The tag binds the instance ID, which exists only after
//! the create, so the create request itself carries a *marker*
//! `kk:c:<keyID>:<nodeclaim>:<mac>` (the MAC over key ID, cluster and
//! NodeClaim under another domain). Every instance the controller creates is
//! attributable from its first moment: when a create's answer is lost and a
//! lagging list makes the launch create again, the extra instance carries a
//! marker, and garbage collection removes it. A marker does not bind the
//! instance, so it is honoured only on an instance under the claim's
//! deterministic name, and the tag replaces it as soon as the launch sees
//! the instance.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use crate::api::INSTANCE_DESCRIPTION_MAX;

/// Token prefix that marks an ownership tag inside a description.
pub const TAG_PREFIX: &str = "kk:";
/// Format version written after the prefix.
pub const TAG_VERSION: &str = "1";
/// Data key of the keyring in its Secret.
pub const SECRET_KEY: &str = "keyring.json";
/// Longest key ID (the install guide's limit; it keeps the tag short).
pub const KEY_ID_MAX: usize = 7;
/// Shortest signing key, in bytes.
pub const KEY_MIN_BYTES: usize = 32;
/// Bytes of the HMAC kept in the tag.
pub const MAC_BYTES: usize = 16;
const MAC_CHARS: usize = 22;
/// Format version of a create marker.
pub const MARKER_VERSION: &str = "c";
/// Domain separation: these MACs mean nothing in any other protocol.
const DOMAIN: &[u8] = b"karpenter-kakaocloud/ownership/v1";
const MARKER_DOMAIN: &[u8] = b"karpenter-kakaocloud/ownership/create/v1";

type HmacSha256 = Hmac<Sha256>;

/// Why a keyring was rejected. Never contains key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    #[error("keyring is not valid JSON of the expected shape: {0}")]
    Parse(String),
    #[error("Secret has no {SECRET_KEY:?} data key")]
    MissingData,
    #[error("keyring has no keys")]
    NoKeys,
    #[error("activeKeyID is missing or empty")]
    MissingActiveKeyId,
    #[error("key ID {id:?} is invalid: {reason}")]
    InvalidKeyId { id: String, reason: &'static str },
    #[error("key ID {0:?} appears more than once")]
    DuplicateKeyId(String),
    #[error("key {id:?} is not valid base64")]
    BadBase64 { id: String },
    #[error("key {id:?} has {len} bytes, at least {KEY_MIN_BYTES} are required")]
    ShortKey { id: String, len: usize },
    #[error("activeKeyID {0:?} is not one of the keys")]
    ActiveKeyAbsent(String),
    #[error(
        "the new keyring removes or changes key(s) {ids:?} that still sign {instances} live instance(s); re-sign them or keep the key"
    )]
    KeysInUse { ids: Vec<String>, instances: usize },
    #[error(
        "the new keyring removes or changes key(s) {ids:?} and their use could not be checked: {reason}"
    )]
    UsageUnknown { ids: Vec<String>, reason: String },
}

/// Why a tag could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("cluster identity is empty")]
    EmptyCluster,
    #[error("instance ID is empty")]
    EmptyInstanceId,
    #[error("NodeClaim name {0:?} is not a DNS subdomain name")]
    InvalidNodeClaim(String),
    #[error("the active key is not in the keyring")]
    ActiveKeyMissing,
    #[error("tag would be {len} characters, the description limit is {INSTANCE_DESCRIPTION_MAX}")]
    TooLong { len: usize },
}

/// Why a tag did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("no ownership tag in the description")]
    NoTag,
    #[error("tag is malformed: {0}")]
    Malformed(&'static str),
    #[error("tag version {0:?} is not supported")]
    UnsupportedVersion(String),
    #[error("tag is signed with unknown key {0:?}")]
    UnknownKey(String),
    #[error("tag signature does not match this cluster and instance")]
    BadSignature,
    #[error("tag names NodeClaim {tagged:?}, not {expected:?}")]
    OtherClaim { tagged: String, expected: String },
}

/// Who owns a verified instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub nodeclaim: String,
    pub key_id: String,
    /// What proved it.
    pub proof: Proof,
}

/// What proves an instance is ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// The ownership tag, bound to the instance ID.
    Tag,
    /// Only the create marker (the instance was never tagged: a duplicate, or a launch that
    /// has not seen it yet).
    Marker,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyringFile {
    #[serde(rename = "activeKeyID", default)]
    active_key_id: Option<String>,
    #[serde(default)]
    keys: Vec<KeyEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    id: String,
    key: String,
}

/// A keyed HMAC, cloned per use; never printed.
#[derive(Clone)]
struct SecretKey(HmacSha256);

/// A validated keyring.
#[derive(Clone)]
pub struct Keyring {
    active: String,
    keys: BTreeMap<String, SecretKey>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("active", &self.active)
            .field("key_ids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Keyring {
    /// Parses and strictly validates `keyring.json`.
    pub fn from_json(raw: &[u8]) -> Result<Keyring, KeyringError> {
        // serde_json's message may quote input; report only its category and position.
        let file: KeyringFile = serde_json::from_slice(raw).map_err(|e| {
            KeyringError::Parse(format!(
                "{:?} error at line {} column {}",
                e.classify(),
                e.line(),
                e.column()
            ))
        })?;
        let active = file
            .active_key_id
            .filter(|id| !id.is_empty())
            .ok_or(KeyringError::MissingActiveKeyId)?;
        validate_key_id(&active)?;
        if file.keys.is_empty() {
            return Err(KeyringError::NoKeys);
        }
        let mut keys = BTreeMap::new();
        for entry in file.keys {
            validate_key_id(&entry.id)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(entry.key.trim())
                .map_err(|_| KeyringError::BadBase64 {
                    id: entry.id.clone(),
                })?;
            if bytes.len() < KEY_MIN_BYTES {
                return Err(KeyringError::ShortKey {
                    id: entry.id,
                    len: bytes.len(),
                });
            }
            let keyed = HmacSha256::new_from_slice(&bytes).map_err(|_| KeyringError::ShortKey {
                id: entry.id.clone(),
                len: bytes.len(),
            })?;
            if keys.insert(entry.id.clone(), SecretKey(keyed)).is_some() {
                return Err(KeyringError::DuplicateKeyId(entry.id));
            }
        }
        if !keys.contains_key(&active) {
            return Err(KeyringError::ActiveKeyAbsent(active));
        }
        Ok(Keyring { active, keys })
    }

    /// Reads the keyring from the `keyring.json` key of a Secret.
    pub fn from_secret(
        secret: &k8s_openapi::api::core::v1::Secret,
    ) -> Result<Keyring, KeyringError> {
        if let Some(data) = secret.data.as_ref().and_then(|d| d.get(SECRET_KEY)) {
            return Keyring::from_json(&data.0);
        }
        if let Some(text) = secret.string_data.as_ref().and_then(|d| d.get(SECRET_KEY)) {
            return Keyring::from_json(text.as_bytes());
        }
        Err(KeyringError::MissingData)
    }

    pub fn active_key_id(&self) -> &str {
        &self.active
    }

    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Tag binding `nodeclaim` of `cluster` to `instance_id`, under the active key.
    pub fn sign(
        &self,
        cluster: &str,
        nodeclaim: &str,
        instance_id: &str,
    ) -> Result<String, SignError> {
        if cluster.is_empty() {
            return Err(SignError::EmptyCluster);
        }
        if instance_id.is_empty() {
            return Err(SignError::EmptyInstanceId);
        }
        if !is_dns_subdomain(nodeclaim) {
            return Err(SignError::InvalidNodeClaim(nodeclaim.to_string()));
        }
        // The active key is in the map: `from_json` checked it.
        let Some(key) = self.keys.get(&self.active) else {
            return Err(SignError::ActiveKeyMissing);
        };
        let mac = compute_mac(key, DOMAIN, &self.active, cluster, nodeclaim, instance_id);
        render(TAG_VERSION, &self.active, nodeclaim, &mac)
    }

    /// The create marker for `nodeclaim` of `cluster`, under the active key: what the create
    /// request's description carries.
    pub fn mark(&self, cluster: &str, nodeclaim: &str) -> Result<String, SignError> {
        if cluster.is_empty() {
            return Err(SignError::EmptyCluster);
        }
        if !is_dns_subdomain(nodeclaim) {
            return Err(SignError::InvalidNodeClaim(nodeclaim.to_string()));
        }
        let Some(key) = self.keys.get(&self.active) else {
            return Err(SignError::ActiveKeyMissing);
        };
        let mac = compute_mac(key, MARKER_DOMAIN, &self.active, cluster, nodeclaim, "");
        render(MARKER_VERSION, &self.active, nodeclaim, &mac)
    }

    /// Key IDs of this ring that `next` removes or maps to other key bytes: tags signed with them
    /// would no longer verify once `next` is active.
    pub fn retired_by(&self, next: &Keyring) -> Vec<String> {
        // Equal keys give equal MACs; comparing a MAC of a fixed probe compares the keys
        // without keeping their bytes around.
        let probe = |key: &SecretKey| {
            let mut mac = key.0.clone();
            mac.update(b"karpenter-kakaocloud/keyring-compare");
            mac.finalize().into_bytes()
        };
        self.keys
            .iter()
            .filter(|(id, key)| next.keys.get(*id).is_none_or(|n| probe(n) != probe(key)))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Whether a tag for `nodeclaim` of `cluster` can be signed at all (the NodeClaim name is a
    /// DNS subdomain and the tag fits the instance description). A tag's length does not depend
    /// on the instance, so launch checks this before it creates anything: an instance that could
    /// never be tagged could never be deleted through the verified path.
    pub fn check_signable(&self, cluster: &str, nodeclaim: &str) -> Result<(), SignError> {
        self.sign(cluster, nodeclaim, "i-check").map(|_| ())
    }

    /// Checks `tag` for `cluster` and `instance_id` with any key of the ring.
    pub fn verify(
        &self,
        tag: &str,
        cluster: &str,
        instance_id: &str,
    ) -> Result<Owner, VerifyError> {
        self.check(tag, TAG_VERSION, DOMAIN, cluster, instance_id)
    }

    /// Checks a create marker for `cluster` with any key of the ring.
    pub fn verify_marker(&self, marker: &str, cluster: &str) -> Result<Owner, VerifyError> {
        self.check(marker, MARKER_VERSION, MARKER_DOMAIN, cluster, "")
    }

    fn check(
        &self,
        tag: &str,
        expected_version: &str,
        domain: &[u8],
        cluster: &str,
        instance_id: &str,
    ) -> Result<Owner, VerifyError> {
        let body = tag
            .strip_prefix(TAG_PREFIX)
            .ok_or(VerifyError::Malformed("missing prefix"))?;
        let mut parts = body.split(':');
        let (Some(version), Some(key_id), Some(nodeclaim), Some(mac), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(VerifyError::Malformed("wrong number of fields"));
        };
        if version != expected_version {
            return Err(VerifyError::UnsupportedVersion(version.to_string()));
        }
        if validate_key_id(key_id).is_err() {
            return Err(VerifyError::Malformed("bad key ID"));
        }
        if !is_dns_subdomain(nodeclaim) {
            return Err(VerifyError::Malformed("bad NodeClaim name"));
        }
        if mac.len() != MAC_CHARS {
            return Err(VerifyError::Malformed("signature has the wrong length"));
        }
        // Strict decoding: non-canonical trailing bits are rejected, so every
        // signature has exactly one spelling.
        let mac = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(mac)
            .map_err(|_| VerifyError::Malformed("signature is not base64url"))?;
        let key = self
            .keys
            .get(key_id)
            .ok_or_else(|| VerifyError::UnknownKey(key_id.to_string()))?;
        let mut hmac = keyed(key);
        feed(&mut hmac, domain, key_id, cluster, nodeclaim, instance_id);
        // Constant-time comparison of the kept prefix.
        hmac.verify_truncated_left(&mac)
            .map_err(|_| VerifyError::BadSignature)?;
        Ok(Owner {
            nodeclaim: nodeclaim.to_string(),
            key_id: key_id.to_string(),
            proof: if expected_version == MARKER_VERSION {
                Proof::Marker
            } else {
                Proof::Tag
            },
        })
    }

    /// Who owns the instance `instance_id` named `instance_name` with `description`: its tag if
    /// one verifies, else its create marker if one verifies and the name is the marked claim's
    /// deterministic name.
    pub fn owner(
        &self,
        description: &str,
        instance_name: &str,
        cluster: &str,
        instance_id: &str,
    ) -> Result<Owner, VerifyError> {
        let tagged = self.verify_description(description, cluster, instance_id);
        if tagged.is_ok() {
            return tagged;
        }
        tags_in(description)
            .filter_map(|t| self.verify_marker(t, cluster).ok())
            .find(|o| crate::naming::instance_name(cluster, &o.nodeclaim) == instance_name)
            .ok_or_else(|| tagged.unwrap_err())
    }

    /// Finds the ownership tag(s) in an instance description and verifies them;
    /// the first that verifies wins.
    pub fn verify_description(
        &self,
        description: &str,
        cluster: &str,
        instance_id: &str,
    ) -> Result<Owner, VerifyError> {
        let mut last = VerifyError::NoTag;
        for tag in tags_in(description) {
            match self.verify(tag, cluster, instance_id) {
                Ok(owner) => return Ok(owner),
                Err(err) => last = err,
            }
        }
        Err(last)
    }
}

/// The ownership-tag tokens of a description.
pub fn tags_in(description: &str) -> impl Iterator<Item = &str> {
    description
        .split_whitespace()
        .filter(|t| t.starts_with(TAG_PREFIX))
}

/// A description holding `human` text (shortened if needed, earlier tags
/// removed) followed by `tag`, within the description limit.
pub fn compose_description(human: &str, tag: &str) -> String {
    let kept: Vec<&str> = human
        .split_whitespace()
        .filter(|t| !t.starts_with(TAG_PREFIX))
        .collect();
    let human = kept.join(" ");
    let room = INSTANCE_DESCRIPTION_MAX.saturating_sub(tag.chars().count() + 1);
    let short: String = human.chars().take(room).collect();
    let short = short.trim_end();
    if short.is_empty() {
        tag.to_string()
    } else {
        format!("{short} {tag}")
    }
}

fn keyed(key: &SecretKey) -> HmacSha256 {
    key.0.clone()
}

/// `kk:<version>:<keyID>:<nodeclaim>:<mac>`, within the description limit.
fn render(version: &str, key_id: &str, nodeclaim: &str, mac: &[u8]) -> Result<String, SignError> {
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&mac[..MAC_BYTES]);
    let tag = format!("{TAG_PREFIX}{version}:{key_id}:{nodeclaim}:{encoded}");
    if tag.len() > INSTANCE_DESCRIPTION_MAX {
        return Err(SignError::TooLong { len: tag.len() });
    }
    Ok(tag)
}

fn feed(
    mac: &mut HmacSha256,
    domain: &[u8],
    key_id: &str,
    cluster: &str,
    nodeclaim: &str,
    instance_id: &str,
) {
    mac.update(domain);
    // Length prefixes make the encoding injective.
    for field in [key_id, cluster, nodeclaim, instance_id] {
        let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
        mac.update(&len.to_be_bytes());
        mac.update(field.as_bytes());
    }
}

fn compute_mac(
    key: &SecretKey,
    domain: &[u8],
    key_id: &str,
    cluster: &str,
    nodeclaim: &str,
    instance_id: &str,
) -> Vec<u8> {
    let mut mac = keyed(key);
    feed(&mut mac, domain, key_id, cluster, nodeclaim, instance_id);
    mac.finalize().into_bytes().to_vec()
}

fn validate_key_id(id: &str) -> Result<(), KeyringError> {
    let invalid = |reason| KeyringError::InvalidKeyId {
        id: id.to_string(),
        reason,
    };
    if id.is_empty() {
        return Err(invalid("empty"));
    }
    if id.chars().count() > KEY_ID_MAX {
        return Err(invalid("longer than 7 characters"));
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(invalid("only letters, digits, '-' and '_' are allowed"));
    }
    Ok(())
}

/// RFC 1123 subdomain, as Kubernetes object names are.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b.first().is_some_and(|c| c.is_ascii_alphanumeric())
                && b.last().is_some_and(|c| c.is_ascii_alphanumeric())
        })
}

/// What launch may do with an existing instance of its deterministic name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adoption {
    /// Its tag verifies for this cluster and names this NodeClaim.
    AlreadyOurs,
    /// It carries no ownership tag (or only this claim's create marker): we created it and
    /// have not tagged it yet.
    Sign,
    /// It carries a tag that is not ours for this claim: never re-signed, never adopted.
    Refuse(VerifyError),
}

impl Keyring {
    /// Whether the instance `instance_id` with `description` may be adopted by NodeClaim
    /// `nodeclaim` of `cluster`.
    pub fn adoption(
        &self,
        description: &str,
        cluster: &str,
        nodeclaim: &str,
        instance_id: &str,
    ) -> Adoption {
        if tags_in(description).next().is_none() {
            return Adoption::Sign;
        }
        let name = crate::naming::instance_name(cluster, nodeclaim);
        match self.owner(description, &name, cluster, instance_id) {
            Ok(owner) if owner.nodeclaim != nodeclaim => {
                Adoption::Refuse(VerifyError::OtherClaim {
                    tagged: owner.nodeclaim,
                    expected: nodeclaim.to_owned(),
                })
            }
            Ok(Owner {
                proof: Proof::Tag, ..
            }) => Adoption::AlreadyOurs,
            Ok(_) => Adoption::Sign,
            Err(e) => Adoption::Refuse(e),
        }
    }
}

/// The current keyring, swappable when its Secret changes. Reads are cheap
/// clones of an `Arc`; a reload that fails validation keeps the old ring and
/// is reported by [`KeyringHandle::last_error`].
#[derive(Clone)]
pub struct KeyringHandle {
    current: Arc<RwLock<Arc<Keyring>>>,
    generation: Arc<tokio::sync::watch::Sender<u64>>,
    last_error: Arc<RwLock<Option<KeyringError>>>,
    _watcher: Option<Arc<AbortOnDrop>>,
}

/// Former name of [`KeyringHandle`].
pub type SharedKeyring = KeyringHandle;

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl KeyringHandle {
    pub fn new(keyring: Keyring) -> Self {
        let (generation, _) = tokio::sync::watch::channel(0);
        KeyringHandle {
            current: Arc::new(RwLock::new(Arc::new(keyring))),
            generation: Arc::new(generation),
            last_error: Arc::new(RwLock::new(None)),
            _watcher: None,
        }
    }

    pub fn current(&self) -> Arc<Keyring> {
        match self.current.read() {
            Ok(guard) => Arc::clone(&guard),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// How many reloads succeeded (0 = the initial keyring). Await
    /// `changed()` on the receiver to learn of the next one.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// Why the latest reload was rejected, if it was (cleared by a good reload).
    pub fn last_error(&self) -> Option<KeyringError> {
        match self.last_error.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Validates `raw` and swaps it in; on error the previous keyring stays.
    pub fn reload_from_json(&self, raw: &[u8]) -> Result<(), KeyringError> {
        self.outcome(Keyring::from_json(raw))
    }

    /// Like [`Self::reload_from_json`], from the Secret object.
    pub fn reload_from_secret(
        &self,
        secret: &k8s_openapi::api::core::v1::Secret,
    ) -> Result<(), KeyringError> {
        self.outcome(Keyring::from_secret(secret))
    }

    /// Swaps in `next` (already validated and checked by the caller) or records why not; the
    /// previous ring stays on error.
    pub fn outcome(&self, next: Result<Keyring, KeyringError>) -> Result<(), KeyringError> {
        let result = match next {
            Ok(next) => {
                self.replace(next);
                Ok(())
            }
            Err(err) => {
                tracing::error!(error = %err, "rejected new ownership keyring; keeping the previous one");
                Err(err)
            }
        };
        let stored = result.as_ref().err().cloned();
        match self.last_error.write() {
            Ok(mut g) => *g = stored,
            Err(p) => *p.into_inner() = stored,
        }
        result
    }

    /// Keeps `task` (the reload watch feeding this handle) running while any clone of the
    /// returned handle lives; the watch itself should hold a [`Self::detached`] clone.
    pub fn owning(mut self, task: tokio::task::JoinHandle<()>) -> Self {
        self._watcher = Some(Arc::new(AbortOnDrop(task)));
        self
    }

    /// A clone that does not keep the reload watch alive.
    pub fn detached(&self) -> Self {
        KeyringHandle {
            _watcher: None,
            ..self.clone()
        }
    }

    fn replace(&self, next: Keyring) {
        let active = next.active_key_id().to_string();
        match self.current.write() {
            Ok(mut guard) => *guard = Arc::new(next),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(next),
        }
        self.generation.send_modify(|g| *g += 1);
        tracing::info!(active_key_id = %active, "ownership keyring reloaded");
    }
}

impl fmt::Debug for KeyringHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("KeyringHandle")
            .field(&self.current())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RING: &str = r#"{"activeKeyID":"k1","keys":[{"id":"k1","key":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}]}"#;
    const OTHER_RING: &str = r#"{"activeKeyID":"k1","keys":[{"id":"k1","key":"ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="}]}"#;
    #[test]
    fn create_markers_prove_the_claim_only_under_its_deterministic_name() {
        let ring = Keyring::from_json(RING.as_bytes()).unwrap();
        let marker = ring.mark("prod", "claim-a").unwrap();
        assert!(marker.starts_with("kk:c:k1:claim-a:"), "{marker}");
        let description = compose_description("karpenter node claim-a", &marker);
        let name = crate::naming::instance_name("prod", "claim-a");
        let owner = ring.owner(&description, &name, "prod", "i-1").unwrap();
        assert_eq!(
            (owner.nodeclaim.as_str(), owner.proof),
            ("claim-a", Proof::Marker)
        );
        // A marker is not a tag, and a tag is not a marker.
        assert!(ring.verify(&marker, "prod", "i-1").is_err());
        let tag = ring.sign("prod", "claim-a", "i-1").unwrap();
        assert!(ring.verify_marker(&tag, "prod").is_err());
        // Another name, another cluster or another key: not ours.
        assert!(ring.owner(&description, "some-vm", "prod", "i-1").is_err());
        let other_name = crate::naming::instance_name("prod-eu", "claim-a");
        assert!(
            ring.owner(&description, &other_name, "prod-eu", "i-1")
                .is_err()
        );
        let other = Keyring::from_json(OTHER_RING.as_bytes()).unwrap();
        assert!(other.owner(&description, &name, "prod", "i-1").is_err());
        // The tag, once written, wins.
        let tagged = compose_description(&description, &tag);
        assert_eq!(
            ring.owner(&tagged, &name, "prod", "i-1").unwrap().proof,
            Proof::Tag
        );
        assert!(!tagged.contains("kk:c:"), "the tag replaces the marker");
    }

    #[test]
    fn adoption_signs_marked_instances_of_this_claim_only() {
        let ring = Keyring::from_json(RING.as_bytes()).unwrap();
        let ours = compose_description("", &ring.mark("prod", "claim-a").unwrap());
        assert_eq!(
            ring.adoption(&ours, "prod", "claim-a", "i-1"),
            Adoption::Sign
        );
        let other = compose_description("", &ring.mark("prod", "claim-b").unwrap());
        assert!(matches!(
            ring.adoption(&other, "prod", "claim-a", "i-1"),
            Adoption::Refuse(_)
        ));
    }

    #[test]
    fn adoption_signs_only_untagged_instances_and_keeps_ours() {
        let ring = Keyring::from_json(RING.as_bytes()).unwrap();
        let tag = ring.sign("prod", "claim-a", "i-1").unwrap();
        let ours = compose_description("worker", &tag);
        assert_eq!(
            ring.adoption("worker", "prod", "claim-a", "i-1"),
            Adoption::Sign
        );
        assert_eq!(
            ring.adoption(&ours, "prod", "claim-a", "i-1"),
            Adoption::AlreadyOurs
        );
        assert!(matches!(
            ring.adoption(&ours, "prod", "claim-b", "i-1"),
            Adoption::Refuse(VerifyError::OtherClaim { .. })
        ));
        assert!(
            matches!(
                ring.adoption(&ours, "prod-eu", "claim-a", "i-1"),
                Adoption::Refuse(_)
            ),
            "another cluster's tag is never re-signed"
        );
        let other_ring = Keyring::from_json(OTHER_RING.as_bytes()).unwrap();
        let theirs = compose_description("", &other_ring.sign("prod", "claim-a", "i-1").unwrap());
        assert!(matches!(
            ring.adoption(&theirs, "prod", "claim-a", "i-1"),
            Adoption::Refuse(_)
        ));
    }

    #[test]
    fn signability_is_known_before_any_instance_exists() {
        let ring = Keyring::from_json(RING.as_bytes()).unwrap();
        let fits = format!("{}.abcde", "n".repeat(58));
        assert!(ring.check_signable("prod", &fits).is_ok());
        let too_long = format!("{}.{}", "n".repeat(40), "x".repeat(40));
        assert!(matches!(
            ring.check_signable("prod", &too_long),
            Err(SignError::TooLong { .. })
        ));
        assert!(matches!(
            ring.check_signable("prod", "Not_A_Name"),
            Err(SignError::InvalidNodeClaim(_))
        ));
    }

    #[test]
    fn retiring_keys_is_seen_whether_removed_or_changed() {
        let ring = |json: &str| Keyring::from_json(json.as_bytes()).unwrap();
        let k1 = r#"{"id":"k1","key":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}"#;
        let k1_changed = r#"{"id":"k1","key":"ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="}"#;
        let k2 = r#"{"id":"k2","key":"ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="}"#;
        let old = ring(&format!(r#"{{"activeKeyID":"k1","keys":[{k1}]}}"#));
        let rotated = ring(&format!(r#"{{"activeKeyID":"k2","keys":[{k1},{k2}]}}"#));
        assert!(
            old.retired_by(&rotated).is_empty(),
            "adding a key retires nothing"
        );
        let removed = ring(&format!(r#"{{"activeKeyID":"k2","keys":[{k2}]}}"#));
        assert_eq!(rotated.retired_by(&removed), ["k1"]);
        let changed = ring(&format!(r#"{{"activeKeyID":"k1","keys":[{k1_changed}]}}"#));
        assert_eq!(old.retired_by(&changed), ["k1"], "same id, other bytes");
    }
}
