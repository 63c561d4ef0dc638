/*
 * fuzz_merge.c — libFuzzer target for the merge's own decoders: the input
 * is a segment file as in fuzz_segment (seed corpus: fuzz_segment_seeds),
 * tried as it is and with its CRC32Cs recomputed. Whatever
 * kvs_segment_open_memory accepts is merged, in both age orders, with a
 * small valid segment of its own mode into a segment of that mode,
 * tombstones kept, and (typed framing) again as a strong delete, which
 * drops them. Two such inputs take merge.c's two-input loops (the
 * byte loop, and the bit loop when the input has the default codes),
 * which read the input's record stream themselves instead of through a
 * cursor; it is also merged between two partners, three inputs that take
 * the loser tree with its LCPs.
 *
 * The oracle is the inputs read through cursors and their CRC32Cs: when
 * both read to their ends with strictly increasing keys and their body
 * CRC32Cs hold, the merge must succeed and its
 * output must read back as their newest-wins merge, record for record;
 * when one does not, the merge must fail, say why and leave no file (a
 * merge that trusted a corrupt LCP field, say, would write records out of
 * order or other keys than the input's).
 *
 * Each merge runs twice, as kvs_merge chooses its loop and with the
 * general loop forced (merge_internal.h's hooks): both must succeed or
 * both fail, and succeeding, write byte-identical files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvseg/merge.h"
#include "kvseg/segment.h"

#include "fuzz_crcs.h"
#include "fuzz_stack.h"
#include "fuzz_util.h"
#include "../../core/src/merge_internal.h"

#define PARTNER_RECORDS 30 /* first key bytes 3, 11, ... 235 */

static char g_dir[64];
static char g_out[96];
static char g_out_general[104];
static kvs_segment *g_partner[2][2]; /* [bit profile][raw framing] */

/* Partner record i: keys of 1 to 3 bytes that interleave with the seeds'
 * short keys, every 7th record a tombstone when typed. */
static uint64_t partner_key(unsigned i, bool bit, uint8_t key[4], bool *tomb)
{
	(void)bit;
	key[0] = (uint8_t)(8 * i + 3);
	key[1] = (uint8_t)(i * 37);
	key[2] = (uint8_t)i;
	*tomb = i % 7 == 3;
	return 8 * (1 + i % 3);
}

/* A partner of the given mode (fuzz_stack.h). */
static kvs_segment *make_partner(int p, int f)
{
	char path[96];
	snprintf(path, sizeof path, "%s/partner-%d-%d.kvseg", g_dir, p, f);
	return fuzz_make_partner(path, p, f, PARTNER_RECORDS, partner_key, 0);
}

/* Removes the partners' and the output's files and their directory. */
static void cleanup(void)
{
	char path[96];
	for (int p = 0; p < 2; p++)
		for (int f = 0; f < 2; f++) {
			kvs_segment_unref(g_partner[p][f]);
			snprintf(path, sizeof path, "%s/partner-%d-%d.kvseg",
			         g_dir, p, f);
			unlink(path);
		}
	unlink(g_out);
	unlink(g_out_general);
	rmdir(g_dir);
}

static void setup(void)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(g_dir, sizeof g_dir, "%s/fuzz_merge.XXXXXX", base);
	check(mkdtemp(g_dir) != NULL);
	snprintf(g_out, sizeof g_out, "%s/out.kvseg", g_dir);
	snprintf(g_out_general, sizeof g_out_general, "%s/out-general.kvseg",
	         g_dir);
	atexit(cleanup);
	for (int p = 0; p < 2; p++)
		for (int f = 0; f < 2; f++)
			g_partner[p][f] = make_partner(p, f);
}

/* The output read back is the newest-wins merge of the n lists (oldest
 * first), without the tombstones when drop (a strong delete). */
static void check_output(const recs *l, size_t n, const recs *out, bool drop)
{
	size_t at[3] = {0, 0, 0}, k = 0;
	for (;;) {
		const rec *want = NULL;
		for (size_t i = 0; i < n; i++) /* the newest of the smallest */
			if (at[i] < l[i].n &&
			    (!want || kvs_key_compare(
			                  l[i].r[at[i]].key, l[i].r[at[i]].bits,
			                  want->key, want->bits) <= 0))
				want = &l[i].r[at[i]];
		if (!want)
			break;
		if (!drop || want->kind != KVS_KIND_TOMBSTONE) {
			check(k < out->n && same_rec(want, &out->r[k]));
			k++;
		}
		const rec w = *want;
		for (size_t i = 0; i < n; i++)
			if (at[i] < l[i].n &&
			    kvs_key_compare(l[i].r[at[i]].key,
			                    l[i].r[at[i]].bits, w.key,
			                    w.bits) == 0)
				at[i]++;
	}
	check(k == out->n);
}

