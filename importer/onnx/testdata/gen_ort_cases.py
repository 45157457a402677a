"""Generates importer/onnx/testdata/ort/<case>/: small one-operator ONNX
models of the signal, Det, sequence, optional, Dropout and TfIdfVectorizer
operators, laid out like
the ONNX backend test data (model.onnx, test_data_set_0/input_N.pb and
output_N.pb), whose expected outputs ONNX Runtime computed. The Go tests
(ops_signal_test.go, ops_sequence_test.go) run them through the
conformance runner.

Pinned: onnx 1.19.1, onnxruntime 1.23.2, numpy (.venv). Run from the
repository root (make ort-cases):

	.venv/bin/python importer/onnx/testdata/gen_ort_cases.py
"""
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = "importer/onnx/testdata/ort"
F = TensorProto.FLOAT
I64 = TensorProto.INT64
rng = np.random.default_rng(7)


def tensor_vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def seq_vi(name, dtype, shape):
    return helper.make_tensor_sequence_value_info(name, dtype, shape)


def opt_vi(name, elem_type):
    return helper.make_value_info(name, helper.make_optional_type_proto(elem_type))


def write_value(path, vi, value):
    """Serializes value as the TensorProto/SequenceProto/OptionalProto vi's type calls for."""
    kind = vi.type.WhichOneof("value")
    if kind == "tensor_type":
        proto = numpy_helper.from_array(np.asarray(value), vi.name)
    elif kind == "sequence_type":
        proto = numpy_helper.from_list([np.asarray(v) for v in value], vi.name)
    else:
        elem = vi.type.optional_type.elem_type
        if value is None:
            proto = onnx.OptionalProto(name=vi.name, elem_type=onnx.OptionalProto.TENSOR if elem.HasField("tensor_type") else onnx.OptionalProto.SEQUENCE)
        elif elem.HasField("tensor_type"):
            proto = numpy_helper.from_optional(np.asarray(value), vi.name)
        else:
            proto = numpy_helper.from_optional([np.asarray(v) for v in value], vi.name, elem_type=onnx.OptionalProto.SEQUENCE)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def case(name, nodes, inputs, outputs, feeds, opset=17, inits=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    d = os.path.join(ROOT, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(model, os.path.join(d, "model.onnx"))
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {vi.name: feeds[i] for i, vi in enumerate(inputs)})
    for i, vi in enumerate(inputs):
        write_value(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), vi, feeds[i])
    for i, vi in enumerate(outputs):
        write_value(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), vi, got[i])


def scalar(v, dt=np.int64):
    return np.array(v, dt)


