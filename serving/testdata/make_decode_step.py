"""Writes serving/testdata/decode_step/: one decode step of a toy
transformers 5.23.0 LlamaForCausalLM (1 layer, hidden 32, seeded random
weights) with its KV cache as inputs, exported by torch.export with a
dynamic batch and past length: its attention_mask input is [batch, past +
1], an input dim that is an expression of symbols. Beside model.pt2, two
requests and PyTorch eager's outputs: past 7 (batch 3) and past 70
(batch 2), in.<r>.<k>.<input>.npy and ref.<r>.<k>.npy.

Pinned: torch 2.14.1, transformers 5.23.0 (.venv-zoo). From the
repository root:

	.venv-zoo/bin/python serving/testdata/make_decode_step.py
"""
import os

import numpy as np
import torch
import transformers
from torch.export import Dim
from transformers.cache_utils import DynamicCache

OUT = "serving/testdata/decode_step"
torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               num_key_value_heads=1, intermediate_size=64, max_position_embeddings=256)
cfg._attn_implementation = "eager"
lm = transformers.LlamaForCausalLM(cfg).eval()


class Step(torch.nn.Module):
    """One decode step: the new token, the mask over past + 1 positions and
    the layer's cached keys and values in; logits and the new cache out."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, past_key, past_value):
        cache = DynamicCache(config=cfg)
        cache.update(past_key, past_value, 0)
        o = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        return o.logits, o.past_key_values.layers[0].keys, o.past_key_values.layers[0].values


def inputs(b, p, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(b, p + 1, dtype=torch.int64)
    mask[0, :2] = 0  # the first sequence's two oldest positions are padding
    return (torch.randint(0, 64, (b, 1), generator=g), mask,
            torch.randn(b, 1, p, 16, generator=g), torch.randn(b, 1, p, 16, generator=g))


step = Step(lm).eval()
batch, past = Dim("batch", min=1, max=64), Dim("past", min=1, max=200)
ep = torch.export.export(step, inputs(2, 5, 1), dynamic_shapes=({0: batch}, {0: batch, 1: past + 1}, {0: batch, 2: past}, {0: batch, 2: past}))
os.makedirs(OUT, exist_ok=True)
torch.export.save(ep, os.path.join(OUT, "model.pt2"))
names = ["input_ids", "attention_mask", "past_key", "past_value"]
for r, (b, p) in enumerate([(3, 7), (2, 70)]):
    args = inputs(b, p, 10 + r)
    with torch.no_grad():
        outs = step(*args)
    for k, (n, a) in enumerate(zip(names, args)):
        np.save(os.path.join(OUT, f"in.{r}.{k}.{n}.npy"), a.numpy())
    for k, o in enumerate(outs):
        np.save(os.path.join(OUT, f"ref.{r}.{k}.npy"), o.numpy())
