//! Behaviour of the scheduling simulation, one Karpenter rule per test, on small hand-built problems.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::scheduling::fixtures::pod;
use crate::scheduling::resources::Dim;
use crate::scheduling::{
    CheapestFitRanker, ExistingNode, InstanceRanker, InstanceType, NodeClaimDraft, NodePoolInput,
    Offering, PoolRequirement, RankError, RankRequest, Resources, Scheduler, SchedulerOptions,
    SchedulingProblem, SchedulingResult,
};
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodAffinity, PodAffinityTerm, PodAntiAffinity, PreferredSchedulingTerm, Taint, Toleration,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kk_apis::cached_pod::CachedPod;

const GI: u64 = 1 << 30;
const ZONES: [&str; 3] = ["kr-central-2-a", "kr-central-2-b", "kr-central-2-c"];
const ZONE: &str = "topology.kubernetes.io/zone";

fn offerings(price: u64) -> Vec<Offering> {
    ZONES
        .iter()
        .map(|z| Offering {
            zone: (*z).into(),
            capacity_type: "on-demand".into(),
            price_micros: price,
            available: true,
        })
        .collect()
}

/// A small KakaoCloud-like catalog: m2a.{large,xlarge,2xlarge,4xlarge} and one GPU flavor.
fn catalog() -> Vec<InstanceType> {
    let sizes = [
        ("m2a.large", 2u64, 8u64, 100_000u64),
        ("m2a.xlarge", 4, 16, 200_000),
        ("m2a.2xlarge", 8, 32, 400_000),
        ("m2a.4xlarge", 16, 64, 800_000),
    ];
    let mut types: Vec<InstanceType> = sizes
        .iter()
        .map(|&(name, c, m, p)| {
            InstanceType::new(name, Resources::new(c * 1000, m * GI, 110), offerings(p))
        })
        .collect();
    let mut gpu = InstanceType::new(
        "p2i.xlarge",
        Resources::new(8000, 64 * GI, 110).with(Dim::Gpus, 1),
        offerings(3_000_000),
    );
    gpu.labels
        .push(("kakaocloud.com/gpu".into(), "true".into()));
    types.push(gpu);
    types
}

fn pool(name: &str) -> NodePoolInput {
    NodePoolInput {
        name: name.into(),
        ..Default::default()
    }
}

fn solve_with(
    pods: &[Pod],
    pools: &[NodePoolInput],
    existing: &[ExistingNode],
    daemonsets: &[Pod],
    ranker: &dyn InstanceRanker,
) -> SchedulingResult {
    let types = catalog();
    let pods: Vec<std::sync::Arc<CachedPod>> = pods
        .iter()
        .cloned()
        .map(|p| std::sync::Arc::new(p.into()))
        .collect();
    let daemonsets: Vec<CachedPod> = daemonsets.iter().cloned().map(CachedPod::from).collect();
    let problem = SchedulingProblem {
        pods: &pods,
        node_pools: pools,
        instance_types: &types,
        existing_nodes: existing,
        daemonsets: &daemonsets,
    };
    Scheduler::new(ranker, SchedulerOptions::default()).solve(&problem)
}

fn solve(pods: &[Pod], pools: &[NodePoolInput]) -> SchedulingResult {
    solve_with(pods, pools, &[], &[], &CheapestFitRanker)
}

fn scheduled(r: &SchedulingResult) -> usize {
    r.new_node_claims
        .iter()
        .map(|c| c.pods.len())
        .sum::<usize>()
        + r.existing.iter().map(|e| e.pods.len()).sum::<usize>()
}

fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|s| (*s).to_owned()).collect()),
    }
}

fn zone_of(draft: &NodeClaimDraft) -> Vec<String> {
    draft
        .requirements
        .iter()
        .find(|r| r.requirement.key == ZONE)
        .and_then(|r| r.requirement.values.clone())
        .unwrap_or_default()
}

fn labels(app: &str) -> Option<BTreeMap<String, String>> {
    Some([("app".to_owned(), app.to_owned())].into())
}

fn select(app: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: labels(app),
        match_expressions: None,
    })
}

