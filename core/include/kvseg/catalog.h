/*
 * kvseg/catalog.h — the catalog: which segment files of a directory are
 * live, in age order (oldest first), under a generation number.
 *
 * The catalog is one small checksummed file in the segment directory
 * (docs/FORMAT.md §10). Every change is published atomically: a new
 * catalog file is written under a temporary name, fsynced, renamed over
 * the old one, and the directory is fsynced; a crash at any instant leaves
 * the old or the new catalog, never a mix. A catalog only ever names
 * complete, fsynced segments.
 *
 * replace() is a compare-and-swap: it publishes only if the catalog on
 * disk still has the expected generation and still holds every input, so
 * two merges over overlapping inputs cannot both publish.
 *
 * A kvs_catalog handle is a snapshot of one generation; reload() reads the
 * newest. Handles are not shared between threads; several processes may
 * use one directory (publication takes an exclusive lock on a lock file).
 */
#ifndef KVSEG_CATALOG_H
#define KVSEG_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/stat.h>

#include "kvseg/segment.h"
#include "kvseg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVS_CATALOG_FILE "CATALOG"  /* its name in the directory */
#define KVS_CATALOG_MAX_NAME 255    /* bytes in a segment's file name */
#define KVS_CATALOG_MAX_SEGMENTS 65536

typedef struct kvs_catalog_entry {
	char name[KVS_CATALOG_MAX_NAME + 1]; /* file name within the dir */
	uint64_t sequence;                   /* the segment's sequence */
	uint64_t size;                       /* its file length */
	uint32_t header_crc;                 /* its header CRC32C */
} kvs_catalog_entry;

typedef struct kvs_catalog kvs_catalog;

/*
 * Opens the catalog of dir, recovering from any crash: reads the last
 * complete catalog, removes orphaned temporary files (of the catalog and
 * of segment writers; for ".NAME.pub-XXXXXX", also the file's other
 * names that the catalog does not name: a merge output linked to its
 * final name but never published, see kvs_writer_options.publish), and
 * checks that every named segment exists with its recorded size and
 * header CRC (KVS_E_CORRUPT otherwise). A directory without a catalog
 * gets one naming its segment files (those that open as segments) ordered
 * by sequence number, then name (FORMAT.md §10.4). Its other entries are
 * sorted by one rule, whoever opens the directory:
 *
 *   a bad segment: a regular file that begins with the segment magic
 *     (§5.1) but fails open's checks (cut short, damaged), or that cannot
 *     be read. A catalog made without it would leave it out for good, so
 *     none is made: KVS_E_CORRUPT naming the first (by name) and why,
 *     before anything is created in the directory (but see
 *     KVS_CATALOG_SKIP_BAD);
 *   the directory's own: names starting with '.' (temporaries, marks and
 *     locks of the programs that share the directory) and CATALOG.lock,
 *     never looked at;
 *   anything else (a file that does not begin with the magic, a
 *     directory, a symbolic link, a FIFO, a device): left alone, and not
 *     named (but see KVS_CATALOG_ONLY_SEGMENTS).
 *
 * An empty directory gets the empty catalog.
 *
 * A segment writer holds an exclusive flock on its temporary file until
 * it has renamed it (with a publish hook: until the hook has published
 * it), and open removes only temporaries that nobody holds,
 * so opening a directory beside running writers and merges is safe. The
 * directory must be writable (CATALOG.lock is created in it), unless
 * KVS_CATALOG_MAY_READ_ONLY is given.
 */
KVS_API kvs_status kvs_catalog_open(kvs_catalog **out, const char *dir,
                                    kvs_error *err);

/* Flags of kvs_catalog_open_flags. */
#define KVS_CATALOG_NO_CHECK 1u /* do not check the named segments: the
                                   caller opens and checks each itself */
/*
 * Where the directory cannot be written (write access to it, or open(2)
 * of CATALOG.lock for writing, fails with EROFS, EACCES or EPERM: a
 * read-only filesystem, no write permission), open it for reading only
 * instead of failing: a shared lock on an existing CATALOG.lock opened
 * read-only, or no lock where there is none; no recovery (what a crash
 * left stays, unread); and a directory without a catalog is scanned as
 * open would, but nothing is written, and kvs_catalog_reload keeps that
 * scan until a catalog appears.
 * kvs_catalog_read_only tells which way it opened; kvs_catalog_add and
 * kvs_catalog_replace on a directory that still cannot be written fail as
 * they would anyway (KVS_E_IO naming CATALOG.lock).
 */
#define KVS_CATALOG_MAY_READ_ONLY 2u

/*
 * Open for reading only, whatever the directory allows: as
 * KVS_CATALOG_MAY_READ_ONLY where it cannot be written. Nothing is
 * created, changed or removed in the directory, and kvs_catalog_add and
 * kvs_catalog_replace fail (KVS_E_INVAL) without touching it.
 */
#define KVS_CATALOG_READ_ONLY 4u
/*
 * Where there is no catalog, make one only of a directory of segments:
 * an entry that is not a segment, nor the directory's own (above), fails
 * the open with KVS_E_INVAL naming it (the first by name) before anything
 * is created. For a program that is handed a directory (segfs), so that a
 * mistyped path never becomes a segment directory; a directory that holds
 * other files gets its catalog on request (kvs_catalog_open).
 */
