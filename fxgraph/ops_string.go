package fxgraph

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/xserve/xserve/tensor"
)

// String operators. They run on the host only (Op.Host; see SplitHost):
// XLA has no string type. Their names:
//
//	xserve.string_lookup(x, keys): the index of each string of x in the 1-D
//	  keys (its first occurrence), -1 for none; int64, x's shape.
//	xserve.string_take(table, index, default=""): table[index] for each
//	  int index, default where the index is outside the 1-D table.
//	xserve.string_normalize(x, case="NONE"|"LOWER"|"UPPER",
//	  case_sensitive=False, stopwords=[...]): ONNX StringNormalizer: x is
//	  [C] or [1, C]; stopwords removed, then the case changed; a row left
//	  empty holds one empty string.
//	xserve.string_split(x, delimiter="", maxsplit=-1): ONNX StringSplit:
//	  the substrings padded with "" to the longest count (x.shape + [K])
//	  and the counts (int64, x.shape); no delimiter splits at runs of
//	  whitespace.
//	xserve.string_concat(x, y): elementwise concatenation, broadcast.
//	xserve.string_equal(x, y): elementwise equality, broadcast (bool).
//	xserve.regex_full_match(x, pattern): whether the whole string matches
//	  the RE2 pattern (bool).
//	xserve.string_format(x): numbers (and bools) as decimal text.
//	xserve.string_parse(x, dtype): text parsed as numbers of dtype.

// The string operators, run on the host only.
var (
	XserveStringLookup    = &Op{Name: "xserve.string_lookup", Host: true}
	XserveStringTake      = &Op{Name: "xserve.string_take", Host: true}
	XserveStringNormalize = &Op{Name: "xserve.string_normalize", Host: true}
	XserveStringSplit     = &Op{Name: "xserve.string_split", Host: true}
	XserveStringConcat    = &Op{Name: "xserve.string_concat", Host: true}
	XserveStringEqual     = &Op{Name: "xserve.string_equal", Host: true}
	XserveRegexFullMatch  = &Op{Name: "xserve.regex_full_match", Host: true}
	XserveStringFormat    = &Op{Name: "xserve.string_format", Host: true}
	XserveStringParse     = &Op{Name: "xserve.string_parse", Host: true}
)

// stringOps lists them for the op table.
var stringOps = []*Op{XserveStringLookup, XserveStringTake, XserveStringNormalize, XserveStringSplit, XserveStringConcat,
	XserveStringEqual, XserveRegexFullMatch, XserveStringFormat, XserveStringParse}

func registerStrings(r *Registry) {
	r.define(XserveStringLookup, strLookupShape, strLookupEval)
	r.define(XserveStringTake, strTakeShape, strTakeEval)
	r.define(XserveStringNormalize, strNormalizeShape, strNormalizeEval)
	r.define(XserveStringSplit, strSplitShape, strSplitEval)
	r.define(XserveStringConcat, strBinaryShape(tensor.String), strConcatEval)
	r.define(XserveStringEqual, strBinaryShape(tensor.Bool), strEqualEval)
	r.define(XserveRegexFullMatch, strMapShape(tensor.Bool), strRegexEval)
	r.define(XserveStringFormat, strMapShape(tensor.String), strFormatEval)
	r.define(XserveStringParse, strParseShape, strParseEval)
}

func strErr(n *Node, format string, args ...any) error {
	return fmt.Errorf("fxgraph: node %s (%s): %s", n.Name, n.Target, fmt.Sprintf(format, args...))
}

// strInput returns the meta of argument i, checking it is a string tensor.
func strInput(n *Node, i int) (TensorMeta, error) {
	m, err := n.InputMeta(i)
	if err != nil {
		return m, err
	}
	if m.DType != tensor.String {
		return m, strErr(n, "argument %d is %s, want a string tensor", i, m)
	}
	return m, nil
}

// strValue returns the constant value of argument i.
func strValue(n *Node, i int, value func(*Node) *tensor.Tensor) (*tensor.Tensor, error) {
	m, err := n.InputNode(i)
	if err != nil {
		return nil, err
	}
	t := value(m)
	if t == nil {
		return nil, strErr(n, "argument %d (%s) has no value", i, m.Name)
	}
	return t, nil
}

