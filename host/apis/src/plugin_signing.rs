//! What a plugin signature covers. `kk-plugin` signs this message and the plugin runtime
//! verifies it, so both build it here.
//!
//! The message binds the world, the sha256 of the uncompressed component and the sha256 of the
//! `config.json` text exactly as the ConfigMap holds it: a signed selector cannot be loaded as
//! a renderer, and its settings (which can change what it does) cannot be swapped.

use sha2::{Digest, Sha256};

/// Domain separation: these signatures mean nothing in any other protocol.
const DOMAIN: &str = "karpenter-kakaocloud/plugin-signature/v1";

/// The bytes an ed25519 plugin signature is over.
pub fn message(world: &str, component_sha256: &str, config: &str) -> Vec<u8> {
    let config_sha256 = hex::encode(Sha256::digest(config.as_bytes()));
    format!(
        "{DOMAIN}\n{world}\n{}\n{config_sha256}\n",
        component_sha256.trim().to_ascii_lowercase()
    )
    .into_bytes()
}

/// The annotation value: `<keyID>:<base64 signature>`.
pub fn annotation(key_id: &str, signature_base64: &str) -> String {
    format!("{key_id}:{signature_base64}")
}

/// Splits an annotation value into key ID and base64 signature.
pub fn parse_annotation(value: &str) -> Option<(&str, &str)> {
    let (id, sig) = value.trim().split_once(':')?;
    (!id.is_empty() && !sig.is_empty()).then_some((id, sig))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_binds_world_component_and_config() {
        let base = message("instance-selector", "ab", "{}");
        assert_ne!(base, message("userdata-renderer", "ab", "{}"));
        assert_ne!(base, message("instance-selector", "ac", "{}"));
        assert_ne!(base, message("instance-selector", "ab", "{ }"));
        assert_eq!(base, message("instance-selector", " AB ", "{}"));
    }

    #[test]
    fn annotations_round_trip_and_malformed_ones_are_none() {
        assert_eq!(
            parse_annotation(&annotation("k1", "c2ln")),
            Some(("k1", "c2ln"))
        );
        for bad in ["", "k1", ":c2ln", "k1:"] {
            assert_eq!(parse_annotation(bad), None, "{bad:?}");
        }
    }
}
