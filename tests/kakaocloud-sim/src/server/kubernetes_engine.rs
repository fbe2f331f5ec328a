//! Kubernetes Engine: clusters, their kubeconfig and node pools, versions, worker images.

use super::*;

pub(super) fn cluster_of(s: &Shared, project: usize, name: &str) -> Result<api::Cluster, Response> {
    let seed = &s.config.projects[project];
    if seed.cluster.name != name {
        return Err(not_found(&format!("cluster {name}")));
    }
    let version = s
        .config
        .versions
        .iter()
        .find(|v| v.minor == seed.cluster.kubernetes_version)
        .ok_or_else(|| not_found("cluster version"))?;
    let (host, port, _) = s.cluster_endpoint(project);
    let subnets = lock(&s.state).projects[project]
        .subnets
        .iter()
        .map(|sn| api::ClusterSubnet {
            id: sn.id.clone(),
            availability_zone: sn.zone.clone(),
            cidr_block: sn.cidr.clone(),
        })
        .collect();
    Ok(api::Cluster {
        id: seed.cluster.id.clone(),
        name: seed.cluster.name.clone(),
        description: "simulated Kubernetes Engine cluster".into(),
        api_version: "v1".into(),
        is_allocate_fip: false,
        version: api::ClusterVersion {
            minor_version: version.minor.clone(),
            patch_version: version.patch.clone(),
            is_deprecated: version.deprecated,
            eol: String::new(),
            next_version: String::new(),
        },
        status: api::ClusterStatus {
            phase: "Provisioned".into(),
        },
        failure_message: None,
        is_upgradable: false,
        vpc_info: api::VpcInfo {
            id: catalog::vpc_id(&seed.id),
            subnets,
        },
        network: Some(api::ClusterNetwork {
            cni: "cilium".into(),
            pod_cidr: "172.16.0.0/16".into(),
            service_cidr: "172.17.0.0/16".into(),
        }),
        control_plane_endpoint: Some(api::ControlPlaneEndpoint { host, port }),
        creator_info: api::CreatorInfo {
            id: "user-sim".into(),
            name: "simulator".into(),
        },
        created_at: Some("2026-01-01T00:00:00Z".into()),
    })
}

pub(super) async fn get_cluster(
    AxState(shared): S,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KE_CLUSTER, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        match cluster_of(&s, project, &name) {
            Ok(cluster) => s.reply(
                "GetK8sClusterResponseModel",
                StatusCode::OK,
                &api::ClusterResponse { cluster },
            ),
            Err(r) => r,
        }
    })
    .await
}

pub(super) async fn get_kubeconfig(
    AxState(shared): S,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KE_KUBECONFIG, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        if let Err(r) = cluster_of(&s, project, &name) {
            return r;
        }
        let (host, port, ca) = s.cluster_endpoint(project);
        let yaml = api::render_kubeconfig(&name, &format!("https://{host}:{port}"), ca.as_bytes());
        let mut r = (StatusCode::OK, yaml).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/yaml"),
        );
        r
    })
    .await
}

pub(super) async fn list_node_pools(
    AxState(shared): S,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KE_NODE_POOLS, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let cluster = match cluster_of(&s, project, &name) {
            Ok(c) => c,
            Err(r) => return r,
        };
        let seed = &s.config.projects[project];
        let version = s
            .config
            .versions
            .iter()
            .find(|v| v.minor == seed.cluster.kubernetes_version);
        // A node pool's image is `ImageInfoResponseModel`: the list's without `k8s_version`.
        let image = version
            .and_then(|v| catalog::worker_images(v).into_iter().next())
            .map(|i| api::WorkerImage {
                k8s_version: None,
                ..i
            });
        let flavor = s.find_flavor("m2a.large");
        let pools = match (image, flavor) {
            (Some(image), Some(flavor)) => vec![api::NodePool {
                id: format!("np-{}-system", seed.id),
                name: "system".into(),
                cluster_name: name.clone(),
                description: "system node pool".into(),
                autoscaling: api::NodePoolAutoscaling::default(),
                is_cordon: false,
                is_upgradable: false,
                is_hyper_threading: true,
                created_at: "2026-01-01T00:00:00Z".into(),
                failure_message: None,
                labels: Vec::new(),
                taints: Vec::new(),
                user_data: None,
                flavor: flavor.name.clone(),
                flavor_id: flavor.id.clone(),
                node_count: 1,
                is_gpu: false,
                is_bare_metal: false,
                image,
                security_groups: seed.security_groups.clone(),
                ssh_key_name: seed.key_pairs.first().cloned().unwrap_or_default(),
                status: api::NodePoolStatus {
                    phase: "Running".into(),
                    available_nodes: 1,
                    unavailable_nodes: 0,
                },
                version: cluster.version.patch_version.clone(),
                volume_size: 50,
                vpc_info: cluster.vpc_info.clone(),
            }],
            _ => Vec::new(),
        };
        s.reply(
            "GetK8sClusterNodePoolsResponseModel",
            StatusCode::OK,
            &api::NodePoolList { node_pools: pools },
        )
    })
    .await
}

pub(super) async fn list_versions(AxState(shared): S, headers: HeaderMap) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KE_VERSIONS, async move {
        if let Err(r) = s.authenticate(&headers) {
            return r;
        }
        let versions = s
            .config
            .versions
            .iter()
            .map(|v| api::KubernetesVersion {
                minor_version: v.minor.clone(),
                patch_version: v.patch.clone(),
                is_deprecated: v.deprecated,
                eol: String::new(),
                next_version: String::new(),
            })
            .collect();
        s.reply(
            "GetK8sUpgradeVersionsResponseModel",
            StatusCode::OK,
            &api::VersionList { versions },
        )
    })
    .await
}

pub(super) async fn list_worker_images(
    AxState(shared): S,
    headers: HeaderMap,
    Query(q): Params,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KE_WORKER_IMAGES, async move {
        if let Err(r) = s.authenticate(&headers) {
            return r;
        }
        let wanted = q.get("k8s_version");
        let images = s
            .config
            .versions
            .iter()
            .filter(|v| wanted.is_none_or(|w| *w == v.minor || *w == v.patch))
            .flat_map(catalog::worker_images)
            .collect();
        s.reply(
            "GetK8sImagesResponseModel",
            StatusCode::OK,
            &api::WorkerImageList { images },
        )
    })
    .await
}
