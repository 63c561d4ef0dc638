/*
 * bench_segment_lmdb — the LMDB peer of bench_segment: the same records and
 * probe keys (bench_gen.h) in one LMDB environment, as variant 'lmdb'.
 *
 * The records go into the environment's main database in one write
 * transaction, with MDB_APPEND (they arrive sorted), the environment opened
 * with MDB_NOSYNC and a map size of twice the data plus 64 MiB. LMDB has no
 * tombstones: a tombstone record is stored with an empty value, like the raw
 * framing of libkvseg, so the key set is the same. Workloads (frames has no
 * peer):
 *   cursor-F   mdb_cursor_get MDB_FIRST, then MDB_NEXT to the end, adding
 *              each key's last byte and bit length to a checksum
 *   records-F  the same, also adding each value's length and last byte
 *   build-F    mdb_env_create, mdb_env_open, one write transaction with an
 *              MDB_APPEND put per record, mdb_txn_commit and mdb_env_close
 *              (MDB_NOSYNC, so no fsync)
 *   lookup-*   100,000 mdb_get, adding each value found to the checksum
 * The read transaction and the cursor are opened once per process, outside
 * the timer, like bench_segment's cursor. Excluded from the timer:
 * generating the records and probes, loading the environment, comparing
 * every record and every probe's answer with the generator's records, the
 * per-observation checksum comparison, and for build removing the files.
 *
 * With --sizes [--tombstones] it prints the size of data.mdb for each cell
 * of seed 000's size grid instead (bench_sizes runs it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lmdb.h>

#include "bench_gen.h"
#include "harness.h"

static const char *const variant_names[] = {"lmdb", NULL};

static void lcheck(int rc, const char *what)
{
	if (rc != MDB_SUCCESS)
		bench_fail("%s: %s", what, mdb_strerror(rc));
}

static size_t map_size(const bench_seg_data *d)
{
	return 2 * (d->n * (d->key_len + 64) + (size_t)d->value_bytes) +
	       ((size_t)64 << 20);
}

/* Opens a new environment in dir (made if needed) and puts every record;
 * the database handle goes to *dbi. Used untimed and timed (build). */
static MDB_env *load(const char *dir, const bench_seg_data *d, MDB_dbi *dbi)
{
	MDB_env *env = NULL;
	MDB_txn *txn = NULL;
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		bench_fail("cannot make %s: %s", dir, strerror(errno));
	lcheck(mdb_env_create(&env), "mdb_env_create");
	lcheck(mdb_env_set_mapsize(env, map_size(d)), "mdb_env_set_mapsize");
	lcheck(mdb_env_open(env, dir, MDB_NOSYNC, 0600), "mdb_env_open");
	lcheck(mdb_txn_begin(env, NULL, 0, &txn), "mdb_txn_begin");
	lcheck(mdb_dbi_open(txn, NULL, 0, dbi), "mdb_dbi_open");
	for (size_t i = 0; i < d->n; i++) {
		size_t len;
		const uint8_t *v = bench_seg_value(d, i, &len);
		MDB_val key = {d->key_len, (void *)bench_seg_key(d, i)};
		MDB_val val = {len, (void *)v};
		int rc = mdb_put(txn, *dbi, &key, &val, MDB_APPEND);
		if (rc != MDB_SUCCESS)
			bench_fail("mdb_put of record %zu: %s", i,
			           mdb_strerror(rc));
	}
	lcheck(mdb_txn_commit(txn), "mdb_txn_commit");
	return env;
}

