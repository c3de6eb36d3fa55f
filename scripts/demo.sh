#!/usr/bin/env bash
# make demo: runs the saga on this machine. Builds the binaries, starts cmd/devkafka and the
# three services as separate processes, places a mixed batch of orders with `sagactl load`
# (including one deliberately stuck order), prints the summary, and stops every process it
# started, also on Ctrl-C. Logs go to .demo/logs/. A second run needs no clean-up.
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
DEMO_DIR=.demo
LOGS=$DEMO_DIR/logs

scripts/ensure-services.sh
mkdir -p "$LOGS" bin
echo "demo: building binaries (about 2 minutes the first time, seconds after that)"
go build -o bin/ ./cmd/devkafka ./cmd/sagactl ./services/order ./services/payment ./services/inventory
if [ -n "${TRACES:-}" ]; then
  go build -o bin/ ./internal/jaegercheck
  scripts/jaeger.sh build
fi

pids=()
jaeger_pid=
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
export ORDER_STUCK_AFTER=${ORDER_STUCK_AFTER:-10s}
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

CHOREO_SIGNING_KEY_FILE=$KEYS/payment.key HTTP_ADDR=$PAYMENT_ADDR PAYMENT_HANG_CUSTOMERS=c-hang bin/payment >"$LOGS/payment.log" 2>&1 &
pids+=($!)
CHOREO_SIGNING_KEY_FILE=$KEYS/inventory.key HTTP_ADDR=$INVENTORY_ADDR bin/inventory >"$LOGS/inventory.log" 2>&1 &
pids+=($!)
CHOREO_SIGNING_KEY_FILE=$KEYS/order.key HTTP_ADDR=$ORDER_ADDR bin/order >"$LOGS/order.log" 2>&1 &
pids+=($!)

wait_http "http://$PAYMENT_ADDR/readyz" payment
wait_http "http://$INVENTORY_ADDR/readyz" inventory
wait_http "http://$ORDER_ADDR/readyz" order
echo "demo: broker on 127.0.0.1:$KAFKA_PORT, order API on http://$ORDER_ADDR, logs in $LOGS/"

ORDER_URL="http://$ORDER_ADDR" bin/sagactl load -n "$ORDERS" -rate "$RATE"
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
      ORDER_URL="http://$ORDER_ADDR" bin/sagactl console -addr "$CONSOLE_ADDR" -jaeger-query http://127.0.0.1:16686 >"$LOGS/console.log" 2>&1 &
      pids+=($!)
      wait_http "http://$CONSOLE_ADDR/" console
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
if [ -n "${DEMO_KEEP:-}" ]; then
  echo "demo: services keep running; inspect the stuck order with the command above; Ctrl-C stops them"
  wait
else
  echo "demo: the services stop now; DEMO_KEEP=1 make demo keeps them up (until Ctrl-C) so you can inspect the stuck order"
fi
