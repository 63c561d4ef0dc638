/*
 * kvseg/segment.h — immutable sorted key-value segments: the streaming
 * writer, the reader (open, verify, info) and cursors (docs/FORMAT.md §5-§8).
 *
 * A segment is one file of records sorted by key. A record is a key and its
 * binding: a value (bytes, possibly empty) or a tombstone. Four modes:
 *
 *   profile byte: keys are byte strings; counts are LEB128 varints.
 *   profile bit:  keys are bit strings of any length; counts are prefix codes
 *                 (one code per field, recorded in the header).
 *   framing typed: every record carries its kind (value or tombstone).
 *   framing raw:   plain key/value records; no tombstones.
 *
 * Keys are passed and returned as bytes with a length in bits: the bits of a
 * key are the bytes' bits, most significant first, and a key whose length
 * is not a multiple of 8 has its last byte padded with zero bits. In the
 * byte profile every key length is a multiple of 8. The _bytes variants
 * take byte lengths. Keys order as bit strings: by the first differing
 * bit, and a key sorts before every key it is a proper prefix of (for byte
 * strings this is memcmp order with shorter-first on ties).
 *
 * Every K-th record (the restart interval) stores its whole key; an
 * Elias-Fano sequence holds the stream offsets of these restarts, so a
 * cursor reaches record i in O(1) + K steps and a key by a binary search
 * over restart keys and a scan of at most K records.
 *
 * Opening checks everything that can be checked in time independent of the
 * record count. Cursors over a segment that was opened but not verified
 * never read outside the file, allocate without bound or loop; on bad data
 * they fail with KVS_E_CORRUPT (or another error) and become invalid.
 * kvs_segment_verify() checks the body CRC32C and decodes every record.
 *
 * A segment handle is immutable and reference-counted; many threads may
 * read it at once, each through its own cursor. A cursor is one thread's.
 *
 * Messages in a kvs_error start with the file's path when the call was
 * given a path (kvs_writer_*, kvs_segment_open) and do not otherwise
 * (kvs_segment_open_memory, kvs_segment_verify). kvs_writer_free,
 * kvs_segment_unref and kvs_cursor_close accept NULL.
 */
#ifndef KVSEG_SEGMENT_H
#define KVSEG_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvseg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_SEGMENT_VERSION          1
#define KVS_DEFAULT_RESTART_INTERVAL 15
#define KVS_MAX_RESTART_INTERVAL     65536
/* Longest key, in bits (1 MiB), and longest value, in bytes (1 TiB). */
#define KVS_MAX_KEY_BITS   ((uint64_t)8 << 20)
#define KVS_MAX_VALUE_LEN  ((uint64_t)1 << 40)

typedef enum kvs_profile {
	KVS_PROFILE_BYTE = 0,
	KVS_PROFILE_BIT = 1,
} kvs_profile;

typedef enum kvs_framing {
	KVS_FRAMING_TYPED = 0,
	KVS_FRAMING_RAW = 1,
} kvs_framing;

typedef enum kvs_kind {
	KVS_KIND_VALUE = 0,
	KVS_KIND_TOMBSTONE = 1,
} kvs_kind;

/* ---- bit-profile count codes (FORMAT.md §6.2) -------------------------- */

/* The count fields of a bit-profile record. */
typedef enum kvs_field {
	KVS_FIELD_LCP = 0,    /* bits shared with the previous key */
	KVS_FIELD_KEYLEN = 1, /* key length in bits */
	KVS_FIELD_VALLEN = 2, /* value length in bytes */
	KVS_FIELD_COUNT = 3,
} kvs_field;

typedef enum kvs_code_kind {
	KVS_CODE_EG = 1,     /* exponential-Golomb of order param (0..63) */
	KVS_CODE_GOLOMB = 2, /* Golomb with modulus param (1..255) */
	KVS_CODE_FIXED = 3,  /* fixed width of param bits (1..64) */
} kvs_code_kind;

