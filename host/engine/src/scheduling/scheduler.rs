//! The solve: place pods first-fit decreasing on existing nodes, then on the new nodes of this
//! pass, then on a new node of the first NodePool (by weight) that can take them.
//!
//! Everything string-shaped is compiled once up front (labels interned, requests parsed, pods
//! grouped into classes), so placing a pod costs integer compares and at most one filter over the
//! node's remaining instance types.

use kk_apis::cached_pod::CachedPod;
use kk_apis::names::label;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use tracing::{debug, warn};

use super::model::{
    ExistingPlacement, NodeClaimDraft, PoolRequirement, SchedulingProblem, SchedulingResult,
    Unschedulable,
};
use super::pod_class::{self, CompileOptions, PodClass};
use super::ranker::{
    self, Candidate, Catalog, CheapestFitRanker, InstanceRanker, OfferingSet, RankRequest,
};
use super::requirements::{self, Requirement, Requirements};
use super::resources::{self, Dim, Resources};
use super::symbols::{Sym, Symbols};
use super::taints::{self, CTaint, Effect};
use super::topology::{GroupKind, GroupRef, Groups, TopoKey};

/// Karpenter's cap on the instance types written into one NodeClaim.
pub const MAX_INSTANCE_TYPES: usize = 600;

/// At most this many zones are modelled (zone sets are 64-bit masks).
const MAX_ZONES: usize = 64;

#[derive(Debug, Clone, Copy)]
pub struct SchedulerOptions {
    pub max_instance_types: usize,
    /// Treat every preference as absent (`PREFERENCE_POLICY=Ignore`).
    pub ignore_preferences: bool,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            max_instance_types: MAX_INSTANCE_TYPES,
            ignore_preferences: false,
        }
    }
}

/// The scheduling simulation; cheap to build, one per ranker.
pub struct Scheduler<'r> {
    ranker: &'r dyn InstanceRanker,
    options: SchedulerOptions,
}

impl<'r> Scheduler<'r> {
    pub fn new(ranker: &'r dyn InstanceRanker, options: SchedulerOptions) -> Self {
        Scheduler { ranker, options }
    }

    pub fn solve(&self, problem: &SchedulingProblem<'_>) -> SchedulingResult {
        let mut solver = Solver::build(problem, self.ranker, self.options);
        solver.run();
        solver.finish()
    }
}

/// Why one placement attempt failed (kept small and `Copy`: it is produced in the hot loop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    Resource(&'static str),
    Taint(CTaint),
    Requirement(Sym),
    Topology(GroupKind, TopoKey),
    NoInstanceType,
    MinValues(Sym),
    Limits,
    Ranker(usize),
}

#[derive(Debug)]
struct CType {
    alloc: Resources,
    capacity: Resources,
    /// Sorted (key, value); includes the instance-type name.
    labels: Vec<(Sym, Sym)>,
    offerings: Vec<COffering>,
}

#[derive(Debug, Clone, Copy)]
struct COffering {
    zone: usize,
    capacity_type: Sym,
    available: bool,
}

#[derive(Debug)]
struct Template {
    pool: usize,
    reqs: Requirements,
    taints: Vec<CTaint>,
    daemon_overhead: Resources,
    /// Instance types compatible with the pool's requirements that can hold the daemonsets.
    types: Vec<u16>,
    zone_mask: u64,
    remaining: Resources,
    nodes_left: u64,
    has_min_values: bool,
}

#[derive(Debug)]
struct Node {
    template: Option<usize>,
    existing: Option<usize>,
    reqs: Requirements,
    labels: Vec<(Sym, Sym)>,
    taints: Vec<CTaint>,
    zone_mask: u64,
    used: Resources,
    /// Allocatable of an existing node; for a new node the component-wise max over its types.
    cap: Resources,
    types: Vec<u16>,
    /// Largest capacity among the new node's types, held against the pool's limits.
    reserved: Resources,
    /// Per hostname group: matching pods, then anti-affinity owners.
    host: Vec<u32>,
    pods: Vec<u32>,
}

struct PendingPod {
    index: usize,
    class: usize,
    requests: Resources,
    /// Index of the variant to try first (earlier ones failed).
    level: usize,
}

type RankKey = (usize, usize, usize, u64);

struct Solver<'a> {
    problem: &'a SchedulingProblem<'a>,
    ranker: &'a dyn InstanceRanker,
    /// The problem's instance types with their fingerprint, made on the first ranking.
    catalog: std::cell::OnceCell<Catalog<'a>>,
    options: SchedulerOptions,
    syms: Symbols,
    /// Keys a new node has even when no requirement names them (sorted).
    well_known: Vec<Sym>,
    zone_key: Sym,
    ct_key: Sym,
    /// `kubernetes.io/hostname`, and the value a new node has in the simulation (as upstream's
    /// placeholder hostname): no pod that names a real host lands on a new node. It is dropped
    /// from the NodeClaim (the API refuses the restricted label).
    host_key: Sym,
    host_placeholder: Sym,
    types: Vec<CType>,
    zones: Vec<Sym>,
    reachable_zones: u64,
    templates: Vec<Template>,
    groups: Groups,
    classes: Vec<PodClass>,
    zone_counts: Vec<u32>,
    zone_owners: Vec<u32>,
    totals: Vec<u32>,
    nodes: Vec<Node>,
    open: Vec<usize>,
    min_request: Resources,
    pending: Vec<PendingPod>,
    unschedulable: Vec<Unschedulable>,
    rank_cache: HashMap<RankKey, Result<Rc<[u16]>, Fail>>,
    rank_errors: Vec<String>,
    ranker_calls: usize,
    /// Why the ranker failed, for each call that fell back to the native ranking.
    ranker_fallbacks: Vec<String>,
    pools_without_types: Vec<String>,
    scratch: Vec<u16>,
    scratch_syms: Vec<Sym>,
}

