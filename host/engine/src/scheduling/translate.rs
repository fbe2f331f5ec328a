//! Between Kubernetes objects and the solver: NodePools, Nodes and in-flight NodeClaims into the
//! solver's inputs, and a [`NodeClaimDraft`] into a `karpenter.sh/v1` NodeClaim to create.

use kk_apis::names::{annotation, finalizer, label, taint};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kk_apis::ResourceExt;
use kk_apis::cached_pod::CachedPod;
use rand::Rng;

use kk_apis::crd::nodeclaim::ResourceRequests;
use kk_apis::crd::{KCNodeClass, NodeClaim, NodeClaimSpec, NodePool, Operator, Requirement};

use super::instance_types::InstanceType;
use super::model::{ExistingNode, NodeClaimDraft, NodePoolInput, PoolRequirement};

use super::resources::{self, Resources};

/// The zones a KCNodeClass can launch into: those of its resolved subnets (upstream filters a
/// NodePool's offerings by its NodeClass's subnets the same way). `None` restricts nothing: no
/// class, no subnet resolved yet, or a subnet whose zone is unknown.
pub fn nodeclass_zones(class: Option<&KCNodeClass>) -> Option<Vec<String>> {
    let subnets = &class?.status.as_ref()?.subnets;
    if subnets.is_empty() {
        return None;
    }
    let mut zones: Vec<String> = subnets
        .iter()
        .map(|s| s.zone.clone())
        .collect::<Option<_>>()?;
    zones.sort();
    zones.dedup();
    Some(zones)
}

/// A NodePool as the solver sees it; `in_use`/`nodes_in_use` count its existing nodes and claims.
/// `class` is its KCNodeClass: the pool's nodes can only be in the zones of its subnets.
pub fn nodepool_input(
    np: &NodePool,
    class: Option<&KCNodeClass>,
    in_use: Resources,
    nodes_in_use: u64,
) -> NodePoolInput {
    let t = &np.spec.template;
    let mut requirements: Vec<PoolRequirement> = t
        .spec
        .requirements
        .iter()
        .map(|r| {
            let (operator, values) = r.selector_form();
            PoolRequirement {
                requirement: NodeSelectorRequirement {
                    key: r.key.clone(),
                    operator: operator.to_owned(),
                    values: (!values.is_empty()).then_some(values),
                },
                min_values: r.min_values,
            }
        })
        .collect();
    if let Some(zones) = nodeclass_zones(class) {
        requirements.push(PoolRequirement {
            requirement: NodeSelectorRequirement {
                key: label::ZONE.into(),
                operator: "In".into(),
                values: Some(zones),
            },
            min_values: None,
        });
    }
    NodePoolInput {
        name: np.name_any(),
        weight: np.spec.weight.unwrap_or(0),
        requirements,
        labels: t
            .metadata
            .as_ref()
            .map(|m| m.labels.clone())
            .unwrap_or_default(),
        taints: t.spec.taints.iter().map(Taint::from).collect(),
        startup_taints: t.spec.startup_taints.iter().map(Taint::from).collect(),
        limits: np.spec.limits.clone().unwrap_or_default(),
        in_use,
        nodes_in_use,
    }
}

/// Taints that keep pods off only until the node is initialized; the solver ignores them on
/// nodes that are still coming up (upstream `statenode.go:Taints`).
pub fn is_ephemeral_taint(t: &Taint) -> bool {
    taint::EPHEMERAL.contains(&t.key.as_str())
        || t.key == taint::UNREGISTERED
        || t.key.starts_with("readiness.k8s.io/")
}

/// A Node as a place pods can go. `startup_taints` are the owning claim's (ignored until the node
/// is initialized, as are the ephemeral taints).
pub fn existing_node(
    node: &Node,
    pods: Vec<std::sync::Arc<CachedPod>>,
    startup_taints: &[Taint],
) -> ExistingNode {
    let mut labels = node.labels().clone();
    labels
        .entry(label::HOSTNAME.to_owned())
        .or_insert_with(|| node.name_any());
    let initialized = labels.get(label::INITIALIZED).is_some_and(|v| v == "true");
    let managed = labels.contains_key(label::NODEPOOL);
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| {
            !(managed
                && !initialized
                && (is_ephemeral_taint(t)
                    || startup_taints
                        .iter()
                        .any(|s| s.key == t.key && s.effect == t.effect)))
        })
        .collect();
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| resources::from_list(a).ok())
        .unwrap_or_default();
    ExistingNode {
        name: node.name_any(),
        labels,
        taints,
        allocatable,
        pods,
    }
}

