/*
 * view.c — the merged newest-wins view (kvseg/view.h): a merging cursor
 * over one cursor per segment.
 *
 * Each step picks the smallest key among the segment cursors; among equal
 * keys the newest segment's binding wins and the others are skipped past
 * it. A linear pass over the cursors per step rather than a heap or a
 * loser tree (merge_tree.h): the stacks a view reads are a few live
 * segments, which merges keep few, and the pass needs no state beyond
 * the winner. The view and its cursor array are one allocation.
 */
#include "kvseg/view.h"

#include <stdint.h>
#include <stdlib.h>

struct kvs_view {
	size_t n;          /* segments, oldest first */
	bool tombstones;   /* KVS_VIEW_TOMBSTONES */
	bool owned;        /* the view opened the cursors and closes them */
	ptrdiff_t winner;  /* index of the current binding, -1 at the end */
	kvs_cursor *cur[]; /* one per segment */
};

/*
 * The start of both opens: checks out, flags and n (p, the segments or the
 * cursors, may be NULL only when n is 0) and makes *v, a view with room
 * for n cursors, positioned at the end.
 */
static kvs_status view_new(kvs_view **out, const void *p, size_t n,
                           unsigned flags, bool owned, kvs_view **v)
{
	*v = NULL;
	if (!out)
		return KVS_E_INVAL;
	*out = NULL;
	if (flags & ~KVS_VIEW_TOMBSTONES || (n && !p))
		return KVS_E_INVAL;
	if (n > (PTRDIFF_MAX - sizeof **v) / sizeof(kvs_cursor *))
		return KVS_E_RANGE;
	*v = calloc(1, sizeof **v + n * sizeof(kvs_cursor *));
	if (!*v)
		return KVS_E_NOMEM;
	(*v)->n = n;
	(*v)->tombstones = flags & KVS_VIEW_TOMBSTONES;
	(*v)->owned = owned;
	(*v)->winner = -1;
	return KVS_OK;
}

/* The end of both opens: v is the caller's, or closed on a failure. */
static kvs_status view_done(kvs_view **out, kvs_view *v, kvs_status st)
{
	if (st == KVS_OK)
		*out = v;
	else
		kvs_view_close(v);
	return st;
}

kvs_status kvs_view_open(kvs_view **out, kvs_segment *const *segs, size_t n,
                         unsigned flags)
{
	kvs_view *v;
	kvs_status st = view_new(out, segs, n, flags, true, &v);

	for (size_t i = 0; st == KVS_OK && i < n; i++)
		st = segs[i] ? kvs_cursor_open(&v->cur[i], segs[i])
		             : KVS_E_INVAL;
	return view_done(out, v, st);
}

kvs_status kvs_view_open_cursors(kvs_view **out, kvs_cursor *const *cur,
                                 size_t n, unsigned flags)
{
	kvs_view *v;
	kvs_status st = view_new(out, cur, n, flags, false, &v);

	for (size_t i = 0; st == KVS_OK && i < n; i++)
		st = (v->cur[i] = cur[i]) != NULL ? KVS_OK : KVS_E_INVAL;
	return view_done(out, v, st);
}

void kvs_view_close(kvs_view *v)
{
	if (!v)
		return;
	if (v->owned)
		for (size_t i = 0; i < v->n; i++)
			kvs_cursor_close(
			    v->cur[i]); /* NULL after a failed open */
	free(v);
}

/* The key of a seek given none (NULL, 0 bits): the cursors read no byte of
 * it, but are not given NULL. */
static const uint8_t no_key[1];

/* Moves every cursor on the current winner's key past it. */
static kvs_status step(kvs_view *v)
{
	kvs_cursor *w = v->cur[v->winner];
	uint64_t wbits;
	const uint8_t *wkey = kvs_cursor_key(w, &wbits);

	for (size_t i = 0; i < v->n; i++) {
		kvs_cursor *c = v->cur[i];
		if ((ptrdiff_t)i == v->winner || !kvs_cursor_valid(c))
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
static kvs_status settle(kvs_view *v)
{
	for (;;) {
		const uint8_t *min = NULL;
		uint64_t min_bits = 0;

		v->winner = -1;
		for (size_t i = 0; i < v->n; i++) {
			kvs_cursor *c = v->cur[i];
			if (!kvs_cursor_valid(c))
				continue;
			uint64_t bits;
			const uint8_t *key = kvs_cursor_key(c, &bits);
			/* ties go to the later (newer) segment */
			if (!min ||
			    kvs_key_compare(key, bits, min, min_bits) <= 0) {
				min = key;
				min_bits = bits;
				v->winner = (ptrdiff_t)i;
			}
		}
		if (v->winner < 0 || v->tombstones ||
		    kvs_cursor_kind(v->cur[v->winner]) != KVS_KIND_TOMBSTONE)
			return KVS_OK;
		kvs_status st = step(v);
		if (st != KVS_OK) {
			v->winner = -1;
			return st;
		}
	}
}

kvs_status kvs_view_first(kvs_view *v)
{
	if (!v)
		return KVS_E_INVAL;
	v->winner = -1;
	for (size_t i = 0; i < v->n; i++) {
		kvs_status st = kvs_cursor_first(v->cur[i]);
		if (st != KVS_OK)
			return st;
	}
	return settle(v);
}

kvs_status kvs_view_seek(kvs_view *v, const void *key, uint64_t key_bits,
                         bool after)
{
	if (!v || (!key && key_bits))
		return KVS_E_INVAL;
	if (!key)
		key = no_key;
	v->winner = -1;
	for (size_t i = 0; i < v->n; i++) {
		kvs_cursor *c = v->cur[i];
		bool found = false;
		kvs_status st = kvs_cursor_lookup(c, key, key_bits, &found);
		if (st == KVS_OK && found && after)
			st = kvs_cursor_next(c);
		if (st != KVS_OK)
			return st;
	}
	return settle(v);
}

kvs_status kvs_view_lookup(kvs_view *v, const void *key, uint64_t key_bits,
                           bool *found)
{
	if (!found)
		return KVS_E_INVAL;
	*found = false;
	kvs_status st = kvs_view_seek(v, key, key_bits, false);
	if (!key)
		key = no_key;
	if (st == KVS_OK && v->winner >= 0) {
		uint64_t bits;
		const uint8_t *at = kvs_cursor_key(v->cur[v->winner], &bits);
		*found = kvs_key_compare(at, bits, key, key_bits) == 0;
	}
	return st;
}

kvs_status kvs_view_seek_ordinal(kvs_view *v, uint64_t i)
{
	if (!v)
		return KVS_E_INVAL;
	v->winner = -1;
	if (v->n != 1)
		return KVS_E_INVAL;
	kvs_status st = kvs_cursor_seek_ordinal(v->cur[0], i);
	return st != KVS_OK ? st : settle(v);
}

kvs_status kvs_view_next(kvs_view *v)
{
	if (!v)
		return KVS_E_INVAL;
	if (v->winner < 0)
		return KVS_OK;
	kvs_status st = step(v);
	if (st != KVS_OK) {
		v->winner = -1;
		return st;
	}
	return settle(v);
}

bool kvs_view_valid(const kvs_view *v)
{
	return v && v->winner >= 0;
}

kvs_cursor *kvs_view_cursor(const kvs_view *v)
{
	return kvs_view_valid(v) ? v->cur[v->winner] : NULL;
}

size_t kvs_view_source(const kvs_view *v)
{
	if (!v)
		return 0;
	return v->winner >= 0 ? (size_t)v->winner : v->n;
}

size_t kvs_view_count(const kvs_view *v)
{
	return v ? v->n : 0;
}
