/*
 * cursor_internal.h — decoding one record of a record stream (cursor.c),
 * inline so that the merge (merge.c) steps its inputs with the input's
 * mode folded in and no call per record.
 */
#ifndef KVSEG_CURSOR_INTERNAL_H
#define KVSEG_CURSOR_INTERNAL_H

#include <string.h>

#include "segment_internal.h"

/* Puts the cursor at the end; maps decoding errors to KVS_E_CORRUPT. */
kvs_status kvsi_cursor_invalidate(kvs_cursor *c, kvs_status st);

/* ---- decoding one record ----------------------------------------------- */

/*
 * The header of a byte-profile record (FORMAT.md §6.1). A restart: varint
 * key length. Any other record: varint h = 4 * lcp + 2 * key_changed +
 * value_changed, then, when key_changed, the zigzag varint of the key
 * length's difference from the previous key's. *vh_changed receives
 * value_changed (always true at a restart).
 */
static inline kvs_status byte_header(const uint8_t **p, const uint8_t *end,
                                     bool restart, uint64_t prev_len,
                                     uint64_t max_key, uint64_t *lcp,
                                     uint64_t *len, bool *vh_changed)
{
	uint64_t h, z;
	kvs_status st;
	if (restart) {
		if ((st = kvs_varint_get(p, end, len)) != KVS_OK)
			return st;
		*lcp = 0;
		*vh_changed = true;
		return *len > max_key ? KVS_E_CORRUPT : KVS_OK;
	}
	if ((st = kvs_varint_get(p, end, &h)) != KVS_OK)
		return st;
	*lcp = h >> 2;
	*vh_changed = h & 1;
	*len = prev_len;
	if (h & 2) {
		if ((st = kvs_varint_get(p, end, &z)) != KVS_OK)
			return st;
		if (z == 0) /* "changed" by nothing: not canonical */
			return KVS_E_CORRUPT;
		*len = seg_unzigzag(prev_len, z);
	}
	if (*lcp > prev_len || *len > max_key || *len < *lcp)
		return KVS_E_CORRUPT;
	return KVS_OK;
}

/* The value header v: typed framing 0 (tombstone) or length + 1; raw
 * framing the length. When unchanged it is the previous record's. */
static inline kvs_status byte_value_header(const uint8_t **p,
                                           const uint8_t *end, bool changed,
                                           uint64_t prev, bool restart,
                                           uint64_t *vh)
{
	if (!changed) {
		*vh = prev;
		return KVS_OK;
	}
	kvs_status st = kvs_varint_get(p, end, vh);
	if (st == KVS_OK && !restart && *vh == prev) /* not canonical */
		return KVS_E_CORRUPT;
	return st;
}

static inline __attribute__((always_inline)) kvs_status
decode_byte(kvs_cursor *c, bool restart, uint64_t off)
{
	const kvs_segment *s = c->seg;
	if (off > s->stream_len)
		return KVS_E_CORRUPT;
	const uint8_t *p = s->stream + off, *end = s->stream + s->stream_len;
	uint64_t lcp, len, vh, v;
	bool vh_changed;
	kvs_status st = byte_header(&p, end, restart, c->key_bits / 8,
	                            s->max_key_bits / 8, &lcp, &len,
	                            &vh_changed);
	if (st != KVS_OK)
		return st;
	uint64_t slen = len - lcp;
	if (slen > (uint64_t)(end - p))
		return KVS_E_CORRUPT;
	/*
	 * The suffix goes into the key in whole 8-byte words at multiples of
	 * 8 bytes (see read_key_bits: the merge loads such words right
	 * after). The word holding byte lcp keeps its bytes before lcp; its
	 * new bytes are loaded from up to 7 bytes before p, which lie in the
	 * file (the stream follows the header). The last word may read up to
	 * 7 bytes past the suffix: near the stream's end, a plain copy.
	 */
	uint64_t back = lcp & 7, a = lcp - back;
	if ((uint64_t)(end - p) >= slen + 8) {
		const uint8_t *q = p - back;
		uint64_t keep = ((uint64_t)1 << (8 * back)) - 1; /* back < 8 */
		uint64_t w = (kvs_load_le64(c->key + a) & keep) |
		             (kvs_load_le64(q) & ~keep);
		kvs_store_le64(c->key + a, w);
		for (uint64_t i = 8; i < slen + back; i += 8)
			kvs_store_le64(c->key + a + i, kvs_load_le64(q + i));
	} else {
		memcpy(c->key + lcp, p, slen);
	}
	p += slen;
	st = byte_value_header(&p, end, vh_changed, c->prev_vh, restart, &vh);
	if (st != KVS_OK)
		return st;
	v = vh;
	if (s->framing == KVS_FRAMING_TYPED) {
		c->kind = v == 0 ? KVS_KIND_TOMBSTONE : KVS_KIND_VALUE;
		v = v ? v - 1 : 0;
	} else {
		c->kind = KVS_KIND_VALUE;
	}
	if (v > (uint64_t)(end - p))
		return KVS_E_CORRUPT;
	c->prev_vh = vh;
	c->prev_lcp = 8 * lcp;
	c->key_bits = 8 * len;
	c->value = p;
	c->value_len = v;
	c->rec_start = off;
	c->next_off = (uint64_t)(p + v - s->stream);
	return KVS_OK;
}

