#!/usr/bin/env bash
# Makes sure the headless browser of the console test (cmd/sagactl/browsertest) exists:
# $CHROMIUM if set, else Debian's chromium package, installed with apt-get when missing.
set -euo pipefail

if [ -n "${CHROMIUM:-}" ]; then
  [ -x "$CHROMIUM" ] || { echo "ensure-chromium: CHROMIUM=$CHROMIUM is not an executable" >&2; exit 1; }
  exit 0
fi
[ -x /usr/bin/chromium ] && exit 0

echo "ensure-chromium: installing Debian's chromium package" >&2
if ! command -v apt-get >/dev/null; then
  echo "ensure-chromium: no apt-get here; install Chromium and set CHROMIUM=/path/to/chromium" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq chromium >/dev/null
[ -x /usr/bin/chromium ] || { echo "ensure-chromium: chromium did not install" >&2; exit 1; }
/usr/bin/chromium --version >&2 || true
