//! `NodeClaim` (`karpenter.sh/v1`): one node the controller has decided to launch.
//! The spec is immutable; the status records the instance and its Node.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::common::{NodeClassRef, Taint};
use super::duration::{KDuration, NillableDuration};
use super::nodepool::default_expire_after;
use super::requirement::{Requirement, requirements_rules};
use super::schema::{add_rules, atomic_list, conditions_list};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    singular = "nodeclaim",
    category = "karpenter",
    status = "NodeClaimStatus",
    derive = "PartialEq",
    doc = "NodeClaim is the Schema for the NodeClaims API",
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".metadata.labels.node\\.kubernetes\\.io/instance-type"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = ".metadata.labels.karpenter\\.sh/capacity-type"
    ),
    printcolumn(
        name = "Zone",
        type_ = "string",
        json_path = ".metadata.labels.topology\\.kubernetes\\.io/zone"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeName"),
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
        name = "ImageID",
        type_ = "string",
        priority = 1,
        json_path = ".status.imageID"
    ),
    printcolumn(
        name = "ID",
        type_ = "string",
        priority = 1,
        json_path = ".status.providerID"
    ),
    printcolumn(
        name = "NodePool",
        type_ = "string",
        priority = 1,
        json_path = ".metadata.labels.karpenter\\.sh/nodepool"
    ),
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        priority = 1,
        json_path = ".spec.nodeClassRef.name"
    ),
    printcolumn(
        name = "Drifted",
        type_ = "string",
        priority = 1,
        json_path = ".status.conditions[?(@.type==\"Drifted\")].status"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = spec_immutable)]
pub struct NodeClaimSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = atomic_list)]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = atomic_list)]
    pub startup_taints: Vec<Taint>,
    #[schemars(transform = requirements_rules)]
    pub requirements: Vec<Requirement>,
    /// Resources the pods packed onto this claim request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequests>,
    pub node_class_ref: NodeClassRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<KDuration>,
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
}

fn spec_immutable(s: &mut Schema) {
    add_rules(s, &[("self == oldSelf", "spec is immutable")]);
}

impl NodeClaim {
    /// `status.conditions`, empty before the first status write.
    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map_or(&[], |s| s.conditions.as_slice())
    }

    /// Whether a Node has registered for it (`status.nodeName` is set).
    pub fn is_registered(&self) -> bool {
        self.status.as_ref().is_some_and(|s| s.node_name.is_some())
    }

    /// `(zone, instance id)` of its launched instance, from `status.providerID`.
    pub fn instance(&self) -> Option<(&str, &str)> {
        self.status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(crate::provider_id::parse_provider_id)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ResourceRequests {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(rename = "imageID", default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Launched, Registered, Initialized, Ready, and the disruption conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = conditions_list)]
    pub conditions: Vec<Condition>,
    /// Last time a pod was bound to or removed from the node (consolidateAfter counts from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}
