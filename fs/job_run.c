/*
 * job_run.c — running one merge job: the merge from the inputs' slots
 * (guarded: an input cut short fails the job, guard.h), then, from the
 * writer's publish hook, the catalog's compare-and-swap and the reload
 * that serves it (job.h). FUSE-free.
 */
#include "job.h"
#include "guard.h"
#include "state.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- running a job ---------------------------------------------------------------- */

static int progress(void *ctx, uint64_t done, uint64_t total)
{
	job *j = ctx;
	atomic_store(&j->done, done);
	atomic_store(&j->total, total);
	return atomic_load(&j->cancel) ? 1 : 0;
}
/*
 * Under S.publish, S.cat just reloaded: the first of j's inputs that is no
 * longer live where it was (in a generation another process published:
 * segfs's own jobs never share an input), or NULL while the inputs are
 * still live, consecutive and the same files.
 */
static const char *moved_input(const job *j)
{
	size_t count = kvs_catalog_count(S.cat);
	ptrdiff_t at = kvs_catalog_find(S.cat, j->names[0]);
	for (size_t k = 0; k < j->n; k++) {
		const kvs_catalog_entry *e =
		    at >= 0 && (size_t)at + k < count
		        ? kvs_catalog_entry_at(S.cat, (size_t)at + k)
		        : NULL;
		const slot *s = slot_get(j->inputs[k]);
		if (!s) /* retired and freed: not live */
			return j->names[k];
		if (!e || strcmp(e->name, s->name) ||
		    e->header_crc != s->info.header_crc)
			return s->name;
	}
	return NULL;
}

/* Under S.publish, S.cat just reloaded: j failed because of the
 * generation another process published during its merge; says so. */
static void catalog_changed(job *j, const char *moved)
{
	set_error(j,
	          "the catalog changed during the merge (another process "
	          "published generation %" PRIu64 "%s%s%s); nothing was "
	          "published",
	          kvs_catalog_generation(S.cat), moved ? ", in which " : "",
	          moved ? moved : "",
	          moved ? " is no longer where it was" : "");
}

/* Publishes j's output in place of its inputs; under S.publish. */
static int publish(job *j, const char *out_path)
{
	kvs_error err = {0};
	kvs_status st = kvs_catalog_reload(S.cat, &err);
	if (st != KVS_OK) {
		set_error(j, "reading the catalog: %s", err.message);
		return -1;
	}
	const char *moved = moved_input(j);
	if (moved) {
		catalog_changed(j, moved);
		return -1;
	}
	char path[PATH_MAX], link_path[PATH_MAX];
	size_t linked = 0;
	if (!S.keep_retired) {
		/* .NAME.retired keeps each input until its last reader is
		 * gone, and tells a later mount what to remove if we die
		 * (state.c, recover_retired) */
		for (; linked < j->n; linked++) {
			segdir_path(path, j->names[linked], NULL);
			segdir_path(link_path, j->names[linked], "retired");
			unlink(link_path);
			if (link(path, link_path) < 0) {
				set_error(j, "%s: %s", link_path,
				          strerror(errno));
				break;
			}
		}
	}
	if (!S.keep_retired && linked < j->n)
		st = KVS_E_IO;
	else
		st = kvs_catalog_replace(S.cat, kvs_catalog_generation(S.cat),
		                         (const char *const *)j->names, j->n,
		                         j->out, false, &err);
	if (st != KVS_OK) {
		/* KVS_E_CONFLICT: another process published between the
		 * reload and the replace */
		if (st == KVS_E_CONFLICT &&
		    kvs_catalog_reload(S.cat, &err) == KVS_OK)
			catalog_changed(j, moved_input(j));
		else if (st != KVS_E_IO || linked == j->n)
			set_error(j, "publishing: %s", err.message);
		for (size_t k = 0; k < linked; k++) {
			segdir_path(link_path, j->names[k], "retired");
			unlink(link_path);
		}
		return -1;
	}
	(void)out_path;
	if (!S.keep_retired) {
		pthread_mutex_lock(&S.lock);
		for (size_t k = 0; k < j->n; k++)
			slot_get(j->inputs[k])->linked = true;
		pthread_mutex_unlock(&S.lock);
		for (size_t k = 0; k < j->n; k++) {
			segdir_path(path, j->names[k], NULL);
			unlink(path);
		}
	}
	if (state_reload_locked(&err) != 0)
		set_error(j, "published, but not yet served: %s", err.message);
	return 0;
}

/*
 * The writer of a merge that a fault cut short (guard.h) neither removed
 * its temporary file, .OUT.pub-XXXXXX, nor closed it: the descriptor is
 * found by its path, the file removed and the descriptor closed. (A fault
 * comes from reading an input, before the output has its name.)
 */
static void remove_merge_temp(const char *out)
{
	char prefix[PATH_MAX];
	segdir_path(prefix, out, "pub-");
	size_t plen = strlen(prefix);
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	int self = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char link[PATH_MAX], path[PATH_MAX];
		snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(link, path, sizeof path - 1);
		int fd = atoi(e->d_name);
		if (n <= 0 || (size_t)n <= plen || fd == self)
			continue;
		path[n] = '\0';
		if (strncmp(path, prefix, plen) == 0) {
			unlink(path);
			close(fd);
		}
	}
	closedir(d);
}

