/*
 * kvseg/bits.h — the MSB-first bit writer and the bounded reservoir reader.
 *
 * Every bit stream of the bit profile is written and read through these two
 * structures (docs/FORMAT.md §2). Bit i of a stream is bit 7 - (i mod 8) of
 * byte i / 8: the first bit is the most significant bit of the first byte, so
 * a bit string compares the same way as the bytes that hold it.
 *
 * The reader keeps up to 63 unread bits left-aligned in a 64-bit reservoir
 * and refills it with one unaligned 8-byte load while at least 8 whole
 * payload bytes remain, byte by byte after that. It never loads a byte outside
 * the payload [start_bit, start_bit + bit_length), which lets it run over a
 * section of a mapped file that ends at a page boundary.
 *
 * A read that fails (past the end, overlong code, overflow) consumes nothing:
 * the position stays where it was and the reader remains usable.
 *
 * The structures are public so they can live on the stack and the fast paths
 * can be inlined; their fields are private to the library.
 */
#ifndef KVSEG_BITS_H
#define KVSEG_BITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvseg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- byte order helpers (explicit on-disk byte order) ------------------ */

static inline uint64_t kvs_load_be64(const void *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

static inline void kvs_store_be64(void *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	memcpy(p, &v, sizeof v);
}

static inline uint64_t kvs_load_le64(const void *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

static inline void kvs_store_le64(void *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	memcpy(p, &v, sizeof v);
}

static inline uint32_t kvs_load_le32(const void *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap32(v);
#endif
	return v;
}

static inline void kvs_store_le32(void *p, uint32_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap32(v);
#endif
	memcpy(p, &v, sizeof v);
}

/* ---- bit writer --------------------------------------------------------- */

typedef struct kvs_bitwriter {
	uint8_t *buf;      /* output bytes */
	size_t cap;        /* capacity of buf in bytes */
	size_t len;        /* whole bytes already stored in buf */
	uint64_t acc;      /* pending bits, left-aligned */
	unsigned acc_bits; /* number of pending bits, 0..63 */
	bool growable;     /* buf is malloc'd by the writer and may grow */
} kvs_bitwriter;

/* A writer that owns a growable heap buffer (free it with kvs_bw_free). */
void kvs_bw_init(kvs_bitwriter *w);
/* A writer into a caller-provided region of cap bytes; it never writes
 * outside it and fails with KVS_E_NOSPACE when the region is full. */
void kvs_bw_init_region(kvs_bitwriter *w, void *region, size_t cap);
/* Releases a growable writer's buffer (no-op for a region writer). */
void kvs_bw_free(kvs_bitwriter *w);

/* Total bits written so far. */
static inline uint64_t kvs_bw_bit_length(const kvs_bitwriter *w)
{
	return (uint64_t)w->len * 8 + w->acc_bits;
}

/* Grows the buffer or reports a full region; out of line. */
kvs_status kvs_bw_reserve_slow(kvs_bitwriter *w, size_t bytes);

/*
 * Appends the low nbits bits of value (nbits 0..64), most significant first.
 * Bits of value above nbits are ignored. On failure nothing is appended.
 */
static inline kvs_status kvs_bw_put(kvs_bitwriter *w, uint64_t value,
                                    unsigned nbits)
{
	if (nbits > 64)
		return KVS_E_RANGE;
	if (nbits == 0)
		return KVS_OK;
	if (nbits < 64)
		value &= ((uint64_t)1 << nbits) - 1;
	unsigned free_bits = 64 - w->acc_bits;
	if (nbits < free_bits) {
		w->acc |= value << (free_bits - nbits);
		w->acc_bits += nbits;
		return KVS_OK;
	}
	if (w->cap - w->len < 8) {
		kvs_status st = kvs_bw_reserve_slow(w, 8);
		if (st != KVS_OK)
			return st;
	}
	unsigned rest = nbits - free_bits; /* 0..63 */
	kvs_store_be64(w->buf + w->len, w->acc | (value >> rest));
	w->len += 8;
	w->acc = rest ? value << (64 - rest) : 0;
	w->acc_bits = rest;
	return KVS_OK;
}

/* Pads with zero bits to the next byte boundary. */
kvs_status kvs_bw_align(kvs_bitwriter *w);

/*
 * Aligns, then stores every pending byte: afterwards buf[0..len) holds the
 * whole stream. *data and *len (either may be NULL) receive the bytes.
 * The writer can keep writing afterwards, from the byte boundary.
 */
kvs_status kvs_bw_flush(kvs_bitwriter *w, const uint8_t **data, size_t *len);

/* ---- bounded reservoir reader ------------------------------------------ */

typedef struct kvs_bitreader {
	uint64_t reservoir;   /* next bits, left-aligned: bit 63 comes first */
	unsigned avail;       /* unread payload bits held in reservoir, 0..63 */
	const uint8_t *next;  /* next byte to load */
	uintptr_t fast_limit; /* 8-byte loads while next <= this (the last
	                         whole payload byte minus 7; 0 if none) */
	const uint8_t *end;   /* one past the last payload byte */
	const uint8_t *base;  /* as given to kvs_br_init */
	uint64_t start_bit;   /* as given to kvs_br_init */
	uint64_t length;      /* payload length in bits */
} kvs_bitreader;

/*
 * Bits left before the end of the payload. The bits counted in avail end
 * exactly at byte `next` (the refill keeps it so), so the rest is whatever
 * lies between there and the end of the payload.
 */
static inline uint64_t kvs_br_remaining(const kvs_bitreader *r)
{
	uint64_t loaded_to = (uint64_t)(r->next - r->base) * 8;
	uint64_t end_bit = r->start_bit + r->length;
	return r->avail + (end_bit > loaded_to ? end_bit - loaded_to : 0);
}

/* Bits consumed since the start of the payload. */
static inline uint64_t kvs_br_position(const kvs_bitreader *r)
{
	return r->length - kvs_br_remaining(r);
}

void kvs_br_refill_tail(kvs_bitreader *r);

/*
 * The out-of-line parts take the reader by pointer. The inline parts hand
 * them a copy instead of the caller's reader, so that the caller's reader
 * never has its address taken and can live in registers in a hot loop.
 */

/* Tops the reservoir up to at least 56 bits, or to the end of the payload. */
static inline void kvs_br_refill(kvs_bitreader *r)
{
	if ((uintptr_t)r->next <= r->fast_limit) {
		r->reservoir |= kvs_load_be64(r->next) >> r->avail;
		r->next += (63 - r->avail) >> 3;
		r->avail |= 56;
	} else if (r->next < r->end) {
		kvs_bitreader tmp = *r;
		kvs_br_refill_tail(&tmp);
		*r = tmp;
	}
}

/* Consumes n bits that are known to be in the reservoir (n <= avail). */
static inline void kvs_br_consume(kvs_bitreader *r, unsigned n)
{
	r->reservoir <<= n;
	r->avail -= n;
}

/*
 * A reader over bit_length bits starting at bit start_bit of base. The bytes
 * base[start_bit / 8 .. (start_bit + bit_length + 7) / 8) must be readable;
 * no other byte is ever loaded. start_bit + bit_length must not overflow.
 */
static inline void kvs_br_init(kvs_bitreader *r, const void *base,
                               uint64_t start_bit, uint64_t bit_length)
{
	const uint8_t *b = (const uint8_t *)base;
	uint64_t end_bit = start_bit + bit_length;
	r->reservoir = 0;
	r->avail = 0;
	r->next = b + start_bit / 8;
	/* Address arithmetic, not pointers: the limit may precede base. */
	uintptr_t whole_end = (uintptr_t)b + (uintptr_t)(end_bit / 8);
	r->fast_limit = whole_end - (uintptr_t)r->next >= 8 ? whole_end - 8 : 0;
	r->end = b + (end_bit + 7) / 8;
	r->base = b;
	r->start_bit = start_bit;
	r->length = bit_length;
	unsigned lead = (unsigned)(start_bit & 7);
	if (lead) { /* the first byte holds payload bits: it may be loaded */
		kvs_br_refill(r);
		kvs_br_consume(r, lead);
	}
}

kvs_status kvs_br_read_slow(kvs_bitreader *r, unsigned nbits, uint64_t *out);

/* Reads nbits (0..64) as an unsigned integer, first bit most significant. */
static inline kvs_status kvs_br_read(kvs_bitreader *r, unsigned nbits,
                                     uint64_t *out)
{
	if (nbits <= 56) {
		if (r->avail < nbits)
			kvs_br_refill(r);
		if (nbits <= r->avail) {
			*out = (r->reservoir >> 1) >> (63 - nbits);
			kvs_br_consume(r, nbits);
			return KVS_OK;
		}
	}
	kvs_bitreader tmp = *r;
	uint64_t v = 0;
	kvs_status st = kvs_br_read_slow(&tmp, nbits, &v);
	*r = tmp;
	*out = v;
	return st;
}

/*
 * Skips nbits without loading the bytes skipped over. The bits in the
 * reservoir end exactly at byte next, so past them the skip is a pointer
 * move by whole bytes and a refill, then the few bits left over.
 */
static inline kvs_status kvs_br_skip(kvs_bitreader *r, uint64_t nbits)
{
	if (nbits <= r->avail) {
		kvs_br_consume(r, (unsigned)nbits);
		return KVS_OK;
	}
	/* In the payload's body: the byte the skip lands in and the 7 after
	 * it are whole payload bytes (next + over / 8 <= fast_limit), so the
	 * skip is in bounds and a fast refill leaves the reservoir full. */
	uint64_t over = nbits - r->avail;
	if ((uintptr_t)r->next <= r->fast_limit &&
	    over / 8 <= r->fast_limit - (uintptr_t)r->next) {
		r->next += over / 8;
		r->reservoir = kvs_load_be64(r->next) << (over & 7);
		r->next += 7;
		r->avail = 56 - (unsigned)(over & 7);
		return KVS_OK;
	}
	if (nbits > kvs_br_remaining(r))
		return KVS_E_TRUNCATED;
	nbits -= r->avail;
	r->reservoir = 0;
	r->avail = 0;
	r->next += nbits / 8;
	unsigned rest = (unsigned)(nbits & 7);
	if (rest) { /* the byte holding them has payload: it may be loaded */
		kvs_br_refill(r);
		kvs_br_consume(r, rest);
	}
	return KVS_OK;
}

/*
 * Gives dst the read position of src, a copy of dst that has read on from
 * it. Reading changes only the position (reservoir, avail, next), so these
 * three fields are all that differ; a reader kept in a structure takes a
 * local copy's progress with three stores instead of a whole copy.
 */
static inline void kvs_br_advance_to(kvs_bitreader *dst,
                                     const kvs_bitreader *src)
{
	dst->reservoir = src->reservoir;
	dst->avail = src->avail;
	dst->next = src->next;
}

/* Moves to bit position pos of the payload (0..length). */
kvs_status kvs_br_seek(kvs_bitreader *r, uint64_t pos);

#ifdef __cplusplus
}
#endif

#endif
