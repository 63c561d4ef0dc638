/*
 * control_parse.c — control/merge's requests, checked and read (see
 * control_parse.h). The grammar is USAGE.md's; what a merge means (its
 * inputs, output name and mode) is the core's planner's, shared with
 * `kvseg catalog merge`, so that both give the same output for the same
 * request. Here only the words are read and the planner's refusals get
 * segfs's errnos.
 */
#include "control_parse.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int control_fail(control_error *e, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	e->err = err;
	return err;
}

int control_split(char *line, size_t len, control_words *w, control_error *e)
{
	w->n = 0;
	if (len > CONTROL_MAX_REQUEST)
		return control_fail(e, EINVAL, "a request longer than %d bytes",
		            CONTROL_MAX_REQUEST);
	/*
	 * Words of printable bytes, separated by single spaces. A control
	 * byte is refused, not taken as a separator or as part of a word:
	 * the CR of a CRLF line or a tab would otherwise make a request that
	 * only looks right, and the shell that wrote it should hear so.
	 */
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)line[i];
		if (c == 0)
			return control_fail(e, EINVAL,
			            "a NUL byte (0x00) at offset %zu of the "
			            "request",
			            i);
		if (c < 0x20 || c == 0x7F)
			return control_fail(e, EINVAL,
			            "control byte 0x%02x%s at offset %zu of "
			            "the request (words are printable, "
			            "separated by single spaces)",
			            c,
			            c == '\t'   ? " (tab)"
			            : c == '\r' ? " (carriage return)"
			            : c == 0x7F ? " (DEL)"
			                        : "",
			            i);
	}
	if (strspn(line, " ") == len)
		return control_fail(e, EINVAL, "an empty request");
	for (size_t i = 0; i < len; i++)
		if (line[i] == ' ' &&
		    (i == 0 || i + 1 == len || line[i - 1] == ' '))
			return control_fail(e, EINVAL,
			            "an extra space at offset %zu of the "
			            "request (words are separated by one "
			            "space, with none before the first or "
			            "after the last)",
			            i);
	for (char *p = line; p;) {
		if (w->n == CONTROL_MAX_WORDS)
			return control_fail(e, EINVAL, "too many words");
		w->word[w->n++] = p;
		if ((p = strchr(p, ' ')))
			*p++ = '\0';
	}
	if (strcmp(w->word[0], "cancel") != 0 &&
	    strcmp(w->word[0], "merge") != 0)
		return control_fail(e, EINVAL,
		            "unknown request '%.40s' (merge or cancel)",
		            w->word[0]);
	return 0;
}

/*
 * A number as the grammar has it: decimal digits, no sign, no leading zero
 * (strtoul would also take "+5", " 5" and "015", which the grammar does
 * not), at most max.
 */
