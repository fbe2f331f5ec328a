//! The NodePool status controller: upstream's `nodepool.counter`, `nodepool.readiness`,
//! `nodepool.validation` and `nodepool.registrationhealth` controllers as one pass over the
//! shared cluster state, so `kubectl get nodepools` shows real NODES, READY, CPU and MEMORY.
//!
//! * [`desired`] is the pure part: from a NodePool, its KCNodeClass and its NodeClaims (with
//!   their Nodes) to the status upstream would write.
//! * [`run`] writes it every [`INTERVAL`] for each managed NodePool, only when it differs,
//!   and routes each NodePool's plugin annotations ([`route`]).
//!
//! * [`stamp_hash`] is upstream's `nodepool.hash`: the NodePool's template hash and its version
//!   as annotations, and NodeClaims stamped by another hash version re-stamped with today's.
//!
//! Invariants:
//! - only `status` and the two hash annotations are written (merge patches), never spec;
//! - `status.resources` is the summed capacity of the pool's NodeClaims (the Node's capacity once
//!   it registered), with upstream's zero entries for cpu, memory, pods, ephemeral-storage and
//!   nodes; `status.nodes` is the `nodes` entry;
//! - `Ready` is `ValidationSucceeded` and `NodeClassReady` (upstream's root condition);
//!   `NodeRegistrationHealthy` is reported beside it and does not gate `Ready`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::events::Events;
use crate::provisioning::is_managed_pool;
use crate::state::ClusterState;
use kk_apis::crd::conditions::{DesiredCondition, set_condition};
use kk_apis::crd::nodepool::{MAX_NODEPOOL_NAME_LEN, NodePoolStatus};
use kk_apis::crd::{KCNodeClass, NodeClaim, NodePool};
use kk_apis::hash;
use kk_apis::names::{annotation, condition, label};
use kk_engine::scheduling::resources::{self, Resources};
use kk_plugin_runtime::{Kind, Registry};

/// How often every NodePool's status is recomputed (upstream's counter requeues every 5 s).
pub const INTERVAL: Duration = Duration::from_secs(5);

/// Upstream's reason and message for a condition it has not decided yet.
const AWAITING: (&str, &str) = (
    "AwaitingReconciliation",
    "object is awaiting reconciliation",
);

