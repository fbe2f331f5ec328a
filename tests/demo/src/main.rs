//! `kk-demo --controller <karpenter-kakaocloud binary>`: the install guide on a local cluster.
//!
//! Starts a control plane and the KakaoCloud simulator, follows the guide's Steps 1-5 with helm
//! and kubectl, runs two controller processes as the chart's two pods (one leads), prints
//! NodeClaims, Nodes and pods until the demo runs, deletes the demo and shows consolidation
//! removing the empty nodes, then tears everything down. See scripts/demo.sh.
//!
//! `--keep DIR` makes it a playground: after Step 5 it writes `DIR/playground.env` (KUBECONFIG
//! and PATH for `kubectl` and `helm`) and keeps the cluster, the simulator and the controllers
//! running until it gets SIGTERM or SIGINT (`scripts/demo.sh --down` sends it), then tears down.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kk_demo::{Cluster, Controller};

struct Args {
    controller: PathBuf,
    run_timeout: Duration,
    consolidation_timeout: Duration,
    /// Playground: where to write `playground.env`, and keep running.
    keep: Option<PathBuf>,
}

fn args() -> anyhow::Result<Args> {
    let mut out = Args {
        controller: PathBuf::new(),
        run_timeout: Duration::from_secs(180),
        consolidation_timeout: Duration::from_secs(120),
        keep: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--controller" => out.controller = PathBuf::from(value()?),
            "--run-timeout-secs" => out.run_timeout = Duration::from_secs(value()?.parse()?),
            "--consolidation-timeout-secs" => {
                out.consolidation_timeout = Duration::from_secs(value()?.parse()?)
            }
            "--keep" => out.keep = Some(PathBuf::from(value()?)),
            other => bail!(
                "unknown argument {other}; usage: kk-demo --controller PATH [--run-timeout-secs N] [--consolidation-timeout-secs N] [--keep DIR]"
            ),
        }
    }
    if !out.controller.is_file() {
        bail!(
            "--controller {} is not a file (cargo build -p karpenter-kakaocloud)",
            out.controller.display()
        );
    }
    Ok(out)
}

fn step(began: Instant, text: &str) {
    println!("\n[{:>6.1}s] == {text}", began.elapsed().as_secs_f64());
}

async fn watch_until<F, Fut>(
    cluster: &Cluster,
    began: Instant,
    timeout: Duration,
    done: F,
) -> anyhow::Result<bool>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        let now = cluster.progress().await?;
        if now != last {
            println!("[{:>6.1}s]\n{now}", began.elapsed().as_secs_f64());
            last = now;
        }
        if done().await? {
            return Ok(true);
        }
        if Instant::now() > deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The second demo: the selection plugin swapped at runtime, no restart; the next node differs.