def signal_cases():
    for op, size, periodic, dtype in (("HannWindow", 10, 1, F), ("HammingWindow", 7, 0, F), ("BlackmanWindow", 16, 1, TensorProto.DOUBLE)):
        case(f"{op.lower()}_{size}", [helper.make_node(op, ["size"], ["w"], periodic=periodic, output_datatype=dtype)],
             [tensor_vi("size", I64, [])], [tensor_vi("w", dtype, [size])], [scalar(size)])
    case("melweightmatrix_10x33", [helper.make_node("MelWeightMatrix", ["bins", "dft", "rate", "lo", "hi"], ["m"])],
         [tensor_vi("bins", I64, []), tensor_vi("dft", I64, []), tensor_vi("rate", I64, []), tensor_vi("lo", F, []), tensor_vi("hi", F, [])],
         [tensor_vi("m", F, [33, 10])], [scalar(10), scalar(64), scalar(16000), scalar(20, np.float32), scalar(8000, np.float32)])
    x = rng.standard_normal((2, 8, 1)).astype(np.float32)
    case("dft17_real_axis1", [helper.make_node("DFT", ["x"], ["y"], axis=1)], [tensor_vi("x", F, [2, 8, 1])], [tensor_vi("y", F, [2, 8, 2])], [x])
    case("dft17_onesided_len12", [helper.make_node("DFT", ["x", "n"], ["y"], axis=1, onesided=1)],
         [tensor_vi("x", F, [2, 8, 1]), tensor_vi("n", I64, [])], [tensor_vi("y", F, [2, 7, 2])], [x, scalar(12)])
    xc = rng.standard_normal((3, 6, 2)).astype(np.float32)
    case("dft17_complex_inverse", [helper.make_node("DFT", ["x"], ["y"], axis=1, inverse=1)], [tensor_vi("x", F, [3, 6, 2])], [tensor_vi("y", F, [3, 6, 2])], [xc])
    xn = rng.standard_normal((2, 6, 5, 1)).astype(np.float32)
    case("dft17_negative_axis", [helper.make_node("DFT", ["x"], ["y"], axis=-2)], [tensor_vi("x", F, [2, 6, 5, 1])], [tensor_vi("y", F, [2, 6, 5, 2])], [xn])
    x4 = rng.standard_normal((2, 5, 7, 1)).astype(np.float32)
    case("dft20_axis_input", [helper.make_node("DFT", ["x", "", "axis"], ["y"], onesided=1)],
         [tensor_vi("x", F, [2, 5, 7, 1]), tensor_vi("axis", I64, [])], [tensor_vi("y", F, [2, 5, 4, 2])], [x4, scalar(2)], opset=20)
    x4c = rng.standard_normal((2, 5, 3, 2)).astype(np.float32)
    case("dft20_default_axis_len4", [helper.make_node("DFT", ["x", "n"], ["y"])],
         [tensor_vi("x", F, [2, 5, 3, 2]), tensor_vi("n", I64, [])], [tensor_vi("y", F, [2, 5, 4, 2])], [x4c, scalar(4)], opset=20)
    sig = rng.standard_normal((2, 64, 1)).astype(np.float32)
    win = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(16) / 16)).astype(np.float32)
    case("stft_window", [helper.make_node("STFT", ["s", "step", "w"], ["y"])],
         [tensor_vi("s", F, [2, 64, 1]), tensor_vi("step", I64, []), tensor_vi("w", F, [16])], [tensor_vi("y", F, [2, 7, 9, 2])], [sig, scalar(8), win])
    # A real signal: ONNX Runtime 1.23.2's STFT of a complex signal reads
    # frames at the wrong offsets (and past the end), so it is no reference.
    sig2 = rng.standard_normal((1, 40, 1)).astype(np.float32)
    case("stft_frame_length_twosided", [helper.make_node("STFT", ["s", "step", "", "len"], ["y"], onesided=0)],
         [tensor_vi("s", F, [1, 40, 1]), tensor_vi("step", I64, []), tensor_vi("len", I64, [])], [tensor_vi("y", F, [1, 7, 10, 2])], [sig2, scalar(5), scalar(10)])
    a = rng.standard_normal((4, 4)).astype(np.float32)
    case("det_4x4", [helper.make_node("Det", ["x"], ["y"])], [tensor_vi("x", F, [4, 4])], [tensor_vi("y", F, [])], [a], opset=11)
    b = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    case("det_batched_5x5", [helper.make_node("Det", ["x"], ["y"])], [tensor_vi("x", F, [2, 3, 5, 5])], [tensor_vi("y", F, [2, 3])], [b], opset=11)
    s = np.array([[1, 2, 3], [2, 4, 6], [0, 1, 5]], np.float32)  # singular: row 1 = 2 * row 0
    p = np.array([[0, 2, 1], [3, 0, 4], [1, 5, 0]], np.float32)  # zero on the diagonal: needs pivoting
    case("det_singular_and_pivot", [helper.make_node("Det", ["x"], ["y"])], [tensor_vi("x", F, [2, 3, 3])], [tensor_vi("y", F, [2])], [np.stack([s, p])], opset=11)
    d = rng.standard_normal((9, 9)).astype(np.float32)
    case("det_9x9", [helper.make_node("Det", ["x"], ["y"])], [tensor_vi("x", F, [9, 9])], [tensor_vi("y", F, [])], [d], opset=11)


def sequence_cases():
    x, y, z = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
    case("seq_construct_insert_at",
         [helper.make_node("SequenceConstruct", ["x", "y"], ["s"]), helper.make_node("SequenceInsert", ["s", "z", "p"], ["t"]),
          helper.make_node("SequenceAt", ["t", "q"], ["o"])],
         [tensor_vi("x", F, [2, 3]), tensor_vi("y", F, [2, 3]), tensor_vi("z", F, [2, 3]), tensor_vi("p", I64, []), tensor_vi("q", I64, [])],
         [tensor_vi("o", F, [2, 3])], [x, y, z, scalar(1), scalar(-2)], opset=13)
    case("seq_empty_insert_concat_new_axis",
         [helper.make_node("SequenceEmpty", [], ["e"], dtype=F), helper.make_node("SequenceInsert", ["e", "x"], ["s1"]),
          helper.make_node("SequenceInsert", ["s1", "y", "zero"], ["s2"]), helper.make_node("ConcatFromSequence", ["s2"], ["o"], axis=-1, new_axis=1)],
         [tensor_vi("x", F, [2, 3]), tensor_vi("y", F, [2, 3])], [tensor_vi("o", F, [2, 3, 2])], [x, y], opset=13,
         inits=[numpy_helper.from_array(scalar(0), "zero")])
    w = rng.standard_normal((8, 2)).astype(np.float32)
    case("seq_split_scalar_length",
         [helper.make_node("SplitToSequence", ["w", "k"], ["s"], axis=0), helper.make_node("SequenceLength", ["s"], ["n"])],
         [tensor_vi("w", F, [8, 2]), tensor_vi("k", I64, [])], [seq_vi("s", F, None), tensor_vi("n", I64, [])], [w, scalar(3)], opset=13)
    case("seq_split_nokeep_concat_erase",
         [helper.make_node("SplitToSequence", ["w"], ["s"], axis=1, keepdims=0), helper.make_node("SequenceErase", ["s", "zero"], ["t"]),
          helper.make_node("ConcatFromSequence", ["s"], ["o"], axis=0)],
         [tensor_vi("w", F, [8, 2])], [seq_vi("t", F, None), tensor_vi("o", F, [16])], [w], opset=13,
         inits=[numpy_helper.from_array(scalar(0), "zero")])
    body = helper.make_graph([helper.make_node("Add", ["e", "b"], ["r"]), helper.make_node("Shape", ["e"], ["sh"])], "body",
                             [tensor_vi("e", F, ["n"]), tensor_vi("b", F, [1])], [tensor_vi("r", F, ["n"]), tensor_vi("sh", I64, [1])])
    seq = [rng.standard_normal(k).astype(np.float32) for k in (4, 1, 6)]
    case("seq_map_input_output", [helper.make_node("SequenceMap", ["s", "b"], ["r", "sh"], body=body)],
         [seq_vi("s", F, ["n"]), tensor_vi("b", F, [1])], [seq_vi("r", F, ["n"]), seq_vi("sh", I64, [1])],
         [seq, np.array([0.5], np.float32)])
    case("seq_identity", [helper.make_node("Identity", ["s"], ["t"])], [seq_vi("s", F, ["n"])], [seq_vi("t", F, ["n"])], [seq], opset=16)
    case("optional_tensor_has_get",
         [helper.make_node("Optional", ["x"], ["o"]), helper.make_node("OptionalHasElement", ["o"], ["h"]),
          helper.make_node("OptionalGetElement", ["o"], ["g"])],
         [tensor_vi("x", F, [2, 3])], [tensor_vi("h", TensorProto.BOOL, []), tensor_vi("g", F, [2, 3])], [x], opset=18)
    tensor_type = helper.make_tensor_type_proto(F, [2, 3])
    case("optional_input_absent", [helper.make_node("OptionalHasElement", ["o"], ["h"])],
         [opt_vi("o", tensor_type)], [tensor_vi("h", TensorProto.BOOL, [])], [None], opset=18)
    case("optional_input_present", [helper.make_node("OptionalGetElement", ["o"], ["g"])],
         [opt_vi("o", tensor_type)], [tensor_vi("g", F, [2, 3])], [x], opset=18)


