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
 * Operands, in logical (PyTorch) order, with the physical layouts the custom
 * call's operand_layouts ask XLA for:
 *   x [N, C, S1..Sk]        channels last: [N, S1..Sk, C] in memory
 *   w [O, C/G, K1..Kk]      [K1..Kk, C/G, O] in memory (XLA's HWIO)
 *   b [O]                   optional
 * Result:
 *   y [N, O, T1..Tk]        channels last
 * Attributes: stride, pad_lo, pad_hi, dilation (k each; dilation 1 = none),
 * groups, activation (applied to the result by the kernel: 0 none, 1 relu,
 * 2 relu6, 3 sigmoid, 4 SiLU, 5 hardswish, 6 tanh, 7 GELU, 8 GELU's tanh
 * approximation, 9 leaky relu with slope alpha), alpha (f32).
 *
 * oneDNN primitives are created once per distinct convolution (shapes and
 * attributes) and kept for the life of the process in a bounded table;
 * execution is thread-safe (per-thread streams and scratchpads).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oneapi/dnnl/dnnl.h"
#include "xla_ffi.h"

/* libgomp, which oneDNN's OpenMP build runs on. */
void omp_set_num_threads(int n);
int omp_get_num_procs(void);

/* Convolutions below this many multiply-adds run on the calling thread
 * alone: forking to a second thread costs more than it saves. */
#define PARALLEL_MIN_MACS (4L << 20)

#define MAX_SPATIAL 3

/* The activation attribute's values (lower/nn.go convAct*). */
enum {
	ACT_NONE = 0,
	ACT_RELU = 1,
	ACT_RELU6 = 2,
	ACT_SIGMOID = 3,
	ACT_SILU = 4,
	ACT_HARDSWISH = 5,
	ACT_TANH = 6,
	ACT_GELU = 7,
	ACT_GELU_TANH = 8,
	ACT_LEAKY_RELU = 9,
	ACT_LAST = ACT_LEAKY_RELU,
};

/* activation_post_op maps an activation to a oneDNN eltwise post-op. */
static int activation_post_op(int64_t act, float alpha_attr, dnnl_alg_kind_t *alg, float *alpha, float *beta) {
	*alpha = 0.f;
	*beta = 0.f;
	switch (act) {
	case ACT_RELU: *alg = dnnl_eltwise_relu; return 0;
	case ACT_RELU6: *alg = dnnl_eltwise_clip; *beta = 6.f; return 0;
	case ACT_SIGMOID: *alg = dnnl_eltwise_logistic; return 0;
	case ACT_SILU: *alg = dnnl_eltwise_swish; *alpha = 1.f; return 0;
	case ACT_HARDSWISH: *alg = dnnl_eltwise_hardswish; *alpha = 1.f / 6.f; *beta = 0.5f; return 0;
	case ACT_TANH: *alg = dnnl_eltwise_tanh; return 0;
	case ACT_GELU: *alg = dnnl_eltwise_gelu_erf; return 0;
	case ACT_GELU_TANH: *alg = dnnl_eltwise_gelu_tanh; return 0;
	case ACT_LEAKY_RELU: *alg = dnnl_eltwise_relu; *alpha = alpha_attr; return 0;
	}
	return -1;
}
#define CACHE_SLOTS 2048

typedef struct conv_key {
	int64_t rank; /* 3..5 */
	int64_t x[2 + MAX_SPATIAL];
	int64_t w[2 + MAX_SPATIAL];
	int64_t stride[MAX_SPATIAL], pad_lo[MAX_SPATIAL], pad_hi[MAX_SPATIAL], dilation[MAX_SPATIAL];
	int64_t groups, activation, bias;
	float alpha; /* of the activation (leaky relu's slope) */
} conv_key;

typedef struct conv_entry {
	int used;
	conv_key key;
	dnnl_primitive_t conv;
	dnnl_primitive_t weights_reorder; /* NULL when the kernel reads XLA's layout */
	dnnl_memory_desc_t x_md, w_md, w_kernel_md, b_md, y_md, s_md;
	size_t w_kernel_bytes, scratch_bytes;
	int threads; /* OpenMP threads the primitive was made for and runs on */
} conv_entry;

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static dnnl_status_t engine_status;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static conv_entry cache[CACHE_SLOTS];

/* Per-thread stream and scratch memory. */
static __thread dnnl_stream_t thread_stream;
static __thread void *thread_scratch;
static __thread size_t thread_scratch_bytes;

static void init_engine(void) { engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0); }

