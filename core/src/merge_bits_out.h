/*
 * merge_bits_out.h — the bit engine's output (tout): records written with
 * the writer's register path (fast_bw), most of each as one copy of the
 * input's bits.
 */
#ifndef KVSEG_MERGE_BITS_OUT_H
#define KVSEG_MERGE_BITS_OUT_H

#include "merge_bits_in.h"

/* Appends bits [start, start + n) of a key kept in whole aligned words
 * (loads of such words are forwarded from the stores that wrote them),
 * with a word to spare after its last. */
static SPECIALIZED void tout_key_bits(fast_bw *o, const uint8_t *key,
                                      uint64_t start, uint64_t n)
{
	const uint8_t *k = key + start / 64 * 8;
	unsigned off = (unsigned)(start % 64);
	for (; n; k += 8) {
		uint64_t v = kvs_load_be64(k);
		if (off)
			v = v << off | kvs_load_be64(k + 8) >> (64 - off);
		if (n < 64) {
			fbw_put_any(o, v >> (64 - n), (unsigned)n);
			return;
		}
		fbw_put64(o, v);
		n -= 64;
	}
}

/*
 * Appends the nc bits of code (1 to 56), then n bits of s from bit x
 * (BIT_SPARE bits readable after them). The code joins the pending bits,
 * and the output's bytes from p on are the stream's bits from x less the
 * pending ones (these first), so the output is stored in 56-bit chunks,
 * chunk i the 8 bytes at q + 7i shifted by d: one load, one shift and one
 * store each, and no chunk waits for another (each store's last byte is
 * overwritten by the next).
 */
static SPECIALIZED void tout_code_stream(fast_bw *o, uint64_t code, unsigned nc,
                                         const uint8_t *s, uint64_t x,
                                         uint64_t n)
{
	/* nc is never 0: the tests on it are for GCC, whose merge loops
	 * come out longer without them */
	unsigned ob = o->bits + nc; /* at most 63 */
	if (__builtin_expect(x < 64, 0)) { /* x - ob may precede the stream */
		if (nc)
			fbw_put(o, code, nc);
		for (; n >= 56; n -= 56, x += 56)
			fbw_put(o, bits64(s, x) >> 8, 56);
		if (n)
			fbw_put(o, bits64(s, x) >> (64 - n), (unsigned)n);
		return;
	}
	uint64_t acc = o->acc | (nc ? code << (64 - ob) : 0); /* joins them */
	uint64_t y = x - ob, total = ob + n;
	const uint8_t *q = s + y / 8;
	unsigned d = (unsigned)(y & 7);
	/* the bits after the pending ones, which are 0 in acc */
	uint64_t after = ~(uint64_t)0 >> ob;
	uint8_t *p = o->p;
	/* a long value: the first word, then 32-byte blocks (out of line),
	 * then chunks */
	if (__builtin_expect(total >= 64 + 256 + 64, 0)) {
		uint64_t first = acc | (kvs_load_be64(q) << d & after);
		kvs_store_be64(p, first | (kvs_load_be64(q + 8) >> 1) >> (63 - d));
		p += 8;
		q += 8;
		total -= 64;
		/* output byte j is now q[j] << d | q[j + 1] >> (8 - d); the
		 * blocks read q[0 .. 32 blocks], within the total bits */
		size_t blocks = (size_t)((total - 64) / 256);
		kvsi_copy_shifted(p, q, d, 32 * blocks);
		p += 32 * blocks;
		q += 32 * blocks;
		total -= 256 * (uint64_t)blocks;
		acc = 0; /* nothing pending */
		after = ~(uint64_t)0;
	}
	/* chunks until the total's whole bytes are stored; the bits of its
	 * last byte, if any, stay pending: output byte nb (its load ends at
	 * most 64 bits past the total) */
	uint64_t nb = total / 8;
	unsigned rest = (unsigned)total & 7;
	uint64_t c = acc | (kvs_load_be64(q) << d & after);
	kvs_store_be64(p, c);
	if (__builtin_expect(total - 104 < 120, 1)) {
		/* up to 28 bytes: chunks 1 to 3 without a loop, whose exit
		 * would follow the length (loads: up to 232 bits from y, at
		 * most 128 past the total) */
		kvs_store_be64(p + 7, kvs_load_be64(q + 7) << d);
		kvs_store_be64(p + 14, kvs_load_be64(q + 14) << d);
		kvs_store_be64(p + 21, kvs_load_be64(q + 21) << d);
	} else if (__builtin_expect(total - 48 < 120, 1)) {
		/* up to 21 bytes: chunks 1 and 2 (loads: up to 176 bits) */
		kvs_store_be64(p + 7, kvs_load_be64(q + 7) << d);
		kvs_store_be64(p + 14, kvs_load_be64(q + 14) << d);
	} else {
		for (uint64_t i = 7; i < nb; i += 7)
			kvs_store_be64(p + i, kvs_load_be64(q + i) << d);
	}
	uint64_t last = nb ? kvs_load_be64(q + nb) << d : c;
	o->p = p + nb;
	o->acc = last & ~(~(uint64_t)0 >> rest);
	o->bits = rest;
}

