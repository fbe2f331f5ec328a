//! Virtual Machine instances: create (safe against duplicate launches), list,
//! get, update description, delete.

use base64::Engine as _;
use reqwest::Method;

use super::api::{
    self, CreateInstance, CreateInstanceBody, CreateInstanceResponse, CreateInstanceSubnet,
    CreateInstanceVolume, Instance, InstanceList, InstanceResponse, InstanceStatus,
    SecurityGroupRef, UpdateInstance, UpdateInstanceBody, UpdatedInstance, UpdatedInstanceResponse,
};
use super::config::Service;
use super::error::Error;
use super::naming;
use super::transport::{Call, Transport};
use crate::ownership::{self, Keyring, Owner, VerifyError};

/// What to launch. Not `Debug`: `user_data` carries a bootstrap token.
#[derive(Clone)]
pub struct LaunchSpec {
    /// Use [`naming::instance_name`]; it is what makes a retried create safe.
    pub name: String,
    pub flavor_id: String,
    pub image_id: String,
    pub subnet_id: String,
    /// Security group *names* (the create call references them by name).
    pub security_groups: Vec<String>,
    pub key_name: Option<String>,
    pub root_volume_gib: u32,
    pub delete_root_volume_on_termination: bool,
    /// Plain cloud-init text; encoded as base64 on the wire.
    pub user_data: Option<String>,
    pub availability_zone: Option<String>,
    pub description: Option<String>,
    /// Sent as `is_disable_hyper_threading` (the schema defaults it to `true` when left out,
    /// so it is always sent).
    pub disable_hyper_threading: bool,
}

/// Server-side filters of the list call (`name` matches as a substring).
#[derive(Debug, Clone, Default)]
pub struct InstanceFilter {
    pub name: Option<String>,
    pub status: Option<String>,
    pub availability_zone: Option<String>,
    pub id: Option<String>,
}

/// Result of a delete. Only [`DeleteOutcome::Gone`] means the instance no longer exists: like
/// the official Terraform provider, callers confirm a deletion by asking again until the
/// instance is not found (404), so a NodeClaim is never released while its instance still bills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The delete was accepted; the instance still exists until the server finishes.
    Requested,
    /// The instance is already being deleted (no new request was sent).
    InProgress,
    /// It is gone (404, or the server reports it deleted).
    Gone,
}

impl DeleteOutcome {
    pub fn is_gone(self) -> bool {
        self == DeleteOutcome::Gone
    }
}

/// Instance calls; obtained from [`super::Client::instances`].
pub struct Instances<'a> {
    pub(crate) transport: &'a Transport,
}

