/*
 * kvseg_catalog.c — kvseg catalog DIR init|list|add|merge|get|scan: the
 * catalog of a segment directory (kvseg/catalog.h) from the command line;
 * get and scan read the live segments' merged view (kvseg/view.h), each
 * key's newest binding, through get's and scan's printing (kvseg_read.c).
 *
 * A catalog names files of its own directory only, so a SEG argument is a
 * name in DIR, or a path whose directory is DIR (the same directory,
 * compared by device and inode, however it is spelled).
 *
 * merge is optimistic: it reads the generation, merges without holding
 * any lock, and publishes with kvs_catalog_replace() only if the catalog
 * is still at that generation; otherwise the merged file is removed and
 * nothing changed. The output takes the first free name, which the writer
 * gives it with link(2) (see publish_in_catalog): should another process
 * create that name meanwhile, its file stays and this merge fails having
 * changed nothing. Until the catalog names the output, the writer's
 * locked temporary file names it too, so a merge killed at any instant
 * leaves nothing that recovery keeps. Its sequence
 * is by default the newest input's: the merged segment takes the newest
 * input's place in age order, and keeping sequences in that order keeps
 * the order a catalog rebuilt from the files (by sequence) would give.
 */
#include "kvseg_cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvseg/catalog.h"

enum { OPT_JSON = 1, OPT_PREFIX, OPT_TOMBSTONES };

static const struct cli_option catalog_options[] = {
    MERGE_CLI_OPTIONS,
    {"json", false, OPT_JSON},
    {"prefix", true, OPT_PREFIX},
    {"tombstones", false, OPT_TOMBSTONES},
    {NULL, false, 0},
};

struct catalog_args {
	const char *dir;
	const char *action;
	const char **operands; /* after DIR and the action */
	size_t count;
	bool json;
	struct key_arg prefix; /* scan --prefix */
	bool tombstones;       /* scan --tombstones */
	bool merge_options;    /* any merge option other than --quiet */
	struct merge_config merge;
};

/* Reports a libkvseg error about dir, whose messages start with DIR or
 * DIR/NAME. */
static int catalog_failure(const char *dir, kvs_status st, const kvs_error *err)
{
	size_t n = strlen(dir);

	if (err->message[0] != '\0' && strncmp(err->message, dir, n) == 0 &&
	    err->message[n] == '/') {
		cli_error("catalog", NULL, "%s", err->message);
		return exit_for_status(st);
	}
	return cli_error_kvs("catalog", dir, st, err, "");
}

/* flags: kvs_catalog_open_flags's (list reads a read-only directory) */
static int open_catalog(const char *dir, unsigned flags, kvs_catalog **out)
{
	kvs_error err = {0};
	kvs_status st = kvs_catalog_open_flags(out, dir, flags, &err);

	if (st == KVS_OK)
		return EXIT_OK;
	*out = NULL;
	return catalog_failure(dir, st, &err);
}

/*
 * The file name in dir that arg stands for: arg itself if it has no '/',
 * else its last component, if the directory before it is dir.
 */
static int resolve_name(const char *dir, const char *arg,
                        char name[KVS_CATALOG_MAX_NAME + 1])
{
	const char *slash = strrchr(arg, '/'), *base = slash ? slash + 1 : arg;
	size_t len = strlen(base);

	if (slash) {
		struct stat in_dir, in_arg;
		char *parent =
		    strndup(arg, slash == arg ? 1 : (size_t)(slash - arg));

		if (!parent) {
			cli_error("catalog", NULL, "out of memory");
			return EXIT_SYSTEM;
		}
		if (stat(parent, &in_arg) != 0) {
			cli_error("catalog", parent, "%s", strerror(errno));
			free(parent);
			return EXIT_SYSTEM;
		}
		free(parent);
		if (stat(dir, &in_dir) != 0) {
			cli_error("catalog", dir, "%s", strerror(errno));
			return EXIT_SYSTEM;
		}
		if (in_dir.st_dev != in_arg.st_dev ||
		    in_dir.st_ino != in_arg.st_ino)
			return cli_usage("catalog",
			                 "'%s' is not in %s (a catalog names "
			                 "files of its own directory only)",
			                 arg, dir);
	}
	if (len == 0 || len > KVS_CATALOG_MAX_NAME || base[0] == '.' ||
	    strcmp(base, KVS_CATALOG_FILE) == 0)
		return cli_usage("catalog",
		                 "'%s' is not a segment file name (1 to %d "
		                 "bytes, not starting with '.', not %s)",
		                 arg, KVS_CATALOG_MAX_NAME, KVS_CATALOG_FILE);
	memcpy(name, base, len + 1);
	return EXIT_OK;
}

