//! Example custom instance-selector written with the SDK: GPU flavors only for GPU pods, and a
//! preferred family first.
//!
//! - Pods that request GPUs get only flavors with enough GPUs (of `gpuModel`, when set).
//! - Pods that request no GPU never get a GPU flavor (they are too dear to waste).
//! - Among what fits and has an available offering: `preferFamilies` first (in the listed
//!   order), then by price, then by name.
//!
//! Settings: `{"preferFamilies": ["m2a"], "gpuModel": "A100"}` (both optional).

use karpenter_kakaocloud_sdk::prelude::*;
use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    pub prefer_families: Vec<String>,
    pub gpu_model: Option<String>,
}

pub struct GpuAware;

impl InstanceSelector for GpuAware {
    type Config = Config;

    fn rank(input: &RankRequest, config: &Config) -> Result<Vec<u32>, String> {
        let wants_gpu = input.requests.gpus > 0;
        let kept = input.candidates.iter().enumerate().filter(|(_, t)| {
            let gpu_ok = if wants_gpu {
                t.gpu_count() as u64 >= input.requests.gpus
                    && config
                        .gpu_model
                        .as_ref()
                        .is_none_or(|m| t.gpu.as_ref().is_some_and(|g| g.model == *m))
            } else {
                t.gpu_count() == 0
            };
            gpu_ok && t.cheapest_available().is_some() && input.requests.fits_in(&t.allocatable)
        });
        Ok(order_by(kept.map(|(i, _)| i), |i| {
            let t = &input.candidates[i];
            let preference = config
                .prefer_families
                .iter()
                .position(|f| *f == t.family)
                .unwrap_or(usize::MAX);
            let price = t.cheapest_available().map_or(u64::MAX, |o| o.price_micros);
            (preference, price, t.name.clone())
        }))
    }
}

karpenter_kakaocloud_sdk::export_instance_selector!(GpuAware, wit = "../../wit");

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_kakaocloud_sdk::testing::{
        self, CandidateSpec, InstanceTypeBuilder, RankInputBuilder,
    };

    const GI: u64 = 1 << 30;

    fn catalog() -> Vec<CandidateSpec> {
        vec![
            InstanceTypeBuilder::new("g2a.xlarge", 8000, 64 * GI)
                .gpus(1, "A100")
                .offering("a", 2_000_000, true)
                .build(),
            InstanceTypeBuilder::new("m2a.xlarge", 4000, 16 * GI)
                .offering("a", 200_000, true)
                .build(),
            InstanceTypeBuilder::new("c2a.xlarge", 4000, 8 * GI)
                .offering("a", 150_000, true)
                .build(),
            InstanceTypeBuilder::new("g1.xlarge", 8000, 64 * GI)
                .gpus(2, "T4")
                .offering("a", 1_000_000, true)
                .build(),
        ]
    }

    #[test]
    fn cpu_pods_never_get_gpu_flavors_and_preferred_family_wins() {
        let input = RankInputBuilder::new()
            .requests(1000, GI)
            .candidates(catalog())
            .build();
        assert_eq!(testing::rank::<GpuAware>(&input).unwrap(), vec![2, 1]);
        let preferred = testing::with_config(r#"{"preferFamilies":["m2a"]}"#, || {
            testing::rank::<GpuAware>(&input)
        });
        assert_eq!(preferred.unwrap(), vec![1, 2]);
    }

    #[test]
    fn gpu_pods_get_only_gpu_flavors_of_the_model() {
        let input = RankInputBuilder::new()
            .requests(1000, GI)
            .gpus(1)
            .candidates(catalog())
            .build();
        assert_eq!(testing::rank::<GpuAware>(&input).unwrap(), vec![3, 0]);
        let a100 = testing::with_config(r#"{"gpuModel":"A100"}"#, || {
            testing::rank::<GpuAware>(&input)
        });
        assert_eq!(a100.unwrap(), vec![0]);
        let two = RankInputBuilder::new()
            .requests(1000, GI)
            .gpus(2)
            .candidates(catalog())
            .build();
        assert_eq!(testing::rank::<GpuAware>(&two).unwrap(), vec![3]);
    }
}
