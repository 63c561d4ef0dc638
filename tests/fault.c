/*
 * fault.c — the wrappers behind fault.h: each counts its call while a
 * window is open and fails the armed one, else calls the real function.
 *
 * The symbols are the ones libkvseg's objects really reference (nm -u on
 * them): with _FILE_OFFSET_BITS=64 glibc's headers turn open into open64,
 * pread into pread64, mmap into mmap64 and so on, so those are the names
 * wrapped. A call that the core adds under a new name is not failed until
 * it is added here and to the --wrap list in tests/meson.build.
 */
#include "fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

/* ---- the window ---------------------------------------------------------- */

static struct {
	bool active, fired;
	enum fault_kind kind;
	unsigned long n;
	int err;
	unsigned long count[FAULT_KINDS];
	unsigned long before[FAULT_KINDS];
	const char *fired_call;
} g;

static const char *const kind_names[FAULT_KINDS] = {
    "alloc", "open",     "read",   "write", "fsync", "rename",
    "mmap",  "truncate", "unlink", "stat",  "lock",
};

const char *fault_kind_name(enum fault_kind k)
{
	return k < FAULT_KINDS ? kind_names[k] : "none";
}

void fault_start(enum fault_kind k, unsigned long n, int e)
{
	for (int i = 0; i < FAULT_KINDS; i++)
		g.count[i] = g.before[i] = 0;
	g.kind = k;
	g.n = k < FAULT_KINDS ? n : 0;
	g.err = e;
	g.fired = false;
	g.fired_call = "";
	g.active = true;
}

void fault_stop(void)
{
	g.active = false;
}

unsigned long fault_count(enum fault_kind k)
{
	return k < FAULT_KINDS ? g.count[k] : 0;
}

bool fault_fired(void)
{
	return g.fired;
}

const char *fault_fired_call(void)
{
	return g.fired_call;
}

unsigned long fault_count_before(enum fault_kind k)
{
	return k < FAULT_KINDS ? g.before[k] : 0;
}

/* Counts a call of kind k; is it the armed one? */
static bool armed_now(enum fault_kind k, const char *call)
{
	if (!g.active)
		return false;
	unsigned long c = ++g.count[k];
	if (g.fired || k != g.kind || c != g.n)
		return false;
	for (int i = 0; i < FAULT_KINDS; i++)
		g.before[i] = g.count[i] - (i == (int)k);
	g.fired = true;
	g.fired_call = call;
	return true;
}

/* Counts a call of kind k; true (errno set) when it is to fail. An armed
 * FAULT_SHORT goes through here: only short_now's callers shorten. */
static bool fail_now(enum fault_kind k, const char *call)
{
	if (!armed_now(k, call) || g.err == FAULT_SHORT)
		return false;
	errno = g.err;
	return true;
}

/* For the calls that can move fewer bytes: 1 to fail (errno set), 2 to
 * move half, 0 to go through. */
static int short_now(enum fault_kind k, const char *call)
{
	if (!armed_now(k, call))
		return 0;
	if (g.err == FAULT_SHORT)
		return 2;
	errno = g.err;
	return 1;
}

static size_t half(size_t n)
{
	return n > 1 ? n / 2 : n;
}

/* ---- live allocations: a set of pointers (linear probing) ---------------- */

#define LIVE_SLOTS (1u << 18)
static void *live[LIVE_SLOTS];
static size_t live_n;

static size_t slot_of(const void *p)
{
	uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
	return (size_t)(h >> 46); /* the top 18 bits */
}

static void live_add(void *p)
{
	if (!p)
		return;
	if (live_n >= LIVE_SLOTS / 2) {
		fprintf(stderr, "fault.c: more than %u live allocations\n",
		        LIVE_SLOTS / 2);
		abort();
	}
	size_t i = slot_of(p);
	while (live[i])
		i = (i + 1) % LIVE_SLOTS;
	live[i] = p;
	live_n++;
}

