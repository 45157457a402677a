package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/xserve/xserve/loadtest"
)

func TestFlagErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"remote":      {[]string{"-url", "http://10.1.2.3:8080", "-model", "m", "-random", "x=float32:1"}, "non-loopback"},
		"exclusive":   {[]string{"-model", "m", "-random", "x=float32:1", "-c", "2", "-rate", "10"}, "exclusive"},
		"unbounded":   {[]string{"-model", "m", "-random", "x=float32:1", "-d", "0"}, "never end"},
		"no model":    {[]string{"-random", "x=float32:1"}, "-model is required"},
		"bad random":  {[]string{"-model", "m", "-random", "x=float32"}, "NAME=DTYPE:SHAPE"},
		"bad input":   {[]string{"-model", "m", "-input", "x"}, "NAME=FILE.npy"},
		"bad proto":   {[]string{"-model", "m", "-random", "x=float32:1", "-protocol", "grpc"}, "protocol"},
		"inflight":    {[]string{"-model", "m", "-random", "x=float32:1", "-max-inflight", "3"}, "open-loop"},
		"bad expect":  {[]string{"-model", "m", "-random", "x=float32:1", "-expect", "probs=1xz"}, "-expect"},
		"positionals": {[]string{"-model", "m", "extra"}, "unexpected arguments"},
		"grpc+nats":   {[]string{"-model", "m", "-random", "x=float32:1", "-grpc", "127.0.0.1:1", "-nats", "nats://127.0.0.1:1"}, "-grpc and -nats are exclusive"},
		"grpc gzip":   {[]string{"-model", "m", "-random", "x=float32:1", "-grpc", "127.0.0.1:1", "-compress", "gzip"}, "-compress"},
		"grpc remote": {[]string{"-model", "m", "-random", "x=float32:1", "-grpc", "10.1.2.3:8001"}, "non-loopback"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
	err := run(context.Background(), []string{"-url", "http://10.1.2.3:8080", "-model", "m", "-random", "x=float32:1"}, &bytes.Buffer{}, &bytes.Buffer{})
	if !errors.Is(err, loadtest.ErrNotLoopback) {
		t.Errorf("remote URL: error %v, want ErrNotLoopback", err)
	}
}

func TestRunAndMarkdown(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte(`{"model":"m","outputs":{"probs":{"dtype":"float32","shape":[1,10],"data":[0,0,0,0,0,0,0,0,0,1]}}}`))
	}))
	defer srv.Close()
	js := filepath.Join(t.TempDir(), "out.json")
	var out, errOut bytes.Buffer
	args := []string{"-url", srv.URL, "-model", "m", "-random", "image=float32:1x3x8x8", "-c", "2", "-n", "25", "-warmup", "0", "-expect", "probs=1x10", "-json", js}
	if err := run(context.Background(), args, &out, &errOut); err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "25: 25 ok, 0 failed") {
		t.Errorf("summary:\n%s", out.String())
	}
	if hits.Load() != 25 {
		t.Errorf("server saw %d requests, want 25", hits.Load())
	}
	var m map[string]any
	b, _ := os.ReadFile(js)
	if err := json.Unmarshal(b, &m); err != nil || m["requests"] != 25.0 {
		t.Errorf("JSON file: %v, %v", err, m)
	}
	out.Reset()
	if err := run(context.Background(), []string{"-markdown", js}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "| concurrency |") || !strings.Contains(out.String(), "\n| 2 | ") {
		t.Errorf("markdown:\n%s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"-compare", "-compare-names", "off,on", "m c=2=" + js + "," + js}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "| run | off req/s | on req/s | on/off |") || !strings.Contains(out.String(), "\n| m c=2 | ") || !strings.Contains(out.String(), " | 1.00x | ") {
		t.Errorf("compare:\n%s", out.String())
	}
	for _, args := range [][]string{{"-compare"}, {"-compare", "x=" + js}, {"-compare", "-compare-names", "a", "x=" + js + "," + js}} {
		if err := run(context.Background(), args, &out, &errOut); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
