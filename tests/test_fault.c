/*
 * test_fault.c — every allocation and every system call of the writer, the
 * merge, catalog open, add and replace, and segment open fails in turn
 * (tests/fault.h), SQLite style.
 *
 * The operations: the writer (300 small records to a free name; 360 with
 * values above 4 KiB and a size hint, over an older segment), the merge
 * of three overlapping inputs (tombstones kept; dropped, into the bit
 * profile) and of two (the direct path without the loser tree), segment open +
 * verify + a scan, catalog open (a directory's first catalog; recovery of
 * orphaned temporaries), add, reload with open_segment, replace, and a merge
 * published into the catalog by the writer's publish hook.
 *
 * For each operation and each kind of call (allocation, open, read, write,
 * fsync, rename/link, mmap, ftruncate/fallocate, unlink, stat, flock), a
 * first run counts the calls; then for N = 1, 2, ... the operation runs
 * again on a fresh directory holding the previous data, with the Nth call
 * of that kind failing (ENOMEM for an allocation, EIO for the others, and
 * ENOSPC too for writes and space reservation; EINTR for reads, writes
 * and flock, and reads and writes cut short, which must succeed), until a
 * run reaches no Nth call and succeeds. After every run, with the faults off:
 *
 *   - a failure is a status that fits the fault (KVS_E_NOMEM for an
 *     allocation, KVS_E_IO for a system call) with the same status and a
 *     message in err that names the file (or directory), and for a system
 *     call the error;
 *   - nothing leaked: the allocations made through the wrappers and the
 *     open file descriptors are what they were before the run (in every
 *     build; under AddressSanitizer LeakSanitizer checks too);
 *   - no temporary file is left visible: the directory's dot files are a
 *     subset of the ones the previous data had;
 *   - the previous data is intact: the segments, read through a fresh
 *     open and compared with the oracle's records, and the CATALOG file
 *     byte for byte; after a success, the new data is there instead and
 *     equals the oracle. Where a failure comes after the new data was
 *     published (a rename done, then a directory fsync or an unlink of
 *     inputs failing), the new data must be complete instead.
 *
 * A fault a call may ignore (a space reservation that is only a hint, a
 * stat before a rename that then speaks for itself) can end in success:
 * the result must then be the new data, complete; such runs are counted
 * and printed.
 *
 * The oracle is the records the test generated, kept apart from libkvseg:
 * merged by "the newest input's binding wins" over integer keys.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "fault.h"
#include "kvseg/catalog.h"
#include "kvseg/merge.h"
#include "kvseg/segment.h"
#include "testutil.h"

#define SEED 0xFA017ull

static uint64_t g_seed;
static const char *g_seq = ""; /* the operation under test */
static char g_mode_buf[96];    /* the fault: kind, N and errno */
static const char *g_mode = g_mode_buf;
static char g_tmp[PATH_MAX];

#include "segutil.h" /* after g_seq, g_mode and g_tmp */

/* ---- the oracle's records ------------------------------------------------ */

typedef struct rec {
	unsigned idx; /* the key is "k%08u" of idx: byte order is idx order */
	char key[16];
	size_t key_len;
	kvs_kind kind;
	const uint8_t *value;
	size_t value_len;
} rec;

typedef struct set {
	rec *r;
	size_t n;
	uint8_t *pool;
} set;

/* n records with keys first, first + stride, ...; every tomb_every-th a
 * tombstone (0: none); values of vmin..vmax bytes. */
static set make_set(uint64_t tag, size_t n, unsigned first, unsigned stride,
                    unsigned tomb_every, size_t vmin, size_t vmax)
{
	test_rng rng = test_rng_for(g_seed, tag);
	set s = {calloc(n, sizeof(rec)), n, NULL};
	size_t *len = calloc(n, sizeof *len), total = 0;
	assert_non_null(s.r);
	assert_non_null(len);
	for (size_t i = 0; i < n; i++) {
		len[i] = vmin + (size_t)test_rng_below(&rng, vmax - vmin + 1);
		total += len[i];
	}
	s.pool = malloc(total ? total : 1);
	assert_non_null(s.pool);
	rand_bytes(&rng, s.pool, total);
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		rec *r = &s.r[i];
		r->idx = first + (unsigned)i * stride;
		r->key_len =
		    (size_t)snprintf(r->key, sizeof r->key, "k%08u", r->idx);
		r->kind = tomb_every && i % tomb_every == tomb_every - 1
		              ? KVS_KIND_TOMBSTONE
		              : KVS_KIND_VALUE;
		if (r->kind == KVS_KIND_VALUE) {
			r->value = s.pool + at;
			r->value_len = len[i];
		}
		at += len[i];
	}
	free(len);
	return s;
}

/* inputs[0 .. n) merged, oldest first: the newest binding of each key;
 * without tombstones when drop. The records point into the inputs. */
static set merge_sets(const set *in, size_t n, bool drop)
{
	unsigned top = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < in[i].n; j++)
			if (in[i].r[j].idx > top)
				top = in[i].r[j].idx;
	const rec **slot = calloc((size_t)top + 1, sizeof *slot);
	assert_non_null(slot);
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < in[i].n; j++)
			slot[in[i].r[j].idx] = &in[i].r[j];
	set m = {calloc((size_t)top + 1, sizeof(rec)), 0, NULL};
	assert_non_null(m.r);
	for (unsigned k = 0; k <= top; k++)
		if (slot[k] && !(drop && slot[k]->kind == KVS_KIND_TOMBSTONE))
			m.r[m.n++] = *slot[k];
	free(slot);
	return m;
}

