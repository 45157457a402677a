"""Exports small torchvision detectors (Faster R-CNN, Mask R-CNN, RetinaNet,
FCOS on a small backbone with an FPN, and an SSD on a small VGG-like
backbone: torchvision's own detection classes, preprocessing and
postprocessing; random weights from a fixed seed, no download) to ONNX with
dynamic image height and width, and writes ONNX Runtime's outputs for images
of a size other than the export example's. The SSD resizes every image to
its fixed 96x96 input; its boxes are scaled back to the image's size.

The heads' last layers get weights large enough that scores differ (the
classes' default prior initialization gives every anchor a score of 0.01,
and their order would be decided by rounding). Each model is also run in
torch eager and the largest difference from ONNX Runtime printed.

Pinned: torch 2.14.1, torchvision 0.29.2, onnx 1.19.1, onnxruntime 1.23.2,
numpy 2.2.6 (.venv-zoo, python/requirements-zoo.txt). The TorchScript
exporter (dynamo=False) is used: it emits torchvision's nms as ONNX
NonMaxSuppression and roi_align as RoiAlign. Run from the repository root
(`make detect-model`):

	.venv-zoo/bin/python python/detect/export_detectors.py --out .cache/detect

Files: <family>.onnx, <family>.image.<H>x<W>.npy and
<family>.<output>.<H>x<W>.npy (ONNX Runtime's outputs) per size.
"""
import argparse
import os

import numpy as np

FAMILIES = ["fasterrcnn", "maskrcnn", "retinanet", "fcos", "ssd"]
EXPORT_SIZE = (96, 128)
SIZES = [(120, 100)]
CHANNELS = 32


def build(family):
    from torch import nn
    from torchvision.models.detection import FCOS, FasterRCNN, MaskRCNN, RetinaNet
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.backbone_utils import BackboneWithFPN
    from torchvision.ops import MultiScaleRoIAlign
    from torchvision.ops.feature_pyramid_network import LastLevelMaxPool, LastLevelP6P7

    class Body(nn.Module):
        """Four stride-2 conv blocks: features at strides 8, 16 and 32."""

        def __init__(self):
            super().__init__()

            def blk(i, o):
                return nn.Sequential(nn.Conv2d(i, o, 3, 2, 1), nn.BatchNorm2d(o), nn.ReLU())

            self.c1 = nn.Sequential(blk(3, 8), blk(8, 8))
            self.c2 = blk(8, 16)
            self.c3 = blk(16, 16)
            self.c4 = blk(16, 32)

        def forward(self, x):
            return self.c4(self.c3(self.c2(self.c1(x))))

    def backbone(extra):
        return BackboneWithFPN(Body(), {"c2": "0", "c3": "1", "c4": "2"}, [16, 16, 32], CHANNELS, extra_blocks=extra)

    common = dict(min_size=128, max_size=192, image_mean=[0.5] * 3, image_std=[0.25] * 3)
    if family in ("fasterrcnn", "maskrcnn"):
        from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
        from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
        anchors = AnchorGenerator(((16,), (32,), (64,), (128,)), ((0.5, 1.0, 2.0),) * 4)
        rcnn = dict(rpn_anchor_generator=anchors, box_roi_pool=MultiScaleRoIAlign(["0", "1", "2"], 7, 2),
                    box_head=TwoMLPHead(CHANNELS * 49, 16), box_predictor=FastRCNNPredictor(16, 5),
                    rpn_pre_nms_top_n_test=100, rpn_post_nms_top_n_test=50, box_detections_per_img=20,
                    box_score_thresh=0.05, **common)
        if family == "fasterrcnn":
            return FasterRCNN(backbone(LastLevelMaxPool()), **rcnn)
        return MaskRCNN(backbone(LastLevelMaxPool()), mask_roi_pool=MultiScaleRoIAlign(["0", "1", "2"], 14, 2),
                        mask_head=MaskRCNNHeads(CHANNELS, (8, 8), 1), mask_predictor=MaskRCNNPredictor(8, 8, 5), **rcnn)
    if family == "retinanet":
        from torchvision.models.detection.retinanet import RetinaNetHead
        anchors = AnchorGenerator(tuple((s,) for s in (16, 32, 64, 128, 256)), ((0.5, 1.0, 2.0),) * 5)
        return RetinaNet(backbone(LastLevelP6P7(CHANNELS, CHANNELS)), 5, anchor_generator=anchors,
                         head=RetinaNetHead(CHANNELS, 3, 5), topk_candidates=50, detections_per_img=20,
                         score_thresh=0.05, **common)
    if family == "ssd":
        return ssd(common)
    if family == "fcos":
        from torchvision.models.detection.fcos import FCOSHead
        anchors = AnchorGenerator(tuple((s,) for s in (8, 16, 32, 64, 128)), ((1.0,),) * 5)
        return FCOS(backbone(LastLevelP6P7(CHANNELS, CHANNELS)), 5, anchor_generator=anchors,
                    head=FCOSHead(CHANNELS, 1, 5, num_convs=1), topk_candidates=50, detections_per_img=20,
                    score_thresh=0.05, **common)
    raise ValueError(family)


