//! Upstream Karpenter's published Grafana dashboards ("Karpenter Capacity v1" and "Karpenter
//! Performance v1", aws/karpenter-provider-aws `website/.../getting-started-with-karpenter/`)
//! work against this controller: after the install guide's demo scales out and is cleaned up,
//! every metric and label their queries use is exported with a value. The dashboards' queries
//! are listed here as data (metric, the labels the panels select, group or join on), not copied.

use std::collections::{BTreeMap, BTreeSet};

use crate::support::{Env, Options, eventually};

/// The labels the Node Summary selects the request gauges by and joins them to allocatable on.
const NODE_SUMMARY_JOIN: &[&str] = &[
    "nodepool",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "resource_type",
    "node_name",
];

/// (metric, labels the dashboards read from it).
const DASHBOARD_SERIES: &[(&str, &[&str])] = &[
    // Capacity: template variables, Nodepool Summary, Node Summary, Spot percentage.
    // The Node Summary's columns and the template variables.
    (
        "karpenter_nodes_allocatable",
        &[
            "nodepool",
            "zone",
            "arch",
            "capacity_type",
            "instance_type",
            "resource_type",
            "node_name",
            "os",
            "instance_cpu",
        ],
    ),
    ("karpenter_nodes_total_pod_requests", NODE_SUMMARY_JOIN),
    ("karpenter_nodes_total_daemon_requests", NODE_SUMMARY_JOIN),
    ("karpenter_nodes_created_total", &["nodepool"]),
    ("karpenter_nodes_terminated_total", &["nodepool"]),
    ("karpenter_nodeclaims_disrupted_total", &["nodepool"]),
    ("karpenter_voluntary_disruption_eligible_nodes", &["reason"]),
    (
        "karpenter_voluntary_disruption_decisions_total",
        &["consolidation_type", "decision"],
    ),
    (
        "karpenter_pods_state",
        &[
            "arch",
            "capacity_type",
            "instance_type",
            "namespace",
            "node",
            "nodepool",
            "zone",
            "phase",
        ],
    ),
    ("karpenter_nodepools_usage", &["nodepool", "resource_type"]),
    ("karpenter_nodepools_limit", &["nodepool", "resource_type"]),
    // Performance.
    (
        "karpenter_nodes_termination_duration_seconds",
        &["quantile"],
    ),
    ("karpenter_pods_startup_duration_seconds", &["quantile"]),
    (
        "controller_runtime_reconcile_time_seconds_bucket",
        &["controller", "le"],
    ),
    ("controller_runtime_reconcile_total", &["controller"]),
];

/// The latency panels' quantiles, by their exact label values.
const QUANTILES: [&str; 5] = ["0", "0.5", "0.9", "0.99", "1"];