static void free_set(set *s)
{
	free(s->r);
	free(s->pool);
	*s = (set){0};
}

/* ---- segments, with the faults off --------------------------------------- */

/* Writes s to path: KVS_OK, or the first failure. */
static kvs_status write_set(const char *path, const set *s,
                            const kvs_writer_options *o, kvs_error *err)
{
	kvs_writer *w;
	kvs_status st = kvs_writer_open(&w, path, o, err);
	if (st != KVS_OK)
		return st;
	for (size_t i = 0; i < s->n && st == KVS_OK; i++)
		st = kvs_writer_add_bytes(w, s->r[i].key, s->r[i].key_len,
		                          s->r[i].kind, s->r[i].value,
		                          s->r[i].value_len, err);
	if (st == KVS_OK)
		st = kvs_writer_finish(w, err);
	kvs_writer_free(w);
	return st;
}

static void write_ok(const char *dir, const char *name, const set *s,
                     uint64_t seq)
{
	char path[PATH_MAX];
	path_join(path, dir, name);
	kvs_writer_options o = {0};
	o.sequence = seq;
	o.flags = KVS_WRITER_NO_SYNC;
	kvs_error err = {0};
	kvs_status st = write_set(path, s, &o, &err);
	CHECK_ST(st, KVS_OK, "writing %s: %s", path, err.message);
}

/* Does the segment at dir/name hold exactly s's records (and verify)? On
 * no, why says what differs. */
static bool seg_holds(const char *dir, const char *name, const set *s,
                      char *why, size_t cap)
{
	char path[PATH_MAX];
	path_join(path, dir, name);
	kvs_error err = {0};
	kvs_segment *seg = NULL;
	kvs_cursor *c = NULL;
	bool ok = false;
	if (kvs_segment_open(&seg, path, &err) != KVS_OK ||
	    kvs_segment_verify(seg, &err) != KVS_OK) {
		snprintf(why, cap, "%.300s", err.message);
		goto out;
	}
	if (kvs_cursor_open(&c, seg) != KVS_OK ||
	    kvs_cursor_first(c) != KVS_OK) {
		snprintf(why, cap, "%.300s: cursor", path);
		goto out;
	}
	for (size_t i = 0; i < s->n; i++) {
		const rec *r = &s->r[i];
		uint64_t kb;
		const uint8_t *k =
		    kvs_cursor_valid(c) ? kvs_cursor_key(c, &kb) : NULL;
		const uint8_t *v = NULL;
		size_t vl = 0;
		if (!k || kb != 8 * r->key_len ||
		    memcmp(k, r->key, r->key_len) != 0 ||
		    kvs_cursor_kind(c) != r->kind ||
		    kvs_cursor_value(c, &v, &vl) != KVS_OK ||
		    vl != r->value_len ||
		    (vl && memcmp(v, r->value, vl) != 0)) {
			snprintf(why, cap,
			         "%.300s: record %zu (key %s) differs", path, i,
			         r->key);
			goto out;
		}
		if (kvs_cursor_next(c) != KVS_OK) {
			snprintf(why, cap, "%.300s: next after %zu", path, i);
			goto out;
		}
	}
	if (kvs_cursor_valid(c)) {
		snprintf(why, cap, "%.300s: more than %zu records", path, s->n);
		goto out;
	}
	ok = true;
out:
	kvs_cursor_close(c);
	kvs_segment_unref(seg);
	return ok;
}

static void expect_seg(const char *dir, const char *name, const set *s,
                       const char *what)
{
	char why[512];
	if (!seg_holds(dir, name, s, why, sizeof why))
		FAILF("%s: %s", what, why);
}

static bool present(const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct stat sb;
	path_join(path, dir, name);
	return lstat(path, &sb) == 0;
}

/* The names in dir that start with '.', sorted, one per line. */
static void dot_files(const char *dir, char *out, size_t cap)
{
	struct dirent **list;
	int n = scandir(dir, &list, NULL, alphasort);
	CHECK(n >= 0, "scandir %s: %s", dir, strerror(errno));
	size_t len = 0;
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		const char *d = list[i]->d_name;
		if (d[0] == '.' && strcmp(d, ".") != 0 && strcmp(d, "..") != 0)
			len +=
			    (size_t)snprintf(out + len, cap - len, "%s\n", d);
		free(list[i]);
		if (len >= cap)
			len = cap - 1;
	}
	free(list);
}

/* Every line of now is a line of before. */
static bool lines_subset(const char *now, const char *before)
{
	for (const char *p = now; *p;) {
		const char *e = strchr(p, '\n');
		size_t n = (size_t)(e - p);
		bool found = false;
		for (const char *q = before; *q && !found;) {
			const char *f = strchr(q, '\n');
			found = (size_t)(f - q) == n && memcmp(p, q, n) == 0;
			q = f + 1;
		}
		if (!found)
			return false;
		p = e + 1;
	}
	return true;
}

