//! State and HTTP handlers of the simulator.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use kakaocloud::api::{self, error_codes, paths};
use kakaocloud::naming;
use rand::Rng;
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::catalog::{self, FlavorSeed, SubnetSeed};
use crate::faults::{FaultRequest, Faults, Queued};
use crate::{BootHook, BootedFlavor, BootedInstance, SimConfig, routes};

type Params = Query<HashMap<String, String>>;

struct TokenEntry {
    project: usize,
    expires: Instant,
}

struct SimInstance {
    instance: api::Instance,
    user_data: Option<String>,
    flavor: FlavorSeed,
}

struct ProjectState {
    subnets: Vec<SubnetSeed>,
    instances: Vec<SimInstance>,
    deleted: Vec<SimInstance>,
}

struct State {
    tokens: HashMap<String, TokenEntry>,
    projects: Vec<ProjectState>,
    /// Launchable count per (flavor ID, zone).
    available: BTreeMap<(String, String), u32>,
    next_host: u32,
}

pub(crate) struct Shared {
    pub config: SimConfig,
    pub base_url: String,
    pub faults: Faults,
    state: Mutex<State>,
    counts: Mutex<BTreeMap<String, usize>>,
    hook: RwLock<Option<Arc<BootHook>>>,
    boots: Mutex<Vec<JoinHandle<()>>>,
    /// Default project's control-plane endpoint and CA, when set at runtime.
    cluster_override: Mutex<Option<(String, u16, String)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub fn new(config: SimConfig, base_url: String) -> anyhow::Result<Shared> {
        let mut available = BTreeMap::new();
        for f in &config.flavors {
            for z in &f.zones {
                available.insert((f.id.clone(), z.clone()), f.available);
            }
        }
        for p in &config.projects {
            anyhow::ensure!(
                config
                    .versions
                    .iter()
                    .any(|v| v.minor == p.cluster.kubernetes_version),
                "project {}: cluster version {} is not one of the simulated versions",
                p.id,
                p.cluster.kubernetes_version
            );
        }
        let projects = config
            .projects
            .iter()
            .map(|p| ProjectState {
                subnets: catalog::default_subnets(&p.id),
                instances: Vec::new(),
                deleted: Vec::new(),
            })
            .collect();
        Ok(Shared {
            base_url,
            faults: Faults::default(),
            state: Mutex::new(State {
                tokens: HashMap::new(),
                projects,
                available,
                next_host: 10,
            }),
            counts: Mutex::new(BTreeMap::new()),
            hook: RwLock::new(None),
            boots: Mutex::new(Vec::new()),
            cluster_override: Mutex::new(None),
            config,
        })
    }

    pub fn set_hook(&self, hook: Option<Arc<BootHook>>) {
        *self.hook.write().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    pub fn instances(&self, with_deleted: bool) -> Vec<api::Instance> {
        let s = lock(&self.state);
        let mut out = Vec::new();
        for p in &s.projects {
            out.extend(p.instances.iter().map(|i| i.instance.clone()));
            if with_deleted {
                out.extend(p.deleted.iter().map(|i| i.instance.clone()));
            }
        }
        out
    }

    pub fn user_data(&self, id: &str) -> Option<String> {
        let s = lock(&self.state);
        s.projects
            .iter()
            .flat_map(|p| p.instances.iter().chain(p.deleted.iter()))
            .find(|i| i.instance.id == id)
            .and_then(|i| i.user_data.clone())
    }

    pub fn request_count(&self, route: &str) -> usize {
        lock(&self.counts).get(route).copied().unwrap_or(0)
    }

    pub fn request_counts(&self) -> BTreeMap<String, usize> {
        lock(&self.counts).clone()
    }

    pub fn set_cluster_endpoint(&self, host: &str, port: u16, ca_pem: &str) {
        *lock(&self.cluster_override) = Some((host.to_string(), port, ca_pem.to_string()));
    }

    pub fn set_available(&self, flavor: &str, zone: &str, count: u32) {
        let Some(f) = self.find_flavor(flavor) else {
            return;
        };
        lock(&self.state)
            .available
            .insert((f.id.clone(), zone.to_string()), count);
    }

    pub fn revoke_tokens(&self) {
        lock(&self.state).tokens.clear();
    }

    pub fn stop_boots(&self) {
        for task in lock(&self.boots).drain(..) {
            task.abort();
        }
    }

    fn find_flavor(&self, key: &str) -> Option<&FlavorSeed> {
        self.config
            .flavors
            .iter()
            .find(|f| f.id == key || f.name == key)
    }

    fn count(&self, route: &str) {
        *lock(&self.counts).entry(route.to_string()).or_default() += 1;
    }

    /// Project of a valid token, or the 401 to answer.
    fn authenticate(&self, headers: &HeaderMap) -> Result<usize, Response> {
        let token = headers
            .get(api::AUTH_TOKEN_HEADER)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                error(
                    StatusCode::UNAUTHORIZED,
                    error_codes::UNAUTHORIZED,
                    "missing X-Auth-Token",
                )
            })?;
        let s = lock(&self.state);
        match s.tokens.get(token) {
            Some(entry) if Instant::now() < entry.expires => Ok(entry.project),
            Some(_) => Err(error(
                StatusCode::UNAUTHORIZED,
                error_codes::UNAUTHORIZED,
                "token expired",
            )),
            None => Err(error(
                StatusCode::UNAUTHORIZED,
                error_codes::UNAUTHORIZED,
                "invalid token",
            )),
        }
    }

    fn cluster_endpoint(&self, project: usize) -> (String, u16, String) {
        if project == 0
            && let Some(o) = lock(&self.cluster_override).clone()
        {
            return o;
        }
        let c = &self.config.projects[project].cluster;
        (
            c.control_plane_host.clone(),
            c.control_plane_port,
            c.ca_pem.clone(),
        )
    }
}

