"""Writes the model repository of the dynamic batching benchmark
(bench/batching.sh): ResNet-shaped CNNs and transformer encoder blocks
(python/onnx_models.py, fixed seeds), each twice, with batching on and off,
and one batch-1 input per model.

    .venv/bin/python bench/make_batching_models.py --out .cache/bench-batching

writes OUT/models/<name>_{batched,unbatched}/{1/model.onnx,config.yaml} and
OUT/inputs/<name>.<input>.npy for

    cnn             resnet_cnn on float32[batch, 3, 32, 32] (CIFAR-sized images)
    transformer     transformer_block on float32[batch, 32, 256] (32 tokens)
    cnn112          resnet_cnn on float32[batch, 3, 112, 112]
    transformer128  transformer_block on float32[batch, 128, 256]

and for each of them floor_<name>_unbatched, batching off, whose requests
cost the HTTP path and the client but almost no compute: on the same input
shape, x + 1 where the model's output has the input's shape (the
transformer: the same bytes in and out), else the sum of each row (one
float out per row, no more than the model's: its cost is not
overstated). bench/batching_ceiling.py bounds what batching can gain with
their throughput.

The two copies of a model are the same file; only batching.enabled differs,
so one server run measures both. Batch buckets are [1 2 4 8 16 32 64] (and
max_batch_size is left at its default, the largest bucket); warmup is eager
so that no compile lands in a measurement.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import onnx_models  # noqa: E402

BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64]

CONFIG = """# Written by bench/make_batching_models.py.
buckets:
  batch: {batch}{extra}
warmup: eager
batching:
  enabled: {enabled}
  max_queue_delay: {delay}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".cache/bench-batching")
    ap.add_argument("--max-queue-delay", default="2ms", help="batching.max_queue_delay of the batched copies")
    ap.add_argument("--models", default="cnn transformer cnn112 transformer128", help="the models to write, space-separated")
    args = ap.parse_args()
    rng = np.random.default_rng(11)
    models = {}
    for name, size in (("cnn", 32), ("cnn112", 112)):
        models[name] = (onnx_models.resnet_cnn(size=size), "",
                        {"image": rng.standard_normal((1, 3, size, size)).astype(np.float32)})
    for name, seq in (("transformer", 32), ("transformer128", 128)):
        models[name] = (onnx_models.transformer_block(), f"\n  seq: [{seq}]",
                        {"x": rng.standard_normal((1, seq, 256)).astype(np.float32)})
    unknown = set(args.models.split()) - set(models)
    if unknown:
        ap.error(f"unknown models {sorted(unknown)}; known: {sorted(models)}")
    os.makedirs(os.path.join(args.out, "inputs"), exist_ok=True)
    for name, (model, extra, inputs) in models.items():
        if name not in args.models.split():
            continue
        for suffix, enabled in (("batched", "true"), ("unbatched", "false")):
            d = os.path.join(args.out, "models", f"{name}_{suffix}")
            os.makedirs(os.path.join(d, "1"), exist_ok=True)
            onnx.save(model, os.path.join(d, "1", "model.onnx"))
            with open(os.path.join(d, "config.yaml"), "w") as f:
                f.write(CONFIG.format(batch=BATCH_BUCKETS, extra=extra, enabled=enabled, delay=args.max_queue_delay))
        for k, v in inputs.items():
            np.save(os.path.join(args.out, "inputs", f"{name}.{k}.npy"), v)
        write_floor(args.out, name, model, extra)
        print(f"wrote {name}_batched, {name}_unbatched and floor_{name}_unbatched under {args.out}/models")


def write_floor(out, name, model, extra):
    """Writes floor_<name>_unbatched: model's input, and x + 1 or each
    row's sum as output."""
    inp, res = model.graph.input[0], model.graph.output[0]
    dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
    same = dims == [d.dim_param or d.dim_value for d in res.type.tensor_type.shape.dim]
    x = helper.make_tensor_value_info(inp.name, TensorProto.FLOAT, dims)
    if same:
        one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
        node = helper.make_node("Add", [inp.name, "one"], ["y"])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    else:
        one = helper.make_tensor("axes", TensorProto.INT64, [len(dims) - 1], list(range(1, len(dims))))
        node = helper.make_node("ReduceSum", [inp.name, "axes"], ["y"], keepdims=0)
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims[:1])
    graph = helper.make_graph([node], "floor_" + name, [x], [y], [one])
    floor = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    floor.ir_version = 8
    onnx.checker.check_model(floor)
    d = os.path.join(out, "models", f"floor_{name}_unbatched")
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    onnx.save(floor, os.path.join(d, "1", "model.onnx"))
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write(CONFIG.format(batch=BATCH_BUCKETS, extra=extra, enabled="false", delay="2ms"))


if __name__ == "__main__":
    main()
