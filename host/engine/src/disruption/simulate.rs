//! The fit check behind every disruption decision: would the pods of a set of nodes fit on the
//! remaining nodes (delete), or on those plus one new node (replace), and what would that cost?
//!
//! Everything string-shaped is compiled once per snapshot: pods are grouped into constraint
//! classes (node selector, required node affinity, tolerations) whose compatibility with every
//! node and every replacement offering is computed up front, so one simulation is a first-fit
//! decreasing pass over integer resource vectors. Running pods' required anti-affinity is modelled
//! as the topology domains each pod it selects must keep out of (both directions of kube-scheduler's
//! inter-pod check: a mover's own terms make it complex, below). Pods whose constraints this check
//! does not model (their own pod affinity or anti-affinity, topology spread, host ports) are
//! flagged, and a move of their node goes to the provisioning solver instead ([`super::full`]).

use kk_apis::names::{label, taint};
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};

use super::full::{FullCheck, Solved, Unavailable, Verdict};
use super::model::{ClusterSnapshot, NodeState, PodState, PoolState};
use crate::scheduling::{NodeClaimDraft, Resources};

/// A new node the simulation could launch: one offering of one instance type from one pool.
#[derive(Debug, Clone)]
pub struct LaunchOption {
    pub pool: usize,
    pub instance_type: usize,
    pub zone: String,
    pub capacity_type: String,
    pub price_micros: u64,
    pub allocatable: Resources,
    labels: BTreeMap<String, String>,
}

/// What a simulation concluded.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every pod fits on the remaining nodes.
    Delete,
    /// The pods need one new node; the cheapest that fits is this option of [`Simulator::options`].
    Replace { option: usize, price_micros: u64 },
    /// The pods cannot all be placed (or only on a node that saves nothing).
    Infeasible,
}

/// Constraints shared by pods that place identically (resources aside).
#[derive(Debug, Clone)]
struct Class {
    node_selector: BTreeMap<String, String>,
    affinity_terms: Vec<NodeSelectorTerm>,
    tolerations: Vec<Toleration>,
    /// Domains running pods' anti-affinity keeps these pods out of ([`PodState::kept_out_of`]).
    kept_out_of: Vec<(String, String)>,
}

/// A pod to move: its requests and class, and which of its node's reschedulable pods it is.
#[derive(Debug, Clone, Copy)]
struct Mover {
    requests: Resources,
    class: u32,
    pod: u32,
}

/// Where one pod of a removed node would go.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    /// Onto this remaining node.
    Node(String),
    /// Onto one new node with the others left over: the cheapest fitting instance type, its
    /// hourly price.
    NewNode {
        instance_type: String,
        price_micros: u64,
    },
    /// Nowhere: neither a remaining node nor one new node holds it.
    Nowhere,
}

/// The compiled snapshot.
pub struct Simulator<'a> {
    pub snapshot: &'a ClusterSnapshot,
    headroom: Vec<Resources>,
    /// Nodes that can receive pods.
    destination: Vec<bool>,
    classes: Vec<Class>,
    /// Per node: the classes and requests of its reschedulable pods, largest first.
    movers: Vec<Vec<Mover>>,
    /// Per node: some reschedulable pod needs the full solver.
    complex: Vec<bool>,
    /// Per node: its labels, with the well-known ones it implies.
    labels: Vec<BTreeMap<String, String>>,
    /// The full solver's view, built on the first move of a complex node.
    full: Option<FullCheck>,
    /// `compat[class][node]`.
    compat: Vec<Vec<bool>>,
    /// Launch options, cheapest first.
    pub options: Vec<LaunchOption>,
    /// `option_compat[class][option]`.
    option_compat: Vec<Vec<bool>>,
    /// Pools in weight order (highest first), as indices into `snapshot.pools`.
    pool_order: Vec<usize>,
    /// Scratch: nodes excluded from the current simulation.
    excluded: Vec<bool>,
    undo: Vec<(usize, Resources)>,
    scratch: Vec<Mover>,
    /// Pending pods no node or in-flight NodeClaim has room for and a new node could hold.
    pending_needing_capacity: usize,
    /// Pending pods and those of leaving nodes; a claimant [`Mover`]'s `pod` indexes this.
    claimants: Vec<&'a PodState>,
    /// Per destination node: the claimants whose room it holds. They move with its own pods,
    /// and the full check places them with the movers, so their labels count in its topology.
    claimed_movers: Vec<Vec<Mover>>,
}

fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or(&[]);
    let int = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => match (
            value.and_then(|v| int(v)),
            values.first().and_then(|x| int(x)),
        ) {
            (Some(v), Some(x)) => v > x,
            _ => false,
        },
        "Lt" => match (
            value.and_then(|v| int(v)),
            values.first().and_then(|x| int(x)),
        ) {
            (Some(v), Some(x)) => v < x,
            _ => false,
        },
        _ => false,
    }
}

fn term_matches(t: &NodeSelectorTerm, labels: &BTreeMap<String, String>) -> bool {
    // Field selectors (metadata.name) pin a pod to one node: never satisfied elsewhere.
    if t.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
        return false;
    }
    t.match_expressions
        .iter()
        .flatten()
        .all(|r| requirement_matches(r, labels))
}

fn toleration_matches(tol: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = tol.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let exists = tol.operator.as_deref() == Some("Exists");
    match tol.key.as_deref().filter(|k| !k.is_empty()) {
        None => exists,
        Some(key) => {
            key == taint.key
                && (exists
                    || tol.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""))
        }
    }
}

/// Whether a pod of `class` may run on a node with these labels and taints.
fn class_fits(class: &Class, labels: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
    // A new node is a hostname domain of its own; it shares any other domain its labels name.
    if class
        .kept_out_of
        .iter()
        .any(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    if !class
        .node_selector
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    if !class.affinity_terms.is_empty()
        && !class.affinity_terms.iter().any(|t| term_matches(t, labels))
    {
        return false;
    }
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|t| {
            class
                .tolerations
                .iter()
                .any(|tol| toleration_matches(tol, t))
        })
}

fn node_labels(n: &NodeState) -> BTreeMap<String, String> {
    let mut labels = n.labels.clone();
    labels
        .entry(label::INSTANCE_TYPE.to_owned())
        .or_insert_with(|| n.instance_type.clone());
    if !n.zone.is_empty() {
        labels
            .entry(label::ZONE.to_owned())
            .or_insert_with(|| n.zone.clone());
    }
    labels
        .entry(label::CAPACITY_TYPE.to_owned())
        .or_insert_with(|| n.capacity_type.clone());
    if let Some(pool) = &n.node_pool {
        labels
            .entry(label::NODEPOOL.to_owned())
            .or_insert_with(|| pool.clone());
    }
    labels
        .entry(label::HOSTNAME.to_owned())
        .or_insert_with(|| n.name.clone());
    labels
}

/// Launch options of one pool: every available offering of every instance type its requirements admit.
fn pool_options(pi: usize, pool: &PoolState, snapshot: &ClusterSnapshot) -> Vec<LaunchOption> {
    let mut out = Vec::new();
    for (ti, it) in snapshot.instance_types.iter().enumerate() {
        for off in it.offerings.iter().filter(|o| o.available) {
            let mut labels = pool.labels.clone();
            for (k, v) in &it.labels {
                labels.insert(k.clone(), v.clone());
            }
            labels.insert(label::INSTANCE_TYPE.to_owned(), it.name.clone());
            labels.insert(label::ZONE.to_owned(), off.zone.clone());
            labels.insert(label::CAPACITY_TYPE.to_owned(), off.capacity_type.clone());
            labels.insert(label::NODEPOOL.to_owned(), pool.name.clone());
            // A custom single-valued requirement becomes a label of the node.
            for r in &pool.requirements {
                let req = &r.requirement;
                if req.operator == "In"
                    && !labels.contains_key(&req.key)
                    && let Some(v) = req.values.as_ref().and_then(|v| v.first())
                {
                    labels.insert(req.key.clone(), v.clone());
                }
            }
            if pool
                .requirements
                .iter()
                .all(|r| requirement_matches(&r.requirement, &labels))
            {
                out.push(LaunchOption {
                    pool: pi,
                    instance_type: ti,
                    zone: off.zone.clone(),
                    capacity_type: off.capacity_type.clone(),
                    price_micros: off.price_micros,
                    allocatable: it.allocatable(),
                    labels,
                });
            }
        }
    }
    out
}

