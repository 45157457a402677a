/*
 * matmul.c: the xserve CPU matrix-product kernel, an XLA FFI custom call
 * ("xserve_matmul_f32") computed by oneDNN.
 *
 * The lowering (lower.Options.Kernels) emits it for float32 dot_generals
 * that are (batched) matrix products: it reshapes the operands to
 *   a [B, M, K], or [B, K, M] with trans_a = 1
 *   b [B, K, N], or [B, N, K] with trans_b = 1
 *   bias [N]     optional (has_bias), added to every row
 *   r [B, M, N]  optional (residual), added to the result
 * (B may be left out: rank 2), all row-major, and the result is
 *   y [B, M, N]  with the activation applied (common.h: ACT_*).
 * Attributes: trans_a, trans_b, has_bias, residual, activation (int),
 * alpha (f32).
 */
#include <stdio.h>
#include <string.h>

#include "common.h"

typedef struct matmul_key {
	int64_t rank; /* 2 or 3 */
	int64_t batch, m, k, n;
	int64_t trans_a, trans_b, activation, bias, residual;
	float alpha;
} matmul_key;

_Static_assert(sizeof(matmul_key) <= KEY_BYTES, "matmul_key exceeds KEY_BYTES");

static kernel_cache cache = {.kernel = KERNEL_MATMUL, .mu = PTHREAD_MUTEX_INITIALIZER};

/* matrix_md describes a row-major [batch, rows, cols] operand (rank 3, or
 * [rows, cols] for rank 2) read as [batch, r, c] with r, c = rows, cols, or
 * transposed when trans. */
static dnnl_status_t matrix_md(dnnl_memory_desc_t *md, int64_t rank, int64_t batch, int64_t r, int64_t c, int trans) {
	/* stored [batch, r, c], or [batch, c, r] when transposed */
	int64_t rs = trans ? 1 : c, cs = trans ? r : 1;
	if (rank == 2) {
		dnnl_dims_t d = {r, c}, s = {rs, cs};
		return dnnl_memory_desc_create_with_strides(md, 2, d, dnnl_f32, s);
	}
	dnnl_dims_t d = {batch, r, c}, s = {r * c, rs, cs};
	return dnnl_memory_desc_create_with_strides(md, 3, d, dnnl_f32, s);
}

/* build makes the matrix product of e->key. */
static dnnl_status_t build(kernel_entry *e, const void *ctx) {
	(void)ctx;
	const matmul_key *k = (const matmul_key *)e->key;
	dnnl_engine_t eng;
	dnnl_status_t st = kernel_engine(&eng);
	if (st == dnnl_success) st = matrix_md(&e->md[MEM_SRC], k->rank, k->batch, k->m, k->k, (int)k->trans_a);
	if (st == dnnl_success) st = matrix_md(&e->md[MEM_WEI], k->rank, k->batch, k->k, k->n, (int)k->trans_b);
	if (st == dnnl_success) st = matrix_md(&e->md[MEM_DST], k->rank, k->batch, k->m, k->n, 0);
	if (st == dnnl_success && k->residual) st = matrix_md(&e->md[MEM_RES], k->rank, k->batch, k->m, k->n, 0);
	if (st == dnnl_success && k->bias) {
		/* [1, N] (or [1, 1, N]): broadcast over the rows and batches */
		dnnl_dims_t b2 = {1, k->n}, b3 = {1, 1, k->n};
		st = k->rank == 2 ? dnnl_memory_desc_create_with_tag(&e->md[MEM_BIAS], 2, b2, dnnl_f32, dnnl_ab)
		                  : dnnl_memory_desc_create_with_tag(&e->md[MEM_BIAS], 3, b3, dnnl_f32, dnnl_abc);
	}
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_primitive_desc_t pd = NULL;
	if (st == dnnl_success) st = epilogue_post_ops(e->md[MEM_RES], k->activation, k->alpha, &po);
	if (st == dnnl_success) st = scratchpad_attr(&attr, po);
	if (st == dnnl_success) {
		st = dnnl_matmul_primitive_desc_create(&pd, eng, e->md[MEM_SRC], e->md[MEM_WEI], e->md[MEM_BIAS],
		    e->md[MEM_DST], attr);
	}
	if (po) dnnl_post_ops_destroy(po);
	if (attr) dnnl_primitive_attr_destroy(attr);
	if (st != dnnl_success) return st;
	if (kernel_verbose()) {
		fprintf(stderr, "xserve_matmul_f32: [%lld] %lldx%lld%s @ %lldx%lld%s: %s, %d thread(s)\n", (long long)k->batch,
		    (long long)k->m, (long long)k->k, k->trans_a ? "^T" : "", (long long)k->k, (long long)k->n,
		    k->trans_b ? "^T" : "", impl_name(pd), e->threads);
	}
	return finish_entry(e, pd);
}

