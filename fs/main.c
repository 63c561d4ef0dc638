/*
 * main.c — segfs's main(): the command line (cmdline.c), the checks of
 * SEGDIR and the mount point, the mount, the threads, the session loop,
 * and the messages that say so (log.h); the FUSE operations themselves
 * are fuse_ops.c's.
 */
#include "segfs.h"
#include "cmdline.h"
#include "guard.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages of the mount (log.h) ------------------------------------- */

/* libfuse's messages, once segfs has detached (by default it writes them
 * to stderr, then /dev/null): into the log, limited (a read whose reply
 * faults brings one each time). */
static void fuse_log_to_log(enum fuse_log_level level, const char *fmt,
                            va_list ap)
{
	if (level > FUSE_LOG_INFO)
		return;
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	size_t n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	log_limited("libfuse", (int)level, "libfuse: %s", msg);
}

/* segfs has detached: stderr is /dev/null from now on. */
static void log_daemon(void)
{
	log_detached();
	fuse_set_log_func(fuse_log_to_log);
}

static void log_mounted(const char *mnt, bool mt)
{
	snap *cur = snap_current();
	char sep[8] = "";
	if (S.sep >= 0)
		snprintf(sep, sizeof sep, " sep=%c", S.sep);
	log_msg(LOG_NOTICE,
	        "mounted at %s: catalog generation %" PRIu64 ", %zu "
	        "segments; %s%s%s%s%s%s%s, workers=%u queue=%u history=%u "
	        "retire_after=%g timeout=%.0f, messages to %s",
	        mnt, cur->generation, cur->n,
	        kvs_catalog_read_only(S.cat) ? "read-only, " : "",
	        mt ? "mt" : "single-threaded", S.verify ? " verify" : "",
	        S.skip_bad ? " skip_bad" : "",
	        S.tombstones ? " tombstones" : "",
	        S.keep_retired ? " keep_retired" : "", sep, S.workers,
	        S.queue, S.history, S.retire_after, S.timeout,
	        log_where());
	snap_unref(cur, 1);
}

/* ret: what the session loop returned (a signal's number, 0, -errno). */
static void log_unmounted(const char *mnt, int ret)
{
	if (ret > 0)
		log_msg(LOG_NOTICE, "unmounted from %s (SIG%s)", mnt,
		        sigabbrev_np(ret) ? sigabbrev_np(ret) : "?");
	else if (ret == 0)
		log_msg(LOG_NOTICE, "unmounted from %s", mnt);
	else
		log_msg(LOG_ERR, "unmounted from %s after an error%s%s", mnt,
		        ret < -1 ? ": " : "", ret < -1 ? strerror(-ret) : "");
}

/* ---- main ----------------------------------------------------------------- */

int main(int argc, char *argv[])
{
	struct cmdline cl;
	char *mnt = NULL; /* the mount point, absolute, for the log */
	int ret = cmdline_parse(argc, argv, &cl);
	if (ret >= 0) {
		cmdline_free(&cl);
		return ret;
	}
	ret = EXIT_MOUNT_FAILED;
	/* read-only files and directories, checked by the kernel */
	fuse_opt_add_arg(&cl.args, "-odefault_permissions");
	/* the options libfuse takes are checked here, before SEGDIR and
	 * the mount point are looked at: a usage error is exit 2 */
	struct fuse_session *se =
	    fuse_session_new(&cl.args, &segfs_ops, sizeof segfs_ops, NULL);
	if (!se) {
		cmdline_free(&cl);
		return EXIT_USAGE; /* libfuse said why */
	}
	if (cl.segdir_errno) {
		fprintf(stderr, "segfs: %s: %s\n", cl.segdir,
		        strerror(cl.segdir_errno));
		goto out_session;
	}
	int mrc = mountpoint_check(cl.mountpoint, cl.segdir);
	if (mrc) {
		ret = mrc;
		goto out_session;
	}
	/* before anything is logged, and before the daemon changes to / */
	mnt = realpath(cl.mountpoint, NULL);
	int le = log_setup(cl.log, cl.opts.foreground, cl.segdir);
	if (le) {
		fprintf(stderr, "segfs: -o log=%s: %s\n", cl.log, strerror(le));
		goto out_session;
	}
	/* before the first segment is opened: see guard.h */
	if (guard_install() != 0) {
		fprintf(stderr, "segfs: sigaction: %s\n", strerror(errno));
		goto out_session;
	}
	state_load(); /* exits with a message when a segment is bad */

	if (fuse_set_signal_handlers(se) != 0)
		goto out_unload;
	if (fuse_session_mount(se, cl.mountpoint) != 0)
		goto out_signals;
	fuse_daemonize(cl.opts.foreground);
	if (!cl.opts.foreground)
		log_daemon();
	log_mounted(mnt ? mnt : cl.mountpoint, cl.mt && !cl.opts.singlethread);
	/* threads after the fork of fuse_daemonize */
	segfs_notify(se);
	int e = retire_start();
	if (!e)
		e = control_start();
	if (!e && (e = state_watch_start()) != 0) {
		/* serve on; only other processes' changes go unseen */
		log_msg(LOG_WARNING,
		        "cannot watch %s for catalog changes (%s); "
		        "changes by other processes will not be served",
		        S.segdir, strerror(e));
		e = 0;
	}
	if (e) {
		log_msg(LOG_ERR, "starting threads: %s", strerror(e));
		ret = -1;
		goto out_threads;
	}
	/* The loops return the number of the signal that ended them (a
	 * clean unmount) or a negative errno. */
	if (!cl.mt || cl.opts.singlethread) {
		ret = fuse_session_loop(se);
	} else {
		struct fuse_loop_config *cfg = fuse_loop_cfg_create();
		fuse_loop_cfg_set_clone_fd(cfg, (unsigned)cl.opts.clone_fd);
		fuse_loop_cfg_set_max_threads(cfg, cl.opts.max_threads);
		ret = fuse_session_loop_mt(se, cfg);
		fuse_loop_cfg_destroy(cfg);
	}
out_threads:
	log_unmounted(mnt ? mnt : "?", ret);
	ret = ret < 0 ? 1 : 0;
	/* no more notifications: nobody would answer what they may wait
	 * for */
	segfs_notify(NULL);
	state_watch_stop();
	control_stop();
	retire_stop();
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_unload:
	ptab_free_all();
	state_unload();
out_session:
	fuse_session_destroy(se);
	log_close();
	free(mnt);
	cmdline_free(&cl);
	return ret;
}
