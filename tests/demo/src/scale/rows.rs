//! A row: a fresh cluster with the API server's audit log, and one autoscaler process on it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::jiff::Timestamp;
use kakaocloud_sim::{ProjectSeed, SimConfig};
use kk_demo::{Cluster, Controller};
use serde_json::json;

use crate::Args;
use crate::measure::{AUDIT_POLICY, ProcStats, audit_requests};
use crate::workload::{self, Workload};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RowKind {
    /// This controller, against the KakaoCloud simulator.
    Ours,
    /// Upstream Karpenter's kwok provider.
    Upstream,
}

impl std::fmt::Display for RowKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RowKind::Ours => "ours",
            RowKind::Upstream => "upstream kwok",
        })
    }
}

/// Instance boot (ours: the simulator's build time) and node registration delay (upstream's
/// KWOKNodeClass), the same for both.
const BOOT_DELAY: Duration = Duration::from_secs(1);

enum Process {
    Ours(Controller),
    Upstream {
        child: Child,
        metrics_port: u16,
        spawn: Box<dyn Fn() -> anyhow::Result<(Child, u16)> + Send + Sync>,
    },
}

pub struct Row {
    pub kind: RowKind,
    pub cluster: Cluster,
    /// Hourly price by instance type, KRW (the simulator's catalog; upstream's file has the same).
    pub prices: BTreeMap<String, u64>,
    process: Process,
    controller_binary: PathBuf,
    audit_log: PathBuf,
    _audit_dir: tempfile::TempDir,
}

fn sim_config() -> SimConfig {
    let mut flavors = kakaocloud_sim::catalog::default_flavors();
    for f in &mut flavors {
        // Capacity is not what is measured.
        f.available = 100_000;
    }
    let mut project = ProjectSeed::default();
    project.quota.max_instances = 100_000;
    project.quota.max_vcpus = 10_000_000;
    SimConfig {
        boot_delay: BOOT_DELAY,
        flavors,
        projects: vec![project],
        max_page_limit: 1000,
        ..Default::default()
    }
}

/// Client rate limits of kube-controller-manager and kube-scheduler in the bench.
const QPS: [&str; 2] = ["--kube-api-qps=500", "--kube-api-burst=1000"];

impl Row {
    pub async fn start(kind: RowKind, args: &Args) -> anyhow::Result<Row> {
        let audit_dir = tempfile::Builder::new()
            .prefix("kk-scale-audit-")
            .tempdir()?;
        let policy = audit_dir.path().join("policy.yaml");
        std::fs::write(&policy, AUDIT_POLICY)?;
        let audit_log = audit_dir.path().join("audit.log");
        let options = controlplane::Options {
            extra_apiserver_args: vec![
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", audit_log.display()),
                "--audit-log-format=json".into(),
            ],
            // The defaults (20 and 50 requests/s) would make the ReplicaSet controller and the
            // scheduler the bottleneck of a 1,000-pod scale-out for either row; as in upstream's
            // perf clusters, they are raised so the bench measures the autoscaler.
            extra_controller_manager_args: QPS.iter().map(|a| a.to_string()).collect(),
            extra_scheduler_args: QPS.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        };
        let sim = sim_config();
        let prices = sim
            .flavors
            .iter()
            .map(|f| (f.name.clone(), f.hourly_price_krw))
            .collect();
        let cluster = Cluster::start_with(sim, options).await?;
        cluster.kubectl(&["create", "namespace", workload::NAMESPACE], None)?;
        let process = match kind {
            RowKind::Ours => start_ours(&cluster, &args.controller).await?,
            RowKind::Upstream => start_upstream(&cluster, args).await?,
        };
        Ok(Row {
            kind,
            cluster,
            prices,
            process,
            controller_binary: args.controller.clone(),
            audit_log,
            _audit_dir: audit_dir,
        })
    }

    fn pid(&self) -> u32 {
        match &self.process {
            Process::Ours(c) => c.pid(),
            Process::Upstream { child, .. } => child.id(),
        }
    }

