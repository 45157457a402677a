// hostrun.h: the one-call execution path of RunHost (hostrun.c), and the
// worker threads that run several executions at once (RunHostAll).
#ifndef XSERVE_PJRT_HOSTRUN_H_
#define XSERVE_PJRT_HOSTRUN_H_

#include <stddef.h>
#include <stdint.h>

#include "capi.h"

// xs_run_args is one execution: in[i] is a device buffer, or NULL where
// host input i (host_data, host_type, host_rank and its dims at
// host_dims[host_dim_off[i]]) is to be uploaded. out_data[i] receives output
// i, which must have type out_type[i] and out_size[i] bytes.
typedef struct {
	const PJRT_Api* api;
	PJRT_Client* client;
	PJRT_Device* device;
	PJRT_LoadedExecutable* le;
	int portable;  // run on device (a portable executable has no device assignment)
	size_t num_args;
	PJRT_Buffer** in;
	void** host_data;
	const int32_t* host_type;
	const int64_t* host_dims;
	const int64_t* host_dim_off;
	const int64_t* host_rank;
	size_t num_outputs;
	void** out_data;
	const int64_t* out_size;
	const int32_t* out_type;
	const int64_t* out_rank;
	int zero_copy;
	int direct;  // copy ready CPU outputs with memcpy (xs_copy_direct)
	// Set on failure that is not a PJRT_Error: a static message and the
	// index of the argument or output concerned.
	const char* fail;
	int64_t fail_index;
	int fail_stage;  // 0 upload of argument fail_index, 1 execute, 2 download of output fail_index
	// Set to 1 when the execution had completed by the time
	// PJRT_LoadedExecutable_Execute returned: the plugin ran it on the
	// calling thread (CPU client with asynchronous=false, or a program XLA
	// deems too cheap to hand off).
	int ran_inline;
	// timed asks xs_run to set cpu_ns to the CPU time, in nanoseconds, of
	// the thread that ran it, from its start to its end: the core time of
	// the execution where its kernels ran on that thread alone (helper
	// threads of a multi-threaded kernel are not counted). Off by default:
	// a thread CPU clock is a system call (about 1.5 us on a loaded VM).
	int timed;
	int64_t cpu_ns;
	// trace asks xs_run to record in trace_ns, on the host's
	// CLOCK_MONOTONIC (nanoseconds), when it started, when every upload
	// had been handed to the plugin, when the execution had completed and
	// when the outputs were on the host (RunTrace). Off by default.
	int trace;
	int64_t trace_ns[4];
} xs_run_args;

// xs_run does the whole execution of a; see xs_run_args.
PJRT_Error* xs_run(xs_run_args* a);

// xs_pool is a set of worker threads that run executions handed to them
// by xs_run_all: native threads, not Go's, so that handing an execution
// over and back costs a futex wake at most, without the Go scheduler.
typedef struct xs_pool xs_pool;

// xs_pool_new makes a pool of up to workers threads, started on first use;
// NULL if out of memory. limit, when not NULL, is the CPU kernel library's
// xserve_cpu_kernels_thread_limit: xs_run_all sets each thread's limit to
// one around the executions it runs when it runs several, or to threads.
xs_pool* xs_pool_new(int workers, void* limit);

// xs_pool_free stops the pool's threads and frees it. No xs_run_all may be
// running on it.
void xs_pool_free(xs_pool* p);

// xs_run_all runs the n executions a[i], a[0] on the calling thread and
// each other on an idle worker of p (on the calling thread after a[0] when
// none is idle), and returns when all are done; errs[i] receives
// xs_run(a[i])'s result. threads > 0, when n is 1: the execution's kernels
// run on at most that many threads (with several, on one each).
void xs_run_all(xs_pool* p, xs_run_args** a, PJRT_Error** errs, int n, int threads);

#endif
