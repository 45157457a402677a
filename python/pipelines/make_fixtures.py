"""Fixtures of the pipeline tests (testdata/pipelines), each with the outputs
of the frameworks xserve's pipelines must equal:

  ensemble/    a Triton repository as Triton users write it (config.pbtxt
               files, committed beside this script's outputs): a
               preprocessing ONNX graph (uint8 HWC -> normalized float CHW,
               onnx.helper) feeding a small CNN (torch.onnx.export), and the
               ensemble chaining them. ref: ONNX Runtime running the two
               models one after the other.
  builtins/    a float image batch and torch's bilinear and nearest
               interpolate and torchvision's CenterCrop of it, for the
               resize and center_crop built-ins.
  classifier/  a small CNN trained here for a few seconds on drawn shapes
               (torch.export, model.pt2), its labels, JPEG and PNG pictures,
               and what torchvision's preprocessing (decode_image, ToDtype,
               Resize with antialiasing, CenterCrop, Normalize) + the model +
               softmax + top-5 give for each picture.
  ocr/         a picture of text and what rapidocr's three models (PP-OCRv4
               det, mobile v2 cls, PP-OCRv4 rec, from the pinned
               rapidocr-onnxruntime wheel) give when run separately in ONNX
               Runtime with the glue docs/PIPELINES.md describes (boxes from
               the detector's map, per-box crops, the angle flip, CTC),
               written here with numpy, scipy.ndimage and torch's
               interpolate. The models stay in .cache (make
               realmodels-small); the rec model's characters become
               ocr/ocr/ppocr_keys.txt, beside the pipeline's config.yaml.

Pinned: torch 2.14.1, torchvision 0.29.2, onnx 1.19.1, onnxruntime 1.23.2,
numpy 2.2.6, scipy 1.17.1, pillow 13.0.0 (.venv-zoo,
python/requirements-zoo.txt). Run from the repository root (make
pipeline-fixtures):

    .venv-zoo/bin/python python/pipelines/make_fixtures.py --out testdata/pipelines
"""
import argparse
import io
import json
import math
import os
import sys

import numpy as np

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def ort_session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


# ---- ensemble: a preprocessing ONNX graph feeding a CNN ----

def preprocess_onnx(path):
    import onnx
    from onnx import TensorProto, helper
    mean = np.array(MEAN, np.float32).reshape(1, 1, 1, 3)
    std = np.array(STD, np.float32).reshape(1, 1, 1, 3)
    nodes = [
        helper.make_node("Cast", ["raw"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["f", "c255"], ["scaled"]),
        helper.make_node("Sub", ["scaled", "mean"], ["centered"]),
        helper.make_node("Div", ["centered", "std"], ["normalized"]),
        helper.make_node("Transpose", ["normalized"], ["pixels"], perm=[0, 3, 1, 2]),
    ]
    inits = [helper.make_tensor("c255", TensorProto.FLOAT, [], [255.0]),
             helper.make_tensor("mean", TensorProto.FLOAT, mean.shape, mean.ravel()),
             helper.make_tensor("std", TensorProto.FLOAT, std.shape, std.ravel())]
    g = helper.make_graph(nodes, "preprocess",
                          [helper.make_tensor_value_info("raw", TensorProto.UINT8, ["N", 32, 32, 3])],
                          [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["N", 3, 32, 32])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_fixtures.py", ir_version=8)
    onnx.checker.check_model(m)
    onnx.save(m, path)


def small_cnn(classes, softmax):
    import torch
    from torch import nn

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                nn.AdaptiveAvgPool2d(1))
            self.fc = nn.Linear(64, classes)

        def forward(self, x):
            y = self.fc(torch.flatten(self.features(x), 1))
            return torch.softmax(y, dim=1) if softmax else y

    return CNN()


def make_ensemble(out):
    import torch
    d = os.path.join(out, "ensemble")
    for m in ("preprocess", "cnn"):
        os.makedirs(os.path.join(d, m, "1"), exist_ok=True)
    preprocess_onnx(os.path.join(d, "preprocess", "1", "model.onnx"))
    torch.manual_seed(0)
    cnn = small_cnn(10, softmax=True).eval()
    with torch.no_grad():  # running statistics that are not the identity
        for mod in cnn.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
    path = os.path.join(d, "cnn", "1", "model.onnx")
    torch.onnx.export(cnn, (torch.randn(2, 3, 32, 32),), path, dynamo=False, opset_version=17,
                      input_names=["input"], output_names=["probs"],
                      dynamic_axes={"input": {0: "N"}, "probs": {0: "N"}})
    raw = np.random.default_rng(1).integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    pre, net = ort_session(os.path.join(d, "preprocess", "1", "model.onnx")), ort_session(path)
    pixels = pre.run(None, {"raw": raw})[0]
    probs = net.run(None, {"input": pixels})[0]
    np.save(os.path.join(d, "in.IMAGE.npy"), raw)
    np.save(os.path.join(d, "ref.PROBS.npy"), probs)
    print(f"ensemble: preprocess + cnn, ONNX Runtime reference {probs.shape}")


# ---- builtins: the device built-ins resize and center_crop ----

def make_builtins(out):
    """A float image batch and what torch's interpolate (bilinear and
    nearest, align_corners=False) and torchvision's CenterCrop make of it."""
    import torch
    import torch.nn.functional as F
    from torchvision.transforms import v2
    d = os.path.join(out, "builtins")
    os.makedirs(d, exist_ok=True)
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((2, 3, 30, 40), dtype=np.float32))
    bilinear = F.interpolate(x, size=(21, 52), mode="bilinear", align_corners=False, antialias=False)
    nearest = F.interpolate(x, size=(21, 52), mode="nearest")
    crop = v2.CenterCrop((15, 31))(bilinear)
    for name, t in {"x": x, "bilinear": bilinear, "nearest": nearest, "crop": crop}.items():
        np.save(os.path.join(d, f"{name}.npy"), t.numpy())
    print(f"builtins: {tuple(x.shape)} -> bilinear/nearest {tuple(bilinear.shape)}, crop {tuple(crop.shape)}")