static int print_generation(const kvs_catalog *c)
{
	printf("generation %llu\n",
	       (unsigned long long)kvs_catalog_generation(c));
	return cli_flush_stdout("catalog");
}

/* ---- init, list, add --------------------------------------------------- */

static int catalog_init(const struct catalog_args *a)
{
	kvs_catalog *c;
	int rc = open_catalog(a->dir, 0, &c);

	if (rc)
		return rc;
	if (!a->merge.quiet)
		rc = print_generation(c);
	kvs_catalog_close(c);
	return rc;
}

static bool list_entry(struct strbuf *sb, struct json_writer *w,
                       const kvs_catalog_entry *e, uint64_t records)
{
	size_t len = strlen(e->name);
	char numbers[96];

	if (w) {
		json_open(w, '{');
		json_member_bytes(w, "name", (const uint8_t *)e->name,
		                  (uint64_t)len * 8);
		json_member_u64(w, "sequence", e->sequence);
		json_member_u64(w, "records", records);
		json_member_u64(w, "size", e->size);
		json_close(w, '}');
		return w->ok;
	}
	snprintf(numbers, sizeof numbers, "\t%llu\t%llu\t%llu\n",
	         (unsigned long long)e->sequence, (unsigned long long)records,
	         (unsigned long long)e->size);
	return text_encode(sb, (const uint8_t *)e->name, (uint64_t)len * 8) &&
	       sb_append(sb, numbers, strlen(numbers));
}

static int catalog_list(const struct catalog_args *a)
{
	struct strbuf sb = {0};
	struct json_writer jw, *w = NULL;
	kvs_catalog *c;
	char head[64];
	int rc = open_catalog(a->dir, KVS_CATALOG_MAY_READ_ONLY, &c);
	bool ok = true;

	if (rc)
		return rc;
	if (a->json) {
		w = &jw;
		json_writer_init(w, &sb);
		json_open(w, '{');
		json_member_u64(w, "generation", kvs_catalog_generation(c));
		json_name(w, "segments");
		json_open(w, '[');
		ok = w->ok;
	} else {
		snprintf(head, sizeof head, "generation %llu\n",
		         (unsigned long long)kvs_catalog_generation(c));
		ok = sb_append(&sb, head, strlen(head));
	}
	for (size_t i = 0; ok && i < kvs_catalog_count(c); i++) {
		const kvs_catalog_entry *e = kvs_catalog_entry_at(c, i);
		char *path = cli_path_join(a->dir, e->name);
		kvs_segment *seg = NULL;
		kvs_segment_info info;

		if (!path) {
			ok = false;
			break;
		}
		rc = open_catalog_segment("catalog", c, i, path, &seg);
		free(path);
		if (rc)
			goto out;
		kvs_segment_info_get(seg, &info);
		kvs_segment_unref(seg);
		ok = list_entry(&sb, w, e, info.records);
	}
	if (ok && w) {
		json_close(w, ']');
		json_close(w, '}');
		ok = w->ok && sb_putc(&sb, '\n');
	}
	if (!ok) {
		cli_error("catalog", NULL, "out of memory");
		rc = EXIT_SYSTEM;
		goto out;
	}
	fwrite(sb.data, 1, sb.len, stdout);
	rc = cli_flush_stdout("catalog");
out:
	sb_free(&sb);
	kvs_catalog_close(c);
	return rc;
}

static int catalog_add(const struct catalog_args *a)
{
	char(*names)[KVS_CATALOG_MAX_NAME + 1];
	kvs_catalog *c = NULL;
	int rc = EXIT_OK;

	if (a->count == 0)
		return cli_usage("catalog", "add: no segment given");
	names = calloc(a->count, sizeof *names);
	if (!names) {
		cli_error("catalog", NULL, "out of memory");
		return EXIT_SYSTEM;
	}
	/* Every argument is checked before the catalog changes. */
	for (size_t i = 0; i < a->count && !rc; i++)
		rc = resolve_name(a->dir, a->operands[i], names[i]);
	if (!rc)
		rc = open_catalog(a->dir, 0, &c);
	for (size_t i = 0; i < a->count && !rc; i++) {
		kvs_error err = {0};
		kvs_status st = kvs_catalog_add(c, names[i], &err);

		if (st != KVS_OK)
			rc = catalog_failure(a->dir, st, &err);
	}
	if (!rc && !a->merge.quiet)
		rc = print_generation(c);
	kvs_catalog_close(c);
	free(names);
	return rc;
}