fn class_of(pod: &PodState, index: &mut HashMap<String, u32>, classes: &mut Vec<Class>) -> u32 {
    let key = serde_json::to_string(&(
        &pod.node_selector,
        &pod.affinity_terms,
        &pod.tolerations,
        &pod.kept_out_of,
    ))
    .unwrap_or_default();
    *index.entry(key).or_insert_with(|| {
        classes.push(Class {
            node_selector: pod.node_selector.clone(),
            affinity_terms: pod.affinity_terms.clone(),
            tolerations: pod.tolerations.clone(),
            kept_out_of: pod.kept_out_of.clone(),
        });
        (classes.len() - 1) as u32
    })
}

fn bigger_first(a: &Mover, b: &Mover) -> std::cmp::Ordering {
    use crate::scheduling::resources::Dim;
    (
        b.requests.get(Dim::CpuMillis),
        b.requests.get(Dim::MemoryBytes),
    )
        .cmp(&(
            a.requests.get(Dim::CpuMillis),
            a.requests.get(Dim::MemoryBytes),
        ))
}

impl<'a> Simulator<'a> {
    pub fn new(snapshot: &'a ClusterSnapshot) -> Simulator<'a> {
        let n = snapshot.nodes.len();
        let mut index = HashMap::new();
        let mut classes = Vec::new();
        let mut movers = Vec::with_capacity(n);
        let mut complex = Vec::with_capacity(n);
        for node in &snapshot.nodes {
            let mut m: Vec<Mover> = node
                .reschedulable_pods()
                .enumerate()
                .map(|(k, p)| Mover {
                    requests: p.requests,
                    class: class_of(p, &mut index, &mut classes),
                    pod: k as u32,
                })
                .collect();
            m.sort_by(bigger_first);
            movers.push(m);
            complex.push(node.reschedulable_pods().any(|p| p.needs_full_simulation));
        }
        // Pods that will need room whatever this pass decides: the pending ones, and those still
        // on nodes already leaving (upstream adds both to every simulation).
        let claimants: Vec<&'a PodState> = snapshot
            .pending_pods
            .iter()
            .chain(
                snapshot
                    .nodes
                    .iter()
                    .filter(|n| n.deleting)
                    .flat_map(|n| n.reschedulable_pods()),
            )
            .collect();
        let pending: Vec<Mover> = claimants
            .iter()
            .enumerate()
            .map(|(k, p)| Mover {
                requests: p.requests,
                class: class_of(p, &mut index, &mut classes),
                pod: k as u32,
            })
            .collect();
        let labels: Vec<BTreeMap<String, String>> =
            snapshot.nodes.iter().map(node_labels).collect();
        let compat: Vec<Vec<bool>> = classes
            .iter()
            .map(|c| {
                snapshot
                    .nodes
                    .iter()
                    .zip(&labels)
                    .map(|(node, l)| class_fits(c, l, &node.taints))
                    .collect()
            })
            .collect();
        let destination: Vec<bool> = snapshot
            .nodes
            .iter()
            .map(|node| {
                node.initialized
                    && node.ready
                    && !node.deleting
                    && !node.taints.iter().any(|t| t.key == taint::DISRUPTED)
            })
            .collect();
        let mut options: Vec<LaunchOption> = snapshot
            .pools
            .iter()
            .enumerate()
            .flat_map(|(pi, p)| pool_options(pi, p, snapshot))
            .collect();
        options.sort_by(|a, b| {
            a.price_micros
                .cmp(&b.price_micros)
                .then(a.instance_type.cmp(&b.instance_type))
                .then(a.zone.cmp(&b.zone))
        });
        let option_compat = classes
            .iter()
            .map(|c| {
                options
                    .iter()
                    .map(|o| class_fits(c, &o.labels, &snapshot.pools[o.pool].taints))
                    .collect()
            })
            .collect();
        let mut pool_order: Vec<usize> = (0..snapshot.pools.len()).collect();
        pool_order.sort_by_key(|&i| (std::cmp::Reverse(snapshot.pools[i].weight), i));
        let mut sim = Simulator {
            snapshot,
            headroom: snapshot
                .nodes
                .iter()
                .map(|node| node.allocatable.saturating_sub(&node.requested()))
                .collect(),
            destination,
            classes,
            movers,
            complex,
            labels,
            full: None,
            compat,
            options,
            option_compat,
            pool_order,
            excluded: vec![false; n],
            undo: Vec::new(),
            scratch: Vec::new(),
            pending_needing_capacity: 0,
            claimants,
            claimed_movers: vec![Vec::new(); n],
        };
        // Pending pods and those of leaving nodes claim room first (upstream simulates them
        // with the candidates' pods): on a node that can take them now, else on one still
        // launching. Those that fit nowhere but on a new node are provisioning's to place; they
        // are counted, see [`Simulator::pending_needing_capacity`].
        let mut pending = pending;
        pending.sort_by(bigger_first);
        for p in pending {
            match sim.first_fit(&p) {
                Some(i) => {
                    sim.headroom[i] = sim.headroom[i].saturating_sub(&p.requests);
                    sim.claimed_movers[i].push(p);
                }
                None => match sim.launching_fit(&p) {
                    Some(i) => sim.headroom[i] = sim.headroom[i].saturating_sub(&p.requests),
                    None if sim.new_node_fits(&p) => sim.pending_needing_capacity += 1,
                    None => {}
                },
            }
        }
        // The room found above ignores a pod's own spread and affinity: when such a pod pends,
        // the solver says whether it really has room (a pending hostname-spread pod was counted
        // as placed, and consolidation went on during a scale-out).
        if sim
            .claimed()
            .any(|(_, p)| p.needs_full_simulation && p.pod.is_some())
        {
            let snapshot = sim.snapshot;
            sim.pending_needing_capacity += sim.full_check().claimants_needing_capacity(snapshot);
        }
        sim.undo.clear();
        sim
    }

    /// How many distinct pod constraint classes the snapshot has.
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// Whether some pod on `node` has constraints only the full solver models.
    pub fn needs_full_simulation(&self, node: usize) -> bool {
        self.complex[node]
    }

    /// The claimants given room on a destination, with that node.
    fn claimed(&self) -> impl Iterator<Item = (usize, &'a PodState)> + '_ {
        let claimants = &self.claimants;
        self.claimed_movers
            .iter()
            .enumerate()
            .flat_map(move |(i, ms)| ms.iter().map(move |m| (i, claimants[m.pod as usize])))
    }

    fn full_check(&mut self) -> &mut FullCheck {
        let full = match self.full.take() {
            Some(full) => full,
            None => {
                let claimed: Vec<_> = self.claimed().collect();
                FullCheck::new(
                    self.snapshot,
                    &self.destination,
                    &self.labels,
                    &self.headroom,
                    &claimed,
                )
            }
        };
        self.full.insert(full)
    }

    /// Whether a move of `nodes` can be decided now: always for the fast check; for a complex
    /// node, when the full check has every pod's object and time left.
    pub fn decidable(&mut self, nodes: &[usize]) -> Result<(), Unavailable> {
        if !nodes.iter().any(|&i| self.complex[i]) {
            return Ok(());
        }
        let snapshot = self.snapshot;
        self.full_check().available(snapshot, nodes)
    }

    /// The full solver's answer for `nodes`, when some of them hold complex pods.
    fn solved(&mut self, nodes: &[usize]) -> Option<Result<std::rc::Rc<Solved>, Unavailable>> {
        if !nodes.iter().any(|&i| self.complex[i]) {
            return None;
        }
        let snapshot = self.snapshot;
        Some(self.full_check().solve(snapshot, nodes))
    }

    /// Launch options the solver's new NodeClaim admits (its pool, instance types, zones and
    /// capacity types), cheapest first.
    fn draft_options<'s>(
        &'s self,
        draft: &'s NodeClaimDraft,
        allow_spot: bool,
    ) -> impl Iterator<Item = (usize, u64)> + 's {
        let pools = &self.snapshot.pools;
        let types = &self.snapshot.instance_types;
        self.options
            .iter()
            .enumerate()
            .filter(move |(_, o)| {
                (allow_spot || o.capacity_type != "spot")
                    && pools[o.pool].name == draft.node_pool
                    && draft.instance_types.contains(&types[o.instance_type].name)
                    && draft
                        .requirements
                        .iter()
                        .filter(|r| {
                            r.requirement.key == label::ZONE
                                || r.requirement.key == label::CAPACITY_TYPE
                        })
                        .all(|r| requirement_matches(&r.requirement, &o.labels))
            })
            .map(|(oi, o)| (oi, o.price_micros))
    }