# ---- classifier: JPEG bytes in, top-5 labels out ----

SHAPES = ["circle", "square", "triangle"]
COLORS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220)}
LABELS = [f"{c} {s}" for s in SHAPES for c in COLORS] + ["empty"]


def draw(rng, label, w, h):
    from PIL import Image, ImageDraw
    bg = tuple(int(v) for v in rng.integers(150, 256, 3))
    img = Image.new("RGB", (w, h), bg)
    noise = rng.integers(-20, 21, (h, w, 3))
    img = Image.fromarray(np.clip(np.asarray(img, np.int16) + noise, 0, 255).astype(np.uint8))
    if label == "empty":
        return img
    color_name, shape = label.split(" ")
    color = COLORS[color_name]
    dr = ImageDraw.Draw(img)
    s = int(min(w, h) * rng.uniform(0.35, 0.6))
    cx, cy = w / 2 + rng.uniform(-0.1, 0.1) * w, h / 2 + rng.uniform(-0.1, 0.1) * h
    box = [cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2]
    if shape == "circle":
        dr.ellipse(box, fill=color)
    elif shape == "square":
        dr.rectangle(box, fill=color)
    else:
        dr.polygon([(cx, cy - s / 2), (cx - s / 2, cy + s / 2), (cx + s / 2, cy + s / 2)], fill=color)
    return img


def preprocess(jpeg_bytes):
    """torchvision's preprocessing of an encoded picture."""
    import torch
    from torchvision.io import decode_image
    from torchvision.transforms import v2
    t = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Resize(72, antialias=True), v2.CenterCrop(64),
                    v2.Normalize(MEAN, STD)])
    return t(decode_image(torch.frombuffer(bytearray(jpeg_bytes), dtype=torch.uint8)))


