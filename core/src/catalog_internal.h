/*
 * catalog_internal.h — what the catalog's files share: one generation in
 * memory (cat_state), the name rule and paths, the CATALOG file's read and
 * publication (catalog_file.c) and the sweep of leftovers at open
 * (catalog_sweep.c). Internal to libkvseg; the handle and the rules of a
 * generation are catalog.c's.
 */
#ifndef KVSEG_CATALOG_INTERNAL_H
#define KVSEG_CATALOG_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvseg/catalog.h"

#define CAT_TMP_PREFIX "." KVS_CATALOG_FILE ".tmp-"
#define CAT_REPLACED   ".replaced" /* see kvsi_cat_replaced_mark */

/* One generation: what a handle holds and what a publication writes. */
typedef struct cat_state {
	uint64_t generation;
	size_t count;
	kvs_catalog_entry *entries;
} cat_state;

void kvsi_cat_state_free(cat_state *s);

/* The index of name in s, or -1. */
ptrdiff_t kvsi_cat_find_live(const cat_state *s, const char *name);

/*
 * A name a catalog may hold (§10): 1..255 bytes, no '/' or NUL, no leading
 * '.', not one of the catalog's own files.
 */
bool kvsi_cat_name_ok(const char *name, size_t len);

/* out = "dir/name"; KVS_E_RANGE when it does not fit. */
kvs_status kvsi_cat_path_in(char out[PATH_MAX], const char *dir,
                            const char *name, kvs_error *err);

kvs_status kvsi_cat_fsync_dir(const char *dir, kvs_error *err);

/* Reads DIR/CATALOG into *out; *exists is false (and KVS_OK returned) when
 * there is no such file. */
kvs_status kvsi_cat_read(const char *dir, cat_state *out, bool *exists,
                         kvs_error *err);

/*
 * Writes s as DIR/CATALOG: temporary file, fsync, rename, directory fsync.
 * *renamed: s is what the directory holds, even if an error follows.
 */
kvs_status kvsi_cat_publish(const char *dir, const cat_state *s, bool *renamed,
                            kvs_error *err);

/* DIR/.NAME.replaced: the mark replace() gives an input it will unlink. */
kvs_status kvsi_cat_replaced_mark(char out[PATH_MAX], const char *dir,
                                  const char *name, kvs_error *err);

/* Recovery's removals in one pass over dir, under its lock; live: the
 * catalog's segments, or NULL where there is no catalog yet. */
kvs_status kvsi_cat_remove_leftovers(const char *dir, const cat_state *live,
                                     kvs_error *err);

#endif
