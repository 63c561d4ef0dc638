/*
 * state.h — segfs's live state (FUSE-free): segment slots and catalog
 * snapshots, the options in S, per-thread cursors, the directories of -o
 * sep, and what the state reports to the layers above it (the kernel
 * notifier, retirement's hooks).
 *
 * Lifetimes. A slot is one opened segment file; slot numbers are never
 * reused during a mount. A snapshot is one catalog generation: its live
 * slots, oldest first. Both are counted: a snapshot holds its slots; the
 * kernel's lookup counts hold the inodes that name them (see ino_kind);
 * open directories and -o sep directories hold theirs. A snapshot or slot
 * whose count reaches zero is dead: a dead slot's file is unmapped (once
 * no thread's cursor holds it: slot_cursor), and deleted if a merge
 * retired it. A retired slot dies at the latest S.retire_after seconds
 * after its retirement, whatever its count (retire.c). The structures
 * themselves are kept until unmount (they are small), so a request racing
 * with a death reads stale but valid memory; that is what keeps the read
 * path free of locks.
 */
#ifndef SEGFS_STATE_H
#define SEGFS_STATE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kvseg/catalog.h"
#include "kvseg/segment.h"
#include "ino.h"

/* view/'s inode: it serves the current snapshot, and gets a new number
 * when the catalog changes what it shows, so that the kernel's cached
 * entries under the old number are never reached again (state.c). */
static inline uint64_t view_ino(void);

typedef struct kernel_notifier kernel_notifier;

/* ---- slots and snapshots ------------------------------------------------- */

typedef struct slot {
	uint32_t id;
	kvs_segment *seg; /* NULL once dead (under S.lock) */
	char name[KVS_CATALOG_MAX_NAME + 1];
	kvs_segment_info info;
	struct stat st;      /* the segment file's */
	atomic_uint_fast64_t refs;
	bool retired;        /* no longer live */
	double retired_at;   /* when (CLOCK_MONOTONIC seconds; retire.c) */
	bool linked;         /* .NAME.retired is ours to delete at death */
	bool busy;           /* an input of a queued or running job, or of
	                      * a request of the write being checked */
	atomic_bool damaged; /* its file was cut short under the mapping:
	                      * nothing reads it any more (guard.h) */
} slot;

typedef struct snap {
	uint64_t id;
	uint64_t generation;
	atomic_uint_fast64_t refs;
	size_t n;
	uint32_t *live; /* slot ids, oldest first */
	char *catalog;  /* control/catalog's text */
	size_t catalog_len;
	struct stat st; /* times of the catalog file */
	mode_t read;    /* view/'s read bits: those every live segment's
	                 * file grants (0444 when there is none) */
} snap;

/* The read bits (0444 at most) a segment's files and directories get: its
 * file's, so that -o allow_other never shows a key to a user who cannot
 * read the segment. */
static inline mode_t slot_read(const slot *s)
{
	return s->st.st_mode & 0444;
}

struct segfs_state {
	/* options */
	char *segdir;
	bool tombstones, skip_bad, verify, keep_retired;
	bool read_only;     /* -o ro */
	const char *ro_why; /* why segfs writes nothing in SEGDIR (-o ro, an
	                     * unwritable SEGDIR, bad segments skipped in a
	                     * directory without a catalog), or NULL */
	double retire_after; /* a retired slot is closed this long after */
	int sep; /* -1: flat directories */
	double timeout;
	unsigned workers, queue;
	unsigned history; /* ended jobs control/status keeps */
	/* live state */
	pthread_mutex_t lock;  /* slot and snapshot births and deaths */
	pthread_mutex_t publish; /* catalog changes, one at a time */
	_Atomic(snap *) current;
	atomic_uint_fast64_t view_epoch; /* bumped when view/ changes */
	kvs_catalog *cat;    /* under publish */
	struct stat dir_st;  /* SEGDIR's */
	_Atomic(const kernel_notifier *) notify; /* state_notify_set */
	pthread_key_t tls_key;
};
extern struct segfs_state S;

static inline uint64_t view_ino(void)
{
	return make_ino(K_VIEWDIR, atomic_load(&S.view_epoch));
}

/* SEGDIR/NAME, or with mark SEGDIR/.NAME.MARK (.retired, .pub-). */
void segdir_path(char out[PATH_MAX], const char *name, const char *mark);

slot *slot_get(uint64_t id);
/* Is the slot's segment still open (readable without S.lock)? */
static inline bool slot_alive(const slot *s)
{
	return s && __atomic_load_n(&s->seg, __ATOMIC_ACQUIRE) != NULL;
}
/* What a damaged slot's messages say of its file. */
#define DAMAGED_WHY "the file is shorter than when it was opened"
static inline bool slot_damaged(const slot *s)
{
	return s && atomic_load(&s->damaged);
}
/* After a fault at addr in a guarded read (guard.h): marks the slot whose
 * mapping holds addr damaged and says so once (log.h); returns it, and
 * addr's offset in its file in *off. Aborts when no segment holds addr
 * (that SIGBUS was not a cut-short file). */
