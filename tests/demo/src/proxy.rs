//! A TCP proxy that can be partitioned: while partitioned, what a client sends is held (never
//! forwarded, never refused), so requests hang the way they do behind a broken network path.
//! It records when a client last sent anything, so a test can say when a process last talked
//! to the service behind it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; dropping it stops accepting.
pub struct Proxy {
    pub addr: SocketAddr,
    partitioned: watch::Sender<bool>,
    last_sent: Arc<Mutex<Option<SystemTime>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (partitioned, _) = watch::channel(false);
        let last_sent = Arc::new(Mutex::new(None));
        let (tx, seen) = (partitioned.clone(), last_sent.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (rx, seen) = (tx.subscribe(), seen.clone());
                tokio::spawn(async move {
                    if let Ok(upstream) = TcpStream::connect(target).await {
                        pipe(client, upstream, rx, seen).await;
                    }
                });
            }
        });
        Ok(Proxy {
            addr,
            partitioned,
            last_sent,
            task,
        })
    }

    /// From now on, nothing a client sends is forwarded (connections stay open).
    pub fn partition(&self) {
        self.partitioned.send_replace(true);
    }

    /// When a client last sent bytes that were forwarded.
    pub fn last_forwarded(&self) -> Option<SystemTime> {
        *self.last_sent.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(
    client: TcpStream,
    upstream: TcpStream,
    mut partitioned: watch::Receiver<bool>,
    last_sent: Arc<Mutex<Option<SystemTime>>>,
) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut up_rx, mut up_tx) = upstream.into_split();
    let to_server = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match client_rx.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            // Held for good while partitioned.
            if partitioned.wait_for(|p| !*p).await.is_err() {
                return;
            }
            *last_sent.lock().unwrap_or_else(|p| p.into_inner()) = Some(SystemTime::now());
            if up_tx.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let to_client = async move {
        let _ = tokio::io::copy(&mut up_rx, &mut client_tx).await;
    };
    tokio::join!(to_server, to_client);
}
