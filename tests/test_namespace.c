/*
 * test_namespace.c — segfs's namespace (fs/namespace.h) without a mount:
 * the daemon's state is loaded over a temporary directory of segments
 * written here, and every answer is checked against an oracle kept from
 * what was written (the keys, their values and tombstones, which segment
 * is newer), never against the code under test. Key names come from
 * fs/names.c, which test_names.c checks on its own.
 *
 * What it proves:
 *   - lookups: in segments/NAME/ every value of the segment and no
 *     tombstone; in view/ each key's newest binding, and none where the
 *     newest is a tombstone; misses, names that are no key's canonical
 *     name (a needless escape, lowercase hex, a bad escape, an unknown
 *     hash) and long names (hashed) answer "no such name", a name over
 *     255 bytes ENAMETOOLONG, a lookup under a file ENOTDIR;
 *   - attributes: sizes and modes of keys (the segment file's read
 *     bits), directories, the fixed ones; reads of whole values and of
 *     slices; EISDIR, EINVAL; the filesystem's numbers (statfs);
 *   - extended attributes: the key's bytes and bits, its segment, the
 *     tombstone mark with -o tombstones, the list; EOPNOTSUPP outside
 *     user.*, ENODATA;
 *   - listings: each directory lists exactly the oracle's names in key
 *     order; a listing resumed at every entry's offset (on the same
 *     handle, out of order, and page by page on a new one) gives the rest;
 *     an offset past a segment's records is EINVAL in view/ and the end
 *     in segments/NAME/;
 *   - -o sep: the tree of prefix directories (lookups, listings, "%@" for
 *     a key that is also a directory's prefix) equals the oracle's tree;
 *   - a catalog change: a listing of the new view/ resumed at an offset
 *     of the old one continues after that entry's key; once the replaced
 *     segment is gone, such an offset is EINVAL;
 *   - under a view/ inode the catalog has replaced, names and listings
 *     are answered but not to be cached; under the new one they are;
 *   - after a fault in a segment's mapping (ns_fault), its keys, lookups
 *     in it, its open listing and view/ fail with EIO; other segments
 *     do not.
 *
 * It links the daemon's state (state.c, control.c, ...), which still
 * calls libfuse, but opens no session: nothing is mounted.
 */
#include <inttypes.h>
#include <limits.h>
#include <sys/statvfs.h>

/* what segutil.h needs */
static const char *g_seq = "namespace";
static const char *g_mode = "";
static char g_tmp[PATH_MAX];

#include "segutil.h"

#include "kvseg/catalog.h"
#include "kvseg/segment.h"
#include "names.h"
#include "namespace.h"

static char g_dir[PATH_MAX];
static uint64_t g_seed;

#define SEED 0x5e9f5a11ce

/* ---- the oracle ---------------------------------------------------------- */

typedef struct rec {
	uint8_t key[320];
	size_t len;
	bool tomb;
	char val[400];
	size_t vlen;
} rec;

#define MAX_SEGS 4
#define MAX_RECS 200

typedef struct oseg {
	char name[16];
	rec r[MAX_RECS];
	size_t n;
	mode_t read; /* its file's read bits */
	bool live;
} oseg;

static oseg O[MAX_SEGS]; /* oldest first */
static size_t O_n;

static int rec_cmp(const void *a, const void *b)
{
	const rec *x = a, *y = b;
	return ref_key_cmp(x->key, x->len * 8, y->key, y->len * 8);
}

/* The newest binding of key among the live segments, or NULL; *seg its
 * segment. */
static const rec *view_find(const uint8_t *key, size_t len, size_t *seg)
{
	for (size_t s = O_n; s-- > 0;) {
		if (!O[s].live)
			continue;
		for (size_t i = 0; i < O[s].n; i++)
			if (O[s].r[i].len == len &&
			    memcmp(O[s].r[i].key, key, len) == 0) {
				*seg = s;
				return &O[s].r[i];
			}
	}
	return NULL;
}

/* A key of the small alphabet ("a", "b", ":"), so that keys share
 * prefixes and -o sep makes nested directories. */
static void rand_key(test_rng *g, rec *r)
{
	static const char alpha[] = "ab:";
	r->len = (size_t)test_rng_below(g, 6);
	for (size_t i = 0; i < r->len; i++)
		r->key[i] = (uint8_t)alpha[test_rng_below(g, 3)];
}

static bool seg_has(const oseg *s, const rec *r)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->r[i].len == r->len &&
		    !memcmp(s->r[i].key, r->key, r->len))
			return true;
	return false;
}

/* Adds a record to s unless its key is there; value random. */
static void seg_add(test_rng *g, oseg *s, const uint8_t *key, size_t len,
                    bool tomb)
{
	assert_true(s->n < MAX_RECS);
	rec *r = &s->r[s->n];
	memcpy(r->key, key, len);
	r->len = len;
	if (seg_has(s, r))
		return;
	r->tomb = tomb;
	r->vlen = tomb ? 0 : (size_t)test_rng_below(g, 300);
	/* the segment's name first, so that a value says where it is from */
	size_t h = tomb ? 0 : strlen(s->name);
	memcpy(r->val, s->name, h);
	if (h > r->vlen)
		r->vlen = h;
	for (size_t i = h; i < r->vlen; i++)
		r->val[i] = (char)('A' + test_rng_below(g, 26));
	s->n++;
}

