//! The controller binary. Its environment is the Helm chart's Deployment (see [`startup`]):
//! KakaoCloud credentials from the credentials Secret, the keyring Secret's name, the Lease for
//! leader election, ports, log format. Only the leader runs the controllers; a standby serves its
//! probes and metrics and takes over when the leader's Lease expires. A leader that loses its
//! Lease stops its controllers and exits (the kubelet restarts it as a standby).

mod health;
mod leader;
mod startup;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use karpenter_kakaocloud::explain::Explain;
use karpenter_kakaocloud::keyring;
use karpenter_kakaocloud::metrics::Metrics;
use karpenter_kakaocloud::operator::{self, Operator, Plugins};
use karpenter_kakaocloud::views;
use kk_plugin_runtime as plugins;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::health::Readiness;
use crate::startup::{LogFormat, Startup};

/// mimalloc instead of glibc's malloc: glibc gives each thread that allocates its own 64 MiB
/// arena, so tokio's workers and the blocking threads that run plugins each held one (the scale
/// bench saw 64 MiB regions, and about 200 MiB peak RSS at 1,000 pods). The `system-allocator`
/// feature keeps glibc's, for heap profilers that hook malloc (heaptrack; docs/performance.md).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn init_logging(level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

/// Becomes true on SIGTERM (the kubelet stopping the pod) or SIGINT. Listening starts at once
/// and lasts the whole process, so a signal during startup or a leadership change is not lost.
fn shutdown_watch() -> anyhow::Result<tokio::sync::watch::Receiver<bool>> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        let _ = tx.send(true);
    });
    Ok(rx)
}

/// GETs `url` once (10 s); 0 when it answers 2xx, 1 otherwise (printed either way).
async fn check(url: &str) -> i32 {
    kakaocloud::install_crypto_provider();
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("check: {e}");
            return 1;
        }
    };
    match client.get(url).send().await {
        Ok(r) if r.status().is_success() => {
            println!("check: {url} answered {}", r.status());
            0
        }
        Ok(r) => {
            eprintln!("check: {url} answered {}", r.status());
            1
        }
        Err(e) => {
            eprintln!("check: {url}: {}", e.without_url());
            1
        }
    }
}

