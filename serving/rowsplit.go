package serving

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/xserve/xserve/pjrt"
	"github.com/xserve/xserve/tensor"
)

// Row-parallel execution on a CPU. XLA CPU programs, and the kernels they
// call, use a second core poorly at the sizes a server runs (a batch of 8
// images runs about as fast on one core as on two; docs/BENCHMARKS.md).
// The rows of a model that batches are independent (that is what lets the
// batcher stack requests), so an execution of several rows can instead run
// as shards of its rows, each in the bucket that holds it, one per idle core,
// at the same time: a batch of 8 as two executions of 4. Which of the two
// ways is faster depends on the model (a program whose large matrix products
// already use every core gains nothing), so in SplitAuto each bucket times
// both while no other execution runs and keeps the faster, trying the other
// again now and then.

// SplitBatches says when an execution's rows run as shards on idle CPU cores
// (Options.SplitBatches).
type SplitBatches string

// Split policies.
const (
	// SplitAuto splits an execution of several rows when no other
	// execution is running and the bucket's measurements say splitting is
	// faster (the default).
	SplitAuto SplitBatches = "auto"
	// SplitOff runs every execution whole.
	SplitOff SplitBatches = "off"
	// SplitAlways splits every execution of several rows across the cores
	// no other execution holds, whatever the measurements say (for tests
	// and A/B benchmarks).
	SplitAlways SplitBatches = "always"
)

// ParseSplitBatches reads a split policy ("" is SplitAuto).
func ParseSplitBatches(s string) (SplitBatches, error) {
	switch p := SplitBatches(s); p {
	case "":
		return SplitAuto, nil
	case SplitAuto, SplitOff, SplitAlways:
		return p, nil
	}
	return "", fmt.Errorf("split batches %q: want auto, off or always", s)
}

// shard is one part of a split execution: rows [lo, lo+n) of the bucket's
// batch, run in the bucket of sizes exec.
type shard struct {
	lo, n int64
	exec  map[string]int64
}

// execute runs exe, the executable of bucket b at exec sizes, on inputs
// whose first rows (of the batch dim) are the requests'. With idle cores
// and a model whose rows are independent, it runs the rows as shards at
// once instead, when the split policy says so; split then names the
// shards' buckets ("batch=2+batch=2"), else it is "".
func (v *version) execute(ctx context.Context, b *bucket, exe *Executable, exec map[string]int64, inputs []*tensor.Tensor, rows int64) (outs []*tensor.Tensor, split string, err error) {
	others := v.m.executing.Add(1) - 1
	defer v.m.executing.Add(-1)
	shards := v.shards(exec, rows, others)
	if shards == nil {
		outs, err = v.executeWhole(ctx, b, exe, inputs, others)
		return outs, "", err
	}
	auto := v.m.opts.SplitBatches == SplitAuto
	if auto && !b.split.choose() {
		start := time.Now()
		outs, err = exe.Run(ctx, inputs)
		if err == nil {
			b.split.observe(false, time.Since(start))
		}
		return outs, "", err
	}
	// The shards hold as many cores: an execution starting meanwhile sees
	// them busy.
	extra := int64(len(shards) - 1)
	v.m.executing.Add(extra)
	defer v.m.executing.Add(-extra)
	start := time.Now()
	outs, err = v.runShards(ctx, exec, inputs, shards)
	if err != nil {
		return nil, "", err
	}
	if auto {
		b.split.observe(true, time.Since(start))
	}
	v.m.metrics.splitRuns.With(v.name, v.label).Inc()
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = v.plan.keyName(s.exec)
	}
	return outs, strings.Join(names, "+"), nil
}

