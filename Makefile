# The two commands of the README:
#   make run    run the controller (against $KUBECONFIG, or a local control plane it starts)
#   make test   the whole test suite: unit tests + integration tests against a real kube-apiserver
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: run test controlplane lint bench-semantics bench-eviction bench-lifecycle release

controlplane:
	scripts/build-controlplane.sh

run:
	scripts/run.sh $(ARGS)

test: controlplane
	$(CARGO) test --workspace --locked

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

bench-semantics:
	$(CARGO) bench --bench semantics

release:
	$(CARGO) build --release --locked --bin node-lifecycle-controller -p node-lifecycle-controller
	$(CARGO) build --release --locked --bin bench -p nlc-testenv

# 1,000 nodes x 30 pods, every node tainted NoExecute at once (see testenv/src/bin/bench.rs).
# BENCH_ARGS passes more, e.g. BENCH_ARGS="-- --kube-api-qps 20 --kube-api-burst 30".
bench-eviction: controlplane release
	target/release/bench eviction $(BENCH_ARGS)

# 1,000 nodes heartbeating; 10 minutes of steady state, then 50 nodes stop.
bench-lifecycle: controlplane release
	target/release/bench lifecycle $(BENCH_ARGS)
