/*
 * test_merge_plan.c — the catalog-merge planner (core/src/merge_plan.c,
 * kvseg/merge_plan.h) and control/merge's request parser
 * (fs/control_parse.c): the defaults, as docs/USAGE.md states them, over
 * stacks of mixed modes; every refusal with its errno; and the
 * parser's results equal to the planner's for the same request. The
 * expected plans are written from the documentation, not computed.
 */
#include "testutil.h"

#include <errno.h>
#include <string.h>

#include "control_parse.h"
#include "kvseg/merge_plan.h"

/* A stack of four live segments, oldest first:
 *   a.kvs  byte typed  K=15 seq 1  2 tombstones
 *   b.kvs  bit  typed  K=8  seq 2  codes X
 *   c.kvs  byte raw    K=4  seq 3
 *   d.kvs  byte raw    K=32 seq 4                                     */
static kvs_segment_info infos[4];
static kvs_merge_live live[4];
static const char *const live_names[4] = {"a.kvs", "b.kvs", "c.kvs", "d.kvs"};

static void setup_stack(void)
{
	memset(infos, 0, sizeof infos);
	const kvs_profile p[4] = {KVS_PROFILE_BYTE, KVS_PROFILE_BIT,
	                          KVS_PROFILE_BYTE, KVS_PROFILE_BYTE};
	const kvs_framing f[4] = {KVS_FRAMING_TYPED, KVS_FRAMING_TYPED,
	                          KVS_FRAMING_RAW, KVS_FRAMING_RAW};
	const uint32_t k[4] = {15, 8, 4, 32};
	for (int i = 0; i < 4; i++) {
		infos[i].profile = p[i];
		infos[i].framing = f[i];
		infos[i].restart_interval = k[i];
		infos[i].sequence = (uint64_t)i + 1;
		infos[i].file_bytes = 100 * ((uint64_t)i + 1);
		live[i].name = live_names[i];
		live[i].info = &infos[i];
	}
	infos[0].tombstones = 2;
	kvs_default_codes(infos[1].codes);
	infos[1].codes[0].kind = KVS_CODE_FIXED; /* not the default */
	infos[1].codes[0].param = 9;
}

static const char *taken_names[4];

static bool taken(void *ctx, const char *name)
{
	(void)ctx;
	for (int i = 0; i < 4; i++)
		if (taken_names[i] && !strcmp(taken_names[i], name))
			return true;
	return false;
}

static kvs_merge_plan plan_of(const kvs_merge_request *req, kvs_status want)
{
	kvs_merge_plan plan;
	kvs_error err = {0};
	kvs_status st =
	    kvs_merge_plan_make(live, 4, req, taken, NULL, &plan, &err);
	if (st != want)
		fail_msg("status %d (%s), want %d", st, err.message, want);
	return plan;
}

