//! Disruption rules on hand-built snapshots: no API server, every decision checked.

use std::time::Duration;

use crate::disruption::scorer::{ConsolidationScorer, ScoreCandidate, ScoreError};
use crate::disruption::{
    ClusterSnapshot, DriftReason, Method, NodeState, PodState, PoolState, Reason,
    SavingsPerDisruption, plan, still_valid,
};
use crate::scheduling::{InstanceType, Offering, Resources};
use jiff::Timestamp;
use kk_apis::crd::nodepool::{Budget, ConsolidationPolicy, DisruptionReason};

const GI: u64 = 1 << 30;

fn now() -> Timestamp {
    "2026-12-03T12:00:00Z".parse().unwrap()
}

fn hours_ago(h: i64) -> Timestamp {
    Timestamp::from_second(now().as_second() - h * 3600).unwrap()
}

fn itype(name: &str, cpu: u64, mem_gi: u64, price: u64) -> InstanceType {
    let mut t = InstanceType::new(
        name,
        Resources::new(cpu, mem_gi * GI, 110),
        vec![Offering {
            zone: "kr-central-2-a".into(),
            capacity_type: "on-demand".into(),
            price_micros: price,
            available: true,
        }],
    );
    t.overhead = Default::default();
    t
}

fn catalog() -> Vec<InstanceType> {
    vec![
        itype("m2a.large", 2000, 8, 100_000),
        itype("m2a.xlarge", 4000, 16, 200_000),
        itype("m2a.2xlarge", 8000, 32, 400_000),
    ]
}

fn node(name: &str, it: &str, cpu: u64, price: u64, pods: &[u64]) -> NodeState {
    let mut n = NodeState::new(
        name,
        "default",
        it,
        price,
        Resources::new(cpu, 4 * cpu / 1000 * GI, 110),
        hours_ago(5),
    );
    n.zone = "kr-central-2-a".into();
    n.pods = pods
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            PodState::new(
                "default",
                &format!("{name}-p{i}"),
                Resources::new(c, GI / 2, 1),
            )
        })
        .collect();
    n
}

/// A budget of `nodes` for every reason, always active.
fn budget(nodes: &str) -> Budget {
    Budget {
        nodes: nodes.into(),
        schedule: None,
        duration: None,
        reasons: None,
    }
}

fn snapshot(nodes: Vec<NodeState>) -> ClusterSnapshot {
    let mut pool = PoolState::new("default");
    pool.budgets = vec![budget("100%")];
    ClusterSnapshot {
        now: now(),
        pools: vec![pool],
        nodes,
        instance_types: catalog(),
        pending_pods: vec![],
        daemonsets: vec![],
        fingerprint: 0,
    }
}

fn names(cmd: &crate::disruption::Command, s: &ClusterSnapshot) -> Vec<String> {
    let mut v: Vec<String> = cmd.node_names(s).into_iter().map(str::to_owned).collect();
    v.sort();
    v
}

#[test]
fn empty_nodes_go_together_after_consolidate_after() {
    let mut s = snapshot(vec![
        node("a", "m2a.xlarge", 4000, 200_000, &[]),
        node("b", "m2a.xlarge", 4000, 200_000, &[]),
        node("c", "m2a.xlarge", 4000, 200_000, &[1000]),
    ]);
    s.pools[0].consolidate_after = Some(Duration::from_secs(600));
    // The last pod left `a` 5 minutes ago: not yet.
    s.nodes[0].last_pod_event = Some(Timestamp::from_second(now().as_second() - 300).unwrap());
    let p = plan(&s, &SavingsPerDisruption);
    let cmd = p.graceful.expect("b is empty for long enough");
    assert_eq!(cmd.method, Method::Emptiness);
    assert_eq!(names(&cmd, &s), ["b"]);
    assert!(cmd.replacement.is_none());
    // consolidateAfter: Never turns it off.
    s.pools[0].consolidate_after = None;
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_none());
}

#[test]
fn a_daemonset_only_node_is_empty() {
    let mut a = node("a", "m2a.xlarge", 4000, 200_000, &[300]);
    a.pods[0].daemonset = true;
    let s = snapshot(vec![a, node("b", "m2a.xlarge", 4000, 200_000, &[1000])]);
    let cmd = plan(&s, &SavingsPerDisruption).graceful.unwrap();
    assert_eq!(cmd.method, Method::Emptiness);
    assert_eq!(names(&cmd, &s), ["a"]);
}

