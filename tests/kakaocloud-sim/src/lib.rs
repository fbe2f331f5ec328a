//! A KakaoCloud simulator for tests and demos.
//!
//! One HTTP server on loopback serves IAM, Virtual Machine (bcs), VPC,
//! Network, Image, Volume and Kubernetes Engine, each under its own path
//! prefix (`http://127.0.0.1:PORT/bcs`, `.../kubernetes-engine`, ...), with
//! exactly the request and response shapes of
//! [`kakaocloud::api`]. The client reaches it through
//! per-service endpoint overrides ([`Simulator::client_config`],
//! [`Simulator::endpoint_overrides`]); it cannot tell it from the real cloud
//! otherwise.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use kakaocloud_sim::{SimConfig, Simulator};
//! let sim = Simulator::start(SimConfig::default()).await?;
//! let client = kakaocloud::Client::new(sim.client_config(), sim.credentials())?;
//! let flavors = client.flavors().list().await?;
//! # let _ = flavors; sim.shutdown().await; Ok(()) }
//! ```

// Handlers return a ready HTTP error `Response` as their `Err` (axum style), which
// clippy finds large; the boot-hook type is one boxed closure.
#![allow(clippy::result_large_err, clippy::type_complexity)]

pub mod catalog;
mod faults;
mod server;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use kakaocloud::{self, Service, api};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use catalog::{FlavorSeed, KubernetesVersionSeed};
pub use faults::{ANY_ROUTE, FaultRequest, Faults};

/// Route names, for [`Simulator::request_count`] and [`Faults`].
pub mod routes {
    pub const TOKEN: &str = "iam.token";
    pub const INSTANCES_LIST: &str = "bcs.instances.list";
    pub const INSTANCES_CREATE: &str = "bcs.instances.create";
    pub const INSTANCES_GET: &str = "bcs.instances.get";
    pub const INSTANCES_UPDATE: &str = "bcs.instances.update";
    pub const INSTANCES_DELETE: &str = "bcs.instances.delete";
    pub const FLAVORS: &str = "bcs.flavors";
    pub const KEYPAIRS: &str = "bcs.keypairs";
    pub const SUBNETS: &str = "vpc.subnets";
    pub const SECURITY_GROUPS: &str = "network.security-groups";
    pub const IMAGES: &str = "image.images";
    pub const KE_CLUSTER: &str = "ke.cluster";
    pub const KE_KUBECONFIG: &str = "ke.kubeconfig";
    pub const KE_NODE_POOLS: &str = "ke.node-pools";
    pub const KE_VERSIONS: &str = "ke.versions";
    pub const KE_WORKER_IMAGES: &str = "ke.worker-images";

    pub const ALL: &[&str] = &[
        TOKEN,
        INSTANCES_LIST,
        INSTANCES_CREATE,
        INSTANCES_GET,
        INSTANCES_UPDATE,
        INSTANCES_DELETE,
        FLAVORS,
        KEYPAIRS,
        SUBNETS,
        SECURITY_GROUPS,
        IMAGES,
        KE_CLUSTER,
        KE_KUBECONFIG,
        KE_NODE_POOLS,
        KE_VERSIONS,
        KE_WORKER_IMAGES,
    ];
}

/// Per-project limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Quota {
    pub max_instances: u32,
    pub max_vcpus: u32,
}

impl Default for Quota {
    fn default() -> Self {
        Quota {
            max_instances: 50,
            max_vcpus: 400,
        }
    }
}

/// The project's Kubernetes Engine cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSeed {
    pub id: String,
    pub name: String,
    /// `MAJOR.MINOR`, one of [`SimConfig::versions`].
    pub kubernetes_version: String,
    /// Control-plane endpoint (host, port) reported by the cluster and its
    /// kubeconfig; tests point it at their real control plane.
    pub control_plane_host: String,
    pub control_plane_port: u16,
    /// PEM of the cluster CA, served in the kubeconfig.
    pub ca_pem: String,
}

impl Default for ClusterSeed {
    fn default() -> Self {
        ClusterSeed {
            id: "c0ffee00-0000-4000-8000-000000000001".into(),
            name: "demo-cluster".into(),
            kubernetes_version: "1.35".into(),
            control_plane_host: "127.0.0.1".into(),
            control_plane_port: 6443,
            ca_pem: "-----BEGIN CERTIFICATE-----\nU0lNVUxBVEVELUNB\n-----END CERTIFICATE-----\n"
                .into(),
        }
    }
}

/// A project: its application credential, cluster, quota and resources.
#[derive(Clone, PartialEq)]
pub struct ProjectSeed {
    pub id: String,
    pub name: String,
    pub credential_id: String,
    pub credential_secret: String,
    pub cluster: ClusterSeed,
    pub quota: Quota,
    pub security_groups: Vec<String>,
    pub key_pairs: Vec<String>,
}

