//! Answers to "why", served as JSON by [`crate::views`]:
//!
//! * why a pod got its node and flavor: the provisioner records each NodeClaim it creates (the
//!   pods it was opened for, the flavors ranked best first with their prices, what ranked
//!   them) and each pod it could not schedule, bounded to the latest [`CLAIMS`] and [`PODS`];
//! * why a node is or is not disrupted: computed on request from a fresh snapshot of the shared
//!   cluster state by the disruption rules themselves (`kk_engine::disruption::explain`), so
//!   the answer is the pass's, never a separate model. The operator hands in that computation
//!   ([`NodeExplainer`]), so this module depends on neither provisioning nor disruption.
//!
//! Only the leader runs the controllers: on a standby the explanations are unavailable.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use futures::future::BoxFuture;
use jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use crate::state::ClusterState;
use kk_apis::names::label;
use kk_engine::disruption::explain::NodeExplanation;
use kk_engine::scheduling::instance_types::InstanceType;

/// Explains one node by name, from the running controllers' state.
pub type NodeExplainer =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<NodeExplanation, ExplainError>> + Send + Sync>;

/// NodeClaim decisions kept.
pub const CLAIMS: usize = 2000;
/// Unschedulable pods kept.
pub const PODS: usize = 5000;
/// Flavors kept per decision, best first.
const RANKED: usize = 10;

/// One NodeClaim the provisioner created, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimDecision {
    pub node_claim: String,
    pub node_pool: String,
    pub at: Timestamp,
    /// `namespace/name` of the pods it was opened for.
    pub pods: Vec<String>,
    /// What ranked the flavors (a plugin and its digest, or the native ranker).
    pub selector: String,
    /// The flavors the NodeClaim may launch as, best first, with their cheapest available
    /// offering's hourly price.
    pub ranked: Vec<RankedFlavor>,
    /// Flavors ranked beyond [`RANKED`].
    pub more: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RankedFlavor {
    pub instance_type: String,
    pub price_micros: Option<u64>,
}

impl ClaimDecision {
    /// The decision for `pods` of one draft, ranked `flavors` looked up in `catalog`.
    pub fn new(
        node_claim: &str,
        node_pool: &str,
        pods: Vec<String>,
        selector: String,
        flavors: &[String],
        catalog: &[InstanceType],
    ) -> ClaimDecision {
        let price = |name: &str| {
            catalog
                .iter()
                .find(|t| t.name == name)?
                .offerings
                .iter()
                .filter(|o| o.available)
                .map(|o| o.price_micros)
                .min()
        };
        ClaimDecision {
            node_claim: node_claim.to_owned(),
            node_pool: node_pool.to_owned(),
            at: Timestamp::now(),
            pods,
            selector,
            ranked: flavors
                .iter()
                .take(RANKED)
                .map(|t| RankedFlavor {
                    instance_type: t.clone(),
                    price_micros: price(t),
                })
                .collect(),
            more: flavors.len().saturating_sub(RANKED),
        }
    }
}

/// A pod, explained.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    pub pod: String,
    pub node: Option<String>,
    pub node_claim: Option<String>,
    /// What the NodeClaim launched as: instance type, zone, capacity type.
    pub launched: Option<String>,
    /// The one paragraph.
    pub summary: String,
    pub decision: Option<ClaimDecision>,
}

/// Why an explanation is not available.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("this replica is not the leader: its controllers are not running")]
    NotLeading,
    #[error("{0}")]
    Failed(String),
}

struct Sources {
    state: ClusterState,
    nodes: NodeExplainer,
}

#[derive(Default)]
struct Inner {
    claims: Mutex<VecDeque<ClaimDecision>>,
    /// `namespace/name` -> when and why the last pass could not schedule it.
    unschedulable: Mutex<HashMap<String, (Timestamp, String)>>,
    sources: RwLock<Option<Sources>>,
}

/// The shared record; clones share it.
#[derive(Clone, Default)]
pub struct Explain(Arc<Inner>);

impl Explain {
    /// The running controllers' state to explain from (the operator calls this at start).
    pub fn attach(&self, state: ClusterState, nodes: NodeExplainer) {
        *self.0.sources.write().unwrap_or_else(|p| p.into_inner()) = Some(Sources { state, nodes });
    }

