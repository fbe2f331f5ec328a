// Test set-up reads better as seed-then-adjust.
#![allow(clippy::field_reassign_with_default, clippy::cloned_ref_to_slice_refs)]
//! The KakaoCloud client against the simulator: every call, pagination,
//! token caching and refresh, retries on injected faults, duplicate-safe
//! create, typed errors, and credentials kept out of errors and logs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt as _;
use kakaocloud::api::InstanceStatus;
use kakaocloud::ownership::{Keyring, VerifyError, compose_description};
use kakaocloud::{
    Client, Config, Credentials, DeleteOutcome, DeleteOwnedError, Error, InstanceFilter,
    LaunchSpec, naming,
};
use kakaocloud_sim::{BootedInstance, ProjectSeed, Quota, SimConfig, Simulator, routes};

fn fast() -> SimConfig {
    SimConfig {
        boot_delay: Duration::from_millis(30),
        // Long enough that "still deleting" is observable without a race.
        delete_delay: Duration::from_secs(1),
        ..SimConfig::default()
    }
}

async fn start(config: SimConfig) -> (Simulator, Client) {
    let sim = Simulator::start(config).await.expect("simulator starts");
    let client = Client::new(sim.client_config(), sim.credentials()).expect("client");
    (sim, client)
}

fn client_with(sim: &Simulator, tweak: impl FnOnce(&mut Config)) -> Client {
    let mut config = sim.client_config();
    tweak(&mut config);
    Client::new(config, sim.credentials()).expect("client")
}

pub(crate) fn spec(name: &str) -> LaunchSpec {
    LaunchSpec {
        name: name.to_string(),
        flavor_id: kakaocloud_sim::catalog::flavor_id("m2a.large").expect("catalog flavor"),
        image_id: "wi-k8s135-ubuntu2204".to_string(),
        subnet_id: "subnet-proj-1-a".to_string(),
        security_groups: vec!["default".to_string()],
        key_name: Some("demo-key".to_string()),
        root_volume_gib: 50,
        delete_root_volume_on_termination: true,
        user_data: Some("#cloud-config\nruncmd: [echo hello]\n".to_string()),
        availability_zone: Some("kr-central-2-a".to_string()),
        description: None,
        disable_hyper_threading: false,
    }
}

/// Polls `check` until it returns `Some`, failing the test after `within`.
async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn catalog_calls_return_the_simulated_catalog() {
    let (sim, client) = start(fast()).await;

    let flavors = client.flavors().list().await.unwrap();
    let m2a = flavors
        .iter()
        .find(|f| f.name.as_deref() == Some("m2a.large"))
        .expect("m2a.large");
    assert_eq!((m2a.vcpus, m2a.memory_mb), (Some(2), Some(8192)));
    assert_eq!(m2a.zones().len(), 3, "offered in three zones");
    assert!(
        flavors.iter().any(|f| f.hw_count.unwrap_or(0) > 0),
        "a GPU flavor"
    );

    let subnets = client.subnets().list().await.unwrap();
    let mut zones: Vec<_> = subnets
        .iter()
        .filter_map(|s| s.availability_zone.clone())
        .collect();
    zones.sort();
    assert_eq!(
        zones,
        ["kr-central-2-a", "kr-central-2-b", "kr-central-2-c"]
    );

    let groups = client.security_groups().list().await.unwrap();
    assert!(groups.iter().any(|g| g.name.as_deref() == Some("default")));
    let keys = client.key_pairs().list().await.unwrap();
    assert_eq!(
        keys.iter()
            .filter_map(|k| k.name.as_deref())
            .collect::<Vec<_>>(),
        ["demo-key"]
    );
    let images = client.images().list().await.unwrap();
    assert!(images.iter().any(|i| i.id == "wi-k8s135-ubuntu2204"));

    let ke = client.kubernetes_engine();
    let cluster = ke.cluster("demo-cluster").await.unwrap();
    assert_eq!(cluster.version.minor_version, "1.35");
    assert_eq!(cluster.vpc_info.subnets.len(), 3);
    let versions = ke.supported_versions().await.unwrap();
    assert_eq!(
        versions
            .iter()
            .map(|v| v.minor_version.as_str())
            .collect::<Vec<_>>(),
        ["1.34", "1.35"]
    );
    let workers = ke.worker_images("1.34").await.unwrap();
    assert!(!workers.is_empty());
    assert!(
        workers
            .iter()
            .all(|w| w.key_package.starts_with("kubernetes-1.34"))
    );
    let pools = ke.node_pools("demo-cluster").await.unwrap();
    assert_eq!(pools.len(), 1);
    assert!(matches!(
        ke.cluster("other").await,
        Err(Error::NotFound { .. })
    ));

    sim.set_cluster_endpoint(
        "10.1.2.3",
        6443,
        "-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----\n",
    );
    let endpoint = ke.cluster_endpoint("demo-cluster").await.unwrap();
    assert_eq!(endpoint.server, "https://10.1.2.3:6443");
    assert!(String::from_utf8(endpoint.ca_pem).unwrap().contains("QUJD"));
    sim.shutdown().await;
}

