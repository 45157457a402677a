package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/xserve/xserve/loadtest"
)

// natsOptions are the flags of the NATS mode.
type natsOptions struct {
	url     *string
	durable *bool
	conns   *int
	prefix  *string
	creds   *string
	token   *string
	nkey    *string
}

func natsFlags(fs *flag.FlagSet) *natsOptions {
	return &natsOptions{
		url:     fs.String("nats", "", "load xserve over NATS at this URL (e.g. nats://127.0.0.1:4222) instead of HTTP (-url)"),
		durable: fs.Bool("durable", false, "with -nats: send through the JetStream work queue (xserve --nats-durable)"),
		conns:   fs.Int("nats-conns", 1, "with -nats: NATS connections to spread the requests over"),
		prefix:  fs.String("nats-prefix", "xserve.v1", "with -nats: the replicas' subject prefix"),
		creds:   fs.String("nats-creds", "", "with -nats: credentials file"),
		token:   fs.String("nats-token", "", "with -nats: authentication token (default: $XSERVE_NATS_TOKEN)"),
		nkey:    fs.String("nats-nkey", "", "with -nats: NKey seed file, e.g. the client.nk that xserve's embedded NATS server writes (default: $XSERVE_NATS_NKEY)"),
	}
}

// target is what a run needs of the HTTP and the NATS targets.
type target interface {
	loadtest.Target
	fmt.Stringer
	Close() error
}

// newTarget returns the NATS target when -nats is given (with the HTTP
// options that apply to both), else the HTTP target.
func newTarget(ctx context.Context, h loadtest.HTTPOptions, n *natsOptions) (target, error) {
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