    fn metrics_port(&self) -> u16 {
        match &self.process {
            Process::Ours(c) => c.metrics_port,
            Process::Upstream { metrics_port, .. } => *metrics_port,
        }
    }

    pub fn stats(&self) -> anyhow::Result<ProcStats> {
        ProcStats::read(self.pid())
    }

    /// `kubectl apply` of the Deployments at their replica counts.
    pub fn apply(&self, workloads: &[Workload]) -> anyhow::Result<()> {
        let list = json!({
            "apiVersion": "v1", "kind": "List",
            "items": workloads.iter().map(Workload::manifest).collect::<Vec<_>>(),
        });
        self.cluster
            .kubectl(&["apply", "-f", "-"], Some(&list.to_string()))?;
        Ok(())
    }

    /// Requests to KakaoCloud so far (ours only: upstream's kwok provider calls no cloud).
    pub fn cloud_requests(&self) -> Option<usize> {
        matches!(self.kind, RowKind::Ours).then(|| self.cluster.sim.request_counts().values().sum())
    }

    /// The autoscaler's requests to the API server received in `[from, to]`.
    pub fn api_requests(&self, from: Timestamp, to: Timestamp) -> anyhow::Result<u64> {
        let ours = format!(
            "system:serviceaccount:{}:{}",
            kk_demo::NAMESPACE,
            kk_demo::RELEASE
        );
        match self.kind {
            RowKind::Ours => audit_requests(&self.audit_log, from, to, &|user, _| user == ours),
            RowKind::Upstream => {
                audit_requests(&self.audit_log, from, to, &|user, _| user == UPSTREAM_USER)
            }
        }
    }

    /// Sum and count of the disruption evaluation histogram (the same family name in both).
    pub fn evaluation_seconds(&self) -> anyhow::Result<(f64, u64)> {
        let (_, body) = kk_demo::http_get(self.metrics_port(), "/metrics")?;
        let family = "karpenter_voluntary_disruption_decision_evaluation_duration_seconds";
        let (mut sum, mut count) = (0.0, 0);
        for line in body.lines() {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = name.split('{').next().unwrap_or(name);
            if name == format!("{family}_sum") {
                sum += value.parse::<f64>().unwrap_or(0.0);
            } else if name == format!("{family}_count") {
                count += value.parse::<f64>().unwrap_or(0.0) as u64;
            }
        }
        Ok((sum, count))
    }

    /// Whether the autoscaler's cluster state has synced: both autoscalers set
    /// `karpenter_cluster_state_synced` to 1 only once their caches have listed everything (ours
    /// once it leads; upstream's runs here without leader election).
    pub fn synced(&self) -> bool {
        let Ok((_, body)) = kk_demo::http_get(self.metrics_port(), "/metrics") else {
            return false;
        };
        body.lines().any(|line| {
            // Go's client prints "1", prometheus-client "1.0".
            // With or without an empty label set: `name 1` or `name{} 1.0`.
            line.split_once(' ').is_some_and(|(name, v)| {
                name.split('{').next() == Some("karpenter_cluster_state_synced")
                    && matches!(v.trim(), "1" | "1.0")
            })
        })
    }

