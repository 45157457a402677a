package natsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xserve/xserve/api/textgen"
	"github.com/xserve/xserve/serving"
)

// genModel is make gen-models' small Llama (torch.export) with its
// tokenizer, and genRefs transformers' greedy generations of it.
var (
	genModel = filepath.Join("..", "..", ".cache", "gen", "repo", "llama-pt2")
	genRefs  = filepath.Join("..", "..", ".cache", "gen", "refs.json")
)

// startGenManager serves genModel as "llama" from a temporary repository.
func startGenManager(t *testing.T) *serving.Manager {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "llama")
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir(filepath.Join(genModel, "1"))
	if err != nil {
		t.Fatalf("%v\n\nthe generative test models are missing: run `make gen-models` (make test does)", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(genModel, "1", f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "1", f.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := os.ReadFile(filepath.Join(genModel, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return repoManager(t, filepath.Dir(dir))
}

// cutLink forwards one TCP connection to upstream until what the client
// sends holds a second message published to a subject starting with
// prefix: it forwards what
// comes before that message and then cuts the connection, and takes no
// other. A replica behind it is lost to the NATS server after its first
// message there, as if killed.
type cutLink struct {
	addr string
	cut  chan struct{} // closed once cut
}

func startCutLink(t *testing.T, upstream, prefix string) *cutLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &cutLink{addr: ln.Addr().String(), cut: make(chan struct{})}
	go func() {
		defer ln.Close()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		u, err := net.Dial("tcp", upstream)
		if err != nil {
			return
		}
		defer u.Close()
		go io.Copy(c, u)
		l.forward(u, c, []byte("HPUB "+prefix))
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

// forward copies c to u until the second occurrence of pub.
func (l *cutLink) forward(u io.Writer, c io.Reader, pub []byte) {
	defer close(l.cut)
	var seen []byte // what was forwarded, to find pub across reads
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		chunk := buf[:n]
		start := len(seen)
		seen = append(seen, chunk...)
		if first := bytes.Index(seen, pub); first >= 0 {
			if second := bytes.Index(seen[first+1:], pub); second >= 0 {
				end := first + 1 + second
				if end > start {
					u.Write(seen[start:end])
				}
				return
			}
		}
		if _, werr := u.Write(chunk); werr != nil || err != nil {
			return
		}
	}
}

// TestDurableGenerateReplicaLost: a durable generation whose replica is
// lost after its first message (its connection cut, as a kill -9 does) is
// delivered again to another replica, which generates it again; the
// client drops the messages it already has, and its text equals
// transformers' greedy generation of the prompt (a durable generation is
// greedy without a temperature given).
func TestDurableGenerateReplicaLost(t *testing.T) {
	data, err := os.ReadFile(genRefs)
	if err != nil {
		t.Fatalf("%v\n\nthe generative test models are missing: run `make gen-models` (make test does)", err)
	}
	var refs struct {
		Chat struct {
			Prompt string `json:"completion_prompt"`
			Want   string `json:"completion_greedy_12"`
		} `json:"chat"`
	}
	if err := json.Unmarshal(data, &refs); err != nil {
		t.Fatal(err)
	}
	e := startNATS(t)
	m := startGenManager(t)
	nc := connect(t, e)
	c, err := NewClient(nc, ClientOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	inbox := nc.NewInbox()
	// The client's reply inbox is what Generate subscribes; cut replica a
	// at its second message to any inbox of this connection.
	link := startCutLink(t, e.Addr().String(), inbox[:strings.LastIndex(inbox, ".")+1])
	anc, err := Connect(context.Background(), "nats://"+link.addr, ConnOptions{nkey: e.serving.kp, InboxPrefix: InboxPrefix(e.serving.pub), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	opts := Options{Durable: true, AckWait: 2 * time.Second}
	a, err := New(context.Background(), m, Options{Conn: anc, Durable: true, AckWait: opts.AckWait, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Shutdown(ctx)
	}()

	var mu sync.Mutex
	var pieces []string
	maxTokens := 12
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		<-link.cut // replica a is lost: start another
		startServer(t, e, m, opts)
	}()
	end, err := c.Generate(ctx, "llama", 0, refs.Chat.Prompt, &textgen.Params{MaxTokens: &maxTokens}, func(s string) {
		mu.Lock()
		pieces = append(pieces, s)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-link.cut:
	default:
		t.Fatal("replica a finished the generation before its link was cut")
	}
	if got := strings.Join(pieces, ""); got != refs.Chat.Want {
		t.Errorf("text %q, transformers' greedy generation %q", got, refs.Chat.Want)
	}
	if end.GeneratedTokens != maxTokens || end.FinishReason != "length" {
		t.Errorf("end %+v, want %d tokens, finish_reason length", end, maxTokens)
	}
	if c.Duplicates() < 1 {
		t.Errorf("the client dropped %d messages sent again, want >= 1 (replica a's first)", c.Duplicates())
	}

	// A sampled generation could continue differently on the replica
	// taking it over: refused.
	hot := 0.7
	_, err = c.Generate(ctx, "llama", 0, refs.Chat.Prompt, &textgen.Params{Temperature: &hot}, func(string) {})
	var rerr *ReplyError
	if !errors.As(err, &rerr) || rerr.Code != 400 || !strings.Contains(rerr.Message, "greedy") {
		t.Errorf("a durable generation at temperature 0.7: %v, want a 400 saying it is greedy", err)
	}
}
