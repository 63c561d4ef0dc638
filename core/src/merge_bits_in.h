/*
 * merge_bits_in.h — the bit engine's inputs (tin): records decoded straight
 * from the stream for merge_bits_two.c and merge_bits_tree.c, which include
 * it with merge_bits_out.h.
 */
#ifndef KVSEG_MERGE_BITS_IN_H
#define KVSEG_MERGE_BITS_IN_H

#include "merge_internal.h"

/* ---- two bit-profile inputs with the default codes ---------------------
 *
 * The usual bit-profile merge (two inputs and the output with the default
 * codes, one framing, tombstones kept) in the manner of the byte engine
 * (merge_bytes.h): the inputs' and the output's state in one local
 * struct, each input's LCP with the last output key known, so the writer
 * neither compares keys nor copies the previous key. Records are decoded straight
 * from the stream with 64-bit windows (no reservoir) and their keys kept
 * in whole aligned words; the output is written with the writer's
 * register path (fast_bw), most of each record as one copy of the input's
 * bits (see tout_usual). The usual restarts of both sides are in line
 * too; unusual codes, the streams' last bits, flushes, long records and,
 * with a progress callback, output restarts go out of line (the cursor's
 * decoder and the writer's general path). Each side counts down the
 * records it may take in line. FORMAT.md §6.2; the default codes are
 * delta-EG2 for LCP and delta-EG0 for KEYLEN and VALLEN.
 */

#define BIT_MAXREC ((size_t)1024) /* output bytes of one record in line */
#define BIT_REC (BIT_MAXREC - 128) /* key + value bytes in line */
#define BIT_SPARE 128 /* stream bits past a value the loop may load */
/* The engine's code tables (vallen_codes, vallen_short, lcp_short here,
 * tail_short, lcp_codes in merge_bits_out.h) and their constants, written
 * at build time by merge_bits_gen.c, which says what each entry holds.
 * BIT_SHORT is a short value's bytes at most: the kind bit, a VALLEN code
 * between two such lengths and the value fit one put (see tout_short,
 * tin_tail). */
#include "merge_bits_tables.h"

typedef struct tin { /* one input */
	const uint8_t *s;   /* the record stream */
	uint64_t pos, end;  /* the next record's first bit; the stream's bits */
	uint8_t *key;       /* the current key: the cursor's buffer */
	uint64_t len, lcp;  /* its bits; its LCP with the last output key */
	/* Its bits [0, mlen) are in key (mlen = len, or a multiple of 64
	 * below it: a long suffix decoded in line stores its first word
	 * only); the rest lie in the stream from bit kx (tin_fill). */
	uint64_t mlen, kx;
	/* for a key of len bits (tin_key_end): its last word, and the mask
	 * of the key's bits in it; read only by tin_next_fast (see there) */
	uint64_t lastw, lmask;
	uint64_t flcp, fvlen; /* LCP and VALLEN field states after it (KEYLEN's
	                       * is len) */
	uint64_t vlen;       /* its value's length in bytes (it ends at pos) */
	bool tomb;           /* a tombstone */
	bool edge; /* fewer than BIT_SPARE bits after the value, or key and
	            * value above BIT_REC bytes: written out of line */
	/* Decoded in line: the key's bits from flcp (its LCP field, 0 at a
	 * restart) lie in the stream from bit x, and the rest of the record
	 * follows them up to pos; the VALLEN code is relative to vref. */
	bool inl;
	uint64_t x, vref;
	uint64_t budget, granted, left, max_len;
	uint64_t vmax; /* a value of up to vmax bytes and any key of the
	                * input's bounds lie within BIT_REC bytes */
	uint64_t safe; /* below it, a record with key and value within
	                * BIT_REC bytes lies in the stream, with BIT_SPARE
	                * bits after it (see tin_next_fast), or 0 */
	uint32_t in_block, K;
} tin;

typedef struct tout { /* the output */
	fast_bw bw;
	uint64_t budget, granted, until_restart;
	uint64_t prev_len, flcp, fvlen; /* KEYLEN's state: prev_len */
	uint64_t tombstones, key_bits, value_bytes, max_len;
	uint32_t K;
} tout;

