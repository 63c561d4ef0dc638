/*
 * control_queue.c — the job queue (control.h): each write to
 * control/merge is checked line by line against a snapshot and the core's
 * planner (control_parse.c), and queued whole or not at all; cancel; the
 * bounded queue's worker threads (job_run.c runs each job); waiting for a
 * job's end (control/wait), answered through the waiter's callback.
 * FUSE-free.
 */
#include "control.h"
#include "control_parse.h"
#include "job.h"
#include "log.h"
#include "state.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Someone waiting for a job's end (control_wait). */
typedef struct waiter {
	uint64_t id;
	const void *key; /* control_wait_cancel's */
	control_wait_fn *done;
	void *ctx;
	struct waiter *next;
} waiter;

bool control_job_exists(uint64_t id)
{
	pthread_mutex_lock(&J.lock);
	bool yes = find_job(id) != NULL;
	pthread_mutex_unlock(&J.lock);
	return yes;
}

/* ---- waiting for a job's end (control/wait) --------------------------------- */

uint64_t control_wait_size(uint64_t id)
{
	uint64_t size = 4096;
	pthread_mutex_lock(&J.lock);
	job *j = find_job(id);
	if (j && ended(j))
		size = job_line_len(j);
	pthread_mutex_unlock(&J.lock);
	return size;
}

/* Under J.lock: waiter w gets ended job j's line. */
static void reply_wait(const waiter *w, const job *j)
{
	sbuf b = {0};
	job_line(&b, j);
	w->done(w->ctx, b.p ? b.p : "", b.len, 0);
	free(b.p);
}

bool control_wait_cancel(const void *key)
{
	bool found = false;
	pthread_mutex_lock(&J.lock);
	for (waiter **w = &J.waiters; *w; w = &(*w)->next)
		if ((*w)->key == key) {
			waiter *x = *w;
			*w = x->next;
			x->done(x->ctx, NULL, 0, EINTR);
			free(x);
			found = true;
			break;
		}
	pthread_mutex_unlock(&J.lock);
	return found;
}

void control_wait(uint64_t id, const void *key, control_wait_fn *done,
                  bool (*interrupted)(void *ctx), void *ctx)
{
	waiter *w = malloc(sizeof *w);
	pthread_mutex_lock(&J.lock);
	job *j = find_job(id);
	int err = !j ? ENOENT : !w ? ENOMEM : 0;
	if (!err) {
		*w = (waiter){.id = id,
		              .key = key,
		              .done = done,
		              .ctx = ctx,
		              .next = J.waiters};
		if (ended(j) || J.stopping) {
			reply_wait(w, j);
		} else if (interrupted && interrupted(ctx)) {
			err = EINTR;
		} else {
			J.waiters = w;
			w = NULL;
		}
	}
	if (err)
		done(ctx, NULL, 0, err);
	pthread_mutex_unlock(&J.lock);
	free(w);
}

/* Under J.lock: job j ended; answer whoever waits for it. */
static void end_job(job *j, enum job_state st)
{
	j->state = st;
	clock_gettime(CLOCK_MONOTONIC, &j->ended);
	pthread_mutex_lock(&S.lock);
	for (size_t i = 0; i < j->n; i++) {
		slot *s = slot_get(j->inputs[i]); /* NULL once freed */
		if (s)
			s->busy = false;
	}
	pthread_mutex_unlock(&S.lock);
	for (waiter **w = &J.waiters; *w;) {
		if ((*w)->id == j->id) {
			waiter *x = *w;
			*w = x->next;
			reply_wait(x, j);
			free(x);
		} else {
			w = &(*w)->next;
		}
	}
	log_job_end(j);
	keep_ended(j);
}

/* ---- requests ------------------------------------------------------------------- */

typedef control_error req_error;

/* The copy of a request that control/status shows: its first 200 bytes
 * as they are (a NUL too: job_line escapes them all), then "..." if it
 * was longer; its length in *out_len. */
