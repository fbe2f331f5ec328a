#!/usr/bin/env bash
# Builds the test control plane from upstream Go modules, once per version:
#   kube (one multi-call binary: kube-apiserver, kube-controller-manager,
#   kube-scheduler, kubectl), etcd and kwok
# into $KK_CONTROLPLANE_DIR/<kubernetes-version>/bin. A stamp keyed by the
# versions and a hash of the Go module files makes a second run a no-op.
#
# Usage: tests/controlplane/build.sh [--force]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../../scripts/env.sh"
gomods="$here/go"

force=0
[[ "${1:-}" == "--force" ]] && force=1

# The one place the versions live is each module's go.mod.
module_version() { # <module dir> <module path>
  awk -v m="$2" '$1 == m { print $2; exit }' "$gomods/$1/go.mod"
}
k8s_version="$(module_version kubernetes k8s.io/kubernetes)"
etcd_version="$(module_version etcd go.etcd.io/etcd/server/v3)"
kwok_version="$(module_version kwok sigs.k8s.io/kwok)"
for v in k8s_version etcd_version kwok_version; do
  [[ -n "${!v}" ]] || { echo "build.sh: cannot read $v from $gomods/*/go.mod" >&2; exit 1; }
done

# Upstream's release builds stamp the version into component-base (servers) and
# client-go (kubectl); without it the binaries report v0.0.0-master.
minor="${k8s_version#v*.}"; minor="${minor%%.*}"
major="${k8s_version#v}"; major="${major%%.*}"
version_flags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  version_flags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  version_flags+=" -X $pkg.gitTreeState=clean"
done

out="$KK_CONTROLPLANE_DIR/$k8s_version"
stamp_value="$(
  {
    echo "kubernetes=$k8s_version etcd=$etcd_version kwok=$kwok_version"
    echo "ldflags=$version_flags"
    for m in kubernetes etcd kwok; do cat "$gomods/$m/go.mod" "$gomods/$m/go.sum"; done
    cat "$gomods/kubernetes/main.go"
  } | sha256sum | cut -d' ' -f1
)"
binaries=(kube kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok)

is_current() {
  [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp_value" ]] || return 1
  for b in "${binaries[@]}"; do [[ -x "$out/bin/$b" ]] || return 1; done
}

if ((force == 0)) && is_current; then
  echo "controlplane: $k8s_version (etcd $etcd_version, kwok $kwok_version) is up to date in $out/bin"
  exit 0
fi

# Two builds at once (two engineers, or CI and a developer) would race on the output.
mkdir -p "$KK_CONTROLPLANE_DIR"
exec 9>"$KK_CONTROLPLANE_DIR/.build.lock"
flock 9
if ((force == 0)) && is_current; then
  echo "controlplane: built by a concurrent run in $out/bin"
  exit 0
fi

started=$SECONDS
staging="$(mktemp -d "$KK_CONTROLPLANE_DIR/.build-XXXXXX")"
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/bin"

go_build() { # <module dir> <output> <package> [ldflags]
  echo "controlplane: building $2 ($1)"
  (cd "$gomods/$1" && nice -n 10 go build -trimpath -ldflags "-s -w ${4:-}" -o "$staging/bin/$2" "$3")
}

go_build kubernetes kube . "$version_flags"
for name in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  ln -s kube "$staging/bin/$name"
done

if ! go_build etcd etcd go.etcd.io/etcd/server/v3; then
  # Debian's etcd-server is an older etcd, good enough for tests; use it only
  # when the upstream module does not build on this machine.
  if [[ -x /usr/bin/etcd ]]; then
    echo "controlplane: etcd $etcd_version did not build; falling back to /usr/bin/etcd" >&2
    ln -s /usr/bin/etcd "$staging/bin/etcd"
  else
    echo "controlplane: etcd did not build and /usr/bin/etcd (Debian etcd-server) is absent" >&2
    exit 1
  fi
fi

go_build kwok kwok sigs.k8s.io/kwok/cmd/kwok

echo "$stamp_value" >"$staging/stamp"
rm -rf "$out"
mkdir -p "$(dirname "$out")"
mv "$staging" "$out"
trap - EXIT
echo "controlplane: built $k8s_version (etcd $etcd_version, kwok $kwok_version) in $((SECONDS - started)) s into $out/bin"
