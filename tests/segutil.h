/*
 * segutil.h — helpers shared by the tests that write segments into a
 * temporary directory (test_segment.c, test_merge.c, test_catalog.c):
 *
 *  - keys as bit strings: key_bytes, ref_key_cmp (the oracle's order,
 *    written from the format contract, never from libkvseg), key_dup,
 *    rand_bytes and put_be64;
 *  - files and directories: path_join, make_subdir (under g_tmp),
 *    dir_entries, expect_dir_empty, slurp and spit;
 *  - children: child_tmpfs (a private tmpfs) and run_child (fork, then
 *    read what the child found);
 *  - the run's temporary directory: tmpdir_setup(prog) creates g_tmp
 *    (under $TMPDIR, else /tmp), tmpdir_teardown() removes it and all
 *    below it.
 *
 * The file that includes it defines, before the #include, what FAILF
 * needs (const char *g_seq, *g_mode) and char g_tmp[PATH_MAX].
 */
#ifndef SEGFS_SEGUTIL_H
#define SEGFS_SEGUTIL_H

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* ---- keys and the oracle's order ----------------------------------------- */

static inline size_t key_bytes(uint64_t bits)
{
	return (size_t)((bits + 7) / 8);
}

/* Bit strings: the first differing bit decides; a proper prefix sorts
 * first. Whole bytes compare as unsigned bytes (their most significant bit
 * comes first), the rest bit by bit; padding is never looked at. */
static inline int ref_key_cmp(const uint8_t *a, uint64_t a_bits,
                              const uint8_t *b, uint64_t b_bits)
{
	uint64_t n = a_bits < b_bits ? a_bits : b_bits;
	uint64_t whole = n / 8;
	for (uint64_t i = 0; i < whole; i++)
		if (a[i] != b[i])
			return a[i] < b[i] ? -1 : 1;
	for (uint64_t i = whole * 8; i < n; i++) {
		int x = test_msb_bit_at(a, i), y = test_msb_bit_at(b, i);
		if (x != y)
			return x < y ? -1 : 1;
	}
	return (a_bits > b_bits) - (a_bits < b_bits);
}

/* A heap copy of the key of `bits` bits at src, padding cleared. */
static inline uint8_t *key_dup(const uint8_t *src, uint64_t bits)
{
	size_t nb = key_bytes(bits);
	uint8_t *k = calloc(nb ? nb : 1, 1);
	assert_non_null(k);
	if (nb)
		memcpy(k, src, nb);
	if (bits % 8)
		k[nb - 1] &= (uint8_t)(0xFF00u >> (bits % 8));
	return k;
}

static inline void rand_bytes(test_rng *r, uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t x = test_rng_next(r);
		for (size_t k = 0; k < 8 && i + k < n; k++)
			p[i + k] = (uint8_t)(x >> (8 * k));
	}
}

static inline void put_be64(uint8_t *p, uint64_t v)
{
	for (int k = 0; k < 8; k++)
		p[k] = (uint8_t)(v >> (56 - 8 * k));
}

/* ---- files and directories ----------------------------------------------- */

static inline void path_join(char out[PATH_MAX], const char *dir,
                             const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
	assert_true(n > 0 && n < PATH_MAX);
}

/* A fresh directory under this run's temporary directory. */
static inline void make_subdir(char out[PATH_MAX], const char *name)
{
	path_join(out, g_tmp, name);
	assert_int_equal(mkdir(out, 0700), 0);
}

/* Entries in dir other than . and ..; the first one's name in first. */
static inline unsigned dir_entries(const char *dir, char *first,
                                   size_t first_cap)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	unsigned n = 0;
	if (first && first_cap)
		first[0] = '\0';
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (n++ == 0 && first)
			snprintf(first, first_cap, "%s", e->d_name);
	}
	closedir(d);
	return n;
}

static inline void expect_dir_empty(const char *dir, const char *when)
{
	char first[256];
	unsigned n = dir_entries(dir, first, sizeof first);
	if (n != 0)
		FAILF("%s: %u entries left in %s (first: %s)", when, n, dir,
		      first);
}

/* ---- a child on a small filesystem --------------------------------------- */

/*
 * For a forked child: a mount namespace of its own and a tmpfs of `size`
 * (as mount's size=, "256k") on dir, gone when the child exits. 0, or -1
 * with the reason in why where mounting is not permitted (the test then
 * skips).
 */
static inline int child_tmpfs(const char *dir, const char *size, char *why,
                              size_t why_cap)
{
	char opts[32];
	snprintf(opts, sizeof opts, "size=%s", size);
	if (unshare(CLONE_NEWNS) != 0)
		snprintf(why, why_cap, "unshare(CLONE_NEWNS): %s",
		         strerror(errno));
	else if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		snprintf(why, why_cap, "mount(/, MS_REC|MS_PRIVATE): %s",
		         strerror(errno));
	else if (mount("tmpfs", dir, "tmpfs", 0, opts) != 0)
		snprintf(why, why_cap, "mount tmpfs on %.120s: %s", dir,
		         strerror(errno));
	else
		return 0;
	return -1;
}

/*
 * Runs child(fd, ctx) in a forked process, which writes `size` bytes of
 * its findings to fd and exits 0, and reads them into out. The test fails
 * if the child dies or says less.
 */
static inline void run_child(void (*child)(int fd, const void *ctx),
                             const void *ctx, void *out, size_t size)
{
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		child(fds[1], ctx);
		_exit(3);
	}
	close(fds[1]);
	memset(out, 0, size);
	ssize_t got = read(fds[0], out, size);
	close(fds[0]);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (got != (ssize_t)size || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0)
		FAILF("the child died (status 0x%x, read %zd)", status, got);
}

static inline uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		FAILF("cannot open %s: %s", path, strerror(errno));
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	long sz = ftell(f);
	assert_true(sz >= 0);
	rewind(f);
	uint8_t *buf = malloc(sz ? (size_t)sz : 1);
	assert_non_null(buf);
	assert_true(fread(buf, 1, (size_t)sz, f) == (size_t)sz);
	fclose(f);
	*len = (size_t)sz;
	return buf;
}

static inline void spit(const char *path, const uint8_t *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_true(fwrite(data, 1, len, f) == len);
	assert_int_equal(fclose(f), 0);
}

/* ---- the run's temporary directory --------------------------------------- */

static inline int tmpdir_rm_entry(const char *path, const struct stat *sb,
                                  int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Creates g_tmp as $TMPDIR/<prog>.XXXXXX (or under /tmp): 0, or -1 with a
 * message on stderr. */
static inline int tmpdir_setup(const char *prog)
{
	const char *t = getenv("TMPDIR");
	if (t == NULL || *t == '\0')
		t = "/tmp";
	snprintf(g_tmp, sizeof g_tmp, "%s/%s.XXXXXX", t, prog);
	if (mkdtemp(g_tmp) == NULL) {
		fprintf(stderr, "mkdtemp(%s): %s\n", g_tmp, strerror(errno));
		return -1;
	}
	return 0;
}

/* Removes g_tmp and everything below it. */
static inline int tmpdir_teardown(void)
{
	nftw(g_tmp, tmpdir_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

#endif
