/*
 * segfs.c — the FUSE daemon: a directory of segments as a tree of keys
 * (docs/USAGE.md, "segfs").
 *
 *   /segments/NAME/KEY   every live segment, oldest first in the catalog
 *   /view/KEY            the composed view: each key's newest binding
 *   /control/catalog     the live segments, their generation and modes
 *   /control/merge       write a request to merge segments
 *   /control/status      every job since mount, one JSON line each
 *   /control/wait/ID     reading it waits for job ID to end
 *
 * A thin layer of FUSE low-level operations over libkvseg: every lookup,
 * attribute, listing and read goes through a cursor over the mapped
 * segments, and nothing is unpacked. Inode numbers carry what they name
 * (a segment slot and a record ordinal, a snapshot), so the daemon keeps
 * no per-key state: memory is flat in the number of keys. Only the
 * directories that -o sep makes out of key prefixes live in a table, and
 * only while the kernel holds them. The live state (slots, snapshots) is
 * in state.c, the control files in control.c, main() in main.c.
 */
#include "segfs.h"
#include "guard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "names.h"

/* Directory offsets: 1 after ".", 2 after "..", 3 after "%@" (the key a
 * -o sep directory stands for), 4 + position after the entry at the
 * position (slot and ordinal) of its first record. */
#define OFF_ENTRIES 4

/* ---- references the kernel holds ---------------------------------------------
 * Every entry the kernel is given (lookup, readdirplus) holds what its
 * inode names until the kernel forgets it. */

static void ino_ref(fuse_ino_t ino, uint64_t n, bool up)
{
	uint64_t low = ino_low(ino);
	switch (ino_kind(ino)) {
	case K_SEGDIR:
		up ? slot_ref(slot_get(low), n) : slot_unref(slot_get(low), n);
		break;
	case K_SEGKEY:
	case K_VIEWKEY:
		up ? slot_ref(slot_get(low >> ORD_BITS), n)
		   : slot_unref(slot_get(low >> ORD_BITS), n);
		break;
	case K_CATALOG:
		up ? snap_ref(snap_get(low), n) : snap_unref(snap_get(low), n);
		break;
	case K_PREFIX:
		if (!up)
			ptab_forget(low, n);
		break; /* ptab_ref counted it */
	case K_STATUS:
		control_status_ref(low, n, up);
		break;
	case K_MERGE:
		control_file_ref(low, n, up);
		break;
	default:
		break;
	}
}

/* ---- scopes ------------------------------------------------------------------------ */

/* A directory of keys: a scope (a slot or view/) and a key prefix. */
typedef struct dirref {
	scope sc;
	snap *sn; /* view/: the current snapshot, counted until dir_release */
	uint8_t *prefix; /* owned */
	size_t plen;
} dirref;

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
static bool scope_is_stale(scope sc)
{
	return sc.view && sc.id != atomic_load(&S.view_epoch);
}

static bool scope_stale(const dirref *d) { return scope_is_stale(d->sc); }

static void dir_release(dirref *d)
{
	snap_unref(d->sn, 1);
	d->sn = NULL;
	free(d->prefix);
	d->prefix = NULL;
}

/* Resolves ino to a directory of keys; ENOTDIR or ENOENT otherwise. On
 * success the caller calls dir_release. */
static int dir_resolve(fuse_ino_t ino, dirref *d)
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
static size_t scope_count(const dirref *d)
{
	return d->sc.view ? d->sn->n : 1;
}

static uint32_t scope_id(const dirref *d, size_t i)
{
	return d->sc.view ? d->sn->live[i] : (uint32_t)d->sc.id;
}

/* ---- why a request fails with EIO --------------------------------------
 * Every EIO a request gets because of a segment is logged where it
 * arises, naming the segment, what the request was and the reason (log.h;
 * at most LOG_BURST a minute per segment, so that a reader looping over
 * a damaged segment cannot flood the log). The request is noted by the
 * operations that read segments (req_note). */

static _Thread_local struct {
	const char *op;   /* "lookup", "read", ... */
	fuse_ino_t ino;   /* its inode; a lookup's: the directory */
	const char *name; /* a lookup's name, else NULL */
} req_now;

static void req_note(const char *op, fuse_ino_t ino, const char *name)
{
	req_now.op = op;
	req_now.ino = ino;
	req_now.name = name;
}

