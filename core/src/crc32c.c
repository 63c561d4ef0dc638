/*
 * crc32c.c — CRC32C (kvseg/crc32c.h): a portable slicing-by-8 path, on
 * x86-64 CPUs with SSE4.2 a hardware path, and for longer buffers Intel's
 * ISA-L (Debian's libisal) when the build finds it.
 *
 * The crc32 instruction has a latency of three cycles and a throughput of
 * one, so the hardware path runs three independent streams over adjacent
 * blocks and merges them with a table-driven "shift by one block" (the CRC
 * register is linear, so crc(A || B) = shift_|B|(crc(A)) ^ crc0(B)). The
 * tables come from crc32c_gen.c at build time.
 */
#include "kvseg/crc32c.h"

#include <string.h>

#include "crc32c_tables.h"
#include "kvseg/bits.h"

static inline uint32_t shift_by(const uint32_t t[4][256], uint32_t crc)
{
	return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^
	       t[2][(crc >> 16) & 0xFF] ^ t[3][crc >> 24];
}

uint32_t kvsi_crc32c_portable(uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = data;
	uint32_t c = ~crc;
	while (len >= 8) {
		uint64_t x = kvs_load_le64(p) ^ c;
		c = crc32c_slice[7][x & 0xFF] ^
		    crc32c_slice[6][(x >> 8) & 0xFF] ^
		    crc32c_slice[5][(x >> 16) & 0xFF] ^
		    crc32c_slice[4][(x >> 24) & 0xFF] ^
		    crc32c_slice[3][(x >> 32) & 0xFF] ^
		    crc32c_slice[2][(x >> 40) & 0xFF] ^
		    crc32c_slice[1][(x >> 48) & 0xFF] ^
		    crc32c_slice[0][x >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		c = crc32c_slice[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
	return ~c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>

#define HW_TARGET __attribute__((target("sse4.2")))

/* Three streams over blocks of `block` bytes each, while 3 blocks remain. */
HW_TARGET static inline uint64_t three_way(uint64_t c, const uint8_t **pp,
                                           size_t *lenp, size_t block,
                                           const uint32_t shift[4][256])
{
	const uint8_t *p = *pp;
	size_t len = *lenp;
	while (len >= 3 * block) {
		uint64_t c0 = c, c1 = 0, c2 = 0;
		for (size_t i = 0; i < block; i += 8) {
			c0 = _mm_crc32_u64(c0, kvs_load_le64(p + i));
			c1 = _mm_crc32_u64(c1, kvs_load_le64(p + block + i));
			c2 =
			    _mm_crc32_u64(c2, kvs_load_le64(p + 2 * block + i));
		}
		c = shift_by(shift, (uint32_t)c0) ^ (uint32_t)c1;
		c = shift_by(shift, (uint32_t)c) ^ (uint32_t)c2;
		p += 3 * block;
		len -= 3 * block;
	}
	*pp = p;
	*lenp = len;
	return c;
}

HW_TARGET uint32_t kvsi_crc32c_hw(uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = data;
	uint64_t c = (uint32_t)~crc;
	while (len && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	c = three_way(c, &p, &len, CRC32C_LONG_BLOCK, crc32c_shift_long);
	c = three_way(c, &p, &len, CRC32C_SHORT_BLOCK, crc32c_shift_short);
	while (len >= 8) {
		c = _mm_crc32_u64(c, kvs_load_le64(p));
		p += 8;
		len -= 8;
	}
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}

bool kvsi_crc32c_hw_available(void)
{
	return __builtin_cpu_supports("sse4.2");
}

#else

uint32_t kvsi_crc32c_hw(uint32_t crc, const void *data, size_t len)
{
	return kvsi_crc32c_portable(crc, data, len);
}

bool kvsi_crc32c_hw_available(void)
{
	return false;
}

#endif

#ifdef KVS_HAVE_ISAL
#include <isa-l/crc.h>

/*
 * ISA-L's crc32_iscsi folds with carry-less multiplication and picks the
 * widest vector unit at run time. Measured here with bench/bench_crc32c it
 * is faster than our three streams from 256 bytes up (1.3x at 256 B, 3-4x
 * at 4-64 KiB, 1.2x at 16 MiB where memory bandwidth limits both) and
 * slower at 64 bytes, where its call costs more than the work: short
 * buffers stay on our paths. Its length is an int.
 */
#define ISAL_MIN_LEN   128
#define ISAL_MAX_CHUNK ((size_t)1 << 30)

static uint32_t crc32c_isal(uint32_t crc, const uint8_t *p, size_t len)
{
	uint32_t state = ~crc;
	while (len) {
		size_t n = len < ISAL_MAX_CHUNK ? len : ISAL_MAX_CHUNK;
		/* crc32_iscsi works on the raw register and does not write. */
		state =
		    crc32_iscsi((unsigned char *)(uintptr_t)p, (int)n, state);
		p += n;
		len -= n;
	}
	return ~state;
}
#endif

uint32_t kvsi_crc32c(uint32_t crc, const void *data, size_t len)
{
#ifdef KVS_HAVE_ISAL
	if (len >= ISAL_MIN_LEN)
		return crc32c_isal(crc, data, len);
#endif
	if (kvsi_crc32c_hw_available())
		return kvsi_crc32c_hw(crc, data, len);
	return kvsi_crc32c_portable(crc, data, len);
}
