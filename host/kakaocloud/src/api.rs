//! Every request and response shape of the KakaoCloud OpenAPI that we use.
//!
//! This is the one place that knows the wire format: the client serialises
//! from these types and the simulator (`tests/kakaocloud-sim`) serves them, so
//! a correction to a shape is one edit here. Sources and confidence for each
//! shape are in `docs/kakaocloud-api.md`; field names follow the public
//! `kakaoenterprise/kc-sdk-go` models (generated from KakaoCloud's OpenAPI).
//! Optional response fields are `#[serde(default)]` so an older or newer
//! server that omits them still decodes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Request paths, relative to each service's endpoint.
pub mod paths {
    /// IAM (Keystone-compatible): POST issues a token, answered in `X-Subject-Token`.
    pub const IAM_TOKENS: &str = "/identity/v3/auth/tokens";
    /// Virtual Machine (bcs).
    pub const INSTANCES: &str = "/api/v1/instances";
    pub const FLAVORS: &str = "/api/v1/flavors";
    pub const KEYPAIRS: &str = "/api/v1/keypairs";
    /// VPC.
    pub const SUBNETS: &str = "/api/v1/subnets";
    /// Network.
    pub const SECURITY_GROUPS: &str = "/api/v1/security-groups";
    /// Image.
    pub const IMAGES: &str = "/api/v1/images";
    /// Kubernetes Engine.
    pub const KE_CLUSTERS: &str = "/api/v1/clusters";
    pub const KE_VERSIONS: &str = "/api/v1/versions";
    pub const KE_IMAGES: &str = "/api/v1/images";

    /// `/api/v1/instances/{id}`.
    pub fn instance(id: &str) -> String {
        format!("{INSTANCES}/{id}")
    }

    /// `/api/v1/clusters/{name}`.
    pub fn ke_cluster(name: &str) -> String {
        format!("{KE_CLUSTERS}/{name}")
    }

    /// `/api/v1/clusters/{name}/kubeconfig` (answers YAML).
    pub fn ke_kubeconfig(name: &str) -> String {
        format!("{KE_CLUSTERS}/{name}/kubeconfig")
    }

    /// `/api/v1/clusters/{name}/node-pools`.
    pub fn ke_node_pools(cluster: &str) -> String {
        format!("{KE_CLUSTERS}/{cluster}/node-pools")
    }
}

/// Header carrying the API token on every service call.
pub const AUTH_TOKEN_HEADER: &str = "X-Auth-Token";
/// Header in which IAM returns a newly issued token.
pub const SUBJECT_TOKEN_HEADER: &str = "X-Subject-Token";

/// Longest instance name the Virtual Machine service accepts.
pub const INSTANCE_NAME_MAX: usize = 63;
/// Shortest instance name the Virtual Machine service accepts.
pub const INSTANCE_NAME_MIN: usize = 4;
/// Longest instance description, in characters.
pub const INSTANCE_DESCRIPTION_MAX: usize = 100;
/// Default page size of list calls.
pub const DEFAULT_PAGE_LIMIT: u32 = 20;

// ---------------------------------------------------------------- IAM

/// Body of `POST /identity/v3/auth/tokens` (application credential method).
#[derive(Clone, Serialize, Deserialize)]
pub struct TokenRequest {
    pub auth: TokenRequestAuth,
}

#[derive(Clone, Serialize, Deserialize)]
pub struct TokenRequestAuth {
    pub identity: TokenRequestIdentity,
}

#[derive(Clone, Serialize, Deserialize)]
pub struct TokenRequestIdentity {
    pub methods: Vec<String>,
    pub application_credential: ApplicationCredential,
}

/// The credential pair. Not `Debug`: it holds the secret.
#[derive(Clone, Serialize, Deserialize)]
pub struct ApplicationCredential {
    pub id: String,
    pub secret: String,
}

impl TokenRequest {
    pub const METHOD: &'static str = "application_credential";

