/*
 * ef_ops.h — the query paths of Elias-Fano (select, get, next_geq, cursor
 * seek), written once and compiled twice by ef.c: a portable instance and
 * one for CPUs with POPCNT and BMI2 (PDEP turns select-in-a-word into two
 * instructions). ef.c defines, before each inclusion:
 *   EF_FN(name)    the instance's name for name
 *   EF_ATTR        the instance's function attributes (target)
 *   EF_POPCOUNT(w) ones in a 64-bit word
 *   EF_SELECT(w,k) position of the k-th (0-based) one of w, k < popcount
 *
 * The data may be unvalidated (only kvsi_ef_open'd): every word index is
 * checked against upper_words, so corrupt samples give wrong answers or
 * KVS_E_CORRUPT but never a load outside the data.
 */

/*
 * Position of bit number j among the bits of upper equal to `one`, found
 * from its sample and a scan; UINT64_MAX if the data lies. flip is 0 to
 * select ones and all-ones to select zeros (the words are inverted).
 */
EF_ATTR static inline uint64_t EF_FN(select)(const kvsi_ef *ef,
                                             const uint8_t *samples,
                                             uint64_t flip, uint64_t j)
{
	uint64_t pos = kvs_load_le64(samples + 8 * (j >> KVS_EF_SAMPLE_SHIFT));
	uint64_t k = j & ((1u << KVS_EF_SAMPLE_SHIFT) - 1);
	uint64_t wi = pos >> 6;
	if (wi >= ef->upper_words)
		return UINT64_MAX;
	uint64_t w = (kvs_load_le64(ef->upper + 8 * wi) ^ flip) &
	             (~(uint64_t)0 << (pos & 63));
	for (;;) {
		uint64_t c = (uint64_t)EF_POPCOUNT(w);
		if (k < c)
			break;
		k -= c;
		if (++wi >= ef->upper_words)
			return UINT64_MAX;
		w = kvs_load_le64(ef->upper + 8 * wi) ^ flip;
	}
	return wi * 64 + EF_SELECT(w, (unsigned)k);
}

/* Position of one number j (j < count), or UINT64_MAX. */
EF_ATTR static inline uint64_t EF_FN(select1)(const kvsi_ef *ef, uint64_t j)
{
	return EF_FN(select)(ef, ef->one_samples, 0, j);
}

/* Position of zero number j (j < zero_count), or UINT64_MAX. */
EF_ATTR static inline uint64_t EF_FN(select0)(const kvsi_ef *ef, uint64_t j)
{
	return EF_FN(select)(ef, ef->zero_samples, ~(uint64_t)0, j);
}

EF_ATTR static kvs_status EF_FN(get)(const kvsi_ef *ef, uint64_t i,
                                     uint64_t *value)
{
	if (i >= ef->count)
		return KVS_E_RANGE;
	uint64_t pos = EF_FN(select1)(ef, i);
	if (pos == UINT64_MAX)
		return KVS_E_CORRUPT;
	*value = ((pos - i) << ef->low_bits) | kvsi_ef_low_(ef, i);
	return KVS_OK;
}

EF_ATTR static uint64_t EF_FN(next_geq)(const kvsi_ef *ef, uint64_t x,
                                        uint64_t *value)
{
	uint64_t n = ef->count;
	if (n == 0 || x > ef->max)
		return n;
	unsigned l = ef->low_bits;
	uint64_t h = x >> l; /* <= max >> l = zero_count */
	uint64_t x_low = l ? x & (~(uint64_t)0 >> (64 - l)) : 0;

	/* Bucket h holds the elements between zero h-1 and zero h. */
	uint64_t lo = 0, hi = n;
	if (h > 0) {
		uint64_t z = EF_FN(select0)(ef, h - 1);
		lo = z == UINT64_MAX ? n : z + 1 - h;
	}
	if (h < ef->zero_count) {
		uint64_t z = EF_FN(select0)(ef, h);
		hi = z == UINT64_MAX ? n : z - h;
	}
	if (lo > n) /* only for corrupt data */
		lo = n;
	if (hi > n || hi < lo)
		hi = hi > n ? n : lo;

	/* Lows are sorted inside a bucket: the first one >= x_low. */
	while (hi - lo > 8) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (kvsi_ef_low_(ef, mid) < x_low)
			lo = mid + 1;
		else
			hi = mid;
	}
	uint64_t end = hi;
	while (lo < end && kvsi_ef_low_(ef, lo) < x_low)
		lo++;
	if (lo < end) {
		if (value)
			*value = (h << l) | kvsi_ef_low_(ef, lo);
		return lo;
	}
	/* Everything in bucket h is below x: the answer opens a later bucket.
	 */
	if (lo < n && value && EF_FN(get)(ef, lo, value) != KVS_OK)
		return n;
	return lo;
}

