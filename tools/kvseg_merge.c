/*
 * kvseg_merge.c — kvseg merge: N segments into one through kvs_merge, and
 * what catalog merge shares with it (options, defaults, progress, errors).
 *
 * Options left out take their values from the inputs by the rule that
 * kvseg catalog merge and segfs share (kvs_merge_plan_mode): the smallest
 * mode that holds every input, the newest input's restart interval, the
 * newest bit-profile input's codes; and a sequence one above the
 * highest input's, which makes the output newer than everything it
 * replaces.
 *
 * The progress bar is for people: it appears only when stderr is a
 * terminal, is redrawn at most ten times a second, and is erased before
 * anything else is printed.
 */
#include "kvseg_cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int merge_option(const char *verb, struct merge_config *cfg, int id,
                 const char *value)
{
	uint64_t n;

	switch (id) {
	case MERGE_OPT_PROFILE:
		if (!cli_parse_profile(verb, value, &cfg->output.profile))
			return EXIT_USAGE;
		cfg->profile_set = true;
		break;
	case MERGE_OPT_FRAMING:
		if (!cli_parse_framing(verb, value, &cfg->output.framing))
			return EXIT_USAGE;
		cfg->framing_set = true;
		break;
	case MERGE_OPT_RESTART:
		if (!cli_parse_u64(verb, "--restart", value, 1,
		                   KVS_MAX_RESTART_INTERVAL, &n))
			return EXIT_USAGE;
		cfg->output.restart_interval = (uint32_t)n;
		cfg->restart_set = true;
		break;
	case MERGE_OPT_SEQUENCE:
		if (!cli_parse_u64(verb, "--sequence", value, 0, UINT64_MAX,
		                   &n))
			return EXIT_USAGE;
		cfg->output.sequence = n;
		cfg->sequence_set = true;
		break;
	case MERGE_OPT_CODES:
		if (!cli_parse_codes(verb, value, cfg->output.codes))
			return EXIT_USAGE;
		cfg->codes_set = true;
		break;
	case MERGE_OPT_DROP_TOMBSTONES:
		cfg->drop_tombstones = true;
		break;
	case MERGE_OPT_QUIET:
		cfg->quiet = true;
		break;
	}
	return EXIT_OK;
}

void merge_request_of(const struct merge_config *cfg, kvs_merge_request *req)
{
	memset(req, 0, sizeof *req);
	req->profile_set = cfg->profile_set;
	req->profile = cfg->output.profile;
	req->framing_set = cfg->framing_set;
	req->framing = cfg->output.framing;
	req->restart_set = cfg->restart_set;
	req->restart_interval = cfg->output.restart_interval;
	req->codes_set = cfg->codes_set;
	memcpy(req->codes, cfg->output.codes, sizeof req->codes);
	req->sequence_set = cfg->sequence_set;
	req->sequence = cfg->output.sequence;
	req->drop_tombstones = cfg->drop_tombstones;
}

int merge_raw_tombstones(const char *verb, const char *path, uint64_t count)
{
	cli_error(verb, path,
	          "holds %llu tombstone%s, but raw framing has none (keep "
	          "typed framing, or drop them with --drop-tombstones)",
	          (unsigned long long)count, count == 1 ? "" : "s");
	return EXIT_DATA;
}

int merge_prepare(const char *verb, kvs_segment *const *inputs,
                  const char *const *names, size_t n, struct merge_config *cfg)
{
	kvs_segment_info *infos = calloc(n, sizeof *infos);
	const kvs_segment_info **in = calloc(n, sizeof *in);
	kvs_merge_request req;
	uint64_t tombstones = 0, max_sequence = 0;
	size_t holder = 0;
	int rc = EXIT_OK;

	if (!infos || !in) {
		cli_error(verb, NULL, "out of memory");
		rc = EXIT_SYSTEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		kvs_segment_info_get(inputs[i], &infos[i]);
		in[i] = &infos[i];
		if (infos[i].tombstones && !tombstones)
			holder = i;
		tombstones += infos[i].tombstones;
		if (infos[i].sequence > max_sequence)
			max_sequence = infos[i].sequence;
	}
	if (cfg->drop_tombstones && !cfg->includes_oldest) {
		rc = cli_usage(verb, "--drop-tombstones needs --includes-oldest "
		                     "(older segments could still hold the "
		                     "deleted keys)");
		goto out;
	}
	if (cfg->drop_tombstones)
		tombstones = 0; /* none remain */
	/* the output's mode by the one rule kvseg catalog merge and segfs
	 * share (kvseg/merge_plan.h) */
	merge_request_of(cfg, &req);
	kvs_merge_plan_mode(in, n, &req, &cfg->output);
	if (cfg->codes_set && cfg->output.profile != KVS_PROFILE_BIT) {
		rc = cli_usage(verb, "--codes needs a bit-profile output "
		                     "(--profile bit)");
		goto out;
	}
	if (!cfg->sequence_set) {
		if (max_sequence == UINT64_MAX) {
			rc = cli_usage(verb, "an input has the highest sequence "
			                     "number, 2^64-1: give --sequence");
			goto out;
		}
		cfg->output.sequence = max_sequence + 1;
	}
	if (cfg->output.framing == KVS_FRAMING_RAW && tombstones)
		rc = merge_raw_tombstones(verb, names[holder],
		                          infos[holder].tombstones);
out:
	free(infos);
	free(in);
	return rc;
}

