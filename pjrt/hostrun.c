// hostrun.c: see hostrun.h.
#define _GNU_SOURCE
#include "hostrun.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// xs_copy_direct copies b, which lives in host memory (xs_on_cpu), into dst
// with memcpy when it is in row-major order with no tiling and exactly size bytes (the XLA CPU
// plugin's outputs), and returns 1; otherwise it returns 0 and the caller
// uses PJRT_Buffer_ToHostBuffer, which on the CPU plugin costs tens of
// microseconds of dispatch even for a few bytes. b must be ready.
static int xs_copy_direct(const PJRT_Api* api, PJRT_Buffer* b, void* dst, size_t size, size_t rank) {
	PJRT_Buffer_GetMemoryLayout_Args ml = {0};
	ml.buffer = b;
	PJRT_Error* err = xs_PJRT_Buffer_GetMemoryLayout(api, &ml);
	if (err != NULL) { xs_error_free(api, err); return 0; }
	if (ml.layout.type != PJRT_Buffer_MemoryLayout_Type_Tiled || ml.layout.tiled.num_tiles != 0 ||
	    ml.layout.tiled.minor_to_major_size != rank) {
		return 0;
	}
	for (size_t k = 0; k < rank; k++) {
		if (ml.layout.tiled.minor_to_major[k] != (int64_t)(rank - 1 - k)) return 0;
	}
	PJRT_Buffer_OnDeviceSizeInBytes_Args sz = {0};
	sz.buffer = b;
	if ((err = xs_PJRT_Buffer_OnDeviceSizeInBytes(api, &sz)) != NULL) { xs_error_free(api, err); return 0; }
	if (sz.on_device_size_in_bytes != size) return 0;
	PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args dp = {0};
	dp.buffer = b;
	if ((err = xs_PJRT_Buffer_OpaqueDeviceMemoryDataPointer(api, &dp)) != NULL) { xs_error_free(api, err); return 0; }
	if (dp.device_memory_ptr == NULL) return 0;
	memcpy(dst, dp.device_memory_ptr, size);
	return 1;
}

// xs_mono_ns is the host's monotonic clock in nanoseconds.
static int64_t xs_mono_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + (int64_t)ts.tv_nsec;
}

// xs_mark records the instant of step k of a traced execution.
static void xs_mark(xs_run_args* a, int k) {
	if (a->trace) a->trace_ns[k] = xs_mono_ns();
}

// xs_on_cpu reports whether b is in host memory (the CPU plugin's outputs).
static int xs_on_cpu(const PJRT_Api* api, PJRT_Buffer* b) {
	PJRT_Buffer_IsOnCpu_Args oc = {0};
	oc.buffer = b;
	PJRT_Error* err = xs_PJRT_Buffer_IsOnCpu(api, &oc);
	if (err != NULL) { xs_error_free(api, err); return 0; }
	return oc.is_on_cpu;
}

// xs_fetch_one checks output b against what the caller expects and copies
// it into dst: with memcpy when the caller has made sure b is ready and in
// host memory (direct; xs_copy_direct), else by asking the plugin for the
// copy, whose event it leaves in *copy for the caller to await. It does not
// destroy b.
static PJRT_Error* xs_fetch_one(xs_run_args* a, size_t i, PJRT_Buffer* b, int direct, PJRT_Event** copy) {
	const PJRT_Api* api = a->api;
	int32_t type;
	const int64_t* dims;
	size_t rank;
	PJRT_Error* err = xs_buffer_shape(api, b, &type, &dims, &rank);
	if (err != NULL) return err;
	if (type != a->out_type[i] || (int64_t)rank != a->out_rank[i]) {
		a->fail = "output type differs from the one recorded at the first run";
		return NULL;
	}
	int64_t n = 1;
	for (size_t k = 0; k < rank; k++) n *= dims[k];
	if (n == 0) return NULL;
	if (direct && xs_copy_direct(api, b, a->out_data[i], (size_t)a->out_size[i], rank)) return NULL;
	return xs_to_host_start(api, b, a->out_data[i], (size_t)a->out_size[i], rank, copy);
}

