/*
 * control.c — merges requested through control/merge: parsing (each
 * request is checked when it is written, and a bad one fails that write
 * with nothing changed), the bounded job queue and its worker threads,
 * publication, control/status and control/wait (docs/USAGE.md,
 * "Control files").
 */
#include "segfs.h"
#include "control_parse.h"
#include "guard.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "kvseg/merge.h"


enum job_state { QUEUED, RUNNING, DONE, FAILED, CANCELLED, REJECTED };
static const char *const state_names[] = {"queued", "running", "done",
                                          "failed", "cancelled", "rejected"};

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

typedef struct waiter {
	fuse_req_t req;
	uint64_t id;
	size_t size;
	off_t off;
	struct waiter *next;
	uint64_t ino; /* a getattr's inode (control_wait_attr); 0: a read */
} waiter;

static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	job *first, *last;
	job *queue_head, *queue_tail;
	job *ended_head, *ended_tail; /* by end: the first goes first */
	size_t nended;
	size_t queued;
	uint64_t next_id;
	waiter *waiters;
	pthread_t *threads;
	unsigned nthreads;
	bool stopping;
} J = {.lock = PTHREAD_MUTEX_INITIALIZER,
       .wake = PTHREAD_COND_INITIALIZER,
       .next_id = 1};

static double seconds(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) +
	       (double)(b->tv_nsec - a->tv_nsec) * 1e-9;
}

/* ---- status lines ------------------------------------------------------------ */

typedef struct sbuf {
	char *p;
	size_t len, cap;
	bool failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		size_t room = b->cap - b->len;
		int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->failed = true;
			return;
		}
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)n;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->failed = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

/* A JSON string of len arbitrary bytes, NUL and invalid UTF-8 among
 * them: byte b is the character U+00b (so json.loads(...).encode("latin-1")
 * gives the bytes back), which jansson writes as \u00XX (JSON_ENSURE_ASCII
 * below). NULL if out of memory. */
static json_t *json_bytes(const char *s, size_t len)
{
	char *u = malloc(2 * len + 1), *o = u;
	json_t *v;

	if (!u)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)s; len--; p++) {
		if (*p < 0x80) {
			*o++ = (char)*p;
		} else {
			*o++ = (char)(0xc0 | *p >> 6);
			*o++ = (char)(0x80 | (*p & 0x3f));
		}
	}
	v = json_stringn(u, (size_t)(o - u));
	free(u);
	return v;
}

/* Counts are below 2^63 (json_int_t's limit) by far. */
static json_t *json_count(uint64_t v)
{
	return json_integer(v > INT64_MAX ? INT64_MAX : (json_int_t)v);
}

/* One job's status line, written by jansson. Under J.lock. */
static void job_line(sbuf *b, const job *j)
{
	struct timespec now;
	json_t *line = json_object(), *inputs = json_array();
	char *text = NULL;
	double el = 0;
	int bad = !line || !inputs;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (j->state == RUNNING)
		el = seconds(&j->started, &now);
	else if (j->state != QUEUED && j->started.tv_sec)
		el = seconds(&j->started, &j->ended);
	for (size_t i = 0; !bad && i < j->n; i++)
		bad |= json_array_append_new(
		    inputs, json_bytes(j->names[i], strlen(j->names[i])));
	if (line) {
		bad |= json_object_set_new(line, "id", json_count(j->id));
		bad |= json_object_set_new(line, "state",
		                           json_string(state_names[j->state]));
		bad |= json_object_set_new(
		    line, "request", json_bytes(j->request, j->request_len));
		bad |= json_object_set_new(line, "inputs", inputs);
		inputs = NULL;
		bad |= json_object_set_new(
		    line, "output",
		    j->out[0] ? json_bytes(j->out, strlen(j->out))
		              : json_null());
		bad |= json_object_set_new(
		    line, "records_done",
		    json_count((uint64_t)atomic_load(&j->done)));
		bad |= json_object_set_new(
		    line, "records_total",
		    json_count((uint64_t)atomic_load(&j->total)));
		bad |= json_object_set_new(line, "bytes_in",
		                           json_count(j->bytes_in));
		bad |= json_object_set_new(line, "bytes_out",
		                           json_count(j->bytes_out));
		/* milliseconds, written with no binary noise after them */
		bad |= json_object_set_new(
		    line, "elapsed",
		    json_real((double)(int64_t)(el * 1000 + 0.5) / 1000));
		bad |= json_object_set_new(
		    line, "error",
		    j->error[0] ? json_bytes(j->error, strlen(j->error))
		                : json_null());
	}
	if (!bad)
		text = json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII |
		                            JSON_REAL_PRECISION(15));
	if (text)
		sb_printf(b, "%s\n", text);
	else
		b->failed = true;
	free(text);
	json_decref(inputs);
	json_decref(line);
}

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

