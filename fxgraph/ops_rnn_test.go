package fxgraph

import (
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

func TestRNNShape(t *testing.T) {
	f32 := tensor.Float32
	for _, c := range []struct {
		name   string
		w      TensorMeta
		kwargs map[string]any
		want   string // the three outputs, or the error
	}{
		{"lstm bidirectional", nnM(f32, 2, 16, 3), map[string]any{"mode": "lstm", "hidden_size": int64(4), "direction": "bidirectional"},
			"float32[T,2,N,4] float32[2,N,4] float32[2,N,4]"},
		{"gru", nnM(f32, 1, 12, 3), map[string]any{"mode": "gru", "hidden_size": int64(4)}, "float32[T,1,N,4] float32[1,N,4] float32[1,N,4]"},
		{"w for another hidden size", nnM(f32, 1, 12, 3), map[string]any{"mode": "lstm", "hidden_size": int64(4)}, "w is float32[1,12,3], want float32[1,16,3]"},
		{"bad mode", nnM(f32, 1, 4, 3), map[string]any{"mode": "cnn", "hidden_size": int64(4)}, `mode "cnn"`},
		{"no hidden size", nnM(f32, 1, 4, 3), map[string]any{"mode": "rnn"}, "hidden_size 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := New()
			x := g.AddPlaceholder("x", nnM(f32, "T", "N", 3))
			w := g.AddPlaceholder("w", c.w)
			n := g.AddCall(XserveRNN, []any{x, w, nil, nil, nil, nil, nil}, c.kwargs)
			info, _ := NewRegistry().Lookup(XserveRNN.Name)
			m, err := info.Shape(n)
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				var s []string
				for _, v := range m.Vals {
					s = append(s, v.String())
				}
				got = strings.Join(s, " ")
			}
			if !strings.Contains(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}
