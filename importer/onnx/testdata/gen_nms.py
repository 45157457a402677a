"""Generates nms.onnx (one NonMaxSuppression, opset 11, 2 batches x 3
classes x 40 random overlapping boxes) and nms.json, ONNX Runtime's
selected indices for its inputs.

Pinned: onnx 1.19.1, onnxruntime 1.23.2, numpy (.venv). Run from the
repository root:

	.venv/bin/python importer/onnx/testdata/gen_nms.py
"""
import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

OUT = "importer/onnx/testdata/nms.onnx"
REF = "importer/onnx/testdata/nms.json"
B, C, N = 2, 3, 40

node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_thr"], ["selected"])
graph = helper.make_graph(
    [node],
    "nms",
    [
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [B, N, 4]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [B, C, N]),
        helper.make_tensor_value_info("max_out", TensorProto.INT64, [1]),
        helper.make_tensor_value_info("iou", TensorProto.FLOAT, [1]),
        helper.make_tensor_value_info("score_thr", TensorProto.FLOAT, [1]),
    ],
    [helper.make_tensor_value_info("selected", TensorProto.INT64, ["num_selected", 3])],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
onnx.checker.check_model(model)
onnx.save(model, OUT)

rng = np.random.default_rng(0)
corner = rng.uniform(0, 10, (B, N, 2))
size = rng.uniform(1, 4, (B, N, 2))
boxes = np.concatenate([corner, corner + size], axis=2).astype(np.float32)
scores = rng.uniform(0, 1, (B, C, N)).astype(np.float32)
cases = []
for max_out, iou, thr in ((10, 0.3, 0.2), (100, 0.5, 0.0), (3, 0.1, 0.5)):
    feeds = {"boxes": boxes, "scores": scores, "max_out": np.array([max_out], np.int64),
             "iou": np.array([iou], np.float32), "score_thr": np.array([thr], np.float32)}
    (sel,) = ort.InferenceSession(OUT).run(None, feeds)
    cases.append({"max_out": max_out, "iou": iou, "score_thr": thr, "selected": sel.ravel().tolist(), "rows": int(sel.shape[0])})
with open(REF, "w") as f:
    json.dump({"boxes": boxes.ravel().tolist(), "scores": scores.ravel().tolist(), "cases": cases}, f)
