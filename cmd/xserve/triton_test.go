package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The tests below drive the real xserve binary with the official Triton
// clients and perf_analyzer from tritonclient[all]==2.41.1, installed in
// .venv-triton by `make venv-triton` (which `make test` runs).

var grpcListenRE = regexp.MustCompile(`msg="gRPC listening on [^"]*" addr=(\S+)`)

// grpcAddr waits for xserve's "gRPC listening on" log line and returns its
// address.
func (p *xserveProc) grpcAddr(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if m := grpcListenRE.FindStringSubmatch(p.log.String()); m != nil {
			return m[1]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("xserve logged no gRPC address within a minute:\n%s", p.log)
	return ""
}

// tritonVenv returns .venv-triton's python, failing (not skipping) when
// `make venv-triton` has not run.
func tritonVenv(t *testing.T) string {
	t.Helper()
	python := filepath.Join(repoRoot(t), ".venv-triton", "bin", "python")
	if out, err := exec.Command(python, "-c", "import tritonclient.grpc, tritonclient.http, onnxruntime, pytest").CombinedOutput(); err != nil {
		t.Fatalf("%s lacks tritonclient[all], onnxruntime or pytest: run make venv-triton\n%v %s", python, err, out)
	}
	return python
}

// TestTritonClients runs python/tests/test_triton_clients.py: tritonclient
// http and grpc against the real server, outputs checked against ONNX
// Runtime.
func TestTritonClients(t *testing.T) {
	python := tritonVenv(t)
	p := startXserve(t, tinycnnRepo(t), t.TempDir())
	cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests/test_triton_clients.py")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "XSERVE_URL="+p.addr, "XSERVE_GRPC_URL="+p.grpcAddr(t), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
	p.stop(t)
}

// TestPerfAnalyzer runs Triton's perf_analyzer unchanged against xserve over
// HTTP and gRPC, concurrency 1 to 8 with batches of 2, and checks that every
// concurrency level was measured without errors.
func TestPerfAnalyzer(t *testing.T) {
	python := tritonVenv(t)
	bin := filepath.Join(filepath.Dir(python), "perf_analyzer")
	out, err := exec.Command(python, "-c", "import nvidia.cuda_runtime, os; print(os.path.join(os.path.dirname(nvidia.cuda_runtime.__file__), 'lib'))").Output()
	if err != nil {
		t.Fatalf("nvidia-cuda-runtime-cu12 (libcudart.so.12 for perf_analyzer) is not in .venv-triton: run make venv-triton: %v", err)
	}
	ld := strings.TrimSpace(string(out))
	if v := os.Getenv("LD_LIBRARY_PATH"); v != "" {
		ld += ":" + v
	}
	p := startXserve(t, tinycnnRepo(t), t.TempDir())
	for _, tc := range []struct{ protocol, url string }{
		{"http", p.addr},
		{"grpc", p.grpcAddr(t)},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			cmd := exec.Command(bin, "-m", "tinycnn", "-u", tc.url, "-i", tc.protocol,
				"--concurrency-range", "1:8", "-b", "2",
				"--measurement-interval", "1000", "--stability-percentage", "1000", "--max-trials", "10")
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+ld)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("perf_analyzer -i %s: %v\n%s", tc.protocol, err, out)
			}
			text := string(out)
			for c := 1; c <= 8; c++ {
				if !regexp.MustCompile(`(?m)^Concurrency: ` + string(rune('0'+c)) + `, throughput: [0-9.]+ infer/sec`).MatchString(text) {
					t.Errorf("perf_analyzer -i %s: no result for concurrency %d\n%s", tc.protocol, c, text)
				}
			}
			if !strings.Contains(text, "Server:") || !strings.Contains(text, "compute infer") {
				t.Errorf("perf_analyzer -i %s did not read the server's statistics\n%s", tc.protocol, text)
			}
			t.Logf("perf_analyzer -i %s:\n%s", tc.protocol, text)
		})
	}
	p.stop(t)
}
