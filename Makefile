# inference-cache build. Only Go and make are needed for build/test/run;
# `make proto` also installs Debian's protobuf-compiler when it is missing.

GO            ?= go
BIN           := $(CURDIR)/bin
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -X main.version=$(VERSION)
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
STATICCHECK_VERSION        := v0.8.2
PROTOS        := $(shell find api command raftnode -name '*.proto' 2>/dev/null)
TEST_TIMEOUT  ?= 14m
BENCHTIME     ?= 1s
BENCHCOUNT    ?= 5

.PHONY: all build release size-check test test-short lint docs bench bench-live proto run clean tools deploy-check helm-check

all: build

## build: compile the inference-cache binary into bin/
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/inference-cache ./cmd/inference-cache

## release: the static, stripped binary that images and releases ship, in bin/release/ (-trimpath, no symbol table or DWARF)
release:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/release/inference-cache ./cmd/inference-cache

## size-check: the release binary is at most MAX_BINARY_MB (every command kept); CI runs it
MAX_BINARY_MB ?= 50
size-check: release
	@sz=$$(stat -c %s $(BIN)/release/inference-cache); mb=$$(( (sz + 1048575) / 1048576 )); \
	  echo "release binary: $$sz bytes ($$mb MiB; limit $(MAX_BINARY_MB) MiB)"; \
	  test $$sz -le $$(( $(MAX_BINARY_MB) * 1048576 )) || { echo "size-check: the release binary is over $(MAX_BINARY_MB) MiB"; exit 1; }

## test: the whole suite, the full tier (≤ 10 min on 2 cores): every Go test with the race detector, the process-level e2e tests among them, then the Python and Rust clients' tests when their toolchains are present. TESTFLAGS adds go test flags (e.g. -json)
# TEST_PACKAGES: packages tested at once. One more than the 2 cores:
# the process-level packages (e2e, e2e/doccmds) spend most of their
# minutes waiting on real processes and timeouts, and a third slot
# overlaps that wait with the CPU-bound packages.
TEST_PACKAGES ?= 3
test:
	$(GO) test -race -count=1 -p $(TEST_PACKAGES) -timeout $(TEST_TIMEOUT) $(TESTFLAGS) ./...
	@$(MAKE) --no-print-directory test-clients-if-present

## test-short: the short tier (≤ 2 min on 2 cores): every package with -short, no race detector; tests that start processes or wait out real timeouts skip, property tests run fewer rounds
test-short:
	$(GO) test -short -count=1 $(TESTFLAGS) ./...

## lint: gofmt, go vet, staticcheck (pinned, through go run) and the docs' generated facts against the code
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	$(GO) run ./internal/docfacts -check $(FACT_DOCS)

## docs: rewrite the generated blocks of the docs (package table, strategies, reason codes) from the code
FACT_DOCS     := README.md docs/contract.md EVALUATION.md
docs:
	$(GO) run ./internal/docfacts $(FACT_DOCS)

## bench: all benchmarks, several runs each (see BENCHMARKS.md)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) ./...

## proto: regenerate the committed Go code from the .proto files
proto: tools
	@command -v protoc >/dev/null || (apt-get update && apt-get install -y protobuf-compiler)
	PATH=$(BIN):$$PATH protoc -I . --go_out=. --go_opt=paths=source_relative \
	  --go-grpc_out=. --go-grpc_opt=paths=source_relative $(PROTOS)

tools:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

## run: start a local 3-node cluster on loopback, 3 sim engines, the subscriber and the routing proxy, with demo traffic through the proxy (inference-cache dev; Ctrl-C stops it)
run: build
	$(BIN)/inference-cache dev

## bench-live: the live benchmark (real processes, real requests; ~20 min on 2 cores): the Mooncake conversation trace through the proxy with each strategy (the picker, round-robin, least-loaded and the peers' dynamo, llm-d, sglang), then a picker run with faults (leader, all nodes, an engine SIGKILLed); tables in $(LIVE_DIR)/live.txt and faults.txt, plot $(LIVE_DIR)/live.png
LIVE_DIR      ?= $(CURDIR)/.eval/live
bench-live: build
	@mkdir -p $(LIVE_DIR)
	$(BIN)/inference-cache bench --live --dir $(LIVE_DIR)/runs --plot $(LIVE_DIR)/live.png > $(LIVE_DIR)/live.txt
	$(BIN)/inference-cache bench --live --faults --dir $(LIVE_DIR)/faults > $(LIVE_DIR)/faults.txt
	@cat $(LIVE_DIR)/live.txt $(LIVE_DIR)/faults.txt

clean:
	rm -rf $(BIN) .dev-cluster

## deps-test: Debian packages the observe integration test needs (real libzmq publisher)
deps-test:
	apt-get install -y -qq python3-zmq python3-msgpack tmux

.PHONY: docker compose-up compose-down compose-test

