/*
 * common.h: what the xserve CPU kernels share: the oneDNN engine, each
 * thread's stream and scratch memory, FFI attribute readers and errors,
 * the threads a primitive runs on, and the activations they apply.
 */
#ifndef XSERVE_CPUKERNELS_COMMON_H_
#define XSERVE_CPUKERNELS_COMMON_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "kernel_abi.h" /* targets, activation codes: generated from lower/cpu/abi.go */
#include "oneapi/dnnl/dnnl.h"
#include "xla_ffi.h"

/* epilogue_post_ops makes *po the oneDNN post-ops applied to a result:
 * adding a tensor of the result's layout res_md (if not NULL: a residual),
 * then activation act (alpha: leaky relu's slope); *po is NULL when there
 * are none. */
dnnl_status_t epilogue_post_ops(const_dnnl_memory_desc_t res_md, int64_t act, float alpha, dnnl_post_ops_t *po);

/* kernel_engine returns the process's CPU engine, made on first use. */
dnnl_status_t kernel_engine(dnnl_engine_t *engine);

/* thread_stream returns the calling thread's stream on the engine. */
dnnl_status_t thread_stream(dnnl_stream_t *stream);

/* thread_scratch returns at least n bytes of the calling thread's scratch
 * memory (64-byte aligned), or NULL. */
void *thread_scratch(size_t n);

/* kernel_threads is the number of OpenMP threads a primitive of macs
 * multiply-adds is made for and runs on: one below a few million, where
 * forking costs more than it saves, every processor otherwise; at most the
 * calling thread's limit (xserve_cpu_kernels_thread_limit). */
int kernel_threads(double macs);

/* xserve_cpu_kernels_thread_limit caps the threads of the kernels the
 * calling thread runs from now on at n (n <= 0: no cap). Exported beside
 * the kernel table: pjrt sets 1 around each shard of a split execution
 * (pjrt.Client.RunHostAll), which already has a core of its own, so that
 * its large convolutions do not fork OpenMP teams that compete with the
 * other shards for the cores. */
void xserve_cpu_kernels_thread_limit(int n);

/* kernel_thread_limit is the calling thread's limit (0: none). */
int kernel_thread_limit(void);

/* use_threads sets the OpenMP threads of the calling thread's next parallel
 * regions. */
void use_threads(int n);

/* since_ns is the time since *t0 (CLOCK_MONOTONIC), in nanoseconds. */
long since_ns(const struct timespec *t0);

/* Where a convolution's weights come from (XSERVE_CPU_KERNELS_WEIGHTS):
 * WEIGHTS_TIMED ("auto", the default): where oneDNN has one kernel that
 * reads XLA's layout (HWIO) and another for a layout of its own, the
 * entry times both, the reorder of the weights into oneDNN's layout (on
 * every call) included, and keeps the faster; WEIGHTS_XLA ("xla"): XLA's
 * layout whenever a kernel other than a reference one reads it;
 * WEIGHTS_ONEDNN ("onednn"): oneDNN's layout whenever its kernel differs
 * (for tests and A/B). With a small number of input channels (a network's
 * first convolutions, ic 3 or 4) oneDNN's jit kernel for its own layout
 * ran 0.65-0.93x the time of the brgconv kernel that reads XLA's, and
 * 1.07-1.19x at others of the same kind: hence timed. */
enum { WEIGHTS_TIMED, WEIGHTS_XLA, WEIGHTS_ONEDNN };
int weights_policy(void);

/* kernel_verbose reports whether XSERVE_CPU_KERNELS_VERBOSE asks for a line
 * on stderr per primitive made. */
int kernel_verbose(void);

/* fail makes the FFI error "<kernel>: <message>" with an absl status code
 * (3: invalid argument, 8: resource exhausted, 13: internal). */
