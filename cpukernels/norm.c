/*
 * norm.c: the xserve CPU softmax and layer normalization kernels, XLA FFI
 * custom calls ("xserve_softmax_f32", "xserve_layernorm_f32") computed by
 * oneDNN.
 *
 * XLA CPU computes a softmax or a layer normalization over a row as
 * separate reductions and elementwise passes over the tensor, none of them
 * vectorized along the row as well as oneDNN's single-pass kernels: on
 * BERT-base's shapes (softmax [12, 128, 128], layer norm [128, 768]) they
 * ran 3-8x ONNX Runtime's time (docs/BENCHMARKS.md, "Per-op kernels").
 *
 * Both take a row-major [M, N] tensor (the lowering reshapes the op's
 * leading dims into M) and work along N:
 *   xserve_softmax_f32     x [M, N] -> y [M, N]; attribute log (0: softmax,
 *                          1: log-softmax)
 *   xserve_layernorm_f32   x [M, N], scale [N], shift [N] -> y [M, N];
 *                          attribute eps (f32): (x - mean) / sqrt(var + eps)
 *                          * scale + shift, mean and (biased) var over the
 *                          row
 * A row holding NaN gives NaN throughout, as XLA's and ONNX Runtime's
 * softmax do (oneDNN's gives 0 beside the NaN): the softmax marks those
 * rows after oneDNN ran, when the input has one.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

typedef struct norm_key {
	int64_t m, n;
	int64_t log; /* softmax only */
	float eps;   /* layer norm only */
} norm_key;

_Static_assert(sizeof(norm_key) <= KEY_BYTES, "norm_key exceeds KEY_BYTES");

static kernel_cache softmax_cache = {.kernel = KERNEL_SOFTMAX, .mu = PTHREAD_MUTEX_INITIALIZER};
static kernel_cache layernorm_cache = {.kernel = KERNEL_LAYERNORM, .mu = PTHREAD_MUTEX_INITIALIZER};

/* rows_md describes a row-major float32 [m, n] tensor. */
static dnnl_status_t rows_md(dnnl_memory_desc_t *md, int64_t m, int64_t n) {
	dnnl_dims_t d = {m, n};
	return dnnl_memory_desc_create_with_tag(md, 2, d, dnnl_f32, dnnl_ab);
}

/* build_softmax makes the softmax of e->key along its rows. */
static dnnl_status_t build_softmax(kernel_entry *e, const void *ctx) {
	(void)ctx;
	const norm_key *k = (const norm_key *)e->key;
	dnnl_engine_t eng;
	dnnl_status_t st = kernel_engine(&eng);
	if (st == dnnl_success) st = rows_md(&e->md[MEM_SRC], k->m, k->n);
	if (st == dnnl_success) st = rows_md(&e->md[MEM_DST], k->m, k->n);
	dnnl_primitive_attr_t attr = NULL;
	dnnl_primitive_desc_t pd = NULL;
	if (st == dnnl_success) st = scratchpad_attr(&attr, NULL);
	if (st == dnnl_success) {
		st = dnnl_softmax_forward_primitive_desc_create(&pd, eng, dnnl_forward_inference,
		    k->log ? dnnl_softmax_log : dnnl_softmax_accurate, e->md[MEM_SRC], e->md[MEM_DST], 1, attr);
	}
	if (attr) dnnl_primitive_attr_destroy(attr);
	if (st != dnnl_success) return st;
	if (kernel_verbose()) {
		fprintf(stderr, "%s: [%lld, %lld] log %lld: %s, %d thread(s)\n", KERNEL_SOFTMAX, (long long)k->m,
		    (long long)k->n, (long long)k->log, impl_name(pd), e->threads);
	}
	return finish_entry(e, pd);
}

/* build_layernorm makes the layer normalization of e->key along its rows,
 * scaled and shifted: the scale is the entry's weights operand and the shift
 * its bias, executed as oneDNN's scale and shift (kernel_entry.wei_arg). */
