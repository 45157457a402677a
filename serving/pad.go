package serving

import "bytes"

// copyBlock copies a box of the given size from src (row-major bytes of
// shape srcShape; the box starts at srcOff) into dst (shape dstShape; the box
// lands at dstOff). elem is the element size in bytes. The trailing dims that
// the box covers entirely in both tensors are merged into one contiguous run,
// so padding or slicing along a leading dim is a single copy and the number
// of copies is the product of the box's leading (non-merged) dims. The
// caller guarantees that the box fits both tensors.
func copyBlock(dst []byte, dstShape, dstOff []int64, src []byte, srcShape, srcOff []int64, size []int64, elem int64) {
	rank := len(size)
	for _, n := range size {
		if n == 0 {
			return
		}
	}
	if rank == 0 {
		copy(dst[:elem], src[:elem])
		return
	}
	srcStride := strides(srcShape, elem)
	dstStride := strides(dstShape, elem)
	// j is the innermost dim that is not covered entirely in both tensors;
	// the dims after it join the run.
	j := rank - 1
	for j > 0 && size[j] == srcShape[j] && size[j] == dstShape[j] {
		j--
	}
	run := size[j] * srcStride[j]

	idx := make([]int64, j) // odometer over dims 0..j-1
	for {
		sp := srcOff[j] * srcStride[j]
		dp := dstOff[j] * dstStride[j]
		for d := 0; d < j; d++ {
			sp += (srcOff[d] + idx[d]) * srcStride[d]
			dp += (dstOff[d] + idx[d]) * dstStride[d]
		}
		copy(dst[dp:dp+run], src[sp:sp+run])
		d := j - 1
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < size[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// strides returns the row-major byte strides of shape.
func strides(shape []int64, elem int64) []int64 {
	st := make([]int64, len(shape))
	s := elem
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// fill sets every element of buf to the element pattern (len(buf) is a
// multiple of len(pattern)) by doubling copies. An all-zero pattern leaves
// buf alone: new buffers are zeroed already.
func fill(buf, pattern []byte) {
	if len(pattern) == 0 || len(buf) == 0 || bytes.Count(pattern, []byte{0}) == len(pattern) {
		return
	}
	n := copy(buf, pattern)
	for n < len(buf) {
		n += copy(buf[n:], buf[:n])
	}
}
