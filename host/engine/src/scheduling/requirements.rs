//! Node label requirements as value sets: the In/NotIn/Exists/DoesNotExist/Gt/Lt algebra
//! with minValues, as Karpenter uses to intersect NodePool, instance-type and pod constraints.

use kk_apis::names::label;
use std::cmp::Ordering;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PodSpec};

use super::symbols::{Sym, Symbols};

/// Maps deprecated label aliases to their stable names.
pub fn normalize_key(key: &str) -> &str {
    match key {
        "beta.kubernetes.io/arch" => label::ARCH,
        "beta.kubernetes.io/os" => label::OS,
        "failure-domain.beta.kubernetes.io/zone" => label::ZONE,
        "failure-domain.beta.kubernetes.io/region" => label::REGION,
        "beta.kubernetes.io/instance-type" => label::INSTANCE_TYPE,
        k => k,
    }
}

/// A requirement that cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error("unknown operator {operator:?} for key {key:?}")]
    UnknownOperator { key: String, operator: String },
    #[error("operator {operator} for key {key:?} needs {expected}")]
    BadValues {
        key: String,
        operator: String,
        expected: &'static str,
    },
    #[error("matchFields in node affinity is not supported")]
    MatchFields,
}

/// The values one label key may take.
///
/// `complement == false`: exactly `values` (empty means the label must not exist).
/// `complement == true`: any value except `values`, within the integer bounds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    pub key: Sym,
    complement: bool,
    values: Vec<Sym>,
    gt: Option<i64>,
    lt: Option<i64>,
    pub min_values: Option<u32>,
}

impl Requirement {
    pub fn in_values(key: Sym, mut values: Vec<Sym>) -> Self {
        values.sort_unstable();
        values.dedup();
        Requirement {
            key,
            complement: false,
            values,
            gt: None,
            lt: None,
            min_values: None,
        }
    }

    pub fn not_in(key: Sym, mut values: Vec<Sym>) -> Self {
        values.sort_unstable();
        values.dedup();
        Requirement {
            key,
            complement: true,
            values,
            gt: None,
            lt: None,
            min_values: None,
        }
    }

    pub fn exists(key: Sym) -> Self {
        Self::not_in(key, Vec::new())
    }

    pub fn does_not_exist(key: Sym) -> Self {
        Self::in_values(key, Vec::new())
    }

    /// Compiles one Kubernetes node selector requirement.
    pub fn from_selector(
        syms: &mut Symbols,
        r: &NodeSelectorRequirement,
        min_values: Option<u32>,
    ) -> Result<Self, RequirementError> {
        let key = syms.intern(normalize_key(&r.key));
        let values: Vec<&String> = r.values.iter().flatten().collect();
        let bad = |expected| RequirementError::BadValues {
            key: r.key.clone(),
            operator: r.operator.clone(),
            expected,
        };
        let interned = |syms: &mut Symbols| values.iter().map(|v| syms.intern(v)).collect();
        let mut req = match r.operator.as_str() {
            "In" => {
                if values.is_empty() {
                    return Err(bad("at least one value"));
                }
                Self::in_values(key, interned(syms))
            }
            "NotIn" => Self::not_in(key, interned(syms)),
            "Exists" | "DoesNotExist" if !values.is_empty() => return Err(bad("no values")),
            "Exists" => Self::exists(key),
            "DoesNotExist" => Self::does_not_exist(key),
            "Gt" | "Lt" => {
                let [v] = values.as_slice() else {
                    return Err(bad("exactly one integer value"));
                };
                let n: i64 = v.parse().map_err(|_| bad("exactly one integer value"))?;
                let mut req = Self::exists(key);
                if r.operator == "Gt" {
                    req.gt = Some(n);
                } else {
                    req.lt = Some(n);
                }
                req
            }
            _ => {
                return Err(RequirementError::UnknownOperator {
                    key: r.key.clone(),
                    operator: r.operator.clone(),
                });
            }
        };
        req.min_values = min_values;
        Ok(req)
    }

    fn within_bounds(&self, syms: &Symbols, v: Sym) -> bool {
        if self.gt.is_none() && self.lt.is_none() {
            return true;
        }
        let Ok(n) = syms.name(v).parse::<i64>() else {
            return false;
        };
        self.gt.is_none_or(|g| n > g) && self.lt.is_none_or(|l| n < l)
    }