#[tokio::test]
async fn list_calls_follow_pagination() {
    let sim = Simulator::start(fast()).await.unwrap();
    let client = client_with(&sim, |c| c.page_limit = 4);
    let total = SimConfig::default().flavors.len();
    assert!(total > 8, "catalog large enough to need several pages");
    let flavors = client.flavors().list().await.unwrap();
    assert_eq!(flavors.len(), total);
    let mut ids: Vec<_> = flavors.iter().map(|f| f.id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), total, "no page repeated or skipped");
    assert_eq!(sim.request_count(routes::FLAVORS), total.div_ceil(4));

    for i in 0..6 {
        client
            .instances()
            .create(&spec(&format!("kk-page-{i}")))
            .await
            .unwrap();
    }
    let before = sim.request_count(routes::INSTANCES_LIST);
    let all = client
        .instances()
        .list(&InstanceFilter::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 6);
    assert_eq!(sim.request_count(routes::INSTANCES_LIST) - before, 2);
    sim.shutdown().await;
}

#[tokio::test]
async fn instance_lifecycle_create_list_get_update_delete() {
    let (sim, client) = start(fast()).await;
    let booted: Arc<Mutex<Vec<BootedInstance>>> = Arc::default();
    let seen = Arc::clone(&booted);
    sim.set_boot_hook(move |b| {
        seen.lock().unwrap().push(b);
        async {}.boxed()
    });

    let name = naming::instance_name("demo-cluster", "default-abc12");
    let created = client.instances().create(&spec(&name)).await.unwrap();
    assert_eq!(created.name.as_deref(), Some(name.as_str()));
    assert_eq!(created.status, Some(InstanceStatus::Building));
    assert_eq!(created.availability_zone.as_deref(), Some("kr-central-2-a"));

    let id = created.id.clone();
    let active = eventually(Duration::from_secs(5), "ACTIVE", || {
        let (client, id) = (client.clone(), id.clone());
        async move {
            let i = client.instances().get(&id).await.unwrap();
            (i.status == Some(InstanceStatus::Active)).then_some(i)
        }
    })
    .await;
    assert!(
        active
            .addresses
            .as_ref()
            .expect("an active instance has its port")[0]
            .private_ip
            .as_deref()
            .unwrap()
            .starts_with("10.0.0.")
    );

    let hook = booted.lock().unwrap().clone();
    assert_eq!(hook.len(), 1, "boot hook called once");
    assert_eq!(hook[0].id, id);
    assert_eq!(hook[0].flavor.name, "m2a.large");
    assert_eq!(
        (
            hook[0].flavor.vcpus,
            hook[0].flavor.memory_mib,
            hook[0].flavor.gpus
        ),
        (2, 8192, 0)
    );
    assert_eq!(
        hook[0].user_data.as_deref(),
        Some("#cloud-config\nruncmd: [echo hello]\n")
    );
    assert_eq!(hook[0].image_id, "wi-k8s135-ubuntu2204");

    // Filters: exact lookup by name, zone, status.
    client
        .instances()
        .create(&spec(&format!("{name}-2")))
        .await
        .unwrap();
    let found = client
        .instances()
        .find_by_name(&name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        found.id, id,
        "name filter is a substring match; find_by_name is exact"
    );
    let in_b = InstanceFilter {
        availability_zone: Some("kr-central-2-b".into()),
        ..Default::default()
    };
    assert!(client.instances().list(&in_b).await.unwrap().is_empty());

    let updated = client
        .instances()
        .update_description(&id, "hello world")
        .await
        .unwrap();
    assert_eq!(updated.description.as_deref(), Some("hello world"));
    assert_eq!(
        client
            .instances()
            .get(&id)
            .await
            .unwrap()
            .description
            .as_deref(),
        Some("hello world")
    );
    let too_long = "x".repeat(101);
    assert!(matches!(
        client.instances().update_description(&id, &too_long).await,
        Err(Error::InvalidInput { .. })
    ));

    // Deleting goes through the ownership check only: tag it, delete, delete again.
    let keyring = Keyring::from_json(
        br#"{"activeKeyID":"k1","keys":[{"id":"k1","key":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}]}"#,
    )
    .unwrap();
    let tag = keyring.sign("demo-cluster", "claim", &id).unwrap();
    client
        .instances()
        .update_description(&id, &compose_description("hello world", &tag))
        .await
        .unwrap();
    let (outcome, _) = client
        .instances()
        .delete_owned(&id, &keyring, "demo-cluster", "claim")
        .await
        .unwrap();
    assert_eq!(outcome, DeleteOutcome::Requested);
    // Asked again while it is deleting: no second delete is sent, and it is not gone yet.
    let deletes = sim.request_count(routes::INSTANCES_DELETE);
    let (again, _) = client
        .instances()
        .delete_owned(&id, &keyring, "demo-cluster", "claim")
        .await
        .unwrap();
    assert_eq!(again, DeleteOutcome::InProgress);
    assert_eq!(sim.request_count(routes::INSTANCES_DELETE), deletes);
    // Confirmed like the official provider does: until the instance is not found.
    eventually(Duration::from_secs(5), "instance gone (404)", || {
        let (client, id) = (client.clone(), id.clone());
        async move {
            matches!(
                client.instances().get(&id).await,
                Err(Error::NotFound { .. })
            )
            .then_some(())
        }
    })
    .await;
    assert!(matches!(
        client
            .instances()
            .delete_owned(&id, &keyring, "demo-cluster", "claim")
            .await,
        Err(DeleteOwnedError::Api(Error::NotFound { .. }))
    ));
    assert!(matches!(
        client.instances().get(&id).await,
        Err(Error::NotFound { .. })
    ));
    let deleted = sim.instances_including_deleted();
    assert!(
        deleted
            .iter()
            .any(|i| i.id == id && i.status == Some(InstanceStatus::Deleted))
    );
    assert!(sim.instances().iter().all(|i| i.id != id));
    sim.shutdown().await;
}

