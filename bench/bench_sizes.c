/*
 * bench_sizes — the exact file sizes of seed 000's grid: the four modes x
 * structured / hash-like keys x FF16 / FV 0-512 values x three sizes, with
 * the space components of each file (kvs_segment_info_get), seed 000's
 * published figures for the same cells, and the RocksDB SST (uncompressed)
 * and LMDB data file sizes of the same records when those peers are built.
 *
 * Seed 000 measured the merged output of two disjoint inputs, so a cell has
 * 2 x the records per input: 8,192 / 131,072 / 524,288 for FF16 and
 * 8,192 / 131,072 / 262,144 for FV (bench_gen.h, bench_sizes_spec). Its
 * inputs hold present values only, and so do these cells unless
 * --tombstones makes every 17th record a tombstone (raw modes and LMDB then
 * store an empty value, RocksDB a deletion).
 *
 * Output: one CSV row per mode and cell on stdout, the tables on stderr.
 * Options:
 *   --tombstones       every 17th record a tombstone
 *   --quick            only the 8,192-record cells (the smoke test)
 *   --rocksdb PROGRAM  bench_segment_rocksdb to ask for SST sizes
 *                      (default: the one built with this program)
 *   --lmdb PROGRAM     bench_segment_lmdb, likewise
 *   --no-peers         neither
 * Nothing is timed. Every file is opened and fully verified
 * (kvs_segment_verify) and its record count and totals are checked against
 * the generator before its size is reported.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvseg/segment.h"

#include "bench_gen.h"
#include "bench_kvseg.h"
#include "harness.h"

#ifndef BENCH_SIZES_ROCKSDB
#define BENCH_SIZES_ROCKSDB NULL
#endif
#ifndef BENCH_SIZES_LMDB
#define BENCH_SIZES_LMDB NULL
#endif

#define MODES 4

static const char *const mode_names[MODES] = {"raw-bit", "raw-byte",
                                              "typed-bit", "typed-byte"};

/*
 * Seed 000, "Exact encoded output sizes": complete file bytes of the
 * candidate revision, cells in bench_sizes_spec order, modes in
 * mode_names order (raw bit, raw byte, typed bit, typed byte candidate).
 */
static const uint64_t seed000_bytes[BENCH_SIZES_CELLS][MODES] = {
    {142528, 156960, 152888, 173544},         /* structured FF16 4,096 */
    {2276680, 2507608, 2441152, 2772816},     /* structured FF16 65,536 */
    {9105952, 10029680, 9763608, 11090488},   /* structured FF16 262,144 */
    {2130192, 2137376, 2125240, 2145584},     /* structured FV 4,096 */
    {34086264, 34201176, 34005736, 34332512}, /* structured FV 65,536 */
    {68171576, 68401400, 68010440, 68664072}, /* structured FV 131,072 */
    {277376, 271048, 287712, 287512},         /* hash-like FF16 4,096 */
    {4370152, 4262496, 4534352, 4525832},     /* hash-like FF16 65,536 */
    {17350048, 16880552, 18005776, 17933976}, /* hash-like FF16 262,144 */
    {2264776, 2251296, 2259808, 2259504},     /* hash-like FV 4,096 */
    {36175696, 35953440, 36094904, 36084776}, /* hash-like FV 65,536 */
    {72318160, 71855496, 72156216, 72118160}, /* hash-like FV 131,072 */
};

/* Seed 000, "Space components", for its largest cell of each kind (cases
 * 2, 5, 8 and 11): FC logical bits, FC storage bytes, EF bytes, other
 * bytes. */
typedef struct components {
	uint64_t stream_bits, stream_bytes, ef_bytes, other_bytes;
} components;

static const components seed000_parts[4][MODES] = {
    {{72506359, 9063295, 42432, 225},
     {79958104, 9994763, 34688, 229},
     {77766721, 9720841, 42448, 319},
     {88346712, 11043339, 46920, 229}},
    {{545066468, 68133309, 38040, 227},
     {546957360, 68369670, 31504, 226},
     {543776762, 67972096, 38032, 312},
     {549058592, 68632324, 31520, 228}},
    {{138326960, 17290870, 58952, 226},
     {134679352, 16834919, 45408, 225},
     {143572090, 17946512, 58952, 312},
     {143067960, 17883495, 50256, 225}},
    {{578237302, 72279663, 38272, 225},
     {574588472, 71823559, 31712, 225},
     {576941042, 72117631, 38272, 313},
     {576689704, 72086213, 31720, 227}},
};