typedef struct tfast {
	tin *in; /* the inputs, n of them */
	size_t n;
	tout o;
	merge *m;
	uint8_t *old;   /* the previous key of an input, for a restart */
	uint8_t *first; /* the output's first key, in words, zero after it */
	uint64_t first_len;
} tfast;

/* 64 bits of s from bit x: the 9 bytes from x / 8 are read. */
static SPECIALIZED uint64_t bits64(const uint8_t *s, uint64_t x)
{
	const uint8_t *p = s + x / 8;
	unsigned sh = (unsigned)(x & 7);
	return kvs_load_be64(p) << sh | (uint64_t)p[8] >> (8 - sh);
}

/* 57 to 64 bits of s from bit x, the rest zero: the 8 bytes from x / 8
 * are read. */
static SPECIALIZED uint64_t bits57(const uint8_t *s, uint64_t x)
{
	return kvs_load_be64(s + x / 8) << (x & 7);
}

/* The EGk code (k = 0 or 2) at the top of the window w, whose top `valid`
 * bits are the stream's: its length, 0 when it does not lie in them; *v
 * its value. */
static SPECIALIZED unsigned eg_window(uint64_t w, unsigned valid, unsigned k,
                                      uint64_t *v)
{
	unsigned z = (unsigned)__builtin_clzll(w | 1);
	unsigned n = 2 * z + k + 1;
	if (n > valid)
		return 0;
	*v = (w >> (64 - n)) - ((uint64_t)1 << k);
	return n;
}

/* Records b may take in line from here: up to its next restart and its
 * last record. */
static void tin_grant(tin *b)
{
	uint64_t to_restart = b->K - 1 - b->in_block;
	b->granted = b->budget = to_restart < b->left ? to_restart : b->left;
}

/* The mask of a key's bits in its last word, (len - 1) / 64, for a key
 * of len >= 1 bits. */
static inline uint64_t last_word_mask(uint64_t len)
{
	return ~(uint64_t)0 << (63 - (len - 1) % 64);
}

/* b's lastw and lmask for a key of len >= 1 bits. */
static inline void tin_key_end(tin *b, uint64_t len)
{
	b->lastw = (len - 1) / 64;
	b->lmask = last_word_mask(len);
}

/* The current record's value and the bits after it, from the cursor's
 * state (the reader is after the record). */
static void tin_from_cursor(tin *b, const kvs_cursor *c)
{
	b->pos = kvs_br_position(&c->br);
	b->len = c->key_bits;
	b->mlen = b->len;
	if (b->len)
		tin_key_end(b, b->len);
	b->flcp = c->prev_lcp;
	b->fvlen = c->prev_vallen;
	b->vlen = c->value_len;
	b->tomb = c->kind == KVS_KIND_TOMBSTONE;
	b->edge = b->end - b->pos < BIT_SPARE ||
	          b->len / 8 + b->vlen > BIT_REC;
	b->inl = false;
}

static void tin_load(tin *b, const kvs_cursor *c)
{
	const kvs_segment *s = c->seg;
	b->s = s->stream;
	b->end = s->stream_bits;
	b->key = c->key;
	tin_from_cursor(b, c);
	b->lcp = 0; /* set by the first round */
	b->left = s->records - 1 - c->ordinal;
	b->in_block = c->in_block;
	b->K = s->restart_interval;
	b->max_len = s->max_key_bits;
	b->vmax = b->max_len / 8 < BIT_REC ? BIT_REC - b->max_len / 8 : 0;
	uint64_t room = b->max_len + 4 * BIT_SPARE + 8 * BIT_REC;
	b->safe = b->end > room ? b->end - room : 0;
	tin_grant(b);
}

/* The first bit of b's value. */
static inline uint64_t tin_vpos(const tin *b)
{
	return b->pos - 8 * b->vlen;
}

/* The rest of b's key into its buffer (see tin.mlen), the last word with
 * its padding bits clear. */
static __attribute__((noinline)) void tin_fill_rest(tin *b)
{
	/* the last word from len, not b->lastw: a record whose KEYLEN
	 * changed and that was not taken in line leaves lastw set for its
	 * length until the restart or slow path takes it */
	uint64_t last = (b->len - 1) / 64, y = b->kx;
	for (uint64_t j = b->mlen / 64; j < last; j++, y += 64)
		kvs_store_be64(b->key + 8 * j, bits64(b->s, y));
	kvs_store_be64(b->key + 8 * last,
	               bits64(b->s, y) & last_word_mask(b->len));
	b->mlen = b->len;
}

