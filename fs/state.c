/*
 * state.c — segfs's live state: segment slots, catalog snapshots, their
 * counts, reloading the catalog, retiring segments, per-thread cursors
 * (state.h). FUSE-free:
 * what changed is reported through the callbacks the layers above
 * register (state_notify_set, state_retire_hooks).
 */
#include "state.h"
#include "guard.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

struct segfs_state S = {
    .sep = -1,
    .timeout = 365.0 * 86400,
    .retire_after = 60,
    .workers = 2,
    .queue = 16,
    .history = 1024,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .publish = PTHREAD_MUTEX_INITIALIZER,
};

int kvs_errno(kvs_status st)
{
	switch (st) {
	case KVS_OK: return 0;
	case KVS_E_NOMEM: return ENOMEM;
	default: return EIO;
	}
}

const char *mode_name(kvs_profile p, kvs_framing f)
{
	static const char *const n[2][2] = {{"typed-byte", "raw-byte"},
	                                    {"typed-bit", "raw-bit"}};
	return n[p == KVS_PROFILE_BIT][f == KVS_FRAMING_RAW];
}

/* ---- tables of slots and snapshots ------------------------------------------
 * Two levels of 1024 pointers, so that readers index them without a lock
 * while births (under S.lock) add chunks. */

#define CHUNK 1024
typedef struct ptrtab {
	_Atomic(void **) chunk[MAX_IDS / CHUNK];
	uint64_t next; /* under S.lock */
} ptrtab;
static ptrtab slots, snaps;

static void *tab_get(ptrtab *t, uint64_t id)
{
	if (id >= MAX_IDS)
		return NULL;
	void **c = atomic_load_explicit(&t->chunk[id / CHUNK],
	                                memory_order_acquire);
	return c ? __atomic_load_n(&c[id % CHUNK], __ATOMIC_ACQUIRE) : NULL;
}

/* Under S.lock: the next id for p, or UINT64_MAX when full. */
static uint64_t tab_add(ptrtab *t, void *p)
{
	uint64_t id = t->next;
	if (id >= MAX_IDS)
		return UINT64_MAX;
	void **c = atomic_load(&t->chunk[id / CHUNK]);
	if (!c) {
		c = calloc(CHUNK, sizeof *c);
		if (!c)
			return UINT64_MAX;
		atomic_store_explicit(&t->chunk[id / CHUNK], c,
		                      memory_order_release);
	}
	__atomic_store_n(&c[id % CHUNK], p, __ATOMIC_RELEASE);
	t->next = id + 1;
	return id;
}

static void tab_free(ptrtab *t, void (*f)(void *))
{
	for (uint64_t id = 0; id < t->next; id++)
		f(tab_get(t, id));
	for (size_t i = 0; i < MAX_IDS / CHUNK; i++) {
		free(atomic_load(&t->chunk[i]));
		atomic_store(&t->chunk[i], NULL);
	}
	t->next = 0;
}

/* Under S.lock: id's entry is gone (slot_get then gives NULL). */
static void tab_clear(ptrtab *t, uint64_t id)
{
	void **c = atomic_load(&t->chunk[id / CHUNK]);
	__atomic_store_n(&c[id % CHUNK], NULL, __ATOMIC_RELEASE);
}

slot *slot_get(uint64_t id) { return tab_get(&slots, id); }
snap *snap_get(uint64_t id) { return tab_get(&snaps, id); }

/* ---- counts, deaths ----------------------------------------------------------- */

void segdir_path(char out[PATH_MAX], const char *name, const char *mark)
{
	if (mark)
		snprintf(out, PATH_MAX, "%s/.%s.%s", S.segdir, name, mark);
	else
		snprintf(out, PATH_MAX, "%s/%s", S.segdir, name);
}

static void tls_sweep_all_locked(void);

