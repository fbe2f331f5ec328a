//! Why a node is, or is not, disrupted: every method's verdict on one node of a snapshot, its
//! NodePool's budgets, and where each of its pods would go. Computed on demand (the
//! controller's `/explain/node` view) with the same rules the pass uses, never during it.

use std::time::Duration;

use serde::Serialize;

use super::budgets::BudgetTracker;
use super::model::{ClusterSnapshot, Reason};
use super::plan::{self, Blocker, HELD, UNMODELLED};
use super::simulate::{Outcome, Placement, Simulator};

/// One node, explained.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    pub node: String,
    pub node_claim: Option<String>,
    pub node_pool: Option<String>,
    /// The one line: what keeps the node, or what would happen to it.
    pub verdict: String,
    /// Each method (and the budget) with its outcome, in the order the pass tries them.
    pub methods: Vec<MethodVerdict>,
    /// Where each reschedulable pod would go if the node were removed.
    pub pods: Vec<PodDestination>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MethodVerdict {
    pub method: &'static str,
    /// Whether this keeps the node.
    pub blocks: bool,
    pub outcome: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodDestination {
    pub pod: String,
    pub destination: String,
}

fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

/// Explains node `name` of `snapshot` (`None`: no such node).
pub fn node(snapshot: &ClusterSnapshot, name: &str) -> Option<NodeExplanation> {
    let i = snapshot.nodes.iter().position(|n| n.name == name)?;
    let node = &snapshot.nodes[i];
    let pool = node.node_pool.as_deref().and_then(|p| snapshot.pool(p));
    let mut methods = Vec::new();
    let mut verdict = |method: &'static str, blocks: bool, outcome: String| {
        methods.push(MethodVerdict {
            method,
            blocks,
            outcome,
        });
    };

    let node_blocker = plan::node_blocker(snapshot, node);
    if let Some(b) = &node_blocker {
        verdict("node", true, b.to_string());
    }
    let budgets = BudgetTracker::new(snapshot);
    let remaining = |reason: Reason| pool.map_or(0, |p| budgets.remaining(&p.name, reason));
    if let Some(p) = pool {
        let allowed: Vec<String> = [Reason::Empty, Reason::Underutilized, Reason::Drifted]
            .into_iter()
            .map(|r| format!("{r:?} {}", remaining(r)))
            .collect();
        verdict(
            "budget",
            false,
            format!(
                "NodePool {} allows these disruptions now: {}",
                p.name,
                allowed.join(", ")
            ),
        );
    }

    if plan::expired(snapshot, node) {
        verdict(
            "expiration",
            false,
            "expired: replaced regardless of budgets".into(),
        );
    }
    if let Some(drift) = &node.drift {
        let budget = remaining(Reason::Drifted);
        verdict(
            "drift",
            budget == 0,
            if budget == 0 {
                format!(
                    "drifted ({drift:?}), but the NodePool's budget allows no Drifted disruption now"
                )
            } else {
                format!("drifted ({drift:?}): will be replaced")
            },
        );
    }

    let waiting = pool.and_then(|p| {
        let after = p.consolidate_after?;
        let gone = plan::elapsed(snapshot, node.last_pod_event.unwrap_or(node.created));
        (gone < after).then(|| after - gone)
    });
    let never = pool.is_some_and(|p| p.consolidate_after.is_none());
    let consolidatable = plan::consolidatable(snapshot, node);
    let not_yet = if never {
        Some("consolidateAfter is Never".to_owned())
    } else {
        waiting.map(|w| {
            format!(
                "consolidateAfter has {} to run since its last pod event",
                seconds(w)
            )
        })
    };

    if node.is_empty() {
        let budget = remaining(Reason::Empty);
        let (blocks, outcome) = match (&not_yet, budget) {
            (Some(why), _) => (true, format!("empty, but {why}")),
            (None, 0) => (
                true,
                "empty, but the NodePool's budget allows no Empty disruption now".into(),
            ),
            (None, _) => (false, "empty: will be deleted".into()),
        };
        verdict("emptiness", blocks, outcome);
    } else {
        let count = node.reschedulable_pods().count();
        verdict(
            "emptiness",
            false,
            format!("not empty: {count} pod(s) to reschedule"),
        );
    }

    let mut sim = Simulator::new(snapshot);
    let mut consolidation = |blocks: bool, outcome: String| {
        verdict("consolidation", blocks, outcome);
    };
    // A node-level blocker already keeps it from every method.
    if !node.is_empty() && node_blocker.is_none() {
        let pod_blocker = plan::blocker(snapshot, node);
        if pool.is_some_and(|p| !p.consolidation_policy.consolidates_underutilized()) {
            consolidation(
                true,
                "consolidationPolicy is WhenEmpty: a node with pods is kept".into(),
            );
        } else if let Some(why) = not_yet.filter(|_| !consolidatable) {
            consolidation(true, format!("not yet a candidate: {why}"));
        } else if let Some(b @ (Blocker::PodDoNotDisrupt(_) | Blocker::PdbBlocked(_))) = pod_blocker
        {
            consolidation(true, b.to_string());
        } else if sim.decidable(&[i]).is_err() {
            consolidation(true, UNMODELLED.into());
        } else if node.reschedulable_pods().any(|p| p.consolidation_held) {
            consolidation(true, HELD.into());
        } else {
            let outcome = plan::simulate_single(&mut sim, i).map(|outcome| match outcome {
                Outcome::Replace { price_micros, .. } => format!(
                    "its pods fit on one cheaper node ({price_micros} micro-KRW/h against {}): it can be replaced",
                    node.price_micros
                ),
                _ => "its pods fit on the remaining nodes: it can be deleted".to_owned(),
            });
            match outcome {
                Err(why) => consolidation(true, why.to_owned()),
                Ok(_) if remaining(Reason::Underutilized) == 0 => consolidation(
                    true,
                    "a candidate, but the NodePool's budget allows no Underutilized disruption now"
                        .into(),
                ),
                Ok(what) => consolidation(false, what),
            }
        }
    }

    let pods = sim
        .placements(i)
        .into_iter()
        .map(|(pod, place)| PodDestination {
            pod,
            destination: match place {
                Placement::Node(n) => format!("node {n}"),
                Placement::NewNode {
                    instance_type,
                    price_micros,
                } => format!("a new {instance_type} node ({price_micros} micro-KRW/h)"),
                Placement::Nowhere => "nowhere: no remaining node or new node holds it".into(),
            },
        })
        .collect();
    let verdict = methods
        .iter()
        .find(|m| m.blocks)
        .map(|m| format!("kept: {}", m.outcome))
        .or_else(|| {
            methods
                .iter()
                .rev()
                .find(|m| m.method != "budget")
                .map(|m| m.outcome.clone())
        })
        .unwrap_or_default();
    Some(NodeExplanation {
        node: node.name.clone(),
        node_claim: node.nodeclaim.clone(),
        node_pool: node.node_pool.clone(),
        verdict,
        methods,
        pods,
    })
}
