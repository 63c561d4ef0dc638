/*
 * kvseg/merge_plan.h — the catalog-merge planner: what a merge request
 * over a directory's live segments means, decided in one place.
 *
 * `kvseg catalog DIR merge` and segfs's control/merge both turn a request
 * (segment names or all, and options) and a snapshot of the live segments
 * into a plan with kvs_merge_plan_make: the inputs, whether they include
 * the oldest live segment, the output's name, sequence and mode, and the
 * kvs_merge options. So the same request over the same catalog gives the
 * same output, byte for byte, whichever program runs it; `kvseg merge`
 * takes its output mode from kvs_merge_plan_mode too.
 *
 * The defaults (docs/USAGE.md, kvseg "merge"): the output has the
 * smallest mode that holds every input — the byte profile only when every
 * input has it (bit otherwise), raw framing only when every input is raw
 * (typed otherwise) — the newest input's restart interval, and the count
 * codes of the newest bit-profile input (the writer's defaults when none
 * is). A default therefore never makes a valid request fail: a typed
 * output holds any tombstone, a bit output any key. In a catalog the
 * sequence is the inputs' highest, and the output takes the newest
 * input's place in age order.
 *
 * The planner reads no file: a snapshot and a callback that says whether
 * an output name is taken. It is a pure function of them, so that it can
 * be tested and fuzzed without a directory.
 */
#ifndef KVSEG_MERGE_PLAN_H
#define KVSEG_MERGE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvseg/catalog.h"
#include "kvseg/merge.h"
#include "kvseg/segment.h"
#include "kvseg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One live segment of the snapshot, oldest first as the catalog has them. */
typedef struct kvs_merge_live {
	const char *name; /* its name in the catalog */
	/* its kvs_segment_info_get; read only for the inputs, so it may be
	 * NULL for the others (kvs_merge_plan_select tells which) */
	const kvs_segment_info *info;
} kvs_merge_live;

/* A merge request; zero-initialised, it is "merge all" with the defaults. */
typedef struct kvs_merge_request {
	const char *const *names; /* the inputs by name, in any order */
	size_t n_names;           /* 0: every live segment */
	bool profile_set, framing_set, restart_set, codes_set, sequence_set;
	kvs_profile profile;
	kvs_framing framing;
	uint32_t restart_interval; /* 1 .. KVS_MAX_RESTART_INTERVAL */
	kvs_code_spec codes[KVS_FIELD_COUNT];
	uint64_t sequence;
	bool drop_tombstones;    /* a strong delete: needs the oldest */
	const char *output_name; /* NULL: seg-SEQ.kvs, or seg-SEQ-N.kvs */
} kvs_merge_request;

/* Why a request was refused (kvs_merge_plan.problem). */
typedef enum kvs_merge_problem {
	KVS_PLAN_OK = 0,
	KVS_PLAN_NOTHING,         /* no live segment to merge */
	KVS_PLAN_UNKNOWN_NAME,    /* a name no live segment has */
	KVS_PLAN_NAME_TWICE,      /* a name given twice */
	KVS_PLAN_NOT_CONSECUTIVE, /* a live segment lies between inputs */
	KVS_PLAN_DROP_NOT_OLDEST, /* drop without the oldest live segment */
	KVS_PLAN_RAW_TOMBSTONES,  /* raw framing, tombstones would remain */
	KVS_PLAN_CODES_NOT_BIT,   /* codes given for a byte-profile output */
	KVS_PLAN_BAD_OPTION,      /* an option's value out of range */
	KVS_PLAN_OUTPUT_INVALID,  /* output_name cannot be a segment's */
	KVS_PLAN_OUTPUT_TAKEN,    /* output_name is taken */
	KVS_PLAN_NO_FREE_NAME,    /* seg-SEQ[-N].kvs all taken, N <= 1000 */
} kvs_merge_problem;

/* The plan: merge live[first .. first + n) into output. */
typedef struct kvs_merge_plan {
	size_t first, n;      /* the inputs, oldest first */
	bool includes_oldest; /* first == 0 */
	char output[KVS_CATALOG_MAX_NAME + 1];
	/* output mode, sequence, codes, drop_tombstones, includes_oldest;
	 * progress and publish left for the caller */
	kvs_merge_options options;
	uint64_t tombstones; /* the inputs' (all kept unless dropped) */
	uint64_t bytes_in;   /* the inputs' file sizes */
	kvs_merge_problem problem;
	size_t problem_at; /* the live segment or name the problem names */
} kvs_merge_plan;

/* Is name taken as an output (a file exists there, another merge's
 * output is to be there)? Called only for names the plan would use. */
typedef bool (*kvs_merge_name_taken)(void *ctx, const char *name);

/*
 * The first step of kvs_merge_plan_make: which live segments are the
 * inputs (plan->first, n, includes_oldest), from the names alone, so
 * that a caller can open just those before it plans. Refusals:
 * KVS_PLAN_NOTHING, _UNKNOWN_NAME, _NAME_TWICE, _NOT_CONSECUTIVE.
 */
KVS_API kvs_status kvs_merge_plan_select(const kvs_merge_live *live,
                                         size_t count,
                                         const kvs_merge_request *req,
                                         kvs_merge_plan *plan, kvs_error *err);

/*
 * Plans req over the snapshot live[0 .. count). KVS_OK fills plan; on
 * refusal plan->problem and err say why, naming the segment or option,
 * with KVS_E_EXISTS for KVS_PLAN_OUTPUT_TAKEN and KVS_PLAN_NO_FREE_NAME,
 * KVS_E_INVAL otherwise. The checks, in this order: names (unknown,
 * twice), something to merge, consecutive inputs, option values, drop
 * with the oldest, codes with a bit output, raw framing without
 * tombstones left, then the output's name (taken may be NULL: no name is
 * taken).
 */
KVS_API kvs_status kvs_merge_plan_make(const kvs_merge_live *live, size_t count,
                                       const kvs_merge_request *req,
                                       kvs_merge_name_taken taken,
                                       void *taken_ctx, kvs_merge_plan *plan,
                                       kvs_error *err);

/*
 * The output mode of a merge of inputs[0 .. n) (oldest first, n >= 1) by
 * the rules above, with what req sets (its names, sequence and output
 * name are not read): profile, framing, restart interval, codes and
 * custom_codes of out; other fields are left as they are.
 */
KVS_API void kvs_merge_plan_mode(const kvs_segment_info *const *inputs,
                                 size_t n, const kvs_merge_request *req,
                                 kvs_writer_options *out);

#ifdef __cplusplus
}
#endif

#endif
