/*
 * harness.h — the small shared part of every benchmark program: a monotonic
 * nanosecond clock, a sink that keeps results alive, the common command line
 * and one CSV row per observation on stdout.
 *
 * A program measures one workload with one variant per process; bench/run.py
 * starts the fresh processes, alternates the variants and summarizes. Every
 * observation is printed, warm-ups included (flagged warmup=1), so the CSV
 * keeps all trials. Diagnostics go to stderr, never to stdout.
 *
 * Usable from C and C++ (the peer programs link the same harness).
 */
#ifndef SEGFS_BENCH_HARNESS_H
#define SEGFS_BENCH_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BENCH_CSV_HEADER                                                       \
	"bench,workload,variant,process,iteration,warmup,metric,value,unit"

typedef struct bench_opts {
	const char *bench;     /* benchmark name, first CSV column */
	const char *workload;  /* --workload */
	const char *variant;   /* --variant (default: the first one offered) */
	unsigned warmups;      /* --warmups, default 1 */
	unsigned iterations;   /* --iterations, default 5 */
	unsigned long process; /* --process, an id chosen by the runner */
} bench_opts;

/* The compiler of the calling translation unit, for --list. */
#if defined(__clang__)
#define BENCH_COMPILER "clang " __clang_version__
#elif defined(__GNUC__) && defined(__cplusplus)
#define BENCH_COMPILER "g++ " __VERSION__
#elif defined(__GNUC__)
#define BENCH_COMPILER "gcc " __VERSION__
#else
#define BENCH_COMPILER "unknown"
#endif

/*
 * Parses the common command line. workloads and variants are NULL-terminated
 * lists of what this program (and this CPU) offers. Handles --list (prints
 * "bench NAME", "compiler TEXT", then "workload NAME" and "variant NAME"
 * lines) and --help, exiting in both cases; exits with status 2 on a bad
 * argument. On return the CSV header has been printed.
 */
#define bench_parse(o, argc, argv, bench, workloads, variants)                 \
	bench_parse_with_compiler(o, argc, argv, bench, workloads, variants,   \
	                          BENCH_COMPILER)
void bench_parse_with_compiler(bench_opts *o, int argc, char **argv,
                               const char *bench, const char *const *workloads,
                               const char *const *variants,
                               const char *compiler);

/* Nanoseconds from CLOCK_MONOTONIC. */
uint64_t bench_now_ns(void);

/* Keeps a result alive: the compiler cannot drop the work that made it. */
void bench_sink(uint64_t value);

/* Prints one CSV row for the current workload and variant. */
void bench_row(const bench_opts *o, unsigned iteration, int warmup,
               const char *metric, double value, const char *unit);

/*
 * Runs o->warmups warm-up and o->iterations measured observations of fn and
 * prints a row for each. fn times what it measures itself and returns the
 * metric value (for example ns per operation); anything it does outside its
 * own timer (checks, resets) is not measured.
 */
void bench_observe(const bench_opts *o, const char *metric, const char *unit,
                   double (*fn)(void *ctx), void *ctx);

/* Prints "bench NAME: message" to stderr and exits with status 1. */
void bench_fail(const char *fmt, ...)
    __attribute__((noreturn, format(printf, 1, 2)));

/* malloc that fails the benchmark instead of returning NULL; 64-byte
 * aligned, size rounded up to a multiple of 64. Free with free(). */
void *bench_alloc(size_t size);

/*
 * A directory of this process's own for the files it writes (segments,
 * peer databases): made on the first call under $TMPDIR (or /tmp), so on the
 * filesystem the benchmark is told to use, and removed with everything in
 * it when the process exits, also after bench_fail().
 */
const char *bench_tmpdir(void);

#ifdef __cplusplus
}
#endif

#endif
