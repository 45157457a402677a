package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"

	"github.com/xserve/xserve/serving"
)

// TestServiceDiscovery checks the nats.go/micro answers on $SRV.PING, INFO
// and STATS: the service, an endpoint per model with its versions and
// buckets, and the request counts.
func TestServiceDiscovery(t *testing.T) {
	e := startNATS(t)
	mgr := startManager(t)
	s := startServer(t, e, mgr, Options{Version: "1.2.3"})
	nc := connect(t, e)
	smp := loadSample(t)
	img, _ := smp.batch(1, 0)
	const n = 5
	for range n {
		v1Outputs(t, request(t, nc, s.Subject("tinycnn"), v1Body(img, false)))
	}
	errorOf(t, request(t, nc, s.Subject("tinycnn"), []byte("{")))

	var ping micro.Ping
	ask(t, nc, "$SRV.PING.xserve", &ping)
	if ping.Name != "xserve" || ping.ID != s.ID() || ping.Version != "1.2.3" || ping.Type != micro.PingResponseType {
		t.Errorf("ping %+v", ping)
	}

	var info micro.Info
	ask(t, nc, "$SRV.INFO.xserve."+s.ID(), &info)
	if info.Metadata["queue_group"] != "xserve" || info.Metadata["durable"] != "false" {
		t.Errorf("service metadata %v", info.Metadata)
	}
	eps := map[string]micro.EndpointInfo{}
	for _, ep := range info.Endpoints {
		eps[ep.Name] = ep
	}
	tiny, ok := eps["tinycnn"]
	if !ok {
		t.Fatalf("no tinycnn endpoint: %+v", info.Endpoints)
	}
	if tiny.Subject != "xserve.v1.infer.tinycnn" || tiny.QueueGroup != "xserve" {
		t.Errorf("endpoint %+v", tiny)
	}
	for k, want := range map[string]string{
		"model": "tinycnn", "versions": "1", "buckets": "batch=1,2,4", "platform": "onnx",
		"inputs": "image:float32[batch,3,32,32]", "outputs": "probs:float32[batch,10]",
	} {
		if tiny.Metadata[k] != want {
			t.Errorf("endpoint metadata %s = %q, want %q (all: %v)", k, tiny.Metadata[k], want, tiny.Metadata)
		}
	}
	if any := eps["infer"]; any.Subject != "xserve.v1.infer" || any.Metadata["models"] != "tinycnn" {
		t.Errorf("any-model endpoint %+v", any)
	}

	// micro counts a request once its handler returned, which may be just
	// after the worker answered it: ask until the counts are in.
	var last string
	waitFor(t, 5*time.Second, "the stats", func() bool {
		var stats micro.Stats
		ask(t, nc, "$SRV.STATS.xserve."+s.ID(), &stats)
		for _, ep := range stats.Endpoints {
			if ep.Name != "tinycnn" {
				continue
			}
			var d EndpointData
			if err := json.Unmarshal(ep.Data, &d); err != nil {
				t.Fatal(err)
			}
			last = fmt.Sprintf("micro %d requests, data %+v", ep.NumRequests, d)
			return ep.NumRequests == n+1 && d.Requests == n+1 && d.Errors == 1 && d.Replica == s.ID() && d.Model == "tinycnn" && d.AverageLatency > 0
		}
		last = fmt.Sprintf("no tinycnn endpoint in %+v", stats)
		return false
	})
	t.Logf("stats: %s", last)

	// The same counts, for /metrics.
	var prom strings.Builder
	if err := s.WriteMetrics(&prom); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# TYPE xserve_nats_requests_total counter\n",
		fmt.Sprintf("xserve_nats_requests_total{model=\"tinycnn\"} %d\n", n+1),
		"xserve_nats_errors_total{model=\"tinycnn\"} 1\n",
		"xserve_nats_overloaded_total{model=\"tinycnn\"} 0\n",
		"xserve_nats_requests_in_flight{model=\"tinycnn\"} 0\n",
		"xserve_nats_queued 0\n",
	} {
		if !strings.Contains(prom.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, prom.String())
		}
	}
	if m := regexp.MustCompile(`xserve_nats_request_seconds_total\{model="tinycnn"\} (\S+)\n`).FindStringSubmatch(prom.String()); m == nil || m[1] == "0" {
		t.Errorf("no time counted in xserve_nats_request_seconds_total:\n%s", prom.String())
	}
}

