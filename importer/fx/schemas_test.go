package fx

import "testing"

func TestFunctionalTarget(t *testing.T) {
	for in, want := range map[string]string{
		"aten.relu_.default":    "aten.relu.default",
		"aten.add_.Tensor":      "aten.add.Tensor",
		"aten._softmax.default": "aten._softmax.default",
		"aten.__and__.Tensor":   "aten.__and__.Tensor",
		"aten.relu.default":     "aten.relu.default",
	} {
		if got, _ := functionalTarget(in); got != want {
			t.Errorf("functionalTarget(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestParseSymbol(t *testing.T) {
	for in, want := range map[string]string{
		"Symbol('s77', positive=True, integer=True)": "s77",
		"s0":                         "s0",
		"Symbol('u0', integer=True)": "u0",
		"2*s0":                       "",
		"Mul(Integer(2), Symbol('s0', positive=True, integer=True))": "",
	} {
		if got := parseSymbol(in); got != want {
			t.Errorf("parseSymbol(%q) = %q, want %q", in, got, want)
		}
	}
}
