//! The KCNodeClass controller: resolves what a class names (subnets, security
//! groups, key pair, the worker image for its Kubernetes version) through the
//! KakaoCloud API and reports it in the status, with one condition per input
//! and `Ready` over all of them.
//!
//! * [`resolve`] is the pure part: from what KakaoCloud returned to conditions
//!   and resolved IDs. Messages say what to change.
//! * [`run`] is the kube-rs `Controller`: it reconciles on every change of a
//!   class (and of the NodeClaims that use it) and every [`Context::resync`].
//! * A finalizer keeps a class while NodeClaims reference it, so nodes being
//!   launched or drained never lose their configuration.

use kk_apis::names::condition;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::{ObjectRef, ReflectHandle};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::events::{self, Events};
use crate::state::ClusterState;
use kakaocloud::{self, api};
use kk_apis::crd::conditions::{DesiredCondition, Status, set_condition};
use kk_apis::crd::kcnodeclass::{
    self, ResolvedImage, ResolvedKeyPair, ResolvedSecurityGroup, ResolvedSubnet, SelectorTerm,
};
use kk_apis::crd::{KCNodeClass, KCNodeClassSpec, KCNodeClassStatus, NodeClaim};

/// Name the controller reports events as.
pub const CONTROLLER_NAME: &str = "karpenter-kakaocloud-nodeclass";

/// What the controller needs.
pub struct Context {
    pub kube: kube::Client,
    pub kakaocloud: kakaocloud::Client,
    /// The shared cluster view (NodeClaims using a class are read here).
    pub state: ClusterState,
    /// The Kubernetes Engine cluster the nodes join.
    pub cluster_name: String,
    pub events: Events,
    /// How often a class is re-resolved when nothing changes (images and
    /// subnets change on KakaoCloud's side without telling us).
    pub resync: Duration,
    /// How often a deletion blocked by NodeClaims is checked again (NodeClaim
    /// changes also trigger it).
    pub blocked_retry: Duration,
}

impl Context {
    pub fn new(
        kube: kube::Client,
        kakaocloud: kakaocloud::Client,
        state: ClusterState,
        cluster_name: impl Into<String>,
    ) -> Self {
        let reporter = Reporter {
            controller: CONTROLLER_NAME.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            events: Events::new(events::Source::new(kube.clone(), reporter), "Resolve"),
            kube,
            kakaocloud,
            state,
            cluster_name: cluster_name.into(),
            resync: Duration::from_secs(300),
            blocked_retry: Duration::from_secs(10),
        }
    }
}

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("KakaoCloud API: {0}")]
    KakaoCloud(#[from] kakaocloud::Error),
    #[error("deletion waits for {} NodeClaim(s) using this class: {}", .0.len(), .0.join(", "))]
    InUse(Vec<String>),
    #[error("encoding status: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Finalizer(String),
}

/// What KakaoCloud returned, as [`resolve`] reads it.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The cluster, or `None` when Kubernetes Engine has no cluster of that name.
    pub cluster: Option<api::Cluster>,
    pub cluster_name: String,
    pub versions: Vec<api::KubernetesVersion>,
    /// Worker images for the class's version (empty when not looked up).
    pub images: Vec<api::WorkerImage>,
    pub subnets: Vec<api::Subnet>,
    pub security_groups: Vec<api::SecurityGroup>,
    pub key_pairs: Vec<api::KeyPair>,
}

/// The outcome of [`resolve`]: conditions (Ready last) and the status fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub conditions: Vec<DesiredCondition>,
    pub kubernetes_version: Option<String>,
    pub subnets: Vec<ResolvedSubnet>,
    pub security_groups: Vec<ResolvedSecurityGroup>,
    pub image: Option<ResolvedImage>,
    pub key_pair: Option<ResolvedKeyPair>,
}

impl Resolution {
    pub fn is_ready(&self) -> bool {
        self.conditions.iter().all(|c| c.status == Status::True)
    }