async fn hot_swap(cluster: &Cluster, began: Instant, timeout: Duration) -> anyhow::Result<()> {
    let before = cluster.instance_types_of("karpenter-default").await?;
    let prefer = kk_demo::family_not_among(&before);
    step(
        began,
        &format!(
            "hot swap: instance-selector ConfigMap <- examples/gpu-aware-selector {{\"preferFamilies\": [\"{prefer}\"]}} (default chose {before:?})"
        ),
    );
    let swapped = Instant::now();
    let digest = cluster.swap_selector(
        "gpu-aware-selector",
        &format!(r#"{{"preferFamilies": ["{prefer}"]}}"#),
    )?;
    let note = cluster
        .wait_plugin_event(
            "instance-selector",
            "PluginActive",
            &digest,
            Duration::from_secs(60),
        )
        .await?;
    println!(
        "  {:.1}s after kubectl apply, Event PluginActive: {note}",
        swapped.elapsed().as_secs_f64()
    );
    step(
        began,
        "a second NodePool (swap-demo) and a 1-replica Deployment only it can serve",
    );
    cluster.apply_swap_workload()?;
    let launched = watch_until(cluster, began, timeout, || async {
        Ok(!cluster.instance_types_of("swap-demo").await?.is_empty())
    })
    .await?;
    if !launched {
        bail!("no swap-demo NodeClaim within {timeout:?}");
    }
    let after = cluster.instance_types_of("swap-demo").await?;
    println!(
        "  the next node's flavor: {after:?} (before the swap: {before:?}); no controller restart"
    );
    Ok(())
}

/// Writes how to reach the cluster to `dir/playground.env`, says so, and waits for SIGTERM or
/// SIGINT. The file is removed again before returning.
async fn playground(cluster: &Cluster, dir: &std::path::Path) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let env_file = dir.join("playground.env");
    let helm_dir = kk_demo::helm_path()
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let body = format!(
        "# The kk-demo playground (pid {pid}); scripts/demo.sh --down stops it.\n\
         export KUBECONFIG={kubeconfig}\n\
         export PATH={bin}:{helm_dir}:$PATH\n\
         export KK_PLAYGROUND_PID={pid}\n\
         # controller logs: {logs}\n",
        pid = std::process::id(),
        kubeconfig = cluster.cp.kubeconfig_path().display(),
        bin = cluster.cp.bin_dir().display(),
        logs = cluster.work.path().display(),
    );
    std::fs::write(&env_file, body).with_context(|| format!("writing {}", env_file.display()))?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    println!(
        "\nplayground ready: source {}\n  then kubectl get nodepools,nodeclaims,nodes; kubectl apply your NodePools and plugin ConfigMaps; helm list -A\n  the simulator serves KakaoCloud at {}; scripts/demo.sh --down stops everything",
        env_file.display(),
        cluster.sim.base_url()
    );
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let _ = std::fs::remove_file(&env_file);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DEMO_LOG")
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let began = Instant::now();
    step(
        began,
        "starting a local control plane (kwok plays the kubelets) and the KakaoCloud simulator",
    );
    let sim = kakaocloud_sim::SimConfig {
        boot_delay: Duration::from_secs(2),
        ..Default::default()
    };
    let cluster = Cluster::start(sim).await?;
    println!(
        "  API server {}  simulator {}",
        cluster.cp.server_url(),
        cluster.sim.base_url()
    );

    step(
        began,
        "Step 1: namespace karpenter-kakaocloud, Secrets kakaocloud-credentials and karpenter-sigkey",
    );
    cluster.step1_secrets()?;

    step(
        began,
        "Step 2: helm upgrade --install karpenter-provider-kakaocloud ... --wait",
    );
    let took = cluster.step2_install(&[])?;
    println!(
        "  helm took {:.1}s; deployment READY {}",
        took.as_secs_f64(),
        cluster.deployment_ready()?
    );
    let pods = cluster.controller_pods().await?;
    let mut controllers: Vec<Controller> = Vec::new();
    for pod in &pods {
        controllers.push(
            cluster
                .spawn_controller(&args.controller, pod, &[("LOG_FORMAT", "json")])
                .await?,
        );
    }
    println!(
        "  running the controller binary as pods {} (logs in {})",
        pods.join(", "),
        cluster.work.path().display()
    );
    let holder = kk_demo::wait_for("a leader", Duration::from_secs(60), || async {
        Ok(cluster.lease_holder().await)
    })
    .await?;
    println!("  leader (Lease karpenter-leader-election): {holder}");

    step(began, "Step 3: KCNodeClass karpenter-default");
    for (t, s) in cluster.step3_nodeclass(Duration::from_secs(60)).await? {
        println!("  {t}\t{s}");
    }

    step(began, "Step 4: NodePool karpenter-default");
    cluster.step4_nodepool()?;
    // The guide's consolidateAfter is 10m; the demo does not wait that long.
    cluster.kubectl(
        &[
            "patch",
            "nodepool",
            "karpenter-default",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"disruption":{"consolidateAfter":"10s"}}}"#,
        ],
        None,
    )?;
    println!("  (demo only: consolidateAfter 10m -> 10s)");

    step(
        began,
        "Step 5: the 3-replica demo Deployment; watching NodeClaims, Nodes and pods",
    );
    let applied = Instant::now();
    cluster.step5_demo()?;
    let ran = watch_until(&cluster, began, args.run_timeout, || async {
        Ok(cluster.running_demo_pods().await?.len() >= 3)
    })
    .await?;
    if !ran {
        bail!(
            "the demo pods did not all run within {:?}; controller logs in {}",
            args.run_timeout,
            cluster.work.path().display()
        );
    }
    println!(
        "  3/3 pods Running {:.1}s after kubectl apply; {} instance(s) in the simulator",
        applied.elapsed().as_secs_f64(),
        cluster.instances().len()
    );

    if let Some(dir) = &args.keep {
        playground(&cluster, dir).await?;
        step(began, "tearing down the playground");
        for c in &mut controllers {
            let code = c.terminate(Duration::from_secs(10));
            println!("  controller {} exited with {code:?}", c.pod);
        }
        return Ok(());
    }

    hot_swap(&cluster, began, args.run_timeout).await?;

    step(
        began,
        "kubectl delete -f karpenter-demo.yaml (and the swap demo): waiting for consolidation to remove the empty nodes",
    );
    let deleted = Instant::now();
    cluster.delete_demo()?;
    cluster.kubectl(
        &["-n", "default", "delete", "deployment", "swap-demo"],
        None,
    )?;
    let consolidated = watch_until(&cluster, began, args.consolidation_timeout, || async {
        Ok(cluster.nodeclaims().await?.is_empty() && cluster.karpenter_nodes().await?.is_empty())
    })
    .await?;
    if consolidated {
        println!(
            "  every empty node and NodeClaim removed {:.1}s after the delete; {} instance(s) left in the simulator",
            deleted.elapsed().as_secs_f64(),
            cluster.instances().len()
        );
    } else {
        println!(
            "  the empty nodes were not removed within {:?} (is the disruption controller in this build?); {} instance(s) left",
            args.consolidation_timeout,
            cluster.instances().len()
        );
    }

    step(began, "tearing down");
    for c in &mut controllers {
        let code = c.terminate(Duration::from_secs(10));
        println!("  controller {} exited with {code:?}", c.pod);
    }
    drop(controllers);
    let total = began.elapsed();
    drop(cluster);
    println!("\ndemo finished in {:.1}s", total.as_secs_f64());
    Ok(())
}
