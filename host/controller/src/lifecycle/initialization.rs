//! Initialization: a registered Node is `Initialized` once it is Ready and carries no startup
//! or ephemeral taint (with Cilium, the agent's taint counts as a startup taint whether or not
//! the NodePool lists it: the userdata registers the node with it). Initialized is sticky: once
//! the Node carries `karpenter.sh/initialized=true` it stays initialized.

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use kk_apis::NodeClaim;
use kk_apis::crd::conditions::{DesiredCondition, is_true};
use kk_apis::names::{condition, label, taint};
use kk_engine::scheduling::resources::parse_milli;
use kk_engine::scheduling::translate;

use super::{Lifecycle, LifecycleError, taint_eq};

/// Where a registered Node stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Initialization {
    Done,
    NotReady,
    /// A startup or ephemeral taint is still on the Node.
    Tainted(String),
    /// A resource the NodeClaim requested (a GPU, say) has no allocatable on the Node yet: its
    /// device plugin has not registered it, and pods needing it cannot land.
    ResourceNotRegistered(String),
}

impl Initialization {
    pub(super) fn done(&self) -> bool {
        *self == Initialization::Done
    }

    pub(super) fn condition(&self) -> DesiredCondition {
        match self {
            Initialization::Done => {
                DesiredCondition::truthy(condition::INITIALIZED, "Initialized", "")
            }
            Initialization::NotReady => DesiredCondition::unknown(
                condition::INITIALIZED,
                "NodeNotReady",
                "Node status is NotReady",
            ),
            Initialization::Tainted(key) => DesiredCondition::unknown(
                condition::INITIALIZED,
                "StartupTaintsExist",
                format!("StartupTaint {key:?} still exists"),
            ),
            Initialization::ResourceNotRegistered(name) => DesiredCondition::unknown(
                condition::INITIALIZED,
                "ResourceNotRegistered",
                format!("Resource {name:?} was requested but not registered"),
            ),
        }
    }
}

/// Where `node` (registered for `nc`) stands; `cilium` when the CNI is Cilium.
pub(super) fn initialization(nc: &NodeClaim, node: &Node, cilium: bool) -> Initialization {
    if node
        .labels()
        .get(label::INITIALIZED)
        .is_some_and(|v| v == "true")
    {
        return Initialization::Done;
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        return Initialization::NotReady;
    }
    let startup: Vec<Taint> = nc.spec.startup_taints.iter().map(Taint::from).collect();
    let blocking = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .find(|t| {
            translate::is_ephemeral_taint(t)
                || startup.iter().any(|s| taint_eq(s, t))
                || (cilium && t.key == taint::CILIUM_AGENT_NOT_READY)
        });
    if let Some(t) = blocking {
        return Initialization::Tainted(t.key.clone());
    }
    match unregistered_resource(nc, node) {
        Some(name) => Initialization::ResourceNotRegistered(name),
        None => Initialization::Done,
    }
}

/// The first resource `nc` requests (non-zero) that `node` does not allocate yet (upstream's
/// `RequestedResourcesRegistered`: the kubelet zeroes extended resources until their device
/// plugin registers them).
fn unregistered_resource(nc: &NodeClaim, node: &Node) -> Option<String> {
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let zero = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| parse_milli(&q.0)).unwrap_or(0) == 0
    };
    nc.spec
        .resources
        .as_ref()?
        .requests
        .iter()
        .find(|&(name, q)| !zero(Some(q)) && zero(allocatable.and_then(|a| a.get(name))))
        .map(|(name, _)| name.clone())
}

