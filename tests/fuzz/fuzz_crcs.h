/*
 * fuzz_crcs.h — for the libFuzzer targets that take a segment file
 * (fuzz_segment, fuzz_merge, fuzz_view): its CRC32Cs recomputed, so that
 * mutations reach the checks and decoders behind the checksums.
 */
#ifndef SEGFS_FUZZ_CRCS_H
#define SEGFS_FUZZ_CRCS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvseg/crc32c.h"

#include "fuzz_util.h"

static inline uint32_t fuzz_load_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline void fuzz_store_le32(uint8_t *p, uint32_t v)
{
	for (int k = 0; k < 4; k++)
		p[k] = (uint8_t)(v >> (8 * k));
}

/* Recomputes a segment file's body and header CRC32Cs in place (FORMAT.md
 * §5.1); false when the directory does not fit. */
static inline bool fuzz_fix_crcs(uint8_t *f, size_t size)
{
	if (size < 128)
		return false;
	uint64_t dir_end = 128 + 32 * (uint64_t)fuzz_load_le32(f + 52);
	if (dir_end > size)
		return false;
	fuzz_store_le32(f + 120,
	                kvsi_crc32c(0, f + dir_end, size - (size_t)dir_end));
	uint32_t h = kvsi_crc32c(0, f, 124);
	fuzz_store_le32(f + 124,
	                kvsi_crc32c(h, f + 128, (size_t)dir_end - 128));
	return true;
}

/*
 * The body of a target's entry point: exercise(buf, size, data) on an
 * exact-size heap copy of the input (so AddressSanitizer sees any read
 * past its end), then again on one with its CRC32Cs recomputed when that
 * differs from the input.
 */
static inline void fuzz_with_crcs(const uint8_t *data, size_t size,
                                  void (*exercise)(const uint8_t *buf,
                                                   size_t size,
                                                   const uint8_t *data))
{
	uint8_t *buf = fuzz_copy(data, size);
	if (!buf)
		return;
	exercise(buf, size, data);
	memcpy(buf, data, size);
	if (fuzz_fix_crcs(buf, size) && memcmp(buf, data, size) != 0)
		exercise(buf, size, data);
	free(buf);
}

#endif
