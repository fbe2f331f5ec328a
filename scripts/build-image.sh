#!/usr/bin/env bash
# Builds the controller image without a container engine and without pulling a base image:
#   scripts/build-image.sh [--push HOST/REPO:TAG]
# The image is an OCI layout in $KK_CACHE/image/<version>/layout (its digest in .../digest):
#   layer 1, a minimal base from Debian 12 packages: glibc (libc6), libgcc-s1, the Mozilla CA
#            bundle (ca-certificates), /etc/passwd with nonroot (65532);
#   layer 2, the release binary at /karpenter-kakaocloud;
#   config:  entrypoint /karpenter-kakaocloud, user 65532:65532, SSL_CERT_FILE, no timestamps.
# The Dockerfile builds the equivalent for a container builder. Reproducible: the same commit and
# the same Debian package versions (recorded as image labels) give the same digest.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
source scripts/env.sh

push=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --push) push="$2"; shift 2 ;;
    *) echo "usage: scripts/build-image.sh [--push HOST/REPO:TAG]" >&2; exit 2 ;;
  esac
done

bash tests/oci/build.sh
version="$(awk -F'"' '/^version *=/ {print $2; exit}' Cargo.toml)"
out="$KK_CACHE/image/$version"
mkdir -p "$out"
work="$(mktemp -d "$out/work.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/base" "$work/app" "$work/debs"

# The binary: its own target directory, because the path remapping below changes every
# compilation unit's flags; remapped paths keep the checkout's location out of the binary.
target="${IMAGE_TARGET_DIR:-$KK_CACHE/image-target}"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
RUSTFLAGS="--remap-path-prefix=$root=/src --remap-path-prefix=$cargo_home=/cargo --remap-path-prefix=$HOME/.rustup=/rustup --remap-path-prefix=$target=/target" \
CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --release --locked --target-dir "$target" -p karpenter-kakaocloud --bin karpenter-kakaocloud
install -D -m 0755 "$target/release/karpenter-kakaocloud" "$work/app/karpenter-kakaocloud"

# The base, from Debian packages (downloaded, never installed).
# gcc-12-base only for libgcc-s1's copyright (its doc directory links there).
(cd "$work/debs" && apt-get download -q libc6 libgcc-s1 gcc-12-base ca-certificates >/dev/null 2>&1)
labels=()
for deb in "$work"/debs/*.deb; do
  pkg="$(dpkg-deb -f "$deb" Package)"
  labels+=(-label "com.kakaocloud.karpenter.debian.$pkg=$(dpkg-deb -f "$deb" Version)")
  dpkg-deb -x "$deb" "$work/extract"
done
x="$work/extract"
b="$work/base"
mkdir -p "$b/lib/x86_64-linux-gnu" "$b/lib64" "$b/etc/ssl/certs" "$b/usr/share/doc"
for lib in libc.so.6 libm.so.6 ld-linux-x86-64.so.2 libgcc_s.so.1; do
  cp -L "$x/lib/x86_64-linux-gnu/$lib" "$b/lib/x86_64-linux-gnu/$lib"
done
ln -s /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$b/lib64/ld-linux-x86-64.so.2"
# What update-ca-certificates would write: every Mozilla certificate, in name order.
find "$x/usr/share/ca-certificates/mozilla" -name '*.crt' | LC_ALL=C sort | xargs cat > "$b/etc/ssl/certs/ca-certificates.crt"
for pkg in libc6 gcc-12-base ca-certificates; do
  mkdir -p "$b/usr/share/doc/$pkg" && cp "$x/usr/share/doc/$pkg/copyright" "$b/usr/share/doc/$pkg/copyright"
done
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$b/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$b/etc/group"

# Deterministic layers: sorted names, fixed times and owners.
layer() { # layer <dir> <tar>
  tar --sort=name --mtime='@0' --owner=0 --group=0 --numeric-owner --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -cf "$2" -C "$1" .
}
layer "$b" "$work/base.tar"
layer "$work/app" "$work/app.tar"

digest="$("$KK_CACHE/oci/imagetool" build -out "$out/layout" \
  -layer "$work/base.tar" -layer "$work/app.tar" \
  -entrypoint /karpenter-kakaocloud -user 65532:65532 \
  -env PATH=/ -env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  -label "org.opencontainers.image.title=karpenter-provider-kakaocloud" \
  -label "org.opencontainers.image.version=$version" \
  -label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  "${labels[@]}")"
echo "$digest" > "$out/digest"
rm -rf "$work"
echo "build-image: $version $digest ($out/layout)" >&2
if [[ -n "$push" ]]; then
  "$KK_CACHE/oci/imagetool" push -layout "$out/layout" -ref "$push" >/dev/null
  echo "build-image: pushed $push@$digest" >&2
fi
echo "$digest"