static unsigned open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	CHECK(d != NULL, "opendir /proc/self/fd: %s", strerror(errno));
	unsigned n = 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* ---- catalogs, with the faults off ----------------------------------------
 */

/* The catalog of dir names exactly names[0 .. n), oldest first. */
static bool catalog_names(const char *dir, const char *const *names, size_t n,
                          char *why, size_t cap)
{
	kvs_catalog *c;
	kvs_error err = {0};
	if (kvs_catalog_open_flags(&c, dir, KVS_CATALOG_READ_ONLY, &err) !=
	    KVS_OK) {
		snprintf(why, cap, "reopen: %s", err.message);
		return false;
	}
	bool ok = kvs_catalog_count(c) == n;
	for (size_t i = 0; ok && i < n; i++)
		ok = strcmp(kvs_catalog_entry_at(c, i)->name, names[i]) == 0;
	if (!ok)
		snprintf(why, cap,
		         "the catalog has %zu entries, not the %zu "
		         "expected (first %s)",
		         kvs_catalog_count(c), n,
		         kvs_catalog_count(c) ? kvs_catalog_entry_at(c, 0)->name
		                              : "none");
	kvs_catalog_close(c);
	return ok;
}

static kvs_catalog *catalog_ok(const char *dir)
{
	kvs_catalog *c;
	kvs_error err = {0};
	kvs_status st = kvs_catalog_open(&c, dir, &err);
	CHECK_ST(st, KVS_OK, "open catalog %s: %s", dir, err.message);
	return c;
}

/* ---- the data -------------------------------------------------------------
 */

/* Three overlapping inputs with tombstones (sequences 1, 2, 3), their
 * merges, a small segment and one with values above 4 KiB. */
static set g_in[3], g_keep, g_drop, g_two, g_small, g_big, g_old;
static const char *const g_in_names[3] = {"a", "b", "c"};

/* ---- operations -----------------------------------------------------------
 */

typedef struct fx {
	char dir[PATH_MAX];
	kvs_catalog *cat;
	kvs_segment *in[3];
	uint64_t gen;
	uint8_t *catalog; /* the CATALOG file's bytes before the run */
	size_t catalog_len;
	char dots[1024]; /* dot files before the run */
} fx;

typedef struct op {
	const char *name;
	void (*setup)(fx *f);
	kvs_status (*run)(fx *f, kvs_error *err);
	/* with the outcome: new is whether the new data must be there */
	void (*check)(fx *f, bool new_data);
	/* after a failure that came once the new data was published: is
	 * it there (then check requires it complete)? NULL: never */
	bool (*published)(fx *f);
	/* catalog open: a segment that cannot be read is a bad segment
	 * (kvseg/catalog.h), KVS_E_CORRUPT naming the error */
	bool unreadable_is_bad;
} op;

static void write_inputs(fx *f)
{
	for (unsigned i = 0; i < 3; i++)
		write_ok(f->dir, g_in_names[i], &g_in[i], i + 1);
}

static void expect_inputs(fx *f)
{
	for (unsigned i = 0; i < 3; i++)
		expect_seg(f->dir, g_in_names[i], &g_in[i], "an input");
}

static void open_inputs(fx *f)
{
	for (unsigned i = 0; i < 3; i++) {
		char path[PATH_MAX];
		kvs_error err = {0};
		path_join(path, f->dir, g_in_names[i]);
		kvs_status st = kvs_segment_open(&f->in[i], path, &err);
		CHECK_ST(st, KVS_OK, "%s", err.message);
	}
}

/* A catalog naming a, b, c (the inputs), its handle kept in f. */
static void catalog_of_inputs(fx *f)
{
	write_inputs(f);
	f->cat = catalog_ok(f->dir);
	f->gen = kvs_catalog_generation(f->cat);
	CHECK(kvs_catalog_count(f->cat) == 3, "%zu entries",
	      kvs_catalog_count(f->cat));
}

static void expect_catalog(fx *f, const char *const *names, size_t n)
{
	char why[512];
	if (!catalog_names(f->dir, names, n, why, sizeof why))
		FAILF("%s", why);
}

static void expect_catalog_file_unchanged(fx *f)
{
	char path[PATH_MAX];
	size_t len = 0;
	path_join(path, f->dir, KVS_CATALOG_FILE);
	uint8_t *now = slurp(path, &len);
	CHECK(now && len == f->catalog_len && memcmp(now, f->catalog, len) == 0,
	      "[%s / %s] the CATALOG file changed in a failed run", g_seq,
	      g_mode);
	free(now);
}

/* writer: a small segment to a free name */

static void setup_nothing(fx *f)
{
	(void)f;
}

static kvs_status run_writer_small(fx *f, kvs_error *err)
{
	char path[PATH_MAX];
	path_join(path, f->dir, "w");
	kvs_writer_options o = {0};
	o.sequence = 4;
	return write_set(path, &g_small, &o, err);
}

static void check_writer_small(fx *f, bool new_data)
{
	if (new_data)
		expect_seg(f->dir, "w", &g_small, "the new segment");
	else
		CHECK(!present(f->dir, "w"),
		      "[%s / %s] a failed writer left "
		      "its output",
		      g_seq, g_mode);
}

/* writer: values above 4 KiB with a size hint (space reserved ahead,
 * then released), replacing an older segment at the name */