static void test_defaults(void **state)
{
	(void)state;
	setup_stack();
	memset(taken_names, 0, sizeof taken_names);

	/* all: a bit input makes the output bit, a typed one typed; the
	 * newest's K; the newest bit input's codes; the highest sequence */
	kvs_merge_request req = {0};
	kvs_merge_plan p = plan_of(&req, KVS_OK);
	assert_int_equal(p.first, 0);
	assert_int_equal(p.n, 4);
	assert_true(p.includes_oldest);
	assert_int_equal(p.options.output.profile, KVS_PROFILE_BIT);
	assert_int_equal(p.options.output.framing, KVS_FRAMING_TYPED);
	assert_int_equal(p.options.output.restart_interval, 32);
	assert_int_equal(p.options.output.sequence, 4);
	assert_true(p.options.output.custom_codes);
	assert_int_equal(p.options.output.codes[0].kind, KVS_CODE_FIXED);
	assert_int_equal(p.options.output.codes[0].param, 9);
	assert_string_equal(p.output, "seg-4.kvs");
	assert_int_equal(p.tombstones, 2);
	assert_int_equal(p.bytes_in, 1000);

	/* c and d: both byte and raw, so the output is byte raw */
	const char *cd[] = {"d.kvs", "c.kvs"};
	req.names = cd;
	req.n_names = 2;
	p = plan_of(&req, KVS_OK);
	assert_int_equal(p.first, 2);
	assert_int_equal(p.n, 2);
	assert_false(p.includes_oldest);
	assert_int_equal(p.options.output.profile, KVS_PROFILE_BYTE);
	assert_int_equal(p.options.output.framing, KVS_FRAMING_RAW);
	assert_false(p.options.output.custom_codes);

	/* b and c: typed (b), bit (b) though the newest is byte raw */
	const char *bc[] = {"b.kvs", "c.kvs"};
	req.names = bc;
	p = plan_of(&req, KVS_OK);
	assert_int_equal(p.options.output.profile, KVS_PROFILE_BIT);
	assert_int_equal(p.options.output.framing, KVS_FRAMING_TYPED);
	assert_int_equal(p.options.output.restart_interval, 4);
	assert_int_equal(p.options.output.sequence, 3);

	/* options win; a bit output of byte inputs gets the default codes */
	req.names = cd;
	req.profile_set = true;
	req.profile = KVS_PROFILE_BIT;
	req.restart_set = true;
	req.restart_interval = 7;
	p = plan_of(&req, KVS_OK);
	assert_int_equal(p.options.output.profile, KVS_PROFILE_BIT);
	assert_int_equal(p.options.output.restart_interval, 7);
	assert_false(p.options.output.custom_codes);

	/* taken names: the next free -N */
	taken_names[0] = "seg-4.kvs";
	taken_names[1] = "seg-4-2.kvs";
	memset(&req, 0, sizeof req);
	p = plan_of(&req, KVS_OK);
	assert_string_equal(p.output, "seg-4-3.kvs");
	req.output_name = "seg-4.kvs";
	p = plan_of(&req, KVS_E_EXISTS);
	assert_int_equal(p.problem, KVS_PLAN_OUTPUT_TAKEN);
	req.output_name = "mine.kvs";
	p = plan_of(&req, KVS_OK);
	assert_string_equal(p.output, "mine.kvs");
}

static void test_refusals(void **state)
{
	(void)state;
	setup_stack();
	memset(taken_names, 0, sizeof taken_names);
	kvs_merge_request req = {0};
	kvs_merge_plan p;

	const char *unknown[] = {"a.kvs", "zz.kvs"};
	req.names = unknown;
	req.n_names = 2;
	p = plan_of(&req, KVS_E_INVAL);
	assert_int_equal(p.problem, KVS_PLAN_UNKNOWN_NAME);
	assert_int_equal(p.problem_at, 1);

	const char *twice[] = {"b.kvs", "b.kvs"};
	req.names = twice;
	p = plan_of(&req, KVS_E_INVAL);
	assert_int_equal(p.problem, KVS_PLAN_NAME_TWICE);

	const char *gap[] = {"a.kvs", "c.kvs"};
	req.names = gap;
	p = plan_of(&req, KVS_E_INVAL);
	assert_int_equal(p.problem, KVS_PLAN_NOT_CONSECUTIVE);
	assert_int_equal(p.problem_at, 1);

	const char *bc[] = {"b.kvs", "c.kvs"};
	req.names = bc;
	req.drop_tombstones = true;
	p = plan_of(&req, KVS_E_INVAL);
	assert_int_equal(p.problem, KVS_PLAN_DROP_NOT_OLDEST);

	/* raw with a's tombstones kept: refused, naming a; dropped: fine */
	const char *ab[] = {"a.kvs", "b.kvs"};
	req.names = ab;
	req.drop_tombstones = false;
	req.framing_set = true;
	req.framing = KVS_FRAMING_RAW;
	p = plan_of(&req, KVS_E_INVAL);
	assert_int_equal(p.problem, KVS_PLAN_RAW_TOMBSTONES);
	assert_int_equal(p.problem_at, 0);
	req.drop_tombstones = true;
	p = plan_of(&req, KVS_OK);
	assert_int_equal(p.options.output.framing, KVS_FRAMING_RAW);

	/* codes need a bit output */
	memset(&req, 0, sizeof req);
	const char *cd[] = {"c.kvs", "d.kvs"};
	req.names = cd;
	req.n_names = 2;
	req.codes_set = true;
	kvs_default_codes(req.codes);
	p = plan_of(&req, KVS_E_INVAL);
	assert_int_equal(p.problem, KVS_PLAN_CODES_NOT_BIT);

	/* nothing to merge */
	kvs_error err;
	memset(&req, 0, sizeof req);
	assert_int_equal(
	    kvs_merge_plan_make(live, 0, &req, NULL, NULL, &p, &err),
	    KVS_E_INVAL);
	assert_int_equal(p.problem, KVS_PLAN_NOTHING);
}

