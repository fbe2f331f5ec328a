//! The one shared view of the cluster (Karpenter core's `state.Cluster`): reflector stores of
//! Pods (as [`CachedPod`]s, specs shared), Nodes, NodePools, NodeClaims, DaemonSets,
//! KCNodeClasses, PodDisruptionBudgets and VolumeAttachments, the
//! per-node join of a Node with its NodeClaim and pods, provisioning's nominations, and the nodes
//! disruption marked for deletion.
//!
//! Invariants:
//! - every object kind is watched once per process; controllers read these stores (or are
//!   driven by [`Feeds`] from the same watches) instead of watching or listing on their own;
//! - a nomination is visible to every controller the moment provisioning makes it, so
//!   disruption never consolidates a node that pending pods were just promised;
//! - nominations and marks are memory only: after a restart provisioning nominates again on its
//!   first pass, and disruption's marks are re-derived from the `karpenter.sh/disrupted` taint.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::runtime::reflector::{self, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use kk_apis::cached_pod::{CachedPod, SharedSpecs};
use kk_apis::crd::{KCNodeClass, NodeClaim, NodePool};

/// What changed; provisioning wakes up on these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A pod that is waiting for a node (see [`kk_apis::pod::is_provisionable`]).
    PendingPod,
    Pod,
    /// A pod was bound to, or is leaving, this node (upstream's pod events, which
    /// `status.lastPodEventTime` and so `consolidateAfter` count from).
    PodEvent(String),
    Node(String),
    NodeClaim(String),
    Other,
}

/// How many events a controller's feed may fall behind before the watch waits for it.
const FEED_BUFFER: usize = 1024;

/// How long a nomination protects its node or NodeClaim from disruption (upstream's
/// nomination window: `max(2 x batchMaxDuration, 10s)` with the defaults is 20 s).
pub const NOMINATION_TTL: Duration = Duration::from_secs(20);

/// How long consolidation remembers whose pods it moved: a moved controller's pod that needs a
/// new NodeClaim within this window means the move was wrong (the churn guard).
pub const MOVE_MEMORY: Duration = Duration::from_secs(10 * 60);

/// How long consolidation then leaves that controller's pods where they are: the first time.
/// Each further revert of the same controller doubles it, up to [`MAX_REVERTED_HOLD`]. A
/// short first hold lets a scale-in go on once the cluster has changed around the wrong move;
/// a workload the simulation keeps misjudging is left alone longer.
pub const REVERTED_HOLD: Duration = Duration::from_secs(5 * 60);

/// The longest hold, and how long a controller's earlier reverts are remembered after its last.
pub const MAX_REVERTED_HOLD: Duration = Duration::from_secs(30 * 60);

/// Clock skew allowed between the API server (pod creation times) and this process (move
/// times) when the churn guard asks whether a pod was created after a move.
const MOVE_CLOCK_SKEW: jiff::SignedDuration = jiff::SignedDuration::from_secs(2);

/// Consolidation's ledger of moved pods' controllers, and the ones held after a reverted move.
#[derive(Default)]
struct Moves {
    /// Controller UID -> (NodePool of the disrupted node, when, and when by the wall clock).
    moved: HashMap<String, (String, Instant, jiff::Timestamp)>,
    /// Controller UID -> how many of its moves were reverted, and when the last was: it is held
    /// for [`hold_after`] that many from then.
    reverts: HashMap<String, (u32, Instant)>,
}

impl Moves {
    /// When the hold of a controller reverted `n` times, last at `last`, ends.
    fn held_until((n, last): (u32, Instant)) -> Instant {
        last + hold_after(n)
    }
}

/// The hold after a controller's `n`th revert (from 1): [`REVERTED_HOLD`] doubled each time,
/// at most [`MAX_REVERTED_HOLD`].
fn hold_after(n: u32) -> Duration {
    REVERTED_HOLD
        .saturating_mul(1 << n.saturating_sub(1).min(16))
        .min(MAX_REVERTED_HOLD)
}

/// The event feeds a controller is driven by: the shared watches' objects as they change.
pub struct Feeds {
    pub nodeclaims: ReflectHandle<NodeClaim>,
    pub nodes: ReflectHandle<Node>,
}

/// One feed set per controller that reconciles NodeClaims, and the KCNodeClass controller's.
pub struct Subscriptions {
    pub lifecycle: Feeds,
    pub termination: Feeds,
    pub nodeclass: (ReflectHandle<KCNodeClass>, ReflectHandle<NodeClaim>),
}

