//! The simulator's catalog: instance types across the zones of kr-central-2,
//! subnets (one per zone), security groups, key pairs, OS images and
//! Kubernetes Engine worker images per Kubernetes version.
//!
//! Flavor names follow KakaoCloud's published families (`t1i`, `m2a`, `c2a`,
//! `r2a`, GPU `gn1i`/`p2i`); sizes and prices are illustrative where no public
//! source fixes them (see `docs/kakaocloud-api.md`). Prices come from the
//! client's own table, [`kakaocloud::pricing`], so the
//! simulator and the controller agree.

use std::collections::BTreeMap;

use kakaocloud::api;
use kakaocloud::pricing;

/// Availability zones of kr-central-2.
pub const ZONES: [&str; 3] = ["kr-central-2-a", "kr-central-2-b", "kr-central-2-c"];

/// One instance type of the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct FlavorSeed {
    pub id: String,
    pub name: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub gpus: u32,
    /// GPU model, when `gpus > 0`.
    pub gpu_name: Option<String>,
    pub architecture: String,
    pub processor: String,
    pub burstable: bool,
    /// On-demand price per hour, KRW.
    pub hourly_price_krw: u64,
    /// Zones it is offered in.
    pub zones: Vec<String>,
    /// Launchable count per zone as reported by the flavor list.
    pub available: u32,
}

impl FlavorSeed {
    pub fn family(&self) -> &str {
        self.name.split('.').next().unwrap_or(&self.name)
    }

    pub fn size(&self) -> &str {
        self.name.split_once('.').map(|(_, s)| s).unwrap_or("")
    }

    /// The flavor as the list call returns it, with per-zone availability.
    pub fn to_api(&self, available: &BTreeMap<String, u32>) -> api::Flavor {
        api::Flavor {
            id: self.id.clone(),
            name: Some(self.name.clone()),
            vcpus: Some(self.vcpus),
            memory_mb: Some(self.memory_mib),
            architecture: Some(self.architecture.clone()),
            manufacturer: Some(
                if self.processor.contains("AMD") {
                    "AMD"
                } else {
                    "Intel"
                }
                .into(),
            ),
            group: Some(if self.gpus > 0 { "GPU" } else { "CPU" }.into()),
            // The official enum has `gpu` for accelerator flavors.
            instance_type: Some(if self.gpus > 0 {
                api::InstanceKind::Gpu
            } else {
                api::InstanceKind::Vm
            }),
            instance_family: Some(self.family().to_string()),
            instance_size: Some(self.size().to_string()),
            is_burstable: Some(self.burstable),
            processor: Some(self.processor.clone()),
            availability_zone: Some(self.zones.clone()),
            available: Some(available.clone()),
            root_gb: Some(0),
            hw_count: (self.gpus > 0).then_some(self.gpus),
            hw_type: (self.gpus > 0).then(|| "GPU".to_string()),
            hw_name: self.gpu_name.clone(),
            is_hyper_threading_supported: Some(true),
            is_hyper_threading_disabled: Some(false),
            is_hyper_threading_disable_supported: Some(self.hyper_threading_can_be_disabled()),
        }
    }

    /// Whether `is_disable_hyper_threading` has an effect on this flavor (here: CPU flavors).
    pub fn hyper_threading_can_be_disabled(&self) -> bool {
        self.gpus == 0
    }
}

fn flavor(
    name: &str,
    vcpus: u32,
    memory_gib: u64,
    gpus: u32,
    gpu_name: Option<&str>,
) -> FlavorSeed {
    let family = name.split('.').next().unwrap_or(name);
    let processor = match family {
        "m2a" | "c2a" | "r2a" => "AMD EPYC 7003",
        "t1i" => "Intel Xeon (burstable)",
        "p2i" => "Intel Xeon Ice Lake",
        _ => "Intel Xeon Cascade Lake",
    };
    // Deterministic, UUID-shaped ID derived from the name.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let id = format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (h >> 32) as u32,
        (h >> 16) as u16,
        (h >> 4) as u16 & 0xfff,
        (h >> 8) as u16 & 0xfff,
        h & 0xffff_ffff_ffff
    );
    FlavorSeed {
        id,
        name: name.to_string(),
        vcpus,
        memory_mib: memory_gib * 1024,
        gpus,
        gpu_name: gpu_name.map(str::to_string),
        architecture: "x86_64".into(),
        processor: processor.into(),
        burstable: family == "t1i",
        hourly_price_krw: pricing::hourly_price_krw(name).unwrap_or(0),
        zones: ZONES.iter().map(|z| z.to_string()).collect(),
        available: 100,
    }
}

