/*
 * common.c: see common.h.
 */
#include "common.h"

#include <emmintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libgomp, which oneDNN's OpenMP build runs on. */
void omp_set_num_threads(int n);
int omp_get_num_procs(void);

/* Primitives below this many multiply-adds run on the calling thread. */
#define PARALLEL_MIN_MACS (4.0 * (1 << 20))

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static dnnl_status_t engine_status;

static __thread dnnl_stream_t stream;
static __thread void *scratch;
static __thread size_t scratch_bytes;

static void init_engine(void) { engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0); }

dnnl_status_t kernel_engine(dnnl_engine_t *e) {
	pthread_once(&engine_once, init_engine);
	*e = engine;
	return engine_status;
}

dnnl_status_t thread_stream(dnnl_stream_t *s) {
	if (stream == NULL) {
		dnnl_engine_t e;
		dnnl_status_t st = kernel_engine(&e);
		if (st == dnnl_success) st = dnnl_stream_create(&stream, e, dnnl_stream_default_flags);
		if (st != dnnl_success) return st;
	}
	*s = stream;
	return dnnl_success;
}

void *thread_scratch(size_t n) {
	if (n > scratch_bytes || scratch == NULL) {
		free(scratch);
		n = (n + 4095) & ~(size_t)4095;
		if (n == 0) n = 4096;
		scratch = aligned_alloc(64, n);
		scratch_bytes = scratch ? n : 0;
	}
	return scratch;
}

/* max_threads is the most threads a primitive runs on: the processors, or
 * XSERVE_CPU_KERNELS_THREADS when set lower. */
static int max_threads(void) {
	static int n = 0;
	if (n == 0) {
		int procs = omp_get_num_procs();
		const char *v = getenv("XSERVE_CPU_KERNELS_THREADS");
		int want = v ? atoi(v) : 0;
		n = want > 0 && want < procs ? want : (procs > 0 ? procs : 1);
	}
	return n;
}

/* env_macs is environment variable name's value when it is a count of
 * multiply-adds (>= 0), else def. */
static double env_macs(const char *name, double def) {
	const char *v = getenv(name);
	double want = v ? atof(v) : -1;
	return want >= 0 ? want : def;
}

/* parallel_min_macs is the size from which a primitive runs on max_threads:
 * PARALLEL_MIN_MACS, or XSERVE_CPU_KERNELS_PARALLEL_MACS when set. */
static double parallel_min_macs(void) {
	static double m = -1;
	if (m < 0) m = env_macs("XSERVE_CPU_KERNELS_PARALLEL_MACS", PARALLEL_MIN_MACS);
	return m;
}

/* thread_limit caps the threads of the primitives the calling thread runs
 * (0: no cap). */
static __thread int thread_limit;

void xserve_cpu_kernels_thread_limit(int n) { thread_limit = n > 0 ? n : 0; }

int kernel_thread_limit(void) { return thread_limit; }

int kernel_threads(double macs) {
	int n = macs < parallel_min_macs() ? 1 : max_threads();
	return thread_limit > 0 && thread_limit < n ? thread_limit : n;
}

/* BAND_MIN_MACS is the size from which a call runs as bands: a band
 * handed to a spinning worker costs about a microsecond. */
#define BAND_MIN_MACS (64.0 * 1024)

static double band_min_macs(void) {
	static double m = -1;
	if (m < 0) m = env_macs("XSERVE_CPU_KERNELS_BAND_MACS", BAND_MIN_MACS);
	return m;
}

int kernel_max_bands(void) {
	static int n = 0;
	if (n == 0) {
		const char *v = getenv("XSERVE_CPU_KERNELS_BANDS");
		int want = v ? atoi(v) : 0;
		n = want > 0 ? want : max_threads();
		if (n > MAX_BANDS) n = MAX_BANDS;
	}
	return n;
}

int kernel_bands(double macs) {
	if (thread_limit == 1 || macs < band_min_macs()) return 1;
	int n = kernel_max_bands();
	return thread_limit > 1 && thread_limit < n ? thread_limit : n;
}

void use_threads(int n) { omp_set_num_threads(n); }

