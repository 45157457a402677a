package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/xserve/xserve/api/grpc/inferencepb"
	natsapi "github.com/xserve/xserve/api/nats"
)

// natsGate is a TCP proxy to a NATS server that holds every connection
// until open is closed: a NATS server that is slow to take xserve's
// connection.
type natsGate struct {
	addr string
	open chan struct{}
}

func startNATSGate(t *testing.T, upstream string) *natsGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	g := &natsGate{addr: ln.Addr().String(), open: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				<-g.open
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer u.Close()
				go func() {
					io.Copy(u, c)
					u.Close()
				}()
				io.Copy(c, u)
			}()
		}
	}()
	return g
}

// TestReadyOnlyOnceNATSServes: while xserve's NATS connection waits for
// its server (durable requests on), /v2/health/ready is 503 saying so and
// gRPC ServerReady false, although HTTP and gRPC serve and the models are
// loaded; once ready, a NATS request is answered at once (no "no
// responders") and the durable consumer exists.
func TestReadyOnlyOnceNATSServes(t *testing.T) {
	ns := startNATSServer(t)
	gate := startNATSGate(t, ns.Addr().String())
	p := launchXserve(t, eagerRepo(t), natsCompileCache(t), "--nats-url", "nats://"+gate.addr, "--nats-durable")
	conn, err := grpc.NewClient(p.grpcAddr(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// xserve's NATS connection waits at the gate (it gives up after 5 s).
	r := call(t, "GET", p.url+"/v2/health/ready", nil)
	if r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "NATS") {
		t.Errorf("HTTP /v2/health/ready before NATS serves: %d %s, want 503 naming NATS", r.code, r.body)
	}
	res, err := pb.NewGRPCInferenceServiceClient(conn).ServerReady(ctx, &pb.ServerReadyRequest{}, grpc.WaitForReady(true))
	if err != nil || res.Ready {
		t.Errorf("gRPC ServerReady before NATS serves: %v %v, want not ready", res, err)
	}
	close(gate.open)
	waitStatus(t, p.url+"/v2/health/ready", http.StatusOK, time.Minute)

	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	smp := loadSample(t)
	img, _ := smp.batch(1)
	reply, err := nc.RequestMsg(&nats.Msg{Subject: "xserve.v1.infer.tinycnn", Data: v1Request("tinycnn", img, "float32", false)}, 30*time.Second)
	if err != nil || reply.Header.Get(natsapi.HeaderError) != "" {
		t.Errorf("a NATS request once ready: %v %v", err, reply)
	}
	health, err := nc.Request("xserve.v1.health", nil, 10*time.Second)
	if err != nil || health.Header.Get(natsapi.HeaderError) != "" {
		t.Errorf("NATS health once ready: %v %v", err, health)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Consumer(ctx, natsapi.DefaultStream, natsapi.DefaultConsumer); err != nil {
		t.Errorf("the durable consumer once ready: %v", err)
	}
}
