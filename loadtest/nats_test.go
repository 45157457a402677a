package loadtest

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xserve/xserve/tensor"
)

// The NATS target's tests run a real NATS server (nats-server in the test
// process, JetStream on) and answer on it, as an xserve replica would, with
// the fake server's decoding and encoding (fakeServer.serve).

func startNATSServer(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return srv
}

// answer runs a NATS request through f and returns the reply as xserve
// sends it: error replies carry Xserve-Error.
func (f *fakeServer) answer(m *nats.Msg) *nats.Msg {
	path := "/v1/infer"
	if m.Header.Get("Xserve-Protocol") == "v2" {
		path = "/v2/models/m/infer"
	}
	r := httptest.NewRequest("POST", path, bytes.NewReader(m.Data))
	for k, v := range m.Header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	f.serve(w, r)
	reply := &nats.Msg{Header: nats.Header{}, Data: w.Body.Bytes()}
	for _, k := range []string{HeaderContentLength, "Content-Encoding"} {
		if v := w.Header().Get(k); v != "" {
			reply.Header.Set(k, v)
		}
	}
	if w.Code != 200 {
		reply.Header.Set("Xserve-Error", strconv.Itoa(w.Code))
	}
	reply.Header.Set("X-Request-Id", m.Header.Get("X-Request-Id"))
	return reply
}

// serveNATS answers plain requests for model "m" on nc.
func (f *fakeServer) serveNATS(t *testing.T, nc *nats.Conn) {
	t.Helper()
	_, err := nc.QueueSubscribe("xserve.v1.infer.m", "xserve", func(m *nats.Msg) {
		go m.RespondMsg(f.answer(m))
	})
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
}

// serveDurable takes durable requests from the work queue, replies to their
// Xserve-Reply-To (twice for every dupEvery-th, as a redelivery racing a
// slow first attempt would) and acknowledges them.
func (f *fakeServer) serveDurable(t *testing.T, nc *nats.Conn, dupEvery int64) {
	t.Helper()
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "XSERVE_REQUESTS", Subjects: []string{"xserve.v1.durable.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "XSERVE_REQUESTS", jetstream.ConsumerConfig{Durable: "xserve", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	cc, err := cons.Consume(func(m jetstream.Msg) {
		req := &nats.Msg{Header: m.Headers(), Data: m.Data()}
		reply := f.answer(req)
		reply.Subject = m.Headers().Get("Xserve-Reply-To")
		nc.PublishMsg(reply)
		if dupEvery > 0 && n.Add(1)%dupEvery == 0 {
			nc.PublishMsg(reply)
		}
		m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
}

func newNATSTarget(t *testing.T, url string, opts NATSOptions) *NATSTarget {
	t.Helper()
	opts.URL = url
	if opts.Model == "" {
		opts.Model = "m"
	}
	tg, err := NewNATSTarget(context.Background(), opts)
	if err != nil {
		t.Fatalf("NewNATSTarget: %v", err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

func natsSamples() Samples {
	x := tensor.FromFloat32s([]float32{1, 2, 3, 4, 5, 6})
	x.Shape = []int64{2, 3}
	return Samples{{"x": x}}
}

func TestNATSTargetProtocols(t *testing.T) {
	ns := startNATSServer(t)
	f := newFakeServer(t, 0)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	f.serveNATS(t, nc)
	for _, tc := range []NATSOptions{
		{Protocol: ProtocolV1JSON},
		{Protocol: ProtocolV2JSON, Compression: "gzip", AcceptEncoding: "zstd"},
		{Protocol: ProtocolV2Binary, Compression: "zstd", AcceptEncoding: "gzip", Conns: 2},
	} {
		t.Run(string(tc.Protocol), func(t *testing.T) {
			tc.ExpectOutputs = map[string][]int64{"probs": {2, 10}}
			tg := newNATSTarget(t, ns.ClientURL(), tc)
			sum, err := Run(context.Background(), Options{Target: tg, Inputs: natsSamples(), Concurrency: 4, MaxRequests: 200})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Successes != 200 || sum.Failures != 0 {
				t.Fatalf("%s: %d successes, failures %v %v; server errors %q", tg, sum.Successes, sum.FailuresByKind, sum.ErrorSamples, f.protocolErrors())
			}
			in, shapes := f.lastInputs()
			if len(in["x"]) != 6 || shapes["x"][0] != 2 || in["x"][5] != 6 {
				t.Errorf("server decoded %v %v", in, shapes)
			}
		})
	}
}

func TestNATSTargetFailures(t *testing.T) {
	ns := startNATSServer(t)
	f := newFakeServer(t, 0)
	f.failEvery = 4
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	f.serveNATS(t, nc)
	tg := newNATSTarget(t, ns.ClientURL(), NATSOptions{})
	sum, err := Run(context.Background(), Options{Target: tg, Inputs: natsSamples(), Concurrency: 1, MaxRequests: 40})
	if err != nil {
		t.Fatal(err)
	}
	if sum.FailuresByKind["nats 503"] != 10 || sum.Successes != 30 {
		t.Errorf("failures %v, %d successes", sum.FailuresByKind, sum.Successes)
	}

	// A model nobody serves: the NATS server says so at once.
	tg = newNATSTarget(t, ns.ClientURL(), NATSOptions{Model: "nosuch"})
	sum, err = Run(context.Background(), Options{Target: tg, Inputs: natsSamples(), Concurrency: 1, MaxRequests: 3})
	if err != nil {
		t.Fatal(err)
	}
	if sum.FailuresByKind["no responders"] != 3 {
		t.Errorf("unserved model: %v", sum.FailuresByKind)
	}

	// Only loopback servers unless allowed.
	if _, err := NewNATSTarget(context.Background(), NATSOptions{URL: "nats://10.1.2.3:4222", Model: "m"}); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("remote URL: %v", err)
	}
	if _, err := NewNATSTarget(context.Background(), NATSOptions{URL: ns.ClientURL(), Model: "m", Compression: "br"}); !errors.Is(err, ErrOptions) {
		t.Errorf("bad compression: %v", err)
	}
}

func TestNATSTargetDurable(t *testing.T) {
	ns := startNATSServer(t)
	f := newFakeServer(t, 0)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	f.serveDurable(t, nc, 5)
	tg := newNATSTarget(t, ns.ClientURL(), NATSOptions{Durable: true, Validate: true})
	sum, err := Run(context.Background(), Options{Target: tg, Inputs: natsSamples(), Concurrency: 8, MaxRequests: 100})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Successes != 100 || sum.Failures != 0 {
		t.Fatalf("%d successes, failures %v %v", sum.Successes, sum.FailuresByKind, sum.ErrorSamples)
	}
	// Every fifth request was answered twice; the target counts the second
	// answers and does not count them as requests.
	waitDeadline := time.Now().Add(5 * time.Second)
	for tg.Duplicates() != 20 && time.Now().Before(waitDeadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if tg.Duplicates() != 20 {
		t.Errorf("%d duplicates, want 20", tg.Duplicates())
	}
}
