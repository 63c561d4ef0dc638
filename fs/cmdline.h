/*
 * cmdline.h — what segfs is asked to do: its command line, parsed and
 * checked before anything is opened (cmdline.c), and the checks of the
 * mount point (mountpoint.c).
 *
 * Exit statuses (docs/USAGE.md, segfs's "Exit status"): 0 after a clean
 * unmount (and after --help or --version), 1 when the mount fails (a bad
 * segment, an unusable SEGDIR or MOUNTPOINT), 2 for a usage error.
 */
#ifndef SEGFS_CMDLINE_H
#define SEGFS_CMDLINE_H

#include "segfs.h"

enum { EXIT_MOUNTED = 0, EXIT_MOUNT_FAILED = 1, EXIT_USAGE = 2 };

struct cmdline {
	char *segdir;     /* absolute once cmdline_parse has returned -1, */
	int segdir_errno; /* unless realpath failed so */
	char *mountpoint; /* as given */
	struct fuse_args args; /* for fuse_session_new: FUSE's options, and
	                        * fsname= and subtype= unless given */
	struct fuse_cmdline_opts opts;
	char *sep;
	char *log; /* -o log=syslog|stderr|FILE (log.h) */
	char *extra; /* an argument after MOUNTPOINT: a usage error */
	int tombstones, skip_bad, verify, mt, keep_retired, ro;
	int fsname, subtype; /* given on the command line */
	double timeout, retire_after;
	unsigned workers, queue, history;
};

/*
 * Parses and checks argv into *c. Returns -1 to go on (segfs's options
 * are then in S, SEGDIR resolved), or the exit status: 0 after --help or
 * --version, EXIT_USAGE after one line on stderr. cmdline_free in every
 * case.
 */
int cmdline_parse(int argc, char **argv, struct cmdline *c);
void cmdline_free(struct cmdline *c);

/*
 * Can segfs mount at mnt, showing segdir (absolute)? 0, or the exit
 * status after one line on stderr: EXIT_MOUNT_FAILED for a mount point
 * that is missing, not a directory or a segfs mount already;
 * EXIT_USAGE for one that would hide segdir.
 */
int mountpoint_check(const char *mnt, const char *segdir);

#endif
