#!/usr/bin/env bash
# make readme-check: runs every shell command of the README's ```sh blocks that can run on
# this machine, as written, and fails on the first that fails. Commands that need a Docker
# engine are named and left out (make compose-check validates that path); `make test` is
# left to CI, which runs it anyway. A new README command this script does not know how to
# run is run like any other line.
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
