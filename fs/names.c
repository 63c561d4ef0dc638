/*
 * names.c — the segfs name mapping (names.h, docs/USAGE.md "Names").
 */
#include "names.h"

#include <nettle/sha2.h>
#include <string.h>

static const char hex_upper[] = "0123456789ABCDEF";
static const char hex_lower[] = "0123456789abcdef";

/* Length of the well-formed UTF-8 sequence of a code point >= U+00A0 at
 * p (n bytes available), or 0. */
static size_t utf8_len(const uint8_t *p, size_t n)
{
	uint8_t b = p[0];
	if (b >= 0xC2 && b <= 0xDF) {
		if (n < 2 || (p[1] & 0xC0) != 0x80)
			return 0;
		/* U+0080..U+009F are the C1 control characters */
		return (b == 0xC2 && p[1] < 0xA0) ? 0 : 2;
	}
	if (b >= 0xE0 && b <= 0xEF) {
		if (n < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80)
			return 0;
		if (b == 0xE0 && p[1] < 0xA0)
			return 0; /* overlong */
		if (b == 0xED && p[1] > 0x9F)
			return 0; /* surrogates */
		return 3;
	}
	if (b >= 0xF0 && b <= 0xF4) {
		if (n < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
		    (p[3] & 0xC0) != 0x80)
			return 0;
		if (b == 0xF0 && p[1] < 0x90)
			return 0; /* overlong */
		if (b == 0xF4 && p[1] > 0x8F)
			return 0; /* above U+10FFFF */
		return 4;
	}
	return 0;
}

static bool safe_ascii(uint8_t b)
{
	return b >= 0x20 && b <= 0x7E && b != '%' && b != '/';
}

static void hash_component(const uint8_t *comp, uint64_t bits,
                           char out[32])
{
	struct sha256_ctx ctx;
	uint8_t digest[SHA256_DIGEST_SIZE], len[8];
	sha256_init(&ctx);
	sha256_update(&ctx, (size_t)((bits + 7) / 8), comp);
	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t)(bits >> (8 * i));
	sha256_update(&ctx, sizeof len, len);
	sha256_digest(&ctx, sizeof digest, digest);
	for (int i = 0; i < 16; i++) {
		out[2 * i] = hex_lower[digest[i] >> 4];
		out[2 * i + 1] = hex_lower[digest[i] & 15];
	}
}

size_t segfs_name_encode(const uint8_t *comp, uint64_t bits,
                         char out[SEGFS_NAME_MAX + 1])
{
	if (bits == 0) {
		memcpy(out, "%_", 3);
		return 2;
	}
	uint64_t nbytes = bits / 8;
	unsigned tail = (unsigned)(bits % 8);
	bool dots = tail == 0 && (nbytes == 1 || nbytes == 2) &&
	            comp[0] == '.' && comp[nbytes - 1] == '.';
	/* Tokens go to buf until the name is known to fit; cut is the end of
	 * the last token that fits in a hashed name's prefix. */
	char buf[SEGFS_NAME_MAX + 16];
	size_t len = 0, cut = 0;
	uint64_t i = 0;
	while (i < nbytes) {
		uint8_t b = comp[i];
		size_t u;
		if (!dots && safe_ascii(b)) {
			buf[len++] = (char)b;
			i++;
		} else if (b >= 0x80 && (u = utf8_len(comp + i, (size_t)(
		               nbytes - i < 4 ? nbytes - i : 4))) != 0) {
			memcpy(buf + len, comp + i, u);
			len += u;
			i += u;
		} else {
			buf[len++] = '%';
			buf[len++] = hex_upper[b >> 4];
			buf[len++] = hex_upper[b & 15];
			i++;
		}
		if (len <= SEGFS_NAME_HASH_PREFIX)
			cut = len;
		if (len > SEGFS_NAME_MAX)
			goto hashed;
	}
	if (tail) {
		uint8_t last = comp[nbytes];
		buf[len++] = '%';
		buf[len++] = ':';
		for (unsigned k = 0; k < tail; k++)
			buf[len++] = (char)('0' + ((last >> (7 - k)) & 1));
		if (len > SEGFS_NAME_MAX)
			goto hashed;
	}
	memcpy(out, buf, len);
	out[len] = '\0';
	return len;
hashed:
	memcpy(out, buf, cut);
	out[cut] = '%';
	out[cut + 1] = '#';
	hash_component(comp, bits, out + cut + 2);
	out[cut + 34] = '\0';
	return cut + 34;
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

segfs_name_kind segfs_name_decode(const char *name, size_t len, uint8_t *key,
                                  uint64_t *bits)
{
	*bits = 0;
	if (len == 0 || len > SEGFS_NAME_MAX)
		return SEGFS_NAME_INVALID;
	if (len == 2 && name[0] == '%' && name[1] == '_')
		return SEGFS_NAME_EXACT;
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		char c = name[i];
		if (c == '/' || c == '\0')
			return SEGFS_NAME_INVALID;
		if (c != '%') {
			key[n++] = (uint8_t)c;
			i++;
			continue;
		}
		if (i + 1 >= len)
			return SEGFS_NAME_INVALID;
		if (name[i + 1] == ':') { /* final bits */
			size_t t = len - i - 2;
			if (t < 1 || t > 7)
				return SEGFS_NAME_INVALID;
			uint8_t last = 0;
			for (size_t k = 0; k < t; k++) {
				char d = name[i + 2 + k];
				if (d != '0' && d != '1')
					return SEGFS_NAME_INVALID;
				last |= (uint8_t)((d - '0') << (7 - k));
			}
			key[n] = last;
			*bits = (uint64_t)n * 8 + t;
			return SEGFS_NAME_EXACT;
		}
		if (name[i + 1] == '#') { /* hashed */
			if (len - i - 2 != 32)
				return SEGFS_NAME_INVALID;
			for (size_t k = i + 2; k < len; k++)
				if (!((name[k] >= '0' && name[k] <= '9') ||
				      (name[k] >= 'a' && name[k] <= 'f')))
					return SEGFS_NAME_INVALID;
			*bits = (uint64_t)n * 8;
			return SEGFS_NAME_HASHED;
		}
		int hi, lo;
		if (i + 2 >= len || (hi = hex_value(name[i + 1])) < 0 ||
		    (lo = hex_value(name[i + 2])) < 0)
			return SEGFS_NAME_INVALID;
		key[n++] = (uint8_t)(hi << 4 | lo);
		i += 3;
	}
	*bits = (uint64_t)n * 8;
	return SEGFS_NAME_EXACT;
}

bool segfs_name_matches(const uint8_t *comp, uint64_t bits, const char *name,
                        size_t len)
{
	char enc[SEGFS_NAME_MAX + 1];
	size_t n = segfs_name_encode(comp, bits, enc);
	return n == len && memcmp(enc, name, len) == 0;
}
