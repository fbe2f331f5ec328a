//! A real Kubernetes control plane for tests, run as local processes.
//!
//! No container engine runs on our machines, so the tests start the upstream
//! binaries built by `tests/controlplane/build.sh` (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok) on free loopback ports,
//! with certificates generated here, and stop them by their own pids.
//!
//! * [`shared`] gives the one control plane of a test process, started on first
//!   use. Tests that share it isolate themselves with [`ControlPlane::fresh_namespace`]
//!   and unique names for cluster-scoped objects.
//! * [`start`] gives a private one, stopped when the [`ControlPlane`] is dropped.
//!
//! Every child gets `PR_SET_PDEATHSIG(SIGKILL)`, set from a thread that lives as
//! long as the test process, so a panicking or aborted test leaves nothing running.
//! Each process logs to a file in the control plane's directory; a startup failure
//! carries the last lines of those logs.

use std::fs;
use std::io::{self, BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio::sync::OnceCell;

/// The Kubernetes version the binaries are built at: the one in
/// `go/kubernetes/go.mod`, the single source of truth shared with `build.sh`.
pub fn kubernetes_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        include_str!("../go/kubernetes/go.mod")
            .lines()
            .find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some("k8s.io/kubernetes"))
                    .then(|| words.next())
                    .flatten()
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "unknown".to_owned())
    })
}

/// Where `build.sh` puts the binaries: `$KK_CONTROLPLANE_DIR/<version>/bin`
/// (the default of `scripts/env.sh` when the variable is unset).
pub fn default_bin_dir() -> PathBuf {
    let root = std::env::var_os("KK_CONTROLPLANE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(|| PathBuf::from("/tmp"));
            cache.join("karpenter-kakaocloud").join("controlplane")
        });
    root.join(kubernetes_version()).join("bin")
}

const BINARIES: [&str; 6] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
];

/// The service CIDR of the test cluster; its first address is the `kubernetes` Service.
pub const SERVICE_CLUSTER_IP_RANGE: &str = "10.96.0.0/16";
/// Annotation (and value) a Node needs for kwok to play its kubelet.
pub const KWOK_NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// What to start. `Default` starts everything.
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory of the binaries; default [`default_bin_dir`].
    pub bin_dir: Option<PathBuf>,
    pub controller_manager: bool,
    pub scheduler: bool,
    pub kwok: bool,
    /// Extra `--flag=value` arguments for kube-apiserver.
    pub extra_apiserver_args: Vec<String>,
    /// Extra arguments for kube-controller-manager and kube-scheduler (each takes
    /// `--kube-api-qps`/`--kube-api-burst`, which bound how fast pods are made and bound).
    pub extra_controller_manager_args: Vec<String>,
    pub extra_scheduler_args: Vec<String>,
    /// How long startup may take before it fails with the processes' logs.
    pub startup_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            bin_dir: None,
            controller_manager: true,
            scheduler: true,
            kwok: true,
            extra_apiserver_args: Vec::new(),
            extra_controller_manager_args: Vec::new(),
            extra_scheduler_args: Vec::new(),
            startup_timeout: Duration::from_secs(120),
        }
    }
}

struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

/// A running control plane. Dropping it stops its processes and removes its
/// directory (set `KK_CONTROLPLANE_KEEP=1` to keep the directory and logs).
pub struct ControlPlane {
    dir: PathBuf,
    bin_dir: PathBuf,
    kubeconfig_path: PathBuf,
    server_url: String,
    ca_pem: String,
    processes: Mutex<Vec<Process>>,
    namespaces: AtomicU64,
    started_in: Duration,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("dir", &self.dir)
            .field("server_url", &self.server_url)
            .finish_non_exhaustive()
    }
}

