# The controller image, for anyone with a container builder:
#   docker build -t karpenter-provider-kakaocloud:0.1.0 .
# scripts/build-image.sh assembles an equivalent image without a container engine (same binary
# build, user, entrypoint and CA certificates); docs/operations.md says how they compare.

# Pinned builder: the toolchain this repository is built and tested with (rustc 1.95.0).
FROM docker.io/library/rust:1.95.0-bookworm AS build
WORKDIR /src
COPY . .
# Paths are remapped so the binary does not depend on where it was built.
ENV RUSTFLAGS="--remap-path-prefix=/src=/src --remap-path-prefix=/usr/local/cargo=/cargo"
RUN cargo build --release --locked -p karpenter-kakaocloud --bin karpenter-kakaocloud \
 && install -D -m 0755 target/release/karpenter-kakaocloud /out/karpenter-kakaocloud

# Minimal runtime: glibc, libgcc and CA certificates from Debian 12, user 65532 (nonroot, the
# chart's runAsUser), nothing else (no shell, no package manager).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/karpenter-kakaocloud /karpenter-kakaocloud
USER 65532:65532
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
ENTRYPOINT ["/karpenter-kakaocloud"]
