/*
 * qconv.c: the xserve CPU int8 convolution, an XLA FFI custom call
 * ("xserve_qconv_i8") computed by oneDNN's int8 convolutions (VNNI where the
 * CPU has it).
 *
 * The lowering (lower/cpu qconv) emits it for fxgraph's
 * xserve.qlinear_conv: ONNX's QLinearConv and the DequantizeLinear -> Conv
 * -> QuantizeLinear groups of static QDQ models. Operands, with the layouts
 * the custom call asks XLA for (those of the float32 convolution, conv.c):
 *   x [N, C, S1..Sk]    uint8 or int8, channels last
 *   w [K1..Kk, C/G, O]  int8, row-major (zero point 0)
 *   s [O]               float32: the requantization scale of each output
 *                       channel (x_scale * w_scale[o] / y_scale)
 *   b [O]               int32, optional (has_bias): the bias, in the accumulation's
 *                       scale (the kernel passes oneDNN float32(b) * s)
 * Result:
 *   y [N, O, T1..Tk]    uint8 or int8, channels last
 * Attributes: stride, pad_lo, pad_hi, dilation (k each), groups, has_bias,
 * x_zero_point, y_zero_point.
 *
 * It computes y = saturate(round_half_even(acc * s[o] + b[o]) + y_zero_point)
 * with acc the int32 convolution of x - x_zero_point with w: oneDNN's
 * weights scale (per output channel) is s, its source and destination
 * scales are left at 1, and the zero points are oneDNN's. ONNX Runtime
 * computes round_half_even((acc + bias) * s) instead: the two float32
 * results differ in the last bit at most, so a value that falls that close
 * to a half rounds the other way: the result is ORT's or one step beside it.
 *
 * Weights are reordered into oneDNN's layout once per distinct weights
 * operand (its address, checked against a copy of its bytes on every
 * call) and kept with the primitive, in a bounded table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define QMAX_SPATIAL 3
#define QCACHE_SLOTS 1024
#define QTHREAD_SLOTS 256

typedef struct qconv_key {
	int64_t rank;
	int64_t x[2 + QMAX_SPATIAL], w[2 + QMAX_SPATIAL], y[2 + QMAX_SPATIAL];
	int64_t stride[QMAX_SPATIAL], pad_lo[QMAX_SPATIAL], pad_hi[QMAX_SPATIAL], dilation[QMAX_SPATIAL];
	int64_t groups, bias, x_zp, y_zp;
	int64_t x_signed, y_signed;
	const void *wei; /* the weights operand's address */
} qconv_key;

/* qentry is a primitive made for one key and the weights reordered for it. */
typedef struct qentry {
	int used;
	qconv_key key;
	dnnl_primitive_t prim;
	dnnl_memory_desc_t src_md, dst_md, wei_md, wk_md, bias_md, scale_md, zp_md, scratch_md;
	size_t wei_bytes, scratch_bytes;
	int threads;
	int32_t zp[2];   /* source and destination zero points */
	void *wei_copy;  /* the weights operand's bytes the reorder was made from */
	void *wei_k;     /* the weights in the primitive's layout */
	pthread_mutex_t mu;
} qentry;

static struct {
	const char *kernel;
	pthread_mutex_t mu;
	qentry slots[QCACHE_SLOTS];
} qcache = {.kernel = KERNEL_QCONV, .mu = PTHREAD_MUTEX_INITIALIZER};

#define kernel qcache.kernel

/* The 8-bit integer types' XLA_FFI_DataType numbers (XLA's PrimitiveType),
 * which xla_ffi.h leaves out. */
enum { QTYPE_S8 = 2, QTYPE_U8 = 6 };

/* qattr makes the primitive's attributes: a user scratchpad, weights scales
 * per output channel, common source and destination zero points. */
static dnnl_status_t qattr(dnnl_primitive_attr_t *attr, const qconv_key *k) {
	dnnl_status_t st = scratchpad_attr(attr, NULL);
	if (st != dnnl_success) return st;
	st = dnnl_primitive_attr_set_scales_mask(*attr, DNNL_ARG_WEIGHTS, k->groups > 1 ? 3 : 1);
	if (st == dnnl_success && k->x_zp != 0) st = dnnl_primitive_attr_set_zero_points_mask(*attr, DNNL_ARG_SRC, 0);
	if (st == dnnl_success && k->y_zp != 0) st = dnnl_primitive_attr_set_zero_points_mask(*attr, DNNL_ARG_DST, 0);
	return st;
}

