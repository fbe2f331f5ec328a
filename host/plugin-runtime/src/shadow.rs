//! Shadow plugins. A plugin ConfigMap labelled `karpenter.kakaocloud.com/plugin-mode=shadow` is
//! verified, compiled and self-tested like any other, then asked every real decision of its
//! world beside whatever serves it (a plugin or the native default), and never acts. Each
//! divergence (another flavor first, another ranking, another consolidation order, other
//! userdata) and the hourly price its first choice would have made are counted in metrics,
//! kept (the last [`RECENT`], for the `/plugins/shadow` view), and summarized in a
//! `ShadowReport` Event every [`REPORT_EVERY`] decisions. Promoting it is removing the label.
//!
//! Shadow calls run on a thread of their own, fed by a bounded queue the seams never wait on:
//! a slow, failing or hostile shadow cannot delay or change a decision (when the queue is full
//! the comparison is dropped and counted).

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::PluginError;
use super::bindings::types as t;
use super::convert::SelectorCatalog;
use super::engine::{Loaded, sha256_hex};
use super::metrics::{PluginMetrics, ShadowDivergence, ShadowLabels};
use super::replay::{flavor, price_delta};
use kk_engine::disruption::scorer as native_scorer;
use kk_engine::scheduling::ranker;

/// Decisions waiting for their shadow call; beyond, comparisons are dropped.
pub const QUEUE: usize = 64;
/// Divergences kept per shadow plugin for the view.
pub const RECENT: usize = 20;
/// A `ShadowReport` Event after this many decisions since the last one.
pub const REPORT_EVERY: u64 = 20;

/// What served a decision, and the input it was made on.
pub enum Decision {
    Rank {
        catalog: Arc<SelectorCatalog>,
        input: t::RankInput,
        /// Indices into `input.candidates`, best first.
        chosen: Vec<usize>,
    },
    Score {
        input: t::ScoreInput,
        scores: Vec<f64>,
    },
    Render {
        input: t::UserdataInput,
        text: String,
    },
}

struct Job {
    shadow: Arc<Loaded>,
    decision: Decision,
}

/// One decision the shadow would have made otherwise.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Divergence {
    /// `flavor`, `ranking`, `order`, `userdata` or `error`.
    pub kind: &'static str,
    /// Seconds since the Unix epoch.
    pub at: u64,
    /// What served (first flavors, first nodes, or the userdata's digest).
    pub serving: String,
    /// What the shadow answered, the same way.
    pub shadow: String,
    /// Hourly price of the shadow's first flavor minus the serving one's (KRW micros).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_delta_micros: Option<i64>,
}

/// A shadow plugin's record since it was loaded at its digest.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub world: String,
    pub plugin: String,
    pub digest: String,
    pub decisions: u64,
    /// Divergent decisions by kind.
    pub diverged: BTreeMap<&'static str, u64>,
    /// The sum over decisions of the hourly price difference its first choice would have made
    /// (KRW micros; negative: cheaper).
    pub price_delta_micros: i64,
    /// Comparisons dropped because the queue was full.
    pub dropped: u64,
    /// The latest divergences, newest last.
    pub recent: VecDeque<Divergence>,
    #[serde(skip)]
    reported: u64,
}

impl Stats {
    pub fn diverged_total(&self) -> u64 {
        self.diverged.values().sum()
    }

    /// The Event note summarizing it.
    pub fn summary(&self) -> String {
        let kinds: Vec<String> = self
            .diverged
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let kinds = if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        };
        format!(
            "shadow {} plugin {}: {} decisions, {} diverged{kinds}; its first choices would have changed the hourly price by {:+.3} KRW in total",
            self.world,
            self.plugin,
            self.decisions,
            self.diverged_total(),
            self.price_delta_micros as f64 / 1e6
        )
    }
}

