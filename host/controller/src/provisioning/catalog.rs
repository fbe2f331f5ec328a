//! The instance-type catalog from KakaoCloud flavors: flavor x zone x capacity type, priced from
//! [`kakaocloud::pricing`], minus kubelet overhead, with offerings that recently reported
//! no capacity marked unavailable (they stay in the list, as Karpenter requires).

use kk_apis::names;
use kk_apis::names::label;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kakaocloud::api::{Flavor, InstanceKind};
use kakaocloud::pricing;

use kk_engine::scheduling::instance_types::{InstanceType, Offering, Overhead};

use kk_engine::scheduling::resources::{Dim, Resources};

const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;

/// Options of the catalog build.
#[derive(Debug, Clone, Copy)]
pub struct CatalogOptions {
    pub max_pods: u64,
    /// Root volume size, the node's ephemeral storage.
    pub root_volume_gib: u64,
}

impl Default for CatalogOptions {
    fn default() -> Self {
        CatalogOptions {
            max_pods: 110,
            root_volume_gib: 50,
        }
    }
}

/// Offerings that failed with insufficient capacity, skipped until their TTL passes.
#[derive(Debug)]
pub struct UnavailableOfferings {
    ttl: Duration,
    entries: Mutex<HashMap<(String, String, String), Instant>>,
}

impl UnavailableOfferings {
    pub fn new(ttl: Duration) -> Self {
        UnavailableOfferings {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String, String), Instant>> {
        // A panic while holding the lock leaves a usable map: recover it.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn mark(&self, instance_type: &str, zone: &str, capacity_type: &str) {
        let key = (
            instance_type.to_owned(),
            zone.to_owned(),
            capacity_type.to_owned(),
        );
        self.lock().insert(key, Instant::now() + self.ttl);
    }

    pub fn is_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        let now = Instant::now();
        let mut entries = self.lock();
        entries.retain(|_, until| *until > now);
        entries.contains_key(&(
            instance_type.to_owned(),
            zone.to_owned(),
            capacity_type.to_owned(),
        ))
    }
}

/// Normalises KakaoCloud's architecture spelling to `kubernetes.io/arch`.
pub fn kube_arch(raw: Option<&str>) -> &'static str {
    match raw.map(str::to_ascii_lowercase).as_deref() {
        Some("arm64" | "aarch64" | "arm") => "arm64",
        _ => "amd64",
    }
}

/// Hourly price in micro-KRW: the table's, or an estimate from size for unknown flavors (so an
/// unknown flavor still sorts sensibly, and never as free).
pub fn price_micros(flavor: &Flavor) -> u64 {
    let name = flavor.name.as_deref().unwrap_or(&flavor.id);
    let krw = pricing::hourly_price_krw(name).unwrap_or_else(|| {
        let vcpus = u64::from(flavor.vcpus.unwrap_or(1));
        let gib = flavor.memory_mb.unwrap_or(1024).div_ceil(1024);
        let gpus = u64::from(flavor.hw_count.unwrap_or(0));
        vcpus * 40 + gib * 6 + gpus * 1000
    });
    krw.saturating_mul(1_000_000)
}

/// A GPU flavor: `instance_type: gpu` (the official enum) or, as older answers put it, an
/// accelerator of type GPU. Its GPU count is `hw_count`.
fn is_gpu(flavor: &Flavor) -> bool {
    let typed = flavor.instance_type == Some(InstanceKind::Gpu);
    let accelerated = flavor
        .hw_type
        .as_deref()
        .is_some_and(|t| t.eq_ignore_ascii_case("gpu"));
    (typed || accelerated) && flavor.hw_count.unwrap_or(0) > 0
}

