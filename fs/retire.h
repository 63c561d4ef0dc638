/*
 * retire.h — what gives merged-away segments' space back (retire.c),
 * FUSE-free: the kernel is told through the state's notifier (state.h).
 */
#ifndef SEGFS_RETIRE_H
#define SEGFS_RETIRE_H

#include <stdint.h>

/* ---- retirement (retire.c) -------------------------------------------------
 * Retired slots that readers still hold (the kernel's open files, an open
 * listing) are closed S.retire_after seconds after their retirement by a
 * thread of their own, the reaper: their files then fail with ESTALE, and
 * their mapping and file go. */
/* Starts the reaper and registers its hooks with the state (state.h,
 * retire_hooks): a slot no longer live is listed; at a catalog change,
 * the recent entries are to be dropped (retire_note_entry). */
int retire_start(void);
void retire_stop(void);
/*
 * An entry given under a view/ that the catalog has replaced (scope.c,
 * scope_stale): out of reach for new paths, yet the kernel would keep it
 * (and the segment its inode names) until the timeout. The reaper drops
 * it from the kernel's cache a moment later (a notification from within
 * the lookup would deadlock). Too many at once are left to -o
 * retire_after.
 */
void retire_drop_entry_later(uint64_t parent, const char *name);
/*
 * A key entry just given to the kernel (lookup). A catalog change drops
 * view/'s entry, and with it every cached entry below that no process
 * uses; one a process has open at that moment would stay cached, out of
 * reach, holding its segment until the entry timeout. The last few
 * hundred entries given are remembered, and a catalog change drops each
 * by name (it is then forgotten once closed).
 */
void retire_note_entry(uint64_t parent, const char *name);


#endif
