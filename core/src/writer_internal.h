/*
 * writer_internal.h — the segment writer's state and its per-record path
 * (segment_writer.c), inline so that the merge (merge.c) adds its records
 * with the output mode folded in and no call per record. The rare parts
 * (errors, the first record, restarts, flushes, unusual codes) stay out of
 * line in segment_writer.c.
 */
#ifndef KVSEG_WRITER_INTERNAL_H
#define KVSEG_WRITER_INTERNAL_H

#include <stdlib.h>
#include <string.h>

#include "segment_internal.h"

#define FLUSH_BYTES ((size_t)1 << 20)
#define WRITE_PAGE    4096 /* writes end on multiples of it: kvsi_writer_flush */
#define SECTION_COUNT 4
/* The record stream's first byte in the file: after the header and the
 * directory (FORMAT.md §5). */
#define STREAM_START (SEG_HEADER_BYTES + SEG_DIRENT_BYTES * SECTION_COUNT)

struct kvs_writer {
	kvs_writer_options opt;
	seg_field fields[KVS_FIELD_COUNT];
	bool default_codes; /* bit profile with kvs_default_codes() */
	char *path, *tmp_path;
	int fd;
	bool failed, finished;

	/* the record stream: bytes written to the file so far and pending */
	uint64_t flushed;   /* bytes of the stream already in the file */
	uint32_t body_crc;  /* over what is already in the file */
	uint64_t reserved;  /* the file's space is reserved up to here */
	bool no_reserve;    /* the filesystem refused a reservation */
	uint8_t *buf;       /* byte profile: pending stream bytes */
	size_t buf_len, buf_cap;
	kvs_bitwriter bw;   /* bit profile */

	/* the previous record */
	uint8_t *prev_key; /* prev_cap bytes: the key and 8 to spare */
	size_t prev_cap;
	uint64_t prev_bits;
	uint64_t prev_lcp, prev_keylen, prev_vallen; /* field states */
	uint64_t prev_vh; /* byte profile: the last value header */
	uint32_t in_block; /* records % restart interval */
	uint8_t *first_key;
	uint64_t first_bits;

	uint64_t records, tombstones, key_bits, value_bytes, max_key_bits;
	uint64_t *restarts;
	size_t restarts_len, restarts_cap;
	/* per restart, for its fence (FORMAT.md §9): the common prefix of
	 * its key with the first key, and the key's 32 bits after it */
	uint64_t *fence_skip;
	uint32_t *fence_win;
};

/* Out of line in segment_writer.c. */
kvs_status kvsi_writer_fail(kvs_writer *w, kvs_error *err, kvs_status st,
                            const char *fmt, const char *detail);
kvs_status kvsi_writer_put_field(kvs_writer *w, kvs_field f, uint64_t value,
                                 uint64_t prev, kvs_error *err);
/* Writes the pending stream bytes up to the file's last page boundary among
 * them; the rest (under WRITE_PAGE bytes) stays at the buffer's start. */
kvs_status kvsi_writer_flush(kvs_writer *w, kvs_error *err);
/* Room for at least n restarts (their offsets and fences); false, with
 * the arrays as they were or grown, when memory runs out. */
bool kvsi_writer_grow_restarts(kvs_writer *w, size_t n);
kvs_status kvsi_writer_restart(kvs_writer *w, const uint8_t *pk,
                               uint64_t key_bits, kvs_error *err);
kvs_status kvsi_writer_order_error(kvs_writer *w, int cmp, kvs_error *err);

/* Grows a byte buffer to hold need bytes; KVS_E_NOMEM on failure. */
static inline kvs_status seg_grow(uint8_t **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return KVS_OK;
	size_t n = *cap ? *cap : 64;
	while (n < need)
		n *= 2;
	uint8_t *p = realloc(*buf, n);
	if (!p)
		return KVS_E_NOMEM;
	*buf = p;
	*cap = n;
	return KVS_OK;
}

