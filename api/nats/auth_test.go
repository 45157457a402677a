package natsapi

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	admin, err := e.Connect(ctx, ConnOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, _ := jetstream.New(admin)
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
