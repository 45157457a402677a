package natsapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Defaults of EmbeddedOptions.
const (
	DefaultListen     = "127.0.0.1:4222"
	DefaultMaxPayload = 8 << 20
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
	// ReadyTimeout bounds the wait for the server to accept connections;
	// default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log; nil means slog.Default(). Its
	// notices are logged at debug level, warnings and errors as such.
	Logger *slog.Logger
}

// Embedded is a NATS server (github.com/nats-io/nats-server) running in
// this process, with JetStream enabled.
type Embedded struct {
	srv *server.Server
	log *slog.Logger
}

// StartEmbedded starts a NATS server in the process and waits until it
// accepts connections.
func StartEmbedded(opts EmbeddedOptions) (*Embedded, error) {
	if opts.Listen == "" {
		opts.Listen = DefaultListen
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = DefaultMaxPayload
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
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
		JetStream:  true,
		StoreDir:   opts.StoreDir,
		NoSigs:     true,
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
	return &Embedded{srv: srv, log: opts.Logger}, nil
}

// ClientURL is the URL clients connect to, e.g. nats://127.0.0.1:4222.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Addr is the address the server listens on.
func (e *Embedded) Addr() net.Addr { return e.srv.Addr() }

// Server returns the nats-server instance.
func (e *Embedded) Server() *server.Server { return e.srv }

// Connect returns a connection to the server that does not go through the
// network (nats.InProcessServer), with opts' handlers.
func (e *Embedded) Connect(ctx context.Context, opts ConnOptions) (*nats.Conn, error) {
	opts.inProcess = e.srv
	return Connect(ctx, e.ClientURL(), opts)
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
