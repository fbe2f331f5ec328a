//! `kk-scale`: the whole controller at scale on a real control plane, beside upstream Karpenter.
//!
//! Each row gets a fresh local control plane (kwok plays the kubelets) with the API server's
//! audit log on, and runs one autoscaler as a separate process: ours (the controller binary
//! against the KakaoCloud simulator, installed with the chart) or upstream's kwok provider
//! (`sigs.k8s.io/karpenter/kwok`, built by tests/upstream/build.sh, given the simulator's catalog
//! as its instance-type file). Both get the same NodePool and the same workload:
//!
//! - **out**: upstream's diverse mix (plain, zonal and hostname spread, zonal affinity, hostname
//!   anti-affinity) from zero, until every pod runs;
//! - **in**: every Deployment scaled to 20 % until consolidation leaves the nodes alone;
//! - **steady** (a second cluster): ten pods to a node on one flavor, then a disruption pass and
//!   a controller restart (the relist) measured there.
//!
//! Prints a table. A benchmark, not a test: nothing here asserts a time.

mod measure;
mod rows;
mod workload;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::jiff::Timestamp;

use measure::{Seen, Tracker};
use rows::{Row, RowKind};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "kk-scale",
    about = "Scale bench: ours beside upstream Karpenter's kwok provider"
)]
pub struct Args {
    /// Our controller binary (build it with `cargo build --release -p karpenter-kakaocloud`).
    #[arg(long)]
    pub controller: PathBuf,
    /// Upstream's kwok provider and its CRDs (tests/upstream/build.sh).
    #[arg(long, env = "KK_UPSTREAM_DIR")]
    pub upstream: Option<PathBuf>,
    /// Rows of the scale-out/in run, in order.
    #[arg(long, value_delimiter = ',', default_value = "ours,upstream")]
    pub rows: Vec<RowKind>,
    /// Pods of the scale-out; 0 skips it.
    #[arg(long, default_value_t = 1000)]
    pub pods: u32,
    /// Share of the pods deleted for the scale-in, percent.
    #[arg(long, default_value_t = 80)]
    pub scale_in_percent: u32,
    /// Pods of the steady state (ten to a node); 0 skips it.
    #[arg(long, default_value_t = 20_000)]
    pub steady_pods: u32,
    /// Rows of the steady state.
    #[arg(long, value_delimiter = ',', default_value = "ours")]
    pub steady_rows: Vec<RowKind>,
    /// How long NodeClaims and Nodes must stay unchanged for consolidation to count as done.
    #[arg(long, default_value_t = 90)]
    pub stable_secs: u64,
    /// Limit of each phase.
    #[arg(long, default_value_t = 1800)]
    pub timeout_secs: u64,
    /// How long the scale-in may take to settle; past it the row reports what it reached and
    /// that it was still consolidating (upstream removes underutilized nodes one at a time).
    #[arg(long, default_value_t = 600)]
    pub scale_in_limit_secs: u64,
}

/// One row's figures.
#[derive(Debug, Default, Clone)]
struct Figures {
    first_claim_s: f64,
    all_claims_s: f64,
    running_s: f64,
    nodes: usize,
    price: u64,
    peak_rss_mib: f64,
    cpu_s: f64,
    api_rps: f64,
    cloud_rps: Option<f64>,
    /// When the last NodeClaim or Node changed after the scale-in; `None`: nothing changed.
    in_s: Option<f64>,
    /// The scale-in had not settled within `--scale-in-limit-secs`.
    in_unsettled: bool,
    in_nodes: usize,
    in_price: u64,
}

#[derive(Debug, Default, Clone)]
struct SteadyFigures {
    pods: usize,
    nodes: usize,
    running_s: f64,
    rss_mib: f64,
    /// Of `rss_mib`, the binary's mapped code and data.
    rss_file_mib: f64,
    peak_rss_mib: f64,
    pass_s: Option<f64>,
    relist_s: f64,
    relist_requests: u64,
    relist_rss_mib: f64,
}

fn secs(from: Instant, to: Option<Instant>) -> f64 {
    to.map(|t| t.saturating_duration_since(from).as_secs_f64())
        .unwrap_or(f64::NAN)
}

