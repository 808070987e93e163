#!/usr/bin/env python3
"""Helper of scripts/bench/proxies.sh (standard library only).

  proxies_report.py round  --raw FILE --variant V --target T --c N --round R
                           --requests N --h2load-out FILE --h2load-log FILE
                           --cpu0 TICKS --cpu1 TICKS --bcpu0 TICKS --bcpu1 TICKS
                           --rss KB --brss KB --threads N --wall S
      Checks one h2load run (every request done and 2xx, 0 failed / errored /
      timeout), computes p50/p99 from the per-request log (3rd column,
      microseconds) and appends one JSON line to --raw. Prints a short line.
      Exits 1, loudly, when the run is not clean.

  proxies_report.py report --raw FILE --meta FILE --json OUT
      Aggregates the rounds: per (variant, target, c) median and spread
      (min-max) of p50, p99, req/s, CPU us/request, RSS; derived added
      p50/p99 and throughput ratio against direct; the issue's targets
      (ingress vs HAProxy). Writes OUT and prints the table.
"""

import argparse
import json
import math
import os
import re
import statistics
import sys

CLK_TCK = os.sysconf("SC_CLK_TCK")
VARIANTS = ["cleartext", "mtls"]
TARGETS = ["direct", "haproxy", "envoy", "ingress", "pingora"]
METRICS = ["p50_us", "p99_us", "rps", "cpu_us_per_req", "rss_kb", "backend_cpu_us_per_req"]


def percentile(sorted_values, q):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def cmd_round(a):
    out = open(a.h2load_out, encoding="utf-8", errors="replace").read()

    def fail(why):
        sys.stderr.write(
            f"\nFAILED: {a.variant}/{a.target} c={a.c} round {a.round}: {why}\n"
            f"--- h2load output ---\n{out}\n---\n"
        )
        sys.exit(1)

    m = re.search(
        r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
        r"(\d+) failed, (\d+) errored, (\d+) timeout",
        out,
    )
    if not m:
        fail("no 'requests:' summary line")
    total, _started, done, succeeded, failed, errored, timeouts = map(int, m.groups())
    if (failed, errored, timeouts) != (0, 0, 0):
        fail(f"{failed} failed, {errored} errored, {timeouts} timeout")
    if not (total == done == succeeded == a.requests):
        fail(f"expected {a.requests} requests done and succeeded, got {done}/{succeeded}")
    s = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if not s or int(s.group(1)) != a.requests:
        fail("not every response was 2xx")
    f = re.search(r"finished in ([\d.]+)(\w+), ([\d.]+) req/s", out)
    if not f:
        fail("no 'finished in' line")
    rps = float(f.group(3))

    lat = []
    with open(a.h2load_log, encoding="utf-8") as log:
        for line in log:
            cols = line.split()
            if len(cols) >= 3:
                lat.append(int(cols[2]))
    if len(lat) != a.requests:
        fail(f"per-request log has {len(lat)} lines, expected {a.requests}")
    lat.sort()

    cpu_s = (a.cpu1 - a.cpu0) / CLK_TCK
    bcpu_s = (a.bcpu1 - a.bcpu0) / CLK_TCK
    with open("/proc/loadavg", encoding="utf-8") as fh:
        load = [float(x) for x in fh.read().split()[:3]]
    rec = {
        "variant": a.variant,
        "target": a.target,
        "c": a.c,
        "round": a.round,
        "requests": a.requests,
        "p50_us": percentile(lat, 50),
        "p99_us": percentile(lat, 99),
        "mean_us": round(sum(lat) / len(lat), 1),
        "max_us": lat[-1],
        "rps": rps,
        "wall_s": round(a.wall, 3),
        "cpu_s": round(cpu_s, 3),
        "cpu_us_per_req": round(cpu_s * 1e6 / a.requests, 2),
        "rss_kb": a.rss,
        "threads": a.threads,
        "backend_cpu_s": round(bcpu_s, 3),
        "backend_cpu_us_per_req": round(bcpu_s * 1e6 / a.requests, 2),
        "backend_rss_kb": a.brss,
        "loadavg": load,
    }
    with open(a.raw, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(
        f"  {a.variant:9} {a.target:8} c={a.c:<3} round {a.round}: p50 {rec['p50_us']} us, "
        f"p99 {rec['p99_us']} us, {rps:.0f} req/s, cpu {rec['cpu_us_per_req']} us/req, "
        f"rss {a.rss} KiB, load {load[0]:.2f}",
        flush=True,
    )


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "values": values,
    }


