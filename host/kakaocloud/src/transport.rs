//! One authenticated HTTP exchange with a KakaoCloud service, the mapping of
//! error responses to [`Error`], and the retry loop for idempotent calls.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;

use super::api::{self, ErrorBody, IamError, IamErrorBody, Page, ValidationErrorBody};
use super::auth::{self, CachedToken, TokenCache};
use super::config::{Config, Credentials, RetryPolicy, Service};
use super::error::Error;
use super::fence::Fence;

/// Shared state behind every [`super::Client`] handle.
pub(crate) struct Transport {
    pub config: Config,
    endpoints: BTreeMap<Service, Url>,
    http: reqwest::Client,
    credentials: Credentials,
    tokens: Arc<TokenCache>,
    /// Checked before every attempt when set (the leader's controllers).
    fence: Option<Fence>,
}

/// A request to send: which service, what, and how to describe its target in
/// a not-found error.
#[derive(Clone)]
pub(crate) struct Call {
    pub service: Service,
    pub method: Method,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub body: Option<Arc<serde_json::Value>>,
    pub what: String,
}

impl Call {
    pub fn get(service: Service, path: impl Into<String>, what: impl Into<String>) -> Self {
        Call {
            service,
            method: Method::GET,
            path: path.into(),
            query: Vec::new(),
            body: None,
            what: what.into(),
        }
    }

    pub fn with_method(mut self, method: Method) -> Self {
        self.method = method;
        self
    }

    pub fn with_query(mut self, key: &str, value: impl Into<String>) -> Self {
        self.query.push((key.to_string(), value.into()));
        self
    }

    pub fn with_body<T: serde::Serialize>(mut self, body: &T) -> Result<Self, Error> {
        let value = serde_json::to_value(body).map_err(|e| Error::InvalidInput {
            message: format!("encode request: {e}"),
        })?;
        self.body = Some(Arc::new(value));
        Ok(self)
    }
}

/// A successful response.
pub(crate) struct Reply {
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|e| Error::Decode {
            message: format!("response body: {e}"),
        })
    }
}

impl Transport {
    pub fn new(config: Config, credentials: Credentials) -> Result<Self, Error> {
        let mut endpoints = BTreeMap::new();
        for service in Service::ALL {
            endpoints.insert(service, config.endpoint(service)?);
        }
        super::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(config.retry.request_timeout)
            .connect_timeout(config.retry.request_timeout.min(Duration::from_secs(10)))
            .user_agent(concat!(
                "karpenter-provider-kakaocloud/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(|e| Error::Config {
                message: format!("HTTP client: {e}"),
            })?;
        Ok(Transport {
            config,
            endpoints,
            http,
            credentials,
            tokens: Arc::default(),
            fence: None,
        })
    }

    /// The same transport (connections and token cache shared) whose every call first checks
    /// `fence`.
    pub fn fenced(&self, fence: Fence) -> Transport {
        Transport {
            config: self.config.clone(),
            endpoints: self.endpoints.clone(),
            http: self.http.clone(),
            credentials: self.credentials.clone(),
            tokens: self.tokens.clone(),
            fence: Some(fence),
        }
    }

