/*
 * scope.c — directories of keys, the layer under the namespace's lookups
 * and listings (scope.h): a directory is a scope (one segment, or view/'s
 * stack of them) and a key prefix; its keys are read through this
 * thread's cursors. Also the attributes every file and directory of keys
 * gets, and why a request fails with EIO (each EIO is logged where it
 * arises, naming the segment and the request).
 */
#include "namespace.h"
#include "scope.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* ---- scopes -------------------------------------------------------------- */

static int scope_check(const scope *sc, snap **sn)
{
	*sn = NULL;
	if (sc->view) {
		*sn = snap_current();
		return 0;
	}
	slot *s = slot_get(sc->id);
	return slot_alive(s) ? 0 : ENOENT;
}

/*
 * Is the directory under a view/ that the catalog has since replaced
 * (state.c, invalidate)? The kernel then has dropped that view/'s entry,
 * but a lookup racing with the drop can still come through it: an entry
 * it cached there would be out of reach, yet held (and its segment with
 * it) for the entry timeout. Entries there are given no time in the
 * cache, so the kernel forgets each after use.
 */
bool scope_is_stale(scope sc)
{
	return sc.view && sc.id != atomic_load(&S.view_epoch);
}

bool scope_stale(const dirref *d) { return scope_is_stale(d->sc); }

void dir_release(dirref *d)
{
	snap_unref(d->sn, 1);
	d->sn = NULL;
	free(d->prefix);
	d->prefix = NULL;
}

/* Resolves ino to a directory of keys; ENOTDIR or ENOENT otherwise. On
 * success the caller calls dir_release. */
int dir_resolve(uint64_t ino, dirref *d)
{
	d->prefix = NULL;
	d->plen = 0;
	d->sn = NULL;
	switch (ino_kind(ino)) {
	case K_VIEWDIR:
		d->sc = (scope){true, ino_low(ino)}; /* its epoch */
		break;
	case K_SEGDIR:
		d->sc = (scope){false, ino_low(ino)};
		break;
	case K_PREFIX: {
		int err = ptab_get(ino_low(ino), &d->sc, &d->prefix, &d->plen);
		if (err)
			return err;
		break;
	}
	default:
		return ENOTDIR;
	}
	int err = scope_check(&d->sc, &d->sn);
	if (err) {
		free(d->prefix);
		d->prefix = NULL;
	}
	return err;
}

/* The scope's segments: how many, and the slot id of the i-th, oldest
 * first (view/: the snapshot's live segments; segments/NAME: its one). */
size_t scope_count(const dirref *d)
{
	return d->sc.view ? d->sn->n : 1;
}

uint32_t scope_id(const dirref *d, size_t i)
{
	return d->sc.view ? d->sn->live[i] : (uint32_t)d->sc.id;
}

/* ---- why a request fails with EIO --------------------------------------
 * Every EIO a request gets because of a segment is logged where it
 * arises, naming the segment, what the request was and the reason (log.h;
 * at most LOG_BURST a minute per segment, so that a reader looping over
 * a damaged segment cannot flood the log). The request is noted by the
 * operations that read segments (ns_request). */

static _Thread_local struct {
	const char *op;   /* "lookup", "read", ... */
	uint64_t ino;   /* its inode; a lookup's: the directory */
	const char *name; /* a lookup's name, else NULL */
} req_now;

void ns_request(const char *op, uint64_t ino, const char *name)
{
	req_now.op = op;
	req_now.ino = ino;
	req_now.name = name;
}

/* The inode of the request, for a message. */
static void describe_ino(char *out, size_t cap, uint64_t ino)
{
	uint64_t low = ino_low(ino);
	const slot *s;
	scope sc;
	uint8_t *prefix;
	size_t plen;
	switch (ino_kind(ino)) {
	case K_VIEWDIR:
		snprintf(out, cap, "view/");
		return;
	case K_SEGDIR:
		s = slot_get(low);
		snprintf(out, cap, "segments/%s/", s ? s->name : "?");
		return;
	case K_SEGKEY:
	case K_VIEWKEY:
		s = slot_get(low >> ORD_BITS);
		snprintf(out, cap, "record %" PRIu64 " of %s (a key file of %s)",
		         low & ORD_MASK, s ? s->name : "?",
		         ino_kind(ino) == K_VIEWKEY ? "view/" : "segments/");
		return;
	case K_PREFIX:
		if (ptab_get(low, &sc, &prefix, &plen) == 0) {
			char esc[256];
			s = sc.view ? NULL : slot_get(sc.id);
			snprintf(out, cap, "the directory of keys \"%s\" in %s%s%s",
			         log_escape(esc, sizeof esc, prefix, plen),
			         sc.view ? "view/" : "segments/",
			         s ? s->name : "", s ? "/" : "");
			free(prefix);
			return;
		}
		break;
	default:
		break;
	}
	snprintf(out, cap, "inode %#" PRIx64, (uint64_t)ino);
}

/* Logs why this thread's request fails with EIO because of segment s
 * (NULL: one of view/'s); returns EIO. Never with bytes of a mapping in
 * the message: a fault while the log holds its lock would keep it. */