/// The control plane of this test process, started on first use and killed
/// when the process exits. Panics (failing the test) if it cannot start, with
/// the reason and the processes' last log lines.
pub async fn shared() -> &'static ControlPlane {
    static SHARED: OnceCell<Result<ControlPlane, String>> = OnceCell::const_new();
    let result = SHARED
        .get_or_init(|| async {
            start(Options::default())
                .await
                .map_err(|e| format!("{e:#}"))
        })
        .await;
    match result {
        Ok(cp) => cp,
        Err(message) => panic!("the shared test control plane did not start: {message}"),
    }
}

/// Starts a private control plane.
pub async fn start(options: Options) -> anyhow::Result<ControlPlane> {
    let began = Instant::now();
    let bin_dir = options.bin_dir.clone().unwrap_or_else(default_bin_dir);
    check_binaries(&bin_dir)?;
    let dir = make_dir()?;
    let mut cp = ControlPlane {
        kubeconfig_path: dir.join("admin.kubeconfig"),
        dir,
        bin_dir,
        server_url: String::new(),
        ca_pem: String::new(),
        processes: Mutex::new(Vec::new()),
        namespaces: AtomicU64::new(0),
        started_in: Duration::ZERO,
    };
    let deadline = began + options.startup_timeout;
    match boot(&mut cp, &options, deadline).await {
        Ok(()) => {
            cp.started_in = began.elapsed();
            tracing::info!(dir = %cp.dir.display(), url = %cp.server_url, seconds = cp.started_in.as_secs_f64(), "control plane started");
            Ok(cp)
        }
        Err(error) => {
            let logs = cp.log_tails(40);
            Err(error.context(format!(
                "starting the test control plane (dir {})\n{logs}",
                cp.dir.display()
            )))
        }
    }
}

fn check_binaries(bin_dir: &Path) -> anyhow::Result<()> {
    let missing: Vec<&str> = BINARIES
        .iter()
        .copied()
        .filter(|b| {
            fs::metadata(bin_dir.join(b))
                .map(|m| m.permissions().mode() & 0o111 == 0)
                .unwrap_or(true)
        })
        .collect();
    if !missing.is_empty() {
        bail!(
            "control-plane binaries {missing:?} (Kubernetes {}) are missing from {}: \
             run tests/controlplane/build.sh (scripts/test.sh does) to build them",
            kubernetes_version(),
            bin_dir.display()
        );
    }
    Ok(())
}

/// `$TMPDIR/kk-controlplane/<pid>-<n>`; directories of processes that are gone
/// (a shared control plane's directory outlives its process) are removed first.
fn make_dir() -> anyhow::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let root = std::env::temp_dir().join("kk-controlplane");
    fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    if let Ok(entries) = fs::read_dir(&root) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let pid = name.to_string_lossy().split('-').next().map(str::to_owned);
            if let Some(pid) = pid.and_then(|p| p.parse::<u32>().ok())
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = root.join(format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A free TCP port on loopback for a process started later (bound and released).
///
/// Taken below Linux's ephemeral range (32768 and up), where `bind(0)` and outgoing connections
/// get their ports: a port handed out here cannot be taken by another listener or connection
/// between this check and the process binding it. Each port is handed out once per process,
/// from a start that differs between processes.
pub fn free_port() -> anyhow::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7_919) % SPAN;
    for _ in 0..SPAN {
        let offset = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let port = u16::try_from(FIRST + offset)?;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    // Every port of the span is taken: the kernel's choice.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

struct Pki {
    ca_pem: String,
    ca_key_pem: String,
    sa_key_pem: String,
    sa_pub_pem: String,
    serving: (String, String),
    admin: (String, String),
    controller_manager: (String, String),
    scheduler: (String, String),
    kwok: (String, String),
}

fn generate_pki() -> anyhow::Result<Pki> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kk-test-cluster-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca_pem = ca_cert.pem();
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf = |cn: &str,
                orgs: &[&str],
                sans: Vec<String>,
                server: bool|
     -> anyhow::Result<(String, String)> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(sans)?;
        params.distinguished_name.push(DnType::CommonName, cn);
        for org in orgs {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *org);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let serving = leaf(
        "kube-apiserver",
        &[],
        vec![
            "127.0.0.1".into(),
            "localhost".into(),
            "10.96.0.1".into(),
            "kubernetes".into(),
            "kubernetes.default".into(),
            "kubernetes.default.svc".into(),
            "kubernetes.default.svc.cluster.local".into(),
        ],
        true,
    )?;
    let sa_key = KeyPair::generate()?;
    Ok(Pki {
        serving,
        admin: leaf("kk-test-admin", &["system:masters"], vec![], false)?,
        controller_manager: leaf("system:kube-controller-manager", &[], vec![], false)?,
        scheduler: leaf("system:kube-scheduler", &[], vec![], false)?,
        kwok: leaf("kwok-controller", &["system:masters"], vec![], false)?,
        sa_key_pem: sa_key.serialize_pem(),
        sa_pub_pem: sa_key.public_key_pem(),
        ca_pem,
        ca_key_pem,
    })
}

