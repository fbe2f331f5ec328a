//! Paths, helm and kubectl plumbing, free ports, and deadline polling.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};

use crate::*;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn chart_dir() -> PathBuf {
    repo_root().join("charts/karpenter-provider-kakaocloud")
}

pub fn guide_path(name: &str) -> PathBuf {
    repo_root().join("examples/install-guide").join(name)
}

pub fn guide_file(name: &str) -> String {
    std::fs::read_to_string(guide_path(name)).unwrap_or_else(|e| panic!("guide file {name}: {e}"))
}

/// The helm binary `tests/controlplane/build-helm.sh` builds (version from its go.mod).
pub fn helm_path() -> PathBuf {
    let go_mod = include_str!("../../controlplane/go/helm/go.mod");
    let version = go_mod
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("helm.sh/helm/v4"))
                .then(|| words.next())
                .flatten()
        })
        .map(str::to_owned)
        .unwrap_or_else(|| "unknown".into());
    controlplane::default_bin_dir()
        .parent()
        .and_then(Path::parent)
        .map(|root| root.join(format!("helm-{version}/helm")))
        .unwrap_or_default()
}

/// The guide's KCNodeClass with its placeholders filled for the simulator.
pub fn guide_nodeclass() -> String {
    guide_file("kcnodeclass.yaml")
        .replace("<SUBNET_ID>", SUBNET)
        .replace("<WORKER_SECURITY_GROUP_ID>", WORKER_SG)
        .replace("<KUBERNETES_MAJOR.MINOR>", KUBERNETES_MINOR)
}

/// A free TCP port on loopback for a process started later: `controlplane::free_port`, which
/// keeps clear of the ports the kernel hands out.
pub fn free_port() -> u16 {
    controlplane::free_port().unwrap_or(0)
}

pub(crate) fn output(mut cmd: Command, stdin: Option<&str>, what: &str) -> anyhow::Result<String> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .ok_or_else(|| anyhow!("no stdin"))?
            .write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Polls `check` every 200 ms until it gives `Some`, or fails after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> anyhow::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() > deadline {
            bail!(
                "timed out after {timeout:?} waiting for {what}{}",
                last_error
                    .map(|e| format!(" (last error: {e:#})"))
                    .unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
