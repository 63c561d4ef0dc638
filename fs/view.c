/*
 * view.c — the composed cursor (view.h). Each step picks the smallest key
 * among the segment cursors; among equal keys the newest segment's binding
 * wins and the others are skipped. A linear pass over the cursors per step:
 * mounts hold few live segments (merges keep it so).
 */
#include "view.h"

#include <stdlib.h>

kvs_status vc_open(vcursor *vc, kvs_segment *const *segs, size_t n,
                   bool tombstones)
{
	vc->n = 0;
	vc->borrowed = false;
	vc->tombstones = tombstones;
	vc->winner = -1;
	vc->cur = calloc(n ? n : 1, sizeof *vc->cur);
	if (!vc->cur)
		return KVS_E_NOMEM;
	for (size_t i = 0; i < n; i++) {
		kvs_status st = kvs_cursor_open(&vc->cur[i], segs[i]);
		if (st != KVS_OK) {
			vc_close(vc);
			return st;
		}
		vc->n = i + 1;
	}
	return KVS_OK;
}

kvs_status vc_borrow(vcursor *vc, kvs_cursor **cur, size_t n,
                     bool tombstones)
{
	vc->n = n;
	vc->cur = cur;
	vc->borrowed = true;
	vc->tombstones = tombstones;
	vc->winner = -1;
	return KVS_OK;
}

void vc_close(vcursor *vc)
{
	if (!vc->borrowed) {
		for (size_t i = 0; i < vc->n; i++)
			kvs_cursor_close(vc->cur[i]);
		free(vc->cur);
	}
	vc->cur = NULL;
	vc->n = 0;
	vc->winner = -1;
}

/* Moves every cursor on the current winner's key past it. */
static kvs_status step(vcursor *vc)
{
	kvs_cursor *w = vc->cur[vc->winner];
	uint64_t wbits;
	const uint8_t *wkey = kvs_cursor_key(w, &wbits);
	for (size_t i = 0; i < vc->n; i++) {
		kvs_cursor *c = vc->cur[i];
		if ((ptrdiff_t)i == vc->winner || !kvs_cursor_valid(c))
			continue;
		uint64_t bits;
		const uint8_t *key = kvs_cursor_key(c, &bits);
		if (kvs_key_compare(key, bits, wkey, wbits) == 0) {
			kvs_status st = kvs_cursor_next(c);
			if (st != KVS_OK)
				return st;
		}
	}
	return kvs_cursor_next(w);
}

/* Picks the winner at the cursors' positions, skipping hidden ones. */
static kvs_status settle(vcursor *vc)
{
	for (;;) {
		vc->winner = -1;
		const uint8_t *min = NULL;
		uint64_t min_bits = 0;
		for (size_t i = 0; i < vc->n; i++) {
			kvs_cursor *c = vc->cur[i];
			if (!kvs_cursor_valid(c))
				continue;
			uint64_t bits;
			const uint8_t *key = kvs_cursor_key(c, &bits);
			/* ties go to the later (newer) segment */
			if (!min || kvs_key_compare(key, bits, min, min_bits) <= 0) {
				min = key;
				min_bits = bits;
				vc->winner = (ptrdiff_t)i;
			}
		}
		if (vc->winner < 0 || vc->tombstones ||
		    kvs_cursor_kind(vc->cur[vc->winner]) != KVS_KIND_TOMBSTONE)
			return KVS_OK;
		kvs_status st = step(vc);
		if (st != KVS_OK) {
			vc->winner = -1;
			return st;
		}
	}
}

kvs_status vc_seek(vcursor *vc, const void *key, uint64_t bits, bool after)
{
	vc->winner = -1;
	for (size_t i = 0; i < vc->n; i++) {
		kvs_cursor *c = vc->cur[i];
		bool found = false;
		kvs_status st = kvs_cursor_lookup(c, key, bits, &found);
		if (st == KVS_OK && found && after)
			st = kvs_cursor_next(c);
		if (st != KVS_OK)
			return st;
	}
	return settle(vc);
}

kvs_status vc_seek_ordinal(vcursor *vc, uint64_t i)
{
	vc->winner = -1;
	if (vc->n != 1)
		return KVS_E_INVAL;
	kvs_status st = kvs_cursor_seek_ordinal(vc->cur[0], i);
	return st != KVS_OK ? st : settle(vc);
}

kvs_status vc_next(vcursor *vc)
{
	if (vc->winner < 0)
		return KVS_OK;
	kvs_status st = step(vc);
	if (st != KVS_OK) {
		vc->winner = -1;
		return st;
	}
	return settle(vc);
}
