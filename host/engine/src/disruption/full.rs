//! The full check: a move of pods the fast fit check does not model (their own pod affinity or
//! anti-affinity, topology spread, host ports) is decided by the provisioning solver itself, as
//! upstream simulates every consolidation with its scheduler.
//!
//! The candidates' reschedulable pods are solved against every other destination node and the
//! NodePools. The move is a delete when every candidate pod lands on a remaining node, a
//! replacement when the rest share exactly one new NodeClaim, and infeasible otherwise.
//!
//! A solve reads only the running pods that can change its answer: those the movers' own
//! selectors (spread, affinity, anti-affinity) may select, and those whose required anti-affinity
//! may select a mover. Every other pod is folded into its node's room, as is the room the pending
//! pods take first (the fast check's headroom). So a solve costs the movers and their kin, not
//! the cluster's tens of thousands of pods. Results are cached per candidate set, and one
//! [`Simulator`](super::Simulator) spends at most [`FULL_CHECK_BUDGET`] in solves: the rest wait
//! for a later pass.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PodAffinityTerm, WeightedPodAffinityTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kk_apis::ResourceExt;
use kk_apis::cached_pod::CachedPod;
use kk_apis::pod::{required_anti_affinity, selects};

use super::model::{ClusterSnapshot, PodState};
use crate::scheduling::{
    CheapestFitRanker, ExistingNode, NodeClaimDraft, NodePoolInput, Resources, Scheduler,
    SchedulerOptions, SchedulingProblem, SchedulingResult,
};

/// Wall time one simulator may spend in full solves (a disruption pass, or one re-validation).
pub const FULL_CHECK_BUDGET: Duration = Duration::from_secs(5);

/// What the solver concluded for one candidate set.
#[derive(Debug, Clone)]
pub struct Solved {
    pub verdict: Verdict,
    /// Per candidate pod (the candidates in index order, each one's reschedulable pods in
    /// order): the remaining node the solver put it on, if any.
    pub onto: Vec<Option<String>>,
}

/// The move a [`Solved`] allows.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Every candidate pod lands on a remaining node.
    Delete,
    /// The candidate pods that do not fit share this one new NodeClaim.
    Replace(Box<NodeClaimDraft>),
    /// Some candidate pod fits nowhere, or they need more than one new node.
    Infeasible,
}

/// Why a full check did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// A pod to move has no object in the snapshot (hand-built snapshots).
    NoPodObject,
    /// This simulator spent its [`FULL_CHECK_BUDGET`].
    BudgetSpent,
}

/// A running pod a solve may need to read.
struct Running {
    pod: Arc<CachedPod>,
    requests: Resources,
    /// Index into [`FullCheck::kinds`].
    kind: usize,
}

/// What decides whether a running pod matters to a solve; the replicas of a workload share one.
struct Kind {
    labels: BTreeMap<String, String>,
    /// The selectors of its required anti-affinity terms (they keep the pods they select out
    /// of its domain).
    anti: Vec<LabelSelector>,
}

/// A destination node: its room with every pod folded in, and the pods a solve may unfold.
struct Destination {
    index: usize,
    node: ExistingNode,
    pods: Vec<Running>,
}

/// The solver's view of the snapshot, built on the first full check and reused.
pub struct FullCheck {
    destinations: Vec<Destination>,
    kinds: Vec<Kind>,
    pools: Vec<NodePoolInput>,
    /// Pending pods (and pods of leaving nodes) the fast check gave room on a destination:
    /// every solve places them with the movers, from that room.
    claimants: Vec<Arc<CachedPod>>,
    cache: HashMap<Vec<usize>, Rc<Solved>>,
    spent: Duration,
}

/// The selectors of every term, required and preferred.
fn term_selectors<'p>(
    required: Option<&'p Vec<PodAffinityTerm>>,
    preferred: Option<&'p Vec<WeightedPodAffinityTerm>>,
) -> impl Iterator<Item = Option<&'p LabelSelector>> {
    required
        .into_iter()
        .flatten()
        .chain(
            preferred
                .into_iter()
                .flatten()
                .map(|w| &w.pod_affinity_term),
        )
        .map(|t| t.label_selector.as_ref())
}