static const components *seed000_components(size_t cell, size_t mode)
{
	return cell % 3 == 2 ? &seed000_parts[cell / 3][mode] : NULL;
}

typedef struct cell_result {
	int done;
	char name[64];
	size_t records, tombstones;
	kvs_segment_info info[MODES];
	long long rocksdb, lmdb; /* -1: not measured */
} cell_result;

static void measure(const bench_seg_data *d, size_t mode, const char *path,
                    kvs_segment_info *info)
{
	kvs_writer_options opt = bench_kvs_mode_options(mode_names[mode]);
	kvs_error err;
	memset(&err, 0, sizeof err);
	bench_kvs_check(bench_kvs_write(path, d, &opt, &err), &err,
	                "writing the segment");
	bench_kvs_verified_info(path, info);
	if (unlink(path) != 0)
		bench_fail("cannot remove %s", path);
	bench_kvs_check_info(info, d, opt.framing == KVS_FRAMING_TYPED,
	                     mode_names[mode]);
}

/* Runs PROGRAM --sizes and stores each cell's bytes through the offset. */
static void ask_peer(const char *program, int tombstones, cell_result *cells,
                     size_t which)
{
	if (program == NULL)
		return;
	if (access(program, X_OK) != 0) {
		fprintf(stderr,
		        "bench_sizes: no peer program %s; its column "
		        "stays empty\n",
		        program);
		return;
	}
	char cmd[4400];
	snprintf(cmd, sizeof cmd, "'%s' --sizes%s", program,
	         tombstones ? " --tombstones" : "");
	FILE *f = popen(cmd, "r");
	if (f == NULL)
		bench_fail("cannot run %s", program);
	char line[512];
	while (fgets(line, sizeof line, f) != NULL) {
		char name[64];
		unsigned long long records, tomb;
		long long bytes;
		if (sscanf(line, "%63[^,],%llu,%llu,%lld", name, &records,
		           &tomb, &bytes) != 4)
			continue; /* the header */
		for (size_t c = 0; c < BENCH_SIZES_CELLS; c++) {
			if (strcmp(cells[c].name, name) != 0)
				continue;
			if (records != cells[c].records ||
			    tomb != cells[c].tombstones)
				bench_fail("%s disagrees about cell %s",
				           program, name);
			if (which == 0)
				cells[c].rocksdb = bytes;
			else
				cells[c].lmdb = bytes;
		}
	}
	if (pclose(f) != 0)
		bench_fail("%s --sizes failed", program);
}

static const char *keys_name(size_t cell)
{
	return cell >= 6 ? "hash-like" : "structured";
}

static const char *values_name(size_t cell)
{
	return (cell / 3) % 2 ? "FV 0-512" : "FF16";
}

static void ratio(char *out, size_t size, double a, double b)
{
	if (b > 0)
		snprintf(out, size, "%.3f", a / b);
	else
		snprintf(out, size, "-");
}

static void print_csv(const cell_result *cells)
{
	printf("mode,cell,keys,values,records,tombstones,file_bytes,"
	       "bytes_per_record,stream_bits,stream_bytes,ef_bytes,"
	       "fence_bytes,other_bytes,seed000_bytes,seed000_bytes_per_record,"
	       "vs_seed000,seed000_stream_bits,seed000_stream_bytes,"
	       "seed000_ef_bytes,seed000_other_bytes,rocksdb_sst_bytes,"
	       "vs_rocksdb,lmdb_bytes,vs_lmdb\n");
	for (size_t c = 0; c < BENCH_SIZES_CELLS; c++) {
		const cell_result *r = &cells[c];
		if (!r->done)
			continue;
		for (size_t m = 0; m < MODES; m++) {
			const kvs_segment_info *in = &r->info[m];
			double bytes = (double)in->file_bytes;
			double ref = (double)seed000_bytes[c][m];
			const components *p = seed000_components(c, m);
			char vs_seed[32], vs_rdb[32], vs_lmdb[32];
			ratio(vs_seed, sizeof vs_seed, bytes, ref);
			ratio(vs_rdb, sizeof vs_rdb, bytes, (double)r->rocksdb);
			ratio(vs_lmdb, sizeof vs_lmdb, bytes, (double)r->lmdb);
			printf("%s,%s,%s,%s,%zu,%zu,%llu,%.4f,%llu,%llu,%llu,"
			       "%llu,%llu,%.0f,%.4f,%s,",
			       mode_names[m], r->name, keys_name(c),
			       values_name(c), r->records, r->tombstones,
			       (unsigned long long)in->file_bytes,
			       bytes / (double)r->records,
			       (unsigned long long)in->stream_bits,
			       (unsigned long long)in->stream_bytes,
			       (unsigned long long)in->ef_bytes,
			       (unsigned long long)in->fence_bytes,
			       (unsigned long long)in->other_bytes, ref,
			       ref / (double)r->records, vs_seed);
			if (p)
				printf("%llu,%llu,%llu,%llu,",
				       (unsigned long long)p->stream_bits,
				       (unsigned long long)p->stream_bytes,
				       (unsigned long long)p->ef_bytes,
				       (unsigned long long)p->other_bytes);
			else
				printf(",,,,");
			if (r->rocksdb >= 0)
				printf("%lld,%s,", r->rocksdb, vs_rdb);
			else
				printf(",,");
			if (r->lmdb >= 0)
				printf("%lld,%s\n", r->lmdb, vs_lmdb);
			else
				printf(",\n");
		}
	}
}