// strMapShape is the shape rule of an op mapping each element of its
// first argument to one element of dtype dt.
func strMapShape(dt tensor.DType) ShapeFunc {
	return func(n *Node) (Meta, error) {
		x, err := n.InputMeta(0)
		if err != nil {
			return Meta{}, err
		}
		if dt == tensor.Bool && x.DType != tensor.String {
			return Meta{}, strErr(n, "x is %s, want a string tensor", x)
		}
		if dt == tensor.String && (x.DType == tensor.String || x.DType == tensor.Invalid || x.DType.IsComplex()) {
			return Meta{}, strErr(n, "x is %s, want a number tensor", x)
		}
		return One(dt, x.Shape.Clone()), nil
	}
}

func strBinaryShape(dt tensor.DType) ShapeFunc {
	return func(n *Node) (Meta, error) {
		x, err := strInput(n, 0)
		if err != nil {
			return Meta{}, err
		}
		y, err := strInput(n, 1)
		if err != nil {
			return Meta{}, err
		}
		s, err := BroadcastShapes(x.Shape, y.Shape)
		if err != nil {
			return Meta{}, strErr(n, "%v", err)
		}
		return One(dt, s), nil
	}
}

func strLookupShape(n *Node) (Meta, error) {
	x, err := strInput(n, 0)
	if err != nil {
		return Meta{}, err
	}
	if k, err := strInput(n, 1); err != nil || k.Rank() != 1 {
		return Meta{}, strErr(n, "keys must be a 1-D string tensor")
	}
	return One(tensor.Int64, x.Shape.Clone()), nil
}

func strLookupEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	keys, err := strValue(n, 1, value)
	if err != nil {
		return nil, err
	}
	index := make(map[string]int64, len(keys.Strings))
	for i := len(keys.Strings) - 1; i >= 0; i-- {
		index[string(keys.Strings[i])] = int64(i)
	}
	out := tensor.New(tensor.Int64, x.Shape...)
	for i, s := range x.Strings {
		k, ok := index[string(s)]
		if !ok {
			k = -1
		}
		out.SetInt64(int64(i), k)
	}
	return []*tensor.Tensor{out}, nil
}

func strTakeShape(n *Node) (Meta, error) {
	t, err := strInput(n, 0)
	if err != nil || t.Rank() != 1 {
		return Meta{}, strErr(n, "table must be a 1-D string tensor")
	}
	idx, err := n.InputMeta(1)
	if err != nil {
		return Meta{}, err
	}
	if !idx.DType.IsInt() {
		return Meta{}, strErr(n, "index is %s, want integers", idx)
	}
	if _, ok := n.ArgOr(2, "default", "").(string); !ok {
		return Meta{}, strErr(n, "default must be a string")
	}
	return One(tensor.String, idx.Shape.Clone()), nil
}

func strTakeEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	table, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	idx, err := strValue(n, 1, value)
	if err != nil {
		return nil, err
	}
	def, _ := n.ArgOr(2, "default", "").(string)
	out := tensor.New(tensor.String, idx.Shape...)
	for i := range idx.NumElements() {
		k := idx.Int64At(i)
		if k >= 0 && k < int64(len(table.Strings)) {
			out.Strings[i] = table.Strings[k]
		} else {
			out.Strings[i] = []byte(def)
		}
	}
	return []*tensor.Tensor{out}, nil
}

func strNormalizeShape(n *Node) (Meta, error) {
	x, err := strInput(n, 0)
	if err != nil {
		return Meta{}, err
	}
	if x.Rank() != 1 && !(x.Rank() == 2 && x.Shape[0] == D(1)) {
		return Meta{}, strErr(n, "x is %s, want [C] or [1, C]", x)
	}
	s := x.Shape.Clone()
	s[len(s)-1] = Unknown
	return One(tensor.String, s), nil
}

