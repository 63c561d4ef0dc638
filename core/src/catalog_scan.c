/*
 * catalog_scan.c — the first catalog of a directory (docs/FORMAT.md §10.4):
 * what a directory without CATALOG holds, and whether a catalog may be
 * made of it.
 *
 * Every entry is one of four things. A segment (a regular file that opens
 * as one) is named. A bad segment — a regular file that begins with the
 * segment magic but fails open's checks, or that cannot be read to tell —
 * stops the catalog from being made: a catalog is the list of what is
 * live, and one made without the file would leave it out for good,
 * silently, where a repaired file would have been served again. The
 * directory's own files (dot names: temporaries, marks, locks; and
 * CATALOG.lock) are not looked at. Anything else is left alone by a
 * catalog made on request, and refused where the caller asked for a
 * directory of segments only (KVS_CATALOG_ONLY_SEGMENTS): a daemon handed a
 * mistyped path must not turn a home directory into a segment directory.
 *
 * The rule lives here, once, so that kvseg catalog and segfs agree on
 * every directory.
 */
#include "catalog_scan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvseg/segment.h"
#include "segment_internal.h"

enum entry_kind { ENTRY_OWN, ENTRY_SEGMENT, ENTRY_BAD, ENTRY_OTHER };

static const char *type_name(mode_t m)
{
	return S_ISDIR(m)    ? "a directory"
	       : S_ISLNK(m)  ? "a symbolic link"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISSOCK(m) ? "a socket"
	                     : "a device";
}

/* why = msg without the "path: " that a segment's messages start with */
static void set_why(kvs_catalog_skip *b, const char *path, const char *msg)
{
	size_t n = strlen(path);
	if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
		msg += n + 2;
	snprintf(b->why, sizeof b->why, "%s", msg);
}

/*
 * Sorts dir/name (dfd is dir's). A segment is described in *e (and
 * fsynced with sync); a bad one's reason goes to *b; for anything else
 * *what says what it is. A file that vanished meanwhile is the
 * directory's own (not there). KVS_E_IO only when its status cannot be
 * read.
 */
static kvs_status classify(int dfd, const char *dir, const char *name,
                           bool sync, enum entry_kind *kind,
                           kvs_catalog_entry *e, kvs_catalog_skip *b,
                           const char **what, kvs_error *err)
{
	char path[PATH_MAX];
	int n = snprintf(path, sizeof path, "%s/%s", dir, name);
	if (n < 0 || n >= (int)sizeof path)
		return kvs_error_set(err, KVS_E_RANGE,
		                     "%s: the path of %s is too long", dir,
		                     name);
	*kind = ENTRY_OWN;
	if (name[0] == '.' || strcmp(name, CAT_LOCK_FILE) == 0 ||
	    strcmp(name, KVS_CATALOG_FILE) == 0)
		return KVS_OK;
	struct stat sb;
	if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? KVS_OK
		                       : kvs_error_set(err, KVS_E_IO, "%s: %s",
		                                       path, strerror(errno));
	if (!S_ISREG(sb.st_mode)) {
		*kind = ENTRY_OTHER;
		*what = type_name(sb.st_mode);
		return KVS_OK;
	}
	memset(b, 0, sizeof *b);
	memcpy(b->name, name, strlen(name) + 1);
	/* O_NOFOLLOW, O_NONBLOCK: the file checked is the one opened, and a
	 * FIFO put there meanwhile is not waited on */
	int fd =
	    openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT)
			return KVS_OK;
		*kind = ENTRY_BAD; /* it may be one: it cannot be checked */
		snprintf(b->why, sizeof b->why,
		         "cannot be read to check it: %s", strerror(errno));
		return KVS_OK;
	}
	/* pread may return fewer bytes than asked for, and a segment
	 * taken for another file would be left out of the catalog for
	 * good: read until the magic's 8 bytes, the end or an error */
	uint8_t magic[8];
	ssize_t got = 0, k;
	while ((size_t)got < sizeof magic &&
	       ((k = pread(fd, magic + got, sizeof magic - (size_t)got,
	                   got)) > 0 ||
	        (k < 0 && errno == EINTR)))
		if (k > 0)
			got += k;
	if (k < 0)
		got = -1;
	kvs_status st = KVS_OK;
	if (got < 0) {
		*kind = ENTRY_BAD;
		snprintf(b->why, sizeof b->why,
		         "cannot be read to check it: %s", strerror(errno));
	} else if ((size_t)got < sizeof magic ||
	           memcmp(magic, SEG_MAGIC, sizeof magic) != 0) {
		*kind = ENTRY_OTHER;
		*what = "not a segment (no segment magic)";
	} else {
		kvs_segment *seg;
		kvs_error oerr;
		kvs_status ost = kvs_segment_open_fd(&seg, fd, path, &oerr);
		if (ost == KVS_E_NOMEM) {
			/* says nothing of the file: never a bad segment */
			st = kvs_error_set(err, ost, "%s", oerr.message);
		} else if (ost != KVS_OK) {
			*kind = ENTRY_BAD;
			set_why(b, path, oerr.message);
		} else {
			kvs_segment_info info;
			kvs_segment_info_get(seg, &info);
			kvs_segment_unref(seg);
			*kind = ENTRY_SEGMENT;
			memset(e, 0, sizeof *e);
			memcpy(e->name, name, strlen(name) + 1);
			e->sequence = info.sequence;
			e->size = info.file_bytes;
			e->header_crc = info.header_crc;
			if (sync && fsync(fd) < 0)
				st = kvs_error_set(err, KVS_E_IO,
				                   "%s: fsync: %s", path,
				                   strerror(errno));
		}
	}
	close(fd);
	return st;
}

