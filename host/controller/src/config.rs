//! Controller settings, read from the environment (the Helm chart maps `settings.*` onto these
//! variables, upstream style): cluster name, batching windows, liveness timeouts, endpoints.

use std::collections::BTreeMap;
use std::time::Duration;

/// Why the settings could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("{name}: {message}")]
    Invalid { name: &'static str, message: String },
}

/// Everything the controllers need to know besides the clients.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `CLUSTER_NAME`: the KakaoCloud Kubernetes Engine cluster; part of every instance name and tag.
    pub cluster_name: String,
    /// `CLUSTER_ENDPOINT`: API server URL nodes join (taken from the cluster's kubeconfig when empty).
    pub cluster_endpoint: Option<String>,
    /// `CLUSTER_CA_BUNDLE`: PEM of the cluster CA (from the kube-root-ca.crt ConfigMap when empty).
    pub cluster_ca_bundle: Option<String>,
    /// `KUBERNETES_VERSION` of the nodes, when the KCNodeClass does not say.
    pub kubernetes_version: Option<String>,
    /// `BATCH_IDLE_DURATION` (1s): the batch closes after this long without a new pod.
    pub batch_idle: Duration,
    /// `BATCH_MAX_DURATION` (10s): a batch never stays open longer.
    pub batch_max: Duration,
    /// `REGISTRATION_TTL` (15m): a launched NodeClaim whose Node has not registered by then is deleted.
    pub registration_ttl: Duration,
    /// `LAUNCH_TIMEOUT` (5m): a NodeClaim that could not launch by then is deleted.
    pub launch_timeout: Duration,
    /// `UNAVAILABLE_OFFERING_TTL` (3m): how long an offering that reported no capacity is skipped.
    pub unavailable_offering_ttl: Duration,
    /// `BOOTSTRAP_TOKEN_TTL` (1h): lifetime of the join token Secrets.
    pub bootstrap_token_ttl: Duration,
    /// `CATALOG_REFRESH` (5m): how often flavors are listed again.
    pub catalog_refresh: Duration,
    /// Time between disruption passes.
    pub disruption_interval: Duration,
    /// Wait between planning a disruption and re-validating it (pod churn shows meanwhile).
    pub disruption_validation_delay: Duration,
    /// Grace period before a leaked instance (tag verifies, no NodeClaim) is deleted.
    pub gc_grace: Duration,
    /// `CNI` (`cilium`, `calico` or `none`): handed to the userdata renderer.
    pub cni: String,
    /// `KUBELET_MAX_PODS` (110).
    pub max_pods: u64,
    /// `METRICS_PORT` (8080).
    pub metrics_port: u16,
    /// `KEYRING_SECRET` (`karpenter-kakaocloud-keyring`) and `SYSTEM_NAMESPACE` (`kube-system`... or the pod's).
    pub keyring_secret: String,
    pub system_namespace: String,
    /// `FEATURE_GATES` `NodeRepair=true` (off by default, as upstream): replace nodes whose
    /// `Ready` condition stayed False or Unknown for [`Settings::node_repair_toleration`].
    pub node_repair: bool,
    /// How long a node may be unhealthy before it is repaired (upstream's providers use 10 min).
    pub node_repair_toleration: Duration,
}

/// Upstream's feature gates: every name is accepted (values files are copied between providers),
/// `NodeRepair` is the only one that changes anything here.
pub const FEATURE_GATES: [&str; 6] = [
    "NodeRepair",
    "ReservedCapacity",
    "SpotToSpotConsolidation",
    "NodeOverlay",
    "StaticCapacity",
    "CapacityBuffer",
];

/// Parses `FEATURE_GATES` (`Name=true,Other=false`) into the gates set to true.
fn feature_gates(raw: &str) -> Result<Vec<&str>, ConfigError> {
    let mut on = Vec::new();
    for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let invalid = |message: String| ConfigError::Invalid {
            name: "FEATURE_GATES",
            message,
        };
        let (name, value) = part
            .split_once('=')
            .ok_or_else(|| invalid(format!("{part:?} is not Name=true or Name=false")))?;
        let name = FEATURE_GATES
            .iter()
            .find(|g| **g == name.trim())
            .ok_or_else(|| invalid(format!("unknown feature gate {:?}", name.trim())))?;
        match value.trim() {
            "true" => on.push(*name),
            "false" => {}
            other => return Err(invalid(format!("{name}={other:?} is not true or false"))),
        }
    }
    Ok(on)
}

