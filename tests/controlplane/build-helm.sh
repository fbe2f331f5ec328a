#!/usr/bin/env bash
# Builds helm from its upstream Go module (version pinned in go/helm/go.mod) into
# $KK_CONTROLPLANE_DIR/helm-<version>/helm, once per version. The chart tests and
# the demo install the chart with it, exactly as the install guide does.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../../scripts/env.sh"
mod="$here/go/helm"
version="$(awk '$1 == "helm.sh/helm/v4" { print $2; exit }' "$mod/go.mod")"
[[ -n "$version" ]] || { echo "build-helm.sh: no helm.sh/helm/v4 version in $mod/go.mod" >&2; exit 1; }
out="$KK_CONTROLPLANE_DIR/helm-$version"
if [[ -x "$out/helm" ]]; then
  echo "helm: $version is up to date in $out"
  exit 0
fi
started=$SECONDS
mkdir -p "$out"
(cd "$mod" && go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" \
  -o "$out/helm.partial" helm.sh/helm/v4/cmd/helm)
mv "$out/helm.partial" "$out/helm"
echo "helm: built $version in $((SECONDS - started)) s into $out"
