//! Subnets (VPC), security groups (Network) and images (Image): the read-only catalog
//! services.

use super::*;

pub(super) async fn list_flavors(
    AxState(shared): S,
    headers: HeaderMap,
    Query(q): Params,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::FLAVORS, async move {
        if let Err(r) = s.authenticate(&headers) {
            return r;
        }
        let flavors: Vec<api::Flavor> = {
            let st = lock(&s.state);
            s.config
                .flavors
                .iter()
                .map(|f| {
                    let available = f
                        .zones
                        .iter()
                        .map(|z| {
                            (
                                z.clone(),
                                st.available
                                    .get(&(f.id.clone(), z.clone()))
                                    .copied()
                                    .unwrap_or(0),
                            )
                        })
                        .collect();
                    f.to_api(&available)
                })
                .collect()
        };
        match paginate(flavors, &q, &s.config) {
            Ok((flavors, pagination)) => s.reply(
                "FlavorListModel",
                StatusCode::OK,
                &api::FlavorList {
                    flavors,
                    pagination,
                },
            ),
            Err(r) => r,
        }
    })
    .await
}

pub(super) async fn list_keypairs(
    AxState(shared): S,
    headers: HeaderMap,
    Query(q): Params,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::KEYPAIRS, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let items: Vec<api::KeyPair> = s.config.projects[project]
            .key_pairs
            .iter()
            .map(|name| api::KeyPair {
                id: format!("kp-{name}"),
                name: Some(name.clone()),
                fingerprint: Some("SHA256:c2ltdWxhdGVkLWtleS1maW5nZXJwcmludA".into()),
                public_key: Some(format!(
                    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAISIMULATED {name}"
                )),
                key_type: Some("ssh".into()),
            })
            .collect();
        match paginate(items, &q, &s.config) {
            Ok((keypairs, pagination)) => s.reply(
                "KeypairListModel",
                StatusCode::OK,
                &api::KeyPairList {
                    keypairs,
                    pagination,
                },
            ),
            Err(r) => r,
        }
    })
    .await
}

pub(super) async fn list_subnets(
    AxState(shared): S,
    headers: HeaderMap,
    Query(q): Params,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::SUBNETS, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let pid = s.config.projects[project].id.clone();
        let items: Vec<api::Subnet> = lock(&s.state).projects[project]
            .subnets
            .iter()
            .map(|sn| api::Subnet {
                id: sn.id.clone(),
                name: Some(sn.name.clone()),
                availability_zone: Some(sn.zone.clone()),
                cidr_block: Some(sn.cidr.clone()),
                project_id: Some(pid.clone()),
                operating_status: Some("ONLINE".into()),
                provisioning_status: Some("ACTIVE".into()),
                vpc_id: Some(catalog::vpc_id(&pid)),
                vpc_name: Some("main".into()),
            })
            .collect();
        match paginate(items, &q, &s.config) {
            Ok((subnets, pagination)) => s.reply(
                "SubnetListModel",
                StatusCode::OK,
                &api::SubnetList {
                    subnets,
                    pagination,
                },
            ),
            Err(r) => r,
        }
    })
    .await
}

pub(super) async fn list_security_groups(
    AxState(shared): S,
    headers: HeaderMap,
    Query(q): Params,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::SECURITY_GROUPS, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let seed = &s.config.projects[project];
        let items: Vec<api::SecurityGroup> = seed
            .security_groups
            .iter()
            .map(|name| api::SecurityGroup {
                id: sg_id(&seed.id, name),
                name: Some(name.clone()),
                description: Some(format!("{name} security group")),
                project_id: Some(seed.id.clone()),
                tags: Vec::new(),
            })
            .collect();
        match paginate(items, &q, &s.config) {
            Ok((security_groups, pagination)) => s.reply(
                "SecurityGroupListModel",
                StatusCode::OK,
                &api::SecurityGroupList {
                    security_groups,
                    pagination,
                },
            ),
            Err(r) => r,
        }
    })
    .await
}

pub(super) async fn list_images(
    AxState(shared): S,
    headers: HeaderMap,
    Query(q): Params,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::IMAGES, async move {
        if let Err(r) = s.authenticate(&headers) {
            return r;
        }
        let os_info = |distro: &str| {
            Some(api::ImageOsInfo {
                distro: Some(distro.to_string()),
                architecture: Some("x86_64".into()),
                os_type: Some("linux".into()),
            })
        };
        let mut items: Vec<api::Image> = catalog::default_images()
            .into_iter()
            .map(|i| api::Image {
                id: i.id,
                name: Some(i.name),
                status: Some("active".into()),
                visibility: Some("public".into()),
                description: None,
                min_disk: Some(30),
                instance_type: Some(api::InstanceKind::Vm),
                os_info: os_info(&i.distro),
            })
            .collect();
        for w in s.config.versions.iter().flat_map(catalog::worker_images) {
            items.push(api::Image {
                id: w.id,
                name: Some(w.name),
                status: Some("active".into()),
                visibility: Some("public".into()),
                description: Some(w.key_package),
                min_disk: Some(30),
                instance_type: Some(api::InstanceKind::parse(&w.instance_type)),
                os_info: os_info(&w.os_distro),
            });
        }
        if let Some(name) = q.get("name") {
            items.retain(|i| i.name.as_deref().unwrap_or("").contains(name.as_str()));
        }
        match paginate(items, &q, &s.config) {
            Ok((images, pagination)) => s.reply(
                "ImageListModel",
                StatusCode::OK,
                &api::ImageList { images, pagination },
            ),
            Err(r) => r,
        }
    })
    .await
}
