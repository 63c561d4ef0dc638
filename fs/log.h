/*
 * log.h — where segfs's messages go, and how a flood of them is held back.
 *
 * Before segfs detaches (and for as long as it runs with -f or -d) its
 * messages go to standard error, where the user who mounted sees them.
 * Once it has detached, standard error is /dev/null: messages then go to
 * syslog (ident "segfs", facility LOG_DAEMON, with the pid), or to the
 * file of -o log=FILE, opened before detaching and appended to, a line
 * each: an ISO-8601 UTC time, segfs[PID], the level, SEGDIR and the
 * message. Every line names SEGDIR, so that several mounts can share a
 * log. docs/USAGE.md ("Messages") has the user's side.
 *
 * A message is one line whatever it holds: a control byte in it (from a
 * key, a file name, a request written to control/merge) is written as
 * \xHH. Text from outside that may hold anything (key bytes, request
 * text) is escaped first with log_escape, which leaves only printable
 * ASCII.
 *
 * The functions may be called from any thread, never from a signal
 * handler (a fault in a mapping is logged after the jump out of it:
 * guard.h). They never take segfs's other locks.
 */
#ifndef SEGFS_LOG_H
#define SEGFS_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <syslog.h> /* the levels: LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO */

/* The rate limit of log_limited: at most LOG_BURST messages per key in
 * LOG_WINDOW seconds; the rest are counted and the count logged. */
#define LOG_BURST 10
#define LOG_WINDOW 60

/*
 * -o log=WHERE, before anything is logged: where is NULL (the default:
 * syslog once detached), "syslog", "stderr" (the standard error segfs was
 * started with, kept once detached, lines as in a file), or a file's
 * path, which is opened (created 0640, appended to) now, before segfs
 * detaches and changes to /. foreground: -f or -d, which keep standard
 * error. segdir (absolute) prefixes every line of syslog and of the file.
 * 0 or an errno.
 */
int log_setup(const char *where, bool foreground, const char *segdir);
/* Where messages go besides stderr: "syslog", "stderr" (none else: -f
 * without -o log) or the file's absolute path. */
const char *log_where(void);
/* After fuse_daemonize detached segfs: standard error is gone. */
void log_detached(void);
/* At exit: logs the counts of messages still held back, closes the
 * file. */
void log_close(void);

/* One message (printf format, no newline) at a syslog level. */
void log_msg(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void log_vmsg(int level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/*
 * The same, limited per key (a segment's name, "control/merge"): the
 * first LOG_BURST of a key in a window of LOG_WINDOW seconds are logged,
 * the last of them followed by a line saying that the key's messages are
 * held back until the window ends; the count of those held back is logged
 * when the window has ended (at the next message of any key) or at exit.
 */
void log_limited(const char *key, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void log_vlimited(const char *key, int level, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/*
 * Writes bytes[0 .. len) to out (cap bytes, cap >= 8) as printable ASCII:
 * a printable byte but '\' as itself, '\' as \\, any other byte as \xHH;
 * cut at a whole escape, ending with "..." when it did not fit. Returns
 * out.
 */
char *log_escape(char *out, size_t cap, const void *bytes, size_t len);

#endif