#[test]
fn node_selector_must_match_a_template_label() {
    let mut p = pod("web", 1000, 2048);
    p.spec.as_mut().unwrap().node_selector =
        Some([("workload-type".to_owned(), "karpenter".to_owned())].into());
    let plain = pool("plain");
    let r = solve(std::slice::from_ref(&p), std::slice::from_ref(&plain));
    assert_eq!(r.unschedulable.len(), 1);
    assert!(
        r.unschedulable[0].reason.contains("workload-type"),
        "{}",
        r.unschedulable[0].reason
    );

    let mut labelled = pool("karpenter");
    labelled
        .labels
        .insert("workload-type".into(), "karpenter".into());
    let r = solve(&[p], &[plain, labelled]);
    assert_eq!(r.new_node_claims.len(), 1);
    let draft = &r.new_node_claims[0];
    assert_eq!(draft.node_pool, "karpenter");
    assert_eq!(
        draft.labels.get("workload-type").map(String::as_str),
        Some("karpenter")
    );
    assert_eq!(
        draft
            .labels
            .get("karpenter.sh/nodepool")
            .map(String::as_str),
        Some("karpenter")
    );
    assert_eq!(
        draft.instance_types.first().map(String::as_str),
        Some("m2a.large"),
        "cheapest fit first"
    );
    let keys: Vec<&str> = draft
        .requirements
        .iter()
        .map(|r| r.requirement.key.as_str())
        .collect();
    for k in [
        "node.kubernetes.io/instance-type",
        ZONE,
        "karpenter.sh/capacity-type",
    ] {
        assert!(keys.contains(&k), "draft requirements lack {k}: {keys:?}");
    }
}

#[test]
fn taints_need_tolerations_and_weights_order_pools() {
    let mut tainted = pool("gpu-only");
    tainted.weight = 100;
    tainted.taints = vec![Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }];
    let open = pool("general");
    let plain = pod("plain", 500, 512);
    let mut tolerant = pod("tolerant", 500, 512);
    tolerant.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
        key: Some("dedicated".into()),
        operator: Some("Equal".into()),
        value: Some("gpu".into()),
        effect: Some("NoSchedule".into()),
        toleration_seconds: None,
    }]);
    // Like upstream, a pod first joins a node this pass already opened, so the heavier pool is
    // checked on the tolerating pod alone.
    let alone = solve(
        std::slice::from_ref(&tolerant),
        &[open.clone(), tainted.clone()],
    );
    assert_eq!(
        alone.new_node_claims[0].node_pool, "gpu-only",
        "the heavier pool wins when tolerated"
    );
    let r = solve(&[plain.clone(), tolerant], &[open, tainted.clone()]);
    assert_eq!(r.unschedulable, vec![]);
    let pool_of = |i: usize| {
        r.new_node_claims
            .iter()
            .find(|c| c.pods.contains(&i))
            .map(|c| c.node_pool.clone())
    };
    assert_eq!(
        pool_of(0).as_deref(),
        Some("general"),
        "the plain pod cannot go to the tainted pool"
    );
    assert!(pool_of(1).is_some(), "the tolerating pod is placed too");
    let r = solve(&[plain], &[tainted]);
    assert!(
        r.unschedulable[0].reason.contains("taint dedicated=gpu"),
        "{}",
        r.unschedulable[0].reason
    );
}

#[test]
fn a_gpu_pod_gets_a_gpu_flavor_and_others_do_not() {
    let mut gpu_pod = pod("train", 1000, 4096);
    let c = &mut gpu_pod.spec.as_mut().unwrap().containers[0];
    c.resources.as_mut().unwrap().limits =
        Some([("nvidia.com/gpu".to_owned(), Quantity("1".into()))].into());
    let r = solve(&[gpu_pod, pod("web", 3000, 4096)], &[pool("default")]);
    let gpu = r
        .new_node_claims
        .iter()
        .find(|c| c.pods.contains(&0))
        .expect("gpu pod scheduled");
    assert_eq!(gpu.instance_types, vec!["p2i.xlarge".to_owned()]);
    assert_eq!(gpu.requests.get(Dim::Gpus), 1);
    let web = r
        .new_node_claims
        .iter()
        .find(|c| c.pods.contains(&1))
        .expect("web pod scheduled");
    if web.pods.len() == 1 {
        assert!(
            !web.instance_types.contains(&"p2i.xlarge".to_owned())
                || web.instance_types[0] != "p2i.xlarge"
        );
    }
    // The web pod is larger, so it is placed first and opens its own non-GPU node.
    assert_eq!(web.pods, vec![1]);
    assert_eq!(web.instance_types[0], "m2a.xlarge");
}

