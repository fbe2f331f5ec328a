//! Virtual Machine (`bcs`): instances (create, list, get, update, delete, boot), flavors and
//! key pairs.

use super::*;

pub(super) async fn list_instances(
    AxState(shared): S,
    headers: HeaderMap,
    Query(q): Params,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::INSTANCES_LIST, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let lag = s.faults.list_lag_of();
        let items: Vec<api::Instance> = {
            let st = lock(&s.state);
            st.projects[project]
                .instances
                .iter()
                .filter(|i| i.created.elapsed() >= lag)
                .map(|i| &i.instance)
                .filter(|i| {
                    q.get("name")
                        .is_none_or(|n| i.name.as_deref().unwrap_or("").contains(n.as_str()))
                        && q.get("id").is_none_or(|id| &i.id == id)
                        && q.get("availability_zone")
                            .is_none_or(|z| i.availability_zone.as_ref() == Some(z))
                        && q.get("status").is_none_or(|st| {
                            i.status
                                .as_ref()
                                .is_some_and(|have| *have == api::InstanceStatus::parse(st))
                        })
                })
                .cloned()
                .collect()
        };
        match paginate(items, &q, &s.config) {
            Ok((instances, pagination)) => s.reply(
                "InstanceListModel",
                StatusCode::OK,
                &api::InstanceList {
                    instances,
                    pagination,
                },
            ),
            Err(r) => r,
        }
    })
    .await
}

pub(super) async fn get_instance(
    AxState(shared): S,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::INSTANCES_GET, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let st = lock(&s.state);
        match st.projects[project]
            .instances
            .iter()
            .find(|i| i.instance.id == id)
        {
            Some(i) => s.reply(
                "ResponseInstanceModel",
                StatusCode::OK,
                &api::InstanceResponse {
                    instance: i.instance.clone(),
                },
            ),
            None => not_found(&format!("instance {id}")),
        }
    })
    .await
}

pub(super) async fn update_instance(
    AxState(shared): S,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::INSTANCES_UPDATE, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let req = match parse_request::<api::UpdateInstanceBody>("BodyUpdateInstance", &body) {
            Ok(r) => r,
            Err(r) => return r,
        };
        if let Some(name) = &req.instance.name
            && !naming::is_valid_instance_name(name)
        {
            return invalid("invalid instance name");
        }
        if let Some(d) = &req.instance.description
            && d.chars().count() > api::INSTANCE_DESCRIPTION_MAX
        {
            return invalid(&format!(
                "description is longer than {} characters",
                api::INSTANCE_DESCRIPTION_MAX
            ));
        }
        let mut st = lock(&s.state);
        let Some(i) = st.projects[project]
            .instances
            .iter_mut()
            .find(|i| i.instance.id == id)
        else {
            return not_found(&format!("instance {id}"));
        };
        if let Some(name) = req.instance.name {
            i.instance.name = Some(name);
        }
        if let Some(d) = req.instance.description {
            i.instance.description = Some(d);
        }
        i.instance.updated_at = Some(now_rfc3339());
        let answer = updated(i);
        s.reply(
            "InstanceModelResponse",
            StatusCode::OK,
            &api::UpdatedInstanceResponse { instance: answer },
        )
    })
    .await
}

pub(super) async fn delete_instance(
    AxState(shared): S,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::INSTANCES_DELETE, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let mut st = lock(&s.state);
        let Some(pos) = st.projects[project]
            .instances
            .iter()
            .position(|i| i.instance.id == id)
        else {
            return not_found(&format!("instance {id}"));
        };
        let instance = &mut st.projects[project].instances[pos].instance;
        if instance.status == Some(api::InstanceStatus::Deleting) {
            return error(
                StatusCode::CONFLICT,
                error_codes::CONFLICT,
                &format!("instance {id} is already being deleted"),
            );
        }
        // Deleting for `delete_delay`, then gone (404): clients confirm by polling.
        instance.status = Some(api::InstanceStatus::Deleting);
        instance.task_state = Some("deleting".into());
        instance.updated_at = Some(now_rfc3339());
        drop(st);
        schedule_removal(&s, project, id);
        StatusCode::ACCEPTED.into_response()
    })
    .await
}

