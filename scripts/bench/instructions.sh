#!/usr/bin/env bash
# User-space instructions per forwarded call, the ingress beside HAProxy,
# counted by valgrind's callgrind (issue 23, design note 0018).
#
#   scripts/bench/instructions.sh [--requests N] [--variant cleartext|mtls]
#                                 [--auth on|off] [--ingress-flags "FLAGS"]
#                                 [--out DIR] [--no-haproxy] [--budget N]
#
# Instruction counts are the same for the same binary, inputs and
# environment whatever else the machine is doing, so this is the measure to
# compare changes with on a loaded machine (scripts/bench/proxies.sh gives the
# wall-clock and CPU figures, which need a quiet one). It counts user space
# only: system calls and the scheduler are what `strace -c` and `perf` show.
#
# One release transactor (not under valgrind) on loopback; the ingress (and
# then HAProxy, one thread, scripts/bench/haproxy.cfg.in) under
# `valgrind --tool=callgrind` in front of it; h2load -c 1 -m 1 sends
# corium.v1.Transactor/Status for database "bench" (proxies.sh's body):
# 500 calls to warm up, the counters zeroed (callgrind_control -z), N calls
# (default 2000), the counters dumped. Prints instructions per call for
# each proxy and writes the callgrind files under --out (default
# target/bench/instructions), for callgrind_annotate. Needs the release
# binaries and the quickstart example (cargo build --release --bins;
# cargo build --release -p corium-fleet-tests --example quickstart), h2load
# (Debian nghttp2-client) and HAProxy (Debian haproxy).
#
# --budget N fails the run (exit 3, after HAProxy is counted) when the
# ingress spends more than N instructions per call: the guard `make bench`
# runs so that work added to every call is seen (design note 0018).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

requests=2000
variant=cleartext
auth=on
ingress_flags=""
out=target/bench/instructions
haproxy=1
budget=""
while [ $# -gt 0 ]; do
  case $1 in
    --requests) requests=$2; shift 2 ;;
    --variant) variant=$2; shift 2 ;;
    --auth) auth=$2; shift 2 ;;
    --ingress-flags) ingress_flags=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-haproxy) haproxy=0; shift ;;
    --budget) budget=$2; shift 2 ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "instructions.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $variant in cleartext|mtls) ;; *) echo "instructions.sh: --variant is cleartext or mtls" >&2; exit 2 ;; esac
[[ $requests =~ ^[0-9]+$ ]] && [ "$requests" -gt 0 ] || { echo "instructions.sh: --requests must be a positive integer" >&2; exit 2; }
[ -z "$budget" ] || [[ $budget =~ ^[0-9]+$ ]] || { echo "instructions.sh: --budget must be a whole number of instructions per call" >&2; exit 2; }

bin=target/release
for b in $bin/corium-fleet-transactor $bin/corium-fleet-ingress $bin/corium-fleet $bin/examples/quickstart; do
  [ -x "$b" ] || { echo "instructions.sh: $b is missing (cargo build --release --bins; cargo build --release -p corium-fleet-tests --example quickstart)" >&2; exit 1; }
done
for tool in valgrind callgrind_control h2load curl; do
  command -v $tool >/dev/null || { echo "instructions.sh: $tool is missing (Debian valgrind, nghttp2-client, curl)" >&2; exit 1; }