def fmt(x, nd=0):
    if x is None:
        return "-"
    if nd == 0:
        return f"{x:.0f}"
    return f"{x:.{nd}f}"


def cmd_report(a):
    meta = json.load(open(a.meta, encoding="utf-8"))
    rounds = []
    if os.path.exists(a.raw):
        with open(a.raw, encoding="utf-8") as fh:
            rounds = [json.loads(line) for line in fh if line.strip()]
    unavailable = meta.get("unavailable", {})  # "variant/target" or "target" -> reason
    concurrencies = meta.get("concurrencies", [1, 16])
    variants = meta.get("variants", VARIANTS)

    results = []
    by_key = {}
    for v in variants:
        for t in TARGETS:
            for c in concurrencies:
                why = unavailable.get(f"{v}/{t}") or unavailable.get(t)
                rs = [r for r in rounds if r["variant"] == v and r["target"] == t and r["c"] == c]
                row = {"variant": v, "target": t, "c": c}
                if why and not rs:
                    row["status"] = "unavailable"
                    row["reason"] = why
                elif not rs:
                    row["status"] = "unavailable"
                    row["reason"] = "no rounds recorded"
                else:
                    row["status"] = "ok"
                    row["rounds"] = len(rs)
                    for mname in METRICS:
                        row[mname] = spread([r[mname] for r in rs])
                    row["loadavg_1m"] = spread([r["loadavg"][0] for r in rs])
                results.append(row)
                by_key[(v, t, c)] = row

    # Derived figures against the direct connection. h2load cannot present a
    # client certificate, so there is no mTLS "direct": the mTLS rows are
    # compared with the cleartext direct rows of the same run.
    def baseline(v, c):
        row = by_key.get((v, "direct", c))
        if row and row["status"] == "ok":
            return row, f"{v}/direct"
        row = by_key.get(("cleartext", "direct", c))
        if row and row["status"] == "ok":
            return row, "cleartext/direct"
        return None, None

    def paired(v, t, c, base_v, metric, op):
        """Per-round pairs (round i of target vs round i of baseline)."""
        mine = {r["round"]: r[metric] for r in rounds if (r["variant"], r["target"], r["c"]) == (v, t, c)}
        base = {r["round"]: r[metric] for r in rounds if (r["variant"], r["target"], r["c"]) == (base_v, "direct", c)}
        vals = [op(mine[k], base[k]) for k in sorted(mine) if k in base and base[k]]
        return spread(vals)

    for row in results:
        if row["status"] != "ok":
            continue
        base, base_name = baseline(row["variant"], row["c"])
        if not base:
            continue
        base_v = base_name.split("/")[0]
        row["baseline"] = base_name
        row["added_p50_us"] = row["p50_us"]["median"] - base["p50_us"]["median"]
        row["added_p99_us"] = row["p99_us"]["median"] - base["p99_us"]["median"]
        row["throughput_ratio"] = round(row["rps"]["median"] / base["rps"]["median"], 3)
        row["paired_rounds"] = {
            "added_p50_us": paired(row["variant"], row["target"], row["c"], base_v, "p50_us", lambda x, y: x - y),
            "added_p99_us": paired(row["variant"], row["target"], row["c"], base_v, "p99_us", lambda x, y: x - y),
            "throughput_ratio": paired(
                row["variant"], row["target"], row["c"], base_v, "rps", lambda x, y: round(x / y, 3)
            ),
        }

    # The targets: the ingress no worse than HAProxy.
    checks = []
    for v in variants:
        for c in concurrencies:
            ing, hap = by_key.get((v, "ingress", c)), by_key.get((v, "haproxy", c))
            if not ing or not hap or ing["status"] != "ok" or hap["status"] != "ok" or "added_p50_us" not in ing:
                continue
            for name, mine, theirs, better in [
                ("cpu_us_per_req <= haproxy", ing["cpu_us_per_req"]["median"], hap["cpu_us_per_req"]["median"], "le"),
                ("added_p50_us <= haproxy", ing["added_p50_us"], hap["added_p50_us"], "le"),
                ("throughput_ratio >= haproxy", ing["throughput_ratio"], hap["throughput_ratio"], "ge"),
            ]:
                ok = mine <= theirs if better == "le" else mine >= theirs
                checks.append({"variant": v, "c": c, "check": name, "ingress": mine, "haproxy": theirs, "pass": ok})

    doc = {"meta": meta, "results": results, "checks": checks, "rounds": rounds}
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")

    # The table.
    def sp(s, nd=0):
        if not s:
            return "-"
        return f"{fmt(s['median'], nd)} ({fmt(s['min'], nd)}-{fmt(s['max'], nd)})"

    hdr = (
        f"{'variant':9} {'target':8} {'c':>3}  {'p50 us (min-max)':>17} {'p99 us (min-max)':>18} "
        f"{'+p50':>5} {'+p99':>6}  {'req/s (min-max)':>21} {'ratio':>5}  "
        f"{'cpu us/req (min-max)':>20} {'backend':>7}  {'RSS KiB':>7}  {'load1':>5}"
    )
    print()
    print(
        f"Ingress overhead: {meta.get('requests')} requests x {meta.get('rounds')} round(s), "
        "medians with (min-max) over rounds; +p50/+p99/ratio vs direct"
    )
    print(hdr)
    print("-" * len(hdr))
    for row in results:
        v, t, c = row["variant"], row["target"], row["c"]
        if row["status"] != "ok":
            print(f"{v:9} {t:8} {c:>3}  unavailable: {row['reason']}")
            continue
        add50 = fmt(row.get("added_p50_us"))
        add99 = fmt(row.get("added_p99_us"))
        ratio = fmt(row.get("throughput_ratio"), 2)
        if row.get("baseline") and not row["baseline"].startswith(v):
            ratio += "*"
        load = row["loadavg_1m"]["max"] if row.get("loadavg_1m") else None
        print(
            f"{v:9} {t:8} {c:>3}  {sp(row['p50_us']):>17} {sp(row['p99_us']):>18} "
            f"{add50:>5} {add99:>6}  {sp(row['rps']):>21} {ratio:>5}  "
            f"{sp(row['cpu_us_per_req'], 1):>20} {fmt(row['backend_cpu_us_per_req']['median'], 1):>7}  "
            f"{fmt(row['rss_kb']['median']):>7}  {fmt(load, 2):>5}"
        )
    if any(r.get("baseline", "").startswith("cleartext") and r["variant"] != "cleartext" for r in results):
        print("* mTLS rows are compared with the cleartext direct rows (h2load cannot present a client certificate).")
    print(
        "cpu us/req: the measured process (the proxy; the transactor for direct); "
        "backend: the transactor's cpu us/req in the same rounds; load1: highest 1-minute load average seen."
    )
    if checks:
        print()
        print("Targets (ingress vs HAProxy):")
        for ch in checks:
            print(
                f"  {ch['variant']:9} c={ch['c']:<3} {ch['check']:28} ingress {ch['ingress']:>9} "
                f"haproxy {ch['haproxy']:>9}  {'PASS' if ch['pass'] else 'FAIL'}"
            )
    print()
    print(f"JSON: {a.json}")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("round")
    r.add_argument("--raw", required=True)
    r.add_argument("--variant", required=True)
    r.add_argument("--target", required=True)
    r.add_argument("--c", type=int, required=True)
    r.add_argument("--round", type=int, required=True)
    r.add_argument("--requests", type=int, required=True)
    r.add_argument("--h2load-out", required=True)
    r.add_argument("--h2load-log", required=True)
    for name in ["cpu0", "cpu1", "bcpu0", "bcpu1", "rss", "brss", "threads"]:
        r.add_argument(f"--{name}", type=int, required=True)
    r.add_argument("--wall", type=float, required=True)
    rep = sub.add_parser("report")
    rep.add_argument("--raw", required=True)
    rep.add_argument("--meta", required=True)
    rep.add_argument("--json", required=True)
    a = p.parse_args()
    {"round": cmd_round, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
