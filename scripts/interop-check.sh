#!/usr/bin/env bash
# make interop-check: a stock kafkajs 2.2.4 consumer (no codec plugins) reads what choreo's
# producer writes with the service kit's settings. Installs kafkajs@2.2.4 and the
# CloudEvents JavaScript SDK with npm into a temporary directory, starts cmd/devkafka on
# loopback, produces signed saga events with internal/interop (KAFKA_COMPRESSION as
# set, else the kit's default), and has internal/interop/kafkajs-check.cjs read them all
# and check each one. Exit status 0 means every record was read and valid.
#   INTEROP_ORDERS (40: 120 events), INTEROP_KAFKA_PORT (19192), KAFKA_COMPRESSION
set -euo pipefail
cd "$(dirname "$0")/.."

ORDERS=${INTEROP_ORDERS:-40}
PORT=${INTEROP_KAFKA_PORT:-19192}
TOPIC=interop.events
command -v node >/dev/null && command -v npm >/dev/null || { echo "interop-check: needs node and npm" >&2; exit 1; }

tmp=$(mktemp -d)
broker=
cleanup() {
  [ -n "$broker" ] && kill "$broker" 2>/dev/null && wait "$broker" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "interop-check: installing kafkajs@2.2.4 and cloudevents@10.0.0 into $tmp"
npm install --prefix "$tmp" --no-audit --no-fund --no-save --silent kafkajs@2.2.4 cloudevents@10.0.0 >/dev/null
go build -o "$tmp/" ./cmd/devkafka ./internal/interop

"$tmp/devkafka" -port "$PORT" -data-dir "" -partitions 3 -topics "$TOPIC" >"$tmp/devkafka.log" 2>&1 &
broker=$!
for _ in $(seq 1 100); do
  (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break
  sleep 0.1
done

KAFKA_BROKERS=127.0.0.1:$PORT "$tmp/interop" -topic "$TOPIC" -orders "$ORDERS" -pubkey "$tmp/pub.pem"
cp internal/interop/kafkajs-check.cjs "$tmp/"
BROKERS=127.0.0.1:$PORT TOPIC=$TOPIC EXPECT=$((ORDERS * 3)) PUBKEY=$tmp/pub.pem node "$tmp/kafkajs-check.cjs"
