/*
 * test_merge.c — the native merge (kvseg/merge.h) against an independent
 * oracle.
 *
 * The oracle: all input records in one array, sorted by (key as a bit
 * string, input index) with a comparator written here; then one pass that
 * keeps, for each key, the binding of the highest input index (and, with a
 * strong delete, drops it when it is a tombstone), counting replaced and
 * dropped bindings. The merged output must be byte-identical to what
 * kvs_writer makes of that list with the same output options, must verify,
 * and kvs_merge_stats must equal the oracle's counts. The inputs must be
 * unchanged afterwards.
 *
 * What it covers:
 *   - every output mode (byte/bit profile x typed/raw framing) from inputs
 *     of every mode, and from mixed inputs (byte- and bit-profile, typed and
 *     raw, in one merge) when the keys are whole bytes;
 *   - equal keys across inputs with different values, tombstones over
 *     values (kept by default), values over tombstones, tombstones over
 *     tombstones; the strong delete (drop_tombstones + includes_oldest),
 *     also into raw framing, and odd-length bit keys that only a strong
 *     delete lets into a byte-profile output;
 *   - one input (a copy, also converting mode, K and codes), 2, 3, 5, 7,
 *     33 and 64 inputs, one segment given three times, empty inputs (some
 *     or all), output K of 1, 15 (and the default), 64; structured and
 *     hash-like keys, shared prefixes of 64 and 4096 bytes, the empty key,
 *     keys of byte lengths 1..24 and of odd bit lengths (bit profile), keys
 *     of KVS_MAX_KEY_BITS; values empty, 16 bytes, 0..512 bytes; and 300
 *     merges with all of these drawn at random;
 *   - stats: input_records = output_records + replaced + dropped, where
 *     replaced counts every older binding of a key and dropped the
 *     tombstones a strong delete removes;
 *   - progress: done never decreases, never exceeds total, total is the
 *     number of input records, and a large merge reports from its middle;
 *   - no options (NULL): the writer's defaults, byte for byte;
 *   - errors (KVS_E_INVAL with a message, nothing left in the output
 *     directory): raw output while tombstones would remain, a strong delete
 *     without includes_oldest, n == 0, a NULL input, unknown output
 *     profile, framing or codes (all before any work: no progress call),
 *     an out-of-range K
 *     (any error), bit keys that are not whole bytes into a
 *     byte-profile output (found during the merge); a missing output
 *     directory (KVS_E_IO); cancel from the progress callback at its first,
 *     middle and last call (KVS_E_CANCELED); corrupt inputs (an error or a
 *     verified output, never a stray file);
 *   - ENOSPC: the output on a 256 KiB tmpfs mounted in a private mount
 *     namespace of a forked child fails with KVS_E_IO naming the space
 *     error and leaves the tmpfs empty; a merge whose output fits there
 *     but whose size hint (64 MiB) does not succeeds, with the writer's
 *     bytes and no more space than they need (both skipped when mounting
 *     is not permitted);
 *   - space: every checked merge's output takes no more space on disk
 *     than the writer's file of the same bytes (what kvs_merge reserved
 *     for it was released).
 *
 * The seed is printed (KVSEG_TEST_SEED changes it); failures name the
 * case, the modes, and the first differing byte of the output.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvseg/merge.h"
#include "kvseg/segment.h"
#include "testutil.h"

#define SEED 0x3E26E5EDull

static uint64_t g_seed;
static const char *g_seq = "";  /* the case under test, for messages */
static const char *g_mode = ""; /* input and output modes */
static char g_case[256];
static char g_mode_buf[160];
static char g_tmp[PATH_MAX]; /* this run's temporary directory */

#include "segutil.h" /* after g_seq, g_mode and g_tmp */

#include "fuzz/fuzz_crcs.h"

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

/* ---- keys and the oracle's order ----------------------------------------- */

/* A key as hex (the last 12 bytes: shared prefixes come first) and its
 * length in bits. */
static const char *hexkey(const uint8_t *k, uint64_t bits)
{
	static char buf[4][80];
	static unsigned slot;
	char *b = buf[slot++ & 3];
	size_t nb = key_bytes(bits), from = nb > 12 ? nb - 12 : 0, o = 0;
	if (nb == 0) {
		snprintf(b, 80, "(empty)/0b");
		return b;
	}
	if (from)
		o += (size_t)snprintf(b, 80, "..");
	for (size_t i = from; i < nb; i++)
		o += (size_t)snprintf(b + o, 80 - o, "%02x", k[i]);
	snprintf(b + o, 80 - o, "/%" PRIu64 "b", bits);
	return b;
}

/* ---- records ------------------------------------------------------------- */

/* A record of one input; keys belong to the universe, values to the
 * record. */
typedef struct rec {
	const uint8_t *key;
	uint64_t bits;
	kvs_kind kind;
	uint8_t *val; /* vlen bytes; NULL when vlen is 0 */
	size_t vlen;
	size_t src; /* the input it came from */
} rec;

typedef struct recs {
	rec *r;
	size_t n, cap;
} recs;

static rec *recs_push(recs *v)
{
	if (v->n == v->cap) {
		v->cap = v->cap ? 2 * v->cap : 64;
		v->r = realloc(v->r, v->cap * sizeof *v->r);
		assert_non_null(v->r);
	}
	rec *x = &v->r[v->n++];
	memset(x, 0, sizeof *x);
	return x;
}

static void recs_free(recs *v, bool values)
{
	if (values)
		for (size_t i = 0; i < v->n; i++)
			free(v->r[i].val);
	free(v->r);
	memset(v, 0, sizeof *v);
}

/* The distinct keys a case draws its input records from, sorted. */
typedef struct universe {
	uint8_t **key;
	uint64_t *bits;
	size_t n, cap;
} universe;

static void uni_push(universe *u, const uint8_t *key, uint64_t bits)
{
	if (u->n == u->cap) {
		u->cap = u->cap ? 2 * u->cap : 256;
		u->key = realloc(u->key, u->cap * sizeof *u->key);
		u->bits = realloc(u->bits, u->cap * sizeof *u->bits);
		assert_true(u->key && u->bits);
	}
	u->key[u->n] = key_dup(key, bits);
	u->bits[u->n++] = bits;
}

static void uni_free(universe *u)
{
	for (size_t i = 0; i < u->n; i++)
		free(u->key[i]);
	free(u->key);
	free(u->bits);
	memset(u, 0, sizeof *u);
}

typedef enum key_shape {
	KEYS_NONE,       /* none (only the empty key, if asked for) */
	KEYS_STRUCTURED, /* 8 shared bytes + a big-endian counter */
	KEYS_HASH,       /* 16 random bytes */
	KEYS_BYTELENS,   /* lengths 1..24 bytes, with prefix chains */
	KEYS_RANDBITS,   /* random bit lengths 1..130, with prefix chains */
	KEYS_LONG,       /* random bytes, 512..8191 of them */
} key_shape;

typedef enum val_shape {
	VALS_FF16,  /* 16 bytes */
	VALS_FV,    /* 0..512 bytes, uniform */
	VALS_SMALL, /* 0..24 bytes */
	VALS_EMPTY,
	VALS_EDGES, /* lengths at the merge's limits, see edge_lengths */
} val_shape;

/*
 * Value lengths at the limits of the two-input loops (merge.c): the value
 * header's one, two and three bytes (typed framing stores length + 1),
 * the byte loop's 16-byte short copy and FAST_REC (4032 bytes of key and
 * value), the bit loop's 32-byte blocks (48 bytes and up) and BIT_REC
 * (896 bytes of key and value).
 */
static const size_t edge_lengths[] = {
    0,    1,    15,   16,   17,   40,    47,    48,    49,    80,
    81,   126,  127,  128,  129,  863,   880,   895,   896,   897,
    4015, 4016, 4031, 4032, 4033, 16381, 16382, 16383, 16384, 16385};

typedef struct merge_case {
	const char *name;
	key_shape keys;
	val_shape vals;
	size_t prefix;         /* bytes shared by every key */
	size_t n;              /* keys to draw */
	bool empty_key;        /* also the empty key */
	size_t inputs;         /* how many */
	unsigned density;      /* % chance that an input holds a key */
	unsigned tombs;        /* % of a typed input's records that are tombs */
	uint64_t empty_inputs; /* bit i: input i holds nothing */
} merge_case;

typedef struct pair {
	uint8_t *key;
	uint64_t bits;
} pair;

static int pair_cmp(const void *a, const void *b)
{
	const pair *x = a, *y = b;
	return ref_key_cmp(x->key, x->bits, y->key, y->bits);
}

/* Draws mc's keys, then sorts and dedupes them with ref_key_cmp. */
static void uni_generate(universe *u, const merge_case *mc, test_rng *r)
{
	memset(u, 0, sizeof *u);
	size_t P = mc->prefix;
	uint8_t *buf = calloc(P + 8192, 1);
	assert_non_null(buf);
	rand_bytes(r, buf, P);
	uint8_t *sfx = buf + P;
	switch (mc->keys) {
	case KEYS_NONE:
		break;
	case KEYS_STRUCTURED: {
		uint8_t shared[8];
		rand_bytes(r, shared, 8);
		uint64_t start = test_rng_below(r, 1ull << 40);
		uint64_t step = 1 + test_rng_below(r, 5);
		for (size_t i = 0; i < mc->n; i++) {
			memcpy(sfx, shared, 8);
			put_be64(sfx + 8, start + i * step);
			uni_push(u, buf, 8 * (P + 16));
		}
		break;
	}
	case KEYS_HASH:
		for (size_t i = 0; i < mc->n; i++) {
			rand_bytes(r, sfx, 16);
			uni_push(u, buf, 8 * (P + 16));
		}
		break;
	case KEYS_BYTELENS: {
		uint8_t base[3][24];
		rand_bytes(r, &base[0][0], sizeof base);
		for (size_t i = 0; i < mc->n; i++) {
			size_t len = 1 + test_rng_below(r, 24);
			if (test_rng_below(r, 2))
				memcpy(sfx, base[test_rng_below(r, 3)], len);
			else
				rand_bytes(r, sfx, len);
			uni_push(u, buf, 8 * (P + len));
		}
		break;
	}
	case KEYS_RANDBITS: {
		uint64_t prev_len = 0;
		for (size_t i = 0; i < mc->n; i++) {
			uint64_t len;
			if (prev_len > 1 && test_rng_below(r, 4) == 0) {
				/* a prefix of the previous key */
				len = 1 + test_rng_below(r, prev_len);
			} else {
				len = 1 + test_rng_below(r, 130);
				rand_bytes(r, sfx, 17);
			}
			uni_push(u, buf, 8 * P + len);
			prev_len = len;
		}
		break;
	}
	case KEYS_LONG:
		for (size_t i = 0; i < mc->n; i++) {
			size_t len = 512 + test_rng_below(r, 8192 - 512);
			rand_bytes(r, sfx, len);
			uni_push(u, buf, 8 * (P + len));
		}
		break;
	}
	if (mc->empty_key)
		uni_push(u, buf, 0);
	free(buf);

	pair *p = malloc((u->n ? u->n : 1) * sizeof *p);
	assert_non_null(p);
	for (size_t i = 0; i < u->n; i++)
		p[i] = (pair){u->key[i], u->bits[i]};
	qsort(p, u->n, sizeof *p, pair_cmp);
	size_t w = 0;
	for (size_t i = 0; i < u->n; i++) {
		if (w > 0 && pair_cmp(&p[w - 1], &p[i]) == 0) {
			free(p[i].key);
			continue;
		}
		p[w++] = p[i];
	}
	u->n = w;
	for (size_t i = 0; i < w; i++) {
		u->key[i] = p[i].key;
		u->bits[i] = p[i].bits;
	}
	free(p);
}

static void gen_value(rec *x, val_shape vs, test_rng *r)
{
	switch (vs) {
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
	case VALS_EDGES:
		x->vlen = edge_lengths[test_rng_below(
		    r, sizeof edge_lengths / sizeof edge_lengths[0])];
		break;
	}
	if (x->vlen) {
		x->val = malloc(x->vlen);
		assert_non_null(x->val);
		rand_bytes(r, x->val, x->vlen);
	}
}

/* ---- modes, options, files ----------------------------------------------- */

typedef struct mode {
	kvs_profile profile;
	kvs_framing framing;
	const char *name;
} mode;

enum { BT, BR, IT, IR }; /* byte/typed, byte/raw, bit/typed, bit/raw */

static const mode MODES[] = {
    {KVS_PROFILE_BYTE, KVS_FRAMING_TYPED, "byte/typed"},
    {KVS_PROFILE_BYTE, KVS_FRAMING_RAW, "byte/raw"},
    {KVS_PROFILE_BIT, KVS_FRAMING_TYPED, "bit/typed"},
    {KVS_PROFILE_BIT, KVS_FRAMING_RAW, "bit/raw"},
};
#define NMODES (sizeof MODES / sizeof MODES[0])

static kvs_writer_options make_opts(unsigned m, uint32_t restart_interval,
                                    uint64_t sequence)
{
	kvs_writer_options o;
	memset(&o, 0, sizeof o);
	o.profile = MODES[m].profile;
	o.framing = MODES[m].framing;
	o.restart_interval = restart_interval;
	o.sequence = sequence;
	o.flags = KVS_WRITER_NO_SYNC;
	return o;
}

/* Writes v's records to path; tombstones go with a value the writer must
 * ignore. */
static void write_recs(const char *path, const recs *v,
                       const kvs_writer_options *o)
{
	kvs_writer *w = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	EXPECT_ST(kvs_writer_open(&w, path, o, &err), KVS_OK,
	          "kvs_writer_open(%s): %s", path, err.message);
	for (size_t i = 0; i < v->n; i++) {
		const rec *x = &v->r[i];
		bool tomb = x->kind == KVS_KIND_TOMBSTONE;
		kvs_status st =
		    kvs_writer_add(w, x->key, x->bits, x->kind,
		                   tomb ? (const void *)"ignored" : x->val,
		                   tomb ? 7 : x->vlen, &err);
		EXPECT_ST(st, KVS_OK,
		          "writing %s: record %zu of %zu (key %s): %s", path, i,
		          v->n, hexkey(x->key, x->bits), err.message);
	}
	EXPECT_ST(kvs_writer_finish(w, &err), KVS_OK, "finishing %s: %s", path,
	          err.message);
	kvs_writer_free(w);
}

