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
	while ((id = cli_args_next(&args, NULL, &path)) != ARG_END)
		if (cli_refuse_stdout_input("verify", &path, 1))
			return EXIT_USAGE;

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

/* Where stat's fields go: text lines, or a JSON object. */
struct stat_out {
	bool json;
	struct json_writer w;
};

static void stat_u64(struct stat_out *o, const char *name, uint64_t v)
{
	if (o->json)
		json_member_u64(&o->w, name, v);
	else
		printf("%-16s %llu\n", name, (unsigned long long)v);
}

/* A field that is not an unsigned integer: v in JSON, text as text. */
static void stat_field(struct stat_out *o, const char *name, json_t *v,
                       const char *text)
{
	if (o->json) {
		json_member(&o->w, name, v);
	} else {
		printf("%-16s %s\n", name, text);
		json_decref(v);
	}
}

static bool print_stat(const kvs_segment_info *info, bool json)
{
	static const char *const field_names[KVS_FIELD_COUNT] = {
	    "lcp",
	    "keylen",
	    "vallen",
	};
	struct strbuf sb = {0};
	struct stat_out o = {.json = json};
	char a[160];
	bool ok = true;

	json_writer_init(&o.w, &sb);
	if (json)
		json_open(&o.w, '{');
	stat_field(&o, "mode", json_string(mode_name(info)), mode_name(info));
	stat_u64(&o, "version", info->version);
	stat_u64(&o, "restart_interval", info->restart_interval);
	stat_u64(&o, "sequence", info->sequence);
	stat_u64(&o, "records", info->records);
	stat_u64(&o, "tombstones", info->tombstones);
	stat_u64(&o, "restarts", info->restarts);
	stat_u64(&o, "key_bits", info->key_bits);
	if (info->key_bits % 8 == 0) {
		stat_u64(&o, "key_bytes", info->key_bits / 8);
	} else if (json) {
		/* eighths are exact in a double (17 digits: all of them) */
		json_member_real(&o.w, "key_bytes", (double)info->key_bits / 8,
		                 17);
	} else {
		format_eighths(a, info->key_bits);
		stat_field(&o, "key_bytes", NULL, a);
	}
	stat_u64(&o, "max_key_bits", info->max_key_bits);
	stat_u64(&o, "value_bytes", info->value_bytes);
	if (info->profile == KVS_PROFILE_BIT) {
		json_t *codes = json ? json_object() : NULL;
		size_t an = 0;

		for (int i = 0; i < KVS_FIELD_COUNT; i++) {
			char code[16];

			kvs_code_spec_format(&info->codes[i], code);
			code[15] = '\0';
			if (codes && json_object_set_new(codes, field_names[i],
			                                 json_string(code)))
				o.w.ok = false;
			an += (size_t)snprintf(a + an, sizeof a - an, "%s%s=%s",
			                       i ? " " : "", field_names[i],
			                       code);
		}
		stat_field(&o, "codes", codes, a);
	} else {
		stat_field(&o, "codes", json_null(),
		           "- (byte profile: LEB128)");
	}
	stat_u64(&o, "stream_bits", info->stream_bits);
	stat_u64(&o, "stream_bytes", info->stream_bytes);
	stat_u64(&o, "ef_bytes", info->ef_bytes);
	stat_u64(&o, "fence_bytes", info->fence_bytes);
	stat_u64(&o, "other_bytes", info->other_bytes);
	stat_u64(&o, "file_bytes", info->file_bytes);
	if (info->records) {
		double bits =
		    (double)info->file_bytes * 8 / (double)info->records;

		snprintf(a, sizeof a, "%.3f", bits);
		if (json)
			/* three decimals, as the text (15 digits: no
			 * binary noise after them) */
			json_member_real(
			    &o.w, "bits_per_record",
			    (double)(uint64_t)(bits * 1000 + 0.5) / 1000, 15);
		else
			stat_field(&o, "bits_per_record", NULL, a);
	} else {
		stat_field(&o, "bits_per_record", json_null(),
		           "- (no records)");
	}
	if (json) {
		json_close(&o.w, '}');
		ok = o.w.ok && sb_putc(&sb, '\n');
		if (ok)
			fwrite(sb.data, 1, sb.len, stdout);
	}
	sb_free(&sb);
	return ok;
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
	rc = cli_refuse_stdout_input("stat", &path, 1);
	if (rc)
		return rc;
	rc = open_segment("stat", path, &seg);
	if (rc)
		return rc;
	memset(&info, 0, sizeof info);
	kvs_segment_info_get(seg, &info);
	if (!print_stat(&info, json)) {
		kvs_segment_unref(seg);
		cli_error("stat", NULL, "out of memory");
		return EXIT_SYSTEM;
	}
	kvs_segment_unref(seg);
	return cli_flush_stdout("stat");
}