    /// Stops the autoscaler and starts it again; returns once the new process has listed the
    /// cluster again (its readiness comes earlier: a standby is ready).
    pub async fn restart(&mut self, timeout: Duration) -> anyhow::Result<()> {
        match &mut self.process {
            Process::Ours(c) => {
                let pod = c.pod.clone();
                c.terminate(Duration::from_secs(30));
                let next = self
                    .cluster
                    .spawn_controller(&self.controller_binary, &pod, &[("LOG_FORMAT", "json")])
                    .await?;
                self.process = Process::Ours(next);
            }
            Process::Upstream {
                child,
                metrics_port,
                spawn,
            } => {
                let _ = child.kill();
                let _ = child.wait();
                let (next, port) = spawn()?;
                *child = next;
                *metrics_port = port;
            }
        }
        let deadline = Instant::now() + timeout;
        while !self.synced() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the restarted autoscaler did not sync within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// Stops the autoscaler and keeps its log in `$TMPDIR/kk-scale-logs/<label>.log`; the
    /// cluster goes with the row.
    pub fn finish(mut self, label: &str) {
        let kept = std::env::temp_dir().join("kk-scale-logs");
        let log = match &self.process {
            Process::Ours(c) => c.log.clone(),
            Process::Upstream { .. } => self.cluster.work.path().join("kwok-karpenter.log"),
        };
        let to = kept.join(format!("{label}.log"));
        if std::fs::create_dir_all(&kept)
            .and_then(|_| std::fs::copy(&log, &to))
            .is_ok()
        {
            println!("  log: {}", to.display());
        }
        match &mut self.process {
            Process::Ours(c) => {
                c.terminate(Duration::from_secs(10));
            }
            Process::Upstream { child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Waits for `n` more disruption evaluations than `before`; the mean seconds of those.
pub async fn wait_for_passes(
    row: &Row,
    before: (f64, u64),
    n: u64,
    timeout: Duration,
) -> anyhow::Result<Option<f64>> {
    let deadline = Instant::now() + timeout;
    loop {
        // A restarted process starts its histogram from zero.
        let (sum, count) = row.evaluation_seconds().unwrap_or((0.0, 0));
        let (base_sum, base_count) = if count < before.1 { (0.0, 0) } else { before };
        if count >= base_count + n {
            return Ok(Some((sum - base_sum) / (count - base_count) as f64));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        // Prometheus's pace, not faster: at 20,000 pods a scrape renders a series per pod.
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

async fn start_ours(cluster: &Cluster, binary: &Path) -> anyhow::Result<Process> {
    cluster.step1_secrets()?;
    cluster.step2_install(&[])?;
    let pods = cluster.controller_pods().await?;
    let pod = pods.first().context("the chart made no controller pod")?;
    let controller = cluster
        .spawn_controller(binary, pod, &[("LOG_FORMAT", "json")])
        .await?;
    kk_demo::wait_for("a leader", Duration::from_secs(60), || async {
        Ok(cluster.lease_holder().await)
    })
    .await?;
    cluster.step3_nodeclass(Duration::from_secs(60)).await?;
    // A subnet in every zone, as upstream's instance types are offered in every zone.
    let subnets: Vec<serde_json::Value> =
        kakaocloud_sim::catalog::default_subnets(kk_demo::PROJECT)
            .into_iter()
            .map(|s| json!({"id": s.id}))
            .collect();
    cluster.kubectl(
        &[
            "patch",
            "kcnodeclass",
            "karpenter-default",
            "--type",
            "merge",
            "-p",
            &json!({"spec": {"subnetSelectorTerms": subnets}}).to_string(),
        ],
        None,
    )?;
    let zones = subnets.len();
    kk_demo::wait_for(
        "the KCNodeClass's subnets in every zone",
        Duration::from_secs(60),
        || async move {
            let out = cluster.kubectl(
                &[
                    "get",
                    "kcnodeclass",
                    "karpenter-default",
                    "-o",
                    "jsonpath={.status.subnets[*].zone}",
                ],
                None,
            )?;
            Ok((out.split_whitespace().count() == zones).then_some(()))
        },
    )
    .await?;
    let pool = workload::nodepool(
        "karpenter.kakaocloud.com",
        "KCNodeClass",
        "karpenter-default",
    );
    cluster.kubectl(&["apply", "-f", "-"], Some(&pool.to_string()))?;
    Ok(Process::Ours(controller))
}

/// The identity upstream's controller runs as: a cluster-admin ServiceAccount of its own, so
/// the audit log tells its requests from everyone else's.
pub const UPSTREAM_USER: &str = "system:serviceaccount:kube-system:kwok-karpenter";

fn upstream_kubeconfig(cluster: &Cluster) -> anyhow::Result<PathBuf> {
    cluster.kubectl(
        &[
            "-n",
            "kube-system",
            "create",
            "serviceaccount",
            "kwok-karpenter",
        ],
        None,
    )?;
    cluster.kubectl(
        &[
            "create",
            "clusterrolebinding",
            "kwok-karpenter",
            "--clusterrole=cluster-admin",
            "--serviceaccount=kube-system:kwok-karpenter",
        ],
        None,
    )?;
    let token = cluster.kubectl(
        &[
            "-n",
            "kube-system",
            "create",
            "token",
            "kwok-karpenter",
            "--duration",
            "24h",
        ],
        None,
    )?;
    let ca = cluster.work.path().join("upstream-ca.crt");
    std::fs::write(&ca, cluster.cp.ca_pem())?;
    let path = cluster.work.path().join("kwok-karpenter.kubeconfig");
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": cluster.cp.server_url(), "certificate-authority": ca}}],
        "users": [{"name": "kwok-karpenter", "user": {"token": token.trim()}}],
        "contexts": [{"name": "kwok-karpenter", "context": {"cluster": "local", "user": "kwok-karpenter"}}],
        "current-context": "kwok-karpenter",
    });
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
    Ok(path)
}

fn upstream_dir(args: &Args) -> PathBuf {
    args.upstream.clone().unwrap_or_else(|| {
        let cache = std::env::var("KK_CACHE").unwrap_or_else(|_| {
            format!(
                "{}/.cache/karpenter-kakaocloud",
                std::env::var("HOME").unwrap_or_default()
            )
        });
        PathBuf::from(cache).join("upstream/kwok-karpenter")
    })
}

async fn start_upstream(cluster: &Cluster, args: &Args) -> anyhow::Result<Process> {
    let dir = upstream_dir(args);
    let binary = dir.join("kwok-karpenter");
    if !binary.is_file() {
        bail!(
            "{} is missing: run tests/upstream/build.sh",
            binary.display()
        );
    }
    cluster.kubectl(
        &[
            "apply",
            "--server-side",
            "-f",
            &dir.join("crds").display().to_string(),
        ],
        None,
    )?;
    for crd in [
        "nodepools.karpenter.sh",
        "kwoknodeclasses.karpenter.kwok.sh",
    ] {
        cluster.kubectl(
            &["wait", "--for=condition=Established", &format!("crd/{crd}")],
            None,
        )?;
    }
    let class = json!({
        "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
        "metadata": {"name": "default"},
        "spec": {"nodeRegistrationDelay": format!("{}s", BOOT_DELAY.as_secs())},
    });
    cluster.kubectl(&["apply", "-f", "-"], Some(&class.to_string()))?;
    let pool = workload::nodepool("karpenter.kwok.sh", "KWOKNodeClass", "default");
    cluster.kubectl(&["apply", "-f", "-"], Some(&pool.to_string()))?;
    let types = cluster.work.path().join("instance-types.json");
    std::fs::write(
        &types,
        serde_json::to_vec_pretty(&workload::kwok_instance_types(
            &kakaocloud_sim::catalog::default_flavors(),
        ))?,
    )?;
    let kubeconfig = upstream_kubeconfig(cluster)?;
    let log = cluster.work.path().join("kwok-karpenter.log");
    let spawn = move || -> anyhow::Result<(Child, u16)> {
        let (metrics, health) = (kk_demo::free_port(), kk_demo::free_port());
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let child = Command::new(&binary)
            .env_clear()
            .env("KUBECONFIG", &kubeconfig)
            .env("INSTANCE_TYPES_FILE_PATH", &types)
            .env("DISABLE_LEADER_ELECTION", "true")
            .env("METRICS_PORT", metrics.to_string())
            .env("HEALTH_PROBE_PORT", health.to_string())
            .env("SYSTEM_NAMESPACE", "kube-system")
            .env("LOG_LEVEL", "info")
            .env("HOME", std::env::var("HOME").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok((child, metrics))
    };
    let (child, metrics_port) = spawn()?;
    kk_demo::wait_for(
        "upstream's metrics endpoint",
        Duration::from_secs(60),
        || async move {
            Ok(kk_demo::http_get(metrics_port, "/metrics")
                .ok()
                .filter(|(s, _)| *s == 200))
        },
    )
    .await?;
    Ok(Process::Upstream {
        child,
        metrics_port,
        spawn: Box::new(spawn),
    })
}