/*
 * How one field is written. With delta set, the field holds the zigzag
 * mapping of the difference from the same field of the previous record
 * (from 0 at a restart) instead of the value itself.
 */
typedef struct kvs_code_spec {
	uint8_t kind;  /* kvs_code_kind */
	uint8_t param; /* order, modulus or width */
	uint8_t delta; /* 0 or 1 */
} kvs_code_spec;

/* The codes a writer uses when given none: delta-EG2 for LCP, delta-EG0
 * for KEYLEN and VALLEN (docs/FORMAT.md §6.2). */
KVS_API void kvs_default_codes(kvs_code_spec codes[KVS_FIELD_COUNT]);
/* KVS_OK if spec is a valid code (kind and param in range). */
KVS_API kvs_status kvs_code_spec_check(const kvs_code_spec *spec);
/* "eg3", "g7", "fixed16", with a "d" prefix for delta ("deg0"); parse and
 * format the same spelling. */
KVS_API kvs_status kvs_code_spec_parse(const char *text, kvs_code_spec *spec);
KVS_API void kvs_code_spec_format(const kvs_code_spec *spec, char out[16]);

/* ---- writer ------------------------------------------------------------ */

/* No fsync of the file or its directory: faster, but after a crash or a
 * power loss the name may be missing or hold an empty or partial file.
 * For data that can be rebuilt. */
#define KVS_WRITER_NO_SYNC 1u
/* Publish only where nothing is at path: when a file appeared there while
 * the segment was written, finish fails with KVS_E_EXISTS and leaves that
 * file alone (without the flag, finish renames over it). Atomic where the
 * filesystem has RENAME_NOREPLACE or hard links; elsewhere (FAT, SMB) a
 * file created between finish's check and its rename is still replaced. */
#define KVS_WRITER_NO_REPLACE 2u

typedef struct kvs_writer_options {
	kvs_profile profile;
	kvs_framing framing;
	uint32_t restart_interval; /* 0 means KVS_DEFAULT_RESTART_INTERVAL */
	uint64_t sequence;         /* the segment's age; larger is newer */
	bool custom_codes;         /* use codes[] instead of the defaults */
	kvs_code_spec codes[KVS_FIELD_COUNT]; /* bit profile only */
	unsigned flags;                       /* KVS_WRITER_* */
	/*
	 * Optional: the file's expected size in bytes, 0 if unknown. Up to
	 * it less 1/64 of it (at least 64 KiB), the writer reserves the
	 * file's space ahead of its writes where the filesystem can
	 * (fallocate(2), FALLOC_FL_KEEP_SIZE; at most 16 MiB ahead), which
	 * makes writing a large file faster; finish releases what the file
	 * did not use. A hint the filesystem cannot reserve (no space, no
	 * support) is ignored. kvs_merge sets it, when 0, to the sum of its
	 * inputs' sizes, and lowers it as it goes where inputs overlap (the
	 * output is then smaller).
	 */
	uint64_t size_hint;
	/*
	 * Optional: a second publication of the finished segment, such as
	 * a catalog's (kvs_catalog_replace), made one crash-safe step with
	 * the first. The temporary file is then ".NAME.pub-XXXXXX", and
	 * finish, instead of renaming it, gives it its final name as a
	 * second name (link(2), which never replaces: a file already at
	 * path stays, and finish fails with KVS_E_EXISTS), fsyncs the
	 * directory and calls publish(publish_ctx, path, err) while the
	 * temporary name, locked, still names the file. KVS_OK keeps the
	 * segment and removes the temporary name; any other status removes
	 * path again and finish fails with that status (publish sets err).
	 * After a crash in between, kvs_catalog_open removes the temporary
	 * name, and path with it unless the catalog names path. Where the
	 * filesystem has no hard links (FAT, SMB), finish renames as with
	 * KVS_WRITER_NO_REPLACE before it calls publish, and a crash in
	 * between leaves path complete but unpublished.
	 */
	kvs_status (*publish)(void *ctx, const char *path, kvs_error *err);
	void *publish_ctx;
} kvs_writer_options;