fn bit(z: usize) -> u64 {
    if z < MAX_ZONES { 1u64 << z } else { 0 }
}

fn zone_index(zones: &mut Vec<Sym>, z: Sym) -> usize {
    match zones.iter().position(|&x| x == z) {
        Some(i) => i,
        None => {
            zones.push(z);
            zones.len() - 1
        }
    }
}

/// A coarse shape class (powers of two of cpu and memory, and the GPU count): pods of one class get one ranking.
fn shape_bucket(r: &Resources) -> (u64, Resources) {
    let floor = |v: u64| {
        if v == 0 {
            0
        } else {
            1u64 << (63 - v.leading_zeros())
        }
    };
    let cpu = floor(r.get(Dim::CpuMillis));
    let mem = floor(r.get(Dim::MemoryBytes));
    let gpu = r.get(Dim::Gpus);
    let key = (u64::from(cpu.trailing_zeros()) << 16)
        | (u64::from(mem.trailing_zeros()) << 8)
        | gpu.min(255);
    let shape = Resources::new(cpu, mem, 1).with(Dim::Gpus, gpu);
    (key, shape)
}

impl<'a> Solver<'a> {
    fn build(
        problem: &'a SchedulingProblem<'a>,
        ranker: &'a dyn InstanceRanker,
        options: SchedulerOptions,
    ) -> Self {
        let mut syms = Symbols::new();
        let zone_key = syms.intern(label::ZONE);
        let ct_key = syms.intern(label::CAPACITY_TYPE);
        let host_key = syms.intern(label::HOSTNAME);
        let host_placeholder = syms.intern("hostname-placeholder.karpenter.kakaocloud.com");
        let it_key = syms.intern(label::INSTANCE_TYPE);
        let pool_key = syms.intern(label::NODEPOOL);
        let mut well_known: Vec<Sym> = label::WELL_KNOWN.iter().map(|k| syms.intern(k)).collect();

        // The catalog.
        let mut zones: Vec<Sym> = Vec::new();
        let mut types = Vec::with_capacity(problem.instance_types.len());
        for it in problem.instance_types.iter().take(usize::from(u16::MAX)) {
            let mut labels: Vec<(Sym, Sym)> = it
                .labels
                .iter()
                .map(|(k, v)| (syms.intern(requirements::normalize_key(k)), syms.intern(v)))
                .collect();
            labels.push((it_key, syms.intern(&it.name)));
            labels.sort_unstable();
            labels.dedup_by_key(|(k, _)| *k);
            well_known.extend(labels.iter().map(|(k, _)| *k));
            let offerings = it
                .offerings
                .iter()
                .map(|o| {
                    let z = syms.intern(&o.zone);
                    COffering {
                        zone: zone_index(&mut zones, z),
                        capacity_type: syms.intern(&o.capacity_type),
                        available: o.available,
                    }
                })
                .collect();
            types.push(CType {
                alloc: it.allocatable(),
                capacity: it.capacity,
                labels,
                offerings,
            });
        }
        well_known.sort_unstable();
        well_known.dedup();

        let mut solver = Solver {
            problem,
            ranker,
            catalog: std::cell::OnceCell::new(),
            options,
            syms,
            well_known,
            zone_key,
            host_key,
            host_placeholder,
            ct_key,
            types,
            zones,
            reachable_zones: 0,
            templates: Vec::new(),
            groups: Groups::default(),
            classes: Vec::new(),
            zone_counts: Vec::new(),
            zone_owners: Vec::new(),
            totals: Vec::new(),
            nodes: Vec::new(),
            open: Vec::new(),
            min_request: Resources([u64::MAX; 5]),
            pending: Vec::new(),
            unschedulable: Vec::new(),
            rank_cache: HashMap::new(),
            rank_errors: Vec::new(),
            ranker_calls: 0,
            ranker_fallbacks: Vec::new(),
            pools_without_types: Vec::new(),
            scratch: Vec::new(),
            scratch_syms: Vec::new(),
        };
        // Zones of existing nodes are domains too.
        let existing_zones: Vec<Option<usize>> = problem
            .existing_nodes
            .iter()
            .map(|n| {
                n.labels
                    .get(label::ZONE)
                    .or_else(|| n.labels.get("failure-domain.beta.kubernetes.io/zone"))
                    .map(|z| {
                        let z = solver.syms.intern(z);
                        zone_index(&mut solver.zones, z)
                    })
            })
            .collect();
        if solver.zones.len() > MAX_ZONES {
            warn!(
                zones = solver.zones.len(),
                max = MAX_ZONES,
                "more zones than the solver models; the rest are ignored"
            );
        }
        solver.build_templates(pool_key);
        solver.reachable_zones = solver.templates.iter().fold(0, |m, t| m | t.zone_mask)
            | existing_zones.iter().flatten().fold(0, |m, &z| m | bit(z));
        solver.build_classes(&existing_zones);
        solver
    }

