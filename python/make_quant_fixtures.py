"""Fixtures for xserve's quantized-ONNX and com.microsoft operator tests.

Writes small single-operator ONNX graphs (built with onnx.helper) for the
standard (De)QuantizeLinear family and ONNX Runtime's contrib operators,
with ONNX Runtime's outputs as the reference, in the ONNX backend test
layout: <out>/<case>/model.onnx and test_data_set_0/{input,output}_<i>.pb.

    python python/make_quant_fixtures.py --out importer/onnx/testdata/quant

--models also writes whole models (a CNN and a BERT-like encoder from
testdata/zoo) quantized by onnxruntime.quantization (QDQ, QOperator,
dynamic) and fused by onnxruntime.transformers.optimizer.

Pinned: onnx 1.19.1, onnxruntime 1.23.2, numpy 2.2.6 (.venv-zoo,
python/requirements-zoo.txt). Every reference is computed by ONNX Runtime
on its CPU execution provider with graph optimizations disabled, so each
operator runs as written.
"""

import argparse
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

MS = "com.microsoft"
RNG = np.random.default_rng(20261125)


def f32(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def ints(dtype, *shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return RNG.integers(lo, hi + 1, size=shape).astype(dtype)


NP2ONNX = {
    np.float32: TP.FLOAT, np.float16: TP.FLOAT16, np.int8: TP.INT8, np.uint8: TP.UINT8,
    np.int16: TP.INT16, np.uint16: TP.UINT16, np.int32: TP.INT32, np.int64: TP.INT64,
}


def elem(a):
    return NP2ONNX[a.dtype.type]


class Case:
    """One single-node case: inputs fed at run time, consts as initializers."""

    def __init__(self, name, op, inputs, consts=None, outputs=1, domain="", opset=21, order=None, ref=None, out_codes=None, nodes=None, **attrs):
        self.name, self.op, self.domain, self.opset = name, op, domain, opset
        # nodes: the graph's nodes, where a case is a short chain of
        # operators rather than op alone.
        self.nodes = nodes
        # ref: standard-operator nodes computing the same, for operators
        # ONNX Runtime's CPU provider has no kernel for (CUDA-only ones):
        # ONNX Runtime runs those instead to make the reference.
        self.ref = ref
        # out_codes: TensorProto types to write the outputs as, where ONNX
        # Runtime's Python API returns a wider type (4-bit results as int8).
        self.out_codes = out_codes or {}
        # (name, array) pairs; name "" marks an omitted optional input.
        self.inputs = [(n, None if a is None else np.asarray(a)) for n, a in inputs]
        self.consts = consts or {}
        self.outputs = outputs if isinstance(outputs, list) else [f"y{i}" for i in range(outputs)]
        self.order = order
        self.attrs = attrs

    def model(self, ref=False):
        names = self.order or [n for n, _ in self.inputs]
        nodes = self.ref if ref else self.nodes or [helper.make_node(self.op, names, self.outputs, domain=self.domain, **self.attrs)]
        ins = [helper.make_tensor_value_info(n, elem(a), a.shape) for n, a in self.inputs if n]
        inits = [a if isinstance(a, onnx.TensorProto) else numpy_helper.from_array(a, n) for n, a in self.consts.items()]
        outs = [onnx.ValueInfoProto(name=o) for o in self.outputs if o]
        g = helper.make_graph(nodes, self.name, ins, outs, inits)
        opsets = [helper.make_opsetid("", self.opset)]
        if self.domain == MS:
            opsets.append(helper.make_opsetid(MS, 1))
        return helper.make_model(g, opset_imports=opsets, ir_version=10)


def save(out, name, model, feeds, ref=None, out_codes=None):
    """Writes model and ONNX Runtime's outputs for feeds (of ref instead,
    when given: an equivalent graph of standard operators); out_codes maps
    output names to the TensorProto type to write them as."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # One intra-op thread: DynamicQuantizeLSTM quantizes its hidden state in
    # one group per thread, so its references depend on the thread count.
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession((ref or model).SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(model, os.path.join(d, "model.onnx"))
    for i, inp in enumerate(sess.get_inputs()):
        t = numpy_helper.from_array(np.asarray(feeds[inp.name]), inp.name)
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    for i, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
        t = numpy_helper.from_array(np.asarray(v), o.name)
        if out_codes and o.name in out_codes:
            v = np.asarray(v)
            t = helper.make_tensor(o.name, out_codes[o.name], v.shape, v.flatten().tolist())
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())


def op_cases():
    """The single-operator cases."""
    cs = []
    x = f32(2, 3, 4, 5, lo=-30, hi=30)
    # QuantizeLinear: halves exactly on .5 to check round half to even.
    halves = (np.arange(-12, 12, dtype=np.float32) * 0.25).reshape(4, 6)
    s = np.float32(0.5)
    for ver in (10, 13, 19, 21):
        cs.append(Case(f"quantizelinear_u8_v{ver}", "QuantizeLinear", [("x", x), ("s", np.float32(0.2)), ("z", np.uint8(128))], opset=ver))
    cs.append(Case("quantizelinear_i8_halves", "QuantizeLinear", [("x", halves), ("s", s), ("z", np.int8(-3))], opset=13))
    cs.append(Case("quantizelinear_noz", "QuantizeLinear", [("x", x), ("s", np.float32(0.3))], opset=13))
    cs.append(Case("quantizelinear_i16", "QuantizeLinear", [("x", x * 100), ("s", np.float32(0.01)), ("z", np.int16(7))], opset=21))
    cs.append(Case("quantizelinear_u16", "QuantizeLinear", [("x", x * 100), ("s", np.float32(0.02)), ("z", np.uint16(30000))], opset=21))
    cs.append(Case("quantizelinear_outdtype_i8", "QuantizeLinear", [("x", x), ("s", np.float32(0.1))], opset=21, output_dtype=TP.INT8))
    cs.append(Case("quantizelinear_axis1", "QuantizeLinear", [("x", x), ("s", f32(3, lo=0.05, hi=0.5)), ("z", ints(np.int8, 3, lo=-10, hi=10))], opset=13, axis=1))
    cs.append(Case("quantizelinear_axisneg", "QuantizeLinear", [("x", x), ("s", f32(5, lo=0.05, hi=0.5)), ("z", ints(np.uint8, 5, lo=100, hi=150))], opset=19, axis=-1))
    cs.append(Case("quantizelinear_blocked", "QuantizeLinear", [("x", x), ("s", f32(2, 3, 2, 5, lo=0.05, hi=0.5)), ("z", ints(np.int8, 2, 3, 2, 5, lo=-5, hi=5))], opset=21, axis=2, block_size=2))
    cs.append(Case("quantizelinear_blocked_ragged", "QuantizeLinear", [("x", x), ("s", f32(2, 3, 4, 2, lo=0.05, hi=0.5)), ("z", ints(np.uint8, 2, 3, 4, 2, lo=120, hi=130))], opset=21, axis=3, block_size=3))
    # 4-bit types: INT4/UINT4 initializers (packed two a byte by onnx.helper).
    def t4(name, code, vals, raw=False):
        vals = np.asarray(vals)
        if raw:  # raw_data, two nibbles a byte, the first low
            nib = (vals.flatten().astype(np.int64) & 0xF).astype(np.uint8)
            nib = np.append(nib, np.uint8(0)) if nib.size % 2 else nib
            return helper.make_tensor(name, code, vals.shape, (nib[0::2] | (nib[1::2] << 4)).tobytes(), raw=True)
        return helper.make_tensor(name, code, vals.shape, vals.flatten().tolist())
    x46 = f32(4, 6, lo=-3, hi=3)
    cs.append(Case("dequantizelinear_int4_blocked", "DequantizeLinear", [("s", f32(4, 3, lo=0.1, hi=0.5))], opset=21, axis=1, block_size=2, order=["x", "s", "z"],
                   consts={"x": t4("x", TP.INT4, ints(np.int8, 4, 6, lo=-8, hi=7), raw=True), "z": t4("z", TP.INT4, ints(np.int8, 4, 3, lo=-2, hi=2))}))
    cs.append(Case("dequantizelinear_uint4_axis0", "DequantizeLinear", [("s", f32(3, lo=0.1, hi=0.5))], opset=21, axis=0, order=["x", "s", "z"],
                   consts={"x": t4("x", TP.UINT4, ints(np.uint8, 3, 5, lo=0, hi=15), raw=True), "z": t4("z", TP.UINT4, np.array([7, 8, 0], np.uint8))}))
    # ONNX Runtime's Python API returns no 4-bit arrays: its reference casts
    # the 4-bit result to 8 bits, written back as the 4-bit type.
    cs.append(Case("quantizelinear_int4", "QuantizeLinear", [("x", x46), ("s", np.float32(0.3))], opset=21, order=["x", "s", "z"],
                   consts={"z": t4("z", TP.INT4, np.array(1, np.int8))}, out_codes={"y0": TP.INT4},
                   ref=[helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]), helper.make_node("Cast", ["q"], ["y0"], to=TP.INT8)]))
    cs.append(Case("quantizelinear_uint4_outdtype", "QuantizeLinear", [("x", x46), ("s", np.float32(0.25))], opset=21, output_dtype=TP.UINT4, out_codes={"y0": TP.UINT4},
                   ref=[helper.make_node("QuantizeLinear", ["x", "s"], ["q"], output_dtype=TP.UINT4), helper.make_node("Cast", ["q"], ["y0"], to=TP.UINT8)]))
    q8 = ints(np.int8, 2, 3, 4, 5)
    qu8 = ints(np.uint8, 2, 3, 4, 5)
    for ver in (10, 13, 21):
        cs.append(Case(f"dequantizelinear_u8_v{ver}", "DequantizeLinear", [("x", qu8), ("s", np.float32(0.2)), ("z", np.uint8(128))], opset=ver))
    cs.append(Case("dequantizelinear_i8_noz", "DequantizeLinear", [("x", q8), ("s", np.float32(0.07))], opset=13))
    cs.append(Case("dequantizelinear_i32", "DequantizeLinear", [("x", ints(np.int32, 2, 3, lo=-100000, hi=100000)), ("s", np.float32(0.001))], opset=13))
    cs.append(Case("dequantizelinear_i16", "DequantizeLinear", [("x", ints(np.int16, 2, 3, 4)), ("s", np.float32(0.001)), ("z", np.int16(-40))], opset=21))
    cs.append(Case("dequantizelinear_u16", "DequantizeLinear", [("x", ints(np.uint16, 2, 3, 4)), ("s", np.float32(0.001)), ("z", np.uint16(1000))], opset=21))
    cs.append(Case("dequantizelinear_axis0", "DequantizeLinear", [("x", q8), ("s", f32(2, lo=0.01, hi=0.1)), ("z", ints(np.int8, 2, lo=-3, hi=3))], opset=13, axis=0))
    cs.append(Case("dequantizelinear_blocked", "DequantizeLinear", [("x", qu8), ("s", f32(2, 3, 4, 3, lo=0.01, hi=0.1)), ("z", ints(np.uint8, 2, 3, 4, 3, lo=100, hi=150))], opset=21, axis=-1, block_size=2))
    cs.append(Case("dequantizelinear_f16", "DequantizeLinear", [("x", q8), ("s", np.float16(0.05)), ("z", np.int8(2))], opset=19))
    cs.append(Case("dynamicquantizelinear", "DynamicQuantizeLinear", [("x", x)], outputs=3, opset=11))
    cs.append(Case("dynamicquantizelinear_pos", "DynamicQuantizeLinear", [("x", f32(3, 7, lo=0.5, hi=9))], outputs=3, opset=11))
    cs.append(Case("dynamicquantizelinear_neg", "DynamicQuantizeLinear", [("x", f32(3, 7, lo=-9, hi=-0.5))], outputs=3, opset=11))
    cs.append(Case("dynamicquantizelinear_zeros", "DynamicQuantizeLinear", [("x", np.zeros((2, 3), np.float32))], outputs=3, opset=11))

    # Integer matmul / conv.
    a8, b8 = ints(np.uint8, 2, 4, 6), ints(np.int8, 6, 5)
    cs.append(Case("matmulinteger_u8i8", "MatMulInteger", [("a", a8), ("b", b8), ("az", np.uint8(120)), ("bz", np.int8(3))], opset=10))
    cs.append(Case("matmulinteger_perrow", "MatMulInteger", [("a", ints(np.uint8, 4, 6)), ("b", b8), ("", None), ("bz", ints(np.int8, 5, lo=-4, hi=4))], opset=10, order=["a", "b", "", "bz"]))
    xc, wc = ints(np.uint8, 1, 3, 7, 7), ints(np.int8, 4, 3, 3, 3)
    cs.append(Case("convinteger", "ConvInteger", [("x", xc), ("w", ints(np.uint8, 4, 3, 3, 3)), ("xz", np.uint8(100)), ("wz", np.uint8(120))], opset=10, pads=[1, 1, 1, 1]))
    ql = [("x", xc), ("xs", np.float32(0.02)), ("xz", np.uint8(100)), ("w", wc), ("ws", f32(4, lo=0.005, hi=0.02)), ("wz", np.zeros(4, np.int8)),
          ("ys", np.float32(0.15)), ("yz", np.uint8(90)), ("b", ints(np.int32, 4, lo=-500, hi=500))]
    cs.append(Case("qlinearconv_perchannel_bias", "QLinearConv", ql, opset=10, pads=[1, 1, 1, 1], strides=[2, 2]))
    cs.append(Case("qlinearconv_s8", "QLinearConv", [("x", ints(np.int8, 1, 4, 6, 6)), ("xs", np.float32(0.03)), ("xz", np.int8(-5)), ("w", ints(np.int8, 4, 2, 3, 3)),
                                                    ("ws", np.float32(0.01)), ("wz", np.int8(0)), ("ys", np.float32(0.2)), ("yz", np.int8(4))], opset=10, group=2))
    cs.append(Case("qlinearmatmul_u8", "QLinearMatMul", [("a", a8), ("as", np.float32(0.03)), ("az", np.uint8(120)), ("b", ints(np.uint8, 6, 5)), ("bs", np.float32(0.02)),
                                                       ("bz", np.uint8(128)), ("ys", np.float32(0.05)), ("yz", np.uint8(100))], opset=10))
    cs.append(Case("qlinearmatmul_s8_percol", "QLinearMatMul", [("a", ints(np.int8, 3, 6)), ("as", np.float32(0.03)), ("az", np.int8(1)), ("b", b8), ("bs", f32(5, lo=0.01, hi=0.03)),
                                                               ("bz", np.zeros(5, np.int8)), ("ys", np.float32(0.4)), ("yz", np.int8(-2))], opset=21))

    # com.microsoft quantized operators.
    def qparams(dt, pre):
        if dt == np.uint8:
            return [(pre + "s", np.float32(RNG.uniform(0.01, 0.05))), (pre + "z", np.uint8(RNG.integers(100, 150)))]
        return [(pre + "s", np.float32(RNG.uniform(0.01, 0.05))), (pre + "z", np.int8(RNG.integers(-20, 20)))]
    for dt, tag in ((np.uint8, "u8"), (np.int8, "s8")):
        A, B = ints(dt, 2, 3, 4), ints(dt, 2, 3, 4)
        Bb = ints(dt, 4)
        for op in ("QLinearAdd", "QLinearMul"):
            cs.append(Case(f"{op.lower()}_{tag}", op, [("a", A)] + qparams(dt, "a") + [("b", B)] + qparams(dt, "b") + qparams(dt, "c"), domain=MS))
            cs.append(Case(f"{op.lower()}_{tag}_bcast", op, [("a", A)] + qparams(dt, "a") + [("b", Bb)] + qparams(dt, "b") + qparams(dt, "c"), domain=MS))
        for op, attrs in (("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})):
            cs.append(Case(f"{op.lower()}_{tag}", op, [("x", ints(dt, 2, 3, 4))] + qparams(dt, "x") + [("ys", np.float32(1 / 256 if op == "QLinearSigmoid" else 0.03)), ("yz", dt(0 if op == "QLinearSigmoid" else 10))], domain=MS, **attrs))
        X4 = ints(dt, 1, 3, 6, 6)
        cs.append(Case(f"qlinearaveragepool_{tag}", "QLinearAveragePool", [("x", X4)] + qparams(dt, "x") + qparams(dt, "y"), domain=MS, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
        cs.append(Case(f"qlinearaveragepool_{tag}_cip", "QLinearAveragePool", [("x", X4)] + qparams(dt, "x") + qparams(dt, "y"), domain=MS, kernel_shape=[2, 2], pads=[1, 1, 0, 0], count_include_pad=1))
        cs.append(Case(f"qlinearaveragepool_{tag}_nhwc", "QLinearAveragePool", [("x", ints(dt, 1, 6, 6, 3))] + qparams(dt, "x") + qparams(dt, "y"), domain=MS, kernel_shape=[2, 2], channels_last=1))
        cs.append(Case(f"qlinearglobalaveragepool_{tag}", "QLinearGlobalAveragePool", [("x", X4)] + qparams(dt, "x") + qparams(dt, "y"), domain=MS))
        cs.append(Case(f"qlinearglobalaveragepool_{tag}_nhwc", "QLinearGlobalAveragePool", [("x", ints(dt, 2, 5, 5, 4))] + qparams(dt, "x") + qparams(dt, "y"), domain=MS, channels_last=1))
        cs.append(Case(f"qlinearconcat_{tag}", "QLinearConcat", qparams(dt, "y") + [("x1", ints(dt, 2, 3))] + qparams(dt, "x1") + [("x2", ints(dt, 2, 4))] + qparams(dt, "x2"), domain=MS, axis=1))
    A = ints(np.uint8, 3, 6)
    for name, bq, extra, attrs in (
        ("qgemm_u8s8_float", ints(np.int8, 6, 5), [], {}),
        ("qgemm_u8s8_bias_float", ints(np.int8, 6, 5), [("c", ints(np.int32, 5, lo=-300, hi=300))], {"alpha": 0.5}),
        ("qgemm_u8s8_quant", ints(np.int8, 5, 6), [("c", ints(np.int32, 5, lo=-300, hi=300)), ("ys", np.float32(0.3)), ("yz", np.uint8(110))], {"transB": 1}),
        ("qgemm_u8s8_quant_perchan", ints(np.int8, 5, 6), [("c", ints(np.int32, 5, lo=-300, hi=300)), ("ys", np.float32(0.3)), ("yz", np.uint8(110))], {"transB": 1, "_perchan": True}),
    ):
        bs = f32(5, lo=0.005, hi=0.02) if attrs.pop("_perchan", False) else np.float32(0.01)
        bz = np.zeros(5, np.int8) if np.ndim(bs) else np.int8(0)
        cs.append(Case(name, "QGemm", [("a", A), ("as", np.float32(0.02)), ("az", np.uint8(128)), ("b", bq), ("bs", bs), ("bz", bz)] + extra, domain=MS, **attrs))
    Af = f32(2, 3, 6)
    cs.append(Case("dynamicquantizematmul_s8", "DynamicQuantizeMatMul", [("a", Af), ("b", ints(np.int8, 6, 5)), ("bs", np.float32(0.02)), ("bz", np.int8(0)), ("bias", f32(5))], domain=MS))
    cs.append(Case("dynamicquantizematmul_u8_percol", "DynamicQuantizeMatMul", [("a", Af), ("b", ints(np.uint8, 6, 5)), ("bs", f32(5, lo=0.01, hi=0.03)), ("bz", ints(np.uint8, 5, lo=120, hi=130))], domain=MS))
    cs.append(Case("matmulintegertofloat", "MatMulIntegerToFloat", [("a", ints(np.uint8, 2, 3, 6)), ("b", ints(np.int8, 6, 5)), ("as", np.float32(0.02)), ("bs", f32(5, lo=0.01, hi=0.03)),
                                                                   ("az", np.uint8(128)), ("bz", np.zeros(5, np.int8)), ("bias", f32(5))], domain=MS))
    # DynamicQuantizeLSTM: seq 4, batch 2, input 5, hidden 3.
    for name, dirs, perchan, extra in (("forward", 1, False, {}), ("bidirectional_perchannel", 2, True, {}), ("reverse_peephole", 1, False, {"P": True})):
        ws = f32(dirs, 12, lo=0.01, hi=0.05) if perchan else f32(dirs, lo=0.01, hi=0.05)
        rs = f32(dirs, 12, lo=0.01, hi=0.05) if perchan else f32(dirs, lo=0.01, hi=0.05)
        wz = np.zeros(ws.shape, np.int8)
        rz = np.zeros(rs.shape, np.int8)
        ins = [("x", f32(4, 2, 5)), ("w", ints(np.int8, dirs, 5, 12)), ("r", ints(np.int8, dirs, 3, 12)), ("b", f32(dirs, 24, lo=-0.5, hi=0.5)), ("", None),
               ("h0", f32(dirs, 2, 3, lo=-0.5, hi=0.5)), ("c0", f32(dirs, 2, 3, lo=-0.5, hi=0.5)), ("p", f32(dirs, 9, lo=-0.5, hi=0.5)) if extra.get("P") else ("", None),
               ("ws", ws), ("wz", wz), ("rs", rs), ("rz", rz)]
        direction = {"forward": "forward", "bidirectional_perchannel": "bidirectional", "reverse_peephole": "reverse"}[name]
        cs.append(Case(f"dynamicquantizelstm_{name}", "DynamicQuantizeLSTM", ins, order=[n for n, _ in ins], outputs=["y", "yh", "yc"], domain=MS,
                       hidden_size=3, direction=direction))
    # Batch 3 (ONNX Runtime quantizes the whole [batch, hidden] state at each
    # step) with sequence_lens.
    ins = [("x", f32(6, 3, 5)), ("w", ints(np.int8, 2, 5, 12)), ("r", ints(np.int8, 2, 3, 12)), ("b", f32(2, 24, lo=-0.5, hi=0.5)),
           ("lens", np.array([6, 2, 4], np.int32)), ("h0", f32(2, 3, 3, lo=-0.5, hi=0.5)), ("c0", f32(2, 3, 3, lo=-0.5, hi=0.5)), ("", None),
           ("ws", f32(2, lo=0.01, hi=0.05)), ("wz", np.zeros(2, np.int8)), ("rs", f32(2, lo=0.01, hi=0.05)), ("rz", np.zeros(2, np.int8))]
    cs.append(Case("dynamicquantizelstm_batch3_seqlens", "DynamicQuantizeLSTM", ins, order=[n for n, _ in ins], outputs=["y", "yh", "yc"], domain=MS,
                   hidden_size=3, direction="bidirectional"))

    # MatMulNBits: K 40 (3 blocks of 16, the last partly padding), N 6.
    An = f32(2, 3, 40)
    B4, B8 = ints(np.uint8, 6, 3, 8), ints(np.uint8, 6, 3, 16)
    sc = f32(18, lo=0.01, hi=0.1)
    nb = dict(domain=MS, K=40, N=6, block_size=16)
    cs.append(Case("matmulnbits_4bit_zp_bias", "MatMulNBits", [("a", An), ("bias", f32(6))], order=["a", "b", "s", "z", "", "bias"],
                   consts={"b": B4, "s": sc, "z": ints(np.uint8, 12)}, bits=4, **nb))
    cs.append(Case("matmulnbits_4bit_default_zp", "MatMulNBits", [("a", An), ("b", B4), ("s", sc)], bits=4, **nb))
    cs.append(Case("matmulnbits_4bit_float_zp", "MatMulNBits", [("a", An)], order=["a", "b", "s", "z"], consts={"b": B4, "s": sc, "z": f32(18, lo=5, hi=10)}, bits=4, **nb))
    cs.append(Case("matmulnbits_8bit", "MatMulNBits", [("a", An)], order=["a", "b", "s", "z"], consts={"b": B8, "s": sc, "z": ints(np.uint8, 18)}, bits=8, **nb))

    # com.microsoft fused / transformer operators.
    X = f32(1, 3, 6, 6)
    W = f32(4, 3, 3, 3, lo=-0.5, hi=0.5)
    Bc = f32(4)
    cs.append(Case("fusedconv_relu", "FusedConv", [("x", X), ("w", W), ("b", Bc)], domain=MS, activation="Relu", pads=[1, 1, 1, 1]))
    cs.append(Case("fusedconv_sum_leaky", "FusedConv", [("x", X), ("w", W), ("b", Bc), ("z", f32(1, 4, 4, 4))], domain=MS, activation="LeakyRelu", activation_params=[0.2]))
    cs.append(Case("fusedconv_clip", "FusedConv", [("x", X), ("w", W)], domain=MS, activation="Clip", activation_params=[-0.5, 0.7], strides=[2, 2]))
    cs.append(Case("fusedconv_hardsigmoid", "FusedConv", [("x", X), ("w", W)], domain=MS, activation="HardSigmoid", activation_params=[0.3, 0.4]))
    cs.append(Case("fusedgemm_relu", "FusedGemm", [("a", f32(3, 6)), ("b", f32(5, 6)), ("c", f32(5))], domain=MS, activation="Relu", transB=1, alpha=0.7, beta=1.5))
    cs.append(Case("fusedgemm_leaky", "FusedGemm", [("a", f32(6, 3)), ("b", f32(6, 5))], domain=MS, activation="LeakyRelu", activation_alpha=0.3, transA=1))
    cs.append(Case("fusedmatmul", "FusedMatMul", [("a", f32(2, 3, 4)), ("b", f32(2, 4, 5))], domain=MS, alpha=0.5))
    cs.append(Case("fusedmatmul_trans", "FusedMatMul", [("a", f32(2, 4, 3)), ("b", f32(2, 5, 4))], domain=MS, transA=1, transB=1))
    cs.append(Case("fusedmatmul_transbatch", "FusedMatMul", [("a", f32(3, 2, 4)), ("b", f32(2, 4, 5))], domain=MS, transBatchA=1))
    # NhwcConv and BiasAdd have CUDA kernels only: ONNX Runtime runs the
    # standard operators they stand for.
    cs.append(Case("nhwcconv", "NhwcConv", [("x", f32(1, 6, 6, 3)), ("w", f32(4, 3, 3, 3, lo=-0.5, hi=0.5)), ("b", f32(4))], domain=MS, pads=[1, 1, 1, 1], strides=[2, 1],
                   ref=[helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]), helper.make_node("Transpose", ["w"], ["wt"], perm=[0, 3, 1, 2]),
                        helper.make_node("Conv", ["xt", "wt", "b"], ["yt"], pads=[1, 1, 1, 1], strides=[2, 1]), helper.make_node("Transpose", ["yt"], ["y0"], perm=[0, 2, 3, 1])]))
    cs.append(Case("nhwcconv_group_nobias", "NhwcConv", [("x", f32(2, 5, 5, 4)), ("w", f32(6, 2, 2, 2, lo=-0.5, hi=0.5))], domain=MS, group=2,
                   ref=[helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]), helper.make_node("Transpose", ["w"], ["wt"], perm=[0, 3, 1, 2]),
                        helper.make_node("Conv", ["xt", "wt"], ["yt"], group=2), helper.make_node("Transpose", ["yt"], ["y0"], perm=[0, 2, 3, 1])]))
    cs.append(Case("biasadd", "BiasAdd", [("x", f32(2, 3, 8)), ("b", f32(8)), ("s", f32(2, 3, 8))], domain=MS,
                   ref=[helper.make_node("Add", ["x", "b"], ["xb"]), helper.make_node("Add", ["xb", "s"], ["y0"])]))
    H = f32(2, 3, 8)
    cs.append(Case("gelu", "Gelu", [("x", H)], domain=MS))
    cs.append(Case("fastgelu", "FastGelu", [("x", H)], domain=MS))
    cs.append(Case("fastgelu_bias", "FastGelu", [("x", H), ("b", f32(8))], domain=MS))
    cs.append(Case("biasgelu", "BiasGelu", [("x", H), ("b", f32(8))], domain=MS))
    cs.append(Case("quickgelu", "QuickGelu", [("x", H)], domain=MS))
    cs.append(Case("quickgelu_alpha", "QuickGelu", [("x", H)], domain=MS, alpha=1.5))
    g, be, bi = f32(8), f32(8), f32(8)
    cs.append(Case("skiplayernorm", "SkipLayerNormalization", [("x", H), ("s", f32(2, 3, 8)), ("g", g), ("be", be)], domain=MS, epsilon=1e-5))
    cs.append(Case("skiplayernorm_bias_outs", "SkipLayerNormalization", [("x", H), ("s", f32(2, 3, 8)), ("g", g), ("be", be), ("bi", bi)], outputs=["y", "", "", "sum"], domain=MS))
    cs.append(Case("skiplayernorm_nobeta", "SkipLayerNormalization", [("x", H), ("s", f32(2, 3, 8)), ("g", g)], domain=MS))
    cs.append(Case("skipsimplifiedlayernorm", "SkipSimplifiedLayerNormalization", [("x", H), ("s", f32(2, 3, 8)), ("g", g)], domain=MS, epsilon=1e-6))
    cs.append(Case("skipsimplifiedlayernorm_bias_sum", "SkipSimplifiedLayerNormalization", [("x", H), ("s", f32(2, 3, 8)), ("g", g), ("bi", bi)], outputs=["y", "", "", "sum"], domain=MS))
    cs.append(Case("layernorm_opset14", "LayerNormalization", [("x", H), ("g", g), ("be", be)], opset=14, epsilon=1e-6))
    cs.append(Case("simplifiedlayernorm", "SimplifiedLayerNormalization", [("x", H), ("g", g)], domain="", opset=17, epsilon=1e-6))
    ids = np.array([[1, 4, 2, 9, 0], [3, 3, 7, 1, 5]], np.int32)
    seg = np.array([[0, 0, 1, 1, 1], [0, 1, 1, 1, 0]], np.int32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    emb = [("we", f32(10, 8)), ("pe", f32(6, 8)), ("se", f32(2, 8)), ("g", g), ("be", be)]
    cs.append(Case("embedlayernorm", "EmbedLayerNormalization", [("ids", ids), ("seg", seg)] + emb + [("mask", mask)], outputs=["y", "mask_index"], domain=MS))
    cs.append(Case("embedlayernorm_sum_noseg", "EmbedLayerNormalization", [("ids", ids), ("", None), ("we", emb[0][1]), ("pe", emb[1][1]), ("", None), ("g", g), ("be", be)],
                   order=["ids", "", "we", "pe", "", "g", "be"], outputs=["y", "mask_index", "sum"], domain=MS, epsilon=1e-5))
    # Attention: hidden 8, 2 heads.
    xa, wa, ba = f32(2, 5, 8), f32(8, 24, lo=-0.6, hi=0.6), f32(24)
    cs.append(Case("attention", "Attention", [("x", xa), ("w", wa), ("b", ba)], domain=MS, num_heads=2))
    cs.append(Case("attention_rawmask", "Attention", [("x", xa), ("w", wa), ("b", ba), ("m", mask)], domain=MS, num_heads=2))
    cs.append(Case("attention_maskindex", "Attention", [("x", xa), ("w", wa), ("b", ba), ("m", np.array([3, 5], np.int32))], domain=MS, num_heads=2))
    cs.append(Case("attention_causal_present", "Attention", [("x", xa), ("w", wa), ("b", ba)], outputs=["y", "present"], domain=MS, num_heads=2, unidirectional=1))
    cs.append(Case("attention_mask3d_scale", "Attention", [("x", xa), ("w", wa), ("b", ba), ("m", ints(np.int32, 2, 5, 5, lo=0, hi=1) | np.eye(5, dtype=np.int32))], domain=MS, num_heads=4, scale=0.3))
    cs.append(Case("attention_bias", "Attention", [("x", xa), ("w", wa), ("b", ba), ("", None), ("", None), ("ab", f32(1, 2, 5, 5))], order=["x", "w", "b", "", "", "ab"], domain=MS, num_heads=2))
    cs.append(Case("attention_qkvsizes", "Attention", [("x", xa), ("w", f32(8, 20, lo=-0.6, hi=0.6)), ("b", f32(20))], domain=MS, num_heads=2, qkv_hidden_sizes=[6, 6, 8]))
    cs.append(Case("qattention_rawmask_percol", "QAttention", [("x", ints(np.uint8, 2, 5, 8)), ("w", ints(np.int8, 8, 24)), ("b", ba), ("xs", np.float32(0.02)), ("ws", f32(24, lo=0.002, hi=0.01)),
                                                            ("m", mask), ("xz", np.uint8(128)), ("wz", np.zeros(24, np.int8))], domain=MS, num_heads=2))
    cs.append(Case("qattention_maskindex", "QAttention", [("x", ints(np.uint8, 2, 5, 8)), ("w", ints(np.uint8, 8, 24)), ("b", ba), ("xs", np.float32(0.02)), ("ws", np.float32(0.005)),
                                                         ("m", np.array([3, 5], np.int32)), ("xz", np.uint8(120)), ("wz", np.uint8(128))], domain=MS, num_heads=4))
    q, k, v = f32(2, 4, 8), f32(2, 6, 8), f32(2, 6, 8)
    cs.append(Case("multiheadattention", "MultiHeadAttention", [("q", q), ("k", k), ("v", v)], domain=MS, num_heads=2))
    cs.append(Case("multiheadattention_bias_mask", "MultiHeadAttention", [("q", q), ("k", k), ("v", v), ("b", f32(24)), ("m", np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.int32))], domain=MS, num_heads=2))
    cs.append(Case("multiheadattention_causal_present", "MultiHeadAttention", [("q", f32(2, 6, 8)), ("k", k), ("v", v)], outputs=["y", "pk", "pv"], domain=MS, num_heads=4, unidirectional=1))
    # GroupQueryAttention: 4 query heads over 2 kv heads of size 8.
    gq, gk, gv = f32(2, 5, 32), f32(2, 5, 16), f32(2, 5, 16)
    cs.append(Case("groupqueryattention_prompt", "GroupQueryAttention", [("q", gq), ("k", gk), ("v", gv), ("", None), ("", None), ("sl", np.array([4, 4], np.int32)), ("tsl", np.array(5, np.int32))],
                   order=["q", "k", "v", "", "", "sl", "tsl"], outputs=["y", "pk", "pv"], domain=MS, num_heads=4, kv_num_heads=2))
    cs.append(Case("groupqueryattention_past", "GroupQueryAttention", [("q", f32(2, 1, 32)), ("k", f32(2, 1, 16)), ("v", f32(2, 1, 16)), ("pk", f32(2, 2, 5, 8)), ("pv", f32(2, 2, 5, 8)),
                                                                       ("sl", np.array([5, 5], np.int32)), ("tsl", np.array(6, np.int32))], outputs=["y", "pk_out", "pv_out"], domain=MS, num_heads=4, kv_num_heads=2))
    cs.append(Case("groupqueryattention_softcap_scale", "GroupQueryAttention", [("q", gq), ("k", gk), ("v", gv), ("", None), ("", None), ("sl", np.array([4, 4], np.int32)), ("tsl", np.array(5, np.int32))],
                   order=["q", "k", "v", "", "", "sl", "tsl"], outputs=["y", "pk", "pv"], domain=MS, num_heads=4, kv_num_heads=2, softcap=2.0, scale=0.4))
    # do_rotary needs head_size % 16 == 0 in ONNX Runtime: head size 16.
    ang = np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(8) / 8))
    gcos, gsin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    gsl, gtsl = np.array([4, 4], np.int32), np.array(5, np.int32)
    cs.append(Case("groupqueryattention_packed", "GroupQueryAttention", [("qkv", f32(2, 5, 64)), ("", None), ("", None), ("", None), ("", None), ("sl", gsl), ("tsl", gtsl)],
                   order=["qkv", "", "", "", "", "sl", "tsl"], outputs=["y", "pk", "pv"], domain=MS, num_heads=4, kv_num_heads=2))
    cs.append(Case("groupqueryattention_rotary", "GroupQueryAttention", [("q", f32(2, 5, 64)), ("k", f32(2, 5, 32)), ("v", f32(2, 5, 32)), ("", None), ("", None), ("sl", gsl), ("tsl", gtsl), ("cos", gcos), ("sin", gsin)],
                   order=["q", "k", "v", "", "", "sl", "tsl", "cos", "sin"], outputs=["y", "pk", "pv"], domain=MS, num_heads=4, kv_num_heads=2, do_rotary=1))
    cs.append(Case("groupqueryattention_rotary_interleaved_past", "GroupQueryAttention", [("q", f32(2, 1, 64)), ("k", f32(2, 1, 32)), ("v", f32(2, 1, 32)), ("pk", f32(2, 2, 5, 16)),
                                                                                          ("pv", f32(2, 2, 5, 16)), ("sl", np.array([5, 5], np.int32)), ("tsl", np.array(6, np.int32)), ("cos", gcos), ("sin", gsin)],
                   outputs=["y", "pk_out", "pv_out"], domain=MS, num_heads=4, kv_num_heads=2, do_rotary=1, rotary_interleaved=1))
    cs.append(Case("groupqueryattention_packed_rotary", "GroupQueryAttention", [("qkv", f32(2, 5, 128)), ("", None), ("", None), ("", None), ("", None), ("sl", gsl), ("tsl", gtsl), ("cos", gcos), ("sin", gsin)],
                   order=["qkv", "", "", "", "", "sl", "tsl", "cos", "sin"], outputs=["y", "pk", "pv"], domain=MS, num_heads=4, kv_num_heads=2, do_rotary=1))
    pos = np.array([[0, 1, 2, 3, 4], [2, 3, 4, 5, 6]], np.int64)
    cosc = np.cos(np.outer(np.arange(8), 1.0 / 10000 ** (np.arange(2) / 2))).astype(np.float32)
    sinc = np.sin(np.outer(np.arange(8), 1.0 / 10000 ** (np.arange(2) / 2))).astype(np.float32)
    cs.append(Case("rotaryembedding", "RotaryEmbedding", [("x", f32(2, 5, 8)), ("p", pos), ("c", cosc), ("s", sinc)], domain=MS, num_heads=2))
    cs.append(Case("rotaryembedding_interleaved", "RotaryEmbedding", [("x", f32(2, 5, 8)), ("p", pos), ("c", cosc), ("s", sinc)], domain=MS, num_heads=2, interleaved=1))
    cs.append(Case("rotaryembedding_partial_4d", "RotaryEmbedding", [("x", f32(2, 2, 5, 6)), ("p", pos), ("c", cosc), ("s", sinc)], domain=MS, rotary_embedding_dim=4, num_heads=2))
    cs.append(Case("rotaryembedding_offset", "RotaryEmbedding", [("x", f32(1, 5, 8)), ("p", np.array([2], np.int64)), ("c", cosc), ("s", sinc)], domain=MS, num_heads=2))
    # Values at (k + 0.5) * scale and one float32 step either side, within
    # a range whose (max - min) / 255 a multiplication by 1 / 255 rounds
    # differently: IEEE division (ONNX Runtime's) and multiplications by
    # reciprocals round about 40% of them to different integers. Its own
    # generator: the cases above keep their inputs.
    x0 = np.random.default_rng(7).uniform(-3, 5, 64).astype(np.float32)
    lo, hi = np.float32(min(0, x0.min())), np.float32(max(0, x0.max()))
    step = np.float64(np.float32(np.float32(hi - lo) / np.float32(255)))
    mid = ((np.arange(-95, 160) + 0.5) * step).astype(np.float32)
    xd = np.concatenate([[lo, hi], mid, np.nextafter(mid, np.float32(9)), np.nextafter(mid, np.float32(-9))]).astype(np.float32)
    cs.append(Case("dynamicquantizelinear_ieee", "DynamicQuantizeLinear", [("x", xd[(xd >= lo) & (xd <= hi)])], outputs=3, opset=11))
    # A past buffer longer than each sequence (a generation cache): seqlens_k
    # says how much of it is valid; the new entry goes right after. Last, so
    # that the cases above keep their random inputs.
    cs.append(Case("groupqueryattention_padded_past", "GroupQueryAttention", [("q", f32(2, 1, 64)), ("k", f32(2, 1, 32)), ("v", f32(2, 1, 32)), ("pk", f32(2, 2, 6, 16)),
                                                                               ("pv", f32(2, 2, 6, 16)), ("sl", np.array([2, 4], np.int32)), ("tsl", np.array(7, np.int32)), ("cos", gcos), ("sin", gsin)],
                   outputs=["y", "pk_out", "pv_out"], domain=MS, num_heads=4, kv_num_heads=2, do_rotary=1))
    cs.append(tanh_quant_case())
    cs.append(dequant_add_quant_case())
    return cs


def tanh_quant_case():
    """Tanh then DynamicQuantizeLinear (text2tashkeel's attention): ONNX
    Runtime's Tanh reaches ±1.0000002 (near ±8.3 to ±9), which sets the
    scale, and its last bits differ from tanh's. The inputs are the x in
    [8, 9] where it is largest, its negative, and the points of a dense
    grid whose quotient by ONNX Runtime's scale lies within 1e-4 of a
    rounding tie: there a last-bit difference moves the integer."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    g = helper.make_graph([helper.make_node("Tanh", ["x"], ["t"])], "tanh",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [None])], [helper.make_tensor_value_info("t", TP.FLOAT, [None])])
    tanh = ort.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString(), so)
    near = np.linspace(8, 9, 10001, dtype=np.float32)
    top = near[np.argmax(tanh.run(None, {"x": near})[0])]
    grid = np.linspace(-4, 4, 200001, dtype=np.float32)
    t = tanh.run(None, {"x": np.concatenate([grid, [-top, top]]).astype(np.float32)})[0]
    scale = np.float32(np.float32(t.max() - t.min()) / np.float32(255))
    q = (t[:-2] / scale).astype(np.float64)
    frac = q - np.floor(q)
    x = np.concatenate([[-top, top], grid[np.abs(frac - 0.5) < 1e-4]]).astype(np.float32)
    nodes = [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("DynamicQuantizeLinear", ["t"], ["y0", "y1", "y2"])]
    return Case("tanh_dynamicquantizelinear", "", [("x", x)], outputs=3, nodes=nodes)


def dequant_add_quant_case():
    """Two MatMulInteger results scaled to float, added, then
    DynamicQuantizeLinear (text2tashkeel's attention W h + U h): ONNX
    Runtime rounds each scaled product on its own; a fused multiply-add
    of one into the sum moves its last bit, and the integer where the
    quotient by the scale lies near a rounding tie. The inputs are the
    pairs of a random draw where the two roundings quantize differently,
    and the draw's extremes (which set the scale)."""
    rng = np.random.default_rng(28)
    n = 4000000
    a = rng.integers(-40000, 40000, n, dtype=np.int32)
    b = rng.integers(-40000, 40000, n, dtype=np.int32)
    sa, sb = np.float32(3.1e-5), np.float32(2.7e-5)
    pa, pb = (a.astype(np.float32) * sa).astype(np.float32), (b.astype(np.float32) * sb).astype(np.float32)
    sep = (pa + pb).astype(np.float32)
    fused = [(a.astype(np.float64) * np.float64(sa) + pb.astype(np.float64)).astype(np.float32),
             (b.astype(np.float64) * np.float64(sb) + pa.astype(np.float64)).astype(np.float32)]
    lo, hi = min(float(sep.min()), 0.0), max(float(sep.max()), 0.0)
    scale = np.float32(np.float32(hi - lo) / np.float32(255))
    zp = np.rint(np.clip(-np.float32(lo) / scale, 0, 255))
    q = lambda v: np.clip(np.rint(v / scale) + zp, 0, 255)
    pick = (q(sep) != q(fused[0])) | (q(sep) != q(fused[1]))
    idx = np.concatenate([[np.argmin(sep), np.argmax(sep)], np.nonzero(pick)[0]])
    nodes = [helper.make_node("Cast", ["a"], ["fa"], to=TP.FLOAT), helper.make_node("Cast", ["b"], ["fb"], to=TP.FLOAT),
             helper.make_node("Mul", ["fa", "sa"], ["ma"]), helper.make_node("Mul", ["fb", "sb"], ["mb"]),
             helper.make_node("Add", ["ma", "mb"], ["s"]), helper.make_node("DynamicQuantizeLinear", ["s"], ["y0", "y1", "y2"])]
    return Case("dequant_add_dynamicquantizelinear", "", [("a", a[idx]), ("b", b[idx])],
                consts={"sa": np.array(sa), "sb": np.array(sb)}, outputs=3, nodes=nodes)


# ---- Whole models through ONNX Runtime's quantizer and transformer optimizer.

def _tinybert_classes():
    """A 2-layer BERT-shaped encoder written the way Hugging Face's BERT
    (v4) computes, so onnxruntime.transformers.optimizer fuses its export
    into EmbedLayerNormalization, Attention, SkipLayerNormalization and
    BiasGelu (transformers 5's mask utilities defeat the attention fusion)."""
    import math

    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(s, h, heads, ff):
            super().__init__()
            s.h, s.n = h, heads
            s.q, s.k, s.v, s.o = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
            s.ln1, s.ln2 = nn.LayerNorm(h, eps=1e-12), nn.LayerNorm(h, eps=1e-12)
            s.f1, s.f2 = nn.Linear(h, ff), nn.Linear(ff, h)
        def split(s, x):
            b, t, _ = x.shape
            return x.view(b, t, s.n, s.h // s.n).permute(0, 2, 1, 3)
        def forward(s, x, ext):
            q, k, v = s.split(s.q(x)), s.split(s.k(x)), s.split(s.v(x))
            sc = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(s.h // s.n) + ext
            p = torch.softmax(sc, dim=-1)
            c = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous()
            c = c.view(c.shape[0], c.shape[1], s.h)
            x = s.ln1(s.o(c) + x)
            return s.ln2(s.f2(nn.functional.gelu(s.f1(x))) + x)

    class TinyBert(nn.Module):
        def __init__(s, vocab=100, h=32, heads=4, ff=64, layers=2, maxpos=32):
            super().__init__()
            s.we, s.pe, s.te = nn.Embedding(vocab, h), nn.Embedding(maxpos, h), nn.Embedding(2, h)
            s.ln = nn.LayerNorm(h, eps=1e-12)
            s.layers = nn.ModuleList([Layer(h, heads, ff) for _ in range(layers)])
            s.register_buffer("pos", torch.arange(maxpos).unsqueeze(0))
        def forward(s, ids, mask, tt):
            t = ids.shape[1]
            x = s.ln(s.we(ids) + s.pe(s.pos[:, :t]) + s.te(tt))
            ext = (1.0 - mask[:, None, None, :].to(torch.float32)) * -10000.0
            for l in s.layers:
                x = l(x, ext)
            return x

    return TinyBert


def export_tinybert(path):
    import torch

    torch.manual_seed(0)
    m = _tinybert_classes()().eval()
    ids = torch.randint(0, 100, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(m, (ids, mask, torch.zeros_like(mask)), path, input_names=names, output_names=["last_hidden_state"],
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in names}, opset_version=17, dynamo=False)


def bert_feeds():
    ids = RNG.integers(0, 100, size=(2, 7)).astype(np.int64)
    mask = np.array([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]], np.int64)
    tt = np.array([[0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1]], np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt}


class _Reader:
    """Calibration data for quantize_static: a few random images."""

    def __init__(self, name, shape, n=4):
        self.it = iter([{name: RNG.standard_normal(shape).astype(np.float32)} for _ in range(n)])

    def get_next(self):
        return next(self.it, None)


def model_cases(tmp, zoo):
    """(name, model path, feeds) of the whole-model cases."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from onnxruntime.transformers.optimizer import optimize_model

    out = []
    bert = os.path.join(tmp, "tinybert.onnx")
    export_tinybert(bert)
    fused = optimize_model(bert, model_type="bert", num_heads=4, hidden_size=32, opt_level=0)
    fused.save_model_to_file(os.path.join(tmp, "bert_fused.onnx"))
    out.append(("model_bert_fused", os.path.join(tmp, "bert_fused.onnx"), bert_feeds()))
    # Fused, then dynamically quantized (ONNX Runtime's recipe for BERT):
    # QEmbedLayerNormalization, QAttention, MatMulInteger.
    quantize_dynamic(os.path.join(tmp, "bert_fused.onnx"), os.path.join(tmp, "bert_fused_dynamic.onnx"), weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    out.append(("model_bert_fused_dynamic", os.path.join(tmp, "bert_fused_dynamic.onnx"), bert_feeds()))
    quantize_dynamic(bert, os.path.join(tmp, "bert_dynamic.onnx"), weight_type=QuantType.QInt8)
    out.append(("model_bert_dynamic", os.path.join(tmp, "bert_dynamic.onnx"), bert_feeds()))
    # ONNX Runtime's own rewrite of it: DynamicQuantizeLinear + MatMulInteger
    # + Mul become DynamicQuantizeMatMul / MatMulIntegerToFloat.
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = os.path.join(tmp, "model_bert_dynamic_ort_optimized.onnx")
    ort.InferenceSession(os.path.join(tmp, "bert_dynamic.onnx"), so, providers=["CPUExecutionProvider"])
    out.append(("model_bert_dynamic_ort_optimized", so.optimized_model_filepath, bert_feeds()))

    # The zoo's reduced resnet18 (torch.onnx dynamo export), without its
    # value_info, which the quantizer's shape inference trips over.
    m = onnx.load(os.path.join(zoo, "resnet18", "model.onnx"))
    del m.graph.value_info[:]
    cnn = os.path.join(tmp, "resnet18.onnx")
    # 4-bit weight-only quantization (MatMulNBitsQuantizer): QOperator gives
    # com.microsoft MatMulNBits, QDQ gives UINT4 blocked DequantizeLinear.
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    for name, fmt in (("model_bert_matmulnbits", QuantFormat.QOperator), ("model_bert_int4_qdq", QuantFormat.QDQ)):
        q = MatMulNBitsQuantizer(onnx.load(bert), algo_config=DefaultWeightOnlyQuantConfig(block_size=16, is_symmetric=False, quant_format=fmt))
        q.process()
        q.model.save_model_to_file(os.path.join(tmp, name + ".onnx"))
        out.append((name, os.path.join(tmp, name + ".onnx"), bert_feeds()))
    onnx.save(m, cnn)
    image = np.load(os.path.join(zoo, "resnet18", "b1.in.image.npy"))
    pre = os.path.join(tmp, "resnet18_pre.onnx")
    quant_pre_process(cnn, pre, skip_symbolic_shape=True)
    for name, fmt, per_channel, act, wt in (
        ("model_cnn_qdq_s8", QuantFormat.QDQ, True, QuantType.QInt8, QuantType.QInt8),
        ("model_cnn_qdq_u8", QuantFormat.QDQ, False, QuantType.QUInt8, QuantType.QUInt8),
        ("model_cnn_qoperator", QuantFormat.QOperator, False, QuantType.QUInt8, QuantType.QInt8),
    ):
        path = os.path.join(tmp, name + ".onnx")
        quantize_static(pre, path, _Reader("image", image.shape), quant_format=fmt, per_channel=per_channel,
                        activation_type=act, weight_type=wt)
        out.append((name, path, {"image": image}))
    # What ONNX Runtime itself makes of the QDQ model: its extended graph
    # optimizations fold Q/DQ pairs into QLinearConv, QLinearAdd,
    # QLinearGlobalAveragePool, ... (com.microsoft).
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = os.path.join(tmp, "model_cnn_qdq_ort_optimized.onnx")
    ort.InferenceSession(os.path.join(tmp, "model_cnn_qdq_u8.onnx"), so, providers=["CPUExecutionProvider"])
    out.append(("model_cnn_qdq_ort_optimized", so.optimized_model_filepath, {"image": image}))
    quantize_dynamic(cnn, os.path.join(tmp, "model_cnn_dynamic.onnx"), weight_type=QuantType.QUInt8)
    out.append(("model_cnn_dynamic", os.path.join(tmp, "model_cnn_dynamic.onnx"), {"image": image}))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="importer/onnx/testdata/quant")
    ap.add_argument("--only", default="")
    ap.add_argument("--models", action="store_true", help="write the whole-model cases (needs torch) instead of the operator cases")
    ap.add_argument("--zoo", default="testdata/zoo")
    args = ap.parse_args()
    if args.models:
        import collections
        import tempfile

        os.makedirs(args.out, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            for name, path, feeds in model_cases(tmp, args.zoo):
                m = onnx.load(path)
                ops = collections.Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in m.graph.node)
                save(args.out, name, m, feeds)
                print(name, os.path.getsize(os.path.join(args.out, name, "model.onnx")), "bytes", dict(sorted(ops.items())))
        return
    os.makedirs(args.out, exist_ok=True)
    failed, written = [], 0
    for c in op_cases():
        if args.only and args.only not in c.name:
            continue
        feeds = {n: a for n, a in c.inputs if n}
        try:
            save(args.out, c.name, c.model(), feeds, c.model(ref=True) if c.ref else None, c.out_codes)
            written += 1
        except Exception as e:  # noqa: BLE001 - report every case ORT rejects
            failed.append(f"{c.name}: {str(e).splitlines()[0][:200]}")
    for f in failed:
        print("ONNX Runtime rejected", f)
    print(f"{written} cases written to {args.out}")


if __name__ == "__main__":
    main()
