# goflink — run `make help` for the targets.
GO      ?= go
BIN     ?= bin
BUF     := $(GO) tool -modfile=tools/go.mod buf
LINTER  := $(GO) tool -modfile=tools/go.mod golangci-lint
IMAGE   ?= goflink:latest
# docker compose (v2 plugin) or docker-compose (v1), whichever the machine has.
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_RUN := $(COMPOSE) -p goflink -f deploy/docker-compose.yml
# Where make up puts the compose cluster's CA, token and client certificate for flinkctl.
CERTS_DIR := deploy/.certs
# The compose cluster's S3 server: versitygw (the release the tests run, internal/s3test),
# built static into its own FROM-scratch image.
S3_IMAGE ?= goflink-s3:latest
VERSITYGW_VERSION := v1.8.0
VERSITYGW := deploy/.bin/versitygw-$(VERSITYGW_VERSION)
# The compose cluster's S3 secret key: random, made once, kept with the certificates.
S3_SECRET := $(CERTS_DIR)/s3-secret-key
COMPOSE_ENV = GOFLINK_IMAGE=$(IMAGE) GOFLINK_S3_IMAGE=$(S3_IMAGE) GOFLINK_S3_SECRET_KEY="$$(cat $(S3_SECRET) 2>/dev/null)"

.PHONY: help build test test-short run chaos fuzz bench bench-check proto proto-check lint tidy-check ci clean images up down logs e2e

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "%-12s %s\n",$$1,$$2}'

build: ## build jobmanager, taskmanager and flinkctl into bin/
	$(GO) build -o $(BIN)/ ./cmd/...

run: build ## run the odd-even example on an embedded cluster and show the final sums
	@rm -rf out/odd-even
	$(BIN)/flinkctl run --local examples/odd-even.yaml
	@$(GO) run ./examples/summarize -key parity -value value -expect odd=900,even=930 -records 60 out/odd-even

test: ## all tests with the race detector (unit, in-process cluster, real processes)
	$(GO) test -race -count=1 -timeout 20m ./...

test-short: ## quick tests: skips the multi-process system tests
	$(GO) test -race -count=1 -short ./...

chaos: ## exactly-once chaos tests: SIGKILLed TaskManagers (keyed counts, aligned and unaligned checkpoints under backpressure; windows and a window join), SIGKILLed leader JobManagers of a 3-JobManager group, Kafka to Kafka; SEEDS=N seeds each (default 20) or SEEDS=3,17,42
	GOFLINK_CHAOS_SEEDS=$(or $(SEEDS),20) GOFLINK_HA_CHAOS_SEEDS=$(or $(SEEDS),20) GOFLINK_KAFKA_CHAOS_SEEDS=$(or $(SEEDS),20) GOFLINK_WINDOW_CHAOS_SEEDS=$(or $(SEEDS),20) $(GO) test -race -count=1 -timeout 60m -run 'TestChaosExactlyOnce|TestHAChaosExactlyOnce|TestKafkaChaos|TestWindowChaosExactlyOnce' -v ./systemtest/

# Every fuzz target as package:function. go test fuzzes one target per run, so make fuzz runs
# them one after another; it fails when a Fuzz function of the module is missing here.
FUZZ_TARGETS := \
	./record:FuzzDecodeRow ./record:FuzzDecodeMap \
	./state:FuzzKeyedRestore ./state:FuzzOperatorRestore \
	./storage:FuzzReadMetadata \
	./operator:FuzzFileSinkDecode \
	./worker:FuzzRecordReader \
	./expression:FuzzCompile \
	./job:FuzzBuild ./job/spec:FuzzParse
FUZZTIME ?= 10s
# The fuzzer minimizes every input that finds new code, for up to 60 s each by default; that
# would eat a short run, so inputs get 10 s (a failing input too).
FUZZMINIMIZETIME ?= 10s
# One fuzzing process: the machines are shared (2 cores).
FUZZPARALLEL ?= 1

fuzz: ## run every fuzz target for FUZZTIME each (default 10s; FUZZPARALLEL processes, default 1); a failing input is written to the package's testdata/fuzz/
	@listed=" $(FUZZ_TARGETS) "; for f in $$(git grep -h -o '^func Fuzz[A-Za-z0-9_]*' -- '*_test.go' | sed 's/^func //'); do \
		case "$$listed" in *":$$f "*) ;; *) echo "make fuzz: $$f is not in FUZZ_TARGETS" >&2; exit 1;; esac; done
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t##*:} in $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) -parallel $(FUZZPARALLEL) $${t%%:*}; \
	done

bench-check: ## run every Go benchmark once (-benchtime 1x): catches one that no longer runs; figures come from make bench
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

