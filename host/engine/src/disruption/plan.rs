//! The disruption methods, in upstream's order, over one [`ClusterSnapshot`].
//!
//! Forceful: expiration (not budgeted, pod blockers ignored; a replacement is still launched first
//! when the pods need one). Graceful, one method acting per pass: emptiness (every empty
//! consolidatable node within budget, one command), drift (one node per command, replaced if its
//! pods need a node), multi-node consolidation (binary search over the scored candidate prefix for
//! the largest set that can be deleted or replaced by one cheaper node) and single-node
//! consolidation (the best-scored candidate with a valid action).

use std::time::Duration;

use super::budgets::BudgetTracker;
use super::full::Unavailable;
use super::model::{ClusterSnapshot, NodeState, Reason};
use super::scorer::{self, ConsolidationScorer, SavingsPerDisruption, ScoreCandidate, ScoreError};
use super::simulate::{Outcome, Simulator};
use crate::scheduling::resources::Dim;
use kk_apis::crd::nodepool::ConsolidationPolicy;

/// Upstream caps multi-node consolidation at this many candidates.
pub const MULTI_NODE_CANDIDATE_CAP: usize = 100;

/// Which method produced a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Expiration,
    Emptiness,
    Drift,
    MultiNodeConsolidation,
    SingleNodeConsolidation,
}

impl Method {
    pub fn as_str(&self) -> &'static str {
        match self {
            Method::Expiration => "expiration",
            Method::Emptiness => "emptiness",
            Method::Drift => "drift",
            Method::MultiNodeConsolidation => "multi-node-consolidation",
            Method::SingleNodeConsolidation => "single-node-consolidation",
        }
    }
}

/// The new node a command launches before it drains the candidates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    pub node_pool: String,
    /// Instance types it may launch as, cheapest first.
    pub instance_types: Vec<String>,
    pub zone: String,
    pub capacity_type: String,
    pub price_micros: u64,
}

/// One decision: take these nodes away, after launching the replacement if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    pub method: Method,
    pub reason: Reason,
    /// Indices into [`ClusterSnapshot::nodes`].
    pub candidates: Vec<usize>,
    pub replacement: Option<Replacement>,
    /// Hourly price of the candidates minus the replacement's (negative for a pricier drift replacement).
    pub savings_micros: i64,
}

impl Command {
    pub fn node_names<'s>(&self, snapshot: &'s ClusterSnapshot) -> Vec<&'s str> {
        self.candidates
            .iter()
            .map(|&i| snapshot.nodes[i].name.as_str())
            .collect()
    }
}

/// Why a node is not a candidate (for events and logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    Unmanaged,
    NotInitialized,
    Deleting,
    Nominated,
    NodeDoNotDisrupt,
    UnknownNodePool,
    PodDoNotDisrupt(String),
    PdbBlocked(String),
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocker::Unmanaged => f.write_str("node is not managed by Karpenter"),
            Blocker::NotInitialized => f.write_str("node is not initialized"),
            Blocker::Deleting => f.write_str("node is already being deleted"),
            Blocker::Nominated => f.write_str("node was just nominated for pending pods"),
            Blocker::NodeDoNotDisrupt => f.write_str("node has karpenter.sh/do-not-disrupt"),
            Blocker::UnknownNodePool => f.write_str("node's NodePool does not exist"),
            Blocker::PodDoNotDisrupt(p) => write!(f, "pod {p} has karpenter.sh/do-not-disrupt"),
            Blocker::PdbBlocked(p) => write!(f, "a PodDisruptionBudget forbids evicting pod {p}"),
        }
    }
}

