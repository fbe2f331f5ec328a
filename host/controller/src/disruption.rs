//! The disruption loop: every pass builds a [`ClusterSnapshot`] from the watched state, plans
//! (expiration, emptiness, drift, multi- and single-node consolidation), waits a short validation
//! delay, re-checks the command against a fresh snapshot, launches a replacement first when the
//! pods need one and waits for it to initialize, then deletes the candidates' NodeClaims (the
//! termination controller drains them). One graceful command at a time, within budgets.

use kk_apis::names::{label, taint};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::claim_conditions::{self, Change};
use crate::events::Events;
use crate::explain::{ExplainError, NodeExplainer};
use crate::metrics::{
    ConsolidationTypeLabel, DecisionLabels, InstanceTypeLabel, Metrics, MoveLabels,
    NodePoolDecisionLabels, NodePoolLabel, NodePoolReason, OfferingLabels, ReasonLabel,
};
use crate::provisioning::catalog::LiveCatalog;
use kk_apis::crd::NodeClaim;
use kk_apis::crd::conditions::DesiredCondition;
use kk_apis::names::condition;
use kk_engine::disruption::build::{self, Objects};
use kk_engine::disruption::model::{ClusterSnapshot, Reason};
use kk_engine::disruption::plan::{
    Command, Method, Plan, consolidatable, plan_with, quiet_key, still_valid,
};
use kk_engine::disruption::scorer::ConsolidationScorer;

use crate::state::ClusterState;
use kk_engine::scheduling::resources::Dim;
use kk_engine::scheduling::translate;
use kk_engine::scheduling::{InstanceType, NodeClaimDraft, PoolRequirement, Resources};

/// How often the same `DisruptionBlocked` or `Unconsolidatable` Event is repeated for a node
/// (upstream dedupes its Unconsolidatable Events for 15 minutes).
pub const EXPLAIN_EVERY: Duration = Duration::from_secs(15 * 60);

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
    pub events: Events,
    pub options: Options,
    /// The last pass that consolidated and found nothing: its [`quiet_key`], and when.
    pub quiet: std::sync::Mutex<Option<(u64, std::time::Instant)>>,
}

/// How long consolidation trusts an unchanged cluster to need nothing (upstream rechecks a
/// "consolidated" cluster every 5 minutes).
pub const QUIET_RECHECK: Duration = Duration::from_secs(5 * 60);

/// `/explain/node`: one node explained by the disruption rules, from a fresh snapshot.
pub fn node_explainer(state: &ClusterState, catalog: &Arc<LiveCatalog>) -> NodeExplainer {
    let (state, catalog) = (state.clone(), catalog.clone());
    Arc::new(move |name: String| {
        let (state, catalog) = (state.clone(), catalog.clone());
        Box::pin(async move {
            let types = catalog
                .instance_types()
                .await
                .map_err(|e| ExplainError::Failed(format!("reading the instance types: {e}")))?;
            // Building the snapshot and simulating are CPU-bound: off the async workers.
            tokio::task::spawn_blocking(move || {
                let snapshot = snapshot_of(&state, types, Timestamp::now());
                kk_engine::disruption::explain::node(&snapshot, &name)
                    .ok_or(ExplainError::NotFound(format!("node {name}")))
            })
            .await
            .map_err(|e| ExplainError::Failed(e.to_string()))?
        })
    })
}

/// The planner's view of the shared cluster state: its stores, and provisioning's nominations.
pub fn snapshot_of(
    state: &ClusterState,
    instance_types: Vec<InstanceType>,
    now: Timestamp,
) -> ClusterSnapshot {
    // The stores' objects are shared, not copied: a pass at tens of thousands of pods would
    // otherwise clone every one of them.
    let pdbs = state.pdbs.state();
    let nominated = state.nominated_targets();
    let held_owners = state.held_owners();
    let pools = state.nodepools.state();
    let claims = state.nodeclaims.state();
    let nodes = state.nodes.state();
    let pods = state.pods.state();
    let classes = state.nodeclasses.state();
    build::snapshot(Objects {
        now,
        pools: &pools,
        claims: &claims,
        nodes: &nodes,
        pods: &pods,
        classes: &classes,
        pdbs: &pdbs,
        nominated: &nominated,
        held_owners: &held_owners,
        instance_types,
        daemonsets: state.daemonset_pods(),
    })
}

