/*
 * namespace.c — the tree segfs shows (namespace.h): what a name is in a
 * directory (the fixed ones, control/, the directories of keys, where
 * names.c maps a name to its key and -o sep makes directories of key
 * prefixes), inodes' attributes, file bytes, extended attributes, and
 * the references the kernel's entries hold. Listings are listing.c's;
 * what both read directories of keys through is scope.c.
 *
 * Inode numbers carry what they name (ino.h), so the daemon keeps no
 * per-key state: memory is flat in the number of keys. Only the
 * directories that -o sep makes out of key prefixes live in a table
 * (state.c), and only while the kernel holds them. Answers are plain C;
 * the FUSE layer (fuse_ops.c) replies.
 */
#include "namespace.h"
#include "control.h"
#include "scope.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "names.h"

/* ---- references the kernel holds --------------------------------------------
 * Every entry the kernel is given (lookup, readdirplus) holds what its
 * inode names until the kernel forgets it. */

static void ino_ref(uint64_t ino, uint64_t n, bool up)
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

int ns_getattr(uint64_t ino, struct stat *st)
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

/* Finds the entry called name (len bytes) in directory d: a key file
 * (*ino of a key) or, with -o sep, a directory (*dir_prefix set, owned). */
static int dir_find(const dirref *d, const char *name, size_t len,
                    uint64_t *ino, uint8_t **dir_prefix, size_t *dir_plen)
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
	kvs_view *v;
	err = scope_view(d, cs, ncs, &v);
	free(cs);
	if (err)
		goto out;
	size_t qlen = d->plen + (size_t)(cbits / 8);
	kvs_status st = kvs_view_seek(v, key, (uint64_t)qlen * 8, false);
	while (st == KVS_OK && kvs_view_valid(v)) {
		uint64_t bits;
		const uint8_t *k = kvs_cursor_key(kvs_view_cursor(v), &bits);
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
				*ino = key_ino(
				    d, view_slot(d, v),
				    kvs_cursor_ordinal(kvs_view_cursor(v)));
			}
			break;
		}
		st = kvs_view_next(v);
	}
	kvs_view_close(v);
	if (!err)
		err = scope_fail(d, st, "scanning keys for a long name");
out:
	free(key);
	return err;
}
/* ---- lookups ------------------------------------------------------------ */

/* The entry of inode ino, counted as the kernel's lookup count is. */
static int entry_of(uint64_t ino, ns_entry *e)
{
	int err = ns_getattr(ino, &e->st);
	if (err)
		return err;
	e->ino = ino;
	ino_ref(ino, 1, true);
	return 0;
}

static int lookup_control(const char *name, ns_entry *e)
{
	if (!strcmp(name, "catalog")) {
		snap *cur = snap_current();
		int err = entry_of(make_ino(K_CATALOG, cur->id), e);
		snap_unref(cur, 1);
		return err;
	}
	if (!strcmp(name, "merge")) {
		/* a file of its own for each lookup: the entry is not cached */
		uint64_t id = control_file_take();
		return id ? entry_of(make_ino(K_MERGE, id), e) : ENOMEM;
	}
	if (!strcmp(name, "status")) {
		/* a new text each time: the entry is not cached */
		uint64_t id = control_status_take();
		if (!id || entry_of(make_ino(K_STATUS, id), e) != 0)
			return ENOMEM;
		return 0;
	}
	if (!strcmp(name, "wait"))
		return entry_of(INO_WAITDIR, e);
	return 0;
}

