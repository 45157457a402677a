package batching_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/xserve/xserve/batching"
)

// A Runner sees whole batches; here it upper-cases each request's payload.
// Three concurrent requests of 1, 1 and 2 rows fill one batch of 4 rows.
func Example() {
	runner := batching.RunnerFunc(func(ctx context.Context, b *batching.Batch) error {
		fmt.Printf("batch %q: %d requests, %d rows, padded to %d\n", b.Key, len(b.Items), b.Rows, b.PaddedRows)
		for _, it := range b.Items {
			it.SetResult(strings.ToUpper(it.Payload.(string)))
		}
		return nil
	})
	b, err := batching.New(batching.Options{Buckets: []int{1, 2, 4, 8}, MaxBatchSize: 4, MaxQueueDelay: time.Minute}, runner)
	if err != nil {
		panic(err)
	}

	var (
		mu      sync.Mutex
		results []string
		wg      sync.WaitGroup
	)
	for _, req := range []struct {
		rows    int
		payload string
	}{{1, "a"}, {1, "b"}, {2, "cd"}} {
		wg.Go(func() {
			res, err := b.Submit(context.Background(), "model/1", req.rows, 0, req.payload)
			if err != nil {
				panic(err)
			}
			mu.Lock()
			results = append(results, res.(string))
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := b.Shutdown(context.Background()); err != nil {
		panic(err)
	}
	sort.Strings(results)
	fmt.Println(results)
	st := b.Stats().Keys["model/1"]
	fmt.Printf("submitted %d, completed %d, batches %d\n", st.Submitted, st.Completed, st.Batches)
	// Output:
	// batch "model/1": 3 requests, 4 rows, padded to 4
	// [A B CD]
	// submitted 3, completed 3, batches 1
}
