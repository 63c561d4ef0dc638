/*
 * merge_plan.c — the catalog-merge planner (kvseg/merge_plan.h): one
 * reading of a merge request, shared by kvseg catalog merge and segfs.
 *
 * Before it, each program decided the output's mode its own way (segfs:
 * typed unless every input is raw, the default codes; kvseg: the newest
 * input's framing and codes), so one request gave different files. The
 * rule here is the one that never fails a valid request: the output's
 * mode is the smallest that holds every input (a raw or byte-profile
 * output is chosen only when every input already is one), since a default
 * that made the merge fail (tombstones in a raw output, bit keys in a
 * byte one) would be a default nobody wants.
 */
#include "kvseg/merge_plan.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kvs_merge_plan_mode(const kvs_segment_info *const *inputs, size_t n,
                         const kvs_merge_request *req, kvs_writer_options *out)
{
	bool all_byte = true, all_raw = true;
	const kvs_segment_info *newest_bit = NULL;

	for (size_t i = 0; i < n; i++) {
		all_byte &= inputs[i]->profile == KVS_PROFILE_BYTE;
		all_raw &= inputs[i]->framing == KVS_FRAMING_RAW;
		if (inputs[i]->profile == KVS_PROFILE_BIT)
			newest_bit = inputs[i];
	}
	out->profile = req->profile_set ? req->profile
	               : all_byte       ? KVS_PROFILE_BYTE
	                                : KVS_PROFILE_BIT;
	out->framing = req->framing_set ? req->framing
	               : all_raw        ? KVS_FRAMING_RAW
	                                : KVS_FRAMING_TYPED;
	out->restart_interval = req->restart_set
	                            ? req->restart_interval
	                            : inputs[n - 1]->restart_interval;
	out->custom_codes = false;
	if (out->profile != KVS_PROFILE_BIT)
		return;
	if (req->codes_set) {
		memcpy(out->codes, req->codes, sizeof out->codes);
		out->custom_codes = true;
	} else if (newest_bit) {
		memcpy(out->codes, newest_bit->codes, sizeof out->codes);
		out->custom_codes = true;
	}
}

/* Notes why the plan is refused; returns st (kvs_error_set's). */
static kvs_status refuse(kvs_merge_plan *plan, kvs_merge_problem problem,
                         size_t at, kvs_status st)
{
	plan->problem = problem;
	plan->problem_at = at;
	return st;
}

kvs_status kvs_merge_plan_select(const kvs_merge_live *live, size_t count,
                                 const kvs_merge_request *req,
                                 kvs_merge_plan *plan, kvs_error *err)
{
	kvs_status st = KVS_OK;
	bool *chosen = NULL;
	size_t lo = 0, hi = 0;

	memset(plan, 0, sizeof *plan);
	if (req->n_names == 0) {
		if (count == 0)
			return refuse(
			    plan, KVS_PLAN_NOTHING, 0,
			    kvs_error_set(
			        err, KVS_E_INVAL,
			        "there are no live segments to merge"));
		hi = count - 1;
	} else {
		chosen = calloc(count + 1, sizeof *chosen);
		if (!chosen)
			return kvs_error_set(err, KVS_E_NOMEM, "out of memory");
		lo = SIZE_MAX;
		for (size_t k = 0; k < req->n_names; k++) {
			size_t at = count;
			for (size_t i = 0; i < count && at == count; i++)
				if (!strcmp(live[i].name, req->names[k]))
					at = i;
			if (at == count) {
				st = refuse(
				    plan, KVS_PLAN_UNKNOWN_NAME, k,
				    kvs_error_set(
				        err, KVS_E_INVAL,
				        "no live segment is called '%.100s'",
				        req->names[k]));
				goto out;
			}
			if (chosen[at]) {
				st = refuse(
				    plan, KVS_PLAN_NAME_TWICE, k,
				    kvs_error_set(err, KVS_E_INVAL,
				                  "'%.100s' is given twice",
				                  req->names[k]));
				goto out;
			}
			chosen[at] = true;
			lo = at < lo ? at : lo;
			hi = at > hi ? at : hi;
		}
		for (size_t i = lo; i <= hi; i++)
			if (!chosen[i]) {
				st = refuse(
				    plan, KVS_PLAN_NOT_CONSECUTIVE, i,
				    kvs_error_set(
				        err, KVS_E_INVAL,
				        "the inputs must be consecutive in age "
				        "order, but %.100s lies between them",
				        live[i].name));
				goto out;
			}
	}
	plan->first = lo;
	plan->n = hi - lo + 1;
	plan->includes_oldest = lo == 0;
out:
	free(chosen);
	return st;
}

