/*
 * merge_bytes.h — the byte engine: the in-line loops' inputs (bin) and
 * output (bout), for merge_bytes_two.c and merge_bytes_tree.c, which
 * include it (each instantiates its own copy of these static functions).
 */
#ifndef KVSEG_MERGE_BYTES_H
#define KVSEG_MERGE_BYTES_H

#include "merge_internal.h"

/* ---- two byte-profile inputs into their own framing --------------------
 *
 * The usual merge (two inputs and the output in the byte profile, one
 * framing, tombstones kept) with the inputs' and the output's state in
 * one local struct (the cursors and the writer are brought up to date
 * where the general code needs them), and without the writer's per-record
 * LCP with the previous key: the output's LCP is already known. Each input
 * keeps the LCP of its current key with the last output key. When the input has
 * just moved, that is its header's LCP with its previous key (the last output
 * key, or an older binding of it), checked to be the whole common prefix with
 * one byte compare that also checks the order; when the other input won the
 * round, it is the LCP the round's compare found. The usual restarts of
 * both sides are in line too (bin_next_restart, bout_try_restart: they
 * come once every K records, too often for a call); unusual
 * headers, the streams' last bytes, flushes, long records and, with a
 * progress callback, output restarts go out of line. Each side counts
 * down the records it may take in line before it has to look.
 */

#define FAST_MAXREC ((size_t)4096)     /* bytes of one record in line */
#define FAST_REC (FAST_MAXREC - 64)    /* key + value bytes in line */

typedef struct bin { /* one input */
	const uint8_t *p, *end; /* the next record; the stream's end */
	uint8_t *key;           /* the current key: the cursor's buffer */
	uint64_t len, lcp;      /* its length; its LCP with the last output */
	uint64_t rank; /* lcp_rank(lcp, key[lcp]), in the two-input loop */
	uint64_t vh, vlen;      /* its value header and value length */
	const uint8_t *value;   /* 16 readable bytes when vlen <= 16 */
	uint64_t budget;        /* records to take in line before looking */
	uint64_t granted;       /* the budget as it was given */
	uint64_t left;          /* records after the current (at the grant) */
	uint64_t max_len;       /* the input's longest key */
	uint32_t in_block, K;   /* ordinal % K (at the grant) */
	bool typed;
	uint8_t bounce[16]; /* a short value near the stream's end */
} bin;

typedef struct bout { /* the output */
	uint8_t *op;         /* the next byte */
	uint64_t budget;     /* records to write in line before looking */
	uint64_t granted;
	uint64_t until_restart; /* at the grant */
	uint64_t prev_len, prev_vh;
	uint64_t tombstones, key_bytes, value_bytes, max_len;
	uint32_t K;
	bool typed;
} bout;

typedef struct fast {
	/* The two-input loop's inputs live here: GCC makes the loop
	 * shorter with them in the struct than in a local array (tfast's
	 * loop is the other way round). */
	bin two[2];
	bin *in; /* the inputs, n of them (two for that loop) */
	size_t n;
	bout o;
	merge *m;
	uint8_t *old;   /* the previous key of an input, for a restart */
	uint8_t *first; /* the output's first key, 16 bytes to spare */
	uint64_t first_len;
} fast;

/* The LCP of two byte keys in buffers with 8 readable bytes past each, in
 * bits; *cmp their order. Their first from bytes are known to be equal. */
static SPECIALIZED uint64_t key_lcp_from(const uint8_t *a, uint64_t la,
                                         const uint8_t *b, uint64_t lb,
                                         uint64_t from, int *cmp)
{
	uint64_t n = la < lb ? la : lb, i = from & ~(uint64_t)7;
	for (; i + 8 <= n; i += 8) {
		uint64_t x = kvs_load_be64(a + i), y = kvs_load_be64(b + i);
		if (x != y) {
			*cmp = x > y ? 1 : -1;
			return 8 * i + (unsigned)__builtin_clzll(x ^ y);
		}
	}
	if (i < n) { /* 1..7 bytes left: the top ones of a word */
		unsigned sh = 8 * (unsigned)(8 - (n - i));
		uint64_t x = kvs_load_be64(a + i) >> sh,
		         y = kvs_load_be64(b + i) >> sh;
		if (x != y) {
			*cmp = x > y ? 1 : -1;
			return 8 * i + (unsigned)__builtin_clzll(x ^ y) - sh;
		}
	}
	*cmp = la < lb ? -1 : la > lb;
	return 8 * n;
}

