/*
 * scope.h — directories of keys (scope.c), shared by the namespace's
 * lookups (namespace.c) and listings (listing.c); not used outside them.
 * A directory of keys is a scope (a slot: segments/NAME; or view/: the
 * current snapshot's segments) and a key prefix (-o sep's directories).
 * Every call runs in a request (tls_enter), and fails with an errno; an
 * EIO has been logged, naming the request ns_request noted.
 */
#ifndef SEGFS_SCOPE_H
#define SEGFS_SCOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kvseg/segment.h"
#include "state.h"
#include "kvseg/view.h"

/* A directory of keys: a scope (a slot or view/) and a key prefix. */
typedef struct dirref {
	scope sc;
	snap *sn; /* view/: the current snapshot, counted until dir_release */
	uint8_t *prefix; /* owned */
	size_t plen;
} dirref;

/* Resolves ino to a directory of keys (ENOTDIR, ENOENT); dir_release
 * after success. */
int dir_resolve(uint64_t ino, dirref *d);
void dir_release(dirref *d);
/* Under a view/ the catalog has since replaced: the kernel must not keep
 * the entries given there. */
bool scope_is_stale(scope sc);
bool scope_stale(const dirref *d);

/* The scope's segments: how many, the slot id of the i-th (oldest
 * first); are all open; a damaged one or NULL; are tombstones shown. */
size_t scope_count(const dirref *d);
uint32_t scope_id(const dirref *d, size_t i);
bool scope_alive(const dirref *d);
const slot *scope_damaged(const dirref *d);
bool scope_tombstones(const dirref *d);
/* This thread's cursors on the scope's segments (a malloc'd array). */
int scope_cursors(const dirref *d, kvs_cursor ***out, size_t *n);
/* A view of the directory's own, with cursors of its own (open
 * directories); one over cursors c[0 .. n) this thread keeps
 * (scope_cursors). kvs_view_close after success. */
int scope_open(const dirref *d, kvs_view **v);
int scope_view(const dirref *d, kvs_cursor *const *c, size_t n,
               kvs_view **v);
/* The slot of a view's current binding. */
uint32_t view_slot(const dirref *d, const kvs_view *v);
/* Looks key up: *found when visible, then *slot_out and *ord name it. */
int scope_lookup(const dirref *d, const uint8_t *key, uint64_t bits,
                 bool *found, uint32_t *slot_out, uint64_t *ord);
bool has_prefix(const uint8_t *key, uint64_t bits, const uint8_t *p,
                size_t plen);
/* Does a visible key of the scope start with p? */
int scope_has_prefix(const dirref *d, const uint8_t *p, size_t plen,
                     bool *yes);

/* Attributes: a directory's and a file's, owner and times from `from`;
 * the scope's times and read bits; a key file's. */
void dir_stat(struct stat *st, uint64_t ino, const struct stat *from,
              nlink_t nlink, mode_t read);
void file_stat(struct stat *st, uint64_t ino, const struct stat *from,
               uint64_t size, mode_t mode);
const struct stat *scope_times(const dirref *d);
mode_t scope_read(const dirref *d);
/* This thread's cursor of slot id on record ord; key file ino's
 * attributes, its cursor left in *cur (if not NULL); the key file (s,
 * ord) as an entry of directory d. */
int key_at(uint64_t id, uint64_t ord, kvs_cursor **out);
int key_attr(uint64_t ino, struct stat *st, kvs_cursor **cur);
uint64_t key_ino(const dirref *d, uint32_t s, uint64_t ord);

/* Why this thread's request fails with EIO because of segment s (NULL:
 * one of view/'s), logged; returns EIO. The same for a damaged segment,
 * and for a core status (its errno; EIO logged, naming the step); and
 * for a step over the directory's scope. */
int eio(const slot *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int eio_damaged(const slot *s);
int kvs_fail(const slot *s, kvs_status st, const char *what);
int scope_fail(const dirref *d, kvs_status st, const char *what);

#endif
