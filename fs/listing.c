/*
 * listing.c — listings of the directories of keys (namespace.h,
 * ns_readdir) and of the fixed ones. A listing is a composed cursor over
 * its scope's segments (kvseg/view.h); an entry's offset is the position (slot
 * and ordinal) of its record, so that a listing resumed at any offset
 * seeks there instead of rescanning, whatever was listed since, and
 * memory does not grow with the entries listed. With -o sep, keys that
 * share a prefix up to a separator are one directory.
 */
#include "namespace.h"
#include "control.h"
#include "scope.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"

/* Directory offsets: 1 after ".", 2 after "..", 3 after "%@" (the key a
 * -o sep directory stands for), 4 + position after the entry at the
 * position (slot and ordinal) of its first record. */
#define OFF_ENTRIES 4

struct ns_dir {
	dirref d;
	kvs_view *v;
	bool end; /* past the listing's last entry, wherever v is */
	off_t next_off; /* the offset the cursor's position continues, or -1 */
	/* The key of the entry before the cursor's (since the listing's
	 * start or a resume): every key the listing reaches must be above
	 * it, so that damaged data can never make a listing go round. */
	uint8_t *last;
	size_t last_cap;
	uint64_t last_bits;
	bool has_last;
	int err; /* an error after entries were replied: the next reply */
	bool closed; /* vc closed: a segment of the scope died (ESTALE) */
};

/* Is key above the handle's last one (or is there none)? Not, in a
 * listing, only where data is damaged. */
static bool dir_above_last(const ns_dir *h, const uint8_t *key, uint64_t bits)
{
	return !h->has_last ||
	       kvs_key_compare(key, bits, h->last, h->last_bits) > 0;
}

/* Takes key as the handle's last one: 0 or ENOMEM. */
static int dir_set_last(ns_dir *h, const uint8_t *key, uint64_t bits)
{
	size_t n = (size_t)((bits + 7) / 8);
	if (n > h->last_cap) {
		uint8_t *t = realloc(h->last, n);
		if (!t)
			return ENOMEM;
		h->last = t;
		h->last_cap = n;
	}
	if (n)
		memcpy(h->last, key, n);
	h->last_bits = bits;
	h->has_last = true;
	return 0;
}

int ns_opendir(uint64_t ino, ns_dir **out)
{
	*out = NULL;
	if (ino_kind(ino) == K_MERGE || ino_kind(ino) == K_STATUS)
		return ENOTDIR;
	if (ino_kind(ino) == K_FIXED)
		return 0;
	ns_dir *h = calloc(1, sizeof *h);
	if (!h)
		return ENOMEM;
	int err = dir_resolve(ino, &h->d);
	if (!err && (err = scope_open(&h->d, &h->v)) != 0)
		dir_release(&h->d);
	if (err) {
		free(h);
		return err;
	}
	/* the listing holds its snapshot (dir_resolve's count) or its
	 * segment until it is closed */
	if (!h->d.sc.view)
		slot_ref(slot_get(h->d.sc.id), 1);
	h->next_off = -1;
	*out = h;
	return 0;
}

void ns_closedir(ns_dir *h)
{
	if (!h)
		return;
	if (!h->closed)
		kvs_view_close(h->v);
	free(h->last);
	if (!h->d.sc.view)
		slot_unref(slot_get(h->d.sc.id), 1);
	dir_release(&h->d);
	free(h);
}


/* The smallest key greater than every key that starts with p[0 .. n):
 * the prefix with its last byte below 0xFF raised by one; false when
 * there is none (p is all 0xFF bytes). */
static bool prefix_successor(uint8_t *p, size_t *n)
{
	while (*n > 0 && p[*n - 1] == 0xFF)
		(*n)--;
	if (*n == 0)
		return false;
	p[*n - 1]++;
	return true;
}

/* Is the handle's cursor on an entry of the listing? */
static bool dir_more(const ns_dir *h)
{
	return !h->end && kvs_view_valid(h->v);
}

