/*
 * ino.h — segfs's inode numbers: what kind of file an inode is, and which
 * slot, record, snapshot or control text it names, all in its 64 bits, so
 * that a request needs no table to find its file. FUSE-free: the FUSE
 * layer's fuse_ino_t is the same uint64_t (segfs.h checks INO_ROOT).
 */
#ifndef SEGFS_INO_H
#define SEGFS_INO_H

#include <stdint.h>

/* ---- inode numbers ---------------------------------------------------------
 * bits 63..60 the kind; for keys, bits 59..40 the slot and 39..0 the
 * record's ordinal in the slot's segment. */
enum {
	INO_ROOT = 1, /* FUSE_ROOT_ID */
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

static inline uint64_t make_ino(enum ino_kind k, uint64_t low)
{
	return (uint64_t)k << 60 | low;
}
static inline enum ino_kind ino_kind(uint64_t ino)
{
	return (enum ino_kind)(ino >> 60);
}
static inline uint64_t ino_low(uint64_t ino)
{
	return ino & ((UINT64_C(1) << 60) - 1);
}
static inline uint64_t make_pos(uint32_t slot, uint64_t ord)
{
	return (uint64_t)slot << ORD_BITS | ord;
}

/* control/wait/ID of one lookup: bits 59..40 the lookup's serial (mod
 * 2^20), 39..0 the job id (below 2^40: a trillion requests). */
static inline uint64_t wait_ino(uint64_t job, uint64_t serial)
{
	return make_ino(K_WAIT, (serial & (MAX_IDS - 1)) << ORD_BITS | job);
}
static inline uint64_t wait_job(uint64_t ino)
{
	return ino_low(ino) & ORD_MASK;
}

#endif