int kernel_verbose(void) {
	static int verbose = -1;
	if (verbose < 0) {
		const char *v = getenv("XSERVE_CPU_KERNELS_VERBOSE");
		verbose = v != NULL && *v != 0 && strcmp(v, "0") != 0;
	}
	return verbose;
}

long since_ns(const struct timespec *t0) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

int weights_policy(void) {
	static int policy = -1;
	if (policy < 0) {
		const char *v = getenv("XSERVE_CPU_KERNELS_WEIGHTS");
		policy = v != NULL && strcmp(v, "xla") == 0      ? WEIGHTS_XLA
		         : v != NULL && strcmp(v, "onednn") == 0 ? WEIGHTS_ONEDNN
		                                                  : WEIGHTS_TIMED;
	}
	return policy;
}

/* trial is a primitive made to be timed, with zeroed buffers for every
 * memory it reads and writes. */
typedef struct trial {
	dnnl_primitive_t prim, reorder;
	dnnl_memory_t m[MEM_COUNT];
} trial;

static void trial_destroy(trial *t) {
	if (t->prim) dnnl_primitive_destroy(t->prim);
	if (t->reorder) dnnl_primitive_destroy(t->reorder);
	for (int i = 0; i < MEM_COUNT; i++) {
		if (t->m[i]) dnnl_memory_destroy(t->m[i]);
	}
}

/* trial_memory makes *m for md, allocated and zeroed (no NaNs or
 * denormals to slow the kernel down). */
static dnnl_status_t trial_memory(dnnl_memory_t *m, const_dnnl_memory_desc_t md, dnnl_engine_t eng) {
	dnnl_status_t st = dnnl_memory_create(m, md, eng, DNNL_MEMORY_ALLOCATE);
	void *p = NULL;
	if (st == dnnl_success) st = dnnl_memory_get_data_handle(*m, &p);
	if (st == dnnl_success && p) memset(p, 0, dnnl_memory_desc_get_size(md));
	return st;
}

/* trial_make makes t for pd, a primitive descriptor for e's key whose
 * weights come in e->md[MEM_WEI] (XLA's layout). */
static dnnl_status_t trial_make(trial *t, const kernel_entry *e, const_dnnl_primitive_desc_t pd) {
	dnnl_engine_t eng;
	dnnl_status_t st = kernel_engine(&eng);
	const_dnnl_memory_desc_t wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
	const_dnnl_memory_desc_t sq = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
	const_dnnl_memory_desc_t md[MEM_COUNT];
	for (int i = 0; i < MEM_COUNT; i++) {
		md[i] = e->md[i];
	}
	md[MEM_WEI_K] = wq != NULL && e->md[MEM_WEI] != NULL && !dnnl_memory_desc_equal(wq, e->md[MEM_WEI]) ? wq : NULL;
	md[MEM_SCRATCH] = sq != NULL && dnnl_memory_desc_get_size(sq) > 0 ? sq : NULL;
	for (int i = 0; i < MEM_COUNT && st == dnnl_success; i++) {
		if (md[i]) st = trial_memory(&t->m[i], md[i], eng);
	}
	if (st == dnnl_success && md[MEM_WEI_K]) {
		dnnl_primitive_desc_t rpd = NULL;
		st = dnnl_reorder_primitive_desc_create(&rpd, e->md[MEM_WEI], eng, wq, eng, NULL);
		if (st == dnnl_success) st = dnnl_primitive_create(&t->reorder, rpd);
		if (rpd) dnnl_primitive_desc_destroy(rpd);
	}
	if (st == dnnl_success) st = dnnl_primitive_create(&t->prim, pd);
	return st;
}

/* trial_run runs t once, its weights reorder first. */
static dnnl_status_t trial_run(const trial *t, dnnl_stream_t stream) {
	dnnl_status_t st = dnnl_success;
	if (t->reorder) {
		dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, t->m[MEM_WEI]}, {DNNL_ARG_TO, t->m[MEM_WEI_K]}};
		st = dnnl_primitive_execute(t->reorder, stream, 2, ra);
	}
	dnnl_exec_arg_t args[6];
	int n = 0;
	args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, t->m[MEM_SRC]};
	args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, t->reorder ? t->m[MEM_WEI_K] : t->m[MEM_WEI]};
	args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, t->m[MEM_DST]};
	if (t->m[MEM_BIAS]) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, t->m[MEM_BIAS]};
	if (t->m[MEM_SCRATCH]) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, t->m[MEM_SCRATCH]};
	if (t->m[MEM_RES]) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, t->m[MEM_RES]};
	if (st == dnnl_success) st = dnnl_primitive_execute(t->prim, stream, n, args);
	if (st == dnnl_success) st = dnnl_stream_wait(stream);
	return st;
}

