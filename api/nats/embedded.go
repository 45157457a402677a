package natsapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Defaults of EmbeddedOptions.
const (
	DefaultListen     = "127.0.0.1:4222"
	DefaultMaxPayload = 8 << 20
	DefaultMaxPending = 1 << 30
)

// EmbeddedOptions configure an embedded NATS server. The zero value of
// every field means its default.
type EmbeddedOptions struct {
	// Listen is the client address, host:port; port 0 picks a free one.
	// Default 127.0.0.1:4222 (loopback only: other machines join with
	// their own server in a cluster, not through this one).
	Listen string
	// StoreDir is where JetStream keeps its streams (required: the durable
	// requests live there).
	StoreDir string
	// MaxPayload is the largest message, request or reply; default 8 MiB,
	// at most 64 MiB.
	MaxPayload int32
	// MaxPending is the most bytes the server holds for one connection
	// that has not read them yet; past it the connection is closed as a
	// slow consumer. Default 1 GiB: xserve's own connection receives every
	// request, and a burst of large ones arrives faster than it reads them
	// on a busy machine (at nats-server's 64 MiB, a hundred 7.7 MB requests
	// from ten clients had it dropped, and 85 requests lost).
	MaxPending int64
	// ReadyTimeout bounds the wait for the server to accept connections;
	// default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log; nil means slog.Default(). Its
	// notices are logged at debug level, warnings and errors as such.
	Logger *slog.Logger
	// Prefix is the subject prefix of the xserve servers and clients the
	// embedded server carries (Options.Prefix); the users' permissions are
	// limited to its subjects (see auth.go). Default DefaultPrefix.
	Prefix string
	// ClientNkeyFile is the file holding the client user's NKey seed
	// (mode 0600), made when missing and reused when present; default
	// StoreDir/client.nk.
	ClientNkeyFile string
	// Clients names more client users, one per application that must not
	// read another's replies: each has its own seed file,
	// StoreDir/clients/NAME.nk (made when missing), and its own inbox
	// prefix (see auth.go).
	Clients []string
	// NoAuth lets anyone connect without credentials, with every
	// permission: a rogue local process could answer requests, read all
	// traffic and delete the durable stream. For trusted setups only.
	NoAuth bool

	// admin, set by tests, is a user with every permission: an operator
	// deleting the durable consumer.
	admin nkeys.KeyPair
}

// setDefaults fills the fields left at their zero value.
func (o *EmbeddedOptions) setDefaults() {
	o.Listen = cmp.Or(o.Listen, DefaultListen)
	o.MaxPayload = cmp.Or(o.MaxPayload, DefaultMaxPayload)
	o.ReadyTimeout = cmp.Or(o.ReadyTimeout, 10*time.Second)
	o.MaxPending = cmp.Or(o.MaxPending, DefaultMaxPending)
	o.Logger = cmp.Or(o.Logger, slog.Default())
}

// Embedded is a NATS server (github.com/nats-io/nats-server) running in
// this process, with JetStream enabled.
type Embedded struct {
	srv        *server.Server
	log        *slog.Logger
	serving    *nkeyUser // nil with NoAuth
	clientFile string    // "" with NoAuth
	// clients are the client users by name ("client" and
	// EmbeddedOptions.Clients); nil with NoAuth.
	clients map[string]ClientUser
}

// ClientUser is a client user of the embedded server.
type ClientUser struct {
	// NkeyFile holds its seed (ConnOptions.NkeyFile).
	NkeyFile string
	// InboxPrefix is the prefix of the only subjects it may subscribe to:
	// its replies must go there (nats.CustomInboxPrefix; Connect sets it
	// from the seed).
	InboxPrefix string
}

