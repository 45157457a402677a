package decomp

import (
	"math"
	"strings"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// Decompositions of the full ATen surface that plain torch.export archives
// (saved without run_decompositions) carry: Python operator overloads,
// axis aliases, diff, weight norm and einsum. Each is one small rule in
// the decompositions table.

// decSwap maps swapaxes/swapdims(self, a, b) to transpose.int.
func decSwap(a, b string) Func {
	return func(c *Call) error {
		x, err := c.tensor("self")
		if err != nil {
			return err
		}
		d0, err := c.intArg(a)
		if err != nil {
			return err
		}
		d1, err := c.intArg(b)
		if err != nil {
			return err
		}
		return c.one(fxgraph.AtenTransposeInt, []any{x, d0, d1}, nil)
	}
}

// decMovedim maps movedim/moveaxis (one dim or lists of dims) to permute:
// the moved dims go to their destinations, the others keep their order.
func decMovedim(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	src, err := c.ints("source", 0)
	if err != nil {
		return err
	}
	dst, err := c.ints("destination", 0)
	if err != nil {
		return err
	}
	rank := x.Val().Rank()
	if len(src) != len(dst) {
		return c.errorf(ErrFormat, "movedim source %v and destination %v differ in length", src, dst)
	}
	perm := make([]int64, rank)
	for i := range perm {
		perm[i] = -1
	}
	moved := make([]bool, rank)
	for i := range src {
		s, err1 := fxgraph.NormDim(src[i], rank)
		d, err2 := fxgraph.NormDim(dst[i], rank)
		if err1 != nil || err2 != nil || moved[s] || perm[d] >= 0 {
			return c.errorf(ErrFormat, "movedim %v -> %v of %s", src, dst, x.Val())
		}
		perm[d] = int64(s)
		moved[s] = true
	}
	next := 0
	for i := range perm {
		if perm[i] >= 0 {
			continue
		}
		for moved[next] {
			next++
		}
		perm[i] = int64(next)
		next++
	}
	return c.one(fxgraph.AtenPermute, []any{x, ints64(perm)}, nil)
}

// decDiff is diff(self, n, dim, prepend, append): prepend and append are
// concatenated along dim, then n times x[1:] - x[:-1] (x[1:] != x[:-1] for
// bool tensors, as torch does).
func decDiff(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	n, err := c.intArg("n")
	if err != nil {
		return err
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	dim, err := fxgraph.NormDim(d, x.Val().Rank())
	if err != nil || n < 0 {
		return c.errorf(ErrFormat, "diff n=%d dim=%d of %s", n, d, x.Val())
	}
	parts := []any{}
	for _, name := range []string{"prepend", "", "append"} {
		if name == "" {
			parts = append(parts, x)
			continue
		}
		p, err := c.optTensor(name)
		if err != nil {
			return err
		}
		if p != nil {
			parts = append(parts, p)
		}
	}
	if len(parts) > 1 {
		if x, err = c.emit("", fxgraph.AtenCat, []any{parts, int64(dim)}, nil); err != nil {
			return err
		}
	}
	sub := fxgraph.AtenSubTensor
	if x.Val().DType == tensor.Bool {
		sub = fxgraph.AtenNeTensor
	}
	for i := int64(0); i < n; i++ {
		hi, err := c.emit("", fxgraph.AtenSliceTensor, []any{x, int64(dim), int64(1), int64(math.MaxInt64), int64(1)}, nil)
		if err != nil {
			return err
		}
		lo, err := c.emit("", fxgraph.AtenSliceTensor, []any{x, int64(dim), int64(0), int64(-1), int64(1)}, nil)
		if err != nil {
			return err
		}
		name := ""
		if i == n-1 {
			name = c.outName(0)
		}
		if x, err = c.emit(name, sub, []any{hi, lo}, nil); err != nil {
			return err
		}
	}
	return c.bind(0, x)
}

// normExceptDim is torch's norm_except_dim(v, 2, dim): the 2-norm over
// every dim but dim, kept as size-1 dims (over all of v when dim is -1).
func (c *Call) normExceptDim(v *fxgraph.Node, dim int64) (*fxgraph.Node, error) {
	rank := v.Val().Rank()
	var dims []int64
	if dim == -1 {
		for i := 0; i < rank; i++ {
			dims = append(dims, int64(i))
		}
	} else {
		d, err := fxgraph.NormDim(dim, rank)
		if err != nil {
			return nil, c.errorf(ErrFormat, "weight norm dim %d of %s", dim, v.Val())
		}
		for i := 0; i < rank; i++ {
			if i != d {
				dims = append(dims, int64(i))
			}
		}
	}
	return c.emit("", fxgraph.AtenLinalgVectorNorm, []any{v, 2.0, ints64(dims), true}, nil)
}

// decWeightNorm is _weight_norm(v, g, dim) = v * (g / norm_except_dim(v,
// 2, dim)) and _weight_norm_interface, which also returns the norm.
func decWeightNorm(c *Call) error {
	v, err := c.tensor("v")
	if err != nil {
		return err
	}
	g, err := c.tensor("g")
	if err != nil {
		return err
	}
	dim, err := c.intArg("dim")
	if err != nil {
		return err
	}
	norm, err := c.normExceptDim(v, dim)
	if err != nil {
		return err
	}
	scale, err := c.emit("", fxgraph.AtenDivTensor, []any{g, norm}, nil)
	if err != nil {
		return err
	}
	w, err := c.emit(c.outName(0), fxgraph.AtenMulTensor, []any{v, scale}, nil)
	if err != nil {
		return err
	}
	if err := c.bind(0, w); err != nil {
		return err
	}
	if len(c.Outs) > 1 && c.Outs[1] != "" {
		if dim == -1 {
			if norm, err = c.emit("", fxgraph.AtenReshape, []any{norm, []any{}}, nil); err != nil {
				return err
			}
		}
		return c.bind(1, norm)
	}
	return nil
}

// einsumTerm is one operand of an einsum: its tensor and one label a dim.
type einsumTerm struct {
	x      *fxgraph.Node
	labels []rune
}

// parseEinsum splits an equation into operand labels and output labels;
// "..." becomes one fresh label for each dim it covers (the ellipsis dims
// of every operand must line up from the right, as torch requires).
func parseEinsum(eq string, ranks []int) ([][]rune, []rune, bool) {
	eq = strings.ReplaceAll(eq, " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	ins := strings.Split(lhs, ",")
	if len(ins) != len(ranks) {
		return nil, nil, false
	}
	ell := 0
	for i, s := range ins {
		if strings.Contains(s, "...") {
			ell = max(ell, ranks[i]-(len(s)-3))
		}
	}
	expand := func(s string, n int) []rune {
		var out []rune
		before, after, has := strings.Cut(s, "...")
		out = append(out, []rune(before)...)
		if has {
			for k := ell - n; k < ell; k++ {
				out = append(out, rune(0x10000+k))
			}
			out = append(out, []rune(after)...)
		}
		return out
	}
	var terms [][]rune
	count := map[rune]int{}
	for i, s := range ins {
		n := 0
		if strings.Contains(s, "...") {
			n = ranks[i] - (len(s) - 3)
			if n < 0 {
				return nil, nil, false
			}
		}
		t := expand(s, n)
		if len(t) != ranks[i] {
			return nil, nil, false
		}
		for _, l := range t {
			count[l]++
		}
		terms = append(terms, t)
	}
	var out []rune
	if explicit {
		out = expand(rhs, ell)
	} else {
		for k := 0; k < ell; k++ {
			out = append(out, rune(0x10000+k))
		}
		var single []rune
		for l, n := range count {
			if n == 1 && l < 0x10000 {
				single = append(single, l)
			}
		}
		sortRunes(single)
		out = append(out, single...)
	}
	return terms, out, true
}

func sortRunes(r []rune) {
	for i := 1; i < len(r); i++ {
		for j := i; j > 0 && r[j] < r[j-1]; j-- {
			r[j], r[j-1] = r[j-1], r[j]
		}
	}
}

func hasRune(list []rune, r rune) bool {
	for _, x := range list {
		if x == r {
			return true
		}
	}
	return false
}

// decEinsum contracts the operands left to right, each pair with one bmm
// (batch labels, free labels of each side, summed labels), the way torch's
// own einsum does; labels no later operand nor the output needs are summed
// away first. Repeated labels within one operand (diagonals) are not
// supported.
func decEinsum(c *Call) error {
	eq, ok := c.arg("equation").(string)
	if !ok {
		return c.errorf(ErrFormat, "einsum equation %s", fxgraph.FormatArg(c.arg("equation")))
	}
	list, ok := c.arg("tensors").([]any)
	if !ok || len(list) == 0 {
		return c.errorf(ErrFormat, "einsum operands %s", fxgraph.FormatArg(c.arg("tensors")))
	}
	ranks := make([]int, len(list))
	nodes := make([]*fxgraph.Node, len(list))
	for i, v := range list {
		n, ok := v.(*fxgraph.Node)
		if !ok {
			return c.errorf(ErrFormat, "einsum operand %d is %s", i, fxgraph.FormatArg(v))
		}
		nodes[i], ranks[i] = n, n.Val().Rank()
	}
	labels, out, ok := parseEinsum(eq, ranks)
	if !ok {
		return c.errorf(ErrFormat, "einsum equation %q does not fit operands of ranks %v", eq, ranks)
	}
	for i, l := range labels {
		seen := map[rune]bool{}
		for _, r := range l {
			if seen[r] {
				return c.errorf(ErrUnsupported, "einsum %q: label %q repeats in operand %d (a diagonal)", eq, r, i)
			}
			seen[r] = true
		}
	}
	cur := einsumTerm{nodes[0], labels[0]}
	for i := 1; i < len(nodes); i++ {
		keep := append([]rune{}, out...)
		for _, l := range labels[i+1:] {
			keep = append(keep, l...)
		}
		var err error
		if cur, err = c.contract(cur, einsumTerm{nodes[i], labels[i]}, keep); err != nil {
			return err
		}
	}
	x, err := c.sumLabels(cur, out, nil)
	if err != nil {
		return err
	}
	perm := make([]int64, len(out))
	for i, l := range out {
		k := -1
		for j, m := range x.labels {
			if m == l {
				k = j
			}
		}
		if k < 0 {
			return c.errorf(ErrFormat, "einsum %q: output label %q is in no operand", eq, l)
		}
		perm[i] = int64(k)
	}
	if len(perm) != len(x.labels) {
		return c.errorf(ErrFormat, "einsum %q: output has %d labels, the result %d", eq, len(perm), len(x.labels))
	}
	identity := true
	for i, p := range perm {
		identity = identity && p == int64(i)
	}
	if identity {
		return c.alias(x.x)
	}
	return c.one(fxgraph.AtenPermute, []any{x.x, ints64(perm)}, nil)
}

// sumLabels sums the dims of t whose labels are neither in keep nor in
// other.
func (c *Call) sumLabels(t einsumTerm, keep, other []rune) (einsumTerm, error) {
	var dims []int64
	var left []rune
	for i, l := range t.labels {
		if hasRune(keep, l) || hasRune(other, l) {
			left = append(left, l)
		} else {
			dims = append(dims, int64(i))
		}
	}
	if len(dims) == 0 {
		return t, nil
	}
	x, err := c.emit("", fxgraph.AtenSumDimIntList, []any{t.x, ints64(dims), false}, nil)
	if err != nil {
		return t, err
	}
	return einsumTerm{x, left}, nil
}

// contract multiplies two einsum operands with one bmm: a is permuted to
// [batch, free, summed] and b to [batch, summed, free], both reshaped to
// rank 3, and the product reshaped to batch, a's free and b's free dims.
func (c *Call) contract(a, b einsumTerm, keep []rune) (einsumTerm, error) {
	var err error
	if a, err = c.sumLabels(a, keep, b.labels); err != nil {
		return a, err
	}
	if b, err = c.sumLabels(b, keep, a.labels); err != nil {
		return b, err
	}
	var batch, summed, af, bf []rune
	for _, l := range a.labels {
		switch {
		case hasRune(b.labels, l) && hasRune(keep, l):
			batch = append(batch, l)
		case hasRune(b.labels, l):
			summed = append(summed, l)
		default:
			af = append(af, l)
		}
	}
	for _, l := range b.labels {
		if !hasRune(a.labels, l) {
			bf = append(bf, l)
		}
	}
	ad, err := c.dims(a.x)
	if err != nil {
		return a, err
	}
	bd, err := c.dims(b.x)
	if err != nil {
		return a, err
	}
	size := map[rune]any{}
	for i, l := range a.labels {
		size[l] = ad[i]
	}
	for i, l := range b.labels {
		if _, ok := size[l]; !ok || isOne(size[l]) {
			size[l] = bd[i]
		}
	}
	am, err := c.toMatrix(a, [][]rune{batch, af, summed}, size)
	if err != nil {
		return a, err
	}
	bm, err := c.toMatrix(b, [][]rune{batch, summed, bf}, size)
	if err != nil {
		return a, err
	}
	p, err := c.emit("", fxgraph.AtenBmm, []any{am, bm}, nil)
	if err != nil {
		return a, err
	}
	labels := append(append(append([]rune{}, batch...), af...), bf...)
	shape := make([]any, len(labels))
	for i, l := range labels {
		shape[i] = size[l]
	}
	r, err := c.emit("", fxgraph.AtenReshape, []any{p, shape}, nil)
	if err != nil {
		return a, err
	}
	return einsumTerm{r, labels}, nil
}

func isOne(v any) bool { i, ok := v.(int64); return ok && i == 1 }

// toMatrix permutes t to the label groups' order, expands size-1 dims to
// the label's size (broadcasting) and reshapes to one dim per group.
func (c *Call) toMatrix(t einsumTerm, groups [][]rune, size map[rune]any) (*fxgraph.Node, error) {
	var perm []int64
	var full []any
	var shape []any
	for _, g := range groups {
		var sizes []any
		for _, l := range g {
			for i, m := range t.labels {
				if m == l {
					perm = append(perm, int64(i))
				}
			}
			sizes = append(sizes, size[l])
		}
		full = append(full, sizes...)
		p, err := c.product(sizes)
		if err != nil {
			return nil, err
		}
		shape = append(shape, p)
	}
	x := t.x
	var err error
	if x, err = c.emit("", fxgraph.AtenPermute, []any{x, ints64(perm)}, nil); err != nil {
		return nil, err
	}
	if x, err = c.emit("", fxgraph.AtenExpand, []any{x, full}, nil); err != nil {
		return nil, err
	}
	return c.emit("", fxgraph.AtenReshape, []any{x, shape}, nil)
}

// decTensorSplit is tensor_split by indices (the cut points) or by a
// number of sections (the first size % sections parts one longer): one
// slice per part along a static dim.
func decTensorSplit(c *Call) error {
	x, err := c.tensor("self")
	if err != nil {
		return err
	}
	d, err := c.intArg("dim")
	if err != nil {
		return err
	}
	k, err := fxgraph.NormDim(d, x.Val().Rank())
	if err != nil {
		return c.errorf(ErrFormat, "tensor_split dim %d of %s", d, x.Val())
	}
	size := x.Val().Shape[k]
	if !size.IsStatic() {
		return c.errorf(ErrUnsupported, "tensor_split along symbolic dim %d of %s", k, x.Val())
	}
	var cuts []int64
	if c.Op == fxgraph.AtenTensorSplitSections {
		n, err := c.intArg("sections")
		if err != nil {
			return err
		}
		if n <= 0 {
			return c.errorf(ErrFormat, "tensor_split into %d sections", n)
		}
		at := int64(0)
		for i := int64(0); i < n-1; i++ {
			at += size.Size / n
			if i < size.Size%n {
				at++
			}
			cuts = append(cuts, at)
		}
	} else if cuts, err = c.ints("indices", 0); err != nil {
		return err
	}
	bounds := append(append([]int64{0}, cuts...), size.Size)
	for i := 0; i+1 < len(bounds); i++ {
		lo, hi := bounds[i], bounds[i+1]
		if lo < 0 {
			lo += size.Size
		}
		if hi < 0 {
			hi += size.Size
		}
		lo, hi = min(max(lo, 0), size.Size), min(max(hi, 0), size.Size)
		if c.outName(i) == "" {
			continue
		}
		p, err := c.emit(c.outName(i), fxgraph.AtenSliceTensor, []any{x, int64(k), lo, max(hi, lo), int64(1)}, nil)
		if err != nil {
			return err
		}
		if err := c.bind(i, p); err != nil {
			return err
		}
	}
	return nil
}
