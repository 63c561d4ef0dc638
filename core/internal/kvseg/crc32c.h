/*
 * kvseg/crc32c.h — CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected),
 * the checksum of segment headers, bodies and catalogs (docs/FORMAT.md §1).
 *
 * kvsi_crc32c() picks the fastest implementation the CPU supports at run time;
 * the portable table-driven one is always available and gives the same
 * results. Checksums chain: kvsi_crc32c(kvsi_crc32c(0, a, n), b, m) is the
 * CRC of a followed by b.
 */
#ifndef KVSEG_CRC32C_H
#define KVSEG_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CRC32C of data continuing from crc (0 for a fresh checksum). */
uint32_t kvsi_crc32c(uint32_t crc, const void *data, size_t len);

/* The portable implementation (slicing by 8). */
uint32_t kvsi_crc32c_portable(uint32_t crc, const void *data, size_t len);

/* True when this CPU has a hardware CRC32C path. */
bool kvsi_crc32c_hw_available(void);
/* The hardware implementation; call only when kvsi_crc32c_hw_available(). */
uint32_t kvsi_crc32c_hw(uint32_t crc, const void *data, size_t len);

#ifdef __cplusplus
}
#endif

#endif
