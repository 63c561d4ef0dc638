/*
 * kvseg_build.c — kvseg build: records from stdin to a new segment.
 *
 * The writer needs keys in strictly increasing order, and input often is
 * not, so the records are held in memory (pointers into the input buffer,
 * kvseg_input.c), sorted only when they are out of order, and checked for
 * repeated keys before the first one is written. Sorting is by key and
 * then by input position, which makes it stable: among equal keys the
 * later input record comes last, which is the one --last-wins keeps. Every
 * record is checked against the segment's mode before writing, so that
 * bad input is named by its line and leaves nothing behind.
 */
#include "kvseg_cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	OPT_PROFILE = 1,
	OPT_FRAMING,
	OPT_RESTART,
	OPT_INPUT,
	OPT_LAST_WINS,
	OPT_SEQUENCE,
	OPT_CODES,
};

static const struct cli_option build_options[] = {
    {"profile", true, OPT_PROFILE},      {"framing", true, OPT_FRAMING},
    {"restart", true, OPT_RESTART},      {"input", true, OPT_INPUT},
    {"last-wins", false, OPT_LAST_WINS}, {"sequence", true, OPT_SEQUENCE},
    {"codes", true, OPT_CODES},          {NULL, false, 0},
};

struct build_config {
	kvs_writer_options writer;
	enum input_format format;
	bool last_wins;
	const char *out;
};

static bool parse_codes(const char *text, kvs_code_spec codes[3])
{
	static const char *const field_names[3] = {"LCP", "KEYLEN", "VALLEN"};
	const char *p = text;

	for (int i = 0; i < 3; i++) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		char part[32];

		if ((i < 2) != (comma != NULL)) {
			cli_usage("build",
			          "--codes: '%s' is not three codes "
			          "LCP,KEYLEN,VALLEN",
			          text);
			return false;
		}
		if (n >= sizeof part || n == 0) {
			cli_usage("build", "--codes: %s code is %s",
			          field_names[i], n ? "too long" : "empty");
			return false;
		}
		memcpy(part, p, n);
		part[n] = '\0';
		if (kvs_code_spec_parse(part, &codes[i]) != KVS_OK ||
		    kvs_code_spec_check(&codes[i]) != KVS_OK) {
			cli_usage(
			    "build",
			    "--codes: %s code '%s' is not a code (egN for "
			    "N in 0..63, gM for M in 1..255, fixedW for W in "
			    "1..64; a 'd' in front for delta)",
			    field_names[i], part);
			return false;
		}
		p = comma ? comma + 1 : p + n;
	}
	return true;
}

static int parse_build_args(int argc, char **argv, struct build_config *cfg)
{
	struct cli_args args;
	const char *val;
	uint64_t n;
	bool codes = false;
	int id;

	cli_args_init(&args, "build", argc, argv);
	while ((id = cli_args_next(&args, build_options, &val)) != ARG_END) {
		switch (id) {
		case ARG_ERROR:
			return EXIT_USAGE;
		case ARG_HELP:
			return -1;
		case ARG_OPERAND:
			if (cfg->out)
				return cli_usage("build",
				                 "one output file only ('%s')",
				                 val);
			cfg->out = val;
			break;
		case OPT_PROFILE:
			if (strcmp(val, "byte") == 0)
				cfg->writer.profile = KVS_PROFILE_BYTE;
			else if (strcmp(val, "bit") == 0)
				cfg->writer.profile = KVS_PROFILE_BIT;
			else
				return cli_usage(
				    "build",
				    "--profile: '%s' is not byte or "
				    "bit",
				    val);
			break;
		case OPT_FRAMING:
			if (strcmp(val, "typed") == 0)
				cfg->writer.framing = KVS_FRAMING_TYPED;
			else if (strcmp(val, "raw") == 0)
				cfg->writer.framing = KVS_FRAMING_RAW;
			else
				return cli_usage(
				    "build",
				    "--framing: '%s' is not typed or "
				    "raw",
				    val);
			break;
		case OPT_RESTART:
			if (!cli_parse_u64("build", "--restart", val, 1,
			                   KVS_MAX_RESTART_INTERVAL, &n))
				return EXIT_USAGE;
			cfg->writer.restart_interval = (uint32_t)n;
			break;
		case OPT_INPUT:
			if (strcmp(val, "tsv") == 0)
				cfg->format = INPUT_TSV;
			else if (strcmp(val, "nul") == 0)
				cfg->format = INPUT_NUL;
			else if (strcmp(val, "jsonl") == 0)
				cfg->format = INPUT_JSONL;
			else
				return cli_usage(
				    "build",
				    "--input: '%s' is not tsv, nul "
				    "or jsonl",
				    val);
			break;
		case OPT_LAST_WINS:
			cfg->last_wins = true;
			break;
		case OPT_SEQUENCE:
			if (!cli_parse_u64("build", "--sequence", val, 0,
			                   UINT64_MAX, &n))
				return EXIT_USAGE;
			cfg->writer.sequence = n;
			break;
		case OPT_CODES:
			if (!parse_codes(val, cfg->writer.codes))
				return EXIT_USAGE;
			codes = true;
			break;
		}
	}
	if (!cfg->out)
		return cli_usage("build", "no output file given");
	if (codes && cfg->writer.profile != KVS_PROFILE_BIT)
		return cli_usage("build",
		                 "--codes needs --profile bit (the byte "
		                 "profile's counts are LEB128)");
	cfg->writer.custom_codes = codes;
	return EXIT_OK;
}

static int record_compare(const void *a, const void *b)
{
	const struct record *x = a, *y = b;
	int c = kvs_key_compare(x->key, x->key_bits, y->key, y->key_bits);

	if (c)
		return c;
	return (x->number > y->number) - (x->number < y->number);
}

