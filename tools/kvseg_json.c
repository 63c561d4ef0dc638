/*
 * kvseg_json.c — JSON output: scan --format jsonl, stat --json and
 * catalog list --json (docs/USAGE.md).
 *
 * Every string, real, boolean and null is serialised by jansson, so the
 * escaping of keys, values and names is a maintained library's. What this
 * file writes itself is punctuation ({ } [ ] , :) and unsigned integers:
 * jansson's integers are signed 64-bit (json_int_t), but a sequence number
 * goes up to 2^64-1, and a JSON number is just its decimal digits.
 */
#include "kvseg_cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static void put(struct json_writer *w, const void *p, size_t n)
{
	if (w->ok && !sb_append(w->sb, p, n))
		w->ok = false;
}

static void separate(struct json_writer *w)
{
	if (w->comma)
		put(w, ",", 1);
}

void json_writer_init(struct json_writer *w, struct strbuf *sb)
{
	w->sb = sb;
	w->comma = false;
	w->ok = true;
}

void json_open(struct json_writer *w, char bracket)
{
	separate(w);
	put(w, &bracket, 1);
	w->comma = false;
}

void json_close(struct json_writer *w, char bracket)
{
	put(w, &bracket, 1);
	w->comma = true;
}

/* flags: json_dumpb's, beyond JSON_ENCODE_ANY | JSON_COMPACT. Dumps
 * straight into the buffer's room, and again only when it was short. */
static void dump_value(struct json_writer *w, json_t *v, size_t flags)
{
	struct strbuf *sb = w->sb;
	size_t n, room;

	separate(w);
	w->comma = true;
	if (!v || !w->ok) {
		w->ok = false; /* jansson could not allocate v */
		json_decref(v);
		return;
	}
	flags |= JSON_ENCODE_ANY | JSON_COMPACT;
	room = sb->cap - sb->len;
	n = json_dumpb(v, room ? (char *)sb->data + sb->len : NULL, room,
	               flags);
	if (n > room && sb_reserve(sb, n))
		n = json_dumpb(v, (char *)sb->data + sb->len, n, flags);
	if (n == 0 || n > sb->cap - sb->len)
		w->ok = false;
	else
		sb->len += n;
	json_decref(v);
}

void json_value(struct json_writer *w, json_t *v)
{
	dump_value(w, v, 0);
}

void json_member_real(struct json_writer *w, const char *name, double v,
                      int digits)
{
	json_name(w, name);
	dump_value(w, json_real(v), JSON_REAL_PRECISION(digits));
}

void json_name(struct json_writer *w, const char *name)
{
	json_value(w, json_string(name));
	put(w, ":", 1);
	w->comma = false;
}

void json_u64(struct json_writer *w, uint64_t v)
{
	char digits[24];

	separate(w);
	put(w, digits, (size_t)snprintf(digits, sizeof digits, "%" PRIu64, v));
	w->comma = true;
}

void json_member_u64(struct json_writer *w, const char *name, uint64_t v)
{
	json_name(w, name);
	json_u64(w, v);
}

void json_member(struct json_writer *w, const char *name, json_t *v)
{
	json_name(w, name);
	json_value(w, v);
}

void json_member_bytes(struct json_writer *w, const char *name,
                       const uint8_t *data, uint64_t bits)
{
	static const char hex_digits[] = "0123456789abcdef";
	size_t len = (size_t)(bits / 8), n = 0;
	char member[32];
	char *text;

	if (bits % 8 == 0 && utf8_valid(data, len)) {
		json_member(w, name, json_stringn((const char *)data, len));
		return;
	}
	/* bits or hex digits: at most 8 characters a byte */
	text = malloc(bits % 8 ? (size_t)bits : len * 2);
	if (!text && bits) {
		w->ok = false;
		return;
	}
	if (bits % 8) {
		for (uint64_t i = 0; i < bits; i++)
			text[n++] =
			    (char)('0' + (data[i / 8] >> (7 - i % 8) & 1));
	} else {
		for (size_t i = 0; i < len; i++) {
			text[n++] = hex_digits[data[i] >> 4];
			text[n++] = hex_digits[data[i] & 15];
		}
	}
	snprintf(member, sizeof member, "%s_%s", name,
	         bits % 8 ? "bits" : "hex");
	json_member(w, member, json_stringn(text ? text : "", n));
	free(text);
}
