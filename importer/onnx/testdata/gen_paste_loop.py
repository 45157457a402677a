"""Generates paste_loop.onnx: torchvision's own mask pasting
(roi_heads.paste_masks_in_image, whose ONNX form is the Loop of
_onnx_paste_masks_in_image_loop) after a score filter, exported by torch.onnx
(TorchScript exporter, dynamo=False, as torchvision's detectors are). The
Loop runs over the filter's run-time count; its body resizes mask i to its
box's size (Resize with run-time sizes), slices it by the box's corners
clipped to the image and pads it with zeros to the image (ConstantOfShape
of run-time sizes, Concat): values whose sizes follow the data along two
axes. Also paste_loop.json: ONNX Runtime's outputs for five inputs (boxes
partly outside the image; one with no score above the threshold: no
iteration; one of boxes outside the image, degenerate or larger than it).

Pinned: torch 2.14.1, torchvision 0.29.2, onnx 1.19.1, onnxruntime 1.23.2,
numpy (.venv-zoo). Run from the repository root:

	.venv-zoo/bin/python importer/onnx/testdata/gen_paste_loop.py
"""
import json

import numpy as np
import onnxruntime as ort
import torch
from torchvision.models.detection.roi_heads import paste_masks_in_image

OUT = "importer/onnx/testdata/paste_loop.onnx"
REF = "importer/onnx/testdata/paste_loop.json"
N, M, H, W = 6, 8, 24, 20


class Paste(torch.nn.Module):
    def forward(self, masks, boxes, scores):
        keep = scores > 0.5
        return paste_masks_in_image(masks[keep], boxes[keep], (H, W), padding=1)


def inputs(rng, scale):
    masks = rng.uniform(0, 1, (N, 1, M, M)).astype(np.float32)
    xy = rng.uniform(-4, 18, (N, 2))
    wh = rng.uniform(1, 12, (N, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = (rng.uniform(0, 1, N) * scale).astype(np.float32)
    return masks, boxes, scores


def main():
    rng = np.random.default_rng(0)
    example = [torch.from_numpy(a) for a in inputs(rng, 1.0)]
    torch.onnx.export(Paste(), tuple(example), OUT, dynamo=False, opset_version=17,
                      input_names=["masks", "boxes", "scores"], output_names=["pasted"])
    sess = ort.InferenceSession(OUT, providers=["CPUExecutionProvider"])
    cases = []
    edge = np.array([[30, 30, 35, 36], [3, 25, 8, 27], [5, 5, 5, 5], [22, 23, 26, 29],
                     [-10, -10, -6, -7], [-3, -2, 30, 40]], np.float32)  # outside, degenerate, larger
    for scale in (1.0, 1.0, 1.0, 0.4, "edge"):
        if scale == "edge":
            masks, boxes, scores = inputs(rng, 1.0)[0], edge, np.ones(N, np.float32)
        else:
            masks, boxes, scores = inputs(rng, scale)
        (out,) = sess.run(None, {"masks": masks, "boxes": boxes, "scores": scores})
        if scale != "edge":  # torch eager itself fails on some of the edge boxes
            eager = Paste()(torch.from_numpy(masks), torch.from_numpy(boxes), torch.from_numpy(scores)).numpy()
            assert out.shape == eager.shape and np.abs(out - eager).max(initial=0) < 1e-5, "ORT differs from torch"
        cases.append({"inputs": [a.ravel().tolist() for a in (masks, boxes, scores)],
                      "output": {"shape": list(out.shape), "values": out.ravel().tolist()}})
    with open(REF, "w") as f:
        json.dump({"cases": cases}, f)
    print([c["output"]["shape"] for c in cases])


if __name__ == "__main__":
    main()
