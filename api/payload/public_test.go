package payload

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
)

func TestPublicMessage(t *testing.T) {
	const root = "/srv/models"
	for _, tc := range []struct {
		in   string
		keep []string
		want string
	}{
		{"serving: model not found: no model \"x\" in the repository", nil, `model not found: no model "x" in the repository`},
		{"model tinycnn version 1: onnx: /srv/models/tinycnn/1/model.onnx: field 12: bad wire type", nil, "model tinycnn version 1: tinycnn/1/model.onnx: field 12: bad wire type"},
		{"serving: config.yaml pjrt_plugin is \"cuda\", but this server runs only cpu (/opt/pjrt/libpjrt_cpu.so)", nil, `config.yaml pjrt_plugin is "cuda", but this server runs only cpu (libpjrt_cpu.so)`},
		{"modelrepo: /srv/models/a/config.yaml: key buckets: want a map", nil, "a/config.yaml: key buckets: want a map"},
		{"open /tmp/x/y.pt2: no such file", nil, "open y.pt2: no such file"},
		{"payload: bad request: input \"x\": data: element 0 is \"1e400\"", nil, `bad request: input "x": data: element 0 is "1e400"`},
		{"repository /srv/models is empty", nil, "repository . is empty"},
		{"ratio 3/4 of x", nil, "ratio 3/4 of x"},
		{"httpapi: grpcapi: natsapi: fx: engine: x", nil, "x"},
		{"json: cannot unmarshal string into Go struct field rawConfig.x of type modelrepo.rawBatching", nil, "cannot unmarshal string into Go struct field rawConfig.x of type rawBatching"},
		// What the client sent comes back as sent.
		{`serving: model not found: no model "/srv/models/tinycnn" (modelrepo: invalid name "/srv/models/tinycnn")`, []string{"/srv/models/tinycnn"}, `model not found: no model "/srv/models/tinycnn" (invalid name "/srv/models/tinycnn")`},
		{`serving: no model "serving: x"`, []string{"serving: x"}, `no model "serving: x"`},
		{`model a/b: open /srv/models/a/b/1/model.onnx: no such file`, []string{"a/b"}, `model a/b: open a/b/1/model.onnx: no such file`},
	} {
		if got := PublicMessage(tc.in, root, tc.keep...); got != tc.want {
			t.Errorf("PublicMessage(%q, %q)\n got %q\nwant %q", tc.in, tc.keep, got, tc.want)
		}
	}
}

// TestPublic: a 500's cause never leaves the process; a *PublicError says
// its own message; everything else is scrubbed.
func TestPublic(t *testing.T) {
	internal := errors.New("pjrt: execute /opt/plugin.so: segmentation fault at 0x0")
	if got := Public(internal, http.StatusInternalServerError, ""); got != InternalMessage {
		t.Errorf("500: %q", got)
	}
	pub := fmt.Errorf("serving: wrapped: %w", WithPublic(internal, "the model failed to run"))
	if got := Public(pub, http.StatusInternalServerError, ""); got != "the model failed to run" {
		t.Errorf("PublicError: %q", got)
	}
	if got := pub.Error(); got != "serving: wrapped: the model failed to run: pjrt: execute /opt/plugin.so: segmentation fault at 0x0" {
		t.Errorf("the private message: %q", got)
	}
	bad := fmt.Errorf("%w: input %q: shape [3]", ErrBadRequest, "/x")
	if got := Public(bad, Status(bad), "", "/x"); got != `bad request: input "/x": shape [3]` {
		t.Errorf("400: %q", got)
	}
}