fn b64(data: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn kubeconfig_yaml(server: &str, ca_pem: &str, user: &str, cert: &(String, String)) -> String {
    let value = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kk-test", "cluster": {
            "server": server,
            "certificate-authority-data": b64(ca_pem),
        }}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(&cert.0),
            "client-key-data": b64(&cert.1),
        }}],
        "contexts": [{"name": "kk-test", "context": {"cluster": "kk-test", "user": user}}],
        "current-context": "kk-test",
    });
    serde_yaml::to_string(&value).unwrap_or_default()
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    fs::write(path, contents).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod {}", path.display()))
}

async fn boot(cp: &mut ControlPlane, options: &Options, deadline: Instant) -> anyhow::Result<()> {
    let dir = cp.dir.clone();
    let pki = generate_pki().context("generating certificates")?;
    let pki_dir = dir.join("pki");
    fs::create_dir_all(&pki_dir)?;
    let file = |name: &str, contents: &str| -> anyhow::Result<PathBuf> {
        let path = pki_dir.join(name);
        write_private(&path, contents)?;
        Ok(path)
    };
    let ca_crt = file("ca.crt", &pki.ca_pem)?;
    let ca_key = file("ca.key", &pki.ca_key_pem)?;
    let sa_key = file("sa.key", &pki.sa_key_pem)?;
    let sa_pub = file("sa.pub", &pki.sa_pub_pem)?;
    let serving_crt = file("apiserver.crt", &pki.serving.0)?;
    let serving_key = file("apiserver.key", &pki.serving.1)?;

    let etcd_client = free_port()?;
    let etcd_peer = free_port()?;
    let api_port = free_port()?;
    cp.server_url = format!("https://127.0.0.1:{api_port}");
    cp.ca_pem = pki.ca_pem.clone();

    let kubeconfig = |name: &str, user: &str, cert: &(String, String)| -> anyhow::Result<PathBuf> {
        let path = dir.join(name);
        write_private(
            &path,
            &kubeconfig_yaml(&cp.server_url, &pki.ca_pem, user, cert),
        )?;
        Ok(path)
    };
    let admin_kc = kubeconfig("admin.kubeconfig", "admin", &pki.admin)?;
    let kcm_kc = kubeconfig(
        "controller-manager.kubeconfig",
        "kube-controller-manager",
        &pki.controller_manager,
    )?;
    let sched_kc = kubeconfig("scheduler.kubeconfig", "kube-scheduler", &pki.scheduler)?;
    let kwok_kc = kubeconfig("kwok.kubeconfig", "kwok", &pki.kwok)?;
    cp.kubeconfig_path = admin_kc;

    let p = |path: &Path| path.display().to_string();
    let etcd_url = format!("http://127.0.0.1:{etcd_client}");
    let peer_url = format!("http://127.0.0.1:{etcd_peer}");
    cp.spawn(
        "etcd",
        vec![
            "--name=kk-test".into(),
            format!("--data-dir={}", p(&dir.join("etcd"))),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=kk-test={peer_url}"),
            "--unsafe-no-fsync=true".into(),
            "--quota-backend-bytes=1073741824".into(),
            "--log-level=warn".into(),
        ],
        &[],
    )?;

    let mut api_args = vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={api_port}"),
        format!("--cert-dir={}", p(&dir.join("apiserver-certs"))),
        format!("--tls-cert-file={}", p(&serving_crt)),
        format!("--tls-private-key-file={}", p(&serving_key)),
        format!("--client-ca-file={}", p(&ca_crt)),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", p(&sa_pub)),
        format!("--service-account-signing-key-file={}", p(&sa_key)),
        format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
        "--authorization-mode=Node,RBAC".into(),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
        "--v=1".into(),
    ];
    api_args.extend(options.extra_apiserver_args.iter().cloned());
    cp.spawn("kube-apiserver", api_args, &[])?;
    cp.wait_ready(deadline).await?;

    if options.controller_manager {
        let port = free_port()?;
        let mut args = vec![
            format!("--kubeconfig={}", p(&kcm_kc)),
            "--controllers=*,-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller".into(),
            "--use-service-account-credentials=true".into(),
            format!("--root-ca-file={}", p(&ca_crt)),
            format!("--service-account-private-key-file={}", p(&sa_key)),
            format!("--cluster-signing-cert-file={}", p(&ca_crt)),
            format!("--cluster-signing-key-file={}", p(&ca_key)),
            format!("--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", p(&dir.join("kcm-certs"))),
            "--leader-elect=false".into(),
            "--v=1".into(),
        ];
        args.extend(options.extra_controller_manager_args.iter().cloned());
        cp.spawn("kube-controller-manager", args, &[])?;
    }
    if options.scheduler {
        let port = free_port()?;
        let mut args = vec![
            format!("--kubeconfig={}", p(&sched_kc)),
            format!("--authentication-kubeconfig={}", p(&sched_kc)),
            format!("--authorization-kubeconfig={}", p(&sched_kc)),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", p(&dir.join("scheduler-certs"))),
            "--leader-elect=false".into(),
            "--v=1".into(),
        ];
        args.extend(options.extra_scheduler_args.iter().cloned());
        cp.spawn("kube-scheduler", args, &[])?;
    }
    if options.kwok {
        let stages = dir.join("kwok-stages.yaml");
        fs::write(&stages, KWOK_STAGES)?;
        let port = free_port()?;
        let (key, value) = KWOK_NODE_ANNOTATION;
        let home = dir.join("kwok-home");
        fs::create_dir_all(&home)?;
        cp.spawn(
            "kwok",
            vec![
                format!("--kubeconfig={}", p(&kwok_kc)),
                format!("--config={}", p(&stages)),
                "--manage-all-nodes=false".into(),
                format!("--manage-nodes-with-annotation-selector={key}={value}"),
                format!("--server-address=127.0.0.1:{port}"),
                "--node-lease-duration-seconds=40".into(),
                "--cidr=10.244.0.1/16".into(),
            ],
            // kwok also reads ~/.kwok/kwok.yaml when it exists: give it an empty home.
            &[("HOME", home.display().to_string())],
        )?;
    }
    if options.controller_manager {
        // The service-account and token controllers are what a test needs first:
        // no pod can be created in a namespace before its `default` ServiceAccount.
        cp.wait_default_service_account("default", deadline).await?;
    }
    cp.check_alive()?;
    Ok(())
}

