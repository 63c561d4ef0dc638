/*
 * bench_merge — the native merge (kvs_merge) of two segments into one, in
 * the four modes (variants typed-byte, raw-byte, typed-bit, raw-bit: inputs
 * and output in that mode), and the variant floor, a lower bound for any
 * merge of the same records. bench_merge_leveldb.cpp and
 * bench_merge_rocksdb.cpp merge the same records (bench_gen.h) as the peer
 * variants leveldb and rocksdb.
 *
 * Workloads (bench_gen.h, bench/README.md): grid-K-V-N, seed 000's grid of
 * two disjoint inputs of N records each, in ms per merge; merge-disjoint-F
 * and merge-overlap-F, seed 001's merges into 32,768 output records (1 or
 * 1.5 input records per output record), in ns per output record. Each
 * process also prints the output file's size (metric size, bytes).
 *
 * kvseg modes: every process writes the older and the newer input with
 * kvs_writer (sequences 1 and 2, KVS_WRITER_NO_SYNC) in its own temporary
 * directory, opens them (kvs_segment_open: mmap) and verifies them
 * (kvs_segment_verify, which reads every page, and their totals against
 * the generator). Before timing, one kvs_merge (output sequence 3,
 * tombstones kept) must give a file byte-identical to the one kvs_writer
 * makes of the expected merged records (computed from the generator, not
 * from the inputs) and the expected stats. The timer covers one kvs_merge
 * call on the open inputs: reading them, writing the output's temporary
 * file (into space kvs_merge reserves ahead, see
 * kvs_writer_options.size_hint), its index, CRCs, clipping and the rename
 * (no fsync). The peers write their files as their libraries do. Excluded:
 * everything above, and after each observation the check of its stats and
 * output size and the output's removal.
 *
 * floor: the same records as fixed-size structs (lengths, kind, the 16-byte
 * key and room for the workload's longest value) in two arrays; the timer
 * covers a two-way merge of the arrays into a third (compare the keys, copy
 * the record's bytes, the newer one on equal keys), one memcpy of as many
 * bytes as the two typed-byte input files hold and one of as many as the
 * typed-byte output file holds (all buffers allocated and touched before).
 * It does what every merge must do — read both inputs, compare, move the
 * records, produce the output's bytes — and nothing a file format adds
 * (decoding, encoding, an index, checksums, a file). The typed-byte file
 * sizes come from writing those files before timing.
 *
 * Raw framing has no tombstones: there a tombstone record of the fixture is
 * written as a value record with an empty value, in the inputs and in the
 * expected output.
 *
 * typed-byte-drop, typed-bit-drop: the same merge as a strong delete
 * (drop_tombstones, includes_oldest); the expected output is kvs_writer's
 * of the merged records without their tombstones.
 *
 * typed-byte-4way, typed-bit-4way: the merged records split among four
 * inputs instead (record i in input i % 4, sequences 1 to 4), merged into
 * the same output: kvs_merge's N-input path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvseg/merge.h"
#include "kvseg/segment.h"

#include "bench_gen.h"
#include "bench_kvseg.h"
#include "harness.h"

static const char *const variant_names[] = {
    "typed-byte",      "raw-byte",
    "typed-bit",       "raw-bit",
    "typed-byte-drop", "typed-bit-drop",
    "typed-byte-4way", "typed-bit-4way",
    "floor",           NULL,
};

#define MAX_WAYS 4 /* inputs of the -4way variants */

static off_t file_size(const char *path)
{
	struct stat sb;
	if (stat(path, &sb) != 0)
		bench_fail("cannot stat %s", path);
	return sb.st_size;
}

static void remove_file(const char *path)
{
	if (unlink(path) != 0)
		bench_fail("cannot remove %s", path);
}

/* The whole file at path, in memory; *len gets its size. */
static uint8_t *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		bench_fail("cannot open %s", path);
	*len = (size_t)file_size(path);
	uint8_t *buf = bench_alloc(*len + 1);
	if (fread(buf, 1, *len, f) != *len)
		bench_fail("cannot read %s", path);
	fclose(f);
	return buf;
}

/* Writes d with opt at path and opens it; fails unless it verifies and
 * holds d's totals. */
static kvs_segment *write_input(const char *path, const bench_seg_data *d,
                                const kvs_writer_options *opt)
{
	kvs_error err;
	memset(&err, 0, sizeof err);
	bench_kvs_check(bench_kvs_write(path, d, opt, &err), &err,
	                "writing an input");
	kvs_segment *seg = NULL;
	bench_kvs_check(kvs_segment_open(&seg, path, &err), &err,
	                "kvs_segment_open");
	bench_kvs_check(kvs_segment_verify(seg, &err), &err,
	                "kvs_segment_verify");
	kvs_segment_info info;
	kvs_segment_info_get(seg, &info);
	bench_kvs_check_info(&info, d, opt->framing == KVS_FRAMING_TYPED,
	                     "input info");
	return seg;
}

