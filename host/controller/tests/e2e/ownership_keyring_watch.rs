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

    match watch_keyring(client.clone(), &ns, "karpenter-sigkey", None).await {
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
    match watch_keyring(client.clone(), &ns, "bad", None).await {
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
    let handle = watch_keyring(client.clone(), &ns, "karpenter-sigkey", None)
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

#[tokio::test]
async fn a_reload_that_would_orphan_live_instances_is_refused() {
    use kakaocloud::ownership::compose_description;
    use kakaocloud_sim::{SimConfig, Simulator};
    use karpenter_kakaocloud::keyring::RetireGuard;

    kakaocloud::install_crypto_provider();
    let cp = controlplane::shared().await;
    let client = cp.client().await;
    let ns = cp.fresh_namespace("keyguard").await.unwrap();
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let cloud = kakaocloud::Client::new(sim.client_config(), sim.credentials()).unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &secret(
                "karpenter-sigkey",
                &keyring_json("k1", &[("k1", 1), ("k2", 2)]),
            ),
        )
        .await
        .unwrap();
    let guard = RetireGuard {
        cloud: cloud.clone(),
        cluster: "demo-cluster".into(),
    };
    let handle = watch_keyring(client.clone(), &ns, "karpenter-sigkey", Some(guard))
        .await
        .unwrap();

    // A live instance of this cluster, signed with k1.
    let instance = cloud
        .instances()
        .create(&crate::kakaocloud_client::spec("kk-guarded-1"))
        .await
        .unwrap();
    let tag = handle
        .current()
        .sign("demo-cluster", "claim-a", &instance.id)
        .unwrap();
    cloud
        .instances()
        .update_description(&instance.id, &compose_description("worker", &tag))
        .await
        .unwrap();

    // Dropping k1 would orphan it: refused, k1 keeps verifying.
    let replace = |json: String| {
        let secrets = secrets.clone();
        async move {
            let mut s = secrets.get("karpenter-sigkey").await.unwrap();
            s.data = secret("x", &json).data;
            secrets
                .replace("karpenter-sigkey", &PostParams::default(), &s)
                .await
                .unwrap();
        }
    };
    replace(keyring_json("k2", &[("k2", 2)])).await;
    controlplane::eventually("refused reload", Duration::from_secs(30), || {
        let handle = handle.clone();
        async move { Ok(handle.last_error().map(|_| ())) }
    })
    .await
    .unwrap();
    assert!(
        matches!(
            handle.last_error(),
            Some(KeyringError::KeysInUse { ref ids, instances: 1 }) if ids == &["k1".to_owned()]
        ),
        "{:?}",
        handle.last_error()
    );
    assert_eq!(handle.generation(), 0);
    assert!(
        handle
            .current()
            .verify(&tag, "demo-cluster", &instance.id)
            .is_ok()
    );
    // Changing k1's bytes under the same ID is the same orphaning, and refused too.
    replace(keyring_json("k1", &[("k1", 9), ("k2", 2)])).await;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    controlplane::eventually(
        "two refusals, each with an Event",
        Duration::from_secs(30),
        || {
            let events = events.clone();
            async move {
                let refused = events
                    .list(&Default::default())
                    .await?
                    .items
                    .into_iter()
                    .filter(|e| e.reason.as_deref() == Some("KeyringReloadRefused"))
                    .map(|e| {
                        e.deprecated_count
                            .unwrap_or(1)
                            .max(e.series.map_or(1, |s| s.count))
                    })
                    .sum::<i32>();
                Ok((refused >= 2).then_some(()))
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(handle.generation(), 0, "the old ring still serves");

    // Once no live instance uses k1, the same ring is accepted.
    cloud
        .instances()
        .delete_owned(&instance.id, &handle.current(), "demo-cluster", "claim-a")
        .await
        .unwrap();
    // Deleting is not gone: until the instance answers 404 it still carries k1's tag.
    controlplane::eventually("instance gone", Duration::from_secs(30), || {
        let cloud = cloud.clone();
        let id = instance.id.clone();
        async move {
            Ok(matches!(
                cloud.instances().get(&id).await,
                Err(kakaocloud::Error::NotFound { .. })
            )
            .then_some(()))
        }
    })
    .await
    .unwrap();
    replace(keyring_json("k2", &[("k2", 2)])).await;
    let mut changes = handle.subscribe();
    tokio::time::timeout(Duration::from_secs(30), changes.wait_for(|g| *g >= 1))
        .await
        .expect("accepted within 30 s")
        .unwrap();
    assert_eq!(handle.current().active_key_id(), "k2");
    sim.shutdown().await;
}
