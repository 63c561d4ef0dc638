/*
 * test_names.c — segfs's name mapping (fs/names.c, docs/USAGE.md "Names"):
 * vectors written from the documented table (the SHA-256 digests come from
 * Python's hashlib), round trips of random components, distinctness, and
 * the refusal of every non-canonical spelling.
 */
#include "testutil.h"

#include <string.h>

#include "names.h"

static uint64_t g_seed;

static void expect_name(const void *comp, uint64_t bits, const char *want)
{
	char name[SEGFS_NAME_MAX + 1];
	size_t n = segfs_name_encode(comp, bits, name);
	if (n != strlen(want) || strcmp(name, want) != 0)
		fail_msg("encode(%zu bits): got \"%s\", want \"%s\"",
		         (size_t)bits, name, want);
	assert_true(segfs_name_matches(comp, bits, want, strlen(want)));
}

static void test_vectors(void **state)
{
	(void)state;
	expect_name("", 0, "%_");
	expect_name(".", 8, "%2E");
	expect_name("..", 16, "%2E%2E");
	expect_name("...", 24, "...");
	expect_name(".profile", 64, ".profile");
	expect_name("a/b", 24, "a%2Fb");
	expect_name("100%", 32, "100%25");
	expect_name("a\0b", 24, "a%00b");
	expect_name("sp ace~", 56, "sp ace~");
	expect_name("\x7f\x1f\t", 24, "%7F%1F%09");
	expect_name("caf\xc3\xa9", 40, "caf\xc3\xa9");           /* é */
	expect_name("\xe2\x82\xac", 24, "\xe2\x82\xac");         /* € */
	expect_name("\xf0\x9f\x98\x80", 32, "\xf0\x9f\x98\x80"); /* 😀 */
	expect_name("\xc2\xa0", 16, "\xc2\xa0");                 /* U+00A0 */
	expect_name("\xc2\x85", 16, "%C2%85");             /* C1 control */
	expect_name("\xed\xa0\x80", 24, "%ED%A0%80");      /* surrogate */
	expect_name("\xc0\xaf", 16, "%C0%AF");             /* overlong */
	expect_name("\xe0\x80\xaf", 24, "%E0%80%AF");      /* overlong */
	expect_name("\xf4\x90\x80\x80", 32, "%F4%90%80%80"); /* > U+10FFFF */
	expect_name("\xc3", 8, "%C3");                     /* cut short */
	expect_name("\xc3\xa9", 12, "%C3%:1010");          /* bits cut it */
	expect_name("\xff\xfe", 16, "%FF%FE");
	expect_name("\x80", 1, "%:1");
	expect_name("\x00", 1, "%:0");
	expect_name("ab\xa0", 19, "ab%:101");
	expect_name(".\x80", 9, ".%:1");

	char key[300];
	memset(key, 'x', sizeof key);
	char want[256];
	memset(want, 'x', 221);
	memcpy(want + 221, "%#be70fcedbaa2c6d441e18c7e2dc0a895", 35);
	expect_name(key, 2400, want);
	/* 100 bytes of 0x01: 300 bytes of escapes; 73 whole escapes fit */
	memset(key, 1, 100);
	for (int i = 0; i < 73; i++)
		memcpy(want + 3 * i, "%01", 3);
	memcpy(want + 219, "%#dab3b8c9f87c76f3e4958e793273b006", 35);
	expect_name(key, 800, want);
	/* exactly 255 bytes: not hashed */
	memset(key, 'y', 255);
	memset(want, 'y', 255);
	want[255] = '\0';
	expect_name(key, 255 * 8, want);
}

static void test_noncanonical(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "%2e",     "%61",      "%2E.",   "%2Ex",    "caf%C3%A9", "%41",
	    "%e9",     "%C3%a9",   "%c3%A9", "x%2f",    "%_%_",
	    "\x7f",    "\x01",     "\xc3",   "\xc2\x85",
	};
	uint8_t key[SEGFS_NAME_MAX + 8];
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		uint64_t bits;
		size_t len = strlen(bad[i]);
		segfs_name_kind k = segfs_name_decode(bad[i], len, key, &bits);
		if (k == SEGFS_NAME_EXACT &&
		    segfs_name_matches(key, bits, bad[i], len))
			fail_msg("\"%s\" is accepted as canonical", bad[i]);
	}
	static const char *const invalid[] = {
	    "%",        "%4",       "%zz",  "%G0",   "a%",  "%:",
	    "%:2",      "%:10000000", "%:1x", "%#",  "%#0123",
	    "%#0123456789abcdef0123456789ABCDEF",
	    "%#0123456789abcdef0123456789abcdef0", "a/b",
	};
	for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++) {
		uint64_t bits;
		assert_int_equal(segfs_name_decode(invalid[i], strlen(invalid[i]),
		                                   key, &bits),
		                 SEGFS_NAME_INVALID);
	}
	uint64_t bits;
	assert_int_equal(segfs_name_decode("", 0, key, &bits),
	                 SEGFS_NAME_INVALID);
	char longname[SEGFS_NAME_MAX + 2];
	memset(longname, 'a', sizeof longname);
	assert_int_equal(segfs_name_decode(longname, SEGFS_NAME_MAX + 1, key,
	                                   &bits),
	                 SEGFS_NAME_INVALID);
}

