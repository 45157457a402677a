package tensor

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// NumPy .npy format (numpy.lib.format): the magic "\x93NUMPY", a major and a
// minor version byte, the header length (uint16 in version 1.0, uint32 in 2.0
// and 3.0), a Python dict literal header with the keys descr, fortran_order
// and shape, padded with spaces and a newline, then the raw elements.
const (
	npyMagic = "\x93NUMPY"
	// npyMaxHeaderLen bounds the header we read; NumPy itself refuses
	// headers over 10000 bytes by default.
	npyMaxHeaderLen = 1 << 16
	// npyMaxRank is NumPy 2's NPY_MAXDIMS.
	npyMaxRank = 64
	// npyAlign is the alignment NumPy pads the data offset to.
	npyAlign = 64
	// npyChunk is the largest read done in one allocation when the size of
	// the input is unknown, so a header claiming a huge shape cannot make us
	// allocate much more than the input holds.
	npyChunk = 1 << 20
)

// npyDescrs maps the little-endian NumPy type strings to dtypes. Big-endian
// ('>') and native ('=') variants are handled by parseDescr.
var npyDescrs = map[string]DType{
	"b1": Bool, "i1": Int8, "i2": Int16, "i4": Int32, "i8": Int64,
	"u1": Uint8, "u2": Uint16, "u4": Uint32, "u8": Uint64,
	"f2": Float16, "f4": Float32, "f8": Float64, "c8": Complex64, "c16": Complex128,
}

// mlDTypeDescrs are the dtypes NumPy has only through ml_dtypes. An .npy
// file holds them under their ml_dtypes name as descr ('float8_e4m3fn',
// 'bfloat16', 'int4'), which numpy.load reads back once ml_dtypes is
// imported; elements are ml_dtypes' bytes (one a byte for the 4-bit types).
// numpy.save itself writes such arrays as '<V1' or '<V2', which name no
// type and are errors here: write the header with
// numpy.lib.format.write_array_header_1_0({'descr': a.dtype.name, ...}).
var mlDTypeDescrs = map[string]DType{
	"bfloat16": BFloat16, "float8_e4m3fn": Float8E4M3FN, "float8_e4m3fnuz": Float8E4M3FNUZ,
	"float8_e5m2": Float8E5M2, "float8_e5m2fnuz": Float8E5M2FNUZ, "float8_e8m0fnu": Float8E8M0FNU,
	"float4_e2m1fn": Float4E2M1FN, "int4": Int4, "uint4": Uint4,
}

// ReadNpy reads one array in NumPy .npy format (versions 1.0, 2.0 and 3.0)
// from r. Big-endian arrays are byte-swapped to little-endian. Fortran-order
// arrays of rank 2 or more, and dtypes without a DType (objects,
// structured types, datetimes), are errors. Unicode ('<U') and bytes ('|S')
// arrays are read as String tensors, each element without its trailing NUL
// padding. ReadNpy reads no further than
// the end of the array.
func ReadNpy(r io.Reader) (*Tensor, error) {
	t, err := readNpy(r, -1)
	if err != nil {
		return nil, fmt.Errorf("tensor: npy: %w", err)
	}
	return t, nil
}

// ReadNpyFile reads the .npy file at path.
func ReadNpyFile(path string) (*Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tensor: npy: %w", err)
	}
	defer f.Close()
	size := int64(-1)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	t, err := readNpy(bufio.NewReader(f), size)
	if err != nil {
		return nil, fmt.Errorf("tensor: npy: %s: %w", path, err)
	}
	return t, nil
}