static char *request_copy(const char *s, size_t len, size_t *out_len)
{
	size_t n = len < 200 ? len : 200;
	char *p = malloc(n + 4);
	if (!p)
		return NULL;
	memcpy(p, s, n);
	strcpy(p + n, len > n ? "..." : "");
	*out_len = n + strlen(p + n);
	return p;
}

/* Records a rejected request (text: request_copy's, owned) in
 * control/status. */
static void reject(char *text, size_t text_len, const req_error *e)
{
	job *j = calloc(1, sizeof *j);
	if (!j || !text) {
		free(j);
		free(text);
		return;
	}
	j->request = text;
	j->request_len = text_len;
	snprintf(j->error, sizeof j->error, "%s", e->msg);
	pthread_mutex_lock(&J.lock);
	j->id = J.next_id++;
	j->state = REJECTED;
	clock_gettime(CLOCK_MONOTONIC, &j->queued_at);
	j->ended = j->started = j->queued_at;
	list_append(j);
	keep_ended(j);
	pthread_mutex_unlock(&J.lock);
}


static bool output_taken(const char *name)
{
	char path[PATH_MAX];
	segdir_path(path, name, NULL);
	if (access(path, F_OK) == 0 || errno != ENOENT)
		return true;
	for (job *j = J.first; j; j = j->next) /* under J.lock */
		if (!ended(j) && !strcmp(j->out, name))
			return true;
	return false;
}

/* Is slot id an input of one of the n jobs? */
static bool input_of(job *const *jobs, size_t n, uint32_t id)
{
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < jobs[i]->n; k++)
			if (jobs[i]->inputs[k] == id)
				return true;
	return false;
}

static bool taken_cb(void *ctx, const char *name)
{
	(void)ctx;
	return output_taken(name);
}

/*
 * Checks one merge request against the current snapshot (under J.lock
 * and S.lock) and fills j from its plan. The request is read by
 * control_parse_merge, a pure function of the words and the snapshot
 * made here; earlier[0 .. nearlier) are the requests before it in the
 * same write, checked but not queued yet.
 */
