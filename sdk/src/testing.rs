//! A native test harness: build inputs with builders, set the plugin's config, call the policy
//! directly and look at what it logged. Nothing here needs WebAssembly.

use std::cell::RefCell;

use crate::{
    Arch, CapacityType, Cni, ConsolidationCandidate, DisruptionReason, Entry, GpuInfo,
    InstanceType, KubeletSettings, Level, NodePool, Offering, RankInput, RankRequest, Requirement,
    Resources, ScoreInput, Taint, TaintEffect, UserdataInput, helpers::family_of,
};

thread_local! {
    static CONFIG: RefCell<Option<String>> = const { RefCell::new(None) };
    static LOGS: RefCell<Vec<(Level, String)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with the plugin config set to `json` (what `config.json` of the ConfigMap would hold).
pub fn with_config<R>(json: &str, f: impl FnOnce() -> R) -> R {
    let previous = CONFIG.with(|c| c.replace(Some(json.to_owned())));
    let out = f();
    CONFIG.with(|c| *c.borrow_mut() = previous);
    out
}

pub(crate) fn current_config() -> String {
    CONFIG
        .with(|c| c.borrow().clone())
        .unwrap_or_else(|| "{}".to_owned())
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn capture_log(level: Level, message: &str) {
    LOGS.with(|l| l.borrow_mut().push((level, message.to_owned())));
}

/// The lines logged on this thread since the last call.
pub fn take_logs() -> Vec<(Level, String)> {
    LOGS.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// Calls an [`crate::InstanceSelector`] the way the exported `rank` does: the config (from
/// [`with_config`]) parsed, the candidates resolved against the case's catalog.
pub fn rank<P: crate::InstanceSelector>(case: &RankCase) -> Result<Vec<u32>, String> {
    let config = crate::parse_config::<P::Config>(&current_config())?;
    P::rank(&RankRequest::resolve(&case.input, &case.catalog)?, &config)
}

/// Calls a [`crate::ConsolidationScorer`] the way the exported `score` does.
pub fn score<P: crate::ConsolidationScorer>(input: &ScoreInput) -> Result<Vec<f64>, String> {
    crate::__score::<P>(input)
}

/// Calls a [`crate::UserdataRenderer`] the way the exported `render` does.
pub fn render<P: crate::UserdataRenderer>(input: &UserdataInput) -> Result<String, String> {
    crate::__render::<P>(input)
}

/// `cpu` milli-cores and `memory` bytes, 110 pods, nothing else.
pub fn resources(cpu_millis: u64, memory_bytes: u64) -> Resources {
    Resources {
        cpu_millis,
        memory_bytes,
        pods: 110,
        gpus: 0,
        ephemeral_bytes: 0,
    }
}

/// An instance type as a candidate: the catalog entry and which of its offerings are
/// available (bit i: offering i).
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateSpec {
    pub instance_type: InstanceType,
    pub available: u64,
}

/// Builds a [`CandidateSpec`]. Allocatable defaults to capacity minus 100m CPU and 10% of memory.
#[derive(Debug, Clone)]
pub struct InstanceTypeBuilder(CandidateSpec);

impl InstanceTypeBuilder {
    pub fn new(name: &str, cpu_millis: u64, memory_bytes: u64) -> Self {
        let capacity = resources(cpu_millis, memory_bytes);
        let allocatable = Resources {
            cpu_millis: cpu_millis.saturating_sub(100),
            memory_bytes: memory_bytes - memory_bytes / 10,
            ..capacity
        };
        InstanceTypeBuilder(CandidateSpec {
            instance_type: InstanceType {
                name: name.to_owned(),
                family: family_of(name).to_owned(),
                arch: Arch::Amd64,
                capacity,
                allocatable,
                gpu: None,
                labels: vec![Entry {
                    key: "kubernetes.io/arch".into(),
                    value: "amd64".into(),
                }],
                offerings: Vec::new(),
            },
            available: 0,
        })
    }

    /// An on-demand offering.
    pub fn offering(self, zone: &str, price_micros: u64, available: bool) -> Self {
        self.offering_of(zone, CapacityType::OnDemand, price_micros, available)
    }

    pub fn offering_of(
        mut self,
        zone: &str,
        capacity_type: CapacityType,
        price_micros: u64,
        available: bool,
    ) -> Self {
        let offerings = &mut self.0.instance_type.offerings;
        if available && offerings.len() < 64 {
            self.0.available |= 1 << offerings.len();
        }
        offerings.push(Offering {
            zone: zone.to_owned(),
            capacity_type,
            price_micros,
        });
        self
    }

    pub fn gpus(mut self, count: u32, model: &str) -> Self {
        let t = &mut self.0.instance_type;
        t.gpu = Some(GpuInfo {
            count,
            model: model.to_owned(),
            memory_bytes: 0,
        });
        t.capacity.gpus = count as u64;
        t.allocatable.gpus = count as u64;
        self
    }

    pub fn arch(mut self, arch: Arch) -> Self {
        self.0.instance_type.arch = arch;
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0.instance_type.labels.push(Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        });
        self
    }

    pub fn allocatable(mut self, allocatable: Resources) -> Self {
        self.0.instance_type.allocatable = allocatable;
        self
    }

    pub fn build(self) -> CandidateSpec {
        self.0
    }
}

/// A `rank` call as the host makes it: the catalog it loaded and the input whose candidates
/// refer to it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RankCase {
    pub catalog: Vec<InstanceType>,
    pub input: RankInput,
}

impl RankCase {
    /// The request the policy sees.
    pub fn request(&self) -> RankRequest<'_> {
        RankRequest::resolve(&self.input, &self.catalog)
            .expect("builders keep candidates in the catalog")
    }
}

