/*
 * segment_format.c — the small shared pieces of the segment format: key
 * order and common prefixes of bit strings, the bit-profile field codes
 * (docs/FORMAT.md §6.2) with their names, the copy of a value's bytes
 * out of a bit stream, and the directory fsync of writer and catalog.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvseg/cpu.h"
#include "segment_internal.h"

/* ---- keys -------------------------------------------------------------- */

int kvs_key_compare(const void *a, uint64_t a_bits, const void *b,
                    uint64_t b_bits)
{
	int cmp;
	seg_key_lcp(a, a_bits, b, b_bits, &cmp);
	return cmp;
}

/* ---- field codes ------------------------------------------------------- */

void kvs_default_codes(kvs_code_spec codes[KVS_FIELD_COUNT])
{
	/* See bench/README.md, "Choosing the bit-profile codes". */
	codes[KVS_FIELD_LCP] = (kvs_code_spec){KVS_CODE_EG, 2, 1};
	codes[KVS_FIELD_KEYLEN] = (kvs_code_spec){KVS_CODE_EG, 0, 1};
	codes[KVS_FIELD_VALLEN] = (kvs_code_spec){KVS_CODE_EG, 0, 1};
}

kvs_status kvs_code_spec_check(const kvs_code_spec *spec)
{
	if (spec->delta > 1)
		return KVS_E_INVAL;
	switch (spec->kind) {
	case KVS_CODE_EG:
		return spec->param <= 63 ? KVS_OK : KVS_E_INVAL;
	case KVS_CODE_GOLOMB:
		return spec->param >= 1 ? KVS_OK : KVS_E_INVAL;
	case KVS_CODE_FIXED:
		return spec->param >= 1 && spec->param <= 64 ? KVS_OK
		                                             : KVS_E_INVAL;
	}
	return KVS_E_INVAL;
}

kvs_status kvs_code_spec_parse(const char *text, kvs_code_spec *spec)
{
	kvs_code_spec s = {0, 0, 0};
	if (text[0] == 'd') {
		s.delta = 1;
		text++;
	}
	const char *num;
	if (strncmp(text, "eg", 2) == 0) {
		s.kind = KVS_CODE_EG;
		num = text + 2;
	} else if (strncmp(text, "fixed", 5) == 0) {
		s.kind = KVS_CODE_FIXED;
		num = text + 5;
	} else if (text[0] == 'g') {
		s.kind = KVS_CODE_GOLOMB;
		num = text + 1;
	} else {
		return KVS_E_INVAL;
	}
	if (*num < '0' || *num > '9' || strlen(num) > 3)
		return KVS_E_INVAL;
	char *end;
	unsigned long v = strtoul(num, &end, 10);
	if (*end != '\0' || v > 255)
		return KVS_E_INVAL;
	s.param = (uint8_t)v;
	if (kvs_code_spec_check(&s) != KVS_OK)
		return KVS_E_INVAL;
	*spec = s;
	return KVS_OK;
}

void kvs_code_spec_format(const kvs_code_spec *spec, char out[16])
{
	const char *name = spec->kind == KVS_CODE_EG       ? "eg"
	                   : spec->kind == KVS_CODE_GOLOMB ? "g"
	                   : spec->kind == KVS_CODE_FIXED  ? "fixed"
	                                                   : "?";
	snprintf(out, 16, "%s%s%u", spec->delta ? "d" : "", name,
	         (unsigned)spec->param);
}

void kvsi_field_init(seg_field *f, const kvs_code_spec *spec)
{
	f->spec = *spec;
	memset(&f->golomb, 0, sizeof f->golomb);
	if (spec->kind == KVS_CODE_GOLOMB)
		kvs_golomb_init(&f->golomb, spec->param);
}

kvs_status kvsi_field_put_slow(kvs_bitwriter *w, const seg_field *f, uint64_t v)
{
	switch (f->spec.kind) {
	case KVS_CODE_EG:
		return kvs_put_eg(w, v, f->spec.param);
	case KVS_CODE_GOLOMB:
		return kvs_put_golomb(w, &f->golomb, v);
	default:
		return kvs_put_fixed(w, v, f->spec.param);
	}
}

/* ---- values in a bit stream -------------------------------------------- */

typedef uint8_t v32u8 __attribute__((vector_size(32)));
typedef uint16_t v16u16 __attribute__((vector_size(32)));

/* Each 32-byte block is two unaligned loads, a shift of 16-bit lanes each
 * way masked to the lanes' bytes, an or and a store. */
KVS_MULTIVERSION void kvsi_copy_shifted(uint8_t *dst, const uint8_t *src,
                                        unsigned shift, size_t len)
{
	if (shift == 0) {
		memcpy(dst, src, len);
		return;
	}
	size_t i = 0;
	v32u8 left = {0}, right = {0};
	left += (uint8_t)(0xFF << shift);
	right += (uint8_t)(0xFF >> (8 - shift));
	for (; i + 32 <= len; i += 32) { /* src[i .. i + 32] are in the span */
		v16u16 a, b;
		memcpy(&a, src + i, sizeof a);
		memcpy(&b, src + i + 1, sizeof b);
		v32u8 out = ((v32u8)(a << shift) & left) |
		            ((v32u8)(b >> (8 - shift)) & right);
		memcpy(dst + i, &out, sizeof out);
	}
	for (; i + 8 <= len; i += 8) /* src[i .. i + 8] are in the span */
		kvs_store_be64(dst + i, kvs_load_be64(src + i) << shift |
		                            src[i + 8] >> (8 - shift));
	for (; i < len; i++)
		dst[i] = shifted_byte(src, shift, i);
}

kvs_status kvsi_fsync_dir(const char *dir, const char *what, kvs_error *err)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return kvs_error_set(err, KVS_E_IO,
		                     "%s: fsync of the directory: %s", what,
		                     strerror(e));
	}
	close(fd);
	return KVS_OK;
}

int kvsi_create_temp(char *tmpl)
{
	static const char chars[] = "abcdefghijklmnopqrstuvwxyz"
	                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	static _Atomic uint64_t calls; /* distinct names for racing threads */
	size_t len = strlen(tmpl);
	if (len < 6 || strcmp(tmpl + len - 6, "XXXXXX") != 0) {
		errno = EINVAL;
		return -1;
	}
	char *x = tmpl + len - 6;
	/* Names need not be secret, only unlikely to be taken: O_EXCL
	 * decides, and a taken name costs one more try (as mkostemp). The
	 * seed mixes the time with an address on the stack, which differs
	 * between processes where addresses are randomized, instead of the
	 * process ID: getpid(2) is a system call, 1.3 us each here. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t seed = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^
	                (uint64_t)(uintptr_t)&ts << 20 ^
	                atomic_fetch_add(&calls, 1);
	for (unsigned attempt = 0; attempt < 1000; attempt++) {
		/* splitmix64 of the seed's next step */
		uint64_t v = (seed += 0x9E3779B97F4A7C15ull);
		v = (v ^ v >> 30) * 0xBF58476D1CE4E5B9ull;
		v = (v ^ v >> 27) * 0x94D049BB133111EBull;
		v ^= v >> 31;
		for (int i = 0; i < 6; i++, v /= 62)
			x[i] = chars[v % 62];
		int fd =
		    open(tmpl, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	return -1; /* errno is EEXIST */
}