/// kwok's stages: a managed Node becomes Ready (keeping the capacity it was
/// created with) and keeps its lease; a Pod bound to it runs, a Job's pod
/// completes, a deleted pod goes away.
pub const KWOK_STAGES: &str = include_str!("../kwok-stages.yaml");

impl ControlPlane {
    fn spawn(
        &self,
        name: &'static str,
        args: Vec<String>,
        env: &[(&str, String)],
    ) -> anyhow::Result<()> {
        let log = self.dir.join(format!("{name}.log"));
        let out = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let mut command = Command::new(self.bin_dir.join(name));
        command
            .args(&args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .current_dir(&self.dir);
        for (k, v) in env {
            command.env(k, v);
        }
        let child = spawn_tied_to_process(command)
            .with_context(|| format!("starting {}", self.bin_dir.join(name).display()))?;
        tracing::debug!(name, pid = child.id(), "started");
        self.lock().push(Process { name, child, log });
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Process>> {
        self.processes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_alive(&self) -> anyhow::Result<()> {
        for process in self.lock().iter_mut() {
            if let Ok(Some(status)) = process.child.try_wait() {
                bail!("{} exited early ({status})", process.name);
            }
        }
        Ok(())
    }

    fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for process in self.lock().iter() {
            let tail = tail_lines(&process.log, lines);
            out.push_str(&format!(
                "--- last lines of {} ({}):\n{tail}\n",
                process.name,
                process.log.display()
            ));
        }
        out
    }

    async fn wait_ready(&self, deadline: Instant) -> anyhow::Result<()> {
        let mut last_error;
        loop {
            self.check_alive()?;
            match self.client_result().await {
                Ok(client) => {
                    let request = http::Request::get("/readyz").body(Vec::new())?;
                    match client.request_text(request).await {
                        Ok(body) if body.trim() == "ok" => return Ok(()),
                        Ok(body) => last_error = body,
                        Err(e) => last_error = e.to_string(),
                    }
                }
                Err(e) => last_error = format!("{e:#}"),
            }
            if Instant::now() > deadline {
                bail!("kube-apiserver not ready in time: {last_error}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_default_service_account(
        &self,
        namespace: &str,
        deadline: Instant,
    ) -> anyhow::Result<()> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client().await, namespace);
        loop {
            self.check_alive()?;
            if api.get_opt("default").await.ok().flatten().is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "no `default` ServiceAccount in namespace {namespace} in time \
                     (is kube-controller-manager running?)"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn client_result(&self) -> anyhow::Result<kube::Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig_path)?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// A new client for the admin user (`system:masters`). A new one per call,
    /// so that each test's tokio runtime owns its own connections.
    pub async fn client(&self) -> kube::Client {
        match self.client_result().await {
            Ok(client) => client,
            // The kubeconfig was written and loaded at startup; failing now means
            // the directory was removed under us.
            Err(e) => panic!(
                "test control plane client from {}: {e:#}",
                self.kubeconfig_path.display()
            ),
        }
    }

    /// The admin kubeconfig (client certificate in `system:masters`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The cluster CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Where the binaries are.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The control plane's own directory (data, certificates, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long [`start`] took.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Path of a process's log, e.g. `log_path("kube-apiserver")`.
    pub fn log_path(&self, process: &str) -> PathBuf {
        self.dir.join(format!("{process}.log"))
    }

    /// Creates a namespace with a unique name starting with `prefix` and waits
    /// for its `default` ServiceAccount (so pods can be created right away).
    pub async fn fresh_namespace(&self, prefix: &str) -> anyhow::Result<String> {
        let n = self.namespaces.fetch_add(1, Ordering::Relaxed);
        let name = unique_name(prefix, n);
        let client = self.client().await;
        let api: Api<Namespace> = Api::all(client);
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("kk-test".to_owned(), "true".to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        if self.has_process("kube-controller-manager") {
            self.wait_default_service_account(&name, Instant::now() + Duration::from_secs(60))
                .await?;
        }
        Ok(name)
    }

    /// Pids of the running processes, by name.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.lock().iter().map(|p| (p.name, p.child.id())).collect()
    }

    fn has_process(&self, name: &str) -> bool {
        self.lock().iter().any(|p| p.name == name)
    }

    /// `kubectl --kubeconfig <admin>`, ready for more arguments.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(self.bin_dir.join("kubectl"));
        command.arg("--kubeconfig").arg(&self.kubeconfig_path);
        command
    }

    /// Applies the CRDs (server-side apply, so repeated calls from tests that
    /// share the control plane are harmless) and waits until each is Established.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> anyhow::Result<()> {
        let client = self.client().await;
        let api: Api<CustomResourceDefinition> = Api::all(client);
        let params = PatchParams::apply("kk-test-harness").force();
        for crd in crds {
            let name = crd
                .metadata
                .name
                .clone()
                .ok_or_else(|| anyhow!("a CRD without metadata.name"))?;
            let mut crd = crd.clone();
            crd.metadata.managed_fields = None;
            crd.metadata.resource_version = None;
            crd.status = None;
            let mut value = serde_json::to_value(&crd)?;
            value["apiVersion"] = "apiextensions.k8s.io/v1".into();
            value["kind"] = "CustomResourceDefinition".into();
            api.patch(&name, &params, &Patch::Apply(value))
                .await
                .with_context(|| format!("applying CRD {name}"))?;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            loop {
                let current = api.get(&name).await?;
                let established = current
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                if established {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("CRD {name} not Established in time: {:?}", current.status);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// Stops the processes (kube components first, etcd last).
    pub fn stop(&self) {
        let mut processes = self.lock();
        while let Some(mut process) = processes.pop() {
            let _ = process.child.kill();
            let _ = process.child.wait();
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
        if std::env::var_os("KK_CONTROLPLANE_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// `<prefix>-<n>-<random>`, a DNS label of at most 63 characters.
fn unique_name(prefix: &str, n: u64) -> String {
    let mut clean: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    clean.truncate(40);
    let clean = clean.trim_matches('-');
    let clean = if clean.is_empty() { "test" } else { clean };
    let suffix: u32 = rand::random();
    format!("{clean}-{n}-{:06x}", suffix & 0xff_ffff)
}

fn tail_lines(path: &Path, lines: usize) -> String {
    let Ok(file) = fs::File::open(path) else {
        return "(no log)".into();
    };
    let all: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Spawns `command` from one thread that lives as long as the process, with
/// `PR_SET_PDEATHSIG(SIGKILL)`: Linux sends that signal when the *thread* that
/// forked the child exits, so forking from a short-lived test thread would kill
/// the child as soon as that test ends.
fn spawn_tied_to_process(mut command: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<io::Result<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("controlplane-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .map(|_| tx)
    });
    let spawner = spawner
        .as_ref()
        .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe calls (prctl, getppid, _exit).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nobody would kill us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel();
    spawner
        .send((command, tx))
        .map_err(|_| io::Error::other("controlplane spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| io::Error::other("controlplane spawner thread is gone"))?
}

/// Polls `check` every 100 ms until it returns `Ok(Some(value))`, or fails
/// after `timeout` with `what` and the last error (a deadline, not a timed assertion).
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::from("condition not met");
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_comes_from_go_mod() {
        let v = kubernetes_version();
        assert!(v.starts_with("v1."), "{v}");
        assert!(default_bin_dir().ends_with(format!("{v}/bin")));
    }

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(b64(""), "");
        assert_eq!(b64("f"), "Zg==");
        assert_eq!(b64("fo"), "Zm8=");
        assert_eq!(b64("foo"), "Zm9v");
        assert_eq!(b64("foobar"), "Zm9vYmFy");
    }

    #[test]
    fn unique_names_are_dns_labels() {
        let name = unique_name("My_Test/with a very long prefix that goes on and on", 7);
        assert!(name.len() <= 63, "{name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert!(!name.starts_with('-') && !name.ends_with('-'));
        assert_ne!(unique_name("a", 1), unique_name("a", 1));
    }

    #[test]
    fn missing_binaries_name_the_build_script() {
        let error = check_binaries(Path::new("/nonexistent-kk")).unwrap_err();
        assert!(
            error.to_string().contains("tests/controlplane/build.sh"),
            "{error}"
        );
    }

    #[test]
    fn pki_generates_pem() {
        let pki = generate_pki().unwrap();
        assert!(pki.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pki.sa_key_pem.contains("PRIVATE KEY"));
        assert!(pki.admin.0.contains("CERTIFICATE"));
    }
}
