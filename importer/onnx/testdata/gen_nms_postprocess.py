"""Generates nms_postprocess.onnx, a detection postprocess that keeps
computing with data-dependent results: the NonMaxSuppression indices are
sliced (top 10), gathered into boxes and scores and offset into labels; a
score filter's NonZero is transposed, gathered (GatherND) and scaled. Also
nms_postprocess.json: ONNX Runtime's outputs for four random inputs (one with fewer than ten
boxes above the score threshold).

Pinned: onnx 1.19.1, onnxruntime 1.23.2, numpy (.venv). Run from the
repository root:

	.venv/bin/python importer/onnx/testdata/gen_nms_postprocess.py
"""
import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

OUT = "importer/onnx/testdata/nms_postprocess.onnx"
REF = "importer/onnx/testdata/nms_postprocess.json"
N = 64


def const(name, vals, dt=TensorProto.INT64, dims=None):
    arr = np.array(vals)
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, dt, arr.shape if dims is None else dims, arr.ravel().tolist()))


nodes = [
    const("max_out", [20]),
    const("iou", [0.5], TensorProto.FLOAT),
    const("thr", [0.05], TensorProto.FLOAT),
    helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"], ["selected"]),
    const("col", 2, dims=[]),
    helper.make_node("Gather", ["selected", "col"], ["idx"], axis=1),
    const("zero", [0]),
    const("ten", [10]),
    helper.make_node("Slice", ["idx", "zero", "ten", "zero"], ["keep"]),
    helper.make_node("Squeeze", ["boxes", "zero"], ["boxes2"]),
    helper.make_node("Gather", ["boxes2", "keep"], ["out_boxes"], axis=0),
    const("flat", [N]),
    helper.make_node("Reshape", ["scores", "flat"], ["scores1"]),
    helper.make_node("Gather", ["scores1", "keep"], ["out_scores"], axis=0),
    const("one", 1, dims=[]),
    helper.make_node("Add", ["keep", "one"], ["labels"]),
    const("high_thr", 0.5, TensorProto.FLOAT, dims=[]),
    helper.make_node("Greater", ["scores1", "high_thr"], ["mask"]),
    helper.make_node("NonZero", ["mask"], ["nz"]),
    helper.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
    helper.make_node("GatherND", ["scores1", "nzt"], ["picked"]),
    const("two", 2.0, TensorProto.FLOAT, dims=[]),
    helper.make_node("Mul", ["picked", "two"], ["high"]),
    helper.make_node("Unsqueeze", ["high", "zero"], ["high_row"]),
]
graph = helper.make_graph(
    nodes,
    "nms_postprocess",
    [
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, N, 4]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, N]),
    ],
    [
        helper.make_tensor_value_info("out_boxes", TensorProto.FLOAT, ["k", 4]),
        helper.make_tensor_value_info("out_scores", TensorProto.FLOAT, ["k"]),
        helper.make_tensor_value_info("labels", TensorProto.INT64, ["k"]),
        helper.make_tensor_value_info("high_row", TensorProto.FLOAT, [1, "m"]),
    ],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
onnx.checker.check_model(model)
onnx.save(model, OUT)

rng = np.random.default_rng(0)
sess = ort.InferenceSession(OUT)
cases = []
for case in range(4):
    corner = rng.uniform(0, 10, (1, N, 2))
    size = rng.uniform(1, 4, (1, N, 2))
    boxes = np.concatenate([corner, corner + size], axis=2).astype(np.float32)
    scores = rng.uniform(0, 1, (1, 1, N)).astype(np.float32)
    if case == 3:  # fewer than 10 boxes pass the score threshold
        scores = np.full((1, 1, N), 0.01, np.float32)
        scores[0, 0, rng.choice(N, 5, replace=False)] = rng.uniform(0.6, 1, 5)
    outs = sess.run(None, {"boxes": boxes, "scores": scores})
    cases.append({
        "boxes": boxes.ravel().tolist(), "scores": scores.ravel().tolist(),
        "outputs": [{"shape": list(o.shape), "values": o.ravel().tolist()} for o in outs],
    })
with open(REF, "w") as f:
    json.dump({"cases": cases}, f)