#[test]
fn budget_of_one_lets_one_node_go_at_a_time() {
    let mut s = snapshot(
        (0..5)
            .map(|i| node(&format!("n{i}"), "m2a.xlarge", 4000, 200_000, &[]))
            .collect(),
    );
    s.pools[0].budgets = vec![budget("1")];
    let cmd = plan(&s, &SavingsPerDisruption).graceful.unwrap();
    assert_eq!(cmd.candidates.len(), 1);
    // With one node already deleting, the budget is used up.
    s.nodes[0].deleting = true;
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_none());
    // A budget that only limits drift does not hold emptiness back.
    s.pools[0].budgets = vec![Budget {
        nodes: "0".into(),
        schedule: None,
        duration: None,
        reasons: Some(vec![DisruptionReason::Drifted]),
    }];
    assert_eq!(
        plan(&s, &SavingsPerDisruption)
            .graceful
            .unwrap()
            .candidates
            .len(),
        4
    );
}

#[test]
fn underutilized_nodes_are_packed_and_the_price_falls() {
    // Four half-empty xlarge nodes: 4 x 1500m fits on two of them.
    let nodes: Vec<NodeState> = (0..4)
        .map(|i| node(&format!("n{i}"), "m2a.xlarge", 4000, 200_000, &[1000, 500]))
        .collect();
    let s = snapshot(nodes);
    let before = s.hourly_price_micros();
    let p = plan(&s, &SavingsPerDisruption);
    let cmd = p.graceful.expect("consolidation");
    assert_eq!(cmd.method, Method::MultiNodeConsolidation);
    assert!(cmd.candidates.len() >= 2, "{cmd:?}");
    assert!(cmd.savings_micros > 0);
    let after = before as i64 - cmd.savings_micros;
    assert!(after < before as i64);
    // Whatever remains can hold every pod: 6000m of pods on the nodes left plus any replacement.
    let kept_cpu: u64 = s
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| !cmd.candidates.contains(i))
        .map(|(_, n)| {
            4000 - n
                .requested()
                .get(crate::scheduling::resources::Dim::CpuMillis)
        })
        .sum();
    let moved: u64 = cmd
        .candidates
        .iter()
        .map(|&i| {
            s.nodes[i]
                .requested()
                .get(crate::scheduling::resources::Dim::CpuMillis)
        })
        .sum();
    let extra = cmd
        .replacement
        .as_ref()
        .map_or(0, |r| match r.instance_types[0].as_str() {
            "m2a.large" => 2000,
            "m2a.xlarge" => 4000,
            _ => 8000,
        });
    assert!(moved <= kept_cpu + extra);
}

#[test]
fn consolidation_waits_while_pending_pods_need_a_new_node() {
    let packable = || {
        (0..4)
            .map(|i| node(&format!("n{i}"), "m2a.xlarge", 4000, 200_000, &[1000, 500]))
            .collect::<Vec<_>>()
    };
    let pending = |cpu: u64| PodState::new("default", "pending", Resources::new(cpu, GI / 2, 1));
    // 3 cpu fits on no node (2.5 free on each) but on a new one: the nodes stay.
    let mut s = snapshot(packable());
    s.pending_pods = vec![pending(3000)];
    let p = plan(&s, &SavingsPerDisruption);
    assert!(p.graceful.is_none(), "{:?}", p.graceful);
    // Once a NodeClaim for it is launching, consolidation goes on.
    let mut launching = node("launching", "m2a.xlarge", 4000, 200_000, &[]);
    launching.initialized = false;
    s.nodes.push(launching);
    let cmd = plan(&s, &SavingsPerDisruption)
        .graceful
        .expect("consolidation");
    assert!(!cmd.node_names(&s).contains(&"launching"), "{cmd:?}");
    // A pod no instance type holds, or only a pool at its limits could, waits on no one.
    let mut s = snapshot(packable());
    s.pending_pods = vec![pending(64_000)];
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_some());
    s.pending_pods = vec![pending(3000)];
    s.pools[0].at_limit = true;
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_some());
}

