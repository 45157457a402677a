package serving

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/xserve/xserve/engine"
	"github.com/xserve/xserve/tensor"
)

// Row-parallel execution on a CPU. The rows of a model that batches are
// independent (that is what lets the batcher stack requests), so an
// execution of several rows can run as shards of its rows, each in the
// smallest compiled batch bucket that holds it, one per idle core, at the
// same time: a batch of 8 as two executions of 4. The bucket's
// engine.Strategy says how many shards the cores allow and whether to split
// (in SplitAuto, whichever it measured faster); this file cuts the rows
// into shards and stacks their outputs back.

// SplitBatches says when an execution's rows run as shards on idle CPU cores
// (Options.SplitBatches): engine.SplitPolicy.
type SplitBatches = engine.SplitPolicy

// Split policies (engine.SplitPolicy).
const (
	SplitAuto   = engine.SplitAuto
	SplitOff    = engine.SplitOff
	SplitAlways = engine.SplitAlways
)

// ParseSplitBatches reads a split policy ("" is SplitAuto).
func ParseSplitBatches(s string) (SplitBatches, error) { return engine.ParseSplitPolicy(s) }

// shard is one part of a split execution: rows [lo, lo+n) of the bucket's
// batch, run in the bucket of sizes exec.
type shard struct {
	lo, n int64
	exec  map[string]int64
}

// execute runs exe, the executable of bucket b at exec sizes, on inputs
// whose first rows (of the batch dim) are the requests', the way b's
// strategy chooses: whole, or as shards of its rows at once; split then
// names the shards' buckets ("batch=2+batch=2"), else it is "". core is
// the execution's core time, its shards' added up, measured when timed (a
// batch its queue's sizer learns from; 0 otherwise or where not
// measured). The strategy learns from the time of the whole of it.
func (v *version) execute(ctx context.Context, b *bucket, place int, exe *engine.Executable, exec map[string]int64, inputs []*tensor.Tensor, rows int64, timed bool) (outs []*tensor.Tensor, split string, core time.Duration, err error) {
	x := v.m.engine.Begin()
	defer x.End()
	shards := v.shards(exec, rows, b.strategy.Parts(x.Load()), place)
	way := b.strategy.Choose(x.Load(), shards != nil)
	start := time.Now()
	if way.Split {
		outs, split, core, err = v.executeSplit(ctx, &x, way, place, exec, inputs, shards, timed)
	} else {
		jobs := [1]engine.Job{{Exe: exe, Inputs: inputs, Timed: timed}}
		if err = x.Run(ctx, way, jobs[:]); err == nil {
			outs, core = jobs[0].Outs, jobs[0].CPU
		}
	}
	if err != nil {
		return nil, "", 0, err
	}
	b.strategy.Observe(way, time.Since(start))
	return outs, split, core, nil
}

// executeSplit runs an execution at exec sizes as its shards at once and
// stacks their outputs.
func (v *version) executeSplit(ctx context.Context, x *engine.Execution, way engine.Way, place int, exec map[string]int64, inputs []*tensor.Tensor, shards []shard, timed bool) (outs []*tensor.Tensor, split string, core time.Duration, err error) {
	jobs, release, err := v.shardJobs(ctx, place, inputs, shards)
	defer release()
	if err != nil {
		return nil, "", 0, err
	}
	for i := range jobs {
		jobs[i].Timed = timed
	}
	if err := x.Run(ctx, way, jobs); err != nil {
		if je := (*engine.JobError)(nil); errors.As(err, &je) {
			s := shards[je.Job]
			err = fmt.Errorf("rows %d to %d: bucket %s: %w", s.lo, s.lo+s.n-1, v.plan.keyName(s.exec), je.Err)
		}
		return nil, "", 0, err
	}
	v.m.metrics.splitRuns.With(v.name, v.label).Inc()
	res := make([][]*tensor.Tensor, len(jobs))
	for i, j := range jobs {
		res[i] = j.Outs
		core += j.CPU
	}
	if outs, err = v.joinShards(exec, res, shards); err != nil {
		return nil, "", 0, err
	}
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = v.plan.keyName(s.exec)
	}
	return outs, strings.Join(names, "+"), core, nil
}

// shards returns how to split an execution at exec sizes whose first rows
// rows are real into at most parts shards, or nil to run it whole: for a
// model whose requests stack (each input has one batch dim and each output
// one batch axis), a power of two of shards (at most one a row), each in
// the smallest batch bucket that holds its rows, every one of them
// compiled already.
func (v *version) shards(exec map[string]int64, rows int64, parts, place int) []shard {
	p := v.plan
	if parts < 2 || p.batchErr != nil || p.outBatchAxis == nil {
		return nil
	}
	k := int64(1)
	for k*2 <= rows && k*2 <= int64(parts) {
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
		if !v.compiled(se, place) {
			return nil // never compile on a request's path to split it
		}
		out = append(out, shard{lo: lo, n: n, exec: se})
	}
	return out
}

// compiled reports whether the bucket of exec sizes has its executable on
// placement place.
func (v *version) compiled(exec map[string]int64, place int) bool {
	v.bmu.Lock()
	b := v.buckets[v.plan.keyName(exec)]
	v.bmu.Unlock()
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.exe[place] != nil
}

// shardJobs returns the jobs of the shards of an execution: each shard's
// bucket's executable on its rows of inputs. release ends the jobs' hold
// on the buckets, once they ran.
func (v *version) shardJobs(ctx context.Context, place int, inputs []*tensor.Tensor, shards []shard) (jobs []engine.Job, release func(), err error) {
	held := make([]*bucket, 0, len(shards))
	release = func() {
		for _, b := range held {
			v.releaseBucket(b)
		}
	}
	jobs = make([]engine.Job, len(shards))
	p := v.plan
	for i, s := range shards {
		b := v.acquireBucket(s.exec)
		held = append(held, b)
		exe, err := v.executableOn(ctx, b, place, nil)
		if err != nil {
			return nil, release, fmt.Errorf("rows %d to %d: bucket %s: %w", s.lo, s.lo+s.n-1, b.name, err)
		}
		part := make([]*tensor.Tensor, len(inputs))
		for k, in := range inputs {
			part[k] = p.inputRows(k, in, s.lo, s.n, s.exec[p.batchName])
		}
		jobs[i] = engine.Job{Exe: exe, Inputs: part}
	}
	return jobs, release, nil
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