/// A Node joined with its NodeClaim (by providerID, else by node name) and the pods bound to it.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub name: String,
    pub node: Option<Arc<Node>>,
    pub claim: Option<Arc<NodeClaim>>,
    pub pods: Vec<Arc<CachedPod>>,
    /// Provisioning placed pending pods here within [`NOMINATION_TTL`].
    pub nominated: bool,
    pub marked_for_deletion: bool,
}

#[derive(Debug, Default)]
struct Nominations {
    /// Pod UID -> (node or NodeClaim name, when).
    pods: HashMap<String, (String, Instant)>,
}

/// Read-only views of the cluster, current to the last watch event, plus the in-memory
/// decisions the controllers share. Cheap to clone.
#[derive(Clone)]
pub struct ClusterState {
    pub pods: Store<CachedPod>,
    pub nodes: Store<Node>,
    pub nodepools: Store<NodePool>,
    pub nodeclaims: Store<NodeClaim>,
    pub daemonsets: Store<DaemonSet>,
    pub nodeclasses: Store<KCNodeClass>,
    pub pdbs: Store<PodDisruptionBudget>,
    /// Termination waits for a drained node's volumes to detach.
    pub volume_attachments: Store<VolumeAttachment>,
    nominations: Arc<Mutex<Nominations>>,
    marked: Arc<Mutex<HashSet<String>>>,
    moves: Arc<Mutex<Moves>>,
    /// NodePool -> when a NodeClaim of it last failed to launch or register (liveness).
    registration_failures: Arc<Mutex<HashMap<String, jiff::Timestamp>>>,
    tasks: Arc<Vec<JoinHandle<()>>>,
}

impl Debug for ClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterState")
            .field("pods", &self.pods.state().len())
            .field("nodes", &self.nodes.state().len())
            .field("nodeclaims", &self.nodeclaims.state().len())
            .finish()
    }
}

/// What the stores keep of a watched object. Nothing here reads `managedFields` or kubectl's
/// last-applied copy; dropping them, and each kind's fields no controller reads, before the
/// store keeps a large cluster's objects small (the scale bench's controller held 615 MiB at
/// 20,000 pods). The stores are read-only views: nothing is ever written back from them.
pub trait Trim: Resource<DynamicType = ()> {
    fn trim(&mut self) {
        let meta = self.meta_mut();
        meta.managed_fields = None;
        if let Some(a) = meta.annotations.as_mut() {
            a.remove(kk_apis::names::annotation::LAST_APPLIED);
        }
        self.trim_kind();
    }

    /// What a kind drops beyond the metadata every kind drops.
    fn trim_kind(&mut self) {}
}

/// The pod conditions anything reads: provisioning (`PodScheduled`'s reason), pod events and
/// latencies (when `PodScheduled` and `Ready` changed).
const CONDITIONS_READ: [&str; 2] = ["PodScheduled", "Ready"];

/// The pod annotations anything reads: disruption's do-not-disrupt and deletion cost, and the
/// kubelet's mirror mark.
const POD_ANNOTATIONS_READ: [&str; 3] = [
    kk_apis::names::annotation::DO_NOT_DISRUPT,
    kk_apis::names::annotation::POD_DELETION_COST,
    kk_apis::names::annotation::MIRROR_POD,
];

