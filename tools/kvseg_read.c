/*
 * kvseg_read.c — the verbs that read records out of a segment: get, scan
 * and dump, all through a libkvseg view (kvseg/view.h): a segment's, which
 * shows its every record, or a catalog's (kvseg catalog DIR get and scan,
 * kvseg_catalog.c), which shows each key's newest binding.
 *
 * scan and dump print keys and values with the one encoder in
 * kvseg_text.c, so their TSV is build's input syntax and dump is
 * canonical; scan's JSON lines go through kvseg_json.c (jansson), in
 * build's --input jsonl syntax. A key argument is decoded once; in the byte profile a key
 * whose length is not a whole number of bytes cannot be present, and its
 * lower bound among byte keys is that of the key padded with zero bits to
 * a byte, which is how scan seeks to it.
 */
#include "kvseg_cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int open_segment(const char *verb, const char *path, kvs_segment **out)
{
	kvs_error err = {0};
	kvs_status st = kvs_segment_open(out, path, &err);

	if (st == KVS_OK)
		return EXIT_OK;
	*out = NULL;
	cli_error_kvs(verb, path, st, &err, "");
	/* "not a regular file": it cannot be read as a segment at all. */
	return st == KVS_E_INVAL ? EXIT_SYSTEM : exit_for_status(st);
}

int open_catalog_segment(const char *verb, const kvs_catalog *c, size_t i,
                         const char *path, kvs_segment **out)
{
	kvs_error err = {0};
	kvs_status st = kvs_catalog_open_segment(c, i, out, NULL, &err);

	if (st == KVS_OK)
		return EXIT_OK;
	return cli_error_kvs(verb, path, st, &err, "");
}

int cursor_failure(const char *verb, const char *path, kvs_status st)
{
	cli_error(verb, path, "reading records: %s", kvs_strerror(st));
	return exit_for_status(st);
}

/* A failure to read record ordinal (0-based, as verify counts them) after
 * the records before it were printed. */
static int record_failure(const char *verb, const char *path, uint64_t ordinal,
                          kvs_status st)
{
	cli_error(verb, path,
	          "record %" PRIu64 ": %s (the records before it were printed)",
	          ordinal, kvs_strerror(st));
	return exit_for_status(st);
}

bool decode_key_arg(const char *verb, const char *what, const char *text,
                    struct key_arg *k)
{
	char why[96];

	free(k->key);
	k->key = NULL;
	if (!text_decode_arg(text, &k->key, &k->bits, why)) {
		cli_usage(verb, "%s '%s': %s", what, text, why);
		return false;
	}
	if (k->bits > KVS_MAX_KEY_BITS) {
		cli_usage(verb, "%s is longer than the key limit", what);
		return false;
	}
	k->given = true;
	return true;
}

/* One record in scan's format (get's, for several keys). */
static bool format_record(struct strbuf *sb, enum output_format format,
                          const uint8_t *key, uint64_t key_bits, kvs_kind kind,
                          const uint8_t *value, size_t value_len)
{
	struct json_writer w;

	if (format == OUTPUT_TSV) {
		if (!text_encode(sb, key, key_bits))
			return false;
		if (kind == KVS_KIND_VALUE &&
		    (!sb_putc(sb, '\t') ||
		     !text_encode(sb, value, (uint64_t)value_len * 8)))
			return false;
		return sb_putc(sb, '\n');
	}
	json_writer_init(&w, sb);
	json_open(&w, '{');
	json_member_bytes(&w, "key", key, key_bits);
	if (kind == KVS_KIND_TOMBSTONE)
		json_member(&w, "tombstone", json_true());
	else
		json_member_bytes(&w, "value", value, (uint64_t)value_len * 8);
	json_close(&w, '}');
	return w.ok && sb_putc(sb, '\n');
}

/* ---- get --------------------------------------------------------------- */

enum { OPT_QUIET = 1 };

static const struct cli_option get_options[] = {
    {"quiet", false, OPT_QUIET},
    {"-q", false, OPT_QUIET},
    {NULL, false, 0},
};

/* A segment's view as get, scan and dump read it: every record, tombstones
 * too, which makes it the segment's cursor. */
static int open_segment_view(const char *verb, const char *path, kvs_view **v,
                             bool *byte_keys)
{
	kvs_segment *seg = NULL;
	kvs_segment_info info;
	kvs_status st;
	int rc = open_segment(verb, path, &seg);

	if (rc)
		return rc;
	kvs_segment_info_get(seg, &info);
	*byte_keys = info.profile == KVS_PROFILE_BYTE;
	st = kvs_view_open(v, &seg, 1, KVS_VIEW_TOMBSTONES);
	kvs_segment_unref(seg); /* the view's cursor holds it */
	return st == KVS_OK ? EXIT_OK : cursor_failure(verb, path, st);
}

