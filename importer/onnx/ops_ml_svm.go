package onnx

import (
	"fmt"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// SVMClassifier and SVMRegressor as ONNX Runtime computes them
// (svmclassifier.cc, svmregressor.cc): the kernel of the input with every
// support vector in float32, one-vs-one decision values summed in float64
// with votes on their sign, and with prob_a/prob_b libsvm's pairwise
// coupling (multiclass_probability), whose iterations, stopped per row when
// they converge, run in a while loop.

// svmKernel is the kernel settings of an SVM node.
type svmKernel struct {
	kind                 string
	gamma, coef0, degree float64
}

func svmKernelAttrs(c *Ctx) (svmKernel, error) {
	k := svmKernel{kind: c.AttrString("kernel_type", "LINEAR")}
	if p := c.AttrFloats("kernel_params", nil); len(p) >= 3 {
		k.gamma, k.coef0, k.degree = float64(p[0]), float64(p[1]), float64(p[2])
	}
	switch k.kind {
	case "LINEAR", "POLY", "RBF", "SIGMOID":
		return k, nil
	}
	return k, fmt.Errorf("kernel_type %q, want LINEAR, POLY, RBF or SIGMOID", k.kind)
}

// matrix is a [rows, cols] float32 constant of row-major v.
func (b *mlBuild) matrix(name string, v []float64, rows, cols int64) *fxgraph.Node {
	if int64(len(v)) != rows*cols {
		b.err = fmt.Errorf("%s has %d values, want %d x %d", name, len(v), rows, cols)
		return nil
	}
	t := tensor.New(tensor.Float32, rows, cols)
	for i, e := range v {
		t.SetFloat64(int64(i), e)
	}
	return b.constant(name, t)
}

// kernel is k(x, v) of x [N, F] with every row of vs [V, F]: [N, V]; c is
// added to the dot product of a linear kernel (ONNX Runtime's scalar C).
func (b *mlBuild) kernel(k svmKernel, x, vs *fxgraph.Node, c float64) *fxgraph.Node {
	f32 := b.f32
	if k.kind == "RBF" {
		d := b.sub(b.emit(fxgraph.AtenUnsqueeze, x, int64(1)), b.emit(fxgraph.AtenUnsqueeze, vs, int64(0)))
		sum := b.emit(fxgraph.AtenSumDimIntList, b.mul(d, d), []any{int64(2)}, false)
		return b.exp(b.mul(f32(float64(-float32(k.gamma))), sum))
	}
	dot := b.mm(x, b.emit(fxgraph.AtenT, vs))
	if k.kind == "LINEAR" {
		if c != 0 {
			dot = b.add(dot, f32(c))
		}
		return dot
	}
	dot = b.add(b.mul(f32(k.gamma), dot), f32(k.coef0))
	if k.kind == "SIGMOID" {
		return b.emit(fxgraph.AtenTanh, dot)
	}
	switch k.degree {
	case 2:
		return b.mul(dot, dot)
	case 3:
		return b.mul(b.mul(dot, dot), dot)
	}
	return b.emit(fxgraph.AtenPowTensorScalar, dot, k.degree)
}

func svmRegressorConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	k, err := svmKernelAttrs(c)
	if err != nil {
		return err
	}
	x := b.to(b.rows(floatInput(b)), tensor.Float32)
	if b.err != nil {
		return b.err
	}
	coef := f64s(c.AttrFloats("coefficients", nil))
	rho := c.AttrFloats("rho", []float32{0})
	nsv := c.AttrInt("n_supports", 0)
	feats := Meta(x).Shape[1].Size
	var y *fxgraph.Node
	if nsv > 0 {
		sv := b.matrix("support_vectors", f64s(c.AttrFloats("support_vectors", nil)), nsv, int64(len(c.AttrFloats("support_vectors", nil)))/nsv)
		kv := b.kernel(k, x, sv, 0)
		y = b.add(b.mm(kv, b.matrix("coefficients", coef, nsv, 1)), b.f32(float64(rho[0])))
	} else {
		y = b.mm(x, b.matrix("coefficients", coef, feats, 1))
		y = b.add(y, b.f32(float64(rho[0])))
	}
	if c.AttrInt("one_class", 0) != 0 {
		y = b.where(b.gt(y, b.f32(0)), b.f32(1), b.f32(-1))
	}
	pt, err := postTransformAttr(c)
	if err != nil {
		return err
	}
	if pt == "PROBIT" {
		y = b.probit(y)
	}
	c.SetOutput(0, y)
	return b.err
}

// svmClass is a parsed SVMClassifier.
type svmClass struct {
	k                   svmKernel
	classes, vectors    int64
	perClass, start     []int64
	coef, rho           []float64
	probA, probB        []float64
	ints                []int64
	strs                [][]byte
	allPositive, linear bool
}