static SPECIALIZED uint64_t key_lcp_bits(const uint8_t *a, uint64_t la,
                                         const uint8_t *b, uint64_t lb,
                                         int *cmp)
{
	return key_lcp_from(a, la, b, lb, 0, cmp);
}

/*
 * The order of the two inputs' keys and their LCP in bytes, from their
 * LCPs la and lb with the last output key P, which both are above: the
 * keys agree up to m = min(la, lb), and both have a byte there (a key that
 * ended there would be a prefix of P). When la and lb differ, the keys
 * differ at m (the one that shares more with P has P's byte there, the
 * other a larger one), so comparing the bytes at m orders them either
 * way; a branch on la == lb would follow the data, which for keys such as
 * hashes is a coin toss, and mispredicted.
 */
static SPECIALIZED uint64_t heads_lcp(const bin *a, const bin *b, int *cmp)
{
	uint64_t la = a->lcp, lb = b->lcp, m = la < lb ? la : lb;
	unsigned x = a->key[m], y = b->key[m];
	if (x != y) { /* the usual case: they differ right there */
		*cmp = x > y ? 1 : -1;
		return m;
	}
	return key_lcp_from(a->key, a->len, b->key, b->len, m, cmp) / 8;
}

/* The rank of a key whose LCP with the last output key is lcp and whose
 * byte there is byte (see heads_cmp). */
static inline uint64_t lcp_rank(uint64_t lcp, unsigned byte)
{
	return ~lcp << 8 | byte;
}

/* b's LCP with the last output key, and the rank it gives b. */
static SPECIALIZED void bin_set_lcp(bin *b, uint64_t lcp)
{
	b->lcp = lcp;
	b->rank = lcp_rank(lcp, b->key[lcp]);
}

/*
 * The order of the two inputs' keys (as heads_lcp), from their ranks alone
 * in the usual case. An input's rank ~lcp << 8 | key[lcp] (an LCP is below
 * 2^20 bytes) places its key after the last output key P by where it
 * leaves P and by its byte there: a key that leaves P earlier is the
 * larger, and two that leave it at the same place are ordered by their
 * bytes there. Where the ranks differ, the loser's LCP with the next P
 * (the winner) is its LCP with this P, so its LCP and rank stay. An
 * input's rank is set where its record is decoded, in bin_next_fast from
 * the stream (the header and the suffix's first byte). Equal ranks (the
 * keys leave P at the same place with the same byte): the keys are
 * compared from there, and the loser gets its LCP with the winner. Against
 * heads_lcp, which takes the smaller LCP and loads both keys' bytes there
 * and whose caller stores the loser's LCP, it loads no key in most
 * rounds.
 */
static SPECIALIZED int heads_cmp(bin *a, bin *b)
{
	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	int cmp;
	uint64_t l =
	    key_lcp_from(a->key, a->len, b->key, b->len, a->lcp, &cmp) / 8;
	if (cmp < 0)
		bin_set_lcp(b, l);
	else if (cmp > 0)
		bin_set_lcp(a, l);
	return cmp;
}

/*
 * After heads_cmp, when the winner is dropped (a strong delete) and P stays
 * as it was: where heads_cmp gave the loser an LCP with the winner above
 * the winner's with P, the loser's LCP with P is the winner's, and so is
 * its rank (the two were equal).
 */
static SPECIALIZED void heads_keep_p(bin *loser, const bin *winner)
{
	if (loser->lcp > winner->lcp) {
		loser->lcp = winner->lcp;
		loser->rank = winner->rank;
	}
}

/* A short value near the stream's end gets 16 readable bytes. */
static void bin_bounce(bin *b)
{
	if (b->vlen <= 16 && b->end - b->value < 16) {
		memset(b->bounce, 0, sizeof b->bounce);
		memcpy(b->bounce, b->value, (size_t)b->vlen);
		b->value = b->bounce;
	}
}

