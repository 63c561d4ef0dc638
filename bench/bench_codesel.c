/*
 * bench_codesel — chooses the bit profile's default count codes
 * (kvs_default_codes): for each field (LCP, KEYLEN, VALLEN) and each
 * candidate code, the bits that field takes over each fixture, with the
 * other two fields at their defaults.
 *
 * Candidates: exponential-Golomb EGk, k = 0..8; Golomb with m in {2, 3, 4,
 * 5, 7, 8, 12, 16, 32, 64}; fixed widths 1..64 that fit every value of the
 * field; each with delta 0 and delta 1 (docs/FORMAT.md §6.2).
 *
 * Fixtures (bench_gen.h; every 17th record a tombstone, typed framing):
 * structured and hash-like 16-byte keys with FF16 and FV 0-512 values,
 * --records records each (default 131,072, a middle size of seed 000's
 * merged grid; structured counters consecutive, as in a merge of two
 * disjoint inputs), and the long-prefix fixtures prefix64 and prefix4096
 * (64 or 4,096 shared bytes and an 8-byte counter, FF16 values) with
 * --records / 8 records each.
 *
 * How the bits are measured: a segment is written with kvs_writer
 * (custom_codes: the candidate for the field, kvs_default_codes for the
 * others), verified (kvs_segment_verify), and its stream_bits read from
 * kvs_segment_info_get. Independently, the field's values are computed from
 * the records as FORMAT.md §6.2 defines them (LCP for every non-restart
 * record, KEYLEN for every record, VALLEN for every value record; deltas
 * reset at restarts) and the candidate's code lengths summed: the field's
 * bits. For every candidate of a field on a fixture, stream_bits minus the
 * field's bits (the rest of the stream) must be the same, and a candidate
 * the computation says cannot hold some value (a fixed width too narrow, a
 * Golomb quotient over 2^16) must be refused by the writer; either
 * disagreement stops the program. All EG and Golomb candidates are written;
 * of the fixed widths, the narrowest one that fits a fixture up to one past
 * the narrowest that fits all of them, and the next narrower one (which must
 * be refused); wider fixed widths, which cost exactly their width per
 * value, are computed only (CSV column written = 0).
 *
 * Scores: bits per record of the field on each fixture; a candidate's score
 * is the sum of those over the fixtures (each fixture weighs the same). The
 * best score per field is the proposed default. Finally every fixture is
 * written with the proposed codes and with the current defaults, and both
 * totals are printed.
 *
 * Output: CSV on stdout (one row per field, candidate and fixture), the
 * tables on stderr. Options: --records N, --raw (raw framing: no
 * tombstones), --top N (rows per table, default 12), --quick (2,048
 * records: the smoke test). Nothing is timed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvseg/segment.h"

#include "bench_gen.h"
#include "bench_kvseg.h"
#include "harness.h"

#define FIXTURES            6
#define FIELDS              KVS_FIELD_COUNT
#define NOT_FIT             UINT64_MAX
#define GOLOMB_MAX_QUOTIENT ((uint64_t)1 << 16)

static const char *const field_names[FIELDS] = {"LCP", "KEYLEN", "VALLEN"};

typedef struct fixture {
	char name[64];
	bench_seg_spec spec;
	bench_seg_data d;
	/* Each field's values in the order written, plain and as zigzag
	 * deltas. */
	uint64_t *plain[FIELDS], *delta[FIELDS];
	size_t count[FIELDS];
} fixture;

typedef struct candidate {
	kvs_code_spec spec;
	char name[16];
	/* per fixture: the field's bits (NOT_FIT), the measured stream bits
	 * (0: not written) */
	uint64_t bits[FIXTURES];
	uint64_t stream_bits[FIXTURES];
	double score; /* sum of bits per record; negative: does not fit */
} candidate;

static int framing_raw;
static unsigned restart_interval = KVS_DEFAULT_RESTART_INTERVAL;

/* ---- the fields' values, from FORMAT.md §6.2 ----------------------------- */

static uint64_t lcp_bits(const uint8_t *a, const uint8_t *b, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (a[i] != b[i])
			return 8 * (uint64_t)i +
			       (uint64_t)__builtin_clz(
			           (unsigned)(a[i] ^ b[i])) -
			       24;
	return 8 * (uint64_t)len;
}

static uint64_t zigzag(uint64_t value, uint64_t previous)
{
	uint64_t d = value - previous; /* as a signed 64-bit difference */
	return d >> 63 ? ~d * 2 + 1 : d * 2;
}