// readNpy reads an array from r. size is the number of bytes r holds, or -1
// when unknown.
func readNpy(r io.Reader, size int64) (*Tensor, error) {
	header, err := readNpyHeader(r)
	if err != nil {
		return nil, err
	}
	descr, fortran, shape, err := parseNpyHeader(header.text)
	if err != nil {
		return nil, fmt.Errorf("header %q: %w", header.text, err)
	}
	if fortran && len(shape) > 1 {
		return nil, fmt.Errorf("fortran_order arrays are not supported (shape %v): save a C-contiguous array (numpy.ascontiguousarray)", shape)
	}
	if sd, ok := parseStringDescr(descr); ok {
		return readNpyStrings(r, sd, shape, size-header.len)
	}
	dt, swap, err := parseDescr(descr)
	if err != nil {
		return nil, err
	}
	n := NumElements(shape)
	if n < 0 || n > math.MaxInt64/int64(dt.Size()) {
		return nil, fmt.Errorf("%w: %v has too many elements", ErrShape, shape)
	}
	nbytes := n * int64(dt.Size())
	if size >= 0 && nbytes > size-header.len {
		return nil, fmt.Errorf("%s%s needs %d data bytes, the file has %d", dt, ShapeString(shape), nbytes, size-header.len)
	}
	data, err := readFull(r, nbytes, size >= 0)
	if err != nil {
		return nil, fmt.Errorf("%s%s: data: %w", dt, ShapeString(shape), err)
	}
	if swap {
		byteSwap(data, dt)
	}
	if dt == Bool {
		for i, b := range data {
			if b != 0 {
				data[i] = 1
			}
		}
	}
	return &Tensor{DType: dt, Shape: shape, Data: data}, nil
}

// npyHeader is the header text and the length of everything before the data.
type npyHeader struct {
	text string
	len  int64
}

func readNpyHeader(r io.Reader) (npyHeader, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return npyHeader{}, fmt.Errorf("reading magic: %w", err)
	}
	if string(pre[:6]) != npyMagic {
		return npyHeader{}, fmt.Errorf("not a .npy file (magic %q)", pre[:6])
	}
	major, minor := pre[6], pre[7]
	var hlen int64
	prefix := int64(len(pre))
	switch {
	case major == 1 && minor == 0:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return npyHeader{}, fmt.Errorf("reading header length: %w", err)
		}
		hlen, prefix = int64(binary.LittleEndian.Uint16(b[:])), prefix+2
	case (major == 2 || major == 3) && minor == 0:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return npyHeader{}, fmt.Errorf("reading header length: %w", err)
		}
		hlen, prefix = int64(binary.LittleEndian.Uint32(b[:])), prefix+4
	default:
		return npyHeader{}, fmt.Errorf("unsupported format version %d.%d (want 1.0, 2.0 or 3.0)", major, minor)
	}
	if hlen > npyMaxHeaderLen {
		return npyHeader{}, fmt.Errorf("header of %d bytes exceeds the limit of %d", hlen, npyMaxHeaderLen)
	}
	text := make([]byte, hlen)
	if _, err := io.ReadFull(r, text); err != nil {
		return npyHeader{}, fmt.Errorf("reading header: %w", err)
	}
	return npyHeader{text: string(text), len: prefix + hlen}, nil
}

// readFull reads exactly n bytes. Unless known is set (the input is known to
// hold n bytes), it allocates in steps of npyChunk as data arrives.
func readFull(r io.Reader, n int64, known bool) ([]byte, error) {
	if known || n <= npyChunk {
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, fmt.Errorf("want %d bytes: %w", n, err)
		}
		return data, nil
	}
	var data []byte
	for int64(len(data)) < n {
		start := len(data)
		chunk := int(min(n-int64(start), npyChunk))
		data = slices.Grow(data, chunk)[:start+chunk]
		if _, err := io.ReadFull(r, data[start:]); err != nil {
			return nil, fmt.Errorf("want %d bytes: %w", n, err)
		}
	}
	return data, nil
}

// parseDescr maps a NumPy type string to a dtype, reporting whether the
// data is big-endian and must be swapped.
func parseDescr(descr string) (DType, bool, error) {
	if descr == "" {
		return Invalid, false, errors.New("empty descr")
	}
	if dt, ok := mlDTypeDescrs[descr]; ok {
		return dt, false, nil
	}
	order, code := descr[0], descr[1:]
	dt, ok := npyDescrs[code]
	if !ok {
		if code == "V1" || code == "V2" {
			return Invalid, false, fmt.Errorf("dtype %q names no type (numpy.save writes ml_dtypes arrays so): write the ml_dtypes name, such as 'float8_e4m3fn', as descr", descr)
		}
		return Invalid, false, fmt.Errorf("unsupported dtype %q (want one of bool, int8..int64, uint8..uint64, float16/32/64, complex64/128, or an ml_dtypes name: bfloat16, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu, float4_e2m1fn, int4, uint4)", descr)
	}
	switch order {
	case '<':
		return dt, false, nil
	case '>':
		return dt, dt.Size() > 1, nil
	case '|':
		if dt.Size() != 1 {
			return Invalid, false, fmt.Errorf("dtype %q: byte order '|' for a %d-byte type", descr, dt.Size())
		}
		return dt, false, nil
	case '=':
		return dt, !nativeLittleEndian() && dt.Size() > 1, nil
	}
	return Invalid, false, fmt.Errorf("dtype %q: unknown byte order %q", descr, order)
}

