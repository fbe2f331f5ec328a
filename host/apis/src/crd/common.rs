//! Types shared by NodePool and NodeClaim: the NodeClass reference and taints.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::schema::{LABEL_KEY_PATTERN, add_rules};

/// Points a NodePool or NodeClaim at its provider NodeClass (for us a KCNodeClass).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct NodeClassRef {
    /// API group of the NodeClass, `karpenter.kakaocloud.com`.
    #[schemars(regex(pattern = r"^[^/]*$"), transform = group_not_empty)]
    pub group: String,
    /// Kind of the NodeClass, `KCNodeClass`.
    #[schemars(transform = kind_not_empty)]
    pub kind: String,
    /// Name of the NodeClass.
    #[schemars(transform = name_not_empty)]
    pub name: String,
}

fn group_not_empty(s: &mut Schema) {
    add_rules(s, &[("self != ''", "group may not be empty")]);
}
fn kind_not_empty(s: &mut Schema) {
    add_rules(s, &[("self != ''", "kind may not be empty")]);
}
fn name_not_empty(s: &mut Schema) {
    add_rules(s, &[("self != ''", "name may not be empty")]);
}

/// Group and kind are fixed once a NodePool exists (its nodes were built for that kind).
pub(crate) fn node_class_ref_immutable_kind(s: &mut Schema) {
    add_rules(
        s,
        &[
            (
                "self.group == oldSelf.group",
                "nodeClassRef.group is immutable",
            ),
            (
                "self.kind == oldSelf.kind",
                "nodeClassRef.kind is immutable",
            ),
        ],
    );
}

/// Effect of a taint.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

/// A node taint as NodePools write it (validated like upstream Karpenter).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    #[schemars(length(min = 1), regex(pattern = LABEL_KEY_PATTERN))]
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = LABEL_KEY_PATTERN))]
    pub value: Option<String>,
    pub effect: TaintEffect,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
}

impl From<&Taint> for core::Taint {
    fn from(t: &Taint) -> Self {
        core::Taint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.as_str().to_owned(),
            time_added: t.time_added.clone(),
        }
    }
}
