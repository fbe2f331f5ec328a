//! What an instance selector sees: each `rank` input resolved against the catalog the host
//! loaded, so a policy reads whole instance types while the call itself carries only flat
//! candidate records.

use std::cell::{OnceCell, RefCell};
use std::ops::Deref;

use crate::{
    InstanceSelector, InstanceType, NodePool, Offering, RankInput, Requirement, Resources,
};

/// A `rank` request: the pods' needs and the candidates, best first in the answer.
#[derive(Debug, Clone)]
pub struct RankRequest<'a> {
    pub node_pool: &'a NodePool,
    /// The aggregate requests of the pods the node is opened for, daemonset overhead included.
    pub requests: &'a Resources,
    pub pod_count: u32,
    /// The pods' requirements, merged with the NodePool's by the host.
    pub requirements: &'a [Requirement],
    /// What `rank` orders; it returns indices into this list.
    pub candidates: Vec<Candidate<'a>>,
}

/// One candidate: an instance type of the catalog (its fields are reachable directly, e.g.
/// `c.family`, `c.allocatable`) and the offerings it may launch as now.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub instance_type: &'a InstanceType,
    available: u64,
}

impl Deref for Candidate<'_> {
    type Target = InstanceType;

    fn deref(&self) -> &InstanceType {
        self.instance_type
    }
}

impl<'a> Candidate<'a> {
    /// A candidate whose offering `i` may launch when bit `i` of `available` is set.
    pub fn new(instance_type: &'a InstanceType, available: u64) -> Self {
        Candidate {
            instance_type,
            available,
        }
    }

    /// Whether offering `i` of the instance type is available and allowed for this node.
    pub fn is_available(&self, i: usize) -> bool {
        i < 64 && self.available & (1 << i) != 0
    }

    /// The offerings it may launch as.
    pub fn available_offerings(&self) -> impl Iterator<Item = &'a Offering> + '_ {
        let offerings = &self.instance_type.offerings;
        offerings
            .iter()
            .enumerate()
            .filter(|(i, _)| self.is_available(*i))
            .map(|(_, o)| o)
    }

    /// The cheapest offering it may launch as, if any.
    pub fn cheapest_available(&self) -> Option<&'a Offering> {
        self.available_offerings().min_by_key(|o| o.price_micros)
    }

    /// Price per hour of one allocatable vCPU (micro-units) at the cheapest available offering.
    pub fn price_per_allocatable_vcpu(&self) -> Option<u64> {
        let offering = self.cheapest_available()?;
        if self.allocatable.cpu_millis == 0 {
            return None;
        }
        Some(((offering.price_micros as u128 * 1000) / self.allocatable.cpu_millis as u128) as u64)
    }
}

impl<'a> RankRequest<'a> {
    /// Resolves the candidates of `input` against `catalog`; a candidate naming a type the
    /// catalog lacks is an error (the host loads the catalog first, so only a bug gets here).
    pub fn resolve(input: &'a RankInput, catalog: &'a [InstanceType]) -> Result<Self, String> {
        if input.available_offerings.len() != input.candidates.len() {
            return Err(format!(
                "{} candidates but {} offering sets",
                input.candidates.len(),
                input.available_offerings.len()
            ));
        }
        let candidates = input
            .candidates
            .iter()
            .zip(&input.available_offerings)
            .map(|(&index, &available)| {
                let instance_type = catalog.get(index as usize).ok_or_else(|| {
                    format!(
                        "candidate names instance type {index} of a catalog of {}",
                        catalog.len()
                    )
                })?;
                Ok(Candidate::new(instance_type, available))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(RankRequest {
            node_pool: &input.node_pool,
            requests: &input.requests,
            pod_count: input.pod_count,
            requirements: &input.requirements,
            candidates,
        })
    }
}

/// What one selector instance keeps between calls: the loaded catalog and its parsed config
/// (a new config is a new plugin, so new instances). Used by [`crate::export_instance_selector`].
#[doc(hidden)]
pub struct SelectorState<P: InstanceSelector> {
    catalog: RefCell<Vec<InstanceType>>,
    config: OnceCell<Result<P::Config, String>>,
}

impl<P: InstanceSelector> Default for SelectorState<P> {
    fn default() -> Self {
        SelectorState {
            catalog: RefCell::new(Vec::new()),
            config: OnceCell::new(),
        }
    }
}

impl<P: InstanceSelector> SelectorState<P> {
    pub fn load_catalog(&self, catalog: Vec<InstanceType>) -> Result<(), String> {
        *self.catalog.borrow_mut() = catalog;
        Ok(())
    }

    pub fn rank(&self, input: &RankInput) -> Result<Vec<u32>, String> {
        let config = self
            .config
            .get_or_init(|| crate::parse_config(&crate::config_json()))
            .as_ref()
            .map_err(Clone::clone)?;
        let catalog = self.catalog.borrow();
        P::rank(&RankRequest::resolve(input, &catalog)?, config)
    }
}
