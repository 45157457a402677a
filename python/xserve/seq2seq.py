"""xserve.export_seq2seq: a Hugging Face encoder-decoder into a servable generative model.

It loads a model saved with ``save_pretrained`` (``AutoModelForSeq2SeqLM``:
T5, BART, Marian; or ``AutoModelForSpeechSeq2Seq``: Whisper) and exports two
programs with torch.export:

- the encoder, run once per sequence: the encoder's inputs (``input_ids`` and
  ``attention_mask``, or Whisper's ``input_features``) -> the cross-attention
  keys and values of every decoder layer (``cross_key_values_N_key`` /
  ``_value``), computed by the decoder's own projections;
- one decoder step: ``input_ids``, ``attention_mask`` (over the self-attention
  cache and the step's tokens), ``position_ids`` (decoders with absolute
  positions), ``encoder_attention_mask`` (text encoders), the self-attention
  cache ``past_key_values_N_key`` / ``_value`` and the cross-attention
  cache -> the logits and the self-attention cache with the step's entries
  appended.

It writes

    <repo>/<name>/config.yaml          generate: (with generate.encoder) max_seq_len, slots, buckets, ids
    <repo>/<name>/<version>/model.pt2  the decoder step
    <repo>/<name>/<version>/encoder.pt2
    <repo>/<name>/<version>/tokenizer.json, ... the tokenizer files the directory has

T5's relative position bias is computed from each row's positions, which the
step takes from the attention mask (the count of valid entries before a key),
so that sequences of different lengths share a decode step; transformers
computes it from one position for the whole batch. Everything it needs is in
the ``torch`` extra (``pip install 'xserve[torch]'``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil
import tempfile
from typing import Any, Iterator, Sequence

from .causal_lm import TOKENIZER_FILES, _ids, _powers, _publish
from .export_ import _next_version

# Feature extractor and processor files copied beside the tokenizer's.
EXTRA_FILES = ("preprocessor_config.json",)


@dataclasses.dataclass
class ExportedSeq2Seq:
    """What export_seq2seq wrote."""

    name: str
    version: int
    path: pathlib.Path  # the decoder step
    encoder_path: pathlib.Path
    config_path: pathlib.Path
    config: dict[str, Any]
    files: list[str]  # tokenizer files copied beside the model files


def _dims(model: Any) -> tuple[int, int, int]:
    """(decoder layers, heads, head size) of the decoder's attention."""
    c = model.config
    layers = getattr(c, "num_decoder_layers", None) or getattr(c, "decoder_layers", None) or c.num_layers
    heads: int = getattr(c, "num_heads", None) or c.decoder_attention_heads
    head_dim = getattr(c, "d_kv", None) or c.d_model // heads
    return int(layers), int(heads), int(head_dim)


def _is_audio(model: Any) -> bool:
    return getattr(model, "main_input_name", "input_ids") == "input_features"


def _caches(entries: Sequence[dict[str, Any]]) -> Any:
    from transformers import DynamicCache

    return DynamicCache([(e["key"], e["value"]) for e in entries])


@contextlib.contextmanager
def _rowwise_t5_bias(model: Any, key_positions: list[Any]) -> Iterator[None]:
    """T5's relative position bias from each row's key positions ([batch, keys]).

    The query positions are the keys' of the step's own tokens (the last
    ones). Outside T5 it does nothing.
    """
    try:
        from transformers.models.t5.modeling_t5 import T5Attention
    except ImportError:  # pragma: no cover
        yield
        return
    original = T5Attention.compute_bias

    def compute_bias(self: Any, query_length: int, key_length: int, device: Any = None, past_seen_tokens: Any = 0) -> Any:
        if not key_positions or not self.is_decoder:
            return original(self, query_length, key_length, device=device, past_seen_tokens=past_seen_tokens)
        kp = key_positions[0]
        relative = kp[:, None, :] - kp[:, -query_length:, None]  # [batch, query, key]
        bucket = self._relative_position_bucket(relative, bidirectional=False, num_buckets=self.relative_attention_num_buckets,
                                                max_distance=self.relative_attention_max_distance)
        return self.relative_attention_bias(bucket).permute(0, 3, 1, 2)  # [batch, heads, query, key]

    T5Attention.compute_bias = compute_bias
    try:
        yield
    finally:
        T5Attention.compute_bias = original