#[test]
fn existing_nodes_are_used_first_unless_tainted() {
    let node = ExistingNode {
        name: "node-1".into(),
        labels: [(ZONE.to_owned(), ZONES[0].to_owned())].into(),
        allocatable: Resources::new(4000, 16 * GI, 110),
        pods: vec![std::sync::Arc::new(pod("running", 3000, 1024).into())],
        ..Default::default()
    };
    let r = solve_with(
        &[pod("fits", 500, 512), pod("too-big", 1000, 512)],
        &[pool("default")],
        std::slice::from_ref(&node),
        &[],
        &CheapestFitRanker,
    );
    assert_eq!(r.existing.len(), 1);
    assert_eq!(r.existing[0].node, "node-1");
    assert_eq!(r.new_node_claims.len(), 1);
    // First-fit decreasing places the 1-cpu pod first, on the node's last free core.
    assert_eq!(r.existing[0].pods, vec![1]);
    assert_eq!(r.new_node_claims[0].pods, vec![0]);

    let mut tainted = node;
    tainted.taints = vec![Taint {
        key: "maintenance".into(),
        value: None,
        effect: "NoSchedule".into(),
        time_added: None,
    }];
    let r = solve_with(
        &[pod("fits", 500, 512)],
        &[pool("default")],
        &[tainted],
        &[],
        &CheapestFitRanker,
    );
    assert!(r.existing.is_empty());
    assert_eq!(r.new_node_claims.len(), 1);
}

fn spread(p: &mut Pod, key: &str, app: &str) {
    p.metadata.labels = labels(app);
    p.spec.as_mut().unwrap().topology_spread_constraints = Some(vec![TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: select(app),
        ..Default::default()
    }]);
}

#[test]
fn zone_spread_balances_three_zones() {
    let pods: Vec<Pod> = (0..9)
        .map(|i| {
            let mut p = pod(&format!("s{i}"), 1000, 1024);
            spread(&mut p, ZONE, "web");
            p
        })
        .collect();
    let r = solve(&pods, &[pool("default")]);
    assert_eq!(r.unschedulable, vec![]);
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for c in &r.new_node_claims {
        let z = zone_of(c);
        assert_eq!(z.len(), 1, "a spread node is pinned to one zone: {z:?}");
        *per_zone.entry(z[0].clone()).or_default() += c.pods.len();
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![3, 3, 3],
        "{per_zone:?}"
    );
}

#[test]
fn zone_spread_respects_an_existing_imbalance() {
    let existing: Vec<ExistingNode> = (0..2)
        .map(|i| {
            let mut running = pod(&format!("old{i}"), 100, 100);
            running.metadata.labels = labels("web");
            ExistingNode {
                name: format!("old-{i}"),
                labels: [(ZONE.to_owned(), ZONES[0].to_owned())].into(),
                allocatable: Resources::new(500, GI, 110),
                pods: vec![std::sync::Arc::new(running.into())],
                ..Default::default()
            }
        })
        .collect();
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            let mut p = pod(&format!("s{i}"), 1000, 1024);
            spread(&mut p, ZONE, "web");
            p
        })
        .collect();
    let r = solve_with(
        &pods,
        &[pool("default")],
        &existing,
        &[],
        &CheapestFitRanker,
    );
    assert_eq!(r.unschedulable, vec![]);
    let mut per_zone: BTreeMap<String, usize> = [(ZONES[0].to_owned(), 2)].into();
    for c in &r.new_node_claims {
        *per_zone.entry(zone_of(c)[0].clone()).or_default() += c.pods.len();
    }
    assert_eq!(
        per_zone.get(ZONES[0]),
        Some(&2),
        "zone a already has two: {per_zone:?}"
    );
    assert_eq!(per_zone.get(ZONES[1]), Some(&2));
    assert_eq!(per_zone.get(ZONES[2]), Some(&2));
}

fn anti(p: &mut Pod, app: &str) {
    p.metadata.labels = labels(app);
    p.spec.as_mut().unwrap().affinity = Some(Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: select(app),
                topology_key: "kubernetes.io/hostname".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    });
}