/// Upstream's `RuntimeValidate`, plus KakaoCloud's NodePool name limit: why `pool` is invalid.
pub fn validate(pool: &NodePool) -> Result<(), String> {
    let mut errs = Vec::new();
    let name = pool.name_any();
    if name.len() > MAX_NODEPOOL_NAME_LEN {
        errs.push(format!(
            "name {name:?} is longer than {MAX_NODEPOOL_NAME_LEN} characters (the instance name \
             also carries the cluster and NodeClaim names)"
        ));
    }
    let restricted = |key: &str| {
        key == label::NODEPOOL
            || key == label::HOSTNAME
            || (!label::WELL_KNOWN.contains(&key)
                && key.split_once('/').is_some_and(|(domain, _)| {
                    domain == "karpenter.sh" || domain.ends_with(".karpenter.sh")
                }))
    };
    let labels = pool.spec.template.metadata.as_ref().map(|m| &m.labels);
    for key in labels.into_iter().flat_map(|l| l.keys()) {
        if restricted(key) {
            errs.push(format!("invalid key name {key:?} in labels, restricted"));
        }
    }
    for r in &pool.spec.template.spec.requirements {
        if r.key == label::NODEPOOL || r.key == label::HOSTNAME {
            errs.push(format!(
                "invalid key: {:?} in requirements, restricted",
                r.key
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// `bytes` as Kubernetes writes memory: the largest binary suffix that divides it.
fn binary_quantity(bytes: u64) -> Quantity {
    for (shift, suffix) in [(30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return Quantity(format!("{}{suffix}", bytes >> shift));
        }
    }
    Quantity(bytes.to_string())
}

/// The summed capacity of `claims` as upstream's `status.resources`, and the node count.
fn resources_of(claims: &[&NodeClaim], nodes: &HashMap<&str, &Node>) -> BTreeMap<String, Quantity> {
    let mut sum = Resources::ZERO;
    for nc in claims {
        let status = nc.status.as_ref();
        let capacity = status
            .and_then(|s| s.node_name.as_deref())
            .and_then(|n| nodes.get(n))
            .and_then(|n| n.status.as_ref()?.capacity.as_ref())
            .or(status.map(|s| &s.capacity));
        if let Some(c) = capacity.and_then(|c| resources::from_list(c).ok()) {
            sum = sum.add(&c);
        }
    }
    let mut out: BTreeMap<String, Quantity> = ["cpu", "memory", "pods", "ephemeral-storage"]
        .into_iter()
        .map(|k| (k.to_owned(), Quantity("0".into())))
        .collect();
    for (k, q) in sum.to_quantities() {
        let q = match k.as_str() {
            "memory" | "ephemeral-storage" => binary_quantity(q.0.parse().unwrap_or_default()),
            _ => q,
        };
        out.insert(k, q);
    }
    out.insert("nodes".into(), Quantity(claims.len().to_string()));
    out
}

fn find<'c>(conditions: &'c [Condition], type_: &str) -> Option<&'c Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Upstream's `NodeClassReady`: the class's own `Ready`, or why it is missing.
fn nodeclass_ready(class: Option<&KCNodeClass>) -> DesiredCondition {
    let c = condition::NODECLASS_READY;
    let Some(class) = class else {
        return DesiredCondition::falsy(c, "NodeClassNotFound", "NodeClass not found on cluster");
    };
    if class.metadata.deletion_timestamp.is_some() {
        return DesiredCondition::falsy(c, "NodeClassTerminating", "NodeClass is Terminating");
    }
    let conditions = class
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    match find(conditions, condition::READY) {
        Some(r) if r.status == "True" => DesiredCondition::truthy(c, c, ""),
        Some(r) if r.status == "False" => DesiredCondition::falsy(c, &r.reason, &r.message),
        _ => DesiredCondition::falsy(
            c,
            "NodeClassReadinessUnknown",
            "Node Class Readiness Unknown",
        ),
    }
}

/// Upstream's `NodeRegistrationHealthy`: Unknown after the pool or its class changed, then True
/// once one of its NodeClaims registers, False once one fails to launch or register.
fn registration_health(
    pool: &NodePool,
    class: Option<&KCNodeClass>,
    claims: &[&NodeClaim],
    last_failure: Option<Timestamp>,
) -> DesiredCondition {
    let c = condition::NODE_REGISTRATION_HEALTHY;
    let status = pool.status.as_ref();
    let current = status.and_then(|s| find(&s.conditions, c));
    let class_generation = class.and_then(|k| k.metadata.generation);
    let stale = current.is_none_or(|cur| cur.observed_generation != pool.metadata.generation)
        || status.and_then(|s| s.node_class_observed_generation) != class_generation;
    let Some(current) = current.filter(|_| !stale) else {
        return DesiredCondition::unknown(c, AWAITING.0, AWAITING.1);
    };
    let since = current.last_transition_time.0;
    let registered = claims
        .iter()
        .filter_map(|nc| find(&nc.status.as_ref()?.conditions, condition::REGISTERED))
        .filter(|r| r.status == "True")
        .map(|r| r.last_transition_time.0)
        .max();
    let failed = last_failure.filter(|t| *t >= since);
    let registered_since = registered.filter(|t| *t >= since);
    match (current.status.as_str(), registered_since, failed) {
        // The latest outcome decides.
        (_, Some(ok), Some(bad)) if bad > ok => {
            DesiredCondition::falsy(c, "RegistrationFailed", "Failed to register node")
        }
        (_, Some(_), _) => DesiredCondition::truthy(c, c, ""),
        (_, None, Some(_)) => {
            DesiredCondition::falsy(c, "RegistrationFailed", "Failed to register node")
        }
        ("True", None, None) => DesiredCondition::truthy(c, c, ""),
        ("False", None, None) => DesiredCondition::falsy(c, &current.reason, &current.message),
        _ => DesiredCondition::unknown(c, AWAITING.0, AWAITING.1),
    }
}

/// The status upstream would write for `pool`.
pub fn desired(
    pool: &NodePool,
    class: Option<&KCNodeClass>,
    claims: &[&NodeClaim],
    nodes: &HashMap<&str, &Node>,
    last_failure: Option<Timestamp>,
    now: Timestamp,
) -> NodePoolStatus {
    let mut status = pool.status.clone().unwrap_or_default();
    let t = Time(now);
    let generation = pool.metadata.generation;
    let validation = match validate(pool) {
        Ok(()) => DesiredCondition::truthy(
            condition::VALIDATION_SUCCEEDED,
            condition::VALIDATION_SUCCEEDED,
            "",
        ),
        Err(why) => DesiredCondition::falsy(
            condition::VALIDATION_SUCCEEDED,
            "NodePoolValidationFailed",
            why,
        ),
    };
    let health = registration_health(pool, class, claims, last_failure);
    for d in [&validation, &nodeclass_ready(class), &health] {
        set_condition(&mut status.conditions, d, generation, &t);
    }
    // The root condition over its dependents, worded as upstream's operatorpkg does.
    let unhealthy: Vec<&Condition> = [condition::VALIDATION_SUCCEEDED, condition::NODECLASS_READY]
        .iter()
        .filter_map(|d| find(&status.conditions, d))
        .filter(|c| c.status != "True")
        .collect();
    let ready = if unhealthy.is_empty() {
        DesiredCondition::truthy(condition::READY, condition::READY, "")
    } else {
        let message = unhealthy
            .iter()
            .map(|c| format!("{}={}", c.type_, c.status))
            .collect::<Vec<_>>()
            .join(", ");
        if unhealthy.iter().any(|c| c.status == "False") {
            DesiredCondition::falsy(condition::READY, "UnhealthyDependents", message)
        } else {
            DesiredCondition::unknown(condition::READY, "ReconcilingDependents", message)
        }
    };
    set_condition(&mut status.conditions, &ready, generation, &t);
    status.resources = resources_of(claims, nodes);
    status.nodes = Some(claims.len() as i64);
    status.node_class_observed_generation = class.and_then(|k| k.metadata.generation);
    status
}

/// Writes every managed NodePool's status when it differs from what is stored, and routes
/// their plugin annotations through `plugins` (when plugins load from ConfigMaps).
pub async fn run(
    client: kube::Client,
    state: ClusterState,
    events: Events,
    plugins: Option<Arc<Registry>>,
) {
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(registry) = &plugins {
            route(&state.nodepools.state(), registry, &events);
        }
        pass(&client, &state).await;
    }
}

/// How often a NodePool naming a plugin that is not loaded is told so again.
const NOT_LOADED_EVERY: Duration = Duration::from_secs(600);

/// Gives `registry` the plugin each managed NodePool names per world (its
/// `plugins.karpenter.kakaocloud.com/<world>` annotations). A NodePool naming a plugin that is
/// not loaded is served by the world's default and gets a Warning `PluginNotLoaded`.
pub fn route(pools: &[Arc<NodePool>], registry: &Registry, events: &Events) {
    let mut routes = HashMap::new();
    for pool in pools.iter().filter(|p| is_managed_pool(p)) {
        for kind in Kind::ALL {
            let key = kind.nodepool_annotation();
            let Some(name) = pool.annotations().get(key).filter(|n| !n.is_empty()) else {
                continue;
            };
            if registry.named(kind, name).is_none() {
                events.publish_deduped(
                    &pool.object_ref(&()),
                    EventType::Warning,
                    "PluginNotLoaded",
                    format!(
                        "annotation {key} names {kind} plugin {name}, which is not loaded (no such \
                         ConfigMap in the controller's namespace, or it was refused: see its \
                         Events); the default serves this NodePool"
                    ),
                    NOT_LOADED_EVERY,
                );
            }
            routes.insert((kind, pool.name_any()), name.clone());
        }
    }
    registry.set_routes(routes);
}

#[tracing::instrument(skip_all)]
async fn pass(client: &kube::Client, state: &ClusterState) {
    let claims = state.nodeclaims.state();
    let nodes = state.nodes.state();
    let nodes_by_name: HashMap<&str, &Node> = nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n.as_ref())))
        .collect();
    let classes = state.nodeclasses.state();
    let api: Api<NodePool> = Api::all(client.clone());
    for pool in state.nodepools.state() {
        if !is_managed_pool(&pool) {
            continue;
        }
        let name = pool.name_any();
        let class = classes
            .iter()
            .find(|c| c.name_any() == pool.spec.template.spec.node_class_ref.name)
            .map(Arc::as_ref);
        let own: Vec<&NodeClaim> = claims
            .iter()
            .filter(|c| c.labels().get(label::NODEPOOL) == Some(&name))
            .map(Arc::as_ref)
            .collect();
        stamp_hash(client, &pool, &own).await;
        let status = desired(
            &pool,
            class,
            &own,
            &nodes_by_name,
            state.last_registration_failure(&name),
            Timestamp::now(),
        );
        if pool.status.as_ref() == Some(&status) {
            continue;
        }
        let patch = json!({ "status": status });
        if let Err(err) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(NodePool = %name, error = %err, "writing NodePool status failed");
        }
    }
}

