/*
 * catalog_sweep.c — recovery at open (docs/FORMAT.md §10.4): what a
 * crashed publisher or segment writer left in a directory, found and
 * removed.
 *
 * Three kinds of leftovers: temporary files that no live process holds
 * (.CATALOG.tmp-*, a writer's .NAME.tmp-XXXXXX and .NAME.pub-XXXXXX),
 * the second name an unpublished output kept after its writer died
 * (remove_unpublished), and the .NAME.replaced marks of a replace() that
 * died between publishing and unlinking its inputs. One pass over the
 * directory, under its lock (kvs_catalog_open_flags); a read-only open
 * removes nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog_internal.h"

/* Is name a segment writer's ".NAME.<tag>-XXXXXX" (a name of at least
 * one byte, six template chars)? */
static bool writer_temporary(const char *name, const char tag[6])
{
	size_t len = strlen(name);
	if (name[0] != '.' || len < 1 + 1 + 5 + 6)
		return false;
	if (memcmp(name + len - 6 - 5, tag, 5) != 0)
		return false;
	for (size_t i = len - 6; i < len; i++)
		if (name[i] == '/' || name[i] == '.')
			return false;
	return true;
}

/* What open() removes: ".CATALOG.tmp-*", the segment writer's
 * ".NAME.tmp-XXXXXX" and, with a kvsi_cat_publish hook, ".NAME.pub-XXXXXX". */
bool kvs_catalog_temporary_name(const char *name)
{
	if (strncmp(name, CAT_TMP_PREFIX, strlen(CAT_TMP_PREFIX)) == 0)
		return true;
	return writer_temporary(name, ".tmp-") ||
	       writer_temporary(name, ".pub-");
}

/* Is name live in s (NULL: a directory without a catalog yet)? */
static bool names_live(const cat_state *s, const char *name)
{
	return s && kvsi_cat_find_live(s, name) >= 0;
}

/* What recovery is about: dir, the catalog's segments (NULL where there is
 * no catalog yet) and, for remove_unpublished, a held temporary file. */
typedef struct sweep {
	const char *dir;
	const cat_state *live;
	const char *tmp;
	struct stat file;
} sweep;

typedef kvs_status (*sweep_fn)(sweep *w, int dfd, const char *name,
                               kvs_error *err);

/* Calls fn for each entry of w->dir until it fails; a failing opendir or
 * readdir is an error naming the directory. */
static kvs_status sweep_dir(sweep *w, sweep_fn fn, kvs_error *err)
{
	DIR *dp = opendir(w->dir);
	if (!dp)
		return kvs_error_set(err, KVS_E_IO, "%s: %s", w->dir,
		                     strerror(errno));
	kvs_status st = KVS_OK;
	struct dirent *de;
	while (st == KVS_OK && (errno = 0, de = readdir(dp)) != NULL)
		st = fn(w, dirfd(dp), de->d_name, err);
	if (st == KVS_OK && errno)
		st = kvs_error_set(err, KVS_E_IO, "%s: readdir: %s", w->dir,
		                   strerror(errno));
	closedir(dp);
	return st;
}

/* Unlinks dir/name, which may be gone already; what names the file in
 * the message. */
static kvs_status sweep_unlink(const sweep *w, int dfd, const char *name,
                               const char *what, kvs_error *err)
{
	if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
		return kvs_error_set(err, KVS_E_IO, "%s/%s: cannot remove %s: %s",
		                     w->dir, name, what, strerror(errno));
	return KVS_OK;
}

/*
 * A writer with a kvsi_cat_publish hook died between giving its file the final
 * name and removing the temporary name w->tmp (segment_writer.c,
 * publish_linked): the other names of the file (w->file's device and
 * inode) that the catalog does not name are that unpublished output.
 */
static kvs_status remove_unpublished(sweep *w, int dfd, const char *name,
                                     kvs_error *err)
{
	struct stat sb;
	if (strcmp(name, w->tmp) == 0 || names_live(w->live, name) ||
	    fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
	    sb.st_dev != w->file.st_dev || sb.st_ino != w->file.st_ino)
		return KVS_OK;
	return sweep_unlink(w, dfd, name,
	                    "the unpublished output of a killed merge", err);
}

