//! From Kubernetes objects to a [`ClusterSnapshot`]: the only place disruption reads the API
//! types, so the rules stay pure.

use kk_apis::names::{annotation, label, taint};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, PodAffinityTerm, PodSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kk_apis::ResourceExt;
use kk_apis::cached_pod::CachedPod;

use super::drift;
use super::model::{ClusterSnapshot, NodeState, PodState, PoolState};
use kk_apis::crd::{KCNodeClass, NodeClaim, NodePool};

use crate::scheduling::{InstanceType, Resources, resources, translate};
use kk_apis::pod::{
    do_not_disrupt, is_daemonset_pod, is_mirror_pod, is_provisionable, is_terminal, pdb_blocked,
    required_anti_affinity, selects,
};

/// Everything a snapshot is built from (the reflector stores' contents and a PDB list).
pub struct Objects<'a> {
    pub now: Timestamp,
    pub pools: &'a [Arc<NodePool>],
    pub claims: &'a [Arc<NodeClaim>],
    pub nodes: &'a [Arc<Node>],
    pub pods: &'a [Arc<CachedPod>],
    pub classes: &'a [Arc<KCNodeClass>],
    pub pdbs: &'a [Arc<PodDisruptionBudget>],
    /// Nodes and NodeClaims provisioning just placed pending pods on (hands off).
    pub nominated: &'a HashSet<String>,
    /// Controllers whose pods a reverted consolidation moved (see [`PodState::consolidation_held`]).
    pub held_owners: &'a HashSet<String>,
    pub instance_types: Vec<InstanceType>,
    /// DaemonSet pod templates (as pods), for the full check's replacements.
    pub daemonsets: Vec<CachedPod>,
}

fn pod_state(shared: &Arc<CachedPod>, o: &Objects<'_>) -> PodState {
    let pod = shared.as_ref();
    let pdbs = o.pdbs;
    // Borrowed: a pass reads every pod, and copying each spec cost a PodSpec per pod per pass.
    let no_spec;
    let spec = match pod.spec.as_ref() {
        Some(spec) => spec,
        None => {
            no_spec = PodSpec::default();
            &no_spec
        }
    };
    let requests = resources::pod_requests(spec).unwrap_or(Resources::ZERO);
    let mut state = PodState::new(
        &pod.namespace().unwrap_or_default(),
        &pod.name_any(),
        requests,
    );
    state.daemonset = is_daemonset_pod(pod);
    state.mirror = is_mirror_pod(pod);
    state.terminating = pod.metadata.deletion_timestamp.is_some() || is_terminal(pod);
    state.do_not_disrupt = do_not_disrupt(pod, o.now);
    state.pdb_blocked = pdb_blocked(pod, pdbs.iter().map(Arc::as_ref));
    state.priority = spec.priority.unwrap_or(0);
    state.owner = pod
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone());
    state.consolidation_held = state
        .owner
        .as_ref()
        .is_some_and(|u| o.held_owners.contains(u));
    state.deletion_cost = pod
        .annotations()
        .get(annotation::POD_DELETION_COST)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    state.node_selector = spec.node_selector.clone().unwrap_or_default();
    let affinity = spec.affinity.as_ref();
    state.affinity_terms = affinity
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.clone())
        .unwrap_or_default();
    state.tolerations = spec.tolerations.clone().unwrap_or_default();
    let host_ports = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .any(|p| p.host_port.is_some());
    state.pod = Some(Arc::clone(shared));
    state.needs_full_simulation = host_ports
        || affinity.is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
        || spec
            .topology_spread_constraints
            .as_ref()
            .is_some_and(|t| !t.is_empty());
    state
}

fn pool_state(pool: &NodePool, classes: &[Arc<KCNodeClass>]) -> PoolState {
    let mut state = PoolState::new(pool.name_any());
    let d = &pool.spec.disruption;
    state.is_static = pool.spec.is_static();
    state.consolidation_policy = d.consolidation_policy;
    state.consolidate_after = d.consolidate_after.duration();
    state.expire_after = pool.spec.template.spec.expire_after.duration();
    state.budgets = d.budgets.clone();
    let class = classes
        .iter()
        .find(|c| c.name_any() == pool.spec.template.spec.node_class_ref.name)
        .map(Arc::as_ref);
    // What the solver reads of the pool, translated once: requirements (with the class's
    // zones), template labels, taints and startup taints.
    let input = translate::nodepool_input(pool, class, Resources::ZERO, 0);
    state.weight = input.weight;
    state.requirements = input.requirements;
    state.labels = input.labels;
    state.taints = input.taints;
    state.startup_taints = input.startup_taints;
    state.at_limit = at_limit(pool);
    state
}

