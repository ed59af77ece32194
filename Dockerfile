# The redlease container image: a release build of the `redlease` binary (the workspace's root) on
# debian:bookworm-slim, run as a non-root user. `docker build -t redlease .` from the repo root.
#
# The sidecar listens on 127.0.0.1:7600 unless told otherwise (REDLEASE__LISTEN or --listen):
# inside a container that port is reachable only from the container itself (or, in a k8s pod,
# from the pod's other containers). Set REDLEASE__LISTEN=0.0.0.0:7600 only where the port is
# meant to be reached from outside the container, as docker-compose.yml does on its network.

# --- build stage: the toolchain matches `rust-version` in Cargo.toml (1.88) ---
FROM rust:1.88-bookworm AS build
WORKDIR /src
# Dependencies first, in their own layer: a stub crate with the real manifest and lock file,
# so editing the sources does not refetch and rebuild every dependency.
COPY Cargo.toml Cargo.lock ./
COPY crates/redlease-engine/Cargo.toml crates/redlease-engine/
COPY crates/redlease-client/Cargo.toml crates/redlease-client/
COPY crates/redlease-sidecar/Cargo.toml crates/redlease-sidecar/
COPY crates/redlease-dev/Cargo.toml crates/redlease-dev/
COPY crates/redlease-testkit/Cargo.toml crates/redlease-testkit/
# (Fetched only: the targets the manifests name are stubs here.)
RUN mkdir -p src benches tests/it \
    && for c in engine client sidecar dev testkit; do \
         mkdir -p "crates/redlease-$c/src" && touch "crates/redlease-$c/src/lib.rs"; done \
    && touch src/lib.rs \
    && for f in src/main.rs benches/sequential.rs benches/protocol.rs tests/it/main.rs; do \
         echo 'fn main() {}' > "$f"; done \
    && cargo fetch --locked
COPY crates ./crates
COPY src ./src
COPY lua ./lua
COPY benches ./benches
COPY tests ./tests
RUN cargo build --release --locked \
    && install -m 0755 target/release/redlease /usr/local/bin/redlease

# --- runtime stage ---
FROM debian:bookworm-slim
# curl serves the HEALTHCHECK below and the exec probes of deploy/k8s/deployment.yaml (the
# listener is on loopback there, where kubelet's HTTP probes cannot reach it); ca-certificates
# holds the system's roots, which `rediss://` masters without `fleet.tls.ca_file` are checked
# against. Both come from Debian.
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin redlease
COPY --from=build /usr/local/bin/redlease /usr/local/bin/redlease
USER 10001:10001
# 7600: the API; 9600: the metrics listener where `metrics.listen` sets it (the compose stack
# and the k8s example do; it is off by default).
EXPOSE 7600 9600
# /livez answers 200 while the process runs; it is asked on loopback, which every listen
# address in use here (127.0.0.1:7600 or 0.0.0.0:7600) includes.
HEALTHCHECK --interval=10s --timeout=2s --start-period=5s --retries=3 \
    CMD ["curl", "-sf", "-o", "/dev/null", "http://127.0.0.1:7600/livez"]
ENTRYPOINT ["redlease"]
CMD ["serve"]
