//! {{name}}: a consolidation-scorer policy for karpenter-provider-kakaocloud.
//!
//! Scores each candidate node by the hourly price it saves per unit of disruption; a node
//! whose pods would not fit elsewhere, or younger than the settings' `minAgeSeconds`, scores 0
//! (kept). Settings (`config.json` of its ConfigMap), all optional: `{"minAgeSeconds": 600}`.

use karpenter_kakaocloud_sdk::prelude::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    pub min_age_seconds: u64,
}

pub struct Policy;

impl ConsolidationScorer for Policy {
    type Config = Config;

    fn score(input: &ScoreInput, config: &Config) -> Result<Vec<f64>, String> {
        Ok(input
            .candidates
            .iter()
            .map(|c| {
                if !c.pods_fit_elsewhere || c.age_seconds < config.min_age_seconds {
                    return 0.0;
                }
                let saved = c.price_micros.saturating_sub(c.replacement_price_micros.unwrap_or(0));
                saved as f64 / c.disruption_cost.max(1.0)
            })
            .collect())
    }
}

karpenter_kakaocloud_sdk::export_consolidation_scorer!(Policy);

#[cfg(test)]
mod tests {
    /// The cases `kk-plugin test` also runs against the built component.
    #[test]
    fn cases() {
        karpenter_kakaocloud_sdk::case::assert_score_cases::<super::Policy>("cases");
    }
}