/* ---- progress ---------------------------------------------------------- */

#define BAR_WIDTH 24

struct progress {
	struct timespec start, last;
	uint64_t input_bytes; /* all inputs' file sizes */
	bool drawn;
};

static double seconds_since(const struct timespec *t)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t->tv_sec) +
	       (double)(now.tv_nsec - t->tv_nsec) / 1e9;
}

static void format_duration(char out[32], double s)
{
	unsigned long t = s < 0 ? 0 : (unsigned long)(s + 0.5);

	if (t >= 3600)
		snprintf(out, 32, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60,
		         t % 60);
	else
		snprintf(out, 32, "%lu:%02lu", t / 60, t % 60);
}

/*
 * "merge [#######.........]  38%  1200000/3141592 records  212.4 MB/s
 * 0:07 left". MB/s counts input bytes, estimated from the share of
 * records done (the records of a merge are of similar size).
 */
static int draw_progress(void *ctx, uint64_t done, uint64_t total)
{
	struct progress *p = ctx;
	double elapsed, share, rate;
	char bar[BAR_WIDTH + 1], left[32];
	int filled;

	if (p->drawn && done < total && seconds_since(&p->last) < 0.1)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &p->last);
	elapsed = seconds_since(&p->start);
	share = total ? (double)done / (double)total : 1.0;
	filled = (int)(share * BAR_WIDTH);
	for (int i = 0; i < BAR_WIDTH; i++)
		bar[i] = i < filled ? '#' : '.';
	bar[BAR_WIDTH] = '\0';
	rate = elapsed > 0 ? share * (double)p->input_bytes / 1e6 / elapsed : 0;
	if (done == 0 || elapsed <= 0)
		snprintf(left, sizeof left, "-:--");
	else
		format_duration(left, elapsed * (double)(total - done) /
		                          (double)done);
	fprintf(stderr,
	        "\rmerge [%s] %3d%%  %llu/%llu records  %.1f MB/s  %s "
	        "left\033[K",
	        bar, (int)(share * 100), (unsigned long long)done,
	        (unsigned long long)total, rate, left);
	fflush(stderr);
	p->drawn = true;
	return 0;
}

int merge_failure(const char *verb, const char *const *names, size_t n,
                  const char *out, kvs_status st, const kvs_error *err)
{
	const char *msg = err->message;
	size_t out_len = strlen(out);

	if (msg[0] == '\0') {
		cli_error(verb, out, "%s", kvs_strerror(st));
	} else if (strncmp(msg, "input ", 6) == 0 && msg[6] >= '0' &&
	           msg[6] <= '9') {
		/* "input I: record R: ...": name input I by its path. */
		char *end;
		unsigned long i = strtoul(msg + 6, &end, 10);

		if (i < n && end[0] == ':' && end[1] == ' ')
			cli_error(verb, names[i], "%s", end + 2);
		else
			cli_error(verb, out, "%s", msg);
	} else if (strncmp(msg, out, out_len) == 0 && msg[out_len] == ':' &&
	           msg[out_len + 1] == ' ') {
		cli_error(verb, out, "%s", msg + out_len + 2);
	} else {
		cli_error(verb, out, "%s", msg);
	}
	return exit_for_status(st);
}

kvs_status merge_exec(kvs_segment *const *inputs, size_t n, const char *out,
                      const struct merge_config *cfg, kvs_merge_stats *stats,
                      kvs_error *err)
{
	kvs_merge_options opt = {0};
	struct progress progress = {0};
	kvs_status st;

	opt.output = cfg->output;
	opt.drop_tombstones = cfg->drop_tombstones;
	opt.includes_oldest = cfg->includes_oldest;
	if (!cfg->quiet && isatty(STDERR_FILENO)) {
		for (size_t i = 0; i < n; i++) {
			kvs_segment_info info;

			kvs_segment_info_get(inputs[i], &info);
			progress.input_bytes += info.file_bytes;
		}
		clock_gettime(CLOCK_MONOTONIC, &progress.start);
		opt.progress = draw_progress;
		opt.progress_ctx = &progress;
	}
	st = kvs_merge(inputs, n, out, &opt, stats, err);
	if (progress.drawn) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	return st;
}

