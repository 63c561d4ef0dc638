/*
 * control.c — the control files' top (control.h): control/merge as each
 * lookup saw it, whose writes become requests to the job queue, and the
 * start and stop of it all. FUSE-free.
 */
#include "control.h"
#include "job.h"

#include <stdlib.h>
#include <string.h>

/* ---- control/merge as each lookup saw it ------------------------------------------
 *
 * Every lookup of control/merge gives a new inode (entry timeout 0), so
 * that the file a writer opened is its own: reading it after a write gives
 * the numbers of the jobs that write made, one per line, from the offset
 * where the write ended (the bytes before read as NUL; a `read` after an
 * `echo >&3` on one descriptor opened with `3<>` gets them). Only the last
 * write's numbers are kept: at most one line per line of that write. */
typedef struct merge_file {
	uint64_t id;
	uint64_t refs;
	uint64_t tail_off; /* where the last write ended */
	char *tail;        /* its jobs' numbers */
	size_t tail_len;
	struct merge_file *next;
} merge_file;

static struct {
	merge_file *list;
	uint64_t next_id;
} MF = {NULL, 1};

/* Under J.lock. */
static merge_file *find_file(uint64_t id)
{
	for (merge_file *f = MF.list; f; f = f->next)
		if (f->id == id)
			return f;
	return NULL;
}

uint64_t control_file_take(void)
{
	merge_file *f = calloc(1, sizeof *f);
	if (!f)
		return 0;
	pthread_mutex_lock(&J.lock);
	f->id = MF.next_id++;
	f->next = MF.list;
	MF.list = f;
	pthread_mutex_unlock(&J.lock);
	return f->id;
}

void control_file_ref(uint64_t id, uint64_t n, bool up)
{
	pthread_mutex_lock(&J.lock);
	for (merge_file **p = &MF.list; *p; p = &(*p)->next) {
		merge_file *f = *p;
		if (f->id != id)
			continue;
		if (up) {
			f->refs += n;
		} else if ((f->refs = f->refs > n ? f->refs - n : 0) == 0) {
			*p = f->next;
			free(f->tail);
			free(f);
		}
		break;
	}
	pthread_mutex_unlock(&J.lock);
}

uint64_t control_file_size(uint64_t id)
{
	pthread_mutex_lock(&J.lock);
	merge_file *f = find_file(id);
	uint64_t size = f ? f->tail_off + f->tail_len : 0;
	pthread_mutex_unlock(&J.lock);
	return size;
}

void control_file_truncate(uint64_t id)
{
	pthread_mutex_lock(&J.lock);
	merge_file *f = find_file(id);
	if (f) {
		free(f->tail);
		f->tail = NULL;
		f->tail_off = f->tail_len = 0;
	}
	pthread_mutex_unlock(&J.lock);
}

int control_file_write(uint64_t id, const char *buf, size_t size, off_t off)
{
	char *ids = NULL;
	size_t ids_len = 0;
	int err = control_write(buf, size, &ids, &ids_len);
	if (err)
		return err;
	pthread_mutex_lock(&J.lock);
	merge_file *f = find_file(id);
	if (f) {
		free(f->tail);
		f->tail = ids;
		f->tail_len = ids_len;
		f->tail_off = (uint64_t)off + size;
		ids = NULL;
	}
	pthread_mutex_unlock(&J.lock);
	free(ids);
	return 0;
}

char *control_file_read(uint64_t id, size_t size, off_t off, size_t *n)
{
	pthread_mutex_lock(&J.lock);
	merge_file *f = find_file(id);
	uint64_t end = f ? f->tail_off + f->tail_len : 0;
	uint64_t o = (uint64_t)off < end ? (uint64_t)off : end;
	*n = end - o < size ? (size_t)(end - o) : size;
	char *out = malloc(*n ? *n : 1);
	if (out) {
		memset(out, 0, *n);
		for (size_t i = 0; i < *n; i++)
			if (o + i >= f->tail_off)
				out[i] = f->tail[o + i - f->tail_off];
	}
	pthread_mutex_unlock(&J.lock);
	return out;
}

static void files_free_all(void)
{
	while (MF.list) {
		merge_file *f = MF.list;
		MF.list = f->next;
		free(f->tail);
		free(f);
	}
}

int control_start(void) { return control_queue_start(); }

void control_stop(void)
{
	control_queue_stop();
	pthread_mutex_lock(&J.lock);
	control_status_free_all();
	files_free_all();
	pthread_mutex_unlock(&J.lock);
}
