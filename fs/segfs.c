/*
 * segfs.c — the FUSE daemon: a directory of segments as a read-only tree
 * of keys (docs/USAGE.md, "segfs").
 *
 *   /segments/NAME/KEY   every live segment, oldest first in the catalog
 *   /view/KEY            the composed view: each key's newest binding
 *   /control/catalog     the live segments, their generation and modes
 *
 * A thin layer of FUSE low-level operations over libkvseg: every lookup,
 * attribute, listing and read goes through a cursor over the mapped
 * segments, and nothing is unpacked. Inode numbers carry what they name
 * (a segment slot and a record ordinal), so the daemon keeps no per-key
 * state: memory is flat in the number of keys. Only the directories that
 * -o sep makes out of key prefixes live in a table, and only while the
 * kernel holds them.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "kvseg/catalog.h"
#include "kvseg/segment.h"
#include "names.h"
#include "view.h"

#ifndef SEGFS_VERSION
#define SEGFS_VERSION "unknown"
#endif

/* ---- inode numbers ---------------------------------------------------------
 *
 * bits 63..60 the kind; for keys, bits 59..44 the segment slot and 43..0
 * the record's ordinal in that segment. Slots number the segments the
 * daemon has opened, in catalog order at mount.
 */
enum {
	INO_ROOT = FUSE_ROOT_ID,
	INO_SEGMENTS = 2,
	INO_VIEW = 3,
	INO_CONTROL = 4,
	INO_CATALOG = 5,
};
enum ino_kind {
	K_FIXED = 0,
	K_SEGDIR = 1,  /* segments/NAME: slot in the low bits */
	K_SEGKEY = 2,  /* a key of segments/NAME */
	K_VIEWKEY = 3, /* a key of view/ (the binding's slot and ordinal) */
	K_PREFIX = 4,  /* a directory made by -o sep: id in the table */
	K_HINT = 5,    /* d_ino of a plain listing's directory entry */
};
#define ORD_BITS 44
#define SLOT_BITS 16
#define MAX_SLOTS ((size_t)1 << SLOT_BITS)
#define ORD_MASK ((UINT64_C(1) << ORD_BITS) - 1)

static fuse_ino_t make_ino(enum ino_kind k, uint64_t low)
{
	return (fuse_ino_t)((uint64_t)k << 60 | low);
}
static enum ino_kind ino_kind(fuse_ino_t ino) { return (enum ino_kind)(ino >> 60); }
static uint64_t ino_low(fuse_ino_t ino) { return ino & ((UINT64_C(1) << 60) - 1); }
static uint64_t make_pos(uint32_t slot, uint64_t ord)
{
	return (uint64_t)slot << ORD_BITS | ord;
}

/* Directory offsets: 1 after ".", 2 after "..", 3 after "%@" (the key a
 * -o sep directory stands for), 4 + position after the entry at the
 * position (slot and ordinal) of its first record. */
#define OFF_ENTRIES 4

/* ---- state ---------------------------------------------------------------- */

#define SCOPE_VIEW (-1)

typedef struct slot {
	kvs_segment *seg;
	char name[KVS_CATALOG_MAX_NAME + 1];
	kvs_segment_info info;
	struct stat st; /* the segment file's */
} slot;

static struct {
	char *segdir;
	bool tombstones;
	int sep; /* -1: flat directories */
	bool skip_bad;
	bool verify;
	double timeout;
	slot *slots; /* by slot number */
	size_t nslots;
	uint32_t *live; /* slot numbers, oldest first */
	size_t nlive;
	uint64_t generation;
	struct stat dir_st;
	char *catalog_text;
	size_t catalog_len;
	pthread_key_t tls_key;
} S = {.sep = -1, .timeout = 365.0 * 86400};

static int kvs_errno(kvs_status st)
{
	switch (st) {
	case KVS_OK: return 0;
	case KVS_E_NOMEM: return ENOMEM;
	default: return EIO;
	}
}

/* ---- per-thread cursors ----------------------------------------------------
 * Each thread that serves requests keeps one cursor per slot, opened on
 * first use; there is no lock on the read path. */

typedef struct tls_cursors {
	size_t n;
	kvs_cursor **cur;
	kvs_cursor **view; /* the live slots' cursors, oldest first */
} tls_cursors;

static void tls_free(void *p)
{
	tls_cursors *t = p;
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		kvs_cursor_close(t->cur[i]);
	free(t->cur);
	free(t->view);
	free(t);
}

static tls_cursors *tls_get(void)
{
	tls_cursors *t = pthread_getspecific(S.tls_key);
	if (t)
		return t;
	t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->cur = calloc(S.nslots ? S.nslots : 1, sizeof *t->cur);
	t->view = calloc(S.nlive ? S.nlive : 1, sizeof *t->view);
	if (!t->cur || !t->view) {
		tls_free(t);
		return NULL;
	}
	t->n = S.nslots;
	for (size_t i = 0; i < S.nslots; i++) {
		if (!S.slots[i].seg)
			continue;
		if (kvs_cursor_open(&t->cur[i], S.slots[i].seg) != KVS_OK) {
			tls_free(t);
			return NULL;
		}
	}
	for (size_t i = 0; i < S.nlive; i++)
		t->view[i] = t->cur[S.live[i]];
	pthread_setspecific(S.tls_key, t);
	return t;
}

static kvs_cursor *slot_cursor(uint32_t s)
{
	tls_cursors *t = tls_get();
	return t && s < t->n ? t->cur[s] : NULL;
}

/* ---- directories made by -o sep ------------------------------------------ */

typedef struct pnode {
	uint64_t id;
	uint64_t nlookup;
	int32_t scope;
	size_t plen;
	struct pnode *next_key, *next_id;
	uint8_t prefix[];
} pnode;

#define PTAB_SIZE 4096
static struct {
	pthread_mutex_t lock;
	pnode *by_key[PTAB_SIZE], *by_id[PTAB_SIZE];
	uint64_t next_id;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .next_id = 1};

static size_t ptab_hash(int32_t scope, const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603u ^ (uint32_t)scope;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211u;
	return (size_t)(h % PTAB_SIZE);
}

/* The directory (scope, prefix), created if needed, with its lookup count
 * raised by one; 0 when out of memory. */
