/*
 * bits.c — the out-of-line parts of the bit writer and reservoir reader
 * (kvseg/bits.h): buffer growth, alignment, and the reader's tail refill,
 * long reads, skips and seeks. The fast paths are inline in the header.
 *
 * The reader's bound (docs/FORMAT.md §2): 8-byte loads happen only while
 * at least 8 whole payload bytes remain at `next`; after that, bytes are
 * loaded one at a time up to `end`. Bits of the last, partial byte beyond
 * the payload may sit in the reservoir but are never counted in `avail`.
 */
#include <stdlib.h>

#include "kvseg/bits.h"

void kvs_bw_init(kvs_bitwriter *w)
{
	memset(w, 0, sizeof *w);
	w->growable = true;
}

void kvs_bw_init_region(kvs_bitwriter *w, void *region, size_t cap)
{
	memset(w, 0, sizeof *w);
	w->buf = region;
	w->cap = region ? cap : 0;
}

void kvs_bw_free(kvs_bitwriter *w)
{
	if (w->growable)
		free(w->buf);
	memset(w, 0, sizeof *w);
	w->growable = true;
}

kvs_status kvs_bw_reserve_slow(kvs_bitwriter *w, size_t bytes)
{
	if (w->cap - w->len >= bytes)
		return KVS_OK;
	if (!w->growable)
		return KVS_E_NOSPACE;
	if (bytes > SIZE_MAX - w->len)
		return KVS_E_NOMEM;
	size_t need = w->len + bytes;
	size_t cap = w->cap ? w->cap : 64;
	while (cap < need) {
		if (cap > SIZE_MAX / 2) {
			cap = need;
			break;
		}
		cap *= 2;
	}
	uint8_t *buf = realloc(w->buf, cap);
	if (!buf)
		return KVS_E_NOMEM;
	w->buf = buf;
	w->cap = cap;
	return KVS_OK;
}

/* Room for the pending bits once padded to a byte boundary; checked
 * before anything changes, so a failed align or flush appends nothing. */
static kvs_status reserve_pending(kvs_bitwriter *w)
{
	return kvs_bw_reserve_slow(w, (w->acc_bits + 7) / 8);
}

kvs_status kvs_bw_align(kvs_bitwriter *w)
{
	unsigned pad = (8 - (w->acc_bits & 7)) & 7;
	if (pad == 0)
		return KVS_OK;
	kvs_status st = reserve_pending(w);
	return st == KVS_OK ? kvs_bw_put(w, 0, pad) : st;
}

kvs_status kvs_bw_flush(kvs_bitwriter *w, const uint8_t **data, size_t *len)
{
	kvs_status st = reserve_pending(w);
	if (st != KVS_OK)
		return st;
	size_t pending = (w->acc_bits + 7) / 8;
	for (size_t i = 0; i < pending; i++)
		w->buf[w->len + i] = (uint8_t)(w->acc >> (56 - 8 * i));
	w->len += pending;
	w->acc = 0;
	w->acc_bits = 0;
	if (data)
		*data = w->buf;
	if (len)
		*len = w->len;
	return KVS_OK;
}

void kvs_br_refill_tail(kvs_bitreader *r)
{
	while (r->avail <= 55 && r->next < r->end) {
		r->reservoir |= (uint64_t)*r->next << (56 - r->avail);
		r->next++;
		r->avail += 8;
		if (r->next == r->end) {
			/* The last byte may end in padding after the payload:
			 * those bits stay in the reservoir but are not counted.
			 * Fast refills never reach the last byte, so this is
			 * the only place where it is loaded. */
			uint64_t end_bit = r->start_bit + r->length;
			r->avail -=
			    (unsigned)((uint64_t)(r->end - r->base) * 8 -
			               end_bit);
		}
	}
}

kvs_status kvs_br_read_slow(kvs_bitreader *r, unsigned nbits, uint64_t *out)
{
	if (nbits > 64)
		return KVS_E_RANGE;
	if (nbits > kvs_br_remaining(r))
		return KVS_E_TRUNCATED;
	uint64_t v = 0;
	unsigned left = nbits;
	while (left) {
		kvs_br_refill(r);
		/* remaining >= left, so the refill made avail >= 1. */
		unsigned take = left < r->avail ? left : r->avail;
		uint64_t part = r->reservoir >> (64 - take);
		kvs_br_consume(r, take);
		v = (v << take) | part; /* take <= 63 */
		left -= take;
	}
	*out = v;
	return KVS_OK;
}

kvs_status kvs_br_seek(kvs_bitreader *r, uint64_t pos)
{
	if (pos > r->length)
		return KVS_E_TRUNCATED;
	uint64_t start = r->start_bit, length = r->length;
	kvs_br_init(r, r->base, start + pos, length - pos);
	/* Same end bit, so kvs_br_remaining is unchanged by restoring the
	 * original start; positions stay relative to it. */
	r->start_bit = start;
	r->length = length;
	return KVS_OK;
}
