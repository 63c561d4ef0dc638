/*
 * catalog_scan.h — the first catalog of a directory: what a directory
 * without CATALOG holds, entry by entry, and whether a catalog may be made
 * of it (catalog_scan.c). Internal to libkvseg: catalog.c calls it when it
 * opens a directory that has no catalog.
 */
#ifndef KVSEG_CATALOG_SCAN_H
#define KVSEG_CATALOG_SCAN_H

#include <stdbool.h>
#include <stddef.h>

#include "kvseg/catalog.h"

#define CAT_LOCK_FILE KVS_CATALOG_FILE ".lock"

typedef struct cat_scan {
	kvs_catalog_entry *segments; /* files that open as segments, oldest
	                              * (smallest sequence) first, then by
	                              * name */
	size_t count;
	kvs_catalog_skip *bad; /* bad segments, by name */
	size_t nbad;
	size_t nother; /* entries that are not segments */
	char other[KVS_CATALOG_MAX_NAME + 1]; /* the first of them by name */
	const char *other_what; /* what it is: "not a segment", "a directory" */
} cat_scan;

/*
 * Reads dir and sorts its entries (FORMAT.md §10.4): segments, bad
 * segments, the directory's own files (names starting with '.', and
 * CATALOG.lock), which are not looked at, and anything else. With sync,
 * each segment is fsynced (a catalog is about to name it). KVS_E_IO when
 * the directory or an entry cannot be read as a directory entry.
 */
kvs_status kvsi_cat_scan_dir(const char *dir, bool sync, cat_scan *out,
                             kvs_error *err);

/*
 * May a catalog be made of what s found, under kvs_catalog_open_flags's
 * flags? Under KVS_CATALOG_ONLY_SEGMENTS, an entry that is not a segment
 * is KVS_E_INVAL naming it; a bad segment is KVS_E_CORRUPT naming it,
 * unless KVS_CATALOG_SKIP_BAD (the caller then makes none it would
 * write: see kvs_catalog_open_flags).
 */
kvs_status kvsi_cat_scan_admit(const char *dir, const cat_scan *s,
                               unsigned flags, kvs_error *err);

void kvsi_cat_scan_free(cat_scan *s);

#endif
