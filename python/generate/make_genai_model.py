"""An int4 model built by ONNX Runtime GenAI's model builder, with ONNX
Runtime GenAI's own greedy generations (make genai-model; run with
.venv-genai's python).

    make_genai_model.py --hf .cache/gen/hf/llama --refs .cache/gen/refs.json \
        --zoo-python .venv-zoo/bin/python --out .cache/gen/genai

The builder (onnxruntime_genai/models/builder.py, from the pinned wheel)
needs torch and transformers, which .venv-zoo has; its int4 quantizer needs
the onnxruntime that onnxruntime-genai pins (.venv-genai's), put first on
the builder's path. It writes OUT/llama-int4 (model.onnx with MatMulNBits
and GroupQueryAttention, model.onnx.data, genai_config.json, tokenizer) from
make gen-models' small Llama (seeded weights). accuracy_level=1: float
activations (level 4, the CPU default, quantizes them to int8 on the fly).
OUT/refs.json holds, per prompt of make gen-models' refs.json, the tokens
ONNX Runtime GenAI generates greedily (at most NEW, until an eos id).
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import tempfile

import numpy as np
import onnxruntime
import onnxruntime_genai as og

NEW = 48


def build(hf: pathlib.Path, out: pathlib.Path, zoo_python: str) -> None:
    builder = pathlib.Path(og.__file__).parent / "models" / "builder.py"
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "path"
        path.mkdir()
        (path / "onnxruntime").symlink_to(pathlib.Path(onnxruntime.__file__).parent)
        env = dict(os.environ, PYTHONPATH=str(path))
        subprocess.run([zoo_python, str(builder), "-m", "llama", "-i", str(hf), "-o", str(out), "-p", "int4", "-e", "cpu",
                        "-c", str(pathlib.Path(tmp) / "cache"), "--extra_options", "accuracy_level=1"], env=env, check=True)


def generate(model_dir: pathlib.Path, prompts: list[list[int]]) -> list[list[int]]:
    model = og.Model(str(model_dir))
    out = []
    for p in prompts:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(p) + NEW, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(np.array([p], dtype=np.int32))
        toks = []
        while not gen.is_done():
            gen.generate_next_token()
            toks.append(int(gen.get_next_tokens()[0]))
        out.append(toks)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True)
    ap.add_argument("--refs", required=True)
    ap.add_argument("--zoo-python", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    model_dir = out / "llama-int4"
    build(pathlib.Path(a.hf), model_dir, a.zoo_python)
    prompts = json.loads(pathlib.Path(a.refs).read_text())["prompts"]
    cfg = json.loads((model_dir / "genai_config.json").read_text())
    refs = {"new_tokens": NEW, "eos_token_id": cfg["model"]["eos_token_id"], "prompts": prompts, "tokens": generate(model_dir, prompts),
            "onnxruntime_genai": og.__version__}
    (out / "refs.json").write_text(json.dumps(refs))
    print(f"{model_dir}: {len(prompts)} greedy generations by onnxruntime-genai {og.__version__}")


if __name__ == "__main__":
    main()