static void status_free_all(void)
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

static job *find_job(uint64_t id)
{
	for (job *j = J.first; j; j = j->next)
		if (j->id == id)
			return j;
	return NULL;
}

static bool ended(const job *j) { return j->state >= DONE; }

bool control_job_exists(uint64_t id)
{
	pthread_mutex_lock(&J.lock);
	bool yes = find_job(id) != NULL;
	pthread_mutex_unlock(&J.lock);
	return yes;
}

/* Under J.lock: the length of ended job j's final line. */
static uint64_t final_len(const job *j)
{
	sbuf b = {0};
	job_line(&b, j);
	free(b.p);
	return b.len;
}

uint64_t control_wait_size(uint64_t id)
{
	uint64_t size = 4096;
	pthread_mutex_lock(&J.lock);
	job *j = find_job(id);
	if (j && ended(j))
		size = final_len(j);
	pthread_mutex_unlock(&J.lock);
	return size;
}

/* Under J.lock: the reply to waiter w of ended job j. */
static void reply_wait(const waiter *w, const job *j)
{
	if (w->ino) {
		struct stat st;
		wait_stat(&st, w->ino, final_len(j));
		fuse_reply_attr(w->req, &st, 0);
		return;
	}
	sbuf b = {0};
	job_line(&b, j);
	size_t o = (uint64_t)w->off < b.len ? (size_t)w->off : b.len;
	size_t n = b.len - o < w->size ? b.len - o : w->size;
	fuse_reply_buf(w->req, b.p ? b.p + o : "", n);
	free(b.p);
}

static void wait_interrupted(fuse_req_t req, void *data)
{
	(void)data;
	pthread_mutex_lock(&J.lock);
	for (waiter **w = &J.waiters; *w; w = &(*w)->next)
		if ((*w)->req == req) {
			waiter *x = *w;
			*w = x->next;
			fuse_reply_err(req, EINTR);
			free(x);
			break;
		}
	pthread_mutex_unlock(&J.lock);
}

/* A read (attr_ino 0) or a getattr of control/wait/ID (its inode). */
static void wait_for(fuse_req_t req, uint64_t id, size_t size, off_t off,
                     uint64_t attr_ino)
{
	/* First, while no job end can reply to req: libfuse may call
	 * wait_interrupted from here (it then finds no waiter), and a reply
	 * from another thread during this call would free req under it. */
	fuse_req_interrupt_func(req, wait_interrupted, NULL);
	waiter *w = malloc(sizeof *w);
	pthread_mutex_lock(&J.lock);
	job *j = find_job(id);
	int err = !j ? ENOENT : !w ? ENOMEM : 0;
	if (!err) {
		*w = (waiter){.req = req,
		              .id = id,
		              .size = size,
		              .off = off,
		              .next = J.waiters,
		              .ino = attr_ino};
		if (ended(j) || J.stopping) {
			reply_wait(w, j);
		} else if (fuse_req_interrupted(req)) {
			err = EINTR;
		} else {
			J.waiters = w;
			w = NULL;
		}
	}
	pthread_mutex_unlock(&J.lock);
	free(w);
	if (err)
		fuse_reply_err(req, err);
}

void control_wait(fuse_req_t req, uint64_t id, size_t size, off_t off)
{
	wait_for(req, id, size, off, 0);
}

void control_wait_attr(fuse_req_t req, uint64_t id, uint64_t ino)
{
	wait_for(req, id, 0, 0, ino);
}

static void free_job(job *j);

/* ---- the log (log.h): each job's start and end, refused requests ------ */

/* j's inputs for a message: the first eight names, then how many more. */
static void inputs_text(char *out, size_t cap, const job *j)
{
	size_t o = 0;
	out[0] = '\0';
	for (size_t k = 0; k < j->n && o < cap; k++) {
		if (k == 8) {
			snprintf(out + o, cap - o, " and %zu more", j->n - 8);
			return;
		}
		int w = snprintf(out + o, cap - o, "%s%s", k ? " " : "",
		                 j->names[k]);
		o += w > 0 ? (size_t)w : 0;
	}
}

static void log_job_start(const job *j)
{
	char req[4 * 210], in[1024];
	inputs_text(in, sizeof in, j);
	log_msg(LOG_INFO,
	        "job %" PRIu64 " started: \"%s\", inputs %s, output %s",
	        j->id, log_escape(req, sizeof req, j->request, j->request_len),
	        in, j->out);
}

