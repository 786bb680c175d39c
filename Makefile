# The two commands of the README:
#   make run    run the controller (against $KUBECONFIG, or a local control plane it starts)
#   make test   the whole test suite: unit tests + integration tests against a real kube-apiserver
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: run test controlplane lint bench bench-semantics

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
