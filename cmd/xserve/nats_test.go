package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	natsapi "github.com/xserve/xserve/api/nats"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// The NATS tests run the real xserve binary (several of them, as separate
// processes) against a real NATS server: the embedded one, or nats-server
// started in the test process with JetStream.

var (
	natsIDRE     = regexp.MustCompile(`msg="NATS endpoints registered" service=xserve id=(\S+)`)
	embeddedURLE = regexp.MustCompile(`nats_url=(nats://\S+)`)
	clientNkeyRE = regexp.MustCompile(`client_nkey=(\S+)`)
	// inboxPrefixRE finds the inbox prefix of the embedded server's
	// client user.
	inboxPrefixRE = regexp.MustCompile(`client_inbox_prefix=(\S+)`)
)

// natsID waits for the replica's service instance id in its log.
func (p *xserveProc) natsID(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if m := natsIDRE.FindAllStringSubmatch(p.log.String(), -1); len(m) > 0 {
			return m[len(m)-1][1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no NATS service id in the log:\n%s", p.log)
	return ""
}

// natsCompileCache is a compile cache the NATS tests share (next to the
// test binary, removed with it), so that only the first xserve compiles.
func natsCompileCache(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(filepath.Dir(xserveBinary(t)), "nats-compile-cache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// eagerRepo is tinycnn with batch buckets [1, 2, 4, 8] compiled at load.
func eagerRepo(t *testing.T) string {
	t.Helper()
	dir := tinycnnRepo(t)
	config := "buckets:\n  batch: [1, 2, 4, 8]\nwarmup: eager\n"
	if err := os.WriteFile(filepath.Join(dir, "tinycnn", "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startNATSServer runs nats-server, with JetStream, in the test process on
// a free loopback port.
func startNATSServer(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoSigs: true, NoLog: true, MaxPayload: 8 << 20,
	})
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

// pingAll asks $SRV.PING.xserve and gathers the answers for a moment.
func pingAll(t *testing.T, nc *nats.Conn) map[string]bool {
	t.Helper()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.PING.xserve", inbox, nil); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for {
		m, err := sub.NextMsg(300 * time.Millisecond)
		if err != nil {
			return ids
		}
		var p micro.Ping
		if json.Unmarshal(m.Data, &p) == nil {
			ids[p.ID] = true
		}
	}
}

// replicaStats reads one replica's tinycnn endpoint from $SRV.STATS.
func replicaStats(t *testing.T, nc *nats.Conn, id string) (micro.EndpointStats, natsapi.EndpointData) {
	t.Helper()
	r, err := nc.Request("$SRV.STATS.xserve."+id, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("$SRV.STATS of %s: %v", id, err)
	}
	var st micro.Stats
	if err := json.Unmarshal(r.Data, &st); err != nil {
		t.Fatal(err)
	}
	for _, ep := range st.Endpoints {
		if ep.Name == "tinycnn" {
			var d natsapi.EndpointData
			if err := json.Unmarshal(ep.Data, &d); err != nil {
				t.Fatal(err)
			}
			return *ep, d
		}
	}
	t.Fatalf("replica %s has no tinycnn endpoint: %s", id, r.Data)
	return micro.EndpointStats{}, natsapi.EndpointData{}
}

// outcome of one load request.
type outcome int

const (
	answered outcome = iota
	explicitError
	timedOut
)

// loadResult tallies a load run.
type loadResult struct {
	mu         sync.Mutex
	first      map[outcome]int // first attempt's outcome
	retriedOK  int             // answered on the retry
	lost       int             // not answered after the retry
	byReplica  map[string]int  // answers per replica
	redelivery int             // durable answers with Delivery > 1
	samples    []string        // first errors, for the log
}

func newLoadResult() *loadResult {
	return &loadResult{first: map[outcome]int{}, byReplica: map[string]int{}}
}

func (r *loadResult) String() string {
	return fmt.Sprintf("first attempt: %d answered, %d explicit errors, %d timeouts; answered on the retry: %d; lost: %d; durable redeliveries answered: %d",
		r.first[answered], r.first[explicitError], r.first[timedOut], r.retriedOK, r.lost, r.redelivery)
}

// runLoad sends n requests from conc goroutines (request i carries sample
// row i), each retried once after an error or timeout, checks every answer
// against ONNX Runtime, and calls progress(done) after each request.
func runLoad(t *testing.T, c *natsapi.Client, s sample, n, conc int, timeout time.Duration, progress func(done int64)) *loadResult {
	t.Helper()
	res := newLoadResult()
	var next, done atomic.Int64
	var wg sync.WaitGroup
	rows := int(s.image.Shape[0])
	rowLen := len(s.image.Data) / rows
	classes := s.probs.Shape[1]
	imgs := make([]*tensor.Tensor, rows)
	wants := make([][]float64, rows)
	for r := range rows {
		imgs[r] = tensor.New(tensor.Float32, append([]int64{1}, s.image.Shape[1:]...)...)
		copy(imgs[r].Data, s.image.Data[r*rowLen:(r+1)*rowLen])
		for k := range classes {
			wants[r] = append(wants[r], s.probs.Float64At(int64(r)*classes+k))
		}
	}
	classify := func(err error) outcome {
		var re *natsapi.ReplyError
		switch {
		case errors.Is(err, natsapi.ErrTimeout):
			return timedOut
		case errors.As(err, &re), errors.Is(err, natsapi.ErrNoResponders):
			return explicitError
		}
		return explicitError
	}
	for range conc {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				row := int(i) % len(imgs)
				id := fmt.Sprintf("load-%d-%d", time.Now().UnixNano(), i)
				var out *natsapi.Result
				var err error
				for attempt := range 2 {
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					out, err = c.Infer(ctx, "tinycnn", []serving.NamedTensor{{Name: "image", Tensor: imgs[row]}}, natsapi.InferOptions{ID: id})
					cancel()
					res.mu.Lock()
					if attempt == 0 {
						if err == nil {
							res.first[answered]++
						} else {
							res.first[classify(err)]++
						}
					} else if err == nil {
						res.retriedOK++
					}
					if err != nil && len(res.samples) < 5 {
						res.samples = append(res.samples, err.Error())
					}
					res.mu.Unlock()
					if err == nil {
						break
					}
				}
				if err != nil {
					res.mu.Lock()
					res.lost++
					res.mu.Unlock()
				} else {
					if out.ID != id || len(out.Outputs) != 1 {
						t.Errorf("request %s answered %+v", id, out)
					} else {
						o := out.Outputs[0].Tensor
						checkProbs(t, o.Float64s(), o.Shape, wants[row])
					}
					res.mu.Lock()
					res.byReplica[out.Replica]++
					if out.Delivery > 1 {
						res.redelivery++
					}
					res.mu.Unlock()
				}
				progress(done.Add(1))
			}
		})
	}
	wg.Wait()
	return res
}

// TestNATSReplicas runs one nats-server and three xserve replicas (separate
// processes, joined with --nats-url), sends 10,000 requests from 32
// concurrent clients and checks that all are answered correctly by all three
// replicas; then kills a replica with SIGKILL in the middle of plain load
// (every request is answered, or fails explicitly or by timeout, and one
// retry answers it) and another in the middle of durable load (nothing is
// lost, and the client sees one answer per request).
func TestNATSReplicas(t *testing.T) {
	smp := loadSample(t)
	ns := startNATSServer(t)
	url := ns.ClientURL()
	repo, cache := eagerRepo(t), natsCompileCache(t)
	flags := []string{"--nats-url", url, "--nats-durable", "--nats-ack-wait", "2s", "--shutdown-timeout", "20s"}

	// The first replica compiles the buckets into the shared compile cache;
	// the others read them from it.
	procs := []*xserveProc{startXserve(t, repo, cache, flags...)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			p := startXserve(t, repo, cache, flags...)
			mu.Lock()
			procs = append(procs, p)
			mu.Unlock()
		})
	}
	wg.Wait()
	ids := map[string]*xserveProc{}
	for _, p := range procs {
		ids[p.natsID(t)] = p
	}

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := pingAll(t, nc); len(got) != 3 {
		t.Fatalf("$SRV.PING.xserve: %d replicas answer (%v), want 3", len(got), got)
	}
	plain, err := natsapi.NewClient(nc, natsapi.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()

	// Bad payloads get error replies; the replicas keep serving.
	for _, bad := range []struct {
		data    string
		headers []string
		code    int
	}{
		{`{"inputs": {`, nil, 400},
		{"not gzip", []string{"Content-Encoding", "gzip"}, 400},
		{`{"inputs": {"image": {"dtype": "float32", "shape": [1, 3, 8, 8], "data": [` + strings.Repeat("0,", 191) + `0]}}}`, nil, 400},
	} {
		m := &nats.Msg{Data: []byte(bad.data), Header: nats.Header{}}
		for i := 0; i+1 < len(bad.headers); i += 2 {
			m.Header.Set(bad.headers[i], bad.headers[i+1])
		}
		_, err := plain.Call(context.Background(), "tinycnn", m)
		var re *natsapi.ReplyError
		if !errors.As(err, &re) || re.Code != bad.code {
			t.Errorf("bad payload %.30q: %v, want an error reply %d", bad.data, err, bad.code)
		}
	}

	// 1. 10,000 requests, 32 clients: all correct, on all three replicas.
	start := time.Now()
	res := runLoad(t, plain, smp, 10000, 32, 30*time.Second, func(int64) {})
	elapsed := time.Since(start)
	t.Logf("10000 plain requests, 32 clients: %v (%.0f req/s); %s", elapsed.Round(time.Millisecond), 10000/elapsed.Seconds(), res)
	if res.first[answered] != 10000 {
		t.Fatalf("not all answered at the first attempt: %s; errors: %q", res, res.samples)
	}
	total := 0
	for id, p := range ids {
		ep, d := replicaStats(t, nc, id)
		t.Logf("replica %s (pid %d): $SRV.STATS tinycnn num_requests=%d, answered=%d errors=%d overloaded=%d avg latency %v; answers seen by the client: %d",
			id, p.cmd.Process.Pid, ep.NumRequests, d.Requests, d.Errors, d.Overloaded, d.AverageLatency, res.byReplica[id])
		if res.byReplica[id] == 0 || d.Requests == 0 {
			t.Errorf("replica %s answered no request", id)
		}
		total += res.byReplica[id]
	}
	if total != 10000 {
		t.Errorf("answers by replica add up to %d, want 10000", total)
	}

	// 2. Plain load, SIGKILL one replica in the middle.
	var victim *xserveProc
	var victimID string
	for id, p := range ids {
		victim, victimID = p, id
		break
	}
	const n2 = 6000
	var killOnce sync.Once
	res = runLoad(t, plain, smp, n2, 32, 2*time.Second, func(done int64) {
		if done == n2/3 {
			killOnce.Do(func() {
				t.Logf("kill -9 replica %s (pid %d) after %d requests", victimID, victim.cmd.Process.Pid, done)
				victim.cmd.Process.Kill()
			})
		}
	})
	<-victim.exited
	delete(ids, victimID)
	t.Logf("plain, kill -9 in the middle: %d requests: %s; per replica %v", n2, res, res.byReplica)
	if len(res.samples) > 0 {
		t.Logf("first errors: %q", res.samples)
	}
	if res.lost != 0 || res.first[answered]+res.retriedOK != n2 {
		t.Errorf("plain mode lost requests with one retry: %s", res)
	}

	// 3. Durable load, SIGKILL another replica in the middle; a fresh
	// replica joins first, so three serve again.
	p := startXserve(t, repo, cache, flags...)
	ids[p.natsID(t)] = p
	waitForReplicas(t, nc, 3)
	durable, err := natsapi.NewClient(nc, natsapi.ClientOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer durable.Close()
	for id, p := range ids {
		victim, victimID = p, id
		break
	}
	const n3 = 4000
	killOnce = sync.Once{}
	start = time.Now()
	res = runLoad(t, durable, smp, n3, 32, 60*time.Second, func(done int64) {
		if done == n3/3 {
			killOnce.Do(func() {
				t.Logf("kill -9 replica %s (pid %d) after %d durable requests", victimID, victim.cmd.Process.Pid, done)
				victim.cmd.Process.Kill()
			})
		}
	})
	<-victim.exited
	delete(ids, victimID)
	t.Logf("durable, kill -9 in the middle: %d requests in %v: %s; per replica %v; duplicate replies suppressed by the client: %d, late: %d",
		n3, time.Since(start).Round(time.Millisecond), res, res.byReplica, durable.Duplicates(), durable.Late())
	if len(res.samples) > 0 {
		t.Errorf("durable errors: %q", res.samples)
	}
	if res.first[answered] != n3 || res.lost != 0 {
		t.Errorf("durable mode lost or failed requests: %s", res)
	}
	// The work queue is empty: every request was acknowledged.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(context.Background(), natsapi.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := stream.Info(context.Background())
		if err == nil && info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream not empty: %+v, %v", info.State, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The survivors stop cleanly.
	for _, p := range ids {
		p.stop(t)
	}
}

// waitForReplicas waits until n replicas answer $SRV.PING.
func waitForReplicas(t *testing.T, nc *nats.Conn, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := pingAll(t, nc)
		if len(got) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d replicas answer $SRV.PING, want %d", len(got), n)
		}
	}
}