typedef struct kvs_writer kvs_writer;

/*
 * Starts a segment that will be published at path. Records go to a
 * temporary file in the same directory; nothing appears at path until
 * kvs_writer_finish() succeeds. opt may be NULL (typed-byte, K = 15).
 */
KVS_API kvs_status kvs_writer_open(kvs_writer **out, const char *path,
                                   const kvs_writer_options *opt,
                                   kvs_error *err);

/*
 * Appends a record. Keys must arrive in strictly increasing order; a key
 * out of order fails with KVS_E_ORDER and a message naming the record's
 * index. value is ignored for tombstones, which raw framing rejects.
 * After a failure the writer accepts nothing more; free it.
 */
KVS_API kvs_status kvs_writer_add(kvs_writer *w, const void *key,
                                  uint64_t key_bits, kvs_kind kind,
                                  const void *value, size_t value_len,
                                  kvs_error *err);
KVS_API kvs_status kvs_writer_add_bytes(kvs_writer *w, const void *key,
                                        size_t key_len, kvs_kind kind,
                                        const void *value, size_t value_len,
                                        kvs_error *err);

/* Records appended so far. */
KVS_API uint64_t kvs_writer_count(const kvs_writer *w);

/*
 * Writes the index and metadata sections and the checksums, cuts the file
 * to its exact size, fsyncs it, renames it to its final name and fsyncs
 * the directory. On failure the temporary file is removed. With
 * KVS_WRITER_NO_REPLACE, a file at path fails it with KVS_E_EXISTS. With
 * a publish hook, see kvs_writer_options.
 */
KVS_API kvs_status kvs_writer_finish(kvs_writer *w, kvs_error *err);

/* Frees the writer; an unfinished segment's temporary file is removed. */
KVS_API void kvs_writer_free(kvs_writer *w);

/* ---- segment ----------------------------------------------------------- */

typedef struct kvs_segment kvs_segment;

typedef struct kvs_segment_info {
	unsigned version;
	kvs_profile profile;
	kvs_framing framing;
	uint32_t restart_interval;
	uint64_t sequence;
	uint64_t records;
	uint64_t tombstones;
	uint64_t restarts;
	uint64_t key_bits;    /* sum of key lengths in bits */
	uint64_t value_bytes; /* sum of value lengths */
	uint64_t max_key_bits;
	uint32_t header_crc; /* the header CRC32C: names this file's version */
	kvs_code_spec codes[KVS_FIELD_COUNT]; /* bit profile */
	/* Space components (seed 000): they sum to file_bytes. */
	uint64_t file_bytes;
	uint64_t stream_bits;  /* FC logical bits, without final padding */
	uint64_t stream_bytes; /* FC section bytes */
	uint64_t ef_bytes;     /* restart EF section bytes */
	uint64_t fence_bytes;  /* restart fence section bytes */
	uint64_t other_bytes;  /* header, directory, metadata, alignment */
} kvs_segment_info;

/* Maps path read-only and checks it (see above). */
KVS_API kvs_status kvs_segment_open(kvs_segment **out, const char *path,
                                    kvs_error *err);
/* The same over len bytes in memory, which must outlive the segment. */
KVS_API kvs_status kvs_segment_open_memory(kvs_segment **out, const void *data,
                                           size_t len, kvs_error *err);

/*
 * kvs_segment_open of a file the caller opened (fd stays the caller's: the
 * mapping outlives it). path is for messages and kvs_segment_path. The
 * caller chooses how the file is found, e.g. openat(2) with O_NOFOLLOW.
 */
KVS_API kvs_status kvs_segment_open_fd(kvs_segment **out, int fd,
                                       const char *path, kvs_error *err);

/* The path the segment was opened with, or NULL (kvs_segment_open_memory). */
KVS_API const char *kvs_segment_path(const kvs_segment *s);

KVS_API void kvs_segment_ref(kvs_segment *s);
/* Drops a reference; the last one unmaps the file. NULL is ignored. */
KVS_API void kvs_segment_unref(kvs_segment *s);