/* TRIAL_ROUNDS rounds of TRIAL_RUNS runs each are timed per candidate,
 * the candidates' rounds alternating, after TRIAL_WARMUP runs each; the
 * fastest round counts (load from elsewhere only ever adds time). */
enum { TRIAL_WARMUP = 2, TRIAL_ROUNDS = 5, TRIAL_RUNS = 2 };

dnnl_primitive_desc_t faster_pd(const kernel_entry *e, dnnl_primitive_desc_t a, dnnl_primitive_desc_t b,
    double *ns_a, double *ns_b) {
	trial t[2];
	memset(t, 0, sizeof t);
	dnnl_stream_t stream;
	dnnl_status_t st = thread_stream(&stream);
	if (st == dnnl_success) st = trial_make(&t[0], e, a);
	if (st == dnnl_success) st = trial_make(&t[1], e, b);
	double best[2] = {1e30, 1e30};
	for (int w = 0; w < TRIAL_WARMUP && st == dnnl_success; w++) {
		st = trial_run(&t[0], stream);
		if (st == dnnl_success) st = trial_run(&t[1], stream);
	}
	for (int r = 0; r < TRIAL_ROUNDS && st == dnnl_success; r++) {
		for (int i = 0; i < 2 && st == dnnl_success; i++) {
			struct timespec t0;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			for (int k = 0; k < TRIAL_RUNS && st == dnnl_success; k++) {
				st = trial_run(&t[i], stream);
			}
			double ns = (double)since_ns(&t0) / TRIAL_RUNS;
			if (ns < best[i]) best[i] = ns;
		}
	}
	trial_destroy(&t[0]);
	trial_destroy(&t[1]);
	*ns_a = st == dnnl_success ? best[0] : 0;
	*ns_b = st == dnnl_success ? best[1] : 0;
	/* b only when it measured faster; a when the trial failed */
	int take_b = st == dnnl_success && best[1] < best[0];
	dnnl_primitive_desc_destroy(take_b ? a : b);
	return take_b ? b : a;
}

XLA_FFI_Error *fail(XLA_FFI_CallFrame *f, const char *kernel, int code, const char *fmt, ...) {
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(msg, sizeof msg, "%s: ", kernel);
	vsnprintf(msg + n, sizeof msg - n, fmt, ap);
	va_end(ap);
	XLA_FFI_Error_Create_Args a;
	memset(&a, 0, sizeof a);
	a.struct_size = sizeof a;
	a.message = msg;
	a.errc = code;
	return f->api->XLA_FFI_Error_Create(&a);
}

/* find_attr returns the attribute named name of the given type, or NULL. */
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