static void field_values(fixture *x)
{
	const bench_seg_data *d = &x->d;
	for (int f = 0; f < FIELDS; f++) {
		x->plain[f] = bench_alloc((d->n + 1) * sizeof(uint64_t));
		x->delta[f] = bench_alloc((d->n + 1) * sizeof(uint64_t));
		x->count[f] = 0;
	}
	uint64_t prev[FIELDS] = {0, 0, 0};
	for (size_t i = 0; i < d->n; i++) {
		uint64_t v[FIELDS];
		int written[FIELDS] = {0, 1, 0};
		if (i % restart_interval == 0) {
			memset(prev, 0, sizeof prev);
		} else {
			v[KVS_FIELD_LCP] =
			    lcp_bits(bench_seg_key(d, i - 1),
			             bench_seg_key(d, i), d->key_len);
			written[KVS_FIELD_LCP] = 1;
		}
		v[KVS_FIELD_KEYLEN] = 8 * (uint64_t)d->key_len;
		if (framing_raw || !d->tombstone[i]) {
			size_t len;
			bench_seg_value(d, i, &len);
			v[KVS_FIELD_VALLEN] = len;
			written[KVS_FIELD_VALLEN] = 1;
		}
		for (int f = 0; f < FIELDS; f++) {
			if (!written[f])
				continue;
			x->plain[f][x->count[f]] = v[f];
			x->delta[f][x->count[f]] = zigzag(v[f], prev[f]);
			x->count[f]++;
			prev[f] = v[f];
		}
	}
}

/* ---- code lengths, from FORMAT.md §3 ------------------------------------- */

static unsigned bit_length(uint64_t v)
{
	return v ? 64 - (unsigned)__builtin_clzll(v) : 0;
}

static uint64_t code_length(const kvs_code_spec *c, uint64_t v)
{
	unsigned p = c->param;
	if (c->kind == KVS_CODE_EG) {
		uint64_t top = (uint64_t)1 << p;
		unsigned len = v > UINT64_MAX - top ? 65 : bit_length(v + top);
		return 2 * (uint64_t)len - p - 1;
	}
	if (c->kind == KVS_CODE_GOLOMB) {
		uint64_t q = v / p, r = v % p;
		if (q > GOLOMB_MAX_QUOTIENT)
			return NOT_FIT;
		unsigned b = bit_length(p - 1); /* ceil(log2 p), 0 for 1 */
		uint64_t u = ((uint64_t)1 << b) - p;
		return q + 1 + (r < u ? b - 1 : b);
	}
	/* fixed */
	return p < 64 && v >> p ? NOT_FIT : p;
}

static uint64_t field_bits(const fixture *x, int f, const kvs_code_spec *c)
{
	const uint64_t *v = c->delta ? x->delta[f] : x->plain[f];
	uint64_t sum = 0;
	for (size_t j = 0; j < x->count[f]; j++) {
		uint64_t len = code_length(c, v[j]);
		if (len == NOT_FIT)
			return NOT_FIT;
		sum += len;
	}
	return sum;
}

/* ---- writing ------------------------------------------------------------- */

/* Writes x with codes; returns KVS_OK and the segment's info, or the
 * writer's refusal. */
static kvs_status write_fixture(const fixture *x,
                                const kvs_code_spec codes[FIELDS],
                                kvs_segment_info *info)
{
	char path[4352];
	snprintf(path, sizeof path, "%s/segment", bench_tmpdir());
	kvs_writer_options opt;
	memset(&opt, 0, sizeof opt);
	opt.profile = KVS_PROFILE_BIT;
	opt.framing = framing_raw ? KVS_FRAMING_RAW : KVS_FRAMING_TYPED;
	opt.restart_interval = restart_interval;
	opt.custom_codes = true;
	memcpy(opt.codes, codes, sizeof opt.codes);
	opt.flags = KVS_WRITER_NO_SYNC;

	const bench_seg_data *d = &x->d;
	kvs_error err;
	memset(&err, 0, sizeof err);
	kvs_status st = bench_kvs_write(path, d, &opt, &err);
	if (st != KVS_OK) {
		unlink(path);
		return st;
	}

	bench_kvs_verified_info(path, info);
	unlink(path);
	if (info->records != d->n)
		bench_fail("%s: %llu records, not %zu", x->name,
		           (unsigned long long)info->records, d->n);
	for (int f = 0; f < FIELDS; f++)
		if (memcmp(&info->codes[f], &codes[f], sizeof codes[f]) != 0)
			bench_fail("%s: the header has other codes than were "
			           "asked for",
			           x->name);
	return KVS_OK;
}