/* matmul_site_operands is the matrix product's site_operands. */
static int matmul_site_operands(XLA_FFI_CallFrame *f, const kernel_entry *e, kernel_operands *o) {
	const matmul_key *k = (const matmul_key *)e->key;
	if (!operands_as(f, k->bias, k->residual, o)) return 0;
	int64_t rank = k->rank, off = rank - 2;
	const XLA_FFI_Buffer *a = o->src, *b = o->wei, *y = o->dst;
	if (a->rank != rank || b->rank != rank || y->rank != rank) return 0;
	if ((k->trans_a ? a->dims[off + 1] : a->dims[off]) != k->m || (k->trans_a ? a->dims[off] : a->dims[off + 1]) != k->k ||
	    (k->trans_b ? b->dims[off + 1] : b->dims[off]) != k->k || (k->trans_b ? b->dims[off] : b->dims[off + 1]) != k->n ||
	    y->dims[off] != k->m || y->dims[off + 1] != k->n) {
		return 0;
	}
	if (rank == 3 && (a->dims[0] != k->batch || b->dims[0] != k->batch || y->dims[0] != k->batch)) return 0;
	if (o->bias && (o->bias->rank != 1 || o->bias->dims[0] != k->n)) return 0;
	if (o->res) {
		if (o->res->rank != rank) return 0;
		for (int64_t i = 0; i < rank; i++) {
			if (o->res->dims[i] != y->dims[i]) return 0;
		}
	}
	return 1;
}

static XLA_FFI_Error *matmul_execute(XLA_FFI_CallFrame *f) {
	const char *name = cache.kernel;
	int64_t site = call_site(f);
	int ran;
	XLA_FFI_Error *err = run_site(f, &cache, site, matmul_site_operands, &ran);
	if (ran) {
		return err;
	}
	kernel_operands o;
	err = read_operands(f, name, &o);
	if (err != NULL) {
		return err;
	}
	XLA_FFI_Buffer *a = o.src, *b = o.wei, *bias = o.bias, *r = o.res, *y = o.dst;
	int64_t rank = a->rank;
	if ((rank != 2 && rank != 3) || b->rank != rank || y->rank != rank || (bias && bias->rank != 1)) {
		return fail(f, name, 3, "ranks a %lld, b %lld, y %lld: want 2 or 3, equal", (long long)rank,
		    (long long)b->rank, (long long)y->rank);
	}
	unsigned char keybuf[KEY_BYTES];
	memset(keybuf, 0, sizeof keybuf);
	matmul_key *k = (matmul_key *)keybuf;
	if (attr_int(f, "trans_a", &k->trans_a) || attr_int(f, "trans_b", &k->trans_b) ||
	    attr_int(f, "activation", &k->activation) || attr_float(f, "alpha", &k->alpha)) {
		return fail(f, name, 3, "missing or malformed attribute (trans_a, trans_b, activation: int; alpha: f32)");
	}
	if (k->activation < ACT_NONE || k->activation > ACT_LAST) {
		return fail(f, name, 3, "activation %lld: want 0 (none) to %d", (long long)k->activation, ACT_LAST);
	}
	int64_t off = rank - 2;
	k->rank = rank;
	k->batch = rank == 3 ? a->dims[0] : 1;
	k->m = k->trans_a ? a->dims[off + 1] : a->dims[off];
	k->k = k->trans_a ? a->dims[off] : a->dims[off + 1];
	k->n = k->trans_b ? b->dims[off] : b->dims[off + 1];
	int64_t kb = k->trans_b ? b->dims[off + 1] : b->dims[off];
	k->bias = bias != NULL;
	k->residual = r != NULL;
	if (r != NULL && (r->rank != rank || r->dims[0] != y->dims[0] || r->dims[rank - 1] != y->dims[rank - 1] ||
	                     (rank == 3 && r->dims[1] != y->dims[1]))) {
		return fail(f, name, 3, "the residual's shape is not the result's");
	}
	if (kb != k->k || (rank == 3 && (b->dims[0] != k->batch || y->dims[0] != k->batch)) || y->dims[off] != k->m ||
	    y->dims[off + 1] != k->n || (bias && bias->dims[0] != k->n)) {
		return fail(f, name, 3, "inconsistent shapes: a [%lld, %lld], b [%lld, %lld], y [%lld, %lld] (trans_a %lld, trans_b %lld)",
		    (long long)a->dims[off], (long long)a->dims[off + 1], (long long)b->dims[off], (long long)b->dims[off + 1],
		    (long long)y->dims[off], (long long)y->dims[off + 1], (long long)k->trans_a, (long long)k->trans_b);
	}
	double macs = (double)k->batch * (double)k->m * (double)k->n * (double)k->k;
	return kernel_run(f, &cache, keybuf, kernel_threads(macs), build, NULL, site, a->data, b->data, y->data,
	    bias ? bias->data : NULL, r ? r->data : NULL);
}

/* xserve_matmul_f32 is the FFI handler XLA calls. */
XLA_FFI_Error *xserve_matmul_f32(XLA_FFI_CallFrame *f) {
	if (metadata_call(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) {
		return NULL;
	}
	return matmul_execute(f);
}
