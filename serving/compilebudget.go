package serving

import (
	"context"
	"sync"
	"time"
)

// DefaultExactCompilesPerMinute is Options.ExactCompilesPerMinute when
// left at 0.
const DefaultExactCompilesPerMinute = 30

// compileBudget bounds the compiles of exact-size executables (sizes no
// bucket holds) across the server: a token bucket of perMinute tokens a
// minute holding at most perMinute. A compile beyond the budget waits for
// its token; the requests waiting for that executable wait with it, each
// bounded by its own deadline, and none is refused for it.
type compileBudget struct {
	perMinute float64

	mu     sync.Mutex // guards tokens, last
	tokens float64
	last   time.Time
}

func newCompileBudget(perMinute int) *compileBudget {
	return &compileBudget{perMinute: float64(perMinute), tokens: float64(perMinute), last: time.Now()}
}

// wait takes a token, waiting until one accrues or ctx ends.
func (b *compileBudget) wait(ctx context.Context) error {
	for {
		b.mu.Lock()
		now := time.Now()
		b.tokens = min(b.perMinute, b.tokens+now.Sub(b.last).Minutes()*b.perMinute)
		b.last = now
		if b.tokens >= 1 {
			b.tokens--
			b.mu.Unlock()
			return nil
		}
		need := time.Duration((1 - b.tokens) / b.perMinute * float64(time.Minute))
		b.mu.Unlock()
		t := time.NewTimer(need)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}
