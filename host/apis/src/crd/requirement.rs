//! Node selector requirements with `minValues`, as NodePools and NodeClaims carry them.
//!
//! The schema mirrors upstream Karpenter v1 so manifests written for it apply
//! unchanged; [`Requirement::allows`] is the one place the operator semantics live,
//! so the scheduler and the validation agree.

use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::schema::{LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN, add_rules};

/// A requirement's operator. The API server refuses any other value.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    /// Greater than or equal (upstream's inclusive bounds; NodePool and NodeClaim only, pods
    /// cannot use them).
    Gte,
    Lte,
}

/// `{key, operator, values, minValues}`: a node selector requirement that can
/// also ask for at least `minValues` distinct values to stay in play (flexibility).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Requirement {
    /// The label key the requirement applies to.
    #[schemars(length(max = 316), regex(pattern = LABEL_KEY_PATTERN), transform = key_rules)]
    pub key: String,
    pub operator: Operator,
    /// Label values; one integer for Gt and Lt, none for Exists and DoesNotExist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = 63), regex(pattern = LABEL_VALUE_PATTERN)))]
    pub values: Vec<String>,
    /// The least number of distinct values the scheduler must keep for this key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<u32>,
}

fn key_rules(schema: &mut Schema) {
    add_rules(
        schema,
        &[
            (
                r#"self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !self.find("^([^/]+)").endsWith("karpenter.sh")"#,
                r#"label domain "karpenter.sh" is restricted"#,
            ),
            (
                r#"self != "kubernetes.io/hostname""#,
                r#"label "kubernetes.io/hostname" is restricted"#,
            ),
        ],
    );
}

/// List-level checks of a requirements array (used by NodePool and NodeClaim).
pub(crate) fn requirements_rules(schema: &mut Schema) {
    add_rules(
        schema,
        &[
            (
                "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
                "requirements with operator 'In' must have a value defined",
            ),
            (
                "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
                "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
            ),
            (
                "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
                "requirements with 'minValues' must have at least that many values specified in the 'values' field",
            ),
        ],
    );
    schema.insert("maxItems".into(), json!(100));
}

/// A NodePool's requirements may not name `karpenter.sh/nodepool`: the host sets it on the
/// NodeClaims it creates (so, unlike upstream's shared key rule, it is allowed there).
pub(crate) fn nodepool_requirements_rules(schema: &mut Schema) {
    requirements_rules(schema);
    add_rules(
        schema,
        &[(
            r#"self.all(x, x.key != "karpenter.sh/nodepool")"#,
            r#"label "karpenter.sh/nodepool" is restricted"#,
        )],
    );
}

impl Requirement {
    pub fn new(key: impl Into<String>, operator: Operator, values: &[&str]) -> Self {
        Self {
            key: key.into(),
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
            min_values: None,
        }
    }

