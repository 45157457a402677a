package httpapi

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dialFrom connects to the server from the loopback address local.
func dialFrom(t *testing.T, ts *testServer, local string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reports whether the server closes c (a read ends other than
// by the client's own deadline) within d, reading what it sends.
func closedWithin(c net.Conn, d time.Duration) (string, bool) {
	c.SetReadDeadline(time.Now().Add(d))
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			var ne net.Error
			return string(got), !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// TestReadHeaderTimeout: a client sending a header byte now and then
// (slowloris) is closed after ReadHeaderTimeout, on a new connection and on
// a kept-alive one, whatever IdleTimeout is.
func TestReadHeaderTimeout(t *testing.T) {
	ts := startServer(t, Options{ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: time.Minute, ReadTimeout: time.Minute})
	trickle := func(c net.Conn, stop chan struct{}) {
		for _, b := range []byte("GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
		}
	}
	fresh := dialFrom(t, ts, "127.0.0.1")
	stop := make(chan struct{})
	defer close(stop)
	go trickle(fresh, stop)
	if _, closed := closedWithin(fresh, 5*time.Second); !closed {
		t.Error("a new connection trickling its headers was not closed within 5s (ReadHeaderTimeout 300ms)")
	}

	kept := dialFrom(t, ts, "127.0.0.1")
	if _, err := kept.Write([]byte("GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(kept), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("first request: %v %v", res, err)
	}
	res.Body.Close()
	go trickle(kept, stop)
	if _, closed := closedWithin(kept, 5*time.Second); !closed {
		t.Error("a kept-alive connection trickling its next headers was not closed within 5s (ReadHeaderTimeout 300ms, IdleTimeout 1m)")
	}
}

// TestMinReadRate: a body that stops coming is answered 408 naming
// MinReadRate once the bytes it sent are used up (each buys 1/MinReadRate
// of a second after the grace), and its connection closed; a body that
// comes at the rate is answered.
func TestMinReadRate(t *testing.T) {
	ts := startServer(t, Options{ReadHeaderTimeout: 300 * time.Millisecond, MinReadRate: 4000, ReadTimeout: time.Minute})
	body := `{"model": "echo", "inputs": {"x": {"dtype": "int32", "shape": [1], "data": [5]}}}`
	// Stalled in the part the server reads before the handler (2000 bytes
	// are due 0.8 s after the headers), and after it (8400 of 100000 sent:
	// the rest is due after 2.4 s).
	for _, tc := range []struct {
		length int
		sent   string
		want   string
	}{
		{2000, body[:10], "bytes/s or faster after that long (MinReadRate)"},
		{100000, body + strings.Repeat(" ", 8400-len(body)), "slower than the limit of 4000 bytes/s (MinReadRate)"},
	} {
		c := dialFrom(t, ts, "127.0.0.1")
		if _, err := c.Write([]byte("POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(tc.length) + "\r\n\r\n" + tc.sent)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got, closed := closedWithin(c, 15*time.Second)
		if !closed || !strings.HasPrefix(got, "HTTP/1.1 408") || !strings.Contains(got, tc.want) {
			t.Errorf("a body stalled after %d of %d bytes: closed %v after %v, got %q", len(tc.sent), tc.length, closed, time.Since(start), got)
		}
	}

	// 3000 bytes at 5000 bytes/s.
	c := dialFrom(t, ts, "127.0.0.1")
	padded := body[:len(body)-1] + strings.Repeat(" ", 3000-len(body)) + "}"
	if _, err := c.Write([]byte("POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 3000\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(padded); i += 500 {
		time.Sleep(100 * time.Millisecond)
		if _, err := c.Write([]byte(padded[i:min(i+500, len(padded))])); err != nil {
			t.Fatal(err)
		}
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("a body at the rate: %v %v", res, err)
	}
	res.Body.Close()
}

// TestMaxConnsPerIP: past MaxConnsPerIP, a new connection from the same
// address is answered 429 and closed, while another address still gets
// its connections.
func TestMaxConnsPerIP(t *testing.T) {
	ts := startServer(t, Options{MaxConns: 10, MaxConnsPerIP: 3})
	for range 3 {
		dialFrom(t, ts, "127.0.0.1")
	}
	time.Sleep(100 * time.Millisecond) // the server has counted them
	over := dialFrom(t, ts, "127.0.0.1")
	if got, closed := closedWithin(over, 5*time.Second); !closed || !strings.HasPrefix(got, "HTTP/1.1 429") {
		t.Errorf("a 4th connection from 127.0.0.1: closed %v, got %q", closed, got)
	}
	other := dialFrom(t, ts, "127.0.0.2")
	if _, err := other.Write([]byte("GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(other), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("a connection from 127.0.0.2: %v %v", res, err)
	}
	res.Body.Close()
}
