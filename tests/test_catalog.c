/*
 * test_catalog.c — the catalog (kvseg/catalog.h): which segments of a
 * directory are live, publication, compare-and-swap, recovery.
 *
 * What it proves:
 *   - open of an empty directory publishes an empty catalog (generation
 *     1); open of a directory of segment files without a catalog names
 *     exactly the files that open as segments (not dot files, other
 *     files, directories), ordered by sequence, then name;
 *   - add and replace publish generation + 1, and the CATALOG file is, byte
 *     for byte, what FORMAT.md §10 describes (a reference encoder written
 *     here, entries filled from the segment files' own bytes);
 *   - add refuses a segment whose sequence is not above every live one's
 *     (lower, equal, after a merge's output kept the newest input's, and
 *     after 2^64 - 1) with KVS_E_INVAL naming both sequences, the other
 *     segment and the fix, the CATALOG unchanged; after the adds and
 *     replaces it allowed, a catalog rebuilt from the files has the same
 *     order;
 *   - replace is a compare-and-swap: a stale generation fails with
 *     KVS_E_CONFLICT; inputs that are missing, not consecutive or out of
 *     order, an output that is live, missing or an input, bad names: all
 *     fail with a message, and after every failure the CATALOG file is
 *     unchanged; output NULL removes; unlink_inputs removes the files;
 *     reload sees another handle's publication; at generation 2^64 - 1
 *     add and replace fail with KVS_E_OVERFLOW, and with the CATALOG
 *     removed behind the handle with KVS_E_CORRUPT, the file unchanged;
 *   - recovery: orphaned temporaries of the catalog and of segment writers
 *     are removed by open (other dot files are not); a named segment that
 *     is missing, of another size, or with another header is KVS_E_CORRUPT
 *     naming it; every single-byte change (three ways) and every
 *     truncation of a CATALOG file, appended bytes, and catalogs with a
 *     valid CRC32C but bad contents (counts, name lengths, names,
 *     duplicates, generation 0, version) fail with a message naming the
 *     file;
 *   - crash consistency: a child process loops writing a segment, adding
 *     it, merging all live segments (kvs_merge) and publishing the merge
 *     with replace; it is SIGKILLed after a random delay (0-50 ms), 25
 *     times. After each kill, open gives the generation the child last
 *     reported, or the next one if a publication was under way; every
 *     named segment opens and verifies; the composed view of the named
 *     segments (newest binding wins) equals an oracle computed from the
 *     newest source segment the catalog covers; and no temporary file
 *     remains;
 *   - a symbolic link as CATALOG (to a catalog elsewhere, or dangling) is
 *     refused by open, reload and add with KVS_E_CORRUPT naming it, and
 *     nothing is written through it or in its place;
 *   - no room to publish: on a full tmpfs, a merge whose output fits but
 *     whose catalog file does not (ENOSPC after replace() marked its
 *     inputs), and one whose output does not fit, both fail naming the
 *     file and the error, and leave the directory listing, the catalog
 *     (in memory and reopened) and its segments as they were; with room
 *     the same merge then publishes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvseg/catalog.h"
#include "kvseg/crc32c.h"
#include "kvseg/merge.h"
#include "kvseg/segment.h"
#include "testutil.h"

#define SEED 0xCA7A106ull

static uint64_t g_seed;
static const char *g_seq = "";  /* the case under test, for messages */
static const char *g_mode = ""; /* the step, where a test names one */
static char g_tmp[PATH_MAX];    /* this run's temporary directory */

#include "segutil.h" /* after g_seq, g_mode and g_tmp */

/* A failed call must say why: a status in err and a message. */
#define EXPECT_ERR(st, err, ...)                                               \
	do {                                                                   \
		if ((st) == KVS_OK)                                            \
			FAILF(__VA_ARGS__);                                    \
		if ((err).status != (st) || (err).message[0] == '\0') {        \
			print_error("returned %s but err holds %s \"%s\": ",   \
			            test_status_name(st),                      \
			            test_status_name((err).status),            \
			            (err).message);                            \
			FAILF(__VA_ARGS__);                                    \
		}                                                              \
	} while (0)

#define EXPECT_OK(st, err, ...)                                                \
	do {                                                                   \
		if ((st) != KVS_OK) {                                          \
			print_error("%s \"%s\": ", test_status_name(st),       \
			            (err).message);                            \
			FAILF(__VA_ARGS__);                                    \
		}                                                              \
	} while (0)

static void expect_mentions(const kvs_error *err, const char *what,
                            const char *when)
{
	if (strstr(err->message, what) == NULL)
		FAILF("%s: the message \"%s\" does not name %s", when,
		      err->message, what);
}

/* ---- files and directories ----------------------------------------------- */

static void spill(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		FAILF("cannot create %s: %s", path, strerror(errno));
	assert_true(fwrite(data, 1, len, f) == len);
	assert_int_equal(fclose(f), 0);
}

static bool exists(const char *dir, const char *name)
{
	char p[PATH_MAX];
	struct stat sb;
	path_join(p, dir, name);
	return lstat(p, &sb) == 0;
}

/* The names in dir (dot files too) with their sizes and mtimes, sorted,
 * one a line, into out. */
static void dir_listing(const char *dir, char *out, size_t cap)
{
	struct dirent **list;
	int n = scandir(dir, &list, NULL, alphasort);
	size_t len = 0;
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		char p[PATH_MAX];
		struct stat sb = {0};
		path_join(p, dir, list[i]->d_name);
		(void)lstat(p, &sb);
		if (len < cap)
			len += (size_t)snprintf(
			    out + len, cap - len, "%s %lld %lld.%09ld\n",
			    list[i]->d_name, (long long)sb.st_size,
			    (long long)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec);
		free(list[i]);
	}
	if (n >= 0)
		free(list);
}

/* What open() must remove: a leading '.' and ".tmp-" or ".pub-" (writers'
 * temporaries) or ".replaced" (marks of replace()'s inputs). */
static unsigned count_temporaries(const char *dir, char *first, size_t cap)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] == '.' && (strstr(e->d_name, ".tmp-") ||
		                            strstr(e->d_name, ".pub-") ||
		                            strstr(e->d_name, ".replaced"))) {
			if (n++ == 0 && first)
				snprintf(first, cap, "%s", e->d_name);
		}
	closedir(d);
	return n;
}

/* Files of c's directory named like the crash test's merge outputs
 * ("m...") that c does not name; the first one's name into first. */
static unsigned count_unnamed_outputs(const kvs_catalog *c, char *first,
                                      size_t cap)
{
	DIR *d = opendir(kvs_catalog_dir(c));
	assert_non_null(d);
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		bool named = e->d_name[0] != 'm';
		for (size_t i = 0; !named && i < kvs_catalog_count(c); i++)
			named = !strcmp(kvs_catalog_entry_at(c, i)->name,
			                e->d_name);
		if (!named && n++ == 0)
			snprintf(first, cap, "%s", e->d_name);
	}
	closedir(d);
	return n;
}

/* ---- segments and their content oracle ------------------------------------
 *
 * Source segment s (s >= 1) holds key i of KEYS ("key%04u") when
 * (7i + 3s) mod 5 < 2: a tombstone when (i + s) mod 11 == 0, else the
 * value "s<s>/i<i>". The newest binding of key i among sources 1..S is
 * that of the largest such s <= S.
 */
#define KEYS 256

static bool src_has(uint64_t s, unsigned i)
{
	return (7 * (uint64_t)i + 3 * s) % 5 < 2;
}

static bool src_tomb(uint64_t s, unsigned i)
{
	return ((uint64_t)i + s) % 11 == 0;
}

static int src_value(char *out, size_t cap, uint64_t s, unsigned i)
{
	return snprintf(out, cap, "s%" PRIu64 "/i%u", s, i);
}

/* Writes source segment src at dir/name with the given sequence; returns
 * 0, or -1 with err set (the crash child cannot use cmocka). */
static int try_write_source(const char *dir, const char *name, uint64_t seq,
                            uint64_t src, kvs_error *err)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/%s", dir, name) >= PATH_MAX)
		return -1;
	kvs_writer_options o = {0};
	o.sequence = seq;
	o.flags = KVS_WRITER_NO_SYNC;
	kvs_writer *w;
	if (kvs_writer_open(&w, path, &o, err) != KVS_OK)
		return -1;
	for (unsigned i = 0; i < KEYS; i++) {
		if (!src_has(src, i))
			continue;
		char key[16], val[48];
		int kl = snprintf(key, sizeof key, "key%04u", i);
		int vl = src_value(val, sizeof val, src, i);
		kvs_kind kind =
		    src_tomb(src, i) ? KVS_KIND_TOMBSTONE : KVS_KIND_VALUE;
		if (kvs_writer_add_bytes(w, key, (size_t)kl, kind, val,
		                         (size_t)vl, err) != KVS_OK) {
			kvs_writer_free(w);
			return -1;
		}
	}
	kvs_status st = kvs_writer_finish(w, err);
	kvs_writer_free(w);
	return st == KVS_OK ? 0 : -1;
}

static void write_source(const char *dir, const char *name, uint64_t seq,
                         uint64_t src)
{
	kvs_error err = {0};
	if (try_write_source(dir, name, seq, src, &err) != 0)
		FAILF("writing %s/%s: %s", dir, name, err.message);
}

static void write_segment(const char *dir, const char *name, uint64_t seq)
{
	write_source(dir, name, seq, seq);
}

/* ---- the catalog file, from FORMAT.md §10 ---------------------------------
 */

typedef struct bytes {
	uint8_t *d;
	size_t len, cap;
} bytes;

static void put(bytes *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 64;
		b->d = realloc(b->d, b->cap);
		assert_non_null(b->d);
	}
	if (n)
		memcpy(b->d + b->len, p, n);
	b->len += n;
}

static void put_le(bytes *b, uint64_t v, unsigned n)
{
	uint8_t t[8];
	for (unsigned k = 0; k < n; k++)
		t[k] = (uint8_t)(v >> (8 * k));
	put(b, t, n);
}

static void put_crc(bytes *b)
{
	put_le(b, kvsi_crc32c(0, b->d, b->len), 4);
}

static void ref_header(bytes *b, uint32_t version, uint64_t gen, uint32_t count)
{
	put(b, "\x89KVCAT\r\n", 8);
	put_le(b, version, 4);
	put_le(b, gen, 8);
	put_le(b, count, 4);
}

static void ref_entry(bytes *b, const char *name, size_t name_len, uint64_t seq,
                      uint64_t size, uint32_t crc)
{
	put_le(b, name_len, 2);
	put(b, name, name_len);
	put_le(b, seq, 8);
	put_le(b, size, 8);
	put_le(b, crc, 4);
}

typedef struct seg_facts {
	uint64_t sequence, size;
	uint32_t header_crc;
} seg_facts;

/* What a catalog should record of dir/name, read from its bytes (§5.1). */
static seg_facts facts_of(const char *dir, const char *name)
{
	char p[PATH_MAX];
	path_join(p, dir, name);
	size_t len;
	uint8_t *d = slurp(p, &len);
	assert_true(len >= 128);
	seg_facts f = {test_get_le64(d + 56), len,
	               (uint32_t)(test_get_le64(d + 120) >> 32)};
	free(d);
	return f;
}

/* The CATALOG that names names[0 .. n) (oldest first) at generation gen. */
static bytes ref_catalog(const char *dir, uint64_t gen,
                         const char *const *names, size_t n)
{
	bytes b = {0};
	ref_header(&b, 1, gen, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		seg_facts f = facts_of(dir, names[i]);
		ref_entry(&b, names[i], strlen(names[i]), f.sequence, f.size,
		          f.header_crc);
	}
	put_crc(&b);
	return b;
}

/* The handle and the CATALOG file both say: generation gen, names[]. */
/* c's snapshot: generation gen, the segments names[0 .. n) as they are */
static void expect_entries(const kvs_catalog *c, uint64_t gen,
                           const char *const *names, size_t n, const char *when)
{
	const char *dir = kvs_catalog_dir(c);
	EXPECT_U64(kvs_catalog_generation(c), gen, "%s: generation", when);
	EXPECT_U64(kvs_catalog_count(c), n, "%s: entry count", when);
	for (size_t i = 0; i < n; i++) {
		const kvs_catalog_entry *e = kvs_catalog_entry_at(c, i);
		assert_non_null(e);
		if (strcmp(e->name, names[i]) != 0)
			FAILF("%s: entry %zu is %s, expected %s", when, i,
			      e->name, names[i]);
		seg_facts f = facts_of(dir, names[i]);
		EXPECT_U64(e->sequence, f.sequence, "%s: %s sequence", when,
		           names[i]);
		EXPECT_U64(e->size, f.size, "%s: %s size", when, names[i]);
		EXPECT_U64(e->header_crc, f.header_crc, "%s: %s header CRC",
		           when, names[i]);
		CHECK(kvs_catalog_find(c, names[i]) == (ptrdiff_t)i,
		      "%s: find %s gives %td", when, names[i],
		      kvs_catalog_find(c, names[i]));
	}
	CHECK(kvs_catalog_entry_at(c, n) == NULL, "%s: entry past the end",
	      when);
	CHECK(kvs_catalog_find(c, "no-such-segment") == -1 &&
	          kvs_catalog_find(c, "") == -1,
	      "%s: find of a name not live", when);
}

/* expect_entries, and the directory's CATALOG is that snapshot's */
static void expect_catalog(const kvs_catalog *c, uint64_t gen,
                           const char *const *names, size_t n, const char *when)
{
	const char *dir = kvs_catalog_dir(c);
	expect_entries(c, gen, names, n, when);
	char p[PATH_MAX];
	path_join(p, dir, KVS_CATALOG_FILE);
	size_t len;
	uint8_t *got = slurp(p, &len);
	bytes want = ref_catalog(dir, gen, names, n);
	if (len != want.len || memcmp(got, want.d, len) != 0) {
		size_t at = 0;
		while (at < len && at < want.len && got[at] == want.d[at])
			at++;
		FAILF("%s: CATALOG (%zu bytes) differs from FORMAT.md §10 "
		      "(%zu bytes) at byte %zu",
		      when, len, want.len, at);
	}
	free(got);
	free(want.d);
}

static kvs_catalog *open_ok(const char *dir, const char *when)
{
	kvs_catalog *c = NULL;
	kvs_error err = {0};
	kvs_status st = kvs_catalog_open(&c, dir, &err);
	EXPECT_OK(st, err, "%s: kvs_catalog_open(%s)", when, dir);
	return c;
}

