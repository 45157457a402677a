"""The runs of bench/batching.sh: merging a run's rounds, and the on/off table.

    .venv/bin/python bench/batching_runs.py merge --tck 100 --out RUN.json ROUND.json...
    .venv/bin/python bench/batching_runs.py table --runs .cache/bench-batching/runs --models "cnn transformer" --concurrency "1 32"

merge sums the rounds' requests and measured time into one loadtest-style
summary (throughput = successes / measured seconds; p50 and p99 the median
of the rounds'), and adds server_cpu_ms_per_request: the xserve process's
user + system time over the rounds' measured windows (ROUND.cpu, clock
ticks at the end of the warmup and of the round) over their successes; and
client_cpu_ms_per_request: the load generator's user + system time
(ROUND.client, GNU time's "%U %S", warmup included) over every request it
sent.

table prints, per model and concurrency, the median over the runs of each
copy's throughput, p50 and CPU per request, and the median of the per-run
ratios on/off: a run of each copy is interleaved round by round with the
other's, so a ratio compares measurements of the same minutes, and the
median of ratios is steadier on a shared machine than the ratio of two
medians taken from different moments.
"""

import argparse
import glob
import json
import math
import os
import statistics


def merge(rounds, tck, out):
    summaries = [json.load(open(f)) for f in rounds]
    run = dict(summaries[0])
    for k in ("requests", "successes", "failures", "bytes_sent", "bytes_received", "warmup_requests"):
        run[k] = sum(s.get(k, 0) for s in summaries)
    run["elapsed_s"] = sum(s["elapsed_s"] for s in summaries)
    run["throughput_rps"] = run["requests"] / run["elapsed_s"]
    run["success_throughput_rps"] = run["successes"] / run["elapsed_s"]
    run["latency_ms"] = {k: statistics.median(s["latency_ms"][k] for s in summaries) for k in summaries[0]["latency_ms"]}
    ticks = 0.0
    for f in rounds:
        t0, t1 = (float(x) for x in open(f[:-len(".json")] + ".cpu").read().split())
        if t0 <= 0:
            ticks = math.nan  # the warmup's reading is missing
        ticks += t1 - t0
    run["server_cpu_ms_per_request"] = ticks / tck * 1e3 / run["successes"] if run["successes"] else math.nan
    client, sent = 0.0, 0
    for f, s in zip(rounds, summaries):
        try:
            client += sum(float(x) for x in open(f[:-len(".json")] + ".client").read().split()[-2:])
        except (OSError, ValueError):
            client = math.nan  # no GNU time
        sent += s["requests"] + s.get("warmup_requests", 0)
    run["client_cpu_ms_per_request"] = client * 1e3 / sent if sent else math.nan
    run["rounds"] = len(summaries)
    with open(out, "w") as f:
        json.dump(run, f, indent=2)


def runs_of(runs, name, c):
    """The runs of served model name at concurrency c, by run number."""
    out = {}
    for f in glob.glob(os.path.join(runs, f"{name}-c{c}-r*.json")):
        r = int(f[:-len(".json")].rsplit("-r", 1)[1])
        out[r] = json.load(open(f))
    return out


def paired(a, b, key):
    """Per-run ratios key(b) / key(a) over the runs both have."""
    return [key(b[r]) / key(a[r]) for r in sorted(a) if r in b and key(a[r]) > 0]


def rps(s):
    return s["success_throughput_rps"]


def p50(s):
    return s["latency_ms"]["p50"]


def cpu(s):
    return s.get("server_cpu_ms_per_request", math.nan)


def med(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def table(runs, models, concurrency):
    print("| run | off req/s | on req/s | on/off (runs) | on/off | off p50 ms | on p50 ms | on/off p50 | off CPU ms/request | on CPU ms/request | CPU on/off |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for m in models:
        for c in concurrency:
            off, on = runs_of(runs, f"{m}_unbatched", c), runs_of(runs, f"{m}_batched", c)
            if not off or not on:
                continue
            ratios = paired(off, on, rps)
            print(f"| {m} c={c} | {med(rps(s) for s in off.values()):.1f} | {med(rps(s) for s in on.values()):.1f} | "
                  + " ".join(f"{x:.2f}" for x in ratios) + f" | **{med(ratios):.2f}x** | "
                  f"{med(p50(s) for s in off.values()):.2f} | {med(p50(s) for s in on.values()):.2f} | {med(paired(off, on, p50)):.2f}x | "
                  f"{med(cpu(s) for s in off.values()):.3f} | {med(cpu(s) for s in on.values()):.3f} | {med(paired(off, on, cpu)):.2f}x |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    mp = sub.add_parser("merge", help="merge a run's rounds")
    mp.add_argument("--tck", type=float, required=True, help="clock ticks per second (getconf CLK_TCK)")
    mp.add_argument("--out", required=True)
    mp.add_argument("rounds", nargs="+")
    tp = sub.add_parser("table", help="print the on/off table")
    tp.add_argument("--runs", default=".cache/bench-batching/runs")
    tp.add_argument("--models", default="cnn transformer")
    tp.add_argument("--concurrency", default="1 8 32 64")
    args = ap.parse_args()
    if args.cmd == "merge":
        merge(args.rounds, args.tck, args.out)
    else:
        table(args.runs, args.models.split(), args.concurrency.split())


if __name__ == "__main__":
    main()
