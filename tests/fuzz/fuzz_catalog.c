/*
 * fuzz_catalog — libFuzzer target for the catalog parser (FORMAT.md §10).
 *
 * Each input becomes the CATALOG file of a directory that holds two small
 * valid segments, and kvs_catalog_open must either fail with a message or
 * give a catalog whose entries are sane. Most inputs would stop at the
 * trailing CRC32C, so each one is also tried with that CRC recomputed,
 * which lets the fuzzer reach the field checks behind it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvseg/bits.h"
#include "kvseg/catalog.h"
#include "kvseg/crc32c.h"
#include "kvseg/segment.h"

#include "fuzz_util.h"

static char g_dir[64];
static char g_catalog[96];

static void make_segment(const char *name, const char *key)
{
	char path[128];
	snprintf(path, sizeof path, "%s/%s", g_dir, name);
	kvs_writer *w = NULL;
	kvs_writer_options o = {0};
	o.flags = KVS_WRITER_NO_SYNC;
	o.sequence = key[0];
	check(kvs_writer_open(&w, path, &o, NULL) == KVS_OK);
	check(kvs_writer_add_bytes(w, key, strlen(key), KVS_KIND_VALUE, "v", 1,
	                           NULL) == KVS_OK);
	check(kvs_writer_finish(w, NULL) == KVS_OK);
	kvs_writer_free(w);
}

/* Removes the directory when the fuzzer exits. */
static void cleanup(void)
{
	static const char *const names[] = {"s1", "s2", KVS_CATALOG_FILE,
	                                    KVS_CATALOG_FILE ".lock"};
	char path[128];
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", g_dir, names[i]);
		unlink(path);
	}
	rmdir(g_dir);
}

static void setup(void)
{
	if (g_dir[0])
		return;
	snprintf(g_dir, sizeof g_dir, "/tmp/fuzz_catalog.XXXXXX");
	check(mkdtemp(g_dir) != NULL);
	atexit(cleanup);
	snprintf(g_catalog, sizeof g_catalog, "%s/%s", g_dir,
	         KVS_CATALOG_FILE);
	make_segment("s1", "a");
	make_segment("s2", "b");
}

static void try_catalog(const uint8_t *data, size_t size)
{
	FILE *f = fopen(g_catalog, "wb");
	check(f != NULL);
	check(fwrite(data, 1, size, f) == size || size == 0);
	check(fclose(f) == 0);
	kvs_catalog *c = NULL;
	kvs_error err = {0};
	kvs_status st = kvs_catalog_open(&c, g_dir, &err);
	if (st != KVS_OK) {
		check(c == NULL && err.message[0] != '\0');
		return;
	}
	size_t n = kvs_catalog_count(c);
	check(n <= 2); /* only s1 and s2 exist, and names are unique */
	for (size_t i = 0; i < n; i++) {
		const kvs_catalog_entry *e = kvs_catalog_entry_at(c, i);
		size_t len = strnlen(e->name, sizeof e->name);
		check(len > 0 && len <= KVS_CATALOG_MAX_NAME);
		check(strchr(e->name, '/') == NULL && e->name[0] != '.');
	}
	kvs_catalog_close(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup();
	uint8_t *buf = fuzz_copy(data, size);
	if (!buf)
		return 0;
	try_catalog(buf, size);
	if (size >= 4) { /* again with the trailing CRC32C made right */
		kvs_store_le32(buf + size - 4, kvsi_crc32c(0, buf, size - 4));
		try_catalog(buf, size);
	}
	free(buf);
	return 0;
}
