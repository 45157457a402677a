"""Writes the two-input test model of package serving, pair.onnx, and ONNX
Runtime's outputs for a sample input:

    .venv/bin/python serving/testdata/make_pair.py

pair.onnx has inputs x and y, float32[batch, seq], and outputs
    sum   = x + y * w        float32[batch, seq]   (w: a float32[1] weight)
    total = ReduceSum(x, 1)  float32[batch]        (sees the padding of seq)
"""

import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))


def pair():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])
    s = helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["batch", "seq"])
    t = helper.make_tensor_value_info("total", TensorProto.FLOAT, ["batch"])
    w = helper.make_tensor("w", TensorProto.FLOAT, [1], [0.5])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    nodes = [
        helper.make_node("Mul", ["y", "w"], ["yw"]),
        helper.make_node("Add", ["x", "yw"], ["sum"]),
        helper.make_node("ReduceSum", ["x", "axes"], ["total"], keepdims=0),
    ]
    g = helper.make_graph(nodes, "pair", [x, y], [s, t], initializer=[w, axes])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="xserve-testdata", ir_version=8)
    onnx.checker.check_model(m)
    return m


def main():
    path = os.path.join(HERE, "pair.onnx")
    onnx.save(pair(), path)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    y = rng.standard_normal((3, 5)).astype(np.float32)
    s, t = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x, "y": y})
    np.save(os.path.join(HERE, "pair_x.npy"), x)
    np.save(os.path.join(HERE, "pair_y.npy"), y)
    np.save(os.path.join(HERE, "pair_sum.onnxruntime.npy"), s)
    np.save(os.path.join(HERE, "pair_total.onnxruntime.npy"), t)
    print(f"wrote {path} and its sample")


if __name__ == "__main__":
    main()
