/*
 * kvseg_fault.c — a segment file cut short while kvseg reads it.
 *
 * kvseg reads segments through their mappings (kvs_segment_open). When
 * another process truncates a segment file in place after kvseg mapped it,
 * a read of a page past the file's new end raises SIGBUS: kvseg would die
 * with "Bus error" and leave the temporary output of a build or merge
 * behind. The handler here instead names the file and the byte that is
 * gone ("kvseg VERB: FILE: ..."), removes kvseg's own temporary files (the
 * writer's and the catalog's ".NAME.tmp-XXXXXX" and ".NAME.pub-XXXXXX"
 * that kvseg holds open, and build's runs), and exits with status 3: a
 * damaged segment. What was published before the fault stays as it was,
 * and no output is left half-written. A catalog merge's output already
 * linked at its final name is left to the catalog's recovery, which alone
 * can tell whether the catalog names it.
 *
 * Everything the handler calls is async-signal-safe: open, read, readlink,
 * fcntl, fstat, unlink, close, write and _exit. A SIGBUS that the kernel
 * did not raise for an access (kill -BUS) ends kvseg as it always did.
 *
 * An interrupt (SIGINT, as from Ctrl-C, SIGTERM, SIGHUP) removes the same
 * files, then ends kvseg by the signal as before: a build or merge stopped
 * that way leaves no hidden temporary file or run behind.
 */
#include "kvseg_cli.h"

#include "kvseg/catalog.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *fault_verb = "";
static char **const *fault_paths;  /* build's runs: removed on a fault */
static const size_t *fault_count;

/* ---- async-signal-safe text --------------------------------------------- */

struct out {
	char buf[4096 + 512];
	size_t len;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (n > sizeof o->buf - 1 - o->len)
		n = sizeof o->buf - 1 - o->len;
	memcpy(o->buf + o->len, s, n);
	o->len += n;
}

