package payload

import "testing"

func TestPublicMessage(t *testing.T) {
	const root = "/srv/models"
	for _, tc := range []struct{ in, want string }{
		{"serving: model not found: no model \"x\" in the repository", `model not found: no model "x" in the repository`},
		{"model tinycnn version 1: onnx: /srv/models/tinycnn/1/model.onnx: field 12: bad wire type", "model tinycnn version 1: tinycnn/1/model.onnx: field 12: bad wire type"},
		{"serving: config.yaml pjrt_plugin is \"cuda\", but this server runs only cpu (/opt/pjrt/libpjrt_cpu.so)", `config.yaml pjrt_plugin is "cuda", but this server runs only cpu (libpjrt_cpu.so)`},
		{"modelrepo: /srv/models/a/config.yaml: key buckets: want a map", "a/config.yaml: key buckets: want a map"},
		{"open /tmp/x/y.pt2: no such file", "open y.pt2: no such file"},
		{"payload: bad request: input \"x\": data: element 0 is \"1e400\"", `bad request: input "x": data: element 0 is "1e400"`},
		{"repository /srv/models is empty", "repository . is empty"},
		{"ratio 3/4 of x", "ratio 3/4 of x"},
	} {
		if got := PublicMessage(tc.in, root); got != tc.want {
			t.Errorf("PublicMessage(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}