/// A pod keeps what scheduling, disruption and draining read: resources, host ports, restart
/// policies (sidecars), volumes that are claims, constraints, phase, and the conditions and
/// annotations read. How its containers run (image, command, environment, probes, mounts) and
/// where (IPs, container statuses) is dropped, and so is every pod's projected service-account
/// token volume. The store then keeps it as a [`CachedPod`], whose spec the pods of a ReplicaSet
/// on one node share: 2.7 KiB a pod at the steady state's ten to a node, against 7.3 KiB as a
/// trimmed `Pod` (`cargo bench --bench cache_memory`).
impl Trim for Pod {
    fn trim_kind(&mut self) {
        // Meshes and operators annotate pods heavily; only these few are ever read.
        if let Some(a) = self.metadata.annotations.as_mut() {
            a.retain(|k, _| POD_ANNOTATIONS_READ.contains(&k.as_str()));
            if a.is_empty() {
                self.metadata.annotations = None;
            }
        }
        if let Some(spec) = self.spec.as_mut() {
            let containers = spec.init_containers.iter_mut().flatten();
            for c in spec.containers.iter_mut().chain(containers) {
                trim_container(c);
            }
            spec.ephemeral_containers = None;
            // A `Volume` is 3 KiB even empty: a pod without claims keeps no list at all.
            if let Some(volumes) = spec.volumes.take() {
                let claims: Vec<_> = volumes
                    .into_iter()
                    .filter(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
                    .collect();
                spec.volumes = (!claims.is_empty()).then_some(claims);
            }
            spec.image_pull_secrets = None;
            spec.dns_config = None;
            spec.security_context = None;
            spec.readiness_gates = None;
        }
        if let Some(status) = self.status.as_mut() {
            status.container_statuses = None;
            status.init_container_statuses = None;
            status.ephemeral_container_statuses = None;
            status.host_ip = None;
            status.host_ips = None;
            status.pod_ip = None;
            status.pod_ips = None;
            status.message = None;
            status.resource_claim_statuses = None;
            if let Some(conditions) = status.conditions.as_mut() {
                conditions.retain(|c| CONDITIONS_READ.contains(&c.type_.as_str()));
                for c in conditions.iter_mut() {
                    c.message = None;
                }
                conditions.shrink_to_fit();
            }
        }
    }
}

fn trim_container(c: &mut k8s_openapi::api::core::v1::Container) {
    c.image = None;
    c.command = None;
    c.args = None;
    c.env = None;
    c.env_from = None;
    c.volume_mounts = None;
    c.volume_devices = None;
    c.liveness_probe = None;
    c.readiness_probe = None;
    c.startup_probe = None;
    c.lifecycle = None;
    c.security_context = None;
    c.termination_message_path = None;
    c.termination_message_policy = None;
    c.working_dir = None;
    c.image_pull_policy = None;
    c.resize_policy = None;
    if let Some(ports) = c.ports.as_mut() {
        ports.retain(|p| p.host_port.is_some());
    }
}

/// A Node drops the container images it holds: a real node lists dozens, each with its names.
impl Trim for Node {
    fn trim_kind(&mut self) {
        if let Some(status) = self.status.as_mut() {
            status.images = None;
        }
    }
}
impl Trim for NodePool {}
impl Trim for NodeClaim {}
impl Trim for DaemonSet {}
impl Trim for KCNodeClass {}
impl Trim for PodDisruptionBudget {}
impl Trim for VolumeAttachment {}

/// Watches `W` objects into `writer`, each trimmed and then kept as `keep` makes it (a `K`: the
/// object itself, or a pod with its spec shared), and sends each change on `changes`.
fn watch<W, K>(
    api: Api<W>,
    writer: reflector::store::Writer<K>,
    changes: mpsc::UnboundedSender<Change>,
    classify: fn(&K, bool) -> Change,
    mut keep: impl FnMut(W) -> K + Send + 'static,
) -> JoinHandle<()>
where
    W: Resource + Clone + DeserializeOwned + Debug + Send + Sync + Trim + 'static,
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(Trim::trim)
            .map_ok(move |event| match event {
                watcher::Event::Apply(o) => watcher::Event::Apply(keep(o)),
                watcher::Event::Delete(o) => watcher::Event::Delete(keep(o)),
                watcher::Event::InitApply(o) => watcher::Event::InitApply(keep(o)),
                watcher::Event::Init => watcher::Event::Init,
                watcher::Event::InitDone => watcher::Event::InitDone,
            }),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(obj)) => {
                    let _ = changes.send(classify(&obj, false));
                }
                Ok(watcher::Event::Delete(obj)) => {
                    let _ = changes.send(classify(&obj, true));
                }
                Ok(watcher::Event::InitDone) => {
                    let _ = changes.send(Change::Other);
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "watch failed; retrying"),
            }
        }
    })
}

/// A store with `n` feeds for controllers, and its watch.
fn shared<K>(
    api: Api<K>,
    changes: mpsc::UnboundedSender<Change>,
    classify: fn(&K, bool) -> Change,
    n: usize,
) -> (Store<K>, Vec<ReflectHandle<K>>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + Trim + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store_shared(FEED_BUFFER);
    // A shared store always hands out subscribers.
    let feeds = (0..n).filter_map(|_| writer.subscribe()).collect();
    (
        store,
        feeds,
        watch(api, writer, changes, classify, std::convert::identity),
    )
}

/// A store nobody subscribes to, and its watch.
fn plain<K>(
    api: Api<K>,
    changes: mpsc::UnboundedSender<Change>,
    classify: fn(&K, bool) -> Change,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + Trim + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    (
        store,
        watch(api, writer, changes, classify, std::convert::identity),
    )
}