def dropout_cases():
    # Only the deterministic corners: training off (any ratio), or on with
    # ratio 0. The random samples are checked by properties in Go.
    x = rng.standard_normal((3, 4)).astype(np.float32)
    ins = [tensor_vi("x", F, [3, 4]), tensor_vi("r", F, []), tensor_vi("t", TensorProto.BOOL, [])]
    outs = [tensor_vi("y", F, [3, 4]), tensor_vi("m", TensorProto.BOOL, [3, 4])]
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"], seed=0)
    case("dropout_runtime_training_off", [node], ins, outs, [x, scalar(0.5, np.float32), np.array(False)], opset=13)
    case("dropout_runtime_training_ratio0", [node], ins, outs, [x, scalar(0, np.float32), np.array(True)], opset=13)


def tfidf_cases():
    x = rng.integers(0, 5, (3, 10)).astype(np.int64)
    pool = [1, 2, 4, 0, 1, 2, 3, 4, 1, 1, 2, 3, 0, 1, 2]  # unigrams 1 2 4; bigrams (0,1) (2,3) (4,1); trigrams (1,2,3) (0,1,2)
    common = dict(ngram_counts=[0, 3, 9], ngram_indexes=[7, 0, 1, 2, 3, 4, 5, 6], pool_int64s=pool)
    for name, mode, lo, hi, skip, weights in (("tf_uni_to_tri_skip2", "TF", 1, 3, 2, None),
                                               ("idf_weighted_bigrams", "IDF", 2, 2, 1, [0.5, 1, 2, 3, 4, 5, 6, 7]),
                                               ("tfidf_weighted_all_skip0", "TFIDF", 1, 3, 0, [0.5, 1, 2, 3, 4, 5, 6, 7])):
        attrs = dict(common, mode=mode, min_gram_length=lo, max_gram_length=hi, max_skip_count=skip)
        if weights:
            attrs["weights"] = weights
        case("tfidf_" + name, [helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)],
             [tensor_vi("x", I64, [3, 10])], [tensor_vi("y", F, [3, 8])], [x], opset=9)
    x1 = rng.integers(0, 5, (14,)).astype(np.int32)
    case("tfidf_1d_int32_trigrams_skip3", [helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=3, max_gram_length=3, max_skip_count=3, **common)],
         [tensor_vi("x", TensorProto.INT32, [14])], [tensor_vi("y", F, [8])], [x1], opset=9)
    tfidf_string_cases()


def tfidf_string_cases():
    """TfIdfVectorizer of strings (pool_strings): the words looked up on
    the host, then the integer path; words outside the pool match nothing."""
    words = np.array(["the", "cat", "sat", "on", "mat", "a", "dog"])
    x = words[np.random.default_rng(3).integers(0, 7, (2, 9))].astype(object)
    pool = ["cat", "mat", "dog", "the", "cat", "sat", "on", "the", "cat", "sat"]  # unigrams cat mat dog; bigrams (the cat) (sat on); trigram (the cat sat)
    attrs = dict(ngram_counts=[0, 3, 7], ngram_indexes=[0, 1, 2, 3, 4, 5], pool_strings=pool, mode="TF",
                 min_gram_length=1, max_gram_length=3, max_skip_count=1)
    case("tfidf_strings_uni_to_tri_skip1", [helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)],
         [tensor_vi("x", TensorProto.STRING, [2, 9])], [tensor_vi("y", F, [2, 6])], [x], opset=9)


