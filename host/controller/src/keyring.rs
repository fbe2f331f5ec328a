//! The ownership keyring's Secret (`karpenter-sigkey`/`keyring.json`): loaded at startup and
//! watched, so a rotation takes effect without a restart. The ring itself and the tag format
//! live in the client crate ([`kakaocloud::ownership`]); this module only feeds it.

use kakaocloud::ownership::{Keyring, KeyringError, KeyringHandle};

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
) -> Result<KeyringHandle, KeyringLoadError> {
    use futures::StreamExt as _;
    use k8s_openapi::api::core::v1::Secret;
    use kube::runtime::{WatchStreamExt as _, watcher};

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
                    let _ = reloader.reload_from_secret(&secret);
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
