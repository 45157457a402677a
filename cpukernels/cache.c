/*
 * cache.c: the kernel cache (common.h): each kernel's entries, built once
 * per call shape and thread count and found again by key or by call site,
 * and how a call runs its entry: whole (common.c, exec_entry) or as bands
 * (band.c, run_bands). It sits above both: neither calls into it.
 */
#include "common.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

XLA_FFI_Error *run_site(XLA_FFI_CallFrame *f, kernel_cache *c, int64_t site, site_operands take, int *ran) {
	kernel_operands o;
	kernel_entry *e = site_entry(c, site);
	*ran = e != NULL && take(f, e, &o);
	if (!*ran) return NULL;
	return run_entry(f, c, e, o.src->data, o.wei->data, o.dst->data, o.bias ? o.bias->data : NULL,
	    o.res ? o.res->data : NULL);
}

/* hash_bytes is the hash of a key (FNV-1a-like). */
static uint64_t hash_bytes(const void *p, size_t n) {
	/* Eight bytes a step: the keys are KEY_BYTES long, looked up on every
	 * call. */
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ULL;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
		h ^= h >> 29;
	}
	for (; i < n; i++) {
		h = (h ^ b[i]) * 1099511628211ULL;
	}
	return h;
}

static void entry_destroy(kernel_entry *e);

void bands_destroy(kernel_entry *e) {
	for (int i = 0; i < e->nbands; i++) {
		entry_destroy(&e->bands[i].e);
	}
	free(e->bands);
	e->bands = NULL;
	e->nbands = 0;
}

static void entry_destroy(kernel_entry *e) {
	bands_destroy(e);
	if (e->prim) dnnl_primitive_destroy(e->prim);
	if (e->reorder) dnnl_primitive_destroy(e->reorder);
	for (int i = 0; i < MEM_COUNT; i++) {
		if (e->md[i]) dnnl_memory_desc_destroy(e->md[i]);
	}
	memset(e, 0, sizeof *e);
}

dnnl_status_t finish_entry(kernel_entry *e, dnnl_primitive_desc_t pd) {
	dnnl_engine_t eng;
	dnnl_status_t st = kernel_engine(&eng);
	const_dnnl_memory_desc_t wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
	if (st == dnnl_success && wq != NULL && e->md[MEM_WEI] != NULL && !dnnl_memory_desc_equal(wq, e->md[MEM_WEI])) {
		dnnl_primitive_desc_t rpd = NULL;
		st = dnnl_memory_desc_clone(&e->md[MEM_WEI_K], wq);
		if (st == dnnl_success) st = dnnl_reorder_primitive_desc_create(&rpd, e->md[MEM_WEI], eng, wq, eng, NULL);
		if (st == dnnl_success) st = dnnl_primitive_create(&e->reorder, rpd);
		if (rpd) dnnl_primitive_desc_destroy(rpd);
		e->wei_k_bytes = dnnl_memory_desc_get_size(wq);
	}
	const_dnnl_memory_desc_t sq = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
	e->scratch_bytes = sq ? dnnl_memory_desc_get_size(sq) : 0;
	if (st == dnnl_success && e->scratch_bytes) st = dnnl_memory_desc_clone(&e->md[MEM_SCRATCH], sq);
	if (st == dnnl_success) st = dnnl_primitive_create(&e->prim, pd);
	dnnl_primitive_desc_destroy(pd);
	return st;
}

/* lookup returns c's entry for key, building it on a miss; a full cache
 * builds into *spare, which the caller destroys after the call. */