/* ---- candidates ---------------------------------------------------------- */

static size_t make_candidates(candidate *out)
{
	static const unsigned moduli[] = {2, 3, 4, 5, 7, 8, 12, 16, 32, 64};
	size_t n = 0;
	for (unsigned delta = 0; delta <= 1; delta++) {
		for (unsigned k = 0; k <= 8; k++)
			out[n++].spec = (kvs_code_spec){KVS_CODE_EG, (uint8_t)k,
			                                (uint8_t)delta};
		for (size_t i = 0; i < sizeof moduli / sizeof moduli[0]; i++)
			out[n++].spec =
			    (kvs_code_spec){KVS_CODE_GOLOMB, (uint8_t)moduli[i],
			                    (uint8_t)delta};
		for (unsigned w = 1; w <= 64; w++)
			out[n++].spec = (kvs_code_spec){
			    KVS_CODE_FIXED, (uint8_t)w, (uint8_t)delta};
	}
	for (size_t i = 0; i < n; i++) {
		bench_kvs_check(kvs_code_spec_check(&out[i].spec), NULL,
		                "kvs_code_spec_check");
		kvs_code_spec_format(&out[i].spec, out[i].name);
	}
	return n;
}

static int same_code(const kvs_code_spec *a, const kvs_code_spec *b)
{
	return a->kind == b->kind && a->param == b->param &&
	       a->delta == b->delta;
}

/* The narrowest fixed width (with this delta) that holds every value of
 * field f on fixture x. */
static unsigned narrowest_fixed(const fixture *x, int f, unsigned delta)
{
	const uint64_t *v = delta ? x->delta[f] : x->plain[f];
	uint64_t max = 0;
	for (size_t j = 0; j < x->count[f]; j++)
		max = v[j] > max ? v[j] : max;
	unsigned w = bit_length(max);
	return w ? w : 1;
}