/* Writes segment O[i] (sorted first) with sequence i + 1. */
static void seg_write(size_t i)
{
	oseg *s = &O[i];
	qsort(s->r, s->n, sizeof s->r[0], rec_cmp);
	char path[PATH_MAX];
	path_join(path, g_dir, s->name);
	kvs_writer_options o = {0};
	o.sequence = i + 1;
	o.flags = KVS_WRITER_NO_SYNC;
	kvs_writer *w;
	kvs_error err;
	CHECK_ST(kvs_writer_open(&w, path, &o, &err), KVS_OK, "%s",
	         err.message);
	for (size_t k = 0; k < s->n; k++)
		CHECK_ST(kvs_writer_add_bytes(w, s->r[k].key, s->r[k].len,
		                              s->r[k].tomb ? KVS_KIND_TOMBSTONE
		                                           : KVS_KIND_VALUE,
		                              s->r[k].val, s->r[k].vlen, &err),
		         KVS_OK, "%s", err.message);
	CHECK_ST(kvs_writer_finish(w, &err), KVS_OK, "%s", err.message);
	kvs_writer_free(w);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	s->read = st.st_mode & 0444;
	s->live = true;
}

/* Three segments: s1 with a long key (a hashed name), the empty key and
 * "%"; s2 and s3 rebinding and deleting some of the older keys. */
static void make_segments(void)
{
	test_rng g = test_rng_for(g_seed, 1);
	O_n = 3;
	for (size_t s = 0; s < O_n; s++) {
		O[s].name[0] = 's';
		O[s].name[1] = (char)('1' + s);
		for (int k = 0; k < 60; k++) {
			rec r;
			rand_key(&g, &r);
			seg_add(&g, &O[s], r.key, r.len, false);
		}
		if (s == 0) {
			uint8_t longk[300];
			memset(longk, 'x', sizeof longk);
			seg_add(&g, &O[0], longk, sizeof longk, false);
			longk[299] = 'y';
			seg_add(&g, &O[0], longk, sizeof longk, false);
			seg_add(&g, &O[0], (const uint8_t *)"", 0, false);
			seg_add(&g, &O[0], (const uint8_t *)"%", 1, false);
			seg_add(&g, &O[0], (const uint8_t *)"a", 1, false);
			seg_add(&g, &O[0], (const uint8_t *)"a:", 2, false);
			seg_add(&g, &O[0], (const uint8_t *)"b", 1, false);
			/* with -o sep, a directory with a hashed name */
			memset(longk, 'z', 260);
			memcpy(longk + 260, ":a", 2);
			seg_add(&g, &O[0], longk, 262, false);
		} else {
			/* rebind or delete a third of the older keys */
			for (size_t k = 0; k < O[s - 1].n; k++)
				if (test_rng_below(&g, 3) == 0)
					seg_add(&g, &O[s], O[s - 1].r[k].key,
					        O[s - 1].r[k].len,
					        test_rng_below(&g, 2) == 0);
		}
		seg_write(s);
	}
}

/* ---- calls into the namespace -------------------------------------------- */

static char *key_name(const uint8_t *key, size_t len,
                      char out[SEGFS_NAME_MAX + 1])
{
	segfs_name_encode(key, (uint64_t)len * 8, out);
	return out;
}

/* Looks name up in dir: its inode (0: none), attributes in *st; the
 * reference the entry holds is given back. */
static uint64_t look(uint64_t dir, const char *name, struct stat *st)
{
	ns_entry e;
	int err = ns_lookup(dir, name, &e);
	if (err)
		fail_msg("lookup of \"%s\" in %#" PRIx64 ": %s", name, dir,
		         strerror(err));
	if (e.ino) {
		if (st)
			*st = e.st;
		assert_int_equal(e.st.st_ino, e.ino);
		ns_forget(e.ino, 1);
	}
	return e.ino;
}

static uint64_t seg_dir(size_t s)
{
	uint64_t ino = look(INO_SEGMENTS, O[s].name, NULL);
	assert_int_equal(ino_kind(ino), K_SEGDIR);
	return ino;
}

/* Checks key file ino against record r of segment s (its value, size,
 * mode, extended attributes). */
