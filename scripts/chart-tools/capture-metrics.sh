#!/usr/bin/env bash
# Captures the metric exposition of both tiers from a real local fleet, as the fixtures the chart
# checks compare the Grafana dashboard and the PrometheusRule against
# (scripts/chart-tools/metrics/{transactor,ingress}.prom). Run it after a change to the metrics:
#
#   cargo build --bins && bash scripts/chart-tools/capture-metrics.sh
#
# It starts `corium-fleet dev` in a scratch directory, makes a few operator calls through the
# ingress so the labelled series (method, code) exist, reads /metrics of one node and of the
# ingress, and stops the fleet with SIGTERM.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${BIN:-$ROOT/target/debug}"
OUT="${OUT:-$ROOT/scripts/chart-tools/metrics}"
for b in corium-fleet corium-fleet-transactor corium-fleet-ingress; do
  [ -x "$BIN/$b" ] || { echo "no $BIN/$b: run cargo build --bins first" >&2; exit 1; }
done
work="$(mktemp -d "${TMPDIR:-/tmp}/capture-metrics.XXXXXX")"
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

"$BIN/corium-fleet" dev --data-dir "$work/fleet" >"$work/stdout" 2>"$work/stderr" </dev/null &
pid=$!
for _ in $(seq 1 120); do
  grep -q 'ready at' "$work/stdout" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/stderr" >&2; exit 1; }
  sleep 0.5
done
endpoint="$(sed -n 's/.*ready at \(http[^ ]*\).*/\1/p' "$work/stdout" | head -n 1)"
node_admin="$(sed -n 's/.*node-1 pid .* admin \(http[^ ]*\)\/metrics.*/\1/p' "$work/stderr" | head -n 1)"
ingress_admin="$(sed -n 's/.*ingress-1 pid .* admin \(http[^ ]*\)\/metrics.*/\1/p' "$work/stderr" | head -n 1)"
[ -n "$endpoint" ] && [ -n "$node_admin" ] && [ -n "$ingress_admin" ] ||
  { echo "could not read the fleet's addresses" >&2; cat "$work/stdout" "$work/stderr" >&2; exit 1; }

# Some traffic, so the series labelled by method and code exist (the CLI's operator calls).
for db in capture-a capture-b; do
  "$BIN/corium-fleet" status --endpoint "$endpoint" >/dev/null
  "$BIN/corium-fleet" where "$db" --endpoint "$endpoint" >/dev/null
done
"$BIN/corium-fleet" status --endpoint "$endpoint" --token "" >/dev/null 2>&1 || true

mkdir -p "$OUT"
version="$("$BIN/corium-fleet-transactor" --version)"
for tier in transactor ingress; do
  url="$node_admin"; [ "$tier" = ingress ] && url="$ingress_admin"
  {
    echo "# Captured by scripts/chart-tools/capture-metrics.sh from $version ($tier)."
    curl -sSf --max-time 10 "$url/metrics"
  } >"$OUT/$tier.prom.new"
  mv "$OUT/$tier.prom.new" "$OUT/$tier.prom"
  echo "$OUT/$tier.prom: $(grep -c '^# TYPE' "$OUT/$tier.prom") metric families"
done
