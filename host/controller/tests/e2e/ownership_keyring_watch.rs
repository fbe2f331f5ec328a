//! The keyring is read from its Secret at startup (a bad or missing one is
//! an error) and reloaded when the Secret changes; an invalid update keeps
//! the previous keyring. Runs against the shared test control plane (built
//! by `tests/controlplane/build.sh`, run by `scripts/test.sh`).

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kakaocloud::ownership::{KeyringError, SECRET_KEY};
use karpenter_kakaocloud::keyring::{KeyringLoadError, watch_keyring};
use kube::api::{Api, ObjectMeta, PostParams};

fn keyring_json(active: &str, ids: &[(&str, u8)]) -> String {
    let keys: Vec<_> = ids
        .iter()
        .map(|(id, b)| serde_json::json!({"id": id, "key": base64::engine::general_purpose::STANDARD.encode([*b; 32])}))
        .collect();
    serde_json::json!({"activeKeyID": active, "keys": keys}).to_string()
}

fn secret(name: &str, json: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_string(),
            ByteString(json.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

#[tokio::test]
async fn keyring_is_loaded_validated_and_reloaded_from_its_secret() {
    let cp = controlplane::shared().await;
    let client = cp.client().await;
    let ns = cp.fresh_namespace("keyring").await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);

    match watch_keyring(client.clone(), &ns, "karpenter-sigkey").await {
        Err(KeyringLoadError::Missing { .. }) => {}
        other => panic!("expected Missing, got {other:?}"),
    }
    secrets
        .create(
            &PostParams::default(),
            &secret("bad", r#"{"activeKeyID":"k1","keys":[]}"#),
        )
        .await
        .unwrap();
    match watch_keyring(client.clone(), &ns, "bad").await {
        Err(KeyringLoadError::Invalid {
            source: KeyringError::NoKeys,
            ..
        }) => {}
        other => panic!("expected Invalid(NoKeys), got {other:?}"),
    }

    let initial = secret("karpenter-sigkey", &keyring_json("k1", &[("k1", 1)]));
    secrets
        .create(&PostParams::default(), &initial)
        .await
        .unwrap();
    let handle = watch_keyring(client.clone(), &ns, "karpenter-sigkey")
        .await
        .unwrap();
    assert_eq!(handle.current().active_key_id(), "k1");
    let old_tag = handle
        .current()
        .sign("demo-cluster", "pool-a-1", "i-1")
        .unwrap();

    // Rotation: add k2 and make it active.
    let mut rotated = secrets.get("karpenter-sigkey").await.unwrap();
    rotated.data = secret("x", &keyring_json("k2", &[("k1", 1), ("k2", 2)])).data;
    secrets
        .replace("karpenter-sigkey", &PostParams::default(), &rotated)
        .await
        .unwrap();
    let mut changes = handle.subscribe();
    tokio::time::timeout(Duration::from_secs(30), changes.wait_for(|g| *g >= 1))
        .await
        .expect("reload within 30 s")
        .unwrap();
    assert_eq!(handle.current().active_key_id(), "k2");
    assert!(
        handle
            .current()
            .verify(&old_tag, "demo-cluster", "i-1")
            .is_ok(),
        "old tags still verify"
    );

    // An invalid update is rejected and the rotated keyring stays.
    let mut broken = secrets.get("karpenter-sigkey").await.unwrap();
    broken.data = secret("x", r#"{"activeKeyID":"toolongid","keys":[]}"#).data;
    secrets
        .replace("karpenter-sigkey", &PostParams::default(), &broken)
        .await
        .unwrap();
    controlplane::eventually("rejected reload", Duration::from_secs(30), || {
        let handle = handle.clone();
        async move { Ok(handle.last_error().map(|_| ())) }
    })
    .await
    .unwrap();
    assert!(matches!(
        handle.last_error(),
        Some(KeyringError::InvalidKeyId { .. })
    ));
    assert_eq!(handle.current().active_key_id(), "k2");
    assert_eq!(handle.generation(), 1);
}
