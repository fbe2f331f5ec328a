//! Signed ownership tags: round trip, rotation, every forgery rejected, and
//! strict keyring validation.

use base64::Engine as _;
use kakaocloud::api::INSTANCE_DESCRIPTION_MAX;
use kakaocloud::ownership::{
    Keyring, KeyringError, KeyringHandle, SignError, VerifyError, compose_description, tags_in,
};
use proptest::prelude::*;

fn key(byte: u8) -> String {
    base64::engine::general_purpose::STANDARD.encode([byte; 32])
}

fn ring(active: &str, keys: &[(&str, u8)]) -> Keyring {
    let keys: Vec<_> = keys
        .iter()
        .map(|(id, b)| serde_json::json!({"id": id, "key": key(*b)}))
        .collect();
    let json = serde_json::json!({"activeKeyID": active, "keys": keys});
    Keyring::from_json(json.to_string().as_bytes()).expect("valid keyring")
}

const CLUSTER: &str = "demo-cluster";
const INSTANCE: &str = "3f2b8c1e-0d4a-4e6f-9a7b-1c2d3e4f5a6b";

#[test]
fn round_trip_names_the_nodeclaim_and_key() {
    let k = ring("k1", &[("k1", 1)]);
    let tag = k.sign(CLUSTER, "default-x7k2p", INSTANCE).unwrap();
    let owner = k.verify(&tag, CLUSTER, INSTANCE).unwrap();
    assert_eq!(
        (owner.nodeclaim.as_str(), owner.key_id.as_str()),
        ("default-x7k2p", "k1")
    );
    // The tag sits in a description next to human text.
    let description = compose_description("managed by karpenter", &tag);
    assert!(description.chars().count() <= INSTANCE_DESCRIPTION_MAX);
    assert_eq!(
        k.verify_description(&description, CLUSTER, INSTANCE)
            .unwrap(),
        owner
    );
    assert_eq!(tags_in(&description).count(), 1);
}

#[test]
fn longest_nodeclaim_tag_fits_the_description_limit() {
    let k = ring("abcdefg", &[("abcdefg", 1)]);
    // With the longest key ID, NodeClaim names up to 64 characters fit.
    let name = format!("{}.abcde", "n".repeat(58));
    assert_eq!(name.len(), 64);
    let tag = k.sign(CLUSTER, &name, INSTANCE).unwrap();
    assert_eq!(tag.len(), INSTANCE_DESCRIPTION_MAX);
    assert!(k.verify(&tag, CLUSTER, INSTANCE).is_ok());
    let too_long = format!("{}.abcde", "n".repeat(59));
    assert_eq!(
        k.sign(CLUSTER, &too_long, INSTANCE),
        Err(SignError::TooLong { len: 101 })
    );
}

#[test]
fn rotation_keeps_old_tags_valid_and_signs_with_the_new_key() {
    let old = ring("k1", &[("k1", 1)]);
    let old_tag = old.sign(CLUSTER, "a", INSTANCE).unwrap();
    let rotated = ring("k2", &[("k1", 1), ("k2", 2)]);
    assert_eq!(
        rotated.verify(&old_tag, CLUSTER, INSTANCE).unwrap().key_id,
        "k1"
    );
    let new_tag = rotated.sign(CLUSTER, "a", INSTANCE).unwrap();
    assert!(new_tag.contains(":k2:"));
    assert_eq!(
        rotated.verify(&new_tag, CLUSTER, INSTANCE).unwrap().key_id,
        "k2"
    );
    // Retiring k1 retires its tags.
    let retired = ring("k2", &[("k2", 2)]);
    assert_eq!(
        retired.verify(&old_tag, CLUSTER, INSTANCE),
        Err(VerifyError::UnknownKey("k1".into()))
    );
}

#[test]
fn forgeries_are_rejected() {
    let k = ring("k1", &[("k1", 1)]);
    let tag = k.sign(CLUSTER, "pool-a", INSTANCE).unwrap();

    // Foreign cluster and copied to another instance.
    assert_eq!(
        k.verify(&tag, "other-cluster", INSTANCE),
        Err(VerifyError::BadSignature)
    );
    assert_eq!(
        k.verify(&tag, CLUSTER, "another-instance-id"),
        Err(VerifyError::BadSignature)
    );
    // Same key ID, different key (another cluster's keyring).
    let impostor = ring("k1", &[("k1", 9)]);
    let forged = impostor.sign(CLUSTER, "pool-a", INSTANCE).unwrap();
    assert_eq!(
        k.verify(&forged, CLUSTER, INSTANCE),
        Err(VerifyError::BadSignature)
    );
    // Unknown key.
    let other = ring("k9", &[("k9", 1)]);
    let unknown = other.sign(CLUSTER, "pool-a", INSTANCE).unwrap();
    assert_eq!(
        k.verify(&unknown, CLUSTER, INSTANCE),
        Err(VerifyError::UnknownKey("k9".into()))
    );
    // NodeClaim name swapped.
    let swapped = tag.replace(":pool-a:", ":pool-b:");
    assert_eq!(
        k.verify(&swapped, CLUSTER, INSTANCE),
        Err(VerifyError::BadSignature)
    );
    // Truncated, extended, malformed.
    for bad in [
        &tag[..tag.len() - 1],
        &tag[..tag.len() - 5],
        &format!("{tag}A"),
        &format!("{tag}:extra"),
        "kk:1:k1:pool-a",
        "kk:",
        "",
        "hello",
        &tag.replacen("kk:1:", "kk:2:", 1),
        &tag.replacen("kk:", "KK:", 1),
    ] {
        assert!(
            k.verify(bad, CLUSTER, INSTANCE).is_err(),
            "{bad:?} verified"
        );
    }
    assert_eq!(
        k.verify_description("no tag here", CLUSTER, INSTANCE),
        Err(VerifyError::NoTag)
    );
}