/* Records b may take in line from here: up to its next restart and its
 * last record. */
static void bin_grant(bin *b)
{
	uint64_t to_restart = b->K - 1 - b->in_block;
	b->granted = b->budget = to_restart < b->left ? to_restart : b->left;
}

static void bin_load(bin *b, const kvs_cursor *c)
{
	const kvs_segment *s = c->seg;
	b->end = s->stream + s->stream_len;
	b->p = s->stream + c->next_off;
	b->key = c->key;
	b->len = c->key_bits / 8;
	b->lcp = 0; /* set by the first round */
	b->vh = c->prev_vh;
	b->vlen = c->value_len;
	b->value = c->value;
	b->left = s->records - 1 - c->ordinal;
	b->in_block = c->in_block;
	b->K = s->restart_interval;
	b->max_len = s->max_key_bits / 8;
	b->typed = s->framing == KVS_FRAMING_TYPED;
	bin_bounce(b);
	bin_grant(b);
}

/*
 * A value header of one or two bytes (a value below 16 KiB) from q, which
 * has two readable bytes: its length in bytes, or 0 for a longer or
 * overlong varint, left to decode_byte. FORMAT.md §3.4.
 */
static SPECIALIZED unsigned bin_vh(const uint8_t *q, uint64_t *v)
{
	unsigned x = q[0], y = q[1];
	*v = x;
	if (x < 0x80)
		return 1;
	*v = (x & 0x7f) | (uint64_t)y << 7;
	return y - 1u < 0x7f ? 2 : 0; /* 1..0x7f: neither 0 nor continued */
}

/*
 * The next record of b in the usual case: inside b's budget, a one-byte
 * header with the key's length unchanged, a suffix whose first byte is
 * above the previous key's (so the LCP is whole and the key larger), a
 * value header of one or two bytes if any, and 16 bytes of stream to spare
 * after the value (and room for a record of the previous lengths and 64
 * bytes more, which covers the header, the suffix's words and the value
 * header). False (b unchanged) otherwise. typed is b->typed as a constant;
 * ranked: set b->rank (the two-input loop; under the tree it goes unread).
 * FORMAT.md §6.1.
 */
static SPECIALIZED bool bin_next_fast(bin *b, bool typed, bool ranked)
{
	const uint8_t *p = b->p;
	uint64_t len = b->len, vh = b->vh, vlen = b->vlen;
	if (b->budget == 0 || len + vlen + 64 > (uint64_t)(b->end - p))
		return false;
	unsigned h = p[0];
	uint64_t lcp = h >> 2;
	if ((h & 0x82) || lcp >= len)
		return false;
	uint64_t slen = len - lcp;
	const uint8_t *s = p + 1, *q = s + slen;
	if (s[0] <= b->key[lcp])
		return false;
	if (h & 1) {
		uint64_t v;
		unsigned n = bin_vh(q, &v);
		if (n == 0 || v == vh)
			return false;
		vh = v;
		vlen = typed ? (v ? v - 1 : 0) : v;
		q += n;
		if (vlen + 16 > (uint64_t)(b->end - q))
			return false;
	}
	/* The suffix, in words from the LCP on: 16 bytes, then the rest (the
	 * key buffer has 16 bytes to spare). The compare is on ranks and
	 * loads no key, so the words need not be aligned. */
	kvs_store_le64(b->key + lcp, kvs_load_le64(s));
	kvs_store_le64(b->key + lcp + 8, kvs_load_le64(s + 8));
	for (uint64_t i = 16; i < slen; i += 8)
		kvs_store_le64(b->key + lcp + i, kvs_load_le64(s + i));
	b->lcp = lcp;
	if (ranked)
		b->rank = lcp_rank(lcp, s[0]);
	b->vh = vh;
	b->vlen = vlen;
	b->value = q;
	b->p = q + vlen;
	b->budget--;
	return true;
}