/* The nc bits of code (1 to 56), then n bits of s from bit x: one put
 * when they fit in one, the stream copy for more than 56 bits of s. */
static SPECIALIZED void tout_code_bits(fast_bw *o, uint64_t code, unsigned nc,
                                       const uint8_t *s, uint64_t x, uint64_t n)
{
	if (nc + n <= 56) {
		uint64_t v = bits57(s, x) >> 1 >> (63 - n); /* n may be 0 */
		fbw_put(o, code << n | v, nc + (unsigned)n);
	} else if (n > 56) {
		tout_code_stream(o, code, nc, s, x, n);
	} else { /* n bits within the 57 of one load */
		fbw_put(o, code, nc);
		fbw_put(o, bits57(s, x) >> (64 - n), (unsigned)n);
	}
}

/* The kind bit, VALLEN and the value of a record (from the stream). */
static SPECIALIZED void tout_tail(tout *o, const tin *b, bool typed)
{
	fast_bw *bw = &o->bw;
	uint64_t vlen = b->vlen;
	unsigned n3;
	if (typed && b->tomb) {
		fbw_put(bw, 0, 1);
		o->tombstones++;
	} else {
		uint64_t x3 = seg_eg_code(seg_zigzag(vlen, o->fvlen), 0, &n3);
		tout_code_bits(bw, (uint64_t)typed << n3 | x3, n3 + typed, b->s,
		               tin_vpos(b), 8 * vlen);
		o->fvlen = vlen;
	}
}


/*
 * A usual record (see tout_usual) with a short suffix and a short value
 * (BIT_SHORT): the codes and the suffix in one put, then the kind bit,
 * VALLEN and the value anew in another, with no branch on whether the
 * input's would do or on a tombstone: with short values of varying
 * lengths these follow the data, and the branches mispredicted.
 */
static SPECIALIZED void tout_short(tout *o, const tin *b, bool typed,
                                   uint64_t codes, unsigned nc, uint64_t from,
                                   uint64_t slen)
{
	/* the writer's state in registers between the puts: GCC stored it
	 * after each */
	fast_bw lbw = o->bw, *bw = &lbw;
	/* one put (see the caller) */
	tout_code_bits(bw, codes, nc, b->s, from, slen);
	/* all ones for a tombstone: selects with masks, not ?: on the
	 * bool, whose code was much slower (bench/README.md) */
	uint64_t t = typed ? (uint64_t)b->tomb : 0, tm = 0 - t;
	uint64_t vlen = b->vlen, vb = 8 * vlen; /* 0 for a tombstone */
	uint64_t code, cnt, fvlen;
	if (typed && o->fvlen <= BIT_SHORT) {
		/* after a short value, from a table */
		uint32_t e = tail_short[o->fvlen][vlen + 7 * t];
		code = (e >> 8) & 0xff;
		cnt = e & 0xff;
		fvlen = e >> 16;
	} else {
		unsigned n3;
		uint64_t x3 = seg_eg_code(seg_zigzag(vlen, o->fvlen), 0, &n3);
		uint64_t cn = n3 + typed;
		code = ((uint64_t)typed << n3 | x3) & ~tm;
		cnt = cn - ((cn - 1) & tm); /* 1: the kind */
		fvlen = vlen ^ ((vlen ^ o->fvlen) & tm);
	}
	/* one put, but after a long value (a long VALLEN code) */
	tout_code_bits(bw, code, (unsigned)cnt, b->s, tin_vpos(b), vb);
	o->bw = lbw;
	o->tombstones += t;
	o->fvlen = fvlen;
}