// xs_fetch copies the outputs outv of the execution whose completion event
// is complete (NULL: none) into the caller's memory. An output in host
// memory (the CPU plugin's) is copied with memcpy once the execution has
// completed; the others' copies are asked of the plugin before the
// execution is awaited, so that a device plugin queues each right behind
// the execution with no round trip to the host between them, and they are
// awaited together. Every event is awaited before it returns, whatever
// failed: the destinations are the caller's, to be read or freed after.
static PJRT_Error* xs_fetch(xs_run_args* a, PJRT_Buffer** outv, PJRT_Event* complete, PJRT_Event** copies) {
	const PJRT_Api* api = a->api;
	size_t nout = a->num_outputs, i = 0;
	int stage = 2, executed = 0;
	PJRT_Error* err = NULL;
	for (; i < nout; i++) {
		int direct = a->direct && xs_on_cpu(api, outv[i]);
		if (direct && !executed) {
			err = xs_await_free(api, complete);
			executed = 1;
			xs_mark(a, 2);
			if (err != NULL) {
				stage = 1;
				break;
			}
		}
		if ((err = xs_fetch_one(a, i, outv[i], direct, &copies[i])) != NULL || a->fail != NULL) break;
	}
	if (!executed) {
		PJRT_Error* e2 = xs_await_free(api, complete);
		xs_mark(a, 2);
		if (err == NULL && a->fail == NULL && e2 != NULL) {
			err = e2;
			stage = 1;
		} else {
			xs_error_free(api, e2);
		}
	}
	for (size_t k = 0; k < nout; k++) {
		PJRT_Error* e3 = xs_await_free(api, copies[k]);
		copies[k] = NULL;
		if (err == NULL && a->fail == NULL && e3 != NULL) {
			err = e3;
			i = k;
		} else {
			xs_error_free(api, e3);
		}
	}
	xs_mark(a, 3);
	if (err != NULL || a->fail != NULL) {
		a->fail_stage = stage;
		a->fail_index = (int64_t)i;
	}
	return err;
}

// xs_thread_cpu_ns is the CPU time the calling thread has used, in
// nanoseconds (0 where the clock is missing).
static int64_t xs_thread_cpu_ns(void) {
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
	return (int64_t)ts.tv_sec * 1000000000LL + (int64_t)ts.tv_nsec;
}

static PJRT_Error* xs_run_body(xs_run_args* a);

// xs_run does the whole execution of a and, when a->timed, records the CPU
// time its thread spent on it; see xs_run_args.
PJRT_Error* xs_run(xs_run_args* a) {
	a->cpu_ns = 0;
	if (!a->timed) return xs_run_body(a);
	int64_t start = xs_thread_cpu_ns();
	PJRT_Error* err = xs_run_body(a);
	a->cpu_ns = xs_thread_cpu_ns() - start;
	return err;
}