    /// Pending pods that need a new node (no node or in-flight NodeClaim has room for them, and
    /// a pool below its limits has an instance type that holds them). Upstream simulates them
    /// with every consolidation, where the new NodeClaims they need turn a delete into no
    /// action: capacity is not taken away while provisioning is adding some.
    pub fn pending_needing_capacity(&self) -> usize {
        self.pending_needing_capacity
    }

    /// A node still launching or initializing (not leaving) with room for `m`.
    fn launching_fit(&self, m: &Mover) -> Option<usize> {
        let nodes = &self.snapshot.nodes;
        self.fit_where(m, |i| !nodes[i].initialized && !nodes[i].deleting)
    }

    /// Whether one new node of a pool below its limits would hold `m`.
    fn new_node_fits(&self, m: &Mover) -> bool {
        let compat = &self.option_compat[m.class as usize];
        self.options.iter().zip(compat).any(|(o, &fits)| {
            fits && !self.snapshot.pools[o.pool].at_limit && m.requests.fits_in(&o.allocatable)
        })
    }

    fn first_fit(&self, m: &Mover) -> Option<usize> {
        self.fit_where(m, |i| self.destination[i] && !self.excluded[i])
    }

    /// The first node `admit` allows that takes `m`'s class and has room for it.
    fn fit_where(&self, m: &Mover, admit: impl Fn(usize) -> bool) -> Option<usize> {
        let compat = &self.compat[m.class as usize];
        (0..self.headroom.len())
            .find(|&i| admit(i) && compat[i] && m.requests.fits_in(&self.headroom[i]))
    }

