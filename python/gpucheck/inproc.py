"""The in-process competitors of the served model: torch eager,
torch.compile and JAX jit, each timed from a host numpy input to a host
numpy output (the copies to and from the device included, as the server
does them), and the reference outputs the check compares against."""

import copy
import time

import numpy as np
import torch


def percentiles(lat_s):
    """p50/p90/p99 in milliseconds of a list of seconds."""
    a = np.asarray(lat_s) * 1e3
    return {f"p{q}_ms": float(np.percentile(a, q)) for q in (50, 90, 99)}


def time_calls(fn, x, duration, min_calls=5, max_calls=100000):
    """Calls fn(x) back to back for about duration seconds (at least
    min_calls times); returns the per-call latencies in seconds."""
    lat = []
    end = time.perf_counter() + duration
    while len(lat) < max_calls and (len(lat) < min_calls or time.perf_counter() < end):
        t0 = time.perf_counter()
        fn(x)
        lat.append(time.perf_counter() - t0)
    return lat


# ---- references ----------------------------------------------------------


def _set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def references(spec, x, device):
    """Outputs of spec's model on x: "float64" (float64 on the host CPU, the
    reference), "torch_fp32" (float32 on device, TF32 off) and "torch_tf32"
    (float32 on device, TF32 on for convolutions and matrix products, the
    fast math a GPU framework uses by default; on a CPU the same as fp32)."""
    with torch.inference_mode():
        m64 = copy.deepcopy(spec.module).double()
        x64 = torch.from_numpy(x if x.dtype == np.int64 else x.astype(np.float64))
        out = {"float64": m64(x64).numpy()}
        del m64
        m = spec.module.to(device)
        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        try:
            for name, tf32 in (("torch_fp32", False), ("torch_tf32", True)):
                _set_tf32(tf32)
                out[name] = m(torch.from_numpy(x).to(device)).float().cpu().numpy()
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
            spec.module.cpu()
    return out


# ---- competitors ---------------------------------------------------------


class TorchRunner:
    """spec's module on device, eager (backend None) or through
    torch.compile with that backend, compiled on its first calls."""

    def __init__(self, spec, device, backend=None):
        self.device = device
        self.module = copy.deepcopy(spec.module).to(device).eval()
        # dynamic=None, torch.compile's default: a static graph for the
        # first batch size, one graph with a dynamic batch for the others.
        self.fn = torch.compile(self.module, backend=backend) if backend else self.module
        self.compile_s = {}

    def __call__(self, x):
        with torch.inference_mode():
            return self.fn(torch.from_numpy(x).to(self.device)).cpu().numpy()

    def warm(self, x, calls=3):
        """First calls at x's batch size (the compile, for torch.compile);
        records their time."""
        t0 = time.perf_counter()
        for _ in range(calls):
            self(x)
        self.compile_s[x.shape[0]] = time.perf_counter() - t0


class JaxRunner:
    """spec's model as a JAX function (models.jax_forward) under jax.jit,
    its parameters on the default device once."""

    def __init__(self, spec, jax_forward):
        import jax

        fn, params = jax_forward(spec)
        self.jax = jax
        self.params = jax.device_put(params)
        self.fn = jax.jit(fn)
        self.int_input = spec.input_dtype == "int64"
        self.compile_s = {}

    def __call__(self, x):
        if self.int_input:
            x = x.astype(np.int32)  # JAX runs without x64
        return np.asarray(self.fn(self.params, x))

    def warm(self, x, calls=3):
        t0 = time.perf_counter()
        for _ in range(calls):
            self(x)
        self.compile_s[x.shape[0]] = time.perf_counter() - t0
