# wasmop — every entry point. Each target installs what it needs, idempotently.
#
#   make demo    build everything, start a local control plane and the host, show Memcached converging
#   make test    fmt, clippy, unit tests, then e2e tests against a local control plane (always torn down)
#   make bench   benchmarks (results in BENCHMARKS.md)

SHELL := /bin/bash
ROOT := $(CURDIR)
# An optional shared CARGO_TARGET_DIR (set in the environment) is honoured; the default is ./target.
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(ROOT)/target)
WASM_OUT := $(ROOT)/target/plugins
CLUSTER_STATE ?= $(ROOT)/target/cluster
# The e2e tests get a control plane of their own, so a running demo never interferes.
E2E_STATE ?= $(ROOT)/target/cluster-e2e
CARGO_COMPONENT_VERSION := 0.21.1
PLUGINS := memcached sidecarset
TEST_PLUGINS := probe

.PHONY: all setup tools build plugins host cluster-up cluster-down demo demo-down test lint unit e2e cluster-selftest bench clean

all: build

## Toolchain pieces the build needs (each skipped when present).
setup:
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
	@rustup target list --installed | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1
	@rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
	@rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt

# cargo-component is only needed for the `cargo component build` proof; everything else
# uses the native wasm32-wasip2 target.
tools: setup
	@cargo component --version 2>/dev/null | grep -q "$(CARGO_COMPONENT_VERSION)" || \
		cargo install cargo-component --version $(CARGO_COMPONENT_VERSION) --locked

host: setup
	cargo build -p wasmop

## Plugins as wasm32-wasip2 components, copied to target/plugins/NAME.wasm.
plugins: setup
	@mkdir -p $(WASM_OUT)
	cargo build --release --target wasm32-wasip2 -p probe --features v2
	@cp $(TARGET_DIR)/wasm32-wasip2/release/probe.wasm $(WASM_OUT)/probe-v2.wasm
	cargo build --release --target wasm32-wasip2 $(foreach p,$(PLUGINS) $(TEST_PLUGINS),-p $(p))
	@for p in $(PLUGINS) $(TEST_PLUGINS); do cp $(TARGET_DIR)/wasm32-wasip2/release/$$p.wasm $(WASM_OUT)/$$p.wasm; done
	cargo build --release --target wasm32-wasip2 -p not-a-plugin
	@cp $(TARGET_DIR)/wasm32-wasip2/release/not-a-plugin.wasm $(WASM_OUT)/not-a-plugin.wasm
	@ls -l $(WASM_OUT)

# The same plugins through cargo-component (wasm32-wasip1 + adapter).
plugins-component: tools
	cargo component build --release $(foreach p,$(PLUGINS) $(TEST_PLUGINS),-p $(p))
	@mkdir -p $(WASM_OUT)/component
	@for p in $(PLUGINS) $(TEST_PLUGINS); do cp $(TARGET_DIR)/wasm32-wasip1/release/$$p.wasm $(WASM_OUT)/component/$$p.wasm; done

build: host plugins

cluster-up:
	@tests/cluster/up $(CLUSTER_STATE)

cluster-down:
	@tests/cluster/down $(CLUSTER_STATE)

## The main job: see README.md.
demo: build
	@scripts/demo.sh

demo-down:
	@-pkill -f "$(TARGET_DIR)/debug/wasmop run" ; tests/cluster/down $(CLUSTER_STATE)

lint: setup
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --target wasm32-wasip2 $(foreach p,$(PLUGINS) $(TEST_PLUGINS),-p $(p)) -- -D warnings

unit: setup
	cargo test --workspace

# End-to-end tests need the control plane; it is torn down afterwards, pass or fail.
e2e: build plugins-component
	@tests/cluster/up $(E2E_STATE) >/dev/null
	@set -o pipefail; status=0; \
	KUBECONFIG=$(E2E_STATE)/kubeconfig WASMOP_BIN=$(TARGET_DIR)/debug/wasmop WASMOP_PLUGINS=$(WASM_OUT) \
		cargo test -p wasmop-e2e -- --include-ignored --test-threads=3 || status=$$?; \
	WASMOP_PLUGINS=$(WASM_OUT) cargo test -p wasmop --bench reconcile_overhead -- --quick || status=$$?; \
	tests/cluster/down $(E2E_STATE); exit $$status

# up from cold in a separate state folder, then down: nothing of it may be left running.
cluster-selftest:
	@tests/cluster/selftest.sh

test: lint unit cluster-selftest e2e

bench: build
	@scripts/bench.sh

clean: demo-down
	cargo clean