/* The inode of the request, for a message. */
static void describe_ino(char *out, size_t cap, fuse_ino_t ino)
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
static int eio(const slot *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int eio(const slot *s, const char *fmt, ...)
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
static int eio_damaged(const slot *s)
{
	return eio(s, "the segment is damaged: a read of its mapping failed "
	              "(SIGBUS) earlier: " DAMAGED_WHY);
}

/* The errno of a core status from slot s (NULL: one of view/'s), an EIO
 * logged, what the step that failed was. */
static int kvs_fail(const slot *s, kvs_status st, const char *what)
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
static int scope_cursors(const dirref *d, kvs_cursor ***out, size_t *n)
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
static const slot *scope_damaged(const dirref *d)
{
	for (size_t i = 0; i < scope_count(d); i++)
		if (slot_damaged(slot_get(scope_id(d, i))))
			return slot_get(scope_id(d, i));
	return NULL;
}

/* kvs_fail for a step over the directory's scope: its segment, or (in
 * view/) one of them. */
static int scope_fail(const dirref *d, kvs_status st, const char *what)
{
	return kvs_fail(d->sc.view ? NULL : slot_get(d->sc.id), st, what);
}

/* Are all the segments of the directory's scope open? */
static bool scope_alive(const dirref *d)
{
	for (size_t i = 0; i < scope_count(d); i++)
		if (!slot_alive(slot_get(scope_id(d, i))))
			return false;
	return true;
}

static bool scope_tombstones(const dirref *d)
{
	return !d->sc.view && S.tombstones;
}

/* A composed cursor of the directory's own (for open directories). */
static int scope_open(const dirref *d, vcursor *vc)
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
		err = kvs_errno(vc_open(vc, segs, k, scope_tombstones(d)));
	pthread_mutex_unlock(&S.lock);
	free(segs);
	return err;
}

/* The slot of a composed cursor's current binding. */
static uint32_t vc_slot(const dirref *d, const vcursor *vc)
{
	return scope_id(d, (size_t)vc->winner);
}

/* Looks key up in the directory's scope: *found when it has a visible
 * binding, then *slot_out and *ord name it. */
static int scope_lookup(const dirref *d, const uint8_t *key, uint64_t bits,
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

static bool has_prefix(const uint8_t *key, uint64_t bits, const uint8_t *p,
                       size_t plen)
{
	return bits >= (uint64_t)plen * 8 &&
	       (plen == 0 || memcmp(key, p, plen) == 0);
}

/* Does a visible key of the scope start with p? */
static int scope_has_prefix(const dirref *d, const uint8_t *p, size_t plen,
                            bool *yes)
{
	kvs_cursor **c;
	size_t n;
	int err = scope_cursors(d, &c, &n);
	if (err)
		return err;
	vcursor vc;
	vc_borrow(&vc, c, n, scope_tombstones(d));
	kvs_status st = vc_seek(&vc, p, (uint64_t)plen * 8, false);
	*yes = false;
	if (st == KVS_OK && vc_valid(&vc)) {
		uint64_t bits;
		const uint8_t *key = kvs_cursor_key(vc_cur(&vc), &bits);
		*yes = has_prefix(key, bits, p, plen);
	}
	free(c);
	return scope_fail(d, st, "seeking a key prefix");
}

/* ---- attributes -------------------------------------------------------------------- */

/* A directory with the read bits `read` (and search where it can be
 * read), owner and times from `from`. */
static void dir_stat(struct stat *st, fuse_ino_t ino, const struct stat *from,
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

static const struct stat *scope_times(const dirref *d)
{
	return d->sc.view ? &d->sn->st : &slot_get(d->sc.id)->st;
}

/* The read bits of the scope's directories: its segment's, or view/'s. */
static mode_t scope_read(const dirref *d)
{
	return d->sc.view ? d->sn->read : slot_read(slot_get(d->sc.id));
}

/* Positions this thread's cursor of slot id on record ord. */
static int key_at(uint64_t id, uint64_t ord, kvs_cursor **out)
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
static int key_attr(fuse_ino_t ino, struct stat *st, kvs_cursor **cur)
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

/* This thread's cursor on key file ino, or NULL after replying with the
 * error. */
static kvs_cursor *key_cursor(fuse_req_t req, fuse_ino_t ino)
{
	struct stat st;
	kvs_cursor *c = NULL;
	int err = key_attr(ino, &st, &c);
	if (err)
		fuse_reply_err(req, err);
	return err ? NULL : c;
}

/* How long the kernel may keep an inode's attributes: what never changes
 * for ever (the timeout), the control files never. */
static double attr_timeout(fuse_ino_t ino)
{
	if (ino_kind(ino) == K_MERGE || ino_kind(ino) == K_WAIT)
		return 0;
	return S.timeout;
}

/* How long the kernel may keep a name: for ever (the timeout), but for
 * control/status, whose every lookup takes a new text (lookup_control),
 * and control/wait/ID (lookup_wait). A listing with attributes must not
 * make the kernel keep its text. */
static double entry_timeout(fuse_ino_t ino)
{
	enum ino_kind k = ino_kind(ino);
	return k == K_STATUS || k == K_WAIT || k == K_MERGE ? 0 : S.timeout;
}

static int do_getattr(fuse_ino_t ino, struct stat *st)
{
	uint64_t low = ino_low(ino);
	switch (ino_kind(ino)) {
	case K_FIXED:
		switch (ino) {
		case INO_ROOT: dir_stat(st, ino, &S.dir_st, 5, 0444); return 0;
		case INO_SEGMENTS: {
			snap *cur = snap_current();
			dir_stat(st, ino, &cur->st, 2 + (nlink_t)cur->n,
			         0444);
			snap_unref(cur, 1);
			return 0;
		}
		case INO_CONTROL:
		case INO_WAITDIR:
			dir_stat(st, ino, &S.dir_st, 2, 0444);
			return 0;
		}
		return ENOENT;
	case K_MERGE:
		file_stat(st, ino, &S.dir_st, control_file_size(low), 0600);
		return 0;
	case K_STATUS: {
		size_t len;
		struct timespec t;
		char *text = control_status_get(low, &len, &t);
		if (!text)
			return ENOENT;
		free(text);
		file_stat(st, ino, &S.dir_st, len, 0444);
		st->st_mtim = st->st_ctim = t;
		return 0;
	}
	case K_VIEWDIR: {
		snap *cur = snap_current();
		dir_stat(st, ino, &cur->st, 2, cur->read);
		snap_unref(cur, 1);
		return 0;
	}
	case K_CATALOG: {
		snap *sn = snap_get(low);
		if (!sn)
			return ENOENT;
		file_stat(st, ino, &sn->st, sn->catalog_len, 0444);
		return 0;
	}
	case K_WAIT:
		if (!control_job_exists(wait_job(ino)))
			return ENOENT;
		wait_stat(st, ino, control_wait_size(wait_job(ino)));
		return 0;
	case K_SEGDIR: {
		slot *s = slot_get(low);
		if (!slot_alive(s))
			return ENOENT;
		dir_stat(st, ino, &s->st, 2, slot_read(s));
		return 0;
	}
	case K_SEGKEY:
	case K_VIEWKEY:
		return key_attr(ino, st, NULL);
	case K_PREFIX: {
		dirref d;
		int err = dir_resolve(ino, &d);
		if (err)
			return err;
		dir_stat(st, ino, scope_times(&d), 2, scope_read(&d));
		dir_release(&d);
		return 0;
	}
	default:
		return ENOENT;
	}
}

/* ---- lookups ------------------------------------------------------------------------ */

/* keep: the kernel may cache the entry (not under a stale view/, see
 * scope_stale) */
static void reply_entry_stat(fuse_req_t req, const struct stat *st, bool keep)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.ino = st->st_ino;
	e.attr = *st;
	e.attr_timeout = attr_timeout(e.ino);
	e.entry_timeout = keep ? entry_timeout(e.ino) : 0;
	ino_ref(e.ino, 1, true);
	if (fuse_reply_entry(req, &e) != 0)
		ino_ref(e.ino, 1, false);
}

/* A cached negative lookup (not in control/, where names come and go). */
static void reply_negative(fuse_req_t req, double timeout)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	e.entry_timeout = timeout;
	fuse_reply_entry(req, &e);
}

