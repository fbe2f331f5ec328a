//! Pods compiled into classes: pods with the same namespace, labels and scheduling constraints share
//! one class, so the solver evaluates constraints per class, not per pod.

use k8s_openapi::api::core::v1::{PodAffinityTerm, PodSpec};
use kk_apis::cached_pod::CachedPod;

use super::requirements::{self, RequirementError, Requirements};
use super::symbols::{Sym, Symbols};
use super::taints::CToleration;
use super::topology::{Group, GroupKind, GroupRef, Groups, Namespaces, TopoKey, compile_selector};

/// A topology constraint a variant must satisfy.
#[derive(Debug, Clone, Copy)]
pub struct Owned {
    pub group: GroupRef,
    pub kind: GroupKind,
    pub key: TopoKey,
    /// The pod's own labels match the selector (so placing it raises the count it is checked against).
    pub self_match: bool,
}

/// One way of scheduling a pod: its required constraints plus the preferences not yet relaxed.
#[derive(Debug, Clone)]
pub struct Variant {
    pub reqs: Requirements,
    pub tolerations: Vec<CToleration>,
    pub owned: Vec<Owned>,
    /// Zones (bit per zone domain) the requirements allow; set once the zone universe is known.
    pub zone_mask: u64,
    pub owns_zone: bool,
    pub owns_host: bool,
}

/// Everything the solver needs about a set of identical pods.
#[derive(Debug, Clone)]
pub struct PodClass {
    pub namespace: Sym,
    pub labels: Vec<(Sym, Sym)>,
    /// Strictest first; a pod that fits nowhere moves to the next.
    pub variants: Vec<Variant>,
    /// Zone groups that count this class's pods.
    pub counted_zone: Vec<GroupRef>,
    /// Hostname groups that count this class's pods.
    pub counted_host: Vec<GroupRef>,
    /// Anti-affinity groups whose selector matches this class: it must avoid their owners' domains.
    pub inverse_zone: Vec<GroupRef>,
    pub inverse_host: Vec<GroupRef>,
}

impl PodClass {
    /// Whether placing this class involves zone counts, so a new node's zone must be pinned.
    pub fn zone_sensitive(&self, v: &Variant) -> bool {
        v.owns_zone || !self.counted_zone.is_empty() || !self.inverse_zone.is_empty()
    }

    pub fn host_sensitive(&self, v: &Variant) -> bool {
        v.owns_host || !self.counted_host.is_empty() || !self.inverse_host.is_empty()
    }
}

/// Why a pod cannot be considered at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassError {
    #[error("invalid node affinity: {0}")]
    Requirement(#[from] RequirementError),
    #[error("pod has no spec")]
    NoSpec,
}

/// A key identifying pods that schedule identically (resources aside).
pub fn class_key(pod: &CachedPod, buf: &mut Vec<u8>) {
    buf.clear();
    let spec = pod.spec.as_ref();
    let key = (
        pod.metadata.namespace.as_deref(),
        &pod.metadata.labels,
        spec.map(|s| &s.node_selector),
        spec.map(|s| &s.affinity),
        spec.map(|s| &s.tolerations),
        spec.map(|s| &s.topology_spread_constraints),
    );
    // Serialising plain data into a Vec cannot fail; an empty key would only merge classes, never corrupt them.
    if serde_json::to_writer(&mut *buf, &key).is_err() {
        buf.clear();
    }
}

/// Options that shape how classes are compiled.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompileOptions {
    /// Treat preferences as absent (Karpenter's `PREFERENCE_POLICY=Ignore`).
    pub ignore_preferences: bool,
    /// Add a final variant tolerating `PreferNoSchedule` taints (some NodePool has one).
    pub relax_prefer_no_schedule: bool,
}

enum Pref {
    Topology(Group),
    NodeAffinity(Requirements),
    PreferNoSchedule,
}

fn sorted_labels(syms: &mut Symbols, pod: &CachedPod) -> Vec<(Sym, Sym)> {
    let mut labels: Vec<(Sym, Sym)> = pod
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (syms.intern(k), syms.intern(v)))
        .collect();
    labels.sort_unstable();
    labels
}

fn label_value(labels: &[(Sym, Sym)], key: Sym) -> Option<Sym> {
    labels
        .binary_search_by(|(k, _)| k.cmp(&key))
        .ok()
        .map(|i| labels[i].1)
}

