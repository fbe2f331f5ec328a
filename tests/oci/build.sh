#!/usr/bin/env bash
# Builds the OCI tools from their Go modules into $KK_CACHE/oci/<module version>/, once per
# version: the CNCF distribution registry (the tests' OCI registry) and imagetool (assembles,
# pushes and unpacks the controller image with go-containerregistry; no container engine).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../../scripts/env.sh"

build() { # build <module dir> <package> <binary>
  local mod="$1" pkg="$2" bin="$3" version out started
  version="$(cd "$mod" && sha256sum go.mod go.sum $(ls ./*.go 2>/dev/null) | sha256sum | cut -c1-12)"
  out="$KK_CACHE/oci/$bin-$version"
  if [[ -x "$out/$bin" ]]; then
    echo "$bin: up to date in $out" >&2
  else
    started=$SECONDS
    mkdir -p "$out"
    (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$out/$bin.partial" "$pkg")
    mv "$out/$bin.partial" "$out/$bin"
    echo "$bin: built in $((SECONDS - started)) s into $out" >&2
  fi
  ln -sfn "$out/$bin" "$KK_CACHE/oci/$bin"
}

mkdir -p "$KK_CACHE/oci"
build "$here/imagetool" . imagetool
build "$here/registry" github.com/distribution/distribution/v3/cmd/registry registry