// ---------------------------------------------------------------- responses

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = api::ErrorBody {
        error: api::ErrorDetail {
            code: code.to_string(),
            message: message.to_string(),
        },
    };
    (status, axum::Json(body)).into_response()
}

fn iam_error(status: StatusCode, title: &str, message: &str) -> Response {
    let body = api::IamErrorBody {
        error: api::IamError {
            code: status.as_u16(),
            message: message.to_string(),
            title: Some(title.to_string()),
        },
    };
    (status, axum::Json(body)).into_response()
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    (status, axum::Json(value)).into_response()
}

fn invalid(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, error_codes::INVALID_INPUT, message)
}

fn not_found(what: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        error_codes::NOT_FOUND,
        &format!("{what} not found"),
    )
}

/// A response whose body fails: the client sees the connection drop.
fn dropped() -> Response {
    let stream = futures::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other(
            "connection dropped by fault injection",
        ))
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn fault_response(fault: &Queued) -> Response {
    match fault {
        Queued::Throttle(after) => {
            let mut r = error(
                StatusCode::TOO_MANY_REQUESTS,
                error_codes::TOO_MANY_REQUESTS,
                "rate limit exceeded",
            );
            let value = if after.subsec_millis() == 0 {
                after.as_secs().to_string()
            } else {
                format!("{:.3}", after.as_secs_f64())
            };
            if let Ok(v) = HeaderValue::from_str(&value) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            r
        }
        Queued::ServerError(status) => {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            error(status, error_codes::INTERNAL, "injected server error")
        }
        _ => dropped(),
    }
}

/// Counts the request, applies latency and queued faults around `handler`.
async fn run<Fut>(shared: &Shared, route: &str, handler: Fut) -> Response
where
    Fut: Future<Output = Response>,
{
    shared.count(route);
    let latency = shared.faults.latency_of(route);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match shared.faults.take(route) {
        Some(fault) if fault.before_commit() => fault_response(&fault),
        Some(Queued::DelayAfterCommit(delay)) => {
            let response = handler.await;
            tokio::time::sleep(delay).await;
            response
        }
        Some(_) => {
            let _committed = handler.await;
            dropped()
        }
        None => handler.await,
    }
}

