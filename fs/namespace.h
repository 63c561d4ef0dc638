/*
 * namespace.h — the tree segfs shows, in plain C: what a name in a
 * directory is, an inode's attributes, a listing from an offset, a file's
 * bytes, a key's extended attributes, the filesystem's numbers.
 *
 *   /segments/NAME/KEY   every live segment, oldest first in the catalog
 *   /view/KEY            the composed view: each key's newest binding
 *   /control/catalog     the live segments, their generation and modes
 *   /control/merge       write a request to merge segments
 *   /control/status      every job since mount, one JSON line each
 *   /control/wait/ID     reading it waits for job ID to end
 *
 * namespace.c answers names, attributes and bytes, listing.c listings,
 * over scope.c's directories of keys. No FUSE header: the FUSE layer
 * (fuse_ops.c) unpacks a request, calls one of these and turns the
 * answer into its reply, and the unit test (tests/test_namespace.c)
 * calls them over a directory of segments with no mount. Inode numbers are ino.h's; errors are errno values, and every
 * EIO is logged where it arises, naming the request ns_request noted.
 *
 * Calls that read segments (lookup, getattr, read, listing, xattrs) touch
 * their mappings: the caller runs them between tls_enter and tls_leave,
 * guarded (guard.h), and turns a fault into its reply with ns_fault.
 */
#ifndef SEGFS_NAMESPACE_H
#define SEGFS_NAMESPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include "ino.h"
#include "state.h"

/* The request this thread serves (its inode; a lookup's: the directory,
 * and the name), for the messages of its EIOs. */
void ns_request(const char *op, uint64_t ino, const char *name);

/* After a fault at addr in a guarded call (guard.h): marks the segment
 * damaged, logs it, and returns the request's errno (EIO). */
int ns_fault(const void *addr);

/* ---- names and attributes ------------------------------------------------ */

/* What a name is in a directory. */
typedef struct ns_entry {
	uint64_t ino;   /* 0: no such name (an answer, not an error) */
	struct stat st; /* its attributes, when ino */
	bool cache;     /* may the kernel keep the name (or its absence):
	                 * false under a view/ the catalog has replaced, and
	                 * in control/wait/ */
	bool key;       /* a key file of a directory of keys (what
	                 * retire_note_entry remembers) */
} ns_entry;

/*
 * Looks name up in directory parent. On success with e->ino, the entry
 * holds what its inode names, as the kernel's lookup count does, until
 * ns_forget (also when the reply could not be sent). ENAMETOOLONG,
 * ENOTDIR, ENOENT (the directory is gone), ENOMEM, EIO.
 */
int ns_lookup(uint64_t parent, const char *name, ns_entry *e);
/* Drops n of the references lookups and listings gave ino. */
void ns_forget(uint64_t ino, uint64_t n);
/* Attributes of ino: 0, ENOENT (gone), ESTALE, ENOMEM, EIO. */
int ns_getattr(uint64_t ino, struct stat *st);
/* Attributes of control/wait/ID, inode ino, at size (control.c). */
void wait_stat(struct stat *st, uint64_t ino, uint64_t size);

/* ---- bytes ----------------------------------------------------------------
 */

/* An answer's bytes: p, borrowed (a segment's mapping, a snapshot's
 * text: valid until the request ends), or in owned or text. */
typedef struct ns_bytes {
	const void *p;
	size_t len;
	void *owned;   /* malloc'd, freed by ns_bytes_free */
	char text[96]; /* key_bits, the list of names */
} ns_bytes;
void ns_bytes_free(ns_bytes *b);

/* A read of size bytes at off: a key's value, control/catalog,
 * control/status, control/merge. EINVAL (off < 0), EISDIR, ENOENT,
 * ESTALE, ENOMEM, EIO. control/wait/ID is not read here: control_wait
 * replies once its job has ended (EAGAIN). */
int ns_read(uint64_t ino, size_t size, off_t off, ns_bytes *out);

/* Only control/merge is written (truncated, `>`): the rest is EROFS. */
bool ns_writable(uint64_t ino);
int ns_write(uint64_t ino, const char *buf, size_t size, off_t off);
void ns_truncate(uint64_t ino);

/* Extended attributes: user.segfs.* of key files. A value, or the list
 * of names (NUL-terminated each). EOPNOTSUPP outside user.*, ENODATA,
 * and ns_read's errors of the key. */
int ns_getxattr(uint64_t ino, const char *name, ns_bytes *out);
int ns_listxattr(uint64_t ino, ns_bytes *out);

/* The filesystem's numbers: its segments' bytes and records. */
void ns_statfs(struct statvfs *sv);

/* ---- listings -------------------------------------------------------------
 */

/* An open directory of keys; NULL for the fixed directories (root,
 * segments/, control/, control/wait/). */
typedef struct ns_dir ns_dir;

/* Opens directory ino for listing: 0 with *h (NULL for a fixed one),
 * ENOTDIR, ENOENT, ENOMEM, EIO. The listing holds its segments until
 * ns_closedir. */
int ns_opendir(uint64_t ino, ns_dir **h);
void ns_closedir(ns_dir *h);

/* One entry of a listing. */
typedef struct ns_dirent {
	const char *name;
	struct stat st; /* st_ino its inode (a -o sep directory's: a hint,
	                 * until ns_dirent_hold gives it its own) */
	off_t off;      /* the offset that resumes after it */
	bool cache;     /* may the kernel keep the name (ns_entry) */
	/* what ns_dirent_hold takes: a -o sep directory's prefix in its
	 * scope, or a count of st_ino */
	const uint8_t *dir_prefix;
	size_t dir_plen;
	scope sc;
	bool counted;
} ns_dirent;

/* Adds e to the reply: false when it does not fit (the listing then
 * stops before it). With attributes (a readdirplus), the entry must hold
 * what it names as a lookup does: once it is known to fit, call
 * ns_dirent_hold, and leave it out when that fails. */
typedef bool (*ns_fill_fn)(void *ctx, ns_dirent *e);
bool ns_dirent_hold(ns_dirent *e);

/*
 * Lists directory ino (h from ns_opendir) from offset off, calling fill
 * for each entry until it refuses one or the directory ends; plus: a
 * listing with attributes (control/merge and control/status get a file
 * and a text). Offsets name positions in the segments, so a listing
 * resumed at any offset continues after the entry it names, whatever
 * was listed since. Returns the errno to reply with, when no entry was
 * given; an error after entries is kept for the next call.
 */
int ns_readdir(uint64_t ino, ns_dir *h, off_t off, bool plus, ns_fill_fn fill,
               void *ctx);

#endif
