"""Generates torch_if.onnx: a torch module that branches on the value of
its input (torch.cond), exported by torch.onnx (dynamo exporter) to an ONNX
If with a run-time condition, plus torch_if.json, ONNX Runtime's outputs for
two inputs that take either branch.

Pinned: torch 2.14.1, onnxscript 0.7.2, onnx 1.19.1 (.venv-zoo), onnxruntime
1.23.2 (.venv). Run from the repository root:

	.venv-zoo/bin/python importer/onnx/testdata/gen_torch_if.py
	.venv/bin/python importer/onnx/testdata/gen_torch_if.py --reference
"""
import json
import sys

import numpy as np

OUT = "importer/onnx/testdata/torch_if.onnx"
REF = "importer/onnx/testdata/torch_if.json"


def export():
    import torch

    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x):
            def pos(x):
                return torch.relu(self.lin(x)) * 2.0

            def neg(x):
                return torch.tanh(self.lin(-x)) - 1.0

            return torch.cond(x.sum() > 0, pos, neg, (x,))

    torch.manual_seed(0)
    m = Branchy().eval()
    x = torch.randn(2, 4)
    prog = torch.onnx.export(m, (x,), dynamo=True, input_names=["x"], output_names=["y"])
    prog.save(OUT)


def reference():
    import onnxruntime as ort

    sess = ort.InferenceSession(OUT)
    rng = np.random.default_rng(0)
    cases = []
    for sign in (1.0, -1.0):
        x = (np.abs(rng.standard_normal((2, 4))) * sign).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        cases.append({"x": x.ravel().tolist(), "y": y.ravel().tolist(), "y_shape": list(y.shape)})
    with open(REF, "w") as f:
        json.dump(cases, f, indent=1)


if __name__ == "__main__":
    reference() if "--reference" in sys.argv else export()
