#!/usr/bin/env bash
# Starts or stops a throwaway PostgreSQL server on loopback for the test suite.
#   scripts/postgres.sh start DIR   -> installs Debian's postgresql if missing,
#                                      starts a cluster in DIR, prints its URL
#   scripts/postgres.sh stop DIR
# The port is PG_PORT (default 54329; a free one if that is taken). Only 127.0.0.1 is listened on.
set -euo pipefail
cmd=${1:?usage: postgres.sh start|stop DIR}
dir=$(realpath -m "${2:?usage: postgres.sh start|stop DIR}")
port=${PG_PORT:-54329}

pgbin() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1
}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
start)
  if [ -z "$(pgbin)" ] || [ ! -x "$(pgbin)/postgres" ]; then
    echo "installing PostgreSQL (Debian package postgresql)..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q postgresql >/dev/null
  fi
  command -v psql >/dev/null || { echo "psql missing: apt-get install postgresql-client" >&2; exit 1; }
  bin=$(pgbin)
  if [ -f "$dir/postmaster.pid" ] && [ -f "$dir.port" ] && "$bin/pg_isready" -q -h 127.0.0.1 -p "$(cat "$dir.port")"; then
    echo "postgres://postgres@127.0.0.1:$(cat "$dir.port")/postgres"; exit 0
  fi
  # Another server on the port: take a free one instead.
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$dir"; fi
  chmod 700 "$dir"
  as_postgres "$bin/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 >"$dir.initdb.log" 2>&1 \
    || { cat "$dir.initdb.log" >&2; exit 1; }
  as_postgres "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=400" start >/dev/null \
    || { cat "$dir/server.log" >&2; exit 1; }
  "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -t 30
  echo "$port" > "$dir.port"
  echo "postgres://postgres@127.0.0.1:$port/postgres"
  ;;
stop)
  bin=$(pgbin)
  [ -f "$dir/postmaster.pid" ] && as_postgres "$bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null || true
  ;;
*) echo "usage: postgres.sh start|stop DIR" >&2; exit 2 ;;
esac
