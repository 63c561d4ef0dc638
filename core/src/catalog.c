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
 * Everything read from CATALOG is bounded before use: the file's length
 * (by the largest catalog there can be), the CRC32C over all of it, then
 * every count and name length against the bytes that remain.
 */
#include <dirent.h>
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
#include "catalog_scan.h"
#include "kvseg/crc32c.h"
#include "kvseg/bits.h"
#include "kvseg/segment.h"
#include "segment_internal.h"

#define CAT_MAGIC      "\x89KVCAT\r\n"
#define CAT_VERSION    1
#define CAT_TMP_PREFIX "." KVS_CATALOG_FILE ".tmp-"
#define CAT_REPLACED ".replaced" /* see replaced_mark */

/* §10: header, per-entry fixed bytes, trailer */
enum {
	CAT_OFF_MAGIC = 0,
	CAT_OFF_VERSION = 8,
	CAT_OFF_GENERATION = 12,
	CAT_OFF_COUNT = 20,
	CAT_HEADER_BYTES = 24,
	CAT_ENTRY_FIXED = 2 + 8 + 8 + 4, /* name length, seq, size, CRC */
	CAT_TRAILER_BYTES = 4,
};

#define CAT_MAX_BYTES                                                          \
	((size_t)CAT_HEADER_BYTES +                                            \
	 (size_t)KVS_CATALOG_MAX_SEGMENTS *                                    \
	     (CAT_ENTRY_FIXED + KVS_CATALOG_MAX_NAME) +                        \
	 CAT_TRAILER_BYTES)

/* One generation: what a handle holds and what a publication writes. */
typedef struct cat_state {
	uint64_t generation;
	size_t count;
	kvs_catalog_entry *entries;
} cat_state;

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

static void state_free(cat_state *s)
{
	free(s->entries);
	s->entries = NULL;
	s->count = 0;
}

/* ---- names and paths ----------------------------------------------------- */

/*
 * A name a catalog may hold (§10): 1..255 bytes, no '/' or NUL, no leading
 * '.' (dot names are temporaries, and "." and ".." are not files), and not
 * one of the catalog's own files.
 */
static bool name_ok(const char *name, size_t len)
{
	if (len == 0 || len > KVS_CATALOG_MAX_NAME || name[0] == '.')
		return false;
	if (memchr(name, '/', len) || memchr(name, '\0', len))
		return false;
	if ((len == strlen(KVS_CATALOG_FILE) &&
	     memcmp(name, KVS_CATALOG_FILE, len) == 0) ||
	    (len == strlen(CAT_LOCK_FILE) &&
	     memcmp(name, CAT_LOCK_FILE, len) == 0))
		return false;
	return true;
}

bool kvs_catalog_name_valid(const char *name)
{
	return name && name_ok(name, strnlen(name, KVS_CATALOG_MAX_NAME + 1));
}

static kvs_status check_name(const char *dir, const char *name,
                             const char *what, kvs_error *err)
{
	if (!name)
		return kvs_error_set(err, KVS_E_INVAL, "%s: %s is NULL", dir,
		                     what);
	size_t len = strnlen(name, KVS_CATALOG_MAX_NAME + 1);
	if (!name_ok(name, len))
		return kvs_error_set(
		    err, KVS_E_INVAL,
		    "%s: %s \"%.*s\" is not a segment file name "
		    "(1..%d bytes, no '/', no leading '.', not "
		    "%s or %s)",
		    dir, what, 64, name, KVS_CATALOG_MAX_NAME, KVS_CATALOG_FILE,
		    CAT_LOCK_FILE);
	return KVS_OK;
}

static kvs_status path_in(char out[PATH_MAX], const char *dir, const char *name,
                          kvs_error *err)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
	if (n < 0 || n >= PATH_MAX)
		return kvs_error_set(err, KVS_E_RANGE,
		                     "%s: the path of %s is too long", dir,
		                     name);
	return KVS_OK;
}

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
 * ".NAME.tmp-XXXXXX" and, with a publish hook, ".NAME.pub-XXXXXX". */
bool kvs_catalog_temporary_name(const char *name)
{
	if (strncmp(name, CAT_TMP_PREFIX, strlen(CAT_TMP_PREFIX)) == 0)
		return true;
	return writer_temporary(name, ".tmp-") ||
	       writer_temporary(name, ".pub-");
}

