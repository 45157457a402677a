package payload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// jsonReader reads a JSON request header in place, in one pass: the request
// decoders walk its objects with it, keep the "data" of each input as a
// slice of the body (never copied, never parsed into values) and let
// decodeJSONData parse it straight into the tensor. It replaces
// encoding/json there, which scanned the body twice (validation, then
// decoding), copied it into its own buffer and copied every "data" array
// again into a json.RawMessage.
//
// Its errors read like UnmarshalJSON's: "invalid JSON in <what> at byte N:
// ..." for syntax, "invalid JSON in <what>: <field> is a JSON <kind>, want
// <type>" for a value of the wrong type, and "unknown field" where strict.
type jsonReader struct {
	buf   []byte
	pos   int
	what  string // "the request"
	depth int    // objects and arrays open at pos
}

// MaxJSONDepth is the deepest nesting of objects and arrays a JSON request
// may have (a tensor's nested "data" counts one level per dimension, and a
// tensor has at most MaxRank). The reader walks nested values recursively,
// one call per level: the limit bounds its stack, so that a body of
// millions of '[' is a 400, not a stack overflow.
const MaxJSONDepth = 128

// enter records that an object or array opens at pos, failing past
// MaxJSONDepth; leave closes it.
func (r *jsonReader) enter() error {
	if r.depth >= MaxJSONDepth {
		return badRequest("invalid JSON in %s at byte %d: nested deeper than the limit of %d levels (MaxJSONDepth)", r.what, r.pos+1, MaxJSONDepth)
	}
	r.depth++
	return nil
}

func (r *jsonReader) leave() { r.depth-- }

// syntaxErr reports a syntax error at the current position.
func (r *jsonReader) syntaxErr(format string, args ...any) error {
	if r.pos >= len(r.buf) {
		return badRequest("invalid JSON in %s: unexpected end of data", r.what)
	}
	return badRequest("invalid JSON in %s at byte %d: %s", r.what, r.pos+1, fmt.Sprintf(format, args...))
}

// invalidChar reports the character at the current position as unexpected.
func (r *jsonReader) invalidChar(context string) error {
	if r.pos >= len(r.buf) {
		return r.syntaxErr("")
	}
	return r.syntaxErr("invalid character %s %s", quoteChar(r.buf[r.pos]), context)
}

// quoteChar quotes a byte the way encoding/json's syntax errors do.
func quoteChar(c byte) string {
	switch {
	case c == '\'':
		return `'\''`
	case c == '"':
		return `'"'`
	case c < ' ' || c >= 0x7f:
		q := strconv.Quote(string(rune(c)))
		return "'" + q[1:len(q)-1] + "'"
	}
	return "'" + string(c) + "'"
}

// typeErr reports a value of the wrong JSON type for field, or the syntax
// error in it, which comes first.
func (r *jsonReader) typeErr(field, want string) error {
	if err := r.checkValue(); err != nil {
		return err
	}
	return badRequest("invalid JSON in %s: %s is a JSON %s, want %s", r.what, field, r.kind(), want)
}