static void setup_old(fx *f)
{
	write_ok(f->dir, "w", &g_old, 9);
}

static kvs_status run_writer_big(fx *f, kvs_error *err)
{
	char path[PATH_MAX];
	path_join(path, f->dir, "w");
	kvs_writer_options o = {0};
	o.sequence = 5;
	o.size_hint = (uint64_t)4 << 20;
	return write_set(path, &g_big, &o, err);
}

static void check_writer_big(fx *f, bool new_data)
{
	expect_seg(f->dir, "w", new_data ? &g_big : &g_old,
	           new_data ? "the new segment" : "the old segment");
}

/* merge: three inputs, tombstones kept (byte profile) or dropped (into
 * the bit profile) */

static void setup_merge(fx *f)
{
	write_inputs(f);
	open_inputs(f);
}

static kvs_status run_merge(fx *f, bool drop, kvs_error *err)
{
	char path[PATH_MAX];
	path_join(path, f->dir, "m");
	kvs_merge_options o = {0};
	o.output.sequence = 3;
	o.output.profile = drop ? KVS_PROFILE_BIT : KVS_PROFILE_BYTE;
	o.drop_tombstones = o.includes_oldest = drop;
	return kvs_merge(f->in, 3, path, &o, NULL, err);
}

static kvs_status run_merge_keep(fx *f, kvs_error *err)
{
	return run_merge(f, false, err);
}

static kvs_status run_merge_drop(fx *f, kvs_error *err)
{
	return run_merge(f, true, err);
}

/* two inputs take the merge's direct path, without the loser tree */
static kvs_status run_merge_two(fx *f, kvs_error *err)
{
	char path[PATH_MAX];
	path_join(path, f->dir, "m");
	kvs_merge_options o = {0};
	o.output.sequence = 2;
	kvs_segment *in[2] = {f->in[0], f->in[1]};
	return kvs_merge(in, 2, path, &o, NULL, err);
}

static void check_merge(fx *f, bool new_data, const set *want)
{
	if (new_data)
		expect_seg(f->dir, "m", want, "the merge's output");
	else
		CHECK(!present(f->dir, "m"),
		      "[%s / %s] a failed merge left "
		      "its output",
		      g_seq, g_mode);
	expect_inputs(f);
}

static void check_merge_keep(fx *f, bool new_data)
{
	check_merge(f, new_data, &g_keep);
}

static void check_merge_drop(fx *f, bool new_data)
{
	check_merge(f, new_data, &g_drop);
}

static void check_merge_two(fx *f, bool new_data)
{
	check_merge(f, new_data, &g_two);
}

/* segment open, verify and a full scan */

static void setup_segment(fx *f)
{
	write_ok(f->dir, "v", &g_big, 1);
}

static kvs_status run_segment(fx *f, kvs_error *err)
{
	char path[PATH_MAX];
	path_join(path, f->dir, "v");
	kvs_segment *s;
	kvs_cursor *c = NULL;
	kvs_status st = kvs_segment_open(&s, path, err);
	if (st != KVS_OK)
		return st;
	st = kvs_segment_verify(s, err);
	if (st != KVS_OK) { /* verify's messages name no file (segment.h) */
		kvs_error v = *err;
		kvs_error_set(err, st, "%.100s: %s", path, v.message);
	}
	if (st == KVS_OK)
		st = kvs_cursor_open(&c, s);
	if (st == KVS_OK)
		st = kvs_cursor_first(c);
	size_t n = 0;
	while (st == KVS_OK && kvs_cursor_valid(c)) {
		const uint8_t *v;
		size_t vl;
		st = kvs_cursor_value(c, &v, &vl);
		if (st == KVS_OK)
			st = kvs_cursor_next(c);
		n++;
	}
	if (st != KVS_OK && err->status != st)
		kvs_error_set(err, st, "%s: cursor", path);
	else if (st == KVS_OK && n != g_big.n)
		st = kvs_error_set(err, KVS_E_CORRUPT, "%zu records", n);
	kvs_cursor_close(c);
	kvs_segment_unref(s);
	return st;
}

static void check_segment(fx *f, bool new_data)
{
	(void)new_data;
	expect_seg(f->dir, "v", &g_big, "the segment");
}

/* catalog open of a directory of segments without a catalog */

static kvs_status run_catalog_open(fx *f, kvs_error *err)
{
	kvs_catalog *c;
	kvs_status st = kvs_catalog_open(&c, f->dir, err);
	if (st == KVS_OK) {
		if (kvs_catalog_count(c) != 3)
			st = kvs_error_set(err, KVS_E_CORRUPT, "%zu entries",
			                   kvs_catalog_count(c));
		kvs_catalog_close(c);
	}
	return st;
}

static void check_catalog_init(fx *f, bool new_data)
{
	/* a failure may come after the first catalog was published */
	if (new_data || present(f->dir, KVS_CATALOG_FILE))
		expect_catalog(f, g_in_names, 3);
	expect_inputs(f);
}

/* catalog open with recovery: orphaned temporaries of a writer and of the
 * catalog to remove */

