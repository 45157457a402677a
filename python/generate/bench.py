"""Generation benchmark (bench/generate.sh): xserve vs ONNX Runtime GenAI vs transformers.

One Llama-style decoder of about 100M parameters (seeded weights, saved
with save_pretrained) is served by:

- xserve: exported by xserve.export_causal_lm (.pt2, and ONNX with
  --onnx), timed in process by cmd/gen-bench (serving.Manager, the
  generation loop with continuous batching; no HTTP);
- ONNX Runtime GenAI (onnxruntime-genai, .venv-genai) on the same ONNX
  file (python/generate/ortgenai_worker.py);
- transformers generate on the same weights, eager and with
  torch.compile(model.forward) on a static cache.

For each, interleaved round by round on the same prompts (64 tokens, greedy,
128 new tokens, eos ignored): time to first token and decode tokens/s of
one stream, and the aggregate tokens/s of 16 streams started at once (one
batch of 16 for ORT GenAI and transformers). Prints a markdown table of the
medians over the rounds.

    .venv-zoo/bin/python python/generate/bench.py --runner bin/gen-bench [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

PROMPT, NEW, STREAMS = 64, 128, 16
MAX_SEQ_LEN = 256


def build_model(out: pathlib.Path) -> pathlib.Path:
    """The ~100M Llama (12 layers, hidden 768, 4 kv heads, vocab 32000, tied embeddings)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    d = out / "hf" / "llama100m"
    if (d / "config.json").exists():
        return d
    cfg = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                      num_key_value_heads=4, max_position_embeddings=MAX_SEQ_LEN, tie_word_embeddings=True,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(d)
    return d


def param_count(hf: pathlib.Path) -> int:
    from safetensors import safe_open

    with safe_open(str(hf / "model.safetensors"), "pt") as f:
        return sum(f.get_slice(k).get_shape().numel() if hasattr(f.get_slice(k).get_shape(), "numel")
                   else int(torch.tensor(f.get_slice(k).get_shape()).prod()) for k in f.keys())


def export(hf: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    from xserve.causal_lm import export_causal_lm

    repo = out / "repo"
    for fmt in ("pt2", "onnx"):
        if not (repo / f"llama100m-{fmt}" / "1").exists():
            export_causal_lm(hf, repo=repo, name=f"llama100m-{fmt}", format=fmt, max_seq_len=MAX_SEQ_LEN, slots=STREAMS,
                             prefill_buckets=[PROMPT], slot_buckets=[1, 2, 4, 8, 16])
        cfg = repo / f"llama100m-{fmt}" / "config.yaml"
        if "warmup: eager" not in cfg.read_text():
            cfg.write_text(cfg.read_text() + "warmup: eager\n")
    return repo


def genai_dir(hf: pathlib.Path, repo: pathlib.Path, out: pathlib.Path, threads: int) -> pathlib.Path:
    """The ONNX file xserve serves, with the genai_config.json ORT GenAI reads."""
    d = out / "ortgenai"
    d.mkdir(parents=True, exist_ok=True)
    src = repo / "llama100m-onnx" / "1" / "model.onnx"
    if not (d / "model.onnx").exists():
        shutil.copyfile(src, d / "model.onnx")
    c = json.loads((hf / "config.json").read_text())
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    cfg = {
        "model": {
            "type": "llama", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "vocab_size": c["vocab_size"],
            "context_length": MAX_SEQ_LEN,
            "decoder": {
                "filename": "model.onnx", "head_size": c["hidden_size"] // heads, "hidden_size": c["hidden_size"],
                "num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": c["num_hidden_layers"],
                "session_options": {"intra_op_num_threads": threads, "inter_op_num_threads": 1, "provider_options": []},
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask", "position_ids": "position_ids",
                           "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key", "present_value_names": "present.%d.value"},
            },
        },
        "search": {"max_length": MAX_SEQ_LEN, "min_length": 0, "do_sample": False, "num_beams": 1, "past_present_share_buffer": False},
    }
    (d / "genai_config.json").write_text(json.dumps(cfg, indent=1))
    return d


class Worker:
    """A process timed over stdin/stdout (gen-bench, the ORT GenAI worker)."""

    def __init__(self, name: str, args: list[str]) -> None:
        self.name = name
        self.p = subprocess.Popen(args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"{name} did not start: {line!r}")

    def run(self, prompts: list[list[int]], n: int) -> dict:
        self.p.stdin.write(json.dumps({"prompts": prompts, "max_tokens": n}) + "\n")
        self.p.stdin.flush()
        r = json.loads(self.p.stdout.readline())
        if r.get("error"):
            raise RuntimeError(f"{self.name}: {r['error']}")
        return r

    def close(self) -> None:
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        self.p.wait(timeout=60)