static void puts_(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

/* v in decimal at d (24 bytes); returns its length. */
static size_t u64_text(char d[24], uint64_t v)
{
	char t[24];
	size_t i = sizeof t, n;
	do {
		t[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	n = sizeof t - i;
	memcpy(d, t + i, n);
	return n;
}

static void put_u64(struct out *o, uint64_t v)
{
	char d[24];
	put(o, d, u64_text(d, v));
}

/* Parses hex digits at *p; moves *p past them. */
static uint64_t hex(const char **p, const char *end)
{
	uint64_t v = 0;
	for (; *p < end; (*p)++) {
		char c = **p;
		unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
		             : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
		                                    : 16;
		if (d == 16)
			break;
		v = v * 16 + d;
	}
	return v;
}

/*
 * The file mapped at addr, from /proc/self/maps ("START-END PERMS OFFSET
 * DEV INODE PATH" per line): its path into path (NUL-terminated) and the
 * file offset of addr into *off. False when no file is mapped there.
 */
static bool mapped_file(uintptr_t addr, char *path, size_t cap, uint64_t *off)
{
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	static char buf[8192];
	size_t have = 0;
	bool found = false;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof buf - have);
		if (n <= 0)
			break;
		have += (size_t)n;
		char *line = buf, *end = buf + have, *nl;
		while (!found && (nl = memchr(line, '\n', (size_t)(end - line)))) {
			const char *p = line;
			uint64_t lo = hex(&p, nl);
			p += p < nl; /* '-' */
			uint64_t hi = hex(&p, nl);
			if (addr >= lo && addr < hi) {
				/* PERMS, then OFFSET */
				while (p < nl && *p == ' ')
					p++;
				while (p < nl && *p != ' ')
					p++;
				while (p < nl && *p == ' ')
					p++;
				uint64_t base = hex(&p, nl);
				const char *slash = memchr(p, '/', (size_t)(nl - p));
				if (slash) {
					size_t len = (size_t)(nl - slash);
					if (len >= cap)
						len = cap - 1;
					memcpy(path, slash, len);
					path[len] = '\0';
					*off = base + (addr - lo);
					found = true;
				}
				break;
			}
			line = nl + 1;
		}
		if (found || (line == buf && have == sizeof buf))
			break; /* found, or a line longer than buf */
		have = (size_t)(end - line);
		memmove(buf, line, have);
	}
	close(fd);
	return found;
}

/* Closes and removes the temporary files kvseg holds open for writing. */
static void remove_temporaries(void)
{
	for (int fd = 3; fd < 1024; fd++) {
		char link[40] = "/proc/self/fd/", path[4096];
		link[14 + u64_text(link + 14, (uint64_t)fd)] = '\0';
		ssize_t n = readlink(link, path, sizeof path - 1);
		if (n <= 0)
			continue;
		path[n] = '\0';
		/* written by kvseg: an input it reads is never removed */
		int mode = fcntl(fd, F_GETFL);
		const char *name = strrchr(path, '/');
		struct stat sb;
		if (name && kvs_catalog_temporary_name(name + 1) && mode >= 0 &&
		    (mode & O_ACCMODE) != O_RDONLY &&
		    /* linked at its final name (a publish hook): whether the
		     * catalog names it now is for recovery to find out */
		    !(fstat(fd, &sb) == 0 && sb.st_nlink > 1)) {
			unlink(path);
			close(fd);
		}
	}
	if (fault_paths && *fault_paths)
		for (size_t i = 0; i < *fault_count; i++)
			unlink((*fault_paths)[i]);
}

static void on_stop(int sig)
{
	remove_temporaries();
	signal(sig, SIG_DFL);
	raise(sig); /* blocked until the handler returns: then it ends kvseg */
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (si->si_code <= 0) { /* sent, not raised by an access */
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	static char path[4096];
	static struct out o;
	uint64_t off = 0;
	bool known = mapped_file((uintptr_t)si->si_addr, path, sizeof path,
	                         &off);
	remove_temporaries();
	o.len = 0;
	puts_(&o, "kvseg ");
	puts_(&o, fault_verb);
	puts_(&o, ": ");
	if (known) {
		puts_(&o, path);
		puts_(&o, ": the file was cut short while kvseg read it (its "
		          "byte ");
		put_u64(&o, off);
		puts_(&o, " is gone): damaged segment");
	} else {
		puts_(&o, "a read of a mapped file failed (SIGBUS): a segment "
		          "file was cut short while kvseg read it");
	}
	puts_(&o, "\n");
	for (size_t done = 0; done < o.len;) {
		ssize_t n = write(2, o.buf + done, o.len - done);
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	_exit(EXIT_DATA);
}

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define STOP_SIGNALS (sizeof stop_signals / sizeof stop_signals[0])

static void stop_set(sigset_t *set)
{
	sigemptyset(set);
	for (size_t i = 0; i < STOP_SIGNALS; i++)
		sigaddset(set, stop_signals[i]);
}

int cli_fault_install(const char *verb)
{
	fault_verb = verb;
	/* neither handler runs inside the other */
	struct sigaction bus, stop;
	memset(&bus, 0, sizeof bus);
	bus.sa_sigaction = on_sigbus;
	bus.sa_flags = SA_SIGINFO;
	stop_set(&bus.sa_mask);
	if (sigaction(SIGBUS, &bus, NULL) != 0)
		return -1;
	memset(&stop, 0, sizeof stop);
	stop.sa_handler = on_stop;
	stop_set(&stop.sa_mask);
	for (size_t i = 0; i < STOP_SIGNALS; i++) {
		struct sigaction old;
		/* one the shell ignores (a background job's SIGINT) stays so */
		if (sigaction(stop_signals[i], NULL, &old) != 0)
			return -1;
		if (old.sa_handler != SIG_IGN &&
		    sigaction(stop_signals[i], &stop, NULL) != 0)
			return -1;
	}
	return 0;
}

void cli_fault_remove(char **const *paths, const size_t *count)
{
	sigset_t old;
	cli_fault_hold(&old);
	fault_paths = paths;
	fault_count = count;
	cli_fault_release(&old);
}

void cli_fault_hold(sigset_t *old)
{
	sigset_t set;
	stop_set(&set);
	sigprocmask(SIG_BLOCK, &set, old);
}

void cli_fault_release(const sigset_t *old)
{
	sigprocmask(SIG_SETMASK, old, NULL);
}
