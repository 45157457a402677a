package fxgraph

import (
	"fmt"
	"math"
	"strings"

	"github.com/xserve/xserve/tensor"
)

// ewKind says how a pointwise operator derives its result dtype from the
// dtype its operands are promoted to (torch.result_type).
type ewKind int

const (
	// ewSame: the result has the promoted dtype.
	ewSame ewKind = iota
	// ewFloat: integer and bool results become float32 (torch's default
	// dtype), as for exp, sqrt or true division.
	ewFloat
	// ewBool: the result is bool (comparisons, logical ops, isnan).
	ewBool
)

// ewUnaryOp describes a one-input pointwise operator.
type ewUnaryOp struct {
	kind ewKind
	// fi computes the op on an integer or bool value of dtype dt; nil when
	// the op has no integer form (the fold is then declined).
	fi func(dt tensor.DType, v int64) (int64, bool)
	// ff computes the op on a float value.
	ff func(v float64) float64
}

func ewB(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func ewBf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func ewIdentInt(_ tensor.DType, v int64) (int64, bool) { return v, true }

// ewUnaryOps are the unary operators without parameters.
var ewUnaryOps = map[*Op]ewUnaryOp{
	AtenNeg: {ewSame, func(dt tensor.DType, v int64) (int64, bool) {
		if dt == tensor.Bool {
			return 0, false
		}
		return -v, true
	}, func(v float64) float64 { return -v }},
	AtenAbs: {ewSame, func(dt tensor.DType, v int64) (int64, bool) {
		if v < 0 {
			return -v, true
		}
		return v, true
	}, math.Abs},
	AtenSign: {ewSame, func(dt tensor.DType, v int64) (int64, bool) {
		switch {
		case v > 0:
			return 1, true
		case v < 0:
			return -1, true
		}
		return 0, true
	}, func(v float64) float64 {
		switch {
		case v > 0:
			return 1
		case v < 0:
			return -1
		}
		return 0 // zeros, and NaN as torch.sign gives it
	}},
	AtenRelu: {ewSame, func(dt tensor.DType, v int64) (int64, bool) {
		if dt == tensor.Bool {
			return 0, false
		}
		return max(v, 0), true
	}, func(v float64) float64 {
		if v > 0 || math.IsNaN(v) {
			return v
		}
		return 0
	}},
	AtenFloor: {ewSame, ewIdentInt, math.Floor},
	AtenCeil:  {ewSame, ewIdentInt, math.Ceil},
	AtenRound: {ewSame, ewIdentInt, math.RoundToEven},
	AtenTrunc: {ewSame, ewIdentInt, math.Trunc},
	AtenClone: {ewSame, ewIdentInt, func(v float64) float64 { return v }},
	AtenBitwiseNot: {ewSame, func(dt tensor.DType, v int64) (int64, bool) {
		if dt == tensor.Bool {
			return 1 - v, true
		}
		return ^v, true
	}, nil},
	AtenLogicalNot: {ewBool, func(_ tensor.DType, v int64) (int64, bool) { return ewB(v == 0), true },
		func(v float64) float64 { return ewBf(v == 0) }},
	AtenIsnan: {ewBool, func(tensor.DType, int64) (int64, bool) { return 0, true },
		func(v float64) float64 { return ewBf(math.IsNaN(v)) }},
	AtenIsinf: {ewBool, func(tensor.DType, int64) (int64, bool) { return 0, true },
		func(v float64) float64 { return ewBf(math.IsInf(v, 0)) }},
	AtenIsfinite: {ewBool, func(tensor.DType, int64) (int64, bool) { return 1, true },
		func(v float64) float64 { return ewBf(!math.IsInf(v, 0) && !math.IsNaN(v)) }},
	AtenExp:        {ewFloat, nil, math.Exp},
	AtenExp2:       {ewFloat, nil, math.Exp2},
	AtenExpm1:      {ewFloat, nil, math.Expm1},
	AtenLog:        {ewFloat, nil, math.Log},
	AtenLog2:       {ewFloat, nil, math.Log2},
	AtenLog10:      {ewFloat, nil, math.Log10},
	AtenLog1p:      {ewFloat, nil, math.Log1p},
	AtenSqrt:       {ewFloat, nil, math.Sqrt},
	AtenRsqrt:      {ewFloat, nil, func(v float64) float64 { return 1 / math.Sqrt(v) }},
	AtenReciprocal: {ewFloat, nil, func(v float64) float64 { return 1 / v }},
	AtenSin:        {ewFloat, nil, math.Sin},
	AtenCos:        {ewFloat, nil, math.Cos},
	AtenTan:        {ewFloat, nil, math.Tan},
	AtenAsin:       {ewFloat, nil, math.Asin},
	AtenAcos:       {ewFloat, nil, math.Acos},
	AtenAtan:       {ewFloat, nil, math.Atan},
	AtenSinh:       {ewFloat, nil, math.Sinh},
	AtenCosh:       {ewFloat, nil, math.Cosh},
	AtenAsinh:      {ewFloat, nil, math.Asinh},
	AtenAcosh:      {ewFloat, nil, math.Acosh},
	AtenAtanh:      {ewFloat, nil, math.Atanh},
	AtenTanh:       {ewFloat, nil, math.Tanh},
	AtenSigmoid:    {ewFloat, nil, ewSigmoid},
	AtenErf:        {ewFloat, nil, math.Erf},
	AtenHardsigmoid: {ewFloat, nil, func(v float64) float64 {
		return math.Min(math.Max(v+3, 0), 6) / 6
	}},
	AtenHardswish: {ewFloat, nil, func(v float64) float64 {
		return v * math.Min(math.Max(v+3, 0), 6) / 6
	}},
	AtenSilu: {ewFloat, nil, func(v float64) float64 { return v * ewSigmoid(v) }},
	AtenMish: {ewFloat, nil, func(v float64) float64 { return v * math.Tanh(ewSoftplus(v, 1, 20)) }},
	// Not folded: the host's tanh is not ONNX Runtime's.
	XserveORTTanh: {ewFloat, nil, nil},
}

// XserveORTTanh is ONNX's Tanh as ONNX Runtime computes it on CPU (MLAS's
// rational approximation, which reaches ±1.0000002 where tanh stops at 1):
// the dynamic quantization that often follows a Tanh takes its scale from
// the range, so the last bit moves every quantized value. Platforms other
// than CPU may lower it as tanh.
var XserveORTTanh = &Op{Name: "xserve.ort_tanh", Args: []ArgSpec{{"self", 0, ArgTensor, nil, false}}}

func ewSigmoid(v float64) float64 { return 1 / (1 + math.Exp(-v)) }

func ewSoftplus(v, beta, threshold float64) float64 {
	if v*beta > threshold {
		return v
	}
	return math.Log1p(math.Exp(v*beta)) / beta
}

// ewParamOp is a one-input pointwise operator whose float function depends
// on scalar arguments (leaky_relu's slope, elu's alpha, ...).
type ewParamOp struct {
	kind ewKind
	// fn returns the float function for node n.
	fn func(n *Node) (func(float64) float64, error)
	// int tells whether the op keeps integer inputs as integers (hardtanh
	// and leaky_relu do in torch); their integer fold is then declined.
	keepInt bool
}

var ewParamOps = map[*Op]ewParamOp{
	AtenLeakyRelu: {ewFloat, func(n *Node) (func(float64) float64, error) {
		s, err := n.ParamFloat("negative_slope")
		if err != nil {
			return nil, err
		}
		return func(v float64) float64 {
			if v > 0 {
				return v
			}
			return v * s
		}, nil
	}, true},
	AtenElu: {ewFloat, func(n *Node) (func(float64) float64, error) {
		alpha, scale, inScale, err := ewEluArgs(n)
		if err != nil {
			return nil, err
		}
		return func(v float64) float64 {
			if v > 0 {
				return v * scale
			}
			return math.Expm1(v*inScale) * alpha * scale
		}, nil
	}, false},
	AtenGelu: {ewFloat, func(n *Node) (func(float64) float64, error) {
		approx, err := ewGeluApprox(n)
		if err != nil {
			return nil, err
		}
		if approx == "tanh" {
			return func(v float64) float64 {
				return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
			}, nil
		}
		return func(v float64) float64 { return 0.5 * v * (1 + math.Erf(v/math.Sqrt2)) }, nil
	}, false},
	AtenHardtanh: {ewSame, func(n *Node) (func(float64) float64, error) {
		lo, hi, err := ewHardtanhArgs(n)
		if err != nil {
			return nil, err
		}
		return func(v float64) float64 {
			if math.IsNaN(v) {
				return v
			}
			return math.Min(math.Max(v, lo), hi)
		}, nil
	}, true},
	AtenSoftplus: {ewFloat, func(n *Node) (func(float64) float64, error) {
		beta, threshold, err := ewSoftplusArgs(n)
		if err != nil {
			return nil, err
		}
		return func(v float64) float64 { return ewSoftplus(v, beta, threshold) }, nil
	}, false},
	AtenThreshold: {ewSame, func(n *Node) (func(float64) float64, error) {
		th, err := n.ParamFloat("threshold")
		if err != nil {
			return nil, err
		}
		val, err := n.ParamFloat("value")
		if err != nil {
			return nil, err
		}
		return func(v float64) float64 {
			if v > th || math.IsNaN(v) {
				return v
			}
			return val
		}, nil
	}, true},
}

func ewEluArgs(n *Node) (alpha, scale, inScale float64, err error) {
	if alpha, err = n.ParamFloat("alpha"); err != nil {
		return
	}
	if scale, err = n.ParamFloat("scale"); err != nil {
		return
	}
	inScale, err = n.ParamFloat("input_scale")
	return
}

func ewGeluApprox(n *Node) (string, error) {
	a, err := n.Param("approximate")
	if err != nil {
		return "", err
	}
	s, ok := a.(string)
	if !ok || (s != "none" && s != "tanh") {
		return "", fmt.Errorf("gelu: approximate is %s, want \"none\" or \"tanh\"", FormatArg(a))
	}
	return s, nil
}

func ewHardtanhArgs(n *Node) (lo, hi float64, err error) {
	if lo, err = n.ParamFloat("min_val"); err != nil {
		return
	}
	hi, err = n.ParamFloat("max_val")
	return
}

func ewSoftplusArgs(n *Node) (beta, threshold float64, err error) {
	if beta, err = n.ParamFloat("beta"); err != nil {
		return
	}
	threshold, err = n.ParamFloat("threshold")
	return
}

// ewBinaryOp describes a two-operand pointwise operator (either operand may
// be a Python number for the .Scalar overloads).
type ewBinaryOp struct {
	kind ewKind
	// noFloat rejects floating-point operands (bitwise ops and shifts).
	noFloat bool
	// fi computes on integer (or bool) operands of promoted dtype dt.
	fi func(dt tensor.DType, a, b int64) (int64, bool)
	// ff computes on float operands.
	ff func(a, b float64) float64
}

func ewIntDivTrunc(_ tensor.DType, a, b int64) (int64, bool) {
	if b == 0 || (a == math.MinInt64 && b == -1) {
		return 0, false
	}
	return a / b, true
}

func ewIntDivFloor(_ tensor.DType, a, b int64) (int64, bool) {
	if b == 0 || (a == math.MinInt64 && b == -1) {
		return 0, false
	}
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q, true
}

func ewIntFmod(_ tensor.DType, a, b int64) (int64, bool) {
	if b == 0 {
		return 0, false
	}
	if b == -1 {
		return 0, true
	}
	return a % b, true
}

func ewIntRemainder(_ tensor.DType, a, b int64) (int64, bool) {
	if b == 0 {
		return 0, false
	}
	if b == -1 {
		return 0, true
	}
	r := a % b
	if r != 0 && (r < 0) != (b < 0) {
		r += b
	}
	return r, true
}

func ewFloatRemainder(a, b float64) float64 {
	r := math.Mod(a, b)
	if r != 0 && (r < 0) != (b < 0) {
		r += b
	}
	return r
}

func ewIntPow(dt tensor.DType, a, b int64) (int64, bool) {
	if b < 0 || dt == tensor.Bool {
		return 0, false
	}
	r := int64(1)
	for b > 0 {
		if b&1 == 1 {
			r *= a
		}
		a *= a
		b >>= 1
	}
	return r, true
}

func ewBits(dt tensor.DType) int64 { return int64(dt.Size()) * 8 }

var ewBinaryOps = map[*Op]ewBinaryOp{
	AtenMulTensor: {ewSame, false, func(dt tensor.DType, a, b int64) (int64, bool) {
		if dt == tensor.Bool {
			return a & b, true
		}
		return a * b, true
	}, func(a, b float64) float64 { return a * b }},
	AtenDivTensor:       {ewFloat, false, nil, func(a, b float64) float64 { return a / b }},
	AtenPowTensorTensor: {ewSame, false, ewIntPow, math.Pow},
	AtenMaximum: {ewSame, false, func(_ tensor.DType, a, b int64) (int64, bool) { return max(a, b), true },
		func(a, b float64) float64 {
			if math.IsNaN(a) || math.IsNaN(b) {
				return math.NaN()
			}
			return math.Max(a, b)
		}},
	AtenMinimum: {ewSame, false, func(_ tensor.DType, a, b int64) (int64, bool) { return min(a, b), true },
		func(a, b float64) float64 {
			if math.IsNaN(a) || math.IsNaN(b) {
				return math.NaN()
			}
			return math.Min(a, b)
		}},
	AtenFmodTensor:       {ewSame, false, ewIntFmod, math.Mod},
	AtenRemainderTensor:  {ewSame, false, ewIntRemainder, ewFloatRemainder},
	AtenAtan2:            {ewFloat, false, nil, math.Atan2},
	AtenBitwiseAndTensor: {ewSame, true, func(_ tensor.DType, a, b int64) (int64, bool) { return a & b, true }, nil},
	AtenBitwiseOrTensor:  {ewSame, true, func(_ tensor.DType, a, b int64) (int64, bool) { return a | b, true }, nil},
	AtenBitwiseXorTensor: {ewSame, true, func(_ tensor.DType, a, b int64) (int64, bool) { return a ^ b, true }, nil},
	AtenBitwiseLeftShiftTensor: {ewSame, true, func(dt tensor.DType, a, b int64) (int64, bool) {
		if b < 0 || dt == tensor.Bool {
			return 0, false
		}
		if b >= ewBits(dt) {
			return 0, true
		}
		return a << uint(b), true
	}, nil},
	AtenBitwiseRightShiftTensor: {ewSame, true, func(dt tensor.DType, a, b int64) (int64, bool) {
		if b < 0 || dt == tensor.Bool {
			return 0, false
		}
		if b >= ewBits(dt) {
			b = 63
		}
		return a >> uint(b), true
	}, nil},
	AtenEqTensor: {ewBool, false, func(_ tensor.DType, a, b int64) (int64, bool) { return ewB(a == b), true },
		func(a, b float64) float64 { return ewBf(a == b) }},
	AtenNeTensor: {ewBool, false, func(_ tensor.DType, a, b int64) (int64, bool) { return ewB(a != b), true },
		func(a, b float64) float64 { return ewBf(a != b) }},
	AtenLtTensor: {ewBool, false, func(_ tensor.DType, a, b int64) (int64, bool) { return ewB(a < b), true },
		func(a, b float64) float64 { return ewBf(a < b) }},
	AtenLeTensor: {ewBool, false, func(_ tensor.DType, a, b int64) (int64, bool) { return ewB(a <= b), true },
		func(a, b float64) float64 { return ewBf(a <= b) }},
	AtenGtTensor: {ewBool, false, func(_ tensor.DType, a, b int64) (int64, bool) { return ewB(a > b), true },
		func(a, b float64) float64 { return ewBf(a > b) }},
	AtenGeTensor: {ewBool, false, func(_ tensor.DType, a, b int64) (int64, bool) { return ewB(a >= b), true },
		func(a, b float64) float64 { return ewBf(a >= b) }},
	AtenLogicalAnd: {ewBool, false, func(_ tensor.DType, a, b int64) (int64, bool) { return ewB(a != 0 && b != 0), true },
		func(a, b float64) float64 { return ewBf(a != 0 && b != 0) }},
	AtenLogicalOr: {ewBool, false, func(_ tensor.DType, a, b int64) (int64, bool) { return ewB(a != 0 || b != 0), true },
		func(a, b float64) float64 { return ewBf(a != 0 || b != 0) }},
	AtenLogicalXor: {ewBool, false, func(_ tensor.DType, a, b int64) (int64, bool) { return ewB((a != 0) != (b != 0)), true },
		func(a, b float64) float64 { return ewBf((a != 0) != (b != 0)) }},
}

// ewScalarTwins maps .Scalar overloads (other is a Python number) to the
// .Tensor overload that computes the same thing.
var ewScalarTwins = map[*Op]*Op{
	AtenMulScalar:                     AtenMulTensor,
	AtenDivScalar:                     AtenDivTensor,
	AtenPowTensorScalar:               AtenPowTensorTensor,
	AtenPowScalar:                     AtenPowTensorTensor,
	AtenFmodScalar:                    AtenFmodTensor,
	AtenRemainderScalar:               AtenRemainderTensor,
	AtenBitwiseAndScalar:              AtenBitwiseAndTensor,
	AtenBitwiseOrScalar:               AtenBitwiseOrTensor,
	AtenBitwiseXorScalar:              AtenBitwiseXorTensor,
	AtenBitwiseLeftShiftTensorScalar:  AtenBitwiseLeftShiftTensor,
	AtenBitwiseRightShiftTensorScalar: AtenBitwiseRightShiftTensor,
	AtenEqScalar:                      AtenEqTensor,
	AtenNeScalar:                      AtenNeTensor,
	AtenLtScalar:                      AtenLtTensor,
	AtenLeScalar:                      AtenLeTensor,
	AtenGtScalar:                      AtenGtTensor,
	AtenGeScalar:                      AtenGeTensor,
}

// attachScalarTwins sets Op.Twin of each .Scalar overload from
// ewScalarTwins.
func attachScalarTwins() {
	for op, twin := range ewScalarTwins {
		op.Twin = twin
	}
}

// ResultType returns the dtype PyTorch computes a pointwise operation on
// args in (torch.result_type). Each arg is a tensor node, a Python number
// (int64, float64, bool) or nil (an absent optional operand, ignored).
// Within one category (bool < integer < float < complex) tensors with dims
// take precedence over zero-dim tensors, which take precedence over numbers:
// int32 tensor + int64 zero-dim tensor is int32, int32 tensor + 2.5 is
// float32.
func ResultType(args ...any) (tensor.DType, error) {
	var dim, zero, wrapped tensor.DType
	for _, a := range args {
		switch v := a.(type) {
		case nil:
		case *Node:
			if len(v.Meta.Vals) != 1 {
				return tensor.Invalid, fmt.Errorf("operand %s has meta %s, want one tensor", v.Name, v.Meta)
			}
			m := v.Meta.Vals[0]
			if m.DType == tensor.Invalid || m.DType == tensor.String {
				return tensor.Invalid, fmt.Errorf("operand %s has dtype %s", v.Name, m.DType)
			}
			if m.Rank() > 0 {
				dim = ewPromote(dim, m.DType)
			} else {
				zero = ewPromote(zero, m.DType)
			}
		case bool:
			wrapped = ewPromote(wrapped, tensor.Bool)
		case int64, int:
			wrapped = ewPromote(wrapped, tensor.Int64)
		case float64:
			wrapped = ewPromote(wrapped, tensor.Float32)
		default:
			return tensor.Invalid, fmt.Errorf("operand %s is not a tensor or a number", FormatArg(a))
		}
	}
	r := ewCombine(dim, ewCombine(zero, wrapped))
	if r == tensor.Invalid {
		return r, fmt.Errorf("no tensor or number operands")
	}
	return r, nil
}

func ewPromote(a, b tensor.DType) tensor.DType {
	if a == tensor.Invalid {
		return b
	}
	if b == tensor.Invalid {
		return a
	}
	return PromoteTypes(a, b)
}

// ewCombine is c10's combine_categories.
func ewCombine(higher, lower tensor.DType) tensor.DType {
	switch {
	case higher.IsComplex():
		return higher
	case lower.IsComplex():
		if higher == tensor.Float64 {
			return tensor.Complex128
		}
		if higher.IsFloat() {
			return tensor.Complex64
		}
		return lower
	case higher.IsFloat():
		return higher
	}
	if higher == tensor.Bool || lower.IsFloat() {
		return ewPromote(higher, lower)
	}
	if higher != tensor.Invalid {
		return higher
	}
	return lower
}

func ewApplyKind(k ewKind, dt tensor.DType) tensor.DType {
	switch k {
	case ewFloat:
		if !dt.IsFloat() && !dt.IsComplex() {
			return tensor.Float32
		}
	case ewBool:
		return tensor.Bool
	}
	return dt
}

// ewShape computes the Meta of a pointwise node over the operands at
// positions idx (nodes or numbers), with the given kind.
func ewShape(n *Node, k ewKind, operands ...any) (Meta, error) {
	dt, err := ResultType(operands...)
	if err != nil {
		return Meta{}, err
	}
	shape, err := ewBroadcast(operands...)
	if err != nil {
		return Meta{}, err
	}
	return One(ewApplyKind(k, dt), shape), nil
}

func ewBroadcast(operands ...any) (Shape, error) {
	var shapes []Shape
	for _, a := range operands {
		if m, ok := a.(*Node); ok {
			shapes = append(shapes, m.Val().Shape)
		}
	}
	return BroadcastShapes(shapes...)
}

// ewNodeArg returns argument i, which must be a tensor node.
func ewNodeArg(n *Node, i int) (*Node, error) {
	m, err := n.InputNode(i)
	if err != nil {
		return nil, err
	}
	if _, err := n.InputMeta(i); err != nil {
		return nil, err
	}
	return m, nil
}

// ewNumberArg returns argument i (or kwarg name), which must be a tensor node
// or a Python number.
func ewNumberArg(n *Node, i int, name string) (any, error) {
	a := n.ArgOr(i, name, nil)
	switch a.(type) {
	case *Node, int64, int, float64, bool:
		return a, nil
	}
	return nil, fmt.Errorf("fxgraph: node %s (%s): argument %s is %s, want a tensor or a number", n.Name, n.Target, name, FormatArg(a))
}

// ewOptNumberArg is ewNumberArg for optional arguments (nil allowed).
func ewOptNumberArg(n *Node, i int, name string) (any, error) {
	a := n.ArgOr(i, name, nil)
	if a == nil {
		return nil, nil
	}
	return ewNumberArg(n, i, name)
}

// ewAlpha returns the alpha kwarg of add/sub (its schema default when
// absent).
func ewAlpha(n *Node) (any, error) {
	a, err := n.Param("alpha")
	if err != nil {
		return nil, err
	}
	switch a.(type) {
	case int64, int, float64, bool:
		return a, nil
	}
	return nil, fmt.Errorf("fxgraph: node %s (%s): alpha is %s, want a number", n.Name, n.Target, FormatArg(a))
}

// ewOperands returns the operands of a binary, where or clamp node in the
// order they are combined (tensor nodes or Python numbers; nil for absent
// optional ones).
func ewOperands(n *Node) ([]any, error) {
	switch n.Op {
	case AtenWhereSelf, AtenWhereScalarSelf, AtenWhereScalarOther, AtenWhereScalar:
		c, err := ewNodeArg(n, 0)
		if err != nil {
			return nil, err
		}
		a, err := ewNumberArg(n, 1, "self")
		if err != nil {
			return nil, err
		}
		b, err := ewNumberArg(n, 2, "other")
		if err != nil {
			return nil, err
		}
		return []any{c, a, b}, nil
	case AtenClamp, AtenClampTensor:
		x, err := ewNodeArg(n, 0)
		if err != nil {
			return nil, err
		}
		lo, err := ewOptNumberArg(n, 1, "min")
		if err != nil {
			return nil, err
		}
		hi, err := ewOptNumberArg(n, 2, "max")
		if err != nil {
			return nil, err
		}
		return []any{x, lo, hi}, nil
	}
	first := 0
	if n.Op == AtenPowScalar {
		first = 1 // pow.Scalar(self: Scalar, exponent: Tensor)
	}
	var out []any
	for i := 0; i < 2; i++ {
		name := []string{"self", "other"}[i]
		if strings.HasPrefix(n.Target, "aten.pow.") && i == 1 {
			name = "exponent"
		}
		var a any
		var err error
		if i == first {
			a, err = ewNodeArg(n, i)
		} else {
			a, err = ewNumberArg(n, i, name)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func ewTypeCheck(n *Node, noFloat bool, dt tensor.DType) error {
	if noFloat && !(dt.IsInt() || dt == tensor.Bool) {
		return fmt.Errorf("%s needs integer or bool operands, got %s", n.Target, dt)
	}
	return nil
}

// registerElementwise registers pointwise arithmetic, comparison, logic,
// activation and cast operators.
func registerElementwise(r *Registry) {
	for target, op := range ewUnaryOps {
		op := op
		r.define(target,
			func(n *Node) (Meta, error) {
				x, err := ewNodeArg(n, 0)
				if err != nil {
					return Meta{}, err
				}
				return ewShape(n, op.kind, x)
			},
			func(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
				return ewEvalUnary(n, value, op.fi, op.ff)
			},
		)
	}
	for target, op := range ewParamOps {
		op := op
		r.define(target,
			func(n *Node) (Meta, error) {
				x, err := ewNodeArg(n, 0)
				if err != nil {
					return Meta{}, err
				}
				if _, err := op.fn(n); err != nil {
					return Meta{}, err
				}
				k := op.kind
				if op.keepInt {
					k = ewSame
				}
				return ewShape(n, k, x)
			},
			func(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
				f, err := op.fn(n)
				if err != nil {
					return nil, err
				}
				return ewEvalUnary(n, value, nil, f)
			},
		)
	}
	for target, op := range ewBinaryOps {
		defineBinary(r, target, op)
	}
	for target, twin := range ewScalarTwins {
		defineBinary(r, target, ewBinaryOps[twin])
	}
	for _, target := range []*Op{AtenAddTensor, AtenAddScalar, AtenSubTensor, AtenSubScalar, AtenRsubTensor, AtenRsubScalar} {
		r.define(target, ewAddShape, ewAddEval)
	}
	for _, target := range []*Op{AtenDivTensorMode, AtenDivScalarMode} {
		r.define(target, ewDivModeShape, ewDivModeEval)
	}
	for _, target := range []*Op{AtenWhereSelf, AtenWhereScalarSelf, AtenWhereScalarOther, AtenWhereScalar} {
		r.define(target, ewWhereShape, ewWhereEval)
	}
	r.define(AtenClamp, ewClampShape, ewClampEval)
	r.define(AtenClampTensor, ewClampShape, ewClampEval)
	r.define(Aten_ToCopy, ewToCopyShape, ewToCopyEval)
	r.define(AtenViewDtype, ewViewDTypeShape, ewViewDTypeEval)
}

// defineBinary defines a binary pointwise operator: its shape rule (the
// operands' result type, checked, broadcast) and its fold.
func defineBinary(r *Registry, target *Op, op ewBinaryOp) {
	r.define(target,
		func(n *Node) (Meta, error) {
			ops, err := ewOperands(n)
			if err != nil {
				return Meta{}, err
			}
			dt, err := ResultType(ops...)
			if err != nil {
				return Meta{}, err
			}
			if err := ewTypeCheck(n, op.noFloat, dt); err != nil {
				return Meta{}, err
			}
			return ewShape(n, op.kind, ops...)
		},
		func(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
			ops, err := ewOperands(n)
			if err != nil {
				return nil, err
			}
			ct, err := ResultType(ops...)
			if err != nil {
				return nil, err
			}
			if op.kind == ewFloat {
				ct = ewApplyKind(ewFloat, ct)
			}
			var fi func([]int64) (int64, bool)
			if op.fi != nil {
				fi = func(v []int64) (int64, bool) { return op.fi(ct, v[0], v[1]) }
			}
			var ff func([]float64) float64
			if op.ff != nil {
				ff = func(v []float64) float64 { return op.ff(v[0], v[1]) }
			}
			return ewEval(n, value, ops, ct, fi, ff)
		},
	)
}

// ewAddOperands returns (self, other, alpha) of add/sub/rsub.
func ewAddOperands(n *Node) (self, other, alpha any, err error) {
	if self, err = ewNumberArg(n, 0, "self"); err != nil {
		return
	}
	if other, err = ewNumberArg(n, 1, "other"); err != nil {
		return
	}
	// torch.export serializes `1.0 - t` as sub.Tensor(1.0, t): a number self
	// is fine as long as one operand is a tensor.
	_, selfT := self.(*Node)
	_, otherT := other.(*Node)
	if !selfT && !otherT {
		err = fmt.Errorf("fxgraph: node %s (%s): self or other must be a tensor", n.Name, n.Target)
		return
	}
	alpha, err = ewAlpha(n)
	return
}

func ewAddShape(n *Node) (Meta, error) {
	self, other, alpha, err := ewAddOperands(n)
	if err != nil {
		return Meta{}, err
	}
	dt, err := ResultType(self, other)
	if err != nil {
		return Meta{}, err
	}
	if _, isFloat := alpha.(float64); isFloat && !dt.IsFloat() && !dt.IsComplex() {
		if a, _ := AsFloat(alpha); a != math.Trunc(a) {
			return Meta{}, fmt.Errorf("%s: alpha %v must be an integer for %s operands", n.Target, a, dt)
		}
	}
	if dt == tensor.Bool && n.Op != AtenAddTensor && n.Op != AtenAddScalar {
		return Meta{}, fmt.Errorf("%s: subtraction of bool tensors is not supported", n.Target)
	}
	return ewShape(n, ewSame, self, other)
}

func ewAddEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	self, other, alpha, err := ewAddOperands(n)
	if err != nil {
		return nil, err
	}
	ct, err := ResultType(self, other)
	if err != nil {
		return nil, err
	}
	sign := int64(1)
	rev := false
	switch n.Op {
	case AtenSubTensor, AtenSubScalar:
		sign = -1
	case AtenRsubTensor, AtenRsubScalar:
		sign, rev = -1, true
	}
	ai, aiOK := AsInt(alpha)
	af, _ := AsFloat(alpha)
	fi := func(v []int64) (int64, bool) {
		if !aiOK {
			return 0, false
		}
		a, b := v[0], v[1]
		if rev {
			a, b = b, a
		}
		if ct == tensor.Bool {
			return ewB(a != 0 || (ai != 0 && b != 0)), true
		}
		return a + sign*ai*b, true
	}
	ff := func(v []float64) float64 {
		a, b := v[0], v[1]
		if rev {
			a, b = b, a
		}
		if af == 1 {
			return a + float64(sign)*b
		}
		return a + float64(sign)*af*b
	}
	return ewEval(n, value, []any{self, other}, ct, fi, ff)
}

// ewRoundingMode returns div's rounding_mode: "", "trunc" or "floor".
func ewRoundingMode(n *Node) (string, error) {
	a := n.ArgOr(2, "rounding_mode", nil)
	if a == nil {
		return "", nil
	}
	s, ok := a.(string)
	if !ok || (s != "trunc" && s != "floor") {
		return "", fmt.Errorf("%s: rounding_mode is %s, want None, \"trunc\" or \"floor\"", n.Target, FormatArg(a))
	}
	return s, nil
}

func ewDivModeOperands(n *Node) (self, other any, mode string, err error) {
	if self, err = ewNodeArg(n, 0); err != nil {
		return
	}
	if other, err = ewNumberArg(n, 1, "other"); err != nil {
		return
	}
	mode, err = ewRoundingMode(n)
	return
}

func ewDivModeShape(n *Node) (Meta, error) {
	self, other, mode, err := ewDivModeOperands(n)
	if err != nil {
		return Meta{}, err
	}
	k := ewSame
	if mode == "" {
		k = ewFloat
	}
	return ewShape(n, k, self, other)
}

func ewDivModeEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	self, other, mode, err := ewDivModeOperands(n)
	if err != nil {
		return nil, err
	}
	ct, err := ResultType(self, other)
	if err != nil {
		return nil, err
	}
	if mode == "" {
		ct = ewApplyKind(ewFloat, ct)
	}
	var fi func([]int64) (int64, bool)
	switch mode {
	case "trunc":
		fi = func(v []int64) (int64, bool) { return ewIntDivTrunc(ct, v[0], v[1]) }
	case "floor":
		fi = func(v []int64) (int64, bool) { return ewIntDivFloor(ct, v[0], v[1]) }
	}
	ff := func(v []float64) float64 {
		q := v[0] / v[1]
		switch mode {
		case "trunc":
			return math.Trunc(q)
		case "floor":
			return math.Floor(q)
		}
		return q
	}
	return ewEval(n, value, []any{self, other}, ct, fi, ff)
}

func ewWhereShape(n *Node) (Meta, error) {
	ops, err := ewOperands(n)
	if err != nil {
		return Meta{}, err
	}
	if c := ops[0].(*Node).Val().DType; c != tensor.Bool && c != tensor.Uint8 {
		return Meta{}, fmt.Errorf("where: condition is %s, want bool", c)
	}
	dt, err := ResultType(ops[1], ops[2])
	if err != nil {
		return Meta{}, err
	}
	shape, err := ewBroadcast(ops...)
	if err != nil {
		return Meta{}, err
	}
	return One(dt, shape), nil
}

func ewWhereEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	ops, err := ewOperands(n)
	if err != nil {
		return nil, err
	}
	ct, err := ResultType(ops[1], ops[2])
	if err != nil {
		return nil, err
	}
	// The condition is read as a number of the computation dtype: a bool
	// (0 or 1) converts exactly to any dtype.
	fi := func(v []int64) (int64, bool) {
		if v[0] != 0 {
			return v[1], true
		}
		return v[2], true
	}
	ff := func(v []float64) float64 {
		if v[0] != 0 {
			return v[1]
		}
		return v[2]
	}
	return ewEval(n, value, ops, ct, fi, ff)
}

func ewClampShape(n *Node) (Meta, error) {
	ops, err := ewOperands(n)
	if err != nil {
		return Meta{}, err
	}
	if n.Op == AtenClampTensor {
		for _, o := range ops[1:] {
			if _, ok := o.(*Node); !ok && o != nil {
				return Meta{}, fmt.Errorf("clamp.Tensor: min/max must be tensors or None, got %s", FormatArg(o))
			}
		}
	}
	if ops[1] == nil && ops[2] == nil {
		return Meta{}, fmt.Errorf("%s: at least one of min and max must be given", n.Target)
	}
	return ewShape(n, ewSame, ops...)
}

func ewClampEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	ops, err := ewOperands(n)
	if err != nil {
		return nil, err
	}
	ct, err := ResultType(ops...)
	if err != nil {
		return nil, err
	}
	hasLo, hasHi := ops[1] != nil, ops[2] != nil
	// Absent bounds are passed as 0 and ignored.
	args := []any{ops[0], ops[1], ops[2]}
	for i := 1; i <= 2; i++ {
		if args[i] == nil {
			args[i] = int64(0)
		}
	}
	fi := func(v []int64) (int64, bool) {
		x := v[0]
		if hasLo {
			x = max(x, v[1])
		}
		if hasHi {
			x = min(x, v[2])
		}
		return x, true
	}
	ff := func(v []float64) float64 {
		x := v[0]
		if math.IsNaN(x) {
			return x
		}
		if hasLo {
			if math.IsNaN(v[1]) {
				return v[1]
			}
			x = math.Max(x, v[1])
		}
		if hasHi {
			if math.IsNaN(v[2]) {
				return v[2]
			}
			x = math.Min(x, v[2])
		}
		return x
	}
	return ewEval(n, value, args, ct, fi, ff)
}

