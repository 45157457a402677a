package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// shutdownConnGrace is how long Shutdown lets a connection that has not
// started a request yet send one before it closes the connection.
const shutdownConnGrace = 500 * time.Millisecond

// freshConns is the set of connections that have not yet had a request
// reach a handler. fasthttp's Shutdown closes idle keep-alive connections,
// but a new connection waits for its first request as "active", for up to
// ReadTimeout: a client that opens a connection ahead of need (Go's
// http.Transport keeps one it dialled for a request another connection
// took; browsers preconnect) held a shutdown for the whole minute.
type freshConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// track is the fasthttp ConnState hook: a connection is fresh from
// accept until it goes idle (after a request) or closes.
func (f *freshConns) track(c net.Conn, st fasthttp.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch st {
	case fasthttp.StateNew:
		if f.conns == nil {
			f.conns = map[net.Conn]struct{}{}
		}
		f.conns[c] = struct{}{}
	case fasthttp.StateIdle, fasthttp.StateClosed, fasthttp.StateHijacked:
		delete(f.conns, c)
	}
}

// started records that a request on c reached a handler.
func (f *freshConns) started(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// closeAll closes the fresh connections.
func (f *freshConns) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
		delete(f.conns, c)
	}
}

// closeWhileShutdown closes the fresh connections, from shutdownConnGrace
// after it starts, every 50 ms until done or ctx ends.
func (f *freshConns) closeWhileShutdown(ctx context.Context, done <-chan struct{}) {
	next := time.NewTimer(shutdownConnGrace)
	defer next.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-next.C:
		}
		f.closeAll()
		next.Reset(50 * time.Millisecond)
	}
}

// ErrSlowBody: a request body came slower than Options.MinReadRate;
// answered 408 and the connection closed.
var ErrSlowBody = errors.New("httpapi: request body too slow")

// pacedReader reads a request body that must arrive at MinReadRate or
// faster: before each read it sets the connection's read deadline to when
// the bytes read so far were due at that rate, after a grace of
// ReadHeaderTimeout, and never later than the body's ReadTimeout. A client
// trickling a body holds its connection for the grace and little more.
type pacedReader struct {
	r     io.Reader
	conn  net.Conn
	start time.Time
	grace time.Duration
	rate  int64     // bytes per second
	limit time.Time // the body's own deadline
	n     int64     // bytes read so far
}

func (p *pacedReader) Read(b []byte) (int, error) {
	due := p.start.Add(p.grace + time.Duration(float64(p.n)/float64(p.rate)*float64(time.Second)))
	if due.After(p.limit) {
		due = p.limit
	}
	p.conn.SetReadDeadline(due)
	n, err := p.r.Read(b)
	p.n += int64(n)
	var ne net.Error
	if err != nil && (errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()) {
		if due.Before(p.limit) {
			return n, fmt.Errorf("%w: %d bytes in %v, slower than the limit of %d bytes/s (MinReadRate)", ErrSlowBody, p.n, time.Since(p.start).Round(time.Millisecond), p.rate)
		}
		return n, fmt.Errorf("%w: %d bytes in %v, more than the limit of %v (ReadTimeout)", ErrSlowBody, p.n, time.Since(p.start).Round(time.Millisecond), p.limit.Sub(p.start))
	}
	return n, err
}

// bodyDeadline is the fasthttp HeaderReceived hook: the deadline of the
// part of the body fasthttp reads before the handler runs (up to 8 KiB) is
// ReadTimeout, or sooner at MinReadRate; the handler paces the rest
// (bodyStream).
func (s *Server) bodyDeadline(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	d := s.opts.ReadTimeout
	if n := h.ContentLength(); s.opts.MinReadRate > 0 && n > 0 {
		due := s.opts.ReadHeaderTimeout + time.Duration(float64(min(n, 8<<10))/float64(s.opts.MinReadRate)*float64(time.Second))
		d = min(d, due)
	}
	return fasthttp.RequestConfig{ReadTimeout: d}
}

// bodyStream returns the request's body stream (nil when fasthttp read the
// body itself), paced by MinReadRate and ReadTimeout from start, when the
// handler began.
func (s *Server) bodyStream(c *fiber.Ctx, start time.Time) io.Reader {
	r := c.Context().Request.BodyStream()
	if r == nil {
		return nil
	}
	conn := c.Context().Conn()
	if s.opts.MinReadRate < 0 || conn == nil {
		return r
	}
	return &pacedReader{r: r, conn: conn, start: start, grace: s.opts.ReadHeaderTimeout, rate: s.opts.MinReadRate, limit: start.Add(s.opts.ReadTimeout)}
}
