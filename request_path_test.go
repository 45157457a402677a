package xserve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	httpapi "github.com/xserve/xserve/api/http"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/pjrt/pjrttest"
	"github.com/xserve/xserve/serving"
)

// maxRequestPackages bounds the project packages one HTTP request's call
// path crosses from the handler to the PJRT execute call.
const maxRequestPackages = 6

// TestStructureRequestPath serves a model over HTTP (the real server,
// serving.Manager and PJRT CPU plugin), samples every goroutine's stack
// while requests run until one is inside the plugin's execute call, and
// checks the project packages on that call path, from the handler down:
// at most maxRequestPackages, each entered once (no package calls back up
// into one it came from).
func TestStructureRequestPath(t *testing.T) {
	client := pjrttest.Open(t, ".", pjrt.OpenOptions{})
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	repo := t.TempDir()
	model, err := os.ReadFile("examples/models/tinycnn/1/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	// Batching off: the request executes on the handler's goroutine, so
	// one stack holds its whole path.
	for file, data := range map[string][]byte{
		"tinycnn/1/model.onnx": model,
		"tinycnn/config.yaml":  []byte("buckets:\n  batch: [1]\nwarmup: eager\nbatching:\n  enabled: false\n"),
	} {
		p := filepath.Join(repo, file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := modelrepo.Open(repo)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := serving.NewManager(ctx, serving.Options{Client: client, Repository: r, Logger: quiet, SplitBatches: serving.SplitOff})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Shutdown(ctx)
	srv, err := httpapi.New(mgr, httpapi.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(ctx)

	body, err := json.Marshal(map[string]any{"model": "tinycnn", "inputs": map[string]any{
		"image": map[string]any{"dtype": "float32", "shape": []int{1, 3, 32, 32}, "data": make([]float32, 3*32*32)}}})
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://%s/v1/infer", ln.Addr())
	stop := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := http.Post(url, "application/json", bytes.NewReader(body))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				failed <- err
				return
			}
		}
	}()
	defer close(stop)

	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-failed:
			t.Fatalf("request: %v", err)
		default:
		}
		n := runtime.Stack(buf, true)
		if stack := executingStack(string(buf[:n])); stack != "" {
			checkRequestPath(t, stack)
			return
		}
		runtime.Gosched()
	}
	t.Fatal("no request seen inside the plugin's execute call in 60s")
}

// executingStack returns the stack of a goroutine inside the plugin's
// execute call (a cgo call of package pjrt's execution), or "".
func executingStack(all string) string {
	for _, g := range strings.Split(all, "\n\n") {
		if strings.Contains(g, "pjrt._Cfunc_xs_run") || strings.Contains(g, "pjrt._Cfunc_xs_execute") {
			return g
		}
	}
	return ""
}

var frameRE = regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(module) + `/([\w/]+?)\.[^\s/]*\(`)

// checkRequestPath reads the project packages of a stack (innermost
// first), from the HTTP handler down to pjrt.
func checkRequestPath(t *testing.T, stack string) {
	t.Helper()
	var pkgs []string // outermost first
	for _, m := range frameRE.FindAllStringSubmatch(stack, -1) {
		pkgs = append([]string{m[1]}, pkgs...)
	}
	start := slices.Index(pkgs, "api/http")
	if start < 0 || pkgs[len(pkgs)-1] != "pjrt" {
		t.Fatalf("the stack does not run from api/http to pjrt: %v\n%s", pkgs, stack)
	}
	var path []string
	for _, p := range pkgs[start:] {
		if len(path) > 0 && path[len(path)-1] == p {
			continue
		}
		if slices.Contains(path, p) {
			t.Errorf("the call path comes back into %s: %v", p, pkgs[start:])
		}
		path = append(path, p)
	}
	t.Logf("request path: %s", strings.Join(path, " → "))
	if len(path) > maxRequestPackages {
		t.Errorf("the request crosses %d packages (%s), want at most %d", len(path), strings.Join(path, " → "), maxRequestPackages)
	}
}