/// Every label selector of `pod`'s own spread, affinity and anti-affinity; `None` when one is
/// absent (then every running pod is read, to be safe).
fn own_selectors(pod: &CachedPod) -> Option<Vec<&LabelSelector>> {
    let Some(spec) = pod.spec.as_ref() else {
        return Some(Vec::new());
    };
    let affinity = spec.affinity.as_ref();
    let affinity_terms = affinity.and_then(|a| a.pod_affinity.as_ref()).map(|a| {
        term_selectors(
            a.required_during_scheduling_ignored_during_execution
                .as_ref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
        )
    });
    let anti_terms = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .map(|a| {
            term_selectors(
                a.required_during_scheduling_ignored_during_execution
                    .as_ref(),
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref(),
            )
        });
    spec.topology_spread_constraints
        .iter()
        .flatten()
        .map(|c| c.label_selector.as_ref())
        .chain(affinity_terms.into_iter().flatten())
        .chain(anti_terms.into_iter().flatten())
        .collect()
}

/// The kinds of the running pods, numbered as they are first seen.
#[derive(Default)]
struct Kinds {
    /// (labels, the anti-affinity terms as JSON) → index into `all`.
    index: HashMap<(BTreeMap<String, String>, String), usize>,
    all: Vec<Kind>,
}

impl Kinds {
    fn running(&mut self, pod: &Arc<CachedPod>, requests: Resources) -> Running {
        let terms = required_anti_affinity(pod);
        let key = (
            pod.labels().clone(),
            serde_json::to_string(terms).unwrap_or_default(),
        );
        let all = &mut self.all;
        let kind = *self.index.entry(key).or_insert_with_key(|(labels, _)| {
            all.push(Kind {
                labels: labels.clone(),
                anti: terms
                    .iter()
                    .filter_map(|t| t.label_selector.clone())
                    .collect(),
            });
            all.len() - 1
        });
        Running {
            pod: Arc::clone(pod),
            requests,
            kind,
        }
    }
}

/// A candidate set as the cache keys it.
fn sorted(nodes: &[usize]) -> Vec<usize> {
    let mut key = nodes.to_vec();
    key.sort_unstable();
    key
}

