//! {{name}}: an instance-selector policy for karpenter-provider-kakaocloud.
//!
//! Ranks the flavors that fit the pods and can launch now, cheapest first, leaving out the
//! families the settings deny. Settings (`config.json` of its ConfigMap), all optional:
//! `{"denyFamilies": ["c2a"]}`.

use karpenter_kakaocloud_sdk::prelude::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    pub deny_families: Vec<String>,
}

pub struct Policy;

impl InstanceSelector for Policy {
    type Config = Config;

    fn rank(input: &RankRequest, config: &Config) -> Result<Vec<u32>, String> {
        let kept = input.candidates.iter().enumerate().filter(|(_, t)| {
            !config.deny_families.contains(&t.family)
                && t.cheapest_available().is_some()
                && input.requests.fits_in(&t.allocatable)
        });
        Ok(order_by(kept.map(|(i, _)| i), |i| {
            let t = &input.candidates[i];
            let price = t.cheapest_available().map_or(u64::MAX, |o| o.price_micros);
            (price, t.name.clone())
        }))
    }
}

karpenter_kakaocloud_sdk::export_instance_selector!(Policy);

#[cfg(test)]
mod tests {
    /// The cases `kk-plugin test` also runs against the built component.
    #[test]
    fn cases() {
        karpenter_kakaocloud_sdk::case::assert_rank_cases::<super::Policy>("cases");
    }
}
