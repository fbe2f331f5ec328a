//! `kakaocloud-sim --listen 127.0.0.1:PORT [--boot-delay-ms N] [--token-ttl-secs N]`
//!
//! Prints one JSON line with the endpoints and the default project's
//! credentials to stdout once it is listening, then serves until SIGINT or
//! SIGTERM.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use kakaocloud_sim::{SimConfig, Simulator};

fn usage() -> &'static str {
    "usage: kakaocloud-sim [--listen 127.0.0.1:PORT] [--boot-delay-ms N] [--token-ttl-secs N]\n\
     \x20                     [--cluster-endpoint HOST:PORT] [--cluster-ca-file PATH]"
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();

    let mut config = SimConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .with_context(|| format!("{name} needs a value\n{}", usage()))
        };
        match arg.as_str() {
            "--listen" => {
                config.listen = value("--listen")?
                    .parse::<SocketAddr>()
                    .context("--listen must be IP:PORT")?;
            }
            "--boot-delay-ms" => {
                config.boot_delay = Duration::from_millis(
                    value("--boot-delay-ms")?
                        .parse()
                        .context("--boot-delay-ms")?,
                );
            }
            "--token-ttl-secs" => {
                config.token_ttl = Duration::from_secs(
                    value("--token-ttl-secs")?
                        .parse()
                        .context("--token-ttl-secs")?,
                );
            }
            "--cluster-endpoint" => {
                let raw = value("--cluster-endpoint")?;
                let (host, port) = raw
                    .rsplit_once(':')
                    .context("--cluster-endpoint must be HOST:PORT")?;
                config.projects[0].cluster.control_plane_host = host.to_string();
                config.projects[0].cluster.control_plane_port =
                    port.parse().context("--cluster-endpoint port")?;
            }
            "--cluster-ca-file" => {
                let path = value("--cluster-ca-file")?;
                config.projects[0].cluster.ca_pem =
                    std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{}", usage()),
        }
    }

    let sim = Simulator::start(config).await?;
    println!("{}", serde_json::to_string(&sim.describe())?);

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    sim.shutdown().await;
    Ok(())
}