void slot_die(slot *s)
{
	if (!s->seg)
		return;
	kvs_segment *seg = s->seg;
	__atomic_store_n(&s->seg, NULL, __ATOMIC_RELEASE);
	kvs_segment_unref(seg);
	tls_sweep_all_locked(); /* the threads' cursors hold the mapping */
	if (s->linked) {
		/* only its own mark: a later merge of a segment of the same
		 * name may have put its mark there since */
		char path[PATH_MAX];
		struct stat sb;
		segdir_path(path, s->name, "retired");
		if (lstat(path, &sb) == 0 && sb.st_ino == s->st.st_ino &&
		    sb.st_dev == s->st.st_dev && unlink(path) < 0 &&
		    errno != ENOENT)
			log_msg(LOG_WARNING, "%s: %s", path, strerror(errno));
	}
}

void slot_ref(slot *s, uint64_t n) { atomic_fetch_add(&s->refs, n); }

/*
 * A slot whose count reaches zero dies, and is freed: nothing can reach
 * it any more (no snapshot holds it, the kernel has forgotten its inodes,
 * no listing is open on it; a request on one of its inodes holds that
 * inode, and so the count), but for merge jobs, which find their inputs
 * by number and take NULL for gone. Only the structure of a slot the
 * reaper closed while held stays until its count reaches zero.
 */
void slot_unref(slot *s, uint64_t n)
{
	if (!s || n == 0)
		return;
	if (atomic_fetch_sub(&s->refs, n) == n) {
		pthread_mutex_lock(&S.lock);
		bool gone = atomic_load(&s->refs) == 0;
		if (gone) {
			slot_die(s);
			tab_clear(&slots, s->id);
		}
		pthread_mutex_unlock(&S.lock);
		if (gone)
			free(s);
	}
}

void snap_ref(snap *s, uint64_t n) { atomic_fetch_add(&s->refs, n); }

void snap_unref(snap *s, uint64_t n)
{
	if (!s || n == 0)
		return;
	if (atomic_fetch_sub(&s->refs, n) == n) {
		/* its slots lose it; the structure stays (state.h: a reader
		 * of S.current may still look at its count), its lists go */
		for (size_t i = 0; i < s->n; i++)
			slot_unref(slot_get(s->live[i]), 1);
		free(s->live); /* nothing reads a dead snapshot's lists */
		free(s->catalog);
		s->live = NULL;
		s->catalog = NULL;
		s->n = s->catalog_len = 0;
	}
}

snap *snap_current(void)
{
	/* The current snapshot holds a count of its own until it is
	 * replaced; one replaced meanwhile is seen at zero and skipped. */
	for (;;) {
		snap *s = atomic_load(&S.current);
		uint_fast64_t r = atomic_load(&s->refs);
		while (r)
			if (atomic_compare_exchange_weak(&s->refs, &r, r + 1))
				return s;
	}
}

/* ---- opening segments --------------------------------------------------------- */

/*
 * Opening a segment reads its mapping (the header, the index and, with
 * -o verify, every page), so a file cut short meanwhile faults there too:
 * guarded (guard.h), the open fails as damaged instead. step 0 opens
 * catalog entry i (*seg and *st set on success), step 1 verifies *seg.
 */
static GUARDED_FN kvs_status open_step(int step, size_t i, const char *path,
                                       kvs_segment **seg, struct stat *st,
                                       kvs_error *err)
{
	if (step == 0) /* the core's rules: no symbolic link, a regular
	                * file, what the catalog records (catalog.h) */
		return kvs_catalog_open_segment(S.cat, i, seg, st, err);
	kvs_error verr;
	if (kvs_segment_verify(*seg, &verr) == KVS_OK)
		return KVS_OK;
	return kvs_error_set(err, KVS_E_CORRUPT, "%s: %s", path, verr.message);
}