/* DIR/.NAME.replaced: a second name that replace() gives an input before
 * the generation without it is published (kvs_catalog_replace). */
kvs_status kvsi_cat_replaced_mark(char out[PATH_MAX], const char *dir,
                                  const char *name, kvs_error *err)
{
	char mark[KVS_CATALOG_MAX_NAME + 16];
	snprintf(mark, sizeof mark, ".%s" CAT_REPLACED, name);
	return kvsi_cat_path_in(out, dir, mark, err);
}

/*
 * A replace() died between publishing and unlinking its inputs: each mark
 * .NAME.replaced goes, and NAME with it when it is the marked file and the
 * catalog no longer names it (where it does, the publication did not
 * happen). Without a catalog only the marks go. Runs under the
 * directory's lock, which every replace() holds throughout, so no mark
 * seen here is another process's work in progress.
 */
static kvs_status remove_replaced(sweep *w, int dfd, const char *mark,
                                  kvs_error *err)
{
	size_t len = strlen(mark), slen = strlen(CAT_REPLACED);
	if (mark[0] != '.' || len <= 1 + slen ||
	    strcmp(mark + len - slen, CAT_REPLACED) != 0)
		return KVS_OK;
	char name[KVS_CATALOG_MAX_NAME + 1];
	size_t nlen = len - 1 - slen;
	struct stat m, sb;
	if (nlen <= KVS_CATALOG_MAX_NAME && w->live) {
		memcpy(name, mark + 1, nlen);
		name[nlen] = '\0';
		if (kvsi_cat_name_ok(name, nlen) &&
		    !names_live(w->live, name) &&
		    fstatat(dfd, mark, &m, AT_SYMLINK_NOFOLLOW) == 0 &&
		    fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    sb.st_dev == m.st_dev && sb.st_ino == m.st_ino) {
			kvs_status st = sweep_unlink(w, dfd, name,
			                             "a replaced segment", err);
			if (st != KVS_OK)
				return st;
		}
	}
	return sweep_unlink(w, dfd, mark, "a mark", err);
}

/* Removes the temporary files of crashed publishers and segment writers,
 * with an unpublished output (remove_unpublished). */
static kvs_status remove_temporary(sweep *w, int dfd, const char *name,
                                   kvs_error *err)
{
	struct stat sb;
	if (!kvs_catalog_temporary_name(name) ||
	    fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
	    !S_ISREG(sb.st_mode))
		return KVS_OK;
	/* A live writer holds a lock on its temporary file until it has
	 * renamed it: only files nobody holds are orphans. */
	int fd =
	    openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return KVS_OK;
	kvs_status st = KVS_OK;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
		sweep linked = {w->dir, w->live, name, {0}};
		if (writer_temporary(name, ".pub-") &&
		    fstat(fd, &linked.file) == 0 && linked.file.st_nlink > 1)
			st = sweep_dir(&linked, remove_unpublished, err);
		if (st == KVS_OK)
			st = sweep_unlink(w, dfd, name, "a temporary file",
			                  err);
	}
	close(fd);
	return st;
}

/* Each entry as a temporary file, then as a mark (each skips what it is
 * not). */
static kvs_status remove_leftover(sweep *w, int dfd, const char *name,
                                  kvs_error *err)
{
	kvs_status st = remove_temporary(w, dfd, name, err);
	return st == KVS_OK ? remove_replaced(w, dfd, name, err) : st;
}

/* Recovery's removals in one pass over the directory, under its lock;
 * live: the catalog's segments, or NULL where there is no catalog yet. */
kvs_status kvsi_cat_remove_leftovers(const char *dir, const cat_state *live,
                                     kvs_error *err)
{
	sweep w = {dir, live, NULL, {0}};
	return sweep_dir(&w, remove_leftover, err);
}
