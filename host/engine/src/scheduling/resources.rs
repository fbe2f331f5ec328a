//! Resource vectors (cpu, memory, pods, GPUs, ephemeral storage) and Kubernetes quantity parsing.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The resource names the solver tracks; anything else requested makes a pod unschedulable.
pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const GPU: &str = "nvidia.com/gpu";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// Index of each tracked resource inside [`Resources`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    CpuMillis = 0,
    MemoryBytes = 1,
    Pods = 2,
    Gpus = 3,
    EphemeralBytes = 4,
}

const DIMS: usize = 5;
const NAMES: [&str; DIMS] = [CPU, MEMORY, PODS, GPU, EPHEMERAL_STORAGE];

/// A fixed-size resource vector: cpu in millicores, memory and storage in bytes, counts otherwise.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Resources(pub [u64; DIMS]);

impl Resources {
    pub const ZERO: Resources = Resources([0; DIMS]);

    pub fn new(cpu_millis: u64, memory_bytes: u64, pods: u64) -> Self {
        Resources([cpu_millis, memory_bytes, pods, 0, 0])
    }

    pub fn with(mut self, dim: Dim, value: u64) -> Self {
        self.0[dim as usize] = value;
        self
    }

    pub fn get(&self, dim: Dim) -> u64 {
        self.0[dim as usize]
    }

    #[inline]
    pub fn add(&self, o: &Resources) -> Resources {
        let mut r = *self;
        for i in 0..DIMS {
            r.0[i] = r.0[i].saturating_add(o.0[i]);
        }
        r
    }

    #[inline]
    pub fn saturating_sub(&self, o: &Resources) -> Resources {
        let mut r = *self;
        for i in 0..DIMS {
            r.0[i] = r.0[i].saturating_sub(o.0[i]);
        }
        r
    }

    /// Component-wise maximum.
    #[inline]
    pub fn max(&self, o: &Resources) -> Resources {
        let mut r = *self;
        for i in 0..DIMS {
            r.0[i] = r.0[i].max(o.0[i]);
        }
        r
    }

    /// Component-wise minimum.
    #[inline]
    pub fn min(&self, o: &Resources) -> Resources {
        let mut r = *self;
        for i in 0..DIMS {
            r.0[i] = r.0[i].min(o.0[i]);
        }
        r
    }

    /// True when every component of `self` is at most the one in `capacity`.
    #[inline]
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        (0..DIMS).all(|i| self.0[i] <= capacity.0[i])
    }

    /// The first resource of `self` that exceeds `capacity`, by its Kubernetes name.
    pub fn first_exceeding(&self, capacity: &Resources) -> Option<&'static str> {
        (0..DIMS)
            .find(|&i| self.0[i] > capacity.0[i])
            .map(|i| NAMES[i])
    }

    /// Each non-zero dimension by its resource name (cpu in millicores, bytes, counts).
    pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        NAMES
            .iter()
            .zip(self.0)
            .filter(|(_, v)| *v != 0)
            .map(|(n, v)| (*n, v))
    }

    /// As a Kubernetes resource list (zero entries omitted).
    pub fn to_quantities(&self) -> BTreeMap<String, Quantity> {
        let mut m = BTreeMap::new();
        for (i, name) in NAMES.iter().enumerate() {
            let v = self.0[i];
            if v == 0 {
                continue;
            }
            let q = if i == Dim::CpuMillis as usize {
                if v.is_multiple_of(1000) {
                    format!("{}", v / 1000)
                } else {
                    format!("{v}m")
                }
            } else {
                v.to_string()
            };
            m.insert((*name).to_owned(), Quantity(q));
        }
        m
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{cpu: {}m, memory: {}, pods: {}, gpu: {}, ephemeral: {}}}",
            self.0[0], self.0[1], self.0[2], self.0[3], self.0[4]
        )
    }
}

/// Why a resource list could not be turned into a [`Resources`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error("invalid quantity {value:?} for {resource}")]
    InvalidQuantity { resource: String, value: String },
    #[error("requests resource {0:?}, which no instance type offers")]
    Unsupported(String),
}

/// Parses a Kubernetes quantity into thousandths of its unit, rounding up (as the API server does for milli-values).
pub fn parse_milli(q: &str) -> Option<u128> {
    let q = q.trim();
    if q.is_empty() {
        return None;
    }
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    if num.starts_with('-') {
        return None;
    }
    let num = num.strip_prefix('+').unwrap_or(num);
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty())
        || !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
        || frac_part.len() > 30
    {
        return None;
    }
    // The value is (int.frac) * base^exp; work in an exact rational numerator / 10^frac_len.
    let (mul_num, mul_den): (u128, u128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        s if s.starts_with(['e', 'E']) => {
            let exp: i32 = s[1..].parse().ok()?;
            if exp.unsigned_abs() > 18 {
                return None;
            }
            let p = 10u128.pow(exp.unsigned_abs());
            if exp >= 0 { (p, 1) } else { (1, p) }
        }
        _ => return None,
    };
    let digits: u128 = format!("{int_part}{frac_part}").parse().unwrap_or(0);
    let frac_den = 10u128.checked_pow(u32::try_from(frac_part.len()).ok()?)?;
    let numer = digits.checked_mul(mul_num)?.checked_mul(1000)?;
    let denom = frac_den.checked_mul(mul_den)?;
    Some(numer.div_ceil(denom))
}

