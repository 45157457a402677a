"""Generates while_loop.onnx: an ONNX Loop whose trip count M and whose
condition are run-time values (the condition is computed in the body from
a captured graph input), plus while_loop.json, ONNX Runtime's outputs for
inputs that stop by the trip count, by the condition, and at once.

Pinned: onnx 1.19.1, onnxruntime 1.23.2 (.venv). Run from the repository
root:

	.venv/bin/python importer/onnx/testdata/gen_while_loop.py
"""
import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

OUT = "importer/onnx/testdata/while_loop.onnx"
REF = "importer/onnx/testdata/while_loop.json"


def build():
    # body(i, cond, v, acc): v' = v * 1.5 + b; acc' = acc + sum(v) + i;
    # cond' = acc' < limit. b and limit are graph inputs the body captures,
    # scale an initializer of the outer graph.
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["v", "scale"], ["vs"]),
            helper.make_node("Add", ["vs", "b"], ["v_out"]),
            helper.make_node("ReduceSum", ["v"], ["s"], keepdims=0),
            helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["acc", "s"], ["acc1"]),
            helper.make_node("Add", ["acc1", "fi"], ["acc_out"]),
            helper.make_node("Less", ["acc_out", "limit"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("acc", TensorProto.FLOAT, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, []),
        ],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["acc0"], value=helper.make_tensor("acc0", TensorProto.FLOAT, [], [0.0])),
            helper.make_node("Constant", [], ["go"], value=helper.make_tensor("go", TensorProto.BOOL, [], [True])),
            helper.make_node("Loop", ["M", "go", "x", "acc0"], ["v_final", "acc_final"], body=body),
        ],
        "while_loop",
        [
            helper.make_tensor_value_info("M", TensorProto.INT64, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("limit", TensorProto.FLOAT, []),
        ],
        [
            helper.make_tensor_value_info("v_final", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("acc_final", TensorProto.FLOAT, []),
        ],
        [helper.make_tensor("scale", TensorProto.FLOAT, [], [1.5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, OUT)


def reference():
    sess = ort.InferenceSession(OUT)
    x = np.array([[0.5, -1.0, 2.0], [1.0, 0.25, -0.5]], np.float32)
    b = np.array([0.1, -0.2, 0.3], np.float32)
    cases = []
    for m, limit in ((5, 1e9), (50, 20.0), (0, 1e9), (3, -1.0)):
        feeds = {"M": np.array(m, np.int64), "x": x, "b": b, "limit": np.array(limit, np.float32)}
        v, acc = sess.run(None, feeds)
        cases.append({"M": m, "limit": limit, "x": x.ravel().tolist(), "b": b.tolist(),
                      "v": v.ravel().tolist(), "acc": float(acc)})
    with open(REF, "w") as f:
        json.dump(cases, f, indent=1)


if __name__ == "__main__":
    build()
    reference()