int get_keys(const char *verb, const char *where, kvs_view *v,
             const struct key_arg *keys, const char *const *texts, size_t n,
             bool quiet)
{
	struct strbuf sb = {0};
	int rc = EXIT_OK, flushed;

	for (size_t i = 0; i < n; i++) {
		const uint8_t *key = keys[i].key, *value;
		uint64_t bits = keys[i].bits;
		size_t value_len;
		bool found;
		kvs_status st = kvs_view_lookup(v, key, bits, &found);
		kvs_cursor *cur = kvs_view_cursor(v);

		if (st == KVS_OK && found &&
		    kvs_cursor_kind(cur) == KVS_KIND_VALUE)
			st = kvs_cursor_value(cur, &value, &value_len);
		if (st != KVS_OK) {
			rc = cursor_failure(verb, where, st);
			break;
		}
		if (!found || kvs_cursor_kind(cur) == KVS_KIND_TOMBSTONE) {
			if (!quiet)
				cli_error(verb, where, "'%s': %s", texts[i],
				          found ? "deleted (a tombstone)"
				                : "not found");
			rc = EXIT_NOT_FOUND;
			continue;
		}
		sb.len = 0;
		if (n == 1) {
			fwrite(value, 1, value_len, stdout);
		} else if (format_record(&sb, OUTPUT_TSV, key, bits,
		                         KVS_KIND_VALUE, value, value_len)) {
			fwrite(sb.data, 1, sb.len, stdout);
		} else {
			cli_error(verb, NULL, "out of memory");
			rc = EXIT_SYSTEM;
			break;
		}
	}
	sb_free(&sb);
	flushed = cli_flush_stdout(verb);
	return flushed ? flushed : rc;
}

int cmd_get(int argc, char **argv)
{
	struct cli_args args;
	const char *val, *operands[2] = {NULL, NULL};
	struct key_arg key = {0};
	kvs_view *v = NULL;
	bool quiet = false, byte_keys;
	int nops = 0, id, rc;

	cli_args_init(&args, "get", argc, argv);
	while ((id = cli_args_next(&args, get_options, &val)) != ARG_END) {
		if (id == ARG_ERROR)
			return EXIT_USAGE;
		if (id == ARG_HELP)
			return cli_help("get");
		if (id == OPT_QUIET) {
			quiet = true;
		} else if (nops == 2) {
			return cli_usage("get", "too many operands ('%s')",
			                 val);
		} else {
			operands[nops++] = val;
		}
	}
	if (nops < 2)
		return cli_usage("get", "needs SEG and KEY");
	if (!decode_key_arg("get", "KEY", operands[1], &key))
		return EXIT_USAGE;
	rc = cli_refuse_stdout_input("get", operands, 1);
	if (!rc)
		rc = open_segment_view("get", operands[0], &v, &byte_keys);
	if (!rc)
		rc = get_keys("get", operands[0], v, &key, &operands[1], 1,
		              quiet);
	kvs_view_close(v);
	free(key.key);
	return rc;
}

/* ---- scan and dump ----------------------------------------------------- */

/* Positions the view at the first binding the filter may print. */
static kvs_status scan_start(kvs_view *v, bool byte_keys,
                             const struct scan_filter *f)
{
	const struct key_arg *start = NULL;

	if (f->prefix.given)
		start = &f->prefix;
	if (f->from.given &&
	    (!start || kvs_key_compare(f->from.key, f->from.bits, start->key,
	                               start->bits) > 0))
		start = &f->from;
	if (!start)
		return kvs_view_first(v);
	return kvs_view_seek(
	    v, start->key, byte_keys ? (start->bits + 7) / 8 * 8 : start->bits,
	    false);
}

/*
 * Prints the records f selects. A damaged record ends the output, but the
 * records read before it are printed first: they passed the reader's
 * checks, and they may be all that can be saved of the segment. The
 * failing record is named by its ordinal in a one-segment view.
 */
int print_records(const char *verb, const char *where, kvs_view *v,
                  bool byte_keys, const struct scan_filter *f)
{
	struct strbuf sb = {0};
	uint64_t printed = 0;
	/* the record being read; none known while scan_start seeks, nor
	 * in a stack, whose ordinals name no single record */
	uint64_t reading = 0;
	bool reading_known = false, one = kvs_view_count(v) == 1;
	kvs_status st;
	int rc = EXIT_OK;

	st = scan_start(v, byte_keys, f);
	while (st == KVS_OK && kvs_view_valid(v) && printed < f->limit) {
		kvs_cursor *cur = kvs_view_cursor(v);
		uint64_t key_bits;
		const uint8_t *key = kvs_cursor_key(cur, &key_bits);
		kvs_kind kind = kvs_cursor_kind(cur);
		const uint8_t *value = NULL;
		size_t value_len = 0;

		reading = kvs_cursor_ordinal(cur);
		reading_known = one;
		if (f->to.given &&
		    kvs_key_compare(key, key_bits, f->to.key, f->to.bits) >= 0)
			break;
		if (f->prefix.given &&
		    !key_has_prefix(key, key_bits, f->prefix.key,
		                    f->prefix.bits))
			break;
		if (kind == KVS_KIND_VALUE) {
			st = kvs_cursor_value(cur, &value, &value_len);
			if (st != KVS_OK)
				break;
		}
		if (!format_record(&sb, f->format, key, key_bits, kind, value,
		                   value_len)) {
			cli_error(verb, NULL, "out of memory");
			rc = EXIT_SYSTEM;
			goto out;
		}
		printed++;
		if (sb.len >= (size_t)1 << 16) {
			if (fwrite(sb.data, 1, sb.len, stdout) != sb.len) {
				rc = cli_flush_stdout(verb);
				goto out;
			}
			sb.len = 0;
		}
		/* the limit reached, the next record is not read: a scan
		 * that ends before a damaged record succeeds */
		if (printed == f->limit)
			break;
		/* a failed next() leaves the view at the end, so the
		 * record it was reading is known only from here (a
		 * one-segment view shows every record: the next one) */
		reading++;
		st = kvs_view_next(v);
	}
	if (sb.len)
		fwrite(sb.data, 1, sb.len, stdout);
	rc = cli_flush_stdout(verb);
	if (st != KVS_OK) {
		int failed = reading_known
		                 ? record_failure(verb, where, reading, st)
		                 : cursor_failure(verb, where, st);
		/* a stdout that failed too is reported above, and wins */
		if (rc == EXIT_OK)
			rc = failed;
	}
out:
	sb_free(&sb);
	return rc;
}

