"""Latency of torch.compile(backend="xserve") vs backend="inductor" vs eager.

Starts bin/xserve (or $XSERVE_BIN) on free loopback ports with an empty
repository, compiles one model three ways, and prints the median and p90
latency of a call at each batch size, after warm-up calls, the three ways
interleaved call by call (the first call of
each, which exports, uploads and compiles, is reported separately).

    make bench-backend                      # resnet18 at batch 1 and 8
    .venv-zoo/bin/python python/bench_backend.py --model resnet18 --batches 1,8 --iters 20
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

import torch
import torchvision

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "python" / "tests"))

import xserve.backend  # noqa: E402
from conftest import Xserve  # noqa: E402


def build(name: str) -> tuple[torch.nn.Module, tuple[int, ...]]:
    torch.manual_seed(0)
    if name == "resnet18":
        return torchvision.models.resnet18().eval(), (3, 224, 224)
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2().eval(), (3, 224, 224)
    raise SystemExit(f"--model {name}: want resnet18 or mobilenet_v2")


def measure(ways: dict, x: torch.Tensor, iters: int, warmup: int) -> dict[str, tuple[float, list[float]]]:
    """First-call time and per-call times of each way, the ways interleaved
    call by call so that a busy machine slows them alike."""
    first: dict[str, float] = {}
    times: dict[str, list[float]] = {w: [] for w in ways}
    with torch.no_grad():
        for w, fn in ways.items():
            t = time.perf_counter()
            fn(x)
            first[w] = time.perf_counter() - t
            for _ in range(warmup):
                fn(x)
        for _ in range(iters):
            for w, fn in ways.items():
                t = time.perf_counter()
                fn(x)
                times[w].append(time.perf_counter() - t)
    return {w: (first[w], times[w]) for w in ways}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads in this process (0: torch's default)")
    a = p.parse_args()
    if a.torch_threads:
        torch.set_num_threads(a.torch_threads)
    batches = [int(b) for b in a.batches.split(",")]
    model, shape = build(a.model)
    binary = os.environ.get("XSERVE_BIN", str(ROOT / "bin" / "xserve"))
    server = Xserve(binary, pathlib.Path(tempfile.mkdtemp(prefix="bench-backend-")))
    rows = []
    try:
        ways = {
            "eager": model,
            "inductor": torch.compile(model, backend="inductor"),
            "xserve": torch.compile(model, backend="xserve", options={"url": server.url, "buckets": {"batch": batches}}),
        }
        for b in batches:
            x = torch.randn(b, *shape)
            for way, (first, times) in measure(ways, x, a.iters, a.warmup).items():
                ms = sorted(t * 1000 for t in times)
                rows.append((way, b, first, statistics.median(ms), ms[max(0, int(len(ms) * 0.9) - 1)]))
                print(f"{way:9s} batch {b}: first call {first:7.2f} s, median {rows[-1][3]:8.2f} ms, p90 {rows[-1][4]:8.2f} ms", flush=True)
            with torch.no_grad():
                diff = (ways["xserve"](x) - model(x)).abs().max().item()
            print(f"xserve vs eager at batch {b}: max abs difference {diff:.2e}")
        print(xserve.backend.stats())
    finally:
        server.stop()
    print(f"\n| model | batch | eager median (ms) | inductor median (ms) | xserve backend median (ms) |")
    print("|---|---|---|---|---|")
    for b in batches:
        r = {w: m for w, bb, _, m, _ in rows if bb == b}
        print(f"| {a.model} | {b} | {r['eager']:.1f} | {r['inductor']:.1f} | {r['xserve']:.1f} |")
    print(f"\ntorch {torch.__version__}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
