#!/usr/bin/env bash
# Makes sure a pgbouncer binary is installed (Debian's package, for `make chaos-pgbouncer`),
# without starting the system's pgbouncer service: the chaos suite starts a private one
# (chaos/pgbouncer.go: its own configuration file and port in the run's directory,
# pool_mode = transaction, in front of the run's Postgres). Needs root or sudo and the
# Debian mirror when the package is missing. Prints the binary's path.
set -euo pipefail

say() { echo "ensure-pgbouncer: $*" >&2; }

# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/apt.sh"

find_bin() { command -v pgbouncer || { [ -x /usr/sbin/pgbouncer ] && echo /usr/sbin/pgbouncer; }; }

if ! bin=$(find_bin); then
  say "installing Debian's pgbouncer"
  apt_install pgbouncer
  bin=$(find_bin) || { say "pgbouncer is not on PATH after the install"; exit 1; }
fi
echo "$bin"