/* ---- kvs_merge ---------------------------------------------------------- */

/* d's records without its tombstones, in *out (free out->keys, ->values,
 * ->value_off and ->tombstone). */
static void without_tombstones(const bench_seg_data *d, bench_seg_data *out)
{
	memset(out, 0, sizeof *out);
	out->key_len = d->key_len;
	out->keys = bench_alloc(d->n * d->key_len + 1);
	out->value_off = bench_alloc((d->n + 1) * sizeof *out->value_off);
	out->values = bench_alloc(d->value_bytes + 1);
	out->tombstone = bench_alloc(d->n + 1);
	out->value_off[0] = 0;
	for (size_t i = 0; i < d->n; i++) {
		if (d->tombstone[i])
			continue;
		size_t j = out->n++;
		memcpy(out->keys + j * d->key_len, d->keys + i * d->key_len,
		       d->key_len);
		uint64_t len = d->value_off[i + 1] - d->value_off[i];
		memcpy(out->values + out->value_off[j],
		       d->values + d->value_off[i], (size_t)len);
		out->value_off[j + 1] = out->value_off[j] + len;
		out->tombstone[j] = 0;
	}
	out->value_bytes = out->value_off[out->n];
}

typedef struct merge_run {
	const bench_merge_workload *w;
	kvs_segment *inputs[MAX_WAYS]; /* oldest first */
	size_t n;
	kvs_merge_options opt;
	const char *out_path;
	off_t out_size;
	kvs_merge_stats expected;
} merge_run;

static void check_stats(const kvs_merge_stats *got, const kvs_merge_stats *want)
{
	if (got->input_records != want->input_records ||
	    got->output_records != want->output_records ||
	    got->replaced != want->replaced || got->dropped != want->dropped)
		bench_fail("kvs_merge stats: %llu in, %llu out, %llu replaced, "
		           "%llu dropped; expected %llu, %llu, %llu, %llu",
		           (unsigned long long)got->input_records,
		           (unsigned long long)got->output_records,
		           (unsigned long long)got->replaced,
		           (unsigned long long)got->dropped,
		           (unsigned long long)want->input_records,
		           (unsigned long long)want->output_records,
		           (unsigned long long)want->replaced,
		           (unsigned long long)want->dropped);
}

static double observe_merge(void *ctx)
{
	const merge_run *r = ctx;
	kvs_error err;
	memset(&err, 0, sizeof err);
	kvs_merge_stats stats;
	memset(&stats, 0, sizeof stats);
	uint64_t t0 = bench_now_ns();
	kvs_status st =
	    kvs_merge(r->inputs, r->n, r->out_path, &r->opt, &stats, &err);
	uint64_t t1 = bench_now_ns();
	bench_kvs_check(st, &err, "kvs_merge");
	check_stats(&stats, &r->expected);
	if (file_size(r->out_path) != r->out_size)
		bench_fail("the merged segment is not the checked one's size");
	remove_file(r->out_path);
	bench_sink(stats.output_records);
	return bench_merge_value(r->w, t0, t1,
	                         (size_t)r->expected.output_records);
}