/// An in-flight NodeClaim (no Node yet) as a place pods can go: labelled with its resolved
/// single-valued requirements, sized by its allocatable (or, before launch, the smallest of its
/// instance types). `nominated` are the pending pods earlier passes still promise it: they count
/// in topology as if bound, and the claim keeps room for the larger of what it was created for
/// and what they request.
pub fn inflight_node(
    nc: &NodeClaim,
    catalog: &[InstanceType],
    nominated: Vec<std::sync::Arc<CachedPod>>,
) -> ExistingNode {
    let mut labels = nc.labels().clone();
    for r in &nc.spec.requirements {
        if r.operator == Operator::In && r.values.len() == 1 {
            labels
                .entry(r.key.clone())
                .or_insert_with(|| r.values[0].clone());
        }
    }
    labels.insert(label::HOSTNAME.to_owned(), nc.name_any());
    let from_status = nc
        .status
        .as_ref()
        .filter(|s| !s.allocatable.is_empty())
        .and_then(|s| resources::from_list(&s.allocatable).ok());
    let allocatable = from_status.unwrap_or_else(|| {
        let types = nc
            .spec
            .requirements
            .iter()
            .find(|r| r.key == label::INSTANCE_TYPE && r.operator == Operator::In);
        types
            .into_iter()
            .flat_map(|r| r.values.iter())
            .filter_map(|name| catalog.iter().find(|it| &it.name == name))
            .map(InstanceType::allocatable)
            .reduce(|a, b| a.min(&b))
            .unwrap_or_default()
    });
    let requested = nc
        .spec
        .resources
        .as_ref()
        .and_then(|r| resources::from_list(&r.requests).ok())
        .unwrap_or_default();
    let promised = nominated
        .iter()
        .filter_map(|p| resources::pod_requests(p.spec.as_ref()?).ok())
        .fold(Resources::default(), |sum, r| sum.add(&r));
    ExistingNode {
        name: nc.name_any(),
        labels,
        taints: nc.spec.taints.iter().map(Taint::from).collect(),
        // The scheduler subtracts the nominated pods' own requests.
        allocatable: allocatable.saturating_sub(&requested.saturating_sub(&promised)),
        pods: nominated,
    }
}

/// A fresh NodeClaim name for `pool`: `<pool>-<5 lowercase alphanumerics>`, like generateName.
pub fn nodeclaim_name(pool: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{pool}-{suffix}")
}

/// `values` in `ranked` order; values the ranking does not name keep their place at the end.
fn ranked_subset(ranked: &[String], values: &[String]) -> Vec<String> {
    let mut out: Vec<String> = ranked
        .iter()
        .filter(|r| values.contains(r))
        .cloned()
        .collect();
    out.extend(values.iter().filter(|v| !ranked.contains(v)).cloned());
    out
}

