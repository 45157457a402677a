"""Exports a broad set of models with plain torch.export (no
run_decompositions: the full ATen surface users save) for the fx importer's
ATen survey (issue 11).

Run from the repository root with the zoo venv (torch 2.14.1, torchvision
0.29.2, transformers 5.23.0, timm 1.0.31):

    .venv-zoo/bin/python python/survey_aten.py [NAME ...]

For each model NAME it writes, under .cache/aten-survey/:

    NAME.pt2        torch.export.save of the exported program (example batch 2)
    NAME.json       the ATen operators the graph calls, how it was exported
                    (dynamic dims), the user input/output names, or the error
    NAME/           in_<input>.npy and out_<k>.npy: inputs at batch 3 (a batch
                    other than the example's) and torch eager's outputs

A model whose NAME.json exists is skipped: exports run once. Weights are
random (seed 0); nothing is downloaded.
"""

import json
import os
import sys
import time
import traceback

import numpy as np
import torch
from torch.export import Dim

OUT = os.path.join(".cache", "aten-survey")
EXAMPLE_BATCH = 2
CHECK_BATCH = 3


def image(hw, c=3):
    return lambda b: (torch.randn(b, c, hw, hw),)


def video(t, hw):
    return lambda b: (torch.randn(b, 3, t, hw, hw),)


# ---- torchvision --------------------------------------------------------

TV_CLASSIFICATION = {
    # name: input size
    "alexnet": 96, "convnext_tiny": 64, "convnext_small": 64, "densenet121": 64, "densenet161": 64,
    "efficientnet_b0": 64, "efficientnet_b1": 64, "efficientnet_b3": 64, "efficientnet_v2_s": 64,
    "googlenet": 64, "inception_v3": 96, "maxvit_t": 224, "mnasnet0_5": 64, "mnasnet1_0": 64,
    "mobilenet_v2": 64, "mobilenet_v3_small": 64, "mobilenet_v3_large": 64, "regnet_x_400mf": 64,
    "regnet_y_400mf": 64, "regnet_y_1_6gf": 64, "resnet18": 64, "resnet50": 64, "resnext50_32x4d": 64,
    "wide_resnet50_2": 64, "shufflenet_v2_x0_5": 64, "shufflenet_v2_x1_0": 64, "squeezenet1_0": 64,
    "squeezenet1_1": 64, "swin_t": 64, "swin_v2_t": 64, "vgg11": 64, "vgg11_bn": 64, "vit_b_16": 224,
}


def tv_classification(name, size):
    def build():
        import torchvision
        kw = {"weights": None}
        if name in ("googlenet", "inception_v3"):
            kw["aux_logits"] = False
            kw["init_weights"] = False
        return torchvision.models.get_model(name, **kw), image(size)
    return build


def tv_detection(name, size):
    def build():
        import torchvision
        m = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=5)

        class Det(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                out = self.m(list(x.unbind(0)))
                return [(o["boxes"], o["scores"], o["labels"]) for o in out]
        return Det(m), image(size)
    return build


def tv_detection_head(name, size):
    """The detector without its data-dependent postprocess (the full
    detector does not export: its box selection guards on data)."""
    def build():
        import torchvision
        m = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=5)

        class Head(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                feats = list(self.m.backbone(x).values())
                out = self.m.head(feats)
                return tuple(out[k] for k in sorted(out))
        return Head(m), image(size)
    return build


def tv_segmentation(name, size):
    def build():
        import torchvision
        kw = {"weights": None, "weights_backbone": None, "num_classes": 5}
        if not name.startswith("lraspp"):
            kw["aux_loss"] = False
        m = torchvision.models.get_model(name, **kw)

        class Seg(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x)["out"]
        return Seg(m), image(size)
    return build


def tv_video(name, t, size):
    def build():
        import torchvision
        return torchvision.models.get_model(name, weights=None), video(t, size)
    return build


# ---- timm ---------------------------------------------------------------

TIMM = {
    "resnet26d": 64, "efficientnet_b0": 64, "mobilenetv3_small_100": 64, "convnext_atto": 64,
    "vit_tiny_patch16_224": 224, "deit_tiny_patch16_224": 224, "levit_128s": 224, "mobilevit_xxs": 64,
    "edgenext_xx_small": 64, "poolformer_s12": 64, "ghostnet_100": 64, "rexnet_100": 64, "dla34": 64,
    "fastvit_t8": 64, "regnetx_002": 64, "coat_lite_tiny": 224, "resnest14d": 64, "tf_efficientnet_lite0": 64,
}


def timm_model(name, size):
    def build():
        import timm
        return timm.create_model(name, pretrained=False), image(size)
    return build


# ---- Hugging Face transformers -----------------------------------------

VOCAB = 99
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


class Leaves(torch.nn.Module):
    """Calls a transformers model and returns the tensors of its output."""

    def __init__(self, m, names):
        super().__init__()
        self.m = m
        self.names = names

    def forward(self, *args):
        out = self.m(**dict(zip(self.names, args)))
        return tuple(t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor))


