/*
 * segment_writer.c — the streaming segment writer (docs/FORMAT.md §5-§7).
 *
 * Records arrive in key order and are front-coded straight into a buffer
 * that is written to a temporary file in the target directory whenever it
 * passes FLUSH_BYTES, so memory stays bounded by one buffer, one key and
 * the restart offsets (8 bytes per K records). The body CRC32C is computed
 * as the bytes go out. At the end the restart EF and the sort metadata
 * follow, the envelope and directory are written at offset 0, the file is
 * cut to its exact size, fsynced and renamed into place, and the directory
 * is fsynced: the final name shows a complete segment or nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kvseg/crc32c.h"
#include "writer_internal.h"


SEG_OUT_OF_LINE
kvs_status kvsi_writer_fail(kvs_writer *w, kvs_error *err, kvs_status st,
                            const char *fmt, const char *detail)
{
	w->failed = true;
	return kvs_error_set(err, st, fmt, w->path, detail);
}

static kvs_status io_fail(kvs_writer *w, kvs_error *err, const char *what)
{
	w->failed = true;
	return kvs_error_set(err, KVS_E_IO, "%s: %s: %s", w->path, what,
	                     strerror(errno));
}

/* The final name is taken (KVS_WRITER_NO_REPLACE, or a publish hook). */
static kvs_status name_taken(kvs_writer *w, kvs_error *err)
{
	w->failed = true;
	return kvs_error_set(err, KVS_E_EXISTS,
	                     "%s: a file appeared there while the segment was "
	                     "written; it was left as it is and nothing was "
	                     "published",
	                     w->path);
}

/* What a file of mode m is, for a message. */
static const char *file_kind(mode_t m)
{
	return S_ISDIR(m)    ? "a directory"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISSOCK(m) ? "a socket"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
	                     : "not a regular file";
}

/*
 * A segment replaces a regular file at its path, or a symbolic link (the
 * link, not what it points to, as mv does), never anything else: as root,
 * "kvseg build /dev/null" would otherwise replace the device with a file.
 */
static kvs_status check_replaceable(const char *path, kvs_error *err)
{
	struct stat sb;
	if (lstat(path, &sb) < 0 || S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode))
		return KVS_OK; /* absent (or unreadable: rename will say) */
	return kvs_error_set(err, KVS_E_IO, /* as rename onto a directory */
	                     "%s: is %s, which a segment would replace: "
	                     "remove it first or write elsewhere",
	                     path, file_kind(sb.st_mode));
}

/*
 * Moves the finished temporary file to w->path. Without no_replace it
 * replaces a regular file or a symbolic link there (check_replaceable),
 * after a first renameat2(RENAME_NOREPLACE) that publishes at once when
 * the name is free, as it usually is. With no_replace a file
 * already there stays and is reported: renameat2(RENAME_NOREPLACE)
 * where the filesystem has it; else link(2), which never replaces either,
 * then the temporary name is unlinked (a crash in between leaves a second
 * name of the published file, which recovery removes as a temporary);
 * on a filesystem without hard links either (FAT, SMB), a check that the
 * name is free, then rename(2), so that only a file created in between
 * is replaced.
 */
static kvs_status publish_file(kvs_writer *w, bool no_replace,
                               kvs_error *err)
{
	int rc;
	if (!no_replace) {
		/* Usually the name is free: one renameat2 that never
		 * replaces, with no lstat before it. Otherwise (a name that
		 * is taken, no RENAME_NOREPLACE here, or an error that
		 * rename(2) then gives again) the check and rename(2). */
		if (renameat2(AT_FDCWD, w->tmp_path, AT_FDCWD, w->path,
		              RENAME_NOREPLACE) == 0)
			return KVS_OK;
		/* again: something may have appeared since the open */
		kvs_status st = check_replaceable(w->path, err);
		if (st != KVS_OK) {
			w->failed = true;
			return st;
		}
		rc = rename(w->tmp_path, w->path);
	} else {
		rc = renameat2(AT_FDCWD, w->tmp_path, AT_FDCWD, w->path,
		               RENAME_NOREPLACE);
		if (rc < 0 && (errno == EINVAL || errno == ENOSYS)) {
			rc = link(w->tmp_path, w->path);
			if (rc == 0)
				(void)unlink(w->tmp_path);
		}
		if (rc < 0 && (errno == EPERM || errno == EOPNOTSUPP)) {
			struct stat sb;
			if (lstat(w->path, &sb) == 0)
				errno = EEXIST;
			else if (errno == ENOENT)
				rc = rename(w->tmp_path, w->path);
		}
	}
	if (rc == 0)
		return KVS_OK;
	return errno == EEXIST ? name_taken(w, err) : io_fail(w, err, "rename");
}

/* fsyncs the directory that holds path, so that a name made or removed
 * there is durable. */
