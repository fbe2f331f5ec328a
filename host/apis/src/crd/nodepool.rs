//! `NodePool` (`karpenter.sh/v1`): the template NodeClaims are made from, the
//! limits, and the disruption policy. Field names, defaults and validation follow
//! upstream Karpenter v1, so the same manifests apply to either.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::common::{NodeClassRef, Taint, node_class_ref_immutable_kind};
use super::duration::{BUDGET_DURATION_PATTERN, KDuration, NillableDuration};
use super::requirement::{Requirement, nodepool_requirements_rules};
use super::schema::{LABEL_VALUE_PATTERN, add_rules, atomic_list, conditions_list};

/// Longest NodePool name: the instance name also carries the cluster and NodeClaim.
pub const MAX_NODEPOOL_NAME_LEN: usize = 38;
/// Default node lifetime (`expireAfter`).
pub const DEFAULT_EXPIRE_AFTER: std::time::Duration = std::time::Duration::from_secs(720 * 3600);

/// Rule and message put at the root of the NodePool schema by [`super::nodepool_crd`].
pub(crate) const NAME_LENGTH_RULE: (&str, &str) = (
    "self.metadata.name.size() <= 38",
    "metadata.name: NodePool name must be at most 38 characters (the instance name also carries the cluster and NodeClaim names)",
);

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    singular = "nodepool",
    category = "karpenter",
    status = "NodePoolStatus",
    derive = "PartialEq",
    doc = "NodePool is the Schema for the NodePools API",
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.template.spec.nodeClassRef.name"
    ),
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    ),
    printcolumn(name = "Nodes", type_ = "string", json_path = ".status.nodes"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Weight",
        type_ = "integer",
        priority = 1,
        json_path = ".spec.weight"
    ),
    printcolumn(
        name = "CPU",
        type_ = "string",
        priority = 1,
        json_path = ".status.resources.cpu"
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        priority = 1,
        json_path = ".status.resources.memory"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = spec_rules)]
pub struct NodePoolSpec {
    /// What NodeClaims made from this NodePool look like.
    pub template: NodeClaimTemplate,
    /// A static NodePool: keep exactly this many nodes, whatever the pods need (upstream's
    /// static capacity). Provisioning and consolidation leave it alone; `kubectl scale` sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
    /// When and how nodes of this NodePool may be disrupted.
    #[serde(default)]
    pub disruption: Disruption,
    /// Upper bounds on the total capacity this NodePool may own (`cpu`, `memory`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
    /// Priority among NodePools that fit a pod: higher first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: NodeClaimTemplateSpec,
}

/// Labels and annotations copied onto each NodeClaim and its Node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = template_labels_rules)]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

fn template_labels_rules(s: &mut Schema) {
    s.insert("maxProperties".into(), json!(100));
    s.insert(
        "additionalProperties".into(),
        json!({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN}),
    );
    add_rules(
        s,
        &[
            (
                r#"self.all(x, x in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !x.find("^([^/]+)").endsWith("karpenter.sh"))"#,
                r#"label domain "karpenter.sh" is restricted"#,
            ),
            (
                r#"self.all(x, x != "karpenter.sh/nodepool")"#,
                r#"label "karpenter.sh/nodepool" is restricted"#,
            ),
            (
                r#"self.all(x, x != "kubernetes.io/hostname")"#,
                r#"label "kubernetes.io/hostname" is restricted"#,
            ),
        ],
    );
}

/// The NodeClaim spec a NodePool stamps out (without per-claim resources).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = atomic_list)]
    pub taints: Vec<Taint>,
    /// Taints present at boot that an agent removes (e.g. Cilium's); pods need not tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = atomic_list)]
    pub startup_taints: Vec<Taint>,
    #[schemars(transform = nodepool_requirements_rules)]
    pub requirements: Vec<Requirement>,
    #[schemars(transform = node_class_ref_immutable_kind)]
    pub node_class_ref: NodeClassRef,
    /// Node lifetime; `Never` disables expiry.
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
    /// How long a draining node may take before its pods are deleted regardless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<KDuration>,
}