fn paginate<T>(
    items: Vec<T>,
    query: &HashMap<String, String>,
    config: &SimConfig,
) -> Result<(Vec<T>, api::Pagination), Response> {
    let parse = |key: &str, default: u32| -> Result<u32, Response> {
        match query.get(key) {
            None => Ok(default),
            Some(raw) => raw
                .parse::<u32>()
                .map_err(|_| invalid(&format!("{key} must be a non-negative integer"))),
        }
    };
    let limit = parse("limit", config.default_page_limit)?;
    if limit == 0 {
        return Err(invalid("limit must be at least 1"));
    }
    let limit = limit.min(config.max_page_limit);
    let offset = parse("offset", 0)?;
    let total = u32::try_from(items.len()).unwrap_or(u32::MAX);
    let page: Vec<T> = items
        .into_iter()
        .skip(offset as usize)
        .take(limit as usize)
        .collect();
    Ok((
        page,
        api::Pagination {
            total: Some(total),
            offset: Some(offset),
            limit: Some(limit),
        },
    ))
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

fn random_uuid() -> String {
    let mut rng = rand::rng();
    let a: u32 = rng.random();
    let b: u16 = rng.random();
    let c: u16 = rng.random::<u16>() & 0x0fff;
    let d: u16 = (rng.random::<u16>() & 0x3fff) | 0x8000;
    let e: u64 = rng.random::<u64>() & 0xffff_ffff_ffff;
    format!("{a:08x}-{b:04x}-4{c:03x}-{d:04x}-{e:012x}")
}

fn sg_id(project: &str, name: &str) -> String {
    format!("sg-{project}-{name}")
}

// ---------------------------------------------------------------- router

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let iam = Router::new().route(paths::IAM_TOKENS, post(issue_token));
    let bcs = Router::new()
        .route(paths::INSTANCES, get(list_instances).post(create_instance))
        .route(
            &format!("{}/{{id}}", paths::INSTANCES),
            get(get_instance)
                .put(update_instance)
                .delete(delete_instance),
        )
        .route(paths::FLAVORS, get(list_flavors))
        .route(paths::KEYPAIRS, get(list_keypairs));
    let vpc = Router::new().route(paths::SUBNETS, get(list_subnets));
    let network = Router::new().route(paths::SECURITY_GROUPS, get(list_security_groups));
    let image = Router::new().route(paths::IMAGES, get(list_images));
    let ke = Router::new()
        .route(
            &format!("{}/{{name}}", paths::KE_CLUSTERS),
            get(get_cluster),
        )
        .route(
            &format!("{}/{{name}}/kubeconfig", paths::KE_CLUSTERS),
            get(get_kubeconfig),
        )
        .route(
            &format!("{}/{{name}}/node-pools", paths::KE_CLUSTERS),
            get(list_node_pools),
        )
        .route(paths::KE_VERSIONS, get(list_versions))
        .route(paths::KE_IMAGES, get(list_worker_images));
    let admin = Router::new()
        .route("/faults", post(admin_faults))
        .route("/instances", get(admin_instances))
        .route("/requests", get(admin_requests))
        .route("/endpoints", get(admin_endpoints));
    Router::new()
        .nest("/iam", iam)
        .nest("/bcs", bcs)
        .nest("/vpc", vpc)
        .nest("/network", network)
        .nest("/image", image)
        .nest("/kubernetes-engine", ke)
        .nest("/admin", admin)
        .fallback(|| async { not_found("route") })
        .with_state(shared)
}

type S = AxState<Arc<Shared>>;

// ---------------------------------------------------------------- IAM

async fn issue_token(AxState(shared): S, headers: HeaderMap, body: Bytes) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::TOKEN, async move {
        // IAM requires `Content-Type: application/json` on token requests.
        let json_body = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim()
                    .to_ascii_lowercase()
                    .starts_with("application/json")
            });
        if !json_body {
            return iam_error(
                StatusCode::BAD_REQUEST,
                "Bad Request",
                "Content-Type must be application/json",
            );
        }
        let Ok(req) = serde_json::from_slice::<api::TokenRequest>(&body) else {
            return iam_error(
                StatusCode::BAD_REQUEST,
                "Bad Request",
                "malformed token request",
            );
        };
        let identity = &req.auth.identity;
        if !identity
            .methods
            .iter()
            .any(|m| m == api::TokenRequest::METHOD)
        {
            return iam_error(
                StatusCode::BAD_REQUEST,
                "Bad Request",
                "unsupported auth method",
            );
        }
        let cred = &identity.application_credential;
        let Some(project) = s
            .config
            .projects
            .iter()
            .position(|p| p.credential_id == cred.id && p.credential_secret == cred.secret)
        else {
            return iam_error(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "The request you have made requires authentication.",
            );
        };
        let token: String = {
            let mut rng = rand::rng();
            (0..48)
                .map(|_| format!("{:x}", rng.random_range(0..16u8)))
                .collect()
        };
        let issued = jiff::Timestamp::now();
        let expires = issued.checked_add(s.config.token_ttl).unwrap_or(issued);
        lock(&s.state).tokens.insert(
            token.clone(),
            TokenEntry {
                project,
                expires: Instant::now() + s.config.token_ttl,
            },
        );
        let seed = &s.config.projects[project];
        let body = api::TokenResponse {
            token: api::TokenBody {
                expires_at: expires.to_string(),
                issued_at: Some(issued.to_string()),
                methods: vec![api::TokenRequest::METHOD.to_string()],
                project: Some(api::TokenProject {
                    id: seed.id.clone(),
                    name: Some(seed.name.clone()),
                }),
            },
        };
        let mut response = json(StatusCode::CREATED, &body);
        if let Ok(v) = HeaderValue::from_str(&token) {
            response.headers_mut().insert(api::SUBJECT_TOKEN_HEADER, v);
        }
        response
    })
    .await
}

// ---------------------------------------------------------------- instances