    pub fn application_credential(id: &str, secret: &str) -> Self {
        TokenRequest {
            auth: TokenRequestAuth {
                identity: TokenRequestIdentity {
                    methods: vec![Self::METHOD.to_string()],
                    application_credential: ApplicationCredential {
                        id: id.to_string(),
                        secret: secret.to_string(),
                    },
                },
            },
        }
    }
}

/// Body of the token response; the token itself is in `X-Subject-Token`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenResponse {
    pub token: TokenBody,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenBody {
    /// RFC 3339.
    pub expires_at: String,
    /// RFC 3339.
    #[serde(default)]
    pub issued_at: Option<String>,
    #[serde(default)]
    pub methods: Vec<String>,
    #[serde(default)]
    pub project: Option<TokenProject>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenProject {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
}

/// Keystone-style error body of IAM.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IamErrorBody {
    pub error: IamError,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IamError {
    pub code: u16,
    pub message: String,
    #[serde(default)]
    pub title: Option<String>,
}

// ---------------------------------------------------------------- common

/// Error body of the bcs, VPC, Network, Image and Kubernetes Engine services.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

/// Error codes the simulator emits and the client recognises (inferred).
pub mod error_codes {
    pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
    pub const INSUFFICIENT_CAPACITY: &str = "InsufficientCapacity";
    pub const NOT_FOUND: &str = "NotFound";
    pub const UNAUTHORIZED: &str = "Unauthorized";
    pub const INVALID_INPUT: &str = "InvalidInput";
    pub const TOO_MANY_REQUESTS: &str = "TooManyRequests";
    pub const INTERNAL: &str = "InternalServerError";
}

/// Offset pagination block of every list response.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Pagination {
    #[serde(default)]
    pub total: Option<u32>,
    #[serde(default)]
    pub offset: Option<u32>,
    #[serde(default)]
    pub limit: Option<u32>,
}

/// A list response: items plus pagination.
pub trait Page {
    type Item;
    fn into_parts(self) -> (Vec<Self::Item>, Pagination);
}

macro_rules! page {
    ($list:ident, $field:ident, $item:ty) => {
        #[derive(Debug, Clone, Serialize, Deserialize)]
        pub struct $list {
            #[serde(default)]
            pub $field: Vec<$item>,
            #[serde(default)]
            pub pagination: Pagination,
        }

        impl Page for $list {
            type Item = $item;
            fn into_parts(self) -> (Vec<$item>, Pagination) {
                (self.$field, self.pagination)
            }
        }
    };
}

// ---------------------------------------------------------------- bcs: instances

/// Instance status as reported in `status`.
///
/// Written in Nova's upper-case spelling (`BUILD`, `ACTIVE`, `ERROR`,
/// `DELETED`, ...), which the simulator serves. Parsing is case-insensitive
/// and accepts the long forms (`building`, `Active`) too, because no public
/// source pins KakaoCloud's exact spelling (see `docs/kakaocloud-api.md`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InstanceStatus {
    Building,
    Active,
    Stopped,
    Error,
    Deleting,
    Deleted,
    /// Any status this code does not know yet; kept, not rejected.
    Other(String),
}

impl InstanceStatus {
    /// Wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            InstanceStatus::Building => "BUILD",
            InstanceStatus::Active => "ACTIVE",
            InstanceStatus::Stopped => "SHUTOFF",
            InstanceStatus::Error => "ERROR",
            InstanceStatus::Deleting => "DELETING",
            InstanceStatus::Deleted => "DELETED",
            InstanceStatus::Other(s) => s,
        }
    }

    /// Parses any accepted spelling.
    pub fn parse(raw: &str) -> InstanceStatus {
        match raw.trim().to_ascii_lowercase().as_str() {
            "build" | "building" => InstanceStatus::Building,
            "active" | "running" => InstanceStatus::Active,
            "shutoff" | "stopped" => InstanceStatus::Stopped,
            "error" => InstanceStatus::Error,
            "deleting" => InstanceStatus::Deleting,
            "deleted" | "soft_deleted" => InstanceStatus::Deleted,
            _ => InstanceStatus::Other(raw.to_string()),
        }
    }

    /// No further transition is expected without an action.
    pub fn is_terminal(&self) -> bool {
        matches!(self, InstanceStatus::Error | InstanceStatus::Deleted)
    }
}