/* ---- get, scan: the live segments' merged view -------------------------- */

/*
 * The view of DIR's live segments (kvseg/view.h), read-only: nothing is
 * created or removed in DIR (KVS_CATALOG_READ_ONLY), whoever may write it.
 * *byte_keys: every live segment has the byte profile.
 */
static int open_catalog_view(const char *dir, unsigned flags, kvs_view **v,
                             bool *byte_keys)
{
	kvs_catalog *c;
	kvs_segment **segs = NULL;
	size_t n = 0;
	kvs_status st;
	int rc = open_catalog(dir, KVS_CATALOG_READ_ONLY, &c);

	if (rc)
		return rc;
	*byte_keys = true;
	segs = calloc(kvs_catalog_count(c) + 1, sizeof *segs);
	if (!segs) {
		cli_error("catalog", NULL, "out of memory");
		rc = EXIT_SYSTEM;
	}
	for (; !rc && n < kvs_catalog_count(c); n++) {
		char *path =
		    cli_path_join(dir, kvs_catalog_entry_at(c, n)->name);
		kvs_segment_info info;

		if (!path) {
			cli_error("catalog", NULL, "out of memory");
			rc = EXIT_SYSTEM;
			break;
		}
		rc = open_catalog_segment("catalog", c, n, path, &segs[n]);
		free(path);
		if (rc)
			break;
		kvs_segment_info_get(segs[n], &info);
		*byte_keys = *byte_keys && info.profile == KVS_PROFILE_BYTE;
	}
	if (!rc) {
		st = kvs_view_open(v, segs, n, flags);
		if (st != KVS_OK)
			rc = cursor_failure("catalog", dir, st);
	}
	/* the view's cursors hold the segments */
	for (size_t i = 0; i < n; i++)
		kvs_segment_unref(segs[i]);
	free(segs);
	kvs_catalog_close(c);
	return rc;
}

static int catalog_get(const struct catalog_args *a)
{
	struct key_arg *keys;
	kvs_view *v = NULL;
	bool byte_keys;
	int rc = EXIT_OK;

	if (a->count == 0)
		return cli_usage("catalog", "get: no key given");
	keys = calloc(a->count, sizeof *keys);
	if (!keys) {
		cli_error("catalog", NULL, "out of memory");
		return EXIT_SYSTEM;
	}
	/* every KEY is checked before DIR is read */
	for (size_t i = 0; i < a->count && !rc; i++)
		if (!decode_key_arg("catalog", "KEY", a->operands[i], &keys[i]))
			rc = EXIT_USAGE;
	if (!rc)
		rc = open_catalog_view(a->dir, KVS_VIEW_TOMBSTONES, &v,
		                       &byte_keys);
	if (!rc)
		rc = get_keys("catalog", a->dir, v, keys, a->operands, a->count,
		              a->merge.quiet);
	kvs_view_close(v);
	for (size_t i = 0; i < a->count; i++)
		free(keys[i].key);
	free(keys);
	return rc;
}

static int catalog_scan(const struct catalog_args *a)
{
	struct scan_filter f = {0};
	kvs_view *v = NULL;
	bool byte_keys;
	int rc;

	if (a->count)
		return cli_usage("catalog", "scan takes no operands ('%s')",
		                 a->operands[0]);
	f.prefix = a->prefix;
	f.limit = UINT64_MAX;
	f.format = OUTPUT_TSV;
	rc = open_catalog_view(a->dir, a->tombstones ? KVS_VIEW_TOMBSTONES : 0,
	                       &v, &byte_keys);
	if (!rc)
		rc = print_records("catalog", a->dir, v, byte_keys, &f);
	kvs_view_close(v);
	return rc;
}

/* ---- merge ------------------------------------------------------------- */

