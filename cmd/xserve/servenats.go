package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	httpapi "github.com/xserve/xserve/api/http"
	natsapi "github.com/xserve/xserve/api/nats"
	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/serving"
)

// natsConnFlags are the flags that say how to join a NATS server or cluster
// (`xserve serve` and `xserve compile --publish`).
type natsConnFlags struct {
	url     *string
	creds   *string
	nkey    *string
	token   *string
	tlsCert *string
	tlsKey  *string
	tlsCA   *string
}

func addNATSConnFlags(fs *flag.FlagSet, urlUsage string) *natsConnFlags {
	return &natsConnFlags{
		url:     fs.String("nats-url", "", urlUsage),
		creds:   fs.String("nats-creds", "", "NATS credentials file (user JWT and NKey seed), with --nats-url"),
		nkey:    fs.String("nats-nkey", "", "NKey seed file, with --nats-url"),
		token:   fs.String("nats-token", "", "NATS authentication token, with --nats-url (default: $XSERVE_NATS_TOKEN)"),
		tlsCert: fs.String("nats-tls-cert", "", "client certificate (PEM) for a NATS server that requires one"),
		tlsKey:  fs.String("nats-tls-key", "", "key of --nats-tls-cert (PEM)"),
		tlsCA:   fs.String("nats-tls-ca", "", "CA bundle (PEM) that signs the NATS server's certificate"),
	}
}

// connOptions are the connection options the flags give, for a
// connection used for what ("serving", "compile cache").
func (c *natsConnFlags) connOptions(what string, log *slog.Logger) natsapi.ConnOptions {
	token := *c.token
	if token == "" {
		token = os.Getenv("XSERVE_NATS_TOKEN")
	}
	host, _ := os.Hostname()
	return natsapi.ConnOptions{
		Name:      fmt.Sprintf("xserve %s pid %d %s", host, os.Getpid(), what),
		CredsFile: *c.creds, Token: token, NkeyFile: *c.nkey,
		TLSCert: *c.tlsCert, TLSKey: *c.tlsKey, TLSCA: *c.tlsCA,
		Logger: log,
	}
}

// check reports flags that do not go together.
func (c *natsConnFlags) check() error {
	if (*c.tlsCert == "") != (*c.tlsKey == "") {
		return errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	return nil
}

// connect connects to --nats-url.
func (c *natsConnFlags) connect(ctx context.Context, what string, log *slog.Logger) (*nats.Conn, error) {
	log.Info("connecting to NATS", "url", *c.url, "for", what)
	nc, err := natsapi.Connect(ctx, *c.url, c.connOptions(what, log))
	if err != nil {
		return nil, err
	}
	log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName(), "max_payload", nc.MaxPayload(), "for", what)
	return nc, nil
}

// natsOptions are the NATS flags of `xserve serve`.
type natsOptions struct {
	*natsConnFlags
	enabled    *bool
	listen     *string
	store      *string
	maxPayload int64
	prefix     *string
	queueGroup *string
	workers    *int
	queue      *int
	durable    *bool
	ackWait    *time.Duration
	maxDeliver *int
	replicas   *int
	clients    *string

	listenSet bool // --nats-listen was given
}

func natsFlags(fs *flag.FlagSet) *natsOptions {
	o := &natsOptions{
		enabled:       fs.Bool("nats", true, "serve over NATS too (--nats=false turns it off)"),
		natsConnFlags: addNATSConnFlags(fs, "NATS server or cluster to join, e.g. nats://10.0.0.5:4222,nats://10.0.0.6:4222 (default: start an embedded server)"),
		listen:        fs.String("nats-listen", natsapi.DefaultListen, "embedded NATS server's client address (port 0 picks a free one)"),
		store:         fs.String("nats-store", "", "embedded NATS server's JetStream directory (default: $XSERVE_CACHE/nats/PORT or .cache/nats/PORT; a temporary one for a random port)"),
		prefix:        fs.String("nats-prefix", natsapi.DefaultPrefix, "subject prefix: requests go to PREFIX.infer.<model>"),
		queueGroup:    fs.String("nats-queue-group", natsapi.DefaultQueueGroup, "queue group the replicas share"),
		workers:       fs.Int("nats-workers", 0, "NATS requests handled at once (default 8*GOMAXPROCS, at least 16)"),
		queue:         fs.Int("nats-queue", natsapi.DefaultQueueSize, "NATS requests waiting for a worker; one more is answered 429"),
		durable:       fs.Bool("nats-durable", false, "also take durable requests from the JetStream work queue (PREFIX.durable.<model>)"),
		ackWait:       fs.Duration("nats-ack-wait", natsapi.DefaultAckWait, "durable requests: redelivery delay after a replica fails to acknowledge"),
		maxDeliver:    fs.Int("nats-max-deliver", natsapi.DefaultMaxDeliver, "durable requests: most deliveries of one request"),
		replicas:      fs.Int("nats-stream-replicas", 1, "durable requests: the stream's replication factor in a JetStream cluster (3 keeps the requests through the loss of a node)"),
		clients:       fs.String("nats-clients", "", "embedded NATS server: comma-separated names of more client users besides \"client\", one per application, each with its own seed file (<nats-store>/clients/NAME.nk) and its own inbox prefix, which no other user can read"),
	}
	o.maxPayload = natsapi.DefaultMaxPayload
	fs.Var(byteSize{&o.maxPayload}, "nats-max-payload", "embedded NATS server's largest message, up to 64MiB (default 8MiB)")
	return o
}

