package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xserve/xserve/tensor"
)

// status GETs url and returns the HTTP status code (0 when unreachable).
func httpStatus(url string) int {
	res, err := http.Get(url)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// waitStatus polls url until it answers want.
func waitStatus(t *testing.T, url string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for got := httpStatus(url); got != want; got = httpStatus(url) {
		if time.Now().After(deadline) {
			t.Fatalf("%s answered %d for %s, want %d", url, got, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStrictReadiness: a model that fails to load keeps /v2/health/ready at
// 503 (the other model serves and is ready on its own endpoint) until the
// repository is fixed; --strict-readiness=false is ready all along.
func TestStrictReadiness(t *testing.T) {
	repo := tinycnnRepo(t)
	broken := filepath.Join(repo, "broken", "1", "model.onnx")
	if err := os.MkdirAll(filepath.Dir(broken), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, []byte("not an ONNX model"), 0o644); err != nil {
		t.Fatal(err)
	}
	strict := launchXserve(t, repo, t.TempDir(), "--poll-interval", "100ms")
	relaxed := startXserve(t, repo, t.TempDir(), "--strict-readiness=false")

	waitStatus(t, strict.url+"/v2/models/tinycnn/ready", http.StatusOK, time.Minute)
	for range 5 { // not a moment of 503: it stays so
		if got := httpStatus(strict.url + "/v2/health/ready"); got != http.StatusServiceUnavailable {
			t.Fatalf("strict: /v2/health/ready = %d with model broken unavailable, want 503", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := httpStatus(strict.url + "/v2/models/broken/ready"); got == http.StatusOK {
		t.Errorf("/v2/models/broken/ready = 200")
	}
	if got := httpStatus(relaxed.url + "/v2/health/ready"); got != http.StatusOK {
		t.Errorf("--strict-readiness=false: /v2/health/ready = %d, want 200", got)
	}
	// `xserve health` (the image's HEALTHCHECK) says the same.
	if _, _, err := xserve(t, "health", "--url", strict.url+"/v2/health/ready"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("xserve health on the unready server: %v", err)
	}
	if out, _, err := xserve(t, "health", "--url", relaxed.url+"/v2/health/ready"); err != nil || !strings.Contains(out, "200 OK") {
		t.Errorf("xserve health on the ready server: %v %s", err, out)
	}

	// Fix the model in place: the poller reloads it, the server turns ready.
	model, err := os.ReadFile(example + "/1/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, model, 0o644); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, strict.url+"/v2/health/ready", http.StatusOK, 2*time.Minute)
	strict.stop(t)
	relaxed.stop(t)
}

// TestCompileThenServe: `xserve compile` builds every bucket of a lazily
// warmed model into the cache (a second run compiles nothing), and a server
// on that cache answers every bucket without compiling.
func TestCompileThenServe(t *testing.T) {
	repo, cache := tinycnnRepo(t), t.TempDir()
	out, stderr, err := xserve(t, "compile", "--model-repo", repo, "--compile-cache", cache)
	if err != nil {
		t.Fatalf("compile: %v\n%s%s", err, out, stderr)
	}
	// The buckets compile in parallel: the progress counts them as they
	// finish, whichever finishes last.
	for _, want := range []string{"4/4 tinycnn v1 bucket batch=", "tinycnn v1 bucket batch=8: compiled", "1 model versions, 4 buckets: 4 compiled, 0 from the cache, 0 failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("first compile: no %q in\n%s", want, out)
		}
	}
	out, stderr, err = xserve(t, "compile", "--model-repo", repo, "--compile-cache", cache)
	if err != nil || !strings.Contains(out, "4 buckets: 0 compiled, 4 from the cache") {
		t.Errorf("second compile: %v\n%s%s", err, out, stderr)
	}

	p := startXserve(t, repo, cache)
	s := loadSample(t)
	for _, n := range []int{1, 2, 3, 8} {
		img, want := s.batch(n)
		checkV1(t, call(t, "POST", p.url+"/v1/infer", v1Request("tinycnn", img, "float32", false)), want)
	}
	metrics := string(call(t, "GET", p.url+"/metrics", nil).body)
	if m := regexp.MustCompile(`(?m)^xserve_compilations_total\{.*\} [1-9].*$`).FindString(metrics); m != "" {
		t.Errorf("a server on the compiled cache compiled: %s", m)
	}
	if !strings.Contains(metrics, `xserve_compile_cache_total{kind="executable",result="hit"} 4`) {
		t.Errorf("no executable cache hits in /metrics:\n%s", grepLines(metrics, "xserve_compile"))
	}
	p.stop(t)

	// Bad input gets a clear error.
	_, _, err = xserve(t, "compile", "--compile-cache", cache)
	if err == nil || !strings.Contains(err.Error(), "--model-repo DIR is required") {
		t.Errorf("compile without --model-repo: %v", err)
	}
	empty := t.TempDir()
	_, _, err = xserve(t, "compile", "--model-repo", empty, "--compile-cache", cache)
	if err == nil || !strings.Contains(err.Error(), "no model to compile") {
		t.Errorf("compile of an empty repository: %v", err)
	}
}

// grepLines returns the lines of s that match the regular expression re.
func grepLines(s, re string) string {
	match := regexp.MustCompile(re)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if match.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestDrainOnSIGTERM: HTTP and NATS requests that are in the server when
// SIGTERM arrives (queued behind one another on a heavier model, the zoo's
// resnet50 fixture) are all answered, then xserve exits 0.
func TestDrainOnSIGTERM(t *testing.T) {
	repo := t.TempDir()
	model, err := os.ReadFile("../../testdata/zoo/resnet50/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(repo, "resnet50", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "resnet50", "1", "model.onnx"), model, 0o644); err != nil {
		t.Fatal(err)
	}
	config := "buckets:\n  batch: [4]\nwarmup: eager\nbatching:\n  max_batch_size: 4\n"
	if err := os.WriteFile(filepath.Join(repo, "resnet50", "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	// No --shutdown-delay: the HTTP server itself drains (it keeps its
	// listener and answers what arrives until no request has started for
	// a moment), so a request still in a keep-alive connection's socket at
	// SIGTERM is answered, not reset.
	p := startXserve(t, repo, t.TempDir(), "--nats-listen", "127.0.0.1:0", "--shutdown-timeout", "60s")
	var natsURL string
	deadline := time.Now().Add(time.Minute)
	for natsURL == "" {
		if m := embeddedURLE.FindStringSubmatch(p.log.String()); m != nil {
			natsURL = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no embedded NATS URL in the log:\n%s", p.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The embedded server takes only its users: sign in with the client
	// seed it wrote.
	seed := clientNkeyRE.FindStringSubmatch(p.log.String())
	if seed == nil {
		t.Fatalf("no client_nkey in the log:\n%s", p.log)
	}
	nkey, err := nats.NkeyOptionFromSeed(seed[1])
	if err != nil {
		t.Fatal(err)
	}
	inbox := inboxPrefixRE.FindStringSubmatch(p.log.String())
	if inbox == nil {
		t.Fatalf("no client_inbox_prefix in the log:\n%s", p.log)
	}
	nc, err := nats.Connect(natsURL, nkey, nats.CustomInboxPrefix(inbox[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	img, err := tensor.ReadNpyFile("../../testdata/zoo/resnet50/b3.in.image.npy")
	if err != nil {
		t.Fatal(err)
	}
	body := v1Request("resnet50", img, "float32", false)
	// Closed-loop load over both protocols until SIGTERM; each client stops
	// sending once stop is set, just before the signal.
	const clients = 6
	var (
		wg        sync.WaitGroup
		stop      atomic.Bool
		mu        sync.Mutex
		sigterm   time.Time
		after     = map[string]int{} // answers completed after SIGTERM, by protocol
		failures  []string
		turnedOff int // requests refused because the server had stopped taking them
	)
	answered := func(protocol string, data []byte) {
		var r struct {
			Outputs map[string]struct{ Shape []int64 } `json:"outputs"`
		}
		mu.Lock()
		defer mu.Unlock()
		if err := json.Unmarshal(data, &r); err != nil || fmt.Sprint(r.Outputs["logits"].Shape) != "[3 10]" {
			failures = append(failures, fmt.Sprintf("%s: unexpected answer (%v): %.200s", protocol, err, data))
			return
		}
		if !sigterm.IsZero() {
			after[protocol]++
		}
	}
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	// refused counts a request the draining server did not take; one sent
	// before SIGTERM was in the server (its clients saw it in flight) and
	// must have been answered, so its refusal is a failure.
	refused := func(protocol string, sent time.Time, err error) {
		mu.Lock()
		defer mu.Unlock()
		if !sigterm.IsZero() && sent.Before(sigterm) {
			failures = append(failures, fmt.Sprintf("%s: a request sent before SIGTERM failed: %v", protocol, err))
			return
		}
		turnedOff++
	}
	for range clients {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				sent := time.Now()
				res, err := http.Post(p.url+"/v1/infer", "application/json", bytes.NewReader(body))
				if err != nil { // a connection the closed listener refused or reset
					refused("HTTP", sent, err)
					return
				}
				data, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					fail("HTTP: %s: %.200s", res.Status, data)
					return
				}
				answered("HTTP", data)
			}
		}()
		go func() {
			defer wg.Done()
			for !stop.Load() {
				sent := time.Now()
				msg, err := nc.Request("xserve.v1.infer.resnet50", body, time.Minute)
				if errors.Is(err, nats.ErrNoResponders) { // published after the drain unsubscribed
					refused("NATS", sent, err)
					return
				}
				if err != nil {
					fail("NATS: %v", err)
					return
				}
				if e := msg.Header.Get("Nats-Service-Error"); e != "" {
					fail("NATS error reply: %s %.200s", e, msg.Data)
					return
				}
				answered("NATS", msg.Data)
			}
		}()
	}
	// SIGTERM while requests of both protocols are in the server (the
	// /metrics request counts itself in the HTTP gauge).
	httpIn := regexp.MustCompile(`(?m)^xserve_http_requests_in_flight ([0-9]+)$`)
	natsIn := regexp.MustCompile(`(?m)^xserve_nats_requests_in_flight\{model="resnet50"\} ([0-9]+)$`)
	var inHTTP, inNATS int
	deadline = time.Now().Add(30 * time.Second)
	for {
		m := string(call(t, "GET", p.url+"/metrics", nil).body)
		if h, n := httpIn.FindStringSubmatch(m), natsIn.FindStringSubmatch(m); h != nil && n != nil {
			fmt.Sscan(h[1], &inHTTP)
			fmt.Sscan(n[1], &inNATS)
			inHTTP--
			if inHTTP >= 1 && inNATS >= 1 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("never requests of both protocols in the server at once:\n%s", grepLines(m, "in_flight|xserve_requests_total"))
		}
		time.Sleep(time.Millisecond)
	}
	// From here on the clients send nothing new; a request sent before
	// must be answered (refused() fails it otherwise).
	stop.Store(true)
	mu.Lock()
	sigterm = time.Now()
	mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	// Requests of both protocols were in the server at SIGTERM and were
	// answered after it (every request sent before it was: see refused).
	if after["HTTP"] == 0 || after["NATS"] == 0 {
		t.Errorf("in flight at SIGTERM: %d HTTP, %d NATS; answered after it: %v", inHTTP, inNATS, after)
	}
	t.Logf("in flight at SIGTERM: %d HTTP, %d NATS; answered after it: %v; refused after it: %d", inHTTP, inNATS, after, turnedOff)
	p.waitExit(t)
	if !strings.Contains(p.log.String(), "msg=stopped") {
		t.Errorf("no clean stop in the log")
	}
}