static kvs_segment *open_verified(const char *path)
{
	kvs_segment *s = NULL;
	kvs_error err;
	memset(&err, 0, sizeof err);
	EXPECT_ST(kvs_segment_open(&s, path, &err), KVS_OK,
	          "kvs_segment_open(%s): %s", path, err.message);
	EXPECT_ST(kvs_segment_verify(s, &err), KVS_OK,
	          "kvs_segment_verify(%s): %s", path, err.message);
	return s;
}

/* ---- the oracle ---------------------------------------------------------- */

/* By key, then by input: the newest binding of a key comes last. */
static int rec_src_cmp(const void *a, const void *b)
{
	const rec *x = a, *y = b;
	int c = ref_key_cmp(x->key, x->bits, y->key, y->bits);
	if (c)
		return c;
	return (x->src > y->src) - (x->src < y->src);
}

typedef struct oracle {
	recs out; /* the merged records (values borrowed from the inputs) */
	uint64_t input_records, replaced, dropped, tombstones;
	/* what the inputs exercised: newer kind over older kind */
	uint64_t value_over_value, tomb_over_value, value_over_tomb,
	    tomb_over_tomb;
} oracle;

static void oracle_merge(const recs *in, size_t n, bool drop, oracle *o)
{
	memset(o, 0, sizeof *o);
	recs all = {0};
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < in[i].n; j++) {
			rec *x = recs_push(&all);
			*x = in[i].r[j];
			x->src = i;
		}
	o->input_records = all.n;
	if (all.n > 1)
		qsort(all.r, all.n, sizeof *all.r, rec_src_cmp);
	for (size_t i = 0; i < all.n;) {
		size_t j = i + 1;
		while (j < all.n &&
		       ref_key_cmp(all.r[i].key, all.r[i].bits, all.r[j].key,
		                   all.r[j].bits) == 0)
			j++;
		for (size_t k = i; k + 1 < j; k++) {
			bool older_t = all.r[k].kind == KVS_KIND_TOMBSTONE;
			bool newer_t = all.r[k + 1].kind == KVS_KIND_TOMBSTONE;
			if (newer_t)
				*(older_t ? &o->tomb_over_tomb
				          : &o->tomb_over_value) += 1;
			else
				*(older_t ? &o->value_over_tomb
				          : &o->value_over_value) += 1;
		}
		const rec *win = &all.r[j - 1];
		o->replaced += j - i - 1;
		if (win->kind == KVS_KIND_TOMBSTONE && drop) {
			o->dropped++;
		} else {
			*recs_push(&o->out) = *win;
			o->tombstones += win->kind == KVS_KIND_TOMBSTONE;
		}
		i = j;
	}
	recs_free(&all, false);
}

/* ---- progress ------------------------------------------------------------ */

typedef struct progress_log {
	uint64_t calls, last_done, total, want_total;
	uint64_t first_mid; /* the first call with 0 < done < total */
	uint64_t
	    cancel_at; /* return non-zero at this call (1-based); 0 never */
	char why[200]; /* the first broken promise */
} progress_log;

static int progress_cb(void *ctx, uint64_t done, uint64_t total)
{
	progress_log *p = ctx;
	p->calls++;
	if (p->why[0] == '\0') {
		if (done < p->last_done)
			snprintf(p->why, sizeof p->why,
			         "call %" PRIu64 ": done %" PRIu64
			         " after %" PRIu64,
			         p->calls, done, p->last_done);
		else if (done > total)
			snprintf(p->why, sizeof p->why,
			         "call %" PRIu64 ": done %" PRIu64
			         " > total %" PRIu64,
			         p->calls, done, total);
		else if (total != p->want_total)
			snprintf(p->why, sizeof p->why,
			         "call %" PRIu64 ": total %" PRIu64
			         ", the inputs hold %" PRIu64 " records",
			         p->calls, total, p->want_total);
	}
	if (p->first_mid == 0 && done > 0 && done < total)
		p->first_mid = p->calls;
	p->last_done = done;
	p->total = total;
	return p->cancel_at != 0 && p->calls == p->cancel_at;
}

static void expect_progress_ok(const progress_log *p)
{
	if (p->why[0])
		FAILF("progress: %s", p->why);
}

/* ---- one merge against the oracle ---------------------------------------- */

typedef struct merge_run {
	size_t n;           /* inputs */
	recs *in;           /* their records */
	const unsigned *im; /* their modes (MODES index), one per input */
	uint32_t in_K;      /* their restart interval */
	unsigned out_mode;
	uint32_t out_K;
	bool drop, includes_oldest;
	bool custom_codes; /* bit output: codes[] below */
	kvs_code_spec codes[KVS_FIELD_COUNT];
	bool progress;
} merge_run;

static void set_mode_of(const merge_run *mr)
{
	size_t o = 0;
	unsigned seen = 0;
	o += (size_t)snprintf(g_mode_buf, sizeof g_mode_buf, "%zu in (", mr->n);
	for (size_t i = 0; i < mr->n; i++) {
		if (seen & (1u << mr->im[i]))
			continue;
		o += (size_t)snprintf(g_mode_buf + o, sizeof g_mode_buf - o,
		                      "%s%s", seen ? "+" : "",
		                      MODES[mr->im[i]].name);
		seen |= 1u << mr->im[i];
	}
	snprintf(g_mode_buf + o, sizeof g_mode_buf - o,
	         ", K=%u) -> %s K=%u%s%s", mr->in_K, MODES[mr->out_mode].name,
	         mr->out_K, mr->drop ? ", strong delete" : "",
	         mr->custom_codes ? ", custom codes" : "");
	g_mode = g_mode_buf;
}

static kvs_merge_options merge_opts(const merge_run *mr, uint64_t seq)
{
	kvs_merge_options mo;
	memset(&mo, 0, sizeof mo);
	mo.output = make_opts(mr->out_mode, mr->out_K, seq);
	if (mr->custom_codes) {
		mo.output.custom_codes = true;
		memcpy(mo.output.codes, mr->codes, sizeof mr->codes);
	}
	mo.drop_tombstones = mr->drop;
	mo.includes_oldest = mr->includes_oldest;
	return mo;
}

/* Writes the inputs of mr to dir/in-NNN.kvseg and opens them. */
static kvs_segment **write_inputs(const char *dir, const merge_run *mr)
{
	kvs_segment **segs = calloc(mr->n ? mr->n : 1, sizeof *segs);
	assert_non_null(segs);
	for (size_t i = 0; i < mr->n; i++) {
		char name[32], p[PATH_MAX];
		snprintf(name, sizeof name, "in-%03zu.kvseg", i);
		path_join(p, dir, name);
		kvs_writer_options o = make_opts(mr->im[i], mr->in_K, 100 + i);
		write_recs(p, &mr->in[i], &o);
		segs[i] = open_verified(p);
	}
	return segs;
}

static void close_inputs(const char *dir, kvs_segment **segs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char name[32], p[PATH_MAX];
		snprintf(name, sizeof name, "in-%03zu.kvseg", i);
		path_join(p, dir, name);
		kvs_segment_unref(segs[i]);
		assert_int_equal(unlink(p), 0);
	}
	free(segs);
}

static size_t first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	size_t d = 0;
	while (d < n && a[d] == b[d])
		d++;
	return d;
}

/* Both files hold the same bytes. */
static void expect_same_file(const char *got_path, const char *want_path,
                             const char *what)
{
	size_t gl, wl;
	uint8_t *g = slurp(got_path, &gl), *w = slurp(want_path, &wl);
	size_t n = gl < wl ? gl : wl, d = first_diff(g, w, n);
	if (gl != wl || d < n)
		FAILF("%s: %s (%zu bytes) differs from the writer's %s (%zu "
		      "bytes) at byte %zu (0x%02x, expected 0x%02x)",
		      what, got_path, gl, want_path, wl, d, d < gl ? g[d] : 0,
		      d < wl ? w[d] : 0);
	free(g);
	free(w);
}

/* The merged file takes no more space on disk than the writer's file of
 * the same bytes: what kvs_merge reserved for it up front (the inputs'
 * sizes, kvs_writer_options.size_hint) was released when it finished. */
static void expect_no_more_space(const char *got_path, const char *want_path)
{
	struct stat g, w;
	assert_int_equal(stat(got_path, &g), 0);
	assert_int_equal(stat(want_path, &w), 0);
	if (g.st_blocks > w.st_blocks)
		FAILF("%s (%lld bytes) takes %lld bytes on disk, the writer's "
		      "file of the same bytes %lld: space reserved for the "
		      "merge was not released",
		      got_path, (long long)g.st_size,
		      (long long)g.st_blocks * 512,
		      (long long)w.st_blocks * 512);
}

/*
 * Runs mr: writes and opens the inputs, computes the oracle, writes its
 * records with the writer, merges, and checks the output byte for byte,
 * verify, the stats, progress, the output directory and the inputs. The
 * oracle is returned in *po when po is not NULL (the caller frees
 * po->out).
 */
static void check_merge(const char *base, const merge_run *mr, test_rng *r,
                        oracle *po)
{
	set_mode_of(mr);
	char in_dir[PATH_MAX], out_dir[PATH_MAX], exp_dir[PATH_MAX];
	path_join(in_dir, base, "in");
	path_join(out_dir, base, "out");
	path_join(exp_dir, base, "exp");
	kvs_segment **segs = write_inputs(in_dir, mr);

	/* the inputs' bytes, to see that the merge leaves them alone */
	uint8_t **before = calloc(mr->n ? mr->n : 1, sizeof *before);
	size_t *before_len = calloc(mr->n ? mr->n : 1, sizeof *before_len);
	assert_true(before && before_len);
	for (size_t i = 0; i < mr->n; i++) {
		char name[32], p[PATH_MAX];
		snprintf(name, sizeof name, "in-%03zu.kvseg", i);
		path_join(p, in_dir, name);
		before[i] = slurp(p, &before_len[i]);
	}

	oracle o;
	oracle_merge(mr->in, mr->n, mr->drop, &o);
	uint64_t seq = test_rng_next(r);
	kvs_merge_options mo = merge_opts(mr, seq);
	char want[PATH_MAX], got[PATH_MAX];
	path_join(want, exp_dir, "want.kvseg");
	path_join(got, out_dir, "merged.kvseg");
	write_recs(want, &o.out, &mo.output);

	progress_log pl;
	memset(&pl, 0, sizeof pl);
	pl.want_total = o.input_records;
	if (mr->progress) {
		mo.progress = progress_cb;
		mo.progress_ctx = &pl;
	}
	kvs_merge_stats stats;
	memset(&stats, 0xA5, sizeof stats);
	kvs_error err;
	memset(&err, 0, sizeof err);
	kvs_status st = kvs_merge(segs, mr->n, got, &mo, &stats, &err);
	EXPECT_ST(st, KVS_OK, "kvs_merge: %s", err.message);

	expect_same_file(got, want, "merged output");
	expect_no_more_space(got, want);
	kvs_segment_unref(open_verified(got));
	EXPECT_U64(stats.input_records, o.input_records, "stats.input_records");
	EXPECT_U64(stats.output_records, o.out.n, "stats.output_records");
	EXPECT_U64(stats.replaced, o.replaced, "stats.replaced");
	EXPECT_U64(stats.dropped, o.dropped, "stats.dropped");
	if (mr->progress)
		expect_progress_ok(&pl);
	char first[256];
	unsigned entries = dir_entries(out_dir, first, sizeof first);
	if (entries != 1)
		FAILF("after the merge %s holds %u entries (first: %s), "
		      "expected only merged.kvseg",
		      out_dir, entries, first);

	/* stats may be NULL */
	assert_int_equal(unlink(got), 0);
	st = kvs_merge(segs, mr->n, got, &mo, NULL, &err);
	EXPECT_ST(st, KVS_OK, "kvs_merge with stats NULL: %s", err.message);
	expect_same_file(got, want, "merged output (stats NULL)");

	for (size_t i = 0; i < mr->n; i++) {
		EXPECT_ST(kvs_segment_verify(segs[i], &err), KVS_OK,
		          "input %zu after the merge: %s", i, err.message);
		char name[32], p[PATH_MAX];
		snprintf(name, sizeof name, "in-%03zu.kvseg", i);
		path_join(p, in_dir, name);
		size_t len;
		uint8_t *now = slurp(p, &len);
		if (len != before_len[i] || memcmp(now, before[i], len) != 0)
			FAILF("input %zu changed during the merge", i);
		free(now);
		free(before[i]);
	}
	free(before);
	free(before_len);

	assert_int_equal(unlink(got), 0);
	assert_int_equal(unlink(want), 0);
	close_inputs(in_dir, segs, mr->n);
	if (po)
		*po = o;
	else
		recs_free(&o.out, false);
}

/* A case directory with in/, out/ and exp/. */
static void make_case_dirs(char base[PATH_MAX], const char *name)
{
	make_subdir(base, name);
	char p[PATH_MAX];
	path_join(p, base, "in");
	assert_int_equal(mkdir(p, 0700), 0);
	path_join(p, base, "out");
	assert_int_equal(mkdir(p, 0700), 0);
	path_join(p, base, "exp");
	assert_int_equal(mkdir(p, 0700), 0);
}

/* Draws the inputs of mc: each holds each key of u with mc->density %
 * chance; in a typed input mc->tombs % of them are tombstones. */
static recs *gen_inputs(const merge_case *mc, const universe *u,
                        const unsigned *im, test_rng *r)
{
	recs *in = calloc(mc->inputs ? mc->inputs : 1, sizeof *in);
	assert_non_null(in);
	for (size_t i = 0; i < mc->inputs; i++) {
		if (i < 64 && (mc->empty_inputs >> i) & 1)
			continue;
		bool typed = MODES[im[i]].framing == KVS_FRAMING_TYPED;
		for (size_t k = 0; k < u->n; k++) {
			if (test_rng_below(r, 100) >= mc->density)
				continue;
			rec *x = recs_push(&in[i]);
			x->key = u->key[k];
			x->bits = u->bits[k];
			x->src = i;
			if (typed && test_rng_below(r, 100) < mc->tombs)
				x->kind = KVS_KIND_TOMBSTONE;
			else
				gen_value(x, mc->vals, r);
		}
	}
	return in;
}

static void free_inputs(recs *in, size_t n)
{
	for (size_t i = 0; i < n; i++)
		recs_free(&in[i], true);
	free(in);
}

