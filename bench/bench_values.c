/*
 * bench_values — issue 43's first step: which unit to compress values in.
 * For each way of grouping a segment's values into zstd frames, the bytes
 * it stores and the cost of reading ONE random value (decompress the unit
 * that holds it, copy the value out), since segfs serves one key per read.
 *
 * Workloads (records sorted by key; values concatenated in key order):
 *   debian-packages  Debian's Packages list on this machine, the largest
 *                    /var/lib/apt/lists/ *_main_binary-amd64_Packages (or
 *                    .lz4, read through `lz4 -dc`); a record is a stanza
 *                    (blank-line separated), its key Package (then Version,
 *                    for packages listed more than once), its value the
 *                    whole stanza. Offered only when such a file exists.
 *   synthetic-json   20,000 JSON log records from a fixed seed (repeated
 *                    field names, varying ids, numbers and words), so that
 *                    CI and the smoke test have a workload.
 * Variants (zstd level 3 throughout):
 *   block-4k, block-128k  values in key order cut into blocks of at least
 *                   4 KiB / 128 KiB uncompressed (a value is never split: a
 *                   block closes once it holds that many bytes; RocksDB's
 *                   and squashfs's units), each block one frame
 *   value           each value one frame, no dictionary
 *   value-dict      each value one frame with the dictionary
 *   group4-dict, group8-dict, group16-dict  4 / 8 / 16 consecutive values
 *                   per frame, with the dictionary
 *   block-4k-dict, block-8k-dict  blocks as above (4 / 8 KiB), with the
 *                   dictionary: groups sized by bytes, not by count
 *   whole           all values one frame (the size reference)
 * The dictionary: ZDICT_trainFromBuffer on a sample of the values (every
 * k-th value, at most 100 times the dictionary's size), 64 KiB or 1/100 of
 * the values' bytes if that is smaller; digested once (ZSTD_createCDict,
 * ZSTD_createDDict) and used with reused contexts.
 *
 * Metrics, each a row per warm-up and measured iteration:
 *   read   ns per random value: for each pick, decompress its unit into a
 *          scratch buffer (a one-value unit straight into the output) and
 *          copy the value out. Picks come from a fixed seed; 10,000 per
 *          observation, fewer when the units are large (at most 256 MiB
 *          decompressed per observation: 2,048 picks for 128 KiB blocks,
 *          a few for whole). The timer covers the picks only.
 *   ratio  stored bytes / raw value bytes, the dictionary included (the
 *          same every iteration: compression is deterministic)
 *   units  the number of frames (each carries a frame header: 4 magic
 *          bytes, 1-2 descriptor bytes, the content size, and with a
 *          dictionary its 4-byte id, which a format could drop)
 *   train  ms to train the dictionary (dict variants; once per process,
 *          one row)
 * Excluded: loading, sorting, training (but its own row) and compressing.
 * The honesty check: before timing every unit is decompressed and compared
 * byte for byte with the original values; each timed pick is compared with
 * its value after the timer, and a checksum of all picks must match.
 */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zdict.h>
#include <zstd.h>

#include "bench_gen.h"
#include "harness.h"

#define LEVEL        3
#define PICKS        10000
#define PICK_BUDGET  ((size_t)256 << 20)
#define DICT_MAX     ((size_t)64 << 10)
#define JSON_RECORDS 20000

/* ---- the corpus --------------------------------------------------------- */

typedef struct record {
	char *key; /* sort key */
	const char *val;
	size_t len;
} record;

typedef struct corpus {
	char *text; /* the records' values point into it */
	record *rec;
	size_t count, cap;
	uint8_t *raw; /* values concatenated in key order */
	size_t *off;  /* value i is raw[off[i], off[i + 1]) */
	size_t raw_len;
} corpus;

static void add_record(corpus *c, char *key, const char *val, size_t len)
{
	if (c->count == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 4096;
		c->rec = realloc(c->rec, c->cap * sizeof *c->rec);
		if (c->rec == NULL)
			bench_fail("out of memory");
	}
	c->rec[c->count++] = (record){key, val, len};
}