    /// Whether the label value `v` satisfies this requirement.
    pub fn has(&self, syms: &Symbols, v: Sym) -> bool {
        let listed = self.values.binary_search(&v).is_ok();
        listed != self.complement && self.within_bounds(syms, v)
    }

    /// True when no value can satisfy it (the label must be absent).
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// The single value this requirement pins, if it pins one.
    pub fn single(&self) -> Option<Sym> {
        match (self.complement, self.values.as_slice()) {
            (false, [v]) => Some(*v),
            _ => None,
        }
    }

    /// The allowed values when the set is finite.
    pub fn values(&self) -> Option<&[Sym]> {
        (!self.complement).then_some(self.values.as_slice())
    }

    fn allows_absence(&self) -> bool {
        // NotIn and DoesNotExist are satisfied by a node without the label.
        !self.complement && self.values.is_empty()
            || self.complement && self.gt.is_none() && self.lt.is_none() && !self.values.is_empty()
    }

    /// The values both allow.
    pub fn intersect(&self, syms: &Symbols, o: &Requirement) -> Requirement {
        let min_values = self.min_values.max(o.min_values);
        let mut r = match (self.complement, o.complement) {
            (true, true) => {
                let mut values = self.values.clone();
                values.extend_from_slice(&o.values);
                values.sort_unstable();
                values.dedup();
                let gt = self.gt.max(o.gt);
                let lt = match (self.lt, o.lt) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let empty_range =
                    matches!((gt, lt), (Some(g), Some(l)) if g.saturating_add(1) >= l);
                if empty_range {
                    Requirement::does_not_exist(self.key)
                } else {
                    Requirement {
                        key: self.key,
                        complement: true,
                        values,
                        gt,
                        lt,
                        min_values: None,
                    }
                }
            }
            (false, _) => Requirement::in_values(
                self.key,
                self.values
                    .iter()
                    .copied()
                    .filter(|&v| o.has(syms, v))
                    .collect(),
            ),
            (true, false) => Requirement::in_values(
                self.key,
                o.values
                    .iter()
                    .copied()
                    .filter(|&v| self.has(syms, v))
                    .collect(),
            ),
        };
        r.min_values = min_values;
        r
    }

    /// Whether some value (or the label's absence, when both allow it) satisfies both.
    pub fn intersects(&self, syms: &Symbols, o: &Requirement) -> bool {
        if self.allows_absence() && o.allows_absence() {
            return true;
        }
        match (self.complement, o.complement) {
            (true, true) => {
                let gt = self.gt.max(o.gt);
                let lt = match (self.lt, o.lt) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                !matches!((gt, lt), (Some(g), Some(l)) if g.saturating_add(1) >= l)
            }
            (false, _) => self.values.iter().any(|&v| o.has(syms, v)),
            (true, false) => o.values.iter().any(|&v| self.has(syms, v)),
        }
    }

    /// As Kubernetes node selector requirements (a bounded NotIn becomes several).
    pub fn to_selector(&self, syms: &Symbols) -> Vec<NodeSelectorRequirement> {
        let key = syms.name(self.key).to_owned();
        let names =
            |vs: &[Sym]| -> Vec<String> { vs.iter().map(|&v| syms.name(v).to_owned()).collect() };
        let req = |op: &str, values: Option<Vec<String>>| NodeSelectorRequirement {
            key: key.clone(),
            operator: op.to_owned(),
            values,
        };
        if !self.complement {
            return vec![if self.values.is_empty() {
                req("DoesNotExist", None)
            } else {
                req("In", Some(names(&self.values)))
            }];
        }
        let mut out = Vec::new();
        if !self.values.is_empty() {
            out.push(req("NotIn", Some(names(&self.values))));
        }
        if let Some(g) = self.gt {
            out.push(req("Gt", Some(vec![g.to_string()])));
        }
        if let Some(l) = self.lt {
            out.push(req("Lt", Some(vec![l.to_string()])));
        }
        if out.is_empty() {
            out.push(req("Exists", None));
        }
        out
    }
}

/// A conjunction of requirements, at most one per key, sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements(Vec<Requirement>);

impl Requirements {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Requirement> {
        self.0.iter()
    }

    pub fn get(&self, key: Sym) -> Option<&Requirement> {
        self.0
            .binary_search_by(|r| r.key.cmp(&key))
            .ok()
            .map(|i| &self.0[i])
    }