/* Appends *item (size bytes) to *arr of *n items, *cap allocated. */
static bool push(void **arr, size_t *n, size_t *cap, const void *item,
                 size_t size)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 16;
		void *p = realloc(*arr, c * size);
		if (!p)
			return false;
		*arr = p;
		*cap = c;
	}
	memcpy((char *)*arr + *n * size, item, size);
	(*n)++;
	return true;
}

static int cmp_entry_age(const void *a, const void *b)
{
	const kvs_catalog_entry *x = a, *y = b;
	if (x->sequence != y->sequence)
		return x->sequence < y->sequence ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int cmp_skip_name(const void *a, const void *b)
{
	return strcmp(((const kvs_catalog_skip *)a)->name,
	              ((const kvs_catalog_skip *)b)->name);
}

kvs_status kvsi_cat_scan_dir(const char *dir, bool sync, cat_scan *out,
                             kvs_error *err)
{
	memset(out, 0, sizeof *out);
	DIR *dp = opendir(dir);
	if (!dp)
		return kvs_error_set(err, KVS_E_IO, "%s: %s", dir,
		                     strerror(errno));
	size_t cap = 0, bad_cap = 0;
	kvs_status st = KVS_OK;
	struct dirent *de;
	while ((errno = 0, de = readdir(dp)) != NULL) {
		enum entry_kind kind = ENTRY_OWN;
		kvs_catalog_entry e;
		kvs_catalog_skip b;
		const char *what = NULL;
		st = classify(dirfd(dp), dir, de->d_name, sync, &kind, &e, &b,
		              &what, err);
		if (st != KVS_OK)
			goto fail;
		bool ok = true;
		if (kind == ENTRY_SEGMENT) {
			if (out->count == KVS_CATALOG_MAX_SEGMENTS) {
				st = kvs_error_set(err, KVS_E_RANGE,
				                   "%s: more than %d segment "
				                   "files",
				                   dir,
				                   KVS_CATALOG_MAX_SEGMENTS);
				goto fail;
			}
			ok = push((void **)&out->segments, &out->count, &cap,
			          &e, sizeof e);
		} else if (kind == ENTRY_BAD) {
			ok = push((void **)&out->bad, &out->nbad, &bad_cap, &b,
			          sizeof b);
		} else if (kind == ENTRY_OTHER) {
			if (out->nother++ == 0 ||
			    strcmp(de->d_name, out->other) < 0) {
				snprintf(out->other, sizeof out->other, "%s",
				         de->d_name);
				out->other_what = what;
			}
		}
		if (!ok) {
			st = kvs_error_set(err, KVS_E_NOMEM,
			                   "%s: out of memory", dir);
			goto fail;
		}
	}
	if (errno) {
		st = kvs_error_set(err, KVS_E_IO, "%s: readdir: %s", dir,
		                   strerror(errno));
		goto fail;
	}
	closedir(dp);
	if (out->count)
		qsort(out->segments, out->count, sizeof *out->segments,
		      cmp_entry_age);
	if (out->nbad)
		qsort(out->bad, out->nbad, sizeof *out->bad, cmp_skip_name);
	return KVS_OK;
fail:
	closedir(dp);
	kvsi_cat_scan_free(out);
	return st;
}

kvs_status kvsi_cat_scan_admit(const char *dir, const cat_scan *s,
                               unsigned flags, kvs_error *err)
{
	/* what cannot be skipped first, so that -o skip_bad is not
	 * suggested in vain */
	if (s->nother && (flags & KVS_CATALOG_ONLY_SEGMENTS))
		return kvs_error_set(err, KVS_E_INVAL,
		                     "%s has no catalog, and %s in it is %s",
		                     dir, s->other, s->other_what);
	if (s->nbad && !(flags & KVS_CATALOG_SKIP_BAD))
		return kvs_error_set(err, KVS_E_CORRUPT,
		                     "%s/%s: a segment that fails its checks "
		                     "(%s): no catalog is made without it, "
		                     "which would leave it out for good",
		                     dir, s->bad[0].name, s->bad[0].why);
	return KVS_OK;
}

void kvsi_cat_scan_free(cat_scan *s)
{
	free(s->segments);
	free(s->bad);
	memset(s, 0, sizeof *s);
}
