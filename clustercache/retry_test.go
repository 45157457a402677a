package clustercache

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestOpenWaitsForJetStream opens the store on a node of a three-node
// NATS cluster whose other two nodes are down: JetStream has no quorum and
// answers 503 ("temporarily unavailable") or not at all. With StartRetry
// -1 Open fails at once; with the default it retries, logs each retry, and
// succeeds once a second node is back (a meta leader is elected), and the
// store works.
func TestOpenWaitsForJetStream(t *testing.T) {
	ports := freePorts(t, 3)
	routes := make([]*url.URL, len(ports))
	dirs := make([]string, len(ports))
	for i, p := range ports {
		routes[i] = &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)}
		dirs[i] = t.TempDir()
	}
	node := func(i int) *server.Server {
		srv, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: dirs[i], NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: "retry", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		})
		if err != nil {
			t.Fatal(err)
		}
		srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatalf("node %d not ready", i+1)
		}
		t.Cleanup(func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		})
		return srv
	}
	n1, n2, n3 := node(0), node(1), node(2)
	js := connect(t, n1.ClientURL())
	if _, err := Open(context.Background(), Options{JetStream: js, Bucket: "first", Timeout: 5 * time.Second}); err != nil {
		t.Fatalf("three nodes: %v", err)
	}
	for _, n := range []*server.Server{n2, n3} {
		n.Shutdown()
		n.WaitForShutdown()
	}

	_, err := Open(context.Background(), Options{JetStream: js, Bucket: "once", Timeout: 2 * time.Second, StartRetry: -1})
	if err == nil || !unavailable(err) {
		t.Fatalf("one node of three, no retry: err = %v, want JetStream temporarily unavailable", err)
	}
	t.Logf("one node of three: %v", err)

	logs := &lockedBuffer{}
	var s *Store
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		s, err = Open(context.Background(), Options{JetStream: js, Bucket: "retried", Timeout: 2 * time.Second,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
	}()
	time.Sleep(time.Second)
	node(1)
	<-done
	if err != nil {
		t.Fatalf("Open after a second node came back: %v\n%s", err, logs)
	}
	t.Logf("opened %v after the start, a second node back after 1 s", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(logs.String(), "JetStream unavailable; retrying") {
		t.Errorf("no retry logged:\n%s", logs)
	}
	if err := s.Put(key('a', "stablehlo"), []byte("program")); err != nil {
		t.Fatal(err)
	}
	if data, ok, err := s.Get(key('a', "stablehlo")); err != nil || !ok || string(data) != "program" {
		t.Errorf("Get after Put: %q %v %v", data, ok, err)
	}
}

// freePorts returns n loopback ports free now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		defer l.Close()
	}
	return ports
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