EF_ATTR static kvs_status EF_FN(cursor_seek)(kvsi_ef_cursor *c,
                                             const kvsi_ef *ef, uint64_t i)
{
	c->ef = ef;
	if (i > ef->count)
		return KVS_E_RANGE;
	c->index = i;
	c->value = 0;
	c->word_index = 0;
	c->word = 0;
	if (i == ef->count)
		return KVS_OK;
	uint64_t pos = EF_FN(select1)(ef, i);
	if (pos == UINT64_MAX) {
		c->index = ef->count;
		return KVS_E_CORRUPT;
	}
	c->word_index = pos >> 6;
	/* Keep only the ones after pos (2 << 63 wraps to 0: no bits left). */
	c->word = kvs_load_le64(ef->upper + 8 * c->word_index) &
	          ~(((uint64_t)2 << (pos & 63)) - 1);
	c->value = ((pos - i) << ef->low_bits) | kvsi_ef_low_(ef, i);
	return KVS_OK;
}

/*
 * The samples of the c set bits of w, which are the ones of upper word wi
 * (or its zeros, inverted) numbered n .. n + c - 1: false if one of them
 * does not hold its bit's position. The caller has checked that they are
 * within the count, so the samples read exist.
 */
EF_ATTR static inline bool EF_FN(samples_hold)(const uint8_t *samples,
                                               uint64_t wi, uint64_t w,
                                               uint64_t n, uint64_t c)
{
	uint64_t j = (n + SAMPLE_MASK) & ~(uint64_t)SAMPLE_MASK;
	for (; j < n + c; j += (uint64_t)1 << KVS_EF_SAMPLE_SHIFT)
		if (kvs_load_le64(samples + 8 * (j >> KVS_EF_SAMPLE_SHIFT)) !=
		    wi * 64 + EF_SELECT(w, (unsigned)(j - n)))
			return false;
	return true;
}

/*
 * kvsi_ef_validate's walk of the upper bits, a word at a time: the counts
 * of ones and zeros, every sample, the order and the last element. Ones
 * at positions p < q that are neighbours in the ones hold elements whose
 * high parts (position minus index) are equal when q = p + 1 and larger
 * at q otherwise, so the order needs checking only where two ones are
 * adjacent: there the low bits must not decrease.
 */
EF_ATTR static kvs_status EF_FN(validate_upper)(const kvsi_ef *ef)
{
	unsigned l = ef->low_bits;
	uint64_t ones = 0, zeros = 0, last = 0, carry = 0;
	for (uint64_t wi = 0; wi < ef->upper_words; wi++) {
		uint64_t w = kvs_load_le64(ef->upper + 8 * wi);
		unsigned valid =
		    wi + 1 < ef->upper_words || ef->upper_bits % 64 == 0
		        ? 64
		        : (unsigned)(ef->upper_bits % 64);
		uint64_t zw = ~w & (valid == 64 ? ~(uint64_t)0
		                                : ((uint64_t)1 << valid) - 1);
		uint64_t c1 = (uint64_t)EF_POPCOUNT(w),
		         c0 = (uint64_t)EF_POPCOUNT(zw);
		if (c1 > ef->count - ones || c0 > ef->zero_count - zeros)
			return KVS_E_CORRUPT;
		if (!EF_FN(samples_hold)(ef->one_samples, wi, w, ones, c1) ||
		    !EF_FN(samples_hold)(ef->zero_samples, wi, zw, zeros, c0))
			return KVS_E_CORRUPT;
		if (l && (w & 1) && carry &&
		    kvsi_ef_low_(ef, ones) < kvsi_ef_low_(ef, ones - 1))
			return KVS_E_CORRUPT;
		/* bit p of pairs: ones at p and p + 1 */
		for (uint64_t pairs = l ? w & (w >> 1) : 0; pairs;
		     pairs &= pairs - 1) {
			unsigned p = (unsigned)__builtin_ctzll(pairs);
			uint64_t e = ones + (uint64_t)EF_POPCOUNT(
			                        w & (((uint64_t)1 << p) - 1));
			if (kvsi_ef_low_(ef, e + 1) < kvsi_ef_low_(ef, e))
				return KVS_E_CORRUPT;
		}
		if (w)
			last = wi * 64 + 63 - (uint64_t)__builtin_clzll(w);
		carry = w >> 63;
		ones += c1;
		zeros += c0;
	}
	if (ones != ef->count || zeros != ef->zero_count)
		return KVS_E_CORRUPT;
	if (ones > 0 && (((last - (ones - 1)) << l) |
	                 kvsi_ef_low_(ef, ones - 1)) != ef->max)
		return KVS_E_CORRUPT;
	return KVS_OK;
}
