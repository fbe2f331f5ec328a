//! What the controller binary reads from its environment. The Helm chart's Deployment is the
//! contract: every variable it sets is read here (the chart tests render the chart and check
//! that the two agree), and [`Settings`] gets the controller settings.
//!
//! | variable | meaning |
//! | --- | --- |
//! | `KAKAOCLOUD_APPLICATION_CREDENTIAL_ID` / `_SECRET` | IAM access key (from the credentials Secret) |
//! | `KAKAOCLOUD_REGION` | region of every regional endpoint (default `kr-central-2`) |
//! | `KAKAOCLOUD_PROJECT_ID` | the project; the token's project must match it |
//! | `KAKAOCLOUD_ENDPOINTS` | `svc=url,...` endpoint overrides (`iam`, `bcs`, `vpc`, `network`, `image`, `volume`, `kubernetes-engine`) |
//! | `SIGKEY_SECRET_NAME` | Secret with `keyring.json` (overrides `KEYRING_SECRET`) |
//! | `SYSTEM_NAMESPACE` | namespace of that Secret, the plugin ConfigMaps and the Lease |
//! | `POD_NAME` | leader-election identity (default: the host name) |
//! | `DISABLE_LEADER_ELECTION`, `LEADER_ELECTION_NAME`, `LEADER_ELECTION_NAMESPACE` | upstream names |
//! | `LEADER_ELECTION_LEASE_DURATION` / `_RENEW_DEADLINE` / `_RETRY_PERIOD` | 15s / 10s / 2s |
//! | `HEALTH_PROBE_PORT` | `/healthz` and `/readyz` (8081) |
//! | `METRICS_PORT` | `/metrics` (8080, read by [`Settings`]) |
//! | `LOG_LEVEL`, `LOG_FORMAT` | `info` (or any tracing filter), `json` or `text` |

use std::collections::BTreeMap;
use std::time::Duration;

use kakaocloud::{self, Service};
use karpenter_kakaocloud::config::{ConfigError, Settings};

use crate::leader::LeaderConfig;

/// Every environment variable the binary reads (the chart tests compare the Deployment's env
/// with this list and with [`Settings`]' variables).
pub const VARIABLES: &[&str] = &[
    "KAKAOCLOUD_APPLICATION_CREDENTIAL_ID",
    "KAKAOCLOUD_APPLICATION_CREDENTIAL_SECRET",
    "KAKAOCLOUD_REGION",
    "KAKAOCLOUD_PROJECT_ID",
    "KAKAOCLOUD_ENDPOINTS",
    "SIGKEY_SECRET_NAME",
    "SYSTEM_NAMESPACE",
    "POD_NAME",
    "DISABLE_LEADER_ELECTION",
    "LEADER_ELECTION_NAME",
    "LEADER_ELECTION_NAMESPACE",
    "LEADER_ELECTION_LEASE_DURATION",
    "LEADER_ELECTION_RENEW_DEADLINE",
    "LEADER_ELECTION_RETRY_PERIOD",
    "HEALTH_PROBE_PORT",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "PLUGIN_CACHE_DIR",
    "PLUGIN_TRUST_SECRET",
    // Read by Settings::from_map.
    "CLUSTER_NAME",
    "CLUSTER_ENDPOINT",
    "CLUSTER_CA_BUNDLE",
    "KUBERNETES_VERSION",
    "BATCH_IDLE_DURATION",
    "BATCH_MAX_DURATION",
    "REGISTRATION_TTL",
    "LAUNCH_TIMEOUT",
    "UNAVAILABLE_OFFERING_TTL",
    "BOOTSTRAP_TOKEN_TTL",
    "CATALOG_REFRESH",
    "DISRUPTION_INTERVAL",
    "DISRUPTION_VALIDATION_DELAY",
    "GC_GRACE_PERIOD",
    "CNI",
    "KUBELET_MAX_PODS",
    "METRICS_PORT",
    "KEYRING_SECRET",
    "FEATURE_GATES",
];

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// Everything the binary needs before it talks to anything.
#[derive(Debug)]
pub struct Startup {
    pub settings: Settings,
    pub cloud: kakaocloud::Config,
    /// Debug-printing redacts the secret.
    pub credentials: kakaocloud::Credentials,
    pub project_id: Option<String>,
    /// `None` when `DISABLE_LEADER_ELECTION=true`.
    pub leader: Option<LeaderConfig>,
    pub health_port: u16,
    pub log_level: String,
    pub log_format: LogFormat,
    /// Where compiled plugins are cached; `None` compiles on every start.
    pub plugin_cache_dir: Option<std::path::PathBuf>,
    /// Secret (system namespace) of the plugin trust root; `None`: signatures not checked.
    pub plugin_trust_secret: Option<String>,
}

fn invalid(name: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        name,
        message: message.into(),
    }
}

