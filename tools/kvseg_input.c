/*
 * kvseg_input.c — build's input formats (docs/USAGE.md, "Input formats"):
 * TSV, NUL-separated and JSON lines.
 *
 * Stdin is read with large reads into chunks, and every field is decoded
 * in place: escapes, hex and JSON string syntax only ever shrink, so a
 * record is two pointers into a chunk plus lengths. A chunk is never moved
 * while records point into it; a record cut by the end of a chunk is parsed
 * once the next chunk, which starts with a copy of its beginning, holds all
 * of it. A few million records cost the input's size plus 40 bytes each,
 * and build can drop every chunk once their records are written (a run).
 * JSON lines are parsed by jansson, one object per line, strictly (no
 * duplicate members); the object's members are then checked against
 * build's grammar, and the key and value decoded into the line's bytes.
 */
#include "kvseg_cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One block of input; records point into data. */
struct input_chunk {
	struct input_chunk *older;
	size_t cap;
	uint8_t data[];
};

void input_reader_init(struct input_reader *rd, int fd,
                       enum input_format format, size_t chunk_size)
{
	memset(rd, 0, sizeof *rd);
	rd->fd = fd;
	rd->format = format;
	rd->chunk_size = chunk_size;
}

/* Starts a chunk holding the unparsed rest of the current one; with
 * drop_older the chunks before it are freed. */
static bool new_chunk(struct input_reader *rd, bool drop_older)
{
	struct input_chunk *old = rd->chunk, *c;
	size_t tail = rd->len - rd->parsed, cap = rd->chunk_size;

	while (cap < tail * 2)
		cap *= 2;
	if (cap > SIZE_MAX - sizeof *c)
		return false;
	c = malloc(sizeof *c + cap);
	if (!c)
		return false;
	c->cap = cap;
	if (tail)
		memcpy(c->data, old->data + rd->parsed, tail);
	c->older = old;
	if (old && rd->parsed == 0) {
		/* No record points into it: a record is outgrowing it. */
		c->older = old->older;
		rd->held -= old->cap;
		free(old);
	}
	rd->chunk = c;
	rd->held += cap;
	rd->len = tail;
	rd->boundary = rd->parsed = 0;
	if (drop_older) {
		for (old = c->older; old; old = c->older) {
			c->older = old->older;
			rd->held -= old->cap;
			free(old);
		}
	}
	return true;
}

bool input_needs_chunk(const struct input_reader *rd)
{
	return !rd->eof && (!rd->chunk || rd->len == rd->chunk->cap);
}

/* Moves rd->boundary past the records that [from, len) completes. */
static void find_boundary(struct input_reader *rd, size_t from)
{
	uint8_t *data = rd->chunk->data;

	if (rd->format != INPUT_NUL) {
		for (size_t i = rd->len; i > from; i--) {
			if (data[i - 1] == '\n') {
				rd->boundary = i;
				break;
			}
		}
		return;
	}
	/* KEY NUL VALUE NUL: a record ends at every second NUL. */
	for (size_t i = from; i < rd->len;) {
		uint8_t *nul = memchr(data + i, 0, rd->len - i);

		if (!nul)
			break;
		i = (size_t)(nul - data) + 1;
		rd->nul_odd = !rd->nul_odd;
		if (!rd->nul_odd)
			rd->boundary = i;
	}
}

int input_read(struct input_reader *rd, struct record_list *list)
{
	ssize_t n;
	size_t from;
	int rc;

	if (rd->eof)
		return EXIT_OK;
	if (input_needs_chunk(rd) && !new_chunk(rd, false)) {
		cli_error("build", NULL, "out of memory reading the input");
		return EXIT_SYSTEM;
	}
	do
		n = read(rd->fd, rd->chunk->data + rd->len,
		         rd->chunk->cap - rd->len);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		cli_error("build", "stdin", "%s", strerror(errno));
		return EXIT_SYSTEM;
	}
	from = rd->len;
	rd->len += (size_t)n;
	if (n == 0) {
		rd->eof = true;
		rd->boundary = rd->len;
	} else {
		find_boundary(rd, from);
	}
	rc = input_parse(rd->format, rd->chunk->data + rd->parsed,
	                 rd->boundary - rd->parsed, &rd->number, list);
	rd->parsed = rd->boundary;
	return rc;
}

