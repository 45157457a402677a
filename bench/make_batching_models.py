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

and, whatever --models says, floor_unbatched: y = x + 1 on float32[batch,
16], batching off, whose requests cost the HTTP path and the client but
almost no compute; bench/batching_ceiling.py bounds what batching can
gain with its throughput.

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
        print(f"wrote {name}_batched and {name}_unbatched under {args.out}/models")
    write_floor(args.out)


def write_floor(out):
    """Writes floor_unbatched (y = x + 1 on float32[batch, 16]) and its input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    graph = helper.make_graph([helper.make_node("Add", ["x", "one"], ["y"])], "floor", [x], [y], [one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    d = os.path.join(out, "models", "floor_unbatched")
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    onnx.save(model, os.path.join(d, "1", "model.onnx"))
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write(CONFIG.format(batch=BATCH_BUCKETS, extra="", enabled="false", delay="2ms"))
    np.save(os.path.join(out, "inputs", "floor.x.npy"), np.ones((1, 16), np.float32))
    print(f"wrote floor_unbatched under {out}/models")


if __name__ == "__main__":
    main()
