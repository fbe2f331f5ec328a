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
        None,
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

/// Runs the `kk-plugin` tool; its standard output.
fn kk_plugin(args: &[&str]) -> String {
    crate::support::run_ok(std::process::Command::new(crate::support::kk_plugin_tool()).args(args))
}

fn kubectl_apply(cp: &controlplane::ControlPlane, namespace: &str, yaml: &str) {
    use std::io::Write;
    let mut child = cp
        .kubectl()
        .args(["apply", "-n", namespace, "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The newest Event of `reason` whose note contains `needle`.
async fn event_note(events: &Api<Event>, reason: &str, needle: &str) -> String {
    poll(&format!("a {reason} event saying {needle:?}"), || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .find(|n| n.contains(needle))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_trust_root_only_plugins_signed_by_kk_plugin_load_and_failed_calls_are_evented() {
    use k8s_openapi::api::core::v1::Secret;
    use kk_engine::scheduling::{Candidate, Catalog, InstanceRanker, RankRequest, Resources};
    use kk_plugin_runtime::PluginRanker;

    let cp = controlplane::start(controlplane::Options::default())
        .await
        .unwrap();
    let client = cp.client().await;
    let ns = cp.fresh_namespace("signed").await.unwrap();
    let registry = Registry::new(Runtime::new(Bounds::default(), None).unwrap(), None);
    let (synced, mut first_list) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(watcher::run(
        client.clone(),
        ns.clone(),
        registry.clone(),
        Some("plugin-trust".into()),
        synced,
    ));
    let reporter = tokio::spawn(watcher::report_calls(
        client.clone(),
        ns.clone(),
        registry.clone(),
        Duration::from_millis(200),
        kk_plugin_runtime::shadow::REPORT_EVERY,
    ));
    first_list.wait_for(|done| *done).await.unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("team.pk8");
    let other = dir.path().join("other.pk8");
    let entry = kk_plugin(&["keygen", key.to_str().unwrap(), "team"]);
    kk_plugin(&["keygen", other.to_str().unwrap(), "team"]);
    let wasm = dir.path().join("hostile.wasm");
    std::fs::write(&wasm, component("hostile-selector")).unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, r#"{"mode": "trap-on-one"}"#).unwrap();
    let configmap = |extra: &[&str]| {
        let mut args = vec![
            "configmap",
            wasm.to_str().unwrap(),
            "--name",
            "selector",
            "--world",
            "instance-selector",
            "--namespace",
            &ns,
            "--config",
            config.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        kk_plugin(&args)
    };
    let signed = configmap(&["--sign-key", key.to_str().unwrap(), "--key-id", "team"]);
    assert!(signed.contains(annotation::PLUGIN_SIGNATURE), "{signed}");

    // Configured but absent: fail closed.
    kubectl_apply(&cp, &ns, &signed);
    event_note(
        &events,
        "PluginRejected",
        "Secret plugin-trust does not exist",
    )
    .await;
    assert!(registry.active(Kind::Selector).is_none());

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let trust = format!(r#"{{"keys":[{}]}}"#, entry.trim());
    secrets
        .create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "plugin-trust"},
                "stringData": {"trust.json": trust},
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    // Unsigned, and signed by a key of the same id that is not the trusted one: refused.
    kubectl_apply(&cp, &ns, &configmap(&[]));
    event_note(&events, "PluginRejected", "carries no signature").await;
    kubectl_apply(
        &cp,
        &ns,
        &configmap(&["--sign-key", other.to_str().unwrap(), "--key-id", "team"]),
    );
    event_note(
        &events,
        "PluginRejected",
        "does not verify under key \"team\"",
    )
    .await;
    assert!(registry.active(Kind::Selector).is_none());

    // Signed by the trusted key: active.
    kubectl_apply(&cp, &ns, &signed);
    poll("the signed selector active", || async {
        registry.active(Kind::Selector).map(|_| ())
    })
    .await;

    // Its settings changed after signing: refused, the signed one keeps serving.
    let resettled = signed.replace(r#""mode": "trap-on-one""#, r#""mode": "trap""#);
    assert_ne!(resettled, signed, "the settings were edited");
    kubectl_apply(&cp, &ns, &resettled);
    event_note(&events, "PluginRejected", "does not verify").await;
    assert!(registry.active(Kind::Selector).is_some());

    // A call the self-test never made traps: the native ranking answers and an Event says so.
    let types = vec![kk_engine::scheduling::instance_types::InstanceType::new(
        "m2a.large",
        Resources::new(2000, 8 << 30, 110),
        vec![kk_engine::scheduling::instance_types::Offering {
            zone: "kr-central-2-a".into(),
            capacity_type: "on-demand".into(),
            price_micros: 100_000,
            available: true,
        }],
    )];
    let catalog = Catalog::new(&types);
    let candidates = [Candidate::available(&catalog, 0)];
    let order = PluginRanker {
        registry: registry.clone(),
    }
    .rank(&RankRequest {
        node_pool: "default",
        requests: Resources::new(500, 1 << 30, 1),
        catalog,
        candidates: &candidates,
    })
    .expect("the native ranking answers");
    assert_eq!(order, [0]);
    let note = event_note(&events, "PluginFallback", "answered by the native default").await;
    assert!(
        note.contains("1 call(s)") && note.contains("trapped"),
        "{note}"
    );

    reporter.abort();
    task.abort();
}