/* qbuild makes e's primitive for e->key. */
static dnnl_status_t qbuild(qentry *e) {
	const qconv_key *k = &e->key;
	dnnl_engine_t eng;
	dnnl_status_t st = kernel_engine(&eng);
	window_dims wd;
	make_window_dims(&wd, k->rank - 2, k->stride, k->dilation, k->pad_lo, k->pad_hi);
	dnnl_memory_desc_t any = NULL;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_primitive_desc_t pd = NULL;
	if (st == dnnl_success) st = channels_last_md_of(&e->src_md, k->rank, k->x, k->x_signed ? dnnl_s8 : dnnl_u8);
	if (st == dnnl_success) st = channels_last_md_of(&e->dst_md, k->rank, k->y, k->y_signed ? dnnl_s8 : dnnl_u8);
	if (st == dnnl_success) st = hwio_weights_md(&e->wei_md, k->rank, k->w, k->groups, dnnl_s8, 0);
	if (st == dnnl_success) st = hwio_weights_md(&any, k->rank, k->w, k->groups, dnnl_s8, 1);
	dnnl_dims_t od = {k->w[0]}, one = {1};
	if (st == dnnl_success) st = dnnl_memory_desc_create_with_tag(&e->scale_md, 1, od, dnnl_f32, dnnl_a);
	if (st == dnnl_success) st = dnnl_memory_desc_create_with_tag(&e->zp_md, 1, one, dnnl_s32, dnnl_a);
	if (st == dnnl_success && k->bias) st = dnnl_memory_desc_create_with_tag(&e->bias_md, 1, od, dnnl_f32, dnnl_a);
	if (st == dnnl_success) st = qattr(&attr, k);
	use_threads(e->threads);
	if (st == dnnl_success) {
		st = dnnl_convolution_forward_primitive_desc_create(&pd, eng, dnnl_forward_inference, dnnl_convolution_direct,
		    e->src_md, any, e->bias_md, e->dst_md, wd.stride, wd.dil, wd.lo, wd.hi, attr);
	}
	if (any) dnnl_memory_desc_destroy(any);
	if (attr) dnnl_primitive_attr_destroy(attr);
	if (st != dnnl_success) return st;
	const_dnnl_memory_desc_t wk = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
	const_dnnl_memory_desc_t sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
	e->scratch_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
	if (e->scratch_bytes) st = dnnl_memory_desc_clone(&e->scratch_md, sp);
	if (st == dnnl_success) st = dnnl_memory_desc_clone(&e->wk_md, wk);
	if (st == dnnl_success) st = dnnl_primitive_create(&e->prim, pd);
	if (kernel_verbose()) {
		fprintf(stderr, "%s: x [%lld, %lld, %lld, ...] w [%lld, %lld, %lld, ...] groups %lld: %s, %d thread(s)\n", kernel,
		    (long long)k->x[0], (long long)k->x[1], (long long)k->x[2], (long long)k->w[0], (long long)k->w[1],
		    (long long)k->w[2], (long long)k->groups, impl_name(pd), e->threads);
	}
	dnnl_primitive_desc_destroy(pd);
	if (st != dnnl_success) return st;
	e->wei_bytes = dnnl_memory_desc_get_size(e->wei_md);
	size_t kb = dnnl_memory_desc_get_size(e->wk_md);
	e->wei_k = aligned_alloc(64, (kb + 63) & ~(size_t)63);
	e->wei_copy = malloc(e->wei_bytes);
	e->zp[0] = (int32_t)k->x_zp;
	e->zp[1] = (int32_t)k->y_zp;
	pthread_mutex_init(&e->mu, NULL);
	if (e->wei_k == NULL || e->wei_copy == NULL) return dnnl_out_of_memory;
	return dnnl_success;
}