/// Node-level checks every method shares.
pub fn node_blocker(snapshot: &ClusterSnapshot, node: &NodeState) -> Option<Blocker> {
    if !node.managed() {
        return Some(Blocker::Unmanaged);
    }
    if node.deleting {
        return Some(Blocker::Deleting);
    }
    if !node.initialized {
        return Some(Blocker::NotInitialized);
    }
    if node.nominated {
        return Some(Blocker::Nominated);
    }
    if node.do_not_disrupt {
        return Some(Blocker::NodeDoNotDisrupt);
    }
    if node
        .node_pool
        .as_deref()
        .and_then(|p| snapshot.pool(p))
        .is_none()
    {
        return Some(Blocker::UnknownNodePool);
    }
    None
}

/// Node- and pod-level checks of graceful methods.
pub fn blocker(snapshot: &ClusterSnapshot, node: &NodeState) -> Option<Blocker> {
    if let Some(b) = node_blocker(snapshot, node) {
        return Some(b);
    }
    for p in node.reschedulable_pods() {
        if p.do_not_disrupt {
            return Some(Blocker::PodDoNotDisrupt(format!(
                "{}/{}",
                p.namespace, p.name
            )));
        }
        if p.pdb_blocked {
            return Some(Blocker::PdbBlocked(format!("{}/{}", p.namespace, p.name)));
        }
    }
    None
}