impl std::fmt::Display for InstanceStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for InstanceStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for InstanceStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Ok(InstanceStatus::parse(&raw))
    }
}

/// Body of `POST /api/v1/instances`.
#[derive(Clone, Serialize, Deserialize)]
pub struct CreateInstanceBody {
    pub instance: CreateInstance,
}

/// Not `Debug`: `user_data` carries the bootstrap token.
#[derive(Clone, Serialize, Deserialize)]
pub struct CreateInstance {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    pub image_id: String,
    pub flavor_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    pub subnets: Vec<CreateInstanceSubnet>,
    pub volumes: Vec<CreateInstanceVolume>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_name: Option<String>,
    pub security_groups: Vec<SecurityGroupRef>,
    /// Base64 of the cloud-init document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CreateInstanceSubnet {
    pub id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CreateInstanceVolume {
    /// GiB, 1..=16384.
    pub size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_delete_on_termination: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_id: Option<String>,
}

/// Security groups are referenced by name on create.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SecurityGroupRef {
    pub name: String,
}

/// Response of `POST /api/v1/instances`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateInstanceResponse {
    pub instance: CreatedInstance,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreatedInstance {
    pub id: String,
    #[serde(default)]
    pub security_groups: Vec<SecurityGroupRef>,
}

