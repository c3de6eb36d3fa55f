#!/usr/bin/env bash
# make test / make test-slow: runs the test suite and prints the CPU time it took (user +
# sys of the go commands, the test binaries and the compilers they start, measured with
# /usr/bin/time; Postgres, Redis and other helper processes excepted).
# Usage: scripts/test.sh fast|slow. LIB_PKGS run under the race detector, APP_PKGS
# without it, APACHE_PKGS (some of APP_PKGS) on Apache Kafka (CHOREO_TEST_KAFKA=apache);
# SLOW_TESTS (a regular expression of test names) are left out of "fast" and are all that
# "slow" runs. The Makefile sets the four.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-fast}
GO=${GO:-go}

if [ ! -x /usr/bin/time ]; then
  echo "test: installing Debian's time (/usr/bin/time measures the suite's CPU time)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null
fi

case $mode in
  fast) select=(-skip "^($SLOW_TESTS)\$") ;;
  slow)
    select=(-run "^($SLOW_TESTS)\$")
    # Only the packages that define them, each in its list (race or not).
    dirs=$(grep -rlE --include='*_test.go' "^func ($SLOW_TESTS)\(" . | xargs -n1 dirname | sort -u)
    in_list() { for p in $2; do case "$1/" in "${p%...}"*) return 0 ;; esac; done; return 1; }
    lib= app= apache=
    for d in $dirs; do
      if in_list "$d" "$LIB_PKGS"; then lib+=" $d"
      elif in_list "$d" "$APACHE_PKGS"; then apache+=" $d"
      elif in_list "$d" "$APP_PKGS"; then app+=" $d"; fi
    done
    LIB_PKGS=$lib APP_PKGS=$app APACHE_PKGS=$apache ;;
  *) echo "usage: scripts/test.sh fast|slow" >&2; exit 2 ;;
esac

times=$(mktemp)
trap 'rm -f "$times"' EXIT
start=$(date +%s)
status=0
# shellcheck disable=SC2086 # the package lists are patterns, one per word
if [ -n "${LIB_PKGS// /}" ]; then
  /usr/bin/time -a -o "$times" -f '%U %S' $GO test -race -count=1 -timeout 8m "${select[@]}" $LIB_PKGS || status=$?
fi
# shellcheck disable=SC2086
if [ -n "${APACHE_PKGS// /}" ] && [ -n "${APP_PKGS// /}" ]; then
  APP_PKGS=$($GO list $APP_PKGS | grep -vxF "$($GO list $APACHE_PKGS)" || true)
fi
# shellcheck disable=SC2086
if [ -n "${APP_PKGS// /}" ]; then
  /usr/bin/time -a -o "$times" -f '%U %S' $GO test -count=1 -timeout 8m "${select[@]}" $APP_PKGS || status=$?
fi
# shellcheck disable=SC2086
if [ -n "${APACHE_PKGS// /}" ]; then
  CHOREO_TEST_KAFKA=apache /usr/bin/time -a -o "$times" -f '%U %S' $GO test -count=1 -timeout 8m "${select[@]}" $APACHE_PKGS || status=$?
fi
wall=$(( $(date +%s) - start ))
# /usr/bin/time writes "Command exited with non-zero status N" before the figures of a
# failed command: keep the lines of two numbers.
awk -v wall="$wall" -v mode="$mode" '/^[0-9.]+ [0-9.]+$/ { u += $1; s += $2 }
  END { printf "make test%s: %.1f CPU-minutes (user %.0fs + sys %.0fs), %dm%02ds wall\n",
        (mode == "slow" ? "-slow" : ""), (u + s) / 60, u, s, wall / 60, wall % 60 }' "$times"
exit $status