type Ledger = Arc<Mutex<BTreeMap<(&'static str, String), Stats>>>;

/// The queue into the shadow thread, and what it has found.
pub struct Shadows {
    queue: SyncSender<Job>,
    ledger: Ledger,
    metrics: Option<Arc<PluginMetrics>>,
}

impl Shadows {
    /// Starts the shadow thread (it ends when this is dropped).
    pub fn new(metrics: Option<Arc<PluginMetrics>>) -> Shadows {
        let (queue, jobs) = std::sync::mpsc::sync_channel(QUEUE);
        let ledger = Ledger::default();
        let (theirs, their_metrics) = (ledger.clone(), metrics.clone());
        let started = std::thread::Builder::new()
            .name("plugin-shadow".into())
            .spawn(move || work(jobs, theirs, their_metrics));
        if let Err(e) = started {
            // Without the thread every offer finds the queue closed: shadows are not compared.
            tracing::warn!(error = %e, "cannot start the shadow plugin thread");
        }
        Shadows {
            queue,
            ledger,
            metrics,
        }
    }

    /// Hands a decision to `shadow`; never waits.
    pub fn offer(&self, shadow: Arc<Loaded>, decision: Decision) {
        let key = (shadow.kind.world(), shadow.name.clone());
        let digest = shadow.digest.clone();
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.queue.try_send(Job { shadow, decision })
        {
            let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
            entry(&mut ledger, key.clone(), &digest).dropped += 1;
            if let Some(m) = &self.metrics {
                m.shadow_dropped
                    .get_or_create(&ShadowLabels {
                        world: key.0.into(),
                        plugin: key.1,
                    })
                    .inc();
            }
        }
    }

    /// Every shadow's record, by world and name.
    pub fn stats(&self) -> Vec<Stats> {
        self.ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The records with `every` decisions since their last report, marked reported.
    pub fn due(&self, every: u64) -> Vec<Stats> {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        ledger
            .values_mut()
            .filter(|s| s.decisions >= s.reported + every.max(1))
            .map(|s| {
                s.reported = s.decisions;
                s.clone()
            })
            .collect()
    }
}

/// The record of `key`, started afresh when the plugin's digest changed.
fn entry<'a>(
    ledger: &'a mut BTreeMap<(&'static str, String), Stats>,
    key: (&'static str, String),
    digest: &str,
) -> &'a mut Stats {
    let stats = ledger.entry(key.clone()).or_default();
    if stats.digest != digest {
        *stats = Stats {
            world: key.0.to_owned(),
            plugin: key.1,
            digest: digest.to_owned(),
            ..Default::default()
        };
    }
    stats
}

