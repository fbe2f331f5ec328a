//! Wiring: given a kube client, a KakaoCloud client and the settings, start the cluster-state
//! watches, the KCNodeClass controller, the provisioning controller and the NodeClaim lifecycle
//! controller.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use tokio::sync::mpsc;

use crate::config::Settings;
use crate::disruption::{self, Disrupter};
use crate::events::{self, Events};
use crate::explain::Explain;
use crate::gc::Collector;
use crate::lifecycle::bootstrap::ca_cert_hash;
use crate::lifecycle::{JoinInfo, Lifecycle};
use crate::metrics::Metrics;
use crate::nodeclass;
use crate::provisioning::Provisioner;
use crate::provisioning::catalog::{CatalogOptions, LiveCatalog, UnavailableOfferings};
use crate::repair::Repairer;
use crate::retry::Backoff;
use crate::state::{Change, ClusterState};
use crate::static_capacity::StaticCapacity;
use crate::supervisor::Supervisor;
use crate::termination::Terminator;
use kakaocloud::ownership::KeyringHandle;
use kk_engine::disruption::{ConsolidationScorer, SavingsPerDisruption};
use kk_engine::scheduling::{CheapestFitRanker, InstanceRanker};
use kk_engine::userdata::{KubeadmRenderer, UserdataRenderer};
use kk_plugin_runtime::{PluginRanker, PluginRenderer, PluginScorer, Registry};

/// Optional parts; defaults are the native ranker, renderer and scorer.
pub struct Plugins {
    pub ranker: Arc<dyn InstanceRanker>,
    pub renderer: Arc<dyn UserdataRenderer>,
    pub scorer: Arc<dyn ConsolidationScorer>,
    /// The plugin registry behind the seams, when plugins load from ConfigMaps: the NodePool
    /// controller routes each NodePool's plugin annotations through it.
    pub registry: Option<Arc<Registry>>,
}

impl Default for Plugins {
    fn default() -> Self {
        Plugins {
            ranker: Arc::new(CheapestFitRanker),
            renderer: Arc::new(KubeadmRenderer),
            scorer: Arc::new(SavingsPerDisruption),
            registry: None,
        }
    }
}

impl Plugins {
    /// Every seam served by `registry`'s plugins (the native defaults where none is loaded).
    pub fn from_registry(registry: Arc<Registry>) -> Plugins {
        Plugins {
            ranker: Arc::new(PluginRanker {
                registry: registry.clone(),
            }),
            renderer: Arc::new(PluginRenderer {
                registry: registry.clone(),
            }),
            scorer: Arc::new(PluginScorer {
                registry: registry.clone(),
            }),
            registry: Some(registry),
        }
    }
}

/// A running set of controllers; dropping it (or [`Operator::stop`]) stops them.
pub struct Operator {
    pub state: ClusterState,
    pub provisioner: Arc<Provisioner>,
    pub lifecycle: Arc<Lifecycle>,
    pub metrics: Arc<Metrics>,
    supervisor: Supervisor,
    explain: Explain,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// Where nodes join: settings first, then the Kubernetes Engine cluster's kubeconfig for the
/// endpoint, and the `kube-root-ca.crt` ConfigMap for the CA.
pub async fn resolve_join_info(
    kube: &kube::Client,
    cloud: &kakaocloud::Client,
    settings: &Settings,
) -> anyhow::Result<JoinInfo> {
    let mut endpoint = settings.cluster_endpoint.clone();
    let mut ca = settings.cluster_ca_bundle.clone();
    if endpoint.is_none() || ca.is_none() {
        match cloud
            .kubernetes_engine()
            .cluster_endpoint(&settings.cluster_name)
            .await
        {
            Ok(kc) => {
                endpoint.get_or_insert(kc.server);
                if !kc.ca_pem.is_empty() && ca.is_none() {
                    ca = String::from_utf8(kc.ca_pem).ok();
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the cluster endpoint from Kubernetes Engine")
            }
        }
    }
    if ca.is_none() {
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), "kube-system");
        if let Some(cm) = cms.get_opt("kube-root-ca.crt").await? {
            ca = cm.data.and_then(|d| d.get("ca.crt").cloned());
        }
    }
    let api_endpoint = endpoint.ok_or_else(|| {
        anyhow::anyhow!("CLUSTER_ENDPOINT is not set and Kubernetes Engine did not say")
    })?;
    let ca_pem = ca.ok_or_else(|| {
        anyhow::anyhow!("CLUSTER_CA_BUNDLE is not set and kube-root-ca.crt is missing")
    })?;
    let ca_hash = ca_cert_hash(&ca_pem)?;
    Ok(JoinInfo {
        api_endpoint,
        ca_pem,
        ca_hash,
    })
}

