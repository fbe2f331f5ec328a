//! Every integration test of the host, in one test binary: wasmtime, kube and the simulator are
//! linked once, and the modules share one harness ([`support`]).
//!
//! Modules that need a control plane start their own private one (see `docs/testing.md`);
//! within a module, namespaces and unique names isolate the tests.

mod support;

mod capacity_removal;
mod chart_failover;
mod chart_install;
mod chart_render;
mod crds_apiserver;
mod crds_files;
mod disruption_e2e;
mod kakaocloud_client;
mod layout;
mod metrics_dashboards;
mod nodeclass_controller;
mod ownership;
mod ownership_keyring_watch;
mod plugins_configmap;
mod plugins_hostile;
mod plugins_runtime;
mod plugins_shadow;
mod provisioning_e2e;
mod release_oci;
