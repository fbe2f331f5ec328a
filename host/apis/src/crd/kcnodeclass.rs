//! `KCNodeClass` (`karpenter.kakaocloud.com/v1alpha1`): where and how KakaoCloud
//! nodes are built (network, root volume, bootstrap, key pair, tags, plugins).
//! Cluster-scoped like upstream NodeClasses; the spec is the install guide's.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::schema::{add_rules, conditions_list};

/// API group of the KCNodeClass, as NodePools reference it in `nodeClassRef.group`.
pub const GROUP: &str = "karpenter.kakaocloud.com";
/// Kind of the KCNodeClass, as NodePools reference it in `nodeClassRef.kind`.
pub const KIND: &str = "KCNodeClass";
/// Smallest root volume a node can boot a kubeadm worker from.
pub const MIN_ROOT_VOLUME_GIB: i32 = 30;
const DNS_SUBDOMAIN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Desired configuration of KakaoCloud worker nodes.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "karpenter.kakaocloud.com",
    version = "v1alpha1",
    kind = "KCNodeClass",
    plural = "kcnodeclasses",
    singular = "kcnodeclass",
    category = "karpenter",
    shortname = "kcnc",
    status = "KCNodeClassStatus",
    derive = "PartialEq",
    doc = "KCNodeClass is the KakaoCloud-specific configuration that NodePools reference.",
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
        name = "Version",
        type_ = "string",
        priority = 1,
        json_path = ".spec.bootstrap.kubernetesVersion"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KCNodeClassSpec {
    /// Subnets nodes are launched in: one zone per subnet.
    #[schemars(length(min = 1, max = 30))]
    pub subnet_selector_terms: Vec<SelectorTerm>,
    /// Security groups attached to every node (include the KKE worker group).
    #[schemars(length(min = 1, max = 30))]
    pub security_group_selector_terms: Vec<SelectorTerm>,
    /// Root volume of each node.
    #[serde(default)]
    pub root_volume: RootVolume,
    /// How nodes join the cluster.
    pub bootstrap: Bootstrap,
    /// SSH key pair to install on nodes; unset means no key pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub key_name: Option<String>,
    /// Extra tags set on every instance.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = tags_rules)]
    pub tags: BTreeMap<String, String>,
    /// Which plugin ConfigMaps (in the controller's namespace) serve this class;
    /// unset entries use the chart's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<PluginSelection>,
    /// Hyper-threading on the nodes: `Enabled` (the default) or `Disabled`. It is sent with
    /// every create (`is_disable_hyper_threading`, which KakaoCloud defaults to `true` when
    /// left out) and acts only on flavors that can turn it off. `Disabled` may leave a node
    /// fewer vCPUs than its flavor lists (by how much is not published), so `Enabled` keeps
    /// the catalog's capacities true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyper_threading: Option<HyperThreading>,
}

/// Whether instances run with hyper-threading.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum HyperThreading {
    #[default]
    Enabled,
    Disabled,
}

impl KCNodeClassSpec {
    /// The class's hyper-threading choice, its default filled in.
    pub fn hyper_threading(&self) -> HyperThreading {
        self.hyper_threading.unwrap_or_default()
    }
}

/// Selects a subnet or security group by ID, by name, or by tags (all must match).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = selector_term_rules)]
pub struct SelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = tags_rules)]
    pub tags: Option<BTreeMap<String, String>>,
}

fn selector_term_rules(s: &mut Schema) {
    add_rules(
        s,
        &[
            (
                "has(self.id) || has(self.name) || has(self.tags)",
                "expected at least one of 'id', 'name' or 'tags'",
            ),
            (
                "!has(self.id) || (!has(self.name) && !has(self.tags))",
                "'id' is mutually exclusive, cannot be set with 'name' or 'tags'",
            ),
        ],
    );
}

fn tags_rules(s: &mut Schema) {
    add_rules(
        s,
        &[(
            "self.all(k, k != '' && self[k] != '')",
            "empty tag keys or values aren't supported",
        )],
    );
    s.insert("maxProperties".into(), json!(50));
}

/// Root volume settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RootVolume {
    /// Size in GiB; kubeadm workers need at least 30.
    #[serde(rename = "sizeGiB")]
    #[schemars(range(min = 30, max = 16384))]
    pub size_gib: i32,
    /// Delete the volume with the instance. `false` keeps the volume (and its bill).
    #[serde(default = "default_true")]
    pub delete_on_termination: bool,
}

fn default_true() -> bool {
    true
}

impl Default for RootVolume {
    fn default() -> Self {
        Self {
            size_gib: 50,
            delete_on_termination: true,
        }
    }
}

/// How nodes are bootstrapped.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    #[serde(default)]
    pub mode: BootstrapMode,
    /// Kubernetes `major.minor` of the nodes: the control plane's minor or one below.
    #[schemars(regex(pattern = r"^\d+\.\d+$"))]
    pub kubernetes_version: String,
}

/// Bootstrap method; kubeadm join is the only one.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum BootstrapMode {
    #[default]
    Kubeadm,
}

/// Names of plugin ConfigMaps, one per policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginSelection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub instance_selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub consolidation_scorer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub userdata: Option<String>,
}

/// What the controller resolved, and whether the class can launch nodes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KCNodeClassStatus {
    /// KubernetesVersionReady, ImagesReady, SubnetsReady, SecurityGroupsReady,
    /// KeyPairReady and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = conditions_list)]
    pub conditions: Vec<Condition>,
    /// The `major.minor` nodes will run, once validated against the control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<ResolvedSubnet>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<ResolvedSecurityGroup>,
    /// The worker image for `kubernetesVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ResolvedImage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_pair: Option<ResolvedKeyPair>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSubnet {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Availability zone, e.g. `kr-central-2-a`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSecurityGroup {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedImage {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub kubernetes_version: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedKeyPair {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}