/* Generates mc with input modes im[0 .. mc->inputs) and runs it. */
static void run_case(const char *base, const merge_case *mc, const unsigned *im,
                     uint32_t in_K, unsigned out_mode, uint32_t out_K,
                     bool drop, test_rng *r, oracle *po)
{
	universe u;
	uni_generate(&u, mc, r);
	recs *in = gen_inputs(mc, &u, im, r);
	merge_run mr;
	memset(&mr, 0, sizeof mr);
	mr.n = mc->inputs;
	mr.in = in;
	mr.im = im;
	mr.in_K = in_K;
	mr.out_mode = out_mode;
	mr.out_K = out_K;
	mr.drop = drop;
	mr.includes_oldest = drop || test_rng_below(r, 2);
	mr.progress = test_rng_below(r, 2);
	set_case("%s (%zu keys)", mc->name, u.n);
	check_merge(base, &mr, r, po);
	if (po) { /* the caller looks only at the counts */
		recs_free(&po->out, false);
	}
	free_inputs(in, mc->inputs);
	uni_free(&u);
}

/* ---- tests: the oracle itself on a worked example ------------------------ */

/*
 * in0: a=1 b=2 c=3 e=4;  in1: a=T c=T d=T;  in2: c=5 d=6 e=T.
 * Newest wins: a=T b=2 c=5 d=6 e=T (replaced a, c twice, d, e: 5).
 * Strong delete: b=2 c=5 d=6 (dropped a, e: 2).
 */
static void test_worked_example(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 1);
	char base[PATH_MAX];
	make_case_dirs(base, "worked_example");
	static const char keys[] = "abcde";
	/* per input, per key: 0 absent, 'T' tombstone, else the value */
	static const char table[3][5] = {
	    {'1', '2', '3', 0, '4'},
	    {'T', 0, 'T', 'T', 0},
	    {0, 0, '5', '6', 'T'},
	};
	uint8_t kb[5];
	for (int k = 0; k < 5; k++)
		kb[k] = (uint8_t)keys[k];
	static const char want_default[] = "aTb2c5d6eT";
	static const char want_strong[] = "b2c5d6";
	for (unsigned out = 0; out < NMODES; out++) {
		for (int drop = 0; drop < 2; drop++) {
			if (MODES[out].framing == KVS_FRAMING_RAW && !drop)
				continue;
			recs in[3];
			memset(in, 0, sizeof in);
			for (size_t i = 0; i < 3; i++)
				for (int k = 0; k < 5; k++) {
					char c = table[i][k];
					if (!c)
						continue;
					rec *x = recs_push(&in[i]);
					x->key = &kb[k];
					x->bits = 8;
					if (c == 'T') {
						x->kind = KVS_KIND_TOMBSTONE;
					} else {
						x->val = malloc(1);
						assert_non_null(x->val);
						x->val[0] = (uint8_t)c;
						x->vlen = 1;
					}
				}
			static const unsigned im[3] = {BT, IT, BT};
			merge_run mr;
			memset(&mr, 0, sizeof mr);
			mr.n = 3;
			mr.in = in;
			mr.im = im;
			mr.out_mode = out;
			mr.drop = drop;
			mr.includes_oldest = true;
			mr.progress = true;
			set_case("worked example");
			oracle o;
			check_merge(base, &mr, &r, &o);
			const char *want = drop ? want_strong : want_default;
			char got[16] = {0};
			for (size_t i = 0; i < o.out.n && i < 7; i++) {
				got[2 * i] = (char)o.out.r[i].key[0];
				got[2 * i + 1] =
				    o.out.r[i].kind == KVS_KIND_TOMBSTONE
				        ? 'T'
				        : (char)o.out.r[i].val[0];
			}
			if (strcmp(got, want) != 0)
				FAILF("the oracle made %s, expected %s", got,
				      want);
			EXPECT_U64(o.replaced, 5, "oracle replaced");
			EXPECT_U64(o.dropped, drop ? 2 : 0, "oracle dropped");
			recs_free(&o.out, false);
			for (size_t i = 0; i < 3; i++)
				recs_free(&in[i], true);
		}
	}
	g_mode = "";
}

/* ---- tests: modes -------------------------------------------------------- */

/* Merges three inputs made from key strings (up to three each, NULL ends
 * an input), all in one mode, into it, checked against the oracle, which must
 * give the counts wanted. A key ending in 'T' is a tombstone of the key
 * before it, any other gets a one-byte value, the input's number. */
static void small_merge(const char *base, test_rng *r,
                        const char *const keys[3][3], unsigned mode, bool drop,
                        uint64_t out, uint64_t replaced, uint64_t dropped)
{
	recs in[3];
	memset(in, 0, sizeof in);
	for (size_t i = 0; i < 3; i++)
		for (size_t k = 0; k < 3 && keys[i][k]; k++) {
			const char *key = keys[i][k];
			size_t len = strlen(key);
			rec *x = recs_push(&in[i]);
			x->key = (const uint8_t *)key;
			if (key[len - 1] == 'T') {
				x->bits = 8 * (len - 1);
				x->kind = KVS_KIND_TOMBSTONE;
				continue;
			}
			x->bits = 8 * len;
			x->val = malloc(1);
			assert_non_null(x->val);
			x->val[0] = (uint8_t)('0' + i);
			x->vlen = 1;
		}
	unsigned im[3] = {mode, mode, mode};
	merge_run mr;
	memset(&mr, 0, sizeof mr);
	mr.n = 3;
	mr.in = in;
	mr.im = im;
	mr.out_mode = mode;
	mr.drop = mr.includes_oldest = drop;
	oracle o;
	check_merge(base, &mr, r, &o);
	EXPECT_U64(o.out.n, out, "output records");
	EXPECT_U64(o.replaced, replaced, "oracle replaced");
	EXPECT_U64(o.dropped, dropped, "oracle dropped");
	recs_free(&o.out, false);
	for (size_t i = 0; i < 3; i++)
		recs_free(&in[i], true);
}

/*
 * In an N-input merge an older binding of the last output key P waits in
 * the tree while the newer input moves on; when its next key extends P,
 * the two share their LCP with P and one ends there. The older input's
 * previous key was longer, so bytes past P's end are left in its buffer.
 * Every mode, its three inputs of that mode (the N-input loops).
 */
static void test_prefix_binding(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 12);
	char base[PATH_MAX];
	make_case_dirs(base, "prefix_binding");
	static const char *const keys[3][3] = {
	    {"aazzzzzzzzzzzzzzzzzzzzzz", "ab"}, {"ab", "abc"}, {"b"}};
	set_case("a prefix of the newer input's next key");
	for (unsigned mode = 0; mode < NMODES; mode++)
		small_merge(base, &r, keys, mode, false, 4, 1, 0);
	g_mode = "";
}

/*
 * A strong delete of N inputs of one typed mode (the N-input loops): the
 * tree's LCPs are with the last round's key, and when that round dropped
 * a tombstone T, the next record W's LCP with the last output key P is
 * the smaller of LCP(W, T) and LCP(T, P): here "ba" after "b" and "cd"
 * after "c" share a byte with the dropped key and none with P; "cde"
 * after the written "cd" shares all of it. The older binding of "c" goes
 * with its tombstone.
 */
static void test_strong_delete_tree(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 13);
	char base[PATH_MAX];
	make_case_dirs(base, "strong_delete_tree");
	static const char *const keys[3][3] = {
	    {"ab", "c"}, {"bT", "cT"}, {"ba", "cd", "cde"}};
	set_case("dropped keys sharing more with the next than the last");
	small_merge(base, &r, keys, BT, true, 4, 1, 2);
	small_merge(base, &r, keys, IT, true, 4, 1, 2);
	g_mode = "";
}

static void test_modes(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 2);
	char base[PATH_MAX];
	make_case_dirs(base, "modes");
	/* input mode sets: each mode alone, then mixtures */
	static const unsigned sets[][4] = {
	    {BT, BT, BT, BT}, {BR, BR, BR, BR}, {IT, IT, IT, IT},
	    {IR, IR, IR, IR}, {BT, IT, BT, IT}, {IT, BT, IT, BT},
	    {BR, IR, BR, IR}, {IT, BR, BT, IR},
	};
	static const uint32_t Ks[] = {1, 15, 64, 0};
	unsigned runs = 0;
	for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
		bool any_typed = false;
		for (int i = 0; i < 4; i++)
			any_typed |=
			    MODES[sets[s][i]].framing == KVS_FRAMING_TYPED;
		for (unsigned out = 0; out < NMODES; out++) {
			bool raw_out = MODES[out].framing == KVS_FRAMING_RAW;
			merge_case mc = {"structured FV + empty key",
			                 KEYS_STRUCTURED,
			                 VALS_FV,
			                 0,
			                 400,
			                 true,
			                 s < 4 ? 3 : 4,
			                 55,
			                 20,
			                 0};
			uint32_t K = Ks[runs++ % 4];
			/* default: tombstones kept (none in raw output) */
			if (raw_out && any_typed) {
				mc.tombs = 0;
				mc.name = "structured FV + empty key, typed "
				          "inputs without tombstones";
			}
			oracle o;
			run_case(base, &mc, sets[s], 15, out, K, false, &r, &o);
			if (!raw_out && any_typed && o.tombstones == 0)
				FAILF("no tombstone in the output");
			if (o.replaced == 0)
				FAILF("no key in two inputs");
			/* strong delete */
			mc.tombs = 20;
			mc.name = "structured FV + empty key";
			run_case(base, &mc, sets[s], 64, out, Ks[runs++ % 4],
			         true, &r, &o);
			if (any_typed && o.dropped == 0)
				FAILF("strong delete: nothing dropped");
		}
	}
	g_mode = "";
}

/* ---- tests: key and value shapes, K -------------------------------------- */

static void test_shapes(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 3);
	char base[PATH_MAX];
	make_case_dirs(base, "shapes");
	static const merge_case cases[] = {
	    {"hash FF16", KEYS_HASH, VALS_FF16, 0, 600, false, 3, 50, 15, 0},
	    {"structured FV, prefix 64", KEYS_STRUCTURED, VALS_FV, 64, 400,
	     false, 3, 50, 15, 0},
	    {"hash FV, prefix 64 + empty key", KEYS_HASH, VALS_FV, 64, 300,
	     true, 2, 70, 20, 0},
	    {"structured FF16, prefix 4096", KEYS_STRUCTURED, VALS_FF16, 4096,
	     120, false, 3, 50, 15, 0},
	    {"hash FV, prefix 4096 + empty key", KEYS_HASH, VALS_FV, 4096, 80,
	     true, 2, 60, 20, 0},
	    {"hash, empty values + empty key", KEYS_HASH, VALS_EMPTY, 0, 500,
	     true, 3, 50, 20, 0},
	    {"byte lengths 1-24 + empty key", KEYS_BYTELENS, VALS_SMALL, 0, 500,
	     true, 3, 50, 20, 0},
	    {"byte lengths 1-24, prefix 64", KEYS_BYTELENS, VALS_FV, 64, 300,
	     false, 3, 50, 20, 0},
	    {"odd bit lengths 1-130 + empty key", KEYS_RANDBITS, VALS_SMALL, 0,
	     600, true, 3, 50, 20, 0},
	    {"odd bit lengths, prefix 64", KEYS_RANDBITS, VALS_FV, 64, 300,
	     false, 3, 50, 20, 0},
	    {"odd bit lengths, prefix 4096", KEYS_RANDBITS, VALS_FF16, 4096,
	     100, false, 2, 60, 20, 0},
	};
	static const uint32_t Ks[] = {1, 15, 64};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		const merge_case *mc = &cases[c];
		bool bits = mc->keys == KEYS_RANDBITS;
		for (unsigned out = 0; out < NMODES; out++) {
			if (bits && MODES[out].profile == KVS_PROFILE_BYTE)
				continue;
			bool raw_out = MODES[out].framing == KVS_FRAMING_RAW;
			/* inputs: typed, mixing profiles when keys allow */
			unsigned im[3] = {IT, bits ? IT : BT, IT};
			uint32_t K = Ks[(c + out) % 3];
			run_case(base, mc, im, 15, out, K, raw_out, &r, NULL);
		}
	}
	g_mode = "";
}

/*
 * Records above the two-input loops' in-line bounds (key and value within
 * BIT_REC = 896 bytes in the bit loop, FAST_REC = 4032 in the byte loop):
 * keys of 512..8191 random bytes, values of 0..512, in every mode, with
 * restart intervals of 4096 so that few records pass through an output
 * restart. The loops reserve room for a chunk of records by those bounds:
 * a record taken in line past them would overrun the output buffer
 * (AddressSanitizer, in the test command).
 */
static void test_long_records(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 13);
	char base[PATH_MAX];
	make_case_dirs(base, "long_records");
	for (unsigned m = 0; m < NMODES; m++) {
		bool raw = MODES[m].framing == KVS_FRAMING_RAW;
		merge_case mc = {.name = "keys of 512..8191 bytes, values of "
		                         "0..512",
		                 .keys = KEYS_LONG,
		                 .vals = VALS_FV,
		                 .n = 400,
		                 .inputs = 2,
		                 .density = 60,
		                 .tombs = raw ? 0 : 15};
		unsigned im[2] = {m, m};
		run_case(base, &mc, im, 4096, m, 4096, false, &r, NULL);
	}
	g_mode = "";
}

/* ---- tests: input counts, empty inputs, copies --------------------------- */

