package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPythonClient runs python/tests/test_client.py (and
// test_nats_sequences.py: NatsClient sequences against ONNX Runtime): the xserve Python
// package (HTTP, asyncio and NATS clients, pip install and wheel) against
// this binary, which its fixtures start on free loopback ports.
func TestPythonClient(t *testing.T) {
	runPytestBin(t, ".venv", "nats, pytest, numpy, onnxruntime, setuptools, wheel, mypy", "run make venv", "python/tests/test_client.py", "python/tests/test_nats_sequences.py")
}

// runPytestBin runs python/tests files with a venv's python, after
// checking that the venv has the modules the file needs; the file's
// fixtures start this binary (XSERVE_BIN) themselves (a session fixture
// once for all the files).
func runPytestBin(t *testing.T, venv, modules, fix string, files ...string) {
	t.Helper()
	python := filepath.Join(repoRoot(t), venv, "bin", "python")
	if out, err := exec.Command(python, "-c", "import "+modules).CombinedOutput(); err != nil {
		t.Fatalf("%s lacks a module of %s: %s\n%s", venv, modules, fix, out)
	}
	pytest(t, python, files, "XSERVE_BIN="+xserveBinary(t))
}

// pytest runs python/tests files with python, env added to the
// environment, and fails the test if they fail.
func pytest(t *testing.T, python string, files []string, env ...string) {
	t.Helper()
	cmd := exec.Command(python, append([]string{"-m", "pytest", "-q", "-p", "no:cacheprovider"}, files...)...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1"), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
}

// TestGenerativeClients runs python/tests/test_openai.py and
// test_generate_ext.py against one server of a small Llama that make
// gen-models exported with its tokenizer: the official openai client
// (pinned in python/requirements.txt) against the OpenAI-compatible API
// (chat and text completions, whole and streamed), and an HTTP client
// against the KServe generate extension (generate, generate_stream), and
// nats-py streaming over NATS, each compared with transformers; stop strings, seeds, errors; and a client
// that goes away mid-stream, whose slot is then free.
func TestGenerativeClients(t *testing.T) {
	runPytestBin(t, ".venv", "openai, nats, pytest", "run make venv",
		"python/tests/test_openai.py", "python/tests/test_generate_ext.py", "python/tests/test_generate_nats.py")
}

// TestSeq2seqClients runs python/tests/test_seq2seq.py: the small T5 that
// make seq2seq-models exported with xserve.export_seq2seq, served with its
// tokenizer: the official openai client's text completions (whole and
// streamed) and the generate extension (every case at once) equal
// transformers' greedy generate, decoded by the tokenizer.
func TestSeq2seqClients(t *testing.T) {
	runPytestBin(t, ".venv", "openai, pytest", "run make venv", "python/tests/test_seq2seq.py")
}

// TestGenerativeTritonGRPC runs python/tests/test_generate_grpc.py:
// tritonclient's gRPC streaming client (pinned in .venv-triton) generating
// text over ModelStreamInfer from the same small Llama, compared with
// transformers; two requests on one stream, the end marker, a stream's
// parameters, errors, and a cancelled stream freeing its slot.
func TestGenerativeTritonGRPC(t *testing.T) {
	runPytestBin(t, ".venv-triton", "tritonclient.grpc, numpy, pytest", "run make venv-triton", "python/tests/test_generate_grpc.py")
}

// TestTorchBackendEntryPoint runs python/tests/test_torch_entrypoint.py:
// the installed package, import xserve, then torch.compile(...,
// backend="xserve") (torch loads the entry point without registering the
// name twice).
func TestTorchBackendEntryPoint(t *testing.T) {
	runPytestBin(t, ".venv-zoo", "torch, pytest", "make test installs .venv-zoo", "python/tests/test_torch_entrypoint.py")
}