static void reply_ino_keep(fuse_req_t req, fuse_ino_t ino, bool keep)
{
	struct stat st;
	int err = do_getattr(ino, &st);
	if (err)
		fuse_reply_err(req, err);
	else
		reply_entry_stat(req, &st, keep);
}

static void reply_ino(fuse_req_t req, fuse_ino_t ino)
{
	reply_ino_keep(req, ino, true);
}

/* The key file (slot, ord) as an entry of the directory. */
static fuse_ino_t key_ino(const dirref *d, uint32_t s, uint64_t ord)
{
	return make_ino(d->sc.view ? K_VIEWKEY : K_SEGKEY, make_pos(s, ord));
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
		err = scope_lookup(d, key, (uint64_t)(d->plen - 1) * 8, &found,
		                   &s, &ord);
		if (!err && found)
			*ino = key_ino(d, s, ord);
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
			if ((err = scope_has_prefix(d, key, plen, &yes)))
				goto out;
			if (yes) {
				*dir_prefix = key;
				*dir_plen = plen;
				return 0;
			}
		}
		err = scope_lookup(d, key, (uint64_t)d->plen * 8 + cbits, &found,
		                   &s, &ord);
		if (!err && found)
			*ino = key_ino(d, s, ord);
		goto out;
	}
	/* Hashed: scan the visible keys that start with the name's prefix
	 * for the one whose component has this name. */
	kvs_cursor **cs;
	size_t ncs;
	if ((err = scope_cursors(d, &cs, &ncs)))
		goto out;
	vcursor vc;
	vc_borrow(&vc, cs, ncs, scope_tombstones(d));
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
				if (p) {
					memcpy(p, k, plen);
					*dir_prefix = p;
					*dir_plen = plen;
				} else {
					err = ENOMEM;
				}
			} else {
				*ino = key_ino(d, vc_slot(d, &vc),
				               kvs_cursor_ordinal(vc_cur(&vc)));
			}
			break;
		}
		st = vc_next(&vc);
	}
	free(cs);
	if (!err)
		err = scope_fail(d, st, "scanning keys for a long name");
out:
	free(key);
	return err;
}

static void lookup_control(fuse_req_t req, const char *name)
{
	if (!strcmp(name, "catalog")) {
		snap *cur = snap_current();
		reply_ino(req, make_ino(K_CATALOG, cur->id));
		snap_unref(cur, 1);
	} else if (!strcmp(name, "merge")) {
		/* a file of its own for each lookup: the entry is not cached */
		uint64_t id = control_file_take();
		if (!id)
			fuse_reply_err(req, ENOMEM);
		else
			reply_ino(req, make_ino(K_MERGE, id));
	} else if (!strcmp(name, "status")) {
		/* a new text each time: the entry is not cached */
		uint64_t id = control_status_take();
		struct stat st;
		if (!id || do_getattr(make_ino(K_STATUS, id), &st) != 0) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		struct fuse_entry_param e;
		memset(&e, 0, sizeof e);
		e.ino = st.st_ino;
		e.attr = st;
		e.attr_timeout = S.timeout;
		ino_ref(e.ino, 1, true);
		if (fuse_reply_entry(req, &e) != 0)
			ino_ref(e.ino, 1, false);
	} else if (!strcmp(name, "wait")) {
		reply_ino(req, INO_WAITDIR);
	} else {
		reply_negative(req, S.timeout);
	}
}

