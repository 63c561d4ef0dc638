/*
 * harness.c — clock, sink, command line and CSV rows for the benchmark
 * programs (see harness.h). Nothing here runs inside a timed region except
 * bench_now_ns().
 */
#include "harness.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *program_name = "bench";

/* A volatile store in another translation unit: the value must be computed. */
static volatile uint64_t sink_slot;

void bench_sink(uint64_t value)
{
	sink_slot ^= value;
}

uint64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bench_fail(const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	fprintf(stderr, "%s: ", program_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void *bench_alloc(size_t size)
{
	size_t rounded = (size + 63) / 64 * 64;
	if (rounded < size)
		bench_fail("allocation of %zu bytes overflows", size);
	void *p = aligned_alloc(64, rounded ? rounded : 64);
	if (p == NULL)
		bench_fail("cannot allocate %zu bytes", size);
	return p;
}

static char tmpdir_path[4096];

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void remove_tmpdir(void)
{
	if (tmpdir_path[0] != '\0')
		nftw(tmpdir_path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *bench_tmpdir(void)
{
	if (tmpdir_path[0] != '\0')
		return tmpdir_path;
	const char *base = getenv("TMPDIR");
	if (base == NULL || base[0] == '\0')
		base = "/tmp";
	int len = snprintf(tmpdir_path, sizeof tmpdir_path,
	                   "%s/segfs-bench-XXXXXX", base);
	if (len < 0 || (size_t)len >= sizeof tmpdir_path) {
		tmpdir_path[0] = '\0';
		bench_fail("TMPDIR is too long");
	}
	if (mkdtemp(tmpdir_path) == NULL) {
		int e = errno;
		tmpdir_path[0] = '\0';
		bench_fail("cannot make a directory under %s: %s", base,
		           strerror(e));
	}
	atexit(remove_tmpdir);
	return tmpdir_path;
}

static void usage(FILE *f, const char *bench)
{
	fprintf(f,
	        "usage: %s --workload NAME [--variant NAME] [--warmups W]\n"
	        "          [--iterations N] [--process ID]\n"
	        "       %s --list\n"
	        "Prints one CSV row per observation (benchmark '%s') on "
	        "stdout.\n"
	        "Usually started by bench/run.py; see bench/README.md.\n",
	        program_name, program_name, bench);
}

static void list(const char *bench, const char *const *workloads,
                 const char *const *variants, const char *compiler)
{
	printf("bench %s\n", bench);
	printf("compiler %s\n", compiler);
	for (size_t i = 0; workloads[i] != NULL; i++)
		printf("workload %s\n", workloads[i]);
	for (size_t i = 0; variants[i] != NULL; i++)
		printf("variant %s\n", variants[i]);
}

static int in_list(const char *name, const char *const *names)
{
	for (size_t i = 0; names[i] != NULL; i++)
		if (strcmp(name, names[i]) == 0)
			return 1;
	return 0;
}

static unsigned long parse_number(const char *opt, const char *text,
                                  unsigned long max)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(text, &end, 10);
	if (errno != 0 || end == text || *end != '\0' || text[0] == '-' ||
	    v > max) {
		fprintf(stderr, "%s: %s wants a number up to %lu, not '%s'\n",
		        program_name, opt, max, text);
		exit(2);
	}
	return v;
}

void bench_parse_with_compiler(bench_opts *o, int argc, char **argv,
                               const char *bench, const char *const *workloads,
                               const char *const *variants,
                               const char *compiler)
{
	if (argc > 0 && argv[0] != NULL) {
		const char *slash = strrchr(argv[0], '/');
		program_name = slash ? slash + 1 : argv[0];
	}
	o->bench = bench;
	o->workload = NULL;
	o->variant = variants[0];
	o->warmups = 1;
	o->iterations = 5;
	o->process = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--list") == 0) {
			list(bench, workloads, variants, compiler);
			exit(0);
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout, bench);
			exit(0);
		}
		if (i + 1 >= argc) {
			usage(stderr, bench);
			exit(2);
		}
		const char *v = argv[++i];
		if (strcmp(a, "--workload") == 0)
			o->workload = v;
		else if (strcmp(a, "--variant") == 0)
			o->variant = v;
		else if (strcmp(a, "--warmups") == 0)
			o->warmups = (unsigned)parse_number(a, v, 1000000);
		else if (strcmp(a, "--iterations") == 0)
			o->iterations = (unsigned)parse_number(a, v, 1000000);
		else if (strcmp(a, "--process") == 0)
			o->process = parse_number(a, v, 1000000000);
		else {
			usage(stderr, bench);
			exit(2);
		}
	}
	if (o->workload == NULL || !in_list(o->workload, workloads)) {
		fprintf(stderr, "%s: %s workload%s%s (see --list)\n",
		        program_name, o->workload ? "unknown" : "missing",
		        o->workload ? " " : "", o->workload ? o->workload : "");
		exit(2);
	}
	if (o->variant == NULL || !in_list(o->variant, variants)) {
		fprintf(stderr,
		        "%s: variant '%s' is not available here "
		        "(see --list)\n",
		        program_name, o->variant ? o->variant : "");
		exit(2);
	}
	if (o->iterations == 0) {
		fprintf(stderr, "%s: --iterations must be at least 1\n",
		        program_name);
		exit(2);
	}
	puts(BENCH_CSV_HEADER);
}

void bench_row(const bench_opts *o, unsigned iteration, int warmup,
               const char *metric, double value, const char *unit)
{
	printf("%s,%s,%s,%lu,%u,%d,%s,%.10g,%s\n", o->bench, o->workload,
	       o->variant, o->process, iteration, warmup ? 1 : 0, metric, value,
	       unit);
}

void bench_observe(const bench_opts *o, const char *metric, const char *unit,
                   double (*fn)(void *ctx), void *ctx)
{
	unsigned total = o->warmups + o->iterations;
	for (unsigned i = 0; i < total; i++) {
		double value = fn(ctx);
		int warmup = i < o->warmups;
		/* Measured iterations are numbered from 0 after warm-ups. */
		bench_row(o, warmup ? i : i - o->warmups, warmup, metric, value,
		          unit);
	}
	if (fflush(stdout) != 0)
		bench_fail("cannot write the CSV rows");
}
