//! Typed helpers on the WIT records: resource arithmetic, prices, requirement matching.

use crate::{Entry, InstanceType, Operator, Requirement, Resources};

impl Resources {
    /// All zero.
    pub const ZERO: Resources = Resources {
        cpu_millis: 0,
        memory_bytes: 0,
        pods: 0,
        gpus: 0,
        ephemeral_bytes: 0,
    };

    fn zip(&self, o: &Resources, f: impl Fn(u64, u64) -> u64) -> Resources {
        Resources {
            cpu_millis: f(self.cpu_millis, o.cpu_millis),
            memory_bytes: f(self.memory_bytes, o.memory_bytes),
            pods: f(self.pods, o.pods),
            gpus: f(self.gpus, o.gpus),
            ephemeral_bytes: f(self.ephemeral_bytes, o.ephemeral_bytes),
        }
    }

    /// Element-wise sum (saturating).
    pub fn plus(&self, o: &Resources) -> Resources {
        self.zip(o, u64::saturating_add)
    }

    /// Element-wise difference, floored at zero.
    pub fn minus(&self, o: &Resources) -> Resources {
        self.zip(o, u64::saturating_sub)
    }

    /// True when every dimension of `self` is at most that of `capacity`.
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        self.cpu_millis <= capacity.cpu_millis
            && self.memory_bytes <= capacity.memory_bytes
            && self.pods <= capacity.pods
            && self.gpus <= capacity.gpus
            && self.ephemeral_bytes <= capacity.ephemeral_bytes
    }

    /// How full `self` makes `capacity`, per mille, on its tightest CPU/memory dimension
    /// (0 when capacity is zero there).
    pub fn utilisation_permille(&self, capacity: &Resources) -> u32 {
        let ratio = |used: u64, cap: u64| {
            if cap == 0 {
                0
            } else {
                ((used as u128 * 1000) / cap as u128).min(u32::MAX as u128) as u32
            }
        };
        ratio(self.cpu_millis, capacity.cpu_millis)
            .max(ratio(self.memory_bytes, capacity.memory_bytes))
    }
}

impl InstanceType {
    /// The GPU count (0 without GPUs).
    pub fn gpu_count(&self) -> u32 {
        self.gpu.as_ref().map_or(0, |g| g.count)
    }

    /// The value of a label of this type, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        label(&self.labels, key)
    }

    /// True when the type satisfies every requirement (its labels, plus `node.kubernetes.io/instance-type`
    /// and `karpenter.kakaocloud.com/instance-family` derived from its name).
    pub fn satisfies(&self, requirements: &[Requirement]) -> bool {
        requirements.iter().all(|r| {
            let value = match r.key.as_str() {
                "node.kubernetes.io/instance-type" => Some(self.name.as_str()),
                "karpenter.kakaocloud.com/instance-family" => Some(self.family.as_str()),
                key => self.label(key),
            };
            r.matches(value)
        })
    }
}

/// Looks a key up in a label list.
pub fn label<'a>(labels: &'a [Entry], key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|e| e.key == key)
        .map(|e| e.value.as_str())
}

/// The family of a flavor name: the part before the first dot (`m2a.xlarge` -> `m2a`).
pub fn family_of(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

impl Requirement {
    /// Whether a label value (none = label absent) satisfies this requirement, with
    /// Kubernetes node-selector semantics.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt | Operator::Lt => {
                let (Some(v), Some(bound)) = (value, self.values.first()) else {
                    return false;
                };
                match (v.parse::<i64>(), bound.parse::<i64>()) {
                    (Ok(v), Ok(b)) if self.operator == Operator::Gt => v > b,
                    (Ok(v), Ok(b)) => v < b,
                    _ => false,
                }
            }
        }
    }
}