/// Whether the pool's usage (its status) has reached one of its limits.
fn at_limit(pool: &NodePool) -> bool {
    let Some(limits) = pool.spec.limits.as_ref() else {
        return false;
    };
    let usage = pool.status.as_ref().map(|s| &s.resources);
    limits.iter().any(|(key, limit)| {
        let used = usage.and_then(|u| u.get(key));
        match (
            used.and_then(|q| resources::parse_milli(&q.0)),
            resources::parse_milli(&limit.0),
        ) {
            (Some(used), Some(limit)) => used >= limit,
            _ => false,
        }
    })
}

fn condition_true(claim: &NodeClaim, type_: &str) -> Option<Timestamp> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| c.last_transition_time.0)
}

fn price_of(types: &[InstanceType], name: &str, zone: &str, capacity_type: &str) -> u64 {
    let Some(it) = types.iter().find(|t| t.name == name) else {
        return 0;
    };
    it.offerings
        .iter()
        .filter(|o| o.zone == zone && o.capacity_type == capacity_type)
        .map(|o| o.price_micros)
        .min()
        .or_else(|| it.offerings.iter().map(|o| o.price_micros).min())
        .unwrap_or(0)
}

fn node_state(
    claim: &NodeClaim,
    node: Option<&Node>,
    o: &Objects<'_>,
    bound: &HashMap<&str, Vec<&Arc<CachedPod>>>,
    keep_out: &[KeepOut<'_>],
) -> NodeState {
    let labels: BTreeMap<String, String> = node
        .map(|n| n.labels().clone())
        .unwrap_or_else(|| claim.labels().clone());
    let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
    let pool_name = claim.labels().get(label::NODEPOOL).cloned();
    let allocatable = node
        .and_then(|n| n.status.as_ref()?.allocatable.as_ref())
        .and_then(|a| resources::from_list(a).ok())
        .or_else(|| {
            claim
                .status
                .as_ref()
                .and_then(|s| resources::from_list(&s.allocatable).ok())
        })
        .unwrap_or_default();
    let created = claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(o.now, |t| t.0);
    let name = node
        .map(|n| n.name_any())
        .unwrap_or_else(|| claim.name_any());
    let mut state = NodeState::new(
        name.clone(),
        pool_name.as_deref().unwrap_or(""),
        &label(label::INSTANCE_TYPE),
        0,
        allocatable,
        created,
    );
    state.node_pool = pool_name.clone();
    state.nodeclaim = Some(claim.name_any());
    state.zone = label(label::ZONE);
    state.capacity_type = labels
        .get(label::CAPACITY_TYPE)
        .cloned()
        .unwrap_or_else(|| "on-demand".into());
    state.price_micros = price_of(
        &o.instance_types,
        &state.instance_type,
        &state.zone,
        &state.capacity_type,
    );
    let taints = node
        .and_then(|n| n.spec.as_ref()?.taints.clone())
        .unwrap_or_default();
    state.deleting = claim.metadata.deletion_timestamp.is_some()
        || node.is_some_and(|n| n.metadata.deletion_timestamp.is_some())
        || taints.iter().any(|t| t.key == taint::DISRUPTED);
    state.taints = taints;
    state.labels = labels;
    let initialized_at = condition_true(claim, "Initialized");
    state.initialized = node.is_some() && initialized_at.is_some();
    state.ready = node
        .and_then(|n| n.status.as_ref()?.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    state.do_not_disrupt = node.is_some_and(|n| {
        n.annotations()
            .get(drain_annotation())
            .is_some_and(|v| v == "true")
    });
    let last_pod = claim
        .status
        .as_ref()
        .and_then(|s| s.last_pod_event_time.as_ref())
        .map(|t| t.0);
    state.last_pod_event = last_pod.max(initialized_at);
    state.expire_after = claim.spec.expire_after.duration();
    if let Some(pool) = pool_name
        .as_deref()
        .and_then(|p| o.pools.iter().find(|np| np.name_any() == p))
    {
        let class = o
            .classes
            .iter()
            .find(|c| c.name_any() == claim.spec.node_class_ref.name)
            .map(Arc::as_ref);
        state.drift = drift::detect(claim, pool, class);
    }
    state.pods = pods_on(&name, o, bound, keep_out);
    state
}

/// The pods bound to `node`, as the planner sees them.
fn pods_on(
    node: &str,
    o: &Objects<'_>,
    bound: &HashMap<&str, Vec<&Arc<CachedPod>>>,
    keep_out: &[KeepOut<'_>],
) -> Vec<PodState> {
    bound
        .get(node)
        .into_iter()
        .flatten()
        .map(|p| {
            let mut state = pod_state(p, o);
            state.kept_out_of = kept_out_of(p.as_ref(), keep_out);
            state
        })
        .collect()
}

/// One running pod's required anti-affinity term, and the topology domain that pod is in.
struct KeepOut<'a> {
    owner: &'a CachedPod,
    namespace: String,
    term: &'a PodAffinityTerm,
    value: String,
}

impl KeepOut<'_> {
    /// Whether the term selects `pod`: its namespaces (the owner's when none are named; any
    /// namespace when a namespace selector is set, since namespaces' labels are not watched),
    /// then its label selector on the pod's current labels.
    fn selects(&self, pod: &CachedPod) -> bool {
        let ns = pod.namespace().unwrap_or_default();
        let names = self.term.namespaces.as_deref().unwrap_or(&[]);
        let in_namespace = if self.term.namespace_selector.is_some() {
            true
        } else if names.is_empty() {
            ns == self.namespace
        } else {
            names.contains(&ns)
        };
        in_namespace && selects(self.term.label_selector.as_ref(), pod.labels())
    }
}

/// Every required anti-affinity term of the pods bound to nodes, with its domain (the node's
/// value of the term's topology key; the node's name stands in for a missing hostname label).
fn keep_out_terms<'a>(
    pods: impl IntoIterator<Item = &'a CachedPod>,
    nodes: &HashMap<&str, &'a Node>,
) -> Vec<KeepOut<'a>> {
    let mut out = Vec::new();
    for pod in pods.into_iter().filter(|p| !is_terminal(p)) {
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        let Some(node_name) = spec.node_name.as_deref() else {
            continue;
        };
        for term in required_anti_affinity(pod) {
            let value = nodes
                .get(node_name)
                .and_then(|n| n.labels().get(&term.topology_key).cloned())
                .or_else(|| (term.topology_key == label::HOSTNAME).then(|| node_name.to_owned()));
            if let Some(value) = value {
                out.push(KeepOut {
                    owner: pod,
                    namespace: pod.namespace().unwrap_or_default(),
                    term,
                    value,
                });
            }
        }
    }
    out
}