/*
 * Whether address p lies in s's bytes (the file's mapping, or the memory
 * given to kvs_segment_open_memory); if so, *offset is its offset in them.
 * For a SIGBUS handler's caller: a mapping faults where the file has been
 * cut short since it was opened.
 */
KVS_API bool kvs_segment_offset(const kvs_segment *s, const void *p,
                                uint64_t *offset);

KVS_API void kvs_segment_info_get(const kvs_segment *s, kvs_segment_info *info);

/*
 * Checks the body CRC32C only: every byte after the directory. Linear time
 * at the speed of CRC32C; kvs_merge calls it on each input, so that a
 * damaged input never becomes a merge output with a valid CRC.
 */
KVS_API kvs_status kvs_segment_check_crc(const kvs_segment *s, kvs_error *err);

/*
 * Checks the body CRC32C and decodes every record: key order, framing,
 * counts and totals against the header, the restart EF against the stream
 * and the sort metadata against the keys. The first problem is named in
 * err. Linear time, constant memory beyond one key.
 */
KVS_API kvs_status kvs_segment_verify(kvs_segment *s, kvs_error *err);

/* ---- cursor ------------------------------------------------------------ */

typedef struct kvs_cursor kvs_cursor;

/* A cursor holds a reference on s; it starts positioned at the end. */
KVS_API kvs_status kvs_cursor_open(kvs_cursor **out, kvs_segment *s);
KVS_API void kvs_cursor_close(kvs_cursor *c);

/* The first record (or the end, for an empty segment). */
KVS_API kvs_status kvs_cursor_first(kvs_cursor *c);
/* Record number i (0-based); i >= records positions at the end. */
KVS_API kvs_status kvs_cursor_seek_ordinal(kvs_cursor *c, uint64_t i);
/* The first record whose key is >= key (lower bound). */
KVS_API kvs_status kvs_cursor_seek(kvs_cursor *c, const void *key,
                                   uint64_t key_bits);
KVS_API kvs_status kvs_cursor_seek_bytes(kvs_cursor *c, const void *key,
                                         size_t key_len);
/* Positions at key and sets *found when a record has exactly that key
 * (whatever its kind); otherwise at the lower bound. */
KVS_API kvs_status kvs_cursor_lookup(kvs_cursor *c, const void *key,
                                     uint64_t key_bits, bool *found);
KVS_API kvs_status kvs_cursor_lookup_bytes(kvs_cursor *c, const void *key,
                                           size_t key_len, bool *found);
/* The next record; at the last record it moves to the end. */
KVS_API kvs_status kvs_cursor_next(kvs_cursor *c);

/* True while the cursor is on a record. */
KVS_API bool kvs_cursor_valid(const kvs_cursor *c);
/* The current record's number (records at the end). */
KVS_API uint64_t kvs_cursor_ordinal(const kvs_cursor *c);
/* The current key: its bytes (valid until the cursor moves) and length. */
KVS_API const uint8_t *kvs_cursor_key(const kvs_cursor *c, uint64_t *key_bits);
/* The current key's kind. */
KVS_API kvs_kind kvs_cursor_kind(const kvs_cursor *c);
/*
 * The current value (empty for a tombstone). Byte profile: a pointer into
 * the mapped file, no copy. Bit profile: the value is copied into the
 * cursor's buffer, valid until the cursor moves.
 */
KVS_API kvs_status kvs_cursor_value(kvs_cursor *c, const uint8_t **value,
                                    size_t *value_len);
/* The current value's length without reading it. */
KVS_API size_t kvs_cursor_value_len(const kvs_cursor *c);

/* ---- key helpers ------------------------------------------------------- */

/* Compares bit strings a (a_bits long) and b: <0, 0 or >0. */
KVS_API int kvs_key_compare(const void *a, uint64_t a_bits, const void *b,
                            uint64_t b_bits);

#ifdef __cplusplus
}
#endif

#endif