#[test]
fn a_node_is_replaced_by_a_cheaper_one_when_its_pods_fit_nowhere_else() {
    // One 2xlarge running 1.5 cpu, next to a full node: replace with a large.
    let s = snapshot(vec![
        node("big", "m2a.2xlarge", 8000, 400_000, &[1500]),
        node("full", "m2a.xlarge", 4000, 200_000, &[4000]),
    ]);
    let cmd = plan(&s, &SavingsPerDisruption).graceful.expect("replace");
    assert_eq!(cmd.method, Method::SingleNodeConsolidation);
    assert_eq!(names(&cmd, &s), ["big"]);
    let r = cmd.replacement.as_ref().expect("replacement");
    assert_eq!(r.instance_types[0], "m2a.large");
    assert_eq!(r.price_micros, 100_000);
    assert_eq!(cmd.savings_micros, 300_000);
    assert!(
        !r.instance_types.contains(&"m2a.2xlarge".to_string()),
        "never the same price or dearer"
    );
}

#[test]
fn nodes_whose_pods_cannot_go_elsewhere_are_kept() {
    let s = snapshot(vec![
        node("a", "m2a.large", 2000, 100_000, &[1800]),
        node("b", "m2a.large", 2000, 100_000, &[1800]),
    ]);
    let p = plan(&s, &SavingsPerDisruption);
    assert!(p.graceful.is_none(), "{:?}", p.graceful);
    // Each says why, for its Unconsolidatable event.
    assert_eq!(
        p.scored.unconsolidatable,
        vec![
            (0, crate::disruption::plan::NO_CHEAPER.to_owned()),
            (1, crate::disruption::plan::NO_CHEAPER.to_owned())
        ]
    );
}

#[test]
fn blocked_and_unschedulable_candidates_say_why() {
    let mut s = snapshot(vec![
        node("held", "m2a.large", 2000, 100_000, &[200]),
        node("full", "m2a.large", 2000, 100_000, &[1900]),
        node("big", "m2a.large", 2000, 100_000, &[1950]),
    ]);
    s.nodes[0].pods[0].do_not_disrupt = true;
    // `big`'s pod fits nowhere else and no flavor of the catalog is cheaper: no cheaper node.
    // Make `full`'s pod too big for any flavor's remaining room and any new node.
    s.nodes[1].pods[0].requests = crate::scheduling::Resources::new(1900, 64 * GI, 1);
    let p = plan(&s, &SavingsPerDisruption);
    assert!(p.graceful.is_none(), "{:?}", p.graceful);
    assert_eq!(p.scored.blocked.len(), 1);
    assert_eq!(p.scored.blocked[0].0, 0);
    assert!(p.scored.blocked[0].1.contains("do-not-disrupt"));
    assert!(
        p.scored
            .unconsolidatable
            .contains(&(1, crate::disruption::plan::WOULD_NOT_SCHEDULE.to_owned()))
    );
    assert!(
        p.scored
            .unconsolidatable
            .contains(&(2, crate::disruption::plan::NO_CHEAPER.to_owned()))
    );
}

#[test]
fn do_not_disrupt_and_pdbs_hold_their_node() {
    let mut s = snapshot(vec![
        node("a", "m2a.xlarge", 4000, 200_000, &[500]),
        node("b", "m2a.xlarge", 4000, 200_000, &[500]),
    ]);
    s.nodes[0].pods[0].do_not_disrupt = true;
    s.nodes[1].pods[0].pdb_blocked = true;
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_none());
    // The node annotation holds even an empty node.
    let mut s = snapshot(vec![node("a", "m2a.xlarge", 4000, 200_000, &[])]);
    s.nodes[0].do_not_disrupt = true;
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_none());
}

#[test]
fn when_empty_policy_does_not_consolidate_busy_nodes() {
    let mut s = snapshot(vec![
        node("a", "m2a.xlarge", 4000, 200_000, &[500]),
        node("b", "m2a.xlarge", 4000, 200_000, &[500]),
    ]);
    s.pools[0].consolidation_policy = ConsolidationPolicy::WhenEmpty;
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_none());
    s.pools[0].consolidation_policy = ConsolidationPolicy::WhenEmptyOrUnderutilized;
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_some());
}

