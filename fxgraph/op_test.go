package fxgraph

import (
	"strings"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// TestOpTable checks the op table's invariants: every op is found under its
// own name, has a shape rule, and its schema defaults have the declared kind.
func TestOpTable(t *testing.T) {
	ops := Ops()
	if len(ops) < 200 {
		t.Fatalf("Ops() returned %d ops, want the whole IR (> 200)", len(ops))
	}
	for _, op := range ops {
		if got, ok := OpByName(op.Name); !ok || got != op {
			t.Errorf("OpByName(%q) = %v, %v; want the op itself", op.Name, got, ok)
		}
		if op.Shape == nil {
			t.Errorf("op %s has no shape rule", op.Name)
		}
		for _, a := range op.Args {
			ok := !a.HasDefault || a.Default == nil // required, or None
			switch a.Kind {
			case ArgFloat:
				_, isKind := a.Default.(float64)
				ok = ok || isKind
			case ArgInt:
				_, isKind := a.Default.(int64)
				ok = ok || isKind
			case ArgBool:
				_, isKind := a.Default.(bool)
				ok = ok || isKind
			default:
				ok = true
			}
			if !ok {
				t.Errorf("op %s argument %s: default %v (%T) is not of its kind %d", op.Name, a.Name, a.Default, a.Default, a.Kind)
			}
		}
	}
	if _, ok := OpByName("aten.no_such_op.default"); ok {
		t.Error("OpByName found an op that does not exist")
	}
}

// TestParamDefaults checks that rules reading a parameter get the node's
// value when given (positionally or by keyword) and the schema default
// otherwise.
func TestParamDefaults(t *testing.T) {
	cases := []struct {
		name   string
		target *Op
		args   []any // after the input x
		kwargs map[string]any
		param  string
		want   float64
		err    string
	}{
		{"leaky_relu default slope", AtenLeakyRelu, nil, nil, "negative_slope", 0.01, ""},
		{"leaky_relu positional", AtenLeakyRelu, []any{0.2}, nil, "negative_slope", 0.2, ""},
		{"leaky_relu keyword", AtenLeakyRelu, nil, map[string]any{"negative_slope": 0.3}, "negative_slope", 0.3, ""},
		{"elu default alpha", AtenElu, nil, nil, "alpha", 1, ""},
		{"softplus default threshold", AtenSoftplus, nil, nil, "threshold", 20, ""},
		{"hardtanh default min", AtenHardtanh, nil, nil, "min_val", -1, ""},
		{"param not in schema", AtenLeakyRelu, nil, nil, "alpha", 0, "no argument \"alpha\""},
		{"op without schema", AtenRelu, nil, nil, "alpha", 0, "no argument \"alpha\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := New()
			x := g.AddPlaceholder("x", TensorMeta{DType: tensor.Float32, Shape: StaticShape(2)})
			n := g.AddCall(c.target, append([]any{x}, c.args...), c.kwargs)
			got, err := n.ParamFloat(c.param)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ParamFloat(%q) error %v, want one containing %q", c.param, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ParamFloat(%q) = %v, %v; want %v", c.param, got, err, c.want)
			}
		})
	}
	g := New()
	x := g.AddPlaceholder("x", TensorMeta{DType: tensor.Float32, Shape: StaticShape(2, 3)})
	norm := g.AddCall(AtenNativeLayerNorm, []any{x, []any{int64(3)}, nil, nil, 1e-6}, nil)
	if eps, err := norm.ParamFloat("eps"); err != nil || eps != 1e-6 {
		t.Errorf("layer_norm eps = %v, %v; want the given 1e-6", eps, err)
	}
	v := g.AddCall(AtenVarCorrection, []any{x}, nil)
	if c, err := v.ParamFloat("correction"); err != nil || c != 1 {
		t.Errorf("var correction = %v, %v; want the IR default 1 (torch's None)", c, err)
	}
	if g2, err := norm.ParamInt("group"); err == nil {
		t.Errorf("layer_norm group = %v, want an error (not in its schema)", g2)
	}
	// upscale_factor has no default: absent, it is an error naming it;
	// given, its value.
	ps := g.AddCall(AtenPixelShuffle, []any{x}, nil)
	if f, err := PixelFactor(ps); err == nil || !strings.Contains(err.Error(), "upscale_factor, which is required") {
		t.Errorf("pixel_shuffle without factor = %v, %v; want a required-argument error", f, err)
	}
	ps2 := g.AddCall(AtenPixelShuffle, []any{x, int64(2)}, nil)
	if f, err := PixelFactor(ps2); err != nil || f != 2 {
		t.Errorf("pixel_shuffle factor = %v, %v; want 2", f, err)
	}
}
