/*
 * cmdline.c — segfs's command line: its own options, FUSE's, and what
 * the kernel is told of the mount (cmdline.h).
 *
 * Everything that makes a command line wrong is found here, before SEGDIR
 * or the mount point is looked at, so that a usage error is always exit
 * 2 whatever else is wrong; the options that libfuse takes are checked by
 * fuse_session_new, which main() calls next (also exit 2). The mount is
 * named after what it shows: fsname= the absolute SEGDIR (df, findmnt and
 * /proc/self/mountinfo show it as the source) and subtype=segfs (the type
 * fuse.segfs, as mount -t fuse.segfs and fstab name it), unless given.
 */
#include "cmdline.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SEGFS_VERSION
#define SEGFS_VERSION "unknown"
#endif

enum { KEY_RO = 100, KEY_RW, KEY_FSNAME, KEY_SUBTYPE };

#define OPT(t, p)                                                              \
	{                                                                      \
		t, offsetof(struct cmdline, p), 1                              \
	}
static const struct fuse_opt cli_opts[] = {
    OPT("tombstones", tombstones),
    OPT("skip_bad", skip_bad),
    OPT("verify", verify),
    OPT("mt", mt),
    OPT("keep_retired", keep_retired),
    {"sep=%s", offsetof(struct cmdline, sep), 0},
    {"log=%s", offsetof(struct cmdline, log), 0},
    {"workers=%u", offsetof(struct cmdline, workers), 0},
    {"queue=%u", offsetof(struct cmdline, queue), 0},
    {"history=%u", offsetof(struct cmdline, history), 0},
    {"timeout=%lf", offsetof(struct cmdline, timeout), 0},
    {"retire_after=%lf", offsetof(struct cmdline, retire_after), 0},
    /* kept for the kernel as well (cli_proc returns 1) */
    FUSE_OPT_KEY("ro", KEY_RO),
    FUSE_OPT_KEY("rw", KEY_RW),
    FUSE_OPT_KEY("fsname=", KEY_FSNAME),
    FUSE_OPT_KEY("subtype=", KEY_SUBTYPE),
    FUSE_OPT_END,
};

static int cli_proc(void *data, const char *arg, int key,
                    struct fuse_args *outargs)
{
	(void)outargs;
	struct cmdline *c = data;
	switch (key) {
	case FUSE_OPT_KEY_NONOPT:
		/* SEGDIR, MOUNTPOINT, and the first of any more */
		if (!c->segdir)
			return (c->segdir = strdup(arg)) ? 0 : -1;
		if (!c->mountpoint)
			return (c->mountpoint = strdup(arg)) ? 0 : -1;
		if (!c->extra)
			return (c->extra = strdup(arg)) ? 0 : -1;
		return 0;
	case KEY_RO:
		c->ro = 1;
		return 1;
	case KEY_RW:
		c->ro = 0;
		return 1;
	case KEY_FSNAME:
		c->fsname = 1;
		return 1;
	case KEY_SUBTYPE:
		c->subtype = 1;
		return 1;
	default:
		return 1;
	}
}

static void usage(const char *prog)
{
	printf("Usage: %s [options] SEGDIR MOUNTPOINT\n\n"
	       "Mounts the segment directory SEGDIR (its catalog of live\n"
	       "segments) read-only at MOUNTPOINT: segments/NAME/KEY for each\n"
	       "segment, view/KEY for the newest binding of every key,\n"
	       "control/ to merge (echo 'merge all' > control/merge).\n"
	       "docs/USAGE.md has the whole story.\n\n"
	       "segfs options:\n"
	       "    -o ro              change nothing in SEGDIR (no catalog,\n"
	       "                       no lock file, no merge) and mount\n"
	       "                       read-only\n"
	       "    -o tombstones      show tombstones in segments/ as empty\n"
	       "                       files (xattr user.segfs.tombstone)\n"
	       "    -o sep=C           keys containing the byte C (e.g. /)\n"
	       "                       show as nested directories\n"
	       "    -o skip_bad        leave out segments that fail their\n"
	       "                       checks instead of refusing to mount\n"
	       "    -o verify          check every segment fully (CRC and\n"
	       "                       every record) before mounting\n"
	       "    -o mt              serve requests on several threads\n"
	       "                       (default: one thread, faster here)\n"
	       "    -o timeout=SECS    kernel cache timeout for entries and\n"
	       "                       attributes (default one year)\n"
	       "    -o workers=N       merge jobs run at once (default 2)\n"
	       "    -o queue=N         jobs that may wait (default 16)\n"
	       "    -o history=N       ended jobs control/status keeps\n"
	       "                       (default 1024)\n"
	       "    -o keep_retired    keep the files of merged-away\n"
	       "                       segments (default: delete each once\n"
	       "                       its last reader is gone)\n"
	       "    -o retire_after=SECS  close a merged-away segment that\n"
	       "                       open files still hold this long after\n"
	       "                       the merge (default 60): they then fail\n"
	       "                       with ESTALE, and its space is freed\n"
	       "    -o log=syslog|stderr|FILE  where messages go once segfs\n"
	       "                       has detached: syslog (the default),\n"
	       "                       the stderr it was started with, or\n"
	       "                       lines appended to FILE; -f and -d\n"
	       "                       keep them on stderr too\n"
	       "    -o fsname=NAME     the mount's source (default: SEGDIR,\n"
	       "                       absolute)\n\n"
	       "Exit status: 0 after a clean unmount, 1 when the mount fails,\n"
	       "2 for a usage error.\n\n",
	       prog);
}

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "segfs: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, " (--help for more)\n");
	return EXIT_USAGE;
}

