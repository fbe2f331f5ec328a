//! Every request and response shape of the KakaoCloud OpenAPI that we use.
//!
//! This is the one place that knows the wire format: the client serialises
//! from these types and the simulator (`tests/kakaocloud-sim`) serves them, so
//! a correction to a shape is one edit here. Each type names the official model
//! it follows: the models of `kakaoenterprise/kc-sdk-go` v1.3.0 (generated from
//! KakaoCloud's OpenAPI), transcribed in `contract/official.models`, against which
//! the contract tests hold both the client and the simulator. Sources and
//! confidence per endpoint are in `docs/kakaocloud-api.md`.
//!
//! Decoding is as tolerant as the schema: a field the schema makes optional or
//! nullable is `Option` (nullable lists too: `null` is not `[]`), unknown fields
//! are ignored, and enum values this code does not know become `Other(..)`
//! (logged once), never an error. Only the fields the controller uses are
//! modelled; the simulator serves them with explicit nulls where allowed.

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

/// Body of the token response (official IAM `TokenResponse`); the token itself is in
/// `X-Subject-Token`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenResponse {
    #[serde(default)]
    pub token: TokenBody,
}

/// Official IAM `Token` (the fields used here; every field is optional in the schema).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TokenBody {
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at: Option<String>,
    #[serde(default)]
    pub methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<TokenProject>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenProject {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Keystone error body of IAM (official `KeystoneError`; no IAM operation of the SDK names
/// an error model, so this shape is the model's, not a confirmed answer).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IamErrorBody {
    #[serde(default)]
    pub error: IamError,
}

/// Official `KeystoneErrorError`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IamError {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

// ---------------------------------------------------------------- common

/// Error body of the bcs, VPC, Network, Image and Kubernetes Engine services (official
/// `ErrorResponseModel`, decoded by the SDK for 400, 401, 403, 404, 409 and 500).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// Official `ErrorResponseSubModel`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

/// FastAPI's request validation answer (official `HTTPValidationError`, status 422).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ValidationErrorBody {
    #[serde(default)]
    pub detail: Vec<ValidationError>,
}

/// Official `ValidationError`: where (`["body", "instance", "name"]`), what, and its kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ValidationError {
    pub loc: Vec<serde_json::Value>,
    pub msg: String,
    #[serde(rename = "type")]
    pub kind: String,
}

