/*
 * conv.c: the xserve CPU convolution kernel, an XLA FFI custom call
 * ("xserve_conv_f32") computed by oneDNN.
 *
 * XLA CPU runs convolutions as Eigen spatial convolutions, which reach 5-20%
 * of this machine's peak on CNN layers (docs/BENCHMARKS.md); oneDNN's
 * convolutions reach most of it. The lowering (lower.Options.Kernels) emits
 * this custom call for float32 convolutions when the PJRT client has loaded
 * this library (pjrt.Client.Kernels).
 *
 * Operands, with the physical layouts the custom call's operand_layouts ask
 * XLA for:
 *   x [N, C, S1..Sk]        channels last: [N, S1..Sk, C] in memory
 *   w [K1..Kk, C/G, O]      row-major (XLA's HWIO). The weights are logically
 *                           in this order, not [O, C/G, K...] with an HWIO
 *                           layout: XLA (jaxlib 0.11) copies a transposed
 *                           parameter into such a layout on every call even
 *                           where the copy is a bitcast, while a weight
 *                           uploaded HWIO (lower.Options.ConvWeightsHWIO)
 *                           now reaches the kernel with no op in between.
 *   b [O]                   optional (has_bias)
 *   r [N, O, T1..Tk]        optional (residual), channels last: added to the
 *                           result before the activation
 * Result:
 *   y [N, O, T1..Tk]        channels last
 * Attributes: stride, pad_lo, pad_hi, dilation (k each; dilation 1 = none),
 * groups, has_bias, residual, activation (applied to the result by the kernel: 0 none, 1 relu,
 * 2 relu6, 3 sigmoid, 4 SiLU, 5 hardswish, 6 tanh, 7 GELU, 8 GELU's tanh
 * approximation, 9 leaky relu with slope alpha), alpha (f32).
 *
 * Primitives are made once per distinct convolution (shapes and attributes)
 * and kept in a bounded table (cache.c, kernel_run).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define MAX_SPATIAL 3

typedef struct conv_key {
	int64_t rank; /* 3..5 */
	int64_t x[2 + MAX_SPATIAL];
	int64_t w[2 + MAX_SPATIAL];
	int64_t y[2 + MAX_SPATIAL];
	int64_t stride[MAX_SPATIAL], pad_lo[MAX_SPATIAL], pad_hi[MAX_SPATIAL], dilation[MAX_SPATIAL];
	int64_t groups, activation, bias, residual;
	float alpha; /* of the activation (leaky relu's slope) */
	int32_t bands; /* > 1: run as this many bands of output rows (common.h) */
} conv_key;

_Static_assert(sizeof(conv_key) <= KEY_BYTES, "conv_key exceeds KEY_BYTES");

static kernel_cache cache = {.kernel = KERNEL_CONV, .mu = PTHREAD_MUTEX_INITIALIZER};

/* weights_md describes k's weights (hwio_weights_md). */
static dnnl_status_t weights_md(dnnl_memory_desc_t *md, const conv_key *k, int any) {
	return hwio_weights_md(md, k->rank, k->w, k->groups, dnnl_f32, any);
}

/* create_pd makes the convolution's primitive descriptor with weights w_md. */
static dnnl_status_t create_pd(dnnl_primitive_desc_t *pd, const kernel_entry *e, const conv_key *k,
    const_dnnl_memory_desc_t w_md) {
	dnnl_engine_t eng;
	dnnl_status_t st = kernel_engine(&eng);
	window_dims wd;
	make_window_dims(&wd, k->rank - 2, k->stride, k->dilation, k->pad_lo, k->pad_hi);
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_attr_t attr = NULL;
	if (st == dnnl_success) st = epilogue_post_ops(e->md[MEM_RES], k->activation, k->alpha, &po);
	if (st == dnnl_success) st = scratchpad_attr(&attr, po);
	if (st == dnnl_success) {
		st = dnnl_convolution_forward_primitive_desc_create(pd, eng, dnnl_forward_inference, dnnl_convolution_direct,
		    e->md[MEM_SRC], w_md, e->md[MEM_BIAS], e->md[MEM_DST], wd.stride, wd.dil, wd.lo, wd.hi, attr);
	}
	if (po) dnnl_post_ops_destroy(po);
	if (attr) dnnl_primitive_attr_destroy(attr);
	return st;
}

/* band_key makes b the convolution computing k's output rows [o0, o1)
 * (first spatial dim) of image 0 on the input rows they read, with the
 * padding they need, and sets the bands' offsets into x and y; 0 when those
 * rows read no input row. b must be KEY_BYTES, zeroed. */
