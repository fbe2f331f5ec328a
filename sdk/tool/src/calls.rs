//! `run` and `test`: cases (the SDK's case format, the files a plugin's native tests run) called
//! on a built component through the controller's runtime: the same bounds (deadline, memory,
//! tables, log), the same self-test and the same output checks.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use karpenter_kakaocloud_sdk::case::{self, Case};
use kk_plugin_runtime::replay::{self, Candidate};
use kk_plugin_runtime::{Bounds, Runtime};
use serde_json::Value;

#[derive(clap::Args)]
pub struct Run {
    /// The component (plain or gzip-compressed).
    pub component: PathBuf,
    /// The case: one call as JSON (docs/plugins.md, "Cases").
    #[arg(long)]
    pub input: PathBuf,
    /// Calls to make; the time printed is their median.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
}

#[derive(clap::Args)]
pub struct Test {
    /// The component (plain or gzip-compressed).
    pub component: PathBuf,
    /// The directory of `*.json` cases.
    #[arg(long, default_value = "cases")]
    pub cases: PathBuf,
}

/// The component compiled by a runtime with the controller's default bounds.
pub fn load(path: &Path) -> Result<Candidate> {
    let runtime: Arc<Runtime> = Runtime::new(Bounds::default(), None)?;
    let name = path
        .file_stem()
        .map_or_else(|| "plugin".to_owned(), |s| s.to_string_lossy().into_owned());
    let wasm = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Candidate::load(&runtime, &name, &wasm)?)
}

/// The case's call as the runtime takes it (both sides are the WIT records as JSON).
fn host_call(case: &Case) -> Result<replay::Call> {
    let json = serde_json::to_value(&case.call)?;
    serde_json::from_value(json).context("the case's call does not fit the contract's records")
}

/// Calls `case` once; its outcome in the form cases compare against.
fn answer(candidate: &Candidate, case: &Case) -> Result<(Result<Value, String>, Duration)> {
    if case.call.world() != candidate.kind.world() {
        bail!(
            "a {} case, but the component is a {}",
            case.call.world(),
            candidate.kind
        );
    }
    let answer = candidate.call(&case.config_json(), &host_call(case)?);
    Ok((answer.outcome.map_err(|e| replay::message(&e)), answer.took))
}

fn millis(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

pub fn run(args: &Run) -> Result<()> {
    let candidate = load(&args.component)?;
    let case = Case::load(&args.input).map_err(anyhow::Error::msg)?;
    let mut times = Vec::new();
    let mut outcome = Ok(Value::Null);
    for _ in 0..args.repeat.max(1) {
        let (o, took) = answer(&candidate, &case)?;
        outcome = o;
        times.push(took);
    }
    times.sort();
    match &outcome {
        Ok(Value::String(text)) => println!("{text}"),
        Ok(v) => println!("{}", serde_json::to_string_pretty(v)?),
        Err(message) => println!("error: {message}"),
    }
    eprintln!(
        "{} {} sha256:{}: {} in {} (median of {})",
        candidate.kind,
        candidate.name,
        candidate.digest,
        if outcome.is_ok() {
            "answered"
        } else {
            "refused"
        },
        millis(times[times.len() / 2]),
        times.len()
    );
    if let Some(why) = case.expect.as_ref().and_then(|e| e.mismatch(&outcome)) {
        bail!("not as the case expects: {why}");
    }
    Ok(())
}

pub fn test(args: &Test) -> Result<()> {
    let candidate = load(&args.component)?;
    let cases = case::load_dir(&args.cases).map_err(anyhow::Error::msg)?;
    let mut failed = 0;
    match candidate.accepted("{}") {
        Ok(()) => println!("ok    self-test: the controller accepts it"),
        Err(e) => {
            failed += 1;
            println!("FAIL  self-test: {e}");
        }
    }
    for (path, case) in &cases {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        match answer(&candidate, case) {
            Ok((outcome, took)) => match case.expect.as_ref().and_then(|e| e.mismatch(&outcome)) {
                None => println!("ok    {name} ({})", millis(took)),
                Some(why) => {
                    failed += 1;
                    println!("FAIL  {name}: {why}");
                }
            },
            Err(e) => {
                failed += 1;
                println!("FAIL  {name}: {e:#}");
            }
        }
    }
    println!(
        "{} sha256:{}: {} of {} passed",
        candidate.name,
        candidate.digest,
        cases.len() + 1 - failed,
        cases.len() + 1
    );
    if failed > 0 {
        bail!("{failed} failed");
    }
    Ok(())
}
