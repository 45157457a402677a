"""Writes the benchmark models (a ResNet-shaped CNN and a transformer
encoder block) and their inputs into --out (default .cache/bench; generated on
demand, never committed).

    .venv/bin/python python/make_bench_models.py --out .cache/bench
"""

import argparse
import os

import numpy as np
import onnx

import onnx_models


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=".cache/bench")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(7)
    models = {
        "cnn": (onnx_models.resnet_cnn(), {"image": rng.standard_normal((1, 3, 112, 112)).astype(np.float32)}),
        "transformer": (onnx_models.transformer_block(), {"x": rng.standard_normal((1, 128, 256)).astype(np.float32)}),
    }
    for name, (model, inputs) in models.items():
        path = os.path.join(args.out, f"{name}.onnx")
        onnx.save(model, path)
        for k, v in inputs.items():
            np.save(os.path.join(args.out, f"{name}.{k}.npy"), v)
        print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