/// The hash annotations (a merge patch) `pool` and its NodeClaims should carry, whether the
/// NodePool lacks them, and the NodeClaims that do: those stamped by another hash version (a hash
/// of another version cannot tell drift, so it takes today's, as upstream does on an upgrade).
fn hash_patch<'c>(
    pool: &NodePool,
    claims: &[&'c NodeClaim],
) -> (serde_json::Value, bool, Vec<&'c NodeClaim>) {
    let current = hash::nodepool_hash(&pool.spec);
    let stamped = |annotations: &BTreeMap<String, String>, with_hash: bool| {
        annotations
            .get(annotation::NODEPOOL_HASH_VERSION)
            .map(String::as_str)
            == Some(hash::NODEPOOL_HASH_VERSION)
            && (!with_hash || annotations.get(annotation::NODEPOOL_HASH) == Some(&current))
    };
    let pool_stale = !stamped(pool.annotations(), true);
    let claims = claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none() && !stamped(c.annotations(), false))
        .copied()
        .collect();
    let patch = json!({"metadata": {"annotations": {
        annotation::NODEPOOL_HASH: current,
        annotation::NODEPOOL_HASH_VERSION: hash::NODEPOOL_HASH_VERSION,
    }}});
    (patch, pool_stale, claims)
}

