package httpapi

import (
	"net"
	"sync"
	"time"
)

// tooManyFromIP is the answer to a connection past Options.MaxConnsPerIP.
const tooManyFromIP = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 40\r\nConnection: close\r\n\r\ntoo many connections from your address\r\n"

// perIPListener bounds the open connections from one IP address. fasthttp's
// own MaxConnsPerIP wrapper drops its connection on Close, so a connection
// closed by one goroutine (a drain ending the connections that never sent
// a request) while fasthttp's still answers it crashed the process; this
// one's connections stay whole after Close.
type perIPListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[string]int
}

func newPerIPListener(ln net.Listener, max int) *perIPListener {
	return &perIPListener{Listener: ln, max: max, open: map[string]int{}}
}

// Accept returns the next connection whose address is under the limit;
// one over it is answered 429 and closed.
func (l *perIPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := hostOf(c.RemoteAddr())
		l.mu.Lock()
		ok := l.open[ip] < l.max
		if ok {
			l.open[ip]++
		}
		l.mu.Unlock()
		if ok {
			return &perIPConn{Conn: c, l: l, ip: ip}, nil
		}
		go refuse(c)
	}
}

// refuse answers c 429 and closes it, within a second.
func refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write([]byte(tooManyFromIP))
	_ = c.Close()
}

func (l *perIPListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

func hostOf(a net.Addr) string {
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// perIPConn counts against its address until closed, once.
type perIPConn struct {
	net.Conn
	l    *perIPListener
	ip   string
	once sync.Once
}

func (c *perIPConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}