async fn list_instances(AxState(shared): S, headers: HeaderMap, Query(q): Params) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::INSTANCES_LIST, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let items: Vec<api::Instance> = {
            let st = lock(&s.state);
            st.projects[project]
                .instances
                .iter()
                .map(|i| &i.instance)
                .filter(|i| {
                    q.get("name")
                        .is_none_or(|n| i.name.as_deref().unwrap_or("").contains(n.as_str()))
                        && q.get("id").is_none_or(|id| &i.id == id)
                        && q.get("availability_zone")
                            .is_none_or(|z| i.availability_zone.as_ref() == Some(z))
                        && q.get("status").is_none_or(|st| {
                            i.status
                                .as_ref()
                                .is_some_and(|have| *have == api::InstanceStatus::parse(st))
                        })
                })
                .cloned()
                .collect()
        };
        match paginate(items, &q, &s.config) {
            Ok((instances, pagination)) => json(
                StatusCode::OK,
                &api::InstanceList {
                    instances,
                    pagination,
                },
            ),
            Err(r) => r,
        }
    })
    .await
}

async fn get_instance(AxState(shared): S, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::INSTANCES_GET, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let st = lock(&s.state);
        match st.projects[project]
            .instances
            .iter()
            .find(|i| i.instance.id == id)
        {
            Some(i) => json(
                StatusCode::OK,
                &api::InstanceResponse {
                    instance: i.instance.clone(),
                },
            ),
            None => not_found(&format!("instance {id}")),
        }
    })
    .await
}

async fn update_instance(
    AxState(shared): S,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::INSTANCES_UPDATE, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let Ok(req) = serde_json::from_slice::<api::UpdateInstanceBody>(&body) else {
            return invalid("malformed update request");
        };
        if let Some(name) = &req.instance.name
            && !naming::is_valid_instance_name(name)
        {
            return invalid("invalid instance name");
        }
        if let Some(d) = &req.instance.description
            && d.chars().count() > api::INSTANCE_DESCRIPTION_MAX
        {
            return invalid(&format!(
                "description is longer than {} characters",
                api::INSTANCE_DESCRIPTION_MAX
            ));
        }
        let mut st = lock(&s.state);
        let Some(i) = st.projects[project]
            .instances
            .iter_mut()
            .find(|i| i.instance.id == id)
        else {
            return not_found(&format!("instance {id}"));
        };
        if let Some(name) = req.instance.name {
            i.instance.name = Some(name);
        }
        if let Some(d) = req.instance.description {
            i.instance.description = Some(d);
        }
        i.instance.updated_at = Some(now_rfc3339());
        json(
            StatusCode::OK,
            &api::InstanceResponse {
                instance: i.instance.clone(),
            },
        )
    })
    .await
}

async fn delete_instance(
    AxState(shared): S,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::INSTANCES_DELETE, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let mut st = lock(&s.state);
        let Some(pos) = st.projects[project]
            .instances
            .iter()
            .position(|i| i.instance.id == id)
        else {
            return not_found(&format!("instance {id}"));
        };
        let mut gone = st.projects[project].instances.remove(pos);
        gone.instance.status = Some(api::InstanceStatus::Deleted);
        gone.instance.vm_state = Some("deleted".into());
        gone.instance.updated_at = Some(now_rfc3339());
        if let Some(zone) = gone.instance.availability_zone.clone()
            && let Some(n) = st.available.get_mut(&(gone.flavor.id.clone(), zone))
        {
            *n = n.saturating_add(1);
        }
        st.projects[project].deleted.push(gone);
        StatusCode::ACCEPTED.into_response()
    })
    .await
}

async fn create_instance(AxState(shared): S, headers: HeaderMap, body: Bytes) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::INSTANCES_CREATE, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let req = match serde_json::from_slice::<api::CreateInstanceBody>(&body) {
            Ok(r) => r.instance,
            Err(_) => return invalid("malformed create request"),
        };
        match create(&s, project, req) {
            Ok((instance, id)) => {
                schedule_boot(&s, id);
                json(StatusCode::ACCEPTED, &instance)
            }
            Err(r) => r,
        }
    })
    .await
}