static kvs_status fsync_parent(const char *path, kvs_error *err)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, (size_t)(slash - path) + 1)
	                  : strdup(".");
	if (!dir)
		return kvs_error_set(err, KVS_E_NOMEM, "%s: out of memory",
		                     path);
	kvs_status st = kvsi_fsync_dir(dir, path, err);
	free(dir);
	return st;
}

/* Removes path if it still names the writer's file. */
static void unlink_own(const kvs_writer *w)
{
	struct stat a, b;
	if (fstat(w->fd, &a) == 0 && lstat(w->path, &b) == 0 &&
	    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		(void)unlink(w->path);
}

/*
 * Publication with a hook (kvs_writer_options.publish): the file takes its
 * final name as a second name, durable before the hook may name it
 * anywhere; the temporary name, still locked, marks it as unpublished
 * until the hook has succeeded, so that recovery after a crash in between
 * removes both names (catalog.c, remove_temporaries).
 */
static kvs_status publish_linked(kvs_writer *w, bool sync, kvs_error *err)
{
	bool linked = link(w->tmp_path, w->path) == 0;
	if (!linked && errno == EEXIST)
		return name_taken(w, err);
	if (!linked && errno != EPERM && errno != EOPNOTSUPP)
		return io_fail(w, err, "link");
	/* no hard links (FAT, SMB): renamed without replacing, then
	 * published; a crash in between leaves path unpublished */
	kvs_status st = linked ? KVS_OK : publish_file(w, true, err);
	if (st == KVS_OK && sync)
		st = fsync_parent(w->path, err);
	if (st == KVS_OK)
		st = w->opt.publish(w->opt.publish_ctx, w->path, err);
	if (st != KVS_OK) {
		w->failed = true;
		unlink_own(w);
		return st;
	}
	if (linked)
		(void)unlink(w->tmp_path); /* what is left, recovery removes */
	return KVS_OK;
}

/*
 * With a size hint of RESERVE_MIN or more, space is reserved ahead of the
 * writes, at most RESERVE_STEP at a time (fallocate(2) with
 * FALLOC_FL_KEEP_SIZE), as RocksDB does for its files: writes into
 * reserved space skip the filesystem's block reservation page by page,
 * which on ext4 took about a third of the time of writing a large file.
 * Finish cuts the file to its size when it reserved past it, which
 * releases what the file did not use (ftruncate does even at an unchanged
 * size: checked on ext4, XFS, btrfs and tmpfs); a failed writer's file is
 * removed with it. Where the filesystem refuses (no support, no space),
 * the writes go on without: they find space or fail as they would have.
 * Not posix_fallocate, which writes zeros where the filesystem cannot
 * reserve.
 *
 * The reservation stops short of the hint by reserve_slack: a hint is
 * an estimate, mostly a little over the file (a merge's, the sum of its
 * inputs' sizes, was 5 to 60 KB over the merge of two disjoint inputs of
 * 4 to 9 MB, their second index and head), and on ext4 the cut that
 * releases even one reserved block past the end took 150 to 260 us,
 * while the pages of 64 KB written without reservation took 5 us more.
 * Below RESERVE_MIN the reservation no longer pays for its call: a file
 * of 520 KB took 86 us to write with 464 KB reserved (13 us of it the
 * fallocate), 101-118 us without; one of 200 KB, 51 us against 47.
 */
#define RESERVE_STEP      ((uint64_t)16 << 20)
#define RESERVE_MIN       ((uint64_t)512 << 10) /* smaller hints reserve nothing */
#define RESERVE_SLACK_MIN ((uint64_t)64 << 10)

/* What the reservation leaves unreserved below the hint: 1/64 of it, at
 * least RESERVE_SLACK_MIN (less than RESERVE_MIN). */
static uint64_t reserve_slack(uint64_t hint)
{
	return hint / 64 > RESERVE_SLACK_MIN ? hint / 64 : RESERVE_SLACK_MIN;
}

static void reserve_ahead(kvs_writer *w, size_t len)
{
#ifdef FALLOC_FL_KEEP_SIZE
	/* every write continues the stream, or (the last) follows it */
	uint64_t start = STREAM_START + w->flushed;
	uint64_t end = start + len;
	uint64_t hint = w->opt.size_hint;
	if (w->no_reserve || end <= w->reserved || hint < RESERVE_MIN)
		return;
	uint64_t until = hint - reserve_slack(hint);
	if (end > until)
		return;
	uint64_t from = start > w->reserved ? start : w->reserved;
	uint64_t to =
	    until - start > RESERVE_STEP ? start + RESERVE_STEP : until;
	if (to < end)
		to = end;
	if (fallocate(w->fd, FALLOC_FL_KEEP_SIZE, (off_t)from,
	              (off_t)(to - from)) == 0)
		w->reserved = to;
	else
		w->no_reserve = true;
#else
	(void)w;
	(void)len;
#endif
}

/* pwritev(2) of all of iov[0 .. n) at `at` (empty entries too), after
 * short writes and interruptions; -1 with errno on failure. */
static int pwrite_vec(int fd, struct iovec *iov, int n, uint64_t at)
{
	size_t done = 0; /* bytes of iov written by the last call */
	for (;;) {
		for (; n > 0 && done >= iov->iov_len; iov++, n--)
			done -= iov->iov_len;
		if (n <= 0)
			return 0;
		iov->iov_base = (uint8_t *)iov->iov_base + done;
		iov->iov_len -= done;
		ssize_t k = pwritev(fd, iov, n, (off_t)at);
		done = k > 0 ? (size_t)k : 0;
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0) /* no progress: not to loop forever */
			errno = EIO;
		if (k <= 0)
			return -1;
		at += (uint64_t)k;
	}
}