/* The rest of a record field by field: the suffix from the key, then the
 * tail (a record decoded out of line). */
static void tout_fields(tout *o, tin *b, bool typed)
{
	fast_bw *bw = &o->bw;
	uint64_t lcp = b->lcp, len = b->len;
	tin_fill(b);
	tout_key_bits(bw, b->key, lcp, len - lcp);
	tout_tail(o, b, typed);
}

/* The output's state after a record of b whose LCP field is lcp, but for
 * its key's length (tout_len). */
static SPECIALIZED void tout_done(tout *o, const tin *b, uint64_t lcp)
{
	o->flcp = lcp;
	o->key_bits += b->len;
	o->value_bytes += b->vlen;
}

/* The output's KEYLEN state after a key of len bits. */
static SPECIALIZED void tout_len(tout *o, uint64_t len)
{
	o->prev_len = len;
	if (len > o->max_len)
		o->max_len = len;
}


/* A record that is not a restart, with room for it: its key and value
 * below BIT_REC bytes, so every code below 2^32. */
static SPECIALIZED void tout_usual(tout *o, tin *b, bool typed)
{
	fast_bw *bw = &o->bw;
	uint64_t lcp = b->lcp, len = b->len, vlen = b->vlen;
	uint64_t codes, di = lcp - o->flcp + LE_BIAS;
	unsigned nc;
	if (__builtin_expect(di < 2 * LE_BIAS && len == o->prev_len, 1)) {
		/* usually: a small LCP difference, the length unchanged */
		uint32_t e = lcp_codes[di];
		codes = e >> 8;
		nc = e & 0xff;
	} else {
		unsigned n1, n2 = 1;
		uint64_t x1 = seg_eg_code(seg_zigzag(lcp, o->flcp), 2, &n1);
		uint64_t x2 = 1; /* the length unchanged: the code 1 */
		if (len != o->prev_len) {
			x2 = seg_eg_code(seg_zigzag(len, o->prev_len), 0, &n2);
			tout_len(o, len);
		}
		/* the two codes in one put, put with what follows where it
		 * fits (below); in two, the second put so */
		codes = x1 << n2 | x2;
		nc = n1 + n2;
		if (nc > 56) {
			fbw_put(bw, x1, n1);
			codes = x2;
			nc = n2;
		}
	}
	/*
	 * The usual record: the rest is a copy of the input's. The last
	 * output key P lies between the input's previous key and this one,
	 * so it shares at least the LCP field's bits with this key: the
	 * suffix is the end of the input's, and when the VALLEN code has the
	 * same reference (or there is none) the bits after it are the same.
	 */
	if (b->inl && lcp >= b->flcp) {
		uint64_t from = b->x + (lcp - b->flcp), slen = len - lcp;
		if (vlen <= BIT_SHORT && nc + slen <= 56) {
			tout_short(o, b, typed, codes, nc, from, slen);
		} else if (b->vref == o->fvlen || (typed && b->tomb)) {
			tout_code_stream(bw, codes, nc, b->s, from,
			                 b->pos - from);
			if (typed && b->tomb)
				o->tombstones++;
			else
				o->fvlen = vlen;
		} else { /* the suffix, then the fields after it anew */
			tout_code_bits(bw, codes, nc, b->s, from, slen);
			tout_tail(o, b, typed);
		}
	} else {
		fbw_put(bw, codes, nc);
		tout_fields(o, b, typed);
	}
	tout_done(o, b, lcp);
}

/* The writer's state from o, with out records in all (as bout_sync). */
static void tout_sync(kvs_writer *w, const tout *o, uint64_t out)
{
	uint64_t until = o->until_restart - (o->granted - o->budget);
	fbw_store(&w->bw, &o->bw);
	w->records = out;
	w->tombstones = o->tombstones;
	w->key_bits = o->key_bits;
	w->value_bytes = o->value_bytes;
	w->max_key_bits = o->max_len;
	w->prev_bits = o->prev_len;
	w->prev_lcp = o->flcp;
	w->prev_keylen = o->prev_len;
	w->prev_vallen = o->fvlen;
	w->in_block = until ? o->K - (uint32_t)until : 0;
}

