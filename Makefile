# The two commands of the README:
#   make run    run the controller (against $KUBECONFIG, or a local control plane it starts)
#   make test   the whole test suite: unit tests + integration tests against a real kube-apiserver
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: dashboard-png run test test-oldest test-matrix test-differential test-controller-diff fuzz e2e e2e-kind e2e-upstream kind-image image controlplane lint bench-semantics bench-admission bench-memory bench-eviction bench-lifecycle bench-compare bench-chaos build-release release deny

E2E_IMAGE ?= node-lifecycle-controller:dev

controlplane:
	scripts/build-controlplane.sh >/dev/null

run:
	scripts/run.sh $(ARGS)

test: controlplane
	scripts/test-deps.sh
	$(CARGO) build --locked -p nlc-testenv --bin controlplane
	CARGO=$(CARGO) scripts/test.py $(foreach t,$(TEST_SKIP),--skip $(t))

# The suite against the oldest supported Kubernetes (CI runs it beside `make test`, the newest),
# but for the three-minute flood of our own listeners: what it checks is ours (the probes and the
# webhook answered under the flood); the API server only sends admission calls meanwhile, and the
# webhook's answers to v1.33's calls are checked by the rest of the suite.
test-oldest:
	K8S_VERSION=$(OLDEST_K8S) $(MAKE) test TEST_SKIP=floods_of_idle_connections_keep_neither_the_probes_nor_the_api_server_out
OLDEST_K8S ?= v1.33

# The suite and the image run against every supported minor: docs/matrix.md.
test-matrix:
	scripts/test-matrix.sh

# Our admission plugins against kube-apiserver's own, case by case (two API servers, seeded
# random pods and namespaces): NLC_DIFFERENTIAL_CASES=1000 NLC_DIFFERENTIAL_SEED=7 for more.
test-differential: controlplane
	$(CARGO) test --locked --test differential -- --nocapture

# The decoders and the admission decisions as properties at a high case count (structured random
# Pods, Nodes, Leases and reviews; proptest keeps failing seeds in core/proptest-regressions), and
# Go's own answers against ours on 200,000 inputs each (tests/go_oracle.rs). `make test` runs the
# same at 256 and 3,000 cases.
FUZZ_CASES ?= 20000
# The controller against kube-controller-manager (tests/controller_differential.rs) on a larger
# random set of pods: NLC_CONTROLLER_DIFF_PODS (200) drawn from NLC_CONTROLLER_DIFF_SEED. `make
# test` runs the fixed set.
test-controller-diff: controlplane
	NLC_CONTROLLER_DIFF_PODS=$${NLC_CONTROLLER_DIFF_PODS:-200} $(CARGO) test --locked --test controller_differential -- --nocapture

fuzz:
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test --locked -p nlc-core --lib -- random_objects decisions_answer never_panic random_bytes corrupted
	NLC_ORACLE_CASES=200000 $(CARGO) test --locked --test go_oracle -- --nocapture

# The container image from the real Dockerfile (local stand-ins for the base images; see the script).
# make image IMAGE=registry.example.com/node-lifecycle-controller:v0.1.0
IMAGE ?= $(E2E_IMAGE)
image:
	scripts/image.sh $(IMAGE)

# `make release`'s artifacts checked (SBOM, chart, checksums, the binary's embedded dependency
# list), and the image run as the manifests' pod would run: read-only, user 65532, an in-cluster
# identity from the TokenRequest API; two containers fail over. Installs and starts Docker if it can
# (as root); fails, saying why, if it cannot.
e2e: controlplane release
	NLC_E2E_IMAGE=$(E2E_IMAGE) NLC_DIST=$(DIST) $(CARGO) test --locked --features e2e --test e2e -- --nocapture

# The kind node image (and kind itself): kindest/node where a registry is reachable, else built
# here from the Go module proxy and Debian's packages (scripts/kind-image.sh, docs/kind.md);
# cached, a second run takes seconds.
kind-image:
	scripts/kind-image.sh

# On a real kind cluster: the chart installed as a user would, node failures by freezing workers
# (tests/kind/main.rs). Logs and a summary in target/e2e-kind/.
KIND_BIN = $${NLC_CACHE_DIR:-$${XDG_CACHE_HOME:-$$HOME/.cache}/node-lifecycle-controller}/kind/bin/kind
# Upstream's e2e binary builds beside the node image (whose downloads and docker steps leave the
# CPU idle); its log is printed if it fails.
e2e-kind: controlplane image
	mkdir -p target
	set -o pipefail; scripts/e2e-upstream.sh build >target/e2e-upstream-build.log 2>&1 & e2e_build=$$!; \
	node_image=$$(scripts/kind-image.sh | tail -1); image_status=$$?; \
	wait $$e2e_build || { cat target/e2e-upstream-build.log; exit 1; }; \
	[ $$image_status -eq 0 ] || exit $$image_status; \
	NLC_KIND_NODE_IMAGE=$$node_image NLC_KIND_BIN=$(KIND_BIN) NLC_E2E_IMAGE=$(E2E_IMAGE) \
	$(CARGO) test --locked --features e2e --test kind -- --nocapture

