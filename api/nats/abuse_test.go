package natsapi

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// The abuses a holder of a client seed of the embedded server could commit
// before each client user was confined to its own inbox prefix, reply
// subjects were checked on every path and durable message ids were made
// unguessable. Each test fails on the code before that.

// abuseSetup starts an embedded server with a second client user, alice,
// and a durable replica serving echo.
func abuseSetup(t *testing.T) (*Embedded, *Server) {
	t.Helper()
	e, err := StartEmbedded(EmbeddedOptions{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), Logger: testLogger(t), Clients: []string{"alice"}, admin: testAdmin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e, startServer(t, e, echoBackend{}, Options{Durable: true, ReplyPrefix: "_INBOX."})
}

// rogueConn connects with the default client seed as a plain nats.go
// client would (no inbox prefix of its own), reporting the server's
// asynchronous errors on violations.
func rogueConn(t *testing.T, e *Embedded) (*nats.Conn, chan error) {
	t.Helper()
	seed, err := nats.NkeyOptionFromSeed(e.ClientNkeyFile())
	if err != nil {
		t.Fatal(err)
	}
	violations := make(chan error, 64)
	nc, err := nats.Connect(e.ClientURL(), seed, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, violations
}

// wantViolation waits for a permissions violation on violations.
func wantViolation(t *testing.T, violations chan error, what string) {
	t.Helper()
	select {
	case err := <-violations:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Errorf("%s: %v, want a permissions violation", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("%s: no permissions violation", what)
	}
}

var echoInput = []serving.NamedTensor{{Name: "x", Tensor: tensor.FromFloat32s([]float32{7}, 1)}}

// TestInboxRead: a client subscribing to every inbox (_INBOX.>), or to
// another client user's inbox prefix, is refused and receives nothing while
// alice's plain and durable requests are answered; before, it received
// alice's replies and, through the replica's own inbox, every durable
// request's inputs and its $JS.ACK subject.
func TestInboxRead(t *testing.T) {
	e, s := abuseSetup(t)
	rogue, violations := rogueConn(t, e)
	alice := e.Clients()["alice"]
	if alice.NkeyFile == "" || !strings.HasPrefix(alice.InboxPrefix, "_INBOX.U") {
		t.Fatalf("client user alice: %+v", alice)
	}
	stolen := make(chan *nats.Msg, 1000)
	for _, subj := range []string{"_INBOX.>", alice.InboxPrefix + ".>", InboxPrefix(strings.TrimPrefix(e.Clients()["client"].InboxPrefix, "_INBOX.")) + "x.>"} {
		if _, err := rogue.ChanSubscribe(subj, stolen); err != nil {
			t.Fatal(err)
		}
		wantViolation(t, violations, "subscribe "+subj)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	anc, err := Connect(ctx, e.ClientURL(), ConnOptions{NkeyFile: alice.NkeyFile, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	for _, durable := range []bool{false, true} {
		c, err := NewClient(anc, ClientOptions{Durable: durable})
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if _, err := c.Infer(ctx, "echo", echoInput, InferOptions{}); err != nil {
				t.Fatalf("alice (durable %v): %v", durable, err)
			}
		}
		c.Close()
	}
	rogue.Flush()
	if n := len(stolen); n != 0 {
		m := <-stolen
		t.Errorf("the rogue client received %d messages, the first on %s (reply %q): %.100s", n, m.Subject, m.Reply, m.Data)
	}
	if s.DurableHealth() != nil {
		t.Error(s.DurableHealth())
	}
}

// TestReplyForging: requests whose reply subject is a JetStream API call
// (purging or deleting the durable stream, deleting its consumer), one of
// the server's own subjects or the replica's own inbox, on the plain,
// durable, health and discovery ($SRV.PING, $SRV.INFO) subjects, get no
// reply there: nothing is published to those subjects, the durable stream
// and consumer survive, and the server keeps serving. Before, the replica
// published its reply, and the discovery handlers theirs, to whatever
// subject a plain request named, with its permission to call the
// JetStream API (nats-server 2.15 refuses these bodies as API requests,
// for their unknown fields: a shield of luck, not of design).
func TestReplyForging(t *testing.T) {
	e, s := abuseSetup(t)
	rogue, _ := rogueConn(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	targets := []string{
		"$JS.API.STREAM.PURGE." + DefaultStream,
		"$JS.API.STREAM.DELETE." + DefaultStream,
		"$JS.API.CONSUMER.DELETE." + DefaultStream + "." + DefaultConsumer,
		s.nc.Opts.InboxPrefix + ".forged",
		s.Subject("echo"),
	}
	// An operator's connection sees what reaches the targets but the last
	// (the request subject itself, where the client's requests go).
	spy, js := adminJetStream(t, e)
	published := make(chan *nats.Msg, 1000)
	for _, subj := range targets[:len(targets)-1] {
		if _, err := spy.ChanSubscribe(subj, published); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model": "echo", "inputs": {"x": {"dtype": "float32", "shape": [1], "data": [1]}}}`)
	for _, reply := range targets {
		for _, subj := range []string{s.Subject("echo"), healthSubject(DefaultPrefix), "$SRV.PING", "$SRV.INFO.xserve"} {
			if err := rogue.PublishMsg(&nats.Msg{Subject: subj, Reply: reply, Data: body}); err != nil {
				t.Fatal(err)
			}
		}
		// The durable path: the reply subject is a header.
		h := nats.Header{}
		h.Set(HeaderReplyTo, reply)
		h.Set(HeaderRequestID, "forged")
		if err := rogue.PublishMsg(&nats.Msg{Subject: s.DurableSubject("echo"), Header: h, Data: body}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	// Whatever the replica did with them, it has done once it answers
	// requests sent after them.
	nc := connect(t, e)
	for _, durable := range []bool{false, true} {
		c, err := NewClient(nc, ClientOptions{Durable: durable})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Infer(ctx, "echo", echoInput, InferOptions{}); err != nil {
			t.Fatalf("after the forged replies (durable %v): %v", durable, err)
		}
		c.Close()
	}
	spy.Flush()
	if n := len(published); n > 0 {
		m := <-published
		t.Errorf("%d messages were published to the forged reply subjects, the first to %s: %.80s", n, m.Subject, m.Data)
	}
	durable, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatalf("the durable stream after the forged replies: %v", err)
	}
	if _, err := durable.Consumer(ctx, DefaultConsumer); err != nil {
		t.Errorf("the durable consumer after the forged replies: %v", err)
	}
	if s.durable.restores.Load() != 0 {
		t.Errorf("the stream or consumer was re-created %d times", s.durable.restores.Load())
	}
}

// TestIDSquatting: a rogue client publishes a durable request with the
// request id its victim is about to use (an order number, a sequence) as
// Nats-Msg-Id; the victim's request is still answered, with its own
// output. Before, the victim's Nats-Msg-Id was its request id, and
// JetStream dropped its request as a duplicate of the rogue's.
func TestIDSquatting(t *testing.T) {
	e, s := abuseSetup(t)
	rogue := connect(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rjs, err := jetstream.New(rogue)
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(HeaderMsgID, "order-42")
	h.Set(HeaderRequestID, "order-42")
	h.Set(HeaderReplyTo, rogue.NewInbox())
	body := []byte(`{"model": "echo", "inputs": {"x": {"dtype": "float32", "shape": [1], "data": [666]}}}`)
	if _, err := rjs.PublishMsg(ctx, &nats.Msg{Subject: s.DurableSubject("echo"), Header: h, Data: body}); err != nil {
		t.Fatal(err)
	}
	alice := e.Clients()["alice"]
	anc, err := Connect(ctx, e.ClientURL(), ConnOptions{NkeyFile: alice.NkeyFile, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	c, err := NewClient(anc, ClientOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Infer(ctx, "echo", echoInput, InferOptions{ID: "order-42"})
	if err != nil {
		t.Fatalf("the victim's request: %v", err)
	}
	if got := res.Outputs[0].Tensor.Float64At(0); res.ID != "order-42" || got != 7 {
		t.Errorf("the victim got id %q, output %v; want its own request's 7", res.ID, got)
	}
}

// TestRetryAfterLostReply: a durable request is stored and acknowledged but
// its reply never reaches the client (as across a NATS server restart,
// when the reply leaves the replica before the client's inbox is
// subscribed again). The client's retry with the same request id runs it
// again and is answered; before, the retry had the same Nats-Msg-Id and
// JetStream dropped it as a duplicate of the acknowledged request.
func TestRetryAfterLostReply(t *testing.T) {
	e := startNATS(t)
	first := startServer(t, e, echoBackend{}, Options{Durable: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil { // the stream and consumer stay
		t.Fatal(err)
	}
	c, err := NewClient(connect(t, e), ClientOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if _, err := c.Infer(short, "echo", echoInput, InferOptions{ID: "order-7"}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("with no replica: %v, want a timeout", err)
	}
	// The request is taken and acknowledged, its reply lost.
	_, js := adminJetStream(t, e)
	cons, err := js.Consumer(ctx, DefaultStream, DefaultConsumer)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	taken := 0
	for m := range batch.Messages() {
		if id := m.Headers().Get(HeaderRequestID); id != "order-7" {
			t.Fatalf("fetched request %q, want order-7", id)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		taken++
	}
	if taken != 1 {
		t.Fatalf("fetched %d requests, want 1", taken)
	}
	startServer(t, e, echoBackend{}, Options{Durable: true})
	retry, cancelRetry := context.WithTimeout(ctx, 15*time.Second)
	defer cancelRetry()
	res, err := c.Infer(retry, "echo", echoInput, InferOptions{ID: "order-7"})
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if got := res.Outputs[0].Tensor.Float64At(0); res.ID != "order-7" || got != 7 {
		t.Errorf("the retry got id %q, output %v; want order-7, 7", res.ID, got)
	}
}