/*
 * control/wait/ID: every lookup gives a new inode (the name is not cached),
 * so that a reader's inode is its own: nothing another process does (a
 * lookup of the name, a stat) changes its attributes while it waits. Until
 * the job has ended its size is 4096; its attributes are never cached. A
 * reader waits in one of two places:
 * - a getattr with the open file (segfs_getattr), which the kernel sends
 *   before it reads past the size it knows: it ends with the final line's
 *   length, and any signal interrupts it (EINTR).
 *   A getattr without the file (stat, fstat) is answered at once; should
 *   one of the reader's own inode be answered while it waits, the kernel
 *   drops the size the waiting reply brings, keeps 4096 and reads the
 *   page, whose short reply then cuts the size as below;
 * - a read (control_wait), when the kernel reads a page without asking
 *   first (dd's one-byte reads): the kernel waits for it as for any page,
 *   so that only a fatal signal ends the wait. The short reply makes the
 *   kernel cut the size to the line's length and zero the rest of the
 *   page, which the reader then does not see — provided the inode's
 *   attributes did not change meanwhile, hence an inode of its own (only
 *   an fstat of the reader's own file could change them).
 */
static atomic_uint_fast64_t wait_serial;

static void lookup_wait(fuse_req_t req, const char *name)
{
	char *end;
	errno = 0;
	unsigned long long id = strtoull(name, &end, 10);
	char canon[32];
	snprintf(canon, sizeof canon, "%llu", id);
	if (errno || *end || strcmp(canon, name) != 0 || id > ORD_MASK ||
	    !control_job_exists(id)) {
		reply_negative(req, 0);
		return;
	}
	reply_ino(req, wait_ino(id, atomic_fetch_add(&wait_serial, 1)));
}

static GUARDED_FN void segfs_lookup(fuse_req_t req, fuse_ino_t parent,
                                     const char *name)
{
	size_t len = strlen(name);
	if (len > SEGFS_NAME_MAX) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	switch (parent) {
	case INO_ROOT:
		if (!strcmp(name, "segments")) {
			reply_ino(req, INO_SEGMENTS);
		} else if (!strcmp(name, "view")) {
			reply_ino(req, view_ino());
		} else if (!strcmp(name, "control")) {
			reply_ino(req, INO_CONTROL);
		} else {
			reply_negative(req, S.timeout);
		}
		return;
	case INO_SEGMENTS: {
		snap *cur = snap_current();
		fuse_ino_t ino = 0;
		for (size_t i = 0; i < cur->n && !ino; i++)
			if (!strcmp(slot_get(cur->live[i])->name, name))
				ino = make_ino(K_SEGDIR, cur->live[i]);
		if (ino)
			reply_ino(req, ino);
		else /* segfs invalidates it when the catalog changes */
			reply_negative(req, S.timeout);
		snap_unref(cur, 1);
		return;
	}
	case INO_CONTROL:
		lookup_control(req, name);
		return;
	case INO_WAITDIR:
		lookup_wait(req, name);
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
	size_t dplen = 0;
	err = dir_find(&d, name, len, &ino, &dp, &dplen);
	bool keep = !scope_stale(&d);
	if (!err && dp) {
		struct stat st;
		fuse_ino_t dino = ptab_ref(d.sc, dp, dplen);
		free(dp);
		if (!dino) {
			err = ENOMEM;
		} else {
			struct fuse_entry_param e;
			memset(&e, 0, sizeof e);
			dir_stat(&st, dino, scope_times(&d), 2,
			         scope_read(&d));
			e.ino = dino;
			e.attr = st;
			e.attr_timeout = S.timeout;
			e.entry_timeout = keep ? S.timeout : 0;
			if (fuse_reply_entry(req, &e) != 0)
				ptab_forget(ino_low(dino), 1);
		}
	} else if (!err && ino) {
		reply_ino_keep(req, ino, keep);
		if (keep)
			retire_note_entry(parent, name);
		else
			retire_drop_entry_later(parent, name);
	} else if (!err) {
		reply_negative(req, keep ? S.timeout : 0);
	}
	if (err)
		fuse_reply_err(req, err);
	dir_release(&d);
}

static void segfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	ino_ref(ino, nlookup, false);
	fuse_reply_none(req);
}

static void segfs_forget_multi(fuse_req_t req, size_t count,
                               struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		ino_ref(forgets[i].ino, forgets[i].nlookup, false);
	fuse_reply_none(req);
}

void wait_stat(struct stat *st, uint64_t ino, uint64_t size)
{
	file_stat(st, ino, &S.dir_st, size, 0444);
}