    /// Adds a requirement, intersecting it with one already present on the same key.
    pub fn add(&mut self, syms: &Symbols, r: Requirement) {
        match self.0.binary_search_by(|e| e.key.cmp(&r.key)) {
            Ok(i) => self.0[i] = self.0[i].intersect(syms, &r),
            Err(i) => self.0.insert(i, r),
        }
    }

    /// Everything both sets require.
    pub fn intersect(&self, syms: &Symbols, o: &Requirements) -> Requirements {
        let mut out = self.clone();
        for r in &o.0 {
            out.add(syms, r.clone());
        }
        out
    }

    /// Whether `incoming` (a pod's) can be met by a node with these requirements.
    ///
    /// A key this set does not define is a label the node will not have, unless
    /// `allow_undefined` says the node gets it anyway (well-known labels): then anything goes.
    pub fn compatible(
        &self,
        syms: &Symbols,
        incoming: &Requirements,
        allow_undefined: impl Fn(Sym) -> bool,
    ) -> Result<(), Sym> {
        // Both lists are sorted by key: merge them.
        let (mut i, mut j) = (0, 0);
        while j < incoming.0.len() {
            let inc = &incoming.0[j];
            match self.0.get(i).map(|e| e.key.cmp(&inc.key)) {
                Some(Ordering::Less) => i += 1,
                Some(Ordering::Equal) => {
                    if !self.0[i].intersects(syms, inc) {
                        return Err(inc.key);
                    }
                    i += 1;
                    j += 1;
                }
                _ => {
                    if !inc.allows_absence() && !allow_undefined(inc.key) {
                        return Err(inc.key);
                    }
                    j += 1;
                }
            }
        }
        Ok(())
    }

    /// Whether concrete node labels (sorted `(key, value)` pairs) satisfy every requirement.
    pub fn matches_labels(&self, syms: &Symbols, labels: &[(Sym, Sym)]) -> Result<(), Sym> {
        for r in &self.0 {
            let ok = match labels.binary_search_by(|(k, _)| k.cmp(&r.key)) {
                Ok(i) => r.has(syms, labels[i].1),
                Err(_) => r.allows_absence(),
            };
            if !ok {
                return Err(r.key);
            }
        }
        Ok(())
    }

    /// As Kubernetes node selector requirements, each with its minValues.
    pub fn to_selectors(&self, syms: &Symbols) -> Vec<(NodeSelectorRequirement, Option<u32>)> {
        self.0
            .iter()
            .flat_map(|r| r.to_selector(syms).into_iter().map(|s| (s, r.min_values)))
            .collect()
    }
}

/// Compiles a list of selector requirements (a NodePool's or a node-affinity term's).
pub fn compile(
    syms: &mut Symbols,
    reqs: &[NodeSelectorRequirement],
) -> Result<Requirements, RequirementError> {
    let mut out = Requirements::new();
    for r in reqs {
        let c = Requirement::from_selector(syms, r, None)?;
        out.add(syms, c);
    }
    Ok(out)
}

/// A node-affinity term as requirements; `matchFields` is refused as Karpenter does.
pub fn compile_term(
    syms: &mut Symbols,
    term: &NodeSelectorTerm,
) -> Result<Requirements, RequirementError> {
    if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
        return Err(RequirementError::MatchFields);
    }
    compile(syms, term.match_expressions.as_deref().unwrap_or(&[]))
}