static int by_score(const void *a, const void *b)
{
	const candidate *x = a, *y = b;
	if ((x->score < 0) != (y->score < 0))
		return x->score < 0 ? 1 : -1;
	if (x->score != y->score)
		return x->score < y->score ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Measures every candidate for field f on every fixture and checks the
 * writer against the computed field bits. */
static void evaluate_field(int f, fixture *fx, candidate *cands, size_t nc,
                           const kvs_code_spec defaults[FIELDS])
{
	unsigned need_all[2] = {1, 1};
	unsigned need[FIXTURES][2];
	for (int x = 0; x < FIXTURES; x++)
		for (unsigned dl = 0; dl <= 1; dl++) {
			need[x][dl] = narrowest_fixed(&fx[x], f, dl);
			if (need[x][dl] > need_all[dl])
				need_all[dl] = need[x][dl];
		}

	for (int x = 0; x < FIXTURES; x++) {
		uint64_t rest = 0;
		int have_rest = 0;
		for (size_t c = 0; c < nc; c++) {
			candidate *cd = &cands[c];
			const kvs_code_spec *s = &cd->spec;
			cd->bits[x] = field_bits(&fx[x], f, s);
			cd->stream_bits[x] = 0;
			int write = 1;
			if (s->kind == KVS_CODE_FIXED) {
				unsigned lo = need[x][s->delta];
				unsigned hi = need_all[s->delta] + 1;
				write = (unsigned)s->param + 1 >= lo &&
				        s->param <= hi;
			}
			if (!write)
				continue;
			kvs_code_spec codes[FIELDS];
			memcpy(codes, defaults, sizeof codes);
			codes[f] = *s;
			kvs_segment_info info;
			kvs_status st = write_fixture(&fx[x], codes, &info);
			if (cd->bits[x] == NOT_FIT) {
				if (st == KVS_OK)
					bench_fail("%s %s on %s: written, but "
					           "some value does not fit",
					           field_names[f], cd->name,
					           fx[x].name);
				continue;
			}
			if (st != KVS_OK)
				bench_fail("%s %s on %s: the writer refused it "
				           "(%s)",
				           field_names[f], cd->name, fx[x].name,
				           kvs_strerror(st));
			cd->stream_bits[x] = info.stream_bits;
			uint64_t r = info.stream_bits - cd->bits[x];
			if (have_rest && r != rest)
				bench_fail("%s %s on %s: stream of %llu bits, "
				           "field of %llu: the rest differs "
				           "from the other candidates' (%llu)",
				           field_names[f], cd->name, fx[x].name,
				           (unsigned long long)info.stream_bits,
				           (unsigned long long)cd->bits[x],
				           (unsigned long long)rest);
			rest = r;
			have_rest = 1;
		}
	}
	for (size_t c = 0; c < nc; c++) {
		candidate *cd = &cands[c];
		cd->score = 0;
		for (int x = 0; x < FIXTURES; x++) {
			if (cd->bits[x] == NOT_FIT) {
				cd->score = -1;
				break;
			}
			cd->score += (double)cd->bits[x] / (double)fx[x].d.n;
		}
	}
}

static void print_field(int f, const fixture *fx, candidate *cands, size_t nc,
                        const kvs_code_spec defaults[FIELDS], size_t top,
                        kvs_code_spec *best)
{
	for (size_t c = 0; c < nc; c++)
		for (int x = 0; x < FIXTURES; x++) {
			const candidate *cd = &cands[c];
			printf("%s,%s,%s,%zu,", field_names[f], cd->name,
			       fx[x].name, fx[x].d.n);
			if (cd->bits[x] == NOT_FIT)
				printf(",,");
			else
				printf("%llu,%.4f,",
				       (unsigned long long)cd->bits[x],
				       (double)cd->bits[x] / (double)fx[x].d.n);
			printf("%llu,%d\n",
			       (unsigned long long)cd->stream_bits[x],
			       cd->stream_bits[x] != 0);
		}

	candidate *sorted = bench_alloc(nc * sizeof *sorted);
	memcpy(sorted, cands, nc * sizeof *sorted);
	qsort(sorted, nc, sizeof *sorted, by_score);
	*best = sorted[0].spec;

	FILE *t = stderr;
	char def[16];
	kvs_code_spec_format(&defaults[f], def);
	fprintf(t,
	        "\n%s: bits per record of the field, the %zu best "
	        "candidates by the sum over the fixtures (default now: "
	        "%s)\n\n| code |",
	        field_names[f], top, def);
	for (int x = 0; x < FIXTURES; x++)
		fprintf(t, " %s |", fx[x].name);
	fprintf(t, " sum |\n|---|");
	for (int x = 0; x < FIXTURES; x++)
		fprintf(t, "---:|");
	fprintf(t, "---:|\n");
	for (size_t c = 0; c < nc; c++) {
		const candidate *cd = &sorted[c];
		int is_default = same_code(&cd->spec, &defaults[f]);
		if (c >= top && !is_default)
			continue;
		if (c >= top && is_default)
			fprintf(t, "| ... |\n");
		fprintf(t, "| %s%s |", cd->name,
		        is_default ? " (default)" : "");
		for (int x = 0; x < FIXTURES; x++)
			if (cd->bits[x] == NOT_FIT)
				fprintf(t, " does not fit |");
			else
				fprintf(t, " %.3f |",
				        (double)cd->bits[x] /
				            (double)fx[x].d.n);
		if (cd->score < 0)
			fprintf(t, " - |\n");
		else
			fprintf(t, " **%.3f** |\n", cd->score);
		if (c >= top)
			break;
	}

	fprintf(t, "\nBest per fixture:");
	for (int x = 0; x < FIXTURES; x++) {
		size_t b = nc;
		for (size_t c = 0; c < nc; c++)
			if (cands[c].bits[x] != NOT_FIT &&
			    (b == nc || cands[c].bits[x] < cands[b].bits[x]))
				b = c;
		fprintf(t, " %s %s (%.3f)%s", fx[x].name, cands[b].name,
		        (double)cands[b].bits[x] / (double)fx[x].d.n,
		        x + 1 < FIXTURES ? ";" : "\n");
	}
	char name[16];
	kvs_code_spec_format(best, name);
	fprintf(t, "Best overall for %s: %s (sum %.3f bits per record)\n",
	        field_names[f], name, sorted[0].score);
	free(sorted);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_codesel [--records N] [--raw] [--top N] "
	           "[--quick]\nCSV on stdout, tables on stderr; see "
	           "bench/README.md.\n");
}