/// The domains `pod` must keep out of, sorted and without repeats.
fn kept_out_of(pod: &CachedPod, keep_out: &[KeepOut<'_>]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = keep_out
        .iter()
        .filter(|k| !std::ptr::eq(k.owner, pod) && k.selects(pod))
        .map(|k| (k.term.topology_key.clone(), k.value.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn drain_annotation() -> &'static str {
    annotation::DO_NOT_DISRUPT
}

/// Builds the snapshot: one node per NodeClaim, and unmanaged Nodes that can receive pods.
pub fn snapshot(o: Objects<'_>) -> ClusterSnapshot {
    // Indexed once: a pass at thousands of nodes and tens of thousands of pods must not scan
    // every pod (or node) per node.
    let by_name: HashMap<&str, &Node> = o
        .nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n.as_ref())))
        .collect();
    let mut bound: HashMap<&str, Vec<&Arc<CachedPod>>> = HashMap::new();
    for pod in o.pods {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            bound.entry(node).or_default().push(pod);
        }
    }
    let keep_out = keep_out_terms(o.pods.iter().map(Arc::as_ref), &by_name);
    let mut nodes = Vec::with_capacity(o.claims.len());
    let mut seen: HashSet<String> = HashSet::with_capacity(o.claims.len());
    for claim in o.claims {
        let node_name = claim.status.as_ref().and_then(|s| s.node_name.as_deref());
        let node = node_name.and_then(|n| by_name.get(n).copied());
        let mut state = node_state(claim, node, &o, &bound, &keep_out);
        seen.insert(state.name.clone());
        state.nominated = o.nominated.contains(&claim.name_any())
            || node_name.is_some_and(|n| o.nominated.contains(n));
        nodes.push(state);
    }
    for node in o.nodes {
        if seen.contains(&node.name_any()) || node.labels().contains_key(label::NODEPOOL) {
            continue;
        }
        // A node Karpenter does not manage: pods may move onto it, it is never a candidate.
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| resources::from_list(a).ok())
            .unwrap_or_default();
        let mut state = NodeState::new(node.name_any(), "", "", 0, allocatable, o.now);
        state.nodeclaim = None;
        state.node_pool = None;
        state.labels = node.labels().clone();
        state.taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        state.pods = pods_on(&node.name_any(), &o, &bound, &keep_out);
        nodes.push(state);
    }
    let pending_pods = o
        .pods
        .iter()
        .filter(|p| is_provisionable(p))
        .map(|p| {
            let mut state = pod_state(p, &o);
            state.kept_out_of = kept_out_of(p.as_ref(), &keep_out);
            state
        })
        .collect();
    let fingerprint = fingerprint(&o);
    ClusterSnapshot {
        now: o.now,
        pools: o.pools.iter().map(|p| pool_state(p, o.classes)).collect(),
        nodes,
        instance_types: o.instance_types,
        pending_pods,
        fingerprint,
        daemonsets: o.daemonsets,
    }
}

