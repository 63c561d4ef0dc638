/*
 * kvseg/view.h — the merged view of a stack of segments: a cursor that
 * shows, for each key, the binding of the newest segment that has it.
 *
 * A stack is given oldest first, as a catalog lists its live segments
 * (kvs_catalog_entry_at): segment n - 1 is the newest. Where several
 * segments hold a key, the newest one's binding is the view's and the
 * older ones are hidden, as kvs_merge would keep it (replacement). A key
 * whose newest binding is a tombstone is absent from the view, unless the
 * view is opened with KVS_VIEW_TOMBSTONES: then the tombstone is shown
 * (kvs_cursor_kind of kvs_view_cursor says which). Over one segment with
 * KVS_VIEW_TOMBSTONES the view is that segment's cursor.
 *
 * Keys order as kvs_key_compare orders them, so one view may stack
 * segments of any modes (byte and bit profile, typed and raw framing).
 *
 * A view reads through one cursor per segment: its own (kvs_view_open,
 * closed with the view) or the caller's (kvs_view_open_cursors, left
 * open). Each step compares the cursors' keys, a pass over the stack:
 * views are meant for stacks that merges keep short. A view, like a
 * cursor, is one thread's; it starts positioned at the end. After a
 * failure it is at the end (kvs_view_valid is false) until it is
 * positioned again.
 *
 * kvs_view_close accepts NULL.
 */
#ifndef KVSEG_VIEW_H
#define KVSEG_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvseg/segment.h"
#include "kvseg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Flags of kvs_view_open and kvs_view_open_cursors. */
#define KVS_VIEW_TOMBSTONES 1u /* show tombstones instead of hiding them */

typedef struct kvs_view kvs_view;

/*
 * Opens a view of segs[0 .. n) (oldest first) with a cursor of its own
 * on each, which holds a reference on the segment until kvs_view_close.
 * n == 0 is an empty view (segs may then be NULL). A NULL out or
 * segs[i], or an unknown flag, is KVS_E_INVAL; n beyond what one
 * allocation holds, KVS_E_RANGE.
 */
KVS_API kvs_status kvs_view_open(kvs_view **out, kvs_segment *const *segs,
                                 size_t n, unsigned flags);

/*
 * The same over cursors the caller keeps, cur[0 .. n) one per segment,
 * oldest first (the array is copied; the cursors are not). The view
 * moves them; kvs_view_close leaves them open, and they must stay open
 * until then. For a caller that keeps a cursor per segment anyway, such
 * as segfs's per-thread cursors.
 */
KVS_API kvs_status kvs_view_open_cursors(kvs_view **out, kvs_cursor *const *cur,
                                         size_t n, unsigned flags);

/* Closes the view and the cursors it opened; NULL is ignored. */
KVS_API void kvs_view_close(kvs_view *v);

/* The first visible binding (the end for a view with none). */
KVS_API kvs_status kvs_view_first(kvs_view *v);

/*
 * The first visible binding whose key is >= key (after = false) or > key
 * (after = true), key being key_bits long (key may be NULL when key_bits
 * is 0).
 */
KVS_API kvs_status kvs_view_seek(kvs_view *v, const void *key,
                                 uint64_t key_bits, bool after);

/*
 * kvs_view_seek(v, key, key_bits, false), setting *found when the view
 * then shows exactly that key: a point lookup. A key whose newest binding
 * is a tombstone is found only with KVS_VIEW_TOMBSTONES.
 */
KVS_API kvs_status kvs_view_lookup(kvs_view *v, const void *key,
                                   uint64_t key_bits, bool *found);

/*
 * The first visible binding at or after record i (0-based) of the
 * segment, for a view of one segment only (KVS_E_INVAL otherwise: the
 * ordinals of a stack name no single order). i >= records is the end.
 */
KVS_API kvs_status kvs_view_seek_ordinal(kvs_view *v, uint64_t i);

/* The next visible binding; at the end it stays there. */
KVS_API kvs_status kvs_view_next(kvs_view *v);

/* True while the view is on a binding. */
KVS_API bool kvs_view_valid(const kvs_view *v);

/*
 * The current binding's cursor, for its key, kind, value and ordinal
 * (kvs_cursor_key, ...), or NULL at the end. It belongs to the view (or
 * to the caller of kvs_view_open_cursors): read it, do not move it.
 */
KVS_API kvs_cursor *kvs_view_cursor(const kvs_view *v);

/* The index in the stack (0 is the oldest) of the segment that holds the
 * current binding, or n at the end. */
KVS_API size_t kvs_view_source(const kvs_view *v);

/* The number of segments in the stack. */
KVS_API size_t kvs_view_count(const kvs_view *v);

#ifdef __cplusplus
}
#endif

#endif
