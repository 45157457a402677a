package serving

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/xserve/xserve/tensor"
)

// naiveCopy is copyBlock element by element.
func naiveCopy(dst []byte, dstShape, dstOff []int64, src []byte, srcShape, srcOff []int64, size []int64, elem int64) {
	n := tensor.NumElements(size)
	idx := make([]int64, len(size))
	ss, ds := strides(srcShape, elem), strides(dstShape, elem)
	for range n {
		var sp, dp int64
		for d := range size {
			sp += (srcOff[d] + idx[d]) * ss[d]
			dp += (dstOff[d] + idx[d]) * ds[d]
		}
		copy(dst[dp:dp+elem], src[sp:sp+elem])
		for d := len(size) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < size[d] {
				break
			}
			idx[d] = 0
		}
	}
}

func TestCopyBlockMatchesElementwiseCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 2000 {
		rank := rng.IntN(5)
		elem := int64([]int{1, 2, 4, 8}[rng.IntN(4)])
		src, dst, srcOff, dstOff, size := make([]int64, rank), make([]int64, rank), make([]int64, rank), make([]int64, rank), make([]int64, rank)
		for d := range rank {
			size[d] = int64(rng.IntN(4))
			if rng.IntN(3) > 0 {
				size[d]++ // mostly non-empty
			}
			src[d] = size[d] + int64(rng.IntN(3))
			dst[d] = size[d] + int64(rng.IntN(3))
			srcOff[d] = int64(rng.IntN(int(src[d]-size[d]) + 1))
			dstOff[d] = int64(rng.IntN(int(dst[d]-size[d]) + 1))
		}
		s := make([]byte, tensor.NumElements(src)*elem)
		for i := range s {
			s[i] = byte(rng.IntN(255) + 1)
		}
		got := make([]byte, tensor.NumElements(dst)*elem)
		want := make([]byte, len(got))
		copyBlock(got, dst, dstOff, s, src, srcOff, size, elem)
		naiveCopy(want, dst, dstOff, s, src, srcOff, size, elem)
		if !bytes.Equal(got, want) {
			t.Fatalf("iteration %d: copy of %v from %v at %v into %v at %v (elem %d) differs", iter, size, src, srcOff, dst, dstOff, elem)
		}
	}
}

func TestFill(t *testing.T) {
	buf := make([]byte, 7*3)
	fill(buf, []byte{1, 2, 3})
	if !bytes.Equal(buf, bytes.Repeat([]byte{1, 2, 3}, 7)) {
		t.Errorf("fill = %v", buf)
	}
	buf = []byte{9, 9}
	fill(buf, []byte{0, 0})
	if !bytes.Equal(buf, []byte{9, 9}) {
		t.Error("a zero pattern must leave the (already zeroed) buffer alone")
	}
}
