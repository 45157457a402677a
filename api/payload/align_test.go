package payload

import (
	"bytes"
	"testing"
	"unsafe"
)

// TestAlignSmall: a small tensor's bytes come back on a TensorAlign
// boundary, copied only when they were not; a large one is never copied.
func TestAlignSmall(t *testing.T) {
	buf := make([]byte, alignCopyMax+2*TensorAlign)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	base := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % TensorAlign)
	at := func(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
	for _, c := range []struct {
		name     string
		off, n   int
		wantSame bool // b itself comes back
	}{
		{"aligned", (TensorAlign - base) % TensorAlign, 16, true},
		{"off by one", (TensorAlign-base)%TensorAlign + 1, 16, false},
		{"off by 63", (TensorAlign-base)%TensorAlign + 63, 100, false},
		{"largest copied", (TensorAlign-base)%TensorAlign + 1, alignCopyMax, false},
		{"too large to copy", (TensorAlign-base)%TensorAlign + 1, alignCopyMax + 1, true},
		{"empty", 1, 0, true},
	} {
		b := buf[c.off : c.off+c.n]
		got := AlignSmall(b)
		if !bytes.Equal(got, b) {
			t.Errorf("%s: bytes changed", c.name)
		}
		if same := len(b) == 0 || at(got) == at(b); same != c.wantSame {
			t.Errorf("%s: returned the input itself: %v, want %v", c.name, same, c.wantSame)
		}
		if !c.wantSame && at(got)%TensorAlign != 0 {
			t.Errorf("%s: copy at %#x, not aligned", c.name, at(got))
		}
		if !c.wantSame && cap(got) != len(got) {
			t.Errorf("%s: cap %d beyond len %d", c.name, cap(got), len(got))
		}
	}
}
