/*
 * example.c — libkvseg through its public API only: write two segments,
 * read keys back, merge them (the newer segment's bindings win) and read
 * the merge. It checks every result and exits non-zero on any mismatch;
 * tests/install builds it against an installed libkvseg.
 *
 *   cc -o example example.c $(pkg-config --cflags --libs kvseg)
 *   ./example [DIR]        (DIR: where the segments go, default ".")
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <kvseg/merge.h>
#include <kvseg/segment.h>

struct record {
	const char *key;
	const char *value; /* NULL: a tombstone */
};

static int failures;

static void fail(const char *what, const kvs_error *err)
{
	fprintf(stderr, "example: %s: %s\n", what,
	        err ? err->message : "mismatch");
	failures++;
}

/* Writes records (in key order) to a new segment at path. */
static bool write_segment(const char *path, uint64_t sequence,
                          const struct record *recs, size_t n)
{
	kvs_writer_options opt = {.sequence = sequence};
	kvs_writer *w = NULL;
	kvs_error err;
	if (kvs_writer_open(&w, path, &opt, &err) != KVS_OK)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		const char *v = recs[i].value;
		if (kvs_writer_add_bytes(w, recs[i].key, strlen(recs[i].key),
		                         v ? KVS_KIND_VALUE
		                           : KVS_KIND_TOMBSTONE,
		                         v, v ? strlen(v) : 0, &err) != KVS_OK)
			goto fail;
	}
	if (kvs_writer_finish(w, &err) != KVS_OK)
		goto fail;
	kvs_writer_free(w);
	return true;
fail:
	fail(path, &err);
	kvs_writer_free(w);
	return false;
}

/* Checks that key reads as want in s (want NULL: a tombstone; absent:
 * not there at all). */
static void expect(kvs_segment *s, const char *key, bool present,
                   const char *want)
{
	kvs_cursor *c = NULL;
	bool found = false;
	const uint8_t *value;
	size_t len;
	if (kvs_cursor_open(&c, s) != KVS_OK ||
	    kvs_cursor_lookup_bytes(c, key, strlen(key), &found) != KVS_OK) {
		fail(key, NULL);
		goto out;
	}
	if (found != present) {
		fprintf(stderr, "example: %s: %s, expected %s\n", key,
		        found ? "found" : "absent",
		        present ? "found" : "absent");
		failures++;
		goto out;
	}
	if (!found)
		goto out;
	if (!want) {
		if (kvs_cursor_kind(c) != KVS_KIND_TOMBSTONE)
			fail(key, NULL);
		goto out;
	}
	if (kvs_cursor_kind(c) != KVS_KIND_VALUE ||
	    kvs_cursor_value(c, &value, &len) != KVS_OK ||
	    len != strlen(want) || memcmp(value, want, len) != 0) {
		fprintf(stderr, "example: %s: wrong value, expected '%s'\n",
		        key, want);
		failures++;
	}
out:
	kvs_cursor_close(c);
}

/* Counts the records of s, checking that keys strictly increase. */
static uint64_t count_records(kvs_segment *s)
{
	kvs_cursor *c = NULL;
	uint64_t n = 0;
	char last[64] = "";
	size_t last_len = 0;
	if (kvs_cursor_open(&c, s) != KVS_OK || kvs_cursor_first(c) != KVS_OK) {
		fail("first", NULL);
		kvs_cursor_close(c);
		return 0;
	}
	while (kvs_cursor_valid(c)) {
		uint64_t bits;
		const uint8_t *key = kvs_cursor_key(c, &bits);
		size_t len = (size_t)(bits / 8);
		if (n > 0 && kvs_key_compare(last, 8 * (uint64_t)last_len, key,
		                             bits) >= 0)
			fail("key order", NULL);
		if (len < sizeof last) {
			memcpy(last, key, len);
			last_len = len;
		}
		n++;
		if (kvs_cursor_next(c) != KVS_OK) {
			fail("next", NULL);
			break;
		}
	}
	kvs_cursor_close(c);
	return n;
}

static kvs_segment *open_segment(const char *path)
{
	kvs_segment *s = NULL;
	kvs_error err;
	if (kvs_segment_open(&s, path, &err) != KVS_OK ||
	    kvs_segment_verify(s, &err) != KVS_OK) {
		fail(path, &err);
		kvs_segment_unref(s);
		return NULL;
	}
	return s;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : ".";
	char old_path[4096], new_path[4096], merged_path[4096];
	snprintf(old_path, sizeof old_path, "%s/old.kvs", dir);
	snprintf(new_path, sizeof new_path, "%s/new.kvs", dir);
	snprintf(merged_path, sizeof merged_path, "%s/merged.kvs", dir);

	static const struct record old_recs[] = {
	    {"apple", "red"},
	    {"banana", "yellow"},
	    {"cherry", "dark red"},
	};
	static const struct record new_recs[] = {
	    {"apple", "green"}, /* replaces the older binding */
	    {"cherry", NULL},   /* deletes cherry */
	    {"date", "brown"},
	};
	if (!write_segment(old_path, 1, old_recs, 3) ||
	    !write_segment(new_path, 2, new_recs, 3))
		return 1;

	kvs_segment *segs[2] = {open_segment(old_path), open_segment(new_path)};
	if (!segs[0] || !segs[1])
		return 1;
	expect(segs[0], "apple", true, "red");
	expect(segs[0], "cherry", true, "dark red");
	expect(segs[0], "date", false, NULL);
	expect(segs[1], "apple", true, "green");
	expect(segs[1], "cherry", true, NULL);
	expect(segs[1], "banana", false, NULL);

	/* Merge, oldest first. Both inputs together are all there is, so
	 * a strong delete may drop the tombstone and what it hides. */
	kvs_merge_options mopt = {
	    .output = {.sequence = 3},
	    .drop_tombstones = true,
	    .includes_oldest = true,
	};
	kvs_merge_stats stats;
	kvs_error err;
	if (kvs_merge(segs, 2, merged_path, &mopt, &stats, &err) != KVS_OK) {
		fail("merge", &err);
		return 1;
	}
	kvs_segment_unref(segs[0]);
	kvs_segment_unref(segs[1]);
	if (stats.input_records != 6 || stats.output_records != 3 ||
	    stats.dropped != 1)
		fail("merge stats", NULL);

	kvs_segment *merged = open_segment(merged_path);
	if (!merged)
		return 1;
	expect(merged, "apple", true, "green");
	expect(merged, "banana", true, "yellow");
	expect(merged, "cherry", false, NULL);
	expect(merged, "date", true, "brown");
	kvs_segment_info info;
	kvs_segment_info_get(merged, &info);
	if (info.records != 3 || info.tombstones != 0 || info.sequence != 3 ||
	    count_records(merged) != 3)
		fail("merged segment's records", NULL);
	kvs_segment_unref(merged);

	if (failures) {
		fprintf(stderr, "example: %d failures\n", failures);
		return 1;
	}
	printf("example: ok (%s: %llu records)\n", merged_path,
	       (unsigned long long)info.records);
	return 0;
}
