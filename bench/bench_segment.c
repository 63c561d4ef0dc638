/*
 * bench_segment — reading and writing whole segments with libkvseg, in ns
 * per record or per lookup, in the four modes (variants typed-byte,
 * raw-byte, typed-bit, raw-bit). bench_segment_rocksdb.cpp and
 * bench_segment_lmdb.c run the same workloads on the same records
 * (bench_gen.h) as the peer variants rocksdb and lmdb.
 *
 * Every process first writes the workload's fixture to a segment in its own
 * temporary directory (kvs_writer, KVS_WRITER_NO_SYNC) and opens it with
 * kvs_segment_open (mmap). Workloads (bench/README.md lists the fixtures):
 *   frames-F   kvsi_segment_scan_frames over the whole segment
 *   cursor-F   kvs_cursor_first, then kvs_cursor_next to the end, adding
 *              each key's last byte and bit length to a checksum
 *   records-F  the same, plus kvs_cursor_value for every record, adding
 *              the value's length and last byte
 *   build-F    kvs_writer_open, kvs_writer_add_bytes for every record and
 *              kvs_writer_finish (NO_SYNC, so no fsync; the rename is in)
 *   lookup-present, lookup-absent (-hash: on the hash-like keys)
 *              100,000 kvs_cursor_lookup_bytes on a 262,144-record FF16
 *              segment, with kvs_cursor_value for each key found
 * The value is ns per record (scans, build) or per lookup. The timer covers
 * the loop only. Excluded: generating the records and probe keys, writing
 * and opening the segment, kvs_segment_verify and the comparison of every
 * record, of every probe's answer and of the frame count with the
 * generator's records, opening the cursor (once per process), comparing
 * each observation's checksum and count with the expected ones, and for
 * build the check of the new file's size and its removal.
 *
 * Raw framing has no tombstones: there a tombstone record of the fixture is
 * written as a value record with an empty value.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvseg/frames.h"
#include "kvseg/segment.h"

#include "bench_gen.h"
#include "bench_kvseg.h"
#include "harness.h"

static const char *const variant_names[] = {
    "typed-byte", "raw-byte", "typed-bit", "raw-bit", NULL,
};

/* ---- checks against the generator's records, before any timing ---------- */

static void verify_segment(kvs_segment *seg, const bench_seg_data *d, int typed)
{
	kvs_error err;
	memset(&err, 0, sizeof err);
	bench_kvs_check(kvs_segment_verify(seg, &err), &err,
	                "kvs_segment_verify");

	kvs_segment_info info;
	kvs_segment_info_get(seg, &info);
	bench_kvs_check_info(&info, d, typed, "segment info");

	uint64_t frames = 0;
	bench_kvs_check(kvsi_segment_scan_frames(seg, &frames), NULL,
	                "kvsi_segment_scan_frames");
	if (frames != d->n)
		bench_fail("kvsi_segment_scan_frames saw %llu records, not %zu",
		           (unsigned long long)frames, d->n);

	kvs_cursor *c = NULL;
	bench_kvs_check(kvs_cursor_open(&c, seg), NULL, "kvs_cursor_open");
	bench_kvs_check(kvs_cursor_first(c), NULL, "kvs_cursor_first");
	for (size_t i = 0; i < d->n; i++) {
		uint64_t bits;
		size_t len, got_len;
		const uint8_t *want = bench_seg_value(d, i, &len);
		const uint8_t *got = NULL;
		if (!kvs_cursor_valid(c) || kvs_cursor_ordinal(c) != i)
			bench_fail("the cursor left the records at %zu", i);
		const uint8_t *key = kvs_cursor_key(c, &bits);
		if (bits != 8 * (uint64_t)d->key_len ||
		    memcmp(key, bench_seg_key(d, i), d->key_len) != 0)
			bench_fail("record %zu has the wrong key", i);
		kvs_kind kind = typed && d->tombstone[i] ? KVS_KIND_TOMBSTONE
		                                         : KVS_KIND_VALUE;
		if (kvs_cursor_kind(c) != kind)
			bench_fail("record %zu has the wrong kind", i);
		if (kvs_cursor_value_len(c) != len)
			bench_fail("record %zu: kvs_cursor_value_len is wrong",
			           i);
		bench_kvs_check(kvs_cursor_value(c, &got, &got_len), NULL,
		                "kvs_cursor_value");
		if (got_len != len || (len && memcmp(got, want, len) != 0))
			bench_fail("record %zu has the wrong value", i);
		bench_kvs_check(kvs_cursor_next(c), NULL, "kvs_cursor_next");
	}
	if (kvs_cursor_valid(c) || kvs_cursor_ordinal(c) != d->n)
		bench_fail("the cursor did not end after %zu records", d->n);
	kvs_cursor_close(c);
}