static XLA_FFI_Error *fail(XLA_FFI_CallFrame *f, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#include <stdarg.h>
static XLA_FFI_Error *fail(XLA_FFI_CallFrame *f, int code, const char *fmt, ...) {
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(msg, sizeof msg, "xserve_conv_f32: ");
	vsnprintf(msg + n, sizeof msg - n, fmt, ap);
	va_end(ap);
	XLA_FFI_Error_Create_Args a;
	memset(&a, 0, sizeof a);
	a.struct_size = sizeof a;
	a.message = msg;
	a.errc = code;
	return f->api->XLA_FFI_Error_Create(&a);
}

/* find_attr returns the attribute named name, or NULL. */
static void *find_attr(XLA_FFI_CallFrame *f, const char *name, int type) {
	size_t len = strlen(name);
	for (int64_t i = 0; i < f->attrs.size; i++) {
		XLA_FFI_ByteSpan *s = f->attrs.names[i];
		if (s->len == len && memcmp(s->ptr, name, len) == 0 && f->attrs.types[i] == type) {
			return f->attrs.attrs[i];
		}
	}
	return NULL;
}

static int attr_ints(XLA_FFI_CallFrame *f, const char *name, int64_t *out, int64_t n) {
	XLA_FFI_Array *a = find_attr(f, name, XLA_FFI_AttrType_ARRAY);
	if (a == NULL || (int64_t)a->size != n) {
		return -1;
	}
	for (int64_t i = 0; i < n; i++) {
		if (a->dtype == XLA_FFI_DataType_S64) {
			out[i] = ((int64_t *)a->data)[i];
		} else if (a->dtype == XLA_FFI_DataType_S32) {
			out[i] = ((int32_t *)a->data)[i];
		} else {
			return -1;
		}
	}
	return 0;
}

static int attr_float(XLA_FFI_CallFrame *f, const char *name, float *out) {
	XLA_FFI_Scalar *s = find_attr(f, name, XLA_FFI_AttrType_SCALAR);
	if (s == NULL || s->dtype != XLA_FFI_DataType_F32) {
		return -1;
	}
	*out = *(float *)s->value;
	return 0;
}

static int attr_int(XLA_FFI_CallFrame *f, const char *name, int64_t *out) {
	XLA_FFI_Scalar *s = find_attr(f, name, XLA_FFI_AttrType_SCALAR);
	if (s == NULL) {
		return -1;
	}
	if (s->dtype == XLA_FFI_DataType_S64) {
		*out = *(int64_t *)s->value;
	} else if (s->dtype == XLA_FFI_DataType_S32) {
		*out = *(int32_t *)s->value;
	} else {
		return -1;
	}
	return 0;
}

static uint64_t key_hash(const conv_key *k) {
	const unsigned char *p = (const unsigned char *)k;
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < sizeof *k; i++) {
		h = (h ^ p[i]) * 1099511628211ULL;
	}
	return h;
}

/* channels_last_md describes a logical [N, C, S...] tensor stored as
 * [N, S..., C]. */
static dnnl_status_t channels_last_md(dnnl_memory_desc_t *md, int64_t rank, const int64_t *dims) {
	dnnl_dims_t d, s;
	int64_t stride = dims[1];
	s[1] = 1;
	for (int64_t i = rank - 1; i >= 2; i--) {
		s[i] = stride;
		stride *= dims[i];
	}
	s[0] = stride;
	for (int64_t i = 0; i < rank; i++) {
		d[i] = dims[i];
	}
	return dnnl_memory_desc_create_with_strides(md, (int)rank, d, dnnl_f32, s);
}

/* weights_md describes the weights, logical [O, C/G, K...] stored as
 * [K..., C/G, O], in oneDNN's order: [O, C/G, K...] for one group,
 * [G, O/G, C/G, K...] for several. */
static dnnl_status_t weights_md(dnnl_memory_desc_t *md, const conv_key *k, int any) {
	int64_t rank = k->rank, g = k->groups, o = k->w[0], i = k->w[1];
	int64_t sp = rank - 2;
	dnnl_dims_t d, s;
	int n = 0;
	if (g > 1) {
		d[n] = g;
		s[n++] = o / g;
		d[n] = o / g;
		s[n++] = 1;
	} else {
		d[n] = o;
		s[n++] = 1;
	}
	d[n] = i;
	s[n++] = o;
	int64_t stride = i * o;
	for (int64_t j = sp - 1; j >= 0; j--) {
		d[n + j] = k->w[2 + j];
		s[n + j] = stride;
		stride *= k->w[2 + j];
	}
	n += (int)sp;
	if (any) {
		return dnnl_memory_desc_create_with_tag(md, n, d, dnnl_f32, dnnl_format_tag_any);
	}
	return dnnl_memory_desc_create_with_strides(md, n, d, dnnl_f32, s);
}

