/*
 * test_segment.c — segments (kvseg/segment.h): the writer, the reader and
 * cursors, against an independent oracle.
 *
 * What it proves, in all four modes (byte/bit profile x typed/raw framing):
 *   - round trip: structured keys (shared prefix + big-endian counter),
 *     hash-like random keys, keys of every length 1..24 bytes and 1..130
 *     bits with prefix chains, shared prefixes of 0, 64 and 4096 bytes,
 *     empty keys, empty values, FF16 and FV (0..512 byte) values, a single
 *     record, the empty segment, keys of KVS_MAX_KEY_BITS, tombstones every
 *     17th record (typed), restart intervals 1, 2, 15 (and the default),
 *     16, 64 and KVS_MAX_RESTART_INTERVAL, and custom bit-profile codes: a
 *     full cursor scan (through kvs_segment_open and through
 *     kvs_segment_open_memory, also at every address alignment) returns
 *     exactly the records written, kvs_segment_verify accepts the file,
 *     kvs_segment_info matches the oracle's counts and the space components
 *     sum to the file's size; the file is, byte for byte, what FORMAT.md
 *     §5-§9 describes (header fields, directory, section placement and
 *     padding, CRC32Cs, the record stream, restart offsets, sort metadata
 *     and fences, and the §8.1 example); writing the same records twice
 *     gives identical files, also when the second write has a size hint
 *     (larger or smaller than the file, or unbounded), and the hinted file
 *     takes no more space on disk;
 *   - the writer refuses out-of-order and duplicate keys (KVS_E_ORDER,
 *     naming the record's index), partial bytes in the byte profile,
 *     tombstones in raw framing, over-long keys, lengths a fixed-width code
 *     cannot hold, bad options and codes, unknown kinds, keys and values
 *     past the limits (up to SIZE_MAX bytes, refused before a byte is
 *     read) and NULL buffers with a length; an unfinished or failed writer
 *     leaves nothing in its directory, a finished one only its file;
 *     messages of calls given a path start with it;
 *   - cursors: seek (lower bound), lookup (found flag), next and
 *     seek_ordinal agree with the oracle's binary search for every present
 *     key, prefixes and extensions of them, keys just below and above, keys
 *     before the first and after the last, random keys, and every record
 *     around every restart; ordinal() and value_len() agree;
 *   - threads: concurrent readers, each with its own cursor, and ref/unref
 *     from threads after the opener has dropped its reference;
 *   - corruption: every byte of the envelope and directory changed three
 *     ways, hundreds of byte changes in every section, random multi-byte
 *     changes, every truncation of small files and appended bytes: opening
 *     or verifying fails with a message. With the CRC32Cs recomputed (so
 *     that the checks behind them are reached), and for every header and
 *     directory field set to nearby and extreme values: changed counts and
 *     totals are refused, and whatever the change, open, cursors and
 *     verify stay inside the buffer (an exact-size heap copy, or one
 *     against a PROT_NONE page), always terminate, fail only with a status
 *     that leaves the cursor invalid, and whatever verify accepts is a
 *     consistent segment (sorted keys, the header's totals, lookups of its
 *     own keys). Crafted restart fences, CRC32Cs fixed: a section of the
 *     wrong length fails open; a skip one bit off the first and last keys'
 *     common prefix, with every fence recomputed at it, fails verify.
 *
 * Oracle: an in-memory array of records sorted by ref_key_cmp, a bit-string
 * comparator written here (cross-checked against a bit-at-a-time one), its
 * binary search, and a reference encoder of the file format (LEB128, EGk,
 * Golomb, fixed width, zigzag deltas, front coding) written from FORMAT.md
 * alone. The code under test never computes an expected value (the
 * restart EF is read back with kvsi_ef_get, which test_ef covers);
 * kvs_key_compare is itself tested against ref_key_cmp.
 *
 * The seed is printed (KVSEG_TEST_SEED changes it); failures name the case,
 * the mode, the operation and the key.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvseg/crc32c.h"
#include "kvseg/frames.h"
#include "kvseg/segment.h"
#include "testutil.h"

#define SEED 0x5E6F11E5ull

#define HEADER_BYTES     128
#define DIR_ENTRY_BYTES  32
#define SECTION_STREAM   1
#define SECTION_RESTARTS 2
#define SECTION_SORTMETA 3

static uint64_t g_seed;
static const char *g_seq = "";  /* the case under test, for messages */
static const char *g_mode = ""; /* the mode (profile/framing, K) */
static char g_case[256];
static char g_mode_buf[96];
static char g_tmp[PATH_MAX]; /* this run's temporary directory */

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

/* Calls given a path start their messages with it (segment.h). */
static void expect_path_first(const kvs_error *err, const char *path,
                              const char *what)
{
	size_t n = strlen(path);
	if (n < 200 && strncmp(err->message, path, n) != 0)
		FAILF("%s: the message \"%s\" does not start with the path %s",
		      what, err->message, path);
}

static void set_case(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void set_case(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g_case, sizeof g_case, fmt, ap);
	va_end(ap);
	g_seq = g_case;
}

static void set_mode(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void set_mode(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g_mode_buf, sizeof g_mode_buf, fmt, ap);
	va_end(ap);
	g_mode = g_mode_buf;
}

/* ---- little-endian fields ------------------------------------------------ */

static uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int k = 0; k < 4; k++)
		p[k] = (uint8_t)(v >> (8 * k));
}

/* ---- keys and the oracle's order ------------------------------------------
 */

/* The same order one bit at a time, to check ref_key_cmp itself. */
static int naive_key_cmp(const uint8_t *a, uint64_t a_bits, const uint8_t *b,
                         uint64_t b_bits)
{
	for (uint64_t i = 0;; i++) {
		if (i == a_bits || i == b_bits)
			return (a_bits > b_bits) - (a_bits < b_bits);
		int x = test_msb_bit_at(a, i), y = test_msb_bit_at(b, i);
		if (x != y)
			return x - y;
	}
}

static int sign(int x)
{
	return (x > 0) - (x < 0);
}

/* A key as hex (the first 20 bytes) and its length in bits. */
static const char *hexkey(const uint8_t *k, uint64_t bits)
{
	static _Thread_local char buf[4][80];
	static _Thread_local unsigned slot;
	char *b = buf[slot++ & 3];
	size_t nb = key_bytes(bits), show = nb < 20 ? nb : 20, o = 0;
	for (size_t i = 0; i < show; i++)
		o += (size_t)snprintf(b + o, 80 - o, "%02x", k[i]);
	snprintf(b + o, 80 - o, "%s/%" PRIu64 "b", show < nb ? ".." : "", bits);
	if (nb == 0)
		snprintf(b, 80, "(empty)/0b");
	return b;
}

/* ---- the oracle: records sorted by ref_key_cmp ----------------------------
 */

typedef struct rec {
	uint8_t *key; /* key_bytes(bits) bytes (at least 1), zero padding */
	uint64_t bits;
	kvs_kind kind;
	uint8_t *val; /* vlen bytes; NULL when vlen is 0 */
	size_t vlen;
} rec;

typedef struct recset {
	rec *r;
	size_t n, cap;
	uint64_t tombstones, key_bits, value_bytes, max_key_bits;
} recset;

static void rs_push(recset *rs, const uint8_t *key, uint64_t bits)
{
	if (rs->n == rs->cap) {
		rs->cap = rs->cap ? 2 * rs->cap : 256;
		rs->r = realloc(rs->r, rs->cap * sizeof *rs->r);
		assert_non_null(rs->r);
	}
	rec *x = &rs->r[rs->n++];
	memset(x, 0, sizeof *x);
	x->key = key_dup(key, bits);
	x->bits = bits;
	x->kind = KVS_KIND_VALUE;
}

static int rec_cmp(const void *a, const void *b)
{
	const rec *x = a, *y = b;
	return ref_key_cmp(x->key, x->bits, y->key, y->bits);
}

static void rs_free(recset *rs)
{
	for (size_t i = 0; i < rs->n; i++) {
		free(rs->r[i].key);
		free(rs->r[i].val);
	}
	free(rs->r);
	memset(rs, 0, sizeof *rs);
}