static fuse_ino_t ptab_ref(int32_t scope, const uint8_t *prefix, size_t plen)
{
	size_t h = ptab_hash(scope, prefix, plen);
	pthread_mutex_lock(&P.lock);
	pnode *n = P.by_key[h];
	while (n && !(n->scope == scope && n->plen == plen &&
	              memcmp(n->prefix, prefix, plen) == 0))
		n = n->next_key;
	if (!n && (n = malloc(sizeof *n + plen))) {
		n->id = P.next_id++;
		n->nlookup = 0;
		n->scope = scope;
		n->plen = plen;
		memcpy(n->prefix, prefix, plen);
		n->next_key = P.by_key[h];
		P.by_key[h] = n;
		n->next_id = P.by_id[n->id % PTAB_SIZE];
		P.by_id[n->id % PTAB_SIZE] = n;
	}
	fuse_ino_t ino = 0;
	if (n) {
		n->nlookup++;
		ino = make_ino(K_PREFIX, n->id);
	}
	pthread_mutex_unlock(&P.lock);
	return ino;
}

static void ptab_forget(uint64_t id, uint64_t count)
{
	pthread_mutex_lock(&P.lock);
	pnode **pp = &P.by_id[id % PTAB_SIZE];
	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next_id;
	pnode *n = *pp;
	if (n && (n->nlookup = n->nlookup > count ? n->nlookup - count : 0) == 0) {
		*pp = n->next_id;
		pnode **kp = &P.by_key[ptab_hash(n->scope, n->prefix, n->plen)];
		while (*kp != n)
			kp = &(*kp)->next_key;
		*kp = n->next_key;
		free(n);
	}
	pthread_mutex_unlock(&P.lock);
}

static void ptab_free_all(void)
{
	for (size_t i = 0; i < PTAB_SIZE; i++) {
		pnode *n = P.by_id[i];
		while (n) {
			pnode *next = n->next_id;
			free(n);
			n = next;
		}
		P.by_id[i] = P.by_key[i] = NULL;
	}
}

/* ---- directories ---------------------------------------------------------- */

/* A directory of keys: a scope (a slot or the view) and a key prefix. */
typedef struct dirref {
	int32_t scope;
	uint8_t *prefix; /* owned */
	size_t plen;
} dirref;

/* Resolves ino to a directory of keys; ENOTDIR or ENOENT otherwise. */
static int dir_resolve(fuse_ino_t ino, dirref *d)
{
	d->prefix = NULL;
	d->plen = 0;
	switch (ino_kind(ino)) {
	case K_FIXED:
		if (ino != INO_VIEW)
			return ENOTDIR;
		d->scope = SCOPE_VIEW;
		return 0;
	case K_SEGDIR:
		if (ino_low(ino) >= S.nslots || !S.slots[ino_low(ino)].seg)
			return ENOENT;
		d->scope = (int32_t)ino_low(ino);
		return 0;
	case K_PREFIX: {
		uint64_t id = ino_low(ino);
		int err = ENOENT;
		pthread_mutex_lock(&P.lock);
		pnode *n = P.by_id[id % PTAB_SIZE];
		while (n && n->id != id)
			n = n->next_id;
		if (n && (d->prefix = malloc(n->plen ? n->plen : 1))) {
			memcpy(d->prefix, n->prefix, n->plen);
			d->plen = n->plen;
			d->scope = n->scope;
			err = 0;
		} else if (n) {
			err = ENOMEM;
		}
		pthread_mutex_unlock(&P.lock);
		return err;
	}
	default:
		return ENOTDIR;
	}
}

/* A borrowed composed cursor over the scope, from this thread's cursors. */
static int scope_borrow(int32_t scope, vcursor *vc)
{
	tls_cursors *t = tls_get();
	if (!t)
		return ENOMEM;
	if (scope == SCOPE_VIEW)
		vc_borrow(vc, t->view, S.nlive, false);
	else
		vc_borrow(vc, &t->cur[scope], 1, S.tombstones);
	return 0;
}

static int scope_open(int32_t scope, vcursor *vc)
{
	kvs_status st;
	if (scope == SCOPE_VIEW) {
		kvs_segment **segs = calloc(S.nlive ? S.nlive : 1, sizeof *segs);
		if (!segs)
			return ENOMEM;
		for (size_t i = 0; i < S.nlive; i++)
			segs[i] = S.slots[S.live[i]].seg;
		st = vc_open(vc, segs, S.nlive, false);
		free(segs);
	} else {
		st = vc_open(vc, &S.slots[scope].seg, 1, S.tombstones);
	}
	return kvs_errno(st);
}

/* The slot of the composed cursor's current binding. */
static uint32_t vc_slot(int32_t scope, const vcursor *vc)
{
	return scope == SCOPE_VIEW ? S.live[vc->winner] : (uint32_t)scope;
}

/* Looks key up in the scope: *found when it has a visible binding, then
 * *slot_out and *ord name it. */
static int scope_lookup(int32_t scope, const uint8_t *key, uint64_t bits,
                        bool *found, uint32_t *slot_out, uint64_t *ord)
{
	*found = false;
	tls_cursors *t = tls_get();
	if (!t)
		return ENOMEM;
	size_t first = scope == SCOPE_VIEW ? S.nlive : 1;
	for (size_t k = first; k-- > 0;) { /* newest first */
		uint32_t s = scope == SCOPE_VIEW ? S.live[k] : (uint32_t)scope;
		kvs_cursor *c = t->cur[s];
		bool hit = false;
		kvs_status st = kvs_cursor_lookup(c, key, bits, &hit);
		if (st != KVS_OK)
			return kvs_errno(st);
		if (!hit)
			continue;
		if (kvs_cursor_kind(c) == KVS_KIND_TOMBSTONE &&
		    !(scope != SCOPE_VIEW && S.tombstones))
			return 0;
		*found = true;
		*slot_out = s;
		*ord = kvs_cursor_ordinal(c);
		return 0;
	}
	return 0;
}

static bool has_prefix(const uint8_t *key, uint64_t bits, const uint8_t *p,
                       size_t plen)
{
	return bits >= (uint64_t)plen * 8 &&
	       (plen == 0 || memcmp(key, p, plen) == 0);
}

/* Does a visible key of the scope start with p? */
static int scope_has_prefix(int32_t scope, const uint8_t *p, size_t plen,
                            bool *yes)
{
	vcursor vc;
	int err = scope_borrow(scope, &vc);
	if (err)
		return err;
	kvs_status st = vc_seek(&vc, p, (uint64_t)plen * 8, false);
	if (st != KVS_OK)
		return kvs_errno(st);
	*yes = false;
	if (vc_valid(&vc)) {
		uint64_t bits;
		const uint8_t *key = kvs_cursor_key(vc_cur(&vc), &bits);
		*yes = has_prefix(key, bits, p, plen);
	}
	return 0;
}

/* ---- attributes ----------------------------------------------------------- */