/* Writes the stream's next len bytes where its flushed bytes end, with
 * pwrite, so the file needs no seek past its head at the open. */
static kvs_status write_all(kvs_writer *w, const void *data, size_t len,
                            kvs_error *err)
{
	struct iovec v = {(void *)data, len};
	reserve_ahead(w, len);
	w->body_crc = kvsi_crc32c(w->body_crc, data, len);
	if (pwrite_vec(w->fd, &v, 1, STREAM_START + w->flushed) < 0)
		return io_fail(w, err, "write");
	return KVS_OK;
}

kvs_status kvs_writer_open(kvs_writer **out, const char *path,
                           const kvs_writer_options *opt, kvs_error *err)
{
	*out = NULL;
	kvs_writer_options o = {0};
	if (opt)
		o = *opt;
	if (o.restart_interval == 0)
		o.restart_interval = KVS_DEFAULT_RESTART_INTERVAL;
	if (o.profile != KVS_PROFILE_BYTE && o.profile != KVS_PROFILE_BIT)
		return kvs_error_set(err, KVS_E_INVAL, "%s: unknown profile",
		                     path);
	if (o.framing != KVS_FRAMING_TYPED && o.framing != KVS_FRAMING_RAW)
		return kvs_error_set(err, KVS_E_INVAL, "%s: unknown framing",
		                     path);
	if (o.restart_interval > KVS_MAX_RESTART_INTERVAL)
		return kvs_error_set(err, KVS_E_RANGE,
		                     "%s: restart interval %u is above %u", path,
		                     o.restart_interval,
		                     KVS_MAX_RESTART_INTERVAL);
	if (o.profile == KVS_PROFILE_BIT) {
		if (!o.custom_codes)
			kvs_default_codes(o.codes);
		for (int i = 0; i < KVS_FIELD_COUNT; i++)
			if (kvs_code_spec_check(&o.codes[i]) != KVS_OK)
				return kvs_error_set(err, KVS_E_INVAL,
				                     "%s: invalid code for field %d",
				                     path, i);
	} else {
		memset(o.codes, 0, sizeof o.codes);
	}

	kvs_writer *w = calloc(1, sizeof *w);
	if (!w)
		return kvs_error_set(err, KVS_E_NOMEM, "%s: out of memory",
		                     path);
	w->opt = o;
	w->fd = -1;
	for (int i = 0; i < KVS_FIELD_COUNT; i++)
		kvsi_field_init(&w->fields[i], &o.codes[i]);
	w->default_codes =
	    o.profile == KVS_PROFILE_BIT && kvsi_fields_are_default(w->fields);
	kvs_bw_init(&w->bw);

	size_t plen = strlen(path);
	w->path = malloc(plen + 1);
	w->tmp_path = malloc(plen + 32);
	if (!w->path || !w->tmp_path) {
		kvs_writer_free(w);
		return kvs_error_set(err, KVS_E_NOMEM, "%s: out of memory",
		                     path);
	}
	memcpy(w->path, path, plen + 1);
	/* ".NAME.tmp-XXXXXX" next to the final name, so rename is atomic;
	 * ".NAME.pub-XXXXXX" with a publish hook (publish_linked) */
	const char *slash = strrchr(path, '/');
	size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
	snprintf(w->tmp_path, plen + 32, "%.*s.%s.%s-XXXXXX", (int)dir_len,
	         path, path + dir_len, o.publish ? "pub" : "tmp");
	if (path[dir_len] == '\0') {
		kvs_writer_free(w);
		return kvs_error_set(err, KVS_E_INVAL,
		                     "%s: the path names a directory", path);
	}
	kvs_status ck = check_replaceable(path, err);
	if (ck != KVS_OK) {
		kvs_writer_free(w);
		return ck;
	}
	size_t tmp_len = strlen(w->tmp_path);
	for (unsigned tries = 1;; tries++) {
		w->fd = kvsi_create_temp(w->tmp_path); /* 0644 less the umask */
		if (w->fd < 0) {
			kvs_status st = kvs_error_set(
			    err, KVS_E_IO,
			    "%s: cannot create a temporary file in its "
			    "directory: %s",
			    path, strerror(errno));
			w->tmp_path[0] = '\0';
			kvs_writer_free(w);
			return st;
		}
		/* Held until the file has its final name: a catalog's
		 * recovery removes only temporary files that nobody holds
		 * (catalog.c). */
		if (flock(w->fd, LOCK_EX) < 0) {
			kvs_status st = io_fail(w, err, "flock");
			kvs_writer_free(w);
			return st;
		}
		/* Between the file's creation and the lock, a recovery may
		 * have taken it for an orphan and removed it: then it has
		 * lost its name (which may be another file's by now), and
		 * a new file is made. */
		struct stat mine, named;
		if (fstat(w->fd, &mine) < 0) {
			kvs_status st = io_fail(w, err, "fstat");
			kvs_writer_free(w);
			return st;
		}
		int lost = lstat(w->tmp_path, &named) < 0 ? errno : 0;
		if (!lost && named.st_ino == mine.st_ino &&
		    named.st_dev == mine.st_dev)
			break;
		if (lost && lost != ENOENT) {
			errno = lost;
			kvs_status st = io_fail(w, err, "stat");
			kvs_writer_free(w);
			return st;
		}
		/* the name is not this file's: never remove it */
		if (tries == 100) {
			w->tmp_path[0] = '\0';
			kvs_writer_free(w);
			return kvs_error_set(err, KVS_E_IO,
			                     "%s: its temporary file was removed "
			                     "by another process 100 times",
			                     path);
		}
		close(w->fd);
		w->fd = -1;
		memcpy(w->tmp_path + tmp_len - 6, "XXXXXX", 6);
	}
	*out = w;
	return KVS_OK;
}