// ewToCopyDType returns _to_copy's target dtype (the input's when the dtype
// kwarg is absent).
func ewToCopyDType(n *Node) (tensor.DType, error) {
	m, err := n.InputMeta(0)
	if err != nil {
		return tensor.Invalid, err
	}
	a, ok := n.Kwargs["dtype"]
	if !ok || a == nil {
		return m.DType, nil
	}
	dt, ok := a.(tensor.DType)
	if !ok || dt == tensor.Invalid || dt == tensor.String {
		return tensor.Invalid, fmt.Errorf("_to_copy: dtype is %s, want a tensor dtype", FormatArg(a))
	}
	return dt, nil
}

func ewToCopyShape(n *Node) (Meta, error) {
	m, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	dt, err := ewToCopyDType(n)
	if err != nil {
		return Meta{}, err
	}
	return One(dt, m.Shape.Clone()), nil
}

// ewViewDTypeShape is aten.view.dtype(self, dtype): the same bits read as
// another dtype of the same element size (a bitcast).
func ewViewDTypeShape(n *Node) (Meta, error) {
	m, err := n.InputMeta(0)
	if err != nil {
		return Meta{}, err
	}
	a := n.ArgOr(1, "dtype", nil)
	dt, ok := a.(tensor.DType)
	if !ok || dt == tensor.Invalid || dt == tensor.String {
		return Meta{}, fmt.Errorf("view.dtype: dtype is %s, want a tensor dtype", FormatArg(a))
	}
	if dt.Size() != m.DType.Size() || m.DType == tensor.String {
		return Meta{}, fmt.Errorf("view.dtype: %s to %s changes the element size (only same-size views are supported)", m.DType, dt)
	}
	return One(dt, m.Shape.Clone()), nil
}

func ewViewDTypeEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := n.InputNode(0)
	if err != nil {
		return nil, err
	}
	t := value(x)
	if t == nil {
		return nil, nil
	}
	out := t.Clone()
	out.DType = n.Val().DType
	return []*tensor.Tensor{out}, nil
}