static void dir_stat(struct stat *st, fuse_ino_t ino, const struct stat *from,
                     nlink_t nlink)
{
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	st->st_mode = S_IFDIR | 0555;
	st->st_nlink = nlink;
	st->st_uid = from->st_uid;
	st->st_gid = from->st_gid;
	st->st_atim = st->st_mtim = from->st_mtim;
	st->st_ctim = from->st_ctim;
	st->st_blksize = 4096;
}

static void file_stat(struct stat *st, fuse_ino_t ino, const struct stat *from,
                      uint64_t size, mode_t mode)
{
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	st->st_mode = S_IFREG | mode;
	st->st_nlink = 1;
	st->st_uid = from->st_uid;
	st->st_gid = from->st_gid;
	st->st_size = (off_t)size;
	st->st_blocks = (blkcnt_t)((size + 511) / 512);
	st->st_atim = st->st_mtim = from->st_mtim;
	st->st_ctim = from->st_ctim;
	st->st_blksize = 4096;
}

static const struct stat *scope_times(int32_t scope)
{
	return scope == SCOPE_VIEW ? &S.dir_st : &S.slots[scope].st;
}

/* Positions this thread's cursor of the slot on record ord. */
static int key_at(uint32_t s, uint64_t ord, kvs_cursor **out)
{
	if (s >= S.nslots || !S.slots[s].seg)
		return ENOENT;
	kvs_cursor *c = slot_cursor(s);
	if (!c)
		return ENOMEM;
	if (ord >= S.slots[s].info.records)
		return ENOENT;
	kvs_status st = kvs_cursor_seek_ordinal(c, ord);
	if (st != KVS_OK)
		return kvs_errno(st);
	if (!kvs_cursor_valid(c))
		return EIO;
	*out = c;
	return 0;
}

/* Attributes of the key file ino, whose cursor is left in *cur. */
static int key_attr(fuse_ino_t ino, struct stat *st, kvs_cursor **cur)
{
	uint64_t low = ino_low(ino);
	uint32_t s = (uint32_t)(low >> ORD_BITS);
	kvs_cursor *c;
	int err = key_at(s, low & ORD_MASK, &c);
	if (err)
		return err;
	file_stat(st, ino, &S.slots[s].st, kvs_cursor_value_len(c), 0444);
	if (cur)
		*cur = c;
	return 0;
}

static int do_getattr(fuse_ino_t ino, struct stat *st)
{
	switch (ino_kind(ino)) {
	case K_FIXED:
		switch (ino) {
		case INO_ROOT: dir_stat(st, ino, &S.dir_st, 5); return 0;
		case INO_SEGMENTS:
			dir_stat(st, ino, &S.dir_st, 2 + (nlink_t)S.nlive);
			return 0;
		case INO_VIEW: dir_stat(st, ino, &S.dir_st, 2); return 0;
		case INO_CONTROL: dir_stat(st, ino, &S.dir_st, 2); return 0;
		case INO_CATALOG:
			file_stat(st, ino, &S.dir_st, S.catalog_len, 0444);
			return 0;
		}
		return ENOENT;
	case K_SEGDIR:
		if (ino_low(ino) >= S.nslots || !S.slots[ino_low(ino)].seg)
			return ENOENT;
		dir_stat(st, ino, &S.slots[ino_low(ino)].st, 2);
		return 0;
	case K_SEGKEY:
	case K_VIEWKEY:
		return key_attr(ino, st, NULL);
	case K_PREFIX: {
		dirref d;
		int err = dir_resolve(ino, &d);
		if (err)
			return err;
		dir_stat(st, ino, scope_times(d.scope), 2);
		free(d.prefix);
		return 0;
	}
	default:
		return ENOENT;
	}
}

/* ---- FUSE operations ------------------------------------------------------ */

static void reply_entry_stat(fuse_req_t req, const struct stat *st)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.ino = st->st_ino;
	e.attr = *st;
	e.attr_timeout = S.timeout;
	e.entry_timeout = S.timeout;
	fuse_reply_entry(req, &e);
}

/* A cached negative lookup. */
static void reply_negative(fuse_req_t req)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.entry_timeout = S.timeout;
	fuse_reply_entry(req, &e);
}

static void reply_ino(fuse_req_t req, fuse_ino_t ino)
{
	struct stat st;
	int err = do_getattr(ino, &st);
	if (err)
		fuse_reply_err(req, err);
	else
		reply_entry_stat(req, &st);
}

/* The key file (scope, slot, ord) as an entry. */
static fuse_ino_t key_ino(int32_t scope, uint32_t s, uint64_t ord)
{
	return make_ino(scope == SCOPE_VIEW ? K_VIEWKEY : K_SEGKEY,
	                make_pos(s, ord));
}

/* Finds the entry called name (len bytes) in directory d: a key file
 * (*ino of a key) or, with -o sep, a directory (*dir_prefix set, owned). */
