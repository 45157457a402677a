/* fma_peak measures this CPU's fp32 multiply-add rate: every thread (argv[1],
 * default 1) runs independent chains of vector fused multiply-adds, as many
 * as keep the FMA pipes busy, for about argv[2] seconds (default 0.3), and
 * the program prints the machine's total GFLOP/s (2 FLOPs per lane per
 * FMA), then the GFLOP per second of CPU time of one thread: what a core
 * does while it runs, which other processes on the machine do not lower
 * (they only take turns on the cores). It is an upper bound on what any
 * kernel reaches at the clock the threads run at, which the lscpu estimate
 * of bench/flops.py can understate where the cores boost and overstate
 * where wide vectors lower the clock. bench/flops.py builds and runs it:
 *
 *     gcc -O2 -march=native -pthread bench/fma_peak.c -o fma_peak && ./fma_peak 2
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__AVX512F__)
#define LANES 16
#else
#define LANES 8
#endif
#define CHAINS 16

typedef float vec __attribute__((vector_size(LANES * sizeof(float))));

static double seconds = 0.3;

static double clock_s(clockid_t id) {
	struct timespec t;
	clock_gettime(id, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static double now(void) { return clock_s(CLOCK_MONOTONIC); }

/* work is one thread's result: its FLOPs and the CPU time it ran them in. */
typedef struct {
	double flops, cpu;
} work;

/* run does multiply-adds for about seconds and stores the FLOPs it did and
 * its CPU time in *arg (its chains summed into the result, so that none is
 * optimized away). */
static void *run(void *arg) {
	work *w = arg;
	vec acc[CHAINS], m, a;
	for (int i = 0; i < LANES; i++) {
		m[i] = 0.999999f;
		a[i] = 1e-7f;
	}
	for (int c = 0; c < CHAINS; c++) acc[c] = a * (float)c;
	long rounds = 0;
	double t0 = now(), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	do {
		for (int k = 0; k < 4096; k++) {
#pragma GCC unroll 16
			for (int c = 0; c < CHAINS; c++) acc[c] = acc[c] * m + a;
		}
		rounds++;
	} while (now() - t0 < seconds);
	vec s = acc[0];
	for (int c = 1; c < CHAINS; c++) s += acc[c];
	w->cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	w->flops = (double)rounds * 4096 * CHAINS * LANES * 2 + (s[0] == 12345.f ? 1 : 0);
	return NULL;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 1;
	if (argc > 2) seconds = atof(argv[2]);
	if (n < 1) n = 1;
	pthread_t *t = calloc(n, sizeof *t);
	work *w = calloc(n, sizeof *w);
	double t0 = now();
	for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, run, &w[i]);
	double total = 0, cpu = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		total += w[i].flops;
		cpu += w[i].cpu;
	}
	printf("%.1f %.1f\n", total / (now() - t0) / 1e9, cpu > 0 ? total / cpu / 1e9 : 0);
	return 0;
}
