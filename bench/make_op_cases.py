"""make_op_cases.py writes one-operator (or one-block) models at the shapes
real models run them at, so that bench/peers.py times xserve's lowering of
each against ONNX Runtime's kernel on the same input:

  dw3x3_hswish     depthwise 3x3 Conv (+bias) + HardSwish, [1,96,28,28]
                   (mobilenet_v3's inverted residual blocks)
  dw5x5_hswish     depthwise 5x5 Conv stride 2 + HardSwish, [1,240,28,28]
  se_block         squeeze-excitation: GlobalAveragePool, 1x1 Conv + Relu,
                   1x1 Conv + HardSigmoid, Mul, on [1,576,7,7]
  gap              GlobalAveragePool [1,576,7,7] then Flatten
  avgpool3x3       AveragePool 3x3 stride 1 pad 1 [1,192,28,28] (googlenet)
  layernorm_s128   LayerNormalization over 768 of [1,128,768] (BERT-base)
  layernorm_s12    the same at sequence 12
  softmax_s128     Softmax over the last axis of [1,12,128,128]
  relu_s128        Relu of the same: what moving that tensor in and out
                   of a call costs, the floor of the softmax's time
  gelu_s128        Gelu (Erf form, as torch.onnx writes it) of [1,128,3072]
  attention_s128   scaled-dot-product attention, [1,12,128,64] Q, K, V:
                   MatMul, Mul by 1/8, Add mask, Softmax, MatMul
  attention_s12    the same at sequence 12
  decode_linears   one decode step's matrix-vector products of two layers of
                   bench/generate.sh's Llama (hidden 768, 4 of 12 heads for
                   K and V, MLP 2048): [1,768] times q, k, v, o, gate, up
                   (768 x 768/256/256/768/2048/2048) and down (2048 x 768),
                   chained through adds so that nothing is left out; 12.6 M
                   weights (50 MB) per call
  decode_linears_m4, _m16  the same for 4 and 16 rows (sequences decoding
                   at once)
  ffn_s12          BERT-base's feed-forward block at sequence 12: MatMul
                   768x3072 + bias, GELU (Erf form), MatMul 3072x768 + bias (12 rows:
                   below the 32 from which the matrix-product kernel takes
                   a product of a large weight)
  lm_head_tied     the same model's tied LM head as torch.onnx writes it:
                   MatMul([1,768], Transpose(embedding [32000,768]))

The layout is the zoo's (<case>/model.onnx and <case>/b1.in.<name>.npy):

  .venv-bench/bin/python bench/make_op_cases.py --out .cache/perfcpu/op-cases
  .venv-bench/bin/python bench/peers.py --runner bin/bench-runner \\
      --zoo .cache/perfcpu/op-cases --batches 1 --baselines xla

Weights and inputs come from fixed seeds.
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def rand(seed, *shape, scale=1.0):
    return (np.random.RandomState(seed).randn(*shape) * scale).astype(np.float32)


def model(name, nodes, inputs, outputs, inits=()):
    """Returns the opset-18 model of nodes; inputs are (name, dims), the
    outputs' dims come from shape inference."""
    def make(outs):
        graph = helper.make_graph(
            nodes, name, [helper.make_tensor_value_info(n, F, d) for n, d in inputs], outs,
            [numpy_helper.from_array(v, k) for k, v in inits])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 8
        return m
    inferred = onnx.shape_inference.infer_shapes(make([]), strict_mode=True)
    types = {v.name: v for v in inferred.graph.value_info}
    m = make([types[n] for n in outputs])
    onnx.checker.check_model(m)
    return m


def dw_hswish(c, side, k, stride):
    w, b = rand(1, c, 1, k, k, scale=0.3), rand(2, c, scale=0.1)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=c, kernel_shape=[k, k],
                              strides=[stride, stride], pads=[k // 2] * 4),
             helper.make_node("HardSwish", ["c"], ["y"])]
    return model("dw_hswish", nodes, [("x", [1, c, side, side])], ["y"], [("w", w), ("b", b)]), \
        {"x": rand(0, 1, c, side, side)}


def se_block(c, side, squeeze):
    inits = [("w1", rand(1, squeeze, c, 1, 1, scale=c ** -0.5)), ("b1", rand(2, squeeze, scale=0.1)),
             ("w2", rand(3, c, squeeze, 1, 1, scale=squeeze ** -0.5)), ("b2", rand(4, c, scale=0.1))]
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]),
             helper.make_node("Conv", ["p", "w1", "b1"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["r"]),
             helper.make_node("Conv", ["r", "w2", "b2"], ["s2"]),
             helper.make_node("HardSigmoid", ["s2"], ["g"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["x", "g"], ["y"])]
    return model("se_block", nodes, [("x", [1, c, side, side])], ["y"], inits), {"x": rand(0, 1, c, side, side)}


def gap(c, side):
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]), helper.make_node("Flatten", ["p"], ["y"])]
    return model("gap", nodes, [("x", [1, c, side, side])], ["y"]), {"x": rand(0, 1, c, side, side)}


def avgpool(c, side):
    nodes = [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[1, 1], pads=[1] * 4,
                              count_include_pad=0)]
    return model("avgpool", nodes, [("x", [1, c, side, side])], ["y"]), {"x": rand(0, 1, c, side, side)}


def layernorm(seq, hidden=768):
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-12)]
    inits = [("g", 1 + rand(1, hidden, scale=0.1)), ("b", rand(2, hidden, scale=0.1))]
    return model("layernorm", nodes, [("x", [1, seq, hidden])], ["y"], inits), {"x": rand(0, 1, seq, hidden)}