/// Writes what [`hash_patch`] says is missing.
async fn stamp_hash(client: &kube::Client, pool: &NodePool, claims: &[&NodeClaim]) {
    let (patch, pool_stale, stale) = hash_patch(pool, claims);
    let patch = Patch::Merge(&patch);
    if pool_stale {
        let api: Api<NodePool> = Api::all(client.clone());
        if let Err(err) = api
            .patch(&pool.name_any(), &PatchParams::default(), &patch)
            .await
        {
            tracing::warn!(NodePool = %pool.name_any(), error = %err, "writing the NodePool hash failed");
        }
    }
    let api: Api<NodeClaim> = Api::all(client.clone());
    for claim in stale {
        tracing::info!(NodeClaim = %claim.name_any(), "re-stamping a NodeClaim hash of another version");
        if let Err(err) = api
            .patch(&claim.name_any(), &PatchParams::default(), &patch)
            .await
        {
            tracing::warn!(NodeClaim = %claim.name_any(), error = %err, "writing the NodeClaim hash failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str, status: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name, "generation": 2},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "default"},
                "requirements": []
            }}},
            "status": status
        }))
        .unwrap()
    }

    fn class(ready: &str) -> KCNodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.kakaocloud.com/v1alpha1", "kind": "KCNodeClass",
            "metadata": {"name": "default", "generation": 7},
            "spec": {"subnetSelectorTerms": [{"name": "a"}], "securityGroupSelectorTerms": [{"name": "b"}],
                "bootstrap": {"kubernetesVersion": "1.31"}},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "SubnetsNotFound",
                "message": "no subnet", "lastTransitionTime": "2026-12-01T00:00:00Z"}]}
        }))
        .unwrap()
    }

    fn claim(name: &str, cpu: &str, registered_at: Option<&str>) -> NodeClaim {
        let mut conditions = vec![];
        if let Some(t) = registered_at {
            conditions.push(
                json!({"type": "Registered", "status": "True", "reason": "Registered",
                "message": "", "lastTransitionTime": t}),
            );
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {label::NODEPOOL: "p"}},
            "spec": {"nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "default"}, "requirements": []},
            "status": {"capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"}, "conditions": conditions}
        }))
        .unwrap()
    }

    fn cond<'s>(s: &'s NodePoolStatus, t: &str) -> (&'s str, &'s str) {
        let c = find(&s.conditions, t).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn resources_sum_the_pools_claims_with_upstreams_zero_entries() {
        let p = pool("p", json!({}));
        let a = claim("a", "4", None);
        let b = claim("b", "3500m", None);
        let s = desired(
            &p,
            None,
            &[&a, &b],
            &HashMap::new(),
            None,
            at("2026-12-06T00:00:00Z"),
        );
        let q = |k: &str| s.resources[k].0.clone();
        assert_eq!(q("cpu"), "7500m");
        assert_eq!(q("memory"), "32Gi");
        assert_eq!(q("pods"), "220");
        assert_eq!(q("ephemeral-storage"), "0");
        assert_eq!(q("nodes"), "2");
        assert_eq!(s.nodes, Some(2));
        let empty = desired(
            &p,
            None,
            &[],
            &HashMap::new(),
            None,
            at("2026-12-06T00:00:00Z"),
        );
        assert_eq!(empty.resources["cpu"].0, "0");
        assert_eq!(empty.nodes, Some(0));
    }

    #[test]
    fn ready_follows_validation_and_the_nodeclass() {
        let now = at("2026-12-06T00:00:00Z");
        let p = pool("p", json!({}));
        let s = desired(&p, Some(&class("True")), &[], &HashMap::new(), None, now);
        assert_eq!(
            cond(&s, "ValidationSucceeded"),
            ("True", "ValidationSucceeded")
        );
        assert_eq!(cond(&s, "NodeClassReady"), ("True", "NodeClassReady"));
        assert_eq!(cond(&s, "Ready"), ("True", "Ready"));
        assert_eq!(s.node_class_observed_generation, Some(7));
        // Health waits for a registration and does not gate Ready.
        assert_eq!(
            cond(&s, "NodeRegistrationHealthy"),
            ("Unknown", "AwaitingReconciliation")
        );

        let s = desired(&p, Some(&class("False")), &[], &HashMap::new(), None, now);
        assert_eq!(cond(&s, "NodeClassReady"), ("False", "SubnetsNotFound"));
        assert_eq!(cond(&s, "Ready"), ("False", "UnhealthyDependents"));
        let ready = find(&s.conditions, "Ready").unwrap();
        assert_eq!(ready.message, "NodeClassReady=False");

        let s = desired(&p, None, &[], &HashMap::new(), None, now);
        assert_eq!(cond(&s, "NodeClassReady"), ("False", "NodeClassNotFound"));

        let long = pool(&"x".repeat(MAX_NODEPOOL_NAME_LEN + 1), json!({}));
        let s = desired(&long, Some(&class("True")), &[], &HashMap::new(), None, now);
        assert_eq!(
            cond(&s, "ValidationSucceeded"),
            ("False", "NodePoolValidationFailed")
        );
        assert_eq!(cond(&s, "Ready"), ("False", "UnhealthyDependents"));
    }

    #[test]
    fn registration_health_turns_on_the_latest_outcome_after_it_was_reset() {
        let k = class("True");
        let reset = "2026-12-06T00:00:00Z";
        let unknown = json!({"nodeClassObservedGeneration": 7, "conditions": [
            {"type": "NodeRegistrationHealthy", "status": "Unknown", "reason": "AwaitingReconciliation",
             "message": "", "observedGeneration": 2, "lastTransitionTime": reset}]});
        let p = pool("p", unknown);
        let now = at("2026-12-06T00:10:00Z");
        let old = claim("old", "4", Some("2026-12-05T23:00:00Z"));
        let s = desired(&p, Some(&k), &[&old], &HashMap::new(), None, now);
        assert_eq!(
            cond(&s, "NodeRegistrationHealthy").0,
            "Unknown",
            "before the reset"
        );
        let new = claim("new", "4", Some("2026-12-06T00:05:00Z"));
        let s = desired(&p, Some(&k), &[&old, &new], &HashMap::new(), None, now);
        assert_eq!(
            cond(&s, "NodeRegistrationHealthy"),
            ("True", "NodeRegistrationHealthy")
        );
        let s = desired(
            &p,
            Some(&k),
            &[&old, &new],
            &HashMap::new(),
            Some(at("2026-12-06T00:06:00Z")),
            now,
        );
        assert_eq!(
            cond(&s, "NodeRegistrationHealthy"),
            ("False", "RegistrationFailed")
        );

        // A changed class generation resets it.
        let mut k2 = class("True");
        k2.metadata.generation = Some(8);
        let s = desired(&p, Some(&k2), &[&new], &HashMap::new(), None, now);
        assert_eq!(cond(&s, "NodeRegistrationHealthy").0, "Unknown");
    }

    #[test]
    fn restricted_labels_and_requirements_fail_validation() {
        let mut p = pool("p", json!({}));
        assert!(validate(&p).is_ok());
        p.spec.template.metadata = Some(
            serde_json::from_value(json!({"labels": {
                "karpenter.sh/nodepool": "x", "team": "a"
            }}))
            .unwrap(),
        );
        let err = validate(&p).unwrap_err();
        assert!(err.contains("karpenter.sh/nodepool"), "{err}");
        assert!(!err.contains("team"), "{err}");
    }

    #[test]
    fn the_hash_goes_on_the_pool_and_on_claims_of_another_version_only() {
        let p = pool("default", json!({}));
        let mut fresh = claim("default-a", "2", None);
        let mut old = claim("default-b", "2", None);
        fresh.metadata.annotations = Some(BTreeMap::from([
            (annotation::NODEPOOL_HASH.into(), "whatever-it-was".into()),
            (
                annotation::NODEPOOL_HASH_VERSION.into(),
                hash::NODEPOOL_HASH_VERSION.into(),
            ),
        ]));
        old.metadata.annotations = Some(BTreeMap::from([(
            annotation::NODEPOOL_HASH_VERSION.into(),
            "v2".into(),
        )]));
        let (patch, pool_stale, stale) = hash_patch(&p, &[&fresh, &old]);
        assert!(pool_stale, "an unstamped pool is stamped");
        let annotations = &patch["metadata"]["annotations"];
        assert_eq!(
            annotations[annotation::NODEPOOL_HASH],
            hash::nodepool_hash(&p.spec)
        );
        // A claim of today's version keeps its hash even when it differs: that is drift.
        assert_eq!(
            stale.iter().map(|c| c.name_any()).collect::<Vec<_>>(),
            ["default-b"]
        );
        let mut stamped = p.clone();
        stamped.metadata.annotations = annotations.as_object().map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect()
        });
        assert!(!hash_patch(&stamped, &[]).1);
    }

    #[test]
    fn memory_is_written_with_a_binary_suffix() {
        assert_eq!(binary_quantity(16 << 30).0, "16Gi");
        assert_eq!(binary_quantity(1536 << 20).0, "1536Mi");
        assert_eq!(binary_quantity(1000).0, "1000");
    }
}