static void entry_destroy(conv_entry *e) {
	if (e->conv) dnnl_primitive_destroy(e->conv);
	if (e->weights_reorder) dnnl_primitive_destroy(e->weights_reorder);
	if (e->x_md) dnnl_memory_desc_destroy(e->x_md);
	if (e->w_md) dnnl_memory_desc_destroy(e->w_md);
	if (e->w_kernel_md && e->w_kernel_md != e->w_md) dnnl_memory_desc_destroy(e->w_kernel_md);
	if (e->b_md) dnnl_memory_desc_destroy(e->b_md);
	if (e->y_md) dnnl_memory_desc_destroy(e->y_md);
	if (e->s_md) dnnl_memory_desc_destroy(e->s_md);
	memset(e, 0, sizeof *e);
}

/* create_pd makes the convolution's primitive descriptor with the weights
 * in XLA's layout (any == 0) or in the layout oneDNN prefers (any == 1). */
static dnnl_status_t create_pd(dnnl_primitive_desc_t *pd, conv_entry *e, dnnl_memory_desc_t w_md) {
	const conv_key *k = &e->key;
	int64_t sp = k->rank - 2;
	dnnl_dims_t stride, dil, lo, hi;
	for (int64_t j = 0; j < sp; j++) {
		stride[j] = k->stride[j];
		dil[j] = k->dilation[j] - 1;
		lo[j] = k->pad_lo[j];
		hi[j] = k->pad_hi[j];
	}
	dnnl_primitive_attr_t attr;
	dnnl_status_t st = dnnl_primitive_attr_create(&attr);
	if (st != dnnl_success) return st;
	dnnl_post_ops_t po = NULL;
	st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
	if (st == dnnl_success && k->activation != ACT_NONE) {
		dnnl_alg_kind_t alg;
		float alpha, beta;
		st = activation_post_op(k->activation, k->alpha, &alg, &alpha, &beta) ? dnnl_invalid_arguments : dnnl_post_ops_create(&po);
		if (st == dnnl_success) st = dnnl_post_ops_append_eltwise(po, alg, alpha, beta);
		if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
	}
	if (st == dnnl_success) {
		st = dnnl_convolution_forward_primitive_desc_create(pd, engine, dnnl_forward_inference,
		    dnnl_convolution_direct, e->x_md, w_md, k->bias ? e->b_md : NULL, e->y_md, stride, dil, lo, hi,
		    attr);
	}
	if (po) dnnl_post_ops_destroy(po);
	dnnl_primitive_attr_destroy(attr);
	return st;
}

static int is_reference(dnnl_primitive_desc_t pd) {
	const char *impl = NULL;
	if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || impl == NULL) {
		return 1;
	}
	return strncmp(impl, "ref", 3) == 0;
}

/* conv_threads is the number of threads a convolution computing ydims
 * from key k runs on: one for small ones, every processor otherwise. */
static int conv_threads(const conv_key *k, const int64_t *ydims) {
	long macs = 1;
	for (int64_t i = 0; i < k->rank; i++) {
		macs *= (long)ydims[i];
	}
	for (int64_t i = 1; i < k->rank; i++) {
		macs *= (long)k->w[i];
	}
	int n = omp_get_num_procs();
	return macs < PARALLEL_MIN_MACS || n < 1 ? 1 : n;
}

static int verbose = -1;