#[test]
fn bad_keyrings_are_clear_errors() {
    let k32 = key(1);
    #[allow(clippy::type_complexity)] // (keyring text, expected error)
    let cases: Vec<(String, fn(&KeyringError) -> bool)> = vec![
        ("not json".into(), |e| matches!(e, KeyringError::Parse(_))),
        (r#"{"keys":[]}"#.into(), |e| {
            matches!(e, KeyringError::MissingActiveKeyId)
        }),
        (r#"{"activeKeyID":"k1","keys":[]}"#.into(), |e| {
            matches!(e, KeyringError::NoKeys)
        }),
        (
            format!(
                r#"{{"activeKeyID":"k1","keys":[{{"id":"k1","key":"{}"}}]}}"#,
                key(1).replace('=', "").replace('A', "*")
            ),
            |e| matches!(e, KeyringError::BadBase64 { .. }),
        ),
        (
            format!(
                r#"{{"activeKeyID":"k1","keys":[{{"id":"k1","key":"{}"}}]}}"#,
                base64::engine::general_purpose::STANDARD.encode([1u8; 16])
            ),
            |e| matches!(e, KeyringError::ShortKey { len: 16, .. }),
        ),
        (
            format!(r#"{{"activeKeyID":"toolong8","keys":[{{"id":"toolong8","key":"{k32}"}}]}}"#),
            |e| matches!(e, KeyringError::InvalidKeyId { .. }),
        ),
        (
            format!(r#"{{"activeKeyID":"k2","keys":[{{"id":"k1","key":"{k32}"}}]}}"#),
            |e| matches!(e, KeyringError::ActiveKeyAbsent(_)),
        ),
        (
            format!(
                r#"{{"activeKeyID":"k1","keys":[{{"id":"k1","key":"{k32}"}},{{"id":"k1","key":"{k32}"}}]}}"#
            ),
            |e| matches!(e, KeyringError::DuplicateKeyId(_)),
        ),
        (
            r#"{"activeKeyID":"k1","keys":[{"id":"k1"}]}"#.to_string(),
            |e| matches!(e, KeyringError::Parse(_)),
        ),
    ];
    for (json, expected) in cases {
        let err = Keyring::from_json(json.as_bytes()).unwrap_err();
        assert!(expected(&err), "{json}: got {err:?}");
        // Error text never carries key material.
        assert!(!err.to_string().contains(&k32), "{err}");
    }
}

#[test]
fn keyring_debug_hides_keys() {
    let k = ring("k1", &[("k1", 7)]);
    let shown = format!("{k:?}");
    assert!(shown.contains("k1"));
    assert!(!shown.contains(&key(7)));
}

#[test]
fn handle_reload_swaps_valid_rings_and_keeps_the_old_one_on_error() {
    let handle = KeyringHandle::new(ring("k1", &[("k1", 1)]));
    let mut changes = handle.subscribe();
    let tag = handle.current().sign(CLUSTER, "a", INSTANCE).unwrap();
    let good = serde_json::json!({"activeKeyID":"k2","keys":[{"id":"k1","key":key(1)},{"id":"k2","key":key(2)}]});
    handle
        .reload_from_json(good.to_string().as_bytes())
        .unwrap();
    assert!(changes.has_changed().unwrap());
    changes.mark_unchanged();
    assert_eq!(handle.current().active_key_id(), "k2");
    assert!(handle.current().verify(&tag, CLUSTER, INSTANCE).is_ok());
    assert_eq!(handle.generation(), 1);

    let err = handle
        .reload_from_json(br#"{"activeKeyID":"k3","keys":[]}"#)
        .unwrap_err();
    assert_eq!(err, KeyringError::NoKeys);
    assert_eq!(handle.current().active_key_id(), "k2", "old ring kept");
    assert_eq!(handle.last_error(), Some(KeyringError::NoKeys));
    assert!(!changes.has_changed().unwrap());
    assert_eq!(handle.generation(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No single-byte change of a valid tag verifies.
    #[test]
    fn no_single_byte_change_verifies(
        nodeclaim in "[a-z][a-z0-9-]{0,30}[a-z0-9]",
        position in any::<prop::sample::Index>(),
        replacement in any::<u8>(),
    ) {
        let k = ring("k1", &[("k1", 3)]);
        let tag = k.sign(CLUSTER, &nodeclaim, INSTANCE).unwrap();
        let mut bytes = tag.clone().into_bytes();
        let i = position.index(bytes.len());
        prop_assume!(bytes[i] != replacement);
        bytes[i] = replacement;
        // A change that breaks UTF-8 cannot even be a description.
        if let Ok(changed) = String::from_utf8(bytes) {
            prop_assert!(k.verify(&changed, CLUSTER, INSTANCE).is_err(), "{changed:?} verified");
            prop_assert!(k.verify_description(&changed, CLUSTER, INSTANCE).is_err());
        }
    }

    /// Truncating a tag anywhere makes it invalid.
    #[test]
    fn no_truncation_verifies(cut in 0usize..60) {
        let k = ring("k1", &[("k1", 3)]);
        let tag = k.sign(CLUSTER, "default-abcde", INSTANCE).unwrap();
        let cut = cut.min(tag.len() - 1);
        prop_assert!(k.verify(&tag[..cut], CLUSTER, INSTANCE).is_err());
    }
}