func nativeLittleEndian() bool {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], 1)
	return b[0] == 1
}

// byteSwap reverses the bytes of each scalar in data: each element, or each
// half of a complex element.
func byteSwap(data []byte, dt DType) {
	w := dt.Size()
	if dt.IsComplex() {
		w /= 2
	}
	for i := 0; i+w <= len(data); i += w {
		for a, b := i, i+w-1; a < b; a, b = a+1, b-1 {
			data[a], data[b] = data[b], data[a]
		}
	}
}

// parseNpyHeader parses the header dict, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
func parseNpyHeader(text string) (descr string, fortran bool, shape []int64, err error) {
	p := &pyParser{s: text}
	seen := map[string]bool{}
	if err := p.expect('{'); err != nil {
		return "", false, nil, err
	}
	for !p.peek('}') {
		key, err := p.str()
		if err != nil {
			return "", false, nil, err
		}
		if seen[key] {
			return "", false, nil, fmt.Errorf("key %q twice", key)
		}
		seen[key] = true
		if err := p.expect(':'); err != nil {
			return "", false, nil, err
		}
		switch key {
		case "descr":
			if p.peek('[') {
				return "", false, nil, errors.New("structured dtypes are not supported")
			}
			descr, err = p.str()
		case "fortran_order":
			fortran, err = p.boolean()
		case "shape":
			shape, err = p.tuple()
		default:
			return "", false, nil, fmt.Errorf("unexpected key %q", key)
		}
		if err != nil {
			return "", false, nil, fmt.Errorf("%s: %w", key, err)
		}
		if !p.peek('}') {
			if err := p.expect(','); err != nil {
				return "", false, nil, err
			}
		}
	}
	p.pos++ // '}'
	if rest := strings.TrimSpace(p.s[p.pos:]); rest != "" {
		return "", false, nil, fmt.Errorf("trailing text %q", rest)
	}
	if len(seen) != 3 {
		return "", false, nil, errors.New("want the keys descr, fortran_order and shape")
	}
	return descr, fortran, shape, nil
}

// pyParser reads the small subset of Python literals found in .npy headers.
type pyParser struct {
	s   string
	pos int
}

func (p *pyParser) skipSpace() {
	for p.pos < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.pos]) >= 0 {
		p.pos++
	}
}

// peek skips spaces and reports whether the next byte is c.
func (p *pyParser) peek(c byte) bool {
	p.skipSpace()
	return p.pos < len(p.s) && p.s[p.pos] == c
}

func (p *pyParser) expect(c byte) error {
	if !p.peek(c) {
		return fmt.Errorf("want %q at offset %d", c, p.pos)
	}
	p.pos++
	return nil
}

// str reads a quoted string without escapes.
func (p *pyParser) str() (string, error) {
	p.skipSpace()
	if p.pos >= len(p.s) || (p.s[p.pos] != '\'' && p.s[p.pos] != '"') {
		return "", fmt.Errorf("want a string at offset %d", p.pos)
	}
	q := p.s[p.pos]
	end := strings.IndexByte(p.s[p.pos+1:], q)
	if end < 0 {
		return "", errors.New("unterminated string")
	}
	s := p.s[p.pos+1 : p.pos+1+end]
	p.pos += end + 2
	return s, nil
}

func (p *pyParser) boolean() (bool, error) {
	p.skipSpace()
	for word, v := range map[string]bool{"True": true, "False": false} {
		if strings.HasPrefix(p.s[p.pos:], word) {
			p.pos += len(word)
			return v, nil
		}
	}
	return false, fmt.Errorf("want True or False at offset %d", p.pos)
}

// tuple reads a tuple of non-negative integers such as (), (3,) or (2, 3).
func (p *pyParser) tuple() ([]int64, error) {
	if err := p.expect('('); err != nil {
		return nil, err
	}
	shape := []int64{}
	for !p.peek(')') {
		v, err := p.dim()
		if err != nil {
			return nil, err
		}
		if len(shape) == npyMaxRank {
			return nil, fmt.Errorf("more than %d dims", npyMaxRank)
		}
		shape = append(shape, v)
		if !p.peek(')') {
			if err := p.expect(','); err != nil {
				return nil, err
			}
		}
	}
	p.pos++ // ')'
	return shape, nil
}

