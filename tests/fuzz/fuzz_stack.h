/*
 * fuzz_stack.h — for the libFuzzer targets that stack a fuzzed segment
 * with valid ones (fuzz_merge, fuzz_view): the valid "partner" segments,
 * written from a key function, and their oracle, every record of a
 * segment read through a plain cursor into memory.
 */
#ifndef SEGFS_FUZZ_STACK_H
#define SEGFS_FUZZ_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvseg/segment.h"

#include "fuzz_util.h"

/* Record i of a partner: writes its key into key (zeroed, 4 bytes) and
 * returns its length in bits; *tomb asks for a tombstone (typed framing
 * only). bit: the bit profile. */
typedef uint64_t (*fuzz_key_fn)(unsigned i, bool bit, uint8_t key[4],
                                bool *tomb);

/*
 * Writes a valid segment at path in the given mode (p: bit profile, f: raw
 * framing) with records records from key_of, record i's value i % 20
 * bytes of i ^ salt, and opens it (the caller unrefs it).
 */
static inline kvs_segment *fuzz_make_partner(const char *path, int p, int f,
                                             unsigned records,
                                             fuzz_key_fn key_of, uint8_t salt)
{
	kvs_writer_options opt;
	memset(&opt, 0, sizeof opt);
	opt.profile = p ? KVS_PROFILE_BIT : KVS_PROFILE_BYTE;
	opt.framing = f ? KVS_FRAMING_RAW : KVS_FRAMING_TYPED;
	opt.restart_interval = 5;
	opt.sequence = 2;
	opt.flags = KVS_WRITER_NO_SYNC;
	kvs_writer *w = NULL;
	kvs_error err;
	check(kvs_writer_open(&w, path, &opt, &err) == KVS_OK);
	for (unsigned i = 0; i < records; i++) {
		uint8_t key[4] = {0, 0, 0, 0};
		bool tomb = false;
		uint64_t bits = key_of(i, p != 0, key, &tomb);
		uint8_t value[20];
		memset(value, (int)(uint8_t)(i ^ salt), sizeof value);
		tomb = tomb && !f;
		check(kvs_writer_add(w, key, bits,
		                     tomb ? KVS_KIND_TOMBSTONE : KVS_KIND_VALUE,
		                     value, i % 20, &err) == KVS_OK);
	}
	check(kvs_writer_finish(w, &err) == KVS_OK);
	kvs_writer_free(w);
	kvs_segment *s = NULL;
	check(kvs_segment_open(&s, path, &err) == KVS_OK);
	return s;
}

typedef struct rec {
	uint8_t *key;
	uint64_t bits;
	kvs_kind kind;
	uint8_t *value;
	size_t len;
} rec;

typedef struct recs {
	rec *r;
	size_t n, cap;
	bool unordered; /* the walk stopped at a key not above the last */
} recs;

static inline void recs_free(recs *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->r[i].key);
		free(l->r[i].value);
	}
	free(l->r);
	memset(l, 0, sizeof *l);
}

static inline uint8_t *dup_bytes(const uint8_t *p, size_t n)
{
	uint8_t *q = malloc(n ? n : 1);
	check(q != NULL);
	if (n)
		memcpy(q, p, n);
	return q;
}

/* Every record of s through a cursor, into l; false when one does not
 * decode or the keys do not strictly increase (then l->unordered). */
static inline bool walk(kvs_segment *s, recs *l)
{
	kvs_cursor *c = NULL;
	check(kvs_cursor_open(&c, s) == KVS_OK);
	bool ok = kvs_cursor_first(c) == KVS_OK;
	while (ok && kvs_cursor_valid(c)) {
		rec r;
		const uint8_t *k = kvs_cursor_key(c, &r.bits);
		if (l->n &&
		    kvs_key_compare(l->r[l->n - 1].key, l->r[l->n - 1].bits, k,
		                    r.bits) >= 0) {
			l->unordered = true;
			ok = false;
			break;
		}
		r.key = dup_bytes(k, (size_t)((r.bits + 7) / 8));
		r.kind = kvs_cursor_kind(c);
		r.value = NULL;
		r.len = 0;
		const uint8_t *v = NULL;
		if (r.kind == KVS_KIND_VALUE &&
		    kvs_cursor_value(c, &v, &r.len) != KVS_OK) {
			free(r.key);
			ok = false;
			break;
		}
		r.value = dup_bytes(v, r.len);
		if (l->n == l->cap) {
			l->cap = l->cap ? 2 * l->cap : 64;
			l->r = realloc(l->r, l->cap * sizeof *l->r);
			check(l->r != NULL);
		}
		l->r[l->n++] = r;
		ok = kvs_cursor_next(c) == KVS_OK;
	}
	kvs_cursor_close(c);
	return ok;
}

static inline bool same_rec(const rec *x, const rec *y)
{
	return x->bits == y->bits &&
	       memcmp(x->key, y->key, (size_t)((x->bits + 7) / 8)) == 0 &&
	       x->kind == y->kind && x->len == y->len &&
	       memcmp(x->value, y->value, x->len) == 0;
}

#endif
