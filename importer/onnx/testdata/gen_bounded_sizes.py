"""Generates bounded_sizes.onnx: sizes computed from the run-time shape of a
data-dependent value, as torch.onnx exports torchvision's detectors. A
score filter (NonZero) selects boxes; from the selection's Shape the model
builds arange(n) (Range to a count), arange(boxes.shape[1]) (a static size
read from the run-time shape), a Reshape to [n, 2, 2] (a shape that
Concat builds from the count), and a Pad of the other axis. Also
bounded_sizes.json: ONNX Runtime's outputs for three random inputs (one
with no box above the threshold).

Pinned: onnx 1.19.1, onnxruntime 1.23.2, numpy (.venv). Run from the
repository root:

	.venv/bin/python importer/onnx/testdata/gen_bounded_sizes.py
"""
import sys
from pathlib import Path

from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).parent))
from bounded_fixture import box_inputs, const, save_with_refs  # noqa: E402

OUT = "importer/onnx/testdata/bounded_sizes.onnx"
REF = "importer/onnx/testdata/bounded_sizes.json"


nodes = [
    const("c0", 0, dims=[]),
    const("c1", 1, dims=[]),
    const("thr", 0.5, dims=[]),
    helper.make_node("Gather", ["scores", "c0"], ["s0"], axis=1),
    helper.make_node("Greater", ["s0", "thr"], ["mask"]),
    helper.make_node("NonZero", ["mask"], ["nz"]),
    const("ax0", [0]),
    helper.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
    helper.make_node("Gather", ["boxes", "idx"], ["sel"], axis=0),
    helper.make_node("Shape", ["sel"], ["shape"]),
    helper.make_node("Gather", ["shape", "c0"], ["n"], axis=0),
    helper.make_node("Gather", ["shape", "c1"], ["four"], axis=0),
    helper.make_node("Range", ["c0", "n", "c1"], ["positions"]),
    helper.make_node("Range", ["c0", "four", "c1"], ["cols"]),
    helper.make_node("Cast", ["cols"], ["colsf"], to=TensorProto.FLOAT),
    helper.make_node("Mul", ["sel", "colsf"], ["weighted"]),
    helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
    const("twotwo", [2, 2]),
    helper.make_node("Concat", ["n1", "twotwo"], ["rshape"], axis=0),
    helper.make_node("Reshape", ["sel", "rshape"], ["reshaped"]),
    const("pads", [0, 1, 0, 2]),
    helper.make_node("Pad", ["sel", "pads"], ["padded"]),
]
graph = helper.make_graph(
    nodes, "bounded_sizes",
    box_inputs(),
    [helper.make_tensor_value_info("positions", TensorProto.INT64, ["n"]),
     helper.make_tensor_value_info("weighted", TensorProto.FLOAT, ["n", 4]),
     helper.make_tensor_value_info("reshaped", TensorProto.FLOAT, ["n", 2, 2]),
     helper.make_tensor_value_info("padded", TensorProto.FLOAT, ["n", 7])])
save_with_refs(graph, OUT, REF)