pub(super) fn elapsed(snapshot: &ClusterSnapshot, since: jiff::Timestamp) -> Duration {
    let secs = snapshot.now.as_second().saturating_sub(since.as_second());
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

/// Whether `consolidateAfter` has passed since the node's last pod event (and is not `Never`).
pub fn consolidatable(snapshot: &ClusterSnapshot, node: &NodeState) -> bool {
    let Some(pool) = node.node_pool.as_deref().and_then(|p| snapshot.pool(p)) else {
        return false;
    };
    let Some(after) = pool.consolidate_after else {
        return false;
    };
    let since = node.last_pod_event.unwrap_or(node.created);
    node.initialized && elapsed(snapshot, since) >= after
}

/// Whether the node outlived its `expireAfter` (the NodeClaim's, else its pool's).
pub fn expired(snapshot: &ClusterSnapshot, node: &NodeState) -> bool {
    let pool_expiry = node
        .node_pool
        .as_deref()
        .and_then(|p| snapshot.pool(p))
        .and_then(|p| p.expire_after);
    match node.expire_after.or(pool_expiry) {
        Some(after) => elapsed(snapshot, node.created) >= after,
        None => false,
    }
}

/// Whether node `i` belongs to a static NodePool.
fn in_static_pool(snapshot: &ClusterSnapshot, i: usize) -> bool {
    snapshot.nodes[i]
        .node_pool
        .as_deref()
        .and_then(|p| snapshot.pool(p))
        .is_some_and(|p| p.is_static)
}

/// A delete-only command: a static NodePool's controller replaces the node, not disruption.
fn delete_only(snapshot: &ClusterSnapshot, method: Method, reason: Reason, i: usize) -> Command {
    Command {
        method,
        reason,
        candidates: vec![i],
        replacement: None,
        savings_micros: snapshot.nodes[i].price_micros as i64,
    }
}

fn all_spot(snapshot: &ClusterSnapshot, nodes: &[usize]) -> bool {
    nodes
        .iter()
        .all(|&i| snapshot.nodes[i].capacity_type == "spot")
}

fn price_of(snapshot: &ClusterSnapshot, nodes: &[usize]) -> u64 {
    nodes.iter().map(|&i| snapshot.nodes[i].price_micros).sum()
}

/// Turns a simulation outcome for `nodes` into a command.
fn command(
    sim: &mut Simulator<'_>,
    method: Method,
    reason: Reason,
    nodes: Vec<usize>,
    require_saving: bool,
) -> Option<Command> {
    let snapshot = sim.snapshot;
    let price = price_of(snapshot, &nodes);
    let max_price = require_saving.then_some(price);
    let allow_spot = !(require_saving && all_spot(snapshot, &nodes));
    match sim.simulate(&nodes, max_price, allow_spot) {
        Outcome::Delete => Some(Command {
            method,
            reason,
            savings_micros: price as i64,
            candidates: nodes,
            replacement: None,
        }),
        Outcome::Replace {
            option,
            price_micros,
        } => {
            let o = sim.options[option].clone();
            let instance_types = sim.replacement_types(&nodes, max_price, allow_spot);
            Some(Command {
                method,
                reason,
                savings_micros: price as i64 - price_micros as i64,
                candidates: nodes,
                replacement: Some(Replacement {
                    node_pool: snapshot.pools[o.pool].name.clone(),
                    instance_types,
                    zone: o.zone,
                    capacity_type: o.capacity_type,
                    price_micros,
                }),
            })
        }
        Outcome::Infeasible => None,
    }
}

/// Expiration, as upstream's `nodeclaim/expiration` (v1): every managed node past its NodePool's
/// `expireAfter` is deleted. It is forceful: no budget, no pre-spun replacement, and neither
/// `do-not-disrupt` nor a PDB stops it here; termination's drain honours them until the
/// NodeClaim's `terminationGracePeriod`, and provisioning places the evicted pods.
pub fn expiration(snapshot: &ClusterSnapshot) -> Vec<Command> {
    (0..snapshot.nodes.len())
        .filter(|&i| {
            let node = &snapshot.nodes[i];
            node.managed() && !node.deleting && expired(snapshot, node)
        })
        .map(|i| delete_only(snapshot, Method::Expiration, Reason::Expired, i))
        .collect()
}

/// Every empty, consolidatable node within budget, as one delete command.
pub fn emptiness(sim: &mut Simulator<'_>, budgets: &mut BudgetTracker) -> Option<Command> {
    let snapshot = sim.snapshot;
    let mut nodes = Vec::new();
    for (i, node) in snapshot.nodes.iter().enumerate() {
        if !node.is_empty()
            || blocker(snapshot, node).is_some()
            || !consolidatable(snapshot, node)
            || in_static_pool(snapshot, i)
        {
            continue;
        }
        let Some(pool) = node.node_pool.as_deref() else {
            continue;
        };
        if budgets.take(pool, Reason::Empty) {
            nodes.push(i);
        }
    }
    if nodes.is_empty() {
        return None;
    }
    let price = price_of(snapshot, &nodes);
    Some(Command {
        method: Method::Emptiness,
        reason: Reason::Empty,
        candidates: nodes,
        replacement: None,
        savings_micros: price as i64,
    })
}

/// The first drifted node (empty ones first, then oldest) whose pods can go elsewhere or onto one
/// replacement, within the Drifted budget.
pub fn drift(sim: &mut Simulator<'_>, budgets: &mut BudgetTracker) -> Option<Command> {
    let snapshot = sim.snapshot;
    let mut drifted: Vec<usize> = (0..snapshot.nodes.len())
        .filter(|&i| {
            let n = &snapshot.nodes[i];
            n.drift.is_some() && blocker(snapshot, n).is_none()
        })
        .collect();
    drifted.sort_by_key(|&i| {
        let n = &snapshot.nodes[i];
        (!n.is_empty(), n.created)
    });
    for i in drifted {
        let pool = snapshot.nodes[i].node_pool.as_deref().unwrap_or("");
        if budgets.remaining(pool, Reason::Drifted) == 0 {
            continue;
        }
        let cmd = if in_static_pool(snapshot, i) {
            Some(delete_only(snapshot, Method::Drift, Reason::Drifted, i))
        } else {
            command(sim, Method::Drift, Reason::Drifted, vec![i], false)
        };
        if let Some(cmd) = cmd {
            budgets.take(pool, Reason::Drifted);
            return Some(cmd);
        }
    }
    None
}

/// What single-node simulation found for each consolidation candidate, and the scores.
#[derive(Debug, Clone, Default)]
pub struct Scored {
    /// Node indices, best first (candidates scored <= 0 dropped).
    pub order: Vec<usize>,
    /// The candidates' scorer inputs, indexed like `nodes`.
    pub inputs: Vec<ScoreCandidate>,
    pub nodes: Vec<usize>,
    /// The plugin scorer failed and the native one was used.
    pub scorer_error: Option<ScoreError>,
    /// Consolidatable nodes a pod or the node itself keeps from disruption (upstream's
    /// `DisruptionBlocked` events): node index and why.
    pub blocked: Vec<(usize, String)>,
    /// Consolidatable nodes consolidation cannot act on (upstream's `Unconsolidatable` events):
    /// node index and why.
    pub unconsolidatable: Vec<(usize, String)>,
    /// Candidates of `Balanced` NodePools with a feasible move: node index, the move's score and
    /// whether it reaches `1 / k` (upstream's `consolidation_score` and `consolidation_moves`).
    pub balanced: Vec<(usize, f64, bool)>,
}

/// Why a node whose complex pods the full solver cannot read is left alone (only hand-built
/// snapshots lack the pod objects).
pub const UNMODELLED: &str = "a pod has its own pod affinity, anti-affinity, topology spread or \
     host ports, and its object is not in the snapshot to simulate";
/// Why a node whose pods a reverted consolidation moved is left alone.
pub const HELD: &str =
    "its pods' controller is held after a consolidation was reverted (ConsolidationReverted)";
/// Upstream's message when the pods fit on a new node but none is cheaper.
pub const NO_CHEAPER: &str = "Can't replace with a cheaper node";
/// When the pods fit neither on the remaining nodes nor on one new node.
pub const WOULD_NOT_SCHEDULE: &str =
    "not all pods would schedule on the remaining nodes or on one new node";

fn permille(used: u64, of: u64) -> u32 {
    if of == 0 {
        return 0;
    }
    u32::try_from(used.saturating_mul(1000) / of).unwrap_or(u32::MAX)
}

/// Node `i` consolidated alone, as the pass simulates it: deleted, or replaced by a strictly
/// cheaper node (a spot node only by on-demand). Infeasible, the reason: no cheaper node
/// ([`NO_CHEAPER`]) or the pods fit no new node at all ([`WOULD_NOT_SCHEDULE`]).
pub fn simulate_single(sim: &mut Simulator<'_>, i: usize) -> Result<Outcome, &'static str> {
    let snapshot = sim.snapshot;
    let node = &snapshot.nodes[i];
    let allow_spot = node.capacity_type != "spot";
    match sim.simulate(&[i], Some(node.price_micros), allow_spot) {
        // Without the saving rule: do the pods fit a new node at all?
        Outcome::Infeasible => Err(match sim.simulate(&[i], None, allow_spot) {
            Outcome::Infeasible => WOULD_NOT_SCHEDULE,
            _ => NO_CHEAPER,
        }),
        outcome => Ok(outcome),
    }
}

/// Consolidation candidates (non-empty, consolidatable, pools with `WhenEmptyOrUnderutilized`,
/// no blockers, no pods of a reverted consolidation), each simulated alone, then scored.
///
/// Nodes with complex pods go last, fewest pods first: the full solver decides them within its
/// time budget, and the ones it does not reach this pass wait for the next one.
pub fn score_candidates(sim: &mut Simulator<'_>, scorer: &dyn ConsolidationScorer) -> Scored {
    let snapshot = sim.snapshot;
    let mut nodes = Vec::new();
    let mut inputs = Vec::new();
    let mut blocked = Vec::new();
    let mut unconsolidatable = Vec::new();
    let mut balanced_moves = Vec::new();
    let mut eligible = Vec::new();
    for (i, node) in snapshot.nodes.iter().enumerate() {
        if node.is_empty() || !consolidatable(snapshot, node) {
            continue;
        }
        let Some(pool) = node.node_pool.as_deref().and_then(|p| snapshot.pool(p)) else {
            continue;
        };
        if !pool.consolidation_policy.consolidates_underutilized() || pool.is_static {
            continue;
        }
        match blocker(snapshot, node) {
            // A nomination lasts seconds: not worth an Event, and kube-rs folds later Events of
            // the same reason on the same object into its series, keeping the first note.
            Some(
                b @ (Blocker::PodDoNotDisrupt(_)
                | Blocker::PdbBlocked(_)
                | Blocker::NodeDoNotDisrupt),
            ) => {
                blocked.push((i, b.to_string()));
                continue;
            }
            Some(_) => continue,
            None => {}
        }
        if node.reschedulable_pods().any(|p| p.consolidation_held) {
            unconsolidatable.push((i, HELD.to_owned()));
            continue;
        }
        eligible.push(i);
    }
    eligible.sort_by_key(|&i| {
        let complex = sim.needs_full_simulation(i);
        let pods = if complex {
            snapshot.nodes[i].reschedulable_pods().count()
        } else {
            0
        };
        (complex, pods)
    });
    for i in eligible {
        let node = &snapshot.nodes[i];
        let Some(pool) = node.node_pool.as_deref().and_then(|p| snapshot.pool(p)) else {
            continue;
        };
        match sim.decidable(&[i]) {
            Ok(()) => {}
            Err(Unavailable::NoPodObject) => {
                unconsolidatable.push((i, UNMODELLED.to_owned()));
                continue;
            }
            Err(Unavailable::BudgetSpent) => continue,
        }
        let mut outcome = simulate_single(sim, i).unwrap_or_else(|why| {
            unconsolidatable.push((i, why.to_owned()));
            Outcome::Infeasible
        });
        let savings = match outcome {
            Outcome::Delete => Some(node.price_micros as i64),
            Outcome::Replace { price_micros, .. } => {
                Some(node.price_micros as i64 - price_micros as i64)
            }
            Outcome::Infeasible => None,
        };
        if let Some(s) = savings
            && pool.consolidation_policy == ConsolidationPolicy::Balanced
        {
            let score = balanced_score(snapshot, &[i], s);
            balanced_moves.push((i, score, score >= 1.0 / BALANCED_K));
        }
        if let Some(Err(why)) = savings.map(|s| balanced(snapshot, &[i], s)) {
            unconsolidatable.push((i, why));
            outcome = Outcome::Infeasible;
        }
        let requested = node.requested();
        inputs.push(ScoreCandidate {
            node_name: node.name.clone(),
            instance_type: node.instance_type.clone(),
            node_pool: pool.name.clone(),
            zone: node.zone.clone(),
            capacity_type: node.capacity_type.clone(),
            price_micros: node.price_micros,
            cpu_utilisation_permille: permille(
                requested.get(Dim::CpuMillis),
                node.allocatable.get(Dim::CpuMillis),
            ),
            memory_utilisation_permille: permille(
                requested.get(Dim::MemoryBytes),
                node.allocatable.get(Dim::MemoryBytes),
            ),
            age_seconds: elapsed(snapshot, node.created).as_secs(),
            pod_count: node.reschedulable_pods().count() as u32,
            disruption_cost: node.disruption_cost(),
            pods_fit_elsewhere: outcome == Outcome::Delete,
            replacement_price_micros: match outcome {
                Outcome::Replace { price_micros, .. } => Some(price_micros),
                _ => None,
            },
            reason: Reason::Underutilized,
        });
        nodes.push(i);
    }
    let (scores, scorer_error) = match scorer.score(&inputs).and_then(|s| {
        scorer::validate(scorer.name(), &s, inputs.len())?;
        Ok(s)
    }) {
        Ok(s) => (s, None),
        Err(e) => {
            tracing::warn!(error = %e, "consolidation scorer failed; using the native scorer");
            (
                SavingsPerDisruption.score(&inputs).unwrap_or_default(),
                Some(e),
            )
        }
    };
    let order = scorer::order(&scores)
        .into_iter()
        .map(|k| nodes[k])
        .collect();
    Scored {
        order,
        inputs,
        nodes,
        scorer_error,
        blocked,
        unconsolidatable,
        balanced: balanced_moves,
    }
}

/// Upstream's Balanced constant: a move must score at least `1 / k`.
pub const BALANCED_K: f64 = 2.0;

/// A node's disruption in Balanced's terms: 1 for the node plus its pods' positive eviction costs.
fn balanced_disruption(node: &NodeState) -> f64 {
    1.0 + node
        .reschedulable_pods()
        .map(|p| p.eviction_cost().max(0.0))
        .sum::<f64>()
}

/// Upstream's Balanced score of taking `nodes` away for `savings_micros`: the share of their
/// NodePools' hourly cost saved over the share of the NodePools' disruption caused.
pub fn balanced_score(snapshot: &ClusterSnapshot, nodes: &[usize], savings_micros: i64) -> f64 {
    let pools: std::collections::BTreeSet<&str> = nodes
        .iter()
        .filter_map(|&i| snapshot.nodes[i].node_pool.as_deref())
        .collect();
    let in_pools = snapshot.nodes.iter().filter(|n| {
        n.managed() && !n.deleting && n.node_pool.as_deref().is_some_and(|p| pools.contains(p))
    });
    let (cost, total) = in_pools.fold((0u64, 0f64), |(c, d), n| {
        (c + n.price_micros, d + balanced_disruption(n))
    });
    let disruption: f64 = nodes
        .iter()
        .map(|&i| balanced_disruption(&snapshot.nodes[i]))
        .sum();
    if cost == 0 || total <= 0.0 || disruption <= 0.0 {
        return 0.0;
    }
    (savings_micros as f64 / cost as f64) / (disruption / total)
}

/// `Err(why)` when a candidate's NodePool is `Balanced` and the move does not score `1 / k`.
fn balanced(
    snapshot: &ClusterSnapshot,
    nodes: &[usize],
    savings_micros: i64,
) -> Result<(), String> {
    let applies = nodes.iter().any(|&i| {
        snapshot.nodes[i]
            .node_pool
            .as_deref()
            .and_then(|p| snapshot.pool(p))
            .is_some_and(|p| p.consolidation_policy == ConsolidationPolicy::Balanced)
    });
    if !applies {
        return Ok(());
    }
    let score = balanced_score(snapshot, nodes, savings_micros);
    if score >= 1.0 / BALANCED_K {
        Ok(())
    } else {
        Err(format!(
            "Balanced: the saving is not worth the disruption (score {score:.2} < {:.2})",
            1.0 / BALANCED_K
        ))
    }
}

fn is_valid_consolidation(snapshot: &ClusterSnapshot, cmd: &Command) -> bool {
    cmd.savings_micros > 0 && balanced(snapshot, &cmd.candidates, cmd.savings_micros).is_ok()
}

/// Multi-node consolidation: the largest prefix of the scored order (within budgets, at most
/// [`MULTI_NODE_CANDIDATE_CAP`]) that can be deleted or replaced by one cheaper node.
pub fn multi_node(
    sim: &mut Simulator<'_>,
    scored: &Scored,
    budgets: &BudgetTracker,
) -> Option<Command> {
    let snapshot = sim.snapshot;
    let mut trial = budgets.clone();
    let prefix: Vec<usize> = scored
        .order
        .iter()
        .copied()
        .filter(|&i| {
            let pool = snapshot.nodes[i].node_pool.as_deref().unwrap_or("");
            trial.take(pool, Reason::Underutilized)
        })
        .take(MULTI_NODE_CANDIDATE_CAP)
        .collect();
    if prefix.len() < 2 {
        return None;
    }
    let (mut lo, mut hi) = (2usize, prefix.len());
    let mut best = None;
    while lo <= hi {
        let mid = (lo + hi) / 2;
        match command(
            sim,
            Method::MultiNodeConsolidation,
            Reason::Underutilized,
            prefix[..mid].to_vec(),
            true,
        )
        .filter(|c| is_valid_consolidation(snapshot, c))
        {
            Some(cmd) => {
                best = Some(cmd);
                lo = mid + 1;
            }
            None => hi = mid - 1,
        }
    }
    best
}

/// Single-node consolidation: the best-scored candidate (within budget) with a valid action.
pub fn single_node(
    sim: &mut Simulator<'_>,
    scored: &Scored,
    budgets: &BudgetTracker,
) -> Option<Command> {
    let snapshot = sim.snapshot;
    for &i in &scored.order {
        let pool = snapshot.nodes[i].node_pool.as_deref().unwrap_or("");
        if budgets.remaining(pool, Reason::Underutilized) == 0 {
            continue;
        }
        if let Some(cmd) = command(
            sim,
            Method::SingleNodeConsolidation,
            Reason::Underutilized,
            vec![i],
            true,
        )
        .filter(|c| is_valid_consolidation(snapshot, c))
        {
            return Some(cmd);
        }
    }
    None
}

/// One disruption pass's result.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Forceful commands (expiration), one per node.
    pub forceful: Vec<Command>,
    /// The one graceful command of this pass.
    pub graceful: Option<Command>,
    pub scored: Scored,
    /// NodePools with consolidation candidates whose budgets allow no disruption now.
    pub budget_blocked: Vec<(String, Reason)>,
    /// The budgets as they stood before this pass took any (the pass's gauges report them).
    pub budgets: BudgetTracker,
}

/// The NodePools whose budget allows no disruption for a reason one of their nodes is a
/// candidate for (upstream's per-NodePool `DisruptionBlocked` event), sorted.
pub fn budget_blocked(
    snapshot: &ClusterSnapshot,
    budgets: &BudgetTracker,
) -> Vec<(String, Reason)> {
    let mut out: Vec<(String, Reason)> = snapshot
        .nodes
        .iter()
        .filter(|n| blocker(snapshot, n).is_none())
        .filter_map(|n| {
            let pool = n.node_pool.clone()?;
            let reason = if n.drift.is_some() {
                Reason::Drifted
            } else if !consolidatable(snapshot, n) {
                return None;
            } else if n.is_empty() {
                Reason::Empty
            } else {
                Reason::Underutilized
            };
            (budgets.remaining(&pool, reason) == 0).then_some((pool, reason))
        })
        .collect();
    out.sort_by(|a, b| (&a.0, a.1.as_metric()).cmp(&(&b.0, b.1.as_metric())));
    out.dedup();
    out
}

/// Runs every method in order over `snapshot`.
pub fn plan(snapshot: &ClusterSnapshot, scorer: &dyn ConsolidationScorer) -> Plan {
    plan_with(snapshot, scorer, true)
}

/// The snapshot's [`ClusterSnapshot::fingerprint`] with what the time changes in the rules'
/// answers: which nodes are consolidatable, which pods and nodes `do-not-disrupt` holds, and
/// the disruptions each budget allows now. A pass whose key equals that of a pass that found
/// nothing would find nothing again (upstream's "consolidated" state), save for the daemonsets
/// and the clock inside a budget window, which upstream's 5-minute recheck also covers.
pub fn quiet_key(snapshot: &ClusterSnapshot) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    snapshot.fingerprint.hash(&mut h);
    for n in &snapshot.nodes {
        consolidatable(snapshot, n).hash(&mut h);
        n.do_not_disrupt.hash(&mut h);
        n.pods
            .iter()
            .map(|p| p.do_not_disrupt)
            .collect::<Vec<_>>()
            .hash(&mut h);
    }
    let budgets = BudgetTracker::new(snapshot);
    for pool in &snapshot.pools {
        for reason in [Reason::Empty, Reason::Underutilized, Reason::Drifted] {
            budgets.remaining(&pool.name, reason).hash(&mut h);
        }
    }
    h.finish()
}