static void run_kvseg(const bench_opts *o, const bench_merge_workload *w,
                      const bench_seg_data *merged, const bench_seg_data *older,
                      const bench_seg_data *newer)
{
	char ref_path[4352], out_path[4352];
	snprintf(ref_path, sizeof ref_path, "%s/reference", bench_tmpdir());
	snprintf(out_path, sizeof out_path, "%s/merged", bench_tmpdir());

	kvs_writer_options mode = bench_kvs_mode_options(o->variant);
	merge_run r;
	memset(&r, 0, sizeof r);
	r.w = w;
	r.out_path = out_path;
	/* -4way: the merged records split among MAX_WAYS inputs instead */
	unsigned ways = strstr(o->variant, "-4way") ? MAX_WAYS : 0;
	r.n = ways ? ways : 2;
	uint64_t input_records = 0;
	for (size_t i = 0; i < r.n; i++) {
		bench_seg_data part;
		const bench_seg_data *d =
		    bench_merge_way(w, ways, merged, older, newer, i, &part);
		char path[4352];
		snprintf(path, sizeof path, "%s/input-%zu", bench_tmpdir(), i);
		mode.sequence = i + 1;
		r.inputs[i] = write_input(path, d, &mode);
		input_records += d->n;
		if (ways)
			bench_seg_free(&part);
	}
	mode.sequence = r.n + 1;
	r.opt.output = mode;
	r.opt.includes_oldest = true;
	r.opt.drop_tombstones = strstr(o->variant, "-drop") != NULL;

	/* The expected output: kvs_writer fed the merged records. */
	kvs_error err;
	memset(&err, 0, sizeof err);
	bench_seg_data kept;
	if (r.opt.drop_tombstones)
		without_tombstones(merged, &kept);
	bench_kvs_check(bench_kvs_write(ref_path,
	                                r.opt.drop_tombstones ? &kept : merged,
	                                &mode, &err),
	                &err, "writing the expected output");
	size_t ref_len, out_len;
	uint8_t *ref = read_file(ref_path, &ref_len);
	r.out_size = (off_t)ref_len;
	r.expected.input_records = input_records;
	r.expected.output_records = merged->n;
	r.expected.replaced = input_records - merged->n;
	if (r.opt.drop_tombstones) {
		r.expected.output_records = kept.n;
		r.expected.dropped = merged->n - kept.n;
		free(kept.keys);
		free(kept.values);
		free(kept.value_off);
		free(kept.tombstone);
	}

	kvs_merge_stats stats;
	memset(&stats, 0, sizeof stats);
	bench_kvs_check(
	    kvs_merge(r.inputs, r.n, out_path, &r.opt, &stats, &err), &err,
	    "kvs_merge");
	check_stats(&stats, &r.expected);
	uint8_t *out = read_file(out_path, &out_len);
	if (out_len != ref_len || memcmp(out, ref, ref_len) != 0)
		bench_fail("the merged segment (%zu bytes) differs from "
		           "kvs_writer's of the merged records (%zu bytes)",
		           out_len, ref_len);
	free(out);
	free(ref);
	remove_file(out_path);
	remove_file(ref_path);

	bench_observe(o, "time", bench_merge_unit(w), observe_merge, &r);
	bench_row(o, 0, 0, "size", (double)r.out_size, "bytes");
	for (size_t i = 0; i < r.n; i++)
		kvs_segment_unref(r.inputs[i]);
}

/* ---- floor -------------------------------------------------------------- */

/* A record as a fixed-size struct: FLOOR_HEADER bytes, then room for the
 * workload's longest value. */
typedef struct floor_rec {
	uint32_t value_len;
	uint16_t key_len;
	uint8_t kind; /* kvs_kind */
	uint8_t pad;
	uint8_t key[16];
	uint8_t value[]; /* value_max bytes */
} floor_rec;

#define FLOOR_HEADER offsetof(floor_rec, value)

typedef struct floor_run {
	const bench_merge_workload *w;
	size_t slot; /* bytes per struct */
	const uint8_t *older, *newer;
	size_t older_n, newer_n, out_n;
	uint8_t *out;
	const uint8_t *in_bytes, *out_bytes; /* the memcpy sources */
	uint8_t *in_copy, *out_copy;
	size_t in_len, out_len; /* typed-byte input and output file bytes */
} floor_run;

static uint8_t *floor_array(const bench_seg_data *d, size_t slot)
{
	if (d->key_len > 16)
		bench_fail("floor: keys longer than 16 bytes");
	uint8_t *a = bench_alloc(d->n * slot + 1);
	memset(a, 0, d->n * slot + 1);
	for (size_t i = 0; i < d->n; i++) {
		floor_rec *f = (floor_rec *)(a + i * slot);
		size_t len;
		const uint8_t *v = bench_seg_value(d, i, &len);
		f->value_len = (uint32_t)len;
		f->key_len = (uint16_t)d->key_len;
		f->kind = d->tombstone[i] ? KVS_KIND_TOMBSTONE : KVS_KIND_VALUE;
		memcpy(f->key, bench_seg_key(d, i), d->key_len);
		memcpy(f->value, v, len);
	}
	return a;
}

/* The two-way merge of the struct arrays; returns the output count. */
static size_t floor_merge(const floor_run *r)
{
	const uint8_t *a = r->older, *b = r->newer;
	const uint8_t *a_end = a + r->older_n * r->slot;
	const uint8_t *b_end = b + r->newer_n * r->slot;
	uint8_t *out = r->out;
	const size_t slot = r->slot;
	while (a < a_end && b < b_end) {
		const floor_rec *x = (const floor_rec *)a;
		const floor_rec *y = (const floor_rec *)b;
		int c = memcmp(x->key, y->key, 16);
		const floor_rec *take = c < 0 ? x : y;
		memcpy(out, take, FLOOR_HEADER + take->value_len);
		out += slot;
		a += c <= 0 ? slot : 0;
		b += c >= 0 ? slot : 0;
	}
	for (; a < a_end; a += slot, out += slot)
		memcpy(out, a,
		       FLOOR_HEADER + ((const floor_rec *)a)->value_len);
	for (; b < b_end; b += slot, out += slot)
		memcpy(out, b,
		       FLOOR_HEADER + ((const floor_rec *)b)->value_len);
	return (size_t)(out - r->out) / slot;
}