XLA_FFI_Error *fail(XLA_FFI_CallFrame *f, const char *kernel, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Attribute readers: 0 when the attribute exists with the type asked for. */
int attr_ints(XLA_FFI_CallFrame *f, const char *name, int64_t *out, int64_t n);
int attr_int(XLA_FFI_CallFrame *f, const char *name, int64_t *out);
int attr_float(XLA_FFI_CallFrame *f, const char *name, float *out);

/* kernel_operands are a kernel call's buffers: input, weights, optional
 * bias and residual (the attributes has_bias and residual say which are
 * there; the residual is last), and the result. */
typedef struct kernel_operands {
	XLA_FFI_Buffer *src, *wei, *bias, *res, *dst;
} kernel_operands;

/* read_operands fills o from f, checking their count against has_bias and
 * residual and that all are float32; the FFI error or NULL. */
XLA_FFI_Error *read_operands(XLA_FFI_CallFrame *f, const char *kernel, kernel_operands *o);

/* operands_as fills o from f for a call with the given has_bias and
 * residual; 0 if f's operands are not that (count, kinds, float32). */
int operands_as(XLA_FFI_CallFrame *f, int64_t has_bias, int64_t residual, kernel_operands *o);

/* metadata_call reports whether f is XLA's metadata query, answering it:
 * the handler then returns NULL at once. */
int metadata_call(XLA_FFI_CallFrame *f);

/* has_nan reports whether any of the n floats at p is NaN. */
int has_nan(const float *p, int64_t n);

/* is_reference reports whether oneDNN chose a reference (slow) primitive. */
int is_reference(const_dnnl_primitive_desc_t pd);

/* impl_name is the implementation oneDNN chose for pd. */
const char *impl_name(const_dnnl_primitive_desc_t pd);

/* The memory objects a cached primitive executes with, in this order:
 * input, weights in XLA's layout, result, bias (optional), the residual
 * added to the result (optional), weights in the primitive's layout (when
 * it needs a reorder), scratchpad (optional). */
enum { MEM_SRC, MEM_WEI, MEM_DST, MEM_BIAS, MEM_RES, MEM_WEI_K, MEM_SCRATCH, MEM_COUNT };

#define KEY_BYTES 320

struct kernel_band;

/* kernel_entry is a primitive made for one key (a kernel's shapes and
 * attributes) and what executing it needs. */
typedef struct kernel_entry {
	int used;
	unsigned char key[KEY_BYTES];
	dnnl_primitive_t prim;
	dnnl_primitive_t reorder;  /* weights, XLA's layout -> the primitive's; or NULL */
	dnnl_memory_desc_t md[MEM_COUNT]; /* NULL for memory not used */
	size_t wei_k_bytes, scratch_bytes;
	int threads;               /* OpenMP threads it was made for and runs on */
	/* the oneDNN arguments the weights and bias operands are passed as
	 * (0: DNNL_ARG_WEIGHTS and DNNL_ARG_BIAS; the layer norm's scale and
	 * shift otherwise) */
	int wei_arg, bias_arg;
	/* nbands > 1: the call runs as these bands instead of prim, one per
	 * thread (band.c); the entry owns them. */
	int nbands;
	struct kernel_band *bands;
} kernel_entry;

/* Bands. A call on one image (batch 1) has no rows for pjrt's split to
 * share out, and oneDNN's OpenMP threads pay off only for convolutions of
 * millions of multiply-adds (below that, a parallel region forked from
 * whichever thread runs the call costs more than it saves: libgomp keeps a
 * team per calling thread, and serving calls come from many). A band is
 * the same kernel on a contiguous slice of the result (a range of output
 * rows), made as a primitive of its own on one thread; a call's bands run
 * at once, the first on the calling thread and the others on the kernel
 * library's band workers, which spin briefly for the next band and
 * otherwise sleep. A band no worker has started when the calling thread is
 * done with its own runs on the calling thread: a call never waits for a
 * worker that has no core. Bands pay only where the worker has a core of
 * its own; where it has not (a machine whose other cores are busy, or
 * shared with other guests) its spinning slows the calling thread: serving
 * times whole executions with and without (pjrt.HostRun.Threads 1, the
 * thread limit of 1) and keeps the faster (serving/rowsplit.go). */
typedef struct kernel_band {
	kernel_entry e;         /* the band's primitive, one thread */
	size_t src_off, dst_off; /* bytes into the input and into the result (and residual) */
} kernel_band;


/* entry_builder fills e's primitive, reorder and memory descriptors for the
 * key in e->key; ctx is the builder's. e->threads is set before the call. */
typedef dnnl_status_t (*entry_builder)(kernel_entry *e, const void *ctx);

#define CACHE_SLOTS 2048

/* site_slot maps a call site (the lowering's "site" attribute, with the
 * calling thread's thread limit) to its entry. */
typedef struct site_slot {
	uint64_t tag; /* 0: free; written once, last (release) */
	kernel_entry *e;
} site_slot;

/* kernel_cache holds one kernel's entries for the life of the process, and
 * the call sites seen, each with its entry. */
typedef struct kernel_cache {
	const char *kernel;
	pthread_mutex_t mu;
	kernel_entry slots[CACHE_SLOTS];
	site_slot sites[CACHE_SLOTS];
} kernel_cache;

/* MAX_BANDS bounds the bands of a call. */
#define MAX_BANDS 64

/* kernel_max_bands is the bands a large call on one image runs as:
 * XSERVE_CPU_KERNELS_BANDS (1 turns bands off), by default the processors
 * (at most XSERVE_CPU_KERNELS_THREADS); at most MAX_BANDS. */
int kernel_max_bands(void);

/* kernel_bands is how many bands a call of macs multiply-adds runs as on
 * the calling thread (1: none): kernel_max_bands, when the call is at least
 * XSERVE_CPU_KERNELS_BAND_MACS (default BAND_MIN_MACS) multiply-adds and
 * the calling thread's limit (xserve_cpu_kernels_thread_limit) is not 1,
 * at most that limit. */
int kernel_bands(double macs);

/* exec_entry executes e, an entry of kernel's, on the buffers on the
 * calling thread (common.c); transient: e is a spare entry (the cache was
 * full), whose memory objects are made for this call only. The FFI error
 * or NULL. */
XLA_FFI_Error *exec_entry(XLA_FFI_CallFrame *f, const char *kernel, const kernel_entry *e, int transient, void *src,
    void *wei, void *dst, void *bias, void *res);

/* run_bands executes e's bands on the buffers, at once (band.c); the FFI
 * error of one that failed, or NULL. */
XLA_FFI_Error *run_bands(XLA_FFI_CallFrame *f, const char *kernel, const kernel_entry *e, char *src, void *wei,
    char *dst, void *bias, char *res);

/* The kernel cache (cache.c), above common.c and band.c. */

/* bands_destroy frees e's bands. */
void bands_destroy(kernel_entry *e);

/* kernel_run finds (or builds, with threads and build) the entry of key in
 * c and executes it on the buffers (bias and res may be NULL); the FFI
 * error or NULL. key must be KEY_BYTES long, zero-padded. A site other
 * than 0 (call_site) is noted with the entry, for site_entry. */
XLA_FFI_Error *kernel_run(XLA_FFI_CallFrame *f, kernel_cache *c, const void *key, int threads, entry_builder build,
    const void *ctx, int64_t site, void *src, void *wei, void *dst, void *bias, void *res);

/* Call sites. The lowering gives each kernel call an attribute "site": a
 * 64-bit hash (SHA-256) of the call's target, operand and result types and
 * other attributes (lower/nn.go kernelSite). A call whose site was seen
 * before, under the same thread limit, runs the entry made then, after
 * checking only that its operands have the entry's shapes: no attribute is
 * read, no key built, hashed or compared. The shapes check keeps every
 * access inside the buffers whatever the site says; the hash makes two
 * calls with different attributes under one site as unlikely as a SHA-256
 * collision. */

/* call_site returns f's "site" attribute, or 0 when it has none. */
int64_t call_site(XLA_FFI_CallFrame *f);

/* site_entry returns the entry noted for site under the calling thread's
 * thread limit, or NULL. */
kernel_entry *site_entry(kernel_cache *c, int64_t site);

/* run_entry executes e (found by site_entry) on the buffers. */
XLA_FFI_Error *run_entry(XLA_FFI_CallFrame *f, kernel_cache *c, kernel_entry *e, void *src, void *wei, void *dst,
    void *bias, void *res);

/* site_operands fills o with f's operands as the call e was made for takes
 * them, and reports whether they are those (count, float32, shapes). */
typedef int (*site_operands)(XLA_FFI_CallFrame *f, const kernel_entry *e, kernel_operands *o);

/* run_site runs f with the entry noted for site when take accepts f's
 * operands for it, and sets *ran; the FFI error or NULL. */
XLA_FFI_Error *run_site(XLA_FFI_CallFrame *f, kernel_cache *c, int64_t site, site_operands take, int *ran);

/* faster_pd returns whichever of a and b, primitive descriptors for e's
 * key (its memory descriptors set, the weights in XLA's layout in
 * e->md[MEM_WEI]), runs faster on the calling thread's OpenMP threads, on
 * zeroed buffers, a reorder of the weights included where one needs it,
 * and destroys the other; a when timing fails. *ns_a and *ns_b: the time
 * of a run of each (0 when timing failed). */
dnnl_primitive_desc_t faster_pd(const kernel_entry *e, dnnl_primitive_desc_t a, dnnl_primitive_desc_t b,
    double *ns_a, double *ns_b);

/* finish_entry completes e after its builder made pd (with weights in XLA's
 * layout in e->md[MEM_WEI]): the weights reorder if pd wants another
 * layout, the scratchpad, the primitive. It destroys pd. */
dnnl_status_t finish_entry(kernel_entry *e, dnnl_primitive_desc_t pd);

/* channels_last_md describes a logical [N, C, S...] float32 tensor of rank
 * dims stored as [N, S..., C]. */
dnnl_status_t channels_last_md(dnnl_memory_desc_t *md, int64_t rank, const int64_t *dims);

/* channels_last_md_of is channels_last_md for elements of type dt. */
dnnl_status_t channels_last_md_of(dnnl_memory_desc_t *md, int64_t rank, const int64_t *dims, dnnl_data_type_t dt);

/* hwio_weights_md describes a convolution's weights of type dt, logical
 * [O, C/G, K...] (w: their rank dims) stored as [K..., C/G, O] (XLA's
 * HWIO), in oneDNN's order: [O, C/G, K...] for one group, [G, O/G, C/G,
 * K...] for several; or, with any, in the layout oneDNN prefers. */
dnnl_status_t hwio_weights_md(dnnl_memory_desc_t *md, int64_t rank, const int64_t *w, int64_t groups, dnnl_data_type_t dt,
    int any);

/* window_dims are a convolution's or pooling's stride, dilation and padding
 * in oneDNN's terms (dilation 0 = none). */
typedef struct window_dims {
	dnnl_dims_t stride, dil, lo, hi;
} window_dims;

/* make_window_dims fills w from sp spatial dims of the kernels' attributes
 * (dilation 1 = none). */
void make_window_dims(window_dims *w, int64_t sp, const int64_t *stride, const int64_t *dilation, const int64_t *pad_lo,
    const int64_t *pad_hi);

/* scratchpad_attr makes attributes with a user scratchpad and po (may be
 * NULL) as post-ops. */
dnnl_status_t scratchpad_attr(dnnl_primitive_attr_t *attr, const_dnnl_post_ops_t po);

#endif