static void test_input_counts(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 4);
	char base[PATH_MAX];
	make_case_dirs(base, "input_counts");
	unsigned im[64];

	/* one input: a copy, in every mode pair and K */
	for (unsigned in = 0; in < NMODES; in++)
		for (unsigned out = 0; out < NMODES; out++) {
			bool in_raw = MODES[in].framing == KVS_FRAMING_RAW;
			bool out_raw = MODES[out].framing == KVS_FRAMING_RAW;
			merge_case mc = {"one input",
			                 KEYS_HASH,
			                 VALS_FV,
			                 0,
			                 300,
			                 true,
			                 1,
			                 100,
			                 out_raw && !in_raw ? 0 : 10,
			                 0};
			im[0] = in;
			uint32_t in_K = (in + out) % 2 ? 15 : 64;
			static const uint32_t Ks[] = {1, 15, 64, 0};
			oracle o;
			run_case(base, &mc, im, in_K, out, Ks[(in + out) % 4],
			         false, &r, &o);
			EXPECT_U64(o.replaced, 0, "one input: replaced");
		}
	/* one input, bit keys, strong delete into raw */
	{
		merge_case mc = {"one input, odd bit keys, strong delete",
		                 KEYS_RANDBITS,
		                 VALS_SMALL,
		                 0,
		                 400,
		                 true,
		                 1,
		                 100,
		                 30,
		                 0};
		im[0] = IT;
		run_case(base, &mc, im, 15, IR, 1, true, &r, NULL);
	}
	/* one empty input */
	for (unsigned out = 0; out < NMODES; out++) {
		merge_case mc = {"one empty input",
		                 KEYS_NONE,
		                 VALS_FV,
		                 0,
		                 0,
		                 false,
		                 1,
		                 100,
		                 0,
		                 0};
		im[0] = (out + 1) % NMODES;
		run_case(base, &mc, im, 15, out, 0, false, &r, NULL);
	}
	/* 2, 3 and 64 inputs, some or all of them empty */
	static const struct {
		size_t n;
		unsigned density;
		uint64_t empty;
		size_t keys;
	} shapes[] = {
	    {2, 60, 0, 800},   {2, 60, 1, 300},
	    {2, 60, 2, 300},   {3, 50, 0, 800},
	    {3, 50, 5, 300},   {3, 50, 7, 300},
	    {64, 5, 0, 2000},  {64, 5, 0xF0F0F0F0F0F0F0F0ull, 2000},
	    {64, 60, 0, 200},  {7, 40, 0x22, 600},
	    {33, 10, 0, 1500},
	};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		for (unsigned out = 0; out < NMODES; out++) {
			if (shapes[s].n == 64 && out % 2 == 1)
				continue; /* raw output: enough below */
			merge_case mc = {"",
			                 KEYS_STRUCTURED,
			                 VALS_SMALL,
			                 0,
			                 shapes[s].keys,
			                 true,
			                 shapes[s].n,
			                 shapes[s].density,
			                 25,
			                 shapes[s].empty};
			char name[96];
			snprintf(name, sizeof name,
			         "%zu inputs, %u%% each, empty mask 0x%llx",
			         shapes[s].n, shapes[s].density,
			         ULL(shapes[s].empty));
			mc.name = name;
			for (size_t i = 0; i < mc.inputs; i++)
				im[i] = (unsigned)((i + s) % NMODES);
			bool raw_out = MODES[out].framing == KVS_FRAMING_RAW;
			run_case(base, &mc, im, 15, out, (out % 2) ? 64 : 1,
			         raw_out, &r, NULL);
		}
	}
	g_mode = "";
}

/* ---- tests: tombstones --------------------------------------------------- */

static void test_tombstones(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 5);
	char base[PATH_MAX];
	make_case_dirs(base, "tombstones");
	unsigned im[8] = {BT, IT, BT, IT, BT, IT, BT, IT};
	for (unsigned tombs = 30; tombs <= 90; tombs += 30)
		for (unsigned out = 0; out < NMODES; out++)
			for (int drop = 0; drop < 2; drop++) {
				bool raw_out =
				    MODES[out].framing == KVS_FRAMING_RAW;
				if (raw_out && !drop)
					continue;
				merge_case mc = {
				    "tombstones", KEYS_HASH, VALS_SMALL, 0,
				    500,          true,      5,          60,
				    tombs,        0};
				oracle o;
				run_case(base, &mc, im, 15, out,
				         (tombs / 30) % 2 ? 15 : 1, drop, &r,
				         &o);
				if (o.tomb_over_value == 0 ||
				    o.value_over_tomb == 0 ||
				    o.tomb_over_tomb == 0)
					FAILF(
					    "the inputs miss a case: tomb "
					    "over value %llu, value over tomb "
					    "%llu, tomb over tomb %llu",
					    ULL(o.tomb_over_value),
					    ULL(o.value_over_tomb),
					    ULL(o.tomb_over_tomb));
			}

	/* Odd-length bit keys reach a byte-profile output only as
	 * tombstones; a strong delete removes them (and what they hide). */
	set_case("odd bit keys deleted by the newest input");
	uint8_t k8[4][2] = {{0x10, 0}, {0x20, 0}, {0x30, 0}, {0x40, 0}};
	uint8_t odd[2] = {0x20, 0x80}; /* 9 bits: 0x20 then 1 */
	for (unsigned out = 0; out < 2; out++) {
		recs in[2];
		memset(in, 0, sizeof in);
		for (int k = 0; k < 4; k++) {
			rec *x = recs_push(&in[0]);
			x->key = k8[k];
			x->bits = 8;
			x->vlen = 0;
			if (k == 1) {
				x = recs_push(&in[0]);
				x->key = odd;
				x->bits = 9;
				x->val = malloc(3);
				assert_non_null(x->val);
				memcpy(x->val, "odd", 3);
				x->vlen = 3;
			}
		}
		rec *x = recs_push(&in[1]);
		x->key = odd;
		x->bits = 9;
		x->kind = KVS_KIND_TOMBSTONE;
		x = recs_push(&in[1]);
		x->key = k8[3];
		x->bits = 8;
		x->kind = KVS_KIND_TOMBSTONE;
		static const unsigned bim[2] = {IT, IT};
		merge_run mr;
		memset(&mr, 0, sizeof mr);
		mr.n = 2;
		mr.in = in;
		mr.im = bim;
		mr.out_mode = out; /* byte/typed, byte/raw */
		mr.drop = true;
		mr.includes_oldest = true;
		mr.progress = true;
		oracle o;
		check_merge(base, &mr, &r, &o);
		EXPECT_U64(o.out.n, 3, "records left");
		EXPECT_U64(o.dropped, 2, "dropped");
		recs_free(&o.out, false);
		recs_free(&in[0], true);
		recs_free(&in[1], true);
	}
	g_mode = "";
}

/*
 * A strong delete where one input ends early: the other's remaining
 * records, tombstones among them, go through the two-input loops' last
 * stretch (one input left), with keys whose LCPs vary (random 8-byte
 * keys), in both typed modes, the short input older or newer.
 */
static int cmp8(const void *a, const void *b)
{
	return memcmp(a, b, 8);
}

static void test_strong_delete_tail(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 17);
	char base[PATH_MAX];
	make_case_dirs(base, "strong_delete_tail");
	enum { N = 600, SHORT = 20 };
	uint8_t(*keys)[8] = malloc(N * sizeof *keys);
	assert_non_null(keys);
	for (unsigned m = BT; m <= IT; m += IT - BT) {
		for (int short_newer = 0; short_newer < 2; short_newer++) {
			for (size_t i = 0; i < N; i++)
				put_be64(keys[i], test_rng_next(&r));
			qsort(keys, N, 8, cmp8);
			recs in[2];
			memset(in, 0, sizeof in);
			for (size_t i = 0; i < N; i++) {
				if (i && !memcmp(keys[i], keys[i - 1], 8))
					continue;
				/* the first SHORT keys to one input, the rest
				 * to the other, a third of them tombstones */
				size_t which = (i < SHORT) == short_newer;
				rec *x = recs_push(&in[which]);
				x->key = keys[i];
				x->bits = 64;
				if (i >= SHORT && test_rng_below(&r, 3) == 0) {
					x->kind = KVS_KIND_TOMBSTONE;
				} else {
					x->val = malloc(4);
					assert_non_null(x->val);
					memcpy(x->val, keys[i], 4);
					x->vlen = 1 + test_rng_below(&r, 4);
				}
			}
			unsigned im[2] = {m, m};
			merge_run mr;
			memset(&mr, 0, sizeof mr);
			mr.n = 2;
			mr.in = in;
			mr.im = im;
			mr.out_mode = m;
			mr.drop = true;
			mr.includes_oldest = true;
			set_case("%s, the short input %s", MODES[m].name,
			         short_newer ? "newer" : "older");
			oracle o;
			check_merge(base, &mr, &r, &o);
			CHECK(o.dropped > 100, "%llu dropped", ULL(o.dropped));
			recs_free(&o.out, false);
			recs_free(&in[0], true);
			recs_free(&in[1], true);
		}
	}
	free(keys);
	g_mode = "";
}

/* ---- tests: output codes ------------------------------------------------- */

static void test_output_codes(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 6);
	char base[PATH_MAX];
	make_case_dirs(base, "output_codes");
	static const char *specs[][3] = {
	    {"eg0", "deg2", "g7"},
	    {"fixed16", "fixed9", "deg0"},
	    {"g3", "eg5", "fixed10"},
	};
	for (size_t s = 0; s < 3; s++)
		for (unsigned out = IT; out <= IR; out++) {
			universe u;
			merge_case mc = {"hash FV", KEYS_HASH, VALS_FV, 0,  300,
			                 true,      3,         50,      20, 0};
			uni_generate(&u, &mc, &r);
			unsigned im[3] = {BT, IT, BT};
			recs *in = gen_inputs(&mc, &u, im, &r);
			merge_run mr;
			memset(&mr, 0, sizeof mr);
			mr.n = 3;
			mr.in = in;
			mr.im = im;
			mr.in_K = 15;
			mr.out_mode = out;
			mr.out_K = 15;
			mr.drop = out == IR;
			mr.includes_oldest = true;
			mr.custom_codes = true;
			for (int f = 0; f < KVS_FIELD_COUNT; f++)
				assert_int_equal(kvs_code_spec_parse(
				                     specs[s][f], &mr.codes[f]),
				                 KVS_OK);
			set_case("hash FV, codes %s/%s/%s", specs[s][0],
			         specs[s][1], specs[s][2]);
			check_merge(base, &mr, &r, NULL);
			free_inputs(in, 3);
			uni_free(&u);
		}
	g_mode = "";
}

/* ---- tests: the same segment thrice, longest keys, a random sweep -------- */

static void test_same_segment(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 11);
	char base[PATH_MAX], in_dir[PATH_MAX], out_dir[PATH_MAX],
	    exp_dir[PATH_MAX];
	make_case_dirs(base, "same_segment");
	path_join(in_dir, base, "in");
	path_join(out_dir, base, "out");
	path_join(exp_dir, base, "exp");
	for (unsigned m = 0; m < NMODES; m++) {
		merge_case mc = {"",   KEYS_HASH, VALS_FV, 0,  500,
		                 true, 1,         100,     20, 0};
		universe u;
		uni_generate(&u, &mc, &r);
		unsigned im[1] = {m};
		recs *in = gen_inputs(&mc, &u, im, &r);
		merge_run mr;
		memset(&mr, 0, sizeof mr);
		mr.n = 1;
		mr.in = in;
		mr.im = im;
		mr.in_K = 15;
		kvs_segment **segs = write_inputs(in_dir, &mr);
		kvs_segment *three[3] = {segs[0], segs[0], segs[0]};
		recs copies[3] = {in[0], in[0], in[0]};
		unsigned im3[3] = {m, m, m};
		mr.n = 3;
		mr.im = im3;
		for (int drop = 0; drop < 2; drop++) {
			mr.out_mode = (m + 2) % NMODES;
			mr.drop = drop ||
			          MODES[mr.out_mode].framing == KVS_FRAMING_RAW;
			mr.includes_oldest = mr.drop;
			set_mode_of(&mr);
			set_case("one segment given three times");
			oracle o;
			oracle_merge(copies, 3, mr.drop, &o);
			kvs_merge_options mo = merge_opts(&mr, 77);
			char want[PATH_MAX], got[PATH_MAX];
			path_join(want, exp_dir, "want.kvseg");
			path_join(got, out_dir, "merged.kvseg");
			write_recs(want, &o.out, &mo.output);
			kvs_merge_stats stats;
			kvs_error err;
			memset(&err, 0, sizeof err);
			EXPECT_ST(kvs_merge(three, 3, got, &mo, &stats, &err),
			          KVS_OK, "kvs_merge: %s", err.message);
			expect_same_file(got, want, "merged output");
			EXPECT_U64(stats.input_records, 3 * in[0].n,
			           "stats.input_records");
			EXPECT_U64(stats.replaced, 2 * in[0].n,
			           "stats.replaced");
			EXPECT_U64(stats.output_records, o.out.n,
			           "stats.output_records");
			EXPECT_U64(stats.dropped, o.dropped, "stats.dropped");
			recs_free(&o.out, false);
			assert_int_equal(unlink(got), 0);
			assert_int_equal(unlink(want), 0);
		}
		close_inputs(in_dir, segs, 1);
		free_inputs(in, 1);
		uni_free(&u);
	}
	g_mode = "";
}

/* Keys of KVS_MAX_KEY_BITS (and, in the bit profile, a few bits less)
 * that differ only at their ends, held by several inputs. */
static void test_longest_keys(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 12);
	char base[PATH_MAX];
	make_case_dirs(base, "longest_keys");
	const size_t L = (size_t)(KVS_MAX_KEY_BITS / 8);
	uint8_t *stem = malloc(L);
	assert_non_null(stem);
	rand_bytes(&r, stem, L);
	enum { NK = 6 };
	uint8_t *keys[NK];
	uint64_t bits[NK];
	for (int k = 0; k < NK; k++) {
		keys[k] = key_dup(stem, KVS_MAX_KEY_BITS);
		keys[k][L - 1] = (uint8_t)(k * 16);
		bits[k] = KVS_MAX_KEY_BITS;
	}
	bits[1] = KVS_MAX_KEY_BITS - 8; /* a proper prefix of key 0 */
	free(stem);
	for (unsigned out = 0; out < NMODES; out++) {
		bool bitp = MODES[out].profile == KVS_PROFILE_BIT;
		bool raw_out = MODES[out].framing == KVS_FRAMING_RAW;
		/* odd lengths in the bit profile: key 3 loses 3 bits */
		bits[3] = bitp ? KVS_MAX_KEY_BITS - 3 : KVS_MAX_KEY_BITS;
		keys[3][L - 1] = 0x30;
		unsigned im[3];
		recs in[3];
		memset(in, 0, sizeof in);
		/* sorted order: key 1 (prefix), 0, 2, 3, 4, 5 */
		static const int order[NK] = {1, 0, 2, 3, 4, 5};
		for (size_t i = 0; i < 3; i++) {
			if (bitp)
				im[i] = i == 1 ? IR : IT;
			else
				im[i] = i == 1 ? BR : BT;
			bool typed = MODES[im[i]].framing == KVS_FRAMING_TYPED;
			for (int j = 0; j < NK; j++) {
				int k = order[j];
				if ((k + (int)i) % 3 == 0)
					continue;
				rec *x = recs_push(&in[i]);
				x->key = keys[k];
				x->bits = bits[k];
				if (typed && (k + (int)i) % 4 == 0)
					x->kind = KVS_KIND_TOMBSTONE;
				else
					gen_value(x, VALS_SMALL, &r);
			}
		}
		merge_run mr;
		memset(&mr, 0, sizeof mr);
		mr.n = 3;
		mr.in = in;
		mr.im = im;
		mr.in_K = 2;
		mr.out_mode = out;
		mr.out_K = out % 2 ? 1 : 4;
		mr.drop = raw_out;
		mr.includes_oldest = raw_out;
		set_case("keys of %llu bits", ULL(KVS_MAX_KEY_BITS));
		check_merge(base, &mr, &r, NULL);
		/* and two of them (the two-input path) */
		mr.n = 2;
		check_merge(base, &mr, &r, NULL);
		for (size_t i = 0; i < 3; i++)
			recs_free(&in[i], true);
	}
	for (int k = 0; k < NK; k++)
		free(keys[k]);
	g_mode = "";
}