/// The default catalog.
pub fn default_flavors() -> Vec<FlavorSeed> {
    let mut out = vec![
        flavor("t1i.micro", 1, 1, 0, None),
        flavor("t1i.small", 1, 2, 0, None),
        flavor("t1i.medium", 2, 4, 0, None),
        flavor("t1i.large", 2, 8, 0, None),
    ];
    for (size, vcpus) in [
        ("large", 2),
        ("xlarge", 4),
        ("2xlarge", 8),
        ("4xlarge", 16),
        ("8xlarge", 32),
    ] {
        out.push(flavor(
            &format!("m2a.{size}"),
            vcpus,
            u64::from(vcpus) * 4,
            0,
            None,
        ));
    }
    for (size, vcpus) in [("large", 2), ("xlarge", 4), ("2xlarge", 8), ("4xlarge", 16)] {
        out.push(flavor(
            &format!("c2a.{size}"),
            vcpus,
            u64::from(vcpus) * 2,
            0,
            None,
        ));
        out.push(flavor(
            &format!("r2a.{size}"),
            vcpus,
            u64::from(vcpus) * 8,
            0,
            None,
        ));
    }
    out.push(flavor("gn1i.xlarge", 4, 16, 1, Some("NVIDIA T4")));
    out.push(flavor("gn1i.2xlarge", 8, 32, 1, Some("NVIDIA T4")));
    out.push(flavor("gn1i.4xlarge", 16, 64, 2, Some("NVIDIA T4")));
    let mut p2i = flavor("p2i.6xlarge", 24, 192, 1, Some("NVIDIA A100"));
    // GPU capacity is scarce and not in every zone.
    p2i.zones = vec![ZONES[0].to_string(), ZONES[1].to_string()];
    p2i.available = 4;
    out.push(p2i);
    for f in out
        .iter_mut()
        .filter(|f| f.gpus > 0 && f.family() == "gn1i")
    {
        f.available = 10;
    }
    out
}

/// ID of the default catalog's flavor `name` (IDs are derived from names).
pub fn flavor_id(name: &str) -> Option<String> {
    default_flavors()
        .into_iter()
        .find(|f| f.name == name)
        .map(|f| f.id)
}

/// A subnet of the project's VPC.
#[derive(Debug, Clone, PartialEq)]
pub struct SubnetSeed {
    pub id: String,
    pub name: String,
    pub zone: String,
    pub cidr: String,
    /// First three octets, for handing out private IPs.
    pub prefix: [u8; 3],
}

/// One subnet per zone: 10.0.0.0/20, 10.0.16.0/20, 10.0.32.0/20.
pub fn default_subnets(project: &str) -> Vec<SubnetSeed> {
    ZONES
        .iter()
        .enumerate()
        .map(|(i, zone)| {
            let third = u8::try_from(i * 16).unwrap_or(0);
            let letter = zone.rsplit('-').next().unwrap_or("x");
            SubnetSeed {
                id: format!("subnet-{project}-{letter}"),
                name: format!("main_sn_{letter}"),
                zone: zone.to_string(),
                cidr: format!("10.0.{third}.0/20"),
                prefix: [10, 0, third],
            }
        })
        .collect()
}

pub fn vpc_id(project: &str) -> String {
    format!("vpc-{project}")
}

/// An OS image of the Image service.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageSeed {
    pub id: String,
    pub name: String,
    pub distro: String,
}

pub fn default_images() -> Vec<ImageSeed> {
    vec![
        ImageSeed {
            id: "img-ubuntu-2204".into(),
            name: "Ubuntu 22.04".into(),
            distro: "ubuntu".into(),
        },
        ImageSeed {
            id: "img-ubuntu-2404".into(),
            name: "Ubuntu 24.04".into(),
            distro: "ubuntu".into(),
        },
    ]
}

/// A Kubernetes Engine version with its worker images.
#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesVersionSeed {
    /// `1.35`.
    pub minor: String,
    /// `1.35.0`.
    pub patch: String,
    pub deprecated: bool,
}

pub fn default_versions() -> Vec<KubernetesVersionSeed> {
    vec![
        KubernetesVersionSeed {
            minor: "1.34".into(),
            patch: "1.34.3".into(),
            deprecated: false,
        },
        KubernetesVersionSeed {
            minor: "1.35".into(),
            patch: "1.35.0".into(),
            deprecated: false,
        },
    ]
}

/// Worker images of `version`: a CPU and a GPU image, Ubuntu 22.04.
pub fn worker_images(version: &KubernetesVersionSeed) -> Vec<api::WorkerImage> {
    let tag = version.minor.replace('.', "");
    [false, true]
        .into_iter()
        .map(|gpu| api::WorkerImage {
            id: format!("wi-k8s{tag}-ubuntu2204{}", if gpu { "-gpu" } else { "" }),
            name: format!(
                "Ubuntu 22.04 Kubernetes {}{}",
                version.patch,
                if gpu { " (NVIDIA GPU)" } else { "" }
            ),
            architecture: "x86_64".into(),
            is_gpu_type: gpu,
            k8s_version: Some(version.minor.clone()),
            instance_type: "vm".into(),
            kernel_version: "5.15.0-127-generic".into(),
            key_package: format!("kubernetes-{}", version.patch),
            os_distro: "ubuntu".into(),
            os_type: "linux".into(),
            os_version: "22.04".into(),
        })
        .collect()
}

/// Default security groups of a project.
pub fn default_security_groups() -> Vec<String> {
    vec!["default".into(), "demo-cluster-worker".into()]
}

/// Default key pairs of a project.
pub fn default_key_pairs() -> Vec<String> {
    vec!["demo-key".into()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_priced_and_unique() {
        let flavors = default_flavors();
        let mut names: Vec<_> = flavors.iter().map(|f| f.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), flavors.len());
        let mut ids: Vec<_> = flavors.iter().map(|f| f.id.clone()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), flavors.len());
        for f in &flavors {
            assert!(f.hourly_price_krw > 0, "{} has no price", f.name);
        }
        assert!(flavors.iter().any(|f| f.gpus > 0));
    }
}