static kvs_status fsync_dir(const char *dir, kvs_error *err)
{
	return seg_fsync_dir(dir, dir, err);
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
	kvs_status st = path_in(path, dir, CAT_LOCK_FILE, err);
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

/* Reads the first len bytes of fd (fewer at its end) into buf; *got
 * receives how many. */
static kvs_status read_up_to(int fd, uint8_t *buf, size_t len,
                             const char *path, size_t *got, kvs_error *err)
{
	size_t have = 0;
	while (have < len) {
		ssize_t n = pread(fd, buf + have, len - have, (off_t)have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return kvs_error_set(err, KVS_E_IO, "%s: read: %s",
			                     path, strerror(errno));
		if (n == 0)
			break;
		have += (size_t)n;
	}
	*got = have;
	return KVS_OK;
}

/*
 * Describes segment file name of dir in *e. The file must be a regular file
 * (not a symbolic link) that kvs_segment_open accepts; anything else,
 * including a missing file, is KVS_E_CORRUPT for the catalog. With sync it
 * is also fsynced, so that a catalog never names a file not yet durable.
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

static kvs_status probe_segment(const char *dir, const char *name,
                                kvs_catalog_entry *e, bool sync,
                                kvs_status missing, kvs_error *err)
{
	char path[PATH_MAX];
	kvs_status st = path_in(path, dir, name, err);
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
	if ((st = path_in(path, dir, want->name, err)) != KVS_OK)
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

/* ---- the catalog file (§10) ---------------------------------------------- */

static int cmp_entry_name(const void *a, const void *b)
{
	const kvs_catalog_entry *x = *(const kvs_catalog_entry *const *)a;
	const kvs_catalog_entry *y = *(const kvs_catalog_entry *const *)b;
	return strcmp(x->name, y->name);
}

/* The first name that appears twice, or NULL (n log n). */
static const char *find_duplicate(const cat_state *s, kvs_status *st)
{
	*st = KVS_OK;
	if (s->count < 2)
		return NULL;
	const kvs_catalog_entry **v = malloc(s->count * sizeof *v);
	if (!v) {
		*st = KVS_E_NOMEM;
		return NULL;
	}
	for (size_t i = 0; i < s->count; i++)
		v[i] = &s->entries[i];
	qsort(v, s->count, sizeof *v, cmp_entry_name);
	const char *dup = NULL;
	for (size_t i = 1; i < s->count && !dup; i++)
		if (strcmp(v[i - 1]->name, v[i]->name) == 0)
			dup = v[i]->name;
	free(v);
	return dup;
}

#define BAD(...) kvs_error_set(err, KVS_E_CORRUPT, __VA_ARGS__)

static kvs_status parse_catalog(const uint8_t *d, size_t len, const char *path,
                                cat_state *out, kvs_error *err)
{
	if (len < CAT_HEADER_BYTES + CAT_TRAILER_BYTES)
		return BAD("%s: file of %zu bytes is shorter than the smallest "
		           "catalog (%d bytes)",
		           path, len, CAT_HEADER_BYTES + CAT_TRAILER_BYTES);
	if (memcmp(d + CAT_OFF_MAGIC, CAT_MAGIC, 8) != 0)
		return BAD("%s: bad magic: not a catalog", path);
	size_t end = len - CAT_TRAILER_BYTES;
	uint32_t stored = kvs_load_le32(d + end);
	uint32_t crc = kvs_crc32c(0, d, end);
	if (crc != stored)
		return BAD("%s: CRC32C mismatch (stored 0x%08" PRIx32
		           ", computed 0x%08" PRIx32 ")",
		           path, stored, crc);
	uint32_t version = kvs_load_le32(d + CAT_OFF_VERSION);
	if (version != CAT_VERSION)
		return kvs_error_set(err, KVS_E_UNSUPPORTED,
		                     "%s: catalog version %" PRIu32
		                     " is not supported (this build reads "
		                     "version %d)",
		                     path, version, CAT_VERSION);
	uint64_t gen = kvs_load_le64(d + CAT_OFF_GENERATION);
	uint32_t count = kvs_load_le32(d + CAT_OFF_COUNT);
	if (gen == 0)
		return BAD("%s: generation 0", path);
	/* every entry takes at least CAT_ENTRY_FIXED + 1 bytes */
	if (count > KVS_CATALOG_MAX_SEGMENTS ||
	    count > (end - CAT_HEADER_BYTES) / (CAT_ENTRY_FIXED + 1))
		return BAD("%s: %" PRIu32 " entries do not fit in %zu bytes "
		           "(at most %d)",
		           path, count, len, KVS_CATALOG_MAX_SEGMENTS);
	cat_state s = {gen, count, NULL};
	if (count) {
		s.entries = calloc(count, sizeof *s.entries);
		if (!s.entries)
			return kvs_error_set(err, KVS_E_NOMEM,
			                     "%s: out of memory", path);
	}
	size_t pos = CAT_HEADER_BYTES;
	kvs_status st = KVS_OK;
	for (uint32_t i = 0; i < count; i++) {
		kvs_catalog_entry *e = &s.entries[i];
		if (end - pos < 2) {
			st = BAD("%s: entry %" PRIu32 " is cut short", path, i);
			goto fail;
		}
		size_t nlen = (size_t)d[pos] | (size_t)d[pos + 1] << 8;
		pos += 2;
		if (nlen > end - pos ||
		    end - pos - nlen < CAT_ENTRY_FIXED - 2) {
			st = BAD("%s: entry %" PRIu32 " (name of %zu bytes) "
			         "runs past the end",
			         path, i, nlen);
			goto fail;
		}
		if (!name_ok((const char *)d + pos, nlen)) {
			st = BAD("%s: entry %" PRIu32 " has an invalid segment "
			         "name (%zu bytes)",
			         path, i, nlen);
			goto fail;
		}
		memcpy(e->name, d + pos, nlen);
		e->name[nlen] = '\0';
		pos += nlen;
		e->sequence = kvs_load_le64(d + pos);
		e->size = kvs_load_le64(d + pos + 8);
		e->header_crc = kvs_load_le32(d + pos + 16);
		pos += CAT_ENTRY_FIXED - 2;
	}
	if (pos != end) {
		st =
		    BAD("%s: %zu bytes follow the last entry", path, end - pos);
		goto fail;
	}
	const char *dup = find_duplicate(&s, &st);
	if (st != KVS_OK) {
		st = kvs_error_set(err, st, "%s: out of memory", path);
		goto fail;
	}
	if (dup) {
		st = BAD("%s: segment %s is named twice", path, dup);
		goto fail;
	}
	*out = s;
	return KVS_OK;
fail:
	state_free(&s);
	return st;
}

/* The bytes of s as §10 lays them out; *out is malloc'ed. */
static kvs_status encode_catalog(const cat_state *s, uint8_t **out,
                                 size_t *out_len)
{
	size_t len = CAT_HEADER_BYTES + CAT_TRAILER_BYTES;
	for (size_t i = 0; i < s->count; i++)
		len += CAT_ENTRY_FIXED + strlen(s->entries[i].name);
	uint8_t *d = malloc(len);
	if (!d)
		return KVS_E_NOMEM;
	memcpy(d + CAT_OFF_MAGIC, CAT_MAGIC, 8);
	kvs_store_le32(d + CAT_OFF_VERSION, CAT_VERSION);
	kvs_store_le64(d + CAT_OFF_GENERATION, s->generation);
	kvs_store_le32(d + CAT_OFF_COUNT, (uint32_t)s->count);
	size_t pos = CAT_HEADER_BYTES;
	for (size_t i = 0; i < s->count; i++) {
		const kvs_catalog_entry *e = &s->entries[i];
		size_t nlen = strlen(e->name);
		d[pos] = (uint8_t)nlen;
		d[pos + 1] = (uint8_t)(nlen >> 8);
		memcpy(d + pos + 2, e->name, nlen);
		pos += 2 + nlen;
		kvs_store_le64(d + pos, e->sequence);
		kvs_store_le64(d + pos + 8, e->size);
		kvs_store_le32(d + pos + 16, e->header_crc);
		pos += CAT_ENTRY_FIXED - 2;
	}
	kvs_store_le32(d + pos, kvs_crc32c(0, d, pos));
	*out = d;
	*out_len = len;
	return KVS_OK;
}

/* Reads DIR/CATALOG into *out; *exists is false (and KVS_OK returned) when
 * there is no such file. */
static kvs_status read_catalog(const char *dir, cat_state *out, bool *exists,
                               kvs_error *err)
{
	char path[PATH_MAX];
	kvs_status st = path_in(path, dir, KVS_CATALOG_FILE, err);
	if (st != KVS_OK)
		return st;
	*exists = false;
	/* O_NONBLOCK: a FIFO in CATALOG's place is refused below instead of
	 * blocking the open until some process writes to it */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		struct stat lsb;
		if (e == ENOENT)
			return KVS_OK;
		/* O_NOFOLLOW refuses a symbolic link with ELOOP, "Too many
		 * levels of symbolic links", which does not say what is
		 * wrong: like any file that is not a regular one (below), a
		 * link is not a catalog */
		if (e == ELOOP && lstat(path, &lsb) == 0 &&
		    S_ISLNK(lsb.st_mode))
			return BAD("%s: a symbolic link, not a catalog file "
			           "(put the catalog file itself there, or "
			           "remove it)",
			           path);
		return kvs_error_set(err, KVS_E_IO, "%s: %s", path,
		                     strerror(e));
	}
	*exists = true;
	uint8_t *d = NULL;
	struct stat sb;
	if (fstat(fd, &sb) < 0) {
		st = kvs_error_set(err, KVS_E_IO, "%s: %s", path,
		                   strerror(errno));
		goto out;
	}
	if (!S_ISREG(sb.st_mode)) {
		st = BAD("%s: not a regular file", path);
		goto out;
	}
	if ((uint64_t)sb.st_size > CAT_MAX_BYTES) {
		st = BAD("%s: file of %lld bytes is larger than any catalog "
		         "(%zu bytes)",
		         path, (long long)sb.st_size, CAT_MAX_BYTES);
		goto out;
	}
	size_t len = (size_t)sb.st_size, got = 0;
	d = malloc(len ? len : 1);
	if (!d) {
		st = kvs_error_set(err, KVS_E_NOMEM, "%s: out of memory", path);
		goto out;
	}
	if ((st = read_up_to(fd, d, len, path, &got, err)) != KVS_OK)
		goto out;
	st = parse_catalog(d, got, path, out, err);
out:
	free(d);
	close(fd);
	return st;
}

/*
 * Writes s as DIR/CATALOG: a temporary file, fsync, rename, fsync of the
 * directory. The temporary file is removed on any failure before the
 * rename; after it, s is what the directory holds, and *renamed tells a
 * caller so: should the directory's fsync then fail, s is published all
 * the same (readers see it), and the caller must go on as published.
 */
static kvs_status publish(const char *dir, const cat_state *s, bool *renamed,
                          kvs_error *err)
{
	*renamed = false;
	char tmp[PATH_MAX], path[PATH_MAX];
	kvs_status st = path_in(path, dir, KVS_CATALOG_FILE, err);
	if (st != KVS_OK)
		return st;
	st = path_in(tmp, dir, CAT_TMP_PREFIX "XXXXXX", err);
	if (st != KVS_OK)
		return st;
	uint8_t *d;
	size_t len;
	if (encode_catalog(s, &d, &len) != KVS_OK)
		return kvs_error_set(err, KVS_E_NOMEM, "%s: out of memory",
		                     path);
	int fd = seg_create_temp(tmp); /* 0644 less the umask */
	if (fd < 0) {
		st = kvs_error_set(err, KVS_E_IO,
		                   "%s: cannot create a temporary file: %s",
		                   path, strerror(errno));
		free(d);
		return st;
	}
	const char *what = NULL;
	for (size_t done = 0; !what && done < len;) {
		ssize_t n = write(fd, d + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			what = "write";
		else
			done += (size_t)n;
	}
	if (!what && fsync(fd) < 0)
		what = "fsync";
	int e = errno;
	if (close(fd) < 0 && !what) {
		what = "close";
		e = errno;
	}
	if (!what && rename(tmp, path) < 0) {
		what = "rename";
		e = errno;
	}
	free(d);
	if (what) {
		unlink(tmp);
		return kvs_error_set(err, KVS_E_IO, "%s: %s of %s: %s", path,
		                     what, tmp, strerror(e));
	}
	*renamed = true;
	return fsync_dir(dir, err);
}

/* ---- recovery ------------------------------------------------------------ */

/* The index of name in s, or -1. */
static ptrdiff_t find_live(const cat_state *s, const char *name)
{
	for (size_t i = 0; i < s->count; i++)
		if (strcmp(s->entries[i].name, name) == 0)
			return (ptrdiff_t)i;
	return -1;
}

/* Is name live in s (NULL: a directory without a catalog yet)? */
static bool names_live(const cat_state *s, const char *name)
{
	return s && find_live(s, name) >= 0;
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
 * A writer with a publish hook died between giving its file the final
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
static kvs_status replaced_mark(char out[PATH_MAX], const char *dir,
                                const char *name, kvs_error *err)
{
	char mark[KVS_CATALOG_MAX_NAME + 16];
	snprintf(mark, sizeof mark, ".%s" CAT_REPLACED, name);
	return path_in(out, dir, mark, err);
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
		if (name_ok(name, nlen) && !names_live(w->live, name) &&
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
static kvs_status remove_leftovers(const char *dir, const cat_state *live,
                                   kvs_error *err)
{
	sweep w = {dir, live, NULL, {0}};
	return sweep_dir(&w, remove_leftover, err);
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
	kvs_status st = cat_scan_dir(c->dir, !c->read_only, &sc, err);
	if (st == KVS_OK)
		st = cat_scan_admit(c->dir, &sc, c->flags, err);
	if (st != KVS_OK) {
		cat_scan_free(&sc);
		return st;
	}
	if (sc.nbad)
		c->read_only = c->ro_chosen = true;
	state_free(&c->cur);
	c->cur = (cat_state){1, sc.count, sc.segments};
	c->skipped = sc.bad;
	c->nskipped = sc.nbad;
	c->scanned = c->read_only;
	bool renamed;
	return c->read_only ? KVS_OK : publish(c->dir, &c->cur, &renamed, err);
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
	if (path_in(path, c->dir, KVS_CATALOG_FILE, NULL) != KVS_OK ||
	    lstat(path, &sb) == 0 || errno != ENOENT)
		return KVS_OK; /* the open says what is wrong */
	cat_scan sc;
	if (cat_scan_dir(c->dir, false, &sc, NULL) != KVS_OK)
		return KVS_OK; /* idem */
	kvs_status st = cat_scan_admit(c->dir, &sc, c->flags, err);
	if (st == KVS_OK && sc.nbad)
		c->read_only = c->ro_chosen = true;
	cat_scan_free(&sc);
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
		st = read_catalog(dir, &c->cur, &exists, err);
	/* read-only: what a crash left stays (nothing can remove it, and no
	 * reader looks at it), and a missing catalog is only scanned */
	if (st == KVS_OK && !c->read_only)
		st = remove_leftovers(dir, exists ? &c->cur : NULL, err);
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
	kvs_status r = path_in(path, c->dir, e->name, err);
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
	state_free(&c->cur);
	free(c->skipped);
	free(c->dir);
	free(c);
}

/* The newest generation as the directory holds it (under some lock). */
static kvs_status read_existing(const kvs_catalog *c, cat_state *s,
                                kvs_error *err)
{
	bool exists;
	kvs_status st = read_catalog(c->dir, s, &exists, err);
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
		st = c->scanned ? read_catalog(c->dir, &s, &exists, err)
		                : read_existing(c, &s, err);
	if (st == KVS_OK && exists && !(c->flags & KVS_CATALOG_NO_CHECK))
		st = check_entries(c->dir, &s, err);
	unlock_dir(lock);
	if (st != KVS_OK || !exists) {
		state_free(&s);
		return st;
	}
	state_free(&c->cur);
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
	return find_live(&c->cur, name);
}

/* Makes next (published) c's snapshot. */
static void adopt(kvs_catalog *c, cat_state *next)
{
	state_free(&c->cur);
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
	if (find_live(&disk, name) >= 0) {
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
	st = publish(c->dir, &next, &renamed, err);
	if (renamed)
		adopt(c, &next);
out:
	unlock_dir(lock);
	state_free(&disk);
	state_free(&next);
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
	ptrdiff_t first = find_live(&disk, inputs[0]);
	for (size_t i = 0; i < n; i++) {
		/* where it must be, else anywhere (for the message): linear
		 * in the inputs, however many segments are live */
		size_t want = (size_t)first + i;
		ptrdiff_t at =
		    i == 0 ? first
		    : want < disk.count && !strcmp(disk.entries[want].name,
		                                   inputs[i])
		        ? (ptrdiff_t)want
		        : find_live(&disk, inputs[i]);
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
	if (output && find_live(&disk, output) >= 0) {
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
		st = path_in(path, c->dir, inputs[marked], err);
		if (st == KVS_OK)
			st = replaced_mark(mark, c->dir, inputs[marked], err);
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
		st = fsync_dir(c->dir, err);
	bool renamed = false;
	if (st == KVS_OK)
		st = publish(c->dir, &next, &renamed, err);
	if (st != KVS_OK && !renamed) {
		/* nothing published: the marks mark nothing */
		for (size_t i = 0; i < marked; i++) {
			char mark[PATH_MAX];
			if (replaced_mark(mark, c->dir, inputs[i], NULL) ==
			    KVS_OK)
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
		if (path_in(path, c->dir, inputs[i], NULL) != KVS_OK ||
		    replaced_mark(mark, c->dir, inputs[i], NULL) != KVS_OK)
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
		kvs_status st2 = fsync_dir(c->dir, st == KVS_OK ? err : NULL);
		if (st == KVS_OK)
			st = st2;
	}
	adopt(c, &next);
out:
	unlock_dir(lock);
	state_free(&disk);
	state_free(&next);
	return st;
}