static void check_key(uint64_t ino, const struct stat *st, const rec *r,
                      size_t s, const char *where)
{
	char name[SEGFS_NAME_MAX + 1];
	key_name(r->key, r->len, name);
	if (!S_ISREG(st->st_mode) || (st->st_mode & 07777) != O[s].read ||
	    (size_t)st->st_size != r->vlen)
		fail_msg("%s%s: mode %o size %jd, want regular %o size %zu",
		         where, name, (unsigned)st->st_mode,
		         (intmax_t)st->st_size, (unsigned)O[s].read, r->vlen);
	struct stat again;
	assert_int_equal(ns_getattr(ino, &again), 0);
	assert_int_equal(again.st_size, st->st_size);
	ns_bytes b;
	assert_int_equal(ns_read(ino, 1 << 20, 0, &b), 0);
	if (b.len != r->vlen || memcmp(b.p, r->val, r->vlen) != 0)
		fail_msg("%s%s: read %zu bytes, want %zu of %s", where, name,
		         b.len, r->vlen, O[s].name);
	ns_bytes_free(&b);
	if (r->vlen > 2) { /* a slice, and past the end */
		assert_int_equal(ns_read(ino, 2, 1, &b), 0);
		assert_int_equal(b.len, 2);
		assert_memory_equal(b.p, r->val + 1, 2);
		assert_int_equal(ns_read(ino, 10, (off_t)r->vlen + 5, &b), 0);
		assert_int_equal(b.len, 0);
	}
	assert_int_equal(ns_getxattr(ino, "user.segfs.key", &b), 0);
	assert_int_equal(b.len, r->len);
	assert_memory_equal(b.p, r->key, r->len);
	assert_int_equal(ns_getxattr(ino, "user.segfs.key_bits", &b), 0);
	char bits[32];
	snprintf(bits, sizeof bits, "%zu", r->len * 8);
	assert_int_equal(b.len, strlen(bits));
	assert_memory_equal(b.p, bits, b.len);
	assert_int_equal(ns_getxattr(ino, "user.segfs.segment", &b), 0);
	assert_int_equal(b.len, strlen(O[s].name));
	assert_memory_equal(b.p, O[s].name, b.len);
	assert_int_equal(ns_getxattr(ino, "user.segfs.tombstone", &b),
	                 r->tomb ? 0 : ENODATA);
	assert_int_equal(ns_getxattr(ino, "user.other", &b), ENODATA);
	assert_int_equal(ns_getxattr(ino, "security.selinux", &b), EOPNOTSUPP);
	static const char list[] =
	    "user.segfs.key\0user.segfs.key_bits\0user.segfs.segment\0"
	    "user.segfs.tombstone";
	assert_int_equal(ns_listxattr(ino, &b), 0);
	size_t want = r->tomb ? sizeof list : sizeof list - 21;
	assert_int_equal(b.len, want);
	assert_memory_equal(b.p, list, want);
}

/* Looks record r of segment s up in dir by its key's name: found (an
 * inode of kind k, checked by check_key) unless it is a tombstone. */
static bool expect_key(uint64_t dir, const rec *r, size_t s, enum ino_kind k,
                       const char *where)
{
	char name[SEGFS_NAME_MAX + 1];
	struct stat st;
	uint64_t ino = look(dir, key_name(r->key, r->len, name), &st);
	if (r->tomb) {
		if (ino)
			fail_msg("%s/%s: deleted in %s, yet found", where,
			         name, O[s].name);
		return false;
	}
	if (ino_kind(ino) != k)
		fail_msg("%s/%s: not found", where, name);
	check_key(ino, &st, r, s, where);
	return true;
}

/* ---- lookups ------------------------------------------------------------- */

static void test_lookup_segments(void **state)
{
	(void)state;
	for (size_t s = 0; s < O_n; s++) {
		uint64_t dir = seg_dir(s);
		struct stat st;
		assert_int_equal(ns_getattr(dir, &st), 0);
		assert_true(S_ISDIR(st.st_mode));
		assert_int_equal(st.st_mode & 0444, O[s].read);
		for (size_t i = 0; i < O[s].n; i++)
			expect_key(dir, &O[s].r[i], s, K_SEGKEY, O[s].name);
	}
	assert_int_equal(look(INO_SEGMENTS, "s9", NULL), 0);
}

static void test_lookup_view(void **state)
{
	(void)state;
	uint64_t view = look(INO_ROOT, "view", NULL);
	assert_int_equal(ino_kind(view), K_VIEWDIR);
	size_t found = 0;
	for (size_t s = 0; s < O_n; s++)
		for (size_t i = 0; i < O[s].n; i++) {
			const rec *r = &O[s].r[i];
			size_t ws;
			const rec *w = view_find(r->key, r->len, &ws);
			found += expect_key(view, w, ws, K_VIEWKEY, "view/");
		}
	assert_true(found > 50);
	/* misses: keys of the alphabet that no segment has */
	test_rng g = test_rng_for(g_seed, 2);
	for (int k = 0; k < 200; k++) {
		rec r;
		rand_key(&g, &r);
		r.key[r.len++] = 'c';
		char name[SEGFS_NAME_MAX + 1];
		assert_int_equal(look(view, key_name(r.key, r.len, name), NULL),
		                 0);
	}
}

static void test_names_refused(void **state)
{
	(void)state;
	uint64_t view = look(INO_ROOT, "view", NULL);
	uint64_t s1 = seg_dir(0);
	/* "a", "a:", "b", "%" and "" are keys of s1: only their canonical
	 * names find them */
	const char *bad[] = {
	    "%61", "a%3A", "a%3a", "%62", "%2",
	    "%",   "%zz",  "%_a",  "%:2", "%#0123456789abcdef0123456789abcdef",
	    "a%"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(look(view, bad[i], NULL), 0);
		assert_int_equal(look(s1, bad[i], NULL), 0);
	}
	assert_int_not_equal(look(s1, "%25", NULL), 0);
	assert_int_not_equal(look(s1, "a:", NULL), 0);
	assert_int_not_equal(look(s1, "%_", NULL), 0);
	/* the two long keys: hashed names, each its own */
	uint8_t longk[300];
	memset(longk, 'x', sizeof longk);
	char n1[SEGFS_NAME_MAX + 1], n2[SEGFS_NAME_MAX + 1];
	key_name(longk, 300, n1);
	longk[299] = 'y';
	key_name(longk, 300, n2);
	assert_string_not_equal(n1, n2);
	struct stat st1, st2;
	uint64_t i1 = look(s1, n1, &st1), i2 = look(s1, n2, &st2);
	assert_true(i1 && i2 && i1 != i2);
	ns_bytes b;
	assert_int_equal(ns_getxattr(i2, "user.segfs.key", &b), 0);
	assert_int_equal(b.len, 300);
	assert_memory_equal(b.p, longk, 300);
	n1[strlen(n1) - 1] ^= 1; /* another hash */
	assert_int_equal(look(s1, n1, NULL), 0);
	/* over 255 bytes; under a file */
	char huge[SEGFS_NAME_MAX + 2];
	memset(huge, 'a', sizeof huge - 1);
	huge[sizeof huge - 1] = 0;
	ns_entry e;
	assert_int_equal(ns_lookup(view, huge, &e), ENAMETOOLONG);
	assert_int_equal(ns_lookup(i2, "a", &e), ENOTDIR);
	/* a record past the segment's end; reads of directories */
	struct stat st;
	uint64_t past =
	    make_ino(K_SEGKEY, make_pos((uint32_t)ino_low(s1), O[0].n + 7));
	assert_int_equal(ns_getattr(past, &st), ENOENT);
	assert_int_equal(ns_read(view, 10, 0, &b), EISDIR);
	assert_int_equal(ns_read(INO_ROOT, 10, 0, &b), EISDIR);
	assert_int_equal(ns_read(i2, 10, -1, &b), EINVAL);
	assert_int_equal(ns_listxattr(view, &b), 0);
	assert_int_equal(b.len, 0);
	assert_int_equal(ns_getxattr(view, "user.segfs.key", &b), ENODATA);
}