#[test]
fn hostname_anti_affinity_puts_each_pod_on_its_own_node() {
    let pods: Vec<Pod> = (0..5)
        .map(|i| {
            let mut p = pod(&format!("db{i}"), 100, 128);
            anti(&mut p, "db");
            p
        })
        .chain(std::iter::once(pod("filler", 100, 128)))
        .collect();
    let r = solve(&pods, &[pool("default")]);
    assert_eq!(r.unschedulable, vec![]);
    assert_eq!(r.new_node_claims.len(), 5);
    for c in &r.new_node_claims {
        assert_eq!(c.pods.iter().filter(|&&i| i < 5).count(), 1, "{:?}", c.pods);
    }
}

#[test]
fn running_pods_anti_affinity_keeps_matching_pods_away() {
    let mut guard = pod("guard", 100, 128);
    anti(&mut guard, "web");
    guard.metadata.labels = labels("guard");
    let node = ExistingNode {
        name: "node-1".into(),
        allocatable: Resources::new(4000, 16 * GI, 110),
        pods: vec![std::sync::Arc::new(guard.into())],
        ..Default::default()
    };
    let mut web = pod("web", 100, 128);
    web.metadata.labels = labels("web");
    let other = pod("other", 100, 128);
    let r = solve_with(
        &[web, other],
        &[pool("default")],
        &[node],
        &[],
        &CheapestFitRanker,
    );
    assert_eq!(r.existing.len(), 1);
    assert_eq!(
        r.existing[0].pods,
        vec![1],
        "only the pod the guard does not repel joins its node"
    );
    assert_eq!(r.new_node_claims[0].pods, vec![0]);
}

fn node_affinity(
    p: &mut Pod,
    required: Vec<Vec<NodeSelectorRequirement>>,
    preferred: Vec<(i32, Vec<NodeSelectorRequirement>)>,
) {
    p.spec.as_mut().unwrap().affinity = Some(Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: (!required.is_empty()).then(
                || NodeSelector {
                    node_selector_terms: required
                        .into_iter()
                        .map(|m| NodeSelectorTerm {
                            match_expressions: Some(m),
                            match_fields: None,
                        })
                        .collect(),
                },
            ),
            preferred_during_scheduling_ignored_during_execution: (!preferred.is_empty()).then(
                || {
                    preferred
                        .into_iter()
                        .map(|(weight, m)| PreferredSchedulingTerm {
                            weight,
                            preference: NodeSelectorTerm {
                                match_expressions: Some(m),
                                match_fields: None,
                            },
                        })
                        .collect()
                },
            ),
        }),
        ..Default::default()
    });
}

#[test]
fn preferences_hold_when_possible_and_relax_when_not() {
    let mut likes_b = pod("likes-b", 500, 512);
    node_affinity(
        &mut likes_b,
        vec![],
        vec![(50, vec![req(ZONE, "In", &[ZONES[1]])])],
    );
    let mut likes_nowhere = pod("likes-nowhere", 500, 512);
    node_affinity(
        &mut likes_nowhere,
        vec![],
        vec![(50, vec![req(ZONE, "In", &["mars-1"])])],
    );
    let r = solve(&[likes_b, likes_nowhere], &[pool("default")]);
    assert_eq!(r.unschedulable, vec![], "an unmet preference is relaxed");
    let c = r
        .new_node_claims
        .iter()
        .find(|c| c.pods.contains(&0))
        .unwrap();
    assert_eq!(zone_of(c), vec![ZONES[1].to_owned()]);
}

#[test]
fn a_pool_whose_requirements_leave_no_instance_type_is_named() {
    let mut none = pool("none");
    none.requirements.push(PoolRequirement {
        requirement: req("node.kubernetes.io/instance-type", "In", &["x9.huge"]),
        min_values: None,
    });
    let r = solve(&[pod("p", 500, 512)], &[none, pool("default")]);
    assert_eq!(r.pools_without_types, vec!["none".to_owned()]);
    assert!(r.unschedulable.is_empty(), "the other pool serves the pod");
}