uint64_t kvs_writer_count(const kvs_writer *w)
{
	return w->records;
}

/* The current stream offset: bytes (byte profile) or bits (bit profile). */
static uint64_t stream_offset(const kvs_writer *w)
{
	if (w->opt.profile == KVS_PROFILE_BYTE)
		return w->flushed + w->buf_len;
	return w->flushed * 8 + kvs_bw_bit_length(&w->bw);
}

/* The stream's bytes not yet written, and where their count is kept: the
 * byte profile's buffer or the bit writer's. */
static uint8_t *pending_stream(kvs_writer *w, size_t **len)
{
	bool byte = w->opt.profile == KVS_PROFILE_BYTE;
	*len = byte ? &w->buf_len : &w->bw.len;
	return byte ? w->buf : w->bw.buf;
}

/*
 * Writes the stream's pending whole bytes up to the file's last page
 * boundary among them, and the rest (less than a page) moves to the
 * buffer's start (the stream's last bytes go out with write_last). Every
 * write but the first then starts and ends on a page: ext4 took 11-26% longer
 * over writes of 256 KiB that begin and end inside pages (files of 0.6 to
 * 9.4 MB; 37-39% with the space reserved ahead, as merges have it), which
 * the file's 256-byte head would otherwise make every one of them.
 */
static kvs_status flush_stream(kvs_writer *w, kvs_error *err)
{
	size_t *len;
	uint8_t *buf = pending_stream(w, &len);
	size_t n = *len;
	uint64_t end = STREAM_START + w->flushed + n;
	size_t over = (size_t)(end % WRITE_PAGE);
	if (over < n)
		n -= over;
	kvs_status st = write_all(w, buf, n, err);
	w->flushed += n;
	*len -= n;
	if (*len)
		memmove(buf, buf + n, *len);
	return st;
}

SEG_OUT_OF_LINE
kvs_status kvsi_writer_flush(kvs_writer *w, kvs_error *err)
{
	/* whole bytes only: pending bits stay in the writer */
	return flush_stream(w, err);
}

/*
 * The file's last bytes: the stream's pending bytes and the sections after
 * them, where the stream's written bytes end, and the head at offset 0.
 * When no stream byte was written before (a small file: the writer
 * flushes from FLUSH_BYTES on, the merge loops from 256 KiB), the three
 * go out in one pwritev: for a file of 150 KB on ext4 that took 28 us against
 * 32 for three writes. Otherwise the head follows in a write of its own.
 */
