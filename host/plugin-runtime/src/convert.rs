//! Host types to the WIT records the worlds take (one generated `types` module for all worlds).

use k8s_openapi::api::core::v1::Taint;
use kk_apis::names::label;

use super::bindings::types as t;
use kk_engine::disruption::{Reason, ScoreCandidate};
use kk_engine::scheduling::resources::{Dim, Resources};
use kk_engine::scheduling::{Catalog, RankRequest};
use kk_engine::userdata::UserdataInput;

fn resources(r: &Resources) -> t::Resources {
    t::Resources {
        cpu_millis: r.get(Dim::CpuMillis),
        memory_bytes: r.get(Dim::MemoryBytes),
        pods: r.get(Dim::Pods),
        gpus: r.get(Dim::Gpus),
        ephemeral_bytes: r.get(Dim::EphemeralBytes),
    }
}

fn capacity_type(s: &str) -> t::CapacityType {
    match s {
        "spot" => t::CapacityType::Spot,
        "reserved" => t::CapacityType::Reserved,
        _ => t::CapacityType::OnDemand,
    }
}

fn entries<'a>(it: impl IntoIterator<Item = (&'a String, &'a String)>) -> Vec<t::Entry> {
    it.into_iter()
        .map(|(k, v)| t::Entry {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

/// The catalog as the selector world takes it (`load-catalog`), with the fingerprint it was
/// made from.
pub struct SelectorCatalog {
    pub fingerprint: u64,
    pub types: Vec<t::InstanceType>,
}

/// Converts a solve's catalog for `load-catalog`.
pub fn catalog(catalog: &Catalog<'_>) -> SelectorCatalog {
    let types = catalog
        .types
        .iter()
        .map(|it| {
            let arch = match it.label(label::ARCH) {
                Some("arm64") => t::Arch::Arm64,
                Some("amd64") | None => t::Arch::Amd64,
                Some(_) => t::Arch::Other,
            };
            let gpus = it.capacity.get(Dim::Gpus);
            t::InstanceType {
                name: it.name.clone(),
                family: it.name.split('.').next().unwrap_or_default().to_owned(),
                arch,
                capacity: resources(&it.capacity),
                allocatable: resources(&it.allocatable()),
                gpu: (gpus > 0).then(|| t::GpuInfo {
                    count: gpus as u32,
                    model: it
                        .label(label::INSTANCE_GPU_NAME)
                        .unwrap_or_default()
                        .to_owned(),
                    memory_bytes: 0,
                }),
                labels: entries(it.labels.iter().map(|(k, v)| (k, v))),
                offerings: it
                    .offerings
                    .iter()
                    .map(|o| t::Offering {
                        zone: o.zone.clone(),
                        capacity_type: capacity_type(&o.capacity_type),
                        price_micros: o.price_micros,
                    })
                    .collect(),
            }
        })
        .collect();
    SelectorCatalog {
        fingerprint: catalog.fingerprint,
        types,
    }
}

/// The selector's input for a host ranking request: flat references into the catalog.
pub fn rank_input(req: &RankRequest<'_>) -> t::RankInput {
    let candidates = req.candidates.iter().map(|c| c.index as u32).collect();
    let available_offerings = req.candidates.iter().map(|c| c.offered.0).collect();
    t::RankInput {
        node_pool: t::NodePool {
            name: req.node_pool.to_owned(),
            labels: Vec::new(),
            requirements: Vec::new(),
            weight: 0,
        },
        requests: resources(&req.requests),
        pod_count: req.requests.get(Dim::Pods) as u32,
        requirements: Vec::new(),
        candidates,
        available_offerings,
    }
}

/// The scorer's input for the host's consolidation candidates.
pub fn score_input(candidates: &[ScoreCandidate]) -> t::ScoreInput {
    t::ScoreInput {
        candidates: candidates
            .iter()
            .map(|c| t::ConsolidationCandidate {
                node_name: c.node_name.clone(),
                instance_type: c.instance_type.clone(),
                node_pool: c.node_pool.clone(),
                zone: c.zone.clone(),
                capacity_type: capacity_type(&c.capacity_type),
                price_micros: c.price_micros,
                cpu_utilisation_permille: c.cpu_utilisation_permille,
                memory_utilisation_permille: c.memory_utilisation_permille,
                age_seconds: c.age_seconds,
                pod_count: c.pod_count,
                disruption_cost: c.disruption_cost,
                pods_fit_elsewhere: c.pods_fit_elsewhere,
                replacement_price_micros: c.replacement_price_micros,
                reason: match c.reason {
                    Reason::Empty => t::DisruptionReason::Empty,
                    Reason::Underutilized => t::DisruptionReason::Underutilized,
                    Reason::Drifted => t::DisruptionReason::Drifted,
                    Reason::Expired => t::DisruptionReason::Expired,
                },
            })
            .collect(),
    }
}

/// The renderer's input for a node's join data.
pub fn userdata_input(input: &UserdataInput, node_pool: &str) -> t::UserdataInput {
    let taint = |x: &Taint| t::Taint {
        key: x.key.clone(),
        value: x.value.clone().unwrap_or_default(),
        effect: match x.effect.as_str() {
            "NoExecute" => t::TaintEffect::NoExecute,
            "PreferNoSchedule" => t::TaintEffect::PreferNoSchedule,
            _ => t::TaintEffect::NoSchedule,
        },
    };
    t::UserdataInput {
        node_name: Some(input.node_name.clone()),
        // The WIT record takes host:port; the host keeps the URL form.
        api_endpoint: input
            .api_endpoint
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_owned(),
        ca_bundle_pem: input.ca_pem.clone(),
        ca_cert_hash: input.ca_hash.clone(),
        bootstrap_token: input.bootstrap_token.clone(),
        kubernetes_version: input.kubernetes_version.clone(),
        node_pool: node_pool.to_owned(),
        labels: entries(&input.labels),
        taints: input.taints.iter().map(taint).collect(),
        startup_taints: input.startup_taints.iter().map(taint).collect(),
        kubelet: t::KubeletSettings {
            max_pods: input
                .kubelet_args
                .get("max-pods")
                .and_then(|v| v.parse().ok()),
            kube_reserved: Vec::new(),
            system_reserved: Vec::new(),
            eviction_hard: Vec::new(),
            cluster_dns: Vec::new(),
        },
        cni: match input.cni.as_str() {
            "cilium" => t::Cni::Cilium,
            "calico" => t::Cni::Calico,
            _ => t::Cni::Other,
        },
    }
}