/* Every probe: found exactly when the generator has the key, with its
 * value; otherwise positioned at the lower bound. */
static void verify_lookups(kvs_cursor *c, const bench_seg_data *d,
                           const uint8_t *probes, size_t q)
{
	for (size_t j = 0; j < q; j++) {
		const uint8_t *p = probes + j * d->key_len;
		bool found = false;
		bench_kvs_check(
		    kvs_cursor_lookup_bytes(c, p, d->key_len, &found), NULL,
		    "kvs_cursor_lookup_bytes");
		size_t i = bench_seg_find(d, p);
		if (found != (i != d->n))
			bench_fail("probe %zu: found is %d", j, (int)found);
		if (!found) {
			size_t lo = 0, hi = d->n;
			while (lo < hi) {
				size_t mid = lo + (hi - lo) / 2;
				if (memcmp(bench_seg_key(d, mid), p,
				           d->key_len) < 0)
					lo = mid + 1;
				else
					hi = mid;
			}
			if (kvs_cursor_ordinal(c) != lo)
				bench_fail(
				    "absent probe %zu: at record %llu, "
				    "not at the lower bound %zu",
				    j,
				    (unsigned long long)kvs_cursor_ordinal(c),
				    lo);
			continue;
		}
		size_t len, got_len;
		const uint8_t *want = bench_seg_value(d, i, &len);
		const uint8_t *got = NULL;
		bench_kvs_check(kvs_cursor_value(c, &got, &got_len), NULL,
		                "kvs_cursor_value");
		if (kvs_cursor_ordinal(c) != i || got_len != len ||
		    (len && memcmp(got, want, len) != 0))
			bench_fail("probe %zu: wrong record or value", j);
	}
}

/* ---- observations ------------------------------------------------------- */

typedef struct run {
	const bench_seg_data *d;
	kvs_segment *seg;
	kvs_cursor *cursor;
	const kvs_writer_options *opt;
	const char *build_path;
	off_t build_size;
	const uint8_t *probes;
	size_t q;
	uint64_t expected; /* checksum */
	uint64_t count;    /* records seen or lookups found */
} run;

static double per(uint64_t t0, uint64_t t1, uint64_t ops)
{
	return (double)(t1 - t0) / (double)ops;
}

static double observe_frames(void *ctx)
{
	const run *r = ctx;
	uint64_t records = 0;
	uint64_t t0 = bench_now_ns();
	kvs_status st = kvsi_segment_scan_frames(r->seg, &records);
	uint64_t t1 = bench_now_ns();
	bench_kvs_check(st, NULL, "kvsi_segment_scan_frames");
	bench_seg_expect(0, records, r->expected, r->count);
	return per(t0, t1, r->d->n);
}

/* A full cursor scan adding every key's term to the checksum, and with
 * values every value's term too. Always inlined, so that each observer's
 * timed loop is compiled for its constant values (no test per record). */
static inline __attribute__((always_inline)) double scan(const run *r,
                                                         int values)
{
	kvs_cursor *c = r->cursor;
	uint64_t sum = 0, count = 0;
	uint64_t t0 = bench_now_ns();
	kvs_status st = kvs_cursor_first(c);
	while (st == KVS_OK && kvs_cursor_valid(c)) {
		uint64_t bits;
		const uint8_t *key = kvs_cursor_key(c, &bits);
		sum += bench_seg_key_term(key, bits);
		if (values) {
			const uint8_t *value = NULL;
			size_t len = 0;
			st = kvs_cursor_value(c, &value, &len);
			if (st != KVS_OK)
				break;
			sum += bench_seg_value_term(value, len);
		}
		count++;
		st = kvs_cursor_next(c);
	}
	uint64_t t1 = bench_now_ns();
	bench_kvs_check(st, NULL, values ? "records scan" : "cursor scan");
	bench_seg_expect(sum, count, r->expected, r->count);
	return per(t0, t1, r->d->n);
}

static double observe_cursor(void *ctx)
{
	return scan(ctx, 0);
}

static double observe_records(void *ctx)
{
	return scan(ctx, 1);
}