def conv_cases():
    """Conv as xserve's CPU kernel computes it (lower.ConvKernel): 1-3
    spatial dims, strides, symmetric and asymmetric padding, auto_pad,
    dilation, groups (depthwise, depth multiplier), bias or none, weights as
    initializers (uploaded in XLA's layout) or as a graph input, batches,
    convolutions large enough to run on several threads, and Relu/Clip after
    the convolution (which the lowering fuses into it)."""
    r = np.random.default_rng(11)

    def conv(name, xs, ws, bias=True, weights_input=False, after=None, opset=13, **attrs):
        x = r.standard_normal(xs).astype(np.float32)
        w = (r.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
        b = r.standard_normal(ws[0]).astype(np.float32)
        names = ["x", "w"] + (["b"] if bias else [])
        y = "y" if after is None else "c"
        nodes = [helper.make_node("Conv", names, [y], **attrs)]
        if after == "relu":
            nodes.append(helper.make_node("Relu", ["c"], ["y"]))
        elif after == "sigmoid":
            nodes.append(helper.make_node("Sigmoid", ["c"], ["y"]))
        elif after == "silu":  # as torch.onnx exports SiLU: x * Sigmoid(x)
            nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
        elif after == "hardswish":
            nodes.append(helper.make_node("HardSwish", ["c"], ["y"]))
        elif after == "tanh":
            nodes.append(helper.make_node("Tanh", ["c"], ["y"]))
        elif after == "leaky_relu":
            nodes.append(helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.1))
        elif after in ("gelu", "gelu_tanh"):
            nodes.append(helper.make_node("Gelu", ["c"], ["y"], approximate="tanh" if after == "gelu_tanh" else "none"))
        elif after == "relu6":
            nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
        elif after == "relu_twice_used":  # the convolution's output feeds Relu and the output too
            nodes.append(helper.make_node("Relu", ["c"], ["y"]))
        inits = [numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(6, np.float32), "hi")] if after == "relu6" else []
        ins, feeds = [tensor_vi("x", F, list(xs))], [x]
        if weights_input:
            ins.append(tensor_vi("w", F, list(ws)))
            feeds.append(w)
        else:
            inits.append(numpy_helper.from_array(w, "w"))
        if bias:
            inits.append(numpy_helper.from_array(b, "b"))
        dims = [f"d{i}" for i in range(len(xs))]
        outs = [helper.make_tensor_value_info("y", F, dims)]
        if after == "relu_twice_used":
            outs.append(helper.make_tensor_value_info("c", F, dims))
        case("conv_" + name, nodes, ins, outs, feeds, opset=opset, inits=inits)

    conv("2d_bias_pad1_batch2", (2, 3, 9, 9), (4, 3, 3, 3), pads=[1, 1, 1, 1])
    conv("2d_stride2_nobias", (1, 5, 10, 11), (6, 5, 3, 3), bias=False, strides=[2, 2], pads=[1, 1, 1, 1])
    conv("2d_asymmetric_pads", (1, 3, 8, 7), (4, 3, 3, 2), pads=[0, 1, 2, 1])
    conv("2d_same_upper_stride2", (1, 3, 9, 8), (5, 3, 3, 3), auto_pad="SAME_UPPER", strides=[2, 2])
    conv("2d_dilation_2x3", (1, 4, 12, 12), (3, 4, 3, 3), dilations=[2, 3], pads=[1, 2, 1, 2])
    conv("2d_groups2", (1, 6, 8, 8), (4, 3, 3, 3), group=2, pads=[1, 1, 1, 1])
    conv("2d_depthwise_stride2", (2, 8, 9, 9), (8, 1, 3, 3), group=8, strides=[2, 2], pads=[1, 1, 1, 1])
    conv("2d_depth_multiplier2", (1, 4, 7, 7), (8, 1, 3, 3), group=4, bias=False)
    conv("2d_1x1_stride2_batch3", (3, 8, 7, 7), (16, 8, 1, 1), strides=[2, 2])
    conv("2d_weights_input", (1, 3, 6, 6), (4, 3, 3, 3), weights_input=True, pads=[1, 1, 1, 1])
    conv("2d_kernel_larger_than_input", (1, 4, 2, 2), (6, 4, 3, 3), pads=[1, 1, 1, 1])
    conv("2d_two_threads_relu", (1, 16, 32, 32), (32, 16, 3, 3), after="relu", pads=[1, 1, 1, 1])
    conv("2d_relu6", (1, 8, 10, 10), (8, 8, 3, 3), after="relu6", pads=[1, 1, 1, 1])
    conv("2d_relu_output_used_twice", (1, 4, 6, 6), (4, 4, 3, 3), after="relu_twice_used", pads=[1, 1, 1, 1])
    for act, opset in (("sigmoid", 13), ("silu", 13), ("hardswish", 14), ("tanh", 13), ("leaky_relu", 13),
                       ("gelu", 20), ("gelu_tanh", 20)):
        conv("2d_" + act, (1, 6, 9, 9), (8, 6, 3, 3), after=act, opset=opset, pads=[1, 1, 1, 1])
    # A residual connection: Add(conv, x) (either order), then Relu or not.
    def residual(name, n, first, relu):
        x = r.standard_normal((n, 8, 10, 10)).astype(np.float32)
        w = numpy_helper.from_array((r.standard_normal((8, 8, 3, 3)) / 8).astype(np.float32), "w")
        b = numpy_helper.from_array(r.standard_normal(8).astype(np.float32), "b")
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Add", ["x", "c"] if first else ["c", "x"], ["s" if relu else "y"])]
        if relu:
            nodes.append(helper.make_node("Relu", ["s"], ["y"]))
        case("conv_2d_" + name, nodes, [tensor_vi("x", F, [n, 8, 10, 10])],
             [helper.make_tensor_value_info("y", F, ["d0", "d1", "d2", "d3"])], [x], opset=13, inits=[w, b])

    residual("residual_relu", 2, False, True)
    residual("residual_first_operand", 2, True, False)
    conv("1d_stride2_pad1", (2, 3, 20), (5, 3, 4), strides=[2], pads=[1, 1])
    conv("3d_pad1", (1, 2, 5, 6, 7), (3, 2, 3, 2, 3), pads=[1, 0, 1, 1, 0, 1])
    # One image, which the kernel may run as bands of output rows
    # (cpukernels/common.h): a residual added in each band's rows, and one
    # spatial dim with dilation and uneven padding.
    residual("residual_batch1", 1, False, True)
    conv("1d_batch1_dilation2", (1, 3, 21), (4, 3, 3), dilations=[2], pads=[2, 1])


