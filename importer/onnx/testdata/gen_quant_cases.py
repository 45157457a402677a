"""Generates importer/onnx/testdata/ort/qconv_*/: small int8 convolution
models, as QLinearConv (ONNX Runtime's QOperator format) and as the
DequantizeLinear -> Conv -> QuantizeLinear groups of its static QDQ format
(one written by ORT's own quantize_static), with the expected outputs ORT
computed. Each model ends with a DequantizeLinear of scale 1 and the
output's zero point: the float output counts quantization steps, so that
importer/onnx TestQConvKernelMatchesORT can say "equal" or "one step off".

Pinned as gen_ort_cases.py (onnx, onnxruntime, numpy of .venv). Run from
the repository root (make ort-cases):

	.venv/bin/python importer/onnx/testdata/gen_quant_cases.py
"""
import os
import shutil
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_ort_cases import ROOT, case, tensor_vi  # noqa: E402

F, U8, I8 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8
rng = np.random.default_rng(34)


def init(name, v):
    return numpy_helper.from_array(np.asarray(v), name)


def qlinear(name, x_shape, w_shape, group=1, strides=(1, 1), pads=(1, 1, 1, 1), signed=False, bias=True,
            x_zp=3, y_zp=120, per_channel=True, dilations=None):
    """A QLinearConv of random int8 weights on a uint8 (int8 when signed)
    input, then DequantizeLinear(scale 1, the output's zero point)."""
    xt, xdt = (I8, np.int8) if signed else (U8, np.uint8)
    lo, hi = (-128, 128) if signed else (0, 256)
    x = rng.integers(lo, hi, x_shape).astype(xdt)
    o = w_shape[0]
    w = rng.integers(-127, 128, w_shape).astype(np.int8)
    ws = (rng.uniform(0.002, 0.02, o) if per_channel else np.array([0.01])).astype(np.float32)
    inits = [init("xs", np.float32(0.05)), init("xz", xdt(x_zp)), init("w", w), init("ws", ws), init("wz", np.zeros(ws.shape, np.int8)),
             init("ys", np.float32(0.2)), init("yz", xdt(y_zp)), init("one", np.float32(1))]
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        inits.append(init("b", rng.integers(-3000, 3000, o).astype(np.int32)))
        ins.append("b")
    attrs = dict(group=group, strides=list(strides), pads=list(pads), kernel_shape=list(w_shape[2:]))
    if dilations:
        attrs["dilations"] = list(dilations)
    nodes = [helper.make_node("QLinearConv", ins, ["yq"], **attrs), helper.make_node("DequantizeLinear", ["yq", "one", "yz"], ["y"])]
    case(name, nodes, [tensor_vi("x", xt, list(x_shape))], [tensor_vi("y", F, ["n", "c", "h", "w"])], [x], opset=13, inits=inits)


def qdq_quantize_static(name):
    """A float Conv-Relu-Conv(depthwise)-Conv model quantized by ORT's
    quantize_static (QDQ, uint8 activations, int8 per-channel weights),
    its last DequantizeLinear's scale set to 1."""
    w1 = rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3
    b1 = rng.standard_normal(16).astype(np.float32) * 0.1
    w2 = rng.standard_normal((16, 1, 3, 3)).astype(np.float32) * 0.3
    b2 = rng.standard_normal(16).astype(np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=16, strides=[2, 2]),
             helper.make_node("Conv", ["c2", "w3"], ["y"])]
    w3 = rng.standard_normal((8, 16, 1, 1)).astype(np.float32) * 0.3
    inits = [init("w1", w1), init("b1", b1), init("w2", w2), init("b2", b2), init("w3", w3)]
    quantized_static(name, nodes, inits, QuantType.QUInt8)


def qdq_tables(name, activation_type):
    """A float Conv-HardSwish-Conv-HardSigmoid-Conv model quantized by
    ORT's quantize_static: each HardSwish and HardSigmoid sits between a
    DequantizeLinear and a QuantizeLinear, which the importer turns into
    256-entry lookup tables (fuseQDQTables)."""
    w1 = rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.5
    w2 = rng.standard_normal((16, 16, 1, 1)).astype(np.float32) * 0.3
    w3 = rng.standard_normal((8, 16, 1, 1)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c1"], ["h1"]),
             helper.make_node("Conv", ["h1", "w2"], ["c2"]),
             helper.make_node("HardSigmoid", ["c2"], ["h2"], alpha=1 / 6, beta=0.5),
             helper.make_node("Conv", ["h2", "w3"], ["y"])]
    quantized_static(name, nodes, [init("w1", w1), init("w2", w2), init("w3", w3)], activation_type, opset=14)


def quantized_static(name, nodes, inits, activation_type, opset=13):
    """Writes case name: the float graph of nodes quantized by ORT's
    quantize_static (QDQ, int8 per-channel weights), its last
    DequantizeLinear's scale set to 1."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    graph = helper.make_graph(nodes, name, [tensor_vi("x", F, [1, 3, 16, 16])], [tensor_vi("y", F, ["n", "c", "h", "w"])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    xs = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(5)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": x} for x in xs[:4]])

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, activation_type=activation_type,
                        weight_type=QuantType.QInt8, per_channel=True)
        q = onnx.load(dst)
    last = [n for n in q.graph.node if n.output[0] == "y"][0]
    assert last.op_type == "DequantizeLinear", last.op_type
    for t in q.graph.initializer:
        if t.name == last.input[1]:
            t.CopyFrom(init(t.name, np.float32(1)))
    case(name, list(q.graph.node), [tensor_vi("x", F, [1, 3, 16, 16])], [tensor_vi("y", F, ["n", "c", "h", "w"])], [xs[4]],
         opset=opset, inits=list(q.graph.initializer))


if __name__ == "__main__":
    for d in os.listdir(ROOT):
        if d.startswith("qconv_"):
            shutil.rmtree(os.path.join(ROOT, d))
    qlinear("qconv_u8_per_channel_bias_pad1", (1, 8, 10, 10), (16, 8, 3, 3))
    qlinear("qconv_u8_batch2_stride2_per_tensor", (2, 4, 9, 9), (8, 4, 3, 3), strides=(2, 2), per_channel=False, bias=False)
    qlinear("qconv_u8_depthwise_stride2", (1, 8, 12, 12), (8, 1, 3, 3), group=8, strides=(2, 2))
    qlinear("qconv_u8_groups2_dilation2", (1, 8, 11, 11), (6, 4, 3, 3), group=2, pads=(2, 2, 2, 2), dilations=(2, 2))
    qlinear("qconv_s8_input_and_output", (1, 8, 7, 7), (16, 8, 1, 1), signed=True, pads=(0, 0, 0, 0), x_zp=-5, y_zp=10)
    qlinear("qconv_u8_zero_points_0", (1, 8, 8, 8), (16, 8, 3, 3), x_zp=0, y_zp=0)
    qlinear("qconv_u8_asymmetric_pads_stays_xla", (1, 4, 8, 8), (8, 4, 3, 3), pads=(0, 1, 1, 0))
    qdq_quantize_static("qconv_qdq_quantize_static")
    qdq_tables("qconv_qdq_tables_u8", QuantType.QUInt8)
    qdq_tables("qconv_qdq_tables_s8", QuantType.QInt8)