    /// Whether a node whose label `key` has `value` (`None`: label absent) satisfies
    /// this requirement. Gt and Lt compare integers; a non-integer never matches.
    pub fn allows(&self, value: Option<&str>) -> bool {
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Operator::NotIn => value.is_none_or(|v| self.values.iter().all(|x| x != v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let (Some(bound), Some(actual)) = (
                    self.values.first().and_then(|b| b.parse::<i64>().ok()),
                    value.and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                match self.operator {
                    Operator::Gt => actual > bound,
                    Operator::Lt => actual < bound,
                    Operator::Gte => actual >= bound,
                    _ => actual <= bound,
                }
            }
        }
    }

    /// The requirement as a Kubernetes node selector requirement `(operator, values)`: an
    /// inclusive bound becomes the exclusive one a step out (`Gte 4` is `Gt 3`), the only form
    /// node affinity and the scheduler know; on integers both select the same values.
    pub fn selector_form(&self) -> (&'static str, Vec<String>) {
        let step = |delta: i64| -> Vec<String> {
            self.values
                .iter()
                .map(|v| {
                    v.parse::<i64>()
                        .map(|n| n.saturating_add(delta).to_string())
                        .unwrap_or_else(|_| v.clone())
                })
                .collect()
        };
        match self.operator {
            Operator::In => ("In", self.values.clone()),
            Operator::NotIn => ("NotIn", self.values.clone()),
            Operator::Exists => ("Exists", Vec::new()),
            Operator::DoesNotExist => ("DoesNotExist", Vec::new()),
            Operator::Gt => ("Gt", self.values.clone()),
            Operator::Lt => ("Lt", self.values.clone()),
            Operator::Gte => ("Gt", step(-1)),
            Operator::Lte => ("Lt", step(1)),
        }
    }

    /// The inverse of [`Requirement::selector_form`] for one node selector requirement; `None`
    /// for an operator a NodeClaim cannot carry. A lower bound below zero is written back as
    /// the inclusive `Gte` (the schema takes only non-negative bounds).
    pub fn from_selector_form(
        key: &str,
        operator: &str,
        values: Vec<String>,
        min_values: Option<u32>,
    ) -> Option<Self> {
        let negative = values
            .first()
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|n| *n < 0);
        let (operator, values) = match (operator, negative) {
            ("Gt", Some(n)) => (Operator::Gte, vec![(n + 1).to_string()]),
            ("In", _) => (Operator::In, values),
            ("NotIn", _) => (Operator::NotIn, values),
            ("Exists", _) => (Operator::Exists, values),
            ("DoesNotExist", _) => (Operator::DoesNotExist, values),
            ("Gt", _) => (Operator::Gt, values),
            ("Lt", _) => (Operator::Lt, values),
            _ => return None,
        };
        Some(Requirement {
            key: key.to_owned(),
            operator,
            values,
            min_values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_and_not_in() {
        let r = Requirement::new("kubernetes.io/arch", Operator::In, &["amd64"]);
        assert!(r.allows(Some("amd64")));
        assert!(!r.allows(Some("arm64")));
        assert!(!r.allows(None));
        let r = Requirement::new("zone", Operator::NotIn, &["a"]);
        assert!(r.allows(None));
        assert!(r.allows(Some("b")));
        assert!(!r.allows(Some("a")));
    }

    #[test]
    fn exists_and_does_not_exist() {
        let r = Requirement::new("gpu", Operator::Exists, &[]);
        assert!(r.allows(Some("")));
        assert!(!r.allows(None));
        let r = Requirement::new("gpu", Operator::DoesNotExist, &[]);
        assert!(r.allows(None));
        assert!(!r.allows(Some("1")));
    }

    #[test]
    fn gt_lt_compare_integers() {
        let r = Requirement::new("cpu", Operator::Gt, &["4"]);
        assert!(r.allows(Some("8")));
        assert!(!r.allows(Some("4")));
        assert!(!r.allows(Some("x")));
        assert!(!r.allows(None));
        let r = Requirement::new("cpu", Operator::Lt, &["4"]);
        assert!(r.allows(Some("2")));
        assert!(!r.allows(Some("16")));
    }

    #[test]
    fn gte_lte_are_inclusive_and_become_gt_lt_a_step_out() {
        let gte = Requirement::new("cpu", Operator::Gte, &["4"]);
        assert!(gte.allows(Some("4")) && gte.allows(Some("8")));
        assert!(!gte.allows(Some("3")));
        assert_eq!(gte.selector_form(), ("Gt", vec!["3".to_owned()]));
        let lte = Requirement::new("cpu", Operator::Lte, &["4"]);
        assert!(lte.allows(Some("4")) && !lte.allows(Some("5")));
        assert_eq!(lte.selector_form(), ("Lt", vec!["5".to_owned()]));
        // Gte 0 is Gt -1 to the scheduler, and goes back on a NodeClaim as Gte 0.
        let zero = Requirement::new("gpu", Operator::Gte, &["0"]);
        let (op, values) = zero.selector_form();
        assert_eq!(
            Requirement::from_selector_form("gpu", op, values, None),
            Some(zero)
        );
        assert_eq!(
            Requirement::from_selector_form("cpu", "Gt", vec!["3".into()], None),
            Some(Requirement::new("cpu", Operator::Gt, &["3"]))
        );
        assert_eq!(
            Requirement::from_selector_form("cpu", "Foo", vec![], None),
            None
        );
    }

    #[test]
    fn wire_form_matches_upstream() {
        let r: Requirement = serde_json::from_value(json!({
            "key": "node.kubernetes.io/instance-type", "operator": "In",
            "values": ["a", "b"], "minValues": 2
        }))
        .unwrap();
        assert_eq!(r.min_values, Some(2));
        assert!(
            serde_json::from_value::<Requirement>(json!({"key": "k", "operator": "Matches"}))
                .is_err()
        );
    }
}
