package onnx

import (
	"fmt"
	"slices"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/tensor"
)

// TfIdfVectorizer. Strings (pool_strings) become integers first: each
// distinct word of the pool is numbered, the input's words are looked up
// among them on the host (xserve.string_lookup; a word outside the pool is
// -1, which no pool n-gram holds), and the integer path runs in the
// program. The input length is static, so every n-gram the op looks at (each start position
// and skip count, for each n) is known at import: they are gathered with a
// constant index table, compared with the pool's n-grams, counted per pool
// entry, and scattered to the output columns by a constant one-hot matrix.

func registerTfIdf(cs converters) {
	cs.register("", "TfIdfVectorizer", 9, tfidfConvert)
}

// tfidfPool is the n-grams of one length n in the pool: grams[k] is entry
// k, column[k] its output column.
type tfidfPool struct {
	n      int64
	grams  [][]int64
	column []int64
}

// tfidfPools splits the pool (pool_int64s, or the numbers of
// pool_strings' words) into its sections by ngram_counts.
func tfidfPools(c *Ctx, pool []int64) ([]tfidfPool, int64, error) {
	counts := c.AttrInts("ngram_counts", nil)
	indexes := c.AttrInts("ngram_indexes", nil)
	var pools []tfidfPool
	entry := 0
	width := int64(0)
	for i, start := range counts {
		end := int64(len(pool))
		if i+1 < len(counts) {
			end = counts[i+1]
		}
		n := int64(i + 1)
		if start < 0 || end < start || end > int64(len(pool)) || (end-start)%n != 0 {
			return nil, 0, fmt.Errorf("TfIdfVectorizer: ngram_counts %v do not split a pool of %d values into %d-grams", counts, len(pool), n)
		}
		p := tfidfPool{n: n}
		for at := start; at < end; at += n {
			if entry >= len(indexes) {
				return nil, 0, fmt.Errorf("TfIdfVectorizer: ngram_indexes has %d values, the pool more n-grams", len(indexes))
			}
			if indexes[entry] < 0 {
				return nil, 0, fmt.Errorf("TfIdfVectorizer: negative ngram_indexes %d", indexes[entry])
			}
			p.grams = append(p.grams, pool[at:at+n])
			p.column = append(p.column, indexes[entry])
			width = max(width, indexes[entry]+1)
			entry++
		}
		pools = append(pools, p)
	}
	return pools, width, nil
}

// tfidfWords returns the input and pool as integers: pool_int64s as they
// are, or pool_strings' words numbered in order of first appearance and
// the input's words looked up among them (-1 for none).
func tfidfWords(c *Ctx, x *fxgraph.Node) (*fxgraph.Node, []int64, error) {
	a := c.Attr("pool_strings")
	if a == nil {
		return x, c.AttrInts("pool_int64s", nil), nil
	}
	if Meta(x).DType != tensor.String {
		return nil, nil, fmt.Errorf("TfIdfVectorizer: pool_strings for %s input", Meta(x))
	}
	number := map[string]int64{}
	var vocab [][]byte
	pool := make([]int64, len(a.Strings))
	for i, w := range a.Strings {
		k, ok := number[string(w)]
		if !ok {
			k = int64(len(vocab))
			number[string(w)] = k
			vocab = append(vocab, w)
		}
		pool[i] = k
	}
	b := &mlBuild{c: c}
	ids := b.emit(fxgraph.XserveStringLookup, x, stringConst(c, "tfidf_vocabulary", vocab))
	return ids, pool, b.err
}

// tfidfPositions returns, for n-grams of length n with at most maxSkip
// skipped items between consecutive items, the input positions of every
// n-gram of a row of length size (unigrams once).
func tfidfPositions(n, maxSkip, size int64) [][]int64 {
	if n == 1 {
		maxSkip = 0
	}
	var out [][]int64
	for skip := int64(0); skip <= maxSkip; skip++ {
		for start := int64(0); start+(n-1)*(skip+1) < size; start++ {
			g := make([]int64, n)
			for j := range g {
				g[j] = start + int64(j)*(skip+1)
			}
			out = append(out, g)
		}
	}
	return out
}

