package lower

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower/stablehlo"
)

// Tree ensembles (fxgraph.XserveTreeEnsemble). Every tree is walked at once,
// one depth per step, for the static number of steps the deepest tree
// needs (leaves point at themselves, so a walk that reached one stays).
// Two layouts (kwarg layout; docs/BENCHMARKS.md measures both):
//
//   - walk: each step gathers, for every (row, tree), its current node's
//     feature, threshold and children, the input value, and compares;
//   - compare: one gather of every node's input column and one comparison
//     of all nodes against their thresholds up front, then each step only
//     gathers the current node's decision and its children.
//
// The reached leaves' weights are gathered as [trees, rows, targets] and
// added tree by tree, in the model's tree order, starting from zero: the
// order ONNX Runtime adds them in, so the float sums are the same bits.

func registerTrees(r *Registry) {
	r.Register(fxgraph.XserveTreeEnsemble, treeEnsembleRule)
}

// trees is the lowering of one tree ensemble node: its block, operands and
// sizes.
type trees struct {
	b                  *stablehlo.Block
	args               fxgraph.TreeEnsembleArgs
	rows, feats, nodes int64
	ntrees, targets    int64
	acc                stablehlo.ElementType
	x                  *stablehlo.Value // [rows*feats] in the accumulation type
	feature, trueChild *stablehlo.Value // [nodes] i32
	falseChild, roots  *stablehlo.Value
	threshold          *stablehlo.Value // [nodes]
	weights, has       *stablehlo.Value // [nodes*targets]
	missing, modes     *stablehlo.Value // [nodes] or nil
	members            *stablehlo.Value // [nodes*K] or nil
	memberWidth        int64
}

func treeEnsembleRule(ctx *Context, n *fxgraph.Node, in []*stablehlo.Value) ([]*stablehlo.Value, error) {
	a, err := fxgraph.TreeEnsemble(n)
	if err != nil {
		return nil, err
	}
	t, err := newTrees(n, a, in)
	if err != nil {
		return nil, fmt.Errorf("tree ensemble %s: %w", n.Name, err)
	}
	leaves, err := t.walk()
	if err != nil {
		return nil, fmt.Errorf("tree ensemble %s: %w", n.Name, err)
	}
	scores, has, err := t.aggregate(leaves)
	if err != nil {
		return nil, fmt.Errorf("tree ensemble %s: %w", n.Name, err)
	}
	return []*stablehlo.Value{scores, has}, nil
}

func newTrees(n *fxgraph.Node, a fxgraph.TreeEnsembleArgs, in []*stablehlo.Value) (*trees, error) {
	for i := 0; i <= 7; i++ {
		if i >= len(in) || in[i] == nil {
			return nil, fmt.Errorf("argument %d is not a tensor", i)
		}
	}
	thr, w := in[2].Type(), in[6].Type()
	t := &trees{b: in[0].Block(), args: a, rows: in[0].Type().Dims[0], feats: in[0].Type().Dims[1], nodes: thr.Dims[0],
		ntrees: in[5].Type().Dims[0], targets: w.Dims[1], acc: thr.Elem, threshold: in[2]}
	if len(in) > 10 && in[10] != nil {
		t.memberWidth = in[10].Type().Dims[1]
	}
	tables := []struct {
		dst  **stablehlo.Value
		arg  int
		elem stablehlo.ElementType
	}{
		{&t.x, 0, t.acc}, {&t.feature, 1, stablehlo.I32}, {&t.trueChild, 3, stablehlo.I32}, {&t.falseChild, 4, stablehlo.I32},
		{&t.roots, 5, stablehlo.I32}, {&t.weights, 6, t.acc}, {&t.has, 7, stablehlo.Bool},
		{&t.missing, 8, stablehlo.Bool}, {&t.modes, 9, stablehlo.I32}, {&t.members, 10, t.acc},
	}
	for _, tb := range tables {
		if tb.arg >= len(in) || in[tb.arg] == nil {
			continue // an optional table not given
		}
		v, err := t.flat(in[tb.arg], tb.elem)
		if err != nil {
			return nil, err
		}
		*tb.dst = v
	}
	return t, nil
}

// flat reshapes v to one dim and converts it to elem.
func (t *trees) flat(v *stablehlo.Value, elem stablehlo.ElementType) (*stablehlo.Value, error) {
	v, err := t.b.Reshape(v, v.Type().NumElements())
	if err != nil {
		return nil, err
	}
	if v.Type().Elem != elem {
		return t.b.Convert(v, elem)
	}
	return v, nil
}