# Upstream's own e2e suite (its binary built from the Go module proxy, cached) on a kind cluster of
# its own with the chart: every spec docs/e2e-upstream.md lists; the last result in
# docs/e2e-upstream/results.md. CI runs three of them in `make e2e-kind`.
e2e-upstream: controlplane image
	node_image=$$(scripts/kind-image.sh | tail -1) && \
	NODE_IMAGE=$$node_image IMAGE=$(E2E_IMAGE) scripts/e2e-upstream.sh kind target/e2e-upstream

# Supply chain: RustSec advisories (the vendored snapshot), licenses, duplicate versions and
# sources (deny.toml), offline.
deny:
	scripts/deny.sh

# The release's artifacts, as the release workflow (.github/workflows/release.yml) makes them,
# here for this machine's architecture and unsigned: the image (IMAGE), its SBOM (CycloneDX),
# the packaged chart and their checksums, in $(DIST).
DIST ?= $${CARGO_TARGET_DIR:-target}/dist-artifacts
release:
	scripts/release.sh $(IMAGE) $(DIST)

# What CI checks before any test: formatting, clippy and rustdoc with warnings as errors, and that
# no two sibling modules use each other (tests/module_layers.rs).
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --all-features --locked -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --all-features --locked --document-private-items
	$(CARGO) test --locked --test module_layers

bench-semantics:
	$(CARGO) bench -p nlc-core --bench semantics

# The webhook's decision per request (parse, plugins, patch), without TLS and HTTP.
bench-admission:
	$(CARGO) bench -p nlc-core --bench admission

# What the cache and the eviction queue hold at 5,000 nodes x 30 pods with 147,000 evictions
# pending, as resident set (no control plane; `-- 1000` for 1,000 nodes).
bench-memory:
	$(CARGO) bench -p nlc-core --bench memory

# Ours vs kube-controller-manager (defaults and our budget) vs the API floor, RUNS times per
# size, then the lifecycle workload side by side (LC_SIZES, LC_RUNS): docs/bench/compare.{md,svg,png}.
# SIZES="1000 5000" for the whole envelope; each run on a fresh control plane (see the script).
bench-compare: controlplane build-release
	scripts/bench-compare.sh

# docs/dashboard.png: the Grafana dashboard's panels drawn from the demo, scraped by a real
# Prometheus (scripts/dashboard-png.sh).
dashboard-png: controlplane build-release
	$(CARGO) build --release --locked -p nlc-testenv --bin controlplane
	BIN=$${CARGO_TARGET_DIR:-target}/release scripts/dashboard-png.sh

# The optimised binaries the benchmarks run.
build-release:
	$(CARGO) build --release --locked --bin node-lifecycle-controller -p node-lifecycle-controller
	$(CARGO) build --release --locked --bin bench -p nlc-bench
	@ls -l "$${CARGO_TARGET_DIR:-target}/release/node-lifecycle-controller" | awk '{printf "node-lifecycle-controller: %.1f MB\n", $$5/1e6}'

# 1,000 nodes x 30 pods, every node tainted NoExecute at once (see bench/src/eviction.rs).
# BENCH_ARGS passes more, e.g. BENCH_ARGS="-- --kube-api-qps 20 --kube-api-burst 30".
bench-eviction: controlplane build-release
	$${CARGO_TARGET_DIR:-target}/release/bench eviction --controller $${CARGO_TARGET_DIR:-target}/release/node-lifecycle-controller $(BENCH_ARGS)

# 1,000 nodes heartbeating; 10 minutes of steady state, then 100 (10%) stop: detection delay
# and the zone limiter's taint rate.
bench-lifecycle: controlplane build-release
	$${CARGO_TARGET_DIR:-target}/release/bench lifecycle --controller $${CARGO_TARGET_DIR:-target}/release/node-lifecycle-controller $(BENCH_ARGS)

# 1,000 nodes x 30 pods, a node failing every 4 s for 10 minutes, while a proxy injects 429s,
# 500s, resets and 2 s stalls, the API server restarts twice and a slowloris client holds the
# webhook's connections; then the same without faults: docs/bench/chaos.md (see bench/src/chaos.rs).
BIN_DIR = $${CARGO_TARGET_DIR:-target}/release
bench-chaos: controlplane build-release
	mkdir -p bench/results/runs
	$(BIN_DIR)/bench chaos --controller $(BIN_DIR)/node-lifecycle-controller $(BENCH_ARGS) > bench/results/runs/chaos-faults.json
	$(BIN_DIR)/bench chaos --no-faults --controller $(BIN_DIR)/node-lifecycle-controller $(BENCH_ARGS) > bench/results/runs/chaos-no-faults.json
	$(BIN_DIR)/bench chaos-report --with bench/results/runs/chaos-faults.json --without bench/results/runs/chaos-no-faults.json > docs/bench/chaos.md