static dnnl_status_t build_layernorm(kernel_entry *e, const void *ctx) {
	(void)ctx;
	const norm_key *k = (const norm_key *)e->key;
	dnnl_engine_t eng;
	dnnl_status_t st = kernel_engine(&eng);
	dnnl_dims_t nd = {k->n}, md = {k->m};
	dnnl_memory_desc_t stat = NULL;
	if (st == dnnl_success) st = rows_md(&e->md[MEM_SRC], k->m, k->n);
	if (st == dnnl_success) st = rows_md(&e->md[MEM_DST], k->m, k->n);
	if (st == dnnl_success) st = dnnl_memory_desc_create_with_tag(&e->md[MEM_WEI], 1, nd, dnnl_f32, dnnl_a);
	if (st == dnnl_success) st = dnnl_memory_desc_create_with_tag(&e->md[MEM_BIAS], 1, nd, dnnl_f32, dnnl_a);
	if (st == dnnl_success) st = dnnl_memory_desc_create_with_tag(&stat, 1, md, dnnl_f32, dnnl_a);
	dnnl_primitive_attr_t attr = NULL;
	dnnl_primitive_desc_t pd = NULL;
	if (st == dnnl_success) st = scratchpad_attr(&attr, NULL);
	if (st == dnnl_success) {
		st = dnnl_layer_normalization_forward_primitive_desc_create(&pd, eng, dnnl_forward_inference,
		    e->md[MEM_SRC], e->md[MEM_DST], stat, k->eps, dnnl_use_scale | dnnl_use_shift, attr);
	}
	if (attr) dnnl_primitive_attr_destroy(attr);
	if (stat) dnnl_memory_desc_destroy(stat);
	if (st != dnnl_success) return st;
	e->wei_arg = DNNL_ARG_SCALE;
	e->bias_arg = DNNL_ARG_SHIFT;
	if (kernel_verbose()) {
		fprintf(stderr, "%s: [%lld, %lld] eps %g: %s, %d thread(s)\n", KERNEL_LAYERNORM, (long long)k->m,
		    (long long)k->n, (double)k->eps, impl_name(pd), e->threads);
	}
	return finish_entry(e, pd);
}

/* is_f32 reports whether b is a float32 buffer of the given rank and, where
 * dims is not NULL, those dims. */
static int is_f32(const XLA_FFI_Buffer *b, int64_t rank, const int64_t *dims) {
	if (b->dtype != XLA_FFI_DataType_F32 || b->rank != rank) return 0;
	for (int64_t i = 0; dims != NULL && i < rank; i++) {
		if (b->dims[i] != dims[i]) return 0;
	}
	return 1;
}

/* norm_buffers checks f's nargs operands and one result, all buffers, and
 * returns them in args and *y; NULL or the FFI error. */
static XLA_FFI_Error *norm_buffers(XLA_FFI_CallFrame *f, const char *name, int64_t nargs, XLA_FFI_Buffer **args,
    XLA_FFI_Buffer **y) {
	if (f->args.size != nargs || f->rets.size != 1 || f->rets.types[0] != XLA_FFI_RetType_BUFFER) {
		return fail(f, name, 3, "want %lld operands and 1 result, got %lld and %lld", (long long)nargs,
		    (long long)f->args.size, (long long)f->rets.size);
	}
	for (int64_t i = 0; i < nargs; i++) {
		if (f->args.types[i] != XLA_FFI_ArgType_BUFFER) return fail(f, name, 3, "operand %lld is not a buffer", (long long)i);
		args[i] = f->args.args[i];
	}
	*y = f->rets.rets[0];
	int64_t rows[2] = {args[0]->rank == 2 ? args[0]->dims[0] : 0, args[0]->rank == 2 ? args[0]->dims[1] : 0};
	if (!is_f32(args[0], 2, NULL) || !is_f32(*y, 2, rows)) {
		return fail(f, name, 3, "operand and result must be float32 [M, N] of the same dims");
	}
	for (int64_t i = 1; i < nargs; i++) {
		if (!is_f32(args[i], 1, &rows[1])) return fail(f, name, 3, "operand %lld must be float32 [%lld]", (long long)i, (long long)rows[1]);
	}
	return NULL;
}