// take gathers the elements of the 1-D table at idx (any shape, i32).
func (t *trees) take(table, idx *stablehlo.Value) (*stablehlo.Value, error) {
	r := int64(idx.Type().Rank())
	return t.b.Gather(table, idx, stablehlo.GatherDims{CollapsedSliceDims: []int64{0}, StartIndexMap: []int64{0}, IndexVectorDim: r}, []int64{1}, false)
}

// iota returns an i32 tensor of dims counting along dim, times scale.
func (t *trees) iota(dims []int64, dim int, scale int64) (*stablehlo.Value, error) {
	v, err := t.b.Iota(stablehlo.TensorOf(stablehlo.I32, dims...), dim)
	if err != nil || scale == 1 {
		return v, err
	}
	return t.mulConst(v, scale)
}

func (t *trees) mulConst(v *stablehlo.Value, k int64) (*stablehlo.Value, error) {
	c, err := t.splat(v.Type(), float64(k))
	if err != nil {
		return nil, err
	}
	return t.b.Multiply(v, c)
}

// splat is a constant of type ty, every element v.
func (t *trees) splat(ty stablehlo.Type, v float64) (*stablehlo.Value, error) {
	s, err := t.b.ScalarConstant(ty.Elem, v)
	if err != nil {
		return nil, err
	}
	return t.b.BroadcastInDim(s, ty.Dims, nil)
}

// broadcast broadcasts the 1-D v along the trailing dim of dims.
func (t *trees) broadcastRow(v *stablehlo.Value, dims []int64) (*stablehlo.Value, error) {
	return t.b.BroadcastInDim(v, dims, []int64{int64(len(dims) - 1)})
}

// walk returns the leaf each (tree, row) reaches, as node indices [T, N].
func (t *trees) walk() (*stablehlo.Value, error) {
	dims := []int64{t.ntrees, t.rows}
	idx, err := t.b.BroadcastInDim(t.roots, dims, []int64{0})
	if err != nil {
		return nil, err
	}
	rowOff, err := t.iota(dims, 1, t.feats) // row * feats
	if err != nil {
		return nil, err
	}
	var decide func(idx *stablehlo.Value) (*stablehlo.Value, error)
	if t.args.Layout == fxgraph.TreeLayoutCompare {
		decisions, err := t.compareAll()
		if err != nil {
			return nil, err
		}
		rowNodes, err := t.iota(dims, 1, t.nodes)
		if err != nil {
			return nil, err
		}
		decide = func(idx *stablehlo.Value) (*stablehlo.Value, error) {
			at, err := t.b.Add(rowNodes, idx)
			if err != nil {
				return nil, err
			}
			return t.take(decisions, at)
		}
	} else {
		decide = func(idx *stablehlo.Value) (*stablehlo.Value, error) { return t.decideAt(idx, rowOff) }
	}
	for d := int64(0); d < t.args.Depth; d++ {
		goTrue, err := decide(idx)
		if err != nil {
			return nil, err
		}
		tc, err := t.take(t.trueChild, idx)
		if err != nil {
			return nil, err
		}
		fc, err := t.take(t.falseChild, idx)
		if err != nil {
			return nil, err
		}
		if idx, err = t.b.Select(goTrue, tc, fc); err != nil {
			return nil, err
		}
	}
	return idx, nil
}

// decideAt compares the current nodes idx [T, N] with their rows' inputs
// (rowOff: row * feats).
func (t *trees) decideAt(idx, rowOff *stablehlo.Value) (*stablehlo.Value, error) {
	f, err := t.take(t.feature, idx)
	if err != nil {
		return nil, err
	}
	v, err := t.inputs(rowOff, f)
	if err != nil {
		return nil, err
	}
	thr, err := t.take(t.threshold, idx)
	if err != nil {
		return nil, err
	}
	return t.decide(v, thr, idx, func(table *stablehlo.Value) (*stablehlo.Value, error) { return t.take(table, idx) })
}

// inputs gathers each row's input at feature f (rowOff: row * feats, of
// f's shape).
func (t *trees) inputs(rowOff, f *stablehlo.Value) (*stablehlo.Value, error) {
	at, err := t.b.Add(rowOff, f)
	if err != nil {
		return nil, err
	}
	return t.take(t.x, at)
}

