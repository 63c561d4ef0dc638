/*
 * fuse_ops.c — the FUSE low-level operations (segfs_ops): each unpacks its
 * request, asks the namespace (namespace.h) and turns the answer into the
 * reply; what the kernel may cache and for how long is decided here.
 * Requests that read segments run guarded (guard.h) between tls_enter
 * and tls_leave, and reply last, from inside the guard. control/wait/ID's
 * reads and waiting getattrs reply later, when the job ends (wait_for:
 * control_wait calls back). The kernel hears of what the state changes
 * through the notifier registered here (segfs_notify).
 */
#include "segfs.h"
#include "guard.h"
#include "namespace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(fuse_ino_t) == sizeof(uint64_t),
               "inode numbers are uint64_t in the namespace");

/* How long the kernel may keep an inode's attributes: what never changes
 * for ever (the timeout), the control files never. */
static double attr_timeout(fuse_ino_t ino)
{
	if (ino_kind(ino) == K_MERGE || ino_kind(ino) == K_WAIT)
		return 0;
	return S.timeout;
}

/* How long the kernel may keep a name: for ever (the timeout), but for
 * control/status, whose every lookup takes a new text, and control/merge
 * and control/wait/ID, a file of each lookup's own (namespace.c). A
 * listing with attributes must not make the kernel keep its text. */
static double entry_timeout(fuse_ino_t ino)
{
	enum ino_kind k = ino_kind(ino);
	return k == K_STATUS || k == K_WAIT || k == K_MERGE ? 0 : S.timeout;
}

/* ---- lookups ------------------------------------------------------------- */

static GUARDED_FN void segfs_lookup(fuse_req_t req, fuse_ino_t parent,
                                     const char *name)
{
	ns_entry en;
	int err = ns_lookup(parent, name, &en);
	if (err) {
		fuse_reply_err(req, err);
	} else {
		struct fuse_entry_param e;
		memset(&e, 0, sizeof e);
		e.ino = en.ino;
		if (en.ino) {
			e.attr = en.st;
			e.attr_timeout = attr_timeout(en.ino);
		}
		/* under a view/ the catalog has replaced (and in
		 * control/wait/), the kernel forgets the entry after use */
		e.entry_timeout = !en.cache ? 0
		                  : en.ino  ? entry_timeout(en.ino)
		                            : S.timeout;
		if (fuse_reply_entry(req, &e) != 0 && en.ino)
			ns_forget(en.ino, 1);
	}
	if (en.key && en.cache)
		retire_note_entry(parent, name);
	else if (en.key)
		retire_drop_entry_later(parent, name);
}

static void segfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	ns_forget(ino, nlookup);
	fuse_reply_none(req);
}

static void segfs_forget_multi(fuse_req_t req, size_t count,
                               struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		ns_forget(forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
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

/* ---- attributes and files ------------------------------------------------ */

static GUARDED_FN void
segfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	/* with the open file (the kernel before it reads past the size it
	 * knows): wait for the job (namespace.c, lookup_wait) */
	if (fi && ino_kind(ino) == K_WAIT) {
		wait_for(req, wait_job(ino), 0, 0, ino);
		return;
	}
	struct stat st;
	int err = ns_getattr(ino, &st);
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
	if (write && !ns_writable(ino)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	/* Nothing to open: the kernel then stops sending open and release
	 * (no-open support) and keeps the page cache of these immutable
	 * files across opens. */
	fuse_reply_err(req, ENOSYS);
}

static GUARDED_FN void
segfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
           struct fuse_file_info *fi)
{
	(void)fi;
	if (off >= 0 && ino_kind(ino) == K_WAIT) {
		wait_for(req, wait_job(ino), size, off, 0);
		return;
	}
	ns_bytes b;
	int err = ns_read(ino, size, off, &b);
	if (err)
		fuse_reply_err(req, err);
	else /* a value's bytes are in its segment's mapping: guarded */
		fuse_reply_buf(req, b.p, b.len);
	ns_bytes_free(&b);
}

static void segfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
                        size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	int err = ns_write(ino, buf, size, off);
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
	if (ns_writable(ino) && !(to_set & ~(FUSE_SET_ATTR_SIZE |
	                                     FUSE_SET_ATTR_MTIME |
	                                     FUSE_SET_ATTR_MTIME_NOW |
	                                     FUSE_SET_ATTR_CTIME))) {
		if (to_set & FUSE_SET_ATTR_SIZE)
			ns_truncate(ino);
		struct stat st;
		ns_getattr(ino, &st);
		fuse_reply_attr(req, &st, 0);
		return;
	}
	fuse_reply_err(req, EROFS);
}

/* ---- listings ------------------------------------------------------------ */