/* Under J.lock: j has ended. */
static void log_job_end(const job *j)
{
	char req[4 * 210], in[1024], took[64];
	inputs_text(in, sizeof in, j);
	if (j->started.tv_sec || j->started.tv_nsec)
		snprintf(took, sizeof took, "%.3f s",
		         seconds(&j->started, &j->ended));
	else
		snprintf(took, sizeof took, "never ran");
	log_msg(j->state == DONE ? LOG_INFO : LOG_WARNING,
	        "job %" PRIu64 " %s: \"%s\", inputs %s, output %s, records "
	        "%" PRIu64 " of %" PRIu64 ", bytes in %" PRIu64 ", bytes out "
	        "%" PRIu64 ", elapsed %s%s%s",
	        j->id, state_names[j->state],
	        log_escape(req, sizeof req, j->request, j->request_len), in,
	        j->out, (uint64_t)atomic_load(&j->done),
	        (uint64_t)atomic_load(&j->total), j->bytes_in, j->bytes_out,
	        took, j->error[0] ? ", error: " : "", j->error);
}

/* Under J.lock: j joins the jobs kept, as the newest. */
static void list_append(job *j)
{
	j->prev = J.last;
	j->next = NULL;
	if (J.last)
		J.last->next = j;
	else
		J.first = j;
	J.last = j;
}

/*
 * Under J.lock: ended job j (its waiters answered) is kept among the last
 * S.history jobs to end; beyond them the one that ended first is dropped
 * from control/status (its number is then unknown to control/wait/ and
 * cancel). Unfinished jobs all stay: a script that retries a bad request
 * forever does not grow segfs without bound.
 */
static void keep_ended(job *j)
{
	j->next_ended = NULL;
	if (J.ended_tail)
		J.ended_tail->next_ended = j;
	else
		J.ended_head = j;
	J.ended_tail = j;
	J.nended++;
	while (J.nended > S.history) { /* never j: S.history >= 1 */
		job *x = J.ended_head;
		J.ended_head = x->next_ended;
		J.nended--;
		if (x->prev)
			x->prev->next = x->next;
		else
			J.first = x->next;
		if (x->next)
			x->next->prev = x->prev;
		else
			J.last = x->prev;
		free_job(x);
	}
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

static void free_job(job *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->n; i++)
		free(j->names[i]);
	free(j->names);
	free(j->inputs);
	free(j->request);
	free(j);
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
		            id, state_names[j->state]);
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

/* Each write to control/merge: 0 (all of buf taken; *ids, if ids, the
 * new jobs' numbers, one per line, malloc'd) or an errno. */