/* o from the writer's state, with room for a chunk of records. */
static kvs_status tout_load(tout *o, kvs_writer *w, kvs_error *err)
{
	kvs_status st;
	if (w->bw.len >= FAST_CHUNK &&
	    (st = kvsi_writer_flush(w, err)) != KVS_OK)
		return st;
	if (kvs_bw_reserve_slow(&w->bw, FAST_CHUNK + BIT_MAXREC) != KVS_OK)
		return kvsi_writer_fail(w, err, KVS_E_NOMEM, "%s: %s",
		                        "out of memory");
	o->bw = fbw_load(&w->bw);
	o->tombstones = w->tombstones;
	o->key_bits = w->key_bits;
	o->value_bytes = w->value_bytes;
	o->max_len = w->max_key_bits;
	o->prev_len = w->prev_bits;
	o->flcp = w->prev_lcp;
	o->fvlen = w->prev_vallen;
	o->K = w->opt.restart_interval;
	o->until_restart = w->in_block ? o->K - w->in_block : 0;
	uint64_t room =
	    (uint64_t)(w->bw.buf + w->bw.cap - o->bw.p) / BIT_MAXREC;
	o->granted = o->budget =
	    o->until_restart < room ? o->until_restart : room;
	return KVS_OK;
}

/* The LCP of two keys kept in whole words with their padding bits clear
 * (a word to spare after each). */
static uint64_t words_lcp(const uint8_t *a, uint64_t la, const uint8_t *b,
                          uint64_t lb)
{
	uint64_t n = la < lb ? la : lb;
	for (uint64_t i = 0; 8 * i < n; i += 8) {
		uint64_t x = kvs_load_be64(a + i), y = kvs_load_be64(b + i);
		if (x != y) {
			uint64_t d = 8 * i + (unsigned)__builtin_clzll(x ^ y);
			return d < n ? d : n;
		}
	}
	return n;
}

/* seg_key_fence of a key kept so: its bits [skip, skip + 32), zero past
 * its end. */
static uint32_t words_fence(const uint8_t *key, uint64_t bits, uint64_t skip)
{
	if (bits <= skip)
		return 0;
	const uint8_t *k = key + skip / 64 * 8;
	unsigned off = (unsigned)(skip % 64);
	uint64_t v = kvs_load_be64(k) << off;
	if (off > 32) /* the bits past the key's last word are masked below */
		v |= kvs_load_be64(k + 8) >> (64 - off);
	uint32_t f = (uint32_t)(v >> 32);
	uint64_t avail = bits - skip;
	if (avail < 32)
		f &= ~(uint32_t)0 << (32 - avail);
	return f;
}

/* An output restart, when b is the usual record and the buffer has room
 * for it: its place in the restart index and its fence
 * (kvsi_writer_restart), its whole key, its fields from 0, and the next
 * budget; false (nothing done) otherwise. */
static SPECIALIZED bool tout_try_restart(tfast *f, tin *b, bool typed)
{
	kvs_writer *w = f->m->w;
	tout *o = &f->o;
	fast_bw *bw = &o->bw;
	uint64_t room = (uint64_t)(w->bw.buf + w->bw.cap - bw->p) / BIT_MAXREC;
	if (o->until_restart != o->granted - o->budget || b->edge ||
	    room == 0 || (size_t)(bw->p - w->bw.buf) >= FAST_CHUNK)
		return false;
	uint64_t len = b->len;
	tin_fill(b); /* written whole */
	uint64_t at = words_lcp(f->first, f->first_len, b->key, len);
	size_t j = w->restarts_len++; /* room: loop_setup */
	w->restarts[j] =
	    8 * (w->flushed + (uint64_t)(bw->p - w->bw.buf)) + bw->bits;
	w->fence_skip[j] = at;
	w->fence_win[j] = words_fence(b->key, len, at);
	unsigned n2;
	uint64_t x2 = seg_eg_code(seg_zigzag(len, 0), 0, &n2);
	fbw_put(bw, x2, n2);
	tout_key_bits(bw, b->key, 0, len);
	o->fvlen = 0; /* the field states restart from 0 */
	tout_tail(o, b, typed);
	tout_done(o, b, 0);
	tout_len(o, len);
	o->until_restart = o->K - 1;
	room--;
	o->granted = o->budget =
	    o->until_restart < room ? o->until_restart : room;
	return true;
}

/* An output restart with a progress callback (a call at each), the
 * buffer's end, or an unusual or long record: the usual restart by
 * tout_restart, the others through the writer's general path. */
