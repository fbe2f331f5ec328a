//! `explain` and `what-if`: questions to a running controller's views (its metrics port, e.g.
//! `kubectl -n karpenter-kakaocloud port-forward deploy/karpenter-provider-kakaocloud 8080`).
//!
//! * `explain pod <namespace>/<name>` and `explain node <name>`: the controller's answer,
//!   printed for a person (or `-o json`);
//! * `what-if <component>`: the controller's latest instance-selector decisions replayed on a
//!   candidate component here, under the controller's bounds: which would have gone another
//!   way, and what the first choices' hourly prices would have been.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use kk_plugin_runtime::replay::{self, Decisions};
use serde_json::Value;

use crate::calls;

#[derive(clap::Args)]
pub struct Controller {
    /// The controller's metrics endpoint.
    #[arg(long, default_value = "http://localhost:8080", global = true)]
    pub controller: String,
}

#[derive(clap::Args)]
pub struct Explain {
    #[command(subcommand)]
    pub what: Subject,
    #[command(flatten)]
    pub controller: Controller,
    /// `text` for a person, `json` for the controller's answer as it is.
    #[arg(short, long, default_value = "text", global = true)]
    pub output: Output,
}

#[derive(clap::Subcommand)]
pub enum Subject {
    /// Why a pod runs on its node and flavor, or still waits.
    Pod {
        /// `namespace/name`.
        pod: String,
    },
    /// Why a node is or is not disrupted, and where each of its pods would go.
    Node { name: String },
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(clap::Args)]
pub struct WhatIf {
    /// The candidate component (an instance-selector).
    pub component: PathBuf,
    #[command(flatten)]
    pub controller: Controller,
    /// The candidate's settings, a JSON file (default `{}`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Replay only the latest N decisions.
    #[arg(long, default_value_t = 100)]
    pub last: usize,
}

fn get(controller: &str, path: &str) -> Result<Value> {
    let url = format!("{}{path}", controller.trim_end_matches('/'));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let response = reqwest::Client::new()
            .get(&url)
            .send()
            .await
            .with_context(|| format!("asking {url}"))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .with_context(|| format!("reading {url}"))?;
        if !status.is_success() {
            bail!(
                "{url}: {status}: {}",
                body["error"].as_str().unwrap_or("no reason given")
            );
        }
        Ok(body)
    })
}

pub fn explain(args: &Explain) -> Result<()> {
    let path = match &args.what {
        Subject::Pod { pod } => {
            let (ns, name) = pod.split_once('/').context("the pod is namespace/name")?;
            format!("/explain/pod/{ns}/{name}")
        }
        Subject::Node { name } => format!("/explain/node/{name}"),
    };
    let answer = get(&args.controller.controller, &path)?;
    if args.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(());
    }
    match &args.what {
        Subject::Pod { pod } => {
            println!("{pod}: {}", answer["summary"].as_str().unwrap_or_default());
            for (i, f) in answer["decision"]["ranked"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                println!(
                    "  {:>2}. {} {}",
                    i + 1,
                    f["instanceType"].as_str().unwrap_or_default(),
                    f["priceMicros"]
                        .as_u64()
                        .map_or(String::new(), |p| format!("({p} micro-KRW/h)"))
                );
            }
        }
        Subject::Node { name } => {
            println!("{name}: {}", answer["verdict"].as_str().unwrap_or_default());
            for m in answer["methods"].as_array().into_iter().flatten() {
                println!(
                    "  {:<14} {}{}",
                    m["method"].as_str().unwrap_or_default(),
                    if m["blocks"] == true {
                        "[keeps it] "
                    } else {
                        ""
                    },
                    m["outcome"].as_str().unwrap_or_default()
                );
            }
            for p in answer["pods"].as_array().into_iter().flatten() {
                println!(
                    "  pod {} -> {}",
                    p["pod"].as_str().unwrap_or_default(),
                    p["destination"].as_str().unwrap_or_default()
                );
            }
        }
    }
    Ok(())
}

pub fn what_if(args: &WhatIf) -> Result<()> {
    let candidate = calls::load(&args.component)?;
    if candidate.kind != kk_plugin_runtime::Kind::Selector {
        bail!(
            "what-if replays instance-selector decisions; the component is a {}",
            candidate.kind
        );
    }
    let config = match &args.config {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => "{}".to_owned(),
    };
    let decisions: Decisions =
        serde_json::from_value(get(&args.controller.controller, "/plugins/decisions")?)
            .context("reading the controller's decisions")?;
    let skip = decisions.decisions.len().saturating_sub(args.last);
    let (mut replayed, mut differ, mut delta) = (0usize, 0usize, 0i64);
    println!(
        "{:<12} {:<20} {:<24} {:<24} {:>14}",
        "AT", "NODEPOOL", "SERVED", "CANDIDATE", "PRICE Δ/h"
    );
    for r in decisions.decisions.iter().skip(skip) {
        let Some(call) = decisions.call(r) else {
            continue;
        };
        let replay::Call::Rank { catalog, input } = &call else {
            continue;
        };
        let answer = candidate.call(&config, &call);
        replayed += 1;
        let name = |i: Option<usize>| {
            i.and_then(|i| replay::flavor(catalog, input, i))
                .map_or("-".to_owned(), |f| f.name.clone())
        };
        let served = r.chosen.first().map(|&i| i as usize);
        let (theirs, price) = match &answer.outcome {
            Ok(order) => {
                let first = order
                    .as_array()
                    .and_then(|o| o.first())
                    .and_then(Value::as_u64);
                let first = first.map(|i| i as usize);
                (
                    name(first),
                    replay::price_delta(catalog, input, served, first),
                )
            }
            Err(e) => (format!("error: {}", replay::message(e)), None),
        };
        let served_name = name(served);
        if theirs != served_name {
            differ += 1;
            delta += price.unwrap_or(0);
        }
        println!(
            "{:<12} {:<20} {:<24} {:<24} {:>14}",
            r.at,
            r.node_pool,
            served_name,
            theirs,
            price.map_or("-".to_owned(), |p| format!("{:+.3} KRW", p as f64 / 1e6))
        );
    }
    println!(
        "{replayed} decision(s) replayed on {} (sha256:{}): {differ} would choose another flavor first; their first choices would change the hourly price by {:+.3} KRW in total",
        candidate.name,
        &candidate.digest[..12],
        delta as f64 / 1e6
    );
    Ok(())
}
