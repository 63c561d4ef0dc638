/*
 * job.c — a merge job as control/status and the log show it: the table of
 * jobs kept (the unfinished ones and the last S.history to end), each
 * job's status line (one JSON object, written by jansson) and its log
 * lines (job.h). FUSE-free.
 */
#include "job.h"
#include "log.h"
#include "state.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

const char *const job_state_names[] = {"queued",    "running",
                                       "done",      "failed",
                                       "cancelled", "rejected"};

struct jobs J = {.lock = PTHREAD_MUTEX_INITIALIZER,
                 .wake = PTHREAD_COND_INITIALIZER,
                 .next_id = 1};

static double seconds(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) +
	       (double)(b->tv_nsec - a->tv_nsec) * 1e-9;
}

/* ---- status lines ------------------------------------------------------------ */

void sb_printf(sbuf *b, const char *fmt, ...)
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
void job_line(sbuf *b, const job *j)
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
		                           json_string(job_state_names[j->state]));
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

job *find_job(uint64_t id)
{
	for (job *j = J.first; j; j = j->next)
		if (j->id == id)
			return j;
	return NULL;
}


uint64_t job_line_len(const job *j)
{
	sbuf b = {0};
	job_line(&b, j);
	free(b.p);
	return b.len;
}

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

void log_job_start(const job *j)
{
	char req[4 * 210], in[1024];
	inputs_text(in, sizeof in, j);
	log_msg(LOG_INFO,
	        "job %" PRIu64 " started: \"%s\", inputs %s, output %s",
	        j->id, log_escape(req, sizeof req, j->request, j->request_len),
	        in, j->out);
}

/* Under J.lock: j has ended. */
void log_job_end(const job *j)
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
	        j->id, job_state_names[j->state],
	        log_escape(req, sizeof req, j->request, j->request_len), in,
	        j->out, (uint64_t)atomic_load(&j->done),
	        (uint64_t)atomic_load(&j->total), j->bytes_in, j->bytes_out,
	        took, j->error[0] ? ", error: " : "", j->error);
}

/* Under J.lock: j joins the jobs kept, as the newest. */
void list_append(job *j)
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
void keep_ended(job *j)
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

void free_job(job *j)
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

void set_error(job *j, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	pthread_mutex_lock(&J.lock);
	vsnprintf(j->error, sizeof j->error, fmt, ap);
	pthread_mutex_unlock(&J.lock);
	va_end(ap);
}