static kvs_status write_last(kvs_writer *w, const uint8_t *head,
                             const uint8_t *pend, size_t pend_len,
                             const uint8_t *tail, size_t tail_len,
                             kvs_error *err)
{
	bool with_head = w->flushed == 0;
	struct iovec iov[3], *v = iov;
	if (with_head)
		*v++ = (struct iovec){(void *)head, STREAM_START};
	*v++ = (struct iovec){(void *)pend, pend_len};
	*v++ = (struct iovec){(void *)tail, tail_len};
	reserve_ahead(w, pend_len + tail_len);
	uint64_t at = with_head ? 0 : STREAM_START + w->flushed;
	if (pwrite_vec(w->fd, iov, (int)(v - iov), at) < 0)
		return io_fail(w, err, "write");
	w->flushed += pend_len;
	struct iovec h = {(void *)head, STREAM_START};
	if (!with_head && pwrite_vec(w->fd, &h, 1, 0) < 0)
		return io_fail(w, err, "write");
	return KVS_OK;
}

static const char *const field_names[KVS_FIELD_COUNT] = {
    "LCP", "key length", "value length"};

SEG_OUT_OF_LINE
kvs_status kvsi_writer_put_field(kvs_writer *w, kvs_field f, uint64_t value,
                                 uint64_t prev, kvs_error *err)
{
	kvs_status st = seg_field_put(&w->bw, &w->fields[f], value, prev);
	if (st == KVS_E_RANGE) {
		char name[16];
		kvs_code_spec_format(&w->fields[f].spec, name);
		w->failed = true;
		return kvs_error_set(err, st,
		                     "%s: record %llu: %s %llu cannot be "
		                     "written in code %s",
		                     w->path, (unsigned long long)w->records,
		                     field_names[f], (unsigned long long)value,
		                     name);
	}
	if (st != KVS_OK) {
		w->failed = true;
		return kvs_error_set(err, st, "%s: %s", w->path,
		                     kvs_strerror(st));
	}
	return KVS_OK;
}


/* Why a record cannot be added: the checks of kvs_writer_add, in their
 * order, with their messages. KVS_OK when none fails. */
static kvs_status refuse(kvs_writer *w, const void *key, uint64_t key_bits,
                         kvs_kind kind, const void *value, size_t value_len,
                         kvs_error *err)
{
	char detail[160];
	if (w->failed || w->finished)
		return kvs_error_set(err, KVS_E_INVAL,
		                     "%s: the writer is %s", w->path,
		                     w->finished ? "finished" : "failed");
	unsigned long long idx = (unsigned long long)w->records;
	if (kind != KVS_KIND_VALUE && kind != KVS_KIND_TOMBSTONE) {
		snprintf(detail, sizeof detail, "record %llu: unknown kind",
		         idx);
		return kvsi_writer_fail(w, err, KVS_E_INVAL, "%s: %s", detail);
	}
	if (kind == KVS_KIND_TOMBSTONE && w->opt.framing == KVS_FRAMING_RAW) {
		snprintf(detail, sizeof detail,
		         "record %llu: raw framing cannot hold a tombstone",
		         idx);
		return kvsi_writer_fail(w, err, KVS_E_INVAL, "%s: %s", detail);
	}
	if (key_bits > KVS_MAX_KEY_BITS) {
		snprintf(detail, sizeof detail,
		         "record %llu: key of %llu bits is longer than %llu",
		         idx, (unsigned long long)key_bits,
		         (unsigned long long)KVS_MAX_KEY_BITS);
		return kvsi_writer_fail(w, err, KVS_E_RANGE, "%s: %s", detail);
	}
	if (w->opt.profile == KVS_PROFILE_BYTE && key_bits % 8) {
		snprintf(detail, sizeof detail,
		         "record %llu: the byte profile takes whole bytes, not "
		         "a %llu-bit key",
		         idx, (unsigned long long)key_bits);
		return kvsi_writer_fail(w, err, KVS_E_INVAL, "%s: %s", detail);
	}
	if (kind == KVS_KIND_TOMBSTONE)
		value_len = 0;
	if (value_len > KVS_MAX_VALUE_LEN) {
		snprintf(detail, sizeof detail,
		         "record %llu: value of %zu bytes is too long", idx,
		         value_len);
		return kvsi_writer_fail(w, err, KVS_E_RANGE, "%s: %s", detail);
	}
	if ((key_bits && !key) || (value_len && !value)) {
		snprintf(detail, sizeof detail,
		         "record %llu: a NULL %s of nonzero length", idx,
		         key_bits && !key ? "key" : "value");
		return kvsi_writer_fail(w, err, KVS_E_INVAL, "%s: %s", detail);
	}
	return KVS_OK;
}

SEG_OUT_OF_LINE
bool kvsi_writer_grow_restarts(kvs_writer *w, size_t n)
{
	if (n <= w->restarts_cap)
		return true;
	uint64_t *r = realloc(w->restarts, n * sizeof *r);
	if (r)
		w->restarts = r;
	uint64_t *fs = realloc(w->fence_skip, n * sizeof *fs);
	if (fs)
		w->fence_skip = fs;
	uint32_t *fw = realloc(w->fence_win, n * sizeof *fw);
	if (fw)
		w->fence_win = fw;
	if (!r || !fs || !fw)
		return false;
	w->restarts_cap = n;
	return true;
}