impl Settings {
    /// Settings for tests and examples: defaults for everything but the cluster name.
    pub fn for_cluster(cluster_name: impl Into<String>) -> Settings {
        Settings {
            cluster_name: cluster_name.into(),
            cluster_endpoint: None,
            cluster_ca_bundle: None,
            kubernetes_version: None,
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            registration_ttl: Duration::from_secs(15 * 60),
            launch_timeout: Duration::from_secs(5 * 60),
            unavailable_offering_ttl: Duration::from_secs(3 * 60),
            bootstrap_token_ttl: Duration::from_secs(3600),
            catalog_refresh: Duration::from_secs(5 * 60),
            disruption_interval: Duration::from_secs(10),
            disruption_validation_delay: Duration::from_secs(15),
            gc_grace: Duration::from_secs(5 * 60),
            cni: "cilium".into(),
            max_pods: 110,
            metrics_port: 8080,
            keyring_secret: "karpenter-kakaocloud-keyring".into(),
            system_namespace: "kube-system".into(),
            node_repair: false,
            node_repair_toleration: Duration::from_secs(10 * 60),
        }
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Settings, ConfigError> {
        Settings::from_map(&std::env::vars().collect())
    }

    /// Reads settings from `vars` (the environment, in tests a map).
    pub fn from_map(vars: &BTreeMap<String, String>) -> Result<Settings, ConfigError> {
        let get = |k: &str| vars.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let cluster = get("CLUSTER_NAME").ok_or(ConfigError::Missing("CLUSTER_NAME"))?;
        let mut s = Settings::for_cluster(cluster);
        s.cluster_endpoint = get("CLUSTER_ENDPOINT").map(str::to_owned);
        s.cluster_ca_bundle = get("CLUSTER_CA_BUNDLE").map(str::to_owned);
        s.kubernetes_version = get("KUBERNETES_VERSION").map(str::to_owned);
        let durations: [(&'static str, &mut Duration); 10] = [
            ("BATCH_IDLE_DURATION", &mut s.batch_idle),
            ("BATCH_MAX_DURATION", &mut s.batch_max),
            ("REGISTRATION_TTL", &mut s.registration_ttl),
            ("LAUNCH_TIMEOUT", &mut s.launch_timeout),
            ("UNAVAILABLE_OFFERING_TTL", &mut s.unavailable_offering_ttl),
            ("BOOTSTRAP_TOKEN_TTL", &mut s.bootstrap_token_ttl),
            ("CATALOG_REFRESH", &mut s.catalog_refresh),
            ("DISRUPTION_INTERVAL", &mut s.disruption_interval),
            (
                "DISRUPTION_VALIDATION_DELAY",
                &mut s.disruption_validation_delay,
            ),
            ("GC_GRACE_PERIOD", &mut s.gc_grace),
        ];
        for (name, slot) in durations {
            if let Some(raw) = get(name) {
                *slot = parse_duration(name, raw)?;
            }
        }
        if s.batch_idle > s.batch_max {
            return Err(ConfigError::Invalid {
                name: "BATCH_IDLE_DURATION",
                message: "must not exceed BATCH_MAX_DURATION".into(),
            });
        }
        if let Some(cni) = get("CNI") {
            match cni {
                "cilium" | "calico" | "none" => s.cni = cni.to_owned(),
                other => {
                    return Err(ConfigError::Invalid {
                        name: "CNI",
                        message: format!("{other:?} is not one of cilium, calico, none"),
                    });
                }
            }
        }
        if let Some(raw) = get("KUBELET_MAX_PODS") {
            s.max_pods = raw.parse().map_err(|_| ConfigError::Invalid {
                name: "KUBELET_MAX_PODS",
                message: format!("{raw:?} is not a number"),
            })?;
        }
        if let Some(raw) = get("METRICS_PORT") {
            s.metrics_port = raw.parse().map_err(|_| ConfigError::Invalid {
                name: "METRICS_PORT",
                message: format!("{raw:?} is not a port"),
            })?;
        }
        if let Some(v) = get("KEYRING_SECRET") {
            s.keyring_secret = v.to_owned();
        }
        if let Some(v) = get("SYSTEM_NAMESPACE") {
            s.system_namespace = v.to_owned();
        }
        if let Some(raw) = get("FEATURE_GATES") {
            s.node_repair = feature_gates(raw)?.contains(&"NodeRepair");
        }
        Ok(s)
    }
}

fn parse_duration(name: &'static str, raw: &str) -> Result<Duration, ConfigError> {
    let invalid = || ConfigError::Invalid {
        name,
        message: format!("{raw:?} is not a duration like 500ms, 10s, 15m or 1h30m"),
    };
    let mut total = Duration::ZERO;
    let mut rest = raw;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(invalid)?;
        if digits == 0 {
            return Err(invalid());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(1), 2)
        } else if rest.starts_with('s') {
            (Duration::from_secs(1), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(60), 1)
        } else if rest.starts_with('h') {
            (Duration::from_secs(3600), 1)
        } else {
            return Err(invalid());
        };
        rest = &rest[len..];
        let part = unit
            .checked_mul(u32::try_from(n).map_err(|_| invalid())?)
            .ok_or_else(invalid)?;
        total = total.checked_add(part).ok_or_else(invalid)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_follow_upstream() {
        let s = Settings::from_map(&vars(&[("CLUSTER_NAME", "demo")])).unwrap();
        assert_eq!(s.batch_idle, Duration::from_secs(1));
        assert_eq!(s.batch_max, Duration::from_secs(10));
        assert_eq!(s.registration_ttl, Duration::from_secs(900));
        assert_eq!(s.cluster_name, "demo");
    }

    #[test]
    fn overrides_and_errors() {
        let s = Settings::from_map(&vars(&[
            ("CLUSTER_NAME", "demo"),
            ("BATCH_IDLE_DURATION", "200ms"),
            ("BATCH_MAX_DURATION", "2s"),
            ("REGISTRATION_TTL", "30s"),
            ("CNI", "calico"),
        ]))
        .unwrap();
        assert_eq!(s.batch_idle, Duration::from_millis(200));
        assert_eq!(s.registration_ttl, Duration::from_secs(30));
        assert_eq!(s.cni, "calico");
        assert_eq!(
            Settings::from_map(&vars(&[])),
            Err(ConfigError::Missing("CLUSTER_NAME"))
        );
        assert!(Settings::from_map(&vars(&[("CLUSTER_NAME", "d"), ("CNI", "flannel")])).is_err());
        assert!(
            Settings::from_map(&vars(&[
                ("CLUSTER_NAME", "d"),
                ("BATCH_IDLE_DURATION", "20s")
            ]))
            .is_err()
        );
        assert!(
            Settings::from_map(&vars(&[
                ("CLUSTER_NAME", "d"),
                ("REGISTRATION_TTL", "soon")
            ]))
            .is_err()
        );
    }

    #[test]
    fn node_repair_is_off_unless_its_gate_says_true() {
        let with = |gates: &str| {
            Settings::from_map(&vars(&[("CLUSTER_NAME", "d"), ("FEATURE_GATES", gates)]))
        };
        assert!(
            !Settings::from_map(&vars(&[("CLUSTER_NAME", "d")]))
                .unwrap()
                .node_repair
        );
        assert!(
            !with("NodeRepair=false,SpotToSpotConsolidation=true")
                .unwrap()
                .node_repair
        );
        assert!(
            with("StaticCapacity=false, NodeRepair=true")
                .unwrap()
                .node_repair
        );
        assert!(
            with("NodeRepiar=true").is_err(),
            "a misspelt gate is refused"
        );
        assert!(with("NodeRepair=yes").is_err());
    }
}