static int plan_merge(const control_words *w, const snap *cur,
                      job *const *earlier, size_t nearlier, job *j,
                      req_error *e)
{
	size_t cap = cur->n ? cur->n : 1;
	kvs_merge_live *live = calloc(cap, sizeof *live);
	unsigned char *busy = calloc(cap, 1);
	kvs_merge_plan plan;
	int rc = 0;
	if (!live || !busy) {
		rc = control_fail(e, ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < cur->n; i++) {
		const slot *s = slot_get(cur->live[i]);
		live[i].name = s->name;
		live[i].info = &s->info;
		busy[i] = !s->busy ? CONTROL_FREE
		          : input_of(earlier, nearlier, cur->live[i])
		              ? CONTROL_BUSY_EARLIER
		              : CONTROL_BUSY;
	}
	control_snapshot sn = {live, cur->n, busy, taken_cb, NULL};
	if ((rc = control_parse_merge(w, &sn, &plan, e)))
		goto out;
	snprintf(j->out, sizeof j->out, "%s", plan.output);
	j->opt = plan.options;
	j->inputs = calloc(plan.n, sizeof *j->inputs);
	j->names = calloc(plan.n, sizeof *j->names);
	if (!j->inputs || !j->names) {
		rc = control_fail(e, ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < plan.n; k++) {
		const slot *s = slot_get(cur->live[plan.first + k]);
		j->inputs[k] = s->id;
		if (!(j->names[k] = strdup(s->name))) {
			j->n = k;
			rc = control_fail(e, ENOMEM, "out of memory");
			goto out;
		}
	}
	j->n = plan.n;
	j->bytes_in = plan.bytes_in;
out:
	free(live);
	free(busy);
	return rc;
}

static int parse_cancel(const control_words *w, req_error *e)
{
	uint64_t id;
	int rc = control_parse_cancel(w, &id, e);
	if (rc)
		return rc;
	job *j = find_job(id);
	if (!j || j->state == REJECTED)
		return control_fail(e, ENOENT, "no job %" PRIu64, id);
	if (ended(j))
		return control_fail(e, EINVAL, "job %" PRIu64 " has already ended (%s)",
		            id, job_state_names[j->state]);
	if (j->state == QUEUED) { /* out of the queue at once */
		job **q = &J.queue_head;
		while (*q != j)
			q = &(*q)->next_queued;
		*q = j->next_queued;
		if (J.queue_tail == j) {
			J.queue_tail = NULL;
			for (job *x = J.queue_head; x; x = x->next_queued)
				J.queue_tail = x;
		}
		J.queued--;
		snprintf(j->error, sizeof j->error, "cancelled before it ran");
		end_job(j, CANCELLED);
	} else {
		atomic_store(&j->cancel, true);
	}
	return 0;
}

/* One line: checked, then queued (under J.lock). */
static int handle_line(char *line, size_t len, job *const *earlier,
                       size_t nearlier, req_error *e, job **made)
{
	*made = NULL;
	control_words w;
	int rc = control_split(line, len, &w, e);
	if (rc)
		return rc;
	if (!strcmp(w.word[0], "cancel"))
		return parse_cancel(&w, e);
	if (J.stopping)
		return control_fail(e, ESHUTDOWN, "segfs is unmounting");
	if (S.ro_why)
		return control_fail(e, EROFS, "%.400s: nothing can be merged",
		            S.ro_why);
	job *j = calloc(1, sizeof *j);
	if (!j)
		return control_fail(e, ENOMEM, "out of memory");
	snap *cur = snap_current();
	pthread_mutex_lock(&S.lock);
	rc = plan_merge(&w, cur, earlier, nearlier, j, e);
	if (!rc && J.queued + nearlier >= S.queue)
		rc = control_fail(e, EAGAIN, "%zu jobs are queued already (the bound)",
		          J.queued + nearlier);
	if (!rc)
		for (size_t k = 0; k < j->n; k++)
			slot_get(j->inputs[k])->busy = true;
	pthread_mutex_unlock(&S.lock);
	snap_unref(cur, 1);
	if (rc) {
		free_job(j);
		return rc;
	}
	*made = j;
	return 0;
}

/* job.h */
int control_write(const char *buf, size_t size, char **ids,
                         size_t *ids_len)
{
	/* each line of the write is one request; all are checked before
	 * any is queued */
	char *copy = malloc(size + 1);
	if (!copy)
		return ENOMEM;
	memcpy(copy, buf, size);
	copy[size] = '\0';
	size_t nl = 0;
	for (size_t i = 0; i < size; i++)
		nl += copy[i] == '\n';
	size_t cap = nl + 1;
	job **made = calloc(cap, sizeof *made);
	if (!made) {
		free(copy);
		return ENOMEM;
	}
	req_error e = {0};
	size_t nmade = 0;
	int rc = 0;
	char *rejected = NULL;
	size_t rejected_len = 0;
	pthread_mutex_lock(&J.lock);
	char *p = copy, *end = copy + size;
	bool any = false;
	while (p < end || !any) {
		char *q = memchr(p, '\n', (size_t)(end - p));
		size_t len = q ? (size_t)(q - p) : (size_t)(end - p);
		if (!q && len == 0 && any)
			break; /* the final newline */
		any = true;
		size_t text_len = 0;
		char *text = request_copy(p, len, &text_len);
		char save = p[len];
		p[len] = '\0';
		rc = handle_line(p, len, made, nmade, &e, &made[nmade]);
		p[len] = save;
		if (rc) {
			rejected = text;
			rejected_len = text_len;
			break;
		}
		if (made[nmade]) {
			made[nmade]->request = text;
			made[nmade]->request_len = text_len;
			nmade++;
		} else {
			free(text);
		}
		p += len + (q ? 1 : 0);
		if (!q)
			break;
	}
	if (rc) { /* nothing of this write happens */
		pthread_mutex_lock(&S.lock);
		for (size_t i = 0; i < nmade; i++)
			for (size_t k = 0; k < made[i]->n; k++)
				slot_get(made[i]->inputs[k])->busy = false;
		pthread_mutex_unlock(&S.lock);
		for (size_t i = 0; i < nmade; i++)
			free_job(made[i]);
	} else {
		for (size_t i = 0; i < nmade; i++) {
			job *j = made[i];
			j->id = J.next_id++;
			j->state = QUEUED;
			clock_gettime(CLOCK_MONOTONIC, &j->queued_at);
			list_append(j);
			if (J.queue_tail)
				J.queue_tail->next_queued = j;
			else
				J.queue_head = j;
			J.queue_tail = j;
			J.queued++;
		}
		pthread_cond_broadcast(&J.wake);
		if (ids) {
			sbuf b = {0};
			for (size_t i = 0; i < nmade; i++)
				sb_printf(&b, "%" PRIu64 "\n", made[i]->id);
			if (b.failed) /* the jobs stand: only their numbers go */
				free(b.p), b.p = NULL, b.len = 0;
			*ids = b.p;
			*ids_len = b.len;
		}
	}
	pthread_mutex_unlock(&J.lock);
	if (rc) { /* its line in control/status, once the write is undone */
		char req[4 * 210];
		/* limited: a script may retry a bad request forever */
		log_limited("control/merge", LOG_WARNING,
		            "control/merge: refused \"%s\" (%s): %s",
		            rejected ? log_escape(req, sizeof req, rejected,
		                                  rejected_len)
		                     : "?",
		            strerrorname_np(rc) ? strerrorname_np(rc) : "?",
		            e.msg);
		reject(rejected, rejected_len, &e);
	}
	free(made);
	free(copy);
	return rc;
}

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&J.lock);
	for (;;) {
		while (!J.stopping && !J.queue_head)
			pthread_cond_wait(&J.wake, &J.lock);
		if (J.stopping)
			break;
		job *j = J.queue_head;
		J.queue_head = j->next_queued;
		if (!J.queue_head)
			J.queue_tail = NULL;
		J.queued--;
		j->state = RUNNING;
		clock_gettime(CLOCK_MONOTONIC, &j->started);
		pthread_mutex_unlock(&J.lock);
		log_job_start(j);
		enum job_state end = job_run(j);
		pthread_mutex_lock(&J.lock);
		end_job(j, end);
	}
	pthread_mutex_unlock(&J.lock);
	tls_release();
	return NULL;
}

