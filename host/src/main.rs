//! The controller binary: settings from the environment, KakaoCloud credentials from
//! `KAKAOCLOUD_ACCESS_KEY_ID` / `KAKAOCLOUD_ACCESS_KEY_SECRET` (mounted from a Secret),
//! endpoint overrides from `KAKAOCLOUD_ENDPOINT_<SERVICE>` (e.g. `KAKAOCLOUD_ENDPOINT_BCS`),
//! metrics on `METRICS_PORT`.

use std::sync::Arc;

use anyhow::Context as _;
use karpenter_kakaocloud::config::Settings;
use karpenter_kakaocloud::kakaocloud::{self, Service};
use karpenter_kakaocloud::metrics::{self, Metrics};
use karpenter_kakaocloud::operator::{self, Operator, Plugins};
use karpenter_kakaocloud::ownership;

fn cloud_config() -> anyhow::Result<kakaocloud::Config> {
    let mut config = kakaocloud::Config::default();
    if let Ok(region) = std::env::var("KAKAOCLOUD_REGION")
        && !region.trim().is_empty()
    {
        config.region = region.trim().to_owned();
    }
    for service in Service::ALL {
        let var = format!(
            "KAKAOCLOUD_ENDPOINT_{}",
            service.as_str().to_ascii_uppercase().replace('-', "_")
        );
        if let Ok(url) = std::env::var(&var)
            && !url.trim().is_empty()
        {
            let url =
                reqwest::Url::parse(url.trim()).with_context(|| format!("{var} is not a URL"))?;
            config.endpoint_overrides.insert(service, url);
        }
    }
    Ok(config)
}

async fn serve_metrics(
    port: u16,
    registry: Arc<prometheus_client::registry::Registry>,
) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", port)).await?;
    loop {
        let (mut sock, _) = listener.accept().await?;
        let registry = registry.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let _ = sock.read(&mut buf).await;
            let body = metrics::render(&registry);
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(reply.as_bytes()).await;
        });
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LOG_LEVEL")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let settings = Settings::from_env()?;
    let id = std::env::var("KAKAOCLOUD_ACCESS_KEY_ID")
        .context("KAKAOCLOUD_ACCESS_KEY_ID is required")?;
    let secret = std::env::var("KAKAOCLOUD_ACCESS_KEY_SECRET")
        .context("KAKAOCLOUD_ACCESS_KEY_SECRET is required")?;
    let cloud =
        kakaocloud::Client::new(cloud_config()?, kakaocloud::Credentials::new(id, secret)?)?;
    cloud
        .authenticate()
        .await
        .context("KakaoCloud credentials were refused")?;
    let kube = kube::Client::try_default()
        .await
        .context("no Kubernetes configuration")?;
    let keyring = ownership::watch_keyring(
        kube.clone(),
        &settings.system_namespace,
        &settings.keyring_secret,
    )
    .await?;
    let join = operator::resolve_join_info(&kube, &cloud, &settings).await?;
    let mut registry = prometheus_client::registry::Registry::default();
    let m = Metrics::register(&mut registry);
    let port = settings.metrics_port;
    let registry = Arc::new(registry);
    tokio::spawn(async move {
        if let Err(err) = serve_metrics(port, registry).await {
            tracing::error!(error = %err, "metrics endpoint failed");
        }
    });
    let op = Operator::start(kube, cloud, settings, keyring, join, Plugins::default(), m).await?;
    tracing::info!("controllers started");
    tokio::signal::ctrl_c().await?;
    op.stop();
    Ok(())
}