/* qentry_destroy frees what qbuild made. */
static void qentry_destroy(qentry *e) {
	if (e->prim) dnnl_primitive_destroy(e->prim);
	dnnl_memory_desc_t *mds[] = {&e->src_md, &e->dst_md, &e->wei_md, &e->wk_md, &e->bias_md, &e->scale_md, &e->zp_md, &e->scratch_md};
	for (size_t i = 0; i < sizeof mds / sizeof mds[0]; i++) {
		if (*mds[i]) dnnl_memory_desc_destroy(*mds[i]);
	}
	free(e->wei_k);
	free(e->wei_copy);
	memset(e, 0, sizeof *e);
}

/* reorder_weights copies w into e's primitive layout (and its bytes into
 * e->wei_copy) unless e holds them already. */
static dnnl_status_t reorder_weights(qentry *e, const void *w, dnnl_stream_t stream) {
	pthread_mutex_lock(&e->mu);
	dnnl_status_t st = dnnl_success;
	if (e->used == 2 && memcmp(e->wei_copy, w, e->wei_bytes) == 0) {
		pthread_mutex_unlock(&e->mu);
		return st;
	}
	dnnl_engine_t eng;
	dnnl_primitive_desc_t rpd = NULL;
	dnnl_primitive_t r = NULL;
	dnnl_memory_t from = NULL, to = NULL;
	st = kernel_engine(&eng);
	if (st == dnnl_success) st = dnnl_reorder_primitive_desc_create(&rpd, e->wei_md, eng, e->wk_md, eng, NULL);
	if (st == dnnl_success) st = dnnl_primitive_create(&r, rpd);
	if (st == dnnl_success) st = dnnl_memory_create(&from, e->wei_md, eng, (void *)w);
	if (st == dnnl_success) st = dnnl_memory_create(&to, e->wk_md, eng, e->wei_k);
	if (st == dnnl_success) {
		dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
		st = dnnl_primitive_execute(r, stream, 2, a);
	}
	if (st == dnnl_success) st = dnnl_stream_wait(stream);
	if (st == dnnl_success) {
		memcpy(e->wei_copy, w, e->wei_bytes);
		e->used = 2;
	}
	if (from) dnnl_memory_destroy(from);
	if (to) dnnl_memory_destroy(to);
	if (r) dnnl_primitive_destroy(r);
	if (rpd) dnnl_primitive_desc_destroy(rpd);
	pthread_mutex_unlock(&e->mu);
	return st;
}

/* qmem is a thread's memory objects for one entry. */
typedef struct qmem {
	const qentry *e;
	dnnl_memory_t m[8];
} qmem;

enum { QM_SRC, QM_WEI, QM_DST, QM_BIAS, QM_SCALE, QM_ZP_SRC, QM_ZP_DST, QM_SCRATCH };

static __thread qmem thread_mems[QTHREAD_SLOTS];

/* thread_qmem returns the calling thread's memory objects for e (slot
 * index), made on first use. */
static dnnl_status_t thread_qmem(const qentry *e, int index, qmem **out) {
	qmem *q = &thread_mems[index % QTHREAD_SLOTS];
	*out = q;
	if (q->e == e) return dnnl_success;
	for (int i = 0; i < 8; i++) {
		if (q->m[i]) dnnl_memory_destroy(q->m[i]);
		q->m[i] = NULL;
	}
	q->e = NULL;
	dnnl_engine_t eng;
	dnnl_status_t st = kernel_engine(&eng);
	const_dnnl_memory_desc_t mds[8] = {e->src_md, e->wk_md, e->dst_md, e->bias_md, e->scale_md, e->zp_md, e->zp_md,
	    e->scratch_md};
	for (int i = 0; i < 8 && st == dnnl_success; i++) {
		if (mds[i]) st = dnnl_memory_create(&q->m[i], mds[i], eng, DNNL_MEMORY_NONE);
	}
	if (st == dnnl_success) q->e = e;
	return st;
}

/* qfind returns the entry of key k (made with threads), building it on
 * first use; *index is its slot. NULL when the table is full or the
 * build fails (*st says which). */
