#!/usr/bin/env bash
# Builds the policy plugins to WebAssembly components: $KK_PLUGIN_DIR/<crate-name>.wasm.
#
#   scripts/build-plugins.sh                 every guest crate (plugins/*, the test fixtures, the example)
#   scripts/build-plugins.sh <crate-dir>...  only these crates (any plugin crate written with the SDK)
#
# Guests build with Debian's Rust (rustc-web, 1.96) and its std source for wasm32-unknown-unknown
# (rustup cannot fetch a wasm32 target here), linked by LLVM's wasm-ld, into their own target dir
# $KK_CACHE/wasm-target (never the host's: a different rustc). The host-built `kk-plugin` tool
# (sdk/tool) then turns each core module into a component. Cargo skips unchanged inputs, and the
# tool rewrites a component only when its bytes change. Progress goes to stderr; the last lines
# on stdout are "<component path> <world>" per crate.
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

# One cargo invocation for every guest crate: by package name for workspace members.
pkgs=()
for dir in "${crates[@]}"; do
  [ -f "$dir/Cargo.toml" ] || { echo "build-plugins: $dir has no Cargo.toml" >&2; exit 1; }
  name=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$dir/Cargo.toml" | head -1)
  [ -n "$name" ] || { echo "build-plugins: no package name in $dir/Cargo.toml" >&2; exit 1; }
  pkgs+=("$name")
done
pkg_args=()
for p in "${pkgs[@]}"; do pkg_args+=(-p "$p"); done
manifest_args=()
# A crate outside this workspace builds from its own manifest (one crate at a time).
if ((${#crates[@]} == 1)) && ! cargo metadata --no-deps --format-version 1 --locked 2>/dev/null \
  | grep -q "\"name\":\"${pkgs[0]}\""; then
  manifest_args=(--manifest-path "${crates[0]}/Cargo.toml")
  pkg_args=()
fi

WASM_TARGET_DIR="$KK_CACHE/wasm-target"
echo "build-plugins: building ${pkgs[*]} for wasm32-unknown-unknown" >&2
env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS \
  PATH="/usr/lib/llvm-19/bin:/usr/bin:$PATH" \
  RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
  CARGO_TARGET_DIR="$WASM_TARGET_DIR" \
  CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=wasm-ld \
  CARGO_PROFILE_RELEASE_OPT_LEVEL=3 \
  CARGO_PROFILE_RELEASE_LTO=true \
  CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
  CARGO_PROFILE_RELEASE_DEBUG=false \
  CARGO_PROFILE_RELEASE_PANIC=abort \
  /usr/bin/cargo build --release --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort \
  "${manifest_args[@]}" "${pkg_args[@]}" >&2

echo "build-plugins: building the kk-plugin tool" >&2
cargo build --quiet -p karpenter-kakaocloud-plugin-tool >&2
TOOL="$CARGO_TARGET_DIR/debug/kk-plugin"

for p in "${pkgs[@]}"; do
  core="$WASM_TARGET_DIR/wasm32-unknown-unknown/release/${p//-/_}.wasm"
  [ -f "$core" ] || { echo "build-plugins: $core was not produced (is crate-type cdylib?)" >&2; exit 1; }
  out="$KK_PLUGIN_DIR/$p.wasm"
  world=$("$TOOL" componentize "$core" "$out")
  echo "$out $world"
done