impl ValidationErrorBody {
    /// `body.instance.name: field required; ...`.
    pub fn summary(&self) -> String {
        self.detail
            .iter()
            .map(|d| {
                let loc: Vec<String> = d
                    .loc
                    .iter()
                    .map(|l| l.as_str().map_or_else(|| l.to_string(), str::to_owned))
                    .collect();
                format!("{}: {}", loc.join("."), d.msg)
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Error codes the simulator emits and the client recognises. Nothing public lists
/// KakaoCloud's codes (the schema's `code` is a free string), so these are inferred; the client
/// tells quota and capacity apart by code or message, whichever carries the word.
pub mod error_codes {
    pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
    pub const INSUFFICIENT_CAPACITY: &str = "InsufficientCapacity";
    pub const NOT_FOUND: &str = "NotFound";
    pub const UNAUTHORIZED: &str = "Unauthorized";
    pub const INVALID_INPUT: &str = "InvalidInput";
    pub const CONFLICT: &str = "Conflict";
    pub const TOO_MANY_REQUESTS: &str = "TooManyRequests";
    pub const INTERNAL: &str = "InternalServerError";
}

/// Offset pagination block of every list response (official `PaginationModel`: required in
/// each list answer, its fields optional).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Pagination {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
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

/// `null` decodes like an absent field (for fields whose default is their empty value).
pub fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

// ---------------------------------------------------------------- bcs: instances

/// Instance status as reported in `status` (a free string in the official model).
///
/// The official Terraform provider's constants are lower case (`active`, `stopped`,
/// `shelved_offloaded`, `error`), and so is what the simulator serves. No public source names
/// the states while building or deleting; `building` and `deleting` follow the `vm_state`
/// values. Parsing is case-insensitive and also accepts Nova's spellings (`BUILD`, `SHUTOFF`);
/// anything else is kept as [`InstanceStatus::Other`] and logged once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InstanceStatus {
    Building,
    Active,
    Stopped,
    Error,
    Deleting,
    Deleted,
    /// Any status this code does not know yet (e.g. `shelved_offloaded`); kept, not rejected.
    Other(String),
}

impl InstanceStatus {
    /// Wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            InstanceStatus::Building => "building",
            InstanceStatus::Active => "active",
            InstanceStatus::Stopped => "stopped",
            InstanceStatus::Error => "error",
            InstanceStatus::Deleting => "deleting",
            InstanceStatus::Deleted => "deleted",
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
            _ => {
                unknown_value("instance status", raw);
                InstanceStatus::Other(raw.to_string())
            }
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

/// Flavor and image `instance_type`: official enum `vm | bm | gpu`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InstanceKind {
    Vm,
    /// Bare metal.
    Bm,
    Gpu,
    /// A value the official enum does not list yet; kept and logged once.
    Other(String),
}

impl InstanceKind {
    pub fn as_str(&self) -> &str {
        match self {
            InstanceKind::Vm => "vm",
            InstanceKind::Bm => "bm",
            InstanceKind::Gpu => "gpu",
            InstanceKind::Other(s) => s,
        }
    }

    pub fn parse(raw: &str) -> InstanceKind {
        match raw {
            "vm" => InstanceKind::Vm,
            "bm" => InstanceKind::Bm,
            "gpu" => InstanceKind::Gpu,
            other => {
                unknown_value("instance_type", other);
                InstanceKind::Other(other.to_owned())
            }
        }
    }
}

impl Serialize for InstanceKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for InstanceKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Ok(InstanceKind::parse(&raw))
    }
}

/// Logs an enum value this code does not know, once per value (a list decoded every few
/// seconds must not flood the log).
fn unknown_value(what: &'static str, raw: &str) {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static SEEN: Mutex<BTreeSet<(&'static str, String)>> = Mutex::new(BTreeSet::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    // Bounded: a server inventing values cannot grow this without end.
    if seen.len() < 256 && seen.insert((what, raw.to_owned())) {
        tracing::warn!(
            field = what,
            value = raw,
            "KakaoCloud sent a value this version does not know; kept as is"
        );
    }
}

/// Body of `POST /api/v1/instances` (official `BodyCreateInstance`).
#[derive(Clone, Serialize, Deserialize)]
pub struct CreateInstanceBody {
    pub instance: CreateInstance,
}

/// Official `CreateInstanceModel`. Not `Debug`: `user_data` carries the bootstrap token.
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
    /// Turns hyper-threading off on flavors that can (`is_hyper_threading_disable_supported`).
    /// The schema's default is `true`, so it is always sent, chosen by the KCNodeClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_disable_hyper_threading: Option<bool>,
}

/// Official `CreateInstanceSubnetModel`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CreateInstanceSubnet {
    pub id: String,
}

/// Official `CreateInstanceVolumeModel`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CreateInstanceVolume {
    /// GiB, 1..=16384.
    pub size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_delete_on_termination: Option<bool>,
    /// `image`, `blank` or `volume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_id: Option<String>,
}

/// Security groups are referenced by name on create (official
/// `CreateInstanceSecurityGroupModel`, also in the create and update answers).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SecurityGroupRef {
    pub name: String,
}

/// Response of `POST /api/v1/instances` (official `ResponseCreateInstanceModel`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateInstanceResponse {
    pub instance: CreatedInstance,
}

/// Official `BcsInstanceV1ApiCreateInstanceModelInstanceModel`. Its `admin_pass` is a
/// credential and is deliberately not modelled (never decoded, never kept).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreatedInstance {
    pub id: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub security_groups: Vec<SecurityGroupRef>,
    /// Required by the schema (`AUTO` or `MANUAL`); unused here.
    #[serde(default)]
    pub disk_config: Option<String>,
}

/// Body of `PUT /api/v1/instances/{id}` (official `BodyUpdateInstance`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpdateInstanceBody {
    pub instance: UpdateInstance,
}

/// Official `EditInstanceModel`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpdateInstance {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Response of `GET /api/v1/instances/{id}` (official `ResponseInstanceModel`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceResponse {
    pub instance: Instance,
}

/// Response of `PUT /api/v1/instances/{id}` (official `InstanceModelResponse`): another shape
/// than `GET`'s (flavor without `id`, security groups by name, no `status` or `image`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpdatedInstanceResponse {
    pub instance: UpdatedInstance,
}

