"""What the bounded-value fixture generators (gen_bounded_sizes.py,
gen_bounded_loop.py) share: a Constant node maker, the score filter that
selects boxes (NonZero of scores[:, 0] > 0.5, the run-time count behind
every bounded size), and saving a model with ONNX Runtime's outputs for
three random inputs (the last with every score below the threshold: no box
selected). Pinned: onnx 1.19.1, onnxruntime 1.23.2, numpy (.venv).
"""
import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

N = 8


def const(name, vals, dims=None, dt=None):
    arr = np.array(vals)
    dt = dt or (TensorProto.FLOAT if arr.dtype.kind == "f" else TensorProto.INT64)
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, dt, arr.shape if dims is None else dims, arr.ravel().tolist()))


def box_inputs():
    """The two graph inputs: boxes [N, 4] and scores [N, 2]."""
    return [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [N, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [N, 2])]


def save_with_refs(graph, out, ref):
    """Checks and saves graph (opset 17) to out, and ONNX Runtime's outputs
    for three random inputs to ref; prints the outputs' shapes."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out)
    sess = ort.InferenceSession(out)
    rng = np.random.default_rng(0)
    cases = []
    for scale in (1.0, 1.0, 0.4):
        boxes = rng.uniform(0, 10, (N, 4)).astype(np.float32)
        scores = (rng.uniform(0, 1, (N, 2)) * scale).astype(np.float32)
        outs = sess.run(None, {"boxes": boxes, "scores": scores})
        cases.append({"boxes": boxes.ravel().tolist(), "scores": scores.ravel().tolist(),
                      "outputs": [{"shape": list(o.shape), "values": o.ravel().tolist()} for o in outs]})
    with open(ref, "w") as f:
        json.dump({"cases": cases}, f)
    print([[o["shape"] for o in c["outputs"]] for c in cases])