def _modules(model: Any) -> tuple[Any, Any]:
    import torch
    from transformers import DynamicCache, EncoderDecoderCache

    audio = _is_audio(model)

    class Encoder(torch.nn.Module):
        """The encoder and every decoder layer's cross-attention keys and values."""

        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def cross(self, hidden: Any, **kw: Any) -> Any:
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            start = torch.zeros(hidden.shape[0], 1, dtype=torch.int64)
            self.m(encoder_outputs=(hidden,), decoder_input_ids=start, past_key_values=cache, use_cache=True, **kw)
            return [{"key": layer.keys, "value": layer.values} for layer in cache.cross_attention_cache.layers]

    class TextEncoder(Encoder):
        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.m.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return self.cross(hidden, attention_mask=attention_mask)

    class AudioEncoder(Encoder):
        def forward(self, input_features: Any) -> Any:
            return self.cross(self.m.get_encoder()(input_features=input_features).last_hidden_state)

    class Step(torch.nn.Module):
        """One decoder step on the self-attention cache and the cross-attention cache."""

        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, encoder_attention_mask: Any,
                    past_key_values: Any, cross_key_values: Any) -> Any:
            cache = EncoderDecoderCache(_caches(past_key_values), _caches(cross_key_values))
            k = cross_key_values[0]["key"]
            hidden = torch.zeros(k.shape[0], k.shape[2], self.m.config.d_model, dtype=k.dtype)  # unused: the cross cache is full
            kw: dict[str, Any] = {"decoder_position_ids": position_ids} if audio else {"attention_mask": encoder_attention_mask}
            key_positions = [torch.cumsum(attention_mask.to(torch.int64), dim=1) - 1]
            with _rowwise_t5_bias(self.m, key_positions):
                out = self.m(encoder_outputs=(hidden,), decoder_input_ids=input_ids, decoder_attention_mask=attention_mask,
                             past_key_values=cache, use_cache=True, **kw)
            present = out.past_key_values.self_attention_cache
            return out.logits, [{"key": layer.keys, "value": layer.values} for layer in present.layers]

    return (AudioEncoder if audio else TextEncoder)(model).eval(), Step(model).eval()


