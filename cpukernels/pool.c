/*
 * pool.c: the xserve CPU max- and average-pooling kernels, XLA FFI custom
 * calls ("xserve_maxpool_f32", "xserve_avgpool_f32") computed by oneDNN.
 *
 * XLA CPU splits a max pooling (reduce_window) into parallel tasks on its
 * thread pool even when it is a few microseconds of work: on the zoo's
 * resnet18 at batch 1 that is most of the 7 futex calls per execution, and
 * the pool's threads then compete with oneDNN's for the cores. oneDNN's
 * pooling reads and writes the channels-last tensors the convolution
 * kernel produces and runs on the calling thread (or on every core, when
 * large).
 *
 * Operand, with the physical layout the custom call's operand_layouts ask
 * XLA for:
 *   x [N, C, S1..Sk]        channels last: [N, S1..Sk, C] in memory
 * Result:
 *   y [N, C, T1..Tk]        channels last
 * Attributes: window, stride, pad_lo, pad_hi, dilation (k each; dilation 1
 * = none). Padding never wins: the window's maximum is over its elements
 * inside x. A window with NaN gives NaN (as PyTorch and XLA's own max do).
 *
 * The average pooling takes the same operand, result and attributes, and
 * exclude_pad: 1 divides each window's sum by the number of its elements
 * inside x (ONNX count_include_pad 0), 0 by the window's size (the lowering
 * passes it only where no window reaches past the padding). XLA CPU's
 * reduce_window sum and divide ran googlenet's 3x3 stride-1 pooling at 4-5x
 * ONNX Runtime's time (docs/BENCHMARKS.md, "Per-op kernels").
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

#define MAX_SPATIAL 3

typedef struct pool_key {
	int64_t rank; /* 3..5 */
	int64_t x[2 + MAX_SPATIAL];
	int64_t y[2 + MAX_SPATIAL];
	int64_t window[MAX_SPATIAL], stride[MAX_SPATIAL], pad_lo[MAX_SPATIAL], pad_hi[MAX_SPATIAL],
	    dilation[MAX_SPATIAL];
	int64_t avg, exclude_pad; /* the average pooling; dividing by the elements inside x */
} pool_key;

_Static_assert(sizeof(pool_key) <= KEY_BYTES, "pool_key exceeds KEY_BYTES");

static kernel_cache cache = {.kernel = KERNEL_MAXPOOL, .mu = PTHREAD_MUTEX_INITIALIZER};
static kernel_cache avg_cache = {.kernel = KERNEL_AVGPOOL, .mu = PTHREAD_MUTEX_INITIALIZER};

/* build makes the pooling of e->key. */
static dnnl_status_t build(kernel_entry *e, const void *ctx) {
	(void)ctx;
	const pool_key *k = (const pool_key *)e->key;
	dnnl_status_t st = channels_last_md(&e->md[MEM_SRC], k->rank, k->x);
	if (st == dnnl_success) st = channels_last_md(&e->md[MEM_DST], k->rank, k->y);
	if (st != dnnl_success) return st;
	dnnl_engine_t eng;
	st = kernel_engine(&eng);
	int64_t sp = k->rank - 2;
	window_dims wd;
	make_window_dims(&wd, sp, k->stride, k->dilation, k->pad_lo, k->pad_hi);
	dnnl_dims_t window;
	for (int64_t j = 0; j < sp; j++) {
		window[j] = k->window[j];
	}
	dnnl_primitive_attr_t attr = NULL;
	dnnl_primitive_desc_t pd = NULL;
	if (st == dnnl_success) st = scratchpad_attr(&attr, NULL);
	if (st == dnnl_success) {
		dnnl_alg_kind_t alg = !k->avg ? dnnl_pooling_max
		    : k->exclude_pad ? dnnl_pooling_avg_exclude_padding : dnnl_pooling_avg_include_padding;
		st = dnnl_pooling_forward_primitive_desc_create(&pd, eng, dnnl_forward_inference, alg,
		    e->md[MEM_SRC], e->md[MEM_DST], wd.stride, window, wd.dil, wd.lo, wd.hi, attr);
	}
	if (attr) dnnl_primitive_attr_destroy(attr);
	if (st != dnnl_success) return st;
	if (kernel_verbose()) {
		fprintf(stderr, "%s: x [%lld, %lld, %lld, ...] window [%lld, ...]: %s, %d thread(s)\n",
		    k->avg ? KERNEL_AVGPOOL : KERNEL_MAXPOOL, (long long)k->x[0], (long long)k->x[1], (long long)k->x[2], (long long)k->window[0], impl_name(pd),
		    e->threads);
	}
	return finish_entry(e, pd);
}