/*
 * The next record of b when it is an input restart (FORMAT.md §6.1: the
 * whole key, then the value header), in the usual case: a one-byte key
 * length, a value header of one or two bytes, a key of the input's bounds
 * above the previous one, 16 bytes of stream to spare. Its LCP with the
 * previous key is found from the stream before the key is stored, in
 * whole words. False (b unchanged) otherwise.
 */
static bool bin_restart(bin *b, uint64_t max_len)
{
	const uint8_t *p = b->p;
	uint64_t avail = (uint64_t)(b->end - p);
	if (avail < 32 || p[0] >= 0x80)
		return false;
	uint64_t len = p[0], vh;
	const uint8_t *k = p + 1, *q = k + len;
	unsigned n;
	if (len > max_len || len + 32 > avail || (n = bin_vh(q, &vh)) == 0)
		return false;
	int cmp;
	uint64_t lcp = key_lcp_bits(k, len, b->key, b->len, &cmp) / 8;
	if (cmp <= 0)
		return false;
	uint64_t vlen = b->typed ? (vh ? vh - 1 : 0) : vh;
	q += n;
	if (vlen + 16 > (uint64_t)(b->end - q))
		return false;
	for (uint64_t i = 0; i < len; i += 8)
		kvs_store_le64(b->key + i, kvs_load_le64(k + i));
	b->len = len;
	b->lcp = lcp;
	b->rank = lcp_rank(lcp, k[lcp]);
	b->vh = vh;
	b->vlen = vlen;
	b->value = q;
	b->p = q + vlen;
	return true;
}

/* The next record of b in any other case (its callers try
 * bin_next_restart first), through decode_byte, with its LCP computed
 * against a copy of the previous key; *live false at the end. */
static __attribute__((noinline)) kvs_status
bin_next_slow(fast *f, size_t i, bool *live)
{
	bin *b = &f->in[i];
	uint64_t used = b->granted - b->budget;
	b->left -= used;
	b->in_block += (uint32_t)used;
	if (b->left == 0) {
		*live = false;
		b->budget = b->granted = 0;
		b->lcp = 0; /* see tree_replay */
		return KVS_OK;
	}
	uint32_t ib = b->in_block + 1 == b->K ? 0 : b->in_block + 1;
	merge *m = f->m;
	kvs_cursor *c = m->cur[i];
	const kvs_segment *s = c->seg;
	uint64_t rec = s->records - b->left;
	/* in words: the key was just stored so (a wider load would wait) */
	copy_words(f->old, b->key, b->len);
	c->key_bits = 8 * b->len;
	c->prev_vh = b->vh;
	kvs_status st = decode_byte(c, ib == 0, (uint64_t)(b->p - s->stream));
	if (st != KVS_OK) {
		st = kvsi_cursor_invalidate(c, st);
		return kvs_error_set(m->err, st, "input %zu: record %" PRIu64 ": %s",
		                     i, rec, kvs_strerror(st));
	}
	int cmp;
	uint64_t lcp =
	    key_lcp_bits(c->key, c->key_bits / 8, f->old, b->len, &cmp) / 8;
	if (cmp <= 0)
		return kvs_error_set(m->err, KVS_E_CORRUPT,
		                     "input %zu: record %" PRIu64
		                     ": its key is not above the previous one: %s",
		                     i, rec, kvs_strerror(KVS_E_CORRUPT));
	b->len = c->key_bits / 8;
	bin_set_lcp(b, lcp);
	b->vh = c->prev_vh;
	b->vlen = c->value_len;
	b->value = c->value;
	b->p = s->stream + c->next_off;
	b->in_block = ib;
	b->left--;
	bin_bounce(b);
	bin_grant(b);
	return KVS_OK;
}

/* The next record of b when its budget is spent and it is the usual
 * restart (bin_restart), in line; false (b unchanged) otherwise. */
static SPECIALIZED bool bin_next_restart(bin *b)
{
	uint64_t used = b->granted - b->budget;
	if (b->left == used || b->in_block + used + 1 != b->K ||
	    !bin_restart(b, b->max_len))
		return false;
	b->left -= used + 1;
	b->in_block = 0;
	bin_grant(b);
	return true;
}

