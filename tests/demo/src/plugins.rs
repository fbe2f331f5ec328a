//! Plugin artifacts: the built components, their ConfigMaps, and swapping the selector.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use kube::api::{Api, ListParams};

use crate::*;

/// A plugin component built by scripts/build-plugins.sh (`<crate_file>.wasm` in $KK_PLUGIN_DIR).
pub fn plugin_component(crate_file: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("KK_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/karpenter-kakaocloud/plugins")
        });
    let path = dir.join(format!("{crate_file}.wasm"));
    if !path.is_file() {
        bail!(
            "{} is missing: run scripts/build-plugins.sh",
            path.display()
        );
    }
    Ok(path)
}

/// The family of an instance type name (`r2a` of `r2a.large`).
pub fn family(instance_type: &str) -> &str {
    instance_type.split('.').next().unwrap_or_default()
}

/// A general-purpose family none of `instance_types` belongs to: what the hot-swap demos ask
/// the example selector to prefer, so its effect is visible.
pub fn family_not_among(instance_types: &[String]) -> &'static str {
    ["r2a", "m2a", "c2a"]
        .into_iter()
        .find(|f| !instance_types.iter().any(|t| family(t) == *f))
        .expect("three families, the default picks at most two")
}

/// The bytes of a built plugin component (see [`plugin_component`]).
pub fn read_plugin(crate_file: &str) -> anyhow::Result<Vec<u8>> {
    let path = plugin_component(crate_file)?;
    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
}

/// A plugin ConfigMap of the release namespace, as scripts/plugin-configmap.sh writes it: the
/// gzip component, `digest` as its sha256 annotation, the world label, `config` as config.json.
pub fn plugin_configmap_json(
    name: &str,
    world: &str,
    wasm: &[u8],
    digest: &str,
    config: &str,
) -> anyhow::Result<String> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(wasm)?;
    let cm = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {kk_apis::names::label::PLUGIN_WORLD: world},
            "annotations": {kk_apis::names::annotation::PLUGIN_SHA256: digest},
        },
        "data": {"config.json": config},
        "binaryData": {"plugin.wasm": base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            gz.finish()?,
        )},
    });
    Ok(cm.to_string())
}

impl Cluster {
    /// The hot swap: replaces the `instance-selector` ConfigMap (the chart's) with the built
    /// component `crate_file` (e.g. `gpu_aware_selector`) and `config`, as
    /// `scripts/plugin-configmap.sh <crate> --name instance-selector | kubectl apply -f -` does.
    /// Returns the component's sha256.
    pub fn swap_selector(&self, crate_file: &str, config: &str) -> anyhow::Result<String> {
        let wasm = read_plugin(crate_file)?;
        let digest = kk_plugin_runtime::engine::sha256_hex(&wasm);
        let cm = plugin_configmap_json(
            "instance-selector",
            "instance-selector",
            &wasm,
            &digest,
            config,
        )?;
        self.kubectl(&["apply", "-f", "-"], Some(&cm))?;
        Ok(digest)
    }

    /// Events the controllers published on plugin ConfigMap `name`: (reason, message).
    pub async fn plugin_events(&self, name: &str) -> anyhow::Result<Vec<(String, String)>> {
        let events =
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(self.kube.clone(), NAMESPACE)
                .list(&ListParams::default())
                .await?;
        Ok(events
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ConfigMap")
            })
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect())
    }

    /// Waits until the controllers published a `reason` Event on plugin ConfigMap `name` whose
    /// message contains `containing`; returns the message.
    pub async fn wait_plugin_event(
        &self,
        name: &str,
        reason: &str,
        containing: &str,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        wait_for(&format!("a {reason} Event on {name}"), timeout, || async {
            Ok(self
                .plugin_events(name)
                .await?
                .into_iter()
                .find(|(r, n)| r == reason && n.contains(containing))
                .map(|(_, n)| n))
        })
        .await
    }

    /// A second NodePool (`swap-demo`, same KCNodeClass) and a one-replica Deployment that only
    /// it can serve, so the next node is a new one whose flavor the active selector chose.
    pub fn apply_swap_workload(&self) -> anyhow::Result<()> {
        let manifest = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: swap-demo
spec:
  template:
    metadata:
      labels:
        workload-type: swap-demo
    spec:
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand"]
      nodeClassRef:
        group: karpenter.kakaocloud.com
        kind: KCNodeClass
        name: karpenter-default
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: swap-demo
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: swap-demo}
  template:
    metadata:
      labels: {app: swap-demo}
    spec:
      nodeSelector:
        workload-type: swap-demo
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          resources:
            requests: {cpu: "1", memory: 2Gi}
"#;
        self.kubectl(&["apply", "-f", "-"], Some(manifest))?;
        Ok(())
    }
}