/// The pod store, nobody subscribing, and its watch: the pods of a ReplicaSet on a node share
/// one spec ([`SharedSpecs`]).
fn pods(
    api: Api<Pod>,
    changes: mpsc::UnboundedSender<Change>,
) -> (Store<CachedPod>, JoinHandle<()>) {
    let (store, writer) = reflector::store();
    let mut specs = SharedSpecs::default();
    let keep = move |pod| specs.cache(pod);
    (store, watch(api, writer, changes, pod_change, keep))
}

fn other<K>(_: &K, _deleted: bool) -> Change {
    Change::Other
}

/// How recent a bind, a deletion or a pod's end must be to count as a pod event. A relist after a
/// restart sees every pod again; only what happened just now is an event.
const POD_EVENT_RECENCY: Duration = Duration::from_secs(30);

fn pod_change(pod: &CachedPod, deleted: bool) -> Change {
    if kk_apis::pod::is_provisionable(pod) {
        return Change::PendingPod;
    }
    let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
        return Change::Pod;
    };
    let now = jiff::Timestamp::now();
    let recent = |t: Option<jiff::Timestamp>| {
        t.is_some_and(|t| now.duration_since(t).as_secs() < POD_EVENT_RECENCY.as_secs() as i64)
    };
    let condition_since = |type_: &str, status: &str| {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == type_ && c.status == status))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0)
    };
    // A deletion timestamp lies a grace period ahead: recent until that has passed by as much.
    let deleting = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0);
    let event = deleted
        || recent(condition_since("PodScheduled", "True"))
        || deleting.is_some_and(|t| t > now || recent(Some(t)))
        || (kk_apis::pod::is_terminal(pod) && recent(condition_since("Ready", "False")));
    if event {
        Change::PodEvent(node)
    } else {
        Change::Pod
    }
}

impl ClusterState {
    /// Starts one watch per kind; every change is sent on `changes`, and the controllers that
    /// reconcile on events get their [`Subscriptions`].
    pub fn start(
        client: &Client,
        changes: mpsc::UnboundedSender<Change>,
    ) -> (ClusterState, Subscriptions) {
        let (pods, t1) = pods(Api::all(client.clone()), changes.clone());
        let (nodes, mut node_feeds, t2) = shared(
            Api::<Node>::all(client.clone()),
            changes.clone(),
            |n, _| Change::Node(n.name_any()),
            2,
        );
        let (nodepools, t3) = plain(Api::<NodePool>::all(client.clone()), changes.clone(), other);
        let (nodeclaims, mut claim_feeds, t4) = shared(
            Api::<NodeClaim>::all(client.clone()),
            changes.clone(),
            |c, _| Change::NodeClaim(c.name_any()),
            3,
        );
        let (daemonsets, t5) = plain(
            Api::<DaemonSet>::all(client.clone()),
            changes.clone(),
            other,
        );
        let (nodeclasses, mut class_feeds, t6) = shared(
            Api::<KCNodeClass>::all(client.clone()),
            changes.clone(),
            other,
            1,
        );
        let (pdbs, t7) = plain(
            Api::<PodDisruptionBudget>::all(client.clone()),
            changes.clone(),
            other,
        );
        let (volume_attachments, t8) =
            plain(Api::<VolumeAttachment>::all(client.clone()), changes, other);
        let state = ClusterState {
            pods,
            nodes,
            nodepools,
            nodeclaims,
            daemonsets,
            nodeclasses,
            pdbs,
            volume_attachments,
            nominations: Arc::default(),
            marked: Arc::default(),
            moves: Arc::default(),
            registration_failures: Arc::default(),
            tasks: Arc::new(vec![t1, t2, t3, t4, t5, t6, t7, t8]),
        };
        let next = |feeds: &mut Vec<ReflectHandle<NodeClaim>>| feeds.pop();
        let subscriptions = match (
            next(&mut claim_feeds),
            next(&mut claim_feeds),
            next(&mut claim_feeds),
            node_feeds.pop(),
            node_feeds.pop(),
            class_feeds.pop(),
        ) {
            (Some(c1), Some(c2), Some(c3), Some(n1), Some(n2), Some(k)) => Subscriptions {
                lifecycle: Feeds {
                    nodeclaims: c1,
                    nodes: n1,
                },
                termination: Feeds {
                    nodeclaims: c2,
                    nodes: n2,
                },
                nodeclass: (k, c3),
            },
            // `store_shared` always subscribes; this arm is unreachable by construction.
            _ => unreachable!("shared stores hand out every requested feed"),
        };
        (state, subscriptions)
    }