/*
 * control/wait/ID: every lookup gives a new inode (the name is not cached),
 * so that a reader's inode is its own: nothing another process does (a
 * lookup of the name, a stat) changes its attributes while it waits. Until
 * the job has ended its size is 4096; its attributes are never cached. A
 * reader waits in one of two places:
 * - a getattr with the open file (fuse_ops.c, wait_for), which
 *   the kernel sends before it reads past the size it knows: it ends with
 *   the final line's length, and any signal interrupts it (EINTR).
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

static int lookup_wait(const char *name, ns_entry *e)
{
	char *end;
	errno = 0;
	unsigned long long id = strtoull(name, &end, 10);
	char canon[32];
	snprintf(canon, sizeof canon, "%llu", id);
	if (errno || *end || strcmp(canon, name) != 0 || id > ORD_MASK ||
	    !control_job_exists(id))
		return 0;
	return entry_of(wait_ino(id, atomic_fetch_add(&wait_serial, 1)), e);
}

int ns_lookup(uint64_t parent, const char *name, ns_entry *e)
{
	memset(e, 0, sizeof *e);
	e->cache = true;
	size_t len = strlen(name);
	if (len > SEGFS_NAME_MAX)
		return ENAMETOOLONG;
	switch (parent) {
	case INO_ROOT:
		if (!strcmp(name, "segments"))
			return entry_of(INO_SEGMENTS, e);
		if (!strcmp(name, "view"))
			return entry_of(view_ino(), e);
		if (!strcmp(name, "control"))
			return entry_of(INO_CONTROL, e);
		return 0;
	case INO_SEGMENTS: {
		snap *cur = snap_current();
		uint64_t ino = 0;
		for (size_t i = 0; i < cur->n && !ino; i++)
			if (!strcmp(slot_get(cur->live[i])->name, name))
				ino = make_ino(K_SEGDIR, cur->live[i]);
		/* a miss is cached: segfs invalidates it when the catalog
		 * changes */
		int err = ino ? entry_of(ino, e) : 0;
		snap_unref(cur, 1);
		return err;
	}
	case INO_CONTROL:
		return lookup_control(name, e);
	case INO_WAITDIR:
		e->cache = false;
		return lookup_wait(name, e);
	default:
		break;
	}
	dirref d;
	int err = dir_resolve(parent, &d);
	if (err)
		return err;
	uint64_t ino;
	uint8_t *dp;
	size_t dplen = 0;
	err = dir_find(&d, name, len, &ino, &dp, &dplen);
	e->cache = !scope_stale(&d);
	if (!err && dp) {
		uint64_t dino = ptab_ref(d.sc, dp, dplen); /* counted */
		free(dp);
		if (!dino) {
			err = ENOMEM;
		} else {
			e->ino = dino;
			dir_stat(&e->st, dino, scope_times(&d), 2,
			         scope_read(&d));
		}
	} else if (!err && ino) {
		e->key = true;
		err = entry_of(ino, e);
	}
	dir_release(&d);
	return err;
}

void ns_forget(uint64_t ino, uint64_t n) { ino_ref(ino, n, false); }

void wait_stat(struct stat *st, uint64_t ino, uint64_t size)
{
	file_stat(st, ino, &S.dir_st, size, 0444);
}

bool ns_writable(uint64_t ino) { return ino_kind(ino) == K_MERGE; }

int ns_write(uint64_t ino, const char *buf, size_t size, off_t off)
{
	if (!ns_writable(ino) || off < 0)
		return off < 0 ? EINVAL : EROFS;
	return control_file_write(ino_low(ino), buf, size, off);
}

void ns_truncate(uint64_t ino)
{
	if (ns_writable(ino))
		control_file_truncate(ino_low(ino));
}

/* ---- reads --------------------------------------------------------------- */

void ns_bytes_free(ns_bytes *b)
{
	free(b->owned);
	b->owned = NULL;
}

/* size bytes of text[0 .. len) at off, as a read sees them. */
static void bytes_slice(ns_bytes *out, const char *text, size_t len,
                        size_t size, off_t off)
{
	size_t o = (uint64_t)off < len ? (size_t)off : len;
	out->p = text + o;
	out->len = len - o < size ? len - o : size;
}

/* This thread's cursor on key file ino. */
static int key_cursor(uint64_t ino, kvs_cursor **c)
{
	struct stat st;
	return key_attr(ino, &st, c);
}

int ns_read(uint64_t ino, size_t size, off_t off, ns_bytes *out)
{
	out->p = NULL;
	out->len = 0;
	out->owned = NULL;
	if (off < 0)
		return EINVAL;
	switch (ino_kind(ino)) {
	case K_SEGKEY:
	case K_VIEWKEY:
		break;
	case K_CATALOG: {
		snap *sn = snap_get(ino_low(ino));
		if (!sn)
			return ENOENT;
		bytes_slice(out, sn->catalog, sn->catalog_len, size, off);
		return 0;
	}
	case K_WAIT:
		return EAGAIN; /* control_wait */
	case K_STATUS: {
		size_t len;
		struct timespec t;
		char *text = control_status_get(ino_low(ino), &len, &t);
		if (!text)
			return ENOENT;
		out->owned = text;
		bytes_slice(out, text, len, size, off);
		return 0;
	}
	case K_MERGE: {
		size_t n;
		char *text = control_file_read(ino_low(ino), size, off, &n);
		if (!text)
			return ENOMEM;
		out->owned = text;
		out->p = text;
		out->len = n;
		return 0;
	}
	case K_FIXED:
	case K_SEGDIR:
	case K_PREFIX:
	case K_VIEWDIR:
		return EISDIR;
	default:
		return ENOENT;
	}
	kvs_cursor *c;
	int err = key_cursor(ino, &c);
	if (err)
		return err;
	const uint8_t *value;
	size_t len;
	kvs_status ks = kvs_cursor_value(c, &value, &len);
	if (ks != KVS_OK)
		return kvs_fail(slot_get(ino_low(ino) >> ORD_BITS), ks,
		                "decoding its value");
	bytes_slice(out, (const char *)value, len, size, off);
	return 0;
}