/* The planner's view of the catalog: its names, and the infos of the
 * inputs once they are open. */
struct catalog_snapshot {
	kvs_merge_live *live;
	kvs_segment_info *infos;
	size_t count;
	const char **names; /* the request's, resolved to names in DIR */
};

/* A taken output name: anything there, even a dangling link, or
 * whatever cannot be looked at. */
static bool name_taken(void *ctx, const char *name)
{
	char *path = cli_path_join(ctx, name);
	struct stat sb;
	bool taken = !path || lstat(path, &sb) == 0 || errno != ENOENT;

	free(path);
	return taken;
}

/* Reports a refused plan in kvseg's words; returns the exit code. */
static int plan_refused(const struct catalog_args *a,
                        const struct catalog_snapshot *snap,
                        const kvs_merge_plan *plan, const kvs_error *err)
{
	size_t at = plan->problem_at;

	switch (plan->problem) {
	case KVS_PLAN_UNKNOWN_NAME:
		return cli_usage("catalog",
		                 "merge: '%s' is not a live segment of %s (see "
		                 "kvseg catalog %s list)",
		                 a->operands[at], a->dir, a->dir);
	case KVS_PLAN_NAME_TWICE:
		return cli_usage("catalog", "merge: '%s' is given twice",
		                 a->operands[at]);
	case KVS_PLAN_NOT_CONSECUTIVE:
		return cli_usage("catalog",
		                 "merge: the segments to merge must be "
		                 "consecutive in age order, but %s lies "
		                 "between them",
		                 snap->live[at].name);
	case KVS_PLAN_DROP_NOT_OLDEST:
		return cli_usage("catalog", "--drop-tombstones needs the oldest "
		                            "live segment among the inputs");
	case KVS_PLAN_CODES_NOT_BIT:
		return cli_usage("catalog", "--codes needs a bit-profile "
		                            "output (--profile bit)");
	case KVS_PLAN_RAW_TOMBSTONES: {
		char *path = cli_path_join(a->dir, snap->live[at].name);
		int rc = merge_raw_tombstones("catalog",
		                              path ? path : snap->live[at].name,
		                              snap->infos[at].tombstones);
		free(path);
		return rc;
	}
	case KVS_PLAN_NO_FREE_NAME:
		cli_error("catalog", a->dir, "no free name seg-%llu[-N].kvs",
		          (unsigned long long)plan->options.output.sequence);
		return EXIT_SYSTEM;
	default:
		cli_error("catalog", a->dir, "%s", err->message);
		return exit_for_status(err->status);
	}
}

/* Is name live in the newest generation? When that cannot be known, yes:
 * better a stray file left behind than a live segment removed. */
static bool may_be_live(kvs_catalog *c, const char *name)
{
	return kvs_catalog_reload(c, NULL) != KVS_OK ||
	       kvs_catalog_find(c, name) >= 0;
}

/*
 * The output's publication in the catalog, as the writer's publish hook
 * (kvs_writer_options.publish): called once the output is complete and
 * linked at its name while the writer's locked temporary file still names
 * it, so that a merge killed before the catalog names the output leaves
 * nothing that recovery keeps. A failure makes the writer remove the
 * output, unless the new generation is out after all (an input could not
 * be unlinked after it): then the output stays and the failure is
 * reported once the merge has ended.
 */
struct publication {
	kvs_catalog *c;
	uint64_t generation;
	const char *const *names;
	size_t n;
	const char *out_name;
	kvs_status failed; /* the catalog's failure, KVS_OK if none */
	kvs_error err;
};

static kvs_status publish_in_catalog(void *ctx, const char *path,
                                     kvs_error *err)
{
	struct publication *p = ctx;
	kvs_status st = kvs_catalog_replace(p->c, p->generation, p->names,
	                                    p->n, p->out_name, true, &p->err);

	(void)path;
	p->failed = st;
	if (st == KVS_OK || (st != KVS_E_CONFLICT &&
	                     may_be_live(p->c, p->out_name)))
		return KVS_OK;
	*err = p->err;
	return st;
}

/* Reports the catalog's failure to publish the merge. */
static int publication_failure(const struct catalog_args *a,
                               const struct publication *p)
{
	if (p->failed == KVS_E_CONFLICT) {
		cli_error("catalog", a->dir,
		          "the catalog changed during the merge (%s); nothing "
		          "was published and %s was removed: run the merge "
		          "again",
		          p->err.message, p->out_name);
		return EXIT_DATA;
	}
	return catalog_failure(a->dir, p->failed, &p->err);
}

