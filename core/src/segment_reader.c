/*
 * segment_reader.c — opening, checking and describing a segment
 * (docs/FORMAT.md §5-§8).
 *
 * open maps the file and checks, in time independent of the record count,
 * everything a cursor relies on to stay inside the file: the envelope, the
 * header CRC32C (which also covers the directory), every section bound and
 * the EF's own sizes. verify adds the body CRC32C and a full decode.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvseg/crc32c.h"
#include "segment_internal.h"

#define BAD(...) kvs_error_set(err, KVS_E_CORRUPT, __VA_ARGS__)

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Parses and checks the envelope and directory of s->data[0 .. s->len). */
static kvs_status check_envelope(kvs_segment *s, kvs_error *err)
{
	const uint8_t *d = s->data;
	size_t len = s->len;
	if (len < SEG_HEADER_BYTES)
		return kvs_error_set(err, KVS_E_CORRUPT,
		                     "file of %zu bytes is shorter than the "
		                     "%d-byte header",
		                     len, SEG_HEADER_BYTES);
	if (memcmp(d + HDR_MAGIC, SEG_MAGIC, 8) != 0)
		return BAD("bad magic: not a kvseg segment");
	unsigned version = d[HDR_VERSION] | (unsigned)d[HDR_VERSION + 1] << 8;
	if (version != KVS_SEGMENT_VERSION)
		return kvs_error_set(err, KVS_E_UNSUPPORTED,
		                     "format version %u is not supported "
		                     "(this build reads version %d)",
		                     version, KVS_SEGMENT_VERSION);
	uint32_t nsec = kvs_load_le32(d + HDR_SECTIONS);
	if (nsec == 0 || nsec > SEG_MAX_SECTIONS)
		return BAD("section count %" PRIu32 " is outside 1..%d", nsec,
		           SEG_MAX_SECTIONS);
	uint64_t dir_end = SEG_HEADER_BYTES + (uint64_t)SEG_DIRENT_BYTES * nsec;
	if (len < dir_end)
		return BAD("file of %zu bytes ends inside the directory "
		           "(%" PRIu64 " bytes)",
		           len, dir_end);
	uint32_t stored = kvs_load_le32(d + HDR_HEADER_CRC);
	uint32_t crc = kvsi_crc32c(0, d, HDR_HEADER_CRC);
	crc =
	    kvsi_crc32c(crc, d + SEG_HEADER_BYTES, dir_end - SEG_HEADER_BYTES);
	if (crc != stored)
		return BAD("header CRC32C mismatch (stored 0x%08" PRIx32
		           ", computed 0x%08" PRIx32 ")",
		           stored, crc);

	uint32_t flags = kvs_load_le32(d + HDR_FLAGS);
	if (flags)
		return kvs_error_set(err, KVS_E_UNSUPPORTED,
		                     "unknown header flags 0x%08" PRIx32, flags);
	if (d[HDR_PROFILE] > KVS_PROFILE_BIT)
		return BAD("unknown profile %u", d[HDR_PROFILE]);
	if (d[HDR_FRAMING] > KVS_FRAMING_RAW)
		return BAD("unknown framing %u", d[HDR_FRAMING]);
	if (!all_zero(d + HDR_RESERVED, HDR_BODY_CRC - HDR_RESERVED))
		return BAD("reserved header bytes are not zero");
	s->profile = d[HDR_PROFILE];
	s->framing = d[HDR_FRAMING];
	s->section_count = nsec;
	s->dir_end = dir_end;
	s->records = kvs_load_le64(d + HDR_RECORDS);
	s->tombstones = kvs_load_le64(d + HDR_TOMBSTONES);
	s->key_bits = kvs_load_le64(d + HDR_KEY_BITS);
	s->value_bytes = kvs_load_le64(d + HDR_VALUE_BYTES);
	s->restart_interval = kvs_load_le32(d + HDR_RESTART);
	s->sequence = kvs_load_le64(d + HDR_SEQUENCE);
	s->stream_bits = kvs_load_le64(d + HDR_STREAM_BITS);
	s->max_key_bits = kvs_load_le64(d + HDR_MAX_KEY_BITS);
	uint64_t file_len = kvs_load_le64(d + HDR_FILE_LEN);

	if (file_len != len)
		return BAD("header says %" PRIu64 " bytes but the file has %zu",
		           file_len, len);
	if (s->restart_interval == 0 ||
	    s->restart_interval > KVS_MAX_RESTART_INTERVAL)
		return BAD("restart interval %" PRIu32 " is outside 1..%d",
		           s->restart_interval, KVS_MAX_RESTART_INTERVAL);
	if (s->tombstones > s->records)
		return BAD("%" PRIu64 " tombstones in %" PRIu64 " records",
		           s->tombstones, s->records);
	if (s->framing == KVS_FRAMING_RAW && s->tombstones)
		return BAD("raw framing with %" PRIu64 " tombstones",
		           s->tombstones);
	if (s->max_key_bits > KVS_MAX_KEY_BITS)
		return BAD("maximum key length of %" PRIu64 " bits exceeds %" PRIu64,
		           s->max_key_bits, (uint64_t)KVS_MAX_KEY_BITS);
	if (s->profile == KVS_PROFILE_BYTE && (s->max_key_bits % 8 ||
	                                        s->stream_bits % 8))
		return BAD("byte profile with a length that is not whole bytes");
	if (s->records == 0 && (s->key_bits || s->value_bytes ||
	                        s->max_key_bits || s->stream_bits))
		return BAD("empty segment with non-zero totals");
	/* every record takes at least one bit (byte profile: two bytes) */
	if (s->records > s->stream_bits)
		return BAD("%" PRIu64 " records in a stream of %" PRIu64 " bits",
		           s->records, s->stream_bits);
	if (s->records && s->key_bits / s->records > s->max_key_bits)
		return BAD("key total exceeds records times the longest key");
	if (s->value_bytes > s->stream_bits / 8)
		return BAD("value total exceeds the stream");

	for (int i = 0; i < KVS_FIELD_COUNT; i++) {
		const uint8_t *c = d + HDR_CODES + 4 * i;
		kvs_code_spec spec = {c[0], c[1], c[2]};
		if (s->profile == KVS_PROFILE_BYTE) {
			if (!all_zero(c, 4))
				return BAD("byte profile with field codes");
			continue;
		}
		if (c[3] || kvs_code_spec_check(&spec) != KVS_OK)
			return BAD("invalid code for field %d", i);
		kvsi_field_init(&s->fields[i], &spec);
	}

	s->default_codes =
	    s->profile == KVS_PROFILE_BIT && kvsi_fields_are_default(s->fields);

	/* the directory */
	uint64_t prev_end = dir_end, fence_len = 0;
	bool seen[5] = {false, false, false, false, false};
	for (uint32_t i = 0; i < nsec; i++) {
		const uint8_t *e = d + SEG_HEADER_BYTES + SEG_DIRENT_BYTES * i;
		unsigned kind = e[DIR_KIND] | (unsigned)e[DIR_KIND + 1] << 8;
		unsigned sflags = e[DIR_FLAGS] | (unsigned)e[DIR_FLAGS + 1] << 8;
		unsigned align = e[DIR_ALIGN];
		uint64_t off = kvs_load_le64(e + DIR_OFFSET);
		uint64_t slen = kvs_load_le64(e + DIR_LENGTH);
		if (sflags & ~SEC_FLAG_REQUIRED)
			return BAD("section %" PRIu32 ": unknown flags 0x%x", i,
			           sflags);
		if (align > SEG_MAX_ALIGN_LOG2 || e[5] || e[6] || e[7] ||
		    !all_zero(e + DIR_RESERVED, 8))
			return BAD("section %" PRIu32
			           ": bad alignment or reserved bytes",
			           i);
		if (off % ((uint64_t)1 << align))
			return BAD("section %" PRIu32 ": offset %" PRIu64
			           " is not aligned to %u bytes",
			           i, off, 1u << align);
		if (off < prev_end || off - prev_end >= ((uint64_t)1 << align) ||
		    slen > len || off > len - slen)
			return BAD("section %" PRIu32 " (kind %u) at %" PRIu64
			           "+%" PRIu64 " is out of place or out of the "
			           "file",
			           i, kind, off, slen);
		prev_end = off + slen;
		const uint8_t *p = d + off;
		if (kind >= 1 && kind <= 4) {
			if (seen[kind])
				return BAD("section kind %u appears twice", kind);
			seen[kind] = true;
		}
		switch (kind) {
		case SEC_RECORDS:
			s->stream = p;
			s->stream_len = slen;
			break;
		case SEC_RESTARTS:
			if (kvsi_ef_open(&s->restarts, p, slen) != KVS_OK)
				return BAD("restart index (EF) is malformed");
			s->ef_len = slen;
			break;
		case SEC_SORTMETA:
			s->meta = p;
			s->meta_len = slen;
			break;
		case SEC_FENCES:
			s->fences = p;
			fence_len = slen;
			break;
		default:
			if (sflags & SEC_FLAG_REQUIRED)
				return kvs_error_set(
				    err, KVS_E_UNSUPPORTED,
				    "unknown required section kind %u", kind);
			break; /* unknown optional sections are skipped */
		}
	}
	if (prev_end != len)
		return BAD("%zu bytes follow the last section",
		           len - (size_t)prev_end);
	if (!seen[SEC_RECORDS] || !seen[SEC_RESTARTS])
		return BAD("a required section (%s) is missing",
		           seen[SEC_RECORDS] ? "restart index" : "records");
	if (s->stream_len != seg_key_bytes(s->stream_bits))
		return BAD("record stream of %" PRIu64 " bytes for %" PRIu64
		           " bits",
		           s->stream_len, s->stream_bits);

	/* the restart EF: one entry per restart, offsets inside the stream */
	uint64_t K = s->restart_interval;
	s->restart_count = s->records / K + (s->records % K != 0);
	if (s->restarts.count != s->restart_count)
		return BAD("restart index has %" PRIu64 " entries, expected %" PRIu64,
		           s->restarts.count, s->restart_count);
	uint64_t units = s->profile == KVS_PROFILE_BYTE ? s->stream_len
	                                                : s->stream_bits;
	if (s->records) {
		uint64_t first;
		kvsi_ef_get(&s->restarts, 0, &first);
		if (first != 0 || s->restarts.max >= units)
			return BAD("restart offsets are outside the stream");
	}

	/* sort metadata: two keys, each a u64 bit length and its bytes */
	if (s->meta) {
		uint64_t fb, lb, fbytes;
		if (s->meta_len < 16)
			return BAD("sort metadata is too short");
		fb = kvs_load_le64(s->meta);
		if (fb > s->max_key_bits)
			return BAD("sort metadata: first key is too long");
		fbytes = seg_key_bytes(fb);
		if (s->meta_len < 16 + fbytes)
			return BAD("sort metadata is too short");
		lb = kvs_load_le64(s->meta + 8 + fbytes);
		if (lb > s->max_key_bits ||
		    s->meta_len != 16 + fbytes + seg_key_bytes(lb))
			return BAD("sort metadata has the wrong length");
		s->first_key = s->meta + 8;
		s->first_bits = fb;
	}

	/* restart fences: u64 skip, then one u32 per restart */
	if (s->fences) {
		if (!s->meta)
			return BAD("restart fences without sort metadata");
		if (fence_len != 8 + 4 * s->restart_count)
			return BAD("restart fences have the wrong length");
		s->fence_skip = kvs_load_le64(s->fences);
		if (s->fence_skip > s->first_bits)
			return BAD("restart fences skip more than the first key");
		s->fences += 8;
	}
	return KVS_OK;
}

