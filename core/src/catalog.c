/*
 * catalog.c — which segment files of a directory are live, in age order,
 * under a generation number (docs/FORMAT.md §10).
 *
 * The catalog is one small file, CATALOG, replaced whole on every change:
 * the new contents go to a temporary file (.CATALOG.tmp-XXXXXX), which is
 * fsynced, renamed over CATALOG, and the directory is fsynced. rename is
 * atomic, so a crash at any instant leaves the old or the new file, and a
 * reader never needs a lock to see a complete one. Publishers serialize on
 * an exclusive flock of CATALOG.lock and re-read the file under it, which
 * makes replace() a compare-and-swap on the generation. Opening takes the
 * same lock to sweep up what a crashed publisher or segment writer left
 * behind (temporaries) and to check the named segments while no one can
 * unlink them.
 *
 * The file's bytes and their publication are catalog_file.c's, the sweep
 * of leftovers catalog_sweep.c's, the first catalog of a directory
 * without one catalog_scan.c's; this file is the handle and the rules of
 * a generation: open, reload, add, replace.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvseg/catalog.h"
#include "catalog_internal.h"
#include "catalog_scan.h"
#include "kvseg/segment.h"
#include "segment_internal.h"

struct kvs_catalog {
	char *dir;
	int dfd; /* the directory, opened with the catalog (O_PATH) */
	unsigned flags; /* kvs_catalog_open_flags's */
	cat_state cur;
	bool read_only; /* opened without writing (KVS_CATALOG_MAY_READ_ONLY) */
	bool ro_chosen; /* ... because the caller asked (KVS_CATALOG_READ_ONLY)
	                 * or bad segments were skipped: never writes */
	bool scanned;   /* read_only, and cur is a scan: there is no CATALOG */
	kvs_catalog_skip *skipped; /* the bad segments a scan left out */
	size_t nskipped;
};

/* ---- names and locks ----------------------------------------------------- */

static kvs_status check_name(const char *dir, const char *name,
                             const char *what, kvs_error *err)
{
	if (!name)
		return kvs_error_set(err, KVS_E_INVAL, "%s: %s is NULL", dir,
		                     what);
	size_t len = strnlen(name, KVS_CATALOG_MAX_NAME + 1);
	if (!kvsi_cat_name_ok(name, len))
		return kvs_error_set(
		    err, KVS_E_INVAL,
		    "%s: %s \"%.*s\" is not a segment file name "
		    "(1..%d bytes, no '/', no leading '.', not "
		    "%s or %s)",
		    dir, what, 64, name, KVS_CATALOG_MAX_NAME, KVS_CATALOG_FILE,
		    CAT_LOCK_FILE);
	return KVS_OK;
}

/* Does errno e (of open(2) or access(2)) say "cannot write here"? */
static bool cannot_write(int e)
{
	return e == EROFS || e == EACCES || e == EPERM;
}

/*
 * Opens DIR/CATALOG.lock and takes the flock op on it. Where the directory
 * cannot be written (a read-only filesystem, no write permission) and
 * read_only is not NULL, a reader gets by without writing: it opens an
 * existing lock file read-only and takes a shared lock on it, or takes no
 * lock where there is none (a catalog is replaced by a rename, so a read
 * sees a whole one), and *read_only is set. Without read_only, or where
 * the directory can be written, *read_only stays false. A *read_only
 * already true on entry asks for the reader's way wherever the directory
 * can be written: nothing is created.
 */
