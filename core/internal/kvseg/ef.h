/*
 * kvseg/ef.h — Elias-Fano sequences: a monotone sequence of uint64 in about
 * 2 + log2(max / count) bits per element, with O(1) access by index,
 * next_geq, and a forward cursor (docs/FORMAT.md §4).
 *
 * Each value x is split into its low l bits, stored packed, and its high
 * part h = x >> l, stored in unary in the "upper" bit vector: element i sets
 * bit h_i + i. Select samples record the position of every 256th one (for
 * access) and of every 256th zero (for next_geq), so a lookup scans a few
 * words from the nearest sample instead of the whole vector.
 *
 * The serialized form is little-endian and is read in place, for example
 * from a mapped section: kvsi_ef_open() checks, in constant time, that every
 * size and count is consistent with the length of the data, which is enough
 * for every later call to stay inside the data whatever its contents.
 * kvsi_ef_validate() also checks the bit vectors and the samples, in time
 * linear in the size; a validated sequence answers every query correctly.
 */
#ifndef KVSEG_EF_H
#define KVSEG_EF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvseg/bits.h"
#include "kvseg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_EF_VERSION      1
#define KVS_EF_HEADER_BYTES 24
#define KVS_EF_SAMPLE_SHIFT 8 /* a select sample every 256 ones / zeros */
#define KVS_EF_MAX_COUNT    ((uint64_t)1 << 48)

/* A read-only view of a serialized sequence. Fields are private. */
typedef struct kvsi_ef {
	uint64_t count;       /* number of elements */
	uint64_t max;         /* the largest (last) element; 0 when empty */
	unsigned low_bits;    /* l */
	bool accel;           /* use the popcnt/BMI2 paths */
	const uint8_t *low;   /* count * l bits, packed LSB first */
	const uint8_t *upper; /* upper_bits bits in 64-bit words */
	const uint8_t *one_samples;
	const uint8_t *zero_samples;
	uint64_t upper_bits; /* count + (max >> l) */
	uint64_t upper_words;
	uint64_t zero_count; /* max >> l */
	size_t size;         /* bytes of the serialized form */
} kvsi_ef;

/* The low-bit width for count elements whose largest is max. */
unsigned kvsi_ef_low_bits(uint64_t count, uint64_t max);

/* Bytes needed to serialize count elements whose largest is max;
 * KVS_E_RANGE if count exceeds KVS_EF_MAX_COUNT or the size overflows. */
kvs_status kvsi_ef_size(uint64_t count, uint64_t max, size_t *bytes);

/* A streaming builder into a caller-provided region. */
typedef struct kvsi_ef_builder {
	uint64_t count, max, pushed, last;
	unsigned low_bits;
	uint64_t zeros_written; /* high part of the last element pushed */
	uint8_t *low, *upper, *one_samples, *zero_samples;
} kvsi_ef_builder;

/* out must hold kvsi_ef_size(count, max) bytes; it is zeroed first. */
kvs_status kvsi_ef_builder_init(kvsi_ef_builder *b, uint64_t count,
                                uint64_t max, void *out, size_t out_len);
/* Appends the next value: KVS_E_ORDER if it is below the previous one or
 * above max, KVS_E_RANGE if count values were already pushed. */
kvs_status kvsi_ef_builder_push(kvsi_ef_builder *b, uint64_t value);
/* Appends values[0..n) as n pushes would, faster; at the first value that
 * push would refuse, stops with push's error, the values before it
 * appended. */
kvs_status kvsi_ef_builder_push_n(kvsi_ef_builder *b, const uint64_t *values,
                                  size_t n);
/* KVS_E_INVAL unless exactly count values were pushed, the last one max. */
kvs_status kvsi_ef_builder_finish(kvsi_ef_builder *b);

/* Builds from an array in one call (the largest value is values[count-1]). */
kvs_status kvsi_ef_build(const uint64_t *values, uint64_t count, void *out,
                         size_t out_len);

/* Opens len bytes of serialized form; constant time (see above). */
kvs_status kvsi_ef_open(kvsi_ef *ef, const void *data, size_t len);
/* Full check of bit vectors, padding and samples; linear time. */
kvs_status kvsi_ef_validate(const kvsi_ef *ef);
/* Selects the portable paths (true) or the best the CPU has (false). */
void kvsi_ef_set_portable(kvsi_ef *ef, bool portable);

/* The element at index i; KVS_E_RANGE if i >= count. */
kvs_status kvsi_ef_get(const kvsi_ef *ef, uint64_t i, uint64_t *value);

/* The index of the first element >= x (count if there is none); when it
 * exists and value is not NULL, *value receives the element. */
uint64_t kvsi_ef_next_geq(const kvsi_ef *ef, uint64_t x, uint64_t *value);

/* ---- forward cursor ---------------------------------------------------- */

typedef struct kvsi_ef_cursor {
	const kvsi_ef *ef;
	uint64_t index;      /* current element; count at the end */
	uint64_t value;      /* current element's value */
	uint64_t word_index; /* upper word holding the current element's one */
	uint64_t word; /* that word with bits up to the current one cleared */
} kvsi_ef_cursor;

/* Positions c at index i (0..count; count means at the end). */
kvs_status kvsi_ef_cursor_seek(kvsi_ef_cursor *c, const kvsi_ef *ef,
                               uint64_t i);

static inline bool kvsi_ef_cursor_valid(const kvsi_ef_cursor *c)
{
	return c->index < c->ef->count;
}

/* The low bits of element i (internal, shared with the cursor). */
static inline uint64_t kvsi_ef_low_(const kvsi_ef *ef, uint64_t i)
{
	unsigned l = ef->low_bits;
	if (l == 0)
		return 0;
	uint64_t bit = i * l;
	uint64_t mask = l == 64 ? ~(uint64_t)0 : ((uint64_t)1 << l) - 1;
	if (l <= 56) /* one unaligned load; the section has >= 8 bytes after */
		return (kvs_load_le64(ef->low + (bit >> 3)) >> (bit & 7)) &
		       mask;
	uint64_t w = bit >> 6;
	unsigned off = (unsigned)(bit & 63);
	uint64_t v = kvs_load_le64(ef->low + 8 * w) >> off;
	if (off + l > 64)
		v |= kvs_load_le64(ef->low + 8 * (w + 1)) << (64 - off);
	return v & mask;
}

/* Moves to the next element (or to the end). */
static inline void kvsi_ef_cursor_next(kvsi_ef_cursor *c)
{
	const kvsi_ef *ef = c->ef;
	if (++c->index >= ef->count) {
		c->index = ef->count;
		return;
	}
	uint64_t w = c->word;
	while (w == 0) {
		if (++c->word_index >= ef->upper_words) { /* corrupt data */
			c->index = ef->count;
			return;
		}
		w = kvs_load_le64(ef->upper + 8 * c->word_index);
	}
	uint64_t pos = c->word_index * 64 + (uint64_t)__builtin_ctzll(w);
	c->word = w & (w - 1);
	c->value =
	    ((pos - c->index) << ef->low_bits) | kvsi_ef_low_(ef, c->index);
}

#ifdef __cplusplus
}
#endif

#endif
