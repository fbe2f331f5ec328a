//! Prometheus summaries, which `prometheus-client` does not have: upstream Karpenter exports
//! `karpenter_pods_startup_duration_seconds` and `karpenter_nodes_termination_duration_seconds`
//! as summaries, and its Performance dashboard reads them by `quantile` ("0", "0.5", "0.9",
//! "0.99", "1"). Quantiles are exact over the observations of the last [`MAX_AGE`] (client_golang's
//! default window), bounded to [`MAX_SAMPLES`] per series; `_sum` and `_count` are cumulative.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upstream's `SummaryObjectives()`.
pub const QUANTILES: [(f64, &str); 5] = [
    (0.0, "0"),
    (0.5, "0.5"),
    (0.9, "0.9"),
    (0.99, "0.99"),
    (1.0, "1"),
];
/// client_golang's `DefMaxAge`.
pub const MAX_AGE: Duration = Duration::from_secs(10 * 60);
/// Observations kept per series; the oldest go first.
pub const MAX_SAMPLES: usize = 4096;

#[derive(Debug, Default)]
struct Series {
    window: VecDeque<(Instant, f64)>,
    sum: f64,
    count: u64,
}

/// One summary family; `label` names its one label (or none).
#[derive(Debug)]
pub struct Summary {
    name: &'static str,
    help: &'static str,
    label: Option<&'static str>,
    series: Mutex<BTreeMap<String, Series>>,
}

impl Summary {
    pub const fn new(name: &'static str, help: &'static str, label: Option<&'static str>) -> Self {
        Summary {
            name,
            help,
            label,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// The family's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Records `value` for the series whose label is `label_value` ("" without a label).
    pub fn observe(&self, label_value: &str, value: f64) {
        self.observe_at(label_value, value, Instant::now());
    }

    fn observe_at(&self, label_value: &str, value: f64, at: Instant) {
        if !value.is_finite() {
            return;
        }
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let s = series.entry(label_value.to_string()).or_default();
        s.sum += value;
        s.count += 1;
        if s.window.len() == MAX_SAMPLES {
            s.window.pop_front();
        }
        s.window.push_back((at, value));
    }

    /// Appends the family in the OpenMetrics text format; an error is the writer's (a scrape
    /// whose reader left).
    pub fn encode(&self, out: &mut impl Write) -> std::fmt::Result {
        self.encode_at(out, Instant::now())
    }

    fn encode_at(&self, out: &mut impl Write, now: Instant) -> std::fmt::Result {
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        writeln!(out, "# HELP {} {}", self.name, self.help)?;
        writeln!(out, "# TYPE {} summary", self.name)?;
        for (value, s) in series.iter_mut() {
            while s
                .window
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > MAX_AGE)
            {
                s.window.pop_front();
            }
            let mut sorted: Vec<f64> = s.window.iter().map(|(_, v)| *v).collect();
            sorted.sort_by(f64::total_cmp);
            let labels = |extra: Option<&str>| {
                let own = self
                    .label
                    .map(|l| format!("{l}=\"{}\"", escape(value)))
                    .into_iter();
                let all: Vec<String> = own
                    .chain(extra.map(|q| format!("quantile=\"{q}\"")))
                    .collect();
                if all.is_empty() {
                    String::new()
                } else {
                    format!("{{{}}}", all.join(","))
                }
            };
            for (q, text) in QUANTILES {
                let v = quantile(&sorted, q).unwrap_or(f64::NAN);
                writeln!(out, "{}{} {}", self.name, labels(Some(text)), v)?;
            }
            writeln!(out, "{}_sum{} {}", self.name, labels(None), s.sum)?;
            writeln!(out, "{}_count{} {}", self.name, labels(None), s.count)?;
        }
        Ok(())
    }
}

/// The nearest-rank quantile of sorted values; `None` when there are none (Prometheus shows NaN,
/// as client_golang does for an empty window).
fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn escape(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_over_the_window_and_cumulative_sum_and_count() {
        let s = Summary::new("x_seconds", "help", Some("nodepool"));
        let start = Instant::now();
        for v in 1..=100 {
            s.observe_at("a\"b", f64::from(v), start);
        }
        let mut out = String::new();
        s.encode_at(&mut out, start).unwrap();
        assert!(out.contains("# TYPE x_seconds summary"), "{out}");
        assert!(
            out.contains(r#"x_seconds{nodepool="a\"b",quantile="0"} 1"#),
            "{out}"
        );
        assert!(
            out.contains(r#"x_seconds{nodepool="a\"b",quantile="0.5"} 50"#),
            "{out}"
        );
        assert!(
            out.contains(r#"x_seconds{nodepool="a\"b",quantile="0.99"} 99"#),
            "{out}"
        );
        assert!(
            out.contains(r#"x_seconds{nodepool="a\"b",quantile="1"} 100"#),
            "{out}"
        );
        assert!(
            out.contains(r#"x_seconds_sum{nodepool="a\"b"} 5050"#),
            "{out}"
        );
        assert!(
            out.contains(r#"x_seconds_count{nodepool="a\"b"} 100"#),
            "{out}"
        );

        // Past the window the quantiles are empty; sum and count stay.
        let mut later = String::new();
        s.encode_at(&mut later, start + MAX_AGE + Duration::from_secs(1))
            .unwrap();
        assert!(later.contains(r#"quantile="0.5"} NaN"#), "{later}");
        assert!(
            later.contains(r#"x_seconds_count{nodepool="a\"b"} 100"#),
            "{later}"
        );
    }

    #[test]
    fn unlabelled_series_and_bounded_window() {
        let s = Summary::new("y_seconds", "help", None);
        let now = Instant::now();
        for v in 0..(MAX_SAMPLES + 10) {
            s.observe_at("", v as f64, now);
        }
        s.observe_at("", f64::NAN, now);
        let mut out = String::new();
        s.encode_at(&mut out, now).unwrap();
        assert!(out.contains(r#"y_seconds{quantile="0"} 10"#), "{out}");
        assert!(
            out.contains(&format!("y_seconds_count {}", MAX_SAMPLES + 10)),
            "{out}"
        );
    }
}
