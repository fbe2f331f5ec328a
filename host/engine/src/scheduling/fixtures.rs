//! Synthetic catalogs and workloads modelled on upstream Karpenter's scheduling benchmark
//! (`scheduling_benchmark_test.go`), shared by our benchmark and scale tests so both measure
//! the same thing.

use kk_apis::NodePool;
use kk_apis::crd::nodepool::{Disruption, NodeClaimTemplate, NodeClaimTemplateSpec, NodePoolSpec};
use kk_apis::crd::{NillableDuration, NodeClassRef, Operator, Requirement, kcnodeclass};
use kk_apis::names::label;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, Pod, PodAffinity, PodAffinityTerm, PodAntiAffinity, PodSpec,
    ResourceRequirements, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::instance_types::{InstanceType, Offering, Overhead};

use super::resources::{Dim, Resources};

const GI: u64 = 1 << 30;

/// Upstream's fake catalog: type `i` has `i+1` vCPU, `2(i+1)` GiB and `10(i+1)` pods, costs
/// 0.1/vCPU + 0.1/GiB per hour on demand (spot at 70%), spot in zones 1-2 and on-demand in
/// zones 1-3, with 100m / 10Mi kube-reserved.
pub fn fake_instance_types(n: usize) -> Vec<InstanceType> {
    (0..n as u64)
        .map(|i| {
            let cpus = i + 1;
            let capacity = Resources::new(cpus * 1000, 2 * cpus * GI, 10 * cpus);
            let on_demand = cpus * 100_000 + 2 * cpus * 100_000;
            let mut offerings = Vec::new();
            for z in 1..=3 {
                offerings.push(Offering {
                    zone: format!("test-zone-{z}"),
                    capacity_type: "on-demand".into(),
                    price_micros: on_demand,
                    available: true,
                });
                if z <= 2 {
                    offerings.push(Offering {
                        zone: format!("test-zone-{z}"),
                        capacity_type: "spot".into(),
                        price_micros: on_demand * 7 / 10,
                        available: true,
                    });
                }
            }
            let mut it = InstanceType::new(format!("fake-it-{i}"), capacity, offerings);
            it.overhead = Overhead {
                kube_reserved: Resources::new(100, 10 << 20, 0),
                ..Overhead::default()
            };
            it.labels
                .push((label::INSTANCE_CPU.into(), cpus.to_string()));
            it
        })
        .collect()
}

/// How topology selectors relate to pod labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelScheme {
    /// As upstream: labels and selectors drawn independently from `my-label`/`my-affininity` = a..g,
    /// so selectors also count pods of other kinds.
    Upstream,
    /// Each kind has its own label key and selects exactly its own value: counts only include the
    /// constraint's owners, so final placements can be checked against maxSkew directly.
    SelfSelecting,
}

/// The five kinds of pod in the diverse workload, a fifth each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodKind {
    Plain,
    ZoneSpread,
    HostnameSpread,
    ZoneAffinity,
    HostnameAntiAffinity,
}

pub const LABEL_VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];

fn selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some([(key.to_owned(), value.to_owned())].into()),
        match_expressions: None,
    }
}

fn pick<'a>(rng: &mut StdRng, values: &[&'a str]) -> &'a str {
    values[rng.random_range(0..values.len())]
}

