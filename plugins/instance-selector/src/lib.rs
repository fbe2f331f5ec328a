//! The default instance-selector plugin: the cheapest available offering that fits.
//!
//! A candidate is kept when it has an available offering, the pods' aggregate requests fit its
//! allocatable, its family passes the allow/deny lists and its cheapest available offering is
//! within `maxPriceMicros`. Kept candidates are ordered by:
//! 1. the cheapest available offering's price (lowest first);
//! 2. at equal price, the larger allocatable CPU then memory first: more room for the next pods,
//!    so fewer nodes (and, as the batch already fits, each one fuller over time);
//! 3. the name, so the order is deterministic.
//!
//! Settings (`config.json`, all optional):
//! `{"allowFamilies": ["m2a", "c2a"], "denyFamilies": ["t1"], "maxPriceMicros": 500000}`.

use std::cmp::Reverse;

use karpenter_kakaocloud_sdk::prelude::*;
use serde::Deserialize;

/// The plugin's settings.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Only these families (empty: every family).
    pub allow_families: Vec<String>,
    /// Never these families (wins over the allow list).
    pub deny_families: Vec<String>,
    /// The highest acceptable hourly price in micro-units.
    pub max_price_micros: Option<u64>,
}

impl Config {
    /// Whether a candidate passes the family lists and the price ceiling.
    pub fn admits(&self, t: &InstanceType, price: u64) -> bool {
        (self.allow_families.is_empty() || self.allow_families.contains(&t.family))
            && !self.deny_families.contains(&t.family)
            && self.max_price_micros.is_none_or(|max| price <= max)
    }
}

/// The policy.
pub struct CheapestFit;

impl InstanceSelector for CheapestFit {
    type Config = Config;

    fn rank(input: &RankRequest, config: &Config) -> Result<Vec<u32>, String> {
        let kept = input.candidates.iter().enumerate().filter_map(|(i, t)| {
            let price = t.cheapest_available()?.price_micros;
            (input.requests.fits_in(&t.allocatable) && config.admits(t, price))
                .then_some((i, price))
        });
        let mut order: Vec<(usize, u64)> = kept.collect();
        order.sort_by(|&(a, pa), &(b, pb)| {
            let (ta, tb) = (&input.candidates[a], &input.candidates[b]);
            (
                pa,
                Reverse(ta.allocatable.cpu_millis),
                Reverse(ta.allocatable.memory_bytes),
                &ta.name,
            )
                .cmp(&(
                    pb,
                    Reverse(tb.allocatable.cpu_millis),
                    Reverse(tb.allocatable.memory_bytes),
                    &tb.name,
                ))
        });
        if order.is_empty() && !input.candidates.is_empty() {
            log(
                Level::Warn,
                &format!(
                    "none of {} candidates fits {}m CPU / {} bytes within the family and price limits",
                    input.candidates.len(),
                    input.requests.cpu_millis,
                    input.requests.memory_bytes
                ),
            );
        }
        Ok(order.into_iter().map(|(i, _)| i as u32).collect())
    }
}

karpenter_kakaocloud_sdk::export_instance_selector!(CheapestFit, wit = "../../wit");

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_kakaocloud_sdk::testing::{
        self, CandidateSpec, InstanceTypeBuilder, RankInputBuilder,
    };

    const GI: u64 = 1 << 30;

    fn catalog() -> Vec<CandidateSpec> {
        vec![
            InstanceTypeBuilder::new("m2a.xlarge", 4000, 16 * GI)
                .offering("a", 200_000, true)
                .build(),
            InstanceTypeBuilder::new("m2a.large", 2000, 8 * GI)
                .offering("a", 100_000, true)
                .build(),
            InstanceTypeBuilder::new("c2a.xlarge", 4000, 8 * GI)
                .offering("a", 100_000, true)
                .build(),
            InstanceTypeBuilder::new("t1.small", 1000, 2 * GI)
                .offering("a", 20_000, false)
                .build(),
            InstanceTypeBuilder::new("r2a.2xlarge", 8000, 64 * GI)
                .offering("a", 900_000, false)
                .offering("b", 500_000, true)
                .build(),
        ]
    }

    #[test]
    fn cheapest_fit_first_equal_price_prefers_larger() {
        let input = RankInputBuilder::new()
            .requests(1500, 2 * GI)
            .candidates(catalog())
            .build();
        let order = testing::rank::<CheapestFit>(&input).unwrap();
        // c2a.xlarge and m2a.large cost the same; c2a has more CPU. t1 has no available offering.
        assert_eq!(order, vec![2, 1, 0, 4]);
    }

    #[test]
    fn misfits_are_dropped() {
        let input = RankInputBuilder::new()
            .requests(3000, 12 * GI)
            .candidates(catalog())
            .build();
        assert_eq!(testing::rank::<CheapestFit>(&input).unwrap(), vec![0, 4]);
    }

    #[test]
    fn family_lists_and_max_price() {
        let input = RankInputBuilder::new()
            .requests(500, GI)
            .candidates(catalog())
            .build();
        let deny = testing::with_config(r#"{"denyFamilies":["c2a"]}"#, || {
            testing::rank::<CheapestFit>(&input)
        });
        assert_eq!(deny.unwrap(), vec![1, 0, 4]);
        let allow = testing::with_config(
            r#"{"allowFamilies":["m2a","r2a"],"maxPriceMicros":200000}"#,
            || testing::rank::<CheapestFit>(&input),
        );
        assert_eq!(allow.unwrap(), vec![1, 0]);
    }

    #[test]
    fn nothing_fits_logs_a_warning() {
        let _ = testing::take_logs();
        let input = RankInputBuilder::new()
            .requests(64_000, GI)
            .candidates(catalog())
            .build();
        assert_eq!(
            testing::rank::<CheapestFit>(&input).unwrap(),
            Vec::<u32>::new()
        );
        let logs = testing::take_logs();
        assert_eq!(logs.len(), 1);
        assert!(logs[0].1.contains("none of 5 candidates"), "{logs:?}");
    }

    #[test]
    fn bad_config_is_an_error() {
        let input = RankInputBuilder::new().candidates(catalog()).build();
        let err = testing::with_config(r#"{"maxPrice": 1}"#, || {
            testing::rank::<CheapestFit>(&input)
        })
        .unwrap_err();
        assert!(err.contains("invalid plugin config"), "{err}");
    }
}
