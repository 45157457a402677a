"""The GPU check (make gpu-check, scripts/gpu-check.sh; docs/GPU.md).

On a GPU host: the CUDA PJRT plugin, three models exported there by its
torch, `xserve run` and `xserve serve` outputs against torch on the same GPU,
then served latency (binary HTTP, gRPC) against torch eager, torch.compile
and JAX jit in process at batch 1/8/64, interleaved, and dynamic batching
on/off at concurrency 1/32. Without a GPU the same steps run on the CPU
plugin with small models and short runs (the dry run, which make test runs).

Every step records what it did and what failed in one report
(report.json, report.md); a failed step does not stop the others. The exit
status is 0 when every step ran and every output matched.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback

import numpy as np

from . import export, inproc, models, procs, report

# What each mode runs. budget_s: the check skips what would not fit and
# says so (the GPU host lends a few minutes); reserve_s is kept for the
# server's shutdown and the report. compile_backend: torch.compile's backend
# (the dry run traces with dynamo but skips inductor's code generation,
# minutes on a small CPU). batching_buckets: the batch buckets of the copy
# served with dynamic batching on.
PROFILES = {
    "gpu": dict(size="gpu", check_batch=8, batches=(1, 8, 64), rounds=2, cell_s=0.5, warmup_s=0.2,
                concurrency=(1, 32), batching_s=2.0, batching_rounds=2, batching_buckets=(1, 2, 4, 8, 16, 32, 64),
                compile_backend="inductor", budget_s=450, reserve_s=25, ready_timeout_s=300, run_timeout_s=240),
    "cpu": dict(size="cpu", check_batch=8, batches=(1, 8), rounds=1, cell_s=0.2, warmup_s=0.1,
                concurrency=(1, 32), batching_s=0.5, batching_rounds=1, batching_buckets=(1, 8, 32),
                compile_backend="eager", budget_s=600, reserve_s=25, ready_timeout_s=300, run_timeout_s=240,
                torch_threads=1),
}

SERVED = ("xserve_http", "xserve_grpc")
IN_PROCESS = ("torch_eager", "torch_compile", "jax_jit")
SYSTEMS = SERVED + IN_PROCESS
FORMATS = ("pt2", "onnx")
# What the first calls at a new batch size may take (compiles), before one
# was seen: the latency step skips a competitor that would not fit.
WARM_GUESS_S = {"torch_eager": 5, "torch_compile": 60, "jax_jit": 30}

# The tolerance of an output against the float64 reference: TOL_FACTOR
# times the larger error of torch itself on the same device (float32 with
# TF32 off, and with TF32 on), and never below TOL_FLOOR times the
# reference's largest magnitude (docs/GPU.md#tolerance).
TOL_FACTOR = 8.0
TOL_FLOOR = 1e-5


class Check:
    def __init__(self, args):
        self.args = args
        self.prof = dict(PROFILES[args.mode])
        if args.budget:
            self.prof["budget_s"] = args.budget
        self.t0 = time.monotonic()
        self.deadline = self.t0 + self.prof["budget_s"]
        self.device = "cuda" if args.mode == "gpu" else "cpu"
        self.work = os.path.abspath(args.work)
        self.env = dict(os.environ)
        self.specs, self.files, self.inputs, self.refs = {}, {}, {}, {}
        self.plugin = None
        self.r = {
            "schema": 1,
            "mode": "gpu" if args.mode == "gpu" else "cpu-dry-run",
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "profile": {k: list(v) if isinstance(v, tuple) else v for k, v in self.prof.items()},
            "tolerance": {"factor": TOL_FACTOR, "floor": TOL_FLOOR},
            "host": {}, "xserve": {}, "plugin": {}, "models": {}, "correctness": [], "latency": [],
            "batching": [], "targets": [], "skipped": [], "errors": [], "steps": {},
        }

    # ---- bookkeeping --------------------------------------------------------

    def log(self, msg):
        print(f"gpu-check [{time.monotonic() - self.t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    def remaining(self):
        return self.deadline - time.monotonic()

    def error(self, where, e):
        detail = traceback.format_exc(limit=4) if not isinstance(e, procs.CheckError) else ""
        self.r["errors"].append({"where": where, "error": f"{type(e).__name__}: {e}"[:3000], "trace": detail[-2000:]})
        self.log(f"ERROR in {where}: {e}")

    def skip(self, what, why):
        self.r["skipped"].append({"what": what, "why": why})
        self.log(f"skipped {what}: {why}")

    def step(self, name, fn):
        t = time.monotonic()
        self.log(f"== {name}")
        try:
            fn()
            ok = True
        except Exception as e:  # noqa: BLE001 - every failure goes into the report
            self.error(name, e)
            ok = False
        self.r["steps"][name] = {"ok": ok, "seconds": round(time.monotonic() - t, 1)}
        self.write(final=False)
        return ok

    def write(self, final):
        """Writes the report; before the end, marked incomplete, so that a
        check stopped from outside (the GPU host's time limit) leaves what it
        had measured."""
        self.r["duration_s"] = round(time.monotonic() - self.t0, 1)
        if final:
            self.r.pop("incomplete", None)
        else:
            self.r["incomplete"] = True
        try:
            report.write(self.r, self.args.out)
        except Exception as e:  # noqa: BLE001 - a report that cannot be written is logged, not fatal mid-run
            if final:
                raise
            self.log(f"writing the partial report failed: {e}")

    # ---- steps --------------------------------------------------------------

    def environment(self):
        import torch

        h = self.r["host"]
        h.update(machine=platform.machine(), python=platform.python_version(), cpus=os.cpu_count(),
                 glibc=" ".join(platform.libc_ver()), torch=torch.__version__, numpy=np.__version__,
                 torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
        if torch.cuda.is_available():
            h["gpu"] = torch.cuda.get_device_name(0)
            h["gpu_count"] = torch.cuda.device_count()
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            if smi.returncode == 0:
                h["nvidia_smi"] = smi.stdout.strip().splitlines()
        except (OSError, subprocess.TimeoutExpired):
            pass
        try:
            import torchvision

            h["torchvision"] = torchvision.__version__
        except ImportError:
            h["torchvision"] = None
        if self.args.mode == "gpu" and not torch.cuda.is_available():
            raise procs.CheckError("mode gpu but torch sees no CUDA device")
        if self.args.manifest and os.path.exists(self.args.manifest):
            with open(self.args.manifest) as f:
                self.r["xserve"]["bundle"] = json.load(f)
        self.r["xserve"]["binary"] = self.args.xserve
        self.r["xserve"]["source"] = self.args.xserve_source
        if self.args.stale:
            self.error("bundle", procs.CheckError(self.args.stale))

    def find_plugin(self):
        path, how, tried = procs.find_plugin(self.args.mode, self.args.xserve, self.args.pjrt_plugin,
                                             self.args.wheel_dir, self.work)
        self.plugin = path
        p = self.r["plugin"]
        p.update(path=path, found_by=how, tried=tried)
        if self.args.mode == "gpu":
            self.env, libs = procs.cuda_library_env(self.env)
            p["ld_library_path"] = libs
        p.update(procs.version(self.args.xserve, path, self.env))
        client = p.get("client", "")
        if self.args.mode == "gpu" and "cuda" not in client.lower():
            raise procs.CheckError(f"the plugin {path} made a client of {client!r}, want a CUDA one")
        self.log(f"plugin {path} ({how}): {client}; PJRT {p.get('pjrt_c_api')}, StableHLO {p.get('stablehlo_current_version')}")

    def make_models(self):
        import torch

        torch.manual_seed(0)
        size = self.prof["size"]
        if self.args.mode == "cpu":
            self.check_resnet_copy()
        for name in models.MODEL_NAMES:
            try:
                self.make_model(name, size)
            except Exception as e:  # noqa: BLE001
                self.error(f"model {name}", e)

    def check_resnet_copy(self):
        """The local copy of torchvision's ResNet (used where torchvision is
        missing) computes what torchvision's does with the same weights."""
        import torch

        a, b = models.build("cnn", "cpu"), models.build("cnn", "cpu", use_torchvision=False)
        if a.source != "torchvision":
            self.skip("the ResNet copy against torchvision", "torchvision is not installed")
            return
        x = torch.from_numpy(a.input(2, 5))
        with torch.inference_mode():
            d = float((a.module(x) - b.module(x)).abs().max())
        self.r["models"]["resnet_copy_vs_torchvision_max_abs"] = d
        if d > 1e-5:
            raise procs.CheckError(f"the local ResNet differs from torchvision's by {d}")

    def make_model(self, name, size):
        spec = models.build(name, size)
        d = os.path.join(self.work, "models", name)
        os.makedirs(d, exist_ok=True)
        example = spec.input(2, seed=1)
        info = {"source": spec.source, "params": spec.params(), "input": {"name": spec.input_name, "dtype": spec.input_dtype,
                "row_shape": list(spec.row_shape)}, "formats": {}}
        self.r["models"][name] = info
        self.specs[name] = spec
        self.files[name] = {}
        for fmt, fn in (("pt2", export.export_pt2), ("onnx", export.export_onnx)):
            path = os.path.join(d, "model." + fmt)
            t = time.monotonic()
            try:
                how = fn(spec, example, path)
            except Exception as e:  # noqa: BLE001
                info["formats"][fmt] = {"error": str(e)[:2000]}
                self.error(f"export {name} {fmt}", e)
                continue
            info["formats"][fmt] = {"exporter": how, "bytes": os.path.getsize(path), "seconds": round(time.monotonic() - t, 1)}
            self.files[name][fmt] = path
        x = spec.input(self.prof["check_batch"], seed=2)
        self.inputs[name] = x
        self.refs[name] = inproc.references(spec, x, self.device)
        ref = self.refs[name]["float64"]
        info["reference"] = {
            "scale": float(np.abs(ref).max()),
            "torch_fp32_max_abs": _max_abs(self.refs[name]["torch_fp32"], ref),
            "torch_tf32_max_abs": _max_abs(self.refs[name]["torch_tf32"], ref),
        }
        self.log(f"{name}: {spec.source}, {spec.params():,} parameters, exported {sorted(self.files[name])}")

    def compare(self, name, fmt, path, got):
        """Records one output against the float64 reference."""
        refs = self.refs[name]
        ref = refs["float64"]
        row = {"model": name, "format": fmt, "path": path, "batch": int(ref.shape[0])}
        if got.shape != ref.shape:
            row.update(ok=False, error=f"shape {list(got.shape)}, want {list(ref.shape)}")
        else:
            scale = float(np.abs(ref).max())
            err = _max_abs(got, ref)
            torch_err = max(_max_abs(refs["torch_fp32"], ref), _max_abs(refs["torch_tf32"], ref))
            tol = max(TOL_FACTOR * torch_err, TOL_FLOOR * scale)
            row.update(max_abs=err, rel=err / scale if scale else err, tolerance=tol, torch_max_abs=torch_err,
                       top1_agree=float(np.mean(got.argmax(-1) == ref.argmax(-1))), ok=bool(err <= tol))
        self.r["correctness"].append(row)
        if not row["ok"]:
            self.log(f"MISMATCH {name} {fmt} {path}: {row}")
        return row

    def run_checks(self):
        for name in self.specs:
            spec = self.specs[name]
            for fmt, path in self.files[name].items():
                try:
                    timeout = min(self.prof["run_timeout_s"], max(30, self.remaining() - self.prof["reserve_s"]))
                    outs, timing = procs.run_model(self.args.xserve, self.plugin, path, spec.input_name, self.inputs[name],
                                                   self.work, self.env, timeout)
                    row = self.compare(name, fmt, "xserve run", _one_output(outs))
                    row["timing"] = timing
                except Exception as e:  # noqa: BLE001
                    self.r["correctness"].append({"model": name, "format": fmt, "path": "xserve run", "ok": False, "error": str(e)[:2000]})
                    self.error(f"xserve run {name} {fmt}", e)

    def write_repo(self):
        repo = os.path.join(self.work, "repo")
        buckets = sorted(set(self.prof["batches"]) | {self.prof["check_batch"]})
        for name, files in self.files.items():
            for fmt, path in files.items():
                export.write_model(repo, f"{name}_{fmt}", path, buckets, batching=False)
        if "pt2" in self.files.get("cnn", {}):
            export.write_model(repo, "cnn_batched", self.files["cnn"]["pt2"], self.prof["batching_buckets"], batching=True)
        return repo

    def serve(self):
        repo = self.write_repo()
        cache = os.path.join(self.work, f"compile-cache-{os.getpid()}")
        srv = procs.Server(self.args.xserve, self.plugin, repo, os.path.join(self.args.out, "xserve-serve.log"), self.env, cache)
        ready_s = srv.start(min(self.prof["ready_timeout_s"], max(30, self.remaining())))
        self.r["xserve"]["serve_ready_s"] = round(ready_s, 1)
        self.log(f"xserve serve ready in {ready_s:.1f}s ({srv.http}, gRPC {srv.grpc})")
        try:
            self.step("served outputs", lambda: self.served_checks(srv))
            self.step("dynamic batching on/off", lambda: self.batching(srv))
            self.step("latency", lambda: self.latency(srv))
            self.r["xserve"]["metrics"] = _metrics_summary(srv.metrics())
        finally:
            code = srv.stop()
            self.r["xserve"]["serve_exit_code"] = code
            if code != 0:
                raise procs.CheckError(f"xserve serve exited {code} after SIGTERM, want 0: {srv.log_tail()}")

    def served_checks(self, srv):
        import xserve  # python/xserve, beside this package

        client = xserve.Client(srv.http)
        for name in self.specs:
            spec, x = self.specs[name], self.inputs[name]
            for fmt in self.files[name]:
                model = f"{name}_{fmt}"
                for path, fn in (("serve http binary", lambda: _one_output(client.infer(model, {spec.input_name: x}))),
                                 ("serve http json", lambda: _infer_json(srv.http, model, spec.input_name, x)),
                                 ("serve grpc", lambda: self.grpc_check(srv, model, spec, x))):
                    try:
                        got = fn()
                        if got is not None:
                            self.compare(name, fmt, path, got)
                    except Exception as e:  # noqa: BLE001
                        self.r["correctness"].append({"model": name, "format": fmt, "path": path, "ok": False, "error": str(e)[:2000]})
                        self.error(f"{path} {model}", e)

    def grpc_check(self, srv, model, spec, x):
        """gRPC carries the same bytes through the same serving path: loadtest
        checks every response's output shape and byte count (no Python gRPC
        client is assumed on the host). Returns None: nothing to compare."""
        npy = self.save_input(model, x)
        s = procs.loadtest(self.args.loadtest, srv, "grpc", model, spec.input_name, npy, x.shape[0], 1, 0.3, 0,
                           os.path.join(self.work, "lt-grpc-check.json"), expect=f"{self.output_name(srv, model)}={x.shape[0]}x-1")
        self.r["correctness"].append({"model": model.rsplit("_", 1)[0], "format": model.rsplit("_", 1)[1], "path": "serve grpc",
                                      "batch": int(x.shape[0]), "ok": True, "checked": f"{s['successes']} responses' output shapes and sizes"})

    def output_name(self, srv, model):
        import urllib.request

        with urllib.request.urlopen(f"{srv.http}/v2/models/{model}", timeout=10) as r:
            return json.load(r)["outputs"][0]["name"]

    def save_input(self, key, x):
        path = os.path.join(self.work, "inputs", f"{key}.b{x.shape[0]}.npy")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, x)
        return path

    def batching(self, srv):
        if "cnn" not in self.specs or "pt2" not in self.files["cnn"]:
            raise procs.CheckError("no cnn .pt2 to serve")
        spec = self.specs["cnn"]
        npy = self.save_input("cnn", spec.input(1, seed=3))
        runs = {}
        for r in range(self.prof["batching_rounds"]):
            for c in self.prof["concurrency"]:
                for model in (("cnn_pt2", "cnn_batched") if r % 2 == 0 else ("cnn_batched", "cnn_pt2")):
                    if self.remaining() < self.prof["reserve_s"] + 2 * self.prof["batching_s"]:
                        self.skip(f"batching {model} c={c} round {r}", "time budget")
                        continue
                    s = procs.loadtest(self.args.loadtest, srv, "http", model, spec.input_name, npy, 1, c,
                                       self.prof["batching_s"], self.prof["warmup_s"], os.path.join(self.work, "lt-batching.json"))
                    runs.setdefault((c, model), []).append(s)
        for (c, model), ss in sorted(runs.items()):
            self.r["batching"].append({
                "model": "cnn", "served_as": model, "batching": "on" if model == "cnn_batched" else "off", "concurrency": c,
                "requests_per_s": _median([s["success_throughput_rps"] for s in ss]),
                "p50_ms": _median([s["latency_ms"]["p50"] for s in ss]), "p99_ms": _median([s["latency_ms"]["p99"] for s in ss]),
                "runs": len(ss)})

    def latency(self, srv):
        """Batch by batch (1 first: the targets need it), model by model, so
        that what the budget cuts is the largest batches."""
        inproc._set_tf32(True)  # timed torch runs use TF32, as XLA's default precision does
        competitors = {}
        for name, spec in self.specs.items():
            if "pt2" not in self.files[name]:
                self.error(f"latency {name}", procs.CheckError(f"no {name} .pt2 to serve"))
                continue
            competitors[name] = self.make_runners(name, spec)
        for batch in self.prof["batches"]:
            for name, (runners, errors) in competitors.items():
                try:
                    self.latency_cell(srv, name, batch, runners, errors)
                except Exception as e:  # noqa: BLE001
                    self.error(f"latency {name} batch {batch}", e)
            self.write(final=False)
        competitors.clear()
        _free_device(self.device)

    def make_runners(self, name, spec):
        """The in-process competitors of one model, and why any is missing."""
        runners, errors = {}, {}
        for sys_name, make in (("torch_eager", lambda: inproc.TorchRunner(spec, self.device)),
                               ("torch_compile", lambda: inproc.TorchRunner(spec, self.device, self.prof["compile_backend"])),
                               ("jax_jit", lambda: self.jax_runner(spec))):
            try:
                runners[sys_name] = make()
            except Exception as e:  # noqa: BLE001
                errors[sys_name] = f"{type(e).__name__}: {e}"[:1000]
                self.error(f"{sys_name} {name}", e)
        return runners, errors

    def latency_cell(self, srv, name, batch, runners, errors):
        """Every competitor on one model at one batch size, in rotating order
        for the profile's rounds; one latency row per competitor."""
        spec = self.specs[name]
        need = self.prof["rounds"] * len(SYSTEMS) * (self.prof["cell_s"] + 0.3) + self.prof["reserve_s"]
        if self.remaining() < need:
            self.skip(f"latency {name} batch {batch}", f"time budget ({self.remaining():.0f}s left, {need:.0f}s needed)")
            return
        x = spec.input(batch, seed=4)
        npy = self.save_input(name, x)
        self.warm(name, batch, x, runners, errors, need)
        cells = {s: [] for s in SYSTEMS}
        for r in range(self.prof["rounds"]):
            for s in SYSTEMS[r % len(SYSTEMS):] + SYSTEMS[:r % len(SYSTEMS)]:
                try:
                    if s in SERVED:
                        cells[s].append(self.served_cell(srv, s, name, spec, npy, batch))
                    elif s in runners and batch in runners[s].compile_s:
                        cells[s].append(_inproc_cell(runners[s], x, self.prof["cell_s"]))
                except Exception as e:  # noqa: BLE001
                    errors[s] = f"{type(e).__name__}: {e}"[:1000]
                    self.error(f"{s} {name} batch {batch}", e)
        for s in SYSTEMS:
            row = {"model": name, "batch": batch, "system": s}
            if cells[s]:
                row.update({k: _median([c[k] for c in cells[s]]) for k in ("p50_ms", "p90_ms", "p99_ms", "rows_per_s")})
                row["rounds"] = len(cells[s])
                if s in runners and batch in runners[s].compile_s:
                    row["first_calls_s"] = round(runners[s].compile_s[batch], 2)
            else:
                row["error"] = errors.get(s, "not measured (see skipped)")
            self.r["latency"].append(row)

    def warm(self, name, batch, x, runners, errors, need):
        """The first calls of each in-process competitor at this batch size
        (torch.compile and JAX compile here), unless they would not fit."""
        for sys_name, run in list(runners.items()):
            guess = max(run.compile_s.values(), default=WARM_GUESS_S.get(sys_name, 5))
            if self.remaining() < need + guess:
                self.skip(f"{sys_name} {name} batch {batch}", f"time budget (its first calls may take {guess:.0f}s)")
                continue
            try:
                run.warm(x)
            except Exception as e:  # noqa: BLE001
                errors[sys_name] = f"{type(e).__name__}: {e}"[:1000]
                self.error(f"{sys_name} {name} batch {batch}", e)
                del runners[sys_name]

    def served_cell(self, srv, s, name, spec, npy, batch):
        proto = "grpc" if s == "xserve_grpc" else "http"
        out = os.path.join(self.work, f"lt-{proto}.json")
        lt = procs.loadtest(self.args.loadtest, srv, proto, f"{name}_pt2", spec.input_name, npy, batch, 1,
                            self.prof["cell_s"], self.prof["warmup_s"], out)
        lat = lt["latency_ms"]
        return {"p50_ms": lat["p50"], "p90_ms": lat["p90"], "p99_ms": lat["p99"], "rows_per_s": lt["success_throughput_rps"] * batch}

    def jax_runner(self, spec):
        import jax

        dev = jax.devices()[0]
        want = "gpu" if self.args.mode == "gpu" else "cpu"
        self.r["host"]["jax"] = jax.__version__
        self.r["host"]["jax_device"] = str(dev)
        if dev.platform != want:
            raise procs.CheckError(f"JAX runs on {dev.platform}, want {want}")
        return inproc.JaxRunner(spec, models.jax_forward)

    def targets(self):
        lat = {(r["model"], r["batch"], r["system"]): r for r in self.r["latency"] if "p50_ms" in r}
        for name in models.MODEL_NAMES:
            comp = lat.get((name, 1, "torch_compile"))
            for s in SERVED:
                served = lat.get((name, 1, s))
                if comp and served:
                    ratio = served["p50_ms"] / comp["p50_ms"]
                    self.r["targets"].append({"target": f"{name}: served ({s}) p50 at batch 1 within 1.3x of torch.compile in process",
                                              "value": round(ratio, 3), "limit": 1.3, "met": ratio <= 1.3})
        b = {(r["concurrency"], r["batching"]): r for r in self.r["batching"]}
        c = max(self.prof["concurrency"])
        if (c, "on") in b and (c, "off") in b:
            ratio = b[(c, "on")]["requests_per_s"] / b[(c, "off")]["requests_per_s"]
            self.r["targets"].append({"target": f"cnn: dynamic batching on/off throughput at concurrency {c} at least 3x",
                                      "value": round(ratio, 3), "limit": 3.0, "met": ratio >= 3.0})

    # ---- the whole check ----------------------------------------------------

    def run(self):
        os.makedirs(self.args.out, exist_ok=True)
        os.makedirs(self.work, exist_ok=True)
        self.log(f"mode {self.r['mode']}, budget {self.prof['budget_s']:.0f}s, report in {self.args.out}")
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX beside torch and xserve on one GPU
        os.environ.setdefault("JAX_PLATFORMS", "cuda" if self.args.mode == "gpu" else "cpu")
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(self.work, "inductor"))
        if self.prof.get("torch_threads"):
            # On a small CPU, torch's OpenMP team beside the server's and
            # JAX's threads turns milliseconds into hundreds of them.
            import torch

            torch.set_num_threads(self.prof["torch_threads"])
        ok = self.step("environment", self.environment)
        ok = ok and self.step("plugin", self.find_plugin)
        if ok:
            self.step("models", self.make_models)
            self.step("xserve run", self.run_checks)
            self.step("xserve serve", self.serve)
        self.targets()
        self.r["ok"] = (not self.r["errors"] and bool(self.r["correctness"])
                        and all(c["ok"] for c in self.r["correctness"]))
        self.write(final=True)
        self.log(f"{'PASS' if self.r['ok'] else 'FAIL'} in {self.r['duration_s']}s: {self.args.out}/report.md")
        return 0 if self.r["ok"] else 1