enum {
	OPT_PREFIX = 1,
	OPT_FROM,
	OPT_TO,
	OPT_LIMIT,
	OPT_FORMAT,
};

static const struct cli_option scan_options[] = {
    {"prefix", true, OPT_PREFIX}, {"from", true, OPT_FROM},
    {"to", true, OPT_TO},         {"limit", true, OPT_LIMIT},
    {"format", true, OPT_FORMAT}, {NULL, false, 0},
};

static int parse_scan_args(int argc, char **argv, struct scan_filter *f,
                           const char **path)
{
	struct cli_args args;
	const char *val;
	int id;

	cli_args_init(&args, "scan", argc, argv);
	while ((id = cli_args_next(&args, scan_options, &val)) != ARG_END) {
		switch (id) {
		case ARG_ERROR:
			return EXIT_USAGE;
		case ARG_HELP:
			return -1;
		case ARG_OPERAND:
			if (*path)
				return cli_usage(
				    "scan", "one segment only ('%s')", val);
			*path = val;
			break;
		case OPT_PREFIX:
			if (!decode_key_arg("scan", "--prefix", val,
			                    &f->prefix))
				return EXIT_USAGE;
			break;
		case OPT_FROM:
			if (!decode_key_arg("scan", "--from", val, &f->from))
				return EXIT_USAGE;
			break;
		case OPT_TO:
			if (!decode_key_arg("scan", "--to", val, &f->to))
				return EXIT_USAGE;
			break;
		case OPT_LIMIT:
			if (!cli_parse_u64("scan", "--limit", val, 0,
			                   UINT64_MAX, &f->limit))
				return EXIT_USAGE;
			break;
		case OPT_FORMAT:
			if (strcmp(val, "tsv") == 0)
				f->format = OUTPUT_TSV;
			else if (strcmp(val, "jsonl") == 0)
				f->format = OUTPUT_JSONL;
			else
				return cli_usage("scan",
				                 "--format: '%s' is not tsv or "
				                 "jsonl",
				                 val);
			break;
		}
	}
	if (!*path)
		return cli_usage("scan", "no segment given");
	return cli_refuse_stdout_input("scan", path, 1);
}

int cmd_scan(int argc, char **argv)
{
	struct scan_filter f = {0};
	const char *path = NULL;
	kvs_view *v = NULL;
	bool byte_keys;
	int rc;

	f.limit = UINT64_MAX;
	f.format = OUTPUT_TSV;
	rc = parse_scan_args(argc, argv, &f, &path);
	if (rc < 0)
		rc = cli_help("scan");
	else if (rc == EXIT_OK &&
	         (rc = open_segment_view("scan", path, &v, &byte_keys)) ==
	             EXIT_OK)
		rc = print_records("scan", path, v, byte_keys, &f);
	kvs_view_close(v);
	free(f.prefix.key);
	free(f.from.key);
	free(f.to.key);
	return rc;
}

int cmd_dump(int argc, char **argv)
{
	struct scan_filter f = {0};
	struct cli_args args;
	const char *val, *path = NULL;
	kvs_view *v = NULL;
	bool byte_keys;
	int id, rc;

	cli_args_init(&args, "dump", argc, argv);
	while ((id = cli_args_next(&args, NULL, &val)) != ARG_END) {
		if (id == ARG_ERROR)
			return EXIT_USAGE;
		if (id == ARG_HELP)
			return cli_help("dump");
		if (path)
			return cli_usage("dump", "one segment only ('%s')",
			                 val);
		path = val;
	}
	if (!path)
		return cli_usage("dump", "no segment given");
	rc = cli_refuse_stdout_input("dump", &path, 1);
	if (rc)
		return rc;
	rc = open_segment_view("dump", path, &v, &byte_keys);
	if (rc)
		return rc;
	f.limit = UINT64_MAX;
	f.format = OUTPUT_TSV;
	rc = print_records("dump", path, v, byte_keys, &f);
	kvs_view_close(v);
	return rc;
}