IMAGE         ?= inference-cache:dev
DOCKER_CTX    := $(BIN)/docker-context
COMPOSE       ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_FILE  := deploy/compose/docker-compose.yml
CA_BUNDLE     ?= /etc/ssl/certs/ca-certificates.crt

## docker: build the FROM-scratch server image $(IMAGE) (static binary, CA bundle, non-root user; pulls nothing)
docker:
	rm -rf $(DOCKER_CTX) && mkdir -p $(DOCKER_CTX)/data
	$(MAKE) --no-print-directory release
	cp $(BIN)/release/inference-cache $(DOCKER_CTX)/inference-cache
	@test -r $(CA_BUNDLE) || { echo "docker: no CA bundle at $(CA_BUNDLE) (install ca-certificates or set CA_BUNDLE=)"; exit 1; }
	cp $(CA_BUNDLE) $(DOCKER_CTX)/ca-certificates.crt
	cp deploy/docker/passwd deploy/docker/group $(DOCKER_CTX)/
	DOCKER_BUILDKIT=$${DOCKER_BUILDKIT:-0} docker build --build-arg VERSION=$(VERSION) -f deploy/docker/Dockerfile -t $(IMAGE) $(DOCKER_CTX)

## compose-up: build the image, then start the 3-node cluster of deploy/compose (gRPC on 127.0.0.1:7401/7411/7421)
compose-up: docker
	IC_IMAGE=$(IMAGE) $(COMPOSE) -f $(COMPOSE_FILE) up -d

## compose-down: stop the compose cluster and delete its containers, network and volumes
compose-down:
	IC_IMAGE=$(IMAGE) $(COMPOSE) -f $(COMPOSE_FILE) down -v --remove-orphans

## compose-test: build the image, then run the compose cluster test (kills, partitions, restarts; needs docker)
compose-test: docker
	IC_COMPOSE_TEST=1 IC_IMAGE=$(IMAGE) IC_COMPOSE="$(COMPOSE)" $(GO) test -count=1 -timeout 15m -run TestCompose -v ./deploy/compose/

## chaos-smoke: bounded chaos run against real server processes (≤ 12 min on
## 2 cores): 3 leader kills, a pause, a follower kill, a replacement, a full
## restart, a clock skewed past the TTL on the leader, an ingest flood and,
## as root with iproute2 and iptables, one of each partition (isolate
## leader/follower, split, gossip-only, Raft-only) and a full disk on the
## leader (skipped with a message otherwise); then the Raft timing profiles
## under 100/200 ms one-way delay with 1 % loss (TestChaosWAN). Fails on any
## broken invariant.
CHAOS_SMOKE_TIMEOUT ?= 12m
chaos-smoke: chaos-deps
	CHAOS=smoke $(GO) test -count=1 -run '^(TestChaos|TestChaosWAN|TestRegression_.*)$$' -timeout $(CHAOS_SMOKE_TIMEOUT) -v ./chaos

## chaos: the long chaos run; writes CHAOS.md. Knobs (environment or make
## variables): CHAOS_NODES (3|5), CHAOS_LEADER_KILLS, CHAOS_PAUSES,
## CHAOS_PARTITIONS (per kind), CHAOS_FOLLOWER_KILLS, CHAOS_REPLACES,
## CHAOS_FULL_RESTARTS, CHAOS_GOSSIP_PARTITIONS, CHAOS_RAFT_PARTITIONS,
## CHAOS_DISK_FULLS, CHAOS_CLOCK_SKEWS, CHAOS_FLOODS, CHAOS_MIN_DURATION
## (e.g. 30m), CHAOS_FAST=1. TestChaosWAN appends its profile table.
CHAOS_TIMEOUT ?= 120m
CHAOS_REPORT  ?= $(CURDIR)/CHAOS.md
chaos: chaos-deps
	CHAOS=long CHAOS_REPORT=$(CHAOS_REPORT) $(GO) test -count=1 -run '^(TestChaos|TestChaosWAN)$$' -timeout $(CHAOS_TIMEOUT) -v ./chaos

# Partitions need iproute2 (ip netns, veth), iptables (gossip-only and
# Raft-only cuts) and root; without them the harness skips those faults
# and says why.
chaos-deps:
	@if [ "$$(id -u)" = 0 ] && { ! command -v ip >/dev/null || ! command -v iptables >/dev/null; }; then \
	  apt-get update && apt-get install -y iproute2 iptables || echo "chaos: iproute2/iptables unavailable; partitions will be skipped"; fi

.PHONY: chaos chaos-smoke chaos-deps

.PHONY: certs fuzz vulncheck kubeapi-e2e doc-commands
GOVULNCHECK_VERSION := v1.1.4
FUZZTIME      ?= 10s
# Every fuzz target as package:Name; CI runs each for $(FUZZTIME).
FUZZ_TARGETS  := ./api:FuzzValidateRequest ./observe:FuzzDecodeBatch ./fsm:FuzzApplyEntry ./command:FuzzPackedDecode ./snapshot:FuzzRead ./tokenizer:FuzzEncode_NeverPanics ./openai:FuzzParseJSON ./openai:FuzzSplitBody

