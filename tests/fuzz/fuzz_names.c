/*
 * fuzz_names — libFuzzer target for segfs's name mapping (fs/names.c,
 * docs/USAGE.md "Names"): file names come from whoever looks a path up.
 *
 * Each input is used twice. As a name: decoding it must not fail badly,
 * and a name accepted as canonical must encode back to itself. As a key
 * component (its first byte gives a bit length cut): the encoded name is
 * at most 255 bytes without '/' or NUL, decodes back to the component (or,
 * when hashed, to a prefix of it), and matches it.
 */
#include <stdint.h>
#include <string.h>

#include "names.h"

#include "fuzz_util.h"

static void one(const uint8_t *data, size_t size)
{
	uint8_t key[SEGFS_NAME_MAX + 8];
	uint64_t bits;
	if (size >= 1 && size <= SEGFS_NAME_MAX &&
	    !memchr(data, '\0', size)) {
		const char *name = (const char *)data;
		segfs_name_kind k = segfs_name_decode(name, size, key, &bits);
		if (k == SEGFS_NAME_EXACT &&
		    segfs_name_matches(key, bits, name, size)) {
			char again[SEGFS_NAME_MAX + 1];
			size_t n = segfs_name_encode(key, bits, again);
			check(n == size && memcmp(again, name, size) == 0);
		}
	}
	if (size == 0)
		return;
	unsigned cut = data[0] % 8; /* drop up to 7 final bits */
	const uint8_t *comp = data + 1;
	uint64_t cbits = (uint64_t)(size - 1) * 8;
	if (cbits < cut)
		return;
	cbits -= cut;
	char name[SEGFS_NAME_MAX + 1];
	size_t n = segfs_name_encode(comp, cbits, name);
	check(n >= 1 && n <= SEGFS_NAME_MAX && strlen(name) == n);
	check(!memchr(name, '/', n));
	check(segfs_name_matches(comp, cbits, name, n));
	segfs_name_kind k = segfs_name_decode(name, n, key, &bits);
	if (k == SEGFS_NAME_EXACT) {
		check(bits == cbits);
		size_t nb = (size_t)(bits / 8);
		check(memcmp(key, comp, nb) == 0);
		if (bits % 8) {
			uint8_t mask = (uint8_t)(0xFF00u >> (bits % 8));
			check((key[nb] & mask) == (comp[nb] & mask));
		}
	} else {
		check(k == SEGFS_NAME_HASHED);
		check(bits % 8 == 0 && bits < cbits);
		check(memcmp(key, comp, (size_t)(bits / 8)) == 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy = fuzz_copy(data, size); /* exact size, for ASan */
	if (copy) {
		one(copy, size);
		free(copy);
	}
	return 0;
}
