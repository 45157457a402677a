package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xserve/xserve/internal/testcerts"
)

func TestTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(path, []byte("# users\nuser-token\n\nroot-token admin\n"), 0o600)
	t.Setenv("XSERVE_TEST_TOKENS", "env-token,env-admin admin")
	tk, err := Load(path, "XSERVE_TEST_TOKENS")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		header string
		scope  Scope
		err    error
	}{
		{"Bearer user-token", ScopeInfer, nil},
		{"bearer root-token", ScopeAdmin, nil},
		{"Bearer env-token", ScopeInfer, nil},
		{"Bearer env-admin", ScopeAdmin, nil},
		{"", ScopeNone, ErrUnauthenticated},
		{"Bearer wrong", ScopeNone, ErrUnauthenticated},
		{"Basic dXNlcg==", ScopeNone, ErrUnauthenticated},
		{"Bearer user-tokenX", ScopeNone, ErrUnauthenticated},
	} {
		got, err := tk.Check(tc.header)
		if got != tc.scope || !errors.Is(err, tc.err) {
			t.Errorf("Check(%q) = %v, %v; want %v, %v", tc.header, got, err, tc.scope, tc.err)
		}
	}
	if err := tk.Require("Bearer user-token", ScopeAdmin); !errors.Is(err, ErrForbidden) {
		t.Errorf("Require admin with a user token: %v", err)
	}
	if tk, err := Load("", "XSERVE_TEST_UNSET"); tk != nil || err != nil {
		t.Errorf("Load of nothing: %v, %v", tk, err)
	}
	if _, err := Parse("a b c", "flag"); err == nil || !strings.Contains(err.Error(), "flag: entry 1") {
		t.Errorf("Parse of a bad entry: %v", err)
	}
	if _, err := Parse("# only a comment", "file"); err == nil || !strings.Contains(err.Error(), "holds no token") {
		t.Errorf("Parse of no token: %v", err)
	}
}

func TestServerTLS(t *testing.T) {
	c := testcerts.New(t)
	cfg, err := ServerTLS(TLSOptions{CertFile: c.ServerCert, KeyFile: c.ServerKey, ClientCAFile: c.CAFile})
	if err != nil || cfg == nil || cfg.ClientCAs == nil {
		t.Fatalf("ServerTLS: %v %v", cfg, err)
	}
	for _, o := range []TLSOptions{{CertFile: c.ServerCert}, {ClientCAFile: c.CAFile}, {CertFile: c.ServerKey, KeyFile: c.ServerKey}} {
		if _, err := ServerTLS(o); err == nil {
			t.Errorf("ServerTLS(%+v) accepted", o)
		}
	}
}