fn create(
    s: &Arc<Shared>,
    project: usize,
    req: api::CreateInstance,
) -> Result<(api::CreateInstanceResponse, String), Response> {
    let seed = &s.config.projects[project];
    if !naming::is_valid_instance_name(&req.name) {
        return Err(invalid("invalid instance name"));
    }
    if req.count.is_some_and(|c| c != 1) {
        return Err(invalid("only count 1 is supported"));
    }
    if req
        .description
        .as_ref()
        .is_some_and(|d| d.chars().count() > api::INSTANCE_DESCRIPTION_MAX)
    {
        return Err(invalid("description too long"));
    }
    // By ID only, as the real API: a controller passing a flavor *name*
    // must fail here, not in production.
    let flavor = s
        .config
        .flavors
        .iter()
        .find(|f| f.id == req.flavor_id)
        .cloned()
        .ok_or_else(|| invalid("unknown flavor_id"))?;
    let image_name = image_name(s, &req.image_id).ok_or_else(|| invalid("unknown image_id"))?;
    let [subnet_ref] = req.subnets.as_slice() else {
        return Err(invalid("exactly one subnet is required"));
    };
    let [volume] = req.volumes.as_slice() else {
        return Err(invalid("exactly one (root) volume is required"));
    };
    if !(1..=16384).contains(&volume.size) {
        return Err(invalid("volume size must be 1..=16384 GiB"));
    }
    if let Some(key) = &req.key_name
        && !seed.key_pairs.contains(key)
    {
        return Err(invalid(&format!("key pair {key} does not exist")));
    }
    for sg in &req.security_groups {
        if !seed.security_groups.contains(&sg.name) {
            return Err(invalid(&format!(
                "security group {} does not exist",
                sg.name
            )));
        }
    }
    let user_data = match &req.user_data {
        None => None,
        Some(b64) => match base64::engine::general_purpose::STANDARD.decode(b64) {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(_) => return Err(invalid("user_data is not base64")),
        },
    };
    let mut st = lock(&s.state);
    let subnet = st.projects[project]
        .subnets
        .iter()
        .find(|sn| sn.id == subnet_ref.id)
        .cloned()
        .ok_or_else(|| invalid("unknown subnet"))?;
    let zone = req
        .availability_zone
        .clone()
        .unwrap_or_else(|| subnet.zone.clone());
    if zone != subnet.zone {
        return Err(invalid(
            "availability_zone does not match the subnet's zone",
        ));
    }
    if !flavor.zones.contains(&zone) {
        return Err(error(
            StatusCode::CONFLICT,
            error_codes::INSUFFICIENT_CAPACITY,
            &format!(
                "insufficient capacity: {} is not offered in {zone}",
                flavor.name
            ),
        ));
    }
    // Quotas: instances and vCPUs of live (not deleted) instances.
    let live = &st.projects[project].instances;
    let count = live.len();
    let vcpus: u32 = live.iter().map(|i| i.flavor.vcpus).sum();
    if count >= seed.quota.max_instances as usize {
        return Err(error(
            StatusCode::FORBIDDEN,
            error_codes::QUOTA_EXCEEDED,
            "quota exceeded for instances",
        ));
    }
    if vcpus + flavor.vcpus > seed.quota.max_vcpus {
        return Err(error(
            StatusCode::FORBIDDEN,
            error_codes::QUOTA_EXCEEDED,
            "quota exceeded for cores (vCPU)",
        ));
    }
    let key = (flavor.id.clone(), zone.clone());
    let left = st.available.get(&key).copied().unwrap_or(0);
    if left == 0 || s.faults.capacity_blocked(&flavor.id, &flavor.name, &zone) {
        return Err(error(
            StatusCode::CONFLICT,
            error_codes::INSUFFICIENT_CAPACITY,
            &format!("insufficient capacity for {} in {zone}", flavor.name),
        ));
    }
    st.available.insert(key, left - 1);
    let host = st.next_host;
    st.next_host += 1;
    let private_ip = format!(
        "{}.{}.{}.{}",
        subnet.prefix[0],
        subnet.prefix[1],
        u32::from(subnet.prefix[2]) + host / 250,
        host % 250 + 4
    );
    let id = random_uuid();
    let now = now_rfc3339();
    let instance = api::Instance {
        id: id.clone(),
        name: Some(req.name.clone()),
        description: req.description.clone(),
        flavor: Some(api::InstanceFlavor {
            id: flavor.id.clone(),
            name: Some(flavor.name.clone()),
            vcpus: Some(flavor.vcpus),
            memory_mb: Some(flavor.memory_mib),
        }),
        addresses: vec![api::InstanceAddress {
            private_ip: Some(private_ip),
            public_ip: None,
            network_interface_id: Some(random_uuid()),
        }],
        image: Some(api::InstanceImage {
            id: req.image_id.clone(),
            name: Some(image_name),
        }),
        vm_state: Some("building".into()),
        status: Some(api::InstanceStatus::Building),
        project_id: Some(seed.id.clone()),
        key_name: req.key_name.clone(),
        hostname: Some(req.name.clone()),
        availability_zone: Some(zone),
        attached_volumes: vec![api::AttachedVolume {
            id: random_uuid(),
            size: volume.size,
            is_delete_on_termination: volume.is_delete_on_termination,
            is_root: Some(true),
        }],
        security_groups: req
            .security_groups
            .iter()
            .map(|sg| api::InstanceSecurityGroup {
                id: sg_id(&seed.id, &sg.name),
                name: Some(sg.name.clone()),
            })
            .collect(),
        instance_type: Some("vm".into()),
        created_at: Some(now.clone()),
        updated_at: Some(now),
    };
    st.projects[project].instances.push(SimInstance {
        instance,
        user_data,
        flavor,
    });
    let response = api::CreateInstanceResponse {
        instance: api::CreatedInstance {
            id: id.clone(),
            security_groups: req.security_groups.clone(),
        },
    };
    Ok((response, id))
}

