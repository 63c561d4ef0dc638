/*
 * view.h — a composed cursor over a stack of segments: for each key the
 * binding of the newest segment that has it, tombstones hidden unless
 * asked for. Over one segment it is that segment's cursor with tombstones
 * optionally hidden; over every live segment it is segfs's view/.
 *
 * A view cursor belongs to one thread. It holds a cursor (and so a
 * reference) on each of its segments.
 */
#ifndef SEGFS_VIEW_H
#define SEGFS_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvseg/segment.h"

typedef struct vcursor {
	size_t n;          /* segments, oldest first */
	kvs_cursor **cur;  /* one per segment */
	bool tombstones;   /* show tombstones instead of hiding them */
	bool borrowed;     /* the cursors belong to someone else */
	ptrdiff_t winner;  /* index of the current binding, -1 at the end */
} vcursor;

/* segs[0 .. n) oldest first; each gets a cursor. */
kvs_status vc_open(vcursor *vc, kvs_segment *const *segs, size_t n,
                   bool tombstones);
/* The same over cursors the caller keeps (they are moved, not closed). */
kvs_status vc_borrow(vcursor *vc, kvs_cursor **cur, size_t n,
                     bool tombstones);
void vc_close(vcursor *vc);

/* The first visible binding with key >= key (after = false) or > key. */
kvs_status vc_seek(vcursor *vc, const void *key, uint64_t bits, bool after);
/* The first visible binding at or after record i of a one-segment view. */
kvs_status vc_seek_ordinal(vcursor *vc, uint64_t i);
/* The next visible binding. */
kvs_status vc_next(vcursor *vc);

static inline bool vc_valid(const vcursor *vc) { return vc->winner >= 0; }
/* The current binding's cursor (its segment is index vc->winner). */
static inline kvs_cursor *vc_cur(const vcursor *vc)
{
	return vc->cur[vc->winner];
}

#endif