static int dir_find(const dirref *d, const char *name, size_t len,
                    fuse_ino_t *ino, uint8_t **dir_prefix, size_t *dir_plen)
{
	*ino = 0;
	*dir_prefix = NULL;
	bool sep = S.sep >= 0;
	size_t cap = d->plen + len + 2;
	uint8_t *key = malloc(cap);
	if (!key)
		return ENOMEM;
	if (d->plen)
		memcpy(key, d->prefix, d->plen);
	int err = 0;
	bool found;
	uint32_t s;
	uint64_t ord;
	if (sep && d->plen > 0 && len == 2 && memcmp(name, "%@", 2) == 0) {
		/* the key this directory's prefix stands for */
		err = scope_lookup(d->scope, key, (uint64_t)(d->plen - 1) * 8,
		                   &found, &s, &ord);
		if (!err && found)
			*ino = key_ino(d->scope, s, ord);
		goto out;
	}
	uint64_t cbits;
	segfs_name_kind kind =
	    segfs_name_decode(name, len, key + d->plen, &cbits);
	if (kind == SEGFS_NAME_INVALID)
		goto out;
	if (kind == SEGFS_NAME_EXACT) {
		if (!segfs_name_matches(key + d->plen, cbits, name, len))
			goto out; /* not canonical */
		size_t cbytes = (size_t)(cbits / 8);
		if (sep && memchr(key + d->plen, S.sep, cbytes))
			goto out; /* a separator is never inside a component */
		if (sep && cbits % 8 == 0) {
			key[d->plen + cbytes] = (uint8_t)S.sep;
			bool yes;
			size_t plen = d->plen + cbytes + 1;
			if ((err = scope_has_prefix(d->scope, key, plen, &yes)))
				goto out;
			if (yes) {
				*dir_prefix = key;
				*dir_plen = plen;
				return 0;
			}
		}
		err = scope_lookup(d->scope, key, (uint64_t)d->plen * 8 + cbits,
		                   &found, &s, &ord);
		if (!err && found)
			*ino = key_ino(d->scope, s, ord);
		goto out;
	}
	/* Hashed: scan the visible keys that start with the name's prefix
	 * for the one whose component has this name. */
	vcursor vc;
	if ((err = scope_borrow(d->scope, &vc)))
		goto out;
	size_t qlen = d->plen + (size_t)(cbits / 8);
	kvs_status st = vc_seek(&vc, key, (uint64_t)qlen * 8, false);
	while (st == KVS_OK && vc_valid(&vc)) {
		uint64_t bits;
		const uint8_t *k = kvs_cursor_key(vc_cur(&vc), &bits);
		if (!has_prefix(k, bits, key, qlen))
			break;
		const uint8_t *comp = k + d->plen;
		uint64_t comp_bits = bits - (uint64_t)d->plen * 8;
		const uint8_t *sp = sep ? memchr(comp, S.sep, comp_bits / 8)
		                        : NULL;
		if (sp)
			comp_bits = (uint64_t)(sp - comp) * 8;
		if (segfs_name_matches(comp, comp_bits, name, len)) {
			if (sp) {
				size_t plen = (size_t)(sp - k) + 1;
				uint8_t *p = malloc(plen);
				if (!p) {
					err = ENOMEM;
					goto out;
				}
				memcpy(p, k, plen);
				*dir_prefix = p;
				*dir_plen = plen;
			} else {
				*ino = key_ino(d->scope, vc_slot(d->scope, &vc),
				               kvs_cursor_ordinal(vc_cur(&vc)));
			}
			goto out;
		}
		st = vc_next(&vc);
	}
	err = kvs_errno(st);
out:
	free(key);
	return err;
}

static void segfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	size_t len = strlen(name);
	if (len > SEGFS_NAME_MAX) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	switch (parent) {
	case INO_ROOT:
		if (!strcmp(name, "segments"))
			reply_ino(req, INO_SEGMENTS);
		else if (!strcmp(name, "view"))
			reply_ino(req, INO_VIEW);
		else if (!strcmp(name, "control"))
			reply_ino(req, INO_CONTROL);
		else
			reply_negative(req);
		return;
	case INO_SEGMENTS:
		for (size_t i = 0; i < S.nlive; i++)
			if (!strcmp(S.slots[S.live[i]].name, name)) {
				reply_ino(req, make_ino(K_SEGDIR, S.live[i]));
				return;
			}
		reply_negative(req);
		return;
	case INO_CONTROL:
		if (!strcmp(name, "catalog"))
			reply_ino(req, INO_CATALOG);
		else
			reply_negative(req);
		return;
	default:
		break;
	}
	dirref d;
	int err = dir_resolve(parent, &d);
	if (err) {
		fuse_reply_err(req, err);
		return;
	}
	fuse_ino_t ino;
	uint8_t *dp;
	size_t dplen;
	err = dir_find(&d, name, len, &ino, &dp, &dplen);
	if (!err && dp) {
		struct stat st;
		fuse_ino_t dino = ptab_ref(d.scope, dp, dplen);
		free(dp);
		if (!dino) {
			err = ENOMEM;
		} else {
			dir_stat(&st, dino, scope_times(d.scope), 2);
			reply_entry_stat(req, &st);
		}
	} else if (!err && ino) {
		reply_ino(req, ino);
	} else if (!err) {
		reply_negative(req);
	}
	if (err)
		fuse_reply_err(req, err);
	free(d.prefix);
}

static void segfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	if (ino_kind(ino) == K_PREFIX)
		ptab_forget(ino_low(ino), nlookup);
	fuse_reply_none(req);
}

