/*
 * retire.c — what segfs does so that merged-away segments give their
 * space back, whatever the kernel caches (retire.h). It sits above the
 * state: the state reports retired slots and catalog changes through the
 * hooks registered here (state.h, retire_hooks), and the kernel is told
 * through the state's notifier (kernel_notifier).
 *
 * A retired slot dies with its last reader; a reader is most often an
 * entry the kernel caches. Every catalog change gives view/ a new inode
 * (state.c, invalidate), which drops the cached entries nobody uses; the
 * ones in use then survive, out of reach, so the recent entries are also
 * dropped by name, a moment later, from this file's thread (the reaper),
 * as are entries given under a view/ already replaced. Whatever still
 * holds a retired slot S.retire_after seconds after its retirement (a
 * file opened from an older cached entry, an open listing) the reaper
 * closes.
 */
#include "retire.h"
#include "log.h"
#include "state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The reaper's list of retired slots still open, and of entries to drop
 * from the kernel's cache (under S.lock). */
#define DROP_MAX 1024
#define RECENT_MAX 256 /* recent entries dropped at a catalog change */
#define DROP_DELAY 0.05 /* seconds: after the lookup's reply is in place */
typedef struct drop_entry {
	uint64_t parent;
	double due;
	char name[KVS_CATALOG_MAX_NAME + 1];
} drop_entry;
static struct {
	pthread_t thread;
	pthread_cond_t wake;
	bool running, stop;
	uint32_t *ids;
	size_t n, cap;
	drop_entry drop[DROP_MAX];
	size_t ndrop;
} R = {.wake = PTHREAD_COND_INITIALIZER};

/* The last RECENT_MAX entries given (a ring; under its lock). */
static struct {
	pthread_mutex_t lock;
	drop_entry e[RECENT_MAX];
	size_t next, n;
} recent = {.lock = PTHREAD_MUTEX_INITIALIZER};

void retire_note_entry(uint64_t parent, const char *name)
{
	size_t len = strlen(name);
	if (len > KVS_CATALOG_MAX_NAME)
		return;
	pthread_mutex_lock(&recent.lock);
	drop_entry *e = &recent.e[recent.next];
	e->parent = parent;
	memcpy(e->name, name, len + 1);
	recent.next = (recent.next + 1) % RECENT_MAX;
	recent.n += recent.n < RECENT_MAX;
	pthread_mutex_unlock(&recent.lock);
}

/* state.h, retire_hooks: s is no longer live. */
static void slot_retired_locked(slot *s)
{
	s->retired_at = now_seconds();
	if (R.n == R.cap) { /* without room it is closed at its last
	                     * reader only */
		size_t cap = R.cap ? 2 * R.cap : 16;
		uint32_t *ids = realloc(R.ids, cap * sizeof *ids);
		if (ids)
			R.ids = ids, R.cap = cap;
	}
	if (R.n < R.cap)
		R.ids[R.n++] = s->id;
}

/* state.h, retire_hooks: the catalog changed; view/ has its new inode. */
static void changed_locked(void)
{
	double due = now_seconds() + DROP_DELAY;
	pthread_mutex_lock(&recent.lock);
	for (size_t i = 0; i < recent.n && R.ndrop < DROP_MAX; i++) {
		R.drop[R.ndrop] = recent.e[i];
		R.drop[R.ndrop++].due = due;
	}
	recent.n = recent.next = 0;
	pthread_mutex_unlock(&recent.lock);
	pthread_cond_signal(&R.wake);
}

void retire_drop_entry_later(uint64_t parent, const char *name)
{
	size_t len = strlen(name);
	if (len > KVS_CATALOG_MAX_NAME)
		return;
	pthread_mutex_lock(&S.lock);
	if (R.running && R.ndrop < DROP_MAX) {
		drop_entry *e = &R.drop[R.ndrop++];
		e->parent = parent;
		e->due = now_seconds() + DROP_DELAY;
		memcpy(e->name, name, len + 1);
		pthread_cond_signal(&R.wake);
	}
	pthread_mutex_unlock(&S.lock);
}

/* Under S.lock (released meanwhile): tells the kernel to drop the
 * entries that are due; returns the time the next one is due, or 0. */
static double drop_due_entries(double t)
{
	static drop_entry due[DROP_MAX];
	size_t ndue = 0, keep = 0;
	double next = 0;
	for (size_t i = 0; i < R.ndrop; i++) {
		if (R.drop[i].due <= t) {
			due[ndue++] = R.drop[i];
		} else {
			next = next == 0 || R.drop[i].due < next ? R.drop[i].due
			                                         : next;
			R.drop[keep++] = R.drop[i];
		}
	}
	R.ndrop = keep;
	const kernel_notifier *k = atomic_load(&S.notify);
	if (ndue && k) {
		pthread_mutex_unlock(&S.lock); /* the kernel may call us */
		for (size_t i = 0; i < ndue; i++)
			k->inval_entry(k->ctx, due[i].parent, due[i].name);
		pthread_mutex_lock(&S.lock);
	}
	return next;
}

static void *reaper_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&S.lock);
	while (!R.stop) {
		double t = now_seconds();
		double next = drop_due_entries(t);
		size_t keep = 0;
		for (size_t i = 0; i < R.n; i++) {
			slot *s = slot_get(R.ids[i]);
			if (!s || !s->seg)
				continue; /* its last reader let go */
			double due = s->retired_at + S.retire_after;
			if (due > t) {
				R.ids[keep++] = R.ids[i];
				next = next == 0 || due < next ? due : next;
				continue;
			}
			log_msg(LOG_WARNING,
			        "%s: closed %.0f s after it was merged "
			        "away, though readers still held it (-o "
			        "retire_after): those files now fail with "
			        "ESTALE",
			        s->name, t - s->retired_at);
			slot_die(s);
		}
		R.n = keep;
		if (next == 0) {
			pthread_cond_wait(&R.wake, &S.lock);
		} else {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			double wait = next - t + 0.01;
			ts.tv_sec += (time_t)wait;
			ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
			if (ts.tv_nsec >= 1000000000)
				ts.tv_sec++, ts.tv_nsec -= 1000000000;
			pthread_cond_timedwait(&R.wake, &S.lock, &ts);
		}
	}
	pthread_mutex_unlock(&S.lock);
	return NULL;
}

static const retire_hooks hooks = {slot_retired_locked, changed_locked};

int retire_start(void)
{
	R.stop = false;
	int e = pthread_create(&R.thread, NULL, reaper_main, NULL);
	R.running = e == 0;
	if (R.running)
		state_retire_hooks(&hooks);
	return e;
}

void retire_stop(void)
{
	if (!R.running)
		return;
	state_retire_hooks(NULL);
	pthread_mutex_lock(&S.lock);
	R.stop = true;
	pthread_cond_signal(&R.wake);
	pthread_mutex_unlock(&S.lock);
	pthread_join(R.thread, NULL);
	R.running = false;
	free(R.ids);
	R.ids = NULL;
	R.n = R.cap = 0;
}