// strList reads a kwarg holding a list of strings.
func strList(n *Node, name string) []string {
	var out []string
	switch v := n.Kwargs[name].(type) {
	case []string:
		out = v
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func strNormalizeEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	action, _ := n.ArgOr(1, "case", "NONE").(string)
	sensitive, err := n.BoolArg(2, "case_sensitive", false)
	if err != nil {
		return nil, err
	}
	stop := map[string]bool{}
	for _, w := range strList(n, "stopwords") {
		if !sensitive {
			w = strings.ToLower(w)
		}
		stop[w] = true
	}
	var kept [][]byte
	for _, s := range x.Strings {
		key := string(s)
		if !sensitive {
			key = strings.ToLower(key)
		}
		if stop[key] {
			continue
		}
		switch action {
		case "LOWER":
			s = bytes.ToLower(s)
		case "UPPER":
			s = bytes.ToUpper(s)
		}
		kept = append(kept, s)
	}
	if len(kept) == 0 {
		kept = [][]byte{{}}
	}
	shape := append([]int64(nil), x.Shape...)
	shape[len(shape)-1] = int64(len(kept))
	out := tensor.New(tensor.String, shape...)
	copy(out.Strings, kept)
	return []*tensor.Tensor{out}, nil
}

func strSplitShape(n *Node) (Meta, error) {
	x, err := strInput(n, 0)
	if err != nil {
		return Meta{}, err
	}
	y := append(x.Shape.Clone(), Unknown)
	return Meta{Tuple: true, Vals: []TensorMeta{{DType: tensor.String, Shape: y}, {DType: tensor.Int64, Shape: x.Shape.Clone()}}}, nil
}

// splitString splits s as Python's str.split(sep, maxsplit) does: at runs
// of whitespace (none at the ends) when sep is empty.
func splitString(s, sep string, maxsplit int) []string {
	if sep != "" {
		if maxsplit < 0 {
			return strings.Split(s, sep)
		}
		return strings.SplitN(s, sep, maxsplit+1)
	}
	var out []string
	rest := strings.TrimLeft(s, " \t\n\r\v\f")
	for rest != "" {
		if maxsplit >= 0 && len(out) == maxsplit {
			return append(out, rest)
		}
		end := strings.IndexAny(rest, " \t\n\r\v\f")
		if end < 0 {
			return append(out, rest)
		}
		out = append(out, rest[:end])
		rest = strings.TrimLeft(rest[end:], " \t\n\r\v\f")
	}
	return out
}

func strSplitEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	sep, _ := n.ArgOr(1, "delimiter", "").(string)
	maxsplit, err := n.IntArg(2, "maxsplit", -1)
	if err != nil {
		return nil, err
	}
	parts := make([][]string, len(x.Strings))
	width := 0
	for i, s := range x.Strings {
		parts[i] = splitString(string(s), sep, int(maxsplit))
		width = max(width, len(parts[i]))
	}
	counts := tensor.New(tensor.Int64, x.Shape...)
	out := tensor.New(tensor.String, append(append([]int64(nil), x.Shape...), int64(width))...)
	for i, p := range parts {
		counts.SetInt64(int64(i), int64(len(p)))
		for j := range width {
			out.Strings[i*width+j] = []byte{}
			if j < len(p) {
				out.Strings[i*width+j] = []byte(p[j])
			}
		}
	}
	return []*tensor.Tensor{out, counts}, nil
}

// strBroadcast calls f for each element of the broadcast of x and y.
func strBroadcast(n *Node, value func(*Node) *tensor.Tensor, dt tensor.DType, f func(out *tensor.Tensor, i int64, a, b []byte)) ([]*tensor.Tensor, error) {
	x, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	y, err := strValue(n, 1, value)
	if err != nil {
		return nil, err
	}
	s, err := BroadcastShapes(StaticShape(x.Shape...), StaticShape(y.Shape...))
	if err != nil {
		return nil, strErr(n, "%v", err)
	}
	dims, _ := s.Static()
	out := tensor.New(dt, dims...)
	xs, ys := shStrides(x.Shape), shStrides(y.Shape)
	at := func(idx []int64, shape, st []int64) int64 {
		var p int64
		off := len(idx) - len(shape)
		for i, d := range shape {
			if d != 1 {
				p += idx[i+off] * st[i]
			}
		}
		return p
	}
	shForEach(dims, func(flat int64, idx []int64) {
		f(out, flat, x.Strings[at(idx, x.Shape, xs)], y.Strings[at(idx, y.Shape, ys)])
	})
	return []*tensor.Tensor{out}, nil
}

func strConcatEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	return strBroadcast(n, value, tensor.String, func(out *tensor.Tensor, i int64, a, b []byte) {
		out.Strings[i] = append(append(make([]byte, 0, len(a)+len(b)), a...), b...)
	})
}

func strEqualEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	return strBroadcast(n, value, tensor.Bool, func(out *tensor.Tensor, i int64, a, b []byte) {
		if bytes.Equal(a, b) {
			out.Data[i] = 1
		}
	})
}

func strRegexEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	pattern, _ := n.ArgOr(1, "pattern", "").(string)
	re, err := regexp.Compile(`^(?:` + pattern + `)$`)
	if err != nil {
		return nil, strErr(n, "pattern %q: %v", pattern, err)
	}
	out := tensor.New(tensor.Bool, x.Shape...)
	for i, s := range x.Strings {
		if re.Match(s) {
			out.Data[i] = 1
		}
	}
	return []*tensor.Tensor{out}, nil
}

// FormatNumber is how xserve writes a number as text (Cast to STRING):
// the shortest decimal that reads back as the same value of its dtype,
// "NaN", "INF" and "-INF" as ONNX Runtime writes them.
func FormatNumber(t *tensor.Tensor, i int64) string {
	switch {
	case t.DType == tensor.Bool:
		if t.Data[i] != 0 {
			return "1"
		}
		return "0"
	case t.DType.IsInt():
		if t.DType == tensor.Uint64 {
			return strconv.FormatUint(uint64(t.Int64At(i)), 10)
		}
		return strconv.FormatInt(t.Int64At(i), 10)
	}
	v := t.Float64At(i)
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "INF"
	case math.IsInf(v, -1):
		return "-INF"
	}
	bits := 64
	if t.DType != tensor.Float64 {
		bits = 32
	}
	return strconv.FormatFloat(v, 'g', -1, bits)
}

func strFormatEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	out := tensor.New(tensor.String, x.Shape...)
	for i := range x.NumElements() {
		out.Strings[i] = []byte(FormatNumber(x, i))
	}
	return []*tensor.Tensor{out}, nil
}

func strParseShape(n *Node) (Meta, error) {
	x, err := strInput(n, 0)
	if err != nil {
		return Meta{}, err
	}
	dt, ok := n.ArgOr(1, "dtype", tensor.Invalid).(tensor.DType)
	if !ok || dt == tensor.String || dt == tensor.Invalid || dt.IsComplex() {
		return Meta{}, strErr(n, "dtype %v, want a number dtype", n.ArgOr(1, "dtype", nil))
	}
	return One(dt, x.Shape.Clone()), nil
}

// ParseNumber reads text as a number of dtype dt (Cast from STRING):
// decimal or scientific notation, "NaN", "INF", "-INF" and "inf" in any
// case for floats; integers in decimal.
func ParseNumber(s []byte, dt tensor.DType) (float64, int64, error) {
	str := strings.TrimSpace(string(s))
	if !utf8.ValidString(str) {
		return 0, 0, fmt.Errorf("%q is not UTF-8 text", s)
	}
	if dt.IsInt() || dt == tensor.Bool {
		if v, err := strconv.ParseInt(str, 10, 64); err == nil {
			return float64(v), v, nil
		}
		if v, err := strconv.ParseUint(str, 10, 64); err == nil {
			return float64(v), int64(v), nil
		}
		return 0, 0, fmt.Errorf("%q is not an integer", str)
	}
	switch strings.ToLower(str) {
	case "inf", "+inf", "infinity":
		return math.Inf(1), 0, nil
	case "-inf", "-infinity":
		return math.Inf(-1), 0, nil
	case "nan", "-nan":
		return math.NaN(), 0, nil
	}
	v, err := strconv.ParseFloat(str, 64)
	if err != nil && !strings.Contains(err.Error(), "range") {
		return 0, 0, fmt.Errorf("%q is not a number", str)
	}
	return v, int64(v), nil
}

func strParseEval(n *Node, value func(*Node) *tensor.Tensor) ([]*tensor.Tensor, error) {
	x, err := strValue(n, 0, value)
	if err != nil {
		return nil, err
	}
	dt, _ := n.ArgOr(1, "dtype", tensor.Invalid).(tensor.DType)
	out := tensor.New(dt, x.Shape...)
	for i, s := range x.Strings {
		f, k, err := ParseNumber(s, dt)
		if err != nil {
			return nil, strErr(n, "element %d: %v", i, err)
		}
		if dt.IsInt() {
			out.SetInt64(int64(i), k)
		} else {
			out.SetFloat64(int64(i), f)
		}
	}
	return []*tensor.Tensor{out}, nil
}
