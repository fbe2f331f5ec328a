#!/usr/bin/env bash
# Builds one plugin crate to a component and prints its ConfigMap YAML on stdout.
#
#   scripts/plugin-configmap.sh <crate-dir> [--name N] [--namespace NS] [--config FILE]
#
# The name defaults to the crate name, the namespace to `karpenter-kakaocloud` (the install guide's), the config to
# <crate-dir>/config.json when it exists (else `{}`). Apply it with `kubectl apply -f -`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
dir="${1:?usage: plugin-configmap.sh <crate-dir> [--name N] [--namespace NS] [--config FILE]}"
shift
extra=("$@")
if [ -f "$dir/config.json" ] && ! printf '%s\n' "${extra[@]}" | grep -qx -- --config; then
  extra+=(--config "$dir/config.json")
fi
read -r component world _ < <(bash scripts/build-plugins.sh "$dir" | tail -1)
"$CARGO_TARGET_DIR/debug/kk-plugin" configmap "$component" --world "$world" "${extra[@]}"