impl Disrupter {
    /// Runs passes until the process stops.
    pub async fn run(self: Arc<Self>) {
        if let Err(err) = self.clear_stale().await {
            tracing::warn!(error = %err, "clearing the marks of interrupted disruption commands failed");
        }
        let mut tick = tokio::time::interval(self.options.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(err) = self.pass().await {
                tracing::warn!(error = %err, "disruption pass failed");
            }
        }
    }

    /// A command interrupted by a restart leaves its taint and `DisruptionReason` behind, and a
    /// tainted node counts as leaving: both are removed from every node whose NodeClaim is not
    /// being deleted (upstream does the same when its disruption controller starts).
    async fn clear_stale(&self) -> anyhow::Result<()> {
        let claims = self.state.nodeclaims.state();
        let live = claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none());
        let mut targets = Vec::new();
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        for claim in live {
            let reason = [Change::Clear(condition::DISRUPTION_REASON)];
            claim_conditions::apply(&api, claim, &reason).await?;
            let Some(node) = claim
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| self.state.node(n))
            else {
                continue;
            };
            let tainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == taint::DISRUPTED));
            if tainted && node.metadata.deletion_timestamp.is_none() {
                tracing::info!(Node = %node.name_any(), NodeClaim = %claim.name_any(), "removing the disrupted taint of an interrupted command");
                targets.push((node.name_any(), claim.name_any(), String::new()));
            }
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        taint_all(&nodes, &targets, false).await?;
        Ok(())
    }

    /// Upstream's `Drifted` (with its reason) and `Consolidatable` conditions, each present only
    /// while it holds, on every NodeClaim the pass saw; written only where they changed.
    async fn write_conditions(&self, snapshot: &ClusterSnapshot) {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let writes: Vec<_> = snapshot
            .nodes
            .iter()
            .filter(|n| n.managed() && !n.deleting)
            .filter_map(|n| {
                let claim = self.state.nodeclaim(n.nodeclaim.as_deref()?)?;
                let drifted = match &n.drift {
                    Some(why) => Change::Set(DesiredCondition::truthy(
                        condition::DRIFTED,
                        why.as_condition_reason(),
                        why.message(),
                    )),
                    None => Change::Clear(condition::DRIFTED),
                };
                let consolidatable = if consolidatable(snapshot, n) {
                    Change::Set(DesiredCondition::truthy(
                        condition::CONSOLIDATABLE,
                        condition::CONSOLIDATABLE,
                        "",
                    ))
                } else {
                    Change::Clear(condition::CONSOLIDATABLE)
                };
                let changes = [drifted, consolidatable];
                claim_conditions::needed(&claim, &changes).then_some((claim, changes))
            })
            .collect();
        let api = &api;
        let results = join_limited(
            writes
                .iter()
                .map(|(claim, changes)| claim_conditions::apply(api, claim, changes))
                .collect(),
        )
        .await;
        for err in results.into_iter().filter_map(Result::err) {
            tracing::warn!(error = %err, "writing NodeClaim disruption conditions failed");
        }
    }

    /// Sets (or, when the command is abandoned, clears) `DisruptionReason` on the targets.
    async fn mark_reason(&self, targets: &[(String, String, String)], reason: Option<&str>) {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let change = match reason {
            Some(r) => Change::Set(DesiredCondition::truthy(condition::DISRUPTION_REASON, r, r)),
            None => Change::Clear(condition::DISRUPTION_REASON),
        };
        let api = &api;
        let change = &change;
        let writes =
            targets.iter().filter_map(|(_, claim, _)| {
                let claim = self.state.nodeclaim(claim)?;
                Some(async move {
                    claim_conditions::apply(api, &claim, std::slice::from_ref(change)).await
                })
            });
        for err in join_limited(writes.collect())
            .await
            .into_iter()
            .filter_map(Result::err)
        {
            tracing::warn!(error = %err, "writing DisruptionReason failed");
        }
    }

    async fn snapshot(&self) -> anyhow::Result<ClusterSnapshot> {
        let instance_types = self.catalog.instance_types().await?;
        Ok(snapshot_of(&self.state, instance_types, Timestamp::now()))
    }

    /// One pass: plan, validate, act.
    pub async fn pass(&self) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        let snapshot = self.snapshot().await?;
        self.metrics
            .cluster_hourly_price_micros
            .set(snapshot.hourly_price_micros() as i64);
        // Nothing changed since a pass that found no consolidation: it would find none again.
        // Solving every candidate's pods is the costly part of a pass, so it is skipped.
        let key = quiet_key(&snapshot);
        let consolidate = self
            .quiet
            .lock()
            .map_err(|_| anyhow::anyhow!("disruption state poisoned"))?
            .is_none_or(|(k, at)| k != key || at.elapsed() >= QUIET_RECHECK);
        if !consolidate {
            tracing::debug!("cluster unchanged since a pass found no consolidation; skipping it");
        }
        // Planning simulates every candidate (and calls the scorer plugin): off the async workers.
        let scorer = Arc::clone(&self.scorer);
        let (snapshot, plan) = tokio::task::spawn_blocking(move || {
            let plan = plan_with(&snapshot, scorer.as_ref(), consolidate);
            (snapshot, plan)
        })
        .await?;
        if let Ok(mut quiet) = self.quiet.lock() {
            if plan.graceful.is_some() || !plan.forceful.is_empty() {
                *quiet = None;
            } else if consolidate {
                *quiet = Some((key, std::time::Instant::now()));
            }
        }
        self.metrics
            .disruption_evaluation
            .get_or_create(&crate::metrics::EvaluationLabels {
                reason: "all".into(),
                consolidation_type: String::new(),
            })
            .observe(started.elapsed().as_secs_f64());
        self.explain(&snapshot, &plan.scored);
        self.record_gauges(&snapshot, &plan);
        self.write_conditions(&snapshot).await;
        for (pool, reason) in &plan.budget_blocked {
            if let Some(np) = self
                .state
                .nodepools
                .state()
                .into_iter()
                .find(|p| &p.name_any() == pool)
            {
                self.events.publish_deduped(
                    &np.object_ref(&()),
                    EventType::Normal,
                    "DisruptionBlocked",
                    format!(
                        "No allowed disruptions for disruption reason {} due to blocking budget",
                        reason.as_condition_reason()
                    ),
                    EXPLAIN_EVERY,
                );
            }
        }
        let commands: Vec<Command> = plan.forceful.into_iter().chain(plan.graceful).collect();
        if commands.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(self.options.validation_delay).await;
        let fresh = self.snapshot().await?;
        for cmd in commands {
            let names = cmd.node_names(&snapshot).join(", ");
            if !still_valid(&cmd, &snapshot, &fresh) {
                self.metrics
                    .disruption_failed_validations
                    .get_or_create(&ConsolidationTypeLabel {
                        consolidation_type: consolidation_type_of(&cmd).into(),
                    })
                    .inc();
                tracing::info!(method = cmd.method.as_str(), nodes = %names, "disruption command no longer valid; skipped");
                continue;
            }
            if let Err(err) = self.execute(&cmd, &snapshot).await {
                self.metrics
                    .disruption_queue_failures
                    .get_or_create(&DecisionLabels {
                        decision: decision_of(&cmd).into(),
                        reason: cmd.reason.as_metric().into(),
                        consolidation_type: consolidation_type_of(&cmd).into(),
                    })
                    .inc();
                tracing::warn!(method = cmd.method.as_str(), nodes = %names, error = %err, "disruption command failed");
            }
        }
        Ok(())
    }

    /// The pass's gauges, from its snapshot: upstream's eligible nodes per reason, allowed
    /// disruptions and nodes consuming budgets per NodePool and reason, cost per NodePool, the
    /// instance-type catalog, and the Balanced policy's scores.
    fn record_gauges(&self, snapshot: &ClusterSnapshot, plan: &Plan) {
        let m = &self.metrics;
        let live = || snapshot.nodes.iter().filter(|n| n.managed() && !n.deleting);
        let drifted = live().filter(|n| n.drift.is_some()).count();
        let (empty, underutilized) =
            live()
                .filter(|n| consolidatable(snapshot, n))
                .fold(
                    (0, 0),
                    |(e, u), n| if n.is_empty() { (e + 1, u) } else { (e, u + 1) },
                );
        m.disruption_eligible_nodes.clear();
        for (reason, count) in [
            ("drifted", drifted),
            ("empty", empty),
            ("underutilized", underutilized),
        ] {
            m.disruption_eligible_nodes
                .get_or_create(&ReasonLabel {
                    reason: reason.into(),
                })
                .set(count as i64);
        }
        m.nodepools_allowed_disruptions.clear();
        m.nodepools_nodes_consuming_budgets.clear();
        m.nodepools_cost_total.clear();
        for pool in &snapshot.pools {
            let consuming = plan.budgets.disrupting(&pool.name);
            for reason in [Reason::Empty, Reason::Underutilized, Reason::Drifted] {
                let labels = NodePoolReason {
                    nodepool: pool.name.clone(),
                    reason: reason.as_condition_reason().into(),
                };
                m.nodepools_allowed_disruptions
                    .get_or_create(&labels)
                    .set(i64::from(plan.budgets.remaining(&pool.name, reason)));
                m.nodepools_nodes_consuming_budgets
                    .get_or_create(&labels)
                    .set(i64::from(consuming));
            }
            let cost = snapshot.hourly_price_micros_of(Some(&pool.name));
            m.nodepools_cost_total
                .get_or_create(&NodePoolLabel {
                    nodepool: pool.name.clone(),
                })
                .set(cost as f64 / 1e6);
        }
        m.cloudprovider_offering_available.clear();
        m.cloudprovider_offering_price_estimate.clear();
        for it in &snapshot.instance_types {
            let name = InstanceTypeLabel {
                instance_type: it.name.clone(),
            };
            m.cloudprovider_instance_type_cpu_cores
                .get_or_create(&name)
                .set((it.capacity.get(Dim::CpuMillis) / 1000) as i64);
            m.cloudprovider_instance_type_memory_bytes
                .get_or_create(&name)
                .set(it.capacity.get(Dim::MemoryBytes) as f64);
            for o in &it.offerings {
                let labels = OfferingLabels {
                    instance_type: it.name.clone(),
                    capacity_type: o.capacity_type.clone(),
                    zone: o.zone.clone(),
                };
                m.cloudprovider_offering_available
                    .get_or_create(&labels)
                    .set(i64::from(o.available));
                m.cloudprovider_offering_price_estimate
                    .get_or_create(&labels)
                    .set(o.price_micros as f64 / 1e6);
            }
        }
        for &(i, score, approved) in &plan.scored.balanced {
            let labels = MoveLabels {
                decision: if approved { "approved" } else { "rejected" }.into(),
                nodepool: snapshot.nodes[i].node_pool.clone().unwrap_or_default(),
                policy: "Balanced".into(),
            };
            m.consolidation_score.get_or_create(&labels).observe(score);
            m.consolidation_moves.get_or_create(&labels).inc();
        }
    }

    /// Upstream's `DisruptionBlocked` and `Unconsolidatable` Events for the consolidation
    /// candidates this pass could not act on, each at most once per [`EXPLAIN_EVERY`].
    fn explain(&self, snapshot: &ClusterSnapshot, scored: &kk_engine::disruption::plan::Scored) {
        tracing::debug!(
            blocked = ?scored.blocked,
            unconsolidatable = ?scored.unconsolidatable,
            candidates = scored.nodes.len(),
            "consolidation candidates explained"
        );
        let sets = [
            ("DisruptionBlocked", &scored.blocked),
            ("Unconsolidatable", &scored.unconsolidatable),
        ];
        for (reason, nodes) in sets {
            for (i, why) in nodes.iter() {
                let Some(claim) = snapshot.nodes[*i]
                    .nodeclaim
                    .as_deref()
                    .and_then(|c| self.state.nodeclaim(c))
                else {
                    continue;
                };
                self.events.publish_deduped(
                    &claim.object_ref(&()),
                    EventType::Normal,
                    reason,
                    why.clone(),
                    EXPLAIN_EVERY,
                );
            }
        }
    }

    fn event_claim(&self, claim: &str, type_: EventType, reason: &str, note: String) {
        if let Some(nc) = self.state.nodeclaim(claim) {
            self.events
                .publish(&nc.object_ref(&()), type_, reason, note);
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
        // Marked first: provisioning stops placing pods on them before the taint lands.
        self.state
            .mark_for_deletion(targets.iter().map(|(n, _, _)| n.as_str()));
        // Side by side: an emptiness command can hold dozens of nodes.
        if let Err(err) = taint_all(&nodes, &targets, true).await {
            let _ = taint_all(&nodes, &targets, false).await;
            self.state
                .unmark_for_deletion(targets.iter().map(|(n, _, _)| n.as_str()));
            return Err(err.into());
        }
        self.mark_reason(&targets, Some(cmd.reason.as_condition_reason()))
            .await;
        // The churn guard: provisioning reports these controllers if their pods come back
        // needing new capacity (the move was wrong), and consolidation then leaves them alone.
        if matches!(
            cmd.method,
            Method::SingleNodeConsolidation | Method::MultiNodeConsolidation
        ) {
            for &i in &cmd.candidates {
                let node = &planned.nodes[i];
                self.state.record_moves(
                    node.node_pool.as_deref().unwrap_or_default(),
                    node.reschedulable_pods().filter_map(|p| p.owner.clone()),
                );
            }
        }
        let decision = decision_of(cmd);
        if let Some(replacement) = &cmd.replacement {
            let moved: Resources = cmd
                .candidates
                .iter()
                .flat_map(|&i| planned.nodes[i].reschedulable_pods())
                .fold(Resources::ZERO, |acc, p| acc.add(&p.requests));
            // Upstream's events on the candidates while their replacement comes up.
            let title = cmd.reason.as_condition_reason();
            for (_, claim, _) in &targets {
                self.event_claim(
                    claim,
                    EventType::Normal,
                    "DisruptionLaunching",
                    format!("Launching NodeClaim: {title}"),
                );
                self.event_claim(
                    claim,
                    EventType::Normal,
                    "DisruptionWaitingReadiness",
                    "Waiting on readiness to continue disruption".into(),
                );
            }
            match self
                .launch_replacement(replacement, moved, cmd.reason.as_metric())
                .await
            {
                Ok(name) => {
                    tracing::info!(NodeClaim = %name, method = cmd.method.as_str(), "replacement initialized")
                }
                Err(err) => {
                    let _ = taint_all(&nodes, &targets, false).await;
                    self.mark_reason(&targets, None).await;
                    self.state
                        .unmark_for_deletion(targets.iter().map(|(n, _, _)| n.as_str()));
                    return Err(err);
                }
            }
        }
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        let consolidation_type = consolidation_type_of(cmd);
        let note = format!(
            "disrupting via {} ({}): {decision}, saving {:.4}/h",
            cmd.method.as_str(),
            cmd.reason.as_metric(),
            cmd.savings_micros as f64 / 1e6
        );
        for (node, claim, _) in &targets {
            tracing::info!(NodeClaim = %claim, Node = %node, method = cmd.method.as_str(), reason = cmd.reason.as_metric(), decision, "disrupting node");
            self.event_claim(
                claim,
                EventType::Normal,
                "DisruptionTerminating",
                note.clone(),
            );
        }
        let deleted = join_limited(
            targets
                .iter()
                .map(|(_, claim, _)| {
                    let claims = &claims;
                    async move {
                        let known = self.state.nodeclaim(claim);
                        match claims.delete(claim, &DeleteParams::default()).await {
                            Ok(_) => {}
                            Err(kube::Error::Api(s)) if s.code == 404 => {}
                            Err(e) => return Err(e),
                        }
                        if let Some(nc) = known {
                            self.metrics.claim_disrupted(&nc, cmd.reason.as_metric());
                        }
                        Ok(())
                    }
                })
                .collect(),
        )
        .await;
        if let Some(err) = deleted.into_iter().find_map(Result::err) {
            return Err(err.into());
        }
        // Expiration is forceful, not a voluntary disruption decision (as upstream).
        if cmd.method == Method::Expiration {
            return Ok(());
        }
        self.metrics
            .disruption_decisions
            .get_or_create(&DecisionLabels {
                decision: decision.into(),
                reason: cmd.reason.as_metric().into(),
                consolidation_type: consolidation_type.into(),
            })
            .inc();
        let pools: BTreeSet<&str> = targets.iter().map(|(_, _, p)| p.as_str()).collect();
        for pool in pools {
            self.metrics
                .disruption_decisions_by_nodepool
                .get_or_create(&NodePoolDecisionLabels {
                    nodepool: pool.into(),
                    decision: decision.into(),
                    reason: cmd.reason.as_metric().into(),
                    consolidation_type: consolidation_type.into(),
                })
                .inc();
        }
        Ok(())
    }

    /// Creates the replacement NodeClaim and waits until it is Initialized.
    async fn launch_replacement(
        &self,
        r: &kk_engine::disruption::plan::Replacement,
        moved: Resources,
        reason: &str,
    ) -> anyhow::Result<String> {
        let pool = self
            .state
            .nodepools
            .state()
            .into_iter()
            .find(|p| p.name_any() == r.node_pool)
            .ok_or_else(|| anyhow::anyhow!("NodePool {} is gone", r.node_pool))?;
        // The zone is pinned below from the simulation, which kept to the class's subnets.
        let input = translate::nodepool_input(&pool, None, Resources::ZERO, 0);
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
            labels: input.labels,
            taints: input.taints,
            startup_taints: input.startup_taints,
            instance_types: r.instance_types.clone(),
            requests: moved,
            pods: Vec::new(),
        };
        let name = translate::nodeclaim_name(&r.node_pool);
        let claim = translate::nodeclaim_for(&draft, &pool, name.clone());
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        claims.create(&PostParams::default(), &claim).await?;
        self.metrics.claim_created(&r.node_pool, reason);
        let deadline = tokio::time::Instant::now() + self.options.replacement_timeout;
        // Polls the shared state (no API call): the claim appears once the watch delivers it.
        let mut seen = false;
        loop {
            match self.state.nodeclaim(&name) {
                None if seen => {
                    anyhow::bail!("replacement {name} was deleted before it initialized")
                }
                None => {}
                Some(c) => {
                    seen = true;
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

/// API writes of one command in flight at once.
const WRITES_IN_FLIGHT: usize = 16;

/// Runs the futures, at most [`WRITES_IN_FLIGHT`] at a time, and returns their outputs.
async fn join_limited<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    futures::stream::iter(futures)
        .buffer_unordered(WRITES_IN_FLIGHT)
        .collect()
        .await
}

/// Adds (or removes) the disrupted taint on every target's Node, side by side (an emptiness
/// command can hold dozens); the first failure, if any.
async fn taint_all(
    nodes: &Api<Node>,
    targets: &[(String, String, String)],
    on: bool,
) -> Result<(), kube::Error> {
    let writes = targets.iter().map(|(node, _, _)| taint(nodes, node, on));
    join_limited(writes.collect()).await.into_iter().collect()
}

/// Adds (or removes) the disrupted taint on a Node. The patch is guarded by the resourceVersion
/// it was computed from (another writer's taint must not be lost); a Node's status heartbeats
/// change that often, so a conflict re-reads and tries again.
async fn taint(nodes: &Api<Node>, name: &str, on: bool) -> Result<(), kube::Error> {
    let mut attempt = 1;
    loop {
        match taint_once(nodes, name, on).await {
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 5 => attempt += 1,
            other => return other,
        }
    }
}

async fn taint_once(nodes: &Api<Node>, name: &str, on: bool) -> Result<(), kube::Error> {
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

/// Upstream's `decision` label: `replace` when the command launches a replacement.
fn decision_of(cmd: &Command) -> &'static str {
    if cmd.replacement.is_some() {
        "replace"
    } else {
        "delete"
    }
}

/// Upstream's `consolidation_type` label ("" for drift and expiration).
fn consolidation_type_of(cmd: &Command) -> &'static str {
    match cmd.method {
        Method::MultiNodeConsolidation => "multi",
        Method::SingleNodeConsolidation => "single",
        Method::Emptiness => "empty",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_engine::disruption::{Blocker, SavingsPerDisruption, plan, plan::node_blocker};
    use kk_engine::scheduling::Offering;
    use serde_json::json;

    fn objects() -> (Vec<Node>, Vec<NodeClaim>, Vec<kk_apis::NodePool>) {
        let pool: kk_apis::NodePool = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "default"},
                    "requirements": []
                }},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
            }
        }))
        .unwrap();
        let labels = json!({
            label::NODEPOOL: "default",
            label::INSTANCE_TYPE: "m2a.large",
            label::ZONE: "kr-central-2-a",
            label::CAPACITY_TYPE: "on-demand",
        });
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abcde", "labels": labels, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "default"},
                "requirements": []
            },
            "status": {
                "providerID": "kakaocloud:///kr-central-2-a/i-1",
                "nodeName": "node-1",
                "conditions": [{"type": "Initialized", "status": "True", "reason": "Initialized", "message": "",
                                "lastTransitionTime": "2026-01-01T00:01:00Z"}]
            }
        }))
        .unwrap();
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "node-1", "labels": labels},
            "spec": {"providerID": "kakaocloud:///kr-central-2-a/i-1"},
            "status": {
                "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }))
        .unwrap();
        (vec![node], vec![claim], vec![pool])
    }

    fn catalog() -> Vec<InstanceType> {
        vec![InstanceType::new(
            "m2a.large",
            Resources::new(2000, 8 << 30, 110),
            vec![Offering {
                zone: "kr-central-2-a".into(),
                capacity_type: "on-demand".into(),
                price_micros: 100_000,
                available: true,
            }],
        )]
    }

    #[test]
    fn a_freshly_nominated_node_is_not_consolidated() {
        let (nodes, claims, pools) = objects();
        let state = ClusterState::for_test(nodes, claims, Vec::new(), pools);
        // A day after the claim was created: well within its expireAfter (720h).
        let now: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();

        let before = snapshot_of(&state, catalog(), now);
        assert_eq!(node_blocker(&before, &before.nodes[0]), None);
        let plan_before = plan(&before, &SavingsPerDisruption);
        assert!(
            plan_before.graceful.iter().any(|c| c.candidates == [0]),
            "the empty node is consolidated while nothing is nominated to it: {plan_before:?}"
        );

        // Provisioning places a pending pod on the node's NodeClaim.
        state.nominate("pending-pod-uid", "default-abcde");
        let after = snapshot_of(&state, catalog(), now);
        assert_eq!(
            node_blocker(&after, &after.nodes[0]),
            Some(Blocker::Nominated)
        );
        let plan_after = plan(&after, &SavingsPerDisruption);
        assert!(
            plan_after.graceful.is_none() && plan_after.forceful.is_empty(),
            "a nominated node is left alone: {plan_after:?}"
        );
    }
}
