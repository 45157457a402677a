package fxgraph

import "math"

// Resampling of planar images for the image operators, written after
// torch's upsample kernels (aten/src/ATen/native/cpu/UpSampleKernel.cpp):
// half-pixel centers (align_corners=False), the width resampled first,
// then the height, values kept in float32.

// resizePlanar resizes im to h x w: bilinear (else nearest), antialiased
// when shrinking with antialias (torch's _upsample_bilinear2d_aa).
func resizePlanar(im *planar, h, w int, bilinear, antialias bool) *planar {
	weights := func(in, out int) []tap {
		switch {
		case !bilinear:
			return nearestTaps(in, out)
		case antialias:
			return aaTaps(in, out)
		}
		return linearTaps(in, out)
	}
	tmp := &planar{c: im.c, h: im.h, w: w, v: make([]float32, im.c*im.h*w)}
	wx := weights(im.w, w)
	for c := range im.c {
		for y := range im.h {
			src := im.v[(c*im.h+y)*im.w : (c*im.h+y+1)*im.w]
			dst := tmp.v[(c*im.h+y)*w : (c*im.h+y+1)*w]
			for x, t := range wx {
				dst[x] = t.apply(src, 1)
			}
		}
	}
	out := &planar{c: im.c, h: h, w: w, v: make([]float32, im.c*h*w)}
	wy := weights(im.h, h)
	for c := range im.c {
		plane := tmp.v[c*im.h*w : (c+1)*im.h*w]
		for y, t := range wy {
			dst := out.v[(c*h+y)*w : (c*h+y+1)*w]
			for x := range w {
				dst[x] = t.apply(plane[x:], w)
			}
		}
	}
	return out
}

// tap is one output sample's source samples: first and its weights.
type tap struct {
	first int
	w     []float32
}

// apply sums the weighted samples of src, stride apart.
func (t tap) apply(src []float32, stride int) float32 {
	var s float32
	for j, w := range t.w {
		s += src[(t.first+j)*stride] * w
	}
	return s
}

// linearTaps are bilinear interpolation's taps (torch's
// area_pixel_compute_source_index: negative sources clamp to 0).
func linearTaps(in, out int) []tap {
	scale := float32(in) / float32(out)
	taps := make([]tap, out)
	for i := range taps {
		src := max(scale*(float32(i)+0.5)-0.5, 0)
		x0 := int(src)
		l1 := src - float32(x0)
		if x0 >= in-1 {
			taps[i] = tap{first: in - 1, w: []float32{1}}
			continue
		}
		taps[i] = tap{first: x0, w: []float32{1 - l1, l1}}
	}
	return taps
}

// nearestTaps are nearest-neighbour taps (torch's nearest: floor(i*scale)).
func nearestTaps(in, out int) []tap {
	scale := float32(in) / float32(out)
	taps := make([]tap, out)
	for i := range taps {
		taps[i] = tap{first: min(int(float32(i)*scale), in-1), w: []float32{1}}
	}
	return taps
}

// aaTaps are antialiased bilinear taps: the triangle filter widened by the
// scale when shrinking (torch's HelperInterpLinear with antialias, PIL's
// bilinear filter).
func aaTaps(in, out int) []tap {
	scale := float64(in) / float64(out)
	support, invscale := 1.0, 1.0
	if scale >= 1 {
		support, invscale = scale, 1/scale
	}
	taps := make([]tap, out)
	for i := range taps {
		center := scale * (float64(i) + 0.5)
		xmin := max(int(center-support+0.5), 0)
		xsize := min(int(center+support+0.5), in) - xmin
		ws := make([]float64, max(xsize, 0))
		var total float64
		for j := range ws {
			ws[j] = triangle((float64(j+xmin) - center + 0.5) * invscale)
			total += ws[j]
		}
		t := tap{first: xmin, w: make([]float32, len(ws))}
		for j, w := range ws {
			if total != 0 {
				w /= total
			}
			t.w[j] = float32(w)
		}
		taps[i] = t
	}
	return taps
}

func triangle(x float64) float64 {
	x = math.Abs(x)
	if x < 1 {
		return 1 - x
	}
	return 0
}
