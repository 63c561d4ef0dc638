/*
 * segment_internal.h — what the segment writer, reader and cursor share:
 * the on-disk constants of docs/FORMAT.md §5-§7, the opened segment, key
 * comparison and the bit-profile field codes.
 */
#ifndef KVSEG_SEGMENT_INTERNAL_H
#define KVSEG_SEGMENT_INTERNAL_H

#include <stdatomic.h>
#include <string.h>

#include "kvseg/bits.h"
#include "kvseg/codes.h"
#include "kvseg/ef.h"
#include "kvseg/segment.h"

/*
 * The core builds with -fvisibility=hidden, so its shared functions are no
 * longer interposable and GCC may inline or split them into callers in the
 * same file. SEG_OUT_OF_LINE keeps one where it was before: out of line,
 * whole. It marks the record writer's entry and the error, flush and
 * restart paths its callers reach rarely; inlined, they cost the writer
 * 4-11% more instructions per record and the cursor step 1%
 * (bench/README.md, "Symbol visibility").
 */
#define SEG_OUT_OF_LINE __attribute__((noinline))

/* ---- FORMAT.md §5: envelope and directory ------------------------------ */

#define SEG_MAGIC          "\x89KVSEG\r\n"
#define SEG_HEADER_BYTES   128
#define SEG_DIRENT_BYTES   32
#define SEG_MAX_SECTIONS   64
#define SEG_MAX_ALIGN_LOG2 12
#define SEG_SECTION_ALIGN  3 /* log2: the writer aligns sections to 8 */

/* header field offsets */
enum {
	HDR_MAGIC = 0,
	HDR_VERSION = 8,
	HDR_PROFILE = 10,
	HDR_FRAMING = 11,
	HDR_FLAGS = 12,
	HDR_RECORDS = 16,
	HDR_TOMBSTONES = 24,
	HDR_KEY_BITS = 32,
	HDR_VALUE_BYTES = 40,
	HDR_RESTART = 48,
	HDR_SECTIONS = 52,
	HDR_SEQUENCE = 56,
	HDR_FILE_LEN = 64,
	HDR_STREAM_BITS = 72,
	HDR_MAX_KEY_BITS = 80,
	HDR_CODES = 88, /* 3 x 4 bytes */
	HDR_RESERVED = 100,
	HDR_BODY_CRC = 120,
	HDR_HEADER_CRC = 124,
};

/* directory entry field offsets */
enum {
	DIR_KIND = 0,
	DIR_FLAGS = 2,
	DIR_ALIGN = 4,
	DIR_OFFSET = 8,
	DIR_LENGTH = 16,
	DIR_RESERVED = 24,
};

#define SEC_FLAG_REQUIRED 1u

enum {
	SEC_RECORDS = 1,
	SEC_RESTARTS = 2,
	SEC_SORTMETA = 3,
	SEC_FENCES = 4,
	/* reserved for later versions */
	SEC_DICTIONARY = 16,
	SEC_VALUE_BLOCKS = 17,
	SEC_FRACTIONAL = 18,
};

/* ---- bit-profile fields (FORMAT.md §6.2) ------------------------------- */

typedef struct seg_field {
	kvs_code_spec spec;
	kvs_golomb golomb; /* when spec.kind == KVS_CODE_GOLOMB */
} seg_field;

void kvsi_field_init(seg_field *f, const kvs_code_spec *spec);

static inline uint64_t seg_zigzag(uint64_t value, uint64_t prev)
{
	int64_t d = (int64_t)(value - prev);
	return ((uint64_t)d << 1) ^ (uint64_t)(d >> 63);
}

/* The inverse: prev plus the difference z encodes, modulo 2^64. */
static inline __attribute__((always_inline)) uint64_t
seg_unzigzag(uint64_t prev, uint64_t z)
{
	return prev + ((z >> 1) ^ (uint64_t)-(int64_t)(z & 1));
}

/* The EGk code (FORMAT.md §3.1) of v < 2^31, k < 31: the code read as an
 * integer (below 2^32), and its length in *n (1..63). */
static inline uint64_t seg_eg_code(uint64_t v, unsigned k, unsigned *n)
{
	uint64_t x = v + ((uint64_t)1 << k);
	*n = 2 * (64 - (unsigned)__builtin_clzll(x)) - k - 1;
	return x;
}

/*
 * The bytes of a value that starts `shift` (0..7) bits into src, as in a
 * bit-profile stream: dst[j] = src[j] << shift | src[j + 1] >> (8 - shift)
 * for j < len. Its bits span src[0 .. len] (src[0 .. len) when shift is
 * 0), and no other byte is read. Long values go in 32-byte blocks (AVX2
 * in the x86-64-v3 clone, SSE2 pairs in the default).
 */
/* fsyncs directory dir, so that names made or removed in it are durable;
 * a failure is KVS_E_IO, "WHAT: fsync of the directory: ...". */
kvs_status kvsi_fsync_dir(const char *dir, const char *what, kvs_error *err);