int control_queue_start(void)
{
	J.threads = calloc(S.workers, sizeof *J.threads);
	if (!J.threads)
		return ENOMEM;
	for (unsigned i = 0; i < S.workers; i++) {
		int e = pthread_create(&J.threads[i], NULL, worker, NULL);
		if (e)
			return e;
		J.nthreads++;
	}
	return 0;
}

void control_queue_stop(void)
{
	pthread_mutex_lock(&J.lock);
	J.stopping = true;
	for (job *j = J.first; j; j = j->next)
		if (j->state == RUNNING)
			atomic_store(&j->cancel, true);
	pthread_cond_broadcast(&J.wake);
	pthread_mutex_unlock(&J.lock);
	for (unsigned i = 0; i < J.nthreads; i++)
		pthread_join(J.threads[i], NULL);
	free(J.threads);
	J.threads = NULL;
	J.nthreads = 0;
	pthread_mutex_lock(&J.lock);
	for (job *j = J.queue_head; j; j = j->next_queued) {
		snprintf(j->error, sizeof j->error, "segfs unmounted");
		end_job(j, CANCELLED);
	}
	J.queue_head = J.queue_tail = NULL;
	J.queued = 0;
	while (J.waiters) {
		waiter *w = J.waiters;
		J.waiters = w->next;
		w->done(w->ctx, NULL, 0, EINTR);
		free(w);
	}
	job *j = J.first;
	J.first = J.last = NULL;
	J.ended_head = J.ended_tail = NULL;
	J.nended = 0;
	pthread_mutex_unlock(&J.lock);
	while (j) {
		job *next = j->next;
		free_job(j);
		j = next;
	}
}
