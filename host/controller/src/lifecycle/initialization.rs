//! Initialization: a registered Node is `Initialized` once it is Ready and carries no startup
//! or ephemeral taint (with Cilium, the agent's taint counts as a startup taint whether or not
//! the NodePool lists it: the userdata registers the node with it). Initialized is sticky: once
//! the Node carries `karpenter.sh/initialized=true` it stays initialized.

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use kk_apis::NodeClaim;
use kk_apis::crd::conditions::DesiredCondition;
use kk_apis::names::{condition, label, taint};
use kk_engine::scheduling::translate;

use super::{Lifecycle, LifecycleError, taint_eq};

/// Where a registered Node stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Initialization {
    Done,
    NotReady,
    /// A startup or ephemeral taint is still on the Node.
    Tainted(String),
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
    match blocking {
        Some(t) => Initialization::Tainted(t.key.clone()),
        None => Initialization::Done,
    }
}

impl Lifecycle {
    /// Follows `node`'s initialization, labelling it `karpenter.sh/initialized` when done.
    pub(super) async fn initialize(
        &self,
        nc: &NodeClaim,
        node: &Node,
    ) -> Result<Initialization, LifecycleError> {
        let state = initialization(nc, node, self.settings.cni == "cilium");
        let labelled = node
            .labels()
            .get(label::INITIALIZED)
            .is_some_and(|v| v == "true");
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
