//! Plugin ConfigMaps in the system namespace (labelled with their world) to registry updates:
//! an apply or change loads and swaps, a deletion reverts to the native default, and every
//! outcome is an Event on the ConfigMap. With a trust root Secret configured, it is read at
//! every load (so a rotation needs no restart, and a missing or broken root refuses plugins).
//! [`report_calls`] turns failed calls answered by the native default, and shadow plugins'
//! findings, into Events. A ConfigMap labelled `plugin-mode=shadow` loads as its world's shadow
//! (`crate::shadow`); removing the label promotes it.

use kk_apis::names::{annotation, label};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::registry::{Mode, Registry, Source, Trust};
use super::trust::{self, TrustRoot};
use super::{CONFIG_KEY, Kind, PluginError, WASM_KEY};

/// What a plugin ConfigMap says, or why it cannot be read.
pub fn source_of(cm: &ConfigMap) -> Result<Source, PluginError> {
    let world = cm
        .labels()
        .get(label::PLUGIN_WORLD)
        .cloned()
        .unwrap_or_default();
    let kind = Kind::from_world(&world)
        .ok_or_else(|| PluginError::Invalid(format!("label {}={world:?} is not one of instance-selector, consolidation-scorer, userdata-renderer", label::PLUGIN_WORLD)))?;
    let digest = cm
        .annotations()
        .get(annotation::PLUGIN_SHA256)
        .cloned()
        .ok_or_else(|| {
            PluginError::Invalid(format!(
                "annotation {} is missing",
                annotation::PLUGIN_SHA256
            ))
        })?;
    let wasm = cm
        .binary_data
        .as_ref()
        .and_then(|b| b.get(WASM_KEY))
        .map(|b| b.0.clone())
        .ok_or_else(|| PluginError::Invalid(format!("binaryData {WASM_KEY} is missing")))?;
    let config = cm
        .data
        .as_ref()
        .and_then(|d| d.get(CONFIG_KEY))
        .cloned()
        .unwrap_or_else(|| "{}".into());
    let mode = match cm.labels().get(label::PLUGIN_MODE).map(String::as_str) {
        None => Mode::Default,
        Some(label::PLUGIN_MODE_SHADOW) => Mode::Shadow,
        Some(label::PLUGIN_MODE_NODEPOOL) => Mode::NodePool,
        Some(other) => {
            return Err(PluginError::Invalid(format!(
                "label {}={other:?} is not one of {}, {} (or absent: the world's default)",
                label::PLUGIN_MODE,
                label::PLUGIN_MODE_SHADOW,
                label::PLUGIN_MODE_NODEPOOL
            )));
        }
    };
    Ok(Source {
        name: cm.name_any(),
        kind,
        wasm,
        digest,
        config,
        signature: cm.annotations().get(annotation::PLUGIN_SIGNATURE).cloned(),
        mode,
    })
}

/// The trust root in Secret `name` of `api`'s namespace, or why it cannot be used.
pub async fn read_trust(api: &Api<Secret>, name: &str) -> Trust {
    let secret = match api.get_opt(name).await {
        Ok(Some(s)) => s,
        Ok(None) => return Trust::Unreadable(format!("Secret {name} does not exist")),
        Err(e) => return Trust::Unreadable(format!("reading Secret {name}: {e}")),
    };
    let Some(raw) = secret.data.as_ref().and_then(|d| d.get(trust::SECRET_KEY)) else {
        return Trust::Unreadable(format!("Secret {name} has no {} key", trust::SECRET_KEY));
    };
    match TrustRoot::from_json(&raw.0) {
        Ok(root) => Trust::Required(root),
        Err(why) => Trust::Unreadable(format!("Secret {name}: {why}")),
    }
}

/// Watches plugin ConfigMaps of `namespace` until the process stops. `synced` becomes true once
/// every ConfigMap of the first list has been loaded or refused, so the controllers can start
/// on the plugins the user configured rather than on the native defaults.
pub async fn run(
    client: kube::Client,
    namespace: String,
    registry: Arc<Registry>,
    trust_secret: Option<String>,
    synced: tokio::sync::watch::Sender<bool>,
) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let trust = trust_secret.as_deref().map(|name| (&secrets, name));
    let reporter = Reporter {
        controller: "karpenter-kakaocloud-plugins".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    // The digest each ConfigMap was last applied at: a resync of an unchanged map is a no-op.
    let mut seen: std::collections::HashMap<String, (Kind, String)> = Default::default();
    let config = watcher::Config::default().labels(label::PLUGIN_WORLD);
    let mut events = watcher(api, config).boxed();
    // ConfigMaps seen during a (re)list: one deleted while the watch was down gets no Delete
    // event, so whatever the relist did not return is removed at its end.
    let mut listed: Option<std::collections::HashSet<String>> = None;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "plugin ConfigMap watch error; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        match event {
            watcher::Event::Apply(cm) | watcher::Event::InitApply(cm) => {
                if let Some(listed) = listed.as_mut() {
                    listed.insert(cm.name_any());
                }
                // A recorder per outcome: kube's recorder folds events of the same reason on the
                // same object into one series and keeps the first note, which would hide which
                // digest is now active.
                let recorder = Recorder::new(client.clone(), reporter.clone());
                apply(&registry, trust, &recorder, &cm, &mut seen).await
            }
            watcher::Event::Delete(cm) => {
                if let Some((kind, _)) = seen.remove(&cm.name_any()) {
                    registry.remove(kind, &cm.name_any());
                }
            }
            watcher::Event::Init => listed = Some(Default::default()),
            watcher::Event::InitDone => {
                let listed = listed.take().unwrap_or_default();
                let gone: Vec<(String, Kind)> = seen
                    .iter()
                    .filter(|(name, _)| !listed.contains(*name))
                    .map(|(name, (kind, _))| (name.clone(), *kind))
                    .collect();
                for (name, kind) in gone {
                    seen.remove(&name);
                    registry.remove(kind, &name);
                }
                synced.send_replace(true);
            }
        }
    }
}