/*
 * Copies in 8-byte words (bytes for the rest). A key usually comes
 * from a cursor that has just written it with 8-byte stores; a libc memcpy
 * reads it with one 16-byte load that the store buffer cannot forward, and
 * waits (bench_merge, perf: a quarter of a bit-profile merge).
 */
static inline void copy_words(uint8_t *dst, const uint8_t *src, uint64_t n)
{
	uint64_t i = 0;
	for (; i + 8 <= n; i += 8)
		kvs_store_le64(dst + i, kvs_load_le64(src + i));
	for (; i < n; i++)
		dst[i] = src[i];
}

/* Copies n bytes with at most two loads and two stores, possibly
 * overlapping, and no read outside src[0 .. n): the usual suffix (a byte
 * or two) and a 16-byte value cost no loop. */
static inline void copy_short(uint8_t *dst, const uint8_t *src, uint64_t n)
{
	if (n >= 8 && n <= 16) {
		uint64_t a = kvs_load_le64(src), b = kvs_load_le64(src + n - 8);
		kvs_store_le64(dst, a);
		kvs_store_le64(dst + n - 8, b);
	} else if (n >= 4 && n < 8) {
		uint32_t a = kvs_load_le32(src), b = kvs_load_le32(src + n - 4);
		kvs_store_le32(dst, a);
		kvs_store_le32(dst + n - 4, b);
	} else if (n > 0 && n < 4) {
		uint8_t a = src[0], b = src[n / 2], c = src[n - 1];
		dst[0] = a;
		dst[n / 2] = b;
		dst[n - 1] = c;
	} else if (n > 16) {
		copy_words(dst, src, n);
	}
}

/*
 * A value's bytes: len bytes starting shift (0..7) bits into src. With a
 * shift they come from a bit-profile stream (kvsi_copy_shifted).
 */
static inline void copy_value(uint8_t *dst, const uint8_t *src, unsigned shift,
                       size_t len)
{
	if (shift)
		kvsi_copy_shifted(dst, src, shift, len);
	else if (len <= 64) /* inline words beat a call to memcpy */
		copy_short(dst, src, len);
	else
		memcpy(dst, src, len);
}

static inline __attribute__((always_inline)) kvs_status
add_byte_record(kvs_writer *w, const uint8_t *key,
                                  uint64_t key_len, uint64_t lcp,
                                  bool restart, kvs_kind kind,
                                  const uint8_t *value, unsigned shift,
                                  size_t value_len)
{
	size_t need = w->buf_len + 3 * KVS_VARINT_MAX + key_len + value_len;
	if (need > w->buf_cap &&
	    seg_grow(&w->buf, &w->buf_cap, need) != KVS_OK)
		return KVS_E_NOMEM;
	uint8_t *p = w->buf + w->buf_len;
	uint64_t prev_len = w->prev_bits / 8; /* before this record */
	uint64_t vh = w->opt.framing == KVS_FRAMING_RAW ? value_len
	              : kind == KVS_KIND_TOMBSTONE     ? 0
	                                               : (uint64_t)value_len + 1;
	bool vh_changed = restart || vh != w->prev_vh;
	if (restart) { /* FORMAT.md §6.1 */
		p += kvs_varint_put(p, key_len);
	} else {
		bool key_changed = key_len != prev_len;
		uint64_t h = lcp << 2 | (uint64_t)key_changed << 1 | vh_changed;
		if (h < 0x80) /* the usual one-byte header */
			*p++ = (uint8_t)h;
		else
			p += kvs_varint_put(p, h);
		if (key_changed)
			p += kvs_varint_put(p, seg_zigzag(key_len, prev_len));
	}
	copy_short(p, key + lcp, key_len - lcp);
	p += key_len - lcp;
	if (vh_changed)
		p += kvs_varint_put(p, vh);
	w->prev_vh = vh;
	if (value_len) { /* tombstones have none */
		copy_value(p, value, shift, value_len);
		p += value_len;
	}
	w->buf_len = (size_t)(p - w->buf);
	return KVS_OK;
}