/* Word w of b's key (64 * w < len); past the key's end, from the stream,
 * the record's next bits (a compare stops at the shorter key's end). */
static SPECIALIZED uint64_t tin_word(const tin *b, uint64_t w)
{
	if (64 * w < b->mlen)
		return kvs_load_be64(b->key + 8 * w);
	return bits64(b->s, b->kx + (64 * w - b->mlen));
}

/* b's whole key in its buffer. */
static inline void tin_fill(tin *b)
{
	if (__builtin_expect(b->mlen < b->len, 0))
		tin_fill_rest(b);
}


/*
 * The rest of a record decoded in line, from bit t on, whose top `valid`
 * bits (9 or more) the window w3 holds: the kind bit (typed), VALLEN
 * relative to vref, the value. False when the code does not lie in those
 * bits or the record does not fit the loop (key and
 * value above BIT_REC bytes, written out of line; fewer than BIT_SPARE
 * bits of stream after it, which need not be checked when the record
 * began below b->safe: `bounded`, a constant).
 */
static SPECIALIZED bool tin_tail(const tin *b, uint64_t t, uint64_t w3,
                                 unsigned valid, uint64_t klen, uint64_t vref,
                                 bool typed, bool bounded, bool *tomb,
                                 uint64_t *vlen, uint64_t *end)
{
	uint64_t d3 = 0, v = 0, w0 = w3, adv; /* the bits from t to the end */
	bool tb = typed && !(w3 >> 63);
	unsigned n3 = 0;
	w3 <<= typed;
	if (__builtin_expect(vref > BIT_SHORT, 1)) {
		if (!tb && (w3 >> 63)) { /* the length unchanged: the code 1 */
			n3 = 1;
			v = vref;
		} else if (!tb) {
			n3 = eg_window(w3, valid - typed, 0, &d3);
			v = seg_unzigzag(vref, d3);
			if (n3 == 0)
				return false;
		}
		adv = typed + n3 + 8 * v; /* 8 * v: see below */
	} else {
		/* after a short value: a VALLEN code of up to 8 bits from a
		 * table, with typed framing the kind bit with it, with no
		 * branch on the code or on a tombstone (with short values of
		 * varying lengths these follow the data); a longer one, not in
		 * a tombstone, decoded so */
		bool table;
		if (typed) {
			unsigned e = vallen_short[vref][w0 >> 55];
			tb = e >> VS_TOMB_BIT; /* the highest bit */
			v = (e >> 8) & 15;
			adv = e & 0xff;
			table = e != 0;
		} else {
			uint32_t e = vallen_codes[w3 >> 56];
			n3 = e & 0xff;
			v = vref + (e >> 8) - VALLEN_BIAS;
			adv = n3 + 8 * v;
			table = n3 != 0;
		}
		if (__builtin_expect(!table, 0)) {
			n3 = eg_window(w3, valid - typed, 0, &d3);
			v = seg_unzigzag(vref, d3);
			if (n3 == 0)
				return false;
			adv = typed + n3 + 8 * v;
		}
	}
	/* key and value within BIT_REC bytes: usually known from the
	 * input's longest key (so 8 * v above did not wrap) */
	if (__builtin_expect(v > b->vmax, 0) &&
	    (v > BIT_REC || klen / 8 + v > BIT_REC))
		return false;
	if (!bounded && b->end - t < adv + BIT_SPARE)
		return false;
	*tomb = tb;
	*vlen = v;
	*end = t + adv;
	return true;
}

/* b's state after a record decoded in line (see tin): its key's bits from
 * flcp lie in the stream from bit x. */
static SPECIALIZED void tin_set(tin *b, uint64_t klen, uint64_t lcp,
                                uint64_t flcp, uint64_t x, bool tomb,
                                uint64_t vlen, uint64_t end)
{
	b->len = klen;
	b->lcp = lcp;
	b->flcp = flcp;
	b->inl = true;
	b->edge = false;
	b->x = x;
	b->vref = b->fvlen;
	/* a select, not a branch on a tombstone, whose place follows the
	 * data */
	b->fvlen = tomb ? b->fvlen : vlen;
	b->vlen = vlen;
	b->tomb = tomb;
	b->pos = end;
}