fn work(jobs: Receiver<Job>, ledger: Ledger, metrics: Option<Arc<PluginMetrics>>) {
    for job in jobs {
        let found = compare(&job.shadow, &job.decision);
        let labels = ShadowLabels {
            world: job.shadow.kind.world().into(),
            plugin: job.shadow.name.clone(),
        };
        let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
        let stats = entry(
            &mut ledger,
            (job.shadow.kind.world(), job.shadow.name.clone()),
            &job.shadow.digest,
        );
        stats.decisions += 1;
        if let Some(m) = &metrics {
            m.shadow_decisions.get_or_create(&labels).inc();
        }
        let Some(d) = found else { continue };
        *stats.diverged.entry(d.kind).or_default() += 1;
        stats.price_delta_micros += d.price_delta_micros.unwrap_or(0);
        if let Some(m) = &metrics {
            m.shadow_divergences
                .get_or_create(&ShadowDivergence {
                    world: labels.world.clone(),
                    plugin: labels.plugin.clone(),
                    divergence: d.kind.into(),
                })
                .inc();
            m.shadow_price_delta
                .get_or_create(&labels)
                .set(stats.price_delta_micros);
        }
        if stats.recent.len() == RECENT {
            stats.recent.pop_front();
        }
        stats.recent.push_back(d);
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn error(e: impl std::fmt::Display) -> Option<Divergence> {
    Some(Divergence {
        kind: "error",
        at: now(),
        serving: String::new(),
        shadow: e.to_string().chars().take(300).collect(),
        price_delta_micros: None,
    })
}

/// Calls the shadow on the decision's input; what differs, if anything.
pub fn compare(shadow: &Loaded, decision: &Decision) -> Option<Divergence> {
    match decision {
        Decision::Rank {
            catalog,
            input,
            chosen,
        } => {
            let order: Vec<usize> = match shadow.rank(catalog, input) {
                Ok(o) => o.into_iter().map(|i| i as usize).collect(),
                Err(e) => return error(e),
            };
            if let Err(e) = ranker::validate(&shadow.name, &order, input.candidates.len()) {
                return error(e);
            }
            let kind = match (chosen.first(), order.first()) {
                (a, b) if a != b => "flavor",
                _ if *chosen != order => "ranking",
                _ => return None,
            };
            let name =
                |i: &usize| flavor(&catalog.types, input, *i).map_or("-", |f| f.name.as_str());
            let first = |o: &[usize]| o.iter().take(3).map(name).collect::<Vec<_>>().join(",");
            Some(Divergence {
                kind,
                at: now(),
                serving: first(chosen),
                shadow: first(&order),
                price_delta_micros: price_delta(
                    &catalog.types,
                    input,
                    chosen.first().copied(),
                    order.first().copied(),
                ),
            })
        }
        Decision::Score { input, scores } => {
            let theirs = match shadow.score(input) {
                Ok(s) => s,
                Err(e) => return error(e),
            };
            if let Err(e) = native_scorer::validate(&shadow.name, &theirs, input.candidates.len()) {
                return error(e);
            }
            let (a, b) = (removal_order(scores), removal_order(&theirs));
            if a == b {
                return None;
            }
            let names = |o: &[usize]| {
                o.iter()
                    .take(3)
                    .filter_map(|&i| input.candidates.get(i).map(|c| c.node_name.as_str()))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            Some(Divergence {
                kind: "order",
                at: now(),
                serving: names(&a),
                shadow: names(&b),
                price_delta_micros: None,
            })
        }
        Decision::Render { input, text } => {
            let theirs = match shadow.render(input) {
                Ok(s) => s,
                Err(e) => return error(e),
            };
            if let Err(e) = kk_engine::userdata::validate(&theirs, shadow.bounds().userdata_bytes) {
                return error(PluginError::InvalidOutput {
                    plugin: shadow.name.clone(),
                    detail: e.to_string(),
                });
            }
            (theirs != *text).then(|| Divergence {
                kind: "userdata",
                at: now(),
                serving: format!("sha256:{}", &sha256_hex(text.as_bytes())[..12]),
                shadow: format!("sha256:{}", &sha256_hex(theirs.as_bytes())[..12]),
                price_delta_micros: None,
            })
        }
    }
}

/// Candidates in the order consolidation removes them: positive scores, highest first.
fn removal_order(scores: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).filter(|&i| scores[i] > 0.0).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removal_order_is_positive_scores_highest_first() {
        assert_eq!(removal_order(&[1.0, 0.0, 3.0, -1.0, 2.0]), vec![2, 4, 0]);
        assert_eq!(removal_order(&[]), Vec::<usize>::new());
    }

    #[test]
    fn the_summary_names_kinds_and_price() {
        let mut s = Stats {
            world: "instance-selector".into(),
            plugin: "team".into(),
            decisions: 20,
            price_delta_micros: -1_500_000,
            ..Default::default()
        };
        s.diverged.insert("flavor", 3);
        s.diverged.insert("ranking", 1);
        let note = s.summary();
        assert!(
            note.contains("20 decisions, 4 diverged (flavor 3, ranking 1)"),
            "{note}"
        );
        assert!(note.contains("-1.500 KRW"), "{note}");
    }
}
