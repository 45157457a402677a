"""ONNX Runtime GenAI timed on commands from bench.py (run with .venv-genai).

    ortgenai_worker.py MODEL_DIR THREADS

MODEL_DIR holds model.onnx and genai_config.json. Prints "ready", then
takes one JSON command a line ({"prompts": [[ids], ...], "max_tokens": N};
the prompts of a command have one length) and generates for all prompts as
one batch, greedy, exactly N new tokens each, printing
{"first": [...], "end": [...], "tokens": [...]} in seconds from the start.
"""

import json
import sys
import time

import numpy as np
import onnxruntime_genai as og


def main() -> None:
    model = og.Model(sys.argv[1])
    print("ready", flush=True)
    for line in sys.stdin:
        line = line.strip()
        if line == "quit":
            return
        c = json.loads(line)
        prompts = np.array(c["prompts"], dtype=np.int32)
        batch, length = prompts.shape
        n = c["max_tokens"]
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=length + n, min_length=length + n, do_sample=False, batch_size=batch)
        start = time.perf_counter()
        gen = og.Generator(model, params)
        gen.append_tokens(prompts)
        first = None
        count = 0
        while not gen.is_done():
            gen.generate_next_token()
            count += 1
            if first is None:
                first = time.perf_counter() - start
        end = time.perf_counter() - start
        del gen
        print(json.dumps({"first": [first] * batch, "end": [end] * batch, "tokens": [count] * batch}), flush=True)


if __name__ == "__main__":
    main()