fn image_name(s: &Shared, id: &str) -> Option<String> {
    if let Some(i) = catalog::default_images().into_iter().find(|i| i.id == id) {
        return Some(i.name);
    }
    s.config
        .versions
        .iter()
        .flat_map(catalog::worker_images)
        .find(|w| w.id == id)
        .map(|w| w.name)
}

fn schedule_boot(s: &Arc<Shared>, id: String) {
    let shared = Arc::clone(s);
    let delay = s.config.boot_delay;
    let task = tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let booted = finish_boot(&shared, &id);
        if let Some(booted) = booted {
            let hook = shared
                .hook
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if let Some(hook) = hook {
                hook(booted).await;
            }
        }
    });
    let mut boots = lock(&s.boots);
    boots.retain(|t| !t.is_finished());
    boots.push(task);
}

/// BUILD -> ACTIVE (or ERROR, or nothing when stuck). Returns the booted
/// instance when it went ACTIVE.
fn finish_boot(s: &Shared, id: &str) -> Option<BootedInstance> {
    let mut st = lock(&s.state);
    let (project, inst) = st.projects.iter_mut().enumerate().find_map(|(p, ps)| {
        ps.instances
            .iter_mut()
            .find(|i| i.instance.id == id)
            .map(|i| (p, i))
    })?;
    if inst.instance.status != Some(api::InstanceStatus::Building) {
        return None;
    }
    let name = inst.instance.name.clone().unwrap_or_default();
    if s.faults.is_stuck(&name) {
        return None;
    }
    inst.instance.updated_at = Some(now_rfc3339());
    if s.faults.goes_to_error(&name) {
        inst.instance.status = Some(api::InstanceStatus::Error);
        inst.instance.vm_state = Some("error".into());
        return None;
    }
    inst.instance.status = Some(api::InstanceStatus::Active);
    inst.instance.vm_state = Some("active".into());
    Some(BootedInstance {
        id: inst.instance.id.clone(),
        name,
        project_id: s.config.projects[project].id.clone(),
        flavor: BootedFlavor {
            id: inst.flavor.id.clone(),
            name: inst.flavor.name.clone(),
            vcpus: inst.flavor.vcpus,
            memory_mib: inst.flavor.memory_mib,
            gpus: inst.flavor.gpus,
        },
        zone: inst.instance.availability_zone.clone().unwrap_or_default(),
        user_data: inst.user_data.clone(),
        image_id: inst
            .instance
            .image
            .as_ref()
            .map(|i| i.id.clone())
            .unwrap_or_default(),
        private_ip: inst
            .instance
            .addresses
            .first()
            .and_then(|a| a.private_ip.clone())
            .unwrap_or_default(),
    })
}

// ---------------------------------------------------------------- catalog

async fn list_flavors(AxState(shared): S, headers: HeaderMap, Query(q): Params) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::FLAVORS, async move {
        if let Err(r) = s.authenticate(&headers) {
            return r;
        }
        let flavors: Vec<api::Flavor> = {
            let st = lock(&s.state);
            s.config
                .flavors
                .iter()
                .map(|f| {
                    let available = f
                        .zones
                        .iter()
                        .map(|z| {
                            (
                                z.clone(),
                                st.available
                                    .get(&(f.id.clone(), z.clone()))
                                    .copied()
                                    .unwrap_or(0),
                            )
                        })
                        .collect();
                    f.to_api(&available)
                })
                .collect()
        };
        match paginate(flavors, &q, &s.config) {
            Ok((flavors, pagination)) => json(
                StatusCode::OK,
                &api::FlavorList {
                    flavors,
                    pagination,
                },
            ),
            Err(r) => r,
        }
    })
    .await
}

async fn list_keypairs(AxState(shared): S, headers: HeaderMap, Query(q): Params) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KEYPAIRS, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let items: Vec<api::KeyPair> = s.config.projects[project]
            .key_pairs
            .iter()
            .map(|name| api::KeyPair {
                id: format!("kp-{name}"),
                name: Some(name.clone()),
                fingerprint: Some("SHA256:c2ltdWxhdGVkLWtleS1maW5nZXJwcmludA".into()),
                public_key: Some(format!(
                    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAISIMULATED {name}"
                )),
                key_type: Some("ssh".into()),
            })
            .collect();
        match paginate(items, &q, &s.config) {
            Ok((keypairs, pagination)) => json(
                StatusCode::OK,
                &api::KeyPairList {
                    keypairs,
                    pagination,
                },
            ),
            Err(r) => r,
        }
    })
    .await
}