/*
 * The bit profile's writer for one record, kept in registers: whole bytes
 * go to p, the pending bits (fewer than 8 between puts) wait left-aligned
 * in acc, whose other bits are 0 (as kvs_bitwriter's). Every put stores the 8
 * bytes at p, whatever it completes, so the record's room is reserved first
 * (the bytes past the pending ones are overwritten by the next store or the
 * flush); no put checks for room. Between records the state is the
 * kvs_bitwriter's own.
 */
typedef struct fast_bw {
	uint8_t *p;
	uint64_t acc;
	unsigned bits; /* 0..7 */
} fast_bw;

/* Takes over the writer (room for 8 bytes at its end is reserved). */
static inline fast_bw fbw_load(const kvs_bitwriter *bw)
{
	fast_bw b = {bw->buf + bw->len, bw->acc, bw->acc_bits};
	/* a kvs_bw_put may leave up to 63 pending bits: store whole bytes */
	kvs_store_be64(b.p, b.acc);
	b.p += b.bits >> 3;
	b.acc <<= b.bits & ~7u;
	b.bits &= 7;
	return b;
}

static inline void fbw_store(kvs_bitwriter *bw, const fast_bw *b)
{
	bw->len = (size_t)(b->p - bw->buf);
	bw->acc = b->acc;
	bw->acc_bits = b->bits;
}

/* Appends n bits (1..56) of v, v < 2^n. Always inlined: in the merge's
 * large in-line loops GCC's growth limits left it (and seg_unzigzag) a
 * call, about 1.5 calls a record in a 4-way typed-bit merge. */
static inline __attribute__((always_inline)) void
fbw_put(fast_bw *b, uint64_t v, unsigned n)
{
	b->acc |= v << (64 - b->bits - n); /* bits + n <= 63 */
	b->bits += n;
	kvs_store_be64(b->p, b->acc);
	b->p += b->bits >> 3;
	b->acc <<= b->bits & ~7u;
	b->bits &= 7;
}

/* Appends 64 bits. */
static inline void fbw_put64(fast_bw *b, uint64_t v)
{
	kvs_store_be64(b->p, b->acc | v >> b->bits);
	b->p += 8;
	b->acc = (v << 1) << (63 - b->bits);
}

/* Appends n bits (1..64) of v, v < 2^n. */
static inline void fbw_put_any(fast_bw *b, uint64_t v, unsigned n)
{
	if (n > 56) {
		fbw_put(b, v >> 32, n - 32);
		fbw_put(b, v & 0xFFFFFFFFu, 32);
	} else {
		fbw_put(b, v, n);
	}
}

/* Appends bits [start, start + n) of src, which has 8 readable bytes past
 * its last key byte (prev_key is allocated so). */
static inline void fbw_key_bits(fast_bw *b, const uint8_t *src,
                                uint64_t start, uint64_t n)
{
	while (n > 56) {
		uint64_t v = kvs_load_be64(src + start / 8) << (start & 7);
		fbw_put(b, v >> 8, 56);
		start += 56;
		n -= 56;
	}
	if (n) { /* bits [start, start + n) lie in the 8 bytes at start / 8 */
		uint64_t v = kvs_load_be64(src + start / 8) << (start & 7);
		fbw_put(b, v >> (64 - n), (unsigned)n);
	}
}

/* Appends a value's len bytes (see kvsi_copy_shifted for src and shift). */
static inline void fbw_value(fast_bw *b, const uint8_t *src, unsigned shift,
                             size_t len)
{
	size_t i = 0;
	if (shift == 0) {
		for (; i + 8 <= len; i += 8)
			fbw_put64(b, kvs_load_be64(src + i));
	} else {
		for (; i + 8 <= len; i += 8) /* src[i .. i + 8] in the span */
			fbw_put64(b, kvs_load_be64(src + i) << shift |
			                 src[i + 8] >> (8 - shift));
	}
	if (i < len) {
		uint64_t v = 0;
		unsigned n = (unsigned)(len - i);
		for (; i < len; i++)
			v = v << 8 | (shift ? shifted_byte(src, shift, i) : src[i]);
		fbw_put(b, v, 8 * n);
	}
}

