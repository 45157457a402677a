package conformance

import (
	"context"
	"sync"
)

// RunAll runs cases on workers goroutines (at least one) and returns their
// results in the order of cases. done, when not nil, is called once per
// finished case, from one goroutine at a time, in the order cases finish.
// Cases share the runner's PJRT client, importer and lowerer, which are
// safe for concurrent use; each compiles and runs its own programs.
func (r *Runner) RunAll(ctx context.Context, cases []Case, workers int, done func(Result)) []Result {
	workers = max(1, min(workers, len(cases)))
	results := make([]Result, len(cases))
	next := make(chan int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res := r.Run(ctx, cases[i])
				results[i] = res
				if done != nil {
					mu.Lock()
					done(res)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range cases {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}
