/*
 * fault.h — fault injection for the unit tests, SQLite style: fail the Nth
 * allocation, or the Nth call of one kind of system call, that libkvseg
 * makes, and count the calls of each kind.
 *
 * Only test_fault is linked with it. Its link line wraps the libc symbols
 * that libkvseg's objects call (-Wl,--wrap=SYMBOL, tests/meson.build):
 * libkvseg is linked statically into the test, so every call the core
 * makes to malloc, open64, pwritev64, ... goes to __wrap_SYMBOL here,
 * which counts it and fails it or calls __real_SYMBOL. Calls made inside
 * libc itself (opendir's own malloc) and in shared libraries (cmocka) are
 * not wrapped. Under AddressSanitizer __real_malloc is ASan's malloc, so
 * leaks and misuse are still seen.
 *
 * A fault is transient: the Nth call fails once (errno set, the call's
 * failure value returned) and later calls succeed again, so cleanup paths
 * run as they would after a real error. Calls are counted only between
 * fault_start and fault_stop, so the test's own calls outside that window
 * (its oracle, its checks) neither fail nor count.
 *
 * Every allocation made through the wrappers is tracked, inside the window
 * or not, until it is freed: fault_live() is how many are outstanding, so
 * a test finds a leak at the step that made it, in any build.
 */
#ifndef SEGFS_FAULT_H
#define SEGFS_FAULT_H

#include <stdbool.h>
#include <stddef.h>

enum fault_kind {
	FAULT_ALLOC,    /* malloc, calloc, realloc, strdup, strndup: ENOMEM */
	FAULT_OPEN,     /* open, openat, opendir */
	FAULT_READ,     /* pread, readdir */
	FAULT_WRITE,    /* write, pwritev */
	FAULT_FSYNC,    /* fsync */
	FAULT_RENAME,   /* rename, renameat2, link */
	FAULT_MMAP,     /* mmap */
	FAULT_TRUNCATE, /* ftruncate, fallocate */
	FAULT_UNLINK,   /* unlink, unlinkat */
	FAULT_STAT,     /* stat, lstat, fstat, fstatat */
	FAULT_LOCK,     /* flock */
	FAULT_KINDS,
	FAULT_NONE = FAULT_KINDS, /* count only */
};

/* Given to fault_start as the error: instead of failing, the armed read
 * or write (pread, write, pwritev) moves half of the bytes asked for, at
 * least one, as the system may; other calls of its kind go through. */
#define FAULT_SHORT (-1)

/* The kind's name ("alloc", "open", ...). */
const char *fault_kind_name(enum fault_kind k);

/* Starts counting calls from zero; the nth call (1-based) of kind k
 * fails with error e (ENOMEM for FAULT_ALLOC). k FAULT_NONE or n 0 only
 * counts. */
void fault_start(enum fault_kind k, unsigned long n, int e);
/* Stops counting and failing. */
void fault_stop(void);

/* Calls of kind k in the last window (so far, while it is open). */
unsigned long fault_count(enum fault_kind k);
/* Did the armed call fail in the last window? */
bool fault_fired(void);
/* The failed call's name ("pwritev64"), or "" if none failed. */
const char *fault_fired_call(void);
/* The calls of kind k made before the failed one, in its window. */
unsigned long fault_count_before(enum fault_kind k);

/* Calls fn(fd) once, at the next flock the core makes, before the lock is
 * taken (with the hook cleared first, so fn may call the core): a test
 * plays a race there. NULL clears it. */
void fault_before_flock(void (*fn)(int fd));

/* Allocations made through the wrappers and not yet freed. */
size_t fault_live(void);

#endif