/* A random component drawn from the interesting bytes. */
static size_t random_comp(test_rng *r, uint8_t *out, size_t max,
                          uint64_t *bits)
{
	static const char *const pieces[] = {
	    "a", "Z", "0", ".", "..", "%", "/", " ", "~", "\xc3\xa9",
	    "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xc2\x85", "\xed\xa0\x80",
	    "\xc0", "\x80", "\xff", "%41", "\x01", "\x7f",
	};
	size_t n = 0;
	size_t want = (size_t)test_rng_below(r, 8) == 0
	                  ? (size_t)test_rng_below(r, max)
	                  : (size_t)test_rng_below(r, 24);
	while (n < want) {
		if (test_rng_below(r, 4) == 0) {
			out[n++] = (uint8_t)test_rng_next(r);
			continue;
		}
		const char *p = pieces[test_rng_below(r, 20)];
		size_t l = strlen(p) ? strlen(p) : 1;
		if (n + l > max)
			break;
		memcpy(out + n, p, l);
		n += l;
	}
	*bits = (uint64_t)n * 8;
	if (n < max && test_rng_below(r, 4) == 0) {
		unsigned t = 1 + (unsigned)test_rng_below(r, 7);
		out[n] = (uint8_t)(test_rng_next(r) & (0xFF00u >> t));
		*bits += t;
		n++;
	}
	return n;
}

static void test_round_trip(void **state)
{
	(void)state;
	test_rng r = test_rng_for(g_seed, 1);
	uint8_t comp[1200], dec[SEGFS_NAME_MAX + 8];
	char name[SEGFS_NAME_MAX + 1];
	for (int iter = 0; iter < 200000; iter++) {
		uint64_t bits;
		random_comp(&r, comp, sizeof comp, &bits);
		size_t len = segfs_name_encode(comp, bits, name);
		assert_true(len >= 1 && len <= SEGFS_NAME_MAX);
		assert_int_equal(strlen(name), len);
		assert_null(memchr(name, '/', len));
		assert_false(len <= 2 && name[0] == '.' &&
		             (len == 1 || name[1] == '.'));
		uint64_t dbits;
		segfs_name_kind k = segfs_name_decode(name, len, dec, &dbits);
		if (k == SEGFS_NAME_EXACT) {
			assert_int_equal(dbits, bits);
			assert_memory_equal(dec, comp, (size_t)((bits + 7) / 8));
		} else {
			assert_int_equal(k, SEGFS_NAME_HASHED);
			/* a prefix of at most 221 bytes, %#, 32 hex digits */
			assert_true(len >= 34 &&
			            len - 34 <= SEGFS_NAME_HASH_PREFIX);
			assert_memory_equal(name + len - 34, "%#", 2);
			assert_true(dbits % 8 == 0 && dbits < bits);
			assert_memory_equal(dec, comp, (size_t)(dbits / 8));
		}
		assert_true(segfs_name_matches(comp, bits, name, len));
	}
}

/* Components that differ only late (or only in their bit length) get
 * different names. */
static void test_distinct(void **state)
{
	(void)state;
	enum { N = 2000 };
	static char names[N][SEGFS_NAME_MAX + 1];
	uint8_t comp[600];
	test_rng r = test_rng_for(g_seed, 2);
	for (int i = 0; i < N; i++) {
		size_t len = i % 2 ? 500 : 10;
		memset(comp, 'p', len);
		comp[len - 1] = (uint8_t)i;
		comp[len - 2] = (uint8_t)(i >> 8);
		uint64_t bits = (uint64_t)len * 8;
		if (i % 4 == 3) /* the same bytes, one bit shorter */
			bits -= 1 + test_rng_below(&r, 6);
		segfs_name_encode(comp, bits, names[i]);
	}
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++)
			if (strcmp(names[i], names[j]) == 0)
				fail_msg("components %d and %d share \"%s\"", i,
				         j, names[i]);
}

int main(int argc, char **argv)
{
	test_filter_from_argv(argc, argv);
	g_seed = test_seed_from_env("test_names", 0x5e6f5);
	const struct CMUnitTest tests[] = {
	    TEST(test_vectors),
	    TEST(test_noncanonical),
	    TEST(test_round_trip),
	    TEST(test_distinct),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