    /// Waits until every store has its initial list, at most `timeout`.
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), &'static str> {
        let all = async {
            self.pods.wait_until_ready().await.map_err(|_| "pods")?;
            self.nodes.wait_until_ready().await.map_err(|_| "nodes")?;
            self.nodepools
                .wait_until_ready()
                .await
                .map_err(|_| "nodepools")?;
            self.nodeclaims
                .wait_until_ready()
                .await
                .map_err(|_| "nodeclaims")?;
            self.daemonsets
                .wait_until_ready()
                .await
                .map_err(|_| "daemonsets")?;
            self.nodeclasses
                .wait_until_ready()
                .await
                .map_err(|_| "kcnodeclasses")?;
            self.pdbs
                .wait_until_ready()
                .await
                .map_err(|_| "poddisruptionbudgets")?;
            self.volume_attachments
                .wait_until_ready()
                .await
                .map_err(|_| "volumeattachments")?;
            Ok(())
        };
        tokio::time::timeout(timeout, all)
            .await
            .map_err(|_| "timed out waiting for the cluster state to sync")?
    }

    /// Stops the watches.
    pub fn stop(&self) {
        for t in self.tasks.iter() {
            t.abort();
        }
    }

    fn nominations(&self) -> MutexGuard<'_, Nominations> {
        self.nominations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn marks(&self) -> MutexGuard<'_, HashSet<String>> {
        self.marked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that provisioning placed the pod `pod_uid` on `target` (a node or NodeClaim).
    pub fn nominate(&self, pod_uid: &str, target: &str) {
        let mut n = self.nominations();
        n.pods
            .retain(|_, (_, at)| at.elapsed() < NOMINATION_TTL.max(Duration::from_secs(600)));
        n.pods
            .insert(pod_uid.to_owned(), (target.to_owned(), Instant::now()));
    }

    /// Where pod `pod_uid` was last nominated, and how long ago.
    pub fn nomination_of(&self, pod_uid: &str) -> Option<(String, Duration)> {
        self.nominations()
            .pods
            .get(pod_uid)
            .map(|(t, at)| (t.clone(), at.elapsed()))
    }

    /// Whether `target` (node or NodeClaim name) received a nomination within `NOMINATION_TTL`.
    pub fn is_nominated(&self, target: &str) -> bool {
        self.nominations()
            .pods
            .values()
            .any(|(t, at)| t == target && at.elapsed() < NOMINATION_TTL)
    }

    /// Every node or NodeClaim name with a nomination younger than `NOMINATION_TTL`.
    pub fn nominated_targets(&self) -> HashSet<String> {
        self.nominations()
            .pods
            .values()
            .filter(|(_, at)| at.elapsed() < NOMINATION_TTL)
            .map(|(t, _)| t.clone())
            .collect()
    }

    fn moves(&self) -> MutexGuard<'_, Moves> {
        self.moves
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Consolidation is moving the pods of these controllers off a node of `pool`.
    pub fn record_moves(&self, pool: &str, owners: impl IntoIterator<Item = String>) {
        let mut m = self.moves();
        m.moved.retain(|_, (_, at, _)| at.elapsed() < MOVE_MEMORY);
        let (now, wall) = (Instant::now(), jiff::Timestamp::now());
        for owner in owners {
            m.moved.insert(owner, (pool.to_owned(), now, wall));
        }
    }

    /// A pod of controller `owner`, created at `created`, needs a new NodeClaim. If
    /// consolidation moved that controller's pods within [`MOVE_MEMORY`] and the pod was created
    /// after the move (an evicted pod's replacement), the move was wrong: the controller is held
    /// (see [`hold_after`]); the disrupted node's NodePool and the hold are returned (once per
    /// move). A
    /// pod pending since before the move (a scale-out's straggler) says nothing about it.
    pub fn revert_move(
        &self,
        owner: &str,
        created: Option<jiff::Timestamp>,
    ) -> Option<(String, Duration)> {
        let mut m = self.moves();
        let (_, at, wall) = m.moved.get(owner)?;
        if at.elapsed() >= MOVE_MEMORY {
            m.moved.remove(owner);
            return None;
        }
        if created.is_some_and(|c| c < *wall - MOVE_CLOCK_SKEW) {
            return None;
        }
        let (pool, _, _) = m.moved.remove(owner)?;
        let now = Instant::now();
        m.reverts
            .retain(|_, (_, last)| now.duration_since(*last) < MAX_REVERTED_HOLD);
        let strikes = m.reverts.entry(owner.to_owned()).or_insert((0, now));
        *strikes = (strikes.0 + 1, now);
        Some((pool, hold_after(strikes.0)))
    }

    /// Controllers whose pods consolidation leaves alone now.
    pub fn held_owners(&self) -> HashSet<String> {
        let m = self.moves();
        let now = Instant::now();
        m.reverts
            .iter()
            .filter(|(_, r)| Moves::held_until(**r) > now)
            .map(|(owner, _)| owner.clone())
            .collect()
    }

    /// A NodeClaim of `pool` failed to launch or register (the NodePool status reports it).
    pub fn registration_failed(&self, pool: &str) {
        self.registration_failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(pool.to_owned(), jiff::Timestamp::now());
    }

    /// When a NodeClaim of `pool` last failed to launch or register, in this process.
    pub fn last_registration_failure(&self, pool: &str) -> Option<jiff::Timestamp> {
        self.registration_failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(pool)
            .copied()
    }

    /// Disruption is taking these nodes away: provisioning no longer places pods on them.
    pub fn mark_for_deletion<'a>(&self, nodes: impl IntoIterator<Item = &'a str>) {
        self.marks().extend(nodes.into_iter().map(str::to_owned));
    }

    /// The disruption was abandoned: the nodes serve again.
    pub fn unmark_for_deletion<'a>(&self, nodes: impl IntoIterator<Item = &'a str>) {
        let mut marks = self.marks();
        for n in nodes {
            marks.remove(n);
        }
    }

    pub fn is_marked_for_deletion(&self, node: &str) -> bool {
        self.marks().contains(node)
    }

    /// Every node joined with its NodeClaim and bound pods, and NodeClaims without a Node yet
    /// (named after the claim). Marks of nodes that no longer exist are dropped.
    pub fn node_views(&self) -> Vec<NodeView> {
        let nominated = self.nominated_targets();
        let mut pods_by_node: HashMap<String, Vec<Arc<CachedPod>>> = HashMap::new();
        for pod in self.pods.state() {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                pods_by_node.entry(node).or_default().push(pod);
            }
        }
        let claims = self.nodeclaims.state();
        let by_provider: HashMap<&str, &Arc<NodeClaim>> = claims
            .iter()
            .filter_map(|c| Some((c.status.as_ref()?.provider_id.as_deref()?, c)))
            .collect();
        let by_node_name: HashMap<&str, &Arc<NodeClaim>> = claims
            .iter()
            .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c)))
            .collect();
        let mut joined: HashSet<String> = HashSet::new();
        let mut views: BTreeMap<String, NodeView> = BTreeMap::new();
        for node in self.nodes.state() {
            let name = node.name_any();
            let claim = node
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|p| by_provider.get(p))
                .or_else(|| by_node_name.get(name.as_str()))
                .map(|c| Arc::clone(c));
            if let Some(c) = &claim {
                joined.insert(c.name_any());
            }
            let nominated = nominated.contains(&name)
                || claim
                    .as_ref()
                    .is_some_and(|c| nominated.contains(&c.name_any()));
            views.insert(
                name.clone(),
                NodeView {
                    pods: pods_by_node.remove(&name).unwrap_or_default(),
                    nominated,
                    marked_for_deletion: self.is_marked_for_deletion(&name),
                    name,
                    node: Some(node),
                    claim,
                },
            );
        }
        for claim in &claims {
            let name = claim.name_any();
            if joined.contains(&name) {
                continue;
            }
            views.entry(name.clone()).or_insert_with(|| NodeView {
                nominated: nominated.contains(&name),
                marked_for_deletion: false,
                pods: Vec::new(),
                node: None,
                claim: Some(Arc::clone(claim)),
                name,
            });
        }
        self.marks().retain(|m| views.contains_key(m));
        views.into_values().collect()
    }

    /// The pods bound to node `name`.
    pub fn pods_on(&self, name: &str) -> Vec<Arc<CachedPod>> {
        self.pods
            .state()
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name))
            .collect()
    }

    /// Every DaemonSet's pod template, as a pod: what each new node must also hold.
    pub fn daemonset_pods(&self) -> Vec<CachedPod> {
        self.daemonsets
            .state()
            .iter()
            .filter_map(|ds| {
                let t = ds.spec.as_ref()?.template.clone();
                Some(CachedPod {
                    metadata: t.metadata.unwrap_or_default(),
                    spec: t.spec.map(Arc::new),
                    status: None,
                })
            })
            .collect()
    }

    /// The Node called `name`, as last watched.
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&reflector::ObjectRef::new(name))
    }

    /// The NodeClaim called `name`, as last watched.
    pub fn nodeclaim(&self, name: &str) -> Option<Arc<NodeClaim>> {
        self.nodeclaims.get(&reflector::ObjectRef::new(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl ClusterState {
        /// A state over stores filled by the test (no API server).
        pub(crate) fn for_test(
            nodes: Vec<Node>,
            claims: Vec<NodeClaim>,
            pods: Vec<CachedPod>,
            pools: Vec<NodePool>,
        ) -> ClusterState {
            fn filled<K>(items: Vec<K>) -> Store<K>
            where
                K: Resource + Clone + 'static,
                K::DynamicType: Default + Eq + std::hash::Hash + Clone,
            {
                let (store, mut writer) = reflector::store();
                writer.apply_watcher_event(&watcher::Event::Init);
                for item in items {
                    writer.apply_watcher_event(&watcher::Event::InitApply(item));
                }
                writer.apply_watcher_event(&watcher::Event::InitDone);
                store
            }
            ClusterState {
                pods: filled(pods),
                nodes: filled(nodes),
                nodepools: filled(pools),
                nodeclaims: filled(claims),
                daemonsets: filled(Vec::new()),
                nodeclasses: filled(Vec::new()),
                pdbs: filled(Vec::new()),
                volume_attachments: filled(Vec::new()),
                nominations: Arc::default(),
                marked: Arc::default(),
                moves: Arc::default(),
                registration_failures: Arc::default(),
                tasks: Arc::new(Vec::new()),
            }
        }
    }

    #[test]
    fn a_moved_controller_that_needs_new_capacity_is_held_once() {
        let state = ClusterState::for_test(Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let now = jiff::Timestamp::now;
        assert_eq!(state.revert_move("rs-1", Some(now())), None, "never moved");
        let before = now() - jiff::SignedDuration::from_secs(60);
        state.record_moves("pool-a", ["rs-1".to_owned(), "rs-2".to_owned()]);
        assert!(state.held_owners().is_empty(), "moving alone holds nothing");
        assert_eq!(
            state.revert_move("rs-1", Some(before)),
            None,
            "a pod pending since before the move is not its consequence"
        );
        assert_eq!(
            state.revert_move("rs-1", Some(now())),
            Some(("pool-a".to_owned(), REVERTED_HOLD))
        );
        assert_eq!(
            state.revert_move("rs-1", Some(now())),
            None,
            "reported once per move"
        );
        assert_eq!(
            state.held_owners(),
            HashSet::from(["rs-1".to_owned()]),
            "rs-2's pods found room"
        );
        // A second wrong move of rs-1 holds it twice as long.
        state.record_moves("pool-a", ["rs-1".to_owned()]);
        assert_eq!(
            state.revert_move("rs-1", Some(now())),
            Some(("pool-a".to_owned(), 2 * REVERTED_HOLD))
        );
        let until = Moves::held_until(state.moves().reverts["rs-1"]);
        let left = until.duration_since(std::time::Instant::now());
        assert!(
            left > REVERTED_HOLD && left <= 2 * REVERTED_HOLD,
            "{left:?}"
        );
    }

    #[test]
    fn the_hold_doubles_with_each_revert_up_to_its_cap() {
        let minutes = |n| hold_after(n).as_secs() / 60;
        assert_eq!([1, 2, 3, 4, 40].map(minutes), [5, 10, 20, 30, 30]);
    }

    fn node(name: &str, provider_id: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"providerID": provider_id},
        }))
        .unwrap()
    }

    fn claim(name: &str, provider_id: Option<&str>) -> NodeClaim {
        let mut c: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "default"}, "requirements": []},
        }))
        .unwrap();
        if let Some(p) = provider_id {
            c.status = Some(kk_apis::NodeClaimStatus {
                provider_id: Some(p.into()),
                ..Default::default()
            });
        }
        c
    }

    fn pod(name: &str, node: &str) -> CachedPod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"nodeName": node, "containers": []},
        }))
        .unwrap()
    }

    #[test]
    fn node_views_join_nodes_claims_and_pods() {
        let state = ClusterState::for_test(
            vec![
                node("n1", "kakaocloud:///z/i1"),
                node("n2", "kakaocloud:///z/i2"),
            ],
            vec![claim("c1", Some("kakaocloud:///z/i1")), claim("c3", None)],
            vec![pod("p1", "n1"), pod("p2", "n1"), pod("p3", "n2")],
            vec![],
        );
        let views = state.node_views();
        let names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["c3", "n1", "n2"]);
        let n1 = &views[1];
        assert_eq!(n1.claim.as_ref().unwrap().name_any(), "c1");
        assert_eq!(n1.pods.len(), 2);
        assert!(views[2].claim.is_none());
        assert!(
            views[0].node.is_none(),
            "a claim without a node is its own view"
        );
    }

    #[test]
    fn nominations_are_shared_and_expire_by_target() {
        let state = ClusterState::for_test(
            vec![node("n1", "kakaocloud:///z/i1")],
            vec![claim("c1", Some("kakaocloud:///z/i1"))],
            vec![],
            vec![],
        );
        let other = state.clone();
        assert!(!other.node_views()[0].nominated);
        state.nominate("pod-uid", "c1");
        assert!(other.is_nominated("c1"));
        assert!(
            other.node_views()[0].nominated,
            "nominating the claim protects its node"
        );
        assert_eq!(other.nomination_of("pod-uid").unwrap().0, "c1");
        assert!(!other.is_nominated("n2"));
    }

    #[test]
    fn trimming_keeps_what_scheduling_reads_and_drops_how_containers_run() {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "managedFields": [{"manager": "kubectl"}],
                "annotations": {"karpenter.sh/do-not-disrupt": "true", "sidecar.istio.io/status": "{}",
                    "controller.kubernetes.io/pod-deletion-cost": "5"}},
            "spec": {
                "containers": [{"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80}, {"containerPort": 8080, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "1"}}}],
                "initContainers": [{"name": "sidecar", "image": "envoy", "restartPolicy": "Always",
                    "resources": {"requests": {"memory": "1Gi"}}}],
                "volumes": [
                    {"name": "kube-api-access", "projected": {"sources": []}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "nodeName": "n1"},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "PodScheduled", "status": "True", "reason": "Scheduled", "message": "long text"}],
                "containerStatuses": [{"name": "app", "image": "nginx", "imageID": "", "ready": true, "restartCount": 0}]}
        }))
        .unwrap();
        p.trim();
        let spec = p.spec.as_ref().unwrap();
        let app = &spec.containers[0];
        assert_eq!(app.image, None);
        assert_eq!(app.env, None);
        assert_eq!(
            app.resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"].0,
            "1"
        );
        let ports = app.ports.as_ref().unwrap();
        assert_eq!(ports.len(), 1, "only host ports constrain scheduling");
        assert_eq!(ports[0].host_port, Some(8080));
        let sidecar = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
        assert!(sidecar.resources.is_some());
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["data"]);
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 1);
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let conditions = status.conditions.as_ref().unwrap();
        let kept: Vec<_> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(kept, ["Ready", "PodScheduled"]);
        assert_eq!(conditions[1].reason.as_deref(), Some("Scheduled"));
        assert_eq!(conditions[1].message, None);
        assert_eq!(status.pod_ip, None);
        assert_eq!(status.container_statuses, None);
        assert_eq!(p.metadata.managed_fields, None);
        assert!(kk_apis::pod::do_not_disrupt(
            &p.clone().into(),
            jiff::Timestamp::now()
        ));
        let kept: Vec<&str> = p.annotations().keys().map(String::as_str).collect();
        assert_eq!(
            kept,
            [
                "controller.kubernetes.io/pod-deletion-cost",
                "karpenter.sh/do-not-disrupt"
            ],
            "only the annotations read are kept"
        );
    }

    #[test]
    fn a_pod_without_claims_keeps_no_volume_list() {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app"}],
                "volumes": [{"name": "kube-api-access", "projected": {"sources": []}}]}
        }))
        .unwrap();
        p.trim();
        assert_eq!(p.spec.unwrap().volumes, None);
    }

    #[test]
    fn marks_follow_the_nodes_that_exist() {
        let state = ClusterState::for_test(
            vec![node("n1", "kakaocloud:///z/i1")],
            vec![],
            vec![],
            vec![],
        );
        state.mark_for_deletion(["n1", "gone"]);
        assert!(state.is_marked_for_deletion("gone"));
        assert!(state.node_views()[0].marked_for_deletion);
        assert!(
            !state.is_marked_for_deletion("gone"),
            "marks of vanished nodes are dropped"
        );
        state.unmark_for_deletion(["n1"]);
        assert!(!state.is_marked_for_deletion("n1"));
    }
}
