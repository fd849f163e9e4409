# Spillway as a container image, in the place the reference's image puts its binary:
# `/bin/ratelimit` runs `spillway serve` (a binary called `ratelimit` serves), so the
# image replaces envoyproxy/ratelimit's, Envoy Gateway's included, with its environment
# unchanged. `spillway` is there too, for `check`, `validate`, `bench`.
#
#   docker build -t spillway .
#   docker run --rm -p 8080:8080 -p 8081:8081 -v $PWD/examples/policies:/data/ratelimit/config:ro \
#       -e RUNTIME_ROOT=/data -e RUNTIME_SUBDIRECTORY=ratelimit spillway
#
# With no HOST, PORT, GRPC_HOST or GRPC_PORT, HTTP and gRPC listen on 0.0.0.0:8080 and
# 0.0.0.0:8081 (the admin pages stay on 127.0.0.1:6070), so `-p` reaches them.
#
# (The test command does not build this image: there is no container runtime where it
# runs. What it proves of the same binary: crates/cli/tests/deployed.rs starts it as
# `ratelimit` with the environment of the `docker run` above, in a network namespace,
# and reaches it from another address; crates/cli/tests/envoy_gateway.rs does the same
# with Envoy Gateway's environment, rules over xDS, TLS, and a real Envoy.)

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p spillway \
 && install -D target/release/spillway /out/spillway

# glibc and nothing else (no shell, no package manager); runs as any user, Envoy
# Gateway's 65534 included, on a read-only root filesystem.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/spillway /usr/local/bin/spillway
COPY --from=build /out/spillway /bin/ratelimit
USER 65534:65534
EXPOSE 8080 8081 6070
ENTRYPOINT ["/bin/ratelimit"]