static int band_key(conv_key *b, kernel_band *band, const conv_key *k, int64_t o0, int64_t o1) {
	*b = *k;
	b->bands = 1;
	int64_t lo = o0 * k->stride[0] - k->pad_lo[0];
	int64_t hi = (o1 - 1) * k->stride[0] - k->pad_lo[0] + (k->w[2] - 1) * k->dilation[0] + 1;
	int64_t in_lo = lo < 0 ? 0 : lo, in_hi = hi > k->x[2] ? k->x[2] : hi;
	if (in_hi <= in_lo) return 0;
	b->x[2] = in_hi - in_lo;
	b->y[2] = o1 - o0;
	b->pad_lo[0] = in_lo - lo;
	b->pad_hi[0] = hi - in_hi;
	size_t x_row = (size_t)k->x[1], y_row = (size_t)k->y[1];
	for (int64_t i = 3; i < k->rank; i++) {
		x_row *= (size_t)k->x[i];
		y_row *= (size_t)k->y[i];
	}
	band->src_off = (size_t)in_lo * x_row * sizeof(float);
	band->dst_off = (size_t)o0 * y_row * sizeof(float);
	return 1;
}

static dnnl_status_t build(kernel_entry *e, const void *ctx);

/* build_bands gives e (a convolution of k->bands bands) its bands, output
 * rows shared out evenly; e runs whole when one cannot be made. */
static void build_bands(kernel_entry *e, const conv_key *k) {
	int n = k->bands;
	e->bands = calloc((size_t)n, sizeof *e->bands);
	if (e->bands == NULL) return;
	e->nbands = n;
	int64_t rows = k->y[2];
	for (int i = 0; i < n; i++) {
		kernel_band *band = &e->bands[i];
		conv_key *b = (conv_key *)band->e.key;
		if (!band_key(b, band, k, rows * i / n, rows * (i + 1) / n)) {
			bands_destroy(e);
			return;
		}
		band->e.threads = 1;
		use_threads(1);
		if (build(&band->e, NULL) != dnnl_success) {
			bands_destroy(e);
			return;
		}
		band->e.used = 1;
	}
	if (kernel_verbose()) {
		fprintf(stderr, "xserve_conv_f32: x [%lld, %lld, %lld, ...] w [%lld, %lld, %lld, ...] groups %lld: %d bands of output rows\n",
		    (long long)k->x[0], (long long)k->x[1], (long long)k->x[2], (long long)k->w[0], (long long)k->w[1],
		    (long long)k->w[2], (long long)k->groups, n);
	}
}

/* onednn_weights_if_faster returns pd (a non-reference convolution that
 * reads the weights in XLA's layout), or, where oneDNN has a different
 * kernel for weights in a layout of its own, that one instead if it runs
 * faster, its reorder of the weights included (weights_policy); *chose
 * then says what was timed, for the verbose line. */
static dnnl_primitive_desc_t onednn_weights_if_faster(kernel_entry *e, const conv_key *k, dnnl_primitive_desc_t pd,
    const char **chose) {
	static __thread char msg[320];
	dnnl_memory_desc_t any = NULL;
	dnnl_primitive_desc_t pd2 = NULL;
	dnnl_status_t st = weights_md(&any, k, 1);
	if (st == dnnl_success) st = create_pd(&pd2, e, k, any);
	if (any) dnnl_memory_desc_destroy(any);
	if (st != dnnl_success || is_reference(pd2) || strcmp(impl_name(pd), impl_name(pd2)) == 0) {
		if (pd2) dnnl_primitive_desc_destroy(pd2);
		return pd;
	}
	if (weights_policy() == WEIGHTS_ONEDNN) {
		dnnl_primitive_desc_destroy(pd);
		*chose = ", weights in oneDNN's layout";
		return pd2;
	}
	char a[64], b[64];
	snprintf(a, sizeof a, "%s", impl_name(pd));
	snprintf(b, sizeof b, "%s", impl_name(pd2));
	double ns_a, ns_b;
	dnnl_primitive_desc_t best = faster_pd(e, pd, pd2, &ns_a, &ns_b);
	snprintf(msg, sizeof msg, ", weights in %s layout (timed: %s %.1f us, %s on oneDNN's layout %.1f us)",
	    best == pd2 ? "oneDNN's" : "XLA's", a, ns_a / 1e3, b, ns_b / 1e3);
	*chose = msg;
	return best;
}