int eio(const slot *s, const char *fmt, ...)
{
	char why[512], what[400], name[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	describe_ino(what, sizeof what, req_now.ino);
	const char *seg = s ? s->name : "view/";
	if (req_now.name)
		log_limited(seg, LOG_ERR,
		            "%s: EIO to a lookup of \"%s\" in %s: %s", seg,
		            log_escape(name, sizeof name, req_now.name,
		                       strlen(req_now.name)),
		            what, why);
	else
		log_limited(seg, LOG_ERR, "%s: EIO to a %s of %s: %s", seg,
		            req_now.op ? req_now.op : "request", what, why);
	return EIO;
}

/* A damaged slot's EIO (guard.h). */
int eio_damaged(const slot *s)
{
	return eio(s, "the segment is damaged: a read of its mapping failed "
	              "(SIGBUS) earlier: " DAMAGED_WHY);
}

/* The errno of a core status from slot s (NULL: one of view/'s), an EIO
 * logged, what the step that failed was. */
int kvs_fail(const slot *s, kvs_status st, const char *what)
{
	int e = kvs_errno(st);
	bool damaged = st == KVS_E_CORRUPT || st == KVS_E_TRUNCATED ||
	               st == KVS_E_OVERLONG || st == KVS_E_OVERFLOW ||
	               st == KVS_E_ORDER;
	return e == EIO ? eio(s, "%s: %s%s", what, kvs_strerror(st),
	                      damaged ? " (the segment's data is damaged)"
	                              : "")
	                : e;
}

/* Why slot s has no cursor for this thread: damaged (guard.h), out of
 * memory, or `gone`. */
static int no_cursor_errno(const slot *s, int gone)
{
	return slot_damaged(s) ? eio_damaged(s) : slot_alive(s) ? ENOMEM : gone;
}

/* This thread's cursors on the scope's segments (oldest first, in a
 * malloc'd array the caller frees). */
int scope_cursors(const dirref *d, kvs_cursor ***out, size_t *n)
{
	size_t k = scope_count(d);
	kvs_cursor **c = calloc(k ? k : 1, sizeof *c);
	if (!c)
		return ENOMEM;
	for (size_t i = 0; i < k; i++) {
		slot *s = slot_get(scope_id(d, i));
		if (!(c[i] = slot_cursor(s))) {
			free(c);
			return no_cursor_errno(s, ENOENT);
		}
	}
	*out = c;
	*n = k;
	return 0;
}

/* A damaged segment of the directory's scope (guard.h), or NULL. */
const slot *scope_damaged(const dirref *d)
{
	for (size_t i = 0; i < scope_count(d); i++)
		if (slot_damaged(slot_get(scope_id(d, i))))
			return slot_get(scope_id(d, i));
	return NULL;
}

/* kvs_fail for a step over the directory's scope: its segment, or (in
 * view/) one of them. */
int scope_fail(const dirref *d, kvs_status st, const char *what)
{
	return kvs_fail(d->sc.view ? NULL : slot_get(d->sc.id), st, what);
}

/* Are all the segments of the directory's scope open? */
bool scope_alive(const dirref *d)
{
	for (size_t i = 0; i < scope_count(d); i++)
		if (!slot_alive(slot_get(scope_id(d, i))))
			return false;
	return true;
}

bool scope_tombstones(const dirref *d)
{
	return !d->sc.view && S.tombstones;
}

static unsigned view_flags(const dirref *d)
{
	return scope_tombstones(d) ? KVS_VIEW_TOMBSTONES : 0;
}

/* A view of the directory's own (for open directories). */
int scope_open(const dirref *d, kvs_view **v)
{
	const slot *bad = scope_damaged(d);
	if (bad)
		return eio_damaged(bad);
	size_t k = scope_count(d);
	kvs_segment **segs = calloc(k ? k : 1, sizeof *segs);
	if (!segs)
		return ENOMEM;
	int err = 0;
	pthread_mutex_lock(&S.lock);
	for (size_t i = 0; i < k && !err; i++)
		if (!(segs[i] = slot_get(scope_id(d, i))->seg))
			err = ENOENT;
	if (!err)
		err = kvs_errno(kvs_view_open(v, segs, k, view_flags(d)));
	pthread_mutex_unlock(&S.lock);
	free(segs);
	return err;
}

int scope_view(const dirref *d, kvs_cursor *const *c, size_t n,
               kvs_view **v)
{
	return kvs_errno(kvs_view_open_cursors(v, c, n, view_flags(d)));
}

/* The slot of a view's current binding. */
uint32_t view_slot(const dirref *d, const kvs_view *v)
{
	return scope_id(d, kvs_view_source(v));
}

/* Looks key up in the directory's scope: *found when it has a visible
 * binding, then *slot_out and *ord name it. */
int scope_lookup(const dirref *d, const uint8_t *key, uint64_t bits,
                        bool *found, uint32_t *slot_out, uint64_t *ord)
{
	*found = false;
	size_t k = scope_count(d);
	while (k-- > 0) { /* newest first */
		uint32_t id = scope_id(d, k);
		kvs_cursor *c = slot_cursor(slot_get(id));
		if (!c)
			return slot_damaged(slot_get(id))
			           ? eio_damaged(slot_get(id))
			           : ENOENT;
		bool hit = false;
		kvs_status st = kvs_cursor_lookup(c, key, bits, &hit);
		if (st != KVS_OK)
			return kvs_fail(slot_get(id), st, "looking a key up");
		if (!hit)
			continue;
		if (kvs_cursor_kind(c) == KVS_KIND_TOMBSTONE &&
		    !scope_tombstones(d))
			return 0;
		*found = true;
		*slot_out = id;
		*ord = kvs_cursor_ordinal(c);
		return 0;
	}
	return 0;
}

bool has_prefix(const uint8_t *key, uint64_t bits, const uint8_t *p,
                       size_t plen)
{
	return bits >= (uint64_t)plen * 8 &&
	       (plen == 0 || memcmp(key, p, plen) == 0);
}

/* Does a visible key of the scope start with p? */
int scope_has_prefix(const dirref *d, const uint8_t *p, size_t plen,
                            bool *yes)
{
	kvs_cursor **c;
	size_t n;
	int err = scope_cursors(d, &c, &n);
	if (err)
		return err;
	*yes = false;
	kvs_view *v;
	err = scope_view(d, c, n, &v);
	free(c);
	if (err)
		return err;
	kvs_status st = kvs_view_seek(v, p, (uint64_t)plen * 8, false);
	if (st == KVS_OK && kvs_view_valid(v)) {
		uint64_t bits;
		const uint8_t *key = kvs_cursor_key(kvs_view_cursor(v), &bits);
		*yes = has_prefix(key, bits, p, plen);
	}
	kvs_view_close(v);
	return scope_fail(d, st, "seeking a key prefix");
}

/* ---- attributes ---------------------------------------------------------- */

/* A directory with the read bits `read` (and search where it can be
 * read), owner and times from `from`. */
void dir_stat(struct stat *st, uint64_t ino, const struct stat *from,
                     nlink_t nlink, mode_t read)
{
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	st->st_mode = S_IFDIR | read | (read & 0444) >> 2;
	st->st_nlink = nlink;
	st->st_uid = from->st_uid;
	st->st_gid = from->st_gid;
	st->st_atim = st->st_mtim = from->st_mtim;
	st->st_ctim = from->st_ctim;
	st->st_blksize = 4096;
}

void file_stat(struct stat *st, uint64_t ino, const struct stat *from,
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

const struct stat *scope_times(const dirref *d)
{
	return d->sc.view ? &d->sn->st : &slot_get(d->sc.id)->st;
}

/* The read bits of the scope's directories: its segment's, or view/'s. */
mode_t scope_read(const dirref *d)
{
	return d->sc.view ? d->sn->read : slot_read(slot_get(d->sc.id));
}

/* Positions this thread's cursor of slot id on record ord. */
int key_at(uint64_t id, uint64_t ord, kvs_cursor **out)
{
	slot *s = slot_get(id);
	if (!s)
		return ENOENT;
	if (ord >= s->info.records)
		return ENOENT;
	kvs_cursor *c = slot_cursor(s);
	if (!c)
		return no_cursor_errno(s, ESTALE);
	/* a lookup leaves this thread's cursor on the record its reply then
	 * describes, and the kernel's read usually follows: no second seek */
	if (kvs_cursor_valid(c) && kvs_cursor_ordinal(c) == ord) {
		*out = c;
		return 0;
	}
	kvs_status st = kvs_cursor_seek_ordinal(c, ord);
	if (st != KVS_OK)
		return kvs_fail(s, st, "seeking its record");
	if (!kvs_cursor_valid(c))
		return eio(s, "its record is past the segment's end");
	*out = c;
	return 0;
}

/* Attributes of the key file ino, whose cursor is left in *cur. */
int key_attr(uint64_t ino, struct stat *st, kvs_cursor **cur)
{
	uint64_t low = ino_low(ino);
	kvs_cursor *c = NULL;
	int err = key_at(low >> ORD_BITS, low & ORD_MASK, &c);
	if (err)
		return err;
	const slot *sl = slot_get(low >> ORD_BITS);
	file_stat(st, ino, &sl->st, kvs_cursor_value_len(c), slot_read(sl));
	if (cur)
		*cur = c;
	return 0;
}
/* The key file (slot, ord) as an entry of the directory. */
uint64_t key_ino(const dirref *d, uint32_t s, uint64_t ord)
{
	return make_ino(d->sc.view ? K_VIEWKEY : K_SEGKEY, make_pos(s, ord));
}

int ns_fault(const void *addr)
{
	uint64_t off;
	slot *s = slot_damage_at(addr, &off);
	return eio(s,
	           "reading byte %" PRIu64 " of its mapping failed (SIGBUS): "
	           DAMAGED_WHY,
	           off);
}