impl Lifecycle {
    /// Follows `node`'s initialization, labelling it `karpenter.sh/initialized` when done.
    pub(super) async fn initialize(
        &self,
        nc: &NodeClaim,
        node: &Node,
    ) -> Result<Initialization, LifecycleError> {
        let state = initialization(nc, node, self.settings.cni == "cilium");
        // The claim's condition too: a stale read of the Node must not label it twice.
        let labelled = node
            .labels()
            .get(label::INITIALIZED)
            .is_some_and(|v| v == "true")
            || is_true(nc.conditions(), condition::INITIALIZED);
        if state.done() && !labelled {
            let nodes: Api<Node> = Api::all(self.client.clone());
            nodes
                .patch(
                    &node.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({ "metadata": { "labels": { label::INITIALIZED: "true" } } }),
                    ),
                )
                .await?;
            tracing::info!(node = %node.name_any(), "initialized nodeclaim");
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::registration::tests::{claim, node};

    fn ready(mut n: Node, status: &str) -> Node {
        n.status =
            serde_json::from_value(json!({"conditions": [{"type": "Ready", "status": status}]}))
                .unwrap();
        n
    }

    #[test]
    fn ready_and_untainted_is_initialized() {
        let nc = claim(json!([]), json!([]));
        let n = ready(
            node(json!([{"key": "team", "effect": "NoSchedule"}]), json!({})),
            "True",
        );
        assert_eq!(initialization(&nc, &n, false), Initialization::Done);
    }

    #[test]
    fn a_requested_gpu_holds_initialization_until_the_node_allocates_it() {
        let mut nc = claim(json!([]), json!([]));
        nc.spec.resources = serde_json::from_value(
            json!({"requests": {"cpu": "1", "nvidia.com/gpu": "1", "example.com/zero": "0"}}),
        )
        .unwrap();
        let with = |allocatable: serde_json::Value| {
            let mut n = ready(node(json!([]), json!({})), "True");
            n.status.as_mut().unwrap().allocatable = serde_json::from_value(allocatable).unwrap();
            n
        };
        let n = with(json!({"cpu": "4", "nvidia.com/gpu": "0"}));
        let state = initialization(&nc, &n, false);
        assert_eq!(
            state,
            Initialization::ResourceNotRegistered("nvidia.com/gpu".into())
        );
        assert_eq!(state.condition().reason, "ResourceNotRegistered");
        let n = with(json!({"cpu": "4", "nvidia.com/gpu": "1"}));
        assert_eq!(initialization(&nc, &n, false), Initialization::Done);
    }

    #[test]
    fn not_ready_is_not_initialized() {
        let nc = claim(json!([]), json!([]));
        let n = ready(node(json!([]), json!({})), "False");
        assert_eq!(initialization(&nc, &n, false), Initialization::NotReady);
        assert_eq!(
            initialization(&nc, &n, false).condition().reason,
            "NodeNotReady"
        );
    }

    #[test]
    fn startup_and_ephemeral_taints_hold_initialization() {
        let nc = claim(
            json!([]),
            json!([{"key": "startup", "effect": "NoSchedule"}]),
        );
        let n = ready(
            node(
                json!([{"key": "startup", "effect": "NoSchedule"}]),
                json!({}),
            ),
            "True",
        );
        assert_eq!(
            initialization(&nc, &n, false),
            Initialization::Tainted("startup".into())
        );
        let n = ready(
            node(
                json!([{"key": taint::NOT_READY, "effect": "NoSchedule"}]),
                json!({}),
            ),
            "True",
        );
        assert_eq!(
            initialization(&claim(json!([]), json!([])), &n, false),
            Initialization::Tainted(taint::NOT_READY.into())
        );
    }

    #[test]
    fn the_cilium_agent_taint_is_a_startup_taint_only_with_cilium() {
        let nc = claim(json!([]), json!([]));
        let n = ready(
            node(
                json!([{"key": taint::CILIUM_AGENT_NOT_READY, "effect": "NoExecute"}]),
                json!({}),
            ),
            "True",
        );
        assert!(!initialization(&nc, &n, true).done());
        assert!(initialization(&nc, &n, false).done());
    }

    #[test]
    fn initialized_is_sticky() {
        let nc = claim(
            json!([]),
            json!([{"key": "startup", "effect": "NoSchedule"}]),
        );
        let n = ready(
            node(
                json!([{"key": "startup", "effect": "NoSchedule"}]),
                json!({"labels": {label::INITIALIZED: "true"}}),
            ),
            "False",
        );
        assert!(initialization(&nc, &n, false).done());
    }
}
