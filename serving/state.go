package serving

import (
	"fmt"
	"strings"

	"github.com/xserve/xserve/modelrepo"
	"github.com/xserve/xserve/tensor"
)

// statePair is one piece of a stateful model's state: an output that the
// next step of a sequence feeds back into an input (silero-vad's stateN
// into state, an RNN's hn into h). Clients never send the input; the
// server keeps the output of each sequence on the device between its
// requests (sequences.go).
type statePair struct {
	in, out int // indices into BucketPlan.Inputs and Outputs
	// batchAxis is the input's axis that holds one row per sequence (the
	// symbol it shares with a non-state input), -1 when the state has no
	// symbolic axis (one row whatever the batch).
	batchAxis int
	// initial is every element's value at a sequence's start
	// (config.yaml's sequence.state[].initial; recognised states: 0).
	initial float64
}

// initialValue is the state's value at a sequence's start, of dtype dt
// and the given shape.
func (sp statePair) initialValue(dt tensor.DType, shape []int64) *tensor.Tensor {
	t := tensor.New(dt, shape...)
	if sp.initial != 0 {
		one := tensor.New(dt, 1)
		one.SetFloat64(0, sp.initial)
		fill(t.Data, one.Data)
	}
	return t
}

// stateOutputNames are the names a model's output carrying input n's next
// value goes by: stateN for state, hn for h, present for past, h_out for
// h_in.
func stateOutputNames(n string) []string {
	names := []string{n + "N", n + "n", n + "_out", n + "_new", "new_" + n, n + "_next", "next_" + n}
	if r := strings.Replace(n, "past", "present", 1); r != n {
		names = append(names, r)
	}
	if base, ok := strings.CutSuffix(n, "_in"); ok {
		names = append(names, base+"_out")
	}
	if base, ok := strings.CutSuffix(n, "in"); ok && base != "" {
		names = append(names, base+"out")
	}
	return names
}

// findStates recognises a model's state: each input with an output of the
// same dtype and rank whose shape equals the input's once shapes are
// inferred, named as its next value (stateOutputNames; the shapes then
// need only agree where they can be inferred), or, without such a name,
// equal at two different sets of sizes. A state input must have a batch
// axis the other inputs determine, or no symbolic axis at all; a pair
// without one is not taken for a state (pair.onnx's x [batch, seq] and its
// sum x + 0.5*y are alike in shape, not a state): the model stays
// stateless, as it does when every input would be a state.
func findStates(p *BucketPlan) []statePair {
	d1, d2 := p.baseDims(), p.otherDims()
	s1, err1 := p.outputShapes(d1)
	s2, err2 := p.outputShapes(d2)
	var pairs []statePair
	used := map[int]bool{}
	for i := range p.Inputs {
		k, ok := p.stateOutput(i, used, func(k int, named bool) bool {
			same1 := err1 == nil && equalShape(s1[k], p.inputShape(i, d1))
			same2 := err2 == nil && equalShape(s2[k], p.inputShape(i, d2))
			if named {
				return (err1 != nil || same1) && (err2 != nil || same2)
			}
			return same1 && same2 && !equalDims(d1, d2)
		})
		if !ok {
			continue
		}
		axis, err := p.stateBatchAxis(i)
		if err != nil {
			continue
		}
		used[k] = true
		pairs = append(pairs, statePair{in: i, out: k, batchAxis: axis})
	}
	if len(pairs) == len(p.Inputs) {
		return nil // every input fed back: nothing for a client to send
	}
	return pairs
}

// stateOutput returns the output that carries input i's next value: one
// named so (stateOutputNames) first, else the one output of the same dtype
// and rank whose shapes agree.
func (p *BucketPlan) stateOutput(i int, used map[int]bool, agree func(k int, named bool) bool) (int, bool) {
	in := &p.Inputs[i]
	fits := func(k int) bool {
		o := &p.Outputs[k]
		return !used[k] && o.DType == in.DType && len(o.Dims) == len(in.Dims) && len(in.Dims) > 0
	}
	for _, name := range stateOutputNames(in.Name) {
		if k := p.outputIndex(name); k >= 0 && fits(k) && agree(k, true) {
			return k, true
		}
	}
	found := -1
	for k := range p.Outputs {
		if fits(k) && agree(k, false) {
			if found >= 0 {
				return -1, false // two candidates: not a state by shape alone
			}
			found = k
		}
	}
	return found, found >= 0
}

// stateBatchAxis returns the axis of state input i whose symbol another
// (non-state) input also has: where one sequence's rows lie.
func (p *BucketPlan) stateBatchAxis(i int) (int, error) {
	axis := -1
	for d, spec := range p.Inputs[i].Dims {
		if spec.Sym == "" && spec.Expr == nil {
			continue
		}
		if spec.Sym == "" || !p.symbolOfOtherInput(i, spec.Sym) {
			return -1, fmt.Errorf("state input %q (%s): dim %d (%s) is set by no other input, so a sequence's state has no known size",
				p.Inputs[i].Name, &p.Inputs[i], d, spec)
		}
		if axis >= 0 {
			return -1, fmt.Errorf("state input %q (%s) has two symbolic dims (%d and %d); one, the batch, is supported", p.Inputs[i].Name, &p.Inputs[i], axis, d)
		}
		axis = d
	}
	return axis, nil
}

func (p *BucketPlan) symbolOfOtherInput(i int, sym string) bool {
	for j := range p.Inputs {
		if j == i {
			continue
		}
		for _, spec := range p.Inputs[j].Dims {
			if spec.Sym == sym {
				return true
			}
		}
	}
	return false
}

// otherDims gives every symbol a size other than baseDims' where its
// buckets or range allow: its second bucket, else one more than its first.
func (p *BucketPlan) otherDims() map[string]int64 {
	dims := make(map[string]int64, len(p.Symbols))
	for _, s := range p.Symbols {
		n := s.Buckets[0] + 1
		if len(s.Buckets) > 1 {
			n = s.Buckets[1]
		}
		if s.Range.Max >= 0 && n > s.Range.Max {
			n = s.Buckets[0]
		}
		dims[s.Name] = n
	}
	return dims
}

func equalDims(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// namedStates returns the states config.yaml names (sequence.state), each
// checked: an input and an output of the model, of one dtype and rank,
// with a batch axis the other inputs determine.
func (p *BucketPlan) namedStates(named []modelrepo.StateConfig) ([]statePair, error) {
	var pairs []statePair
	for j, st := range named {
		i, k := p.inputIndex(st.Input), p.outputIndex(st.Output)
		switch {
		case i < 0:
			return nil, fmt.Errorf("[%d]: the model has no input %q (inputs: %s)", j, st.Input, p.inputNames())
		case k < 0:
			return nil, fmt.Errorf("[%d]: the model has no output %q (outputs: %s)", j, st.Output, p.outputNames())
		case p.Inputs[i].DType != p.Outputs[k].DType || len(p.Inputs[i].Dims) != len(p.Outputs[k].Dims):
			return nil, fmt.Errorf("[%d]: input %q is %s but output %q is %s; a state's output must match its input", j, st.Input, &p.Inputs[i], st.Output, &p.Outputs[k])
		}
		axis, err := p.stateBatchAxis(i)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", j, err)
		}
		pairs = append(pairs, statePair{in: i, out: k, batchAxis: axis, initial: st.Initial})
	}
	return pairs, nil
}
