package payload

import "unsafe"

// TensorAlign is the alignment the PJRT CPU plugin reads host tensors in
// place at: it copies a tensor whose data starts elsewhere before running
// (about 3 µs of fixed cost on a tiny tensor; see docs/BENCHMARKS.md).
const TensorAlign = 64

// alignCopyMax is the largest tensor AlignSmall copies: above it the copy
// costs what the plugin's would, and would hold the bytes twice.
const alignCopyMax = 64 << 10

// AlignSmall returns b itself when it starts on a TensorAlign boundary or
// is larger than 64 KiB, else a copy of it that does.
func AlignSmall(b []byte) []byte {
	if len(b) == 0 || len(b) > alignCopyMax || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%TensorAlign == 0 {
		return b
	}
	raw := make([]byte, len(b)+TensorAlign-1)
	off := (TensorAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%TensorAlign)) % TensorAlign
	out := raw[off : off+len(b) : off+len(b)]
	copy(out, b)
	return out
}