def make_classifier(out):
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    model = small_cnn(len(LABELS), softmax=False)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(240):
        labels = rng.integers(0, len(LABELS), 32)
        batch = []
        for k in labels:
            w, h = int(rng.integers(70, 130)), int(rng.integers(70, 130))
            buf = io.BytesIO()
            draw(rng, LABELS[k], w, h).save(buf, "PNG")
            batch.append(preprocess(buf.getvalue()))
        loss = torch.nn.functional.cross_entropy(model(torch.stack(batch)), torch.as_tensor(labels))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    print(f"classifier: trained, last loss {loss.item():.4f}")

    d = os.path.join(out, "classifier")
    os.makedirs(os.path.join(d, "shapes_cnn", "1"), exist_ok=True)
    os.makedirs(os.path.join(d, "classify"), exist_ok=True)
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(model, (torch.randn(2, 3, 64, 64),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(ep.run_decompositions(), os.path.join(d, "shapes_cnn", "1", "model.pt2"))
    with open(os.path.join(d, "classify", "labels.txt"), "w") as f:
        f.write("\n".join(LABELS) + "\n")

    pics = [("red circle", 96, 80, "jpeg"), ("blue triangle", 120, 150, "jpeg"), ("green square", 100, 100, "png"),
            ("blue square", 72, 90, "jpeg"), ("empty", 110, 84, "png")]
    rng = np.random.default_rng(7)
    ref = []
    for i, (label, w, h, fmt) in enumerate(pics):
        buf = io.BytesIO()
        draw(rng, label, w, h).save(buf, fmt.upper(), **({"quality": 92} if fmt == "jpeg" else {}))
        name = f"pic{i}.{'jpg' if fmt == 'jpeg' else 'png'}"
        with open(os.path.join(d, name), "wb") as f:
            f.write(buf.getvalue())
        with torch.no_grad():
            probs = torch.softmax(model(preprocess(buf.getvalue())[None]), dim=1)[0]
        top = torch.topk(probs, 5)
        ref.append({"file": name, "drawn": label, "labels": [LABELS[k] for k in top.indices.tolist()],
                    "scores": top.values.tolist()})
        gaps = np.diff(-top.values.numpy())
        print(f"  {name}: {ref[-1]['labels'][:2]} {[round(s, 4) for s in ref[-1]['scores'][:2]]} min gap {gaps.min():.2e}")
    with open(os.path.join(d, "ref.json"), "w") as f:
        json.dump(ref, f, indent=1)


# ---- ocr: rapidocr's det -> cls -> rec with the glue of docs/PIPELINES.md ----

WHEEL = ("rapidocr_onnxruntime-1.4.4-py3-none-any.whl", "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf")
OCR_MODELS = {"det": "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
              "cls": "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
              "rec": "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"}
# The glue's parameters, as ocr/ocr/config.yaml gives them.
THRESH, BOX_THRESH, UNCLIP, MIN_SIZE = 0.3, 0.5, 1.6, 3
FLIP_THRESHOLD = 0.9


def ocr_models(cache):
    import hashlib
    import zipfile
    wheel = os.path.join(cache, "packages", WHEEL[0])
    if not os.path.exists(wheel):
        sys.exit(f"{wheel} is missing: run make realmodels-small")
    if hashlib.sha256(open(wheel, "rb").read()).hexdigest() != WHEEL[1]:
        sys.exit(f"{wheel}: sha256 mismatch")
    with zipfile.ZipFile(wheel) as z:
        return {k: z.read(v) for k, v in OCR_MODELS.items()}


def text_picture():
    from PIL import Image, ImageDraw, ImageFont
    img = Image.new("RGB", (320, 96), (255, 255, 255))
    dr = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=26)
    dr.text((12, 8), "xserve pipelines 42", fill=(10, 10, 10), font=font)
    line = Image.new("RGB", (200, 40), (255, 255, 255))
    ImageDraw.Draw(line).text((6, 4), "upside down", fill=(20, 20, 20), font=font)
    img.paste(line.rotate(180), (60, 50))
    return img


def resize(region, h, w):
    """torch's bilinear interpolate (half-pixel centers, no antialiasing)
    of an HWC float region."""
    import torch
    t = torch.from_numpy(np.ascontiguousarray(region.transpose(2, 0, 1)))[None]
    return torch.nn.functional.interpolate(t, size=(h, w), mode="bilinear", align_corners=False,
                                           antialias=False)[0].numpy()


def boxes_from_map(prob):
    from scipy import ndimage
    p = prob.astype(np.float64)
    labels, _ = ndimage.label(p > THRESH, structure=np.ones((3, 3)))
    out = []
    for sl in ndimage.find_objects(labels):
        y0, y1, x0, x1 = sl[0].start, sl[0].stop, sl[1].start, sl[1].stop
        w, h = x1 - x0, y1 - y0
        score = p[y0:y1, x0:x1].mean()
        if score < BOX_THRESH or w < MIN_SIZE or h < MIN_SIZE:
            continue
        dd = w * h * UNCLIP / (2 * (w + h))
        H, W = p.shape
        out.append((0, max(0, math.floor(x0 - dd)), max(0, math.floor(y0 - dd)),
                    min(W, math.ceil(x1 + dd)), min(H, math.ceil(y1 + dd)), score))
    out.sort(key=lambda b: (b[0], b[2], b[1], -b[5]))
    return out


def crop(image, box, h, w, flip):
    _, x0, y0, x1, y1 = box[:5]
    region = image[y0:y1, x0:x1].astype(np.float32)
    if flip:
        region = region[::-1, ::-1]
    rw = min(w, math.ceil(h * (x1 - x0) / (y1 - y0)))
    r = resize(region, h, rw)
    r = (r * np.float32(1 / 255) - np.float32(0.5)) / np.float32(0.5)
    outp = np.zeros((3, h, w), np.float32)
    outp[:, :, :rw] = r
    return outp


def check_margin(what, values, edge, margin):
    gap = np.abs(np.asarray(values, np.float64) - edge).min() if len(values) else np.inf
    if gap < margin:
        sys.exit(f"ocr: {what} within {gap:.2e} of {edge}: the reference would rest on rounding; change the picture")


def make_ocr(out, cache):
    d = os.path.join(out, "ocr")
    os.makedirs(d, exist_ok=True)
    models = ocr_models(cache)
    import onnx
    keys = {p.key: p.value for p in onnx.load_from_string(models["rec"]).metadata_props}["character"].splitlines()
    labels = ["blank"] + keys + [" "]
    os.makedirs(os.path.join(d, "ocr"), exist_ok=True)  # the pipeline's model directory (config.yaml is committed)
    with open(os.path.join(d, "ocr", "ppocr_keys.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(labels) + "\n")
    buf = io.BytesIO()
    text_picture().save(buf, "PNG")
    png = buf.getvalue()
    with open(os.path.join(d, "text.png"), "wb") as f:
        f.write(png)

    import onnxruntime as ort
    sess = {k: ort.InferenceSession(v, providers=["CPUExecutionProvider"]) for k, v in models.items()}
    from PIL import Image
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))[:, :, ::-1].copy()  # BGR, as the models read
    x = ((image.astype(np.float32) * np.float32(1 / 255) - np.float32(0.5)) / np.float32(0.5)).transpose(2, 0, 1)[None]
    prob = sess["det"].run(None, {"x": x})[0][0, 0]
    check_margin("a detector pixel", prob.ravel(), THRESH, 1e-4)
    boxes = boxes_from_map(prob)
    if not boxes:
        sys.exit("ocr: no boxes found")
    check_margin("a box score", [b[5] for b in boxes], BOX_THRESH, 1e-3)
    cls_in = np.stack([crop(image, b, 48, 192, False) for b in boxes])
    cls = sess["cls"].run(None, {"x": cls_in})[0]
    check_margin("an angle score", cls[:, 1], FLIP_THRESHOLD, 1e-3)
    rec_in = np.stack([crop(image, b, 48, 320, cls[i, 1] > FLIP_THRESHOLD) for i, b in enumerate(boxes)])
    rec = sess["rec"].run(None, {"x": rec_in})[0]
    top2 = np.sort(rec, axis=-1)[:, :, -2:]
    if (top2[:, :, 1] - top2[:, :, 0]).min() < 1e-4:
        sys.exit("ocr: a recognizer step's best two classes are within 1e-4: change the picture")
    texts, scores = [], []
    for row_idx, row_prob in zip(rec.argmax(-1), rec.max(-1)):
        keep = np.ones(len(row_idx), bool)
        keep[1:] = row_idx[1:] != row_idx[:-1]
        keep &= row_idx != 0
        texts.append("".join(labels[k] for k in row_idx[keep]))
        scores.append(float(row_prob[keep].astype(np.float64).mean()) if keep.any() else 0.0)
    ref = {"boxes": [list(map(float, b[:5])) for b in boxes], "box_scores": [b[5] for b in boxes],
           "angle": cls.tolist(), "text": texts, "text_scores": scores}
    with open(os.path.join(d, "ref.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
    print(f"ocr: {len(boxes)} boxes: {texts}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="testdata/pipelines")
    ap.add_argument("--cache", default=".cache/realmodels-small", help="where make realmodels-small put the wheels")
    ap.add_argument("--only", default="ensemble,builtins,classifier,ocr")
    args = ap.parse_args()
    only = args.only.split(",")
    if "ensemble" in only:
        make_ensemble(args.out)
    if "builtins" in only:
        make_builtins(args.out)
    if "classifier" in only:
        make_classifier(args.out)
    if "ocr" in only:
        make_ocr(args.out, args.cache)


if __name__ == "__main__":
    main()
