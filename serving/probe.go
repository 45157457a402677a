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
// when padding is invisible. For each undecided symbol (PadProbe) the probe
// runs the model on the same deterministic inputs twice, once at an exact
// size p and once padded from p into a bucket above it (the other symbols at
// their smallest bucket), and compares every output's valid region. p is
// the bucket below p+1's bucket where there is one (both executables are
// the model's own buckets), else the size just below. Equal
// (within the dtype's tolerance: XLA CPU may tile a larger shape
// differently) makes the symbol PadBuckets, different PadExact. A symbol
// whose exact run fails at one size (a model that needs longer sequences)
// is tried at the next bucket; one that cannot be probed at all is served
// exactly.

// probeTries bounds the bucket sizes the probe tries per symbol.
const probeTries = 3

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
	for i, b := range s.Buckets {
		p := b - 1 // a bucket's size padded from the size below it ...
		if i > 0 {
			p = s.Buckets[i-1] // ... or from the bucket below: no extra compile
		}
		if p < max(s.Range.Min, 1) {
			continue
		}
		if len(tried) == probeTries {
			break
		}
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
		return PadExact, fmt.Sprintf("probe: no bucket of %s has a smaller size in the model's range %s to compare with", s.Name, s.Range), nil
	}
	return PadExact, fmt.Sprintf("probe: the model does not run at %s sizes %v", s.Name, tried), nil
}

// probeAt runs the probe inputs at size p exactly and padded into bucket
// b; same reports whether every output agrees, detail names the first that
// does not.
func (v *version) probeAt(ctx context.Context, s *SymbolPlan, p, b int64) (same bool, detail string, err error) {
	dims := v.plan.baseDims()
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

// probeTensor returns deterministic inputs: floats spread over [-1, 1),
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
