# choreo — run `make help` for the targets.
SHELL := /bin/bash
GO    ?= go

# Library packages run under the race detector; the services, commands and end-to-end
# tests and the benchmark helpers run without it (they are big and these machines have 2 cores).
LIB_PKGS := ./event/... ./idempotency/... ./lock/... ./outbox/... ./consumer/... ./tracing/... ./app/... ./internal/... ./tracker/...
APP_PKGS := ./services/... ./cmd/... ./deploy/... ./bench/... ./examples/... ./chaos/...

# make help lists these first, in this order, then the others as they appear below.
HELP_FIRST := demo test

.PHONY: help
help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' -v first='$(HELP_FIRST)' ' \
	  BEGIN { n = split(first, f, " "); for (i = 1; i <= n; i++) rank[f[i]] = i } \
	  { name[NR] = $$1; desc[NR] = $$2; if (length($$1) > w) w = length($$1) } \
	  END { for (i = 1; i <= n; i++) for (j = 1; j <= NR; j++) if (name[j] == f[i]) printf "  make %-*s  %s\n", w, name[j], desc[j]; \
	        for (j = 1; j <= NR; j++) if (!(name[j] in rank)) printf "  make %-*s  %s\n", w, name[j], desc[j] }'
	@sed -n 's/^#: \{0,1\}//p' $(MAKEFILE_LIST)

# make help prints these lines after the targets.
#:
#: The demo's knobs (e.g. DEMO_KEEP=1 make demo):
#:   DEMO_KEEP=1           keep the system running until Ctrl-C: console, tracker, the stuck order held;
#:                         prints the commands that inspect it (sagactl finds the demo through .demo/env)
#:   DEMO_ORDERS=200       orders to place          DEMO_RATE=50   orders per second
#:   DEMO_STUCK_AFTER=30s  an unanswered step is stuck after this, for the order service and the tracker
#:   DEMO_SAGA_TIMEOUT     the stuck order's deadline (1h with DEMO_KEEP, else 2m)
#:   TRACES=1              also build and run Jaeger v2 and send it the traces
#:   DEMO_KAFKA_PORT=19092, DEMO_ORDER_ADDR=127.0.0.1:18080, DEMO_PAYMENT_ADDR=…:18081,
#:   DEMO_INVENTORY_ADDR=…:18082 (admin listeners on port + 1000), DEMO_CONSOLE_ADDR=127.0.0.1:18090

.PHONY: services
services: ## start local Postgres and Redis if they are down
	@scripts/ensure-services.sh

# The saga's end-to-end test (APACHE_PKGS) runs on a real Apache Kafka broker (one node,
# scripts/kafka.sh; the jars are fetched with Maven on first use), every other test on kfake.
APACHE_PKGS := ./services/e2e
# The slowest scenarios (by time, measured per package with /usr/bin/time and per test with
# go test -json): make test leaves them out, make test-slow runs them
# (CI runs both). README.md, "Tests", lists them.
SLOW_TESTS := TestPerKeyOrderConcurrentWriters|TestSagaWithDuplicates|TestRebalanceUnderLoad|TestRedoWindowAfterKill|TestSecuredDeployment|TestGroupSurvivesMembersKilledInRebalance
TEST_ENV = GO='$(GO)' LIB_PKGS='$(LIB_PKGS)' APP_PKGS='$(APP_PKGS)' APACHE_PKGS='$(APACHE_PKGS)' SLOW_TESTS='$(SLOW_TESTS)'

.PHONY: test
test: services ## every test but the slowest scenarios, on real Postgres and Redis, an in-process Kafka broker and the saga end to end on Apache Kafka; prints its CPU time
	@$(TEST_ENV) scripts/test.sh fast

.PHONY: test-slow
test-slow: services ## the slowest scenarios make test leaves out (SLOW_TESTS in the Makefile); prints its CPU time
	@$(TEST_ENV) scripts/test.sh slow

.PHONY: kafka
kafka: ## Apache Kafka 4.4.0 in KRaft mode as Java processes: 127.0.0.1:9092 (KAFKA_NODES=3: also :9094, :9096) until Ctrl-C, which stops it and deletes its data
	@scripts/kafka.sh run -n $${KAFKA_NODES:-1} -p $${KAFKA_PORT:-9092}

