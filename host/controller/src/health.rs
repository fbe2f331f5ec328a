//! The two HTTP endpoints of the process (axum): `/metrics` on `METRICS_PORT` and `/healthz` +
//! `/readyz` on `HEALTH_PROBE_PORT`. Liveness is "the process answers"; readiness turns true
//! once the process is serving, leader or standby (a standby is ready: it is there to take over).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use karpenter_kakaocloud::metrics::{self, Metrics};
use prometheus_client::registry::Registry;

/// Shared readiness flag.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(ready): State<Readiness>) -> (StatusCode, &'static str) {
    if ready.get() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

/// Scrapes the whole cluster (a series per pod), so it is rendered on a blocking thread and
/// streamed as it is written: the response holds a few chunks at a time, never the whole text.
async fn metrics(State((registry, m)): State<(Arc<Registry>, Arc<Metrics>)>) -> impl IntoResponse {
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(2);
    tokio::task::spawn_blocking(move || {
        // An error only means the scraper went away; there is nobody to tell.
        let _ = metrics::render_chunked(&registry, &m, |chunk| tx.blocking_send(chunk).is_ok());
    });
    let chunks = futures::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(chunk), rx))
    });
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        Body::from_stream(chunks),
    )
}

pub fn health_router(ready: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(ready)
}

pub fn metrics_router(registry: Arc<Registry>, m: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state((registry, m))
}

/// Binds `0.0.0.0:port` and serves `router` in the background; returns the bound address.
pub async fn serve(port: u16, router: Router, what: &'static str) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", port))
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on port {port} for {what}: {e}"))?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, router).await {
            tracing::error!(error = %err, endpoint = what, "HTTP endpoint failed");
        }
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn fetch(addr: SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", addr.port()))
            .await
            .unwrap();
        sock.write_all(
            // HTTP/1.0: a streamed body comes unchunked, ended by the close.
            format!("GET {path} HTTP/1.0\r\nhost: x\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        sock.read_to_string(&mut out).await.unwrap();
        let status = out[9..12].parse().unwrap();
        (status, out)
    }

    #[tokio::test]
    async fn probes_and_metrics() {
        let ready = Readiness::default();
        let addr = serve(0, health_router(ready.clone()), "health")
            .await
            .unwrap();
        assert_eq!(fetch(addr, "/healthz").await.0, 200);
        assert_eq!(fetch(addr, "/readyz").await.0, 503);
        ready.set(true);
        assert_eq!(fetch(addr, "/readyz").await.0, 200);
        assert_eq!(fetch(addr, "/nope").await.0, 404);

        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        // Several chunks' worth of series.
        for i in 0..3_000 {
            m.claim_created(&format!("pool-{i}"), "provisioned");
        }
        let addr = serve(0, metrics_router(Arc::new(registry), m), "metrics")
            .await
            .unwrap();
        let (status, body) = fetch(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            body.len() > 2 * metrics::CHUNK_BYTES,
            "{} bytes",
            body.len()
        );
        assert!(body.contains(r#"nodepool="pool-2999""#));
        assert!(body.trim_end().ends_with("# EOF"), "{body}");
        assert!(
            body.contains("# TYPE karpenter_pods_startup_duration_seconds summary"),
            "{body}"
        );
    }
}