/// The pod's nodeSelector as requirements.
pub fn node_selector(syms: &mut Symbols, spec: &PodSpec) -> Requirements {
    let mut out = Requirements::new();
    for (k, v) in spec.node_selector.iter().flatten() {
        let key = syms.intern(normalize_key(k));
        let value = syms.intern(v);
        out.add(syms, Requirement::in_values(key, vec![value]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    fn req(s: &mut Symbols, key: &str, op: &str, values: &[&str]) -> Requirement {
        Requirement::from_selector(s, &sel(key, op, values), None).unwrap()
    }

    #[test]
    fn in_and_not_in_intersect_to_the_difference() {
        let mut s = Symbols::new();
        let a = req(&mut s, "zone", "In", &["a", "b", "c"]);
        let b = req(&mut s, "zone", "NotIn", &["b"]);
        let r = a.intersect(&s, &b);
        assert_eq!(r.values().map(<[_]>::len), Some(2));
        assert!(r.has(&s, s.get("a").unwrap()));
        assert!(!r.has(&s, s.get("b").unwrap()));
        assert!(a.intersects(&s, &b));
        let only_b = req(&mut s, "zone", "In", &["b"]);
        assert!(!only_b.intersects(&s, &b));
        assert!(only_b.intersect(&s, &b).is_empty());
    }

    #[test]
    fn gt_lt_bound_numeric_values() {
        let mut s = Symbols::new();
        let gt = req(&mut s, "cpu", "Gt", &["4"]);
        let lt = req(&mut s, "cpu", "Lt", &["16"]);
        let both = gt.intersect(&s, &lt);
        let eight = s.intern("8");
        let two = s.intern("2");
        let word = s.intern("big");
        assert!(both.has(&s, eight));
        assert!(!both.has(&s, two));
        assert!(!both.has(&s, word));
        let lt5 = req(&mut s, "cpu", "Lt", &["5"]);
        assert!(!gt.intersects(&s, &lt5), "no integer is > 4 and < 5");
        let listed = req(&mut s, "cpu", "In", &["2", "8"]);
        assert_eq!(listed.intersect(&s, &gt).single(), Some(eight));
    }

    #[test]
    fn exists_and_does_not_exist() {
        let mut s = Symbols::new();
        let ex = req(&mut s, "gpu", "Exists", &[]);
        let dne = req(&mut s, "gpu", "DoesNotExist", &[]);
        let not_in = req(&mut s, "gpu", "NotIn", &["x"]);
        assert!(!ex.intersects(&s, &dne));
        assert!(dne.intersects(&s, &not_in), "absence satisfies both");
        assert!(ex.intersects(&s, &not_in));
        assert!(Requirement::from_selector(&mut s, &sel("k", "Exists", &["v"]), None).is_err());
        assert!(Requirement::from_selector(&mut s, &sel("k", "In", &[]), None).is_err());
        assert!(Requirement::from_selector(&mut s, &sel("k", "Gt", &["x"]), None).is_err());
        assert!(Requirement::from_selector(&mut s, &sel("k", "Near", &["x"]), None).is_err());
    }

    #[test]
    fn undefined_custom_labels_are_denied_but_well_known_are_allowed() {
        let mut s = Symbols::new();
        let pool = compile(&mut s, &[sel("team", "In", &["a"])]).unwrap();
        let zone = s.intern(label::ZONE);
        let pod = compile(
            &mut s,
            &[sel(label::ZONE, "In", &["z1"]), sel("team", "In", &["a"])],
        )
        .unwrap();
        assert!(pool.compatible(&s, &pod, |k| k == zone).is_ok());
        assert!(pool.compatible(&s, &pod, |_| false).is_err());
        let custom = compile(&mut s, &[sel("disk", "In", &["ssd"])]).unwrap();
        assert_eq!(
            pool.compatible(&s, &custom, |k| k == zone),
            Err(s.get("disk").unwrap())
        );
        let absent = compile(&mut s, &[sel("disk", "NotIn", &["hdd"])]).unwrap();
        assert!(pool.compatible(&s, &absent, |_| false).is_ok());
        let other_team = compile(&mut s, &[sel("team", "In", &["b"])]).unwrap();
        assert!(pool.compatible(&s, &other_team, |_| false).is_err());
    }

    #[test]
    fn labels_match_and_min_values_carry_over() {
        let mut s = Symbols::new();
        let reqs = compile(
            &mut s,
            &[sel("team", "In", &["a"]), sel("spot", "DoesNotExist", &[])],
        )
        .unwrap();
        let team = s.get("team").unwrap();
        let a = s.get("a").unwrap();
        assert!(reqs.matches_labels(&s, &[(team, a)]).is_ok());
        assert!(reqs.matches_labels(&s, &[]).is_err());
        let mut r = req(&mut s, "it", "Exists", &[]);
        r.min_values = Some(3);
        let other = req(&mut s, "it", "In", &["x", "y", "z"]);
        assert_eq!(other.intersect(&s, &r).min_values, Some(3));
        let out = reqs.to_selectors(&s);
        assert!(out.iter().any(|(r, _)| r.operator == "DoesNotExist"));
    }

    #[test]
    fn aliases_are_normalised() {
        let mut s = Symbols::new();
        let r = req(
            &mut s,
            "failure-domain.beta.kubernetes.io/zone",
            "In",
            &["a"],
        );
        assert_eq!(s.name(r.key), label::ZONE);
    }
}