static kvs_status guarded_open_step(int step, size_t i, const char *path,
                                    kvs_segment **seg, struct stat *st,
                                    kvs_error *err)
{
	volatile kvs_status st_ = KVS_E_IO;
	GUARDED(st_ = kvs_error_set(err, KVS_E_CORRUPT,
	                            "%s: reading its mapping failed (SIGBUS): "
	                            DAMAGED_WHY,
	                            path),
	        st_ = open_step(step, i, path, seg, st, err));
	return st_;
}

/* Opens and checks catalog entry i's segment as a new slot (not yet in
 * any table). */
static int slot_open(size_t i, slot **out, kvs_error *err)
{
	const kvs_catalog_entry *e = kvs_catalog_entry_at(S.cat, i);
	slot *s = calloc(1, sizeof *s);
	if (!s)
		return kvs_error_set(err, KVS_E_NOMEM, "out of memory"), ENOMEM;
	snprintf(s->name, sizeof s->name, "%s", e->name);
	char path[PATH_MAX];
	segdir_path(path, e->name, NULL);
	kvs_status st = guarded_open_step(0, i, path, &s->seg, &s->st, err);
	if (st == KVS_OK)
		kvs_segment_info_get(s->seg, &s->info);
	if (st == KVS_OK && S.verify)
		st = guarded_open_step(1, i, path, &s->seg, NULL, err);
	if (st == KVS_OK && s->info.records > ORD_MASK)
		st = kvs_error_set(err, KVS_E_UNSUPPORTED,
		                   "%s: more than 2^40 records", path);
	if (st != KVS_OK) {
		kvs_segment_unref(s->seg);
		free(s);
		return st == KVS_E_NOMEM ? ENOMEM : EIO;
	}
	*out = s;
	return 0;
}

/* control/catalog's text: the generation, the live segments, then one
 * "# skipped NAME: WHY" line per bad segment that -o skip_bad left out. */
static char *catalog_text(const kvs_catalog *cat, const uint32_t *live,
                          size_t n, const kvs_catalog_skip *skips,
                          size_t nskips, size_t *len)
{
	size_t cap = 256 + n * (KVS_CATALOG_MAX_NAME + 160) +
	             nskips * (KVS_CATALOG_MAX_NAME + sizeof skips->why + 16);
	char *t = malloc(cap);
	if (!t)
		return NULL;
	size_t l = (size_t)snprintf(
	    t, cap,
	    "generation %" PRIu64 "\nsegments %zu\n"
	    "# name sequence mode restart records tombstones bytes\n",
	    kvs_catalog_generation(cat), n);
	for (size_t i = 0; i < n; i++) {
		const slot *s = slot_get(live[i]);
		l += (size_t)snprintf(
		    t + l, cap - l,
		    "%s %" PRIu64 " %s %" PRIu32 " %" PRIu64 " %" PRIu64
		    " %" PRIu64 "\n",
		    s->name, s->info.sequence,
		    mode_name(s->info.profile, s->info.framing),
		    s->info.restart_interval, s->info.records,
		    s->info.tombstones, s->info.file_bytes);
	}
	for (size_t i = 0; i < nskips; i++)
		l += (size_t)snprintf(t + l, cap - l, "# skipped %s: %s\n",
		                      skips[i].name, skips[i].why);
	*len = l;
	return t;
}

static int slot_name_cmp(const void *a, const void *b)
{
	return strcmp(slot_get(*(const uint32_t *)a)->name,
	              slot_get(*(const uint32_t *)b)->name);
}

/* The slot called name among ids[0 .. n), sorted by slot_name_cmp. */
static slot *slot_named(const uint32_t *ids, size_t n, const char *name)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(slot_get(ids[mid])->name, name);
		if (c == 0)
			return slot_get(ids[mid]);
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Notes entry name as skipped: why is its error without "SEGDIR/NAME: ". */
static void note_skip(kvs_catalog_skip *k, const char *name, const char *why)
{
	char path[PATH_MAX];
	segdir_path(path, name, NULL);
	size_t n = strlen(path);
	if (!strncmp(why, path, n) && why[n] == ':' && why[n + 1] == ' ')
		why += n + 2;
	snprintf(k->name, sizeof k->name, "%s", name);
	snprintf(k->why, sizeof k->why, "%s", why);
}