static void segfs_forget_multi(fuse_req_t req, size_t count,
                               struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		if (ino_kind(forgets[i].ino) == K_PREFIX)
			ptab_forget(ino_low(forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

static void segfs_getattr(fuse_req_t req, fuse_ino_t ino,
                          struct fuse_file_info *fi)
{
	(void)fi;
	struct stat st;
	int err = do_getattr(ino, &st);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_attr(req, &st, S.timeout);
}

static void segfs_open(fuse_req_t req, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
	(void)ino;
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* Nothing to open: the kernel then stops sending open and release
	 * (no-open support) and keeps the page cache of these immutable
	 * files across opens. */
	fuse_reply_err(req, ENOSYS);
}

static void segfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
	(void)fi;
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (ino == INO_CATALOG) {
		size_t o = (size_t)off < S.catalog_len ? (size_t)off
		                                       : S.catalog_len;
		size_t n = S.catalog_len - o < size ? S.catalog_len - o : size;
		fuse_reply_buf(req, S.catalog_text + o, n);
		return;
	}
	if (ino_kind(ino) != K_SEGKEY && ino_kind(ino) != K_VIEWKEY) {
		fuse_reply_err(req, ino_kind(ino) == K_FIXED ||
		                            ino_kind(ino) == K_SEGDIR ||
		                            ino_kind(ino) == K_PREFIX
		                        ? EISDIR
		                        : ENOENT);
		return;
	}
	struct stat st;
	kvs_cursor *c;
	int err = key_attr(ino, &st, &c);
	if (err) {
		fuse_reply_err(req, err);
		return;
	}
	const uint8_t *value;
	size_t len;
	kvs_status ks = kvs_cursor_value(c, &value, &len);
	if (ks != KVS_OK) {
		fuse_reply_err(req, kvs_errno(ks));
		return;
	}
	size_t o = (uint64_t)off < len ? (size_t)off : len;
	size_t n = len - o < size ? len - o : size;
	fuse_reply_buf(req, (const char *)value + o, n);
}

/* ---- listings ------------------------------------------------------------- */

typedef struct dirh {
	dirref d;
	vcursor vc;
	off_t next_off; /* the offset the cursor's position continues, or -1 */
} dirh;

static void segfs_opendir(fuse_req_t req, fuse_ino_t ino,
                          struct fuse_file_info *fi)
{
	fi->fh = 0;
	if (ino_kind(ino) == K_FIXED && ino != INO_VIEW) {
		if (ino == INO_CATALOG) {
			fuse_reply_err(req, ENOTDIR);
			return;
		}
		fi->cache_readdir = 1;
		fi->keep_cache = 1;
		fuse_reply_open(req, fi);
		return;
	}
	dirh *h = calloc(1, sizeof *h);
	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	int err = dir_resolve(ino, &h->d);
	if (!err)
		err = scope_open(h->d.scope, &h->vc);
	if (err) {
		free(h->d.prefix);
		free(h);
		fuse_reply_err(req, err);
		return;
	}
	h->next_off = -1;
	fi->fh = (uint64_t)(uintptr_t)h;
	/* Segments never change, and neither does the view while the
	 * catalog does not: let the kernel cache listings. */
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void segfs_releasedir(fuse_req_t req, fuse_ino_t ino,
                             struct fuse_file_info *fi)
{
	(void)ino;
	dirh *h = (dirh *)(uintptr_t)fi->fh;
	if (h) {
		vc_close(&h->vc);
		free(h->d.prefix);
		free(h);
	}
	fuse_reply_err(req, 0);
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

/* Positions the handle's cursor on the first entry after offset off. */
static int dir_position(dirh *h, off_t off)
{
	dirref *d = &h->d;
	kvs_status st;
	if (off < OFF_ENTRIES) {
		st = d->scope != SCOPE_VIEW && d->plen == 0
		         ? vc_seek_ordinal(&h->vc, 0)
		         : vc_seek(&h->vc, d->prefix, (uint64_t)d->plen * 8,
		                   false);
		return kvs_errno(st);
	}
	uint64_t pos = (uint64_t)off - OFF_ENTRIES;
	uint32_t s = (uint32_t)(pos >> ORD_BITS);
	uint64_t ord = pos & ORD_MASK;
	if (d->scope != SCOPE_VIEW && S.sep < 0)
		return kvs_errno(vc_seek_ordinal(&h->vc, ord + 1));
	kvs_cursor *c;
	int err = key_at(s, ord, &c);
	if (err)
		return err == ENOENT ? EINVAL : err;
	uint64_t bits;
	const uint8_t *key = kvs_cursor_key(c, &bits);
	if (!has_prefix(key, bits, d->prefix, d->plen))
		return EINVAL;
	const uint8_t *rest = key + d->plen;
	const uint8_t *sp =
	    S.sep >= 0 ? memchr(rest, S.sep, (bits / 8) - d->plen) : NULL;
	if (!sp)
		return kvs_errno(vc_seek(&h->vc, key, bits, true));
	/* the entry was a directory: continue after its prefix */
	size_t n = (size_t)(sp - key) + 1;
	uint8_t *p = malloc(n);
	if (!p)
		return ENOMEM;
	memcpy(p, key, n);
	if (prefix_successor(p, &n))
		st = vc_seek(&h->vc, p, (uint64_t)n * 8, false);
	else
		st = (h->vc.winner = -1, KVS_OK);
	free(p);
	return kvs_errno(st);
}

/* Adds one entry to buf in the readdir or readdirplus form; returns its
 * size, or 0 when it does not fit (and then nothing was added or counted).
 * A directory of -o sep (dprefix) gets its inode, and a lookup count, only
 * when it is sent with attributes. */
static size_t add_entry(fuse_req_t req, bool plus, char *buf, size_t room,
                        const char *name, struct stat *st, off_t off,
                        const uint8_t *dprefix, size_t dplen, int32_t scope)
{
	size_t need = plus ? fuse_add_direntry_plus(req, NULL, 0, name, NULL, 0)
	                   : fuse_add_direntry(req, NULL, 0, name, NULL, 0);
	if (need > room)
		return 0;
	if (!plus)
		return fuse_add_direntry(req, buf, room, name, st, off);
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	if (dprefix) {
		fuse_ino_t ino = ptab_ref(scope, dprefix, dplen);
		if (!ino)
			return 0;
		st->st_ino = ino;
	}
	e.ino = st->st_ino;
	e.attr = *st;
	e.attr_timeout = S.timeout;
	e.entry_timeout = S.timeout;
	return fuse_add_direntry_plus(req, buf, room, name, &e, off);
}

static void fixed_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                          off_t off, bool plus)
{
	const char *names[3 + 1] = {0};
	fuse_ino_t inos[3 + 1] = {0};
	size_t n = 0;
	if (ino == INO_ROOT) {
		names[0] = "segments", inos[0] = INO_SEGMENTS;
		names[1] = "view", inos[1] = INO_VIEW;
		names[2] = "control", inos[2] = INO_CONTROL;
		n = 3;
	} else if (ino == INO_CONTROL) {
		names[0] = "catalog", inos[0] = INO_CATALOG;
		n = 1;
	}
	size_t total = 2 + (ino == INO_SEGMENTS ? S.nlive : n);
	char *buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t used = 0;
	for (size_t i = (size_t)(off < 0 ? 0 : off); i < total; i++) {
		const char *name;
		fuse_ino_t child;
		if (i < 2)
			name = i ? ".." : ".", child = ino;
		else if (ino == INO_SEGMENTS)
			name = S.slots[S.live[i - 2]].name,
			child = make_ino(K_SEGDIR, S.live[i - 2]);
		else
			name = names[i - 2], child = inos[i - 2];
		struct stat st;
		if (do_getattr(child, &st) != 0)
			continue;
		size_t got = add_entry(req, plus, buf + used, size - used,
		                       name, &st, (off_t)i + 1, NULL, 0, 0);
		if (!got)
			break;
		used += got;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi, bool plus)
{
	dirh *h = (dirh *)(uintptr_t)fi->fh;
	if (!h) {
		fixed_readdir(req, ino, size, off, plus);
		return;
	}
	dirref *d = &h->d;
	char *buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t used = 0, got;
	int err = 0;
	struct stat st;
	const struct stat *times = scope_times(d->scope);
	bool sep = S.sep >= 0;
	/* "." and ".." (the kernel links neither) */
	for (; off < 2; off++) {
		dir_stat(&st, ino, times, 2);
		got = add_entry(req, plus, buf + used, size - used,
		                off == 0 ? "." : "..", &st, off + 1, NULL, 0, 0);
		if (!got)
			goto done;
		used += got;
	}
	if (off < 3) {
		if (sep && d->plen > 0) { /* "%@": the key the prefix names */
			bool found;
			uint32_t s;
			uint64_t ord;
			err = scope_lookup(d->scope, d->prefix,
			                   (uint64_t)(d->plen - 1) * 8, &found,
			                   &s, &ord);
			if (err)
				goto done;
			if (found) {
				fuse_ino_t kino = key_ino(d->scope, s, ord);
				if ((err = do_getattr(kino, &st)))
					goto done;
				got = add_entry(req, plus, buf + used,
				                size - used, "%@", &st, 3,
				                NULL, 0, 0);
				if (!got)
					goto done;
				used += got;
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
	while (vc_valid(&h->vc)) {
		kvs_cursor *c = vc_cur(&h->vc);
		uint64_t bits;
		const uint8_t *key = kvs_cursor_key(c, &bits);
		if (!has_prefix(key, bits, d->prefix, d->plen)) {
			h->vc.winner = -1;
			break;
		}
		uint32_t s = vc_slot(d->scope, &h->vc);
		uint64_t ord = kvs_cursor_ordinal(c);
		off_t eoff = (off_t)(OFF_ENTRIES + make_pos(s, ord));
		const uint8_t *comp = key + d->plen;
		uint64_t cbits = bits - (uint64_t)d->plen * 8;
		const uint8_t *sp = sep ? memchr(comp, S.sep, cbits / 8) : NULL;
		char name[SEGFS_NAME_MAX + 1];
		if (sp) { /* a directory of keys: skip past its prefix */
			size_t n = (size_t)(sp - key) + 1;
			if (n > tmp_cap) {
				uint8_t *t = realloc(tmp, n);
				if (!t) {
					err = ENOMEM;
					break;
				}
				tmp = t;
				tmp_cap = n;
			}
			memcpy(tmp, key, n);
			segfs_name_encode(comp, (uint64_t)(sp - comp) * 8, name);
			dir_stat(&st, make_ino(K_HINT, make_pos(s, ord)), times,
			         2);
			got = add_entry(req, plus, buf + used, size - used, name,
			                &st, eoff, tmp, n, d->scope);
			if (!got) {
				h->next_off = off;
				break;
			}
			used += got;
			off = eoff;
			ks = prefix_successor(tmp, &n)
			         ? vc_seek(&h->vc, tmp, (uint64_t)n * 8, false)
			         : (h->vc.winner = -1, KVS_OK);
		} else {
			if (sep && cbits % 8 == 0) {
				/* a key that is also a directory's prefix is
				 * listed inside it as %@ */
				size_t n = (size_t)(bits / 8);
				if (n + 1 > tmp_cap) {
					uint8_t *t = realloc(tmp, n + 1);
					if (!t) {
						err = ENOMEM;
						break;
					}
					tmp = t;
					tmp_cap = n + 1;
				}
				memcpy(tmp, key, n);
				tmp[n] = (uint8_t)S.sep;
				bool shadowed;
				if ((err = scope_has_prefix(d->scope, tmp, n + 1,
				                            &shadowed)))
					break;
				if (shadowed) {
					if ((ks = vc_next(&h->vc)) != KVS_OK)
						break;
					continue;
				}
			}
			file_stat(&st, key_ino(d->scope, s, ord), &S.slots[s].st,
			          kvs_cursor_value_len(c), 0444);
			segfs_name_encode(comp, cbits, name);
			got = add_entry(req, plus, buf + used, size - used, name,
			                &st, eoff, NULL, 0, 0);
			if (!got) {
				h->next_off = off;
				break;
			}
			used += got;
			off = eoff;
			ks = vc_next(&h->vc);
		}
		if (ks != KVS_OK)
			break;
	}
	free(tmp);
	if (!err && ks != KVS_OK)
		err = kvs_errno(ks);
	if (!err && !vc_valid(&h->vc))
		h->next_off = off; /* at the end: a resume adds nothing */
done:
	if (err && used == 0)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, used);
	if (err)
		h->next_off = -1;
	free(buf);
}

static void segfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                          off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void segfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
                              off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

/* ---- extended attributes -------------------------------------------------- */

static const char xattr_names[] =
    "user.segfs.key\0user.segfs.key_bits\0user.segfs.segment\0";
static const char xattr_tomb[] = "user.segfs.tombstone\0";

static void reply_xattr_value(fuse_req_t req, const void *v, size_t len,
                              size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, v, len);
}

static void segfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                           size_t size)
{
	if (ino_kind(ino) != K_SEGKEY && ino_kind(ino) != K_VIEWKEY) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	struct stat st;
	kvs_cursor *c;
	int err = key_attr(ino, &st, &c);
	if (err) {
		fuse_reply_err(req, err);
		return;
	}
	uint64_t bits;
	const uint8_t *key = kvs_cursor_key(c, &bits);
	char text[32];
	if (!strcmp(name, "user.segfs.key")) {
		reply_xattr_value(req, key, (size_t)((bits + 7) / 8), size);
	} else if (!strcmp(name, "user.segfs.key_bits")) {
		int n = snprintf(text, sizeof text, "%" PRIu64, bits);
		reply_xattr_value(req, text, (size_t)n, size);
	} else if (!strcmp(name, "user.segfs.segment")) {
		const char *seg = S.slots[ino_low(ino) >> ORD_BITS].name;
		reply_xattr_value(req, seg, strlen(seg), size);
	} else if (!strcmp(name, "user.segfs.tombstone") &&
	           kvs_cursor_kind(c) == KVS_KIND_TOMBSTONE) {
		reply_xattr_value(req, "1", 1, size);
	} else {
		fuse_reply_err(req, ENODATA);
	}
}

static void segfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	if (ino_kind(ino) != K_SEGKEY && ino_kind(ino) != K_VIEWKEY) {
		reply_xattr_value(req, "", 0, size);
		return;
	}
	struct stat st;
	kvs_cursor *c;
	int err = key_attr(ino, &st, &c);
	if (err) {
		fuse_reply_err(req, err);
		return;
	}
	char list[sizeof xattr_names + sizeof xattr_tomb];
	size_t n = sizeof xattr_names - 1;
	memcpy(list, xattr_names, n);
	if (kvs_cursor_kind(c) == KVS_KIND_TOMBSTONE) {
		memcpy(list + n, xattr_tomb, sizeof xattr_tomb - 1);
		n += sizeof xattr_tomb - 1;
	}
	reply_xattr_value(req, list, n, size);
}

static void segfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	struct statvfs sv;
	memset(&sv, 0, sizeof sv);
	uint64_t bytes = 0, files = 0;
	for (size_t i = 0; i < S.nlive; i++) {
		bytes += S.slots[S.live[i]].info.file_bytes;
		files += S.slots[S.live[i]].info.records;
	}
	sv.f_bsize = sv.f_frsize = 4096;
	sv.f_blocks = (fsblkcnt_t)((bytes + 4095) / 4096);
	sv.f_files = (fsfilcnt_t)files;
	sv.f_namemax = SEGFS_NAME_MAX;
	sv.f_flag = ST_NOSUID | ST_NODEV;
	fuse_reply_statfs(req, &sv);
}

/* ---- everything that would change the tree: EROFS ------------------------- */

static void erofs_entry(fuse_req_t req) { fuse_reply_err(req, EROFS); }

static void segfs_mknod(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m,
                        dev_t r)
{
	(void)p, (void)n, (void)m, (void)r;
	erofs_entry(req);
}
static void segfs_mkdir(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m)
{
	(void)p, (void)n, (void)m;
	erofs_entry(req);
}
static void segfs_unlink(fuse_req_t req, fuse_ino_t p, const char *n)
{
	(void)p, (void)n;
	erofs_entry(req);
}
static void segfs_symlink(fuse_req_t req, const char *l, fuse_ino_t p,
                          const char *n)
{
	(void)l, (void)p, (void)n;
	erofs_entry(req);
}
static void segfs_rename(fuse_req_t req, fuse_ino_t p, const char *n,
                         fuse_ino_t np, const char *nn, unsigned flags)
{
	(void)p, (void)n, (void)np, (void)nn, (void)flags;
	erofs_entry(req);
}
static void segfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t np,
                       const char *nn)
{
	(void)ino, (void)np, (void)nn;
	erofs_entry(req);
}
static void segfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
                          int to_set, struct fuse_file_info *fi)
{
	(void)ino, (void)attr, (void)to_set, (void)fi;
	erofs_entry(req);
}
static void segfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
                        size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino, (void)buf, (void)size, (void)off, (void)fi;
	erofs_entry(req);
}
static void segfs_create(fuse_req_t req, fuse_ino_t p, const char *n,
                         mode_t m, struct fuse_file_info *fi)
{
	(void)p, (void)n, (void)m, (void)fi;
	erofs_entry(req);
}
static void segfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *n,
                           const char *v, size_t size, int flags)
{
	(void)ino, (void)n, (void)v, (void)size, (void)flags;
	erofs_entry(req);
}
static void segfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *n)
{
	(void)ino, (void)n;
	erofs_entry(req);
}
static void segfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
                            off_t off, off_t len, struct fuse_file_info *fi)
{
	(void)ino, (void)mode, (void)off, (void)len, (void)fi;
	erofs_entry(req);
}