    /// The controllers stopped (leadership lost).
    pub fn detach(&self) {
        *self.0.sources.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    pub fn record_claim(&self, decision: ClaimDecision) {
        {
            let mut u = self
                .0
                .unschedulable
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for pod in &decision.pods {
                u.remove(pod);
            }
        }
        let mut claims = self.0.claims.lock().unwrap_or_else(|p| p.into_inner());
        if claims.len() == CLAIMS {
            claims.pop_front();
        }
        claims.push_back(decision);
    }

    pub fn record_unschedulable(&self, pod: String, reason: String) {
        let mut u = self
            .0
            .unschedulable
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if u.len() >= PODS && !u.contains_key(&pod) {
            // Forget the older half at once rather than scanning on every insert.
            let mut at: Vec<Timestamp> = u.values().map(|(t, _)| *t).collect();
            at.sort();
            let cut = at[at.len() / 2];
            u.retain(|_, (t, _)| *t > cut);
        }
        u.insert(pod, (Timestamp::now(), reason));
    }

    fn claim(&self, name: &str) -> Option<ClaimDecision> {
        let claims = self.0.claims.lock().unwrap_or_else(|p| p.into_inner());
        claims.iter().rev().find(|c| c.node_claim == name).cloned()
    }

    fn state(&self) -> Result<(ClusterState, NodeExplainer), ExplainError> {
        let sources = self.0.sources.read().unwrap_or_else(|p| p.into_inner());
        let s = sources.as_ref().ok_or(ExplainError::NotLeading)?;
        Ok((s.state.clone(), s.nodes.clone()))
    }

    /// Why pod `namespace/name` runs where it runs, or is still pending.
    pub fn pod(&self, namespace: &str, name: &str) -> Result<PodExplanation, ExplainError> {
        let (state, _) = self.state()?;
        let key = format!("{namespace}/{name}");
        let pod = state
            .pods
            .state()
            .into_iter()
            .find(|p| p.namespace().as_deref() == Some(namespace) && p.name_any() == name)
            .ok_or_else(|| ExplainError::NotFound(format!("pod {key}")))?;
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let claims = state.nodeclaims.state();
        let claim = match &node {
            Some(n) => claims.iter().find(|c| {
                c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(n.as_str())
            }),
            None => None,
        };
        // A pending pod's decision: the latest NodeClaim opened for it.
        let decision = match claim {
            Some(c) => self.claim(&c.name_any()),
            None => {
                let recorded = self.0.claims.lock().unwrap_or_else(|p| p.into_inner());
                recorded
                    .iter()
                    .rev()
                    .find(|d| d.pods.contains(&key))
                    .cloned()
            }
        };
        let launched = claim.map(|c| {
            let l = c.labels();
            let get = |k: &str| l.get(k).map_or("?", String::as_str).to_owned();
            format!(
                "{} in {} ({})",
                get(label::INSTANCE_TYPE),
                get(label::ZONE),
                get(label::CAPACITY_TYPE)
            )
        });
        let opened = |d: &ClaimDecision| {
            let first = d
                .ranked
                .first()
                .map_or("none".to_owned(), |f| match f.price_micros {
                    Some(p) => format!("{} at {p} micro-KRW/h", f.instance_type),
                    None => f.instance_type.clone(),
                });
            format!(
                "NodePool {} opened NodeClaim {} at {} for {} pod(s){}; {} ranked {} flavor(s), {first} first",
                d.node_pool,
                d.node_claim,
                d.at,
                d.pods.len(),
                if d.pods.contains(&key) {
                    ", this one among them"
                } else {
                    ", not this one: kube-scheduler placed it there later"
                },
                d.selector,
                d.ranked.len() + d.more,
            )
        };
        let summary = match (&node, claim, &decision) {
            (Some(n), Some(c), Some(d)) => format!(
                "runs on node {n} (NodeClaim {}, launched as {}). {}.",
                c.name_any(),
                launched.as_deref().unwrap_or("?"),
                opened(d)
            ),
            (Some(n), Some(c), None) => format!(
                "runs on node {n} (NodeClaim {}, launched as {}); this controller holds no record of the decision that created it (made before it started, or among more than {CLAIMS} since).",
                c.name_any(),
                launched.as_deref().unwrap_or("?")
            ),
            (Some(n), None, _) => {
                format!("runs on node {n}, which no NodeClaim of this cluster brought up")
            }
            (None, _, Some(d)) => format!("pending: {}; it waits for that node.", opened(d)),
            (None, _, None) => {
                let u = self
                    .0
                    .unschedulable
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                match u.get(&key) {
                    Some((at, why)) => format!(
                        "pending: the provisioning pass at {at} could not schedule it: {why}"
                    ),
                    None => "pending: no provisioning pass has decided on it yet".to_owned(),
                }
            }
        };
        Ok(PodExplanation {
            pod: key,
            node,
            node_claim: claim.map(|c| c.name_any()),
            launched,
            summary,
            decision,
        })
    }

    /// Why node `name` is or is not disrupted, from a fresh snapshot.
    pub async fn node(&self, name: &str) -> Result<NodeExplanation, ExplainError> {
        let (_, nodes) = self.state()?;
        nodes(name.to_owned()).await
    }
}
