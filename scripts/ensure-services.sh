#!/usr/bin/env bash
# Makes sure the Postgres and Redis that tests and the demo use are up on their default
# ports (Postgres 127.0.0.1:5432, user postgres, trust auth on loopback; Redis
# 127.0.0.1:6379). On a machine without them it installs Debian's postgresql and
# redis-server packages (needs root or sudo and the Debian mirror), creates and configures
# the cluster, and starts both. Respects CHOREO_TEST_POSTGRES_DSN / CHOREO_TEST_REDIS_ADDR:
# when set, that service is left alone.
set -euo pipefail

say() { echo "ensure-services: $*" >&2; }

# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/apt.sh"

wait_for() { # name, check command...
  local name=$1; shift
  for _ in $(seq 1 60); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  return 1
}

pg_ready() { pg_isready -q -h 127.0.0.1 -p 5432; }

ensure_postgres() {
  if command -v pg_isready >/dev/null && pg_ready; then return 0; fi
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || ! command -v pg_lsclusters >/dev/null; then
    say "installing Debian's postgresql"
    apt_install postgresql postgresql-contrib
  fi
  local ver
  ver=$(ls /usr/lib/postgresql | sort -V | tail -n1)
  if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$ver main"; then
    say "creating Postgres $ver cluster main"
    as_root pg_createcluster "$ver" main --port 5432 >/dev/null
  fi
  local hba="/etc/postgresql/$ver/main/pg_hba.conf"
  if ! grep -q '^# choreo: trust on loopback' "$hba"; then
    say "configuring trust auth on loopback for user postgres ($hba)"
    # First match wins in pg_hba.conf, so these lines go on top.
    as_root sh -c "{ printf '%s\n' '# choreo: trust on loopback for local development and tests' \
      'host all all 127.0.0.1/32 trust' 'host all all ::1/128 trust' \
      'host replication all 127.0.0.1/32 trust'; cat '$hba'; } > '$hba.new' && \
      chown --reference='$hba' '$hba.new' && chmod --reference='$hba' '$hba.new' && mv '$hba.new' '$hba'"
  fi
  local conf="/etc/postgresql/$ver/main/conf.d/choreo.conf"
  if [ ! -e "$conf" ]; then
    # The suites open many pools at once (tests run packages in parallel).
    printf '%s\n' "listen_addresses = '127.0.0.1'" "port = 5432" "max_connections = 500" \
      | as_root tee "$conf" >/dev/null
  fi
  say "starting Postgres $ver"
  as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main restart >/dev/null 2>&1 \
    || as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start
  wait_for Postgres pg_ready || {
    say "Postgres is not reachable on 127.0.0.1:5432 (log: /var/log/postgresql/postgresql-$ver-main.log)."
    say "  Start it yourself or set CHOREO_TEST_POSTGRES_DSN."
    exit 1
  }
}

redis_ready() { redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG; }

ensure_redis() {
  if command -v redis-cli >/dev/null && redis_ready 2>/dev/null; then return 0; fi
  if ! command -v redis-server >/dev/null; then
    say "installing Debian's redis-server"
    apt_install redis-server
  fi
  say "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --logfile /tmp/choreo-redis.log >/dev/null
  wait_for Redis redis_ready || {
    say "Redis is not reachable on 127.0.0.1:6379 (log: /tmp/choreo-redis.log)."
    say "  Start it yourself or set CHOREO_TEST_REDIS_ADDR."
    exit 1
  }
}

[ -n "${CHOREO_TEST_POSTGRES_DSN:-}" ] || ensure_postgres
[ -n "${CHOREO_TEST_REDIS_ADDR:-}" ] || ensure_redis