// natsServing is the NATS side of a replica: the embedded server (without
// --nats-url), the connections made to it or to --nats-url, and the
// replica's subscriptions. Its methods are no-ops on nil (NATS off).
type natsServing struct {
	o        *natsOptions
	srv      *natsapi.Server
	embedded *natsapi.Embedded
	tmpStore string // removed after the embedded server stops
	log      *slog.Logger
}

// openNATS starts the embedded NATS server (without --nats-url), so that
// connections can be made (connect) before the models load; nil when NATS
// is off.
func openNATS(o *natsOptions, log *slog.Logger) (ns *natsServing, err error) {
	if !*o.enabled {
		log.Info("NATS off (--nats=false)")
		return nil, nil
	}
	ns = &natsServing{o: o, log: log}
	if *o.url == "" {
		if ns.embedded, err = ns.startEmbedded(o); err != nil {
			return nil, err
		}
	} else if o.listenSet {
		log.Warn("--nats-listen is for the embedded server; with --nats-url it is ignored")
	}
	return ns, nil
}

// connect opens a connection to the embedded server or to --nats-url; what
// names its use in the server's connection list ("serving", "compile
// cache").
func (ns *natsServing) connect(ctx context.Context, what string) (*nats.Conn, error) {
	if ns.embedded != nil {
		copts := ns.o.connOptions(what, ns.log)
		copts.Token = "" // $XSERVE_NATS_TOKEN is for --nats-url
		return ns.embedded.Connect(ctx, copts)
	}
	return ns.o.natsConnFlags.connect(ctx, what, ns.log)
}

// serve serves the models on a connection of their own; onDemand says the
// Manager loads models on their first request (natsapi.Options.OnDemand).
func (ns *natsServing) serve(ctx context.Context, mgr *serving.Manager, limits httpapi.Options, onDemand bool) error {
	if ns == nil {
		return nil
	}
	nc, err := ns.connect(ctx, "serving")
	if err != nil {
		return err
	}
	o := ns.o
	replyPrefix, pendingBytes := "", 0
	var queued func() int64
	if ns.embedded != nil {
		// What the embedded server has queued for the connection counts
		// against the memory budget (natsapi.Options.Queued).
		queued = ns.embedded.Queued(nc)
		// The embedded server's clients get their replies in inboxes.
		replyPrefix = "_INBOX."
		// The subscriptions' queues hold as much as the embedded server
		// holds for the connection (1 GiB): past the budget's 200 MiB,
		// nats.go dropped requests unanswered (a slow consumer) while the
		// server would still have held them.
		pendingBytes = int(natsapi.DefaultMaxPending)
	}
	ns.srv, err = natsapi.New(ctx, mgr, natsapi.Options{
		Conn:                 nc,
		Prefix:               *o.prefix,
		ReplyPrefix:          replyPrefix,
		QueueGroup:           *o.queueGroup,
		Version:              buildVersion(),
		Workers:              *o.workers,
		QueueSize:            *o.queue,
		MaxDecompressedBytes: limits.MaxDecompressedBytes,
		Budget:               limits.Budget,
		MaxTensorElements:    limits.MaxTensorElements,
		CompressMinBytes:     limits.CompressMinBytes,
		PendingBytes:         pendingBytes,
		Queued:               queued,
		Durable:              *o.durable,
		AckWait:              *o.ackWait,
		MaxDeliver:           *o.maxDeliver,
		StreamReplicas:       *o.replicas,
		OnDemand:             onDemand,
		Logger:               ns.log,
	})
	if err != nil {
		nc.Close()
		return err
	}
	return nil
}

