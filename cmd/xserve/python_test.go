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
	python := filepath.Join(repoRoot(t), ".venv", "bin", "python")
	if out, err := exec.Command(python, "-c", "import nats, pytest, numpy, onnxruntime, setuptools, wheel, mypy").CombinedOutput(); err != nil {
		t.Fatalf("the venv lacks a package of python/requirements.txt: run make venv\n%s", out)
	}
	cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests/test_client.py")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "XSERVE_BIN="+xserveBinary(t), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
}