    /// The pods of `nodes` that do not fit on the remaining nodes (first-fit decreasing), and the
    /// daemonset overhead a new node for them would also carry. Leaves the state as it found it.
    fn leftovers(&mut self, nodes: &[usize]) -> (Vec<Mover>, Resources) {
        for &i in nodes {
            self.excluded[i] = true;
        }
        let mut movers = std::mem::take(&mut self.scratch);
        movers.clear();
        for &i in nodes {
            movers.extend_from_slice(&self.movers[i]);
            movers.extend_from_slice(&self.claimed_movers[i]);
        }
        if nodes.len() > 1 || nodes.iter().any(|&i| !self.claimed_movers[i].is_empty()) {
            movers.sort_by(bigger_first);
        }
        let mut left = Vec::new();
        for m in &movers {
            match self.first_fit(m) {
                Some(i) => {
                    self.undo.push((i, self.headroom[i]));
                    self.headroom[i] = self.headroom[i].saturating_sub(&m.requests);
                }
                None => left.push(*m),
            }
        }
        for (i, h) in self.undo.drain(..).rev() {
            self.headroom[i] = h;
        }
        for &i in nodes {
            self.excluded[i] = false;
        }
        self.scratch = movers;
        let overhead = nodes
            .iter()
            .map(|&i| self.snapshot.nodes[i].daemon_requests())
            .fold(Resources::ZERO, |a, b| a.max(&b));
        (left, overhead)
    }

    /// Where each reschedulable pod of `node` would go if it were removed (`namespace/name`
    /// and place), the way [`Simulator::simulate`] places them: first-fit decreasing onto the
    /// remaining nodes, the rest onto one new node of the cheapest fitting type. Leaves the
    /// state as it found it.
    pub fn placements(&mut self, node: usize) -> Vec<(String, Placement)> {
        let pods: Vec<&crate::disruption::PodState> =
            self.snapshot.nodes[node].reschedulable_pods().collect();
        let name = |k: usize| format!("{}/{}", pods[k].namespace, pods[k].name);
        if let Some(solved) = self.solved(&[node]) {
            let Ok(solved) = solved else {
                return (0..pods.len())
                    .map(|k| (name(k), Placement::Nowhere))
                    .collect();
            };
            let new_node = match &solved.verdict {
                Verdict::Replace(draft) => {
                    self.draft_options(draft, true)
                        .next()
                        .map(|(oi, price)| Placement::NewNode {
                            instance_type: self.snapshot.instance_types
                                [self.options[oi].instance_type]
                                .name
                                .clone(),
                            price_micros: price,
                        })
                }
                _ => None,
            };
            return solved
                .onto
                .iter()
                .enumerate()
                .map(|(k, onto)| {
                    let place = match onto {
                        Some(n) => Placement::Node(n.clone()),
                        None => new_node.clone().unwrap_or(Placement::Nowhere),
                    };
                    (name(k), place)
                })
                .collect();
        }
        self.excluded[node] = true;
        let mut placed = Vec::new();
        let mut left = Vec::new();
        for m in self.movers[node].clone() {
            match self.first_fit(&m) {
                Some(i) => {
                    self.undo.push((i, self.headroom[i]));
                    self.headroom[i] = self.headroom[i].saturating_sub(&m.requests);
                    placed.push((m.pod, Placement::Node(self.snapshot.nodes[i].name.clone())));
                }
                None => left.push(m),
            }
        }
        for (i, h) in self.undo.drain(..).rev() {
            self.headroom[i] = h;
        }
        self.excluded[node] = false;
        let overhead = self.snapshot.nodes[node].daemon_requests();
        let new_node = self
            .fitting_options(&left, overhead, true)
            .next()
            .map(|(oi, price)| Placement::NewNode {
                instance_type: self.snapshot.instance_types[self.options[oi].instance_type]
                    .name
                    .clone(),
                price_micros: price,
            });
        for m in &left {
            placed.push((m.pod, new_node.clone().unwrap_or(Placement::Nowhere)));
        }
        placed.sort_by_key(|(k, _)| *k);
        placed
            .into_iter()
            .filter_map(|(k, place)| {
                let p = pods.get(k as usize)?;
                Some((format!("{}/{}", p.namespace, p.name), place))
            })
            .collect()
    }

