/*
 * fuzz_crcs.h — for the libFuzzer targets that take a segment file
 * (fuzz_segment, fuzz_merge): its CRC32Cs recomputed, so that mutations
 * reach the checks and decoders behind the checksums.
 */
#ifndef SEGFS_FUZZ_CRCS_H
#define SEGFS_FUZZ_CRCS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvseg/crc32c.h"

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

#endif