/* The usual EG code (of a value below 2^31) of a field: its n bits
 * (1..63) in *x; false for any other code. */
static inline __attribute__((always_inline)) bool
fbw_eg_code(const seg_field *f, uint64_t value, uint64_t prev, uint64_t *x,
            unsigned *n)
{
	uint64_t v = f->spec.delta ? seg_zigzag(value, prev) : value;
	unsigned k = f->spec.param;
	if (f->spec.kind != KVS_CODE_EG || k >= 31 || v >= ((uint64_t)1 << 31))
		return false;
	*x = seg_eg_code(v, k, n);
	return true;
}

/* One field of a record: the usual EG code (of a value below 2^31) in
 * registers, any other code through put_field. */
static inline __attribute__((always_inline)) kvs_status
fbw_field(kvs_writer *w, fast_bw *b, const seg_field *f, kvs_field which,
          uint64_t value, uint64_t prev, uint64_t room, kvs_error *err)
{
	uint64_t v = f->spec.delta ? seg_zigzag(value, prev) : value;
	unsigned k = f->spec.param;
	if (f->spec.kind == KVS_CODE_EG && k < 31 && v < ((uint64_t)1 << 31)) {
		unsigned n;
		uint64_t x = seg_eg_code(v, k, &n);
		fbw_put_any(b, x, n);
		return KVS_OK;
	}
	fbw_store(&w->bw, b);
	kvs_status st = kvsi_writer_put_field(w, which, value, prev, err);
	/* The code may have been long (a Golomb code of a large quotient)
	 * and used up the record's room: reserve it again. */
	if (st == KVS_OK && w->bw.cap - w->bw.len < room)
		st = kvs_bw_reserve_slow(&w->bw, (size_t)room);
	if (st == KVS_OK)
		*b = fbw_load(&w->bw); /* the buffer may have moved */
	return st;
}

static inline __attribute__((always_inline)) kvs_status
add_bit_record_with(kvs_writer *w, const uint8_t *key, uint64_t key_bits,
                    uint64_t lcp, bool restart, kvs_kind kind,
                    const uint8_t *value, unsigned shift, size_t value_len,
                    const seg_field *fields, kvs_error *err)
{
	/* room: three codes of at most 129 bits (a longer Golomb code goes
	 * through fbw_field, which reserves again), the suffix, the kind
	 * bit, the value, and the 8 bytes every put stores */
	uint64_t room = (key_bits - lcp) / 8 + value_len + 3 * 17 + 32;
	if (w->bw.cap - w->bw.len < room) {
		kvs_status st = kvs_bw_reserve_slow(&w->bw, (size_t)room);
		if (st != KVS_OK)
			return st;
	}
	fast_bw b = fbw_load(&w->bw);
	kvs_status st;
	if (restart)
		w->prev_lcp = w->prev_keylen = w->prev_vallen = 0;
	/* The usual LCP and key length codes go in one put: each put waits
	 * for the one before it (the pending bits), the codes do not. */
	uint64_t x1 = 0, x2;
	unsigned n1 = 0, n2;
	if ((restart ||
	     fbw_eg_code(&fields[KVS_FIELD_LCP], lcp, w->prev_lcp, &x1, &n1)) &&
	    fbw_eg_code(&fields[KVS_FIELD_KEYLEN], key_bits, w->prev_keylen, &x2,
	                &n2) &&
	    n1 + n2 <= 56) {
		fbw_put(&b, x1 << n2 | x2, n1 + n2);
		if (!restart)
			w->prev_lcp = lcp;
	} else {
		if (!restart) {
			st = fbw_field(w, &b, &fields[KVS_FIELD_LCP],
			               KVS_FIELD_LCP, lcp, w->prev_lcp, room, err);
			if (st != KVS_OK)
				return st;
			w->prev_lcp = lcp;
		}
		st = fbw_field(w, &b, &fields[KVS_FIELD_KEYLEN],
		               KVS_FIELD_KEYLEN, key_bits, w->prev_keylen, room,
		               err);
		if (st != KVS_OK)
			return st;
	}
	w->prev_keylen = key_bits;
	fbw_key_bits(&b, key, lcp, key_bits - lcp);
	bool typed = w->opt.framing == KVS_FRAMING_TYPED;
	uint64_t x3;
	unsigned n3;
	if (kind != KVS_KIND_VALUE) {
		fbw_put(&b, 0, 1); /* a tombstone: typed framing only */
	} else if (fbw_eg_code(&fields[KVS_FIELD_VALLEN], value_len,
	                       w->prev_vallen, &x3, &n3) &&
	           n3 < 56) { /* the kind bit and the code in one put */
		fbw_put(&b, (uint64_t)typed << n3 | x3, n3 + typed);
	} else {
		if (typed)
			fbw_put(&b, 1, 1);
		st = fbw_field(w, &b, &fields[KVS_FIELD_VALLEN],
		               KVS_FIELD_VALLEN, value_len, w->prev_vallen, room,
		               err);
		if (st != KVS_OK)
			return st;
	}
	if (kind == KVS_KIND_VALUE) {
		w->prev_vallen = value_len;
		fbw_value(&b, value, shift, value_len);
	}
	fbw_store(&w->bw, &b);
	return KVS_OK;
}