// compareAll compares every node with its input column for every row:
// the decisions [N*M] (row-major), i1.
func (t *trees) compareAll() (*stablehlo.Value, error) {
	dims := []int64{t.rows, t.nodes}
	rowOff, err := t.iota(dims, 0, t.feats)
	if err != nil {
		return nil, err
	}
	f, err := t.broadcastRow(t.feature, dims)
	if err != nil {
		return nil, err
	}
	v, err := t.inputs(rowOff, f)
	if err != nil {
		return nil, err
	}
	thr, err := t.broadcastRow(t.threshold, dims)
	if err != nil {
		return nil, err
	}
	node, err := t.iota(dims, 1, 1)
	if err != nil {
		return nil, err
	}
	d, err := t.decide(v, thr, node, func(table *stablehlo.Value) (*stablehlo.Value, error) { return t.broadcastRow(table, dims) })
	if err != nil {
		return nil, err
	}
	return t.b.Reshape(d, t.rows*t.nodes)
}

// decide compares values v with thresholds thr (same shape) at nodes idx
// by their modes; row reads a per-node table at the same positions.
func (t *trees) decide(v, thr, idx *stablehlo.Value, row func(*stablehlo.Value) (*stablehlo.Value, error)) (*stablehlo.Value, error) {
	var out *stablehlo.Value
	var err error
	if t.modes == nil {
		out, err = t.compare(v, thr, idx, t.args.Mode)
	} else {
		out, err = t.compareModes(v, thr, idx, row)
	}
	if err != nil || t.missing == nil {
		return out, err
	}
	miss, err := row(t.missing)
	if err != nil {
		return nil, err
	}
	nan, err := t.b.Compare(v, v, stablehlo.NE, stablehlo.CompareFloat)
	if err != nil {
		return nil, err
	}
	if miss, err = t.b.And(miss, nan); err != nil {
		return nil, err
	}
	return t.b.Or(out, miss)
}

var treeDirections = map[fxgraph.TreeMode]stablehlo.Direction{
	fxgraph.TreeLEQ: stablehlo.LE, fxgraph.TreeLT: stablehlo.LT, fxgraph.TreeGTE: stablehlo.GE,
	fxgraph.TreeGT: stablehlo.GT, fxgraph.TreeEQ: stablehlo.EQ, fxgraph.TreeNEQ: stablehlo.NE,
}

// compare is one mode's decision.
func (t *trees) compare(v, thr, idx *stablehlo.Value, mode fxgraph.TreeMode) (*stablehlo.Value, error) {
	if mode == fxgraph.TreeMember {
		return t.member(v, idx)
	}
	dir, ok := treeDirections[mode]
	if !ok {
		return nil, fmt.Errorf("node mode %s", mode)
	}
	return t.b.Compare(v, thr, dir, stablehlo.CompareFloat)
}

