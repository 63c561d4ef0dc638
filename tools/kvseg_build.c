/*
 * kvseg_build.c — kvseg build: records from stdin to a new segment.
 *
 * The writer needs keys in strictly increasing order, and input often is
 * not, so the records are held in memory (pointers into the input chunks,
 * kvseg_input.c), sorted only when they are out of order, and checked for
 * repeated keys before the first one is written. Sorting is by key and
 * then by input position, which makes it stable: among equal keys the
 * later input record comes last, which is the one --last-wins keeps. Every
 * record is checked against the segment's mode before writing, so that
 * bad input is named by its line and leaves nothing behind. An input
 * larger than --memory is sorted in runs that are merged at the end (see
 * "runs" below).
 */
#include "kvseg_cli.h"

#include <errno.h>
#include <fcntl.h>
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
	OPT_MEMORY,
};

static const struct cli_option build_options[] = {
    {"profile", true, OPT_PROFILE},
    {"framing", true, OPT_FRAMING},
    {"restart", true, OPT_RESTART},
    {"input", true, OPT_INPUT},
    {"last-wins", false, OPT_LAST_WINS},
    {"sequence", true, OPT_SEQUENCE},
    {"codes", true, OPT_CODES},
    {"memory", true, OPT_MEMORY},
    {NULL, false, 0},
};

struct build_config {
	kvs_writer_options writer;
	enum input_format format;
	bool last_wins;
	const char *out;
	uint64_t memory; /* bytes for a run's input and records */
};

#define NAME_MAX_SHOWN 160 /* bytes of OUT's name in a run's name */
#define DEFAULT_MEMORY ((uint64_t)256 << 20)
#define MIN_MEMORY     ((uint64_t)1 << 10)

/* "--memory 64M": bytes, with an optional K, M or G (powers of 1024). */
static bool parse_memory(const char *text, uint64_t *out)
{
	size_t n = strlen(text);
	unsigned shift = 0;
	char digits[32];
	uint64_t v;

	if (n && strchr("kKmMgG", text[n - 1])) {
		char c = text[n - 1];

		shift = c == 'k' || c == 'K'   ? 10
		        : c == 'm' || c == 'M' ? 20
		                               : 30;
		n--;
	}
	if (n == 0 || n >= sizeof digits || strspn(text, "0123456789") != n) {
		cli_usage("build",
		          "--memory: '%s' is not a size (BYTES, or a number "
		          "with K, M or G)",
		          text);
		return false;
	}
	memcpy(digits, text, n);
	digits[n] = '\0';
	if (!cli_parse_u64("build", "--memory", digits, 0, UINT64_MAX >> shift,
	                   &v))
		return false;
	v <<= shift;
	if (v < MIN_MEMORY) {
		cli_usage("build", "--memory: '%s' is below the minimum, 1K",
		          text);
		return false;
	}
	*out = v;
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
			if (!cli_parse_profile("build", val,
			                       &cfg->writer.profile))
				return EXIT_USAGE;
			break;
		case OPT_FRAMING:
			if (!cli_parse_framing("build", val,
			                       &cfg->writer.framing))
				return EXIT_USAGE;
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
		case OPT_MEMORY:
			if (!parse_memory(val, &cfg->memory))
				return EXIT_USAGE;
			break;
		case OPT_CODES:
			if (!cli_parse_codes("build", val, cfg->writer.codes))
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
                         const char *path, const struct record_list *list)
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
			return cli_error_kvs("build", path, st, &err, where);
		}
	}
	if (kvs_writer_finish(w, &err) != KVS_OK)
		return cli_error_kvs("build", path, err.status, &err, "");
	return EXIT_OK;
}

/* ---- runs: inputs larger than --memory --------------------------------- */

/*
 * When the records do not fit in the memory bound, each bufferful is
 * sorted and written as a run: a temporary segment next to OUT, hidden
 * (".OUT.run-PID-N") and unsynced, since it only lives until the end of
 * the build. The runs are then merged into OUT, oldest first, so that a
 * later record of a key wins as --last-wins wants. Without --last-wins a
 * key repeated inside one run is caught before the run is written, with
 * its lines; one repeated across runs shows as a replacement in the
 * merge's statistics, so that merge writes to a hidden name first and
 * OUT appears only if nothing was replaced.
 */
struct runs {
	char **paths;
	size_t count;
	size_t cap;
	char *dir;  /* OUT's directory */
	char *base; /* OUT's file name */
};

static int runs_init(struct runs *runs, const char *out)
{
	const char *slash = strrchr(out, '/');

	if (slash) {
		runs->dir =
		    strndup(out, slash == out ? 1 : (size_t)(slash - out));
		runs->base = strdup(slash + 1);
	} else {
		runs->dir = strdup(".");
		runs->base = strdup(out);
	}
	if (!runs->dir || !runs->base) {
		cli_error("build", NULL, "out of memory");
		return EXIT_SYSTEM;
	}
	cli_fault_remove(&runs->paths, &runs->count);
	return EXIT_OK;
}