/*
 * The next record of b in the usual case: inside b's budget, no restart,
 * codes that lie in one 64-bit window each, a key of the input's bounds
 * that follows the previous key at its LCP field (a 1 there, where the
 * previous key has a 0 or ends: the LCP is whole and the key larger), key
 * and value within BIT_REC bytes, and BIT_SPARE bits of stream after the
 * value. False (b unchanged) otherwise. typed: the framing as a constant.
 * See tin_next_fast for the budget.
 */
static SPECIALIZED bool tin_next_in(tin *b, bool typed)
{
	uint64_t pos = b->pos, len = b->len;
	/* below safe the windows at pos, at the suffix and after it lie in
	 * the stream, and so does a record of at most BIT_REC bytes of key
	 * and value with BIT_SPARE bits after it: the codes before the
	 * suffix take at most 114 bits, the suffix at most max_len, the
	 * kind bit and VALLEN 58 */
	if (pos >= b->safe)
		return false;
	const uint8_t *s = b->s;
	uint64_t w = bits57(s, pos), d1, d2;
	/* below lim: the new key has a bit at lcp (klen > lcp), and the
	 * previous key's word at lcp is in its buffer (lcp < mlen, or
	 * lcp <= mlen = len); usually the key's length is unchanged (the
	 * code 1), and then mlen <= len = klen makes lim mlen */
	uint64_t lim = b->mlen, lcp, klen = len, h;
	bool ends = false; /* the previous key ends at lcp */
	int32_t e = lcp_short[w >> 54];
	if (__builtin_expect(e != 0, 1)) { /* short LCP code, KEYLEN 1 */
		lcp = b->flcp + (uint64_t)(int64_t)(e >> 8);
		h = (uint64_t)(e & 0xff);
	} else {
		unsigned n1 = eg_window(w, 57, 2, &d1), n2 = 1;
		if (n1 == 0)
			return false;
		lcp = seg_unzigzag(b->flcp, d1);
		if (!((w << n1) >> 63)) {
			if ((n2 = eg_window(w << n1, 57 - n1, 0, &d2)) == 0)
				return false;
			/* KEYLEN's previous value is the key's length */
			klen = seg_unzigzag(len, d2);
			if (lcp > len || klen > b->max_len)
				return false;
			ends = lcp == len;
			lim = lim < len ? lim : UINT64_MAX; /* lcp <= len */
			lim = lim < klen ? lim : klen;
			/* set before the record is taken: where it is not,
			 * the restart or the slow path that takes it sets
			 * them again */
			if (klen)
				tin_key_end(b, klen);
		}
		h = n1 + n2;
	}
	if (lim <= lcp)
		return false;
	uint64_t x = pos + h; /* the suffix's first bit */
	uint64_t j = lcp / 64, slen = klen - lcp;
	unsigned off = (unsigned)(lcp % 64);
	uint8_t *k = b->key + 8 * j;
	uint64_t old = kvs_load_be64(k), first, w3;
	unsigned valid;
	if (h + slen <= 32) {
		/* a short suffix (structured keys): the suffix and the kind
		 * bit and VALLEN after it (25 bits or more of them) lie in w,
		 * which saves two loads on the path from one record to the
		 * next; the word takes first's top min(64 - off, slen) bits */
		first = w << h;
		w3 = first << slen;
		valid = 57 - (unsigned)(h + slen);
	} else {
		/* the word takes first's top 64 - off bits: bits57's unless
		 * off < 7 */
		first = bits57(s, x);
		if (__builtin_expect(off < 7, 0))
			first = bits64(s, x);
		w3 = bits57(s, x + slen);
		valid = 57;
	}
	/* the previous key's bit at lcp (read, not used, when it ends) */
	bool follows = (first >> 63) & (ends | !((old << off) >> 63));
	if (!follows)
		return false;
	/* the suffix into the key, in whole words: the first (made before
	 * the tail, which then keeps one value live, not two) */
	uint64_t keep = ~(~(uint64_t)0 >> off);
	uint64_t word = (old & keep) | (first >> off);
	bool tomb;
	uint64_t vlen, end;
	if (!tin_tail(b, x + slen, w3, valid, klen, b->fvlen, typed, true,
	              &tomb, &vlen, &end))
		return false;
	/* the words after this one are left in the stream (tin_fill): most
	 * merges of long suffixes order keys by their first words */
	if (j < b->lastw) {
		kvs_store_be64(b->key + 8 * j, word);
		b->mlen = 64 * j + 64;
		b->kx = x + 64 - off;
	} else {
		kvs_store_be64(b->key + 8 * j, word & b->lmask);
		b->mlen = klen;
	}
	tin_set(b, klen, lcp, lcp, x, tomb, vlen, end);
	return true;
}