/* The first record whose key is >= q. */
static size_t ref_lower_bound(const recset *rs, const uint8_t *q,
                              uint64_t q_bits)
{
	size_t lo = 0, hi = rs->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ref_key_cmp(rs->r[mid].key, rs->r[mid].bits, q, q_bits) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

typedef enum key_shape {
	KEYS_NONE,       /* none (only the empty key, if asked for) */
	KEYS_STRUCTURED, /* 8 shared bytes + a big-endian counter */
	KEYS_HASH,       /* 16 random bytes */
	KEYS_BYTELENS,   /* every length 1..24 bytes, with prefix chains */
	KEYS_BITLENS,    /* every length 1..130 bits, with prefix chains */
	KEYS_RANDBITS,   /* n keys of random bit lengths 1..130 */
} key_shape;

typedef enum val_shape {
	VALS_FF16,  /* 16 bytes */
	VALS_FV,    /* 0..512 bytes, uniform */
	VALS_SMALL, /* 0..24 bytes */
	VALS_EMPTY,
} val_shape;

typedef struct gen_spec {
	const char *name;
	key_shape keys;
	val_shape vals;
	size_t prefix; /* bytes shared by every key, before its own part */
	size_t n;      /* keys to draw (structured, hash, randbits) */
	bool empty_key;
} gen_spec;

/* Draws the keys of g, sorts and dedupes them, then gives them values;
 * with tombstones, every 17th record (16, 33, ...) is one. */
static void rs_generate(recset *rs, const gen_spec *g, bool tombstones,
                        test_rng *r)
{
	memset(rs, 0, sizeof *rs);
	size_t P = g->prefix;
	uint8_t *buf = calloc(P + 64, 1);
	assert_non_null(buf);
	rand_bytes(r, buf, P);
	uint8_t *sfx = buf + P;
	switch (g->keys) {
	case KEYS_NONE:
		break;
	case KEYS_STRUCTURED: {
		uint8_t shared[8];
		rand_bytes(r, shared, 8);
		uint64_t start = test_rng_below(r, 1ull << 40);
		uint64_t step = 1 + test_rng_below(r, 5);
		for (size_t i = 0; i < g->n; i++) {
			memcpy(sfx, shared, 8);
			put_be64(sfx + 8, start + i * step);
			rs_push(rs, buf, 8 * (P + 16));
		}
		break;
	}
	case KEYS_HASH:
		for (size_t i = 0; i < g->n; i++) {
			rand_bytes(r, sfx, 16);
			rs_push(rs, buf, 8 * (P + 16));
		}
		break;
	case KEYS_BYTELENS: {
		uint8_t base[3][24];
		rand_bytes(r, &base[0][0], sizeof base);
		for (size_t len = 1; len <= 24; len++) {
			for (int b = 0; b < 3; b++) {
				memcpy(sfx, base[b], len);
				rs_push(rs, buf, 8 * (P + len));
			}
			for (int t = 0; t < 2; t++) {
				rand_bytes(r, sfx, len);
				rs_push(rs, buf, 8 * (P + len));
			}
			memcpy(sfx, base[0],
			       len); /* diverges in its last byte */
			sfx[len - 1] ^= (uint8_t)(1 + test_rng_below(r, 255));
			rs_push(rs, buf, 8 * (P + len));
		}
		break;
	}
	case KEYS_BITLENS: {
		uint8_t base[4][17];
		rand_bytes(r, &base[0][0], sizeof base);
		for (uint64_t len = 1; len <= 130; len++) {
			for (int b = 0; b < 4; b++) {
				memcpy(sfx, base[b], 17);
				rs_push(rs, buf, 8 * P + len);
			}
			for (int t = 0; t < 3; t++) {
				rand_bytes(r, sfx, 17);
				rs_push(rs, buf, 8 * P + len);
			}
		}
		break;
	}
	case KEYS_RANDBITS: {
		uint64_t prev_len = 0;
		for (size_t i = 0; i < g->n; i++) {
			uint64_t len;
			if (prev_len > 1 && test_rng_below(r, 4) == 0) {
				/* a prefix of the previous key (sfx holds it)
				 */
				len = 1 + test_rng_below(r, prev_len);
			} else {
				len = 1 + test_rng_below(r, 130);
				rand_bytes(r, sfx, 17);
			}
			rs_push(rs, buf, 8 * P + len);
			prev_len = len;
		}
		break;
	}
	}
	if (g->empty_key)
		rs_push(rs, buf, 0);
	free(buf);

	if (rs->n > 1)
		qsort(rs->r, rs->n, sizeof *rs->r, rec_cmp);
	size_t w = 0;
	for (size_t i = 0; i < rs->n; i++) {
		if (w > 0 && rec_cmp(&rs->r[w - 1], &rs->r[i]) == 0) {
			free(rs->r[i].key);
			continue;
		}
		rs->r[w++] = rs->r[i];
	}
	rs->n = w;

	for (size_t i = 0; i < rs->n; i++) {
		rec *x = &rs->r[i];
		if (tombstones && i % 17 == 16) {
			x->kind = KVS_KIND_TOMBSTONE;
			rs->tombstones++;
		} else {
			switch (g->vals) {
			case VALS_FF16:
				x->vlen = 16;
				break;
			case VALS_FV:
				x->vlen = (size_t)test_rng_below(r, 513);
				break;
			case VALS_SMALL:
				x->vlen = (size_t)test_rng_below(r, 25);
				break;
			case VALS_EMPTY:
				x->vlen = 0;
				break;
			}
			if (x->vlen) {
				x->val = malloc(x->vlen);
				assert_non_null(x->val);
				rand_bytes(r, x->val, x->vlen);
			}
		}
		rs->key_bits += x->bits;
		rs->value_bytes += x->vlen;
		if (x->bits > rs->max_key_bits)
			rs->max_key_bits = x->bits;
	}
}

/* ---- modes, options, files ------------------------------------------------
 */

typedef struct mode {
	kvs_profile profile;
	kvs_framing framing;
	const char *name;
} mode;

static const mode MODES[] = {
    {KVS_PROFILE_BYTE, KVS_FRAMING_TYPED, "byte/typed"},
    {KVS_PROFILE_BYTE, KVS_FRAMING_RAW, "byte/raw"},
    {KVS_PROFILE_BIT, KVS_FRAMING_TYPED, "bit/typed"},
    {KVS_PROFILE_BIT, KVS_FRAMING_RAW, "bit/raw"},
};
#define NMODES (sizeof MODES / sizeof MODES[0])

static kvs_writer_options make_opts(const mode *m, uint32_t restart_interval,
                                    uint64_t sequence)
{
	kvs_writer_options o;
	memset(&o, 0, sizeof o);
	o.profile = m->profile;
	o.framing = m->framing;
	o.restart_interval = restart_interval;
	o.sequence = sequence;
	o.flags = KVS_WRITER_NO_SYNC;
	return o;
}

static uint32_t eff_interval(const kvs_writer_options *o)
{
	return o->restart_interval ? o->restart_interval
	                           : KVS_DEFAULT_RESTART_INTERVAL;
}

/* A heap copy of exactly len bytes (AddressSanitizer sees any read past
 * it). */
static uint8_t *exact_copy(const uint8_t *src, size_t len)
{
	uint8_t *p = malloc(len ? len : 1);
	assert_non_null(p);
	if (len)
		memcpy(p, src, len);
	return p;
}

/* Appends rs's records through w; *failed_at is the index of the first
 * record the writer refused (rs->n if none). Tombstones go with a value
 * that the writer must ignore; keys of whole bytes alternate between
 * kvs_writer_add and kvs_writer_add_bytes. */
static kvs_status add_records(kvs_writer *w, const recset *rs, size_t from,
                              size_t to, kvs_error *err, size_t *failed_at)
{
	for (size_t i = from; i < to; i++) {
		const rec *x = &rs->r[i];
		const void *v = x->val;
		size_t vl = x->vlen;
		if (x->kind == KVS_KIND_TOMBSTONE) {
			v = "ignored";
			vl = 7;
		}
		kvs_status st;
		if (x->bits % 8 == 0 && i % 2 == 1)
			st = kvs_writer_add_bytes(w, x->key,
			                          (size_t)(x->bits / 8),
			                          x->kind, v, vl, err);
		else
			st = kvs_writer_add(w, x->key, x->bits, x->kind, v, vl,
			                    err);
		if (st != KVS_OK) {
			*failed_at = i;
			return st;
		}
	}
	*failed_at = to;
	return KVS_OK;
}

/* Writes rs to path. */
static kvs_status write_recset(const char *path, const recset *rs,
                               const kvs_writer_options *o, kvs_error *err,
                               size_t *failed_at)
{
	kvs_writer *w = NULL;
	*failed_at = 0;
	kvs_status st = kvs_writer_open(&w, path, o, err);
	if (st != KVS_OK)
		return st;
	st = add_records(w, rs, 0, rs->n, err, failed_at);
	if (st == KVS_OK) {
		EXPECT_U64(kvs_writer_count(w), rs->n, "kvs_writer_count");
		st = kvs_writer_finish(w, err);
	}
	kvs_writer_free(w);
	return st;
}

static void write_ok(const char *path, const recset *rs,
                     const kvs_writer_options *o)
{
	kvs_error err;
	memset(&err, 0, sizeof err);
	size_t at;
	kvs_status st = write_recset(path, rs, o, &err, &at);
	EXPECT_ST(st, KVS_OK, "writing %s: record %zu of %zu (key %s): %s",
	          path, at, rs->n,
	          at < rs->n ? hexkey(rs->r[at].key, rs->r[at].bits) : "-",
	          err.message);
}

/* ---- checking a segment against the oracle --------------------------------
 */

/* What a cursor was asked, for messages. */
typedef struct op {
	const char *name;
	const uint8_t *key; /* the probe key, or NULL */
	uint64_t bits;
	uint64_t arg;
} op;

static const char *op_str(const op *o)
{
	static _Thread_local char b[200];
	if (o->key)
		snprintf(b, sizeof b, "%s(key %s)", o->name,
		         hexkey(o->key, o->bits));
	else
		snprintf(b, sizeof b, "%s(%" PRIu64 ")", o->name, o->arg);
	return b;
}

/* The cursor is on record i of rs (the end when i == rs->n). */
static void expect_at(kvs_cursor *c, const recset *rs, size_t i, const op *o)
{
	if (i >= rs->n) {
		if (kvs_cursor_valid(c)) {
			uint64_t kb = 0;
			const uint8_t *k = kvs_cursor_key(c, &kb);
			FAILF("%s: expected the end (%zu records), cursor on "
			      "ordinal %" PRIu64 " key %s",
			      op_str(o), rs->n, kvs_cursor_ordinal(c),
			      hexkey(k, kb));
		}
		EXPECT_U64(kvs_cursor_ordinal(c), rs->n,
		           "%s: ordinal at the end", op_str(o));
		return;
	}
	const rec *x = &rs->r[i];
	if (!kvs_cursor_valid(c))
		FAILF("%s: cursor at the end (ordinal %" PRIu64
		      "), expected record %zu of %zu (key %s)",
		      op_str(o), kvs_cursor_ordinal(c), i, rs->n,
		      hexkey(x->key, x->bits));
	EXPECT_U64(kvs_cursor_ordinal(c), i, "%s: ordinal (expected key %s)",
	           op_str(o), hexkey(x->key, x->bits));
	uint64_t kb = U64MAX;
	const uint8_t *k = kvs_cursor_key(c, &kb);
	if (kb != x->bits || (kb && ref_key_cmp(k, kb, x->key, x->bits) != 0))
		FAILF("%s: record %zu has key %s, expected %s", op_str(o), i,
		      hexkey(k, kb), hexkey(x->key, x->bits));
	if (kb % 8 && (k[kb / 8] & (0xFFu >> (kb % 8))) != 0)
		FAILF("%s: record %zu key %s: padding bits not zero (last "
		      "byte 0x%02x)",
		      op_str(o), i, hexkey(k, kb), k[kb / 8]);
	if (kvs_cursor_kind(c) != x->kind)
		FAILF("%s: record %zu (key %s) kind %d, expected %d", op_str(o),
		      i, hexkey(x->key, x->bits), (int)kvs_cursor_kind(c),
		      (int)x->kind);
	EXPECT_U64(kvs_cursor_value_len(c), x->vlen,
	           "%s: value_len of record %zu", op_str(o), i);
	const uint8_t *v = NULL;
	size_t vl = (size_t)-1;
	EXPECT_ST(kvs_cursor_value(c, &v, &vl), KVS_OK,
	          "%s: kvs_cursor_value of record %zu", op_str(o), i);
	EXPECT_U64(vl, x->vlen, "%s: value length of record %zu", op_str(o), i);
	if (vl && memcmp(v, x->val, vl) != 0) {
		size_t d = 0;
		while (v[d] == x->val[d])
			d++;
		FAILF("%s: record %zu value differs at byte %zu of %zu "
		      "(0x%02x, expected 0x%02x)",
		      op_str(o), i, d, vl, v[d], x->val[d]);
	}
}

/* first + next over every record; in the byte profile over a segment in
 * memory [mem, mem + mem_len), values must point into it (no copy). */
static void scan_check(kvs_segment *s, const recset *rs, bool byte_profile,
                       const uint8_t *mem, size_t mem_len)
{
	kvs_cursor *c = NULL;
	EXPECT_ST(kvs_cursor_open(&c, s), KVS_OK, "kvs_cursor_open");
	op o = {"(fresh cursor)", NULL, 0, 0};
	expect_at(c, rs, rs->n, &o); /* starts at the end */
	o.name = "first";
	EXPECT_ST(kvs_cursor_first(c), KVS_OK, "kvs_cursor_first");
	expect_at(c, rs, 0, &o);
	o.name = "scan next";
	for (size_t i = 0; i < rs->n; i++) {
		if (mem && byte_profile && rs->r[i].vlen) {
			const uint8_t *v;
			size_t vl;
			EXPECT_ST(kvs_cursor_value(c, &v, &vl), KVS_OK,
			          "value of record %zu", i);
			uintptr_t lo = (uintptr_t)mem, hi = lo + mem_len;
			if ((uintptr_t)v < lo || (uintptr_t)v + vl > hi)
				FAILF("byte profile: value of record %zu is "
				      "not a pointer into the segment",
				      i);
		}
		o.arg = i;
		EXPECT_ST(kvs_cursor_next(c), KVS_OK, "next from record %zu",
		          i);
		expect_at(c, rs, i + 1, &o);
	}
	kvs_cursor_close(c);
}

static void check_codes(const kvs_segment_info *in, const kvs_writer_options *o)
{
	kvs_code_spec want[KVS_FIELD_COUNT];
	if (o->custom_codes)
		memcpy(want, o->codes, sizeof want);
	else
		kvs_default_codes(want);
	for (int f = 0; f < KVS_FIELD_COUNT; f++) {
		char a[16], b[16];
		kvs_code_spec_format(&in->codes[f], a);
		kvs_code_spec_format(&want[f], b);
		if (in->codes[f].kind != want[f].kind ||
		    in->codes[f].param != want[f].param ||
		    in->codes[f].delta != want[f].delta)
			FAILF("info.codes[%d] is %s, expected %s", f, a, b);
	}
}

static void check_info(const kvs_segment_info *in, const recset *rs,
                       const kvs_writer_options *o, uint64_t file_len)
{
	uint32_t k = eff_interval(o);
	EXPECT_U64(in->version, KVS_SEGMENT_VERSION, "info.version");
	EXPECT_U64(in->profile, o->profile, "info.profile");
	EXPECT_U64(in->framing, o->framing, "info.framing");
	EXPECT_U64(in->restart_interval, k, "info.restart_interval");
	EXPECT_U64(in->sequence, o->sequence, "info.sequence");
	EXPECT_U64(in->records, rs->n, "info.records");
	EXPECT_U64(in->tombstones, rs->tombstones, "info.tombstones");
	EXPECT_U64(in->restarts, test_ceil_div(rs->n, k),
	           "info.restarts (ceil(%zu / %u))", rs->n, k);
	EXPECT_U64(in->key_bits, rs->key_bits, "info.key_bits");
	EXPECT_U64(in->value_bytes, rs->value_bytes, "info.value_bytes");
	EXPECT_U64(in->max_key_bits, rs->max_key_bits, "info.max_key_bits");
	EXPECT_U64(in->file_bytes, file_len, "info.file_bytes vs the file");
	EXPECT_U64(
	    in->stream_bytes + in->ef_bytes + in->fence_bytes + in->other_bytes,
	    in->file_bytes,
	    "stream_bytes %" PRIu64 " + ef_bytes %" PRIu64
	    " + fence_bytes %" PRIu64 " + other_bytes %" PRIu64
	    " vs file_bytes",
	    in->stream_bytes, in->ef_bytes, in->fence_bytes, in->other_bytes);
	if (in->stream_bits > 8 * in->stream_bytes)
		FAILF("info.stream_bits %" PRIu64
		      " > 8 * stream_bytes %" PRIu64,
		      in->stream_bits, in->stream_bytes);
	if (o->profile == KVS_PROFILE_BIT)
		check_codes(in, o);
}

/* ---- the file as FORMAT.md §5-§9 lays it out -----------------------------
 */

/* The length of the common prefix of two keys, in bits. */
static uint64_t ref_lcp_bits(const uint8_t *a, uint64_t a_bits,
                             const uint8_t *b, uint64_t b_bits)
{
	uint64_t n = a_bits < b_bits ? a_bits : b_bits, i = 0;
	while (i + 8 <= n && a[i / 8] == b[i / 8])
		i += 8;
	while (i < n && test_msb_bit_at(a, i) == test_msb_bit_at(b, i))
		i++;
	return i;
}

static unsigned bit_length(uint64_t w)
{
	return w ? 64u - (unsigned)__builtin_clzll(w) : 0u;
}

static void ref_put_bytes(test_bitvec *v, const uint8_t *p, uint64_t from,
                          uint64_t to)
{
	for (uint64_t i = from; i < to; i++)
		test_bv_push(v, test_msb_bit_at(p, i));
}

/* §3.4 */
static void ref_varint(test_bitvec *v, uint64_t x)
{
	do {
		unsigned b = x & 0x7F;
		x >>= 7;
		test_bv_put(v, b | (x ? 0x80u : 0u), 8);
	} while (x);
}

/* §3.1-§3.3; false when x has no code (fixed width too small, Golomb
 * quotient above 2^16). Values here are far below 2^63. */
static bool ref_code(test_bitvec *v, const kvs_code_spec *c, uint64_t x)
{
	switch (c->kind) {
	case KVS_CODE_EG: {
		uint64_t w = x + ((uint64_t)1 << c->param);
		unsigned bl = bit_length(w);
		for (unsigned z = 0; z < bl - c->param - 1; z++)
			test_bv_push(v, 0);
		test_bv_put(v, w, bl);
		return true;
	}
	case KVS_CODE_GOLOMB: {
		uint64_t m = c->param, q = x / m, r = x % m;
		if (q > 65536)
			return false;
		unsigned b = bit_length(m - 1);
		uint64_t u = ((uint64_t)1 << b) - m;
		for (uint64_t z = 0; z < q; z++)
			test_bv_push(v, 0);
		test_bv_push(v, 1);
		if (r < u)
			test_bv_put(v, r, b - 1);
		else
			test_bv_put(v, r + u, b);
		return true;
	}
	case KVS_CODE_FIXED:
		if (c->param < 64 && (x >> c->param) != 0)
			return false;
		test_bv_put(v, x, c->param);
		return true;
	}
	return false;
}

/* The record stream (§6) and the restart offsets (§7) of rs. */
typedef struct ref_stream {
	test_bitvec v;     /* one byte per bit */
	uint64_t *starts;  /* the bit where each record starts */
	uint64_t *restart; /* restart offsets: bytes (byte), bits (bit) */
	uint64_t nrestart;
	bool encodable;
} ref_stream;

static void ref_encode(ref_stream *e, const recset *rs,
                       const kvs_writer_options *o)
{
	memset(e, 0, sizeof *e);
	e->encodable = true;
	uint32_t K = eff_interval(o);
	bool bit = o->profile == KVS_PROFILE_BIT;
	bool typed = o->framing == KVS_FRAMING_TYPED;
	kvs_code_spec codes[KVS_FIELD_COUNT];
	if (o->custom_codes)
		memcpy(codes, o->codes, sizeof codes);
	else
		kvs_default_codes(codes);
	uint64_t prev[KVS_FIELD_COUNT] = {0};
	uint64_t prev_vh = 0;
	e->starts = malloc((rs->n + 1) * sizeof *e->starts);
	e->restart = malloc((rs->n / K + 1) * sizeof *e->restart);
	assert_true(e->starts && e->restart);
	test_bitvec *v = &e->v;
	for (size_t i = 0; i < rs->n; i++) {
		const rec *x = &rs->r[i];
		bool restart = i % K == 0;
		e->starts[i] = v->n;
		uint64_t lcp = 0;
		if (restart) {
			e->restart[e->nrestart++] = bit ? v->n : v->n / 8;
			memset(prev, 0, sizeof prev);
		} else {
			const rec *y = &rs->r[i - 1];
			lcp = ref_lcp_bits(y->key, y->bits, x->key, x->bits);
			if (!bit)
				lcp -= lcp % 8;
		}
		uint64_t vals[KVS_FIELD_COUNT] = {lcp, x->bits, x->vlen};
		/* byte profile: the value header v, written only when it
		 * differs from the previous record's (always at a restart) */
		bool tomb0 = x->kind == KVS_KIND_TOMBSTONE;
		uint64_t vh = !typed ? x->vlen : tomb0 ? 0 : x->vlen + 1;
		bool vh_changed = restart || vh != prev_vh;
		prev_vh = vh;
		if (!bit && restart) {
			ref_varint(v, x->bits / 8);
		} else if (!bit) {
			uint64_t len = x->bits / 8;
			uint64_t prev_len = rs->r[i - 1].bits / 8;
			ref_varint(v, lcp / 8 * 4 + 2 * (len != prev_len) +
			                  vh_changed);
			if (len != prev_len)
				ref_varint(v, len > prev_len
				                  ? 2 * (len - prev_len)
				                  : 2 * (prev_len - len) - 1);
		}
		for (int f = 0; bit && f < KVS_FIELD_VALLEN; f++) {
			if (f == KVS_FIELD_LCP && restart)
				continue;
			uint64_t c = vals[f];
			if (codes[f].delta) {
				int64_t d = (int64_t)(vals[f] - prev[f]);
				c = d >= 0 ? 2 * (uint64_t)d
				           : 2 * (uint64_t)(-(d + 1)) + 1;
			}
			prev[f] = vals[f];
			e->encodable &= ref_code(v, &codes[f], c);
		}
		ref_put_bytes(v, x->key, lcp, x->bits);
		bool tomb = x->kind == KVS_KIND_TOMBSTONE;
		if (bit) {
			if (typed)
				test_bv_push(v, !tomb);
			if (!tomb) {
				uint64_t c = x->vlen;
				int f = KVS_FIELD_VALLEN;
				if (codes[f].delta) {
					int64_t d = (int64_t)(c - prev[f]);
					c = d >= 0
					        ? 2 * (uint64_t)d
					        : 2 * (uint64_t)(-(d + 1)) + 1;
				}
				prev[f] = x->vlen;
				e->encodable &= ref_code(v, &codes[f], c);
			}
		} else if (vh_changed) {
			ref_varint(v, vh);
		}
		if (!tomb)
			ref_put_bytes(v, x->val, 0, 8 * (uint64_t)x->vlen);
	}
	e->starts[rs->n] = v->n;
}

static void ref_stream_free(ref_stream *e)
{
	test_bv_free(&e->v);
	free(e->starts);
	free(e->restart);
}

/* The record of rs whose encoding holds bit b of the stream. */
static size_t record_at_bit(const ref_stream *e, size_t n, uint64_t b)
{
	size_t i = 0;
	while (i < n && e->starts[i + 1] <= b)
		i++;
	return i;
}

/* Checks the stream section's bytes against the reference encoding. */
static void check_stream_bytes(const uint8_t *sec, uint64_t sec_len,
                               const ref_stream *e, const recset *rs)
{
	uint64_t nbits = e->v.n;
	EXPECT_U64(sec_len, test_ceil_div(nbits, 8),
	           "record stream section length vs the reference encoding "
	           "(%" PRIu64 " bits)",
	           nbits);
	for (uint64_t b = 0; b < 8 * sec_len; b++) {
		int want = b < nbits ? e->v.bit[b] : 0;
		if (test_msb_bit_at(sec, b) != want) {
			size_t i = record_at_bit(e, rs->n, b);
			FAILF("record stream bit %" PRIu64 " (byte %" PRIu64
			      ") is %d, the reference encoding has %d: %s "
			      "%zu (key %s), which starts at bit %" PRIu64,
			      b, b / 8, !want, want,
			      b < nbits ? "record" : "padding after record", i,
			      i < rs->n ? hexkey(rs->r[i].key, rs->r[i].bits)
			                : "-",
			      i < rs->n ? e->starts[i] : nbits);
		}
	}
}

/* The sort metadata (§8): first and last key. */
static void check_sort_meta(const uint8_t *sec, uint64_t sec_len,
                            const recset *rs)
{
	const uint8_t *p = sec;
	uint64_t left = sec_len;
	for (int w = 0; w < 2; w++) {
		const rec *x = rs->n ? &rs->r[w ? rs->n - 1 : 0] : NULL;
		uint64_t bits = x ? x->bits : 0;
		if (left < 8)
			FAILF("sort metadata: %" PRIu64 " bytes", sec_len);
		EXPECT_U64(test_get_le64(p), bits,
		           "sort metadata: %s key length",
		           w ? "last" : "first");
		p += 8;
		left -= 8;
		size_t nb = key_bytes(bits);
		if (left < nb)
			FAILF("sort metadata: %" PRIu64 " bytes", sec_len);
		if (nb && memcmp(p, x->key, nb) != 0)
			FAILF("sort metadata: %s key is %s, expected %s",
			      w ? "last" : "first", hexkey(p, bits),
			      hexkey(x->key, bits));
		p += nb;
		left -= nb;
	}
	EXPECT_U64(left, 0, "sort metadata: bytes after the last key");
}

/* Fence of x at skip (§9): bits [skip, skip + 32) of its key, bits past
 * its end zero. */
static uint32_t ref_fence(const rec *x, uint64_t skip)
{
	uint32_t f = 0;
	for (uint64_t b = 0; b < 32; b++)
		if (skip + b < x->bits && test_msb_bit_at(x->key, skip + b))
			f |= (uint32_t)1 << (31 - b);
	return f;
}

/* The fences (§9): skip, then bits [skip, skip + 32) of each restart key. */
static void check_fences(const uint8_t *sec, uint64_t sec_len, const recset *rs,
                         uint32_t K)
{
	uint64_t nr = test_ceil_div(rs->n, K);
	EXPECT_U64(sec_len, 8 + 4 * nr, "restart fences length");
	uint64_t skip = 0;
	if (rs->n)
		skip =
		    ref_lcp_bits(rs->r[0].key, rs->r[0].bits,
		                 rs->r[rs->n - 1].key, rs->r[rs->n - 1].bits);
	EXPECT_U64(test_get_le64(sec), skip, "restart fences: skip");
	for (uint64_t j = 0; j < nr; j++) {
		const rec *x = &rs->r[j * K];
		EXPECT_U64(le32(sec + 8 + 4 * j), ref_fence(x, skip),
		           "restart fence %" PRIu64 " (key %s, skip %" PRIu64
		           ")",
		           j, hexkey(x->key, x->bits), skip);
	}
}

/* The envelope, directory and every section, from the format alone. */
static void check_envelope(const uint8_t *f, size_t len, const recset *rs,
                           const kvs_writer_options *o,
                           const kvs_segment_info *in)
{
	uint32_t K = eff_interval(o);
	if (len < HEADER_BYTES)
		FAILF("file of %zu bytes, shorter than the header", len);
	if (memcmp(f, "\x89KVSEG\r\n", 8) != 0)
		FAILF("bad magic %02x %02x %02x %02x %02x %02x %02x %02x", f[0],
		      f[1], f[2], f[3], f[4], f[5], f[6], f[7]);
	EXPECT_U64(le16(f + 8), KVS_SEGMENT_VERSION, "header version @8");
	EXPECT_U64(f[10], o->profile, "header profile @10");
	EXPECT_U64(f[11], o->framing, "header framing @11");
	EXPECT_U64(le32(f + 12), 0, "header flags @12");
	EXPECT_U64(test_get_le64(f + 16), rs->n, "header records @16");
	EXPECT_U64(test_get_le64(f + 24), rs->tombstones,
	           "header tombstones @24");
	EXPECT_U64(test_get_le64(f + 32), rs->key_bits, "header key bits @32");
	EXPECT_U64(test_get_le64(f + 40), rs->value_bytes,
	           "header value bytes @40");
	EXPECT_U64(le32(f + 48), K, "header restart interval @48");
	EXPECT_U64(test_get_le64(f + 56), o->sequence, "header sequence @56");
	EXPECT_U64(test_get_le64(f + 64), len, "header file length @64");
	EXPECT_U64(test_get_le64(f + 72), in->stream_bits,
	           "header stream bits @72 vs info.stream_bits");
	EXPECT_U64(test_get_le64(f + 80), rs->max_key_bits,
	           "header max key bits @80");
	kvs_code_spec codes[KVS_FIELD_COUNT];
	if (o->custom_codes)
		memcpy(codes, o->codes, sizeof codes);
	else
		kvs_default_codes(codes);
	for (int c = 0; c < KVS_FIELD_COUNT; c++) {
		const uint8_t *e = f + 88 + 4 * c;
		bool bit = o->profile == KVS_PROFILE_BIT;
		if (e[0] != (bit ? codes[c].kind : 0) ||
		    e[1] != (bit ? codes[c].param : 0) ||
		    e[2] != (bit ? codes[c].delta : 0) || e[3] != 0)
			FAILF("header field code %d @%d: %02x %02x %02x %02x",
			      c, 88 + 4 * c, e[0], e[1], e[2], e[3]);
	}
	for (size_t b = 100; b < 120; b++)
		if (f[b])
			FAILF("reserved header byte %zu is 0x%02x", b, f[b]);
	uint64_t sc = le32(f + 52);
	uint64_t dir_end = HEADER_BYTES + DIR_ENTRY_BYTES * sc;
	if (sc == 0 || sc > 64 || dir_end > len)
		FAILF("section count %" PRIu64 " in a file of %zu bytes", sc,
		      len);
	uint32_t body = kvsi_crc32c(0, f + dir_end, len - (size_t)dir_end);
	EXPECT_U64(le32(f + 120), body,
	           "body CRC32C @120 over [%" PRIu64 ", %zu)", dir_end, len);
	uint32_t head = kvsi_crc32c(0, f, 124);
	head = kvsi_crc32c(head, f + HEADER_BYTES, (size_t)(dir_end - 128));
	EXPECT_U64(le32(f + 124), head,
	           "header CRC32C @124 over [0, 124) + the directory");

	ref_stream e;
	ref_encode(&e, rs, o);
	if (!e.encodable)
		FAILF("the reference encoder cannot encode these records");
	EXPECT_U64(in->stream_bits, e.v.n,
	           "stream bits vs the reference encoding");
	unsigned seen[5] = {0};
	uint64_t prev_end = dir_end;
	for (uint64_t j = 0; j < sc; j++) {
		const uint8_t *d = f + HEADER_BYTES + DIR_ENTRY_BYTES * j;
		unsigned kind = le16(d), flags = le16(d + 2), align = d[4];
		uint64_t off = test_get_le64(d + 8), sl = test_get_le64(d + 16);
		if (kind < 1 || kind > 4)
			FAILF("section %" PRIu64 ": kind %u", j, kind);
		seen[kind]++;
		EXPECT_U64(flags, kind <= 2 ? 1 : 0,
		           "section %" PRIu64 " (kind %u): flags", j, kind);
		EXPECT_U64(align, 3, "section %" PRIu64 " (kind %u): alignment",
		           j, kind);
		if (d[5] || d[6] || d[7] || test_get_le64(d + 24))
			FAILF("section %" PRIu64 ": reserved bytes not zero",
			      j);
		uint64_t want_off = (prev_end + 7) & ~(uint64_t)7;
		EXPECT_U64(off, want_off,
		           "section %" PRIu64 " (kind %u): offset (previous "
		           "end %" PRIu64 ")",
		           j, kind, prev_end);
		if (sl > len - off)
			FAILF("section %" PRIu64 " (kind %u): [%" PRIu64
			      ", +%" PRIu64 ") outside a file of %zu bytes",
			      j, kind, off, sl, len);
		for (uint64_t b = prev_end; b < off; b++)
			if (f[b])
				FAILF("byte %" PRIu64 " before section %" PRIu64
				      " is 0x%02x",
				      b, j, f[b]);
		prev_end = off + sl;
		const uint8_t *sec = f + off;
		switch (kind) {
		case SECTION_STREAM:
			EXPECT_U64(sl, in->stream_bytes,
			           "stream section vs info.stream_bytes");
			check_stream_bytes(sec, sl, &e, rs);
			break;
		case SECTION_RESTARTS: {
			EXPECT_U64(sl, in->ef_bytes,
			           "restart EF section vs info.ef_bytes");
			kvsi_ef ef;
			EXPECT_ST(kvsi_ef_open(&ef, sec, (size_t)sl), KVS_OK,
			          "the restart EF does not open");
			EXPECT_U64(ef.count, e.nrestart, "restart EF count");
			for (uint64_t r = 0; r < e.nrestart; r++) {
				uint64_t x = U64MAX;
				EXPECT_ST(kvsi_ef_get(&ef, r, &x), KVS_OK,
				          "restart EF get(%" PRIu64 ")", r);
				EXPECT_U64(x, e.restart[r],
				           "restart %" PRIu64 " offset (record "
				           "%" PRIu64 ")",
				           r, r * K);
			}
			break;
		}
		case SECTION_SORTMETA:
			check_sort_meta(sec, sl, rs);
			break;
		default:
			EXPECT_U64(sl, in->fence_bytes,
			           "fence section vs info.fence_bytes");
			check_fences(sec, sl, rs, K);
			break;
		}
	}
	EXPECT_U64(prev_end, len, "the end of the last section");
	if (seen[1] != 1 || seen[2] != 1 || seen[3] != 1 || seen[4] != 1)
		FAILF("sections: %u record streams, %u restart EFs, %u sort "
		      "metadata, %u fences (the v1 writer writes one each)",
		      seen[1], seen[2], seen[3], seen[4]);
	ref_stream_free(&e);
}

/* Everything about one open segment: verify, info, frames, a full scan. */
static void check_segment(kvs_segment *s, const recset *rs,
                          const kvs_writer_options *o, uint64_t file_len,
                          const uint8_t *mem)
{
	kvs_error err;
	memset(&err, 0, sizeof err);
	EXPECT_ST(kvs_segment_verify(s, &err), KVS_OK, "kvs_segment_verify: %s",
	          err.message);
	kvs_segment_info in;
	kvs_segment_info_get(s, &in);
	check_info(&in, rs, o, file_len);
	uint64_t frames = U64MAX;
	EXPECT_ST(kvsi_segment_scan_frames(s, &frames), KVS_OK,
	          "kvsi_segment_scan_frames");
	EXPECT_U64(frames, rs->n, "kvsi_segment_scan_frames count");
	scan_check(s, rs, o->profile == KVS_PROFILE_BYTE, mem, file_len);
}

/* The file at path is a segment of exactly rs (check_segment). */
static void expect_segment_file(const char *path, const recset *rs,
                                const kvs_writer_options *o)
{
	struct stat sb;
	assert_int_equal(stat(path, &sb), 0);
	kvs_segment *s = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	EXPECT_ST(kvs_segment_open(&s, path, &err), KVS_OK,
	          "kvs_segment_open %s: %s", path, err.message);
	check_segment(s, rs, o, (uint64_t)sb.st_size, NULL);
	kvs_segment_unref(s);
}

/* Writes rs twice (the files must be identical), then checks the file
 * through kvs_segment_open and kvs_segment_open_memory. */
static void round_trip(const char *dir, const recset *rs,
                       const kvs_writer_options *o)
{
	char p1[PATH_MAX], p2[PATH_MAX];
	path_join(p1, dir, "a.kvseg");
	path_join(p2, dir, "b.kvseg");
	write_ok(p1, rs, o);
	struct stat sb;
	assert_int_equal(stat(p1, &sb), 0);
	/* the second time with a size hint (the writer reserves space up to
	 * it): larger than the file, smaller, or unbounded; the bytes are
	 * the same, and the file takes no more space on disk */
	static unsigned turn;
	kvs_writer_options o2 = *o;
	uint64_t hints[3] = {2 * (uint64_t)sb.st_size + (2u << 20),
	                     (uint64_t)sb.st_size / 2, U64MAX};
	o2.size_hint = hints[turn++ % 3];
	write_ok(p2, rs, &o2);
	struct stat sb2;
	assert_int_equal(stat(p2, &sb2), 0);
	if (sb2.st_blocks > sb.st_blocks)
		FAILF("written with a size hint of %llu, the file (%lld bytes) "
		      "takes %lld bytes on disk, without one %lld",
		      (unsigned long long)o2.size_hint, (long long)sb2.st_size,
		      (long long)sb2.st_blocks * 512,
		      (long long)sb.st_blocks * 512);
	size_t len, len2;
	uint8_t *f1 = slurp(p1, &len), *f2 = slurp(p2, &len2);
	EXPECT_U64(len2, len, "second write's length");
	if (memcmp(f1, f2, len) != 0) {
		size_t d = 0;
		while (f1[d] == f2[d])
			d++;
		FAILF("writing the same records twice: files differ at byte "
		      "%zu of %zu",
		      d, len);
	}
	free(f2);

	kvs_segment *s = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	EXPECT_ST(kvs_segment_open(&s, p1, &err), KVS_OK,
	          "kvs_segment_open: %s", err.message);
	kvs_segment_info in;
	kvs_segment_info_get(s, &in);
	check_info(&in, rs, o, (uint64_t)sb.st_size);
	check_envelope(f1, len, rs, o, &in);
	check_segment(s, rs, o, (uint64_t)sb.st_size, NULL);
	kvs_segment_unref(s);

	uint8_t *m = exact_copy(f1, len);
	s = NULL;
	EXPECT_ST(kvs_segment_open_memory(&s, m, len, &err), KVS_OK,
	          "kvs_segment_open_memory: %s", err.message);
	check_segment(s, rs, o, len, m);
	/* kvs_segment_offset: the bytes given, and nothing around them */
	uint64_t at = U64MAX;
	if (!kvs_segment_offset(s, m, &at) || at != 0 ||
	    !kvs_segment_offset(s, m + len - 1, &at) || at != len - 1)
		FAILF("kvs_segment_offset inside the %zu bytes", len);
	if (kvs_segment_offset(s, m + len, &at) ||
	    kvs_segment_offset(s, (const uint8_t *)&at, &at) || at != len - 1)
		FAILF("kvs_segment_offset outside the %zu bytes", len);
	kvs_segment_unref(s);
	free(m);
	free(f1);

	assert_int_equal(unlink(p1), 0);
	assert_int_equal(unlink(p2), 0);
	expect_dir_empty(dir, "after two finished writes");
}

/* ---- tests: key order ------------------------------------------------------
 */

static void test_key_compare(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 1);
	set_case("kvs_key_compare vs ref_key_cmp");
	g_mode = "";
	uint8_t a[40], b[40];
	for (unsigned t = 0; t < 200000; t++) {
		uint64_t an = test_rng_below(&r, 260);
		uint64_t bn;
		rand_bytes(&r, a, sizeof a);
		switch (t % 4) {
		case 0: /* unrelated */
			bn = test_rng_below(&r, 260);
			rand_bytes(&r, b, sizeof b);
			break;
		case 1: /* equal, or one a prefix of the other */
			memcpy(b, a, sizeof b);
			bn = test_rng_below(&r, 260);
			break;
		default: { /* differ at one bit */
			memcpy(b, a, sizeof b);
			bn = test_rng_below(&r, 260);
			uint64_t m = an < bn ? an : bn;
			if (m) {
				uint64_t at = test_rng_below(&r, m);
				test_msb_bit_set(b, at,
				                 !test_msb_bit_at(b, at));
			}
			break;
		}
		}
		uint8_t *ka = key_dup(a, an), *kb = key_dup(b, bn);
		int want = naive_key_cmp(ka, an, kb, bn);
		int ref = ref_key_cmp(ka, an, kb, bn);
		if (sign(ref) != sign(want))
			FAILF("oracle: ref_key_cmp(%s, %s) = %d, naive %d",
			      hexkey(ka, an), hexkey(kb, bn), ref, want);
		int got = kvs_key_compare(ka, an, kb, bn);
		if (sign(got) != sign(want))
			FAILF("kvs_key_compare(%s, %s) = %d, expected sign %d",
			      hexkey(ka, an), hexkey(kb, bn), got, sign(want));
		got = kvs_key_compare(kb, bn, ka, an);
		if (sign(got) != -sign(want))
			FAILF("kvs_key_compare(%s, %s) = %d, expected sign %d",
			      hexkey(kb, bn), hexkey(ka, an), got, -sign(want));
		free(ka);
		free(kb);
	}
	/* Fixed cases: the empty key, prefixes, bit 7 vs bit 0 of a byte. */
	static const struct {
		uint8_t a[3];
		uint64_t an;
		uint8_t b[3];
		uint64_t bn;
		int want;
	} fixed[] = {
	    {{0}, 0, {0}, 0, 0},
	    {{0}, 0, {0x00}, 1, -1},
	    {{0x80}, 1, {0x00}, 8, 1},
	    {{0x00}, 1, {0x00}, 8, -1},
	    {{0xAB, 0xC0}, 10, {0xAB, 0xC0}, 10, 0},
	    {{0xAB, 0xC0}, 10, {0xAB, 0x80}, 10, 1},
	    {{0xAB, 0xC0}, 10, {0xAB, 0xC0}, 11, -1},
	    {{0xFF, 0xFF}, 16, {0xFF, 0xFF, 0x00}, 17, -1},
	    {{0x01}, 8, {0x80}, 1, -1},
	    {{0x7F, 0xFF}, 16, {0x80}, 1, -1},
	};
	for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) {
		int got = kvs_key_compare(fixed[k].a, fixed[k].an, fixed[k].b,
		                          fixed[k].bn);
		if (sign(got) != fixed[k].want ||
		    sign(ref_key_cmp(fixed[k].a, fixed[k].an, fixed[k].b,
		                     fixed[k].bn)) != fixed[k].want)
			FAILF("fixed case %zu: %s vs %s: got %d, expected %d",
			      k, hexkey(fixed[k].a, fixed[k].an),
			      hexkey(fixed[k].b, fixed[k].bn), got,
			      fixed[k].want);
	}
	/* The oracle's sorted keys are increasing by kvs_key_compare too. */
	gen_spec g = {"bit lengths", KEYS_BITLENS, VALS_EMPTY, 3, 0, true};
	recset rs;
	rs_generate(&rs, &g, false, &r);
	for (size_t i = 1; i < rs.n; i++)
		if (kvs_key_compare(rs.r[i - 1].key, rs.r[i - 1].bits,
		                    rs.r[i].key, rs.r[i].bits) >= 0)
			FAILF("sorted keys %zu, %zu: %s !< %s", i - 1, i,
			      hexkey(rs.r[i - 1].key, rs.r[i - 1].bits),
			      hexkey(rs.r[i].key, rs.r[i].bits));
	rs_free(&rs);
}

