#!/usr/bin/env bash
# make demo: runs the saga on this machine. Builds the binaries, starts cmd/devkafka, the
# three services, the saga tracker (sagactl track) and the console (sagactl console) as
# separate processes, places a mixed batch of orders with `sagactl load` (including one
# deliberately stuck order and one poison record, which lands in orders.events.dlq), prints
# the summary, and stops every process it started, also on Ctrl-C or a SIGINT/SIGTERM to
# make. With DEMO_KEEP=1 it keeps the system running until then, holds the stuck order
# (its saga deadline, DEMO_SAGA_TIMEOUT, is 1h) and writes the addresses to .demo/env,
# where sagactl run in this directory finds them; every command it prints runs as printed.
# Logs go to .demo/logs/. A second run needs no clean-up.
# Stuck means one thing in the order service, the tracker and the console: no answer
# within DEMO_STUCK_AFTER (default 30s, the default of both ORDER_STUCK_AFTER and the
# steps' "within" in deploy/tracker/order.json); the demo passes it to both.
# TRACES=1 (make demo TRACES=1) also builds and runs Jaeger v2 (scripts/jaeger.sh), points
# the services at it and reads the stuck order's trace back from Jaeger's query API;
# JAEGER_CHECK=1 (make jaeger-check) then fails unless that trace spans order and payment
# and a completed saga's trace spans all three services, and unless sagactl console, given
# Jaeger's query API, draws the stuck order's trace with spans of order and payment.
set -euo pipefail
cd "$(dirname "$0")/.."

ORDERS=${DEMO_ORDERS:-200}
RATE=${DEMO_RATE:-50}
KAFKA_PORT=${DEMO_KAFKA_PORT:-19092}
ORDER_ADDR=${DEMO_ORDER_ADDR:-127.0.0.1:18080}
PAYMENT_ADDR=${DEMO_PAYMENT_ADDR:-127.0.0.1:18081}
INVENTORY_ADDR=${DEMO_INVENTORY_ADDR:-127.0.0.1:18082}
CONSOLE_ADDR=${DEMO_CONSOLE_ADDR:-127.0.0.1:18090}
TRACKER_DB=postgres://postgres@127.0.0.1:5432/choreo_demo_tracker?sslmode=disable
STUCK_AFTER=${DEMO_STUCK_AFTER:-30s}
KEEP=${DEMO_KEEP:-}
if [ -n "$KEEP" ]; then SAGA_TIMEOUT=${DEMO_SAGA_TIMEOUT:-1h}; else SAGA_TIMEOUT=${DEMO_SAGA_TIMEOUT:-2m}; fi
DEMO_DIR=.demo
LOGS=$DEMO_DIR/logs
admin_addr() { echo "${1%:*}:$((${1##*:} + 1000))"; } # the admin listener: HTTP port + 1000

scripts/ensure-services.sh
mkdir -p "$LOGS" bin
echo "demo: building binaries (about 2 minutes the first time, seconds after that)"
go build -o bin/ ./cmd/devkafka ./cmd/sagactl ./services/order ./services/payment ./services/inventory
if [ -n "${TRACES:-}" ]; then
  go build -o bin/ ./tools/jaegercheck
  scripts/jaeger.sh build
fi

