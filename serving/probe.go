package serving

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"

	"github.com/xserve/xserve/tensor"
)

// The load-time pad probe: a symbol is served padded into its buckets only
// when padding is invisible at a realistic amount. For each undecided
// symbol (PadProbe) the probe runs the model on the same pseudo-random
// inputs twice, once at an exact size p and once padded from p into a
// bucket b with b-p >= p/2 (the padding at least half the real size), and
// compares every output's valid region. The sizes are typical of the
// declared range, not its smallest corner: a non-batch symbol is probed
// into the first bucket at or above probeTypical (p the bucket below, else
// two thirds of b on the symbol's stride) and every other non-batch symbol
// is held at its typical bucket too, so a strided convolution cannot cut
// the padded rows off before a global pooling (1 -> 2 or 63 -> 64 can be
// invisible where 32 -> 64 is not). The batch is probed from its smallest
// bucket. Equal (within the dtype's tolerance: XLA CPU may tile a larger
// shape differently) makes the symbol PadBuckets, different PadExact. A
// symbol whose exact run fails at one size (a model that needs longer
// sequences) is tried at the next bucket; one that cannot be probed at a
// realistic amount is served exactly: when in doubt, exact.

// probeTries bounds the bucket sizes the probe tries per symbol.
const probeTries = 3

// probeTypical is the non-batch size the probe pads into when the range
// allows: large enough that a few stride-2 stages keep several rows.
const probeTypical = 32

// errProbeExact marks a candidate size the model cannot run exactly.
var errProbeExact = errors.New("exact run failed")

// probePadding decides the pad policy of every PadProbe symbol and logs
// each symbol's role, buckets and policy.
func (v *version) probePadding(ctx context.Context) error {
	for _, s := range v.plan.Symbols {
		if s.Pad == PadProbe {
			pad, reason, err := v.probeSymbol(ctx, s)
			if err != nil {
				return err
			}
			s.Pad, s.PadReason = pad, reason
		}
		from := "config"
		if s.Defaulted {
			from = "default"
		}
		above := "refused (config.yaml's buckets)"
		if s.Defaulted {
			above = "exact size, compiled on first use"
		}
		attrs := []any{"symbol", s.Name, "role", s.Role(), "model_symbols", s.Model, "buckets", fmt.Sprint(s.Buckets),
			"buckets_from", from, "range", s.Range.String(), "pad", string(s.Pad), "why", s.PadReason, "above_largest_bucket", above}
		if s.Stride > 1 {
			attrs = append(attrs, "stride", s.Stride, "learned", s.Learned)
		}
		v.log().Info("symbol", attrs...)
	}
	return nil
}

// probeSymbol returns s's pad policy and why; the error is the context's.
func (v *version) probeSymbol(ctx context.Context, s *SymbolPlan) (PadPolicy, string, error) {
	var tried []string
	for _, pb := range probePairs(s) {
		p, b := pb[0], pb[1]
		same, detail, err := v.probeAt(ctx, s, p, b)
		if ctx.Err() != nil {
			return "", "", fmt.Errorf("probing %s: %w", s.Name, ctx.Err())
		}
		switch {
		case errors.Is(err, errProbeExact):
			tried = append(tried, fmt.Sprintf("%d: %v", p, err))
			continue
		case err != nil:
			return PadExact, fmt.Sprintf("probe: padding %s from %d to %d fails: %v", s.Name, p, b, err), nil
		case same:
			return PadBuckets, fmt.Sprintf("probe: padding %s from %d to %d leaves every output unchanged", s.Name, p, b), nil
		default:
			return PadExact, fmt.Sprintf("probe: padding %s from %d to %d changes %s", s.Name, p, b, detail), nil
		}
	}
	if len(tried) == 0 {
		return PadExact, fmt.Sprintf("probe: no bucket of %s in the model's range %s can be padded into by half its size or more", s.Name, s.Range), nil
	}
	return PadExact, fmt.Sprintf("probe: the model does not run at %s sizes %v", s.Name, tried), nil
}

// probePairs lists up to probeTries (exact, padded) size pairs to probe s
// at, in order: each padded size a bucket, each exact size at most two
// thirds of it (padding of half the real size or more), within the range
// and on the stride; a non-batch symbol's first padded size is its typical
// bucket.
func probePairs(s *SymbolPlan) [][2]int64 {
	step := max(s.Stride, 1)
	lo := max(s.Range.Min, 1)
	var pairs [][2]int64
	for i := typicalBucket(s); i < len(s.Buckets) && len(pairs) < probeTries; i++ {
		b := s.Buckets[i]
		p := b * 2 / 3 / step * step
		if i > 0 && s.Buckets[i-1] <= p {
			p = s.Buckets[i-1] // the bucket below: no extra compile
		}
		if p >= lo && p < b {
			pairs = append(pairs, [2]int64{p, b})
		}
	}
	return pairs
}