/* ---- tests: round trips ---------------------------------------------------
 */

static const gen_spec RT_CASES[] = {
    {"structured FF16", KEYS_STRUCTURED, VALS_FF16, 0, 1000, false},
    {"hash FV, prefix 64", KEYS_HASH, VALS_FV, 64, 600, false},
    {"structured FV, prefix 4096", KEYS_STRUCTURED, VALS_FV, 4096, 150, false},
    {"hash FF16, prefix 4096", KEYS_HASH, VALS_FF16, 4096, 150, false},
    {"hash empty values + empty key", KEYS_HASH, VALS_EMPTY, 0, 500, true},
    {"structured FV, prefix 64 + empty key", KEYS_STRUCTURED, VALS_FV, 64, 300,
     true},
    {"byte lengths 1-24 + empty key", KEYS_BYTELENS, VALS_FV, 0, 0, true},
    {"single record", KEYS_HASH, VALS_FV, 0, 1, false},
    {"single record, empty key and value", KEYS_NONE, VALS_EMPTY, 0, 0, true},
    {"empty segment", KEYS_NONE, VALS_FV, 0, 0, false},
    {"bit lengths 1-130 + empty key", KEYS_BITLENS, VALS_FV, 0, 0, true},
    {"bit lengths 1-130, prefix 64", KEYS_BITLENS, VALS_FF16, 64, 0, false},
    {"random bit lengths, prefix 4096", KEYS_RANDBITS, VALS_SMALL, 4096, 200,
     false},
    /* about 2.2 MB: the stream is written in parts (FLUSH_BYTES), each
     * ending on a page of the file, the rest kept for the next */
    {"structured FV, past two flushes", KEYS_STRUCTURED, VALS_FV, 0, 8000,
     false},
};
#define N_RT_CASES (sizeof RT_CASES / sizeof RT_CASES[0])

static bool bit_keys(key_shape k)
{
	return k == KEYS_BITLENS || k == KEYS_RANDBITS;
}

static void test_round_trip(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 2);
	char dir[PATH_MAX];
	make_subdir(dir, "round_trip");
	static const uint32_t intervals[] = {1, 2, 15, 64};
	for (size_t c = 0; c < N_RT_CASES; c++) {
		const gen_spec *g = &RT_CASES[c];
		for (size_t m = 0; m < NMODES; m++) {
			const mode *md = &MODES[m];
			if (bit_keys(g->keys) &&
			    md->profile == KVS_PROFILE_BYTE)
				continue;
			bool typed = md->framing == KVS_FRAMING_TYPED;
			recset rs;
			rs_generate(&rs, g, typed, &r);
			set_case("%s (%zu records)", g->name, rs.n);
			for (size_t k = 0; k < 4; k++) {
				uint32_t K = intervals[k];
				/* K = 15 is also asked for as the default */
				if (K == 15 && c % 2 == 1)
					K = 0;
				set_mode("%s, K=%u", md->name, K);
				kvs_writer_options o =
				    make_opts(md, K, test_rng_next(&r));
				round_trip(dir, &rs, &o);
			}
			rs_free(&rs);
		}
	}
	g_mode = "";
}

/* FORMAT.md §8.1: "ab" -> "x", "ac" -> tombstone, typed-byte, K = 15. */
static void test_format_example(void **state)
{
	(void)state;
	set_case("FORMAT.md §8.1 example");
	g_mode = "byte/typed, K=15";
	static const uint8_t want[] = {0x02, 0x61, 0x62, 0x02,
	                               0x78, 0x05, 0x63, 0x00};
	recset rs;
	memset(&rs, 0, sizeof rs);
	rs_push(&rs, (const uint8_t *)"ab", 16);
	rs_push(&rs, (const uint8_t *)"ac", 16);
	rs.r[0].val = malloc(1);
	assert_non_null(rs.r[0].val);
	rs.r[0].val[0] = 'x';
	rs.r[0].vlen = 1;
	rs.r[1].kind = KVS_KIND_TOMBSTONE;
	rs.tombstones = 1;
	rs.key_bits = 32;
	rs.value_bytes = 1;
	rs.max_key_bits = 16;
	kvs_writer_options o = make_opts(&MODES[0], 15, 0);

	/* The reference encoder agrees with the document... */
	ref_stream e;
	ref_encode(&e, &rs, &o);
	EXPECT_U64(e.v.n, 8 * sizeof want, "reference stream bits");
	for (uint64_t b = 0; b < e.v.n; b++)
		if (e.v.bit[b] != test_msb_bit_at(want, b))
			FAILF("the reference encoder differs from §8.1 at bit "
			      "%" PRIu64,
			      b);
	EXPECT_U64(e.nrestart, 1, "reference restarts");
	ref_stream_free(&e);

	/* ... and so does the writer. */
	char dir[PATH_MAX], p[PATH_MAX];
	make_subdir(dir, "format_example");
	path_join(p, dir, "example.kvseg");
	write_ok(p, &rs, &o);
	size_t len;
	uint8_t *f = slurp(p, &len);
	assert_true(len >= HEADER_BYTES + DIR_ENTRY_BYTES);
	const uint8_t *d = f + HEADER_BYTES;
	EXPECT_U64(le16(d), SECTION_STREAM, "first section kind");
	uint64_t off = test_get_le64(d + 8), sl = test_get_le64(d + 16);
	EXPECT_U64(sl, sizeof want, "record stream length");
	assert_true(off + sl <= len);
	if (memcmp(f + off, want, sizeof want) != 0)
		FAILF("record stream %s, expected 02616202780101 6300",
		      hexkey(f + off, 8 * sl));
	free(f);
	assert_int_equal(unlink(p), 0);
	round_trip(dir, &rs, &o);
	rs_free(&rs);
}

/* Keys at the length limit, and one past it. */
static void test_long_keys(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 3);
	char dir[PATH_MAX];
	make_subdir(dir, "long_keys");
	size_t nb = (size_t)(KVS_MAX_KEY_BITS / 8) + 1;
	uint8_t *big = malloc(nb);
	assert_non_null(big);
	rand_bytes(&r, big, nb);
	big[nb - 1] = 0x80; /* the bit past the limit; zero padding after */
	for (size_t m = 0; m < NMODES; m++) {
		const mode *md = &MODES[m];
		bool bit = md->profile == KVS_PROFILE_BIT;
		set_case("keys of KVS_MAX_KEY_BITS");
		set_mode("%s", md->name);
		recset rs;
		memset(&rs, 0, sizeof rs);
		rs_push(&rs, big, 8);
		if (bit)
			rs_push(&rs, big, KVS_MAX_KEY_BITS - 1);
		rs_push(&rs, big, KVS_MAX_KEY_BITS);
		big[1] ^= 0x80; /* a key after them, sharing a byte */
		rs_push(&rs, big, KVS_MAX_KEY_BITS);
		big[1] ^= 0x80;
		qsort(rs.r, rs.n, sizeof *rs.r, rec_cmp);
		for (size_t i = 0; i < rs.n; i++) {
			rs.key_bits += rs.r[i].bits;
			if (rs.r[i].bits > rs.max_key_bits)
				rs.max_key_bits = rs.r[i].bits;
		}
		kvs_writer_options o = make_opts(md, 2, 7);
		round_trip(dir, &rs, &o);
		rs_free(&rs);

		/* One bit (byte) more is refused. */
		char p[PATH_MAX];
		path_join(p, dir, "too_long.kvseg");
		kvs_writer *w = NULL;
		kvs_error err;
		memset(&err, 0, sizeof err);
		EXPECT_ST(kvs_writer_open(&w, p, &o, &err), KVS_OK, "open: %s",
		          err.message);
		uint64_t too = KVS_MAX_KEY_BITS + (bit ? 1 : 8);
		kvs_status st =
		    kvs_writer_add(w, big, too, KVS_KIND_VALUE, NULL, 0, &err);
		EXPECT_ERR(st, err, "a key of %" PRIu64 " bits was accepted",
		           too);
		expect_path_first(&err, p, "an over-long key");
		kvs_writer_free(w);
		expect_dir_empty(dir, "after a refused long key");
	}

	/* Looking up a key longer than any key can be is no error: it is
	 * simply absent, and a seek finds its lower bound. */
	set_case("lookup of an over-long key");
	char p[PATH_MAX];
	path_join(p, dir, "short.kvseg");
	kvs_writer_options o = make_opts(&MODES[0], 15, 1);
	kvs_writer *w = NULL;
	kvs_error err = {0};
	EXPECT_ST(kvs_writer_open(&w, p, &o, &err), KVS_OK, "%s", err.message);
	EXPECT_ST(kvs_writer_add_bytes(w, big, 8, KVS_KIND_VALUE, "v", 1, &err),
	          KVS_OK, "%s", err.message);
	EXPECT_ST(kvs_writer_finish(w, &err), KVS_OK, "%s", err.message);
	kvs_writer_free(w);
	kvs_segment *seg = NULL;
	EXPECT_ST(kvs_segment_open(&seg, p, &err), KVS_OK, "%s", err.message);
	kvs_cursor *c = NULL;
	EXPECT_ST(kvs_cursor_open(&c, seg), KVS_OK, "cursor");
	bool found = true;
	EXPECT_ST(kvs_cursor_lookup_bytes(c, big, nb, &found), KVS_OK,
	          "lookup");
	CHECK(!found, "an over-long key is not found");
	/* big's first 8 bytes are the stored key, so it sorts after it */
	CHECK(!kvs_cursor_valid(c), "its lower bound is the end");
	kvs_cursor_close(c);
	kvs_segment_unref(seg);
	unlink(p);
	free(big);
	g_mode = "";
}

