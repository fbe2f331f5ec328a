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
#   scripts/demo.sh --keep   the playground: the guide's Steps 1-5, then everything keeps running
#                            in the background; prints how to point kubectl and helm at it
#   scripts/demo.sh --down   stops the playground
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
playground="$KK_CACHE/playground"
began=$SECONDS

running_pid() {
  [[ -f "$playground/playground.env" ]] || return 1
  local pid
  pid=$(sed -n 's/^export KK_PLAYGROUND_PID=//p' "$playground/playground.env")
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

mode=run
args=()
for a in "$@"; do
  case "$a" in
    --keep) mode=keep ;;
    --down) mode=down ;;
    *) args+=("$a") ;;
  esac
done

if [[ $mode == down ]]; then
  if ! pid=$(running_pid); then
    echo "demo.sh: no playground is running"
    rm -f "$playground/playground.env"
    exit 0
  fi
  kill -TERM "$pid"
  for _ in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || { echo "demo.sh: playground (pid $pid) stopped"; exit 0; }
    sleep 0.5
  done
  echo "demo.sh: playground (pid $pid) did not stop within 60 s; kill -KILL $pid" >&2
  exit 1
fi
if [[ $mode == keep ]] && pid=$(running_pid); then
  echo "demo.sh: a playground is already running (pid $pid): source $playground/playground.env"
  exit 0
fi
bash scripts/setup.sh
bash tests/controlplane/build.sh
bash tests/controlplane/build-helm.sh
# The default plugins into the chart (gitignored build outputs), no .tgz needed.
bash scripts/package-chart.sh --no-package
# The example the demo swaps in.
bash scripts/build-plugins.sh examples/gpu-aware-selector >/dev/null
cargo build --locked -p karpenter-kakaocloud --bin karpenter-kakaocloud -p kk-demo --bin kk-demo
echo "demo.sh: built in $((SECONDS - began)) s"
demo=("$CARGO_TARGET_DIR/debug/kk-demo" --controller "$CARGO_TARGET_DIR/debug/karpenter-kakaocloud" ${args[@]+"${args[@]}"})
if [[ $mode == run ]]; then
  exec "${demo[@]}"
fi

# The playground runs on in the background; this script returns once it is ready.
mkdir -p "$playground"
rm -f "$playground/playground.env"
log="$playground/demo.log"
nohup "${demo[@]}" --keep "$playground" >"$log" 2>&1 &
pid=$!
until [[ -f "$playground/playground.env" ]]; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "demo.sh: the playground failed to start; its output:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 1
done
sed -n '/== Step 5/,$p' "$log"
echo
echo "demo.sh: playground running (pid $pid, output in $log)."
echo "  source $playground/playground.env   # KUBECONFIG, and kubectl and helm on PATH"
echo "  scripts/demo.sh --down              # stops it"