#[test]
fn a_named_host_is_never_a_new_node() {
    // A pod preferring a host that is gone (its node was consolidated) gets a new node without
    // the preference; one requiring it gets none. A NodeClaim never carries a hostname
    // requirement: the API refuses the restricted label.
    let host = "kubernetes.io/hostname";
    let mut likes_gone = pod("likes-gone", 500, 512);
    node_affinity(
        &mut likes_gone,
        vec![],
        vec![(100, vec![req(host, "In", &["node-gone"])])],
    );
    let mut needs_gone = pod("needs-gone", 500, 512);
    node_affinity(
        &mut needs_gone,
        vec![vec![req(host, "In", &["node-gone"])]],
        vec![],
    );
    let r = solve(&[likes_gone, needs_gone], &[pool("default")]);
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(r.new_node_claims[0].pods, vec![0]);
    assert!(
        r.new_node_claims[0]
            .requirements
            .iter()
            .all(|q| q.requirement.key != host),
        "{:?}",
        r.new_node_claims[0].requirements
    );
    assert_eq!(r.unschedulable.len(), 1);
    assert_eq!(r.unschedulable[0].pod, 1);
}

#[test]
fn required_affinity_terms_are_alternatives() {
    let mut p = pod("either", 500, 512);
    node_affinity(
        &mut p,
        vec![
            vec![req("node.kubernetes.io/instance-type", "In", &["x9.huge"])],
            vec![req(
                "node.kubernetes.io/instance-type",
                "In",
                &["m2a.2xlarge"],
            )],
        ],
        vec![],
    );
    let mut impossible = pod("impossible", 500, 512);
    node_affinity(
        &mut impossible,
        vec![vec![req("kubernetes.io/arch", "In", &["s390x"])]],
        vec![],
    );
    let r = solve(&[p, impossible], &[pool("default")]);
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(
        r.new_node_claims[0].instance_types,
        vec!["m2a.2xlarge".to_owned()]
    );
    assert_eq!(r.unschedulable.len(), 1);
    assert_eq!(r.unschedulable[0].pod, 1);
}

#[test]
fn limits_stop_provisioning_and_are_never_exceeded() {
    let mut limited = pool("limited");
    limited.limits = [("cpu".to_owned(), Quantity("16".into()))].into();
    limited.requirements = vec![PoolRequirement {
        requirement: req("node.kubernetes.io/instance-type", "In", &["m2a.xlarge"]),
        min_values: None,
    }];
    let pods: Vec<Pod> = (0..10).map(|i| pod(&format!("p{i}"), 3500, 1024)).collect();
    let r = solve(&pods, &[limited]);
    assert_eq!(r.new_node_claims.len(), 4, "four 4-cpu nodes make 16 cpu");
    assert_eq!(r.unschedulable.len(), 6);
    assert!(
        r.unschedulable.iter().all(|u| u.reason.contains("limits")),
        "{:?}",
        r.unschedulable
    );
}

#[test]
fn min_values_keep_enough_instance_types() {
    let mut flexible = pool("flexible");
    flexible.requirements = vec![PoolRequirement {
        requirement: req("node.kubernetes.io/instance-type", "Exists", &[]),
        min_values: Some(3),
    }];
    let r = solve(
        &[pod("small", 1000, 1024), pod("big", 7000, 1024)],
        &[flexible],
    );
    let small = r
        .new_node_claims
        .iter()
        .find(|c| c.pods == vec![0])
        .expect("small pod scheduled");
    assert!(
        small.instance_types.len() >= 3,
        "{:?}",
        small.instance_types
    );
    let it = small
        .requirements
        .iter()
        .find(|r| r.requirement.key == "node.kubernetes.io/instance-type")
        .unwrap();
    assert_eq!(it.min_values, Some(3));
    // Only m2a.4xlarge and the GPU flavor hold 7 cpu: two types, fewer than minValues.
    assert_eq!(r.unschedulable.len(), 1);
    assert!(
        r.unschedulable[0].reason.contains("minValues"),
        "{}",
        r.unschedulable[0].reason
    );
}

#[test]
fn daemonset_overhead_is_reserved_on_new_nodes() {
    let ds = pod("agent", 1500, 1024);
    let r = solve_with(
        &[pod("web", 1000, 1024)],
        &[pool("default")],
        &[],
        &[ds],
        &CheapestFitRanker,
    );
    let c = &r.new_node_claims[0];
    assert_eq!(c.requests.get(Dim::CpuMillis), 2500);
    assert_eq!(
        c.instance_types[0], "m2a.xlarge",
        "2 cpu minus reservations cannot hold 2.5 cpu"
    );
}

struct CountingRanker(AtomicUsize);