/* Moves input i to its next record; *live false when it has none. */
static SPECIALIZED kvs_status bin_advance(fast *f, size_t i, bool *live,
                                          bool typed, bool ranked)
{
	if (__builtin_expect(bin_next_fast(&f->in[i], typed, ranked), 1) ||
	    bin_next_restart(&f->in[i]))
		return KVS_OK;
	return bin_next_slow(f, i, live);
}

/* Input records consumed so far (kvs_merge_stats.input_records). */
static uint64_t fast_consumed(const fast *f, const bool *live)
{
	uint64_t n = 0;
	for (size_t i = 0; i < f->n; i++) {
		const bin *b = &f->in[i];
		uint64_t records = f->m->cur[i]->seg->records;
		uint64_t left = b->left - (b->granted - b->budget);
		n += live[i] ? records - 1 - left : records;
	}
	return n;
}

/* The writer's state from o, with out records in all. */
static void bout_sync(kvs_writer *w, const bout *o, uint64_t out)
{
	uint64_t until = o->until_restart - (o->granted - o->budget);
	w->buf_len = (size_t)(o->op - w->buf);
	w->records = out;
	w->tombstones = o->tombstones;
	w->key_bits = 8 * o->key_bytes;
	w->value_bytes = o->value_bytes;
	if (8 * o->max_len > w->max_key_bits)
		w->max_key_bits = 8 * o->max_len;
	w->prev_bits = 8 * o->prev_len;
	w->prev_vh = o->prev_vh;
	w->in_block = until ? o->K - (uint32_t)until : 0;
}

/* Records o may write in line from here: up to the next restart, and as
 * many as surely fit in the buffer. */
static void bout_grant(bout *o, const kvs_writer *w)
{
	uint64_t room = (uint64_t)(w->buf + w->buf_cap - o->op) / FAST_MAXREC;
	o->granted = o->budget = o->until_restart < room ? o->until_restart
	                                                  : room;
}

/* o from the writer's state after the first round. */
static void bout_load(bout *o, const kvs_writer *w)
{
	o->op = w->buf + w->buf_len;
	o->prev_len = w->prev_bits / 8;
	o->prev_vh = w->prev_vh;
	o->K = w->opt.restart_interval;
	o->until_restart = w->in_block ? o->K - w->in_block : 0;
	o->typed = w->opt.framing == KVS_FRAMING_TYPED;
	o->tombstones = w->tombstones;
	o->key_bytes = w->key_bits / 8;
	o->value_bytes = w->value_bytes;
	o->max_len = w->max_key_bits / 8;
	bout_grant(o, w);
}

/* The record's bytes after its header (FORMAT.md §6.1), the key from lcp. */
static SPECIALIZED uint8_t *bout_body(bout *o, uint8_t *p, const bin *b,
                                      uint64_t lcp, bool vc, bool typed)
{
	uint64_t len = b->len, slen = len - lcp, vlen = b->vlen;
	const uint8_t *k = b->key + lcp; /* 16 readable bytes from k */
	if (slen <= 16) {
		kvs_store_le64(p, kvs_load_le64(k));
		kvs_store_le64(p + 8, kvs_load_le64(k + 8));
	} else {
		copy_words(p, k, slen);
	}
	p += slen;
	if (vc) {
		if (b->vh < 0x80)
			*p++ = (uint8_t)b->vh;
		else
			p += kvs_varint_put(p, b->vh);
	}
	if (vlen <= 16) { /* 16 readable bytes: see bin */
		kvs_store_le64(p, kvs_load_le64(b->value));
		kvs_store_le64(p + 8, kvs_load_le64(b->value + 8));
	} else {
		copy_value(p, b->value, 0, (size_t)vlen);
	}
	p += vlen;
	o->prev_len = len;
	o->prev_vh = b->vh;
	o->tombstones += typed & (b->vh == 0);
	o->key_bytes += len;
	o->value_bytes += vlen;
	if (len > o->max_len)
		o->max_len = len;
	return p;
}