/// Parses `svc=url,svc=url` (whitespace and empty items ignored).
pub fn parse_endpoints(raw: &str) -> Result<BTreeMap<Service, reqwest::Url>, ConfigError> {
    let mut out = BTreeMap::new();
    for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (svc, url) = item.split_once('=').ok_or_else(|| {
            invalid(
                "KAKAOCLOUD_ENDPOINTS",
                format!("{item:?} is not service=url"),
            )
        })?;
        let service = Service::parse(svc).ok_or_else(|| {
            invalid(
                "KAKAOCLOUD_ENDPOINTS",
                format!(
                    "unknown service {svc:?} (one of iam, bcs, vpc, network, image, volume, kubernetes-engine)"
                ),
            )
        })?;
        let url = reqwest::Url::parse(url.trim())
            .map_err(|e| invalid("KAKAOCLOUD_ENDPOINTS", format!("{svc}: {e}")))?;
        out.insert(service, url);
    }
    Ok(out)
}

fn parse_bool(name: &'static str, raw: &str) -> Result<bool, ConfigError> {
    match raw.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(invalid(name, format!("{raw:?} is not true or false"))),
    }
}

fn parse_port(name: &'static str, raw: &str) -> Result<u16, ConfigError> {
    raw.parse()
        .map_err(|_| invalid(name, format!("{raw:?} is not a port")))
}

/// Go-style duration of the leader-election knobs (`15s`, `500ms`, `1m`).
fn parse_duration(name: &'static str, raw: &str) -> Result<Duration, ConfigError> {
    let (digits, unit) = raw.split_at(raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| invalid(name, format!("{raw:?} is not a duration like 15s")))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| invalid(name, format!("{raw:?} is too long"))),
        _ => Err(invalid(name, format!("{raw:?} is not a duration like 15s"))),
    }
}

impl Startup {
    pub fn from_env() -> Result<Startup, ConfigError> {
        Startup::from_map(std::env::vars().collect())
    }