// TestEmbeddedNATSAndNATSInfer serves with the embedded NATS server (on a
// free port) and sends requests with `xserve nats-infer`, plain and durable.
func TestEmbeddedNATSAndNATSInfer(t *testing.T) {
	repo, cache := eagerRepo(t), natsCompileCache(t)
	p := startXserve(t, repo, cache, "--nats-listen", "127.0.0.1:0", "--nats-durable")
	var url string
	deadline := time.Now().Add(time.Minute)
	for url == "" {
		if m := embeddedURLE.FindStringSubmatch(p.log.String()); m != nil {
			url = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no embedded NATS URL in the log:\n%s", p.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.natsID(t)
	// The embedded server takes only its users: nats-infer signs in with
	// the client seed it wrote (0600).
	seed := clientNkeyRE.FindStringSubmatch(p.log.String())
	if seed == nil {
		t.Fatalf("no client_nkey in the log:\n%s", p.log)
	}
	if fi, err := os.Stat(seed[1]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("client seed %s: %v %v, want mode 0600", seed[1], err, fi)
	}
	if _, _, err := xserve(t, "nats-infer", "--nats-url", url, "--model", "tinycnn", "--input", "image="+sampleDir+"/image.npy", "--timeout", "5s"); err == nil || !strings.Contains(err.Error(), "uthorization") {
		t.Errorf("nats-infer without the seed: %v, want an authorization error", err)
	}
	out := t.TempDir()
	for _, extra := range [][]string{nil, {"--durable"}, {"--json", "--compress", "gzip", "--accept-encoding", "zstd"}} {
		args := append([]string{"nats-infer", "--nats-url", url, "--nkey", seed[1], "--model", "tinycnn", "--input", "image=" + sampleDir + "/image.npy", "--output", out, "--timeout", "30s"}, extra...)
		stdout, stderr, err := xserve(t, args...)
		if err != nil {
			t.Fatalf("nats-infer %v: %v\n%s", extra, err, stderr)
		}
		if !strings.Contains(stdout, "output probs: float32[2,10] -> ") || !strings.Contains(stderr, "answered by replica") {
			t.Errorf("nats-infer %v printed:\n%s%s", extra, stdout, stderr)
		}
		got, err := tensor.ReadNpyFile(filepath.Join(out, "probs.npy"))
		if err != nil {
			t.Fatal(err)
		}
		s := loadSample(t)
		checkProbs(t, got.Float64s(), got.Shape, s.probs.Float64s())
	}
	_, _, err := xserve(t, "nats-infer", "--nats-url", url, "--nkey", seed[1], "--model", "nosuch", "--input", "image="+sampleDir+"/image.npy", "--timeout", "5s")
	if !errors.Is(err, natsapi.ErrNoResponders) {
		t.Errorf("unknown model: %v", err)
	}
	_, _, err = xserve(t, "nats-infer", "--nats-url", url, "--nkey", seed[1], "--model", "tinycnn", "--input", "picture="+sampleDir+"/image.npy", "--timeout", "5s")
	if err == nil || !strings.Contains(err.Error(), "error reply 400") || !strings.Contains(err.Error(), "picture") {
		t.Errorf("unknown input: %v", err)
	}
	// /metrics counts the NATS requests too: 4 answered (one durable), 1 an
	// error. A count may land just after its reply: ask until it is in.
	want := []string{
		`xserve_nats_requests_total{model="tinycnn"} 4` + "\n",
		`xserve_nats_errors_total{model="tinycnn"} 1` + "\n",
		`xserve_nats_durable_requests_total{model="tinycnn"} 1` + "\n",
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		body := string(call(t, "GET", p.url+"/metrics", nil).body)
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return strings.Contains(body, w) })
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("/metrics lacks %q:\n%s", missing, body)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.stop(t)
	if !strings.Contains(p.log.String(), `msg=stopped`) {
		t.Errorf("no clean stop in the log:\n%s", p.log)
	}
}

// TestNATSFlags checks the NATS flags before anything loads.
func TestNATSFlags(t *testing.T) {
	repo := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nats-token", "x"}, "are for joining a server with --nats-url"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--nats-tls-cert", "c.pem"}, "--nats-tls-cert and --nats-tls-key go together"},
		{[]string{"--nats-max-payload", "100MiB"}, "at most 64MiB"},
		{[]string{"--nats-ack-wait", "1ms"}, "--nats-ack-wait must be at least 100ms"},
	} {
		_, _, err := xserve(t, append([]string{"serve", "--model-repo", repo}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
