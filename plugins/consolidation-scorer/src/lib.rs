//! The default consolidation-scorer plugin: the least disruption per unit of cost saved.
//!
//! For each candidate node, the hourly saving is its price, minus the replacement's price when its
//! pods do not fit on the other nodes. The score is that saving (in currency units per hour)
//! divided by `1 + disruption-cost`, so an empty node scores its full price and a busy node with
//! costly pods scores little. A node scores 0 (keep it) when its pods fit nowhere and no
//! replacement is offered, when the saving is below `minSavingsMicros`, or when it is younger than
//! `minAgeSeconds`.
//!
//! Settings (`config.json`, all optional): `{"minSavingsMicros": 10000, "minAgeSeconds": 0}`.

use karpenter_kakaocloud_sdk::prelude::*;
use serde::Deserialize;

/// The plugin's settings.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Savings below this (micro-units per hour) are not worth a disruption.
    pub min_savings_micros: u64,
    /// Nodes younger than this are kept.
    pub min_age_seconds: u64,
}

/// The policy.
pub struct LeastDisruptionPerSaving;

/// The hourly saving of removing (or replacing) a candidate, if it can go at all.
pub fn savings_micros(c: &ConsolidationCandidate) -> Option<u64> {
    if c.pods_fit_elsewhere || c.pod_count == 0 {
        return Some(c.price_micros);
    }
    c.replacement_price_micros
        .map(|r| c.price_micros.saturating_sub(r))
}

impl ConsolidationScorer for LeastDisruptionPerSaving {
    type Config = Config;

    fn score(input: &ScoreInput, config: &Config) -> Result<Vec<f64>, String> {
        Ok(input
            .candidates
            .iter()
            .map(|c| {
                let Some(saving) = savings_micros(c) else {
                    return 0.0;
                };
                if saving == 0
                    || saving < config.min_savings_micros
                    || c.age_seconds < config.min_age_seconds
                {
                    return 0.0;
                }
                let cost = if c.disruption_cost.is_finite() {
                    c.disruption_cost.max(0.0)
                } else {
                    f64::MAX
                };
                (saving as f64 / 1_000_000.0) / (1.0 + cost)
            })
            .collect())
    }
}

karpenter_kakaocloud_sdk::export_consolidation_scorer!(LeastDisruptionPerSaving, wit = "../../wit");

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_kakaocloud_sdk::testing::{self, consolidation_candidate};

    #[test]
    fn empty_cheap_disruption_scores_highest() {
        let mut empty = consolidation_candidate("empty", 100_000, 0);
        empty.pod_count = 0;
        empty.disruption_cost = 0.0;
        empty.reason = DisruptionReason::Empty;
        let mut busy = consolidation_candidate("busy", 400_000, 300);
        busy.pod_count = 10;
        busy.disruption_cost = 10.0;
        let light = consolidation_candidate("light", 200_000, 100);
        let input = ScoreInput {
            candidates: vec![busy, empty, light],
        };
        let s = testing::score::<LeastDisruptionPerSaving>(&input).unwrap();
        assert_eq!(s.len(), 3);
        // empty: 0.1/1, light: 0.2/2, busy: 0.4/11
        assert!(
            (s[1] - 0.1).abs() < 1e-9 && (s[2] - 0.1).abs() < 1e-9,
            "{s:?}"
        );
        assert!(s[0] < s[2] && s[0] > 0.0, "{s:?}");
    }

    #[test]
    fn replacement_and_unmovable() {
        let mut replaced = consolidation_candidate("r", 400_000, 500);
        replaced.pods_fit_elsewhere = false;
        replaced.replacement_price_micros = Some(100_000);
        let mut stuck = consolidation_candidate("s", 400_000, 500);
        stuck.pods_fit_elsewhere = false;
        let mut pricier = consolidation_candidate("p", 100_000, 500);
        pricier.pods_fit_elsewhere = false;
        pricier.replacement_price_micros = Some(200_000);
        let s = testing::score::<LeastDisruptionPerSaving>(&ScoreInput {
            candidates: vec![replaced, stuck, pricier],
        })
        .unwrap();
        assert!((s[0] - 0.15).abs() < 1e-9, "{s:?}");
        assert_eq!(&s[1..], &[0.0, 0.0]);
    }

    #[test]
    fn thresholds_from_config() {
        let mut young = consolidation_candidate("y", 400_000, 0);
        young.age_seconds = 30;
        let small = consolidation_candidate("s", 5_000, 0);
        let input = ScoreInput {
            candidates: vec![young, small],
        };
        let s = testing::with_config(r#"{"minSavingsMicros":10000,"minAgeSeconds":60}"#, || {
            testing::score::<LeastDisruptionPerSaving>(&input)
        })
        .unwrap();
        assert_eq!(s, vec![0.0, 0.0]);
        let s = testing::score::<LeastDisruptionPerSaving>(&input).unwrap();
        assert!(s.iter().all(|&x| x > 0.0));
    }
}
