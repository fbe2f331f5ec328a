//! The plugin ConfigMap watcher against a real API server: apply loads, a bad update is refused
//! with an Event while the previous plugin serves, deleting the ConfigMap reverts to the native
//! default.

use kk_apis::names::{annotation, label};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kk_plugin_runtime::engine::sha256_hex;
use kk_plugin_runtime::{Bounds, Kind, Registry, Runtime, WASM_KEY, watcher};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};

fn component(name: &str) -> Vec<u8> {
    kk_demo::read_plugin(name).unwrap_or_else(|e| panic!("{e:#}"))
}

fn configmap(namespace: &str, wasm: &[u8], digest: &str, config: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("instance-selector".into()),
            namespace: Some(namespace.into()),
            labels: Some(
                [(
                    label::PLUGIN_WORLD.to_owned(),
                    "instance-selector".to_owned(),
                )]
                .into(),
            ),
            annotations: Some([(annotation::PLUGIN_SHA256.to_owned(), digest.to_owned())].into()),
            ..Default::default()
        },
        data: Some([("config.json".to_owned(), config.to_owned())].into()),
        binary_data: Some([(WASM_KEY.to_owned(), ByteString(wasm.to_vec()))].into()),
        ..Default::default()
    }
}

async fn poll<T, F, Fut>(what: &str, check: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmaps_load_swap_refuse_and_revert() {
    let cp = controlplane::start(controlplane::Options::default())
        .await
        .unwrap();
    let client = cp.client().await;
    let ns = cp.fresh_namespace("plugins").await.unwrap();
    let registry = Registry::new(Runtime::new(Bounds::default(), None).unwrap(), None);
    let (synced, mut first_list) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(watcher::run(
        client.clone(),
        ns.clone(),
        registry.clone(),
        synced,
    ));
    first_list.wait_for(|done| *done).await.unwrap();
    assert!(
        registry.active(Kind::Selector).is_none(),
        "nothing yet: native default"
    );

    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let apply = |cm: ConfigMap| {
        let maps = maps.clone();
        async move {
            maps.patch(
                "instance-selector",
                &PatchParams::apply("test").force(),
                &Patch::Apply(&cm),
            )
            .await
            .unwrap();
        }
    };
    let selector = component("instance-selector");
    let good = sha256_hex(&selector);
    apply(configmap(&ns, &selector, &good, "{}")).await;
    poll("the selector active", || async {
        registry
            .active(Kind::Selector)
            .filter(|l| l.digest == good)
            .map(|_| ())
    })
    .await;

    // An update to another component (the example) swaps it.
    let example = component("gpu-aware-selector");
    let example_digest = sha256_hex(&example);
    apply(configmap(
        &ns,
        &example,
        &example_digest,
        r#"{"preferFamilies": ["r2a"]}"#,
    ))
    .await;
    poll("the example active", || async {
        registry
            .active(Kind::Selector)
            .filter(|l| l.digest == example_digest)
            .map(|_| ())
    })
    .await;

    // A wrong digest is refused with an Event; the example keeps serving.
    apply(configmap(&ns, &selector, &example_digest, "{}")).await;
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let note = poll("a PluginRejected event", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("PluginRejected"))
            .and_then(|e| e.note)
    })
    .await;
    assert!(note.contains("digest mismatch"), "{note}");
    assert_eq!(
        registry.active(Kind::Selector).unwrap().digest,
        example_digest
    );

    // Deleting the ConfigMap reverts to the native default.
    maps.delete("instance-selector", &DeleteParams::default())
        .await
        .unwrap();
    poll("the native default back", || async {
        registry.active(Kind::Selector).is_none().then_some(())
    })
    .await;
    task.abort();
}
