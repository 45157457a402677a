"""FLOPs of an ONNX model and the peak FLOP rate of this CPU, for the
benchmarks that report a share of the peak (bench/peers.py,
bench/batching_ceiling.py)."""

import os
import re
import subprocess
import tempfile

import numpy as np
import onnx
from onnx import shape_inference


def lscpu_peak():
    """Peak FP32 GFLOP/s per core estimated from lscpu, and how: FMA (2
    FLOPs) x 2 FMA pipes x fp32 lanes x frequency. Lanes: 16 with AVX-512
    on Intel; 8 with AVX2, and on AMD, whose Zen 4 runs 512-bit operations
    as two 256-bit halves. Frequency: "CPU max MHz" if lscpu has it, else
    BogoMIPS / 2 (the TSC frequency, about the base clock: an underestimate
    where the cores boost)."""
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    info = dict(re.findall(r"^([^:]+):\s*(.*)$", out, re.M))
    flags = info.get("Flags", "").split()
    amd = "AMD" in info.get("Vendor ID", "")
    lanes = 16 if ("avx512f" in flags and not amd) else 8 if "avx2" in flags or "avx512f" in flags else 4
    if info.get("CPU max MHz"):
        mhz, src = float(info["CPU max MHz"]), "CPU max MHz"
    else:
        mhz, src = float(info["BogoMIPS"]) / 2, "BogoMIPS/2"
    per_core = 2 * 2 * lanes * mhz / 1e3
    how = (f"{info.get('Model name', '?')}, {info.get('CPU(s)', '?')} CPUs: 2 (FMA) x 2 pipes x {lanes} fp32 lanes "
           f"x {mhz:.0f} MHz ({src}) = {per_core:.1f} GFLOP/s per core")
    return per_core, int(info.get("CPU(s)", "1")), how


def measured_peak(threads):
    """The machine's fp32 GFLOP/s with threads threads of fused
    multiply-adds, and a core's GFLOP per second of CPU time while it runs
    them (bench/fma_peak.c, built here with gcc -march=native)."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fma_peak.c")
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "fma_peak")
        subprocess.run(["gcc", "-O2", "-march=native", "-pthread", src, "-o", exe], check=True)
        # the best of three: another process can only slow a run down
        runs = [subprocess.run([exe, str(threads)], capture_output=True, text=True, check=True).stdout.split()
                for _ in range(3)]
        return max(float(r[0]) for r in runs), max(float(r[1]) for r in runs)


def cpu_peak():
    """Peak FP32 GFLOP/s per core, the number of cores, and how it was
    found: what a core's fused multiply-adds reach per second of its CPU
    time with every core running them (measured_peak), which other
    processes on a shared machine do not lower, or their rate per second
    of wall time where that is higher. The lscpu estimate is only shown:
    on the 2-core Zen 4 VM of docs/BENCHMARKS.md it was 83.1 per core and
    the cores measured 117 (they boost to about 3.6 GHz); on the 2-vCPU
    Xeon (2.5 GHz, AVX-512) it is 160 and the cores measure about 140 per
    CPU second (512-bit FMAs run below the base clock): a peak taken from
    the estimate overstated or understated the share of it by up to 1.4x,
    and one measured per wall second on a loaded machine (17-38 per core
    here) understated the peak by 4-9x."""
    est, cores, how = lscpu_peak()
    total, per_cpu_s = measured_peak(cores)
    per_core = max(per_cpu_s, total / cores)
    if per_core <= 0:
        per_core = est
    how += (f"; measured with fused multiply-adds on all {cores} cores at once (bench/fma_peak.c): "
            f"{per_cpu_s:.1f} per core per second of its CPU time, {total / cores:.1f} per core per second of wall time")
    return per_core, cores, how


def with_batch(model_path, feeds):
    """The model with its inputs fixed to the shapes of feeds, shapes inferred."""
    m = onnx.load(model_path)
    for inp in m.graph.input:
        if inp.name in feeds:
            dims = inp.type.tensor_type.shape.dim
            for d, v in zip(dims, feeds[inp.name].shape):
                d.Clear()
                d.dim_value = v
    return shape_inference.infer_shapes(m, data_prop=True)


def count_flops(m):
    shapes = {}
    for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    for init in m.graph.initializer:
        shapes[init.name] = list(init.dims)

    def known(name):
        s = shapes.get(name)
        return s if s is not None and all(v is not None for v in s) else None

    flops = 0
    for n in m.graph.node:
        if n.op_type in ("Conv", "ConvTranspose"):
            w, y = known(n.input[1]), known(n.output[0])
            if w and y:
                group = next((a.i for a in n.attribute if a.name == "group"), 1)
                if n.op_type == "Conv":  # w: [out, in/group, k...]
                    flops += 2 * int(np.prod(y)) * int(np.prod(w[1:]))
                else:  # w: [in, out/group, k...], cost per input element
                    x = known(n.input[0])
                    if x:
                        flops += 2 * int(np.prod(x)) * int(np.prod(w[1:]))
        elif n.op_type in ("Gemm", "MatMul"):
            a, y = known(n.input[0]), known(n.output[0])
            if a and y:
                trans_a = next((x.i for x in n.attribute if x.name == "transA"), 0)
                k = a[-2] if (n.op_type == "Gemm" and trans_a) else a[-1]
                flops += 2 * int(np.prod(y)) * k
    return flops
