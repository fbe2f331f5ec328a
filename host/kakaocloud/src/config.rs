//! Where each KakaoCloud service lives, how hard to retry, and the credentials.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use reqwest::Url;

use super::error::Error;

/// The region every endpoint defaults to (the only one the install guide names).
pub const DEFAULT_REGION: &str = "kr-central-2";

/// A KakaoCloud OpenAPI service with its own host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Service {
    Iam,
    /// Virtual Machine: instances, flavors, key pairs.
    Bcs,
    /// Subnets.
    Vpc,
    /// Security groups.
    Network,
    Image,
    Volume,
    KubernetesEngine,
}

impl Service {
    pub const ALL: [Service; 7] = [
        Service::Iam,
        Service::Bcs,
        Service::Vpc,
        Service::Network,
        Service::Image,
        Service::Volume,
        Service::KubernetesEngine,
    ];

    /// Lower-case name, used in logs and in endpoint-override keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Iam => "iam",
            Service::Bcs => "bcs",
            Service::Vpc => "vpc",
            Service::Network => "network",
            Service::Image => "image",
            Service::Volume => "volume",
            Service::KubernetesEngine => "kubernetes-engine",
        }
    }

    /// Parses an override key such as `bcs` or `kubernetes-engine` (`_` accepted too).
    pub fn parse(name: &str) -> Option<Service> {
        let name = name.trim().to_ascii_lowercase().replace('_', "-");
        Service::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// `https://<host>` of the public endpoint in `region`.
    pub fn default_endpoint(self, region: &str) -> String {
        match self {
            // IAM is global.
            Service::Iam => "https://iam.kakaocloud.com".to_string(),
            other => format!("https://{}.{region}.kakaocloud.com", other.as_str()),
        }
    }
}

/// Retry and timeout policy for every call.
///
/// Throttling (429) is retried for as long as `throttle_budget` allows, not a number of times:
/// the official Terraform provider keeps retrying 429 (every second, bounded only by the
/// operation's timeout), so a burst of throttling is normal and must not fail a launch. Other
/// retryable failures (5xx, transport) are bounded by `max_attempts`.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts in total, including the first, for 5xx and transport failures.
    pub max_attempts: u32,
    /// How long throttled calls keep being retried, counted from the first attempt. A
    /// `Retry-After` that would end past it ends the call at once (with that hint).
    pub throttle_budget: Duration,
    /// First backoff; doubles each attempt, with full jitter.
    pub base_delay: Duration,
    /// Upper bound of one backoff (a `Retry-After` is bounded by the throttle budget instead).
    pub max_delay: Duration,
    /// Per-request timeout (connect + response).
    pub request_timeout: Duration,
}

impl RetryPolicy {
    /// How long to wait before attempt `attempt + 1` of a call first sent at `started`, or
    /// `None` to give up with `err`.
    pub fn next_delay(&self, attempt: u32, started: Instant, err: &Error) -> Option<Duration> {
        if !err.is_retryable() {
            return None;
        }
        let delay = crate::transport::backoff(self, attempt, err);
        match err {
            Error::Throttled { retry_after } => {
                let wait = retry_after.unwrap_or(delay);
                (started.elapsed().saturating_add(wait) <= self.throttle_budget).then_some(delay)
            }
            _ => (attempt < self.max_attempts).then_some(delay),
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            throttle_budget: Duration::from_secs(120),
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(20),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Client configuration (everything but the credentials).
#[derive(Debug, Clone)]
pub struct Config {
    pub region: String,
    /// Per-service endpoint that replaces the regional default.
    pub endpoint_overrides: BTreeMap<Service, Url>,
    pub retry: RetryPolicy,
    /// Refresh a token this long before it expires (capped to a quarter of
    /// its lifetime so short-lived tokens are not refreshed on every call).
    pub token_refresh_margin: Duration,
    /// Page size of list calls.
    pub page_limit: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            region: DEFAULT_REGION.to_string(),
            endpoint_overrides: BTreeMap::new(),
            retry: RetryPolicy::default(),
            token_refresh_margin: Duration::from_secs(300),
            page_limit: 100,
        }
    }
}

impl Config {
    /// Sends every service to `url` (e.g. the simulator's per-service URLs).
    pub fn with_endpoint(mut self, service: Service, url: Url) -> Self {
        self.endpoint_overrides.insert(service, url);
        self
    }

    /// Resolved base URL of `service`.
    pub fn endpoint(&self, service: Service) -> Result<Url, Error> {
        if let Some(url) = self.endpoint_overrides.get(&service) {
            return Ok(url.clone());
        }
        let raw = service.default_endpoint(&self.region);
        Url::parse(&raw).map_err(|e| Error::Config {
            message: format!(
                "endpoint of {} for region {:?}: {e}",
                service.as_str(),
                self.region
            ),
        })
    }
}

/// The IAM application credential (the install guide's "IAM access key").
///
/// `Debug` and `Display` redact the secret; it is only ever written into the
/// token request body.
#[derive(Clone)]
pub struct Credentials {
    id: String,
    secret: String,
}

impl Credentials {
    pub fn new(id: impl Into<String>, secret: impl Into<String>) -> Result<Self, Error> {
        let id = id.into();
        let secret = secret.into();
        if id.trim().is_empty() {
            return Err(Error::Config {
                message: "applicationCredentialId is empty".into(),
            });
        }
        if secret.trim().is_empty() {
            return Err(Error::Config {
                message: "applicationCredentialSecret is empty".into(),
            });
        }
        Ok(Credentials { id, secret })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_endpoints_follow_the_install_guide() {
        let c = Config::default();
        let got: Vec<String> = Service::ALL
            .iter()
            .map(|s| c.endpoint(*s).unwrap().to_string())
            .collect();
        assert_eq!(
            got,
            [
                "https://iam.kakaocloud.com/",
                "https://bcs.kr-central-2.kakaocloud.com/",
                "https://vpc.kr-central-2.kakaocloud.com/",
                "https://network.kr-central-2.kakaocloud.com/",
                "https://image.kr-central-2.kakaocloud.com/",
                "https://volume.kr-central-2.kakaocloud.com/",
                "https://kubernetes-engine.kr-central-2.kakaocloud.com/",
            ]
        );
    }

    #[test]
    fn override_keys_parse() {
        assert_eq!(
            Service::parse("kubernetes_engine"),
            Some(Service::KubernetesEngine)
        );
        assert_eq!(Service::parse("BCS"), Some(Service::Bcs));
        assert_eq!(Service::parse("ec2"), None);
    }

    #[test]
    fn credentials_debug_redacts_secret() {
        let c = Credentials::new("my-id", "s3cr3t-value").unwrap();
        let shown = format!("{c:?}");
        assert!(shown.contains("my-id"));
        assert!(!shown.contains("s3cr3t-value"));
    }
}
