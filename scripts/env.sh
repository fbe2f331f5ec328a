# Sourced by every project script: where builds and caches live.
# Everything heavy is kept outside the clone, keyed by version, so a second run
# (or CI on a machine that has built once) rebuilds only what changed.
export KK_CACHE="${KK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/karpenter-kakaocloud}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$KK_CACHE/target}"
# Built WebAssembly components of plugins/ and examples/ (one <name>.wasm each).
export KK_PLUGIN_DIR="${KK_PLUGIN_DIR:-$KK_CACHE/plugins}"
# Control-plane binaries (kube-apiserver & co, etcd, kwok) per Kubernetes version.
export KK_CONTROLPLANE_DIR="${KK_CONTROLPLANE_DIR:-$KK_CACHE/controlplane}"
export GOCACHE="${GOCACHE:-$KK_CACHE/go-build}"
export GOMODCACHE="${GOMODCACHE:-$KK_CACHE/go-mod}"
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
mkdir -p "$KK_CACHE" "$KK_PLUGIN_DIR" "$KK_CONTROLPLANE_DIR"