async fn list_subnets(AxState(shared): S, headers: HeaderMap, Query(q): Params) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::SUBNETS, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let pid = s.config.projects[project].id.clone();
        let items: Vec<api::Subnet> = lock(&s.state).projects[project]
            .subnets
            .iter()
            .map(|sn| api::Subnet {
                id: sn.id.clone(),
                name: Some(sn.name.clone()),
                availability_zone: Some(sn.zone.clone()),
                cidr_block: Some(sn.cidr.clone()),
                project_id: Some(pid.clone()),
                operating_status: Some("ACTIVE".into()),
                provisioning_status: Some("ACTIVE".into()),
                vpc_id: Some(catalog::vpc_id(&pid)),
                vpc_name: Some("main".into()),
            })
            .collect();
        match paginate(items, &q, &s.config) {
            Ok((subnets, pagination)) => json(
                StatusCode::OK,
                &api::SubnetList {
                    subnets,
                    pagination,
                },
            ),
            Err(r) => r,
        }
    })
    .await
}

async fn list_security_groups(
    AxState(shared): S,
    headers: HeaderMap,
    Query(q): Params,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::SECURITY_GROUPS, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let seed = &s.config.projects[project];
        let items: Vec<api::SecurityGroup> = seed
            .security_groups
            .iter()
            .map(|name| api::SecurityGroup {
                id: sg_id(&seed.id, name),
                name: Some(name.clone()),
                description: Some(format!("{name} security group")),
                project_id: Some(seed.id.clone()),
                tags: Vec::new(),
            })
            .collect();
        match paginate(items, &q, &s.config) {
            Ok((security_groups, pagination)) => json(
                StatusCode::OK,
                &api::SecurityGroupList {
                    security_groups,
                    pagination,
                },
            ),
            Err(r) => r,
        }
    })
    .await
}

async fn list_images(AxState(shared): S, headers: HeaderMap, Query(q): Params) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::IMAGES, async move {
        if let Err(r) = s.authenticate(&headers) {
            return r;
        }
        let os_info = |distro: &str| {
            Some(api::ImageOsInfo {
                distro: Some(distro.to_string()),
                architecture: Some("x86_64".into()),
                os_type: Some("linux".into()),
            })
        };
        let mut items: Vec<api::Image> = catalog::default_images()
            .into_iter()
            .map(|i| api::Image {
                id: i.id,
                name: Some(i.name),
                status: Some("active".into()),
                visibility: Some("public".into()),
                description: None,
                min_disk: Some(30),
                instance_type: Some("vm".into()),
                os_info: os_info(&i.distro),
            })
            .collect();
        for w in s.config.versions.iter().flat_map(catalog::worker_images) {
            items.push(api::Image {
                id: w.id,
                name: Some(w.name),
                status: Some("active".into()),
                visibility: Some("public".into()),
                description: Some(w.key_package),
                min_disk: Some(30),
                instance_type: Some(w.instance_type),
                os_info: os_info(&w.os_distro),
            });
        }
        if let Some(name) = q.get("name") {
            items.retain(|i| i.name.as_deref().unwrap_or("").contains(name.as_str()));
        }
        match paginate(items, &q, &s.config) {
            Ok((images, pagination)) => {
                json(StatusCode::OK, &api::ImageList { images, pagination })
            }
            Err(r) => r,
        }
    })
    .await
}

// ---------------------------------------------------------------- Kubernetes Engine

fn cluster_of(s: &Shared, project: usize, name: &str) -> Result<api::Cluster, Response> {
    let seed = &s.config.projects[project];
    if seed.cluster.name != name {
        return Err(not_found(&format!("cluster {name}")));
    }
    let version = s
        .config
        .versions
        .iter()
        .find(|v| v.minor == seed.cluster.kubernetes_version)
        .ok_or_else(|| not_found("cluster version"))?;
    let (host, port, _) = s.cluster_endpoint(project);
    let subnets = lock(&s.state).projects[project]
        .subnets
        .iter()
        .map(|sn| api::ClusterSubnet {
            id: sn.id.clone(),
            availability_zone: sn.zone.clone(),
            cidr_block: sn.cidr.clone(),
        })
        .collect();
    Ok(api::Cluster {
        id: seed.cluster.id.clone(),
        name: seed.cluster.name.clone(),
        description: "simulated Kubernetes Engine cluster".into(),
        version: api::ClusterVersion {
            minor_version: version.minor.clone(),
            patch_version: version.patch.clone(),
            is_deprecated: version.deprecated,
            eol: String::new(),
            next_version: String::new(),
        },
        status: api::ClusterStatus {
            phase: "Provisioned".into(),
        },
        failure_message: None,
        is_upgradable: false,
        vpc_info: api::VpcInfo {
            id: catalog::vpc_id(&seed.id),
            subnets,
        },
        control_plane_endpoint: Some(api::ControlPlaneEndpoint { host, port }),
    })
}

