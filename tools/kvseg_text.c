/*
 * kvseg_text.c — keys and values as text (docs/USAGE.md, "Keys and values
 * as text"): the escape syntax shared by TSV input and output, command-line
 * keys and dump, the \b bit-key syntax, and UTF-8 validity.
 *
 * One encoder writes every key and value kvseg prints, so the same bytes
 * always print the same way: that is what makes dump canonical and scan's
 * output valid input for build. Text stays text (UTF-8 prints as itself,
 * so grep finds it); escaped are only the bytes TSV's syntax needs
 * escaped, control characters, and bytes that are not UTF-8. Decoding
 * never lengthens its input, so the input parsers decode fields in place
 * in the buffer that holds stdin.
 */
#include "kvseg_cli.h"

#include <stdlib.h>
#include <string.h>

static const char hex_digits[] = "0123456789abcdef";

static int hex_value(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A byte as it can appear in a message: itself if printable, else \xHH. */
static void show_byte(char out[8], uint8_t c)
{
	if (c >= 0x20 && c < 0x7f && c != '\'')
		snprintf(out, 8, "%c", c);
	else
		snprintf(out, 8, "\\x%02x", c);
}

bool text_decode_bits(const uint8_t *in, size_t len, uint8_t *out,
                      uint64_t *bits, char why[96])
{
	unsigned acc = 0;
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		char shown[8];

		if (in[i] != '0' && in[i] != '1') {
			show_byte(shown, in[i]);
			snprintf(why, 96, "bit string: '%s' is not 0 or 1",
			         shown);
			return false;
		}
		acc = acc << 1 | (unsigned)(in[i] - '0');
		if (++n % 8 == 0) {
			out[n / 8 - 1] = (uint8_t)acc;
			acc = 0;
		}
	}
	if (n % 8)
		out[n / 8] = (uint8_t)(acc << (8 - n % 8));
	*bits = n;
	return true;
}