/* Random merges: input count, modes, shapes, K, densities, tombstones,
 * empty inputs and strong deletes all drawn from the seed. */
static void test_random(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 13);
	char base[PATH_MAX];
	make_case_dirs(base, "random");
	static const size_t counts[] = {1, 2, 2,  3,  3,  4,  5, 6,
	                                8, 9, 13, 16, 17, 31, 64};
	static const uint32_t Ks[] = {1, 2, 3, 15, 16, 64, 0, 1000};
	static const key_shape byte_shapes[] = {KEYS_STRUCTURED, KEYS_HASH,
	                                        KEYS_BYTELENS};
	static const size_t prefixes[] = {0, 0, 1, 7, 64, 4096};
	unsigned im[64];
	for (unsigned t = 0; t < 300; t++) {
		merge_case mc;
		memset(&mc, 0, sizeof mc);
		mc.name = "random";
		mc.inputs = counts[test_rng_below(&r, 15)];
		bool all_bit = test_rng_below(&r, 3) == 0;
		for (size_t i = 0; i < mc.inputs; i++)
			im[i] = (unsigned)test_rng_below(&r, NMODES) |
			        (all_bit ? 2u : 0u);
		unsigned out = (unsigned)test_rng_below(&r, NMODES);
		if (all_bit)
			out |= 2u;
		mc.keys = all_bit && test_rng_below(&r, 2)
		              ? KEYS_RANDBITS
		              : byte_shapes[test_rng_below(&r, 3)];
		mc.vals = (val_shape)test_rng_below(&r, 4);
		mc.prefix = prefixes[test_rng_below(&r, 6)];
		mc.empty_key = test_rng_below(&r, 3) == 0;
		mc.density = 1 + (unsigned)test_rng_below(&r, 100);
		mc.tombs = (unsigned)test_rng_below(&r, 4) * 20;
		if (test_rng_below(&r, 4) == 0)
			mc.empty_inputs = test_rng_next(&r);
		size_t budget = mc.prefix >= 4096 ? 600 : 4000;
		mc.n = 1 + (size_t)test_rng_below(
		               &r, budget * 100 / (mc.inputs * mc.density) + 1);
		if (mc.n > 3000)
			mc.n = 3000;
		bool drop = test_rng_below(&r, 3) == 0;
		if (MODES[out].framing == KVS_FRAMING_RAW && !drop)
			mc.tombs = 0;
		set_case("random %u", t);
		run_case(base, &mc, im, Ks[test_rng_below(&r, 8)], out,
		         Ks[test_rng_below(&r, 8)], drop, &r, NULL);
	}
	g_mode = "";
}

/*
 * Random merges of two inputs of one mode into the same mode, half of them
 * strong deletes: the case of the dedicated loops (merge.c's byte loop
 * for the byte modes, its bit loop for the bit modes with the default
 * codes), over restarts of both sides, every shape of key and value, long
 * keys (out of line) and empty inputs. bits: the bit modes, whose keys may
 * also have any number of bits. A strong delete of raw inputs (no
 * tombstones) is the plain merge: the bit loop once ran its typed
 * instance on them and called them corrupt.
 */
static void two_input_cases(const char *what, bool bits, uint64_t stream)
{
	test_rng r = test_rng_for(g_seed, stream);
	char base[PATH_MAX];
	make_case_dirs(base, bits ? "two_bit" : "two_byte");
	static const uint32_t Ks[] = {1, 2, 3, 15, 16, 64, 0, 1000};
	static const key_shape shapes[] = {KEYS_STRUCTURED, KEYS_HASH,
	                                   KEYS_BYTELENS, KEYS_RANDBITS};
	static const size_t prefixes[] = {0, 0, 1, 7, 8, 64, 4096};
	static const unsigned densities[] = {100, 90, 60, 50, 20, 3};
	for (unsigned t = 0; t < 200; t++) {
		merge_case mc;
		memset(&mc, 0, sizeof mc);
		mc.name = what;
		mc.inputs = 2;
		unsigned m = (bits ? 2 : 0) + (unsigned)test_rng_below(&r, 2);
		unsigned im[2] = {m, m};
		mc.keys = shapes[test_rng_below(&r, bits ? 4 : 3)];
		mc.vals = (val_shape)test_rng_below(&r, 5);
		mc.prefix = prefixes[test_rng_below(&r, 7)];
		mc.empty_key = test_rng_below(&r, 4) == 0;
		mc.density = densities[test_rng_below(&r, 6)];
		mc.tombs = MODES[m].framing == KVS_FRAMING_RAW
		               ? 0
		               : (unsigned)test_rng_below(&r, 4) * 20;
		if (test_rng_below(&r, 8) == 0)
			mc.empty_inputs = 1 + test_rng_below(&r, 2);
		size_t budget = mc.prefix >= 4096 || mc.vals == VALS_EDGES ? 300
		                                                           : 3000;
		mc.n = 1 + (size_t)test_rng_below(&r, budget);
		uint32_t k_in = Ks[test_rng_below(&r, 8)];
		uint32_t k_out = Ks[test_rng_below(&r, 8)];
		/* a strong delete (the loops drop tombstones in line), also
		 * where there are none to drop */
		bool drop = test_rng_below(&r, 2) == 0;
		set_case("%s %u%s", what, t, drop ? ", strong delete" : "");
		run_case(base, &mc, im, k_in, m, k_out, drop, &r, NULL);
	}
	g_mode = "";
}

static void test_two_byte_inputs(void **state)
{
	(void)state;
	two_input_cases("two byte inputs", false, 15);
}

static void test_two_bit_inputs(void **state)
{
	(void)state;
	two_input_cases("two bit inputs", true, 16);
}

/* ---- tests: errors ------------------------------------------------------- */

/* A merge that must fail with want (or any error when want is KVS_OK)
 * and leave out_dir empty. */
static void expect_merge_fails(kvs_segment *const *segs, size_t n,
                               const char *out_dir, const kvs_merge_options *mo,
                               kvs_status want, const char *what)
{
	char p[PATH_MAX];
	path_join(p, out_dir, "merged.kvseg");
	kvs_error err;
	memset(&err, 0, sizeof err);
	kvs_merge_stats stats;
	kvs_status st = kvs_merge(segs, n, p, mo, &stats, &err);
	EXPECT_ERR(st, err, "%s: the merge succeeded", what);
	if (want != KVS_OK)
		EXPECT_ST(st, want, "%s: \"%s\"", what, err.message);
	expect_dir_empty(out_dir, what);
}

/* The same for an error that merge.h says is found before any work: the
 * progress callback is never called. */
static void expect_refused_upfront(kvs_segment *const *segs, size_t n,
                                   const char *out_dir,
                                   const kvs_merge_options *mo,
                                   const char *what)
{
	kvs_merge_options o = *mo;
	progress_log pl;
	memset(&pl, 0, sizeof pl);
	o.progress = progress_cb;
	o.progress_ctx = &pl;
	expect_merge_fails(segs, n, out_dir, &o, KVS_E_INVAL, what);
	if (pl.calls != 0)
		FAILF("%s: refused only after %llu progress calls (last done "
		      "%llu of %llu), not before any work",
		      what, ULL(pl.calls), ULL(pl.last_done), ULL(pl.total));
}

static void test_errors(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 7);
	char base[PATH_MAX], in_dir[PATH_MAX], out_dir[PATH_MAX];
	make_case_dirs(base, "errors");
	path_join(in_dir, base, "in");
	path_join(out_dir, base, "out");
	g_mode = "";

	/* in0: typed with tombstones; in1: typed without; in2: raw */
	merge_case mc = {
	    "", KEYS_STRUCTURED, VALS_SMALL, 0, 3000, false, 3, 60, 0, 0};
	universe u;
	uni_generate(&u, &mc, &r);
	static const unsigned im[3] = {BT, IT, BR};
	recs *in = gen_inputs(&mc, &u, im, &r);
	for (size_t j = 0; j < in[0].n; j += 7) {
		in[0].r[j].kind = KVS_KIND_TOMBSTONE;
		free(in[0].r[j].val);
		in[0].r[j].val = NULL;
		in[0].r[j].vlen = 0;
	}
	merge_run mr;
	memset(&mr, 0, sizeof mr);
	mr.n = 3;
	mr.in = in;
	mr.im = im;
	mr.in_K = 15;
	kvs_segment **segs = write_inputs(in_dir, &mr);

	for (unsigned out = BR; out <= IR; out += 2) {
		set_case("raw output while tombstones remain");
		mr.out_mode = out;
		kvs_merge_options mo = merge_opts(&mr, 9);
		expect_refused_upfront(segs, 3, out_dir, &mo, g_case);
		mo.includes_oldest = true;
		expect_refused_upfront(
		    segs, 3, out_dir, &mo,
		    "raw output, includes_oldest but no drop");
		/* the newest input alone may hold none: still refused when
		 * any input has a tombstone */
		mo.includes_oldest = false;
		expect_refused_upfront(
		    segs + 0, 1, out_dir, &mo,
		    "raw output of the tombstoned input alone");
	}
	for (unsigned out = 0; out < NMODES; out++) {
		set_case("strong delete without includes_oldest, into %s",
		         MODES[out].name);
		mr.out_mode = out;
		kvs_merge_options mo = merge_opts(&mr, 9);
		mo.drop_tombstones = true;
		expect_refused_upfront(segs, 3, out_dir, &mo, g_case);
		expect_refused_upfront(segs + 1, 2, out_dir, &mo,
		                       "strong delete without includes_oldest, "
		                       "inputs without tombstones");
	}
	{
		mr.out_mode = BT;
		kvs_merge_options mo = merge_opts(&mr, 9);
		set_case("n == 0");
		expect_refused_upfront(segs, 0, out_dir, &mo, g_case);
		set_case("n == 0, inputs NULL");
		expect_refused_upfront(NULL, 0, out_dir, &mo, g_case);
		set_case("input 1 NULL");
		{
			kvs_segment *holed[3] = {segs[0], NULL, segs[2]};
			expect_refused_upfront(holed, 3, out_dir, &mo, g_case);
		}
		set_case("no options: the defaults");
		{
			/* in1 and in2 have no tombstone: a typed byte-profile
			 * output with the writer's defaults, newest wins */
			oracle o;
			oracle_merge(in + 1, 2, false, &o);
			char got[PATH_MAX], want[PATH_MAX];
			path_join(got, out_dir, "defaults.kvseg");
			path_join(want, base, "defaults-want.kvseg");
			kvs_writer_options wo;
			memset(&wo, 0, sizeof wo);
			write_recs(want, &o.out, &wo);
			kvs_error err = {0};
			kvs_status st =
			    kvs_merge(segs + 1, 2, got, NULL, NULL, &err);
			EXPECT_ST(st, KVS_OK, "%s: %s", g_case, err.message);
			expect_same_file(got, want, g_case);
			recs_free(&o.out, false);
			assert_int_equal(unlink(got), 0);
			assert_int_equal(unlink(want), 0);
		}
		set_case("no output path");
		{
			kvs_error err = {0};
			kvs_status st = kvs_merge(segs, 3, NULL, &mo, NULL, &err);
			EXPECT_ST(st, KVS_E_INVAL, "%s: %s", g_case,
			          err.message);
			CHECK(err.message[0] != '\0', "%s: a message", g_case);
		}
		set_case("unknown output profile");
		mo.output.profile = (kvs_profile)2;
		expect_refused_upfront(segs, 3, out_dir, &mo, g_case);
		mo = merge_opts(&mr, 9);
		set_case("unknown output framing");
		mo.output.framing = (kvs_framing)7;
		expect_refused_upfront(segs, 3, out_dir, &mo, g_case);
		mo = merge_opts(&mr, 9);
		set_case("output K above the maximum");
		mo.output.restart_interval = KVS_MAX_RESTART_INTERVAL + 1;
		expect_merge_fails(segs, 3, out_dir, &mo, KVS_OK, g_case);
		mo = merge_opts(&mr, 9);
		set_case("invalid output code");
		mo.output.profile = KVS_PROFILE_BIT;
		mo.output.custom_codes = true;
		mo.output.codes[0].kind = 0;
		mo.output.codes[1].kind = KVS_CODE_EG;
		mo.output.codes[2].kind = KVS_CODE_EG;
		expect_refused_upfront(segs, 3, out_dir, &mo, g_case);
		mo = merge_opts(&mr, 9);
		set_case("output directory missing");
		char p[PATH_MAX];
		path_join(p, out_dir, "no/such/dir/merged.kvseg");
		kvs_error err;
		memset(&err, 0, sizeof err);
		kvs_status st = kvs_merge(segs, 3, p, &mo, NULL, &err);
		EXPECT_ERR(st, err, "%s: the merge succeeded", g_case);
		EXPECT_ST(st, KVS_E_IO, "%s: \"%s\"", g_case, err.message);
		expect_dir_empty(out_dir, g_case);
	}
	close_inputs(in_dir, segs, 3);
	free_inputs(in, 3);
	uni_free(&u);

	/* Bit keys that are not whole bytes into a byte-profile output: the
	 * writer refuses the key during the merge. The odd key comes first,
	 * in the middle (after ~500 KB of output) or last. */
	for (int where = 0; where < 3; where++) {
		merge_case bc = {
		    "", KEYS_STRUCTURED, VALS_FV, 0, 4000, false, 2, 100, 0, 0};
		uni_generate(&u, &bc, &r);
		static const unsigned bim[2] = {IT, IR};
		recs *bin = gen_inputs(&bc, &u, bim, &r);
		/* a 12-bit key sorting first or last, or the middle key
		 * with 4 more bits */
		uint8_t odd[17] = {0};
		uint64_t odd_bits = 12;
		if (where == 2) {
			odd[0] = 0xFF;
			odd[1] = 0xF0;
		} else if (where == 1) {
			memcpy(odd, u.key[u.n / 2], 16);
			odd[16] = 0xA0;
			odd_bits = 132;
		}
		recs moved = {0};
		/* insert into input 1 (raw) in key order */
		for (size_t j = 0, done = 0; j <= bin[1].n; j++) {
			if (!done &&
			    (j == bin[1].n ||
			     ref_key_cmp(odd, odd_bits, bin[1].r[j].key,
			                 bin[1].r[j].bits) < 0)) {
				rec *x = recs_push(&moved);
				x->key = odd;
				x->bits = odd_bits;
				x->src = 1;
				done = 1;
			}
			if (j < bin[1].n)
				*recs_push(&moved) = bin[1].r[j];
		}
		recs_free(&bin[1], false);
		bin[1] = moved;
		static const char *wn[] = {"first", "in the middle", "last"};
		set_case("a %llu-bit key %s into a byte-profile output",
		         ULL(odd_bits), wn[where]);
		memset(&mr, 0, sizeof mr);
		mr.n = 2;
		mr.in = bin;
		mr.im = bim;
		mr.in_K = 15;
		segs = write_inputs(in_dir, &mr);
		for (unsigned out = BT; out <= BR; out++) {
			mr.out_mode = out;
			kvs_merge_options mo = merge_opts(&mr, 9);
			progress_log pl;
			memset(&pl, 0, sizeof pl);
			pl.want_total = bin[0].n + bin[1].n;
			mo.progress = progress_cb;
			mo.progress_ctx = &pl;
			expect_merge_fails(segs, 2, out_dir, &mo, KVS_E_INVAL,
			                   g_case);
			expect_progress_ok(&pl);
			/* the same keys into a bit-profile output are fine */
		}
		for (size_t i = 0; i < 2; i++) {
			kvs_error err;
			EXPECT_ST(kvs_segment_verify(segs[i], &err), KVS_OK,
			          "input %zu after the failed merge: %s", i,
			          err.message);
		}
		close_inputs(in_dir, segs, 2);
		free_inputs(bin, 2);
		uni_free(&u);
	}
}