static void remove_env(const char *dir)
{
	char path[4400];
	snprintf(path, sizeof path, "%s/data.mdb", dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/lock.mdb", dir);
	unlink(path);
}

static off_t data_size(const char *dir)
{
	char path[4400];
	struct stat sb;
	snprintf(path, sizeof path, "%s/data.mdb", dir);
	if (stat(path, &sb) != 0)
		bench_fail("cannot stat %s: %s", path, strerror(errno));
	return sb.st_size;
}

/* ---- checks against the generator's records, before any timing ---------- */

static void verify(MDB_txn *txn, MDB_cursor *c, MDB_dbi dbi,
                   const bench_seg_data *d, const uint8_t *probes, size_t q)
{
	MDB_val k, v;
	int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
	for (size_t i = 0; i < d->n; i++) {
		size_t len;
		const uint8_t *want = bench_seg_value(d, i, &len);
		if (rc != MDB_SUCCESS)
			bench_fail("the cursor stopped at record %zu: %s", i,
			           mdb_strerror(rc));
		if (k.mv_size != d->key_len ||
		    memcmp(k.mv_data, bench_seg_key(d, i), d->key_len) != 0 ||
		    v.mv_size != len ||
		    (len && memcmp(v.mv_data, want, len) != 0))
			bench_fail("record %zu is wrong", i);
		rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
	}
	if (rc != MDB_NOTFOUND)
		bench_fail("the cursor did not end after %zu records", d->n);
	for (size_t j = 0; j < q; j++) {
		const uint8_t *p = probes + j * d->key_len;
		MDB_val key = {d->key_len, (void *)p};
		size_t i = bench_seg_find(d, p);
		rc = mdb_get(txn, dbi, &key, &v);
		if (rc != (i == d->n ? MDB_NOTFOUND : MDB_SUCCESS))
			bench_fail("probe %zu: %s", j, mdb_strerror(rc));
		if (rc == MDB_SUCCESS) {
			size_t len;
			const uint8_t *want = bench_seg_value(d, i, &len);
			if (v.mv_size != len ||
			    (len && memcmp(v.mv_data, want, len) != 0))
				bench_fail("probe %zu: wrong value", j);
		}
	}
}

/* ---- observations ------------------------------------------------------- */

typedef struct run {
	const bench_seg_data *d;
	MDB_txn *txn;
	MDB_cursor *cursor;
	MDB_dbi dbi;
	const char *build_dir;
	off_t build_size;
	const uint8_t *probes;
	size_t q;
	uint64_t expected;
	uint64_t count;
} run;

static double scan(const run *r, int values)
{
	MDB_val k, v;
	uint64_t sum = 0, count = 0;
	uint64_t t0 = bench_now_ns();
	int rc = mdb_cursor_get(r->cursor, &k, &v, MDB_FIRST);
	while (rc == MDB_SUCCESS) {
		sum += bench_seg_key_term((const uint8_t *)k.mv_data,
		                          8 * (uint64_t)k.mv_size);
		if (values)
			sum += bench_seg_value_term((const uint8_t *)v.mv_data,
			                            v.mv_size);
		count++;
		rc = mdb_cursor_get(r->cursor, &k, &v, MDB_NEXT);
	}
	uint64_t t1 = bench_now_ns();
	if (rc != MDB_NOTFOUND)
		bench_fail("scan: %s", mdb_strerror(rc));
	bench_seg_expect(sum, count, r->expected, r->count);
	return (double)(t1 - t0) / (double)r->d->n;
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
	const size_t klen = r->d->key_len;
	uint64_t sum = 0, found = 0;
	int rc = MDB_SUCCESS;
	uint64_t t0 = bench_now_ns();
	for (size_t j = 0; j < r->q; j++) {
		MDB_val key = {klen, (void *)(r->probes + j * klen)};
		MDB_val v;
		rc = mdb_get(r->txn, r->dbi, &key, &v);
		if (rc == MDB_SUCCESS) {
			sum += bench_seg_value_term((const uint8_t *)v.mv_data,
			                            v.mv_size);
			found++;
		} else if (rc != MDB_NOTFOUND) {
			break;
		}
	}
	uint64_t t1 = bench_now_ns();
	if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
		bench_fail("mdb_get: %s", mdb_strerror(rc));
	bench_seg_expect(sum, found, r->expected, r->count);
	return (double)(t1 - t0) / (double)r->q;
}

static double observe_build(void *ctx)
{
	const run *r = ctx;
	MDB_dbi dbi;
	uint64_t t0 = bench_now_ns();
	MDB_env *env = load(r->build_dir, r->d, &dbi);
	mdb_env_close(env);
	uint64_t t1 = bench_now_ns();
	if (data_size(r->build_dir) != r->build_size)
		bench_fail("the new data.mdb is not the verified one's size");
	remove_env(r->build_dir);
	return (double)(t1 - t0) / (double)r->d->n;
}

/* --sizes: data.mdb bytes for each cell of seed 000's grid, as CSV. */
static int sizes(int tombstones)
{
	char dir[4352];
	snprintf(dir, sizeof dir, "%s/sizes", bench_tmpdir());
	printf("cell,records,tombstones,bytes\n");
	for (size_t cell = 0; cell < BENCH_SIZES_CELLS; cell++) {
		bench_seg_spec spec;
		char name[64];
		bench_seg_data d;
		MDB_dbi dbi;
		bench_sizes_spec(cell, tombstones, &spec, name);
		bench_seg_make(&d, &spec);
		MDB_env *env = load(dir, &d, &dbi);
		mdb_env_close(env);
		printf("%s,%zu,%zu,%lld\n", name, d.n, d.tombstones,
		       (long long)data_size(dir));
		remove_env(dir);
		bench_seg_free(&d);
	}
	return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "--sizes") == 0)
		return sizes(argc >= 3 && strcmp(argv[2], "--tombstones") == 0);

	bench_opts o;
	bench_seg_workload w;
	bench_seg_parse(&o, &w, argc, argv, 0, variant_names);

	bench_seg_data d;
	bench_seg_make(&d, w.spec);
	char dir[4352], build_dir[4352];
	snprintf(dir, sizeof dir, "%s/env", bench_tmpdir());
	snprintf(build_dir, sizeof build_dir, "%s/build", bench_tmpdir());

	run r;
	memset(&r, 0, sizeof r);
	r.d = &d;
	MDB_env *env = load(dir, &d, &r.dbi);
	lcheck(mdb_txn_begin(env, NULL, MDB_RDONLY, &r.txn), "mdb_txn_begin");
	lcheck(mdb_cursor_open(r.txn, r.dbi, &r.cursor), "mdb_cursor_open");
	if (strcmp(w.op, "lookup") == 0) {
		r.q = BENCH_SEG_PROBES;
		r.probes = bench_seg_probes(&d, w.spec, w.present, r.q);
	}
	verify(r.txn, r.cursor, r.dbi, &d, r.probes, r.q);

	double (*fn)(void *) = NULL;
	if (strcmp(w.op, "cursor") == 0 || strcmp(w.op, "records") == 0) {
		int values = strcmp(w.op, "records") == 0;
		fn = values ? observe_records : observe_cursor;
		r.expected = bench_seg_scan_expected(&d, values, 0, &r.count);
	} else if (strcmp(w.op, "build") == 0) {
		fn = observe_build;
		r.build_dir = build_dir;
		r.build_size = data_size(dir);
	} else if (strcmp(w.op, "lookup") == 0) {
		r.expected =
		    bench_seg_lookup_expected(&d, r.probes, r.q, 0, &r.count);
		if (r.count != (w.present ? r.q : 0))
			bench_fail("the probe keys are wrong");
		fn = observe_lookup;
	} else {
		bench_fail("LMDB has no workload %s", o.workload);
	}
	bench_observe(&o, "time",
	              strcmp(w.op, "lookup") == 0 ? "ns/lookup" : "ns/record",
	              fn, &r);

	mdb_cursor_close(r.cursor);
	mdb_txn_abort(r.txn);
	mdb_env_close(env);
	free((void *)r.probes);
	bench_seg_free(&d);
	return 0;
}
