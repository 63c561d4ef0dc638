/*
 * control.h — the control files' state, FUSE-free (docs/USAGE.md,
 * "Control files"): merge jobs requested through control/merge, their
 * queue and workers, control/status's texts, and waiting for a job's end
 * (control/wait). The FUSE layer maps files onto these calls.
 *
 * control.c         control/merge as each lookup saw it; start and stop
 * control_queue.c   requests checked and queued, cancel, the workers,
 *                   waiting for a job's end
 * control_status.c  control/status's texts, one per lookup
 * job.c, job.h      a job: its record, the jobs kept, its status line
 *                   and log lines
 * job_run.c         running one job: the merge and its publication
 * control_parse.c   the request grammar (pure)
 */
#ifndef SEGFS_CONTROL_H
#define SEGFS_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

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
/*
 * Waits for job id's end (control/wait/ID): done(ctx, line, len, 0) with
 * its final status line once it has ended (at once when it has, or when
 * segfs unmounts: the line as it is), or done(ctx, NULL, 0, err): ENOENT
 * (no job id), ENOMEM, EINTR (interrupted, see below). done is called
 * once, under the queue's lock (it must not call control_*), from this
 * call or from whichever thread ends the job. interrupted (may be NULL)
 * is asked under that lock, before the wait is queued, whether the
 * waiter was interrupted meanwhile (then EINTR at once); after that,
 * control_wait_cancel(key) ends the wait of that key still queued with
 * EINTR, and returns whether it found one. key names the wait (the FUSE
 * request): unlike ctx, which done may free, it must stay unique while
 * a cancel may name it.
 */
typedef void control_wait_fn(void *ctx, const char *line, size_t len,
                             int err);
void control_wait(uint64_t id, const void *key, control_wait_fn *done,
                  bool (*interrupted)(void *ctx), void *ctx);
bool control_wait_cancel(const void *key);
/* control/wait/ID's size: its final line's length once ended, else 4096. */
uint64_t control_wait_size(uint64_t id);

#endif
