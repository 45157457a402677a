"""Generates window_guard.onnx: a Loop over the run-time count of a score
filter whose body slices a constant vector to a run-time length (the
selected box's first coordinate, floored) and then to its first 4 entries,
growing a [n, 4] value. When a length is below 4 the row is shorter and
ONNX Runtime's Concat fails; xserve holds the row at 4 entries and must fail
the run too (its guard that the run-time size reached the static one).
Also window_guard.json: the inputs and ONNX Runtime's output of a case with
every length >= 4, and the inputs of one with a length of 2 (ORT's error).

Pinned: onnx 1.19.1, onnxruntime 1.23.2, numpy (.venv). Run from the
repository root:

	.venv/bin/python importer/onnx/testdata/gen_window_guard.py
"""
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).parent))
from bounded_fixture import N, box_inputs, const  # noqa: E402

OUT = "importer/onnx/testdata/window_guard.onnx"
REF = "importer/onnx/testdata/window_guard.json"

body = helper.make_graph(
    [
        helper.make_node("Gather", ["sel", "i"], ["row"], axis=0),
        const("b0", 0, dims=[]),
        helper.make_node("Gather", ["row", "b0"], ["x0"], axis=0),
        helper.make_node("Floor", ["x0"], ["fl"]),
        helper.make_node("Cast", ["fl"], ["len"], to=TensorProto.INT64),
        const("bax0", [0]),
        helper.make_node("Unsqueeze", ["len", "bax0"], ["end"]),
        const("zero", [0]),
        const("ramp", [float(k) for k in range(10)]),
        helper.make_node("Slice", ["ramp", "zero", "end"], ["prefix"]),
        const("four", [4]),
        helper.make_node("Slice", ["prefix", "zero", "four"], ["first4"]),
        helper.make_node("Unsqueeze", ["first4", "bax0"], ["piece"]),
        helper.make_node("Concat", ["acc_in", "piece"], ["acc_out"], axis=0),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ],
    "rows",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []),
     helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
     helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, None)],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, None)])

nodes = [
    const("c0", 0, dims=[]),
    const("thr", 0.5, dims=[]),
    helper.make_node("Gather", ["scores", "c0"], ["s0"], axis=1),
    helper.make_node("Greater", ["s0", "thr"], ["mask"]),
    helper.make_node("NonZero", ["mask"], ["nz"]),
    const("ax0", [0]),
    helper.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
    helper.make_node("Gather", ["boxes", "idx"], ["sel"], axis=0),
    helper.make_node("Shape", ["sel"], ["shape"]),
    helper.make_node("Gather", ["shape", "c0"], ["n"], axis=0),
    const("true", 1, dims=[], dt=TensorProto.BOOL),
    const("acc_shape", [0, 4]),
    helper.make_node("ConstantOfShape", ["acc_shape"], ["acc0"],
                     value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])),
    helper.make_node("Loop", ["n", "true", "acc0"], ["rows"], body=body),
]
graph = helper.make_graph(nodes, "window_guard", box_inputs(),
                          [helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["n", 4])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, OUT)
sess = ort.InferenceSession(OUT, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
boxes = rng.uniform(4, 10, (N, 4)).astype(np.float32)
scores = rng.uniform(0, 1, (N, 2)).astype(np.float32)
scores[:, 0] = [0.9, 0.1, 0.8, 0.7, 0.2, 0.6, 0.3, 0.95]
(out,) = sess.run(None, {"boxes": boxes, "scores": scores})
short = boxes.copy()
short[5, 0] = 2.5  # selected: a row of 2 entries
try:
    sess.run(None, {"boxes": short, "scores": scores})
    raise SystemExit("ONNX Runtime accepted a short row")
except ort.capi.onnxruntime_pybind11_state.Fail as e:
    err = str(e)
with open(REF, "w") as f:
    json.dump({"boxes": boxes.ravel().tolist(), "scores": scores.ravel().tolist(),
               "output": {"shape": list(out.shape), "values": out.ravel().tolist()},
               "short_boxes": short.ravel().tolist(), "ort_error": err}, f)
print(out.shape, err[:200])