static void test_fixed(void **state)
{
	(void)state;
	struct stat st;
	assert_int_equal(ns_getattr(INO_ROOT, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_nlink, 5);
	assert_int_equal(ns_getattr(INO_SEGMENTS, &st), 0);
	size_t live = 0;
	for (size_t s = 0; s < O_n; s++)
		live += O[s].live;
	assert_int_equal(st.st_nlink, 2 + live);
	assert_int_equal(look(INO_ROOT, "segments", NULL), INO_SEGMENTS);
	assert_int_equal(look(INO_ROOT, "control", NULL), INO_CONTROL);
	assert_int_equal(look(INO_ROOT, "nothing", NULL), 0);
	uint64_t cat = look(INO_CONTROL, "catalog", &st);
	assert_int_equal(ino_kind(cat), K_CATALOG);
	ns_bytes b;
	assert_int_equal(ns_read(cat, 1 << 20, 0, &b), 0);
	assert_int_equal(b.len, st.st_size);
	for (size_t s = 0; s < O_n; s++) /* it names every live segment */
		assert_true(memmem(b.p, b.len, O[s].name, strlen(O[s].name)) !=
		            NULL);
	struct statvfs sv;
	ns_statfs(&sv);
	uint64_t records = 0, bytes = 0;
	for (size_t s = 0; s < O_n; s++) {
		char path[PATH_MAX];
		path_join(path, g_dir, O[s].name);
		struct stat fs;
		assert_int_equal(stat(path, &fs), 0);
		bytes += (uint64_t)fs.st_size;
		records += O[s].n;
	}
	assert_int_equal(sv.f_files, records);
	assert_int_equal(sv.f_blocks, (bytes + 4095) / 4096);
	assert_int_equal(sv.f_namemax, SEGFS_NAME_MAX);
}

/* ---- listings ------------------------------------------------------------ */

typedef struct got {
	char name[SEGFS_NAME_MAX + 1];
	off_t off;
	uint64_t ino;
	struct stat st;
	bool cache;
} got;

typedef struct lister {
	got *e;
	size_t n, cap;
	size_t room; /* entries this call may take */
	bool plus;
} lister;

static bool collect(void *ctx, ns_dirent *d)
{
	lister *l = ctx;
	if (l->room == 0)
		return false;
	if (l->plus && !ns_dirent_hold(d))
		return false;
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->e = realloc(l->e, l->cap * sizeof *l->e);
		assert_non_null(l->e);
	}
	got *g = &l->e[l->n++];
	snprintf(g->name, sizeof g->name, "%s", d->name);
	g->off = d->off;
	g->ino = (uint64_t)d->st.st_ino;
	g->st = d->st;
	g->cache = d->cache;
	if (l->plus && (d->counted || d->dir_prefix))
		ns_forget(g->ino, 1); /* what the kernel would forget */
	l->room--;
	return true;
}

/* Lists h from off until the end, room entries per call. */
static void list_from(uint64_t ino, ns_dir *h, off_t off, size_t room,
                      lister *l)
{
	l->n = 0;
	for (;;) {
		size_t before = l->n;
		l->room = room;
		int err = ns_readdir(ino, h, off, l->plus, collect, l);
		if (err)
			fail_msg("listing %#" PRIx64 " from %jd: %s", ino,
			         (intmax_t)off, strerror(err));
		if (l->n == before)
			return;
		off = l->e[l->n - 1].off;
	}
}

/* The oracle's names of a flat directory (no -o sep), in key order. */
typedef struct want {
	char name[SEGFS_NAME_MAX + 1];
	const rec *r; /* a key file's record; NULL: a -o sep directory */
	size_t seg;
	const uint8_t *comp; /* a directory's component */
	size_t clen;
} want;

