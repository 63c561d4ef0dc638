/*
 * control.h — the control files' entry points that need no FUSE header
 * (control.c): control/merge's files, control/status's texts, the jobs
 * control/wait/ID names. What replies to a request itself is in segfs.h.
 */
#ifndef SEGFS_CONTROL_H
#define SEGFS_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
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
/* control/wait/ID's size: its final line's length once ended, else 4096. */
uint64_t control_wait_size(uint64_t id);
/* control/wait/ID's attributes at that size (namespace.c). */
void wait_stat(struct stat *st, uint64_t ino, uint64_t size);

#endif
