"""Generates loop_scan.onnx: two ONNX Loops with scan outputs whose number
of iterations is known only at run time: one with trip count min(n, 8) (n
an input), one with trip count 6 and a condition computed from the loop
state (sum < limit, limit an input). Also loop_scan.json: ONNX Runtime's
outputs for several n and limit.

Pinned: onnx 1.19.1, onnxruntime 1.23.2, numpy (.venv). Run from the
repository root:

	.venv/bin/python importer/onnx/testdata/gen_loop_scan.py
"""
import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

OUT = "importer/onnx/testdata/loop_scan.onnx"
REF = "importer/onnx/testdata/loop_scan.json"

# Body A: s' = s + x * i; scan out: s' * 2.
body_a = helper.make_graph(
    [
        helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "fi"], ["xi"]),
        helper.make_node("Add", ["s", "xi"], ["s_out"]),
        helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])),
        helper.make_node("Mul", ["s_out", "two"], ["scan_a"]),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
    ],
    "body_a",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
     helper.make_tensor_value_info("s", TensorProto.FLOAT, [3])],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [3]),
     helper.make_tensor_value_info("scan_a", TensorProto.FLOAT, [3])],
)
# Body B: t' = t + x; continue while sum(t') < limit; scan out: [sum(t'), i].
body_b = helper.make_graph(
    [
        helper.make_node("Add", ["t", "x"], ["t_out"]),
        helper.make_node("ReduceSum", ["t_out"], ["total"], keepdims=0),
        helper.make_node("Less", ["total", "limit"], ["cond_out"]),
        helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", TensorProto.INT64, [1], [0])),
        helper.make_node("Unsqueeze", ["total", "zero"], ["total1"]),
        helper.make_node("Unsqueeze", ["fi", "zero"], ["fi1"]),
        helper.make_node("Concat", ["total1", "fi1"], ["scan_b"], axis=0),
    ],
    "body_b",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
     helper.make_tensor_value_info("t", TensorProto.FLOAT, [3])],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [3]),
     helper.make_tensor_value_info("scan_b", TensorProto.FLOAT, [2])],
)
nodes = [
    helper.make_node("Constant", [], ["eight"], value=helper.make_tensor("eight", TensorProto.INT64, [], [8])),
    helper.make_node("Min", ["n", "eight"], ["m"]),
    helper.make_node("Constant", [], ["true"], value=helper.make_tensor("true", TensorProto.BOOL, [], [1])),
    helper.make_node("Constant", [], ["zeros"], value=helper.make_tensor("zeros", TensorProto.FLOAT, [3], [0, 0, 0])),
    helper.make_node("Loop", ["m", "true", "zeros"], ["a_final", "a_scan"], body=body_a),
    helper.make_node("Constant", [], ["six"], value=helper.make_tensor("six", TensorProto.INT64, [], [6])),
    helper.make_node("Loop", ["six", "true", "zeros"], ["b_final", "b_scan"], body=body_b),
]
graph = helper.make_graph(
    nodes, "loop_scan",
    [helper.make_tensor_value_info("n", TensorProto.INT64, []), helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
     helper.make_tensor_value_info("limit", TensorProto.FLOAT, [])],
    [helper.make_tensor_value_info("a_final", TensorProto.FLOAT, [3]), helper.make_tensor_value_info("a_scan", TensorProto.FLOAT, ["na", 3]),
     helper.make_tensor_value_info("b_final", TensorProto.FLOAT, [3]), helper.make_tensor_value_info("b_scan", TensorProto.FLOAT, ["nb", 2])],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
onnx.checker.check_model(model)
onnx.save(model, OUT)

sess = ort.InferenceSession(OUT)
x = np.array([0.5, -1.25, 2.0], np.float32)
cases = []
for n, limit in ((0, 1.0), (3, 4.0), (20, 100.0), (8, 2.5)):
    feeds = {"n": np.array(n, np.int64), "x": x, "limit": np.array(limit, np.float32)}
    outs = sess.run(None, feeds)
    cases.append({"n": n, "limit": limit, "x": x.tolist(),
                  "outputs": [{"shape": list(o.shape), "values": o.ravel().tolist()} for o in outs]})
with open(REF, "w") as f:
    json.dump({"cases": cases}, f)
print([[c["outputs"][i]["shape"] for i in range(4)] for c in cases])