impl Instances<'_> {
    /// Creates an instance and returns it as listed.
    ///
    /// Creation is not idempotent, so when an attempt fails in a way that may
    /// have created it anyway (timeout, dropped connection, 5xx), the
    /// instances named `spec.name` are listed first and an existing one is
    /// returned instead of creating a second.
    pub async fn create(&self, spec: &LaunchSpec) -> Result<Instance, Error> {
        if !naming::is_valid_instance_name(&spec.name) {
            return Err(Error::InvalidInput {
                message: format!("instance name {:?} is not valid on KakaoCloud", spec.name),
            });
        }
        if let Some(existing) = self.find_by_name(&spec.name).await? {
            tracing::info!(name = %spec.name, id = %existing.id, "instance already exists");
            return Ok(existing);
        }
        let call = Call::get(
            Service::Bcs,
            api::paths::INSTANCES,
            format!("create {}", spec.name),
        )
        .with_method(Method::POST)
        .with_body(&create_body(spec))?;
        let policy = self.transport.retry_policy().clone();
        let first = std::time::Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let err = match self.transport.attempt(&call).await {
                Ok(reply) => {
                    let created: CreateInstanceResponse = reply.json()?;
                    tracing::info!(name = %spec.name, id = %created.instance.id, attempt, "instance created");
                    return self.get(&created.instance.id).await;
                }
                Err(err) => err,
            };
            if err.may_have_happened() {
                // Must not create twice: look before trying again.
                match self.find_by_name(&spec.name).await {
                    Ok(Some(existing)) => {
                        tracing::info!(name = %spec.name, id = %existing.id, error = %err,
                            "create failed but the instance exists");
                        return Ok(existing);
                    }
                    Ok(None) => {}
                    Err(list_err) => {
                        tracing::warn!(name = %spec.name, error = %list_err,
                            "cannot tell whether the failed create happened");
                        return Err(err);
                    }
                }
            }
            let Some(delay) = policy.next_delay(attempt, first, &err) else {
                tracing::warn!(name = %spec.name, attempt, error = %err, "instance create failed");
                return Err(err);
            };
            tracing::warn!(name = %spec.name, attempt, error = %err, ?delay, "retrying instance create");
            tokio::time::sleep(delay).await;
        }
    }

    /// Every instance matching `filter` (all pages).
    pub async fn list(&self, filter: &InstanceFilter) -> Result<Vec<Instance>, Error> {
        let mut call = Call::get(Service::Bcs, api::paths::INSTANCES, "instances");
        for (key, value) in [
            ("name", &filter.name),
            ("status", &filter.status),
            ("availability_zone", &filter.availability_zone),
            ("id", &filter.id),
        ] {
            if let Some(value) = value {
                call = call.with_query(key, value.clone());
            }
        }
        self.transport.list_all::<InstanceList>(call).await
    }

    /// The instance named exactly `name`, if any. The server's name filter is a
    /// substring match, so the result is filtered again here.
    pub async fn find_by_name(&self, name: &str) -> Result<Option<Instance>, Error> {
        let filter = InstanceFilter {
            name: Some(name.to_string()),
            ..InstanceFilter::default()
        };
        let mut found: Vec<Instance> = self
            .list(&filter)
            .await?
            .into_iter()
            .filter(|i| i.name.as_deref() == Some(name))
            .collect();
        if found.len() > 1 {
            tracing::warn!(name, count = found.len(), "several instances share a name");
        }
        Ok(found.pop())
    }

    pub async fn get(&self, id: &str) -> Result<Instance, Error> {
        let call = Call::get(
            Service::Bcs,
            api::paths::instance(id),
            format!("instance {id}"),
        );
        let reply = self.transport.idempotent(&call).await?;
        Ok(reply.json::<InstanceResponse>()?.instance)
    }

    /// Replaces the description (used for the ownership tag). Answers with the `PUT` model,
    /// which is not the `GET` one (see [`api::UpdatedInstance`]).
    pub async fn update_description(
        &self,
        id: &str,
        description: &str,
    ) -> Result<UpdatedInstance, Error> {
        let chars = description.chars().count();
        if chars > api::INSTANCE_DESCRIPTION_MAX {
            return Err(Error::InvalidInput {
                message: format!(
                    "description has {chars} characters, the limit is {}",
                    api::INSTANCE_DESCRIPTION_MAX
                ),
            });
        }
        let body = UpdateInstanceBody {
            instance: UpdateInstance {
                name: None,
                description: Some(description.to_string()),
            },
        };
        let call = Call::get(
            Service::Bcs,
            api::paths::instance(id),
            format!("instance {id}"),
        )
        .with_method(Method::PUT)
        .with_body(&body)?;
        let reply = self.transport.idempotent(&call).await?;
        Ok(reply.json::<UpdatedInstanceResponse>()?.instance)
    }

    /// Deletes by ID without any ownership check: private, so every delete of the controller
    /// goes through [`Self::delete_owned`].
    async fn delete_unverified(&self, id: &str) -> Result<DeleteOutcome, Error> {
        let call = Call::get(
            Service::Bcs,
            api::paths::instance(id),
            format!("instance {id}"),
        )
        .with_method(Method::DELETE);
        match self.transport.idempotent(&call).await {
            Ok(_) => {
                tracing::info!(id, "instance delete requested");
                Ok(DeleteOutcome::Requested)
            }
            Err(Error::NotFound { .. }) => Ok(DeleteOutcome::Gone),
            Err(err) => Err(err),
        }
    }

    /// Deletes the instance only if its description carries an ownership tag that verifies for
    /// `cluster` under `keyring` and names `nodeclaim` (or, for an instance never tagged, that
    /// claim's create marker under its deterministic name). Returns who owned it. An instance
    /// already being deleted is not sent another delete; one not found is `Err(Api(NotFound))`.
    pub async fn delete_owned(
        &self,
        id: &str,
        keyring: &Keyring,
        cluster: &str,
        nodeclaim: &str,
    ) -> Result<(DeleteOutcome, Owner), DeleteOwnedError> {
        let instance = match self.get(id).await {
            Ok(instance) => instance,
            Err(Error::NotFound { what }) => {
                return Err(DeleteOwnedError::Api(Error::NotFound { what }));
            }
            Err(err) => return Err(DeleteOwnedError::Api(err)),
        };
        let description = instance.description.as_deref().unwrap_or("");
        let name = instance.name.as_deref().unwrap_or("");
        let owner = keyring
            .owner(description, name, cluster, &instance.id)
            .map_err(DeleteOwnedError::NotOwned)?;
        // The tag must name the claim asking: a NodeClaim whose providerID points at another
        // claim's instance must not delete it (that one is drained by its own claim).
        if owner.nodeclaim != nodeclaim {
            return Err(DeleteOwnedError::NotOwned(VerifyError::OtherClaim {
                tagged: owner.nodeclaim,
                expected: nodeclaim.to_owned(),
            }));
        }
        let outcome = match instance.status.as_ref() {
            Some(InstanceStatus::Deleted) => DeleteOutcome::Gone,
            Some(InstanceStatus::Deleting) => DeleteOutcome::InProgress,
            _ => self
                .delete_unverified(id)
                .await
                .map_err(DeleteOwnedError::Api)?,
        };
        Ok((outcome, owner))
    }
}

/// Why [`Instances::delete_owned`] did not delete.
#[derive(Debug, thiserror::Error)]
pub enum DeleteOwnedError {
    #[error("instance is not provably ours: {0}")]
    NotOwned(ownership::VerifyError),
    #[error(transparent)]
    Api(Error),
}

fn create_body(spec: &LaunchSpec) -> CreateInstanceBody {
    CreateInstanceBody {
        instance: CreateInstance {
            name: spec.name.clone(),
            description: spec.description.clone(),
            count: Some(1),
            image_id: spec.image_id.clone(),
            flavor_id: spec.flavor_id.clone(),
            availability_zone: spec.availability_zone.clone(),
            subnets: vec![CreateInstanceSubnet {
                id: spec.subnet_id.clone(),
            }],
            volumes: vec![CreateInstanceVolume {
                size: spec.root_volume_gib,
                is_delete_on_termination: Some(spec.delete_root_volume_on_termination),
                source_type: Some("image".into()),
                uuid: Some(spec.image_id.clone()),
                type_id: None,
            }],
            key_name: spec.key_name.clone(),
            security_groups: spec
                .security_groups
                .iter()
                .map(|name| SecurityGroupRef { name: name.clone() })
                .collect(),
            user_data: spec
                .user_data
                .as_ref()
                .map(|text| base64::engine::general_purpose::STANDARD.encode(text.as_bytes())),
            is_disable_hyper_threading: Some(spec.disable_hyper_threading),
        },
    }
}
