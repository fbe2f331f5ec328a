//! Read-only JSON views served beside `/metrics`, for what an operator asks the controller
//! directly rather than through the API server:
//!
//! * `GET /plugins/shadow`: each shadow plugin's record since it loaded at its digest:
//!   decisions, divergences by kind, the hourly price difference its first choices would have
//!   made, and its latest divergences (`kk_plugin_runtime::shadow`).

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use kk_plugin_runtime::Registry;
use kk_plugin_runtime::shadow::Stats;

/// Where the shadow records are served.
pub const SHADOW_PATH: &str = "/plugins/shadow";

async fn shadow(State(plugins): State<Arc<Registry>>) -> Json<Vec<Stats>> {
    Json(plugins.shadows.stats())
}

pub fn router(plugins: Arc<Registry>) -> Router {
    Router::new()
        .route(SHADOW_PATH, get(shadow))
        .with_state(plugins)
}
