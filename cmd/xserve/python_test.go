package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPythonClient runs python/tests/test_client.py: the xserve Python
// package (HTTP, asyncio and NATS clients, pip install and wheel) against
// this binary, which its fixtures start on free loopback ports.
func TestPythonClient(t *testing.T) {
	runPytest(t, ".venv", "python/tests/test_client.py", "nats, pytest, numpy, onnxruntime, setuptools, wheel, mypy", "run make venv")
}

// runPytest runs one python/tests file with a venv's python against this
// binary, after checking that the venv has the modules the file needs.
func runPytest(t *testing.T, venv, file, modules, fix string) {
	t.Helper()
	python := filepath.Join(repoRoot(t), venv, "bin", "python")
	if out, err := exec.Command(python, "-c", "import "+modules).CombinedOutput(); err != nil {
		t.Fatalf("%s lacks a module of %s: %s\n%s", venv, modules, fix, out)
	}
	cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", file)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "XSERVE_BIN="+xserveBinary(t), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
}

// TestOpenAIClient runs python/tests/test_openai.py: the official openai
// client (pinned in python/requirements.txt) against the OpenAI-compatible
// API, serving a small Llama that make gen-models exported with its
// tokenizer: chat and text completions, whole and streamed, compared with
// transformers; stop strings, seeds, errors; and a client that goes away
// mid-stream, whose slot is then free.
func TestOpenAIClient(t *testing.T) {
	runPytest(t, ".venv", "python/tests/test_openai.py", "openai, pytest", "run make venv")
}

// TestTorchBackendEntryPoint runs python/tests/test_torch_entrypoint.py:
// the installed package, import xserve, then torch.compile(...,
// backend="xserve") (torch loads the entry point without registering the
// name twice).
func TestTorchBackendEntryPoint(t *testing.T) {
	runPytest(t, ".venv-zoo", "python/tests/test_torch_entrypoint.py", "torch, pytest", "make test installs .venv-zoo")
}