// startEmbedded starts the embedded NATS server. When --nats-listen was not
// given and its default port is taken (another xserve or NATS server on the
// machine), it listens on a free port instead and says so.
func (ns *natsServing) startEmbedded(o *natsOptions) (*natsapi.Embedded, error) {
	e, err := ns.startEmbeddedOn(o, *o.listen)
	if err != nil && !o.listenSet && errors.Is(err, syscall.EADDRINUSE) {
		host, _, _ := net.SplitHostPort(*o.listen)
		ns.log.Warn("the default NATS port is taken; the embedded NATS server listens on a free port instead (join the server there with --nats-url, or pick one with --nats-listen)", "taken", *o.listen)
		e, err = ns.startEmbeddedOn(o, net.JoinHostPort(host, "0"))
	}
	return e, err
}

// startEmbeddedOn starts the embedded NATS server on listen, with its
// JetStream store in --nats-store, else in the cache directory by port, else
// (a random port) in a temporary directory.
func (ns *natsServing) startEmbeddedOn(o *natsOptions, listen string) (*natsapi.Embedded, error) {
	store := *o.store
	tmp := ""
	if store == "" {
		_, port, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("--nats-listen %q: want host:port", listen)
		}
		if port == "0" {
			if tmp, err = os.MkdirTemp("", "xserve-nats-"); err != nil {
				return nil, err
			}
			store = tmp
		} else {
			store = filepath.Join(defaultCacheDir(), "nats", port)
		}
	}
	if err := os.MkdirAll(store, 0o755); err != nil {
		return nil, fmt.Errorf("--nats-store: %w", err)
	}
	var clients []string
	for _, c := range strings.Split(*o.clients, ",") {
		if c = strings.TrimSpace(c); c != "" {
			clients = append(clients, c)
		}
	}
	e, err := natsapi.StartEmbedded(natsapi.EmbeddedOptions{Listen: listen, StoreDir: store, MaxPayload: int32(o.maxPayload), Prefix: *o.prefix, Clients: clients, Logger: ns.log})
	if err != nil {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
		return nil, err
	}
	ns.tmpStore = tmp
	client := e.Clients()["client"]
	ns.log.Info("NATS server (embedded) listening on "+e.ClientURL()+"; clients sign in with the NKey seed in "+e.ClientNkeyFile()+" and read their replies under "+client.InboxPrefix,
		"nats_url", e.ClientURL(), "jetstream", store, "client_nkey", e.ClientNkeyFile(), "client_inbox_prefix", client.InboxPrefix)
	for _, name := range clients {
		u := e.Clients()[name]
		ns.log.Info("NATS client user "+name, "nkey", u.NkeyFile, "inbox_prefix", u.InboxPrefix)
	}
	return e, nil
}

// defaultCacheDir is $XSERVE_CACHE, else .cache.
func defaultCacheDir() string {
	if c := os.Getenv(pjrt.EnvCache); c != "" {
		return c
	}
	return ".cache"
}

// server returns the replica's NATS server, nil before serve.
func (ns *natsServing) server() *natsapi.Server {
	if ns == nil {
		return nil
	}
	return ns.srv
}

// shutdown drains the NATS subscriptions and answers the requests taken.
func (ns *natsServing) shutdown(ctx context.Context) error {
	if ns == nil || ns.srv == nil {
		return nil
	}
	return ns.srv.Shutdown(ctx)
}

// stopEmbedded stops the embedded server, after shutdown.
func (ns *natsServing) stopEmbedded() {
	if ns == nil || ns.embedded == nil {
		return
	}
	ns.embedded.Shutdown()
	ns.embedded = nil
	if ns.tmpStore != "" {
		os.RemoveAll(ns.tmpStore)
	}
}

// noteSet records which NATS flags were given, after parsing, and checks
// them before anything loads.
func (o *natsOptions) noteSet(fs *flag.FlagSet) error {
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "nats-listen" {
			o.listenSet = true
		}
	})
	switch {
	case !*o.enabled:
		return nil
	case *o.url == "" && (*o.creds != "" || *o.token != "" || *o.nkey != "" || *o.tlsCert != "" || *o.tlsKey != "" || *o.tlsCA != ""):
		return errors.New("serve: --nats-creds, --nats-token, --nats-nkey and --nats-tls-* are for joining a server with --nats-url; the embedded server makes its own credentials (its client.nk)")
	case o.natsConnFlags.check() != nil:
		return fmt.Errorf("serve: %w", o.natsConnFlags.check())
	case o.maxPayload > 64<<20:
		return fmt.Errorf("serve: --nats-max-payload %d: at most 64MiB", o.maxPayload)
	case *o.ackWait < 100*time.Millisecond || *o.maxDeliver < 1 || *o.queue < 1 || *o.workers < 0:
		return errors.New("serve: --nats-ack-wait must be at least 100ms, --nats-max-deliver and --nats-queue at least 1, --nats-workers not negative")
	case *o.replicas < 1 || *o.replicas > 5:
		return fmt.Errorf("serve: --nats-stream-replicas %d: want 1 to 5", *o.replicas)
	}
	return nil
}
