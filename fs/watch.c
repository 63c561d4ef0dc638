/*
 * watch.c — the catalog watcher: a thread that reloads the catalog
 * (state_reload_locked) when another process changes it, seen through
 * inotify on SEGDIR (state.h). FUSE-free.
 */
#include "state.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

static struct {
	pthread_t thread;
	int inotify, stop[2];
	bool running;
} W = {.inotify = -1, .stop = {-1, -1}};

static void *watch_main(void *arg)
{
	(void)arg;
	char buf[4096] __attribute__((aligned(8)));
	struct pollfd p[2] = {{W.inotify, POLLIN, 0}, {W.stop[0], POLLIN, 0}};
	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		ssize_t n = read(W.inotify, buf, sizeof buf);
		bool catalog = false;
		for (ssize_t o = 0; o < n;) {
			const struct inotify_event *e = (void *)(buf + o);
			if (e->len && !strcmp(e->name, KVS_CATALOG_FILE))
				catalog = true;
			/* the queue overflowed: CATALOG's event may be among
			 * those lost, so reload (the same generation is a
			 * no-op) */
			if (e->mask & IN_Q_OVERFLOW)
				catalog = true;
			o += (ssize_t)(sizeof *e + e->len);
		}
		if (!catalog)
			continue;
		kvs_error err;
		pthread_mutex_lock(&S.publish);
		/* segfs's own merges reload before they let go of
		 * S.publish: a new generation here is another process's */
		uint64_t was = atomic_load(&S.current)->generation;
		if (state_reload_locked(&err) != 0)
			log_msg(LOG_ERR,
			        "the catalog changed but cannot be "
			        "served: %s",
			        err.message);
		else if (atomic_load(&S.current)->generation != was)
			log_msg(LOG_NOTICE,
			        "serving catalog generation %" PRIu64
			        " (was %" PRIu64 "), which another process "
			        "published: %zu segments",
			        atomic_load(&S.current)->generation, was,
			        atomic_load(&S.current)->n);
		pthread_mutex_unlock(&S.publish);
	}
	return NULL;
}

int state_watch_start(void)
{
	W.inotify = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (W.inotify < 0)
		return errno;
	if (inotify_add_watch(W.inotify, S.segdir,
	                      IN_MOVED_TO | IN_CLOSE_WRITE) < 0 ||
	    pipe2(W.stop, O_CLOEXEC) < 0) {
		int e = errno;
		close(W.inotify);
		W.inotify = -1;
		return e;
	}
	int e = pthread_create(&W.thread, NULL, watch_main, NULL);
	W.running = e == 0;
	return e;
}

void state_watch_stop(void)
{
	if (W.running) {
		(void)!write(W.stop[1], "x", 1);
		pthread_join(W.thread, NULL);
		W.running = false;
	}
	for (int i = 0; i < 2; i++)
		if (W.stop[i] >= 0)
			close(W.stop[i]);
	if (W.inotify >= 0)
		close(W.inotify);
	W.inotify = W.stop[0] = W.stop[1] = -1;
}