/* A record that is not a restart, with room for it. */
static SPECIALIZED void bout_usual(bout *o, const bin *b, bool typed)
{
	uint8_t *p = o->op;
	uint64_t lcp = b->lcp;
	bool kc = b->len != o->prev_len, vc = b->vh != o->prev_vh;
	uint64_t h = lcp << 2 | (uint64_t)kc << 1 | vc;
	if (h < 0x80 && !kc) {
		*p++ = (uint8_t)h;
	} else {
		p += kvs_varint_put(p, h);
		if (kc)
			p += kvs_varint_put(p, seg_zigzag(b->len, o->prev_len));
	}
	o->op = bout_body(o, p, b, lcp, vc, typed);
}

/* The fence parts of a restart key (kvsi_writer_restart), from the key
 * with 8 readable bytes past it. */
static void fast_restart_index(fast *f, const bin *b)
{
	kvs_writer *w = f->m->w;
	uint64_t bits = 8 * b->len, at;
	int cmp;
	at = key_lcp_bits(f->first, f->first_len, b->key, b->len, &cmp);
	uint32_t win = 0;
	if (bits > at) { /* bits [at, at + 32) of the key, zero past it */
		uint64_t first = at / 8, n = b->len - first;
		uint64_t x = kvs_load_be64(b->key + first);
		if (n < 8)
			x &= ~(~(uint64_t)0 >> (8 * n));
		win = (uint32_t)((x << (at & 7)) >> 32);
		uint64_t avail = bits - at;
		if (avail < 32)
			win &= ~(uint32_t)0 << (32 - avail);
	}
	size_t j = w->restarts_len++;
	w->restarts[j] = w->flushed + (uint64_t)(f->o.op - w->buf);
	w->fence_skip[j] = at;
	w->fence_win[j] = win;
}

/* An output restart, with room for it: its place in the restart index
 * and its fence, its whole key. */
static SPECIALIZED void bout_restart(fast *f, const bin *b, bool typed)
{
	bout *o = &f->o;
	fast_restart_index(f, b);
	uint8_t *p = o->op;
	p += kvs_varint_put(p, b->len);
	o->op = bout_body(o, p, b, 0, true, typed);
	o->until_restart = o->K - 1;
}

/* An output restart, a flush or a long record; a progress call at each
 * restart. */
static __attribute__((noinline)) kvs_status
bout_put_slow(fast *f, const bin *b, const bool *live)
{
	merge *m = f->m;
	kvs_writer *w = m->w;
	bout *o = &f->o;
	kvs_status st;
	o->until_restart -= o->granted - o->budget;
	o->granted = o->budget = 0;
	if (b->vlen > KVS_MAX_VALUE_LEN) { /* refused with its message */
		bout_sync(w, o,
		          fast_consumed(f, live) - m->st.replaced -
		              m->st.dropped);
		return kvsi_writer_add(w, b->key, 8 * b->len,
		                       b->typed && b->vh == 0
		                           ? KVS_KIND_TOMBSTONE
		                           : KVS_KIND_VALUE,
		                       b->value, 0, (size_t)b->vlen, m->err);
	}
	uint64_t consumed;
	if (o->until_restart == 0 && m->opt->progress &&
	    (consumed = fast_consumed(f, live)) >= m->next_progress &&
	    (st = report_progress(m, consumed)) != KVS_OK)
		return st;
	size_t need = 3 * KVS_VARINT_MAX + 32 + (size_t)(b->len + b->vlen);
	if (need < FAST_MAXREC)
		need = FAST_MAXREC;
	w->buf_len = (size_t)(o->op - w->buf);
	if (w->buf_len >= FAST_CHUNK || need > w->buf_cap - w->buf_len) {
		project_hint(m, fast_consumed(f, live));
		if ((st = kvsi_writer_flush(w, m->err)) != KVS_OK)
			return st;
		if (seg_grow(&w->buf, &w->buf_cap,
		             w->buf_len + need + FAST_CHUNK) != KVS_OK)
			return kvsi_writer_fail(w, m->err, KVS_E_NOMEM,
			                        "%s: %s", "out of memory");
		o->op = w->buf + w->buf_len;
	}
	if (o->until_restart) {
		bout_usual(o, b, o->typed);
		o->until_restart--;
	} else {
		bout_restart(f, b, o->typed);
	}
	bout_grant(o, w);
	return KVS_OK;
}