/* A new restart: its stream offset and its fence's parts. */
SEG_OUT_OF_LINE
kvs_status kvsi_writer_restart(kvs_writer *w, const uint8_t *pk,
                               uint64_t key_bits, kvs_error *err)
{
	if (w->restarts_len == w->restarts_cap &&
	    !kvsi_writer_grow_restarts(w, w->restarts_cap ? 2 * w->restarts_cap
	                                                  : 64))
		return kvsi_writer_fail(w, err, KVS_E_NOMEM, "%s: %s",
		                        "out of memory");
	w->restarts[w->restarts_len] = stream_offset(w);
	uint64_t at = key_bits;
	if (w->records) {
		int cmp;
		at = seg_key_lcp(w->first_key, w->first_bits, pk, key_bits,
		                 &cmp);
	}
	w->fence_skip[w->restarts_len] = at;
	w->fence_win[w->restarts_len] = seg_key_fence(pk, key_bits, at);
	w->restarts_len++;
	return KVS_OK;
}

SEG_OUT_OF_LINE
kvs_status kvsi_writer_order_error(kvs_writer *w, int cmp, kvs_error *err)
{
	char detail[160];
	unsigned long long idx = (unsigned long long)w->records;
	snprintf(detail, sizeof detail,
	         "record %llu: key is %s the previous key "
	         "(record %llu); keys must strictly increase",
	         idx, cmp == 0 ? "equal to" : "less than", idx - 1);
	return kvsi_writer_fail(w, err, KVS_E_ORDER, "%s: %s", detail);
}

/* Out of line and whole: GCC otherwise splits it, a head inlined into
 * kvs_writer_add and the rest as kvsi_writer_add.part.0, at about 11% more
 * instructions per record in a byte-profile build. */
SEG_OUT_OF_LINE kvs_status kvsi_writer_add(kvs_writer *w, const uint8_t *key,
                                           uint64_t key_bits, kvs_kind kind,
                                           const uint8_t *value, unsigned shift,
                                           size_t value_len, kvs_error *err)
{
	kvs_status st = refuse(w, key, key_bits, kind, value, value_len, err);
	if (st != KVS_OK)
		return st;
	if (kind == KVS_KIND_TOMBSTONE)
		value_len = 0;
	uint64_t nbytes = seg_key_bytes(key_bits);
	if (nbytes + 8 > w->prev_cap) { /* prev_key: the key and 8 spare */
		uint8_t *p = realloc(w->prev_key, nbytes + 8);
		if (!p)
			return kvsi_writer_fail(w, err, KVS_E_NOMEM, "%s: %s",
			                        "out of memory");
		w->prev_key = p;
		w->prev_cap = nbytes + 8;
	}
	bool first = w->records == 0;
	const seg_field *fields =
	    w->default_codes ? seg_default_fields : w->fields;
	if (w->opt.profile == KVS_PROFILE_BYTE)
		st = seg_writer_add_next(w, key, key_bits, kind, value, shift,
		                         value_len, KVS_PROFILE_BYTE, fields,
		                         first, false, err);
	else
		st = seg_writer_add_next(w, key, key_bits, kind, value, shift,
		                         value_len, KVS_PROFILE_BIT, fields,
		                         first, false, err);
	if (st == KVS_OK && first) {
		w->first_key = malloc(nbytes + 1);
		if (!w->first_key)
			return kvsi_writer_fail(w, err, KVS_E_NOMEM, "%s: %s",
			                        "out of memory");
		memcpy(w->first_key, w->prev_key, nbytes);
		w->first_bits = key_bits;
	}
	return st;
}

kvs_status kvs_writer_add(kvs_writer *w, const void *key, uint64_t key_bits,
                          kvs_kind kind, const void *value, size_t value_len,
                          kvs_error *err)
{
	return kvsi_writer_add(w, key, key_bits, kind, value, 0, value_len,
	                       err);
}

kvs_status kvs_writer_add_bytes(kvs_writer *w, const void *key,
                                size_t key_len, kvs_kind kind,
                                const void *value, size_t value_len,
                                kvs_error *err)
{
	if (key_len > KVS_MAX_KEY_BITS / 8) { /* key_len * 8 may overflow */
		char detail[160];
		snprintf(detail, sizeof detail,
		         "record %llu: key of %zu bytes is longer than %llu",
		         (unsigned long long)w->records, key_len,
		         (unsigned long long)(KVS_MAX_KEY_BITS / 8));
		return kvsi_writer_fail(w, err, KVS_E_RANGE, "%s: %s", detail);
	}
	return kvs_writer_add(w, key, (uint64_t)key_len * 8, kind, value,
	                      value_len, err);
}