#[tokio::test]
async fn fifty_concurrent_callers_share_one_token_request() {
    let (sim, client) = start(fast()).await;
    let calls = (0..50).map(|_| {
        let client = client.clone();
        tokio::spawn(async move { client.subnets().list().await.map(|s| s.len()) })
    });
    for result in futures::future::join_all(calls).await {
        assert_eq!(result.unwrap().unwrap(), 3);
    }
    assert_eq!(sim.request_count(routes::TOKEN), 1);
    assert_eq!(sim.request_count(routes::SUBNETS), 50);
    assert_eq!(client.project_id().await.as_deref(), Some("proj-1"));
    sim.shutdown().await;
}

#[tokio::test]
async fn token_is_refreshed_before_expiry_once_under_concurrency() {
    // 2 s tokens: the client refreshes at 1.5 s (a quarter early).
    let config = SimConfig {
        token_ttl: Duration::from_secs(2),
        ..fast()
    };
    let (sim, client) = start(config).await;
    client.authenticate().await.unwrap();
    assert_eq!(sim.request_count(routes::TOKEN), 1);
    client.subnets().list().await.unwrap();
    assert_eq!(sim.request_count(routes::TOKEN), 1, "cached");

    tokio::time::sleep(Duration::from_millis(1600)).await;
    let calls = (0..50).map(|_| {
        let client = client.clone();
        tokio::spawn(async move { client.subnets().list().await.map(|_| ()) })
    });
    for result in futures::future::join_all(calls).await {
        result.unwrap().unwrap();
    }
    assert_eq!(sim.request_count(routes::TOKEN), 2, "exactly one refresh");
    sim.shutdown().await;
}