// xs_run_body is xs_run without the timing.
static PJRT_Error* xs_run_body(xs_run_args* a) {
	const PJRT_Api* api = a->api;
	size_t n = a->num_args, nout = a->num_outputs;
	PJRT_Buffer* made[n > 0 ? n : 1];
	PJRT_Event* done[n > 0 ? n : 1];
	PJRT_Buffer* argv[n > 0 ? n : 1];
	int64_t keep[n > 0 ? n : 1];
	PJRT_Buffer* outv[nout > 0 ? nout : 1];
	PJRT_Event* copies[nout > 0 ? nout : 1];
	PJRT_Event* complete = NULL;
	PJRT_Error* err = NULL;
	memset(made, 0, sizeof(made));
	memset(done, 0, sizeof(done));
	memset(outv, 0, sizeof(outv));
	memset(copies, 0, sizeof(copies));
	memset(a->trace_ns, 0, sizeof(a->trace_ns));
	xs_mark(a, 0);

	for (size_t i = 0; i < n; i++) {
		keep[i] = (int64_t)i;
		if (a->in[i] != NULL) {
			argv[i] = a->in[i];
			continue;
		}
		PJRT_Client_BufferFromHostBuffer_Args h = {0};
		h.client = a->client;
		h.data = a->host_data[i];
		h.type = (PJRT_Buffer_Type)a->host_type[i];
		h.dims = a->host_dims + a->host_dim_off[i];
		h.num_dims = (size_t)a->host_rank[i];
		h.host_buffer_semantics = a->zero_copy ? PJRT_HostBufferSemantics_kImmutableZeroCopy
			: PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
		h.device = a->device;
		if ((err = xs_PJRT_Client_BufferFromHostBuffer(api, &h)) != NULL) {
			a->fail_index = (int64_t)i;
			a->fail_stage = 0;
			goto cleanup;
		}
		made[i] = h.buffer;
		done[i] = h.done_with_host_buffer;
		argv[i] = h.buffer;
	}
	xs_mark(a, 1);
	if ((err = xs_execute_start(api, a->le, a->device, a->portable, argv, n, keep, n, outv, &complete, &a->ran_inline)) != NULL) {
		a->fail_stage = 1;
		goto cleanup;
	}
	err = xs_fetch(a, outv, complete, copies);

cleanup:
	for (size_t i = 0; i < nout; i++) xs_buffer_free(api, outv[i]);
	for (size_t i = 0; i < n; i++) xs_buffer_free(api, made[i]);
	// With zero-copy semantics the plugin is done with the host memory
	// once the buffer is gone; wait for it before Go may reuse that memory.
	for (size_t i = 0; i < n; i++) {
		PJRT_Error* e2 = xs_await_free(api, done[i]);
		if (err == NULL) {
			err = e2;
		} else {
			xs_error_free(api, e2);
		}
	}
	return err;
}

// The worker pool of xs_run_all.

#include <stdatomic.h>

// How long a worker spins for its next execution after one, and a caller
// for its workers' executions after its own, before each sleeps on its
// condition variable: executions handed over back to back (the shards of
// one batch, batches one after the other) then cost no futex wake.
#define XS_WORKER_SPIN_NS 100000L
#define XS_CALLER_SPIN_NS 500000L

typedef struct {
	pthread_t th;
	int started;
	_Atomic int claimed;  // by the xs_run_all that hands it an execution
	_Atomic int ready;    // task is set and not yet taken
	_Atomic int done;     // task has run; err is its result
	xs_run_args* task;
	PJRT_Error* err;
	int quit;             // under mu
	void (*limit)(int);   // the pool's
	pthread_mutex_t mu;
	pthread_cond_t ready_cv, done_cv;
} xs_worker;

struct xs_pool {
	int n;
	void (*limit)(int);  // the kernel library's thread limit, or NULL
	pthread_mutex_t start_mu;
	xs_worker* w;
};

static void xs_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

static long xs_since_ns(const struct timespec* t0) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

// xs_spin waits up to ns for *flag to be set and reports whether it was.
static int xs_spin(_Atomic int* flag, long ns) {
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 1;; i++) {
		if (atomic_load_explicit(flag, memory_order_acquire)) return 1;
		xs_cpu_relax();
		if ((i & 63) == 0 && xs_since_ns(&t0) >= ns) return 0;
	}
}

static void* xs_worker_main(void* arg) {
	xs_worker* w = arg;
	for (;;) {
		if (!xs_spin(&w->ready, XS_WORKER_SPIN_NS)) {
			pthread_mutex_lock(&w->mu);
			while (!atomic_load(&w->ready) && !w->quit) pthread_cond_wait(&w->ready_cv, &w->mu);
			int quit = !atomic_load(&w->ready);
			pthread_mutex_unlock(&w->mu);
			if (quit) return NULL;
		}
		atomic_store(&w->ready, 0);
		// A worker runs an execution only beside another (xs_run_all with
		// several): the kernels stay on its thread.
		if (w->limit) w->limit(1);
		w->err = xs_run(w->task);
		if (w->limit) w->limit(0);
		pthread_mutex_lock(&w->mu);
		atomic_store_explicit(&w->done, 1, memory_order_release);
		pthread_cond_signal(&w->done_cv);
		pthread_mutex_unlock(&w->mu);
	}
}

