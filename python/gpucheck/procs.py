"""The xserve and loadtest processes of the GPU check: finding the PJRT
plugin, the environment the CUDA plugin needs, `xserve version`, `xserve
run`, a served repository (`xserve serve`) and loadtest runs."""

import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import zipfile

import numpy as np


class CheckError(Exception):
    """A step of the check failed; the message says what and where."""


def tail(text, lines=15):
    return "\n".join(text.strip().splitlines()[-lines:])


# ---- the plugin ----------------------------------------------------------

CUDA_PLUGIN_MODULES = ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")


def _python_cuda_plugin():
    """The CUDA PJRT plugin of the JAX installed in this Python
    (jax_plugins.xla_cuda13 or xla_cuda12), or None. Imports nothing of JAX."""
    for mod in CUDA_PLUGIN_MODULES:
        try:
            spec = importlib.util.find_spec(mod)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        for d in spec.submodule_search_locations:
            p = os.path.join(d, "xla_cuda_plugin.so")
            if os.path.isfile(p):
                return p, f"the Python package {mod} ({p})"
    return None


def _wheel_plugin(wheel, dest):
    """Extracts jax_plugins/xla_cuda*/xla_cuda_plugin.so from a carried
    jax-cuda*-pjrt wheel into dest; returns its path."""
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if re.fullmatch(r"jax_plugins/xla_cuda\d+/xla_cuda_plugin\.so", n)]
        if not names:
            raise CheckError(f"wheel {wheel} holds no jax_plugins/xla_cuda*/xla_cuda_plugin.so")
        os.makedirs(dest, exist_ok=True)
        out = os.path.join(dest, os.path.basename(wheel)[:-4] + ".so")
        with z.open(names[0]) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return out


def find_plugin(mode, xserve, explicit, wheel_dirs, work):
    """(path, how it was found, what was tried) of the PJRT plugin.

    cpu: explicit, else what `xserve version` finds (pjrt.FindPlugin: the
    plugin `make pjrt` installed). gpu: explicit (a file, a .whl or a
    platform name), then the CUDA plugin of this Python's JAX
    (jax_plugins.xla_cuda13/xla_cuda12), then `xserve version
    --pjrt-plugin cuda` (pjrt.FindPlugin's search of site-packages), then a
    jax-cuda*-pjrt wheel carried in wheel_dirs."""
    tried = []
    if explicit:
        if explicit.endswith(".whl"):
            return _wheel_plugin(explicit, os.path.join(work, "plugin")), f"the wheel given ({explicit})", tried
        if os.path.isfile(explicit):
            return os.path.abspath(explicit), "the path given", tried
        path = _version_plugin_path(xserve, explicit)
        return path, f"--pjrt-plugin {explicit} (pjrt.FindPlugin)", tried
    if mode == "cpu":
        return _version_plugin_path(xserve, ""), "pjrt.FindPlugin's default search (make pjrt)", tried
    found = _python_cuda_plugin()
    if found:
        return found[0], found[1], tried
    tried.append("Python modules " + ", ".join(CUDA_PLUGIN_MODULES))
    try:
        return _version_plugin_path(xserve, "cuda"), "--pjrt-plugin cuda (pjrt.FindPlugin)", tried
    except CheckError as e:
        tried.append(f"--pjrt-plugin cuda: {e}")
    for d in wheel_dirs:
        for w in sorted(glob.glob(os.path.join(d, "jax_cuda*_pjrt-*.whl"))):
            return _wheel_plugin(w, os.path.join(work, "plugin")), f"the carried wheel {w}", tried
        tried.append(f"wheels jax_cuda*_pjrt-*.whl in {d}")
    raise CheckError("no CUDA PJRT plugin found; tried: " + "; ".join(tried))