/// [`plan`], with consolidation (scoring, multi- and single-node) only when `consolidate`:
/// expiration, emptiness and drift always run.
pub fn plan_with(
    snapshot: &ClusterSnapshot,
    scorer: &dyn ConsolidationScorer,
    consolidate: bool,
) -> Plan {
    let mut sim = Simulator::new(snapshot);
    let forceful = expiration(snapshot);
    let initial = BudgetTracker::new(snapshot);
    let budget_blocked = budget_blocked(snapshot, &initial);
    let mut budgets = initial.clone();
    if let Some(cmd) = emptiness(&mut sim, &mut budgets) {
        return Plan {
            forceful,
            graceful: Some(cmd),
            budget_blocked,
            budgets: initial,
            ..Plan::default()
        };
    }
    if let Some(cmd) = drift(&mut sim, &mut budgets) {
        return Plan {
            forceful,
            graceful: Some(cmd),
            budget_blocked,
            budgets: initial,
            ..Plan::default()
        };
    }
    // Consolidation waits while pending pods need new nodes, as upstream's does.
    if !consolidate || sim.pending_needing_capacity() > 0 {
        return Plan {
            forceful,
            budget_blocked,
            budgets: initial,
            ..Plan::default()
        };
    }
    let scored = score_candidates(&mut sim, scorer);
    // Upstream runs multi-node first and takes it; a multi-node set can save less than the best
    // single node (a cheap replacement for one big node), so the larger saving wins here.
    let multi = multi_node(&mut sim, &scored, &budgets);
    let single = single_node(&mut sim, &scored, &budgets);
    let graceful = match (multi, single) {
        (Some(m), Some(s)) if s.savings_micros > m.savings_micros => Some(s),
        (Some(m), _) => Some(m),
        (None, s) => s,
    };
    Plan {
        forceful,
        graceful,
        scored,
        budget_blocked,
        budgets: initial,
    }
}

