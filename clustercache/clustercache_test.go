package clustercache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/pjrt/pjrttest"
	"github.com/xserve/xserve/tensor"
)

// jetStreamServer starts an in-process nats-server with JetStream on a
// random loopback port and returns a connection's JetStream API; both stop
// with the test.
func jetStreamServer(t *testing.T) (*server.Server, jetstream.JetStream) {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv, connect(t, srv.ClientURL())
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func openStore(t *testing.T, js jetstream.JetStream, bucket string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{JetStream: js, Bucket: bucket, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func key(c byte, kind string) string { return strings.Repeat(string(c), 64) + "." + kind }

// series returns the value of a series (name with its labels, as
// exposed) in t's metrics, or -1.
func series(t *testing.T, c *Tiered, name string) float64 {
	t.Helper()
	var b bytes.Buffer
	if err := c.WriteMetrics(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

func TestStore(t *testing.T) {
	_, js := jetStreamServer(t)
	s := openStore(t, js, "test_cache")
	k := key('a', "pjrt")
	if data, ok, err := s.Get(k); ok || err != nil || data != nil {
		t.Fatalf("Get on an empty bucket: %v %v %v", data, ok, err)
	}
	payload := bytes.Repeat([]byte("executable "), 50000) // several chunks
	if err := s.Put(k, payload); err != nil {
		t.Fatal(err)
	}
	data, ok, err := s.Get(k)
	if !ok || err != nil || !bytes.Equal(data, payload) {
		t.Fatalf("Get after Put: ok %v err %v, %d bytes, want %d", ok, err, len(data), len(payload))
	}
	if has, err := s.Has(k); !has || err != nil {
		t.Errorf("Has after Put: %v %v", has, err)
	}
	if keys, err := s.Keys(context.Background()); err != nil || len(keys) != 1 || keys[0] != k {
		t.Errorf("Keys: %v %v", keys, err)
	}
	// A second store on the same bucket (another replica) reads it.
	other := openStore(t, connect(t, js.Conn().ConnectedUrl()), "test_cache")
	if data, ok, err := other.Get(k); !ok || err != nil || !bytes.Equal(data, payload) {
		t.Errorf("another replica's Get: ok %v err %v", ok, err)
	}
	if err := s.Delete(k); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := other.Get(k); ok || err != nil {
		t.Errorf("Get after Delete: %v %v", ok, err)
	}
	if err := s.Delete(k); err != nil {
		t.Errorf("Delete of a missing entry: %v", err)
	}
	for _, bad := range []string{"../x.pjrt", "ab.pjrt", strings.Repeat("ab", 32) + ".so", "", strings.Repeat("AB", 32) + ".pjrt"} {
		if err := s.Put(bad, nil); err == nil {
			t.Errorf("Put(%q) accepted", bad)
		}
		if _, _, err := s.Get(bad); err == nil {
			t.Errorf("Get(%q) accepted", bad)
		}
	}
}

func TestStoreOptions(t *testing.T) {
	_, js := jetStreamServer(t)
	for _, o := range []Options{
		{},
		{JetStream: js, Bucket: "no.dots"},
		{JetStream: js, Replicas: 7},
		{JetStream: js, MaxBytes: -1},
		{JetStream: js, TTL: -time.Second},
	} {
		if _, err := Open(context.Background(), o); err == nil || !strings.Contains(err.Error(), "clustercache: Options.") {
			t.Errorf("Open(%+v): %v, want an error naming the field", o, err)
		}
	}
	// R3 on a single server is refused by JetStream, with a clear error.
	if _, err := Open(context.Background(), Options{JetStream: js, Bucket: "r3", Replicas: 3, Timeout: 5 * time.Second}); err == nil || !strings.Contains(err.Error(), "3 replicas") {
		t.Errorf("R3 on one server: %v", err)
	}
}

// TestStoreCorruptEntry: an object whose checksum header does not match
// its payload, and one without a header at all, are deleted and reported
// as corrupt.
func TestStoreCorruptEntry(t *testing.T) {
	_, js := jetStreamServer(t)
	s := openStore(t, js, "test_cache")
	obs, err := js.ObjectStore(context.Background(), "test_cache")
	if err != nil {
		t.Fatal(err)
	}
	sealed := engine.SealEntry([]byte("a compiled executable"))
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	for name, raw := range map[string][]byte{"one byte changed": flipped, "no header": []byte("garbage"), "truncated": sealed[:len(sealed)-3]} {
		t.Run(name, func(t *testing.T) {
			k := key('c', "stablehlo")
			if _, err := obs.PutBytes(context.Background(), k, raw); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := s.Get(k); ok || !errors.Is(err, engine.ErrCorruptEntry) {
				t.Fatalf("Get: ok %v, err %v; want engine.ErrCorruptEntry", ok, err)
			}
			if has, err := s.Has(k); has || err != nil {
				t.Errorf("corrupt entry not deleted: %v %v", has, err)
			}
		})
	}
}

// TestTiered: a Put lands in the local cache at once and in the cluster
// within the publisher's round trip; a second replica with an empty local
// cache reads it from the cluster and keeps it locally; an entry only a
// local cache holds is published on its first hit.
func TestTiered(t *testing.T) {
	_, js := jetStreamServer(t)
	ctx := context.Background()
	localA, err := engine.OpenDirCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := NewTiered(localA, openStore(t, js, "tiered"), TieredOptions{})
	defer a.Close(ctx)
	k := key('d', "pjrt")
	payload := []byte("executable for the cluster")
	if err := a.Put(k, payload); err != nil {
		t.Fatal(err)
	}
	if data, ok, err := localA.Get(k); !ok || err != nil || !bytes.Equal(data, payload) {
		t.Fatalf("local cache after Put: %v %v", ok, err)
	}
	waitPublished(t, a)
	if got := series(t, a, `xserve_cluster_cache_publications_total{result="published"}`); got != 1 {
		t.Errorf("published %v, want 1", got)
	}
	if got := series(t, a, "xserve_cluster_cache_publish_seconds_count"); got != 1 {
		t.Errorf("publish_seconds count %v, want 1", got)
	}

	localB, err := engine.OpenDirCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := NewTiered(localB, openStore(t, connect(t, js.Conn().ConnectedUrl()), "tiered"), TieredOptions{})
	defer b.Close(ctx)
	if data, ok, err := b.Get(k); !ok || err != nil || !bytes.Equal(data, payload) {
		t.Fatalf("fresh replica's Get: ok %v err %v", ok, err)
	}
	if data, ok, err := localB.Get(k); !ok || err != nil || !bytes.Equal(data, payload) {
		t.Errorf("a cluster hit is not kept in the local cache: %v %v", ok, err)
	}
	if _, ok, err := b.Get(key('e', "pjrt")); ok || err != nil {
		t.Errorf("Get of an entry nobody has: %v %v", ok, err)
	}
	if hit, miss := series(t, b, `xserve_cluster_cache_lookups_total{result="hit"}`), series(t, b, `xserve_cluster_cache_lookups_total{result="miss"}`); hit != 1 || miss != 1 {
		t.Errorf("lookups: hit %v miss %v, want 1 and 1", hit, miss)
	}
	// b's hit came from the cluster: it offers nothing back. An entry only
	// b's local cache holds (a baked cache) is published on its first hit.
	onlyLocal := key('f', "stablehlo")
	if err := localB.Put(onlyLocal, []byte("lowered program")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.Get(onlyLocal); !ok {
		t.Fatal("local hit missed")
	}
	waitPublished(t, b)
	if has, err := a.Store().Has(onlyLocal); !has || err != nil {
		t.Errorf("a local hit was not published: %v %v", has, err)
	}
	if got := series(t, b, `xserve_cluster_cache_publications_total{result="published"}`); got != 1 {
		t.Errorf("b published %v, want 1 (its local entry; not the one it read from the cluster)", got)
	}
	// a's next hit on its own entry offers it again: the cluster has it.
	if _, ok, _ := a.Get(k); !ok {
		t.Fatal("local hit missed")
	}
	waitPublished(t, a)
	if got := series(t, a, `xserve_cluster_cache_publications_total{result="present"}`); got != 1 {
		t.Errorf("present %v, want 1", got)
	}
	// Delete removes the entry from both tiers.
	if err := b.Delete(onlyLocal); err != nil {
		t.Fatal(err)
	}
	if has, _ := a.Store().Has(onlyLocal); has {
		t.Error("Delete left the cluster's entry")
	}
}

func waitPublished(t *testing.T, c *Tiered) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTieredOffline: with the NATS server gone, lookups answer from the
// local cache at once (a miss otherwise), Puts still land locally, and the
// entries queued meanwhile are published once the server is back.
func TestTieredOffline(t *testing.T) {
	store := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: store, NoSigs: true, NoLog: true}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	port := srv.Addr().(*net.TCPAddr).Port
	js := connect(t, srv.ClientURL())
	local, err := engine.OpenDirCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := NewTiered(local, openStore(t, js, "offline"), TieredOptions{Attempts: 30})
	defer c.Close(context.Background())
	srv.Shutdown()
	srv.WaitForShutdown()
	waitFor(t, func() bool { return !c.Store().Connected() })

	start := time.Now()
	if _, ok, err := c.Get(key('0', "pjrt")); ok || err != nil {
		t.Errorf("Get while offline: %v %v", ok, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Get while offline waited %v for the cluster", d)
	}
	if got := series(t, c, `xserve_cluster_cache_lookups_total{result="offline"}`); got != 1 {
		t.Errorf("offline lookups %v, want 1", got)
	}
	k := key('1', "pjrt")
	if err := c.Put(k, []byte("compiled while offline")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := local.Get(k); !ok {
		t.Error("Put while offline did not reach the local cache")
	}
	opts2 := *opts
	opts2.Port = port
	srv2, err := server.NewServer(&opts2)
	if err != nil {
		t.Fatal(err)
	}
	srv2.Start()
	defer func() { srv2.Shutdown(); srv2.WaitForShutdown() }()
	waitPublished(t, c)
	if has, err := c.Store().Has(k); !has || err != nil {
		t.Errorf("entry queued while offline not published after the server came back: %v %v", has, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// plugin is the real XLA CPU plugin's client the tests share.
var plugin = pjrttest.Shared{RepoRoot: ".."}

// testClient returns the shared client of the real XLA CPU plugin. A
// missing plugin fails the test: run `make pjrt`.
func testClient(t *testing.T) *pjrt.Client {
	t.Helper()
	return plugin.Client(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	plugin.Close()
	os.Exit(code)
}

// replica is one replica's engine on a Tiered cache with an empty local
// directory of its own.
func replica(t *testing.T, js jetstream.JetStream) (*engine.Engine, *Tiered) {
	t.Helper()
	local, err := engine.OpenDirCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := NewTiered(local, openStore(t, js, "engines"), TieredOptions{})
	t.Cleanup(func() { c.Close(context.Background()) })
	e, err := engine.New(engine.Options{Client: testClient(t), Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	return e, c
}

// build loads tinycnn on e, builds it for batch 2 and checks its output
// against ONNX Runtime's.
func build(t *testing.T, e *engine.Engine) engine.Build {
	t.Helper()
	m, err := e.Load("../examples/models/tinycnn/1/model.onnx", engine.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, b, err := m.Build(context.Background(), map[string]int64{"batch": 2})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	image, err := tensor.ReadNpyFile("../examples/samples/tinycnn/image.npy")
	if err != nil {
		t.Fatal(err)
	}
	want, err := tensor.ReadNpyFile("../examples/samples/tinycnn/probs.onnxruntime.npy")
	if err != nil {
		t.Fatal(err)
	}
	outs, err := x.Run(context.Background(), []*tensor.Tensor{image})
	if err != nil {
		t.Fatal(err)
	}
	got := outs[0].Float64s()
	for i, w := range want.Float64s() {
		if math.Abs(got[i]-w) > 1e-5 {
			t.Fatalf("output %d is %v, ONNX Runtime says %v", i, got[i], w)
		}
	}
	return b
}

func results(b engine.Build) string {
	var parts []string
	for _, r := range b.Cache {
		parts = append(parts, r.Kind+" "+r.Result)
	}
	return strings.Join(parts, ", ")
}

// TestEnginesShareTheCluster: three replicas (engines with empty local
// caches) on one bucket, building the real tinycnn on the real XLA CPU
// plugin: the first lowers and compiles and publishes both entries; the
// second lowers and compiles nothing; after the executable in the bucket
// is damaged, the third finds it corrupt, compiles it again and publishes
// a good one, which a fourth loads. Each answers as ONNX Runtime does.
func TestEnginesShareTheCluster(t *testing.T) {
	_, js := jetStreamServer(t)
	e1, c1 := replica(t, js)
	if b := build(t, e1); !b.Lowered || !b.Compiled {
		t.Fatalf("first replica: %+v, want lowered and compiled", b)
	}
	waitPublished(t, c1)
	keys, err := c1.Store().Keys(context.Background())
	if err != nil || len(keys) != 2 {
		t.Fatalf("bucket holds %v (%v), want a .stablehlo and a .pjrt entry", keys, err)
	}

	e2, _ := replica(t, js)
	if b := build(t, e2); b.Lowered || b.Compiled || results(b) != "stablehlo hit, executable hit" {
		t.Errorf("second replica: lowered %v compiled %v, cache %s; want both from the cluster", b.Lowered, b.Compiled, results(b))
	}
	if c := e2.Counts(); c.Compiles != 0 || c.Lowerings != 0 {
		t.Errorf("second replica counts %+v, want none", c)
	}

	obs, err := js.ObjectStore(context.Background(), "engines")
	if err != nil {
		t.Fatal(err)
	}
	exe := keys[0]
	if !strings.HasSuffix(exe, ".pjrt") {
		exe = keys[1]
	}
	good, err := obs.GetBytes(context.Background(), exe)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0xff
	if _, err := obs.PutBytes(context.Background(), exe, bad); err != nil {
		t.Fatal(err)
	}
	e3, c3 := replica(t, js)
	if b := build(t, e3); !b.Compiled || b.Lowered || !strings.Contains(results(b), "executable corrupt") {
		t.Errorf("replica after the damage: lowered %v compiled %v, cache %s; want the executable found corrupt and compiled", b.Lowered, b.Compiled, results(b))
	}
	if got := series(t, c3, `xserve_cluster_cache_lookups_total{result="corrupt"}`); got != 1 {
		t.Errorf("corrupt lookups %v, want 1", got)
	}
	waitPublished(t, c3)
	e4, _ := replica(t, js)
	if b := build(t, e4); b.Compiled || b.Lowered {
		t.Errorf("replica after the rebuild: lowered %v compiled %v (cache %s); want the republished entries", b.Lowered, b.Compiled, results(b))
	}
}
