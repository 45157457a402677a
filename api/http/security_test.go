package httpapi

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/xserve/xserve/api/auth"
	"github.com/xserve/xserve/internal/testcerts"
)

func testTokens(t *testing.T) *auth.Tokens {
	t.Helper()
	tk, err := auth.Parse("user-token\nadmin-token admin", "test")
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestAuth(t *testing.T) {
	ts := startServer(t, Options{Auth: testTokens(t), OpenHealth: true})
	for _, tc := range []struct {
		method, path, token string
		code                int
	}{
		{"GET", "/v2/models/m", "", 401},
		{"GET", "/v2/models/m", "wrong", 401},
		{"GET", "/v2/models/m", "user-token", 200},
		{"POST", "/v2/models/m/infer", "", 401},
		{"POST", "/v2/repository/models/m/load", "user-token", 403},
		{"POST", "/v2/repository/models/m/unload", "user-token", 403},
		{"POST", "/v2/repository/models/m/load", "admin-token", 200},
		{"POST", "/v2/repository/index", "user-token", 200},
		{"GET", "/v2/health/ready", "", 200},
		{"GET", "/v2/models/m/ready", "", 200},
		{"GET", "/v2/models/m/versions/1/ready", "", 200},
		{"GET", "/metrics", "", 200},
		{"GET", "/v2/models/m/stats", "", 401},
	} {
		var hdr []string
		if tc.token != "" {
			hdr = []string{"Authorization", "Bearer " + tc.token}
		}
		r := ts.do(t, tc.method, tc.path, nil, hdr...)
		if r.code != tc.code {
			t.Errorf("%s %s with %q: %v, want %d", tc.method, tc.path, tc.token, r, tc.code)
		}
		if r.code == 401 && r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: a 401 without WWW-Authenticate", tc.method, tc.path)
		}
	}
	closed := startServer(t, Options{Auth: testTokens(t)})
	for _, path := range []string{"/v2/health/live", "/v2/models/m/ready"} {
		if r := closed.do(t, "GET", path, nil); r.code != 401 {
			t.Errorf("%s without OpenHealth: %v, want 401", path, r)
		}
	}
}

func TestCORS(t *testing.T) {
	ts := startServer(t, Options{CORSOrigins: []string{"https://app.example"}})
	r := ts.do(t, "OPTIONS", "/v2/models/m/infer", nil, "Origin", "https://app.example", "Access-Control-Request-Method", "POST")
	if r.code != 204 || r.header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("preflight from an allowed origin: %v %v", r, r.header)
	}
	r = ts.do(t, "GET", "/v2/models/m", nil, "Origin", "https://evil.example")
	if got := r.header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("a foreign origin got Access-Control-Allow-Origin %q", got)
	}
}

// TestTLS serves HTTPS with a client CA: a client with a certificate from
// it gets answers, one without fails the handshake, and plain HTTP fails.
func TestTLS(t *testing.T) {
	certs := testcerts.New(t)
	cfg, err := auth.ServerTLS(auth.TLSOptions{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCAFile: certs.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(&echoBackend{}, Options{TLS: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	url := "https://" + ln.Addr().String() + "/v2/health/live"
	get := func(tc *tls.Config) (*http.Response, error) {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		defer c.CloseIdleConnections()
		return c.Get(url)
	}
	res, err := get(&tls.Config{RootCAs: certs.Pool, Certificates: []tls.Certificate{certs.Client}})
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("mTLS client: %v %v", res, err)
	}
	res.Body.Close()
	if res.TLS == nil || len(res.TLS.PeerCertificates) == 0 {
		t.Error("the response did not come over TLS")
	}
	if _, err := get(&tls.Config{RootCAs: certs.Pool}); err == nil {
		t.Error("a client without a certificate was answered")
	}
	if _, err := get(&tls.Config{}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client that does not trust the CA: %v", err)
	}
	if res, err := http.Get("http://" + ln.Addr().String() + "/v2/health/live"); err == nil && res.StatusCode == 200 {
		t.Error("plain HTTP was answered 200 on the TLS port")
	}
}

// TestRequestIDAndAccessLog checks that a request's id is taken from
// X-Request-ID or traceparent (or made), returned, and logged in the access
// line.
func TestRequestIDAndAccessLog(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	ts := startServer(t, Options{AccessLog: true, Logger: slog.New(slog.NewJSONHandler(w, nil))})
	r := ts.do(t, "GET", "/v2/models/m", nil, "X-Request-ID", "client-id-1")
	if got := r.header.Get("X-Request-ID"); got != "client-id-1" {
		t.Errorf("X-Request-ID = %q, want the client's", got)
	}
	r = ts.do(t, "GET", "/v2/models/missing", nil, "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if got := r.header.Get("X-Request-ID"); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("X-Request-ID = %q, want the traceparent's trace id", got)
	}
	r = ts.do(t, "GET", "/v2/health/live", nil)
	if got := r.header.Get("X-Request-ID"); len(got) != 32 {
		t.Errorf("X-Request-ID = %q, want a generated id", got)
	}
	mu.Lock()
	text := logs.String()
	mu.Unlock()
	for _, want := range []string{
		`"msg":"request","method":"GET","path":"/v2/models/m","route":"/v2/models/:model","status":200`,
		`"request_id":"client-id-1"`,
		`"status":404`,
		`"request_id":"4bf92f3577b34da6a3ce929d0e0e4736"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("access log lacks %s:\n%s", want, text)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
