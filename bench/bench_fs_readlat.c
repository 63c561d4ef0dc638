/*
 * bench_fs_readlat — per-operation latency of `cat` (open, read, read,
 * close) on random keys of a directory, for as long as the caller says.
 * bench/fs_merge_bench.py compiles it (cc -O2, no meson target) and runs
 * it on segfs's view/ while idle and while a merge runs (bench/README.md,
 * "segfs merges").
 *
 *   bench_fs_readlat KEYFILE DIR SEED [MAX_SECONDS]
 *
 * KEYFILE holds "NAME<TAB>VALUE" lines: the view's keys (their own file
 * names) and each key's newest value. The program reads it, prints
 * "ready" on stdout, then waits for one line on stdin ("go"). From then
 * on it does operations until SIGUSR1 (or MAX_SECONDS, default 120, as a
 * safety stop): each on a key drawn uniformly at random (splitmix64 from
 * SEED, with repetition), timed alone with CLOCK_MONOTONIC: open(O_RDONLY),
 * read(4096) returning the value, read returning 0, close. Every value is
 * compared with KEYFILE's (outside the timed span); a failed call or a
 * wrong value counts as an error and is not a latency.
 *
 * At the end it prints one line of key=value pairs on stdout:
 *   ops errors seconds p50_ns p90_ns p99_ns p999_ns max_ns max_at_s mean_ns
 * (max_at_s: when the slowest operation started, in seconds after "go")
 * and the first error, if any, on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct key {
	char *path;
	char *value;
	size_t len;
} key;

static volatile sig_atomic_t stop;

static void on_usr1(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t pct(const uint64_t *v, size_t n, double p)
{
	if (!n)
		return 0;
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

static void die(const char *what)
{
	fprintf(stderr, "bench_fs_readlat: %s: %s\n", what, strerror(errno));
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc < 4 || argc > 5) {
		fprintf(stderr,
		        "usage: bench_fs_readlat KEYFILE DIR SEED [MAX_SECONDS]\n");
		return 2;
	}
	const char *dir = argv[2];
	uint64_t seed = strtoull(argv[3], NULL, 0);
	double max_s = argc == 5 ? strtod(argv[4], NULL) : 120.0;

	FILE *kf = fopen(argv[1], "r");
	if (!kf)
		die(argv[1]);
	size_t n = 0, cap = 0;
	key *keys = NULL;
	char *line = NULL;
	size_t lcap = 0;
	ssize_t len;
	while ((len = getline(&line, &lcap, kf)) > 0) {
		if (line[len - 1] == '\n')
			line[--len] = 0;
		char *tab = strchr(line, '\t');
		if (!tab)
			continue;
		*tab = 0;
		if (n == cap) {
			cap = cap ? cap * 2 : 1 << 16;
			keys = realloc(keys, cap * sizeof *keys);
			if (!keys)
				die("realloc");
		}
		if (asprintf(&keys[n].path, "%s/%s", dir, line) < 0)
			die("asprintf");
		keys[n].value = strdup(tab + 1);
		keys[n].len = strlen(tab + 1);
		n++;
	}
	fclose(kf);
	free(line);
	if (!n) {
		fprintf(stderr, "bench_fs_readlat: no keys in %s\n", argv[1]);
		return 2;
	}

	struct sigaction sa = {0};
	sa.sa_handler = on_usr1;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);

	size_t lcap2 = (size_t)1 << 20, ops = 0, errors = 0;
	uint64_t *lat = malloc(lcap2 * sizeof *lat);
	if (!lat)
		die("malloc");
	char buf[4096], first_error[512] = "";
	uint64_t max_lat = 0, max_at = 0; /* the slowest op, its start */

	printf("ready\n");
	fflush(stdout);
	char go[64];
	if (!fgets(go, sizeof go, stdin))
		return 2;

	uint64_t begin = now_ns(), limit = (uint64_t)(max_s * 1e9);
	while (!stop) {
		const key *k = &keys[splitmix64(&seed) % n];
		uint64_t t0 = now_ns();
		int fd = open(k->path, O_RDONLY);
		ssize_t r1 = -1, r2 = -1;
		int e = 0;
		if (fd >= 0) {
			r1 = read(fd, buf, sizeof buf);
			r2 = r1 >= 0 ? read(fd, buf + (r1 > 0 ? r1 : 0),
			                     sizeof buf - (size_t)(r1 > 0 ? r1 : 0))
			             : -1;
			e = errno;
			close(fd);
		} else {
			e = errno;
		}
		uint64_t t1 = now_ns();
		if (fd < 0 || r1 < 0 || r2 != 0 || (size_t)r1 != k->len ||
		    memcmp(buf, k->value, k->len) != 0) {
			if (!errors++)
				snprintf(first_error, sizeof first_error,
				         "%s: open %d read %zd then %zd (want %zu "
				         "bytes, then 0): %s",
				         k->path, fd, r1, r2, k->len,
				         fd < 0 || r1 < 0 || r2 < 0 ? strerror(e)
				                                    : "wrong value");
		} else {
			if (ops == lcap2) {
				lcap2 *= 2;
				lat = realloc(lat, lcap2 * sizeof *lat);
				if (!lat)
					die("realloc");
			}
			lat[ops++] = t1 - t0;
			if (t1 - t0 > max_lat) {
				max_lat = t1 - t0;
				max_at = t0 - begin;
			}
		}
		if (t1 - begin > limit)
			break;
	}
	double secs = (double)(now_ns() - begin) * 1e-9;
	qsort(lat, ops, sizeof *lat, cmp_u64);
	double sum = 0;
	for (size_t i = 0; i < ops; i++)
		sum += (double)lat[i];
	printf("ops=%zu errors=%zu seconds=%.6f p50_ns=%llu p90_ns=%llu "
	       "p99_ns=%llu p999_ns=%llu max_ns=%llu max_at_s=%.6f "
	       "mean_ns=%.0f\n",
	       ops, errors, secs, (unsigned long long)pct(lat, ops, 0.50),
	       (unsigned long long)pct(lat, ops, 0.90),
	       (unsigned long long)pct(lat, ops, 0.99),
	       (unsigned long long)pct(lat, ops, 0.999),
	       (unsigned long long)(ops ? lat[ops - 1] : 0),
	       (double)max_at * 1e-9,
	       ops ? sum / (double)ops : 0.0);
	fflush(stdout);
	if (errors)
		fprintf(stderr, "bench_fs_readlat: %zu errors; first: %s\n",
		        errors, first_error);
	return 0;
}
