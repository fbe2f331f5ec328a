//! Ranking the instance types a new node could be: the seam where the instance-selector plugin plugs in.

use std::cmp::Reverse;

use super::instance_types::{InstanceType, Offering};
use super::resources::{Dim, Resources};

/// The instance types one solve ranks from, with a fingerprint of what stays the same between
/// calls (names, capacity, labels, offerings and prices; not availability, which candidates
/// carry). A ranker that keeps a converted copy (the plugin runtime loads it into its
/// instances) refreshes it when the fingerprint changes.
#[derive(Debug, Clone, Copy)]
pub struct Catalog<'a> {
    pub types: &'a [InstanceType],
    pub fingerprint: u64,
}

impl<'a> Catalog<'a> {
    pub fn new(types: &'a [InstanceType]) -> Self {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        types.len().hash(&mut h);
        for t in types {
            (&t.name, &t.capacity, &t.labels).hash(&mut h);
            for o in &t.offerings {
                (&o.zone, &o.capacity_type, o.price_micros).hash(&mut h);
            }
            t.offerings.len().hash(&mut h);
        }
        Catalog {
            types,
            fingerprint: h.finish(),
        }
    }
}

/// A set of one instance type's offerings by position in [`InstanceType::offerings`] (the
/// first 64; a type sold in more zones and capacity types than that is not launched past them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OfferingSet(pub u64);

impl OfferingSet {
    /// The offerings of `t` for which `keep` holds.
    pub fn of(t: &InstanceType, keep: impl FnMut(&Offering) -> bool) -> Self {
        Self::from_flags(t.offerings.iter().map(keep))
    }

    /// The positions whose flag is set, from one flag per offering in order.
    pub fn from_flags(flags: impl IntoIterator<Item = bool>) -> Self {
        let bits = flags
            .into_iter()
            .take(64)
            .enumerate()
            .filter(|&(_, set)| set)
            .fold(0u64, |bits, (i, _)| bits | 1 << i);
        OfferingSet(bits)
    }

    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    pub fn contains(&self, i: usize) -> bool {
        i < 64 && self.0 & (1 << i) != 0
    }
}

/// One instance type that fits the node being planned, with the offerings it could launch as.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    /// Its position in [`RankRequest::catalog`] (`instance_type` is `catalog.types[index]`).
    pub index: usize,
    pub instance_type: &'a InstanceType,
    /// Available offerings compatible with the node's zone and capacity-type requirements.
    pub offered: OfferingSet,
}

impl<'a> Candidate<'a> {
    /// Candidate `index` of `catalog` with its available offerings (what rankers outside a
    /// solve, like self-tests and benchmarks, ask about).
    pub fn available(catalog: &Catalog<'a>, index: usize) -> Self {
        let t = &catalog.types[index];
        Candidate {
            index,
            instance_type: t,
            offered: OfferingSet::of(t, |o| o.available),
        }
    }

    /// What pods can use on it (a property of the type: capacity less its overhead).
    pub fn allocatable(&self) -> Resources {
        self.instance_type.allocatable()
    }

    /// The offerings it could launch as.
    pub fn offerings(&self) -> impl Iterator<Item = &'a Offering> + '_ {
        let t: &'a InstanceType = self.instance_type;
        t.offerings
            .iter()
            .enumerate()
            .filter(|(i, _)| self.offered.contains(*i))
            .map(|(_, o)| o)
    }

    /// The cheapest compatible available offering's price.
    pub fn cheapest_price(&self) -> u64 {
        self.offerings()
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
    /// The instance types candidates come from.
    pub catalog: Catalog<'a>,
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
    /// What ranks for `node_pool` now, for explanations (a plugin seam names the plugin).
    fn serving(&self, _node_pool: &str) -> String {
        self.name().to_owned()
    }
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
                !c.offered.is_empty() && request.requests.fits_in(&c.allocatable())
            })
            .collect();
        // Each key once per candidate (allocatable is computed from the type).
        order.sort_by_cached_key(|&i| {
            let c = &request.candidates[i];
            (
                c.cheapest_price(),
                Reverse(c.allocatable().get(Dim::CpuMillis)),
                Reverse(c.allocatable().get(Dim::MemoryBytes)),
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
        let types = [
            ("big", 8000, 400),
            ("small", 2000, 100),
            ("same", 16000, 400),
        ]
        .map(|(name, cpu, price)| {
            InstanceType::new(
                name,
                Resources::new(cpu, (cpu / 250) << 30, 110),
                vec![offering(price)],
            )
        });
        let catalog = Catalog::new(&types);
        let cands: Vec<Candidate<'_>> = (0..types.len())
            .map(|i| Candidate::available(&catalog, i))
            .collect();
        let mut req = RankRequest {
            node_pool: "p",
            requests: Resources::new(1000, 1 << 30, 1),
            catalog,
            candidates: &cands,
        };
        assert_eq!(CheapestFitRanker.rank(&req).unwrap(), vec![1, 2, 0]);
        req.requests = Resources::new(4000, 1 << 30, 1);
        assert_eq!(CheapestFitRanker.rank(&req).unwrap(), vec![2, 0]);
    }

    #[test]
    fn offering_sets_and_fingerprints() {
        let mut t = InstanceType::new(
            "m2a.large",
            Resources::new(2000, 8 << 30, 110),
            vec![offering(100), offering(200), offering(300)],
        );
        t.offerings[1].available = false;
        let types = vec![t];
        let catalog = Catalog::new(&types);
        let c = Candidate::available(&catalog, 0);
        assert_eq!(c.offered, OfferingSet(0b101));
        assert_eq!(c.cheapest_price(), 100);
        assert!(!c.offered.contains(64));
        // Availability is not part of the fingerprint; a price is.
        let mut other = types.clone();
        other[0].offerings[1].available = true;
        assert_eq!(Catalog::new(&other).fingerprint, catalog.fingerprint);
        other[0].offerings[1].price_micros = 201;
        assert_ne!(Catalog::new(&other).fingerprint, catalog.fingerprint);
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
