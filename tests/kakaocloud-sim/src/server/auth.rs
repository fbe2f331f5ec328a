//! Identity (Keystone-style): `POST /identity/v3/auth/tokens` with an application credential.

use super::*;

pub(super) async fn issue_token(AxState(shared): S, headers: HeaderMap, body: Bytes) -> Response {
    let s = Arc::clone(&shared);
    run(&shared, routes::TOKEN, async move {
        // IAM requires `Content-Type: application/json` on token requests.
        let json_body = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim()
                    .to_ascii_lowercase()
                    .starts_with("application/json")
            });
        if !json_body {
            return iam_error(
                StatusCode::BAD_REQUEST,
                "Bad Request",
                "Content-Type must be application/json",
            );
        }
        // Held to the official request model; IAM answers problems Keystone's way (400).
        let req = match serde_json::from_slice::<serde_json::Value>(&body).map(|doc| {
            let found = contract::official().violations("SwaggerIdPwdRequest", &doc);
            (doc, found)
        }) {
            Ok((doc, found)) if found.is_empty() => {
                match serde_json::from_value::<api::TokenRequest>(doc) {
                    Ok(req) => req,
                    Err(e) => {
                        return iam_error(StatusCode::BAD_REQUEST, "Bad Request", &e.to_string());
                    }
                }
            }
            Ok((_, found)) => {
                return iam_error(StatusCode::BAD_REQUEST, "Bad Request", &found.join("; "));
            }
            Err(_) => {
                return iam_error(
                    StatusCode::BAD_REQUEST,
                    "Bad Request",
                    "malformed token request",
                );
            }
        };
        let identity = &req.auth.identity;
        if !identity
            .methods
            .iter()
            .any(|m| m == api::TokenRequest::METHOD)
        {
            return iam_error(
                StatusCode::BAD_REQUEST,
                "Bad Request",
                "unsupported auth method",
            );
        }
        let cred = &identity.application_credential;
        let Some(project) = s
            .config
            .projects
            .iter()
            .position(|p| p.credential_id == cred.id && p.credential_secret == cred.secret)
        else {
            return iam_error(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "The request you have made requires authentication.",
            );
        };
        let token: String = {
            let mut rng = rand::rng();
            (0..48)
                .map(|_| format!("{:x}", rng.random_range(0..16u8)))
                .collect()
        };
        let issued = jiff::Timestamp::now();
        let expires = issued.checked_add(s.config.token_ttl).unwrap_or(issued);
        lock(&s.state).tokens.insert(
            token.clone(),
            TokenEntry {
                project,
                expires: Instant::now() + s.config.token_ttl,
            },
        );
        let seed = &s.config.projects[project];
        let body = api::TokenResponse {
            token: api::TokenBody {
                expires_at: Some(expires.to_string()),
                issued_at: Some(issued.to_string()),
                methods: vec![api::TokenRequest::METHOD.to_string()],
                project: Some(api::TokenProject {
                    id: Some(seed.id.clone()),
                    name: Some(seed.name.clone()),
                }),
            },
        };
        let mut response = s.reply("TokenResponse", StatusCode::CREATED, &body);
        if let Ok(v) = HeaderValue::from_str(&token) {
            response.headers_mut().insert(api::SUBJECT_TOKEN_HEADER, v);
        }
        response
    })
    .await
}
