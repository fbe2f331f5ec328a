#!/usr/bin/env bash
# A plugin author's path from nothing to a selector serving in the playground, as
# docs/plugins.md ("From zero to active") tells it, every step timed: kk-plugin new, cargo test,
# kk-plugin build, kk-plugin test, kk-plugin apply, then the next node the playground opens.
#
#   scripts/demo.sh --keep && scripts/zero-to-active.sh [work-dir]
#
# The selector denies the c2a family (the cheapest the demo picks), so the next node shows it
# serving. Leaves the plugin applied; delete ConfigMap team-selector to undo.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source "$KK_CACHE/playground/playground.env"
cargo build --quiet -p karpenter-kakaocloud-plugin-tool
export PATH="$CARGO_TARGET_DIR/debug:$PATH"   # kk-plugin, as `cargo install --path sdk/tool` would
work="${1:-$(mktemp -d)}"
unset CARGO_TARGET_DIR                         # the new crate builds in its own target/, as anyone's
start=$(date +%s%N)
step() { printf '[%6.1f s] %s\n' "$(( ($(date +%s%N) - start) / 1000000 ))e-3" "$*"; }
cd "$work"
step "kk-plugin new"
kk-plugin new instance-selector team-selector
cd team-selector
step "cargo test"
cargo test --quiet 2>&1 | grep 'test result' | head -1
step "kk-plugin build"
kk-plugin build 2>&1 | tail -1
step "kk-plugin test"
kk-plugin test target/plugin/team-selector.wasm --cases cases
echo '{"denyFamilies": ["c2a"]}' > config.json
step "kk-plugin apply"
kk-plugin apply target/plugin/team-selector.wasm --name team-selector --namespace karpenter-kakaocloud --config config.json
# Every controller replica loads plugins (the leader is one of them): wait for each one's Event.
replicas=$(kubectl -n karpenter-kakaocloud get deploy karpenter-provider-kakaocloud -o jsonpath='{.spec.replicas}')
until [ "$(kubectl -n karpenter-kakaocloud get events --field-selector involvedObject.name=team-selector,reason=PluginActive -o name | wc -l)" -ge "$replicas" ]; do sleep 0.2; done
step "active: $(kubectl -n karpenter-kakaocloud get events --field-selector involvedObject.name=team-selector,reason=PluginActive -o jsonpath='{.items[0].message}')"
before=$(kubectl get nodeclaims -o name | sort)
kubectl scale deployment karpenter-demo --replicas=12
until new=$(comm -13 <(echo "$before") <(kubectl get nodeclaims -o name | sort)) && [ -n "$new" ] \
  && t=$(kubectl get $new -o jsonpath='{.metadata.labels.node\.kubernetes\.io/instance-type}') && [ -n "$t" ]; do sleep 0.2; done
step "the next node: $new as $t"