/*
 * Creates a new file for a temporary name: the last six characters of
 * tmpl, "XXXXXX", become letters and digits that no entry of the
 * directory has (O_EXCL, as mkostemp(3)), but the file's mode is 0644
 * less the process's umask, as open(2) gives a new file, where mkostemp's
 * is 0600 whatever the umask. Close-on-exec. The descriptor, or -1 with
 * errno set (EINVAL for a template without the six X's).
 */
int kvsi_create_temp(char *tmpl);

void kvsi_copy_shifted(uint8_t *dst, const uint8_t *src, unsigned shift,
                       size_t len);

/* Byte i of such a value (shift 1..7). */
static inline uint8_t shifted_byte(const uint8_t *src, unsigned shift,
                                   size_t i)
{
	return (uint8_t)(src[i] << shift | src[i + 1] >> (8 - shift));
}

/* Decodes one field; the result must be <= bound. Always inline, so the
 * caller's reader stays in registers. */
static inline __attribute__((always_inline)) kvs_status seg_field_get(kvs_bitreader *r, const seg_field *f,
                                       uint64_t prev, uint64_t bound,
                                       uint64_t *out)
{
	uint64_t v;
	kvs_status st;
	switch (f->spec.kind) {
	case KVS_CODE_EG:
		st = kvs_get_eg(r, f->spec.param, &v);
		break;
	case KVS_CODE_GOLOMB:
		st = kvs_get_golomb(r, &f->golomb, &v);
		break;
	default:
		st = kvs_get_fixed(r, f->spec.param, &v);
		break;
	}
	if (st != KVS_OK)
		return st;
	if (f->spec.delta) /* prev + unzigzag(v), modulo 2^64; see FORMAT */
		v = seg_unzigzag(prev, v);
	if (v > bound)
		return KVS_E_CORRUPT;
	*out = v;
	return KVS_OK;
}

/* The codes of kvs_default_codes() as constants: code instantiated with
 * them (the cursor's decoder, the writer's encoder) folds each field's
 * code into straight-line EG coding. */
static const seg_field seg_default_fields[KVS_FIELD_COUNT] = {
    {{KVS_CODE_EG, 2, 1}, {0, 0, 0, 0, 0, 0}},
    {{KVS_CODE_EG, 0, 1}, {0, 0, 0, 0, 0, 0}},
    {{KVS_CODE_EG, 0, 1}, {0, 0, 0, 0, 0, 0}},
};

/* True when f holds the codes of kvs_default_codes() (cursor.c). */
bool kvsi_fields_are_default(const seg_field *f);

kvs_status kvsi_field_put_slow(kvs_bitwriter *w, const seg_field *f,
                               uint64_t v);

/* Encodes one field. The common case, an EG code of a value below 2^31
 * (a code of at most 63 bits), is one inline bit-writer put. */
static inline kvs_status seg_field_put(kvs_bitwriter *w, const seg_field *f,
                                       uint64_t value, uint64_t prev)
{
	uint64_t v = f->spec.delta ? seg_zigzag(value, prev) : value;
	unsigned k = f->spec.param;
	if (f->spec.kind == KVS_CODE_EG && k < 31 && v < ((uint64_t)1 << 31)) {
		unsigned n;
		uint64_t x = seg_eg_code(v, k, &n);
		return kvs_bw_put(w, x, n);
	}
	return kvsi_field_put_slow(w, f, v);
}

/* ---- keys -------------------------------------------------------------- */

static inline uint64_t seg_key_bytes(uint64_t bits)
{
	return (bits + 7) / 8;
}

/* Length of the common prefix of two bit strings, in bits; *cmp receives
 * their order (<0, 0, >0). Inline: the writer, cursors and the merge call
 * it once or twice per record. */
static inline uint64_t seg_key_lcp(const uint8_t *a, uint64_t a_bits,
                                   const uint8_t *b, uint64_t b_bits,
                                   int *cmp)
{
	uint64_t min_bits = a_bits < b_bits ? a_bits : b_bits;
	uint64_t whole = min_bits / 8, i = 0;
	for (; i + 8 <= whole; i += 8) {
		/* big-endian words order as their bytes do */
		uint64_t x = kvs_load_be64(a + i), y = kvs_load_be64(b + i);
		if (x != y) {
			*cmp = x > y ? 1 : -1;
			return 8 * i + (unsigned)__builtin_clzll(x ^ y);
		}
	}
	for (; i < whole; i++) {
		unsigned x = a[i] ^ b[i];
		if (x) {
			unsigned z = (unsigned)__builtin_clz(x) - 24;
			*cmp = (a[i] >> (7 - z)) & 1 ? 1 : -1;
			return 8 * i + z;
		}
	}
	unsigned rest = (unsigned)(min_bits & 7);
	if (rest) {
		unsigned x = (a[i] ^ b[i]) & (0xFFu << (8 - rest)) & 0xFF;
		if (x) {
			unsigned z = (unsigned)__builtin_clz(x) - 24;
			*cmp = (a[i] >> (7 - z)) & 1 ? 1 : -1;
			return 8 * i + z;
		}
	}
	*cmp = a_bits < b_bits ? -1 : a_bits > b_bits;
	return min_bits;
}