static void print_tables(const cell_result *cells, int tombstones)
{
	FILE *t = stderr;
	fprintf(t, "\nFile bytes (bytes per record)%s\n\n",
	        tombstones ? ", every 17th record a tombstone"
	                   : ", present values only (as seed 000)");
	fprintf(t, "| keys | values | records | raw-bit | raw-byte | "
	           "typed-bit | typed-byte | RocksDB SST | LMDB |\n");
	fprintf(t, "|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
	for (size_t c = 0; c < BENCH_SIZES_CELLS; c++) {
		const cell_result *r = &cells[c];
		if (!r->done)
			continue;
		double n = (double)r->records;
		fprintf(t, "| %s | %s | %zu |", keys_name(c), values_name(c),
		        r->records);
		for (size_t m = 0; m < MODES; m++)
			fprintf(t, " %llu (%.2f) |",
			        (unsigned long long)r->info[m].file_bytes,
			        (double)r->info[m].file_bytes / n);
		long long peers[2] = {r->rocksdb, r->lmdb};
		for (size_t p = 0; p < 2; p++)
			if (peers[p] >= 0)
				fprintf(t, " %lld (%.2f) |", peers[p],
				        (double)peers[p] / n);
			else
				fprintf(t, " - |");
		fprintf(t, "\n");
	}

	fprintf(t,
	        "\nAgainst seed 000 (its candidate revision) and the "
	        "peers: bytes per record and ratios (below 1: smaller "
	        "than the other)%s\n\n",
	        tombstones ? "; seed 000 had no tombstones, so its column "
	                     "is not the same records"
	                   : "");
	fprintf(t, "| keys | values | records | mode | B/record | seed 000 "
	           "B/record | /seed 000 | /RocksDB | /LMDB |\n");
	fprintf(t, "|---|---|---:|---|---:|---:|---:|---:|---:|\n");
	unsigned below_seed = 0, below_rocksdb = 0, cells_done = 0,
	         rocksdb_cells = 0;
	for (size_t c = 0; c < BENCH_SIZES_CELLS; c++) {
		const cell_result *r = &cells[c];
		if (!r->done)
			continue;
		double n = (double)r->records;
		for (size_t m = 0; m < MODES; m++) {
			double bytes = (double)r->info[m].file_bytes;
			double ref = (double)seed000_bytes[c][m];
			char a[32], b[32], l[32];
			ratio(a, sizeof a, bytes, ref);
			ratio(b, sizeof b, bytes, (double)r->rocksdb);
			ratio(l, sizeof l, bytes, (double)r->lmdb);
			fprintf(t,
			        "| %s | %s | %zu | %s | %.3f | %.3f | %s | "
			        "%s | %s |\n",
			        keys_name(c), values_name(c), r->records,
			        mode_names[m], bytes / n, ref / n, a, b, l);
			cells_done++;
			below_seed += bytes <= ref;
			if (r->rocksdb >= 0) {
				rocksdb_cells++;
				below_rocksdb += bytes < (double)r->rocksdb;
			}
		}
	}
	fprintf(t, "\n%u of %u files at most seed 000's size", below_seed,
	        cells_done);
	if (rocksdb_cells)
		fprintf(t, "; %u of %u smaller than RocksDB's SST",
		        below_rocksdb, rocksdb_cells);
	fprintf(t, ".\n");

	fprintf(t, "\nSpace components (kvs_segment_info_get; seed 000's "
	           "rows for its largest cells)\n\n");
	fprintf(t, "| keys | values | records | mode | FC logical bits | FC "
	           "storage bytes | EF bytes | fence bytes | other bytes | "
	           "total bytes | B/record |\n");
	fprintf(t, "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
	for (size_t c = 0; c < BENCH_SIZES_CELLS; c++) {
		const cell_result *r = &cells[c];
		if (!r->done)
			continue;
		double n = (double)r->records;
		for (size_t m = 0; m < MODES; m++) {
			const kvs_segment_info *in = &r->info[m];
			fprintf(t,
			        "| %s | %s | %zu | %s | %llu | %llu | %llu "
			        "| %llu | %llu | %llu | %.3f |\n",
			        keys_name(c), values_name(c), r->records,
			        mode_names[m],
			        (unsigned long long)in->stream_bits,
			        (unsigned long long)in->stream_bytes,
			        (unsigned long long)in->ef_bytes,
			        (unsigned long long)in->fence_bytes,
			        (unsigned long long)in->other_bytes,
			        (unsigned long long)in->file_bytes,
			        (double)in->file_bytes / n);
			const components *p = seed000_components(c, m);
			if (p)
				fprintf(t,
				        "| | | | seed 000 %s | %llu | %llu "
				        "| %llu | - | %llu | %llu | %.3f |\n",
				        mode_names[m],
				        (unsigned long long)p->stream_bits,
				        (unsigned long long)p->stream_bytes,
				        (unsigned long long)p->ef_bytes,
				        (unsigned long long)p->other_bytes,
				        (unsigned long long)seed000_bytes[c][m],
				        (double)seed000_bytes[c][m] / n);
		}
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_sizes [--tombstones] [--quick] "
	           "[--rocksdb PROGRAM] [--lmdb PROGRAM] [--no-peers]\n"
	           "CSV on stdout, tables on stderr; see bench/README.md.\n");
}

int main(int argc, char **argv)
{
	int tombstones = 0, quick = 0;
	const char *rocksdb = BENCH_SIZES_ROCKSDB, *lmdb = BENCH_SIZES_LMDB;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--tombstones") == 0) {
			tombstones = 1;
		} else if (strcmp(argv[i], "--quick") == 0) {
			quick = 1;
		} else if (strcmp(argv[i], "--no-peers") == 0) {
			rocksdb = lmdb = NULL;
		} else if (strcmp(argv[i], "--rocksdb") == 0 && i + 1 < argc) {
			rocksdb = argv[++i];
		} else if (strcmp(argv[i], "--lmdb") == 0 && i + 1 < argc) {
			lmdb = argv[++i];
		} else if (strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}

	static cell_result cells[BENCH_SIZES_CELLS];
	char path[4352];
	snprintf(path, sizeof path, "%s/segment", bench_tmpdir());
	for (size_t c = 0; c < BENCH_SIZES_CELLS; c++) {
		bench_seg_spec spec;
		bench_sizes_spec(c, tombstones, &spec, cells[c].name);
		/* The peers write the whole grid, --quick or not. */
		cells[c].records = (size_t)spec.records;
		cells[c].tombstones =
		    tombstones ? cells[c].records / BENCH_SEG_TOMBSTONE_EVERY
		               : 0;
		cells[c].rocksdb = cells[c].lmdb = -1;
		if (quick && c % 3 != 0)
			continue;
		bench_seg_data d;
		bench_seg_make(&d, &spec);
		if (d.n != cells[c].records ||
		    d.tombstones != cells[c].tombstones)
			bench_fail("cell %s: unexpected record counts",
			           cells[c].name);
		for (size_t m = 0; m < MODES; m++)
			measure(&d, m, path, &cells[c].info[m]);
		cells[c].done = 1;
		bench_seg_free(&d);
	}
	ask_peer(rocksdb, tombstones, cells, 0);
	ask_peer(lmdb, tombstones, cells, 1);
	print_csv(cells);
	print_tables(cells, tombstones);
	return fflush(stdout) == 0 ? 0 : 1;
}