/* ---- tests: codes ---------------------------------------------------------
 */

static void test_code_specs(void **state)
{
	(void)state;
	set_case("code specs");
	g_mode = "";
	static const struct {
		const char *text;
		kvs_code_spec spec;
	} good[] = {
	    {"eg0", {KVS_CODE_EG, 0, 0}},
	    {"eg3", {KVS_CODE_EG, 3, 0}},
	    {"eg63", {KVS_CODE_EG, 63, 0}},
	    {"deg0", {KVS_CODE_EG, 0, 1}},
	    {"g1", {KVS_CODE_GOLOMB, 1, 0}},
	    {"g7", {KVS_CODE_GOLOMB, 7, 0}},
	    {"g255", {KVS_CODE_GOLOMB, 255, 0}},
	    {"dg12", {KVS_CODE_GOLOMB, 12, 1}},
	    {"fixed1", {KVS_CODE_FIXED, 1, 0}},
	    {"fixed16", {KVS_CODE_FIXED, 16, 0}},
	    {"fixed64", {KVS_CODE_FIXED, 64, 0}},
	    {"dfixed8", {KVS_CODE_FIXED, 8, 1}},
	};
	for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
		kvs_code_spec s;
		memset(&s, 0xEE, sizeof s);
		EXPECT_ST(kvs_code_spec_parse(good[k].text, &s), KVS_OK,
		          "kvs_code_spec_parse(\"%s\")", good[k].text);
		if (s.kind != good[k].spec.kind ||
		    s.param != good[k].spec.param ||
		    s.delta != good[k].spec.delta)
			FAILF("\"%s\" parsed as {%u, %u, %u}", good[k].text,
			      s.kind, s.param, s.delta);
		EXPECT_ST(kvs_code_spec_check(&s), KVS_OK,
		          "kvs_code_spec_check(%s)", good[k].text);
		char out[16];
		kvs_code_spec_format(&good[k].spec, out);
		if (strcmp(out, good[k].text) != 0)
			FAILF("{%u, %u, %u} formatted as \"%s\", expected "
			      "\"%s\"",
			      s.kind, s.param, s.delta, out, good[k].text);
	}
	static const char *bad[] = {"",     "eg",     "eg64",    "g0",
	                            "g256", "fixed0", "fixed65", "xyz",
	                            "eg-1", "d",      "ddeg0",   "eg3x"};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		kvs_code_spec s;
		if (kvs_code_spec_parse(bad[k], &s) == KVS_OK)
			FAILF("kvs_code_spec_parse(\"%s\") accepted", bad[k]);
	}
	static const kvs_code_spec bad_specs[] = {
	    {0, 0, 0},
	    {4, 1, 0},
	    {KVS_CODE_EG, 64, 0},
	    {KVS_CODE_GOLOMB, 0, 0},
	    {KVS_CODE_FIXED, 0, 0},
	    {KVS_CODE_FIXED, 65, 0},
	};
	for (size_t k = 0; k < sizeof bad_specs / sizeof bad_specs[0]; k++)
		if (kvs_code_spec_check(&bad_specs[k]) == KVS_OK)
			FAILF("kvs_code_spec_check({%u, %u, %u}) accepted",
			      bad_specs[k].kind, bad_specs[k].param,
			      bad_specs[k].delta);
	/* FORMAT.md §6.2: delta-EG2 (LCP), delta-EG0 (KEYLEN, VALLEN). */
	kvs_code_spec def[KVS_FIELD_COUNT];
	kvs_default_codes(def);
	static const kvs_code_spec doc[KVS_FIELD_COUNT] = {
	    {KVS_CODE_EG, 2, 1}, {KVS_CODE_EG, 0, 1}, {KVS_CODE_EG, 0, 1}};
	for (int f = 0; f < KVS_FIELD_COUNT; f++) {
		EXPECT_ST(kvs_code_spec_check(&def[f]), KVS_OK,
		          "default code of field %d", f);
		if (def[f].kind != doc[f].kind ||
		    def[f].param != doc[f].param ||
		    def[f].delta != doc[f].delta)
			FAILF("default code of field %d is {%u, %u, %u}, "
			      "FORMAT.md §6.2 says {%u, %u, %u}",
			      f, def[f].kind, def[f].param, def[f].delta,
			      doc[f].kind, doc[f].param, doc[f].delta);
	}
}

/* Bit-profile segments written with other codes than the defaults. */
/* round_trip in mode md, K = 16, with the codes named in codes[] (one per
 * field, in kvs_code_spec_parse's spelling). */
static void round_trip_codes(const char *dir, const recset *rs,
                             const mode *md, uint64_t sequence,
                             const char *const codes[KVS_FIELD_COUNT])
{
	set_mode("%s, K=16", md->name);
	kvs_writer_options o = make_opts(md, 16, sequence);
	o.custom_codes = true;
	for (int f = 0; f < KVS_FIELD_COUNT; f++)
		EXPECT_ST(kvs_code_spec_parse(codes[f], &o.codes[f]), KVS_OK,
		          "parse %s", codes[f]);
	round_trip(dir, rs, &o);
}

static void test_custom_codes(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 4);
	char dir[PATH_MAX];
	make_subdir(dir, "custom_codes");
	static const char *sets[][3] = {
	    {"eg0", "eg0", "eg0"},          {"eg5", "deg2", "eg8"},
	    {"g7", "dg3", "g255"},          {"fixed16", "dfixed16", "fixed16"},
	    {"fixed64", "eg63", "g1"},      {"deg0", "deg0", "deg0"},
	    {"dg1", "fixed12", "dfixed11"},
	};
	gen_spec g = {
	    "bit lengths 1-130, prefix 3", KEYS_BITLENS, VALS_FV, 3, 0, true};
	for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
		for (size_t m = 2; m < NMODES; m++) {
			const mode *md = &MODES[m];
			recset rs;
			rs_generate(&rs, &g, md->framing == KVS_FRAMING_TYPED,
			            &r);
			set_case("%s, codes %s %s %s", g.name, sets[k][0],
			         sets[k][1], sets[k][2]);
			round_trip_codes(dir, &rs, md, k, sets[k]);
			rs_free(&rs);
		}
	}
	/* A length that its fixed-width code cannot hold is refused. */
	set_case("key length beyond a fixed8 code");
	set_mode("bit/typed");
	kvs_writer_options o = make_opts(&MODES[2], 0, 0);
	o.custom_codes = true;
	kvs_default_codes(o.codes);
	assert_int_equal(
	    kvs_code_spec_parse("fixed8", &o.codes[KVS_FIELD_KEYLEN]), KVS_OK);
	char p[PATH_MAX];
	path_join(p, dir, "fixed8.kvseg");
	kvs_writer *w = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	EXPECT_ST(kvs_writer_open(&w, p, &o, &err), KVS_OK, "open: %s",
	          err.message);
	uint8_t key[40] = {1, 2, 3};
	EXPECT_ST(kvs_writer_add(w, key, 255, KVS_KIND_VALUE, NULL, 0, &err),
	          KVS_OK, "a 255-bit key with keylen fixed8: %s", err.message);
	kvs_status st =
	    kvs_writer_add(w, key, 256 + 8, KVS_KIND_VALUE, NULL, 0, &err);
	EXPECT_ERR(st, err, "a 264-bit key with keylen fixed8 was accepted");
	expect_path_first(&err, p, "a key length beyond its code");
	kvs_writer_free(w);
	expect_dir_empty(dir, "after a refused key length");
	/* Invalid codes are refused at open. */
	o.codes[KVS_FIELD_VALLEN].kind = 0;
	w = NULL;
	st = kvs_writer_open(&w, p, &o, &err);
	if (st == KVS_OK)
		kvs_writer_free(w);
	EXPECT_ERR(st, err, "writer opened with a code of kind 0");
	expect_path_first(&err, p, "a code of kind 0");
	expect_dir_empty(dir, "after a refused open");
	g_mode = "";
}

/*
 * Count codes far longer than the record they describe: Golomb with m = 1 is
 * unary, so an LCP or key length of about 820 bits takes about 820 bits
 * (more than the writer reserves for a record of this size), while the
 * key's suffix and the value take a few bytes. The writer reserves
 * a record's room from its suffix and value and writes the rest with 8-byte
 * stores; a long code must not leave those stores past the buffer (ASan
 * builds see any such store). Values of 1-3 bytes, every third a
 * tombstone in typed framing; read back and compared by round_trip.
 */
static void test_long_codes(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 14);
	char dir[PATH_MAX];
	make_subdir(dir, "long_codes");
	enum { PREFIX = 100, NKEYS = 6000 }; /* 800 shared bits, 32 more */
	static const char *sets[][3] = {
	    {"g1", "eg0", "eg0"}, /* LCP about 820 bits, unary */
	    {"eg2", "g1", "g1"},  /* key length 832 bits, unary */
	};
	uint8_t key[PREFIX + 4];
	rand_bytes(&r, key, PREFIX);
	for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
		for (size_t m = 2; m < NMODES; m++) {
			const mode *md = &MODES[m];
			bool typed = md->framing == KVS_FRAMING_TYPED;
			recset rs;
			memset(&rs, 0, sizeof rs);
			for (uint32_t i = 0; i < NKEYS; i++) {
				/* ascending: a big-endian counter after the
				 * prefix, stepping by a few */
				uint32_t c = 5 * i + (uint32_t)test_rng_below(&r, 5);
				key[PREFIX] = (uint8_t)(c >> 24);
				key[PREFIX + 1] = (uint8_t)(c >> 16);
				key[PREFIX + 2] = (uint8_t)(c >> 8);
				key[PREFIX + 3] = (uint8_t)c;
				rs_push(&rs, key, 8 * (PREFIX + 4));
				rec *x = &rs.r[rs.n - 1];
				if (typed && i % 3 == 2) {
					x->kind = KVS_KIND_TOMBSTONE;
					rs.tombstones++;
				} else {
					x->vlen = 1 + (size_t)test_rng_below(&r, 3);
					x->val = malloc(x->vlen);
					assert_non_null(x->val);
					rand_bytes(&r, x->val, x->vlen);
				}
				rs.key_bits += x->bits;
				rs.value_bytes += x->vlen;
				rs.max_key_bits = x->bits;
			}
			set_case("832-bit keys, codes %s %s %s", sets[k][0],
			         sets[k][1], sets[k][2]);
			round_trip_codes(dir, &rs, md, k, sets[k]);
			rs_free(&rs);
		}
	}
	g_mode = "";
}

/* ---- tests: writer errors -------------------------------------------------
 */

/* A writer that refuses record `bad`: the status and the index in the
 * message, then either free at once or finish (which must fail too). */
static void expect_add_refused(const char *dir, const kvs_writer_options *o,
                               const recset *rs, size_t bad, const uint8_t *key,
                               uint64_t bits, kvs_kind kind, kvs_status want,
                               bool try_finish, const char *what)
{
	char p[PATH_MAX];
	path_join(p, dir, "refused.kvseg");
	kvs_writer *w = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	EXPECT_ST(kvs_writer_open(&w, p, o, &err), KVS_OK, "%s: open: %s", what,
	          err.message);
	size_t at;
	EXPECT_ST(add_records(w, rs, 0, bad, &err, &at), KVS_OK,
	          "%s: record %zu before the bad one: %s", what, at,
	          err.message);
	memset(&err, 0, sizeof err);
	kvs_status st = kvs_writer_add(w, key, bits, kind, "v", 1, &err);
	EXPECT_ERR(st, err, "%s: record %zu (key %s) accepted", what, bad,
	           hexkey(key, bits));
	expect_path_first(&err, p, what);
	if (want != KVS_OK)
		EXPECT_ST(st, want, "%s: record %zu: \"%s\"", what, bad,
		          err.message);
	if (want == KVS_E_ORDER) {
		char idx[32];
		snprintf(idx, sizeof idx, "%zu", bad);
		if (strstr(err.message, idx) == NULL)
			FAILF("%s: the message \"%s\" does not name record "
			      "%zu",
			      what, err.message, bad);
	}
	if (try_finish) {
		/* After a failure the writer accepts nothing more. */
		st = kvs_writer_add(w, "\xFF\xFF\xFF\xFF", 32, KVS_KIND_VALUE,
		                    NULL, 0, &err);
		if (st == KVS_OK)
			FAILF("%s: an add after a failed add succeeded", what);
		memset(&err, 0, sizeof err);
		st = kvs_writer_finish(w, &err);
		EXPECT_ERR(st, err, "%s: finish after a failed add succeeded",
		           what);
		expect_path_first(&err, p, what);
		if (access(p, F_OK) == 0)
			FAILF("%s: %s exists after a failed finish", what, p);
	}
	kvs_writer_free(w);
	expect_dir_empty(dir, what);
}

/*
 * The filesystems KVS_WRITER_NO_REPLACE must cope with: this program's own
 * renameat2 and link, which libkvseg (linked in) calls instead of libc's,
 * refuse what such a filesystem lacks and otherwise make the system call.
 */
enum fake_fs { FS_REAL, FS_NO_NOREPLACE, FS_NO_LINKS };
static const char *const fake_fs_names[] = {
    "renameat2 with RENAME_NOREPLACE", "no RENAME_NOREPLACE: link",
    "no RENAME_NOREPLACE nor hard links: check, then rename"};
static int g_fake_fs = FS_REAL;
static int g_link_errno; /* when set, link() fails with it (EIO: a bad disk) */

int renameat2(int olddirfd, const char *oldpath, int newdirfd,
              const char *newpath, unsigned int flags)
{
	if (g_fake_fs != FS_REAL && flags) {
		errno = EINVAL;
		return -1;
	}
	return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd,
	                    newpath, flags);
}