/* Are the files at a and b the same bytes? */
static bool same_file(const char *a, const char *b)
{
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	bool same = fa && fb;
	while (same) {
		int x = getc(fa), y = getc(fb);
		same = x == y;
		if (x == EOF)
			break;
	}
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return same;
}

/* Merges the n (2 or 3) inputs, oldest first, into a segment of in's mode
 * and checks the outcome against the inputs read through cursors; drop: a
 * strong delete (typed framing). */
static void merge_n(kvs_segment *const *inputs, size_t n,
                    const kvs_segment_info *in, bool drop)
{
	kvs_merge_options mo;
	memset(&mo, 0, sizeof mo);
	mo.output.profile = in->profile;
	mo.output.framing = in->framing;
	mo.output.restart_interval = 15;
	mo.output.sequence = 3;
	mo.output.flags = KVS_WRITER_NO_SYNC;
	mo.drop_tombstones = mo.includes_oldest = drop;
	kvs_error err;
	memset(&err, 0, sizeof err);
	recs l[3] = {{0}, {0}, {0}};
	bool valid = true;
	/* a damaged input (its body CRC32C fails) is refused up front,
	 * whatever its records decode to */
	for (size_t i = 0; i < n; i++)
		valid &= walk(inputs[i], &l[i]) &&
		         kvs_segment_check_crc(inputs[i], NULL) == KVS_OK;
	/* a raw input whose header counts tombstones is refused up front */
	bool refused = in->framing == KVS_FRAMING_RAW && in->tombstones;
	kvs_status st = kvs_merge(inputs, n, g_out, &mo, NULL, &err);
	check(st == KVS_OK ? valid && !refused : !valid || refused);
	kvs_error gerr;
	merge_hooks general = {.force_general = true};
	kvs_status gst = kvsi_merge_hooked(inputs, n, g_out_general, &mo, NULL,
	                                   &gerr, &general);
	check((gst == KVS_OK) == (st == KVS_OK));
	if (gst == KVS_OK) {
		check(general.loop == MERGE_LOOP_TREE_ANY);
		check(same_file(g_out, g_out_general));
		check(unlink(g_out_general) == 0);
	}
	if (st == KVS_OK) {
		kvs_segment *out = NULL;
		recs ro = {0};
		check(kvs_segment_open(&out, g_out, &err) == KVS_OK);
		check(kvs_segment_verify(out, &err) == KVS_OK);
		check(walk(out, &ro));
		check_output(l, n, &ro, drop);
		recs_free(&ro);
		kvs_segment_unref(out);
		check(unlink(g_out) == 0);
	} else {
		check(err.message[0] != '\0');
		check(access(g_out, F_OK) != 0);
	}
	for (size_t i = 0; i < n; i++)
		recs_free(&l[i]);
}

static void exercise(const uint8_t *buf, size_t size, const uint8_t *data)
{
	(void)data;
	kvs_segment *s = NULL;
	kvs_error err;
	if (kvs_segment_open_memory(&s, buf, size, &err) != KVS_OK)
		return;
	kvs_segment_info in;
	kvs_segment_info_get(s, &in);
	kvs_segment *partner =
	    g_partner[in.profile == KVS_PROFILE_BIT]
	             [in.framing == KVS_FRAMING_RAW];
	kvs_segment *older[2] = {s, partner}, *newer[2] = {partner, s};
	kvs_segment *three[3] = {partner, s, partner};
	bool typed = in.framing == KVS_FRAMING_TYPED;
	for (int drop = 0; drop <= typed; drop++) {
		merge_n(older, 2, &in, drop);
		merge_n(newer, 2, &in, drop);
		merge_n(three, 3, &in, drop); /* the loser tree */
	}
	kvs_segment_unref(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		setup();
		ready = true;
	}
	fuzz_with_crcs(data, size, exercise);
	return 0;
}