/* tin_next_in inside b's budget: the budget is taken first (a subtraction
 * and a branch on its borrow, not a load, a test and a store) and given
 * back where the record is not taken. */
static SPECIALIZED bool tin_next_fast(tin *b, bool typed)
{
	if (__builtin_sub_overflow(b->budget, 1, &b->budget)) {
		b->budget = 0;
		return false;
	}
	if (__builtin_expect(tin_next_in(b, typed), 1))
		return true;
	b->budget++;
	return false;
}

/*
 * The next record of b when it is an input restart (its whole key, the
 * field states from 0), in the usual case: codes in one window each, a
 * key of the input's bounds above the previous one, key and value within
 * BIT_REC bytes, BIT_SPARE bits of stream after the value. Its LCP with
 * the previous key is found from the stream before the key is stored.
 * False (b unchanged) otherwise.
 */
static SPECIALIZED bool tin_restart(tin *b, bool typed)
{
	uint64_t pos = b->pos, len = b->len, d2;
	if (b->end - pos < 2 * BIT_SPARE)
		return false;
	tin_fill(b); /* the previous key, compared whole */
	const uint8_t *s = b->s;
	unsigned n2 = eg_window(bits64(s, pos), 64, 0, &d2);
	uint64_t klen = seg_unzigzag(0, d2), x = pos + n2;
	if (n2 == 0 || klen == 0 || klen > b->max_len ||
	    b->end - x < klen + 2 * BIT_SPARE)
		return false;
	/* the order, and the LCP: a difference past the shorter key is the
	 * longer key's bits (or the stream's after the new key) */
	uint64_t n = klen < len ? klen : len, lcp = n;
	int cmp = klen < len ? -1 : klen > len;
	for (uint64_t j = 0; 64 * j < n; j++) {
		uint64_t nw = bits64(s, x + 64 * j),
		         ow = kvs_load_be64(b->key + 8 * j);
		if (nw != ow) {
			uint64_t d = 64 * j + (unsigned)__builtin_clzll(nw ^ ow);
			if (d < n) {
				lcp = d;
				cmp = nw > ow ? 1 : -1;
			}
			break;
		}
	}
	if (cmp <= 0)
		return false;
	bool tomb;
	uint64_t vlen, end;
	if (!tin_tail(b, x + klen, bits57(s, x + klen), 57, klen, 0, typed,
	              false, &tomb, &vlen, &end))
		return false;
	tin_key_end(b, klen);
	uint64_t last = b->lastw;
	for (uint64_t j = 0; j < last; j++)
		kvs_store_be64(b->key + 8 * j, bits64(s, x + 64 * j));
	kvs_store_be64(b->key + 8 * last, bits64(s, x + 64 * last) & b->lmask);
	b->fvlen = 0; /* the field states restart from 0 */
	b->mlen = klen;
	tin_set(b, klen, lcp, 0, x, tomb, vlen, end);
	return true;
}

/* The next record of b in any other case, through the cursor's decoder,
 * with its LCP computed against a copy of the previous key; *live false
 * at the end. */