def _version_plugin_path(xserve, flag):
    args = [xserve, "version"] + (["--pjrt-plugin", flag] if flag else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    m = re.search(r"^pjrt plugin file: (.+)$", p.stdout, re.M)
    if not m:
        raise CheckError(f"`{' '.join(args[1:])}` found no plugin: {tail(p.stderr or p.stdout, 5)}")
    return m.group(1).strip()


def cuda_library_env(env):
    """env plus what the CUDA plugin needs outside JAX: JAX's Python loads
    NVIDIA's libraries (cuDNN, cuBLAS, ...) from the nvidia.* wheels before
    it loads the plugin (jax_plugins/cuda/__init__.py); xserve loads the
    plugin itself, so their lib directories go on LD_LIBRARY_PATH and their
    bin directories (ptxas, nvlink) on PATH."""
    env = dict(env)
    libs, bins = [], []
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for root in (spec.submodule_search_locations if spec and spec.submodule_search_locations else []):
        libs += sorted(d for d in glob.glob(os.path.join(root, "*", "lib")) if os.path.isdir(d))
        bins += sorted(d for d in glob.glob(os.path.join(root, "*", "bin")) if os.path.isdir(d))
    if libs:
        env["LD_LIBRARY_PATH"] = ":".join(libs + [p for p in [env.get("LD_LIBRARY_PATH", "")] if p])
    if bins:
        env["PATH"] = ":".join(bins + [env.get("PATH", "")])
    return env, libs


def version(xserve, plugin, env):
    """`xserve version --pjrt-plugin plugin`: its lines, and the plugin's
    PJRT and StableHLO versions."""
    p = subprocess.run([xserve, "version", "--pjrt-plugin", plugin], capture_output=True, text=True, env=env, timeout=300)
    out = (p.stdout + p.stderr).strip()
    info = {"exit_code": p.returncode, "output": out.splitlines()[-20:]}
    m = re.search(r"^plugin version: (\S+)(?: \((.*)\))?$", p.stdout, re.M)
    if m:
        info["pjrt_c_api"] = m.group(1)
        for kv in (m.group(2) or "").split(", "):
            k, _, v = kv.partition("=")
            if k:
                info[k] = v
    m = re.search(r"^pjrt plugin: (.+)$", p.stdout, re.M)
    if m:
        info["client"] = m.group(1)
    if p.returncode != 0:
        raise CheckError(f"xserve version --pjrt-plugin {plugin} exited {p.returncode}: {tail(out, 8)}")
    return info


# ---- xserve run ----------------------------------------------------------


def run_model(xserve, plugin, model, input_name, x, work, env, timeout):
    """`xserve run model --input input_name=x.npy`: the outputs (name ->
    array) and the timings line it printed."""
    d = tempfile.mkdtemp(prefix="run-", dir=work)
    np.save(os.path.join(d, "input.npy"), x)
    args = [xserve, "run", model, "--pjrt-plugin", plugin, "--input", f"{input_name}={d}/input.npy", "--output", f"{d}/out"]
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        raise CheckError(f"xserve run {os.path.basename(model)} exited {p.returncode}: {tail(p.stderr, 10)}")
    outs = {os.path.basename(f)[:-4]: np.load(f) for f in sorted(glob.glob(f"{d}/out/*.npy"))}
    shutil.rmtree(d, ignore_errors=True)
    timing = next((ln for ln in p.stderr.splitlines() if ln.startswith("lowered in")), "")
    return outs, timing


# ---- xserve serve --------------------------------------------------------


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """`xserve serve` of a repository on loopback ports, its log in a file."""

    def __init__(self, xserve, plugin, repo, log_path, env, cache_dir):
        self.xserve, self.plugin, self.repo, self.log_path, self.env = xserve, plugin, repo, log_path, env
        self.cache_dir = cache_dir
        self.proc = None
        self.http = self.grpc = None

    def start(self, ready_timeout):
        """Starts the server and waits until every model is ready; returns
        the seconds that took."""
        for attempt in range(3):
            hp, gp = free_port(), free_port()
            self.http, self.grpc = f"http://127.0.0.1:{hp}", f"127.0.0.1:{gp}"
            args = [self.xserve, "serve", "--model-repo", self.repo, "--pjrt-plugin", self.plugin,
                    "--http-addr", f"127.0.0.1:{hp}", "--grpc-addr", self.grpc, "--nats=false",
                    "--poll-interval", "0", "--model-control-mode", "none", "--compile-cache", self.cache_dir]
            log = open(self.log_path, "ab")
            t0 = time.monotonic()
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
            log.close()
            try:
                self._wait_ready(t0 + ready_timeout)
                return time.monotonic() - t0
            except CheckError as e:
                self.stop()
                if "address already in use" not in str(e) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _wait_ready(self, deadline):
        import urllib.request

        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CheckError(f"xserve serve exited {self.proc.returncode} before it was ready: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.http + "/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise CheckError(f"xserve serve not ready in time: {self.log_tail()}")

    def log_tail(self, lines=12):
        try:
            with open(self.log_path, errors="replace") as f:
                return tail(f.read(), lines)
        except OSError:
            return ""

    def metrics(self):
        import urllib.request

        with urllib.request.urlopen(self.http + "/metrics", timeout=10) as r:
            return r.read().decode()

    def stop(self):
        """SIGTERM, then the exit code (SIGKILL after 60s)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


# ---- loadtest ------------------------------------------------------------


def loadtest(binary, server, protocol, model, input_name, npy, batch, concurrency, duration, warmup, out_json, expect=None):
    """One closed-loop loadtest run; returns its JSON summary. protocol is
    "http" (the binary tensor extension) or "grpc"."""
    args = [binary, "-model", model, "-input", f"{input_name}={npy}", "-batch", str(batch),
            "-c", str(concurrency), "-d", f"{duration}s", "-warmup", f"{warmup}s", "-json", out_json]
    if protocol == "grpc":
        args += ["-grpc", server.grpc]
    else:
        args += ["-url", server.http, "-protocol", "v2binary"]
    if expect:
        args += ["-expect", expect]
    p = subprocess.run(args, capture_output=True, text=True, timeout=duration + warmup + 120)
    if p.returncode != 0:
        raise CheckError(f"loadtest {protocol} {model} batch {batch} c={concurrency}: {tail(p.stderr or p.stdout, 6)}")
    with open(out_json) as f:
        s = json.load(f)
    if s["failures"]:
        raise CheckError(f"loadtest {protocol} {model} batch {batch} c={concurrency}: {s['failures']} failures {s['failures_by_kind']} {s.get('error_samples', '')}")
    return s
