package natsapi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// TestEmbeddedAuthorization: the embedded server refuses anonymous clients;
// a client with the client seed gets answers but cannot join the replicas'
// queue group, listen to other subjects, reach the JetStream API or forge
// replies.
func TestEmbeddedAuthorization(t *testing.T) {
	e := startNATS(t)
	s := startServer(t, e, echoBackend{}, Options{Durable: true})
	ctx := context.Background()

	if fi, err := os.Stat(e.ClientNkeyFile()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("client seed %s: %v, mode %v; want 0600", e.ClientNkeyFile(), err, fi.Mode())
	}
	if nc, err := nats.Connect(e.ClientURL()); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("anonymous connect: %v, want an authorization error", err)
	}

	violations := make(chan error, 16)
	seed, err := nats.NkeyOptionFromSeed(e.ClientNkeyFile())
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := nats.Connect(e.ClientURL(), seed, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	stolen := make(chan *nats.Msg, 100)
	for _, subj := range []string{s.Subject("echo"), "xserve.v1.>", ">"} {
		if _, err := rogue.ChanQueueSubscribe(subj, DefaultQueueGroup, stolen); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-violations:
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Errorf("subscribe %s: %v", subj, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("subscribe %s: no permissions violation", subj)
		}
	}

	nc := connect(t, e)
	body := []byte(`{"model": "echo", "inputs": {"x": {"dtype": "float32", "shape": [1], "data": [1]}}}`)
	for range 20 {
		r := request(t, nc, s.Subject("echo"), body)
		if r.Header.Get(HeaderReplica) != s.ID() || r.Header.Get(HeaderError) != "" {
			t.Fatalf("reply %v %q", r.Header, r.Data)
		}
	}
	if len(stolen) != 0 {
		t.Errorf("the rogue client received %d requests", len(stolen))
	}

	// No JetStream API: the durable stream and consumer stay.
	js, err := jetstream.New(rogue)
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := js.DeleteConsumer(tctx, DefaultStream, DefaultConsumer); err == nil {
		t.Error("the client deleted the durable consumer")
	}
	if err := js.DeleteStream(tctx, DefaultStream); err == nil {
		t.Error("the client deleted the durable stream")
	}
	// No forged replies: a client may not publish to inboxes.
	if err := rogue.Publish(nc.NewInbox(), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	rogue.Flush()
	select {
	case err := <-violations:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Errorf("publish to an inbox: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("publish to an inbox: no permissions violation")
	}
	_, ajs := adminJetStream(t, e)
	if _, err := ajs.Consumer(ctx, DefaultStream, DefaultConsumer); err != nil {
		t.Errorf("durable consumer after the client's attempts: %v", err)
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "127.0.0.2": true, "0.0.0.0": false, "": false, "::": false, "10.1.2.3": false, "example.com": false} {
		if isLoopback(host) != want {
			t.Errorf("isLoopback(%q) = %v", host, !want)
		}
	}
}

// TestDurableConsumerRecreated deletes the shared durable consumer, then the
// whole stream, while durable requests flow: the replica re-creates them
// within seconds, health reports the loss meanwhile, and every request sent
// while the consumer was gone is answered.
func TestDurableConsumerRecreated(t *testing.T) {
	e := startNATS(t)
	s := startServer(t, e, echoBackend{}, Options{Durable: true, AckWait: time.Second, DurableHeartbeat: 500 * time.Millisecond})
	nc := connect(t, e)
	c, err := NewClient(nc, ClientOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	_, js := adminJetStream(t, e)
	x := []serving.NamedTensor{{Name: "x", Tensor: tensor.FromFloat32s([]float32{1}, 1)}}
	send := func(n int, tag string) (errs []error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				id := tag + "-" + strconv.Itoa(i)
				res, err := c.Infer(rctx, "echo", x, InferOptions{ID: id})
				if err == nil && res.ID != id {
					err = fmt.Errorf("request %s answered as %s", id, res.ID)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return errs
	}
	if errs := send(10, "before"); len(errs) > 0 {
		t.Fatal(errs)
	}

	// The consumer goes; requests sent meanwhile wait in the stream.
	done := make(chan []error, 1)
	if err := js.DeleteConsumer(ctx, DefaultStream, DefaultConsumer); err != nil {
		t.Fatal(err)
	}
	sawLoss := s.DurableHealth() != nil
	go func() { done <- send(50, "during") }()
	start := time.Now()
	waitFor(t, 10*time.Second, "the consumer to be re-created", func() bool {
		sawLoss = sawLoss || s.DurableHealth() != nil
		_, err := js.Consumer(ctx, DefaultStream, DefaultConsumer)
		return err == nil && s.durable.restores.Load() >= 1
	})
	t.Logf("consumer back after %v (loss seen by health: %v)", time.Since(start).Round(time.Millisecond), sawLoss)
	if errs := <-done; len(errs) > 0 {
		t.Fatalf("%d of 50 requests sent around the deletion failed: %v", len(errs), errs[0])
	}
	if err := s.DurableHealth(); err != nil {
		t.Errorf("health after the restore: %v", err)
	}

	// The whole stream goes (its stored requests with it): both come back
	// and serve.
	if err := js.DeleteStream(ctx, DefaultStream); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the stream to be re-created", func() bool {
		_, err := js.Consumer(ctx, DefaultStream, DefaultConsumer)
		return err == nil && s.durable.restores.Load() >= 2
	})
	if errs := send(10, "after"); len(errs) > 0 {
		t.Fatal(errs)
	}
	var m strings.Builder
	s.WriteMetrics(&m)
	if !strings.Contains(m.String(), "xserve_nats_durable_restores_total 2\n") || !strings.Contains(m.String(), "xserve_nats_durable_lost 0\n") {
		t.Errorf("metrics:\n%s", m.String())
	}
}

// adminJetStream connects to e as the serving user (which may use the
// JetStream API), closed when the test ends.
func adminJetStream(t testing.TB, e *Embedded) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := e.Connect(context.Background(), ConnOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// TestDurableWaitsForTheStream: a durable request published while no
// stream takes it (a stream leader election in a cluster; here, before the
// first replica created the stream) is published again until the stream
// answers, within ClientOptions.StreamWait; without the wait it fails at
// once with ErrNoResponders.
func TestDurableWaitsForTheStream(t *testing.T) {
	e := startNATS(t)
	nc := connect(t, e)
	x := []serving.NamedTensor{{Name: "x", Tensor: tensor.FromFloat32s([]float32{1}, 1)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	impatient, err := NewClient(nc, ClientOptions{Durable: true, StreamWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer impatient.Close()
	if _, err := impatient.Infer(ctx, "echo", x, InferOptions{}); !errors.Is(err, ErrNoResponders) {
		t.Fatalf("durable request without a stream and no wait: %v, want ErrNoResponders", err)
	}

	c, err := NewClient(nc, ClientOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type answer struct {
		res *Result
		err error
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		res, err := c.Infer(ctx, "echo", x, InferOptions{ID: "waits"})
		done <- answer{res, err}
	}()
	time.Sleep(time.Second)
	startServer(t, e, echoBackend{}, Options{Durable: true})
	a := <-done
	if a.err != nil {
		t.Fatalf("durable request sent 1s before the stream existed: %v", a.err)
	}
	if a.res.ID != "waits" || a.res.Delivery != 1 {
		t.Errorf("answered %+v", a.res)
	}
	t.Logf("answered %v after it was sent, the stream created after 1s", time.Since(start).Round(time.Millisecond))
}

// TestDurableRetryAfterALostReply: a durable request the stream took and a
// replica acknowledged, but whose reply never came (the answering
// replica's NATS node cut off from the client's after the ack was
// recorded), is stored again when the client retries it with the same id,
// and answered once.
func TestDurableRetryAfterALostReply(t *testing.T) {
	e := startNATS(t)
	ctx := context.Background()
	// The stream and the consumer, with no replica pulling.
	first := startServer(t, e, echoBackend{}, Options{Durable: true})
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	nc := connect(t, e)
	c, err := NewClient(nc, ClientOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	x := []serving.NamedTensor{{Name: "x", Tensor: tensor.FromFloat32s([]float32{1}, 1)}}
	// The "replica" that takes the request and acknowledges it, its reply
	// lost.
	_, js := adminJetStream(t, e)
	lost := make(chan error, 1)
	go func() {
		cons, err := js.Consumer(ctx, DefaultStream, DefaultConsumer)
		if err != nil {
			lost <- err
			return
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			lost <- err
			return
		}
		for m := range batch.Messages() {
			lost <- m.DoubleAck(ctx)
			return
		}
		lost <- fmt.Errorf("no request fetched: %v", batch.Error())
	}()
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = c.Infer(actx, "echo", x, InferOptions{ID: "lost-reply"})
	cancel()
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("first attempt: %v, want ErrTimeout", err)
	}
	if err := <-lost; err != nil {
		t.Fatalf("taking the request without answering: %v", err)
	}

	startServer(t, e, echoBackend{}, Options{Durable: true})
	actx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := c.Infer(actx, "echo", x, InferOptions{ID: "lost-reply"})
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if res.ID != "lost-reply" || c.Duplicates() != 0 {
		t.Errorf("answered %+v, %d duplicates", res, c.Duplicates())
	}
}