/* Removes p if the wrappers allocated it (libc may have, as getline's). */
static void live_remove(void *p)
{
	if (!p)
		return;
	size_t i = slot_of(p);
	while (live[i] != p) {
		if (!live[i])
			return;
		i = (i + 1) % LIVE_SLOTS;
	}
	live[i] = NULL;
	live_n--;
	/* backward shift: move up the entries that probed past slot i */
	for (size_t j = (i + 1) % LIVE_SLOTS; live[j];
	     j = (j + 1) % LIVE_SLOTS) {
		size_t home = slot_of(live[j]);
		/* live[j] may move to i when i lies cyclically in [home, j) */
		bool movable =
		    i <= j ? (home <= i || home > j) : (home <= i && home > j);
		if (movable) {
			live[i] = live[j];
			live[j] = NULL;
			i = j;
		}
	}
}

size_t fault_live(void)
{
	return live_n;
}

/* ---- allocation ---------------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void __real_free(void *p);

void *__wrap_malloc(size_t n)
{
	if (fail_now(FAULT_ALLOC, "malloc"))
		return NULL;
	void *p = __real_malloc(n);
	live_add(p);
	return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
	if (fail_now(FAULT_ALLOC, "calloc"))
		return NULL;
	void *p = __real_calloc(n, size);
	live_add(p);
	return p;
}

void *__wrap_realloc(void *old, size_t n)
{
	if (fail_now(FAULT_ALLOC, "realloc"))
		return NULL;
	void *p = __real_realloc(old, n);
	if (p || n == 0)
		live_remove(old);
	live_add(p);
	return p;
}

char *__wrap_strdup(const char *s)
{
	if (fail_now(FAULT_ALLOC, "strdup"))
		return NULL;
	char *p = __real_strdup(s);
	live_add(p);
	return p;
}

char *__wrap_strndup(const char *s, size_t n)
{
	if (fail_now(FAULT_ALLOC, "strndup"))
		return NULL;
	char *p = __real_strndup(s, n);
	live_add(p);
	return p;
}

void __wrap_free(void *p)
{
	live_remove(p);
	__real_free(p);
}

/* ---- files --------------------------------------------------------------- */

int __real_open64(const char *path, int flags, ...);
int __real_openat64(int dirfd, const char *path, int flags, ...);
DIR *__real_opendir(const char *path);
ssize_t __real_pread64(int fd, void *buf, size_t n, off_t at);
struct dirent64 *__real_readdir64(DIR *d);
ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __real_pwritev64(int fd, const struct iovec *iov, int n, off_t at);
int __real_fsync(int fd);
int __real_rename(const char *from, const char *to);
int __real_renameat2(int fd1, const char *from, int fd2, const char *to,
                     unsigned flags);
int __real_link(const char *from, const char *to);
void *__real_mmap64(void *addr, size_t len, int prot, int flags, int fd,
                    off_t at);
int __real_ftruncate64(int fd, off_t len);
int __real_fallocate64(int fd, int mode, off_t at, off_t len);
int __real_unlink(const char *path);
int __real_unlinkat(int dirfd, const char *path, int flags);
int __real_stat64(const char *path, struct stat64 *sb);
int __real_lstat64(const char *path, struct stat64 *sb);
int __real_fstat64(int fd, struct stat64 *sb);
int __real_fstatat64(int dirfd, const char *path, struct stat64 *sb, int flags);
int __real_flock(int fd, int op);

/* open's mode argument, when flags say there is one. */
#define MODE_ARG(flags, last)                                                  \
	mode_t mode = 0;                                                       \
	if ((flags) & (O_CREAT | __O_TMPFILE)) {                               \
		va_list ap;                                                    \
		va_start(ap, last);                                            \
		mode = (mode_t)va_arg(ap, int);                                \
		va_end(ap);                                                    \
	}

int __wrap_open64(const char *path, int flags, ...)
{
	MODE_ARG(flags, flags)
	if (fail_now(FAULT_OPEN, "open"))
		return -1;
	return __real_open64(path, flags, mode);
}

int __wrap_openat64(int dirfd, const char *path, int flags, ...)
{
	MODE_ARG(flags, flags)
	if (fail_now(FAULT_OPEN, "openat"))
		return -1;
	return __real_openat64(dirfd, path, flags, mode);
}

DIR *__wrap_opendir(const char *path)
{
	if (fail_now(FAULT_OPEN, "opendir"))
		return NULL;
	return __real_opendir(path);
}

ssize_t __wrap_pread64(int fd, void *buf, size_t n, off_t at)
{
	int how = short_now(FAULT_READ, "pread");
	if (how == 1)
		return -1;
	return __real_pread64(fd, buf, how ? half(n) : n, at);
}

