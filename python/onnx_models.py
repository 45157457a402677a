"""Builders for the small ONNX models xserve ships as examples and uses in
benchmarks. Models are written with onnx.helper from a fixed seed, so the
same command always writes the same file; reference outputs come from ONNX
Runtime (never from xserve)."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _init(rng, name, shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
    arr = (rng.standard_normal(shape) * scale).astype(np.float32)
    return numpy_helper.from_array(arr, name)


def _model(nodes, inputs, outputs, inits, name):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="xserve/python/onnx_models.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def tiny_cnn(seed=0, channels=(8, 16), classes=10, size=32):
    """Conv-ReLU-MaxPool-Conv-ReLU-GlobalAveragePool-Flatten-Gemm-Softmax
    over a [batch, 3, size, size] image with a symbolic batch dim."""
    rng = np.random.default_rng(seed)
    c1, c2 = channels
    inits = [
        _init(rng, "conv1.weight", [c1, 3, 3, 3]), _init(rng, "conv1.bias", [c1], 0.1),
        _init(rng, "conv2.weight", [c2, c1, 3, 3]), _init(rng, "conv2.bias", [c2], 0.1),
        _init(rng, "fc.weight", [classes, c2]), _init(rng, "fc.bias", [classes], 0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["conv1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv1"], ["relu1"]),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "conv2.weight", "conv2.bias"], ["conv2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv2"], ["relu2"]),
        helper.make_node("GlobalAveragePool", ["relu2"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, size, size])]
    outputs = [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", classes])]
    return _model(nodes, inputs, outputs, inits, "tiny_cnn")


def resnet_cnn(seed=0, width=32, blocks=4, size=112, classes=100):
    """A ResNet-shaped CNN: stem conv 7x7/2 + maxpool, `blocks` residual
    blocks (two 3x3 convs with BatchNormalization, the 2nd..nth block doubling
    width with stride 2), global average pool and a classifier."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def conv_bn(x, cin, cout, k, stride, name, relu=True):
        inits.append(_init(rng, f"{name}.w", [cout, cin, k, k]))
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, cout).astype(np.float32), f"{name}.g"))
        inits.append(numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), f"{name}.b"))
        inits.append(numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), f"{name}.m"))
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, cout).astype(np.float32), f"{name}.v"))
        p = k // 2
        nodes.append(helper.make_node("Conv", [x, f"{name}.w"], [f"{name}.conv"], kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p]))
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.conv", f"{name}.g", f"{name}.b", f"{name}.m", f"{name}.v"], [f"{name}.bn"]))
        if not relu:
            return f"{name}.bn"
        nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.out"]))
        return f"{name}.out"

    x = conv_bn("image", 3, width, 7, 2, "stem")
    nodes.append(helper.make_node("MaxPool", [x], ["stem.pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "stem.pool", width
    for i in range(blocks):
        cout = width * (2 ** max(0, i - 1)) if i > 0 else width
        stride = 2 if i > 0 and cout != cin else 1
        h = conv_bn(x, cin, cout, 3, stride, f"b{i}.c1")
        h = conv_bn(h, cout, cout, 3, 1, f"b{i}.c2", relu=False)
        skip = x if (stride == 1 and cin == cout) else conv_bn(x, cin, cout, 1, stride, f"b{i}.down", relu=False)
        nodes.append(helper.make_node("Add", [h, skip], [f"b{i}.add"]))
        nodes.append(helper.make_node("Relu", [f"b{i}.add"], [f"b{i}.out"]))
        x, cin = f"b{i}.out", cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    inits += [_init(rng, "fc.w", [classes, cin]), _init(rng, "fc.b", [classes], 0.1)]
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1))
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, size, size])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])]
    return _model(nodes, inputs, outputs, inits, "resnet_cnn")


def transformer_block(seed=0, d=256, heads=4, ffn=1024):
    """One pre-norm transformer encoder block over [batch, seq, d]:
    LayerNorm -> multi-head self-attention (MatMul/Reshape/Transpose/Softmax)
    -> residual -> LayerNorm -> MLP with exact (erf) GELU -> residual."""
    rng = np.random.default_rng(seed)
    hd = d // heads
    inits = [
        numpy_helper.from_array(np.ones(d, np.float32), "ln1.g"), numpy_helper.from_array(np.zeros(d, np.float32), "ln1.b"),
        numpy_helper.from_array(np.ones(d, np.float32), "ln2.g"), numpy_helper.from_array(np.zeros(d, np.float32), "ln2.b"),
        _init(rng, "wq", [d, d]), _init(rng, "wk", [d, d]), _init(rng, "wv", [d, d]), _init(rng, "wo", [d, d]),
        _init(rng, "w1", [d, ffn]), _init(rng, "b1", [ffn], 0.1), _init(rng, "w2", [ffn, d]), _init(rng, "b2", [d], 0.1),
        numpy_helper.from_array(np.array([0, 0, heads, hd], np.int64), "split_heads"),
        numpy_helper.from_array(np.array([0, 0, d], np.int64), "merge_heads"),
        numpy_helper.from_array(np.array(1.0 / np.sqrt(hd), np.float32), "scale"),
        numpy_helper.from_array(np.array(1.0 / np.sqrt(2.0), np.float32), "inv_sqrt2"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
    ]
    n = helper.make_node
    nodes = [n("LayerNormalization", ["x", "ln1.g", "ln1.b"], ["h1"], axis=-1, epsilon=1e-5)]
    for name in ("q", "k", "v"):
        nodes += [
            n("MatMul", ["h1", f"w{name}"], [f"{name}.proj"]),
            n("Reshape", [f"{name}.proj", "split_heads"], [f"{name}.heads"]),
            n("Transpose", [f"{name}.heads"], [f"{name}.t"], perm=[0, 2, 1, 3] if name != "k" else [0, 2, 3, 1]),
        ]
    nodes += [
        n("MatMul", ["q.t", "k.t"], ["scores"]),
        n("Mul", ["scores", "scale"], ["scaled"]),
        n("Softmax", ["scaled"], ["attn"], axis=-1),
        n("MatMul", ["attn", "v.t"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx.t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx.t", "merge_heads"], ["ctx.m"]),
        n("MatMul", ["ctx.m", "wo"], ["attn.out"]),
        n("Add", ["x", "attn.out"], ["res1"]),
        n("LayerNormalization", ["res1", "ln2.g", "ln2.b"], ["h2"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h2", "w1"], ["ff1"]), n("Add", ["ff1", "b1"], ["ff1b"]),
        n("Mul", ["ff1b", "inv_sqrt2"], ["g0"]), n("Erf", ["g0"], ["g1"]), n("Add", ["g1", "one"], ["g2"]),
        n("Mul", ["ff1b", "g2"], ["g3"]), n("Mul", ["g3", "half"], ["gelu"]),
        n("MatMul", ["gelu", "w2"], ["ff2"]), n("Add", ["ff2", "b2"], ["ff2b"]),
        n("Add", ["res1", "ff2b"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])]
    return _model(nodes, inputs, outputs, inits, "transformer_block")


def add_one(width=16):
    """The smallest useful model: y = x + 1 over float32[batch, width]; used
    to measure the serving path's own overhead."""
    one = numpy_helper.from_array(np.ones(width, np.float32), "one")
    nodes = [helper.make_node("Add", ["x", "one"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])]
    return _model(nodes, inputs, outputs, [one], "add_one")
