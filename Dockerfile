# The wasmop host image. Plugins are not baked in: they arrive in ConfigMaps
# (deploy/plugins), so upgrading a plugin never needs a new image.
#
#   docker build -t ghcr.io/wasmop/wasmop:0.1.0 .

FROM rust:1.95-bookworm AS build
WORKDIR /src
# Manifests first, so dependency builds are cached across source edits.
COPY Cargo.toml Cargo.lock rustfmt.toml ./
COPY wit wit
COPY host host
COPY guest-sdk guest-sdk
COPY plugins plugins
COPY tests tests
COPY deploy deploy
COPY engines engines
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --locked --profile host-release -p wasmop \
    && cp target/host-release/wasmop /wasmop
# The JavaScript engine script plugins run on, beside the binary (where the host looks).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    rustup target add wasm32-wasip2 \
    && cd engines/js && CARGO_TARGET_DIR=/src/target/engine cargo build --locked --release --target wasm32-wasip2 \
    && cp /src/target/engine/wasm32-wasip2/release/wasmop_js_engine.wasm /wasmop-js-engine.wasm

# glibc + libgcc (wasmtime unwinds through them), no shell, uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /wasmop /usr/local/bin/wasmop
COPY --from=build /wasmop-js-engine.wasm /usr/local/bin/wasmop-js-engine.wasm
USER 65532:65532
EXPOSE 9443 8080
ENTRYPOINT ["/usr/local/bin/wasmop"]
CMD ["run", "--plugins-configmaps"]
