//! What the bench reads: a watch-fed view of the bench's pods, NodeClaims and Nodes (when each
//! NodeClaim first appeared, how many pods run), a process's memory and CPU from `/proc`, and
//! API requests per client from the API server's audit log.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use tokio::sync::Notify;

/// What the watches have seen.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Live NodeClaims, by name, with the instant each was first seen.
    pub claims: HashMap<String, Instant>,
    pub first_claim: Option<Instant>,
    /// Bench pods that exist, and those Running.
    pub pods: usize,
    pub running: usize,
    /// Nodes of the bench NodePool: name -> (instance type, being deleted).
    pub nodes: HashMap<String, (String, bool)>,
    /// Last time a NodeClaim or a Node came or went.
    pub last_change: Option<Instant>,
}

impl Seen {
    /// When the newest of the live NodeClaims first appeared.
    pub fn last_claim(&self) -> Option<Instant> {
        self.claims.values().max().copied()
    }

    pub fn deleting_nodes(&self) -> usize {
        self.nodes.values().filter(|(_, d)| *d).count()
    }

    /// Hourly price of the live nodes, from `prices` by instance type.
    pub fn hourly_price(&self, prices: &BTreeMap<String, u64>) -> u64 {
        self.nodes
            .values()
            .filter(|(_, deleting)| !deleting)
            .map(|(t, _)| prices.get(t).copied().unwrap_or(0))
            .sum()
    }

    pub fn live_nodes(&self) -> usize {
        self.nodes.len() - self.deleting_nodes()
    }
}

/// Watches pods of one namespace, NodeClaims and the NodePool's Nodes.
#[derive(Clone)]
pub struct Tracker {
    seen: Arc<Mutex<Seen>>,
    changed: Arc<Notify>,
    tasks: Arc<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if Arc::strong_count(&self.tasks) == 1 {
            for t in self.tasks.iter() {
                t.abort();
            }
        }
    }
}

fn watch_config() -> watcher::Config {
    // Paged initial lists: 20,000 pods in one response would be one large allocation.
    watcher::Config::default().page_size(500)
}