// compareModes selects each position's decision by its node's mode.
func (t *trees) compareModes(v, thr, idx *stablehlo.Value, row func(*stablehlo.Value) (*stablehlo.Value, error)) (*stablehlo.Value, error) {
	modes, err := row(t.modes)
	if err != nil {
		return nil, err
	}
	out, err := t.splat(modes.Type().WithElem(stablehlo.Bool), 0)
	if err != nil {
		return nil, err
	}
	for m := fxgraph.TreeLEQ; m <= fxgraph.TreeMember; m++ {
		if m == fxgraph.TreeMember && t.members == nil {
			continue
		}
		d, err := t.compare(v, thr, idx, m)
		if err != nil {
			return nil, err
		}
		k, err := t.splat(modes.Type(), float64(m))
		if err != nil {
			return nil, err
		}
		is, err := t.b.Compare(modes, k, stablehlo.EQ, stablehlo.CompareSigned)
		if err != nil {
			return nil, err
		}
		if out, err = t.b.Select(is, d, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// member is the set-membership decision: v equals one of its node's
// members (idx: the node of each position).
func (t *trees) member(v, idx *stablehlo.Value) (*stablehlo.Value, error) {
	if t.members == nil {
		return nil, fmt.Errorf("BRANCH_MEMBER nodes without a members table")
	}
	dims := v.Type().Dims
	wide := append(append([]int64(nil), dims...), t.memberWidth)
	all := make([]int64, len(dims))
	for i := range all {
		all[i] = int64(i)
	}
	base, err := t.b.BroadcastInDim(idx, wide, all)
	if err != nil {
		return nil, err
	}
	if base, err = t.mulConst(base, t.memberWidth); err != nil {
		return nil, err
	}
	k, err := t.iota(wide, len(dims), 1)
	if err != nil {
		return nil, err
	}
	if base, err = t.b.Add(base, k); err != nil {
		return nil, err
	}
	m, err := t.take(t.members, base)
	if err != nil {
		return nil, err
	}
	vw, err := t.b.BroadcastInDim(v, wide, all)
	if err != nil {
		return nil, err
	}
	eq, err := t.b.Compare(vw, m, stablehlo.EQ, stablehlo.CompareFloat)
	if err != nil {
		return nil, err
	}
	return t.reduceOr(eq, int64(len(dims)))
}

// reduceOr reduces the bools v over dim with or.
func (t *trees) reduceOr(v *stablehlo.Value, dim int64) (*stablehlo.Value, error) {
	elem := v.Type().Elem
	body := t.b.Region(stablehlo.TensorOf(elem), stablehlo.TensorOf(elem))
	r, err := body.Or(body.Arg(0), body.Arg(1))
	if err != nil {
		return nil, err
	}
	if err := body.Return(r); err != nil {
		return nil, err
	}
	z, err := t.b.ScalarConstant(elem, 0)
	if err != nil {
		return nil, err
	}
	out, err := t.b.Reduce([]*stablehlo.Value{v}, []*stablehlo.Value{z}, []int64{dim}, body)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// aggregate gathers the weights of the reached leaves [T, N] and combines
// them tree by tree: the scores and has_score, both [N, C].
func (t *trees) aggregate(leaves *stablehlo.Value) (*stablehlo.Value, *stablehlo.Value, error) {
	dims := []int64{t.ntrees, t.rows, t.targets}
	base, err := t.b.BroadcastInDim(leaves, dims, []int64{0, 1})
	if err != nil {
		return nil, nil, err
	}
	if base, err = t.mulConst(base, t.targets); err != nil {
		return nil, nil, err
	}
	c, err := t.iota(dims, 2, 1)
	if err != nil {
		return nil, nil, err
	}
	if base, err = t.b.Add(base, c); err != nil {
		return nil, nil, err
	}
	w, err := t.take(t.weights, base)
	if err != nil {
		return nil, nil, err
	}
	h, err := t.take(t.has, base)
	if err != nil {
		return nil, nil, err
	}
	scores, err := t.inOrder(w, h)
	if err != nil {
		return nil, nil, err
	}
	has, err := t.reduceOr(h, 0)
	return scores, has, err
}

// inOrder combines w [T, N, C] over the trees in order: a chain of adds
// (or min/max where the tree gave a weight, per has [T, N, C]) from zero.
func (t *trees) inOrder(w, has *stablehlo.Value) (*stablehlo.Value, error) {
	acc, err := t.splat(stablehlo.TensorOf(t.acc, t.rows, t.targets), 0)
	if err != nil {
		return nil, err
	}
	var seen *stablehlo.Value
	if t.args.Aggregate != "SUM" {
		if seen, err = t.splat(stablehlo.TensorOf(stablehlo.Bool, t.rows, t.targets), 0); err != nil {
			return nil, err
		}
	}
	for i := int64(0); i < t.ntrees; i++ {
		wi, err := t.slice(w, i)
		if err != nil {
			return nil, err
		}
		if t.args.Aggregate == "SUM" {
			if acc, err = t.b.Add(acc, wi); err != nil {
				return nil, err
			}
			continue
		}
		hi, err := t.slice(has, i)
		if err != nil {
			return nil, err
		}
		if acc, seen, err = t.minMax(acc, seen, wi, hi); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

// minMax takes tree weight wi (given where hi) into the running min or max
// acc (valid where seen), as ONNX Runtime's MIN and MAX aggregators do.
func (t *trees) minMax(acc, seen, wi, hi *stablehlo.Value) (*stablehlo.Value, *stablehlo.Value, error) {
	dir := stablehlo.LT
	if t.args.Aggregate == "MAX" {
		dir = stablehlo.GT
	}
	better, err := t.b.Compare(wi, acc, dir, stablehlo.CompareFloat)
	if err != nil {
		return nil, nil, err
	}
	notSeen, err := t.b.Not(seen)
	if err != nil {
		return nil, nil, err
	}
	if better, err = t.b.Or(better, notSeen); err != nil {
		return nil, nil, err
	}
	if better, err = t.b.And(better, hi); err != nil {
		return nil, nil, err
	}
	if acc, err = t.b.Select(better, wi, acc); err != nil {
		return nil, nil, err
	}
	seen, err = t.b.Or(seen, hi)
	return acc, seen, err
}

// slice returns v[i] of v [T, N, C] as [N, C].
func (t *trees) slice(v *stablehlo.Value, i int64) (*stablehlo.Value, error) {
	s, err := t.b.Slice(v, []int64{i, 0, 0}, []int64{i + 1, t.rows, t.targets}, []int64{1, 1, 1})
	if err != nil {
		return nil, err
	}
	return t.b.Reshape(s, t.rows, t.targets)
}
