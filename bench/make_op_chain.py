"""make_op_chain.py writes models that measure the cost of one operator call.

Each model chains many tiny operators, so that the time of a call is almost
all per-operator overhead (dispatch, argument handling), not arithmetic:

  conv_chain64  64 x (1x1 Conv 16->16 + Relu) on float32[N,16,8,8]: 16K
                multiply-adds each; xserve runs each as one CPU kernel call
                (the Relu fused), ONNX Runtime as one fused Conv.
  add_chain64   64 x (Add x+x, Sin) on the same input: elementwise only;
                XLA fuses the chain into one loop.

The layout is the zoo's (<model>/model.onnx and <model>/b1.in.x.npy), so
bench/peers.py times them against ONNX Runtime and OpenVINO:

  .venv-bench/bin/python bench/make_op_chain.py --out .cache/op-chain
  .venv-bench/bin/python bench/peers.py --runner bin/bench-runner \\
      --zoo .cache/op-chain --batches 1 --baselines ""

Weights and inputs come from fixed seeds.
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LINKS = 64
CHANNELS = 16
SIDE = 8


def chain(kind: str) -> onnx.ModelProto:
    """Returns the chain model of kind "conv" or "add"."""
    nodes, inits = [], []
    prev = "x"
    for i in range(LINKS):
        if kind == "conv":
            w = np.random.RandomState(i).randn(CHANNELS, CHANNELS, 1, 1).astype(np.float32) * 0.2
            inits.append(numpy_helper.from_array(w, f"w{i}"))
            nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"]))
            nodes.append(helper.make_node("Relu", [f"c{i}"], [f"y{i}"]))
        else:
            nodes.append(helper.make_node("Add", [prev, prev], [f"c{i}"]))
            nodes.append(helper.make_node("Sin", [f"c{i}"], [f"y{i}"]))
        prev = f"y{i}"
    graph = helper.make_graph(
        nodes,
        f"{kind}_chain{LINKS}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", CHANNELS, SIDE, SIDE])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["N", CHANNELS, SIDE, SIDE])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory to write <model>/model.onnx and b1.in.x.npy into")
    args = ap.parse_args()
    x = np.random.RandomState(0).randn(1, CHANNELS, SIDE, SIDE).astype(np.float32)
    for kind in ("conv", "add"):
        d = os.path.join(args.out, f"{kind}_chain{LINKS}")
        os.makedirs(d, exist_ok=True)
        onnx.save(chain(kind), os.path.join(d, "model.onnx"))
        np.save(os.path.join(d, "b1.in.x.npy"), x)
        print(f"wrote {d}")


if __name__ == "__main__":
    main()
