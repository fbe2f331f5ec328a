//! A team's own selector from scaffold to serving, on the real control plane: `kk-plugin new`,
//! its native cases, `kk-plugin build`, the same cases on the component, installed in shadow
//! beside the native default (its divergence counted in metrics, the `/plugins/shadow` view and
//! a `ShadowReport` Event, while nodes keep following the default), then promoted by removing
//! one label, after which the next node follows it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use kk_apis::crd;
use kk_apis::names::label;
use kk_plugin_runtime::{Bounds, Kind, Registry, Runtime, watcher};
use serde_json::json;

use crate::support::{
    Env, Options, deployment, eventually, kk_plugin_tool as kk_plugin, run_ok as ok,
};

/// Build directories kept between runs (shared with sdk/tool's author test).
fn cache(name: &str) -> std::path::PathBuf {
    std::env::var_os("KK_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(name)
}

/// Scaffolds, tests natively, builds and tests the component of the team's selector; returns
/// the component's path.
fn scaffold_and_build(dir: &Path) -> std::path::PathBuf {
    let krate = dir.join("team-selector");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The SDK of this checkout, named: a `kk-plugin` built from another checkout into a shared
    // target directory would otherwise point at that one.
    ok(Command::new(kk_plugin())
        .args(["new", "instance-selector", "team-selector", "--dir"])
        .arg(&krate)
        .arg("--sdk-path")
        .arg(workspace.join("sdk")));
    std::fs::copy(workspace.join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    ok(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["test", "--quiet", "--manifest-path"])
            .arg(krate.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", cache("author-target"))
            .env_remove("RUSTFLAGS"),
    );
    ok(Command::new(kk_plugin())
        .arg("build")
        .arg("--manifest-path")
        .arg(krate.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(cache("author-wasm-target"))
        .arg("--out-dir")
        .arg(dir));
    let component = dir.join("team-selector.wasm");
    let report = ok(Command::new(kk_plugin())
        .arg("test")
        .arg(&component)
        .arg("--cases")
        .arg(krate.join("cases")));
    assert!(report.contains("3 of 3 passed"), "{report}");
    component
}

/// The ConfigMap of `component` as plugin `team-selector` in `mode`, denying `family` (its
/// settings written into `dir`).
fn team_selector(
    component: &Path,
    namespace: &str,
    mode: &str,
    family: &str,
    dir: &Path,
) -> String {
    let config = dir.join("config.json");
    std::fs::write(&config, json!({"denyFamilies": [family]}).to_string()).unwrap();
    ok(Command::new(kk_plugin())
        .arg("configmap")
        .arg(component)
        .args([
            "--name",
            "team-selector",
            "--namespace",
            namespace,
            "--mode",
            mode,
            "--config",
        ])
        .arg(&config))
}

fn family(claim: &crd::NodeClaim) -> String {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label::INSTANCE_TYPE))
        .and_then(|t| t.split('.').next())
        .unwrap_or_default()
        .to_owned()
}

/// The NodeClaim made after the ones named in `before`.
async fn new_claim(env: &Env, before: &BTreeSet<String>) -> crd::NodeClaim {
    eventually("a new NodeClaim with its instance type", || async {
        env.nodeclaims().await.into_iter().find(|c| {
            !before.contains(c.metadata.name.as_deref().unwrap_or_default())
                && !family(c).is_empty()
        })
    })
    .await
}

async fn claim_names(env: &Env) -> BTreeSet<String> {
    env.nodeclaims()
        .await
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaffolded_selector_shadows_the_default_then_once_promoted_the_next_node_follows_it() {
    let scratch = tempfile::tempdir().unwrap();
    let component = tokio::task::spawn_blocking({
        let dir = scratch.path().to_owned();
        move || scaffold_and_build(&dir)
    })
    .await
    .unwrap();

    // The controller with the plugin seams and nothing loaded: the native default serves.
    let runtime = Runtime::new(Bounds::default(), None).unwrap();
    let plugin_metrics = Arc::new(kk_plugin_runtime::metrics::PluginMetrics::default());
    let registry = Registry::new(runtime, Some(plugin_metrics.clone()));
    let env = Env::start(Options {
        plugins: Some(registry.clone()),
        ..Options::default()
    })
    .await;
    let (plugins_ns, watch) = env.watch_plugins(&registry).await;
    let report = tokio::spawn(watcher::report_calls(
        env.kube.clone(),
        plugins_ns.clone(),
        registry.clone(),
        Duration::from_millis(200),
        1,
    ));
    let (base, server) = env.serve_views(&registry).await;
    let view = format!("{base}{}", karpenter_kakaocloud::views::SHADOW_PATH);

    env.apply_guide().await;
    let ns = env.cp.fresh_namespace("team").await.unwrap();
    // One pod per node, so every replica added opens a node.
    let one_per_node = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
    ]}}});
    let spread = |replicas| {
        deployment(
            "spread",
            replicas,
            "karpenter",
            json!({"requests": {"cpu": "500m", "memory": "512Mi"}}),
            one_per_node.clone(),
        )
    };
    env.apply_in(&ns, &spread(1));
    let first = new_claim(&env, &BTreeSet::new()).await;
    let native = family(&first);

    // The team's selector denies the family the default picks, in shadow.
    let manifest = team_selector(&component, &plugins_ns, "shadow", &native, scratch.path());
    env.apply_in(&plugins_ns, &manifest);
    eventually("the team selector in shadow", || async {
        registry.shadow(Kind::Selector).map(|_| ())
    })
    .await;
    assert!(registry.active(Kind::Selector).is_none());

    // The next node still follows the default; the shadow's other flavor is counted.
    let before = claim_names(&env).await;
    env.apply_in(&ns, &spread(2));
    let second = new_claim(&env, &before).await;
    assert_eq!(family(&second), native, "a shadow never acts");
    let client = reqwest::Client::new();
    let record = eventually("the divergence in /plugins/shadow", || async {
        let stats: serde_json::Value = client.get(&view).send().await.ok()?.json().await.ok()?;
        let team = stats
            .as_array()?
            .iter()
            .find(|s| s["plugin"] == "team-selector")?
            .clone();
        (team["diverged"]["flavor"].as_u64()? >= 1).then_some(team)
    })
    .await;
    let last = &record["recent"][record["recent"].as_array().unwrap().len() - 1];
    assert!(
        last["serving"].as_str().unwrap().starts_with(&native),
        "{record}"
    );
    assert!(
        !last["shadow"].as_str().unwrap().starts_with(&native),
        "{record}"
    );
    assert!(last["priceDeltaMicros"].as_i64().is_some(), "{record}");
    let note = eventually("a ShadowReport Event on the plugin's ConfigMap", || async {
        env.events("ShadowReport")
            .await
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("team-selector")
            })
            .filter_map(|e| e.note)
            .find(|n| n.contains("diverged (flavor"))
    })
    .await;
    assert!(
        note.contains("shadow instance-selector plugin team-selector"),
        "{note}"
    );
    let mut text = String::new();
    let mut prom = prometheus_client::registry::Registry::with_prefix("karpenter");
    plugin_metrics.register(&mut prom);
    prometheus_client::encoding::text::encode(&mut text, &prom).unwrap();
    assert!(
        text.lines().any(
            |l| l.starts_with("karpenter_kakaocloud_plugin_shadow_divergences_total")
                && l.contains("divergence=\"flavor\"")
                && l.contains("plugin=\"team-selector\"")
        ),
        "{text}"
    );

    // Promoted by removing one label: the next node follows the team's selector.
    env.kubectl(&[
        "-n",
        &plugins_ns,
        "label",
        "configmap",
        "team-selector",
        &format!("{}-", label::PLUGIN_MODE),
    ]);
    eventually("the team selector active", || async {
        registry
            .active(Kind::Selector)
            .filter(|p| p.name == "team-selector")
            .map(|_| ())
    })
    .await;
    assert!(registry.shadow(Kind::Selector).is_none());
    let before = claim_names(&env).await;
    env.apply_in(&ns, &spread(3));
    let third = new_claim(&env, &before).await;
    assert_ne!(family(&third), native, "the promoted selector decides");
    assert_eq!(
        family(&third),
        record["recent"][0]["shadow"]
            .as_str()
            .unwrap()
            .split('.')
            .next()
            .unwrap()
    );

    watch.abort();
    report.abort();
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodepool_uses_the_selector_it_names_and_one_naming_a_missing_plugin_falls_back_with_an_event()
 {
    let registry = Registry::new(Runtime::new(Bounds::default(), None).unwrap(), None);
    let env = Env::start(Options {
        plugins: Some(registry.clone()),
        ..Options::default()
    })
    .await;
    let (plugins_ns, watch) = env.watch_plugins(&registry).await;
    env.apply_guide().await;
    let ns = env.cp.fresh_namespace("pools").await.unwrap();
    let small = json!({"requests": {"cpu": "500m", "memory": "512Mi"}});
    env.apply_in(
        &ns,
        &deployment("on-default", 1, "karpenter", small.clone(), json!({})),
    );
    let first = new_claim(&env, &BTreeSet::new()).await;
    let native = family(&first);

    // The repository's selector, loaded only for the NodePools that name it, denying the
    // family the default picks.
    let scratch = tempfile::tempdir().unwrap();
    let component = kk_demo::plugin_component("instance-selector").unwrap();
    let manifest = team_selector(&component, &plugins_ns, "nodepool", &native, scratch.path());
    env.apply_in(&plugins_ns, &manifest);
    eventually("the team selector loaded by name", || async {
        registry.named(Kind::Selector, "team-selector").map(|_| ())
    })
    .await;
    assert!(
        registry.active(Kind::Selector).is_none(),
        "a nodepool-mode plugin is not its world's default"
    );

    let annotated = |name: &str, selector: &str| {
        let mut pool: serde_json::Value =
            serde_json::from_str(&crate::support::nodepool(name, json!({}), None)).unwrap();
        pool["metadata"]["annotations"] =
            json!({ kk_apis::names::annotation::NODEPOOL_INSTANCE_SELECTOR: selector });
        pool.to_string()
    };
    env.kubectl_apply(&annotated("team", "team-selector"));
    env.kubectl_apply(&annotated("lost", "no-such-selector"));
    eventually("the NodePools routed", || async {
        registry
            .serving(Kind::Selector, "team")
            .filter(|p| p.name == "team-selector")
            .map(|_| ())
    })
    .await;

    let before = claim_names(&env).await;
    env.apply_in(
        &ns,
        &deployment("on-team", 1, "team", small.clone(), json!({})),
    );
    let team = new_claim(&env, &before).await;
    assert_eq!(
        team.metadata.labels.as_ref().unwrap()[label::NODEPOOL],
        "team"
    );
    assert_ne!(
        family(&team),
        native,
        "the team NodePool's own selector decides"
    );

    // Naming a plugin that is not loaded: an Event on the NodePool, the default serves it.
    let note = eventually("a PluginNotLoaded Event on NodePool lost", || async {
        env.events("PluginNotLoaded")
            .await
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("lost"))
            .find_map(|e| e.note)
    })
    .await;
    assert!(note.contains("no-such-selector"), "{note}");
    let before = claim_names(&env).await;
    env.apply_in(
        &ns,
        &deployment("on-lost", 1, "lost", small.clone(), json!({})),
    );
    let lost = new_claim(&env, &before).await;
    assert_eq!(
        family(&lost),
        native,
        "the default serves a NodePool naming a missing plugin"
    );

    watch.abort();
}
