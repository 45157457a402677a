package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xserve/xserve/serving"
)

func TestContentTypes(t *testing.T) {
	ts := startServer(t, Options{})
	multipart := "--XX\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n{}\r\n--XX--\r\n"
	for _, tc := range []struct {
		name, path, body string
		headers          []string
		code             int
		want             string
	}{
		{"multipart infer", "/v2/models/echo/infer", multipart, []string{"Content-Type", "multipart/form-data; boundary=XX"}, 415, "no form or multipart bodies"},
		{"multipart v1", "/v1/infer", multipart, []string{"Content-Type", "multipart/mixed; boundary=XX"}, 415, "no form or multipart bodies"},
		{"cross-site form unload", "/v2/repository/models/echo/unload", "a=b", []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example"}, 415, "no form or multipart bodies"},
		{"form unload with fetch metadata", "/v2/repository/models/echo/unload", "a=b", []string{"Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site"}, 415, "no form or multipart bodies"},
		{"cross-site form infer", "/v2/models/echo/infer", "a=b", []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "null"}, 415, "no form or multipart bodies"},
		{"cross-site form register", "/v2/systemsharedmemory/region/r/register", `{"key": "/k", "byte_size": 8}`, []string{"Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site"}, 415, "no form or multipart bodies"},
		// libcurl's default POST type from a program (Triton's C++ client):
		// no Origin, no Sec-Fetch-Site; the body is read as JSON.
		{"program's form-typed unload", "/v2/repository/models/echo/unload", "{}", []string{"Content-Type", "application/x-www-form-urlencoded"}, 200, ""},
		{"program's form-typed infer", "/v2/models/echo/infer", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 200, ""},
		{"multipart load", "/v2/repository/models/echo/load", multipart, []string{"Content-Type", "multipart/form-data; boundary=XX"}, 415, "no form or multipart bodies"},
		{"text unload", "/v2/repository/models/echo/unload", "{}", []string{"Content-Type", "text/plain;charset=UTF-8"}, 415, `Content-Type is "text/plain"; the repository and admin API takes application/json`},
		{"browser without type", "/v2/repository/models/echo/unload", "{}", []string{"Origin", "http://evil.example"}, 415, "from a browser"},
		{"browser index", "/v2/repository/index", "", []string{"Origin", "http://evil.example"}, 415, "from a browser"},
		{"json unload", "/v2/repository/models/echo/unload", "{}", []string{"Content-Type", "application/json; charset=utf-8"}, 200, ""},
		{"untyped unload", "/v2/repository/models/echo/unload", "", nil, 200, ""},
		{"json index from a browser", "/v2/repository/index", "{}", []string{"Content-Type", "application/json", "Origin", "http://localhost"}, 200, ""},
		{"1e400", "/v1/infer", `{"model": "echo", "inputs": {"x": {"dtype": "float32", "shape": [2], "data": [1, 1e400]}}}`, nil, 400, `element 1 is "1e400", want a number within the range of float32`},
		{"-1e309 float64", "/v2/models/echo/infer", `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP64", "data": [-1e309]}]}`, []string{"Content-Type", "application/json"}, 400, "within the range of float64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStatus(t, ts.do(t, "POST", tc.path, []byte(tc.body), tc.headers...), tc.code, tc.want)
		})
	}
	if fmt.Sprint(ts.backend.unloaded) != "[echo echo echo]" {
		t.Errorf("unloaded %v, want the program's, the JSON and the untyped unloads only", ts.backend.unloaded)
	}
}

// rootedBackend is an echoBackend serving from a repository root, as
// serving.Manager does.
type rootedBackend struct{ *echoBackend }

func (rootedBackend) RepositoryRoot() string { return "/srv/models" }

func (b rootedBackend) Load(ctx context.Context, model string) error {
	if model == "pathy" {
		return fmt.Errorf("%w: serving: model pathy version 1: onnx: /srv/models/pathy/1/model.onnx: bad wire type (plugin /opt/pjrt/libpjrt_cpu.so)", serving.ErrNotReady)
	}
	return b.echoBackend.Load(ctx, model)
}

func (b rootedBackend) Status() []serving.ModelStatus {
	return []serving.ModelStatus{{Name: "pathy", Version: 1, State: serving.StateUnavailable, Reason: "model pathy version 1: onnx: /srv/models/pathy/1/model.onnx: bad wire type"}}
}

func TestErrorsHidePathsAndPackages(t *testing.T) {
	logs := &strings.Builder{}
	ts := serveBackend(t, rootedBackend{&echoBackend{}}, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	r := ts.do(t, "POST", "/v2/repository/models/pathy/load", nil)
	const want = `{"error":"model not ready: model pathy version 1: pathy/1/model.onnx: bad wire type (plugin libpjrt_cpu.so)"}`
	if r.code != 503 || string(r.body) != want {
		t.Errorf("load error: %s\nwant %s", r, want)
	}
	r = ts.do(t, "POST", "/v2/repository/index", nil)
	if !strings.Contains(string(r.body), `"reason":"model pathy version 1: pathy/1/model.onnx: bad wire type"`) {
		t.Errorf("index: %s", r)
	}
	if !strings.Contains(logs.String(), "/srv/models/pathy/1/model.onnx") {
		t.Errorf("the log lost the full message:\n%s", logs)
	}
}

// TestConnectionCap: past MaxConns a new connection is answered 503 and
// closed; an idle connection is closed after IdleTimeout, which frees its
// place.
func TestConnectionCap(t *testing.T) {
	ts := startServer(t, Options{MaxConns: 2, MaxConnsPerIP: -1, IdleTimeout: 300 * time.Millisecond})
	addr := strings.TrimPrefix(ts.url, "http://")
	get := func(conn net.Conn) string {
		t.Helper()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err.Error()
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			return err.Error()
		}
		return strings.TrimSpace(line)
	}
	for range 2 { // two connections, kept alive and idle
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := get(c); got != "HTTP/1.1 200 OK" {
			t.Fatalf("connection within the cap: %q", got)
		}
	}
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if got := get(third); !strings.Contains(got, "503") {
		t.Errorf("connection over the cap: %q, want 503", got)
	}
	// The idle ones are closed after IdleTimeout; then a new one is served.
	time.Sleep(time.Second)
	fourth, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fourth.Close()
	if got := get(fourth); got != "HTTP/1.1 200 OK" {
		t.Errorf("after the idle connections timed out: %q", got)
	}
}