func parseSVMClassifier(c *Ctx) (*svmClass, error) {
	k, err := svmKernelAttrs(c)
	if err != nil {
		return nil, err
	}
	s := &svmClass{k: k, perClass: c.AttrInts("vectors_per_class", nil), coef: f64s(c.AttrFloats("coefficients", nil)),
		rho: f64s(c.AttrFloats("rho", nil)), probA: f64s(c.AttrFloats("prob_a", nil)), probB: f64s(c.AttrFloats("prob_b", nil))}
	s.ints, s.strs = classLabels(c)
	if s.ints == nil && s.strs == nil {
		s.ints = c.AttrInts("classlabels_ints", nil)
	}
	s.classes = int64(len(s.ints) + len(s.strs))
	for _, v := range s.perClass {
		s.start = append(s.start, s.vectors)
		s.vectors += v
	}
	s.linear = s.vectors == 0
	s.allPositive = true
	for _, w := range s.coef {
		if w < 0 {
			s.allPositive = false
		}
	}
	switch {
	case s.classes < 2:
		return nil, Unsupported("SVMClassifier with %d class labels", s.classes)
	case len(s.probA) != len(s.probB):
		return nil, fmt.Errorf("%d prob_a for %d prob_b", len(s.probA), len(s.probB))
	case !s.linear && int64(len(s.perClass)) != s.classes:
		return nil, fmt.Errorf("vectors_per_class has %d values for %d classes", len(s.perClass), s.classes)
	case !s.linear && int64(len(s.coef)) != (s.classes-1)*s.vectors:
		return nil, fmt.Errorf("%d coefficients, want (classes-1) x vectors = %d", len(s.coef), (s.classes-1)*s.vectors)
	case !s.linear && int64(len(s.rho)) < s.classes*(s.classes-1)/2, s.linear && len(s.rho) < 1:
		return nil, fmt.Errorf("%d rho values for %d classes", len(s.rho), s.classes)
	}
	return s, nil
}

func svmClassifierConvert(c *Ctx, n *Node) error {
	b := &mlBuild{c: c}
	s, err := parseSVMClassifier(c)
	if err != nil {
		return err
	}
	pt, err := postTransformAttr(c)
	if err != nil {
		return err
	}
	x := b.to(b.rows(floatInput(b)), tensor.Float32)
	if b.err != nil {
		return b.err
	}
	var label, scores *fxgraph.Node
	if s.linear {
		label, scores = b.svmLinear(s, x, pt)
	} else {
		label, scores = b.svmSVC(s, x, pt)
	}
	c.SetOutput(0, label)
	c.SetOutput(1, scores)
	return b.err
}

// svmLinear is liblinear's mode (no support vectors): scores x·coefᵀ +
// rho[0], the label the largest score's.
func (b *mlBuild) svmLinear(s *svmClass, x *fxgraph.Node, pt string) (label, scores *fxgraph.Node) {
	feats := int64(len(s.coef)) / s.classes
	w := b.matrix("coefficients", s.coef, s.classes, feats)
	scores = b.kernel(svmKernel{kind: "LINEAR"}, x, w, s.rho[0])
	idx := b.emit(fxgraph.AtenArgmax, scores, int64(1))
	if s.classes == 2 && len(s.probA) == 0 {
		mw := b.emit(fxgraph.AtenAmax, scores, []any{int64(1)}, false)
		one := b.scalar(tensor.Int64, 1)
		if s.allPositive {
			idx = b.where(b.emit(fxgraph.AtenGeTensor, mw, b.f32(0.5)), one, idx)
		} else {
			idx = b.where(b.gt(mw, b.f32(0)), one, idx)
		}
	}
	return b.labels(idx, s.ints, s.strs), b.transform(pt, scores)
}

// svmPairs returns, for the one-vs-one classifiers (i, j) with i < j in
// ONNX Runtime's order, the coefficient matrix [V, P] whose column p sums
// the decision value of pair p from the kernels, and the one-hot vote
// matrices of i and j [P, C].
func (s *svmClass) svmPairs() (coef, voteI, voteJ []float64, pairs int64) {
	pairs = s.classes * (s.classes - 1) / 2
	coef = make([]float64, s.vectors*pairs)
	voteI, voteJ = make([]float64, pairs*s.classes), make([]float64, pairs*s.classes)
	p := int64(0)
	for i := range s.classes - 1 {
		for j := i + 1; j < s.classes; j++ {
			for m := range s.perClass[i] {
				coef[(s.start[i]+m)*pairs+p] = s.coef[(j-1)*s.vectors+s.start[i]+m]
			}
			for m := range s.perClass[j] {
				coef[(s.start[j]+m)*pairs+p] = s.coef[i*s.vectors+s.start[j]+m]
			}
			voteI[p*s.classes+i], voteJ[p*s.classes+j] = 1, 1
			p++
		}
	}
	return coef, voteI, voteJ, pairs
}

