"""Writes the models of package serving's lazy-loading test: twenty tinycnn
models, each with weights of its own (python/onnx_models.tiny_cnn with seeds
0 to 19), and ONNX Runtime's outputs for the example image
(examples/samples/tinycnn/image.npy):

    .venv/bin/python serving/testdata/make_lazy.py

lazy/m<NN>.onnx is the model of seed NN, lazy/m<NN>.probs.npy its output.
"""

import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import onnx_models  # noqa: E402


def main():
    out = os.path.join(HERE, "lazy")
    os.makedirs(out, exist_ok=True)
    image = np.load(os.path.join(ROOT, "examples", "samples", "tinycnn", "image.npy"))
    for seed in range(20):
        path = os.path.join(out, f"m{seed:02d}.onnx")
        onnx.save(onnx_models.tiny_cnn(seed=seed), path)
        (probs,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"image": image})
        np.save(os.path.join(out, f"m{seed:02d}.probs.npy"), probs)
    print(f"wrote 20 models and their outputs to {out}")


if __name__ == "__main__":
    main()
