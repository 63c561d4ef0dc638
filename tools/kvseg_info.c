/*
 * kvseg_info.c — the verbs that report on whole segments: verify (a full
 * check of each file) and stat (kvs_segment_info as text or JSON).
 *
 * stat prints one list of named fields, the same names in both forms, so
 * a script can switch to --json without relearning anything.
 */
#include "kvseg_cli.h"

#include <string.h>

int cmd_verify(int argc, char **argv)
{
	struct cli_args args;
	const char *path;
	int id, worst = EXIT_OK, files = 0;

	/* Check every operand before opening any file. */
	cli_args_init(&args, "verify", argc, argv);
	while ((id = cli_args_next(&args, NULL, &path)) != ARG_END) {
		if (id == ARG_ERROR)
			return EXIT_USAGE;
		if (id == ARG_HELP)
			return cli_help("verify");
		files++;
	}
	if (files == 0)
		return cli_usage("verify", "no segment given");

	cli_args_init(&args, "verify", argc, argv);
	while ((id = cli_args_next(&args, NULL, &path)) != ARG_END) {
		kvs_segment *seg = NULL;
		kvs_error err = {0};
		int rc = open_segment("verify", path, &seg);

		if (rc == EXIT_OK) {
			kvs_status st = kvs_segment_verify(seg, &err);

			if (st == KVS_OK) {
				printf("%s: ok\n", path);
			} else {
				rc =
				    cli_error_kvs("verify", path, st, &err, "");
			}
			kvs_segment_unref(seg);
		}
		if (rc > worst)
			worst = rc;
	}
	id = cli_flush_stdout("verify");
	return id > worst ? id : worst;
}

/* ---- stat -------------------------------------------------------------- */

enum { OPT_JSON = 1 };

static const struct cli_option stat_options[] = {
    {"json", false, OPT_JSON},
    {NULL, false, 0},
};

static const char *mode_name(const kvs_segment_info *info)
{
	if (info->framing == KVS_FRAMING_TYPED)
		return info->profile == KVS_PROFILE_BIT ? "typed-bit"
		                                        : "typed-byte";
	return info->profile == KVS_PROFILE_BIT ? "raw-bit" : "raw-byte";
}

/* bits / 8 written exactly: eighths have at most three decimals. */
static void format_eighths(char out[32], uint64_t bits)
{
	static const char *const fractions[8] = {
	    "", ".125", ".25", ".375", ".5", ".625", ".75", ".875",
	};

	snprintf(out, 32, "%llu%s", (unsigned long long)(bits / 8),
	         fractions[bits % 8]);
}

static void stat_u64(bool json, bool *first, const char *name, uint64_t v)
{
	if (json)
		printf("%s\"%s\":%llu", *first ? "" : ",", name,
		       (unsigned long long)v);
	else
		printf("%-16s %llu\n", name, (unsigned long long)v);
	*first = false;
}

/* A value printed as is: a JSON literal, or text. */
static void stat_raw(bool json, bool *first, const char *name,
                     const char *json_value, const char *text)
{
	if (json)
		printf("%s\"%s\":%s", *first ? "" : ",", name, json_value);
	else
		printf("%-16s %s\n", name, text);
	*first = false;
}

static void print_stat(const kvs_segment_info *info, bool json)
{
	static const char *const field_names[KVS_FIELD_COUNT] = {
	    "lcp",
	    "keylen",
	    "vallen",
	};
	bool first = true;
	char a[160], b[160];

	if (json)
		putchar('{');
	snprintf(a, sizeof a, "\"%s\"", mode_name(info));
	stat_raw(json, &first, "mode", a, mode_name(info));
	stat_u64(json, &first, "version", info->version);
	stat_u64(json, &first, "restart_interval", info->restart_interval);
	stat_u64(json, &first, "sequence", info->sequence);
	stat_u64(json, &first, "records", info->records);
	stat_u64(json, &first, "tombstones", info->tombstones);
	stat_u64(json, &first, "restarts", info->restarts);
	stat_u64(json, &first, "key_bits", info->key_bits);
	format_eighths(a, info->key_bits);
	stat_raw(json, &first, "key_bytes", a, a);
	stat_u64(json, &first, "max_key_bits", info->max_key_bits);
	stat_u64(json, &first, "value_bytes", info->value_bytes);
	if (info->profile == KVS_PROFILE_BIT) {
		size_t an = 0, bn = 0;

		an += (size_t)snprintf(a, sizeof a, "{");
		for (int i = 0; i < KVS_FIELD_COUNT; i++) {
			char code[16];

			kvs_code_spec_format(&info->codes[i], code);
			code[15] = '\0';
			an += (size_t)snprintf(a + an, sizeof a - an,
			                       "%s\"%s\":\"%s\"", i ? "," : "",
			                       field_names[i], code);
			bn += (size_t)snprintf(b + bn, sizeof b - bn, "%s%s=%s",
			                       i ? " " : "", field_names[i],
			                       code);
		}
		snprintf(a + an, sizeof a - an, "}");
		stat_raw(json, &first, "codes", a, b);
	} else {
		stat_raw(json, &first, "codes", "null",
		         "- (byte profile: LEB128)");
	}
	stat_u64(json, &first, "stream_bits", info->stream_bits);
	stat_u64(json, &first, "stream_bytes", info->stream_bytes);
	stat_u64(json, &first, "ef_bytes", info->ef_bytes);
	stat_u64(json, &first, "fence_bytes", info->fence_bytes);
	stat_u64(json, &first, "other_bytes", info->other_bytes);
	stat_u64(json, &first, "file_bytes", info->file_bytes);
	if (info->records) {
		snprintf(a, sizeof a, "%.3f",
		         (double)info->file_bytes * 8 / (double)info->records);
		stat_raw(json, &first, "bits_per_record", a, a);
	} else {
		stat_raw(json, &first, "bits_per_record", "null",
		         "- (no records)");
	}
	if (json)
		fputs("}\n", stdout);
}

int cmd_stat(int argc, char **argv)
{
	struct cli_args args;
	const char *val, *path = NULL;
	kvs_segment *seg = NULL;
	kvs_segment_info info;
	bool json = false;
	int id, rc;

	cli_args_init(&args, "stat", argc, argv);
	while ((id = cli_args_next(&args, stat_options, &val)) != ARG_END) {
		if (id == ARG_ERROR)
			return EXIT_USAGE;
		if (id == ARG_HELP)
			return cli_help("stat");
		if (id == OPT_JSON)
			json = true;
		else if (path)
			return cli_usage("stat", "one segment only ('%s')",
			                 val);
		else
			path = val;
	}
	if (!path)
		return cli_usage("stat", "no segment given");
	rc = open_segment("stat", path, &seg);
	if (rc)
		return rc;
	memset(&info, 0, sizeof info);
	kvs_segment_info_get(seg, &info);
	print_stat(&info, json);
	kvs_segment_unref(seg);
	return cli_flush_stdout("stat");
}
