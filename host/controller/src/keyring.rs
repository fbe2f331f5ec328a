//! The ownership keyring's Secret (`karpenter-sigkey`/`keyring.json`): loaded at startup and
//! watched, so a rotation takes effect without a restart. The ring itself and the tag format
//! live in the client crate ([`kakaocloud::ownership`]); this module only feeds it.
//!
//! Invariant: a reload never orphans an instance. A new ring that removes a key, or maps a key
//! ID to other bytes, is refused (the old ring keeps serving, a Warning Event on the Secret says
//! why) while any live instance of this cluster carries a tag signed with that key.

use k8s_openapi::api::core::v1::Secret;
use kakaocloud::InstanceFilter;
use kakaocloud::api::InstanceStatus;
use kakaocloud::ownership::{Keyring, KeyringError, KeyringHandle};
use kube::Resource;

use crate::events::{self, Events};

/// What a reload must not orphan: the instances of `cluster`.
#[derive(Clone)]
pub struct RetireGuard {
    pub cloud: kakaocloud::Client,
    pub cluster: String,
}

impl RetireGuard {
    /// How many live instances carry a tag (or create marker) of this cluster that `current`
    /// verifies as signed with one of `ids`.
    async fn instances_signed_with(
        &self,
        current: &Keyring,
        ids: &[String],
    ) -> Result<usize, kakaocloud::Error> {
        let instances = self
            .cloud
            .instances()
            .list(&InstanceFilter::default())
            .await?;
        Ok(instances
            .iter()
            .filter(|i| i.status.as_ref() != Some(&InstanceStatus::Deleted))
            .filter(|i| {
                // A create marker counts too: without its key a duplicate is never collected.
                current
                    .owner(
                        i.description.as_deref().unwrap_or(""),
                        i.name.as_deref().unwrap_or(""),
                        &self.cluster,
                        &i.id,
                    )
                    .is_ok_and(|owner| ids.contains(&owner.key_id))
            })
            .count())
    }
}

/// Validates `secret`'s keyring and swaps it in, unless it would orphan live instances.
pub async fn reload(
    handle: &KeyringHandle,
    secret: &Secret,
    guard: Option<&RetireGuard>,
) -> Result<(), KeyringError> {
    let next = match Keyring::from_secret(secret) {
        Ok(next) => next,
        Err(e) => return handle.outcome(Err(e)),
    };
    let current = handle.current();
    let retired = current.retired_by(&next);
    if let (false, Some(guard)) = (retired.is_empty(), guard) {
        let refusal = match guard.instances_signed_with(&current, &retired).await {
            Ok(0) => None,
            Ok(instances) => Some(KeyringError::KeysInUse {
                ids: retired,
                instances,
            }),
            Err(e) => Some(KeyringError::UsageUnknown {
                ids: retired,
                reason: e.to_string(),
            }),
        };
        if let Some(err) = refusal {
            return handle.outcome(Err(err));
        }
    }
    handle.outcome(Ok(next))
}

/// Why the keyring could not be loaded at startup.
#[derive(Debug, thiserror::Error)]
pub enum KeyringLoadError {
    #[error("reading Secret {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Secret {namespace}/{name} does not exist")]
    Missing { namespace: String, name: String },
    #[error("Secret {namespace}/{name}: {source}")]
    Invalid {
        namespace: String,
        name: String,
        #[source]
        source: KeyringError,
    },
}

/// Loads the keyring from Secret `namespace/secret_name` and keeps it up to
/// date: a watcher swaps in every valid new version and keeps the old ring
/// when a new version is invalid (see [`KeyringHandle::last_error`]) or the
/// Secret is deleted. A missing or invalid keyring at startup is an error,
/// never a fallback. The watcher stops when the last handle is dropped.
pub async fn watch_keyring(
    client: kube::Client,
    namespace: &str,
    secret_name: &str,
    guard: Option<RetireGuard>,
) -> Result<KeyringHandle, KeyringLoadError> {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};

    let events = Events::new(events::Source::karpenter(client.clone()), "ReloadKeyring");
    let api: kube::Api<Secret> = kube::Api::namespaced(client, namespace);
    let (ns, name) = (namespace.to_string(), secret_name.to_string());
    let secret = api
        .get_opt(secret_name)
        .await
        .map_err(|source| KeyringLoadError::Read {
            namespace: ns.clone(),
            name: name.clone(),
            source,
        })?
        .ok_or_else(|| KeyringLoadError::Missing {
            namespace: ns.clone(),
            name: name.clone(),
        })?;
    let keyring = Keyring::from_secret(&secret).map_err(|source| KeyringLoadError::Invalid {
        namespace: ns.clone(),
        name: name.clone(),
        source,
    })?;
    tracing::info!(
        namespace,
        secret = secret_name,
        active_key_id = keyring.active_key_id(),
        "ownership keyring loaded"
    );
    let handle = KeyringHandle::new(keyring);
    let loaded_version = secret.metadata.resource_version.clone();

    let reloader = handle.detached();
    let config = watcher::Config::default().fields(&format!("metadata.name={secret_name}"));
    let task = tokio::spawn(async move {
        let mut last_version = loaded_version;
        let mut stream = std::pin::pin!(watcher(api, config).default_backoff());
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(secret) | watcher::Event::InitApply(secret)) => {
                    if secret.metadata.resource_version.is_some()
                        && secret.metadata.resource_version == last_version
                    {
                        continue;
                    }
                    last_version = secret.metadata.resource_version.clone();
                    if let Err(err) = reload(&reloader, &secret, guard.as_ref()).await {
                        events.warning(
                            &secret.object_ref(&()),
                            "KeyringReloadRefused",
                            err.to_string(),
                        );
                    }
                }
                Ok(watcher::Event::Delete(_)) => {
                    tracing::warn!(namespace = %ns, secret = %name, "ownership keyring Secret deleted; keeping the loaded keyring");
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                Err(err) => {
                    tracing::warn!(namespace = %ns, secret = %name, error = %err, "keyring watch error; retrying");
                }
            }
        }
    });
    Ok(handle.owning(task))
}
