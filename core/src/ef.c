/*
 * ef.c — Elias-Fano sequences (kvseg/ef.h, docs/FORMAT.md §4): sizing,
 * the streaming builder, the constant-time open check, the full validator,
 * and dispatch between the portable and the POPCNT/BMI2 query paths.
 */
#include "kvseg/ef.h"

#include <string.h>

#define SAMPLE_MASK ((1u << KVS_EF_SAMPLE_SHIFT) - 1)

/* ---- geometry ------------------------------------------------------------ */

typedef struct ef_geometry {
	unsigned low_bits;
	uint64_t low_words, upper_bits, upper_words, zero_count;
	uint64_t one_samples, zero_samples;
	size_t size;
} ef_geometry;

unsigned kvsi_ef_low_bits(uint64_t count, uint64_t max)
{
	if (count == 0 || max / count == 0)
		return 0;
	return 63 - (unsigned)__builtin_clzll(max / count);
}

static uint64_t div_ceil(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

static kvs_status geometry(uint64_t count, uint64_t max, ef_geometry *g)
{
	if (count > KVS_EF_MAX_COUNT)
		return KVS_E_RANGE;
	if (count == 0 && max != 0)
		return KVS_E_INVAL;
	g->low_bits = kvsi_ef_low_bits(count, max);
	/* max >> l < 2 * count, so nothing below overflows (count < 2^48). */
	g->zero_count = max >> g->low_bits;
	g->low_words = div_ceil(count * g->low_bits, 64);
	g->upper_bits = count + g->zero_count;
	g->upper_words = div_ceil(g->upper_bits, 64);
	g->one_samples = div_ceil(count, 1u << KVS_EF_SAMPLE_SHIFT);
	g->zero_samples = div_ceil(g->zero_count, 1u << KVS_EF_SAMPLE_SHIFT);
	uint64_t words =
	    g->low_words + g->upper_words + g->one_samples + g->zero_samples;
	if (words > (SIZE_MAX - KVS_EF_HEADER_BYTES) / 8)
		return KVS_E_RANGE;
	g->size = KVS_EF_HEADER_BYTES + (size_t)words * 8;
	return KVS_OK;
}

kvs_status kvsi_ef_size(uint64_t count, uint64_t max, size_t *bytes)
{
	ef_geometry g;
	kvs_status st = geometry(count, max, &g);
	if (st == KVS_OK)
		*bytes = g.size;
	return st;
}

/* ---- builder ------------------------------------------------------------- */

static void or_word(uint8_t *p, uint64_t bits)
{
	kvs_store_le64(p, kvs_load_le64(p) | bits);
}

kvs_status kvsi_ef_builder_init(kvsi_ef_builder *b, uint64_t count,
                                uint64_t max, void *out, size_t out_len)
{
	ef_geometry g;
	kvs_status st = geometry(count, max, &g);
	if (st != KVS_OK)
		return st;
	if (out_len < g.size)
		return KVS_E_NOSPACE;
	memset(b, 0, sizeof *b);
	memset(out, 0, g.size);
	b->count = count;
	b->max = max;
	b->low_bits = g.low_bits;
	uint8_t *o = out;
	b->low = o + KVS_EF_HEADER_BYTES;
	b->upper = b->low + 8 * g.low_words;
	b->one_samples = b->upper + 8 * g.upper_words;
	b->zero_samples = b->one_samples + 8 * g.one_samples;
	kvs_store_le64(o, count);
	kvs_store_le64(o + 8, max);
	o[16] = KVS_EF_VERSION;
	o[17] = (uint8_t)g.low_bits;
	o[18] = KVS_EF_SAMPLE_SHIFT;
	return KVS_OK;
}

/*
 * The words of low and upper being filled are kept in registers (lw, uw)
 * and ORed into the output when the next word starts and at the end of
 * the call: a word may have been started by an earlier call. Their
 * indices (li, ui) start at the next element's words, which lie in the
 * output while elements remain.
 */
kvs_status kvsi_ef_builder_push_n(kvsi_ef_builder *b, const uint64_t *values,
                                  size_t n)
{
	/* in locals: the stores into the output might alias *b */
	uint64_t i = b->pushed, last = b->last, zeros = b->zeros_written;
	const uint64_t count = b->count, max = b->max;
	uint8_t *const lo = b->low, *const up = b->upper,
	               *const ones = b->one_samples,
	               *const zs = b->zero_samples;
	unsigned l = b->low_bits;
	uint64_t low_mask = l ? ~(uint64_t)0 >> (64 - l) : 0;
	uint64_t li = i * l / 64, lw = 0, ui = (zeros + i) / 64, uw = 0;
	kvs_status st = KVS_OK;
	/* last is 0 before the first push: no value is below it */
	size_t room = count - i < n ? (size_t)(count - i) : n;
	for (size_t k = 0; k < room; k++, i++) {
		uint64_t value = values[k];
		if (value < last || value > max) {
			st = KVS_E_ORDER;
			break;
		}
		if (l) {
			uint64_t low = value & low_mask, bit = i * l;
			unsigned off = (unsigned)(bit & 63);
			if (bit / 64 != li) {
				or_word(lo + 8 * li, lw);
				li = bit / 64;
				lw = 0;
			}
			lw |= low << off;
			if (off + l > 64) { /* the rest starts the next word */
				or_word(lo + 8 * li, lw);
				li++;
				lw = low >> (64 - off);
			}
		}
		uint64_t high = value >> l;
		/* Zeros zeros .. high-1 precede this element's one; zero j
		 * sits at position j + i. Record the sampled ones among
		 * them. */
		for (uint64_t j =
		         (zeros + SAMPLE_MASK) & ~(uint64_t)SAMPLE_MASK;
		     j < high; j += 1u << KVS_EF_SAMPLE_SHIFT)
			kvs_store_le64(zs + 8 * (j >> KVS_EF_SAMPLE_SHIFT),
			               j + i);
		zeros = high;
		uint64_t pos = high + i;
		if (pos / 64 != ui) {
			or_word(up + 8 * ui, uw);
			ui = pos / 64;
			uw = 0;
		}
		uw |= (uint64_t)1 << (pos & 63);
		if ((i & SAMPLE_MASK) == 0)
			kvs_store_le64(ones + 8 * (i >> KVS_EF_SAMPLE_SHIFT),
			               pos);
		last = value;
	}
	if (lw)
		or_word(lo + 8 * li, lw);
	if (uw)
		or_word(up + 8 * ui, uw);
	if (st == KVS_OK && room < n) /* count values pushed */
		st = KVS_E_RANGE;
	b->pushed = i;
	b->last = last;
	b->zeros_written = zeros;
	return st;
}

kvs_status kvsi_ef_builder_push(kvsi_ef_builder *b, uint64_t value)
{
	return kvsi_ef_builder_push_n(b, &value, 1);
}

kvs_status kvsi_ef_builder_finish(kvsi_ef_builder *b)
{
	if (b->pushed != b->count || (b->count > 0 && b->last != b->max))
		return KVS_E_INVAL;
	return KVS_OK;
}

kvs_status kvsi_ef_build(const uint64_t *values, uint64_t count, void *out,
                         size_t out_len)
{
	kvsi_ef_builder b;
	kvs_status st = kvsi_ef_builder_init(
	    &b, count, count ? values[count - 1] : 0, out, out_len);
	/* an array of count values: count fits a size_t (or finish fails) */
	if (st == KVS_OK)
		st = kvsi_ef_builder_push_n(&b, values, (size_t)count);
	return st == KVS_OK ? kvsi_ef_builder_finish(&b) : st;
}

/* ---- query instances ----------------------------------------------------- */

static inline unsigned popcount_portable(uint64_t w)
{
	w = w - ((w >> 1) & 0x5555555555555555ull);
	w = (w & 0x3333333333333333ull) + ((w >> 2) & 0x3333333333333333ull);
	w = (w + (w >> 4)) & 0x0F0F0F0F0F0F0F0Full;
	return (unsigned)((w * 0x0101010101010101ull) >> 56);
}

/* k-th one of w (k < popcount(w)): find the byte by its running count,
 * then clear the lower ones inside it. */
static inline unsigned select_portable(uint64_t w, unsigned k)
{
	unsigned base = 0;
	for (;;) {
		unsigned c = popcount_portable(w & 0xFF);
		if (k < c)
			break;
		k -= c;
		w >>= 8;
		base += 8;
	}
	while (k--)
		w &= w - 1;
	return base + (unsigned)__builtin_ctzll(w);
}

#define EF_FN(name) ef_##name##_portable
#define EF_ATTR
#define EF_POPCOUNT(w)  popcount_portable(w)
#define EF_SELECT(w, k) select_portable(w, k)
#include "ef_ops.h"
#undef EF_FN
#undef EF_ATTR
#undef EF_POPCOUNT
#undef EF_SELECT

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define ACCEL_TARGET __attribute__((target("popcnt,bmi,bmi2")))

ACCEL_TARGET static inline unsigned select_bmi2(uint64_t w, unsigned k)
{
	return (unsigned)__builtin_ctzll(_pdep_u64((uint64_t)1 << k, w));
}

#define EF_FN(name)     ef_##name##_accel
#define EF_ATTR         ACCEL_TARGET
#define EF_POPCOUNT(w)  __builtin_popcountll(w)
#define EF_SELECT(w, k) select_bmi2(w, k)
#include "ef_ops.h"
#undef EF_FN
#undef EF_ATTR
#undef EF_POPCOUNT
#undef EF_SELECT

static bool cpu_has_accel(void)
{
	return __builtin_cpu_supports("popcnt") &&
	       __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
}
#else
#define ef_get_accel         ef_get_portable
#define ef_next_geq_accel    ef_next_geq_portable
#define ef_cursor_seek_accel ef_cursor_seek_portable
#define ef_validate_upper_accel ef_validate_upper_portable
static bool cpu_has_accel(void)
{
	return false;
}
#endif

kvs_status kvsi_ef_get(const kvsi_ef *ef, uint64_t i, uint64_t *value)
{
	return ef->accel ? ef_get_accel(ef, i, value)
	                 : ef_get_portable(ef, i, value);
}

uint64_t kvsi_ef_next_geq(const kvsi_ef *ef, uint64_t x, uint64_t *value)
{
	return ef->accel ? ef_next_geq_accel(ef, x, value)
	                 : ef_next_geq_portable(ef, x, value);
}

kvs_status kvsi_ef_cursor_seek(kvsi_ef_cursor *c, const kvsi_ef *ef, uint64_t i)
{
	return ef->accel ? ef_cursor_seek_accel(c, ef, i)
	                 : ef_cursor_seek_portable(c, ef, i);
}

void kvsi_ef_set_portable(kvsi_ef *ef, bool portable)
{
	ef->accel = !portable && cpu_has_accel();
}

/* ---- open and validate --------------------------------------------------- */

kvs_status kvsi_ef_open(kvsi_ef *ef, const void *data, size_t len)
{
	const uint8_t *p = data;
	memset(ef, 0, sizeof *ef);
	if (len < KVS_EF_HEADER_BYTES)
		return KVS_E_TRUNCATED;
	uint64_t count = kvs_load_le64(p), max = kvs_load_le64(p + 8);
	if (p[16] != KVS_EF_VERSION || p[18] != KVS_EF_SAMPLE_SHIFT)
		return KVS_E_CORRUPT;
	for (int i = 19; i < KVS_EF_HEADER_BYTES; i++)
		if (p[i] != 0)
			return KVS_E_CORRUPT;
	ef_geometry g;
	if (geometry(count, max, &g) != KVS_OK || p[17] != g.low_bits)
		return KVS_E_CORRUPT;
	if (len != g.size)
		return len < g.size ? KVS_E_TRUNCATED : KVS_E_CORRUPT;
	ef->count = count;
	ef->max = max;
	ef->low_bits = g.low_bits;
	ef->low = p + KVS_EF_HEADER_BYTES;
	ef->upper = ef->low + 8 * g.low_words;
	ef->one_samples = ef->upper + 8 * g.upper_words;
	ef->zero_samples = ef->one_samples + 8 * g.one_samples;
	ef->upper_bits = g.upper_bits;
	ef->upper_words = g.upper_words;
	ef->zero_count = g.zero_count;
	ef->size = g.size;
	kvsi_ef_set_portable(ef, false);
	return KVS_OK;
}

kvs_status kvsi_ef_validate(const kvsi_ef *ef)
{
	unsigned l = ef->low_bits;
	uint64_t low_words = ef->upper - ef->low;
	low_words /= 8;
	/* Padding after the last low and upper bits is zero. */
	uint64_t low_used = ef->count * l;
	if (low_used % 64 &&
	    kvs_load_le64(ef->low + 8 * (low_words - 1)) >> (low_used % 64))
		return KVS_E_CORRUPT;
	if (ef->upper_bits % 64 &&
	    kvs_load_le64(ef->upper + 8 * (ef->upper_words - 1)) >>
	        (ef->upper_bits % 64))
		return KVS_E_CORRUPT;

	return ef->accel ? ef_validate_upper_accel(ef)
	                 : ef_validate_upper_portable(ef);
}