pub(super) async fn create_instance(
    AxState(shared): S,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::INSTANCES_CREATE, async move {
        let project = match s.authenticate(&headers) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let req = match parse_request::<api::CreateInstanceBody>("BodyCreateInstance", &body) {
            Ok(r) => r.instance,
            Err(r) => return r,
        };
        match create(&s, project, req) {
            Ok((instance, id)) => {
                schedule_boot(&s, id);
                s.reply(
                    "ResponseCreateInstanceModel",
                    StatusCode::ACCEPTED,
                    &instance,
                )
            }
            Err(r) => r,
        }
    })
    .await
}

pub(super) fn create(
    s: &Arc<Shared>,
    project: usize,
    req: api::CreateInstance,
) -> Result<(api::CreateInstanceResponse, String), Response> {
    let seed = &s.config.projects[project];
    if !naming::is_valid_instance_name(&req.name) {
        return Err(invalid("invalid instance name"));
    }
    if req.count.is_some_and(|c| c != 1) {
        return Err(invalid("only count 1 is supported"));
    }
    if req
        .description
        .as_ref()
        .is_some_and(|d| d.chars().count() > api::INSTANCE_DESCRIPTION_MAX)
    {
        return Err(invalid("description too long"));
    }
    // By ID only, as the real API: a controller passing a flavor *name*
    // must fail here, not in production.
    let flavor = s
        .config
        .flavors
        .iter()
        .find(|f| f.id == req.flavor_id)
        .cloned()
        .ok_or_else(|| invalid("unknown flavor_id"))?;
    let image_name = image_name(s, &req.image_id).ok_or_else(|| invalid("unknown image_id"))?;
    let [subnet_ref] = req.subnets.as_slice() else {
        return Err(invalid("exactly one subnet is required"));
    };
    let [volume] = req.volumes.as_slice() else {
        return Err(invalid("exactly one (root) volume is required"));
    };
    if !(1..=16384).contains(&volume.size) {
        return Err(invalid("volume size must be 1..=16384 GiB"));
    }
    if let Some(key) = &req.key_name
        && !seed.key_pairs.contains(key)
    {
        return Err(invalid(&format!("key pair {key} does not exist")));
    }
    for sg in &req.security_groups {
        if !seed.security_groups.contains(&sg.name) {
            return Err(invalid(&format!(
                "security group {} does not exist",
                sg.name
            )));
        }
    }
    let user_data = match &req.user_data {
        None => None,
        Some(b64) => match base64::engine::general_purpose::STANDARD.decode(b64) {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(_) => return Err(invalid("user_data is not base64")),
        },
    };
    let mut st = lock(&s.state);
    let subnet = st.projects[project]
        .subnets
        .iter()
        .find(|sn| sn.id == subnet_ref.id)
        .cloned()
        .ok_or_else(|| invalid("unknown subnet"))?;
    let zone = req
        .availability_zone
        .clone()
        .unwrap_or_else(|| subnet.zone.clone());
    if zone != subnet.zone {
        return Err(invalid(
            "availability_zone does not match the subnet's zone",
        ));
    }
    if !flavor.zones.contains(&zone) {
        return Err(error(
            StatusCode::CONFLICT,
            error_codes::INSUFFICIENT_CAPACITY,
            &format!(
                "insufficient capacity: {} is not offered in {zone}",
                flavor.name
            ),
        ));
    }
    // Quotas: instances and vCPUs of live (not deleted) instances.
    let live = &st.projects[project].instances;
    let count = live.len();
    let vcpus: u32 = live.iter().map(|i| i.flavor.vcpus).sum();
    if count >= seed.quota.max_instances as usize {
        return Err(error(
            StatusCode::FORBIDDEN,
            error_codes::QUOTA_EXCEEDED,
            "quota exceeded for instances",
        ));
    }
    if vcpus + flavor.vcpus > seed.quota.max_vcpus {
        return Err(error(
            StatusCode::FORBIDDEN,
            error_codes::QUOTA_EXCEEDED,
            "quota exceeded for cores (vCPU)",
        ));
    }
    let key = (flavor.id.clone(), zone.clone());
    let left = st.available.get(&key).copied().unwrap_or(0);
    if left == 0 || s.faults.capacity_blocked(&flavor.id, &flavor.name, &zone) {
        return Err(error(
            StatusCode::CONFLICT,
            error_codes::INSUFFICIENT_CAPACITY,
            &format!("insufficient capacity for {} in {zone}", flavor.name),
        ));
    }
    st.available.insert(key, left - 1);
    let host = st.next_host;
    st.next_host += 1;
    let private_ip = format!(
        "{}.{}.{}.{}",
        subnet.prefix[0],
        subnet.prefix[1],
        u32::from(subnet.prefix[2]) + host / 250,
        host % 250 + 4
    );
    let id = random_uuid();
    let now = now_rfc3339();
    let address = api::InstanceAddress {
        private_ip: Some(private_ip),
        public_ip: None,
        network_interface_id: Some(random_uuid()),
    };
    let root = api::AttachedVolume {
        id: random_uuid(),
        size: volume.size,
        is_delete_on_termination: volume.is_delete_on_termination,
        is_root: Some(true),
    };
    // The schema defaults `is_disable_hyper_threading` to true; it only acts where the flavor
    // allows turning hyper-threading off.
    let hyper_threading = !(req.is_disable_hyper_threading.unwrap_or(true)
        && flavor.hyper_threading_can_be_disabled());
    let instance = api::Instance {
        id: id.clone(),
        name: Some(req.name.clone()),
        description: req.description.clone(),
        flavor: Some(api::InstanceFlavor {
            id: flavor.id.clone(),
            name: Some(flavor.name.clone()),
            vcpus: Some(flavor.vcpus),
            memory_mb: Some(flavor.memory_mib),
            hw_type: (flavor.gpus > 0).then(|| "GPU".to_owned()),
            hw_count: (flavor.gpus > 0).then_some(flavor.gpus),
        }),
        // Ports and volumes are attached while building: `null` until then.
        addresses: None,
        is_hyper_threading: Some(hyper_threading),
        task_state: Some("spawning".into()),
        power_state: None,
        image: Some(api::InstanceImage {
            id: req.image_id.clone(),
            name: Some(image_name),
        }),
        vm_state: Some("building".into()),
        status: Some(api::InstanceStatus::Building),
        project_id: Some(seed.id.clone()),
        key_name: req.key_name.clone(),
        hostname: Some(req.name.clone()),
        availability_zone: Some(zone),
        attached_volumes: None,
        security_groups: Some(
            req.security_groups
                .iter()
                .map(|sg| api::InstanceSecurityGroup {
                    id: sg_id(&seed.id, &sg.name),
                    name: Some(sg.name.clone()),
                })
                .collect(),
        ),
        instance_type: Some("vm".into()),
        created_at: Some(now.clone()),
        updated_at: Some(now),
    };
    st.projects[project].instances.push(SimInstance {
        instance,
        user_data,
        flavor,
        created: std::time::Instant::now(),
        address,
        volume: root,
        user_id: format!("user-{}", seed.id),
    });
    let response = api::CreateInstanceResponse {
        instance: api::CreatedInstance {
            id: id.clone(),
            security_groups: req.security_groups.clone(),
            disk_config: Some("AUTO".into()),
        },
    };
    Ok((response, id))
}

