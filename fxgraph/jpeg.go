package fxgraph

import "image"

// LibjpegRGB converts a decoded JPEG's planes to RGB as libjpeg (and so
// Pillow, the ONNX reference) does by default, rather than as Go's
// color.YCbCr does: chroma subsampled 2x2 or 2x1 is upsampled with
// libjpeg's "fancy" triangular filter (jdsample.c), and YCbCr becomes RGB
// with libjpeg's 16-bit fixed-point tables (jdcolor.c). Other subsamplings
// use Go's conversion.
func LibjpegRGB(y *image.YCbCr) image.Image {
	w, h := y.Rect.Dx(), y.Rect.Dy()
	var cb, cr []uint8 // full-resolution chroma
	switch y.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
		cb, cr = plane(y.Cb, y.CStride, w, h), plane(y.Cr, y.CStride, w, h)
	case image.YCbCrSubsampleRatio420:
		cw, ch := (w+1)/2, (h+1)/2
		cb = fancyUpsample(plane(y.Cb, y.CStride, cw, ch), cw, ch, w, h, true)
		cr = fancyUpsample(plane(y.Cr, y.CStride, cw, ch), cw, ch, w, h, true)
	case image.YCbCrSubsampleRatio422:
		cw := (w + 1) / 2
		cb = fancyUpsample(plane(y.Cb, y.CStride, cw, h), cw, h, w, h, false)
		cr = fancyUpsample(plane(y.Cr, y.CStride, cw, h), cw, h, w, h, false)
	default:
		return y
	}
	const scale = 16
	fix := func(v float64) int32 { return int32(v*(1<<scale) + 0.5) }
	half := int32(1) << (scale - 1)
	out := image.NewNRGBA(image.Rect(0, 0, w, h))
	for row := range h {
		for col := range w {
			lum := int32(y.Y[row*y.YStride+col])
			b, r := int32(cb[row*w+col])-128, int32(cr[row*w+col])-128
			px := out.Pix[4*(row*w+col):]
			px[0] = clampByte(lum + (fix(1.40200)*r+half)>>scale)
			px[1] = clampByte(lum + (-fix(0.34414)*b+half-fix(0.71414)*r)>>scale)
			px[2] = clampByte(lum + (fix(1.77200)*b+half)>>scale)
			px[3] = 255
		}
	}
	return out
}

// plane copies a w x h plane out of strided samples.
func plane(p []uint8, stride, w, h int) []uint8 {
	out := make([]uint8, w*h)
	for r := range h {
		copy(out[r*w:(r+1)*w], p[r*stride:r*stride+w])
	}
	return out
}

// fancyUpsample doubles a cw x ch chroma plane horizontally (and
// vertically when both) to w x h as libjpeg's h2v2/h2v1_fancy_upsample
// do: each output sample weighs its nearest input samples 3:1 in each
// direction, the edges replicated, rounding alternately up and down.
func fancyUpsample(in []uint8, cw, ch, w, h int, vertical bool) []uint8 {
	out := make([]uint8, w*h)
	sum := make([]int, cw)
	for row := range h {
		src := row
		if vertical {
			src = row / 2
		}
		for c := range cw {
			v := int(in[src*cw+c])
			if !vertical {
				sum[c] = v
				continue
			}
			other := src - 1 // the farther row: above for even output rows, else below
			if row%2 == 1 {
				other = src + 1
			}
			other = min(max(other, 0), ch-1)
			sum[c] = 3*v + int(in[other*cw+c])
		}
		one, bias := 1, [2]int{1, 2}
		if vertical { // sums are 4x the samples: 3*this + last, over 16
			one, bias = 4, [2]int{8, 7}
		}
		for c := range cw {
			last, next := sum[max(c-1, 0)], sum[min(c+1, cw-1)]
			if c == 0 {
				last = sum[0]
			}
			if c == cw-1 {
				next = sum[c]
			}
			o := row*w + 2*c
			out[o] = uint8((3*sum[c] + last + bias[0]) / (4 * one))
			if 2*c+1 < w {
				out[o+1] = uint8((3*sum[c] + next + bias[1]) / (4 * one))
			}
		}
	}
	return out
}

func clampByte(v int32) uint8 {
	return uint8(min(max(v, 0), 255))
}