#[test]
fn balanced_takes_only_moves_whose_saving_is_worth_their_disruption() {
    // A 2xlarge that one large could replace, beside four full xlarge nodes: the pool costs
    // 1.2/h and the move saves 0.3/h (a quarter of it).
    let pool_with = |pods: &[u64]| {
        let mut nodes = vec![node("big", "m2a.2xlarge", 8000, 400_000, pods)];
        // Held by do-not-disrupt, so only "big" is a candidate (the full nodes' pods could
        // otherwise move onto it and make a multi-node move worth it).
        nodes.extend((0..4).map(|i| {
            let mut full = node(&format!("full{i}"), "m2a.xlarge", 4000, 200_000, &[4000]);
            full.do_not_disrupt = true;
            full
        }));
        snapshot(nodes)
    };
    // Ten pods to evict: 11 of the pool's 19 disruption units for a quarter of its cost.
    let mut busy = pool_with(&[150; 10]);
    assert!(
        plan(&busy, &SavingsPerDisruption).graceful.is_some(),
        "WhenEmptyOrUnderutilized replaces it"
    );
    busy.pools[0].consolidation_policy = ConsolidationPolicy::Balanced;
    let score = crate::disruption::plan::balanced_score(&busy, &[0], 300_000);
    assert!((score - 0.25 / (11.0 / 19.0)).abs() < 1e-9, "{score}");
    let p = plan(&busy, &SavingsPerDisruption);
    assert!(p.graceful.is_none(), "{:?}", p.graceful);
    assert!(
        p.scored
            .unconsolidatable
            .iter()
            .any(|(i, why)| *i == 0 && why.starts_with("Balanced")),
        "{:?}",
        p.scored.unconsolidatable
    );
    // One pod to evict: 2 of 10 units for the same quarter, worth it.
    let mut light = pool_with(&[1500]);
    light.pools[0].consolidation_policy = ConsolidationPolicy::Balanced;
    let cmd = plan(&light, &SavingsPerDisruption)
        .graceful
        .expect("replace");
    assert_eq!(names(&cmd, &light), ["big"]);
}

#[test]
fn a_static_pool_is_never_consolidated_and_its_drifted_node_is_deleted_not_replaced() {
    let mut s = snapshot(vec![
        node("idle", "m2a.xlarge", 4000, 200_000, &[]),
        node("light", "m2a.2xlarge", 8000, 400_000, &[500]),
    ]);
    s.pools[0].is_static = true;
    let p = plan(&s, &SavingsPerDisruption);
    assert!(p.graceful.is_none(), "{:?}", p.graceful);
    s.nodes[1].drift = Some(crate::disruption::DriftReason::NodePoolDrifted);
    let cmd = plan(&s, &SavingsPerDisruption).graceful.expect("drift");
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(names(&cmd, &s), ["light"]);
    assert!(
        cmd.replacement.is_none(),
        "the static controller replaces it"
    );
    assert!(crate::disruption::plan::still_valid(&cmd, &s, &s));
}

#[test]
fn drift_replaces_even_without_saving_and_respects_its_budget() {
    let mut s = snapshot(vec![
        node("old", "m2a.xlarge", 4000, 200_000, &[3000]),
        node("other", "m2a.xlarge", 4000, 200_000, &[3000]),
    ]);
    s.nodes[0].drift = Some(DriftReason::NodeClassDrifted("image".into()));
    let cmd = plan(&s, &SavingsPerDisruption).graceful.expect("drift");
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(names(&cmd, &s), ["old"]);
    let r = cmd.replacement.expect("3 cpu need a new node");
    assert_eq!(r.instance_types[0], "m2a.xlarge");
    s.pools[0].budgets = vec![Budget {
        nodes: "0".into(),
        schedule: None,
        duration: None,
        reasons: Some(vec![DisruptionReason::Drifted]),
    }];
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_none());
}

#[test]
fn expired_nodes_are_deleted_regardless_of_budgets_and_do_not_disrupt() {
    let mut s = snapshot(vec![node("old", "m2a.xlarge", 4000, 200_000, &[3000])]);
    s.nodes[0].created = hours_ago(800);
    s.nodes[0].do_not_disrupt = true;
    s.pools[0].budgets = vec![budget("0")];
    let p = plan(&s, &SavingsPerDisruption);
    assert_eq!(p.forceful.len(), 1);
    assert_eq!(p.forceful[0].reason, Reason::Expired);
    assert!(
        p.forceful[0].replacement.is_none(),
        "upstream v1: no pre-spun replacement; provisioning places the pods"
    );
    assert!(p.graceful.is_none());
    assert!(crate::disruption::plan::still_valid(&p.forceful[0], &s, &s));
    // expireAfter: Never.
    s.pools[0].expire_after = None;
    assert!(plan(&s, &SavingsPerDisruption).forceful.is_empty());
}