pub(super) fn image_name(s: &Shared, id: &str) -> Option<String> {
    if let Some(i) = catalog::default_images().into_iter().find(|i| i.id == id) {
        return Some(i.name);
    }
    s.config
        .versions
        .iter()
        .flat_map(catalog::worker_images)
        .find(|w| w.id == id)
        .map(|w| w.name)
}

pub(super) fn schedule_boot(s: &Arc<Shared>, id: String) {
    let shared = Arc::clone(s);
    let delay = s.config.boot_delay;
    let task = tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let booted = finish_boot(&shared, &id);
        if let Some(booted) = booted {
            let hook = shared
                .hook
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if let Some(hook) = hook {
                hook(booted).await;
            }
        }
    });
    let mut boots = lock(&s.boots);
    boots.retain(|t| !t.is_finished());
    boots.push(task);
}

/// BUILD -> ACTIVE (or ERROR, or nothing when stuck). Returns the booted
/// instance when it went ACTIVE.
pub(super) fn finish_boot(s: &Shared, id: &str) -> Option<BootedInstance> {
    let mut st = lock(&s.state);
    let (project, inst) = st.projects.iter_mut().enumerate().find_map(|(p, ps)| {
        ps.instances
            .iter_mut()
            .find(|i| i.instance.id == id)
            .map(|i| (p, i))
    })?;
    if inst.instance.status != Some(api::InstanceStatus::Building) {
        return None;
    }
    let name = inst.instance.name.clone().unwrap_or_default();
    if s.faults.is_stuck(&name) {
        return None;
    }
    inst.instance.updated_at = Some(now_rfc3339());
    if s.faults.goes_to_error(&name) {
        inst.instance.status = Some(api::InstanceStatus::Error);
        inst.instance.vm_state = Some("error".into());
        return None;
    }
    inst.instance.status = Some(api::InstanceStatus::Active);
    inst.instance.vm_state = Some("active".into());
    inst.instance.power_state = Some("RUNNING".into());
    inst.instance.task_state = None;
    inst.instance.addresses = Some(vec![inst.address.clone()]);
    inst.instance.attached_volumes = Some(vec![inst.volume.clone()]);
    Some(BootedInstance {
        id: inst.instance.id.clone(),
        name,
        project_id: s.config.projects[project].id.clone(),
        flavor: BootedFlavor {
            id: inst.flavor.id.clone(),
            name: inst.flavor.name.clone(),
            vcpus: inst.flavor.vcpus,
            memory_mib: inst.flavor.memory_mib,
            gpus: inst.flavor.gpus,
        },
        zone: inst.instance.availability_zone.clone().unwrap_or_default(),
        user_data: inst.user_data.clone(),
        image_id: inst
            .instance
            .image
            .as_ref()
            .map(|i| i.id.clone())
            .unwrap_or_default(),
        private_ip: inst.address.private_ip.clone().unwrap_or_default(),
    })
}