// svmSVC is libsvm's mode: one-vs-one decision values, votes, and the
// probabilities when prob_a and prob_b are given.
func (b *mlBuild) svmSVC(s *svmClass, x *fxgraph.Node, pt string) (label, scores *fxgraph.Node) {
	feats := Meta(x).Shape[1].Size
	sv := b.matrix("support_vectors", f64s(b.c.AttrFloats("support_vectors", nil)), s.vectors, feats)
	kv := b.kernel(s.k, x, sv, 0)
	coef, vi, vj, pairs := s.svmPairs()
	cm := tensor.New(tensor.Float64, s.vectors, pairs)
	for i, v := range coef {
		cm.SetFloat64(int64(i), v)
	}
	sum := b.add(b.mm(b.to(kv, tensor.Float64), b.constant("svm_pairs", cm)),
		vectorConst(b.c, "rho", tensor.Float64, s.rho[:pairs]))
	pos := b.to(b.gt(sum, b.scalar(tensor.Float64, 0)), tensor.Float32)
	neg := b.sub(b.f32(1), pos)
	votes := b.add(b.mm(pos, b.matrix("votes_i", vi, pairs, s.classes)), b.mm(neg, b.matrix("votes_j", vj, pairs, s.classes)))
	label = b.labels(b.emit(fxgraph.AtenArgmax, votes, int64(1)), s.ints, s.strs)
	dec := b.to(sum, tensor.Float32)
	if len(s.probA) > 0 {
		return label, b.transform(pt, b.svmProbabilities(s, dec, pairs))
	}
	if s.classes > 2 {
		return label, b.transform(pt, dec)
	}
	if pt == "NONE" { // ONNX Runtime's add_second_class 2: [-score, score]
		return label, b.cat(1, b.neg(dec), dec)
	}
	if pt == "PROBIT" {
		return label, b.cat(1, b.probit(dec), b.mul(dec, b.f32(0)))
	}
	return label, b.cat(1, b.sub(b.f32(1), dec), dec)
}

// svmProbabilities couples the pairwise probabilities of dec [N, P] into
// class probabilities [N, C] (libsvm's multiclass_probability, as ONNX
// Runtime computes it in float32).
func (b *mlBuild) svmProbabilities(s *svmClass, dec *fxgraph.Node, pairs int64) *fxgraph.Node {
	k := s.classes
	lo, hi := b.f32(float64(float32(1e-7))), b.f32(float64(1-float32(1e-7)))
	// r[i][j] for the pair (i, j), i < j; r[j][i] = 1 - r[i][j].
	r := make([][]*fxgraph.Node, k)
	for i := range r {
		r[i] = make([]*fxgraph.Node, k)
	}
	p := int64(0)
	for i := range k - 1 {
		for j := i + 1; j < k; j++ {
			d := b.squeeze1(b.column(dec, p))
			v := b.sub(b.f32(1), b.logistic(b.add(b.mul(d, b.f32(s.probA[p])), b.f32(s.probB[p]))))
			v = b.emit(fxgraph.AtenMinimum, b.emit(fxgraph.AtenMaximum, v, lo), hi)
			r[i][j], r[j][i] = v, b.sub(b.f32(1), v)
			p++
		}
	}
	// Q: Q[i][i] = sum over j != i of r[j][i]^2, Q[i][j] = -r[j][i] r[i][j].
	q := make([]*fxgraph.Node, 0, k*k)
	for i := range k {
		for j := range k {
			if i == j {
				var diag *fxgraph.Node
				for m := range k {
					if m != i {
						sq := b.mul(r[m][i], r[m][i])
						if diag == nil {
							diag = sq
						} else {
							diag = b.add(diag, sq)
						}
					}
				}
				q = append(q, diag)
				continue
			}
			q = append(q, b.neg(b.mul(r[j][i], r[i][j])))
		}
	}
	return b.coupleLoop(q, k)
}

// svmCoupleIterations bounds libsvm's pairwise coupling, as ONNX Runtime.
const svmCoupleIterations = 100

