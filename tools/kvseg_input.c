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
 * The JSON reader accepts exactly one flat object per line whose members
 * are strings or booleans; anything else is an error with its line and
 * column.
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
	char message[160];
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

struct json_line {
	uint8_t *start; /* of the line, for columns */
	uint8_t *end;   /* the newline or the end of input */
	uint64_t number;
	char why[128];
};

static bool json_fail(struct json_line *jl, const uint8_t *at, const char *fmt,
                      ...) __attribute__((format(printf, 3, 4)));

static bool json_fail(struct json_line *jl, const uint8_t *at, const char *fmt,
                      ...)
{
	char message[96];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof message, fmt, ap);
	va_end(ap);
	snprintf(jl->why, sizeof jl->why, "column %zu: %s",
	         (size_t)(at - jl->start) + 1, message);
	return false;
}

static uint8_t *json_skip_space(uint8_t *p, const uint8_t *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
		p++;
	return p;
}

static int json_hex4(const uint8_t *p, const uint8_t *end)
{
	int v = 0;

	if (end - p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		int d;
		uint8_t c = p[i];

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -1;
		v = v << 4 | d;
	}
	return v;
}

static uint8_t *put_utf8(uint8_t *o, uint32_t cp)
{
	if (cp < 0x80) {
		*o++ = (uint8_t)cp;
	} else if (cp < 0x800) {
		*o++ = (uint8_t)(0xc0 | cp >> 6);
		*o++ = (uint8_t)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		*o++ = (uint8_t)(0xe0 | cp >> 12);
		*o++ = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
		*o++ = (uint8_t)(0x80 | (cp & 0x3f));
	} else {
		*o++ = (uint8_t)(0xf0 | cp >> 18);
		*o++ = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
		*o++ = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
		*o++ = (uint8_t)(0x80 | (cp & 0x3f));
	}
	return o;
}

/*
 * A string starting at *pp (its opening quote), decoded to UTF-8 bytes
 * written from the quote onwards. Leaves *pp after the closing quote.
 */
static bool json_string(struct json_line *jl, uint8_t **pp, size_t *len)
{
	uint8_t *p = *pp + 1, *out = *pp, *o = out;
	const uint8_t *end = jl->end;

	for (;;) {
		uint8_t c;
		int u, lo;
		size_t n;

		if (p == end)
			return json_fail(jl, *pp, "unterminated string");
		c = *p;
		if (c == '"')
			break;
		if (c < 0x20)
			return json_fail(jl, p,
			                 "control character 0x%02x in a string "
			                 "(escape it)",
			                 c);
		if (c >= 0x80) {
			n = utf8_sequence_len(p, (size_t)(end - p));
			if (n == 0)
				return json_fail(
				    jl, p,
				    "invalid UTF-8 (use key_hex or "
				    "value_hex for arbitrary bytes)");
			memmove(o, p, n);
			o += n;
			p += n;
			continue;
		}
		if (c != '\\') {
			*o++ = c;
			p++;
			continue;
		}
		if (p + 1 == end)
			return json_fail(jl, p, "unterminated string");
		switch (p[1]) {
		case '"':
		case '\\':
		case '/':
			*o++ = p[1];
			break;
		case 'b':
			*o++ = '\b';
			break;
		case 'f':
			*o++ = '\f';
			break;
		case 'n':
			*o++ = '\n';
			break;
		case 'r':
			*o++ = '\r';
			break;
		case 't':
			*o++ = '\t';
			break;
		case 'u':
			u = json_hex4(p + 2, end);
			if (u < 0)
				return json_fail(jl, p,
				                 "\\u needs four hex digits");
			if (u >= 0xdc00 && u <= 0xdfff)
				return json_fail(jl, p, "lone low surrogate");
			if (u >= 0xd800 && u <= 0xdbff) {
				if (end - p < 12 || p[6] != '\\' || p[7] != 'u')
					return json_fail(
					    jl, p,
					    "high surrogate without a "
					    "low one");
				lo = json_hex4(p + 8, end);
				if (lo < 0xdc00 || lo > 0xdfff)
					return json_fail(
					    jl, p,
					    "high surrogate without a "
					    "low one");
				o = put_utf8(
				    o, 0x10000 +
				           ((uint32_t)(u - 0xd800) << 10) +
				           (uint32_t)(lo - 0xdc00));
				p += 12;
				continue;
			}
			o = put_utf8(o, (uint32_t)u);
			p += 6;
			continue;
		default:
			return json_fail(jl, p, "bad escape in a string");
		}
		p += 2;
	}
	*pp = p + 1;
	*len = (size_t)(o - out);
	return true;
}

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

struct json_record {
	bool seen[M_COUNT];
	uint8_t *str[M_COUNT];
	size_t len[M_COUNT];
	bool tombstone;
};

static int json_member_index(const uint8_t *name, size_t len)
{
	for (int i = 0; i < M_COUNT; i++) {
		if (strlen(member_names[i]) == len &&
		    memcmp(member_names[i], name, len) == 0)
			return i;
	}
	return -1;
}

