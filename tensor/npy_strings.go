package tensor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"
)

// NumPy string arrays: '<U{n}' holds n UTF-32 code units per element
// ('>U' big-endian), '|S{n}' n bytes; both pad short elements with NULs,
// which NumPy drops when it reads an element, and so do we.

// npyStringDescr is a parsed string descr.
type npyStringDescr struct {
	unicode   bool
	bigEndian bool
	width     int64 // characters (U) or bytes (S) per element
}

// maxNpyStringWidth bounds an element's declared width (1 GiB of UTF-32).
const maxNpyStringWidth = 1 << 28

func parseStringDescr(descr string) (npyStringDescr, bool) {
	if len(descr) < 3 {
		return npyStringDescr{}, false
	}
	order, kind := descr[0], descr[1]
	if kind != 'U' && kind != 'S' {
		return npyStringDescr{}, false
	}
	w, err := strconv.ParseInt(descr[2:], 10, 64)
	if err != nil || w < 0 || w > maxNpyStringWidth {
		return npyStringDescr{}, false
	}
	return npyStringDescr{unicode: kind == 'U', bigEndian: order == '>', width: w}, true
}

// unit is the bytes of one character.
func (d npyStringDescr) unit() int64 {
	if d.unicode {
		return 4
	}
	return 1
}

// readNpyStrings reads the data of a string array of shape; avail is the
// number of bytes left in the file (negative when unknown).
func readNpyStrings(r io.Reader, d npyStringDescr, shape []int64, avail int64) (*Tensor, error) {
	n := NumElements(shape)
	elem := d.width * d.unit()
	if n < 0 || (elem > 0 && n > math.MaxInt64/elem) {
		return nil, fmt.Errorf("%w: %v has too many elements", ErrShape, shape)
	}
	if avail >= 0 && n*elem > avail {
		return nil, fmt.Errorf("string%s of width %d needs %d data bytes, the file has %d", ShapeString(shape), d.width, n*elem, avail)
	}
	data, err := readFull(r, n*elem, avail >= 0)
	if err != nil {
		return nil, fmt.Errorf("string%s: data: %w", ShapeString(shape), err)
	}
	t := &Tensor{DType: String, Shape: shape, Strings: make([][]byte, n)}
	for i := range n {
		raw := data[i*elem : (i+1)*elem]
		if !d.unicode {
			t.Strings[i] = bytes.TrimRight(raw, "\x00")
			continue
		}
		chars := make([]rune, d.width)
		last := 0
		for k := range chars {
			if d.bigEndian {
				chars[k] = rune(binary.BigEndian.Uint32(raw[k*4:]))
			} else {
				chars[k] = rune(binary.LittleEndian.Uint32(raw[k*4:]))
			}
			if chars[k] != 0 {
				last = k + 1
			}
		}
		out := []byte{}
		for _, c := range chars[:last] { // NumPy drops the trailing NULs only
			out = utf8.AppendRune(out, c)
		}
		t.Strings[i] = out
	}
	return t, nil
}

// writeNpyStrings writes a String tensor as '<U' (or '|S' when an element
// is not UTF-8), as wide as its longest element (at least 1).
func writeNpyStrings(w io.Writer, t *Tensor) error {
	n := t.NumElements()
	if n < 0 || int64(len(t.Strings)) != n {
		return fmt.Errorf("tensor: npy: %w: %s has %d strings", ErrShape, t, len(t.Strings))
	}
	unicode := true
	width := 1
	for _, s := range t.Strings {
		if !utf8.Valid(s) {
			unicode = false
		}
	}
	for _, s := range t.Strings {
		if unicode {
			width = max(width, utf8.RuneCount(s))
		} else {
			width = max(width, len(s))
		}
	}
	descr := "|S" + strconv.Itoa(width)
	if unicode {
		descr = "<U" + strconv.Itoa(width)
	}
	header, err := npyHeaderBytes(descr, t.Shape)
	if err != nil {
		return fmt.Errorf("tensor: npy: %w", err)
	}
	var b bytes.Buffer
	b.Write(header)
	for _, s := range t.Strings {
		if !unicode {
			b.Write(s)
			b.Write(make([]byte, width-len(s)))
			continue
		}
		k := 0
		for _, r := range string(s) {
			b.Write(binary.LittleEndian.AppendUint32(nil, uint32(r)))
			k++
		}
		b.Write(make([]byte, 4*(width-k)))
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("tensor: npy: %w", err)
	}
	return nil
}