static inline kvs_status add_bit_record(kvs_writer *w, const uint8_t *key,
                                 uint64_t key_bits, uint64_t lcp, bool restart,
                                 kvs_kind kind, const uint8_t *value,
                                 unsigned shift, size_t value_len,
                                 kvs_error *err)
{
	if (w->default_codes)
		return add_bit_record_with(w, key, key_bits, lcp, restart, kind,
		                           value, shift, value_len,
		                           seg_default_fields, err);
	return add_bit_record_with(w, key, key_bits, lcp, restart, kind, value,
	                           shift, value_len, w->fields, err);
}

/* No known LCP with the previous key (seg_writer_add_known). */
#define SEG_LCP_UNKNOWN UINT64_MAX

/*
 * seg_writer_add_next with known_lcp, when not SEG_LCP_UNKNOWN, the
 * common prefix of key with the previous key, which the caller has
 * found key to follow in order (the merge knows it from its compares and
 * its inputs' LCP fields): the writer neither compares them again nor
 * checks their order.
 */
static inline __attribute__((always_inline)) kvs_status
seg_writer_add_known(kvs_writer *w, const uint8_t *key, uint64_t key_bits,
                     kvs_kind kind, const uint8_t *value, unsigned shift,
                     size_t value_len, kvs_profile profile,
                     const seg_field *fields, bool first, bool spare,
                     uint64_t known_lcp, kvs_error *err)
{
	uint64_t lcp = 0;
	if (!first && known_lcp != SEG_LCP_UNKNOWN) {
		lcp = known_lcp;
	} else if (!first) {
		int cmp;
		lcp = seg_key_lcp(key, key_bits, w->prev_key, w->prev_bits,
		                  &cmp);
		if (__builtin_expect(cmp <= 0, 0))
			return kvsi_writer_order_error(w, cmp, err);
	}
	uint64_t nbytes = seg_key_bytes(key_bits);
	uint8_t *pk = w->prev_key;
	/* the key, with its padding bits cleared, becomes prev_key */
	if (nbytes <= 16)
		copy_short(pk, key, nbytes);
	else
		copy_words(pk, key, nbytes);
	if (key_bits & 7)
		pk[nbytes - 1] &= (uint8_t)(0xFF00u >> (key_bits & 7));
	/*
	 * The suffix is read from key itself when its buffer has 8 bytes to
	 * spare (a cursor's): reading it back from prev_key, just written,
	 * would load across those stores, which the CPU cannot forward.
	 */
	const uint8_t *src = spare ? key : pk;
	bool restart = w->in_block == 0; /* records % K, without a division */
	kvs_status st;
	if (restart) {
		lcp = 0;
		if ((st = kvsi_writer_restart(w, pk, key_bits, err)) != KVS_OK)
			return st;
	}
	if (profile == KVS_PROFILE_BYTE) {
		st = add_byte_record(w, src, nbytes, lcp / 8, restart, kind,
		                     value, shift, value_len);
		if (st != KVS_OK)
			return kvsi_writer_fail(w, err, st, "%s: %s",
			                        kvs_strerror(st));
		if (w->buf_len >= FLUSH_BYTES &&
		    (st = kvsi_writer_flush(w, err)) != KVS_OK)
			return st;
	} else {
		st = add_bit_record_with(w, src, key_bits, lcp, restart, kind,
		                         value, shift, value_len, fields, err);
		if (st != KVS_OK)
			return w->failed
			           ? st
			           : kvsi_writer_fail(w, err, st, "%s: %s",
			                              kvs_strerror(st));
		if (w->bw.len >= FLUSH_BYTES &&
		    (st = kvsi_writer_flush(w, err)) != KVS_OK)
			return st;
	}
	w->prev_bits = key_bits;
	w->records++;
	if (++w->in_block == w->opt.restart_interval)
		w->in_block = 0;
	w->tombstones += kind == KVS_KIND_TOMBSTONE;
	w->key_bits += key_bits;
	w->value_bytes += value_len;
	if (key_bits > w->max_key_bits)
		w->max_key_bits = key_bits;
	return KVS_OK;
}