/* The usual output restart in line (bout_restart and the next budget),
 * when b's record is in line's bounds, the buffer has room for it and no
 * flush is due; false (nothing done) otherwise. */
static SPECIALIZED bool bout_try_restart(fast *f, const bin *b, bool typed)
{
	kvs_writer *w = f->m->w;
	bout *o = &f->o;
	if (o->until_restart != o->granted - o->budget ||
	    b->len + b->vlen > FAST_REC ||
	    (size_t)(w->buf + w->buf_cap - o->op) < FAST_MAXREC ||
	    (size_t)(o->op - w->buf) >= FAST_CHUNK)
		return false;
	bout_restart(f, b, typed);
	bout_grant(o, w);
	return true;
}

static SPECIALIZED kvs_status bout_put(fast *f, const bin *b, const bool *live,
                                       bool typed)
{
	bout *o = &f->o;
	if (__builtin_expect(o->budget == 0 || b->len + b->vlen > FAST_REC,
	                     0)) {
		/* the usual output restart in line, unless progress is
		 * reported (bout_put_slow) */
		if (!f->m->opt->progress && bout_try_restart(f, b, typed))
			return KVS_OK;
		return bout_put_slow(f, b, live);
	}
	bout_usual(o, b, typed);
	o->budget--;
	return KVS_OK;
}

/* loop_setup, and the byte loop's output buffer. */
static kvs_status fast_setup(fast *f, merge *m)
{
	kvs_writer *w = m->w;
	kvs_status st = loop_setup(m, &f->old, &f->first);
	if (st == KVS_OK &&
	    seg_grow(&w->buf, &w->buf_cap, FAST_CHUNK + FAST_MAXREC) != KVS_OK)
		return kvsi_writer_fail(w, m->err, KVS_E_NOMEM, "%s: %s",
		                        "out of memory");
	return st;
}


/* ---- the engine's operations for the loop templates -------------------
 *
 * What merge_tree_loop.h and merge_two_loop.h call (they list them); the
 * two-input loop's own are in merge_bytes_two.c.
 */

static SPECIALIZED kvs_status tl_setup(fast *f, merge *m)
{
	return fast_setup(f, m);
}

static SPECIALIZED void tl_load(bin *b, const kvs_cursor *c)
{
	bin_load(b, c);
}

static SPECIALIZED kvs_status tl_emit_first(merge *m, size_t i)
{
	return kvsi_emit_first_byte(m, i);
}

static SPECIALIZED kvs_status tl_out_load(fast *f, kvs_writer *w,
                                          kvs_error *err)
{
	(void)err;
	bout_load(&f->o, w);
	return KVS_OK;
}

static SPECIALIZED void tl_first(fast *f, const kvs_writer *w)
{
	f->first_len = w->first_bits / 8;
	memcpy(f->first, w->first_key, (size_t)f->first_len);
}

static SPECIALIZED uint64_t tl_head_lcp(const bin *a, const bin *b, int *cmp)
{
	return key_lcp_bits(a->key, a->len, b->key, b->len, cmp) / 8;
}

static SPECIALIZED kvs_status tl_advance(fast *f, size_t i, bool *live,
                                         bool typed)
{
	return bin_advance(f, i, live, typed, false);
}

static SPECIALIZED bool tl_tomb(const bin *b)
{
	return b->vh == 0; /* typed: a tombstone */
}

static SPECIALIZED kvs_status tl_put(fast *f, bin *b, const bool *live,
                                     bool typed)
{
	return bout_put(f, b, live, typed);
}

static SPECIALIZED void tl_keep_key(kvs_writer *w, const bin *b)
{
	memcpy(w->prev_key, b->key, (size_t)b->len);
}

static SPECIALIZED uint64_t tl_consumed(const fast *f, const bool *live)
{
	return fast_consumed(f, live);
}

static SPECIALIZED void tl_sync(kvs_writer *w, const fast *f, uint64_t out)
{
	bout_sync(w, &f->o, out);
}

static SPECIALIZED void tl_last_key(kvs_writer *w, const fast *f,
                                    const bin *b)
{
	memcpy(w->prev_key, b->key, (size_t)f->o.prev_len);
}

#endif