/// The NodeClaim to create for `draft` of `pool`.
pub fn nodeclaim_for(draft: &NodeClaimDraft, pool: &NodePool, name: String) -> NodeClaim {
    let template = &pool.spec.template;
    let pool_name = pool.name_any();
    let mut labels: BTreeMap<String, String> = draft.labels.clone();
    labels.insert(label::NODEPOOL.to_owned(), pool_name.clone());
    labels.insert(label::KKE_NODEPOOL.to_owned(), pool_name.clone());
    labels.insert(
        label::NODECLASS.to_owned(),
        template.spec.node_class_ref.name.clone(),
    );
    let mut annotations = template
        .metadata
        .as_ref()
        .map(|m| m.annotations.clone())
        .unwrap_or_default();
    // What the claim was made from, so drift can tell when the NodePool's template changes.
    annotations.insert(
        annotation::NODEPOOL_HASH.to_owned(),
        kk_apis::hash::nodepool_hash(&pool.spec),
    );
    annotations.insert(
        annotation::NODEPOOL_HASH_VERSION.to_owned(),
        kk_apis::hash::NODEPOOL_HASH_VERSION.to_owned(),
    );
    let requirements = draft
        .requirements
        .iter()
        .filter_map(|r| {
            let mut values = r.requirement.values.clone().unwrap_or_default();
            // The launch tries instance types in this list's order: keep the ranker's, not the
            // solver's sorted set (sorted, `c2a.2xlarge` would be tried before `c2a.large`).
            if r.requirement.key == label::INSTANCE_TYPE && r.requirement.operator == "In" {
                values = ranked_subset(&draft.instance_types, &values);
            }
            Requirement::from_selector_form(
                &r.requirement.key,
                &r.requirement.operator,
                values,
                r.min_values,
            )
        })
        .collect();
    let owner = pool.uid().map(|uid| OwnerReference {
        api_version: "karpenter.sh/v1".into(),
        kind: "NodePool".into(),
        name: pool_name,
        uid,
        block_owner_deletion: Some(true),
        controller: None,
    });
    let mut nc = NodeClaim::new(
        &name,
        NodeClaimSpec {
            taints: template.spec.taints.clone(),
            startup_taints: template.spec.startup_taints.clone(),
            requirements,
            resources: Some(ResourceRequests {
                requests: draft.requests.to_quantities(),
            }),
            node_class_ref: template.spec.node_class_ref.clone(),
            termination_grace_period: template.spec.termination_grace_period,
            expire_after: template.spec.expire_after,
        },
    );
    nc.metadata = ObjectMeta {
        name: Some(name),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        owner_references: owner.map(|o| vec![o]),
        finalizers: Some(vec![finalizer::TERMINATION.to_owned()]),
        ..ObjectMeta::default()
    };
    nc
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::scheduling::fixtures::default_nodepool as pool;

    #[test]
    fn instance_types_keep_the_ranked_order() {
        let ranked = ["c2a.large".to_owned(), "c2a.2xlarge".to_owned()];
        let sorted = [
            "c2a.2xlarge".to_owned(),
            "c2a.large".to_owned(),
            "x.other".to_owned(),
        ];
        assert_eq!(
            ranked_subset(&ranked, &sorted),
            ["c2a.large", "c2a.2xlarge", "x.other"]
        );
    }

    fn class_with_subnets(zones: &[Option<&str>]) -> KCNodeClass {
        let subnets: Vec<serde_json::Value> = zones
            .iter()
            .enumerate()
            .map(|(i, z)| serde_json::json!({"id": format!("s{i}"), "zone": z}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.kakaocloud.com/v1alpha1", "kind": "KCNodeClass",
            "metadata": {"name": "c"},
            "spec": {"subnetSelectorTerms": [{"id": "s0"}], "securityGroupSelectorTerms": [{"id": "g"}],
                     "bootstrap": {"mode": "Kubeadm", "kubernetesVersion": "1.35"}},
            "status": {"subnets": subnets},
        }))
        .unwrap()
    }

    #[test]
    fn a_pool_keeps_to_the_zones_of_its_class_subnets() {
        let np = pool();
        let zone_req = |input: &NodePoolInput| {
            input
                .requirements
                .iter()
                .find(|r| r.requirement.key == label::ZONE)
                .map(|r| r.requirement.values.clone().unwrap_or_default())
        };
        let one = class_with_subnets(&[Some("kr-central-2-a"), Some("kr-central-2-a")]);
        assert_eq!(
            zone_req(&nodepool_input(&np, Some(&one), Resources::ZERO, 0)),
            Some(vec!["kr-central-2-a".to_owned()])
        );
        // Unknown zones restrict nothing: the launch falls back across subnets as before.
        let unknown = class_with_subnets(&[Some("kr-central-2-a"), None]);
        assert_eq!(
            zone_req(&nodepool_input(&np, Some(&unknown), Resources::ZERO, 0)),
            None
        );
        assert_eq!(
            zone_req(&nodepool_input(&np, None, Resources::ZERO, 0)),
            None
        );
    }

    #[test]
    fn pool_and_draft_round_trip() {
        let np = pool();
        let input = nodepool_input(&np, None, Resources::ZERO, 0);
        assert_eq!(input.weight, 10);
        assert_eq!(input.requirements[0].requirement.operator, "In");
        let draft = NodeClaimDraft {
            node_pool: "default".into(),
            requirements: vec![PoolRequirement {
                requirement: NodeSelectorRequirement {
                    key: label::INSTANCE_TYPE.into(),
                    operator: "In".into(),
                    values: Some(vec!["m2a.large".into(), "m2a.xlarge".into()]),
                },
                min_values: None,
            }],
            labels: BTreeMap::new(),
            taints: vec![],
            startup_taints: vec![],
            instance_types: vec!["m2a.large".into(), "m2a.xlarge".into()],
            requests: Resources::new(1500, 1 << 30, 2),
            pods: vec![0, 1],
        };
        let name = nodeclaim_name("default");
        assert!(name.starts_with("default-") && name.len() == "default-".len() + 5);
        let nc = nodeclaim_for(&draft, &np, name.clone());
        assert_eq!(nc.labels()[label::NODEPOOL], "default");
        assert_eq!(nc.labels()[label::KKE_NODEPOOL], "default");
        assert_eq!(
            nc.spec.requirements[0].values,
            vec!["m2a.large", "m2a.xlarge"]
        );
        assert_eq!(
            nc.spec.resources.as_ref().unwrap().requests["cpu"].0,
            "1500m"
        );
        assert_eq!(
            nc.metadata.owner_references.as_ref().unwrap()[0].uid,
            "uid-1"
        );
        assert_eq!(nc.finalizers(), [finalizer::TERMINATION.to_owned()]);

        // Before launch an in-flight claim offers its smallest type minus its requests.
        let catalog = vec![
            InstanceType::new("m2a.large", Resources::new(2000, 8 << 30, 110), vec![]),
            InstanceType::new("m2a.xlarge", Resources::new(4000, 16 << 30, 110), vec![]),
        ];
        let inflight = inflight_node(&nc, &catalog, Vec::new());
        assert_eq!(inflight.labels[label::HOSTNAME], name);
        let expect = catalog[0].allocatable().saturating_sub(&draft.requests);
        assert_eq!(inflight.allocatable, expect);

        // Pods an earlier pass still promises it count as bound (topology sees them), and the
        // claim keeps room for the larger of its requests (1500m) and theirs.
        let pod = |cpu: &str| {
            std::sync::Arc::new(
                serde_json::from_value::<CachedPod>(serde_json::json!({
                    "metadata": {"name": "p", "labels": {"app": "a"}},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
                }))
                .unwrap(),
            )
        };
        let cpu = |r: &Resources| r.get(resources::Dim::CpuMillis);
        let within = inflight_node(&nc, &catalog, vec![pod("1")]);
        assert_eq!(within.pods.len(), 1);
        assert_eq!(
            cpu(&within.allocatable) - 1000,
            cpu(&expect),
            "1500m kept in all"
        );
        let beyond = inflight_node(&nc, &catalog, vec![pod("1"), pod("1")]);
        assert_eq!(
            cpu(&beyond.allocatable),
            cpu(&catalog[0].allocatable()),
            "2000m promised, more than it was created for: the scheduler subtracts all of it"
        );
    }

    #[test]
    fn uninitialized_managed_nodes_hide_ephemeral_and_startup_taints() {
        let taint = |k: &str| Taint {
            key: k.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        node.metadata.labels = Some([(label::NODEPOOL.to_owned(), "default".to_owned())].into());
        node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(vec![
                taint(taint::UNREGISTERED),
                taint("node.cilium.io/agent-not-ready"),
                taint("dedicated"),
            ]),
            ..Default::default()
        });
        let startup = [taint("node.cilium.io/agent-not-ready")];
        let e = existing_node(&node, vec![], &startup);
        assert_eq!(e.taints.len(), 1);
        assert_eq!(e.taints[0].key, "dedicated");
        assert_eq!(e.labels[label::HOSTNAME], "n1");
        node.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(label::INITIALIZED.into(), "true".into());
        assert_eq!(existing_node(&node, vec![], &startup).taints.len(), 3);
    }
}