/*
 * Adds a record whose checks have passed (kvsi_writer_add makes them), with
 * prev_key's room for the key (first: the writer holds no record yet):
 * the order check, the key's front coding, a restart's bookkeeping, the
 * record's bytes and the totals. profile is the writer's own; fields is
 * seg_default_fields when the writer has them, else w->fields (bit
 * profile), so that a caller's constants fold.
 */
static inline __attribute__((always_inline)) kvs_status
seg_writer_add_next(kvs_writer *w, const uint8_t *key, uint64_t key_bits,
                    kvs_kind kind, const uint8_t *value, unsigned shift,
                    size_t value_len, kvs_profile profile,
                    const seg_field *fields, bool first, bool spare,
                    kvs_error *err)
{
	return seg_writer_add_known(w, key, key_bits, kind, value, shift,
	                            value_len, profile, fields, first, spare,
	                            SEG_LCP_UNKNOWN, err);
}

/*
 * kvsi_writer_add (segment_internal.h) in line, for a record read by a
 * cursor (the merge): its key buffer has 8 bytes to spare, its key
 * and value pointers are valid, its kind is one of the two and its key at
 * most KVS_MAX_KEY_BITS long, and the writer has not failed (the merge
 * stops at its first error), so only the checks that depend on the record
 * remain here; kvsi_writer_add makes all of them again for the others.
 * known_lcp: see seg_writer_add_known (the unusual record ignores it).
 */
static inline __attribute__((always_inline)) kvs_status
seg_writer_add_read(kvs_writer *w, const uint8_t *key, uint64_t key_bits,
                    kvs_kind kind, const uint8_t *value, unsigned shift,
                    size_t value_len, kvs_profile profile,
                    const seg_field *fields, uint64_t known_lcp,
                    kvs_error *err)
{
	bool tomb = kind == KVS_KIND_TOMBSTONE;
	size_t vlen = tomb ? 0 : value_len;
	bool usual = (w->records != 0) &
	             (seg_key_bytes(key_bits) + 8 <= w->prev_cap) &
	             !(tomb & (w->opt.framing == KVS_FRAMING_RAW)) &
	             !(profile == KVS_PROFILE_BYTE && (key_bits & 7)) &
	             (vlen <= KVS_MAX_VALUE_LEN);
	if (__builtin_expect(!usual, 0))
		return kvsi_writer_add(w, key, key_bits, kind, value, shift,
		                       value_len, err);
	return seg_writer_add_known(w, key, key_bits, kind, value, shift, vlen,
	                            profile, fields, false, true, known_lcp,
	                            err);
}

#endif
