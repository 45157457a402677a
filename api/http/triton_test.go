package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestTritonExtensions checks the shapes Triton's clients read from the
// model configuration, statistics, shared-memory, trace and logging routes.
func TestTritonExtensions(t *testing.T) {
	ts := startServer(t, Options{})
	for _, tc := range []struct {
		method, path string
		code         int
		want         string // a substring of the body
	}{
		{"GET", "/v2/models/m/config", 200, `"max_batch_size":0,"input":[{"name":"x","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[-1,3]`},
		{"GET", "/v2/models/m/versions/1/config", 200, `"version_policy":{"specific":{"versions":[1]}}`},
		{"GET", "/v2/models/missing/config", 404, `is not in the repository`},
		{"GET", "/v2/models/m/versions/x/config", 400, `is not a positive integer`},
		{"GET", "/v2/models/stats", 200, `{"model_stats":[]}`},
		{"GET", "/v2/models/m/stats", 200, `{"model_stats":[]}`},
		{"GET", "/v2/models/missing/versions/2/stats", 404, `is not in the repository`},
		{"GET", "/v2/systemsharedmemory/status", 200, `[]`},
		{"GET", "/v2/cudasharedmemory/region/r/status", 200, `[]`},
		{"POST", "/v2/systemsharedmemory/region/r/register", 400, `the registration of region r`},
		{"GET", "/v2/systemsharedmemory/region/r/status", 400, `region \"r\" is not registered`},
		{"POST", "/v2/systemsharedmemory/region/r/unregister", 400, `region \"r\" is not registered`},
		{"POST", "/v2/cudasharedmemory/region/r/register", 400, `xserve does not support CUDA shared memory`},
		{"POST", "/v2/systemsharedmemory/unregister", 200, ``},
		{"GET", "/v2/trace/setting", 200, `"trace_level":["OFF"]`},
		{"POST", "/v2/models/m/trace/setting", 400, `trace settings`},
		{"GET", "/v2/logging", 200, `"log_verbose_level":0`},
		{"POST", "/v2/logging", 400, `--log-level`},
		{"GET", "/v2", 200, `"binary_tensor_data","system_shared_memory","model_repository","model_configuration","statistics"`},
	} {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			r := ts.do(t, tc.method, tc.path, nil)
			if r.code != tc.code || !strings.Contains(string(r.body), tc.want) {
				t.Fatalf("got %v, want %d with %q", r, tc.code, tc.want)
			}
			if r.code == http.StatusOK && len(r.body) > 0 && !json.Valid(r.body) {
				t.Fatalf("body is not JSON: %s", r.body)
			}
		})
	}
}