int attr_ints(XLA_FFI_CallFrame *f, const char *name, int64_t *out, int64_t n) {
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

int attr_float(XLA_FFI_CallFrame *f, const char *name, float *out) {
	XLA_FFI_Scalar *s = find_attr(f, name, XLA_FFI_AttrType_SCALAR);
	if (s == NULL || s->dtype != XLA_FFI_DataType_F32) {
		return -1;
	}
	*out = *(float *)s->value;
	return 0;
}

int attr_int(XLA_FFI_CallFrame *f, const char *name, int64_t *out) {
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

dnnl_status_t epilogue_post_ops(const_dnnl_memory_desc_t res_md, int64_t act, float alpha_attr, dnnl_post_ops_t *po) {
	*po = NULL;
	if (act == ACT_NONE && res_md == NULL) return dnnl_success;
	dnnl_alg_kind_t alg = dnnl_eltwise_relu;
	float alpha = 0.f, beta = 0.f;
	switch (act) {
	case ACT_NONE: break;
	case ACT_RELU: alg = dnnl_eltwise_relu; break;
	case ACT_RELU6: alg = dnnl_eltwise_clip; beta = 6.f; break;
	case ACT_SIGMOID: alg = dnnl_eltwise_logistic; break;
	case ACT_SILU: alg = dnnl_eltwise_swish; alpha = 1.f; break;
	case ACT_HARDSWISH: alg = dnnl_eltwise_hardswish; alpha = 1.f / 6.f; beta = 0.5f; break;
	case ACT_TANH: alg = dnnl_eltwise_tanh; break;
	case ACT_GELU: alg = dnnl_eltwise_gelu_erf; break;
	case ACT_GELU_TANH: alg = dnnl_eltwise_gelu_tanh; break;
	case ACT_LEAKY_RELU: alg = dnnl_eltwise_relu; alpha = alpha_attr; break;
	default: return dnnl_invalid_arguments;
	}
	dnnl_status_t st = dnnl_post_ops_create(po);
	if (st == dnnl_success && res_md != NULL) st = dnnl_post_ops_append_binary(*po, dnnl_binary_add, res_md);
	if (st == dnnl_success && act != ACT_NONE) st = dnnl_post_ops_append_eltwise(*po, alg, alpha, beta);
	if (st != dnnl_success && *po) {
		dnnl_post_ops_destroy(*po);
		*po = NULL;
	}
	return st;
}

int operands_as(XLA_FFI_CallFrame *f, int64_t has_bias, int64_t residual, kernel_operands *o) {
	int64_t want = 2 + (has_bias != 0) + (residual != 0);
	if (f->args.size != want || f->rets.size != 1 || f->rets.types[0] != XLA_FFI_RetType_BUFFER) return 0;
	for (int64_t i = 0; i < want; i++) {
		if (f->args.types[i] != XLA_FFI_ArgType_BUFFER ||
		    ((XLA_FFI_Buffer *)f->args.args[i])->dtype != XLA_FFI_DataType_F32) {
			return 0;
		}
	}
	o->src = f->args.args[0];
	o->wei = f->args.args[1];
	o->bias = has_bias ? f->args.args[2] : NULL;
	o->res = residual ? f->args.args[want - 1] : NULL;
	o->dst = f->rets.rets[0];
	return o->dst->dtype == XLA_FFI_DataType_F32;
}


XLA_FFI_Error *read_operands(XLA_FFI_CallFrame *f, const char *kernel, kernel_operands *o) {
	int64_t has_bias = 0, residual = 0;
	memset(o, 0, sizeof *o);
	if (attr_int(f, "has_bias", &has_bias) || attr_int(f, "residual", &residual)) {
		return fail(f, kernel, 3, "missing or malformed attribute has_bias or residual (int)");
	}
	if (operands_as(f, has_bias, residual, o)) {
		return NULL;
	}
	/* Say what is wrong. */
	int64_t want = 2 + (has_bias != 0) + (residual != 0);
	if (f->args.size != want || f->rets.size != 1) {
		return fail(f, kernel, 3, "want %lld operands (has_bias %lld, residual %lld) and 1 result, got %lld and %lld",
		    (long long)want, (long long)has_bias, (long long)residual, (long long)f->args.size, (long long)f->rets.size);
	}
	for (int64_t i = 0; i < f->args.size; i++) {
		if (f->args.types[i] != XLA_FFI_ArgType_BUFFER) {
			return fail(f, kernel, 3, "operand %lld is not a buffer", (long long)i);
		}
	}
	if (f->rets.types[0] != XLA_FFI_RetType_BUFFER) {
		return fail(f, kernel, 3, "the result is not a buffer");
	}
	return fail(f, kernel, 3, "operands and result must be float32");
}

int metadata_call(XLA_FFI_CallFrame *f) {
	for (XLA_FFI_Extension_Base *ext = f->extension_start; ext != NULL; ext = ext->next) {
		if (ext->type == XLA_FFI_Extension_Metadata) {
			XLA_FFI_Metadata *m = ((XLA_FFI_Metadata_Extension *)ext)->metadata;
			m->api_version.major_version = 0;
			m->api_version.minor_version = 1;
			m->traits = 0;
			return 1;
		}
	}
	return 0;
}

const char *impl_name(const_dnnl_primitive_desc_t pd) {
	const char *impl = NULL;
	if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || impl == NULL) {
		return "?";
	}
	return impl;
}

int is_reference(const_dnnl_primitive_desc_t pd) { return strncmp(impl_name(pd), "ref", 3) == 0; }

dnnl_status_t scratchpad_attr(dnnl_primitive_attr_t *attr, const_dnnl_post_ops_t po) {
	dnnl_status_t st = dnnl_primitive_attr_create(attr);
	if (st != dnnl_success) return st;
	st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
	if (st == dnnl_success && po != NULL) st = dnnl_primitive_attr_set_post_ops(*attr, po);
	if (st != dnnl_success) {
		dnnl_primitive_attr_destroy(*attr);
		*attr = NULL;
	}
	return st;
}





/* A thread's memory objects for one cached entry: execution only points
 * them at the call's buffers, saving their construction on every call.
 * Each thread keeps them in an open-addressed table keyed by the entry: a
 * program's kernels each keep theirs (a table indexed by the entry alone
 * had two of resnet18's twenty convolutions evict each other on every
 * call). */
typedef struct mem_set {
	const kernel_entry *e;
	dnnl_memory_t m[MEM_COUNT];
} mem_set;
#define MEM_SLOTS 512
#define MEM_PROBES 8
static __thread mem_set thread_mems[MEM_SLOTS];

/* thread_mem_set returns the calling thread's slot for e: the one holding
 * it, else a free one, else (all MEM_PROBES taken) its first, to be
 * reused. */
static mem_set *thread_mem_set(const kernel_entry *e) {
	size_t home = (size_t)(((uintptr_t)e / sizeof *e) * 0x9E3779B97F4A7C15ULL >> 40) % MEM_SLOTS;
	mem_set *free_slot = NULL;
	for (int i = 0; i < MEM_PROBES; i++) {
		mem_set *ms = &thread_mems[(home + i) % MEM_SLOTS];
		if (ms->e == e) return ms;
		if (ms->e == NULL && free_slot == NULL) free_slot = ms;
	}
	return free_slot ? free_slot : &thread_mems[home];
}

static void mem_set_clear(mem_set *ms) {
	for (int i = 0; i < MEM_COUNT; i++) {
		if (ms->m[i]) dnnl_memory_destroy(ms->m[i]);
	}
	memset(ms, 0, sizeof *ms);
}

static dnnl_status_t mem_set_init(mem_set *ms, const kernel_entry *e) {
	dnnl_engine_t eng;
	dnnl_status_t st = kernel_engine(&eng);
	ms->e = e;
	for (int i = 0; i < MEM_COUNT && st == dnnl_success; i++) {
		if (e->md[i]) st = dnnl_memory_create(&ms->m[i], e->md[i], eng, DNNL_MEMORY_NONE);
	}
	if (st != dnnl_success) mem_set_clear(ms);
	return st;
}








XLA_FFI_Error *exec_entry(XLA_FFI_CallFrame *f, const char *kernel, const kernel_entry *e, int transient,
    void *src, void *wei, void *dst, void *bias, void *res) {
	dnnl_stream_t stream;
	dnnl_status_t st = thread_stream(&stream);
	if (st != dnnl_success) {
		return fail(f, kernel, 13, "oneDNN CPU engine or stream: status %d", (int)st);
	}
	XLA_FFI_Error *err = NULL;
	mem_set local;
	memset(&local, 0, sizeof local);
	mem_set *ms = transient ? &local : thread_mem_set(e);
	size_t scratch_off = (e->wei_k_bytes + 63) & ~(size_t)63;
	char *scratch = thread_scratch(scratch_off + e->scratch_bytes);
	if (scratch == NULL) {
		err = fail(f, kernel, 8, "cannot allocate %zu bytes of scratch memory", scratch_off + e->scratch_bytes);
		goto out;
	}
	if (ms->e != e) {
		mem_set_clear(ms);
		st = mem_set_init(ms, e);
	}
	void *data[MEM_COUNT] = {src, wei, dst, bias, res, scratch, scratch + scratch_off};
	for (int i = 0; i < MEM_COUNT && st == dnnl_success; i++) {
		if (ms->m[i]) st = dnnl_memory_set_data_handle(ms->m[i], data[i]);
	}
	use_threads(e->threads);
	if (st == dnnl_success && e->reorder) {
		dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, ms->m[MEM_WEI]}, {DNNL_ARG_TO, ms->m[MEM_WEI_K]}};
		st = dnnl_primitive_execute(e->reorder, stream, 2, ra);
	}
	if (st == dnnl_success) {
		dnnl_exec_arg_t args[6];
		int n = 0;
		args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, ms->m[MEM_SRC]};
		if (ms->m[MEM_WEI]) {
			args[n++] = (dnnl_exec_arg_t){e->wei_arg ? e->wei_arg : DNNL_ARG_WEIGHTS, e->reorder ? ms->m[MEM_WEI_K] : ms->m[MEM_WEI]};
		}
		args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, ms->m[MEM_DST]};
		if (ms->m[MEM_BIAS]) args[n++] = (dnnl_exec_arg_t){e->bias_arg ? e->bias_arg : DNNL_ARG_BIAS, ms->m[MEM_BIAS]};
		if (ms->m[MEM_SCRATCH]) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, ms->m[MEM_SCRATCH]};
		/* the residual is the first post-op (epilogue_post_ops) */
		if (ms->m[MEM_RES]) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, ms->m[MEM_RES]};
		st = dnnl_primitive_execute(e->prim, stream, n, args);
	}
	if (st == dnnl_success) st = dnnl_stream_wait(stream);
	if (st != dnnl_success) {
		err = fail(f, kernel, 13, "oneDNN execution failed: status %d", (int)st);
	}
