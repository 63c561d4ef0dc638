/*
 * segdir.c — opening SEGDIR at mount: its catalog by the core's rule for
 * a directory (kvs_catalog_open_flags: a directory without a catalog is
 * taken for a segment directory only when it holds nothing but segments,
 * and a bad segment is never dropped from a catalog), whether segfs may
 * write there and why not, and what a killed segfs left behind.
 *
 * segfs writes nothing in SEGDIR (no catalog, no lock file, no merge)
 * when asked (-o ro), when it cannot (a read-only filesystem, no write
 * permission), or when -o skip_bad left bad segments out of a directory
 * without a catalog: a catalog written then would drop them for good, so
 * the rest is served from memory. S.ro_why says which, for control/merge.
 */
#include "state.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static char ro_why[PATH_MAX + 512];

/* Removes what a killed segfs left (job_run.c): .NAME.retired, a link to
 * an input being retired; NAME itself goes too when the catalog does not
 * name it and it is the same file as the mark. (A killed merge's output
 * the catalog's recovery removes: kvs_catalog_open.) */
static void remove_leftovers(void)
{
	DIR *d = opendir(S.segdir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (de->d_name[0] != '.' || len <= 9 ||
		    strcmp(de->d_name + len - 8, ".retired") != 0)
			continue;
		char name[KVS_CATALOG_MAX_NAME + 1];
		size_t nlen = len - 9;
		if (nlen == 0 || nlen > KVS_CATALOG_MAX_NAME)
			continue;
		memcpy(name, de->d_name + 1, nlen);
		name[nlen] = '\0';
		bool live = kvs_catalog_find(S.cat, name) >= 0;
		char mark[PATH_MAX], orig[PATH_MAX];
		segdir_path(mark, de->d_name, NULL);
		segdir_path(orig, name, NULL);
		/* orig goes only when it is the marked file: another
		 * process's file of that name stays */
		struct stat a, b;
		if (!live && lstat(orig, &b) == 0 && lstat(mark, &a) == 0 &&
		    a.st_ino == b.st_ino && a.st_dev == b.st_dev)
			unlink(orig);
		unlink(mark);
	}
	closedir(d);
}

/*
 * Another segfs mounted on SEGDIR may be retiring segments: its marks are
 * not leftovers. Each segfs holds a shared flock on SEGDIR/.segfs.lock
 * while it runs, and only one that finds itself alone (gets the exclusive
 * lock) removes leftovers. The descriptor stays open: the lock goes with the
 * process.
 */
static void recover_marks(void)
{
	if (kvs_catalog_read_only(S.cat))
		return; /* nothing can be removed, nor can a merge run */
	char lock[PATH_MAX];
	segdir_path(lock, "segfs", "lock");
	/* O_NOFOLLOW: not a file elsewhere through a symbolic link */
	int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		struct stat sb;
		bool link = errno == ELOOP && lstat(lock, &sb) == 0 &&
		            S_ISLNK(sb.st_mode);
		log_msg(LOG_WARNING,
		        "%s: %s (what a merge killed earlier "
		        "left is not removed)",
		        lock,
		        link ? "a symbolic link, not a lock file (remove it)"
		             : strerror(errno));
		return;
	}
	bool alone = flock(fd, LOCK_EX | LOCK_NB) == 0;
	if (alone)
		remove_leftovers();
	while (flock(fd, LOCK_SH) < 0 && errno == EINTR)
		;
}

/* Says what was skipped, and fails the mount when skipping was not asked
 * for (exits). */
static void report_skipped(void)
{
	size_t n = kvs_catalog_skipped_count(S.cat);
	for (size_t i = 0; i < n; i++) {
		const kvs_catalog_skip *k = kvs_catalog_skipped_at(S.cat, i);
		if (!S.skip_bad) {
			log_msg(LOG_ERR,
			        "bad segment: %s/%s: %s (%s has no "
			        "catalog, and none is made without it; use -o "
			        "skip_bad to mount the rest)",
			        S.segdir, k->name, k->why, S.segdir);
			exit(1);
		}
		log_msg(LOG_WARNING, "skipping bad segment: %s/%s: %s",
		        S.segdir, k->name, k->why);
	}
	if (!n || S.read_only)
		return;
	const char *first = kvs_catalog_skipped_at(S.cat, 0)->name;
	snprintf(ro_why, sizeof ro_why,
	         "%s has no catalog, and -o skip_bad left %s%s out: segfs "
	         "writes none, which would drop %s for good",
	         S.segdir, first, n > 1 ? " and others" : "",
	         n > 1 ? "them" : "it");
	log_msg(LOG_WARNING,
	        "%s: shown as it is, and control/merge refuses "
	        "requests (repair or move %s, then kvseg catalog %s init)",
	        ro_why, n > 1 ? "them" : "it", S.segdir);
}

void state_load(void)
{
	kvs_error err;
	unsigned flags = KVS_CATALOG_NO_CHECK | KVS_CATALOG_MAY_READ_ONLY |
	                 KVS_CATALOG_ONLY_SEGMENTS | KVS_CATALOG_SKIP_BAD |
	                 (S.read_only ? KVS_CATALOG_READ_ONLY : 0);
	kvs_status st = kvs_catalog_open_flags(&S.cat, S.segdir, flags, &err);
	if (st == KVS_E_INVAL) { /* not a directory of segments */
		log_msg(LOG_ERR,
		        "%s: segfs makes a catalog only in a directory "
		        "of segments; make this one's with kvseg catalog %s "
		        "init (it names the segments and leaves the other "
		        "files alone)",
		        err.message, S.segdir);
		exit(1);
	}
	if (st != KVS_OK) {
		log_msg(LOG_ERR, "%s", err.message);
		exit(1);
	}
	report_skipped(); /* exits unless -o skip_bad */
	if (S.read_only) {
		snprintf(ro_why, sizeof ro_why, "segfs was mounted with -o ro");
	} else if (!ro_why[0] && kvs_catalog_read_only(S.cat)) {
		snprintf(ro_why, sizeof ro_why,
		         "%s cannot be written (segfs mounted it read-only)",
		         S.segdir);
		log_msg(LOG_WARNING,
		        "%s cannot be written: shown as it is, "
		        "and control/merge refuses requests",
		        S.segdir);
	}
	if (ro_why[0])
		S.ro_why = ro_why;
	if (stat(S.segdir, &S.dir_st) < 0) {
		log_msg(LOG_ERR, "%s: %s", S.segdir, strerror(errno));
		exit(1);
	}
	snap *sn;
	if (snap_build(NULL, &sn, &err) != 0) {
		log_msg(LOG_ERR, "%s", err.message);
		exit(1);
	}
	atomic_store(&S.current, sn);
	/* once the mount is sure to go on: a refused one creates nothing */
	recover_marks();
}