/* state.h */
int snap_build(const snap *cur, snap **out, kvs_error *err)
{
	size_t n = kvs_catalog_count(S.cat);
	snap *sn = calloc(1, sizeof *sn);
	slot **fresh = calloc(n ? n : 1, sizeof *fresh);
	uint32_t *live = calloc(n ? n : 1, sizeof *live);
	/* the bad segments left out: the core's (a directory without a
	 * catalog), then those of the catalog that fail here */
	size_t nskips = kvs_catalog_skipped_count(S.cat);
	kvs_catalog_skip *skips = calloc(n + nskips + 1, sizeof *skips);
	if (!sn || !fresh || !live || !skips) {
		free(sn), free(fresh), free(live), free(skips);
		kvs_error_set(err, KVS_E_NOMEM, "out of memory");
		return ENOMEM;
	}
	for (size_t k = 0; k < nskips; k++)
		skips[k] = *kvs_catalog_skipped_at(S.cat, k);
	size_t nlive = 0;
	int rc = 0;
	/* cur's slots by name, so that finding what is reused stays
	 * n log n with thousands of live segments */
	uint32_t *by_name = cur ? malloc((cur->n ? cur->n : 1) *
	                                 sizeof *by_name)
	                        : NULL;
	if (by_name) {
		memcpy(by_name, cur->live, cur->n * sizeof *by_name);
		qsort(by_name, cur->n, sizeof *by_name, slot_name_cmp);
	}
	for (size_t i = 0; i < n && !rc; i++) {
		const kvs_catalog_entry *e = kvs_catalog_entry_at(S.cat, i);
		slot *r = by_name ? slot_named(by_name, cur->n, e->name) : NULL;
		if (r && r->info.header_crc == e->header_crc &&
		    r->info.file_bytes == e->size) {
			live[nlive++] = r->id; /* reused */
			continue;
		}
		slot *s;
		kvs_error oerr;
		rc = slot_open(i, &s, &oerr);
		if (rc && S.skip_bad) {
			log_msg(LOG_WARNING, "skipping bad segment: %s",
			        oerr.message);
			note_skip(&skips[nskips++], e->name, oerr.message);
			rc = 0;
			continue;
		}
		if (rc) {
			kvs_error_set(err, KVS_E_CORRUPT,
			              "bad segment: %s%s", oerr.message,
			              cur ? "" : " (use -o skip_bad to mount "
			                         "without it)");
			break;
		}
		fresh[i] = s;
		live[nlive++] = UINT32_MAX; /* numbered below */
	}
	char cpath[PATH_MAX];
	segdir_path(cpath, KVS_CATALOG_FILE, NULL);
	if (!rc && stat(cpath, &sn->st) < 0)
		sn->st = S.dir_st;
	pthread_mutex_lock(&S.lock);
	for (size_t i = 0, k = 0; !rc && i < n; i++) {
		if (!fresh[i])
			continue;
		while (live[k] != UINT32_MAX)
			k++;
		uint64_t id = tab_add(&slots, fresh[i]);
		if (id == UINT64_MAX) {
			rc = ENOSPC;
			kvs_error_set(err, KVS_E_RANGE,
			              "more than %" PRIu64 " segments opened "
			              "during this mount",
			              MAX_IDS);
			break;
		}
		fresh[i]->id = (uint32_t)id;
		live[k] = (uint32_t)id;
		fresh[i] = NULL;
	}
	if (!rc) {
		sn->n = nlive;
		sn->live = live;
		sn->read = 0444;
		for (size_t k = 0; k < nlive; k++)
			sn->read &= slot_read(slot_get(live[k]));
		sn->generation = kvs_catalog_generation(S.cat);
		sn->catalog = catalog_text(S.cat, live, nlive, skips, nskips,
		                           &sn->catalog_len);
		uint64_t id = sn->catalog ? tab_add(&snaps, sn) : UINT64_MAX;
		if (id == UINT64_MAX) {
			rc = ENOMEM;
			kvs_error_set(err, KVS_E_NOMEM,
			              "out of memory or catalog generations");
			free(sn->catalog);
		} else {
			sn->id = id;
			atomic_store(&sn->refs, 1);
			for (size_t k = 0; k < nlive; k++)
				slot_ref(slot_get(live[k]), 1);
		}
	}
	pthread_mutex_unlock(&S.lock);
	for (size_t i = 0; i < n; i++)
		if (fresh[i]) {
			kvs_segment_unref(fresh[i]->seg);
			free(fresh[i]);
		}
	free(fresh);
	free(by_name);
	free(skips);
	if (rc) {
		free(live);
		free(sn);
		return rc;
	}
	*out = sn;
	return 0;
}