static double observe_lookup(void *ctx)
{
	const run *r = ctx;
	kvs_cursor *c = r->cursor;
	const size_t klen = r->d->key_len;
	uint64_t sum = 0, found_count = 0;
	kvs_status st = KVS_OK;
	uint64_t t0 = bench_now_ns();
	for (size_t j = 0; j < r->q && st == KVS_OK; j++) {
		bool found = false;
		st = kvs_cursor_lookup_bytes(c, r->probes + j * klen, klen,
		                             &found);
		if (st == KVS_OK && found) {
			const uint8_t *value = NULL;
			size_t len = 0;
			st = kvs_cursor_value(c, &value, &len);
			sum += bench_seg_value_term(value, len);
			found_count++;
		}
	}
	uint64_t t1 = bench_now_ns();
	bench_kvs_check(st, NULL, "lookups");
	bench_seg_expect(sum, found_count, r->expected, r->count);
	return per(t0, t1, r->q);
}

static double observe_build(void *ctx)
{
	const run *r = ctx;
	kvs_error err;
	memset(&err, 0, sizeof err);
	uint64_t t0 = bench_now_ns();
	kvs_status st = bench_kvs_write(r->build_path, r->d, r->opt, &err);
	uint64_t t1 = bench_now_ns();
	bench_kvs_check(st, &err, "building the segment");
	struct stat sb;
	if (stat(r->build_path, &sb) != 0 || sb.st_size != r->build_size)
		bench_fail("the built segment is not the verified one's size");
	if (unlink(r->build_path) != 0)
		bench_fail("cannot remove %s", r->build_path);
	return per(t0, t1, r->d->n);
}

int main(int argc, char **argv)
{
	bench_opts o;
	bench_seg_workload w;
	bench_seg_parse(&o, &w, argc, argv, 1, variant_names);
	kvs_writer_options opt = bench_kvs_mode_options(o.variant);
	int typed = opt.framing == KVS_FRAMING_TYPED;

	bench_seg_data d;
	bench_seg_make(&d, w.spec);

	char seg_path[4352], build_path[4352];
	snprintf(seg_path, sizeof seg_path, "%s/segment", bench_tmpdir());
	snprintf(build_path, sizeof build_path, "%s/build", bench_tmpdir());
	kvs_error err;
	memset(&err, 0, sizeof err);
	bench_kvs_check(bench_kvs_write(seg_path, &d, &opt, &err), &err,
	                "writing the fixture");
	kvs_segment *seg = NULL;
	bench_kvs_check(kvs_segment_open(&seg, seg_path, &err), &err,
	                "kvs_segment_open");
	verify_segment(seg, &d, typed);

	run r;
	memset(&r, 0, sizeof r);
	r.d = &d;
	r.seg = seg;
	r.opt = &opt;
	bench_kvs_check(kvs_cursor_open(&r.cursor, seg), NULL,
	                "kvs_cursor_open");

	double (*fn)(void *) = NULL;
	if (strcmp(w.op, "frames") == 0) {
		fn = observe_frames;
		r.count = d.n;
	} else if (strcmp(w.op, "cursor") == 0 ||
	           strcmp(w.op, "records") == 0) {
		int values = strcmp(w.op, "records") == 0;
		fn = values ? observe_records : observe_cursor;
		r.expected = bench_seg_scan_expected(&d, values, 0, &r.count);
	} else if (strcmp(w.op, "build") == 0) {
		struct stat sb;
		if (stat(seg_path, &sb) != 0)
			bench_fail("cannot stat %s", seg_path);
		fn = observe_build;
		r.build_path = build_path;
		r.build_size = sb.st_size;
	} else { /* lookup */
		r.q = BENCH_SEG_PROBES;
		r.probes = bench_seg_probes(&d, w.spec, w.present, r.q);
		r.expected =
		    bench_seg_lookup_expected(&d, r.probes, r.q, 0, &r.count);
		if (r.count != (w.present ? r.q : 0))
			bench_fail("the probe keys are wrong");
		verify_lookups(r.cursor, &d, r.probes, r.q);
		fn = observe_lookup;
	}
	bench_observe(&o, "time",
	              strcmp(w.op, "lookup") == 0 ? "ns/lookup" : "ns/record",
	              fn, &r);

	kvs_cursor_close(r.cursor);
	kvs_segment_unref(seg);
	free((void *)r.probes);
	bench_seg_free(&d);
	return 0;
}