/* A hidden name next to OUT: ".OUT.WHAT-PID-N". */
static char *runs_name(const struct runs *runs, const char *what, size_t n)
{
	char name[64 + NAME_MAX_SHOWN];
	int len = snprintf(name, sizeof name, ".%.*s.%s-%ld-%zu",
	                   NAME_MAX_SHOWN, runs->base, what, (long)getpid(), n);

	if (len < 0 || (size_t)len >= sizeof name)
		return NULL;
	return cli_path_join(runs->dir, name);
}

/* Adds path to the files a fault, an interrupt or runs_free removes. */
static bool runs_add(struct runs *runs, char *path)
{
	sigset_t held; /* an interrupt's handler reads the list */
	cli_fault_hold(&held);
	if (runs->count == runs->cap) {
		size_t cap = runs->cap ? runs->cap * 2 : 16;
		char **paths = realloc(runs->paths, cap * sizeof *paths);

		if (!paths) {
			cli_fault_release(&held);
			return false;
		}
		runs->paths = paths;
		runs->cap = cap;
	}
	runs->paths[runs->count++] = path;
	cli_fault_release(&held);
	return true;
}

/* Removes every run file, whatever became of the build. */
static void runs_free(struct runs *runs)
{
	sigset_t held; /* none is left to an interrupt meanwhile */
	cli_fault_hold(&held);
	for (size_t i = 0; i < runs->count; i++)
		unlink(runs->paths[i]);
	cli_fault_remove(NULL, NULL);
	cli_fault_release(&held);
	for (size_t i = 0; i < runs->count; i++)
		free(runs->paths[i]);
	free(runs->paths);
	free(runs->dir);
	free(runs->base);
	memset(runs, 0, sizeof *runs);
}

/* Sorts and checks the records read so far and writes them as a run. */
static int write_run(const struct build_config *cfg, struct runs *runs,
                     struct record_list *list)
{
	kvs_writer_options opt = {0};
	kvs_writer *w = NULL;
	kvs_error err = {0};
	char *path;
	int rc;

	rc = check_records(cfg, list);
	if (!rc)
		rc = order_records(cfg, list);
	if (rc)
		return rc;
	path = runs_name(runs, "run", runs->count);
	if (!path || !runs_add(runs, path)) {
		free(path);
		goto nomem;
	}
	opt.profile = cfg->writer.profile;
	opt.framing = cfg->writer.framing;
	opt.sequence = runs->count;
	opt.flags = KVS_WRITER_NO_SYNC;
	if (kvs_writer_open(&w, path, &opt, &err) != KVS_OK)
		return cli_error_kvs("build", path, err.status, &err, "");
	rc = write_records(cfg, w, path, list);
	kvs_writer_free(w);
	return rc;
nomem:
	cli_error("build", NULL, "out of memory");
	return EXIT_SYSTEM;
}

/* After a merge replaced a record: finds a key that two runs hold. */
static int report_repeated_key(const struct build_config *cfg,
                               kvs_segment *const *segs, size_t n)
{
	kvs_cursor **cur = calloc(n, sizeof *cur);
	struct strbuf shown = {0};
	kvs_status st = cur ? KVS_OK : KVS_E_NOMEM;
	bool found = false;

	for (size_t i = 0; st == KVS_OK && i < n; i++) {
		st = kvs_cursor_open(&cur[i], segs[i]);
		if (st == KVS_OK)
			st = kvs_cursor_first(cur[i]);
	}
	while (st == KVS_OK && !found) {
		const uint8_t *min = NULL;
		uint64_t min_bits = 0;
		size_t at = 0;

		for (size_t i = 0; i < n; i++) {
			uint64_t bits;
			const uint8_t *key;
			int c;

			if (!kvs_cursor_valid(cur[i]))
				continue;
			key = kvs_cursor_key(cur[i], &bits);
			c = min ? kvs_key_compare(key, bits, min, min_bits)
			        : -1;
			if (c == 0) {
				found = text_encode(&shown, key, bits);
				st = found ? KVS_OK : KVS_E_NOMEM;
				break;
			}
			if (c < 0) {
				min = key;
				min_bits = bits;
				at = i;
			}
		}
		if (!min || found || st != KVS_OK)
			break;
		st = kvs_cursor_next(cur[at]);
	}
	for (size_t i = 0; cur && i < n; i++)
		kvs_cursor_close(cur[i]);
	free(cur);
	if (found)
		cli_error("build", "stdin",
		          "the key '%.*s%s' is given more than once (in "
		          "different --memory runs, so its %ss are not known; "
		          "--last-wins keeps the later one)",
		          (int)(shown.len > 64 ? 64 : shown.len),
		          (const char *)shown.data, shown.len > 64 ? "..." : "",
		          input_unit(cfg->format));
	else
		cli_error("build", "stdin",
		          "a key is given more than once (--last-wins keeps "
		          "the later one)");
	sb_free(&shown);
	return EXIT_DATA;
}

/* Makes a file's new name durable. */
static int sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	int rc = fd < 0 ? -1 : fsync(fd);

	if (fd >= 0)
		close(fd);
	return rc;
}