/// Official `BcsInstanceV1ApiUpdateInstanceModelInstanceModel` (the fields used here). The
/// schema requires most of them; they are `Option` so that a server leaving one out does not
/// fail a call whose change was already saved.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UpdatedInstance {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub user_id: Option<String>,
    #[serde(default)]
    pub flavor: Option<UpdatedInstanceFlavor>,
    #[serde(default)]
    pub availability_zone: Option<String>,
    #[serde(default)]
    pub vm_state: Option<String>,
    #[serde(default)]
    pub security_groups: Option<Vec<SecurityGroupRef>>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

/// Official `BcsInstanceV1ApiUpdateInstanceModelInstanceFlavorModel`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UpdatedInstanceFlavor {
    #[serde(default)]
    pub vcpus: Option<u32>,
    /// MiB.
    #[serde(default)]
    pub ram: Option<u64>,
    /// GiB.
    #[serde(default)]
    pub disk: Option<u32>,
    #[serde(default)]
    pub original_name: Option<String>,
}

/// An instance as listed or described (official `BcsInstanceV1ApiGetInstanceModelInstanceModel`
/// and `...ListInstancesModelInstanceModel`, which have the same fields).
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
    pub addresses: Option<Vec<InstanceAddress>>,
    #[serde(default)]
    pub is_hyper_threading: Option<bool>,
    #[serde(default)]
    pub image: Option<InstanceImage>,
    #[serde(default)]
    pub vm_state: Option<String>,
    #[serde(default)]
    pub task_state: Option<String>,
    /// Official enum `NOSTATE | RUNNING | PAUSED | SHUTDOWN | CRASHED | SUSPENDED`; kept as
    /// text because nothing here acts on it.
    #[serde(default)]
    pub power_state: Option<String>,
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
    pub attached_volumes: Option<Vec<AttachedVolume>>,
    #[serde(default)]
    pub security_groups: Option<Vec<InstanceSecurityGroup>>,
    /// A free string in the instance models (`vm`, `bm`, ...).
    #[serde(default)]
    pub instance_type: Option<String>,
    /// RFC 3339.
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

/// Official `...InstanceFlavorModel` of the instance models.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceFlavor {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub vcpus: Option<u32>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
    #[serde(default)]
    pub hw_type: Option<String>,
    #[serde(default)]
    pub hw_count: Option<u32>,
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
    /// Required in the `GET` and list models.
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

/// An instance type (official `BcsInstanceV1ApiListInstanceTypesModelFlavorModel`).
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
    #[serde(default)]
    pub instance_type: Option<InstanceKind>,
    #[serde(default)]
    pub instance_family: Option<String>,
    #[serde(default)]
    pub instance_size: Option<String>,
    #[serde(default)]
    pub is_burstable: Option<bool>,
    #[serde(default)]
    pub processor: Option<String>,
    #[serde(default)]
    pub availability_zone: Option<Vec<String>>,
    /// Launchable count per availability zone: the capacity signal.
    #[serde(default)]
    pub available: Option<BTreeMap<String, u32>>,
    #[serde(default)]
    pub root_gb: Option<u32>,
    /// Accelerator count, kind (`GPU`, `NPU`) and model (e.g. `A100`) when present.
    #[serde(default)]
    pub hw_count: Option<u32>,
    #[serde(default)]
    pub hw_type: Option<String>,
    #[serde(default)]
    pub hw_name: Option<String>,
    #[serde(default)]
    pub is_hyper_threading_supported: Option<bool>,
    /// Hyper-threading is off on this flavor unless asked otherwise.
    #[serde(default)]
    pub is_hyper_threading_disabled: Option<bool>,
    /// `is_disable_hyper_threading` on create has an effect.
    #[serde(default)]
    pub is_hyper_threading_disable_supported: Option<bool>,
}

impl Flavor {
    /// Zones offering this flavor (none when the server sent `null`).
    pub fn zones(&self) -> &[String] {
        self.availability_zone.as_deref().unwrap_or_default()
    }

