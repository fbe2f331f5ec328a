//! The disruption loop: every pass builds a [`ClusterSnapshot`] from the watched state, plans
//! (expiration, emptiness, drift, multi- and single-node consolidation), waits a short validation
//! delay, re-checks the command against a fresh snapshot, launches a replacement first when the
//! pods need one and waits for it to initialize, then deletes the candidates' NodeClaims (the
//! termination controller drains them). One graceful command at a time, within budgets.

use kk_apis::names::{label, taint};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::metrics::{DecisionLabels, Metrics, NodePoolReason};
use crate::provisioning::catalog::LiveCatalog;
use kk_apis::crd::NodeClaim;
use kk_engine::disruption::build::{self, Objects};
use kk_engine::disruption::model::ClusterSnapshot;
use kk_engine::disruption::plan::{Command, Method, plan, still_valid};
use kk_engine::disruption::scorer::ConsolidationScorer;

use crate::state::ClusterState;
use kk_engine::scheduling::translate;
use kk_engine::scheduling::{NodeClaimDraft, PoolRequirement, Resources};

/// Tunables (upstream: a pass every 10 s, 15 s between planning and validation).
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub interval: Duration,
    pub validation_delay: Duration,
    /// How long a replacement may take to initialize before the command is abandoned.
    pub replacement_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            interval: Duration::from_secs(10),
            validation_delay: Duration::from_secs(15),
            replacement_timeout: Duration::from_secs(10 * 60),
        }
    }
}

pub struct Disrupter {
    pub client: kube::Client,
    pub state: ClusterState,
    pub catalog: Arc<LiveCatalog>,
    pub scorer: Arc<dyn ConsolidationScorer>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub options: Options,
}

