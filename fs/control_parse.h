/*
 * control_parse.h — control/merge's request grammar (docs/USAGE.md,
 * "Control files"), as pure functions of the request's bytes and a
 * snapshot of the catalog: no FUSE, no global state, so that a unit test
 * and a fuzz target (tests/fuzz/fuzz_control.c) can call them.
 */
#ifndef SEGFS_CONTROL_PARSE_H
#define SEGFS_CONTROL_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvseg/merge_plan.h"

#define CONTROL_MAX_REQUEST 4096
#define CONTROL_MAX_INPUTS  4096
#define CONTROL_MAX_WORDS   (CONTROL_MAX_INPUTS + 8)

/* A refusal: the errno of the write and the reason control/status shows. */
typedef struct control_error {
	int err;
	char msg[256];
} control_error;

/* Sets *e (the errno err and the printf-formatted reason) and returns
 * err: a refusal in one line, for the parser and the job queue alike. */
int control_fail(control_error *e, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A request split into its words (pointing into the line, which the split
 * cuts at the spaces). */
typedef struct control_words {
	char *word[CONTROL_MAX_WORDS];
	size_t n;
} control_words;

/* What the snapshot says of live segment i (control_snapshot.busy). */
enum { CONTROL_FREE = 0, CONTROL_BUSY, CONTROL_BUSY_EARLIER };

typedef struct control_snapshot {
	const kvs_merge_live *live; /* oldest first */
	size_t n;
	const unsigned char *busy;  /* CONTROL_*, one per live segment; may be
	                             * NULL: none is */
	kvs_merge_name_taken taken; /* may be NULL: no name is taken */
	void *taken_ctx;
} control_snapshot;

/*
 * Checks the bytes of one request line[0 .. len) (without its newline;
 * line[len] is NUL) and splits it into words: 0, or an errno (EINVAL)
 * with e set. A request of any other verb than merge and cancel is
 * refused here too.
 */
int control_split(char *line, size_t len, control_words *w, control_error *e);

/* A "cancel" request's job id: 0 or EINVAL. */
int control_parse_cancel(const control_words *w, uint64_t *id,
                         control_error *e);

/*
 * A "merge" request over the snapshot: 0 with *plan made by the core's
 * planner (kvs_merge_plan_make), or an errno (EINVAL, ENOENT, EEXIST,
 * EBUSY, ENOMEM) with e set.
 */
int control_parse_merge(const control_words *w, const control_snapshot *snap,
                        kvs_merge_plan *plan, control_error *e);

#endif