def ssd(common):
    """torchvision's SSD (DefaultBoxGenerator, SSDHead) on a VGG-like body
    with three feature maps, at a fixed 96x96 input."""
    from collections import OrderedDict

    from torch import nn
    from torchvision.models.detection.anchor_utils import DefaultBoxGenerator
    from torchvision.models.detection.ssd import SSD, SSDHead

    class Body(nn.Module):
        """Stride-2 conv blocks: feature maps at strides 8, 16 and 32."""

        def __init__(self):
            super().__init__()

            def blk(i, o):
                return nn.Sequential(nn.Conv2d(i, o, 3, 2, 1), nn.BatchNorm2d(o), nn.ReLU())

            self.c1 = nn.Sequential(blk(3, 8), blk(8, 16), blk(16, 16))
            self.c2 = blk(16, 32)
            self.c3 = blk(32, 32)

        def forward(self, x):
            a = self.c1(x)
            b = self.c2(a)
            return OrderedDict([("0", a), ("1", b), ("2", self.c3(b))])

    anchors = DefaultBoxGenerator([[2], [2, 3], [2]])
    head = SSDHead([16, 32, 32], anchors.num_anchors_per_location(), 5)
    return SSD(Body(), anchors, (96, 96), 5, head=head, image_mean=common["image_mean"], image_std=common["image_std"],
               score_thresh=0.05, detections_per_img=20, topk_candidates=50)


def spread_heads(model, gen):
    """Gives the heads' layers weights of unit-scale outputs, so that scores
    and box deltas differ between anchors."""
    import torch
    for name, mod in model.named_modules():
        if not any(k in name for k in ("head", "predictor", "rpn")):
            continue
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            fan_in = mod.weight[0].numel()
            with torch.no_grad():
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen) / fan_in ** 0.5)
                if mod.bias is not None:
                    mod.bias.copy_(torch.randn(mod.bias.shape, generator=gen) * 0.5)


def export_onnx(family, path):
    """Builds family's detector (seeded) and exports it to path with a
    dynamic image height and width; returns the torch module (one [3, H, W]
    image in, its detections out) and its output names."""
    import onnx
    import torch

    torch.manual_seed(0)
    model = build(family).eval()
    spread_heads(model, torch.Generator().manual_seed(1))
    outputs = ["boxes", "scores", "labels"] + (["masks"] if family == "maskrcnn" else [])

    class Detector(torch.nn.Module):
        """One [3, H, W] image in, its detections out."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, image):
            d = self.m([image])[0]
            return tuple(d[k] for k in outputs)

    det = Detector(model).eval()
    rng = np.random.default_rng(0)
    example = torch.from_numpy(rng.uniform(0, 1, (3,) + EXPORT_SIZE).astype(np.float32))
    with torch.no_grad():
        torch.onnx.export(det, (example,), path, dynamo=False, opset_version=17, input_names=["image"],
                          output_names=outputs,
                          dynamic_axes={"image": {1: "height", 2: "width"}, **{o: {0: "detections"} for o in outputs}})
    onnx.checker.check_model(onnx.load(path))
    return det, outputs


def reference(family, path, det, image):
    """ONNX Runtime's outputs of the model at path for image, asserted to
    hold detections and to equal torch eager's (det)."""
    import onnxruntime as ort
    import torch

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    refs = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, {"image": image})
    with torch.no_grad():
        eager = det(torch.from_numpy(image))
    diffs = [float(np.abs(r - e.numpy()).max()) if r.size else 0.0 for r, e in zip(refs, eager)]
    h, w = image.shape[1:]
    print(family, f"{h}x{w}", "detections:", refs[0].shape[0], "ORT vs torch:", diffs)
    assert refs[0].shape[0] > 0, "no detections: the test would prove little"
    assert max(diffs) < 1e-3, f"{family}: ONNX Runtime differs from torch at {h}x{w}: {diffs}"
    return refs


def export(family, out):
    path = os.path.join(out, family + ".onnx")
    tmp = path + ".tmp"
    det, outputs = export_onnx(family, tmp)
    rng = np.random.default_rng(0)
    rng.uniform(0, 1, (3,) + EXPORT_SIZE)  # the export example's draw: the images stay as they were
    for h, w in SIZES:
        image = rng.uniform(0, 1, (3, h, w)).astype(np.float32)
        refs = reference(family, tmp, det, image)
        np.save(os.path.join(out, f"{family}.image.{h}x{w}.npy"), image)
        for name, r in zip(outputs, refs):
            np.save(os.path.join(out, f"{family}.{name}.{h}x{w}.npy"), r)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".cache/detect")
    ap.add_argument("--only", default="", help="comma-separated families (default: all)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for family in (args.only.split(",") if args.only else FAMILIES):
        export(family, args.out)


if __name__ == "__main__":
    main()