static void free_slot(void *p)
{
	slot *s = p;
	if (s) {
		if (s->seg && s->retired && s->linked) {
			/* nobody reads it after unmount */
			char path[PATH_MAX];
			segdir_path(path, s->name, "retired");
			unlink(path);
		}
		kvs_segment_unref(s->seg);
		free(s);
	}
}

static void free_snap(void *p)
{
	snap *s = p;
	if (s) {
		free(s->live);
		free(s->catalog);
		free(s);
	}
}

void state_unload(void)
{
	tls_release();
	tab_free(&snaps, free_snap);
	tab_free(&slots, free_slot);
	kvs_catalog_close(S.cat);
	S.cat = NULL;
}

/*
 * Which slots of old and now each snapshot holds: bit 1 old, bit 2 now, by
 * slot id (calloc'd, or NULL when out of memory), so that comparing two
 * generations stays linear with thousands of live segments.
 */
static uint8_t *membership(const snap *old, const snap *now)
{
	uint32_t max = 0;
	const snap *both[2] = {old, now};
	for (int b = 0; b < 2; b++)
		for (size_t k = 0; k < both[b]->n; k++)
			max = both[b]->live[k] > max ? both[b]->live[k] : max;
	uint8_t *m = calloc((size_t)max + 1, 1);
	for (int b = 0; m && b < 2; b++)
		for (size_t k = 0; k < both[b]->n; k++)
			m[both[b]->live[k]] |= (uint8_t)(1 << b);
	return m;
}

/* Is id in s (b: its bit in marks)? Without marks, by a walk. */
static bool has_slot(const uint8_t *marks, int b, const snap *s, uint32_t id)
{
	if (marks)
		return marks[id] & (1 << b);
	for (size_t k = 0; k < s->n; k++)
		if (s->live[k] == id)
			return true;
	return false;
}

/*
 * Tells the kernel what changed: segments/ and control/, and view/, which
 * gets a new inode number. A merge keeps what view/ shows, but the
 * entries the kernel caches there (for a year by default) name records
 * of the merged-away segments and would keep them mapped, and their files
 * on disk, for as long: dropping them (a few microseconds per cached
 * entry, during which lookups wait) lets the kernel forget every one that
 * no process holds open, and the segments go with their last reader.
 */
static void invalidate(const snap *old, const snap *now,
                       const uint8_t *marks)
{
	const kernel_notifier *k = atomic_load(&S.notify);
	if (!k)
		return;
	k->inval_entry(k->ctx, INO_CONTROL, "catalog");
	k->inval_inode(k->ctx, INO_CONTROL);
	k->inval_inode(k->ctx, INO_SEGMENTS);
	const snap *pair[2][2] = {{old, now}, {now, old}};
	for (int p = 0; p < 2; p++) /* gone from segments/, or new there */
		for (size_t i = 0; i < pair[p][0]->n; i++)
			if (!has_slot(marks, 1 - p, pair[p][1],
			              pair[p][0]->live[i]))
				k->inval_entry(k->ctx, INO_SEGMENTS,
				               slot_get(pair[p][0]->live[i])->name);
	atomic_fetch_add(&S.view_epoch, 1);
	k->inval_inode(k->ctx, INO_ROOT);
	k->inval_entry(k->ctx, INO_ROOT, "view");
}

