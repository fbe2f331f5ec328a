#!/usr/bin/env bash
# Puts the default plugins into the Helm chart and packages it.
#
#   scripts/package-chart.sh [--no-package] [--chart DIR]
#
# --chart fills another copy of the chart (scripts/release.sh packages a copy, so tests reading
# the repository's chart never see it half-written).
# Builds the three default plugins (scripts/build-plugins.sh) and writes each one into the chart
# as charts/karpenter-provider-kakaocloud/plugins/<name>/{plugin.wasm.gz,sha256,world} (gitignored:
# build outputs are never committed). templates/plugins.yaml turns them into ConfigMaps in the
# format of scripts/plugin-configmap.sh (gzip component, sha256 of the uncompressed component,
# world label, config.json from values). Then, unless --no-package, `helm package` writes
# dist/karpenter-provider-kakaocloud-<version>.tgz. Also checks that the chart's crds/ are the
# repository's generated crds/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
chart=charts/karpenter-provider-kakaocloud
package=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-package) package=0; shift ;;
    --chart) chart="$2"; shift 2 ;;
    *) echo "usage: scripts/package-chart.sh [--no-package] [--chart DIR]" >&2; exit 2 ;;
  esac
done

for f in crds/*.yaml; do
  cmp -s "$f" "$chart/crds/$(basename "$f")" || {
    echo "package-chart: $chart/crds/$(basename "$f") differs from $f; copy crds/*.yaml into $chart/crds/" >&2
    exit 1
  }
done

out="$chart/plugins"
rm -rf "$out.partial"
mkdir -p "$out.partial"
while read -r component world _; do
  name="$(basename "$component" .wasm)"
  mkdir -p "$out.partial/$name"
  gzip -9 -n -c "$component" > "$out.partial/$name/plugin.wasm.gz"
  sha256sum "$component" | cut -d' ' -f1 > "$out.partial/$name/sha256"
  printf '%s\n' "$world" > "$out.partial/$name/world"
  echo "package-chart: $name ($world) $(stat -c %s "$out.partial/$name/plugin.wasm.gz") bytes gzip" >&2
done < <(bash scripts/build-plugins.sh plugins/instance-selector plugins/consolidation-scorer plugins/kubeadm-userdata | tail -3)
rm -rf "$out"
mv "$out.partial" "$out"

if ((package)); then
  helm="$KK_CONTROLPLANE_DIR/helm-$(awk '$1 == "helm.sh/helm/v4" { print $2; exit }' tests/controlplane/go/helm/go.mod)/helm"
  [[ -x "$helm" ]] || bash tests/controlplane/build-helm.sh >&2
  mkdir -p dist
  "$helm" package "$chart" -d dist
fi
