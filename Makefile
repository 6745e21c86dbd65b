# wasmop — every entry point. Each target installs what it needs, idempotently.
#
#   make demo    build the host and the shipped plugins, start a local control plane (or use
#                the cluster in KUBECONFIG: DEMO_CLUSTER=existing) and show both plugins; demo-down undoes it
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
# Built with `--profile speed` (Cargo.toml says why and which plugins may be).
SPEED_PLUGINS := sidecarset
TEST_PLUGINS := probe hostile ring
# Every host-side cargo command selects the whole workspace. Cargo unifies dependency
# features over the packages a command names, so `-p wasmop` and `--workspace` would
# each build their own kube, wasmtime and host: twice the time, and CI's disk ran out.
# A test of several files is a directory with its main.rs (one binary, as a file is).
E2E_TESTS := $(patsubst tests/tests/%.rs,--test %,$(wildcard tests/tests/*.rs)) \
	$(patsubst tests/tests/%/main.rs,--test %,$(wildcard tests/tests/*/main.rs))

.PHONY: all setup tools build engines plugins demo-plugins host deploy-manifests deploy-plugins deploy-rbac bench-smoke cluster-up cluster-down demo demo-down test lint unit e2e cluster-selftest bench clean

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
	cargo build --workspace --bins

## The JavaScript engine every script plugin runs on (target/plugins/wasmop-js-engine.wasm,
## found there by the host built in target/), and the script plugins beside it. Built
## from engines/js/Cargo.lock with --locked: crates.io packages only, the same
## versions on every machine; the host logs the engine's sha256 when it loads it.
ENGINE_SOURCES := $(shell find engines/js -type f -not -path '*/target/*') $(wildcard wit/*.wit)
SCRIPT_PLUGINS := memcached-js
engines: setup $(WASM_OUT)/wasmop-js-engine.wasm
	@for p in $(SCRIPT_PLUGINS); do cp plugins/$$p/$$p.js $(WASM_OUT)/$$p.js; done

$(WASM_OUT)/wasmop-js-engine.wasm: $(ENGINE_SOURCES) | setup
	@mkdir -p $(WASM_OUT)
	cd engines/js && CARGO_TARGET_DIR=$(ROOT)/target/engine cargo build --release --locked --target wasm32-wasip2
	@cp $(ROOT)/target/engine/wasm32-wasip2/release/wasmop_js_engine.wasm $@
	@sha256sum $@

# $(call build-plugins,PACKAGES,PROFILE): wasm32-wasip2 components in that cargo
# profile, copied to target/plugins/NAME.wasm.
define build-plugins
cargo build --profile $(2) --target wasm32-wasip2 $(foreach p,$(1),-p $(p))
@for p in $(1); do cp $(TARGET_DIR)/wasm32-wasip2/$(2)/$$p.wasm $(WASM_OUT)/$$p.wasm; done
endef

## Plugins as wasm32-wasip2 components, copied to target/plugins/NAME.wasm.
plugins: setup engines $(WASM_OUT)/memcached-v2.wasm
	@mkdir -p $(WASM_OUT)
	cargo build --release --target wasm32-wasip2 -p probe --features v2
	@cp $(TARGET_DIR)/wasm32-wasip2/release/probe.wasm $(WASM_OUT)/probe-v2.wasm
	$(call build-plugins,$(filter-out $(SPEED_PLUGINS),$(PLUGINS)) $(TEST_PLUGINS),release)
	$(call build-plugins,$(SPEED_PLUGINS),speed)
	cargo build --release --target wasm32-wasip2 -p not-a-plugin
	@cp $(TARGET_DIR)/wasm32-wasip2/release/not-a-plugin.wasm $(WASM_OUT)/not-a-plugin.wasm
	@ls -l $(WASM_OUT)

# The Memcached plugin's "new version of the code" that `make demo` hot-reloads
# (`--features v2`). Built only when its sources changed: cargo rebuilds the one
# memcached.wasm at every switch of features, so the default build always runs after
# this one and stays fresh for the next.
MEMCACHED_V2_SOURCES := $(shell find plugins/memcached guest-sdk wit -type f) Cargo.toml Cargo.lock
$(WASM_OUT)/memcached-v2.wasm: $(MEMCACHED_V2_SOURCES) | setup
	@mkdir -p $(WASM_OUT)
	cargo build --release --target wasm32-wasip2 -p memcached --features v2
	@cp $(TARGET_DIR)/wasm32-wasip2/release/memcached.wasm $@

# What the demo runs, and only that: the shipped plugins and Memcached v2.
demo-plugins: setup $(WASM_OUT)/memcached-v2.wasm
	$(call build-plugins,$(filter-out $(SPEED_PLUGINS),$(PLUGINS)),release)
	$(call build-plugins,$(SPEED_PLUGINS),speed)

# The same plugins through cargo-component (wasm32-wasip1 + adapter).
plugins-component: tools
	cargo component build --release $(foreach p,$(PLUGINS) $(TEST_PLUGINS),-p $(p))
	@mkdir -p $(WASM_OUT)/component
	@for p in $(PLUGINS) $(TEST_PLUGINS); do cp $(TARGET_DIR)/wasm32-wasip1/release/$$p.wasm $(WASM_OUT)/component/$$p.wasm; done

build: host plugins

## Generated parts of deploy/: the webhook configurations (from the plugins' handlers).
deploy-manifests: build
	@{ echo "# Generated by \`make deploy-manifests\` from the plugins' declared handlers; do not edit."; \
	  $(TARGET_DIR)/debug/wasmop webhook-config --name wasmop --service wasmop-system/wasmop-webhook \
	    --exclude-namespaces kube-system,wasmop-system $(WASM_OUT)/sidecarset.wasm; } > deploy/webhooks.yaml

## The shipped plugins, gzipped, for `kubectl apply -k deploy/plugins --server-side`.
deploy-plugins: plugins
	@for p in $(PLUGINS); do gzip -9 -n -c $(WASM_OUT)/$$p.wasm > deploy/plugins/$$p.wasm.gz; done
	@ls -l deploy/plugins/*.wasm.gz

## Each shipped plugin's ServiceAccount and least-privilege RBAC, for the cluster admin to apply.
## The shipped plugins' ServiceAccounts and least-privilege RBAC (what a cluster admin
## approves), from their manifests with the settings deploy/plugins ships.
deploy-rbac: build
	@for p in $(PLUGINS); do \
	  s=deploy/plugins/$$p.settings.yaml; [ -f $$s ] && set -- --settings $$s || set --; \
	  $(TARGET_DIR)/debug/wasmop rbac $(WASM_OUT)/$$p.wasm --namespace wasmop-system "$$@" > deploy/plugins/$$p-rbac.yaml || exit 1; \
	done

cluster-up:
	@tests/cluster/up $(CLUSTER_STATE)

cluster-down:
	@tests/cluster/down $(CLUSTER_STATE)

## The main job: see README.md. `make demo KUBECONFIG=...` (on the command line) or
## DEMO_CLUSTER=existing runs it on that cluster instead of the local control plane;
## scripts/demo-lib.sh lists the other DEMO_* settings.
DEMO_CLUSTER ?= $(if $(filter command line,$(origin KUBECONFIG)),existing,local)
export DEMO_CLUSTER
demo: host demo-plugins
	@scripts/demo.sh

# Removes exactly what the demo recorded in target/demo/created (processes by PID).
demo-down:
	@scripts/demo-down.sh

lint: setup
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --target wasm32-wasip2 $(foreach p,$(PLUGINS) $(TEST_PLUGINS),-p $(p)) -- -D warnings
	cd engines/js && cargo fmt -- --check && \
		CARGO_TARGET_DIR=$(ROOT)/target/engine cargo clippy --locked --target wasm32-wasip2 -- -D warnings

unit: setup
	cargo test --workspace

# End-to-end tests need the control plane; it is torn down afterwards, pass or fail.
e2e: build plugins-component
	@tests/cluster/up $(E2E_STATE) >/dev/null
	@set -o pipefail; status=0; \
	KUBECONFIG=$(E2E_STATE)/kubeconfig WASMOP_BIN=$(TARGET_DIR)/debug/wasmop WASMOP_PLUGINS=$(WASM_OUT) \
		cargo test --workspace $(E2E_TESTS) -- --include-ignored --test-threads=3 || status=$$?; \
	WASMOP_PLUGINS=$(WASM_OUT) cargo test --workspace --bench reconcile_overhead -- --quick || status=$$?; \
	KUBECONFIG=$(E2E_STATE)/kubeconfig $(MAKE) --no-print-directory bench-smoke || status=$$?; \
	tests/cluster/down $(E2E_STATE); exit $$status

# up from cold in a separate state folder, then down: nothing of it may be left running.
cluster-selftest:
	@tests/cluster/selftest.sh

test: lint unit cluster-selftest e2e

bench: build
	@scripts/bench.sh

# Every benchmark scenario once, at a tiny size, so the harness cannot rot (no timing
# is asserted). Runs inside `make e2e`, on its control plane, with the debug build the
# tests made: figures come from `make bench`.
bench-smoke: export WASMOP_BENCH_PROFILE = dev
bench-smoke:
	scripts/bench-ring.py --quick
	BENCH_BUSY=1 scripts/bench-admission.py --quick
	ABUSE_LOAD_FIFO=10 scripts/bench-abuse.py --quick
	scripts/bench-isolation.py 1 10
	scripts/bench-converge.sh 3 wasm
	scripts/bench-converge.sh 3 native
	scripts/bench-converge.sh 3 js
	scripts/bench-reload.py 1
	scripts/bench-idle.py 1
	scripts/bench-selectors.py 2 1 2
	scripts/bench-rollout.py --quick
	scripts/bench-scripts.py 3 2
	cargo run -q -p wasmop --example review_cost -- $(WASM_OUT)/sidecarset.wasm $(WASM_OUT)/sidecarset.wasm 20
	cargo run -q -p wasmop --example reload_compile -- $(WASM_OUT)/probe.wasm $(WASM_OUT)/probe-v2.wasm 1

clean: demo-down
	cargo clean