/* ---- basics -------------------------------------------------------------- */

static void test_empty_dir(void **state)
{
	(void)state;
	g_seq = "empty directory";
	char dir[PATH_MAX];
	make_subdir(dir, "empty");
	kvs_catalog *c = open_ok(dir, "first open");
	expect_catalog(c, 1, NULL, 0, "first open");
	CHECK(strcmp(kvs_catalog_dir(c), dir) == 0, "kvs_catalog_dir");
	CHECK(exists(dir, "CATALOG.lock"), "the lock file is created");
	/* the example of FORMAT.md §10.2, CRC32C computed outside libkvseg */
	static const uint8_t example[28] = {
	    0x89, 0x4B, 0x56, 0x43, 0x41, 0x54, 0x0D, 0x0A, 0x01, 0x00,
	    0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	    0x00, 0x00, 0x00, 0x00, 0xBE, 0x80, 0x75, 0x6C};
	char p[PATH_MAX];
	path_join(p, dir, KVS_CATALOG_FILE);
	size_t len;
	uint8_t *d = slurp(p, &len);
	CHECK(len == sizeof example && memcmp(d, example, len) == 0,
	      "the empty catalog is the example of FORMAT.md §10.2");
	free(d);
	kvs_catalog_close(c);
	/* a second open reads it and publishes nothing */
	c = open_ok(dir, "second open");
	expect_catalog(c, 1, NULL, 0, "second open");
	kvs_error err = {0};
	EXPECT_OK(kvs_catalog_reload(c, &err), err, "reload");
	expect_catalog(c, 1, NULL, 0, "reload");
	kvs_catalog_close(c);
	kvs_catalog_close(NULL);

	kvs_status st = kvs_catalog_open(&c, "", &err);
	EXPECT_ERR(st, err, "open of an empty path");
	char missing[PATH_MAX];
	path_join(missing, g_tmp, "no-such-dir");
	memset(&err, 0, sizeof err);
	st = kvs_catalog_open(&c, missing, &err);
	EXPECT_ERR(st, err, "open of a missing directory");
	expect_mentions(&err, missing, "a missing directory");
	CHECK(c == NULL, "no handle after a failed open");
}

/* The catalog file has mode 0644 less the umask, as open(2) gives a new
 * file (the first one and every later one, written to a temporary). */
static void test_file_mode(void **state)
{
	(void)state;
	g_seq = "file mode";
	static const mode_t masks[] = {077, 022, 027};
	mode_t saved = umask(022);
	for (size_t i = 0; i < sizeof masks / sizeof masks[0]; i++) {
		char dir[PATH_MAX], p[PATH_MAX], name[32];
		snprintf(name, sizeof name, "file_mode_%zu", i);
		make_subdir(dir, name);
		write_segment(dir, "s1", 1);
		path_join(p, dir, KVS_CATALOG_FILE);
		mode_t want = 0644 & ~masks[i];
		/* the umask only while the library creates files, so that
		 * a failed assertion leaves the usual one to later tests */
		umask(masks[i]);
		kvs_catalog *c = open_ok(dir, "open");
		umask(022);
		struct stat sb;
		assert_int_equal(lstat(p, &sb), 0);
		CHECK((sb.st_mode & 07777) == want,
		      "umask %03o: the first catalog's mode is %03o, not %03o",
		      (unsigned)masks[i], (unsigned)(sb.st_mode & 07777),
		      (unsigned)want);
		kvs_error err = {0};
		write_segment(dir, "s2", 2);
		umask(masks[i]);
		kvs_status st = kvs_catalog_add(c, "s2", &err);
		umask(022);
		EXPECT_OK(st, err, "add s2");
		assert_int_equal(lstat(p, &sb), 0);
		CHECK((sb.st_mode & 07777) == want,
		      "umask %03o: the catalog's mode after an add is %03o, "
		      "not %03o",
		      (unsigned)masks[i], (unsigned)(sb.st_mode & 07777),
		      (unsigned)want);
		kvs_catalog_close(c);
	}
	umask(saved);
}

static void test_scan_without_catalog(void **state)
{
	(void)state;
	g_seq = "directory without a catalog";
	char dir[PATH_MAX], p[PATH_MAX];
	make_subdir(dir, "scan");
	write_segment(dir, "c", 1);
	write_segment(dir, "a", 3);
	write_segment(dir, "d", 2);
	write_segment(dir, "b", 2);
	write_segment(dir, ".hidden", 0); /* dot files are never named */
	path_join(p, dir, "notes.txt");
	spill(p, "not a segment\n", 14);
	path_join(p, dir, "short");
	spill(p, "", 0);
	path_join(p, dir, "subdir");
	assert_int_equal(mkdir(p, 0700), 0);
	path_join(p, dir, "link");
	assert_int_equal(symlink("a", p), 0);

	kvs_catalog *c = open_ok(dir, "scan");
	const char *want[] = {"c", "b", "d", "a"};
	expect_catalog(c, 1, want, 4, "scan: sequence, then name");
	kvs_catalog_close(c);
	c = open_ok(dir, "reopen");
	expect_catalog(c, 1, want, 4, "reopen");
	kvs_catalog_close(c);
}

/* Opens dir with flags, which must fail with want (naming name) and leave
 * the directory's listing as it was. */
static void expect_first_refused(const char *dir, unsigned flags,
                                 kvs_status want, const char *name,
                                 const char *when)
{
	char before[4096], after[4096];
	dir_listing(dir, before, sizeof before);
	kvs_catalog *c = NULL;
	kvs_error err = {0};
	kvs_status st = kvs_catalog_open_flags(&c, dir, flags, &err);
	EXPECT_ERR(st, err, "%s: open must fail", when);
	EXPECT_ST(st, want, "%s: %s", when, err.message);
	expect_mentions(&err, name, when);
	CHECK(c == NULL, "%s: no handle", when);
	dir_listing(dir, after, sizeof after);
	CHECK(strcmp(before, after) == 0,
	      "%s: nothing was created (before:\n%safter:\n%s)", when, before,
	      after);
}

/*
 * The first catalog of a directory (FORMAT.md §10.4): a file that begins
 * with the segment magic but fails its checks stops it, before anything is
 * created, unless KVS_CATALOG_SKIP_BAD (then the rest is read in memory
 * and nothing is written); under KVS_CATALOG_ONLY_SEGMENTS anything that
 * is not a segment or the directory's own stops it too.
 */
static void test_first_catalog_rule(void **state)
{
	(void)state;
	g_seq = "the first catalog of a directory";
	char dir[PATH_MAX], p[PATH_MAX];
	make_subdir(dir, "first");
	write_segment(dir, "good", 1);
	write_segment(dir, "whole", 2);
	/* a segment cut short: its first 200 bytes */
	char whole[PATH_MAX];
	path_join(whole, dir, "whole");
	size_t len;
	uint8_t *d = slurp(whole, &len);
	path_join(p, dir, "cut");
	spill(p, d, 200);
	free(d);
	expect_first_refused(dir, 0, KVS_E_CORRUPT, "cut",
	                     "a segment cut short");
	expect_first_refused(dir, KVS_CATALOG_MAY_READ_ONLY, KVS_E_CORRUPT,
	                     "cut", "a segment cut short, MAY_READ_ONLY");
	expect_first_refused(dir, KVS_CATALOG_ONLY_SEGMENTS, KVS_E_CORRUPT,
	                     "cut", "a segment cut short, ONLY_SEGMENTS");

	/* skipped: read in memory, nothing written, add refused */
	char before[4096], after[4096];
	dir_listing(dir, before, sizeof before);
	kvs_catalog *c = NULL;
	kvs_error err = {0};
	kvs_status st = kvs_catalog_open_flags(
	    &c, dir, KVS_CATALOG_SKIP_BAD | KVS_CATALOG_ONLY_SEGMENTS, &err);
	EXPECT_OK(st, err, "open with KVS_CATALOG_SKIP_BAD");
	const char *two[] = {"good", "whole"};
	expect_entries(c, 1, two, 2, "the rest, in memory");
	CHECK(kvs_catalog_read_only(c), "a skipping open reads only");
	EXPECT_U64(kvs_catalog_skipped_count(c), 1, "skipped");
	const kvs_catalog_skip *sk = kvs_catalog_skipped_at(c, 0);
	CHECK(sk && strcmp(sk->name, "cut") == 0 &&
	          strstr(sk->why, "200 bytes") && !strstr(sk->why, dir),
	      "the skipped file and why, without its path: %s: %s",
	      sk ? sk->name : "-", sk ? sk->why : "-");
	CHECK(kvs_catalog_skipped_at(c, 1) == NULL, "one skipped");
	memset(&err, 0, sizeof err);
	st = kvs_catalog_add(c, "whole", &err);
	EXPECT_ST(st, KVS_E_INVAL, "add to a skipping open: %s", err.message);
	EXPECT_OK(kvs_catalog_reload(c, &err), err, "reload without a catalog");
	expect_entries(c, 1, two, 2, "the reload keeps the scan");
	dir_listing(dir, after, sizeof after);
	CHECK(strcmp(before, after) == 0, "skipping wrote nothing:\n%s%s",
	      before, after);
	kvs_catalog_close(c);

	/* other files: left alone by a plain open, refused under
	 * ONLY_SEGMENTS (the first by name named) */
	assert_int_equal(unlink(p), 0);
	path_join(p, dir, "notes.txt");
	spill(p, "not a segment\n", 14);
	path_join(p, dir, "empty");
	spill(p, "", 0);
	path_join(p, dir, ".hidden"); /* the directory's own: not looked at */
	spill(p, "x", 1);
	expect_first_refused(dir, KVS_CATALOG_ONLY_SEGMENTS, KVS_E_INVAL,
	                     "empty", "ONLY_SEGMENTS with other files");
	expect_first_refused(dir,
	                     KVS_CATALOG_ONLY_SEGMENTS | KVS_CATALOG_SKIP_BAD,
	                     KVS_E_INVAL, "empty",
	                     "other files are not skipped");
	path_join(p, dir, "empty");
	assert_int_equal(unlink(p), 0);
	expect_first_refused(dir, KVS_CATALOG_ONLY_SEGMENTS, KVS_E_INVAL,
	                     "notes.txt", "ONLY_SEGMENTS with a text file");
	path_join(p, dir, "notes.txt");
	assert_int_equal(unlink(p), 0);
	assert_int_equal(mkdir(p, 0700), 0);
	expect_first_refused(dir, KVS_CATALOG_ONLY_SEGMENTS, KVS_E_INVAL,
	                     "a directory", "ONLY_SEGMENTS with a directory");
	assert_int_equal(rmdir(p), 0);
	assert_int_equal(symlink("good", p), 0);
	expect_first_refused(dir, KVS_CATALOG_ONLY_SEGMENTS, KVS_E_INVAL,
	                     "a symbolic link", "ONLY_SEGMENTS with a link");
	assert_int_equal(unlink(p), 0);

	/* KVS_CATALOG_READ_ONLY on a writable directory: the scan, nothing
	 * written */
	dir_listing(dir, before, sizeof before);
	st = kvs_catalog_open_flags(&c, dir, KVS_CATALOG_READ_ONLY, &err);
	EXPECT_OK(st, err, "open with KVS_CATALOG_READ_ONLY");
	expect_entries(c, 1, two, 2, "read-only scan");
	CHECK(kvs_catalog_read_only(c), "read-only");
	EXPECT_U64(kvs_catalog_skipped_count(c), 0, "nothing skipped");
	const char *in[] = {"good"};
	st = kvs_catalog_replace(c, 1, in, 1, NULL, false, &err);
	EXPECT_ST(st, KVS_E_INVAL, "replace on a read-only open: %s",
	          err.message);
	kvs_catalog_close(c);
	dir_listing(dir, after, sizeof after);
	CHECK(strcmp(before, after) == 0, "READ_ONLY wrote nothing:\n%s%s",
	      before, after);

	/* only segments and the directory's own: a catalog is made */
	c = NULL;
	st = kvs_catalog_open_flags(&c, dir, KVS_CATALOG_ONLY_SEGMENTS, &err);
	EXPECT_OK(st, err, "ONLY_SEGMENTS of segments");
	expect_catalog(c, 1, two, 2, "ONLY_SEGMENTS of segments");
	CHECK(!kvs_catalog_read_only(c), "writable");
	kvs_catalog_close(c);
	/* with a catalog, READ_ONLY reads it and writes nothing */
	dir_listing(dir, before, sizeof before);
	st = kvs_catalog_open_flags(&c, dir, KVS_CATALOG_READ_ONLY, &err);
	EXPECT_OK(st, err, "READ_ONLY with a catalog");
	expect_entries(c, 1, two, 2, "READ_ONLY with a catalog");
	EXPECT_OK(kvs_catalog_reload(c, &err), err, "read-only reload");
	kvs_catalog_close(c);
	dir_listing(dir, after, sizeof after);
	CHECK(strcmp(before, after) == 0, "nothing written:\n%s%s", before,
	      after);

	/* an empty directory: the empty catalog, under ONLY_SEGMENTS too */
	make_subdir(dir, "first-empty");
	st = kvs_catalog_open_flags(&c, dir, KVS_CATALOG_ONLY_SEGMENTS, &err);
	EXPECT_OK(st, err, "an empty directory");
	expect_catalog(c, 1, NULL, 0, "an empty directory");
	kvs_catalog_close(c);
}

