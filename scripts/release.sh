#!/usr/bin/env bash
# Releases VERSION: the controller image and the chart, pushed to an OCI registry.
#
#   scripts/release.sh VERSION [--registry HOST/PATH] [--prebuilt-plugins]
#
# --prebuilt-plugins takes the default plugins already packaged into the repository's chart by
# scripts/package-chart.sh instead of building them again (the release test uses it, so it never
# rewrites plugin files other tests are reading).
# REGISTRY defaults to the install guide's ke-container-registry.kr-central-2.kcr.dev/ke-helm-public;
# log in first (`helm registry login`, and a docker config for the image push). Steps:
#   1. the versions are in step: VERSION = the Cargo workspace version = the chart's version and
#      appVersion = the WIT package's version (docs/plugins.md: compatibility policy);
#   2. scripts/build-image.sh builds the image and pushes it as REGISTRY/karpenter-provider-kakaocloud:VERSION;
#   3. the chart is packaged with the default plugins and its image pinned to REGISTRY's repository
#      and the digest just built (so `helm install` needs no controller.image.* values);
#   4. `helm push` puts the chart at oci://REGISTRY/karpenter-provider-kakaocloud, VERSION;
#   5. release notes (CHANGELOG.md's section + the digests) go to $KK_CACHE/release/VERSION/NOTES.md.
# Processes trust the registry through the system roots (SSL_CERT_FILE is honoured).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

version="${1:-}"
[[ -n "$version" ]] || { echo "usage: scripts/release.sh VERSION [--registry HOST/PATH]" >&2; exit 2; }
shift
registry="ke-container-registry.kr-central-2.kcr.dev/ke-helm-public"
prebuilt=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --registry) registry="$2"; shift 2 ;;
    --prebuilt-plugins) prebuilt=1; shift ;;
    *) echo "release: unknown argument $1" >&2; exit 2 ;;
  esac
done

chart=charts/karpenter-provider-kakaocloud
cargo_version="$(awk -F'"' '/^version *=/ {print $2; exit}' Cargo.toml)"
chart_version="$(awk '$1 == "version:" {print $2; exit}' "$chart/Chart.yaml")"
app_version="$(awk '$1 == "appVersion:" {gsub(/"/, "", $2); print $2; exit}' "$chart/Chart.yaml")"
wit_version="$(sed -n 's/^package kakaocloud:karpenter@\(.*\);$/\1/p' wit/*.wit | head -1)"
for v in "$cargo_version" "$chart_version" "$app_version" "$wit_version"; do
  [[ "$v" == "$version" ]] || {
    echo "release: versions out of step for $version: Cargo $cargo_version, chart $chart_version, app $app_version, WIT $wit_version" >&2
    exit 1
  }
done
grep -q "^## $version" CHANGELOG.md || { echo "release: CHANGELOG.md has no '## $version' section" >&2; exit 1; }

helm="$KK_CONTROLPLANE_DIR/helm-$(awk '$1 == "helm.sh/helm/v4" { print $2; exit }' tests/controlplane/go/helm/go.mod)/helm"
[[ -x "$helm" ]] || bash tests/controlplane/build-helm.sh >&2

repository="$registry/karpenter-provider-kakaocloud"
digest="$(bash scripts/build-image.sh --push "$repository:$version" | tail -1)"

out="$KK_CACHE/release/$version"
rm -rf "$out" && mkdir -p "$out"
mkdir -p "$out/chart"
if ((prebuilt)); then
  [[ -f "$chart/plugins/instance-selector/plugin.wasm.gz" ]] \
    || { echo "release: --prebuilt-plugins, but $chart has none: run scripts/package-chart.sh --no-package" >&2; exit 1; }
  cp -r "$chart/." "$out/chart"
else
  tar -C "$chart" --exclude=./plugins -cf - . | tar -C "$out/chart" -xf -
  bash scripts/package-chart.sh --no-package --chart "$out/chart" >&2
fi
# Pin what was just built: the values are edited in the copy, never in the repository.
sed -i \
  -e "s|^    repository: .*|    repository: $repository|" \
  -e "s|^    digest: \"\"|    digest: \"$digest\"|" \
  "$out/chart/values.yaml"
grep -q "digest: \"$digest\"" "$out/chart/values.yaml" || { echo "release: could not pin the digest" >&2; exit 1; }
"$helm" package "$out/chart" -d "$out" >&2
"$helm" push "$out/karpenter-provider-kakaocloud-$version.tgz" "oci://$registry" >&2

{
  echo "# karpenter-provider-kakaocloud $version"
  echo
  echo "- chart: \`oci://$repository\` version $version"
  echo "- image: \`$repository:$version@$digest\`"
  echo "- plugin contract: \`kakaocloud:karpenter@$wit_version\`"
  echo
  awk -v v="## $version" '$0 ~ "^"v {on=1; next} /^## / {on=0} on' CHANGELOG.md
} > "$out/NOTES.md"
echo "release: $version: image $repository@$digest, chart oci://$repository $version, notes $out/NOTES.md" >&2