    fn allow_undefined(well_known: &[Sym]) -> impl Fn(Sym) -> bool + '_ {
        move |k| well_known.binary_search(&k).is_ok()
    }

    /// Whether an instance type can be launched under `reqs` in one of `zones`.
    fn type_ok(&self, t: &CType, reqs: &Requirements, zones: u64) -> bool {
        for &(k, v) in &t.labels {
            if let Some(r) = reqs.get(k)
                && !r.has(&self.syms, v)
            {
                return false;
            }
        }
        let ct = reqs.get(self.ct_key);
        t.offerings.iter().any(|o| {
            o.available
                && zones & bit(o.zone) != 0
                && ct.is_none_or(|r| r.has(&self.syms, o.capacity_type))
        })
    }

    fn zone_mask_of(&self, reqs: &Requirements) -> u64 {
        match reqs.get(self.zone_key) {
            None => u64::MAX,
            Some(r) => self
                .zones
                .iter()
                .enumerate()
                .filter(|(_, z)| r.has(&self.syms, **z))
                .fold(0, |m, (i, _)| m | bit(i)),
        }
    }

    fn build_templates(&mut self, pool_key: Sym) {
        let problem = self.problem;
        let mut order: Vec<usize> = (0..problem.node_pools.len()).collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&problem.node_pools[a], &problem.node_pools[b]);
            pb.weight
                .cmp(&pa.weight)
                .then_with(|| pa.name.cmp(&pb.name))
        });
        for pi in order {
            let pool = &problem.node_pools[pi];
            let mut reqs = Requirements::new();
            let mut invalid = None;
            for pr in &pool.requirements {
                match Requirement::from_selector(&mut self.syms, &pr.requirement, pr.min_values) {
                    Ok(r) => reqs.add(&self.syms, r),
                    Err(e) => invalid = Some(e),
                }
            }
            if let Some(e) = invalid {
                warn!(node_pool = %pool.name, error = %e, "skipping NodePool with an invalid requirement");
                continue;
            }
            for (k, v) in &pool.labels {
                let key = self.syms.intern(requirements::normalize_key(k));
                let value = self.syms.intern(v);
                reqs.add(&self.syms, Requirement::in_values(key, vec![value]));
            }
            let name = self.syms.intern(&pool.name);
            reqs.add(&self.syms, Requirement::in_values(pool_key, vec![name]));
            let taints: Vec<CTaint> = pool
                .taints
                .iter()
                .filter_map(|t| CTaint::compile(&mut self.syms, t))
                .collect();
            let daemon_overhead = self.daemon_overhead(&reqs, &taints);
            let mut limits = Resources([u64::MAX; 5]);
            let mut nodes_limit = u64::MAX;
            for (k, q) in &pool.limits {
                let Some(milli) = resources::parse_milli(&q.0) else {
                    warn!(node_pool = %pool.name, resource = %k, "ignoring an unparsable limit");
                    continue;
                };
                let whole = u64::try_from(milli.div_ceil(1000)).unwrap_or(u64::MAX);
                match k.as_str() {
                    resources::CPU => {
                        limits.0[Dim::CpuMillis as usize] = u64::try_from(milli).unwrap_or(u64::MAX)
                    }
                    resources::MEMORY => limits.0[Dim::MemoryBytes as usize] = whole,
                    resources::PODS => limits.0[Dim::Pods as usize] = whole,
                    resources::GPU => limits.0[Dim::Gpus as usize] = whole,
                    resources::EPHEMERAL_STORAGE => limits.0[Dim::EphemeralBytes as usize] = whole,
                    "nodes" => nodes_limit = whole,
                    other => {
                        debug!(node_pool = %pool.name, resource = other, "limit on an untracked resource")
                    }
                }
            }
            let remaining = limits.saturating_sub(&pool.in_use);
            let all_zones = u64::MAX;
            let mut zone_mask = 0;
            let mut tys = Vec::new();
            for (i, t) in self.types.iter().enumerate() {
                if daemon_overhead.fits_in(&t.alloc) && self.type_ok(t, &reqs, all_zones) {
                    tys.push(u16::try_from(i).unwrap_or(u16::MAX));
                    let ct = reqs.get(self.ct_key);
                    let zr = reqs.get(self.zone_key);
                    for o in &t.offerings {
                        if o.available
                            && ct.is_none_or(|r| r.has(&self.syms, o.capacity_type))
                            && zr.is_none_or(|r| r.has(&self.syms, self.zones[o.zone]))
                        {
                            zone_mask |= bit(o.zone);
                        }
                    }
                }
            }
            let has_min_values = reqs.iter().any(|r| r.min_values.is_some());
            if tys.is_empty() {
                self.pools_without_types.push(pool.name.clone());
            }
            self.templates.push(Template {
                pool: pi,
                reqs,
                taints,
                daemon_overhead,
                types: tys,
                zone_mask,
                remaining,
                nodes_left: nodes_limit.saturating_sub(pool.nodes_in_use),
                has_min_values,
            });
        }
    }

    /// Requests of the daemonsets that would run on a node of this template.
    fn daemon_overhead(&mut self, reqs: &Requirements, taints: &[CTaint]) -> Resources {
        let mut total = Resources::ZERO;
        for ds in self.problem.daemonsets {
            let Some(spec) = ds.spec.as_ref() else {
                continue;
            };
            let tols: Vec<_> = spec
                .tolerations
                .iter()
                .flatten()
                .map(|t| taints::CToleration::compile(&mut self.syms, t))
                .collect();
            if taints::tolerates_all(&tols, taints).is_err() {
                continue;
            }
            let mut ds_reqs = requirements::node_selector(&mut self.syms, spec);
            let term = spec
                .affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|n| {
                    n.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .and_then(|s| s.node_selector_terms.first());
            if let Some(term) = term {
                match requirements::compile_term(&mut self.syms, term) {
                    Ok(r) => ds_reqs = ds_reqs.intersect(&self.syms, &r),
                    Err(_) => continue,
                }
            }
            if reqs
                .compatible(
                    &self.syms,
                    &ds_reqs,
                    Self::allow_undefined(&self.well_known),
                )
                .is_err()
            {
                continue;
            }
            if let Ok(r) = resources::pod_requests(spec) {
                total = total.add(&r);
            }
        }
        total
    }

    fn build_classes(&mut self, existing_zones: &[Option<usize>]) {
        let problem = self.problem;
        let opts = CompileOptions {
            ignore_preferences: self.options.ignore_preferences,
            relax_prefer_no_schedule: self.templates.iter().any(|t| {
                t.taints
                    .iter()
                    .any(|x| x.effect == Effect::PreferNoSchedule)
            }),
        };
        let mut by_key: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut buf = Vec::new();
        let mut pending = Vec::with_capacity(problem.pods.len());
        for (index, pod) in problem.pods.iter().enumerate() {
            let Some(spec) = pod.spec.as_ref() else {
                self.unschedulable.push(Unschedulable {
                    pod: index,
                    reason: "pod has no spec".into(),
                });
                continue;
            };
            let requests = match resources::pod_requests(spec) {
                Ok(r) => r,
                Err(e) => {
                    self.unschedulable.push(Unschedulable {
                        pod: index,
                        reason: e.to_string(),
                    });
                    continue;
                }
            };
            pod_class::class_key(pod, &mut buf);
            let class = match by_key.get(&buf) {
                Some(&c) => c,
                None => match pod_class::compile(&mut self.syms, &mut self.groups, pod, opts) {
                    Ok(c) => {
                        self.classes.push(c);
                        by_key.insert(buf.clone(), self.classes.len() - 1);
                        self.classes.len() - 1
                    }
                    Err(e) => {
                        self.unschedulable.push(Unschedulable {
                            pod: index,
                            reason: e.to_string(),
                        });
                        continue;
                    }
                },
            };
            self.min_request = self.min_request.min(&requests);
            pending.push(PendingPod {
                index,
                class,
                requests,
                level: 0,
            });
        }
        // Running pods: their anti-affinity keeps new pods away, their labels count.
        #[allow(clippy::type_complexity)]
        // (node, namespace, labels, anti-affinity groups, requests)
        let mut running: Vec<(usize, Sym, Vec<(Sym, Sym)>, Vec<GroupRef>, Resources)> = Vec::new();
        for (ni, node) in problem.existing_nodes.iter().enumerate() {
            for pod in &node.pods {
                let owned = pod_class::running_pod_groups(&mut self.syms, &mut self.groups, pod);
                let (ns, labels) = pod_class::identity(&mut self.syms, pod);
                let req = pod
                    .spec
                    .as_ref()
                    .and_then(|s| resources::pod_requests(s).ok())
                    .unwrap_or_default();
                running.push((ni, ns, labels, owned, req));
            }
        }
        for i in 0..self.classes.len() {
            pod_class::link(&self.syms, &self.groups, &mut self.classes[i]);
            for v in 0..self.classes[i].variants.len() {
                let m = self.zone_mask_of(&self.classes[i].variants[v].reqs);
                self.classes[i].variants[v].zone_mask = m;
            }
        }
        let nz = self.zones.len().min(MAX_ZONES);
        self.zone_counts = vec![0; self.groups.zone_groups * nz.max(1)];
        self.zone_owners = vec![0; self.groups.zone_groups * nz.max(1)];
        self.totals = vec![0; self.groups.groups.len()];
        let hg = self.groups.host_groups;

        // Existing nodes.
        for (ni, n) in problem.existing_nodes.iter().enumerate() {
            let mut labels: Vec<(Sym, Sym)> = n
                .labels
                .iter()
                .map(|(k, v)| {
                    (
                        self.syms.intern(requirements::normalize_key(k)),
                        self.syms.intern(v),
                    )
                })
                .collect();
            labels.sort_unstable();
            labels.dedup_by_key(|(k, _)| *k);
            let taints = n
                .taints
                .iter()
                .filter_map(|t| CTaint::compile(&mut self.syms, t))
                .collect();
            self.nodes.push(Node {
                template: None,
                existing: Some(ni),
                reqs: Requirements::new(),
                labels,
                taints,
                zone_mask: existing_zones[ni].map_or(0, bit),
                used: Resources::ZERO,
                cap: n.allocatable,
                types: Vec::new(),
                reserved: Resources::ZERO,
                host: vec![0; 2 * hg],
                pods: Vec::new(),
            });
            self.open.push(ni);
        }
        for (ni, ns, labels, owned, req) in running {
            let node = &mut self.nodes[ni];
            node.used = node.used.add(&req);
            let zone = existing_zones[ni].filter(|&z| z < MAX_ZONES);
            for r in self.groups.refs() {
                let g = self.groups.get(r);
                if !g.selects(&self.syms, ns, &labels) {
                    continue;
                }
                self.totals[r.id] += 1;
                match g.key {
                    TopoKey::Hostname => node.host[r.slot] += 1,
                    TopoKey::Zone => {
                        if let Some(z) = zone {
                            self.zone_counts[r.slot * nz + z] += 1;
                        }
                    }
                }
            }
            for r in owned {
                match self.groups.get(r).key {
                    TopoKey::Hostname => node.host[hg + r.slot] += 1,
                    TopoKey::Zone => {
                        if let Some(z) = zone {
                            self.zone_owners[r.slot * nz + z] += 1;
                        }
                    }
                }
            }
        }

        // First-fit decreasing: cpu, then memory, then input order.
        pending.sort_by(|a, b| {
            b.requests
                .get(Dim::CpuMillis)
                .cmp(&a.requests.get(Dim::CpuMillis))
                .then(
                    b.requests
                        .get(Dim::MemoryBytes)
                        .cmp(&a.requests.get(Dim::MemoryBytes)),
                )
                .then(a.index.cmp(&b.index))
        });
        self.pending = pending;
    }

    fn run(&mut self) {
        let mut queue = std::mem::take(&mut self.pending);
        let mut failures: Vec<(PendingPod, Vec<(usize, Fail)>)> = Vec::new();
        loop {
            let mut progressed = false;
            for mut p in queue.drain(..) {
                match self.place(&mut p) {
                    Ok(()) => progressed = true,
                    Err(why) => failures.push((p, why)),
                }
            }
            if !progressed || failures.is_empty() {
                break;
            }
            queue.extend(failures.drain(..).map(|(p, _)| p));
        }
        for (p, why) in failures {
            let reason = self.explain(&why);
            debug!(pod = p.index, %reason, "pod cannot be scheduled");
            self.unschedulable.push(Unschedulable {
                pod: p.index,
                reason,
            });
        }
    }

    /// Tries every variant from the pod's current level; on failure returns the last variant's reasons per template.
    fn place(&mut self, p: &mut PendingPod) -> Result<(), Vec<(usize, Fail)>> {
        let nvariants = self.classes[p.class].variants.len();
        let mut last = Vec::new();
        for vi in p.level..nvariants {
            match self.place_variant(p, vi) {
                Ok(()) => {
                    p.level = vi;
                    return Ok(());
                }
                Err(why) => last = why,
            }
        }
        p.level = nvariants - 1;
        Err(last)
    }

    fn place_variant(&mut self, p: &PendingPod, vi: usize) -> Result<(), Vec<(usize, Fail)>> {
        let mut oi = 0;
        while oi < self.open.len() {
            let n = self.open[oi];
            if self.try_add(n, p, vi).is_ok() {
                self.after_add(oi);
                return Ok(());
            }
            oi += 1;
        }
        let mut why = Vec::new();
        for t in 0..self.templates.len() {
            match self.open_node(t, p, vi) {
                Ok(()) => {
                    let oi = self.open.len() - 1;
                    self.after_add(oi);
                    return Ok(());
                }
                Err(f) => why.push((t, f)),
            }
        }
        Err(why)
    }

    /// Drops a node from the open list once no pending pod could still fit it.
    fn after_add(&mut self, oi: usize) {
        let n = &self.nodes[self.open[oi]];
        if !n.used.add(&self.min_request).fits_in(&n.cap) {
            self.open.remove(oi);
        }
    }

    fn ranked(&mut self, t: usize, p: &PendingPod, vi: usize) -> Result<Rc<[u16]>, Fail> {
        let (bucket, shape) = shape_bucket(&p.requests);
        let key = (t, p.class, vi, bucket);
        if let Some(r) = self.rank_cache.get(&key) {
            return r.clone();
        }
        let r = self.compute_ranking(t, p.class, vi, shape);
        self.rank_cache.insert(key, r.clone());
        r
    }

    fn compute_ranking(
        &mut self,
        t: usize,
        ci: usize,
        vi: usize,
        shape: Resources,
    ) -> Result<Rc<[u16]>, Fail> {
        let tpl = &self.templates[t];
        let v = &self.classes[ci].variants[vi];
        taints::tolerates_all(&v.tolerations, &tpl.taints).map_err(Fail::Taint)?;
        tpl.reqs
            .compatible(&self.syms, &v.reqs, Self::allow_undefined(&self.well_known))
            .map_err(Fail::Requirement)?;
        let reqs = tpl.reqs.intersect(&self.syms, &v.reqs);
        let zones = tpl.zone_mask & v.zone_mask;
        let ids: Vec<u16> = tpl
            .types
            .iter()
            .copied()
            .filter(|&i| self.type_ok(&self.types[usize::from(i)], &reqs, zones))
            .collect();
        if ids.is_empty() {
            return Err(Fail::NoInstanceType);
        }
        let catalog = *self
            .catalog
            .get_or_init(|| Catalog::new(self.problem.instance_types));
        let ct = reqs.get(self.ct_key);
        let candidates: Vec<Candidate<'_>> = ids
            .iter()
            .map(|&i| {
                let index = usize::from(i);
                let it = &catalog.types[index];
                let ctype = &self.types[index];
                // The scheduler's offerings are the catalog type's, in the same order.
                let offered = OfferingSet::from_flags(ctype.offerings.iter().map(|c| {
                    c.available
                        && zones & bit(c.zone) != 0
                        && ct.is_none_or(|r| r.has(&self.syms, c.capacity_type))
                }));
                Candidate {
                    index,
                    instance_type: it,
                    offered,
                }
            })
            .collect();
        let pool_name = &self.problem.node_pools[tpl.pool].name;
        let request = RankRequest {
            node_pool: pool_name,
            requests: shape.add(&tpl.daemon_overhead),
            catalog,
            candidates: &candidates,
        };
        self.ranker_calls += 1;
        let order = self.ranker.rank(&request).and_then(|order| {
            ranker::validate(self.ranker.name(), &order, candidates.len()).map(|()| order)
        });
        // A ranker that fails (a plugin trapping, timing out or answering nonsense) never stops
        // provisioning: this call falls back to the native ranking, and the result says so.
        let order = order.or_else(|e| {
            warn!(node_pool = %pool_name, ranker = self.ranker.name(), error = %e,
                "instance ranking failed; ranking natively for this call");
            self.ranker_fallbacks
                .push(format!("nodepool {pool_name}: {e}"));
            CheapestFitRanker.rank(&request)
        });
        match order {
            Ok(order) => Ok(order.into_iter().map(|i| ids[i]).collect()),
            Err(e) => {
                self.rank_errors.push(e.to_string());
                Err(Fail::Ranker(self.rank_errors.len() - 1))
            }
        }
    }

    fn open_node(&mut self, t: usize, p: &PendingPod, vi: usize) -> Result<(), Fail> {
        if self.templates[t].nodes_left == 0 {
            return Err(Fail::Limits);
        }
        let ranked = self.ranked(t, p, vi)?;
        let tpl = &self.templates[t];
        let mut cap = Resources::ZERO;
        let types: Vec<u16> = ranked
            .iter()
            .copied()
            .filter(|&i| {
                let ct = &self.types[usize::from(i)];
                ct.capacity.fits_in(&tpl.remaining)
            })
            .inspect(|&i| cap = cap.max(&self.types[usize::from(i)].alloc))
            .collect();
        if types.is_empty() {
            return Err(Fail::Limits);
        }
        let mut reqs = tpl.reqs.clone();
        reqs.add(
            &self.syms,
            Requirement::in_values(self.host_key, vec![self.host_placeholder]),
        );
        let node = Node {
            template: Some(t),
            existing: None,
            reqs,
            labels: Vec::new(),
            taints: Vec::new(),
            zone_mask: tpl.zone_mask,
            used: tpl.daemon_overhead,
            cap,
            types,
            reserved: Resources::ZERO,
            host: vec![0; 2 * self.groups.host_groups],
            pods: Vec::new(),
        };
        self.nodes.push(node);
        let n = self.nodes.len() - 1;
        match self.try_add(n, p, vi) {
            Ok(()) => {
                self.templates[t].nodes_left -= 1;
                self.open.push(n);
                Ok(())
            }
            Err(f) => {
                self.nodes.pop();
                Err(f)
            }
        }
    }

    /// Zones of `mask` where the variant's zone constraints allow the pod.
    fn zone_filter(&self, class: &PodClass, vi: usize, mut allowed: u64) -> u64 {
        let v = &class.variants[vi];
        let nz = self.zones.len().min(MAX_ZONES);
        for o in v.owned.iter().filter(|o| o.key == TopoKey::Zone) {
            let counts = &self.zone_counts[o.group.slot * nz..(o.group.slot + 1) * nz];
            match o.kind {
                GroupKind::Spread {
                    max_skew,
                    min_domains,
                } => {
                    let eligible = v.zone_mask & self.reachable_zones;
                    let domains = eligible.count_ones();
                    let min = if domains < min_domains {
                        0
                    } else {
                        (0..nz)
                            .filter(|&z| eligible & bit(z) != 0)
                            .map(|z| counts[z])
                            .min()
                            .unwrap_or(0)
                    };
                    let own = u32::from(o.self_match);
                    for (z, &c) in counts.iter().enumerate() {
                        if (c + own).saturating_sub(min) > max_skew {
                            allowed &= !bit(z);
                        }
                    }
                }
                GroupKind::AntiAffinity => {
                    for (z, &c) in counts.iter().enumerate() {
                        if c > 0 {
                            allowed &= !bit(z);
                        }
                    }
                }
                GroupKind::Affinity => {
                    if !(self.totals[o.group.id] == 0 && o.self_match) {
                        for (z, &c) in counts.iter().enumerate() {
                            if c == 0 {
                                allowed &= !bit(z);
                            }
                        }
                    }
                }
            }
        }
        for g in &class.inverse_zone {
            let owners = &self.zone_owners[g.slot * nz..(g.slot + 1) * nz];
            for (z, &c) in owners.iter().enumerate() {
                if c > 0 {
                    allowed &= !bit(z);
                }
            }
        }
        allowed
    }

    fn host_check(&self, node: &Node, class: &PodClass, vi: usize) -> Result<(), Fail> {
        let v = &class.variants[vi];
        let hg = self.groups.host_groups;
        for o in v.owned.iter().filter(|o| o.key == TopoKey::Hostname) {
            let c = node.host[o.group.slot];
            let ok = match o.kind {
                // A fresh node is always a domain with zero pods, so the minimum is 0.
                GroupKind::Spread { max_skew, .. } => c + u32::from(o.self_match) <= max_skew,
                GroupKind::AntiAffinity => c == 0,
                GroupKind::Affinity => c > 0 || (self.totals[o.group.id] == 0 && o.self_match),
            };
            if !ok {
                return Err(Fail::Topology(o.kind, TopoKey::Hostname));
            }
        }
        for g in &class.inverse_host {
            if node.host[hg + g.slot] > 0 {
                return Err(Fail::Topology(GroupKind::AntiAffinity, TopoKey::Hostname));
            }
        }
        Ok(())
    }

    /// Zones to try for a node, best first: the emptiest domain of the pod's first zone group.
    fn zone_choices(
        &self,
        class: &PodClass,
        vi: usize,
        allowed: u64,
        out: &mut [usize; MAX_ZONES],
    ) -> usize {
        let nz = self.zones.len().min(MAX_ZONES);
        let v = &class.variants[vi];
        let guide = v
            .owned
            .iter()
            .find(|o| o.key == TopoKey::Zone)
            .map(|o| o.group)
            .or_else(|| class.counted_zone.first().copied());
        let mut k = 0;
        for z in 0..nz {
            if allowed & bit(z) != 0 {
                out[k] = z;
                k += 1;
            }
        }
        if let Some(g) = guide {
            let counts = &self.zone_counts[g.slot * nz..(g.slot + 1) * nz];
            out[..k].sort_by_key(|&z| (counts[z], z));
        }
        k
    }

    fn min_values_ok(&mut self, reqs: &Requirements, types: &[u16]) -> Result<(), Fail> {
        for r in reqs.iter() {
            let Some(min) = r.min_values else { continue };
            self.scratch_syms.clear();
            for &i in types {
                let labels = &self.types[usize::from(i)].labels;
                if let Ok(j) = labels.binary_search_by(|(k, _)| k.cmp(&r.key)) {
                    self.scratch_syms.push(labels[j].1);
                }
            }
            self.scratch_syms.sort_unstable();
            self.scratch_syms.dedup();
            if self.scratch_syms.len() < min as usize {
                return Err(Fail::MinValues(r.key));
            }
        }
        Ok(())
    }

    fn try_add(&mut self, n: usize, p: &PendingPod, vi: usize) -> Result<(), Fail> {
        let class = &self.classes[p.class];
        let v = &class.variants[vi];
        let node = &self.nodes[n];
        let used = node.used.add(&p.requests);
        if !used.fits_in(&node.cap) {
            return Err(Fail::Resource(
                used.first_exceeding(&node.cap).unwrap_or(resources::CPU),
            ));
        }
        let taints = match node.template {
            Some(t) => &self.templates[t].taints,
            None => &node.taints,
        };
        taints::tolerates_all(&v.tolerations, taints).map_err(Fail::Taint)?;
        let is_new = node.template.is_some();
        if !v.reqs.is_empty() {
            if is_new {
                node.reqs
                    .compatible(&self.syms, &v.reqs, Self::allow_undefined(&self.well_known))
                    .map_err(Fail::Requirement)?;
            } else {
                v.reqs
                    .matches_labels(&self.syms, &node.labels)
                    .map_err(Fail::Requirement)?;
            }
        }
        if class.host_sensitive(v) {
            self.host_check(node, class, vi)?;
        }
        let zone_constrained = v.owns_zone || !class.inverse_zone.is_empty();
        let mask = if is_new {
            node.zone_mask & v.zone_mask
        } else {
            node.zone_mask
        };
        let allowed = if class.zone_sensitive(v) {
            self.zone_filter(class, vi, mask)
        } else {
            mask
        };
        if (is_new || zone_constrained) && allowed == 0 {
            return Err(Fail::Topology(
                v.owned
                    .iter()
                    .find(|o| o.key == TopoKey::Zone)
                    .map_or(GroupKind::AntiAffinity, |o| o.kind),
                TopoKey::Zone,
            ));
        }

        if is_new {
            // GPU flavors are for GPU pods: a node opened without GPUs never becomes one (its
            // pods would hold an expensive node), and a GPU node takes no GPU-less pods.
            let wants_gpu = used.get(Dim::Gpus) > 0;
            let node_has_gpu_pods = node.used.get(Dim::Gpus) > 0;
            let pod_wants_gpu = p.requests.get(Dim::Gpus) > 0;
            if !node.pods.is_empty() && pod_wants_gpu != node_has_gpu_pods {
                return Err(Fail::Resource(resources::GPU));
            }
            let t = node.template.unwrap_or_default();
            let new_reqs = (!v.reqs.is_empty()).then(|| node.reqs.intersect(&self.syms, &v.reqs));
            let mut choices = [0usize; MAX_ZONES];
            let pin = class.zone_sensitive(v) && allowed.count_ones() > 1;
            let k = if pin {
                self.zone_choices(class, vi, allowed, &mut choices)
            } else {
                0
            };
            let masks: Vec<u64> = if pin {
                choices[..k].iter().map(|&z| bit(z)).collect()
            } else {
                vec![allowed]
            };
            let mut fail = Fail::NoInstanceType;
            for zmask in masks {
                let node = &self.nodes[n];
                let reqs = new_reqs.as_ref().unwrap_or(&node.reqs);
                let narrow = new_reqs.is_some() || zmask != node.zone_mask;
                let mut scratch = std::mem::take(&mut self.scratch);
                scratch.clear();
                let mut cap = Resources::ZERO;
                let mut reserved = Resources::ZERO;
                for &i in &node.types {
                    let ct = &self.types[usize::from(i)];
                    let gpu_ok = wants_gpu || ct.alloc.get(Dim::Gpus) == 0;
                    if gpu_ok
                        && used.fits_in(&ct.alloc)
                        && (!narrow || self.type_ok(ct, reqs, zmask))
                    {
                        scratch.push(i);
                        cap = cap.max(&ct.alloc);
                        reserved = reserved.max(&ct.capacity);
                    }
                }
                if scratch.is_empty() {
                    self.scratch = scratch;
                    continue;
                }
                if self.templates[t].has_min_values {
                    let reqs = reqs.clone();
                    if let Err(f) = self.min_values_ok(&reqs, &scratch) {
                        fail = f;
                        self.scratch = scratch;
                        continue;
                    }
                }
                let node = &mut self.nodes[n];
                if let Some(r) = new_reqs {
                    node.reqs = r;
                }
                std::mem::swap(&mut node.types, &mut scratch);
                self.scratch = scratch;
                node.zone_mask = zmask;
                node.cap = cap;
                node.used = used;
                let tpl = &mut self.templates[t];
                tpl.remaining = tpl.remaining.add(&node.reserved).saturating_sub(&reserved);
                node.reserved = reserved;
                self.record(n, p, vi);
                return Ok(());
            }
            return Err(fail);
        }
        self.nodes[n].used = used;
        self.record(n, p, vi);
        Ok(())
    }

    /// Counts a placed pod in every topology group it belongs to.
    fn record(&mut self, n: usize, p: &PendingPod, vi: usize) {
        let nz = self.zones.len().min(MAX_ZONES);
        let hg = self.groups.host_groups;
        let class = &self.classes[p.class];
        let node = &mut self.nodes[n];
        node.pods.push(u32::try_from(p.index).unwrap_or(u32::MAX));
        let zone =
            (node.zone_mask.count_ones() == 1).then(|| node.zone_mask.trailing_zeros() as usize);
        for g in &class.counted_zone {
            self.totals[g.id] += 1;
            if let Some(z) = zone {
                self.zone_counts[g.slot * nz + z] += 1;
            }
        }
        for g in &class.counted_host {
            self.totals[g.id] += 1;
            node.host[g.slot] += 1;
        }
        for o in class.variants[vi]
            .owned
            .iter()
            .filter(|o| o.kind == GroupKind::AntiAffinity)
        {
            match o.key {
                TopoKey::Hostname => node.host[hg + o.group.slot] += 1,
                TopoKey::Zone => {
                    if let Some(z) = zone {
                        self.zone_owners[o.group.slot * nz + z] += 1;
                    }
                }
            }
        }
    }

    fn explain(&self, why: &[(usize, Fail)]) -> String {
        if self.templates.is_empty() {
            return "no usable NodePool".into();
        }
        if why.is_empty() {
            return "fits no existing node and no NodePool".into();
        }
        let parts: Vec<String> = why
            .iter()
            .map(|(t, f)| {
                let pool = &self.problem.node_pools[self.templates[*t].pool].name;
                let what = match f {
                    Fail::Resource(r) => format!("no instance type has enough {r}"),
                    Fail::Taint(t) => format!(
                        "does not tolerate taint {}={}:{:?}",
                        self.syms.name(t.key),
                        self.syms.name(t.value),
                        t.effect
                    ),
                    Fail::Requirement(k) => {
                        format!("incompatible requirement on {}", self.syms.name(*k))
                    }
                    Fail::Topology(kind, key) => format!("{kind:?} on {key:?} cannot be satisfied"),
                    Fail::NoInstanceType => {
                        "no instance type satisfies the requirements and requests".into()
                    }
                    Fail::MinValues(k) => {
                        format!("minValues on {} cannot be met", self.syms.name(*k))
                    }
                    Fail::Limits => "NodePool limits reached".into(),
                    Fail::Ranker(i) => self.rank_errors.get(*i).cloned().unwrap_or_default(),
                };
                format!("nodepool {pool}: {what}")
            })
            .collect();
        parts.join("; ")
    }

    fn finish(self) -> SchedulingResult {
        let mut result = SchedulingResult {
            ranker_calls: self.ranker_calls,
            ranker_fallbacks: self.ranker_fallbacks.clone(),
            pools_without_types: self.pools_without_types.clone(),
            unschedulable: self.unschedulable.clone(),
            ..Default::default()
        };
        result.unschedulable.sort_by_key(|u| u.pod);
        for node in &self.nodes {
            if node.pods.is_empty() {
                continue;
            }
            let mut pods: Vec<usize> = node.pods.iter().map(|&i| i as usize).collect();
            pods.sort_unstable();
            match (node.existing, node.template) {
                (Some(e), _) => result.existing.push(ExistingPlacement {
                    node: self.problem.existing_nodes[e].name.clone(),
                    pods,
                }),
                (None, Some(t)) => result.new_node_claims.push(self.draft(node, t, pods)),
                (None, None) => {}
            }
        }
        result
    }

    fn draft(&self, node: &Node, t: usize, pods: Vec<usize>) -> NodeClaimDraft {
        let tpl = &self.templates[t];
        let pool = &self.problem.node_pools[tpl.pool];
        let catalog = self.problem.instance_types;
        let chosen: Vec<u16> = node
            .types
            .iter()
            .copied()
            .take(self.options.max_instance_types)
            .collect();
        let ct_req = node.reqs.get(self.ct_key);
        let mut zones: Vec<Sym> = Vec::new();
        let mut cts: Vec<Sym> = Vec::new();
        for &i in &chosen {
            for o in &self.types[usize::from(i)].offerings {
                if o.available
                    && node.zone_mask & bit(o.zone) != 0
                    && ct_req.is_none_or(|r| r.has(&self.syms, o.capacity_type))
                {
                    zones.push(self.zones[o.zone]);
                    cts.push(o.capacity_type);
                }
            }
        }
        let it_key = self.syms.get(label::INSTANCE_TYPE).unwrap_or_default();
        let mut reqs = node.reqs.clone();
        let names: Vec<Sym> = chosen
            .iter()
            .filter_map(|&i| self.syms.get(&catalog[usize::from(i)].name))
            .collect();
        reqs.add(&self.syms, Requirement::in_values(it_key, names));
        reqs.add(&self.syms, Requirement::in_values(self.zone_key, zones));
        reqs.add(&self.syms, Requirement::in_values(self.ct_key, cts));
        let requirements = reqs
            .to_selectors(&self.syms)
            .into_iter()
            .filter(|(r, _)| r.key != label::HOSTNAME)
            .map(|(requirement, min_values)| PoolRequirement {
                requirement,
                min_values,
            })
            .collect();
        let mut labels: BTreeMap<String, String> = pool.labels.clone();
        for r in node.reqs.iter() {
            if self.well_known.binary_search(&r.key).is_ok() {
                continue;
            }
            if let Some(v) = r.single() {
                labels.insert(
                    self.syms.name(r.key).to_owned(),
                    self.syms.name(v).to_owned(),
                );
            }
        }
        labels.insert(label::NODEPOOL.to_owned(), pool.name.clone());
        NodeClaimDraft {
            node_pool: pool.name.clone(),
            requirements,
            labels,
            taints: pool.taints.clone(),
            startup_taints: pool.startup_taints.clone(),
            instance_types: chosen
                .iter()
                .map(|&i| catalog[usize::from(i)].name.clone())
                .collect(),
            requests: node.used,
            pods,
        }
    }
}

/// The pods of `pods` that a result placed, for tests and callers that need the objects back.
pub fn pods_of<'p>(
    pods: &'p [std::sync::Arc<CachedPod>],
    indices: &[usize],
) -> impl Iterator<Item = &'p CachedPod> + 'p {
    let idx: Vec<usize> = indices.to_vec();
    idx.into_iter()
        .filter_map(move |i| pods.get(i).map(|p| &**p))
}