/// The `PUT` answer (official `BcsInstanceV1ApiUpdateInstanceModelInstanceModel`).
fn updated(i: &SimInstance) -> api::UpdatedInstance {
    let inst = &i.instance;
    api::UpdatedInstance {
        id: inst.id.clone(),
        name: inst.name.clone(),
        description: Some(inst.description.clone().unwrap_or_default()),
        project_id: inst.project_id.clone(),
        user_id: Some(i.user_id.clone()),
        flavor: Some(api::UpdatedInstanceFlavor {
            vcpus: Some(i.flavor.vcpus),
            ram: Some(i.flavor.memory_mib),
            disk: Some(0),
            original_name: Some(i.flavor.name.clone()),
        }),
        availability_zone: inst.availability_zone.clone(),
        vm_state: inst.vm_state.clone(),
        security_groups: inst.security_groups.as_ref().map(|groups| {
            groups
                .iter()
                .filter_map(|g| g.name.clone())
                .map(|name| api::SecurityGroupRef { name })
                .collect()
        }),
        created_at: inst.created_at.clone(),
        updated_at: inst.updated_at.clone(),
    }
}

/// Ends a deletion after the configured delay: the instance leaves the project (404 from then
/// on) and its capacity returns.
fn schedule_removal(s: &Arc<Shared>, project: usize, id: String) {
    let shared = Arc::clone(s);
    let delay = s.config.delete_delay;
    let task = tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        remove(&shared, project, &id);
    });
    let mut boots = lock(&s.boots);
    boots.retain(|t| !t.is_finished());
    boots.push(task);
}

fn remove(s: &Shared, project: usize, id: &str) {
    let mut st = lock(&s.state);
    let Some(pos) = st.projects[project]
        .instances
        .iter()
        .position(|i| i.instance.id == id)
    else {
        return;
    };
    let mut gone = st.projects[project].instances.remove(pos);
    gone.instance.status = Some(api::InstanceStatus::Deleted);
    gone.instance.vm_state = Some("deleted".into());
    gone.instance.task_state = None;
    gone.instance.updated_at = Some(now_rfc3339());
    if let Some(zone) = gone.instance.availability_zone.clone()
        && let Some(n) = st.available.get_mut(&(gone.flavor.id.clone(), zone))
    {
        *n = n.saturating_add(1);
    }
    st.projects[project].deleted.push(gone);
}