/* ---- control/wait's replies (control.h, control_wait) ---------------------
 * A read (ino 0) or a getattr of control/wait/ID, answered when the job
 * ends, or with EINTR when the request is interrupted. */
typedef struct wait_reply {
	fuse_req_t req;
	size_t size;
	off_t off;
	uint64_t ino;
} wait_reply;

/* control_wait_fn, under the job queue's lock. */
static void wait_done(void *ctx, const char *line, size_t len, int err)
{
	wait_reply *w = ctx;
	if (err) {
		fuse_reply_err(w->req, err);
	} else if (w->ino) {
		struct stat st;
		wait_stat(&st, w->ino, len);
		fuse_reply_attr(w->req, &st, 0);
	} else {
		size_t o = (uint64_t)w->off < len ? (size_t)w->off : len;
		size_t n = len - o < w->size ? len - o : w->size;
		fuse_reply_buf(w->req, line + o, n);
	}
	free(w);
}

static bool wait_was_interrupted(void *ctx)
{
	return fuse_req_interrupted(((wait_reply *)ctx)->req);
}

static void wait_interrupted(fuse_req_t req, void *data)
{
	(void)data;
	control_wait_cancel(req);
}

static void wait_for(fuse_req_t req, uint64_t id, size_t size, off_t off,
                     uint64_t attr_ino)
{
	wait_reply *w = malloc(sizeof *w);
	if (!w) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	*w = (wait_reply){req, size, off, attr_ino};
	/* First, while no job end can reply to req: libfuse may call
	 * wait_interrupted from here (it then finds no waiter), and a reply
	 * from another thread during this call would free req under it. The
	 * request is the wait's key: libfuse keeps it while it calls
	 * wait_interrupted, so that the key names no other wait. */
	fuse_req_interrupt_func(req, wait_interrupted, NULL);
	control_wait(id, req, wait_done, wait_was_interrupted, w);
}

/* ---- what the kernel is told (state.h, kernel_notifier) ------------------- */

static void notify_inval_entry(void *se, uint64_t parent, const char *name)
{
	fuse_lowlevel_notify_inval_entry(se, parent, name, strlen(name));
}

static void notify_inval_inode(void *se, uint64_t ino)
{
	fuse_lowlevel_notify_inval_inode(se, ino, 0, 0);
}

void segfs_notify(struct fuse_session *se)
{
	static kernel_notifier k = {NULL, notify_inval_entry,
	                            notify_inval_inode};
	if (se)
		k.ctx = se;
	state_notify_set(se ? &k : NULL);
}

static GUARDED_FN void
segfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	/* with the open file (the kernel before it reads past the size it
	 * knows): wait for the job (lookup_wait) */
	if (fi && ino_kind(ino) == K_WAIT) {
		wait_for(req, wait_job(ino), 0, 0, ino);
		return;
	}
	struct stat st;
	int err = do_getattr(ino, &st);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_attr(req, &st, attr_timeout(ino));
}

static void segfs_open(fuse_req_t req, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
	bool write = (fi->flags & O_ACCMODE) != O_RDONLY ||
	             (fi->flags & O_TRUNC);
	if (write && ino_kind(ino) != K_MERGE) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* Nothing to open: the kernel then stops sending open and release
	 * (no-open support) and keeps the page cache of these immutable
	 * files across opens. */
	fuse_reply_err(req, ENOSYS);
}

static void reply_slice(fuse_req_t req, const char *text, size_t len,
                        size_t size, off_t off)
{
	size_t o = (uint64_t)off < len ? (size_t)off : len;
	size_t n = len - o < size ? len - o : size;
	fuse_reply_buf(req, text + o, n);
}

static GUARDED_FN void
segfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
           struct fuse_file_info *fi)
{
	(void)fi;
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	switch (ino_kind(ino)) {
	case K_SEGKEY:
	case K_VIEWKEY:
		break;
	case K_CATALOG: {
		snap *sn = snap_get(ino_low(ino));
		if (!sn)
			fuse_reply_err(req, ENOENT);
		else
			reply_slice(req, sn->catalog, sn->catalog_len, size, off);
		return;
	}
	case K_WAIT:
		wait_for(req, wait_job(ino), size, off, 0);
		return;
	case K_STATUS: {
		size_t len;
		struct timespec t;
		char *text = control_status_get(ino_low(ino), &len, &t);
		if (!text)
			fuse_reply_err(req, ENOENT);
		else
			reply_slice(req, text, len, size, off);
		free(text);
		return;
	}
	case K_MERGE: {
		size_t n;
		char *text = control_file_read(ino_low(ino), size, off, &n);
		if (!text)
			fuse_reply_err(req, ENOMEM);
		else
			fuse_reply_buf(req, text, n);
		free(text);
		return;
	}
	case K_FIXED:
		fuse_reply_err(req, EISDIR);
		return;
	case K_SEGDIR:
	case K_PREFIX:
	case K_VIEWDIR:
		fuse_reply_err(req, EISDIR);
		return;
	default:
		fuse_reply_err(req, ENOENT);
		return;
	}
	kvs_cursor *c = key_cursor(req, ino);
	if (!c)
		return;
	const uint8_t *value;
	size_t len;
	kvs_status ks = kvs_cursor_value(c, &value, &len);
	if (ks != KVS_OK) {
		fuse_reply_err(req, kvs_fail(slot_get(ino_low(ino) >> ORD_BITS),
		                             ks, "decoding its value"));
		return;
	}
	reply_slice(req, (const char *)value, len, size, off);
}