async fn shutdown_requested(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

#[tokio::main]
async fn main() {
    if std::env::args().nth(1).as_deref() == Some("--list-env") {
        // The chart tests compare the Deployment's env with this list.
        for name in startup::VARIABLES {
            println!("{name}");
        }
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("--check") {
        // `helm test`: the image has no shell or curl, so the binary asks the controller itself.
        let url = std::env::args().nth(2).unwrap_or_default();
        std::process::exit(check(&url).await);
    }
    let startup = match Startup::from_env() {
        Ok(s) => s,
        Err(err) => {
            // Logging is not configured yet; the message names variables, never values.
            eprintln!("karpenter-kakaocloud: {err}");
            std::process::exit(2);
        }
    };
    init_logging(&startup.log_level, startup.log_format);
    match run(startup).await {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            tracing::error!(error = format!("{err:#}"), "controller failed");
            std::process::exit(1);
        }
    }
}

/// The plugin registry (empty: the native defaults serve). An unusable cache directory only
/// costs compile time, so it is a warning.
fn plugin_registry(
    cache_dir: Option<std::path::PathBuf>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Arc<plugins::Registry>> {
    let runtime = match plugins::Runtime::new(plugins::Bounds::default(), cache_dir.clone()) {
        Ok(r) => r,
        Err(err) => {
            tracing::warn!(error = %err, dir = ?cache_dir, "plugin cache unusable; compiling without it");
            plugins::Runtime::new(plugins::Bounds::default(), None)
                .context("starting the plugin engine")?
        }
    };
    Ok(plugins::Registry::new(
        runtime,
        Some(metrics.plugins.clone()),
    ))
}

/// Feeds `registry` from the plugin ConfigMaps of the system namespace. Every replica watches
/// them (a standby has its plugins compiled and checked before it leads).
async fn watch_plugins(
    kube: &kube::Client,
    namespace: &str,
    registry: &Arc<plugins::Registry>,
    trust_secret: Option<String>,
) {
    let (synced, mut first_list) = tokio::sync::watch::channel(false);
    tokio::spawn(plugins::watcher::run(
        kube.clone(),
        namespace.to_owned(),
        registry.clone(),
        trust_secret,
        synced,
    ));
    tokio::spawn(plugins::watcher::report_calls(
        kube.clone(),
        namespace.to_owned(),
        registry.clone(),
        std::time::Duration::from_secs(60),
        plugins::shadow::REPORT_EVERY,
    ));
    // Start on the configured plugins, not on the defaults they replace; a watch that cannot
    // list (RBAC, API trouble) only delays that, it does not stop the controller.
    let listed = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        first_list.wait_for(|done| *done),
    )
    .await;
    if !matches!(listed, Ok(Ok(_))) {
        tracing::warn!(
            "plugin ConfigMaps not listed within 30 s; native defaults serve until they are"
        );
    }
}

async fn run(startup: Startup) -> anyhow::Result<i32> {
    let mut stop = shutdown_watch()?;
    kakaocloud::install_crypto_provider();
    let Startup {
        settings,
        cloud: cloud_config,
        credentials,
        project_id,
        leader: leader_config,
        health_port,
        plugin_cache_dir,
        plugin_trust_secret,
        ..
    } = startup;
    tracing::info!(
        cluster = %settings.cluster_name,
        region = %cloud_config.region,
        namespace = %settings.system_namespace,
        leader_election = leader_config.is_some(),
        "starting karpenter-kakaocloud {}",
        env!("CARGO_PKG_VERSION")
    );

    // Probes and metrics first, so the kubelet sees the process while it connects.
    let ready = Readiness::default();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let is_leader = Family::<Vec<(String, String)>, Gauge>::default();
    registry.register(
        "leader_election_master_status",
        "1 while this replica holds the leader-election Lease",
        is_leader.clone(),
    );
    let lease_label = vec![(
        "name".to_owned(),
        leader_config
            .as_ref()
            .map(|l| l.name.clone())
            .unwrap_or_else(|| "disabled".into()),
    )];
    let plugins = plugin_registry(plugin_cache_dir, &metrics)?;
    let explain = Explain::default();
    let health = health::serve(health_port, health::health_router(ready.clone()), "health").await?;
    let metrics_addr = health::serve(
        settings.metrics_port,
        health::metrics_router(Arc::new(registry), metrics.clone())
            .merge(views::router(plugins.clone(), explain.clone())),
        "metrics",
    )
    .await?;
    tracing::info!(health = %health, metrics = %metrics_addr, "serving probes and metrics");

    let cloud = kakaocloud::Client::new(cloud_config, credentials)?;
    cloud
        .authenticate()
        .await
        .context("KakaoCloud refused the application credential")?;
    if let (Some(want), Some(got)) = (project_id.as_deref(), cloud.project_id().await)
        && want != got
    {
        anyhow::bail!(
            "the application credential belongs to project {got}, but projectID is {want}"
        );
    }
    let kube = kube::Client::try_default()
        .await
        .context("no Kubernetes configuration (in-cluster or KUBECONFIG)")?;
    let keyring = keyring::watch_keyring(
        kube.clone(),
        &settings.system_namespace,
        &settings.keyring_secret,
        Some(keyring::RetireGuard {
            cloud: cloud.clone(),
            cluster: settings.cluster_name.clone(),
        }),
    )
    .await
    .with_context(|| {
        format!(
            "reading the signing keyring from Secret {}/{}",
            settings.system_namespace, settings.keyring_secret
        )
    })?;
    let join = operator::resolve_join_info(&kube, &cloud, &settings).await?;
    watch_plugins(
        &kube,
        &settings.system_namespace,
        &plugins,
        plugin_trust_secret,
    )
    .await;
    ready.set(true);

    let start_operator = |cloud: kakaocloud::Client| {
        Operator::start(
            kube.clone(),
            cloud,
            settings.clone(),
            keyring.clone(),
            join.clone(),
            Plugins::from_registry(plugins.clone()),
            metrics.clone(),
            explain.clone(),
        )
    };

    let Some(leader_config) = leader_config else {
        let mut op = tokio::select! {
            op = start_operator(cloud.clone()) => op?,
            _ = shutdown_requested(&mut stop) => return Ok(0),
        };
        is_leader.get_or_create(&lease_label).set(1);
        tracing::info!("controllers started (leader election disabled)");
        return Ok(tokio::select! {
            _ = shutdown_requested(&mut stop) => {
                op.stop();
                0
            }
            (controller, how) = op.first_exit() => {
                op.stop();
                tracing::error!(controller, how, "a controller stopped; exiting so the pod restarts");
                1
            }
        });
    };

    tracing::info!(lease = %leader_config.name, namespace = %leader_config.namespace, identity = %leader_config.identity, "waiting for the leader-election lease");
    let elector = leader::Elector::new(kube.clone(), leader_config);
    // The controllers call KakaoCloud only while the lease is certainly ours (see `leader`).
    let fenced = cloud.fenced(elector.fence());
    let mut election = leader::spawn(elector);
    tokio::select! {
        _ = shutdown_requested(&mut stop) => {
            tracing::info!("shutting down as a standby");
            election.stop().await;
            return Ok(0);
        }
        leading = election.wait_leading() => {
            if !leading {
                anyhow::bail!("leader election ended before acquiring the lease");
            }
        }
    }
    let mut op = tokio::select! {
        op = start_operator(fenced) => op?,
        _ = shutdown_requested(&mut stop) => {
            election.stop().await;
            tracing::info!("stopped while starting the controllers, lease released");
            return Ok(0);
        }
    };
    is_leader.get_or_create(&lease_label).set(1);
    tracing::info!("controllers started (leader)");
    tokio::select! {
        _ = shutdown_requested(&mut stop) => {
            op.stop();
            // Hand over at once instead of making the standby wait for expiry.
            election.stop().await;
            tracing::info!("stopped, lease released");
            Ok(0)
        }
        ended = election.ended() => {
            op.stop();
            is_leader.get_or_create(&lease_label).set(0);
            tracing::error!(reason = ?ended, "leader election lost");
            Ok(1)
        }
        (controller, how) = op.first_exit() => {
            op.stop();
            is_leader.get_or_create(&lease_label).set(0);
            // Release the lease so the standby takes over at once.
            election.stop().await;
            tracing::error!(controller, how, "a controller stopped; exiting so the pod restarts");
            Ok(1)
        }
    }
}
