"""Audio streams and ONNX Runtime's references for the stateful-model tests
(serving's TestSequences*, cmd/xserve's TestTritonSequences): silero-vad's
16 kHz model (the silero-vad wheel pinned with its sha256 in
python/realmodels/packaged.py, extracted by `make realmodels-small`) run by
ONNX Runtime on each stream alone, chunk after chunk, its state carried from
one chunk to the next as silero-vad's own OnnxWrapper does.

    .venv/bin/python python/seq/silero_streams.py \
        --model .cache/realmodels-small/cases/silero_vad_16k_op15.onnx-package/model.onnx --out .cache/seq

Writes OUT/silero_vad_16k/: 1/model.onnx (a repository version with no
config.yaml), chunks.npy float32 [streams, chunks, 512] (noise with two
stretches of synthetic vowels, different per stream), ref.npy float32 [streams, chunks, 1]
(the speech probability of each chunk), ref_nostate.npy [1, chunks, 1] (the
first stream with the state reset at every chunk: what a server that lost
the state would answer), ref_initial.npy [1, chunks, 1] (the first stream
with its state starting at 0.25 everywhere instead of zeros: config.yaml's
sequence.state[].initial).
"""

import argparse
import os
import shutil

import numpy as np
import onnxruntime as ort

CHUNK = 512  # samples per chunk at 16 kHz, as silero-vad takes them
RATE = 16000


def vowel(rng, n):
    """n samples of a synthetic vowel: a jittered glottal pulse train shaped
    by three formants (in the frequency domain), with a syllable rhythm."""
    f0 = rng.uniform(100, 220)
    period = RATE / f0
    pulses = np.zeros(n)
    pos = 0.0
    while pos < n:
        pulses[int(pos)] = 1.0
        pos += period * rng.uniform(0.97, 1.03)
    spec = np.fft.rfft(pulses)
    f = np.fft.rfftfreq(n, 1 / RATE)
    env = sum(1 / (1 + ((f - fc) / bw) ** 2) for fc, bw in
              ((rng.uniform(500, 800), 80), (rng.uniform(1000, 1800), 100), (rng.uniform(2300, 2900), 150)))
    x = np.fft.irfft(spec * env, n)
    syll = 0.5 - 0.5 * np.cos(2 * np.pi * rng.uniform(3, 5) * np.arange(n) / RATE)
    return x / (np.abs(x).max() + 1e-9) * syll


def make_chunks(streams, chunks, seed):
    rng = np.random.default_rng(seed)
    total = chunks * CHUNK
    out = np.empty((streams, chunks, CHUNK), np.float32)
    for s in range(streams):
        x = 0.01 * rng.standard_normal(total)
        for _ in range(2):  # voiced stretches of 0.5 to 1 s
            n = int(rng.integers(RATE // 2, RATE))
            a = int(rng.integers(0, total - n))
            x[a:a + n] += vowel(rng, n) * rng.uniform(0.3, 0.8)
        out[s] = x.reshape(chunks, CHUNK).astype(np.float32)
    return out


# INITIAL is the state's initial value of ref_initial.npy.
INITIAL = 0.25


def reference(model, chunks, carry=True, initial=0.0):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    streams, n, _ = chunks.shape
    ref = np.empty((streams, n, 1), np.float32)
    sr = np.array(RATE, np.int64)
    for s in range(streams):
        state = np.full((2, 1, 128), initial, np.float32)
        for c in range(n):
            out, next_state = sess.run(None, {"input": chunks[s, c][None], "state": state, "sr": sr})
            if carry:
                state = next_state
            ref[s, c] = out[0]
    return ref


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=100)
    args = ap.parse_args()
    d = os.path.join(args.out, "silero_vad_16k")
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    shutil.copyfile(args.model, os.path.join(d, "1", "model.onnx"))
    chunks = make_chunks(args.streams, args.chunks, seed=32)
    ref = reference(args.model, chunks)
    np.save(os.path.join(d, "chunks.npy"), chunks)
    np.save(os.path.join(d, "ref_initial.npy"), reference(args.model, chunks[:1], initial=INITIAL))
    np.save(os.path.join(d, "ref.npy"), ref)
    np.save(os.path.join(d, "ref_nostate.npy"), reference(args.model, chunks[:1], carry=False))
    print(f"silero_streams: {args.streams} streams x {args.chunks} chunks, probabilities {ref.min():.2g} to {ref.max():.2g}, in {d}")


if __name__ == "__main__":
    main()