def _export_encoder(enc: Any, model: Any, audio: bool) -> Any:
    import torch
    from torch.export import Dim

    g = torch.Generator().manual_seed(0)
    if audio:
        c = model.config
        frames = c.max_source_positions * model.model.encoder.conv1.stride[0] * model.model.encoder.conv2.stride[0]
        args: tuple[Any, ...] = (torch.randn(2, c.num_mel_bins, frames, generator=g),)
        dynamic: Any = ({0: Dim.DYNAMIC},)
    else:
        args = (torch.randint(0, model.config.vocab_size, (2, 5), generator=g), torch.ones(2, 5, dtype=torch.int64))
        dynamic = ({0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, {0: Dim.DYNAMIC, 1: Dim.DYNAMIC})
    with torch.no_grad():
        return torch.export.export(enc, args, dynamic_shapes=dynamic, strict=False)


def _export_step(step: Any, model: Any, audio: bool, enc_len: int) -> Any:
    import torch
    from torch.export import Dim

    layers, heads, head_dim = _dims(model)
    batch, past, seq = 2, 3, 2
    src = enc_len if audio else 5
    g = torch.Generator().manual_seed(0)
    dtype = next(model.parameters()).dtype

    def entries(n: int) -> list[dict[str, Any]]:
        return [{"key": torch.randn(batch, heads, n, head_dim, generator=g, dtype=dtype),
                 "value": torch.randn(batch, heads, n, head_dim, generator=g, dtype=dtype)} for _ in range(layers)]

    args = (torch.randint(0, model.config.vocab_size, (batch, seq), generator=g), torch.ones(batch, past + seq, dtype=torch.int64),
            torch.arange(past, past + seq).expand(batch, seq).contiguous(), torch.ones(batch, src, dtype=torch.int64),
            entries(past), entries(src))
    bs = {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}
    cache = [{"key": {0: Dim.DYNAMIC, 2: Dim.DYNAMIC}, "value": {0: Dim.DYNAMIC, 2: Dim.DYNAMIC}} for _ in range(layers)]
    cross = [{"key": {0: Dim.DYNAMIC} if audio else {0: Dim.DYNAMIC, 2: Dim.DYNAMIC},
              "value": {0: Dim.DYNAMIC} if audio else {0: Dim.DYNAMIC, 2: Dim.DYNAMIC}} for _ in range(layers)]
    dynamic = (bs, bs, bs, {0: Dim.DYNAMIC} if audio else bs, cache, cross)
    with torch.no_grad():
        return torch.export.export(step, args, dynamic_shapes=dynamic, strict=False)


def _load(hf_dir: pathlib.Path, dtype: str | None) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq

    kw: dict[str, Any] = {"dtype": getattr(torch, dtype)} if dtype else {}
    config = AutoConfig.from_pretrained(str(hf_dir))
    auto = AutoModelForSpeechSeq2Seq if getattr(config, "num_mel_bins", None) else AutoModelForSeq2SeqLM
    return auto.from_pretrained(str(hf_dir), **kw).eval()


def export_seq2seq(
    hf_dir: str | os.PathLike[str],
    repo: str | os.PathLike[str] = "models",
    name: str | None = None,
    *,
    max_seq_len: int | None = None,
    max_source_len: int | None = None,
    slots: int = 8,
    prefill_buckets: Sequence[int] | None = None,
    slot_buckets: Sequence[int] | None = None,
    encoder_buckets: Sequence[int] | None = None,
    dtype: str | None = None,
) -> ExportedSeq2Seq:
    """Exports the encoder-decoder saved in ``hf_dir`` into model repository ``repo``.

    ``max_seq_len`` (default 256, at most the decoder's positions) is the
    most tokens a generated sequence holds (its decoder prompt included);
    ``max_source_len`` the longest encoder input (text encoders, default
    512; Whisper's is fixed by its config); ``encoder_buckets`` the encoder
    input lengths compiled (default powers of two from 16); the others as in
    export_causal_lm.
    """
    import torch
    from transformers import GenerationConfig

    hf_dir = pathlib.Path(hf_dir)
    name = name or hf_dir.name
    if not name or name.startswith(".") or "/" in name or "\\" in name:
        raise ValueError(f"xserve.export_seq2seq: model name {name!r}: want a plain directory name")
    model = _load(hf_dir, dtype)
    audio = _is_audio(model)
    c = model.config
    limit = getattr(c, "max_target_positions", None) or 2048
    max_seq_len = int(max_seq_len or min(limit, 256))
    if max_seq_len > limit:
        raise ValueError(f"xserve.export_seq2seq: max_seq_len {max_seq_len} is more than the decoder's {limit} positions")
    src_len = int(c.max_source_positions) if audio else int(max_source_len or 512)

    enc, step = _modules(model)
    ep_enc = _export_encoder(enc, model, audio)
    ep_step = _export_step(step, model, audio, src_len)

    gen = GenerationConfig.from_model_config(c)
    with contextlib.suppress(OSError):
        gen = GenerationConfig.from_pretrained(str(hf_dir))
    start = _ids(gen.decoder_start_token_id if gen.decoder_start_token_id is not None else c.decoder_start_token_id)
    eos = _ids(gen.eos_token_id) or _ids(c.eos_token_id)
    pad = gen.pad_token_id if gen.pad_token_id is not None else c.pad_token_id
    encoder: dict[str, Any] = {"file": "encoder.pt2", "max_length": src_len}
    if not audio:
        encoder["buckets"] = list(encoder_buckets or _powers(min(16, src_len), src_len))
    gen_cfg: dict[str, Any] = {"max_seq_len": max_seq_len, "slots": slots,
                               "prefill_buckets": list(prefill_buckets or _powers(min(16, max_seq_len), max_seq_len)),
                               "slot_buckets": list(slot_buckets or _powers(1, slots)), "encoder": encoder,
                               "decoder_start_token_id": start}
    if eos:
        gen_cfg["eos_token_id"] = eos
    if isinstance(pad, int) and 0 <= pad < c.vocab_size:
        gen_cfg["pad_token_id"] = pad
    cfg = {"generate": gen_cfg}

    model_dir = pathlib.Path(repo) / name
    model_dir.mkdir(parents=True, exist_ok=True)
    version = _next_version(model_dir)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{version}.tmp-", dir=model_dir))
    try:
        torch.export.save(ep_step, str(tmp / "model.pt2"))
        torch.export.save(ep_enc, str(tmp / "encoder.pt2"))
        config_path, copied = _publish(tmp, model_dir, version, hf_dir, TOKENIZER_FILES + EXTRA_FILES, cfg, "export_seq2seq")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    d = model_dir / str(version)
    return ExportedSeq2Seq(name, version, d / "model.pt2", d / "encoder.pt2", config_path, cfg, copied)
