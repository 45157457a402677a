"""make bench-peers: xserve vs ONNX Runtime (1 and 2 intra-op threads) vs
OpenVINO on the zoo fixtures (testdata/zoo) and examples/models, batch 1, 8
and 32, interleaved, on the same inputs. Prints a Markdown table.

    .venv-bench/bin/python bench/peers.py --runner bin/bench-runner [--batches 1,8,32] [--rounds 5]

Each model and batch size: every runner loads the model (xserve: the
bench-runner process serves it with a serving.Manager, buckets at the batch
size and its half, and times Manager.Infer, host tensors in and out, as
`xserve serve` runs a request minus the wire), then `rounds` rounds run each runner in turn (order
rotated each round) for a chunk of about --chunk-s seconds; the p50 is over
all timed calls. Inputs: the fixture's batch-1 input repeated to the batch
size, written to .npy and read by every runner.

GFLOP/s counts 2 FLOPs per multiply-add of Conv, ConvTranspose, Gemm and
MatMul (from the ONNX graph with shapes inferred at that batch size); all
other ops are not counted. Peak: see bench/flops.py cpu_peak().
"""

import argparse
import glob
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov

from flops import count_flops, cpu_peak, with_batch


# BASELINES are the xserve variants --baselines can add: name -> (environment, what it is).
BASELINES = {
    "xla": ({"XSERVE_CPU_KERNELS": "off"}, "the CPU kernel library off, XLA's own convolutions and dots"),
    "async": ({"XSERVE_CPU_EXECUTION": "async"}, "PJRT's asynchronous CPU execution on its thread pool"),
    "nosplit": ({"XSERVE_SPLIT_BATCHES": "off"}, "every execution whole, never split into shards on idle cores"),
    "split": ({"XSERVE_SPLIT_BATCHES": "always"}, "every execution of several rows split into shards, one per core, unmeasured"),
    "nonorm": ({"XSERVE_CPU_KERNELS_SKIP": "xserve_softmax_f32,xserve_layernorm_f32"},
               "the softmax and layer norm kernels off (XLA's own), the other kernels on"),
}


class XServe:
    """xserve's bench-runner, as served; the baselines (BASELINES) run the
    same binary with one setting changed by its environment."""

    def __init__(self, runner, name="xserve", env=None):
        self.name = name
        self.p = subprocess.Popen([runner], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, **(env or {})})

    def _ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline().strip()
        if out.startswith("error:") or not out:
            raise RuntimeError(f"bench-runner: {line.split()[0]}: {out}")
        return out

    def load(self, key, model, files):
        self._ask(f"load {key} {model} " + " ".join(f"{k}={v}" for k, v in files.items()))
        self.key = key

    def run(self, n):
        return [int(x) / 1e9 for x in self._ask(f"time {self.key} {n}").split()]

    def close(self):
        self._ask("quit") if False else None
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        self.p.wait()


class ORT:
    def __init__(self, threads):
        self.threads = threads
        self.name = f"ort-{threads}t"

    def load(self, key, model, feeds):
        o = ort.SessionOptions()
        o.intra_op_num_threads = self.threads
        o.inter_op_num_threads = 1
        self.s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
        self.feeds = feeds
        self.s.run(None, feeds)

    def run(self, n):
        t = []
        for _ in range(n):
            s = time.perf_counter()
            self.s.run(None, self.feeds)
            t.append(time.perf_counter() - s)
        return t


