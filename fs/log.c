/*
 * log.c — segfs's messages: standard error, syslog or a file (log.h).
 *
 * A message is formatted once, made one line (control bytes as \xHH), and
 * written to each destination under one lock, so that lines of several
 * threads never interleave: the file gets each line in one write(2) of an
 * O_APPEND descriptor, which also keeps lines of another process's
 * appends whole.
 *
 * The rate limit keeps a small table of keys (LIMIT_KEYS, the least
 * recently used goes first, its count logged): a reader looping over a
 * damaged segment costs at most LOG_BURST lines a minute and a count,
 * whatever it does.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LIMIT_KEYS 64
#define KEY_MAX 64  /* longer keys are cut: a segment's name at most */
#define MSG_MAX 1024 /* a message, before its control bytes are escaped */

typedef struct limit {
	char key[KEY_MAX + 1]; /* "" when free */
	double start;          /* the window's start (CLOCK_MONOTONIC) */
	unsigned shown;        /* logged in this window */
	uint64_t held;         /* held back in this window */
	uint64_t used;         /* L.clock at the last use: the LRU order */
} limit;

static struct {
	pthread_mutex_t lock;
	bool to_stderr, to_syslog, syslog_later;
	int fd; /* -o log=FILE (or stderr's copy: log=stderr), or -1 */
	bool fd_is_stderr; /* log=stderr: fd only once stderr is gone */
	char where[2 * PATH_MAX + 2]; /* "syslog", "stderr" or FILE's absolute path */
	const char *segdir;
	limit lim[LIMIT_KEYS];
	uint64_t clock;
} L = {.lock = PTHREAD_MUTEX_INITIALIZER, .to_stderr = true, .fd = -1};

int log_setup(const char *where, bool foreground, const char *segdir)
{
	L.segdir = segdir;
	L.to_stderr = true;
	snprintf(L.where, sizeof L.where, "%s",
	         where || !foreground ? "syslog" : "stderr");
	if (where && strcmp(where, "stderr") == 0) {
		/* the stderr segfs was started with, kept across the
		 * daemon's redirection of fd 2 to /dev/null */
		L.fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
		if (L.fd < 0)
			return errno;
		L.fd_is_stderr = true;
		snprintf(L.where, sizeof L.where, "stderr");
		return 0;
	}
	if (where && strcmp(where, "syslog") != 0) {
		L.fd = open(where, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC |
		                       O_NOCTTY,
		            0640);
		if (L.fd < 0)
			return errno;
		/* the name the mount's message gives: absolute, since the
		 * daemon changes to / */
		char cwd[PATH_MAX];
		if (where[0] == '/' || !getcwd(cwd, sizeof cwd))
			snprintf(L.where, sizeof L.where, "%s", where);
		else
			snprintf(L.where, sizeof L.where, "%s/%s", cwd, where);
		return 0;
	}
	if (where && foreground) { /* -f -o log=syslog: both */
		openlog("segfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
		L.to_syslog = true;
	}
	L.syslog_later = !foreground;
	return 0;
}

const char *log_where(void) { return L.where; }

void log_detached(void)
{
	pthread_mutex_lock(&L.lock);
	L.to_stderr = false;
	if (L.syslog_later && L.fd < 0) {
		openlog("segfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
		L.to_syslog = true;
	}
	pthread_mutex_unlock(&L.lock);
}

static const char *level_name(int level)
{
	switch (level) {
	case LOG_EMERG:
	case LOG_ALERT:
	case LOG_CRIT:
	case LOG_ERR: return "error";
	case LOG_WARNING: return "warning";
	case LOG_NOTICE: return "notice";
	case LOG_INFO: return "info";
	default: return "debug";
	}
}

/* msg with its control bytes as \xHH (out: 4 * MSG_MAX + 1 bytes). */
static void one_line(char *out, const char *msg)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
		if (*p < 0x20 || *p == 0x7F) {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		} else {
			out[o++] = (char)*p;
		}
	}
	out[o] = '\0';
}

static void write_all(int fd, const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* nowhere to say so */
		s += w;
		n -= (size_t)w;
	}
}

/* Under L.lock: msg (formatted, one line or not) to every destination. */
static void emit_locked(int level, const char *msg)
{
	char line[4 * MSG_MAX + 1];
	one_line(line, msg);
	if (L.to_stderr) {
		char buf[sizeof line + 16];
		int n = snprintf(buf, sizeof buf, "segfs: %s\n", line);
		write_all(2, buf, (size_t)n < sizeof buf ? (size_t)n
		                                           : sizeof buf - 1);
	}
	const char *dir = L.segdir ? L.segdir : "-";
	if (L.to_syslog)
		syslog(level, "%s: %s", dir, line);
	if (L.fd >= 0 && !(L.fd_is_stderr && L.to_stderr)) {
		struct timespec ts;
		struct tm tm;
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		char stamp[40];
		strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
		size_t cap = sizeof line + 4096 + 128;
		char *buf = malloc(cap);
		if (!buf)
			return;
		int n = snprintf(buf, cap, "%s.%03ldZ segfs[%ld] %s %s: %s\n",
		                 stamp, ts.tv_nsec / 1000000, (long)getpid(),
		                 level_name(level), dir, line);
		write_all(L.fd, buf, (size_t)n < cap ? (size_t)n : cap - 1);
		free(buf);
	}
}