/// What the snapshot's decisions read, besides the time: every object's identity and version,
/// the nominations, the held controllers and the offerings. A Node's version moves with its
/// heartbeats, so a Node counts by what the rules read of it instead: labels, taints,
/// allocatable, readiness, cordon, deletion and its do-not-disrupt annotation.
fn fingerprint(o: &Objects<'_>) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    let mut version = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.uid.hash(&mut h);
        m.resource_version.hash(&mut h);
    };
    o.pools.iter().for_each(|x| version(&x.metadata));
    o.claims.iter().for_each(|x| version(&x.metadata));
    o.pods.iter().for_each(|x| version(&x.metadata));
    o.classes.iter().for_each(|x| version(&x.metadata));
    o.pdbs.iter().for_each(|x| version(&x.metadata));
    for n in o.nodes {
        n.metadata.name.hash(&mut h);
        n.metadata.labels.hash(&mut h);
        n.metadata.deletion_timestamp.is_some().hash(&mut h);
        n.annotations().get(annotation::DO_NOT_DISRUPT).hash(&mut h);
        if let Some(spec) = &n.spec {
            spec.unschedulable.hash(&mut h);
            for t in spec.taints.iter().flatten() {
                (&t.key, &t.value, &t.effect).hash(&mut h);
            }
        }
        if let Some(status) = &n.status {
            for (k, q) in status.allocatable.iter().flatten() {
                (k, &q.0).hash(&mut h);
            }
            for c in status.conditions.iter().flatten() {
                if c.type_ == "Ready" {
                    c.status.hash(&mut h);
                }
            }
        }
    }
    for set in [o.nominated, o.held_owners] {
        let mut v: Vec<&String> = set.iter().collect();
        v.sort();
        v.hash(&mut h);
    }
    for it in &o.instance_types {
        it.name.hash(&mut h);
        for off in &it.offerings {
            (
                &off.zone,
                &off.capacity_type,
                off.price_micros,
                off.available,
            )
                .hash(&mut h);
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, zone: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {label::HOSTNAME: name, label::ZONE: zone}}
        }))
        .unwrap()
    }

    fn pod(
        ns: &str,
        name: &str,
        app: &str,
        node: &str,
        anti: Option<serde_json::Value>,
    ) -> CachedPod {
        let mut spec = json!({"nodeName": node, "containers": [{"name": "c"}]});
        if let Some(term) = anti {
            spec["affinity"] = json!({"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [term]
            }});
        }
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name, "labels": {"app": app}},
            "spec": spec,
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    #[test]
    fn a_pool_is_at_its_limit_when_its_usage_reaches_any_of_them() {
        let pool = |limits: serde_json::Value, usage: serde_json::Value| -> NodePool {
            serde_json::from_value(json!({
                "metadata": {"name": "p"},
                "spec": {
                    "template": {"spec": {
                        "nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "c"},
                        "requirements": []
                    }},
                    "limits": limits
                },
                "status": {"resources": usage}
            }))
            .unwrap()
        };
        let usage = json!({"cpu": "16", "memory": "64Gi"});
        assert!(!at_limit(&pool(json!({"cpu": "32"}), usage.clone())));
        assert!(at_limit(&pool(
            json!({"cpu": "32", "memory": "64Gi"}),
            usage.clone()
        )));
        assert!(at_limit(&pool(json!({"cpu": "16000m"}), usage.clone())));
        assert!(!at_limit(&pool(json!({}), usage)));
    }

    fn kept(pods: &[CachedPod], nodes: &[Node], who: &str) -> Vec<(String, String)> {
        let by_name: HashMap<&str, &Node> = nodes
            .iter()
            .map(|n| (n.metadata.name.as_deref().unwrap(), n))
            .collect();
        let terms = keep_out_terms(pods, &by_name);
        let p = pods.iter().find(|p| p.name_any() == who).unwrap();
        kept_out_of(p, &terms)
    }

    #[test]
    fn a_running_pods_anti_affinity_keeps_the_pods_it_selects_out_of_its_domain() {
        let nodes = [node("n1", "kr-a"), node("n2", "kr-b")];
        let host =
            json!({"topologyKey": label::HOSTNAME, "labelSelector": {"matchLabels": {"app": "y"}}});
        let zone =
            json!({"topologyKey": label::ZONE, "labelSelector": {"matchLabels": {"app": "y"}}});
        let pods = [
            pod("ns", "x", "x", "n1", Some(host)),
            pod("ns", "z", "z", "n1", Some(zone)),
            pod("ns", "y", "y", "n2", None),
            pod("other", "y-elsewhere", "y", "n2", None),
        ];
        assert_eq!(
            kept(&pods, &nodes, "y"),
            [
                (label::HOSTNAME.to_owned(), "n1".to_owned()),
                (label::ZONE.to_owned(), "kr-a".to_owned())
            ]
        );
        assert!(kept(&pods, &nodes, "x").is_empty(), "x is not selected");
        assert!(
            kept(&pods, &nodes, "y-elsewhere").is_empty(),
            "the terms name no namespace: the owner's only"
        );

        // A namespace selector reaches every namespace; a pod's own term does not count for it.
        let any_ns = json!({"topologyKey": label::HOSTNAME, "namespaceSelector": {},
            "labelSelector": {"matchLabels": {"app": "y"}}});
        let pods = [
            pod("ns", "x", "y", "n1", Some(any_ns)),
            pod("other", "y-elsewhere", "y", "n2", None),
        ];
        assert_eq!(
            kept(&pods, &nodes, "y-elsewhere"),
            [(label::HOSTNAME.to_owned(), "n1".to_owned())]
        );
        assert!(kept(&pods, &nodes, "x").is_empty());
    }

    #[test]
    fn the_fingerprint_moves_with_what_the_rules_read_and_not_with_heartbeats() {
        let print = |nodes: &[Node], pods: &[CachedPod]| {
            let nodes: Vec<Arc<Node>> = nodes.iter().cloned().map(Arc::new).collect();
            let pods: Vec<Arc<CachedPod>> = pods.iter().cloned().map(Arc::new).collect();
            let none = HashSet::new();
            snapshot(Objects {
                now: "2026-12-03T12:00:00Z".parse().unwrap(),
                pools: &[],
                claims: &[],
                nodes: &nodes,
                pods: &pods,
                classes: &[],
                pdbs: &[],
                nominated: &none,
                held_owners: &none,
                instance_types: Vec::new(),
                daemonsets: Vec::new(),
            })
            .fingerprint
        };
        let ready = |n: &mut Node, heartbeat: &str| {
            n.status = Some(
                serde_json::from_value(json!({"conditions": [{"type": "Ready",
                    "status": "True", "lastHeartbeatTime": heartbeat}]}))
                .unwrap(),
            );
        };
        let mut n = node("n1", "kr-a");
        ready(&mut n, "2026-12-03T11:59:00Z");
        let mut p = pod("ns", "x", "x", "n1", None);
        p.metadata.resource_version = Some("1".into());
        let key = print(std::slice::from_ref(&n), std::slice::from_ref(&p));

        let mut beat = n.clone();
        ready(&mut beat, "2026-12-03T11:59:40Z");
        beat.metadata.resource_version = Some("2".into());
        assert_eq!(print(&[beat], std::slice::from_ref(&p)), key, "a heartbeat");

        let mut tainted = n.clone();
        tainted.spec = Some(
            serde_json::from_value(json!({"taints": [{"key": "k", "effect": "NoSchedule"}]}))
                .unwrap(),
        );
        assert_ne!(print(&[tainted], std::slice::from_ref(&p)), key, "a taint");
        let mut moved = p.clone();
        moved.metadata.resource_version = Some("2".into());
        assert_ne!(
            print(std::slice::from_ref(&n), &[moved]),
            key,
            "a pod's new version"
        );
    }
}