class OpenVINO:
    name = "openvino"

    def __init__(self):
        self.core = ov.Core()

    def load(self, key, model, feeds):
        m = self.core.read_model(model)
        m.reshape({k: list(v.shape) for k, v in feeds.items()})
        # float32 like the others: on CPUs with AVX512_BF16 (this one)
        # OpenVINO otherwise computes in bfloat16 by default.
        self.c = self.core.compile_model(m, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"})
        self.req = self.c.create_infer_request()
        self.feeds = feeds
        self.req.infer(feeds)

    def run(self, n):
        t = []
        for _ in range(n):
            s = time.perf_counter()
            self.req.infer(self.feeds)
            t.append(time.perf_counter() - s)
        return t


def models(root, zoo="testdata/zoo"):
    out = []
    for d in sorted(glob.glob(os.path.join(root, zoo, "*/"))):
        ins = {os.path.basename(f)[len("b1.in."):-len(".npy")]: np.load(f) for f in sorted(glob.glob(d + "b1.in.*.npy"))}
        out.append((os.path.basename(d.rstrip("/")), os.path.join(d, "model.onnx"), ins))
    for mf in sorted(glob.glob(os.path.join(root, "examples/models/*/1/model.onnx"))):
        name = mf.split(os.sep)[-3]
        samples = {os.path.basename(f)[:-4]: np.load(f)[:1] for f in glob.glob(os.path.join(root, "examples/samples", name, "*.npy"))}
        m = onnx.load(mf)
        ins = {i.name: samples[i.name] for i in m.graph.input if i.name in samples}
        out.append((name, mf, ins))
    return out


def with_sequences(cases, seqs):
    """Replaces each model whose inputs are token sequences ([batch, sequence]
    integers) by one case per length in seqs, named <model>.s<length>: the
    fixture's tokens cut to that length, or repeated up to it."""
    out = []
    for name, path, ins in cases:
        tokens = ins and all(v.ndim == 2 and v.dtype.kind in "iu" for v in ins.values())
        if not seqs or not tokens:
            out.append((name, path, ins))
            continue
        for n in seqs:
            out.append((f"{name}.s{n}", path,
                        {k: np.ascontiguousarray(np.resize(v, (v.shape[0], n)) if n > v.shape[1] else v[:, :n])
                         for k, v in ins.items()}))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runner", required=True)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--chunk-s", type=float, default=0.2)
    ap.add_argument("--models", default="", help="comma-separated subset")
    ap.add_argument("--zoo", default="testdata/zoo",
                    help="directory of <model>/model.onnx and b1.in.*.npy (e.g. the full-size zoo: .cache/zoo-full)")
    ap.add_argument("--seqs", default="",
                    help="comma-separated sequence lengths to run token-sequence models at (e.g. 128,12); "
                    "empty: the fixture's own")
    ap.add_argument("--work", default=".cache/bench-peers")
    ap.add_argument("--runners", default="",
                    help="more bench-runner executables to run beside --runner, NAME=PATH,... (an A/B of two "
                    "builds: the other tree's bench-runner, or a script that sets its environment and execs it)")
    ap.add_argument("--peers", default="ort-1t,ort-2t,openvino",
                    help="the other frameworks to run, comma-separated (empty for none): ort-1t, ort-2t, openvino")
    ap.add_argument("--baselines", default="nosplit,xla",
                    help="xserve baselines to run beside xserve, comma-separated (empty for none): " +
                    "; ".join(f"{k}: {v[1]}" for k, v in BASELINES.items()))
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    per_core, ncpu, how = cpu_peak()
    peak = per_core * ncpu
    xs = XServe(args.runner)
    xservers = [xs]
    for b in filter(None, args.baselines.split(",")):
        if b not in BASELINES:
            sys.exit(f"--baselines: unknown baseline {b!r}, want some of {', '.join(BASELINES)}")
        xservers.append(XServe(args.runner, "xserve-" + b, BASELINES[b][0]))
    for spec in filter(None, args.runners.split(",")):
        name, _, path = spec.partition("=")
        if not path:
            sys.exit(f"--runners: want NAME=PATH, got {spec!r}")
        xservers.append(XServe(path, "xserve-" + name))
    peers = {"ort-1t": lambda: ORT(1), "ort-2t": lambda: ORT(2), "openvino": OpenVINO}
    for p in filter(None, args.peers.split(",")):
        if p not in peers:
            sys.exit(f"--peers: unknown peer {p!r}, want some of {', '.join(peers)}")
    runners = xservers + [peers[p]() for p in filter(None, args.peers.split(","))]
    names = [r.name for r in runners]
    print(f"peak: {how}; machine peak {peak:.0f} GFLOP/s ({ncpu} cores)", file=sys.stderr)
    print(f"onnxruntime {ort.__version__}, openvino {ov.__version__}, python {platform.python_version()}", file=sys.stderr)
    rows = []
    wanted = set(filter(None, args.models.split(",")))
    seqs = [int(x) for x in filter(None, args.seqs.split(","))]
    for name, path, ins in with_sequences(models(".", args.zoo), seqs):
        if wanted and name.split(".s")[0] not in wanted:
            continue
        for b in [int(x) for x in args.batches.split(",")]:
            feeds = {k: np.ascontiguousarray(np.repeat(v, b, axis=0)) for k, v in ins.items()}
            files = {}
            for k, v in feeds.items():
                f = os.path.join(args.work, f"{name}.b{b}.{k}.npy")
                np.save(f, v)
                files[k] = f
            flops = count_flops(with_batch(path, feeds))
            key = f"{name}.b{b}"
            times = {}
            try:
                for r in runners:
                    r.load(key, path, files if r in xservers else feeds)
                    t0 = time.perf_counter()
                    r.run(1)
                    times[r.name] = (max(1, int(args.chunk_s / max(time.perf_counter() - t0, 1e-6))), [])
                for rnd in range(args.rounds):
                    order = runners[rnd % len(runners):] + runners[:rnd % len(runners)]
                    for r in order:
                        times[r.name][1].extend(r.run(times[r.name][0]))
            except Exception as e:  # a runner that cannot run a model: say so in the table
                print(f"{key}: {e}", file=sys.stderr)
                rows.append((name, b, flops, {n: None for n in names}, str(e).splitlines()[0][:80]))
                continue
            p50 = {n: statistics.median(t[1]) for n, t in times.items()}
            rows.append((name, b, flops, p50, ""))
            print(f"{key}: " + " ".join(f"{n}={p50[n]*1e3:.3f}ms" for n in names), file=sys.stderr)
    for x in xservers:
        x.close()

    # The ratios' reference: the best ONNX Runtime, or without ORT the last
    # runner (an A/B: --runners' build).
    orts = [n for n in names if n.startswith("ort-")]
    ref_name = "best ORT" if orts else names[-1]

    def ref(p50):
        return min(p50[n] for n in orts) if orts else p50[names[-1]]

    print(f"| model | batch | GFLOP | " + " | ".join(f"{n} p50 ms" for n in names) +
          f" | xserve / {ref_name} | " + " | ".join(f"{n} GFLOP/s (% peak)" for n in names) + " |")
    print("|" + "---|" * (3 + 2 * len(names) + 1))
    for name, b, flops, p50, err in rows:
        if err:
            print(f"| {name} | {b} | {flops/1e9:.3f} | failed: {err} |")
            continue
        cells = [f"{p50[n]*1e3:.3f}" for n in names]
        rate = [f"{flops/p50[n]/1e9:.1f} ({100*flops/p50[n]/1e9/peak:.0f}%)" for n in names]
        print(f"| {name} | {b} | {flops/1e9:.3f} | " + " | ".join(cells) + f" | {p50['xserve']/ref(p50):.2f} | " + " | ".join(rate) + " |")
    geomeans(rows, [n for n in names if n.startswith("xserve") and n != ref_name], ref, ref_name)


TRANSFORMERS = {"bert", "vit_b_16"}


def geomeans(rows, xs, ref, ref_name):
    """Prints the geomean of each xserve runner's p50 over the reference's
    (ref: the best ORT's, or an A/B's other build), per batch size: all
    models, the CNNs, the transformers."""
    print()
    print("| batch | runner | all models | CNNs | BERT and ViT |")
    print("|---|---|---|---|---|")
    for b in sorted({r[1] for r in rows}):
        for n in xs:
            cells = []
            for keep in (lambda m: True, lambda m: m not in TRANSFORMERS, lambda m: m in TRANSFORMERS):
                r = [p50[n] / ref(p50) for name, bb, _, p50, err in rows
                     if bb == b and not err and keep(name.split(".s")[0])]
                cells.append(f"{np.exp(np.mean(np.log(r))):.2f} ({len(r)})" if r else "-")
            print(f"| {b} | {n} / {ref_name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