/* Positions the handle's cursor on the first entry after offset off. */
static int dir_position(ns_dir *h, off_t off)
{
	dirref *d = &h->d;
	kvs_status st;
	h->has_last = false;
	h->end = false;
	if (off < OFF_ENTRIES) {
		st = !d->sc.view && d->plen == 0
		         ? kvs_view_seek_ordinal(h->v, 0)
		         : kvs_view_seek(h->v, d->prefix, (uint64_t)d->plen * 8,
		                   false);
		return scope_fail(d, st, "starting the listing");
	}
	uint64_t pos = (uint64_t)off - OFF_ENTRIES;
	uint32_t s = (uint32_t)(pos >> ORD_BITS);
	uint64_t ord = pos & ORD_MASK;
	if (!d->sc.view && S.sep < 0)
		return scope_fail(d, kvs_view_seek_ordinal(h->v, ord + 1),
		                  "resuming the listing");
	kvs_cursor *c = NULL;
	int err = key_at(s, ord, &c);
	if (err)
		return err == ENOENT ? EINVAL : err;
	uint64_t bits;
	const uint8_t *key = kvs_cursor_key(c, &bits);
	if (!has_prefix(key, bits, d->prefix, d->plen))
		return EINVAL;
	/* what follows must be above the entry the offset names */
	if ((err = dir_set_last(h, key, bits)))
		return err;
	const uint8_t *rest = key + d->plen;
	const uint8_t *sp =
	    S.sep >= 0 ? memchr(rest, S.sep, (bits / 8) - d->plen) : NULL;
	if (!sp)
		return scope_fail(d, kvs_view_seek(h->v, key, bits, true),
		                  "resuming the listing");
	/* the entry was a directory: continue after its prefix */
	size_t n = (size_t)(sp - key) + 1;
	uint8_t *p = malloc(n);
	if (!p)
		return ENOMEM;
	memcpy(p, key, n);
	if (prefix_successor(p, &n))
		st = kvs_view_seek(h->v, p, (uint64_t)n * 8, false);
	else
		st = (h->end = true, KVS_OK);
	free(p);
	return scope_fail(d, st, "resuming the listing");
}
/* Gives one entry to fill: false when it does not fit. */
static bool emit(ns_fill_fn fill, void *ctx, const char *name,
                 const struct stat *st, off_t off, const uint8_t *dprefix,
                 size_t dplen, scope sc, bool counted)
{
	ns_dirent e = {
	    .name = name,
	    .st = *st,
	    .off = off,
	    .cache = !scope_is_stale(sc),
	    .dir_prefix = dprefix,
	    .dir_plen = dplen,
	    .sc = sc,
	    .counted = counted,
	};
	return fill(ctx, &e);
}

/* The root, segments/, control/ and control/wait/ (empty: its names are
 * the jobs, found by lookup only). */
static int fixed_readdir(uint64_t ino, off_t off, bool plus, ns_fill_fn fill,
                         void *ctx)
{
	const char *names[4] = {0};
	uint64_t inos[4] = {0};
	size_t n = 0;
	snap *cur = snap_current();
	if (ino == INO_ROOT) {
		names[0] = "segments", inos[0] = INO_SEGMENTS;
		names[1] = "view", inos[1] = view_ino();
		names[2] = "control", inos[2] = INO_CONTROL;
		n = 3;
	} else if (ino == INO_CONTROL) {
		names[0] = "catalog", inos[0] = make_ino(K_CATALOG, cur->id);
		/* control/merge and control/status get a file and a text
		 * only when listed with attributes (which the kernel then
		 * holds) */
		names[1] = "merge",
		inos[1] = make_ino(K_MERGE, plus ? control_file_take() : 0);
		names[2] = "status",
		inos[2] = make_ino(K_STATUS, plus ? control_status_take() : 0);
		names[3] = "wait", inos[3] = INO_WAITDIR;
		n = 4;
	} else if (ino == INO_SEGMENTS) {
		n = cur->n;
	}
	size_t total = 2 + n;
	for (size_t i = (size_t)(off < 0 ? 0 : off); i < total; i++) {
		const char *name;
		uint64_t child;
		if (i < 2)
			name = i ? ".." : ".", child = ino;
		else if (ino == INO_SEGMENTS)
			name = slot_get(cur->live[i - 2])->name,
			child = make_ino(K_SEGDIR, cur->live[i - 2]);
		else
			name = names[i - 2], child = inos[i - 2];
		struct stat st;
		if (child == make_ino(K_STATUS, 0))
			file_stat(&st, child, &S.dir_st, 0, 0444);
		else if (child == make_ino(K_MERGE, 0))
			file_stat(&st, child, &S.dir_st, 0, 0600);
		else if (ns_getattr(child, &st) != 0)
			continue;
		if (!emit(fill, ctx, name, &st, (off_t)i + 1, NULL, 0,
		          (scope){0}, i >= 2))
			break;
	}
	snap_unref(cur, 1);
	return 0;
}