def matmul_cases():
    """MatMul and Gemm in the forms xserve's CPU matrix-product kernel takes
    (lower.MatmulKernel): 2-D, batched, 4-D attention products with a
    transposed operand, broadcast weights, a matrix-vector product, Gemm with
    transA/transB and bias, weights as initializers or inputs; and one too
    small for the kernel (XLA's own)."""
    r = np.random.default_rng(13)

    def mm(name, shapes, node, out_rank, inits=()):
        feeds = [r.standard_normal(sh).astype(np.float32) for sh in shapes]
        ins = [tensor_vi(chr(ord("a") + i), F, list(sh)) for i, sh in enumerate(shapes)]
        init = [numpy_helper.from_array(r.standard_normal(sh).astype(np.float32), nm) for nm, sh in inits]
        out = helper.make_tensor_value_info("y", F, [f"d{i}" for i in range(out_rank)])
        case("matmul_" + name, [node], ins, [out], feeds, opset=13, inits=init)

    mm("2d", [(32, 64)], helper.make_node("MatMul", ["a", "w"], ["y"]), 2, [("w", (64, 48))])
    mm("batched_3d", [(4, 16, 32), (4, 32, 24)], helper.make_node("MatMul", ["a", "b"], ["y"]), 3)
    r_q = (2, 3, 17, 16)
    case("matmul_attention_4d_transposed",
         [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["q", "kt"], ["y"])],
         [tensor_vi("q", F, list(r_q)), tensor_vi("k", F, list(r_q))], [helper.make_tensor_value_info("y", F, ["a", "b", "c", "d"])],
         [r.standard_normal(r_q).astype(np.float32), r.standard_normal(r_q).astype(np.float32)], opset=13)
    mm("broadcast_weights_4d", [(2, 5, 16, 32)], helper.make_node("MatMul", ["a", "w"], ["y"]), 4, [("w", (32, 24))])
    mm("vector", [(8, 40, 64)], helper.make_node("MatMul", ["a", "v"], ["y"]), 2, [("v", (64,))])
    mm("gemm_transb_bias", [(20, 64)], helper.make_node("Gemm", ["a", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0), 2,
       [("w", (48, 64)), ("c", (48,))])
    mm("gemm_transa", [(64, 20)], helper.make_node("Gemm", ["a", "w"], ["y"], transA=1), 2, [("w", (64, 48))])
    mm("inputs_only", [(3, 24, 40), (3, 40, 36)], helper.make_node("MatMul", ["a", "b"], ["y"]), 3)
    mm("tiny_stays_xla", [(2, 3)], helper.make_node("MatMul", ["a", "w"], ["y"]), 2, [("w", (3, 4))])
    # MatMul + Add(bias) [+ activation], as ONNX exports a linear layer:
    # the kernel adds the bias and applies the activation.
    for name, act, opset in (("bias", None, 13), ("bias_first_relu", "Relu", 13), ("bias_gelu", "Gelu", 20)):
        x = r.standard_normal((2, 9, 32)).astype(np.float32)
        w = numpy_helper.from_array(r.standard_normal((32, 40)).astype(np.float32), "w")
        b = numpy_helper.from_array(r.standard_normal(40).astype(np.float32), "b")
        add = ["b", "m"] if "first" in name else ["m", "b"]
        nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", add, ["y" if act is None else "z"])]
        if act:
            nodes.append(helper.make_node(act, ["z"], ["y"]))
        case("matmul_" + name, nodes, [tensor_vi("a", F, [2, 9, 32])], [helper.make_tensor_value_info("y", F, ["d0", "d1", "d2"])],
             [x], opset=opset, inits=[w, b])
    # A transformer's residual: (a @ w + b) + a.
    x = r.standard_normal((2, 9, 32)).astype(np.float32)
    w = numpy_helper.from_array(r.standard_normal((32, 32)).astype(np.float32), "w")
    b = numpy_helper.from_array(r.standard_normal(32).astype(np.float32), "b")
    case("matmul_bias_residual", [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["z"]),
                                  helper.make_node("Add", ["a", "z"], ["y"])],
         [tensor_vi("a", F, [2, 9, 32])], [helper.make_tensor_value_info("y", F, ["d0", "d1", "d2"])], [x], opset=13, inits=[w, b])
    # Gemm with a bias and unit alpha/beta, then Relu (a classifier layer,
    # aten.addmm): the kernel adds the bias and applies the relu.
    x = r.standard_normal((6, 128)).astype(np.float32)
    w = numpy_helper.from_array(r.standard_normal((64, 128)).astype(np.float32), "w")
    b = numpy_helper.from_array(r.standard_normal(64).astype(np.float32), "b")
    case("matmul_gemm_bias_relu", [helper.make_node("Gemm", ["a", "w", "b"], ["z"], transB=1), helper.make_node("Relu", ["z"], ["y"])],
         [tensor_vi("a", F, [6, 128])], [helper.make_tensor_value_info("y", F, ["d0", "d1"])], [x], opset=13, inits=[w, b])


