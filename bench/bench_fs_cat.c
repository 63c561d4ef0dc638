/*
 * bench_fs_cat — `cat` latency of one random key, in ns per
 * open+read+read+close, through segfs, tmpfs and the minimal FUSE
 * filesystem (bench_fs_min). bench/fs_bench.py builds the fixtures, mounts
 * them and runs this program through run.py (bench/README.md, "segfs").
 *
 * The paths come from the environment (run.py passes only the common
 * command line):
 *
 *   BENCH_FS_KEYS          a file of "NAME<TAB>VALUE" lines: the file names
 *                          of the keys and their values (the keys are their
 *                          own names: no byte segfs would escape)
 *   BENCH_FS_DIR_SEGFS     the view/ directory of segfs mounted on a
 *                          segment directory of exactly those records
 *   BENCH_FS_DIR_SEGFS_MT  the same, segfs mounted with -o mt
 *   BENCH_FS_DIR_TMPFS     a tmpfs directory with one file NAME per line,
 *                          holding VALUE
 *   BENCH_FS_DIR_MINFUSE   bench_fs_min's mount point: any NAME is a file
 *                          of len(VALUE) bytes of "0123456789abcdef..."
 *
 * One operation is what cat does: open(O_RDONLY), read(4096) returning the
 * whole value, read returning 0 (end of file), close. The timer covers a
 * whole pass of operations; the row is its time divided by the number of
 * operations. Excluded: reading the key file, building the paths, and the
 * check before any timing (every key opened and read once and its bytes
 * compared with VALUE); after each pass, the total of bytes read and the
 * sum of the first byte of each value are compared with what the keys say.
 *
 * Workloads:
 *   warm   262,144 keys drawn uniformly at random (with repetition, fixed
 *          seed) per pass, after the check has touched every key: the
 *          kernel's dentries, inodes and pages are warm, so on FUSE, with
 *          year-long timeouts and no-open, little or nothing reaches the
 *          daemon.
 *   cold   8,192 distinct keys per pass (consecutive slices of one fixed
 *          random permutation); before each pass, outside the timer,
 *          "2" is written to /proc/sys/vm/drop_caches, which drops unused
 *          dentries and inodes (and with them a FUSE inode's pages), so on
 *          FUSE every operation is a LOOKUP and a READ round trip to the
 *          daemon. tmpfs keeps its dentries (they are its storage). Needs
 *          root.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_gen.h"
#include "harness.h"

#define WARM_OPS ((size_t)1 << 18)
#define COLD_OPS ((size_t)1 << 13)
#define BUF_SIZE 4096

static const char *const workload_names[] = {"warm", "cold", NULL};
static const char *const variant_names[] = {"segfs", "segfs-mt", "tmpfs",
                                            "minfuse", NULL};
static const char *const variant_env[] = {
    "BENCH_FS_DIR_SEGFS", "BENCH_FS_DIR_SEGFS_MT", "BENCH_FS_DIR_TMPFS",
    "BENCH_FS_DIR_MINFUSE"};

typedef struct key {
	char *path;      /* DIR/NAME */
	size_t len;      /* the value's length */
	char *value;     /* the bytes the file must hold */
} key;

typedef struct fixture {
	key *keys;
	size_t n;
	int cold;
	size_t *order; /* the keys of every pass, in order */
	size_t ops;    /* per pass */
	size_t passes, pass;
	uint64_t *want_bytes; /* per pass */
	char buf[BUF_SIZE];
} fixture;

static void load_keys(fixture *f, const char *keys_path, const char *dir,
                      int minfuse)
{
	FILE *in = fopen(keys_path, "r");
	if (!in)
		bench_fail("%s: %s", keys_path, strerror(errno));
	size_t cap = 1024;
	f->keys = bench_alloc(cap * sizeof *f->keys);
	f->n = 0;
	char *line = NULL;
	size_t lcap = 0;
	ssize_t got;
	while ((got = getline(&line, &lcap, in)) > 0) {
		if (line[got - 1] == '\n')
			line[--got] = '\0';
		char *tab = strchr(line, '\t');
		if (!tab || tab == line)
			bench_fail("%s: a line is not NAME<TAB>VALUE",
			           keys_path);
		*tab = '\0';
		const char *value = tab + 1;
		size_t len = (size_t)(line + got - value);
		if (len > BUF_SIZE - 1)
			bench_fail("%s: a value longer than %d bytes",
			           keys_path, BUF_SIZE - 1);
		if (f->n == cap) {
			key *k = bench_alloc(2 * cap * sizeof *k);
			memcpy(k, f->keys, cap * sizeof *k);
			free(f->keys);
			f->keys = k;
			cap *= 2;
		}
		key *k = &f->keys[f->n++];
		size_t plen = strlen(dir) + 1 + strlen(line) + 1;
		k->path = bench_alloc(plen);
		snprintf(k->path, plen, "%s/%s", dir, line);
		k->len = len;
		k->value = bench_alloc(len + 1);
		if (minfuse) /* bench_fs_min's contents */
			for (size_t i = 0; i < len; i++)
				k->value[i] = "0123456789abcdef"[i % 16];
		else
			memcpy(k->value, value, len);
	}
	free(line);
	fclose(in);
	if (f->n == 0)
		bench_fail("%s: no keys", keys_path);
}