async fn get_cluster(AxState(shared): S, headers: HeaderMap, Path(name): Path<String>) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KE_CLUSTER, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        match cluster_of(&s, project, &name) {
            Ok(cluster) => json(StatusCode::OK, &api::ClusterResponse { cluster }),
            Err(r) => r,
        }
    })
    .await
}

async fn get_kubeconfig(
    AxState(shared): S,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KE_KUBECONFIG, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        if let Err(r) = cluster_of(&s, project, &name) {
            return r;
        }
        let (host, port, ca) = s.cluster_endpoint(project);
        let yaml = api::render_kubeconfig(&name, &format!("https://{host}:{port}"), ca.as_bytes());
        let mut r = (StatusCode::OK, yaml).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/yaml"),
        );
        r
    })
    .await
}

async fn list_node_pools(
    AxState(shared): S,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KE_NODE_POOLS, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let cluster = match cluster_of(&s, project, &name) {
            Ok(c) => c,
            Err(r) => return r,
        };
        let seed = &s.config.projects[project];
        let version = s
            .config
            .versions
            .iter()
            .find(|v| v.minor == seed.cluster.kubernetes_version);
        let image = version.and_then(|v| catalog::worker_images(v).into_iter().next());
        let flavor = s.find_flavor("m2a.large");
        let pools = match (image, flavor) {
            (Some(image), Some(flavor)) => vec![api::NodePool {
                id: format!("np-{}-system", seed.id),
                name: "system".into(),
                cluster_name: name.clone(),
                description: "system node pool".into(),
                flavor: flavor.name.clone(),
                flavor_id: flavor.id.clone(),
                node_count: 1,
                is_gpu: false,
                is_bare_metal: false,
                image,
                security_groups: seed.security_groups.clone(),
                ssh_key_name: seed.key_pairs.first().cloned().unwrap_or_default(),
                status: api::NodePoolStatus {
                    phase: "Running".into(),
                    available_nodes: 1,
                    unavailable_nodes: 0,
                },
                version: cluster.version.patch_version.clone(),
                volume_size: 50,
                vpc_info: cluster.vpc_info.clone(),
            }],
            _ => Vec::new(),
        };
        json(StatusCode::OK, &api::NodePoolList { node_pools: pools })
    })
    .await
}

async fn list_versions(AxState(shared): S, headers: HeaderMap) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KE_VERSIONS, async move {
        if let Err(r) = s.authenticate(&headers) {
            return r;
        }
        let versions = s
            .config
            .versions
            .iter()
            .map(|v| api::KubernetesVersion {
                minor_version: v.minor.clone(),
                patch_version: v.patch.clone(),
                is_deprecated: v.deprecated,
                eol: String::new(),
                next_version: String::new(),
            })
            .collect();
        json(StatusCode::OK, &api::VersionList { versions })
    })
    .await
}

async fn list_worker_images(AxState(shared): S, headers: HeaderMap, Query(q): Params) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KE_WORKER_IMAGES, async move {
        if let Err(r) = s.authenticate(&headers) {
            return r;
        }
        let wanted = q.get("k8s_version");
        let images = s
            .config
            .versions
            .iter()
            .filter(|v| wanted.is_none_or(|w| *w == v.minor || *w == v.patch))
            .flat_map(catalog::worker_images)
            .collect();
        json(StatusCode::OK, &api::WorkerImageList { images })
    })
    .await
}

// ---------------------------------------------------------------- admin

async fn admin_faults(AxState(shared): S, body: Bytes) -> Response {
    let requests: Vec<FaultRequest> = match serde_json::from_slice::<FaultRequest>(&body) {
        Ok(one) => vec![one],
        Err(_) => match serde_json::from_slice::<Vec<FaultRequest>>(&body) {
            Ok(many) => many,
            Err(e) => return invalid(&format!("fault request: {e}")),
        },
    };
    for r in requests {
        shared.faults.apply(r);
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn admin_instances(AxState(shared): S) -> Response {
    json(StatusCode::OK, &shared.instances(true))
}

async fn admin_requests(AxState(shared): S) -> Response {
    json(StatusCode::OK, &shared.request_counts())
}

async fn admin_endpoints(AxState(shared): S) -> Response {
    let endpoints: BTreeMap<&str, String> = kakaocloud::Service::ALL
        .iter()
        .map(|svc| {
            (
                svc.as_str(),
                format!("{}/{}", shared.base_url, svc.as_str()),
            )
        })
        .collect();
    json(StatusCode::OK, &endpoints)
}