/* nan_rows sets to NaN every row of y ([m, n]) whose row of x holds a NaN. */
static void nan_rows(const float *x, float *y, int64_t m, int64_t n) {
	for (int64_t r = 0; r < m; r++) {
		if (!has_nan(x + r * n, n)) continue;
		for (int64_t j = 0; j < n; j++) {
			y[r * n + j] = NAN;
		}
	}
}

/* softmax_nan gives NaN rows of x NaN results in y (see above). */
static XLA_FFI_Error *softmax_nan(XLA_FFI_Error *err, const XLA_FFI_Buffer *x, XLA_FFI_Buffer *y) {
	int64_t m = x->dims[0], n = x->dims[1];
	if (err == NULL && has_nan(x->data, m * n)) nan_rows(x->data, y->data, m, n);
	return err;
}

/* norm_run runs the call f of kernel c on x (and scale and shift, for the
 * layer norm) into y: the entry noted for f's site when it has x's dims,
 * else the one built for the key read from f's attributes. */
static XLA_FFI_Error *norm_run(XLA_FFI_CallFrame *f, kernel_cache *c, entry_builder build, XLA_FFI_Buffer **args,
    int64_t nargs, XLA_FFI_Buffer *y) {
	void *scale = nargs > 1 ? args[1]->data : NULL, *shift = nargs > 2 ? args[2]->data : NULL;
	int64_t site = call_site(f);
	kernel_entry *e = site_entry(c, site);
	if (e != NULL) {
		const norm_key *k = (const norm_key *)e->key;
		if (k->m == args[0]->dims[0] && k->n == args[0]->dims[1]) {
			return run_entry(f, c, e, args[0]->data, scale, y->data, shift, NULL);
		}
	}
	unsigned char keybuf[KEY_BYTES];
	memset(keybuf, 0, sizeof keybuf);
	norm_key *k = (norm_key *)keybuf;
	k->m = args[0]->dims[0];
	k->n = args[0]->dims[1];
	if (c == &softmax_cache ? attr_int(f, "log", &k->log) : attr_float(f, "eps", &k->eps)) {
		return fail(f, c->kernel, 3, "missing or malformed attribute %s", c == &softmax_cache ? "log (int)" : "eps (f32)");
	}
	if (k->m == 0 || k->n == 0) return NULL;
	/* about ten operations an element, in multiply-adds' terms */
	double work = 10.0 * (double)k->m * (double)k->n;
	return kernel_run(f, c, keybuf, kernel_threads(work), build, NULL, site, args[0]->data, scale, y->data, shift, NULL);
}

/* xserve_softmax_f32 is the softmax's FFI handler. */
XLA_FFI_Error *xserve_softmax_f32(XLA_FFI_CallFrame *f) {
	if (metadata_call(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) {
		return NULL;
	}
	XLA_FFI_Buffer *args[1], *y;
	XLA_FFI_Error *err = norm_buffers(f, KERNEL_SOFTMAX, 1, args, &y);
	return err != NULL ? err : softmax_nan(norm_run(f, &softmax_cache, build_softmax, args, 1, y), args[0], y);
}

/* xserve_layernorm_f32 is the layer normalization's FFI handler. */
XLA_FFI_Error *xserve_layernorm_f32(XLA_FFI_CallFrame *f) {
	if (metadata_call(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) {
		return NULL;
	}
	XLA_FFI_Buffer *args[3], *y;
	XLA_FFI_Error *err = norm_buffers(f, KERNEL_LAYERNORM, 3, args, &y);
	return err != NULL ? err : norm_run(f, &layernorm_cache, build_layernorm, args, 3, y);
}