static void setup_recover(fx *f)
{
	catalog_of_inputs(f);
	kvs_catalog_close(f->cat);
	f->cat = NULL;
	char path[PATH_MAX];
	static const uint8_t junk[100];
	path_join(path, f->dir, ".d.tmp-AbCdEf");
	spit(path, junk, sizeof junk);
	path_join(path, f->dir, ".CATALOG.tmp-XyZ123");
	spit(path, junk, sizeof junk);
}

static void check_recover(fx *f, bool new_data)
{
	expect_catalog_file_unchanged(f);
	expect_catalog(f, g_in_names, 3);
	expect_inputs(f);
	/* an orphan whose lock cannot be checked (open, flock fail) or
	 * that cannot be removed stays for the next open: only a run
	 * without a fault must remove them all */
	if (new_data && !fault_fired()) {
		char dots[1024];
		dot_files(f->dir, dots, sizeof dots);
		CHECK(dots[0] == '\0', "[%s / %s] open left %s", g_seq, g_mode,
		      dots);
	}
}

/* catalog add */

static void setup_add(fx *f)
{
	write_ok(f->dir, "a", &g_in[0], 1);
	write_ok(f->dir, "b", &g_in[1], 2);
	f->cat = catalog_ok(f->dir);
	f->gen = kvs_catalog_generation(f->cat);
	write_ok(f->dir, "c", &g_in[2], 3);
}

static kvs_status run_add(fx *f, kvs_error *err)
{
	return kvs_catalog_add(f->cat, "c", err);
}

static void check_add(fx *f, bool new_data)
{
	if (new_data) {
		expect_catalog(f, g_in_names, 3);
		EXPECT_U64(kvs_catalog_generation(f->cat), f->gen + 1,
		           "the handle's generation");
	} else {
		expect_catalog_file_unchanged(f);
		expect_catalog(f, g_in_names, 2);
		EXPECT_U64(kvs_catalog_generation(f->cat), f->gen,
		           "the handle's generation after a failed add");
		CHECK(kvs_catalog_count(f->cat) == 2,
		      "[%s / %s] %zu entries "
		      "in the handle",
		      g_seq, g_mode, kvs_catalog_count(f->cat));
	}
	expect_inputs(f);
}

/* catalog reload of another handle's add, then every segment opened
 * through the catalog */

static void setup_reload(fx *f)
{
	setup_add(f);
	kvs_catalog *other = catalog_ok(f->dir);
	kvs_error err = {0};
	kvs_status st = kvs_catalog_add(other, "c", &err);
	CHECK_ST(st, KVS_OK, "add: %s", err.message);
	kvs_catalog_close(other);
}

static kvs_status run_reload(fx *f, kvs_error *err)
{
	kvs_status st = kvs_catalog_reload(f->cat, err);
	for (size_t i = 0; st == KVS_OK && i < kvs_catalog_count(f->cat); i++) {
		kvs_segment *s;
		struct stat sb;
		st = kvs_catalog_open_segment(f->cat, i, &s, &sb, err);
		if (st == KVS_OK)
			kvs_segment_unref(s);
	}
	return st;
}

static void check_reload(fx *f, bool new_data)
{
	/* a failed open_segment comes after the reload */
	if (new_data || kvs_catalog_generation(f->cat) == f->gen + 1) {
		EXPECT_U64(kvs_catalog_generation(f->cat), f->gen + 1,
		           "the handle's generation");
		CHECK(kvs_catalog_count(f->cat) == 3, "[%s / %s] %zu entries",
		      g_seq, g_mode, kvs_catalog_count(f->cat));
	} else {
		CHECK(kvs_catalog_count(f->cat) == 2,
		      "[%s / %s] a failed reload changed the handle: %zu "
		      "entries",
		      g_seq, g_mode, kvs_catalog_count(f->cat));
	}
	expect_catalog_file_unchanged(f);
	expect_catalog(f, g_in_names, 3);
	expect_inputs(f);
}

/* catalog replace: a, b, c by their merge m, the inputs unlinked */

static const char *const g_m[1] = {"m"};

static void setup_replace(fx *f)
{
	catalog_of_inputs(f);
	write_ok(f->dir, "m", &g_keep, 3);
}

static kvs_status run_replace(fx *f, kvs_error *err)
{
	return kvs_catalog_replace(f->cat, f->gen, g_in_names, 3, "m", true,
	                           err);
}

static void check_replace(fx *f, bool new_data)
{
	if (new_data) {
		expect_catalog(f, g_m, 1);
		EXPECT_U64(kvs_catalog_generation(f->cat), f->gen + 1,
		           "the handle's generation");
		for (unsigned i = 0; i < 3; i++)
			CHECK(!present(f->dir, g_in_names[i]),
			      "[%s / %s] input %s left", g_seq, g_mode,
			      g_in_names[i]);
	} else {
		expect_catalog_file_unchanged(f);
		expect_catalog(f, g_in_names, 3);
		EXPECT_U64(kvs_catalog_generation(f->cat), f->gen,
		           "the handle's generation after a failed replace");
		expect_inputs(f);
	}
	expect_seg(f->dir, "m", &g_keep, "the output");
}

/* merge published into the catalog by the writer's publish hook */

static void setup_publish(fx *f)
{
	catalog_of_inputs(f);
	open_inputs(f);
}

/* As kvseg's and segfs's hooks do: a failure after the generation was
 * published (the handle moved to it) keeps the output, and the merge
 * reports the failure once it has ended. */