def matvec_cases():
    """Decode-step products (lower/cpu fewRows, lower nnTransposedMatrix): a
    row against a weight of 64K elements, which stays XLA's dot; the same as
    an ONNX tied LM head, MatMul(x, Transpose(W)), also XLA's dot reading W
    in place; and a transposed weight with enough rows for the kernel
    (trans_b). Their own generator, so that the other cases' draws stay."""
    r = np.random.default_rng(31)
    x1 = r.standard_normal((1, 1, 512)).astype(np.float32)
    w = numpy_helper.from_array(r.standard_normal((512, 128)).astype(np.float32), "w")
    case("matmul_matvec_stays_xla", [helper.make_node("MatMul", ["a", "w"], ["y"])], [tensor_vi("a", F, [1, 1, 512])],
         [helper.make_tensor_value_info("y", F, ["d0", "d1", "d2"])], [x1], opset=13, inits=[w])
    e = numpy_helper.from_array(r.standard_normal((128, 512)).astype(np.float32), "e")
    case("matmul_tied_head_stays_xla", [helper.make_node("Transpose", ["e"], ["t"], perm=[1, 0]),
                                        helper.make_node("MatMul", ["a", "t"], ["y"])], [tensor_vi("a", F, [1, 1, 512])],
         [helper.make_tensor_value_info("y", F, ["d0", "d1", "d2"])], [x1], opset=13, inits=[e])
    x40 = r.standard_normal((40, 64)).astype(np.float32)
    wt = numpy_helper.from_array(r.standard_normal((48, 64)).astype(np.float32), "wt")
    case("matmul_transposed_weight", [helper.make_node("Transpose", ["wt"], ["t"], perm=[1, 0]),
                                      helper.make_node("MatMul", ["a", "t"], ["y"])], [tensor_vi("a", F, [40, 64])],
         [helper.make_tensor_value_info("y", F, ["d0", "d1"])], [x40], opset=13, inits=[wt])


