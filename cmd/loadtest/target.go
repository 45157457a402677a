package main

import (
	"context"
	"fmt"
	"os"

	"github.com/xserve/xserve/loadtest"
)

// target is what a run needs of the HTTP and the NATS targets.
type target interface {
	loadtest.Target
	fmt.Stringer
	Close() error
}

// newTarget returns the gRPC target when grpcAddr is set, the NATS target
// when -nats is given (with the HTTP options that apply to both), else the
// HTTP target.
func newTarget(ctx context.Context, h loadtest.HTTPOptions, n *natsOptions, grpcAddr string) (target, error) {
	if grpcAddr != "" {
		switch {
		case *n.url != "":
			return nil, fmt.Errorf("-grpc and -nats are exclusive")
		case h.Compression != "" || h.AcceptEncoding != "":
			return nil, fmt.Errorf("-grpc sends raw tensor contents: -compress and -accept-encoding do not apply")
		}
		return loadtest.NewGRPCTarget(ctx, loadtest.GRPCOptions{
			Addr: grpcAddr, Model: h.Model, Version: h.Version, Outputs: h.Outputs,
			Validate: h.Validate, ExpectOutputs: h.ExpectOutputs,
			Timeout: h.Timeout, AllowRemote: h.AllowRemote,
		})
	}
	if *n.url == "" {
		if *n.durable {
			return nil, fmt.Errorf("-durable needs -nats")
		}
		return loadtest.NewHTTPTarget(ctx, h)
	}
	token := *n.token
	if token == "" {
		token = os.Getenv("XSERVE_NATS_TOKEN")
	}
	nkey := *n.nkey
	if nkey == "" {
		nkey = os.Getenv("XSERVE_NATS_NKEY")
	}
	return loadtest.NewNATSTarget(ctx, loadtest.NATSOptions{
		URL: *n.url, Model: h.Model, Version: h.Version, Protocol: h.Protocol,
		Compression: h.Compression, AcceptEncoding: h.AcceptEncoding, Outputs: h.Outputs,
		Validate: h.Validate, ExpectOutputs: h.ExpectOutputs,
		Durable: *n.durable, Prefix: *n.prefix, Conns: *n.conns,
		Timeout: h.Timeout, CredsFile: *n.creds, Token: token, NkeyFile: nkey, AllowRemote: h.AllowRemote,
	})
}
