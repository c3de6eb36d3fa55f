#!/usr/bin/env bash
# make interop-check: stock clients of other languages read and write choreo's records on a
# real Apache Kafka broker (scripts/kafka.sh, one node on loopback).
#
#  1. tools/interop produces signed saga events with the service kit's producer settings
#     (KAFKA_COMPRESSION as set, else the kit's default).
#  2. Java: kafka-clients with the CloudEvents Java SDK's Kafka binding
#     (tools/interop-java, built with Maven) reads them all.
#  3. kafkajs 2.2.4 (no codec plugins) with the CloudEvents JavaScript SDK reads them all
#     (tools/interop/kafkajs-check.cjs).
#  4. Java writes order.confirmed events in binary and in structured content mode, which
#     examples/shipping (started here on Postgres and Redis) must handle: each must be
#     answered by a shipment.scheduled that it caused.
# Exit status 0 means every record was read and valid and every Java event was handled.
#   INTEROP_ORDERS (40: 120 events), INTEROP_JAVA_EVENTS (20 per content mode),
#   INTEROP_KAFKA_PORT (19192), KAFKA_COMPRESSION
set -euo pipefail
cd "$(dirname "$0")/.."

ORDERS=${INTEROP_ORDERS:-40}
JAVA_EVENTS=${INTEROP_JAVA_EVENTS:-20}
PORT=${INTEROP_KAFKA_PORT:-19192}
TOPIC=interop.events
BROKERS=127.0.0.1:$PORT
command -v node >/dev/null && command -v npm >/dev/null || { echo "interop-check: needs node and npm" >&2; exit 1; }
command -v mvn >/dev/null && command -v java >/dev/null || { echo "interop-check: needs Maven and a JDK 17+" >&2; exit 1; }

tmp=$(mktemp -d)
broker= shipping= db=
cleanup() {
  for p in $shipping $broker; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  [ -n "$db" ] && psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

scripts/kafka.sh run -p "$PORT" >"$tmp/kafka.out" 2>"$tmp/kafka.log" &
broker=$!
echo "interop-check: installing kafkajs@2.2.4 and cloudevents@10.0.0 into $tmp; building tools/interop-java with Maven"
npm install --prefix "$tmp" --no-audit --no-fund --no-save --silent kafkajs@2.2.4 cloudevents@10.0.0 >/dev/null
java=tools/interop-java
mvn -B -q -Dstyle.color=never --strict-checksums -f "$java/pom.xml" compile dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory=target/libs >"$tmp/mvn.log" 2>&1 || { cat "$tmp/mvn.log" >&2; exit 1; }
go build -o "$tmp/" ./tools/interop ./examples/shipping
until grep -q '"Addr"' "$tmp/kafka.out"; do
  kill -0 "$broker" 2>/dev/null || { cat "$tmp/kafka.log" >&2; exit 1; }
  sleep 0.2
done
echo "interop-check: Apache Kafka $(scripts/kafka.sh version) on $BROKERS"

KAFKA_BROKERS=$BROKERS "$tmp/interop" -topic "$TOPIC" -orders "$ORDERS" -pubkey "$tmp/pub.pem"
jrun() { java -cp "$java/target/classes:$java/target/libs/*" choreo.interop.Check "$@"; }
# Java first: its consumer waits while the broker creates __consumer_offsets for the first
# group; kafkajs runs with no retries (a batch it cannot decompress must fail the check).
jrun read "$BROKERS" "$TOPIC" $((ORDERS * 3)) "$tmp/pub.pem"
cp tools/interop/kafkajs-check.cjs "$tmp/"
BROKERS=$BROKERS TOPIC=$TOPIC EXPECT=$((ORDERS * 3)) PUBKEY=$tmp/pub.pem node "$tmp/kafkajs-check.cjs"

# Java writes, examples/shipping handles.
db=choreo_interop_$$
psql -q -h 127.0.0.1 -U postgres -c "CREATE DATABASE $db" >/dev/null
http=127.0.0.1:$((PORT + 10))
KAFKA_BROKERS=$BROKERS DATABASE_URL=postgres://postgres@127.0.0.1:5432/$db?sslmode=disable \
  REDIS_ADDR=127.0.0.1:6379 HTTP_ADDR=$http "$tmp/shipping" >"$tmp/shipping.log" 2>&1 &
shipping=$!
until curl -sf "http://$http/readyz" >/dev/null; do
  kill -0 "$shipping" 2>/dev/null || { cat "$tmp/shipping.log" >&2; exit 1; }
  sleep 0.2
done
jrun write "$BROKERS" orders.events "$JAVA_EVENTS" shipping.events