static char *xstrndup(const char *s, size_t n)
{
	char *p = strndup(s, n);
	if (p == NULL)
		bench_fail("out of memory");
	return p;
}

/* The largest Packages list, or NULL (and why, on stderr). */
static char packages_path[4096];

static int find_packages(void)
{
	static const char *const patterns[] = {
	    "/var/lib/apt/lists/*_main_binary-amd64_Packages",
	    "/var/lib/apt/lists/*_main_binary-amd64_Packages.lz4",
	};
	off_t best = -1;
	for (size_t p = 0; p < 2; p++) {
		glob_t g;
		if (glob(patterns[p], 0, NULL, &g) != 0)
			continue;
		for (size_t i = 0; i < g.gl_pathc; i++) {
			struct stat st;
			/* An uncompressed list beats any .lz4 one. */
			off_t size;
			if (stat(g.gl_pathv[i], &st) != 0)
				continue;
			size = st.st_size * (p == 0 ? 16 : 1);
			if (size > best &&
			    strlen(g.gl_pathv[i]) < sizeof packages_path) {
				best = size;
				strcpy(packages_path, g.gl_pathv[i]);
			}
		}
		globfree(&g);
	}
	return best >= 0;
}

static char *read_all(FILE *f, size_t *len)
{
	size_t cap = (size_t)64 << 20, n = 0;
	char *buf = malloc(cap + 1);
	if (buf == NULL)
		bench_fail("out of memory");
	for (;;) {
		if (n == cap) {
			cap *= 2;
			buf = realloc(buf, cap + 1);
			if (buf == NULL)
				bench_fail("out of memory");
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		if (got == 0)
			break;
		n += got;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

static const char *field(const char *s, const char *end, const char *name,
                         size_t *flen)
{
	size_t nl = strlen(name);
	for (const char *p = s; p < end;) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (eol == NULL)
			eol = end;
		if ((size_t)(eol - p) > nl && memcmp(p, name, nl) == 0 &&
		    p[nl] == ':') {
			const char *v = p + nl + 1;
			while (v < eol && *v == ' ')
				v++;
			*flen = (size_t)(eol - v);
			return v;
		}
		p = eol + 1;
	}
	return NULL;
}

static int cmp_key(const void *a, const void *b)
{
	return strcmp(((const record *)a)->key, ((const record *)b)->key);
}

static void load_packages(corpus *c)
{
	size_t n = strlen(packages_path);
	FILE *f;
	int piped = n > 4 && strcmp(packages_path + n - 4, ".lz4") == 0;
	if (piped) {
		char cmd[4200];
		snprintf(cmd, sizeof cmd, "lz4 -dc '%s'", packages_path);
		f = popen(cmd, "r");
	} else {
		f = fopen(packages_path, "rb");
	}
	if (f == NULL)
		bench_fail("cannot read %s", packages_path);
	size_t len;
	c->text = read_all(f, &len);
	if (piped ? pclose(f) != 0 : fclose(f) != 0)
		bench_fail("reading %s failed (is lz4 installed?)",
		           packages_path);
	const char *end = c->text + len;
	for (const char *p = c->text; p < end;) {
		while (p < end && *p == '\n')
			p++;
		if (p >= end)
			break;
		const char *q = strstr(p, "\n\n");
		q = q ? q + 1 : end; /* the stanza keeps its last newline */
		size_t plen, vlen;
		const char *pkg = field(p, q, "Package", &plen);
		const char *ver = field(p, q, "Version", &vlen);
		if (pkg == NULL)
			bench_fail("%s: a stanza without Package:",
			           packages_path);
		/* Package, then Version: unique, and in package order. */
		char *key = malloc(plen + (ver ? vlen : 0) + 2);
		if (key == NULL)
			bench_fail("out of memory");
		memcpy(key, pkg, plen);
		key[plen] = '\001'; /* sorts before any name character */
		if (ver)
			memcpy(key + plen + 1, ver, vlen);
		key[plen + 1 + (ver ? vlen : 0)] = '\0';
		add_record(c, key, p, (size_t)(q - p));
		p = q;
	}
}

static const char *const words[] = {
    "request",  "completed", "failed",  "retry",   "cache",   "miss",
    "hit",      "upstream",  "timeout", "session", "created", "expired",
    "user",     "login",     "logout",  "payment", "order",   "shipped",
    "database", "slow",      "query",   "index",   "rebuilt", "queue",
};
static const char *const levels[] = {"DEBUG", "INFO", "INFO",
                                     "INFO",  "WARN", "ERROR"};
static const char *const services[] = {"auth",     "billing",   "search",
                                       "frontend", "inventory", "mailer"};
static const char *const methods[] = {"GET",  "GET", "GET",
                                      "POST", "PUT", "DELETE"};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static void load_json(corpus *c)
{
	bench_rng r = {0x5EED43A1500001ull};
	size_t cap = (size_t)JSON_RECORDS * 512;
	c->text = malloc(cap);
	if (c->text == NULL)
		bench_fail("out of memory");
	size_t n = 0;
	uint64_t ts = 1765000000000ull;
	for (unsigned i = 0; i < JSON_RECORDS; i++) {
		ts += 1 + bench_rng_below(&r, 2000);
		char msg[128];
		size_t m = 0;
		unsigned nw = 2 + (unsigned)bench_rng_below(&r, 6);
		for (unsigned w = 0; w < nw; w++)
			m += (size_t)snprintf(
			    msg + m, sizeof msg - m, "%s%s", w ? " " : "",
			    words[bench_rng_below(&r, N_OF(words))]);
		char *v = c->text + n;
		int len = snprintf(
		    v, cap - n,
		    "{\"ts\":%llu,\"level\":\"%s\",\"service\":\"%s\","
		    "\"host\":\"web-%02u\",\"request_id\":\"%016llx\","
		    "\"user_id\":%u,\"method\":\"%s\",\"path\":\"/api/v1/%s/"
		    "%u\",\"status\":%u,\"latency_ms\":%u,\"bytes\":%u,"
		    "\"msg\":\"%s\"}\n",
		    (unsigned long long)ts,
		    levels[bench_rng_below(&r, N_OF(levels))],
		    services[bench_rng_below(&r, N_OF(services))],
		    (unsigned)bench_rng_below(&r, 24),
		    (unsigned long long)bench_rng_next(&r),
		    (unsigned)bench_rng_below(&r, 100000),
		    methods[bench_rng_below(&r, N_OF(methods))],
		    words[bench_rng_below(&r, N_OF(words))],
		    (unsigned)bench_rng_below(&r, 1u << 20),
		    bench_rng_below(&r, 10) ? 200u : 500u,
		    (unsigned)bench_rng_width(&r, 12),
		    (unsigned)bench_rng_width(&r, 20), msg);
		if (len < 0 || (size_t)len >= cap - n)
			bench_fail("synthetic record %u does not fit", i);
		char key[32];
		snprintf(key, sizeof key, "log/%013llu/%05u",
		         (unsigned long long)ts, i);
		add_record(c, xstrndup(key, strlen(key)), v, (size_t)len);
		n += (size_t)len;
	}
}

static void finish_corpus(corpus *c)
{
	qsort(c->rec, c->count, sizeof *c->rec, cmp_key);
	for (size_t i = 1; i < c->count; i++)
		if (strcmp(c->rec[i - 1].key, c->rec[i].key) == 0)
			bench_fail("key %s is not unique", c->rec[i].key);
	c->off = malloc((c->count + 1) * sizeof *c->off);
	if (c->off == NULL)
		bench_fail("out of memory");
	size_t total = 0;
	for (size_t i = 0; i < c->count; i++)
		total += c->rec[i].len;
	c->raw = bench_alloc(total);
	c->raw_len = total;
	size_t o = 0;
	for (size_t i = 0; i < c->count; i++) {
		c->off[i] = o;
		memcpy(c->raw + o, c->rec[i].val, c->rec[i].len);
		o += c->rec[i].len;
	}
	c->off[c->count] = o;
}

/* ---- units and compression ---------------------------------------------- */

typedef struct variant {
	const char *name;
	size_t block; /* bytes per block, or 0 */
	size_t group; /* values per unit, or 0 */
	int dict;
} variant;

static const variant variants[] = {
    {"block-4k", (size_t)4 << 10, 0, 0},
    {"block-128k", (size_t)128 << 10, 0, 0},
    {"value", 0, 1, 0},
    {"value-dict", 0, 1, 1},
    {"group4-dict", 0, 4, 1},
    {"group8-dict", 0, 8, 1},
    {"group16-dict", 0, 16, 1},
    {"block-4k-dict", (size_t)4 << 10, 0, 1},
    {"block-8k-dict", (size_t)8 << 10, 0, 1},
    {"whole", 0, 0, 0}, /* block 0 and group 0: one unit */
};
#define VARIANT_COUNT N_OF(variants)

typedef struct run {
	const corpus *c;
	const variant *v;
	size_t units;
	size_t *first;    /* unit u holds values first[u] .. first[u+1]-1 */
	size_t *unit_of;  /* value -> unit */
	uint8_t *comp;    /* the frames, back to back */
	size_t *comp_off; /* unit u is comp[comp_off[u], comp_off[u+1]) */
	size_t max_unit;  /* largest unit's raw bytes */
	ZSTD_DCtx *dctx;
	ZSTD_DDict *ddict;
	uint8_t *scratch; /* a unit decompressed */
	uint8_t *out;     /* the value copied out */
	size_t *picks;
	size_t npicks;
	uint64_t expected; /* checksum of one observation's picks */
} run;

static void cut_units(run *r)
{
	const corpus *c = r->c;
	const variant *v = r->v;
	r->first = malloc((c->count + 2) * sizeof *r->first);
	r->unit_of = malloc(c->count * sizeof *r->unit_of);
	if (r->first == NULL || r->unit_of == NULL)
		bench_fail("out of memory");
	size_t u = 0, start = 0;
	r->first[0] = 0;
	for (size_t i = 0; i < c->count; i++) {
		r->unit_of[i] = u;
		size_t held = c->off[i + 1] - c->off[start];
		int close = v->block   ? held >= v->block
		            : v->group ? i + 1 - start == v->group
		                       : 0;
		if (close || i + 1 == c->count) {
			r->first[++u] = i + 1;
			start = i + 1;
		}
	}
	r->units = u;
	r->max_unit = 0;
	for (u = 0; u < r->units; u++) {
		size_t b = c->off[r->first[u + 1]] - c->off[r->first[u]];
		if (b > r->max_unit)
			r->max_unit = b;
	}
}

static void zcheck(size_t rc, const char *what)
{
	if (ZSTD_isError(rc))
		bench_fail("%s: %s", what, ZSTD_getErrorName(rc));
}

/* Trains the dictionary on every k-th value; returns its bytes. */
static void *train(const corpus *c, size_t *dict_len, double *ms)
{
	size_t cap = c->raw_len / 100 < DICT_MAX ? c->raw_len / 100 : DICT_MAX;
	size_t want = 100 * cap; /* sample bytes, zstd's advice */
	size_t step = c->raw_len > want ? (c->raw_len + want - 1) / want : 1;
	size_t n = 0, bytes = 0;
	size_t *sizes = malloc((c->count / step + 1) * sizeof *sizes);
	uint8_t *sample = bench_alloc(c->raw_len / step + DICT_MAX);
	if (sizes == NULL)
		bench_fail("out of memory");
	for (size_t i = 0; i < c->count; i += step) {
		size_t len = c->off[i + 1] - c->off[i];
		memcpy(sample + bytes, c->raw + c->off[i], len);
		bytes += len;
		sizes[n++] = len;
	}
	void *dict = bench_alloc(cap);
	uint64_t t0 = bench_now_ns();
	size_t got =
	    ZDICT_trainFromBuffer(dict, cap, sample, sizes, (unsigned)n);
	uint64_t t1 = bench_now_ns();
	if (ZDICT_isError(got))
		bench_fail("ZDICT_trainFromBuffer on %zu values (%zu bytes): "
		           "%s",
		           n, bytes, ZDICT_getErrorName(got));
	free(sizes);
	free(sample);
	*dict_len = got;
	*ms = (double)(t1 - t0) / 1e6;
	return dict;
}

static size_t compress_all(run *r, const void *dict, size_t dict_len)
{
	const corpus *c = r->c;
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	ZSTD_CDict *cdict = NULL;
	if (cctx == NULL)
		bench_fail("ZSTD_createCCtx failed");
	if (dict != NULL) {
		cdict = ZSTD_createCDict(dict, dict_len, LEVEL);
		r->ddict = ZSTD_createDDict(dict, dict_len);
		if (cdict == NULL || r->ddict == NULL)
			bench_fail("cannot digest the dictionary");
	}
	size_t cap = 0;
	for (size_t u = 0; u < r->units; u++)
		cap += ZSTD_compressBound(c->off[r->first[u + 1]] -
		                          c->off[r->first[u]]);
	r->comp = bench_alloc(cap);
	r->comp_off = malloc((r->units + 1) * sizeof *r->comp_off);
	if (r->comp_off == NULL)
		bench_fail("out of memory");
	size_t o = 0;
	for (size_t u = 0; u < r->units; u++) {
		const uint8_t *src = c->raw + c->off[r->first[u]];
		size_t len = c->off[r->first[u + 1]] - c->off[r->first[u]];
		size_t bound = ZSTD_compressBound(len);
		size_t got =
		    cdict ? ZSTD_compress_usingCDict(cctx, r->comp + o, bound,
		                                     src, len, cdict)
		          : ZSTD_compressCCtx(cctx, r->comp + o, bound, src,
		                              len, LEVEL);
		zcheck(got, "compress");
		r->comp_off[u] = o;
		o += got;
	}
	r->comp_off[r->units] = o;
	ZSTD_freeCDict(cdict);
	ZSTD_freeCCtx(cctx);
	return o;
}

static size_t decompress_unit(run *r, size_t u, uint8_t *dst, size_t cap)
{
	const uint8_t *src = r->comp + r->comp_off[u];
	size_t len = r->comp_off[u + 1] - r->comp_off[u];
	return r->ddict ? ZSTD_decompress_usingDDict(r->dctx, dst, cap, src,
	                                             len, r->ddict)
	                : ZSTD_decompressDCtx(r->dctx, dst, cap, src, len);
}

/* Every unit, byte for byte, before anything is timed. */
static void verify_all(run *r)
{
	const corpus *c = r->c;
	for (size_t u = 0; u < r->units; u++) {
		size_t want = c->off[r->first[u + 1]] - c->off[r->first[u]];
		size_t got = decompress_unit(r, u, r->scratch, r->max_unit);
		zcheck(got, "decompress");
		if (got != want ||
		    memcmp(r->scratch, c->raw + c->off[r->first[u]], want) != 0)
			bench_fail("%s: unit %zu decompresses to other bytes "
			           "(%zu, not %zu)",
			           r->v->name, u, got, want);
	}
}

/* ---- the observation ---------------------------------------------------- */

static uint64_t pick_sum(const uint8_t *p, size_t len)
{
	return len * 0x100000001b3ull + p[0] + ((uint64_t)p[len / 2] << 8) +
	       ((uint64_t)p[len - 1] << 16);
}

static double observe_read(void *ctx)
{
	run *r = ctx;
	const corpus *c = r->c;
	uint64_t acc = 0;
	uint64_t t0 = bench_now_ns();
	for (size_t k = 0; k < r->npicks; k++) {
		size_t i = r->picks[k], u = r->unit_of[i];
		size_t len = c->off[i + 1] - c->off[i];
		if (r->first[u + 1] - r->first[u] == 1) {
			size_t got = decompress_unit(r, u, r->out, len);
			if (ZSTD_isError(got) || got != len)
				bench_fail("value %zu: bad decompression", i);
		} else {
			size_t got =
			    decompress_unit(r, u, r->scratch, r->max_unit);
			if (ZSTD_isError(got))
				bench_fail("unit %zu: bad decompression", u);
			memcpy(r->out,
			       r->scratch + (c->off[i] - c->off[r->first[u]]),
			       len);
		}
		acc += pick_sum(r->out, len);
	}
	uint64_t t1 = bench_now_ns();
	/* The last pick, whole, and the checksum of all of them. */
	size_t last = r->picks[r->npicks - 1];
	if (memcmp(r->out, c->raw + c->off[last],
	           c->off[last + 1] - c->off[last]) != 0)
		bench_fail("%s: value %zu read back wrong", r->v->name, last);
	if (acc != r->expected)
		bench_fail("%s: the picks' checksum is %llx, not %llx",
		           r->v->name, (unsigned long long)acc,
		           (unsigned long long)r->expected);
	bench_sink(acc);
	return (double)(t1 - t0) / (double)r->npicks;
}

int main(int argc, char **argv)
{
	const char *wnames[3];
	size_t nw = 0;
	int have_packages = find_packages();
	if (have_packages)
		wnames[nw++] = "debian-packages";
	else
		fprintf(stderr,
		        "bench_values: no /var/lib/apt/lists/"
		        "*_main_binary-amd64_Packages[.lz4] here, so no "
		        "debian-packages workload\n");
	wnames[nw++] = "synthetic-json";
	wnames[nw] = NULL;
	const char *vnames[VARIANT_COUNT + 1];
	for (size_t i = 0; i < VARIANT_COUNT; i++)
		vnames[i] = variants[i].name;
	vnames[VARIANT_COUNT] = NULL;

	bench_opts o;
	bench_parse(&o, argc, argv, "values", wnames, vnames);

	corpus c = {0};
	if (strcmp(o.workload, "debian-packages") == 0)
		load_packages(&c);
	else
		load_json(&c);
	finish_corpus(&c);
	if (c.count == 0)
		bench_fail("%s: no records", o.workload);

	run r = {0};
	r.c = &c;
	for (size_t i = 0; i < VARIANT_COUNT; i++)
		if (strcmp(variants[i].name, o.variant) == 0)
			r.v = &variants[i];
	cut_units(&r);

	void *dict = NULL;
	size_t dict_len = 0;
	double train_ms = 0;
	if (r.v->dict)
		dict = train(&c, &dict_len, &train_ms);
	size_t stored = compress_all(&r, dict, dict_len) + dict_len;

	r.dctx = ZSTD_createDCtx();
	if (r.dctx == NULL)
		bench_fail("ZSTD_createDCtx failed");
	r.scratch = bench_alloc(r.max_unit + 1);
	r.out = bench_alloc(r.max_unit + 1);
	verify_all(&r);

	size_t avg_unit = c.raw_len / r.units;
	r.npicks = PICK_BUDGET / (avg_unit ? avg_unit : 1);
	if (r.npicks > PICKS)
		r.npicks = PICKS;
	if (r.npicks == 0)
		r.npicks = 1;
	r.picks = malloc(r.npicks * sizeof *r.picks);
	if (r.picks == NULL)
		bench_fail("out of memory");
	bench_rng rng = {0x5EED430000000001ull};
	for (size_t k = 0; k < r.npicks; k++) {
		size_t i = (size_t)bench_rng_below(&rng, c.count);
		r.picks[k] = i;
		r.expected +=
		    pick_sum(c.raw + c.off[i], c.off[i + 1] - c.off[i]);
	}
	fprintf(stderr,
	        "bench_values %s %s: %zu values, %zu raw bytes, %zu units, "
	        "%zu stored bytes (dictionary %zu), %zu picks\n",
	        o.workload, o.variant, c.count, c.raw_len, r.units, stored,
	        dict_len, r.npicks);

	bench_observe(&o, "read", "ns/value", observe_read, &r);
	double ratio = (double)stored / (double)c.raw_len;
	for (unsigned w = 0; w < o.warmups; w++)
		bench_row(&o, w, 1, "ratio", ratio, "x");
	for (unsigned it = 0; it < o.iterations; it++)
		bench_row(&o, it, 0, "ratio", ratio, "x");
	bench_row(&o, 0, 0, "units", (double)r.units, "frames");
	if (r.v->dict)
		bench_row(&o, 0, 0, "train", train_ms, "ms");

	ZSTD_freeDCtx(r.dctx);
	ZSTD_freeDDict(r.ddict);
	free(dict);
	return 0;
}