    pub fn from_map(mut vars: BTreeMap<String, String>) -> Result<Startup, ConfigError> {
        // The chart names the keyring Secret SIGKEY_SECRET_NAME; Settings reads KEYRING_SECRET.
        if let Some(name) = vars.get("SIGKEY_SECRET_NAME").map(|v| v.trim().to_owned())
            && !name.is_empty()
        {
            vars.insert("KEYRING_SECRET".into(), name);
        }
        let mut settings = Settings::from_map(&vars)?;
        if vars
            .get("KEYRING_SECRET")
            .is_none_or(|v| v.trim().is_empty())
        {
            // The install guide's name.
            settings.keyring_secret = "karpenter-sigkey".into();
        }
        let get = |k: &str| {
            vars.get(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let id = get("KAKAOCLOUD_APPLICATION_CREDENTIAL_ID")
            .ok_or(ConfigError::Missing("KAKAOCLOUD_APPLICATION_CREDENTIAL_ID"))?;
        let secret = get("KAKAOCLOUD_APPLICATION_CREDENTIAL_SECRET").ok_or(
            ConfigError::Missing("KAKAOCLOUD_APPLICATION_CREDENTIAL_SECRET"),
        )?;
        let credentials = kakaocloud::Credentials::new(id, secret)
            .map_err(|e| invalid("KAKAOCLOUD_APPLICATION_CREDENTIAL_ID", e.to_string()))?;
        let mut cloud = kakaocloud::Config::default();
        if let Some(region) = get("KAKAOCLOUD_REGION") {
            cloud.region = region;
        }
        if let Some(raw) = get("KAKAOCLOUD_ENDPOINTS") {
            cloud.endpoint_overrides = parse_endpoints(&raw)?;
        }
        let leader = match get("DISABLE_LEADER_ELECTION") {
            Some(raw) if parse_bool("DISABLE_LEADER_ELECTION", &raw)? => None,
            _ => {
                let mut lc = LeaderConfig {
                    name: get("LEADER_ELECTION_NAME")
                        .unwrap_or_else(|| "karpenter-leader-election".into()),
                    namespace: get("LEADER_ELECTION_NAMESPACE")
                        .unwrap_or_else(|| settings.system_namespace.clone()),
                    identity: get("POD_NAME")
                        .or_else(|| get("HOSTNAME"))
                        .unwrap_or_else(|| format!("karpenter-{}", std::process::id())),
                    ..LeaderConfig::default()
                };
                for (name, slot) in [
                    ("LEADER_ELECTION_LEASE_DURATION", &mut lc.lease_duration),
                    ("LEADER_ELECTION_RENEW_DEADLINE", &mut lc.renew_deadline),
                    ("LEADER_ELECTION_RETRY_PERIOD", &mut lc.retry_period),
                ] {
                    if let Some(raw) = get(name) {
                        *slot = parse_duration(name, &raw)?;
                    }
                }
                if lc.renew_deadline >= lc.lease_duration || lc.retry_period >= lc.renew_deadline {
                    return Err(invalid(
                        "LEADER_ELECTION_RENEW_DEADLINE",
                        "needs retry period < renew deadline < lease duration",
                    ));
                }
                Some(lc)
            }
        };
        let health_port = match get("HEALTH_PROBE_PORT") {
            Some(raw) => parse_port("HEALTH_PROBE_PORT", &raw)?,
            None => 8081,
        };
        let log_format = match get("LOG_FORMAT").as_deref() {
            None | Some("json") => LogFormat::Json,
            Some("text") | Some("console") => LogFormat::Text,
            Some(other) => {
                return Err(invalid(
                    "LOG_FORMAT",
                    format!("{other:?} is not json or text"),
                ));
            }
        };
        Ok(Startup {
            settings,
            cloud,
            credentials,
            project_id: get("KAKAOCLOUD_PROJECT_ID"),
            leader,
            health_port,
            log_level: get("LOG_LEVEL").unwrap_or_else(|| "info".into()),
            log_format,
            plugin_cache_dir: get("PLUGIN_CACHE_DIR").map(Into::into),
            plugin_trust_secret: get("PLUGIN_TRUST_SECRET").filter(|s| !s.trim().is_empty()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_durations_are_errors_not_panics() {
        assert!(parse_duration("X", "18446744073709551615m").is_err());
        assert!(parse_duration("X", "99999999999999999999999s").is_err());
        assert_eq!(parse_duration("X", "2m").unwrap(), Duration::from_secs(120));
    }

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut m: BTreeMap<String, String> = [
            ("CLUSTER_NAME", "demo-cluster"),
            ("KAKAOCLOUD_APPLICATION_CREDENTIAL_ID", "id-1"),
            ("KAKAOCLOUD_APPLICATION_CREDENTIAL_SECRET", "s3cr3t-value"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        for (k, v) in pairs {
            m.insert((*k).to_owned(), (*v).to_owned());
        }
        m
    }

    #[test]
    fn chart_env_is_read() {
        let s = Startup::from_map(vars(&[
            ("KAKAOCLOUD_REGION", "kr-central-2"),
            ("KAKAOCLOUD_PROJECT_ID", "proj-1"),
            (
                "KAKAOCLOUD_ENDPOINTS",
                "bcs=http://127.0.0.1:1/bcs, kubernetes-engine=http://127.0.0.1:1/kubernetes-engine",
            ),
            ("SIGKEY_SECRET_NAME", "karpenter-sigkey"),
            ("SYSTEM_NAMESPACE", "karpenter-kakaocloud"),
            ("POD_NAME", "karpenter-abc"),
            ("DISABLE_LEADER_ELECTION", "false"),
            ("LEADER_ELECTION_NAME", "karpenter-leader-election"),
            ("HEALTH_PROBE_PORT", "9081"),
            ("METRICS_PORT", "9080"),
            ("LOG_FORMAT", "text"),
            ("LOG_LEVEL", "debug"),
        ]))
        .unwrap();
        assert_eq!(s.settings.keyring_secret, "karpenter-sigkey");
        assert_eq!(s.settings.system_namespace, "karpenter-kakaocloud");
        assert_eq!(s.settings.metrics_port, 9080);
        assert_eq!(s.project_id.as_deref(), Some("proj-1"));
        assert_eq!(s.cloud.endpoint_overrides.len(), 2);
        assert_eq!(
            s.cloud.endpoint(Service::Bcs).unwrap().as_str(),
            "http://127.0.0.1:1/bcs"
        );
        let l = s.leader.unwrap();
        assert_eq!(
            (l.name.as_str(), l.namespace.as_str(), l.identity.as_str()),
            (
                "karpenter-leader-election",
                "karpenter-kakaocloud",
                "karpenter-abc"
            )
        );
        assert_eq!(s.health_port, 9081);
        assert_eq!(s.log_format, LogFormat::Text);
        assert_eq!(s.log_level, "debug");
    }

    #[test]
    fn defaults_and_errors() {
        let s = Startup::from_map(vars(&[])).unwrap();
        assert_eq!(s.settings.keyring_secret, "karpenter-sigkey");
        assert_eq!(s.health_port, 8081);
        assert_eq!(s.log_format, LogFormat::Json);
        assert_eq!(
            s.leader.as_ref().unwrap().lease_duration,
            Duration::from_secs(15)
        );
        assert!(
            Startup::from_map(vars(&[("DISABLE_LEADER_ELECTION", "true")]))
                .unwrap()
                .leader
                .is_none()
        );
        let mut no_secret = vars(&[]);
        no_secret.remove("KAKAOCLOUD_APPLICATION_CREDENTIAL_SECRET");
        assert_eq!(
            Startup::from_map(no_secret).unwrap_err(),
            ConfigError::Missing("KAKAOCLOUD_APPLICATION_CREDENTIAL_SECRET")
        );
        for bad in [
            ("KAKAOCLOUD_ENDPOINTS", "compute=http://x"),
            ("KAKAOCLOUD_ENDPOINTS", "bcs"),
            ("LOG_FORMAT", "xml"),
            ("HEALTH_PROBE_PORT", "http"),
            ("LEADER_ELECTION_RENEW_DEADLINE", "20s"),
        ] {
            assert!(Startup::from_map(vars(&[bad])).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn debug_output_never_shows_the_secret() {
        let s = Startup::from_map(vars(&[])).unwrap();
        let printed = format!("{s:?}");
        assert!(!printed.contains("s3cr3t-value"), "{printed}");
    }
}
