/*
 * job.h — what the control files share (control.h lists them): a merge
 * job's record, the table of jobs kept (J, under J.lock), the queue's
 * fields, and each file's calls into the ones below it. Not for the FUSE
 * layer, which uses control.h.
 */
#ifndef SEGFS_JOB_H
#define SEGFS_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "kvseg/catalog.h"
#include "kvseg/merge.h"

enum job_state { QUEUED, RUNNING, DONE, FAILED, CANCELLED, REJECTED };
extern const char *const job_state_names[];

typedef struct job {
	uint64_t id;
	enum job_state state;
	char *request;      /* as written (at most 200 bytes and "...") */
	size_t request_len; /* it may hold NUL bytes (a rejected request) */
	size_t n;
	uint32_t *inputs; /* slot ids, oldest first */
	char **names;
	char out[KVS_CATALOG_MAX_NAME + 1];
	kvs_merge_options opt;
	atomic_uint_fast64_t done, total;
	atomic_bool cancel;
	bool publish_failed; /* publish() failed: the job fails */
	uint64_t bytes_in, bytes_out;
	struct timespec queued_at, started, ended;
	char error[256];
	struct job *prev, *next; /* all jobs kept, oldest first */
	struct job *next_queued;
	struct job *next_ended; /* ended jobs kept, in the order they ended */
} job;

struct waiter;

/* The jobs kept and the queue (control_queue.c), under J.lock. */
extern struct jobs {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	job *first, *last;
	job *queue_head, *queue_tail;
	job *ended_head, *ended_tail; /* by end: the first goes first */
	size_t nended;
	size_t queued;
	uint64_t next_id;
	struct waiter *waiters;
	pthread_t *threads;
	unsigned nthreads;
	bool stopping;
} J;

static inline bool ended(const job *j) { return j->state >= DONE; }

/* ---- job.c ---------------------------------------------------------------- */

/* A growing text; failed once out of memory. */
typedef struct sbuf {
	char *p;
	size_t len, cap;
	bool failed;
} sbuf;
void sb_printf(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Under J.lock: j's status line (control/status, control/wait), as one
 * JSON object and a newline; its length. */
void job_line(sbuf *b, const job *j);
uint64_t job_line_len(const job *j);
/* Under J.lock: job id among those kept, or NULL. */
job *find_job(uint64_t id);
/* Under J.lock: j joins the jobs kept, as the newest; ended job j joins
 * the history (S.history), which drops the oldest beyond it. */
void list_append(job *j);
void keep_ended(job *j);
void free_job(job *j);
/* j's error message (taking J.lock: status lines read it). */
void set_error(job *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The log's lines of j's start and (under J.lock) end. */
void log_job_start(const job *j);
void log_job_end(const job *j);

/* ---- job_run.c ------------------------------------------------------------ */

/* Runs job j (RUNNING, J.lock not held): merges, publishes; returns how
 * it ended (DONE, FAILED, CANCELLED). */
enum job_state job_run(job *j);

/* ---- control_queue.c -------------------------------------------------------- */

/* Each write to control/merge: 0 (all of buf taken; *ids, if ids, the
 * new jobs' numbers, one per line, malloc'd) or an errno. */
int control_write(const char *buf, size_t size, char **ids, size_t *ids_len);
int control_queue_start(void);
/* Cancels, stops the workers, answers every waiter, forgets the jobs. */
void control_queue_stop(void);

/* ---- control_status.c ----------------------------------------------------- */

/* Under J.lock: forgets every text. */
void control_status_free_all(void);

#endif
