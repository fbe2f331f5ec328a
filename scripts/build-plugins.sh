#!/usr/bin/env bash
# Builds the policy plugins to WebAssembly components: $KK_PLUGIN_DIR/<crate-name>.wasm.
#
#   scripts/build-plugins.sh                 every guest crate (plugins/*, the test fixtures, the example)
#   scripts/build-plugins.sh <crate-dir>...  only these crates (any plugin crate written with the SDK)
#
# The recipe is `kk-plugin build` (sdk/tool/src/build.rs): rustup's wasm32-unknown-unknown target
# when installed, else Debian's Rust (rustc-web, 1.96) with its std source, linked by LLVM's
# wasm-ld (rustup cannot fetch a wasm32 target here). Guests build in their own target dir
# $KK_CACHE/wasm-target (never the host's: another rustc). Cargo skips unchanged inputs, and a
# component is rewritten only when its bytes change. Progress goes to stderr; stdout has one
# line per crate: "<component path> <world> <bytes> bytes sha256:<digest>".
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

DEFAULT_CRATES=(plugins/instance-selector plugins/consolidation-scorer plugins/kubeadm-userdata
  plugins/testdata/hostile-selector examples/gpu-aware-selector)
crates=("$@")
((${#crates[@]})) || crates=("${DEFAULT_CRATES[@]}")

if ! [ -x /usr/bin/rustc ] || ! /usr/bin/rustc --version | grep -q '^rustc 1\.9[6-9]\|^rustc 1\.[1-9][0-9][0-9]' \
  || ! [ -x /usr/lib/llvm-19/bin/wasm-ld ] || ! [ -d /usr/lib/rustlib/src/rust/library ]; then
  echo "build-plugins: the Debian guest toolchain is missing; running scripts/setup.sh" >&2
  bash scripts/setup.sh
fi

echo "build-plugins: building the kk-plugin tool" >&2
cargo build --quiet -p karpenter-kakaocloud-plugin-tool >&2
TOOL="$CARGO_TARGET_DIR/debug/kk-plugin"

# One cargo invocation for every workspace member (by package name); a crate outside the
# workspace builds from its own manifest, one at a time.
members=$(cargo metadata --no-deps --format-version 1 --locked)
pkgs=()
for dir in "${crates[@]}"; do
  [ -f "$dir/Cargo.toml" ] || { echo "build-plugins: $dir has no Cargo.toml" >&2; exit 1; }
  name=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$dir/Cargo.toml" | head -1)
  [ -n "$name" ] || { echo "build-plugins: no package name in $dir/Cargo.toml" >&2; exit 1; }
  if grep -q "\"name\":\"$name\"" <<<"$members"; then
    pkgs+=(-p "$name")
  else
    "$TOOL" build --manifest-path "$dir/Cargo.toml" --target-dir "$KK_CACHE/wasm-target" --out-dir "$KK_PLUGIN_DIR"
  fi
done
if ((${#pkgs[@]})); then
  "$TOOL" build --manifest-path Cargo.toml "${pkgs[@]}" --target-dir "$KK_CACHE/wasm-target" --out-dir "$KK_PLUGIN_DIR"
fi