static void segfs_opendir(fuse_req_t req, fuse_ino_t ino,
                          struct fuse_file_info *fi)
{
	fi->fh = 0;
	ns_request("opendir", ino, NULL);
	ns_dir *h;
	int err = ns_opendir(ino, &h);
	if (err) {
		fuse_reply_err(req, err);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	/* Segments never change, and view/ changes only with the catalog,
	 * which then invalidates it (state.c): let the kernel cache
	 * listings, but control/wait/'s (the jobs come and go). */
	fi->cache_readdir = ino != INO_WAITDIR;
	fi->keep_cache = ino != INO_WAITDIR;
	fuse_reply_open(req, fi);
}

static void segfs_releasedir(fuse_req_t req, fuse_ino_t ino,
                             struct fuse_file_info *fi)
{
	(void)ino;
	ns_closedir((ns_dir *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/* A reply's buffer, filled by the namespace's listing. */
typedef struct dirbuf {
	fuse_req_t req;
	bool plus;
	char *buf;
	size_t size, used;
} dirbuf;

/* Adds one entry in the readdir or readdirplus form (ns_fill_fn). */
static bool dirbuf_add(void *ctx, ns_dirent *e)
{
	dirbuf *b = ctx;
	size_t room = b->size - b->used;
	char *at = b->buf + b->used;
	size_t need =
	    b->plus ? fuse_add_direntry_plus(b->req, NULL, 0, e->name, NULL, 0)
	            : fuse_add_direntry(b->req, NULL, 0, e->name, NULL, 0);
	if (need > room)
		return false;
	if (!b->plus) {
		b->used += fuse_add_direntry(b->req, at, room, e->name, &e->st,
		                             e->off);
		return true;
	}
	if (!ns_dirent_hold(e))
		return false;
	struct fuse_entry_param p;
	memset(&p, 0, sizeof p);
	p.ino = e->st.st_ino;
	p.attr = e->st;
	p.attr_timeout = attr_timeout(p.ino);
	p.entry_timeout = e->cache ? entry_timeout(p.ino) : 0;
	b->used +=
	    fuse_add_direntry_plus(b->req, at, room, e->name, &p, e->off);
	return true;
}

static GUARDED_FN void
do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
           struct fuse_file_info *fi, bool plus)
{
	dirbuf b = {.req = req, .plus = plus, .size = size};
	if (!(b.buf = malloc(size))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	int err = ns_readdir(ino, (ns_dir *)(uintptr_t)fi->fh, off, plus,
	                     dirbuf_add, &b);
	/* last: once replied, the listing may be closed by another thread */
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, b.buf, b.used);
	free(b.buf);
}

/* ---- extended attributes, statfs ----------------------------------------- */

static void reply_xattr_value(fuse_req_t req, const ns_bytes *v, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, v->len);
	else if (size < v->len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, v->p, v->len);
}

static GUARDED_FN void
segfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	ns_bytes v;
	int err = ns_getxattr(ino, name, &v);
	if (err)
		fuse_reply_err(req, err);
	else /* user.segfs.key is in the mapping: guarded */
		reply_xattr_value(req, &v, size);
	ns_bytes_free(&v);
}

static GUARDED_FN void
segfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	ns_bytes v;
	int err = ns_listxattr(ino, &v);
	if (err)
		fuse_reply_err(req, err);
	else
		reply_xattr_value(req, &v, size);
	ns_bytes_free(&v);
}

static void segfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	struct statvfs sv;
	ns_statfs(&sv);
	fuse_reply_statfs(req, &sv);
}

/* ---- everything that would change the tree: EROFS ------------------------ */

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
 * cursors may be used, and swept when a segment dies (state.h). */

/* A read of a mapping faulted: its segment is damaged from now on, and
 * the request fails. Each of these requests replies last, after every
 * read of a mapping (a read's reply may point into one: the kernel's copy
 * then fails, not this process). */
static void fault_reply(fuse_req_t req)
{
	fuse_reply_err(req, ns_fault(guard_fault_addr));
}

static void guarded_lookup(fuse_req_t req, fuse_ino_t parent,
                           const char *name)
{
	tls_enter();
	ns_request("lookup", parent, name);
	GUARDED(fault_reply(req), segfs_lookup(req, parent, name));
	tls_leave();
}

static void guarded_getattr(fuse_req_t req, fuse_ino_t ino,
                            struct fuse_file_info *fi)
{
	tls_enter();
	ns_request("getattr", ino, NULL);
	GUARDED(fault_reply(req), segfs_getattr(req, ino, fi));
	tls_leave();
}

static void guarded_read(fuse_req_t req, fuse_ino_t ino, size_t size,
                         off_t off, struct fuse_file_info *fi)
{
	tls_enter();
	ns_request("read", ino, NULL);
	GUARDED(fault_reply(req), segfs_read(req, ino, size, off, fi));
	tls_leave();
}

static void guarded_listing(fuse_req_t req, fuse_ino_t ino, size_t size,
                            off_t off, struct fuse_file_info *fi, bool plus)
{
	tls_enter();
	ns_request("listing", ino, NULL);
	GUARDED(fault_reply(req), do_readdir(req, ino, size, off, fi, plus));
	tls_leave();
}

static void guarded_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                            off_t off, struct fuse_file_info *fi)
{
	guarded_listing(req, ino, size, off, fi, false);
}

static void guarded_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
                                off_t off, struct fuse_file_info *fi)
{
	guarded_listing(req, ino, size, off, fi, true);
}

static void guarded_getxattr(fuse_req_t req, fuse_ino_t ino,
                             const char *name, size_t size)
{
	tls_enter();
	ns_request("getxattr", ino, NULL);
	GUARDED(fault_reply(req), segfs_getxattr(req, ino, name, size));
	tls_leave();
}

static void guarded_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	tls_enter();
	ns_request("listxattr", ino, NULL);
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
