package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Sentinel errors; the api packages map them to 401 / Unauthenticated and
// 403 / PermissionDenied.
var (
	// ErrUnauthenticated: no token, a malformed Authorization header, or a
	// token that is not known.
	ErrUnauthenticated = errors.New("auth: unauthenticated")
	// ErrForbidden: a known token without the scope the call needs.
	ErrForbidden = errors.New("auth: forbidden")
)

// Scope is what a token may do.
type Scope int

// Scopes, each including the ones before it.
const (
	// ScopeNone is no access.
	ScopeNone Scope = iota
	// ScopeInfer allows inference, metadata, configuration and statistics.
	ScopeInfer
	// ScopeAdmin also allows repository load and unload.
	ScopeAdmin
)

func (s Scope) String() string {
	switch s {
	case ScopeInfer:
		return "infer"
	case ScopeAdmin:
		return "admin"
	}
	return "none"
}

type entry struct {
	hash  [sha256.Size]byte
	scope Scope
}

// Tokens is a set of bearer tokens with their scopes; safe for concurrent
// use once built.
type Tokens struct {
	entries []entry
}

// Parse reads tokens in the package's text form; where names the source in
// errors.
func Parse(text, where string) (*Tokens, error) {
	t := &Tokens{}
	lines := strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == ',' })
	for i, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		e := entry{hash: sha256.Sum256([]byte(f[0])), scope: ScopeInfer}
		switch {
		case len(f) == 2 && f[1] == "admin":
			e.scope = ScopeAdmin
		case len(f) != 1:
			return nil, fmt.Errorf("auth: %s: entry %d: want a token optionally followed by the word admin, got %d words", where, i+1, len(f))
		}
		t.entries = append(t.entries, e)
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("auth: %s holds no token", where)
	}
	return t, nil
}

// Load reads tokens from the file path and from the environment variable
// env (either may be ""); nil, nil when neither gives any.
func Load(path, env string) (*Tokens, error) {
	var text strings.Builder
	var where []string
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("auth: tokens file: %w", err)
		}
		text.Write(b)
		text.WriteByte('\n')
		where = append(where, path)
	}
	if env != "" {
		if v := os.Getenv(env); v != "" {
			text.WriteString(v)
			where = append(where, "$"+env)
		}
	}
	if len(where) == 0 {
		return nil, nil
	}
	return Parse(text.String(), strings.Join(where, " and "))
}

// Check returns the scope of the token in an Authorization header value
// ("Bearer TOKEN"); ErrUnauthenticated when it is missing or unknown.
func (t *Tokens) Check(header string) (Scope, error) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if header == "" {
		return ScopeNone, fmt.Errorf("%w: no Authorization header (want Authorization: Bearer TOKEN)", ErrUnauthenticated)
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ScopeNone, fmt.Errorf("%w: the Authorization header is not of the form \"Bearer TOKEN\"", ErrUnauthenticated)
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	scope := ScopeNone
	for _, e := range t.entries { // no early exit: the time does not depend on which token matched
		if subtle.ConstantTimeCompare(h[:], e.hash[:]) == 1 {
			scope = max(scope, e.scope)
		}
	}
	if scope == ScopeNone {
		return ScopeNone, fmt.Errorf("%w: the bearer token is not known", ErrUnauthenticated)
	}
	return scope, nil
}

// Require checks the header against the scope a call needs.
func (t *Tokens) Require(header string, need Scope) error {
	got, err := t.Check(header)
	if err != nil {
		return err
	}
	if got < need {
		return fmt.Errorf("%w: this call needs a token with the %s scope", ErrForbidden, need)
	}
	return nil
}

// TLSOptions name the files of a server's TLS configuration.
type TLSOptions struct {
	// CertFile and KeyFile are the server's certificate chain and key (PEM).
	CertFile, KeyFile string
	// ClientCAFile, when set, requires clients to present a certificate
	// signed by one of these CAs (mutual TLS).
	ClientCAFile string
}

// ServerTLS builds the TLS configuration o names; nil, nil when o names no
// certificate.
func ServerTLS(o TLSOptions) (*tls.Config, error) {
	if o.CertFile == "" && o.KeyFile == "" {
		if o.ClientCAFile != "" {
			return nil, errors.New("auth: a client CA needs a server certificate and key too")
		}
		return nil, nil
	}
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, errors.New("auth: the TLS certificate and key go together")
	}
	cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("auth: TLS certificate %s and key %s: %w", o.CertFile, o.KeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if o.ClientCAFile != "" {
		pem, err := os.ReadFile(o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("auth: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("auth: client CA %s holds no PEM certificate", o.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