// dim reads a non-negative integer, allowing Python 2's 'L' suffix.
func (p *pyParser) dim() (int64, error) {
	start := p.pos
	for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
		p.pos++
	}
	v, err := strconv.ParseInt(p.s[start:p.pos], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad dim at offset %d", start)
	}
	if p.pos < len(p.s) && p.s[p.pos] == 'L' {
		p.pos++
	}
	return v, nil
}

// WriteNpy writes t to w in NumPy .npy format, version 1.0 (2.0 when the
// header does not fit in 64 KiB), little-endian and C order. String
// tensors are written as NumPy unicode arrays ('<U'), or as bytes ('|S')
// when an element is not UTF-8. The types NumPy has only through ml_dtypes
// (bfloat16, the 8- and 4-bit floats, int4, uint4) are written under their
// ml_dtypes name (see mlDTypeDescrs).
func WriteNpy(w io.Writer, t *Tensor) error {
	if t.DType == String {
		return writeNpyStrings(w, t)
	}
	header, err := npyHeaderFor(t)
	if err != nil {
		return fmt.Errorf("tensor: npy: %w", err)
	}
	if _, err := w.Write(header); err != nil {
		return fmt.Errorf("tensor: npy: %w", err)
	}
	if _, err := w.Write(t.Data); err != nil {
		return fmt.Errorf("tensor: npy: %w", err)
	}
	return nil
}

// WriteNpyFile writes t to the file at path in .npy format.
func WriteNpyFile(path string, t *Tensor) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("tensor: npy: %w", err)
	}
	if err := WriteNpy(f, t); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("tensor: npy: %w", err)
	}
	return nil
}

// npyDescr returns the little-endian NumPy type string of dt.
func npyDescr(dt DType) (string, error) {
	if dt == String {
		return "", errors.New("string tensors cannot be written as .npy")
	}
	for name, d := range mlDTypeDescrs {
		if d == dt {
			return name, nil
		}
	}
	for code, d := range npyDescrs {
		if d == dt {
			if dt.Size() == 1 {
				return "|" + code, nil
			}
			return "<" + code, nil
		}
	}
	return "", fmt.Errorf("dtype %v has no NumPy equivalent", dt)
}

// npyHeaderFor builds the magic, version, length and padded header for t.
func npyHeaderFor(t *Tensor) ([]byte, error) {
	descr, err := npyDescr(t.DType)
	if err != nil {
		return nil, err
	}
	n := NumElements(t.Shape)
	if n < 0 || int64(len(t.Data)) != n*int64(t.DType.Size()) {
		return nil, fmt.Errorf("%w: %s has %d data bytes", ErrShape, t, len(t.Data))
	}
	return npyHeaderBytes(descr, t.Shape)
}

// npyHeaderBytes builds the magic, version, length and padded header of an
// array of descr and shape.
func npyHeaderBytes(descr string, shape []int64) ([]byte, error) {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.FormatInt(d, 10)
	}
	tuple := "(" + strings.Join(dims, ", ") + ")"
	if len(dims) == 1 {
		tuple = "(" + dims[0] + ",)"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, tuple)
	for _, v := range []struct {
		major   byte
		lenSize int
	}{{1, 2}, {2, 4}} {
		prefix := len(npyMagic) + 2 + v.lenSize
		total := (prefix + len(dict) + 1 + npyAlign - 1) / npyAlign * npyAlign
		hlen := total - prefix
		if v.lenSize == 2 && hlen > 0xFFFF {
			continue
		}
		var b bytes.Buffer
		b.WriteString(npyMagic)
		b.WriteByte(v.major)
		b.WriteByte(0)
		if v.lenSize == 2 {
			b.Write(binary.LittleEndian.AppendUint16(nil, uint16(hlen)))
		} else {
			b.Write(binary.LittleEndian.AppendUint32(nil, uint32(hlen)))
		}
		b.WriteString(dict)
		b.WriteString(strings.Repeat(" ", hlen-len(dict)-1))
		b.WriteByte('\n')
		return b.Bytes(), nil
	}
	return nil, errors.New("unreachable")
}