int main(int argc, char **argv)
{
	uint64_t records = 131072;
	size_t top = 12;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--records") == 0 && i + 1 < argc) {
			records = strtoull(argv[++i], NULL, 10);
		} else if (strcmp(argv[i], "--top") == 0 && i + 1 < argc) {
			top = (size_t)strtoull(argv[++i], NULL, 10);
		} else if (strcmp(argv[i], "--raw") == 0) {
			framing_raw = 1;
		} else if (strcmp(argv[i], "--quick") == 0) {
			records = 2048;
		} else if (strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (records < 64 || top == 0) {
		usage(stderr);
		return 2;
	}

	static fixture fx[FIXTURES];
	for (int x = 0; x < FIXTURES; x++) {
		bench_seg_spec *s = &fx[x].spec;
		int hash = x == 2 || x == 3;
		int var = x == 1 || x == 3;
		memset(s, 0, sizeof *s);
		s->keys = hash ? BENCH_KEYS_HASH : BENCH_KEYS_STRUCTURED;
		s->prefix_len = x == 4 ? 64 : x == 5 ? 4096 : hash ? 0 : 8;
		s->value_min = var ? 0 : 16;
		s->value_max = var ? 512 : 16;
		s->records = x >= 4 ? records / 8 : records;
		s->stride = 1;
		s->tombstone_every =
		    framing_raw ? 0 : BENCH_SEG_TOMBSTONE_EVERY;
		if (x >= 4)
			snprintf(fx[x].name, sizeof fx[x].name, "prefix%u-ff16",
			         s->prefix_len);
		else
			snprintf(fx[x].name, sizeof fx[x].name, "%s-%s",
			         hash ? "hash" : "structured",
			         var ? "fv" : "ff16");
		s->name = fx[x].name;
		bench_seg_make(&fx[x].d, s);
		field_values(&fx[x]);
	}

	kvs_code_spec defaults[FIELDS], best[FIELDS];
	kvs_default_codes(defaults);
	candidate *cands = bench_alloc(2 * (9 + 10 + 64) * sizeof *cands);
	size_t nc = make_candidates(cands);

	fprintf(stderr,
	        "bench_codesel: %s framing, restart interval %u; "
	        "records:",
	        framing_raw ? "raw" : "typed", restart_interval);
	for (int x = 0; x < FIXTURES; x++)
		fprintf(stderr, " %s %zu", fx[x].name, fx[x].d.n);
	fprintf(stderr, "\n");
	printf("field,code,fixture,records,field_bits,bits_per_record,"
	       "stream_bits,written\n");
	for (int f = 0; f < FIELDS; f++) {
		evaluate_field(f, fx, cands, nc, defaults);
		print_field(f, fx, cands, nc, defaults, top, &best[f]);
	}

	/* The proposed codes against the current defaults, whole streams. */
	char names[2][FIELDS][16];
	for (int f = 0; f < FIELDS; f++) {
		kvs_code_spec_format(&best[f], names[0][f]);
		kvs_code_spec_format(&defaults[f], names[1][f]);
	}
	fprintf(stderr,
	        "\nWhole files: proposed (LCP %s, KEYLEN %s, VALLEN %s) "
	        "against the current defaults (LCP %s, KEYLEN %s, VALLEN "
	        "%s)\n\n| fixture | records | proposed stream bits/record "
	        "| default stream bits/record | proposed file B/record | "
	        "default file B/record |\n|---|---:|---:|---:|---:|---:|\n",
	        names[0][0], names[0][1], names[0][2], names[1][0], names[1][1],
	        names[1][2]);
	for (int x = 0; x < FIXTURES; x++) {
		kvs_segment_info a, b;
		bench_kvs_check(write_fixture(&fx[x], best, &a), NULL,
		                "proposed codes");
		bench_kvs_check(write_fixture(&fx[x], defaults, &b), NULL,
		                "default codes");
		double n = (double)fx[x].d.n;
		fprintf(stderr, "| %s | %zu | %.3f | %.3f | %.3f | %.3f |\n",
		        fx[x].name, fx[x].d.n, (double)a.stream_bits / n,
		        (double)b.stream_bits / n, (double)a.file_bytes / n,
		        (double)b.file_bytes / n);
	}
	fprintf(stderr,
	        "\nProposed kvs_default_codes: LCP %s, KEYLEN %s, "
	        "VALLEN %s\n",
	        names[0][0], names[0][1], names[0][2]);

	for (int x = 0; x < FIXTURES; x++) {
		for (int f = 0; f < FIELDS; f++) {
			free(fx[x].plain[f]);
			free(fx[x].delta[f]);
		}
		bench_seg_free(&fx[x].d);
	}
	free(cands);
	return fflush(stdout) == 0 ? 0 : 1;
}