/// Sorts candidate indices by a key, stable, and returns them as `u32` (what `rank` returns).
pub fn order_by<K: Ord>(
    indices: impl IntoIterator<Item = usize>,
    mut key: impl FnMut(usize) -> K,
) -> Vec<u32> {
    let mut v: Vec<usize> = indices.into_iter().collect();
    v.sort_by_cached_key(|&i| key(i));
    v.into_iter().map(|i| i as u32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{InstanceTypeBuilder, RankInputBuilder};

    #[test]
    fn resource_arithmetic() {
        let a = Resources {
            cpu_millis: 1000,
            memory_bytes: 10,
            pods: 1,
            gpus: 0,
            ephemeral_bytes: 0,
        };
        let b = Resources {
            cpu_millis: 3000,
            memory_bytes: 5,
            pods: 2,
            gpus: 1,
            ephemeral_bytes: 0,
        };
        assert_eq!(a.plus(&b).cpu_millis, 4000);
        assert_eq!(a.minus(&b).memory_bytes, 5);
        assert_eq!(a.minus(&b).cpu_millis, 0);
        assert!(!a.fits_in(&b));
        assert!(Resources::ZERO.fits_in(&a));
        assert_eq!(
            Resources {
                cpu_millis: 500,
                ..Resources::ZERO
            }
            .utilisation_permille(&a),
            500
        );
    }

    #[test]
    fn price_per_vcpu_uses_cheapest_available_offering() {
        let case = RankInputBuilder::new()
            .candidate(
                InstanceTypeBuilder::new("m2a.large", 2000, 8 << 30)
                    .offering("a", 200_000, true)
                    .offering("b", 100_000, false)
                    .build(),
            )
            .candidate(
                InstanceTypeBuilder::new("x.large", 2000, 1)
                    .offering("a", 1, false)
                    .build(),
            )
            .build();
        let request = case.request();
        let (t, none) = (&request.candidates[0], &request.candidates[1]);
        assert_eq!(t.cheapest_available().unwrap().zone, "a");
        assert!(t.is_available(0) && !t.is_available(1) && !t.is_available(64));
        // 200_000 per hour over 1.9 allocatable vCPU (2 cores minus kube-reserved).
        let per_vcpu = t.price_per_allocatable_vcpu().unwrap();
        assert!(per_vcpu > 100_000 && per_vcpu < 110_000, "{per_vcpu}");
        assert_eq!(none.price_per_allocatable_vcpu(), None);
    }

    #[test]
    fn a_candidate_outside_the_catalog_is_an_error() {
        let mut case = RankInputBuilder::new()
            .candidate(InstanceTypeBuilder::new("m2a.large", 2000, 1).build())
            .build();
        case.input.candidates[0] = 1;
        let err = crate::RankRequest::resolve(&case.input, &case.catalog).unwrap_err();
        assert!(err.contains("instance type 1 of a catalog of 1"), "{err}");
    }

    #[test]
    fn requirement_matching() {
        let req = |op, vals: &[&str]| Requirement {
            key: "k".into(),
            operator: op,
            values: vals.iter().map(|s| s.to_string()).collect(),
        };
        assert!(req(Operator::In, &["a", "b"]).matches(Some("b")));
        assert!(!req(Operator::In, &["a"]).matches(None));
        assert!(req(Operator::NotIn, &["a"]).matches(None));
        assert!(!req(Operator::NotIn, &["a"]).matches(Some("a")));
        assert!(req(Operator::Exists, &[]).matches(Some("")));
        assert!(req(Operator::DoesNotExist, &[]).matches(None));
        assert!(req(Operator::Gt, &["4"]).matches(Some("8")));
        assert!(!req(Operator::Gt, &["4"]).matches(Some("4")));
        assert!(req(Operator::Lt, &["4"]).matches(Some("2")));
        assert!(!req(Operator::Lt, &["x"]).matches(Some("2")));
        let t = InstanceTypeBuilder::new("g1.xlarge", 4000, 1)
            .label("tier", "gold")
            .build()
            .instance_type;
        assert!(t.satisfies(&[Requirement {
            key: "karpenter.kakaocloud.com/instance-family".into(),
            operator: Operator::In,
            values: vec!["g1".into()],
        }]));
        assert!(!t.satisfies(&[req(Operator::Exists, &[])]));
        assert_eq!(family_of("m2a.xlarge"), "m2a");
    }
}