static void segfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
                        size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	if (ino_kind(ino) != K_MERGE || off < 0) {
		fuse_reply_err(req, off < 0 ? EINVAL : EROFS);
		return;
	}
	int err = control_file_write(ino_low(ino), buf, size, off);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_write(req, size);
}

static void segfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
                          int to_set, struct fuse_file_info *fi)
{
	(void)attr, (void)fi;
	/* `> control/merge` truncates first: the jobs' numbers go */
	if (ino_kind(ino) == K_MERGE && !(to_set & ~(FUSE_SET_ATTR_SIZE |
	                                     FUSE_SET_ATTR_MTIME |
	                                     FUSE_SET_ATTR_MTIME_NOW |
	                                     FUSE_SET_ATTR_CTIME))) {
		if (to_set & FUSE_SET_ATTR_SIZE)
			control_file_truncate(ino_low(ino));
		struct stat st;
		do_getattr(ino, &st);
		fuse_reply_attr(req, &st, 0);
		return;
	}
	fuse_reply_err(req, EROFS);
}

/* ---- listings ------------------------------------------------------------- */

typedef struct dirh {
	dirref d;
	vcursor vc;
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
} dirh;

/* Is key above the handle's last one (or is there none)? Not, in a
 * listing, only where data is damaged. */
static bool dir_above_last(const dirh *h, const uint8_t *key, uint64_t bits)
{
	return !h->has_last ||
	       kvs_key_compare(key, bits, h->last, h->last_bits) > 0;
}

/* Takes key as the handle's last one: 0 or ENOMEM. */
static int dir_set_last(dirh *h, const uint8_t *key, uint64_t bits)
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

static void segfs_opendir(fuse_req_t req, fuse_ino_t ino,
                          struct fuse_file_info *fi)
{
	fi->fh = 0;
	if (ino_kind(ino) == K_MERGE || ino_kind(ino) == K_STATUS) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	if (ino_kind(ino) == K_FIXED) {
		/* the catalog's changes invalidate these (state.c) */
		fi->cache_readdir = ino != INO_WAITDIR;
		fi->keep_cache = ino != INO_WAITDIR;
		fuse_reply_open(req, fi);
		return;
	}
	dirh *h = calloc(1, sizeof *h);
	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	req_note("opendir", ino, NULL);
	int err = dir_resolve(ino, &h->d);
	if (!err && (err = scope_open(&h->d, &h->vc)) != 0)
		dir_release(&h->d);
	if (err) {
		free(h);
		fuse_reply_err(req, err);
		return;
	}
	/* the listing holds its snapshot (dir_resolve's count) or its
	 * segment until it is closed */
	if (!h->d.sc.view)
		slot_ref(slot_get(h->d.sc.id), 1);
	h->next_off = -1;
	fi->fh = (uint64_t)(uintptr_t)h;
	/* Segments never change, and view/ changes only with the catalog,
	 * which then invalidates it (state.c): let the kernel cache
	 * listings. */
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
		if (!h->closed)
			vc_close(&h->vc);
		free(h->last);
		if (!h->d.sc.view)
			slot_unref(slot_get(h->d.sc.id), 1);
		dir_release(&h->d);
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
	h->has_last = false;
	if (off < OFF_ENTRIES) {
		st = !d->sc.view && d->plen == 0
		         ? vc_seek_ordinal(&h->vc, 0)
		         : vc_seek(&h->vc, d->prefix, (uint64_t)d->plen * 8,
		                   false);
		return scope_fail(d, st, "starting the listing");
	}
	uint64_t pos = (uint64_t)off - OFF_ENTRIES;
	uint32_t s = (uint32_t)(pos >> ORD_BITS);
	uint64_t ord = pos & ORD_MASK;
	if (!d->sc.view && S.sep < 0)
		return scope_fail(d, vc_seek_ordinal(&h->vc, ord + 1),
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
		return scope_fail(d, vc_seek(&h->vc, key, bits, true),
		                  "resuming the listing");
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
	return scope_fail(d, st, "resuming the listing");
}

/* Adds one entry to buf in the readdir or readdirplus form; returns its
 * size, or 0 when it does not fit (and then nothing was added or counted).
 * With attributes (plus), the entry holds what it names as a lookup does
 * (counted, except "." and ".."); a directory of -o sep (dprefix) gets
 * its inode then. */
static size_t add_entry(fuse_req_t req, bool plus, char *buf, size_t room,
                        const char *name, struct stat *st, off_t off,
                        const uint8_t *dprefix, size_t dplen, scope sc,
                        bool counted)
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
		fuse_ino_t ino = ptab_ref(sc, dprefix, dplen);
		if (!ino)
			return 0;
		st->st_ino = ino;
	} else if (counted) {
		ino_ref(st->st_ino, 1, true);
	}
	e.ino = st->st_ino;
	e.attr = *st;
	e.attr_timeout = attr_timeout(e.ino);
	e.entry_timeout = scope_is_stale(sc) ? 0 : entry_timeout(e.ino);
	return fuse_add_direntry_plus(req, buf, room, name, &e, off);
}