int merge_run(const char *verb, kvs_segment *const *inputs,
              const char *const *names, size_t n, const char *out,
              const struct merge_config *cfg, kvs_merge_stats *stats)
{
	kvs_error err = {0};
	kvs_status st = merge_exec(inputs, n, out, cfg, stats, &err);

	if (st != KVS_OK)
		return merge_failure(verb, names, n, out, st, &err);
	return EXIT_OK;
}

void merge_print_summary(size_t inputs, const char *out,
                         const kvs_merge_stats *stats)
{
	printf("merged %zu segment%s into %s: %llu records in, %llu out, "
	       "%llu replaced, %llu tombstones dropped\n",
	       inputs, inputs == 1 ? "" : "s", out,
	       (unsigned long long)stats->input_records,
	       (unsigned long long)stats->output_records,
	       (unsigned long long)stats->replaced,
	       (unsigned long long)stats->dropped);
}

/* ---- the verb ---------------------------------------------------------- */

enum { OPT_INCLUDES_OLDEST = 1, OPT_OUTPUT, OPT_FORCE };

static const struct cli_option merge_options[] = {
    MERGE_CLI_OPTIONS,
    {"includes-oldest", false, OPT_INCLUDES_OLDEST},
    {"output", true, OPT_OUTPUT},
    {"-o", true, OPT_OUTPUT},
    {"force", false, OPT_FORCE},
    {NULL, false, 0},
};

int cmd_merge(int argc, char **argv)
{
	struct merge_config cfg = {0};
	struct cli_args args;
	kvs_merge_stats stats;
	kvs_segment **segs = NULL;
	const char **names = NULL, *out = NULL, *val;
	size_t n = 0;
	int id, rc = EXIT_OK;
	bool force = false;

	names = calloc((size_t)argc, sizeof *names);
	if (!names) {
		cli_error("merge", NULL, "out of memory");
		return EXIT_SYSTEM;
	}
	cli_args_init(&args, "merge", argc, argv);
	while (!rc &&
	       (id = cli_args_next(&args, merge_options, &val)) != ARG_END) {
		if (id == ARG_ERROR)
			rc = EXIT_USAGE;
		else if (id == ARG_HELP)
			rc = -1;
		else if (id == OPT_INCLUDES_OLDEST)
			cfg.includes_oldest = true;
		else if (id == OPT_FORCE)
			force = true;
		else if (id == OPT_OUTPUT && out)
			rc = cli_usage("merge", "one output file only ('%s')",
			               val);
		else if (id == OPT_OUTPUT)
			out = val;
		else if (id != ARG_OPERAND)
			rc = merge_option("merge", &cfg, id, val);
		else
			names[n++] = val;
	}
	if (rc < 0) {
		rc = cli_help("merge");
		goto done;
	}
	/* Every operand is an input: an output given as the first operand,
	 * as merge once took it, would replace a segment meant as input. */
	if (!rc && !out)
		rc = cli_usage("merge", "no output file given (-o OUT)");
	else if (!rc && n == 0)
		rc = cli_usage("merge", "no input segment given");
	if (!rc)
		rc = cli_refuse_directory_output("merge", out);
	if (!rc)
		rc = cli_refuse_input_as_output("merge", out,
		                                (const char *const *)names, n,
		                                false);
	if (!rc)
		rc = cli_refuse_stdout_input("merge",
		                             (const char *const *)names, n);
	if (!rc && !force && access(out, F_OK) == 0)
		rc = cli_usage("merge",
		               "%s exists: --force replaces it", out);
	if (rc)
		goto done;

	segs = calloc(n, sizeof *segs);
	if (!segs) {
		cli_error("merge", NULL, "out of memory");
		rc = EXIT_SYSTEM;
		goto done;
	}
	for (size_t i = 0; i < n && !rc; i++)
		rc = open_segment("merge", names[i], &segs[i]);
	if (!rc)
		rc = merge_prepare("merge", segs, names, n, &cfg);
	if (!rc)
		rc = merge_run("merge", segs, names, n, out, &cfg, &stats);
	if (!rc && !cfg.quiet) {
		merge_print_summary(n, out, &stats);
		rc = cli_flush_stdout("merge");
	}
done:
	for (size_t i = 0; segs && i < n; i++)
		kvs_segment_unref(segs[i]);
	free(segs);
	free(names);
	return rc;
}