static void test_add(void **state)
{
	(void)state;
	g_seq = "add";
	char dir[PATH_MAX], p[PATH_MAX];
	make_subdir(dir, "add");
	kvs_catalog *c = open_ok(dir, "open");
	kvs_error err = {0};
	write_segment(dir, "s1", 1);
	write_segment(dir, "s2", 2);
	EXPECT_OK(kvs_catalog_add(c, "s1", &err), err, "add s1");
	const char *one[] = {"s1"};
	expect_catalog(c, 2, one, 1, "after add s1");
	EXPECT_OK(kvs_catalog_add(c, "s2", &err), err, "add s2");
	const char *two[] = {"s1", "s2"};
	expect_catalog(c, 3, two, 2, "after add s2");

	/* failures change nothing */
	path_join(p, dir, "junk");
	spill(p, "junk junk junk", 14);
	path_join(p, dir, "sub");
	assert_int_equal(mkdir(p, 0700), 0);
	const char *bad[] = {"s1",  "missing", "junk",        "sub",
	                     "",    ".",       "..",          ".s2",
	                     "s/2", "CATALOG", "CATALOG.lock"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memset(&err, 0, sizeof err);
		kvs_status st = kvs_catalog_add(c, bad[i], &err);
		EXPECT_ERR(st, err, "add of \"%s\" must fail", bad[i]);
		if (bad[i][0])
			expect_mentions(&err, bad[i], "a failed add");
		expect_catalog(c, 3, two, 2, "after a failed add");
	}
	char longname[KVS_CATALOG_MAX_NAME + 2];
	memset(longname, 'x', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	kvs_status st = kvs_catalog_add(c, longname, &err);
	EXPECT_ERR(st, err, "add of a 256-byte name");
	st = kvs_catalog_add(c, NULL, &err);
	EXPECT_ERR(st, err, "add of NULL");
	expect_catalog(c, 3, two, 2, "after the failed adds");

	/* a 255-byte name is fine (too long for the writer's temporary) */
	longname[KVS_CATALOG_MAX_NAME] = '\0';
	write_segment(dir, "long", 9);
	char from[PATH_MAX], to[PATH_MAX];
	path_join(from, dir, "long");
	path_join(to, dir, longname);
	assert_int_equal(rename(from, to), 0);
	EXPECT_OK(kvs_catalog_add(c, longname, &err), err, "add long name");
	const char *three[] = {"s1", "s2", longname};
	expect_catalog(c, 4, three, 3, "after adding a 255-byte name");
	kvs_catalog_close(c);
	c = open_ok(dir, "reopen");
	expect_catalog(c, 4, three, 3, "reopen");
	kvs_catalog_close(c);
	CHECK(count_temporaries(dir, NULL, 0) == 0, "no temporaries left");
}

/*
 * add of name, a segment of sequence seq written for it, must fail with
 * KVS_E_INVAL, a message holding why and fix, and leave the catalog (in
 * memory and on disk) at gen with names[0 .. n); the file is then
 * removed, so that a rebuild does not name it.
 */
static void expect_add_refused(kvs_catalog *c, const char *name, uint64_t seq,
                               uint64_t gen, const char *const *names, size_t n,
                               const char *why, const char *fix)
{
	const char *dir = kvs_catalog_dir(c);
	char p[PATH_MAX];
	kvs_error err = {0};
	write_segment(dir, name, seq);
	kvs_status st = kvs_catalog_add(c, name, &err);
	EXPECT_ERR(st, err, "add of %s must fail", name);
	EXPECT_ST(st, KVS_E_INVAL, "add of %s: %s", name, err.message);
	expect_mentions(&err, why, name);
	expect_mentions(&err, fix, name);
	expect_catalog(c, gen, names, n, "after a refused add");
	path_join(p, dir, name);
	assert_int_equal(unlink(p), 0);
}

static void add_ok(kvs_catalog *c, const char *name, uint64_t seq)
{
	kvs_error err = {0};
	write_segment(kvs_catalog_dir(c), name, seq);
	EXPECT_OK(kvs_catalog_add(c, name, &err), err, "add %s (%" PRIu64 ")",
	          name, seq);
}

/*
 * A directory's catalog rebuilt from its files orders them by sequence,
 * then name, so add takes as the newest only a segment whose sequence is
 * above every live one's: a lower or an equal one is refused, naming both
 * sequences, the segment of the higher one and the fix. An empty catalog
 * takes any. replace may keep the newest input's sequence (as kvseg's
 * catalog merge and segfs do), and the catalog rebuilt after such adds
 * and replaces has the same order. Where replace gave the output a lower
 * sequence, the highest live one is named; with it at 2^64 - 1 no add
 * can follow.
 */
static void test_add_sequence(void **state)
{
	(void)state;
	g_seq = "add: sequences in age order";
	char dir[PATH_MAX], p[PATH_MAX];
	make_subdir(dir, "addseq");
	kvs_catalog *c = open_ok(dir, "open");
	kvs_error err = {0};

	/* "z" (0) sorts after "b" (0) by name: only the rule keeps it out */
	add_ok(c, "b", 0);
	const char *b[] = {"b"};
	expect_add_refused(c, "z", 0, 2, b, 1,
	                   "/z: its sequence 0 is not above 0, that of b, "
	                   "the newest live segment",
	                   "--sequence 1");
	add_ok(c, "c", 2);
	const char *bc[] = {"b", "c"};
	expect_add_refused(c, "d", 1, 3, bc, 2,
	                   "/d: its sequence 1 is not above 2, that of c, "
	                   "the newest live segment",
	                   "--sequence 3");
	add_ok(c, "e", 3);

	/* a merge's output keeps the newest input's sequence */
	const char *ce[] = {"c", "e"};
	write_segment(dir, "m", 3);
	EXPECT_OK(kvs_catalog_replace(c, 4, ce, 2, "m", true, &err), err,
	          "replace c e by m (3)");
	const char *bm[] = {"b", "m"};
	expect_add_refused(c, "f", 3, 5, bm, 2,
	                   "/f: its sequence 3 is not above 3, that of m, "
	                   "the newest live segment",
	                   "--sequence 4");
	add_ok(c, "a", 4);
	const char *bma[] = {"b", "m", "a"};
	expect_catalog(c, 6, bma, 3, "after the adds");

	/* the rebuilt catalog has the same order */
	kvs_catalog_close(c);
	path_join(p, dir, KVS_CATALOG_FILE);
	assert_int_equal(unlink(p), 0);
	c = open_ok(dir, "rebuild");
	expect_catalog(c, 1, bma, 3, "the rebuilt catalog");

	/* a replace that lowered the sequence: the highest is named */
	const char *newest[] = {"a"};
	write_segment(dir, "h", 1);
	EXPECT_OK(kvs_catalog_replace(c, 1, newest, 1, "h", true, &err), err,
	          "replace a by h (1)");
	const char *bmh[] = {"b", "m", "h"};
	expect_add_refused(c, "i", 2, 2, bmh, 3,
	                   "/i: its sequence 2 is not above 3, that of m, "
	                   "the live segment of the highest sequence",
	                   "--sequence 4");

	/* nothing follows 2^64 - 1 */
	add_ok(c, "max", UINT64_MAX);
	const char *bmhx[] = {"b", "m", "h", "max"};
	expect_add_refused(c, "j", UINT64_MAX, 3, bmhx, 4,
	                   "/j: its sequence 18446744073709551615 is not "
	                   "above 18446744073709551615",
	                   "no sequence is");
	kvs_catalog_close(c);
	CHECK(count_temporaries(dir, NULL, 0) == 0, "no temporaries left");
}

/* A catalog of s1 .. sN at generation N + 1. */
static kvs_catalog *make_numbered(const char *dir, unsigned n)
{
	kvs_catalog *c = open_ok(dir, "open");
	kvs_error err = {0};
	for (unsigned i = 1; i <= n; i++) {
		char name[16];
		snprintf(name, sizeof name, "s%u", i);
		write_segment(dir, name, i);
		EXPECT_OK(kvs_catalog_add(c, name, &err), err, "add %s", name);
	}
	EXPECT_U64(kvs_catalog_generation(c), n + 1, "setup generation");
	return c;
}

static void test_replace(void **state)
{
	(void)state;
	g_seq = "replace";
	char dir[PATH_MAX];
	make_subdir(dir, "replace");
	kvs_catalog *c = make_numbered(dir, 5);
	kvs_error err = {0};
	write_segment(dir, "m23", 3);
	const char *in23[] = {"s2", "s3"};
	EXPECT_OK(kvs_catalog_replace(c, 6, in23, 2, "m23", false, &err), err,
	          "replace s2 s3 by m23");
	const char *after[] = {"s1", "m23", "s4", "s5"};
	expect_catalog(c, 7, after, 4, "after replace");
	CHECK(exists(dir, "s2") && exists(dir, "s3"),
	      "inputs stay without unlink_inputs");

	/* compare-and-swap: a stale generation conflicts */
	write_segment(dir, "m45", 5);
	const char *in45[] = {"s4", "s5"};
	for (uint64_t g = 5; g <= 8; g++) {
		if (g == 7)
			continue;
		memset(&err, 0, sizeof err);
		kvs_status st =
		    kvs_catalog_replace(c, g, in45, 2, "m45", true, &err);
		EXPECT_ST(st, KVS_E_CONFLICT, "replace at generation %" PRIu64,
		          g);
		EXPECT_ERR(st, err, "conflict message");
		expect_catalog(c, 7, after, 4, "after a conflict");
		CHECK(exists(dir, "s4") && exists(dir, "s5"),
		      "a conflict unlinks nothing");
	}

	/* bad inputs and outputs change nothing */
	write_segment(dir, "m", 6);
	struct {
		const char *in[3];
		size_t n;
		const char *out;
		const char *why;
	} bad[] = {
	    {{"s1", "s4"}, 2, "m", "inputs not consecutive"},
	    {{"s4", "m23"}, 2, "m", "inputs in the wrong order"},
	    {{"s5", "s4"}, 2, "m", "inputs reversed"},
	    {{"s4", "s4"}, 2, "m", "an input twice"},
	    {{"nope"}, 1, "m", "a missing input"},
	    {{"s2"}, 1, "m", "an input no longer live"},
	    {{"s4", "s5", "nope"}, 3, "m", "a missing last input"},
	    {{"s4"}, 1, "s5", "an output that is live"},
	    {{"s4"}, 1, "s4", "an output that is an input"},
	    {{"s4"}, 1, "absent", "a missing output"},
	    {{"s4"}, 1, ".m", "a dot output"},
	    {{"s4"}, 1, "a/b", "an output with a slash"},
	    {{"../s4"}, 1, "m", "an input with a slash"},
	    {{"s4"}, 0, "m", "no inputs"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memset(&err, 0, sizeof err);
		kvs_status st = kvs_catalog_replace(c, 7, bad[i].in, bad[i].n,
		                                    bad[i].out, true, &err);
		EXPECT_ERR(st, err, "replace with %s must fail", bad[i].why);
		CHECK(st != KVS_E_CONFLICT, "%s: not a conflict (%s)",
		      bad[i].why, err.message);
		expect_catalog(c, 7, after, 4, "after a failed replace");
		CHECK(exists(dir, "s4") && exists(dir, "s5") &&
		          exists(dir, "m"),
		      "%s: a failed replace unlinks nothing", bad[i].why);
	}
	kvs_status st = kvs_catalog_replace(c, 7, NULL, 1, "m", false, &err);
	EXPECT_ERR(st, err, "replace with NULL inputs");

	/* the whole catalog by one segment */
	const char *all[] = {"s1", "m23", "s4", "s5"};
	EXPECT_OK(kvs_catalog_replace(c, 7, all, 4, "m", true, &err), err,
	          "replace all by m");
	const char *only[] = {"m"};
	expect_catalog(c, 8, only, 1, "after replacing all");
	for (size_t i = 0; i < 4; i++)
		CHECK(!exists(dir, all[i]), "%s is unlinked", all[i]);
	CHECK(count_temporaries(dir, NULL, 0) == 0, "no temporaries left");
	kvs_catalog_close(c);
}

static void test_remove_and_unlink(void **state)
{
	(void)state;
	g_seq = "removal";
	char dir[PATH_MAX];
	make_subdir(dir, "remove");
	kvs_catalog *c = make_numbered(dir, 5);
	kvs_error err = {0};
	const char *oldest[] = {"s1"};
	EXPECT_OK(kvs_catalog_replace(c, 6, oldest, 1, NULL, true, &err), err,
	          "remove s1");
	const char *a[] = {"s2", "s3", "s4", "s5"};
	expect_catalog(c, 7, a, 4, "after removing s1");
	CHECK(!exists(dir, "s1"), "s1 is unlinked");

	const char *mid[] = {"s3", "s4"};
	EXPECT_OK(kvs_catalog_replace(c, 7, mid, 2, NULL, false, &err), err,
	          "remove s3 s4");
	const char *b[] = {"s2", "s5"};
	expect_catalog(c, 8, b, 2, "after removing s3 s4");
	CHECK(exists(dir, "s3") && exists(dir, "s4"), "kept on disk");

	/* a removed file can come back as the newest when its sequence is
	 * above every live one's: not s3 (3) after s5 (5), but s5 after s2 */
	kvs_status st = kvs_catalog_add(c, "s3", &err);
	EXPECT_ERR(st, err, "add s3 again after s5");
	EXPECT_ST(st, KVS_E_INVAL, "add s3 again after s5");
	expect_catalog(c, 8, b, 2, "after the refused add");
	const char *newest[] = {"s5"};
	EXPECT_OK(kvs_catalog_replace(c, 8, newest, 1, NULL, false, &err), err,
	          "remove s5");
	EXPECT_OK(kvs_catalog_add(c, "s5", &err), err, "add s5 again");
	expect_catalog(c, 10, b, 2, "after adding s5 again");

	EXPECT_OK(kvs_catalog_replace(c, 10, b, 2, NULL, true, &err), err,
	          "remove all");
	expect_catalog(c, 11, NULL, 0, "after removing all");
	CHECK(!exists(dir, "s2") && !exists(dir, "s5"), "all unlinked");
	CHECK(exists(dir, "s3") && exists(dir, "s4"),
	      "s3 and s4 were never unlinked");
	kvs_catalog_close(c);
	c = open_ok(dir, "reopen");
	expect_catalog(c, 11, NULL, 0, "reopen");
	kvs_catalog_close(c);
}

static void test_reload(void **state)
{
	(void)state;
	g_seq = "two handles";
	char dir[PATH_MAX];
	make_subdir(dir, "reload");
	kvs_catalog *a = make_numbered(dir, 2);
	kvs_catalog *b = open_ok(dir, "second handle");
	const char *two[] = {"s1", "s2"};
	expect_catalog(b, 3, two, 2, "second handle");

	kvs_error err = {0};
	write_segment(dir, "s3", 3);
	EXPECT_OK(kvs_catalog_add(a, "s3", &err), err, "a adds s3");
	/* b is a snapshot of generation 3 until it reloads */
	EXPECT_U64(kvs_catalog_generation(b), 3, "b before reload");
	EXPECT_U64(kvs_catalog_count(b), 2, "b before reload");

	/* b's replace at its stale generation conflicts */
	write_segment(dir, "m", 3);
	kvs_status st = kvs_catalog_replace(b, 3, two, 2, "m", true, &err);
	EXPECT_ST(st, KVS_E_CONFLICT, "b replaces at a stale generation");
	const char *three[] = {"s1", "s2", "s3"};
	expect_catalog(a, 4, three, 3, "a after b's conflict");

	EXPECT_OK(kvs_catalog_reload(b, &err), err, "b reloads");
	expect_catalog(b, 4, three, 3, "b after reload");
	EXPECT_OK(kvs_catalog_replace(b, 4, two, 2, "m", true, &err), err,
	          "b replaces after reload");
	const char *after[] = {"m", "s3"};
	expect_catalog(b, 5, after, 2, "b after replace");
	/* add appends to what is on disk, whatever a's snapshot */
	write_segment(dir, "s4", 4);
	EXPECT_OK(kvs_catalog_add(a, "s4", &err), err, "a adds s4");
	const char *last[] = {"m", "s3", "s4"};
	expect_catalog(a, 6, last, 3, "a after add");
	EXPECT_OK(kvs_catalog_reload(b, &err), err, "b reloads again");
	expect_catalog(b, 6, last, 3, "b after the second reload");
	kvs_catalog_close(a);
	kvs_catalog_close(b);
}

/*
 * The generation's last values: a catalog at 2^64 - 2 publishes 2^64 - 1,
 * and then add and replace fail with KVS_E_OVERFLOW naming the generation
 * (the compare-and-swap would otherwise wrap to 0 and accept a stale
 * generation), leaving the CATALOG file as it was. A CATALOG removed
 * behind an open handle makes add and replace fail with KVS_E_CORRUPT
 * naming it, not publish a catalog that forgets the directory's history;
 * the next open scans the segment files anew.
 */
static void test_generation_limits(void **state)
{
	(void)state;
	g_seq = "the generation's limits";
	char dir[PATH_MAX], cat[PATH_MAX];
	make_subdir(dir, "limits");
	path_join(cat, dir, KVS_CATALOG_FILE);
	write_segment(dir, "s1", 1);
	write_segment(dir, "s2", 2);
	write_segment(dir, "m", 2);
	const char *one[] = {"s1"};
	bytes b = ref_catalog(dir, UINT64_MAX - 1, one, 1);
	spill(cat, b.d, b.len);
	free(b.d);
	kvs_catalog *c = open_ok(dir, "open at 2^64 - 2");
	EXPECT_U64(kvs_catalog_generation(c), UINT64_MAX - 1, "opened");
	kvs_error err = {0};
	EXPECT_OK(kvs_catalog_add(c, "s2", &err), err, "add at 2^64 - 2");
	const char *two[] = {"s1", "s2"};
	expect_catalog(c, UINT64_MAX, two, 2, "after the last add");

	size_t before_len;
	uint8_t *before = slurp(cat, &before_len);
	write_segment(dir, "s3", 3);
	kvs_status st = kvs_catalog_add(c, "s3", &err);
	EXPECT_ERR(st, err, "add at 2^64 - 1 succeeded");
	EXPECT_ST(st, KVS_E_OVERFLOW, "add at 2^64 - 1: \"%s\"", err.message);
	expect_mentions(&err, "generation", "add at 2^64 - 1");
	st = kvs_catalog_replace(c, UINT64_MAX, two, 2, "m", false, &err);
	EXPECT_ERR(st, err, "replace at 2^64 - 1 succeeded");
	EXPECT_ST(st, KVS_E_OVERFLOW, "replace at 2^64 - 1: \"%s\"",
	          err.message);
	expect_mentions(&err, "generation", "replace at 2^64 - 1");
	size_t after_len;
	uint8_t *after = slurp(cat, &after_len);
	CHECK(after_len == before_len && !memcmp(after, before, after_len),
	      "the CATALOG file changed");
	free(after);
	free(before);
	expect_catalog(c, UINT64_MAX, two, 2, "after the refusals");
	EXPECT_U64(count_temporaries(dir, NULL, 0), 0, "temporaries");

	/* the CATALOG removed behind the handle */
	assert_int_equal(unlink(cat), 0);
	st = kvs_catalog_add(c, "s3", &err);
	EXPECT_ERR(st, err, "add without a CATALOG succeeded");
	EXPECT_ST(st, KVS_E_CORRUPT, "add without a CATALOG: \"%s\"",
	          err.message);
	expect_mentions(&err, KVS_CATALOG_FILE, "add without a CATALOG");
	st = kvs_catalog_replace(c, UINT64_MAX, two, 2, "m", false, &err);
	EXPECT_ERR(st, err, "replace without a CATALOG succeeded");
	EXPECT_ST(st, KVS_E_CORRUPT, "replace without a CATALOG: \"%s\"",
	          err.message);
	CHECK(!exists(dir, KVS_CATALOG_FILE), "a CATALOG reappeared");
	kvs_catalog_close(c);
	/* open scans: s1, s2, s3 and m (sequences 1, 2, 2, 3: by sequence,
	 * then name) */
	c = open_ok(dir, "open after the removal");
	const char *all[] = {"s1", "m", "s2", "s3"};
	expect_catalog(c, 1, all, 4, "the scan");
	kvs_catalog_close(c);
}

/* ---- recovery ------------------------------------------------------------ */

static void test_temporaries(void **state)
{
	(void)state;
	g_seq = "orphaned temporaries";
	char dir[PATH_MAX], p[PATH_MAX];
	make_subdir(dir, "temps");
	kvs_catalog *c = make_numbered(dir, 1);
	kvs_catalog_close(c);
	const char *orphans[] = {".CATALOG.tmp-abc123", ".seg1.tmp-xyz789",
	                         ".CATALOG.tmp-", ".s1.tmp-AbC09z"};
	const char *keep[] = {".keep", "seg1.tmp-abcdef", ".x.tmp-abc",
	                      ".x.tmp-abcdefg"};
	for (size_t i = 0; i < 4; i++) {
		path_join(p, dir, orphans[i]);
		spill(p, "partial", 7);
		path_join(p, dir, keep[i]);
		spill(p, "other", 5);
	}
	c = open_ok(dir, "recovery");
	const char *one[] = {"s1"};
	expect_catalog(c, 2, one, 1, "after recovery");
	for (size_t i = 0; i < 4; i++) {
		CHECK(!exists(dir, orphans[i]), "%s is removed", orphans[i]);
		CHECK(exists(dir, keep[i]), "%s is kept", keep[i]);
	}
	kvs_catalog_close(c);

	/* a directory without a catalog is swept before it is scanned */
	make_subdir(dir, "temps-scan");
	write_segment(dir, "a", 1);
	path_join(p, dir, ".a.tmp-qwerty");
	spill(p, "partial", 7);
	path_join(p, dir, ".CATALOG.tmp-zzzzzz");
	spill(p, "partial", 7);
	c = open_ok(dir, "scan with temporaries");
	const char *a[] = {"a"};
	expect_catalog(c, 1, a, 1, "scan with temporaries");
	CHECK(count_temporaries(dir, NULL, 0) == 0, "temporaries removed");
	kvs_catalog_close(c);

	/* a temporary file whose writer still runs (holds its lock) stays;
	 * once the writer is gone it is an orphan */
	make_subdir(dir, "temps-live");
	kvs_writer *w = NULL;
	kvs_writer_options wo = {0};
	wo.flags = KVS_WRITER_NO_SYNC;
	path_join(p, dir, "live");
	kvs_error err = {0};
	CHECK(kvs_writer_open(&w, p, &wo, &err) == KVS_OK, "writer: %s",
	      err.message);
	CHECK(kvs_writer_add_bytes(w, "k", 1, KVS_KIND_VALUE, "v", 1, &err) ==
	          KVS_OK,
	      "add: %s", err.message);
	c = open_ok(dir, "open beside a running writer");
	kvs_catalog_close(c);
	CHECK(count_temporaries(dir, NULL, 0) == 1,
	      "a running writer's temporary file is kept");
	CHECK(kvs_writer_finish(w, &err) == KVS_OK,
	      "the writer still finishes: %s", err.message);
	kvs_writer_free(w);
	CHECK(exists(dir, "live"), "the writer's segment is in place");
}

/* This program's own link(), which libkvseg calls instead of libc's,
 * fails with g_link_errno when it is set: EPERM as on a filesystem
 * without hard links (FAT, SMB), EIO as on a failing disk. */
static int g_link_errno;

int link(const char *oldpath, const char *newpath)
{
	if (g_link_errno) {
		errno = g_link_errno;
		return -1;
	}
	return linkat(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}

/* A second name for dir/name. */
static void link_in(const char *dir, const char *name, const char *second)
{
	char a[PATH_MAX], b[PATH_MAX];
	path_join(a, dir, name);
	path_join(b, dir, second);
	if (link(a, b) != 0)
		FAILF("link %s %s: %s", a, b, strerror(errno));
}

/* A writer's publish hook that opens (recovers) the directory while the
 * writer waits in it, notes what it sees, and answers as told. */
typedef struct hook_probe {
	const char *dir;
	kvs_status answer;
	bool ran;
	nlink_t names; /* the output's names seen from the hook */
} hook_probe;

static kvs_status probe_publish(void *ctx, const char *path, kvs_error *err)
{
	hook_probe *h = ctx;
	h->ran = true;
	kvs_catalog_close(open_ok(h->dir, "open while a writer publishes"));
	struct stat sb;
	h->names = lstat(path, &sb) == 0 ? sb.st_nlink : 0;
	if (h->answer != KVS_OK)
		return kvs_error_set(err, h->answer, "%s: the probe refuses",
		                     path);
	return KVS_OK;
}

/* A writer of dir/name with the probe as its publish hook: finish's
 * status. */
static kvs_status probe_write(const char *dir, const char *name,
                              hook_probe *h)
{
	char p[PATH_MAX];
	kvs_writer *w = NULL;
	kvs_writer_options wo = {0};
	kvs_error err = {0};
	wo.flags = KVS_WRITER_NO_SYNC;
	wo.sequence = 9;
	wo.publish = probe_publish;
	wo.publish_ctx = h;
	path_join(p, dir, name);
	EXPECT_OK(kvs_writer_open(&w, p, &wo, &err), err, "writer %s", name);
	EXPECT_OK(kvs_writer_add_bytes(w, "k", 1, KVS_KIND_VALUE, "v", 1,
	                               &err),
	          err, "add to %s", name);
	kvs_status st = kvs_writer_finish(w, &err);
	kvs_writer_free(w);
	return st;
}

static void test_unpublished(void **state)
{
	(void)state;
	g_seq = "unpublished outputs and replaced inputs";
	char dir[PATH_MAX], p[PATH_MAX];
	make_subdir(dir, "unpublished");
	kvs_catalog_close(make_numbered(dir, 2)); /* s1, s2: generation 3 */

	/* a hooked writer died after linking its output, before (out) or
	 * after (s2) the catalog named it; a plain writer's link fallback
	 * died before unlinking its temporary name (plain) */
	write_segment(dir, "out", 3);
	link_in(dir, "out", ".out.pub-abc123");
	link_in(dir, "s2", ".s2.pub-xyz789");
	write_segment(dir, "plain", 4);
	link_in(dir, "plain", ".plain.tmp-qwerty");
	/* replace() died after publishing a generation without gone, or
	 * before publishing one without s1; other's mark is another file */
	write_segment(dir, "gone", 5);
	link_in(dir, "gone", ".gone.replaced");
	link_in(dir, "s1", ".s1.replaced");
	write_segment(dir, "other", 6);
	path_join(p, dir, ".other.replaced");
	spill(p, "not other", 9);

	kvs_catalog *c = open_ok(dir, "recovery");
	const char *live[] = {"s1", "s2"};
	expect_catalog(c, 3, live, 2, "after recovery");
	kvs_catalog_close(c);
	CHECK(!exists(dir, "out"), "an unpublished output is removed");
	CHECK(exists(dir, "s2"), "a published output stays");
	CHECK(exists(dir, "plain"), "a plain writer's segment stays");
	CHECK(!exists(dir, "gone"), "a replaced input is removed");
	CHECK(exists(dir, "s1"), "an input still live stays");
	CHECK(exists(dir, "other"), "a file that is not its mark's stays");
	CHECK(count_temporaries(dir, p, sizeof p) == 0,
	      "marks and temporaries are removed (%s)", p);

	/* without a catalog the marks go and the segments are scanned */
	make_subdir(dir, "unpublished-scan");
	write_segment(dir, "a", 1);
	link_in(dir, "a", ".a.replaced");
	write_segment(dir, "b", 2);
	link_in(dir, "b", ".b.pub-abcdef");
	c = open_ok(dir, "scan with marks");
	const char *a[] = {"a"};
	expect_catalog(c, 1, a, 1, "scan with marks");
	kvs_catalog_close(c);
	CHECK(exists(dir, "a") && !exists(dir, "b"),
	      "scan: the marked input stays, the unpublished output goes");
	CHECK(count_temporaries(dir, p, sizeof p) == 0,
	      "scan: marks removed (%s)", p);

	/* a live hooked writer: recovery run from its hook leaves both of
	 * the output's names; the hook's answer decides what stays */
	make_subdir(dir, "publishing");
	kvs_catalog_close(make_numbered(dir, 1));
	hook_probe yes = {dir, KVS_OK, false, 0};
	EXPECT_ST(probe_write(dir, "m", &yes), KVS_OK, "hook says yes");
	CHECK(yes.ran && yes.names == 2,
	      "yes: the hook ran with the output under two names (%d, %u)",
	      yes.ran, (unsigned)yes.names);
	CHECK(exists(dir, "m") && count_temporaries(dir, NULL, 0) == 0,
	      "yes: the output stays under its name alone");
	hook_probe no = {dir, KVS_E_CONFLICT, false, 0};
	EXPECT_ST(probe_write(dir, "n", &no), KVS_E_CONFLICT,
	          "finish fails with the hook's status");
	CHECK(no.ran && no.names == 2, "no: the hook ran (%d, %u)", no.ran,
	      (unsigned)no.names);
	CHECK(!exists(dir, "n") && count_temporaries(dir, NULL, 0) == 0,
	      "no: nothing is left");
	/* link never replaces: a file at the name stays, the hook never
	 * runs */
	path_join(p, dir, "n");
	spill(p, "theirs", 6);
	hook_probe taken = {dir, KVS_OK, false, 0};
	EXPECT_ST(probe_write(dir, "n", &taken), KVS_E_EXISTS,
	          "a file at the name");
	CHECK(!taken.ran && count_temporaries(dir, NULL, 0) == 0,
	      "taken: no hook and no temporary left");
	struct stat sb;
	CHECK(lstat(p, &sb) == 0 && sb.st_size == 6 && sb.st_nlink == 1,
	      "taken: the file at the name is untouched");

	/* without hard links, the same without the second names: a merge
	 * published in place of s1, which is unlinked */
	make_subdir(dir, "no-links");
	c = make_numbered(dir, 1);
	g_link_errno = EPERM;
	hook_probe renamed = {dir, KVS_OK, false, 0};
	EXPECT_ST(probe_write(dir, "m", &renamed), KVS_OK,
	          "no links: the hook says yes");
	kvs_error err = {0};
	const char *s1[] = {"s1"};
	kvs_status st = kvs_catalog_replace(c, 2, s1, 1, "m", true, &err);
	g_link_errno = 0;
	EXPECT_OK(st, err, "no links: replace");
	const char *m[] = {"m"};
	expect_catalog(c, 3, m, 1, "no links: after replace");
	kvs_catalog_close(c);
	CHECK(renamed.ran && renamed.names == 1 && !exists(dir, "s1") &&
	          count_temporaries(dir, p, sizeof p) == 0,
	      "no links: one name each, s1 unlinked, nothing left (%u)",
	      (unsigned)renamed.names);

	/* a mark that cannot be made (EIO): nothing is published and the
	 * inputs stay */
	make_subdir(dir, "link-fails");
	c = make_numbered(dir, 2);
	const char *both[] = {"s1", "s2"};
	g_link_errno = EIO;
	st = kvs_catalog_replace(c, 3, both, 2, NULL, true, &err);
	g_link_errno = 0;
	EXPECT_ST(st, KVS_E_IO, "link fails: replace");
	expect_mentions(&err, ".s1.replaced", "link fails");
	expect_catalog(c, 3, both, 2, "link fails: the catalog is unchanged");
	kvs_catalog_close(c);
	CHECK(exists(dir, "s1") && exists(dir, "s2") &&
	          count_temporaries(dir, p, sizeof p) == 0,
	      "link fails: the inputs stay and no mark is left");
}

static void expect_open_corrupt(const char *dir, const char *name,
                                const char *when)
{
	kvs_catalog *c = NULL;
	kvs_error err = {0};
	kvs_status st = kvs_catalog_open(&c, dir, &err);
	EXPECT_ERR(st, err, "%s: open must fail", when);
	EXPECT_ST(st, KVS_E_CORRUPT, "%s: %s", when, err.message);
	expect_mentions(&err, name, when);
	CHECK(c == NULL, "%s: no handle", when);
}

static void test_bad_segments(void **state)
{
	(void)state;
	g_seq = "named segments";
	char dir[PATH_MAX], p[PATH_MAX], q[PATH_MAX];
	make_subdir(dir, "badseg");
	kvs_catalog *c = make_numbered(dir, 3);
	kvs_catalog *other = open_ok(dir, "second handle");
	path_join(p, dir, "s2");
	path_join(q, dir, "s2.saved");
	assert_int_equal(rename(p, q), 0);
	expect_open_corrupt(dir, "s2", "s2 missing");
	kvs_error err = {0};
	kvs_status st = kvs_catalog_reload(other, &err);
	EXPECT_ST(st, KVS_E_CORRUPT, "reload with s2 missing");
	expect_mentions(&err, "s2", "reload with s2 missing");
	EXPECT_U64(kvs_catalog_generation(other), 4,
	           "a failed reload keeps the snapshot");

	/* another segment under the name: other size (longer values) */
	write_source(dir, "s2", 2, 100);
	expect_open_corrupt(dir, "s2", "s2 of another size");
	/* same size, other header (sequence) */
	write_source(dir, "s2", 12, 2);
	CHECK(facts_of(dir, "s2").size == facts_of(dir, "s2.saved").size,
	      "the sequence alone changes the header");
	expect_open_corrupt(dir, "s2", "s2 with another header");
	/* a header byte changed in place: its CRC32C no longer matches */
	size_t len;
	uint8_t *d = slurp(q, &len);
	d[20] ^= 1;
	spill(p, d, len);
	expect_open_corrupt(dir, "s2", "s2 with a damaged header");
	/* not a segment at all; a directory */
	spill(p, "x", 1);
	expect_open_corrupt(dir, "s2", "s2 not a segment");
	assert_int_equal(unlink(p), 0);
	assert_int_equal(mkdir(p, 0700), 0);
	expect_open_corrupt(dir, "s2", "s2 a directory");
	assert_int_equal(rmdir(p), 0);

	/* the original back: all is well */
	d[20] ^= 1;
	spill(p, d, len);
	free(d);
	kvs_catalog_close(c);
	c = open_ok(dir, "s2 restored");
	const char *three[] = {"s1", "s2", "s3"};
	expect_catalog(c, 4, three, 3, "s2 restored");
	EXPECT_OK(kvs_catalog_reload(other, &err), err, "reload");
	kvs_catalog_close(other);
	kvs_catalog_close(c);
}

/* open must fail with a message that names CATALOG, and never crash */
static void expect_catalog_refused(const char *dir, const char *when)
{
	kvs_catalog *c = NULL;
	kvs_error err = {0};
	kvs_status st = kvs_catalog_open(&c, dir, &err);
	EXPECT_ERR(st, err, "%s: open must fail", when);
	expect_mentions(&err, KVS_CATALOG_FILE, when);
	CHECK(c == NULL, "%s: no handle", when);
}

static void test_corrupt_catalog(void **state)
{
	(void)state;
	g_seq = "corrupt CATALOG";
	char dir[PATH_MAX], p[PATH_MAX];
	make_subdir(dir, "corrupt");
	kvs_catalog *c = make_numbered(dir, 3);
	kvs_catalog_close(c);
	path_join(p, dir, KVS_CATALOG_FILE);
	size_t len;
	uint8_t *good = slurp(p, &len);
	uint8_t *bad = malloc(len + 1);
	assert_non_null(bad);
	char when[96];

	static const uint8_t flips[] = {0x01, 0x80, 0xFF};
	for (size_t i = 0; i < len; i++)
		for (size_t f = 0; f < sizeof flips; f++) {
			memcpy(bad, good, len);
			bad[i] ^= flips[f];
			spill(p, bad, len);
			snprintf(when, sizeof when, "byte %zu ^ 0x%02x", i,
			         flips[f]);
			expect_catalog_refused(dir, when);
		}
	for (size_t n = 0; n < len; n++) {
		spill(p, good, n);
		snprintf(when, sizeof when, "truncated to %zu bytes", n);
		expect_catalog_refused(dir, when);
	}
	memcpy(bad, good, len);
	bad[len] = 0;
	spill(p, bad, len + 1);
	expect_catalog_refused(dir, "one byte appended");

	/* a valid CRC32C over bad contents: the checks behind it */
	seg_facts f1 = facts_of(dir, "s1"), f2 = facts_of(dir, "s2");
	/* names: the given bytes, then fill up to name_len (at most 256);
	 * a longer name_len is written as the length field alone */
	struct {
		const char *why;
		uint32_t version, count;
		uint64_t gen;
		const char *names[2];
		size_t name_len[2];
		char fill;
		kvs_status want;
	} cases[] = {
	    {"version 2", 2, 1, 4, {"s1"}, {2}, 0, KVS_E_UNSUPPORTED},
	    {"version 0", 0, 1, 4, {"s1"}, {2}, 0, KVS_E_UNSUPPORTED},
	    {"generation 0", 1, 1, 0, {"s1"}, {2}, 0, KVS_E_CORRUPT},
	    {"count one too many", 1, 2, 4, {"s1"}, {2}, 0, KVS_E_CORRUPT},
	    {"count one too few", 1, 0, 4, {"s1"}, {2}, 0, KVS_E_CORRUPT},
	    {"count 2^32-1", 1, UINT32_MAX, 4, {"s1"}, {2}, 0, KVS_E_CORRUPT},
	    /* 65537: one above KVS_CATALOG_MAX_SEGMENTS */
	    {"count > max", 1, 65537, 4, {"s1"}, {2}, 0, KVS_E_CORRUPT},
	    {"empty name", 1, 1, 4, {""}, {0}, 0, KVS_E_CORRUPT},
	    {"name of 256 bytes", 1, 1, 4, {"s1"}, {256}, 'x', KVS_E_CORRUPT},
	    {"name past the end", 1, 1, 4, {"s1"}, {60000}, 0, KVS_E_CORRUPT},
	    {"name .", 1, 1, 4, {"."}, {1}, 0, KVS_E_CORRUPT},
	    {"name ..", 1, 1, 4, {".."}, {2}, 0, KVS_E_CORRUPT},
	    {"dot name", 1, 1, 4, {".s1"}, {3}, 0, KVS_E_CORRUPT},
	    {"name with a slash", 1, 1, 4, {"a/b"}, {3}, 0, KVS_E_CORRUPT},
	    {"name with a NUL", 1, 1, 4, {"s1"}, {4}, '\0', KVS_E_CORRUPT},
	    {"name CATALOG", 1, 1, 4, {"CATALOG"}, {7}, 0, KVS_E_CORRUPT},
	    {"duplicate", 1, 2, 4, {"s1", "s1"}, {2, 2}, 0, KVS_E_CORRUPT},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		bytes b = {0};
		ref_header(&b, cases[i].version, cases[i].gen, cases[i].count);
		for (size_t k = 0; k < 2 && cases[i].names[k]; k++) {
			char name[300];
			size_t nl = cases[i].name_len[k];
			size_t given = strlen(cases[i].names[k]);
			memset(name, cases[i].fill, sizeof name);
			memcpy(name, cases[i].names[k], given);
			if (nl > 256) {
				put_le(&b, nl, 2);
				put(&b, name, 10);
				continue;
			}
			seg_facts f = k ? f2 : f1;
			ref_entry(&b, name, nl, f.sequence, f.size,
			          f.header_crc);
		}
		put_crc(&b);
		spill(p, b.d, b.len);
		free(b.d);
		kvs_catalog *h = NULL;
		kvs_error err = {0};
		kvs_status st = kvs_catalog_open(&h, dir, &err);
		EXPECT_ERR(st, err, "%s: open must fail", cases[i].why);
		EXPECT_ST(st, cases[i].want, "%s: %s", cases[i].why,
		          err.message);
		expect_mentions(&err, KVS_CATALOG_FILE, cases[i].why);
	}

	/* the reference encoder agrees with what the code reads */
	const char *three[] = {"s1", "s2", "s3"};
	bytes b = ref_catalog(dir, 4, three, 3);
	spill(p, b.d, b.len);
	free(b.d);
	c = open_ok(dir, "restored");
	expect_catalog(c, 4, three, 3, "restored");
	kvs_catalog_close(c);
	free(good);
	free(bad);
}

/* ---- FIFOs in a file's place ------------------------------------------ */

/*
 * An open(2) of a FIFO for reading blocks until a writer comes: a FIFO
 * where CATALOG or a segment should be must be refused at once, not waited
 * on. Each call runs in a child that an alarm ends if the call blocks
 * (run_child then reports the child's death).
 */
typedef struct fifo_case {
	const char *dir;  /* the catalog's directory */
	kvs_catalog *c;   /* open before the FIFO came, or NULL */
	const char *path; /* kvs_segment_open's path, or NULL */
} fifo_case;

typedef struct fifo_result {
	kvs_status open_st, add_st, reload_st, seg_st;
	kvs_error open_err, add_err, reload_err, seg_err;
	uint64_t gen;   /* the handle's generation after the calls */
	size_t count;   /* and its number of segments */
	bool opened;    /* kvs_catalog_open gave a handle */
	bool seg_given; /* kvs_segment_open gave a segment */
} fifo_result;

static void fifo_child(int fd, const void *ctx)
{
	const fifo_case *fc = ctx;
	fifo_result r;
	memset(&r, 0, sizeof r);
	alarm(10);
	if (fc->path) {
		kvs_segment *seg = NULL;
		r.seg_st = kvs_segment_open(&seg, fc->path, &r.seg_err);
		r.seg_given = seg != NULL;
	} else if (fc->c) {
		r.reload_st = kvs_catalog_reload(fc->c, &r.reload_err);
		r.add_st = kvs_catalog_add(fc->c, "s1", &r.add_err);
		r.gen = kvs_catalog_generation(fc->c);
		r.count = kvs_catalog_count(fc->c);
	} else {
		kvs_catalog *c = NULL;
		r.open_st = kvs_catalog_open(&c, fc->dir, &r.open_err);
		r.opened = c != NULL;
	}
	if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
		_exit(4);
	_exit(0);
}

static void test_fifo_in_place(void **state)
{
	(void)state;
	g_seq = "a FIFO in a file's place";
	char dir[PATH_MAX], cat[PATH_MAX], fifo[PATH_MAX];
	make_subdir(dir, "fifo");
	kvs_catalog *c = make_numbered(dir, 2);
	path_join(cat, dir, KVS_CATALOG_FILE);
	path_join(fifo, dir, "pipe");
	assert_int_equal(mkfifo(fifo, 0644), 0);
	fifo_result r;

	/* a segment path that is a FIFO */
	fifo_case seg_case = {dir, NULL, fifo};
	g_mode = "kvs_segment_open (a child killed by SIGALRM blocked)";
	run_child(fifo_child, &seg_case, &r, sizeof r);
	CHECK(!r.seg_given, "kvs_segment_open gave a segment of a FIFO");
	CHECK_ST(r.seg_st, KVS_E_INVAL, "kvs_segment_open of a FIFO: %s",
	         r.seg_err.message);
	expect_mentions(&r.seg_err, "/pipe: not a regular file",
	                "kvs_segment_open of a FIFO");

	/* CATALOG replaced by a FIFO under an open handle: reload and add
	 * fail, naming it, and the handle keeps its catalog */
	char saved[PATH_MAX];
	path_join(saved, dir, "catalog.saved");
	assert_int_equal(rename(cat, saved), 0);
	assert_int_equal(mkfifo(cat, 0644), 0);
	fifo_case handle_case = {dir, c, NULL};
	g_mode = "reload, add (a child killed by SIGALRM blocked)";
	run_child(fifo_child, &handle_case, &r, sizeof r);
	CHECK_ST(r.reload_st, KVS_E_CORRUPT, "reload: %s",
	         r.reload_err.message);
	expect_mentions(&r.reload_err, "/CATALOG: not a regular file",
	                "reload");
	CHECK_ST(r.add_st, KVS_E_CORRUPT, "add: %s", r.add_err.message);
	expect_mentions(&r.add_err, "/CATALOG: not a regular file", "add");
	EXPECT_U64(r.gen, 3, "the handle's generation after both");
	EXPECT_U64(r.count, 2, "the handle's segments after both");

	/* and a directory opened with it there */
	fifo_case open_case = {dir, NULL, NULL};
	g_mode = "kvs_catalog_open (a child killed by SIGALRM blocked)";
	run_child(fifo_child, &open_case, &r, sizeof r);
	CHECK(!r.opened, "kvs_catalog_open gave a handle");
	CHECK_ST(r.open_st, KVS_E_CORRUPT, "open: %s", r.open_err.message);
	expect_mentions(&r.open_err, "/CATALOG: not a regular file", "open");

	/* nothing was lost: with the file back the catalog is as it was */
	g_mode = "";
	assert_int_equal(rename(saved, cat), 0);
	const char *two[] = {"s1", "s2"};
	EXPECT_OK(kvs_catalog_reload(c, &r.reload_err), r.reload_err,
	          "reload with the catalog back");
	expect_catalog(c, 3, two, 2, "the catalog back");
	kvs_catalog_close(c);
	assert_int_equal(unlink(fifo), 0);
}

/* ---- crash consistency --------------------------------------------------- */

/*
 * The child reports on the pipe, as 16-byte messages {phase, value},
 * before each step: 'O' opening, 'W' writing source segment value, 'A'
 * adding it, 'M' merging, 'R' publishing the merge, and 'G' with the
 * generation after each publication.
 */
typedef struct report {
	uint64_t phase, value;
} report;

static void say(int fd, char phase, uint64_t value)
{
	report r = {(uint64_t)phase, value};
	if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
		_exit(3);
}

static void __attribute__((noreturn))
child_fail(const char *what, const kvs_error *err)
{
	fprintf(stderr, "crash child: %s: %s\n", what, err->message);
	_exit(2);
}

/* The largest sequence among the live segments (0 if none). */
static uint64_t newest_sequence(const kvs_catalog *c)
{
	size_t n = kvs_catalog_count(c);
	return n ? kvs_catalog_entry_at(c, n - 1)->sequence : 0;
}

/* The merge's publication, as the writer's publish hook: replace() while
 * the output has both its name and its locked temporary one. fd: where
 * the crash child reports, or -1. */
typedef struct crash_pub {
	kvs_catalog *c;
	int fd;
	uint64_t gen;
	const char **names;
	size_t n;
	const char *out;
} crash_pub;

static kvs_status crash_publish(void *ctx, const char *path, kvs_error *err)
{
	crash_pub *p = ctx;
	(void)path;
	if (p->fd >= 0) /* the crash child reports the step */
		say(p->fd, 'R', p->gen);
	return kvs_catalog_replace(p->c, p->gen, p->names, p->n, p->out, true,
	                           err);
}

static void __attribute__((noreturn)) crash_child(const char *dir, int fd)
{
	kvs_error err = {0};
	kvs_catalog *c;
	say(fd, 'O', 0);
	if (kvs_catalog_open(&c, dir, &err) != KVS_OK)
		child_fail("open", &err);
	say(fd, 'G', kvs_catalog_generation(c));
	for (;;) {
		uint64_t src = newest_sequence(c) + 1;
		char name[64];
		snprintf(name, sizeof name, "s%06" PRIu64, src);
		say(fd, 'W', src);
		if (try_write_source(dir, name, src, src, &err) != 0)
			child_fail("write", &err);
		say(fd, 'A', src);
		if (kvs_catalog_add(c, name, &err) != KVS_OK)
			child_fail("add", &err);
		say(fd, 'G', kvs_catalog_generation(c));
		size_t n = kvs_catalog_count(c);
		if (n < 3)
			continue;

		/* merge every live segment into one and publish it */
		say(fd, 'M', n);
		/* kills during earlier merges leave more segments each round */
		kvs_segment **in = calloc(n, sizeof *in);
		const char **names = calloc(n, sizeof *names);
		if (!in || !names)
			child_fail("out of memory", &err);
		for (size_t i = 0; i < n; i++) {
			char p[PATH_MAX];
			names[i] = kvs_catalog_entry_at(c, i)->name;
			if (snprintf(p, sizeof p, "%s/%s", dir, names[i]) >=
			        (int)sizeof p ||
			    kvs_segment_open(&in[i], p, &err) != KVS_OK)
				child_fail("open input", &err);
		}
		char out[64], out_path[PATH_MAX];
		uint64_t gen = kvs_catalog_generation(c);
		snprintf(out, sizeof out, "m%06" PRIu64 "-g%" PRIu64, src, gen);
		if (snprintf(out_path, sizeof out_path, "%s/%s", dir, out) >=
		    (int)sizeof out_path)
			child_fail("path too long", &err);
		kvs_merge_options mo = {0};
		crash_pub pub = {c, fd, gen, names, n, out};
		mo.output.sequence = src;
		mo.output.flags = KVS_WRITER_NO_SYNC;
		mo.output.publish = crash_publish;
		mo.output.publish_ctx = &pub;
		mo.drop_tombstones = true; /* all live: includes the oldest */
		mo.includes_oldest = true;
		if (kvs_merge(in, n, out_path, &mo, NULL, &err) != KVS_OK)
			child_fail("merge and replace", &err);
		for (size_t i = 0; i < n; i++)
			kvs_segment_unref(in[i]);
		free(in);
		free(names);
		say(fd, 'G', kvs_catalog_generation(c));
	}
}

/* The composed view of c's segments against the oracle for sources
 * 1 .. newest; every segment opens and verifies. */
static void check_view(const kvs_catalog *c, const char *when)
{
	size_t n = kvs_catalog_count(c);
	uint64_t newest = newest_sequence(c);
	kvs_segment **seg = calloc(n ? n : 1, sizeof *seg);
	kvs_cursor **cur = calloc(n ? n : 1, sizeof *cur);
	assert_non_null(seg);
	assert_non_null(cur);
	for (size_t i = 0; i < n; i++) {
		char p[PATH_MAX];
		kvs_error err = {0};
		path_join(p, kvs_catalog_dir(c),
		          kvs_catalog_entry_at(c, i)->name);
		EXPECT_OK(kvs_segment_open(&seg[i], p, &err), err,
		          "%s: open %s", when, p);
		EXPECT_OK(kvs_segment_verify(seg[i], &err), err,
		          "%s: verify %s", when, p);
		assert_int_equal(kvs_cursor_open(&cur[i], seg[i]), KVS_OK);
		if (i)
			CHECK(kvs_catalog_entry_at(c, i - 1)->sequence <
			          kvs_catalog_entry_at(c, i)->sequence,
			      "%s: sequences increase in age order", when);
	}
	for (unsigned k = 0; k < KEYS; k++) {
		char key[16], want[48];
		int kl = snprintf(key, sizeof key, "key%04u", k);
		/* the oracle: the newest source holding k */
		uint64_t s = newest;
		while (s > 0 && !src_has(s, k))
			s--;
		bool present = s > 0 && !src_tomb(s, k);
		int wl = present ? src_value(want, sizeof want, s, k) : 0;
		/* the view: the newest segment holding k */
		bool found = false;
		size_t i = n;
		while (i-- > 0) {
			assert_int_equal(kvs_cursor_lookup_bytes(
			                     cur[i], key, (size_t)kl, &found),
			                 KVS_OK);
			if (found)
				break;
		}
		bool got = found && kvs_cursor_kind(cur[i]) == KVS_KIND_VALUE;
		if (got != present)
			FAILF("%s: key %s is %s in the view, expected %s "
			      "(sources 1..%" PRIu64 ")",
			      when, key, got ? "present" : "absent",
			      present ? "present" : "absent", newest);
		if (got) {
			const uint8_t *v;
			size_t vl;
			assert_int_equal(kvs_cursor_value(cur[i], &v, &vl),
			                 KVS_OK);
			if (vl != (size_t)wl || memcmp(v, want, vl) != 0)
				FAILF("%s: key %s has value %.*s, expected %s",
				      when, key, (int)vl, (const char *)v,
				      want);
		}
	}
	for (size_t i = 0; i < n; i++) {
		kvs_cursor_close(cur[i]);
		kvs_segment_unref(seg[i]);
	}
	free(cur);
	free(seg);
}

/* What the parent knows of a child from its reports. */
typedef struct crash_track {
	uint64_t reported;  /* the last generation reported */
	uint64_t phase;     /* the last step begun */
	uint64_t first_gen; /* the generation it opened */
	unsigned gens;      /* generations reported */
	unsigned seen[128]; /* steps begun, by phase */
} crash_track;

static void track(crash_track *t, const report *r)
{
	if (r->phase == 'G') {
		if (t->gens++ == 0)
			t->first_gen = r->value;
		t->reported = r->value;
	} else {
		t->phase = r->phase;
	}
	t->seen[r->phase & 127]++;
}

/* Waits until the child begins step `phase` for the n-th time. */
static void await_step(int fd, crash_track *t, char phase, unsigned n,
                       const char *when)
{
	while (t->seen[(unsigned)phase] < n) {
		struct pollfd pfd = {fd, POLLIN, 0};
		report r;
		if (poll(&pfd, 1, 10000) != 1)
			FAILF("%s: no report from the child in 10 s", when);
		ssize_t got = read(fd, &r, sizeof r);
		if (got != (ssize_t)sizeof r)
			FAILF("%s: the child stopped reporting (read %zd)",
			      when, got);
		track(t, &r);
	}
}

/*
 * Rounds cycle through five ways to choose the instant of the kill: after
 * a random delay of 0-50 ms from the fork, or a random delay after the
 * child begins writing a segment (0-0.1 ms), adding it (0-12 ms: the
 * fsyncs), merging (0-0.1 ms) or publishing the merge (0-12 ms), for the
 * first or the second time. The delays cover each step's usual length.
 */
#define CRASH_ROUNDS 30

static void test_crash_merge_publish(void **state)
{
	(void)state;
	g_seq = "kill during merge-and-publish";
	char dir[PATH_MAX], first[256];
	make_subdir(dir, "crash");
	test_rng rng = test_rng_for(g_seed, 0xC4A5);
	kvs_catalog *c = open_ok(dir, "initial open");
	uint64_t gen = kvs_catalog_generation(c);
	kvs_catalog_close(c);

	static const char targets[] = "-WAMR";
	static const long max_delay_us[] = {50000, 100, 12000, 100, 12000};
	unsigned at_phase[128] = {0}, newer = 0, temps_seen = 0;
	unsigned publications = 0;
	for (unsigned round = 0; round < CRASH_ROUNDS; round++) {
		char when[64];
		unsigned how = round % 5, nth = 1 + (round / 5) % 2;
		snprintf(when, sizeof when, "round %u (after %c #%u)", round,
		         targets[how], nth);
		int pfd[2];
		assert_int_equal(pipe(pfd), 0);
		fflush(NULL);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(pfd[0]);
			crash_child(dir, pfd[1]);
		}
		close(pfd[1]);
		crash_track t = {.reported = gen, .phase = 'O'};
		if (how)
			await_step(pfd[0], &t, targets[how], nth, when);
		long us =
		    (long)test_rng_below(&rng, (uint64_t)max_delay_us[how] + 1);
		struct timespec delay = {us / 1000000, us % 1000000 * 1000};
		nanosleep(&delay, NULL);
		kill(pid, SIGKILL);
		int status;
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
			FAILF("%s: the child ended otherwise than by SIGKILL "
			      "(status 0x%x)",
			      when, status);

		/* the rest of what the child said before it died */
		report r;
		ssize_t got;
		while ((got = read(pfd[0], &r, sizeof r)) == (ssize_t)sizeof r)
			track(&t, &r);
		close(pfd[0]);
		CHECK(got == 0, "%s: a partial report", when);
		if (t.gens)
			EXPECT_U64(t.first_gen, gen,
			           "%s: the child starts from the last "
			           "generation recovered",
			           when);
		publications += t.gens ? t.gens - 1 : 0;
		at_phase[t.phase & 127]++;
		temps_seen += count_temporaries(dir, NULL, 0) != 0;

		/* recovery */
		c = open_ok(dir, when);
		uint64_t now = kvs_catalog_generation(c);
		bool publishing = t.phase == 'A' || t.phase == 'R';
		if (now != t.reported && !(publishing && now == t.reported + 1))
			FAILF("%s: open gives generation %" PRIu64
			      "; the child reported %" PRIu64
			      " and was killed in phase %c",
			      when, now, t.reported, (char)t.phase);
		CHECK(now >= gen,
		      "%s: the generation went back from %" PRIu64
		      " to %" PRIu64,
		      when, gen, now);
		newer += now == t.reported + 1;
		gen = now;
		check_view(c, when);
		unsigned left = count_temporaries(dir, first, sizeof first);
		if (left)
			FAILF("%s: %u temporary files after open (%s)", when,
			      left, first);
		left = count_unnamed_outputs(c, first, sizeof first);
		if (left)
			FAILF("%s: %u merge outputs that the catalog does not "
			      "name after open (%s)",
			      when, left, first);
		kvs_catalog_close(c);
	}
	printf("crash test: %d kills, %u publications reported, final "
	       "generation %" PRIu64 "; killed while opening %u, writing %u, "
	       "adding %u, merging %u, publishing a merge %u; the "
	       "unreported new generation found %u times; temporaries left "
	       "by %u kills\n",
	       CRASH_ROUNDS, publications, gen, at_phase['O'], at_phase['W'],
	       at_phase['A'], at_phase['M'], at_phase['R'], newer, temps_seen);
	CHECK(publications >= CRASH_ROUNDS, "the child made progress");
}

/* ---- no room to publish -------------------------------------------------
 *
 * A merge whose output fits on a full filesystem while the catalog's next
 * file does not: in a forked child, in a private mount namespace, a tmpfs
 * on the directory holds three sources and their catalog, and a filler
 * file leaves `room` bytes free. The merge of the three (as the crash
 * test's, with the writer's publish hook calling replace() with
 * unlink_inputs) writes its output; replace() marks the inputs, then
 * cannot write the catalog (ENOSPC). What must hold: the call fails with a
 * message naming the catalog and the error; the directory lists exactly
 * what it listed before (no output under either name, no mark, no
 * temporary); the catalog, in memory and reopened, is the old generation
 * naming the same segments, which verify; and with the filler gone the
 * same merge publishes the next generation. The room tried is first one
 * page less than the output's: the output itself fails, naming itself, and
 * must change nothing either. Then the output's pages plus 0, 1, 2 ...: the
 * first room that lets the output through must fail at the catalog.
 */
typedef struct nospace_result {
	int skipped;   /* 1: mounting is not permitted (why) */
	char why[240]; /* skip reason, or a setup failure */
	kvs_status st; /* the merge and publication with the filler */
	kvs_error err;
	uint64_t gen_before, gen_after, gen_reopened, gen_final;
	int listing_same;  /* the directory lists what it listed before */
	char listing[512]; /* otherwise: what it lists now */
	int names_same;    /* reopened, the catalog names the same inputs */
	int inputs_verify; /* they open and verify */
	unsigned temporaries;
	kvs_status st_final; /* the same merge without the filler */
	kvs_error err_final;
	size_t count_final; /* segments the final catalog names */
	int final_verify;   /* which open and verify */
	long long out_bytes, room;
} nospace_result;

/* The names in dir (dot files too), sorted, one a line, into out. */
static void ns_listing(const char *dir, char *out, size_t cap)
{
	struct dirent **list;
	int n = scandir(dir, &list, NULL, alphasort);
	size_t len = 0;
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (len < cap)
			len += (size_t)snprintf(out + len, cap - len, "%s\n",
			                        list[i]->d_name);
		free(list[i]);
	}
	if (n >= 0)
		free(list);
}

/* Merges every live segment of c into dir/out, published by the writer's
 * hook when `publish`; *bytes gets the output's size (-1 if none). */
static kvs_status ns_merge(kvs_catalog *c, const char *dir, const char *out,
                           bool publish, long long *bytes, kvs_error *err)
{
	size_t n = kvs_catalog_count(c);
	kvs_segment *in[8];
	const char *names[8];
	if (n == 0 || n > 8)
		return kvs_error_set(err, KVS_E_INVAL, "%zu live segments", n);
	kvs_status st = KVS_OK;
	size_t opened = 0;
	for (; opened < n; opened++) {
		char p[PATH_MAX];
		names[opened] = kvs_catalog_entry_at(c, opened)->name;
		path_join(p, kvs_catalog_dir(c), names[opened]);
		st = kvs_segment_open(&in[opened], p, err);
		if (st != KVS_OK)
			break;
	}
	char path[PATH_MAX];
	path_join(path, dir, out);
	crash_pub pub = {c, -1, kvs_catalog_generation(c), names, n, out};
	kvs_merge_options mo = {0};
	mo.output.sequence = newest_sequence(c) + 1;
	mo.output.flags = KVS_WRITER_NO_SYNC;
	if (publish) {
		mo.output.publish = crash_publish;
		mo.output.publish_ctx = &pub;
	}
	mo.drop_tombstones = true; /* all live: includes the oldest */
	mo.includes_oldest = true;
	if (st == KVS_OK)
		st = kvs_merge(in, n, path, &mo, NULL, err);
	for (size_t i = 0; i < opened; i++)
		kvs_segment_unref(in[i]);
	struct stat sb;
	*bytes =
	    st == KVS_OK && stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
	return st;
}

/* 1 if every segment c names opens and verifies. */
static int ns_verify(const kvs_catalog *c)
{
	for (size_t i = 0; i < kvs_catalog_count(c); i++) {
		char p[PATH_MAX];
		kvs_error err = {0};
		kvs_segment *seg;
		path_join(p, kvs_catalog_dir(c),
		          kvs_catalog_entry_at(c, i)->name);
		if (kvs_segment_open(&seg, p, &err) != KVS_OK)
			return 0;
		kvs_status st = kvs_segment_verify(seg, &err);
		kvs_segment_unref(seg);
		if (st != KVS_OK)
			return 0;
	}
	return 1;
}

typedef struct nospace_case {
	const char *dir;
	int extra; /* pages of room past the output's (-1: one too few) */
} nospace_case;

/* The child: everything above on a 1 MiB tmpfs on the case's directory;
 * the results into fd. */
static void nospace_child(int fd, const void *ctx)
{
	const nospace_case *nc = ctx;
	const char *dir = nc->dir;
	int extra = nc->extra;
	nospace_result res;
	memset(&res, 0, sizeof res);
	kvs_catalog *c = NULL;
	kvs_error err = {0};
	char names[3][16];
	long page = sysconf(_SC_PAGESIZE);
	if (child_tmpfs(dir, "1m", res.why, sizeof res.why) != 0) {
		res.skipped = 1;
		goto done;
	}
	if (kvs_catalog_open(&c, dir, &err) != KVS_OK) {
		snprintf(res.why, sizeof res.why, "open: %.200s", err.message);
		goto done;
	}
	for (unsigned i = 0; i < 3; i++) {
		snprintf(names[i], sizeof names[i], "s%u", i + 1);
		if (try_write_source(dir, names[i], i + 1, i + 1, &err) != 0 ||
		    kvs_catalog_add(c, names[i], &err) != KVS_OK) {
			snprintf(res.why, sizeof res.why, "source %u: %.200s",
			         i + 1, err.message);
			goto done;
		}
	}
	/* the output's size: the same merge outside the tmpfs */
	char trial[PATH_MAX];
	snprintf(trial, sizeof trial, "nospace-trial-%d", (int)getpid());
	if (ns_merge(c, g_tmp, trial, false, &res.out_bytes, &err) != KVS_OK) {
		snprintf(res.why, sizeof res.why, "trial merge: %.200s",
		         err.message);
		goto done;
	}
	char tp[PATH_MAX];
	path_join(tp, g_tmp, trial);
	unlink(tp);

	/* the filler: `room` bytes free */
	res.room = ((res.out_bytes + page - 1) / page + extra) * page;
	char fp[PATH_MAX];
	path_join(fp, dir, "filler");
	int ff = open(fp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	struct statvfs sv;
	if (ff < 0 || statvfs(dir, &sv) != 0) {
		snprintf(res.why, sizeof res.why, "filler: %s",
		         strerror(errno));
		goto done;
	}
	long long fill =
	    (long long)sv.f_bavail * (long long)sv.f_frsize - res.room;
	static uint8_t zeros[65536];
	while (fill > 0) {
		ssize_t w =
		    write(ff, zeros,
		          fill < (long long)sizeof zeros ? (size_t)fill
		                                         : sizeof zeros);
		if (w <= 0)
			break;
		fill -= w;
	}
	close(ff);
	if (fill != 0 || statvfs(dir, &sv) != 0 ||
	    (long long)sv.f_bavail * (long long)sv.f_frsize != res.room) {
		snprintf(res.why, sizeof res.why,
		         "the filler leaves %lld bytes, not %lld",
		         (long long)sv.f_bavail * (long long)sv.f_frsize,
		         res.room);
		goto done;
	}

	char before[512], after[512];
	ns_listing(dir, before, sizeof before);
	res.gen_before = kvs_catalog_generation(c);
	long long bytes;
	res.st = ns_merge(c, dir, "merged", true, &bytes, &res.err);
	res.gen_after = kvs_catalog_generation(c);
	ns_listing(dir, after, sizeof after);
	res.listing_same = strcmp(before, after) == 0;
	snprintf(res.listing, sizeof res.listing, "%s", after);
	res.temporaries = count_temporaries(dir, NULL, 0);
	kvs_catalog *again = NULL;
	if (kvs_catalog_open(&again, dir, &err) != KVS_OK) {
		snprintf(res.why, sizeof res.why, "reopen: %.200s",
		         err.message);
		goto done;
	}
	res.gen_reopened = kvs_catalog_generation(again);
	res.names_same = kvs_catalog_count(again) == 3;
	for (unsigned i = 0; i < 3 && res.names_same; i++)
		res.names_same =
		    strcmp(kvs_catalog_entry_at(again, i)->name, names[i]) == 0;
	res.inputs_verify = ns_verify(again);
	kvs_catalog_close(again);

	/* room again: the same merge publishes */
	unlink(fp);
	if (res.st != KVS_OK) {
		res.st_final =
		    ns_merge(c, dir, "merged", true, &bytes, &res.err_final);
		res.gen_final = kvs_catalog_generation(c);
		if (kvs_catalog_open(&again, dir, &err) == KVS_OK) {
			res.count_final = kvs_catalog_count(again);
			res.final_verify = ns_verify(again);
			kvs_catalog_close(again);
		}
	}
done:
	if (c)
		kvs_catalog_close(c);
	umount2(dir, MNT_DETACH);
	ssize_t w = write(fd, &res, sizeof res);
	_exit(w == (ssize_t)sizeof res ? 0 : 3);
}

static void test_no_room_to_publish(void **state)
{
	(void)state;
	g_seq = "a merge that fits, whose publication does not";
	char dir[PATH_MAX];
	make_subdir(dir, "nospace");
	const char *enospc = strerror(ENOSPC);
	bool at_catalog = false;
	for (int extra = -1; extra < 4 && !at_catalog; extra++) {
		nospace_case nc = {dir, extra};
		nospace_result res;
		run_child(nospace_child, &nc, &res, sizeof res);
		if (res.skipped) {
			printf("[  SKIP    ] no room to publish needs a tmpfs "
			       "mount: %s\n",
			       res.why);
			fflush(stdout);
			skip();
		}
		if (res.why[0])
			FAILF("room %+d pages: child: %s", extra, res.why);
		if (res.st == KVS_OK)
			FAILF("with %lld bytes of room for an output of %lld, "
			      "the merge published: the output's room was room "
			      "for the catalog's next file too",
			      res.room, res.out_bytes);
		EXPECT_ERR(res.st, res.err, "unreachable");
		EXPECT_ST(res.st, KVS_E_IO, "\"%s\"", res.err.message);
		if (strstr(res.err.message, enospc) == NULL)
			FAILF("room %+d pages: the message \"%s\" does not say "
			      "\"%s\"",
			      extra, res.err.message, enospc);
		at_catalog = strstr(res.err.message,
		                    "/" KVS_CATALOG_FILE ": write of ") != NULL;
		if (extra < 0 && strstr(res.err.message, "/merged: ") == NULL)
			FAILF("with a page too few for the output, the failure "
			      "\"%s\" does not name the output",
			      res.err.message);
		printf("[          ] %lld bytes of room for an output of %lld: "
		       "\"%s\"\n",
		       res.room, res.out_bytes, res.err.message);
		/* nothing changed, wherever it failed */
		if (!res.listing_same)
			FAILF("room %+d pages: the directory lists\n%s", extra,
			      res.listing);
		EXPECT_U64(res.temporaries, 0, "room %+d pages: temporaries",
		           extra);
		EXPECT_U64(res.gen_after, res.gen_before,
		           "room %+d pages: the handle's generation", extra);
		EXPECT_U64(res.gen_reopened, res.gen_before,
		           "room %+d pages: the reopened generation", extra);
		CHECK(res.names_same,
		      "room %+d pages: the reopened catalog names s1, s2, s3",
		      extra);
		CHECK(res.inputs_verify,
		      "room %+d pages: the inputs open and verify", extra);
		/* and with room the same merge publishes */
		EXPECT_OK(res.st_final, res.err_final,
		          "room %+d pages: the merge after the filler went",
		          extra);
		EXPECT_U64(res.gen_final, res.gen_before + 1,
		           "room %+d pages: the final generation", extra);
		EXPECT_U64(res.count_final, 1,
		           "room %+d pages: segments after the merge", extra);
		CHECK(res.final_verify,
		      "room %+d pages: the merged segment verifies", extra);
	}
	CHECK(at_catalog, "no room tried failed at the catalog's file");
	expect_dir_empty(dir, "the mount point after the children");
}

/* ---- a directory this process cannot write --------------------------------
 */

/* Makes dir unwritable for this process: as root by taking the effective
 * uid of nobody (65534; root can read and write anything), otherwise by
 * mode 0555. g_tmp must let nobody through (mode 0711). */
static void lose_write(const char *dir)
{
	if (getuid() == 0)
		assert_int_equal(seteuid(65534), 0);
	else
		assert_int_equal(chmod(dir, 0555), 0);
}

static void regain_write(const char *dir)
{
	if (getuid() == 0)
		assert_int_equal(seteuid(0), 0);
	else
		assert_int_equal(chmod(dir, 0755), 0);
}

/*
 * KVS_CATALOG_MAY_READ_ONLY: without it an unwritable directory cannot be
 * opened; with it the catalog (or, without one, the scan) is read as it
 * is, nothing is created or removed, add fails, and reload follows a
 * catalog that appears later. Nothing that can fail fatally runs without
 * the right to write, so that a failure leaves the test process as it was:
 * what the unprivileged steps see is checked afterwards.
 */
static void test_read_only(void **state)
{
	(void)state;
	g_seq = "a directory that cannot be written";
	char dir[PATH_MAX], p[PATH_MAX];
	make_subdir(dir, "readonly");
	assert_int_equal(chmod(g_tmp, 0711), 0);
	assert_int_equal(chmod(dir, 0755), 0);
	write_segment(dir, "a", 2);
	write_segment(dir, "b", 1);
	write_segment(dir, "c", 3);
	path_join(p, dir, ".c.tmp-abcdef"); /* a killed writer's file */
	spill(p, "half a segment", 14);

	kvs_catalog *plain = NULL, *c = NULL;
	kvs_error plain_err = {0}, err = {0}, add_err = {0}, reload_err = {0};
	lose_write(dir);
	kvs_status plain_st = kvs_catalog_open(&plain, dir, &plain_err);
	kvs_status st =
	    kvs_catalog_open_flags(&c, dir, KVS_CATALOG_MAY_READ_ONLY, &err);
	kvs_status add_st = KVS_OK, reload_st = KVS_OK;
	if (st == KVS_OK) {
		add_st = kvs_catalog_add(c, "c", &add_err);
		reload_st = kvs_catalog_reload(c, &reload_err);
	}
	regain_write(dir);

	CHECK(plain_st == KVS_E_IO && plain == NULL,
	      "without the flag the open fails: %s", plain_err.message);
	expect_mentions(&plain_err, "CATALOG.lock", "the refused open");
	EXPECT_OK(st, err, "open with KVS_CATALOG_MAY_READ_ONLY");
	CHECK(kvs_catalog_read_only(c), "the catalog says it is read-only");
	const char *scan[] = {"b", "a", "c"};
	expect_entries(c, 1, scan, 3,
	               "the scan of a directory without "
	               "a catalog");
	CHECK_ST(add_st, KVS_E_IO, "add to a read-only directory: %s",
	         add_err.message);
	expect_mentions(&add_err, "CATALOG.lock", "the refused add");
	EXPECT_OK(reload_st, reload_err, "reload without a catalog");
	expect_entries(c, 1, scan, 3, "the reload keeps the scan");
	CHECK(!exists(dir, KVS_CATALOG_FILE) && !exists(dir, "CATALOG.lock"),
	      "nothing was created");
	CHECK(exists(dir, ".c.tmp-abcdef"), "nothing was removed");

	/* the owner makes a catalog: the reader's reload follows it */
	kvs_catalog *w = open_ok(dir, "the owner's open");
	CHECK(!kvs_catalog_read_only(w), "a writable open");
	CHECK(!exists(dir, ".c.tmp-abcdef"),
	      "the leftover was one (the writable open removes it)");
	const char *two[] = {"b", "a"};
	EXPECT_OK(kvs_catalog_replace(w, 1, (const char *const[]){"c"}, 1, NULL,
	                              false, &err),
	          err, "the owner drops c");
	expect_catalog(w, 2, two, 2, "the owner's catalog");
	/* a lock file this user may write (here, a leftover there too) does
	 * not make the directory writable */
	path_join(p, dir, "CATALOG.lock");
	if (getuid() == 0)
		assert_int_equal(chown(p, 65534, 65534), 0);
	path_join(p, dir, ".d.tmp-ghijkl");
	spill(p, "half a segment", 14);
	lose_write(dir);
	reload_st = kvs_catalog_reload(c, &reload_err);
	kvs_catalog *again = NULL;
	kvs_error again_err = {0};
	kvs_status again_st = kvs_catalog_open_flags(
	    &again, dir, KVS_CATALOG_MAY_READ_ONLY, &again_err);
	regain_write(dir);
	EXPECT_OK(reload_st, reload_err, "reload once there is a catalog");
	expect_catalog(c, 2, two, 2, "the reload reads the catalog");
	EXPECT_OK(again_st, again_err, "a read-only open of the catalog");
	CHECK(kvs_catalog_read_only(again), "read-only again");
	expect_catalog(again, 2, two, 2, "the read-only open");
	CHECK(exists(dir, ".d.tmp-ghijkl"), "the read-only open removes "
	                                    "nothing");
	kvs_catalog_close(again);
	kvs_catalog_close(w);
	kvs_catalog_close(c);

	/* recovery that may not remove a leftover fails, naming it: another
	 * user's file in a sticky directory (as root, a user's file; the
	 * lock file is this user's) */
	if (getuid() == 0) {
		char sticky[PATH_MAX];
		make_subdir(sticky, "sticky");
		assert_int_equal(chmod(sticky, 01777), 0);
		write_segment(sticky, "s", 1);
		path_join(p, sticky, ".s.tmp-mnopqr");
		spill(p, "half a segment", 14);
		lose_write(sticky);
		kvs_catalog *sc = NULL;
		kvs_error serr = {0};
		kvs_status sst = kvs_catalog_open_flags(
		    &sc, sticky, KVS_CATALOG_MAY_READ_ONLY, &serr);
		regain_write(sticky);
		CHECK(sst == KVS_E_IO && sc == NULL,
		      "recovery that cannot remove a file fails: %s",
		      serr.message);
		expect_mentions(&serr,
		                ".s.tmp-mnopqr: cannot remove a "
		                "temporary file: Operation not "
		                "permitted",
		                "the failed recovery");
		CHECK(exists(sticky, ".s.tmp-mnopqr") &&
		          !exists(sticky, KVS_CATALOG_FILE),
		      "the failed open changes nothing else");
		sc = open_ok(sticky, "the owner's open");
		CHECK(!exists(sticky, ".s.tmp-mnopqr"), "the owner's recovery");
		kvs_catalog_close(sc);
	} else {
		print_message("test_read_only: recovery's failures to remove "
		              "are tested as root only\n");
	}

	/* a writable directory opens writable with the flag too */
	c = NULL;
	EXPECT_OK(
	    kvs_catalog_open_flags(&c, dir, KVS_CATALOG_MAY_READ_ONLY, &err),
	    err, "the flag on a writable directory");
	CHECK(!kvs_catalog_read_only(c), "it opens writable");
	kvs_catalog_close(c);
	assert_int_equal(chmod(g_tmp, 0700), 0);
}

typedef struct fifo_lock_case {
	const char *dir;
	int read_only; /* as another user, with KVS_CATALOG_MAY_READ_ONLY */
} fifo_lock_case;

/* kvs_catalog_open(_flags) in a child an alarm ends if it blocks. */
static void fifo_lock_child(int fd, const void *ctx)
{
	const fifo_lock_case *fc = ctx;
	fifo_result r;
	memset(&r, 0, sizeof r);
	alarm(10);
	if (fc->read_only)
		lose_write(fc->dir);
	kvs_catalog *c = NULL;
	r.open_st = kvs_catalog_open_flags(
	    &c, fc->dir, fc->read_only ? KVS_CATALOG_MAY_READ_ONLY : 0,
	    &r.open_err);
	r.opened = c != NULL;
	r.count = c ? kvs_catalog_count(c) : 0;
	if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
		_exit(4);
	_exit(0);
}

/*
 * A symbolic link in CATALOG.lock's place: an open must neither create nor
 * open a file elsewhere through it (as root that would create a file
 * anywhere). It is refused, naming it, by a writable and a read-only open.
 */
static void test_lock_file_link(void **state)
{
	(void)state;
	g_seq = "CATALOG.lock a symbolic link";
	char dir[PATH_MAX], away[PATH_MAX], lock[PATH_MAX], target[PATH_MAX];
	make_subdir(dir, "locklink");
	make_subdir(away, "elsewhere");
	assert_int_equal(chmod(g_tmp, 0711), 0);
	assert_int_equal(chmod(dir, 0755), 0);
	write_segment(dir, "s1", 1);
	path_join(lock, dir, "CATALOG.lock");
	const char *targets[] = {"created", "kept"};
	path_join(target, away, "kept");
	spill(target, "precious", 8);
	for (size_t t = 0; t < 2; t++) {
		path_join(target, away, targets[t]);
		assert_int_equal(symlink(target, lock), 0);
		for (int ro = 0; ro < 2; ro++) {
			g_mode = ro ? "a read-only open" : "a writable open";
			kvs_catalog *c = NULL;
			kvs_error err = {0};
			if (ro)
				lose_write(dir);
			kvs_status st = kvs_catalog_open_flags(
			    &c, dir, ro ? KVS_CATALOG_MAY_READ_ONLY : 0, &err);
			if (ro)
				regain_write(dir);
			CHECK(c == NULL, "to %s: the open gave a handle",
			      targets[t]);
			CHECK_ST(st, KVS_E_IO, "to %s: %s", targets[t],
			         err.message);
			expect_mentions(&err,
			                "/CATALOG.lock: a symbolic link, not a "
			                "lock file",
			                targets[t]);
			CHECK(!exists(away, "created"),
			      "to %s: a file was created through the link",
			      targets[t]);
			CHECK(!exists(dir, KVS_CATALOG_FILE),
			      "to %s: a catalog was written", targets[t]);
		}
		g_mode = "";
		assert_int_equal(unlink(lock), 0);
	}
	size_t len;
	uint8_t *kept = slurp(target, &len);
	CHECK(len == 8 && memcmp(kept, "precious", 8) == 0,
	      "the linked file is unchanged");
	free(kept);
	/* with the link gone the open makes a lock file of its own */
	kvs_catalog *c = open_ok(dir, "without the link");
	const char *one[] = {"s1"};
	expect_catalog(c, 1, one, 1, "without the link");
	struct stat sb;
	CHECK(lstat(lock, &sb) == 0 && S_ISREG(sb.st_mode),
	      "CATALOG.lock is a regular file");
	kvs_catalog_close(c);

	/* a FIFO there locks as a file does; a read-only open, which
	 * opens it for reading, does not wait for a writer */
	assert_int_equal(unlink(lock), 0);
	assert_int_equal(mkfifo(lock, 0644), 0);
	g_seq = "CATALOG.lock a FIFO";
	for (int ro = 0; ro < 2; ro++) {
		g_mode = ro ? "a read-only open (a child killed by SIGALRM "
		              "blocked)"
		            : "a writable open";
		fifo_lock_case flc = {dir, ro};
		fifo_result r;
		run_child(fifo_lock_child, &flc, &r, sizeof r);
		CHECK(r.opened, "the open failed: %s", r.open_err.message);
		EXPECT_U64(r.count, 1, "segments of the catalog read");
	}
	g_mode = "";
	assert_int_equal(unlink(lock), 0);
}

/*
 * A symbolic link in CATALOG's place, to a catalog elsewhere or to
 * nothing: CATALOG is never read through a link, and the refusal says
 * so, naming it, instead of open(2)'s "Too many levels of symbolic
 * links". Open (writable and read-only), reload and add all fail with
 * KVS_E_CORRUPT, as for any CATALOG that is not a regular file; nothing
 * is written through the link or in its place, and an open handle keeps
 * its catalog.
 */
static void test_catalog_link(void **state)
{
	(void)state;
	g_seq = "CATALOG a symbolic link";
	char dir[PATH_MAX], away[PATH_MAX], cat[PATH_MAX], moved[PATH_MAX];
	make_subdir(dir, "catlink");
	make_subdir(away, "catlink-away");
	assert_int_equal(chmod(g_tmp, 0711), 0);
	assert_int_equal(chmod(dir, 0755), 0);
	kvs_catalog *c = make_numbered(dir, 2);
	write_segment(dir, "s3", 3);
	path_join(cat, dir, KVS_CATALOG_FILE);
	path_join(moved, away, KVS_CATALOG_FILE);
	assert_int_equal(rename(cat, moved), 0);
	size_t want_len;
	uint8_t *want = slurp(moved, &want_len);
	const char *two[] = {"s1", "s2"};
	static const char *const what = "/CATALOG: a symbolic link, not a "
	                                "catalog file";
	const char *targets[] = {KVS_CATALOG_FILE, "nothing"};
	for (size_t t = 0; t < 2; t++) {
		char target[PATH_MAX];
		path_join(target, away, targets[t]);
		assert_int_equal(symlink(target, cat), 0);
		g_mode = targets[t];

		kvs_error err = {0};
		kvs_status st = kvs_catalog_reload(c, &err);
		CHECK_ST(st, KVS_E_CORRUPT, "reload: %s", err.message);
		expect_mentions(&err, what, "reload");
		memset(&err, 0, sizeof err);
		st = kvs_catalog_add(c, "s3", &err);
		CHECK_ST(st, KVS_E_CORRUPT, "add: %s", err.message);
		expect_mentions(&err, what, "add");
		expect_entries(c, 3, two, 2, "the handle after both");

		for (int ro = 0; ro < 2; ro++) {
			kvs_catalog *o = NULL;
			memset(&err, 0, sizeof err);
			if (ro)
				lose_write(dir);
			st = kvs_catalog_open_flags(
			    &o, dir, ro ? KVS_CATALOG_MAY_READ_ONLY : 0, &err);
			if (ro)
				regain_write(dir);
			CHECK(o == NULL, "%s open gave a handle",
			      ro ? "a read-only" : "a writable");
			kvs_catalog_close(o);
			CHECK_ST(st, KVS_E_CORRUPT, "%s open: %s",
			         ro ? "a read-only" : "a writable",
			         err.message);
			expect_mentions(&err, what, "open");
		}

		struct stat sb;
		CHECK(lstat(cat, &sb) == 0 && S_ISLNK(sb.st_mode),
		      "the link is still there");
		size_t len;
		uint8_t *now = slurp(moved, &len);
		CHECK(len == want_len && memcmp(now, want, len) == 0,
		      "the linked catalog changed");
		free(now);
		CHECK(!exists(away, "nothing"),
		      "a file was created through the link");
		EXPECT_U64(count_temporaries(dir, NULL, 0), 0, "temporaries");
		assert_int_equal(unlink(cat), 0);
	}
	g_mode = "";
	free(want);

	/* with the file itself back all is as it was */
	assert_int_equal(rename(moved, cat), 0);
	kvs_error err = {0};
	EXPECT_OK(kvs_catalog_reload(c, &err), err, "reload with the file");
	expect_catalog(c, 3, two, 2, "reload with the file");
	EXPECT_OK(kvs_catalog_add(c, "s3", &err), err, "add with the file");
	const char *three[] = {"s1", "s2", "s3"};
	expect_catalog(c, 4, three, 3, "add with the file");
	kvs_catalog_close(c);
}

/* ---- the program ----------------------------------------------------------
 */

static int group_setup(void **state)
{
	(void)state;
	return tmpdir_setup("test_catalog");
}

static int group_teardown(void **state)
{
	(void)state;
	return tmpdir_teardown();
}

/* An optional argument (or KVSEG_TEST_FILTER) selects tests by name. */
int main(int argc, char **argv)
{
	test_filter_from_env();
	test_filter_from_argv(argc, argv);
	g_seed = test_seed_from_env("test_catalog", SEED);
	const struct CMUnitTest tests[] = {
	    TEST(test_empty_dir),
	    TEST(test_file_mode),
	    TEST(test_scan_without_catalog),
	    TEST(test_first_catalog_rule),
	    TEST(test_add),
	    TEST(test_add_sequence),
	    TEST(test_replace),
	    TEST(test_remove_and_unlink),
	    TEST(test_reload),
	    TEST(test_generation_limits),
	    TEST(test_temporaries),
	    TEST(test_unpublished),
	    TEST(test_bad_segments),
	    TEST(test_corrupt_catalog),
	    TEST(test_fifo_in_place),
	    TEST(test_crash_merge_publish),
	    TEST(test_no_room_to_publish),
	    TEST(test_read_only),
	    TEST(test_lock_file_link),
	    TEST(test_catalog_link),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