// coupleLoop runs multiclass_probability's iterations on Q (k*k values of
// [N] each, row-major) from p = 1/k: a while loop whose rows stop changing
// once their error is below 0.005/k, for at most 100 iterations.
func (b *mlBuild) coupleLoop(q []*fxgraph.Node, k int64) *fxgraph.Node {
	qm := b.stack(q)
	if b.err != nil {
		return nil
	}
	n := Meta(qm).Shape[0]
	pMeta := fxgraph.TensorMeta{DType: tensor.Float32, Shape: fxgraph.Shape{n, fxgraph.D(k)}}
	doneMeta := fxgraph.TensorMeta{DType: tensor.Bool, Shape: fxgraph.Shape{n}}
	iterMeta := fxgraph.TensorMeta{DType: tensor.Int64}
	places := func(g *fxgraph.Graph) (iter, p, done, qv *fxgraph.Node) {
		return g.AddPlaceholder("iter", iterMeta), g.AddPlaceholder("p", pMeta), g.AddPlaceholder("done", doneMeta),
			g.AddPlaceholder("q", Meta(qm))
	}
	condG := fxgraph.New()
	cb := b.in(condG)
	it, _, done, _ := places(condG)
	more := cb.emit(fxgraph.AtenLtTensor, it, cb.scalar(tensor.Int64, svmCoupleIterations))
	condG.SetOutput(cb.and(more, cb.emit(fxgraph.AtenAny, cb.not(done))))

	bodyG := fxgraph.New()
	bb := b.in(bodyG)
	it, p, done, qv := places(bodyG)
	np, nd := bb.coupleStep(p, done, qv, k)
	if err := firstErr(cb.err, bb.err); err != nil {
		b.err = err
		return nil
	}
	bodyG.SetOutput(bb.add(it, bb.scalar(tensor.Int64, 1)), np, nd)
	bodyG.EliminateDeadCode()
	p0 := b.add(b.mul(b.column(qm, 0), b.f32(0)), b.f32(float64(float32(1)/float32(k))))
	p0 = b.emit(fxgraph.AtenExpand, p0, []any{int64(-1), k})
	done0 := b.emit(fxgraph.AtenLtTensor, b.squeeze1(b.column(qm, 0)), b.f32(0)) // false: Q's diagonal is positive
	done0 = b.and(done0, b.scalar(tensor.Bool, 0))
	w := b.emit(fxgraph.WhileLoop, b.c.Graph().AddSubgraph("couple_cond", condG), b.c.Graph().AddSubgraph("couple_body", bodyG),
		[]any{b.scalar(tensor.Int64, 0), p0, done0}, []any{qm})
	return b.emit(fxgraph.GetItem, w, int64(1))
}

// coupleStep is one iteration of multiclass_probability for the rows not
// done: the new p and done.
func (b *mlBuild) coupleStep(pm, done, qm *fxgraph.Node, k int64) (*fxgraph.Node, *fxgraph.Node) {
	col := func(v *fxgraph.Node, j int64) *fxgraph.Node { return b.squeeze1(b.column(v, j)) }
	p := make([]*fxgraph.Node, k)
	qp := make([]*fxgraph.Node, k)
	for i := range k {
		p[i] = col(pm, i)
	}
	q := func(i, j int64) *fxgraph.Node { return col(qm, i*k+j) }
	var pqp *fxgraph.Node
	for i := range k {
		for j := range k {
			t := b.mul(q(i, j), p[j])
			if j == 0 {
				qp[i] = t
			} else {
				qp[i] = b.add(qp[i], t)
			}
		}
		t := b.mul(p[i], qp[i])
		if i == 0 {
			pqp = t
		} else {
			pqp = b.add(pqp, t)
		}
	}
	maxErr := b.abs(b.sub(qp[0], pqp))
	for i := int64(1); i < k; i++ {
		maxErr = b.emit(fxgraph.AtenMaximum, maxErr, b.abs(b.sub(qp[i], pqp)))
	}
	newly := b.lt(maxErr, b.f32(float64(float32(0.005)/float32(k))))
	update := b.not(b.or(done, newly))
	old := append([]*fxgraph.Node(nil), p...)
	one, two := b.f32(1), b.f32(2)
	for i := range k {
		diff := b.div(b.add(b.neg(qp[i]), pqp), q(i, i))
		p[i] = b.add(p[i], diff)
		d1 := b.add(one, diff)
		pqp = b.div(b.div(b.add(pqp, b.mul(diff, b.add(b.mul(diff, q(i, i)), b.mul(two, qp[i])))), d1), d1)
		for j := range k {
			qp[j] = b.div(b.add(qp[j], b.mul(diff, q(i, j))), d1)
			p[j] = b.div(p[j], d1)
		}
	}
	for i := range k {
		p[i] = b.where(update, p[i], old[i])
	}
	return b.stack(p), b.or(done, newly)
}

// stack stacks [N] values into [N, len(vs)].
func (b *mlBuild) stack(vs []*fxgraph.Node) *fxgraph.Node {
	cols := make([]*fxgraph.Node, len(vs))
	for i, v := range vs {
		cols[i] = b.emit(fxgraph.AtenUnsqueeze, v, int64(1))
	}
	return b.cat(1, cols...)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
