#!/usr/bin/env bash
# make readme-check: runs every shell command of the README's ```sh blocks that can run on
# this machine, as written, and fails on the first that fails. Commands that need a Docker
# engine are named and left out (make compose-check validates that path); `make test` is
# left to CI, which runs it anyway. A new README command this script does not know how to
# run is run like any other line.
# Then it runs `DEMO_KEEP=1 make demo`, runs every command the demo prints (the lines
# starting with "$ ") as printed while it runs, checks the console answers, stops it with a
# SIGINT to make alone and checks that every process it started is gone; and it builds
# docs/embedding.md's quick start in a module of its own outside the clone, with the lines
# of its "Depend on a clone" section, asking no module proxy for choreo.
set -euo pipefail
cd "$(dirname "$0")/.."

bg=()
cleanup() { [ ${#bg[@]} -eq 0 ] || { kill -TERM "${bg[@]}" 2>/dev/null || true; wait "${bg[@]}" 2>/dev/null || true; }; }
trap cleanup EXIT

mapfile -t lines < <(awk '/^```sh/{f=1;next} /^```/{f=0} f' README.md | sed -E 's/[[:space:]]+#.*$//; /^[[:space:]]*$/d')
ran=0
for line in "${lines[@]}"; do
  case "$line" in
    "make test")
      echo "readme-check: skip '$line' (CI runs it)"; continue ;;
    "make up"|"make down")
      echo "readme-check: skip '$line' (needs a Docker engine; make compose-check validates the stack)"; continue ;;
    "make demo")
      line="DEMO_ORDERS=${README_DEMO_ORDERS:-30} DEMO_RATE=30 make demo" ;;
    "go run ./cmd/devkafka"*)
      echo "readme-check: \$ $line  (in the background)"
      go build -o bin/ ./cmd/devkafka
      eval "${line/go run .\/cmd\/devkafka/bin/devkafka} &"
      bg+=($!)
      for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null && break; sleep 0.1; done
      ran=$((ran + 1)); continue ;;
    kcat*)
      command -v kcat >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; } ;;
  esac
  echo "readme-check: \$ $line"
  eval "$line"
  ran=$((ran + 1))
done
echo "readme-check: $ran README commands ran and passed"

# DEMO_KEEP=1 make demo: the commands it prints run as printed.
log=$(mktemp)
# A background job of a script starts with SIGINT ignored; env gives make the default, as
# in a terminal.
DEMO_ORDERS=${README_DEMO_ORDERS:-30} DEMO_RATE=30 DEMO_KEEP=1 env --default-signal=INT make demo >"$log" 2>&1 &
make_pid=$!
bg+=("$make_pid")
for _ in $(seq 1 1800); do
  grep -q 'keeps running until Ctrl-C' "$log" && break
  kill -0 "$make_pid" 2>/dev/null || { cat "$log"; echo "readme-check: DEMO_KEEP=1 make demo stopped early" >&2; exit 1; }
  sleep 0.5