/// Builds a [`RankCase`] for NodePool `default`, requests zero; each candidate is also a
/// catalog entry, in order.
#[derive(Debug, Clone)]
pub struct RankInputBuilder(RankCase);

impl Default for RankInputBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RankInputBuilder {
    pub fn new() -> Self {
        RankInputBuilder(RankCase {
            catalog: vec![],
            input: RankInput {
                node_pool: NodePool {
                    name: "default".into(),
                    labels: vec![],
                    requirements: vec![],
                    weight: 0,
                },
                requests: Resources::ZERO,
                pod_count: 1,
                requirements: vec![],
                candidates: vec![],
                available_offerings: vec![],
            },
        })
    }

    pub fn node_pool(mut self, name: &str) -> Self {
        self.0.input.node_pool.name = name.to_owned();
        self
    }

    /// The pods' aggregate requests (one pod slot per pod).
    pub fn requests(mut self, cpu_millis: u64, memory_bytes: u64) -> Self {
        let input = &mut self.0.input;
        input.requests = Resources {
            cpu_millis,
            memory_bytes,
            pods: input.pod_count as u64,
            gpus: input.requests.gpus,
            ephemeral_bytes: 0,
        };
        self
    }

    pub fn gpus(mut self, gpus: u64) -> Self {
        self.0.input.requests.gpus = gpus;
        self
    }

    pub fn pods(mut self, count: u32) -> Self {
        self.0.input.pod_count = count;
        self.0.input.requests.pods = count as u64;
        self
    }

    pub fn requirement(mut self, requirement: Requirement) -> Self {
        self.0.input.requirements.push(requirement);
        self
    }

    pub fn candidate(mut self, candidate: CandidateSpec) -> Self {
        let input = &mut self.0.input;
        input.candidates.push(self.0.catalog.len() as u32);
        input.available_offerings.push(candidate.available);
        self.0.catalog.push(candidate.instance_type);
        self
    }

    pub fn candidates(self, candidates: impl IntoIterator<Item = CandidateSpec>) -> Self {
        candidates.into_iter().fold(self, Self::candidate)
    }

    pub fn build(self) -> RankCase {
        self.0
    }
}

/// A consolidation candidate with sensible defaults: on-demand, underutilized, 1 pod,
/// disruption cost 1.0, pods fit elsewhere, a day old.
pub fn consolidation_candidate(
    node_name: &str,
    price_micros: u64,
    utilisation_permille: u32,
) -> ConsolidationCandidate {
    ConsolidationCandidate {
        node_name: node_name.to_owned(),
        instance_type: "m2a.large".into(),
        node_pool: "default".into(),
        zone: "kr-central-2-a".into(),
        capacity_type: CapacityType::OnDemand,
        price_micros,
        cpu_utilisation_permille: utilisation_permille,
        memory_utilisation_permille: utilisation_permille,
        age_seconds: 86_400,
        pod_count: 1,
        disruption_cost: 1.0,
        pods_fit_elsewhere: true,
        replacement_price_micros: None,
        reason: DisruptionReason::Underutilized,
    }
}

/// A complete [`UserdataInput`] for a node joining `10.0.0.1:6443` on Kubernetes 1.35.0 with Cilium.
pub fn userdata_input() -> UserdataInput {
    UserdataInput {
        node_name: Some("default-abcde".into()),
        api_endpoint: "10.0.0.1:6443".into(),
        ca_bundle_pem: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
        ca_cert_hash: format!("sha256:{}", "ab".repeat(32)),
        bootstrap_token: "abcdef.0123456789abcdef".into(),
        kubernetes_version: "1.35.0".into(),
        node_pool: "default".into(),
        labels: vec![Entry {
            key: "karpenter.sh/nodepool".into(),
            value: "default".into(),
        }],
        taints: vec![],
        startup_taints: vec![],
        kubelet: KubeletSettings {
            max_pods: Some(110),
            kube_reserved: vec![Entry {
                key: "cpu".into(),
                value: "100m".into(),
            }],
            system_reserved: vec![],
            eviction_hard: vec![Entry {
                key: "memory.available".into(),
                value: "100Mi".into(),
            }],
            cluster_dns: vec![],
        },
        cni: Cni::Cilium,
    }
}

/// A taint.
pub fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
    Taint {
        key: key.to_owned(),
        value: value.to_owned(),
        effect,
    }
}