static int control_write(const char *buf, size_t size, char **ids,
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

/* ---- running a job ---------------------------------------------------------------- */

static int progress(void *ctx, uint64_t done, uint64_t total)
{
	job *j = ctx;
	atomic_store(&j->done, done);
	atomic_store(&j->total, total);
	return atomic_load(&j->cancel) ? 1 : 0;
}

static void set_error(job *j, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	pthread_mutex_lock(&J.lock);
	vsnprintf(j->error, sizeof j->error, fmt, ap);
	pthread_mutex_unlock(&J.lock);
	va_end(ap);
}

/*
 * Under S.publish, S.cat just reloaded: the first of j's inputs that is no
 * longer live where it was (in a generation another process published:
 * segfs's own jobs never share an input), or NULL while the inputs are
 * still live, consecutive and the same files.
 */
static const char *moved_input(const job *j)
{
	size_t count = kvs_catalog_count(S.cat);
	ptrdiff_t at = kvs_catalog_find(S.cat, j->names[0]);
	for (size_t k = 0; k < j->n; k++) {
		const kvs_catalog_entry *e =
		    at >= 0 && (size_t)at + k < count
		        ? kvs_catalog_entry_at(S.cat, (size_t)at + k)
		        : NULL;
		const slot *s = slot_get(j->inputs[k]);
		if (!s) /* retired and freed: not live */
			return j->names[k];
		if (!e || strcmp(e->name, s->name) ||
		    e->header_crc != s->info.header_crc)
			return s->name;
	}
	return NULL;
}

/* Under S.publish, S.cat just reloaded: j failed because of the
 * generation another process published during its merge; says so. */
static void catalog_changed(job *j, const char *moved)
{
	set_error(j,
	          "the catalog changed during the merge (another process "
	          "published generation %" PRIu64 "%s%s%s); nothing was "
	          "published",
	          kvs_catalog_generation(S.cat), moved ? ", in which " : "",
	          moved ? moved : "",
	          moved ? " is no longer where it was" : "");
}

/* Publishes j's output in place of its inputs; under S.publish. */
static int publish(job *j, const char *out_path)
{
	kvs_error err = {0};
	kvs_status st = kvs_catalog_reload(S.cat, &err);
	if (st != KVS_OK) {
		set_error(j, "reading the catalog: %s", err.message);
		return -1;
	}
	const char *moved = moved_input(j);
	if (moved) {
		catalog_changed(j, moved);
		return -1;
	}
	char path[PATH_MAX], link_path[PATH_MAX];
	size_t linked = 0;
	if (!S.keep_retired) {
		/* .NAME.retired keeps each input until its last reader is
		 * gone, and tells a later mount what to remove if we die
		 * (state.c, recover_retired) */
		for (; linked < j->n; linked++) {
			segdir_path(path, j->names[linked], NULL);
			segdir_path(link_path, j->names[linked], "retired");
			unlink(link_path);
			if (link(path, link_path) < 0) {
				set_error(j, "%s: %s", link_path,
				          strerror(errno));
				break;
			}
		}
	}
	if (!S.keep_retired && linked < j->n)
		st = KVS_E_IO;
	else
		st = kvs_catalog_replace(S.cat, kvs_catalog_generation(S.cat),
		                         (const char *const *)j->names, j->n,
		                         j->out, false, &err);
	if (st != KVS_OK) {
		/* KVS_E_CONFLICT: another process published between the
		 * reload and the replace */
		if (st == KVS_E_CONFLICT &&
		    kvs_catalog_reload(S.cat, &err) == KVS_OK)
			catalog_changed(j, moved_input(j));
		else if (st != KVS_E_IO || linked == j->n)
			set_error(j, "publishing: %s", err.message);
		for (size_t k = 0; k < linked; k++) {
			segdir_path(link_path, j->names[k], "retired");
			unlink(link_path);
		}
		return -1;
	}
	(void)out_path;
	if (!S.keep_retired) {
		pthread_mutex_lock(&S.lock);
		for (size_t k = 0; k < j->n; k++)
			slot_get(j->inputs[k])->linked = true;
		pthread_mutex_unlock(&S.lock);
		for (size_t k = 0; k < j->n; k++) {
			segdir_path(path, j->names[k], NULL);
			unlink(path);
		}
	}
	if (state_reload_locked(&err) != 0)
		set_error(j, "published, but not yet served: %s", err.message);
	return 0;
}

/*
 * The writer of a merge that a fault cut short (guard.h) neither removed
 * its temporary file, .OUT.pub-XXXXXX, nor closed it: the descriptor is
 * found by its path, the file removed and the descriptor closed. (A fault
 * comes from reading an input, before the output has its name.)
 */
static void remove_merge_temp(const char *out)
{
	char prefix[PATH_MAX];
	segdir_path(prefix, out, "pub-");
	size_t plen = strlen(prefix);
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	int self = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char link[PATH_MAX], path[PATH_MAX];
		snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(link, path, sizeof path - 1);
		int fd = atoi(e->d_name);
		if (n <= 0 || (size_t)n <= plen || fd == self)
			continue;
		path[n] = '\0';
		if (strncmp(path, prefix, plen) == 0) {
			unlink(path);
			close(fd);
		}
	}
	closedir(d);
}

/* A read of an input faulted during j's merge: the input is damaged. */
static kvs_status merge_fault(job *j)
{
	uint64_t off;
	slot *s = slot_damage_at(guard_fault_addr, &off);
	set_error(j,
	          "%s: " DAMAGED_WHY " (a read of it failed): nothing was "
	          "merged",
	          s->name);
	remove_merge_temp(j->out);
	return KVS_E_IO;
}

/*
 * The writer's publish hook (kvs_writer_options.publish): the output is
 * complete and named OUT. A cancel still wins here; then publish() under
 * S.publish. A failure makes the writer remove OUT, unless the catalog
 * names OUT after all: then it stays, and the job fails all the same.
 * publish() takes locks, so it runs unguarded (guard.h), as it did after
 * the merge.
 */
static kvs_status publish_output(void *ctx, const char *path, kvs_error *err)
{
	job *j = ctx;
	sigjmp_buf *volatile guard = guard_jb;
	guard_jb = NULL;
	struct stat sb;
	if (stat(path, &sb) == 0) {
		pthread_mutex_lock(&J.lock); /* status lines read it */
		j->bytes_out = (uint64_t)sb.st_size;
		pthread_mutex_unlock(&J.lock);
	}
	kvs_status st = KVS_OK;
	if (atomic_load(&j->cancel)) {
		st = kvs_error_set(err, KVS_E_CANCELED, "cancelled");
	} else {
		pthread_mutex_lock(&S.publish);
		if (publish(j, path) != 0) {
			j->publish_failed = true;
			if (kvs_catalog_find(S.cat, j->out) < 0)
				st = kvs_error_set(err, KVS_E_IO, "%s", j->error);
		}
		pthread_mutex_unlock(&S.publish);
	}
	guard_jb = guard;
	return st;
}