/* A read of an input faulted during j's merge: the input is damaged. */
static kvs_status merge_fault(job *j)
{
	uint64_t off;
	slot *s = slot_damage_at(guard_fault_addr, &off);
	set_error(j,
	          "%s: " DAMAGED_WHY " (a read of it failed): nothing was "
	          "merged",
	          s->name);
	remove_merge_temp(j->out);
	return KVS_E_IO;
}

/*
 * The writer's publish hook (kvs_writer_options.publish): the output is
 * complete and named OUT. A cancel still wins here; then publish() under
 * S.publish. A failure makes the writer remove OUT, unless the catalog
 * names OUT after all: then it stays, and the job fails all the same.
 * publish() takes locks, so it runs unguarded (guard.h), as it did after
 * the merge.
 */
static kvs_status publish_output(void *ctx, const char *path, kvs_error *err)
{
	job *j = ctx;
	sigjmp_buf *volatile guard = guard_jb;
	guard_jb = NULL;
	struct stat sb;
	if (stat(path, &sb) == 0) {
		pthread_mutex_lock(&J.lock); /* status lines read it */
		j->bytes_out = (uint64_t)sb.st_size;
		pthread_mutex_unlock(&J.lock);
	}
	kvs_status st = KVS_OK;
	if (atomic_load(&j->cancel)) {
		st = kvs_error_set(err, KVS_E_CANCELED, "cancelled");
	} else {
		pthread_mutex_lock(&S.publish);
		if (publish(j, path) != 0) {
			j->publish_failed = true;
			if (kvs_catalog_find(S.cat, j->out) < 0)
				st = kvs_error_set(err, KVS_E_IO, "%s", j->error);
		}
		pthread_mutex_unlock(&S.publish);
	}
	guard_jb = guard;
	return st;
}

/*
 * The writer found j's output name taken (KVS_E_EXISTS) before it could
 * publish. When another process published a generation without j's inputs
 * meanwhile — most often another segfs on SEGDIR that merged the same
 * inputs under the same default name — that is the cause to report, not
 * the writer's "a file appeared there": the file is the other merge's
 * output. Otherwise the writer's message stands.
 */
static void output_taken_why(job *j)
{
	kvs_error err;
	pthread_mutex_lock(&S.publish);
	const char *moved = NULL;
	if (kvs_catalog_reload(S.cat, &err) == KVS_OK &&
	    (moved = moved_input(j)) != NULL)
		catalog_changed(j, moved);
	pthread_mutex_unlock(&S.publish);
}

static kvs_status guarded_merge(job *j, kvs_segment **segs, size_t n,
                                const char *out_path,
                                const kvs_merge_options *opt,
                                kvs_error *err)
{
	volatile kvs_status st = KVS_E_IO;
	GUARDED(st = merge_fault(j),
	        st = kvs_merge(segs, n, out_path, opt, NULL, err));
	return st;
}

enum job_state job_run(job *j)
{
	size_t n = j->n;
	kvs_segment **segs = calloc(n, sizeof *segs);
	bool ok = segs != NULL;
	pthread_mutex_lock(&S.lock);
	for (size_t k = 0; ok && k < n; k++) {
		slot *s = slot_get(j->inputs[k]);
		/* NULL: retired, and freed with its last reader */
		if (!s || !s->seg || s->retired || slot_damaged(s)) {
			bool damaged = s && slot_damaged(s);
			ok = false;
			pthread_mutex_unlock(&S.lock);
			if (damaged)
				set_error(j,
				          "%s: " DAMAGED_WHY
				          ": it cannot be merged",
				          j->names[k]);
			else
				set_error(j,
				          "%s was retired by another process "
				          "before the merge ran",
				          j->names[k]);
			pthread_mutex_lock(&S.lock);
			break;
		}
		kvs_segment_ref(s->seg);
		segs[k] = s->seg;
	}
	pthread_mutex_unlock(&S.lock);
	/*
	 * The writer publishes the output through publish_output once it is
	 * complete and linked at OUT (link never replaces a file: another
	 * process's OUT stays), while its locked temporary file .OUT.pub-*
	 * still names it too. Should we die before it is published, the
	 * catalog's recovery at the next mount (or any open of the catalog)
	 * removes both names.
	 */
	char out_path[PATH_MAX];
	segdir_path(out_path, j->out, NULL);
	kvs_error err = {0};
	kvs_merge_options opt = j->opt;
	opt.progress = progress;
	opt.progress_ctx = j;
	opt.output.publish = publish_output;
	opt.output.publish_ctx = j;
	kvs_status st = KVS_E_INVAL;
	if (ok) {
		st = guarded_merge(j, segs, n, out_path, &opt, &err);
		if (st == KVS_E_EXISTS && !j->error[0])
			output_taken_why(j);
		if (st != KVS_OK && st != KVS_E_CANCELED && !j->error[0])
			set_error(j, "%s", err.message);
	}
	for (size_t k = 0; segs && k < n; k++)
		kvs_segment_unref(segs[k]);
	free(segs);
	enum job_state end = ok && st == KVS_OK && !j->publish_failed ? DONE
	                     : st == KVS_E_CANCELED ? CANCELLED
	                                            : FAILED;
	if (end == CANCELLED && !j->error[0])
		set_error(j, "cancelled");
	return end;
}