impl Figures {
    /// The scale-in's consolidation time, that nothing changed within the stable window, or
    /// that it was still going at the limit (then the time is that of the last change seen).
    fn consolidated(&self) -> String {
        let last = self
            .in_s
            .map_or_else(|| "no change".into(), |s| format!("{s:.1} s"));
        if self.in_unsettled {
            format!("still consolidating (last change {last})")
        } else {
            last
        }
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

async fn scale_out_in(row: &Row, args: &Args) -> anyhow::Result<Figures> {
    let timeout = Duration::from_secs(args.timeout_secs);
    let tracker = Tracker::start(&row.cluster.kube, workload::NAMESPACE, "bench");
    let workloads = workload::diverse(args.pods);
    let cpu0 = row.stats()?.cpu_seconds;
    let cloud0 = row.cloud_requests();
    let (t0, ts0) = (Instant::now(), Timestamp::now());
    row.apply(&workloads)?;
    let pods = args.pods as usize;
    let out = tracker
        .wait("scale-out: every pod Running", timeout, |s| {
            s.running == pods
        })
        .await?;
    let (t1, ts1) = (Instant::now(), Timestamp::now());
    let stats = row.stats()?;
    let elapsed = t1.duration_since(t0).as_secs_f64();
    let mut f = Figures {
        first_claim_s: secs(t0, out.first_claim),
        all_claims_s: secs(t0, out.last_claim()),
        running_s: elapsed,
        nodes: out.live_nodes(),
        price: out.hourly_price(&row.prices),
        peak_rss_mib: mib(stats.peak_rss_kib),
        cpu_s: stats.cpu_seconds - cpu0,
        api_rps: row.api_requests(ts0, ts1)? as f64 / elapsed,
        cloud_rps: row
            .cloud_requests()
            .zip(cloud0)
            .map(|(b, a)| (b - a) as f64 / elapsed),
        ..Default::default()
    };
    println!(
        "  [{}] out: {pods} pods Running in {:.1}s on {} nodes",
        row.kind, f.running_s, f.nodes
    );

    // Scale in: every Deployment to the share left.
    let keep = |r: u32| r * (100 - args.scale_in_percent.min(100)) / 100;
    let scaled: Vec<workload::Workload> = workloads
        .iter()
        .map(|w| w.with_replicas(keep(w.replicas)))
        .collect();
    let left: usize = scaled.iter().map(|w| w.replicas as usize).sum();
    let t2 = Instant::now();
    row.apply(&scaled)?;
    let stable = Duration::from_secs(args.stable_secs);
    let limit = Duration::from_secs(args.scale_in_limit_secs);
    let settled = tracker
        .wait("scale-in: consolidation settled", limit, |s: &Seen| {
            s.pods == left
                && s.running == left
                && s.deleting_nodes() == 0
                && s.last_change.map_or(t2, |c| c.max(t2)).elapsed() >= stable
        })
        .await;
    f.in_unsettled = settled.is_err();
    let after = settled.unwrap_or_else(|_| tracker.snapshot());
    f.in_s = after
        .last_change
        .filter(|c| *c >= t2)
        .map(|c| c.duration_since(t2).as_secs_f64());
    f.in_nodes = after.live_nodes();
    f.in_price = after.hourly_price(&row.prices);
    let stats = row.stats()?;
    f.peak_rss_mib = mib(stats.peak_rss_kib);
    println!(
        "  [{}] in: {left} pods left; {} to {} nodes",
        row.kind,
        f.consolidated(),
        f.in_nodes
    );
    Ok(f)
}

async fn steady(row: &mut Row, args: &Args) -> anyhow::Result<SteadyFigures> {
    let timeout = Duration::from_secs(args.timeout_secs);
    let tracker = Tracker::start(&row.cluster.kube, workload::NAMESPACE, "bench");
    let pods = args.steady_pods as usize;
    let t0 = Instant::now();
    row.apply(&workload::steady(args.steady_pods))?;
    let seen = tracker
        .wait("steady: every pod Running", timeout, |s| s.running == pods)
        .await?;
    let running_s = t0.elapsed().as_secs_f64();
    println!(
        "  [{}] steady: {pods} pods Running in {running_s:.1}s on {} nodes",
        row.kind,
        seen.live_nodes()
    );
    // Two full disruption passes over the settled cluster.
    let before = row.evaluation_seconds()?;
    let passes = rows::wait_for_passes(row, before, 2, timeout).await?;
    let stats = row.stats()?;
    // The relist: a restarted controller lists everything again before it is ready.
    let (r0, ts0) = (Instant::now(), Timestamp::now());
    row.restart(timeout).await?;
    let relist_s = r0.elapsed().as_secs_f64();
    let relist_requests = row.api_requests(ts0, Timestamp::now())?;
    // Its memory once it has run a pass over everything.
    let before = row.evaluation_seconds()?;
    rows::wait_for_passes(row, before, 1, timeout).await?;
    let relisted = row.stats()?;
    Ok(SteadyFigures {
        pods,
        nodes: seen.live_nodes(),
        running_s,
        rss_mib: mib(stats.rss_kib),
        rss_file_mib: mib(stats.rss_file_kib),
        peak_rss_mib: mib(stats.peak_rss_kib),
        pass_s: passes,
        relist_s,
        relist_requests,
        relist_rss_mib: mib(relisted.rss_kib),
    })
}

fn print_scale(rows: &[(RowKind, Figures)], args: &Args) {
    println!(
        "\n{} pods out (upstream's diverse mix), then {}% deleted; consolidateAfter {}",
        args.pods,
        args.scale_in_percent,
        workload::CONSOLIDATE_AFTER
    );
    println!(
        "| row | first NodeClaim | all NodeClaims | all Running | nodes | KRW/h | peak RSS | CPU | API req/s | cloud req/s | consolidated in | nodes after | KRW/h after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (kind, f) in rows {
        println!(
            "| {kind} | {:.1} s | {:.1} s | {:.1} s | {} | {} | {:.0} MiB | {:.1} s | {:.1} | {} | {} | {} | {} |",
            f.first_claim_s,
            f.all_claims_s,
            f.running_s,
            f.nodes,
            f.price,
            f.peak_rss_mib,
            f.cpu_s,
            f.api_rps,
            f.cloud_rps
                .map(|r| format!("{r:.1}"))
                .unwrap_or_else(|| "n/a".into()),
            f.consolidated(),
            f.in_nodes,
            f.in_price
        );
    }
}

fn print_steady(rows: &[(RowKind, SteadyFigures)]) {
    println!(
        "\nsteady state: ten pods to a node on {}",
        workload::STEADY_FLAVOR
    );
    println!(
        "| row | pods | nodes | all Running | RSS (of it file-backed) | peak RSS | disruption pass | relist (restart to synced) | relist requests | RSS after relist |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (kind, s) in rows {
        println!(
            "| {kind} | {} | {} | {:.1} s | {:.0} MiB ({:.0}) | {:.0} MiB | {} | {:.1} s | {} | {:.0} MiB |",
            s.pods,
            s.nodes,
            s.running_s,
            s.rss_mib,
            s.rss_file_mib,
            s.peak_rss_mib,
            s.pass_s
                .map(|p| format!("{:.2} s", p))
                .unwrap_or_else(|| "n/a".into()),
            s.relist_s,
            s.relist_requests,
            s.relist_rss_mib
        );
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SCALE_LOG")
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    anyhow::ensure!(
        args.controller.is_file(),
        "--controller {} is not a file (cargo build --release -p karpenter-kakaocloud)",
        args.controller.display()
    );
    let mut scale = Vec::new();
    let rows = if args.pods > 0 { &args.rows[..] } else { &[] };
    for kind in rows {
        println!("== {kind}: scale out and in");
        let row = Row::start(*kind, &args)
            .await
            .with_context(|| format!("starting the {kind} row"))?;
        let figures = scale_out_in(&row, &args).await;
        row.finish(&format!("{kind:?}-scale").to_lowercase());
        scale.push((*kind, figures?));
    }
    // Printed now: the steady state can run for half an hour, and a stopped run keeps these.
    if !scale.is_empty() {
        print_scale(&scale, &args);
    }
    let mut steady_rows = Vec::new();
    if args.steady_pods > 0 {
        for kind in &args.steady_rows {
            println!("== {kind}: steady state");
            let mut row = Row::start(*kind, &args)
                .await
                .with_context(|| format!("starting the {kind} row"))?;
            let figures = steady(&mut row, &args).await;
            row.finish(&format!("{kind:?}-steady").to_lowercase());
            steady_rows.push((*kind, figures?));
        }
    }
    if !steady_rows.is_empty() {
        print_steady(&steady_rows);
    }
    Ok(())
}