impl Tracker {
    pub fn start(client: &kube::Client, namespace: &str, nodepool: &str) -> Tracker {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let changed = Arc::new(Notify::new());
        let mut tasks = Vec::new();

        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        tasks.push(spawn_watch(
            pods,
            &seen,
            &changed,
            |seen, all: &HashMap<String, Pod>| {
                seen.pods = all.len();
                seen.running = all
                    .values()
                    .filter(|p| {
                        p.metadata.deletion_timestamp.is_none()
                            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .count();
            },
        ));

        let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
        let claims: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
        tasks.push(spawn_watch(
            claims,
            &seen,
            &changed,
            |seen, all: &HashMap<String, DynamicObject>| {
                let now = Instant::now();
                let before = seen.claims.len();
                seen.claims.retain(|name, _| all.contains_key(name));
                let mut grew = false;
                for name in all.keys() {
                    seen.claims.entry(name.clone()).or_insert_with(|| {
                        grew = true;
                        now
                    });
                }
                if grew && seen.first_claim.is_none() {
                    seen.first_claim = Some(now);
                }
                if grew || seen.claims.len() != before {
                    seen.last_change = Some(now);
                }
            },
        ));

        let nodes: Api<Node> = Api::all(client.clone());
        let pool = nodepool.to_owned();
        tasks.push(spawn_watch(
            nodes,
            &seen,
            &changed,
            move |seen, all: &HashMap<String, Node>| {
                let nodes: HashMap<String, (String, bool)> = all
                    .values()
                    .filter(|n| n.labels().get("karpenter.sh/nodepool") == Some(&pool))
                    .map(|n| {
                        let it = n
                            .labels()
                            .get("node.kubernetes.io/instance-type")
                            .cloned()
                            .unwrap_or_default();
                        (n.name_any(), (it, n.metadata.deletion_timestamp.is_some()))
                    })
                    .collect();
                let keys = |m: &HashMap<String, (String, bool)>| -> HashSet<String> {
                    m.keys().cloned().collect()
                };
                if keys(&nodes) != keys(&seen.nodes) {
                    seen.last_change = Some(Instant::now());
                }
                seen.nodes = nodes;
            },
        ));
        Tracker {
            seen,
            changed,
            tasks: Arc::new(tasks),
        }
    }

    pub fn snapshot(&self) -> Seen {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until `done` holds for what is seen, re-checking on every change (and every second,
    /// for conditions on elapsed time). Fails after `timeout` with what was seen.
    pub async fn wait(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Seen) -> bool,
    ) -> anyhow::Result<Seen> {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            let seen = self.snapshot();
            if done(&seen) {
                return Ok(seen);
            }
            if Instant::now() > deadline {
                bail!(
                    "{what}: not reached in {timeout:?} (pods {} running {}, NodeClaims {}, nodes {})",
                    seen.pods,
                    seen.running,
                    seen.claims.len(),
                    seen.nodes.len()
                );
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
        }
    }
}

/// Keeps a map of every object `api` watches and calls `update` with it after each change.
fn spawn_watch<K>(
    api: Api<K>,
    seen: &Arc<Mutex<Seen>>,
    changed: &Arc<Notify>,
    update: impl Fn(&mut Seen, &HashMap<String, K>) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let seen = Arc::clone(seen);
    let changed = Arc::clone(changed);
    tokio::spawn(async move {
        let mut all: HashMap<String, K> = HashMap::new();
        let mut init: HashMap<String, K> = HashMap::new();
        let mut stream = watcher::watcher(api, watch_config()).boxed();
        while let Some(event) = stream.next().await {
            let publish = match event {
                Ok(Event::Apply(o)) => {
                    all.insert(o.name_any(), o);
                    true
                }
                Ok(Event::Delete(o)) => {
                    all.remove(&o.name_any());
                    true
                }
                Ok(Event::Init) => {
                    init.clear();
                    false
                }
                Ok(Event::InitApply(o)) => {
                    init.insert(o.name_any(), o);
                    false
                }
                Ok(Event::InitDone) => {
                    all = std::mem::take(&mut init);
                    true
                }
                Err(e) => {
                    tracing::debug!(error = %e, "bench watch error; the watcher retries");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    false
                }
            };
            if publish {
                update(&mut seen.lock().unwrap_or_else(|e| e.into_inner()), &all);
                changed.notify_waiters();
            }
        }
    })
}

/// A process's resident memory (now and peak) and CPU time, from `/proc/<pid>`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcStats {
    pub rss_kib: u64,
    /// The part of `rss_kib` that maps files (the binary's code and data), not heap.
    pub rss_file_kib: u64,
    pub peak_rss_kib: u64,
    pub cpu_seconds: f64,
}

impl ProcStats {
    pub fn read(pid: u32) -> anyhow::Result<ProcStats> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        let kib = |key: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // Fields after the command (which may hold spaces) start at field 3; utime and stime
        // are fields 14 and 15.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<u64>().ok()))
            .sum();
        let hz = clock_ticks();
        Ok(ProcStats {
            rss_kib: kib("VmRSS:"),
            rss_file_kib: kib("RssFile:"),
            peak_rss_kib: kib("VmHWM:"),
            cpu_seconds: ticks as f64 / hz,
        })
    }
}

/// USER_HZ, the unit of `/proc/<pid>/stat` times: 100 on every Linux architecture this runs on
/// (reading it with `sysconf` would need `unsafe`, which the workspace denies).
fn clock_ticks() -> f64 {
    100.0
}

/// Requests in the API server's audit log (one line per completed request) whose client
/// `matches` (username, user agent), received in `[from, to]`.
pub fn audit_requests(
    log: &Path,
    from: Timestamp,
    to: Timestamp,
    matches: &dyn Fn(&str, &str) -> bool,
) -> anyhow::Result<u64> {
    #[derive(serde::Deserialize)]
    struct User {
        #[serde(default)]
        username: String,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct AuditEvent {
        user: User,
        #[serde(default)]
        user_agent: String,
        request_received_timestamp: Timestamp,
    }
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    let mut n = 0;
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<AuditEvent>(line) else {
            continue;
        };
        if e.request_received_timestamp >= from
            && e.request_received_timestamp <= to
            && matches(&e.user.username, &e.user_agent)
        {
            n += 1;
        }
    }
    Ok(n)
}

/// The audit policy: every request once, when its response completes, without bodies.
pub const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_cpu() {
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        let s = ProcStats::read(std::process::id()).unwrap();
        assert!(s.rss_kib > 0 && s.peak_rss_kib >= s.rss_kib);
        // The test binary's own code is mapped from its file.
        assert!(s.rss_file_kib > 0 && s.rss_file_kib < s.rss_kib);
        assert!(s.cpu_seconds >= 0.0);
    }

    #[test]
    fn audit_lines_are_counted_by_client_and_window() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        let line = |user: &str, agent: &str, at: &str| {
            format!(
                r#"{{"kind":"Event","user":{{"username":"{user}"}},"userAgent":"{agent}","requestReceivedTimestamp":"{at}","verb":"get"}}"#
            )
        };
        std::fs::write(
            &log,
            [
                line("a", "kwok-karpenter/v0", "2026-01-01T00:00:01.000000Z"),
                line("a", "kwok-karpenter/v0", "2026-01-01T00:00:05.000000Z"),
                line("b", "kubectl/v1", "2026-01-01T00:00:02.000000Z"),
                "not json".into(),
            ]
            .join("\n"),
        )
        .unwrap();
        let from: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let to: Timestamp = "2026-01-01T00:00:03Z".parse().unwrap();
        let n = audit_requests(&log, from, to, &|_, agent| {
            agent.starts_with("kwok-karpenter")
        })
        .unwrap();
        assert_eq!(n, 1);
    }
}