static bool plain_number(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	if (!*s || (s[0] == '0' && s[1]))
		return false;
	for (; *s; s++) {
		unsigned d = (unsigned)(*s - '0');
		if (d > 9 || v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

int control_parse_cancel(const control_words *w, uint64_t *id, control_error *e)
{
	if (w->n != 2)
		return control_fail(e, EINVAL, "cancel takes one job id");
	if (!plain_number(w->word[1], UINT64_MAX, id))
		return control_fail(e, EINVAL, "'%.40s' is not a job id", w->word[1]);
	return 0;
}

/* 0 when v is a, 1 when it is b, else -1. */
static int choose(const char *v, const char *a, const char *b)
{
	return !strcmp(v, a) ? 0 : !strcmp(v, b) ? 1 : -1;
}

static size_t find_live(const control_snapshot *snap, const char *name)
{
	for (size_t i = 0; i < snap->n; i++)
		if (!strcmp(snap->live[i].name, name))
			return i;
	return SIZE_MAX;
}

/* The planner's refusal as segfs says it. */
static int refused(const control_snapshot *snap, const kvs_merge_request *req,
                   const kvs_merge_plan *plan, const kvs_error *err,
                   control_error *e)
{
	switch (plan->problem) {
	case KVS_PLAN_NOTHING:
		return control_fail(e, EINVAL, "there are no live segments to merge");
	case KVS_PLAN_NOT_CONSECUTIVE:
		return control_fail(e, EINVAL,
		            "the inputs must be consecutive in age order, but "
		            "%.100s lies between them",
		            snap->live[plan->problem_at].name);
	case KVS_PLAN_DROP_NOT_OLDEST:
		return control_fail(e, EINVAL,
		            "tombstones=drop needs the oldest live segment "
		            "(%.100s) among the inputs",
		            snap->live[0].name);
	case KVS_PLAN_RAW_TOMBSTONES:
		return control_fail(
		    e, EINVAL,
		    "framing=raw cannot hold the inputs' %" PRIu64
		    " tombstones (use framing=typed, or tombstones=drop "
		    "with the oldest segment)",
		    plan->tombstones);
	case KVS_PLAN_OUTPUT_TAKEN:
		return control_fail(e, EEXIST, "name=%.100s: the file exists",
		            req->output_name);
	case KVS_PLAN_NO_FREE_NAME:
		return control_fail(e, EEXIST,
		            "no free output name seg-%" PRIu64 "[-N].kvs",
		            plan->options.output.sequence);
	case KVS_PLAN_UNKNOWN_NAME:
		return control_fail(e, ENOENT, "%s", err->message);
	default:
		return control_fail(e, err->status == KVS_E_NOMEM ? ENOMEM : EINVAL,
		            "%s", err->message);
	}
}

int control_parse_merge(const control_words *w, const control_snapshot *snap,
                        kvs_merge_plan *plan, control_error *e)
{
	static const char *const keys[] = {"profile", "framing", "restart",
	                                   "name", "tombstones"};
	kvs_merge_request req = {0};
	bool all = false, seen_opt[5] = {0}, opts = false;
	const char **names = NULL;
	int rc = 0;

	memset(plan, 0, sizeof *plan);
	if (w->n > 1 && !(names = calloc(w->n, sizeof *names)))
		return control_fail(e, ENOMEM, "out of memory");
	/*
	 * merge = "merge" SP ("all" / NAME *(SP NAME)) *(SP OPTION): the
	 * inputs, then the options. A word is an option when what precedes
	 * its first '=' is an option's key. A segment's name may hold '=' (or
	 * be a key) too, so before the first option another word is a name;
	 * but if no live segment has it, a word that looks like an option is
	 * an unknown option or one without its value (EINVAL, like any
	 * misspelt option), not a missing segment (ENOENT).
	 */
	for (size_t t = 1; t < w->n && !rc; t++) {
		const char *s = w->word[t];
		const char *eq = strchr(s, '=');
		size_t klen = eq ? (size_t)(eq - s) : strlen(s);
		int key = -1, like = -1;
		for (int k = 0; k < 5; k++)
			if (klen == strlen(keys[k]) &&
			    !strncmp(s, keys[k], klen))
				like = k;
		if (eq)
			key = like;
		if (key < 0 && !strcmp(s, "all")) {
			if (all)
				rc = control_fail(e, EINVAL, "'all' is given twice");
			else if (opts)
				rc = control_fail(e, EINVAL,
				          "'all' after an option: the inputs "
				          "come first, then the options");
			all = true;
			continue;
		}
		if (key < 0) { /* a segment name */
			size_t at = find_live(snap, s);
			bool no_name = at == SIZE_MAX || opts || all;
			if (eq && no_name)
				rc = control_fail(e, EINVAL,
				          "unknown option '%.100s' (profile=, "
				          "framing=, restart=, name= or "
				          "tombstones=)",
				          s);
			else if (like >= 0 && no_name)
				rc = control_fail(e, EINVAL,
				          "option %s without a value (%s=...)",
				          s, s);
			else if (opts)
				rc =
				    control_fail(e, EINVAL,
				         "'%.100s' after an option: the inputs "
				         "come first, then the options",
				         s);
			else if (!kvs_catalog_name_valid(s))
				rc = control_fail(e, EINVAL,
				          "'%.100s' cannot be a segment name "
				          "(empty, too long, with '/', or "
				          "starting with '.')",
				          s);
			else if (at == SIZE_MAX)
				rc = control_fail(e, ENOENT,
				          "no live segment is called '%.100s'",
				          s);
			else
				for (size_t k = 0; k < req.n_names && !rc; k++)
					if (!strcmp(names[k], s))
						rc = control_fail(
						    e, EINVAL,
						    "'%.100s' is given twice",
						    s);
			if (!rc)
				names[req.n_names++] = s;
			continue;
		}
		opts = true;
		const char *v = eq + 1;
		int c;
		uint64_t restart;
		if (seen_opt[key]) {
			rc = control_fail(e, EINVAL, "option %s is given twice",
			          keys[key]);
			break;
		}
		seen_opt[key] = true;
		switch (key) {
		case 0:
			if ((c = choose(v, "byte", "bit")) < 0)
				rc = control_fail(e, EINVAL,
				          "profile=%.40s: byte or bit", v);
			req.profile = c ? KVS_PROFILE_BIT : KVS_PROFILE_BYTE;
			req.profile_set = true;
			break;
		case 1:
			if ((c = choose(v, "typed", "raw")) < 0)
				rc = control_fail(e, EINVAL,
				          "framing=%.40s: typed or raw", v);
			req.framing = c ? KVS_FRAMING_RAW : KVS_FRAMING_TYPED;
			req.framing_set = true;
			break;
		case 2:
			if (!plain_number(v, KVS_MAX_RESTART_INTERVAL,
			                  &restart) ||
			    restart < 1)
				rc = control_fail(e, EINVAL,
				          "restart=%.40s: a number from 1 to "
				          "%d",
				          v, KVS_MAX_RESTART_INTERVAL);
			req.restart_interval = (uint32_t)restart;
			req.restart_set = true;
			break;
		case 3:
			if (!kvs_catalog_name_valid(v))
				rc = control_fail(
				    e, EINVAL,
				    "name=%.100s cannot be a segment name", v);
			req.output_name = v;
			break;
		case 4:
			if ((c = choose(v, "keep", "drop")) < 0)
				rc = control_fail(e, EINVAL,
				          "tombstones=%.40s: keep or drop", v);
			req.drop_tombstones = c == 1;
			break;
		}
	}
	if (rc)
		goto out;
	if (all && req.n_names) {
		rc = control_fail(e, EINVAL, "'all' and segment names together");
		goto out;
	}
	if (!all && !req.n_names) {
		rc = control_fail(e, EINVAL, "merge what? Give 'all' or segment names");
		goto out;
	}
	req.names = names;
	kvs_error err = {0};
	if (kvs_merge_plan_make(snap->live, snap->n, &req, snap->taken,
	                        snap->taken_ctx, plan, &err) != KVS_OK) {
		rc = refused(snap, &req, plan, &err, e);
		goto out;
	}
	if (plan->n > CONTROL_MAX_INPUTS) {
		rc = control_fail(e, EINVAL, "more than %d inputs", CONTROL_MAX_INPUTS);
		goto out;
	}
	for (size_t k = 0; snap->busy && k < plan->n; k++) {
		size_t i = plan->first + k;
		if (snap->busy[i] != CONTROL_FREE) {
			rc = control_fail(
			    e, EBUSY,
			    snap->busy[i] == CONTROL_BUSY_EARLIER
			        ? "%.100s is an input of an earlier request "
			          "of this write"
			        : "%.100s is already being merged",
			    snap->live[i].name);
			goto out;
		}
	}
out:
	free(names);
	return rc;
}