int input_release(struct input_reader *rd)
{
	if (!rd->chunk)
		return EXIT_OK;
	if (!new_chunk(rd, true)) {
		cli_error("build", NULL, "out of memory reading the input");
		return EXIT_SYSTEM;
	}
	return EXIT_OK;
}

void input_reader_free(struct input_reader *rd)
{
	struct input_chunk *c = rd->chunk;

	while (c) {
		struct input_chunk *older = c->older;

		free(c);
		c = older;
	}
	rd->chunk = NULL;
	rd->held = 0;
}

const char *input_unit(enum input_format format)
{
	return format == INPUT_NUL ? "record" : "line";
}

static int input_error(enum input_format format, uint64_t number,
                       const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int input_error(enum input_format format, uint64_t number,
                       const char *fmt, ...)
{
	char message[320];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof message, fmt, ap);
	va_end(ap);
	cli_error("build", "stdin", "%s %llu: %s", input_unit(format),
	          (unsigned long long)number, message);
	return EXIT_DATA;
}

static bool list_push(struct record_list *list, const struct record *r)
{
	if (list->count == list->cap) {
		size_t cap = list->cap ? list->cap * 2 : 4096;
		struct record *items;

		if (cap > SIZE_MAX / sizeof *items)
			return false;
		items = realloc(list->items, cap * sizeof *items);
		if (!items)
			return false;
		list->items = items;
		list->cap = cap;
	}
	list->items[list->count++] = *r;
	return true;
}

static int push_or_fail(struct record_list *list, const struct record *r)
{
	if (list_push(list, r))
		return EXIT_OK;
	cli_error("build", NULL, "out of memory after %zu records",
	          list->count);
	return EXIT_SYSTEM;
}

static int check_key_bits(enum input_format format, uint64_t number,
                          uint64_t bits)
{
	if (bits <= KVS_MAX_KEY_BITS)
		return EXIT_OK;
	return input_error(
	    format, number, "key is %llu bits long; the limit is %llu",
	    (unsigned long long)bits, (unsigned long long)KVS_MAX_KEY_BITS);
}

/* ---- TSV --------------------------------------------------------------- */

static int parse_tsv(uint8_t *buf, size_t len, uint64_t *number,
                     struct record_list *list)
{
	uint8_t *p = buf, *end = buf + len;
	uint64_t line = *number;
	char why[96];

	while (p < end) {
		uint8_t *eol = memchr(p, '\n', (size_t)(end - p));
		uint8_t *next = eol ? eol + 1 : end;
		uint8_t *tab;
		struct record r = {0};
		uint64_t bits;
		int rc;

		if (!eol)
			eol = end;
		r.number = ++line;
		tab = memchr(p, '\t', (size_t)(eol - p));
		if (!tab) {
			r.kind = KVS_KIND_TOMBSTONE;
			tab = eol;
		} else {
			r.kind = KVS_KIND_VALUE;
			if (memchr(tab + 1, '\t', (size_t)(eol - tab - 1)))
				return input_error(
				    INPUT_TSV, line,
				    "a second TAB (write \\t for "
				    "a TAB inside a field)");
		}
		if (!text_decode(p, (size_t)(tab - p), FIELD_KEY, p, &bits,
		                 why))
			return input_error(INPUT_TSV, line, "key: %s", why);
		rc = check_key_bits(INPUT_TSV, line, bits);
		if (rc)
			return rc;
		r.key = p;
		r.key_bits = (uint32_t)bits;
		if (r.kind == KVS_KIND_VALUE) {
			if (!text_decode(tab + 1, (size_t)(eol - tab - 1),
			                 FIELD_VALUE, tab + 1, &bits, why))
				return input_error(INPUT_TSV, line, "value: %s",
				                   why);
			r.value = tab + 1;
			r.value_len = bits / 8;
		}
		rc = push_or_fail(list, &r);
		if (rc)
			return rc;
		p = next;
	}
	*number = line;
	return EXIT_OK;
}