kvs_status kvs_merge_plan_make(const kvs_merge_live *live, size_t count,
                               const kvs_merge_request *req,
                               kvs_merge_name_taken taken, void *taken_ctx,
                               kvs_merge_plan *plan, kvs_error *err)
{
	const kvs_segment_info **infos = NULL;
	kvs_status st = kvs_merge_plan_select(live, count, req, plan, err);
	if (st != KVS_OK)
		return st;
	size_t lo = plan->first;
	if (req->restart_set &&
	    (req->restart_interval < 1 ||
	     req->restart_interval > KVS_MAX_RESTART_INTERVAL)) {
		st = refuse(
		    plan, KVS_PLAN_BAD_OPTION, 0,
		    kvs_error_set(err, KVS_E_INVAL,
		                  "the restart interval must be 1 to 65536"));
		goto out;
	}
	if (req->drop_tombstones && !plan->includes_oldest) {
		st = refuse(
		    plan, KVS_PLAN_DROP_NOT_OLDEST, 0,
		    kvs_error_set(err, KVS_E_INVAL,
		                  "dropping tombstones needs the oldest live "
		                  "segment (%.100s) among the inputs",
		                  live[0].name));
		goto out;
	}
	infos = calloc(plan->n, sizeof *infos);
	if (!infos) {
		st = kvs_error_set(err, KVS_E_NOMEM, "out of memory");
		goto out;
	}
	size_t holder = SIZE_MAX;
	uint64_t sequence = 0;
	for (size_t k = 0; k < plan->n; k++) {
		const kvs_segment_info *in = live[lo + k].info;
		infos[k] = in;
		if (in->tombstones && holder == SIZE_MAX)
			holder = lo + k;
		plan->tombstones += in->tombstones;
		plan->bytes_in += in->file_bytes;
		sequence =
		    k == 0 || in->sequence > sequence ? in->sequence : sequence;
	}
	kvs_writer_options *w = &plan->options.output;
	kvs_merge_plan_mode(infos, plan->n, req, w);
	w->sequence = req->sequence_set ? req->sequence : sequence;
	plan->options.drop_tombstones = req->drop_tombstones;
	plan->options.includes_oldest = plan->includes_oldest;
	if (req->codes_set && w->profile != KVS_PROFILE_BIT) {
		st = refuse(
		    plan, KVS_PLAN_CODES_NOT_BIT, 0,
		    kvs_error_set(err, KVS_E_INVAL,
		                  "count codes need a bit-profile output"));
		goto out;
	}
	if (w->framing == KVS_FRAMING_RAW && plan->tombstones &&
	    !req->drop_tombstones) {
		st = refuse(
		    plan, KVS_PLAN_RAW_TOMBSTONES, holder,
		    kvs_error_set(
		        err, KVS_E_INVAL,
		        "%.100s holds %" PRIu64 " tombstone(s), but raw "
		        "framing "
		        "has none (keep typed framing, or drop them "
		        "with the oldest segment among the inputs)",
		        live[holder].name, live[holder].info->tombstones));
		goto out;
	}
	if (req->output_name) {
		if (!kvs_catalog_name_valid(req->output_name)) {
			st = refuse(
			    plan, KVS_PLAN_OUTPUT_INVALID, 0,
			    kvs_error_set(err, KVS_E_INVAL,
			                  "'%.100s' cannot be a segment name",
			                  req->output_name));
			goto out;
		}
		if (taken && taken(taken_ctx, req->output_name)) {
			st = refuse(plan, KVS_PLAN_OUTPUT_TAKEN, 0,
			            kvs_error_set(err, KVS_E_EXISTS,
			                          "%.100s: the file exists",
			                          req->output_name));
			goto out;
		}
		snprintf(plan->output, sizeof plan->output, "%s",
		         req->output_name);
		goto out;
	}
	for (unsigned k = 1; k <= 1000 && !plan->output[0]; k++) {
		char name[64];
		if (k == 1)
			snprintf(name, sizeof name, "seg-%" PRIu64 ".kvs",
			         w->sequence);
		else
			snprintf(name, sizeof name, "seg-%" PRIu64 "-%u.kvs",
			         w->sequence, k);
		if (!taken || !taken(taken_ctx, name))
			snprintf(plan->output, sizeof plan->output, "%s", name);
	}
	if (!plan->output[0]) {
		st = refuse(plan, KVS_PLAN_NO_FREE_NAME, 0,
		            kvs_error_set(err, KVS_E_EXISTS,
		                          "no free output name seg-%" PRIu64
		                          "[-N].kvs",
		                          w->sequence));
	}
out:
	free(infos);
	return st;
}