static int catalog_merge(struct catalog_args *a)
{
	struct merge_config *cfg = &a->merge;
	struct catalog_snapshot snap = {0};
	kvs_catalog *c = NULL;
	kvs_segment **segs = NULL;
	const char **names = NULL;
	char **paths = NULL;
	char *out_path = NULL;
	kvs_merge_request req;
	kvs_merge_plan plan;
	kvs_merge_stats stats;
	kvs_error err = {0};
	uint64_t generation;
	size_t n = 0;
	int rc = open_catalog(a->dir, 0, &c);

	if (rc)
		return rc;
	generation = kvs_catalog_generation(c);
	snap.count = kvs_catalog_count(c);
	snap.live = calloc(snap.count + 1, sizeof *snap.live);
	snap.infos = calloc(snap.count + 1, sizeof *snap.infos);
	snap.names = calloc(a->count + 1, sizeof *snap.names);
	char(*resolved)[KVS_CATALOG_MAX_NAME + 1] =
	    calloc(a->count + 1, sizeof *resolved);
	if (!snap.live || !snap.infos || !snap.names || !resolved) {
		cli_error("catalog", NULL, "out of memory");
		rc = EXIT_SYSTEM;
		goto out;
	}
	for (size_t i = 0; i < snap.count; i++)
		snap.live[i].name = kvs_catalog_entry_at(c, i)->name;
	/* the request: NAMEs resolved to names in DIR, or all */
	merge_request_of(cfg, &req);
	if (!(a->count == 1 && strcmp(a->operands[0], "all") == 0)) {
		for (size_t i = 0; i < a->count && !rc; i++) {
			rc = resolve_name(a->dir, a->operands[i], resolved[i]);
			snap.names[i] = resolved[i];
		}
		if (rc)
			goto out;
		req.names = snap.names;
		req.n_names = a->count;
	}
	/* the inputs, then open them, then the plan (kvseg/merge_plan.h) */
	if (kvs_merge_plan_select(snap.live, snap.count, &req, &plan, &err) !=
	    KVS_OK) {
		if (plan.problem == KVS_PLAN_NOTHING) {
			if (!cfg->quiet)
				printf("nothing to merge: %s has no live "
				       "segments\n",
				       a->dir);
			rc = cli_flush_stdout("catalog");
		} else {
			rc = plan_refused(a, &snap, &plan, &err);
		}
		goto out;
	}
	n = plan.n;
	segs = calloc(n, sizeof *segs);
	names = calloc(n, sizeof *names);
	paths = calloc(n, sizeof *paths);
	if (!segs || !names || !paths) {
		cli_error("catalog", NULL, "out of memory");
		rc = EXIT_SYSTEM;
		goto out;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		size_t at = plan.first + i;

		names[i] = snap.live[at].name;
		paths[i] = cli_path_join(a->dir, names[i]);
		if (!paths[i]) {
			cli_error("catalog", NULL, "out of memory");
			rc = EXIT_SYSTEM;
		} else {
			rc = open_catalog_segment("catalog", c, at, paths[i],
			                          &segs[i]);
		}
		if (!rc) {
			kvs_segment_info_get(segs[i], &snap.infos[at]);
			snap.live[at].info = &snap.infos[at];
		}
	}
	if (rc)
		goto out;
	if (kvs_merge_plan_make(snap.live, snap.count, &req, name_taken,
	                        (void *)a->dir, &plan, &err) != KVS_OK) {
		rc = plan_refused(a, &snap, &plan, &err);
		goto out;
	}
	out_path = cli_path_join(a->dir, plan.output);
	if (!out_path) {
		cli_error("catalog", NULL, "out of memory");
		rc = EXIT_SYSTEM;
		goto out;
	}
	cfg->output = plan.options.output;
	cfg->drop_tombstones = plan.options.drop_tombstones;
	cfg->includes_oldest = plan.options.includes_oldest;
	struct publication pub = {c, generation, names, n, plan.output, KVS_OK,
	                          {0}};
	cfg->output.publish = publish_in_catalog;
	cfg->output.publish_ctx = &pub;
	kvs_status st = merge_exec(segs, n, out_path, cfg, &stats, &err);
	if (pub.failed != KVS_OK)
		rc = publication_failure(a, &pub);
	else if (st != KVS_OK)
		rc = merge_failure("catalog", (const char *const *)paths, n,
		                   out_path, st, &err);
	if (!rc && !cfg->quiet) {
		merge_print_summary(n, out_path, &stats);
		rc = print_generation(c);
	}
out:
	for (size_t i = 0; i < n; i++) {
		if (segs)
			kvs_segment_unref(segs[i]);
		if (paths)
			free(paths[i]);
	}
	free(segs);
	free(names);
	free(paths);
	free(out_path);
	free(snap.live);
	free(snap.infos);
	free(snap.names);
	free(resolved);
	kvs_catalog_close(c);
	return rc;
}