/// What serves `kind` now, for Event notes.
fn serving(registry: &Registry, kind: Kind) -> String {
    registry
        .active(kind)
        .map_or("the native default".to_owned(), |l| {
            format!(
                "plugin {} ({})",
                l.name,
                &l.digest[..12.min(l.digest.len())]
            )
        })
}

async fn apply(
    registry: &Arc<Registry>,
    trust: Option<(&Api<Secret>, &str)>,
    recorder: &Recorder,
    cm: &ConfigMap,
    seen: &mut std::collections::HashMap<String, (Kind, String)>,
) {
    let name = cm.name_any();
    let version = cm.resource_version().unwrap_or_default();
    if seen.get(&name).is_some_and(|(_, v)| *v == version) {
        return;
    }
    if let Some((secrets, name)) = trust {
        registry.set_trust(read_trust(secrets, name).await);
    }
    let outcome = match source_of(cm) {
        Ok(source) => {
            // Decompressing, compiling and self-testing are CPU-bound: off the async workers.
            let registry = Arc::clone(registry);
            tokio::task::spawn_blocking(move || {
                registry
                    .apply(&source)
                    .map(|l| (source.kind, l.digest.clone(), source.mode))
            })
            .await
            .unwrap_or_else(|e| Err(PluginError::Engine(format!("plugin load task failed: {e}"))))
        }
        Err(e) => Err(e),
    };
    let (type_, reason, note) = match &outcome {
        Ok((kind, digest, Mode::Shadow)) => {
            seen.insert(name.clone(), (*kind, version));
            (
                EventType::Normal,
                "PluginShadow",
                format!(
                    "{kind} plugin {name} runs in shadow beside {} (sha256 {digest}): its answers are compared, never used",
                    serving(registry, *kind)
                ),
            )
        }
        Ok((kind, digest, Mode::NodePool)) => {
            seen.insert(name.clone(), (*kind, version));
            (
                EventType::Normal,
                "PluginLoaded",
                format!(
                    "{kind} plugin {name} is loaded for the NodePools whose annotation {} names it (sha256 {digest})",
                    kind.nodepool_annotation()
                ),
            )
        }
        Ok((kind, digest, Mode::Default)) => {
            seen.insert(name.clone(), (*kind, version));
            (
                EventType::Normal,
                "PluginActive",
                format!("{kind} plugin {name} is active (sha256 {digest})"),
            )
        }
        Err(e) => {
            let serving = Kind::ALL
                .into_iter()
                .find(|k| {
                    cm.labels().get(label::PLUGIN_WORLD).map(String::as_str) == Some(k.world())
                })
                .map_or("the native default".to_owned(), |k| serving(registry, k));
            (
                EventType::Warning,
                "PluginRejected",
                format!("{e}; {serving} keeps serving"),
            )
        }
    };
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Load".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &cm.object_ref(&())).await {
        tracing::debug!(error = %e, "could not publish plugin event");
    }
}

/// Every `every`, publishes on each plugin's ConfigMap a Warning `PluginFallback` Event when its
/// calls failed since the last report (answered by the native default), and a Normal
/// `ShadowReport` Event when a shadow plugin answered `shadow_every` more decisions
/// ([`crate::shadow::REPORT_EVERY`] in the controller).
pub async fn report_calls(
    client: kube::Client,
    namespace: String,
    registry: Arc<Registry>,
    every: std::time::Duration,
    shadow_every: u64,
) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let reporter = Reporter {
        controller: "karpenter-kakaocloud-plugins".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for f in registry.take_fallbacks() {
            let Ok(Some(cm)) = api.get_opt(&f.plugin).await else {
                continue;
            };
            let ev = Event {
                type_: EventType::Warning,
                reason: "PluginFallback".into(),
                note: Some(
                    format!(
                        "{} call(s) of {} plugin {} failed and were answered by the native default; last error: {}",
                        f.calls, f.kind, f.plugin, f.last_error
                    )
                    .chars()
                    .take(1000)
                    .collect(),
                ),
                action: "Call".into(),
                secondary: None,
            };
            let recorder = Recorder::new(client.clone(), reporter.clone());
            if let Err(e) = recorder.publish(&ev, &cm.object_ref(&())).await {
                tracing::debug!(error = %e, "could not publish plugin fallback event");
            }
        }
        for stats in registry.shadows.due(shadow_every) {
            let Ok(Some(cm)) = api.get_opt(&stats.plugin).await else {
                continue;
            };
            let ev = Event {
                type_: EventType::Normal,
                reason: "ShadowReport".into(),
                note: Some(stats.summary().chars().take(1000).collect()),
                action: "Compare".into(),
                secondary: None,
            };
            // A recorder per report: one series would keep the first summary's note.
            let recorder = Recorder::new(client.clone(), reporter.clone());
            if let Err(e) = recorder.publish(&ev, &cm.object_ref(&())).await {
                tracing::debug!(error = %e, "could not publish shadow report event");
            }
        }
    }
}
