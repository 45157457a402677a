package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	httpapi "github.com/xserve/xserve/api/http"
)

// rssBytes is this process's resident set size.
func rssBytes(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// post sends body with the given headers (pairs) and returns the status and
// the response body.
func post(t *testing.T, url string, body []byte, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestMemoryBudgetBombs sends eight 1 GB zstd bombs at once to a server
// with the default limits: the memory budget and the decompression limit
// keep the process's RSS growth under 300 MB, every bomb is refused (413 or
// 429), the server keeps serving, and the memory goes back after the burst.
func TestMemoryBudgetBombs(t *testing.T) {
	base, _ := serveTinyCNN(t, "buckets:\n  batch: [1, 2]\nwarmup: eager\n", httpapi.Options{})
	good := []byte(fmt.Sprintf(`{"model": "tinycnn", "inputs": {"image": {"dtype": "float32", "shape": [1, 3, 32, 32], "data": [%s]}}}`,
		strings.TrimSuffix(strings.Repeat("0.5,", 3*32*32), ",")))
	if code, body := post(t, base+"/v1/infer", good, "Content-Type", "application/json"); code != 200 {
		t.Fatalf("before: %d %s", code, body)
	}

	var bomb bytes.Buffer
	zw, err := zstd.NewWriter(&bomb, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	for range 1 << 10 { // 1 GiB
		zw.Write(zeros)
	}
	zw.Close()
	zeros = nil
	runtime.GC()
	before := rssBytes(t)

	var peak int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak = max(peak, rssBytes(t))
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Go(func() {
			codes[i], _ = post(t, base+"/v1/infer", bomb.Bytes(), "Content-Type", "application/json", "Content-Encoding", "zstd")
		})
	}
	wg.Wait()
	// The server serves during and after the burst.
	if code, body := post(t, base+"/v1/infer", good, "Content-Type", "application/json"); code != 200 {
		t.Errorf("after the bombs: %d %s", code, body)
	}
	close(stop)
	<-sampled
	growth := peak - before
	t.Logf("8 bombs of %d compressed bytes (1 GiB each): answers %v, RSS %d MB before, peak growth %d MB", bomb.Len(), codes, before>>20, growth>>20)
	for i, c := range codes {
		if c != http.StatusRequestEntityTooLarge && c != http.StatusTooManyRequests {
			t.Errorf("bomb %d answered %d, want 413 or 429", i, c)
		}
	}
	if growth > 300<<20 {
		t.Errorf("RSS grew by %d MB under the bombs, want under 300 MB", growth>>20)
	}
	// The memory goes back: the budget returns free heap to the OS after a
	// burst.
	deadline := time.Now().Add(20 * time.Second)
	for rssBytes(t)-before > 100<<20 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("RSS %d MB over the start after the burst", (rssBytes(t)-before)>>20)
	if after := rssBytes(t) - before; after > 100<<20 {
		t.Errorf("RSS still %d MB over the start 20s after the burst", after>>20)
	}
}

// TestRefusedBeforeAllocation sends gzip bodies of a valid-looking JSON
// tensor whose batch (20000) fits no bucket: 1 MB of gzip (1 GB of JSON)
// is refused by the decompression limit, 16 MB of JSON by the model's
// buckets from its declared shape, each before the 245 MB tensor it
// declares is allocated.
func TestRefusedBeforeAllocation(t *testing.T) {
	base, _ := serveTinyCNN(t, "buckets:\n  batch: [1, 2]\nwarmup: lazy\n", httpapi.Options{})
	for _, tc := range []struct {
		name      string
		jsonBytes int
		code      int
		want      string
	}{
		{"1 MB of gzip", 1 << 30, 413, "to more than the limit of"},
		{"16 MB of JSON", 16 << 20, 400, "the largest bucket is 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			fmt.Fprint(zw, `{"model": "tinycnn", "inputs": {"image": {"dtype": "float32", "shape": [20000, 3, 32, 32], "data": [0`)
			chunk := bytes.Repeat([]byte(",0"), 1<<15)
			for n := 0; n < tc.jsonBytes; n += len(chunk) {
				zw.Write(chunk)
			}
			fmt.Fprint(zw, `]}}}`)
			zw.Close()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			allocated := ms.TotalAlloc
			start := time.Now()
			code, body := post(t, base+"/v1/infer", buf.Bytes(), "Content-Type", "application/json", "Content-Encoding", "gzip")
			took := time.Since(start)
			runtime.ReadMemStats(&ms)
			allocated = ms.TotalAlloc - allocated
			t.Logf("%d gzip bytes: %d %s in %v, %d MB allocated", buf.Len(), code, body, took.Round(time.Millisecond), allocated>>20)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("answer %d %s, want %d with %q", code, body, tc.code, tc.want)
			}
			// The JSON is read in one pass that keeps the data in the body
			// (about twice the body's size, to read it); the 245 MB tensor is
			// never allocated.
			if allocated > 100<<20 {
				t.Errorf("%d MB allocated to refuse it; the tensor alone would be 245 MB", allocated>>20)
			}
		})
	}
}