impl Operator {
    /// Starts every controller. `keyring` signs ownership tags; `join` says where nodes join.
    // Each argument is a dependency the process owns and shares beyond the operator.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        kube: kube::Client,
        cloud: kakaocloud::Client,
        settings: Settings,
        keyring: KeyringHandle,
        join: JoinInfo,
        plugins: Plugins,
        metrics: Arc<Metrics>,
        explain: Explain,
    ) -> anyhow::Result<Operator> {
        let (changes_tx, mut changes_rx) = mpsc::unbounded_channel::<Change>();
        let (state, feeds) = ClusterState::start(&kube, changes_tx);
        state
            .wait_synced(Duration::from_secs(60))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        metrics.cluster.attach(state.clone());
        let unavailable = Arc::new(UnavailableOfferings::new(settings.unavailable_offering_ttl));
        let catalog = Arc::new(LiveCatalog::new(
            cloud.clone(),
            CatalogOptions {
                max_pods: settings.max_pods,
                ..CatalogOptions::default()
            },
            settings.catalog_refresh,
            unavailable,
        ));
        let source = events::Source::karpenter(kube.clone());
        let static_capacity = Arc::new(StaticCapacity {
            client: kube.clone(),
            state: state.clone(),
            catalog: catalog.clone(),
            ranker: plugins.ranker.clone(),
            metrics: metrics.clone(),
            events: Events::new(source.clone(), "Static"),
        });
        // Upstream's NodeRepair gate: off unless FEATURE_GATES says NodeRepair=true.
        let repair = settings.node_repair.then(|| {
            Arc::new(Repairer {
                client: kube.clone(),
                state: state.clone(),
                metrics: metrics.clone(),
                events: Events::new(source.clone(), "Repair"),
                toleration: settings.node_repair_toleration,
            })
        });
        let provisioner = Arc::new(Provisioner::new(
            kube.clone(),
            state.clone(),
            catalog.clone(),
            plugins.ranker,
            settings.clone(),
            metrics.clone(),
            source.clone(),
            explain.clone(),
        ));
        explain.attach(state.clone(), disruption::node_explainer(&state, &catalog));
        let classes = nodeclass::Context::new(
            kube.clone(),
            cloud.clone(),
            state.clone(),
            settings.cluster_name.clone(),
        );
        let class_task = tokio::spawn(nodeclass::run(Arc::new(classes), feeds.nodeclass));
        let terminator = Arc::new(Terminator {
            client: kube.clone(),
            cloud: cloud.clone(),
            state: state.clone(),
            keyring: keyring.clone(),
            cluster_name: settings.cluster_name.clone(),
            metrics: metrics.clone(),
            events: Events::new(source.clone(), "Terminate"),
            poll: Duration::from_secs(1),
            backoff: Backoff::default(),
        });
        let disrupter = Arc::new(Disrupter {
            client: kube.clone(),
            state: state.clone(),
            catalog: catalog.clone(),
            scorer: plugins.scorer,
            metrics: metrics.clone(),
            events: Events::new(source.clone(), "Disrupt"),
            options: disruption::Options {
                interval: settings.disruption_interval,
                validation_delay: settings.disruption_validation_delay,
                ..disruption::Options::default()
            },
            quiet: Default::default(),
        });
        let collector = Arc::new(Collector {
            client: kube.clone(),
            cloud: cloud.clone(),
            keyring: keyring.clone(),
            state: state.clone(),
            cluster_name: settings.cluster_name.clone(),
            grace: settings.gc_grace,
            interval: settings.disruption_interval,
            metrics: metrics.clone(),
            first_seen: Default::default(),
        });
        let lifecycle = Arc::new(Lifecycle {
            client: kube.clone(),
            cloud,
            state: state.clone(),
            settings,
            keyring,
            renderer: plugins.renderer,
            catalog,
            metrics: metrics.clone(),
            events: Events::new(source, "Launch"),
            backoff: Backoff::default(),
            join,
            launches: Default::default(),
        });
        let (trigger_tx, trigger_rx) = mpsc::channel::<()>(1024);
        let (pod_events_tx, pod_events_rx) = mpsc::unbounded_channel::<String>();
        let forward = tokio::spawn(async move {
            while let Some(change) = changes_rx.recv().await {
                let wake = match change {
                    Change::PendingPod | Change::NodeClaim(_) | Change::Other => true,
                    Change::PodEvent(node) => {
                        let _ = pod_events_tx.send(node);
                        false
                    }
                    Change::Pod | Change::Node(_) => false,
                };
                if wake {
                    let _ = trigger_tx.try_send(());
                }
            }
        });
        let mut supervisor = Supervisor::default();
        supervisor.adopt("nodeclass", class_task);
        supervisor.adopt("change-forwarder", forward);
        let p = provisioner.clone();
        supervisor.spawn("provisioning", async move { p.run(trigger_rx).await });
        let l = lifecycle.clone();
        supervisor.spawn("lifecycle", async move { l.run(feeds.lifecycle).await });
        supervisor.spawn("termination", terminator.run(feeds.termination));
        supervisor.spawn("disruption", disrupter.run());
        supervisor.spawn("static-capacity", static_capacity.run());
        if let Some(repair) = repair {
            supervisor.spawn("node-repair", repair.run());
        }
        supervisor.spawn("garbage-collection", collector.run());
        supervisor.spawn(
            "pod-latencies",
            crate::metrics::pods::PodLatencies::new(state.clone(), metrics.clone()).run(),
        );
        supervisor.spawn(
            "pod-events",
            crate::podevents::run(kube.clone(), state.clone(), pod_events_rx),
        );
        supervisor.spawn(
            "nodepool-status",
            crate::nodepool::run(
                kube.clone(),
                state.clone(),
                Events::new(events::Source::karpenter(kube.clone()), "Route"),
                plugins.registry,
            ),
        );
        Ok(Operator {
            state,
            provisioner,
            lifecycle,
            metrics,
            supervisor,
            explain,
        })
    }

    /// Resolves when a controller stops (it never should): its name and how it ended.
    pub async fn first_exit(&mut self) -> (&'static str, String) {
        self.supervisor.first_exit().await
    }

    /// Stops every controller and watch started by [`Operator::start`].
    pub fn stop(&self) {
        self.explain.detach();
        self.metrics.cluster.detach();
        self.supervisor.abort_all();
        self.state.stop();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop();
    }
}