/* control/merge's text: errno and, when accepted, the planner's plan */
static int parse(const char *text, const unsigned char *busy,
                 kvs_merge_plan *plan, control_error *e)
{
	char line[CONTROL_MAX_REQUEST + 2];
	size_t len = strlen(text);
	memcpy(line, text, len + 1);
	control_words w;
	int rc = control_split(line, len, &w, e);
	if (rc)
		return rc;
	if (!strcmp(w.word[0], "cancel")) {
		uint64_t id;
		return control_parse_cancel(&w, &id, e);
	}
	control_snapshot snap = {live, 4, busy, taken, NULL};
	return control_parse_merge(&w, &snap, plan, e);
}

static void expect_errno(const char *text, int want)
{
	kvs_merge_plan plan;
	control_error e = {0};
	int rc = parse(text, NULL, &plan, &e);
	if (rc != want)
		fail_msg("\"%s\": errno %d (%s), want %d", text, rc, e.msg,
		         want);
}

static void test_control(void **state)
{
	(void)state;
	setup_stack();
	memset(taken_names, 0, sizeof taken_names);
	expect_errno("merge all", 0);
	expect_errno("merge c.kvs d.kvs framing=raw restart=5 name=x.kvs", 0);
	expect_errno("merge a.kvs tombstones=drop", 0);
	expect_errno("", EINVAL);
	expect_errno(" merge all", EINVAL);
	expect_errno("merge  all", EINVAL);
	expect_errno("merge all\r", EINVAL);
	expect_errno("merge", EINVAL);
	expect_errno("merge all all", EINVAL);
	expect_errno("merge all a.kvs", EINVAL);
	expect_errno("merge all restart=0", EINVAL);
	expect_errno("merge all restart=015", EINVAL);
	expect_errno("merge all restart", EINVAL);
	expect_errno("merge all colour=red", EINVAL);
	expect_errno("merge all profile=word", EINVAL);
	expect_errno("merge all restart=4 restart=5", EINVAL);
	expect_errno("merge nosuch.kvs", ENOENT);
	expect_errno("merge .hidden", EINVAL);
	expect_errno("merge a.kvs c.kvs", EINVAL);
	expect_errno("merge b.kvs a.kvs b.kvs", EINVAL);
	expect_errno("merge b.kvs tombstones=drop", EINVAL);
	expect_errno("merge a.kvs framing=raw", EINVAL);
	expect_errno("frobnicate", EINVAL);
	expect_errno("cancel 01", EINVAL);
	expect_errno("cancel 7", 0);
	taken_names[0] = "x.kvs";
	expect_errno("merge all name=x.kvs", EEXIST);

	/* busy inputs */
	const unsigned char busy[4] = {0, CONTROL_BUSY, 0, 0};
	kvs_merge_plan plan;
	control_error e = {0};
	assert_int_equal(parse("merge all", busy, &plan, &e), EBUSY);
	assert_int_equal(parse("merge c.kvs d.kvs", busy, &plan, &e), 0);

	/* the parser's plan is the planner's for the same request */
	memset(taken_names, 0, sizeof taken_names);
	assert_int_equal(parse("merge c.kvs b.kvs restart=3", NULL, &plan, &e),
	                 0);
	const char *bc[] = {"b.kvs", "c.kvs"};
	kvs_merge_request req = {.names = bc,
	                         .n_names = 2,
	                         .restart_set = true,
	                         .restart_interval = 3};
	kvs_merge_plan want = plan_of(&req, KVS_OK);
	assert_memory_equal(&plan, &want, sizeof plan);
}

int main(int argc, char **argv)
{
	test_filter_from_argv(argc, argv);
	const struct CMUnitTest tests[] = {
	    TEST(test_defaults),
	    TEST(test_refusals),
	    TEST(test_control),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