impl InstanceRanker for CountingRanker {
    fn name(&self) -> &str {
        "counting"
    }
    fn rank(&self, request: &RankRequest<'_>) -> Result<Vec<usize>, RankError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        CheapestFitRanker.rank(request)
    }
}

#[test]
fn rankings_are_cached_per_constraints_and_shape() {
    let ranker = CountingRanker(AtomicUsize::new(0));
    let pods: Vec<Pod> = (0..200)
        .map(|i| {
            let mut p = pod(&format!("db{i}"), 1000, 1024);
            anti(&mut p, "db");
            p
        })
        .collect();
    let r = solve_with(&pods, &[pool("default")], &[], &[], &ranker);
    assert_eq!(r.new_node_claims.len(), 200);
    assert_eq!(
        ranker.0.load(Ordering::Relaxed),
        1,
        "200 identical nodes need one ranking"
    );
    assert_eq!(r.ranker_calls, 1);
}

struct BrokenRanker(Result<Vec<usize>, RankError>);

impl InstanceRanker for BrokenRanker {
    fn name(&self) -> &str {
        "broken"
    }
    fn rank(&self, _: &RankRequest<'_>) -> Result<Vec<usize>, RankError> {
        self.0.clone()
    }
}

#[test]
fn ranker_failures_and_bad_answers_fall_back_to_the_native_ranking_and_say_why() {
    let cases = [
        (
            BrokenRanker(Err(RankError::Failed {
                ranker: "broken".into(),
                message: "trap".into(),
            })),
            "trap",
        ),
        (BrokenRanker(Ok(vec![99])), "out of range"),
        (BrokenRanker(Ok(vec![0, 0])), "twice"),
    ];
    for (ranker, expected) in cases {
        let r = solve_with(
            &[pod("web", 500, 512)],
            &[pool("default")],
            &[],
            &[],
            &ranker,
        );
        assert_eq!(
            scheduled(&r),
            1,
            "provisioning never stops because of a ranker"
        );
        let native = solve_with(
            &[pod("web", 500, 512)],
            &[pool("default")],
            &[],
            &[],
            &CheapestFitRanker,
        );
        assert_eq!(
            r.new_node_claims[0].instance_types, native.new_node_claims[0].instance_types,
            "the native order"
        );
        assert_eq!(r.ranker_fallbacks.len(), 1);
        assert!(
            r.ranker_fallbacks[0].contains(expected),
            "{:?}",
            r.ranker_fallbacks
        );
    }
}

#[test]
fn unknown_resources_and_oversized_pods_are_reported() {
    let mut fpga = pod("fpga", 500, 512);
    fpga.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap()
        .insert("example.com/fpga".into(), Quantity("1".into()));
    let r = solve(&[fpga, pod("huge", 64_000, 1024)], &[pool("default")]);
    assert_eq!(scheduled(&r), 0);
    assert!(
        r.unschedulable[0].reason.contains("example.com/fpga"),
        "{}",
        r.unschedulable[0].reason
    );
    assert!(
        r.unschedulable[1].reason.contains("nodepool default"),
        "{}",
        r.unschedulable[1].reason
    );
}

#[test]
fn zone_affinity_follows_running_pods() {
    let mut running = pod("cache", 100, 128);
    running.metadata.labels = labels("cache");
    let node = ExistingNode {
        name: "node-c".into(),
        labels: [(ZONE.to_owned(), ZONES[2].to_owned())].into(),
        allocatable: Resources::new(200, GI, 110),
        pods: vec![std::sync::Arc::new(running.into())],
        ..Default::default()
    };
    let pods: Vec<Pod> = (0..3)
        .map(|i| {
            let mut p = pod(&format!("near{i}"), 1000, 1024);
            p.spec.as_mut().unwrap().affinity = Some(Affinity {
                pod_affinity: Some(PodAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![
                        PodAffinityTerm {
                            label_selector: select("cache"),
                            topology_key: ZONE.into(),
                            ..Default::default()
                        },
                    ]),
                    ..Default::default()
                }),
                ..Default::default()
            });
            p
        })
        .collect();
    let r = solve_with(&pods, &[pool("default")], &[node], &[], &CheapestFitRanker);
    assert_eq!(r.unschedulable, vec![]);
    assert!(!r.new_node_claims.is_empty());
    for c in &r.new_node_claims {
        assert_eq!(zone_of(c), vec![ZONES[2].to_owned()]);
    }
}
