//! The client's wire types against KakaoCloud's official models (`contract/official.models`).
//!
//! - Every document the official schema allows (every nullable field null, every optional
//!   field absent, every enum value) decodes into our type.
//! - What our types serialise (what the simulator serves, and what the client sends) conforms
//!   to the model exactly: re-encoding each decoded fixture, and the request bodies we build.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::api::*;
use crate::contract::official;

/// Each official response model and the type the client decodes it with.
fn check_response<T: DeserializeOwned + Serialize>(model: &str) -> usize {
    let models = official();
    assert!(models.get(model).is_some(), "{model} is not transcribed");
    let fixtures = models.fixtures(model);
    for (name, doc) in &fixtures {
        let decoded: T = serde_json::from_value(doc.clone())
            .unwrap_or_else(|e| panic!("{model} fixture {name} does not decode: {e}\n{doc:#}"));
        let reencoded = serde_json::to_value(&decoded).unwrap();
        if let Err(e) = models.validate(model, &reencoded) {
            panic!("{model} fixture {name} re-encodes off the schema: {e}\n{reencoded:#}");
        }
    }
    fixtures.len()
}

#[test]
fn every_official_response_decodes_and_reencodes_on_the_schema() {
    let mut checked = 0;
    checked += check_response::<InstanceResponse>("ResponseInstanceModel");
    checked += check_response::<InstanceList>("InstanceListModel");
    checked += check_response::<CreateInstanceResponse>("ResponseCreateInstanceModel");
    checked += check_response::<UpdatedInstanceResponse>("InstanceModelResponse");
    checked += check_response::<FlavorList>("FlavorListModel");
    checked += check_response::<KeyPairList>("KeypairListModel");
    checked += check_response::<SubnetList>("SubnetListModel");
    checked += check_response::<SecurityGroupList>("SecurityGroupListModel");
    checked += check_response::<ImageList>("ImageListModel");
    checked += check_response::<TokenResponse>("TokenResponse");
    checked += check_response::<ErrorBody>("ErrorResponseModel");
    checked += check_response::<ValidationErrorBody>("HTTPValidationError");
    checked += check_response::<IamErrorBody>("KeystoneError");
    checked += check_response::<ClusterResponse>("GetK8sClusterResponseModel");
    checked += check_response::<VersionList>("GetK8sUpgradeVersionsResponseModel");
    checked += check_response::<WorkerImageList>("GetK8sImagesResponseModel");
    checked += check_response::<NodePoolList>("GetK8sClusterNodePoolsResponseModel");
    assert!(checked > 100, "only {checked} fixtures");
}

#[test]
fn nulls_and_absences_decode_to_none_not_errors() {
    let models = official();
    let nulls = models
        .fixtures("ResponseInstanceModel")
        .into_iter()
        .find(|(n, _)| n == "nulls")
        .unwrap()
        .1;
    let i: InstanceResponse = serde_json::from_value(nulls).unwrap();
    assert_eq!(i.instance.addresses, None);
    assert_eq!(i.instance.attached_volumes, None);
    assert_eq!(i.instance.security_groups, None);
    assert_eq!(i.instance.status, None);

    let page: FlavorList = serde_json::from_value(json!({
        "flavors": [{"id": "f-1", "availability_zone": null, "available": null, "instance_type": "gpu"}],
        "pagination": {}
    }))
    .unwrap();
    assert_eq!(page.flavors[0].zones(), &[] as &[String]);
    assert_eq!(page.flavors[0].available_in("kr-central-2-a"), None);
    assert_eq!(page.flavors[0].instance_type, Some(InstanceKind::Gpu));
}

#[test]
fn the_put_answer_is_its_own_shape() {
    // What PUT answers lacks what GET's model requires (flavor.id, volume size, SG id, status):
    // decoding it as an Instance would fail after the server saved the change.
    let full = official()
        .fixtures("InstanceModelResponse")
        .into_iter()
        .next()
        .unwrap()
        .1;
    assert!(serde_json::from_value::<UpdatedInstanceResponse>(full.clone()).is_ok());
    assert!(official().validate("ResponseInstanceModel", &full).is_err());
}

#[test]
fn unknown_fields_and_enum_values_are_tolerated() {
    let doc = json!({
        "instance": {
            "id": "i-1", "status": "shelved_offloaded", "power_state": "RUNNING",
            "a_field_from_the_future": {"x": 1}
        }
    });
    let i: InstanceResponse = serde_json::from_value(doc).unwrap();
    assert_eq!(
        i.instance.status,
        Some(InstanceStatus::Other("shelved_offloaded".into()))
    );
}

fn launch_body() -> CreateInstanceBody {
    CreateInstanceBody {
        instance: CreateInstance {
            name: "kk-demo-web-abc12-0123abcd".into(),
            description: Some("kk:c:k1:web-abc12:mac".into()),
            count: Some(1),
            image_id: "img-1".into(),
            flavor_id: "flv-1".into(),
            availability_zone: Some("kr-central-2-a".into()),
            subnets: vec![CreateInstanceSubnet { id: "sn-1".into() }],
            volumes: vec![CreateInstanceVolume {
                size: 50,
                is_delete_on_termination: Some(true),
                source_type: Some("image".into()),
                uuid: Some("img-1".into()),
                type_id: None,
            }],
            key_name: None,
            security_groups: vec![SecurityGroupRef {
                name: "worker".into(),
            }],
            user_data: Some("I2Nsb3VkLWNvbmZpZw==".into()),
            is_disable_hyper_threading: Some(false),
        },
    }
}

#[test]
fn request_bodies_conform() {
    let models = official();
    let create = serde_json::to_value(launch_body()).unwrap();
    models.validate("BodyCreateInstance", &create).unwrap();
    assert_eq!(create["instance"]["is_disable_hyper_threading"], false);

    let update = serde_json::to_value(UpdateInstanceBody {
        instance: UpdateInstance {
            name: None,
            description: Some("worker kk:t:...".into()),
        },
    })
    .unwrap();
    models.validate("BodyUpdateInstance", &update).unwrap();

    let token = serde_json::to_value(TokenRequest::application_credential("id", "secret")).unwrap();
    models.validate("SwaggerIdPwdRequest", &token).unwrap();
}

#[test]
fn the_validator_catches_what_used_to_be_wrong() {
    let models = official();
    // Upper-case status is still a string (the schema has no enum), but a null list item, a
    // missing required id and an unknown zone are not.
    let bad: Value = json!({"instance": {"id": null, "availability_zone": "kr-central-9-z",
        "addresses": [null]}});
    let found = models.violations("ResponseInstanceModel", &bad);
    assert!(
        found.iter().any(|v| v.contains("$.instance.id")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|v| v.contains("availability_zone")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|v| v.contains("addresses[0]")),
        "{found:?}"
    );
}