static double observe_floor(void *ctx)
{
	const floor_run *r = ctx;
	uint64_t t0 = bench_now_ns();
	size_t n = floor_merge(r);
	memcpy(r->in_copy, r->in_bytes, r->in_len);
	memcpy(r->out_copy, r->out_bytes, r->out_len);
	uint64_t t1 = bench_now_ns();
	if (n != r->out_n)
		bench_fail("floor: %zu records, not %zu", n, r->out_n);
	bench_sink(n + r->in_copy[r->in_len - 1] + r->out_copy[0]);
	return bench_merge_value(r->w, t0, t1, r->out_n);
}

static void run_floor(const bench_opts *o, const bench_merge_workload *w,
                      const bench_seg_data *merged, const bench_seg_data *older,
                      const bench_seg_data *newer)
{
	/* The typed-byte file sizes: inputs and output. */
	char path[4352];
	snprintf(path, sizeof path, "%s/typed-byte", bench_tmpdir());
	kvs_writer_options mode = bench_kvs_mode_options("typed-byte");
	const bench_seg_data *files[3] = {older, newer, merged};
	size_t sizes[3];
	for (size_t k = 0; k < 3; k++) {
		kvs_error err;
		memset(&err, 0, sizeof err);
		bench_kvs_check(bench_kvs_write(path, files[k], &mode, &err),
		                &err, "writing a typed-byte file");
		sizes[k] = (size_t)file_size(path);
		remove_file(path);
	}

	floor_run r;
	memset(&r, 0, sizeof r);
	r.w = w;
	r.slot = (FLOOR_HEADER + w->out.value_max + 7) & ~(size_t)7;
	r.older = floor_array(older, r.slot);
	r.newer = floor_array(newer, r.slot);
	r.older_n = older->n;
	r.newer_n = newer->n;
	r.out_n = merged->n;
	r.out = bench_alloc(merged->n * r.slot + 1);
	memset(r.out, 0, merged->n * r.slot + 1);
	r.in_len = sizes[0] + sizes[1];
	r.out_len = sizes[2];
	uint8_t *bufs[4];
	size_t lens[4] = {r.in_len, r.in_len, r.out_len, r.out_len};
	for (size_t k = 0; k < 4; k++) {
		bufs[k] = bench_alloc(lens[k]);
		memset(bufs[k], (int)(0x5A + k), lens[k]);
	}
	r.in_bytes = bufs[0];
	r.in_copy = bufs[1];
	r.out_bytes = bufs[2];
	r.out_copy = bufs[3];

	/* The merged structs must be the merged records. */
	if (floor_merge(&r) != merged->n)
		bench_fail("floor: wrong record count");
	for (size_t i = 0; i < merged->n; i++) {
		const floor_rec *f = (const floor_rec *)(r.out + i * r.slot);
		size_t len;
		const uint8_t *v = bench_seg_value(merged, i, &len);
		kvs_kind kind =
		    merged->tombstone[i] ? KVS_KIND_TOMBSTONE : KVS_KIND_VALUE;
		if (f->key_len != merged->key_len ||
		    memcmp(f->key, bench_seg_key(merged, i), f->key_len) != 0 ||
		    f->kind != kind || f->value_len != len ||
		    memcmp(f->value, v, len) != 0)
			bench_fail("floor: record %zu is wrong", i);
	}

	bench_observe(o, "time", bench_merge_unit(w), observe_floor, &r);
	for (size_t k = 0; k < 4; k++)
		free(bufs[k]);
	free((void *)r.older);
	free((void *)r.newer);
	free(r.out);
}

int main(int argc, char **argv)
{
	bench_opts o;
	bench_merge_workload w;
	bench_merge_parse(&o, &w, argc, argv, variant_names);

	bench_seg_data merged, older, newer;
	bench_merge_make(&w, &merged, &older, &newer);
	if (strcmp(o.variant, "floor") == 0)
		run_floor(&o, &w, &merged, &older, &newer);
	else
		run_kvseg(&o, &w, &merged, &older, &newer);
	bench_seg_free(&merged);
	bench_seg_free(&older);
	bench_seg_free(&newer);
	return 0;
}
