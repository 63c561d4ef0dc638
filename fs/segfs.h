/*
 * segfs.h — what the parts of the daemon share that needs FUSE: the
 * operations table, the kernel invalidations of retire.c, the control
 * files that reply to a request themselves. The rest is FUSE-free: ino.h
 * (inode numbers), state.h (slots, snapshots, the options), control.h,
 * namespace.h.
 *
 * fuse_ops.c   the FUSE operations: requests unpacked, the namespace
 *              asked, replies; guards, what the kernel may cache
 * namespace.c  the tree without FUSE (namespace.h): lookups, -o sep's
 *              directories, attributes, reads, xattrs; listing.c its
 *              listings and their offsets; scope.c the directories of
 *              keys both read through (scope.h)
 * state.c      slots, snapshots, the catalog (reload, publication
 *              callbacks), per-thread cursors, the directories -o sep
 *              makes, the catalog watcher
 * segdir.c     opening SEGDIR at mount: its catalog, whether segfs may
 *              write there, leftovers of a killed segfs
 * retire.c     what gives merged-away segments' space back: dropping the
 *              kernel's entries of them, closing those held too long
 * control.c    control/merge requests, the job queue and its workers,
 *              control/status and control/wait
 * main.c       main(): the session; cmdline.c the command line;
 *              mountpoint.c the mount point's checks
 */
#ifndef SEGFS_SEGFS_H
#define SEGFS_SEGFS_H

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>

#include "control.h"
#include "state.h"

_Static_assert(INO_ROOT == FUSE_ROOT_ID, "ino.h's root is FUSE's");

/* ---- retirement (retire.c) -------------------------------------------------
 * Retired slots that readers still hold (the kernel's open files, an open
 * listing) are closed S.retire_after seconds after their retirement by a
 * thread of their own, the reaper: their files then fail with ESTALE, and
 * their mapping and file go. */
int retire_start(void);
void retire_stop(void);
/* Under S.lock: s is no longer live (state_reload_locked). */
void retire_slot_locked(slot *s);
/* Under S.lock, after view/ got its new inode: the recent entries are to
 * be dropped (retire_note_entry). */
void retire_changed_locked(void);
/*
 * An entry given under a view/ that the catalog has replaced (scope.c,
 * scope_stale): out of reach for new paths, yet the kernel would keep it
 * (and the segment its inode names) until the timeout. The reaper drops
 * it from the kernel's cache a moment later (a notification from within
 * the lookup would deadlock). Too many at once are left to -o
 * retire_after.
 */
void retire_drop_entry_later(fuse_ino_t parent, const char *name);
/*
 * A key entry just given to the kernel (lookup). A catalog change drops
 * view/'s entry, and with it every cached entry below that no process
 * uses; one a process has open at that moment would stay cached, out of
 * reach, holding its segment until the entry timeout. The last few
 * hundred entries given are remembered, and a catalog change drops each
 * by name (it is then forgotten once closed).
 */
void retire_note_entry(fuse_ino_t parent, const char *name);

/* The FUSE low-level operations (fuse_ops.c), for main.c's session. */
extern const struct fuse_lowlevel_ops segfs_ops;

/* ---- control files that reply to a request (control.c) ------------------- */

/* Replies to a read of control/wait/ID now if the job has ended, or
 * when it does (or EINTR when interrupted). */
void control_wait(fuse_req_t req, uint64_t id, size_t size, off_t off);
/* The same for a getattr of an open control/wait/ID, inode ino: its
 * attributes (wait_stat) once the job has ended. */
void control_wait_attr(fuse_req_t req, uint64_t id, uint64_t ino);
#endif
