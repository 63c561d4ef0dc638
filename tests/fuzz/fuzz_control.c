/*
 * fuzz_control — libFuzzer target for control/merge's request parser
 * (fs/control_parse.c) and the core's merge planner behind it: requests
 * are written by whoever can open control/merge.
 *
 * The first bytes make a catalog snapshot (up to 7 live segments named
 * after short words that the grammar also uses — "all", "restart",
 * "name=x" — with their modes, tombstones, busy marks and which output
 * names are taken); the rest is the request. Whatever the bytes, the
 * parser must not fail badly, must give the same answer twice, and an
 * accepted merge must make a plan the planner would: consecutive inputs
 * within the snapshot, none busy, an output name that a catalog may hold
 * and that is not taken, a raw output only where no tombstone remains,
 * dropped tombstones only with the oldest segment.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "control_parse.h"

#include "fuzz_util.h"

static const char *const words[8] = {"a.kvs",  "b",         "all", "restart",
                                     "name=x", "seg-3.kvs", "k=v", "x"};

static uint8_t taken_mask;

static bool taken(void *ctx, const char *name)
{
	(void)ctx;
	for (int i = 0; i < 8; i++)
		if ((taken_mask >> i & 1) && !strcmp(name, words[i]))
			return true;
	return !strcmp(name, "seg-7.kvs") && (taken_mask & 1);
}

static int parse(char *line, size_t len, const control_snapshot *snap,
                 kvs_merge_plan *plan, control_error *e)
{
	control_words w;
	int rc = control_split(line, len, &w, e);
	if (rc)
		return rc;
	if (!strcmp(w.word[0], "cancel")) {
		uint64_t id;
		return control_parse_cancel(&w, &id, e);
	}
	return control_parse_merge(&w, snap, plan, e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t n = data[0] % 8;
	taken_mask = data[1];
	data += 2;
	size -= 2;
	if (size < n)
		return 0;
	kvs_segment_info infos[8];
	kvs_merge_live live[8];
	unsigned char busy[8];
	memset(infos, 0, sizeof infos);
	for (size_t i = 0; i < n; i++) {
		uint8_t b = data[i];
		live[i].name = words[(i + (b >> 5)) % 8];
		live[i].info = &infos[i];
		infos[i].profile = b & 1 ? KVS_PROFILE_BIT : KVS_PROFILE_BYTE;
		infos[i].framing = b & 2 ? KVS_FRAMING_RAW : KVS_FRAMING_TYPED;
		infos[i].tombstones =
		    infos[i].framing == KVS_FRAMING_TYPED ? (b >> 2 & 1) : 0;
		infos[i].restart_interval = 1 + (b >> 3 & 3);
		infos[i].sequence = b & 16 ? UINT64_MAX - i : i;
		kvs_default_codes(infos[i].codes);
		busy[i] = b >> 7 ? CONTROL_BUSY : CONTROL_FREE;
	}
	/* names may repeat in the snapshot; a catalog's do not */
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < i; j++)
			if (!strcmp(live[i].name, live[j].name))
				return 0;
	data += n;
	size -= n;
	if (size > CONTROL_MAX_REQUEST + 16)
		return 0;
	control_snapshot snap = {live, n, busy, taken, NULL};
	char a[CONTROL_MAX_REQUEST + 17], b[CONTROL_MAX_REQUEST + 17];
	memcpy(a, data, size);
	a[size] = '\0';
	memcpy(b, data, size);
	b[size] = '\0';
	kvs_merge_plan pa, pb;
	control_error ea = {0}, eb = {0};
	int ra = parse(a, size, &snap, &pa, &ea);
	int rb = parse(b, size, &snap, &pb, &eb);
	check(ra == rb);
	check(ra == 0 || ea.err == ra);
	check(ra == 0 || !strcmp(ea.msg, eb.msg));
	if (ra != 0 || !size || memcmp(data, "merge", 5) != 0)
		return 0;
	check(!memcmp(&pa, &pb, sizeof pa));
	check(pa.n >= 1 && pa.first + pa.n <= n);
	check(pa.includes_oldest == (pa.first == 0));
	check(pa.options.includes_oldest == pa.includes_oldest);
	check(!pa.options.drop_tombstones || pa.includes_oldest);
	check(kvs_catalog_name_valid(pa.output));
	check(!taken(NULL, pa.output));
	uint64_t tomb = 0;
	for (size_t k = 0; k < pa.n; k++) {
		check(busy[pa.first + k] == CONTROL_FREE);
		tomb += infos[pa.first + k].tombstones;
	}
	check(tomb == pa.tombstones);
	check(pa.options.output.framing != KVS_FRAMING_RAW || !tomb ||
	      pa.options.drop_tombstones);
	check(pa.options.output.restart_interval >= 1 &&
	      pa.options.output.restart_interval <= KVS_MAX_RESTART_INTERVAL);
	return 0;
}
