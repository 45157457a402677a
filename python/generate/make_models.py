"""Makes the generative models the Go tests serve (make gen-models -> .cache/gen).

For each family (Llama, Qwen2, Phi-3, GPT-2) a small config with seeded
weights is saved with save_pretrained together with a tokenizer trained here
by Hugging Face tokenizers (byte-level BPE) and a chat template, then
exported twice with xserve.export_causal_lm, as model.pt2 and model.onnx:

    OUT/hf/<family>/                 save_pretrained (model, tokenizer, chat template)
    OUT/repo/<family>-pt2/           config.yaml, 1/model.pt2, tokenizer files
    OUT/repo/<family>-onnx/          config.yaml, 1/model.onnx, tokenizer files
    OUT/refs.json                    transformers generate (greedy, 128 new
                                     tokens) for 16 prompts of mixed lengths,
                                     and apply_chat_template of a conversation
    OUT/tokenizers/<kind>/tokenizer.json and OUT/tokenizers/cases.json:
                                     BPE (byte-level, and Llama's with byte
                                     fallback), WordPiece and Unigram
                                     tokenizers with the ids and decoded
                                     texts tokenizers gives for test strings

    .venv-zoo/bin/python python/generate/make_models.py --out .cache/gen

Weights are scaled up from transformers' initialization so that greedy
decoding has clear winners (refs.json records the smallest gap between the
two best logits over all steps): the server computes in a different order
than PyTorch, and a near tie would be decided by rounding.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

SEED = 0
NEW_TOKENS = 128
MAX_SEQ_LEN = 256
VOCAB = 384
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
WORDS = ("the a model server token cache slot batch prompt stream decode prefill graph tensor device "
         "loop sequence answer question river mountain blue green quick brown fox jumps over lazy dog "
         "one two three four five six seven eight nine ten hello world xserve generates text fast").split()


def corpus(n: int = 2000) -> list[str]:
    rng = random.Random(SEED)
    lines = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 14))]
        if rng.random() < 0.3:
            words.append(str(rng.randint(0, 9999)))
        line = " ".join(words)
        lines.append(line.capitalize() + rng.choice([".", "!", "?", ",", ""]))
    return lines


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_tokenizers(out: pathlib.Path) -> dict[str, object]:
    """The tokenizer kinds tokenizer.json holds, trained on the corpus."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    text = corpus()
    toks = {}
    # Byte-level BPE (GPT-2, Qwen2, Llama 3).
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS,
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    toks["bpe_bytelevel"] = t
    # BPE with byte fallback and a metaspace (Llama 2, Mistral).
    t = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    bytes_tokens = [f"<0x{i:02X}>" for i in range(256)]
    t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=VOCAB + 256, special_tokens=["<unk>", "<s>", "</s>"] + bytes_tokens))
    toks["bpe_llama"] = t
    # WordPiece (BERT).
    t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.decoder = decoders.WordPiece()
    t.train_from_iterator(text, trainers.WordPieceTrainer(vocab_size=VOCAB, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    toks["wordpiece"] = t
    # Unigram (T5, ALBERT, XLNet).
    t = Tokenizer(models.Unigram())
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    t.train_from_iterator(text, trainers.UnigramTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"))
    toks["unigram"] = t

    samples = ["Hello world", "The quick brown fox jumps over the lazy dog.", "  two  spaces, and\ttabs\n",
               "xserve generates text fast! 1234 5678", "Ünïcödé ☃ and 日本語 text", "stream decode prefill, cache slot?",
               "<|im_start|>user\nhello<|im_end|>\n", ""]
    cases = {}
    for kind, t in toks.items():
        d = out / "tokenizers" / kind
        d.mkdir(parents=True, exist_ok=True)
        t.save(str(d / "tokenizer.json"))
        cases[kind] = [{"text": s, "ids": t.encode(s).ids, "decoded": t.decode(t.encode(s).ids)} for s in samples]
    (out / "tokenizers" / "cases.json").write_text(json.dumps(cases, indent=1, ensure_ascii=False))
    return toks


def families() -> dict[str, object]:
    from transformers import GPT2Config, LlamaConfig, Phi3Config, Qwen2Config

    small = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 max_position_embeddings=MAX_SEQ_LEN, bos_token_id=0, eos_token_id=0, pad_token_id=0, tie_word_embeddings=False)
    return {
        "llama": LlamaConfig(num_key_value_heads=2, **small),
        "qwen2": Qwen2Config(num_key_value_heads=2, **small),
        "phi3": Phi3Config(num_key_value_heads=2, **small),
        "gpt2": GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=MAX_SEQ_LEN, bos_token_id=0, eos_token_id=0,
                           pad_token_id=0),
    }


def prompts() -> list[list[int]]:
    """16 prompts of mixed lengths (3 to 40 tokens)."""
    rng = random.Random(SEED + 1)
    lengths = [3, 40, 7, 16, 1, 29, 12, 33, 5, 21, 9, 38, 14, 2, 25, 17]
    return [[rng.randrange(3, VOCAB) for _ in range(n)] for n in lengths]


def build(name: str, config: object, tok: object, out: pathlib.Path) -> pathlib.Path:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(SEED)
    config._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(8.0)  # clear winners: see the module's doc
    d = out / "hf" / name
    if d.exists():
        shutil.rmtree(d)
    model.save_pretrained(d)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(d)
    return d


def reference(d: pathlib.Path) -> tuple[list[list[int]], float]:
    """Greedy transformers generate for each prompt alone, and the smallest top-2 logit gap."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(d).eval()
    outs, gap = [], float("inf")
    for p in prompts():
        with torch.no_grad():
            r = model.generate(torch.tensor([p]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                               eos_token_id=None, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        outs.append(r.sequences[0, len(p):].tolist())
        for lg in r.logits:
            top = torch.topk(lg[0].float(), 2).values
            gap = min(gap, float(top[0] - top[1]))
    return outs, gap


CHAT = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Hello world, what is a cache slot?"}]


def chat_reference(d: pathlib.Path) -> dict[str, object]:
    """transformers' apply_chat_template of CHAT with the saved tokenizer."""
    from transformers import AutoTokenizer

    from transformers import AutoModelForCausalLM

    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d).eval()
    text = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]

    def greedy(prompt: list[int], n: int) -> str:
        # As served: stop at the model's eos ids (generation_config.json).
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
        return tok.decode(out[0, len(prompt):], skip_special_tokens=True)

    completion_ids = tok("Hello world")["input_ids"]
    return {"messages": CHAT, "text": text, "ids": ids, "completion_ids": completion_ids,
            "chat_greedy_12": greedy(ids, 12), "completion_prompt": "Hello world", "completion_greedy_12": greedy(completion_ids, 12)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".cache/gen")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    torch.set_num_threads(1)
    from xserve.causal_lm import export_causal_lm

    toks = train_tokenizers(out)
    repo = out / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    refs: dict[str, object] = {"new_tokens": NEW_TOKENS, "prompts": prompts(), "models": {}}
    for name, config in families().items():
        d = build(name, config, toks["bpe_bytelevel"], out)
        if name == "llama":
            refs["chat"] = chat_reference(d)
        tokens, gap = reference(d)
        refs["models"][name] = {"tokens": tokens, "min_top2_gap": gap}
        for fmt in ("pt2", "onnx"):
            r = export_causal_lm(d, repo=repo, name=f"{name}-{fmt}", format=fmt, max_seq_len=MAX_SEQ_LEN, slots=16,
                                 prefill_buckets=[16, 32, 64])
            print(f"{name}: {r.path} (top-2 gap {gap:.3g})", flush=True)
    (out / "refs.json").write_text(json.dumps(refs))


if __name__ == "__main__":
    main()
