//! Topology groups: spread constraints on zone and hostname, pod affinity and anti-affinity.
//!
//! Every distinct constraint in a solve becomes one [`Group`]; pods whose labels the group's selector
//! matches are counted per domain (a zone, or one node for hostname), and the owners of the constraint
//! are placed only where the counts allow.

use kk_apis::names::label;
use std::collections::HashMap;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::requirements::{Requirement, RequirementError, Requirements};
use super::symbols::{Sym, Symbols};

/// The topology keys the solver models; constraints on other keys are ignored, as Karpenter ignores unknown keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopoKey {
    Zone,
    Hostname,
}

impl TopoKey {
    pub fn parse(key: &str) -> Option<TopoKey> {
        match super::requirements::normalize_key(key) {
            label::ZONE => Some(TopoKey::Zone),
            label::HOSTNAME => Some(TopoKey::Hostname),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupKind {
    /// `maxSkew` and `minDomains` of a topology spread constraint.
    Spread {
        max_skew: u32,
        min_domains: u32,
    },
    Affinity,
    AntiAffinity,
}

/// Which namespaces a group's selector looks at; `None` is all of them.
pub type Namespaces = Option<Vec<Sym>>;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Group {
    pub kind: GroupKind,
    pub key: TopoKey,
    pub namespaces: Namespaces,
    /// `None`: a null selector, which matches no pod.
    pub selector: Option<Requirements>,
}

impl Group {
    /// Whether a pod (namespace, sorted labels) is counted by this group.
    pub fn selects(&self, syms: &Symbols, namespace: Sym, labels: &[(Sym, Sym)]) -> bool {
        let in_ns = self
            .namespaces
            .as_ref()
            .is_none_or(|nss| nss.contains(&namespace));
        in_ns
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches_labels(syms, labels).is_ok())
    }
}

/// A group id plus the group's index among the groups on the same key (its counter slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupRef {
    pub id: usize,
    pub slot: usize,
}

/// All groups of one solve, deduplicated.
#[derive(Debug, Default)]
pub struct Groups {
    pub groups: Vec<Group>,
    pub slots: Vec<usize>,
    index: HashMap<Group, usize>,
    pub zone_groups: usize,
    pub host_groups: usize,
}

impl Groups {
    pub fn register(&mut self, g: Group) -> GroupRef {
        if let Some(&id) = self.index.get(&g) {
            return GroupRef {
                id,
                slot: self.slots[id],
            };
        }
        let id = self.groups.len();
        let slot = match g.key {
            TopoKey::Zone => {
                self.zone_groups += 1;
                self.zone_groups - 1
            }
            TopoKey::Hostname => {
                self.host_groups += 1;
                self.host_groups - 1
            }
        };
        self.index.insert(g.clone(), id);
        self.groups.push(g);
        self.slots.push(slot);
        GroupRef { id, slot }
    }

    pub fn get(&self, r: GroupRef) -> &Group {
        &self.groups[r.id]
    }

    pub fn refs(&self) -> impl Iterator<Item = GroupRef> + '_ {
        (0..self.groups.len()).map(|id| GroupRef {
            id,
            slot: self.slots[id],
        })
    }
}

/// Compiles a label selector into requirements over pod labels; `extra` adds `key In [value]`
/// terms (matchLabelKeys resolved against the owner's labels).
pub fn compile_selector(
    syms: &mut Symbols,
    sel: Option<&LabelSelector>,
    extra: &[(Sym, Sym)],
) -> Result<Option<Requirements>, RequirementError> {
    let Some(sel) = sel else {
        return Ok(None);
    };
    let mut reqs = Requirements::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        let key = syms.intern(k);
        let value = syms.intern(v);
        reqs.add(syms, Requirement::in_values(key, vec![value]));
    }
    for e in sel.match_expressions.iter().flatten() {
        if !matches!(
            e.operator.as_str(),
            "In" | "NotIn" | "Exists" | "DoesNotExist"
        ) {
            return Err(RequirementError::UnknownOperator {
                key: e.key.clone(),
                operator: e.operator.clone(),
            });
        }
        // Label selectors are not subject to node-label aliasing, so intern the key as written.
        let as_node = NodeSelectorRequirement {
            key: e.key.clone(),
            operator: e.operator.clone(),
            values: e.values.clone(),
        };
        let mut r = Requirement::from_selector(syms, &as_node, None)?;
        r.key = syms.intern(&e.key);
        reqs.add(syms, r);
    }
    for &(k, v) in extra {
        reqs.add(syms, Requirement::in_values(k, vec![v]));
    }
    Ok(Some(reqs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn groups_deduplicate_and_select() {
        let mut s = Symbols::new();
        let sel = LabelSelector {
            match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        let reqs = compile_selector(&mut s, Some(&sel), &[]).unwrap();
        let ns = s.intern("default");
        let g = Group {
            kind: GroupKind::AntiAffinity,
            key: TopoKey::Hostname,
            namespaces: Some(vec![ns]),
            selector: reqs,
        };
        let mut groups = Groups::default();
        let a = groups.register(g.clone());
        let b = groups.register(g.clone());
        assert_eq!(a, b);
        let app = s.intern("app");
        let web = s.intern("web");
        let tier = s.intern("tier");
        let db = s.intern("db");
        let mut labels = vec![(app, web)];
        labels.sort_unstable();
        assert!(g.selects(&s, ns, &labels));
        let mut with_db = vec![(app, web), (tier, db)];
        with_db.sort_unstable();
        assert!(!g.selects(&s, ns, &with_db));
        let other_ns = s.intern("other");
        assert!(!g.selects(&s, other_ns, &labels));
        let null = Group {
            selector: None,
            ..g
        };
        assert!(
            !null.selects(&s, ns, &labels),
            "a null selector matches nothing"
        );
        assert_eq!(
            TopoKey::parse("failure-domain.beta.kubernetes.io/zone"),
            Some(TopoKey::Zone)
        );
        assert_eq!(TopoKey::parse("karpenter.sh/capacity-type"), None);
    }
}