static __attribute__((noinline)) kvs_status
tin_next_slow(tfast *f, size_t i, bool *live)
{
	tin *b = &f->in[i];
	uint64_t used = b->granted - b->budget;
	tin_fill(b); /* the cursor decodes from the previous key */
	b->left -= used;
	b->in_block += (uint32_t)used;
	if (b->left == 0) {
		*live = false;
		b->budget = b->granted = 0;
		b->lcp = 0; /* see tree_replay */
		return KVS_OK;
	}
	merge *m = f->m;
	kvs_cursor *c = m->cur[i];
	const kvs_segment *s = c->seg;
	c->ordinal = s->records - 1 - b->left;
	c->in_block = b->in_block;
	c->key_bits = b->len;
	c->prev_lcp = b->flcp;
	c->prev_keylen = b->len;
	c->prev_vallen = b->fvlen;
	uint64_t rec = s->records - b->left; /* the record decoded */
	kvs_status st = kvs_br_seek(&c->br, b->pos); /* pos <= the length */
	/* in words: the key was just stored so (a wider load would wait) */
	copy_words(f->old, b->key, 8 * ((b->len + 63) / 64));
	if (st == KVS_OK)
		st = seg_cursor_next_with(c, KVS_PROFILE_BIT, seg_default_fields);
	if (st != KVS_OK)
		return kvs_error_set(m->err, st,
		                     "input %zu: record %" PRIu64 ": %s", i,
		                     rec, kvs_strerror(st));
	int cmp;
	uint64_t lcp = seg_key_lcp(c->key, c->key_bits, f->old, b->len, &cmp);
	if (cmp <= 0)
		return kvs_error_set(m->err, KVS_E_CORRUPT,
		                     "input %zu: record %" PRIu64
		                     ": its key is not above the previous one: %s",
		                     i, rec, kvs_strerror(KVS_E_CORRUPT));
	tin_from_cursor(b, c);
	b->lcp = lcp;
	b->in_block = c->in_block;
	b->left--;
	tin_grant(b);
	return KVS_OK;
}

/*
 * The order of the two inputs' keys and their LCP in bits, from their
 * LCPs with the last output key P, which both are above (see heads_lcp):
 * the keys are compared from the word of the smaller one on, which finds
 * their first difference in that word whenever the two differ. Keys are
 * kept in whole words with their padding bits clear. An input's word at
 * its LCP is in its buffer (tin.mlen): the LCP that the input whose key is
 * the larger keeps is the one returned, and where that lies past its
 * buffer's bits the rest of its key is stored (equal keys both move on).
 */
static SPECIALIZED uint64_t tin_heads_lcp(tin *a, tin *b, int *cmp)
{
	uint64_t la = a->lcp, lb = b->lcp, m = la < lb ? la : lb;
	uint64_t n = a->len < b->len ? a->len : b->len;
	/* the first word out of the loop (as its first round, more
	 * instructions on structured keys) */
	uint64_t i = m / 64 * 8;
	uint64_t x = kvs_load_be64(a->key + i), y = kvs_load_be64(b->key + i);
	uint64_t d = 8 * i + (unsigned)__builtin_clzll((x ^ y) | 1);
	if (__builtin_expect(x != y && d < n, 1)) {
		*cmp = x > y ? 1 : -1;
		return d;
	}
	/* the words after it: from the stream where a buffer ends (after
	 * equal keys, usual in overlapping inputs, both move on, and
	 * neither key is needed whole) */
	d = n;
	*cmp = a->len < b->len ? -1 : a->len > b->len;
	for (i += 8; 8 * i < n; i += 8) {
		x = tin_word(a, i / 8);
		y = tin_word(b, i / 8);
		if (x != y) {
			uint64_t e = 8 * i + (unsigned)__builtin_clzll(x ^ y);
			if (e < n) { /* else past the shorter key: a prefix */
				d = e;
				*cmp = x > y ? 1 : -1;
			}
			break;
		}
	}
	tin *larger = *cmp < 0 ? b : a; /* equal keys: see tin_match */
	if (*cmp != 0 && d >= larger->mlen)
		tin_fill(larger);
	return d;
}

/* The next record of b when its budget is spent and it is the usual
 * restart (tin_restart), in line; false (b unchanged) otherwise. */
static SPECIALIZED bool tin_next_restart(tin *b, bool typed)
{
	uint64_t used = b->granted - b->budget;
	if (b->left == used || b->in_block + used + 1 != b->K ||
	    !tin_restart(b, typed))
		return false;
	b->left -= used + 1;
	b->in_block = 0;
	tin_grant(b);
	return true;
}

/* Input records consumed so far (kvs_merge_stats.input_records). */
static uint64_t tfast_consumed(const tfast *f, const bool *live)
{
	uint64_t n = 0;
	for (size_t i = 0; i < f->n; i++) {
		const tin *b = &f->in[i];
		uint64_t records = f->m->cur[i]->seg->records;
		uint64_t left = b->left - (b->granted - b->budget);
		n += live[i] ? records - 1 - left : records;
	}
	return n;
}

#endif