/*
 * The writer found j's output name taken (KVS_E_EXISTS) before it could
 * publish. When another process published a generation without j's inputs
 * meanwhile — most often another segfs on SEGDIR that merged the same
 * inputs under the same default name — that is the cause to report, not
 * the writer's "a file appeared there": the file is the other merge's
 * output. Otherwise the writer's message stands.
 */
static void output_taken_why(job *j)
{
	kvs_error err;
	pthread_mutex_lock(&S.publish);
	const char *moved = NULL;
	if (kvs_catalog_reload(S.cat, &err) == KVS_OK &&
	    (moved = moved_input(j)) != NULL)
		catalog_changed(j, moved);
	pthread_mutex_unlock(&S.publish);
}

static kvs_status guarded_merge(job *j, kvs_segment **segs, size_t n,
                                const char *out_path,
                                const kvs_merge_options *opt,
                                kvs_error *err)
{
	volatile kvs_status st = KVS_E_IO;
	GUARDED(st = merge_fault(j),
	        st = kvs_merge(segs, n, out_path, opt, NULL, err));
	return st;
}

static void run(job *j)
{
	size_t n = j->n;
	kvs_segment **segs = calloc(n, sizeof *segs);
	bool ok = segs != NULL;
	pthread_mutex_lock(&S.lock);
	for (size_t k = 0; ok && k < n; k++) {
		slot *s = slot_get(j->inputs[k]);
		/* NULL: retired, and freed with its last reader */
		if (!s || !s->seg || s->retired || slot_damaged(s)) {
			bool damaged = s && slot_damaged(s);
			ok = false;
			pthread_mutex_unlock(&S.lock);
			if (damaged)
				set_error(j,
				          "%s: " DAMAGED_WHY
				          ": it cannot be merged",
				          j->names[k]);
			else
				set_error(j,
				          "%s was retired by another process "
				          "before the merge ran",
				          j->names[k]);
			pthread_mutex_lock(&S.lock);
			break;
		}
		kvs_segment_ref(s->seg);
		segs[k] = s->seg;
	}
	pthread_mutex_unlock(&S.lock);
	/*
	 * The writer publishes the output through publish_output once it is
	 * complete and linked at OUT (link never replaces a file: another
	 * process's OUT stays), while its locked temporary file .OUT.pub-*
	 * still names it too. Should we die before it is published, the
	 * catalog's recovery at the next mount (or any open of the catalog)
	 * removes both names.
	 */
	char out_path[PATH_MAX];
	segdir_path(out_path, j->out, NULL);
	kvs_error err = {0};
	kvs_merge_options opt = j->opt;
	opt.progress = progress;
	opt.progress_ctx = j;
	opt.output.publish = publish_output;
	opt.output.publish_ctx = j;
	kvs_status st = KVS_E_INVAL;
	if (ok) {
		st = guarded_merge(j, segs, n, out_path, &opt, &err);
		if (st == KVS_E_EXISTS && !j->error[0])
			output_taken_why(j);
		if (st != KVS_OK && st != KVS_E_CANCELED && !j->error[0])
			set_error(j, "%s", err.message);
	}
	for (size_t k = 0; segs && k < n; k++)
		kvs_segment_unref(segs[k]);
	free(segs);
	enum job_state end = ok && st == KVS_OK && !j->publish_failed ? DONE
	                     : st == KVS_E_CANCELED ? CANCELLED
	                                            : FAILED;
	if (end == CANCELLED && !j->error[0])
		set_error(j, "cancelled");
	pthread_mutex_lock(&J.lock);
	end_job(j, end);
	pthread_mutex_unlock(&J.lock);
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
		run(j);
		pthread_mutex_lock(&J.lock);
	}
	pthread_mutex_unlock(&J.lock);
	tls_release();
	return NULL;
}

int control_start(void)
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

void control_stop(void)
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
		fuse_reply_err(w->req, EINTR);
		free(w);
	}
	job *j = J.first;
	J.first = J.last = NULL;
	J.ended_head = J.ended_tail = NULL;
	J.nended = 0;
	status_free_all();
	files_free_all();
	pthread_mutex_unlock(&J.lock);
	while (j) {
		job *next = j->next;
		free_job(j);
		j = next;
	}
}
