//! The simulator over raw HTTP: the token is checked on every route, the
//! admin endpoint injects faults, and the binary prints its endpoints.

use std::io::BufRead as _;
use std::process::{Command, Stdio};

use kakaocloud_sim::{SimConfig, Simulator, routes};

fn http() -> reqwest::Client {
    kakaocloud::install_crypto_provider();
    reqwest::Client::new()
}

/// One authenticated-only GET or POST per route.
fn service_calls(sim: &Simulator) -> Vec<(reqwest::Method, String)> {
    let ep = |s: &str, p: &str| format!("{}/{s}{p}", sim.base_url());
    use reqwest::Method;
    vec![
        (Method::GET, ep("bcs", "/api/v1/instances")),
        (Method::POST, ep("bcs", "/api/v1/instances")),
        (Method::GET, ep("bcs", "/api/v1/instances/x")),
        (Method::PUT, ep("bcs", "/api/v1/instances/x")),
        (Method::DELETE, ep("bcs", "/api/v1/instances/x")),
        (Method::GET, ep("bcs", "/api/v1/flavors")),
        (Method::GET, ep("bcs", "/api/v1/keypairs")),
        (Method::GET, ep("vpc", "/api/v1/subnets")),
        (Method::GET, ep("network", "/api/v1/security-groups")),
        (Method::GET, ep("image", "/api/v1/images")),
        (
            Method::GET,
            ep("kubernetes-engine", "/api/v1/clusters/demo-cluster"),
        ),
        (
            Method::GET,
            ep(
                "kubernetes-engine",
                "/api/v1/clusters/demo-cluster/kubeconfig",
            ),
        ),
        (
            Method::GET,
            ep(
                "kubernetes-engine",
                "/api/v1/clusters/demo-cluster/node-pools",
            ),
        ),
        (Method::GET, ep("kubernetes-engine", "/api/v1/versions")),
        (
            Method::GET,
            ep("kubernetes-engine", "/api/v1/images?k8s_version=1.35"),
        ),
    ]
}

#[tokio::test]
async fn every_service_route_requires_a_valid_token() {
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let http = http();
    for (method, url) in service_calls(&sim) {
        for token in [None, Some("forged-token")] {
            let mut req = http
                .request(method.clone(), &url)
                .header("content-type", "application/json")
                .body("{}");
            if let Some(t) = token {
                req = req.header("X-Auth-Token", t);
            }
            let status = req.send().await.unwrap().status();
            assert_eq!(status, 401, "{method} {url} with {token:?}");
        }
    }
    let counted: usize = routes::ALL.iter().map(|r| sim.request_count(r)).sum();
    assert_eq!(counted, 30, "every attempt counted on its route");
    sim.shutdown().await;
}

#[tokio::test]
async fn token_request_needs_json_content_type_and_right_secret() {
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let http = http();
    let url = format!("{}/iam/identity/v3/auth/tokens", sim.base_url());
    let body = |secret: &str| {
        serde_json::json!({"auth":{"identity":{"methods":["application_credential"],
            "application_credential":{"id":"test-cred-id","secret":secret}}}})
        .to_string()
    };
    let plain = http
        .post(&url)
        .body(body("test-cred-secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 400, "no Content-Type");
    let wrong = http
        .post(&url)
        .header("content-type", "application/json")
        .body(body("nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let ok = http
        .post(&url)
        .header("content-type", "application/json")
        .body(body("test-cred-secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 201);
    let token = ok.headers()["X-Subject-Token"]
        .to_str()
        .unwrap()
        .to_string();
    let body: serde_json::Value = ok.json().await.unwrap();
    assert_eq!(body["token"]["project"]["id"], "proj-1");
    let flavors = http
        .get(format!(
            "{}/bcs/api/v1/flavors?limit=2&offset=1",
            sim.base_url()
        ))
        .header("X-Auth-Token", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(flavors.status(), 200);
    let page: serde_json::Value = flavors.json().await.unwrap();
    assert_eq!(page["flavors"].as_array().unwrap().len(), 2);
    assert_eq!(page["pagination"]["offset"], 1);
    assert_eq!(
        page["pagination"]["total"],
        SimConfig::default().flavors.len()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn admin_endpoint_injects_faults() {
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    let http = http();
    let admin = format!("{}/admin/faults", sim.base_url());
    let r = http
        .post(&admin)
        .json(&serde_json::json!([
            {"kind":"throttle","route":"bcs.flavors","count":1,"retry_after_millis":2000},
            {"kind":"server_error","route":"vpc.subnets","count":1,"status":503}
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let flavors = http
        .get(format!("{}/bcs/api/v1/flavors", sim.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(flavors.status(), 429);
    assert_eq!(flavors.headers()["retry-after"], "2");
    let subnets = http
        .get(format!("{}/vpc/api/v1/subnets", sim.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(subnets.status(), 503);
    // Faults are one-shot: the next call reaches the token check.
    let again = http
        .get(format!("{}/bcs/api/v1/flavors", sim.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 401);
    let bad = http
        .post(&admin)
        .body("{\"kind\":\"nonsense\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    sim.shutdown().await;
}

#[test]
fn binary_prints_its_endpoints_as_json() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kakaocloud-sim"))
        .args(["--listen", "127.0.0.1:0", "--boot-delay-ms", "10"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kakaocloud-sim");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    let read = std::io::BufReader::new(stdout).read_line(&mut line);
    let _ = child.kill();
    let _ = child.wait();
    read.unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).expect("one JSON line");
    let bcs = v["endpoints"]["bcs"].as_str().unwrap();
    assert!(
        bcs.starts_with("http://127.0.0.1:") && bcs.ends_with("/bcs"),
        "{bcs}"
    );
    assert_eq!(v["applicationCredentialId"], "test-cred-id");
    assert_eq!(v["endpoints"].as_object().unwrap().len(), 7);
}