/// One flavor as an instance type. `None` for flavors without a name, CPUs or memory.
pub fn instance_type(
    flavor: &Flavor,
    options: &CatalogOptions,
    unavailable: Option<&UnavailableOfferings>,
) -> Option<InstanceType> {
    let name = flavor.name.clone()?;
    let vcpus = u64::from(flavor.vcpus.filter(|&v| v > 0)?);
    let memory = flavor.memory_mb.filter(|&m| m > 0)? * MI;
    let gpus = if is_gpu(flavor) {
        u64::from(flavor.hw_count.unwrap_or(0))
    } else {
        0
    };
    let capacity = Resources::new(vcpus * 1000, memory, options.max_pods)
        .with(Dim::Gpus, gpus)
        .with(Dim::EphemeralBytes, options.root_volume_gib * GI);
    let price = price_micros(flavor);
    let offerings = flavor
        .zones()
        .iter()
        .map(|zone| {
            let has_capacity = flavor.available_in(zone).is_none_or(|n| n > 0);
            let cached = unavailable
                .is_some_and(|u| u.is_unavailable(&name, zone, names::CAPACITY_TYPE_ON_DEMAND));
            Offering {
                zone: zone.clone(),
                capacity_type: names::CAPACITY_TYPE_ON_DEMAND.to_owned(),
                price_micros: price,
                available: has_capacity && !cached,
            }
        })
        .collect();
    let mut labels = vec![
        (
            label::ARCH.to_owned(),
            kube_arch(flavor.architecture.as_deref()).to_owned(),
        ),
        (label::OS.to_owned(), "linux".to_owned()),
        (label::INSTANCE_CPU.to_owned(), vcpus.to_string()),
        (label::INSTANCE_MEMORY.to_owned(), (memory / MI).to_string()),
        (label::FLAVOR_ID.to_owned(), flavor.id.clone()),
    ];
    let (family, size) = match name.split_once('.') {
        Some((f, s)) => (f.to_owned(), s.to_owned()),
        None => (name.clone(), String::new()),
    };
    labels.push((
        label::INSTANCE_FAMILY.to_owned(),
        flavor.instance_family.clone().unwrap_or(family),
    ));
    if !size.is_empty() {
        labels.push((
            label::INSTANCE_SIZE.to_owned(),
            flavor.instance_size.clone().unwrap_or(size),
        ));
    }
    if gpus > 0 {
        labels.push((label::INSTANCE_GPU_COUNT.to_owned(), gpus.to_string()));
        if let Some(gpu) = flavor.hw_name.as_deref().filter(|n| !n.is_empty()) {
            labels.push((
                label::INSTANCE_GPU_NAME.to_owned(),
                sanitize_label_value(gpu),
            ));
        }
    }
    labels.sort();
    Some(InstanceType {
        name,
        capacity,
        overhead: Overhead::kubelet_defaults(&capacity),
        labels,
        offerings,
    })
}

/// The whole catalog, sorted by name: virtual machines and GPU flavors (`instance_type` `vm` or
/// `gpu`, or unset); bare metal and kinds this version does not know are left out.
pub fn build(
    flavors: &[Flavor],
    options: &CatalogOptions,
    unavailable: Option<&UnavailableOfferings>,
) -> Vec<InstanceType> {
    let mut out: Vec<InstanceType> = flavors
        .iter()
        .filter(|f| {
            matches!(
                f.instance_type,
                None | Some(InstanceKind::Vm | InstanceKind::Gpu)
            )
        })
        .filter_map(|f| instance_type(f, options, unavailable))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

fn sanitize_label_value(raw: &str) -> String {
    let mut v: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    while v.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        v.pop();
    }
    while v.starts_with(|c: char| !c.is_ascii_alphanumeric()) {
        v.remove(0);
    }
    v
}

/// The catalog backed by KakaoCloud: flavors listed at most every `refresh`, offerings checked
/// against the shared unavailable-offerings cache on every read.
pub struct LiveCatalog {
    client: kakaocloud::Client,
    options: CatalogOptions,
    refresh: Duration,
    pub unavailable: std::sync::Arc<UnavailableOfferings>,
    cached: tokio::sync::Mutex<Option<(Instant, std::sync::Arc<Vec<Flavor>>)>>,
}