/* The next multiple of 8 (section alignment). */
static uint64_t align8(uint64_t pos)
{
	return (pos + 7) & ~(uint64_t)7;
}

static void put_dirent(uint8_t *d, unsigned kind, bool required,
                       uint64_t offset, uint64_t length)
{
	memset(d, 0, SEG_DIRENT_BYTES);
	d[DIR_KIND] = (uint8_t)kind;
	d[DIR_FLAGS] = required ? SEC_FLAG_REQUIRED : 0;
	d[DIR_ALIGN] = SEG_SECTION_ALIGN;
	kvs_store_le64(d + DIR_OFFSET, offset);
	kvs_store_le64(d + DIR_LENGTH, length);
}

/*
 * The fence section (FORMAT.md §9): skip = the common prefix of the first
 * and last keys, then each restart key's 32 bits after it. Restart j's key
 * shares its first fence_skip[j] >= skip bits with the first key, so its
 * bits [skip, skip + 32) are the first key's up to fence_skip[j], then
 * fence_win[j]: the writer never rereads the keys it wrote.
 */
static void build_fences(const kvs_writer *w, uint8_t *out)
{
	uint64_t skip = 0;
	if (w->records) {
		int cmp;
		skip = seg_key_lcp(w->first_key, w->first_bits, w->prev_key,
		                   w->prev_bits, &cmp);
	}
	kvs_store_le64(out, skip);
	uint32_t head = w->records ? seg_key_fence(w->first_key, w->first_bits,
	                                           skip)
	                           : 0;
	for (size_t j = 0; j < w->restarts_len; j++) {
		uint64_t a = w->fence_skip[j] - skip; /* bits from the first key */
		uint32_t f = head;
		if (a < 32) {
			f &= a ? ~(uint32_t)0 << (32 - a) : 0;
			f |= w->fence_win[j] >> a;
		}
		kvs_store_le32(out + 8 + 4 * j, f);
	}
}

