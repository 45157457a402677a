package natsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// lazyModels are serving's lazy-loading test models: tinycnn with weights
// of their own, and ONNX Runtime's outputs for the example image.
const lazyModels = "../../serving/testdata/lazy"

// onDemandReplica is a replica that loads models on demand: a Manager with
// serving.LoadLazy on a repository of the first n lazy models (the cache
// shared), served on e with Options.OnDemand, re-announcing what it holds
// whenever that changes.
func onDemandReplica(t *testing.T, e *Embedded, n int, cache string, opts Options) (*serving.Manager, *Server) {
	t.Helper()
	dir := t.TempDir()
	for i := range n {
		name := fmt.Sprintf("m%02d", i)
		model, err := os.ReadFile(filepath.Join(lazyModels, name+".onnx"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "1", "model.onnx"), model, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "config.yaml"), []byte("buckets:\n  batch: [2]\npad:\n  batch: true\nwarmup: eager\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	repo, err := modelrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var srv atomic.Pointer[Server]
	m, err := serving.NewManager(context.Background(), serving.Options{
		Client: pjrtClient(t), Repository: repo, Logger: testLogger(t), CompileCacheDir: cache,
		LoadPolicy: serving.LoadLazy,
		OnHeldChange: func() {
			if s := srv.Load(); s != nil {
				s.Sync()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	opts.OnDemand = true
	opts.SyncInterval = -1
	s := startServer(t, e, m, opts)
	srv.Store(s)
	return m, s
}

// inferLazy sends the example image to model and checks the answer
// against ONNX Runtime's for it; it returns the replica that answered.
func inferLazy(t *testing.T, c *Client, model string) *Result {
	t.Helper()
	image, err := tensor.ReadNpyFile(tinyCNNImage)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tensor.ReadNpyFile(filepath.Join(lazyModels, model+".probs.npy"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Infer(ctx, model, []serving.NamedTensor{{Name: "image", Tensor: image}}, InferOptions{})
	if err != nil {
		t.Fatalf("%s: %v", model, err)
	}
	got := res.Outputs[0].Tensor.Float64s()
	for i, w := range want.Float64s() {
		if math.Abs(got[i]-w) > 1e-5 {
			t.Fatalf("%s: element %d is %v, ONNX Runtime says %v", model, i, got[i], w)
		}
	}
	return res
}

// TestOnDemandRouting: two replicas that load models on demand. The first
// request for a model loads it on one replica, which then announces it
// (a warm endpoint in $SRV.INFO); every later request for it, plain or
// durable, whichever replica NATS hands it to, is answered by that one
// (the other forwards it), so the model loads once in the cluster. A
// model nobody holds loads where its request lands.
func TestOnDemandRouting(t *testing.T) {
	e := startNATS(t)
	cache := t.TempDir()
	mgrA, a := onDemandReplica(t, e, 3, cache, Options{Durable: true})
	mgrB, b := onDemandReplica(t, e, 3, cache, Options{Durable: true})
	nc := connect(t, e)
	c, err := NewClient(nc, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	first := inferLazy(t, c, "m00")
	holder, other, otherMgr := a, b, mgrB
	if first.Replica == b.ID() || !mgrA.ModelReady("m00", 0) {
		holder, other, otherMgr = b, a, mgrA
	}
	// The holder announces m00 on its warm endpoint.
	waitFor(t, 30*time.Second, "m00's warm endpoint", func() bool { return warmHolders(t, nc, "m00") == holder.ID() })

	for range 20 {
		if res := inferLazy(t, c, "m00"); res.Replica != holder.ID() {
			t.Fatalf("m00 answered by %s, want %s (the replica holding it)", res.Replica, holder.ID())
		}
	}
	if otherMgr.ModelReady("m00", 0) {
		t.Error("the other replica loaded m00 too")
	}
	fwd := other.Stats()["m00"].Forwarded
	if fwd == 0 {
		t.Error("the other replica forwarded no request for m00 (did NATS give it none of 20?)")
	}
	t.Logf("of 20 requests for m00, %d reached the replica without it and were forwarded", fwd)

	// A durable request too.
	dc, err := NewClient(nc, ClientOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	for range 6 {
		if res := inferLazy(t, dc, "m00"); res.Replica != holder.ID() {
			t.Fatalf("durable request for m00 answered by %s, want %s", res.Replica, holder.ID())
		}
	}

	// m01, held nowhere, loads where it lands; both then answer their own.
	res := inferLazy(t, c, "m01")
	if owner := warmOwner(t, res, a, b); owner == nil {
		t.Fatalf("m01 answered by %s, neither replica", res.Replica)
	}
}

// warmOwner returns the replica whose id answered res.
func warmOwner(t *testing.T, res *Result, rs ...*Server) *Server {
	t.Helper()
	for _, r := range rs {
		if r.ID() == res.Replica {
			return r
		}
	}
	return nil
}

// warmHolders returns the instance id of the replica whose $SRV.INFO lists
// a warm endpoint for model ("" for none, "several" for more than one).
func warmHolders(t *testing.T, nc *nats.Conn, model string) string {
	t.Helper()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.INFO.xserve", inbox, nil); err != nil {
		t.Fatal(err)
	}
	holder := ""
	for {
		m, err := sub.NextMsg(300 * time.Millisecond)
		if err != nil {
			return holder
		}
		var info micro.Info
		if err := json.Unmarshal(m.Data, &info); err != nil {
			t.Fatal(err)
		}
		for _, ep := range info.Endpoints {
			if ep.Subject == "xserve.v1.warm."+model && ep.Metadata["held"] == "true" {
				if holder != "" {
					return "several"
				}
				holder = info.ID
			}
		}
	}
}