def ids(seq):
    return lambda b: torch.randint(1, VOCAB, (b, seq))


def hf(cfg_name, model_name, inputs, seq_dims=(), **cfg):
    """inputs: (name, make(b)) pairs; seq_dims: input names whose dim 1 is a sequence."""
    def build():
        import transformers
        config = getattr(transformers, cfg_name)(**cfg)
        m = getattr(transformers, model_name)(config)
        names = [n for n, _ in inputs]
        return Leaves(m, names), lambda b: tuple(f(b) for _, f in inputs), names, seq_dims
    return build


def text(cfg_name, model_name, seq_dims=("input_ids",), **cfg):
    return hf(cfg_name, model_name, [("input_ids", ids(8))], seq_dims, **cfg)


def dec_kw(**kw):
    return dict(SMALL, vocab_size=VOCAB, use_cache=False, **kw)


HF = {
    "hf_bert": text("BertConfig", "BertModel", **SMALL, vocab_size=VOCAB),
    "hf_distilbert": text("DistilBertConfig", "DistilBertModel", dim=32, n_layers=2, n_heads=4, hidden_dim=64, vocab_size=VOCAB),
    "hf_roberta": text("RobertaConfig", "RobertaModel", **SMALL, vocab_size=VOCAB),
    "hf_albert": text("AlbertConfig", "AlbertModel", **SMALL, embedding_size=16, vocab_size=VOCAB),
    "hf_electra": text("ElectraConfig", "ElectraModel", **SMALL, embedding_size=16, vocab_size=VOCAB),
    "hf_gpt2": text("GPT2Config", "GPT2Model", n_embd=32, n_layer=2, n_head=4, vocab_size=VOCAB, use_cache=False),
    "hf_gpt_neox": text("GPTNeoXConfig", "GPTNeoXModel", **dec_kw()),
    "hf_llama": text("LlamaConfig", "LlamaModel", **dec_kw(num_key_value_heads=2)),
    "hf_mistral": text("MistralConfig", "MistralModel", **dec_kw(num_key_value_heads=2)),
    "hf_qwen2": text("Qwen2Config", "Qwen2Model", **dec_kw(num_key_value_heads=2)),
    "hf_phi": text("PhiConfig", "PhiModel", **dec_kw()),
    "hf_t5_encoder": text("T5Config", "T5EncoderModel", d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=VOCAB),
    "hf_t5": hf("T5Config", "T5Model", [("input_ids", ids(8)), ("decoder_input_ids", ids(5))], ("input_ids", "decoder_input_ids"),
                d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=VOCAB, use_cache=False),
    "hf_bart": hf("BartConfig", "BartModel", [("input_ids", ids(8)), ("decoder_input_ids", ids(5))], ("input_ids", "decoder_input_ids"),
                  d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                  encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=VOCAB, use_cache=False),
    "hf_whisper": hf("WhisperConfig", "WhisperModel",
                     [("input_features", lambda b: torch.randn(b, 8, 32)), ("decoder_input_ids", ids(5))], ("decoder_input_ids",),
                     d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                     encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=VOCAB, num_mel_bins=8, max_source_positions=16,
                     max_target_positions=32, use_cache=False, pad_token_id=1, bos_token_id=1, eos_token_id=2,
                     decoder_start_token_id=1),
    "hf_wav2vec2": hf("Wav2Vec2Config", "Wav2Vec2Model", [("input_values", lambda b: torch.randn(b, 800))], (),
                      **SMALL, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                      num_conv_pos_embedding_groups=4),
    "hf_vit": hf("ViTConfig", "ViTModel", [("pixel_values", lambda b: torch.randn(b, 3, 32, 32))], (), **SMALL, image_size=32, patch_size=8),
    "hf_deit": hf("DeiTConfig", "DeiTModel", [("pixel_values", lambda b: torch.randn(b, 3, 32, 32))], (), **SMALL, image_size=32, patch_size=8),
    "hf_swin": hf("SwinConfig", "SwinModel", [("pixel_values", lambda b: torch.randn(b, 3, 32, 32))], (),
                  image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4),
    "hf_convnext": hf("ConvNextConfig", "ConvNextModel", [("pixel_values", lambda b: torch.randn(b, 3, 32, 32))], (),
                      hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
    "hf_clip": hf("CLIPConfig", "CLIPModel", [("input_ids", ids(8)), ("pixel_values", lambda b: torch.randn(b, 3, 32, 32))], ("input_ids",),
                  text_config=dict(SMALL, vocab_size=VOCAB), vision_config=dict(SMALL, image_size=32, patch_size=8), projection_dim=16),
    "hf_segformer": hf("SegformerConfig", "SegformerModel", [("pixel_values", lambda b: torch.randn(b, 3, 32, 32))], (),
                       num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
                       strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2]),
    "hf_detr": hf("DetrConfig", "DetrModel", [("pixel_values", lambda b: torch.randn(b, 3, 64, 64))], (),
                  use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=dict(model_type="resnet", depths=[1, 1],
                  hidden_sizes=[16, 32], embedding_size=16, out_features=["stage2"]), d_model=32, encoder_layers=1,
                  decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                  decoder_ffn_dim=64, num_queries=10),
}