// executeWhole runs exe on inputs in one execution. With the CPU kernel
// library loaded and the split policy auto, an execution that starts while
// others run has its kernels use its share of the cores (cores divided by
// the executions running; on two cores with one other, serial: no OpenMP
// team, no bands on the library's band workers), the other executions'
// threads holding the rest; an execution alone runs the way b.threads has
// found faster, with the kernels' threads or serial: those threads pay on
// a machine whose cores are the server's, and cost more than they save
// where a core is shared (another process, another guest on the host).
// Timing whole executions, not kernels, counts what a spinning helper
// thread takes from the rest of the model.
func (v *version) executeWhole(ctx context.Context, b *bucket, exe *Executable, inputs []*tensor.Tensor, others int64) ([]*tensor.Tensor, error) {
	if !v.m.kernels || v.m.opts.SplitBatches != SplitAuto {
		return exe.Run(ctx, inputs)
	}
	if others > 0 {
		if share := coreShare(v.m.cores, others); share > 0 {
			return v.runLimited(ctx, exe, inputs, share)
		}
		return exe.Run(ctx, inputs)
	}
	threaded := b.threads.choose()
	start := time.Now()
	var outs []*tensor.Tensor
	var err error
	if threaded {
		outs, err = exe.Run(ctx, inputs)
	} else {
		outs, err = v.runLimited(ctx, exe, inputs, 1)
	}
	if err == nil {
		b.threads.observe(threaded, time.Since(start))
	}
	return outs, err
}

// coreShare is how many threads an execution's kernels may use on cores
// cores while others other executions run: its share, at least one; 0
// when that is every core (no limit).
func coreShare(cores int, others int64) int {
	share := max(int64(cores)/(others+1), 1)
	if share >= int64(cores) {
		return 0
	}
	return int(share)
}

// runLimited runs exe on inputs with its kernels on at most threads
// threads (pjrt.HostRun.Threads; 1: this thread only).
func (v *version) runLimited(ctx context.Context, exe *Executable, inputs []*tensor.Tensor, threads int) ([]*tensor.Tensor, error) {
	r, err := exe.hostRun(inputs)
	if err != nil {
		return nil, err
	}
	r.Threads = threads
	runs := []pjrt.HostRun{r}
	v.m.client.RunHostAll(ctx, runs)
	if runs[0].Err != nil {
		return nil, runs[0].Err
	}
	return exe.Program.CheckGuards(runs[0].Outs)
}

// shards returns how to split an execution at exec sizes whose first rows
// rows are real, with others other executions running, or nil to run it
// whole: on a CPU, for a model whose requests stack (each input has one
// batch dim and each output one batch axis), one shard per idle core (a
// power of two, at most one a row), each in the smallest batch bucket that
// holds its rows, every one of them compiled already.
func (v *version) shards(exec map[string]int64, rows, others int64) []shard {
	p := v.plan
	policy := v.m.opts.SplitBatches
	if policy == SplitOff || !v.m.cpu || p.batchErr != nil || p.outBatchAxis == nil {
		return nil
	}
	if policy == SplitAuto && others > 0 {
		return nil // the other cores are busy: shards would only queue
	}
	k := int64(1)
	for k*2 <= rows && k*2 <= int64(v.m.cores)-others {
		k *= 2
	}
	if k < 2 {
		return nil
	}
	sizes := p.batch().Buckets
	span := (rows + k - 1) / k
	var out []shard
	for lo := int64(0); lo < rows; lo += span {
		n := min(span, rows-lo)
		i := sort.Search(len(sizes), func(i int) bool { return sizes[i] >= n })
		if i == len(sizes) || sizes[i] >= exec[p.batchName] {
			return nil // no smaller bucket holds the shard
		}
		se := maps.Clone(exec)
		se[p.batchName] = sizes[i]
		if !v.compiled(se) {
			return nil // never compile on a request's path to split it
		}
		out = append(out, shard{lo: lo, n: n, exec: se})
	}
	return out
}

// compiled reports whether the bucket of exec sizes has its executable.
func (v *version) compiled(exec map[string]int64) bool {
	v.bmu.Lock()
	b := v.buckets[v.plan.keyName(exec)]
	v.bmu.Unlock()
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.exe != nil
}

