"""xserve.export_causal_lm: a Hugging Face causal LM into a servable generative model.

It loads a model saved with ``save_pretrained`` (``AutoModelForCausalLM``),
exports one decoding step with its key/value cache flattened (torch.export
with transformers' ``DynamicCache`` registered as a pytree; ONNX through
torch.onnx's dynamo exporter from that program, the cache tensors named
``past_key_values.N.key`` / ``present.N.key``), and writes

    <repo>/<name>/config.yaml            generate: max_seq_len, slots, buckets, eos/pad ids
    <repo>/<name>/<version>/model.pt2    (or model.onnx)
    <repo>/<name>/<version>/tokenizer.json, tokenizer_config.json,
        chat_template.jinja, ...         the tokenizer files the directory has

The server recognises the roles of the step's inputs and outputs (input_ids,
attention_mask, position_ids, the cache) and runs the generation loop itself
(docs/GENERATE.md). Everything it needs is in the ``torch`` extra
(``pip install 'xserve[torch]'``: torch, transformers, onnxscript).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import tempfile
from typing import Any, Sequence

from .export_ import _next_version, _yaml

# Files of a save_pretrained directory that the server reads.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "generation_config.json")


@dataclasses.dataclass
class ExportedCausalLM:
    """What export_causal_lm wrote."""

    name: str
    version: int
    path: pathlib.Path  # the model file
    config_path: pathlib.Path
    config: dict[str, Any]
    inputs: list[str]
    outputs: list[str]
    files: list[str]  # tokenizer files copied beside the model file


def _powers(lo: int, hi: int) -> list[int]:
    out, n = [], lo
    while n < hi:
        out.append(n)
        n *= 2
    return out + [hi]


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


class _Step:
    """One decoding step: (input_ids, attention_mask, position_ids, past) -> (logits, present)."""

    def __init__(self, model: Any) -> None:
        import torch

        class Step(torch.nn.Module):
            def __init__(self, m: Any) -> None:
                super().__init__()
                self.m = m

            def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, past_key_values: Any) -> Any:
                out = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=past_key_values, use_cache=True)
                return out.logits, out.past_key_values

        self.module = Step(model).eval()


def _example_cache(model: Any, batch: int, past: int) -> Any:
    """A DynamicCache holding past random entries for each layer."""
    import torch
    from transformers import DynamicCache

    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    layers = text.num_hidden_layers
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    cache = DynamicCache(config=text)
    dtype = next(model.parameters()).dtype
    for layer in range(layers):
        cache.update(torch.randn(batch, heads, past, head_dim, dtype=dtype), torch.randn(batch, heads, past, head_dim, dtype=dtype), layer)
    return cache


_PT2_CACHE = re.compile(r"past_key_values_(key|value)_cache_(\d+)$|past_key_values_layers_(\d+)_(key|value)s$")


def _onnx_name(pt2_name: str) -> str:
    """past_key_values_key_cache_3 -> past_key_values.3.key (the ONNX exporters' names)."""
    m = _PT2_CACHE.search(pt2_name)
    if not m:
        return pt2_name
    kind, layer = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
    return f"past_key_values.{layer}.{kind}"


def _publish(tmp: pathlib.Path, model_dir: pathlib.Path, version: int, hf_dir: pathlib.Path, files: Sequence[str],
             cfg: dict[str, Any], tool: str) -> tuple[pathlib.Path, list[str]]:
    """Copies hf_dir's files into the version's temporary directory tmp, writes config.yaml
    and renames tmp to the version directory; returns config.yaml's path and the files copied."""
    copied = []
    for f in files:
        if (hf_dir / f).is_file():
            shutil.copyfile(hf_dir / f, tmp / f)
            copied.append(f)
    config_path = model_dir / "config.yaml"
    with tempfile.NamedTemporaryFile("w", dir=model_dir, prefix=".config.", suffix=".tmp", delete=False) as fh:
        fh.write(_yaml(cfg).replace("# written by xserve.export", f"# written by xserve.{tool}"))
    os.chmod(fh.name, 0o644)
    os.replace(fh.name, config_path)
    os.chmod(tmp, 0o755)
    os.rename(tmp, model_dir / str(version))
    return config_path, copied


def export_causal_lm(
    hf_dir: str | os.PathLike[str],
    repo: str | os.PathLike[str] = "models",
    name: str | None = None,
    *,
    format: str = "pt2",
    max_seq_len: int | None = None,
    slots: int = 8,
    prefill_buckets: Sequence[int] | None = None,
    slot_buckets: Sequence[int] | None = None,
    dtype: str | None = None,
    opset: int = 18,
) -> ExportedCausalLM:
    """Exports the causal LM saved in ``hf_dir`` into model repository ``repo``.

    ``format`` is ``"pt2"`` or ``"onnx"``. ``max_seq_len`` (default the
    model's ``max_position_embeddings``, at most 2048) is the most tokens a
    sequence holds; ``slots`` the most sequences decoded at once;
    ``prefill_buckets`` the prompt lengths compiled (default powers of two
    from 16); ``slot_buckets`` the decode batch sizes (default powers of two
    up to ``slots``). ``dtype`` (``"float32"``, ``"bfloat16"``, ...) loads the
    weights in that type (default: as saved).
    """
    import torch
    from torch.export import Dim
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    if format not in ("pt2", "onnx"):
        raise ValueError(f"xserve.export_causal_lm: format {format!r}: want 'pt2' or 'onnx'")
    hf_dir = pathlib.Path(hf_dir)
    name = name or hf_dir.name
    if not name or name.startswith(".") or "/" in name or "\\" in name:
        raise ValueError(f"xserve.export_causal_lm: model name {name!r}: want a plain directory name")
    kw: dict[str, Any] = {}
    if dtype:
        kw["dtype"] = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(str(hf_dir), **kw).eval()
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    limit = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None) or 2048
    max_seq_len = int(max_seq_len or min(limit, 2048))
    if max_seq_len > limit:
        raise ValueError(f"xserve.export_causal_lm: max_seq_len {max_seq_len} is more than the model's {limit} positions")

    register_dynamic_cache_export_support()
    batch, past, seq = 2, 3, 2  # >= 2 each, so that torch.export keeps every size dynamic
    vocab = int(text.vocab_size)
    g = torch.Generator().manual_seed(0)
    kwargs = dict(
        input_ids=torch.randint(0, vocab, (batch, seq), generator=g),
        attention_mask=torch.ones(batch, past + seq, dtype=torch.int64),
        position_ids=torch.arange(past, past + seq).expand(batch, seq).contiguous(),
        past_key_values=_example_cache(model, batch, past),
    )
    # The cache flattens as [keys of every layer, values of every layer].
    n = text.num_hidden_layers
    cache_dims = [[{0: Dim.DYNAMIC, 2: Dim.DYNAMIC} for _ in range(n)] for _ in range(2)]
    dynamic = {"input_ids": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, "attention_mask": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC},
               "position_ids": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, "past_key_values": cache_dims}
    with torch.no_grad():
        ep = torch.export.export(_Step(model).module, (), kwargs=kwargs, dynamic_shapes=dynamic, strict=False)
    inputs = list(ep.graph_signature.user_inputs)
    outputs = [str(o) for o in ep.graph_signature.user_outputs]

    eos = _ids(getattr(text, "eos_token_id", None))
    pad = getattr(text, "pad_token_id", None)
    try:
        gen = GenerationConfig.from_pretrained(str(hf_dir))
        eos = _ids(gen.eos_token_id) or eos
        pad = gen.pad_token_id if gen.pad_token_id is not None else pad
    except OSError:
        pass
    prefill = list(prefill_buckets or _powers(min(16, max_seq_len), max_seq_len))
    gen_cfg: dict[str, Any] = {"max_seq_len": max_seq_len, "slots": slots, "prefill_buckets": prefill,
                               "slot_buckets": list(slot_buckets or _powers(1, slots))}
    if eos:
        gen_cfg["eos_token_id"] = eos
    if isinstance(pad, int) and 0 <= pad < vocab:
        gen_cfg["pad_token_id"] = pad
    cfg = {"generate": gen_cfg}

    model_dir = pathlib.Path(repo) / name
    model_dir.mkdir(parents=True, exist_ok=True)
    version = _next_version(model_dir)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{version}.tmp-", dir=model_dir))
    try:
        file = "model.pt2" if format == "pt2" else "model.onnx"
        if format == "pt2":
            torch.export.save(ep, str(tmp / file))
        else:
            onnx_in = [_onnx_name(i) for i in inputs]
            onnx_out = ["logits"] + [_onnx_name(i).replace("past_key_values.", "present.") for i in inputs[3:]]
            torch.onnx.export(ep, (), str(tmp / file), dynamo=True, opset_version=opset, input_names=onnx_in,
                              output_names=onnx_out, external_data=False)
            inputs, outputs = onnx_in, onnx_out
        config_path, copied = _publish(tmp, model_dir, version, hf_dir, TOKENIZER_FILES, cfg, "export_causal_lm")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportedCausalLM(name, version, model_dir / str(version) / file, config_path, cfg, inputs, outputs, copied)