pids=()
jaeger_pid=
watch_pid=
stop_pids() { # pid... : SIGTERM, wait up to 10 s, then SIGKILL
  kill -TERM "$@" 2>/dev/null || true
  for _ in $(seq 1 100); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
}
cleanup() {
  trap - EXIT INT TERM
  rm -f "$DEMO_DIR/env"
  if [ -n "$watch_pid" ]; then kill "$watch_pid" 2>/dev/null || true; fi
  if [ ${#pids[@]} -gt 0 ]; then
    echo "demo: stopping ${#pids[@]} processes (the services first, then the broker, so their final commits succeed)"
    # pids[0] is devkafka: the services drain and commit their offsets while it still runs.
    [ ${#pids[@]} -gt 1 ] && stop_pids "${pids[@]:1}"
    stop_pids "${pids[0]}"
  fi
  # Jaeger last: the services flush their spans to it as they stop.
  if [ -n "$jaeger_pid" ]; then stop_pids "$jaeger_pid"; fi
  wait 2>/dev/null || true
}
trap cleanup EXIT
# Ctrl-C is how a demo is stopped, not a failure: exit 0 (after cleanup), so make reports
# no error for it.
trap 'echo; echo "demo: interrupted"; exit 0' INT
trap 'exit 143' TERM
# make stops its recipe on SIGTERM, but on a SIGINT sent to make alone (kill -INT, not
# Ctrl-C, which reaches the whole process group) it only waits for it, with SIGINT blocked
# in its signal handler. The demo watches for that and stops as on Ctrl-C.
if [ "$(ps -o comm= -p "$PPID" 2>/dev/null)" = make ]; then
  make_pid=$PPID
  (
    while sig=$(awk '/^SigBlk:/ {print $2}' "/proc/$make_pid/status" 2>/dev/null) && [ -n "$sig" ]; do
      if (( 16#$sig & 2 )); then kill -INT $$; break; fi
      sleep 1
    done
  ) &
  watch_pid=$!
fi

wait_http() { # url name
  for _ in $(seq 1 150); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "demo: $2 did not become ready at $1; see $LOGS/$2.log" >&2
  tail -n 20 "$LOGS/$2.log" >&2 || true
  return 1
}

# A fresh broker every run: the services' databases keep their history, the topics start empty.
rm -rf "$DEMO_DIR/kafka"
bin/devkafka -port "$KAFKA_PORT" -data-dir "$DEMO_DIR/kafka" -partitions 6 \
  -topics orders.events,payments.events,inventory.events >"$LOGS/devkafka.log" 2>&1 &
pids+=($!)

export KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT REDIS_ADDR=${REDIS_ADDR:-127.0.0.1:6379}
export ORDER_STUCK_AFTER=$STUCK_AFTER ORDER_SAGA_TIMEOUT=$SAGA_TIMEOUT
# The tracker's declaration of the order saga, with every step's window set to the same
# STUCK_AFTER.
sed -E 's/"within": *"[^"]*"/"within": "'"$STUCK_AFTER"'"/g' deploy/tracker/order.json >"$DEMO_DIR/tracker.json"
# Each service opens 16 Postgres connections before it is ready, so the first orders do not
# wait for new backends (docs/operations.md, "Slow first seconds after a start").
export DATABASE_MIN_CONNS=${DATABASE_MIN_CONNS:-16}
if [ -n "${TRACES:-}" ]; then
  bin/jaeger --config tools/jaeger/config.yaml >"$LOGS/jaeger.log" 2>&1 &
  jaeger_pid=$!
  wait_http "http://127.0.0.1:16686/api/services" jaeger
  # Jaeger takes traces only; metrics stay on each service's /metrics.
  export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_METRICS_EXPORTER=none
  echo "demo: Jaeger v2 runs on this machine (OTLP 127.0.0.1:4318, query API http://127.0.0.1:16686/api/; log in $LOGS/jaeger.log)"
fi
if [ -n "${OTEL_EXPORTER_OTLP_ENDPOINT:-}" ]; then
  echo "demo: traces go to $OTEL_EXPORTER_OTLP_ENDPOINT"
else
  echo "demo: traces are not exported (make demo TRACES=1 runs a Jaeger and sends them there)"
fi

# Event signing (docs/threat-model.md): each service signs what it publishes with its own
# Ed25519 key, and every service requires the signature of each source. The keys are made
# once, in $DEMO_DIR/keys (private keys 0600).
KEYS=$DEMO_DIR/keys
mkdir -p "$KEYS" && chmod 700 "$KEYS"
trusted=()
for svc in order payment inventory; do
  if [ ! -s "$KEYS/$svc.key" ]; then
    (umask 077 && openssl genpkey -algorithm ed25519 -out "$KEYS/$svc.key")
    openssl pkey -in "$KEYS/$svc.key" -pubout -out "$KEYS/$svc.pub"
  fi
  trusted+=("$svc=$KEYS/$svc.pub")
done
export CHOREO_TRUSTED_KEYS
CHOREO_TRUSTED_KEYS=$(IFS=,; echo "${trusted[*]}")
echo "demo: events are signed (keys in $KEYS)"

CHOREO_SIGNING_KEY_FILE=$KEYS/payment.key HTTP_ADDR=$PAYMENT_ADDR ADMIN_ADDR=$(admin_addr "$PAYMENT_ADDR") \
  PAYMENT_HANG_CUSTOMERS=c-hang bin/payment >"$LOGS/payment.log" 2>&1 &
pids+=($!)
CHOREO_SIGNING_KEY_FILE=$KEYS/inventory.key HTTP_ADDR=$INVENTORY_ADDR ADMIN_ADDR=$(admin_addr "$INVENTORY_ADDR") \
  bin/inventory >"$LOGS/inventory.log" 2>&1 &
pids+=($!)
CHOREO_SIGNING_KEY_FILE=$KEYS/order.key HTTP_ADDR=$ORDER_ADDR ADMIN_ADDR=$(admin_addr "$ORDER_ADDR") \
  bin/order >"$LOGS/order.log" 2>&1 &
pids+=($!)

# The saga tracker indexes the three topics into its own database, made afresh with the
# broker (the index is keyed by topic, partition and offset).
PGOPTIONS='-c client_min_messages=warning' dropdb -h 127.0.0.1 -U postgres --if-exists --force choreo_demo_tracker
createdb -h 127.0.0.1 -U postgres choreo_demo_tracker
export ORDER_URL=http://$ORDER_ADDR CONSOLE_ADDR TRACKER_DATABASE_URL=$TRACKER_DB TRACKER_CONFIG=$DEMO_DIR/tracker.json
export CONSOLE_METRICS="order=http://$(admin_addr "$ORDER_ADDR")/metrics,payment=http://$(admin_addr "$PAYMENT_ADDR")/metrics,inventory=http://$(admin_addr "$INVENTORY_ADDR")/metrics"
bin/sagactl track -refresh 2s >"$LOGS/tracker.log" 2>&1 &
pids+=($!)

wait_http "http://$PAYMENT_ADDR/readyz" payment
wait_http "http://$INVENTORY_ADDR/readyz" inventory
wait_http "http://$ORDER_ADDR/readyz" order
console_flags=()
if [ -n "${TRACES:-}" ]; then console_flags=(-jaeger-query http://127.0.0.1:16686); fi
bin/sagactl console "${console_flags[@]}" >"$LOGS/console.log" 2>&1 &
pids+=($!)
wait_http "http://$CONSOLE_ADDR/" console
# sagactl run in this directory reads these while the demo runs (cmd/sagactl/demoenv.go).
cat >"$DEMO_DIR/env" <<ENV
ORDER_URL=$ORDER_URL
KAFKA_BROKERS=$KAFKA_BROKERS
CONSOLE_ADDR=$CONSOLE_ADDR
CONSOLE_METRICS=$CONSOLE_METRICS
TRACKER_DATABASE_URL=$TRACKER_DATABASE_URL
TRACKER_CONFIG=$TRACKER_CONFIG
ENV
echo "demo: broker on $KAFKA_BROKERS, order API on $ORDER_URL, console on http://$CONSOLE_ADDR/, logs in $LOGS/"

# Printed commands must run as printed: without DEMO_KEEP the system stops after the
# summary, so load prints none.
load_flags=(-poison 1)
if [ -z "$KEEP" ]; then load_flags+=(-inspect=false); fi
bin/sagactl load -n "$ORDERS" -rate "$RATE" "${load_flags[@]}"
echo
if [ -n "${TRACES:-}" ]; then
  # This run's stuck order (the newest: sagactl stuck lists oldest first, and an earlier
  # run's stuck order stays listed until its saga deadline) and its trace id, once the
  # order service lists it as stuck.
  order_id= trace_id=
  for _ in $(seq 1 40); do
    last=$(ORDER_URL="http://$ORDER_ADDR" bin/sagactl stuck -json | grep -o '"id": *"[^"]*"\|"trace_id": *"[0-9a-f]\{32\}"' | tail -2 || true)
    order_id=$(grep '"id"' <<<"$last" | sed 's/.*"\([^"]*\)"$/\1/' || true)
    trace_id=$(grep '"trace_id"' <<<"$last" | grep -o '[0-9a-f]\{32\}' || true)
    [ -n "$trace_id" ] && [ -n "$order_id" ] && break
    sleep 0.5
  done
  if [ -z "$trace_id" ]; then
    echo "demo: no stuck order with a trace id to look up in Jaeger" >&2
    [ -n "${JAEGER_CHECK:-}" ] && exit 1
  else
    echo "demo: the stuck order's trace, read back from Jaeger (it ends at payment, which never answered):"
    check=(-trace "$trace_id" -want order,payment)
    [ -n "${JAEGER_CHECK:-}" ] && check+=(-complete inventory,order,payment)
    if ! bin/jaegercheck "${check[@]}"; then
      [ -n "${JAEGER_CHECK:-}" ] && exit 1
    fi
    if [ -n "${JAEGER_CHECK:-}" ]; then
      # The console draws the same trace, read from Jaeger's query API, as a span waterfall
      # on the stuck order's page: it must show spans of order and payment.
      page=$(curl -fsS "http://$CONSOLE_ADDR/orders/$order_id")
      for svc in order payment; do
        if ! grep -q "data-service=\"$svc\"" <<<"$page"; then
          echo "demo: the console's waterfall of order $order_id (http://$CONSOLE_ADDR/orders/$order_id) shows no span of $svc" >&2
          exit 1
        fi
      done
      echo "demo: the console's page of order $order_id draws its trace with $(grep -c '<g class="span ' <<<"$page") spans of order and payment"
    fi
  fi
  echo
fi
if [ -n "$KEEP" ]; then
  stuck_id=$(bin/sagactl stuck -json | grep -o '"id": *"[^"]*"' | tail -1 | sed 's/.*"\([^"]*\)"$/\1/' || true)
  cat <<MSG
demo: the system keeps running until Ctrl-C (DEMO_KEEP=1). The stuck order is held until its
saga deadline, $SAGA_TIMEOUT after it was placed (DEMO_SAGA_TIMEOUT). Open the console at
http://$CONSOLE_ADDR/ or, in this directory (sagactl finds the demo through $DEMO_DIR/env):
  \$ bin/sagactl stuck
  \$ bin/sagactl order ${stuck_id:-<id>}
  \$ bin/sagactl track stuck
  \$ bin/sagactl flow
  \$ bin/sagactl dlq list orders.events
MSG
  wait
else
  echo "demo: the system stops now; DEMO_KEEP=1 make demo keeps it running (with the console, the tracker and"
  echo "demo: the stuck order) until Ctrl-C, and prints the commands to inspect it"
fi
