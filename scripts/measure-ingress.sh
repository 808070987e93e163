#!/usr/bin/env bash
# Ingress overhead, measured side by side in one run (a first cut; the full
# comparison with HAProxy and Envoy belongs to `make bench`).
#   scripts/measure-ingress.sh [REQUESTS]
# Starts one release-built transactor and one ingress on loopback (plaintext
# hop), creates a database, then drives `corium.v1.Transactor/Status` — an
# owner-dependent call that passes the full ownership check — with h2load
# (Debian nghttp2-client) directly at the node and through the ingress, at
# concurrency 1 and 16, three rounds each. Prints median latency (from
# h2load's per-request log), requests/s and the ingress/direct ratios.
# Pinning: servers on CPU 1, load generator on CPU 0.
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-20000}
command -v h2load >/dev/null || { apt-get update -q >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -q nghttp2-client >/dev/null; }
cargo build --release --quiet --bin corium-fleet-transactor --bin corium-fleet-ingress --bin corium-fleet
bin=target/release
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
node=$(port); nadmin=$(port); ing=$(port); iadmin=$(port)
CORIUM_FLEET_LOG=warn taskset -c 1 $bin/corium-fleet-transactor --node-id n1 --listen 127.0.0.1:$node \
  --admin-listen 127.0.0.1:$nadmin --data-dir "$work/data" 2>"$work/node.log" &
CORIUM_FLEET_LOG=warn taskset -c 1 $bin/corium-fleet-ingress --listen 127.0.0.1:$ing --admin-listen 127.0.0.1:$iadmin \
  --data-dir "$work/data" --member n1=http://127.0.0.1:$node 2>"$work/ingress.log" &
for p in $nadmin $iadmin; do
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$p/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
done
cargo run --release --quiet -p corium-fleet-tests --example quickstart -- "http://127.0.0.1:$ing" bench >/dev/null
# StatusRequest { db: "bench" } as one gRPC frame.
python3 -c 'import sys; m=b"\x0a\x05bench"; sys.stdout.buffer.write(b"\x00"+len(m).to_bytes(4,"big")+m)' > "$work/status.bin"
run() { # target concurrency -> "median_us rps"
  local url=$1 c=$2 log="$work/h2load.log"
  rm -f "$log"
  local out
  out=$(taskset -c 0 h2load -n "$requests" -c "$c" -m 1 -d "$work/status.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' --log-file="$log" \
    "$url/corium.v1.Transactor/Status" 2>&1)
  grep -q "0 failed, 0 errored" <<<"$out" || { echo "h2load failed: $out" >&2; exit 1; }
  local rps; rps=$(awk '/finished in/ {print $4}' <<<"$out")
  local median; median=$(awk '{print $3}' "$log" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "$median $rps"
}
printf '%-8s %-4s %12s %12s\n' target c median_us req_per_s
for c in 1 16; do
  for round in 1 2 3; do
    for target in direct ingress; do
      url="http://127.0.0.1:$node"; [ $target = ingress ] && url="http://127.0.0.1:$ing"
      read -r median rps < <(run "$url" "$c")
      printf '%-8s %-4s %12s %12s\n' "$target" "$c" "$median" "$rps"
    done
  done
done
echo "load during the run: $(cut -d' ' -f1-3 /proc/loadavg)"