def softmax(seq, heads=12):
    nodes = [helper.make_node("Softmax", ["x"], ["y"], axis=-1)]
    return model("softmax", nodes, [("x", [1, heads, seq, seq])], ["y"]), {"x": rand(0, 1, heads, seq, seq)}


def relu(seq, heads=12):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    return model("relu", nodes, [("x", [1, heads, seq, seq])], ["y"]), {"x": rand(0, 1, heads, seq, seq)}


def gelu(seq, width=3072):
    inits = [("sqrt2", np.array(2 ** 0.5, np.float32)), ("one", np.array(1, np.float32)),
             ("half", np.array(0.5, np.float32))]
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    return model("gelu", nodes, [("x", [1, seq, width])], ["y"], inits), {"x": rand(0, 1, seq, width)}


def attention(seq, heads=12, dim=64):
    inits = [("scale", np.array(dim ** -0.5, np.float32))]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Add", ["ss", "mask"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    qkv = [(n, [1, heads, seq, dim]) for n in ("q", "k", "v")]
    feeds = {n: rand(i, 1, heads, seq, dim) for i, n in enumerate(("q", "k", "v"))}
    feeds["mask"] = np.zeros((1, 1, 1, seq), np.float32)
    return model("attention", nodes, qkv + [("mask", [1, 1, 1, seq])], ["y"], inits), feeds


def decode_linears(rows=1, layers=2, hidden=768, kv=256, mlp=2048):
    nodes, inits, x, seed = [], [], "x", 10
    for i in range(layers):
        outs = []
        for j, (k, n) in enumerate([(hidden, hidden), (hidden, kv), (hidden, kv), (hidden, hidden),
                                    (hidden, mlp), (hidden, mlp)]):
            w = f"w{i}_{j}"
            inits.append((w, rand(seed, k, n, scale=k ** -0.5)))
            seed += 1
            nodes.append(helper.make_node("MatMul", [x, w], [f"p{i}_{j}"]))
            outs.append(f"p{i}_{j}")
        # q+o back to hidden, gate*up down to hidden; k, v summed into the
        # first hidden-sized slice so that every product is used
        nodes += [helper.make_node("Mul", [outs[4], outs[5]], [f"g{i}"]),
                  helper.make_node("MatMul", [f"g{i}", f"wd{i}"], [f"d{i}"]),
                  helper.make_node("Add", [outs[1], outs[2]], [f"kv{i}"]),
                  helper.make_node("ReduceSum", [f"kv{i}"], [f"kvs{i}"], keepdims=1),
                  helper.make_node("Add", [outs[0], outs[3]], [f"qo{i}"]),
                  helper.make_node("Add", [f"qo{i}", f"d{i}"], [f"s{i}"]),
                  helper.make_node("Add", [f"s{i}", f"kvs{i}"], [f"h{i}"])]
        inits.append((f"wd{i}", rand(seed, mlp, hidden, scale=mlp ** -0.5)))
        seed += 1
        x = f"h{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    return model("decode_linears", nodes, [("x", [rows, hidden])], ["y"], inits), {"x": rand(0, rows, hidden)}


def ffn(seq, hidden=768, width=3072):
    inits = [("w1", rand(1, hidden, width, scale=hidden ** -0.5)), ("b1", rand(2, width, scale=0.1)),
             ("w2", rand(3, width, hidden, scale=width ** -0.5)), ("b2", rand(4, hidden, scale=0.1)),
             ("sqrt2", np.array(2 ** 0.5, np.float32)), ("one", np.array(1, np.float32)), ("half", np.array(0.5, np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Div", ["a1", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["ea"]), helper.make_node("Mul", ["a1", "ea"], ["gm"]),
             helper.make_node("Mul", ["gm", "half"], ["g"]),
             helper.make_node("MatMul", ["g", "w2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["y"])]
    return model("ffn", nodes, [("x", [1, seq, hidden])], ["y"], inits), {"x": rand(0, 1, seq, hidden)}


def lm_head_tied(hidden=768, vocab=32000):
    nodes = [helper.make_node("Transpose", ["emb"], ["t"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "t"], ["y"])]
    return model("lm_head_tied", nodes, [("x", [1, 1, hidden])], ["y"], [("emb", rand(1, vocab, hidden, scale=0.02))]), \
        {"x": rand(0, 1, 1, hidden)}


CASES = {
    "dw3x3_hswish": lambda: dw_hswish(96, 28, 3, 1),
    "dw5x5_hswish": lambda: dw_hswish(240, 28, 5, 2),
    "se_block": lambda: se_block(576, 7, 144),
    "gap": lambda: gap(576, 7),
    "avgpool3x3": lambda: avgpool(192, 28),
    "layernorm_s128": lambda: layernorm(128),
    "layernorm_s12": lambda: layernorm(12),
    "softmax_s128": lambda: softmax(128),
    "relu_s128": lambda: relu(128),
    "gelu_s128": lambda: gelu(128),
    "attention_s128": lambda: attention(128),
    "attention_s12": lambda: attention(12),
    "decode_linears": decode_linears,
    "decode_linears_m4": lambda: decode_linears(4),
    "decode_linears_m16": lambda: decode_linears(16),
    "ffn_s12": lambda: ffn(12),
    "lm_head_tied": lm_head_tied,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory to write <case>/model.onnx and b1.in.*.npy into")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset")
    args = ap.parse_args()
    for name in filter(None, args.cases.split(",")):
        m, feeds = CASES[name]()
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        onnx.save(m, os.path.join(d, "model.onnx"))
        for k, v in feeds.items():
            np.save(os.path.join(d, f"b1.in.{k}.npy"), v)
        print(f"wrote {d}")


if __name__ == "__main__":
    main()
