package httpapi

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/xserve/xserve/api/shm"
)

// shmObject creates a shared-memory object of size bytes, as shm_open and
// ftruncate do, removed when the test ends.
func shmObject(t *testing.T, size int) (key string) {
	t.Helper()
	key = fmt.Sprintf("/xserve-http-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.WriteFile(shm.Dir+key, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(shm.Dir + key) })
	return key
}

// TestSharedMemory drives the system shared-memory extension as Triton's
// clients do: register (with libcurl's form label, as perf_analyzer
// posts it), infer with the input read from one region and the output
// written to another, status, unregister; and the refusals.
func TestSharedMemory(t *testing.T) {
	reg := shm.New(shm.Limits{MaxRegions: 3})
	defer reg.Close()
	ts := startServer(t, Options{SharedMemory: reg})
	key := shmObject(t, 4096)
	in := make([]byte, 16)
	for i := range 4 {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(i)+0.5))
	}
	f, _ := os.OpenFile(shm.Dir+key, os.O_RDWR, 0)
	f.WriteAt(in, 100)
	f.Close()

	form := []string{"Content-Type", "application/x-www-form-urlencoded"}
	wantStatus(t, ts.do(t, "POST", "/v2/systemsharedmemory/region/input/register", []byte(fmt.Sprintf(`{"key": %q, "offset": 0, "byte_size": 1024}`, key)), form...), 200, "")
	wantStatus(t, ts.do(t, "POST", "/v2/systemsharedmemory/region/out%20put/register", []byte(fmt.Sprintf(`{"key": %q, "offset": 2048, "byte_size": 64}`, key))), 200, "")
	wantBody(t, ts.do(t, "GET", "/v2/systemsharedmemory/status", nil),
		fmt.Sprintf(`[{"name":"input","key":%q,"offset":0,"byte_size":1024},{"name":"out put","key":%q,"offset":2048,"byte_size":64}]`, key, key))

	body := `{"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "parameters": {"shared_memory_region": "input", "shared_memory_byte_size": 16, "shared_memory_offset": 100}}],
		"outputs": [{"name": "x", "parameters": {"shared_memory_region": "out put", "shared_memory_byte_size": 56, "shared_memory_offset": 8}}]}`
	r := ts.do(t, "POST", "/v2/models/echo/infer", []byte(body))
	wantBody(t, r, `"outputs":[{"name":"x","datatype":"FP32","shape":[2,2]}]`)
	file, _ := os.ReadFile(shm.Dir + key)
	if got := file[2048+8 : 2048+8+16]; string(got) != string(in) {
		t.Errorf("the output region holds %v, want the input's bytes %v", got, in)
	}

	for _, tc := range []struct{ name, body, want string }{
		{"output larger than its size", strings.Replace(body, `"shared_memory_byte_size": 56`, `"shared_memory_byte_size": 12`, 1),
			`output "x": the result is 16 bytes (float32[2,2]), more than parameters.shared_memory_byte_size 12 of region "out put"`},
		{"output place outside the region", strings.Replace(body, `"shared_memory_byte_size": 56, "shared_memory_offset": 8`, `"shared_memory_byte_size": 64, "shared_memory_offset": 1`, 1),
			`output "x": shm: invalid shared-memory request: shared-memory region "out put": shared_memory_offset 1 + shared_memory_byte_size 64 is outside the region's 64 bytes`},
		{"input outside the region", strings.Replace(body, `"shared_memory_offset": 100`, `"shared_memory_offset": 1020`, 1),
			`shared_memory_offset 1020 + shared_memory_byte_size 16 is outside the region's 1024 bytes`},
		{"input size that does not match its shape", strings.Replace(body, `"shared_memory_byte_size": 16`, `"shared_memory_byte_size": 12`, 1),
			`parameters.shared_memory_byte_size is 12 bytes, float32[2,2] needs 16`},
		{"input with data too", strings.Replace(body, `"parameters": {"shared_memory_region": "input"`, `"data": [1, 2, 3, 4], "parameters": {"shared_memory_region": "input"`, 1),
			`has parameters.shared_memory_region and also "data"`},
		{"output in shared memory and binary", strings.Replace(body, `"shared_memory_offset": 8`, `"shared_memory_offset": 8, "binary_data": true`, 1),
			`goes to shared memory or into the response, not both`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStatus(t, ts.do(t, "POST", "/v2/models/echo/infer", []byte(tc.body)), 400, tc.want)
		})
	}

	for _, tc := range []struct{ name, path, body, want string }{
		{"key outside /dev/shm", "/v2/systemsharedmemory/region/evil/register", `{"key": "/../../etc/passwd", "byte_size": 8}`, "a shared-memory key is one name"},
		{"past the object's end", "/v2/systemsharedmemory/region/big/register", fmt.Sprintf(`{"key": %q, "offset": 4000, "byte_size": 200}`, key), "past the end of the object (4096 bytes)"},
		{"unknown field", "/v2/systemsharedmemory/region/x/register", `{"key": "/k", "size": 8}`, `unknown field "size"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStatus(t, ts.do(t, "POST", tc.path, []byte(tc.body)), 400, tc.want)
		})
	}

	wantStatus(t, ts.do(t, "POST", "/v2/systemsharedmemory/region/third/register", []byte(fmt.Sprintf(`{"key": %q, "byte_size": 8}`, key))), 200, "")
	wantStatus(t, ts.do(t, "POST", "/v2/systemsharedmemory/region/fourth/register", []byte(fmt.Sprintf(`{"key": %q, "byte_size": 8}`, key))), 400, "3 regions are registered, the most allowed")
	wantStatus(t, ts.do(t, "POST", "/v2/systemsharedmemory/region/input/unregister", nil), 200, "")
	wantStatus(t, ts.do(t, "GET", "/v2/systemsharedmemory/region/input/status", nil), 400, `region "input" is not registered`)
	wantStatus(t, ts.do(t, "POST", "/v2/models/echo/infer", []byte(body)), 400, `shared-memory region "input" is not registered`)
	wantStatus(t, ts.do(t, "POST", "/v2/systemsharedmemory/unregister", nil), 200, "")
	if st, _ := reg.Status(""); len(st) != 0 {
		t.Errorf("after unregistering all: %v", st)
	}
}

// wantBody checks a 200 answer's body for want.
func wantBody(t *testing.T, r response, want string) {
	t.Helper()
	if r.code != 200 || !strings.Contains(string(r.body), want) {
		t.Fatalf("got %s, want 200 with %s", r, want)
	}
}

// TestBinaryInputAligned: with the binary tensor extension the first
// tensor's bytes are read into the body at a 64-byte boundary, whatever
// the JSON header's length, so that the executable reads them in place.
func TestBinaryInputAligned(t *testing.T) {
	b := &echoBackend{}
	ts := startServerWith(t, b, Options{})
	for _, pad := range []int{0, 1, 13, 63} {
		header := `{"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]}` + strings.Repeat(" ", pad)
		body := append([]byte(header), make([]byte, 16)...)
		wantStatus(t, ts.do(t, "POST", "/v2/models/echo/infer", body, HeaderInferenceLength, fmt.Sprint(len(header))), 200, "")
		b.mu.Lock()
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b.last.Inputs["x"].Data)))
		b.mu.Unlock()
		if p%64 != 0 {
			t.Errorf("header of %d bytes: the tensor's bytes are at %#x, not 64-byte aligned", len(header), p)
		}
	}
}