/* Merges the runs into OUT; returns 0 or an exit code after reporting. */
static int merge_runs(const struct build_config *cfg, struct runs *runs)
{
	size_t n = runs->count; /* the runs: staging joins the list below */
	kvs_segment **segs = calloc(n, sizeof *segs);
	kvs_merge_options opt = {0};
	kvs_merge_stats stats;
	kvs_error err = {0};
	const char *staging = NULL;
	const char *target = cfg->out;
	int rc = EXIT_OK;

	if (!segs) {
		cli_error("build", NULL, "out of memory");
		return EXIT_SYSTEM;
	}
	for (size_t i = 0; i < n && !rc; i++)
		rc = open_segment("build", runs->paths[i], &segs[i]);
	if (rc)
		goto out;
	if (!cfg->last_wins) {
		/* in the list, so that an interrupt removes it too */
		char *name = runs_name(runs, "merge", 0);
		if (!name || !runs_add(runs, name)) {
			free(name);
			cli_error("build", NULL, "out of memory");
			rc = EXIT_SYSTEM;
			goto out;
		}
		staging = target = name;
	}
	opt.output = cfg->writer;
	opt.includes_oldest = true;
	if (kvs_merge(segs, n, target, &opt, &stats, &err) != KVS_OK) {
		rc = merge_failure("build", (const char *const *)runs->paths,
		                   n, target, err.status, &err);
		goto out;
	}
	if (staging && stats.replaced) {
		unlink(staging);
		rc = report_repeated_key(cfg, segs, n);
	} else if (staging && rename(staging, cfg->out) != 0) {
		cli_error("build", cfg->out, "%s", strerror(errno));
		unlink(staging);
		rc = EXIT_SYSTEM;
	} else if (staging && sync_dir(runs->dir) != 0) {
		cli_error("build", runs->dir, "fsync: %s", strerror(errno));
		rc = EXIT_SYSTEM;
	}
out:
	for (size_t i = 0; i < n; i++)
		kvs_segment_unref(segs[i]);
	free(segs);
	return rc;
}

/* ---- the verb ---------------------------------------------------------- */

/* Bytes of input per chunk: a quarter of the memory bound, in reason. */
static size_t chunk_size_for(uint64_t memory)
{
	uint64_t size = memory / 4;

	if (size < ((uint64_t)4 << 10))
		size = (uint64_t)4 << 10;
	if (size > ((uint64_t)16 << 20))
		size = (uint64_t)16 << 20;
	return (size_t)size;
}

/* Memory held for the current run, counting the next chunk if one is due. */
static uint64_t run_memory(const struct input_reader *rd,
                           const struct record_list *list)
{
	uint64_t used = rd->held + (uint64_t)list->cap * sizeof *list->items;

	if (input_needs_chunk(rd))
		used += rd->chunk_size;
	return used;
}

int cmd_build(int argc, char **argv)
{
	struct build_config cfg = {0};
	struct record_list list = {0};
	struct input_reader rd;
	struct runs runs = {0};
	kvs_writer *w = NULL;
	kvs_error err = {0};
	int rc;

	cfg.writer.profile = KVS_PROFILE_BYTE;
	cfg.writer.framing = KVS_FRAMING_TYPED;
	cfg.format = INPUT_TSV;
	cfg.memory = DEFAULT_MEMORY;
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
	rc = cli_refuse_directory_output("build", cfg.out);
	if (!rc)
		rc =
		    cli_refuse_input_as_output("build", cfg.out, NULL, 0, true);
	if (rc)
		return rc;
	/* Open first: a bad OUT fails before stdin is read. */
	if (kvs_writer_open(&w, cfg.out, &cfg.writer, &err) != KVS_OK) {
		rc = cli_error_kvs("build", cfg.out, err.status, &err, "");
		return rc == EXIT_SYSTEM ? rc : EXIT_USAGE;
	}
	input_reader_init(&rd, STDIN_FILENO, cfg.format,
	                  chunk_size_for(cfg.memory));
	rc = runs_init(&runs, cfg.out);
	while (!rc && !rd.eof) {
		rc = input_read(&rd, &list);
		if (rc || rd.eof || !list.count ||
		    run_memory(&rd, &list) <= cfg.memory)
			continue;
		rc = write_run(&cfg, &runs, &list);
		list.count = 0;
		if (!rc)
			rc = input_release(&rd);
	}
	if (!rc && runs.count == 0) {
		/* Everything fitted: straight into OUT. */
		rc = check_records(&cfg, &list);
		if (!rc)
			rc = order_records(&cfg, &list);
		if (!rc)
			rc = write_records(&cfg, w, cfg.out, &list);
	} else if (!rc) {
		if (list.count)
			rc = write_run(&cfg, &runs, &list);
		input_reader_free(&rd);
		kvs_writer_free(w);
		w = NULL;
		if (!rc)
			rc = merge_runs(&cfg, &runs);
	}
	kvs_writer_free(w);
	input_reader_free(&rd);
	runs_free(&runs);
	free(list.items);
	return rc;
}
