/* fma_peak measures this CPU's fp32 multiply-add rate: every thread (argv[1],
 * default 1) runs independent chains of vector fused multiply-adds, as many
 * as keep the FMA pipes busy, for about argv[2] seconds (default 0.3), and
 * the program prints the machine's total GFLOP/s (2 FLOPs per lane per
 * FMA). It is an upper bound on what any kernel reaches at the clock the
 * threads run at, which the lscpu estimate of bench/flops.py (base clock)
 * can understate where the cores boost. bench/flops.py builds and runs it:
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

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* run does multiply-adds for about seconds and stores the FLOPs it did in
 * *arg (its chains summed into the result, so that none is optimized away). */
static void *run(void *arg) {
	double *flops = arg;
	vec acc[CHAINS], m, a;
	for (int i = 0; i < LANES; i++) {
		m[i] = 0.999999f;
		a[i] = 1e-7f;
	}
	for (int c = 0; c < CHAINS; c++) acc[c] = a * (float)c;
	long rounds = 0;
	double t0 = now();
	do {
		for (int k = 0; k < 4096; k++) {
#pragma GCC unroll 16
			for (int c = 0; c < CHAINS; c++) acc[c] = acc[c] * m + a;
		}
		rounds++;
	} while (now() - t0 < seconds);
	vec s = acc[0];
	for (int c = 1; c < CHAINS; c++) s += acc[c];
	*flops = (double)rounds * 4096 * CHAINS * LANES * 2 + (s[0] == 12345.f ? 1 : 0);
	return NULL;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 1;
	if (argc > 2) seconds = atof(argv[2]);
	if (n < 1) n = 1;
	pthread_t *t = calloc(n, sizeof *t);
	double *flops = calloc(n, sizeof *flops);
	double t0 = now();
	for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, run, &flops[i]);
	double total = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		total += flops[i];
	}
	printf("%.1f\n", total / (now() - t0) / 1e9);
	return 0;
}