static kvs_status open_common(kvs_segment *s, kvs_segment **out,
                              kvs_error *err)
{
	kvs_status st = check_envelope(s, err);
	if (st != KVS_OK) {
		if (s->mapped)
			munmap((void *)s->data, s->len);
		free(s->path);
		free(s);
		return st;
	}
	atomic_init(&s->refs, 1);
	*out = s;
	return KVS_OK;
}

kvs_status kvs_segment_open_memory(kvs_segment **out, const void *data,
                                   size_t len, kvs_error *err)
{
	*out = NULL;
	kvs_segment *s = calloc(1, sizeof *s);
	if (!s)
		return kvs_error_set(err, KVS_E_NOMEM, "out of memory");
	s->data = data;
	s->len = len;
	return open_common(s, out, err);
}

kvs_status kvs_segment_open(kvs_segment **out, const char *path,
                            kvs_error *err)
{
	*out = NULL;
	/* O_NONBLOCK: a FIFO is refused below, not waited on (no effect on
	 * a regular file) */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return kvs_error_set(err, KVS_E_IO, "%s: %s", path,
		                     strerror(errno));
	kvs_status st = kvs_segment_open_fd(out, fd, path, err);
	close(fd);
	return st;
}

kvs_status kvs_segment_open_fd(kvs_segment **out, int fd, const char *path,
                               kvs_error *err)
{
	*out = NULL;
	struct stat stb;
	if (fstat(fd, &stb) < 0)
		return kvs_error_set(err, KVS_E_IO, "%s: %s", path,
		                     strerror(errno));
	if (!S_ISREG(stb.st_mode))
		return kvs_error_set(err, KVS_E_INVAL,
		                     "%s: not a regular file", path);
	if (stb.st_size < SEG_HEADER_BYTES)
		return kvs_error_set(err, KVS_E_CORRUPT,
		                     "%s: file of %lld bytes is shorter than "
		                     "the %d-byte header",
		                     path, (long long)stb.st_size,
		                     SEG_HEADER_BYTES);
	size_t len = (size_t)stb.st_size;
	void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return kvs_error_set(err, KVS_E_IO, "%s: mmap: %s", path,
		                     strerror(errno));
	kvs_segment *s = calloc(1, sizeof *s);
	char *name = strdup(path);
	if (!s || !name) {
		munmap(map, len);
		free(s);
		free(name);
		return kvs_error_set(err, KVS_E_NOMEM, "%s: out of memory",
		                     path);
	}
	s->data = map;
	s->len = len;
	s->mapped = true;
	s->path = name;
	kvs_status st = open_common(s, out, err);
	if (st != KVS_OK && err) { /* name the file in the message */
		char msg[sizeof err->message];
		memcpy(msg, err->message, sizeof msg);
		kvs_error_set(err, st, "%s: %s", path, msg);
	}
	return st;
}

