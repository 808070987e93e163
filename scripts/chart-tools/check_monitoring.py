#!/usr/bin/env python3
"""Offline checks of the corium-fleet chart's monitoring resources in rendered Helm output.

usage: check_monitoring.py MANIFEST --metrics DIR --selector transactor=MATCHERS
                           --selector ingress=MATCHERS [--rules-test FILE] [--promtool PATH]

1. The Grafana dashboard (a ConfigMap holding *.json) parses, has a uid and a title, unique panel
   ids, panels inside the 24-column grid, a PromQL expression in every target, the data source
   variable everywhere, and no placeholder left unreplaced.
2. The PrometheusRule's groups, written out as a plain rules file, pass `promtool check rules`;
   with --rules-test, `promtool test rules` runs the unit tests in FILE against them (FILE names
   the rules file `rules.yaml`).
3. Every metric name the dashboard and the rules use exists in the exposition captured from the
   real binaries (DIR/transactor.prom, DIR/ingress.prom: their HELP and TYPE lines, written and
   checked by the process test the_charts_captured_metrics_are_what_both_tiers_export),
   and in the right tier's: a name used with the transactor (or ingress) selector must be one the
   transactor (or ingress) exports. `up` is Prometheus's own.
4. Every `Pods` metric the ingress's HorizontalPodAutoscaler scales on is one the ingress exports.
Prints one line per check and exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

PROMETHEUS_OWN = {"up"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan", "atan2"}
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
PLACEHOLDER = re.compile(r"__[A-Z]+__")


# --- the exposition -------------------------------------------------------------------------

def exposed_names(path: Path) -> set[str]:
    """Sample names a text exposition has, or would have once its families have samples."""
    names: set[str] = set()
    for line in path.read_text().splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(None, 3)
            names.add(family)
            if kind == "histogram":
                names |= {f"{family}_bucket", f"{family}_sum", f"{family}_count"}
            elif kind == "summary":
                names |= {f"{family}_sum", f"{family}_count"}
        elif line and not line.startswith("#"):
            names.add(IDENT.match(line).group(0))
    return names


# --- PromQL ------------------------------------------------------------------------------------

def _strip_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels left out)."""
    text = _strip_strings(expr)
    text = re.sub(r"\{[^{}]*\}", " ", text)          # label matchers
    text = re.sub(r"\[[^\[\]]*\]", " ", text)        # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    names = set()
    for match in IDENT.finditer(text):
        name = match.group(0)
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or name.lower() in KEYWORDS:
            continue                                  # a function or an aggregation, a keyword
        if re.fullmatch(r"[0-9]", text[match.start() - 1:match.start()] or "x"):
            continue                                  # the exponent or suffix of a number
        names.add(name)
    return names


def selected(expr: str) -> list[tuple[str, str]]:
    """(metric name, label matchers) for every `name{...}` selector in the expression."""
    pattern = r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^{}]*)\}"
    return [(m.group(1), m.group(2)) for m in re.finditer(pattern, expr)]


# --- the checks ---------------------------------------------------------------------------------

class Report:
    def __init__(self):
        self.failures = 0
        self.passes = 0

    def check(self, ok: bool, name: str, detail: str = ""):
        if ok:
            self.passes += 1
            print(f"ok   {name}")
        else:
            self.failures += 1
            print(f"FAIL {name}" + (f": {detail}" if detail else ""))


def dashboards(docs):
    for doc in docs:
        if doc.get("kind") == "ConfigMap":
            for key, text in (doc.get("data") or {}).items():
                if key.endswith(".json"):
                    yield f"{doc['metadata']['name']}/{key}", text


def check_dashboard(report: Report, name: str, text: str) -> list[str]:
    try:
        board = json.loads(text)
    except json.JSONDecodeError as error:
        report.check(False, f"dashboard {name}: JSON parses", str(error))
        return []
    report.check(True, f"dashboard {name}: JSON parses")
    problems = []
    if not board.get("uid") or len(board["uid"]) > 40:
        problems.append(f"uid {board.get('uid')!r} (1-40 characters)")
    if not board.get("title"):
        problems.append("no title")
    left = sorted(set(PLACEHOLDER.findall(text)))
    if left:
        problems.append(f"placeholders left: {left}")
    variables = {v.get("name") for v in board.get("templating", {}).get("list", [])}
    if "datasource" not in variables:
        problems.append("no datasource variable")
    ids, exprs = set(), []
    panels = board.get("panels") or []
    if not panels:
        problems.append("no panels")
    for panel in panels:
        pid = panel.get("id")
        if pid in ids:
            problems.append(f"panel id {pid} repeats")
        ids.add(pid)
        pos = panel.get("gridPos", {})
        if not (pos and 0 <= pos.get("x", -1) and pos.get("w", 0) > 0 and pos["x"] + pos["w"] <= 24):
            problems.append(f"panel {panel.get('title')!r}: gridPos {pos}")
        if panel.get("type") == "row":
            continue
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"panel {panel.get('title')!r}: data source is not ${{datasource}}")
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"panel {panel.get('title')!r}: no targets")
        for target in targets:
            expr = (target.get("expr") or "").strip()
            if not expr:
                problems.append(f"panel {panel.get('title')!r}: a target without an expression")
            exprs.append(expr)
    report.check(not problems, f"dashboard {name}: {len(panels)} panels, {len(exprs)} queries, well-formed",
                 "; ".join(problems))
    return exprs