impl FullCheck {
    /// `destination[i]`, `labels[i]` and `headroom[i]` are the simulator's for snapshot node `i`
    /// (the headroom is net of every pod on it and of the pending pods placed first);
    /// `claimed` says which pending pods it placed on which node.
    pub fn new(
        snapshot: &ClusterSnapshot,
        destination: &[bool],
        labels: &[BTreeMap<String, String>],
        headroom: &[Resources],
        claimed: &[(usize, &PodState)],
    ) -> Self {
        // A claimant with its object is solved, so its room goes back to its node; one without
        // (hand-built snapshots) keeps its room taken.
        let mut headroom = headroom.to_vec();
        let mut claimants = Vec::new();
        for (i, p) in claimed {
            if let Some(pod) = &p.pod {
                headroom[*i] = headroom[*i].add(&p.requests);
                claimants.push(Arc::clone(pod));
            }
        }
        let mut kinds = Kinds::default();
        let destinations = snapshot
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| destination[*i])
            .map(|(index, n)| Destination {
                index,
                node: ExistingNode {
                    name: n.name.clone(),
                    labels: labels[index].clone(),
                    taints: n.taints.clone(),
                    allocatable: headroom[index],
                    pods: Vec::new(),
                },
                pods: n
                    .pods
                    .iter()
                    .filter(|p| !p.terminating)
                    .filter_map(|p| Some(kinds.running(p.pod.as_ref()?, p.requests)))
                    .collect(),
            })
            .collect();
        FullCheck {
            destinations,
            kinds: kinds.all,
            pools: snapshot
                .pools
                .iter()
                .filter(|p| !p.is_static)
                .map(|p| p.scheduling_input())
                .collect(),
            claimants,
            cache: HashMap::new(),
            spent: Duration::ZERO,
        }
    }

    /// Whether `nodes` can be checked now (cached, or within budget with every pod's object).
    pub fn available(
        &self,
        snapshot: &ClusterSnapshot,
        nodes: &[usize],
    ) -> Result<(), Unavailable> {
        self.can_solve(snapshot, &sorted(nodes))
    }

    /// [`FullCheck::available`] for a sorted candidate set.
    fn can_solve(&self, snapshot: &ClusterSnapshot, key: &[usize]) -> Result<(), Unavailable> {
        if self.cache.contains_key(key) {
            return Ok(());
        }
        let objects = key
            .iter()
            .flat_map(|&i| snapshot.nodes[i].reschedulable_pods())
            .all(|p| p.pod.is_some());
        if !objects {
            return Err(Unavailable::NoPodObject);
        }
        if self.spent >= FULL_CHECK_BUDGET {
            return Err(Unavailable::BudgetSpent);
        }
        Ok(())
    }

    /// Solves the move of `nodes`' reschedulable pods.
    pub fn solve(
        &mut self,
        snapshot: &ClusterSnapshot,
        nodes: &[usize],
    ) -> Result<Rc<Solved>, Unavailable> {
        let key = sorted(nodes);
        if let Some(hit) = self.cache.get(&key) {
            return Ok(Rc::clone(hit));
        }
        self.can_solve(snapshot, &key)?;
        let solved = Rc::new(self.run(snapshot, &key));
        self.cache.insert(key, Rc::clone(&solved));
        Ok(solved)
    }

    /// How many of the claimants need a new node when nothing moves. The fast check gave each
    /// room on a destination without modelling its own spread or affinity; the solver does, as
    /// upstream simulates the pending pods with every consolidation. Counts against the budget.
    pub fn claimants_needing_capacity(&mut self, snapshot: &ClusterSnapshot) -> usize {
        let (result, _) = self.schedule(snapshot, &[]);
        result.new_node_claims.iter().map(|c| c.pods.len()).sum()
    }

    fn run(&mut self, snapshot: &ClusterSnapshot, nodes: &[usize]) -> Solved {
        let (mut result, movers) = self.schedule(snapshot, nodes);
        let mover = |k: usize| movers.contains(&k);
        let mut onto = vec![None; movers.len()];
        for placed in &result.existing {
            for &k in placed.pods.iter().filter(|&&k| mover(k)) {
                onto[k - movers.start] = Some(placed.node.clone());
            }
        }
        // A claimant left over is provisioning's to place, not this move's concern.
        result
            .new_node_claims
            .retain(|c| c.pods.iter().any(|&k| mover(k)));
        let verdict = if result.unschedulable.iter().any(|u| mover(u.pod)) {
            Verdict::Infeasible
        } else {
            match result.new_node_claims.len() {
                0 => Verdict::Delete,
                1 => Verdict::Replace(Box::new(result.new_node_claims.remove(0))),
                _ => Verdict::Infeasible,
            }
        };
        Solved { verdict, onto }
    }

    /// Solves the claimants, then `nodes`' reschedulable pods, against the other destinations
    /// and the NodePools. Returns the result and the movers' indices into its pods. Its wall
    /// time counts against the budget.
    fn schedule(
        &mut self,
        snapshot: &ClusterSnapshot,
        nodes: &[usize],
    ) -> (SchedulingResult, Range<usize>) {
        let started = Instant::now();
        // The claimants come first, as kube-scheduler has them queued already.
        let first = self.claimants.len();
        let pods: Vec<Arc<CachedPod>> = self
            .claimants
            .iter()
            .cloned()
            .chain(
                nodes
                    .iter()
                    .flat_map(|&i| snapshot.nodes[i].reschedulable_pods())
                    .filter_map(|p| p.pod.clone()),
            )
            .collect();
        // Movers of one workload share their selectors and labels: each is checked once.
        let selectors: Option<Vec<&LabelSelector>> = pods
            .iter()
            .map(|p| own_selectors(p))
            .try_fold(Vec::new(), |mut all, s| {
                for s in s? {
                    if !all.contains(&s) {
                        all.push(s);
                    }
                }
                Some(all)
            });
        let mut mover_labels: Vec<&BTreeMap<String, String>> = Vec::new();
        for l in pods.iter().map(|p| p.labels()) {
            if !mover_labels.contains(&l) {
                mover_labels.push(l);
            }
        }
        // A running pod can change the answer when a mover's selector reads it, or when its
        // required anti-affinity reads a mover.
        let relevant: Vec<bool> = self
            .kinds
            .iter()
            .map(|kind| {
                selectors
                    .as_ref()
                    .is_none_or(|s| s.iter().any(|s| selects(Some(s), &kind.labels)))
                    || kind
                        .anti
                        .iter()
                        .any(|a| mover_labels.iter().any(|m| selects(Some(a), m)))
            })
            .collect();
        let existing: Vec<ExistingNode> = self
            .destinations
            .iter()
            .filter(|d| !nodes.contains(&d.index))
            .map(|d| {
                let mut node = d.node.clone();
                for r in d.pods.iter().filter(|r| relevant[r.kind]) {
                    node.allocatable = node.allocatable.add(&r.requests);
                    node.pods.push(Arc::clone(&r.pod));
                }
                node
            })
            .collect();
        let problem = SchedulingProblem {
            pods: &pods,
            node_pools: &self.pools,
            instance_types: &snapshot.instance_types,
            existing_nodes: &existing,
            daemonsets: &snapshot.daemonsets,
        };
        let result =
            Scheduler::new(&CheapestFitRanker, SchedulerOptions::default()).solve(&problem);
        self.spent += started.elapsed();
        (result, first..pods.len())
    }
}
