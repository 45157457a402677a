package engine

import (
	"fmt"
	"os"
	"testing"

	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/pjrt/pjrttest"
)

// Files the tests run. tinycnn: image float32[batch,3,32,32] -> probs
// float32[batch,10], with ONNX Runtime's output for a batch of 2.
const (
	tinyCNN      = "../examples/models/tinycnn/1/model.onnx"
	tinyCNNImage = "../examples/samples/tinycnn/image.npy"
	tinyCNNProbs = "../examples/samples/tinycnn/probs.onnxruntime.npy"
)

// plugin is the real XLA CPU plugin's client the tests share.
var plugin = pjrttest.Shared{RepoRoot: ".."}

// testClient returns the client of the real XLA CPU plugin the tests
// share. A missing plugin fails the test: run `make pjrt`.
func testClient(t testing.TB) *pjrt.Client {
	t.Helper()
	return plugin.Client(t)
}

// testEngine returns an engine on the shared client.
func testEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	opts.Client = testClient(t)
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestMain(m *testing.M) {
	code := m.Run()
	if err := plugin.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "closing the shared client:", err)
		code = 1
	}
	os.Exit(code)
}