fn affinity_group(
    syms: &mut Symbols,
    kind: GroupKind,
    term: &PodAffinityTerm,
    namespace: Sym,
    labels: &[(Sym, Sym)],
) -> Result<Option<Group>, ClassError> {
    let Some(key) = TopoKey::parse(&term.topology_key) else {
        return Ok(None);
    };
    let mut extra = Vec::new();
    for k in term.match_label_keys.iter().flatten() {
        let k = syms.intern(k);
        if let Some(v) = label_value(labels, k) {
            extra.push((k, v));
        }
    }
    let mut selector = compile_selector(syms, term.label_selector.as_ref(), &extra)?;
    if let Some(sel) = selector.as_mut() {
        for k in term.mismatch_label_keys.iter().flatten() {
            let k = syms.intern(k);
            if let Some(v) = label_value(labels, k) {
                sel.add(syms, requirements::Requirement::not_in(k, vec![v]));
            }
        }
    }
    // A namespace selector needs namespace labels the solver does not have; an empty one means
    // "all namespaces", and any other is treated the same, which is conservative for anti-affinity.
    let namespaces: Namespaces = if term.namespace_selector.is_some() {
        None
    } else {
        let mut nss: Vec<Sym> = term
            .namespaces
            .iter()
            .flatten()
            .map(|n| syms.intern(n))
            .collect();
        if nss.is_empty() {
            nss.push(namespace);
        }
        nss.sort_unstable();
        Some(nss)
    };
    Ok(Some(Group {
        kind,
        key,
        namespaces,
        selector,
    }))
}

/// Required anti-affinity groups of a pod already running: other pods must keep away from it.
pub fn running_pod_groups(
    syms: &mut Symbols,
    groups: &mut Groups,
    pod: &CachedPod,
) -> Vec<GroupRef> {
    let namespace = syms.intern(pod.metadata.namespace.as_deref().unwrap_or("default"));
    let labels = sorted_labels(syms, pod);
    let mut out = Vec::new();
    for term in kk_apis::pod::required_anti_affinity(pod) {
        if let Ok(Some(g)) = affinity_group(syms, GroupKind::AntiAffinity, term, namespace, &labels)
        {
            out.push(groups.register(g));
        }
    }
    out
}

/// The namespace and sorted labels of a pod.
pub fn identity(syms: &mut Symbols, pod: &CachedPod) -> (Sym, Vec<(Sym, Sym)>) {
    let namespace = syms.intern(pod.metadata.namespace.as_deref().unwrap_or("default"));
    (namespace, sorted_labels(syms, pod))
}