impl std::fmt::Debug for ProjectSeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectSeed")
            .field("id", &self.id)
            .field("credential_id", &self.credential_id)
            .field("cluster", &self.cluster.name)
            .finish_non_exhaustive()
    }
}

impl ProjectSeed {
    /// A project with default resources.
    pub fn new(id: &str, credential_id: &str, credential_secret: &str) -> Self {
        ProjectSeed {
            id: id.into(),
            name: id.into(),
            credential_id: credential_id.into(),
            credential_secret: credential_secret.into(),
            cluster: ClusterSeed::default(),
            quota: Quota::default(),
            security_groups: catalog::default_security_groups(),
            key_pairs: catalog::default_key_pairs(),
        }
    }
}

impl Default for ProjectSeed {
    fn default() -> Self {
        ProjectSeed::new("proj-1", "test-cred-id", "test-cred-secret")
    }
}

/// Simulator settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub projects: Vec<ProjectSeed>,
    /// Time from create (building) to active.
    pub boot_delay: Duration,
    /// Time an instance stays `deleting` after its delete is accepted, before it is gone (404).
    pub delete_delay: Duration,
    /// Lifetime of issued tokens.
    pub token_ttl: Duration,
    pub flavors: Vec<FlavorSeed>,
    pub versions: Vec<KubernetesVersionSeed>,
    /// Page size when the request gives no `limit`.
    pub default_page_limit: u32,
    /// Largest `limit` honoured (bigger ones are cut to it).
    pub max_page_limit: u32,
    /// Where to listen; `127.0.0.1:0` picks a free port.
    pub listen: SocketAddr,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            projects: vec![ProjectSeed::default()],
            boot_delay: Duration::from_millis(200),
            delete_delay: Duration::from_millis(200),
            token_ttl: Duration::from_secs(3600),
            flavors: catalog::default_flavors(),
            versions: catalog::default_versions(),
            default_page_limit: api::DEFAULT_PAGE_LIMIT,
            max_page_limit: 100,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }
}

/// Flavor of a booted instance.
#[derive(Debug, Clone, PartialEq)]
pub struct BootedFlavor {
    pub id: String,
    pub name: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub gpus: u32,
}

/// What the boot hook learns about an instance that just went ACTIVE.
#[derive(Debug, Clone, PartialEq)]
pub struct BootedInstance {
    pub id: String,
    pub name: String,
    pub project_id: String,
    pub flavor: BootedFlavor,
    pub zone: String,
    /// Decoded user data (cloud-init), if any.
    pub user_data: Option<String>,
    pub image_id: String,
    pub private_ip: String,
}

pub(crate) type BootHook = dyn Fn(BootedInstance) -> BoxFuture<'static, ()> + Send + Sync;