out:
	if (ms == &local) mem_set_clear(&local);
	return err;
}

/* channels_last_md describes a logical [N, C, S...] tensor stored as
 * [N, S..., C]. */
dnnl_status_t channels_last_md(dnnl_memory_desc_t *md, int64_t rank, const int64_t *dims) {
	return channels_last_md_of(md, rank, dims, dnnl_f32);
}

dnnl_status_t channels_last_md_of(dnnl_memory_desc_t *md, int64_t rank, const int64_t *dims, dnnl_data_type_t dt) {
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
	return dnnl_memory_desc_create_with_strides(md, (int)rank, d, dt, s);
}

dnnl_status_t hwio_weights_md(dnnl_memory_desc_t *md, int64_t rank, const int64_t *w, int64_t groups, dnnl_data_type_t dt,
    int any) {
	int64_t g = groups, o = w[0], i = w[1];
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
		d[n + j] = w[2 + j];
		s[n + j] = stride;
		stride *= w[2 + j];
	}
	n += (int)sp;
	if (any) {
		return dnnl_memory_desc_create_with_tag(md, n, d, dt, dnnl_format_tag_any);
	}
	return dnnl_memory_desc_create_with_strides(md, n, d, dt, s);
}

void make_window_dims(window_dims *w, int64_t sp, const int64_t *stride, const int64_t *dilation, const int64_t *pad_lo,
    const int64_t *pad_hi) {
	for (int64_t j = 0; j < sp; j++) {
		w->stride[j] = stride[j];
		w->dil[j] = dilation[j] - 1;
		w->lo[j] = pad_lo[j];
		w->hi[j] = pad_hi[j];
	}
}

/* has_nan reports whether any of the n floats at p is NaN: 16 a step with
 * SSE2 (every x86-64 has it), stopping at the first. */
int has_nan(const float *p, int64_t n) {
	int64_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m128 a = _mm_loadu_ps(p + i), b = _mm_loadu_ps(p + i + 4);
		__m128 c = _mm_loadu_ps(p + i + 8), d = _mm_loadu_ps(p + i + 12);
		__m128 u = _mm_or_ps(_mm_or_ps(_mm_cmpunord_ps(a, a), _mm_cmpunord_ps(b, b)),
		    _mm_or_ps(_mm_cmpunord_ps(c, c), _mm_cmpunord_ps(d, d)));
		if (_mm_movemask_ps(u)) return 1;
	}
	for (; i < n; i++) {
		if (isnan(p[i])) return 1;
	}
	return 0;
}
