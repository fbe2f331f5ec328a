//! Node repair (upstream's `node.health`), behind the `NodeRepair` feature gate, off by default.
//!
//! A Karpenter Node whose `Ready` condition has been `False` or `Unknown` for longer than the
//! toleration (10 minutes, as upstream's providers; KakaoCloud reports no finer health signal)
//! has its NodeClaim deleted forcefully: `karpenter.sh/nodeclaim-termination-timestamp` is set
//! to now first, so the drain deletes its pods at once instead of waiting on PodDisruptionBudgets
//! or `do-not-disrupt` (the node cannot run them anyway). Termination then deletes the instance
//! through the verified path, and provisioning (or the static controller) replaces the capacity.
//!
//! Invariant: nothing is repaired while more than [`UNHEALTHY_CAP_PERCENT`] of the cluster's
//! Karpenter nodes are unhealthy (a zone or network outage must not replace every node); a
//! `NodeRepairBlocked` Event on each unhealthy NodeClaim says so.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::events::Events;
use crate::metrics::Metrics;
use crate::state::ClusterState;
use kk_apis::crd::NodeClaim;
use kk_apis::names::annotation;

/// Upstream blocks repair when more than this share of nodes is unhealthy.
pub const UNHEALTHY_CAP_PERCENT: u64 = 20;
/// How often nodes are looked at.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// How often the same NodeClaim is told repair is blocked.
const BLOCKED_EVERY: Duration = Duration::from_secs(10 * 60);

/// How long `node` has been unhealthy at `now` (its `Ready` condition False or Unknown since its
/// last transition); `None` while Ready.
pub fn unhealthy_for(node: &Node, now: Timestamp) -> Option<(String, Duration)> {
    let ready = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    if ready.status == "True" {
        return None;
    }
    let since = ready.last_transition_time.as_ref().map_or(now, |t| t.0);
    let span = now.duration_since(since);
    let span = if span.is_negative() {
        Duration::ZERO
    } else {
        span.unsigned_abs()
    };
    Some((ready.status.clone(), span))
}

/// What one pass does.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// NodeClaims to replace: `(nodeclaim, node, why)`.
    pub repair: Vec<(String, String, String)>,
    /// Set when the cap holds repair back: the unhealthy NodeClaims and the counts.
    pub blocked: Option<(Vec<String>, usize, usize)>,
}

/// Decides over the cluster's Karpenter nodes (those with a NodeClaim not being deleted).
pub fn decide(
    claims: &[Arc<NodeClaim>],
    node: impl Fn(&str) -> Option<Arc<Node>>,
    now: Timestamp,
    toleration: Duration,
) -> Decision {
    let mut total = 0usize;
    let mut unhealthy = Vec::new();
    let mut due = Vec::new();
    for claim in claims {
        let Some(name) = claim.status.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(n) = node(name) else { continue };
        total += 1;
        if let Some((status, span)) = unhealthy_for(&n, now) {
            unhealthy.push(claim.name_any());
            if span >= toleration {
                let why = format!(
                    "Node {name} has been Ready={status} for {}s (toleration {}s)",
                    span.as_secs(),
                    toleration.as_secs()
                );
                due.push((claim.name_any(), name.to_owned(), why));
            }
        }
    }
    if due.is_empty() {
        return Decision::default();
    }
    let cap = (total as u64 * UNHEALTHY_CAP_PERCENT).div_ceil(100);
    if unhealthy.len() as u64 > cap {
        return Decision {
            repair: Vec::new(),
            blocked: Some((unhealthy.clone(), unhealthy.len(), total)),
        };
    }
    Decision {
        repair: due,
        blocked: None,
    }
}

pub struct Repairer {
    pub client: kube::Client,
    pub state: ClusterState,
    pub metrics: Arc<Metrics>,
    pub events: Events,
    pub toleration: Duration,
}