// runShards runs the shards of an execution at exec sizes at once, each on
// its rows of inputs, and returns the outputs at exec's sizes with each
// shard's rows in place (rows after the last shard's are zero). The shards
// run in one pjrt.Client.RunHostAll: the first on this goroutine's thread,
// the others on the client's worker threads.
func (v *version) runShards(ctx context.Context, exec map[string]int64, inputs []*tensor.Tensor, shards []shard) ([]*tensor.Tensor, error) {
	runs := make([]pjrt.HostRun, len(shards))
	exes := make([]*Executable, len(shards))
	for i, s := range shards {
		b := v.acquireBucket(s.exec)
		defer v.releaseBucket(b)
		exe, err := v.executable(ctx, b, nil)
		if err == nil {
			p := v.plan
			part := make([]*tensor.Tensor, len(inputs))
			for k, in := range inputs {
				part[k] = p.inputRows(k, in, s.lo, s.n, s.exec[p.batchName])
			}
			runs[i], err = exe.hostRun(part)
		}
		if err != nil {
			return nil, fmt.Errorf("rows %d to %d: bucket %s: %w", s.lo, s.lo+s.n-1, b.name, err)
		}
		exes[i] = exe
	}
	v.m.client.RunHostAll(ctx, runs)
	results := make([][]*tensor.Tensor, len(shards))
	for i, r := range runs {
		err := r.Err
		if err == nil {
			results[i], err = exes[i].Program.CheckGuards(r.Outs)
		}
		if err != nil {
			return nil, fmt.Errorf("rows %d to %d: bucket %s: %w", shards[i].lo, shards[i].lo+shards[i].n-1, v.plan.keyName(shards[i].exec), err)
		}
	}
	return v.joinShards(exec, results, shards)
}

// joinShards stacks the shards' outputs into outputs at exec's batch size,
// each output along its batch axis.
func (v *version) joinShards(exec map[string]int64, results [][]*tensor.Tensor, shards []shard) ([]*tensor.Tensor, error) {
	p := v.plan
	first := results[0]
	if len(first) != len(p.outBatchAxis) {
		return nil, fmt.Errorf("a shard returned %d outputs, the model has %d", len(first), len(p.outBatchAxis))
	}
	outs := make([]*tensor.Tensor, len(first))
	for k, o := range first {
		axis := p.outBatchAxis[k]
		shape := append([]int64(nil), o.Shape...)
		if axis >= len(shape) {
			return nil, fmt.Errorf("output %d has shape %s, no batch axis %d", k, tensor.ShapeString(shape), axis)
		}
		shape[axis] = exec[p.batchName]
		dst := tensor.New(o.DType, shape...)
		for si, s := range shards {
			src := results[si][k]
			if src.DType != o.DType || len(src.Shape) != len(shape) {
				return nil, fmt.Errorf("output %d: shard %d returned %s, shard 0 %s", k, si, src, o)
			}
			box := append([]int64(nil), src.Shape...)
			box[axis] = s.n
			at := make([]int64, len(shape))
			at[axis] = s.lo
			copyBlock(dst.Data, shape, at, src.Data, src.Shape, make([]int64, len(shape)), box, int64(o.DType.Size()))
		}
		outs[k] = dst
	}
	return outs, nil
}

// inputRows returns rows [lo, lo+n) of input i's tensor t along its batch
// dim, padded with the input's pad value to size rows: a view of t's bytes
// where the batch dim leads and no padding is needed, else a copy.
func (p *BucketPlan) inputRows(i int, t *tensor.Tensor, lo, n, size int64) *tensor.Tensor {
	in := &p.Inputs[i]
	axis := p.inputBatchAxis(i)
	if axis < 0 {
		return t // not batched: every shard reads all of it
	}
	shape := append([]int64(nil), t.Shape...)
	shape[axis] = size
	elem := int64(t.DType.Size())
	if axis == 0 && n == size {
		row := tensor.NumElements(t.Shape[1:]) * elem
		return &tensor.Tensor{DType: t.DType, Shape: shape, Data: t.Data[lo*row : (lo+n)*row]}
	}
	dst := tensor.New(t.DType, shape...)
	fill(dst.Data, in.pad)
	box := append([]int64(nil), t.Shape...)
	box[axis] = n
	from := make([]int64, len(shape))
	from[axis] = lo
	copyBlock(dst.Data, shape, make([]int64, len(shape)), t.Data, t.Shape, from, box, elem)
	return dst
}
