//! What both rows are given: the NodePool (ours and upstream's kwok provider's, equal but for
//! the NodeClass), the catalog as upstream's instance-type file, and the workloads.

use kakaocloud_sim::FlavorSeed;
use serde_json::{Value, json};

/// Namespace of the bench's Deployments.
pub const NAMESPACE: &str = "bench";
/// The label the NodePools put on their nodes and the bench pods select, so no pod lands on the
/// cluster's managed node.
pub const POOL_LABEL: (&str, &str) = ("workload-type", "karpenter");
/// consolidateAfter of both NodePools: upstream's kwok performance suite uses 30s.
pub const CONSOLIDATE_AFTER: &str = "30s";
/// The flavor of the steady state: 4 vCPU / 16 GiB, and a pod size that fits ten per node under
/// both allocatable models (ours: 3920m; kwok's: 3900m).
pub const STEADY_FLAVOR: &str = "m2a.xlarge";
pub const STEADY_POD: (&str, &str) = ("380m", "1Gi");

/// The five pod kinds of upstream's scheduling benchmark (`makeDiversePods`), in equal parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Generic,
    ZonalSpread,
    HostnameSpread,
    ZonalAffinity,
    HostnameAntiAffinity,
}

const KINDS: [Kind; 5] = [
    Kind::Generic,
    Kind::ZonalSpread,
    Kind::HostnameSpread,
    Kind::ZonalAffinity,
    Kind::HostnameAntiAffinity,
];
/// Upstream's benchmark draws CPU from these and memory from 100Mi..4Gi; each kind here gets
/// two Deployments of different sizes.
const CPU: [&str; 5] = ["100m", "250m", "500m", "1", "1500m"];
const MEMORY: [&str; 5] = ["100Mi", "512Mi", "1Gi", "2Gi", "4Gi"];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Generic => "generic",
            Kind::ZonalSpread => "zonal-spread",
            Kind::HostnameSpread => "hostname-spread",
            Kind::ZonalAffinity => "zonal-affinity",
            Kind::HostnameAntiAffinity => "hostname-anti-affinity",
        }
    }

    /// Scheduling terms over every pod of the kind (both its Deployments), as upstream's pods of
    /// one kind share their labels.
    fn terms(self) -> Value {
        let selector = json!({"matchLabels": {"bench-kind": self.name()}});
        let spread = |key: &str| {
            json!({"topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector,
            }]})
        };
        match self {
            Kind::Generic => json!({}),
            Kind::ZonalSpread => spread("topology.kubernetes.io/zone"),
            Kind::HostnameSpread => spread("kubernetes.io/hostname"),
            Kind::ZonalAffinity => json!({"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": selector}
            ]}}}),
            Kind::HostnameAntiAffinity => json!({"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}
            ]}}}),
        }
    }
}

/// One Deployment of the bench.
#[derive(Debug, Clone)]
pub struct Workload {
    pub replicas: u32,
    manifest: Value,
}

impl Workload {
    /// The same Deployment at `replicas`.
    pub fn with_replicas(&self, replicas: u32) -> Workload {
        Workload {
            replicas,
            manifest: self.manifest.clone(),
        }
    }

    pub fn manifest(&self) -> Value {
        let mut m = self.manifest.clone();
        m["spec"]["replicas"] = json!(self.replicas);
        m
    }
}

fn deployment(name: &str, labels: Value, cpu: &str, memory: &str, extra: Value) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {POOL_LABEL.0: POOL_LABEL.1},
        "containers": [{
            "name": "app", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": cpu, "memory": memory}},
        }],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    })
}

/// `pods` pods of upstream's diverse mix: ten Deployments, two per kind.
pub fn diverse(pods: u32) -> Vec<Workload> {
    let per = pods / 10;
    let mut out = Vec::new();
    for (i, kind) in KINDS.into_iter().enumerate() {
        for half in 0..2 {
            let name = format!("{}-{}", kind.name(), ["a", "b"][half]);
            let size = (i + 2 * half) % 5;
            let labels = json!({"app": name, "bench-kind": kind.name()});
            // The remainder goes to the first Deployment, so the total is exactly `pods`.
            let replicas = per + if out.is_empty() { pods % 10 } else { 0 };
            out.push(Workload {
                manifest: deployment(&name, labels, CPU[size], MEMORY[size], kind.terms()),
                replicas,
            });
        }
    }
    out
}