/* ---- tests: cancel ------------------------------------------------------- */

/* A merge of segs with progress, then the same merge canceled at the
 * first, a middle and the last progress call: KVS_E_CANCELED, no further
 * call, nothing left; then the path is free for a merge again. */
static void cancel_runs(kvs_segment *const *segs, size_t n, const char *out_dir,
                        kvs_merge_options mo, uint64_t total)
{
	progress_log pl;
	memset(&pl, 0, sizeof pl);
	pl.want_total = total;
	mo.progress = progress_cb;
	mo.progress_ctx = &pl;
	char p[PATH_MAX];
	path_join(p, out_dir, "merged.kvseg");
	kvs_error err;
	memset(&err, 0, sizeof err);
	set_case("uncanceled merge of %llu records", ULL(total));
	EXPECT_ST(kvs_merge(segs, n, p, &mo, NULL, &err), KVS_OK, "%s: %s",
	          g_case, err.message);
	expect_progress_ok(&pl);
	uint64_t calls = pl.calls;
	if (pl.first_mid == 0)
		FAILF("progress was called %llu times over %llu records, never "
		      "in the middle of the merge",
		      ULL(calls), ULL(total));
	assert_int_equal(unlink(p), 0);

	const uint64_t at[] = {1, pl.first_mid, calls};
	for (int k = 0; k < 3; k++) {
		set_case("cancel at progress call %llu of %llu", ULL(at[k]),
		         ULL(calls));
		memset(&pl, 0, sizeof pl);
		pl.want_total = total;
		pl.cancel_at = at[k];
		expect_merge_fails(segs, n, out_dir, &mo, KVS_E_CANCELED,
		                   g_case);
		expect_progress_ok(&pl);
		EXPECT_U64(pl.calls, at[k], "progress calls after the cancel");
	}
	memset(&pl, 0, sizeof pl);
	pl.want_total = total;
	set_case("merge after the cancels");
	EXPECT_ST(kvs_merge(segs, n, p, &mo, NULL, &err), KVS_OK, "%s: %s",
	          g_case, err.message);
	kvs_segment_unref(open_verified(p));
	assert_int_equal(unlink(p), 0);
}

static void test_cancel(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 8);
	char base[PATH_MAX], in_dir[PATH_MAX], out_dir[PATH_MAX];
	make_case_dirs(base, "cancel");
	path_join(in_dir, base, "in");
	path_join(out_dir, base, "out");
	merge_case mc = {
	    "", KEYS_STRUCTURED, VALS_SMALL, 0, 70000, true, 5, 70, 10, 0};
	universe u;
	uni_generate(&u, &mc, &r);
	static const unsigned im[5] = {IT, BT, IT, BT, BT};
	recs *in = gen_inputs(&mc, &u, im, &r);
	merge_run mr;
	memset(&mr, 0, sizeof mr);
	mr.n = 5;
	mr.in = in;
	mr.im = im;
	mr.in_K = 15;
	kvs_segment **segs = write_inputs(in_dir, &mr);

	/* two inputs of two modes and three (the general paths) */
	for (unsigned out = BT; out <= IT; out += 2)
		for (size_t nin = 2; nin <= 3; nin++) {
			kvs_segment **ss = segs + (4 - nin);
			mr.n = nin;
			mr.in = in + (4 - nin);
			mr.im = im + (4 - nin);
			mr.out_mode = out;
			set_mode_of(&mr);
			uint64_t total =
			    in[3].n + in[2].n + (nin == 3 ? in[1].n : 0);
			cancel_runs(ss, nin, out_dir, merge_opts(&mr, 5),
			            total);
		}
	/* two inputs of one mode into it: the byte loop and the bit loop,
	 * which report progress at their output restarts */
	for (size_t first = 0; first < 2; first++) {
		kvs_segment *ss[2] = {segs[first], segs[first + 2]};
		recs pin[2] = {in[first], in[first + 2]};
		unsigned pim[2] = {im[first], im[first + 2]};
		mr.n = 2;
		mr.in = pin;
		mr.im = pim;
		mr.out_mode = im[first];
		set_mode_of(&mr);
		cancel_runs(ss, 2, out_dir, merge_opts(&mr, 5),
		            in[first].n + in[first + 2].n);
	}
	/* three inputs of one bit mode into it: the N-input bit loop, which
	 * reports progress at its output restarts too */
	static const unsigned bim[3] = {BT, BT, BT};
	kvs_segment *bits3[3] = {segs[1], segs[3], segs[4]};
	recs bin3[3] = {in[1], in[3], in[4]};
	mr.n = 3;
	mr.in = bin3;
	mr.im = bim;
	mr.out_mode = BT;
	set_mode_of(&mr);
	cancel_runs(bits3, 3, out_dir, merge_opts(&mr, 5),
	            in[1].n + in[3].n + in[4].n);
	mr.n = 5;
	mr.in = in;
	mr.im = im;
	close_inputs(in_dir, segs, 5);
	free_inputs(in, 5);
	uni_free(&u);
	g_mode = "";
}

/* ---- tests: corrupt inputs ----------------------------------------------- */

/* n inputs in mode m (keys KEYS_HASH, small values) of which input c
 * gets changed bytes: the inputs, their open segments (c closed), c's
 * path and original bytes, and the bounds [lo, hi) of its record stream
 * in the file. */
typedef struct corrupt_fixture {
	universe u;
	recs *in;
	unsigned im[3];
	merge_run mr;
	kvs_segment **segs;
	size_t n, c, len, lo, hi;
	char path[PATH_MAX];
	uint8_t *orig;
} corrupt_fixture;

static void corrupt_setup(corrupt_fixture *f, const char *in_dir, unsigned m,
                          size_t n, size_t c, uint64_t records, val_shape vals,
                          test_rng *r)
{
	memset(f, 0, sizeof *f);
	merge_case mc = {"", KEYS_HASH, vals, 0, records, false, n, 70, 10, 0};
	uni_generate(&f->u, &mc, r);
	for (size_t i = 0; i < n; i++)
		f->im[i] = m;
	f->in = gen_inputs(&mc, &f->u, f->im, r);
	f->mr.n = n;
	f->mr.in = f->in;
	f->mr.im = f->im;
	f->mr.in_K = 15;
	f->segs = write_inputs(in_dir, &f->mr);
	f->n = n;
	f->c = c;
	char name[32];
	snprintf(name, sizeof name, "in-%03zu.kvseg", c);
	path_join(f->path, in_dir, name);
	f->orig = slurp(f->path, &f->len);
	kvs_segment_unref(f->segs[c]);
	f->segs[c] = NULL;
	/* the record stream starts after the header and directory */
	uint32_t nsec = (uint32_t)f->orig[52] | (uint32_t)f->orig[53] << 8;
	f->lo = 128 + 32 * (size_t)nsec;
	kvs_segment_info info;
	kvs_segment *tmp = open_verified(f->path);
	kvs_segment_info_get(tmp, &info);
	kvs_segment_unref(tmp);
	f->hi = f->lo + (size_t)info.stream_bytes;
}

/* Writes bytes (the changed file) as input c and merges into out_dir in
 * the inputs' mode m: a merge may fail (with a message, leaving nothing)
 * or succeed with an output that verifies. An input that no longer opens
 * is not merged. */
static void corrupt_merge(corrupt_fixture *f, const uint8_t *bytes,
                          const char *out_dir, unsigned m, bool drop,
                          unsigned *tries, unsigned *failed)
{
	f->mr.out_mode = m;
	set_mode_of(&f->mr);
	kvs_merge_options mo = merge_opts(&f->mr, 3);
	mo.drop_tombstones = drop;
	char p[PATH_MAX];
	path_join(p, out_dir, "merged.kvseg");
	kvs_error err;
	memset(&err, 0, sizeof err);
	/* As changed, the input's body CRC32C fails: the merge refuses it
	 * before reading a record, naming the input and the CRC. */
	spit(f->path, bytes, f->len);
	if (kvs_segment_open(&f->segs[f->c], f->path, &err) == KVS_OK) {
		kvs_status st = kvs_merge(f->segs, f->n, p, &mo, NULL, &err);
		if (memcmp(bytes + f->lo, f->orig + f->lo, f->len - f->lo)) {
			assert_int_equal(st, KVS_E_CORRUPT);
			assert_non_null(strstr(err.message, "CRC32C"));
			assert_non_null(strstr(err.message, f->path));
			expect_dir_empty(out_dir, g_case);
		} else if (st == KVS_OK) {
			assert_int_equal(unlink(p), 0);
		}
		kvs_segment_unref(f->segs[f->c]);
		f->segs[f->c] = NULL;
	}
	/* With the CRC32Cs recomputed, the change reaches the decoders. */
	uint8_t *fixed = malloc(f->len);
	assert_non_null(fixed);
	memcpy(fixed, bytes, f->len);
	fuzz_fix_crcs(fixed, f->len);
	spit(f->path, fixed, f->len);
	free(fixed);
	memset(&err, 0, sizeof err);
	if (kvs_segment_open(&f->segs[f->c], f->path, &err) != KVS_OK)
		return;
	kvs_status st = kvs_merge(f->segs, f->n, p, &mo, NULL, &err);
	(*tries)++;
	if (st == KVS_OK) {
		kvs_segment_unref(open_verified(p));
		assert_int_equal(unlink(p), 0);
	} else {
		(*failed)++;
		EXPECT_ERR(st, err, "%s", g_case);
		expect_dir_empty(out_dir, g_case);
	}
	kvs_segment_unref(f->segs[f->c]);
	f->segs[f->c] = NULL;
}

/* Puts input c back and frees the fixture. */
static void corrupt_free(corrupt_fixture *f, const char *in_dir)
{
	spit(f->path, f->orig, f->len);
	free(f->orig);
	f->segs[f->c] = open_verified(f->path);
	close_inputs(in_dir, f->segs, f->n);
	free_inputs(f->in, f->n);
	uni_free(&f->u);
}

/* The case directory of a corrupt-input test, its inputs' and outputs'. */
static void corrupt_dirs(const char *name, char *in_dir, char *out_dir)
{
	char base[PATH_MAX];
	make_case_dirs(base, name);
	path_join(in_dir, base, "in");
	path_join(out_dir, base, "out");
}

/* A changed byte in an input's record stream: the merge may fail (with a
 * message, leaving nothing) or, if the change decodes to valid records,
 * succeed with an output that verifies. */
static void test_corrupt_input(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 9);
	char in_dir[PATH_MAX], out_dir[PATH_MAX];
	corrupt_dirs("corrupt_input", in_dir, out_dir);
	unsigned failed = 0, tries = 0;
	for (unsigned m = 0; m < NMODES; m++) {
		/* two inputs (their own path) and three; the last is hit */
		size_t n = 2 + m % 2, c = n - 1;
		corrupt_fixture f;
		corrupt_setup(&f, in_dir, m, n, c, 400, VALS_SMALL, &r);
		f.mr.includes_oldest = true; /* all inputs: drops allowed */
		uint8_t *b = malloc(f.len);
		assert_non_null(b);
		for (int t = 0; t < 40; t++) {
			memcpy(b, f.orig, f.len);
			size_t at = f.lo + (size_t)test_rng_below(&r, f.hi - f.lo);
			b[at] ^= (uint8_t)(1 + test_rng_below(&r, 255));
			set_case("%s input, byte %zu changed", MODES[m].name,
			         at);
			corrupt_merge(&f, b, out_dir, m,
			              MODES[m].framing == KVS_FRAMING_RAW, &tries,
			              &failed);
		}
		free(b);
		corrupt_free(&f, in_dir);
	}
	printf("[          ] corrupt inputs: %u of %u merges failed\n", failed,
	       tries);
	g_mode = "";
}

/*
 * Every bit of the first stream bytes of either of two inputs flipped in
 * turn, tombstones kept, in every mode: the two-input loops (the byte
 * loop, and the bit loop that hands the writer LCPs it takes from its
 * inputs' LCP fields) trust headers and fields they check only cheaply,
 * so a field that claims more than the keys share, or keys that
 * decrease, must still fail the merge with a message and leave nothing
 * (or decode to records that merge into an output that verifies).
 */
