package loadtest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	grpcapi "github.com/xserve/xserve/api/grpc"
	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
	"github.com/xserve/xserve/tensor"
)

// startGRPCServer serves examples/models (tinycnn) over xserve's gRPC API
// on a loopback port, with the real PJRT CPU plugin, and returns its
// address.
func startGRPCServer(t *testing.T) string {
	t.Helper()
	path, err := pjrt.FindPlugin(pjrt.FindOptions{RepoRoot: filepath.Join("..")})
	if err != nil {
		t.Fatalf("the PJRT CPU plugin (make pjrt): %v", err)
	}
	client, err := pjrt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	repo, err := modelrepo.Open(filepath.Join("..", "examples", "models"))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	m, err := serving.NewManager(ctx, serving.Options{Client: client, Repository: repo, Logger: quiet, ControlMode: serving.ControlNone})
	if err != nil {
		t.Fatal(err)
	}
	s, err := grpcapi.New(m, grpcapi.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("gRPC server Shutdown: %v", err)
		}
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("Manager Shutdown: %v", err)
		}
	})
	return ln.Addr().String()
}

func TestGRPCTarget(t *testing.T) {
	addr := startGRPCServer(t)
	image := tensor.New(tensor.Float32, 1, 3, 32, 32)
	for _, tc := range []struct {
		name     string
		opts     GRPCOptions
		ok       int
		failKind string
	}{
		{"validated", GRPCOptions{Model: "tinycnn", ExpectOutputs: map[string][]int64{"probs": {1, 10}}}, 12, ""},
		{"two conns", GRPCOptions{Model: "tinycnn", Conns: 2, Validate: true}, 12, ""},
		{"wrong shape", GRPCOptions{Model: "tinycnn", ExpectOutputs: map[string][]int64{"probs": {1, 11}}}, 0, "invalid response"},
		{"missing output", GRPCOptions{Model: "tinycnn", ExpectOutputs: map[string][]int64{"logits": {-1}}}, 0, "invalid response"},
		{"unknown model", GRPCOptions{Model: "nosuch"}, 0, "grpc NotFound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Addr = addr
			target, err := NewGRPCTarget(context.Background(), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer target.Close()
			if !strings.HasPrefix(target.String(), "grpc ModelInfer "+addr) {
				t.Errorf("String() = %q", target.String())
			}
			sum, err := Run(context.Background(), Options{Target: target, Inputs: Samples{{"image": image}}, Concurrency: 3, MaxRequests: 12})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Successes != tc.ok || sum.Requests != 12 {
				t.Fatalf("%d requests, %d ok, failures %v, want 12 and %d ok", sum.Requests, sum.Successes, sum.FailuresByKind, tc.ok)
			}
			if tc.failKind != "" && sum.FailuresByKind[tc.failKind] != 12 {
				t.Errorf("failures %v, want 12 of kind %q", sum.FailuresByKind, tc.failKind)
			}
			if tc.ok > 0 && (sum.BytesSent < 12*3*32*32*4 || sum.BytesReceived < 12*10*4) {
				t.Errorf("bytes sent %d, received %d: fewer than the tensors", sum.BytesSent, sum.BytesReceived)
			}
		})
	}
}

func TestGRPCOptionsErrors(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		opts GRPCOptions
		want error
	}{
		"no model":    {GRPCOptions{Addr: "127.0.0.1:1"}, ErrOptions},
		"no port":     {GRPCOptions{Addr: "127.0.0.1", Model: "m"}, ErrOptions},
		"negative":    {GRPCOptions{Addr: "127.0.0.1:1", Model: "m", Conns: -1}, ErrOptions},
		"remote":      {GRPCOptions{Addr: "10.1.2.3:8001", Model: "m"}, ErrNotLoopback},
		"bad dtype":   {GRPCOptions{Addr: "127.0.0.1:1", Model: "m"}, ErrInput},
		"unreachable": {GRPCOptions{Addr: "127.0.0.1:1", Model: "m", Timeout: time.Second}, nil},
	} {
		target, err := NewGRPCTarget(ctx, tc.opts)
		if name == "bad dtype" && err == nil {
			_, err = target.Encode(Sample{"s": tensor.New(tensor.String, 1)})
		}
		if name == "unreachable" && err == nil {
			_, err = target.Do(ctx, &Request{Inputs: Sample{"x": tensor.New(tensor.Float32, 1)}})
			if kind := FailureKind(err); kind != "grpc Unavailable" {
				t.Errorf("unreachable: error %v of kind %q, want grpc Unavailable", err, kind)
			}
			target.Close()
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", name, err, tc.want)
		}
	}
}