#[test]
fn uninitialized_and_unmanaged_nodes_are_not_candidates() {
    let mut s = snapshot(vec![
        node("a", "m2a.xlarge", 4000, 200_000, &[]),
        node("b", "m2a.xlarge", 4000, 200_000, &[]),
    ]);
    s.nodes[0].initialized = false;
    s.nodes[1].nodeclaim = None;
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_none());
}

struct Reverse;
impl ConsolidationScorer for Reverse {
    fn name(&self) -> &str {
        "prefer-cheapest-node"
    }
    fn score(&self, c: &[ScoreCandidate]) -> Result<Vec<f64>, ScoreError> {
        Ok(c.iter().map(|c| 1e9 / c.price_micros as f64).collect())
    }
}

struct Broken;
impl ConsolidationScorer for Broken {
    fn name(&self) -> &str {
        "broken"
    }
    fn score(&self, _: &[ScoreCandidate]) -> Result<Vec<f64>, ScoreError> {
        Ok(vec![f64::NAN])
    }
}

#[test]
fn the_scorer_orders_candidates_and_a_bad_scorer_falls_back() {
    // Two candidates, room for only one of them to go.
    let s = snapshot(vec![
        node("cheap", "m2a.large", 2000, 100_000, &[1000]),
        node("dear", "m2a.xlarge", 4000, 200_000, &[1000]),
        node("dest", "m2a.xlarge", 4000, 200_000, &[2900]),
    ]);
    let first = |p: &crate::disruption::Plan| s.nodes[p.scored.order[0]].name.clone();
    let native = plan(&s, &SavingsPerDisruption);
    assert_eq!(first(&native), "dear", "saves more per unit of disruption");
    let custom = plan(&s, &Reverse);
    assert_eq!(first(&custom), "cheap");
    assert!(custom.scored.scorer_error.is_none());
    let broken = plan(&s, &Broken);
    assert!(broken.scored.scorer_error.is_some());
    assert_eq!(first(&broken), "dear");
}

#[test]
fn validation_abandons_a_command_after_churn() {
    let s = snapshot(vec![
        node("a", "m2a.xlarge", 4000, 200_000, &[]),
        node("b", "m2a.xlarge", 4000, 200_000, &[1000]),
    ]);
    let cmd = plan(&s, &SavingsPerDisruption).graceful.unwrap();
    assert!(still_valid(&cmd, &s, &s));
    let mut later = s.clone();
    later.nodes[0]
        .pods
        .push(PodState::new("default", "new", Resources::new(100, GI, 1)));
    assert!(
        !still_valid(&cmd, &s, &later),
        "a pod landed on the empty node"
    );
}

#[test]
fn pods_of_a_reverted_consolidation_are_left_alone_and_their_node_still_receives() {
    let s = snapshot(vec![
        node("a", "m2a.xlarge", 4000, 200_000, &[500]),
        node("b", "m2a.xlarge", 4000, 200_000, &[500]),
    ]);
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_some());
    let mut s = s;
    s.nodes[1].pods[0].consolidation_held = true;
    let cmd = plan(&s, &SavingsPerDisruption)
        .graceful
        .expect("a still goes");
    assert_eq!(
        names(&cmd, &s),
        ["a"],
        "b's pods are held, b is a destination"
    );
}

/// Gives the pods of `n` their objects, as the snapshot builder does: label `app`, the CPU and
/// memory of their states, and `affinity` (which makes them complex: the full solver decides).
fn with_objects(mut n: NodeState, app: &str, affinity: Option<serde_json::Value>) -> NodeState {
    use crate::scheduling::resources::Dim;
    for p in &mut n.pods {
        let cpu = p.requests.get(Dim::CpuMillis);
        let mut spec = serde_json::json!({"nodeName": n.name, "containers": [{"name": "c",
            "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": "512Mi"}}}]});
        if let Some(a) = &affinity {
            spec["affinity"] = a.clone();
            p.needs_full_simulation = true;
        }
        let pod = serde_json::json!({
            "metadata": {"namespace": p.namespace, "name": p.name, "labels": {"app": app}},
            "spec": spec,
        });
        p.pod = Some(std::sync::Arc::new(serde_json::from_value(pod).unwrap()));
    }
    n
}

