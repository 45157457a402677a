package engine

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/xserve/xserve/pjrt"
)

// Files the tests run. tinycnn: image float32[batch,3,32,32] -> probs
// float32[batch,10], with ONNX Runtime's output for a batch of 2.
const (
	tinyCNN      = "../examples/models/tinycnn/1/model.onnx"
	tinyCNNImage = "../examples/samples/tinycnn/image.npy"
	tinyCNNProbs = "../examples/samples/tinycnn/probs.onnxruntime.npy"
)

var (
	clientOnce   sync.Once
	sharedClient *pjrt.Client
	clientErr    error
)

// testClient returns a client of the real XLA CPU plugin, shared by the
// tests. A missing plugin fails the test: run `make pjrt`.
func testClient(t testing.TB) *pjrt.Client {
	t.Helper()
	clientOnce.Do(func() {
		var path string
		path, clientErr = pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: ".."})
		if clientErr != nil {
			clientErr = fmt.Errorf("%w\n\nthe engine tests need the real XLA CPU plugin: run `make pjrt` first", clientErr)
			return
		}
		sharedClient, clientErr = pjrt.Open(path)
	})
	if clientErr != nil {
		t.Fatal(clientErr)
	}
	return sharedClient
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
	if sharedClient != nil {
		if err := sharedClient.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the shared client:", err)
			code = 1
		}
	}
	os.Exit(code)
}