/* nan_windows sets to NaN each result whose window holds a NaN of x (oneDNN's
 * max drops NaN). Only called when x has one. */
static void nan_windows(const pool_key *k, const float *x, float *y) {
	int64_t sp = k->rank - 2, c = k->x[1];
	int64_t yn = 1, xs[MAX_SPATIAL], ys[MAX_SPATIAL];
	for (int64_t j = 0; j < sp; j++) {
		yn *= k->y[2 + j];
	}
	/* strides in elements of the channels-last layouts, per spatial dim */
	int64_t sx = c, sy = c;
	for (int64_t j = sp - 1; j >= 0; j--) {
		xs[j] = sx;
		ys[j] = sy;
		sx *= k->x[2 + j];
		sy *= k->y[2 + j];
	}
	for (int64_t n = 0; n < k->x[0]; n++) {
		const float *xn = x + n * sx;
		float *yb = y + n * sy;
		for (int64_t o = 0; o < yn; o++) {
			int64_t pos[MAX_SPATIAL], rem = o, yoff = 0;
			for (int64_t j = sp - 1; j >= 0; j--) {
				pos[j] = rem % k->y[2 + j];
				rem /= k->y[2 + j];
				yoff += pos[j] * ys[j];
			}
			int64_t taps = 1;
			for (int64_t j = 0; j < sp; j++) {
				taps *= k->window[j];
			}
			for (int64_t t = 0; t < taps; t++) {
				int64_t trem = t, xoff = 0, inside = 1;
				for (int64_t j = sp - 1; j >= 0; j--) {
					int64_t tap = trem % k->window[j];
					trem /= k->window[j];
					int64_t i = pos[j] * k->stride[j] - k->pad_lo[j] + tap * k->dilation[j];
					if (i < 0 || i >= k->x[2 + j]) inside = 0;
					xoff += i * xs[j];
				}
				if (!inside) continue;
				for (int64_t ch = 0; ch < c; ch++) {
					if (isnan(xn[xoff + ch])) yb[yoff + ch] = NAN;
				}
			}
		}
	}
}

/* pool_matches reports whether x and y have the shapes of key k. */
static int pool_matches(const pool_key *k, const XLA_FFI_Buffer *x, const XLA_FFI_Buffer *y) {
	if (x->rank != k->rank || y->rank != k->rank) return 0;
	for (int64_t i = 0; i < k->rank; i++) {
		if (x->dims[i] != k->x[i] || y->dims[i] != k->y[i]) return 0;
	}
	return 1;
}

/* pool_run runs entry e (of key k) and marks the windows holding NaN. */
static XLA_FFI_Error *pool_run(XLA_FFI_CallFrame *f, kernel_cache *c, kernel_entry *e, const pool_key *k,
    XLA_FFI_Buffer *x, XLA_FFI_Buffer *y) {
	XLA_FFI_Error *err = run_entry(f, c, e, x->data, NULL, y->data, NULL, NULL);
	if (err == NULL && !k->avg) {
		int64_t n = 1;
		for (int64_t i = 0; i < k->rank; i++) {
			n *= k->x[i];
		}
		if (has_nan(x->data, n)) nan_windows(k, x->data, y->data);
	}
	return err;
}

