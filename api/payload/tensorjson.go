package payload

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/xserve/xserve/tensor"
)

// MaxRank is the most dimensions a request tensor may have (NumPy's
// NPY_MAXDIMS): a shape is checked, and nested data walked, one level per
// dimension.
const MaxRank = 64

// checkShape validates a declared shape: at most MaxRank dims, non-negative
// dims, an element count that fits int64 and the limit maxElems. It
// returns the count.
func checkShape(name string, shape []int64, maxElems int64) (int64, error) {
	if shape == nil {
		return 0, badRequest("input %q: no shape (give \"shape\": [...], [] for a scalar)", name)
	}
	if len(shape) > MaxRank {
		return 0, badRequest("input %q: the shape has %d dims, more than the limit of %d (MaxRank)", name, len(shape), MaxRank)
	}
	for i, d := range shape {
		if d < 0 {
			return 0, badRequest("input %q: shape %v: dim %d is %d, want a size >= 0", name, shape, i, d)
		}
	}
	n := tensor.NumElements(shape)
	if n < 0 || n > maxElems {
		return 0, tooLarge("input %q: shape %v has more elements than the limit of %d per tensor", name, shape, maxElems)
	}
	return n, nil
}

// decodeJSONData parses a tensor's "data" (a JSON scalar for rank 0, a flat
// array of NumElements(shape) values, or arrays nested exactly as shape) into
// a new tensor of dtype dt. shape must have passed checkShape. Numbers are
// checked against the range of integer dtypes; bool takes true/false; float
// dtypes also take the strings "NaN", "Infinity" and "-Infinity"; string
// (BYTES) tensors take JSON strings.
func decodeJSONData(name string, dt tensor.DType, shape []int64, raw []byte) (*tensor.Tensor, error) {
	if dt.IsComplex() {
		return nil, badRequest("input %q: %s data cannot be given in JSON; send it with the binary tensor extension", name, dt)
	}
	n := tensor.NumElements(shape)
	// Each element takes at least one byte of JSON: refuse to allocate for a
	// shape the data cannot possibly fill.
	if n > int64(len(raw)) {
		return nil, badRequest("input %q: shape %v needs %s, the data is only %d bytes of JSON", name, shape, plural(n, "element"), len(raw))
	}
	t := tensor.New(dt, shape...)
	d := &dataDecoder{name: name, t: t, shape: shape, buf: raw}
	if err := d.decode(); err != nil {
		return nil, err
	}
	return t, nil
}

// dataDecoder scans the JSON text of a tensor's data and stores each element
// into t as it goes.
type dataDecoder struct {
	name  string
	t     *tensor.Tensor
	shape []int64
	buf   []byte
	pos   int
	next  int64 // index of the next element to store
}

func (d *dataDecoder) errf(format string, args ...any) error {
	return badRequest("input %q: data: %s", d.name, fmt.Sprintf(format, args...))
}

