//! The instance-type catalog: flavors x offerings (zone, capacity type, price, availability), with
//! allocatable computed the way upstream Karpenter does: capacity - kube-reserved - system-reserved - eviction threshold.

use super::resources::{Dim, Resources};
use kk_apis::names::label;

/// Where and how an instance type can be bought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offering {
    pub zone: String,
    /// `on-demand`, `spot` or `reserved` (the `karpenter.sh/capacity-type` value).
    pub capacity_type: String,
    /// Price per hour in micro-units of the account's currency.
    pub price_micros: u64,
    /// False while the offering is known to lack capacity (kept in the list, as Karpenter requires).
    pub available: bool,
}

/// What the node keeps for itself; subtracted from capacity to get allocatable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overhead {
    pub kube_reserved: Resources,
    pub system_reserved: Resources,
    pub eviction_threshold: Resources,
}

impl Overhead {
    pub fn total(&self) -> Resources {
        self.kube_reserved
            .add(&self.system_reserved)
            .add(&self.eviction_threshold)
    }

    /// The kubelet reservations our node image configures, following the formulas
    /// upstream providers use: CPU 6% of the first core, 1% of the second, 0.5% of the
    /// third and fourth, 0.25% of the rest; memory 11Mi per pod + 255Mi; 1Gi of ephemeral
    /// storage; eviction at 100Mi memory and 10% of ephemeral storage.
    pub fn kubelet_defaults(capacity: &Resources) -> Overhead {
        const MI: u64 = 1 << 20;
        let cores = capacity.get(Dim::CpuMillis);
        let band = |from: u64, to: u64, permille_x100: u64| {
            // permille_x100: hundredths of a percent of each core in [from, to) millicores.
            cores.clamp(from, to).saturating_sub(from) * permille_x100 / 10_000
        };
        let cpu = band(0, 1000, 600)
            + band(1000, 2000, 100)
            + band(2000, 4000, 50)
            + band(4000, u64::MAX, 25);
        let memory = 11 * MI * capacity.get(Dim::Pods) + 255 * MI;
        Overhead {
            kube_reserved: Resources::new(cpu, memory, 0).with(Dim::EphemeralBytes, 1 << 30),
            system_reserved: Resources::ZERO,
            eviction_threshold: Resources::new(0, 100 * MI, 0)
                .with(Dim::EphemeralBytes, capacity.get(Dim::EphemeralBytes) / 10),
        }
    }
}

/// One flavor as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceType {
    pub name: String,
    pub capacity: Resources,
    pub overhead: Overhead,
    /// Labels every node of this type carries (architecture, OS, family, cpu, memory...), besides
    /// the instance-type, zone and capacity-type labels derived from the name and offerings.
    pub labels: Vec<(String, String)>,
    pub offerings: Vec<Offering>,
}

impl InstanceType {
    /// A linux/amd64 instance type with the default kubelet overhead.
    pub fn new(name: impl Into<String>, capacity: Resources, offerings: Vec<Offering>) -> Self {
        InstanceType {
            name: name.into(),
            capacity,
            overhead: Overhead::kubelet_defaults(&capacity),
            labels: vec![
                (label::ARCH.to_owned(), "amd64".to_owned()),
                (label::OS.to_owned(), "linux".to_owned()),
            ],
            offerings,
        }
    }

    /// What pods can use: capacity minus every reservation.
    pub fn allocatable(&self) -> Resources {
        self.capacity.saturating_sub(&self.overhead.total())
    }

    /// The value of one of the type's labels, including its instance-type name.
    pub fn label(&self, key: &str) -> Option<&str> {
        if key == label::INSTANCE_TYPE {
            return Some(&self.name);
        }
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocatable_subtracts_every_reservation() {
        let gi = 1u64 << 30;
        let cap = Resources::new(4000, 16 * gi, 110).with(Dim::EphemeralBytes, 100 * gi);
        let it = InstanceType::new("m2a.xlarge", cap, vec![]);
        let o = it.overhead;
        // 60m + 10m + 2 x 5m for four cores.
        assert_eq!(o.kube_reserved.get(Dim::CpuMillis), 80);
        assert_eq!(
            o.kube_reserved.get(Dim::MemoryBytes),
            (11 * 110 + 255) << 20
        );
        assert_eq!(o.eviction_threshold.get(Dim::EphemeralBytes), 10 * gi);
        let alloc = it.allocatable();
        assert_eq!(alloc.get(Dim::CpuMillis), 3920);
        assert_eq!(
            alloc.get(Dim::MemoryBytes),
            16 * gi - ((11 * 110 + 255 + 100) << 20)
        );
        assert_eq!(alloc.get(Dim::EphemeralBytes), 100 * gi - gi - 10 * gi);
        assert_eq!(alloc.get(Dim::Pods), 110);
        assert_eq!(it.label(label::INSTANCE_TYPE), Some("m2a.xlarge"));
        assert_eq!(it.label(label::ARCH), Some("amd64"));
    }

    #[test]
    fn overhead_never_underflows() {
        let tiny = InstanceType::new("nano", Resources::new(100, 1 << 20, 4), vec![]);
        assert_eq!(tiny.allocatable().get(Dim::MemoryBytes), 0);
    }
}