static size_t want_flat(bool view, size_t s, want *w)
{
	rec *all[MAX_SEGS * MAX_RECS];
	size_t n = 0;
	for (size_t k = 0; k < O_n; k++) {
		if (view ? !O[k].live : k != s)
			continue;
		for (size_t i = 0; i < O[k].n; i++)
			all[n++] = &O[k].r[i];
	}
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		size_t ws = s;
		const rec *r =
		    view ? view_find(all[i]->key, all[i]->len, &ws) : all[i];
		if (r != all[i] || r->tomb)
			continue;
		w[m].r = r;
		w[m].seg = ws;
		key_name(r->key, r->len, w[m].name);
		m++;
	}
	/* key order: the records' */
	for (size_t i = 1; i < m; i++)
		for (size_t j = i; j > 0 && rec_cmp(w[j - 1].r, w[j].r) > 0;
		     j--) {
			want t = w[j];
			w[j] = w[j - 1];
			w[j - 1] = t;
		}
	return m;
}

/* dir's listing, from 0, in pages of every size, and resumed at every
 * offset, equals the oracle's w[0 .. m). */
static void check_flat_listing(uint64_t dir, const want *w, size_t m,
                               const char *where)
{
	ns_dir *h;
	assert_int_equal(ns_opendir(dir, &h), 0);
	assert_non_null(h);
	lister l = {0};
	list_from(dir, h, 0, SIZE_MAX, &l);
	if (l.n != m + 2)
		fail_msg("%s: %zu entries, want %zu", where, l.n, m + 2);
	assert_string_equal(l.e[0].name, ".");
	assert_string_equal(l.e[1].name, "..");
	for (size_t i = 0; i < m; i++) {
		const got *g = &l.e[i + 2];
		if (strcmp(g->name, w[i].name) != 0)
			fail_msg("%s: entry %zu is \"%s\", want \"%s\"", where,
			         i, g->name, w[i].name);
		assert_int_equal(g->st.st_size, w[i].r->vlen);
	}
	got *all = malloc((m + 2) * sizeof *all);
	memcpy(all, l.e, (m + 2) * sizeof *all);
	/* every offset, out of order, on the same handle */
	test_rng g = test_rng_for(g_seed, 3);
	for (size_t k = 0; k < m + 2; k++) {
		size_t i = (size_t)test_rng_below(&g, m + 2);
		list_from(dir, h, all[i].off, SIZE_MAX, &l);
		if (l.n != m + 1 - i)
			fail_msg("%s: resumed after \"%s\": %zu entries, "
			         "want %zu",
			         where, all[i].name, l.n, m + 1 - i);
		for (size_t j = 0; j < l.n; j++)
			assert_string_equal(l.e[j].name, all[i + 1 + j].name);
	}
	ns_closedir(h);
	/* page by page, on a new handle, with attributes */
	for (size_t room = 1; room <= 4; room++) {
		assert_int_equal(ns_opendir(dir, &h), 0);
		l.plus = room % 2 == 0;
		list_from(dir, h, 0, room, &l);
		assert_int_equal(l.n, m + 2);
		for (size_t j = 0; j < l.n; j++) {
			assert_string_equal(l.e[j].name, all[j].name);
			assert_int_equal(l.e[j].off, all[j].off);
		}
		ns_closedir(h);
		l.plus = false;
	}
	free(all);
	free(l.e);
}

static void test_listing_flat(void **state)
{
	(void)state;
	want *w = malloc(MAX_SEGS * MAX_RECS * sizeof *w);
	for (size_t s = 0; s < O_n; s++) {
		size_t m = want_flat(false, s, w);
		check_flat_listing(seg_dir(s), w, m, O[s].name);
	}
	size_t m = want_flat(true, 0, w);
	uint64_t view = look(INO_ROOT, "view", NULL);
	check_flat_listing(view, w, m, "view/");
	/* an offset past the records of a segment: EINVAL in view/, the end
	 * in segments/NAME/ (its offsets are ordinals) */
	ns_dir *h;
	lister l = {0};
	for (int pass = 0; pass < 2; pass++) {
		uint64_t dir = pass ? seg_dir(0) : view;
		assert_int_equal(ns_opendir(dir, &h), 0);
		list_from(dir, h, 0, SIZE_MAX, &l);
		off_t bad = l.e[2].off + ((off_t)1 << 39);
		l.room = SIZE_MAX;
		l.n = 0;
		assert_int_equal(ns_readdir(dir, h, bad, false, collect, &l),
		                 pass ? 0 : EINVAL);
		assert_int_equal(l.n, 0);
		ns_closedir(h);
	}
	/* fixed directories */
	assert_int_equal(ns_opendir(INO_ROOT, &h), 0);
	assert_null(h);
	list_from(INO_ROOT, NULL, 0, SIZE_MAX, &l);
	assert_int_equal(l.n, 5);
	assert_string_equal(l.e[2].name, "segments");
	assert_string_equal(l.e[3].name, "view");
	assert_string_equal(l.e[4].name, "control");
	list_from(INO_SEGMENTS, NULL, 0, SIZE_MAX, &l);
	assert_int_equal(l.n, 2 + O_n);
	for (size_t s = 0; s < O_n; s++)
		assert_string_equal(l.e[2 + s].name, O[s].name);
	list_from(INO_SEGMENTS, NULL, 3, SIZE_MAX, &l);
	assert_int_equal(l.n, O_n - 1);
	assert_int_equal(ns_opendir(make_ino(K_STATUS, 1), &h), ENOTDIR);
	/* control/ without attributes: no file or text is taken */
	list_from(INO_CONTROL, NULL, 0, SIZE_MAX, &l);
	assert_int_equal(l.n, 6);
	const char *ctl[] = {"catalog", "merge", "status", "wait"};
	for (size_t i = 0; i < 4; i++)
		assert_string_equal(l.e[2 + i].name, ctl[i]);
	assert_int_equal(l.e[5].ino, INO_WAITDIR);
	assert_int_equal(look(INO_CONTROL, "wait", NULL), INO_WAITDIR);
	/* control/wait/: no job, and names that are no job's number */
	const char *jobs[] = {"1", "01", "x", "1x", "99999999999999999999"};
	for (size_t i = 0; i < 5; i++) {
		ns_entry e;
		assert_int_equal(ns_lookup(INO_WAITDIR, jobs[i], &e), 0);
		assert_int_equal(e.ino, 0);
		assert_false(e.cache);
	}
	free(l.e);
	free(w);
}