## certs: a throwaway CA, node/client/expired/other-CA certificates, a gossip key and tokens in .certs/ (tests and local TLS trials only)
certs:
	$(GO) run ./internal/certgen -out .certs

## fuzz: run every fuzz target for FUZZTIME each, shrinking a new input for at most 2 s so a short run fuzzes; fails on a finding, not on Go 1.26's bare deadline race (see .ci/fuzz; seed corpora run in make test)
fuzz:
	GO="$(GO)" FUZZTIME=$(FUZZTIME) .ci/fuzz $(FUZZ_TARGETS)

## vulncheck: govulncheck (pinned); needs https://vuln.go.dev
# The picker's manifests, offline: built-in kinds strictly decoded into their
# k8s.io/api types, InferencePool and HTTPRoute by kubeconform (pinned in
# go.mod) against the CRD schemas in deploy/kubernetes/picker/testdata.
deploy-check:
	$(GO) run ./deploy/check deploy/kubernetes/picker

## helm-check: helm lint, then helm template (defaults, and 5 servers with TLS, tokens and the proxy) through the same schema check; Helm is helm.sh/helm/v4 pinned in tools/go.mod (go tool, built on first use)
HELM          := $(GO) -C tools tool helm
CHART         := $(CURDIR)/deploy/helm/inference-cache
helm-check:
	$(HELM) lint --strict $(CHART)
	$(HELM) template ic $(CHART) | $(GO) run ./deploy/check -
	$(HELM) template ic $(CHART) --set server.replicas=5 --set tls.enabled=true --set tls.clientAuth=require-and-verify \
	  --set tokens.secretName=ic-tokens --set gossipKey.secretName=ic-gossip --set proxy.enabled=true \
	  --set 'proxy.backends[0].replica_id=vllm-0' --set 'proxy.backends[0].url=http://vllm-0:8000' | $(GO) run ./deploy/check -

## doc-commands: every command README.md, docs/*.md, clients/*/README.md and the --help examples print, run against make run's cluster on its default ports (~12 min on 2 loaded cores)
doc-commands:
	$(GO) test -count=1 -timeout 30m -run '^TestDocCommands' -v ./e2e/doccmds

## kubeapi-e2e: the picker's InferencePool watch against a real kube-apiserver and etcd, built from their Go modules (e2e/kubeapi/servers, pinned apart from go.mod) and cached under IC_KUBEAPI_CACHE or ~/.cache/inference-cache/kubeapi: the first build takes ~25 min on 2 loaded cores, later runs seconds
KUBEAPI_TIMEOUT ?= 60m
kubeapi-e2e:
	IC_KUBEAPI_E2E=1 $(GO) test -count=1 -timeout $(KUBEAPI_TIMEOUT) -run '^TestPoolWatch_FollowsARealAPIServer$$' -v ./e2e/kubeapi

vulncheck:
	$(GO) run golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION) ./...

.PHONY: evaluate
EVAL_DIR      ?= $(CURDIR)/.eval
EVAL_TRACES   ?= conversation synthetic generator
EVAL_GATEWAYS ?= 1 4 8
# Each figure is the median of EVAL_RUNS replays seeded 1, 2, … (bench --runs).
EVAL_RUNS     ?= 3
EVAL_STRATEGIES ?= round-robin,least-loaded,lookuproute-sdk,picker-indexer,dynamo,dynamo-sync,dynamo-sync-nats,llm-d,sglang,oracle
## evaluate: the EVALUATION.md matrix: the picker, the peers and the oracle on each trace at two prefill speeds with 1, 4 and 8 gateways, each figure the median of EVAL_RUNS (3) seeded replays (embedded cluster each run; ~40 min on 2 cores); JSON and tables in $(EVAL_DIR)
evaluate: build
	@mkdir -p $(EVAL_DIR)
	@set -e; for tr in $(EVAL_TRACES); do for tps in 10000 7000; do for gw in $(EVAL_GATEWAYS); do \
	  if [ $$tr = generator ]; then src=""; else src="--trace testdata/mooncake/$${tr}_trace.jsonl.gz"; fi; \
	  echo "== $$tr prefill $$tps gateways $$gw"; \
	  $(BIN)/inference-cache bench --json --no-progress $$src --prefill-tps $$tps --gateways $$gw --runs $(EVAL_RUNS) --strategies $(EVAL_STRATEGIES) \
	    --plot $(EVAL_DIR)/$$tr-$$tps-$$gw.png > $(EVAL_DIR)/$$tr-$$tps-$$gw.json; done; done; done
	$(GO) run ./internal/evaltable $(EVAL_DIR)/*.json > $(EVAL_DIR)/tables.md
	@echo "tables: $(EVAL_DIR)/tables.md"

include clients/clients.mk
