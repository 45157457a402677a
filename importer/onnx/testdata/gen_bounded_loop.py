"""Generates bounded_loop.onnx: a Loop over the run-time count of a
data-dependent selection, as torch.onnx exports a Python loop over a
detector's detections (torchvision's Mask R-CNN mask pasting). A score
filter (NonZero) selects boxes; the Loop's trip count is the selection's
Shape[0]; its body reads row i of the selection (Gather(sel, i)) and a
value computed outside the loop, carries a running sum, and grows a value
that starts with no rows by one row per iteration (Concat(acc, row) along
axis 0), which is then unsqueezed. Also bounded_loop.json: ONNX Runtime's
outputs for three random inputs (one with no box above the threshold: the
loop runs no iteration).

Pinned: onnx 1.19.1, onnxruntime 1.23.2, numpy (.venv). Run from the
repository root:

	.venv/bin/python importer/onnx/testdata/gen_bounded_loop.py
"""
import sys
from pathlib import Path

from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).parent))
from bounded_fixture import box_inputs, const, save_with_refs  # noqa: E402

OUT = "importer/onnx/testdata/bounded_loop.onnx"
REF = "importer/onnx/testdata/bounded_loop.json"


body = helper.make_graph(
    [
        helper.make_node("Gather", ["sel", "i"], ["row"], axis=0),
        helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        const("one", 1.0, dims=[]),
        helper.make_node("Add", ["fi", "one"], ["k"]),
        helper.make_node("Mul", ["row", "k"], ["scaled"]),
        helper.make_node("Add", ["scaled", "offset"], ["w"]),
        helper.make_node("Add", ["total_in", "row"], ["total_out"]),
        const("shape122", [1, 2, 2]),
        helper.make_node("Reshape", ["w", "shape122"], ["piece"]),
        helper.make_node("Concat", ["acc_in", "piece"], ["acc_out"], axis=0),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ],
    "paste",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []),
     helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
     helper.make_tensor_value_info("total_in", TensorProto.FLOAT, [4]),
     helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, None)],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("total_out", TensorProto.FLOAT, [4]),
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
    helper.make_node("ReduceMean", ["scores"], ["offset"], keepdims=0),
    const("true", 1, dims=[], dt=TensorProto.BOOL),
    const("total0", [0.0] * 4),
    const("acc_shape", [0, 2, 2]),
    helper.make_node("ConstantOfShape", ["acc_shape"], ["acc0"],
                     value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])),
    helper.make_node("Loop", ["n", "true", "total0", "acc0"], ["total", "acc"], body=body),
    const("ax1", [1]),
    helper.make_node("Unsqueeze", ["acc", "ax1"], ["pasted"]),
]
graph = helper.make_graph(
    nodes, "bounded_loop",
    box_inputs(),
    [helper.make_tensor_value_info("total", TensorProto.FLOAT, [4]),
     helper.make_tensor_value_info("pasted", TensorProto.FLOAT, ["n", 1, 2, 2])])
save_with_refs(graph, OUT, REF)
