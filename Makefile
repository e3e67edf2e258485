# stockguard: `make help` lists the targets.

GO            ?= go
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
MOCKERY       ?= $(GO) run github.com/vektra/mockery/v3@v3.7.0
TEST_FLAGS    ?= -race -count=1 -timeout 25m
BENCH         ?= .
BENCH_FLAGS   ?= -run '^$$' -benchtime 5000x -count 5
PROFILE       ?= quick
DEMO_HTML     ?= $(CURDIR)/bin/demo.html
K6_VERSION    ?= v1.8.1
FAULTS_FLAGS  ?= -race -count=1 -timeout 35m -v
FAULTS_OUT    ?= $(CURDIR)/faults.out
# make test-faults uses this PostgreSQL when STOCKGUARD_TEST_DATABASE_URL is not set and
# it answers, and says so; empty turns that off.
FAULTS_DEFAULT_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test?sslmode=disable

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets (in colour on a terminal only, and not with NO_COLOR set).
	@if [ -t 1 ] && [ -z "$${NO_COLOR:-}" ] && [ "$${TERM:-dumb}" != dumb ]; then on='\033[36m'; off='\033[0m'; else on=; off=; fi; \
	awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %s%-12s%s %s\n", on, $$1, off, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## Run the demo on embedded defaults: oversell shown, then prevented; then a flash sale with carts that expire. The page of all three rounds: DEMO_HTML (bin/demo.html).
	$(GO) run ./cmd/demo -html '$(DEMO_HTML)'

# make run's services: this machine's, unless DATABASE_URL and REDIS_URL say otherwise.
RUN_DATABASE_URL ?= $(or $(DATABASE_URL),postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)
RUN_REDIS_URL    ?= $(or $(REDIS_URL),redis://127.0.0.1:6379/0)
RUN_ADMIN_TOKEN  ?= $(or $(STOCKGUARD_ADMIN_TOKEN),dev-admin-token)

.PHONY: run
run: ## Run one replica on :8080 against this machine's PostgreSQL and Redis (DATABASE_URL, REDIS_URL override), admin token dev-admin-token, text logs.
	DATABASE_URL='$(RUN_DATABASE_URL)' REDIS_URL='$(RUN_REDIS_URL)' STOCKGUARD_ADMIN_TOKEN='$(RUN_ADMIN_TOKEN)' \
	STOCKGUARD_ADDR=$${STOCKGUARD_ADDR:-127.0.0.1:8080} $(GO) run ./cmd/stockguard serve

.PHONY: test
test: ## Run every test with -race (real services when STOCKGUARD_TEST_* are set; unset, this machine's Redis, PostgreSQL, MariaDB and NATS when they answer, unless STOCKGUARD_TEST_NO_DEFAULTS=1). Last line: tests passed, failed, skipped by reason; fails too when a test skipped a service that answers.
	$(GO) build -o bin/gotest ./scripts/gotest # go test -json, reported (a built binary keeps go test's exit status)
	GO='$(GO)' bin/gotest $(TEST_FLAGS) ./... ./pkg/lock/... ./pkg/client/... # three modules (go.work): ./... stops at pkg/lock's and pkg/client's go.mod
	CGO_ENABLED=0 GO='$(GO)' bin/gotest -count=1 ./internal/gormstore # the pure-Go SQLite of builds without cgo

.PHONY: test-faults
test-faults: ## Run the fault-injection tests (PostgreSQL, redis-server, etcd, ZooKeeper, Azurite, Patroni and nats-server needed; ~19-28 min); results in faults.out. Fails when none ran.
	$(GO) test -tags faults $(FAULTS_FLAGS) ./faults -faults.out='$(FAULTS_OUT)' -faults.default-database='$(FAULTS_DEFAULT_DATABASE_URL)'

.PHONY: test-kube
test-kube: ## Apply deploy/k8s to a real Kubernetes control plane (etcd, and kube-apiserver, -controller-manager, -scheduler v1.37.2 that scripts/kube/build.sh builds once, 15-20 min on 2 cores, then finds) and check what it makes of the manifests and of broken copies.
	dir="$$(bash scripts/kube/build.sh)" && STOCKGUARD_TEST_KUBE_BIN="$$dir" $(GO) test -race -count=1 -timeout 10m -v ./deploy/k8s/cluster

.PHONY: compose-test
compose-test: ## Run docker-compose.yml on a real Docker Engine (installed and started when missing, as root): the demo, Prometheus, nginx, then a round with a replica killed and Redis restarted; images no registry gives here are built from Debian packages (scripts/compose).
	$(GO) test -tags compose -count=1 -timeout 80m -v ./scripts/compose

.PHONY: bench
bench: ## Strategies side by side on this machine's Redis and PostgreSQL, then holds, the lock services, the stock events, authentication against none and the soaks (1,000,000 orders, then checkouts) on the default: BENCHMARKS.md, charts (PROFILE=quick|full).
	$(GO) run ./cmd/bench -profile $(PROFILE)

.PHONY: bench-micro
bench-micro: ## Micro-benchmarks: pkg/lock's backends (Redis, Redlock, PostgreSQL, etcd, ZooKeeper, Azure blob lease) side by side and against redislock; the load generator against wrk (trivial handler) and k6 (fresh database and replica per run, interleaved). A missing wrk or k6 is installed in CI, else named with what is skipped.
	@GO='$(GO)' K6_VERSION='$(K6_VERSION)' bash scripts/bench-tools.sh
	$(GO) test $(BENCH_FLAGS) -bench '$(BENCH)' ./pkg/lock/...
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 30m ./loadtest # wrk on a trivial handler; k6 on real replicas (STOCKGUARD_TEST_DATABASE_URL, STOCKGUARD_TEST_REDIS_URL)

.PHONY: lint
lint: ## Run golangci-lint (version pinned here, settings in .golangci.yml).
	$(GOLANGCI_LINT) run ./... ./pkg/lock/... ./pkg/client/...

.PHONY: mocks
mocks: ## Regenerate the mockery mocks (settings and packages in .mockery.yml).
	@if grep -q '^packages: {}' .mockery.yml; then echo "mocks: no packages listed in .mockery.yml"; else $(MOCKERY); fi

.PHONY: diagram
diagram: ## Render the README's architecture picture, docs/architecture.svg, from docs/architecture.txt (a test fails when they differ).
	$(GO) run ./scripts/diagram -in docs/architecture.txt -out docs/architecture.svg

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: tidy
tidy: ## Tidy go.mod and go.sum, the service's, pkg/lock's and pkg/client's (modules of their own).
	$(GO) mod tidy
	cd pkg/lock && $(GO) mod tidy
	cd pkg/client && $(GO) mod tidy
