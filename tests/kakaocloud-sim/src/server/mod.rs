//! State and HTTP handlers of the simulator.

mod admin;
mod auth;
mod catalog_api;
mod instances;
mod kubernetes_engine;

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
use kakaocloud::contract;
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
    /// When it was created (the list-lag fault hides young instances from lists).
    created: std::time::Instant,
    /// Its port and root volume, reported (instead of `null`) once it is active.
    address: api::InstanceAddress,
    volume: api::AttachedVolume,
    user_id: String,
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
    /// Every way a response departed from KakaoCloud's official models (should stay empty).
    violations: Mutex<Vec<String>>,
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
            violations: Mutex::new(Vec::new()),
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

    pub fn contract_violations(&self) -> Vec<String> {
        lock(&self.violations).clone()
    }

    /// Serves `value` as the official model `model` with `status`, recording any departure
    /// from the model (the contract tests assert there is none).
    fn reply<T: Serialize>(&self, model: &str, status: StatusCode, value: &T) -> Response {
        let doc = match serde_json::to_value(value) {
            Ok(doc) => doc,
            Err(e) => {
                lock(&self.violations).push(format!("{model}: does not serialise: {e}"));
                return json(StatusCode::INTERNAL_SERVER_ERROR, &serde_json::json!({}));
            }
        };
        let found = contract::official().violations(model, &doc);
        if !found.is_empty() {
            tracing::error!(
                model,
                ?found,
                "simulator response departs from the official model"
            );
            lock(&self.violations).extend(found.into_iter().map(|v| format!("{model} {v}")));
        }
        json(status, &doc)
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

/// IAM's Keystone error (official `KeystoneError`).
fn iam_error(status: StatusCode, title: &str, message: &str) -> Response {
    let body = api::IamErrorBody {
        error: api::IamError {
            code: Some(status.as_u16()),
            message: Some(message.to_string()),
            title: Some(title.to_string()),
        },
    };
    (status, axum::Json(body)).into_response()
}

/// Reads a request body as the official model `model`, or answers as KakaoCloud's FastAPI
/// services do: 422 with `{"detail": [{"loc", "msg", "type"}]}` naming each problem. Stricter
/// than the server in one way: a field the model does not have is refused too, so a client
/// sending one fails here rather than being silently ignored in production.
fn parse_request<T: serde::de::DeserializeOwned>(model: &str, body: &[u8]) -> Result<T, Response> {
    let doc: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        unprocessable(vec![validation_error(
            vec!["body".into()],
            &format!("invalid JSON: {e}"),
            "value_error.jsondecode",
        )])
    })?;
    let found = contract::official().violations(model, &doc);
    if !found.is_empty() {
        return Err(unprocessable(
            found
                .iter()
                .map(|v| {
                    let (path, msg) = v.split_once(": ").unwrap_or((v.as_str(), "invalid"));
                    let mut loc = vec![serde_json::Value::from("body")];
                    loc.extend(
                        path.trim_start_matches('$')
                            .split(['.', '[', ']'])
                            .filter(|p| !p.is_empty())
                            .map(|p| match p.parse::<u64>() {
                                Ok(i) => serde_json::Value::from(i),
                                Err(_) => serde_json::Value::from(p),
                            }),
                    );
                    validation_error(loc, msg, "value_error")
                })
                .collect(),
        ));
    }
    serde_json::from_value(doc).map_err(|e| {
        unprocessable(vec![validation_error(
            vec!["body".into()],
            &e.to_string(),
            "type_error",
        )])
    })
}

fn validation_error(loc: Vec<serde_json::Value>, msg: &str, kind: &str) -> api::ValidationError {
    api::ValidationError {
        loc,
        msg: msg.to_owned(),
        kind: kind.to_owned(),
    }
}

fn unprocessable(detail: Vec<api::ValidationError>) -> Response {
    json(
        StatusCode::UNPROCESSABLE_ENTITY,
        &api::ValidationErrorBody { detail },
    )
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
    let iam = Router::new().route(paths::IAM_TOKENS, post(auth::issue_token));
    let bcs = Router::new()
        .route(
            paths::INSTANCES,
            get(instances::list_instances).post(instances::create_instance),
        )
        .route(
            &format!("{}/{{id}}", paths::INSTANCES),
            get(instances::get_instance)
                .put(instances::update_instance)
                .delete(instances::delete_instance),
        )
        .route(paths::FLAVORS, get(catalog_api::list_flavors))
        .route(paths::KEYPAIRS, get(catalog_api::list_keypairs));
    let vpc = Router::new().route(paths::SUBNETS, get(catalog_api::list_subnets));
    let network = Router::new().route(
        paths::SECURITY_GROUPS,
        get(catalog_api::list_security_groups),
    );
    let image = Router::new().route(paths::IMAGES, get(catalog_api::list_images));
    let ke = Router::new()
        .route(
            &format!("{}/{{name}}", paths::KE_CLUSTERS),
            get(kubernetes_engine::get_cluster),
        )
        .route(
            &format!("{}/{{name}}/kubeconfig", paths::KE_CLUSTERS),
            get(kubernetes_engine::get_kubeconfig),
        )
        .route(
            &format!("{}/{{name}}/node-pools", paths::KE_CLUSTERS),
            get(kubernetes_engine::list_node_pools),
        )
        .route(paths::KE_VERSIONS, get(kubernetes_engine::list_versions))
        .route(paths::KE_IMAGES, get(kubernetes_engine::list_worker_images));
    let admin = Router::new()
        .route("/faults", post(admin::admin_faults))
        .route("/instances", get(admin::admin_instances))
        .route("/requests", get(admin::admin_requests))
        .route("/endpoints", get(admin::admin_endpoints));
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
