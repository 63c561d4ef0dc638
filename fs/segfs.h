/*
 * segfs.h — the FUSE layer's header: what needs <fuse_lowlevel.h>. The
 * rest of the daemon is FUSE-free and reports what changed through
 * callbacks the FUSE layer registers (state.h, kernel_notifier).
 *
 * segfs.c    the FUSE operations, their replies and what the kernel is
 *            told (the state's notifier)
 * main.c     main(): mount, threads, session loop, the mount's log lines
 * cmdline.c  the command line; mountpoint.c the mount point's checks
 * control.c  control/merge requests, the job queue and its workers,
 *            control/status and control/wait
 * --- FUSE-free, each calling only the files below it:
 * retire.c   what gives merged-away segments' space back: dropping the
 *            kernel's entries of them, closing those held too long
 *            (retire.h)
 * segdir.c   opening SEGDIR at mount: its catalog, whether segfs may
 *            write there, leftovers of a killed segfs
 * state.c    slots, snapshots, the catalog (reload, publication
 *            callbacks), per-thread cursors, the directories -o sep
 *            makes, the catalog watcher (state.h)
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

/* ---- control files (control.c) ------------------------------------------- */

int control_start(void);
void control_stop(void);
/* control/merge as one lookup saw it (control.c): a new file's id (0 when
 * out of memory); its count of kernel references; its size; `>` truncating
 * it; a write (0: all of buf taken, its jobs' numbers then readable at the
 * write's end; or an errno); a read's bytes (malloc'd, NULL when out of
 * memory). */
uint64_t control_file_take(void);
void control_file_ref(uint64_t id, uint64_t n, bool up);
uint64_t control_file_size(uint64_t id);
void control_file_truncate(uint64_t id);
int control_file_write(uint64_t id, const char *buf, size_t size, off_t off);
char *control_file_read(uint64_t id, size_t size, off_t off, size_t *n);
/* control/status: takes the text as it is now, under a new id (0 when
 * out of memory); a copy of text id; its count of kernel references. */
uint64_t control_status_take(void);
char *control_status_get(uint64_t id, size_t *len, struct timespec *when);
void control_status_ref(uint64_t id, uint64_t n, bool up);
/* Is there a job id; its final status line once it has ended. */
bool control_job_exists(uint64_t id);
/* Replies to a read of control/wait/ID now if the job has ended, or
 * when it does (or EINTR when interrupted). */
void control_wait(fuse_req_t req, uint64_t id, size_t size, off_t off);
/* The same for a getattr of an open control/wait/ID, inode ino: its
 * attributes (wait_stat) once the job has ended. */
void control_wait_attr(fuse_req_t req, uint64_t id, uint64_t ino);
/* control/wait/ID's size: its final line's length once ended, else 4096. */
uint64_t control_wait_size(uint64_t id);
/* control/wait/ID's attributes at that size (segfs.c). */
void wait_stat(struct stat *st, uint64_t ino, uint64_t size);

#endif
