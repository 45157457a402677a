/*
 * band.c: a call's bands (common.h) on the band workers.
 *
 * There is one worker per band but one (the calling thread runs the
 * first), started on the first banded call. A worker holds at most one band
 * at a time. A call claims an idle worker, posts a band to it and runs its
 * own; then, for each band it posted, it takes the band back if the worker
 * has not started it, or waits for it (spinning: the worker is running it).
 * A call that finds no idle worker runs the band itself, so calls from
 * several threads at once share the workers without waiting for each other.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "common.h"

/* How long a worker spins for its next band before it sleeps: the bands
 * of one call's next convolutions, and of the next call, come within it. */
#define WORKER_SPIN_NS 200000L

#define MAX_WORKERS (MAX_BANDS - 1)

enum { BAND_IDLE, BAND_POSTED, BAND_RUNNING, BAND_DONE };

typedef struct band_worker {
	pthread_t th;
	_Atomic int owned;  /* claimed by a call */
	_Atomic int state;  /* BAND_* */
	_Atomic int sleeping;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* the posted band */
	XLA_FFI_CallFrame *f;
	const char *kernel;
	const kernel_entry *e;
	void *src, *wei, *dst, *bias, *res;
	XLA_FFI_Error *err;
} band_worker;

static band_worker workers[MAX_WORKERS];
static int nworkers;
static pthread_once_t workers_once = PTHREAD_ONCE_INIT;

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/* take moves w's posted band to BAND_RUNNING; 0 if another took it. */
static int take(band_worker *w) {
	int want = BAND_POSTED;
	return atomic_compare_exchange_strong(&w->state, &want, BAND_RUNNING);
}

static void run_posted(band_worker *w) {
	w->err = exec_entry(w->f, w->kernel, w->e, 0, w->src, w->wei, w->dst, w->bias, w->res);
	atomic_store_explicit(&w->state, BAND_DONE, memory_order_release);
}

/* wait_posted spins up to WORKER_SPIN_NS for a band; 1 if one came. */
static int wait_posted(band_worker *w) {
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 1;; i++) {
		if (atomic_load_explicit(&w->state, memory_order_acquire) == BAND_POSTED) return 1;
		cpu_relax();
		if ((i & 63) == 0 && since_ns(&t0) >= WORKER_SPIN_NS) return 0;
	}
}

static void *worker_main(void *arg) {
	band_worker *w = arg;
	/* A band is one primitive on one thread: no OpenMP team of its own. */
	xserve_cpu_kernels_thread_limit(1);
	for (;;) {
		if (!wait_posted(w)) {
			pthread_mutex_lock(&w->mu);
			atomic_store(&w->sleeping, 1);
			while (atomic_load(&w->state) != BAND_POSTED) pthread_cond_wait(&w->cv, &w->mu);
			atomic_store(&w->sleeping, 0);
			pthread_mutex_unlock(&w->mu);
		}
		if (take(w)) run_posted(w);
	}
	return NULL;
}

static void start_workers(void) {
	int n = kernel_max_bands() - 1;
	if (n > MAX_WORKERS) n = MAX_WORKERS;
	for (int i = 0; i < n; i++) {
		band_worker *w = &workers[i];
		pthread_mutex_init(&w->mu, NULL);
		pthread_cond_init(&w->cv, NULL);
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		int ok = pthread_create(&w->th, &a, worker_main, w) == 0;
		pthread_attr_destroy(&a);
		if (!ok) break;
		nworkers = i + 1;
	}
}

/* claim returns an idle worker, claimed for the caller, or NULL. */
static band_worker *claim(void) {
	for (int i = 0; i < nworkers; i++) {
		int no = 0;
		if (atomic_load_explicit(&workers[i].owned, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_strong(&workers[i].owned, &no, 1)) {
			return &workers[i];
		}
	}
	return NULL;
}

static void post(band_worker *w, XLA_FFI_CallFrame *f, const char *kernel, const kernel_entry *e, void *src, void *wei,
    void *dst, void *bias, void *res) {
	w->f = f;
	w->kernel = kernel;
	w->e = e;
	w->src = src;
	w->wei = wei;
	w->dst = dst;
	w->bias = bias;
	w->res = res;
	w->err = NULL;
	atomic_store_explicit(&w->state, BAND_POSTED, memory_order_release);
	if (atomic_load(&w->sleeping)) {
		pthread_mutex_lock(&w->mu);
		pthread_cond_signal(&w->cv);
		pthread_mutex_unlock(&w->mu);
	}
}

/* collect runs w's band on the calling thread if the worker has not taken
 * it, else waits for it; then frees w. The band's error or NULL. */
static XLA_FFI_Error *collect(band_worker *w) {
	if (take(w)) {
		run_posted(w);
	} else {
		/* The worker is running it. Should it share this thread's core
		 * (a loaded machine), yielding now and then lets it finish. */
		for (unsigned i = 1; atomic_load_explicit(&w->state, memory_order_acquire) != BAND_DONE; i++) {
			cpu_relax();
			if ((i & 1023) == 0) sched_yield();
		}
	}
	XLA_FFI_Error *err = w->err;
	atomic_store_explicit(&w->state, BAND_IDLE, memory_order_relaxed);
	atomic_store_explicit(&w->owned, 0, memory_order_release);
	return err;
}

XLA_FFI_Error *run_bands(XLA_FFI_CallFrame *f, const char *kernel, const kernel_entry *e, char *src, void *wei,
    char *dst, void *bias, char *res) {
	pthread_once(&workers_once, start_workers);
	band_worker *posted[MAX_WORKERS + 1];
	int n = e->nbands;
	XLA_FFI_Error *err = NULL;
	/* Bands 1.. go to idle workers; band 0, and those no worker took, run
	 * here. */
	for (int i = 1; i < n; i++) {
		const kernel_band *b = &e->bands[i];
		posted[i] = claim();
		if (posted[i]) {
			post(posted[i], f, kernel, &b->e, src + b->src_off, wei, dst + b->dst_off, bias,
			    res ? res + b->dst_off : NULL);
		}
	}
	for (int i = 0; i < n; i++) {
		if (i > 0 && posted[i]) continue;
		const kernel_band *b = &e->bands[i];
		XLA_FFI_Error *e2 =
		    exec_entry(f, kernel, &b->e, 0, src + b->src_off, wei, dst + b->dst_off, bias, res ? res + b->dst_off : NULL);
		if (err == NULL) err = e2;
	}
	for (int i = 1; i < n; i++) {
		if (!posted[i]) continue;
		XLA_FFI_Error *e2 = collect(posted[i]);
		if (err == NULL) err = e2;
	}
	return err;
}