/* ---- NUL-separated ----------------------------------------------------- */

static int parse_nul(uint8_t *buf, size_t len, uint64_t *counter,
                     struct record_list *list)
{
	uint8_t *p = buf, *end = buf + len;
	uint64_t number = *counter;

	while (p < end) {
		uint8_t *key_end = memchr(p, 0, (size_t)(end - p));
		uint8_t *value, *value_end;
		struct record r = {0};
		int rc;

		r.number = ++number;
		if (!key_end)
			return input_error(INPUT_NUL, number,
			                   "the input ends inside a key (every "
			                   "key and value ends with a NUL)");
		value = key_end + 1;
		if (value == end)
			return input_error(INPUT_NUL, number,
			                   "a key without a value at the end "
			                   "of the input");
		value_end = memchr(value, 0, (size_t)(end - value));
		if (!value_end)
			return input_error(
			    INPUT_NUL, number,
			    "the input ends inside a value (every "
			    "key and value ends with a NUL)");
		rc = check_key_bits(INPUT_NUL, number,
		                    (uint64_t)(key_end - p) * 8);
		if (rc)
			return rc;
		r.key = p;
		r.key_bits = (uint32_t)((key_end - p) * 8);
		r.kind = KVS_KIND_VALUE;
		r.value = value;
		r.value_len = (uint64_t)(value_end - value);
		rc = push_or_fail(list, &r);
		if (rc)
			return rc;
		p = value_end + 1;
	}
	*counter = number;
	return EXIT_OK;
}

/* ---- JSON lines -------------------------------------------------------- */

enum json_member {
	M_KEY,
	M_KEY_HEX,
	M_KEY_BITS,
	M_VALUE,
	M_VALUE_HEX,
	M_TOMBSTONE,
	M_COUNT,
};

static const char *const member_names[M_COUNT] = {
    "key", "key_hex", "key_bits", "value", "value_hex", "tombstone",
};

/*
 * The members of one line's object, checked against the grammar: known
 * names, strings (tombstone: a boolean), one key, one value or a
 * tombstone. jansson has parsed the line and found duplicates already.
 */
static bool json_members(json_t *obj, json_t *m[M_COUNT], char why[256])
{
	const char *name;
	json_t *v;
	int keys, values;

	if (!json_is_object(obj)) {
		snprintf(why, 256, "not a JSON object (each line is one)");
		return false;
	}
	json_object_foreach(obj, name, v)
	{
		int i = 0;

		while (i < M_COUNT && strcmp(member_names[i], name) != 0)
			i++;
		if (i == M_COUNT) {
			snprintf(why, 256,
			         "unknown member (known: key, key_hex, "
			         "key_bits, value, value_hex, tombstone)");
			return false;
		}
		if (i == M_TOMBSTONE ? !json_is_boolean(v)
		                     : !json_is_string(v)) {
			snprintf(why, 256,
			         i == M_TOMBSTONE ? "'%s' must be true or false"
			                          : "'%s' must be a string",
			         name);
			return false;
		}
		m[i] = v;
	}
	keys = !!m[M_KEY] + !!m[M_KEY_HEX] + !!m[M_KEY_BITS];
	values = !!m[M_VALUE] + !!m[M_VALUE_HEX];
	if (keys != 1) {
		snprintf(why, 256, "%s",
		         keys ? "more than one of key, key_hex, key_bits"
		              : "no key (key, key_hex or key_bits)");
		return false;
	}
	if (json_is_true(m[M_TOMBSTONE]) && values) {
		snprintf(why, 256, "a tombstone has no value");
		return false;
	}
	if (!json_is_true(m[M_TOMBSTONE]) && values != 1) {
		snprintf(why, 256, "%s",
		         values ? "both value and value_hex"
		                : "no value (value, value_hex or "
		                  "\"tombstone\": true)");
		return false;
	}
	return true;
}