impl Disrupter {
    /// Runs passes until the process stops.
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.options.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(err) = self.pass().await {
                tracing::warn!(error = %err, "disruption pass failed");
            }
        }
    }

    async fn snapshot(&self) -> anyhow::Result<ClusterSnapshot> {
        let pdbs: Api<PodDisruptionBudget> = Api::all(self.client.clone());
        let pdbs = pdbs.list(&ListParams::default()).await?.items;
        let pools = owned(self.state.nodepools.state());
        let claims = owned(self.state.nodeclaims.state());
        let nodes = owned(self.state.nodes.state());
        let pods = owned(self.state.pods.state());
        let classes = owned(self.state.nodeclasses.state());
        let instance_types = self.catalog.instance_types().await?;
        Ok(build::snapshot(Objects {
            now: Timestamp::now(),
            pools: &pools,
            claims: &claims,
            nodes: &nodes,
            pods: &pods,
            classes: &classes,
            pdbs: &pdbs,
            instance_types,
        }))
    }

    /// One pass: plan, validate, act.
    pub async fn pass(&self) -> anyhow::Result<()> {
        let snapshot = self.snapshot().await?;
        self.metrics
            .cluster_hourly_price_micros
            .set(snapshot.hourly_price_micros() as i64);
        let plan = plan(&snapshot, self.scorer.as_ref());
        let commands: Vec<Command> = plan.forceful.into_iter().chain(plan.graceful).collect();
        if commands.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(self.options.validation_delay).await;
        let fresh = self.snapshot().await?;
        for cmd in commands {
            let names = cmd.node_names(&snapshot).join(", ");
            if !still_valid(&cmd, &snapshot, &fresh) {
                tracing::info!(method = cmd.method.as_str(), nodes = %names, "disruption command no longer valid; skipped");
                continue;
            }
            if let Err(err) = self.execute(&cmd, &snapshot).await {
                tracing::warn!(method = cmd.method.as_str(), nodes = %names, error = %err, "disruption command failed");
            }
        }
        Ok(())
    }

    async fn event_claim(&self, claim: &str, type_: EventType, reason: &str, note: String) {
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        if let Ok(nc) = claims.get(claim).await {
            let ev = Event {
                type_,
                reason: reason.into(),
                note: Some(note),
                action: "Disrupt".into(),
                secondary: None,
            };
            if let Err(err) = self.recorder.publish(&ev, &nc.object_ref(&())).await {
                tracing::debug!(error = %err, "could not publish event");
            }
        }
    }

    async fn execute(&self, cmd: &Command, planned: &ClusterSnapshot) -> anyhow::Result<()> {
        // Candidates by name: indices are into the planning snapshot.
        let targets: Vec<(String, String, String)> = cmd
            .candidates
            .iter()
            .filter_map(|&i| {
                let n = &planned.nodes[i];
                Some((
                    n.name.clone(),
                    n.nodeclaim.clone()?,
                    n.node_pool.clone().unwrap_or_default(),
                ))
            })
            .collect();
        let nodes: Api<Node> = Api::all(self.client.clone());
        for (node, _, _) in &targets {
            taint(&nodes, node, true).await?;
        }
        let decision = if cmd.replacement.is_some() {
            "replace"
        } else {
            "delete"
        };
        if let Some(replacement) = &cmd.replacement {
            let moved: Resources = cmd
                .candidates
                .iter()
                .flat_map(|&i| planned.nodes[i].reschedulable_pods())
                .fold(Resources::ZERO, |acc, p| acc.add(&p.requests));
            match self.launch_replacement(replacement, moved).await {
                Ok(name) => {
                    tracing::info!(NodeClaim = %name, method = cmd.method.as_str(), "replacement initialized")
                }
                Err(err) => {
                    for (node, _, _) in &targets {
                        let _ = taint(&nodes, node, false).await;
                    }
                    return Err(err);
                }
            }
        }
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        let consolidation_type = match cmd.method {
            Method::MultiNodeConsolidation => "multi",
            Method::SingleNodeConsolidation => "single",
            Method::Emptiness => "empty",
            _ => "",
        };
        for (node, claim, pool) in &targets {
            let note = format!(
                "disrupting via {} ({}): {decision}, saving {:.4}/h",
                cmd.method.as_str(),
                cmd.reason.as_metric(),
                cmd.savings_micros as f64 / 1e6
            );
            tracing::info!(NodeClaim = %claim, Node = %node, method = cmd.method.as_str(), reason = cmd.reason.as_metric(), decision, "disrupting node");
            self.event_claim(claim, EventType::Normal, "DisruptionTerminating", note)
                .await;
            match claims.delete(claim, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            self.metrics
                .nodeclaims_disrupted
                .get_or_create(&NodePoolReason {
                    nodepool: pool.clone(),
                    reason: cmd.reason.as_metric().into(),
                })
                .inc();
        }
        self.metrics
            .disruption_decisions
            .get_or_create(&DecisionLabels {
                decision: decision.into(),
                reason: cmd.reason.as_metric().into(),
                consolidation_type: consolidation_type.into(),
            })
            .inc();
        Ok(())
    }

    /// Creates the replacement NodeClaim and waits until it is Initialized.
    async fn launch_replacement(
        &self,
        r: &kk_engine::disruption::plan::Replacement,
        moved: Resources,
    ) -> anyhow::Result<String> {
        let pool = self
            .state
            .nodepools
            .state()
            .into_iter()
            .find(|p| p.name_any() == r.node_pool)
            .ok_or_else(|| anyhow::anyhow!("NodePool {} is gone", r.node_pool))?;
        let input = translate::nodepool_input(&pool, Resources::ZERO, 0);
        let mut requirements: Vec<PoolRequirement> = input
            .requirements
            .into_iter()
            .filter(|q| {
                ![label::INSTANCE_TYPE, label::ZONE, label::CAPACITY_TYPE]
                    .contains(&q.requirement.key.as_str())
            })
            .collect();
        let pin = |key: &str, values: Vec<String>| PoolRequirement {
            requirement: NodeSelectorRequirement {
                key: key.into(),
                operator: "In".into(),
                values: Some(values),
            },
            min_values: None,
        };
        requirements.push(pin(label::INSTANCE_TYPE, r.instance_types.clone()));
        requirements.push(pin(label::ZONE, vec![r.zone.clone()]));
        requirements.push(pin(label::CAPACITY_TYPE, vec![r.capacity_type.clone()]));
        let draft = NodeClaimDraft {
            node_pool: r.node_pool.clone(),
            requirements,
            labels: pool
                .spec
                .template
                .metadata
                .as_ref()
                .map(|m| m.labels.clone())
                .unwrap_or_default(),
            taints: pool
                .spec
                .template
                .spec
                .taints
                .iter()
                .map(Into::into)
                .collect(),
            startup_taints: pool
                .spec
                .template
                .spec
                .startup_taints
                .iter()
                .map(Into::into)
                .collect(),
            instance_types: r.instance_types.clone(),
            requests: moved,
            pods: Vec::new(),
        };
        let name = translate::nodeclaim_name(&r.node_pool);
        let claim = translate::nodeclaim_for(&draft, &pool, name.clone());
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        claims.create(&PostParams::default(), &claim).await?;
        self.metrics
            .nodeclaims_created
            .get_or_create(&NodePoolReason {
                nodepool: r.node_pool.clone(),
                reason: "disruption".into(),
            })
            .inc();
        let deadline = tokio::time::Instant::now() + self.options.replacement_timeout;
        loop {
            match claims.get_opt(&name).await? {
                None => anyhow::bail!("replacement {name} was deleted before it initialized"),
                Some(c) => {
                    let ready = c.status.as_ref().is_some_and(|s| {
                        s.conditions
                            .iter()
                            .any(|c| c.type_ == "Initialized" && c.status == "True")
                    });
                    if ready {
                        return Ok(name);
                    }
                }
            }
            if tokio::time::Instant::now() > deadline {
                let _ = claims.delete(&name, &DeleteParams::default()).await;
                anyhow::bail!(
                    "replacement {name} did not initialize within {:?}",
                    self.options.replacement_timeout
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// The reflector store's objects, owned (the builder borrows plain slices).
fn owned<K: Clone>(items: Vec<Arc<K>>) -> Vec<K> {
    items.into_iter().map(|a| (*a).clone()).collect()
}

/// Adds (or removes) the disrupted taint on a Node.
async fn taint(nodes: &Api<Node>, name: &str, on: bool) -> Result<(), kube::Error> {
    let Some(node) = nodes.get_opt(name).await? else {
        return Ok(());
    };
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let has = taints.iter().any(|t| t.key == taint::DISRUPTED);
    if has == on {
        return Ok(());
    }
    if on {
        taints.push(k8s_openapi::api::core::v1::Taint {
            key: taint::DISRUPTED.into(),
            effect: "NoSchedule".into(),
            value: None,
            time_added: None,
        });
    } else {
        taints.retain(|t| t.key != taint::DISRUPTED);
    }
    let patch = json!({"spec": {"taints": taints}, "metadata": {"resourceVersion": node.resource_version()}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
