#!/usr/bin/env bash
# Installs the toolchains the build needs, once per machine (idempotent).
#  - the host builds with rustup's stable Rust (on the machine);
#  - plugins build for wasm32 with Debian's Rust and its std source (rustup cannot
#    download a wasm32 target here), linked by LLVM's wasm-ld;
#  - the test control plane builds with Go (on the machine).
set -euo pipefail
need=()
for pkg in rustc-web cargo-web rust-web-src lld-19; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "setup: rustup's cargo is missing" >&2; exit 1; }
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || { echo "setup: Go is missing" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q clippy || rustup component add clippy rustfmt