impl LiveCatalog {
    pub fn new(
        client: kakaocloud::Client,
        options: CatalogOptions,
        refresh: Duration,
        unavailable: std::sync::Arc<UnavailableOfferings>,
    ) -> Self {
        LiveCatalog {
            client,
            options,
            refresh,
            unavailable,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The flavors, listed again when the cached list is older than the refresh period.
    pub async fn flavors(&self) -> Result<std::sync::Arc<Vec<Flavor>>, kakaocloud::Error> {
        let mut cached = self.cached.lock().await;
        if let Some((at, flavors)) = cached.as_ref()
            && at.elapsed() < self.refresh
        {
            return Ok(flavors.clone());
        }
        let flavors = std::sync::Arc::new(self.client.flavors().list().await?);
        *cached = Some((Instant::now(), flavors.clone()));
        Ok(flavors)
    }

    /// The instance types, with current availability.
    pub async fn instance_types(&self) -> Result<Vec<InstanceType>, kakaocloud::Error> {
        let flavors = self.flavors().await?;
        Ok(build(&flavors, &self.options, Some(&self.unavailable)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flavor(name: &str, vcpus: u32, mem_gib: u64) -> Flavor {
        Flavor {
            id: format!("id-{name}"),
            name: Some(name.into()),
            vcpus: Some(vcpus),
            memory_mb: Some(mem_gib * 1024),
            architecture: Some("x86_64".into()),
            manufacturer: None,
            group: None,
            instance_type: Some(InstanceKind::Vm),
            instance_family: None,
            instance_size: None,
            is_burstable: None,
            processor: None,
            availability_zone: Some(vec!["kr-central-2-a".into(), "kr-central-2-b".into()]),
            available: Some(
                [
                    ("kr-central-2-a".to_owned(), 5),
                    ("kr-central-2-b".to_owned(), 0),
                ]
                .into_iter()
                .collect(),
            ),
            root_gb: None,
            hw_count: None,
            hw_type: None,
            hw_name: None,
            is_hyper_threading_supported: None,
            is_hyper_threading_disabled: None,
            is_hyper_threading_disable_supported: None,
        }
    }

    #[test]
    fn official_shapes_gpu_kind_nulls_and_unknown_kinds() {
        // `instance_type: gpu` alone (no hw_type) is a GPU flavor; `null` zones and
        // availability mean no offerings rather than an error; an unknown kind stays out.
        let mut gpu = flavor("p2i.xlarge", 8, 64);
        gpu.instance_type = Some(InstanceKind::Gpu);
        gpu.hw_count = Some(2);
        gpu.hw_name = Some("A100".into());
        let mut nulls = flavor("m2a.large", 2, 8);
        nulls.availability_zone = None;
        nulls.available = None;
        let mut npu = flavor("n1.large", 4, 16);
        npu.instance_type = Some(InstanceKind::Other("npu".into()));
        let cat = build(&[gpu, nulls, npu], &CatalogOptions::default(), None);
        let names: Vec<&str> = cat.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["m2a.large", "p2i.xlarge"]);
        assert!(cat[0].offerings.is_empty());
        assert_eq!(cat[1].capacity.get(Dim::Gpus), 2);
        assert_eq!(cat[1].label(label::INSTANCE_GPU_COUNT), Some("2"));
        assert_eq!(cat[1].label(label::INSTANCE_GPU_NAME), Some("A100"));
    }

    #[test]
    fn flavors_become_priced_instance_types() {
        let mut gpu = flavor("gn1i.xlarge", 4, 30);
        gpu.instance_type = Some(InstanceKind::Gpu);
        gpu.hw_count = Some(1);
        gpu.hw_name = Some("NVIDIA T4".into());
        let mut bm = flavor("bm.huge", 64, 256);
        bm.instance_type = Some(InstanceKind::Bm);
        let cat = build(
            &[flavor("m2a.xlarge", 4, 16), gpu, bm],
            &CatalogOptions::default(),
            None,
        );
        assert_eq!(cat.len(), 2);
        let gpu = &cat[0];
        assert_eq!(gpu.name, "gn1i.xlarge");
        assert_eq!(gpu.capacity.get(Dim::Gpus), 1);
        assert_eq!(gpu.label(label::INSTANCE_GPU_NAME), Some("NVIDIA-T4"));
        let m2a = &cat[1];
        assert_eq!(m2a.capacity.get(Dim::CpuMillis), 4000);
        assert_eq!(m2a.capacity.get(Dim::Gpus), 0);
        assert_eq!(m2a.label(label::INSTANCE_FAMILY), Some("m2a"));
        assert_eq!(m2a.label(label::ARCH), Some("amd64"));
        assert_eq!(m2a.label(label::FLAVOR_ID), Some("id-m2a.xlarge"));
        assert_eq!(m2a.offerings[0].price_micros, 192_000_000);
        assert!(m2a.offerings[0].available);
        // The flavor reports no launchable instance in zone b.
        assert!(!m2a.offerings[1].available);
        assert!(m2a.allocatable().get(Dim::CpuMillis) < 4000);
    }

    #[test]
    fn unavailable_cache_marks_offerings_until_ttl() {
        let cache = UnavailableOfferings::new(Duration::from_secs(60));
        cache.mark(
            "m2a.xlarge",
            "kr-central-2-a",
            names::CAPACITY_TYPE_ON_DEMAND,
        );
        let cat = build(
            &[flavor("m2a.xlarge", 4, 16)],
            &CatalogOptions::default(),
            Some(&cache),
        );
        assert!(!cat[0].offerings[0].available);
        assert!(!cache.is_unavailable(
            "m2a.xlarge",
            "kr-central-2-b",
            names::CAPACITY_TYPE_ON_DEMAND
        ));
        let short = UnavailableOfferings::new(Duration::ZERO);
        short.mark("x", "z", names::CAPACITY_TYPE_ON_DEMAND);
        assert!(!short.is_unavailable("x", "z", names::CAPACITY_TYPE_ON_DEMAND));
    }

    #[test]
    fn unknown_flavors_get_an_estimated_nonzero_price() {
        let f = flavor("zz9.large", 2, 8);
        assert!(price_micros(&f) > 0);
        assert!(price_micros(&flavor("zz9.xlarge", 4, 16)) > price_micros(&f));
    }
}