/// Required hostname anti-affinity to the pods labelled `app`.
fn one_per_host(app: &str) -> serde_json::Value {
    serde_json::json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": kk_apis::names::label::HOSTNAME,
         "labelSelector": {"matchLabels": {"app": app}}}
    ]}})
}

#[test]
fn a_running_pods_anti_affinity_leaves_no_move_and_nothing_is_disrupted() {
    // Upstream's scenario: a's pod keeps b's pod off a; b's pod is already on the cheapest
    // flavor, so no delete and no cheaper replacement exists. The solver decides a's move.
    let mut s = snapshot(vec![
        with_objects(
            node("a", "m2a.large", 2000, 100_000, &[200]),
            "x",
            Some(one_per_host("y")),
        ),
        with_objects(node("b", "m2a.large", 2000, 100_000, &[200]), "y", None),
    ]);
    s.nodes[1].pods[0]
        .kept_out_of
        .push((kk_apis::names::label::HOSTNAME.into(), "a".into()));
    let p = plan(&s, &SavingsPerDisruption);
    assert!(p.graceful.is_none(), "{:?}", p.graceful);
    // Each says why, for its Unconsolidatable event.
    let mut why = p.scored.unconsolidatable.clone();
    why.sort();
    let no_cheaper = crate::disruption::plan::NO_CHEAPER.to_owned();
    assert_eq!(why, vec![(0, no_cheaper.clone()), (1, no_cheaper)]);

    // Without the pod's object the solver cannot decide: the node is left alone and says so.
    s.nodes[0].pods[0].pod = None;
    let p = plan(&s, &SavingsPerDisruption);
    assert!(p.graceful.is_none(), "{:?}", p.graceful);
    assert!(
        p.scored
            .unconsolidatable
            .contains(&(0, crate::disruption::plan::UNMODELLED.to_owned())),
        "{:?}",
        p.scored.unconsolidatable
    );
}

#[test]
fn a_node_with_complex_pods_is_deleted_where_the_solver_places_them() {
    // web-0 keeps off any host running an `app: web` pod; b runs web-1, c has room.
    let mut s = snapshot(vec![
        with_objects(
            node("a", "m2a.xlarge", 4000, 200_000, &[500]),
            "web",
            Some(one_per_host("web")),
        ),
        with_objects(node("b", "m2a.xlarge", 4000, 200_000, &[500]), "web", None),
        with_objects(node("c", "m2a.xlarge", 4000, 200_000, &[1000]), "db", None),
    ]);
    // b and c only receive pods.
    s.nodes[1].do_not_disrupt = true;
    s.nodes[2].do_not_disrupt = true;
    let p = plan(&s, &SavingsPerDisruption);
    let cmd = p.graceful.expect("a goes");
    assert_eq!(names(&cmd, &s), ["a"]);
    assert_eq!(cmd.replacement, None, "its pod fits on c");
    assert!(still_valid(&cmd, &s, &s));
    let mut sim = crate::disruption::Simulator::new(&s);
    assert_eq!(
        sim.placements(0),
        [(
            "default/a-p0".to_owned(),
            crate::disruption::Placement::Node("c".into())
        )],
        "not b, whose web pod the term selects"
    );

    // c's own pods are folded into its room: full, it takes nothing.
    let mut full = s.clone();
    full.nodes[2] = with_objects(node("c", "m2a.xlarge", 4000, 200_000, &[3800]), "db", None);
    let mut sim = crate::disruption::Simulator::new(&full);
    assert!(
        matches!(
            sim.simulate(&[0], None, true),
            crate::disruption::Outcome::Replace { .. }
        ),
        "a full c is no destination"
    );

    // Without c the pod needs a new node, and a 2-vCPU one is cheaper than a.
    s.nodes.truncate(2);
    let p = plan(&s, &SavingsPerDisruption);
    let cmd = p.graceful.expect("a is replaced");
    assert_eq!(names(&cmd, &s), ["a"]);
    let replacement = cmd.replacement.expect("a new node");
    assert_eq!(
        replacement.instance_types.first().map(String::as_str),
        Some("m2a.large")
    );
    assert_eq!(replacement.price_micros, 100_000);
    assert_eq!(cmd.savings_micros, 100_000);
}