.PHONY: group-protocols
group-protocols: services ## on Apache Kafka: how long a partition stalls when an instance joins, leaves or restarts, per consumer-group protocol (about 4 min; bench/rebalance)
	CHOREO_TEST_KAFKA=apache $(GO) test -count=1 -run '^$$' -bench GroupProtocols -benchtime 1x -timeout 15m ./bench/rebalance

.PHONY: lint
lint: contracts-check ## gofmt, go vet and the contracts gate
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd internal/testenv/containers && $(GO) vet ./...
	cd cmd/sagactl/browsertest && $(GO) vet ./...

.PHONY: contracts-check
contracts-check: ## the reference saga's declarations against the committed baseline: fails on a change that breaks a consumer (docs/contracts.md)
	$(GO) run ./cmd/sagactl contracts check -baseline services/saga/baseline.json

.PHONY: fuzz
fuzz: ## explore the event decoder (binary and structured mode) and the order API's body decoding with the fuzzer, 30s each
	$(GO) test ./event -run '^$$' -fuzz '^FuzzFromRecord$$' -fuzztime 30s
	$(GO) test ./event -run '^$$' -fuzz '^FuzzFromStructuredRecord$$' -fuzztime 30s
	$(GO) test ./services/order/ordersvc -run '^$$' -fuzz '^FuzzDecodeCreateRequest$$' -fuzztime 30s

.PHONY: build
build: ## build every binary into bin/
	$(GO) build -o bin/ ./cmd/... ./services/order ./services/payment ./services/inventory ./examples/shipping

.PHONY: soak
soak: services ## the saga at half its saturation for SOAK_MINUTES (default 60): RSS, table sizes, p99 drift (bench/soak)
	$(GO) run ./bench/soak -duration $(or $(SOAK_MINUTES),60)m

.PHONY: soak-hold
soak-hold: services ## the soak with a REPEATABLE READ snapshot held 10 minutes on every service database (17 min): throughput and p99 during and after it ÷ before, dead rows per table; heap profiles into SOAK_PROFILES (bench/soak -hold)
	$(GO) run ./bench/soak -duration 17m -hold-at 5m -hold 10m -profiles $${SOAK_PROFILES:-/tmp/soak-profiles}

.PHONY: bench
bench: services ## run the benchmarks and print their tables (see docs/benchmarks.md)
	$(GO) run ./bench/guards
	$(GO) run ./bench/outbox
	$(GO) run ./bench/retention # the idempotency window kept by deletes vs by dropped time partitions: size and claims/s
	$(GO) run ./bench/consumer
	$(GO) run ./bench/services -duration 5s -workers 1,8 -orders 3000
	$(GO) run ./bench/order -duration 5s
	$(GO) test -run '^$$' -bench . -benchmem ./tracing ./consumer ./lock ./idempotency
	$(GO) run ./bench/hotentity -json bench/results.json
	$(GO) run ./bench/hotentity -apache -events 6000 -processes "" -signed=false -unfenced=false -atcommit=false -batch 64 -json bench/results.json
	$(GO) run ./bench/hotentity -prefill 10000000 -batch "" -processes "" -signed=false -unfenced=false -atcommit=false -json bench/results.json -json-key hotentity_prefilled
	$(GO) run ./bench/saga -kafka devkafka,apache -rates 400,1600 -duration 15s -half=false -json '' -svg ''
	$(GO) run ./bench/saga -statements -sweep 1,2,4
	$(GO) run ./bench/tracker -prefill 10000000 # after bench/saga: compares with its saturation rate; then the console queries and the ingest on a 10M-event index

COMPOSE := $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)

.PHONY: up
up: ## the full stack with Docker Compose (Kafka, Postgres, Redis, Jaeger, services)
	$(COMPOSE) --env-file deploy/compose.env up --build -d

.PHONY: down
down: ## stop the Compose stack
	$(COMPOSE) --env-file deploy/compose.env down

