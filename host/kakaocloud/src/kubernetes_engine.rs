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

    /// The cluster's kubeconfig (YAML); see [`api::parse_kubeconfig`] for
    /// the API server URL and CA.
    pub async fn kubeconfig(&self, name: &str) -> Result<String, Error> {
        let call = Call::get(
            Service::KubernetesEngine,
            api::paths::ke_kubeconfig(name),
            format!("kubeconfig of {name}"),
        );
        let reply = self.transport.idempotent(&call).await?;
        String::from_utf8(reply.body).map_err(|_| Error::Decode {
            message: "kubeconfig is not UTF-8".into(),
        })
    }

    /// API server URL and CA of the cluster, from its kubeconfig.
    pub async fn cluster_endpoint(&self, name: &str) -> Result<api::KubeconfigCluster, Error> {
        let yaml = self.kubeconfig(name).await?;
        api::parse_kubeconfig(&yaml).map_err(|message| Error::Decode { message })
    }

    /// Kubernetes versions Kubernetes Engine currently offers.
    pub async fn supported_versions(&self) -> Result<Vec<KubernetesVersion>, Error> {
        let call = Call::get(
            Service::KubernetesEngine,
            api::paths::KE_VERSIONS,
            "versions",
        );
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
