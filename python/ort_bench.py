"""Times ONNX Runtime (CPU execution provider) on one model and prints one
JSON line: {"median_ms": ..., "mean_ms": ..., "runs": N, "threads": T}.

    .venv/bin/python python/ort_bench.py MODEL.onnx NAME=INPUT.npy ... [--runs 20] [--threads 0]

Used by the Go benchmark BenchmarkTraceOnce so that XLA and ONNX Runtime are
measured in the same run on the same inputs.
"""

import argparse
import json
import statistics
import time

import numpy as np
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model")
    ap.add_argument("inputs", nargs="+", help="NAME=FILE.npy")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = ORT default)")
    args = ap.parse_args()
    opts = ort.SessionOptions()
    if args.threads:
        opts.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(args.model, opts, providers=["CPUExecutionProvider"])
    feeds = {}
    for spec in args.inputs:
        name, path = spec.split("=", 1)
        feeds[name] = np.load(path)
    for _ in range(3):
        sess.run(None, feeds)
    times = []
    for _ in range(args.runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    print(json.dumps({"median_ms": statistics.median(times), "mean_ms": statistics.mean(times),
                      "runs": args.runs, "threads": opts.intra_op_num_threads}))


if __name__ == "__main__":
    main()