static const struct fuse_lowlevel_ops segfs_ops = {
	.lookup = segfs_lookup,
	.forget = segfs_forget,
	.forget_multi = segfs_forget_multi,
	.getattr = segfs_getattr,
	.open = segfs_open,
	.read = segfs_read,
	.opendir = segfs_opendir,
	.readdir = segfs_readdir,
	.readdirplus = segfs_readdirplus,
	.releasedir = segfs_releasedir,
	.statfs = segfs_statfs,
	.getxattr = segfs_getxattr,
	.listxattr = segfs_listxattr,
	.mknod = segfs_mknod,
	.mkdir = segfs_mkdir,
	.unlink = segfs_unlink,
	.rmdir = segfs_unlink,
	.symlink = segfs_symlink,
	.rename = segfs_rename,
	.link = segfs_link,
	.setattr = segfs_setattr,
	.write = segfs_write,
	.create = segfs_create,
	.setxattr = segfs_setxattr,
	.removexattr = segfs_removexattr,
	.fallocate = segfs_fallocate,
};

/* ---- mounting ------------------------------------------------------------- */

static const char *profile_name(const kvs_segment_info *i)
{
	static const char *const n[2][2] = {{"typed-byte", "raw-byte"},
	                                    {"typed-bit", "raw-bit"}};
	return n[i->profile == KVS_PROFILE_BIT][i->framing == KVS_FRAMING_RAW];
}

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("segfs: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* Opens and checks every live segment; a bad one stops the mount, or with
 * -o skip_bad is left out of segments/ and view/ with a warning. */
static void load(void)
{
	kvs_error err;
	kvs_catalog *cat;
	if (kvs_catalog_open_flags(&cat, S.segdir, KVS_CATALOG_NO_CHECK,
	                           &err) != KVS_OK)
		die("%s", err.message);
	if (stat(S.segdir, &S.dir_st) < 0)
		die("%s: %s", S.segdir, strerror(errno));
	char cpath[PATH_MAX];
	snprintf(cpath, sizeof cpath, "%s/%s", S.segdir, KVS_CATALOG_FILE);
	struct stat cst;
	if (stat(cpath, &cst) == 0) { /* the view changes with the catalog */
		S.dir_st.st_mtim = cst.st_mtim;
		S.dir_st.st_ctim = cst.st_ctim;
	}
	size_t n = kvs_catalog_count(cat);
	if (n > MAX_SLOTS)
		die("%s: %zu segments, more than %zu", S.segdir, n, MAX_SLOTS);
	S.generation = kvs_catalog_generation(cat);
	S.slots = calloc(n ? n : 1, sizeof *S.slots);
	S.live = calloc(n ? n : 1, sizeof *S.live);
	if (!S.slots || !S.live)
		die("out of memory");
	S.nslots = n;
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		const kvs_catalog_entry *e = kvs_catalog_entry_at(cat, i);
		slot *sl = &S.slots[i];
		snprintf(sl->name, sizeof sl->name, "%s", e->name);
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", S.segdir, e->name);
		kvs_status st = kvs_segment_open(&sl->seg, path, &err);
		if (st == KVS_OK) {
			kvs_segment_info_get(sl->seg, &sl->info);
			if (sl->info.file_bytes != e->size ||
			    sl->info.header_crc != e->header_crc ||
			    sl->info.sequence != e->sequence) {
				st = kvs_error_set(
				    &err, KVS_E_CORRUPT,
				    "%s: not the segment the catalog names "
				    "(size, header CRC or sequence differ)",
				    path);
			}
		}
		if (st == KVS_OK && stat(path, &sl->st) < 0)
			st = kvs_error_set(&err, KVS_E_IO, "%s: %s", path,
			                   strerror(errno));
		if (st == KVS_OK && S.verify)
			st = kvs_segment_verify(sl->seg, &err) == KVS_OK
			         ? KVS_OK
			         : kvs_error_set(&err, KVS_E_CORRUPT, "%s: %s",
			                         path, err.message);
		if (st == KVS_OK && sl->info.records > ORD_MASK)
			st = kvs_error_set(&err, KVS_E_UNSUPPORTED,
			                   "%s: more than 2^44 records", path);
		if (st != KVS_OK) {
			kvs_segment_unref(sl->seg);
			sl->seg = NULL;
			if (!S.skip_bad)
				die("bad segment: %s (use -o skip_bad to mount "
				    "without it)",
				    err.message);
			fprintf(stderr, "segfs: skipping bad segment: %s\n",
			        err.message);
			bad++;
			continue;
		}
		S.live[S.nlive++] = (uint32_t)i;
	}
	kvs_catalog_close(cat);

	/* control/catalog */
	size_t cap = 256 + n * (KVS_CATALOG_MAX_NAME + 160);
	S.catalog_text = malloc(cap);
	if (!S.catalog_text)
		die("out of memory");
	size_t len = (size_t)snprintf(
	    S.catalog_text, cap,
	    "generation %" PRIu64 "\nsegments %zu\n"
	    "# name sequence mode restart records tombstones bytes\n",
	    S.generation, S.nlive);
	for (size_t i = 0; i < S.nlive; i++) {
		const slot *sl = &S.slots[S.live[i]];
		len += (size_t)snprintf(
		    S.catalog_text + len, cap - len,
		    "%s %" PRIu64 " %s %" PRIu32 " %" PRIu64 " %" PRIu64
		    " %" PRIu64 "\n",
		    sl->name, sl->info.sequence, profile_name(&sl->info),
		    sl->info.restart_interval, sl->info.records,
		    sl->info.tombstones, sl->info.file_bytes);
	}
	S.catalog_len = len;
	(void)bad;
}