/* ---- -o sep -------------------------------------------------------------- */

/* The oracle's entries of the -o sep directory of prefix p (plen bytes,
 * ending in ':' unless empty) in view/ (s: -1) or segment s: names of
 * files (r set) and of directories (r NULL), in key order; "%@" first
 * when the key p without its ':' is visible. */
static size_t want_sep(const uint8_t *p, size_t plen, int s, want *w)
{
	want *flat = malloc(MAX_SEGS * MAX_RECS * sizeof *flat);
	size_t n = want_flat(s < 0, s < 0 ? 0 : (size_t)s, flat);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		const rec *r = flat[i].r;
		if (plen && r->len == plen - 1 && !memcmp(r->key, p, plen - 1))
			w[m++] = (want){"%@", r, flat[i].seg, NULL, 0};
	}
	for (size_t i = 0; i < n; i++) {
		const rec *r = flat[i].r;
		if (r->len < plen || memcmp(r->key, p, plen) != 0)
			continue;
		const uint8_t *rest = r->key + plen;
		size_t rlen = r->len - plen;
		const uint8_t *sp = memchr(rest, ':', rlen);
		if (sp) {
			char name[SEGFS_NAME_MAX + 1];
			key_name(rest, (size_t)(sp - rest), name);
			if (m && !w[m - 1].r && !strcmp(w[m - 1].name, name))
				continue; /* the same directory */
			w[m] = (want){"", NULL, 0, rest, (size_t)(sp - rest)};
			strcpy(w[m++].name, name);
			continue;
		}
		/* a key that is also a directory's prefix is inside it */
		bool shadowed = false;
		for (size_t j = 0; j < n && !shadowed; j++) {
			const rec *o = flat[j].r;
			shadowed = o->len > r->len &&
			           !memcmp(o->key, r->key, r->len) &&
			           o->key[r->len] == ':';
		}
		if (shadowed)
			continue;
		w[m] = flat[i];
		key_name(rest, rlen, w[m++].name); /* its component's */
	}
	free(flat);
	return m;
}

/* Walks the -o sep directory dir (prefix p) against the oracle, and every
 * directory below it. */
static void walk_sep(uint64_t dir, uint8_t *p, size_t plen, int s)
{
	want *w = malloc(MAX_SEGS * MAX_RECS * sizeof *w);
	size_t m = want_sep(p, plen, s, w);
	ns_dir *h;
	assert_int_equal(ns_opendir(dir, &h), 0);
	lister l = {0};
	list_from(dir, h, 0, SIZE_MAX, &l);
	char where[64];
	snprintf(where, sizeof where, "%s/%.*s", s < 0 ? "view" : O[s].name,
	         (int)plen, (const char *)p);
	if (l.n != m + 2)
		fail_msg("%s: %zu entries, want %zu", where, l.n, m + 2);
	for (size_t i = 0; i < m; i++) {
		got *g = &l.e[i + 2];
		if (strcmp(g->name, w[i].name) != 0)
			fail_msg("%s: entry %zu is \"%s\", want \"%s\"", where,
			         i, g->name, w[i].name);
		/* resumed after each entry: the rest */
		lister r = {0};
		list_from(dir, h, g->off, SIZE_MAX, &r);
		assert_int_equal(r.n, m - 1 - i);
		free(r.e);
		if (w[i].r) {
			struct stat st;
			uint64_t ino = look(dir, w[i].name, &st);
			if (!ino)
				fail_msg("%s: \"%s\" listed, not found", where,
				         w[i].name);
			assert_true(S_ISREG(g->st.st_mode));
			check_key(ino, &st, w[i].r, w[i].seg, where);
			continue;
		}
		/* a directory: held while the walk is below it */
		ns_entry e;
		assert_int_equal(ns_lookup(dir, w[i].name, &e), 0);
		uint64_t ino = e.ino;
		if (ino_kind(ino) != K_PREFIX)
			fail_msg("%s: \"%s\" listed as a directory, found "
			         "%#" PRIx64,
			         where, w[i].name, ino);
		assert_true(S_ISDIR(e.st.st_mode) && S_ISDIR(g->st.st_mode));
		struct stat st;
		assert_int_equal(ns_getattr(ino, &st), 0);
		assert_true(S_ISDIR(st.st_mode));
		uint8_t sub[400];
		memcpy(sub, p, plen);
		memcpy(sub + plen, w[i].comp, w[i].clen);
		size_t slen = plen + w[i].clen;
		sub[slen++] = ':';
		walk_sep(ino, sub, slen, s);
		ns_forget(ino, 1);
	}
	/* with attributes, page by page: the directories get their inodes */
	ns_closedir(h);
	assert_int_equal(ns_opendir(dir, &h), 0);
	l.plus = true;
	list_from(dir, h, 0, 1, &l);
	assert_int_equal(l.n, m + 2);
	for (size_t i = 0; i < m; i++) {
		assert_string_equal(l.e[i + 2].name, w[i].name);
		assert_int_equal(ino_kind(l.e[i + 2].ino),
		                 w[i].r ? (s < 0 ? K_VIEWKEY : K_SEGKEY)
		                        : K_PREFIX);
	}
	ns_closedir(h);
	free(l.e);
	free(w);
}