static kvs_status lock_dir(const char *dir, int op, int *fd, bool *read_only,
                           kvs_error *err)
{
	char path[PATH_MAX];
	kvs_status st = kvsi_cat_path_in(path, dir, CAT_LOCK_FILE, err);
	if (st != KVS_OK)
		return st;
	/* the directory first: a lock file that this process may write
	 * does not make the directory writable */
	bool cannot = read_only &&
	              (*read_only ||
	               (faccessat(AT_FDCWD, dir, W_OK, AT_EACCESS) < 0 &&
	                cannot_write(errno)));
	/* O_NOFOLLOW: a symbolic link in the lock file's place must not
	 * make this process create or open a file elsewhere */
	*fd = cannot
	          ? -1
	          : open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (*fd < 0 && read_only && (cannot || cannot_write(errno))) {
		*read_only = true;
		op = LOCK_SH;
		/* O_NONBLOCK: a FIFO there must not block the open */
		*fd =
		    open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
		if (*fd < 0 && errno == ENOENT)
			return KVS_OK; /* no lock file: nobody to wait for */
	}
	if (*fd < 0) {
		int e = errno;
		struct stat sb;
		if (e == ELOOP && lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode))
			return kvs_error_set(err, KVS_E_IO,
			                     "%s: a symbolic link, not a lock "
			                     "file (remove it)",
			                     path);
		/* about the directory, when that is what is wrong */
		if ((e == ENOENT || e == ENOTDIR) && stat(dir, &sb) < 0)
			return kvs_error_set(err, KVS_E_IO, "%s: %s", dir,
			                     strerror(errno));
		if ((e == ENOENT || e == ENOTDIR) && !S_ISDIR(sb.st_mode))
			return kvs_error_set(err, KVS_E_IO,
			                     "%s: not a directory", dir);
		return kvs_error_set(err, KVS_E_IO, "%s: %s", path,
		                     strerror(e));
	}
	while (flock(*fd, op) < 0) {
		if (errno == EINTR)
			continue;
		int e = errno;
		close(*fd);
		*fd = -1;
		return kvs_error_set(err, KVS_E_IO, "%s: flock: %s", path,
		                     strerror(e));
	}
	return KVS_OK;
}

static void unlock_dir(int fd)
{
	if (fd >= 0)
		close(fd); /* drops the flock */
}

/* ---- segments ------------------------------------------------------------ */

/*
 * Reads what the catalog records of a segment from its envelope (§5.1):
 * the sequence, the file length and the header CRC32C, which is
 * recomputed over the header and directory. Any problem is KVS_E_CORRUPT
 * (KVS_E_IO for a failing system call) with the segment's path first.
 */

/*
 * Opens segment file name of a directory (dfd, or AT_FDCWD with path) as
 * §10.3 wants a live segment: a regular file, never reached through a
 * symbolic link (O_NOFOLLOW, so the file is the one checked: no race
 * between a check and the open), never waited on (a FIFO: O_NONBLOCK).
 * Anything else is KVS_E_CORRUPT for the catalog; a missing file is
 * `missing`. *fd (optional) gets the open descriptor, else it is closed;
 * *st (optional) the file's status.
 */
