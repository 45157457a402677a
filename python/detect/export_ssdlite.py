"""Exports torchvision's ssdlite320_mobilenet_v3_large (random weights from a
fixed seed, no download) with its postprocess (box decoding, per-class score
filter and top-k, batched NMS, the top detections) to ONNX, and writes ONNX
Runtime's outputs for a fixed input next to it.

Pinned: torch 2.14.1, torchvision 0.29.2, onnx 1.19.1, onnxruntime 1.23.2,
numpy 2.2.6 (.venv-zoo, python/requirements-zoo.txt). The TorchScript
exporter (dynamo=False) is used: it emits torchvision's nms as ONNX
NonMaxSuppression. Run from the repository root (`make detect-model`):

	.venv-zoo/bin/python python/detect/export_ssdlite.py --out .cache/detect
"""
import argparse
import os

import numpy as np


def all_ops(graph):
    """The op types of graph and of its subgraphs (If branches, Loop bodies)."""
    ops = set()
    for n in graph.node:
        ops.add(n.op_type)
        for a in n.attribute:
            if a.g is not None and len(a.g.node):
                ops |= all_ops(a.g)
            for g in a.graphs:
                ops |= all_ops(g)
    return ops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".cache/detect")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import onnx
    import onnxruntime as ort
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)
    model.eval()

    class Detector(torch.nn.Module):
        """One image in, the first image's boxes, scores and labels out."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, image):
            d = self.m([image[0]])[0]
            return d["boxes"], d["scores"], d["labels"]

    det = Detector(model).eval()
    rng = np.random.default_rng(0)
    image = rng.uniform(0, 1, (1, 3, 320, 320)).astype(np.float32)
    path = os.path.join(args.out, "ssdlite320.onnx")
    tmp = path + ".tmp"
    with torch.no_grad():
        torch.onnx.export(det, (torch.from_numpy(image),), tmp, dynamo=False, opset_version=17,
                          input_names=["image"], output_names=["boxes", "scores", "labels"])
    m = onnx.load(tmp)
    onnx.checker.check_model(m)
    ops = sorted(all_ops(m.graph))
    assert "NonMaxSuppression" in ops, ops
    sess = ort.InferenceSession(tmp)
    boxes, scores, labels = sess.run(None, {"image": image})
    with torch.no_grad():
        tb, ts, tl = det(torch.from_numpy(image))
    print("ops:", " ".join(ops))
    print("nodes:", len(m.graph.node), "detections:", boxes.shape[0], "torch:", tb.shape[0])
    np.save(os.path.join(args.out, "ssdlite320.image.npy"), image)
    np.save(os.path.join(args.out, "ssdlite320.boxes.npy"), boxes)
    np.save(os.path.join(args.out, "ssdlite320.scores.npy"), scores)
    np.save(os.path.join(args.out, "ssdlite320.labels.npy"), labels)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