static void test_sep(void **state)
{
	(void)state;
	S.sep = ':';
	uint8_t p[400];
	walk_sep(look(INO_ROOT, "view", NULL), p, 0, -1);
	for (size_t s = 0; s < O_n; s++)
		walk_sep(seg_dir(s), p, 0, (int)s);
	/* no separator inside a component's name */
	assert_int_equal(look(look(INO_ROOT, "view", NULL), "a:a", NULL), 0);
	S.sep = -1;
}

/* ---- -o tombstones ------------------------------------------------------- */

static void test_tombstones(void **state)
{
	(void)state;
	S.tombstones = true;
	size_t seen = 0;
	for (size_t s = 1; s < O_n; s++) {
		uint64_t dir = seg_dir(s);
		for (size_t i = 0; i < O[s].n; i++) {
			const rec *r = &O[s].r[i];
			char name[SEGFS_NAME_MAX + 1];
			struct stat st;
			uint64_t ino =
			    look(dir, key_name(r->key, r->len, name), &st);
			assert_int_not_equal(ino, 0);
			check_key(ino, &st, r, s, O[s].name);
			seen += r->tomb;
		}
	}
	assert_true(seen > 0);
	S.tombstones = false;
}

/* ---- a catalog change ---------------------------------------------------- */

static void test_catalog_change(void **state)
{
	(void)state;
	uint64_t view = look(INO_ROOT, "view", NULL);
	ns_dir *old;
	assert_int_equal(ns_opendir(view, &old), 0);
	lister lo = {0};
	list_from(view, old, 0, SIZE_MAX, &lo);
	/* s3 is replaced by s4: other values, some keys deleted */
	test_rng g = test_rng_for(g_seed, 4);
	O_n = 4;
	strcpy(O[3].name, "s4");
	for (size_t i = 0; i < O[2].n; i++)
		seg_add(&g, &O[3], O[2].r[i].key, O[2].r[i].len,
		        test_rng_below(&g, 4) == 0);
	for (size_t i = 0; i < O[0].n; i += 5)
		seg_add(&g, &O[3], O[0].r[i].key, O[0].r[i].len, true);
	seg_write(3);
	O[2].live = false;
	kvs_catalog *c;
	kvs_error err;
	CHECK_ST(kvs_catalog_open(&c, g_dir, &err), KVS_OK, "%s", err.message);
	const char *in[] = {"s3"};
	CHECK_ST(kvs_catalog_replace(c, kvs_catalog_generation(c), in, 1, "s4",
	                             false, &err),
	         KVS_OK, "%s", err.message);
	kvs_catalog_close(c);
	pthread_mutex_lock(&S.publish);
	assert_int_equal(state_reload_locked(&err), 0);
	pthread_mutex_unlock(&S.publish);
	/* the new view/: resumed at the old listing's offsets, it goes on
	 * after each old entry's key */
	want *w = malloc(MAX_SEGS * MAX_RECS * sizeof *w);
	size_t m = want_flat(true, 0, w);
	ns_dir *now;
	assert_int_equal(ns_opendir(view, &now), 0);
	lister ln = {0};
	bool *of_s3 = calloc(lo.n, sizeof *of_s3);
	for (size_t i = 2; i < lo.n; i++) {
		ns_bytes b;
		uint64_t ino = lo.e[i].ino; /* the old entry's key file */
		assert_int_equal(ns_getxattr(ino, "user.segfs.segment", &b), 0);
		of_s3[i] = b.len == 2 && !memcmp(b.p, "s3", 2);
		assert_int_equal(ns_getxattr(ino, "user.segfs.key", &b), 0);
		rec at = {.len = b.len};
		memcpy(at.key, b.p, b.len);
		size_t k = 0;
		while (k < m && rec_cmp(w[k].r, &at) <= 0)
			k++;
		list_from(view, now, lo.e[i].off, SIZE_MAX, &ln);
		if (ln.n != m - k)
			fail_msg("resumed after old \"%s\": %zu entries, want "
			         "%zu",
			         lo.e[i].name, ln.n, m - k);
		for (size_t j = 0; j < ln.n; j++)
			assert_string_equal(ln.e[j].name, w[k + j].name);
	}
	check_flat_listing(view, w, m, "view/ after the change");
	/* the old listing was the last holder of s3: gone, its offsets are
	 * stale */
	ns_closedir(old);
	tls_leave(); /* the sweep of s3's cursor */
	tls_enter();
	size_t stale = 0;
	for (size_t i = 2; i < lo.n; i++) {
		if (!of_s3[i])
			continue;
		stale++;
		ln.room = SIZE_MAX;
		ln.n = 0;
		assert_int_equal(
		    ns_readdir(view, now, lo.e[i].off, false, collect, &ln),
		    EINVAL);
	}
	assert_true(stale > 0);
	assert_int_equal(look(INO_SEGMENTS, "s3", NULL), 0);
	ns_closedir(now);
	free(of_s3);
	free(w);
	free(lo.e);
	free(ln.e);
}