static kvs_error g_late;

static kvs_status publish_hook(void *ctx, const char *path, kvs_error *err)
{
	fx *f = ctx;
	(void)path;
	kvs_status st =
	    kvs_catalog_replace(f->cat, f->gen, g_in_names, 3, "m", true, err);
	if (st != KVS_OK && kvs_catalog_find(f->cat, "m") >= 0) {
		g_late = *err;
		return KVS_OK;
	}
	return st;
}

static kvs_status run_publish(fx *f, kvs_error *err)
{
	char path[PATH_MAX];
	path_join(path, f->dir, "m");
	kvs_merge_options o = {0};
	o.output.sequence = 3;
	o.output.publish = publish_hook;
	o.output.publish_ctx = f;
	o.drop_tombstones = o.includes_oldest = true;
	g_late = (kvs_error){0};
	kvs_status st = kvs_merge(f->in, 3, path, &o, NULL, err);
	if (st == KVS_OK && g_late.status != KVS_OK) {
		*err = g_late;
		st = g_late.status;
	}
	return st;
}

static void check_publish(fx *f, bool new_data)
{
	if (new_data) {
		expect_catalog(f, g_m, 1);
		expect_seg(f->dir, "m", &g_drop, "the published merge");
		for (unsigned i = 0; i < 3; i++)
			CHECK(!present(f->dir, g_in_names[i]),
			      "[%s / %s] input %s left", g_seq, g_mode,
			      g_in_names[i]);
	} else {
		expect_catalog_file_unchanged(f);
		expect_catalog(f, g_in_names, 3);
		CHECK(!present(f->dir, "m"),
		      "[%s / %s] a failed publication "
		      "left its output",
		      g_seq, g_mode);
		expect_inputs(f);
	}
}

/* what published looks at */

static bool has_w(fx *f)
{
	return present(f->dir, "w");
}

static bool has_big(fx *f)
{
	char why[512];
	return seg_holds(f->dir, "w", &g_big, why, sizeof why);
}

static bool has_m(fx *f)
{
	return present(f->dir, "m");
}

static bool has_abc(fx *f)
{
	char why[512];
	return catalog_names(f->dir, g_in_names, 3, why, sizeof why);
}

static bool has_m_only(fx *f)
{
	char why[512];
	return catalog_names(f->dir, g_m, 1, why, sizeof why);
}

/* ---- the driver ------------------------------------------------------------
 */