// ask sends a micro control request and decodes its one answer.
func ask(t testing.TB, nc *nats.Conn, subject string, v any) {
	t.Helper()
	r, err := nc.Request(subject, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if err := json.Unmarshal(r.Data, v); err != nil {
		t.Fatalf("%s: %v: %s", subject, err, r.Data)
	}
}

// TestOverloadReplies429 fills the worker pool and its queue: further
// requests are answered 429 at once, with Retry-After, and the accepted
// ones are answered once the backend proceeds.
func TestOverloadReplies429(t *testing.T) {
	e := startNATS(t)
	mgr := startManager(t)
	g := newGated(mgr)
	s := startServer(t, e, g, Options{Workers: 1, QueueSize: 1})
	nc := connect(t, e)
	smp := loadSample(t)
	img, want := smp.batch(1, 0)
	body := v1Body(img, false)

	var wg sync.WaitGroup
	replies := make([]*nats.Msg, 2)
	for i := range replies {
		wg.Go(func() { replies[i] = request(t, nc, s.Subject("tinycnn"), body) })
		if i == 0 {
			<-g.started // the worker holds the first
		}
	}
	waitFor(t, 10*time.Second, "a queued request", func() bool { return s.Stats()["tinycnn"].Queued == 1 })
	for range 3 {
		r := request(t, nc, s.Subject("tinycnn"), body)
		code, msg := errorOf(t, r)
		if code != 429 || r.Header.Get(HeaderRetryAfter) != "1" {
			t.Fatalf("full queue: %d %q, Retry-After %q", code, msg, r.Header.Get(HeaderRetryAfter))
		}
	}
	close(g.gate)
	wg.Wait()
	for _, r := range replies {
		got, shape := v1Outputs(t, r)
		checkProbs(t, got, shape, want)
	}
	if st := s.Stats()["tinycnn"]; st.Overloaded != 3 {
		t.Errorf("stats %+v, want 3 overloaded", st)
	}
}

// TestShutdownDrains shuts a replica down while requests run and wait: every
// request it accepted is answered, and then nothing is subscribed.
func TestShutdownDrains(t *testing.T) {
	e := startNATS(t)
	mgr := startManager(t)
	g := newGated(mgr)
	s := startServer(t, e, g, Options{Workers: 2, QueueSize: 16})
	nc := connect(t, e)
	smp := loadSample(t)
	img, want := smp.batch(1, 0)
	body := v1Body(img, false)

	const n = 6
	var wg sync.WaitGroup
	replies := make([]*nats.Msg, n)
	for i := range n {
		wg.Go(func() { replies[i] = request(t, nc, s.Subject("tinycnn"), body) })
	}
	<-g.started
	<-g.started
	waitFor(t, 10*time.Second, "queued requests", func() bool { return s.Stats()["tinycnn"].Queued == n-2 })
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) before the accepted requests were answered", err)
	case <-time.After(100 * time.Millisecond):
	}
	// The replica no longer takes requests.
	waitFor(t, 10*time.Second, "the subscription to drain", func() bool {
		_, err := nc.Request(s.Subject("tinycnn"), body, time.Second)
		return errors.Is(err, nats.ErrNoResponders)
	})
	close(g.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, r := range replies {
		got, shape := v1Outputs(t, r)
		checkProbs(t, got, shape, want)
	}
	if _, err := nc.Request("$SRV.PING.xserve", nil, 200*time.Millisecond); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("service still answers PING after Shutdown: %v", err)
	}
	if !s.nc.IsClosed() {
		t.Error("connection not closed")
	}
}

// TestSyncFollowsModels unloads and reloads the model: its endpoint goes and
// comes back.
func TestSyncFollowsModels(t *testing.T) {
	e := startNATS(t)
	mgr := startManager(t)
	s := startServer(t, e, mgr, Options{SyncInterval: -1})
	nc := connect(t, e)
	smp := loadSample(t)
	img, want := smp.batch(1, 0)
	id := s.ID()
	ctx := context.Background()
	if err := mgr.Unload(ctx, "tinycnn"); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Request(s.Subject("tinycnn"), v1Body(img, false), time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("unloaded model's subject: %v, want no responders", err)
	}
	if s.ID() == id {
		t.Error("service instance not replaced")
	}
	if err := mgr.Load(ctx, "tinycnn"); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	got, shape := v1Outputs(t, request(t, nc, s.Subject("tinycnn"), v1Body(img, false)))
	checkProbs(t, got, shape, want)
}

