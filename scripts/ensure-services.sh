#!/usr/bin/env bash
# Makes sure the Postgres and Redis that tests and the demo use are up on their default
# ports, starting the machine's own servers if they are down. Respects
# CHOREO_TEST_POSTGRES_DSN / CHOREO_TEST_REDIS_ADDR: when set, nothing is started.
set -euo pipefail

if [ -z "${CHOREO_TEST_POSTGRES_DSN:-}" ]; then
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    echo "ensure-services: starting Postgres" >&2
    if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
      pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    fi
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
    pg_isready -q -h 127.0.0.1 -p 5432 || {
      echo "ensure-services: Postgres is not reachable on 127.0.0.1:5432." >&2
      echo "  Start it (pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql) main start)" >&2
      echo "  or set CHOREO_TEST_POSTGRES_DSN." >&2
      exit 1
    }
  fi
fi

if [ -z "${CHOREO_TEST_REDIS_ADDR:-}" ]; then
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "ensure-services: starting Redis" >&2
    if command -v redis-server >/dev/null; then
      redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
    fi
    for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 1; done
    redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || {
      echo "ensure-services: Redis is not reachable on 127.0.0.1:6379." >&2
      echo "  Start it (redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save \"\" --appendonly no)" >&2
      echo "  or set CHOREO_TEST_REDIS_ADDR." >&2
      exit 1
    }
  fi
fi