    /// Launchable count in `zone`, if the server reported one.
    pub fn available_in(&self, zone: &str) -> Option<u32> {
        self.available.as_ref()?.get(zone).copied()
    }
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
    pub instance_type: Option<InstanceKind>,
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

// The Kubernetes Engine models make almost every field required and none of them are
// paginated. Fields the controller does not need still decode with defaults, so a server that
// leaves one out does not stop the controller.

/// `GET /api/v1/clusters/{name}` (official `GetK8sClusterResponseModel`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterResponse {
    pub cluster: Cluster,
}

/// Official `KubernetesEngineV1ApiGetClusterModelClusterResponseModel`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Cluster {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub is_allocate_fip: bool,
    pub version: ClusterVersion,
    pub status: ClusterStatus,
    #[serde(default)]
    pub failure_message: Option<String>,
    #[serde(default)]
    pub is_upgradable: bool,
    pub vpc_info: VpcInfo,
    #[serde(default)]
    pub network: Option<ClusterNetwork>,
    #[serde(default)]
    pub control_plane_endpoint: Option<ControlPlaneEndpoint>,
    #[serde(default)]
    pub creator_info: CreatorInfo,
    #[serde(default)]
    pub created_at: Option<String>,
}

/// Official `ClusterNetworkResponseModel`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClusterNetwork {
    /// `cilium` or `calico`.
    pub cni: String,
    #[serde(default)]
    pub pod_cidr: String,
    #[serde(default)]
    pub service_cidr: String,
}

/// Official `CreatorInfoResponseModel`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CreatorInfo {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub name: String,
}

/// Official `OMTInfoResponseModel`.
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

/// Official `...GetClusterModelStatusResponseModel`.
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

/// `GET /api/v1/versions` (official `GetK8sUpgradeVersionsResponseModel`).
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

/// `GET /api/v1/images?k8s_version=` on Kubernetes Engine: worker images (official
/// `GetK8sImagesResponseModel`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerImageList {
    pub images: Vec<WorkerImage>,
}

/// Official `ImageResponseModel` (and, in node pools, `ImageInfoResponseModel`, the same
/// without `k8s_version`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorkerImage {
    pub id: String,
    pub name: String,
    /// e.g. `1.35`; only in the image list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k8s_version: Option<String>,
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

/// `GET /api/v1/clusters/{name}/node-pools` (official `GetK8sClusterNodePoolsResponseModel`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodePoolList {
    pub node_pools: Vec<NodePool>,
}

/// Official `KubernetesEngineV1ApiListNodePoolsModelNodePoolResponseModel`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodePool {
    pub id: String,
    pub name: String,
    pub cluster_name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub autoscaling: NodePoolAutoscaling,
    #[serde(default)]
    pub is_cordon: bool,
    #[serde(default)]
    pub is_upgradable: bool,
    #[serde(default)]
    pub is_hyper_threading: bool,
    #[serde(default)]
    pub created_at: String,
    #[serde(default)]
    pub failure_message: Option<String>,
    #[serde(default)]
    pub labels: Vec<NodePoolLabel>,
    #[serde(default)]
    pub taints: Vec<NodePoolTaint>,
    #[serde(default)]
    pub user_data: Option<String>,
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

/// Official `...AutoscalingResponseModel` (the flag; the bounds are left out).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NodePoolAutoscaling {
    #[serde(default)]
    pub is_autoscaler_enable: bool,
}

/// Official `LabelInfoResponseModel`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodePoolLabel {
    pub key: String,
    pub value: String,
}

/// Official `...TaintInfoResponseModel`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodePoolTaint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

/// Official `...StatusInfoResponseModel`; `phase` is one of `Pending`, `ScalingUp`,
/// `ScalingDown`, `Running`, `Failed`, `Deleting`, `Updating`, `Running (Scheduling Disable)`.
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
            "\"building\""
        );
        let k: InstanceKind = serde_json::from_str("\"gpu\"").unwrap();
        assert_eq!(k, InstanceKind::Gpu);
        let k: InstanceKind = serde_json::from_str("\"npu\"").unwrap();
        assert_eq!(k, InstanceKind::Other("npu".into()));
    }

    #[test]
    fn list_without_pagination_decodes() {
        let l: InstanceList = serde_json::from_str(r#"{"instances":[{"id":"i-1"}]}"#).unwrap();
        let (items, page) = l.into_parts();
        assert_eq!(items.len(), 1);
        assert_eq!(page, Pagination::default());
    }
}
