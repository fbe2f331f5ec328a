//! Ranking the instance types a new node could be: the seam where the instance-selector plugin plugs in.

use std::cmp::Reverse;

use super::instance_types::{InstanceType, Offering};
use super::resources::{Dim, Resources};

/// One instance type that fits the node being planned, with the offerings it could launch as.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    pub instance_type: &'a InstanceType,
    pub allocatable: Resources,
    /// Available offerings compatible with the node's zone and capacity-type requirements.
    pub offerings: Vec<&'a Offering>,
}

impl Candidate<'_> {
    /// The cheapest compatible available offering's price.
    pub fn cheapest_price(&self) -> u64 {
        self.offerings
            .iter()
            .map(|o| o.price_micros)
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// What a ranker is asked.
#[derive(Debug, Clone)]
pub struct RankRequest<'a> {
    pub node_pool: &'a str,
    /// The shape of the pods this node is opened for (their requests plus daemonset overhead).
    pub requests: Resources,
    pub candidates: &'a [Candidate<'a>],
}

/// A ranker's failure; the pods that needed the ranking are reported unschedulable with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RankError {
    #[error("ranker {ranker} failed: {message}")]
    Failed { ranker: String, message: String },
    #[error("ranker {ranker} returned index {index}, out of range for {len} candidates")]
    OutOfRange {
        ranker: String,
        index: usize,
        len: usize,
    },
    #[error("ranker {ranker} returned candidate {index} twice")]
    Duplicate { ranker: String, index: usize },
}

/// Orders candidate instance types, best first. It may leave candidates out (they will not be used).
///
/// The scheduler calls it once per distinct (NodePool, pod constraints, pod shape) and reuses the
/// order for every node of that kind, so it must be a pure function of its request.
pub trait InstanceRanker: Send + Sync {
    fn name(&self) -> &str;
    fn rank(&self, request: &RankRequest<'_>) -> Result<Vec<usize>, RankError>;
}

/// Checks a ranker's answer: every index in range, none repeated.
pub fn validate(ranker: &str, order: &[usize], len: usize) -> Result<(), RankError> {
    let mut seen = vec![false; len];
    for &index in order {
        let slot = seen.get_mut(index).ok_or_else(|| RankError::OutOfRange {
            ranker: ranker.to_owned(),
            index,
            len,
        })?;
        if *slot {
            return Err(RankError::Duplicate {
                ranker: ranker.to_owned(),
                index,
            });
        }
        *slot = true;
    }
    Ok(())
}

/// The native default: cheapest available offering first; among equal prices, the larger
/// type first (fewer, fuller nodes), then by name so the order is deterministic.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheapestFitRanker;

impl InstanceRanker for CheapestFitRanker {
    fn name(&self) -> &str {
        "cheapest-fit"
    }

    fn rank(&self, request: &RankRequest<'_>) -> Result<Vec<usize>, RankError> {
        let mut order: Vec<usize> = (0..request.candidates.len())
            .filter(|&i| {
                let c = &request.candidates[i];
                !c.offerings.is_empty() && request.requests.fits_in(&c.allocatable)
            })
            .collect();
        order.sort_by_key(|&i| {
            let c = &request.candidates[i];
            (
                c.cheapest_price(),
                Reverse(c.allocatable.get(Dim::CpuMillis)),
                Reverse(c.allocatable.get(Dim::MemoryBytes)),
                c.instance_type.name.as_str(),
            )
        });
        Ok(order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offering(price: u64) -> Offering {
        Offering {
            zone: "a".into(),
            capacity_type: "on-demand".into(),
            price_micros: price,
            available: true,
        }
    }

    #[test]
    fn cheapest_first_then_larger_and_drops_misfits() {
        let small = InstanceType::new("small", Resources::new(2000, 4 << 30, 110), vec![]);
        let big = InstanceType::new("big", Resources::new(8000, 32 << 30, 110), vec![]);
        let same_price_bigger =
            InstanceType::new("same", Resources::new(16000, 64 << 30, 110), vec![]);
        let cheap_off = offering(100);
        let dear_off = offering(400);
        let cands = vec![
            Candidate {
                instance_type: &big,
                allocatable: big.allocatable(),
                offerings: vec![&dear_off],
            },
            Candidate {
                instance_type: &small,
                allocatable: small.allocatable(),
                offerings: vec![&cheap_off],
            },
            Candidate {
                instance_type: &same_price_bigger,
                allocatable: same_price_bigger.allocatable(),
                offerings: vec![&dear_off],
            },
        ];
        let req = RankRequest {
            node_pool: "p",
            requests: Resources::new(1000, 1 << 30, 1),
            candidates: &cands,
        };
        assert_eq!(CheapestFitRanker.rank(&req).unwrap(), vec![1, 2, 0]);
        let req = RankRequest {
            node_pool: "p",
            requests: Resources::new(4000, 1 << 30, 1),
            candidates: &cands,
        };
        assert_eq!(CheapestFitRanker.rank(&req).unwrap(), vec![2, 0]);
    }

    #[test]
    fn validation_catches_bad_answers() {
        assert!(validate("x", &[0, 2, 1], 3).is_ok());
        assert!(matches!(
            validate("x", &[3], 3),
            Err(RankError::OutOfRange { .. })
        ));
        assert!(matches!(
            validate("x", &[1, 1], 3),
            Err(RankError::Duplicate { .. })
        ));
    }
}