int link(const char *oldpath, const char *newpath)
{
	if (g_fake_fs == FS_NO_LINKS || g_link_errno) {
		errno = g_link_errno ? g_link_errno : EPERM;
		return -1;
	}
	return linkat(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}

/* A publish hook (kvs_writer_options.publish) that notes how many names
 * the file has when it is called, and answers as told. */
typedef struct hook_note {
	kvs_status answer;
	int calls;
	nlink_t names;
} hook_note;

static kvs_status note_publish(void *ctx, const char *path, kvs_error *err)
{
	hook_note *h = ctx;
	struct stat sb;
	h->calls++;
	h->names = stat(path, &sb) == 0 ? sb.st_nlink : 0;
	if (h->answer != KVS_OK)
		return kvs_error_set(err, h->answer, "%s: refused", path);
	return KVS_OK;
}

static const char g_other[] = "another process's file\n";

/* Writes rs to path with o, another process's file appearing at path
 * before finish when in_the_way: finish must give want, and the file in
 * the way must stay as it was. */
static void finish_expect(const char *path, const recset *rs,
                          const kvs_writer_options *o, bool in_the_way,
                          kvs_status want)
{
	kvs_writer *w = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	size_t at;
	EXPECT_ST(kvs_writer_open(&w, path, o, &err), KVS_OK, "open: %s",
	          err.message);
	EXPECT_ST(add_records(w, rs, 0, rs->n, &err, &at), KVS_OK,
	          "record %zu: %s", at, err.message);
	if (in_the_way)
		spit(path, (const uint8_t *)g_other, sizeof g_other - 1);
	EXPECT_ST(kvs_writer_finish(w, &err), want, "finish");
	if (want == KVS_E_EXISTS)
		CHECK(strstr(err.message, path) &&
		          strstr(err.message, "appeared"),
		      "the message names the file: %s", err.message);
	kvs_writer_free(w);
	if (!in_the_way)
		return;
	size_t got_len;
	uint8_t *got = slurp(path, &got_len);
	CHECK(got_len == sizeof g_other - 1 &&
	          memcmp(got, g_other, got_len) == 0,
	      "the file in the way changed (%zu bytes)", got_len);
	free(got);
}

/*
 * A call that breaks kvs_writer_add's contract after three good records: an
 * unknown kind, a key or value past the limits, a NULL buffer with a
 * length. It fails with `want` and a message that starts with the path,
 * names the record and says `says`, before any byte of the buffers is
 * read; the writer accepts nothing more, finish fails, and no file is left.
 */
typedef struct misuse {
	const char *what, *says;
	kvs_status want;
	bool bytes; /* through kvs_writer_add_bytes: key_len = bits */
	const void *key;
	uint64_t bits;
	kvs_kind kind;
	const void *value;
	size_t value_len;
} misuse;

static void expect_misuse_refused(const char *dir, const kvs_writer_options *o,
                                  const recset *rs, const misuse *m)
{
	char p[PATH_MAX];
	path_join(p, dir, "misuse.kvseg");
	kvs_writer *w = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	EXPECT_ST(kvs_writer_open(&w, p, o, &err), KVS_OK, "%s: open: %s",
	          m->what, err.message);
	size_t at;
	EXPECT_ST(add_records(w, rs, 0, 3, &err, &at), KVS_OK,
	          "%s: record %zu: %s", m->what, at, err.message);
	memset(&err, 0, sizeof err);
	kvs_status st =
	    m->bytes ? kvs_writer_add_bytes(w, m->key, (size_t)m->bits, m->kind,
	                                    m->value, m->value_len, &err)
	             : kvs_writer_add(w, m->key, m->bits, m->kind, m->value,
	                              m->value_len, &err);
	EXPECT_ERR(st, err, "%s: accepted", m->what);
	EXPECT_ST(st, m->want, "%s: \"%s\"", m->what, err.message);
	expect_path_first(&err, p, m->what);
	if (!strstr(err.message, "record 3") || !strstr(err.message, m->says))
		FAILF("%s: the message \"%s\" does not say \"record 3\" and "
		      "\"%s\"",
		      m->what, err.message, m->says);
	st = kvs_writer_add(w, "\xFF\xFF\xFF\xFF", 32, KVS_KIND_VALUE, NULL, 0,
	                    &err);
	if (st == KVS_OK)
		FAILF("%s: an add after the refusal succeeded", m->what);
	memset(&err, 0, sizeof err);
	st = kvs_writer_finish(w, &err);
	EXPECT_ERR(st, err, "%s: finish after the refusal succeeded", m->what);
	if (access(p, F_OK) == 0)
		FAILF("%s: %s exists after a failed finish", m->what, p);
	kvs_writer_free(w);
	expect_dir_empty(dir, m->what);
}

/* st must be KVS_OK; what, for the failure's message. */
static void expect_ok(kvs_status st, const kvs_error *err, const char *what)
{
	EXPECT_ST(st, KVS_OK, "%s: %s", what, err->message);
}

/* An open writer: one record added (not yet finished). */
static kvs_writer *writer_with_a_record(const char *path)
{
	kvs_writer *w = NULL;
	kvs_error err = {0};
	kvs_writer_options o = {0};
	expect_ok(kvs_writer_open(&w, path, &o, &err), &err, "open");
	expect_ok(kvs_writer_add(w, (const uint8_t *)"k", 8, KVS_KIND_VALUE,
	                         (const uint8_t *)"v", 1, &err),
	          &err, "add");
	return w;
}

/*
 * A segment replaces a regular file or a symbolic link at its path, and
 * nothing else: a FIFO, a directory, a socket or a device there is refused
 * (as root, "kvseg build /dev/null" would have replaced the device with a
 * file), at the open and again at the rename, and stays as it was.
 */
static void test_writer_special_output(void **state)
{
	(void)state;
	set_mode("%s", "default options");
	char dir[PATH_MAX], p[PATH_MAX];
	make_subdir(dir, "special_output");
	struct {
		const char *name, *kind;
	} nodes[] = {{"fifo", "a FIFO"},
	             {"adir", "a directory"},
	             {"sock", "a socket"},
	             {"null", "a character device"}};
	for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
		path_join(p, dir, nodes[i].name);
		int rc = 0;
		if (i == 0)
			rc = mkfifo(p, 0644);
		else if (i == 1)
			rc = mkdir(p, 0755);
		else if (i == 2)
			rc = mknod(p, S_IFSOCK | 0644, 0);
		else
			rc = mknod(p, S_IFCHR | 0644, makedev(1, 3));
		if (rc != 0 && i == 3 && errno == EPERM) {
			printf("[          ] no character device case: mknod "
			       "needs root\n");
			continue;
		}
		assert_int_equal(rc, 0);
		struct stat before, after;
		assert_int_equal(lstat(p, &before), 0);
		set_case("the output path is %s", nodes[i].kind);
		kvs_writer *w = NULL;
		kvs_error err = {0};
		kvs_writer_options o = {0};
		kvs_status st = kvs_writer_open(&w, p, &o, &err);
		CHECK(w == NULL, "the open gave a writer");
		CHECK_ST(st, KVS_E_IO, "%s", err.message);
		char want[PATH_MAX + 64];
		snprintf(want, sizeof want,
		         "%s: is %s, which a segment would "
		         "replace",
		         p, nodes[i].kind);
		CHECK(strstr(err.message, want) != NULL,
		      "the message \"%s\" does not say \"%s\"", err.message,
		      want);
		assert_int_equal(lstat(p, &after), 0);
		CHECK(after.st_mode == before.st_mode &&
		          after.st_ino == before.st_ino &&
		          after.st_rdev == before.st_rdev,
		      "%s changed", nodes[i].name);
		EXPECT_U64(dir_entries(dir, NULL, 0), i + 1,
		           "entries (no temporary left)");
	}

	/* a FIFO that appears while the segment is written */
	set_case("a FIFO made at the path after the open");
	char late[PATH_MAX];
	make_subdir(late, "special_output_late");
	path_join(p, late, "out");
	kvs_writer *w = writer_with_a_record(p);
	assert_int_equal(mkfifo(p, 0644), 0);
	kvs_error err = {0};
	kvs_status st = kvs_writer_finish(w, &err);
	CHECK_ST(st, KVS_E_IO, "finish: %s", err.message);
	CHECK(strstr(err.message, ": is a FIFO, which a segment would "
	                          "replace") != NULL,
	      "finish's message \"%s\"", err.message);
	kvs_writer_free(w);
	struct stat sb;
	CHECK(lstat(p, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO stays");
	EXPECT_U64(dir_entries(late, NULL, 0), 1, "entries after the free");
	assert_int_equal(unlink(p), 0);

	/* a symbolic link is replaced itself (as by mv); what it names is
	 * neither created nor written */
	set_case("the output path is a symbolic link");
	char target[PATH_MAX];
	path_join(target, late, "target");
	assert_int_equal(symlink(target, p), 0);
	w = writer_with_a_record(p);
	expect_ok(kvs_writer_finish(w, &err), &err, "finish over a link");
	kvs_writer_free(w);
	CHECK(lstat(p, &sb) == 0 && S_ISREG(sb.st_mode),
	      "the link became the segment");
	CHECK(lstat(target, &sb) != 0 && errno == ENOENT,
	      "the link's target was created");
	kvs_segment *seg = NULL;
	expect_ok(kvs_segment_open(&seg, p, &err), &err, "open the segment");
	kvs_segment_unref(seg);
}

/*
 * A segment's file has mode 0644 less the umask, as open(2) gives a new
 * file: with umask 077 nobody else may read it. Checked on the temporary
 * file while it is written, and on the segment.
 */
static void test_writer_file_mode(void **state)
{
	(void)state;
	set_mode("%s", "default options");
	static const mode_t masks[] = {022, 077, 027, 0, 0777};
	mode_t saved = umask(022);
	for (size_t i = 0; i < sizeof masks / sizeof masks[0]; i++) {
		set_case("umask %03o", (unsigned)masks[i]);
		mode_t want = 0644 & ~masks[i];
		char dir[PATH_MAX], p[PATH_MAX], name[32];
		snprintf(name, sizeof name, "file_mode_%zu", i);
		make_subdir(dir, name);
		path_join(p, dir, "seg");
		umask(masks[i]); /* only while the file is created */
		kvs_writer *w = writer_with_a_record(p);
		umask(022);
		char tmp[PATH_MAX];
		CHECK(dir_entries(dir, tmp, sizeof tmp) == 1,
		      "entries while writing");
		char tp[PATH_MAX];
		path_join(tp, dir, tmp);
		struct stat sb;
		assert_int_equal(lstat(tp, &sb), 0);
		CHECK((sb.st_mode & 07777) == want,
		      "temporary file %s: mode %03o, not %03o", tmp,
		      (unsigned)(sb.st_mode & 07777), (unsigned)want);
		kvs_error err = {0};
		expect_ok(kvs_writer_finish(w, &err), &err, "finish");
		kvs_writer_free(w);
		assert_int_equal(lstat(p, &sb), 0);
		CHECK((sb.st_mode & 07777) == want,
		      "segment: mode %03o, not %03o",
		      (unsigned)(sb.st_mode & 07777), (unsigned)want);
	}
	umask(saved);
}

static void test_writer_errors(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 5);
	char dir[PATH_MAX];
	make_subdir(dir, "writer_errors");
	for (size_t m = 0; m < NMODES; m++) {
		const mode *md = &MODES[m];
		bool bit = md->profile == KVS_PROFILE_BIT;
		bool typed = md->framing == KVS_FRAMING_TYPED;
		set_mode("%s", md->name);
		kvs_writer_options o = make_opts(md, 0, 1);
		gen_spec g = {"structured", KEYS_STRUCTURED, VALS_SMALL, 0, 80,
		              false};
		recset rs;
		rs_generate(&rs, &g, typed, &r);

		set_case("out of order at record 37");
		expect_add_refused(dir, &o, &rs, 37, rs.r[10].key,
		                   rs.r[10].bits, KVS_KIND_VALUE, KVS_E_ORDER,
		                   false, g_case);
		set_case("duplicate at record 50");
		expect_add_refused(dir, &o, &rs, 50, rs.r[49].key,
		                   rs.r[49].bits, KVS_KIND_VALUE, KVS_E_ORDER,
		                   true, g_case);
		set_case("out of order at record 0 -> 1");
		expect_add_refused(dir, &o, &rs, 1, rs.r[0].key, rs.r[0].bits,
		                   KVS_KIND_VALUE, KVS_E_ORDER, false, g_case);
		/* A proper prefix of the previous key sorts before it. */
		set_case("prefix of the previous key at record 21");
		uint64_t pb = rs.r[20].bits - (bit ? 1 : 8);
		uint8_t *pk = key_dup(rs.r[20].key, pb);
		expect_add_refused(dir, &o, &rs, 21, pk, pb, KVS_KIND_VALUE,
		                   KVS_E_ORDER, false, g_case);
		free(pk);
		set_case("the empty key after others at record 5");
		expect_add_refused(dir, &o, &rs, 5, rs.r[0].key, 0,
		                   KVS_KIND_VALUE, KVS_E_ORDER, false, g_case);
		if (!bit) {
			set_case("12-bit key in the byte profile at record 0");
			uint8_t k12[2] = {rs.r[0].key[0],
			                  (uint8_t)(rs.r[0].key[1] & 0xF0)};
			expect_add_refused(dir, &o, &rs, 0, k12, 12,
			                   KVS_KIND_VALUE, KVS_OK, false,
			                   g_case);
			set_case("a 129-bit key in the byte profile at 30");
			uint8_t k[17];
			memset(k, 0xFF, sizeof k);
			k[16] = 0x80;
			expect_add_refused(dir, &o, &rs, 30, k, 129,
			                   KVS_KIND_VALUE, KVS_OK, true,
			                   g_case);
		}
		if (!typed) {
			set_case("a tombstone in raw framing at record 3");
			uint8_t k[16];
			memset(k, 0xFF, sizeof k);
			expect_add_refused(dir, &o, &rs, 3, k, 128,
			                   KVS_KIND_TOMBSTONE, KVS_OK, true,
			                   g_case);
		}

		static const uint8_t ff[4] = {0xFF, 0xFF, 0xFF, 0xFF};
		const misuse misuses[] = {
		    {"an unknown kind", "unknown kind", KVS_E_INVAL, false, ff,
		     32, (kvs_kind)7, "v", 1},
		    {"a key of 2^23 + 8 bits", "longer than", KVS_E_RANGE,
		     false, ff, KVS_MAX_KEY_BITS + 8, KVS_KIND_VALUE, "v", 1},
		    {"a key of 2^20 + 1 bytes (add_bytes)", "longer than",
		     KVS_E_RANGE, true, ff, KVS_MAX_KEY_BITS / 8 + 1,
		     KVS_KIND_VALUE, "v", 1},
		    {"a key of SIZE_MAX bytes (add_bytes)", "longer than",
		     KVS_E_RANGE, true, ff, SIZE_MAX, KVS_KIND_VALUE, "v", 1},
		    {"a value of 2^40 + 1 bytes", "too long", KVS_E_RANGE,
		     false, ff, 32, KVS_KIND_VALUE, "v",
		     (size_t)KVS_MAX_VALUE_LEN + 1},
		    {"a NULL key of 32 bits", "NULL key", KVS_E_INVAL, false,
		     NULL, 32, KVS_KIND_VALUE, "v", 1},
		    {"a NULL value of 5 bytes", "NULL value", KVS_E_INVAL,
		     false, ff, 32, KVS_KIND_VALUE, NULL, 5},
		};
		for (size_t i = 0; i < sizeof misuses / sizeof misuses[0];
		     i++) {
			set_case("%s at record 3", misuses[i].what);
			expect_misuse_refused(dir, &o, &rs, &misuses[i]);
		}

		/* Freed without finish: nothing at the path, no temp file. */
		set_case("free without finish");
		char p[PATH_MAX];
		path_join(p, dir, "unfinished.kvseg");
		kvs_writer *w = NULL;
		kvs_error err;
		memset(&err, 0, sizeof err);
		EXPECT_ST(kvs_writer_open(&w, p, &o, &err), KVS_OK, "open: %s",
		          err.message);
		kvs_writer_free(w);
		expect_dir_empty(dir, "a writer freed at once");
		EXPECT_ST(kvs_writer_open(&w, p, &o, &err), KVS_OK, "open: %s",
		          err.message);
		size_t at;
		EXPECT_ST(add_records(w, &rs, 0, rs.n, &err, &at), KVS_OK,
		          "record %zu: %s", at, err.message);
		EXPECT_U64(kvs_writer_count(w), rs.n, "kvs_writer_count");
		kvs_writer_free(w);
		expect_dir_empty(dir, "a writer freed before finish");

		/* A finished one leaves exactly the file. */
		set_case("finish");
		write_ok(p, &rs, &o);
		char first[256];
		unsigned n = dir_entries(dir, first, sizeof first);
		if (n != 1 || strcmp(first, "unfinished.kvseg") != 0)
			FAILF("after finish: %u entries, first %s", n, first);

		/* Without KVS_WRITER_NO_REPLACE finish renames over a file
		 * at the path; with it, a file that appeared there before
		 * finish stays as it was and finish fails, leaving no
		 * temporary file; with nothing there it publishes. */
		set_case("finish over a file, replacing");
		spit(p, (const uint8_t *)g_other, sizeof g_other - 1);
		write_ok(p, &rs, &o);
		expect_segment_file(p, &rs, &o);
		/* Replacing tries a renameat2 that never replaces first; a
		 * filesystem without RENAME_NOREPLACE checks, then renames. */
		for (g_fake_fs = FS_REAL; g_fake_fs <= FS_NO_LINKS;
		     g_fake_fs++) {
			set_case("replacing, the name free (%s)",
			         fake_fs_names[g_fake_fs]);
			assert_int_equal(unlink(p), 0);
			write_ok(p, &rs, &o);
			expect_segment_file(p, &rs, &o);
			set_case("replacing, a file at the name (%s)",
			         fake_fs_names[g_fake_fs]);
			spit(p, (const uint8_t *)g_other, sizeof g_other - 1);
			write_ok(p, &rs, &o);
			expect_segment_file(p, &rs, &o);
			EXPECT_U64(dir_entries(dir, NULL, 0), 1,
			           "entries (no temporary left)");
		}
		g_fake_fs = FS_REAL;
		kvs_writer_options keep = o;
		keep.flags |= KVS_WRITER_NO_REPLACE;
		assert_int_equal(unlink(p), 0);
		for (g_fake_fs = FS_REAL; g_fake_fs <= FS_NO_LINKS;
		     g_fake_fs++) {
			set_case("no-replace, a file appeared (%s)",
			         fake_fs_names[g_fake_fs]);
			finish_expect(p, &rs, &keep, true, KVS_E_EXISTS);
			n = dir_entries(dir, first, sizeof first);
			if (n != 1 || strcmp(first, "unfinished.kvseg") != 0)
				FAILF("after a refused finish: %u entries, "
				      "first %s",
				      n, first);
			set_case("no-replace, nothing in the way (%s)",
			         fake_fs_names[g_fake_fs]);
			assert_int_equal(unlink(p), 0);
			write_ok(p, &rs, &keep);
			expect_segment_file(p, &rs, &keep);
			n = dir_entries(dir, first, sizeof first);
			if (n != 1 || strcmp(first, "unfinished.kvseg") != 0)
				FAILF("after finish: %u entries, first %s", n,
				      first);
			assert_int_equal(unlink(p), 0);

			/* with a publish hook: a file in the way stays and
			 * the hook is not called; else the hook finds the
			 * file at its name (and at its temporary name, where
			 * there are hard links), and a refusal removes it */
			hook_note h = {KVS_OK, 0, 0};
			kvs_writer_options hooked = o;
			hooked.publish = note_publish;
			hooked.publish_ctx = &h;
			set_case("publish hook, a file appeared (%s)",
			         fake_fs_names[g_fake_fs]);
			finish_expect(p, &rs, &hooked, true, KVS_E_EXISTS);
			CHECK(h.calls == 0, "the hook ran (%d)", h.calls);
			assert_int_equal(unlink(p), 0);
			set_case("publish hook says yes (%s)",
			         fake_fs_names[g_fake_fs]);
			write_ok(p, &rs, &hooked);
			expect_segment_file(p, &rs, &o);
			CHECK(h.calls == 1 &&
			          h.names == (g_fake_fs == FS_NO_LINKS ? 1 : 2),
			      "the hook ran %d times, saw %u names", h.calls,
			      (unsigned)h.names);
			n = dir_entries(dir, first, sizeof first);
			if (n != 1 || strcmp(first, "unfinished.kvseg") != 0)
				FAILF("after a hooked finish: %u entries, "
				      "first %s",
				      n, first);
			assert_int_equal(unlink(p), 0);
			set_case("publish hook says no (%s)",
			         fake_fs_names[g_fake_fs]);
			h.answer = KVS_E_CONFLICT;
			finish_expect(p, &rs, &hooked, false, KVS_E_CONFLICT);
			n = dir_entries(dir, first, sizeof first);
			if (h.calls != 2 || n != 0)
				FAILF("after a refused publication: %d calls, "
				      "%u entries, first %s",
				      h.calls, n, n ? first : "-");
		}
		g_fake_fs = FS_REAL;
		/* a hooked finish whose link fails otherwise (EIO): the error
		 * names link, the hook is not called, nothing is left */
		set_case("publish hook, link fails");
		hook_note h = {KVS_OK, 0, 0};
		kvs_writer_options hooked = o;
		hooked.publish = note_publish;
		hooked.publish_ctx = &h;
		g_link_errno = EIO;
		finish_expect(p, &rs, &hooked, false, KVS_E_IO);
		g_link_errno = 0;
		n = dir_entries(dir, first, sizeof first);
		if (h.calls != 0 || n != 0)
			FAILF("after a failed link: %d calls, %u entries, "
			      "first %s",
			      h.calls, n, n ? first : "-");

		/* Bit profile: a key after its own prefix is in order. */
		if (bit) {
			set_case("0x80/1 then 0x80/8 then 0x80/9");
			uint8_t k[2] = {0x80, 0x00};
			w = NULL;
			EXPECT_ST(kvs_writer_open(&w, p, &o, &err), KVS_OK,
			          "open: %s", err.message);
			EXPECT_ST(kvs_writer_add(w, k, 1, KVS_KIND_VALUE, NULL,
			                         0, &err),
			          KVS_OK, "0x80/1: %s", err.message);
			EXPECT_ST(kvs_writer_add(w, k, 8, KVS_KIND_VALUE, NULL,
			                         0, &err),
			          KVS_OK, "0x80/8: %s", err.message);
			EXPECT_ST(kvs_writer_add(w, k, 9, KVS_KIND_VALUE, NULL,
			                         0, &err),
			          KVS_OK, "0x8000/9: %s", err.message);
			kvs_status st = kvs_writer_add(w, k, 8, KVS_KIND_VALUE,
			                               NULL, 0, &err);
			EXPECT_ST(st, KVS_E_ORDER, "0x80/8 after 0x8000/9");
			kvs_writer_free(w);
			expect_dir_empty(dir, g_case);
		}
		rs_free(&rs);
	}

	/* Options. */
	set_mode("options");
	char p[PATH_MAX];
	path_join(p, dir, "opts.kvseg");
	kvs_error err;
	memset(&err, 0, sizeof err);
	kvs_writer *w = NULL;
	kvs_writer_options o = make_opts(&MODES[0], 0, 0);
	struct {
		const char *what;
		kvs_writer_options o;
	} bad[6];
	size_t nb = 0;
	bad[nb].what = "restart interval KVS_MAX_RESTART_INTERVAL + 1";
	bad[nb].o = o;
	bad[nb++].o.restart_interval = KVS_MAX_RESTART_INTERVAL + 1;
	bad[nb].what = "restart interval 2^32 - 1";
	bad[nb].o = o;
	bad[nb++].o.restart_interval = UINT32_MAX;
	bad[nb].what = "profile 2";
	bad[nb].o = o;
	bad[nb++].o.profile = (kvs_profile)2;
	bad[nb].what = "framing 2";
	bad[nb].o = o;
	bad[nb++].o.framing = (kvs_framing)2;
	bad[nb].what = "custom codes with kind 0 (bit profile)";
	bad[nb].o = make_opts(&MODES[2], 0, 0);
	bad[nb].o.custom_codes = true;
	kvs_default_codes(bad[nb].o.codes);
	bad[nb++].o.codes[KVS_FIELD_LCP].kind = 0;
	bad[nb].what = "custom codes golomb 0 (bit profile)";
	bad[nb].o = bad[nb - 1].o;
	bad[nb].o.codes[KVS_FIELD_LCP].kind = KVS_CODE_GOLOMB;
	bad[nb++].o.codes[KVS_FIELD_LCP].param = 0;
	for (size_t k = 0; k < nb; k++) {
		set_case("%s", bad[k].what);
		w = NULL;
		memset(&err, 0, sizeof err);
		kvs_status st = kvs_writer_open(&w, p, &bad[k].o, &err);
		if (st == KVS_OK)
			kvs_writer_free(w);
		EXPECT_ERR(st, err, "writer opened with %s", bad[k].what);
		expect_path_first(&err, p, bad[k].what);
		expect_dir_empty(dir, bad[k].what);
	}

	/* The largest interval works; NULL options are typed-byte, K 15. */
	set_case("restart interval KVS_MAX_RESTART_INTERVAL");
	gen_spec g = {"hash", KEYS_HASH, VALS_SMALL, 0, 100, false};
	recset rs;
	rs_generate(&rs, &g, true, &r);
	o.restart_interval = KVS_MAX_RESTART_INTERVAL;
	round_trip(dir, &rs, &o);
	set_case("NULL options");
	w = NULL;
	EXPECT_ST(kvs_writer_open(&w, p, NULL, &err), KVS_OK, "open: %s",
	          err.message);
	size_t at;
	EXPECT_ST(add_records(w, &rs, 0, rs.n, &err, &at), KVS_OK,
	          "record %zu: %s", at, err.message);
	EXPECT_ST(kvs_writer_finish(w, &err), KVS_OK, "finish: %s",
	          err.message);
	kvs_writer_free(w);
	kvs_segment *s = NULL;
	EXPECT_ST(kvs_segment_open(&s, p, &err), KVS_OK, "open: %s",
	          err.message);
	kvs_writer_options def = make_opts(&MODES[0], 0, 0);
	struct stat sb;
	assert_int_equal(stat(p, &sb), 0);
	check_segment(s, &rs, &def, (uint64_t)sb.st_size, NULL);
	kvs_segment_unref(s);
	kvs_segment_unref(NULL); /* all three accept NULL */
	kvs_writer_free(NULL);
	kvs_cursor_close(NULL);
	assert_int_equal(unlink(p), 0);
	rs_free(&rs);

	/* A directory that does not exist. */
	set_case("writer in a missing directory");
	char missing[PATH_MAX];
	path_join(missing, dir, "no/such/dir/x.kvseg");
	w = NULL;
	memset(&err, 0, sizeof err);
	kvs_status st = kvs_writer_open(&w, missing, &o, &err);
	if (st == KVS_OK) {
		st = kvs_writer_finish(w, &err);
		kvs_writer_free(w);
	}
	EXPECT_ERR(st, err, "a writer into %s succeeded", missing);
	expect_path_first(&err, missing, "a missing directory");
	EXPECT_ST(st, KVS_E_IO, "writer into a missing directory: %s",
	          err.message);
	expect_dir_empty(dir, "the end");
	g_mode = "";
}

/* ---- tests: cursors against the oracle ------------------------------------
 */

typedef struct probe_ctx {
	kvs_cursor *c;
	const recset *rs;
	bool byte_profile;
	unsigned count; /* probes so far; alternates the _bytes calls */
	uint64_t hits;  /* probes whose key is present */
} probe_ctx;

/* seek, next, lookup and next for key q against the oracle. */
static void probe_key(probe_ctx *p, const uint8_t *q, uint64_t q_bits)
{
	if (p->byte_profile && q_bits % 8)
		return; /* not a key of this profile */
	const recset *rs = p->rs;
	size_t lb = ref_lower_bound(rs, q, q_bits);
	bool want = lb < rs->n &&
	            ref_key_cmp(rs->r[lb].key, rs->r[lb].bits, q, q_bits) == 0;
	bool by_bytes = q_bits % 8 == 0 && (p->count & 1);
	p->count++;
	p->hits += want;
	op o = {by_bytes ? "seek_bytes" : "seek", q, q_bits, 0};
	kvs_status st =
	    by_bytes ? kvs_cursor_seek_bytes(p->c, q, (size_t)(q_bits / 8))
	             : kvs_cursor_seek(p->c, q, q_bits);
	EXPECT_ST(st, KVS_OK, "%s", op_str(&o));
	expect_at(p->c, rs, lb, &o);
	if (lb < rs->n) {
		o.name = by_bytes ? "next after seek_bytes" : "next after seek";
		EXPECT_ST(kvs_cursor_next(p->c), KVS_OK, "%s", op_str(&o));
		expect_at(p->c, rs, lb + 1, &o);
	}
	o.name = by_bytes ? "lookup_bytes" : "lookup";
	bool found = !want;
	st = by_bytes ? kvs_cursor_lookup_bytes(p->c, q, (size_t)(q_bits / 8),
	                                        &found)
	              : kvs_cursor_lookup(p->c, q, q_bits, &found);
	EXPECT_ST(st, KVS_OK, "%s", op_str(&o));
	if (found != want)
		FAILF("%s: found = %d, expected %d (lower bound %zu of %zu)",
		      op_str(&o), found, want, lb, rs->n);
	expect_at(p->c, rs, lb, &o);
	if (lb < rs->n && (p->count & 3) == 0) {
		o.name = "next after lookup";
		EXPECT_ST(kvs_cursor_next(p->c), KVS_OK, "%s", op_str(&o));
		expect_at(p->c, rs, lb + 1, &o);
	}
}

static void probe_bits(probe_ctx *p, const uint8_t *src, uint64_t bits)
{
	uint8_t *q = key_dup(src, bits);
	probe_key(p, q, bits);
	free(q);
}

/* k itself, its prefixes and extensions, and keys just below and above. */
static void probe_around(probe_ctx *p, const uint8_t *k, uint64_t bits)
{
	size_t nb = key_bytes(bits);
	uint8_t *q = calloc(nb + 3, 1);
	assert_non_null(q);
	if (nb)
		memcpy(q, k, nb);
	probe_bits(p, q, bits);
	if (bits >= 8)
		probe_bits(p, q, bits - 8);
	if (p->byte_profile) {
		q[nb] = 0x00; /* the least key above k */
		probe_bits(p, q, bits + 8);
		q[nb] = 0xFF;
		probe_bits(p, q, bits + 8);
		q[nb] = 0;
		if (nb && q[nb - 1] > 0) { /* below: last byte - 1, then FF */
			q[nb - 1]--;
			probe_bits(p, q, bits);
			q[nb] = 0xFF;
			probe_bits(p, q, bits + 8);
			q[nb] = 0;
			q[nb - 1]++;
		}
		if (nb && q[nb - 1] < 0xFF) {
			q[nb - 1]++;
			probe_bits(p, q, bits);
			q[nb - 1]--;
		}
	} else {
		if (bits >= 1)
			probe_bits(p, q, bits - 1);
		probe_bits(p, q, bits + 1); /* + a 0 bit: the least above */
		test_msb_bit_set(q, bits, 1);
		probe_bits(p, q, bits + 1);
		test_msb_bit_set(q, bits, 0);
		if (bits >= 1) {
			int last = test_msb_bit_at(q, bits - 1);
			test_msb_bit_set(q, bits - 1, !last);
			probe_bits(p, q, bits);
			if (last) { /* just below: ...0 followed by 1s */
				for (uint64_t i = bits; i < bits + 8; i++)
					test_msb_bit_set(q, i, 1);
				probe_bits(p, q, bits + 8);
				for (uint64_t i = bits; i < bits + 8; i++)
					test_msb_bit_set(q, i, 0);
			}
			test_msb_bit_set(q, bits - 1, last);
		}
	}
	free(q);
}

static void seek_ordinal_check(kvs_cursor *c, const recset *rs, uint64_t i,
                               uint64_t walk)
{
	op o = {"seek_ordinal", NULL, 0, i};
	EXPECT_ST(kvs_cursor_seek_ordinal(c, i), KVS_OK, "%s", op_str(&o));
	expect_at(c, rs, (size_t)i, &o);
	o.name = "next after seek_ordinal";
	for (uint64_t j = i; j < rs->n && j < i + walk; j++) {
		o.arg = j;
		EXPECT_ST(kvs_cursor_next(c), KVS_OK, "%s", op_str(&o));
		expect_at(c, rs, (size_t)j + 1, &o);
	}
}

static void cursor_suite(kvs_segment *s, const recset *rs, uint32_t K,
                         bool byte_profile, bool walk_all, test_rng *r)
{
	kvs_cursor *c = NULL;
	EXPECT_ST(kvs_cursor_open(&c, s), KVS_OK, "kvs_cursor_open");
	op o0 = {"(fresh cursor)", NULL, 0, 0};
	expect_at(c, rs, rs->n, &o0);
	probe_ctx p = {c, rs, byte_profile, 0, 0};
	size_t n = rs->n;

	/* Present keys and their neighbours: all, or 300 at random. */
	if (n <= 300)
		for (size_t i = 0; i < n; i++)
			probe_around(&p, rs->r[i].key, rs->r[i].bits);
	else
		for (size_t t = 0; t < 300; t++) {
			size_t i = (size_t)test_rng_below(r, n);
			probe_around(&p, rs->r[i].key, rs->r[i].bits);
		}
	/* Every record around every restart, by ordinal and by key. */
	uint64_t next_i = 0;
	for (uint64_t j = 0; j * K <= n; j++) {
		for (int d = -1; d <= 1; d++) {
			if (j == 0 && d < 0)
				continue;
			uint64_t i = j * K + (uint64_t)(int64_t)d;
			if (i > n || i < next_i)
				continue;
			next_i = i + 1;
			seek_ordinal_check(c, rs, i, 2);
			if (i < n)
				probe_around(&p, rs->r[i].key, rs->r[i].bits);
		}
	}
	/* Before the first, after the last. */
	uint8_t lo[32], hi[32];
	memset(lo, 0, sizeof lo);
	memset(hi, 0xFF, sizeof hi);
	probe_bits(&p, lo, 0);
	probe_bits(&p, lo, 8);
	probe_bits(&p, lo, 1);
	probe_bits(&p, hi, 8 * sizeof hi);
	probe_bits(&p, hi, 8);
	probe_bits(&p, hi, 1);
	if (n) {
		probe_around(&p, rs->r[0].key, rs->r[0].bits);
		probe_around(&p, rs->r[n - 1].key, rs->r[n - 1].bits);
	}
	/* Random keys, and random tails after a present key's prefix. */
	uint8_t q[64];
	for (unsigned t = 0; t < 400; t++) {
		uint64_t bits = byte_profile ? 8 * test_rng_below(r, 30)
		                             : test_rng_below(r, 240);
		rand_bytes(r, q, sizeof q);
		if (t % 2 && n) {
			const rec *x = &rs->r[test_rng_below(r, n)];
			uint64_t keep = test_rng_below(r, x->bits + 1);
			if (byte_profile)
				keep -= keep % 8;
			if (keep > 8 * 48)
				keep = 8 * 48;
			memcpy(q, x->key, key_bytes(keep));
			for (uint64_t i = keep; i < 8 * key_bytes(keep); i++)
				test_msb_bit_set(q, i, (int)(t >> 1) & 1);
			if (bits < keep)
				bits = keep + (byte_profile ? 8 : 3);
			if (bits > 8 * sizeof q)
				bits = 8 * sizeof q;
		}
		probe_bits(&p, q, bits);
	}
	/* Ordinals. */
	for (uint64_t i = 0; i <= n; i++)
		seek_ordinal_check(c, rs, i, walk_all ? n : 1);
	for (uint64_t t = 0; t < 50 && n; t++)
		seek_ordinal_check(c, rs, test_rng_below(r, n), 3);
	/* Past the end: an error, or the end (the header says neither). */
	static const uint64_t past[] = {1, 2, 1000, 1ull << 32};
	for (size_t k = 0; k <= sizeof past / sizeof past[0]; k++) {
		uint64_t i = k < 4 ? n + past[k] : U64MAX;
		op o = {"seek_ordinal past the end", NULL, 0, i};
		if (kvs_cursor_seek_ordinal(c, i) == KVS_OK)
			expect_at(c, rs, n, &o);
		else if (kvs_cursor_valid(c))
			FAILF("%s failed, but the cursor is valid", op_str(&o));
	}
	/* And the cursor works again after them. */
	seek_ordinal_check(c, rs, 0, 3);
	kvs_cursor_close(c);
	if (p.hits == 0 && n > 0)
		FAILF("no probe hit a present key");
}

static void test_cursor(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 6);
	char dir[PATH_MAX];
	make_subdir(dir, "cursor");
	static const uint32_t intervals[] = {1, 15, 16};
	for (size_t m = 0; m < NMODES; m++) {
		const mode *md = &MODES[m];
		bool byte = md->profile == KVS_PROFILE_BYTE;
		bool typed = md->framing == KVS_FRAMING_TYPED;
		gen_spec sets[3] = {
		    {"lengths + empty key", byte ? KEYS_BYTELENS : KEYS_BITLENS,
		     VALS_SMALL, 0, 0, true},
		    {"hash, prefix 64", KEYS_HASH, VALS_FF16, 64, 500, false},
		    {"random bit lengths", KEYS_RANDBITS, VALS_SMALL, 2, 400,
		     true},
		};
		for (size_t g = 0; g < 3; g++) {
			if (byte && bit_keys(sets[g].keys))
				continue;
			recset rs;
			rs_generate(&rs, &sets[g], typed, &r);
			set_case("%s (%zu records)", sets[g].name, rs.n);
			for (size_t k = 0; k < 3; k++) {
				uint32_t K = intervals[k];
				set_mode("%s, K=%u", md->name, K);
				kvs_writer_options o =
				    make_opts(md, K, 100 + k);
				char p[PATH_MAX];
				path_join(p, dir, "c.kvseg");
				write_ok(p, &rs, &o);
				kvs_segment *s = NULL;
				kvs_error err;
				memset(&err, 0, sizeof err);
				EXPECT_ST(kvs_segment_open(&s, p, &err), KVS_OK,
				          "open: %s", err.message);
				bool walk_all = K == 16 && rs.n <= 500;
				cursor_suite(s, &rs, K, byte, walk_all, &r);
				kvs_segment_unref(s);
				assert_int_equal(unlink(p), 0);
			}
			rs_free(&rs);
		}
	}

	/* The empty segment. */
	for (size_t m = 0; m < NMODES; m++) {
		set_case("empty segment");
		set_mode("%s", MODES[m].name);
		recset rs;
		memset(&rs, 0, sizeof rs);
		kvs_writer_options o = make_opts(&MODES[m], 0, 0);
		char p[PATH_MAX];
		path_join(p, dir, "empty.kvseg");
		write_ok(p, &rs, &o);
		kvs_segment *s = NULL;
		kvs_error err;
		EXPECT_ST(kvs_segment_open(&s, p, &err), KVS_OK, "open: %s",
		          err.message);
		cursor_suite(s, &rs, 15, MODES[m].profile == KVS_PROFILE_BYTE,
		             true, &r);
		kvs_segment_unref(s);
		assert_int_equal(unlink(p), 0);
	}
	g_mode = "";
}

