/*
 * control_status.c — control/status's texts: each lookup of the name
 * takes the status lines of the jobs kept as they are then, under an id
 * of its own, kept while the kernel holds that lookup's inode (control.h).
 * FUSE-free.
 */
#include "control.h"
#include "job.h"

#include <stdlib.h>
#include <string.h>

/* control/status is read through the kernel's page cache, so that what one
 * reader sees must not change under it: each lookup of the name takes a
 * new text under a new inode (entry timeout 0), kept while the kernel
 * holds that inode. */
typedef struct status_text {
	uint64_t id;
	uint64_t refs;
	char *text;
	size_t len;
	struct timespec when;
	struct status_text *next;
} status_text;

static struct {
	status_text *list;
	uint64_t next_id;
	/* The last text taken and when it first read so: a text equal to it
	 * keeps that time, so that a file that did not change does not look
	 * changed (`tar` stats the name, then opens it: two lookups, two
	 * texts, and it compares their times). */
	char *last;
	size_t last_len;
	struct timespec last_when;
} T = {NULL, 1, NULL, 0, {0, 0}};

/* Under J.lock: the time of text, the last one's if they are equal. */
static struct timespec text_time(const char *text, size_t len)
{
	if (T.last && T.last_len == len && !memcmp(T.last, text, len))
		return T.last_when;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	char *copy = malloc(len + 1);
	if (copy) {
		memcpy(copy, text, len);
		free(T.last);
		T.last = copy;
		T.last_len = len;
		T.last_when = now;
	}
	return now;
}

uint64_t control_status_take(void)
{
	sbuf b = {0};
	status_text *t = calloc(1, sizeof *t);
	pthread_mutex_lock(&J.lock);
	for (job *j = J.first; j; j = j->next)
		job_line(&b, j);
	if (t && !b.failed) {
		t->id = T.next_id++;
		t->text = b.p ? b.p : calloc(1, 1);
		t->len = b.len;
		t->when = text_time(t->text, t->len);
		t->next = T.list;
		T.list = t;
		b.p = NULL;
	} else {
		free(t);
		t = NULL;
	}
	pthread_mutex_unlock(&J.lock);
	free(b.p);
	return t ? t->id : 0;
}

static status_text *find_text(uint64_t id)
{
	for (status_text *t = T.list; t; t = t->next)
		if (t->id == id)
			return t;
	return NULL;
}

char *control_status_get(uint64_t id, size_t *len, struct timespec *when)
{
	char *copy = NULL;
	pthread_mutex_lock(&J.lock);
	status_text *t = find_text(id);
	if (t && (copy = malloc(t->len + 1))) {
		memcpy(copy, t->text, t->len);
		*len = t->len;
		*when = t->when;
	}
	pthread_mutex_unlock(&J.lock);
	return copy;
}

void control_status_ref(uint64_t id, uint64_t n, bool up)
{
	pthread_mutex_lock(&J.lock);
	for (status_text **p = &T.list; *p; p = &(*p)->next) {
		status_text *t = *p;
		if (t->id != id)
			continue;
		if (up) {
			t->refs += n;
		} else if ((t->refs = t->refs > n ? t->refs - n : 0) == 0) {
			*p = t->next;
			free(t->text);
			free(t);
		}
		break;
	}
	pthread_mutex_unlock(&J.lock);
}

void control_status_free_all(void)
{
	free(T.last);
	T.last = NULL;
	while (T.list) {
		status_text *t = T.list;
		T.list = t->next;
		free(t->text);
		free(t);
	}
}

