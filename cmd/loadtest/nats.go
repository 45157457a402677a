package main

import (
	"flag"
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