int ns_readdir(uint64_t ino, ns_dir *h, off_t off, bool plus,
               ns_fill_fn fill, void *ctx)
{
	if (!h)
		return fixed_readdir(ino, off, plus, fill, ctx);
	dirref *d = &h->d;
	/* a fault under vc marked a segment of the scope damaged: the
	 * listing's cursors are not used again */
	const slot *bad = scope_damaged(d);
	if (bad)
		return eio_damaged(bad);
	/* a retired segment of the scope was closed (-o retire_after): the
	 * listing lets its mapping go and ends */
	if (!h->closed && !scope_alive(d)) {
		kvs_view_close(h->v);
		h->closed = true;
	}
	if (h->closed)
		return ESTALE;
	if (h->err) { /* the error that ended the last reply's entries */
		int e = h->err;
		h->err = 0;
		h->next_off = -1;
		return e;
	}
	size_t used = 0; /* entries given */
	bool got;
	int err = 0;
	struct stat st;
	const struct stat *times = scope_times(d);
	bool sep = S.sep >= 0;
	/* "." and ".." (the kernel links neither) */
	for (; off < 2; off++) {
		dir_stat(&st, ino, times, 2, scope_read(d));
		got = emit(fill, ctx, off == 0 ? "." : "..", &st, off + 1,
		           NULL, 0, d->sc, false);
		if (!got)
			goto done;
		used++;
	}
	if (off < 3) {
		if (sep && d->plen > 0) { /* "%@": the key the prefix names */
			bool found;
			uint32_t s;
			uint64_t ord;
			err = scope_lookup(d, d->prefix,
			                   (uint64_t)(d->plen - 1) * 8, &found,
			                   &s, &ord);
			if (err)
				goto done;
			if (found) {
				uint64_t kino = key_ino(d, s, ord);
				if ((err = ns_getattr(kino, &st)))
					goto done;
				got = emit(fill, ctx, "%@", &st, 3, NULL, 0,
				           d->sc, true);
				if (!got)
					goto done;
				used++;
			}
		}
		off = 3;
	}
	if (h->next_off != off) {
		if ((err = dir_position(h, off)))
			goto done;
	}
	h->next_off = -1;
	kvs_status ks = KVS_OK;
	uint8_t *tmp = NULL;
	size_t tmp_cap = 0;
	while (dir_more(h)) {
		kvs_cursor *c = kvs_view_cursor(h->v);
		uint64_t bits;
		const uint8_t *key = kvs_cursor_key(c, &bits);
		if (!has_prefix(key, bits, d->prefix, d->plen)) {
			h->end = true;
			break;
		}
		if (!dir_above_last(h, key, bits)) {
			/* damaged: it would go round */
			err = eio(d->sc.view ? NULL : slot_get(d->sc.id),
			          "the listing reached a key not above the one "
			          "before it (the segment's data is damaged)");
			break;
		}
		uint32_t s = view_slot(d, h->v);
		uint64_t ord = kvs_cursor_ordinal(c);
		off_t eoff = (off_t)(OFF_ENTRIES + make_pos(s, ord));
		const uint8_t *comp = key + d->plen;
		uint64_t cbits = bits - (uint64_t)d->plen * 8;
		const uint8_t *sp = sep ? memchr(comp, S.sep, cbits / 8) : NULL;
		char name[SEGFS_NAME_MAX + 1];
		/* tmp: a directory's prefix (up to its separator), or a key
		 * and the separator, for the directory that would shadow it */
		bool shadow_check = !sp && sep && cbits % 8 == 0;
		size_t n = sp ? (size_t)(sp - key) + 1 : (size_t)(bits / 8) + 1;
		if ((sp || shadow_check) && n > tmp_cap) {
			uint8_t *t = realloc(tmp, n);
			if (!t) {
				err = ENOMEM;
				break;
			}
			tmp = t;
			tmp_cap = n;
		}
		if (sp) { /* a directory of keys: skip past its prefix */
			memcpy(tmp, key, n);
			segfs_name_encode(comp, (uint64_t)(sp - comp) * 8, name);
			dir_stat(&st, make_ino(K_HINT, make_pos(s, ord)), times,
			         2, scope_read(d));
		} else {
			if (shadow_check) {
				/* a key that is also a directory's prefix is
				 * listed inside it as %@ */
				memcpy(tmp, key, n - 1);
				tmp[n - 1] = (uint8_t)S.sep;
				bool shadowed;
				if ((err = scope_has_prefix(d, tmp, n, &shadowed)))
					break;
				if (shadowed) {
					if ((err = dir_set_last(h, key, bits)))
						break;
					if ((ks = kvs_view_next(h->v)) != KVS_OK)
						break;
					continue;
				}
			}
			file_stat(&st, key_ino(d, s, ord), &slot_get(s)->st,
			          kvs_cursor_value_len(c),
			          slot_read(slot_get(s)));
			segfs_name_encode(comp, cbits, name);
		}
		if (!emit(fill, ctx, name, &st, eoff, sp ? tmp : NULL,
		          sp ? n : 0, d->sc, !sp)) {
			h->next_off = off;
			break;
		}
		used++;
		off = eoff;
		if ((err = dir_set_last(h, key, bits)))
			break;
		if (!sp)
			ks = kvs_view_next(h->v);
		else if (prefix_successor(tmp, &n))
			ks = kvs_view_seek(h->v, tmp, (uint64_t)n * 8, false);
		else /* nothing sorts after this prefix */
			ks = (h->end = true, KVS_OK);
		if (ks != KVS_OK)
			break;
	}
	free(tmp);
	if (!err && ks != KVS_OK)
		err = scope_fail(d, ks, "listing");
	if (!err && !dir_more(h))
		h->next_off = off; /* at the end: a resume adds nothing */
done:
	/* all of h before the reply: once replied, the listing may be
	 * closed (and h freed) by another thread (-o mt) */
	if (err && used > 0)
		h->err = err; /* not lost: the next call replies with it */
	if (err)
		h->next_off = -1;
	return used > 0 ? 0 : err;
}

