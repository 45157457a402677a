package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// status GETs url and returns the HTTP status code (0 when unreachable).
func status(url string) int {
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
	for got := status(url); got != want; got = status(url) {
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
		if got := status(strict.url + "/v2/health/ready"); got != http.StatusServiceUnavailable {
			t.Fatalf("strict: /v2/health/ready = %d with model broken unavailable, want 503", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := status(strict.url + "/v2/models/broken/ready"); got == http.StatusOK {
		t.Errorf("/v2/models/broken/ready = 200")
	}
	if got := status(relaxed.url + "/v2/health/ready"); got != http.StatusOK {
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
	for _, want := range []string{"4/4 tinycnn v1 bucket batch=8: compiled", "1 model versions, 4 buckets: 4 compiled, 0 from the cache, 0 failed"} {
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

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestDrainOnSIGTERM: requests queued for a batch (max_queue_delay 2s) over
// HTTP and NATS when SIGTERM arrives are all answered, then xserve exits 0.
func TestDrainOnSIGTERM(t *testing.T) {
	repo := tinycnnRepo(t)
	config := "buckets:\n  batch: [1, 2, 4, 8]\nwarmup: eager\nbatching:\n  max_batch_size: 8\n  max_queue_delay: 2s\n"
	if err := os.WriteFile(filepath.Join(repo, "tinycnn", "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startXserve(t, repo, t.TempDir(), "--nats-listen", "127.0.0.1:0", "--shutdown-timeout", "20s")
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
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	s := loadSample(t)
	img, want := s.batch(1)
	body := v1Request("tinycnn", img, "float32", false)
	const perProtocol = 3
	var wg sync.WaitGroup
	errs := make(chan error, 2*perProtocol)
	for range perProtocol {
		wg.Add(2)
		go func() {
			defer wg.Done()
			r := call(t, "POST", p.url+"/v1/infer", body)
			if r.code != http.StatusOK {
				errs <- fmt.Errorf("HTTP: %s", r)
				return
			}
			checkV1(t, r, want)
		}()
		go func() {
			defer wg.Done()
			msg, err := nc.Request("xserve.v1.infer.tinycnn", body, 30*time.Second)
			if err != nil {
				errs <- fmt.Errorf("NATS: %w", err)
				return
			}
			if e := msg.Header.Get("Nats-Service-Error"); e != "" {
				errs <- fmt.Errorf("NATS error reply: %s %s", e, msg.Data)
				return
			}
			checkV1(t, reply{code: http.StatusOK, header: http.Header{}, body: msg.Data}, want)
		}()
	}
	// SIGTERM once every request waits in the server (the /metrics request
	// counts itself in the HTTP gauge).
	deadline = time.Now().Add(30 * time.Second)
	for {
		m := string(call(t, "GET", p.url+"/metrics", nil).body)
		if strings.Contains(m, fmt.Sprintf("xserve_http_requests_in_flight %d\n", perProtocol+1)) &&
			strings.Contains(m, fmt.Sprintf("xserve_nats_requests_in_flight{model=\"tinycnn\"} %d\n", perProtocol)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the requests never all reached the server:\n%s", grepLines(m, "in_flight"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	p.waitExit(t)
	if !strings.Contains(p.log.String(), "msg=stopped") {
		t.Errorf("no clean stop in the log")
	}
}
