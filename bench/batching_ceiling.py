"""The most dynamic batching can gain on this machine, next to what it
gained (bench/batching.sh prints it after its table).

    .venv/bin/python bench/batching_ceiling.py --out .cache/bench-batching --models "cnn transformer" --concurrency "1 32"

Batching makes a row's compute cheaper (a larger product runs closer to
the CPU's peak) and leaves the rest of a request's cost as it is: the HTTP
path, decoding, the client on the same host. With client and server
CPU-bound on the same cores, a request then takes at least

    1 / floor_rps + FLOPs per row / (peak per core x cores)

of the machine: the throughput of floor_unbatched at the same concurrency
(y = x + 1: the cost of a request with no compute) plus the row's compute
at 100% of the peak (bench/flops.py). Its inverse is the ceiling: the
requests per second of a server whose batched kernels reached the peak.
ceiling / off bounds on / off. It holds only where the floor run keeps the
cores busy (closed loop at concurrency >= cores); at concurrency 1 the
client's round trips, not the cores, limit every run.

Each (model, concurrency) reads the median-throughput run of
OUT/runs/<model>_<copy>-c<C>-r*.json (loadtest -json), and floor's.
"""

import argparse
import glob
import json
import os
import sys

import numpy as np

from flops import count_flops, cpu_peak, with_batch


def median_rps(pattern):
    """The median success throughput of the loadtest JSON files matching pattern."""
    runs = sorted(json.load(open(f))["success_throughput_rps"] for f in glob.glob(pattern))
    if not runs:
        sys.exit(f"batching_ceiling: no runs match {pattern}")
    return runs[(len(runs) - 1) // 2]


def flops_per_row(out, model):
    """FLOPs of one row of model (its batched copy, on its batch-1 input)."""
    feeds = {}
    for f in glob.glob(os.path.join(out, "inputs", model + ".*.npy")):
        feeds[os.path.basename(f)[len(model) + 1:-len(".npy")]] = np.load(f)
    path = os.path.join(out, "models", model + "_batched", "1", "model.onnx")
    return count_flops(with_batch(path, feeds))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".cache/bench-batching")
    ap.add_argument("--models", default="cnn transformer")
    ap.add_argument("--concurrency", default="1 8 32 64")
    args = ap.parse_args()
    per_core, cores, how = cpu_peak()
    peak = per_core * cores * 1e9
    print(f"Peak: {how}, {per_core * cores:.1f} GFLOP/s for {cores} cores.")
    print()
    print("| run | MFLOP per row | floor req/s | off req/s | on req/s | ceiling req/s | on / off | ceiling / off |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for m in args.models.split():
        flops = flops_per_row(args.out, m)
        for c in args.concurrency.split():
            runs = os.path.join(args.out, "runs")
            floor = median_rps(os.path.join(runs, f"floor_unbatched-c{c}-r*.json"))
            off = median_rps(os.path.join(runs, f"{m}_unbatched-c{c}-r*.json"))
            on = median_rps(os.path.join(runs, f"{m}_batched-c{c}-r*.json"))
            ceiling = 1 / (1 / floor + flops / peak)
            print(f"| {m} c={c} | {flops / 1e6:.1f} | {floor:.0f} | {off:.0f} | {on:.0f} | {ceiling:.0f} | "
                  f"{on / off:.2f}x | {ceiling / off:.2f}x |")


if __name__ == "__main__":
    main()