/* ---- the verb ---------------------------------------------------------- */

#define ACTIONS "init, list, add, merge, get or scan"

static int parse_catalog_args(int argc, char **argv, struct catalog_args *a)
{
	struct cli_args args;
	const char *val;
	int id, rc;

	cli_args_init(&args, "catalog", argc, argv);
	while ((id = cli_args_next(&args, catalog_options, &val)) != ARG_END) {
		if (id == ARG_ERROR)
			return EXIT_USAGE;
		if (id == ARG_HELP)
			return -1;
		if (id == OPT_JSON) {
			a->json = true;
		} else if (id == OPT_PREFIX) {
			if (!decode_key_arg("catalog", "--prefix", val,
			                    &a->prefix))
				return EXIT_USAGE;
		} else if (id == OPT_TOMBSTONES) {
			a->tombstones = true;
		} else if (id != ARG_OPERAND) {
			rc = merge_option("catalog", &a->merge, id, val);
			if (rc)
				return rc;
			if (id != MERGE_OPT_QUIET)
				a->merge_options = true;
		} else if (!a->dir) {
			a->dir = val;
		} else if (!a->action) {
			a->action = val;
		} else {
			a->operands[a->count++] = val;
		}
	}
	if (!a->dir)
		return cli_usage("catalog", "no directory given");
	if (!a->action)
		return cli_usage("catalog", "no action given (" ACTIONS ")");
	if (a->json && strcmp(a->action, "list") != 0)
		return cli_usage("catalog", "--json is for list only");
	if ((a->prefix.given || a->tombstones) &&
	    strcmp(a->action, "scan") != 0)
		return cli_usage("catalog", "--%s is for scan only",
		                 a->prefix.given ? "prefix" : "tombstones");
	if (a->merge_options && strcmp(a->action, "merge") != 0)
		return cli_usage("catalog", "merge options are for merge only");
	if (a->merge.quiet &&
	    (strcmp(a->action, "list") == 0 || strcmp(a->action, "scan") == 0))
		return cli_usage("catalog", "--quiet is not for %s", a->action);
	return EXIT_OK;
}

int cmd_catalog(int argc, char **argv)
{
	struct catalog_args a = {0};
	int rc;

	a.operands = calloc((size_t)argc, sizeof *a.operands);
	if (!a.operands) {
		cli_error("catalog", NULL, "out of memory");
		return EXIT_SYSTEM;
	}
	rc = parse_catalog_args(argc, argv, &a);
	if (rc < 0)
		rc = cli_help("catalog");
	else if (rc)
		;
	else if ((rc = cli_refuse_stdout_in_dir("catalog", a.dir)) != 0)
		;
	else if (strcmp(a.action, "init") == 0 || strcmp(a.action, "list") == 0)
		rc = a.count ? cli_usage("catalog", "%s takes no operands",
		                         a.action)
		     : a.action[0] == 'i' ? catalog_init(&a)
		                          : catalog_list(&a);
	else if (strcmp(a.action, "add") == 0)
		rc = catalog_add(&a);
	else if (strcmp(a.action, "merge") == 0)
		rc = catalog_merge(&a);
	else if (strcmp(a.action, "get") == 0)
		rc = catalog_get(&a);
	else if (strcmp(a.action, "scan") == 0)
		rc = catalog_scan(&a);
	else
		rc = cli_usage("catalog", "unknown action '%s' (" ACTIONS ")",
		               a.action);
	free(a.prefix.key);
	free(a.operands);
	return rc;
}
