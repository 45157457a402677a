"""The most dynamic batching can gain on this machine, next to what it
gained (bench/batching.sh prints it after its table).

    .venv/bin/python bench/batching_ceiling.py --out .cache/bench-batching --models "cnn transformer" --concurrency "1 32"

Batching makes a row's compute cheaper (a larger product runs closer to
the CPU's peak) and leaves the rest of a request's cost as it is: the HTTP
path, decoding, the client on the same host. With client and server
CPU-bound on the same cores, a request then takes at least

    1 / floor_rps + FLOPs per row / (peak per core x cores)

of the machine: the throughput of the model's floor at the same
concurrency (floor_<model>_unbatched, bench/make_batching_models.py: the
same input, through the same HTTP path, no compute) plus the row's compute
at 100% of the peak (bench/flops.py). Its inverse is the ceiling: the
requests per second of a server whose batched kernels reached the peak.
ceiling / off bounds on / off. It holds only where the floor run keeps the
cores busy (closed loop at concurrency >= cores); at concurrency 1 the
client's round trips, not the cores, limit every run.

Each (model, concurrency) reads the runs OUT/runs/<model>_<copy>-c<C>-r<R>.json
(bench/batching_runs.py merge) of the three copies. bench/batching.sh
interleaves the floor's rounds with the two copies', so run R of each saw
the same load: the ceiling is computed per run from that run's floor, and
the table gives the median over the runs of on / ceiling and ceiling / off,
each a ratio of measurements of the same minutes (a floor measured after
the other runs, as before, moved with the load by +-20% on a shared VM, and
the ceiling with it).

What the ceiling assumes, and where it is optimistic: (1) the floor's
requests cost what a real request costs besides its compute; a batched
request also pays for its queue, the copy of its row into the batch and of
its outputs out of it, and its batch's execution call (fixed per batch),
which the floor does not; (2) a row's compute at the peak (or at the
cheapest row measured) whatever the batch, where the batches a closed
loop forms hold a few rows (bench/batching.sh prints how many) and cost
more a row than the largest; (3) the CPUs' time adds up: floor work and
compute share the cores without idle time; (4) the machine is the
benchmark's: the floor's time per request counts the time other processes
held the cores, while the compute term is at the full speed of all of
them, so on a shared machine the throughput ceiling is optimistic (the CPU
table prints the floor's share of the cores). The server CPU per request of
on and of the floor (bench/batching.sh's table) measure (1) and (2)
apart from the load: on's CPU per request minus the floor's is what a
row costs the server in the batched copy, next to its cheapest serial row.

With --runner (cmd/bench-runner) it also times each model serially (one
thread: XSERVE_CPU_KERNELS_THREADS=1, no bands, no split) at every batch
bucket, by the CPU time of each call, and prints the cost of a row at each: what batching can save in
compute is the difference between the batch-1 row and the cheapest one,
whatever the batching policy. "ceiling, rows" is the ceiling with the
cheapest row measured instead of the peak.
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from flops import count_flops, cpu_peak, with_batch


def runs(pattern):
    """The merged runs matching pattern (run number -> summary)."""
    out = {}
    for f in glob.glob(pattern):
        out[int(f[:-len(".json")].rsplit("-r", 1)[1])] = json.load(open(f))
    if not out:
        sys.exit(f"batching_ceiling: no runs match {pattern}")
    return out


def med(xs):
    xs = [x for x in xs if x == x]  # no NaN
    return statistics.median(xs) if xs else float("nan")


def flops_per_row(out, model):
    """FLOPs of one row of model (its batched copy, on its batch-1 input)."""
    feeds = {}
    for f in glob.glob(os.path.join(out, "inputs", model + ".*.npy")):
        feeds[os.path.basename(f)[len(model) + 1:-len(".npy")]] = np.load(f)
    path = os.path.join(out, "models", model + "_batched", "1", "model.onnx")
    return count_flops(with_batch(path, feeds))


BUCKETS = [1, 2, 4, 8, 16, 32, 64]


def serial_rows(runner, out, model):
    """CPU seconds per row of model at each of BUCKETS, run serially by one
    bench-runner process (its CPU time over each call, not the call's wall
    time, which other jobs on a shared machine stretch): bucket -> seconds."""
    env = dict(os.environ, XSERVE_CPU_KERNELS_THREADS="1", XSERVE_CPU_KERNELS_BANDS="1", XSERVE_SPLIT_BATCHES="off")
    p = subprocess.Popen([runner], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, env=env)

    def ask(line):
        p.stdin.write(line + "\n")
        p.stdin.flush()
        reply = p.stdout.readline().strip()
        if not reply or reply.startswith("error"):
            sys.exit(f"batching_ceiling: bench-runner: {line}: {reply or 'no reply'}")
        return reply

    path = os.path.join(out, "models", model + "_batched", "1", "model.onnx")
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        for b in BUCKETS:
            specs = []
            for f in glob.glob(os.path.join(out, "inputs", model + ".*.npy")):
                name = os.path.basename(f)[len(model) + 1:-len(".npy")]
                batch = os.path.join(d, f"{name}.b{b}.npy")
                np.save(batch, np.repeat(np.load(f), b, axis=0))
                specs.append(f"{name}={batch}")
            ask(f"load m {path} " + " ".join(specs))  # replaces (and frees) the previous bucket's
            first = statistics.median(int(x) for x in ask("cputime m 10").split())
            n = max(20, int(0.3e9 / max(first, 1)))
            rows[b] = statistics.median(int(x) for x in ask(f"cputime m {n}").split()) / 1e9 / b
    p.stdin.write("quit\n")
    p.stdin.flush()
    p.wait()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".cache/bench-batching")
    ap.add_argument("--models", default="cnn transformer")
    ap.add_argument("--concurrency", default="1 8 32 64")
    ap.add_argument("--runner", help="cmd/bench-runner, to time each model's rows serially at every bucket")
    args = ap.parse_args()
    per_core, cores, how = cpu_peak()
    peak = per_core * cores * 1e9
    print(f"Peak: {how}, {per_core * cores:.1f} GFLOP/s for {cores} cores.")
    print()
    flops = {m: flops_per_row(args.out, m) for m in args.models.split()}
    best = {}
    if args.runner:
        print("A row's cost, serial (one thread), at each batch bucket: CPU time per row (cmd/bench-runner cputime):")
        print()
        print("| model | " + " | ".join(f"batch {b}" for b in BUCKETS) + " | batch 1 / cheapest |")
        print("|---|" + "---:|" * (len(BUCKETS) + 1))
        for m in flops:
            rows = serial_rows(args.runner, args.out, m)
            best[m] = min(rows.values())
            cells = [f"{rows[b] * 1e6:.0f} µs, {flops[m] / rows[b] / 1e9:.0f} GFLOP/s" for b in BUCKETS]
            print(f"| {m} | " + " | ".join(cells) + f" | {rows[1] / best[m]:.2f}x |")
        print()
    print("| run | MFLOP per row | floor req/s | off req/s | on req/s | ceiling req/s | ceiling / off | on / off | **on / ceiling** |"
          + (" ceiling, rows / off | on / ceiling, rows |" if best else ""))
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if best else ""))
    cpu_rows = []
    for m in flops:
        for c in args.concurrency.split():
            d = os.path.join(args.out, "runs")
            floor = runs(os.path.join(d, f"floor_{m}_unbatched-c{c}-r*.json"))
            off = runs(os.path.join(d, f"{m}_unbatched-c{c}-r*.json"))
            on = runs(os.path.join(d, f"{m}_batched-c{c}-r*.json"))
            rs = sorted(set(floor) & set(off) & set(on))
            ceiling = {r: 1 / (1 / rps(floor[r]) + flops[m] / peak) for r in rs}
            line = (f"| {m} c={c} | {flops[m] / 1e6:.1f} | {med(rps(floor[r]) for r in rs):.0f} | {med(rps(off[r]) for r in rs):.0f} | "
                    f"{med(rps(on[r]) for r in rs):.0f} | {med(ceiling.values()):.0f} | {med(ceiling[r] / rps(off[r]) for r in rs):.2f}x | "
                    f"{med(rps(on[r]) / rps(off[r]) for r in rs):.2f}x | **{med(rps(on[r]) / ceiling[r] for r in rs):.0%}** |")
            if best:
                rows = {r: 1 / (1 / rps(floor[r]) + best[m] / cores) for r in rs}
                line += f" {med(rows[r] / rps(off[r]) for r in rs):.2f}x | {med(rps(on[r]) / rows[r] for r in rs):.0%} |"
            print(line)
            row = best.get(m, flops[m] / per_core / 1e9)
            share = med(cpu(floor[r]) * rps(floor[r]) / 1e3 / cores for r in rs)
            cpu_rows.append((f"{m} c={c}", med(cpu(floor[r]) for r in rs), med(cpu(off[r]) for r in rs), med(cpu(on[r]) for r in rs), row, share))
    print()
    print("The same by CPU time per request (the server's user + system time and the client's, ms;")
    print("the server's alone where GNU time was missing):")
    print("what a request costs the machine whatever else runs on it. The ceiling by CPU is the floor's")
    print("plus " + ("the cheapest row's core time (serial, above)" if best else "the row's FLOPs at one core's peak") + "; on / ceiling = (floor + row) / on.")
    print()
    print("The throughput ceiling above assumes the machine is the benchmark's: the floor's throughput")
    print("counts the time other processes held the cores, the compute term does not. \"floor's share\"")
    print("is the part of the cores the floor's server and client used (their CPU per request times")
    print("req/s); below 100% the throughput ceiling is optimistic and this table is the one to read.")
    print()
    print("| run | floor CPU ms | off CPU ms | on CPU ms | row, core ms | **on / ceiling, CPU** | on - floor - row, ms | floor's share |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, f, o, n, row, share in cpu_rows:
        print(f"| {label} | {f:.3f} | {o:.3f} | {n:.3f} | {row * 1e3:.3f} | **{(f + row * 1e3) / n:.0%}** | {n - f - row * 1e3:.3f} | {share:.0%} |")


def rps(s):
    return s["success_throughput_rps"]


def cpu(s):
    """Server and client CPU ms per request; the server's alone where the
    client's was not measured (no GNU time)."""
    client = s.get("client_cpu_ms_per_request", float("nan"))
    return s.get("server_cpu_ms_per_request", float("nan")) + (client if client == client else 0)


if __name__ == "__main__":
    main()
