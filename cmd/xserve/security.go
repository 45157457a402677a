package main

import (
	"flag"
	"strings"

	"github.com/xserve/xserve/api/auth"
	grpcapi "github.com/xserve/xserve/api/grpc"
	httpapi "github.com/xserve/xserve/api/http"
)

// envAuthTokens is the environment variable holding bearer tokens, in the
// form of --auth-tokens-file (entries separated by newlines or commas).
const envAuthTokens = "XSERVE_AUTH_TOKENS"

// securityFlags are serve's TLS, auth and CORS flags, shared by the HTTP
// and gRPC APIs.
type securityFlags struct {
	tls        auth.TLSOptions
	tokensFile string
	openHealth bool
	cors       string
}

func newSecurityFlags(fs *flag.FlagSet) *securityFlags {
	f := &securityFlags{}
	fs.StringVar(&f.tls.CertFile, "tls-cert", "", "TLS certificate chain (PEM) for HTTP and gRPC; with --tls-key")
	fs.StringVar(&f.tls.KeyFile, "tls-key", "", "TLS private key (PEM) for HTTP and gRPC")
	fs.StringVar(&f.tls.ClientCAFile, "tls-client-ca", "", "CA certificates (PEM) that client certificates must chain to (mutual TLS)")
	fs.StringVar(&f.tokensFile, "auth-tokens-file", "", "bearer tokens, one a line, \"TOKEN admin\" for the admin scope (repository load/unload); also read from $"+envAuthTokens)
	fs.BoolVar(&f.openHealth, "auth-open-health", false, "with tokens: leave health checks (/v2/health/*, /v2/models/{m}/ready, gRPC ServerLive/ServerReady/ModelReady) and /metrics open without a token")
	fs.StringVar(&f.cors, "cors-origins", "", "comma-separated origins browsers may call the HTTP API from (\"*\" for any)")
	return f
}

// apply loads the certificates and tokens and sets them in both APIs'
// options.
func (f *securityFlags) apply(h *httpapi.Options, g *grpcapi.Options) error {
	cfg, err := auth.ServerTLS(f.tls)
	if err != nil {
		return err
	}
	tokens, err := auth.Load(f.tokensFile, envAuthTokens)
	if err != nil {
		return err
	}
	h.TLS, h.Auth, h.OpenHealth = cfg, tokens, f.openHealth
	for _, o := range strings.Split(f.cors, ",") {
		if o = strings.TrimSpace(o); o != "" {
			h.CORSOrigins = append(h.CORSOrigins, o)
		}
	}
	if cfg != nil {
		g.TLS = cfg.Clone()
	}
	g.Auth, g.OpenHealth = tokens, f.openHealth
	return nil
}