static void unload(void)
{
	tls_free(pthread_getspecific(S.tls_key));
	pthread_setspecific(S.tls_key, NULL);
	for (size_t i = 0; i < S.nslots; i++)
		kvs_segment_unref(S.slots[i].seg);
	free(S.slots);
	free(S.live);
	free(S.catalog_text);
	ptab_free_all();
}

/* ---- command line --------------------------------------------------------- */

struct cli {
	char *segdir;
	char *sep;
	int tombstones, skip_bad, verify, mt;
	double timeout;
};

#define OPT(t, p) {t, offsetof(struct cli, p), 1}
static const struct fuse_opt cli_opts[] = {
	OPT("tombstones", tombstones), OPT("skip_bad", skip_bad),
	OPT("verify", verify), OPT("mt", mt),
	{"sep=%s", offsetof(struct cli, sep), 0},
	{"timeout=%lf", offsetof(struct cli, timeout), 0},
	FUSE_OPT_END,
};

static int cli_proc(void *data, const char *arg, int key,
                    struct fuse_args *outargs)
{
	(void)outargs;
	struct cli *c = data;
	if (key == FUSE_OPT_KEY_NONOPT && !c->segdir) {
		c->segdir = strdup(arg);
		return 0; /* the first non-option is SEGDIR */
	}
	return 1;
}