/*
 * A strong delete writes no tombstone, so the writer's order check never
 * sees one: an input whose tombstone is below the record before it must
 * still fail the merge (two inputs, either age order; found by
 * fuzz_merge). The input: typed-byte keys "a", "c" (a tombstone), "d" in
 * one restart block, "c" then changed to "0" and the CRC32Cs recomputed;
 * the other: "b", "e".
 */
static void test_strong_delete_order(void **state)
{
	(void)state;
	char in_dir[PATH_MAX], out_dir[PATH_MAX];
	corrupt_dirs("strong_delete_order", in_dir, out_dir);
	g_mode = "typed-byte, K = 64";
	kvs_writer_options o;
	memset(&o, 0, sizeof o);
	o.profile = KVS_PROFILE_BYTE;
	o.framing = KVS_FRAMING_TYPED;
	o.restart_interval = 64;
	o.flags = KVS_WRITER_NO_SYNC;
	const char *keys[2][3] = {{"a", "c", "d"}, {"b", "e", NULL}};
	kvs_segment *segs[2];
	char p[2][PATH_MAX];
	for (int i = 0; i < 2; i++) {
		path_join(p[i], in_dir, i ? "newer.kvseg" : "older.kvseg");
		o.sequence = (uint64_t)i + 1;
		kvs_writer *w = NULL;
		kvs_error err = {0};
		EXPECT_ST(kvs_writer_open(&w, p[i], &o, &err), KVS_OK,
		          "open: %s", err.message);
		for (int k = 0; k < 3 && keys[i][k]; k++) {
			bool tomb = i == 0 && k == 1;
			kvs_status st = kvs_writer_add_bytes(
			    w, keys[i][k], 1,
			    tomb ? KVS_KIND_TOMBSTONE : KVS_KIND_VALUE, "xy", 2,
			    &err);
			EXPECT_ST(st, KVS_OK, "add: %s", err.message);
		}
		EXPECT_ST(kvs_writer_finish(w, &err), KVS_OK, "finish: %s",
		          err.message);
		kvs_writer_free(w);
	}
	size_t len;
	uint8_t *f = slurp(p[0], &len);
	size_t at = 0, count = 0;
	for (size_t i = 128; i < len; i++)
		if (f[i] == 'c') {
			at = i;
			count++;
		}
	assert_int_equal(count, 1); /* the suffix byte of "c" */
	f[at] = '0';
	assert_true(fuzz_fix_crcs(f, len));
	spit(p[0], f, len);
	free(f);
	kvs_error err = {0};
	for (int i = 0; i < 2; i++)
		EXPECT_ST(kvs_segment_open(&segs[i], p[i], &err), KVS_OK,
		          "open: %s", err.message);
	CHECK(kvs_segment_verify(segs[0], &err) != KVS_OK,
	      "the changed input verifies");
	kvs_merge_options mo;
	memset(&mo, 0, sizeof mo);
	mo.output = o;
	mo.output.sequence = 3;
	mo.includes_oldest = true;
	for (int drop = 0; drop < 2; drop++) {
		mo.drop_tombstones = drop;
		kvs_segment *older_first[2] = {segs[0], segs[1]};
		kvs_segment *newer_first[2] = {segs[1], segs[0]};
		set_case("strong delete %d, the bad input older", drop);
		expect_merge_fails(older_first, 2, out_dir, &mo, KVS_OK,
		                   g_case);
		set_case("strong delete %d, the bad input newer", drop);
		expect_merge_fails(newer_first, 2, out_dir, &mo, KVS_OK,
		                   g_case);
	}
	kvs_segment_unref(segs[0]);
	kvs_segment_unref(segs[1]);
	g_mode = "";
}

static void test_corrupt_two_inputs(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 10);
	char in_dir[PATH_MAX], out_dir[PATH_MAX];
	corrupt_dirs("corrupt_two_inputs", in_dir, out_dir);
	unsigned failed = 0, tries = 0;
	for (unsigned m = 0; m < NMODES; m++) {
		for (size_t c = 0; c < 2; c++) {
			corrupt_fixture f;
			corrupt_setup(&f, in_dir, m, 2, c, 200, VALS_SMALL, &r);
			size_t hi = f.hi > f.lo + 96 ? f.lo + 96 : f.hi;
			uint8_t *b = malloc(f.len);
			assert_non_null(b);
			for (size_t bit = 8 * f.lo; bit < 8 * hi; bit++) {
				memcpy(b, f.orig, f.len);
				b[bit / 8] ^= (uint8_t)(0x80u >> (bit % 8));
				set_case("%s input %zu, bit %zu flipped",
				         MODES[m].name, c, bit);
				corrupt_merge(&f, b, out_dir, m, false, &tries,
				              &failed);
			}
			free(b);
			corrupt_free(&f, in_dir);
		}
	}
	assert_true(failed > 0);
	printf("[          ] corrupt two inputs: %u of %u merges failed\n",
	       failed, tries);
	g_mode = "";
}

/* A LEB128 varint at *p (FORMAT.md §3.4), for the walk below. */
static uint64_t walk_varint(const uint8_t **p)
{
	uint64_t v = 0;
	for (unsigned sh = 0;; sh += 7) {
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << sh;
		if (!(b & 0x80))
			return v;
	}
}

/*
 * The file offsets of the two-byte value headers in a byte-profile record
 * stream of `records` records, restart interval K, walked per FORMAT.md
 * §6.1; at most max of them. *end: where the walk ended.
 */
static size_t two_byte_headers(const uint8_t *file, size_t lo, uint64_t records,
                               uint32_t K, bool typed, size_t *at, size_t max,
                               size_t *end)
{
	const uint8_t *p = file + lo;
	uint64_t len = 0, vh = 0;
	size_t found = 0;
	for (uint64_t i = 0; i < records; i++) {
		bool vc = true;
		if (i % K == 0) {
			len = walk_varint(&p);
			p += len;
		} else {
			uint64_t h = walk_varint(&p), lcp = h >> 2;
			if (h & 2) { /* the length changed: zigzag difference */
				uint64_t z = walk_varint(&p);
				len += (z >> 1) ^ (uint64_t)-(int64_t)(z & 1);
			}
			vc = h & 1;
			p += len - lcp;
		}
		if (vc) {
			const uint8_t *q = p;
			vh = walk_varint(&p);
			if (p - q == 2 && found < max)
				at[found++] = (size_t)(q - file);
		}
		p += typed ? (vh ? vh - 1 : 0) : vh;
	}
	*end = (size_t)(p - file);
	return found;
}

/*
 * Values of 0..512 bytes, so most value headers take two bytes (the byte
 * loop decodes those in line, merge.c's bin_vh): each such header made
 * overlong in turn (its second byte 00, FORMAT.md §3.4) must fail the
 * merge with a message and leave nothing, wherever the record lies.
 */
static void test_corrupt_value_headers(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 11);
	char in_dir[PATH_MAX], out_dir[PATH_MAX];
	corrupt_dirs("corrupt_value_headers", in_dir, out_dir);
	static const unsigned modes[] = {BT, BR};
	size_t merges = 0;
	for (size_t mi = 0; mi < 2; mi++) {
		unsigned m = modes[mi];
		for (size_t c = 0; c < 2; c++) {
			corrupt_fixture f;
			corrupt_setup(&f, in_dir, m, 2, c, 200, VALS_FV, &r);
			kvs_segment_info info;
			kvs_segment *tmp = open_verified(f.path);
			kvs_segment_info_get(tmp, &info);
			kvs_segment_unref(tmp);
			size_t at[400], end;
			size_t n = two_byte_headers(
			    f.orig, f.lo, info.records, info.restart_interval,
			    MODES[m].framing == KVS_FRAMING_TYPED, at, 400,
			    &end);
			if (end !=
			    f.hi) /* the walk read the stream as written */
				FAILF(
				    "%s input %zu: the walk ended at byte %zu, "
				    "the stream at %zu",
				    MODES[m].name, c, end, f.hi);
			if (n < 20)
				FAILF("%s input %zu: only %zu two-byte value "
				      "headers in %llu records",
				      MODES[m].name, c, n, ULL(info.records));
			uint8_t *b = malloc(f.len);
			assert_non_null(b);
			for (size_t k = 0; k < n; k++) {
				memcpy(b, f.orig, f.len);
				b[at[k] + 1] = 0x00;
				set_case(
				    "%s input %zu, value header at byte %zu "
				    "made overlong",
				    MODES[m].name, c, at[k]);
				unsigned tries = 0, failed = 0;
				corrupt_merge(&f, b, out_dir, m, false, &tries,
				              &failed);
				if (tries != 1 || failed != 1)
					FAILF("%s: the merge %s", g_case,
					      tries ? "succeeded"
					            : "was not run");
				merges++;
			}
			free(b);
			corrupt_free(&f, in_dir);
		}
	}
	printf("[          ] overlong value headers: %zu merges, all failed\n",
	       merges);
	g_mode = "";
}

/* The EGk code at *pos (FORMAT.md §3.1), *pos moved past it: its value;
 * *n its length. */
static uint64_t walk_eg(const uint8_t *s, uint64_t *pos, unsigned k,
                        unsigned *n)
{
	unsigned z = 0;
	while (!test_msb_bit_at(s, *pos + z))
		z++;
	uint64_t v = 0;
	for (unsigned i = 0; i < z + k + 1; i++)
		v = v << 1 | (uint64_t)test_msb_bit_at(s, *pos + z + i);
	*n = 2 * z + k + 1;
	*pos += *n;
	return v - ((uint64_t)1 << k);
}

/* Writes value v as the n-bit EGk code at pos; false when its code is not
 * n bits long. */
static bool put_eg(uint8_t *s, uint64_t pos, unsigned k, uint64_t v, unsigned n)
{
	uint64_t c = v + ((uint64_t)1 << k);
	unsigned width = 64 - (unsigned)__builtin_clzll(c);
	if (2 * width - k - 1 != n)
		return false;
	for (unsigned i = 0; i < n; i++)
		test_msb_bit_set(s, pos + i, (int)(c >> (n - 1 - i) & 1));
	return true;
}

static uint64_t walk_zigzag(int64_t d)
{
	return d >= 0 ? 2 * (uint64_t)d : 2 * (uint64_t) - (d + 1) + 1;
}

static int64_t walk_unzigzag(uint64_t z)
{
	return z & 1 ? -(int64_t)(z / 2) - 1 : (int64_t)(z / 2);
}

/* Where a bit-profile record's LCP and KEYLEN codes lie and what they
 * hold, from a walk of the stream with the default codes (FORMAT.md
 * §3.1, §6.2). */
typedef struct bit_rec {
	uint64_t lcp_at, len_at, lcp, len, prev_lcp, prev_len;
	unsigned lcp_n, len_n;
} bit_rec;

/* Walks `records` bit-profile records of restart interval K from bit 0
 * of s: each record's codes in at[]; the bit where the walk ended. */
static uint64_t walk_bit_stream(const uint8_t *s, uint64_t records, uint32_t K,
                                bool typed, bit_rec *at)
{
	uint64_t pos = 0, plcp = 0, pkey = 0, pval = 0;
	for (uint64_t i = 0; i < records; i++) {
		bit_rec *r = &at[i];
		uint64_t lcp = 0;
		if (i % K == 0) {
			plcp = pkey = pval = 0;
			r->lcp_n = 0;
		} else {
			r->lcp_at = pos;
			lcp = plcp + (uint64_t)walk_unzigzag(
			                 walk_eg(s, &pos, 2, &r->lcp_n));
		}
		r->len_at = pos;
		uint64_t len = pkey + (uint64_t)walk_unzigzag(
		                          walk_eg(s, &pos, 0, &r->len_n));
		r->lcp = lcp;
		r->len = len;
		r->prev_lcp = plcp;
		r->prev_len = pkey;
		plcp = lcp;
		pkey = len;
		pos += len - lcp;
		if (!typed || test_msb_bit_at(s, pos++)) {
			unsigned n;
			pval +=
			    (uint64_t)walk_unzigzag(walk_eg(s, &pos, 0, &n));
			pos += 8 * pval;
		}
	}
	return pos;
}

/*
 * A bit-profile record whose LCP field claims one bit more than the key
 * before it has, with its KEYLEN one more too, so that its suffix and
 * every record after it still decode: the reader refuses it (the LCP
 * field's bound is the previous key's length), and so must the merge
 * loops, which decode such records in line (merge.c, tin_next_fast),
 * with two and three inputs, either age, both framings. The input's keys
 * each extend the one before (LCP = its length) within a restart block;
 * a longer key at its end keeps the changed keys below its longest.
 */