bool text_decode_hex(const uint8_t *in, size_t len, uint8_t *out,
                     size_t *out_len, char why[96])
{
	if (len % 2) {
		snprintf(why, 96, "odd number of hex digits");
		return false;
	}
	for (size_t i = 0; i < len; i += 2) {
		int hi = hex_value(in[i]), lo = hex_value(in[i + 1]);
		char shown[8];

		if (hi < 0 || lo < 0) {
			show_byte(shown, in[hi < 0 ? i : i + 1]);
			snprintf(why, 96, "'%s' is not a hex digit", shown);
			return false;
		}
		out[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	*out_len = len / 2;
	return true;
}

bool text_decode(const uint8_t *in, size_t len, enum field_kind kind,
                 uint8_t *out, uint64_t *bits, char why[96])
{
	size_t o = 0;

	if (len >= 2 && in[0] == '\\' && in[1] == 'b') {
		if (kind != FIELD_KEY) {
			snprintf(why, 96,
			         "'\\b' bit strings are for keys only");
			return false;
		}
		return text_decode_bits(in + 2, len - 2, out, bits, why);
	}
	for (size_t i = 0; i < len; i++) {
		uint8_t c = in[i];
		char shown[8];
		int hi, lo;

		if (c != '\\') {
			out[o++] = c;
			continue;
		}
		if (++i == len) {
			snprintf(why, 96,
			         "ends with a lone backslash "
			         "(write \\\\ for a backslash)");
			return false;
		}
		switch (in[i]) {
		case '\\':
			out[o++] = '\\';
			break;
		case 't':
			out[o++] = '\t';
			break;
		case 'n':
			out[o++] = '\n';
			break;
		case 'r':
			out[o++] = '\r';
			break;
		case '0':
			out[o++] = 0;
			break;
		case 'x':
			hi = i + 1 < len ? hex_value(in[i + 1]) : -1;
			lo = i + 2 < len ? hex_value(in[i + 2]) : -1;
			if (hi < 0 || lo < 0) {
				snprintf(why, 96, "'\\x' needs two hex digits");
				return false;
			}
			out[o++] = (uint8_t)(hi << 4 | lo);
			i += 2;
			break;
		case 'b':
			snprintf(why, 96,
			         kind == FIELD_KEY
			             ? "'\\b' may only start a key"
			             : "'\\b' bit strings are for keys only");
			return false;
		default:
			show_byte(shown, in[i]);
			snprintf(
			    why, 96,
			    "unknown escape '\\%s' (known: \\\\ \\t \\n \\r "
			    "\\0 \\xHH)",
			    shown);
			return false;
		}
	}
	*bits = (uint64_t)o * 8;
	return true;
}

bool text_encode(struct strbuf *sb, const uint8_t *data, uint64_t bits)
{
	uint8_t *p;

	if (bits % 8) {
		if (!sb_reserve(sb, bits + 2))
			return false;
		p = sb->data + sb->len;
		*p++ = '\\';
		*p++ = 'b';
		for (uint64_t i = 0; i < bits; i++)
			*p++ =
			    (uint8_t)('0' + (data[i / 8] >> (7 - i % 8) & 1));
		sb->len = (size_t)(p - sb->data);
		return true;
	}
	if (!sb_reserve(sb, bits / 8 * 4))
		return false;
	p = sb->data + sb->len;
	for (size_t i = 0, n = (size_t)(bits / 8); i < n; i++) {
		uint8_t c = data[i];
		size_t seq;

		if (c >= 0x20 && c < 0x7f && c != '\\') {
			*p++ = c;
			continue;
		}
		/* A character beyond ASCII stands for itself, unless it is
		 * a C1 control (U+0080-U+009F, 0xc2 0x80-0x9f). */
		seq = c >= 0x80 ? utf8_sequence_len(data + i, n - i) : 0;
		if (seq && !(c == 0xc2 && data[i + 1] < 0xa0)) {
			memcpy(p, data + i, seq);
			p += seq;
			i += seq - 1;
			continue;
		}
		*p++ = '\\';
		switch (c) {
		case '\\':
			*p++ = '\\';
			break;
		case '\t':
			*p++ = 't';
			break;
		case '\n':
			*p++ = 'n';
			break;
		case '\r':
			*p++ = 'r';
			break;
		case 0:
			*p++ = '0';
			break;
		default:
			*p++ = 'x';
			*p++ = (uint8_t)hex_digits[c >> 4];
			*p++ = (uint8_t)hex_digits[c & 15];
		}
	}
	sb->len = (size_t)(p - sb->data);
	return true;
}

bool text_decode_arg(const char *arg, uint8_t **key, uint64_t *bits,
                     char why[96])
{
	size_t len = strlen(arg);
	uint8_t *buf = malloc(len + 1);

	if (!buf) {
		snprintf(why, 96, "out of memory");
		return false;
	}
	if (!text_decode((const uint8_t *)arg, len, FIELD_KEY, buf, bits,
	                 why)) {
		free(buf);
		return false;
	}
	*key = buf;
	return true;
}

size_t utf8_sequence_len(const uint8_t *p, size_t n)
{
	uint8_t c = p[0];
	size_t need;
	uint8_t lo = 0x80, hi = 0xbf; /* range of the second byte */

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		need = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 3;
		if (c == 0xe0)
			lo = 0xa0; /* no overlong forms */
		else if (c == 0xed)
			hi = 0x9f; /* no surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 4;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f; /* nothing above U+10FFFF */
	} else {
		return 0;
	}
	if (n < need || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < need; i++) {
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	}
	return need;
}

bool utf8_valid(const uint8_t *data, size_t len)
{
	for (size_t i = 0, n; i < len; i += n) {
		n = utf8_sequence_len(data + i, len - i);
		if (n == 0)
			return false;
	}
	return true;
}

bool key_has_prefix(const uint8_t *key, uint64_t key_bits,
                    const uint8_t *prefix, uint64_t prefix_bits)
{
	size_t whole = (size_t)(prefix_bits / 8);
	unsigned rest = (unsigned)(prefix_bits % 8);
	uint8_t mask;

	if (key_bits < prefix_bits)
		return false;
	if (memcmp(key, prefix, whole) != 0)
		return false;
	if (rest == 0)
		return true;
	mask = (uint8_t)(0xff << (8 - rest));
	return ((key[whole] ^ prefix[whole]) & mask) == 0;
}