static __attribute__((noinline)) kvs_status
tout_put_slow(tfast *f, tin *b, const bool *live, bool typed)
{
	merge *m = f->m;
	kvs_writer *w = m->w;
	tout *o = &f->o;
	uint64_t until = o->until_restart - (o->granted - o->budget);
	uint64_t consumed;
	kvs_status st;
	if (until == 0 && m->opt->progress &&
	    (consumed = tfast_consumed(f, live)) >= m->next_progress &&
	    (st = report_progress(m, consumed)) != KVS_OK)
		return st;
	if (tout_try_restart(f, b, typed))
		return KVS_OK;
	consumed = tfast_consumed(f, live);
	tout_sync(w, o, consumed - m->st.replaced - m->st.dropped);
	project_hint(m, consumed); /* for tout_load's flush */
	tin_fill(b);
	st = seg_writer_add_read(
	    w, b->key, b->len, b->tomb ? KVS_KIND_TOMBSTONE : KVS_KIND_VALUE,
	    b->s + tin_vpos(b) / 8, (unsigned)(tin_vpos(b) & 7), (size_t)b->vlen,
	    KVS_PROFILE_BIT, seg_default_fields, b->lcp, m->err);
	if (st != KVS_OK)
		return st;
	return tout_load(o, w, m->err);
}

static SPECIALIZED kvs_status tout_put(tfast *f, tin *b, const bool *live,
                                       bool typed)
{
	tout *o = &f->o;
	if (__builtin_expect(o->budget == 0 || b->edge, 0)) {
		/* the usual output restart in line, unless progress is
		 * reported (tout_put_slow) */
		if (!f->m->opt->progress && tout_try_restart(f, b, typed))
			return KVS_OK;
		return tout_put_slow(f, b, live, typed);
	}
	tout_usual(o, b, typed);
	o->budget--;
	return KVS_OK;
}


/* ---- the engine's operations for the loop templates -------------------
 *
 * What merge_tree_loop.h and merge_two_loop.h call (they list them); the
 * two-input loop's own are in merge_bits_two.c.
 */

static SPECIALIZED kvs_status tl_setup(tfast *f, merge *m)
{
	return loop_setup(m, &f->old, &f->first);
}

static SPECIALIZED void tl_load(tin *b, const kvs_cursor *c)
{
	tin_load(b, c);
}

static SPECIALIZED kvs_status tl_emit_first(merge *m, size_t i)
{
	return kvsi_emit_first_bit(m, i);
}

static SPECIALIZED kvs_status tl_out_load(tfast *f, kvs_writer *w,
                                          kvs_error *err)
{
	return tout_load(&f->o, w, err);
}

static SPECIALIZED void tl_first(tfast *f, const kvs_writer *w)
{
	f->first_len = w->first_bits;
	memcpy(f->first, w->first_key, (size_t)seg_key_bytes(f->first_len));
}

static SPECIALIZED uint64_t tl_head_lcp(const tin *a, const tin *b, int *cmp)
{
	return seg_key_lcp(a->key, a->len, b->key, b->len, cmp);
}

/* An input's end is found out of line. */
static SPECIALIZED kvs_status tl_advance(tfast *f, size_t i, bool *live,
                                         bool typed)
{
	if (!tin_next_fast(&f->in[i], typed) &&
	    !tin_next_restart(&f->in[i], typed))
		return tin_next_slow(f, i, live);
	return KVS_OK;
}

static SPECIALIZED bool tl_tomb(const tin *b)
{
	return b->tomb;
}

static SPECIALIZED kvs_status tl_put(tfast *f, tin *b, const bool *live,
                                     bool typed)
{
	return tout_put(f, b, live, typed);
}

static SPECIALIZED void tl_keep_key(kvs_writer *w, tin *b)
{
	tin_fill(b);
	memcpy(w->prev_key, b->key, (size_t)seg_key_bytes(b->len));
}

static SPECIALIZED uint64_t tl_consumed(const tfast *f, const bool *live)
{
	return tfast_consumed(f, live);
}

static SPECIALIZED void tl_sync(kvs_writer *w, const tfast *f, uint64_t out)
{
	tout_sync(w, &f->o, out);
}

static SPECIALIZED void tl_last_key(kvs_writer *w, const tfast *f, tin *b)
{
	tin_fill(b);
	memcpy(w->prev_key, b->key, (size_t)seg_key_bytes(f->o.prev_len));
}

#endif