#[tokio::test]
async fn a_rejected_token_is_replaced_and_the_call_succeeds() {
    let (sim, client) = start(fast()).await;
    client.authenticate().await.unwrap();
    sim.revoke_tokens();
    assert_eq!(client.subnets().list().await.unwrap().len(), 3);
    assert_eq!(sim.request_count(routes::TOKEN), 2);
    sim.shutdown().await;
}

#[tokio::test]
async fn retries_throttling_server_errors_and_dropped_connections() {
    let (sim, client) = start(fast()).await;
    let faults = sim.faults();

    faults.throttle(routes::FLAVORS, 2, Duration::from_millis(50));
    let started = tokio::time::Instant::now();
    client.flavors().list().await.unwrap();
    assert_eq!(sim.request_count(routes::FLAVORS), 3);
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "Retry-After honoured"
    );

    faults.server_error(routes::SUBNETS, 2, 503);
    client.subnets().list().await.unwrap();
    assert_eq!(sim.request_count(routes::SUBNETS), 3);

    faults.drop_connection(routes::KEYPAIRS, 1);
    client.key_pairs().list().await.unwrap();
    assert_eq!(sim.request_count(routes::KEYPAIRS), 2);

    faults.server_error(routes::TOKEN, 1, 502);
    let fresh = Client::new(sim.client_config(), sim.credentials()).unwrap();
    fresh.authenticate().await.unwrap();

    // Throttling is retried for a time budget (2 s here), not a count: ten 429s in a row, twice
    // the attempts a 5xx gets, still end in success, as with the official provider.
    faults.throttle(routes::IMAGES, 10, Duration::from_millis(1));
    client.images().list().await.unwrap();
    assert_eq!(sim.request_count(routes::IMAGES), 11);
    faults.server_error(routes::IMAGES, 10, 503);
    assert!(matches!(
        client.images().list().await,
        Err(Error::Server { status: 503, .. })
    ));
    assert_eq!(sim.request_count(routes::IMAGES), 16, "5xx: 5 attempts");
    // A Retry-After beyond the budget ends the call at once, with the server's hint.
    faults.throttle(routes::KEYPAIRS, 1, Duration::from_secs(3));
    let before = sim.request_count(routes::KEYPAIRS);
    let err = client.key_pairs().list().await.unwrap_err();
    assert_eq!(
        err,
        Error::Throttled {
            retry_after: Some(Duration::from_secs(3))
        }
    );
    assert_eq!(sim.request_count(routes::KEYPAIRS), before + 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn timeouts_are_retried() {
    let sim = Simulator::start(fast()).await.unwrap();
    let client = client_with(&sim, |c| {
        c.retry.request_timeout = Duration::from_millis(300)
    });
    client.authenticate().await.unwrap();
    sim.faults()
        .latency(routes::SECURITY_GROUPS, Duration::from_millis(600));
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { client.security_groups().list().await })
    };
    // After the first attempt has timed out, the server answers fast again.
    eventually(Duration::from_secs(5), "first attempt", || async {
        (sim.request_count(routes::SECURITY_GROUPS) >= 1).then_some(())
    })
    .await;
    sim.faults()
        .latency(routes::SECURITY_GROUPS, Duration::ZERO);
    assert!(!waiting.await.unwrap().unwrap().is_empty());
    assert!(sim.request_count(routes::SECURITY_GROUPS) >= 2);
    sim.shutdown().await;
}