.PHONY: compose-check
compose-check: ## validate docker-compose.yml without a Docker engine
	@command -v docker-compose >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null; }
	docker-compose --env-file deploy/compose.env -f docker-compose.yml config -q
	! grep -nE 'PASSWORD:-|password=[^$$]' docker-compose.yml # no password literals
	$(GO) test -count=1 ./deploy/...

.PHONY: readme-check
readme-check: services ## run the README's shell commands as written
	@scripts/readme-check.sh

.PHONY: chaos
chaos: services redis-cluster ## Redis Cluster + failover, then every chaos scenario (kill -9, outages, network faults, duplicates, poison, pause, overload, a rolling upgrade; broker kill -9, pause and rolling restart on a 3-node Apache Kafka), 2,000 orders each
	$(GO) run ./cmd/chaos -orders $${CHAOS_ORDERS:-2000} -seed $${CHAOS_SEED:-1} -report $${CHAOS_REPORT:-chaos-report.md}

.PHONY: chaos-partitions
chaos-partitions: services ## the partitions chaos scenario, not in make chaos (about 3 min plus the build): 4 instances per service, 64 vs 8 partitions at half saturation, a kill -9 and a rolling restart of all 12 (docs/reliability.md)
	$(GO) run ./cmd/chaos -scenarios partitions -orders $${CHAOS_ORDERS:-2000} -seed $${CHAOS_SEED:-1} -report $${CHAOS_REPORT:-chaos-partitions-report.md}

.PHONY: chaos-pgbouncer
chaos-pgbouncer: services ## the pgbouncer chaos scenario, not in make chaos: 4 instances of each service, their pools through a private PgBouncer in transaction mode (Debian's, installed if missing), kill -9s of instances and of PgBouncer, Postgres connections against PgBouncer's bound
	@scripts/ensure-pgbouncer.sh >/dev/null
	$(GO) run ./cmd/chaos -scenarios pgbouncer -orders $${CHAOS_ORDERS:-2000} -seed $${CHAOS_SEED:-1} -report $${CHAOS_REPORT:-chaos-pgbouncer-report.md}

.PHONY: redis-cluster
redis-cluster: services ## the locker and the consumer's outage rules on a real Redis Cluster: 3 masters, then a failover (about 20 s)
	CHOREO_REDIS_CLUSTER=1 $(GO) test -race -count=1 -timeout 5m -run 'TestRedisCluster' -v ./lock/

.PHONY: interop-check
interop-check: services ## on Apache Kafka, stock Java (kafka-clients + CloudEvents SDK) and kafkajs 2.2.4 consumers read the kit's producer output as valid CloudEvents, and Java-written events are handled by examples/shipping (docs/interop.md)
	@scripts/interop-check.sh

.PHONY: demo
demo: services ## the saga on this machine: broker, three services, tracker, console, 200 orders (first run ~2 min compiling; knobs below)
	@TRACES=$(TRACES) scripts/demo.sh

.PHONY: jaeger
jaeger: ## build Jaeger v2 from the Go module proxy (tools/jaeger) and run it: OTLP 127.0.0.1:4317/4318, query API :16686, memory storage
	@scripts/jaeger.sh

.PHONY: jaeger-check
jaeger-check: services ## make demo TRACES=1, then assert the stuck order's trace in Jaeger spans order and payment, a completed saga's all three services, and sagactl console draws the stuck order's trace
	@TRACES=1 JAEGER_CHECK=1 DEMO_ORDERS=$${DEMO_ORDERS:-60} scripts/demo.sh

# The console's browser test is a module of its own (cmd/sagactl/browsertest), so its
# chromedp dependency stays out of go.mod.
CONSOLE_TEST := $(GO) -C cmd/sagactl/browsertest test -count=1 -timeout 5m ./...

.PHONY: console-test
console-test: services ## sagactl console in headless Chromium against the demo saga (installs chromium if missing)
	@scripts/ensure-chromium.sh
	$(CONSOLE_TEST)

.PHONY: console-screenshots
console-screenshots: services ## regenerate docs/console-*.png with the console's browser test
	@scripts/ensure-chromium.sh
	CONSOLE_SCREENSHOTS=$(CURDIR)/docs $(CONSOLE_TEST) -v -run TestConsoleInChromium