    pub fn fence(&self) -> Option<&Fence> {
        self.fence.as_ref()
    }

    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.config.retry
    }

    /// Project the cached token is scoped to.
    pub async fn project_id(&self) -> Option<String> {
        self.tokens.project_id().await
    }

    fn url(&self, service: Service, path: &str) -> Result<Url, Error> {
        let base = self.endpoints.get(&service).ok_or_else(|| Error::Config {
            message: format!("no endpoint for {}", service.as_str()),
        })?;
        // Keep any path prefix of the endpoint (overrides may carry one).
        let joined = format!("{}{}", base.as_str().trim_end_matches('/'), path);
        Url::parse(&joined).map_err(|e| Error::Config {
            message: format!("URL {joined:?}: {e}"),
        })
    }

    /// A valid token, issuing one if needed (single-flight).
    pub async fn token(&self) -> Result<String, Error> {
        self.tokens.get(|| self.issue_token()).await
    }

    async fn issue_token(&self) -> Result<CachedToken, Error> {
        let url = self.url(Service::Iam, api::paths::IAM_TOKENS)?;
        let body = auth::token_request(self.credentials.id(), self.credentials.secret());
        let policy = self.retry_policy().clone();
        let first = Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            let result = async {
                let response = self
                    .http
                    .post(url.clone())
                    .json(&body)
                    .send()
                    .await
                    .map_err(transport_error)?;
                let status = response.status();
                let headers = response.headers().clone();
                let bytes = response.bytes().await.map_err(transport_error)?;
                if !status.is_success() {
                    return Err(classify(status, &headers, &bytes, "token"));
                }
                let value = auth::subject_token(&headers)?;
                let parsed: api::TokenResponse =
                    serde_json::from_slice(&bytes).map_err(|e| Error::Decode {
                        message: format!("token body: {e}"),
                    })?;
                let lifetime = auth::token_lifetime(&parsed)?;
                Ok(CachedToken {
                    value,
                    refresh_at: auth::refresh_at(
                        started,
                        lifetime,
                        self.config.token_refresh_margin,
                    ),
                    project_id: parsed.token.project.and_then(|p| p.id),
                })
            }
            .await;
            match result {
                Ok(token) => {
                    tracing::info!(attempt, "issued KakaoCloud API token");
                    return Ok(token);
                }
                Err(err) if let Some(delay) = policy.next_delay(attempt, first, &err) => {
                    tracing::warn!(attempt, error = %err, ?delay, "token request failed, retrying");
                    tokio::time::sleep(delay).await;
                }
                Err(err) => {
                    tracing::error!(attempt, error = %err, "token request failed");
                    return Err(err);
                }
            }
        }
    }

    /// Sends `call` once with a token; a 401 is answered by refreshing the
    /// token (once) and resending.
    pub async fn attempt(&self, call: &Call) -> Result<Reply, Error> {
        if let Some(fence) = &self.fence {
            fence.check()?;
        }
        let token = self.token().await?;
        match self.send_with(call, &token).await {
            Err(Error::Unauthorized { .. }) => {
                tracing::info!(
                    service = call.service.as_str(),
                    "token rejected, refreshing"
                );
                self.tokens.reject(&token).await;
                let token = self.token().await?;
                self.send_with(call, &token).await
            }
            other => other,
        }
    }

    async fn send_with(&self, call: &Call, token: &str) -> Result<Reply, Error> {
        let url = self.url(call.service, &call.path)?;
        let mut request = self
            .http
            .request(call.method.clone(), url)
            .header(api::AUTH_TOKEN_HEADER, token)
            .query(&call.query);
        if let Some(body) = &call.body {
            request = request.json(body.as_ref());
        }
        let response = request.send().await.map_err(transport_error)?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(transport_error)?;
        tracing::debug!(
            service = call.service.as_str(),
            method = %call.method,
            path = %call.path,
            status = status.as_u16(),
            "KakaoCloud call"
        );
        if status.is_success() {
            Ok(Reply {
                body: body.to_vec(),
            })
        } else {
            Err(classify(status, &headers, &body, &call.what))
        }
    }

    /// Sends an idempotent call, retrying throttling (within the policy's time budget), 5xx
    /// and transport failures (up to its attempt count) with backoff.
    pub async fn idempotent(&self, call: &Call) -> Result<Reply, Error> {
        let policy = self.retry_policy().clone();
        let first = Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.attempt(call).await {
                Err(err) if let Some(delay) = policy.next_delay(attempt, first, &err) => {
                    tracing::warn!(
                        service = call.service.as_str(),
                        method = %call.method,
                        path = %call.path,
                        attempt,
                        error = %err,
                        ?delay,
                        "KakaoCloud call failed, retrying"
                    );
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }

    /// Fetches every page of a list call.
    pub async fn list_all<P>(&self, call: Call) -> Result<Vec<P::Item>, Error>
    where
        P: Page + DeserializeOwned,
    {
        let limit = self.config.page_limit.max(1);
        let mut items = Vec::new();
        let mut offset: u32 = 0;
        // A server that ignores offsets must not make us loop forever.
        for _ in 0..10_000 {
            let page_call = call
                .clone()
                .with_query("limit", limit.to_string())
                .with_query("offset", offset.to_string());
            let reply = self.idempotent(&page_call).await?;
            let (page, pagination) = reply.json::<P>()?.into_parts();
            let got = u32::try_from(page.len()).unwrap_or(u32::MAX);
            items.extend(page);
            offset = offset.saturating_add(got);
            let done = match pagination.total {
                Some(total) => offset >= total || got == 0,
                None => got < limit,
            };
            if done {
                return Ok(items);
            }
        }
        Err(Error::Decode {
            message: format!("{}: pagination did not end", call.path),
        })
    }
}

fn transport_error(err: reqwest::Error) -> Error {
    let kind = if err.is_timeout() {
        "timeout"
    } else if err.is_connect() {
        "connect"
    } else if err.is_body() || err.is_decode() {
        "body"
    } else {
        "request"
    };
    // reqwest's message names the URL, never headers or bodies.
    Error::Transport {
        message: format!("{kind}: {}", err.without_url()),
    }
}

/// Delay before the next attempt: the server's `Retry-After` when it gave
/// one (bounded by the caller's throttle budget), else exponential backoff with full jitter.
pub(crate) fn backoff(policy: &RetryPolicy, attempt: u32, err: &Error) -> Duration {
    if let Error::Throttled {
        retry_after: Some(after),
    } = err
    {
        return *after;
    }
    let exp = policy.base_delay.saturating_mul(1u32 << attempt.min(16));
    let cap = exp.min(policy.max_delay);
    let millis = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
    // Never zero, so a retry never hammers the server back-to-back.
    Duration::from_millis(rand::rng().random_range(millis / 4..=millis.max(1)))
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let raw = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = raw.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = raw.parse::<f64>() {
        // NaN, negative or beyond what a Duration holds: no usable hint (never a panic).
        return Duration::try_from_secs_f64(secs).ok();
    }
    // HTTP-date form.
    let when = jiff::fmt::rfc2822::parse(raw).ok()?.timestamp();
    let delta = when.duration_since(jiff::Timestamp::now());
    Duration::try_from(delta).ok()
}

/// Maps an error response to [`Error`]. Quota and capacity are told apart by
/// the error code or message (the status alone is not specific enough).
pub(crate) fn classify(status: StatusCode, headers: &HeaderMap, body: &[u8], what: &str) -> Error {
    let (code, message) = error_text(body);
    let lower = format!("{code} {message}").to_ascii_lowercase();
    let quota = lower.contains("quota");
    let capacity = lower.contains("capacity") || lower.contains("no valid host");
    match status.as_u16() {
        429 => Error::Throttled {
            retry_after: retry_after(headers),
        },
        401 => Error::Unauthorized { message },
        404 => Error::NotFound {
            what: what.to_string(),
        },
        _ if quota => Error::QuotaExceeded { message },
        _ if capacity => Error::InsufficientCapacity { message },
        400 | 422 => Error::InvalidInput { message },
        403 => Error::Forbidden { message },
        409 => Error::Conflict { message },
        s => Error::Server { status: s, message },
    }
}

fn error_text(body: &[u8]) -> (String, String) {
    if let Ok(e) = serde_json::from_slice::<ErrorBody>(body) {
        return (e.error.code, e.error.message);
    }
    if let Ok(e) = serde_json::from_slice::<ValidationErrorBody>(body)
        && !e.detail.is_empty()
    {
        return (String::new(), e.summary());
    }
    if let Ok(IamErrorBody {
        error:
            IamError {
                message: Some(message),
                title,
                ..
            },
    }) = serde_json::from_slice::<IamErrorBody>(body)
    {
        return (title.unwrap_or_default(), message);
    }
    let text = String::from_utf8_lossy(body);
    let short: String = text.chars().take(200).collect();
    (String::new(), short)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(code: &str, message: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"error": {"code": code, "message": message}}))
            .unwrap()
    }

    #[test]
    fn classifies_error_responses() {
        let h = HeaderMap::new();
        assert!(matches!(
            classify(
                StatusCode::FORBIDDEN,
                &h,
                &body("QuotaExceeded", "instances"),
                "x"
            ),
            Error::QuotaExceeded { .. }
        ));
        assert!(matches!(
            classify(
                StatusCode::CONFLICT,
                &h,
                &body("InsufficientCapacity", "m2a"),
                "x"
            ),
            Error::InsufficientCapacity { .. }
        ));
        assert!(matches!(
            classify(
                StatusCode::BAD_REQUEST,
                &h,
                &body("InvalidInput", "name"),
                "x"
            ),
            Error::InvalidInput { .. }
        ));
        assert_eq!(
            classify(StatusCode::NOT_FOUND, &h, b"", "instance i-1"),
            Error::NotFound {
                what: "instance i-1".into()
            }
        );
        assert!(matches!(
            classify(StatusCode::BAD_GATEWAY, &h, b"<html>", "x"),
            Error::Server { status: 502, .. }
        ));
    }

    #[test]
    fn fastapi_validation_errors_name_the_field() {
        let body = br#"{"detail":[{"loc":["body","instance","image_id"],"msg":"field required","type":"value_error.missing"}]}"#;
        let err = classify(
            StatusCode::UNPROCESSABLE_ENTITY,
            &HeaderMap::new(),
            body,
            "x",
        );
        assert_eq!(
            err,
            Error::InvalidInput {
                message: "body.instance.image_id: field required".into()
            }
        );
        let keystone = br#"{"error":{"code":401,"message":"The request you have made requires authentication.","title":"Unauthorized"}}"#;
        assert!(matches!(
            classify(StatusCode::UNAUTHORIZED, &HeaderMap::new(), keystone, "x"),
            Error::Unauthorized { message } if message.starts_with("The request")
        ));
    }

    #[test]
    fn hostile_retry_after_values_never_panic_and_stay_within_the_budget() {
        let policy = RetryPolicy::default();
        let started = std::time::Instant::now();
        for raw in [
            "1e300",
            "-5",
            "NaN",
            "inf",
            "18446744073709551615",
            "garbage",
            "Wed, 21 Oct 2015 07:28:00 GMT",
        ] {
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, raw.parse().unwrap());
            let err = classify(StatusCode::TOO_MANY_REQUESTS, &h, b"", "x");
            if let Some(delay) = policy.next_delay(1, started, &err) {
                assert!(delay <= policy.throttle_budget, "{raw}");
            }
        }
    }

    #[test]
    fn honours_retry_after_seconds() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, "3".parse().unwrap());
        let err = classify(StatusCode::TOO_MANY_REQUESTS, &h, b"", "x");
        assert_eq!(
            err,
            Error::Throttled {
                retry_after: Some(Duration::from_secs(3))
            }
        );
        let policy = RetryPolicy::default();
        let started = std::time::Instant::now();
        assert_eq!(
            policy.next_delay(1, started, &err),
            Some(Duration::from_secs(3))
        );
        // Throttling is retried by time, not by count; past the budget it gives up.
        assert!(policy.next_delay(1_000, started, &err).is_some());
        let tight = RetryPolicy {
            throttle_budget: Duration::from_secs(2),
            ..RetryPolicy::default()
        };
        assert_eq!(tight.next_delay(1, started, &err), None);
        let server = Error::Server {
            status: 503,
            message: String::new(),
        };
        assert!(
            policy
                .next_delay(policy.max_attempts - 1, started, &server)
                .is_some()
        );
        assert_eq!(
            policy.next_delay(policy.max_attempts, started, &server),
            None
        );
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let policy = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            ..RetryPolicy::default()
        };
        let err = Error::Server {
            status: 503,
            message: String::new(),
        };
        for attempt in 1..20 {
            let d = backoff(&policy, attempt, &err);
            assert!(d <= Duration::from_millis(1000), "attempt {attempt}: {d:?}");
            assert!(d > Duration::ZERO);
        }
    }
}