// StartEmbedded starts a NATS server in the process and waits until it
// accepts connections.
func StartEmbedded(opts EmbeddedOptions) (*Embedded, error) {
	opts.setDefaults()
	if opts.StoreDir == "" {
		return nil, errors.New("natsapi: EmbeddedOptions.StoreDir is required (JetStream keeps the durable requests there)")
	}
	if opts.MaxPayload < 0 || opts.MaxPayload > 64<<20 {
		return nil, fmt.Errorf("natsapi: EmbeddedOptions.MaxPayload is %d, want (0, 64 MiB]", opts.MaxPayload)
	}
	host, portStr, err := net.SplitHostPort(opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("natsapi: NATS listen address %q: want host:port, e.g. 127.0.0.1:4222", opts.Listen)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("natsapi: NATS listen address %q: bad port", opts.Listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else {
		// The server only logs a listen failure; say it clearly instead.
		ln, err := net.Listen("tcp", opts.Listen)
		if err != nil {
			return nil, fmt.Errorf("natsapi: NATS cannot listen on %s: %w (another NATS server or xserve there? join it with --nats-url nats://%s, or listen elsewhere)", opts.Listen, err, opts.Listen)
		}
		ln.Close()
	}
	sopts := &server.Options{
		ServerName: "xserve-embedded",
		Host:       host,
		Port:       port,
		MaxPayload: opts.MaxPayload,
		MaxPending: opts.MaxPending,
		JetStream:  true,
		StoreDir:   opts.StoreDir,
		NoSigs:     true,
	}
	e := &Embedded{log: opts.Logger}
	if err := e.authorize(sopts, &opts); err != nil {
		return nil, err
	}
	if !isLoopback(host) {
		what := "clients need the client seed " + e.clientFile
		if opts.NoAuth {
			what = "and takes anyone, without credentials (NoAuth)"
		}
		opts.Logger.Warn("the embedded NATS server listens beyond loopback, on "+opts.Listen+"; "+what+"; traffic is not encrypted (use --nats-url with a TLS NATS server across machines)", "listen", opts.Listen)
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("natsapi: embedded NATS server: %w", err)
	}
	lg := &serverLogger{log: opts.Logger}
	srv.SetLoggerV2(lg, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(opts.ReadyTimeout) {
		srv.Shutdown()
		if msg := lg.fatal(); msg != "" {
			return nil, fmt.Errorf("natsapi: embedded NATS server: %s", msg)
		}
		return nil, fmt.Errorf("natsapi: embedded NATS server on %s not ready within %v", opts.Listen, opts.ReadyTimeout)
	}
	e.srv = srv
	return e, nil
}

// authorize adds the serving and client users to sopts (see auth.go).
func (e *Embedded) authorize(sopts *server.Options, opts *EmbeddedOptions) error {
	if opts.NoAuth {
		opts.Logger.Warn("the embedded NATS server takes clients without credentials (NoAuth)")
		return nil
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !validSubject(opts.Prefix) {
		return fmt.Errorf("natsapi: EmbeddedOptions.Prefix %q is not a subject of literal tokens", opts.Prefix)
	}
	if opts.ClientNkeyFile == "" {
		opts.ClientNkeyFile = filepath.Join(opts.StoreDir, "client.nk")
	}
	files := map[string]string{"client": opts.ClientNkeyFile}
	for _, name := range opts.Clients {
		if !validClientName(name) || files[name] != "" {
			return fmt.Errorf("natsapi: EmbeddedOptions.Clients: %q is not a new name of letters, digits, '-' and '_'", name)
		}
		files[name] = filepath.Join(opts.StoreDir, "clients", name+".nk")
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return fmt.Errorf("natsapi: nkey: %w", err)
	}
	if e.serving, err = newNkeyUser(kp); err != nil {
		return err
	}
	sopts.Nkeys = []*server.NkeyUser{{Nkey: e.serving.pub, Permissions: servingPermissions(opts.Prefix, e.serving.pub)}}
	e.clients = map[string]ClientUser{}
	for name, file := range files {
		u, err := loadOrCreateSeed(file)
		if err != nil {
			return err
		}
		sopts.Nkeys = append(sopts.Nkeys, &server.NkeyUser{Nkey: u.pub, Permissions: clientPermissions(opts.Prefix, u.pub)})
		e.clients[name] = ClientUser{NkeyFile: file, InboxPrefix: InboxPrefix(u.pub)}
	}
	if opts.admin != nil {
		pub, err := opts.admin.PublicKey()
		if err != nil {
			return fmt.Errorf("natsapi: nkey: %w", err)
		}
		sopts.Nkeys = append(sopts.Nkeys, &server.NkeyUser{Nkey: pub})
	}
	e.clientFile = opts.ClientNkeyFile
	return nil
}

// validClientName reports whether name can name a client user (and its
// seed file).
func validClientName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Clients are the client users by name: "client" (ClientNkeyFile) and
// EmbeddedOptions.Clients; nil when the server takes anyone.
func (e *Embedded) Clients() map[string]ClientUser { return e.clients }

// ClientNkeyFile is the file with the client user's NKey seed, for
// ConnOptions.NkeyFile (nats --nkey); "" when the server takes anyone.
func (e *Embedded) ClientNkeyFile() string { return e.clientFile }

// ClientURL is the URL clients connect to, e.g. nats://127.0.0.1:4222.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Addr is the address the server listens on.
func (e *Embedded) Addr() net.Addr { return e.srv.Addr() }

// Server returns the nats-server instance.
func (e *Embedded) Server() *server.Server { return e.srv }

// Connect returns a connection to the server that does not go through the
// network (nats.InProcessServer), with opts' handlers, as the serving user.
func (e *Embedded) Connect(ctx context.Context, opts ConnOptions) (*nats.Conn, error) {
	opts.inProcess = e.srv
	if e.serving != nil {
		opts.nkey = e.serving.kp
		opts.InboxPrefix = InboxPrefix(e.serving.pub)
	}
	return Connect(ctx, e.ClientURL(), opts)
}

// Queued returns, for nc (connected to e), a function that reports the
// bytes e holds for nc that nc has not read yet: messages on their way to
// its subscriptions (Options.Queued). It reports 0 once nc reconnects.
func (e *Embedded) Queued(nc *nats.Conn) func() int64 {
	cid, err := nc.GetClientID()
	if err != nil {
		return nil
	}
	return func() int64 {
		cz, err := e.srv.Connz(&server.ConnzOptions{CID: cid})
		if err != nil || len(cz.Conns) == 0 {
			return 0
		}
		return int64(cz.Conns[0].Pending)
	}
}

// Shutdown stops the server and waits until it has.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// serverLogger routes the NATS server's log into slog.
type serverLogger struct {
	log       *slog.Logger
	mu        sync.Mutex
	lastFatal string
}

func (l *serverLogger) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastFatal
}

func (l *serverLogger) Noticef(format string, v ...any) {
	l.log.Debug("nats-server: " + fmt.Sprintf(format, v...))
}
func (l *serverLogger) Warnf(format string, v ...any) {
	l.log.Warn("nats-server: " + fmt.Sprintf(format, v...))
}
func (l *serverLogger) Errorf(format string, v ...any) {
	l.log.Error("nats-server: " + fmt.Sprintf(format, v...))
}
func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	l.lastFatal = msg
	l.mu.Unlock()
	l.log.Error("nats-server: " + msg)
}
func (l *serverLogger) Debugf(format string, v ...any) {
	l.log.Debug("nats-server: " + fmt.Sprintf(format, v...))
}
func (l *serverLogger) Tracef(format string, v ...any) {}
