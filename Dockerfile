# Built and run elsewhere: this development machine has no Docker engine.
#   docker build -t node-lifecycle-controller .
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY benches benches
COPY testenv testenv
RUN cargo build --release --locked --bin node-lifecycle-controller -p node-lifecycle-controller

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/node-lifecycle-controller /usr/local/bin/node-lifecycle-controller
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/node-lifecycle-controller"]
CMD ["run"]
