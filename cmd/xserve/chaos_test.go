//go:build chaos

package main

// The reliability suite (`make chaos`, not part of `make test`): real xserve
// processes on a real nats-server, under durable load, while the NATS server
// restarts, the durable consumer is deleted or a replica is killed. Each
// scenario logs sent / answered / errored / lost and the replicas' RSS;
// docs/RELIABILITY.md has the figures.

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsapi "github.com/xserve/xserve/api/nats"
)

// restartableNATS is a nats-server that can be stopped and started again on
// the same port and JetStream store.
type restartableNATS struct {
	t     *testing.T
	port  int
	store string
	srv   *server.Server
}

func startRestartableNATS(t *testing.T) *restartableNATS {
	r := &restartableNATS{t: t, port: server.RANDOM_PORT, store: t.TempDir()}
	r.start()
	r.port = r.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(r.stop)
	return r
}

func (r *restartableNATS) start() {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: r.port, JetStream: true, StoreDir: r.store, NoSigs: true, NoLog: true, MaxPayload: 8 << 20})
	if err != nil {
		r.t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		r.t.Fatal("nats-server not ready")
	}
	r.srv = srv
}

func (r *restartableNATS) stop() {
	if r.srv != nil {
		r.srv.Shutdown()
		r.srv.WaitForShutdown()
		r.srv = nil
	}
}

// rssMB is a process's resident set size in MB.
func rssMB(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb >> 10
		}
	}
	return -1
}

// TestChaosDurable runs two replicas in durable mode and, under load, (1)
// restarts the NATS server, (2) deletes the durable consumer, (3) kills a
// replica with SIGKILL: no durable request is lost in any of them.
func TestChaosDurable(t *testing.T) {
	smp := loadSample(t)
	ns := startRestartableNATS(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(ns.port)
	repo, cache := eagerRepo(t), natsCompileCache(t)
	flags := []string{"--nats-url", url, "--nats-durable", "--nats-ack-wait", "2s", "--shutdown-timeout", "20s"}
	procs := []*xserveProc{startXserve(t, repo, cache, flags...), startXserve(t, repo, cache, flags...)}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	waitForReplicas(t, nc, 2)
	c, err := natsapi.NewClient(nc, natsapi.ClientOptions{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const n = 3000
	for _, sc := range []struct {
		name  string
		chaos func()
	}{
		{"NATS server restart", func() {
			ns.stop()
			time.Sleep(2 * time.Second)
			ns.start()
		}},
		{"durable consumer deleted", func() {
			js, err := jetstream.New(nc)
			if err != nil {
				t.Error(err)
				return
			}
			if err := js.DeleteConsumer(context.Background(), natsapi.DefaultStream, natsapi.DefaultConsumer); err != nil {
				t.Error(err)
			}
		}},
		{"replica kill -9", func() { procs[0].cmd.Process.Kill() }},
	} {
		t.Run(sc.name, func(t *testing.T) {
			var once sync.Once
			start := time.Now()
			res := runLoad(t, c, smp, n, 16, 60*time.Second, func(done int64) {
				if done == n/3 {
					once.Do(func() {
						t.Logf("%s after %d requests", sc.name, done)
						sc.chaos()
					})
				}
			})
			var rss []string
			for _, p := range procs {
				rss = append(rss, strconv.FormatInt(rssMB(p.cmd.Process.Pid), 10)+" MB")
			}
			errored := res.first[explicitError] + res.first[timedOut]
			t.Logf("CHAOS %s: sent %d, answered %d (%d at the first attempt, %d on the retry), errored %d, lost %d, durable redeliveries %d, duplicates dropped by the client %d, in %v; replica RSS %v",
				sc.name, n, res.first[answered]+res.retriedOK, res.first[answered], res.retriedOK, errored, res.lost, res.redelivery, c.Duplicates(), time.Since(start).Round(time.Millisecond), rss)
			if len(res.samples) > 0 {
				t.Logf("first errors: %q", res.samples)
			}
			if res.lost != 0 {
				t.Errorf("%d durable requests lost", res.lost)
			}
		})
	}
}