    /// Simulates removing `nodes`: their reschedulable pods go first-fit decreasing onto the
    /// remaining nodes; what is left must fit on one new node. With `max_price`, the new node must
    /// cost strictly less. `allow_spot` is false for spot candidates (spot-to-spot consolidation is
    /// off, as upstream's default).
    ///
    /// A set holding a complex pod goes to the full solver instead ([`super::full`]); when it
    /// cannot run ([`Simulator::decidable`]) the move is infeasible.
    pub fn simulate(
        &mut self,
        nodes: &[usize],
        max_price: Option<u64>,
        allow_spot: bool,
    ) -> Outcome {
        if let Some(solved) = self.solved(nodes) {
            return match solved.as_deref().map(|s| &s.verdict) {
                Ok(Verdict::Delete) => Outcome::Delete,
                Ok(Verdict::Replace(draft)) => match self.draft_options(draft, allow_spot).next() {
                    Some((option, price_micros)) if max_price.is_none_or(|m| price_micros < m) => {
                        Outcome::Replace {
                            option,
                            price_micros,
                        }
                    }
                    _ => Outcome::Infeasible,
                },
                Ok(Verdict::Infeasible) | Err(_) => Outcome::Infeasible,
            };
        }
        let (left, overhead) = self.leftovers(nodes);
        if left.is_empty() {
            return Outcome::Delete;
        }
        match self.fitting_options(&left, overhead, allow_spot).next() {
            Some((oi, price)) if max_price.is_none_or(|max| price < max) => Outcome::Replace {
                option: oi,
                price_micros: price,
            },
            _ => Outcome::Infeasible,
        }
    }

