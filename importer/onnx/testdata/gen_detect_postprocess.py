"""Generates detect_postprocess.onnx: torchvision's detection postprocess
(as in SSD's postprocess_detections) on its own, small: per class a score
filter, top-k of a run-time size, then batched NMS over every class's boxes
(more than 256, so xserve's greedy while_loop NMS) and the best detections
gathered. Exported with the TorchScript exporter (dynamo=False), which
emits torchvision's nms as NonMaxSuppression, inside torchvision's
"no boxes" If. Also detect_postprocess.json: ONNX Runtime's outputs for
three random inputs (one with few boxes above the threshold).

Pinned: torch 2.14.1, torchvision 0.29.2, onnx 1.19.1, onnxruntime 1.23.2
(.venv-zoo). Run from the repository root:

	.venv-zoo/bin/python importer/onnx/testdata/gen_detect_postprocess.py
"""
import json

import numpy as np
import onnxruntime as ort
import torch
import torchvision
from torchvision.models.detection._utils import _topk_min

OUT = "importer/onnx/testdata/detect_postprocess.onnx"
REF = "importer/onnx/testdata/detect_postprocess.json"
N, C = 160, 4


class Postprocess(torch.nn.Module):
    def forward(self, boxes, scores):
        # boxes [N,4], scores [N,C] (class 0 is the background).
        out_boxes, out_scores, out_labels = [], [], []
        for label in range(1, C):
            score = scores[:, label]
            keep = score > 0.3
            score = score[keep]
            box = boxes[keep]
            k = _topk_min(score, 100, 0)  # traceable min(100, size)
            score, idx = score.topk(k)
            out_boxes.append(box[idx])
            out_scores.append(score)
            out_labels.append(torch.full_like(score, label, dtype=torch.int64))
        b = torch.cat(out_boxes, dim=0)
        s = torch.cat(out_scores, dim=0)
        lab = torch.cat(out_labels, dim=0)
        keep = torchvision.ops.boxes.batched_nms(b, s, lab, 0.5)
        keep = keep[:50]
        return b[keep], s[keep], lab[keep], b.max(dim=0).values


rng = np.random.default_rng(0)


def inputs(few):
    corner = rng.uniform(0, 50, (N, 2))
    size = rng.uniform(2, 12, (N, 2))
    boxes = np.concatenate([corner, corner + size], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, (N, C)).astype(np.float32)
    if few:
        scores *= 0.31
    return boxes, scores


boxes, scores = inputs(False)
torch.onnx.export(Postprocess(), (torch.from_numpy(boxes), torch.from_numpy(scores)), OUT, dynamo=False,
                  opset_version=17, input_names=["boxes", "scores"],
                  output_names=["det_boxes", "det_scores", "det_labels", "max_corner"])
sess = ort.InferenceSession(OUT)
cases = []
for few in (False, False, True):
    if cases:
        boxes, scores = inputs(few)
    outs = sess.run(None, {"boxes": boxes, "scores": scores})
    cases.append({"boxes": boxes.ravel().tolist(), "scores": scores.ravel().tolist(),
                  "outputs": [{"shape": list(o.shape), "values": o.ravel().tolist()} for o in outs]})
with open(REF, "w") as f:
    json.dump({"cases": cases}, f)
print([[c["outputs"][i]["shape"] for i in range(4)] for c in cases])