static void test_corrupt_lcp_past_key(void **state)
{
	(void)state;
	char in_dir[PATH_MAX], out_dir[PATH_MAX];
	corrupt_dirs("corrupt_lcp_past_key", in_dir, out_dir);
	enum { BLOCKS = 20, K = 16, CHANGED = 5 * K + 8 };
	uint8_t val[48];
	memset(val, 0x5a, sizeof val);
	size_t merges = 0;
	for (unsigned m = IT; m <= IR; m++) {
		bool typed = MODES[m].framing == KVS_FRAMING_TYPED;
		g_mode = MODES[m].name;
		kvs_writer_options o = make_opts(m, K, 1);
		char p[3][PATH_MAX];
		for (int i = 0; i < 3; i++) {
			char name[32];
			snprintf(name, sizeof name, "in-%d.kvseg", i);
			path_join(p[i], in_dir, name);
			o.sequence = (uint64_t)i + 1;
			kvs_writer *w = NULL;
			kvs_error err = {0};
			EXPECT_ST(kvs_writer_open(&w, p[i], &o, &err), KVS_OK,
			          "open: %s", err.message);
			uint8_t key[40];
			for (int b = 0; b < BLOCKS; b++) {
				key[0] = 0x63;
				key[1] = (uint8_t)b;
				/* input 1: K keys, each one byte longer (whose
				 * first bit is 1, as a larger key's at the
				 * LCP); the others: one key before them */
				size_t n = i == 1 ? K : 1;
				for (size_t j = 0; j < n; j++) {
					key[2 + j] = i == 1
					                 ? (uint8_t)(0x81 + j)
					             : i == 0 ? 0x40
					                      : 0x3f;
					EXPECT_ST(
					    kvs_writer_add_bytes(
					        w, key, 3 + j, KVS_KIND_VALUE,
					        val, sizeof val, &err),
					    KVS_OK, "add: %s", err.message);
				}
			}
			memset(key, 0x7a, sizeof key);
			EXPECT_ST(kvs_writer_add_bytes(w, key, sizeof key,
			                               KVS_KIND_VALUE, val,
			                               sizeof val, &err),
			          KVS_OK, "add: %s", err.message);
			EXPECT_ST(kvs_writer_finish(w, &err), KVS_OK,
			          "finish: %s", err.message);
			kvs_writer_free(w);
		}
		/* input 1's record CHANGED: LCP and KEYLEN one more */
		size_t len;
		uint8_t *f = slurp(p[1], &len);
		kvs_segment *s = open_verified(p[1]);
		kvs_segment_info info;
		kvs_segment_info_get(s, &info);
		kvs_segment_unref(s);
		uint32_t nsec = (uint32_t)f[52] | (uint32_t)f[53] << 8;
		uint8_t *stream = f + 128 + 32 * (size_t)nsec;
		bit_rec *at = calloc(info.records, sizeof *at);
		assert_non_null(at);
		uint64_t end =
		    walk_bit_stream(stream, info.records, K, typed, at);
		CHECK(end == info.stream_bits,
		      "%s: the walk ended at bit %llu, the stream at %llu",
		      g_mode, ULL(end), ULL(info.stream_bits));
		const bit_rec *r = &at[CHANGED];
		CHECK(r->lcp_n && r->lcp == r->prev_len,
		      "%s: record %d: LCP %llu after a key of %llu bits",
		      g_mode, CHANGED, ULL(r->lcp), ULL(r->prev_len));
		CHECK(
		    put_eg(stream, r->lcp_at, 2,
		           walk_zigzag((int64_t)(r->lcp + 1 - r->prev_lcp)),
		           r->lcp_n) &&
		        put_eg(stream, r->len_at, 0,
		               walk_zigzag((int64_t)(r->len + 1 - r->prev_len)),
		               r->len_n),
		    "%s: the changed codes are not as long", g_mode);
		free(at);
		assert_true(fuzz_fix_crcs(f, len));
		spit(p[1], f, len);
		free(f);
		kvs_segment *segs[3];
		kvs_error err = {0};
		for (int i = 0; i < 3; i++)
			EXPECT_ST(kvs_segment_open(&segs[i], p[i], &err),
			          KVS_OK, "open: %s", err.message);
		CHECK(kvs_segment_verify(segs[1], &err) != KVS_OK,
		      "%s: the changed input verifies", g_mode);
		kvs_merge_options mo;
		memset(&mo, 0, sizeof mo);
		mo.output = make_opts(m, K, 9);
		kvs_segment *two[2][2] = {{segs[0], segs[1]},
		                          {segs[1], segs[0]}};
		kvs_segment *three[2][3] = {{segs[0], segs[1], segs[2]},
		                            {segs[1], segs[2], segs[0]}};
		for (int age = 0; age < 2; age++) {
			set_case("%s, two inputs, the bad one %s", g_mode,
			         age ? "older" : "newer");
			expect_merge_fails(two[age], 2, out_dir, &mo,
			                   KVS_E_CORRUPT, g_case);
			set_case("%s, three inputs, the bad one %s", g_mode,
			         age ? "oldest" : "in the middle");
			expect_merge_fails(three[age], 3, out_dir, &mo,
			                   KVS_E_CORRUPT, g_case);
			merges += 2;
		}
		for (int i = 0; i < 3; i++) {
			kvs_segment_unref(segs[i]);
			assert_int_equal(unlink(p[i]), 0);
		}
	}
	printf("[          ] an LCP past the key before: %zu merges, all "
	       "failed\n",
	       merges);
	g_mode = "";
}

/* ---- tests: no space ----------------------------------------------------- */

typedef struct tmpfs_merge { /* what a child merges onto a small tmpfs */
	const char *mnt;
	kvs_segment *const *segs;
	size_t n;
	const kvs_merge_options *mo;
	const char *want; /* the expected output (outside the tmpfs), or NULL */
} tmpfs_merge;

typedef struct tmpfs_result {
	int skipped; /* 1: mounting is not permitted */
	kvs_status st;
	kvs_error err;
	unsigned entries; /* left in the tmpfs afterwards */
	char first[256];
	char why[200]; /* skip reason or setup failure */
	int same;      /* with want: the output holds its bytes */
	long long size, blocks; /* the output's st_size and st_blocks */
} tmpfs_result;

/* In a forked child, in a private mount namespace: a 256 KiB tmpfs on
 * mnt, the merge into it, the output compared with want, the listing,
 * then exit (the mount dies with the namespace). */
static void tmpfs_child(int fd, const void *ctx)
{
	const tmpfs_merge *t = ctx;
	tmpfs_result res;
	memset(&res, 0, sizeof res);
	if (child_tmpfs(t->mnt, "256k", res.why, sizeof res.why) != 0) {
		res.skipped = 1;
	} else {
		char p[PATH_MAX];
		path_join(p, t->mnt, "merged.kvseg");
		res.st = kvs_merge(t->segs, t->n, p, t->mo, NULL, &res.err);
		struct stat sb;
		if (res.st == KVS_OK && t->want && stat(p, &sb) == 0) {
			size_t gl, wl;
			uint8_t *g = slurp(p, &gl), *w = slurp(t->want, &wl);
			res.same = gl == wl && memcmp(g, w, gl) == 0;
			free(g);
			free(w);
			res.size = (long long)sb.st_size;
			res.blocks = (long long)sb.st_blocks;
		}
		res.entries = dir_entries(t->mnt, res.first, sizeof res.first);
		umount2(t->mnt, MNT_DETACH);
	}
	ssize_t w = write(fd, &res, sizeof res);
	_exit(w == (ssize_t)sizeof res ? 0 : 3);
}

/* A merge of the n inputs in (modes im, K = 15) onto the tmpfs. */
static merge_run tmpfs_run(size_t n, recs *in, const unsigned *im)
{
	merge_run mr;
	memset(&mr, 0, sizeof mr);
	mr.n = n;
	mr.in = in;
	mr.im = im;
	mr.in_K = 15;
	return mr;
}

/* Output mode out for a merge onto the tmpfs: a raw output drops the
 * tombstones (a strong delete), which these inputs allow. */
static void tmpfs_out_mode(merge_run *mr, unsigned out)
{
	mr->out_mode = out;
	mr->drop = MODES[out].framing == KVS_FRAMING_RAW;
	mr->includes_oldest = mr->drop;
	set_mode_of(mr);
}

/* Runs t in a forked child (tmpfs_child) and returns what it found; false
 * (the reason in why) when the child may not mount. */
static bool merge_on_tmpfs(const tmpfs_merge *t, tmpfs_result *res,
                           char *why, size_t why_len)
{
	run_child(tmpfs_child, t, res, sizeof *res);
	if (res->skipped) {
		snprintf(why, why_len, "%s", res->why);
		return false;
	}
	if (res->why[0])
		FAILF("child: %s", res->why);
	return true;
}

static void test_enospc(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 10);
	char base[PATH_MAX], in_dir[PATH_MAX], mnt[PATH_MAX];
	make_case_dirs(base, "enospc");
	path_join(in_dir, base, "in");
	path_join(mnt, base, "out");
	/* about 3000 * 0.8 * 256 B = 600 KiB of output */
	merge_case mc = {"", KEYS_HASH, VALS_FV, 0, 3000, true, 2, 60, 10, 0};
	universe u;
	uni_generate(&u, &mc, &r);
	static const unsigned im[2] = {BT, IT};
	recs *in = gen_inputs(&mc, &u, im, &r);
	merge_run mr = tmpfs_run(2, in, im);
	kvs_segment **segs = write_inputs(in_dir, &mr);
	uint8_t *before[2];
	size_t before_len[2];
	for (size_t i = 0; i < 2; i++) {
		char name[32], p[PATH_MAX];
		snprintf(name, sizeof name, "in-%03zu.kvseg", i);
		path_join(p, in_dir, name);
		before[i] = slurp(p, &before_len[i]);
	}
	if (before_len[0] + before_len[1] < 2 * 256 * 1024)
		FAILF("the inputs (%zu + %zu bytes) are too small to fill "
		      "256 KiB",
		      before_len[0], before_len[1]);

	bool skipped = false;
	char why[220] = "";
	for (unsigned out = 0; out < NMODES && !skipped; out++) {
		tmpfs_out_mode(&mr, out);
		set_case("merge onto a full 256 KiB tmpfs");
		kvs_merge_options mo = merge_opts(&mr, 4);
		tmpfs_merge t = {mnt, segs, 2, &mo, NULL};
		tmpfs_result res;
		if (!merge_on_tmpfs(&t, &res, why, sizeof why)) {
			skipped = true;
			break;
		}
		EXPECT_ERR(res.st, res.err,
		           "the merge onto a full tmpfs "
		           "succeeded");
		EXPECT_ST(res.st, KVS_E_IO, "\"%s\"", res.err.message);
		if (strstr(res.err.message, strerror(ENOSPC)) == NULL)
			FAILF("the message \"%s\" does not say \"%s\"",
			      res.err.message, strerror(ENOSPC));
		if (res.entries != 0)
			FAILF("%u entries left on the tmpfs (first: %s)",
			      res.entries, res.first);
		expect_dir_empty(mnt, "the mount point after the child");
		for (size_t i = 0; i < 2; i++) {
			kvs_error err;
			EXPECT_ST(kvs_segment_verify(segs[i], &err), KVS_OK,
			          "input %zu after ENOSPC: %s", i, err.message);
			char name[32], p[PATH_MAX];
			snprintf(name, sizeof name, "in-%03zu.kvseg", i);
			path_join(p, in_dir, name);
			size_t len;
			uint8_t *now = slurp(p, &len);
			if (len != before_len[i] ||
			    memcmp(now, before[i], len) != 0)
				FAILF("input %zu changed", i);
			free(now);
		}
	}
	for (size_t i = 0; i < 2; i++)
		free(before[i]);
	close_inputs(in_dir, segs, 2);
	free_inputs(in, 2);
	uni_free(&u);
	g_mode = "";
	if (skipped) {
		printf("[  SKIP    ] ENOSPC needs a tmpfs mount: %s\n", why);
		fflush(stdout);
		skip();
	}
}

/*
 * A size hint far above the free space (64 MiB on a 256 KiB tmpfs) does
 * not fail a merge whose output fits: the reservation is refused and
 * ignored, the output is the writer's bytes and takes no more space than
 * it needs. Skipped where mounting is not permitted.
 */
static void test_enospc_hint(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 11);
	char base[PATH_MAX], in_dir[PATH_MAX], mnt[PATH_MAX], exp[PATH_MAX],
	    want[PATH_MAX];
	make_case_dirs(base, "enospc_hint");
	path_join(in_dir, base, "in");
	path_join(mnt, base, "out");
	path_join(exp, base, "exp");
	path_join(want, exp, "want.kvseg");
	merge_case mc = {"", KEYS_HASH, VALS_FF16, 0, 600, false, 3, 60, 10, 0};
	universe u;
	uni_generate(&u, &mc, &r);
	static const unsigned im[3] = {BT, BT, IT};
	recs *in = gen_inputs(&mc, &u, im, &r);
	merge_run mr = tmpfs_run(3, in, im);
	kvs_segment **segs = write_inputs(in_dir, &mr);
	bool skipped = false;
	char why[220] = "";
	for (unsigned out = 0; out < NMODES && !skipped; out++) {
		tmpfs_out_mode(&mr, out);
		set_case("merge with a 64 MiB size hint onto a 256 KiB tmpfs");
		oracle o;
		oracle_merge(mr.in, mr.n, mr.drop, &o);
		kvs_merge_options mo = merge_opts(&mr, 4);
		write_recs(want, &o.out, &mo.output);
		mo.output.size_hint = (uint64_t)64 << 20;
		tmpfs_merge t = {mnt, segs, 3, &mo, want};
		tmpfs_result res;
		if (!merge_on_tmpfs(&t, &res, why, sizeof why)) {
			skipped = true;
		} else {
			EXPECT_ST(res.st, KVS_OK, "kvs_merge: %s",
			          res.err.message);
			if (!res.same)
				FAILF("the output (%lld bytes) is not the "
				      "writer's file of the merged records",
				      res.size);
			if (res.blocks * 512 > (res.size + 4095) / 4096 * 4096)
				FAILF("the output (%lld bytes) takes %lld "
				      "bytes of the tmpfs",
				      res.size, res.blocks * 512);
			if (res.entries != 1)
				FAILF("%u entries on the tmpfs (first: %s), "
				      "not the output alone",
				      res.entries, res.first);
		}
		recs_free(&o.out, false);
		assert_int_equal(unlink(want), 0);
	}
	close_inputs(in_dir, segs, 3);
	free_inputs(in, 3);
	uni_free(&u);
	g_mode = "";
	if (skipped) {
		printf("[  SKIP    ] the size hint test needs a tmpfs mount: "
		       "%s\n",
		       why);
		fflush(stdout);
		skip();
	}
}

/* ---- the program --------------------------------------------------------- */

static int group_setup(void **state)
{
	(void)state;
	return tmpdir_setup("test_merge");
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
	g_seed = test_seed_from_env("test_merge", SEED);
	const struct CMUnitTest tests[] = {
	    TEST(test_worked_example),
	    TEST(test_prefix_binding),
	    TEST(test_strong_delete_tree),
	    TEST(test_modes),
	    TEST(test_shapes),
	    TEST(test_input_counts),
	    TEST(test_tombstones),
	    TEST(test_output_codes),
	    TEST(test_same_segment),
	    TEST(test_longest_keys),
	    TEST(test_long_records),
	    TEST(test_random),
	    TEST(test_two_byte_inputs),
	    TEST(test_two_bit_inputs),
	    TEST(test_errors),
	    TEST(test_cancel),
	    TEST(test_corrupt_input),
	    TEST(test_corrupt_two_inputs),
	    TEST(test_strong_delete_order),
	    TEST(test_strong_delete_tail),
	    TEST(test_corrupt_value_headers),
	    TEST(test_corrupt_lcp_past_key),
	    TEST(test_enospc),
	    TEST(test_enospc_hint),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