fn parse_into(
    out: &mut Resources,
    name: &str,
    q: &Quantity,
    combine: fn(u64, u64) -> u64,
) -> Result<(), ResourceError> {
    let dim = match name {
        CPU => Dim::CpuMillis,
        MEMORY => Dim::MemoryBytes,
        PODS => Dim::Pods,
        GPU => Dim::Gpus,
        EPHEMERAL_STORAGE => Dim::EphemeralBytes,
        // Hugepages and other extended resources: a zero request is harmless, anything else cannot fit.
        other => {
            return match parse_milli(&q.0) {
                Some(0) => Ok(()),
                Some(_) => Err(ResourceError::Unsupported(other.to_owned())),
                None => Err(ResourceError::InvalidQuantity {
                    resource: other.to_owned(),
                    value: q.0.clone(),
                }),
            };
        }
    };
    let milli = parse_milli(&q.0).ok_or_else(|| ResourceError::InvalidQuantity {
        resource: name.to_owned(),
        value: q.0.clone(),
    })?;
    let v = if dim == Dim::CpuMillis {
        milli
    } else {
        milli.div_ceil(1000)
    };
    let v = u64::try_from(v).unwrap_or(u64::MAX);
    let slot = &mut out.0[dim as usize];
    *slot = combine(*slot, v);
    Ok(())
}

/// Parses a resource list (requests, capacity, allocatable...) into a vector.
pub fn from_list(list: &BTreeMap<String, Quantity>) -> Result<Resources, ResourceError> {
    let mut r = Resources::ZERO;
    for (name, q) in list {
        parse_into(&mut r, name, q, |_, v| v)?;
    }
    Ok(r)
}

fn container_requests(c: &Container) -> Result<Resources, ResourceError> {
    let mut r = Resources::ZERO;
    if let Some(res) = &c.resources {
        // A limit without a request defaults the request to the limit, as the API server does.
        if let Some(limits) = &res.limits {
            for (name, q) in limits {
                if res
                    .requests
                    .as_ref()
                    .is_none_or(|req| !req.contains_key(name))
                {
                    parse_into(&mut r, name, q, |_, v| v)?;
                }
            }
        }
        if let Some(requests) = &res.requests {
            for (name, q) in requests {
                parse_into(&mut r, name, q, |_, v| v)?;
            }
        }
    }
    Ok(r)
}

/// The effective requests of a pod, as kube-scheduler computes them: the sum over containers
/// (plus sidecar init containers), or the largest regular init container if that is bigger,
/// plus the pod overhead, plus one pod slot.
pub fn pod_requests(spec: &PodSpec) -> Result<Resources, ResourceError> {
    let mut sum = Resources::ZERO;
    for c in &spec.containers {
        sum = sum.add(&container_requests(c)?);
    }
    let mut init_max = Resources::ZERO;
    let mut sidecars = Resources::ZERO;
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.add(&r);
        } else {
            // A regular init container runs alongside the sidecars started before it.
            init_max = init_max.max(&r.add(&sidecars));
        }
    }
    let mut total = sum.add(&sidecars).max(&init_max);
    if let Some(overhead) = &spec.overhead {
        for (name, q) in overhead {
            parse_into(&mut total, name, q, |a, b| a.saturating_add(b))?;
        }
    }
    total.0[Dim::Pods as usize] = 1;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;

    fn q(s: &str) -> Quantity {
        Quantity(s.to_owned())
    }

    #[test]
    fn quantities_parse_like_kubernetes() {
        assert_eq!(parse_milli("100m"), Some(100));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("2"), Some(2000));
        assert_eq!(parse_milli("1Mi"), Some(1_048_576_000));
        assert_eq!(parse_milli("1G"), Some(1_000_000_000_000));
        assert_eq!(parse_milli("1e3"), Some(1_000_000));
        assert_eq!(parse_milli("0.0001"), Some(1), "milli-values round up");
        assert_eq!(parse_milli("abc"), None);
        assert_eq!(parse_milli("-1"), None);
        assert_eq!(parse_milli("1Qi"), None);
        assert_eq!(parse_milli(""), None);
    }

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), q(v)))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: map(requests),
                limits: map(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_requests_sum_containers_and_respect_init_and_limits() {
        let spec = PodSpec {
            containers: vec![
                container(&[("cpu", "500m"), ("memory", "1Gi")], &[]),
                container(&[], &[("cpu", "1"), (GPU, "1")]),
            ],
            init_containers: Some(vec![container(&[("cpu", "4")], &[])]),
            overhead: Some([("memory".to_owned(), q("10Mi"))].into()),
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        assert_eq!(
            r.get(Dim::CpuMillis),
            4000,
            "the big init container dominates cpu"
        );
        assert_eq!(r.get(Dim::MemoryBytes), (1 << 30) + 10 * (1 << 20));
        assert_eq!(
            r.get(Dim::Gpus),
            1,
            "a limit without a request becomes the request"
        );
        assert_eq!(r.get(Dim::Pods), 1);
    }

    #[test]
    fn unknown_extended_resources_are_rejected_and_bad_values_reported() {
        let spec = PodSpec {
            containers: vec![container(&[("example.com/fpga", "1")], &[])],
            ..Default::default()
        };
        assert_eq!(
            pod_requests(&spec),
            Err(ResourceError::Unsupported("example.com/fpga".into()))
        );
        let spec = PodSpec {
            containers: vec![container(&[("cpu", "lots")], &[])],
            ..Default::default()
        };
        assert!(matches!(
            pod_requests(&spec),
            Err(ResourceError::InvalidQuantity { .. })
        ));
    }

    #[test]
    fn fit_and_arithmetic() {
        let a = Resources::new(1000, 2 << 30, 1);
        let cap = Resources::new(2000, 4 << 30, 110);
        assert!(a.fits_in(&cap));
        assert!(!a.add(&a).add(&a).fits_in(&cap));
        assert_eq!(a.add(&a).add(&a).first_exceeding(&cap), Some(CPU));
        assert_eq!(cap.saturating_sub(&a).get(Dim::CpuMillis), 1000);
        assert_eq!(a.to_quantities()["cpu"], q("1"));
    }
}
