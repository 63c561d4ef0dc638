/*
 * segfs.h — the FUSE layer's header: what needs <fuse_lowlevel.h>. The
 * rest of the daemon is FUSE-free and reports what changed through
 * callbacks the FUSE layer registers (state.h, kernel_notifier;
 * control.h, control_wait).
 *
 * fuse_ops.c   the FUSE operations: requests unpacked, the namespace
 *              asked, replies; guards, what the kernel may cache, what
 *              the kernel is told (the state's notifier), control/wait's
 *              replies
 * main.c       main(): mount, threads, session loop, the mount's log lines
 * cmdline.c    the command line; mountpoint.c the mount point's checks
 * --- FUSE-free, each calling only the files below it:
 * namespace.c  the tree (namespace.h): lookups, -o sep's directories,
 *              attributes, reads, xattrs; listing.c its listings and
 *              their offsets; scope.c the directories of keys both read
 *              through (scope.h)
 * control.h    control/merge files, the job queue and its workers,
 *              control/status and control/wait (the files it lists)
 * retire.c     what gives merged-away segments' space back: dropping the
 *              kernel's entries of them, closing those held too long
 *              (retire.h)
 * segdir.c     opening SEGDIR at mount: its catalog, whether segfs may
 *              write there, leftovers of a killed segfs
 * watch.c      the catalog watcher: reloads on another process's change
 * ptab.c       the directories -o sep makes
 * state.c      slots, snapshots, the catalog (reload, publication
 *              callbacks), per-thread cursors (state.h, for the three)
 * ino.h        inode numbers
 * names.c, guard.c, log.c, control_parse.c: see their headers
 */
#ifndef SEGFS_SEGFS_H
#define SEGFS_SEGFS_H

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>

#include "control.h"
#include "ino.h"
#include "retire.h"
#include "state.h"

_Static_assert(INO_ROOT == FUSE_ROOT_ID, "ino.h's root is FUSE's");

/* The FUSE low-level operations (fuse_ops.c), for main.c's session. */
extern const struct fuse_lowlevel_ops segfs_ops;

/* Tells the kernel what the state changes (state.h, kernel_notifier)
 * through session se from now on (fuse_ops.c); NULL: no more. */
void segfs_notify(struct fuse_session *se);

#endif
