/*
 * segfs.h — what the parts of the daemon share: the live state (segment
 * slots and catalog snapshots), the inode numbering, and the control
 * files' entry points.
 *
 * state.c    slots, snapshots, the catalog (reload, publication
 *            callbacks), per-thread cursors, the directories -o sep
 *            makes, the catalog watcher
 * segdir.c   opening SEGDIR at mount: its catalog, whether segfs may
 *            write there, leftovers of a killed segfs
 * retire.c   what gives merged-away segments' space back: dropping the
 *            kernel's entries of them, closing those held too long
 * control.c  control/merge requests, the job queue and its workers,
 *            control/status and control/wait
 * segfs.c    the FUSE operations and main()
 * cmdline.c  the command line; mountpoint.c the mount point's checks
 *
 * Lifetimes. A slot is one opened segment file; slot numbers are never
 * reused during a mount. A snapshot is one catalog generation: its live
 * slots, oldest first. Both are counted: a snapshot holds its slots; the
 * kernel's lookup counts hold the inodes that name them (see ino_kind);
 * open directories and -o sep directories hold theirs. A snapshot or slot
 * whose count reaches zero is dead: a dead slot's file is unmapped (once
 * no thread's cursor holds it: slot_cursor), and deleted if a merge
 * retired it. A retired slot dies at the latest S.retire_after seconds
 * after its retirement, whatever its count (retire.c). The structures themselves are kept until
 * unmount (they are small), so a request racing with a death reads stale
 * but valid memory; that is what keeps the read path free of locks.
 */
#ifndef SEGFS_SEGFS_H
#define SEGFS_SEGFS_H

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kvseg/catalog.h"
#include "kvseg/segment.h"
#include "view.h"

/* ---- inode numbers ---------------------------------------------------------
 * bits 63..60 the kind; for keys, bits 59..40 the slot and 39..0 the
 * record's ordinal in the slot's segment. */
enum {
	INO_ROOT = FUSE_ROOT_ID,
	INO_SEGMENTS = 2,
	INO_CONTROL = 3,
	INO_WAITDIR = 6, /* control/wait */
};
enum ino_kind {
	K_FIXED = 0,
	K_SEGDIR = 1,  /* segments/NAME: the slot */
	K_SEGKEY = 2,  /* a key of segments/NAME: slot and ordinal */
	K_VIEWKEY = 3, /* a key of view/: the binding's slot and ordinal */
	K_PREFIX = 4,  /* a directory of -o sep: its id */
	K_HINT = 5,    /* d_ino of a directory in a plain listing */
	K_CATALOG = 7, /* control/catalog of one snapshot: its id */
	K_VIEWDIR = 6, /* view/ (the current snapshot): its epoch */
	K_WAIT = 8,    /* control/wait/ID as one lookup saw it (wait_ino) */
	K_STATUS = 9,  /* control/status as one lookup saw it: its text id */
	K_MERGE = 10,  /* control/merge as one lookup saw it: its file id */
};
#define ORD_BITS 40
#define SLOT_BITS 20
#define MAX_IDS ((uint64_t)1 << SLOT_BITS) /* slots, snapshots */
#define ORD_MASK ((UINT64_C(1) << ORD_BITS) - 1)

static inline fuse_ino_t make_ino(enum ino_kind k, uint64_t low)
{
	return (fuse_ino_t)((uint64_t)k << 60 | low);
}
static inline enum ino_kind ino_kind(fuse_ino_t ino)
{
	return (enum ino_kind)(ino >> 60);
}
static inline uint64_t ino_low(fuse_ino_t ino)
{
	return ino & ((UINT64_C(1) << 60) - 1);
}
static inline uint64_t make_pos(uint32_t slot, uint64_t ord)
{
	return (uint64_t)slot << ORD_BITS | ord;
}

/* control/wait/ID of one lookup: bits 59..40 the lookup's serial (mod
 * 2^20), 39..0 the job id (below 2^40: a trillion requests). */
static inline fuse_ino_t wait_ino(uint64_t job, uint64_t serial)
{
	return make_ino(K_WAIT, (serial & (MAX_IDS - 1)) << ORD_BITS | job);
}
static inline uint64_t wait_job(fuse_ino_t ino)
{
	return ino_low(ino) & ORD_MASK;
}

/* view/'s inode: it serves the current snapshot, and gets a new number
 * when the catalog changes what it shows, so that the kernel's cached
 * entries under the old number are never reached again (state.c). */
static inline fuse_ino_t view_ino(void);

/* ---- slots and snapshots ---------------------------------------------------- */

typedef struct slot {
	uint32_t id;
	kvs_segment *seg; /* NULL once dead (under S.lock) */
	char name[KVS_CATALOG_MAX_NAME + 1];
	kvs_segment_info info;
	struct stat st;      /* the segment file's */
	atomic_uint_fast64_t refs;
	bool retired;        /* no longer live */
	double retired_at;   /* when (CLOCK_MONOTONIC seconds) */
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
	struct fuse_session *se;
	pthread_key_t tls_key;
};
extern struct segfs_state S;