const char *kvs_segment_path(const kvs_segment *s)
{
	return s->path;
}

void kvs_segment_ref(kvs_segment *s)
{
	atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

bool kvs_segment_offset(const kvs_segment *s, const void *p,
                        uint64_t *offset)
{
	uintptr_t a = (uintptr_t)p, base = (uintptr_t)s->data;
	if (a < base || a - base >= s->len)
		return false;
	*offset = a - base;
	return true;
}

void kvs_segment_unref(kvs_segment *s)
{
	if (!s)
		return;
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (s->mapped)
		munmap((void *)s->data, s->len);
	free(s->path);
	free(s);
}

void kvs_segment_info_get(const kvs_segment *s, kvs_segment_info *info)
{
	memset(info, 0, sizeof *info);
	info->version = KVS_SEGMENT_VERSION;
	info->profile = s->profile;
	info->framing = s->framing;
	info->restart_interval = s->restart_interval;
	info->sequence = s->sequence;
	info->records = s->records;
	info->tombstones = s->tombstones;
	info->restarts = s->restart_count;
	info->key_bits = s->key_bits;
	info->value_bytes = s->value_bytes;
	info->max_key_bits = s->max_key_bits;
	info->header_crc = kvs_load_le32(s->data + HDR_HEADER_CRC);
	for (int i = 0; i < KVS_FIELD_COUNT; i++)
		info->codes[i] = s->fields[i].spec;
	info->file_bytes = s->len;
	info->stream_bits = s->stream_bits;
	info->stream_bytes = s->stream_len;
	info->ef_bytes = s->ef_len;
	info->fence_bytes = s->fences ? 8 + 4 * s->restart_count : 0;
	info->other_bytes =
	    s->len - s->stream_len - s->ef_len - info->fence_bytes;
}

/* ---- verify ------------------------------------------------------------ */

kvs_status kvs_segment_check_crc(const kvs_segment *s, kvs_error *err)
{
	const uint8_t *d = s->data;
	uint32_t stored = kvs_load_le32(d + HDR_BODY_CRC);
	uint32_t crc = kvsi_crc32c(0, d + s->dir_end, s->len - s->dir_end);
	if (crc != stored)
		return BAD("body CRC32C mismatch (stored 0x%08" PRIx32
		           ", computed 0x%08" PRIx32 ")",
		           stored, crc);
	return KVS_OK;
}

kvs_status kvs_segment_verify(kvs_segment *s, kvs_error *err)
{
	const uint8_t *d = s->data;
	kvs_status crc_st = kvs_segment_check_crc(s, err);
	if (crc_st != KVS_OK)
		return crc_st;
	/* padding between sections is zero */
	uint64_t prev_end = s->dir_end;
	for (uint32_t i = 0; i < s->section_count; i++) {
		const uint8_t *e = d + SEG_HEADER_BYTES + SEG_DIRENT_BYTES * i;
		uint64_t off = kvs_load_le64(e + DIR_OFFSET);
		if (!all_zero(d + prev_end, off - prev_end))
			return BAD("padding before section %" PRIu32
			           " is not zero",
			           i);
		prev_end = off + kvs_load_le64(e + DIR_LENGTH);
	}
	if (s->stream_bits % 8 &&
	    (s->stream[s->stream_len - 1] & (0xFF >> (s->stream_bits % 8))))
		return BAD("padding bits after the record stream are not zero");
	if (kvsi_ef_validate(&s->restarts) != KVS_OK)
		return BAD("restart index (EF) is inconsistent");

	kvs_cursor *c;
	if (kvs_cursor_open(&c, s) != KVS_OK)
		return kvs_error_set(err, KVS_E_NOMEM, "out of memory");
	uint8_t *prev = malloc((size_t)seg_key_bytes(s->max_key_bits) + 1);
	if (!prev) {
		kvs_cursor_close(c);
		return kvs_error_set(err, KVS_E_NOMEM, "out of memory");
	}
	uint64_t prev_bits = 0, tombs = 0, kbits = 0, vbytes = 0, maxk = 0;
	uint64_t K = s->restart_interval, n = 0;
	kvsi_ef_cursor rc;
	kvs_status st = kvsi_ef_cursor_seek(&rc, &s->restarts, 0);
	if (st == KVS_OK)
		st = kvs_cursor_first(c);
	uint64_t start = 0, next_start = 0; /* of this and the next record */
	for (; st == KVS_OK && kvs_cursor_valid(c); n++) {
		uint64_t bits;
		const uint8_t *key = kvs_cursor_key(c, &bits);
		if (s->profile == KVS_PROFILE_BYTE) {
			start = c->rec_start;
		} else {
			start = next_start;
			next_start = kvs_br_position(&c->br);
		}
		if (n % K == 0 && s->fences &&
		    kvs_load_le32(s->fences + 4 * (n / K)) !=
		        seg_key_fence(key, bits, s->fence_skip)) {
			st = BAD("record %" PRIu64 ": restart fence does not "
			         "match the key",
			         n);
			goto out;
		}
		if (n % K == 0) {
			if (!kvsi_ef_cursor_valid(&rc) || rc.value != start) {
				st = BAD("record %" PRIu64 ": restart offset "
				         "%" PRIu64 " does not match the index",
				         n, start);
				goto out;
			}
			kvsi_ef_cursor_next(&rc);
		}
		if (n > 0) {
			int cmp;
			uint64_t lcp =
			    seg_key_lcp(prev, prev_bits, key, bits, &cmp);
			if (cmp >= 0) {
				st = BAD("record %" PRIu64 ": key is not greater "
				         "than the previous key",
				         n);
				goto out;
			}
			/* front coding is canonical: the stored LCP is the
			 * whole common prefix */
			if (n % K && s->profile == KVS_PROFILE_BIT &&
			    c->prev_lcp != lcp) {
				st = BAD("record %" PRIu64
				         ": LCP %" PRIu64 " is not the common "
				         "prefix %" PRIu64,
				         n, c->prev_lcp, lcp);
				goto out;
			}
			if (n % K && s->profile == KVS_PROFILE_BYTE) {
				const uint8_t *p = s->stream + c->rec_start;
				uint64_t stored_lcp;
				kvs_varint_get(&p, s->stream + s->stream_len,
				               &stored_lcp);
				stored_lcp >>= 2; /* FORMAT.md §6.1 */
				if (stored_lcp != lcp / 8) {
					st = BAD("record %" PRIu64
					         ": LCP %" PRIu64
					         " is not the common prefix "
					         "%" PRIu64,
					         n, stored_lcp, lcp / 8);
					goto out;
				}
			}
		}
		memcpy(prev, key, (size_t)seg_key_bytes(bits));
		prev_bits = bits;
		if (n == 0 && s->meta &&
		    (kvs_load_le64(s->meta) != bits ||
		     memcmp(s->meta + 8, key, (size_t)seg_key_bytes(bits)))) {
			st = BAD("sort metadata: first key differs from record 0");
			goto out;
		}
		tombs += kvs_cursor_kind(c) == KVS_KIND_TOMBSTONE;
		kbits += bits;
		vbytes += c->value_len;
		if (bits > maxk)
			maxk = bits;
		st = kvs_cursor_next(c);
	}
	if (st != KVS_OK) {
		st = BAD("record %" PRIu64 ": %s", n, kvs_strerror(st));
		goto out;
	}
	if (n != s->records || tombs != s->tombstones || kbits != s->key_bits ||
	    vbytes != s->value_bytes || maxk != s->max_key_bits) {
		st = BAD("header totals (records, tombstones, key bits, value "
		         "bytes, longest key) differ from the records");
		goto out;
	}
	uint64_t end = s->profile == KVS_PROFILE_BYTE ? c->next_off * 8
	                                              : kvs_br_position(&c->br);
	if (n && end != s->stream_bits) {
		st = BAD("%" PRIu64 " bits follow the last record",
		         s->stream_bits - end);
		goto out;
	}
	if (s->meta) {
		uint64_t fbytes = seg_key_bytes(kvs_load_le64(s->meta));
		const uint8_t *last = s->meta + 8 + fbytes;
		if (kvs_load_le64(last) != prev_bits ||
		    memcmp(last + 8, prev, (size_t)seg_key_bytes(prev_bits))) {
			st = BAD("sort metadata: last key differs from the "
			         "last record");
			goto out;
		}
		if (n == 0 && s->meta_len != 16) {
			st = BAD("sort metadata of an empty segment");
			goto out;
		}
		int cmp;
		if (s->fences && s->fence_skip != seg_key_lcp(s->first_key,
		                                              s->first_bits,
		                                              prev, prev_bits,
		                                              &cmp)) {
			st = BAD("restart fences: the skip is not the common "
			         "prefix of the first and last keys");
			goto out;
		}
	}
	st = KVS_OK;
out:
	free(prev);
	kvs_cursor_close(c);
	return st;
}