static void usage(const char *prog)
{
	printf("Usage: %s [options] SEGDIR MOUNTPOINT\n\n"
	       "Mounts the segment directory SEGDIR (its catalog of live\n"
	       "segments) read-only at MOUNTPOINT: segments/NAME/KEY for each\n"
	       "segment, view/KEY for the newest binding of every key,\n"
	       "control/catalog. docs/USAGE.md has the whole story.\n\n"
	       "segfs options:\n"
	       "    -o tombstones      show tombstones in segments/ as empty\n"
	       "                       files (xattr user.segfs.tombstone)\n"
	       "    -o sep=C           keys containing the byte C (e.g. /)\n"
	       "                       show as nested directories\n"
	       "    -o skip_bad        leave out segments that fail their\n"
	       "                       checks instead of refusing to mount\n"
	       "    -o verify          check every segment fully (CRC and\n"
	       "                       every record) before mounting\n"
	       "    -o mt              serve requests on several threads\n"
	       "                       (default: one thread, faster here)\n"
	       "    -o timeout=SECS    kernel cache timeout for entries and\n"
	       "                       attributes (default one year)\n\n",
	       prog);
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct cli cli = {.timeout = S.timeout};
	struct fuse_cmdline_opts opts;
	int ret = 1;

	if (fuse_opt_parse(&args, &cli, cli_opts, cli_proc) != 0)
		return 2;
	if (cli.sep) {
		if (strlen(cli.sep) != 1) {
			fprintf(stderr, "segfs: -o sep= takes one byte, not "
			                "\"%s\"\n",
			        cli.sep);
			fuse_opt_free_args(&args);
			free(cli.segdir);
			free(cli.sep);
			return 2;
		}
		S.sep = (unsigned char)cli.sep[0];
	}
	if (fuse_parse_cmdline(&args, &opts) != 0) {
		fuse_opt_free_args(&args);
		free(cli.segdir);
		free(cli.sep);
		return 2;
	}
	if (opts.show_help) {
		usage(argv[0]);
		fuse_cmdline_help();
		fuse_lowlevel_help();
		ret = 0;
		goto out_args;
	}
	if (opts.show_version) {
		printf("segfs %s\n", SEGFS_VERSION);
		fuse_lowlevel_version();
		ret = 0;
		goto out_args;
	}
	if (!cli.segdir || !opts.mountpoint) {
		fprintf(stderr,
		        "segfs: usage: %s [options] SEGDIR MOUNTPOINT "
		        "(--help for more)\n",
		        argv[0]);
		ret = 2;
		goto out_args;
	}
	if (!(cli.timeout >= 0 && cli.timeout <= 1e9)) {
		fprintf(stderr, "segfs: -o timeout= must be 0..1e9 seconds\n");
		ret = 2;
		goto out_args;
	}
	S.segdir = cli.segdir;
	S.tombstones = cli.tombstones;
	S.skip_bad = cli.skip_bad;
	S.verify = cli.verify;
	S.timeout = cli.timeout;
	if (pthread_key_create(&S.tls_key, tls_free) != 0)
		die("pthread_key_create failed");
	load();

	/* read-only files and directories, checked by the kernel */
	fuse_opt_add_arg(&args, "-odefault_permissions");
	struct fuse_session *se =
	    fuse_session_new(&args, &segfs_ops, sizeof segfs_ops, NULL);
	if (!se)
		goto out_unload;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_session;
	if (fuse_session_mount(se, opts.mountpoint) != 0)
		goto out_signals;
	fuse_daemonize(opts.foreground);
	/* The loops return the number of the signal that ended them (a
	 * clean unmount) or a negative errno. */
	if (!cli.mt || opts.singlethread) {
		ret = fuse_session_loop(se);
	} else {
		struct fuse_loop_config *cfg = fuse_loop_cfg_create();
		fuse_loop_cfg_set_clone_fd(cfg, (unsigned)opts.clone_fd);
		fuse_loop_cfg_set_max_threads(cfg, opts.max_threads);
		ret = fuse_session_loop_mt(se, cfg);
		fuse_loop_cfg_destroy(cfg);
	}
	ret = ret < 0 ? 1 : 0;
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_unload:
	unload();
out_args:
	free(opts.mountpoint);
	free(cli.segdir);
	free(cli.sep);
	fuse_opt_free_args(&args);
	return ret;
}
