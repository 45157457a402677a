package natsapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// ConnOptions configure Connect. The zero value of every field means its
// default.
type ConnOptions struct {
	// Name is the connection's name as the server reports it; default
	// "xserve".
	Name string
	// CredsFile is a NATS credentials file (a user JWT and its NKey seed).
	CredsFile string
	// Token is an authentication token.
	Token string
	// NkeyFile is a file holding an NKey user seed, such as the embedded
	// server's client seed (Embedded.ClientNkeyFile).
	NkeyFile string
	// TLSCert and TLSKey are a client certificate and its key (PEM files)
	// for servers that require one; TLSCA is the CA bundle that signs the
	// server's certificate. Any of them turns TLS on.
	TLSCert, TLSKey, TLSCA string
	// InboxPrefix is the prefix of the connection's reply inboxes
	// (nats.CustomInboxPrefix); default: the embedded server's inbox prefix
	// of the NkeyFile's user (InboxPrefix of its public key), else
	// nats.go's "_INBOX".
	InboxPrefix string
	// ConnectTimeout bounds one connection attempt; default 5s.
	ConnectTimeout time.Duration
	// ReconnectWait is the first pause between attempts (initial connect
	// and reconnects); it doubles per attempt up to MaxReconnectWait, with
	// random jitter. Defaults 250ms and 5s.
	ReconnectWait, MaxReconnectWait time.Duration
	// Logger receives disconnects, reconnects and asynchronous errors; nil
	// means slog.Default().
	Logger *slog.Logger

	inProcess nats.InProcessConnProvider
	nkey      nkeys.KeyPair // the embedded server's serving user
}

// Connect connects to the NATS server or cluster at urls (a comma-separated
// list of nats:// or tls:// URLs), retrying with backoff until it succeeds
// or ctx ends; an authentication failure fails at once. The connection then
// reconnects forever (exponential backoff with jitter, the subscriptions
// restored), and buffers what is published meanwhile.
func Connect(ctx context.Context, urls string, opts ConnOptions) (*nats.Conn, error) {
	opts.Name = cmp.Or(opts.Name, "xserve")
	opts.ConnectTimeout = cmp.Or(opts.ConnectTimeout, 5*time.Second)
	opts.ReconnectWait = cmp.Or(opts.ReconnectWait, 250*time.Millisecond)
	opts.MaxReconnectWait = cmp.Or(opts.MaxReconnectWait, 5*time.Second)
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	log := opts.Logger
	if (opts.TLSCert == "") != (opts.TLSKey == "") {
		return nil, errors.New("natsapi: a TLS client certificate needs both its certificate and its key file")
	}
	if n := btoi(opts.CredsFile != "") + btoi(opts.Token != "") + btoi(opts.NkeyFile != ""); n > 1 {
		return nil, errors.New("natsapi: give one of a credentials file, a token or an NKey seed file")
	}
	backoff := func(attempt int) time.Duration {
		d := opts.ReconnectWait << min(attempt, 16)
		d = min(d, opts.MaxReconnectWait)
		return d/2 + rand.N(d/2+1) // jitter: half to the whole of it
	}
	nopts := []nats.Option{
		nats.Name(opts.Name),
		nats.Timeout(opts.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(backoff),
		// A server that vanished without closing the connection is noticed
		// within a minute.
		nats.PingInterval(20 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName())
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("NATS error", "subject", subject, "err", err)
		}),
	}
	creds, err := credentialOptions(opts)
	if err != nil {
		return nil, err
	}
	nopts = append(nopts, creds...)
	for attempt := 0; ; attempt++ {
		nc, err := nats.Connect(urls, nopts...)
		if err == nil {
			return nc, nil
		}
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return nil, fmt.Errorf("natsapi: connect to %s: %w", redact(urls), err)
		}
		wait := backoff(attempt)
		log.Warn("cannot connect to NATS; retrying", "url", redact(urls), "err", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("natsapi: connect to %s: %w (last error: %v)", redact(urls), ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// credentialOptions are the nats.go options of opts' credentials, inbox
// prefix, TLS files and in-process server.
func credentialOptions(opts ConnOptions) ([]nats.Option, error) {
	var out []nats.Option
	if opts.CredsFile != "" {
		out = append(out, nats.UserCredentials(opts.CredsFile))
	}
	if opts.Token != "" {
		out = append(out, nats.Token(opts.Token))
	}
	if opts.NkeyFile != "" {
		o, err := nkeyFileOptions(opts.NkeyFile, opts.InboxPrefix == "")
		if err != nil {
			return nil, err
		}
		out = append(out, o...)
	}
	if opts.InboxPrefix != "" {
		out = append(out, nats.CustomInboxPrefix(opts.InboxPrefix))
	}
	if kp := opts.nkey; kp != nil {
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("natsapi: nkey: %w", err)
		}
		out = append(out, nats.Nkey(pub, kp.Sign))
	}
	if opts.TLSCert != "" {
		out = append(out, nats.ClientCert(opts.TLSCert, opts.TLSKey))
	}
	if opts.TLSCA != "" {
		out = append(out, nats.RootCAs(opts.TLSCA))
	}
	if opts.inProcess != nil {
		out = append(out, nats.InProcessServer(opts.inProcess))
	}
	return out, nil
}

// nkeyFileOptions signs in with the NKey seed in file and, with inbox, uses
// its user's inbox prefix on the embedded server (InboxPrefix).
func nkeyFileOptions(file string, inbox bool) ([]nats.Option, error) {
	o, err := nats.NkeyOptionFromSeed(file)
	if err != nil {
		return nil, fmt.Errorf("natsapi: NKey seed file: %w", err)
	}
	if !inbox {
		return []nats.Option{o}, nil
	}
	pub, err := seedPublicKey(file)
	if err != nil {
		return nil, err
	}
	return []nats.Option{o, nats.CustomInboxPrefix(InboxPrefix(pub))}, nil
}

// seedPublicKey is the public key of the NKey seed in file.
func seedPublicKey(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("natsapi: NKey seed file: %w", err)
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return "", fmt.Errorf("natsapi: NKey seed file %s: %w", file, err)
	}
	return kp.PublicKey()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// redact hides the passwords and tokens of a comma-separated list of URLs,
// for messages.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