pub(crate) fn default_expire_after() -> NillableDuration {
    NillableDuration::from_duration(DEFAULT_EXPIRE_AFTER)
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    #[default]
    WhenEmptyOrUnderutilized,
    /// Underutilized nodes too, but only moves whose saving is worth their disruption
    /// (upstream v1.14's policy: a move's share of the pool's cost saved must be at least half
    /// its share of the pool's disruption).
    Balanced,
}

impl ConsolidationPolicy {
    /// Whether nodes with pods are consolidated, not only empty ones.
    pub fn consolidates_underutilized(self) -> bool {
        self != ConsolidationPolicy::WhenEmpty
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// How long a node must be empty or underutilized before it is consolidated;
    /// `Never` turns consolidation off.
    #[serde(default = "zero_duration")]
    pub consolidate_after: NillableDuration,
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    /// At most this many nodes may be disrupted at once; the strictest active budget wins.
    #[serde(default = "default_budgets")]
    #[schemars(length(max = 50), transform = budgets_rules)]
    pub budgets: Vec<Budget>,
}

fn zero_duration() -> NillableDuration {
    NillableDuration::from_duration(std::time::Duration::ZERO)
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget {
        nodes: "10%".into(),
        schedule: None,
        duration: None,
        reasons: None,
    }]
}

impl Default for Disruption {
    fn default() -> Self {
        Self {
            consolidate_after: zero_duration(),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

fn spec_rules(s: &mut Schema) {
    add_rules(
        s,
        &[
            (
                "has(self.replicas) == has(oldSelf.replicas)",
                "Cannot transition NodePool between static (replicas) and dynamic (no replicas) modes",
            ),
            (
                "!has(self.replicas) || !has(self.limits) || self.limits.all(k, k == 'nodes')",
                "a static NodePool (replicas) may only limit 'nodes'",
            ),
        ],
    );
}

impl NodePoolSpec {
    /// Whether this is a static NodePool (`replicas` set).
    pub fn is_static(&self) -> bool {
        self.replicas.is_some()
    }
}

fn budgets_rules(s: &mut Schema) {
    atomic_list(s);
    add_rules(
        s,
        &[(
            "self.all(x, has(x.schedule) == has(x.duration))",
            "'schedule' must be set with 'duration'",
        )],
    );
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
}

/// A disruption budget: `nodes` is a count or a percentage of the NodePool's nodes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    #[schemars(regex(pattern = r"^((100|[0-9]{1,2})%|[0-9]+)$"))]
    pub nodes: String,
    /// Cron schedule at which the budget starts being active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
    ))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit (hours and minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = BUDGET_DURATION_PATTERN))]
    pub duration: Option<KDuration>,
    /// Disruption reasons the budget applies to; unset means all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    pub reasons: Option<Vec<DisruptionReason>>,
}

impl Budget {
    /// Nodes this budget lets be disrupted out of `total`; percentages round up
    /// like upstream. `None` when `nodes` is malformed.
    pub fn allowed(&self, total: u32) -> Option<u32> {
        if let Some(pct) = self.nodes.strip_suffix('%') {
            let pct: u64 = pct.parse().ok()?;
            Some(((u64::from(total) * pct).div_ceil(100)) as u32)
        } else {
            self.nodes.parse().ok()
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Capacity of the NodePool's nodes, summed (`cpu`, `memory`, `pods`, `nodes`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = conditions_list)]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentage_budgets_round_up() {
        let b = |n: &str| Budget {
            nodes: n.into(),
            schedule: None,
            duration: None,
            reasons: None,
        };
        assert_eq!(b("10%").allowed(5), Some(1));
        assert_eq!(b("10%").allowed(20), Some(2));
        assert_eq!(b("0%").allowed(20), Some(0));
        assert_eq!(b("3").allowed(20), Some(3));
        assert_eq!(b("x").allowed(20), None);
    }

    #[test]
    fn defaults_match_upstream() {
        let d = Disruption::default();
        assert_eq!(
            d.consolidation_policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        assert_eq!(d.budgets[0].allowed(100), Some(10));
        assert_eq!(default_expire_after().to_string(), "720h");
    }
}