/* build makes the convolution of e->key. */
static dnnl_status_t build(kernel_entry *e, const void *ctx) {
	(void)ctx;
	const conv_key *k = (const conv_key *)e->key;
	dnnl_status_t st = channels_last_md(&e->md[MEM_SRC], k->rank, k->x);
	if (st == dnnl_success) st = channels_last_md(&e->md[MEM_DST], k->rank, k->y);
	if (st == dnnl_success && k->residual) st = channels_last_md(&e->md[MEM_RES], k->rank, k->y);
	if (st == dnnl_success) st = weights_md(&e->md[MEM_WEI], k, 0);
	if (st == dnnl_success && k->bias) {
		dnnl_dims_t bd = {k->w[0]};
		st = dnnl_memory_desc_create_with_tag(&e->md[MEM_BIAS], 1, bd, dnnl_f32, dnnl_a);
	}
	if (st != dnnl_success) return st;
	/* Depthwise convolutions: oneDNN's depthwise kernels want blocked
	 * weights; the general kernel that reads XLA's layout is much slower.
	 * Other convolutions read XLA's layout unless only a reference
	 * implementation would: then oneDNN picks the layout and the weights
	 * are reordered on each call. */
	int depthwise = k->groups > 1 && k->w[0] == k->groups && k->w[1] == 1;
	dnnl_primitive_desc_t pd = NULL;
	st = depthwise ? dnnl_unimplemented : create_pd(&pd, e, k, e->md[MEM_WEI]);
	/* a kernel reads XLA's layout: the other layout is worth timing */
	int xla_layout = st == dnnl_success && !is_reference(pd);
	if (!xla_layout) {
		dnnl_memory_desc_t any = NULL;
		dnnl_primitive_desc_t pd2 = NULL;
		dnnl_status_t st2 = weights_md(&any, k, 1);
		if (st2 == dnnl_success) st2 = create_pd(&pd2, e, k, any);
		if (st2 == dnnl_success && (st != dnnl_success || !is_reference(pd2))) {
			if (pd) dnnl_primitive_desc_destroy(pd);
			pd = pd2;
			st = dnnl_success;
		} else if (pd2) {
			dnnl_primitive_desc_destroy(pd2);
		}
		if (any) dnnl_memory_desc_destroy(any);
	}
	if (st != dnnl_success) return st;
	const char *chose = "";
	if (xla_layout && weights_policy() != WEIGHTS_XLA) {
		pd = onednn_weights_if_faster(e, k, pd, &chose);
	}
	if (is_reference(pd)) {
		fprintf(stderr, "xserve_conv_f32: warning: oneDNN has only a reference (slow) kernel for x [%lld, %lld, %lld, ...] "
		    "w [%lld, %lld, %lld, ...] groups %lld\n", (long long)k->x[0], (long long)k->x[1], (long long)k->x[2],
		    (long long)k->w[0], (long long)k->w[1], (long long)k->w[2], (long long)k->groups);
	}
	if (kernel_verbose()) {
		fprintf(stderr, "xserve_conv_f32: x [%lld, %lld, %lld, ...] w [%lld, %lld, %lld, ...] groups %lld: %s, %d thread(s)%s\n",
		    (long long)k->x[0], (long long)k->x[1], (long long)k->x[2], (long long)k->w[0], (long long)k->w[1],
		    (long long)k->w[2], (long long)k->groups, impl_name(pd), e->threads, chose);
	}
	st = finish_entry(e, pd);
	if (st == dnnl_success && k->bands > 1) build_bands(e, k);
	return st;
}

/* conv_site_operands is conv's site_operands. */
static int conv_site_operands(XLA_FFI_CallFrame *f, const kernel_entry *e, kernel_operands *o) {
	const conv_key *k = (const conv_key *)e->key;
	if (!operands_as(f, k->bias, k->residual, o)) return 0;
	int64_t rank = k->rank, sp = rank - 2;
	const XLA_FFI_Buffer *x = o->src, *w = o->wei, *y = o->dst;
	if (x->rank != rank || w->rank != rank || y->rank != rank || w->dims[rank - 1] != k->w[0] ||
	    w->dims[rank - 2] != k->w[1]) {
		return 0;
	}
	for (int64_t i = 0; i < rank; i++) {
		if (x->dims[i] != k->x[i] || y->dims[i] != k->y[i] || (i < sp && w->dims[i] != k->w[2 + i])) return 0;
	}
	if (o->bias && (o->bias->rank != 1 || o->bias->dims[0] != k->w[0])) return 0;
	if (o->res) {
		if (o->res->rank != rank) return 0;
		for (int64_t i = 0; i < rank; i++) {
			if (o->res->dims[i] != k->y[i]) return 0;
		}
	}
	return 1;
}