static qentry *qfind(const qconv_key *k, int threads, int *index, dnnl_status_t *st) {
	*st = dnnl_success;
	pthread_mutex_lock(&qcache.mu);
	uint64_t h = 1469598103934665603ull;
	const unsigned char *p = (const unsigned char *)k;
	for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
	qentry *found = NULL;
	for (int probe = 0; probe < QCACHE_SLOTS; probe++) {
		int i = (int)((h + (uint64_t)probe) % QCACHE_SLOTS);
		qentry *e = &qcache.slots[i];
		if (e->used && e->threads == threads && memcmp(&e->key, k, sizeof *k) == 0) {
			found = e;
			*index = i;
			break;
		}
		if (!e->used) {
			e->key = *k;
			e->threads = threads;
			*st = qbuild(e);
			if (*st != dnnl_success) {
				qentry_destroy(e);
				break;
			}
			e->used = 1;
			found = e;
			*index = i;
			break;
		}
	}
	pthread_mutex_unlock(&qcache.mu);
	return found;
}

/* qread reads f's operands and attributes into k and the buffers. */
static XLA_FFI_Error *qread(XLA_FFI_CallFrame *f, qconv_key *k, XLA_FFI_Buffer **bufs) {
	memset(k, 0, sizeof *k);
	if (attr_int(f, "has_bias", &k->bias) || attr_int(f, "groups", &k->groups) ||
	    attr_int(f, "x_zero_point", &k->x_zp) || attr_int(f, "y_zero_point", &k->y_zp)) {
		return fail(f, kernel, 3, "missing or malformed attribute (has_bias, groups, x_zero_point, y_zero_point: int)");
	}
	int64_t want = k->bias ? 4 : 3;
	if (f->args.size != want || f->rets.size != 1) {
		return fail(f, kernel, 3, "%lld operands and %lld results, want %lld and 1", (long long)f->args.size,
		    (long long)f->rets.size, (long long)want);
	}
	for (int64_t i = 0; i < want; i++) bufs[i] = (XLA_FFI_Buffer *)f->args.args[i];
	bufs[4] = (XLA_FFI_Buffer *)f->rets.rets[0];
	XLA_FFI_Buffer *x = bufs[0], *w = bufs[1], *s = bufs[2], *y = bufs[4];
	int64_t rank = x->rank, sp = rank - 2;
	if (rank < 3 || rank > 2 + QMAX_SPATIAL || w->rank != rank || y->rank != rank || s->rank != 1 ||
	    (x->dtype != QTYPE_U8 && x->dtype != QTYPE_S8) || w->dtype != QTYPE_S8 ||
	    (y->dtype != QTYPE_U8 && y->dtype != QTYPE_S8) || s->dtype != XLA_FFI_DataType_F32 ||
	    (k->bias && (bufs[3]->dtype != XLA_FFI_DataType_S32 || bufs[3]->rank != 1))) {
		return fail(f, kernel, 3, "operand types: want x u8/s8, w s8, scale f32 [O], bias s32 [O], y u8/s8 of rank 3 to 5");
	}
	if (attr_ints(f, "stride", k->stride, sp) || attr_ints(f, "pad_lo", k->pad_lo, sp) ||
	    attr_ints(f, "pad_hi", k->pad_hi, sp) || attr_ints(f, "dilation", k->dilation, sp)) {
		return fail(f, kernel, 3, "missing or malformed window attribute (stride, pad_lo, pad_hi, dilation: %lld ints)",
		    (long long)sp);
	}
	k->rank = rank;
	k->x_signed = x->dtype == QTYPE_S8;
	k->y_signed = y->dtype == QTYPE_S8;
	for (int64_t i = 0; i < rank; i++) {
		k->x[i] = x->dims[i];
		k->y[i] = y->dims[i];
	}
	/* w is [K..., C/G, O]: keep it as [O, C/G, K...] */
	k->w[0] = w->dims[rank - 1];
	k->w[1] = w->dims[rank - 2];
	for (int64_t j = 0; j < sp; j++) k->w[2 + j] = w->dims[j];
	if (k->groups < 1 || k->x[1] != k->w[1] * k->groups || k->w[0] % k->groups != 0 || k->y[1] != k->w[0] ||
	    k->y[0] != k->x[0] || s->dims[0] != k->w[0] || (k->bias && bufs[3]->dims[0] != k->w[0])) {
		return fail(f, kernel, 3, "inconsistent shapes: x channels %lld, w [O %lld, C/G %lld], groups %lld, y channels %lld",
		    (long long)k->x[1], (long long)k->w[0], (long long)k->w[1], (long long)k->groups, (long long)k->y[1]);
	}
	k->wei = w->data;
	return NULL;
}

