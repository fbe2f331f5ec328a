//! The provisioning controller: batches provisionable pods, runs the scheduling simulation over
//! existing nodes, in-flight NodeClaims and new nodes, and creates NodeClaims for the new nodes.

pub mod catalog;

use kk_apis::cached_pod::CachedPod;
use kk_apis::names::label;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::PostParams;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::config::Settings;
use crate::events::{self, Events};
use crate::explain::{ClaimDecision, Explain};
use crate::metrics::{ControllerLabel, ControllerZone, Metrics, SchedulerLabels};
use kk_apis::crd::kcnodeclass::{GROUP as NODECLASS_GROUP, KIND as NODECLASS_KIND};
use kk_apis::crd::{NodeClaim, NodePool};
use kk_apis::pod::{effective_zone, is_provisionable};

use catalog::LiveCatalog;
use kk_engine::scheduling::instance_types::InstanceType;
use kk_engine::scheduling::model::{ExistingNode, NodePoolInput, SchedulingProblem};
use kk_engine::scheduling::ranker::InstanceRanker;

use crate::state::ClusterState;
use kk_engine::scheduling::resources::{self, Resources};
use kk_engine::scheduling::scheduler::{Scheduler, SchedulerOptions};
use kk_engine::scheduling::translate;

/// How long after its NodeClaim initialized a nominated pod is still considered covered (upstream's
/// nomination window, `max(2 x batchMax, 10s)` with the defaults).
const NOMINATION_WINDOW: Duration = Duration::from_secs(20);
/// NodeClaim creates of one pass in flight at once.
const CREATES_IN_FLIGHT: usize = 16;

/// How often a NodePool's `NoCompatibleInstanceTypes` event is repeated while it lasts.
const NO_TYPES_EVENT_EVERY: Duration = Duration::from_secs(5 * 60);
/// Provisionable pods are looked at again this often even without a watch event.
const REQUEUE: Duration = Duration::from_secs(10);

/// Whether a NodePool is ours (its NodeClass is a KCNodeClass) and usable now.
pub fn is_managed_pool(np: &NodePool) -> bool {
    let r = &np.spec.template.spec.node_class_ref;
    r.group == NODECLASS_GROUP
        && r.kind == NODECLASS_KIND
        && np.metadata.deletion_timestamp.is_none()
}

/// Waits for one batch: blocks for the first trigger, then ends after `idle` without another one
/// or at `max` after the first, whichever comes first. Returns how many triggers it took (0 when
/// the channel closed).
pub async fn wait_batch(rx: &mut mpsc::Receiver<()>, idle: Duration, max: Duration) -> usize {
    if rx.recv().await.is_none() {
        return 0;
    }
    let mut count = 1;
    let deadline = tokio::time::Instant::now() + max;
    loop {
        let idle_end = (tokio::time::Instant::now() + idle).min(deadline);
        match tokio::time::timeout_at(idle_end, rx.recv()).await {
            Ok(Some(())) => {
                count += 1;
                if tokio::time::Instant::now() >= deadline {
                    return count;
                }
            }
            Ok(None) | Err(_) => return count,
        }
    }
}

/// What one provisioning pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassOutcome {
    pub pods: usize,
    pub created: Vec<String>,
    pub nominated_existing: usize,
    pub unschedulable: usize,
}