done
[ $haproxy = 0 ] || command -v haproxy >/dev/null || { echo "instructions.sh: haproxy is missing (Debian haproxy; or --no-haproxy)" >&2; exit 1; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
die() { echo "instructions.sh: $*" >&2; exit 1; }
wait_http() { # URL NAME LOG [seconds]
  local deadline=$(( $(date +%s) + ${4:-60} ))
  until curl -sf --max-time 2 "$1" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt $deadline ] || die "$2 not ready at $1; see $3: $(tail -3 "$3")"
    sleep 0.2
  done
}
read -r node nadmin ing iadmin hap < <(python3 -c '
import socket; s=[socket.socket() for _ in range(5)]
[x.bind(("127.0.0.1", 0)) for x in s]; print(" ".join(str(x.getsockname()[1]) for x in s))')
python3 -c 'import sys; m=b"\x0a\x05bench"; sys.stdout.buffer.write(b"\x00"+len(m).to_bytes(4,"big")+m)' >"$work/status.bin"
auth_hdr=()
if [ "$auth" = on ]; then
  export CORIUM_SERVE_TOKEN="bench-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
  export CORIUM_TOKEN=$CORIUM_SERVE_TOKEN
  auth_hdr=(-H "authorization: Bearer $CORIUM_SERVE_TOKEN")
fi
scheme=http tls_node=() tls_ing=() hap_tls=""
if [ "$variant" = mtls ]; then
  scheme=https
  $bin/corium-fleet certs --out "$work/certs" --ingress corium-fleet-ingress --node n1 >/dev/null
  c=$work/certs
  cat "$c/corium-fleet-ingress.pem" "$c/corium-fleet-ingress.key" >"$c/proxy-client.pem"
  tls_node=(--tls-cert "$c/n1.pem" --tls-key "$c/n1.key" --tls-client-ca "$c/ca.pem")
  tls_ing=(--upstream-ca "$c/ca.pem" --upstream-cert "$c/corium-fleet-ingress.pem" --upstream-key "$c/corium-fleet-ingress.key")
  hap_tls="ssl verify required ca-file $c/ca.pem crt $c/proxy-client.pem alpn h2 verifyhost n1"
fi

CORIUM_FLEET_LOG=warn $bin/corium-fleet-transactor --node-id n1 --listen 127.0.0.1:$node \
  --advertise $scheme://127.0.0.1:$node --admin-listen 127.0.0.1:$nadmin --data-dir "$work/data" \
  "${tls_node[@]}" >"$work/transactor.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$nadmin/readyz" transactor "$work/transactor.log"

load() { # URL N
  timeout 900 h2load -n "$2" -c 1 -m 1 -d "$work/status.bin" -H 'content-type: application/grpc' \
    -H 'te: trailers' "${auth_hdr[@]}" "$1/corium.v1.Transactor/Status" >"$work/h2load.log" 2>&1 \
    || die "h2load failed: $(tail -5 "$work/h2load.log")"
  grep -q "requests: $2 total, $2 started, $2 done, $2 succeeded, 0 failed, 0 errored, 0 timeout" "$work/h2load.log" \
    || die "h2load had failures: $(grep requests: "$work/h2load.log")"
}
per_call=0
measure() { # NAME PID URL -> prints NAME instructions/call, sets per_call
  local name=$1 pid=$2 url=$3 file="$out/callgrind.$1.out"
  load "$url" 500
  callgrind_control -z "$pid" >/dev/null
  load "$url" "$requests"
  rm -f "$file"*
  callgrind_control -d "$pid" >/dev/null
  sleep 1
  local dumped
  dumped=$(ls -t "$work/cg.$name".*  2>/dev/null | grep -v '\.out$' | head -1 || true)
  [ -n "$dumped" ] || dumped=$(ls -t "$work/cg.$name"* | head -1)
  cp "$dumped" "$file"
  local total
  total=$(awk '/^summary:/ { print $2 }' "$file")
  [ -n "$total" ] || total=$(awk '/^totals:/ { print $2 }' "$file")
  [ -n "$total" ] || die "no instruction total in $file"
  per_call=$(( total / requests ))
  echo "$name $per_call instructions/call ($total over $requests calls; $file)"
}

CORIUM_FLEET_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$work/cg.ingress" \
  $bin/corium-fleet-ingress --listen 127.0.0.1:$ing --admin-listen 127.0.0.1:$iadmin --data-dir "$work/data" \
  --member n1=$scheme://127.0.0.1:$node --worker-threads 1 "${tls_ing[@]}" $ingress_flags >"$work/ingress.log" 2>&1 &
ingress_pid=$!
pids+=($ingress_pid)
wait_http "http://127.0.0.1:$iadmin/readyz" ingress "$work/ingress.log" 180
timeout 300 $bin/examples/quickstart "http://127.0.0.1:$ing" bench >"$work/quickstart.log" 2>&1 \
  || die "creating the database failed: $(tail -5 "$work/quickstart.log")"
measure ingress $ingress_pid "http://127.0.0.1:$ing"
ingress_per_call=$per_call

if [ $haproxy = 1 ]; then
  sed -e "s/@LISTEN_PORT@/$hap/" -e "s/@BACKEND_PORT@/$node/" -e "s|@SERVER_TLS@|$hap_tls|" \
    "$here/haproxy.cfg.in" >"$work/haproxy.cfg"
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.haproxy" haproxy -db -f "$work/haproxy.cfg" \
    >"$work/haproxy.log" 2>&1 &
  haproxy_pid=$!
  pids+=($haproxy_pid)
  for _ in $(seq 1 300); do
    curl -s --http2-prior-knowledge --max-time 2 -o /dev/null "http://127.0.0.1:$hap/" && break
    sleep 0.2
  done
  measure haproxy $haproxy_pid "http://127.0.0.1:$hap"
fi

if [ -n "$budget" ]; then
  if [ "$ingress_per_call" -gt "$budget" ]; then
    echo "instructions.sh: over budget: the ingress spends $ingress_per_call instructions per call, the budget is $budget" >&2
    exit 3
  fi
  echo "within budget: $ingress_per_call <= $budget instructions per call"
fi