static XLA_FFI_Error *qexec(XLA_FFI_CallFrame *f, qentry *e, int index, XLA_FFI_Buffer **bufs) {
	dnnl_stream_t stream;
	dnnl_status_t st = thread_stream(&stream);
	if (st == dnnl_success) st = reorder_weights(e, bufs[1]->data, stream);
	qmem *q = NULL;
	if (st == dnnl_success) st = thread_qmem(e, index, &q);
	char *scratch = NULL;
	if (st == dnnl_success && e->scratch_bytes) {
		scratch = thread_scratch(e->scratch_bytes);
		if (scratch == NULL) return fail(f, kernel, 8, "cannot allocate %zu bytes of scratch memory", e->scratch_bytes);
	}
	if (st != dnnl_success) return fail(f, kernel, 13, "oneDNN: status %d", (int)st);
	float *bias = NULL;
	if (bufs[3]) {
		/* the bias in the result's scale: scratch's tail, after the primitive's part */
		size_t off = (e->scratch_bytes + 63) & ~(size_t)63;
		scratch = thread_scratch(off + (size_t)e->key.w[0] * sizeof(float));
		if (scratch == NULL) return fail(f, kernel, 8, "cannot allocate scratch memory");
		bias = (float *)(scratch + off);
		const int32_t *b = (const int32_t *)bufs[3]->data;
		const float *s = (const float *)bufs[2]->data;
		for (int64_t o = 0; o < e->key.w[0]; o++) bias[o] = (float)b[o] * s[o];
	}
	void *data[8] = {bufs[0]->data, e->wei_k, bufs[4]->data, bias, bufs[2]->data,
	    (void *)&e->zp[0], (void *)&e->zp[1], scratch};
	for (int i = 0; i < 8 && st == dnnl_success; i++) {
		if (q->m[i]) st = dnnl_memory_set_data_handle(q->m[i], data[i]);
	}
	if (st == dnnl_success) {
		dnnl_exec_arg_t a[9];
		int n = 0;
		a[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, q->m[QM_SRC]};
		a[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, q->m[QM_WEI]};
		a[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, q->m[QM_DST]};
		a[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, q->m[QM_SCALE]};
		if (q->m[QM_BIAS]) a[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, q->m[QM_BIAS]};
		if (e->key.x_zp) a[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, q->m[QM_ZP_SRC]};
		if (e->key.y_zp) a[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, q->m[QM_ZP_DST]};
		if (q->m[QM_SCRATCH]) a[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, q->m[QM_SCRATCH]};
		use_threads(e->threads);
		st = dnnl_primitive_execute(e->prim, stream, n, a);
	}
	if (st == dnnl_success) st = dnnl_stream_wait(stream);
	if (st != dnnl_success) return fail(f, kernel, 13, "oneDNN execution failed: status %d", (int)st);
	return NULL;
}

/* xserve_qconv_i8 is the FFI handler XLA calls. */
XLA_FFI_Error *xserve_qconv_i8(XLA_FFI_CallFrame *f) {
	if (metadata_call(f) || f->stage != XLA_FFI_ExecutionStage_EXECUTE) {
		return NULL;
	}
	qconv_key k;
	XLA_FFI_Buffer *bufs[5] = {NULL};
	XLA_FFI_Error *err = qread(f, &k, bufs);
	if (err != NULL) return err;
	double macs = (double)k.y[0] * (double)k.w[0] * (double)k.w[1];
	for (int64_t i = 2; i < k.rank; i++) macs *= (double)k.y[i] * (double)k.w[i];
	int threads = kernel_threads(macs);
	int index = 0;
	dnnl_status_t st;
	qentry *e = qfind(&k, threads, &index, &st);
	if (e == NULL) {
		return fail(f, kernel, st == dnnl_success ? 8 : 13, "no primitive (table of %d full, or oneDNN status %d)",
		    QCACHE_SLOTS, (int)st);
	}
	return qexec(f, e, index, bufs);
}