// kind names the JSON type of the value at the current position.
func (r *jsonReader) kind() string {
	switch r.peek() {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

func (r *jsonReader) ws() {
	for r.pos < len(r.buf) {
		switch r.buf[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (r *jsonReader) peek() byte {
	r.ws()
	if r.pos >= len(r.buf) {
		return 0
	}
	return r.buf[r.pos]
}

// null consumes a null if one is next and reports whether it did.
func (r *jsonReader) null() bool {
	if r.peek() == 'n' && bytes.HasPrefix(r.buf[r.pos:], []byte("null")) {
		r.pos += 4
		return true
	}
	return false
}

// object reads an object, calling field for each key with the reader at its
// value; field must consume the value. A null object calls nothing.
func (r *jsonReader) object(name string, field func(key string) error) error {
	if r.null() {
		return nil
	}
	if r.peek() != '{' {
		if r.pos >= len(r.buf) {
			return r.syntaxErr("")
		}
		return r.typeErr(name, "an object")
	}
	if err := r.enter(); err != nil {
		return err
	}
	defer r.leave()
	r.pos++
	if r.peek() == '}' {
		r.pos++
		return nil
	}
	for {
		if r.peek() != '"' {
			return r.invalidChar("looking for beginning of object key string")
		}
		key, err := r.key()
		if err != nil {
			return err
		}
		if r.peek() != ':' {
			return r.invalidChar("after object key")
		}
		r.pos++
		if err := field(key); err != nil {
			return err
		}
		switch r.peek() {
		case ',':
			r.pos++
		case '}':
			r.pos++
			return nil
		default:
			return r.invalidChar("after object key:value pair")
		}
	}
}

// array reads an array, calling elem for each element with the reader at
// it; elem must consume it. A null array calls nothing.
func (r *jsonReader) array(name string, elem func(i int) error) error {
	if r.null() {
		return nil
	}
	if r.peek() != '[' {
		if r.pos >= len(r.buf) {
			return r.syntaxErr("")
		}
		return r.typeErr(name, "an array")
	}
	if err := r.enter(); err != nil {
		return err
	}
	defer r.leave()
	r.pos++
	if r.peek() == ']' {
		r.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		switch r.peek() {
		case ',':
			r.pos++
		case ']':
			r.pos++
			return nil
		default:
			return r.invalidChar("after array element")
		}
	}
}

// str reads a string (the reader must be at its '"').
func (r *jsonReader) str() (string, error) {
	start := r.pos
	raw, escaped, err := r.strSpan()
	if err != nil || !escaped {
		return string(raw), err
	}
	return r.unescape(start)
}

// strSpan reads a string literal and returns its bytes between the quotes
// (still escaped when escaped is true), a slice of the buffer.
func (r *jsonReader) strSpan() (raw []byte, escaped bool, err error) {
	start := r.pos
	r.pos++
	for r.pos < len(r.buf) {
		c := r.buf[r.pos]
		switch {
		case c == '"':
			r.pos++
			return r.buf[start+1 : r.pos-1], escaped, nil
		case c == '\\':
			escaped = true
			r.pos += 2
			continue
		case c < ' ':
			return nil, false, r.invalidChar("in string literal")
		}
		r.pos++
	}
	return nil, false, r.syntaxErr("")
}

// unescape decodes the escaped string literal from start to r.pos.
func (r *jsonReader) unescape(start int) (string, error) {
	var s string
	if err := json.Unmarshal(r.buf[start:r.pos], &s); err != nil {
		r.pos = start
		return "", r.syntaxErr("invalid string %s", quoteTok(r.buf[start:]))
	}
	return s, nil
}

// key reads an object's key: str, without allocating for the keys of the
// protocols' own fields.
func (r *jsonReader) key() (string, error) {
	start := r.pos
	raw, escaped, err := r.strSpan()
	switch {
	case err != nil:
		return "", err
	case escaped:
		return r.unescape(start)
	}
	return knownKey(raw), nil
}

// knownKey returns b as a string: a constant, not allocated, for the
// protocols' own field names (the switch on string(b) does not allocate).
func knownKey(b []byte) string {
	switch string(b) {
	case "name":
		return "name"
	case "shape":
		return "shape"
	case "datatype":
		return "datatype"
	case "data":
		return "data"
	case "parameters":
		return "parameters"
	case "inputs":
		return "inputs"
	case "outputs":
		return "outputs"
	case "id":
		return "id"
	case "model":
		return "model"
	case "dtype":
		return "dtype"
	case "binary_data_size":
		return "binary_data_size"
	case "binary_data_output":
		return "binary_data_output"
	case "binary_data":
		return "binary_data"
	}
	return string(b)
}

// stringField reads a string or null (as "") for field.
func (r *jsonReader) stringField(field string) (string, error) {
	if r.null() {
		return "", nil
	}
	if r.peek() != '"' {
		if r.pos >= len(r.buf) {
			return "", r.syntaxErr("")
		}
		if err := r.checkValue(); err != nil {
			return "", err
		}
		return "", r.typeErr(field, "a string")
	}
	return r.str()
}

// checkValue checks that a whole value follows, without consuming it, so
// that a syntax error is reported before a type error, as encoding/json
// does.
func (r *jsonReader) checkValue() error {
	save := r.pos
	_, err := r.skip()
	r.pos = save
	return err
}

// int64s reads an array of integers (a shape) for field, of at most
// MaxRank; null gives nil.
func (r *jsonReader) int64s(field string) ([]int64, error) {
	if r.null() {
		return nil, nil
	}
	if err := r.checkValue(); err != nil {
		return nil, err
	}
	out := []int64{}
	err := r.array(field, func(i int) error {
		if i == MaxRank {
			return badRequest("invalid JSON in %s: %s has more than %d dims, the limit (MaxRank)", r.what, field, MaxRank)
		}
		r.ws()
		start := r.pos
		end, err := r.skip()
		if err != nil {
			return err
		}
		tok := r.buf[start:end]
		v, perr := strconv.ParseInt(bstr(tok), 10, 64)
		if perr != nil {
			r.pos = start
			if isNumber(tok) {
				return badRequest("invalid JSON in %s: %s is a JSON number %s, want an integer", r.what, field, tok)
			}
			return r.typeErr(field, "an integer")
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// raw returns the value at the reader, checked, as a slice of the body.
func (r *jsonReader) raw() (json.RawMessage, error) {
	r.ws()
	start := r.pos
	end, err := r.skip()
	if err != nil {
		return nil, err
	}
	return r.buf[start:end:end], nil
}

// rawMap reads an object of any values (parameters) as slices of the body.
func (r *jsonReader) rawMap(field string) (map[string]json.RawMessage, error) {
	if r.null() {
		return nil, nil
	}
	if err := r.checkValue(); err != nil {
		return nil, err
	}
	m := map[string]json.RawMessage{}
	err := r.object(field, func(key string) error {
		v, err := r.raw()
		m[key] = v
		return err
	})
	return m, err
}

// data returns the value of a tensor's "data" as a slice of the body
// without parsing it: decodeJSONData parses (and checks) it. It only finds
// where the value ends: at the bracket matching its first, outside strings.
func (r *jsonReader) data() (json.RawMessage, error) {
	r.ws()
	start := r.pos
	if r.pos >= len(r.buf) {
		return nil, r.syntaxErr("")
	}
	if c := r.buf[r.pos]; c != '[' && c != '{' {
		end, err := r.skip()
		if err != nil {
			return nil, err
		}
		return r.buf[start:end:end], nil
	}
	// The common case, a flat array of numbers, with SIMD searches: the
	// first ']' ends it when no '[', '{' or '"' comes before it.
	if i := bytes.IndexByte(r.buf[start+1:], ']'); r.buf[start] == '[' && i >= 0 {
		inner := r.buf[start+1 : start+1+i]
		if bytes.IndexByte(inner, '[') < 0 && bytes.IndexByte(inner, '"') < 0 && bytes.IndexByte(inner, '{') < 0 {
			r.pos = start + i + 2
			return r.buf[start:r.pos:r.pos], nil
		}
	}
	// Brackets inside are only counted: decodeJSONData checks them.
	depth := 0
	for r.pos < len(r.buf) {
		switch r.buf[r.pos] {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
			if depth == 0 {
				if open, c := r.buf[start], r.buf[r.pos]; open == '[' && c != ']' {
					return nil, r.invalidChar("after array element")
				} else if open == '{' && c != '}' {
					return nil, r.invalidChar("after object key:value pair")
				}
				r.pos++
				return r.buf[start:r.pos:r.pos], nil
			}
		case '"':
			if _, err := r.str(); err != nil {
				return nil, err
			}
			continue
		}
		r.pos++
	}
	return nil, r.syntaxErr("")
}

// skip consumes one value, checking its syntax, and returns where it ends.
func (r *jsonReader) skip() (int, error) {
	switch c := r.peek(); {
	case c == '{':
		err := r.object("", func(string) error { _, err := r.skip(); return err })
		return r.pos, err
	case c == '[':
		err := r.array("", func(int) error { _, err := r.skip(); return err })
		return r.pos, err
	case c == '"':
		_, err := r.str()
		return r.pos, err
	case c == 't' || c == 'f' || c == 'n':
		rest := r.buf[r.pos:]
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(rest, []byte(lit)) {
				r.pos += len(lit)
				return r.pos, nil
			}
			if len(rest) < len(lit) && strings.HasPrefix(lit, string(rest)) {
				r.pos = len(r.buf)
				return 0, r.syntaxErr("")
			}
		}
		return 0, r.invalidChar("in literal")
	case c == '-' || c >= '0' && c <= '9':
		start := r.pos
	num:
		for r.pos < len(r.buf) {
			switch b := r.buf[r.pos]; {
			case b >= '0' && b <= '9', b == '-', b == '+', b == '.', b == 'e', b == 'E':
				r.pos++
			default:
				break num
			}
		}
		if !isNumber(r.buf[start:r.pos]) {
			r.pos = start
			return 0, r.syntaxErr("invalid number %s", quoteTok(r.buf[start:]))
		}
		return r.pos, nil
	case c == 0:
		return 0, r.syntaxErr("")
	}
	return 0, r.invalidChar("looking for beginning of value")
}

// end checks that only space follows the document.
func (r *jsonReader) end() error {
	if r.peek() != 0 {
		return badRequest("invalid JSON: %s is followed by more data at byte %d", r.what, r.pos+1)
	}
	return nil
}

// unknown is the error for an unknown field where fields are checked.
func (r *jsonReader) unknown(key string) error {
	return badRequest("invalid JSON in %s: unknown field %q", r.what, key)
}

// fieldIs matches a key to a field name as encoding/json does: exactly, or
// else ignoring case.
func fieldIs(key, name string) bool {
	return key == name || strings.EqualFold(key, name)
}
