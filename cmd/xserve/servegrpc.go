package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	grpcapi "github.com/xserve/xserve/api/grpc"
	httpapi "github.com/xserve/xserve/api/http"
)

// grpcServer is the KServe v2 gRPC API while it serves.
type grpcServer struct {
	srv    *grpcapi.Server
	served chan error
}

// startGRPC serves the gRPC API on addr ("" disables it: nil, nil) with the
// HTTP API's limits and opts' security settings.
func startGRPC(addr string, backend grpcapi.Backend, limits httpapi.Options, opts grpcapi.Options, log *slog.Logger) (*grpcServer, error) {
	if addr == "" {
		return nil, nil
	}
	opts.MaxMessageBytes = limits.MaxBodyBytes
	opts.MaxTensorElements = limits.MaxTensorElements
	opts.Budget = limits.Budget
	opts.SharedMemory = limits.SharedMemory
	opts.MinReadRate = limits.MinReadRate
	opts.ReadGrace = limits.ReadHeaderTimeout
	opts.Version = limits.Version
	opts.Logger = log
	srv, err := grpcapi.New(backend, opts)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--grpc-addr: %w", err)
	}
	g := &grpcServer{srv: srv, served: make(chan error, 1)}
	go func() { g.served <- srv.Serve(ln) }()
	return g, nil
}

// shutdown stops the gRPC API after its calls in flight; nil-safe.
func (g *grpcServer) shutdown(ctx context.Context) error {
	if g == nil {
		return nil
	}
	err := g.srv.Shutdown(ctx)
	<-g.served
	return err
}