/* retire.c's hooks (state_retire_hooks), or NULL. */
static _Atomic(const retire_hooks *) retire_cb;

void state_retire_hooks(const retire_hooks *h)
{
	atomic_store(&retire_cb, h);
}

void state_notify_set(const kernel_notifier *n)
{
	atomic_store(&S.notify, n);
}

int state_reload_locked(kvs_error *err)
{
	kvs_status st = kvs_catalog_reload(S.cat, err);
	if (st != KVS_OK)
		return kvs_errno(st);
	snap *old = atomic_load(&S.current);
	if (old->generation == kvs_catalog_generation(S.cat))
		return 0;
	snap *now;
	int rc = snap_build(old, &now, err);
	if (rc)
		return rc;
	uint8_t *marks = membership(old, now);
	const retire_hooks *r = atomic_load(&retire_cb);
	pthread_mutex_lock(&S.lock);
	for (size_t i = 0; i < old->n; i++)
		if (!has_slot(marks, 1, now, old->live[i])) {
			slot *s = slot_get(old->live[i]);
			s->retired = true;
			if (r)
				r->slot_retired_locked(s);
		}
	atomic_store(&S.current, now);
	pthread_mutex_unlock(&S.lock);
	for (size_t i = 0; i < old->n; i++) /* old holds them still */
		if (!has_slot(marks, 1, now, old->live[i]))
			log_msg(LOG_INFO,
			        "%s retired: catalog generation %" PRIu64
			        " no longer names it",
			        slot_get(old->live[i])->name, now->generation);
	invalidate(old, now, marks);
	free(marks);
	if (r) {
		pthread_mutex_lock(&S.lock);
		r->changed_locked(); /* after the epoch: no new entry is kept */
		pthread_mutex_unlock(&S.lock);
	}
	snap_unref(old, 1); /* it is no longer current */
	return 0;
}

/* ---- per-thread cursors ---------------------------------------------------------- */

typedef struct tls_cursors {
	pthread_mutex_t busy; /* held by its thread while in a request */
	atomic_bool sweep;    /* a slot died: close its cursors */
	size_t cap;
	kvs_cursor **cur; /* by slot id */
	struct tls_cursors *next; /* every thread's (under S.lock) */
} tls_cursors;
static tls_cursors *tls_all; /* under S.lock */

/* Under S.lock, with t's thread outside a request (t->busy held by the
 * caller): closes t's cursors of dead slots, which drops their mappings. */
static void tls_sweep_locked(tls_cursors *t)
{
	atomic_store(&t->sweep, false);
	for (size_t i = 0; i < t->cap; i++)
		if (t->cur[i] && !slot_alive(slot_get(i))) {
			kvs_cursor_close(t->cur[i]);
			t->cur[i] = NULL;
		}
}

/* Under S.lock, after a death: every thread outside a request is swept
 * now; the others sweep as they leave theirs (tls_leave). */
static void tls_sweep_all_locked(void)
{
	for (tls_cursors *t = tls_all; t; t = t->next) {
		atomic_store(&t->sweep, true);
		if (pthread_mutex_trylock(&t->busy) == 0) {
			tls_sweep_locked(t);
			pthread_mutex_unlock(&t->busy);
		}
	}
}

static void tls_free(void *p)
{
	tls_cursors *t = p;
	if (!t)
		return;
	pthread_mutex_lock(&S.lock);
	tls_cursors **pp = &tls_all;
	while (*pp && *pp != t)
		pp = &(*pp)->next;
	if (*pp)
		*pp = t->next;
	for (size_t i = 0; i < t->cap; i++)
		kvs_cursor_close(t->cur[i]);
	pthread_mutex_unlock(&S.lock);
	pthread_mutex_destroy(&t->busy);
	free(t->cur);
	free(t);
}