/* ---- a replaced view/ ---------------------------------------------------- */

/* Under a view/ inode the catalog has replaced (its epoch passed: what
 * state.c does when it tells the kernel), names are answered, but the
 * kernel is told not to keep them; under the new one it is. */
static void test_stale_view(void **state)
{
	(void)state;
	uint64_t old = look(INO_ROOT, "view", NULL);
	atomic_fetch_add(&S.view_epoch, 1);
	uint64_t now = look(INO_ROOT, "view", NULL);
	assert_int_not_equal(old, now);
	want *w = malloc(MAX_SEGS * MAX_RECS * sizeof *w);
	size_t m = want_flat(true, 0, w);
	assert_true(m > 0);
	for (int pass = 0; pass < 2; pass++) {
		uint64_t dir = pass ? now : old;
		ns_entry e;
		assert_int_equal(ns_lookup(dir, w[0].name, &e), 0);
		assert_int_not_equal(e.ino, 0);
		assert_true(e.key);
		assert_int_equal(e.cache, pass == 1);
		ns_forget(e.ino, 1);
		assert_int_equal(ns_lookup(dir, "c", &e), 0); /* a miss */
		assert_int_equal(e.ino, 0);
		assert_int_equal(e.cache, pass == 1);
		ns_dir *h;
		assert_int_equal(ns_opendir(dir, &h), 0);
		lister l = {0};
		list_from(dir, h, 0, SIZE_MAX, &l);
		assert_int_equal(l.n, m + 2);
		for (size_t i = 0; i < l.n; i++)
			assert_int_equal(l.e[i].cache, pass == 1);
		ns_closedir(h);
		free(l.e);
	}
	free(w);
}

/* ---- a damaged segment ------------------------------------------------------- */

/* A fault in a segment's mapping (the FUSE layer's guard catches the
 * SIGBUS and calls ns_fault with the address): from then on, whatever
 * reads that segment fails with EIO, and what does not still works. */
static void test_damaged(void **state)
{
	(void)state;
	uint64_t s1 = seg_dir(0);
	const rec *r = NULL;
	for (size_t i = 0; i < O[0].n && !r; i++)
		if (!O[0].r[i].tomb && O[0].r[i].vlen > 0)
			r = &O[0].r[i];
	assert_non_null(r);
	char name[SEGFS_NAME_MAX + 1];
	uint64_t ino = look(s1, key_name(r->key, r->len, name), NULL);
	assert_int_not_equal(ino, 0);
	ns_dir *h;
	assert_int_equal(ns_opendir(s1, &h), 0); /* before the fault */
	ns_bytes b;
	assert_int_equal(ns_read(ino, 1, 0, &b), 0);
	ns_request("read", ino, NULL);
	assert_int_equal(ns_fault(b.p), EIO); /* b.p: in the mapping */
	assert_int_equal(ns_read(ino, 1, 0, &b), EIO);
	assert_int_equal(ns_getxattr(ino, "user.segfs.key", &b), EIO);
	ns_entry e;
	assert_int_equal(ns_lookup(s1, name, &e), EIO);
	lister l = {.room = SIZE_MAX};
	assert_int_equal(ns_readdir(s1, h, 0, false, collect, &l), EIO);
	assert_int_equal(l.n, 0);
	ns_closedir(h);
	assert_int_equal(ns_opendir(s1, &h), EIO);
	assert_int_equal(ns_opendir(look(INO_ROOT, "view", NULL), &h), EIO);
	/* the other segments, and the segment's own attributes, still */
	struct stat st;
	assert_int_equal(ns_getattr(s1, &st), 0);
	want *w = malloc(MAX_SEGS * MAX_RECS * sizeof *w);
	size_t m = want_flat(false, 1, w);
	check_flat_listing(seg_dir(1), w, m, "s2 beside a damaged s1");
	free(w);
	free(l.e);
}

/* ---- setup --------------------------------------------------------------- */

/* Each test is one request of the daemon's: its cursors are used between
 * tls_enter and tls_leave (state.h), also when the test fails. */
static int request_start(void **state)
{
	tls_enter();
	return test_timer_start(state);
}

static int request_end(void **state)
{
	S.sep = -1; /* what test_sep and test_tombstones change */
	S.tombstones = false;
	tls_leave();
	return test_timer_stop(state);
}

#define NS_TEST(f)                                                             \
	cmocka_unit_test_setup_teardown(f, request_start, request_end)

static int group_setup(void **state)
{
	(void)state;
	if (tmpdir_setup("test_namespace"))
		return -1;
	path_join(g_dir, g_tmp, "d");
	if (mkdir(g_dir, 0755))
		return -1;
	make_segments();
	S.segdir = g_dir;
	state_load(); /* exits with a message on error */
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	tls_release();
	return tmpdir_teardown();
}

int main(int argc, char **argv)
{
	test_filter_from_env();
	test_filter_from_argv(argc, argv);
	g_seed = test_seed_from_env("test_namespace", SEED);
	const struct CMUnitTest tests[] = {
	    NS_TEST(test_lookup_segments), NS_TEST(test_lookup_view),
	    NS_TEST(test_names_refused),   NS_TEST(test_fixed),
	    NS_TEST(test_listing_flat),    NS_TEST(test_sep),
	    NS_TEST(test_tombstones),      NS_TEST(test_catalog_change),
	    NS_TEST(test_stale_view),
	    NS_TEST(test_damaged), /* last: s1 stays damaged */
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