bench: build ## throughput, checkpoint overhead and duration, Kafka exactly-once vs at-least-once, Nexmark q0 q1 q2 q5 q7 q8 and sliding windows, TLS against plaintext (throughput, checkpoint duration), throughput scraped every second against not scraped, recovery after a TaskManager kill and a leader JobManager kill, checkpoint duration and file-sink throughput on S3 (versitygw) against local disk, PostgreSQL sink rows/s exactly-once vs at-least-once, with real processes (~13 min)
	$(GO) run ./bench

proto: ## regenerate Go code from proto/ (offline, pinned plugins)
	$(BUF) lint
	$(BUF) generate

proto-check: proto ## fail if the generated code is stale, or the protos break wire compatibility with branch main
	git diff --exit-code -- proto/
	@if git rev-parse --verify -q main >/dev/null; then $(BUF) breaking --against '.git#branch=main'; \
	else echo "proto-check: no branch main to compare with; breaking check skipped"; fi

lint: ## gofmt, go vet (also of the e2e tests) and golangci-lint with the layering rules of .golangci.yml
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/
	$(LINTER) run ./...

tidy-check: ## fail if go.mod/go.sum (of the project and of tools/) are untidy
	$(GO) mod tidy -diff
	cd tools && $(GO) mod tidy -diff

ci: lint tidy-check test ## what .ci/run runs

clean: ## remove build output
	rm -rf $(BIN) out

images: $(VERSITYGW) ## static binaries (CGO_ENABLED=0) into FROM-scratch images $(IMAGE) and $(S3_IMAGE) (versitygw); nothing is pulled
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o deploy/.bin/ ./cmd/...
	docker build -q -t $(IMAGE) deploy/
	@# The S3 server's root directory with the bucket "goflink" (a directory), owned by its user.
	mkdir -p deploy/.bin/s3root/s3/goflink deploy/.bin/s3root/tmp
	docker build -q -t $(S3_IMAGE) -f deploy/Dockerfile.s3 deploy/
	@docker image ls $(IMAGE) --format '{{.Repository}}:{{.Tag}} {{.Size}}'
	@docker image ls $(S3_IMAGE) --format '{{.Repository}}:{{.Tag}} {{.Size}}'

# The same build as .ci/run's install of the test server (the build cache serves both).
$(VERSITYGW):
	mkdir -p deploy/.bin
	CGO_ENABLED=0 GOBIN=$(abspath deploy/.bin) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	touch $@

$(S3_SECRET):
	mkdir -p -m 700 $(CERTS_DIR)
	umask 077; head -c 24 /dev/urandom | base64 | tr -d '/+=\n' > $@

up: images build $(S3_SECRET) ## start 3 JobManagers, 3 TaskManagers and an S3 server with docker compose, mutual TLS and a token; copies the CA and token to deploy/.certs/ for flinkctl
	$(COMPOSE_ENV) $(COMPOSE_RUN) up -d
	@set -e; id=$$(docker ps -aq --filter label=com.docker.compose.project=goflink --filter label=com.docker.compose.service=certs | head -n 1); \
		test -n "$$id" || { echo "make up: no certs container" >&2; exit 1; }; \
		mkdir -p -m 700 $(CERTS_DIR); \
		for f in ca.pem token client.pem client-key.pem; do docker cp -q "$$id:/certs/$$f" $(CERTS_DIR)/$$f; done
	@echo "cluster up, secured: bin/flinkctl -m localhost:6123 --ca $(CERTS_DIR)/ca.pem --token-file $(CERTS_DIR)/token cluster"
	@echo "  (or export FLINKCTL_CA=$(CERTS_DIR)/ca.pem FLINKCTL_TOKEN=\$$(cat $(CERTS_DIR)/token); any JobManager: 6123, 6133, 6143; all three to survive losing one)"

down: ## stop the compose cluster and remove its containers, network and volumes
	$(COMPOSE_ENV) $(COMPOSE_RUN) down -v --remove-orphans

logs: ## follow the compose cluster's logs
	$(COMPOSE_ENV) $(COMPOSE_RUN) logs -f

e2e: images build $(S3_SECRET) ## the compose cluster end to end: exactly-once job through killed, cut-off and paused containers (~2 min); cleans up whatever happens
	@if docker ps -aq --filter label=com.docker.compose.project=goflink | grep -q .; then \
		echo "make e2e: a goflink compose cluster exists already; make down first" >&2; exit 1; fi
	@trap '$(COMPOSE_ENV) $(COMPOSE_RUN) down -v --remove-orphans >/dev/null 2>&1' EXIT; trap 'exit 130' INT TERM HUP; \
	COMPOSE='$(COMPOSE)' $(COMPOSE_ENV) FLINKCTL=$(abspath $(BIN))/flinkctl $(GO) test -tags e2e -count=1 -timeout 15m -v ./e2e/
