"""Makes the encoder-decoder models the Go tests serve (make seq2seq-models -> .cache/seq2seq).

A small T5 (with a Unigram tokenizer trained here, as T5's is) and a small
Whisper, from configs with seeded weights, saved with save_pretrained and
exported by `python -m xserve export-seq2seq`:

    OUT/hf/<family>/            save_pretrained (model, tokenizer)
    OUT/repo/<family>/          config.yaml, 1/model.pt2, 1/encoder.pt2, tokenizer files
    OUT/refs.json               transformers generate (greedy) of each input alone:
                                T5: texts, their ids by the tokenizer, the generated ids
                                and their decoded text; Whisper: seeded log-mel features
                                [mels, frames], the decoder prompt and the generated ids

    .venv-zoo/bin/python python/generate/make_seq2seq.py --out .cache/seq2seq

As in make_models.py the weights are scaled up from transformers'
initialization so that greedy decoding has clear winners (refs.json records
the smallest gap between the two best logits over all steps).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "python" / "generate"))

from make_models import corpus  # noqa: E402

SEED = 0
VOCAB = 384
NEW_TOKENS = 24
MAX_SEQ_LEN = 64
MAX_SOURCE = 64
MELS, SOURCE_POSITIONS = 16, 32  # Whisper: features [16, 64] -> 32 encoder positions
WHISPER_PROMPT = [3, 4, 5]  # <|startoftranscript|> and two task tokens, as Whisper's decoder prompts are


def t5_tokenizer() -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    t = Tokenizer(models.Unigram())
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    t.train_from_iterator(corpus(), trainers.UnigramTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"))
    t.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return t


def texts() -> list[str]:
    rng = random.Random(SEED + 2)
    lines = corpus(200)
    return [" ".join(rng.choice(lines) for _ in range(n)) for n in (1, 4, 2, 1, 3, 2, 5, 1)]


def scaled(model: torch.nn.Module, factor: float) -> torch.nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(factor)
    return model.eval()


def greedy(model: object, n: int, **inputs: object) -> tuple[list[int], float]:
    with torch.no_grad():
        r = model.generate(**inputs, max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None,
                           output_logits=True, return_dict_in_generate=True)
    gap = min(float(torch.topk(lg[0].float(), 2).values.diff().abs()) for lg in r.logits)
    prompt = inputs.get("decoder_input_ids")
    skip = prompt.shape[1] if prompt is not None else 1
    return r.sequences[0, skip:].tolist(), gap


def build_t5(out: pathlib.Path) -> tuple[pathlib.Path, dict[str, object]]:
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    torch.manual_seed(SEED)
    cfg = T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                   relative_attention_num_buckets=16, relative_attention_max_distance=32, decoder_start_token_id=0, pad_token_id=0,
                   eos_token_id=1, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    model = scaled(T5ForConditionalGeneration(cfg), 16.0)
    d = out / "hf" / "t5"
    model.save_pretrained(d)
    tok = PreTrainedTokenizerFast(tokenizer_object=t5_tokenizer(), pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    tok.save_pretrained(d)
    cases, gap = [], float("inf")
    for text in texts():
        ids = tok(text)["input_ids"]
        toks, g = greedy(model, NEW_TOKENS, input_ids=torch.tensor([ids]))
        gap = min(gap, g)
        cases.append({"text": text, "input_ids": ids, "tokens": toks, "decoded": tok.decode(toks, skip_special_tokens=True)})
    return d, {"cases": cases, "min_top2_gap": gap, "decoder_prompt": [0]}


def build_whisper(out: pathlib.Path) -> tuple[pathlib.Path, dict[str, object]]:
    from transformers import WhisperConfig, WhisperForConditionalGeneration
    torch.manual_seed(SEED)
    cfg = WhisperConfig(vocab_size=VOCAB, num_mel_bins=MELS, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128,
                        max_source_positions=SOURCE_POSITIONS, max_target_positions=128, pad_token_id=0, bos_token_id=3,
                        eos_token_id=1, decoder_start_token_id=3, begin_suppress_tokens=None, suppress_tokens=None)
    cfg._attn_implementation = "eager"
    model = scaled(WhisperForConditionalGeneration(cfg), 24.0)
    d = out / "hf" / "whisper"
    model.save_pretrained(d)
    g = torch.Generator().manual_seed(SEED + 3)
    cases, gap = [], float("inf")
    for _ in range(6):
        feats = torch.randn(1, MELS, 2 * SOURCE_POSITIONS, generator=g)
        # Whisper's own generate adds language detection and timestamp rules
        # that need a tokenizer's special tokens; greedy decoding from a
        # given decoder prompt is transformers' GenerationMixin.generate.
        toks, gp = greedy(_Generic(model), NEW_TOKENS, input_features=feats, decoder_input_ids=torch.tensor([WHISPER_PROMPT]))
        gap = min(gap, gp)
        cases.append({"features": feats[0].tolist(), "tokens": toks})
    return d, {"cases": cases, "min_top2_gap": gap, "decoder_prompt": WHISPER_PROMPT}


class _Generic:
    """A Whisper model whose generate is transformers' GenerationMixin.generate."""

    def __init__(self, model: object) -> None:
        self.model = model

    def generate(self, **kw: object) -> object:
        from transformers.generation.utils import GenerationMixin

        return GenerationMixin.generate(self.model, **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".cache/seq2seq")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    torch.set_num_threads(1)
    repo = out / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    refs: dict[str, object] = {"new_tokens": NEW_TOKENS, "models": {}}
    for name, build in (("t5", build_t5), ("whisper", build_whisper)):
        d, ref = build(out)
        refs["models"][name] = ref
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-m", "xserve", "export-seq2seq", str(d), "--repo", str(repo), "--name", name,
                        "--max-seq-len", str(MAX_SEQ_LEN), "--max-source-len", str(MAX_SOURCE), "--slots", "8",
                        "--prefill-buckets", "4,16", "--encoder-buckets", "16,32,64"], check=True, env=env)
        print(f"{name}: top-2 gap {ref['min_top2_gap']:.3g}", flush=True)
    (out / "refs.json").write_text(json.dumps(refs))


if __name__ == "__main__":
    main()
