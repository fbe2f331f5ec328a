//! IAM token issuance and caching.
//!
//! One token is cached per client. It is refreshed ahead of expiry, and under
//! concurrency only one caller issues: the cache lock is held across the
//! issuing request, so everybody else waits and then reuses the fresh token.

use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use super::api::{self, TokenRequest, TokenResponse};
use super::error::Error;

/// A token and when to stop using it. Not `Debug`: the value is a bearer secret.
pub(crate) struct CachedToken {
    pub value: String,
    pub refresh_at: Instant,
    pub project_id: Option<String>,
}

/// Single-flight token slot.
#[derive(Default)]
pub(crate) struct TokenCache {
    slot: Mutex<Option<CachedToken>>,
}

impl TokenCache {
    /// Returns a usable token, issuing one with `issue` when none is fresh.
    pub async fn get<F, Fut>(&self, issue: F) -> Result<String, Error>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<CachedToken, Error>>,
    {
        let mut slot = self.slot.lock().await;
        if let Some(token) = slot.as_ref()
            && Instant::now() < token.refresh_at
        {
            return Ok(token.value.clone());
        }
        let fresh = issue().await?;
        let value = fresh.value.clone();
        *slot = Some(fresh);
        Ok(value)
    }

    /// Drops the cached token if it is the one the server just rejected (a
    /// newer token issued meanwhile by another caller is kept).
    pub async fn reject(&self, rejected: &str) {
        let mut slot = self.slot.lock().await;
        if slot.as_ref().is_some_and(|t| t.value == rejected) {
            *slot = None;
        }
    }

    /// Project the current token is scoped to, if known.
    pub async fn project_id(&self) -> Option<String> {
        self.slot
            .lock()
            .await
            .as_ref()
            .and_then(|t| t.project_id.clone())
    }
}

/// Body of the token request for an application credential.
pub(crate) fn token_request(id: &str, secret: &str) -> TokenRequest {
    TokenRequest::application_credential(id, secret)
}

/// When to refresh a token issued now, given the server's view of its
/// lifetime: `margin` early, but never more than a quarter of the lifetime.
pub(crate) fn refresh_at(now: Instant, lifetime: Duration, margin: Duration) -> Instant {
    let early = margin.min(lifetime / 4);
    now + lifetime.saturating_sub(early)
}

/// Lifetime of a token from its response body. The server's own `issued_at`
/// is preferred to our clock, so clock skew does not shorten or stretch it.
/// Lifetime assumed for a token whose answer has no `expires_at`.
pub(crate) const UNKNOWN_LIFETIME: Duration = Duration::from_secs(300);

pub(crate) fn token_lifetime(body: &TokenResponse) -> Result<Duration, Error> {
    // The official model makes `expires_at` optional; without it the token is used briefly
    // and then reissued rather than trusted for an unknown time.
    let Some(expires_at) = &body.token.expires_at else {
        return Ok(UNKNOWN_LIFETIME);
    };
    let expires = parse_time(expires_at)?;
    let issued = match &body.token.issued_at {
        Some(t) => parse_time(t)?,
        None => jiff::Timestamp::now(),
    };
    let span = expires.duration_since(issued);
    let lifetime = Duration::try_from(span).map_err(|_| Error::Decode {
        message: "token expires_at is before issued_at".into(),
    })?;
    Ok(lifetime)
}

fn parse_time(raw: &str) -> Result<jiff::Timestamp, Error> {
    raw.parse::<jiff::Timestamp>().map_err(|e| Error::Decode {
        message: format!("token timestamp {raw:?}: {e}"),
    })
}

/// Reads the token header of a successful issuance.
pub(crate) fn subject_token(headers: &reqwest::header::HeaderMap) -> Result<String, Error> {
    let value = headers
        .get(api::SUBJECT_TOKEN_HEADER)
        .ok_or_else(|| Error::Decode {
            message: "token response without X-Subject-Token".into(),
        })?;
    let token = value.to_str().map_err(|_| Error::Decode {
        message: "X-Subject-Token is not ASCII".into(),
    })?;
    if token.is_empty() {
        return Err(Error::Decode {
            message: "empty X-Subject-Token".into(),
        });
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_is_early_but_bounded_by_lifetime() {
        let now = Instant::now();
        // 12 h token (KakaoCloud's default): refresh 5 min early.
        let at = refresh_at(
            now,
            Duration::from_secs(12 * 3600),
            Duration::from_secs(300),
        );
        assert_eq!(at - now, Duration::from_secs(12 * 3600 - 300));
        // 8 s token: a 5 min margin would refresh every call; a quarter is used.
        let at = refresh_at(now, Duration::from_secs(8), Duration::from_secs(300));
        assert_eq!(at - now, Duration::from_secs(6));
    }

    #[test]
    fn lifetime_uses_server_clock() {
        let body: TokenResponse = serde_json::from_str(
            r#"{"token":{"expires_at":"2026-01-01T12:00:00Z","issued_at":"2026-01-01T00:00:00Z"}}"#,
        )
        .unwrap();
        assert_eq!(
            token_lifetime(&body).unwrap(),
            Duration::from_secs(12 * 3600)
        );
        let bad: TokenResponse = serde_json::from_str(
            r#"{"token":{"expires_at":"2026-01-01T00:00:00Z","issued_at":"2026-01-01T12:00:00Z"}}"#,
        )
        .unwrap();
        assert!(token_lifetime(&bad).is_err());
    }
}