/* A listing with attributes holds what each entry names as a lookup does
 * (counted, except "." and ".."); a directory of -o sep gets its inode
 * then. */
bool ns_dirent_hold(ns_dirent *e)
{
	if (e->dir_prefix) {
		uint64_t ino = ptab_ref(e->sc, e->dir_prefix, e->dir_plen);
		if (!ino)
			return false;
		e->st.st_ino = ino;
	} else if (e->counted) {
		ino_ref(e->st.st_ino, 1, true);
	}
	return true;
}

/* ---- extended attributes ------------------------------------------------- */

static const char xattr_names[] =
    "user.segfs.key\0user.segfs.key_bits\0user.segfs.segment\0";
static const char xattr_tomb[] = "user.segfs.tombstone\0";
_Static_assert(sizeof xattr_names + sizeof xattr_tomb <=
                   sizeof(((ns_bytes *)0)->text),
               "the list of names fits in ns_bytes");

static bool is_key(uint64_t ino)
{
	return ino_kind(ino) == K_SEGKEY || ino_kind(ino) == K_VIEWKEY;
}

int ns_getxattr(uint64_t ino, const char *name, ns_bytes *out)
{
	out->p = NULL;
	out->len = 0;
	out->owned = NULL;
	/* Only user.segfs.* exists. For other namespaces (security.selinux,
	 * system.posix_acl_access: ls -l asks for both on every file) say
	 * "not supported", which tools remember for the whole filesystem;
	 * ENODATA would bring the question back for every file. */
	if (strncmp(name, "user.", 5) != 0)
		return EOPNOTSUPP;
	if (!is_key(ino) || strncmp(name, "user.segfs.", 11) != 0)
		return ENODATA;
	kvs_cursor *c;
	int err = key_cursor(ino, &c);
	if (err)
		return err;
	uint64_t bits;
	const uint8_t *key = kvs_cursor_key(c, &bits);
	if (!strcmp(name, "user.segfs.key")) {
		out->p = key;
		out->len = (size_t)((bits + 7) / 8);
	} else if (!strcmp(name, "user.segfs.key_bits")) {
		int n = snprintf(out->text, sizeof out->text, "%" PRIu64, bits);
		out->p = out->text;
		out->len = (size_t)n;
	} else if (!strcmp(name, "user.segfs.segment")) {
		const char *seg = slot_get(ino_low(ino) >> ORD_BITS)->name;
		out->p = seg;
		out->len = strlen(seg);
	} else if (!strcmp(name, "user.segfs.tombstone") &&
	           kvs_cursor_kind(c) == KVS_KIND_TOMBSTONE) {
		out->p = "1";
		out->len = 1;
	} else {
		return ENODATA;
	}
	return 0;
}

int ns_listxattr(uint64_t ino, ns_bytes *out)
{
	out->p = out->text;
	out->len = 0;
	out->owned = NULL;
	if (!is_key(ino))
		return 0;
	kvs_cursor *c;
	int err = key_cursor(ino, &c);
	if (err)
		return err;
	size_t n = sizeof xattr_names - 1;
	memcpy(out->text, xattr_names, n);
	if (kvs_cursor_kind(c) == KVS_KIND_TOMBSTONE) {
		memcpy(out->text + n, xattr_tomb, sizeof xattr_tomb - 1);
		n += sizeof xattr_tomb - 1;
	}
	out->len = n;
	return 0;
}

void ns_statfs(struct statvfs *sv)
{
	memset(sv, 0, sizeof *sv);
	uint64_t bytes = 0, files = 0;
	snap *cur = snap_current();
	for (size_t i = 0; i < cur->n; i++) {
		bytes += slot_get(cur->live[i])->info.file_bytes;
		files += slot_get(cur->live[i])->info.records;
	}
	snap_unref(cur, 1);
	sv->f_bsize = sv->f_frsize = 4096;
	sv->f_blocks = (fsblkcnt_t)((bytes + 4095) / 4096);
	sv->f_files = (fsfilcnt_t)files;
	sv->f_namemax = SEGFS_NAME_MAX;
	sv->f_flag = ST_NOSUID | ST_NODEV;
}