/* Adds -o NAME=VALUE to c->args, VALUE escaped for libfuse's parser
 * (a comma or backslash in a path). */
static int add_named(struct cmdline *c, const char *name, const char *value)
{
	size_t n = strlen(name) + strlen(value) + 2;
	char *opt = malloc(n), *opts = NULL;
	if (!opt)
		return -1;
	snprintf(opt, n, "%s=%s", name, value);
	int rc = fuse_opt_add_opt_escaped(&opts, opt);
	free(opt);
	if (rc == 0)
		rc = fuse_opt_add_arg(&c->args, "-o");
	if (rc == 0)
		rc = fuse_opt_add_arg(&c->args, opts);
	free(opts);
	return rc;
}

int cmdline_parse(int argc, char **argv, struct cmdline *c)
{
	*c = (struct cmdline){.args = FUSE_ARGS_INIT(argc, argv),
	                      .timeout = S.timeout,
	                      .retire_after = S.retire_after,
	                      .workers = S.workers,
	                      .queue = S.queue,
	                      .history = S.history};
	if (fuse_opt_parse(&c->args, c, cli_opts, cli_proc) != 0)
		return EXIT_USAGE; /* libfuse said why */
	if (c->extra)
		return usage_error("one argument too many: \"%s\"", c->extra);
	if (c->sep && strlen(c->sep) != 1)
		return usage_error("-o sep= takes one byte, not \"%s\"",
		                   c->sep);
	if (fuse_parse_cmdline(&c->args, &c->opts) != 0)
		return EXIT_USAGE;
	if (c->opts.show_help) {
		usage(argv[0]);
		fflush(stdout);
		fuse_cmdline_help();
		fuse_lowlevel_help();
		return 0;
	}
	if (c->opts.show_version) {
		printf("segfs %s\nlibfuse %s\n", SEGFS_VERSION,
		       fuse_pkgversion());
		fflush(stdout); /* before fusermount3's own line */
		fuse_lowlevel_version();
		return 0;
	}
	if (!c->segdir || !c->mountpoint)
		return usage_error("usage: %s [options] SEGDIR MOUNTPOINT",
		                   argv[0]);
	if (!(c->timeout >= 0 && c->timeout <= 1e9) ||
	    !(c->retire_after >= 0 && c->retire_after <= 1e9))
		return usage_error("%s", "-o timeout= and -o retire_after= "
		                         "must be 0..1e9 seconds");
	if (c->workers < 1 || c->workers > 64 || c->queue < 1 ||
	    c->queue > 100000 || c->history < 1 || c->history > 1000000)
		return usage_error("%s",
		                   "-o workers= takes 1..64, -o queue= "
		                   "1..100000 and -o history= 1..1000000");
	/* absolute: fuse_daemonize changes to /, and the mount's name says
	 * which directory it shows */
	char *abs = realpath(c->segdir, NULL);
	if (abs) {
		free(c->segdir);
		c->segdir = abs;
	} else {
		/* said after fuse_session_new: a usage error comes first */
		c->segdir_errno = errno;
	}
	if ((!c->fsname && add_named(c, "fsname", c->segdir) != 0) ||
	    (!c->subtype && add_named(c, "subtype", "segfs") != 0)) {
		fprintf(stderr, "segfs: out of memory\n");
		return EXIT_MOUNT_FAILED;
	}
	S.segdir = c->segdir;
	if (c->sep)
		S.sep = (unsigned char)c->sep[0];
	S.tombstones = c->tombstones;
	S.skip_bad = c->skip_bad;
	S.verify = c->verify;
	S.keep_retired = c->keep_retired;
	S.read_only = c->ro;
	S.timeout = c->timeout;
	S.retire_after = c->retire_after;
	S.workers = c->workers;
	S.queue = c->queue;
	S.history = c->history;
	return -1;
}

void cmdline_free(struct cmdline *c)
{
	free(c->opts.mountpoint);
	free(c->mountpoint);
	free(c->segdir);
	free(c->sep);
	free(c->log);
	free(c->extra);
	fuse_opt_free_args(&c->args);
}