static inline fuse_ino_t view_ino(void)
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
void state_unload(void);
/*
 * Reads the newest catalog generation and makes it current (opening new
 * segments, retiring the rest), then tells the kernel what changed: the
 * entries it caches under view/ and of retired segments are dropped, so
 * that none keeps a retired segment (see retire.c). Under
 * S.publish. Returns 0 or an errno (the current snapshot stays) with a
 * message in err.
 */
int state_reload_locked(kvs_error *err);
/* Starts the thread that reloads when another process changes the
 * catalog (inotify on SEGDIR). */
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

/* ---- retirement (retire.c) -------------------------------------------------
 * Retired slots that readers still hold (the kernel's open files, an open
 * listing) are closed S.retire_after seconds after their retirement by a
 * thread of their own, the reaper: their files then fail with ESTALE, and
 * their mapping and file go. */
int retire_start(void);
void retire_stop(void);
/* Under S.lock: s is no longer live (state_reload_locked). */
void retire_slot_locked(slot *s);
/* Under S.lock, after view/ got its new inode: the recent entries are to
 * be dropped (retire_note_entry). */
void retire_changed_locked(void);
/*
 * An entry given under a view/ that the catalog has replaced (segfs.c,
 * scope_stale): out of reach for new paths, yet the kernel would keep it
 * (and the segment its inode names) until the timeout. The reaper drops
 * it from the kernel's cache a moment later (a notification from within
 * the lookup would deadlock). Too many at once are left to -o
 * retire_after.
 */
void retire_drop_entry_later(fuse_ino_t parent, const char *name);
/*
 * A key entry just given to the kernel (lookup). A catalog change drops
 * view/'s entry, and with it every cached entry below that no process
 * uses; one a process has open at that moment would stay cached, out of
 * reach, holding its segment until the entry timeout. The last few
 * hundred entries given are remembered, and a catalog change drops each
 * by name (it is then forgotten once closed).
 */
void retire_note_entry(fuse_ino_t parent, const char *name);

/* ---- -o sep directories ------------------------------------------------- */

/* A scope: a slot (segments/NAME, id its number), or view/ (the current
 * snapshot; id the epoch of the view/ inode it was reached through, so
 * that the directories of -o sep under each view/ inode are their own). */
typedef struct scope {
	bool view;
	uint64_t id;
} scope;

/* The directory (sc, prefix) with its lookup count raised by one; 0 when
 * out of memory. */
fuse_ino_t ptab_ref(scope sc, const uint8_t *prefix, size_t plen);
void ptab_forget(uint64_t id, uint64_t count);
/* Copies the directory's scope and prefix (malloc'd); ENOENT, ENOMEM. */
int ptab_get(uint64_t id, scope *sc, uint8_t **prefix, size_t *plen);
void ptab_free_all(void);

/* The FUSE low-level operations (segfs.c), for main.c's session. */
extern const struct fuse_lowlevel_ops segfs_ops;

/* ---- control files (control.c) ------------------------------------------- */

int control_start(void);
void control_stop(void);
/* control/merge as one lookup saw it (control.c): a new file's id (0 when
 * out of memory); its count of kernel references; its size; `>` truncating
 * it; a write (0: all of buf taken, its jobs' numbers then readable at the
 * write's end; or an errno); a read's bytes (malloc'd, NULL when out of
 * memory). */
uint64_t control_file_take(void);
void control_file_ref(uint64_t id, uint64_t n, bool up);
uint64_t control_file_size(uint64_t id);
void control_file_truncate(uint64_t id);
int control_file_write(uint64_t id, const char *buf, size_t size, off_t off);
char *control_file_read(uint64_t id, size_t size, off_t off, size_t *n);
/* control/status: takes the text as it is now, under a new id (0 when
 * out of memory); a copy of text id; its count of kernel references. */
uint64_t control_status_take(void);
char *control_status_get(uint64_t id, size_t *len, struct timespec *when);
void control_status_ref(uint64_t id, uint64_t n, bool up);
/* Is there a job id; its final status line once it has ended. */
bool control_job_exists(uint64_t id);
/* Replies to a read of control/wait/ID now if the job has ended, or
 * when it does (or EINTR when interrupted). */
void control_wait(fuse_req_t req, uint64_t id, size_t size, off_t off);
/* The same for a getattr of an open control/wait/ID, inode ino: its
 * attributes (wait_stat) once the job has ended. */
void control_wait_attr(fuse_req_t req, uint64_t id, uint64_t ino);
/* control/wait/ID's size: its final line's length once ended, else 4096. */
uint64_t control_wait_size(uint64_t id);
/* control/wait/ID's attributes at that size (segfs.c). */
void wait_stat(struct stat *st, uint64_t ino, uint64_t size);

int kvs_errno(kvs_status st);
const char *mode_name(kvs_profile p, kvs_framing f);

#endif