/// A pending pod with one container requesting `cpu_m` millicores and `mem_mi` MiB.
pub fn pod(name: &str, cpu_m: u64, mem_mi: u64) -> Pod {
    let requests: BTreeMap<String, Quantity> = [
        ("cpu".to_owned(), Quantity(format!("{cpu_m}m"))),
        ("memory".to_owned(), Quantity(format!("{mem_mi}Mi"))),
    ]
    .into();
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(requests),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

/// The kind of the `i`-th of `count` diverse pods.
pub fn kind_of(i: usize, count: usize) -> PodKind {
    let fifth = count / 5;
    match i.checked_div(fifth).unwrap_or(0) {
        1 => PodKind::ZoneSpread,
        2 => PodKind::HostnameSpread,
        3 => PodKind::ZoneAffinity,
        4 => PodKind::HostnameAntiAffinity,
        _ => PodKind::Plain,
    }
}

/// `count` diverse pods (seed 42): a fifth each plain, zone spread, hostname spread, zone
/// self-affinity, hostname anti-affinity; CPU from {100m, 250m, 500m, 1, 1.5}, memory from
/// {100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi}; the remainder of `count / 5` is plain.
pub fn diverse_pods(count: usize, scheme: LabelScheme) -> Vec<Pod> {
    let mut rng = StdRng::seed_from_u64(42);
    let cpus = [100, 250, 500, 1000, 1500];
    let mems = [100, 256, 512, 1024, 2048, 4096];
    (0..count)
        .map(|i| {
            let kind = kind_of(i, count);
            let mut p = pod(
                &format!("pod-{i}"),
                cpus[rng.random_range(0..5)],
                mems[rng.random_range(0..6)],
            );
            let (label_key, sel_key) = match (scheme, kind) {
                (LabelScheme::Upstream, PodKind::ZoneAffinity) => {
                    ("my-affininity", "my-affininity")
                }
                (LabelScheme::Upstream, _) => ("my-label", "my-label"),
                (LabelScheme::SelfSelecting, PodKind::Plain) => ("plain", "plain"),
                (LabelScheme::SelfSelecting, PodKind::ZoneSpread) => ("spread-zone", "spread-zone"),
                (LabelScheme::SelfSelecting, PodKind::HostnameSpread) => {
                    ("spread-host", "spread-host")
                }
                (LabelScheme::SelfSelecting, PodKind::ZoneAffinity) => {
                    ("affinity-zone", "affinity-zone")
                }
                (LabelScheme::SelfSelecting, PodKind::HostnameAntiAffinity) => ("app", "app"),
            };
            let label_value = pick(&mut rng, &LABEL_VALUES);
            let selected = match scheme {
                LabelScheme::Upstream => pick(&mut rng, &LABEL_VALUES),
                LabelScheme::SelfSelecting => label_value,
            };
            let mut labels: BTreeMap<String, String> =
                [(label_key.to_owned(), label_value.to_owned())].into();
            let spec = p.spec.get_or_insert_with(Default::default);
            let spread = |key: &str| TopologySpreadConstraint {
                max_skew: 1,
                topology_key: key.to_owned(),
                when_unsatisfiable: "DoNotSchedule".into(),
                label_selector: Some(selector(sel_key, selected)),
                ..Default::default()
            };
            match kind {
                PodKind::Plain => {}
                PodKind::ZoneSpread => {
                    spec.topology_spread_constraints = Some(vec![spread(label::ZONE)])
                }
                PodKind::HostnameSpread => {
                    spec.topology_spread_constraints = Some(vec![spread(label::HOSTNAME)]);
                }
                PodKind::ZoneAffinity => {
                    spec.affinity = Some(Affinity {
                        pod_affinity: Some(PodAffinity {
                            required_during_scheduling_ignored_during_execution: Some(vec![
                                PodAffinityTerm {
                                    label_selector: Some(selector(sel_key, selected)),
                                    topology_key: label::ZONE.into(),
                                    ..Default::default()
                                },
                            ]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    });
                }
                PodKind::HostnameAntiAffinity => {
                    // All of them repel each other, as upstream's `app: nginx` pods.
                    labels = [("app".to_owned(), "nginx".to_owned())].into();
                    spec.affinity = Some(Affinity {
                        pod_anti_affinity: Some(PodAntiAffinity {
                            required_during_scheduling_ignored_during_execution: Some(vec![
                                PodAffinityTerm {
                                    label_selector: Some(selector("app", "nginx")),
                                    topology_key: label::HOSTNAME.into(),
                                    ..Default::default()
                                },
                            ]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    });
                }
            }
            p.metadata.labels = Some(labels);
            p
        })
        .collect()
}

/// Total cpu of a resource vector in whole cores, for reports.
pub fn cores(r: &Resources) -> f64 {
    r.get(Dim::CpuMillis) as f64 / 1000.0
}

/// A NodePool named `default` on the KCNodeClass `default`, amd64 only.
pub fn default_nodepool() -> NodePool {
    let mut np = NodePool::new(
        "default",
        NodePoolSpec {
            replicas: None,
            template: NodeClaimTemplate {
                metadata: None,
                spec: NodeClaimTemplateSpec {
                    taints: vec![],
                    startup_taints: vec![],
                    requirements: vec![Requirement::new(label::ARCH, Operator::In, &["amd64"])],
                    node_class_ref: NodeClassRef {
                        group: kcnodeclass::GROUP.into(),
                        kind: kcnodeclass::KIND.into(),
                        name: "default".into(),
                    },
                    expire_after: NillableDuration::NEVER,
                    termination_grace_period: None,
                },
            },
            disruption: Disruption::default(),
            limits: None,
            weight: Some(10),
        },
    );
    np.metadata.uid = Some("uid-1".into());
    np
}