/// Compiles the scheduling constraints of `pod` (the representative of its class).
pub fn compile(
    syms: &mut Symbols,
    groups: &mut Groups,
    pod: &CachedPod,
    opts: CompileOptions,
) -> Result<PodClass, ClassError> {
    let spec: &PodSpec = pod.spec.as_ref().ok_or(ClassError::NoSpec)?;
    let (namespace, labels) = identity(syms, pod);
    let base_reqs = requirements::node_selector(syms, spec);
    let tolerations: Vec<CToleration> = spec
        .tolerations
        .iter()
        .flatten()
        .map(|t| CToleration::compile(syms, t))
        .collect();

    let affinity = spec.affinity.as_ref();
    let node_aff = affinity.and_then(|a| a.node_affinity.as_ref());
    let mut terms: Vec<Requirements> = Vec::new();
    if let Some(sel) = node_aff.and_then(|n| {
        n.required_during_scheduling_ignored_during_execution
            .as_ref()
    }) {
        for t in &sel.node_selector_terms {
            terms.push(requirements::compile_term(syms, t)?);
        }
    }
    if terms.is_empty() {
        terms.push(Requirements::new());
    }

    // Required topology.
    let mut required: Vec<Group> = Vec::new();
    let mut prefs: Vec<Pref> = Vec::new();
    for tsc in spec.topology_spread_constraints.iter().flatten() {
        let Some(key) = TopoKey::parse(&tsc.topology_key) else {
            continue;
        };
        let mut extra = Vec::new();
        for k in tsc.match_label_keys.iter().flatten() {
            let k = syms.intern(k);
            if let Some(v) = label_value(&labels, k) {
                extra.push((k, v));
            }
        }
        let g = Group {
            kind: GroupKind::Spread {
                max_skew: u32::try_from(tsc.max_skew).unwrap_or(1).max(1),
                min_domains: tsc
                    .min_domains
                    .and_then(|m| u32::try_from(m).ok())
                    .unwrap_or(1),
            },
            key,
            namespaces: Some(vec![namespace]),
            selector: compile_selector(syms, tsc.label_selector.as_ref(), &extra)?,
        };
        if tsc.when_unsatisfiable == "ScheduleAnyway" {
            if !opts.ignore_preferences {
                prefs.push(Pref::Topology(g));
            }
        } else {
            required.push(g);
        }
    }
    let mut preferred_topology: Vec<(i32, Pref)> = Vec::new();
    let mut preferred_anti: Vec<(i32, Pref)> = Vec::new();
    if let Some(pa) = affinity.and_then(|a| a.pod_affinity.as_ref()) {
        for t in pa
            .required_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            if let Some(g) = affinity_group(syms, GroupKind::Affinity, t, namespace, &labels)? {
                required.push(g);
            }
        }
        for w in pa
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            if let Some(g) = affinity_group(
                syms,
                GroupKind::Affinity,
                &w.pod_affinity_term,
                namespace,
                &labels,
            )? {
                preferred_topology.push((w.weight, Pref::Topology(g)));
            }
        }
    }
    if let Some(pa) = affinity.and_then(|a| a.pod_anti_affinity.as_ref()) {
        for t in pa
            .required_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            if let Some(g) = affinity_group(syms, GroupKind::AntiAffinity, t, namespace, &labels)? {
                required.push(g);
            }
        }
        for w in pa
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
        {
            if let Some(g) = affinity_group(
                syms,
                GroupKind::AntiAffinity,
                &w.pod_affinity_term,
                namespace,
                &labels,
            )? {
                preferred_anti.push((w.weight, Pref::Topology(g)));
            }
        }
    }
    let mut preferred_node: Vec<(i32, Requirements)> = Vec::new();
    for p in node_aff
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
    {
        preferred_node.push((p.weight, requirements::compile_term(syms, &p.preference)?));
    }

    // Relaxation order, as Karpenter: pod affinity, pod anti-affinity (heaviest first), then
    // node-affinity preferences (the heaviest is the active one), then ScheduleAnyway spreads.
    let mut ordered: Vec<Pref> = Vec::new();
    if !opts.ignore_preferences {
        preferred_topology.sort_by_key(|(w, _)| -w);
        preferred_anti.sort_by_key(|(w, _)| -w);
        preferred_node.sort_by_key(|(w, _)| -w);
        ordered.extend(preferred_topology.into_iter().map(|(_, p)| p));
        ordered.extend(preferred_anti.into_iter().map(|(_, p)| p));
        ordered.extend(
            preferred_node
                .into_iter()
                .map(|(_, r)| Pref::NodeAffinity(r)),
        );
    }
    // ScheduleAnyway spreads were collected first but relax last.
    let spreads = std::mem::take(&mut prefs);
    ordered.extend(spreads);
    if opts.relax_prefer_no_schedule {
        ordered.push(Pref::PreferNoSchedule);
    }

    let required_refs: Vec<(GroupRef, Group)> = required
        .into_iter()
        .map(|g| (groups.register(g.clone()), g))
        .collect();
    let pref_refs: Vec<Option<(GroupRef, Group)>> = ordered
        .iter()
        .map(|p| match p {
            Pref::Topology(g) => Some((groups.register(g.clone()), g.clone())),
            _ => None,
        })
        .collect();

    let build = |syms: &mut Symbols, term: &Requirements, from: usize| -> Variant {
        let mut reqs = base_reqs.intersect(syms, term);
        let mut tols = tolerations.clone();
        let mut owned = Vec::new();
        let mut push = |r: GroupRef, g: &Group, syms: &Symbols| {
            owned.push(Owned {
                group: r,
                kind: g.kind,
                key: g.key,
                self_match: g.selects(syms, namespace, &labels),
            });
        };
        for (r, g) in &required_refs {
            push(*r, g, syms);
        }
        let mut node_pref_used = false;
        for (i, p) in ordered.iter().enumerate().skip(from) {
            match p {
                Pref::Topology(g) => {
                    if let Some((r, _)) = &pref_refs[i] {
                        push(*r, g, syms);
                    }
                }
                Pref::NodeAffinity(r) => {
                    // Only the heaviest remaining node-affinity preference is enforced.
                    if !node_pref_used {
                        reqs = reqs.intersect(syms, r);
                        node_pref_used = true;
                    }
                }
                Pref::PreferNoSchedule => {}
            }
        }
        // The last relaxation tolerates PreferNoSchedule: present only once every preference before it is gone.
        if opts.relax_prefer_no_schedule && from >= ordered.len() {
            tols.push(CToleration::prefer_no_schedule_any());
        }
        let owns_zone = owned.iter().any(|o| o.key == TopoKey::Zone);
        let owns_host = owned.iter().any(|o| o.key == TopoKey::Hostname);
        Variant {
            reqs,
            tolerations: tols,
            owned,
            zone_mask: u64::MAX,
            owns_zone,
            owns_host,
        }
    };

    let mut variants = Vec::new();
    let last = terms.len() - 1;
    for (t, term) in terms.iter().enumerate() {
        if t < last {
            variants.push(build(syms, term, 0));
        } else {
            for from in 0..=ordered.len() {
                variants.push(build(syms, term, from));
            }
        }
    }

    Ok(PodClass {
        namespace,
        labels,
        variants,
        counted_zone: Vec::new(),
        counted_host: Vec::new(),
        inverse_zone: Vec::new(),
        inverse_host: Vec::new(),
    })
}

/// Fills in which groups count a class and which anti-affinity owners it must avoid.
pub fn link(syms: &Symbols, groups: &Groups, class: &mut PodClass) {
    for r in groups.refs() {
        let g = groups.get(r);
        if !g.selects(syms, class.namespace, &class.labels) {
            continue;
        }
        match g.key {
            TopoKey::Zone => class.counted_zone.push(r),
            TopoKey::Hostname => class.counted_host.push(r),
        }
        if g.kind == GroupKind::AntiAffinity {
            match g.key {
                TopoKey::Zone => class.inverse_zone.push(r),
                TopoKey::Hostname => class.inverse_host.push(r),
            }
        }
    }
}