impl Repairer {
    /// Runs passes until the process stops.
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(err) = self.pass().await {
                tracing::warn!(error = %err, "node repair pass failed");
            }
        }
    }

    #[tracing::instrument(skip_all)]
    async fn pass(&self) -> Result<(), kube::Error> {
        let claims = self.state.nodeclaims.state();
        let decision = decide(
            &claims,
            |n| self.state.node(n),
            Timestamp::now(),
            self.toleration,
        );
        if let Some((names, unhealthy, total)) = &decision.blocked {
            tracing::warn!(
                unhealthy,
                total,
                "node repair blocked: too many unhealthy nodes"
            );
            for name in names {
                if let Some(claim) = self.state.nodeclaim(name) {
                    self.events.publish_deduped(
                        &claim.object_ref(&()),
                        EventType::Warning,
                        "NodeRepairBlocked",
                        format!(
                            "{unhealthy} of {total} nodes are unhealthy, more than \
                             {UNHEALTHY_CAP_PERCENT}%: nodes are not repaired"
                        ),
                        BLOCKED_EVERY,
                    );
                }
            }
        }
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        for (claim, node, why) in decision.repair {
            tracing::info!(NodeClaim = %claim, Node = %node, reason = %why, "repairing unhealthy node");
            // Forceful: the drain's deadline is now.
            let now = Timestamp::now().to_string();
            let patch = json!({"metadata": {"annotations": {
                annotation::NODECLAIM_TERMINATION_TIMESTAMP: now
            }}});
            match api
                .patch(&claim, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => continue,
                Err(e) => return Err(e),
            }
            if let Some(nc) = self.state.nodeclaim(&claim) {
                self.events.publish(
                    &nc.object_ref(&()),
                    EventType::Warning,
                    "NodeRepair",
                    format!("{why}: replacing it"),
                );
                self.metrics.claim_disrupted(&nc, "unhealthy");
                self.metrics.claim_unhealthy(&nc, "Ready");
            }
            match api.delete(&claim, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_apis::names::label;

    fn claim(name: &str) -> Arc<NodeClaim> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {label::NODEPOOL: "p"}},
                "spec": {"nodeClassRef": {"group": "karpenter.kakaocloud.com", "kind": "KCNodeClass", "name": "c"},
                         "requirements": []},
                "status": {"nodeName": format!("node-{name}")}
            }))
            .unwrap(),
        )
    }

    fn node(status: &str, since: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "n"},
                "status": {"conditions": [{"type": "Ready", "status": status,
                                           "lastTransitionTime": since}]}
            }))
            .unwrap(),
        )
    }

    fn at(t: &str) -> Timestamp {
        t.parse().unwrap()
    }

    const TEN_MIN: Duration = Duration::from_secs(600);

    #[test]
    fn a_node_unready_past_the_toleration_is_repaired() {
        let claims: Vec<_> = (0..5).map(|i| claim(&format!("c{i}"))).collect();
        let nodes = |n: &str| {
            Some(match n {
                "node-c0" => node("Unknown", "2026-01-01T00:00:00Z"),
                "node-c1" => node("False", "2026-01-01T00:05:00Z"),
                _ => node("True", "2026-01-01T00:00:00Z"),
            })
        };
        let d = decide(&claims, nodes, at("2026-01-01T00:10:00Z"), TEN_MIN);
        // c1 is not due yet but counts as unhealthy: 2 of 5 is above the cap (20% of 5 is 1).
        assert_eq!(d.blocked.map(|b| (b.1, b.2)), Some((2, 5)));
        let d = decide(&claims[..1], nodes, at("2026-01-01T00:10:00Z"), TEN_MIN);
        assert_eq!(d.repair.len(), 1);
        assert_eq!(d.repair[0].0, "c0");
        assert!(
            d.repair[0].2.contains("Ready=Unknown for 600s"),
            "{:?}",
            d.repair
        );
        let d = decide(&claims[..1], nodes, at("2026-01-01T00:09:59Z"), TEN_MIN);
        assert_eq!(d, Decision::default(), "not before the toleration");
    }

    #[test]
    fn more_than_a_fifth_unhealthy_blocks_every_repair() {
        let claims: Vec<_> = (0..10).map(|i| claim(&format!("c{i}"))).collect();
        let down = |k: usize| {
            move |n: &str| {
                let i: usize = n.trim_start_matches("node-c").parse().unwrap();
                Some(if i < k {
                    node("False", "2026-01-01T00:00:00Z")
                } else {
                    node("True", "2026-01-01T00:00:00Z")
                })
            }
        };
        let now = at("2026-01-01T01:00:00Z");
        let d = decide(&claims, down(2), now, TEN_MIN);
        assert_eq!(d.repair.len(), 2, "2 of 10 is the cap");
        let d = decide(&claims, down(3), now, TEN_MIN);
        assert!(d.repair.is_empty());
        assert_eq!(d.blocked.map(|b| (b.1, b.2)), Some((3, 10)));
    }
}