done
grep -q 'keeps running until Ctrl-C' "$log" || { cat "$log"; echo "readme-check: DEMO_KEEP=1 make demo never said it keeps running" >&2; exit 1; }
mapfile -t printed < <(sed -n 's/^ *\$ //p' "$log")
[ ${#printed[@]} -gt 0 ] || { cat "$log"; echo "readme-check: the kept demo printed no command" >&2; exit 1; }
for line in "${printed[@]}"; do
  echo "readme-check: (demo) \$ $line"
  eval "$line"
done
console=$(grep -o 'http://127\.0\.0\.1:[0-9]*/' "$log" | head -1)
curl -fsS -o /dev/null "$console" || { echo "readme-check: the kept demo's console $console does not answer" >&2; exit 1; }
# docs/embedding.md's "Run it": the quick start against the kept demo, its commands as written
# (the demo's line is the demo already running; the service runs in the background).
mapfile -t runit < <(awk '/^## /{f=0} /^## Run it/{f=1} f && /^```sh/{c=1;next} c && /^```/{c=0} c' docs/embedding.md | sed -E 's/[[:space:]]+#.*$//; /^[[:space:]]*$/d')
[ ${#runit[@]} -gt 0 ] || { echo "readme-check: docs/embedding.md has no sh block under \"## Run it\"" >&2; exit 1; }
# A fresh database, so the rows counted below are this run's.
psql -h 127.0.0.1 -U postgres -qc 'DROP DATABASE IF EXISTS choreo_shipping WITH (FORCE)'
for line in "${runit[@]}"; do
  case "$line" in
    "DEMO_KEEP=1 make demo") continue ;;
    *bin/embedding)
      echo "readme-check: (run it) \$ $line  (in the background)"
      eval "$line >.demo/logs/embedding.log 2>&1 &"
      bg+=($!)
      for _ in $(seq 1 300); do grep -q '"app: started"' .demo/logs/embedding.log && break; sleep 0.2; done
      continue ;;
    psql*)
      # The consumer works through the demo's backlog: wait for the rows, then run it.
      for _ in $(seq 1 300); do
        n=$(psql -h 127.0.0.1 -U postgres -d choreo_shipping -Atc 'SELECT count(*) FROM shipments' 2>/dev/null || echo 0)
        [ "${n:-0}" -gt 0 ] && break; sleep 0.2
      done ;;
  esac
  echo "readme-check: (run it) \$ $line"
  eval "$line"
done
n=$(psql -h 127.0.0.1 -U postgres -d choreo_shipping -Atc 'SELECT count(*) FROM shipments')
[ "$n" -gt 0 ] || { echo "readme-check: the quick start wrote no shipment for the demo's orders" >&2; exit 1; }
kill -TERM "${bg[-1]}"; wait "${bg[-1]}" 2>/dev/null || true
echo "readme-check: docs/embedding.md's Run it ran as written ($n shipments)"

# docs/contracts.md's walk-through of an event's v2 on the kept demo, its commands as
# written (the second payment instance runs in the background until the demo stops).
mapfile -t walk < <(awk '/^### /{f=0} /^### Walk-through on the demo/{f=1} f && /^```sh/{c=1;next} c && /^```/{c=0} c' docs/contracts.md | sed -E 's/[[:space:]]+#.*$//; /^[[:space:]]*$/d')
[ ${#walk[@]} -gt 0 ] || { echo "readme-check: docs/contracts.md has no sh block under \"### Walk-through on the demo\"" >&2; exit 1; }
for line in "${walk[@]}"; do
  echo "readme-check: (evolving) \$ $line"
  case "$line" in
    *bin/payment*"&")
      eval "${line%&} >.demo/logs/payment-v2.log 2>&1 &"
      bg+=($!)
      addr=$(grep -o 'HTTP_ADDR=[^ ]*' <<<"$line" | cut -d= -f2)
      for _ in $(seq 1 600); do curl -fsS -o /dev/null "http://$addr/readyz" 2>/dev/null && break; sleep 0.2; done
      curl -fsS -o /dev/null "http://$addr/readyz" || { tail -20 .demo/logs/payment-v2.log; echo "readme-check: the v2 payment instance never became ready" >&2; exit 1; }
      # Ready is before the group gives it partitions: wait until it reports lag for some.
      admin=$(grep -o 'ADMIN_ADDR=[^ ]*' <<<"$line" | cut -d= -f2)
      for _ in $(seq 1 300); do curl -fsS "http://$admin/metrics" 2>/dev/null | grep -q '^choreo_consumer_lag' && break; sleep 0.2; done
      continue ;;
  esac
  out=$(eval "$line" 2>&1) || { echo "$out"; echo "readme-check: failed: $line" >&2; exit 1; }
  echo "$out"
done
grep -q 'payment.authorized *2 *payment' <<<"$(bin/sagactl contracts usage)" ||
  { echo "readme-check: the walk-through's usage report lists no payment.authorized v2 from payment" >&2; exit 1; }
kill -TERM "${bg[-1]}"; wait "${bg[-1]}" 2>/dev/null || true
echo "readme-check: docs/contracts.md's walk-through ran as written"

# The addresses of what the demo started (Postgres and Redis are the machine's: they stay).
ports=$(grep -v '^TRACKER_DATABASE_URL=' .demo/env | grep -o '127\.0\.0\.1:[0-9]*' | sort -u)
kill -INT "$make_pid"
for _ in $(seq 1 300); do kill -0 "$make_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$make_pid" 2>/dev/null; then echo "readme-check: make demo still runs 30 s after a SIGINT" >&2; exit 1; fi
for hp in $ports; do
  if (exec 3<>"/dev/tcp/${hp%:*}/${hp#*:}") 2>/dev/null; then
    echo "readme-check: $hp still answers after the demo stopped" >&2; exit 1
  fi
done
[ ! -e .demo/env ] || { echo "readme-check: .demo/env outlived the demo" >&2; exit 1; }
echo "readme-check: the kept demo's ${#printed[@]} printed commands ran as printed; a SIGINT to make stopped all of it"

# docs/embedding.md: a module of its own next to the clone depends on it as the guide says,
# and no module proxy is asked for choreo (GOPRIVATE; the other modules come from the
# configured proxy or the module cache).
work=$(mktemp -d)
ln -s "$PWD" "$work/choreo"
mkdir "$work/my-service"
cp examples/embedding/main.go "$work/my-service/"
mapfile -t steps < <(awk '/^## /{f=0} /^## Depend on a clone/{f=1} f && /^```sh/{c=1;next} c && /^```/{c=0} c' docs/embedding.md | sed -E 's/[[:space:]]+#.*$//; /^[[:space:]]*$/d')
[ ${#steps[@]} -gt 0 ] || { echo "readme-check: docs/embedding.md has no sh block under \"## Depend on a clone\"" >&2; exit 1; }
(
  cd "$work/my-service"
  export GOPRIVATE=github.com/choreo-saga/* GOFLAGS=-mod=mod
  for line in "${steps[@]}"; do echo "readme-check: (my-service) \$ $line"; eval "$line"; done
  go build -o /dev/null .
)
rm -rf "$work"
echo "readme-check: docs/embedding.md's module builds on the clone, with no proxy asked for choreo"