/*
 * Reads n bits of the stream into key at bit pos (pos + n within bounds).
 * The key is written in whole 8-byte words at multiples of 8 bytes (bits
 * after pos + n in the last word cleared): the merge compares keys right
 * after they are decoded, with loads of such words, and a load that spans
 * parts of two stores cannot be forwarded from them and waits. The key
 * buffer has room up to the next multiple of 8 bytes.
 */
static inline __attribute__((always_inline)) kvs_status
read_key_bits(kvs_bitreader *r, uint8_t *key, uint64_t pos, uint64_t n)
{
	uint8_t *wp = key + pos / 64 * 8;
	unsigned used = (unsigned)(pos % 64); /* bits of the word so far */
	uint64_t word = used ? kvs_load_be64(wp) & ~(~(uint64_t)0 >> used) : 0;
	while (n > 0) {
		unsigned take = n > 56 ? 56 : (unsigned)n;
		unsigned room = 64 - used;
		uint64_t v;
		kvs_status st = kvs_br_read(r, take, &v);
		if (st != KVS_OK)
			return st;
		n -= take;
		if (take < room) {
			word |= v << (room - take);
			used += take;
		} else { /* the word is full: its rest starts the next */
			unsigned over = take - room; /* 0..55 */
			kvs_store_be64(wp, word | v >> over);
			wp += 8;
			word = (v << 1) << (63 - over);
			used = over;
		}
	}
	if (used)
		kvs_store_be64(wp, word);
	return KVS_OK;
}

/* Clears the padding bits after a key of bits bits. */
static inline void clear_padding(uint8_t *key, uint64_t bits)
{
	if (bits & 7)
		key[bits / 8] &= (uint8_t)(0xFF00u >> (bits & 7));
}


static inline __attribute__((always_inline)) kvs_status
decode_bit_with(kvs_cursor *c, bool restart, const seg_field *fields)
{
	const kvs_segment *s = c->seg;
	kvs_bitreader r = c->br;
	uint64_t lcp = 0, keylen, vlen = 0;
	kvs_status st;
	if (restart) {
		c->prev_lcp = c->prev_keylen = c->prev_vallen = 0;
	} else {
		st = seg_field_get(&r, &fields[KVS_FIELD_LCP], c->prev_lcp,
		                   c->key_bits, &lcp);
		if (st != KVS_OK)
			return st;
	}
	st = seg_field_get(&r, &fields[KVS_FIELD_KEYLEN], c->prev_keylen,
	                   s->max_key_bits, &keylen);
	if (st != KVS_OK)
		return st;
	if (keylen < lcp)
		return KVS_E_CORRUPT;
	if ((st = read_key_bits(&r, c->key, lcp, keylen - lcp)) != KVS_OK)
		return st;
	clear_padding(c->key, keylen);
	kvs_kind kind = KVS_KIND_VALUE;
	if (s->framing == KVS_FRAMING_TYPED) {
		uint64_t bit;
		if ((st = kvs_br_read(&r, 1, &bit)) != KVS_OK)
			return st;
		kind = bit ? KVS_KIND_VALUE : KVS_KIND_TOMBSTONE;
	}
	if (kind == KVS_KIND_VALUE) {
		/* the skip checks the length against the bits left */
		st = seg_field_get(&r, &fields[KVS_FIELD_VALLEN],
		                   c->prev_vallen, KVS_MAX_VALUE_LEN, &vlen);
		if (st != KVS_OK)
			return st;
		if ((st = kvs_br_skip(&r, vlen * 8)) != KVS_OK)
			return st;
		c->prev_vallen = vlen;
	}
	if (!restart)
		c->prev_lcp = lcp;
	c->prev_keylen = keylen;
	c->key_bits = keylen;
	c->kind = kind;
	c->value_len = vlen;
	kvs_br_advance_to(&c->br, &r);
	return KVS_OK;
}

/*
 * kvs_cursor_next with the segment's profile as a constant, and for the bit
 * profile its fields (seg_default_fields when s->default_codes, else
 * s->fields).
 */
static inline __attribute__((always_inline)) kvs_status
seg_cursor_next_with(kvs_cursor *c, kvs_profile profile,
                     const seg_field *fields)
{
	const kvs_segment *s = c->seg;
	if (c->ordinal >= s->records)
		return KVS_OK;
	if (__builtin_expect(c->ordinal + 1 == s->records, 0))
		return kvsi_cursor_invalidate(c, KVS_OK);
	uint32_t in_block = c->in_block + 1;
	if (in_block == s->restart_interval)
		in_block = 0;
	kvs_status st;
	if (profile == KVS_PROFILE_BYTE)
		st = decode_byte(c, in_block == 0, c->next_off);
	else /* the reader is already at the next record */
		st = decode_bit_with(c, in_block == 0, fields);
	if (__builtin_expect(st != KVS_OK, 0))
		return kvsi_cursor_invalidate(c, st);
	c->ordinal++;
	c->in_block = in_block;
	return KVS_OK;
}

#endif