// typicalBucket is the index of the bucket the probe pads s into first:
// the batch's smallest, a non-batch symbol's first at or above
// probeTypical (its largest when the range stops below).
func typicalBucket(s *SymbolPlan) int {
	if s.Batch {
		return 0
	}
	for i, b := range s.Buckets {
		if b >= probeTypical {
			return i
		}
	}
	return len(s.Buckets) - 1
}

// probeDims holds every symbol at the size the probes see it: the batch at
// its smallest bucket, any other at its typical bucket.
func (p *BucketPlan) probeDims() map[string]int64 {
	dims := make(map[string]int64, len(p.Symbols))
	for _, s := range p.Symbols {
		dims[s.Name] = s.Buckets[typicalBucket(s)]
	}
	return dims
}

// probeAt runs the probe inputs at size p exactly and padded into bucket
// b; same reports whether every output agrees, detail names the first that
// does not.
func (v *version) probeAt(ctx context.Context, s *SymbolPlan, p, b int64) (same bool, detail string, err error) {
	dims := v.plan.probeDims()
	dims[s.Name] = p
	inputs := make([]*tensor.Tensor, len(v.plan.Inputs))
	for i := range v.plan.Inputs {
		inputs[i] = probeTensor(v.plan.Inputs[i].DType, v.plan.inputShape(i, dims), uint64(i+1))
	}
	exact, err := v.runProbe(ctx, dims, inputs)
	if err != nil {
		return false, "", fmt.Errorf("%w: %w", errProbeExact, err)
	}
	exec := maps.Clone(dims)
	exec[s.Name] = b
	padded, err := v.runProbe(ctx, exec, inputs)
	if err != nil {
		return false, "", err
	}
	for k := range exact {
		if ok, diff := closeEnough(exact[k], padded[k]); !ok {
			return false, fmt.Sprintf("output %q (%s)", v.plan.Outputs[k].Name, diff), nil
		}
	}
	return true, "", nil
}

// runProbe runs inputs (at the sizes they have) in the executable of exec
// and returns every output sliced to its exact shape.
func (v *version) runProbe(ctx context.Context, exec map[string]int64, inputs []*tensor.Tensor) ([]*tensor.Tensor, error) {
	dims, err := v.plan.bind(inputs)
	if err != nil {
		return nil, err
	}
	c := &call{inputs: inputs, dims: dims, exec: exec, probe: true}
	for k := range v.plan.Outputs {
		c.outputs = append(c.outputs, k)
	}
	if _, err := v.runBucket(ctx, exec, []*call{c}, nil); err != nil {
		return nil, err
	}
	return c.outs, nil
}

// probeTensor returns deterministic pseudo-random inputs: floats spread over [-1, 1),
// integers and booleans 0 and 1 (valid as indices, token ids and masks).
func probeTensor(dt tensor.DType, shape []int64, seed uint64) *tensor.Tensor {
	t := tensor.New(dt, shape...)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := int64(0); i < t.NumElements(); i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if dt.IsFloat() || dt.IsComplex() {
			t.SetFloat64(i, float64(x>>11)/float64(1<<53)*2-1)
		} else {
			t.SetFloat64(i, float64(x>>63))
		}
	}
	return t
}

// closeEnough compares two outputs of the same shape: integers exactly,
// floats within a tolerance for the dtype (NaNs equal NaNs).
func closeEnough(a, b *tensor.Tensor) (bool, string) {
	if !equalShape(a.Shape, b.Shape) {
		return false, fmt.Sprintf("shape %s padded, %s exact", tensor.ShapeString(b.Shape), tensor.ShapeString(a.Shape))
	}
	tol := 1e-4
	if a.DType.Size() <= 2 && a.DType.IsFloat() {
		tol = 2e-2
	}
	for i := int64(0); i < a.NumElements(); i++ {
		x, y := a.Float64At(i), b.Float64At(i)
		if x == y || (math.IsNaN(x) && math.IsNaN(y)) {
			continue
		}
		if !a.DType.IsFloat() || !(math.Abs(x-y) <= tol+tol*math.Abs(x)) {
			return false, fmt.Sprintf("element %d is %g exact, %g padded", i, x, y)
		}
	}
	return true, ""
}