    pub fn condition(&self, type_: &str) -> Option<&DesiredCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// `major.minor` as numbers, when `v` is exactly that (no patch, no `v`).
fn parse_minor(v: &str) -> Option<(u32, u32)> {
    let (major, minor) = v.split_once('.')?;
    if major.is_empty()
        || minor.is_empty()
        || !major
            .bytes()
            .chain(minor.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The versions a class may ask for: the control plane's minor and the one
/// below, where Kubernetes Engine offers them; newest first.
pub fn allowed_versions(
    control_plane_minor: &str,
    offered: &[api::KubernetesVersion],
) -> Vec<String> {
    let Some((major, minor)) = parse_minor(control_plane_minor) else {
        return Vec::new();
    };
    let window: Vec<String> = [Some(minor), minor.checked_sub(1)]
        .into_iter()
        .flatten()
        .map(|m| format!("{major}.{m}"))
        .collect();
    if offered.is_empty() {
        return window;
    }
    window
        .into_iter()
        .filter(|w| offered.iter().any(|o| &o.minor_version == w))
        .collect()
}

fn check_version(
    spec: &KCNodeClassSpec,
    observed: &Observed,
) -> (DesiredCondition, Option<String>) {
    let wanted = spec.bootstrap.kubernetes_version.trim();
    let Some(cluster) = &observed.cluster else {
        return (
            DesiredCondition::falsy(
                condition::KUBERNETES_VERSION_READY,
                "ClusterNotFound",
                format!(
                    "Kubernetes Engine has no cluster named {:?}: check the chart's clusterName",
                    observed.cluster_name
                ),
            ),
            None,
        );
    };
    let control_plane = cluster.version.minor_version.as_str();
    let allowed = allowed_versions(control_plane, &observed.versions);
    if parse_minor(wanted).is_none() {
        return (
            DesiredCondition::falsy(
                condition::KUBERNETES_VERSION_READY,
                "InvalidVersion",
                format!(
                    "spec.bootstrap.kubernetesVersion {wanted:?} is not MAJOR.MINOR; supported versions: {}",
                    allowed.join(", ")
                ),
            ),
            None,
        );
    }
    if !allowed.iter().any(|a| a == wanted) {
        return (
            DesiredCondition::falsy(
                condition::KUBERNETES_VERSION_READY,
                "UnsupportedVersion",
                format!(
                    "spec.bootstrap.kubernetesVersion {wanted} is not supported: the control plane runs {control_plane}, \
                     nodes may run the same minor or one below; supported versions: {}",
                    allowed.join(", ")
                ),
            ),
            None,
        );
    }
    (
        DesiredCondition::truthy(
            condition::KUBERNETES_VERSION_READY,
            "Supported",
            format!("Kubernetes {wanted} is supported with control plane {control_plane}"),
        ),
        Some(wanted.to_owned()),
    )
}

/// `(major, minor, patch)` from an image's key package, e.g. `kubernetes-1.35.2`.
fn package_version(package: &str) -> Option<(u32, u32, u32)> {
    let v = package.strip_prefix("kubernetes-")?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// The worker image for `version`: a VM, non-GPU, x86-64 image whose key
/// package is that minor; the highest patch wins, then the name.
pub fn pick_image<'a>(
    version: &str,
    images: &'a [api::WorkerImage],
) -> Option<&'a api::WorkerImage> {
    let (major, minor) = parse_minor(version)?;
    images
        .iter()
        .filter(|i| !i.is_gpu_type)
        .filter(|i| i.instance_type.is_empty() || i.instance_type.eq_ignore_ascii_case("vm"))
        .filter(|i| {
            i.architecture.is_empty()
                || matches!(
                    i.architecture.to_ascii_lowercase().as_str(),
                    "x86_64" | "amd64"
                )
        })
        .filter(|i| {
            i.key_package.is_empty()
                || package_version(&i.key_package).is_some_and(|(a, b, _)| (a, b) == (major, minor))
        })
        .max_by(|a, b| {
            package_version(&a.key_package)
                .cmp(&package_version(&b.key_package))
                .then_with(|| a.name.cmp(&b.name))
        })
}

fn check_image(
    version: Option<&str>,
    wanted: &str,
    images: &[api::WorkerImage],
) -> (DesiredCondition, Option<ResolvedImage>) {
    let Some(version) = version else {
        return (
            DesiredCondition::falsy(
                condition::IMAGES_READY,
                "KubernetesVersionNotReady",
                format!(
                    "no worker image is chosen until kubernetesVersion {wanted:?} is supported"
                ),
            ),
            None,
        );
    };
    match pick_image(version, images) {
        Some(image) => (
            DesiredCondition::truthy(
                condition::IMAGES_READY,
                "Resolved",
                format!(
                    "worker image {} ({}) for Kubernetes {version}",
                    image.name, image.id
                ),
            ),
            Some(ResolvedImage {
                id: image.id.clone(),
                name: Some(image.name.clone()),
                kubernetes_version: version.to_owned(),
            }),
        ),
        None => (
            DesiredCondition::falsy(
                condition::IMAGES_READY,
                "ImageNotFound",
                format!(
                    "Kubernetes Engine offers no x86-64 VM worker image for Kubernetes {version} \
                     ({} images listed); choose another supported kubernetesVersion",
                    images.len()
                ),
            ),
            None,
        ),
    }
}

fn describe_term(term: &SelectorTerm) -> String {
    if let Some(id) = &term.id {
        format!("id {id}")
    } else if let Some(name) = &term.name {
        format!("name {name}")
    } else if let Some(tags) = &term.tags {
        let tags: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("tags {}", tags.join(","))
    } else {
        "an empty term".into()
    }
}

fn check_subnets(
    terms: &[SelectorTerm],
    observed: &Observed,
) -> (DesiredCondition, Vec<ResolvedSubnet>) {
    let mut unmatched = Vec::new();
    let mut unsupported = Vec::new();
    let mut chosen: Vec<&api::Subnet> = Vec::new();
    for term in terms {
        if term.tags.is_some() && term.id.is_none() {
            // The VPC API reports no subnet tags.
            unsupported.push(describe_term(term));
            continue;
        }
        let matches: Vec<&api::Subnet> = observed
            .subnets
            .iter()
            .filter(|s| term.id.as_ref().is_none_or(|id| &s.id == id))
            .filter(|s| {
                term.name
                    .as_ref()
                    .is_none_or(|n| s.name.as_ref() == Some(n))
            })
            .collect();
        if matches.is_empty() {
            unmatched.push(describe_term(term));
        }
        for s in matches {
            if !chosen.iter().any(|c| c.id == s.id) {
                chosen.push(s);
            }
        }
    }
    if !unsupported.is_empty() {
        return (
            DesiredCondition::falsy(
                condition::SUBNETS_READY,
                "UnsupportedSelector",
                format!(
                    "subnetSelectorTerms select by tags ({}), but KakaoCloud subnets have no tags: select by id or name",
                    unsupported.join("; ")
                ),
            ),
            Vec::new(),
        );
    }
    if !unmatched.is_empty() {
        return (
            DesiredCondition::falsy(
                condition::SUBNETS_READY,
                "SubnetNotFound",
                format!(
                    "no subnet matches subnetSelectorTerms {} ({} subnets visible to the project)",
                    unmatched.join("; "),
                    observed.subnets.len()
                ),
            ),
            Vec::new(),
        );
    }
    if let Some(cluster) = &observed.cluster {
        let foreign: Vec<String> = chosen
            .iter()
            .filter(|s| {
                s.vpc_id
                    .as_ref()
                    .is_some_and(|v| !cluster.vpc_info.id.is_empty() && *v != cluster.vpc_info.id)
            })
            .map(|s| s.id.clone())
            .collect();
        if !foreign.is_empty() {
            return (
                DesiredCondition::falsy(
                    condition::SUBNETS_READY,
                    "SubnetNotInClusterVPC",
                    format!(
                        "subnets {} are not in the cluster's VPC {}: nodes there cannot reach the control plane",
                        foreign.join(", "),
                        cluster.vpc_info.id
                    ),
                ),
                Vec::new(),
            );
        }
    }
    let resolved: Vec<ResolvedSubnet> = chosen
        .iter()
        .map(|s| ResolvedSubnet {
            id: s.id.clone(),
            name: s.name.clone(),
            zone: s.availability_zone.clone(),
        })
        .collect();
    let zones: BTreeSet<&str> = resolved.iter().filter_map(|s| s.zone.as_deref()).collect();
    (
        DesiredCondition::truthy(
            condition::SUBNETS_READY,
            "Resolved",
            format!(
                "{} subnet(s) in zone(s) {}",
                resolved.len(),
                zones.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ),
        resolved,
    )
}

/// Whether a security group carries every `key=value` tag (KakaoCloud keeps
/// tags as strings; `key=value` or a bare `key` for an empty value).
fn has_tags(group: &api::SecurityGroup, tags: &std::collections::BTreeMap<String, String>) -> bool {
    tags.iter().all(|(k, v)| {
        group.tags.iter().any(|t| match t.split_once('=') {
            Some((tk, tv)) => tk == k && tv == v,
            None => t == k && v.is_empty(),
        })
    })
}

fn check_security_groups(
    terms: &[SelectorTerm],
    groups: &[api::SecurityGroup],
) -> (DesiredCondition, Vec<ResolvedSecurityGroup>) {
    let mut unmatched = Vec::new();
    let mut chosen: Vec<&api::SecurityGroup> = Vec::new();
    for term in terms {
        let matches: Vec<&api::SecurityGroup> = groups
            .iter()
            .filter(|g| term.id.as_ref().is_none_or(|id| &g.id == id))
            .filter(|g| {
                term.name
                    .as_ref()
                    .is_none_or(|n| g.name.as_ref() == Some(n))
            })
            .filter(|g| term.tags.as_ref().is_none_or(|t| has_tags(g, t)))
            .collect();
        if matches.is_empty() {
            unmatched.push(describe_term(term));
        }
        for g in matches {
            if !chosen.iter().any(|c| c.id == g.id) {
                chosen.push(g);
            }
        }
    }
    if !unmatched.is_empty() {
        return (
            DesiredCondition::falsy(
                condition::SECURITY_GROUPS_READY,
                "SecurityGroupNotFound",
                format!(
                    "no security group matches securityGroupSelectorTerms {} ({} groups visible to the project)",
                    unmatched.join("; "),
                    groups.len()
                ),
            ),
            Vec::new(),
        );
    }
    let resolved: Vec<ResolvedSecurityGroup> = chosen
        .iter()
        .map(|g| ResolvedSecurityGroup {
            id: g.id.clone(),
            name: g.name.clone(),
        })
        .collect();
    let ids: Vec<&str> = resolved.iter().map(|g| g.id.as_str()).collect();
    (
        DesiredCondition::truthy(
            condition::SECURITY_GROUPS_READY,
            "Resolved",
            format!("{} security group(s): {}", resolved.len(), ids.join(", ")),
        ),
        resolved,
    )
}

fn check_key_pair(
    key_name: Option<&str>,
    key_pairs: &[api::KeyPair],
) -> (DesiredCondition, Option<ResolvedKeyPair>) {
    let Some(name) = key_name else {
        return (
            DesiredCondition::truthy(
                condition::KEY_PAIR_READY,
                "NotRequested",
                "spec.keyName is unset: nodes get no SSH key",
            ),
            None,
        );
    };
    match key_pairs.iter().find(|k| k.name.as_deref() == Some(name)) {
        Some(k) => (
            DesiredCondition::truthy(
                condition::KEY_PAIR_READY,
                "Resolved",
                format!("key pair {name} exists"),
            ),
            Some(ResolvedKeyPair {
                name: name.to_owned(),
                fingerprint: k.fingerprint.clone(),
            }),
        ),
        None => (
            DesiredCondition::falsy(
                condition::KEY_PAIR_READY,
                "KeyPairNotFound",
                format!(
                    "spec.keyName {name:?} is not a key pair of the project: create it in Virtual Machine > Key Pairs or unset keyName"
                ),
            ),
            None,
        ),
    }
}

/// From what KakaoCloud returned to the class's conditions and status.
pub fn resolve(spec: &KCNodeClassSpec, observed: &Observed) -> Resolution {
    let (version, kubernetes_version) = check_version(spec, observed);
    let (images, image) = check_image(
        kubernetes_version.as_deref(),
        &spec.bootstrap.kubernetes_version,
        &observed.images,
    );
    let (subnets_c, subnets) = check_subnets(&spec.subnet_selector_terms, observed);
    let (groups_c, security_groups) = check_security_groups(
        &spec.security_group_selector_terms,
        &observed.security_groups,
    );
    let (key_c, key_pair) = check_key_pair(spec.key_name.as_deref(), &observed.key_pairs);
    let mut conditions = vec![version, images, subnets_c, groups_c, key_c];
    let not_ready: Vec<String> = conditions
        .iter()
        .filter(|c| c.status != Status::True)
        .map(|c| format!("{}: {}", c.type_, c.message))
        .collect();
    conditions.push(if not_ready.is_empty() {
        DesiredCondition::truthy(condition::READY, "Ready", "the class can launch nodes")
    } else {
        DesiredCondition::falsy(condition::READY, "NotReady", not_ready.join("; "))
    });
    Resolution {
        conditions,
        kubernetes_version,
        subnets,
        security_groups,
        image,
        key_pair,
    }
}

/// Asks KakaoCloud for everything [`resolve`] reads. A missing cluster is a
/// finding (a condition), not an error; anything else failing is an error and
/// the reconcile is retried.
pub async fn observe(
    client: &kakaocloud::Client,
    cluster_name: &str,
    spec: &KCNodeClassSpec,
) -> Result<Observed, kakaocloud::Error> {
    let engine = client.kubernetes_engine();
    let cluster = match engine.cluster(cluster_name).await {
        Ok(c) => Some(c),
        Err(kakaocloud::Error::NotFound { .. }) => None,
        Err(e) => return Err(e),
    };
    let versions = engine.supported_versions().await?;
    let version = spec.bootstrap.kubernetes_version.trim();
    let images = if parse_minor(version).is_some() {
        engine.worker_images(version).await?
    } else {
        Vec::new()
    };
    let subnets = client.subnets().list().await?;
    let security_groups = client.security_groups().list().await?;
    let key_pairs = if spec.key_name.is_some() {
        client.key_pairs().list().await?
    } else {
        Vec::new()
    };
    Ok(Observed {
        cluster,
        cluster_name: cluster_name.to_owned(),
        versions,
        images,
        subnets,
        security_groups,
        key_pairs,
    })
}

/// The new status: `resolution` applied over the current conditions (so
/// `lastTransitionTime` only moves when a status flips).
pub fn next_status(
    current: Option<&KCNodeClassStatus>,
    resolution: &Resolution,
    generation: Option<i64>,
    now: &Time,
) -> KCNodeClassStatus {
    let mut conditions: Vec<Condition> = current.map(|s| s.conditions.clone()).unwrap_or_default();
    for desired in &resolution.conditions {
        set_condition(&mut conditions, desired, generation, now);
    }
    KCNodeClassStatus {
        conditions,
        kubernetes_version: resolution.kubernetes_version.clone(),
        subnets: resolution.subnets.clone(),
        security_groups: resolution.security_groups.clone(),
        image: resolution.image.clone(),
        key_pair: resolution.key_pair.clone(),
    }
}

/// A merge patch that sets every status field (absent ones to null).
fn status_patch(status: &KCNodeClassStatus) -> Result<serde_json::Value, serde_json::Error> {
    Ok(json!({
        "status": {
            "conditions": serde_json::to_value(&status.conditions)?,
            "kubernetesVersion": status.kubernetes_version,
            "subnets": serde_json::to_value(&status.subnets)?,
            "securityGroups": serde_json::to_value(&status.security_groups)?,
            "image": serde_json::to_value(&status.image)?,
            "keyPair": serde_json::to_value(&status.key_pair)?,
        }
    }))
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

async fn write_status(
    api: &Api<KCNodeClass>,
    class: &KCNodeClass,
    status: &KCNodeClassStatus,
) -> Result<(), Error> {
    if class.status.as_ref() == Some(status) {
        return Ok(());
    }
    api.patch_status(
        &class.name_any(),
        &PatchParams::default(),
        &Patch::Merge(status_patch(status)?),
    )
    .await?;
    Ok(())
}

/// NodeClaims whose `nodeClassRef` points at `class`.
fn claims_using<'a>(class: &str, claims: &'a [NodeClaim]) -> Vec<&'a NodeClaim> {
    claims
        .iter()
        .filter(|c| {
            let r = &c.spec.node_class_ref;
            r.group == kcnodeclass::GROUP && r.kind == kcnodeclass::KIND && r.name == class
        })
        .collect()
}

async fn apply(class: Arc<KCNodeClass>, ctx: &Context) -> Result<Action, Error> {
    let api: Api<KCNodeClass> = Api::all(ctx.kube.clone());
    let observed = match observe(&ctx.kakaocloud, &ctx.cluster_name, &class.spec).await {
        Ok(o) => o,
        Err(e) => {
            publish(
                ctx,
                &class,
                EventType::Warning,
                "ResolutionFailed",
                format!("KakaoCloud API: {e}"),
            );
            return Err(e.into());
        }
    };
    let resolution = resolve(&class.spec, &observed);
    let was_ready = class
        .status
        .as_ref()
        .is_some_and(|s| kk_apis::crd::conditions::is_true(&s.conditions, condition::READY));
    let status = next_status(
        class.status.as_ref(),
        &resolution,
        class.meta().generation,
        &now(),
    );
    write_status(&api, &class, &status).await?;
    if resolution.is_ready() != was_ready || class.status.is_none() {
        let (type_, reason) = if resolution.is_ready() {
            (EventType::Normal, "Ready")
        } else {
            (EventType::Warning, "NotReady")
        };
        let message = resolution
            .condition(condition::READY)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        publish(ctx, &class, type_, reason, message);
    }
    Ok(Action::requeue(ctx.resync))
}

async fn cleanup(class: Arc<KCNodeClass>, ctx: &Context) -> Result<Action, Error> {
    let all: Vec<NodeClaim> = ctx
        .state
        .nodeclaims
        .state()
        .iter()
        .map(|c| (**c).clone())
        .collect();
    let users: Vec<String> = claims_using(&class.name_any(), &all)
        .iter()
        .map(|c| c.name_any())
        .collect();
    if users.is_empty() {
        return Ok(Action::await_change());
    }
    let message = format!(
        "deletion waits for {} NodeClaim(s) using this class: {}",
        users.len(),
        users.join(", ")
    );
    let api: Api<KCNodeClass> = Api::all(ctx.kube.clone());
    let mut status = class.status.clone().unwrap_or_default();
    set_condition(
        &mut status.conditions,
        &DesiredCondition::falsy(condition::READY, "WaitingOnNodeClaims", message.clone()),
        class.meta().generation,
        &now(),
    );
    write_status(&api, &class, &status).await?;
    publish(
        ctx,
        &class,
        EventType::Normal,
        "WaitingOnNodeClaims",
        message,
    );
    Err(Error::InUse(users))
}

fn publish(ctx: &Context, class: &KCNodeClass, type_: EventType, reason: &str, note: String) {
    ctx.events
        .publish(&class.object_ref(&()), type_, reason, note);
}

#[tracing::instrument(skip_all, fields(kcnodeclass = %class.name_any()))]
async fn reconcile(class: Arc<KCNodeClass>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<KCNodeClass> = Api::all(ctx.kube.clone());
    finalizer(
        &api,
        kk_apis::names::finalizer::NODECLASS,
        class,
        |event| async {
            match event {
                finalizer::Event::Apply(class) => apply(class, &ctx).await,
                finalizer::Event::Cleanup(class) => cleanup(class, &ctx).await,
            }
        },
    )
    .await
    .map_err(|e| match e {
        finalizer::Error::ApplyFailed(inner) | finalizer::Error::CleanupFailed(inner) => inner,
        other => Error::Finalizer(other.to_string()),
    })
}

fn error_policy(class: Arc<KCNodeClass>, error: &Error, ctx: Arc<Context>) -> Action {
    match error {
        Error::InUse(_) => Action::requeue(ctx.blocked_retry),
        Error::KakaoCloud(kakaocloud::Error::Throttled {
            retry_after: Some(after),
        }) => Action::requeue(*after),
        _ => {
            tracing::warn!(class = %class.name_any(), error = %error, "reconciling KCNodeClass");
            Action::requeue(Duration::from_secs(15))
        }
    }
}

/// Runs the controller until the watch streams end (they do not, normally).
pub async fn run(ctx: Arc<Context>, feeds: (ReflectHandle<KCNodeClass>, ReflectHandle<NodeClaim>)) {
    let (classes, claims) = feeds;
    Controller::for_shared_stream(classes, ctx.state.nodeclasses.clone())
        .watches_shared_stream(claims, |claim: Arc<NodeClaim>| {
            let r = &claim.spec.node_class_ref;
            (r.group == kcnodeclass::GROUP && r.kind == kcnodeclass::KIND)
                .then(|| ObjectRef::<KCNodeClass>::new(&r.name))
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "KCNodeClass reconcile");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use kk_apis::crd::kcnodeclass::{Bootstrap, BootstrapMode, RootVolume};

    fn version(minor: &str) -> api::KubernetesVersion {
        api::KubernetesVersion {
            minor_version: minor.into(),
            patch_version: format!("{minor}.2"),
            is_deprecated: false,
            eol: String::new(),
            next_version: String::new(),
        }
    }

    fn image(id: &str, package: &str) -> api::WorkerImage {
        api::WorkerImage {
            id: id.into(),
            name: format!("ubuntu-22.04-{package}"),
            architecture: "x86_64".into(),
            is_gpu_type: false,
            k8s_version: None,
            instance_type: "vm".into(),
            kernel_version: String::new(),
            key_package: package.into(),
            os_distro: "ubuntu".into(),
            os_type: "linux".into(),
            os_version: "22.04".into(),
        }
    }

    fn cluster(minor: &str) -> api::Cluster {
        serde_json::from_value(json!({
            "id": "c-1", "name": "demo-cluster",
            "version": {"minor_version": minor, "patch_version": format!("{minor}.2")},
            "status": {"phase": "Provisioned"},
            "vpc_info": {"id": "vpc-1", "subnets": []},
        }))
        .unwrap()
    }

    fn subnet(id: &str, name: &str, zone: &str, vpc: &str) -> api::Subnet {
        serde_json::from_value(
            json!({"id": id, "name": name, "availability_zone": zone, "vpc_id": vpc}),
        )
        .unwrap()
    }

    fn group(id: &str, name: &str, tags: &[&str]) -> api::SecurityGroup {
        serde_json::from_value(json!({"id": id, "name": name, "tags": tags})).unwrap()
    }

    fn observed() -> Observed {
        Observed {
            cluster: Some(cluster("1.35")),
            cluster_name: "demo-cluster".into(),
            versions: vec![version("1.33"), version("1.34"), version("1.35")],
            images: vec![
                image("img-old", "kubernetes-1.35.1"),
                image("img-new", "kubernetes-1.35.2"),
                api::WorkerImage {
                    is_gpu_type: true,
                    ..image("img-gpu", "kubernetes-1.35.9")
                },
            ],
            subnets: vec![
                subnet("sn-a", "main-a", "kr-central-2-a", "vpc-1"),
                subnet("sn-x", "other", "kr-central-2-b", "vpc-2"),
            ],
            security_groups: vec![
                group("sg-w", "worker", &["role=worker"]),
                group("sg-x", "extra", &[]),
            ],
            key_pairs: vec![
                serde_json::from_value(
                    json!({"id": "kp-1", "name": "ops", "fingerprint": "aa:bb"}),
                )
                .unwrap(),
            ],
        }
    }

    fn term_id(id: &str) -> SelectorTerm {
        SelectorTerm {
            id: Some(id.into()),
            ..Default::default()
        }
    }

    fn spec(version: &str) -> KCNodeClassSpec {
        KCNodeClassSpec {
            subnet_selector_terms: vec![term_id("sn-a")],
            security_group_selector_terms: vec![term_id("sg-w")],
            root_volume: RootVolume::default(),
            bootstrap: Bootstrap {
                mode: BootstrapMode::Kubeadm,
                kubernetes_version: version.into(),
            },
            key_name: None,
            tags: Default::default(),
            plugins: None,
            hyper_threading: None,
        }
    }

    fn reason<'a>(r: &'a Resolution, type_: &str) -> (&'a str, bool) {
        let c = r.condition(type_).unwrap();
        (c.reason.as_str(), c.status == Status::True)
    }

    #[test]
    fn all_six_true_with_resolved_ids() {
        let r = resolve(&spec("1.35"), &observed());
        assert!(r.is_ready(), "{:#?}", r.conditions);
        assert_eq!(r.conditions.len(), 6);
        assert_eq!(r.conditions.last().unwrap().type_, condition::READY);
        assert_eq!(
            r.image.as_ref().unwrap().id,
            "img-new",
            "highest non-GPU patch wins"
        );
        assert_eq!(r.subnets[0].zone.as_deref(), Some("kr-central-2-a"));
        assert_eq!(r.security_groups[0].id, "sg-w");
        assert_eq!(
            reason(&r, condition::KEY_PAIR_READY),
            ("NotRequested", true)
        );
        assert_eq!(r.kubernetes_version.as_deref(), Some("1.35"));
    }

    #[test]
    fn one_minor_below_is_supported_two_is_not() {
        let mut o = observed();
        o.images = vec![image("img-134", "kubernetes-1.34.4")];
        let r = resolve(&spec("1.34"), &o);
        assert_eq!(
            reason(&r, condition::KUBERNETES_VERSION_READY),
            ("Supported", true)
        );
        assert_eq!(r.image.unwrap().id, "img-134");

        let r = resolve(&spec("1.33"), &o);
        assert_eq!(
            reason(&r, condition::KUBERNETES_VERSION_READY),
            ("UnsupportedVersion", false)
        );
        let message = &r
            .condition(condition::KUBERNETES_VERSION_READY)
            .unwrap()
            .message;
        assert!(message.contains("1.35, 1.34"), "{message}");
        assert_eq!(
            reason(&r, condition::IMAGES_READY),
            ("KubernetesVersionNotReady", false)
        );
        assert_eq!(reason(&r, condition::READY), ("NotReady", false));
        assert!(
            r.condition(condition::READY)
                .unwrap()
                .message
                .contains("UnsupportedVersion")
                || r.condition(condition::READY)
                    .unwrap()
                    .message
                    .contains("1.33")
        );

        let r = resolve(&spec("1.36"), &o);
        assert_eq!(
            reason(&r, condition::KUBERNETES_VERSION_READY),
            ("UnsupportedVersion", false)
        );
    }

    #[test]
    fn version_with_patch_is_invalid() {
        let r = resolve(&spec("1.35.2"), &observed());
        assert_eq!(
            reason(&r, condition::KUBERNETES_VERSION_READY),
            ("InvalidVersion", false)
        );
    }

    #[test]
    fn missing_cluster_is_reported() {
        let mut o = observed();
        o.cluster = None;
        let r = resolve(&spec("1.35"), &o);
        assert_eq!(
            reason(&r, condition::KUBERNETES_VERSION_READY),
            ("ClusterNotFound", false)
        );
        assert!(
            r.condition(condition::KUBERNETES_VERSION_READY)
                .unwrap()
                .message
                .contains("demo-cluster")
        );
    }

    #[test]
    fn no_image_for_version() {
        let mut o = observed();
        o.images.retain(|i| i.is_gpu_type);
        let r = resolve(&spec("1.35"), &o);
        assert_eq!(
            reason(&r, condition::IMAGES_READY),
            ("ImageNotFound", false)
        );
    }

    #[test]
    fn unknown_subnet_and_foreign_vpc() {
        let mut s = spec("1.35");
        s.subnet_selector_terms = vec![term_id("sn-missing")];
        let r = resolve(&s, &observed());
        assert_eq!(
            reason(&r, condition::SUBNETS_READY),
            ("SubnetNotFound", false)
        );
        assert!(
            r.condition(condition::SUBNETS_READY)
                .unwrap()
                .message
                .contains("sn-missing")
        );
        assert!(r.subnets.is_empty());

        s.subnet_selector_terms = vec![term_id("sn-x")];
        let r = resolve(&s, &observed());
        assert_eq!(
            reason(&r, condition::SUBNETS_READY),
            ("SubnetNotInClusterVPC", false)
        );

        s.subnet_selector_terms = vec![SelectorTerm {
            name: Some("main-a".into()),
            ..Default::default()
        }];
        let r = resolve(&s, &observed());
        assert_eq!(reason(&r, condition::SUBNETS_READY), ("Resolved", true));
        assert_eq!(r.subnets[0].id, "sn-a");

        s.subnet_selector_terms = vec![SelectorTerm {
            tags: Some([("a".to_owned(), "b".to_owned())].into()),
            ..Default::default()
        }];
        let r = resolve(&s, &observed());
        assert_eq!(
            reason(&r, condition::SUBNETS_READY),
            ("UnsupportedSelector", false)
        );
    }

    #[test]
    fn security_groups_by_id_name_and_tags() {
        let mut s = spec("1.35");
        s.security_group_selector_terms = vec![term_id("sg-w"), term_id("sg-gone")];
        let r = resolve(&s, &observed());
        assert_eq!(
            reason(&r, condition::SECURITY_GROUPS_READY),
            ("SecurityGroupNotFound", false)
        );
        assert!(
            r.condition(condition::SECURITY_GROUPS_READY)
                .unwrap()
                .message
                .contains("sg-gone")
        );

        s.security_group_selector_terms = vec![
            SelectorTerm {
                tags: Some([("role".to_owned(), "worker".to_owned())].into()),
                ..Default::default()
            },
            SelectorTerm {
                name: Some("extra".into()),
                ..Default::default()
            },
        ];
        let r = resolve(&s, &observed());
        assert_eq!(
            reason(&r, condition::SECURITY_GROUPS_READY),
            ("Resolved", true)
        );
        let ids: Vec<&str> = r.security_groups.iter().map(|g| g.id.as_str()).collect();
        assert_eq!(ids, ["sg-w", "sg-x"]);
    }

    #[test]
    fn key_pair_must_exist_when_named() {
        let mut s = spec("1.35");
        s.key_name = Some("ops".into());
        let r = resolve(&s, &observed());
        assert_eq!(reason(&r, condition::KEY_PAIR_READY), ("Resolved", true));
        assert_eq!(r.key_pair.unwrap().fingerprint.as_deref(), Some("aa:bb"));
        s.key_name = Some("nobody".into());
        let r = resolve(&s, &observed());
        assert_eq!(
            reason(&r, condition::KEY_PAIR_READY),
            ("KeyPairNotFound", false)
        );
        assert!(!r.is_ready());
    }

    #[test]
    fn status_keeps_transition_times_when_nothing_flips() {
        let r = resolve(&spec("1.35"), &observed());
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(100).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(200).unwrap());
        let first = next_status(None, &r, Some(1), &t0);
        let second = next_status(Some(&first), &r, Some(1), &t1);
        assert_eq!(first, second);
        let broken = resolve(&spec("1.30"), &observed());
        let third = next_status(Some(&second), &broken, Some(2), &t1);
        let ready = third
            .conditions
            .iter()
            .find(|c| c.type_ == condition::READY)
            .unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.last_transition_time, t1);
        assert!(third.image.is_none());
        let patch = status_patch(&third).unwrap();
        assert!(
            patch["status"]["image"].is_null(),
            "cleared fields are nulled in the merge patch"
        );
    }

    #[test]
    fn allowed_versions_window() {
        let offered = [version("1.34"), version("1.35")];
        assert_eq!(allowed_versions("1.35", &offered), ["1.35", "1.34"]);
        assert_eq!(allowed_versions("1.35", &[version("1.35")]), ["1.35"]);
        assert_eq!(allowed_versions("1.35", &[]), ["1.35", "1.34"]);
        assert!(allowed_versions("garbage", &offered).is_empty());
    }
}