static void fixed_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                          off_t off, bool plus)
{
	const char *names[4] = {0};
	fuse_ino_t inos[4] = {0};
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
	char *buf = malloc(size);
	if (!buf) {
		snap_unref(cur, 1);
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
			name = slot_get(cur->live[i - 2])->name,
			child = make_ino(K_SEGDIR, cur->live[i - 2]);
		else
			name = names[i - 2], child = inos[i - 2];
		struct stat st;
		if (child == make_ino(K_STATUS, 0))
			file_stat(&st, child, &S.dir_st, 0, 0444);
		else if (child == make_ino(K_MERGE, 0))
			file_stat(&st, child, &S.dir_st, 0, 0600);
		else if (do_getattr(child, &st) != 0)
			continue;
		size_t got = add_entry(req, plus, buf + used, size - used,
		                       name, &st, (off_t)i + 1, NULL, 0,
		                       (scope){0}, i >= 2);
		if (!got)
			break;
		used += got;
	}
	snap_unref(cur, 1);
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static GUARDED_FN void
do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
           struct fuse_file_info *fi, bool plus)
{
	dirh *h = (dirh *)(uintptr_t)fi->fh;
	if (!h) {
		fixed_readdir(req, ino, size, off, plus);
		return;
	}
	dirref *d = &h->d;
	/* a fault under vc marked a segment of the scope damaged: the
	 * listing's cursors are not used again */
	const slot *bad = scope_damaged(d);
	if (bad) {
		fuse_reply_err(req, eio_damaged(bad));
		return;
	}
	/* a retired segment of the scope was closed (-o retire_after): the
	 * listing lets its mapping go and ends */
	if (!h->closed && !scope_alive(d)) {
		vc_close(&h->vc);
		h->closed = true;
	}
	if (h->closed) {
		fuse_reply_err(req, ESTALE);
		return;
	}
	if (h->err) { /* the error that ended the last reply's entries */
		int e = h->err;
		h->err = 0;
		h->next_off = -1;
		fuse_reply_err(req, e); /* last: then h may be released */
		return;
	}
	char *buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t used = 0, got;
	int err = 0;
	struct stat st;
	const struct stat *times = scope_times(d);
	bool sep = S.sep >= 0;
	/* "." and ".." (the kernel links neither) */
	for (; off < 2; off++) {
		dir_stat(&st, ino, times, 2, scope_read(d));
		got = add_entry(req, plus, buf + used, size - used,
		                off == 0 ? "." : "..", &st, off + 1, NULL, 0,
		                d->sc, false);
		if (!got)
			goto done;
		used += got;
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
				fuse_ino_t kino = key_ino(d, s, ord);
				if ((err = do_getattr(kino, &st)))
					goto done;
				got = add_entry(req, plus, buf + used,
				                size - used, "%@", &st, 3,
				                NULL, 0, d->sc, true);
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
		if (!dir_above_last(h, key, bits)) {
			/* damaged: it would go round */
			err = eio(d->sc.view ? NULL : slot_get(d->sc.id),
			          "the listing reached a key not above the one "
			          "before it (the segment's data is damaged)");
			break;
		}
		uint32_t s = vc_slot(d, &h->vc);
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
			         2, scope_read(d));
			got = add_entry(req, plus, buf + used, size - used, name,
			                &st, eoff, tmp, n, d->sc, false);
			if (!got) {
				h->next_off = off;
				break;
			}
			used += got;
			off = eoff;
			if ((err = dir_set_last(h, key, bits)))
				break;
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
				if ((err = scope_has_prefix(d, tmp, n + 1,
				                            &shadowed)))
					break;
				if (shadowed) {
					if ((err = dir_set_last(h, key, bits)))
						break;
					if ((ks = vc_next(&h->vc)) != KVS_OK)
						break;
					continue;
				}
			}
			file_stat(&st, key_ino(d, s, ord), &slot_get(s)->st,
			          kvs_cursor_value_len(c),
			          slot_read(slot_get(s)));
			segfs_name_encode(comp, cbits, name);
			got = add_entry(req, plus, buf + used, size - used, name,
			                &st, eoff, NULL, 0, d->sc, true);
			if (!got) {
				h->next_off = off;
				break;
			}
			used += got;
			off = eoff;
			if ((err = dir_set_last(h, key, bits)))
				break;
			ks = vc_next(&h->vc);
		}
		if (ks != KVS_OK)
			break;
	}
	free(tmp);
	if (!err && ks != KVS_OK)
		err = scope_fail(d, ks, "listing");
	if (!err && !vc_valid(&h->vc))
		h->next_off = off; /* at the end: a resume adds nothing */
done:
	/* h before the reply: once replied, the listing may be closed (and
	 * h freed) by another thread (-o mt) */
	if (err && used > 0)
		h->err = err; /* not lost: the next call replies with it */
	if (err)
		h->next_off = -1;
	if (err && used == 0)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, used);
	free(buf);
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