/// One sample of the text exposition.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the OpenMetrics text this controller serves (its label values hold no `,` or `"`
/// except escaped ones, which these metrics do not produce).
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|kv| !kv.is_empty())
                .filter_map(|kv| {
                    let (k, v) = kv.split_once("=\"")?;
                    Some((k.to_string(), v.trim_end_matches('"').to_string()))
                })
                .collect();
            Some(Sample {
                name: name.to_string(),
                labels,
                value: value.parse().ok()?,
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_dashboards_find_every_metric_and_label_they_query() {
    let env = Env::start(Options::default()).await;
    env.apply_guide().await;
    let ns = env.run_guide_demo().await;

    // While the demo runs: the node gauges of every node carry one label set, so the Node
    // Summary's one-to-one `+` and `/` match.
    let running = eventually("pod startups observed and node gauges present", || async {
        let all = samples(&env.metrics_text());
        let started = all
            .iter()
            .any(|s| s.name == "karpenter_pods_startup_duration_seconds_count" && s.value >= 3.0);
        let nodes = all
            .iter()
            .any(|s| s.name == "karpenter_nodes_allocatable" && s.labels["managed"] == "true");
        (started && nodes).then_some(all)
    })
    .await;
    let label_sets = |name: &str| -> BTreeSet<BTreeMap<String, String>> {
        running
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.labels.clone())
            .collect()
    };
    let allocatable = label_sets("karpenter_nodes_allocatable");
    for other in [
        "karpenter_nodes_total_pod_requests",
        "karpenter_nodes_total_daemon_requests",
    ] {
        for resource in ["cpu", "memory", "pods"] {
            let of = |sets: &BTreeSet<BTreeMap<String, String>>| -> BTreeSet<_> {
                sets.iter()
                    .filter(|l| l["resource_type"] == resource)
                    .cloned()
                    .collect()
            };
            assert_eq!(
                of(&allocatable),
                of(&label_sets(other)),
                "{other} and karpenter_nodes_allocatable match one-to-one for {resource}"
            );
        }
    }
    let requests: f64 = running
        .iter()
        .filter(|s| {
            s.name == "karpenter_nodes_total_pod_requests"
                && s.labels["resource_type"] == "pods"
                && s.labels["managed"] == "true"
        })
        .map(|s| s.value)
        .sum();
    assert!(
        requests >= 3.0,
        "the demo's 3 pods are counted on the managed nodes ({requests})"
    );
    let demo_pods: Vec<&Sample> = running
        .iter()
        .filter(|s| s.name == "karpenter_pods_state" && s.labels["namespace"] == ns)
        .collect();
    assert_eq!(demo_pods.len(), 3, "{demo_pods:?}");
    for p in &demo_pods {
        assert_eq!(p.labels["nodepool"], "karpenter-default", "{p:?}");
        assert_eq!(p.labels["phase"], "Running", "{p:?}");
        assert!(!p.labels["instance_type"].is_empty(), "{p:?}");
    }

    // Then the guide's cleanup, with consolidateAfter shortened: nodes are disrupted and
    // terminated, which the remaining panels count.
    env.clean_up_guide_demo(&ns).await;
    // Node and pod gauges were read while the demo ran; the counters and summaries after.
    let all = eventually("every dashboard series present", || async {
        let mut all = samples(&env.metrics_text());
        all.extend(running.iter().cloned());
        let missing: Vec<String> = missing(&all);
        // Printed with the test's output if the wait times out.
        if !missing.is_empty() {
            eprintln!("dashboard series still missing: {missing:?}");
        }
        missing.is_empty().then_some(all)
    })
    .await;
    // The latency panels read each quantile by its exact value.
    for name in [
        "karpenter_nodes_termination_duration_seconds",
        "karpenter_pods_startup_duration_seconds",
    ] {
        let quantiles: BTreeSet<&str> = all
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.labels["quantile"].as_str())
            .collect();
        assert_eq!(quantiles, QUANTILES.into_iter().collect(), "{name}");
    }
    let value = |name: &str, label: (&str, &str)| -> f64 {
        all.iter()
            .filter(|s| {
                s.name == name && s.labels.get(label.0).map(String::as_str) == Some(label.1)
            })
            .map(|s| s.value)
            .sum()
    };
    assert!(
        value(
            "karpenter_nodes_created_total",
            ("nodepool", "karpenter-default")
        ) >= 1.0
    );
    assert!(
        value(
            "karpenter_nodes_terminated_total",
            ("nodepool", "karpenter-default")
        ) >= 1.0
    );
    assert!(
        value(
            "karpenter_nodeclaims_disrupted_total",
            ("nodepool", "karpenter-default")
        ) >= 1.0
    );
    // The guide's NodePool limits cpu to 40.
    assert!(
        running.iter().any(|s| s.name == "karpenter_nodepools_limit"
            && s.labels["resource_type"] == "cpu"
            && s.labels["nodepool"] == "karpenter-default"
            && s.value == 40.0),
        "karpenter_nodepools_limit{{resource_type=\"cpu\"}} is the guide's 40"
    );
    assert!(
        value(
            "controller_runtime_reconcile_total",
            ("controller", "nodeclaim.lifecycle")
        ) >= 1.0
    );
}

/// `metric: label` for every dashboard series absent, or present without a label it reads.
fn missing(all: &[Sample]) -> Vec<String> {
    let mut out = Vec::new();
    for (metric, labels) in DASHBOARD_SERIES {
        let series: Vec<&Sample> = all.iter().filter(|s| s.name == *metric).collect();
        if series.is_empty() {
            out.push(format!("{metric}: no series"));
            continue;
        }
        for label in *labels {
            if !series.iter().any(|s| s.labels.contains_key(*label)) {
                out.push(format!("{metric}: {label}"));
            }
        }
    }
    out
}