/// The steady state: `pods` pods of one size on one flavor, ten to a node.
pub fn steady(pods: u32) -> Vec<Workload> {
    let name = "steady".to_owned();
    let extra = json!({"nodeSelector": {
        POOL_LABEL.0: POOL_LABEL.1,
        "node.kubernetes.io/instance-type": STEADY_FLAVOR,
    }});
    vec![Workload {
        manifest: deployment(
            &name,
            json!({"app": name}),
            STEADY_POD.0,
            STEADY_POD.1,
            extra,
        ),
        replicas: pods,
    }]
}

/// The NodePool both rows use, for a NodeClass reference.
pub fn nodepool(group: &str, kind: &str, class: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "bench"},
        "spec": {
            "template": {
                "metadata": {"labels": {POOL_LABEL.0: POOL_LABEL.1}},
                "spec": {
                    "requirements": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                    "nodeClassRef": {"group": group, "kind": kind, "name": class},
                    "expireAfter": "Never",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": CONSOLIDATE_AFTER,
            },
        },
    })
}

/// The simulator's catalog as upstream's kwok instance-type file (`INSTANCE_TYPES_FILE_PATH`):
/// the same names, capacities, zones and hourly prices (KRW), on-demand only.
pub fn kwok_instance_types(flavors: &[FlavorSeed]) -> Value {
    let types: Vec<Value> = flavors
        .iter()
        .map(|f| {
            let offerings: Vec<Value> = f
                .zones
                .iter()
                .map(|zone| {
                    json!({
                        "Price": f.hourly_price_krw as f64,
                        "Available": true,
                        "Requirements": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        ],
                    })
                })
                .collect();
            let mut resources = json!({
                "cpu": f.vcpus.to_string(),
                "memory": format!("{}Mi", f.memory_mib),
                "pods": "110",
                "ephemeral-storage": "50Gi",
            });
            if f.gpus > 0 {
                resources["nvidia.com/gpu"] = json!(f.gpus.to_string());
            }
            json!({
                "name": f.name,
                "offerings": offerings,
                "architecture": "amd64",
                "operatingSystems": ["linux"],
                "resources": resources,
            })
        })
        .collect();
    Value::Array(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diverse_mix_has_exactly_the_pods_asked_for_in_five_kinds() {
        for pods in [10, 1000, 1003] {
            let w = diverse(pods);
            assert_eq!(w.iter().map(|w| w.replicas).sum::<u32>(), pods);
            assert_eq!(w.len(), 10);
        }
        let anti = diverse(1000)
            .into_iter()
            .map(|w| w.manifest())
            .find(|m| m["metadata"]["name"] == "hostname-anti-affinity-a")
            .unwrap();
        let term = &anti["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            [0];
        assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
        assert_eq!(anti["spec"]["replicas"], 100);
    }

    #[test]
    fn the_kwok_file_carries_every_flavor_with_its_price_per_zone() {
        let flavors = kakaocloud_sim::catalog::default_flavors();
        let file = kwok_instance_types(&flavors);
        let types = file.as_array().unwrap();
        assert_eq!(types.len(), flavors.len());
        let m = types.iter().find(|t| t["name"] == "m2a.xlarge").unwrap();
        let seed = flavors.iter().find(|f| f.name == "m2a.xlarge").unwrap();
        assert_eq!(m["resources"]["cpu"], "4");
        assert_eq!(
            m["offerings"].as_array().unwrap().len(),
            seed.zones.len(),
            "one offering per zone"
        );
        assert_eq!(m["offerings"][0]["Price"], seed.hourly_price_krw as f64);
    }
}