// TestHealthFollowsEndpoints: Health holds while every READY model has
// its endpoint on the server; a model that turns READY makes it fail,
// naming the model, until the Sync it asks for (there is no other here:
// SyncInterval -1) has subscribed the endpoint.
func TestHealthFollowsEndpoints(t *testing.T) {
	e := startNATS(t)
	mgr := startManager(t)
	s := startServer(t, e, mgr, Options{SyncInterval: -1})
	nc := connect(t, e)
	ctx := context.Background()
	if err := s.Health(); err != nil {
		t.Fatalf("Health after New: %v", err)
	}
	if err := mgr.Unload(ctx, "tinycnn"); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health with the model unloaded: %v", err)
	}
	if err := mgr.Load(ctx, "tinycnn"); err != nil {
		t.Fatal(err)
	}
	if err := s.Health(); err == nil || !strings.Contains(err.Error(), `"tinycnn"`) {
		t.Fatalf("Health with tinycnn READY and no endpoint: %v, want an error naming it", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.Health() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Health still fails 30 s after tinycnn turned READY: %v", s.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
	smp := loadSample(t)
	img, want := smp.batch(1, 0)
	got, shape := v1Outputs(t, request(t, nc, s.Subject("tinycnn"), v1Body(img, false)))
	checkProbs(t, got, shape, want)
}

// TestDurable sends durable requests through the JetStream stream, and makes
// a consumer take one and die without acknowledging it: JetStream delivers
// it again, to the replica, and the client gets one answer per request.
func TestDurable(t *testing.T) {
	e := startNATS(t)
	mgr := startManager(t)
	s := startServer(t, e, mgr, Options{Durable: true, AckWait: time.Second})
	nc := connect(t, e)
	smp := loadSample(t)
	for _, n := range []int{1, 2, 4} { // compile the buckets first
		img, _ := smp.batch(n, 0)
		v1Outputs(t, request(t, nc, s.Subject("tinycnn"), v1Body(img, false)))
	}
	c, err := NewClient(nc, ClientOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			img, want := smp.batch(1+i%3, i)
			res, err := c.Infer(ctx, "tinycnn", []serving.NamedTensor{{Name: "image", Tensor: img}}, InferOptions{ID: "d-" + strconv.Itoa(i)})
			if err != nil {
				t.Error(err)
				return
			}
			if res.ID != "d-"+strconv.Itoa(i) || res.Delivery != 1 || res.Replica != s.ID() {
				t.Errorf("result %+v", res)
			}
			checkProbs(t, res.Outputs[0].Tensor.Float64s(), res.Outputs[0].Tensor.Shape, want)
		})
	}
	wg.Wait()

	// A bad durable request gets its error reply too, and is acknowledged.
	var re *ReplyError
	_, err = c.Call(ctx, "tinycnn", &nats.Msg{Data: []byte("{")})
	if !errors.As(err, &re) || re.Code != 400 {
		t.Errorf("bad durable request: %v", err)
	}

	// A durable request whose reply would go to the server's own subjects
	// (or the system's) is dropped, not answered. (The client user may
	// only publish requests; the test plays replicas and inspects the
	// stream as the serving user.)
	admin, js := adminJetStream(t, e)
	jsClient, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	img0, _ := smp.batch(1, 0)
	for _, to := range []string{"xserve.v1.durable.tinycnn", "$JS.API.INFO", "_INBOX.*"} {
		m := &nats.Msg{Subject: "xserve.v1.durable.tinycnn", Data: v1Body(img0, false), Header: nats.Header{}}
		m.Header.Set(HeaderReplyTo, to)
		if _, err := jsClient.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	// (3 plain warmup requests, 20 durable, 1 bad durable answered.)
	waitFor(t, 5*time.Second, "the stream to drop them", func() bool {
		st, err := js.Stream(ctx, DefaultStream)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})

	// A "replica" that takes a request and dies before acknowledging it:
	// stop the real one's consumer from racing it by pulling first.
	s.durable.it.Stop() // the replica stops pulling for a moment
	<-s.durable.done
	img, want := smp.batch(2, 3)
	type answer struct {
		res *Result
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := c.Infer(ctx, "tinycnn", []serving.NamedTensor{{Name: "image", Tensor: img}}, InferOptions{ID: "crash-1"})
		got <- answer{res, err}
	}()
	cons, err := js.Consumer(ctx, DefaultStream, DefaultConsumer)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var taken jetstream.Msg
	for m := range batch.Messages() {
		taken = m // and never acknowledged
	}
	if taken == nil || taken.Headers().Get(HeaderRequestID) != "crash-1" || taken.Headers().Get(HeaderReplyTo) == "" {
		t.Fatalf("took %v", taken)
	}
	s.durable.done = make(chan struct{})
	if err := s.startDurable(); err != nil { // the replica pulls again
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.res.Delivery != 2 || a.res.ID != "crash-1" {
		t.Errorf("redelivered request answered %+v", a.res)
	}
	checkProbs(t, a.res.Outputs[0].Tensor.Float64s(), a.res.Outputs[0].Tensor.Shape, want)
	if st := s.Stats()["tinycnn"]; st.Durable != 22 || st.Redelivered != 1 || st.Requests != 3+22 {
		t.Errorf("stats %+v", st)
	}

	// The work queue is empty: every request was acknowledged.
	stream, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "an empty stream", func() bool {
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	if c.Duplicates() != 0 {
		t.Errorf("%d duplicate replies", c.Duplicates())
	}

	// A second reply to an answered request (a redelivery that raced a slow
	// first attempt) is dropped and counted; so is one nobody waits for.
	for _, id := range []string{"crash-1", "d-3", "never-sent"} {
		m := &nats.Msg{Subject: c.inbox, Header: nats.Header{}, Data: []byte("{}")}
		m.Header.Set(HeaderRequestID, id)
		if err := admin.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	admin.Flush()
	waitFor(t, 5*time.Second, "the extra replies", func() bool { return c.Duplicates() == 2 && c.Late() == 1 })
}

// startAuthServer runs a nats-server on a random loopback port with o's
// authorization settings until the test ends.
func startAuthServer(t *testing.T, o *server.Options) *server.Server {
	t.Helper()
	o.Host, o.Port, o.NoSigs, o.NoLog = "127.0.0.1", server.RANDOM_PORT, true, true
	srv, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return srv
}

// TestConnectAuth connects with a token to a server that requires one, and
// fails at once without it.
func TestConnectAuth(t *testing.T) {
	srv := startAuthServer(t, &server.Options{Authorization: "s3cret"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := Connect(ctx, srv.ClientURL(), ConnOptions{Token: "s3cret", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	start := time.Now()
	if _, err := Connect(ctx, srv.ClientURL(), ConnOptions{Token: "wrong", Logger: testLogger(t)}); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("wrong token: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("an authorization failure was retried")
	}
}

// TestConnectNkey connects with an NKey seed file to a server that knows
// the user's public key, and fails at once with another user's seed.
func TestConnectNkey(t *testing.T) {
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "user.nk"), filepath.Join(dir, "other.nk")
	os.WriteFile(good, seed, 0o600)
	os.WriteFile(bad, otherSeed, 0o600)
	srv := startAuthServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := Connect(ctx, srv.ClientURL(), ConnOptions{NkeyFile: good, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if _, err := Connect(ctx, srv.ClientURL(), ConnOptions{NkeyFile: bad, Logger: testLogger(t)}); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("another user's seed: %v", err)
	}
	if _, err := Connect(ctx, srv.ClientURL(), ConnOptions{NkeyFile: good, Token: "x"}); err == nil {
		t.Error("an NKey and a token together were accepted")
	}
}

// TestDeadInboxAndSlowClient sends requests whose replies go to an inbox
// nobody reads and to a client that stopped reading: the replica answers
// them all and keeps answering others at once.
func TestDeadInboxAndSlowClient(t *testing.T) {
	e := startNATS(t)
	mgr := startManager(t)
	s := startServer(t, e, mgr, Options{})
	good := connect(t, e)
	smp := loadSample(t)
	img, want := smp.batch(1, 0)
	body := v1Body(img, false)
	v1Outputs(t, request(t, good, s.Subject("tinycnn"), body)) // compile

	seed, err := nats.NkeyOptionFromSeed(e.ClientNkeyFile())
	if err != nil {
		t.Fatal(err)
	}
	slow, err := nats.Connect(e.ClientURL(), seed, nats.CustomInboxPrefix(e.Clients()["client"].InboxPrefix), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	block := make(chan struct{})
	defer close(block)
	inbox := slow.NewInbox()
	sub, err := slow.Subscribe(inbox, func(*nats.Msg) { <-block })
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(5, 1<<20)
	const n = 200
	for i := range n {
		to := inbox
		if i%2 == 0 {
			to = "_INBOX.nobody.listens"
		}
		if err := slow.PublishRequest(s.Subject("tinycnn"), to, body); err != nil {
			t.Fatal(err)
		}
	}
	slow.Flush()
	for range 5 {
		start := time.Now()
		got, shape := v1Outputs(t, request(t, good, s.Subject("tinycnn"), body))
		checkProbs(t, got, shape, want)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("a good request took %v beside the dead and slow clients", d)
		}
	}
	waitFor(t, 30*time.Second, "all requests answered", func() bool { return s.Stats()["tinycnn"].Requests == 1+n+5 })
	if d, _ := sub.Dropped(); d == 0 {
		t.Log("the slow client dropped no reply (it had room for them)")
	}
}