xs_pool* xs_pool_new(int workers, void* limit) {
	if (workers < 0) workers = 0;
	xs_pool* p = calloc(1, sizeof *p);
	if (p == NULL) return NULL;
	p->w = calloc(workers > 0 ? workers : 1, sizeof *p->w);
	if (p->w == NULL) {
		free(p);
		return NULL;
	}
	p->n = workers;
	p->limit = (void (*)(int))limit;
	pthread_mutex_init(&p->start_mu, NULL);
	for (int i = 0; i < workers; i++) {
		p->w[i].limit = p->limit;
		pthread_mutex_init(&p->w[i].mu, NULL);
		pthread_cond_init(&p->w[i].ready_cv, NULL);
		pthread_cond_init(&p->w[i].done_cv, NULL);
	}
	return p;
}

void xs_pool_free(xs_pool* p) {
	if (p == NULL) return;
	for (int i = 0; i < p->n; i++) {
		xs_worker* w = &p->w[i];
		if (!w->started) continue;
		pthread_mutex_lock(&w->mu);
		w->quit = 1;
		pthread_cond_signal(&w->ready_cv);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->th, NULL);
	}
	for (int i = 0; i < p->n; i++) {
		pthread_mutex_destroy(&p->w[i].mu);
		pthread_cond_destroy(&p->w[i].ready_cv);
		pthread_cond_destroy(&p->w[i].done_cv);
	}
	pthread_mutex_destroy(&p->start_mu);
	free(p->w);
	free(p);
}

// xs_claim returns an idle worker of p, started, now claimed by the caller;
// NULL when every one is busy or cannot be started.
static xs_worker* xs_claim(xs_pool* p) {
	for (int i = 0; i < p->n; i++) {
		xs_worker* w = &p->w[i];
		int idle = 0;
		if (!atomic_compare_exchange_strong(&w->claimed, &idle, 1)) continue;
		if (!w->started) {
			pthread_mutex_lock(&p->start_mu);
			if (!w->started) w->started = pthread_create(&w->th, NULL, xs_worker_main, w) == 0;
			pthread_mutex_unlock(&p->start_mu);
			if (!w->started) {
				atomic_store(&w->claimed, 0);
				return NULL;
			}
		}
		return w;
	}
	return NULL;
}

void xs_run_all(xs_pool* p, xs_run_args** a, PJRT_Error** errs, int n, int threads) {
	xs_worker* used[n > 0 ? n : 1];
	for (int i = 1; i < n; i++) {
		xs_worker* w = p != NULL ? xs_claim(p) : NULL;
		used[i] = w;
		if (w == NULL) continue;
		w->task = a[i];
		w->err = NULL;
		atomic_store(&w->done, 0);
		pthread_mutex_lock(&w->mu);
		atomic_store_explicit(&w->ready, 1, memory_order_release);
		pthread_cond_signal(&w->ready_cv);
		pthread_mutex_unlock(&w->mu);
	}
	// Several executions at once each have a core: their kernels stay on
	// their threads rather than fork OpenMP teams that compete for the
	// cores.
	int cap = n > 1 ? 1 : threads;
	void (*limit)(int) = p != NULL && cap > 0 ? p->limit : NULL;
	if (limit) limit(cap);
	if (n > 0) errs[0] = xs_run(a[0]);
	for (int i = 1; i < n; i++) {
		if (used[i] == NULL) errs[i] = xs_run(a[i]);
	}
	if (limit) limit(0);
	for (int i = 1; i < n; i++) {
		xs_worker* w = used[i];
		if (w == NULL) continue;
		if (!xs_spin(&w->done, XS_CALLER_SPIN_NS)) {
			pthread_mutex_lock(&w->mu);
			while (!atomic_load(&w->done)) pthread_cond_wait(&w->done_cv, &w->mu);
			pthread_mutex_unlock(&w->mu);
		}
		errs[i] = w->err;
		atomic_store(&w->claimed, 0);
	}
}