class HF:
    """transformers generate, eager or with torch.compile on a static cache."""

    def __init__(self, hf: pathlib.Path, compiled: bool) -> None:
        from transformers import AutoModelForCausalLM

        self.name = "transformers compile" if compiled else "transformers eager"
        self.model = AutoModelForCausalLM.from_pretrained(hf).eval()
        self.kw: dict = {}
        if compiled:
            self.kw["cache_implementation"] = "static"
            self.model.forward = torch.compile(self.model.forward, dynamic=False)
            for b in (1, STREAMS):  # compile every shape before timing
                self.run([[5] * PROMPT] * b, 3)

    def run(self, prompts: list[list[int]], n: int) -> dict:
        ids = torch.tensor(prompts)
        b = len(prompts)
        start = time.perf_counter()
        with torch.no_grad():
            self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, min_new_tokens=1, do_sample=False,
                                pad_token_id=0, **self.kw)
        first = time.perf_counter() - start
        start = time.perf_counter()
        with torch.no_grad():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                      pad_token_id=0, **self.kw)
        end = time.perf_counter() - start
        return {"first": [first] * b, "end": [end] * b, "tokens": [out.shape[1] - ids.shape[1]] * b}

    def close(self) -> None:
        pass


def measure(engine: object, prompts: list[list[int]], new: int) -> dict[str, float]:
    one = engine.run(prompts[:1], new)
    ttft = one["first"][0]
    decode = (one["tokens"][0] - 1) / (one["end"][0] - one["first"][0])
    many = engine.run(prompts, new)
    agg = sum(many["tokens"]) / max(many["end"])
    return {"ttft_ms": 1000 * ttft, "decode_tps": decode, "agg16_tps": agg}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / ".cache" / "gen-bench"))
    ap.add_argument("--runner", default=str(ROOT / "bin" / "gen-bench"))
    ap.add_argument("--genai-python", default=str(ROOT / ".venv-genai" / "bin" / "python"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new", type=int, default=NEW, help="new tokens per stream")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--engines", default="xserve-pt2,xserve-onnx,ortgenai,hf-eager,hf-compile")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    torch.set_num_threads(args.threads)
    hf = build_model(out)
    repo = export(hf, out)
    gdir = genai_dir(hf, repo, out, args.threads)
    wanted = args.engines.split(",")
    engines = []
    t0 = time.time()
    for name in wanted:
        if name.startswith("xserve-"):
            engines.append(Worker(f"xserve ({name[7:]})", [args.runner, "-repo", str(repo), "-model", "llama100m-" + name[7:]]))
        elif name == "ortgenai":
            engines.append(Worker("ONNX Runtime GenAI", [args.genai_python, str(ROOT / "python/generate/ortgenai_worker.py"), str(gdir)]))
        elif name in ("hf-eager", "hf-compile"):
            engines.append(HF(hf, name == "hf-compile"))
        print(f"{engines[-1].name}: ready after {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, 32000, (STREAMS, PROMPT), generator=g).tolist()
    for e in engines:  # one untimed pass each
        e.run(prompts[:1], 8)
    results: dict[str, list[dict[str, float]]] = {e.name: [] for e in engines}
    for r in range(args.rounds):
        for e in engines:
            m = measure(e, prompts, args.new)
            results[e.name].append(m)
            print(f"round {r + 1} {e.name}: {m}", file=sys.stderr, flush=True)
    for e in engines:
        e.close()
    cfg = json.loads((hf / "config.json").read_text())
    print(f"\nLlama, {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, vocab {cfg['vocab_size']}: "
          f"{param_count(hf) / 1e6:.0f}M parameters; {PROMPT}-token prompts, {args.new} new tokens (greedy), {args.rounds} interleaved rounds, medians; "
          f"{args.threads} threads, {os.cpu_count()} CPUs\n")
    print("| engine | time to first token (ms) | decode tokens/s, 1 stream | tokens/s, 16 streams | 16 streams / 1 stream |")
    print("|---|---|---|---|---|")
    for name, ms in results.items():
        ttft = statistics.median(m["ttft_ms"] for m in ms)
        dec = statistics.median(m["decode_tps"] for m in ms)
        agg = statistics.median(m["agg16_tps"] for m in ms)
        print(f"| {name} | {ttft:.0f} | {dec:.1f} | {agg:.1f} | {agg / dec:.1f}x |")


if __name__ == "__main__":
    main()