def registry():
    models = {}
    for n, s in TV_CLASSIFICATION.items():
        models["tv_" + n] = tv_classification(n, s)
    for n in ("fcos_resnet50_fpn", "retinanet_resnet50_fpn", "ssdlite320_mobilenet_v3_large"):
        models["tv_" + n] = tv_detection(n, 128)
        models["tv_" + n + "_head"] = tv_detection_head(n, 128)
    for n in ("deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large", "fcn_resnet50", "deeplabv3_resnet50"):
        models["tv_" + n] = tv_segmentation(n, 64)
    models["tv_r3d_18"] = tv_video("r3d_18", 4, 32)
    models["tv_r2plus1d_18"] = tv_video("r2plus1d_18", 4, 32)
    models["tv_mvit_v2_s"] = tv_video("mvit_v2_s", 16, 224)
    for n, s in TIMM.items():
        models["timm_" + n] = timm_model(n, s)
    models.update(HF)
    return models


def op_names(ep):
    ops = set()

    def walk(gm):
        for node in gm.graph.nodes:
            if node.op == "call_function":
                t = str(node.target)
                if t.startswith("<built-in function "):
                    t = "_operator." + t[len("<built-in function "):-1]  # as torch.export.save writes it
                ops.add(t)
        for _, sub in gm.named_children():
            if isinstance(sub, torch.fx.GraphModule):
                walk(sub)
    walk(ep.graph_module)
    return sorted(ops)


def export(build):
    built = build()
    if len(built) == 2:
        model, make = built
        seq = ()
        names = None
    else:
        model, make, names, seq = built
    model.eval()
    ex = make(EXAMPLE_BATCH)
    n = len(ex)
    names = names or ["x%d" % i for i in range(n)]
    attempts = []
    if seq:
        attempts.append(("batch+seq", tuple({0: Dim("batch", min=1, max=64), **({1: Dim("seq_" + nm, min=2, max=64)} if nm in seq else {})}
                                            for nm in names)))
    attempts.append(("batch", tuple({0: Dim("batch", min=1, max=64)} for _ in names)))
    attempts.append(("static", None))
    errors = []
    for how, dyn in attempts:
        try:
            if dyn is not None and isinstance(model, Leaves):
                dyn = (dyn,)  # Leaves.forward takes *args
            with torch.no_grad():
                ep = torch.export.export(model, ex, dynamic_shapes=dyn)
            return model, make, ep, how, errors
        except Exception as e:  # noqa: BLE001 - recorded and the next attempt tried
            errors.append("%s: %s" % (how, str(e).splitlines()[0][:300] if str(e) else type(e).__name__))
    raise RuntimeError("; ".join(errors))


def run_one(name, build):
    path = os.path.join(OUT, name)
    info = {"name": name}
    t0 = time.time()
    try:
        torch.manual_seed(0)
        model, make, ep, how, errs = export(build)
        info["dynamic"] = how
        info["fallbacks"] = errs
        info["ops"] = op_names(ep)
        info["inputs"] = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        info["outputs"] = [getattr(s.arg, "name", None) for s in ep.graph_signature.output_specs if s.kind.name == "USER_OUTPUT"]
        torch.export.save(ep, path + ".pt2")
        batch = CHECK_BATCH if how != "static" else EXAMPLE_BATCH
        torch.manual_seed(1)
        x = make(batch)
        with torch.no_grad():
            y = torch.utils._pytree.tree_leaves(model(*x))
        os.makedirs(path, exist_ok=True)
        for nm, t in zip(info["inputs"], x):
            np.save(os.path.join(path, "in_%s.npy" % nm), t.numpy())
        for k, t in enumerate(y):
            np.save(os.path.join(path, "out_%d.npy" % k), t.detach().numpy())
        info["check_batch"] = batch
    except Exception as e:  # noqa: BLE001 - the survey records every failure
        info["error"] = "%s: %s" % (type(e).__name__, str(e)[:2000])
        info["trace"] = traceback.format_exc()[-3000:]
    info["seconds"] = round(time.time() - t0, 1)
    with open(path + ".json", "w") as f:
        json.dump(info, f, indent=1)
    print("%-40s %6.1fs %s" % (name, info["seconds"], info.get("dynamic", "ERROR " + info.get("error", "")[:150])), flush=True)


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    models = registry()
    names = sys.argv[1:] or list(models)
    for name in names:
        if os.path.exists(os.path.join(OUT, name + ".json")):
            continue
        run_one(name, models[name])


if __name__ == "__main__":
    main()
