//! The simulator's own endpoints: queue faults, read instances, requests and endpoints.

use super::*;

pub(super) async fn admin_faults(AxState(shared): S, body: Bytes) -> Response {
    let requests: Vec<FaultRequest> = match serde_json::from_slice::<FaultRequest>(&body) {
        Ok(one) => vec![one],
        Err(_) => match serde_json::from_slice::<Vec<FaultRequest>>(&body) {
            Ok(many) => many,
            Err(e) => return invalid(&format!("fault request: {e}")),
        },
    };
    for r in requests {
        shared.faults.apply(r);
    }
    StatusCode::NO_CONTENT.into_response()
}

pub(super) async fn admin_instances(AxState(shared): S) -> Response {
    json(StatusCode::OK, &shared.instances(true))
}

pub(super) async fn admin_requests(AxState(shared): S) -> Response {
    json(StatusCode::OK, &shared.request_counts())
}

pub(super) async fn admin_endpoints(AxState(shared): S) -> Response {
    let endpoints: BTreeMap<&str, String> = kakaocloud::Service::ALL
        .iter()
        .map(|svc| {
            (
                svc.as_str(),
                format!("{}/{}", shared.base_url, svc.as_str()),
            )
        })
        .collect();
    json(StatusCode::OK, &endpoints)
}