kvs_status kvs_writer_finish(kvs_writer *w, kvs_error *err)
{
	if (w->failed || w->finished)
		return kvs_error_set(err, KVS_E_INVAL,
		                     "%s: the writer is %s", w->path,
		                     w->finished ? "finished" : "failed");
	kvs_status st;
	uint64_t stream_bits;
	if (w->opt.profile == KVS_PROFILE_BIT) {
		stream_bits = stream_offset(w);
		st = kvs_bw_flush(&w->bw, NULL, NULL);
		if (st != KVS_OK)
			return kvsi_writer_fail(w, err, st, "%s: %s",
			                        kvs_strerror(st));
	} else {
		stream_bits = stream_offset(w) * 8;
	}
	/* the stream's pending bytes, written with the sections (write_last) */
	size_t *pend_lenp;
	const uint8_t *pend = pending_stream(w, &pend_lenp);
	size_t pend_len = *pend_lenp;

	/* the sections after the stream, each at a multiple of 8, in one
	 * buffer: the restart EF, the sort metadata (first and
	 * last key) and the restart fences */
	uint64_t dir_end = STREAM_START;
	uint64_t stream_len = w->flushed + pend_len;
	uint64_t ef_off = align8(dir_end + stream_len), max = 0;
	if (w->restarts_len)
		max = w->restarts[w->restarts_len - 1];
	size_t ef_len;
	st = kvsi_ef_size(w->restarts_len, max, &ef_len);
	if (st != KVS_OK)
		return kvsi_writer_fail(w, err, st, "%s: %s", kvs_strerror(st));
	uint64_t fb = w->records ? w->first_bits : 0;
	uint64_t lb = w->records ? w->prev_bits : 0;
	uint64_t meta_off = align8(ef_off + ef_len);
	uint64_t meta_len = 16 + seg_key_bytes(fb) + seg_key_bytes(lb);
	uint64_t fence_off = align8(meta_off + meta_len);
	uint64_t fence_len = 8 + 4 * (uint64_t)w->restarts_len;
	uint64_t tail_off = dir_end + stream_len;
	uint64_t tail_len = fence_off + fence_len - tail_off;
	uint8_t *tail =
	    tail_len <= SIZE_MAX ? calloc(1, (size_t)tail_len) : NULL;
	if (!tail)
		return kvsi_writer_fail(w, err, KVS_E_NOMEM, "%s: %s",
		                        "out of memory");
	st = kvsi_ef_build(w->restarts, w->restarts_len,
	                   tail + (ef_off - tail_off), ef_len);
	if (st != KVS_OK) {
		free(tail);
		return kvsi_writer_fail(w, err, st, "%s: %s", kvs_strerror(st));
	}
	uint8_t *meta = tail + (meta_off - tail_off);
	kvs_store_le64(meta, fb);
	if (fb)
		memcpy(meta + 8, w->first_key, seg_key_bytes(fb));
	kvs_store_le64(meta + 8 + seg_key_bytes(fb), lb);
	if (lb)
		memcpy(meta + 16 + seg_key_bytes(fb), w->prev_key,
		       seg_key_bytes(lb));
	build_fences(w, tail + (fence_off - tail_off));
	if (pend_len)
		w->body_crc = kvsi_crc32c(w->body_crc, pend, pend_len);
	w->body_crc = kvsi_crc32c(w->body_crc, tail, (size_t)tail_len);
	uint64_t file_len = fence_off + fence_len;

	/* the envelope and the directory */
	uint8_t head[STREAM_START];
	memset(head, 0, sizeof head);
	memcpy(head + HDR_MAGIC, SEG_MAGIC, 8);
	head[HDR_VERSION] = KVS_SEGMENT_VERSION;
	head[HDR_PROFILE] = (uint8_t)w->opt.profile;
	head[HDR_FRAMING] = (uint8_t)w->opt.framing;
	kvs_store_le64(head + HDR_RECORDS, w->records);
	kvs_store_le64(head + HDR_TOMBSTONES, w->tombstones);
	kvs_store_le64(head + HDR_KEY_BITS, w->key_bits);
	kvs_store_le64(head + HDR_VALUE_BYTES, w->value_bytes);
	kvs_store_le32(head + HDR_RESTART, w->opt.restart_interval);
	kvs_store_le32(head + HDR_SECTIONS, SECTION_COUNT);
	kvs_store_le64(head + HDR_SEQUENCE, w->opt.sequence);
	kvs_store_le64(head + HDR_FILE_LEN, file_len);
	kvs_store_le64(head + HDR_STREAM_BITS, stream_bits);
	kvs_store_le64(head + HDR_MAX_KEY_BITS, w->max_key_bits);
	for (int i = 0; w->opt.profile == KVS_PROFILE_BIT && i < 3; i++) {
		head[HDR_CODES + 4 * i] = w->opt.codes[i].kind;
		head[HDR_CODES + 4 * i + 1] = w->opt.codes[i].param;
		head[HDR_CODES + 4 * i + 2] = w->opt.codes[i].delta;
	}
	uint8_t *dir = head + SEG_HEADER_BYTES;
	put_dirent(dir, SEC_RECORDS, true, dir_end, stream_len);
	put_dirent(dir + SEG_DIRENT_BYTES, SEC_RESTARTS, true, ef_off, ef_len);
	put_dirent(dir + 2 * SEG_DIRENT_BYTES, SEC_SORTMETA, false, meta_off,
	           meta_len);
	put_dirent(dir + 3 * SEG_DIRENT_BYTES, SEC_FENCES, false, fence_off,
	           fence_len);
	kvs_store_le32(head + HDR_BODY_CRC, w->body_crc);
	uint32_t hcrc = kvsi_crc32c(0, head, HDR_HEADER_CRC);
	hcrc = kvsi_crc32c(hcrc, dir, SEG_DIRENT_BYTES * SECTION_COUNT);
	kvs_store_le32(head + HDR_HEADER_CRC, hcrc);

	st = write_last(w, head, pend, pend_len, tail, (size_t)tail_len, err);
	free(tail);
	if (st != KVS_OK)
		return st;
	/* The writes end at file_len. Space reserved past it (reserve_ahead)
	 * is released by cutting the file to that size; with none, the cut
	 * would change nothing and is skipped: on ext4 it still took 8 us,
	 * a tenth of a whole merge of two one-record segments. */
	if (w->reserved > file_len && ftruncate(w->fd, (off_t)file_len) < 0)
		return io_fail(w, err, "ftruncate");
	bool sync = !(w->opt.flags & KVS_WRITER_NO_SYNC);
	if (sync && fsync(w->fd) < 0)
		return io_fail(w, err, "fsync");
	/* rename while the file is still open and locked (see open) */
	st = w->opt.publish
	         ? publish_linked(w, sync, err)
	         : publish_file(w, w->opt.flags & KVS_WRITER_NO_REPLACE, err);
	if (st != KVS_OK)
		return st;
	w->tmp_path[0] = '\0'; /* nothing left to remove */
	if (close(w->fd) < 0) {
		w->fd = -1;
		return io_fail(w, err, "close");
	}
	w->fd = -1;
	w->finished = true;
	/* make the new name durable (with a hook, the temporary name's
	 * removal: the new name already is) */
	return sync ? fsync_parent(w->path, err) : KVS_OK;
}

void kvs_writer_free(kvs_writer *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp_path && w->tmp_path[0])
		unlink(w->tmp_path);
	free(w->path);
	free(w->tmp_path);
	free(w->buf);
	kvs_bw_free(&w->bw);
	free(w->prev_key);
	free(w->first_key);
	free(w->restarts);
	free(w->fence_skip);
	free(w->fence_win);
	free(w);
}