/* entry_build fills e (whose key is set) with its primitives. */
static dnnl_status_t entry_build(conv_entry *e, const int64_t *ydims) {
	const conv_key *k = &e->key;
	e->threads = conv_threads(k, ydims);
	omp_set_num_threads(e->threads);
	dnnl_status_t st = channels_last_md(&e->x_md, k->rank, k->x);
	if (st == dnnl_success) st = channels_last_md(&e->y_md, k->rank, ydims);
	if (st == dnnl_success) st = weights_md(&e->w_md, k, 0);
	if (st == dnnl_success) {
		dnnl_dims_t bd = {k->w[0]};
		st = dnnl_memory_desc_create_with_tag(&e->b_md, 1, bd, dnnl_f32, dnnl_a);
	}
	if (st != dnnl_success) return st;
	dnnl_primitive_desc_t pd = NULL;
	/* Depthwise convolutions: oneDNN's depthwise kernels want blocked
	 * weights; the general kernel that reads XLA's layout is much slower. */
	int depthwise = k->groups > 1 && k->w[0] == k->groups && k->w[1] == 1;
	st = depthwise ? dnnl_unimplemented : create_pd(&pd, e, e->w_md);
	if (st != dnnl_success || is_reference(pd)) {
		/* No fast kernel reads XLA's weight layout (grouped convolutions):
		 * let oneDNN pick the layout and reorder the weights each call. */
		dnnl_memory_desc_t any = NULL;
		dnnl_primitive_desc_t pd2 = NULL;
		dnnl_status_t st2 = weights_md(&any, k, 1);
		if (st2 == dnnl_success) st2 = create_pd(&pd2, e, any);
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
	const_dnnl_memory_desc_t wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
	if (dnnl_memory_desc_equal(wq, e->w_md)) {
		e->w_kernel_md = e->w_md;
	} else {
		st = dnnl_memory_desc_clone(&e->w_kernel_md, wq);
		dnnl_primitive_desc_t rpd = NULL;
		if (st == dnnl_success) st = dnnl_reorder_primitive_desc_create(&rpd, e->w_md, engine, wq, engine, NULL);
		if (st == dnnl_success) st = dnnl_primitive_create(&e->weights_reorder, rpd);
		if (rpd) dnnl_primitive_desc_destroy(rpd);
		e->w_kernel_bytes = dnnl_memory_desc_get_size(wq);
	}
	if (verbose < 0) {
		const char *v = getenv("XSERVE_CPU_KERNELS_VERBOSE");
		verbose = v != NULL && *v != 0 && strcmp(v, "0") != 0;
	}
	if (verbose) {
		const char *impl = "?";
		dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
		fprintf(stderr, "xserve_conv_f32: x [%lld, %lld, %lld, ...] w [%lld, %lld, %lld, ...] groups %lld: %s, %d thread(s)%s\n",
		    (long long)k->x[0], (long long)k->x[1], (long long)k->x[2], (long long)k->w[0], (long long)k->w[1],
		    (long long)k->w[2], (long long)k->groups, impl, e->threads,
		    e->weights_reorder ? ", weights reordered each call" : "");
	}
	if (st == dnnl_success) {
		const_dnnl_memory_desc_t sq = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
		e->scratch_bytes = sq ? dnnl_memory_desc_get_size(sq) : 0;
		if (e->scratch_bytes) st = dnnl_memory_desc_clone(&e->s_md, sq);
		if (st == dnnl_success) st = dnnl_primitive_create(&e->conv, pd);
	}
	dnnl_primitive_desc_destroy(pd);
	return st;
}

/* lookup returns the cached entry for k, building it on a miss. A full
 * table builds into *spare, which the caller destroys after the call. */
static conv_entry *lookup(const conv_key *k, const int64_t *ydims, conv_entry *spare, dnnl_status_t *st) {
	uint64_t h = key_hash(k);
	pthread_mutex_lock(&cache_mu);
	for (int i = 0; i < CACHE_SLOTS; i++) {
		conv_entry *e = &cache[(h + i) % CACHE_SLOTS];
		if (!e->used) {
			e->key = *k;
			*st = entry_build(e, ydims);
			if (*st != dnnl_success) {
				entry_destroy(e);
				pthread_mutex_unlock(&cache_mu);
				return NULL;
			}
			e->used = 1;
			pthread_mutex_unlock(&cache_mu);
			return e;
		}
		if (memcmp(&e->key, k, sizeof *k) == 0) {
			pthread_mutex_unlock(&cache_mu);
			return e;
		}
	}
	pthread_mutex_unlock(&cache_mu);
	memset(spare, 0, sizeof *spare);
	spare->key = *k;
	*st = entry_build(spare, ydims);
	if (*st != dnnl_success) {
		entry_destroy(spare);
		return NULL;
	}
	spare->used = 1;
	return spare;
}

/* A thread's memory objects for one cached convolution: x, w, y, bias,
 * reordered weights, scratchpad. Execution only points them at the call's
 * buffers, saving their construction on every call. */
enum { M_X, M_W, M_Y, M_B, M_WK, M_S, M_COUNT };
typedef struct mem_set {
	const conv_entry *e;
	dnnl_memory_t m[M_COUNT];
} mem_set;
#define MEM_SLOTS 64
static __thread mem_set thread_mems[MEM_SLOTS];

static void mem_set_clear(mem_set *ms) {
	for (int i = 0; i < M_COUNT; i++) {
		if (ms->m[i]) dnnl_memory_destroy(ms->m[i]);
	}
	memset(ms, 0, sizeof *ms);
}

/* mem_set_init makes the memory objects of entry e, with no data yet. */
static dnnl_status_t mem_set_init(mem_set *ms, const conv_entry *e) {
	const_dnnl_memory_desc_t mds[M_COUNT] = {e->x_md, e->w_md, e->y_md, e->key.bias ? e->b_md : NULL,
	    e->weights_reorder ? e->w_kernel_md : NULL, e->scratch_bytes ? e->s_md : NULL};
	ms->e = e;
	for (int i = 0; i < M_COUNT; i++) {
		if (mds[i] == NULL) continue;
		dnnl_status_t st = dnnl_memory_create(&ms->m[i], mds[i], engine, DNNL_MEMORY_NONE);
		if (st != dnnl_success) {
			mem_set_clear(ms);
			return st;
		}
	}
	return dnnl_success;
}

static int ensure_scratch(size_t n) {
	if (n <= thread_scratch_bytes) return 0;
	free(thread_scratch);
	n = (n + 4095) & ~(size_t)4095;
	thread_scratch = aligned_alloc(64, n);
	thread_scratch_bytes = thread_scratch ? n : 0;
	return thread_scratch ? 0 : -1;
}

static XLA_FFI_Error *conv_execute(XLA_FFI_CallFrame *f) {
	if (f->args.size < 2 || f->args.size > 3 || f->rets.size != 1) {
		return fail(f, 3, "want 2 or 3 operands and 1 result, got %lld and %lld", (long long)f->args.size,
		    (long long)f->rets.size);
	}
	XLA_FFI_Buffer *x = f->args.args[0], *w = f->args.args[1], *b = f->args.size == 3 ? f->args.args[2] : NULL;
	XLA_FFI_Buffer *y = f->rets.rets[0];
	if (x->dtype != XLA_FFI_DataType_F32 || w->dtype != XLA_FFI_DataType_F32 || y->dtype != XLA_FFI_DataType_F32 ||
	    (b && b->dtype != XLA_FFI_DataType_F32)) {
		return fail(f, 3, "operands and result must be float32");
	}
	int64_t rank = x->rank;
	if (rank < 3 || rank > 2 + MAX_SPATIAL || w->rank != rank || y->rank != rank || (b && b->rank != 1)) {
		return fail(f, 3, "ranks x %lld, w %lld, y %lld: want 3 to 5, equal", (long long)rank, (long long)w->rank,
		    (long long)y->rank);
	}
	conv_key k;
	memset(&k, 0, sizeof k);
	k.rank = rank;
	int64_t sp = rank - 2;
	for (int64_t i = 0; i < rank; i++) {
		k.x[i] = x->dims[i];
		k.w[i] = w->dims[i];
	}
	if (attr_ints(f, "stride", k.stride, sp) || attr_ints(f, "pad_lo", k.pad_lo, sp) ||
	    attr_ints(f, "pad_hi", k.pad_hi, sp) || attr_ints(f, "dilation", k.dilation, sp) ||
	    attr_int(f, "groups", &k.groups) || attr_int(f, "activation", &k.activation) ||
	    attr_float(f, "alpha", &k.alpha)) {
		return fail(f, 3, "missing or malformed attribute (stride, pad_lo, pad_hi, dilation: %lld ints; "
		    "groups, activation: int; alpha: f32)", (long long)sp);
	}
	if (k.activation < ACT_NONE || k.activation > ACT_LAST) {
		return fail(f, 3, "activation %lld: want 0 (none) to %d", (long long)k.activation, ACT_LAST);
	}
	k.bias = b != NULL;
	if (k.groups < 1 || k.x[1] != k.w[1] * k.groups || k.w[0] % k.groups != 0 || y->dims[1] != k.w[0] ||
	    y->dims[0] != k.x[0] || (b && b->dims[0] != k.w[0])) {
		return fail(f, 3, "inconsistent shapes: x channels %lld, w [%lld, %lld, ...], groups %lld, y channels %lld",
		    (long long)k.x[1], (long long)k.w[0], (long long)k.w[1], (long long)k.groups, (long long)y->dims[1]);
	}
	for (int64_t j = 0; j < sp; j++) {
		if (k.stride[j] < 1 || k.dilation[j] < 1 || k.pad_lo[j] < 0 || k.pad_hi[j] < 0) {
			return fail(f, 3, "spatial dim %lld: stride %lld, dilation %lld, padding %lld/%lld", (long long)j,
			    (long long)k.stride[j], (long long)k.dilation[j], (long long)k.pad_lo[j], (long long)k.pad_hi[j]);
		}
		int64_t want = (k.x[2 + j] + k.pad_lo[j] + k.pad_hi[j] - k.dilation[j] * (k.w[2 + j] - 1) - 1) / k.stride[j] + 1;
		if (y->dims[2 + j] != want) {
			return fail(f, 3, "spatial dim %lld: result size %lld, want %lld", (long long)j, (long long)y->dims[2 + j],
			    (long long)want);
		}
	}
	pthread_once(&engine_once, init_engine);
	if (engine_status != dnnl_success) {
		return fail(f, 13, "oneDNN CPU engine: status %d", (int)engine_status);
	}
	if (thread_stream == NULL && dnnl_stream_create(&thread_stream, engine, dnnl_stream_default_flags) != dnnl_success) {
		return fail(f, 13, "oneDNN stream creation failed");
	}
	conv_entry spare;
	dnnl_status_t st = dnnl_success;
	conv_entry *e = lookup(&k, y->dims, &spare, &st);
	if (e == NULL) {
		return fail(f, 13, "oneDNN convolution for x [%lld, %lld, ...], w [%lld, %lld, ...], groups %lld: status %d",
		    (long long)k.x[0], (long long)k.x[1], (long long)k.w[0], (long long)k.w[1], (long long)k.groups, (int)st);
	}
	size_t scratch = e->scratch_bytes + (e->weights_reorder ? e->w_kernel_bytes + 64 : 0);
	XLA_FFI_Error *err = NULL;
	mem_set local;
	memset(&local, 0, sizeof local);
	mem_set *ms = e == &spare ? &local : &thread_mems[(size_t)(e - cache) % MEM_SLOTS];
	if (ensure_scratch(scratch) != 0) {
		err = fail(f, 8, "cannot allocate %zu bytes of scratch memory", scratch);
		goto out;
	}
	if (ms->e != e) {
		mem_set_clear(ms);
		st = mem_set_init(ms, e);
	}
	void *data[M_COUNT] = {x->data, w->data, y->data, b ? b->data : NULL,
	    (char *)thread_scratch + ((e->scratch_bytes + 63) & ~(size_t)63), thread_scratch};
	for (int i = 0; i < M_COUNT && st == dnnl_success; i++) {
		if (ms->m[i]) st = dnnl_memory_set_data_handle(ms->m[i], data[i]);
	}
	omp_set_num_threads(e->threads);
	if (st == dnnl_success && e->weights_reorder) {
		dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, ms->m[M_W]}, {DNNL_ARG_TO, ms->m[M_WK]}};
		st = dnnl_primitive_execute(e->weights_reorder, thread_stream, 2, ra);
	}
	if (st == dnnl_success) {
		dnnl_exec_arg_t args[5];
		int n = 0;
		args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, ms->m[M_X]};
		args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, ms->m[M_WK] ? ms->m[M_WK] : ms->m[M_W]};
		args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, ms->m[M_Y]};
		if (ms->m[M_B]) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, ms->m[M_B]};
		if (ms->m[M_S]) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, ms->m[M_S]};
		st = dnnl_primitive_execute(e->conv, thread_stream, n, args);
	}
	if (st == dnnl_success) st = dnnl_stream_wait(thread_stream);
	if (st != dnnl_success) {
		err = fail(f, 13, "oneDNN convolution failed: status %d", (int)st);
	}
out:
	if (ms == &local) mem_set_clear(&local);
	if (e == &spare) entry_destroy(&spare);
	return err;
}

/* xserve_conv_f32 is the FFI handler XLA calls. */
XLA_FFI_Error *xserve_conv_f32(XLA_FFI_CallFrame *f) {
	for (XLA_FFI_Extension_Base *ext = f->extension_start; ext != NULL; ext = ext->next) {
		if (ext->type == XLA_FFI_Extension_Metadata) {
			XLA_FFI_Metadata *m = ((XLA_FFI_Metadata_Extension *)ext)->metadata;
			m->api_version.major_version = 0;
			m->api_version.minor_version = 1;
			m->traits = 0;
			return NULL;
		}
	}
	if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) {
		return NULL;
	}
	return conv_execute(f);
}
