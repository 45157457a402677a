package serving

import (
	"fmt"
	"slices"
	"strings"
)

// learnSizes drops the default buckets of non-batch symbols at which the
// model's shapes do not work (the IR's shape propagation, no compile,
// refuses them: a detector or U-Net whose feature maps must halve evenly
// several times), so that neither the pad probe nor a request compiles
// them. It first finds the smallest bucket size at which all such symbols
// work together, holds the others there and tries each symbol's buckets in
// turn; what remains sets the symbol's Stride (their greatest common
// divisor) and Learned. Symbols whose buckets config.yaml gives are left
// as they are.
func (p *BucketPlan) learnSizes() {
	var syms []*SymbolPlan
	for _, s := range p.Symbols {
		if !s.Batch && s.Defaulted {
			syms = append(syms, s)
		}
	}
	if len(syms) == 0 {
		return
	}
	safe := p.commonSize(syms)
	if safe == nil {
		return // no common size works: the probe and requests will say why
	}
	for _, s := range syms {
		p.learnSymbol(s, safe)
	}
}

// commonSize returns the base sizes with syms at the smallest of their
// buckets at which the model's shapes work for all of them, or nil.
func (p *BucketPlan) commonSize(syms []*SymbolPlan) map[string]int64 {
	var candidates []int64
	for _, s := range syms {
		candidates = append(candidates, s.Buckets...)
	}
	slices.Sort(candidates)
	for _, c := range slices.Compact(candidates) {
		dims := cloneDims(p.baseDims())
		for _, s := range syms {
			dims[s.Name] = min(max(c, s.Buckets[0]), s.Buckets[len(s.Buckets)-1])
		}
		if _, err := p.shapes(p.modelDims(dims)); err == nil {
			return dims
		}
	}
	return nil
}

// learnSymbol drops s's buckets at which the shapes fail, the others held
// at safe, and sets its Stride and Learned.
func (p *BucketPlan) learnSymbol(s *SymbolPlan, safe map[string]int64) {
	var keep, dropped []int64
	var firstErr error
	for _, n := range s.Buckets {
		dims := cloneDims(safe)
		dims[s.Name] = n
		if _, err := p.shapes(p.modelDims(dims)); err != nil {
			dropped = append(dropped, n)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		keep = append(keep, n)
	}
	if len(dropped) == 0 || len(keep) == 0 {
		return
	}
	s.Buckets = keep
	s.Stride = keep[0]
	for _, n := range keep[1:] {
		s.Stride = gcd(s.Stride, n)
	}
	s.Learned = fmt.Sprintf("the model's shapes fail at %s %s (%v)", s.Name, joinInts(dropped), firstErr)
}

func cloneDims(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func joinInts(v []int64) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, ", ")
}
