"""Trained ONNX models shipped inside PyPI and npm packages, for the
real-model suite (python/realmodels/generate.py imports this) and for the
small set `go test ./harness/realmodels` runs (make realmodels-small):
each package is downloaded at a pinned version with its ordinary client
(pip download / npm pack), its sha256 checked, the .onnx file extracted and
ONNX Runtime's outputs on fixed inputs saved as the reference.

    .venv/bin/python python/realmodels/packaged.py --out .cache/realmodels-small --only rapidocr_cls_v2,...

Needs numpy, onnx and onnxruntime only (the project's .venv). Layout of a
case: OUT/cases/<name>.onnx-package/{model.onnx, in.<k>.<input>.npy,
ref.<k>.<output>.npy, case.json}; a case that exists is skipped.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import numpy as np


def short(e, n=1500):
    s = f"{type(e).__name__}: {e}"
    s = " ".join(s.split())
    return s if len(s) <= n else s[:n] + " ..."


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def onnx_info(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    return {"opsets": {o.domain or "ai.onnx": o.version for o in m.opset_import if o.domain in ("", "ai.onnx", "com.microsoft")},
            "producer": f"{m.producer_name} {m.producer_version}".strip()}


def save_case(d, inputs, outputs, info):
    for k, (name, a) in enumerate(inputs):
        np.save(os.path.join(d, f"in.{k}.{name}.npy"), a)
    for k, (name, a) in enumerate(outputs):
        np.save(os.path.join(d, f"ref.{k}.{safe(name)}.npy"), a)
    info["inputs"] = [{"name": n, "dtype": str(a.dtype), "shape": list(a.shape)} for n, a in inputs]
    info["outputs"] = [{"name": n, "dtype": str(a.dtype), "shape": list(a.shape)} for n, a in outputs]
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(info, f, indent=1)


def save_big(d, inputs, outputs):
    """The zero-config request of check.py: big.<k>.<input>.npy and
    bigref.<k>.<output>.npy, each non-batch symbol above 64."""
    for k, (name, a) in enumerate(inputs):
        np.save(os.path.join(d, f"big.{k}.{name}.npy"), a)
    for k, (name, a) in enumerate(outputs):
        np.save(os.path.join(d, f"bigref.{k}.{safe(name)}.npy"), a)


def safe(name):
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)


def ort_run(path, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return list(zip(names, sess.run(None, feeds)))


def fail_case(d, info, stage, e):
    info["export_error"] = f"{stage}: {short(e)}"
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(info, f, indent=1)


# Packages whose wheels / tarballs ship trained ONNX models.
PACKAGES = {
    "silero-vad": ("pip", "silero-vad==6.2.3", "silero_vad-6.2.3-py3-none-any.whl",
                   "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8"),
    "rapidocr-onnxruntime": ("pip", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
                             "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"),
    "@ricky0123/vad-web": ("npm", "@ricky0123/vad-web@0.0.31", "ricky0123-vad-web-0.0.31.tgz",
                           "d1a211cf1a2ed26297da52cc08de79e75d79838a274bfc6de546feb1f828c940"),
    # Arabic diacritization: BiLSTMs dynamically quantized by ONNX Runtime's
    # quantizer (DynamicQuantizeLSTM, DynamicQuantizeLinear, MatMulInteger).
    "text2tashkeel": ("pip", "text2tashkeel==0.1.0", "text2tashkeel-0.1.0-py3-none-any.whl",
                      "dd1ad22b6b012a71f1467d95fbaceecc38b22f4882c31389a6d35cdc1669967c"),
    # A captcha CRNN (convolutions, an LSTM unrolled by the exporter, CTC logits).
    "captcha-whisperer": ("pip", "captcha-whisperer==0.1.0", "captcha_whisperer-0.1.0-py3-none-any.whl",
                          "97d504dc35f5dd565fefdf244e2b6dceca6dd12a9cecad70b48dfeb66d197c8c"),
    # Indonesian G2P: a Keras LSTM encoder-decoder (tf2onnx), the decoder
    # carrying its state in and out.
    "g2p-id-py": ("pip", "g2p-id-py==0.4.2", "g2p_id_py-0.4.2-py3-none-any.whl",
                  "0b9ce7e76be2e8d1738c604751d05e0a8aa1b2ce2199fce27a115d350468e671"),
}


def f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def vad_inputs(state_name="state", width=128, seq=512, batch=1, sr=True, hc=False):
    def make():
        d = {"input": f32(batch, seq, seed=1) * 0.1}
        if hc:
            d["h"] = np.zeros((2, batch, 64), np.float32)
            d["c"] = np.zeros((2, batch, 64), np.float32)
        else:
            d[state_name] = f32(2, batch, width, seed=2) * 0.1
        if sr:
            d["sr"] = np.array(16000, np.int64)
        return d
    return make


def token_ids(name, batch, seq, vocab=40):
    return lambda: {name: np.random.default_rng(1).integers(1, vocab, (batch, seq)).astype(np.int64)}


def g2p_decoder():
    rng = np.random.default_rng(1)
    return {"input_2": rng.random((2, 5, 32), np.float32), "input_3": rng.standard_normal((2, 256)).astype(np.float32) * 0.3,
            "input_4": rng.standard_normal((2, 256)).astype(np.float32) * 0.3}


# name -> (package, path inside the archive, input maker[, the same at a
# size above 64 of each non-batch dim, for check.py's zero-config request])
PACKAGED = {
    "silero_vad": ("silero-vad", "silero_vad/data/silero_vad.onnx", vad_inputs()),
    "silero_vad_16k_op15": ("silero-vad", "silero_vad/data/silero_vad_16k_op15.onnx", vad_inputs(batch=2)),
    "silero_vad_op18_ifless": ("silero-vad", "silero_vad/data/silero_vad_op18_ifless.onnx", vad_inputs(batch=2)),
    "silero_vad_half": ("silero-vad", "silero_vad/data/silero_vad_half.onnx", vad_inputs(batch=2, sr=False)),
    "silero_vad_16k_sequence": ("silero-vad", "silero_vad/data/silero_vad_16k_sequence.onnx", lambda: {
        "input": f32(3, 576, seed=1) * 0.1, "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}),
    "silero_vad_openvino_16k": ("silero-vad", "silero_vad/data/silero_vad_openvino_16k.onnx", vad_inputs(seq=576, sr=False)),
    "rapidocr_det_v4": ("rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                        lambda: {"x": np.random.default_rng(1).random((1, 3, 64, 96), np.float32)}),
    "rapidocr_rec_v4": ("rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                        lambda: {"x": np.random.default_rng(1).random((2, 3, 48, 160), np.float32)}),
    "rapidocr_cls_v2": ("rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                        lambda: {"x": np.random.default_rng(1).random((3, 3, 48, 192), np.float32)}),
    "vadweb_silero_legacy": ("@ricky0123/vad-web", "package/dist/silero_vad_legacy.onnx", vad_inputs(hc=True)),
    "vadweb_silero_v5": ("@ricky0123/vad-web", "package/dist/silero_vad_v5.onnx", vad_inputs()),
    "vadweb_silero_v6": ("@ricky0123/vad-web", "package/dist/silero_vad_v6.onnx", vad_inputs()),
    "text2tashkeel_bilstm_int8": ("text2tashkeel", "text2tashkeel/models/bilstm.int8.onnx", token_ids("input_ids", 3, 23),
                                  token_ids("input_ids", 2, 150)),
    "text2tashkeel_rawi_v3_int8": ("text2tashkeel", "text2tashkeel/models/rawi_v3.int8.onnx", token_ids("input", 3, 23),
                                   token_ids("input", 2, 150)),
    "captcha_crnn": ("captcha-whisperer", "captcha_whisperer/models/captcha_crnn.onnx",
                     lambda: {"image": np.random.default_rng(1).random((3, 3, 60, 160), np.float32)}),
    "g2p_id_lstm_decoder": ("g2p-id-py", "g2p_id/models/lstm/decoder_model.onnx", g2p_decoder,
                            lambda: dict(g2p_decoder(), input_2=np.random.default_rng(2).random((2, 90, 32), np.float32))),
}


def fetch_package(pkg, cache):
    kind, spec, fname, want = PACKAGES[pkg]
    path = os.path.join(cache, fname)
    if not os.path.exists(path):
        if kind == "pip":
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", cache, spec], check=True)
        else:
            subprocess.run(["npm", "pack", "-q", spec], cwd=cache, check=True, stdout=subprocess.DEVNULL)
    got = sha256(path)
    if got != want:
        raise RuntimeError(f"{fname}: sha256 {got}, want {want}")
    return path


def extract(archive, member, dst):
    if archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as z, z.open(member) as src, open(dst, "wb") as f:
            shutil.copyfileobj(src, f)
    else:
        with tarfile.open(archive) as t, t.extractfile(member) as src, open(dst, "wb") as f:
            shutil.copyfileobj(src, f)


def packaged(name, out, log):
    pkg, member, make = PACKAGED[name][:3]
    big = PACKAGED[name][3] if len(PACKAGED[name]) > 3 else None
    d = os.path.join(out, "cases", f"{name}.onnx-package")
    if os.path.exists(os.path.join(d, "case.json")):
        return os.path.exists(os.path.join(d, "model.onnx"))
    os.makedirs(d, exist_ok=True)
    _, spec, _, digest = PACKAGES[pkg]
    info = {"model": name, "source": f"{spec} ({member}, sha256 {digest[:12]}…)", "format": "onnx-package",
            "exporter": "shipped in the package", "reference_by": "onnxruntime"}
    try:
        archive = fetch_package(pkg, os.path.join(out, "packages"))
        path = os.path.join(d, "model.onnx")
        extract(archive, member, path)
        info.update(onnx_info(path))
        feeds = make()
        save_case(d, list(feeds.items()), ort_run(path, feeds), info)
        if big is not None:
            save_big(d, list(big().items()), ort_run(path, big()))
        log(f"  {name}.onnx-package: ok")
        return True
    except Exception as e:
        fail_case(d, info, "package", e)
        log(f"  {name}.onnx-package: failed: {short(e, 300)}")
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".cache/realmodels")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    args = ap.parse_args()
    only = [m for m in args.only.split(",") if m]
    for m in only:
        if m not in PACKAGED:
            ap.error(f"unknown model {m!r} (known: {', '.join(PACKAGED)})")
    os.makedirs(os.path.join(args.out, "packages"), exist_ok=True)
    failed = []
    for name in PACKAGED:
        if not only or name in only:
            if not packaged(name, args.out, print):
                failed.append(name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