struct dirent64 *__wrap_readdir64(DIR *d)
{
	if (fail_now(FAULT_READ, "readdir"))
		return NULL;
	return __real_readdir64(d);
}

ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
	int how = short_now(FAULT_WRITE, "write");
	if (how == 1)
		return -1;
	return __real_write(fd, buf, how ? half(n) : n);
}

ssize_t __wrap_pwritev64(int fd, const struct iovec *iov, int n, off_t at)
{
	int how = short_now(FAULT_WRITE, "pwritev");
	if (how == 1)
		return -1;
	if (how == 0)
		return __real_pwritev64(fd, iov, n, at);
	/* the first half of the bytes of iov (of its first 16 entries) */
	struct iovec v[16];
	size_t total = 0;
	int m = n < 16 ? n : 16;
	for (int i = 0; i < m; i++)
		total += iov[i].iov_len;
	size_t left = half(total);
	int k = 0;
	for (; k < m && left > 0; k++) {
		v[k] = iov[k];
		if (v[k].iov_len > left)
			v[k].iov_len = left;
		left -= v[k].iov_len;
	}
	return __real_pwritev64(fd, v, k, at);
}

int __wrap_fsync(int fd)
{
	if (fail_now(FAULT_FSYNC, "fsync"))
		return -1;
	return __real_fsync(fd);
}

int __wrap_rename(const char *from, const char *to)
{
	if (fail_now(FAULT_RENAME, "rename"))
		return -1;
	return __real_rename(from, to);
}

int __wrap_renameat2(int fd1, const char *from, int fd2, const char *to,
                     unsigned flags)
{
	if (fail_now(FAULT_RENAME, "renameat2"))
		return -1;
	return __real_renameat2(fd1, from, fd2, to, flags);
}

int __wrap_link(const char *from, const char *to)
{
	if (fail_now(FAULT_RENAME, "link"))
		return -1;
	return __real_link(from, to);
}

void *__wrap_mmap64(void *addr, size_t len, int prot, int flags, int fd,
                    off_t at)
{
	if (fail_now(FAULT_MMAP, "mmap"))
		return MAP_FAILED;
	return __real_mmap64(addr, len, prot, flags, fd, at);
}

int __wrap_ftruncate64(int fd, off_t len)
{
	if (fail_now(FAULT_TRUNCATE, "ftruncate"))
		return -1;
	return __real_ftruncate64(fd, len);
}

int __wrap_fallocate64(int fd, int mode, off_t at, off_t len)
{
	if (fail_now(FAULT_TRUNCATE, "fallocate"))
		return -1;
	return __real_fallocate64(fd, mode, at, len);
}

int __wrap_unlink(const char *path)
{
	if (fail_now(FAULT_UNLINK, "unlink"))
		return -1;
	return __real_unlink(path);
}

int __wrap_unlinkat(int dirfd, const char *path, int flags)
{
	if (fail_now(FAULT_UNLINK, "unlinkat"))
		return -1;
	return __real_unlinkat(dirfd, path, flags);
}

int __wrap_stat64(const char *path, struct stat64 *sb)
{
	if (fail_now(FAULT_STAT, "stat"))
		return -1;
	return __real_stat64(path, sb);
}

int __wrap_lstat64(const char *path, struct stat64 *sb)
{
	if (fail_now(FAULT_STAT, "lstat"))
		return -1;
	return __real_lstat64(path, sb);
}

int __wrap_fstat64(int fd, struct stat64 *sb)
{
	if (fail_now(FAULT_STAT, "fstat"))
		return -1;
	return __real_fstat64(fd, sb);
}

int __wrap_fstatat64(int dirfd, const char *path, struct stat64 *sb, int flags)
{
	if (fail_now(FAULT_STAT, "fstatat"))
		return -1;
	return __real_fstatat64(dirfd, path, sb, flags);
}

static void (*before_flock)(int fd);

void fault_before_flock(void (*fn)(int fd)) { before_flock = fn; }

int __wrap_flock(int fd, int op)
{
	void (*fn)(int fd) = before_flock;
	if (fn) {
		before_flock = NULL;
		fn(fd);
	}
	if (fail_now(FAULT_LOCK, "flock"))
		return -1;
	return __real_flock(fd, op);
}