def promtool_checks(report: Report, promtool: str, groups: list, rules_test: Path | None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        rules = Path(scratch) / "rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
        result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True,
                                text=True, timeout=120)
        count = sum(len(g.get("rules", [])) for g in groups)
        report.check(result.returncode == 0, f"promtool check rules ({count} rules)",
                     (result.stdout + result.stderr).strip())
        if rules_test:
            test = Path(scratch) / rules_test.name
            shutil.copy(rules_test, test)
            result = subprocess.run([promtool, "test", "rules", str(test)], capture_output=True,
                                    text=True, timeout=120, cwd=scratch)
            report.check(result.returncode == 0, f"promtool test rules ({rules_test.name})",
                         (result.stdout + result.stderr).strip())


def check_names(report: Report, exprs: list[tuple[str, str]], tiers: dict[str, set[str]],
                selectors: dict[str, str]) -> None:
    everything = set().union(*tiers.values()) | PROMETHEUS_OWN
    used: set[str] = set()
    unknown, misplaced = [], []
    for where, expr in exprs:
        names = metric_names(expr)
        if not names:
            unknown.append(f"{where}: no metric found in {expr!r}")
        used |= names
        for name in sorted(names - everything):
            unknown.append(f"{where}: {name}")
        for name, matchers in selected(expr):
            for tier, selector in selectors.items():
                if selector and selector in matchers and name not in tiers[tier] | PROMETHEUS_OWN:
                    misplaced.append(f"{where}: {name} with the {tier} selector")
    report.check(not unknown, f"{len(used)} metric names used, every one in the captured exposition",
                 "; ".join(unknown))
    report.check(not misplaced, "each metric is selected from the tier that exports it",
                 "; ".join(misplaced))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("manifest")
    ap.add_argument("--metrics", required=True, type=Path,
                    help="directory with transactor.prom and ingress.prom")
    ap.add_argument("--selector", action="append", default=[],
                    help="TIER=MATCHERS, the label matchers the chart renders for a tier")
    ap.add_argument("--rules-test", type=Path)
    ap.add_argument("--promtool", default=shutil.which("promtool") or "promtool")
    a = ap.parse_args()
    report = Report()
    docs = [d for d in yaml.safe_load_all(Path(a.manifest).read_text()) if d]
    tiers = {tier: exposed_names(a.metrics / f"{tier}.prom") for tier in ("transactor", "ingress")}
    selectors = dict(s.split("=", 1) for s in a.selector)

    exprs: list[tuple[str, str]] = []
    boards = list(dashboards(docs))
    report.check(bool(boards), "a Grafana dashboard is rendered")
    for name, text in boards:
        exprs += [(f"dashboard {name}", e) for e in check_dashboard(report, name, text)]

    rules = [d for d in docs if d.get("kind") == "PrometheusRule"]
    report.check(bool(rules), "a PrometheusRule is rendered")
    for doc in rules:
        groups = doc["spec"]["groups"]
        promtool_checks(report, a.promtool, groups, a.rules_test)
        for group in groups:
            for rule in group["rules"]:
                exprs.append((f"rule {rule.get('alert') or rule.get('record')}", str(rule["expr"])))
    check_names(report, exprs, tiers, selectors)
    for doc in docs:
        if doc.get("kind") != "HorizontalPodAutoscaler":
            continue
        pods = [m["pods"]["metric"]["name"] for m in doc["spec"].get("metrics", []) if m.get("type") == "Pods"]
        report.check(bool(pods) and all(name in tiers["ingress"] for name in pods),
                     f"the HPA's pods metrics {pods} are exported by the ingress",
                     f"{pods} not all in the ingress's captured exposition")
    print(f"{report.passes} passed, {report.failures} failed")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
