/*
 * segfs.h — the FUSE layer's header: what needs <fuse_lowlevel.h>. The
 * rest of the daemon is FUSE-free and reports what changed through
 * callbacks the FUSE layer registers (state.h, kernel_notifier;
 * control.h, control_wait).
 *
 * segfs.c    the FUSE operations, their replies, what the kernel is
 *            told (the state's notifier) and control/wait's replies
 * main.c     main(): mount, threads, session loop, the mount's log lines
 * cmdline.c  the command line; mountpoint.c the mount point's checks
 * --- FUSE-free, each calling only the files below it:
 * control.h  control/merge files, the job queue and its workers,
 *            control/status and control/wait (the files it lists)
 * retire.c   what gives merged-away segments' space back: dropping the
 *            kernel's entries of them, closing those held too long
 *            (retire.h)
 * segdir.c   opening SEGDIR at mount: its catalog, whether segfs may
 *            write there, leftovers of a killed segfs
 * watch.c    the catalog watcher: reloads on another process's change
 * ptab.c     the directories -o sep makes
 * state.c    slots, snapshots, the catalog (reload, publication
 *            callbacks), per-thread cursors (state.h, for the three)
 * ino.h      inode numbers
 * view.c, names.c, guard.c, log.c, control_parse.c: see their headers
 */
#ifndef SEGFS_SEGFS_H
#define SEGFS_SEGFS_H

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kvseg/catalog.h"
#include "kvseg/segment.h"
#include "control.h"
#include "ino.h"
#include "retire.h"
#include "state.h"
#include "view.h"

_Static_assert(INO_ROOT == FUSE_ROOT_ID, "ino.h's root is FUSE's");

/* The FUSE low-level operations (segfs.c), for main.c's session. */
extern const struct fuse_lowlevel_ops segfs_ops;

/* Tells the kernel what the state changes (state.h, kernel_notifier)
 * through session se from now on (segfs.c); NULL: no more. */
void segfs_notify(struct fuse_session *se);

/* control/wait/ID's attributes at that size (segfs.c). */
void wait_stat(struct stat *st, uint64_t ino, uint64_t size);

#endif
