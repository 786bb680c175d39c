# The controller's image. Base images are build arguments; their defaults are the public ones:
#   docker build -t node-lifecycle-controller .
# Where no registry is reachable, scripts/image.sh makes local stand-ins and passes them here.
ARG RUST_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
# cargo-auditable embeds the dependency tree (crate names, versions, sources) in the binary, so
# that `cargo audit bin`, trivy or syft can check the shipped binary itself.
ARG CARGO_AUDITABLE_VERSION=0.7.7
RUN cargo install cargo-auditable --version ${CARGO_AUDITABLE_VERSION} --locked
WORKDIR /src
# Dependencies in a layer of their own: the workspace's manifests with stub sources, built once;
# a change of our code then rebuilds only our two crates.
COPY Cargo.toml Cargo.lock build.rs ./
COPY core/Cargo.toml core/
COPY testenv/Cargo.toml testenv/
COPY bench/Cargo.toml bench/
RUN mkdir -p src core/src core/benches testenv/src/bin bench/src \
 && for f in src/main.rs testenv/src/bin/controlplane.rs bench/src/main.rs core/benches/semantics.rs core/benches/admission.rs core/benches/decode.rs core/benches/memory.rs; do echo 'fn main() {}' > "$f"; done \
 && touch src/lib.rs core/src/lib.rs testenv/src/lib.rs \
 && cargo auditable build --profile dist --locked -p node-lifecycle-controller --bin node-lifecycle-controller \
 && rm -rf src core/src
COPY core/src core/src
COPY src src
# `git describe` of the source (the build context has no .git): --version and nlc_build_info.
ARG NLC_GIT_VERSION=""
# COPY keeps the files' own times, which may be older than the stubs': make them newer.
RUN find src core/src -type f -exec touch {} + \
 && cargo auditable build --profile dist --locked -p node-lifecycle-controller --bin node-lifecycle-controller

FROM ${RUNTIME_IMAGE}
# glibc's malloc gives each thread that allocates its own arena and keeps what they free: under a
# flood of large admission reviews that retained memory, not live data, took the webhook near its
# 128 Mi limit (124 MiB peak; 89 MiB with two arenas, tests/hostile.rs).
ENV MALLOC_ARENA_MAX=2
COPY --from=build /src/target/dist/node-lifecycle-controller /usr/local/bin/node-lifecycle-controller
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/node-lifecycle-controller"]
CMD ["run"]