static kvs_status open_segment_file(int dfd, const char *name,
                                    const char *path, kvs_status missing,
                                    kvs_segment **seg, int *fd_out,
                                    struct stat *st_out, kvs_error *err)
{
	int fd = openat(dfd, dfd == AT_FDCWD ? path : name,
	                O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		struct stat sb;
		if (e == ELOOP &&
		    fstatat(dfd, dfd == AT_FDCWD ? path : name, &sb,
		            AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISLNK(sb.st_mode))
			return kvs_error_set(err, KVS_E_CORRUPT,
			                     "%s: not a regular file but a "
			                     "symbolic link (a live segment "
			                     "must be the file itself)",
			                     path);
		return kvs_error_set(err, e == ENOENT ? missing : KVS_E_IO,
		                     "%s: %s", path, strerror(e));
	}
	struct stat sb;
	kvs_status st = KVS_OK;
	if (fstat(fd, &sb) < 0)
		st = kvs_error_set(err, KVS_E_IO, "%s: %s", path,
		                   strerror(errno));
	else if (!S_ISREG(sb.st_mode))
		st = kvs_error_set(err, KVS_E_CORRUPT,
		                   "%s: not a regular file but a %s", path,
		                   S_ISDIR(sb.st_mode)    ? "directory"
		                   : S_ISFIFO(sb.st_mode) ? "FIFO"
		                   : S_ISSOCK(sb.st_mode) ? "socket"
		                                          : "device");
	if (st == KVS_OK)
		st = kvs_segment_open_fd(seg, fd, path, err);
	if (st == KVS_OK && st_out)
		*st_out = sb;
	if (st == KVS_OK && fd_out)
		*fd_out = fd;
	else
		close(fd);
	return st;
}

/*
 * Describes segment file name of dir in *e. The file must be a regular file
 * (not a symbolic link) that kvs_segment_open accepts; anything else,
 * including a missing file, is KVS_E_CORRUPT for the catalog. With sync it
 * is also fsynced, so that a catalog never names a file not yet durable.
 */
static kvs_status probe_segment(const char *dir, const char *name,
                                kvs_catalog_entry *e, bool sync,
                                kvs_status missing, kvs_error *err)
{
	char path[PATH_MAX];
	kvs_status st = kvsi_cat_path_in(path, dir, name, err);
	if (st != KVS_OK)
		return st;
	kvs_segment *seg;
	int fd;
	st = open_segment_file(AT_FDCWD, name, path, missing, &seg, &fd, NULL,
	                       err);
	if (st != KVS_OK)
		return st;
	kvs_segment_info info;
	kvs_segment_info_get(seg, &info);
	kvs_segment_unref(seg);
	if (sync && fsync(fd) < 0)
		st = kvs_error_set(err, KVS_E_IO, "%s: fsync: %s", path,
		                   strerror(errno));
	close(fd);
	if (st != KVS_OK)
		return st;
	memset(e, 0, sizeof *e);
	memcpy(e->name, name, strlen(name) + 1);
	e->sequence = info.sequence;
	e->size = info.file_bytes;
	e->header_crc = info.header_crc;
	return KVS_OK;
}

/* Is the segment at path (described in *got) the one the catalog
 * records in *want? KVS_E_CORRUPT naming the field that differs. */
static kvs_status entry_matches(const char *path, const kvs_catalog_entry *got,
                                const kvs_catalog_entry *want, kvs_error *err)
{
	static const char *const field[] = {"size", "header CRC32C",
	                                    "sequence"};
	const uint64_t have[] = {got->size, got->header_crc, got->sequence};
	const uint64_t rec[] = {want->size, want->header_crc, want->sequence};
	for (int i = 0; i < 3; i++)
		if (have[i] != rec[i])
			return kvs_error_set(
			    err, KVS_E_CORRUPT,
			    "%s: not the segment the catalog names: its %s is "
			    "%" PRIu64 " (0x%" PRIx64 ") but the catalog "
			    "records %" PRIu64 " (0x%" PRIx64 ")",
			    path, field[i], have[i], have[i], rec[i], rec[i]);
	return KVS_OK;
}

/* A named segment must be what the catalog recorded (KVS_E_CORRUPT). */
static kvs_status check_entry(const char *dir, const kvs_catalog_entry *want,
                              kvs_error *err)
{
	kvs_catalog_entry got = {0};
	kvs_status st =
	    probe_segment(dir, want->name, &got, false, KVS_E_CORRUPT, err);
	if (st != KVS_OK) {
		if (err) { /* say why the file matters */
			char msg[sizeof err->message];
			memcpy(msg, err->message, sizeof msg);
			kvs_error_set(err, st,
			              "segment named by the catalog: %s", msg);
		}
		return st;
	}
	char path[PATH_MAX];
	if ((st = kvsi_cat_path_in(path, dir, want->name, err)) != KVS_OK)
		return st;
	return entry_matches(path, &got, want, err);
}

static kvs_status check_entries(const char *dir, const cat_state *s,
                                kvs_error *err)
{
	for (size_t i = 0; i < s->count; i++) {
		kvs_status st = check_entry(dir, &s->entries[i], err);
		if (st != KVS_OK)
			return st;
	}
	return KVS_OK;
}

/* A segment about to be named: it must open as one and be on stable
 * storage. */
static kvs_status new_entry(const char *dir, const char *name,
                            kvs_catalog_entry *e, kvs_error *err)
{
	/* a file the caller names that is not there: an I/O error, as for
	 * any file that cannot be opened */
	return probe_segment(dir, name, e, true, KVS_E_IO, err);
}


/*
 * Makes c's first catalog from the files of its directory (catalog_scan.c),
 * under the directory's lock, and publishes it unless c reads only. Bad
 * segments that the flags let be skipped make c read-only: the catalog
 * stays in memory (c->scanned), as written it would drop them for good.
 */
static kvs_status first_catalog(kvs_catalog *c, kvs_error *err)
{
	cat_scan sc;
	kvs_status st = kvsi_cat_scan_dir(c->dir, !c->read_only, &sc, err);
	if (st == KVS_OK)
		st = kvsi_cat_scan_admit(c->dir, &sc, c->flags, err);
	if (st != KVS_OK) {
		kvsi_cat_scan_free(&sc);
		return st;
	}
	if (sc.nbad)
		c->read_only = c->ro_chosen = true;
	kvsi_cat_state_free(&c->cur);
	c->cur = (cat_state){1, sc.count, sc.segments};
	c->skipped = sc.bad;
	c->nskipped = sc.nbad;
	c->scanned = c->read_only;
	bool renamed;
	return c->read_only ? KVS_OK
	                    : kvsi_cat_publish(c->dir, &c->cur, &renamed, err);
}

/*
 * Before the lock file is created: may a catalog be made here at all, and
 * must this open read only (bad segments skipped)? Only where there is no
 * CATALOG; the scan is made again under the lock (first_catalog).
 */
static kvs_status precheck(kvs_catalog *c, kvs_error *err)
{
	char path[PATH_MAX];
	struct stat sb;
	if (kvsi_cat_path_in(path, c->dir, KVS_CATALOG_FILE, NULL) != KVS_OK ||
	    lstat(path, &sb) == 0 || errno != ENOENT)
		return KVS_OK; /* the open says what is wrong */
	cat_scan sc;
	if (kvsi_cat_scan_dir(c->dir, false, &sc, NULL) != KVS_OK)
		return KVS_OK; /* idem */
	kvs_status st = kvsi_cat_scan_admit(c->dir, &sc, c->flags, err);
	if (st == KVS_OK && sc.nbad)
		c->read_only = c->ro_chosen = true;
	kvsi_cat_scan_free(&sc);
	return st;
}

/* ---- the API ------------------------------------------------------------- */

kvs_status kvs_catalog_open(kvs_catalog **out, const char *dir, kvs_error *err)
{
	return kvs_catalog_open_flags(out, dir, 0, err);
}

kvs_status kvs_catalog_open_flags(kvs_catalog **out, const char *dir,
                                  unsigned flags, kvs_error *err)
{
	*out = NULL;
	if (!dir || !*dir)
		return kvs_error_set(err, KVS_E_INVAL, "no directory given");
	kvs_catalog *c = calloc(1, sizeof *c);
	if (!c || !(c->dir = strdup(dir))) {
		free(c);
		return kvs_error_set(err, KVS_E_NOMEM, "%s: out of memory",
		                     dir);
	}
	c->dfd = -1;
	c->flags = flags;
	c->read_only = c->ro_chosen = flags & KVS_CATALOG_READ_ONLY;
	int lock = -1;
	bool exists = true;
	kvs_status st = precheck(c, err);
	if (st == KVS_OK)
		st = lock_dir(dir, LOCK_EX, &lock,
		              flags & KVS_CATALOG_MAY_READ_ONLY || c->read_only
		                  ? &c->read_only
		                  : NULL,
		              err);
	/* segments are opened relative to it (kvs_catalog_open_segment):
	 * the directory opened now, wherever its path leads later */
	if (st == KVS_OK &&
	    (c->dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		st = kvs_error_set(err, KVS_E_IO, "%s: %s", dir,
		                   strerror(errno));
	if (st == KVS_OK)
		st = kvsi_cat_read(dir, &c->cur, &exists, err);
	/* read-only: what a crash left stays (nothing can remove it, and no
	 * reader looks at it), and a missing catalog is only scanned */
	if (st == KVS_OK && !c->read_only)
		st = kvsi_cat_remove_leftovers(dir, exists ? &c->cur : NULL,
		                               err);
	if (st == KVS_OK && !exists)
		st = first_catalog(c, err);
	/* under the lock, so that no replace() unlinks a segment meanwhile */
	if (st == KVS_OK && !(flags & KVS_CATALOG_NO_CHECK))
		st = check_entries(dir, &c->cur, err);
	unlock_dir(lock);
	if (st != KVS_OK) {
		kvs_catalog_close(c);
		return st;
	}
	*out = c;
	return KVS_OK;
}

kvs_status kvs_catalog_open_segment(const kvs_catalog *c, size_t i,
                                    kvs_segment **out, struct stat *st,
                                    kvs_error *err)
{
	*out = NULL;
	if (i >= c->cur.count)
		return kvs_error_set(err, KVS_E_INVAL,
		                     "%s: the catalog has no segment %zu", c->dir,
		                     i);
	const kvs_catalog_entry *e = &c->cur.entries[i];
	char path[PATH_MAX];
	kvs_status r = kvsi_cat_path_in(path, c->dir, e->name, err);
	if (r != KVS_OK)
		return r;
	kvs_segment *seg;
	r = open_segment_file(c->dfd, e->name, path, KVS_E_CORRUPT, &seg,
	                      NULL, st, err);
	if (r != KVS_OK)
		return r;
	kvs_segment_info info;
	kvs_segment_info_get(seg, &info);
	kvs_catalog_entry got = {.size = info.file_bytes,
	                         .header_crc = info.header_crc,
	                         .sequence = info.sequence};
	if ((r = entry_matches(path, &got, e, err)) != KVS_OK) {
		kvs_segment_unref(seg);
		return r;
	}
	*out = seg;
	return KVS_OK;
}

void kvs_catalog_close(kvs_catalog *c)
{
	if (!c)
		return;
	if (c->dfd >= 0)
		close(c->dfd);
	kvsi_cat_state_free(&c->cur);
	free(c->skipped);
	free(c->dir);
	free(c);
}

/* The newest generation as the directory holds it (under some lock). */
static kvs_status read_existing(const kvs_catalog *c, cat_state *s,
                                kvs_error *err)
{
	bool exists;
	kvs_status st = kvsi_cat_read(c->dir, s, &exists, err);
	if (st == KVS_OK && !exists)
		st = kvs_error_set(err, KVS_E_CORRUPT, "%s/%s: missing", c->dir,
		                   KVS_CATALOG_FILE);
	return st;
}

kvs_status kvs_catalog_reload(kvs_catalog *c, kvs_error *err)
{
	int lock = -1;
	cat_state s = {0, 0, NULL};
	bool read_only = c->ro_chosen, exists = true;
	kvs_status st = lock_dir(c->dir, LOCK_SH, &lock,
	                         c->read_only ? &read_only : NULL, err);
	/* a scan stands until a catalog appears */
	if (st == KVS_OK)
		st = c->scanned ? kvsi_cat_read(c->dir, &s, &exists, err)
		                : read_existing(c, &s, err);
	if (st == KVS_OK && exists && !(c->flags & KVS_CATALOG_NO_CHECK))
		st = check_entries(c->dir, &s, err);
	unlock_dir(lock);
	if (st != KVS_OK || !exists) {
		kvsi_cat_state_free(&s);
		return st;
	}
	kvsi_cat_state_free(&c->cur);
	c->cur = s;
	c->scanned = false;
	free(c->skipped); /* a catalog names what is live now */
	c->skipped = NULL;
	c->nskipped = 0;
	return KVS_OK;
}

bool kvs_catalog_read_only(const kvs_catalog *c)
{
	return c->read_only;
}

size_t kvs_catalog_skipped_count(const kvs_catalog *c)
{
	return c->nskipped;
}

const kvs_catalog_skip *kvs_catalog_skipped_at(const kvs_catalog *c, size_t i)
{
	return i < c->nskipped ? &c->skipped[i] : NULL;
}

/* add and replace on a catalog opened to read only: refused before the
 * directory is touched */
static kvs_status check_writable(const kvs_catalog *c, kvs_error *err)
{
	if (!c->ro_chosen)
		return KVS_OK;
	return kvs_error_set(err, KVS_E_INVAL,
	                     "%s: the catalog was opened for reading only%s",
	                     c->dir,
	                     c->nskipped ? " (bad segments were left out of "
	                                   "its scan)"
	                                 : "");
}

uint64_t kvs_catalog_generation(const kvs_catalog *c)
{
	return c->cur.generation;
}

size_t kvs_catalog_count(const kvs_catalog *c)
{
	return c->cur.count;
}

const kvs_catalog_entry *kvs_catalog_entry_at(const kvs_catalog *c, size_t i)
{
	return i < c->cur.count ? &c->cur.entries[i] : NULL;
}

const char *kvs_catalog_dir(const kvs_catalog *c)
{
	return c->dir;
}

ptrdiff_t kvs_catalog_find(const kvs_catalog *c, const char *name)
{
	return kvsi_cat_find_live(&c->cur, name);
}

/* Makes next (published) c's snapshot. */
static void adopt(kvs_catalog *c, cat_state *next)
{
	kvsi_cat_state_free(&c->cur);
	c->cur = *next;
	next->entries = NULL;
	next->count = 0;
}

static kvs_status next_generation(const kvs_catalog *c, const cat_state *disk,
                                  uint64_t *gen, kvs_error *err)
{
	if (disk->generation == UINT64_MAX)
		return kvs_error_set(err, KVS_E_OVERFLOW,
		                     "%s/%s: the generation cannot grow past "
		                     "%" PRIu64,
		                     c->dir, KVS_CATALOG_FILE,
		                     disk->generation);
	*gen = disk->generation + 1;
	return KVS_OK;
}

/*
 * A segment added as the newest must have a sequence above every live
 * one's (FORMAT.md §10.2). A directory's catalog rebuilt from its files
 * orders them by sequence, then name; were age order and sequence order
 * to disagree, a rebuild would reorder the segments and change which
 * binding of a key wins. Equal is refused too: the rebuild would order
 * the two by name. (replace() may keep the newest input's sequence: its
 * output takes the inputs' place, so the orders still agree.)
 */
static kvs_status check_newest(const kvs_catalog *c, const cat_state *disk,
                               const kvs_catalog_entry *e, kvs_error *err)
{
	size_t top = 0; /* the highest sequence; the newest such */
	for (size_t i = 1; i < disk->count; i++)
		if (disk->entries[i].sequence >= disk->entries[top].sequence)
			top = i;
	if (disk->count == 0 || e->sequence > disk->entries[top].sequence)
		return KVS_OK;
	uint64_t seq = disk->entries[top].sequence;
	const char *role = top == disk->count - 1
	                       ? "the newest live segment"
	                       : "the live segment of the highest sequence";
	if (seq == UINT64_MAX)
		return kvs_error_set(err, KVS_E_INVAL,
		                     "%s/%s: its sequence %" PRIu64
		                     " is not above %" PRIu64
		                     ", that of %s, %s, and no sequence is",
		                     c->dir, e->name, e->sequence, seq,
		                     disk->entries[top].name, role);
	return kvs_error_set(err, KVS_E_INVAL,
	                     "%s/%s: its sequence %" PRIu64
	                     " is not above %" PRIu64 ", that of %s, %s (a "
	                     "catalog rebuilt from the files orders them by "
	                     "sequence): rebuild it with --sequence %" PRIu64
	                     " or higher",
	                     c->dir, e->name, e->sequence, seq,
	                     disk->entries[top].name, role, seq + 1);
}

kvs_status kvs_catalog_add(kvs_catalog *c, const char *name, kvs_error *err)
{
	kvs_status st = check_writable(c, err);
	if (st == KVS_OK)
		st = check_name(c->dir, name, "segment", err);
	if (st != KVS_OK)
		return st;
	int lock = -1;
	cat_state disk = {0, 0, NULL}, next = {0, 0, NULL};
	kvs_catalog_entry e;
	st = lock_dir(c->dir, LOCK_EX, &lock, NULL, err);
	if (st == KVS_OK)
		st = read_existing(c, &disk, err);
	if (st != KVS_OK)
		goto out;
	if (kvsi_cat_find_live(&disk, name) >= 0) {
		st = kvs_error_set(err, KVS_E_INVAL,
		                   "%s/%s: already in the catalog", c->dir,
		                   name);
		goto out;
	}
	if (disk.count >= KVS_CATALOG_MAX_SEGMENTS) {
		st = kvs_error_set(err, KVS_E_RANGE,
		                   "%s: the catalog holds %d segments already",
		                   c->dir, KVS_CATALOG_MAX_SEGMENTS);
		goto out;
	}
	if ((st = new_entry(c->dir, name, &e, err)) != KVS_OK ||
	    (st = check_newest(c, &disk, &e, err)) != KVS_OK ||
	    (st = next_generation(c, &disk, &next.generation, err)) != KVS_OK)
		goto out;
	next.entries = malloc((disk.count + 1) * sizeof *next.entries);
	if (!next.entries) {
		st = kvs_error_set(err, KVS_E_NOMEM, "%s: out of memory",
		                   c->dir);
		goto out;
	}
	if (disk.count)
		memcpy(next.entries, disk.entries,
		       disk.count * sizeof *next.entries);
	next.entries[disk.count] = e;
	next.count = disk.count + 1;
	/* published even where the directory's fsync failed after the
	 * rename: the handle moves to what readers see */
	bool renamed = false;
	st = kvsi_cat_publish(c->dir, &next, &renamed, err);
	if (renamed)
		adopt(c, &next);
out:
	unlock_dir(lock);
	kvsi_cat_state_free(&disk);
	kvsi_cat_state_free(&next);
	return st;
}

/* Arguments of replace() that can be checked without the directory. */
static kvs_status check_replace_args(const kvs_catalog *c,
                                     const char *const *inputs, size_t n,
                                     const char *output, kvs_error *err)
{
	if (n == 0 || !inputs)
		return kvs_error_set(err, KVS_E_INVAL,
		                     "%s: replace needs at least one input",
		                     c->dir);
	if (n > KVS_CATALOG_MAX_SEGMENTS)
		return kvs_error_set(
		    err, KVS_E_RANGE,
		    "%s: %zu inputs, more than a catalog holds", c->dir, n);
	for (size_t i = 0; i < n; i++) {
		kvs_status st = check_name(c->dir, inputs[i], "input", err);
		if (st != KVS_OK)
			return st;
		if (output && strcmp(inputs[i], output) == 0)
			return kvs_error_set(
			    err, KVS_E_INVAL,
			    "%s/%s: the output is also an input", c->dir,
			    output);
	}
	if (output)
		return check_name(c->dir, output, "output", err);
	return KVS_OK;
}

kvs_status kvs_catalog_replace(kvs_catalog *c, uint64_t expected_generation,
                               const char *const *inputs, size_t n,
                               const char *output, bool unlink_inputs,
                               kvs_error *err)
{
	kvs_status st = check_writable(c, err);
	if (st == KVS_OK)
		st = check_replace_args(c, inputs, n, output, err);
	if (st != KVS_OK)
		return st;
	int lock = -1;
	cat_state disk = {0, 0, NULL}, next = {0, 0, NULL};
	kvs_catalog_entry out_entry;
	st = lock_dir(c->dir, LOCK_EX, &lock, NULL, err);
	if (st == KVS_OK)
		st = read_existing(c, &disk, err);
	if (st != KVS_OK)
		goto out;
	if (disk.generation != expected_generation) {
		st =
		    kvs_error_set(err, KVS_E_CONFLICT,
		                  "%s/%s: the catalog is at generation %" PRIu64
		                  ", not the expected %" PRIu64,
		                  c->dir, KVS_CATALOG_FILE, disk.generation,
		                  expected_generation);
		goto out;
	}
	/* inputs: live, oldest first, consecutive (which also makes them
	 * distinct) */
	ptrdiff_t first = kvsi_cat_find_live(&disk, inputs[0]);
	for (size_t i = 0; i < n; i++) {
		/* where it must be, else anywhere (for the message): linear
		 * in the inputs, however many segments are live */
		size_t want = (size_t)first + i;
		ptrdiff_t at =
		    i == 0 ? first
		    : want < disk.count &&
		            !strcmp(disk.entries[want].name, inputs[i])
		        ? (ptrdiff_t)want
		        : kvsi_cat_find_live(&disk, inputs[i]);
		if (at < 0) {
			st = kvs_error_set(err, KVS_E_INVAL,
			                   "%s/%s: input is not a live segment "
			                   "of generation %" PRIu64,
			                   c->dir, inputs[i], disk.generation);
			goto out;
		}
		if ((size_t)at != (size_t)first + i) {
			st = kvs_error_set(
			    err, KVS_E_INVAL,
			    "%s/%s: input %zu is not the segment "
			    "after input %zu in age order; inputs "
			    "must be consecutive, oldest first",
			    c->dir, inputs[i], i, i - 1);
			goto out;
		}
	}
	if (output && kvsi_cat_find_live(&disk, output) >= 0) {
		st =
		    kvs_error_set(err, KVS_E_INVAL,
		                  "%s/%s: the output is already in the catalog",
		                  c->dir, output);
		goto out;
	}
	if (output &&
	    (st = new_entry(c->dir, output, &out_entry, err)) != KVS_OK)
		goto out;
	if ((st = next_generation(c, &disk, &next.generation, err)) != KVS_OK)
		goto out;

	size_t keep = disk.count - n, pos = 0;
	next.entries = malloc((keep + 1) * sizeof *next.entries);
	if (!next.entries) {
		st = kvs_error_set(err, KVS_E_NOMEM, "%s: out of memory",
		                   c->dir);
		goto out;
	}
	for (size_t i = 0; i < disk.count; i++) {
		if (i >= (size_t)first && i < (size_t)first + n) {
			if (output && i == (size_t)first + n - 1)
				next.entries[pos++] = out_entry;
			continue;
		}
		next.entries[pos++] = disk.entries[i];
	}
	next.count = pos;
	/* Inputs to unlink get their marks first, so that recovery finds
	 * them should we die between publishing and unlinking */
	size_t marked = 0;
	while (unlink_inputs && marked < n && st == KVS_OK) {
		char path[PATH_MAX], mark[PATH_MAX];
		st = kvsi_cat_path_in(path, c->dir, inputs[marked], err);
		if (st == KVS_OK)
			st = kvsi_cat_replaced_mark(mark, c->dir,
			                            inputs[marked], err);
		if (st != KVS_OK)
			break;
		(void)unlink(mark); /* a dead replace()'s, not yet recovered */
		if (link(path, mark) == 0)
			marked++;
		else if (errno == EPERM || errno == EOPNOTSUPP)
			break; /* no hard links (FAT, SMB): no marks */
		else
			st = kvs_error_set(err, KVS_E_IO,
			                   "%s: cannot link it to %s: %s", path,
			                   mark, strerror(errno));
	}
	if (st == KVS_OK && marked)
		st = kvsi_cat_fsync_dir(c->dir, err);
	bool renamed = false;
	if (st == KVS_OK)
		st = kvsi_cat_publish(c->dir, &next, &renamed, err);
	if (st != KVS_OK && !renamed) {
		/* nothing published: the marks mark nothing */
		for (size_t i = 0; i < marked; i++) {
			char mark[PATH_MAX];
			if (kvsi_cat_replaced_mark(mark, c->dir, inputs[i],
			                           NULL) == KVS_OK)
				(void)unlink(mark);
		}
		goto out;
	}

	/* The new generation is published (durable unless the directory's
	 * fsync failed: st says so, and readers see it all the same): the
	 * inputs are garbage now. They are unlinked before adopt(), as
	 * inputs may point into c's own entries. A failure here still
	 * leaves next published, and the input's mark, for the next open
	 * to retry. */
	for (size_t i = 0; unlink_inputs && i < n; i++) {
		char path[PATH_MAX], mark[PATH_MAX];
		if (kvsi_cat_path_in(path, c->dir, inputs[i], NULL) != KVS_OK ||
		    kvsi_cat_replaced_mark(mark, c->dir, inputs[i], NULL) !=
		        KVS_OK)
			continue; /* cannot happen: it was found live */
		if (unlink(path) < 0 && errno != ENOENT) {
			if (st == KVS_OK)
				st = kvs_error_set(
				    err, KVS_E_IO,
				    "%s: generation %" PRIu64
				    " is published, but unlinking a "
				    "replaced input failed: %s",
				    path, next.generation, strerror(errno));
			continue;
		}
		(void)unlink(mark);
	}
	if (unlink_inputs) {
		kvs_status st2 =
		    kvsi_cat_fsync_dir(c->dir, st == KVS_OK ? err : NULL);
		if (st == KVS_OK)
			st = st2;
	}
	adopt(c, &next);
out:
	unlock_dir(lock);
	kvsi_cat_state_free(&disk);
	kvsi_cat_state_free(&next);
	return st;
}
