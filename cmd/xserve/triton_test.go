package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
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
	// explicit model control: the clients also load uploaded models.
	p := startXserve(t, tinycnnRepo(t), t.TempDir(), "--model-control-mode", "explicit")
	runPytest(t, python, p, "python/tests/test_triton_clients.py")
	p.stop(t)
}

// TestTritonSequences runs python/tests/test_triton_sequences.py:
// tritonclient's sequence API over HTTP and gRPC against silero-vad served
// with no config.yaml (make seq-streams), each stream checked against ONNX
// Runtime, an idle stream expiring after --max-sequence-idle.
func TestTritonSequences(t *testing.T) {
	python := tritonVenv(t)
	src := filepath.Join(repoRoot(t), ".cache", "seq", "silero_vad_16k")
	model, err := os.ReadFile(filepath.Join(src, "1", "model.onnx"))
	if err != nil {
		t.Fatalf("%v: run make seq-streams (make test does)", err)
	}
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "silero", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "silero", "1", "model.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XSERVE_SEQ_DIR", src)
	p := startXserve(t, repo, t.TempDir(), "--max-sequence-idle", "1s")
	runPytest(t, python, p, "python/tests/test_triton_sequences.py")
	p.stop(t)
}

// runPytest runs a python/tests file with pytest against the running
// server p (XSERVE_URL, XSERVE_GRPC_URL), failing on any failed test.
func runPytest(t *testing.T, python string, p *xserveProc, file string) {
	t.Helper()
	pytest(t, python, []string{file}, "XSERVE_URL="+p.addr, "XSERVE_GRPC_URL="+p.grpcAddr(t))
}

// TestPerfAnalyzer runs Triton's perf_analyzer unchanged against xserve over
// HTTP and gRPC, concurrency 1 to 8 with batches of 2, then with its
// tensors in system shared memory (--shared-memory system: it registers
// regions, over HTTP with libcurl's form Content-Type, and binds every
// input and output to them), and checks that every concurrency level was
// measured without errors.
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
	for _, tc := range []struct {
		name, protocol, url string
		maxConc             int
		extra               []string
	}{
		{"http", "http", p.addr, 8, nil},
		{"grpc", "grpc", p.grpcAddr(t), 8, nil},
		{"http-shm", "http", p.addr, 2, []string{"--shared-memory", "system"}},
		{"grpc-shm", "grpc", p.grpcAddr(t), 2, []string{"--shared-memory", "system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-m", "tinycnn", "-u", tc.url, "-i", tc.protocol,
				"--concurrency-range", fmt.Sprintf("1:%d", tc.maxConc), "-b", "2",
				"--measurement-interval", "1000", "--stability-percentage", "1000", "--max-trials", "10"}, tc.extra...)
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+ld)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("perf_analyzer %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			text := string(out)
			for c := 1; c <= tc.maxConc; c++ {
				if !regexp.MustCompile(fmt.Sprintf(`(?m)^Concurrency: %d, throughput: [0-9.]+ infer/sec`, c)).MatchString(text) {
					t.Errorf("perf_analyzer %s: no result for concurrency %d\n%s", tc.name, c, text)
				}
			}
			if !strings.Contains(text, "Server:") || !strings.Contains(text, "compute infer") {
				t.Errorf("perf_analyzer %s did not read the server's statistics\n%s", tc.name, text)
			}
			t.Logf("perf_analyzer %s:\n%s", tc.name, text)
		})
	}
	p.stop(t)
}

// TestServeAuth starts xserve with bearer tokens (file and environment) and
// health left open: HTTP and gRPC refuse a missing or wrong token with
// 401 / Unauthenticated and a non-admin load with 403 / PermissionDenied.
func TestServeAuth(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("user-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envAuthTokens, "admin-token admin")
	p := startXserve(t, tinycnnRepo(t), t.TempDir(), "--auth-tokens-file", tokens, "--auth-open-health")
	for _, tc := range []struct {
		method, path, token string
		code                int
	}{
		{"GET", "/v2/models/tinycnn", "", 401},
		{"GET", "/v2/models/tinycnn", "wrong", 401},
		{"GET", "/v2/models/tinycnn", "user-token", 200},
		{"GET", "/v2/models/tinycnn/config", "admin-token", 200},
		{"POST", "/v2/repository/models/tinycnn/unload", "user-token", 403},
		{"POST", "/v2/repository/models/tinycnn/load", "user-token", 403},
		{"GET", "/metrics", "", 200},
	} {
		var hdr []string
		if tc.token != "" {
			hdr = []string{"Authorization", "Bearer " + tc.token}
		}
		if r := call(t, tc.method, p.url+tc.path, nil, hdr...); r.code != tc.code {
			t.Errorf("%s %s with %q: %v, want %d", tc.method, tc.path, tc.token, r, tc.code)
		}
	}
	conn, err := grpc.NewClient(p.grpcAddr(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewGRPCInferenceServiceClient(conn)
	ctx := context.Background()
	if _, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "tinycnn"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC metadata without a token: %v", err)
	}
	user := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer user-token")
	if _, err := c.ModelMetadata(user, &pb.ModelMetadataRequest{Name: "tinycnn"}); err != nil {
		t.Errorf("gRPC metadata with a token: %v", err)
	}
	if _, err := c.RepositoryModelUnload(user, &pb.RepositoryModelUnloadRequest{ModelName: "tinycnn"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("gRPC unload with a user token: %v", err)
	}
	if r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Errorf("gRPC ServerReady with --auth-open-health: %v %v", r, err)
	}
	p.stop(t)
}

// TestTritonEnsembleClients serves testdata/pipelines/ensemble, a Triton
// repository as Triton users write it (a preprocessing ONNX graph feeding a
// CNN, chained by an ensemble's config.pbtxt, no config.yaml), and runs
// python/tests/test_triton_ensemble.py: tritonclient http and grpc against
// ONNX Runtime running the two models one after the other, and the two
// steps stitched into one executable per bucket; and the classifier
// pipeline of testdata/pipelines/classifier, pictures in and labels out as
// BYTES tensors on both protocols.
func TestTritonEnsembleClients(t *testing.T) {
	python := tritonVenv(t)
	repo := t.TempDir()
	for _, dir := range []string{"ensemble", "classifier"} {
		if err := os.CopyFS(repo, os.DirFS(filepath.Join(repoRoot(t), "testdata", "pipelines", dir))); err != nil {
			t.Fatal(err)
		}
	}
	p := startXserve(t, repo, t.TempDir())
	runPytest(t, python, p, "python/tests/test_triton_ensemble.py")
	p.stop(t)
}
