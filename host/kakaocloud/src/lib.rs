//! The KakaoCloud client: transport, typed API, instances, catalog, pricing, naming, and the
//! signed ownership tag with its keyring ([`ownership`]). Nothing here knows about Kubernetes
//! controllers; the simulator depends on this crate and `kk-apis` only.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kakaocloud::Error> {
//! use kakaocloud::{Client, Config, Credentials};
//! let client = Client::new(Config::default(), Credentials::new("id", "secret")?)?;
//! let flavors = client.flavors().list().await?;
//! # let _ = flavors; Ok(()) }
//! ```
//!
//! Wire shapes live in [`api`] (shared with the simulator); tokens in `auth`;
//! retries and error mapping in `transport`.

pub mod api;
#[cfg(test)]
mod api_conformance_tests;
mod auth;
mod catalog;
pub mod config;
#[cfg(any(test, feature = "contract"))]
pub mod contract;
pub mod error;
pub mod fence;
mod instances;
mod kubernetes_engine;
pub mod naming;
pub mod ownership;
pub mod pricing;
mod transport;

use std::sync::Arc;

pub use catalog::{Flavors, Images, KeyPairs, SecurityGroups, Subnets};
pub use config::{Config, Credentials, DEFAULT_REGION, RetryPolicy, Service};
pub use error::Error;
pub use fence::Fence;
pub use instances::{DeleteOutcome, DeleteOwnedError, InstanceFilter, Instances, LaunchSpec};
pub use kubernetes_engine::KubernetesEngine;

/// Installs rustls' `ring` provider as the process default (reqwest is built
/// without one so that no C crypto library is compiled). Idempotent; every
/// HTTP client of this crate calls it, and tests that build their own
/// `reqwest::Client` should too.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err means another provider is already the default: fine as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A KakaoCloud client. Cheap to clone; clones share the token cache.
#[derive(Clone)]
pub struct Client {
    transport: Arc<transport::Transport>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("region", &self.transport.config.region)
            .finish()
    }
}

impl Client {
    pub fn new(config: Config, credentials: Credentials) -> Result<Self, Error> {
        Ok(Client {
            transport: Arc::new(transport::Transport::new(config, credentials)?),
        })
    }

    pub fn config(&self) -> &Config {
        &self.transport.config
    }

    /// A client sharing this one's connections and token, whose every call (token requests
    /// included) fails with [`Error::Fenced`] unless `fence` is open: what the leader's
    /// controllers use, so a leader that may have lost its Lease stops calling the cloud.
    pub fn fenced(&self, fence: Fence) -> Client {
        Client {
            transport: Arc::new(self.transport.fenced(fence)),
        }
    }

    /// Issues (or reuses) the API token now; useful as a startup check of the
    /// credentials.
    pub async fn authenticate(&self) -> Result<(), Error> {
        if let Some(fence) = self.transport.fence() {
            fence.check()?;
        }
        self.transport.token().await.map(|_| ())
    }

    /// Project the credentials are scoped to (known after the first call).
    pub async fn project_id(&self) -> Option<String> {
        self.transport.project_id().await
    }

    pub fn instances(&self) -> Instances<'_> {
        Instances {
            transport: &self.transport,
        }
    }

    pub fn flavors(&self) -> Flavors<'_> {
        Flavors {
            transport: &self.transport,
        }
    }

    pub fn subnets(&self) -> Subnets<'_> {
        Subnets {
            transport: &self.transport,
        }
    }

    pub fn security_groups(&self) -> SecurityGroups<'_> {
        SecurityGroups {
            transport: &self.transport,
        }
    }

    pub fn key_pairs(&self) -> KeyPairs<'_> {
        KeyPairs {
            transport: &self.transport,
        }
    }

    pub fn images(&self) -> Images<'_> {
        Images {
            transport: &self.transport,
        }
    }

    pub fn kubernetes_engine(&self) -> KubernetesEngine<'_> {
        KubernetesEngine {
            transport: &self.transport,
        }
    }
}