/// A pending 500m pod labelled `web` that keeps off any host running one.
fn pending_web() -> PodState {
    let mut pending = with_objects(
        node("pending", "m2a.xlarge", 4000, 0, &[500]),
        "web",
        Some(one_per_host("web")),
    )
    .pods
    .remove(0);
    if let Some(pod) = pending.pod.as_mut() {
        let spec = std::sync::Arc::make_mut(pod).spec.as_mut().expect("spec");
        std::sync::Arc::make_mut(spec).node_name = None;
    }
    pending
}

#[test]
fn a_pending_pod_whose_own_constraints_need_a_new_node_holds_consolidation() {
    // Both nodes run a web pod and could each shrink to a cheaper node.
    let web = |name: &str| {
        with_objects(
            node(name, "m2a.xlarge", 4000, 200_000, &[500]),
            "web",
            Some(one_per_host("web")),
        )
    };
    let mut s = snapshot(vec![web("a"), web("b")]);
    assert!(plan(&s, &SavingsPerDisruption).graceful.is_some());
    // A third web pod pends. Both nodes have room by resources, but not by its anti-affinity:
    // it needs a new node, and consolidation waits for provisioning to add it.
    s.pending_pods.push(pending_web());
    let p = plan(&s, &SavingsPerDisruption);
    assert!(p.graceful.is_none(), "{:?}", p.graceful);
}

#[test]
fn a_pending_pod_counts_in_the_full_checks_topology() {
    // a runs one web pod (one per host); c has room for it.
    let mut s = snapshot(vec![
        with_objects(
            node("a", "m2a.xlarge", 4000, 200_000, &[500]),
            "web",
            Some(one_per_host("web")),
        ),
        with_objects(node("c", "m2a.xlarge", 4000, 200_000, &[1000]), "db", None),
    ]);
    s.nodes[1].do_not_disrupt = true;
    let cmd = plan(&s, &SavingsPerDisruption).graceful.expect("a goes");
    assert_eq!(cmd.replacement, None, "its pod fits on c");
    // Another web pod is pending and will take c: a's pod cannot follow it there, so a is
    // replaced by a cheaper node instead of deleted.
    s.pending_pods.push(pending_web());
    let cmd = plan(&s, &SavingsPerDisruption).graceful.expect("a goes");
    assert_eq!(names(&cmd, &s), ["a"]);
    let replacement = cmd.replacement.expect("a new node for a's pod");
    assert_eq!(replacement.price_micros, 100_000);
}

#[test]
fn two_nodes_of_one_spread_workload_never_merge_onto_one_host() {
    // Two half-empty nodes, one replica each of a one-per-host workload: any pair fits on one
    // node by resources, but the replicas must stay on different hosts.
    let web = |name: &str| {
        with_objects(
            node(name, "m2a.xlarge", 4000, 200_000, &[500]),
            "web",
            Some(one_per_host("web")),
        )
    };
    let s = snapshot(vec![web("a"), web("b")]);
    let p = plan(&s, &SavingsPerDisruption);
    if let Some(cmd) = &p.graceful {
        // Each may shrink to a cheaper node; never both onto one.
        assert_eq!(cmd.candidates.len(), 1, "{cmd:?}");
        assert!(cmd.replacement.is_some(), "{cmd:?}");
    }
    let multi = crate::disruption::plan::multi_node(
        &mut crate::disruption::Simulator::new(&s),
        &p.scored,
        &p.budgets,
    );
    assert!(multi.is_none(), "both onto one node: {multi:?}");
}