/// A running simulator. Cheap to clone; [`Simulator::shutdown`] stops it.
#[derive(Clone)]
pub struct Simulator {
    shared: Arc<server::Shared>,
    addr: SocketAddr,
    stop: Arc<Mutex<Option<(oneshot::Sender<()>, JoinHandle<()>)>>>,
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Simulator {
    /// Binds `config.listen` (default 127.0.0.1:0) and serves every service.
    pub async fn start(config: SimConfig) -> anyhow::Result<Simulator> {
        anyhow::ensure!(
            !config.projects.is_empty(),
            "the simulator needs at least one project"
        );
        for p in &config.projects {
            anyhow::ensure!(
                !p.credential_id.trim().is_empty() && !p.credential_secret.trim().is_empty(),
                "project {} needs a non-empty credential ID and secret",
                p.id
            );
        }
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(server::Shared::new(config, format!("http://{addr}"))?);
        let router = server::router(Arc::clone(&shared));
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, router).with_graceful_shutdown(async move {
                let _ = rx.await;
            });
            if let Err(err) = serve.await {
                tracing::error!(error = %err, "simulator server failed");
            }
        });
        tracing::info!(%addr, "KakaoCloud simulator listening");
        Ok(Simulator {
            shared,
            addr,
            stop: Arc::new(Mutex::new(Some((tx, task)))),
        })
    }

    /// Socket address the simulator listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// URL of `service` on this simulator (its path prefix included).
    pub fn endpoint(&self, service: Service) -> String {
        format!("{}/{}", self.base_url(), service.as_str())
    }

    /// Client configuration with every endpoint pointed here and a fast retry
    /// policy (short backoff, 5 attempts, throttling retried for 2 s, 3 s request timeout).
    pub fn client_config(&self) -> kakaocloud::Config {
        let mut config = kakaocloud::Config {
            retry: kakaocloud::RetryPolicy {
                max_attempts: 5,
                throttle_budget: Duration::from_secs(2),
                base_delay: Duration::from_millis(10),
                max_delay: Duration::from_millis(200),
                request_timeout: Duration::from_secs(3),
            },
            ..kakaocloud::Config::default()
        };
        for service in Service::ALL {
            // The base URL is a valid http URL, so this parse cannot fail.
            if let Ok(url) = reqwest::Url::parse(&self.endpoint(service)) {
                config.endpoint_overrides.insert(service, url);
            }
        }
        config
    }

    /// The default (first) project's credentials.
    pub fn credentials(&self) -> kakaocloud::Credentials {
        self.credentials_of(0)
            .expect("start() checked that project 0 exists and has non-empty credentials")
    }

    /// Credentials of project number `index` of [`SimConfig::projects`].
    pub fn credentials_of(&self, index: usize) -> Option<kakaocloud::Credentials> {
        let p = self.shared.config.projects.get(index)?;
        kakaocloud::Credentials::new(p.credential_id.clone(), p.credential_secret.clone()).ok()
    }

    /// `(service, url)` for every service, e.g. `("bcs", "http://127.0.0.1:PORT/bcs")`.
    pub fn endpoint_overrides(&self) -> Vec<(String, String)> {
        Service::ALL
            .iter()
            .map(|s| (s.as_str().to_string(), self.endpoint(*s)))
            .collect()
    }

    /// Sets the hook called once when an instance goes ACTIVE (replaces any
    /// earlier hook). The instance is ACTIVE before the hook runs.
    pub fn set_boot_hook(
        &self,
        hook: impl Fn(BootedInstance) -> BoxFuture<'static, ()> + Send + Sync + 'static,
    ) {
        self.shared.set_hook(Some(Arc::new(hook)));
    }

    /// Removes the boot hook.
    pub fn clear_boot_hook(&self) {
        self.shared.set_hook(None);
    }

    /// Every instance not yet deleted, in every project, oldest first.
    pub fn instances(&self) -> Vec<api::Instance> {
        self.shared.instances(false)
    }

    /// Like [`Self::instances`], deleted instances included (status DELETED).
    pub fn instances_including_deleted(&self) -> Vec<api::Instance> {
        self.shared.instances(true)
    }

    /// Decoded user data of instance `id`.
    pub fn user_data(&self, id: &str) -> Option<String> {
        self.shared.user_data(id)
    }

    /// Fault injection (same as `POST /admin/faults`).
    pub fn faults(&self) -> Faults {
        self.shared.faults.clone()
    }

    /// Requests received on `route` (a [`routes`] name), faulted ones included.
    pub fn request_count(&self, route: &str) -> usize {
        self.shared.request_count(route)
    }

    /// Every route's request count.
    pub fn request_counts(&self) -> BTreeMap<String, usize> {
        self.shared.request_counts()
    }

    /// Sets the default project's cluster control-plane endpoint and CA (for
    /// tests that start their control plane after the simulator).
    pub fn set_cluster_endpoint(&self, host: &str, port: u16, ca_pem: &str) {
        self.shared.set_cluster_endpoint(host, port, ca_pem);
    }

    /// Invalidates every issued token (the next call with one gets 401), as
    /// when IAM revokes tokens after a credential rotation.
    pub fn revoke_tokens(&self) {
        self.shared.revoke_tokens();
    }

    /// Sets the launchable count of `flavor` (name or ID) in `zone`, as the
    /// flavor list reports it.
    pub fn set_available(&self, flavor: &str, zone: &str, count: u32) {
        self.shared.set_available(flavor, zone, count);
    }

    /// Endpoints and credentials as JSON (what the binary prints).
    pub fn describe(&self) -> serde_json::Value {
        let endpoints: serde_json::Map<String, serde_json::Value> = self
            .endpoint_overrides()
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        let p = &self.shared.config.projects[0];
        serde_json::json!({
            "baseUrl": self.base_url(),
            "endpoints": endpoints,
            "admin": format!("{}/admin", self.base_url()),
            "region": kakaocloud::DEFAULT_REGION,
            "projectId": p.id,
            "applicationCredentialId": p.credential_id,
            "applicationCredentialSecret": p.credential_secret,
            "cluster": p.cluster.name,
        })
    }

    /// Every way a response so far departed from KakaoCloud's official models
    /// (`kakaocloud::contract`); empty when the simulator served exactly the official shapes.
    pub fn contract_violations(&self) -> Vec<String> {
        self.shared.contract_violations()
    }

    /// Stops serving and waits for the server task (at most 5 s).
    ///
    /// # Panics
    /// If any response departed from the official models: every test that shuts the simulator
    /// down is also a contract test.
    pub async fn shutdown(self) {
        let violations = self.contract_violations();
        assert!(
            violations.is_empty(),
            "the simulator served shapes that are not KakaoCloud's official models: {violations:#?}"
        );
        let taken = self.stop.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((tx, mut task)) = taken {
            let _ = tx.send(());
            if tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
        self.shared.stop_boots();
    }
}
