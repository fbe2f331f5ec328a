#!/usr/bin/env bash
# The main job, on a local stand-in for KakaoCloud: a control plane (etcd, kube-apiserver,
# controller-manager, scheduler; kwok plays the kubelets), the KakaoCloud simulator, the Helm
# chart installed with helm exactly as the install guide does it, the controller binary running
# as the chart's two pods (one leads), the guide's KCNodeClass, NodePool and 3-replica demo.
# Prints NodeClaims, Nodes and pods until the demo runs, deletes it, shows consolidation removing
# the empty nodes, tears down. In between, the hot swap: the instance-selector ConfigMap is
# replaced by examples/gpu-aware-selector at runtime and the next node's flavor changes. Builds what it needs first (once; cached in ~/.cache).
#
#   scripts/demo.sh [kk-demo options: --run-timeout-secs N --consolidation-timeout-secs N]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
began=$SECONDS
bash scripts/setup.sh
bash tests/controlplane/build.sh
bash tests/controlplane/build-helm.sh
# The default plugins into the chart (gitignored build outputs), no .tgz needed.
bash scripts/package-chart.sh --no-package
# The example the demo swaps in.
bash scripts/build-plugins.sh examples/gpu-aware-selector >/dev/null
cargo build --locked -p karpenter-kakaocloud --bin karpenter-kakaocloud -p kk-demo --bin kk-demo
echo "demo.sh: built in $((SECONDS - began)) s"
exec "$CARGO_TARGET_DIR/debug/kk-demo" --controller "$CARGO_TARGET_DIR/debug/karpenter-kakaocloud" "$@"