slot *slot_damage_at(const void *addr, uint64_t *off);
snap *snap_get(uint64_t id);
void slot_ref(slot *s, uint64_t n);
void slot_unref(slot *s, uint64_t n);
void snap_ref(snap *s, uint64_t n);
void snap_unref(snap *s, uint64_t n);
/* The current snapshot with a reference the caller drops (no lock). */
snap *snap_current(void);

/* Mount: opens the catalog and every live segment (exits on error;
 * segdir.c). */
void state_load(void);
/*
 * Builds the snapshot of S.cat's generation: its segments are the live
 * slots of cur (NULL at mount) with the same name and header CRC, or new
 * slots. With skip_bad, a segment that fails is left out (and named);
 * otherwise the build fails. On success *out is registered, with one
 * reference.
 */
int snap_build(const snap *cur, snap **out, kvs_error *err);
/* Unmount: closes everything (the -o sep directories first: ptab_free_all). */
void state_unload(void);
/*
 * Reads the newest catalog generation and makes it current (opening new
 * segments, retiring the rest), then tells the kernel what changed
 * (S.notify): the entries it caches under view/ and of retired segments
 * are dropped, so that none keeps a retired segment (see retire.c). Under
 * S.publish. Returns 0 or an errno (the current snapshot stays) with a
 * message in err.
 */
int state_reload_locked(kvs_error *err);
/* Starts the thread that reloads when another process changes the
 * catalog (inotify on SEGDIR; watch.c). */
int state_watch_start(void);
void state_watch_stop(void);

/*
 * This thread's cursor on slot s (opened on first use), or NULL. Only
 * between tls_enter and tls_leave: a cursor holds its segment's mapping,
 * and a slot's death closes the cursors of every thread outside a
 * request at once, and of the others when they leave theirs, so that no
 * thread keeps a dead segment mapped (however long it then stays idle).
 */
kvs_cursor *slot_cursor(slot *s);
void tls_enter(void);
void tls_leave(void);
/* Closes this thread's cursors. */
void tls_release(void);

/* Under S.lock: closes the slot's segment (unmaps it once no thread's
 * cursor holds it) and deletes its .NAME.retired; for a slot without
 * readers, or a retired one held too long (retire.c). */
void slot_die(slot *s);

/* ---- what the state reports -------------------------------------------------
 * The state tells its upper layers what changed through callbacks they
 * register, never by calling them: the FUSE layer tells the kernel
 * (kernel_notifier), retire.c keeps track of retired slots
 * (retire_hooks). */

/*
 * What the kernel caches that a change makes wrong: an entry (parent,
 * name) or an inode's attributes and listing. Called without S.lock (the
 * kernel may send requests meanwhile) and never from within a request's
 * handler, which would deadlock: what a lookup finds stale is dropped
 * later by the reaper (retire_drop_entry_later).
 */
struct kernel_notifier {
	void *ctx; /* the FUSE session */
	void (*inval_entry)(void *ctx, uint64_t parent, const char *name);
	void (*inval_inode)(void *ctx, uint64_t ino);
};
/* Registers n once the mount is in place; NULL at unmount, when nobody
 * would answer what a notification may wait for. */
void state_notify_set(const kernel_notifier *n);

/* Under S.lock, from state_reload_locked: s is no longer live; then,
 * after view/ got its new inode, the catalog changed. */
typedef struct retire_hooks {
	void (*slot_retired_locked)(slot *s);
	void (*changed_locked)(void);
} retire_hooks;
/* Registers h (retire_start; NULL: retire_stop). */
void state_retire_hooks(const retire_hooks *h);

/* ---- -o sep directories (ptab.c) --------------------------------------- */

/* A scope: a slot (segments/NAME, id its number), or view/ (the current
 * snapshot; id the epoch of the view/ inode it was reached through, so
 * that the directories of -o sep under each view/ inode are their own). */
typedef struct scope {
	bool view;
	uint64_t id;
} scope;

/* The directory (sc, prefix) with its lookup count raised by one; 0 when
 * out of memory. */
uint64_t ptab_ref(scope sc, const uint8_t *prefix, size_t plen);
void ptab_forget(uint64_t id, uint64_t count);
/* Copies the directory's scope and prefix (malloc'd); ENOENT, ENOMEM. */
int ptab_get(uint64_t id, scope *sc, uint8_t **prefix, size_t *plen);
void ptab_free_all(void);

int kvs_errno(kvs_status st);
const char *mode_name(kvs_profile p, kvs_framing f);

#endif
