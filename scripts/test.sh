#!/usr/bin/env bash
# Runs every test of the project on this machine, installing what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

bash scripts/setup.sh
bash scripts/build-plugins.sh
# The default plugins into the chart, for the helm install test (host/controller/tests/e2e/chart_install.rs).
bash scripts/package-chart.sh --no-package
bash tests/controlplane/build.sh
# helm for the chart tests (host/controller/tests/e2e/chart_*.rs) and the demo.
bash tests/controlplane/build-helm.sh
# The OCI registry and image tools, and the controller image, for the release test
# (host/controller/tests/e2e/release_oci.rs).
bash tests/oci/build.sh
bash scripts/build-image.sh

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