/// Errors of one pass; the pass is retried on the next batch.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error("listing instance types: {0}")]
    Catalog(#[from] kakaocloud::Error),
    #[error("creating NodeClaim: {0}")]
    Kube(#[from] kube::Error),
    #[error("scheduling simulation: {0}")]
    Solve(String),
}

/// Pods an earlier pass's nomination still covers, by NodeClaim name.
type Covered = HashMap<String, Vec<Arc<CachedPod>>>;

/// The provisioning controller.
pub struct Provisioner {
    client: kube::Client,
    state: ClusterState,
    catalog: Arc<LiveCatalog>,
    ranker: Arc<dyn InstanceRanker>,
    settings: Settings,
    metrics: Arc<Metrics>,
    events: Events,
    /// Each NodeClaim's decision and each unschedulable pod, for `/explain/pod`.
    explain: Explain,
    /// Passes so far: each pass's `scheduling_id`.
    passes: AtomicU64,
}

impl Provisioner {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: kube::Client,
        state: ClusterState,
        catalog: Arc<LiveCatalog>,
        ranker: Arc<dyn InstanceRanker>,
        settings: Settings,
        metrics: Arc<Metrics>,
        source: events::Source,
        explain: Explain,
    ) -> Self {
        Provisioner {
            client,
            state,
            catalog,
            ranker,
            settings,
            metrics,
            events: Events::new(source, "Provision"),
            explain,
            passes: AtomicU64::new(0),
        }
    }

    /// The NodeClaim whose nomination still covers a pod, if an earlier pass's does.
    fn covered(&self, pod: &CachedPod, claims: &HashMap<String, Arc<NodeClaim>>) -> Option<String> {
        let uid = pod.metadata.uid.as_deref()?;
        let (target, _age) = self.state.nomination_of(uid)?;
        let nc = claims.get(&target)?;
        if nc.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let within = match nc
            .conditions()
            .iter()
            .find(|c| c.type_ == "Initialized" && c.status == "True")
        {
            None => true,
            Some(c) => {
                let since =
                    k8s_openapi::jiff::Timestamp::now().duration_since(c.last_transition_time.0);
                since.as_secs() < NOMINATION_WINDOW.as_secs() as i64
            }
        };
        within.then_some(target)
    }

    /// Pods that need a node now, and the pods an earlier pass's nomination still covers, by the
    /// NodeClaim they were nominated to. Shared with the watch cache, never copied.
    fn pending_pods(&self) -> (Vec<Arc<CachedPod>>, Covered) {
        let claims: HashMap<String, Arc<NodeClaim>> = self
            .state
            .nodeclaims
            .state()
            .into_iter()
            .map(|c| (c.name_any(), c))
            .collect();
        let mut pods = Vec::new();
        let mut covered = Covered::new();
        for p in self.state.pods.state() {
            if !is_provisionable(&p) {
                continue;
            }
            match self.covered(&p, &claims) {
                Some(claim) => covered.entry(claim).or_default().push(p),
                None => pods.push(p),
            }
        }
        pods.sort_by_key(|a| (a.namespace(), a.name_any()));
        (pods, covered)
    }

    /// Runs the controller: a pass per batch, plus a pass every 10 s while pods wait.
    pub async fn run(self: Arc<Self>, mut triggers: mpsc::Receiver<()>) {
        loop {
            let n = tokio::select! {
                n = wait_batch(&mut triggers, self.settings.batch_idle, self.settings.batch_max) => n,
                () = tokio::time::sleep(REQUEUE) => 1,
            };
            if n == 0 {
                return;
            }
            match self.provision_once().await {
                Ok(outcome) if outcome.pods > 0 => {
                    tracing::info!(
                        pods = outcome.pods,
                        created = outcome.created.len(),
                        unschedulable = outcome.unschedulable,
                        "provisioning pass"
                    )
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "provisioning pass failed"),
            }
        }
    }

    fn claim_capacity(nc: &NodeClaim, catalog: &[InstanceType]) -> Resources {
        if let Some(cap) = nc
            .status
            .as_ref()
            .filter(|s| !s.capacity.is_empty())
            .and_then(|s| resources::from_list(&s.capacity).ok())
        {
            return cap;
        }
        // Not launched yet: count it as its largest option, pessimistically (upstream subtractMax).
        nc.spec
            .requirements
            .iter()
            .filter(|r| r.key == label::INSTANCE_TYPE)
            .flat_map(|r| r.values.iter())
            .filter_map(|n| catalog.iter().find(|it| &it.name == n))
            .map(|it| it.capacity)
            .reduce(|a, b| a.max(&b))
            .unwrap_or_default()
    }

    /// One pass over the current provisionable pods.
    pub async fn provision_once(&self) -> Result<PassOutcome, ProvisionError> {
        let (pods, mut covered) = self.pending_pods();
        let ctl = ControllerLabel {
            controller: "provisioner".into(),
        };
        let pass = SchedulerLabels {
            controller: ctl.controller.clone(),
            scheduling_id: self.passes.fetch_add(1, Ordering::Relaxed).to_string(),
        };
        // One series per pass while it runs, as upstream keeps one per scheduler.
        self.metrics.queue_depth.clear();
        self.metrics.pending_pods_by_zone.clear();
        let mut by_zone: BTreeMap<String, i64> = BTreeMap::new();
        for pod in &pods {
            *by_zone.entry(effective_zone(pod)).or_default() += 1;
        }
        for (zone, count) in by_zone {
            self.metrics
                .pending_pods_by_zone
                .get_or_create(&ControllerZone {
                    controller: ctl.controller.clone(),
                    zone,
                })
                .set(count);
        }
        self.metrics
            .queue_depth
            .get_or_create(&pass)
            .set(pods.len() as i64);
        if pods.is_empty() {
            return Ok(PassOutcome::default());
        }
        tracing::info!(pods = pods.len(), "found provisionable pod(s)");
        let catalog = self.catalog.instance_types().await?;

        let pools: Vec<Arc<NodePool>> = {
            let mut p: Vec<Arc<NodePool>> = self
                .state
                .nodepools
                .state()
                .into_iter()
                // Static NodePools keep their own count (`static_capacity`), whatever pods need.
                .filter(|np| is_managed_pool(np) && !np.spec.is_static())
                .filter(|np| {
                    // Skip pools whose KCNodeClass is missing or reported not Ready.
                    let name = &np.spec.template.spec.node_class_ref.name;
                    self.state.nodeclasses.state().iter().any(|c| {
                        &c.name_any() == name
                            && c.status.as_ref().is_none_or(|s| {
                                s.conditions
                                    .iter()
                                    .all(|c| c.type_ != "Ready" || c.status != "False")
                            })
                    })
                })
                .collect();
            p.sort_by_key(|np| np.name_any());
            p
        };
        let claims = self.state.nodeclaims.state();
        let nodes = self.state.nodes.state();
        let all_pods = self.state.pods.state();

        let mut in_use: HashMap<String, (Resources, u64)> = HashMap::new();
        for nc in &claims {
            if nc.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Some(pool) = nc.labels().get(label::NODEPOOL) {
                let e = in_use.entry(pool.clone()).or_default();
                e.0 = e.0.add(&Self::claim_capacity(nc, &catalog));
                e.1 += 1;
            }
        }
        let classes = self.state.nodeclasses.state();
        let pool_inputs: Vec<NodePoolInput> = pools
            .iter()
            .map(|np| {
                let (r, n) = in_use.get(&np.name_any()).copied().unwrap_or_default();
                let class = classes
                    .iter()
                    .find(|c| c.name_any() == np.spec.template.spec.node_class_ref.name);
                translate::nodepool_input(np, class.map(|c| &**c), r, n)
            })
            .collect();

        // Shared with the watch cache: a pass at tens of thousands of pods copies none.
        let mut bound: HashMap<String, Vec<Arc<CachedPod>>> = HashMap::new();
        for p in &all_pods {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                continue;
            }
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                bound.entry(node).or_default().push(p.clone());
            }
        }
        let claim_by_node: HashMap<String, &Arc<NodeClaim>> = claims
            .iter()
            .filter_map(|c| c.status.as_ref()?.node_name.clone().map(|n| (n, c)))
            .collect();
        let mut existing: Vec<ExistingNode> = Vec::new();
        for node in &nodes {
            if node.metadata.deletion_timestamp.is_some()
                || self.state.is_marked_for_deletion(&node.name_any())
                || node
                    .spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
            {
                continue;
            }
            let name = node.name_any();
            let startup = claim_by_node
                .get(&name)
                .map(|c| {
                    c.spec
                        .startup_taints
                        .iter()
                        .map(k8s_openapi::api::core::v1::Taint::from)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            let mut pods = bound.remove(&name).unwrap_or_default();
            // The pods still nominated to this node's NodeClaim keep their room: kube-scheduler
            // may not have bound them yet, and another pass must not promise it twice.
            if let Some(nominated) = claim_by_node
                .get(&name)
                .and_then(|c| covered.remove(&c.name_any()))
            {
                pods.extend(nominated);
            }
            existing.push(translate::existing_node(node, pods, &startup));
        }
        for nc in &claims {
            let registered = nc
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some();
            if nc.metadata.deletion_timestamp.is_none() && !registered {
                let nominated = covered.remove(&nc.name_any()).unwrap_or_default();
                existing.push(translate::inflight_node(nc, &catalog, nominated));
            }
        }
        let daemonsets = self.state.daemonset_pods();

        let started = Instant::now();
        // The simulation (and the selector plugin it calls) is CPU-bound: off the async workers.
        let ranker = Arc::clone(&self.ranker);
        let (result, pods, catalog) = tokio::task::spawn_blocking(move || {
            let problem = SchedulingProblem {
                pods: &pods,
                node_pools: &pool_inputs,
                instance_types: &catalog,
                existing_nodes: &existing,
                daemonsets: &daemonsets,
            };
            let result = Scheduler::new(&*ranker, SchedulerOptions::default()).solve(&problem);
            (result, pods, catalog)
        })
        .await
        .map_err(|e| ProvisionError::Solve(e.to_string()))?;
        self.metrics
            .scheduling_duration
            .get_or_create(&ctl)
            .observe(started.elapsed().as_secs_f64());
        self.metrics
            .unschedulable_pods
            .get_or_create(&ctl)
            .set(result.unschedulable.len() as i64);
        // Plugin failures are answered (and counted) by the plugin adapter; this is any other
        // ranker failing.
        for name in &result.pools_without_types {
            if let Some(np) = pools.iter().find(|p| &p.name_any() == name) {
                self.events.publish_deduped(
                    &np.object_ref(&()),
                    EventType::Warning,
                    "NoCompatibleInstanceTypes",
                    "NodePool requirements filtered out all compatible available instance types"
                        .into(),
                    NO_TYPES_EVENT_EVERY,
                );
            }
        }
        if let Some(first) = result.ranker_fallbacks.first() {
            tracing::warn!(calls = result.ranker_fallbacks.len(), first = %first,
                "the instance ranker failed; those calls were ranked natively");
        }
        tracing::info!(
            nodeclaims = result.new_node_claims.len(),
            pods = pods.len(),
            duration = ?started.elapsed(),
            "computed new nodeclaim(s) to fit pod(s)"
        );

        let mut outcome = PassOutcome {
            pods: pods.len(),
            unschedulable: result.unschedulable.len(),
            ..PassOutcome::default()
        };
        // Created side by side, as upstream launches a pass's NodeClaims: one pass can make
        // hundreds, and one at a time they queue behind the API server's round trips.
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let creates: Vec<_> = result
            .new_node_claims
            .iter()
            .filter_map(|draft| {
                let pool = pools.iter().find(|p| p.name_any() == draft.node_pool)?;
                let name = translate::nodeclaim_name(&draft.node_pool);
                let nc = translate::nodeclaim_for(draft, pool, name.clone());
                let api = api.clone();
                Some(async move { (draft, name, api.create(&PostParams::default(), &nc).await) })
            })
            .collect();
        let created: Vec<_> = futures::stream::iter(creates)
            .buffer_unordered(CREATES_IN_FLIGHT)
            .collect()
            .await;
        let mut failed = None;
        for (draft, name, created) in created {
            let created = match created {
                Ok(created) => created,
                Err(err) => {
                    // The others stand and their pods are nominated; the pass is retried.
                    failed.get_or_insert(err);
                    continue;
                }
            };
            tracing::info!(
                NodeClaim = %name,
                NodePool = %draft.node_pool,
                requests = ?draft.requests,
                instance_types = %summarize(&draft.instance_types),
                "created nodeclaim"
            );
            self.metrics.claim_created(&draft.node_pool, "provisioned");
            self.explain.record_claim(ClaimDecision::new(
                &name,
                &draft.node_pool,
                draft.pods.iter().map(|&i| pod_key(&pods[i])).collect(),
                self.ranker.serving(&draft.node_pool),
                &draft.instance_types,
                &catalog,
            ));
            let claim_ref = created.object_ref(&());
            for &i in &draft.pods {
                self.nominate(&pods[i], &name, Some(&claim_ref));
            }
            self.guard_churn(draft.pods.iter().map(|&i| &*pods[i]), &pools);
            outcome.created.push(name);
        }
        for placement in &result.existing {
            for &i in &placement.pods {
                self.nominate(&pods[i], &placement.node, None);
                outcome.nominated_existing += 1;
            }
        }
        let mut limited: BTreeMap<String, usize> = BTreeMap::new();
        for u in &result.unschedulable {
            let pod = &pods[u.pod];
            self.explain
                .record_unschedulable(pod_key(pod), u.reason.clone());
            tracing::info!(pod = %pod.name_any(), namespace = %pod.namespace().unwrap_or_default(),
                reason = %u.reason, "could not schedule pod");
            self.publish(
                &pod.object_ref(&()),
                EventType::Warning,
                "FailedScheduling",
                &format!("Failed to schedule pod, {}", u.reason),
            );
            for part in u.reason.split("; ") {
                if let Some(pool) = part
                    .strip_prefix("nodepool ")
                    .and_then(|r| r.strip_suffix(": NodePool limits reached"))
                {
                    *limited.entry(pool.to_owned()).or_default() += 1;
                }
            }
        }
        for (pool, count) in limited {
            if let Some(np) = pools.iter().find(|p| p.name_any() == pool) {
                self.publish(
                    &np.object_ref(&()),
                    EventType::Warning,
                    "NodePoolLimitsExceeded",
                    &format!("NodePool limits exceeded: {count} pod(s) cannot get a node from NodePool {pool}"),
                );
            }
        }
        match failed {
            Some(err) => Err(err.into()),
            None => Ok(outcome),
        }
    }

    fn nominate(&self, pod: &CachedPod, target: &str, claim: Option<&ObjectReference>) {
        if let Some(uid) = pod.metadata.uid.as_deref() {
            self.state.nominate(uid, target);
        }
        let what = if claim.is_some() { "nodeclaim" } else { "node" };
        self.publish(
            &pod.object_ref(&()),
            EventType::Normal,
            "Nominated",
            &format!("Pod should schedule on: {what}/{target}"),
        );
    }

    /// The churn guard: pods created after consolidation moved their controller's pods that
    /// need a new NodeClaim show the move was wrong. Their controllers are held (consolidation
    /// leaves them alone, see [`ClusterState::revert_move`]), once per move, with an Event on the
    /// disrupted node's NodePool and a count.
    fn guard_churn<'p>(&self, pods: impl Iterator<Item = &'p CachedPod>, pools: &[Arc<NodePool>]) {
        let mut reverted: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pod in pods {
            let Some(owner) = pod
                .owner_references()
                .iter()
                .find(|r| r.controller == Some(true))
            else {
                continue;
            };
            let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
            if let Some((pool, hold)) = self.state.revert_move(&owner.uid, created) {
                let ns = pod.namespace().unwrap_or_default();
                reverted.entry(pool).or_default().push(format!(
                    "{}/{}/{} ({} min)",
                    owner.kind,
                    ns,
                    owner.name,
                    hold.as_secs() / 60
                ));
            }
        }
        for (pool, owners) in reverted {
            let note = format!(
                "consolidation moved pods of {} and they needed new capacity; their pods are left \
                 where they are for the minutes given",
                owners.join(", "),
            );
            tracing::warn!(NodePool = %pool, owners = ?owners, "consolidation reverted");
            self.metrics
                .consolidation_reverted
                .get_or_create(&crate::metrics::NodePoolLabel {
                    nodepool: pool.clone(),
                })
                .inc_by(owners.len() as u64);
            if let Some(np) = pools.iter().find(|p| p.name_any() == pool) {
                self.publish(
                    &np.object_ref(&()),
                    EventType::Warning,
                    "ConsolidationReverted",
                    &note,
                );
            }
        }
    }

    fn publish(&self, obj: &ObjectReference, type_: EventType, reason: &str, note: &str) {
        self.events.publish(obj, type_, reason, note.to_owned());
    }
}