/// Body of `PUT /api/v1/instances/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpdateInstanceBody {
    pub instance: UpdateInstance,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpdateInstance {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Response of `GET`/`PUT /api/v1/instances/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceResponse {
    pub instance: Instance,
}

/// An instance as listed or described.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Instance {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub flavor: Option<InstanceFlavor>,
    #[serde(default)]
    pub addresses: Vec<InstanceAddress>,
    #[serde(default)]
    pub image: Option<InstanceImage>,
    #[serde(default)]
    pub vm_state: Option<String>,
    #[serde(default)]
    pub status: Option<InstanceStatus>,
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub key_name: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub availability_zone: Option<String>,
    #[serde(default)]
    pub attached_volumes: Vec<AttachedVolume>,
    #[serde(default)]
    pub security_groups: Vec<InstanceSecurityGroup>,
    #[serde(default)]
    pub instance_type: Option<String>,
    /// RFC 3339.
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceFlavor {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub vcpus: Option<u32>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceAddress {
    #[serde(default)]
    pub private_ip: Option<String>,
    #[serde(default)]
    pub public_ip: Option<String>,
    #[serde(default)]
    pub network_interface_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceImage {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AttachedVolume {
    pub id: String,
    pub size: u32,
    #[serde(default)]
    pub is_delete_on_termination: Option<bool>,
    #[serde(default)]
    pub is_root: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceSecurityGroup {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
}

page!(InstanceList, instances, Instance);

// ---------------------------------------------------------------- bcs: flavors, key pairs

/// An instance type.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Flavor {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub vcpus: Option<u32>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
    #[serde(default)]
    pub architecture: Option<String>,
    #[serde(default)]
    pub manufacturer: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
    /// `vm` or `bm`.
    #[serde(default)]
    pub instance_type: Option<String>,
    #[serde(default)]
    pub instance_family: Option<String>,
    #[serde(default)]
    pub instance_size: Option<String>,
    #[serde(default)]
    pub is_burstable: Option<bool>,
    #[serde(default)]
    pub processor: Option<String>,
    #[serde(default)]
    pub availability_zone: Vec<String>,
    /// Launchable count per availability zone: the capacity signal.
    #[serde(default)]
    pub available: BTreeMap<String, u32>,
    #[serde(default)]
    pub root_gb: Option<u32>,
    /// Accelerator count and kind (`GPU`, `NPU`) when present.
    #[serde(default)]
    pub hw_count: Option<u32>,
    #[serde(default)]
    pub hw_type: Option<String>,
    #[serde(default)]
    pub hw_name: Option<String>,
}

page!(FlavorList, flavors, Flavor);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeyPair {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub fingerprint: Option<String>,
    #[serde(default)]
    pub public_key: Option<String>,
    #[serde(default, rename = "type")]
    pub key_type: Option<String>,
}

page!(KeyPairList, keypairs, KeyPair);

// ---------------------------------------------------------------- VPC, Network, Image

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Subnet {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub availability_zone: Option<String>,
    #[serde(default)]
    pub cidr_block: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub operating_status: Option<String>,
    #[serde(default)]
    pub provisioning_status: Option<String>,
    #[serde(default)]
    pub vpc_id: Option<String>,
    #[serde(default)]
    pub vpc_name: Option<String>,
}

page!(SubnetList, subnets, Subnet);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SecurityGroup {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
}

page!(SecurityGroupList, security_groups, SecurityGroup);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Image {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub visibility: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub min_disk: Option<u32>,
    #[serde(default)]
    pub instance_type: Option<String>,
    #[serde(default)]
    pub os_info: Option<ImageOsInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageOsInfo {
    #[serde(default)]
    pub distro: Option<String>,
    #[serde(default)]
    pub architecture: Option<String>,
    #[serde(default, rename = "type")]
    pub os_type: Option<String>,
}

page!(ImageList, images, Image);

// ---------------------------------------------------------------- Kubernetes Engine

/// `GET /api/v1/clusters/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterResponse {
    pub cluster: Cluster,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Cluster {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub version: ClusterVersion,
    pub status: ClusterStatus,
    #[serde(default)]
    pub failure_message: Option<String>,
    #[serde(default)]
    pub is_upgradable: bool,
    pub vpc_info: VpcInfo,
    #[serde(default)]
    pub control_plane_endpoint: Option<ControlPlaneEndpoint>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClusterVersion {
    /// `1.35`.
    pub minor_version: String,
    /// `1.35.2`.
    pub patch_version: String,
    #[serde(default)]
    pub is_deprecated: bool,
    #[serde(default)]
    pub eol: String,
    #[serde(default)]
    pub next_version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClusterStatus {
    /// `Pending`, `Provisioning`, `Provisioned`, `Updating`, `Deleting`, `Failed`.
    pub phase: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VpcInfo {
    pub id: String,
    #[serde(default)]
    pub subnets: Vec<ClusterSubnet>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClusterSubnet {
    pub id: String,
    pub availability_zone: String,
    pub cidr_block: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ControlPlaneEndpoint {
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub port: u16,
}

/// `GET /api/v1/versions`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VersionList {
    pub versions: Vec<KubernetesVersion>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KubernetesVersion {
    pub minor_version: String,
    pub patch_version: String,
    #[serde(default)]
    pub is_deprecated: bool,
    #[serde(default)]
    pub eol: String,
    #[serde(default)]
    pub next_version: String,
}

/// `GET /api/v1/images?k8s_version=` on Kubernetes Engine: worker images.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerImageList {
    pub images: Vec<WorkerImage>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorkerImage {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub is_gpu_type: bool,
    /// `vm` or `bm`.
    #[serde(default)]
    pub instance_type: String,
    #[serde(default)]
    pub kernel_version: String,
    /// e.g. `kubernetes-1.35.2`.
    #[serde(default)]
    pub key_package: String,
    #[serde(default)]
    pub os_distro: String,
    #[serde(default)]
    pub os_type: String,
    #[serde(default)]
    pub os_version: String,
}

/// `GET /api/v1/clusters/{name}/node-pools`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodePoolList {
    pub node_pools: Vec<NodePool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodePool {
    pub id: String,
    pub name: String,
    pub cluster_name: String,
    #[serde(default)]
    pub description: String,
    pub flavor: String,
    #[serde(default)]
    pub flavor_id: String,
    pub node_count: u32,
    #[serde(default)]
    pub is_gpu: bool,
    #[serde(default)]
    pub is_bare_metal: bool,
    pub image: WorkerImage,
    #[serde(default)]
    pub security_groups: Vec<String>,
    #[serde(default)]
    pub ssh_key_name: String,
    pub status: NodePoolStatus,
    pub version: String,
    pub volume_size: u32,
    pub vpc_info: VpcInfo,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodePoolStatus {
    pub phase: String,
    #[serde(default)]
    pub available_nodes: u32,
    #[serde(default)]
    pub unavailable_nodes: u32,
}

/// The parts of a Kubernetes Engine kubeconfig the controller needs: the
/// API server URL and the cluster CA (PEM), for joining nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeconfigCluster {
    pub server: String,
    pub ca_pem: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct KubeconfigDoc {
    #[serde(default)]
    clusters: Vec<KubeconfigNamedCluster>,
}

#[derive(Serialize, Deserialize)]
struct KubeconfigNamedCluster {
    name: String,
    cluster: KubeconfigClusterEntry,
}

#[derive(Serialize, Deserialize)]
struct KubeconfigClusterEntry {
    server: String,
    #[serde(rename = "certificate-authority-data", default)]
    certificate_authority_data: Option<String>,
}

/// Reads the first cluster of a kubeconfig (as `GET .../kubeconfig` returns).
pub fn parse_kubeconfig(yaml: &str) -> Result<KubeconfigCluster, String> {
    use base64::Engine as _;
    let doc: KubeconfigDoc =
        serde_yaml::from_str(yaml).map_err(|e| format!("kubeconfig is not valid YAML: {e}"))?;
    let first = doc
        .clusters
        .into_iter()
        .next()
        .ok_or("kubeconfig has no clusters")?;
    let ca_pem = match first.cluster.certificate_authority_data {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|_| "certificate-authority-data is not base64".to_string())?,
        None => Vec::new(),
    };
    Ok(KubeconfigCluster {
        server: first.cluster.server,
        ca_pem,
    })
}

/// A minimal kubeconfig for `cluster` (what the simulator serves). The user
/// entry carries no credential: KakaoCloud's kubeconfig authenticates via
/// an exec plugin with the IAM credential, which the controller never uses.
pub fn render_kubeconfig(cluster: &str, server: &str, ca_pem: &[u8]) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {cluster}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: {cluster}\n  context:\n    cluster: {cluster}\n    user: {cluster}-admin\ncurrent-context: {cluster}\nusers:\n- name: {cluster}-admin\n  user: {{}}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_round_trips() {
        let yaml = render_kubeconfig("demo", "https://10.0.0.1:6443", b"PEM DATA");
        let parsed = parse_kubeconfig(&yaml).unwrap();
        assert_eq!(parsed.server, "https://10.0.0.1:6443");
        assert_eq!(parsed.ca_pem, b"PEM DATA");
        assert!(parse_kubeconfig("clusters: []").is_err());
    }

    #[test]
    fn unknown_instance_status_is_kept() {
        let s: InstanceStatus = serde_json::from_str("\"shelved_offloaded\"").unwrap();
        assert_eq!(s, InstanceStatus::Other("shelved_offloaded".into()));
        let s: InstanceStatus = serde_json::from_str("\"active\"").unwrap();
        assert_eq!(s, InstanceStatus::Active);
        let s: InstanceStatus = serde_json::from_str("\"BUILD\"").unwrap();
        assert_eq!(s, InstanceStatus::Building);
        assert_eq!(
            serde_json::to_string(&InstanceStatus::Building).unwrap(),
            "\"BUILD\""
        );
    }

    #[test]
    fn list_without_pagination_decodes() {
        let l: InstanceList = serde_json::from_str(r#"{"instances":[{"id":"i-1"}]}"#).unwrap();
        let (items, page) = l.into_parts();
        assert_eq!(items.len(), 1);
        assert_eq!(page, Pagination::default());
    }
}