/*
 * Decodes the key or value member m (hex or bits as its name says) into
 * out: the line's own bytes, which jansson no longer needs. A decoded
 * string is never longer than its JSON text, so the key and the value
 * both fit in the line.
 */
static bool json_field(json_t *m, int which, uint8_t *out, uint64_t *bits,
                       char why[256])
{
	const uint8_t *text = (const uint8_t *)json_string_value(m);
	size_t len = json_string_length(m), n;
	char reason[96];

	switch (which) {
	case M_KEY:
	case M_VALUE:
		memcpy(out, text, len);
		*bits = (uint64_t)len * 8;
		return true;
	case M_KEY_BITS:
		if (text_decode_bits(text, len, out, bits, reason))
			return true;
		break;
	default:
		if (text_decode_hex(text, len, out, &n, reason)) {
			*bits = (uint64_t)n * 8;
			return true;
		}
	}
	snprintf(why, 256, "%s: %s", member_names[which], reason);
	return false;
}

/* One line [line, end) into the record r; false with why if it is bad. */
static bool json_line(uint8_t *line, uint8_t *end, struct record *r,
                      char why[256])
{
	json_t *m[M_COUNT] = {0}, *obj;
	json_error_t err;
	uint8_t *p = line;
	uint64_t bits;
	int key = M_KEY, value = M_VALUE;
	bool ok = false;

	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
		p++;
	if (p == end) {
		snprintf(why, 256, "blank line (each line is one JSON object)");
		return false;
	}
	/* \u0000 is a NUL byte in a key or value; jansson refuses it in a
	 * member name. Duplicate members are errors, not last-wins. */
	obj = json_loadb((const char *)line, (size_t)(end - line),
	                 JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
	if (!obj) {
		snprintf(why, 256, "column %d: %s%s", err.column, err.text,
		         json_error_code(&err) == json_error_invalid_utf8
		             ? " (not UTF-8: use key_hex or value_hex for "
		               "arbitrary bytes)"
		             : "");
		return false;
	}
	if (!json_members(obj, m, why))
		goto out;
	while (!m[key])
		key++;
	if (!json_field(m[key], key, line, &bits, why))
		goto out;
	if (bits > KVS_MAX_KEY_BITS) {
		snprintf(why, 256, "key is %llu bits long; the limit is %llu",
		         (unsigned long long)bits,
		         (unsigned long long)KVS_MAX_KEY_BITS);
		goto out;
	}
	r->key = line;
	r->key_bits = (uint32_t)bits;
	r->kind = KVS_KIND_TOMBSTONE;
	if (!json_is_true(m[M_TOMBSTONE])) {
		uint8_t *at = line + (bits + 7) / 8;

		if (!m[value])
			value = M_VALUE_HEX;
		if (!json_field(m[value], value, at, &bits, why))
			goto out;
		r->kind = KVS_KIND_VALUE;
		r->value = at;
		r->value_len = bits / 8;
	}
	ok = true;
out:
	json_decref(obj);
	return ok;
}

static int parse_jsonl(uint8_t *buf, size_t len, uint64_t *number,
                       struct record_list *list)
{
	uint8_t *p = buf, *end = buf + len;
	uint64_t line = *number;

	while (p < end) {
		uint8_t *eol = memchr(p, '\n', (size_t)(end - p));
		struct record r = {0};
		char why[256];
		int rc;

		r.number = ++line;
		if (!json_line(p, eol ? eol : end, &r, why))
			return input_error(INPUT_JSONL, line, "%s", why);
		rc = push_or_fail(list, &r);
		if (rc)
			return rc;
		p = eol ? eol + 1 : end;
	}
	*number = line;
	return EXIT_OK;
}

int input_parse(enum input_format format, uint8_t *buf, size_t len,
                uint64_t *number, struct record_list *list)
{
	switch (format) {
	case INPUT_TSV:
		return parse_tsv(buf, len, number, list);
	case INPUT_NUL:
		return parse_nul(buf, len, number, list);
	case INPUT_JSONL:
		return parse_jsonl(buf, len, number, list);
	}
	return EXIT_USAGE;
}