/* cat: open, read the value, read the end, close. Returns the bytes read,
 * or -1 on an error (errno set). */
static inline ssize_t cat_one(const char *path, char *buf)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, BUF_SIZE);
	if (n >= 0) {
		ssize_t end = read(fd, buf + (n > 0 ? n : 0),
		                   BUF_SIZE - (size_t)(n > 0 ? n : 0));
		if (end != 0)
			n = end < 0 ? -1 : -2;
	}
	int e = errno;
	close(fd);
	errno = e;
	return n;
}

static void check_all(fixture *f)
{
	for (size_t i = 0; i < f->n; i++) {
		const key *k = &f->keys[i];
		ssize_t n = cat_one(k->path, f->buf);
		if (n == -2)
			bench_fail("%s: a second read did not end the file",
			           k->path);
		if (n < 0)
			bench_fail("%s: %s", k->path, strerror(errno));
		if ((size_t)n != k->len || memcmp(f->buf, k->value, k->len))
			bench_fail("%s: read %zd bytes, not the %zu of its "
			           "value",
			           k->path, n, k->len);
	}
}

static void drop_dentries(void)
{
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd < 0 || write(fd, "2\n", 2) != 2)
		bench_fail("cold: cannot write /proc/sys/vm/drop_caches "
		           "(needs root): %s",
		           strerror(errno));
	close(fd);
}

static double observe(void *ctx)
{
	fixture *f = ctx;
	if (f->pass >= f->passes)
		bench_fail("more passes than planned");
	if (f->cold)
		drop_dentries();
	const size_t *order = f->order + f->pass * f->ops;
	const key *keys = f->keys;
	char *buf = f->buf;
	uint64_t bytes = 0, heads = 0;
	int bad = 0;
	uint64_t t0 = bench_now_ns();
	for (size_t i = 0; i < f->ops; i++) {
		ssize_t n = cat_one(keys[order[i]].path, buf);
		bad |= n < 0;
		bytes += (uint64_t)n;
		heads += n > 0 ? (uint8_t)buf[0] : 0;
	}
	uint64_t t1 = bench_now_ns();
	/* The timed loop sums the first byte of each value (cheap). */
	uint64_t want_heads = 0;
	for (size_t i = 0; i < f->ops; i++) {
		const key *k = &keys[order[i]];
		want_heads += k->len ? (uint8_t)k->value[0] : 0;
	}
	if (bad || bytes != f->want_bytes[f->pass] || heads != want_heads)
		bench_fail("pass %zu read wrong bytes (%llu, expected %llu)",
		           f->pass, (unsigned long long)bytes,
		           (unsigned long long)f->want_bytes[f->pass]);
	bench_sink(heads);
	f->pass++;
	return (double)(t1 - t0) / (double)f->ops;
}

int main(int argc, char **argv)
{
	bench_opts o;
	bench_parse(&o, argc, argv, "fs_cat", workload_names, variant_names);
	size_t vi = 0;
	while (strcmp(variant_names[vi], o.variant) != 0)
		vi++;
	const char *keys_path = getenv("BENCH_FS_KEYS");
	const char *dir = getenv(variant_env[vi]);
	if (!keys_path || !*keys_path)
		bench_fail("set BENCH_FS_KEYS to the NAME<TAB>VALUE file");
	if (!dir || !*dir)
		bench_fail("set %s to the directory of variant %s",
		           variant_env[vi], o.variant);

	static fixture f;
	f.cold = strcmp(o.workload, "cold") == 0;
	load_keys(&f, keys_path, dir, strcmp(o.variant, "minfuse") == 0);
	check_all(&f);

	f.passes = (size_t)o.warmups + o.iterations;
	f.ops = f.cold ? COLD_OPS : WARM_OPS;
	if (f.cold && f.ops * f.passes > f.n)
		bench_fail("cold: %zu passes of %zu distinct keys need more "
		           "than the %zu keys",
		           f.passes, f.ops, f.n);
	f.order = bench_alloc(f.ops * f.passes * sizeof *f.order);
	bench_rng rng = {f.cold ? 0xCA7C01D000000001ull
	                        : 0xCA7000A000000001ull};
	if (f.cold) { /* a prefix of a random permutation (Fisher-Yates) */
		size_t *perm = bench_alloc(f.n * sizeof *perm);
		for (size_t i = 0; i < f.n; i++)
			perm[i] = i;
		for (size_t i = 0; i < f.ops * f.passes; i++) {
			size_t j = i + (size_t)bench_rng_below(&rng, f.n - i);
			size_t t = perm[i];
			perm[i] = perm[j];
			perm[j] = t;
			f.order[i] = perm[i];
		}
		free(perm);
	} else {
		for (size_t i = 0; i < f.ops * f.passes; i++)
			f.order[i] = (size_t)bench_rng_below(&rng, f.n);
	}
	f.want_bytes = bench_alloc(f.passes * sizeof *f.want_bytes);
	for (size_t p = 0; p < f.passes; p++) {
		uint64_t b = 0;
		for (size_t i = 0; i < f.ops; i++)
			b += f.keys[f.order[p * f.ops + i]].len;
		f.want_bytes[p] = b;
	}

	bench_observe(&o, "time", "ns/op", observe, &f);
	return 0;
}