/* A segment in memory at every address alignment mod 8. */
static void test_misaligned(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 7);
	char dir[PATH_MAX];
	make_subdir(dir, "misaligned");
	for (size_t m = 0; m < NMODES; m++) {
		const mode *md = &MODES[m];
		gen_spec g = {
		    "random bit lengths", KEYS_RANDBITS, VALS_FV, 0, 300, true};
		if (md->profile == KVS_PROFILE_BYTE)
			g.keys = KEYS_HASH;
		recset rs;
		rs_generate(&rs, &g, md->framing == KVS_FRAMING_TYPED, &r);
		kvs_writer_options o = make_opts(md, 7, 3);
		char p[PATH_MAX];
		path_join(p, dir, "m.kvseg");
		write_ok(p, &rs, &o);
		size_t len;
		uint8_t *f = slurp(p, &len);
		uint8_t *buf = malloc(len + 8);
		assert_non_null(buf);
		for (size_t a = 1; a < 8; a++) {
			set_case("%s at address offset %zu", g.name, a);
			set_mode("%s, K=7", md->name);
			memcpy(buf + a, f, len);
			kvs_segment *s = NULL;
			kvs_error err;
			memset(&err, 0, sizeof err);
			EXPECT_ST(
			    kvs_segment_open_memory(&s, buf + a, len, &err),
			    KVS_OK, "open_memory: %s", err.message);
			check_segment(s, &rs, &o, len, buf + a);
			cursor_suite(s, &rs, 7, md->profile == KVS_PROFILE_BYTE,
			             false, &r);
			kvs_segment_unref(s);
		}
		free(buf);
		free(f);
		assert_int_equal(unlink(p), 0);
		rs_free(&rs);
	}
	g_mode = "";
}

/* ---- tests: threads -------------------------------------------------------
 */

#define N_THREADS 4

typedef struct reader_arg {
	kvs_segment *s;
	const recset *rs;
	uint64_t seed;
	unsigned lookups;
	pthread_barrier_t *barrier;
	bool verify;
	unsigned errors;
	char first_error[300];
} reader_arg;

static void reader_error(reader_arg *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void reader_error(reader_arg *a, const char *fmt, ...)
{
	if (a->errors++ == 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(a->first_error, sizeof a->first_error, fmt, ap);
		va_end(ap);
	}
}

static void *reader_thread(void *arg)
{
	reader_arg *a = arg;
	const recset *rs = a->rs;
	kvs_segment_ref(a->s);
	pthread_barrier_wait(a->barrier);
	/* From here on, the opener's reference may be gone. */
	if (a->verify) {
		kvs_error err;
		if (kvs_segment_verify(a->s, &err) != KVS_OK)
			reader_error(a, "verify: %s", err.message);
	}
	kvs_cursor *c = NULL;
	if (kvs_cursor_open(&c, a->s) != KVS_OK) {
		reader_error(a, "kvs_cursor_open failed");
		kvs_segment_unref(a->s);
		return NULL;
	}
	test_rng r = {a->seed};
	uint8_t q[64];
	for (unsigned t = 0; t < a->lookups && a->errors < 10; t++) {
		const rec *x = &rs->r[test_rng_below(&r, rs->n)];
		uint64_t bits = x->bits;
		memset(q, 0, sizeof q);
		memcpy(q, x->key, key_bytes(bits));
		if (t % 3 == 1 && bits + 8 <= 8 * sizeof q) {
			q[key_bytes(bits)] = (uint8_t)t;
			bits = 8 * key_bytes(bits) + 8; /* absent, mostly */
		}
		size_t lb = ref_lower_bound(rs, q, bits);
		bool want =
		    lb < rs->n &&
		    ref_key_cmp(rs->r[lb].key, rs->r[lb].bits, q, bits) == 0;
		bool found = !want;
		kvs_status st = kvs_cursor_lookup(c, q, bits, &found);
		if (st != KVS_OK) {
			reader_error(a, "lookup(%s): %s", hexkey(q, bits),
			             test_status_name(st));
			continue;
		}
		if (found != want)
			reader_error(a, "lookup(%s): found %d, expected %d",
			             hexkey(q, bits), found, want);
		if (kvs_cursor_ordinal(c) != lb)
			reader_error(
			    a, "lookup(%s): ordinal %" PRIu64 ", expected %zu",
			    hexkey(q, bits), kvs_cursor_ordinal(c), lb);
		if (lb < rs->n && kvs_cursor_valid(c)) {
			const rec *y = &rs->r[lb];
			uint64_t kb;
			const uint8_t *k = kvs_cursor_key(c, &kb);
			const uint8_t *v;
			size_t vl;
			if (kb != y->bits ||
			    ref_key_cmp(k, kb, y->key, y->bits) != 0)
				reader_error(a, "lookup(%s): key %s",
				             hexkey(q, bits), hexkey(k, kb));
			if (kvs_cursor_value(c, &v, &vl) != KVS_OK ||
			    vl != y->vlen || (vl && memcmp(v, y->val, vl)))
				reader_error(a, "lookup(%s): wrong value",
				             hexkey(q, bits));
		}
		if (t % 64 == 0) {
			kvs_segment_ref(a->s);
			kvs_segment_unref(a->s);
		}
	}
	kvs_cursor_close(c);
	kvs_segment_unref(a->s);
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 8);
	char dir[PATH_MAX];
	make_subdir(dir, "threads");
	for (int round = 0; round < 2; round++) {
		const mode *md = round == 0 ? &MODES[2] : &MODES[1];
		gen_spec g = {"random bit lengths",
		              KEYS_RANDBITS,
		              VALS_FV,
		              0,
		              3000,
		              true};
		if (md->profile == KVS_PROFILE_BYTE)
			g = (gen_spec){"hash", KEYS_HASH, VALS_FV,
			               8,      3000,      true};
		recset rs;
		rs_generate(&rs, &g, md->framing == KVS_FRAMING_TYPED, &r);
		set_case("%d readers, %s", N_THREADS, g.name);
		set_mode("%s, K=16, %s", md->name,
		         round == 0 ? "mapped" : "in memory");
		kvs_writer_options o = make_opts(md, 16, 9);
		char p[PATH_MAX];
		path_join(p, dir, "t.kvseg");
		write_ok(p, &rs, &o);
		kvs_segment *s = NULL;
		kvs_error err;
		memset(&err, 0, sizeof err);
		uint8_t *mem = NULL;
		size_t len = 0;
		if (round == 0) {
			EXPECT_ST(kvs_segment_open(&s, p, &err), KVS_OK,
			          "open: %s", err.message);
		} else {
			mem = slurp(p, &len);
			EXPECT_ST(kvs_segment_open_memory(&s, mem, len, &err),
			          KVS_OK, "open_memory: %s", err.message);
		}
		pthread_barrier_t barrier;
		assert_int_equal(
		    pthread_barrier_init(&barrier, NULL, N_THREADS + 1), 0);
		reader_arg args[N_THREADS];
		pthread_t tid[N_THREADS];
		for (int t = 0; t < N_THREADS; t++) {
			memset(&args[t], 0, sizeof args[t]);
			args[t].s = s;
			args[t].rs = &rs;
			args[t].seed = test_rng_next(&r);
			args[t].lookups = 4000;
			args[t].barrier = &barrier;
			args[t].verify = t == 0;
			assert_int_equal(pthread_create(&tid[t], NULL,
			                                reader_thread,
			                                &args[t]),
			                 0);
		}
		pthread_barrier_wait(&barrier);
		kvs_segment_unref(s); /* the threads hold it now */
		for (int t = 0; t < N_THREADS; t++)
			assert_int_equal(pthread_join(tid[t], NULL), 0);
		pthread_barrier_destroy(&barrier);
		for (int t = 0; t < N_THREADS; t++)
			if (args[t].errors)
				FAILF("thread %d: %u errors, the first: %s", t,
				      args[t].errors, args[t].first_error);
		free(mem);
		assert_int_equal(unlink(p), 0);
		rs_free(&rs);
	}
	g_mode = "";
}