#define KVS_CATALOG_ONLY_SEGMENTS 8u
/*
 * Where there is no catalog and bad segments (above): open without them
 * instead of failing, for reading only (as KVS_CATALOG_READ_ONLY: the
 * segments are named in memory, no catalog is written, since it would
 * drop them for good), until a catalog appears (kvs_catalog_reload).
 * kvs_catalog_skipped_count and kvs_catalog_skipped_at say which were
 * left out and why. A directory without bad segments opens as without the
 * flag.
 */
#define KVS_CATALOG_SKIP_BAD 16u

/* kvs_catalog_open with flags (0 is kvs_catalog_open). */
KVS_API kvs_status kvs_catalog_open_flags(kvs_catalog **out, const char *dir,
                                          unsigned flags, kvs_error *err);
KVS_API void kvs_catalog_close(kvs_catalog *c);

/* Was c opened for reading only (KVS_CATALOG_MAY_READ_ONLY where the
 * directory cannot be written, KVS_CATALOG_READ_ONLY, or
 * KVS_CATALOG_SKIP_BAD where it left segments out)? */
KVS_API bool kvs_catalog_read_only(const kvs_catalog *c);

/* A bad segment that KVS_CATALOG_SKIP_BAD left out of a new catalog. */
typedef struct kvs_catalog_skip {
	char name[KVS_CATALOG_MAX_NAME + 1]; /* file name within the dir */
	char why[240]; /* what its checks found, without its path */
} kvs_catalog_skip;

/* The bad segments left out (KVS_CATALOG_SKIP_BAD), by name; none once
 * a reload has found a catalog. */
KVS_API size_t kvs_catalog_skipped_count(const kvs_catalog *c);
KVS_API const kvs_catalog_skip *
kvs_catalog_skipped_at(const kvs_catalog *c, size_t i);

/* Re-reads the newest published generation and checks its segments as
 * open does (but for a handle opened with KVS_CATALOG_NO_CHECK: its caller
 * checks what it opens, kvs_catalog_open_segment); on failure the handle
 * keeps its snapshot. */
KVS_API kvs_status kvs_catalog_reload(kvs_catalog *c, kvs_error *err);

KVS_API uint64_t kvs_catalog_generation(const kvs_catalog *c);
KVS_API size_t kvs_catalog_count(const kvs_catalog *c);
/* Entry i, oldest first (i < count). */
KVS_API const kvs_catalog_entry *kvs_catalog_entry_at(const kvs_catalog *c,
                                                      size_t i);
/* The index of the segment named name in c's snapshot, or -1 when it is
 * not live there. */
KVS_API ptrdiff_t kvs_catalog_find(const kvs_catalog *c, const char *name);
/*
 * Opens entry i's segment (i < count) as segfs and kvseg read a live one
 * (FORMAT.md §10.3): relative to the directory as it was when the catalog
 * was opened, never through a symbolic link, a regular file (not a FIFO,
 * directory or device), with the size, header CRC32C and sequence the
 * catalog records; anything else is KVS_E_CORRUPT naming the file and
 * the cause. st (may be NULL) gets the file's fstat.
 */
KVS_API kvs_status kvs_catalog_open_segment(const kvs_catalog *c, size_t i,
                                            kvs_segment **out, struct stat *st,
                                            kvs_error *err);

/* The directory, as given to open. */
KVS_API const char *kvs_catalog_dir(const kvs_catalog *c);

/* Is name one a catalog may hold: 1..255 bytes, no '/', not starting with
 * '.', not CATALOG or CATALOG.lock (FORMAT.md §10.2)? */
KVS_API bool kvs_catalog_name_valid(const char *name);

/* Is name (a file name, no directory) a temporary file of publication:
 * the catalog's ".CATALOG.tmp-XXXXXX" or a segment writer's
 * ".NAME.tmp-XXXXXX" or ".NAME.pub-XXXXXX" (with a publish hook), which
 * kvs_catalog_open removes? It only reads the name, so a signal handler
 * may call it. */
KVS_API bool kvs_catalog_temporary_name(const char *name);

/* Appends the segment file name (in the directory) as the newest and
 * publishes; the handle moves to the new generation. A name is 1..255
 * bytes without '/', not starting with '.' and not CATALOG or
 * CATALOG.lock (FORMAT.md §10.2); the file must open as a segment
 * (KVS_E_IO when it is missing or cannot be read), must not be live, and
 * its sequence must be above every live segment's, as a catalog rebuilt
 * from the files orders them by sequence (KVS_E_INVAL otherwise). */
KVS_API kvs_status kvs_catalog_add(kvs_catalog *c, const char *name,
                                   kvs_error *err);

/*
 * Publishes a generation in which inputs[0 .. n) — live segments, which
 * must be consecutive in age order — are replaced by output (a complete
 * segment file in the directory) at the position of the newest input; or
 * removed when output is NULL. Fails with KVS_E_CONFLICT, changing
 * nothing, unless the catalog on disk is still at expected_generation.
 * Inputs given oldest first (n >= 1) that are not live or not consecutive,
 * and an output that is live, is an input or is not a segment, fail with
 * an error (KVS_E_INVAL, or the segment's) and change nothing.
 * The replaced files are unlinked after publication when unlink_inputs;
 * should that fail, the new generation stands (the handle moves to it)
 * and KVS_E_IO names the file. inputs may point into c's own entries.
 */
KVS_API kvs_status kvs_catalog_replace(kvs_catalog *c,
                                       uint64_t expected_generation,
                                       const char *const *inputs, size_t n,
                                       const char *output, bool unlink_inputs,
                                       kvs_error *err);

#ifdef __cplusplus
}
#endif

#endif