/* seg_key_lcp of two keys known to share their first `from` bits (at
 * most both lengths): the compare starts at that byte. */
static inline uint64_t seg_key_lcp_from(const uint8_t *a, uint64_t a_bits,
                                        const uint8_t *b, uint64_t b_bits,
                                        uint64_t from, int *cmp)
{
	uint64_t skip = from / 8;
	return 8 * skip + seg_key_lcp(a + skip, a_bits - 8 * skip, b + skip,
	                              b_bits - 8 * skip, cmp);
}

static inline int seg_key_compare(const uint8_t *a, uint64_t a_bits,
                                  const uint8_t *b, uint64_t b_bits)
{
	int cmp;
	seg_key_lcp(a, a_bits, b, b_bits, &cmp);
	return cmp;
}

/* Writes n (1..57) bits of value (its low bits) at bit pos of buf, MSB
 * first, keeping the bits before pos; buf must have 8 bytes of room at
 * pos / 8. Bits after pos + n in that 64-bit window are cleared. */
static inline void seg_put_bits(uint8_t *buf, uint64_t pos, uint64_t value,
                                unsigned n)
{
	uint8_t *p = buf + pos / 8;
	unsigned sh = (unsigned)(pos & 7);
	uint64_t keep = sh ? ~(~(uint64_t)0 >> sh) : 0;
	uint64_t w = kvs_load_be64(p) & keep;
	w |= (value << (64 - n)) >> sh;
	kvs_store_be64(p, w);
}

/* The fence of a key (FORMAT.md §9): its bits [skip, skip + 32) as a
 * big-endian number, bits past the key's end read as zero. */
static inline uint32_t seg_key_fence(const uint8_t *key, uint64_t bits,
                                     uint64_t skip)
{
	if (bits <= skip)
		return 0;
	uint64_t nbytes = seg_key_bytes(bits), first = skip / 8, w = 0;
	for (uint64_t i = first; i < first + 5; i++)
		w = w << 8 | (i < nbytes ? key[i] : 0);
	w <<= 24 + (skip & 7);
	uint32_t f = (uint32_t)(w >> 32);
	uint64_t avail = bits - skip;
	if (avail < 32)
		f &= ~(uint32_t)0 << (32 - avail);
	return f;
}

/* ---- the opened segment ------------------------------------------------ */

struct kvs_segment {
	atomic_long refs;
	const uint8_t *data;
	size_t len;
	bool mapped;
	char *path; /* as opened, for messages; NULL in memory */

	kvs_profile profile;
	kvs_framing framing;
	uint32_t restart_interval;
	uint32_t section_count;
	uint64_t records, tombstones, key_bits, value_bytes, sequence;
	uint64_t stream_bits, max_key_bits;
	uint64_t dir_end; /* end of the directory: the body starts here */
	seg_field fields[KVS_FIELD_COUNT];
	bool default_codes; /* fields are the writer's defaults */

	const uint8_t *stream; /* the record stream section */
	uint64_t stream_len;   /* its bytes */
	kvsi_ef restarts;      /* stream offsets (bytes or bits) */
	uint64_t restart_count;
	uint64_t ef_len;
	const uint8_t *meta; /* sort metadata, NULL if absent */
	uint64_t meta_len;
	const uint8_t *first_key; /* from the sort metadata */
	uint64_t first_bits;
	const uint8_t *fences; /* restart fences (u32 LE each), NULL if absent */
	uint64_t fence_skip;
};

/* ---- writer ------------------------------------------------------------ */

/*
 * kvs_writer_add with the value given as value_len bytes starting shift
 * (0..7) bits into value: with a shift, the value of a bit-profile stream
 * in place, its bits in value[0 .. value_len] (no other byte is read).
 * The merge hands its inputs' values over so, without copying them first.
 */
kvs_status kvsi_writer_add(kvs_writer *w, const uint8_t *key, uint64_t key_bits,
                           kvs_kind kind, const uint8_t *value, unsigned shift,
                           size_t value_len, kvs_error *err);

/* ---- cursor ------------------------------------------------------------ */

struct kvs_cursor {
	kvs_segment *seg;
	uint64_t ordinal;    /* current record; seg->records at the end */
	uint32_t in_block;   /* ordinal % restart interval */
	uint64_t rec_start;  /* byte profile: offset of the current record */
	uint64_t next_off;   /* byte profile: offset after the current record */
	uint64_t prev_vh;    /* byte profile: the current value header */
	kvs_bitreader br;    /* bit profile: positioned after the record */
	uint64_t prev_lcp, prev_keylen, prev_vallen; /* bit field states */
	/* prev_lcp is also, in both profiles, how many bits of the current
	 * key the decoder kept from the previous one (0 at a restart) */

	uint8_t *key; /* max_key_bits / 8 + 16 bytes */
	uint64_t key_bits;
	kvs_kind kind;
	uint64_t value_len;
	const uint8_t *value; /* byte profile */
	uint8_t *vbuf;        /* bit profile: copied value */
	size_t vcap;

	uint8_t *scratch; /* a restart key during seek (bit profile) */
};


#endif
