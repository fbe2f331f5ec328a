//! Kubernetes Engine: the cluster, its supported versions, worker images and
//! node pools.

use super::api::{
    self, Cluster, ClusterResponse, KubernetesVersion, NodePool, NodePoolList, VersionList,
    WorkerImage, WorkerImageList,
};
use super::config::Service;
use super::error::Error;
use super::transport::{Call, Transport};

/// Kubernetes Engine calls; obtained from [`super::Client::kubernetes_engine`].
pub struct KubernetesEngine<'a> {
    pub(crate) transport: &'a Transport,
}

impl KubernetesEngine<'_> {
    pub async fn cluster(&self, name: &str) -> Result<Cluster, Error> {
        let call = Call::get(
            Service::KubernetesEngine,
            api::paths::ke_cluster(name),
            format!("cluster {name}"),
        );
        let reply = self.transport.idempotent(&call).await?;
        Ok(reply.json::<ClusterResponse>()?.cluster)
    }

    /// Kubernetes versions Kubernetes Engine currently offers.
    pub async fn supported_versions(&self) -> Result<Vec<KubernetesVersion>, Error> {
        let call = Call::get(Service::KubernetesEngine, api::paths::KE_VERSIONS, "versions");
        let reply = self.transport.idempotent(&call).await?;
        Ok(reply.json::<VersionList>()?.versions)
    }

    /// Worker images for Kubernetes `version` (`MAJOR.MINOR`).
    pub async fn worker_images(&self, version: &str) -> Result<Vec<WorkerImage>, Error> {
        let call = Call::get(
            Service::KubernetesEngine,
            api::paths::KE_IMAGES,
            format!("worker images for {version}"),
        )
        .with_query("k8s_version", version);
        let reply = self.transport.idempotent(&call).await?;
        Ok(reply.json::<WorkerImageList>()?.images)
    }

    pub async fn node_pools(&self, cluster: &str) -> Result<Vec<NodePool>, Error> {
        let call = Call::get(
            Service::KubernetesEngine,
            api::paths::ke_node_pools(cluster),
            format!("node pools of {cluster}"),
        );
        let reply = self.transport.idempotent(&call).await?;
        Ok(reply.json::<NodePoolList>()?.node_pools)
    }
}