/// `namespace/name`.
fn pod_key(pod: &CachedPod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

fn summarize(types: &[String]) -> String {
    let head: Vec<&str> = types.iter().take(5).map(String::as_str).collect();
    if types.len() > 5 {
        format!("{} and {} other(s)", head.join(", "), types.len() - 5)
    } else {
        head.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn pending(reason: &str) -> CachedPod {
        CachedPod {
            spec: Some(Arc::new(PodSpec::default())),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some(reason.into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn provisionable_follows_upstream() {
        assert!(is_provisionable(&pending("Unschedulable")));
        assert!(!is_provisionable(&pending("SchedulingGated")));
        let mut bound = pending("Unschedulable");
        Arc::make_mut(bound.spec.as_mut().unwrap()).node_name = Some("n1".into());
        assert!(!is_provisionable(&bound));
        let mut preempting = pending("Unschedulable");
        preempting.status.as_mut().unwrap().nominated_node_name = Some("n2".into());
        assert!(!is_provisionable(&preempting));
        let mut ds = pending("Unschedulable");
        ds.metadata.owner_references = Some(vec![OwnerReference {
            kind: "DaemonSet".into(),
            ..Default::default()
        }]);
        assert!(!is_provisionable(&ds));
        assert!(!is_provisionable(&CachedPod::default()));
    }

    #[tokio::test]
    async fn batches_close_on_idle_or_max() {
        tokio::time::pause();
        let (tx, mut rx) = mpsc::channel(64);
        tx.send(()).await.unwrap();
        tx.send(()).await.unwrap();
        let started = tokio::time::Instant::now();
        let n = wait_batch(&mut rx, Duration::from_secs(1), Duration::from_secs(10)).await;
        assert_eq!(n, 2);
        // Paused time advances in whole timer ticks (1 ms).
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(1) && waited < Duration::from_millis(1010),
            "{waited:?}"
        );

        // A trigger every 500ms keeps the window open until max.
        let feeder = tokio::spawn(async move {
            for _ in 0..40 {
                if tx.send(()).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        let started = tokio::time::Instant::now();
        let n = wait_batch(&mut rx, Duration::from_secs(1), Duration::from_secs(10)).await;
        assert!(n >= 20, "{n}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(10) && waited < Duration::from_millis(10_010),
            "{waited:?}"
        );
        feeder.abort();
        let _ = feeder.await;
        // A closed channel ends the controller.
        let (tx, mut rx) = mpsc::channel::<()>(1);
        drop(tx);
        assert_eq!(
            wait_batch(&mut rx, Duration::from_secs(1), Duration::from_secs(10)).await,
            0
        );
    }

    #[test]
    fn only_kcnodeclass_pools_are_managed() {
        let mut np = kk_engine::scheduling::fixtures::default_nodepool();
        assert!(is_managed_pool(&np));
        np.spec.template.spec.node_class_ref.group = "karpenter.kwok.sh".into();
        assert!(!is_managed_pool(&np));
    }
}
