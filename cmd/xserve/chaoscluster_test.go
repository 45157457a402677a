//go:build chaos

package main

// The cluster reliability suite (`make chaos-cluster`, not part of `make
// test`): three nats-servers in cluster mode (routes, JetStream, the durable
// request stream and the compile cache bucket replicated three times) and
// three xserve replicas, under durable load, while a NATS node is killed and
// restarted, a NATS node is cut off from the others and joined again, and a
// replica is killed and replaced by a fresh one whose local compile cache is
// empty. docs/RELIABILITY.md has the figures.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsapi "github.com/xserve/xserve/api/nats"
	"github.com/xserve/xserve/clustercache"
)

// relay forwards TCP connections to a target address until it is cut: a
// route between two nats-servers goes through one, so that a test can
// partition the cluster by cutting the relays of one node.
type relay struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go r.accept()
	t.Cleanup(func() {
		ln.Close()
		r.setCut(true)
	})
	return r
}

func (r *relay) url() string { return "nats://" + r.ln.Addr().String() }

func (r *relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go r.forward(c)
	}
}

// forward copies c to and from a new connection to the target, unless the
// relay is cut.
func (r *relay) forward(c net.Conn) {
	r.mu.Lock()
	cut := r.cut
	r.mu.Unlock()
	if cut {
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", r.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	r.mu.Lock()
	if r.cut {
		r.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	r.conns[c], r.conns[up] = struct{}{}, struct{}{}
	r.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
	<-done
	r.mu.Lock()
	delete(r.conns, c)
	delete(r.conns, up)
	r.mu.Unlock()
}

// setCut cuts the relay (closing the connections through it and refusing
// new ones) or joins it again.
func (r *relay) setCut(cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = cut
	if cut {
		for c := range r.conns {
			c.Close()
		}
	}
}

// freePort is a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// clusterNode is one nats-server of a natsCluster, restartable on the
// same ports and JetStream store.
type clusterNode struct {
	name                    string
	clientPort, clusterPort int
	store                   string
	routes                  []*relay // to the other nodes
	srv                     *server.Server
}

func (n *clusterNode) url() string { return "nats://127.0.0.1:" + strconv.Itoa(n.clientPort) }

func (n *clusterNode) start() error {
	var routes []string
	for _, r := range n.routes {
		routes = append(routes, r.url())
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: n.name, Host: "127.0.0.1", Port: n.clientPort,
		JetStream: true, StoreDir: n.store, NoSigs: true, NoLog: true, MaxPayload: 8 << 20,
		// The nodes know each other only through the relays: NoAdvertise
		// keeps them from gossiping their real cluster addresses.
		Cluster: server.ClusterOpts{Name: "xserve-chaos", Host: "127.0.0.1", Port: n.clusterPort, NoAdvertise: true},
		Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
	})
	if err != nil {
		return fmt.Errorf("nats-server %s: %w", n.name, err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("nats-server %s not ready", n.name)
	}
	n.srv = srv
	return nil
}

func (n *clusterNode) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// natsCluster is three nats-servers in cluster mode, each route through a
// relay of its own.
type natsCluster struct {
	nodes []*clusterNode
	// relays[i][j] carries node i's route to node j.
	relays [][]*relay
}

func startNATSCluster(t *testing.T, size int) *natsCluster {
	t.Helper()
	c := &natsCluster{}
	for i := range size {
		c.nodes = append(c.nodes, &clusterNode{name: fmt.Sprintf("n%d", i+1), clientPort: freePort(t), clusterPort: freePort(t), store: t.TempDir()})
	}
	c.relays = make([][]*relay, size)
	for i, n := range c.nodes {
		c.relays[i] = make([]*relay, size)
		for j, m := range c.nodes {
			if i != j {
				c.relays[i][j] = startRelay(t, "127.0.0.1:"+strconv.Itoa(m.clusterPort))
				n.routes = append(n.routes, c.relays[i][j])
			}
		}
	}
	for _, n := range c.nodes {
		if err := n.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.stop)
	}
	c.waitForJetStream(t)
	return c
}

// urls is the client URLs of every node, node first's first.
func (c *natsCluster) urls(first int) string {
	var us []string
	for k := range c.nodes {
		us = append(us, c.nodes[(first+k)%len(c.nodes)].url())
	}
	return strings.Join(us, ",")
}

// partition cuts node i off the others (both directions) or joins it again.
func (c *natsCluster) partition(i int, cut bool) {
	for j := range c.nodes {
		if j != i {
			c.relays[i][j].setCut(cut)
			c.relays[j][i].setCut(cut)
		}
	}
}

// waitForJetStream waits until every node answers JetStream requests (the
// meta group has a leader and every node has joined it).
func (c *natsCluster) waitForJetStream(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, n := range c.nodes {
		nc, err := nats.Connect(n.url())
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
			if err == nil && n.srv.JetStreamIsCurrent() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("JetStream cluster not ready on %s: %v", n.name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		nc.Close()
	}
}

// clusterReplicaFlags are the flags of a replica of the cluster test.
func clusterReplicaFlags(c *natsCluster, first int) []string {
	return []string{"--nats-url", c.urls(first), "--nats-durable", "--nats-stream-replicas", "3", "--nats-ack-wait", "2s",
		"--cluster-cache", "--cluster-cache-replicas", "3", "--shutdown-timeout", "20s"}
}

// checkFromClusterCache checks that a replica started with an empty local
// compile cache compiled nothing: its 4 tinycnn buckets (a StableHLO and an
// executable entry each) came from the cluster cache.
func checkFromClusterCache(t *testing.T, p *xserveProc) {
	t.Helper()
	metrics := string(call(t, "GET", p.url+"/metrics", nil).body)
	if n := metricSum(metrics, "xserve_compilations_total"); n != 0 {
		t.Errorf("the fresh replica compiled %v executables:\n%s", n, grepLines(metrics, "xserve_compilations_total"))
	}
	if n := metricSum(metrics, "xserve_cluster_cache_lookups_total", `result="hit"`); n != 8 {
		t.Errorf("cluster cache hits %v, want 8:\n%s", n, grepLines(metrics, "xserve_cluster_cache"))
	}
}

// waitPublished waits until a replica has published n compile cache
// entries to the cluster.
func waitPublished(t *testing.T, p *xserveProc, n float64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		metrics := string(call(t, "GET", p.url+"/metrics", nil).body)
		got := metricSum(metrics, "xserve_cluster_cache_publications_total", `result="published"`)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first replica published %v entries, want %v:\n%s", got, n, grepLines(metrics, "xserve_cluster_cache"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leaderOf is the index of the node that leads a stream, once it has a
// leader.
func (c *natsCluster) leaderOf(t *testing.T, js jetstream.JetStream, stream string) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := js.Stream(ctx, stream)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = s.Info(ctx)
		}
		cancel()
		if err == nil && info.Cluster != nil {
			for i, n := range c.nodes {
				if n.name == info.Cluster.Leader {
					return i
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s has no leader: %v", stream, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// durableClient connects a durable client to one node of the cluster.
func durableClient(t *testing.T, url string) *natsapi.Client {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := natsapi.NewClient(nc, natsapi.ClientOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterFault is one fault of TestChaosCluster: pick chooses the NATS
// node it hits (-1: none), fault and restore are given that node.
type clusterFault struct {
	name           string
	pick           func() int
	fault, restore func(node int)
}

// runClusterFault sends n durable requests from a client on a node the
// fault does not hit; a quarter of the way through the fault starts, and
// hold later it is undone. No durable request may be lost.
func runClusterFault(t *testing.T, cl *natsCluster, js jetstream.JetStream, smp sample, f clusterFault, n int, hold time.Duration) {
	node := f.pick()
	c := durableClient(t, cl.nodes[(node+1)%len(cl.nodes)].url())
	var faultOnce sync.Once
	restored := make(chan struct{})
	start := time.Now()
	res := runLoad(t, c, smp, n, 16, 30*time.Second, func(done int64) {
		if done < int64(n/4) {
			return
		}
		faultOnce.Do(func() {
			t.Logf("%s after %d requests", f.name, done)
			f.fault(node)
			time.AfterFunc(hold, func() {
				f.restore(node)
				close(restored)
			})
		})
	})
	<-restored
	errored := res.first[explicitError] + res.first[timedOut]
	t.Logf("CHAOS-CLUSTER %s: sent %d, answered %d (%d at the first attempt, %d on the retry), errored %d, lost %d, durable redeliveries answered %d, duplicate replies dropped %d, late replies %d, answers per replica %v, in %v (fault held %v)",
		f.name, n, res.first[answered]+res.retriedOK, res.first[answered], res.retriedOK, errored, res.lost, res.redelivery,
		c.Duplicates(), c.Late(), res.byReplica, time.Since(start).Round(time.Millisecond), hold)
	if len(res.samples) > 0 {
		t.Logf("first errors: %q", res.samples)
	}
	if res.lost != 0 {
		t.Errorf("%d durable requests lost; %s", res.lost, durableState(js))
	}
}

// durableState describes the request stream and its consumer, for a
// failure message.
func durableState(js jetstream.JetStream) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, natsapi.DefaultStream)
	if err != nil {
		return err.Error()
	}
	si, err := s.Info(ctx)
	if err != nil {
		return err.Error()
	}
	c, err := s.Consumer(ctx, natsapi.DefaultConsumer)
	if err != nil {
		return err.Error()
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("stream: %d messages left (first %d, last %d), leader %s; consumer: %d pending, %d waiting for an ack, %d redelivered, delivered up to %d, acked up to %d",
		si.State.Msgs, si.State.FirstSeq, si.State.LastSeq, si.Cluster.Leader, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.Delivered.Stream, ci.AckFloor.Stream)
}

// TestChaosCluster: a three-node NATS cluster (JetStream R3) and three
// xserve replicas under durable load. In turn the NATS node leading the
// request stream is killed, and restarted 5 s later; the node leading it
// then is partitioned (its routes cut), and joined again 5 s later; a
// replica is killed with SIGKILL and replaced by a fresh one (empty local
// compile cache) that loads its executables from the cluster's compile
// cache instead of compiling. Each fault logs sent / answered / lost /
// duplicated; no durable request may be lost. Last, the node leading the
// compile cache's stream is stopped and one more fresh replica still
// compiles nothing.
func TestChaosCluster(t *testing.T) {
	smp := loadSample(t)
	cl := startNATSCluster(t, 3)
	repo := eagerRepo(t)

	// The first replica compiles tinycnn's 4 buckets and publishes them;
	// the two others start with empty local caches and compile nothing.
	procs := []*xserveProc{startXserve(t, repo, t.TempDir(), clusterReplicaFlags(cl, 0)...)}
	waitPublished(t, procs[0], 8)
	for i := 1; i < 3; i++ {
		p := startXserve(t, repo, t.TempDir(), clusterReplicaFlags(cl, i)...)
		t.Logf("replica %d ready in %v from the cluster compile cache", i+1, p.ready.Round(time.Millisecond))
		checkFromClusterCache(t, p)
		procs = append(procs, p)
	}
	admin, err := nats.Connect(cl.urls(0), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	waitForReplicas(t, admin, 3)
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	requestsLeader := func() int { return cl.leaderOf(t, js, natsapi.DefaultStream) }
	restart := func(node int) {
		if err := cl.nodes[node].start(); err != nil {
			t.Error(err)
		}
	}

	var fresh *xserveProc
	for _, f := range []clusterFault{
		{"NATS node killed (the request stream's leader)", requestsLeader, func(node int) { cl.nodes[node].stop() }, restart},
		{"NATS node partitioned (the request stream's leader)", requestsLeader,
			func(node int) { cl.partition(node, true) }, func(node int) { cl.partition(node, false) }},
		{"replica kill -9", func() int { return -1 }, func(int) { procs[0].cmd.Process.Kill() }, func(int) {
			// A fresh replica (empty local compile cache) takes its place;
			// the test waits for it after the load.
			fresh = launchXserve(t, repo, t.TempDir(), clusterReplicaFlags(cl, 0)...)
		}},
	} {
		t.Run(f.name, func(t *testing.T) { runClusterFault(t, cl, js, smp, f, 4000, 5*time.Second) })
	}
	if err := waitReady(fresh, 3*time.Minute); err != nil {
		t.Fatalf("fresh replica: %v", err)
	}
	t.Logf("fresh replica ready in %v (process start to /v2/health/ready 200) from the cluster compile cache", fresh.ready.Round(time.Millisecond))
	checkFromClusterCache(t, fresh)

	// The compile cache survives the loss of the node leading its stream.
	cacheLeader := cl.leaderOf(t, js, "OBJ_"+clustercache.DefaultBucket)
	cl.nodes[cacheLeader].stop()
	late := startXserve(t, repo, t.TempDir(), clusterReplicaFlags(cl, cacheLeader+1)...)
	t.Logf("fresh replica ready in %v from the cluster compile cache, its stream's leader (%s) down", late.ready.Round(time.Millisecond), cl.nodes[cacheLeader].name)
	checkFromClusterCache(t, late)
	// It joins the service with the node still down (its readiness is the
	// models'; NATS comes after).
	waitForReplicas(t, admin, 4)
	restart(cacheLeader)

	// Every replica takes durable requests.
	res := runLoad(t, durableClient(t, cl.nodes[0].url()), smp, 400, 8, 30*time.Second, func(int64) {})
	if res.lost != 0 {
		t.Errorf("after the faults: %d durable requests lost (%v)", res.lost, res)
	}
	t.Logf("after the faults: %v; answers per replica %v", res, res.byReplica)
	for _, p := range append(procs[1:], fresh, late) {
		p.stop(t)
	}
}

// waitReady waits until a launched replica answers /v2/health/ready.
func waitReady(p *xserveProc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("xserve exited before it was ready: %v\n%s", p.waitErr, p.log)
		default:
		}
		if ok, _ := readyNow(p.url); ok {
			p.ready = time.Since(p.start)
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("xserve not ready in time\n" + p.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readyNow asks a replica's readiness once.
func readyNow(url string) (bool, error) {
	res, err := http.Get(url + "/v2/health/ready")
	if err != nil {
		return false, err
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK, nil
}
