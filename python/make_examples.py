"""Writes the example model repository that `make run` serves
(examples/models/) plus a sample input and ONNX Runtime's output for it
(examples/samples/; outside the repository, whose model directories hold
only versions and config.yaml).

    .venv/bin/python python/make_examples.py [--out examples/models]
"""

import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort

import onnx_models


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="examples/models")
    ap.add_argument("--samples", default="examples/samples")
    ap.add_argument("--tiny", default="testdata/tiny", help="where the overhead-benchmark model goes")
    args = ap.parse_args()
    model = onnx_models.tiny_cnn()
    vdir = os.path.join(args.out, "tinycnn", "1")
    os.makedirs(vdir, exist_ok=True)
    path = os.path.join(vdir, "model.onnx")
    onnx.save(model, path)
    sample = os.path.join(args.samples, "tinycnn")
    os.makedirs(sample, exist_ok=True)
    image = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    np.save(os.path.join(sample, "image.npy"), image)
    (probs,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"image": image})
    np.save(os.path.join(sample, "probs.onnxruntime.npy"), probs)
    print(f"wrote {path} ({os.path.getsize(path)} bytes) and {sample}/")
    tiny = os.path.join(args.tiny, "addone.onnx")
    os.makedirs(args.tiny, exist_ok=True)
    onnx.save(onnx_models.add_one(), tiny)
    print(f"wrote {tiny} ({os.path.getsize(tiny)} bytes)")


if __name__ == "__main__":
    main()