void tls_release(void)
{
	tls_free(pthread_getspecific(S.tls_key));
	pthread_setspecific(S.tls_key, NULL);
}

static tls_cursors *tls_get(void)
{
	tls_cursors *t = pthread_getspecific(S.tls_key);
	if (t || !(t = calloc(1, sizeof *t)))
		return t;
	pthread_mutex_init(&t->busy, NULL);
	pthread_setspecific(S.tls_key, t);
	pthread_mutex_lock(&S.lock);
	t->next = tls_all;
	tls_all = t;
	pthread_mutex_unlock(&S.lock);
	return t;
}

void tls_enter(void)
{
	tls_cursors *t = tls_get();
	if (t)
		pthread_mutex_lock(&t->busy);
}

void tls_leave(void)
{
	tls_cursors *t = pthread_getspecific(S.tls_key);
	if (!t)
		return;
	if (atomic_load(&t->sweep)) {
		pthread_mutex_lock(&S.lock);
		tls_sweep_locked(t);
		pthread_mutex_unlock(&S.lock);
	}
	pthread_mutex_unlock(&t->busy);
	/* a death between the check and the unlock found t busy: sweep now
	 * unless someone else holds it (and then sweeps) */
	if (atomic_load(&t->sweep) && pthread_mutex_trylock(&t->busy) == 0) {
		pthread_mutex_lock(&S.lock);
		tls_sweep_locked(t);
		pthread_mutex_unlock(&S.lock);
		pthread_mutex_unlock(&t->busy);
	}
}

slot *slot_damage_at(const void *addr, uint64_t *off_out)
{
	slot *found = NULL;
	uint64_t off = 0;
	pthread_mutex_lock(&S.lock); /* segments are released under it */
	for (uint64_t id = 0; id < slots.next && !found; id++) {
		slot *s = slot_get(id);
		if (s && s->seg && kvs_segment_offset(s->seg, addr, &off))
			found = s;
	}
	pthread_mutex_unlock(&S.lock);
	if (!found) {
		log_msg(LOG_CRIT, "SIGBUS at %p, outside every segment", addr);
		abort();
	}
	if (!atomic_exchange(&found->damaged, true))
		log_msg(LOG_ERR,
		        "%s: reading byte %" PRIu64 " of its mapping "
		        "failed (SIGBUS): " DAMAGED_WHY "; its keys (and "
		        "view/ while it is live) now fail with EIO, and merges "
		        "of it fail",
		        found->name, off);
	*off_out = off;
	return found;
}

kvs_cursor *slot_cursor(slot *s)
{
	if (!s || slot_damaged(s))
		return NULL;
	tls_cursors *t = pthread_getspecific(S.tls_key);
	if (!t)
		return NULL; /* only in a request (tls_enter) */
	if (s->id < t->cap && t->cur[s->id]) {
		/* a dead slot's cursor waits for the sweep: not used again */
		return slot_alive(s) ? t->cur[s->id] : NULL;
	}
	if (s->id >= t->cap) {
		size_t cap = t->cap ? t->cap : 16;
		while (cap <= s->id)
			cap *= 2;
		kvs_cursor **c = realloc(t->cur, cap * sizeof *c);
		if (!c)
			return NULL;
		memset(c + t->cap, 0, (cap - t->cap) * sizeof *c);
		t->cur = c; /* no sweep meanwhile: t->busy is ours */
		t->cap = cap;
	}
	pthread_mutex_lock(&S.lock);
	if (s->seg && kvs_cursor_open(&t->cur[s->id], s->seg) != KVS_OK)
		t->cur[s->id] = NULL;
	pthread_mutex_unlock(&S.lock);
	return t->cur[s->id];
}

__attribute__((constructor)) static void tls_key_init(void)
{
	pthread_key_create(&S.tls_key, tls_free);
}