# ---- helpers ------------------------------------------------------------------


def _max_abs(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) if np.size(b) else 0.0


def _median(xs):
    return float(np.median(xs))


def _one_output(outs):
    if len(outs) != 1:
        raise procs.CheckError(f"want one output, got {sorted(outs)}")
    return next(iter(outs.values()))


def _inproc_cell(run, x, duration):
    lat = inproc.time_calls(run, x, duration)
    cell = inproc.percentiles(lat)
    cell["rows_per_s"] = x.shape[0] * len(lat) / sum(lat)
    return cell


def _infer_json(url, model, name, x):
    """One Open Inference Protocol v2 JSON request (urllib)."""
    import urllib.request

    dt = {"float32": "FP32", "int64": "INT64"}[str(x.dtype)]
    body = json.dumps({"inputs": [{"name": name, "shape": list(x.shape), "datatype": dt, "data": x.ravel().tolist()}]}).encode()
    req = urllib.request.Request(f"{url}/v2/models/{model}/infer", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        outs = json.load(r)["outputs"]
    if len(outs) != 1:
        raise procs.CheckError(f"want one output, got {[o['name'] for o in outs]}")
    return np.asarray(outs[0]["data"], np.float32).reshape(outs[0]["shape"])


def _metrics_summary(text):
    """The xserve_* counters worth keeping from /metrics (compilations,
    executions), summed over their labels."""
    keep = {}
    for line in text.splitlines():
        if line.startswith("xserve_") and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name.endswith("_total") or name.startswith("xserve_device_"):
                try:
                    keep[name] = keep.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
                except ValueError:
                    pass
    return keep


def _free_device(device):
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m gpucheck", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("auto", "gpu", "cpu"), default="auto",
                    help="gpu, cpu (the dry run) or auto: gpu when nvidia-smi lists a GPU or torch sees CUDA")
    ap.add_argument("--xserve", required=True, help="the xserve binary")
    ap.add_argument("--xserve-source", default="", help="where the binary came from (built here, the bundle)")
    ap.add_argument("--loadtest", required=True, help="the loadtest binary")
    ap.add_argument("--manifest", default="", help="the bundle's MANIFEST.json, copied into the report")
    ap.add_argument("--pjrt-plugin", default="", help="a plugin file, a jax-cuda*-pjrt wheel or a platform name")
    ap.add_argument("--wheel-dir", action="append", default=[], help="where to look for a carried jax-cuda*-pjrt wheel")
    ap.add_argument("--out", required=True, help="report directory")
    ap.add_argument("--work", required=True, help="work directory (models, repository, inputs)")
    ap.add_argument("--budget", type=float, default=0, help="seconds the check may take (default: the mode's)")
    ap.add_argument("--stale", default="", help="why the bundle does not match the sources (an error in the report)")
    args = ap.parse_args(argv)
    if args.mode == "auto":
        args.mode = "gpu" if _has_gpu() else "cpu"
    return Check(args).run()


def _has_gpu():
    try:
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        if smi.returncode == 0 and "GPU" in smi.stdout:
            return True
    except (OSError, subprocess.TimeoutExpired):
        pass
    import torch

    return torch.cuda.is_available()
