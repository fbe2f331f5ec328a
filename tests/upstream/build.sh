#!/usr/bin/env bash
# Builds upstream Karpenter's kwok provider (sigs.k8s.io/karpenter/kwok, the version pinned in
# kwok/go.mod) into $KK_CACHE/upstream/kwok-karpenter-<hash>/, with the CRDs of that version
# beside it (crds/: karpenter.sh NodePool/NodeClaim/NodeOverlay, CapacityBuffer, KWOKNodeClass).
# The scale bench runs it as the upstream row. Once per version; ~2 min cold.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../../scripts/env.sh"

mod="$here/kwok"
version="$(cd "$mod" && sha256sum go.mod go.sum | sha256sum | cut -c1-12)"
out="$KK_CACHE/upstream/kwok-karpenter-$version"
if [[ -x "$out/kwok-karpenter" ]]; then
  echo "kwok-karpenter: up to date in $out" >&2
else
  started=$SECONDS
  mkdir -p "$out/crds"
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$out/kwok-karpenter.partial" sigs.k8s.io/karpenter/kwok)
  src="$(cd "$mod" && go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
  cp "$src"/kwok/charts/crds/*.yaml "$src"/kwok/apis/crds/*.yaml "$out/crds/"
  chmod u+w "$out"/crds/*.yaml
  (cd "$mod" && go list -m -f '{{.Version}}' sigs.k8s.io/karpenter) > "$out/version"
  mv "$out/kwok-karpenter.partial" "$out/kwok-karpenter"
  echo "kwok-karpenter: built in $((SECONDS - started)) s into $out" >&2
fi
ln -sfn "$out" "$KK_CACHE/upstream/kwok-karpenter"