/* Sorts if needed, then drops or rejects repeated keys. */
static int order_records(const struct build_config *cfg,
                         struct record_list *list)
{
	struct record *r = list->items;
	size_t n = list->count, kept = 0;
	const char *unit = input_unit(cfg->format);

	for (size_t i = 1; i < n; i++) {
		if (kvs_key_compare(r[i - 1].key, r[i - 1].key_bits, r[i].key,
		                    r[i].key_bits) > 0) {
			qsort(r, n, sizeof *r, record_compare);
			break;
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (kept &&
		    kvs_key_compare(r[kept - 1].key, r[kept - 1].key_bits,
		                    r[i].key, r[i].key_bits) == 0) {
			struct strbuf shown = {0};

			if (cfg->last_wins) {
				r[kept - 1] = r[i];
				continue;
			}
			if (!text_encode(&shown, r[i].key, r[i].key_bits)) {
				sb_free(&shown);
				cli_error("build", NULL, "out of memory");
				return EXIT_SYSTEM;
			}
			cli_error("build", "stdin",
			          "%ss %llu and %llu: the same key '%.*s%s' "
			          "(--last-wins keeps the later one)",
			          unit, (unsigned long long)r[kept - 1].number,
			          (unsigned long long)r[i].number,
			          (int)(shown.len > 64 ? 64 : shown.len),
			          (const char *)shown.data,
			          shown.len > 64 ? "..." : "");
			sb_free(&shown);
			return EXIT_DATA;
		}
		r[kept++] = r[i];
	}
	list->count = kept;
	return EXIT_OK;
}

/* Checks every record against the segment's mode, in input order. */
static int check_records(const struct build_config *cfg,
                         const struct record_list *list)
{
	const char *unit = input_unit(cfg->format);

	for (size_t i = 0; i < list->count; i++) {
		const struct record *r = &list->items[i];

		if (cfg->writer.profile == KVS_PROFILE_BYTE &&
		    r->key_bits % 8) {
			cli_error(
			    "build", "stdin",
			    "%s %llu: a key of %u bits needs --profile bit",
			    unit, (unsigned long long)r->number,
			    (unsigned)r->key_bits);
			return EXIT_DATA;
		}
		if (cfg->writer.framing == KVS_FRAMING_RAW &&
		    r->kind == KVS_KIND_TOMBSTONE) {
			cli_error("build", "stdin",
			          "%s %llu: a tombstone, but raw framing has "
			          "none (use --framing typed)%s",
			          unit, (unsigned long long)r->number,
			          cfg->format == INPUT_TSV
			              ? "; a TSV line without a TAB is a "
			                "tombstone"
			              : "");
			return EXIT_DATA;
		}
	}
	return EXIT_OK;
}

static int write_records(const struct build_config *cfg, kvs_writer *w,
                         const struct record_list *list)
{
	kvs_error err = {0};

	for (size_t i = 0; i < list->count; i++) {
		const struct record *r = &list->items[i];
		kvs_status st;

		if (cfg->writer.profile == KVS_PROFILE_BYTE)
			st = kvs_writer_add_bytes(w, r->key, r->key_bits / 8,
			                          (kvs_kind)r->kind, r->value,
			                          (size_t)r->value_len, &err);
		else
			st = kvs_writer_add(w, r->key, r->key_bits,
			                    (kvs_kind)r->kind, r->value,
			                    (size_t)r->value_len, &err);
		if (st != KVS_OK) {
			char where[64];

			snprintf(where, sizeof where, " (input %s %llu)",
			         input_unit(cfg->format),
			         (unsigned long long)r->number);
			return cli_error_kvs("build", cfg->out, st, &err,
			                     where);
		}
	}
	if (kvs_writer_finish(w, &err) != KVS_OK)
		return cli_error_kvs("build", cfg->out, err.status, &err, "");
	return EXIT_OK;
}

int cmd_build(int argc, char **argv)
{
	struct build_config cfg = {0};
	struct record_list list = {0};
	kvs_writer *w = NULL;
	kvs_error err = {0};
	uint8_t *input = NULL;
	size_t input_len = 0;
	int rc, e;

	cfg.writer.profile = KVS_PROFILE_BYTE;
	cfg.writer.framing = KVS_FRAMING_TYPED;
	cfg.format = INPUT_TSV;
	rc = parse_build_args(argc, argv, &cfg);
	if (rc < 0)
		return cli_help("build");
	if (rc)
		return rc;

	if (cli_stdin_closed) {
		cli_error("build", "stdin",
		          "closed (records are read from "
		          "stdin)");
		return EXIT_SYSTEM;
	}
	/* Open first: a bad OUT fails before stdin is read. */
	if (kvs_writer_open(&w, cfg.out, &cfg.writer, &err) != KVS_OK) {
		rc = cli_error_kvs("build", cfg.out, err.status, &err, "");
		return rc == EXIT_SYSTEM ? rc : EXIT_USAGE;
	}
	e = input_slurp(STDIN_FILENO, &input, &input_len);
	if (e) {
		cli_error("build", "stdin", "%s", strerror(e));
		rc = EXIT_SYSTEM;
		goto out;
	}
	rc = input_parse(cfg.format, input, input_len, &list);
	if (!rc)
		rc = check_records(&cfg, &list);
	if (!rc)
		rc = order_records(&cfg, &list);
	if (!rc)
		rc = write_records(&cfg, w, &list);
out:
	if (w)
		kvs_writer_free(w);
	free(list.items);
	free(input);
	return rc;
}