/// Re-checks `cmd` (planned on an earlier snapshot) against `now`: the same nodes must still be
/// candidates and the same kind of action (delete, or a replacement that is no dearer) must still
/// hold. Upstream waits 15 s between planning and this check to let pod churn show.
pub fn still_valid(cmd: &Command, earlier: &ClusterSnapshot, now: &ClusterSnapshot) -> bool {
    // Expiration is forceful: it only needs the node still there and not already going.
    if cmd.reason == Reason::Expired {
        return cmd.candidates.iter().all(|&i| {
            now.nodes
                .iter()
                .any(|n| n.name == earlier.nodes[i].name && !n.deleting)
        });
    }
    let mut nodes = Vec::with_capacity(cmd.candidates.len());
    for &i in &cmd.candidates {
        let name = &earlier.nodes[i].name;
        let Some(j) = now.nodes.iter().position(|n| &n.name == name) else {
            return false;
        };
        let node = &now.nodes[j];
        if blocker(now, node).is_some() {
            return false;
        }
        if cmd.reason == Reason::Empty && !node.is_empty() {
            return false;
        }
        nodes.push(j);
    }
    // A static NodePool's node is deleted, not replaced: nothing to re-simulate.
    if nodes.iter().all(|&j| in_static_pool(now, j)) {
        return true;
    }
    let mut sim = Simulator::new(now);
    let require_saving = matches!(cmd.reason, Reason::Empty | Reason::Underutilized);
    match command(&mut sim, cmd.method, cmd.reason, nodes, require_saving) {
        None => false,
        Some(again) => match (&cmd.replacement, &again.replacement) {
            (None, None) => true,
            (Some(old), Some(new)) => new.price_micros <= old.price_micros,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        },
    }
}