def pool_cases():
    """MaxPool as xserve's CPU max-pooling kernel computes it
    (lower.PoolKernel): 1-3 spatial dims, strides, symmetric, asymmetric and
    SAME_UPPER padding, ceil_mode, dilation, batches, a pooling large enough
    to run on several threads, one after a convolution (channels-last from
    the convolution kernel) and a 1x1 window. (ONNX Runtime's MaxPool drops
    NaN from most windows; lower/stablehlo TestMaxPoolKernelRun checks NaN
    against XLA's own reduce_window, which keeps it, as PyTorch does.)"""
    r = np.random.default_rng(17)

    def pool(name, xs, conv=False, opset=13, **attrs):
        x = r.standard_normal(xs).astype(np.float32)
        nodes, inits, src = [], [], "x"
        if conv:
            w = (r.standard_normal((8, xs[1], 3, 3)) / 5).astype(np.float32)
            inits.append(numpy_helper.from_array(w, "w"))
            nodes += [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"])]
            src = "r"
        nodes.append(helper.make_node("MaxPool", [src], ["y"], **attrs))
        outs = [helper.make_tensor_value_info("y", F, [f"d{i}" for i in range(len(xs))])]
        case("maxpool_" + name, nodes, [tensor_vi("x", F, list(xs))], outs, [x], opset=opset, inits=inits)

    pool("2d_3x3_stride2_pad1", (1, 8, 32, 32), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    pool("2d_2x2_batch3", (3, 5, 8, 6), kernel_shape=[2, 2], strides=[2, 2])
    pool("2d_ceil_mode", (2, 4, 15, 15), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    pool("2d_asymmetric_pads", (1, 3, 9, 7), kernel_shape=[3, 2], strides=[1, 2], pads=[0, 1, 2, 1])
    pool("2d_same_upper", (1, 4, 10, 9), kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    pool("2d_dilation", (1, 4, 12, 12), kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 2, 1, 2])
    pool("2d_resnet_stem_batch2", (2, 16, 56, 56), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    pool("2d_after_conv", (2, 3, 16, 16), conv=True, kernel_shape=[2, 2], strides=[2, 2])
    pool("2d_1x1_stride2", (1, 2, 5, 5), kernel_shape=[1, 1], strides=[2, 2])
    pool("1d_stride2_pad1", (2, 6, 17), kernel_shape=[3], strides=[2], pads=[1, 1])
    pool("3d_2x2x2", (1, 3, 6, 7, 8), kernel_shape=[2, 2, 2], strides=[2, 2, 2])


def norm_cases():
    """Softmax, LogSoftmax and LayerNormalization as xserve's CPU softmax and
    layer norm kernels compute them (lower/cpu SoftmaxKernel,
    LayerNormKernel: along the last axis): BERT-base's shapes at sequence 12
    (12 heads, hidden 768), a batch, a classifier's log-softmax, attention
    scores from a matrix product; and the forms the kernels leave to XLA
    (softmax along another axis, a layer norm over two axes or without a
    bias)."""
    r = np.random.default_rng(19)

    def one(name, op, xs, opset, inits=(), **attrs):
        x = (r.standard_normal(xs) * 3).astype(np.float32)
        ins = ["x"] + [nm for nm, _ in inits]
        init = [numpy_helper.from_array(v, nm) for nm, v in inits]
        case(name, [helper.make_node(op, ins, ["y"], **attrs)], [tensor_vi("x", F, list(xs))],
             [helper.make_tensor_value_info("y", F, [f"d{i}" for i in range(len(xs))])], [x], opset=opset, inits=init)

    one("softmax_bert_heads_s12", "Softmax", (1, 12, 12, 12), 13, axis=-1)
    one("softmax_batch2_s32", "Softmax", (2, 4, 32, 32), 13, axis=-1)
    one("logsoftmax_classifier", "LogSoftmax", (3, 1000), 13, axis=-1)
    one("softmax_axis1_stays_xla", "Softmax", (2, 5, 7), 13, axis=1)
    # A fully masked row (all -inf) and a row holding NaN give NaN rows, as
    # in ONNX Runtime and XLA (oneDNN alone gives 0 beside the NaN).
    x = (r.standard_normal((4, 16)) * 3).astype(np.float32)
    x[0, :] = -np.inf
    x[1, 5:] = -np.inf
    x[2, 3] = np.nan
    case("softmax_masked_and_nan_rows", [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [tensor_vi("x", F, [4, 16])],
         [helper.make_tensor_value_info("y", F, ["d0", "d1"])], [x], opset=13)

    def ln(name, xs, axis=-1, bias=True, eps=1e-5):
        n = int(np.prod(xs[axis:]))
        shape = xs[axis:]
        inits = [("g", (1 + 0.1 * r.standard_normal(shape)).astype(np.float32))]
        if bias:
            inits.append(("b", (0.1 * r.standard_normal(shape)).astype(np.float32)))
        assert n > 0
        one(name, "LayerNormalization", xs, 17, inits=inits, axis=axis, epsilon=eps)

    ln("layernorm_bert_s12", (1, 12, 768), eps=1e-12)
    ln("layernorm_batch2", (2, 16, 64))
    ln("layernorm_two_axes_stays_xla", (2, 4, 6, 8), axis=-2)
    ln("layernorm_no_bias_stays_xla", (2, 5, 16), bias=False)
    q = (1, 4, 12, 16)
    case("softmax_attention_scores",
         [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["q", "kt"], ["s"]),
          helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])],
         [tensor_vi(n, F, list(q)) for n in ("q", "k", "v")], [helper.make_tensor_value_info("y", F, ["a", "b", "c", "d"])],
         [r.standard_normal(q).astype(np.float32) for _ in range(3)], opset=13)


def avgpool_cases():
    """AveragePool as xserve's CPU average-pooling kernel computes it
    (lower/cpu AvgPoolKernel): googlenet's and inception's 3x3 stride-1
    pooling with padding excluded from the count, included, ceil mode, a
    batch, 1-D; and ceil mode with the padding counted, which stays XLA's
    (a window past the padding divides by fewer than its size)."""
    r = np.random.default_rng(23)

    def pool(name, xs, opset=19, **attrs):
        x = r.standard_normal(xs).astype(np.float32)
        case("avgpool_" + name, [helper.make_node("AveragePool", ["x"], ["y"], **attrs)], [tensor_vi("x", F, list(xs))],
             [helper.make_tensor_value_info("y", F, [f"d{i}" for i in range(len(xs))])], [x], opset=opset)

    pool("3x3_s1_exclude_pad", (1, 32, 14, 14), kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    pool("3x3_s1_include_pad", (1, 16, 14, 14), kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)
    pool("2x2_s2_batch2", (2, 8, 10, 10), kernel_shape=[2, 2], strides=[2, 2])
    pool("3x3_s2_ceil_exclude_pad", (1, 8, 10, 10), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    pool("1d_k3_s2", (2, 6, 17), kernel_shape=[3], strides=[2], pads=[1, 1])
    pool("ceil_include_pad_stays_xla", (1, 4, 10, 10), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1,
         pads=[0, 0, 0, 0])


def rnn_cases():
    """RNN, GRU and LSTM with sequence_lens a graph input (a run-time value):
    forward, reverse and bidirectional, with initial states, LSTM's
    peepholes, GRU's linear_before_reset and RNN's Relu."""
    seq, batch, inp, hid = 5, 3, 4, 3
    I32 = TensorProto.INT32

    def rnn(name, op, gates, direction="forward", lens=(5, 2, 3), states=False, peep=False, **attrs):
        dirs = 2 if direction == "bidirectional" else 1
        x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
        w = (rng.standard_normal((dirs, gates * hid, inp)) * 0.5).astype(np.float32)
        r = (rng.standard_normal((dirs, gates * hid, hid)) * 0.5).astype(np.float32)
        b = (rng.standard_normal((dirs, 2 * gates * hid)) * 0.2).astype(np.float32)
        names = ["x", "w", "r", "b", "lens"]
        vis = [tensor_vi("x", F, ["T", "N", inp]), tensor_vi("w", F, list(w.shape)), tensor_vi("r", F, list(r.shape)),
               tensor_vi("b", F, list(b.shape)), tensor_vi("lens", I32, ["N"])]
        feeds = [x, w, r, b, np.array(lens, np.int32)]
        if states:
            names.append("h0")
            vis.append(tensor_vi("h0", F, [dirs, "N", hid]))
            feeds.append(rng.standard_normal((dirs, batch, hid)).astype(np.float32) * 0.3)
            if op == "LSTM":
                names.append("c0")
                vis.append(tensor_vi("c0", F, [dirs, "N", hid]))
                feeds.append(rng.standard_normal((dirs, batch, hid)).astype(np.float32) * 0.3)
        if peep:
            names.append("p")
            vis.append(tensor_vi("p", F, [dirs, 3 * hid]))
            feeds.append(rng.standard_normal((dirs, 3 * hid)).astype(np.float32) * 0.3)
        outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
        node_in = names[:5] + (names[5:] if op != "LSTM" or states else [])
        if peep and not states:
            node_in = names[:5] + ["", "", "p"]
        node = helper.make_node(op, node_in, outs, hidden_size=hid, direction=direction, **attrs)
        ovis = [tensor_vi("y", F, ["T", dirs, "N", hid]), tensor_vi("yh", F, [dirs, "N", hid])]
        if op == "LSTM":
            ovis.append(tensor_vi("yc", F, [dirs, "N", hid]))
        case(name, [node], vis, ovis, feeds)

    rnn("lstm_seqlens_forward", "LSTM", 4)
    rnn("lstm_seqlens_bidirectional_states_peephole", "LSTM", 4, "bidirectional", lens=(3, 5, 1), states=True, peep=True)
    rnn("lstm_seqlens_reverse", "LSTM", 4, "reverse", lens=(2, 4, 5))
    rnn("gru_seqlens_reverse", "GRU", 3, "reverse", lens=(4, 5, 1), states=True)
    rnn("gru_seqlens_bidirectional_lbr", "GRU", 3, "bidirectional", lens=(5, 3, 2), linear_before_reset=1)
    rnn("rnn_seqlens_bidirectional_relu", "RNN", 1, "bidirectional", lens=(1, 5, 4), states=True, activations=["Relu", "Relu"])
    rnn("rnn_seqlens_forward", "RNN", 1, lens=(5, 5, 5))


def topk_cases():
    """TopK whose K is a graph input (a run-time value): the outputs have
    a data-dependent size."""
    x = rng.standard_normal((3, 10)).astype(np.float32)
    for name, k, axis, largest in (("topk_runtime_k", 4, -1, 1), ("topk_runtime_k_smallest_axis0", 2, 0, 0)):
        dims = [3, 10]
        dims[axis] = "k"
        case(name, [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=largest)],
             [tensor_vi("x", F, [3, 10]), tensor_vi("k", I64, [1])],
             [tensor_vi("values", F, dims), tensor_vi("indices", I64, dims)], [x, np.array([k], np.int64)])


if __name__ == "__main__":
    for d in os.listdir(ROOT) if os.path.isdir(ROOT) else []:
        if not d.startswith("optim_"):  # those are gen_torch_optim_cases.py's
            shutil.rmtree(os.path.join(ROOT, d))
    signal_cases()
    sequence_cases()
    dropout_cases()
    tfidf_cases()
    conv_cases()
    matmul_cases()
    matvec_cases()
    pool_cases()
    norm_cases()
    avgpool_cases()
    rnn_cases()
    topk_cases()