static void fx_setup(const op *o, fx *f)
{
	memset(f, 0, sizeof *f);
	path_join(f->dir, g_tmp, o->name);
	CHECK(mkdir(f->dir, 0755) == 0, "mkdir %s: %s", f->dir,
	      strerror(errno));
	o->setup(f);
	char path[PATH_MAX];
	path_join(path, f->dir, KVS_CATALOG_FILE);
	if (present(f->dir, KVS_CATALOG_FILE))
		f->catalog = slurp(path, &f->catalog_len);
	dot_files(f->dir, f->dots, sizeof f->dots);
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void fx_teardown(fx *f)
{
	kvs_catalog_close(f->cat);
	for (unsigned i = 0; i < 3; i++)
		kvs_segment_unref(f->in[i]);
	free(f->catalog);
	nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Are the lines of now that before lacks all ".NAME.replaced" marks of
 * replace or ".NAME.pub-XXXXXX" second names of a published segment,
 * which kvs_catalog_open removes? */
static bool late_marks_only(const char *now, const char *before)
{
	for (const char *p = now; *p;) {
		const char *e = strchr(p, '\n');
		char line[300];
		snprintf(line, sizeof line, "%.*s\n", (int)(e - p), p);
		size_t n = strlen(line);
		if (!lines_subset(line, before) && !strstr(line, ".pub-") &&
		    (n < 10 || strcmp(line + n - 10, ".replaced\n") != 0))
			return false;
		p = e + 1;
	}
	return true;
}

/* The status a fault of kind k must give. */
static kvs_status status_for(enum fault_kind k)
{
	return k == FAULT_ALLOC ? KVS_E_NOMEM : KVS_E_IO;
}

typedef struct tally {
	unsigned long runs, failed, tolerated, late;
	char tolerated_list[512], late_list[512];
} tally;

/* One run of o with the nth call of kind k failing with e (k FAULT_NONE:
 * none); returns whether the armed call was reached. */
static bool run_once(const op *o, enum fault_kind k, unsigned long n, int e,
                     tally *t, unsigned long counts[FAULT_KINDS])
{
	snprintf(g_mode_buf, sizeof g_mode_buf, "%s call %lu fails (%s)",
	         fault_kind_name(k), n,
	         k == FAULT_NONE    ? "-"
	         : e == FAULT_SHORT ? "short"
	                            : strerror(e));
	size_t live = fault_live();
	unsigned fds = open_fds();
	fx f;
	fx_setup(o, &f);
	kvs_error err = {0};
	fault_start(k, n, e);
	kvs_status st = o->run(&f, &err);
	fault_stop();
	bool fired = fault_fired();
	if (counts)
		for (int i = 0; i < FAULT_KINDS; i++)
			counts[i] = fault_count((enum fault_kind)i);
	t->runs++;
	bool new_data = st == KVS_OK;
	if (!fired) {
		if (st != KVS_OK)
			FAILF("no fault, yet %s \"%s\"", test_status_name(st),
			      err.message);
	} else if (st == KVS_OK && (e == EINTR || e == FAULT_SHORT)) {
		/* retried or finished, as it should be */
	} else if (e == FAULT_SHORT) {
		FAILF("%s moved half: %s \"%s\"", fault_fired_call(),
		      test_status_name(st), err.message);
	} else if (st == KVS_OK) {
		t->tolerated++;
		size_t l = strlen(t->tolerated_list);
		snprintf(t->tolerated_list + l, sizeof t->tolerated_list - l,
		         " %s#%lu(%s)", fault_kind_name(k), n,
		         fault_fired_call());
	} else {
		t->failed++;
		if (err.status != st || err.message[0] == '\0')
			FAILF("%s (%s) returned %s but err holds %s \"%s\"",
			      fault_fired_call(), g_mode, test_status_name(st),
			      test_status_name(err.status), err.message);
		bool bad = o->unreadable_is_bad && k != FAULT_ALLOC &&
		           st == KVS_E_CORRUPT &&
		           strstr(err.message, strerror(e));
		if (st != status_for(k) && !bad)
			FAILF("%s failed: %s \"%s\", expected %s",
			      fault_fired_call(), test_status_name(st),
			      err.message, test_status_name(status_for(k)));
		if (!strstr(err.message, f.dir))
			FAILF("%s failed: the message \"%s\" names no file",
			      fault_fired_call(), err.message);
		if (k != FAULT_ALLOC && !strstr(err.message, strerror(e)))
			FAILF("%s failed: the message \"%s\" does not say "
			      "\"%s\"",
			      fault_fired_call(), err.message, strerror(e));
		/* a failure after a rename published the new data may
		 * leave it: it must then be complete */
		if (fault_count_before(FAULT_RENAME) > 0 && o->published &&
		    o->published(&f)) {
			new_data = true;
			t->late++;
			size_t l = strlen(t->late_list);
			snprintf(t->late_list + l, sizeof t->late_list - l,
			         " %s#%lu(%s)", fault_kind_name(k), n,
			         fault_fired_call());
		}
	}
	char dots[1024];
	dot_files(f.dir, dots, sizeof dots);
	if (!lines_subset(dots, f.dots) && late_marks_only(dots, f.dots) &&
	    new_data && fired && f.catalog) {
		/* a replace that published, then could not unlink an input
		 * or its mark, leaves the mark, and a writer that published
		 * through its hook, then could not unlink its temporary
		 * name, that name: for the next open to finish the work */
		kvs_catalog_close(catalog_ok(f.dir));
		dot_files(f.dir, dots, sizeof dots);
		if (!lines_subset(dots, f.dots))
			FAILF("the next open left\n%s", dots);
	}
	if (!lines_subset(dots, f.dots))
		FAILF("%s: a temporary file is left visible:\n%s",
		      test_status_name(st), dots);
	o->check(&f, new_data);
	fx_teardown(&f);
	if (fault_live() != live)
		FAILF("%s: %zu allocations leaked", test_status_name(st),
		      fault_live() - live);
	if (open_fds() != fds)
		FAILF("%s: %d file descriptors leaked", test_status_name(st),
		      (int)open_fds() - (int)fds);
	return fired;
}

static void run_faults(const op *o)
{
	g_seq = o->name;
	tally t = {0};
	unsigned long counts[FAULT_KINDS];
	run_once(o, FAULT_NONE, 0, 0, &t, counts);
	/* EINTR where the core retries, and short transfers, which it must
	 * finish: those runs succeed */
	static const int io_errors[] = {EIO, 0};
	static const int read_errors[] = {EIO, EINTR, FAULT_SHORT, 0};
	static const int write_errors[] = {ENOSPC, EIO, EINTR, FAULT_SHORT, 0};
	static const int space_errors[] = {ENOSPC, EIO, 0};
	static const int lock_errors[] = {EIO, EINTR, 0};
	/* EPERM: link(2) on a filesystem without hard links (FAT, SMB);
	 * EINVAL: renameat2 without RENAME_NOREPLACE. Both have fallbacks */
	static const int rename_errors[] = {EIO, EPERM, EINVAL, 0};
	static const int mem_errors[] = {ENOMEM, 0};
	for (int k = 0; k < FAULT_KINDS; k++) {
		const int *errs = k == FAULT_ALLOC      ? mem_errors
		                  : k == FAULT_READ     ? read_errors
		                  : k == FAULT_WRITE    ? write_errors
		                  : k == FAULT_TRUNCATE ? space_errors
		                  : k == FAULT_LOCK     ? lock_errors
		                  : k == FAULT_RENAME   ? rename_errors
		                                        : io_errors;
		for (; *errs; errs++)
			for (unsigned long n = 1;; n++) {
				if (n > 2 * counts[k] + 16)
					FAILF("more than %lu runs: the "
					      "operation never succeeds",
					      n - 1);
				if (!run_once(o, (enum fault_kind)k, n, *errs,
				              &t, NULL))
					break;
			}
	}
	printf("[ FAULT    ] %s: calls", o->name);
	for (int k = 0; k < FAULT_KINDS; k++)
		if (counts[k])
			printf(" %s %lu", fault_kind_name((enum fault_kind)k),
			       counts[k]);
	printf("; %lu runs, %lu failed, %lu of them after publishing:%s; "
	       "%lu succeeded despite the fault:%s\n",
	       t.runs, t.failed, t.late, t.late_list, t.tolerated,
	       t.tolerated_list);
}

#define OP(name_, setup_, run_, check_, published_, bad_)                      \
	static void test_##name_(void **state)                                 \
	{                                                                      \
		(void)state;                                                   \
		static const op o = {#name_, setup_,     run_,                 \
		                     check_, published_, bad_};                \
		run_faults(&o);                                                \
	}

OP(writer_small, setup_nothing, run_writer_small, check_writer_small, has_w,
   false)
OP(writer_big, setup_old, run_writer_big, check_writer_big, has_big, false)
OP(merge_keep, setup_merge, run_merge_keep, check_merge_keep, has_m, false)
OP(merge_drop, setup_merge, run_merge_drop, check_merge_drop, has_m, false)
OP(merge_two, setup_merge, run_merge_two, check_merge_two, has_m, false)
OP(segment_open, setup_segment, run_segment, check_segment, NULL, false)
OP(catalog_init, write_inputs, run_catalog_open, check_catalog_init, NULL, true)
OP(catalog_recover, setup_recover, run_catalog_open, check_recover, NULL, true)
OP(catalog_add, setup_add, run_add, check_add, has_abc, false)
OP(catalog_reload, setup_reload, run_reload, check_reload, NULL, false)
OP(catalog_replace, setup_replace, run_replace, check_replace, has_m_only,
   false)
OP(merge_publish, setup_publish, run_publish, check_publish, has_m_only, false)

/* A catalog's recovery that runs between a writer's creation of its
 * temporary file and the writer's lock takes the file for an orphan and
 * removes it (as a second segfs's mount did under SIGSTOP in
 * test_recover_marks). The writer must notice that its file lost its name
 * and make another: the segment is then written and complete. */
static char g_race_dir[PATH_MAX];
static unsigned g_race_removed;

static void recover_now(int fd)
{
	(void)fd;
	char before[1024], after[1024];
	dot_files(g_race_dir, before, sizeof before);
	kvs_catalog *c = NULL;
	kvs_error err = {0};
	kvs_status st = kvs_catalog_open(&c, g_race_dir, &err);
	CHECK_ST(st, KVS_OK, "recovery during the race: %s", err.message);
	kvs_catalog_close(c);
	dot_files(g_race_dir, after, sizeof after);
	g_race_removed += strcmp(before, after) != 0;
}

static void test_recovery_before_lock(void **state)
{
	(void)state;
	path_join(g_race_dir, g_tmp, "race");
	if (mkdir(g_race_dir, 0755) != 0)
		FAILF("mkdir %s: %s", g_race_dir, strerror(errno));
	g_race_removed = 0;
	fault_before_flock(recover_now);
	write_ok(g_race_dir, "s.kvs", &g_small, 1);
	fault_before_flock(NULL);
	if (g_race_removed != 1)
		FAILF("the recovery removed the writer's first temporary "
		      "file: %u times", g_race_removed);
	expect_seg(g_race_dir, "s.kvs", &g_small, "written across the race");
	char dots[1024];
	dot_files(g_race_dir, dots, sizeof dots);
	if (strstr(dots, ".s.kvs."))
		FAILF("a temporary file is left: %s", dots);
}

static int group_setup(void **state)
{
	(void)state;
	if (tmpdir_setup("test_fault") != 0)
		return -1;
	/* inputs overlap: a every 2nd key, b every 3rd, c every 5th; each
	 * with tombstones, so replacement and strong delete both show */
	g_in[0] = make_set(1, 300, 0, 2, 7, 0, 40);
	g_in[1] = make_set(2, 200, 1, 3, 5, 0, 40);
	g_in[2] = make_set(3, 120, 0, 5, 4, 0, 300);
	g_keep = merge_sets(g_in, 3, false);
	g_drop = merge_sets(g_in, 3, true);
	g_two = merge_sets(g_in, 2, false);
	g_small = make_set(4, 300, 0, 1, 9, 0, 60);
	g_big = make_set(5, 360, 0, 1, 11, 4097, 9000);
	g_old = make_set(6, 50, 7, 1, 0, 1, 20);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	free(g_keep.r);
	free(g_drop.r);
	free(g_two.r);
	for (unsigned i = 0; i < 3; i++)
		free_set(&g_in[i]);
	free_set(&g_small);
	free_set(&g_big);
	free_set(&g_old);
	return tmpdir_teardown();
}

int main(int argc, char **argv)
{
	test_filter_from_env();
	test_filter_from_argv(argc, argv);
	g_seed = test_seed_from_env("test_fault", SEED);
	const struct CMUnitTest tests[] = {
	    TEST(test_writer_small),    TEST(test_writer_big),
	    TEST(test_merge_keep),      TEST(test_merge_drop),
	    TEST(test_merge_two),       TEST(test_segment_open),
	    TEST(test_catalog_init),    TEST(test_catalog_recover),
	    TEST(test_catalog_add),     TEST(test_catalog_reload),
	    TEST(test_catalog_replace), TEST(test_merge_publish),
	    TEST(test_recovery_before_lock),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