static bool json_object(struct json_line *jl, struct json_record *jr)
{
	uint8_t *p = json_skip_space(jl->start, jl->end);
	const uint8_t *end = jl->end;

	if (p == end)
		return json_fail(jl, p,
		                 "blank line (each line is one JSON object)");
	if (*p != '{')
		return json_fail(jl, p, "expected '{'");
	p = json_skip_space(p + 1, end);
	if (p < end && *p == '}') {
		p++;
	} else {
		for (;;) {
			uint8_t *name, *at;
			size_t name_len;
			int m;

			if (p == end || *p != '"')
				return json_fail(jl, p,
				                 "expected a member name");
			name = at = p;
			if (!json_string(jl, &p, &name_len))
				return false;
			m = json_member_index(name, name_len);
			if (m < 0)
				return json_fail(jl, at,
				                 "unknown member (known: key, "
				                 "key_hex, key_bits, value, "
				                 "value_hex, tombstone)");
			if (jr->seen[m])
				return json_fail(jl, at, "'%s' given twice",
				                 member_names[m]);
			jr->seen[m] = true;
			p = json_skip_space(p, end);
			if (p == end || *p != ':')
				return json_fail(jl, p, "expected ':'");
			p = json_skip_space(p + 1, end);
			at = p;
			if (m == M_TOMBSTONE) {
				if (end - p >= 4 && memcmp(p, "true", 4) == 0) {
					jr->tombstone = true;
					p += 4;
				} else if (end - p >= 5 &&
				           memcmp(p, "false", 5) == 0) {
					p += 5;
				} else {
					return json_fail(
					    jl, at,
					    "'tombstone' must be true "
					    "or false");
				}
			} else {
				if (p == end || *p != '"')
					return json_fail(
					    jl, at, "'%s' must be a string",
					    member_names[m]);
				jr->str[m] = p;
				if (!json_string(jl, &p, &jr->len[m]))
					return false;
			}
			p = json_skip_space(p, end);
			if (p < end && *p == ',') {
				p = json_skip_space(p + 1, end);
				continue;
			}
			if (p < end && *p == '}') {
				p++;
				break;
			}
			return json_fail(jl, p, "expected ',' or '}'");
		}
	}
	p = json_skip_space(p, end);
	if (p != end)
		return json_fail(jl, p, "text after the object");
	return true;
}

/* Turns the members of one object into a record. */
static bool json_to_record(struct json_line *jl, struct json_record *jr,
                           struct record *r)
{
	int keys = jr->seen[M_KEY] + jr->seen[M_KEY_HEX] + jr->seen[M_KEY_BITS];
	int values = jr->seen[M_VALUE] + jr->seen[M_VALUE_HEX];
	char why[96];
	uint64_t bits;
	size_t n;

	if (keys != 1) {
		snprintf(jl->why, sizeof jl->why, "%s",
		         keys ? "more than one of key, key_hex, key_bits"
		              : "no key (key, key_hex or key_bits)");
		return false;
	}
	if (jr->tombstone && values) {
		snprintf(jl->why, sizeof jl->why, "a tombstone has no value");
		return false;
	}
	if (!jr->tombstone && values != 1) {
		snprintf(jl->why, sizeof jl->why, "%s",
		         values ? "both value and value_hex"
		                : "no value (value, value_hex or "
		                  "\"tombstone\": true)");
		return false;
	}
	if (jr->seen[M_KEY]) {
		r->key = jr->str[M_KEY];
		bits = (uint64_t)jr->len[M_KEY] * 8;
	} else if (jr->seen[M_KEY_HEX]) {
		r->key = jr->str[M_KEY_HEX];
		if (!text_decode_hex(r->key, jr->len[M_KEY_HEX],
		                     jr->str[M_KEY_HEX], &n, why))
			goto bad_key;
		bits = (uint64_t)n * 8;
	} else {
		r->key = jr->str[M_KEY_BITS];
		if (!text_decode_bits(r->key, jr->len[M_KEY_BITS],
		                      jr->str[M_KEY_BITS], &bits, why))
			goto bad_key;
	}
	if (bits > KVS_MAX_KEY_BITS) {
		snprintf(jl->why, sizeof jl->why,
		         "key is %llu bits long; the limit is %llu",
		         (unsigned long long)bits,
		         (unsigned long long)KVS_MAX_KEY_BITS);
		return false;
	}
	r->key_bits = (uint32_t)bits;
	r->kind = jr->tombstone ? KVS_KIND_TOMBSTONE : KVS_KIND_VALUE;
	if (jr->seen[M_VALUE]) {
		r->value = jr->str[M_VALUE];
		r->value_len = jr->len[M_VALUE];
	} else if (jr->seen[M_VALUE_HEX]) {
		r->value = jr->str[M_VALUE_HEX];
		if (!text_decode_hex(r->value, jr->len[M_VALUE_HEX],
		                     jr->str[M_VALUE_HEX], &n, why)) {
			snprintf(jl->why, sizeof jl->why, "value_hex: %s", why);
			return false;
		}
		r->value_len = n;
	}
	return true;
bad_key:
	snprintf(jl->why, sizeof jl->why, "%s: %s",
	         jr->seen[M_KEY_HEX] ? "key_hex" : "key_bits", why);
	return false;
}

static int parse_jsonl(uint8_t *buf, size_t len, uint64_t *number,
                       struct record_list *list)
{
	uint8_t *p = buf, *end = buf + len;
	uint64_t line = *number;

	while (p < end) {
		uint8_t *eol = memchr(p, '\n', (size_t)(end - p));
		struct json_line jl;
		struct json_record jr = {0};
		struct record r = {0};
		int rc;

		jl.start = p;
		jl.end = eol ? eol : end;
		jl.number = r.number = ++line;
		if (!json_object(&jl, &jr) || !json_to_record(&jl, &jr, &r))
			return input_error(INPUT_JSONL, line, "%s", jl.why);
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