static void emitf_locked(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void emitf_locked(int level, const char *fmt, ...)
{
	char msg[MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	emit_locked(level, msg);
}

static double now_monotonic(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Under L.lock: logs how many of l's messages were held back, and frees
 * its entry. */
static void limit_end_locked(limit *l, double now)
{
	if (l->held)
		emitf_locked(LOG_WARNING,
		             "%s: %llu more messages like the above were held "
		             "back in the last %.0f s (at most %d a minute are "
		             "logged)",
		             l->key, (unsigned long long)l->held,
		             now - l->start, LOG_BURST);
	memset(l, 0, sizeof *l);
}

/* Under L.lock: the windows that have ended are closed (their counts
 * logged). */
static void limits_expire_locked(double now)
{
	for (size_t i = 0; i < LIMIT_KEYS; i++)
		if (L.lim[i].key[0] && now - L.lim[i].start >= LOG_WINDOW)
			limit_end_locked(&L.lim[i], now);
}

void log_vmsg(int level, const char *fmt, va_list ap)
{
	char msg[MSG_MAX];
	vsnprintf(msg, sizeof msg, fmt, ap);
	pthread_mutex_lock(&L.lock);
	limits_expire_locked(now_monotonic());
	emit_locked(level, msg);
	pthread_mutex_unlock(&L.lock);
}

void log_msg(int level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vmsg(level, fmt, ap);
	va_end(ap);
}

/* Under L.lock: key's entry (a new one in a free or the least recently
 * used place). */
static limit *limit_find_locked(const char *key, double now)
{
	limit *free_one = NULL, *lru = NULL;
	for (size_t i = 0; i < LIMIT_KEYS; i++) {
		limit *l = &L.lim[i];
		if (!l->key[0])
			free_one = free_one ? free_one : l;
		else if (strncmp(l->key, key, KEY_MAX) == 0)
			return l;
		else if (!lru || l->used < lru->used)
			lru = l;
	}
	limit *l = free_one ? free_one : lru;
	if (!free_one)
		limit_end_locked(l, now);
	snprintf(l->key, sizeof l->key, "%s", key);
	l->start = now;
	return l;
}

void log_vlimited(const char *key, int level, const char *fmt, va_list ap)
{
	char msg[MSG_MAX];
	vsnprintf(msg, sizeof msg, fmt, ap);
	pthread_mutex_lock(&L.lock);
	double now = now_monotonic();
	limits_expire_locked(now);
	limit *l = limit_find_locked(key, now);
	l->used = ++L.clock;
	if (l->shown < LOG_BURST) {
		emit_locked(level, msg);
		if (++l->shown == LOG_BURST)
			emitf_locked(LOG_WARNING,
			             "%s: %d messages in %.0f s: more like these "
			             "are held back for the next %.0f s, then "
			             "counted",
			             l->key, LOG_BURST, now - l->start,
			             LOG_WINDOW - (now - l->start));
	} else {
		l->held++;
	}
	pthread_mutex_unlock(&L.lock);
}

void log_limited(const char *key, int level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vlimited(key, level, fmt, ap);
	va_end(ap);
}

void log_close(void)
{
	pthread_mutex_lock(&L.lock);
	double now = now_monotonic();
	for (size_t i = 0; i < LIMIT_KEYS; i++)
		if (L.lim[i].key[0])
			limit_end_locked(&L.lim[i], now);
	if (L.fd >= 0)
		close(L.fd);
	L.fd = -1;
	if (L.to_syslog)
		closelog();
	L.to_syslog = false;
	L.to_stderr = true;
	pthread_mutex_unlock(&L.lock);
}

char *log_escape(char *out, size_t cap, const void *bytes, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *b = bytes;
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		char e[5];
		size_t n;
		if (b[i] == '\\')
			e[0] = e[1] = '\\', n = 2;
		else if (b[i] >= 0x20 && b[i] < 0x7F)
			e[0] = (char)b[i], n = 1;
		else
			e[0] = '\\', e[1] = 'x', e[2] = hex[b[i] >> 4],
			e[3] = hex[b[i] & 15], n = 4;
		/* room for the NUL, and for "..." unless this is the last */
		if (o + n + (i + 1 < len ? 4 : 1) > cap) {
			memcpy(out + o, "...", 3);
			o += 3;
			break;
		}
		memcpy(out + o, e, n);
		o += n;
	}
	out[o] = '\0';
	return out;
}
