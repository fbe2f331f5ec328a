//! Read-only JSON views served beside `/metrics`, for what an operator asks the controller
//! directly rather than through the API server (`kk-plugin explain` and `what-if` read them):
//!
//! * `GET /plugins/shadow`: each shadow plugin's record since it loaded at its digest:
//!   decisions, divergences by kind, the hourly price difference its first choices would have
//!   made, and its latest divergences (`kk_plugin_runtime::shadow`);
//! * `GET /plugins/decisions`: the latest instance-selector decisions with their inputs, to
//!   replay a candidate plugin on (`kk_plugin_runtime::replay::DecisionLog`);
//! * `GET /explain/pod/{namespace}/{name}`: why a pod runs where it runs, or still waits
//!   ([`crate::explain`]);
//! * `GET /explain/node/{name}`: why a node is or is not disrupted, method by method, and where
//!   each of its pods would go.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kk_plugin_runtime::Registry;
use kk_plugin_runtime::shadow::Stats;

use crate::explain::{Explain, ExplainError};

/// Where the shadow records are served.
pub const SHADOW_PATH: &str = "/plugins/shadow";
/// Where the recorded selector decisions are served.
pub const DECISIONS_PATH: &str = "/plugins/decisions";
/// Prefixes of the explanations.
pub const EXPLAIN_POD_PATH: &str = "/explain/pod";
pub const EXPLAIN_NODE_PATH: &str = "/explain/node";

#[derive(Clone)]
struct Views {
    plugins: Arc<Registry>,
    explain: Explain,
}

async fn shadow(State(v): State<Views>) -> Json<Vec<Stats>> {
    Json(v.plugins.shadows.stats())
}

async fn decisions(State(v): State<Views>) -> Response {
    Json(v.plugins.decisions.export()).into_response()
}

fn answer<T: serde::Serialize>(result: Result<T, ExplainError>) -> Response {
    match result {
        Ok(v) => Json(v).into_response(),
        Err(e) => {
            let status = match e {
                ExplainError::NotFound(_) => StatusCode::NOT_FOUND,
                ExplainError::NotLeading => StatusCode::SERVICE_UNAVAILABLE,
                ExplainError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (status, Json(serde_json::json!({"error": e.to_string()}))).into_response()
        }
    }
}

async fn pod(State(v): State<Views>, Path((namespace, name)): Path<(String, String)>) -> Response {
    answer(v.explain.pod(&namespace, &name))
}

async fn node(State(v): State<Views>, Path(name): Path<String>) -> Response {
    answer(v.explain.node(&name).await)
}

pub fn router(plugins: Arc<Registry>, explain: Explain) -> Router {
    Router::new()
        .route(SHADOW_PATH, get(shadow))
        .route(DECISIONS_PATH, get(decisions))
        .route(
            &format!("{EXPLAIN_POD_PATH}/{{namespace}}/{{name}}"),
            get(pod),
        )
        .route(&format!("{EXPLAIN_NODE_PATH}/{{name}}"), get(node))
        .with_state(Views { plugins, explain })
}