#[tokio::test]
async fn create_that_happened_despite_a_dropped_answer_is_not_repeated() {
    let (sim, client) = start(fast()).await;
    sim.faults().drop_after_commit(routes::INSTANCES_CREATE, 1);
    let name = naming::instance_name("demo-cluster", "dropped-1");
    let instance = client.instances().create(&spec(&name)).await.unwrap();
    assert_eq!(instance.name.as_deref(), Some(name.as_str()));
    let same_name: Vec<_> = sim
        .instances()
        .into_iter()
        .filter(|i| i.name.as_deref() == Some(&name))
        .collect();
    assert_eq!(same_name.len(), 1, "exactly one instance");
    assert_eq!(same_name[0].id, instance.id);
    assert_eq!(
        sim.request_count(routes::INSTANCES_CREATE),
        1,
        "create sent once"
    );

    // A retried create of the same NodeClaim (e.g. after a controller
    // restart) finds the instance instead of launching another.
    let again = client.instances().create(&spec(&name)).await.unwrap();
    assert_eq!(again.id, instance.id);
    assert_eq!(sim.request_count(routes::INSTANCES_CREATE), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn create_that_timed_out_after_commit_is_not_repeated() {
    let sim = Simulator::start(fast()).await.unwrap();
    let client = client_with(&sim, |c| {
        c.retry.request_timeout = Duration::from_millis(300)
    });
    sim.faults()
        .delay_after_commit(routes::INSTANCES_CREATE, 1, Duration::from_millis(800));
    let name = naming::instance_name("demo-cluster", "slow-1");
    let instance = client.instances().create(&spec(&name)).await.unwrap();
    let same_name = sim
        .instances()
        .into_iter()
        .filter(|i| i.name.as_deref() == Some(&name))
        .count();
    assert_eq!(same_name, 1);
    assert_eq!(sim.request_count(routes::INSTANCES_CREATE), 1);
    assert_eq!(
        client.instances().get(&instance.id).await.unwrap().id,
        instance.id
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn create_rejected_before_commit_is_retried() {
    let (sim, client) = start(fast()).await;
    sim.faults().server_error(routes::INSTANCES_CREATE, 1, 500);
    sim.faults().drop_connection(routes::INSTANCES_CREATE, 1);
    let name = naming::instance_name("demo-cluster", "retry-1");
    client.instances().create(&spec(&name)).await.unwrap();
    assert_eq!(sim.request_count(routes::INSTANCES_CREATE), 3);
    assert_eq!(sim.instances().len(), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn errors_are_typed() {
    let mut project = ProjectSeed::default();
    project.quota = Quota {
        max_instances: 2,
        max_vcpus: 400,
    };
    let (sim, client) = start(SimConfig {
        projects: vec![project],
        ..fast()
    })
    .await;

    assert!(matches!(
        client.instances().get("no-such-id").await,
        Err(Error::NotFound { .. })
    ));

    sim.faults().capacity_error("m2a.large", "kr-central-2-a");
    let err = client
        .instances()
        .create(&spec("kk-capacity-1"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InsufficientCapacity { .. }), "{err:?}");
    assert!(err.is_capacity());
    sim.faults()
        .clear_capacity_error("m2a.large", "kr-central-2-a");

    sim.set_available("m2a.large", "kr-central-2-a", 0);
    let flavors = client.flavors().list().await.unwrap();
    let m2a = flavors
        .iter()
        .find(|f| f.name.as_deref() == Some("m2a.large"))
        .unwrap();
    assert_eq!(m2a.available_in("kr-central-2-a"), Some(0));
    assert!(matches!(
        client.instances().create(&spec("kk-capacity-2")).await,
        Err(Error::InsufficientCapacity { .. })
    ));
    sim.set_available("m2a.large", "kr-central-2-a", 10);

    client
        .instances()
        .create(&spec("kk-quota-1"))
        .await
        .unwrap();
    client
        .instances()
        .create(&spec("kk-quota-2"))
        .await
        .unwrap();
    let err = client
        .instances()
        .create(&spec("kk-quota-3"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::QuotaExceeded { .. }), "{err:?}");

    let mut bad = spec("kk-invalid-1");
    bad.subnet_id = "subnet-missing".into();
    assert!(matches!(
        client.instances().create(&bad).await,
        Err(Error::InvalidInput { .. })
    ));
    let mut bad = spec("kk-invalid-2");
    bad.availability_zone = Some("kr-central-2-b".into());
    assert!(matches!(
        client.instances().create(&bad).await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        client.instances().create(&spec("-not-a-name")).await,
        Err(Error::InvalidInput { .. })
    ));

    let wrong = Client::new(
        sim.client_config(),
        Credentials::new("test-cred-id", "wrong-secret").unwrap(),
    )
    .unwrap();
    assert!(matches!(
        wrong.authenticate().await,
        Err(Error::Unauthorized { .. })
    ));
    assert!(matches!(
        wrong.subnets().list().await,
        Err(Error::Unauthorized { .. })
    ));
    assert_eq!(
        sim.request_count(routes::SUBNETS),
        0,
        "no service call without a token"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn instances_can_fail_or_hang_in_build() {
    let (sim, client) = start(fast()).await;
    sim.faults().go_to_error("kk-broken");
    sim.faults().stuck_in_build("kk-stuck");
    let broken = client
        .instances()
        .create(&spec("kk-broken-1"))
        .await
        .unwrap();
    let stuck = client
        .instances()
        .create(&spec("kk-stuck-1"))
        .await
        .unwrap();
    let fine = client.instances().create(&spec("kk-fine-1")).await.unwrap();
    eventually(Duration::from_secs(5), "ERROR and ACTIVE", || {
        let client = client.clone();
        let (b, f) = (broken.id.clone(), fine.id.clone());
        async move {
            let b = client.instances().get(&b).await.unwrap().status;
            let f = client.instances().get(&f).await.unwrap().status;
            (b == Some(InstanceStatus::Error) && f == Some(InstanceStatus::Active)).then_some(())
        }
    })
    .await;
    // The fine one booted after the stuck one was created: the stuck one had its chance.
    assert_eq!(
        client.instances().get(&stuck.id).await.unwrap().status,
        Some(InstanceStatus::Building)
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn delete_owned_refuses_instances_whose_tag_does_not_verify() {
    let (sim, client) = start(fast()).await;
    let keyring = Keyring::from_json(
        br#"{"activeKeyID":"k1","keys":[{"id":"k1","key":"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}]}"#,
    )
    .unwrap();
    let ours = client
        .instances()
        .create(&spec("kk-demo-ours"))
        .await
        .unwrap();
    let theirs = client
        .instances()
        .create(&spec("kk-demo-theirs"))
        .await
        .unwrap();
    let tag = keyring.sign("demo-cluster", "ours", &ours.id).unwrap();
    client
        .instances()
        .update_description(&ours.id, &compose_description("worker", &tag))
        .await
        .unwrap();
    // A copy of our tag on another instance does not make it ours.
    client
        .instances()
        .update_description(&theirs.id, &tag)
        .await
        .unwrap();

    match client
        .instances()
        .delete_owned(&theirs.id, &keyring, "demo-cluster", "ours")
        .await
    {
        Err(DeleteOwnedError::NotOwned(VerifyError::BadSignature)) => {}
        other => panic!("expected a refusal, got {other:?}"),
    }
    match client
        .instances()
        .delete_owned(&ours.id, &keyring, "other-cluster", "ours")
        .await
    {
        Err(DeleteOwnedError::NotOwned(_)) => {}
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Our cluster's instance, but the tag names another NodeClaim: a claim whose providerID
    // points at it must not delete it (its own claim drains it first).
    match client
        .instances()
        .delete_owned(&ours.id, &keyring, "demo-cluster", "someone-else")
        .await
    {
        Err(DeleteOwnedError::NotOwned(VerifyError::OtherClaim { tagged, expected })) => {
            assert_eq!(
                (tagged.as_str(), expected.as_str()),
                ("ours", "someone-else")
            );
        }
        other => panic!("expected a refusal naming the other claim, got {other:?}"),
    }
    assert_eq!(sim.instances().len(), 2, "nothing deleted");
    let (outcome, owner) = client
        .instances()
        .delete_owned(&ours.id, &keyring, "demo-cluster", "ours")
        .await
        .unwrap();
    assert_eq!(outcome, DeleteOutcome::Requested);
    assert_eq!(owner.nodeclaim, "ours");
    assert_eq!(
        sim.instances()
            .iter()
            .filter(|i| i.status != Some(InstanceStatus::Deleting))
            .map(|i| i.id.clone())
            .collect::<Vec<_>>(),
        [theirs.id.clone()]
    );
    sim.shutdown().await;
}

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn credentials_and_tokens_never_appear_in_debug_errors_or_logs() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (sim, client) = start(fast()).await;
    let secret = "test-cred-secret";
    let creds = sim.credentials();
    assert!(!format!("{creds:?}").contains(secret));
    assert!(!format!("{client:?}").contains(secret));

    // Exercise success, retries and failures with logging on.
    sim.faults().server_error(routes::TOKEN, 1, 503);
    client.flavors().list().await.unwrap();
    sim.faults()
        .throttle(routes::SUBNETS, 1, Duration::from_millis(1));
    client.subnets().list().await.unwrap();
    let bad_secret = "definitely-not-the-secret-42";
    let wrong = Client::new(
        sim.client_config(),
        Credentials::new("test-cred-id", bad_secret).unwrap(),
    )
    .unwrap();
    let err = wrong.authenticate().await.unwrap_err();
    for shown in [format!("{err}"), format!("{err:?}")] {
        assert!(!shown.contains(bad_secret), "{shown}");
    }
    sim.faults().drop_after_commit(routes::INSTANCES_CREATE, 1);
    let mut launch = spec("kk-secret-check");
    launch.user_data = Some("bootstrap-token: abcdef.0123456789abcdef".into());
    client.instances().create(&launch).await.unwrap();

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("issued KakaoCloud API token"),
        "logging was captured: {logs}"
    );
    for needle in [secret, bad_secret, "0123456789abcdef"] {
        assert!(!logs.contains(needle), "{needle:?} leaked into logs");
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn a_fenced_client_sends_nothing_once_its_fence_closes() {
    let (sim, client) = start(fast()).await;
    let fence = kakaocloud::Fence::closed();
    let fenced = client.fenced(fence.clone());
    let requests = || sim.request_counts().values().sum::<usize>();

    let before = requests();
    assert!(matches!(fenced.flavors().list().await, Err(Error::Fenced)));
    assert!(matches!(fenced.authenticate().await, Err(Error::Fenced)));
    assert_eq!(requests(), before, "closed: not even a token request");

    fence.open_until(std::time::Instant::now() + Duration::from_secs(60));
    assert!(!fenced.flavors().list().await.unwrap().is_empty());
    assert!(requests() > before);

    // Closing at a deadline (what a leader's missed renewal does): nothing after it.
    fence.open_until(std::time::Instant::now() + Duration::from_millis(200));
    tokio::time::sleep(Duration::from_millis(250)).await;
    let closed = requests();
    assert!(matches!(
        fenced.instances().create(&spec("kk-fenced")).await,
        Err(Error::Fenced)
    ));
    assert!(matches!(
        fenced.instances().list(&InstanceFilter::default()).await,
        Err(Error::Fenced)
    ));
    assert_eq!(requests(), closed);
    assert!(sim.instances().is_empty(), "nothing created");
    // The unfenced client it came from is not affected.
    assert!(
        client
            .instances()
            .list(&InstanceFilter::default())
            .await
            .is_ok()
    );
}

/// Every answer the simulator gives, driven through every call the client makes, conforms to
/// KakaoCloud's official models; requests off the model are refused the FastAPI way.
#[tokio::test]
async fn the_simulator_serves_only_the_official_shapes() {
    let (sim, client) = start(fast()).await;
    client.authenticate().await.unwrap();
    let flavors = client.flavors().list().await.unwrap();
    client.subnets().list().await.unwrap();
    client.security_groups().list().await.unwrap();
    client.key_pairs().list().await.unwrap();
    client.images().list().await.unwrap();
    let ke = client.kubernetes_engine();
    let cluster = ke.cluster("demo-cluster").await.unwrap();
    ke.kubeconfig("demo-cluster").await.unwrap();
    ke.supported_versions().await.unwrap();
    ke.worker_images(&cluster.version.minor_version)
        .await
        .unwrap();
    ke.node_pools("demo-cluster").await.unwrap();
    assert!(matches!(
        ke.cluster("nope").await,
        Err(Error::NotFound { .. })
    ));

    // GPU flavors are reported as `gpu`, with their accelerator.
    let gpu = flavors
        .iter()
        .find(|f| f.instance_type == Some(kakaocloud::api::InstanceKind::Gpu))
        .expect("the catalog has GPU flavors");
    assert!(gpu.hw_count.unwrap_or(0) > 0);

    // While building, ports and volumes are `null` (the schema allows it) and decode as None.
    let created = client
        .instances()
        .create(&spec("kk-contract"))
        .await
        .unwrap();
    assert_eq!(created.addresses, None);
    assert_eq!(created.status, Some(InstanceStatus::Building));
    assert_eq!(
        created.is_hyper_threading,
        Some(true),
        "sent explicitly: not disabled"
    );
    let without_ht = client
        .instances()
        .create(&LaunchSpec {
            disable_hyper_threading: true,
            ..spec("kk-contract-noht")
        })
        .await
        .unwrap();
    assert_eq!(without_ht.is_hyper_threading, Some(false));
    let raw: serde_json::Value = reqwest::Client::new()
        .get(format!(
            "{}/api/v1/instances/{}",
            sim.endpoint(kakaocloud::Service::Bcs),
            created.id
        ))
        .header("X-Auth-Token", raw_token(&sim).await)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(raw["instance"]["status"], "building", "lower case");
    assert!(raw["instance"]["addresses"].is_null(), "{raw}");
    let active = eventually(Duration::from_secs(5), "active", || {
        let (client, id) = (client.clone(), created.id.clone());
        async move {
            let i = client.instances().get(&id).await.unwrap();
            (i.status == Some(InstanceStatus::Active)).then_some(i)
        }
    })
    .await;
    assert_eq!(active.addresses.map(|a| a.len()), Some(1));
    // PUT answers its own shape; the client decodes it.
    let updated = client
        .instances()
        .update_description(&created.id, "worker")
        .await
        .unwrap();
    assert_eq!(updated.description.as_deref(), Some("worker"));
    assert!(updated.flavor.and_then(|f| f.original_name).is_some());

    // A create body off the model: 422 with FastAPI's detail, read back as invalid input.
    let answer = reqwest::Client::new()
        .post(format!(
            "{}/api/v1/instances",
            sim.endpoint(kakaocloud::Service::Bcs)
        ))
        .header("X-Auth-Token", raw_token(&sim).await)
        .json(&serde_json::json!({"instance": {"name": "kk-x", "flavor_id": "f"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 422);
    let body: serde_json::Value = answer.json().await.unwrap();
    kakaocloud::contract::official()
        .validate("HTTPValidationError", &body)
        .unwrap();
    let locs: Vec<String> = body["detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["loc"].to_string())
        .collect();
    assert!(
        locs.iter()
            .any(|l| l == r#"["body","instance","image_id"]"#),
        "{locs:?}"
    );

    assert_eq!(sim.contract_violations(), Vec::<String>::new());
    sim.shutdown().await;
}

/// A token for raw requests (outside the client).
async fn raw_token(sim: &Simulator) -> String {
    kakaocloud::install_crypto_provider();
    let answer = reqwest::Client::new()
        .post(format!(
            "{}/identity/v3/auth/tokens",
            sim.endpoint(kakaocloud::Service::Iam)
        ))
        .json(&kakaocloud::api::TokenRequest::application_credential(
            "test-cred-id",
            "test-cred-secret",
        ))
        .send()
        .await
        .unwrap();
    answer
        .headers()
        .get("X-Subject-Token")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}
