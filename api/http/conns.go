package httpapi

import (
	"context"
	"net"
	"sync"
	"time"

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