func (d *dataDecoder) skipSpace() {
	for d.pos < len(d.buf) {
		switch d.buf[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *dataDecoder) peek() byte {
	d.skipSpace()
	if d.pos >= len(d.buf) {
		return 0
	}
	return d.buf[d.pos]
}

func (d *dataDecoder) decode() error {
	n := d.t.NumElements()
	switch c := d.peek(); {
	case c == 0:
		return d.errf("no data (give \"data\": [...])")
	case c != '[':
		if len(d.shape) != 0 {
			return d.errf("want an array for shape %v, got %s", d.shape, d.snippet())
		}
		if err := d.element(); err != nil {
			return err
		}
	default:
		// Nested when the first element is itself an array.
		save := d.pos
		d.pos++
		nested := d.peek() == '['
		d.pos = save
		if nested && len(d.shape) >= 1 {
			if err := d.nested(0, ""); err != nil {
				return err
			}
		} else if err := d.flat(n); err != nil {
			return err
		}
	}
	if d.peek() != 0 {
		return d.errf("unexpected %s after the data", d.snippet())
	}
	return nil
}

// flat reads "[v, v, ...]" holding exactly n elements.
func (d *dataDecoder) flat(n int64) error {
	d.pos++ // '['
	count := int64(0)
	if d.peek() == ']' {
		d.pos++
	} else {
		for {
			if count == n {
				return d.errf("has more than %d elements; shape %v wants %d (flat, or nested as the shape)", n, d.shape, n)
			}
			if err := d.element(); err != nil {
				return err
			}
			count++
			c := d.peek()
			d.pos++
			if c == ']' {
				break
			}
			if c != ',' {
				d.pos--
				return d.errf("want ',' or ']' after element %d, got %s", count-1, d.snippet())
			}
		}
	}
	if count != n {
		return d.errf("has %s; shape %v wants %d (flat, or nested as the shape)", plural(count, "element"), d.shape, n)
	}
	return nil
}

// nested reads the array for dims dim.. of the shape; path names it ("[1][0]").
func (d *dataDecoder) nested(dim int, path string) error {
	if d.peek() != '[' {
		return d.errf("at %s: want an array of %d (dim %d of shape %v), got %s", pathOr(path), d.shape[dim], dim, d.shape, d.snippet())
	}
	d.pos++
	want := d.shape[dim]
	count := int64(0)
	if d.peek() == ']' {
		d.pos++
	} else {
		for {
			if count == want {
				return d.errf("at %s: more than %d elements; dim %d of shape %v is %d", pathOr(path), want, dim, d.shape, want)
			}
			if dim+1 < len(d.shape) {
				if err := d.nested(dim+1, path+"["+strconv.FormatInt(count, 10)+"]"); err != nil {
					return err
				}
			} else {
				if d.peek() == '[' {
					return d.errf("at %s[%d]: want a value, got an array: the data is nested deeper than shape %v", pathOr(path), count, d.shape)
				}
				if err := d.element(); err != nil {
					return err
				}
			}
			count++
			c := d.peek()
			d.pos++
			if c == ']' {
				break
			}
			if c != ',' {
				d.pos--
				return d.errf("at %s: want ',' or ']', got %s", pathOr(path), d.snippet())
			}
		}
	}
	if count != want {
		return d.errf("at %s: %s; dim %d of shape %v is %d", pathOr(path), plural(count, "element"), dim, d.shape, want)
	}
	return nil
}

// plural reads "1 element", "2 elements".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}

func pathOr(p string) string {
	if p == "" {
		return "the top level"
	}
	return p
}

// snippet quotes the text at the current position, for messages.
func (d *dataDecoder) snippet() string {
	if d.pos >= len(d.buf) {
		return "the end of the data"
	}
	s := d.buf[d.pos:]
	if len(s) > 20 {
		return strconv.Quote(string(s[:20])) + "..."
	}
	return strconv.Quote(string(s))
}

// token returns the next scalar token (a number, true, false, null), or a
// whole JSON string including its quotes.
func (d *dataDecoder) token() []byte {
	d.skipSpace()
	start := d.pos
	if d.pos < len(d.buf) && d.buf[d.pos] == '"' {
		d.pos++
		for d.pos < len(d.buf) {
			switch d.buf[d.pos] {
			case '\\':
				d.pos += 2
				continue
			case '"':
				d.pos++
				return d.buf[start:d.pos]
			}
			d.pos++
		}
		d.pos = len(d.buf)
		return d.buf[start:d.pos]
	}
	for d.pos < len(d.buf) {
		switch d.buf[d.pos] {
		case ',', ']', '[', ' ', '\t', '\n', '\r', '{', '}', ':':
			return d.buf[start:d.pos]
		}
		d.pos++
	}
	return d.buf[start:d.pos]
}

// bstr views b as a string without copying; the result must not outlive b
// and is never kept.
func bstr(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// quoteTok quotes a token for a message, copying it.
func quoteTok(tok []byte) string {
	if len(tok) == 0 {
		return "nothing"
	}
	if len(tok) > 24 {
		return strconv.Quote(string(tok[:24])) + "..."
	}
	return strconv.Quote(string(tok))
}

// element parses one value and stores it at d.next.
func (d *dataDecoder) element() error {
	if d.fastFloat() {
		return nil
	}
	tok := d.token()
	var want string // what the element should have been; "" when it was
	switch dt := d.t.DType; {
	case dt == tensor.Bool:
		want = d.boolElem(tok)
	case dt == tensor.String:
		want = d.stringElem(tok)
	case dt.IsFloat():
		want = d.floatElem(tok)
	case dt.IsInt():
		want = d.intElem(tok)
	default:
		return d.errf("dtype %s cannot be given in JSON", dt)
	}
	if want != "" {
		return d.errf("element %d is %s, want %s", d.next, quoteTok(tok), want)
	}
	d.next++
	return nil
}

// fastFloat stores a float32 or float64 element that scanFloat reads
// exactly; false leaves the element to the general path.
func (d *dataDecoder) fastFloat() bool {
	dt := d.t.DType
	if dt != tensor.Float32 && dt != tensor.Float64 {
		return false
	}
	d.skipSpace()
	v, end, ok := scanFloat(d.buf, d.pos, dt == tensor.Float32)
	if !ok {
		return false
	}
	if dt == tensor.Float32 {
		binary.LittleEndian.PutUint32(d.t.Data[d.next*4:], math.Float32bits(float32(v)))
	} else {
		binary.LittleEndian.PutUint64(d.t.Data[d.next*8:], math.Float64bits(v))
	}
	d.pos = end
	d.next++
	return true
}

// boolElem stores a bool element; the result is what tok should have been,
// "" when it was valid (so for the other *Elem methods).
func (d *dataDecoder) boolElem(tok []byte) string {
	switch bstr(tok) {
	case "true":
		d.t.Data[d.next] = 1
	case "false":
		d.t.Data[d.next] = 0
	default:
		return "true or false"
	}
	return ""
}

func (d *dataDecoder) stringElem(tok []byte) string {
	if len(tok) < 2 || tok[0] != '"' {
		return "a string"
	}
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return "a valid JSON string"
	}
	d.t.Strings[d.next] = []byte(s)
	return ""
}

func (d *dataDecoder) floatElem(tok []byte) string {
	dt := d.t.DType
	v, want := floatValue(tok, dt)
	if want != "" {
		return want
	}
	if dt == tensor.Float32 {
		binary.LittleEndian.PutUint32(d.t.Data[d.next*4:], math.Float32bits(float32(v)))
		return ""
	}
	d.t.SetFloat64(d.next, v)
	if dt.Overflows(v) {
		return outOfRange(dt)
	}
	return ""
}

// floatValue reads a float element of dt: a number, or one of the quoted
// names of NaN and the infinities.
func floatValue(tok []byte, dt tensor.DType) (float64, string) {
	if len(tok) > 0 && tok[0] == '"' {
		switch strings.ToLower(strings.Trim(bstr(tok), `"`)) {
		case "nan":
			return math.NaN(), ""
		case "infinity", "inf", "+infinity", "+inf":
			return math.Inf(1), ""
		case "-infinity", "-inf":
			return math.Inf(-1), ""
		}
		return 0, dt.String() + ` (a number, "NaN", "Infinity" or "-Infinity")`
	}
	bits := 64
	if dt == tensor.Float32 {
		bits = 32 // round once, straight to float32
	}
	f, err := strconv.ParseFloat(bstr(tok), bits)
	if err != nil && !isRangeErr(err) || !isNumber(tok) {
		return 0, "a number"
	}
	if err != nil {
		return 0, outOfRange(dt)
	}
	return f, ""
}

func (d *dataDecoder) intElem(tok []byte) string {
	dt := d.t.DType
	if !isNumber(tok) {
		return "an integer (" + dt.String() + ")"
	}
	s := bstr(tok)
	if dt == tensor.Uint64 {
		u, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			f, ok := integral(s)
			if !ok || f < 0 || f >= math.MaxUint64 {
				return "an integer in [0, 18446744073709551615] (uint64)"
			}
			u = uint64(f)
		}
		binary.LittleEndian.PutUint64(d.t.Data[d.next*8:], u)
		return ""
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ok := integral(s)
		if !ok || f < math.MinInt64 || f >= math.MaxInt64 {
			return "an integer (" + dt.String() + ")"
		}
		v = int64(f)
	}
	if lo, hi, _ := dt.IntRange(); v < lo || v > hi {
		return fmt.Sprintf("an integer in [%v, %v] (%s)", lo, hi, dt)
	}
	d.t.SetInt64(d.next, v)
	return ""
}

// outOfRange says what a float element beyond its dtype's range should be.
func outOfRange(dt tensor.DType) string {
	return fmt.Sprintf(`a number within the range of %s (write "Infinity" or "-Infinity" for an infinity)`, dt)
}

// isNumber reports whether tok is a JSON number literal.
func isNumber(tok []byte) bool {
	if len(tok) == 0 {
		return false
	}
	i := 0
	if tok[i] == '-' {
		i++
	}
	digits := func() int {
		s := i
		for i < len(tok) && tok[i] >= '0' && tok[i] <= '9' {
			i++
		}
		return i - s
	}
	if i < len(tok) && tok[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(tok) && tok[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(tok) && (tok[i] == 'e' || tok[i] == 'E') {
		i++
		if i < len(tok) && (tok[i] == '+' || tok[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(tok)
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// integral parses a number written with a fraction or exponent ("3.0",
// "1e3") and reports whether it is a whole number.
func integral(s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) {
		return 0, false
	}
	return f, true
}

// appendJSONData appends t's elements as a flat JSON array. Non-finite
// floats are written as the strings "NaN", "Infinity" and "-Infinity";
// string tensors as JSON strings.
func appendJSONData(b []byte, name string, t *tensor.Tensor) ([]byte, error) {
	n := t.NumElements()
	dt := t.DType
	if dt.IsComplex() || dt == tensor.Invalid {
		return nil, badRequest("output %q is %s, which JSON cannot carry; ask for it with binary_data", name, dt)
	}
	if dt != tensor.String && int64(len(t.Data)) != n*int64(dt.Size()) {
		return nil, fmt.Errorf("payload: output %q: %s holds %d bytes", name, t, len(t.Data))
	}
	b = append(b, '[')
	for i := int64(0); i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		switch {
		case dt == tensor.Bool:
			b = strconv.AppendBool(b, t.Data[i] != 0)
		case dt == tensor.String:
			q, _ := json.Marshal(string(t.Strings[i]))
			b = append(b, q...)
		case dt == tensor.Float32:
			b = appendFloat(b, float64(math.Float32frombits(binary.LittleEndian.Uint32(t.Data[i*4:]))), 32)
		case dt == tensor.Float64:
			b = appendFloat(b, math.Float64frombits(binary.LittleEndian.Uint64(t.Data[i*8:])), 64)
		case dt.IsFloat(): // float16, bfloat16, float8, float4: exact in float32
			b = appendFloat(b, t.Float64At(i), 32)
		case dt == tensor.Uint64:
			b = strconv.AppendUint(b, binary.LittleEndian.Uint64(t.Data[i*8:]), 10)
		default:
			b = strconv.AppendInt(b, t.Int64At(i), 10)
		}
	}
	return append(b, ']'), nil
}

func appendFloat(b []byte, v float64, bits int) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, `"NaN"`...)
	case math.IsInf(v, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(v, -1):
		return append(b, `"-Infinity"`...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, bits)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// appendShape appends a shape as a JSON array.
func appendShape(b []byte, shape []int64) []byte {
	b = append(b, '[')
	for i, d := range shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return append(b, ']')
}