static GUARDED_FN void
segfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	/* Only user.segfs.* exists. For other namespaces (security.selinux,
	 * system.posix_acl_access: ls -l asks for both on every file) say
	 * "not supported", which tools remember for the whole filesystem;
	 * ENODATA would bring the question back for every file. */
	if (strncmp(name, "user.", 5) != 0) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if ((ino_kind(ino) != K_SEGKEY && ino_kind(ino) != K_VIEWKEY) ||
	    strncmp(name, "user.segfs.", 11) != 0) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	kvs_cursor *c = key_cursor(req, ino);
	if (!c)
		return;
	uint64_t bits;
	const uint8_t *key = kvs_cursor_key(c, &bits);
	char text[32];
	if (!strcmp(name, "user.segfs.key")) {
		reply_xattr_value(req, key, (size_t)((bits + 7) / 8), size);
	} else if (!strcmp(name, "user.segfs.key_bits")) {
		int n = snprintf(text, sizeof text, "%" PRIu64, bits);
		reply_xattr_value(req, text, (size_t)n, size);
	} else if (!strcmp(name, "user.segfs.segment")) {
		const char *seg = slot_get(ino_low(ino) >> ORD_BITS)->name;
		reply_xattr_value(req, seg, strlen(seg), size);
	} else if (!strcmp(name, "user.segfs.tombstone") &&
	           kvs_cursor_kind(c) == KVS_KIND_TOMBSTONE) {
		reply_xattr_value(req, "1", 1, size);
	} else {
		fuse_reply_err(req, ENODATA);
	}
}

static GUARDED_FN void
segfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	if (ino_kind(ino) != K_SEGKEY && ino_kind(ino) != K_VIEWKEY) {
		reply_xattr_value(req, "", 0, size);
		return;
	}
	kvs_cursor *c = key_cursor(req, ino);
	if (!c)
		return;
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
	snap *cur = snap_current();
	for (size_t i = 0; i < cur->n; i++) {
		bytes += slot_get(cur->live[i])->info.file_bytes;
		files += slot_get(cur->live[i])->info.records;
	}
	snap_unref(cur, 1);
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

/* ---- requests that read segments, guarded (guard.h) ----------------------
 * Each runs between tls_enter and tls_leave, which is where this thread's
 * cursors may be used, and swept when a segment dies (segfs.h). */

/* A read of a mapping faulted: its segment is damaged from now on, and
 * the request fails. Each of these requests replies last, after every
 * read of a mapping (a read's reply may point into one: the kernel's copy
 * then fails, not this process). */
static void fault_reply(fuse_req_t req)
{
	uint64_t off;
	slot *s = slot_damage_at(guard_fault_addr, &off);
	fuse_reply_err(req, eio(s,
	                        "reading byte %" PRIu64 " of its mapping "
	                        "failed (SIGBUS): " DAMAGED_WHY,
	                        off));
}

static void guarded_lookup(fuse_req_t req, fuse_ino_t parent,
                           const char *name)
{
	tls_enter();
	req_note("lookup", parent, name);
	GUARDED(fault_reply(req), segfs_lookup(req, parent, name));
	tls_leave();
}

static void guarded_getattr(fuse_req_t req, fuse_ino_t ino,
                            struct fuse_file_info *fi)
{
	tls_enter();
	req_note("getattr", ino, NULL);
	GUARDED(fault_reply(req), segfs_getattr(req, ino, fi));
	tls_leave();
}

static void guarded_read(fuse_req_t req, fuse_ino_t ino, size_t size,
                         off_t off, struct fuse_file_info *fi)
{
	tls_enter();
	req_note("read", ino, NULL);
	GUARDED(fault_reply(req), segfs_read(req, ino, size, off, fi));
	tls_leave();
}

static void guarded_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                            off_t off, struct fuse_file_info *fi)
{
	tls_enter();
	req_note("listing", ino, NULL);
	GUARDED(fault_reply(req),
	        do_readdir(req, ino, size, off, fi, false));
	tls_leave();
}

static void guarded_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
                                off_t off, struct fuse_file_info *fi)
{
	tls_enter();
	req_note("listing", ino, NULL);
	GUARDED(fault_reply(req),
	        do_readdir(req, ino, size, off, fi, true));
	tls_leave();
}

static void guarded_getxattr(fuse_req_t req, fuse_ino_t ino,
                             const char *name, size_t size)
{
	tls_enter();
	req_note("getxattr", ino, NULL);
	GUARDED(fault_reply(req), segfs_getxattr(req, ino, name, size));
	tls_leave();
}

static void guarded_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	tls_enter();
	req_note("listxattr", ino, NULL);
	GUARDED(fault_reply(req), segfs_listxattr(req, ino, size));
	tls_leave();
}

const struct fuse_lowlevel_ops segfs_ops = {
	.lookup = guarded_lookup,
	.forget = segfs_forget,
	.forget_multi = segfs_forget_multi,
	.getattr = guarded_getattr,
	.open = segfs_open,
	.read = guarded_read,
	.opendir = segfs_opendir,
	.readdir = guarded_readdir,
	.readdirplus = guarded_readdirplus,
	.releasedir = segfs_releasedir,
	.statfs = segfs_statfs,
	.getxattr = guarded_getxattr,
	.listxattr = guarded_listxattr,
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