/* ---- corruption -----------------------------------------------------------
 */

/* A valid file and the records in it. */
typedef struct base {
	const char *name;
	recset rs;
	kvs_writer_options o;
	uint8_t *file;
	size_t len;
} base;

#define N_BASES 6

static size_t make_bases(base *b, test_rng *r, const char *dir)
{
	static const struct {
		const char *name;
		size_t mode;
		uint32_t K;
		gen_spec g;
	} defs[N_BASES] = {
	    {"typed-byte 300",
	     0,
	     15,
	     {"", KEYS_STRUCTURED, VALS_SMALL, 0, 300, true}},
	    {"raw-byte lengths",
	     1,
	     1,
	     {"", KEYS_BYTELENS, VALS_SMALL, 0, 0, true}},
	    {"typed-bit 300",
	     2,
	     16,
	     {"", KEYS_RANDBITS, VALS_SMALL, 0, 300, true}},
	    {"raw-bit 300",
	     3,
	     15,
	     {"", KEYS_RANDBITS, VALS_SMALL, 1, 300, false}},
	    {"empty typed-byte",
	     0,
	     15,
	     {"", KEYS_NONE, VALS_EMPTY, 0, 0, false}},
	    {"empty raw-bit", 3, 4, {"", KEYS_NONE, VALS_EMPTY, 0, 0, false}},
	};
	for (size_t k = 0; k < N_BASES; k++) {
		const mode *md = &MODES[defs[k].mode];
		b[k].name = defs[k].name;
		rs_generate(&b[k].rs, &defs[k].g,
		            md->framing == KVS_FRAMING_TYPED, r);
		b[k].o = make_opts(md, defs[k].K, 42);
		char p[PATH_MAX];
		path_join(p, dir, "base.kvseg");
		write_ok(p, &b[k].rs, &b[k].o);
		b[k].file = slurp(p, &b[k].len);
		assert_int_equal(unlink(p), 0);
	}
	return N_BASES;
}

static void free_bases(base *b, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		rs_free(&b[k].rs);
		free(b[k].file);
	}
}

static uint64_t dir_end_of(const uint8_t *f, size_t len)
{
	if (len < HEADER_BYTES)
		return U64MAX;
	return HEADER_BYTES + (uint64_t)DIR_ENTRY_BYTES * le32(f + 52);
}

/* Recomputes both CRC32Cs of a (changed) file, as a writer would. */
static void fix_crcs(uint8_t *f, size_t len)
{
	uint64_t end = dir_end_of(f, len);
	if (end > len)
		return;
	put_le32(f + 120, kvsi_crc32c(0, f + end, len - (size_t)end));
	uint32_t h = kvsi_crc32c(0, f, 124);
	h = kvsi_crc32c(h, f + HEADER_BYTES, (size_t)end - HEADER_BYTES);
	put_le32(f + 124, h);
}

/* Reads every byte of the current record (AddressSanitizer and the guard
 * pages see stray pointers). */
static unsigned touch(kvs_cursor *c)
{
	unsigned sum = 0;
	uint64_t kb = 0;
	const uint8_t *k = kvs_cursor_key(c, &kb);
	if (kb > KVS_MAX_KEY_BITS)
		FAILF("cursor key of %" PRIu64 " bits", kb);
	for (size_t i = 0; i < key_bytes(kb); i++)
		sum += k[i];
	sum += (unsigned)kvs_cursor_kind(c);
	size_t vlen = kvs_cursor_value_len(c);
	const uint8_t *v = NULL;
	size_t vl = 0;
	if (kvs_cursor_value(c, &v, &vl) == KVS_OK) {
		if (vl != vlen)
			FAILF("value length %zu, value_len() %zu", vl, vlen);
		for (size_t i = 0; i < vl; i++)
			sum += v[i];
	}
	return sum;
}

static volatile unsigned g_sink;

/* Walks from where the cursor is while it stays valid: ordinals must go up
 * by one and stay below the record count; at most `limit` steps. */
static void bounded_walk(kvs_cursor *c, const kvs_segment_info *in,
                         uint64_t limit, const char *what)
{
	uint64_t steps = 0;
	kvs_status st = KVS_OK;
	uint64_t ord = kvs_cursor_ordinal(c);
	while (kvs_cursor_valid(c)) {
		if (kvs_cursor_ordinal(c) != ord + steps)
			FAILF("%s: ordinal %" PRIu64 " after %" PRIu64
			      " steps from %" PRIu64,
			      what, kvs_cursor_ordinal(c), steps, ord);
		if (kvs_cursor_ordinal(c) >= in->records)
			FAILF("%s: valid at ordinal %" PRIu64 " of %" PRIu64
			      " records",
			      what, kvs_cursor_ordinal(c), in->records);
		g_sink += touch(c);
		if (steps++ >= limit)
			return;
		st = kvs_cursor_next(c);
		if (st != KVS_OK)
			break;
	}
	if (st != KVS_OK && kvs_cursor_valid(c))
		FAILF("%s: next failed (%s) but the cursor is still valid",
		      what, test_status_name(st));
}

/* Whatever verify accepts is a sorted segment that agrees with its info
 * and answers lookups of its own keys. */
static void check_consistent(kvs_segment *s, const kvs_segment_info *in,
                             const char *what)
{
	kvs_cursor *c = NULL;
	EXPECT_ST(kvs_cursor_open(&c, s), KVS_OK, "%s: cursor", what);
	EXPECT_ST(kvs_cursor_first(c), KVS_OK, "%s: first", what);
	uint8_t *prev = NULL;
	uint64_t prev_bits = 0, n = 0, tomb = 0, kbits = 0, vbytes = 0,
	         maxk = 0;
	uint8_t *sample[16];
	uint64_t sample_bits[16], sample_ord[16];
	unsigned ns = 0;
	uint64_t every = in->records / 16 + 1;
	while (kvs_cursor_valid(c)) {
		uint64_t kb;
		const uint8_t *k = kvs_cursor_key(c, &kb);
		if (kvs_cursor_ordinal(c) != n)
			FAILF("%s: verified, but ordinal %" PRIu64
			      " at record %" PRIu64,
			      what, kvs_cursor_ordinal(c), n);
		if (n > 0 && ref_key_cmp(prev, prev_bits, k, kb) >= 0)
			FAILF("%s: verified, but record %" PRIu64
			      " key %s <= previous %s",
			      what, n, hexkey(k, kb), hexkey(prev, prev_bits));
		if (in->profile == KVS_PROFILE_BYTE && kb % 8)
			FAILF("%s: verified, but a %" PRIu64
			      "-bit key in the byte profile",
			      what, kb);
		free(prev);
		prev = key_dup(k, kb);
		prev_bits = kb;
		if (n % every == 0 && ns < 16) {
			sample[ns] = key_dup(k, kb);
			sample_bits[ns] = kb;
			sample_ord[ns++] = n;
		}
		kvs_kind kind = kvs_cursor_kind(c);
		if (kind == KVS_KIND_TOMBSTONE) {
			tomb++;
			if (in->framing == KVS_FRAMING_RAW)
				FAILF("%s: verified, but a tombstone in raw "
				      "framing",
				      what);
		}
		kbits += kb;
		maxk = kb > maxk ? kb : maxk;
		vbytes += kvs_cursor_value_len(c);
		g_sink += touch(c);
		n++;
		if (n > in->records)
			break;
		EXPECT_ST(kvs_cursor_next(c), KVS_OK,
		          "%s: verified, but next failed at %" PRIu64, what, n);
	}
	free(prev);
	EXPECT_U64(n, in->records, "%s: verified, records scanned", what);
	EXPECT_U64(tomb, in->tombstones, "%s: verified, tombstones", what);
	EXPECT_U64(kbits, in->key_bits, "%s: verified, key bits", what);
	EXPECT_U64(vbytes, in->value_bytes, "%s: verified, value bytes", what);
	EXPECT_U64(maxk, in->max_key_bits, "%s: verified, max key bits", what);
	EXPECT_U64(in->restarts, test_ceil_div(n, in->restart_interval),
	           "%s: verified, restarts", what);
	for (unsigned j = 0; j < ns; j++) {
		bool found = false;
		EXPECT_ST(
		    kvs_cursor_lookup(c, sample[j], sample_bits[j], &found),
		    KVS_OK, "%s: verified, lookup", what);
		if (!found || kvs_cursor_ordinal(c) != sample_ord[j])
			FAILF("%s: verified, but lookup(%s) gives found %d, "
			      "ordinal %" PRIu64 " (expected %" PRIu64 ")",
			      what, hexkey(sample[j], sample_bits[j]), found,
			      kvs_cursor_ordinal(c), sample_ord[j]);
		free(sample[j]);
	}
	kvs_cursor_close(c);
}

typedef struct untrusted_stats {
	uint64_t tries, opened, verified;
} untrusted_stats;

/*
 * Opens [data, data + len) as untrusted and uses everything: a full walk,
 * seeks and lookups with the keys of rs (and some others), seek_ordinal,
 * frames scan, then verify. Failures must carry a message; nothing may
 * read outside the data or run unbounded. Returns 0 when open failed, 1
 * when verify failed, 2 when verify accepted (then the segment must be
 * consistent).
 */
static int try_untrusted(const uint8_t *data, size_t len, const recset *rs,
                         untrusted_stats *stats, const char *what)
{
	kvs_segment *s = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	stats->tries++;
	kvs_status st = kvs_segment_open_memory(&s, data, len, &err);
	if (st != KVS_OK) {
		EXPECT_ERR(st, err, "%s: open", what);
		return 0;
	}
	stats->opened++;
	kvs_segment_info in;
	kvs_segment_info_get(s, &in);
	kvs_cursor *c = NULL;
	st = kvs_cursor_open(&c, s);
	if (st == KVS_OK) {
		uint64_t limit = 8 * (uint64_t)len + 2;
		st = kvs_cursor_first(c);
		if (st == KVS_OK)
			bounded_walk(c, &in, limit, what);
		else if (kvs_cursor_valid(c))
			FAILF("%s: first failed (%s) but the cursor is valid",
			      what, test_status_name(st));
		if (kvs_cursor_valid(c))
			FAILF("%s: a walk of %" PRIu64
			      " steps did not reach the end (%" PRIu64
			      " records in %zu bytes)",
			      what, limit, in.records, len);
		size_t step = rs->n / 6 + 1;
		for (size_t i = 0; i < rs->n; i += step) {
			const rec *x = &rs->r[i];
			bool found;
			if (kvs_cursor_seek(c, x->key, x->bits) == KVS_OK)
				bounded_walk(c, &in, 2, what);
			if (kvs_cursor_lookup(c, x->key, x->bits, &found) ==
			    KVS_OK)
				bounded_walk(c, &in, 1, what);
		}
		uint8_t q[9] = {0,    0x80, 0xFF, 0x7F, 0xFF,
		                0xFF, 0xFF, 0xFF, 0xFF};
		bool found;
		(void)kvs_cursor_seek(c, q, 0);
		(void)kvs_cursor_seek(c, q + 1, 1);
		(void)kvs_cursor_lookup(c, q + 2, 56, &found);
		(void)kvs_cursor_seek_bytes(c, q + 3, 6);
		const uint64_t ords[] = {
		    0,          in.records / 2, in.records - 1,
		    in.records, in.records + 1, U64MAX};
		for (size_t k = 0; k < sizeof ords / sizeof ords[0]; k++)
			if (kvs_cursor_seek_ordinal(c, ords[k]) == KVS_OK)
				bounded_walk(c, &in, 2, what);
		kvs_cursor_close(c);
	}
	uint64_t frames;
	(void)kvsi_segment_scan_frames(s, &frames);
	memset(&err, 0, sizeof err);
	st = kvs_segment_verify(s, &err);
	int res = 1;
	if (st != KVS_OK) {
		EXPECT_ERR(st, err, "%s: verify", what);
	} else {
		res = 2;
		stats->verified++;
		check_consistent(s, &in, what);
	}
	kvs_segment_unref(s);
	return res;
}

/* The bytes of a file where they are hardest on the reader: an exact heap
 * copy, or against a PROT_NONE page after or before them. */
typedef struct ubuf {
	uint8_t *p;
	guarded g;
	int kind;
} ubuf;

static uint8_t *ubuf_make(ubuf *b, const uint8_t *src, size_t len, int kind)
{
	memset(b, 0, sizeof *b);
	b->kind = kind % 3;
	if (b->kind == 0) {
		b->p = exact_copy(src, len);
	} else {
		int rc = b->kind == 1 ? guarded_alloc(&b->g, len)
		                      : guarded_alloc_front(&b->g, len);
		assert_int_equal(rc, 0);
		b->p = b->g.data;
		if (len)
			memcpy(b->p, src, len);
	}
	return b->p;
}

static void ubuf_free(ubuf *b)
{
	if (b->kind == 0)
		free(b->p);
	else
		guarded_free(&b->g);
}

static void test_corrupt_envelope(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 9);
	char dir[PATH_MAX];
	make_subdir(dir, "corrupt_envelope");
	base b[N_BASES];
	size_t nb = make_bases(b, &r, dir);
	static const uint8_t xors[] = {0x01, 0x80, 0xFF};
	for (size_t k = 0; k < nb; k++) {
		set_case("%s (%zu bytes)", b[k].name, b[k].len);
		set_mode("envelope");
		untrusted_stats plain = {0}, fixed = {0};
		/* The unchanged file, for reference. */
		char what[128];
		snprintf(what, sizeof what, "unchanged");
		if (try_untrusted(b[k].file, b[k].len, &b[k].rs, &plain,
		                  what) != 2)
			FAILF("the unchanged file did not verify");
		uint64_t end = dir_end_of(b[k].file, b[k].len);
		assert_true(end <= b[k].len);
		for (size_t at = 0; at < end; at++) {
			for (size_t x = 0; x < 3; x++) {
				ubuf u;
				uint8_t *p = ubuf_make(&u, b[k].file, b[k].len,
				                       (int)(at + x));
				p[at] ^= xors[x];
				snprintf(what, sizeof what,
				         "byte %zu ^= 0x%02x", at, xors[x]);
				if (try_untrusted(p, b[k].len, &b[k].rs, &plain,
				                  what) == 2)
					FAILF("%s: open and verify accepted it",
					      what);
				if (at < 120 || at >= HEADER_BYTES) {
					fix_crcs(p, b[k].len);
					snprintf(
					    what, sizeof what,
					    "byte %zu ^= 0x%02x, CRCs fixed",
					    at, xors[x]);
					(void)try_untrusted(p, b[k].len,
					                    &b[k].rs, &fixed,
					                    what);
				}
				ubuf_free(&u);
			}
		}
		printf("[ INFO     ] %-17s envelope+directory %" PRIu64
		       " bytes: %" PRIu64 " changes, %" PRIu64
		       " opened (%" PRIu64 " verified); with CRCs fixed "
		       "%" PRIu64 " opened, %" PRIu64 " verified\n",
		       b[k].name, end, plain.tries - 1, plain.opened - 1,
		       plain.verified - 1, fixed.opened, fixed.verified);
	}
	free_bases(b, nb);
	g_mode = "";
}

static void test_corrupt_sections(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 10);
	char dir[PATH_MAX];
	make_subdir(dir, "corrupt_sections");
	base b[N_BASES];
	size_t nb = make_bases(b, &r, dir);
	for (size_t k = 0; k < nb; k++) {
		const uint8_t *f = b[k].file;
		uint64_t sc = le32(f + 52);
		for (uint64_t j = 0; j < sc; j++) {
			const uint8_t *e =
			    f + HEADER_BYTES + DIR_ENTRY_BYTES * j;
			unsigned kind = le16(e);
			uint64_t off = test_get_le64(e + 8);
			uint64_t sl = test_get_le64(e + 16);
			if (sl == 0)
				continue;
			set_case("%s (%zu bytes)", b[k].name, b[k].len);
			set_mode("section %" PRIu64 " (kind %u, %" PRIu64
			         " bytes at %" PRIu64 ")",
			         j, kind, sl, off);
			untrusted_stats plain = {0}, fixed = {0};
			char what[128];
			for (unsigned t = 0; t < 300; t++) {
				size_t at =
				    (size_t)(off + test_rng_below(&r, sl));
				uint8_t x =
				    (uint8_t)(1 + test_rng_below(&r, 255));
				if (t < 8 && t < sl) /* the first bytes */
					at = (size_t)(off + t);
				ubuf u;
				uint8_t *p = ubuf_make(&u, f, b[k].len, (int)t);
				p[at] ^= x;
				snprintf(what, sizeof what,
				         "byte %zu ^= 0x%02x", at, x);
				if (try_untrusted(p, b[k].len, &b[k].rs, &plain,
				                  what) == 2)
					FAILF("%s: verify accepted it (body "
					      "CRC32C)",
					      what);
				fix_crcs(p, b[k].len);
				snprintf(what, sizeof what,
				         "byte %zu ^= 0x%02x, CRCs fixed", at,
				         x);
				(void)try_untrusted(p, b[k].len, &b[k].rs,
				                    &fixed, what);
				ubuf_free(&u);
			}
			printf("[ INFO     ] %-17s section kind %u (%" PRIu64
			       " bytes): %" PRIu64 " changes, %" PRIu64
			       " opened; with CRCs fixed %" PRIu64
			       " opened, %" PRIu64 " verified\n",
			       b[k].name, kind, sl, plain.tries, plain.opened,
			       fixed.opened, fixed.verified);
		}
	}
	free_bases(b, nb);
	g_mode = "";
}

static uint64_t load_le(const uint8_t *p, unsigned width)
{
	uint64_t v = 0;
	for (unsigned k = 0; k < width; k++)
		v |= (uint64_t)p[k] << (8 * k);
	return v;
}

static void store_le(uint8_t *p, unsigned width, uint64_t v)
{
	for (unsigned k = 0; k < width; k++)
		p[k] = (uint8_t)(v >> (8 * k));
}