    /// Options of the first pool (in weight order) that can take `pods`, cheapest first.
    fn fitting_options<'s>(
        &'s self,
        pods: &'s [Mover],
        overhead: Resources,
        allow_spot: bool,
    ) -> impl Iterator<Item = (usize, u64)> + 's {
        let need = pods.iter().fold(overhead, |acc, m| acc.add(&m.requests));
        let fits = move |oi: usize, o: &LaunchOption| {
            (allow_spot || o.capacity_type != "spot")
                && need.fits_in(&o.allocatable)
                && pods
                    .iter()
                    .all(|m| self.option_compat[m.class as usize][oi])
        };
        // The scheduler takes the first pool by weight that can hold the pods.
        let pool = self.pool_order.iter().copied().find(|&p| {
            self.options
                .iter()
                .enumerate()
                .any(|(oi, o)| o.pool == p && fits(oi, o))
        });
        self.options
            .iter()
            .enumerate()
            .filter(move |(oi, o)| Some(o.pool) == pool && fits(*oi, o))
            .map(|(oi, o)| (oi, o.price_micros))
    }

    /// Instance types a replacement for `nodes` may launch as: every type of the chosen pool that
    /// holds the pods left over and costs less than `max_price`, cheapest first (launch
    /// flexibility across types and zones).
    pub fn replacement_types(
        &mut self,
        nodes: &[usize],
        max_price: Option<u64>,
        allow_spot: bool,
    ) -> Vec<String> {
        // The launch options that hold the pods, cheapest first: the solver's new NodeClaim's
        // for complex pods, else the fast check's.
        let options: Vec<(usize, u64)> = match self.solved(nodes) {
            Some(solved) => match solved.as_deref().map(|s| &s.verdict) {
                Ok(Verdict::Replace(draft)) => self.draft_options(draft, allow_spot).collect(),
                _ => Vec::new(),
            },
            None => {
                let (left, overhead) = self.leftovers(nodes);
                self.fitting_options(&left, overhead, allow_spot).collect()
            }
        };
        let mut names: Vec<String> = Vec::new();
        for (oi, price) in options {
            if max_price.is_some_and(|m| price >= m) {
                break;
            }
            let name = &self.snapshot.instance_types[self.options[oi].instance_type].name;
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::model::NodeState;
    use crate::scheduling::{InstanceType, Offering};

    const GI: u64 = 1 << 30;

    fn it(name: &str, cpu: u64, mem_gi: u64, price: u64) -> InstanceType {
        let mut t = InstanceType::new(
            name,
            Resources::new(cpu, mem_gi * GI, 110),
            vec![Offering {
                zone: "a".into(),
                capacity_type: "on-demand".into(),
                price_micros: price,
                available: true,
            }],
        );
        t.overhead = Default::default();
        t
    }

    fn snapshot(nodes: Vec<NodeState>) -> ClusterSnapshot {
        ClusterSnapshot {
            now: "2026-12-03T12:00:00Z".parse().unwrap(),
            pools: vec![PoolState::new("default")],
            nodes,
            instance_types: vec![it("small", 2000, 4, 100), it("large", 8000, 32, 400)],
            pending_pods: vec![],
            daemonsets: vec![],
            fingerprint: 0,
        }
    }

    fn node(name: &str, cpu: u64, price: u64, pods: &[u64]) -> NodeState {
        let mut n = NodeState::new(
            name,
            "default",
            "x",
            price,
            Resources::new(cpu, 64 * GI, 110),
            "2026-12-01T00:00:00Z".parse().unwrap(),
        );
        n.pods = pods
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                PodState::new("default", &format!("{name}-{i}"), Resources::new(c, GI, 1))
            })
            .collect();
        n
    }

    #[test]
    fn delete_when_pods_fit_on_remaining_nodes() {
        let s = snapshot(vec![
            node("a", 4000, 400, &[1000, 1000]),
            node("b", 4000, 400, &[1000]),
        ]);
        let mut sim = Simulator::new(&s);
        assert_eq!(sim.simulate(&[1], Some(400), true), Outcome::Delete);
        // Both cannot go: nothing remains and one 3-cpu node is cheaper than two.
        assert!(matches!(
            sim.simulate(&[0, 1], Some(800), true),
            Outcome::Replace {
                price_micros: 400,
                ..
            }
        ));
        // Simulations do not leak into each other.
        assert_eq!(sim.simulate(&[1], Some(400), true), Outcome::Delete);
    }

    #[test]
    fn replace_only_when_cheaper() {
        let s = snapshot(vec![
            node("a", 4000, 400, &[3500]),
            node("b", 4000, 400, &[1000]),
        ]);
        let mut sim = Simulator::new(&s);
        // b's pod fits on a (500m left)? No: 1000 > 500. A small node (2 cpu, 100) is cheaper.
        assert!(matches!(
            sim.simulate(&[1], Some(400), true),
            Outcome::Replace {
                price_micros: 100,
                ..
            }
        ));
        // a's 3.5-cpu pod needs a large node, which costs the same: no saving.
        assert_eq!(sim.simulate(&[0], Some(400), true), Outcome::Infeasible);
        // Drift does not need a saving.
        assert!(matches!(
            sim.simulate(&[0], None, true),
            Outcome::Replace {
                price_micros: 400,
                ..
            }
        ));
    }

    #[test]
    fn taints_selectors_and_unready_nodes_block_destinations() {
        let mut a = node("a", 4000, 400, &[]);
        a.taints.push(Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
        let mut b = node("b", 4000, 400, &[]);
        b.ready = false;
        let mut c = node("c", 4000, 400, &[500]);
        c.pods[0].node_selector.insert("disk".into(), "ssd".into());
        let s = snapshot(vec![a, b, c]);
        let mut sim = Simulator::new(&s);
        // The ssd pod fits nowhere: not on the tainted node, not on the unready one, and no
        // replacement offering carries disk=ssd.
        assert_eq!(sim.simulate(&[2], None, true), Outcome::Infeasible);

        let mut a = node("a", 4000, 400, &[]);
        a.labels.insert("disk".into(), "ssd".into());
        let mut c = node("c", 4000, 400, &[500]);
        c.pods[0].node_selector.insert("disk".into(), "ssd".into());
        c.pods[0].tolerations.push(Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        });
        let s = snapshot(vec![a, c]);
        let mut sim = Simulator::new(&s);
        assert_eq!(sim.simulate(&[1], None, true), Outcome::Delete);
    }

    #[test]
    fn pending_pods_take_room_first() {
        let mut s = snapshot(vec![
            node("a", 4000, 400, &[]),
            node("b", 4000, 400, &[2000]),
        ]);
        s.pending_pods
            .push(PodState::new("default", "p", Resources::new(3000, GI, 1)));
        let mut sim = Simulator::new(&s);
        // a's room goes to the pending pod, so b's pod needs a new node.
        assert!(matches!(
            sim.simulate(&[1], Some(400), true),
            Outcome::Replace { .. }
        ));
    }

    #[test]
    fn pods_of_leaving_nodes_take_room_and_move_with_the_node_holding_it() {
        // c is already leaving; its 3-cpu pod must go somewhere, and only a has room.
        let mut c = node("c", 4000, 400, &[3000]);
        c.deleting = true;
        let s = snapshot(vec![
            node("a", 4000, 400, &[]),
            node("b", 4000, 400, &[2000]),
            c,
        ]);
        let mut sim = Simulator::new(&s);
        assert_eq!(sim.pending_needing_capacity(), 0);
        // a's room is c's pod's, so b's pod needs a new node.
        assert!(matches!(
            sim.simulate(&[1], Some(400), true),
            Outcome::Replace { .. }
        ));
        // a has no pods, but removing it leaves c's pod no room (b has 2 cpu free).
        assert!(matches!(
            sim.simulate(&[0], None, true),
            Outcome::Replace { .. }
        ));
        // Without a, the pod needs a new node: consolidation waits for provisioning.
        let mut s = s.clone();
        s.nodes.remove(0);
        assert_eq!(Simulator::new(&s).pending_needing_capacity(), 1);
    }

    #[test]
    fn daemonset_pods_stay_but_count_on_the_replacement() {
        let mut a = node("a", 8000, 400, &[1500]);
        let mut ds = PodState::new("kube-system", "ds", Resources::new(400, GI, 1));
        ds.daemonset = true;
        a.pods.push(ds);
        let s = snapshot(vec![a]);
        let mut sim = Simulator::new(&s);
        // 1500m + 400m daemon = 1900m fits a small node (2000m).
        assert!(matches!(
            sim.simulate(&[0], Some(400), true),
            Outcome::Replace {
                price_micros: 100,
                ..
            }
        ));
        let names = sim.replacement_types(&[0], Some(400), true);
        assert_eq!(names, vec!["small".to_string()]);
    }

    #[test]
    fn running_pods_anti_affinity_keeps_a_mover_out_of_their_domain() {
        let a = node("a", 4000, 400, &[500]);
        let mut b = node("b", 4000, 400, &[500]);
        // A pod on a keeps b's pod off a's host: the only room left is a new node.
        b.pods[0]
            .kept_out_of
            .push((label::HOSTNAME.into(), "a".into()));
        let s = snapshot(vec![a.clone(), b.clone()]);
        let mut sim = Simulator::new(&s);
        assert!(
            matches!(
                sim.simulate(&[1], Some(400), true),
                Outcome::Replace {
                    price_micros: 100,
                    ..
                }
            ),
            "not a delete onto a"
        );
        // A third node outside the domain takes it.
        let s = snapshot(vec![a.clone(), b.clone(), node("c", 4000, 400, &[500])]);
        let mut sim = Simulator::new(&s);
        assert_eq!(sim.simulate(&[1], Some(400), true), Outcome::Delete);
        // A zone domain keeps the pod off every node in the zone, and off new nodes there.
        let mut b = node("b", 4000, 400, &[500]);
        b.pods[0].kept_out_of.push((label::ZONE.into(), "a".into()));
        let mut a = a;
        a.zone = "a".into();
        let s = snapshot(vec![a, b]);
        let mut sim = Simulator::new(&s);
        assert_eq!(sim.simulate(&[1], None, true), Outcome::Infeasible);
    }
}