static kernel_entry *lookup(kernel_cache *c, const void *key, int threads, entry_builder build, const void *ctx,
    kernel_entry *spare, dnnl_status_t *st) {
	/* A primitive is made for its thread count: the same call run under a
	 * thread limit is an entry of its own. */
	uint64_t h = hash_bytes(key, KEY_BYTES) ^ ((uint64_t)threads * 0x9E3779B97F4A7C15ULL);
	/* Hits read without the lock: an entry is published once, complete
	 * (the release store below), and never changes or goes away. */
	for (int i = 0; i < CACHE_SLOTS; i++) {
		kernel_entry *e = &c->slots[(h + i) % CACHE_SLOTS];
		if (!__atomic_load_n(&e->used, __ATOMIC_ACQUIRE)) break;
		if (e->threads == threads && memcmp(e->key, key, KEY_BYTES) == 0) return e;
	}
	pthread_mutex_lock(&c->mu);
	for (int i = 0; i < CACHE_SLOTS; i++) {
		kernel_entry *e = &c->slots[(h + i) % CACHE_SLOTS];
		if (e->used && e->threads == threads && memcmp(e->key, key, KEY_BYTES) == 0) {
			pthread_mutex_unlock(&c->mu);
			return e;
		}
		if (!e->used) {
			memcpy(e->key, key, KEY_BYTES);
			e->threads = threads;
			use_threads(threads);
			*st = build(e, ctx);
			if (*st != dnnl_success) {
				entry_destroy(e);
				pthread_mutex_unlock(&c->mu);
				return NULL;
			}
			__atomic_store_n(&e->used, 1, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&c->mu);
			return e;
		}
	}
	pthread_mutex_unlock(&c->mu);
	memset(spare, 0, sizeof *spare);
	memcpy(spare->key, key, KEY_BYTES);
	spare->threads = threads;
	use_threads(threads);
	*st = build(spare, ctx);
	if (*st != dnnl_success) {
		entry_destroy(spare);
		return NULL;
	}
	spare->used = 1;
	return spare;
}

/* site_tag is the tag of site under the calling thread's thread limit;
 * never 0. */
static uint64_t site_tag(int64_t site) {
	uint64_t t = (uint64_t)site ^ (kernel_thread_limit() ? 0x9E3779B97F4A7C15ULL * (uint64_t)kernel_thread_limit() : 0);
	return t ? t : 1;
}

int64_t call_site(XLA_FFI_CallFrame *f) {
	int64_t site = 0;
	return attr_int(f, "site", &site) == 0 ? site : 0;
}

kernel_entry *site_entry(kernel_cache *c, int64_t site) {
	if (site == 0) return NULL;
	uint64_t t = site_tag(site);
	for (int i = 0; i < CACHE_SLOTS; i++) {
		site_slot *s = &c->sites[(t + (uint64_t)i) % CACHE_SLOTS];
		uint64_t got = __atomic_load_n(&s->tag, __ATOMIC_ACQUIRE);
		if (got == 0) return NULL;
		if (got == t) return s->e;
	}
	return NULL;
}

/* note_site records e as site's entry (under the calling thread's thread
 * limit) unless the table is full. */
static void note_site(kernel_cache *c, int64_t site, kernel_entry *e) {
	uint64_t t = site_tag(site);
	pthread_mutex_lock(&c->mu);
	for (int i = 0; i < CACHE_SLOTS; i++) {
		site_slot *s = &c->sites[(t + (uint64_t)i) % CACHE_SLOTS];
		if (s->tag == t) break;
		if (s->tag == 0) {
			s->e = e;
			__atomic_store_n(&s->tag, t, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&c->mu);
}

XLA_FFI_Error *kernel_run(XLA_FFI_CallFrame *f, kernel_cache *c, const void *key, int threads, entry_builder build,
    const void *ctx, int64_t site, void *src, void *wei, void *dst, void *bias, void *res) {
	dnnl_stream_t stream;
	dnnl_status_t st = thread_stream(&stream);
	if (st != dnnl_success) {
		return fail(f, c->kernel, 13, "oneDNN CPU engine or stream: status %d", (int)st);
	}
	kernel_entry spare;
	kernel_entry *e = lookup(c, key, threads, build, ctx, &spare, &st);
	if (e == NULL) {
		return fail(f, c->kernel, 13, "no oneDNN primitive for this call (status %d)", (int)st);
	}
	if (site != 0 && e != &spare) note_site(c, site, e);
	if (e != &spare) return run_entry(f, c, e, src, wei, dst, bias, res);
	/* A spare runs whole: its bands' memory objects would outlive it. */
	XLA_FFI_Error *err = exec_entry(f, c->kernel, e, 1, src, wei, dst, bias, res);
	entry_destroy(&spare);
	return err;
}

XLA_FFI_Error *run_entry(XLA_FFI_CallFrame *f, kernel_cache *c, kernel_entry *e, void *src, void *wei, void *dst,
    void *bias, void *res) {
	if (e->nbands > 1) return run_bands(f, c->kernel, e, src, wei, dst, bias, res);
	return exec_entry(f, c->kernel, e, 0, src, wei, dst, bias, res);
}
