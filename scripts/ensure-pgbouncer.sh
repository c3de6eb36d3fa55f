#!/usr/bin/env bash
# Makes sure a pgbouncer binary is installed (Debian's package, for `make chaos-pgbouncer`),
# without starting the system's pgbouncer service: the chaos suite starts a private one
# (chaos/pgbouncer.go: its own configuration file and port in the run's directory,
# pool_mode = transaction, in front of the run's Postgres). Needs root or sudo and the
# Debian mirror when the package is missing. Prints the binary's path.
set -euo pipefail

say() { echo "ensure-pgbouncer: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    say "need root to run: $*"; return 1
  fi
}

find_bin() { command -v pgbouncer || { [ -x /usr/sbin/pgbouncer ] && echo /usr/sbin/pgbouncer; }; }

if ! bin=$(find_bin); then
  say "installing Debian's pgbouncer"
  as_root apt-get update -qq
  # policy-rc.d 101: the package's maintainer scripts must not start the system's pgbouncer
  # (there may be no init system, and the suite runs its own).
  policy=/usr/sbin/policy-rc.d had_policy=""
  [ -e "$policy" ] && had_policy=1
  [ -n "$had_policy" ] || { printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null; as_root chmod +x "$policy"; }
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null
  [ -n "$had_policy" ] || as_root rm -f "$policy"
  bin=$(find_bin) || { say "pgbouncer is not on PATH after the install"; exit 1; }
fi
echo "$bin"