/*
 * The restart fences (FORMAT.md §9), changed as a writer that got them
 * wrong would have written them, CRC32Cs and all. A section of the wrong
 * length fails open. A skip one bit past the first and last keys' common
 * prefix, or one bit short of it, with every fence recomputed from the
 * records at that skip (ref_fence) so that each fence agrees with its
 * key: open accepts it (the skip is within the first key), and verify
 * must refuse it, naming the skip. One bit past is the harmful case: the
 * keys do not all share that prefix, which lookups assume.
 */
static void expect_crafted(const uint8_t *f, size_t len, bool opens,
                           const char *says, const char *what)
{
	kvs_segment *s = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	kvs_status st = kvs_segment_open_memory(&s, f, len, &err);
	if (!opens) {
		EXPECT_ERR(st, err, "%s: open accepted it", what);
	} else {
		EXPECT_ST(st, KVS_OK, "%s: open: %s", what, err.message);
		memset(&err, 0, sizeof err);
		st = kvs_segment_verify(s, &err);
		kvs_segment_unref(s);
		EXPECT_ERR(st, err, "%s: verify accepted it", what);
	}
	EXPECT_ST(st, KVS_E_CORRUPT, "%s: \"%s\"", what, err.message);
	if (strstr(err.message, says) == NULL)
		FAILF("%s: the message \"%s\" does not say \"%s\"", what,
		      err.message, says);
}

static void test_crafted_fences(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 12);
	char dir[PATH_MAX], p[PATH_MAX];
	make_subdir(dir, "crafted_fences");
	path_join(p, dir, "base.kvseg");
	/* every mode, keys with a long shared prefix (structured) and with a
	 * short one (random bits), none empty: the skip can move both ways */
	static const gen_spec specs[2] = {
	    {"structured", KEYS_STRUCTURED, VALS_SMALL, 0, 200, false},
	    {"random bits", KEYS_RANDBITS, VALS_SMALL, 0, 200, false}};
	base b[2 * NMODES];
	const mode *bm[2 * NMODES]; /* b's modes */
	size_t nb = 0;
	for (size_t m = 0; m < NMODES; m++)
		for (size_t g = 0; g < 2; g++) {
			const mode *md = &MODES[m];
			if (md->profile == KVS_PROFILE_BYTE &&
			    specs[g].keys == KEYS_RANDBITS)
				continue; /* whole bytes only */
			bm[nb] = md;
			base *x = &b[nb++];
			x->name = specs[g].name;
			rs_generate(&x->rs, &specs[g],
			            md->framing == KVS_FRAMING_TYPED, &r);
			x->o = make_opts(md, 4, 42);
			write_ok(p, &x->rs, &x->o);
			x->file = slurp(p, &x->len);
			assert_int_equal(unlink(p), 0);
		}
	unsigned tried = 0;
	for (size_t k = 0; k < nb; k++) {
		const recset *rs = &b[k].rs;
		const uint8_t *f = b[k].file;
		uint64_t fence_off = 0, fence_len = 0;
		size_t entry_at = 0; /* the fences' directory entry */
		for (uint32_t j = 0; j < le32(f + 52); j++) {
			size_t at = HEADER_BYTES + DIR_ENTRY_BYTES * (size_t)j;
			if (le16(f + at) == 4) { /* restart fences */
				entry_at = at;
				fence_off = test_get_le64(f + at + 8);
				fence_len = test_get_le64(f + at + 16);
			}
		}
		if (rs->n < 2 || fence_len == 0)
			continue;
		set_mode("%s", bm[k]->name);
		set_case("%s", b[k].name);
		uint32_t K = b[k].o.restart_interval;
		uint64_t restarts = test_ceil_div(rs->n, K);
		/* the writer's fences are right to begin with */
		check_fences(f + fence_off, fence_len, rs, K);
		const rec *first = &rs->r[0], *last = &rs->r[rs->n - 1];
		uint64_t lcp = ref_lcp_bits(first->key, first->bits, last->key,
		                            last->bits);

		uint8_t *c = malloc(b[k].len);
		assert_non_null(c);
		memcpy(c, f, b[k].len);
		/* the length: four bytes short, and the file with it (the
		 * fences are the last section) */
		EXPECT_U64(fence_off + fence_len, b[k].len,
		           "%s: the fences end the file", b[k].name);
		store_le(c + entry_at + 16, 8, fence_len - 4);
		store_le(c + 64, 8, b[k].len - 4); /* the file length, §5 */
		fix_crcs(c, b[k].len - 4);
		expect_crafted(c, b[k].len - 4, false,
		               "restart fences have the wrong length",
		               "fences 4 bytes short");
		tried++;

		/* the skip one bit past the common prefix, and one bit short */
		for (int d = 1; d >= -1; d -= 2) {
			if ((d < 0 && lcp == 0) ||
			    (d > 0 && lcp + 1 > rs->r[0].bits))
				continue;
			uint64_t skip = lcp + (uint64_t)(int64_t)d;
			memcpy(c, f, b[k].len);
			store_le(c + fence_off, 8, skip);
			for (uint64_t j = 0; j < restarts; j++)
				store_le(c + fence_off + 8 + 4 * j, 4,
				         ref_fence(&rs->r[j * K], skip));
			fix_crcs(c, b[k].len);
			char what[96];
			snprintf(what, sizeof what,
			         "skip %" PRIu64 " (the common prefix %+d), "
			         "fences recomputed",
			         skip, d);
			expect_crafted(c, b[k].len, true,
			               "the skip is not the common prefix",
			               what);
			tried++;
		}
		free(c);
	}
	printf("[ INFO     ] %u crafted fence sections refused\n", tried);
	CHECK(tried >= 14, "only %u crafted files were tried", tried);
	free_bases(b, nb);
	g_mode = "";
}

/* Every header and directory field set to nearby and extreme values, with
 * the CRC32Cs recomputed: changed counts and totals must be refused by open
 * or verify; whatever the change, everything must stay safe. */
static void test_corrupt_fields(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 12);
	char dir[PATH_MAX];
	make_subdir(dir, "corrupt_fields");
	base b[N_BASES];
	size_t nb = make_bases(b, &r, dir);
	static const struct {
		unsigned off, width;
		const char *name;
		bool must_refuse;
	} hdr[] = {
	    {8, 2, "version", true},
	    {10, 1, "profile", true},
	    {11, 1, "framing", true},
	    {12, 4, "flags", true},
	    {16, 8, "records", true},
	    {24, 8, "tombstones", true},
	    {32, 8, "key bits", true},
	    {40, 8, "value bytes", true},
	    {48, 4, "restart interval", true},
	    {52, 4, "section count", true},
	    {56, 8, "sequence", false},
	    {64, 8, "file length", true},
	    {72, 8, "stream bits", true},
	    {80, 8, "max key bits", true},
	    {88, 1, "LCP code kind", false},
	    {89, 1, "LCP code param", false},
	    {90, 1, "LCP code delta", false},
	    {92, 1, "KEYLEN code kind", false},
	    {93, 1, "KEYLEN code param", false},
	    {94, 1, "KEYLEN code delta", false},
	    {96, 1, "VALLEN code kind", false},
	    {97, 1, "VALLEN code param", false},
	    {98, 1, "VALLEN code delta", false},
	};
	static const struct {
		unsigned off, width;
		const char *name;
	} ent[] = {
	    {0, 2, "kind"},   {2, 2, "flags"},   {4, 1, "alignment"},
	    {8, 8, "offset"}, {16, 8, "length"}, {24, 8, "reserved"},
	};
	const size_t nhdr = sizeof hdr / sizeof hdr[0];
	const size_t nent = sizeof ent / sizeof ent[0];
	for (size_t k = 0; k < nb; k++) {
		set_case("%s (%zu bytes)", b[k].name, b[k].len);
		set_mode("fields, CRCs fixed");
		const uint8_t *f = b[k].file;
		size_t len = b[k].len;
		size_t nf = nhdr + le32(f + 52) * nent;
		untrusted_stats st = {0};
		uint8_t *p = malloc(len);
		assert_non_null(p);
		char what[160];
		for (size_t i = 0; i < nf; i++) {
			unsigned off, width;
			bool refuse = false;
			char name[64];
			if (i < nhdr) {
				off = hdr[i].off;
				width = hdr[i].width;
				/* an empty segment is valid in both framings
				 * and with any restart interval */
				refuse = hdr[i].must_refuse &&
				         !(b[k].rs.n == 0 &&
				           (off == 11 || off == 48));
				snprintf(name, sizeof name, "header %s",
				         hdr[i].name);
			} else {
				size_t e = (i - nhdr) / nent,
				       w = (i - nhdr) % nent;
				off = (unsigned)(HEADER_BYTES +
				                 DIR_ENTRY_BYTES * e +
				                 ent[w].off);
				width = ent[w].width;
				snprintf(name, sizeof name, "section %zu %s", e,
				         ent[w].name);
			}
			uint64_t v = load_le(f + off, width);
			uint64_t top = width == 8
			                   ? U64MAX
			                   : ((uint64_t)1 << (8 * width)) - 1;
			const uint64_t news[] = {
			    v + 1,   v - 1,   v + 8, v - 8, 0,       1,
			    top,     top - 1, v * 2, v / 2, v ^ top, v + 4096,
			    v + len, v << 32, 64,    65,    v + 7,   v - 7};
			for (size_t t = 0; t < sizeof news / sizeof news[0];
			     t++) {
				uint64_t nv = news[t] & top;
				if (nv == v)
					continue;
				memcpy(p, f, len);
				store_le(p + off, width, nv);
				fix_crcs(p, len);
				snprintf(what, sizeof what,
				         "%s (@%u) %" PRIu64 " -> %" PRIu64,
				         name, off, v, nv);
				int res =
				    try_untrusted(p, len, &b[k].rs, &st, what);
				if (refuse && res == 2)
					FAILF("%s: open and verify accepted it",
					      what);
			}
		}
		free(p);
		printf("[ INFO     ] %-17s %" PRIu64 " field changes: %" PRIu64
		       " opened, %" PRIu64 " verified\n",
		       b[k].name, st.tries, st.opened, st.verified);
	}
	free_bases(b, nb);
	g_mode = "";
}

/* The first byte outside the CRC32Cs where two files differ (len if
 * none). */
static size_t first_change(const uint8_t *a, const uint8_t *b, size_t len)
{
	size_t i = 0;
	while (i < len && (a[i] == b[i] || (i >= 120 && i < HEADER_BYTES)))
		i++;
	return i;
}

/* Several random changes at once (bits, bytes, runs of 0x00 / 0xFF, a
 * chunk copied from elsewhere in the file), mostly with the CRC32Cs fixed:
 * everything stays safe, and what verify accepts is consistent. */
static void test_corrupt_random(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 13);
	char dir[PATH_MAX];
	make_subdir(dir, "corrupt_random");
	base b[N_BASES];
	size_t nb = make_bases(b, &r, dir);
	const unsigned iters = 2000;
	for (size_t k = 0; k < nb; k++) {
		set_case("%s (%zu bytes)", b[k].name, b[k].len);
		set_mode("random changes");
		const uint8_t *f = b[k].file;
		size_t len = b[k].len;
		size_t body = (size_t)dir_end_of(f, len);
		untrusted_stats st = {0};
		char what[96];
		unsigned changed_verified = 0;
		size_t first_diff = 0;
		for (unsigned it = 0; it < iters; it++) {
			ubuf u;
			uint8_t *p = ubuf_make(&u, f, len, (int)it);
			unsigned muts = 1 + (unsigned)test_rng_below(&r, 4);
			for (unsigned m = 0; m < muts; m++) {
				uint64_t rnd = test_rng_next(&r);
				/* mostly in the body, where the decoders are */
				size_t lo = (rnd & 3) ? body : 0;
				size_t at =
				    lo + (size_t)test_rng_below(
				             &r, len - lo ? len - lo : 1);
				if (at >= len)
					continue;
				size_t run = 1 + (size_t)test_rng_below(&r, 16);
				if (run > len - at)
					run = len - at;
				switch ((rnd >> 8) % 5) {
				case 0:
					p[at] ^=
					    (uint8_t)(1u << ((rnd >> 16) & 7));
					break;
				case 1:
					p[at] = (uint8_t)(rnd >> 24);
					break;
				case 2:
					memset(p + at, 0, run);
					break;
				case 3:
					memset(p + at, 0xFF, run);
					break;
				default: {
					size_t from = (size_t)test_rng_below(
					    &r, len - run + 1);
					memmove(p + at, f + from, run);
					break;
				}
				}
			}
			bool fixed = it % 4 != 0;
			if (fixed)
				fix_crcs(p, len);
			snprintf(what, sizeof what, "change set %u%s", it,
			         fixed ? ", CRCs fixed" : "");
			int res = try_untrusted(p, len, &b[k].rs, &st, what);
			size_t at = first_change(p, f, len);
			bool changed = at < len;
			if (!fixed && res == 2 && changed)
				FAILF("%s: changed, and verify accepted it",
				      what);
			if (res == 2 && changed) {
				if (changed_verified++ == 0)
					first_diff = at;
			}
			ubuf_free(&u);
		}
		printf("[ INFO     ] %-17s %u change sets: %" PRIu64
		       " opened, %" PRIu64 " verified (%u of them changed, "
		       "the first at byte %zu)\n",
		       b[k].name, iters, st.opened, st.verified,
		       changed_verified, first_diff);
	}
	free_bases(b, nb);
	g_mode = "";
}

/* Every truncation of the small files, a sample of a larger one, and
 * appended bytes: open must fail, in memory and from a file. */
static void test_truncate_extend(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 11);
	char dir[PATH_MAX];
	make_subdir(dir, "truncate");
	base b[N_BASES + 1];
	size_t nb = make_bases(b, &r, dir);
	/* A larger one, for sampled truncations. */
	{
		gen_spec g = {"", KEYS_RANDBITS, VALS_FV, 0, 3000, true};
		b[nb].name = "typed-bit 3000 FV";
		rs_generate(&b[nb].rs, &g, true, &r);
		b[nb].o = make_opts(&MODES[2], 15, 5);
		char p[PATH_MAX];
		path_join(p, dir, "big.kvseg");
		write_ok(p, &b[nb].rs, &b[nb].o);
		b[nb].file = slurp(p, &b[nb].len);
		assert_int_equal(unlink(p), 0);
		nb++;
	}
	for (size_t k = 0; k < nb; k++) {
		const uint8_t *f = b[k].file;
		size_t len = b[k].len;
		set_case("%s (%zu bytes)", b[k].name, len);
		set_mode("truncated");
		untrusted_stats st = {0};
		char what[128];
		bool all = len <= 20000;
		/* Lengths to try on the big file: the envelope, around
		 * every section's ends, the tail, and random ones. */
		size_t *lens = malloc((len + 1) * sizeof *lens);
		assert_non_null(lens);
		size_t nl = 0;
		if (all) {
			for (size_t l = 0; l < len; l++)
				lens[nl++] = l;
		} else {
			uint64_t end = dir_end_of(f, len);
			for (size_t l = 0; l <= end + 8; l++)
				lens[nl++] = l;
			for (uint64_t j = 0; j < le32(f + 52); j++) {
				const uint8_t *e =
				    f + HEADER_BYTES + DIR_ENTRY_BYTES * j;
				uint64_t a = test_get_le64(e + 8);
				uint64_t z = a + test_get_le64(e + 16);
				for (int d = -8; d <= 8; d++) {
					if (a + d < len)
						lens[nl++] = (size_t)(a + d);
					if (z + d < len)
						lens[nl++] = (size_t)(z + d);
				}
			}
			for (size_t d = 1; d <= 16; d++)
				lens[nl++] = len - d;
			for (unsigned t = 0; t < 300; t++)
				lens[nl++] = (size_t)test_rng_below(&r, len);
		}
		for (size_t i = 0; i < nl; i++) {
			size_t l = lens[i];
			ubuf u;
			uint8_t *p = ubuf_make(&u, f, l, (int)i);
			snprintf(what, sizeof what, "truncated to %zu of %zu",
			         l, len);
			if (try_untrusted(p, l, &b[k].rs, &st, what) != 0)
				FAILF("%s: open accepted it", what);
			ubuf_free(&u);
		}
		free(lens);
		/* Appended bytes. */
		set_mode("extended");
		static const size_t extra[] = {1, 7, 8, 4096};
		for (size_t e = 0; e < sizeof extra / sizeof extra[0]; e++) {
			uint8_t *ext = calloc(len + extra[e], 1);
			assert_non_null(ext);
			memcpy(ext, f, len);
			for (int fill = 0; fill < 2; fill++) {
				memset(ext + len, fill ? 0xFF : 0, extra[e]);
				ubuf u;
				uint8_t *p =
				    ubuf_make(&u, ext, len + extra[e], fill);
				snprintf(what, sizeof what,
				         "%zu bytes of 0x%02x appended",
				         extra[e], fill ? 0xFF : 0);
				if (try_untrusted(p, len + extra[e], &b[k].rs,
				                  &st, what) != 0)
					FAILF("%s: open accepted it", what);
				ubuf_free(&u);
			}
			free(ext);
		}
		printf("[ INFO     ] %-17s %" PRIu64
		       " truncations and extensions refused\n",
		       b[k].name, st.tries);

		/* The same through kvs_segment_open on files. */
		set_mode("files");
		char p[PATH_MAX];
		path_join(p, dir, "cut.kvseg");
		size_t cuts[] = {0,   1,       8,       127,    128,
		                 129, len / 2, len - 1, len + 1};
		for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
			size_t l = cuts[i];
			if (i + 1 < sizeof cuts / sizeof cuts[0] && l >= len)
				continue;
			uint8_t *data = calloc(l + 1, 1);
			assert_non_null(data);
			memcpy(data, f, l < len ? l : len);
			spit(p, data, l);
			free(data);
			kvs_segment *s = NULL;
			kvs_error err;
			memset(&err, 0, sizeof err);
			kvs_status rc = kvs_segment_open(&s, p, &err);
			if (rc == KVS_OK)
				kvs_segment_unref(s);
			EXPECT_ERR(rc, err,
			           "kvs_segment_open of a %zu-byte file "
			           "(valid: %zu) succeeded",
			           l, len);
			expect_path_first(&err, p, "kvs_segment_open");
		}
		assert_int_equal(unlink(p), 0);
	}
	free_bases(b, nb);

	/* Paths that are not segments at all. */
	set_case("not a segment");
	set_mode("files");
	char p[PATH_MAX];
	kvs_segment *s = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	path_join(p, dir, "does-not-exist.kvseg");
	kvs_status rc = kvs_segment_open(&s, p, &err);
	EXPECT_ERR(rc, err, "kvs_segment_open of a missing file");
	expect_path_first(&err, p, "a missing file");
	EXPECT_ST(rc, KVS_E_IO, "missing file: %s", err.message);
	memset(&err, 0, sizeof err);
	rc = kvs_segment_open(&s, dir, &err);
	if (rc == KVS_OK)
		kvs_segment_unref(s);
	EXPECT_ERR(rc, err, "kvs_segment_open of a directory");
	expect_path_first(&err, dir, "a directory");
	g_mode = "";
}

/* ---- the program ----------------------------------------------------------
 */

static int group_setup(void **state)
{
	(void)state;
	return tmpdir_setup("test_segment");
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
	g_seed = test_seed_from_env("test_segment", SEED);
	const struct CMUnitTest tests[] = {
	    TEST(test_key_compare),
	    TEST(test_format_example),
	    TEST(test_round_trip),
	    TEST(test_long_keys),
	    TEST(test_code_specs),
	    TEST(test_custom_codes),
	    TEST(test_long_codes),
	    TEST(test_writer_errors),
	    TEST(test_writer_special_output),
	    TEST(test_writer_file_mode),
	    TEST(test_cursor),
	    TEST(test_misaligned),
	    TEST(test_threads),
	    TEST(test_corrupt_envelope),
	    TEST(test_corrupt_sections),
	    TEST(test_corrupt_fields),
	    TEST(test_crafted_fences),
	    TEST(test_corrupt_random),
	    TEST(test_truncate_extend),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
