#!/usr/bin/env bash
# Installs the system packages `make test` needs that this machine lacks, on Debian (12 or later)
# or Ubuntu (24.04 or later), as root or through sudo. Each tool is checked first, so a machine
# that has them all installs nothing and needs neither root nor the network.
#
#   scripts/install-tools.sh            everything `make test` needs
#   scripts/install-tools.sh PACKAGE…   only these Debian packages (used by scripts/seaweedfs.sh)
set -euo pipefail

sudo_prefix() {
  if [ "$(id -u)" = 0 ]; then
    return 0
  elif command -v sudo >/dev/null; then
    echo sudo
  else
    echo "installing system packages needs root or sudo; run as root, install sudo, or install: $*" >&2
    exit 1
  fi
}

updated=
apt_install() {
  local sudo
  sudo=$(sudo_prefix "$@")
  command -v apt-get >/dev/null || {
    echo "no apt-get: this script knows Debian and Ubuntu; install by hand: $*" >&2
    exit 1
  }
  if [ -z "$updated" ]; then
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    updated=1
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null
}

if [ $# -gt 0 ]; then
  apt_install "$@"
  exit 0
fi

if ! command -v psql >/dev/null || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  echo "installing PostgreSQL (the tests start their own server on loopback)"
  apt_install postgresql
fi
command -v curl >/dev/null || { echo "installing curl (scripts and the curl refusal test)"; apt_install curl ca-certificates; }
command -v promtool >/dev/null || { echo "installing promtool (Debian/Ubuntu prometheus)"; apt_install prometheus; }
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  echo "installing Chromium (the status page test renders in it headless)"
  # Debian names it chromium; Ubuntu's chromium-browser is a snap, which containers cannot run.
  apt_install chromium || apt_install chromium-browser
fi
command -v npm >/dev/null || { echo "installing Node.js and npm (the chart checks' helm and Kubernetes models)"; apt_install nodejs npm; }
if ! python3 -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "installing python3 and python3-venv (the chart checks and SeaweedFS; 3.11 or later is needed)"
  apt_install python3 python3-venv
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "python3 $(python3 -V 2>&1) is older than 3.11: use Debian 12 or Ubuntu 24.04 or later" >&2
    exit 1
  }
fi
command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest
