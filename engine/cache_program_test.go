package engine

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/xserve/xserve/fxgraph"
	"github.com/xserve/xserve/lower"
	"github.com/xserve/xserve/tensor"
)

// TestCachedProgramFoldedWeights: a StableHLO cache entry carries the
// value of a weight the model's graph does not hold (one constant folding
// made while lowering) and only that one; decoding takes the model's
// weights from the graph and the folded one from the entry. An entry whose
// folded value has the wrong size is refused, naming the weight.
func TestCachedProgramFoldedWeights(t *testing.T) {
	g := fxgraph.New()
	model := tensor.FromFloat32s([]float32{1, 2, 3, 4}, 2, 2)
	g.Attrs["w"] = model
	folded := tensor.FromFloat32s([]float32{5, 6}, 2)
	prog := &lower.Program{Module: []byte("module {}"), Dims: map[string]int64{"batch": 1}, Params: []lower.Param{
		{Name: "x", Kind: lower.Input, DType: tensor.Float32, Shape: []int64{1, 2}},
		{Name: "w", Kind: lower.Weight, DType: tensor.Float32, Shape: []int64{2, 2}, Value: model},
		{Name: "w_folded", Kind: lower.Weight, DType: tensor.Float32, Shape: []int64{2}, Value: folded},
	}}
	data, err := encodeProgram(prog, g)
	if err != nil {
		t.Fatal(err)
	}
	var c cachedProgram
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	if c.Params[1].Value != nil || c.Params[2].Value == nil {
		t.Fatalf("entry values: model weight %v, folded weight %v; want only the folded one", c.Params[1].Value, c.Params[2].Value)
	}
	got, err := decodeProgram(data, g)
	if err != nil {
		t.Fatal(err)
	}
	if got.Params[1].Value != model {
		t.Errorf("the model's weight is not the graph's tensor")
	}
	if v := got.Params[2].Value; v == nil || v.String() != folded.String() || !bytes.Equal(v.Data, folded.Data) {
		t.Errorf("folded weight decoded as %v, want %v", v, folded)
	}

	c.Params[2].Value.Data = c.Params[2].Value.Data[:4]
	bad, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeProgram(bad, g); err == nil || !strings.Contains(err.Error(), "weight w_folded holds 4 bytes") {
		t.Errorf("truncated folded weight: err = %v", err)
	}
	// Without its value (an entry of an older build) the folded weight is
	// unusable, as before.
	c.Params[2].Value = nil
	old, _ := json.Marshal(c)
	if _, err := decodeProgram(old, g); err == nil || !strings.Contains(err.Error(), "weight w_folded is not in the model") {
		t.Errorf("folded weight without its value: err = %v", err)
	}
}
