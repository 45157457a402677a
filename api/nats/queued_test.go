package natsapi

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/xserve/xserve/api/payload"
)

// slowLink forwards TCP connections to upstream. What upstream sends waits
// while the link is paused, and then goes on at about 50 MB/s: a client
// that reads its server more slowly than the server receives.
type slowLink struct {
	addr  string
	pause sync.RWMutex // held (write) while paused
}

func startSlowLink(t *testing.T, upstream string) *slowLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	l := &slowLink{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go l.forward(c, upstream)
		}
	}()
	return l
}

func (l *slowLink) forward(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	go func() {
		io.Copy(u, c)
		u.Close()
	}()
	buf := make([]byte, 256<<10)
	for {
		n, err := u.Read(buf)
		l.pause.RLock()
		l.pause.RUnlock()
		if _, werr := c.Write(buf[:n]); werr != nil || err != nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestQueuedBytesCountAgainstBudget: requests that the embedded NATS
// server holds for xserve's connection, not yet read, count against the
// memory budget when a request arrives: a small request with 42 MiB queued
// behind it is refused (429) by a server whose budget is 16 MiB, although
// nothing else is in flight; every request is answered, and once the queue
// is drained the budget holds nothing. (Counting only the requests handed
// to the workers, the small request was answered 200 and the queue held
// outside the budget.)
func TestQueuedBytesCountAgainstBudget(t *testing.T) {
	e := startNATS(t)
	link := startSlowLink(t, e.Addr().String())
	snc, err := Connect(context.Background(), "nats://"+link.addr, ConnOptions{nkey: e.serving.kp, InboxPrefix: InboxPrefix(e.serving.pub), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(snc.Close)
	budget, err := payload.NewBudget(16 << 20)
	if err != nil {
		t.Fatal(err)
	}
	queued := e.Queued(snc)
	s, err := New(context.Background(), startManager(t), Options{Conn: snc, Budget: budget, Queued: queued, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.Shutdown(ctx)
	})
	nc := connect(t, e)
	inbox := nc.NewInbox()
	replies, err := nc.SubscribeSync(inbox + ".*")
	if err != nil {
		t.Fatal(err)
	}
	img, _ := loadSample(t).batch(1, 0)
	const bulk = 7
	link.pause.Lock()
	msgs := []*nats.Msg{{Subject: s.Subject("tinycnn"), Reply: inbox + ".probe", Data: v1Body(img, false)}}
	for i := range bulk {
		msgs = append(msgs, &nats.Msg{Subject: s.Subject("tinycnn"), Reply: fmt.Sprintf("%s.bulk%d", inbox, i), Data: []byte(strings.Repeat(" ", 6<<20))})
	}
	for _, m := range msgs {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "24 MiB queued for xserve's connection", func() bool { return queued() >= 24<<20 })
	link.pause.Unlock()

	got := map[string]string{}
	for range msgs {
		r, err := replies.NextMsg(time.Minute)
		if err != nil {
			t.Fatalf("after %d replies %v: %v", len(got), got, err)
		}
		name := r.Subject[len(inbox)+1:]
		if code := r.Header.Get(HeaderError); code != "" {
			_, msg := errorOf(t, r)
			got[name] = code + " " + msg
		} else {
			got[name] = "200"
		}
	}
	if p := got["probe"]; !strings.HasPrefix(p, "429 ") || !strings.Contains(p, "budget") {
		t.Errorf("the small request with 42 MiB queued behind it: %q, want 429 naming the memory budget", p)
	}
	for i := range bulk {
		if r := got[fmt.Sprintf("bulk%d", i)]; !strings.HasPrefix(r, "429 ") && !strings.HasPrefix(r, "400 ") {
			t.Errorf("6 MiB of spaces: %q, want 429 or 400", r)
		}
	}
	t.Logf("replies: %v", got)
	waitFor(t, 30*time.Second, "the budget to hold nothing", func() bool { return budget.Used() == 0 })
}
