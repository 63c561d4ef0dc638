/*
 * catalog_file.c — the CATALOG file (docs/FORMAT.md §10): its bytes,
 * parsed and encoded, read from a directory and published in one.
 *
 * A publication writes a temporary file (.CATALOG.tmp-XXXXXX), fsyncs it,
 * renames it over CATALOG and fsyncs the directory: rename is atomic, so a
 * crash at any instant leaves the old or the new file, and a reader never
 * needs a lock to see a complete one. Locking, and what a generation may
 * contain, are catalog.c's.
 *
 * Everything read from CATALOG is bounded before use: the file's length
 * (by the largest catalog there can be), the CRC32C over all of it, then
 * every count and name length against the bytes that remain.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog_internal.h"
#include "catalog_scan.h"
#include "kvseg/bits.h"
#include "kvseg/crc32c.h"
#include "segment_internal.h"

#define CAT_MAGIC      "\x89KVCAT\r\n"
#define CAT_VERSION    1

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

void kvsi_cat_state_free(cat_state *s)
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
bool kvsi_cat_name_ok(const char *name, size_t len)
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
	return name &&
	       kvsi_cat_name_ok(name, strnlen(name, KVS_CATALOG_MAX_NAME + 1));
}

kvs_status kvsi_cat_path_in(char out[PATH_MAX], const char *dir,
                            const char *name, kvs_error *err)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
	if (n < 0 || n >= PATH_MAX)
		return kvs_error_set(err, KVS_E_RANGE,
		                     "%s: the path of %s is too long", dir,
		                     name);
	return KVS_OK;
}

kvs_status kvsi_cat_fsync_dir(const char *dir, kvs_error *err)
{
	return kvsi_fsync_dir(dir, dir, err);
}

ptrdiff_t kvsi_cat_find_live(const cat_state *s, const char *name)
{
	for (size_t i = 0; i < s->count; i++)
		if (strcmp(s->entries[i].name, name) == 0)
			return (ptrdiff_t)i;
	return -1;
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
	uint32_t crc = kvsi_crc32c(0, d, end);
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
		if (!kvsi_cat_name_ok((const char *)d + pos, nlen)) {
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
	kvsi_cat_state_free(&s);
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
	kvs_store_le32(d + pos, kvsi_crc32c(0, d, pos));
	*out = d;
	*out_len = len;
	return KVS_OK;
}

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

/* Reads DIR/CATALOG into *out; *exists is false (and KVS_OK returned) when
 * there is no such file. */
kvs_status kvsi_cat_read(const char *dir, cat_state *out, bool *exists,
                         kvs_error *err)
{
	char path[PATH_MAX];
	kvs_status st = kvsi_cat_path_in(path, dir, KVS_CATALOG_FILE, err);
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
kvs_status kvsi_cat_publish(const char *dir, const cat_state *s, bool *renamed,
                            kvs_error *err)
{
	*renamed = false;
	char tmp[PATH_MAX], path[PATH_MAX];
	kvs_status st = kvsi_cat_path_in(path, dir, KVS_CATALOG_FILE, err);
	if (st != KVS_OK)
		return st;
	st = kvsi_cat_path_in(tmp, dir, CAT_TMP_PREFIX "XXXXXX", err);
	if (st != KVS_OK)
		return st;
	uint8_t *d;
	size_t len;
	if (encode_catalog(s, &d, &len) != KVS_OK)
		return kvs_error_set(err, KVS_E_NOMEM, "%s: out of memory",
		                     path);
	int fd = kvsi_create_temp(tmp); /* 0644 less the umask */
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
	return kvsi_cat_fsync_dir(dir, err);
}