static XLA_FFI_Error *conv_execute(XLA_FFI_CallFrame *f) {
	const char *name = cache.kernel;
	int64_t site = call_site(f);
	int ran;
	XLA_FFI_Error *err = run_site(f, &cache, site, conv_site_operands, &ran);
	if (ran) {
		return err;
	}
	kernel_operands o;
	err = read_operands(f, name, &o);
	if (err != NULL) {
		return err;
	}
	XLA_FFI_Buffer *x = o.src, *w = o.wei, *b = o.bias, *r = o.res, *y = o.dst;
	int64_t rank = x->rank;
	if (rank < 3 || rank > 2 + MAX_SPATIAL || w->rank != rank || y->rank != rank || (b && b->rank != 1)) {
		return fail(f, name, 3, "ranks x %lld, w %lld, y %lld: want 3 to 5, equal", (long long)rank,
		    (long long)w->rank, (long long)y->rank);
	}
	unsigned char keybuf[KEY_BYTES];
	memset(keybuf, 0, sizeof keybuf);
	conv_key *k = (conv_key *)keybuf;
	k->rank = rank;
	int64_t sp = rank - 2;
	/* The weight operand is [K..., C/G, O], row-major; k->w is [O, C/G, K...]. */
	k->w[0] = w->dims[rank - 1];
	k->w[1] = w->dims[rank - 2];
	for (int64_t i = 0; i < rank; i++) {
		k->x[i] = x->dims[i];
		k->y[i] = y->dims[i];
		if (i < sp) k->w[2 + i] = w->dims[i];
	}
	if (attr_ints(f, "stride", k->stride, sp) || attr_ints(f, "pad_lo", k->pad_lo, sp) ||
	    attr_ints(f, "pad_hi", k->pad_hi, sp) || attr_ints(f, "dilation", k->dilation, sp) ||
	    attr_int(f, "groups", &k->groups) || attr_int(f, "activation", &k->activation) ||
	    attr_float(f, "alpha", &k->alpha)) {
		return fail(f, name, 3, "missing or malformed attribute (stride, pad_lo, pad_hi, dilation: %lld ints; "
		    "groups, activation: int; alpha: f32)", (long long)sp);
	}
	if (k->activation < ACT_NONE || k->activation > ACT_LAST) {
		return fail(f, name, 3, "activation %lld: want 0 (none) to %d", (long long)k->activation, ACT_LAST);
	}
	k->bias = b != NULL;
	k->residual = r != NULL;
	if (r != NULL) {
		if (r->rank != rank) return fail(f, name, 3, "residual rank %lld, result rank %lld", (long long)r->rank, (long long)rank);
		for (int64_t i = 0; i < rank; i++) {
			if (r->dims[i] != k->y[i]) return fail(f, name, 3, "residual dim %lld is %lld, the result's %lld", (long long)i, (long long)r->dims[i], (long long)k->y[i]);
		}
	}
	if (k->groups < 1 || k->x[1] != k->w[1] * k->groups || k->w[0] % k->groups != 0 || k->y[1] != k->w[0] ||
	    k->y[0] != k->x[0] || (b && b->dims[0] != k->w[0])) {
		return fail(f, name, 3, "inconsistent shapes: x channels %lld, w [%lld, %lld, ...], groups %lld, y channels %lld",
		    (long long)k->x[1], (long long)k->w[0], (long long)k->w[1], (long long)k->groups, (long long)k->y[1]);
	}
	double macs = 1;
	for (int64_t i = 0; i < rank; i++) {
		macs *= (double)k->y[i];
	}
	for (int64_t i = 1; i < rank; i++) {
		macs *= (double)k->w[i];
	}
	for (int64_t j = 0; j < sp; j++) {
		if (k->stride[j] < 1 || k->dilation[j] < 1 || k->pad_lo[j] < 0 || k->pad_hi[j] < 0) {
			return fail(f, name, 3, "spatial dim %lld: stride %lld, dilation %lld, padding %lld/%lld", (long long)j,
			    (long long)k->stride[j], (long long)k->dilation[j], (long long)k->pad_lo[j], (long long)k->pad_hi[j]);
		}
		int64_t want =
		    (k->x[2 + j] + k->pad_lo[j] + k->pad_hi[j] - k->dilation[j] * (k->w[2 + j] - 1) - 1) / k->stride[j] + 1;
		if (k->y[2 + j] != want) {
			return fail(f, name, 3, "spatial dim %lld: result size %lld, want %lld", (long long)j,
			    (long long)k->y[2 + j], (long long)want);
		}
	}
	/* One image: bands of output rows on the calling thread and the band
	 * workers (common.h); else oneDNN's OpenMP threads for large calls. */
	int bands = k->x[0] == 1 ? kernel_bands(macs) : 1;
	if (bands > k->y[2]) bands = (int)k->y[2];
	k->bands = bands > 1 ? bands : 1;
	return kernel_run(f, &cache, keybuf, k->bands > 1 ? 1 : kernel_threads(macs), build, NULL, site, x->data, w->data,
	    y->data, b ? b->data : NULL, r ? r->data : NULL);
}

/* xserve_conv_f32 is the FFI handler XLA calls. */
XLA_FFI_Error *xserve_conv_f32(XLA_FFI_CallFrame *f) {
	if (metadata_call(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) {
		return NULL;
	}
	return conv_execute(f);
}