static XLA_FFI_Error *pool_execute(XLA_FFI_CallFrame *f, kernel_cache *c) {
	const char *name = c->kernel;
	int64_t avg = c == &avg_cache;
	if (f->args.size != 1 || f->rets.size != 1 || f->args.types[0] != XLA_FFI_ArgType_BUFFER ||
	    f->rets.types[0] != XLA_FFI_RetType_BUFFER) {
		return fail(f, name, 3, "want 1 operand and 1 result, buffers; got %lld and %lld", (long long)f->args.size,
		    (long long)f->rets.size);
	}
	XLA_FFI_Buffer *x = f->args.args[0], *y = f->rets.rets[0];
	if (x->dtype != XLA_FFI_DataType_F32 || y->dtype != XLA_FFI_DataType_F32) {
		return fail(f, name, 3, "operand and result must be float32");
	}
	int64_t site = call_site(f);
	kernel_entry *e = site_entry(c, site);
	if (e != NULL && pool_matches((const pool_key *)e->key, x, y)) {
		return pool_run(f, c, e, (const pool_key *)e->key, x, y);
	}
	int64_t rank = x->rank;
	if (rank < 3 || rank > 2 + MAX_SPATIAL || y->rank != rank) {
		return fail(f, name, 3, "ranks x %lld, y %lld: want 3 to 5, equal", (long long)rank, (long long)y->rank);
	}
	unsigned char keybuf[KEY_BYTES];
	memset(keybuf, 0, sizeof keybuf);
	pool_key *k = (pool_key *)keybuf;
	k->rank = rank;
	int64_t sp = rank - 2;
	for (int64_t i = 0; i < rank; i++) {
		k->x[i] = x->dims[i];
		k->y[i] = y->dims[i];
	}
	if (attr_ints(f, "window", k->window, sp) || attr_ints(f, "stride", k->stride, sp) ||
	    attr_ints(f, "pad_lo", k->pad_lo, sp) || attr_ints(f, "pad_hi", k->pad_hi, sp) ||
	    attr_ints(f, "dilation", k->dilation, sp)) {
		return fail(f, name, 3, "missing or malformed attribute (window, stride, pad_lo, pad_hi, dilation: %lld ints)",
		    (long long)sp);
	}
	k->avg = avg;
	if (avg && attr_int(f, "exclude_pad", &k->exclude_pad)) {
		return fail(f, name, 3, "missing or malformed attribute exclude_pad (int)");
	}
	if (k->y[0] != k->x[0] || k->y[1] != k->x[1]) {
		return fail(f, name, 3, "result [%lld, %lld, ...] for operand [%lld, %lld, ...]: batch and channels must match",
		    (long long)k->y[0], (long long)k->y[1], (long long)k->x[0], (long long)k->x[1]);
	}
	double work = 1;
	for (int64_t i = 0; i < rank; i++) {
		work *= (double)k->y[i];
	}
	for (int64_t j = 0; j < sp; j++) {
		/* Every window overlaps x: padding is under the dilated window. */
		if (k->window[j] < 1 || k->stride[j] < 1 || k->dilation[j] < 1 || k->pad_lo[j] < 0 || k->pad_hi[j] < 0 ||
		    k->pad_lo[j] >= (k->window[j] - 1) * k->dilation[j] + 1 ||
		    k->pad_hi[j] >= (k->window[j] - 1) * k->dilation[j] + 1) {
			return fail(f, name, 3, "spatial dim %lld: window %lld, stride %lld, dilation %lld, padding %lld/%lld",
			    (long long)j, (long long)k->window[j], (long long)k->stride[j], (long long)k->dilation[j],
			    (long long)k->pad_lo[j], (long long)k->pad_hi[j]);
		}
		int64_t ek = (k->window[j] - 1) * k->dilation[j] + 1;
		int64_t want = (k->x[2 + j] + k->pad_lo[j] + k->pad_hi[j] - ek) / k->stride[j] + 1;
		if (k->y[2 + j] != want) {
			return fail(f, name, 3, "spatial dim %lld: result size %lld, want %lld", (long long)j,
			    (long long)k->y[2 + j], (long long)want);
		}
		work *= (double)k->window[j];
	}
	XLA_FFI_Error *err =
	    kernel_run(f, c, keybuf, kernel_threads(work), build, NULL, site, x->data, NULL, y->data, NULL, NULL);
	if (err == NULL && !avg) {
		int64_t n = 1;
		for (int64_t i = 0; i < rank; i++) {
			n *= k->x[i];
		}
		if (has_nan(x->data, n)) nan_windows(k, x->data, y->data);
	}
	return err;
}

/* xserve_maxpool_f32 is the FFI handler XLA calls. */
XLA_FFI_Error *xserve_maxpool_f32(XLA_FFI_CallFrame *f) {
	if (metadata_call(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) {
		return NULL;
	}
	return pool_execute(f, &cache);
}

/* xserve_avgpool_f32 is the average pooling's FFI handler. */
XLA_FFI_Error *xserve_avgpool_f32(XLA_FFI_CallFrame *f) {
	if (metadata_call(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) {
		return NULL;
	}
	return pool_execute(f, &avg_cache);
}