#[test]
fn a_budget_of_zero_names_its_pool() {
    let mut s = snapshot(vec![
        node("a", "m2a.xlarge", 4000, 200_000, &[500]),
        node("b", "m2a.xlarge", 4000, 200_000, &[500]),
    ]);
    s.pools[0].budgets = vec![budget("0")];
    let p = plan(&s, &SavingsPerDisruption);
    assert!(p.graceful.is_none());
    assert_eq!(
        p.budget_blocked,
        vec![("default".to_owned(), Reason::Underutilized)]
    );
    // An empty node is blocked for Empty, a drifted one for Drifted.
    let mut t = s.clone();
    t.nodes[0].pods.clear();
    t.nodes[1].drift = Some(crate::disruption::DriftReason::NodePoolDrifted);
    assert_eq!(
        plan(&t, &SavingsPerDisruption).budget_blocked,
        vec![
            ("default".to_owned(), Reason::Drifted),
            ("default".to_owned(), Reason::Empty)
        ]
    );
    assert_eq!(p.budgets.disrupting("default"), 0);
    let mut going = s.clone();
    going.nodes[1].deleting = true;
    assert_eq!(
        plan(&going, &SavingsPerDisruption)
            .budgets
            .disrupting("default"),
        1,
        "a deleting node consumes the budget"
    );
    s.pools[0].budgets.clear();
    assert!(plan(&s, &SavingsPerDisruption).budget_blocked.is_empty());
}

#[test]
fn explain_says_what_keeps_a_node_and_where_its_pods_would_go() {
    use crate::disruption::explain;
    let mut s = snapshot(vec![
        node("a", "m2a.xlarge", 4000, 200_000, &[500]),
        node("b", "m2a.2xlarge", 8000, 400_000, &[500, 3600]),
    ]);
    // a's pod fits on b: a could go.
    let a = explain::node(&s, "a").unwrap();
    assert!(!a.methods.iter().any(|m| m.blocks), "{a:#?}");
    assert!(a.verdict.contains("can be deleted"), "{a:#?}");
    assert_eq!(a.pods.len(), 1);
    assert_eq!(a.pods[0].pod, "default/a-p0");
    assert_eq!(a.pods[0].destination, "node b");
    // b: its 3600m pod fits on no remaining node, so onto one new, cheaper node.
    let b = explain::node(&s, "b").unwrap();
    assert_eq!(b.pods[0].destination, "node a");
    assert!(
        b.pods[1].destination.starts_with("a new m2a.xlarge node"),
        "{b:#?}"
    );
    assert!(b.verdict.contains("cheaper node"), "{b:#?}");

    // A PDB on a's pod keeps it, naming the pod.
    s.nodes[0].pods[0].pdb_blocked = true;
    let held = explain::node(&s, "a").unwrap();
    assert!(
        held.verdict.contains("PodDisruptionBudget") && held.verdict.contains("default/a-p0"),
        "{held:#?}"
    );
    s.nodes[0].pods[0].pdb_blocked = false;

    // A budget of zero keeps it, saying so.
    s.pools[0].budgets = vec![budget("0")];
    let frozen = explain::node(&s, "a").unwrap();
    assert!(
        frozen.verdict.contains("budget allows no Underutilized"),
        "{frozen:#?}"
    );
    assert!(explain::node(&s, "nope").is_none());
}

#[test]
fn the_quiet_key_moves_with_what_time_changes_in_the_rules() {
    use crate::disruption::plan::quiet_key;
    let mut s = snapshot(vec![
        node("a", "m2a.xlarge", 4000, 200_000, &[500]),
        node("b", "m2a.xlarge", 4000, 200_000, &[500]),
    ]);
    s.pools[0].consolidate_after = Some(Duration::from_secs(600));
    s.nodes[0].last_pod_event = Some(Timestamp::from_second(now().as_second() - 300).unwrap());
    let key = quiet_key(&s);
    assert_eq!(quiet_key(&s.clone()), key, "the same inputs, the same key");

    // Ten minutes on, a becomes consolidatable: no object changed, the answer may.
    let mut later = s.clone();
    later.now = Timestamp::from_second(now().as_second() + 600).unwrap();
    assert_ne!(quiet_key(&later), key);
    // A do-not-disrupt duration running out, likewise.
    let mut held = s.clone();
    held.nodes[1].pods[0].do_not_disrupt = true;
    assert_ne!(quiet_key(&held), key);
    // And anything the snapshot was built from.
    let mut changed = s.clone();
    changed.fingerprint = 1;
    assert_ne!(quiet_key(&changed), key);

    // A skipped consolidation plans nothing but the forceful and cheap methods.
    let p = crate::disruption::plan::plan_with(&later, &SavingsPerDisruption, false);
    assert!(p.graceful.is_none() && p.scored.nodes.is_empty());
    assert!(
        crate::disruption::plan::plan_with(&later, &SavingsPerDisruption, true)
            .graceful
            .is_some()
    );
}
