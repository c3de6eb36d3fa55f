# Sourced by the ensure-*.sh scripts: run a command as root (directly, or with sudo) and
# install Debian packages without letting their maintainer scripts start services (there
# may be no init system; the callers start what they need themselves). The caller defines
# say() for its messages.

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    say "need root to run: $*"; return 1
  fi
}

apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then
    as_root apt-get update -qq
    apt_updated=1
  fi
  # policy-rc.d 101: the packages' maintainer scripts must not try to start services.
  local policy=/usr/sbin/policy-rc.d had_policy=""
  [ -e "$policy" ] && had_policy=1
  [ -n "$had_policy" ] || { printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null; as_root chmod +x "$policy"; }
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  [ -n "$had_policy" ] || as_root rm -f "$policy"
}
