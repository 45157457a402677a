package loadtest

import (
	"context"
	"errors"
	"testing"
)

func TestLoopbackGuard(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080", true},
		{"http://127.1.2.3:8080", true},
		{"http://[::1]:8080", true},
		{"http://[::ffff:127.0.0.1]:8080", true},
		{"http://localhost:8080", true},
		{"http://10.0.0.1:8080", false},
		{"http://0.0.0.0:8080", false},
		{"http://[::]:8080", false},
		{"http://192.168.1.10", false},
		{"https://8.8.8.8/", false},
		{"http://[2001:db8::1]:80", false},
		{"http://host.invalid:8080", false},
	} {
		err := CheckLoopbackURL(context.Background(), tc.url)
		if tc.ok && err != nil {
			t.Errorf("CheckLoopbackURL(%s) = %v, want ok", tc.url, err)
		}
		if !tc.ok && !errors.Is(err, ErrNotLoopback) {
			t.Errorf("CheckLoopbackURL(%s) = %v, want ErrNotLoopback", tc.url, err)
		}
		_, err = NewHTTPTarget(context.Background(), HTTPOptions{URL: tc.url, Model: "m"})
		if !tc.ok && !errors.Is(err, ErrNotLoopback) {
			t.Errorf("NewHTTPTarget(%s) = %v, want ErrNotLoopback", tc.url, err)
		}
	}
}

func TestAllowRemote(t *testing.T) {
	tg, err := NewHTTPTarget(context.Background(), HTTPOptions{URL: "http://10.0.0.1:8080", Model: "m", AllowRemote: true})
	if err != nil {
		t.Fatalf("NewHTTPTarget with AllowRemote: %v", err)
	}
	tg.Close() // no request sent
}

// TestDialGuard checks the dial-time check that backs the URL check (a name
// may resolve differently when dialed).
func TestDialGuard(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:80":  true,
		"127.9.9.9:80":  true,
		"[::1]:80":      true,
		"10.0.0.1:80":   false,
		"[fe80::1]:80":  false,
		"0.0.0.0:80":    false,
		"not-an-ip:80":  false,
		"93.184.1.1:80": false,
	} {
		err := loopbackOnly("tcp", addr, nil)
		if ok != (err == nil) || (!ok && !errors.Is(err, ErrNotLoopback)) {
			t.Errorf("loopbackOnly(%s) = %v, want ok=%v", addr, err, ok)
		}
	}
}