func tfidfConvert(c *Ctx, n *Node) error {
	x, err := c.Input(0)
	if err != nil {
		return err
	}
	x, pool, err := tfidfWords(c, x)
	if err != nil {
		return err
	}
	m := Meta(x)
	dims, ok := m.Shape.Static()
	if !m.DType.IsInt() || !ok || len(dims) < 1 || len(dims) > 2 {
		return Unsupported("TfIdfVectorizer of %s (want a static 1-D or 2-D integer or string tensor)", m)
	}
	pools, width, err := tfidfPools(c, pool)
	if err != nil {
		return err
	}
	minN, maxN := c.AttrInt("min_gram_length", 1), c.AttrInt("max_gram_length", 1)
	maxSkip := c.AttrInt("max_skip_count", 0)
	mode := c.AttrString("mode", "")
	if mode != "TF" && mode != "IDF" && mode != "TFIDF" {
		return fmt.Errorf("TfIdfVectorizer: mode %q, want TF, IDF or TFIDF", mode)
	}
	if minN < 1 || maxN < minN || maxSkip < 0 {
		return fmt.Errorf("TfIdfVectorizer: gram lengths [%d, %d], max_skip_count %d", minN, maxN, maxSkip)
	}
	x2 := x
	if len(dims) == 1 {
		if x2, err = c.Emit(fxgraph.AtenUnsqueeze, x, int64(0)); err != nil {
			return err
		}
	}
	size, batch := dims[len(dims)-1], int64(1)
	if len(dims) == 2 {
		batch = dims[0]
	}
	total, err := tfidfTotal(c, x2, pools, tfidfShape{minN: minN, maxN: maxN, maxSkip: maxSkip, size: size, batch: batch, width: width})
	if err != nil {
		return err
	}
	// Weights are per output column, as in ONNX Runtime and the ONNX
	// reference implementation.
	w := c.AttrFloats("weights", nil)
	if w != nil && int64(len(w)) < width {
		return fmt.Errorf("TfIdfVectorizer: %d weights for %d output columns", len(w), width)
	}
	if w != nil {
		w = w[:width]
	}
	out, err := tfidfWeigh(c, total, mode, w)
	if err != nil {
		return err
	}
	if len(dims) == 1 {
		if out, err = c.Emit(fxgraph.AtenSqueezeDims, out, []any{int64(0)}); err != nil {
			return err
		}
	}
	c.SetOutput(0, out)
	return nil
}

// tfidfShape is what tfidfTotal needs of a TfIdfVectorizer: the n-gram
// lengths counted, the skips, and x's row size, rows and the output width.
type tfidfShape struct{ minN, maxN, maxSkip, size, batch, width int64 }

// tfidfTotal returns float32 [batch, width]: each output column's count of
// its n-gram in each row of x [batch, size], over the pools of counted
// lengths.
func tfidfTotal(c *Ctx, x *fxgraph.Node, pools []tfidfPool, d tfidfShape) (*fxgraph.Node, error) {
	total := c.Constant("tfidf_zero", tensor.New(tensor.Float32, d.batch, d.width))
	for _, p := range pools {
		if p.n < d.minN || p.n > d.maxN || len(p.grams) == 0 {
			continue
		}
		counts, err := tfidfCounts(c, x, p, tfidfPositions(p.n, d.maxSkip, d.size), d.batch)
		if err != nil {
			return nil, err
		}
		if counts == nil {
			continue
		}
		scatter := tensor.New(tensor.Float32, int64(len(p.grams)), d.width)
		for k, col := range p.column {
			scatter.SetFloat64(int64(k)*d.width+col, 1)
		}
		part, err := c.Emit(fxgraph.AtenMatmul, counts, c.Constant("tfidf_columns", scatter))
		if err != nil {
			return nil, err
		}
		if total, err = c.Emit(fxgraph.AtenAddTensor, total, part); err != nil {
			return nil, err
		}
	}
	return total, nil
}

// tfidfCounts returns float32 [batch, len(p.grams)]: how often each pool
// n-gram occurs at positions in each row of x [batch, size]; nil when no
// n-gram fits.
func tfidfCounts(c *Ctx, x *fxgraph.Node, p tfidfPool, positions [][]int64, batch int64) (*fxgraph.Node, error) {
	if len(positions) == 0 {
		return nil, nil
	}
	flat := slices.Concat(positions...)
	e := &sigEmitter{c: c}
	g := e.op(fxgraph.AtenIndexSelect, x, int64(1), c.IntsConst(flat))
	g = e.op(fxgraph.AtenView, g, []any{batch, int64(len(positions)), int64(1), p.n}) // [B, P, 1, n]
	gramT := tensor.FromInt64s(slices.Concat(p.grams...), int64(len(p.grams)), p.n).Convert(Meta(x).DType)
	eq := e.op(fxgraph.AtenEqTensor, g, c.Constant("tfidf_pool", gramT)) // [B, P, K, n]
	if e.err != nil {
		return nil, e.err
	}
	f, err := ewCastTo(c, eq, tensor.Float32)
	if err != nil {
		return nil, err
	}
	hits := e.op(fxgraph.AtenSumDimIntList, f, []any{int64(-1)}, false) // [B, P, K]
	whole := e.op(fxgraph.AtenEqScalar, hits, float64(p.n))             // every item matches
	if e.err != nil {
		return nil, e.err
	}
	if f, err = ewCastTo(c, whole, tensor.Float32); err != nil {
		return nil, err
	}
	return c.Emit(fxgraph.AtenSumDimIntList, f, []any{int64(1)}, false)
}

// tfidfWeigh applies the mode to counts [B, width]: TF the counts, IDF 1
// where a count is positive, times the columns' weights w (default 1) for
// IDF and TFIDF.
func tfidfWeigh(c *Ctx, counts *fxgraph.Node, mode string, w []float32) (*fxgraph.Node, error) {
	out := counts
	var err error
	if mode == "IDF" {
		pos, err := c.Emit(fxgraph.AtenGtScalar, counts, 0.0)
		if err != nil {
			return nil, err
		}
		if out, err = ewCastTo(c, pos, tensor.Float32); err != nil {
			return nil, err
		}
	}
	if w != nil && mode != "TF" {
		if out, err = c.Emit(fxgraph.AtenMulTensor, out, c.Constant("tfidf_weights", tensor.FromFloat32s(w, int64(len(w))))); err != nil {
			return nil, err
		}
	}
	return out, nil
}
