/*
 * kvseg_cli.h — what the files of the kvseg tool share: exit codes, the
 * option scanner, error reporting, growable buffers and the verbs.
 *
 * The tool is a thin layer over libkvseg: kvseg.c dispatches verbs,
 * kvseg_text.c owns the textual syntax of keys and values (docs/USAGE.md),
 * kvseg_json.c writes JSON (through jansson, as kvseg_input.c reads it),
 * kvseg_input.c parses build's input formats, kvseg_build.c sorts and
 * writes (through sorted runs and a merge when the input exceeds its
 * memory bound), kvseg_read.c reads records out (get, scan, dump),
 * kvseg_info.c reports on segments (verify, stat), kvseg_merge.c merges
 * segments (merge, and the merge step of catalog), kvseg_catalog.c
 * manages a directory's catalog and kvseg_fault.c ends kvseg cleanly when
 * a segment file is cut short under it.
 */
#ifndef KVSEG_CLI_H
#define KVSEG_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "kvseg/catalog.h"
#include "kvseg/merge.h"
#include "kvseg/merge_plan.h"
#include "kvseg/segment.h"
#include "kvseg/view.h"

/* Exit codes (docs/USAGE.md, "Exit status"). */
enum {
	EXIT_OK = 0,
	EXIT_NOT_FOUND = 1,
	EXIT_USAGE = 2,
	EXIT_DATA = 3,
	EXIT_SYSTEM = 4,
};

/* kvseg was started with stdin closed (main gave it /dev/null). */
extern bool cli_stdin_closed;

/* kvseg_fault.c: a segment cut short while mapped ends kvseg with a message
 * naming it and status 3, its temporary files removed. Installed once,
 * for the verb that runs. */
int cli_fault_install(const char *verb);
/* Files to remove too on such a fault or an interrupt (build's runs:
 * *paths[0 .. *count)); NULL, NULL for none. */
void cli_fault_remove(char **const *paths, const size_t *count);
/* Around a change of those files' list: an interrupt waits until
 * cli_fault_release, so that its handler never sees the list half
 * changed. */
void cli_fault_hold(sigset_t *old);
void cli_fault_release(const sigset_t *old);

/* The exit code for a libkvseg failure: 4 for I/O and memory, else 3. */
int exit_for_status(kvs_status st);

/* "kvseg VERB: FILE: message" on stderr; file may be NULL. */
void cli_error(const char *verb, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Reports a libkvseg error about file: "kvseg VERB: FILE: message", where
 * the message already names the file when libkvseg put it there; suffix
 * (may be "") is appended. Returns the exit code for the status. */
int cli_error_kvs(const char *verb, const char *file, kvs_status st,
                  const kvs_error *err, const char *suffix);
/* A usage error: the message and a pointer to VERB --help; returns 2. */
int cli_usage(const char *verb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Flushes stdout; on failure reports it and returns 4, else 0. */
int cli_flush_stdout(const char *verb);
/* Prints VERB's help on stdout; returns 0 (or 4 if stdout fails). */
int cli_help(const char *verb);

/* ---- option scanner ---------------------------------------------------- */

/* Options are long ("--name VALUE" or "--name=VALUE") plus "-h"; "--" ends
 * them, and a lone "-" is an operand. */
struct cli_option {
	const char *name; /* without the leading "--" */
	bool has_value;
	int id; /* > 0 */
};

enum {
	ARG_OPERAND = 0, /* *value is the operand */
	ARG_END = -1,
	ARG_ERROR = -2, /* already reported */
	ARG_HELP = -3,
};

struct cli_args {
	const char *verb;
	int argc;
	char **argv;
	int next;
	bool operands_only;
};

void cli_args_init(struct cli_args *a, const char *verb, int argc, char **argv);
/* The next option's id, ARG_OPERAND, ARG_HELP (-h, --help), ARG_END or
 * ARG_ERROR; *value is the option's value or the operand. */
int cli_args_next(struct cli_args *a, const struct cli_option *opts,
                  const char **value);

/* Parses a decimal integer in [min, max]; reports and returns false on
 * anything else. */
bool cli_parse_u64(const char *verb, const char *what, const char *text,
                   uint64_t min, uint64_t max, uint64_t *out);
/* Parses "--codes LCP,KEYLEN,VALLEN"; reports and returns false if bad. */
bool cli_parse_codes(const char *verb, const char *text,
                     kvs_code_spec codes[KVS_FIELD_COUNT]);
/* Parses "byte"/"bit" and "typed"/"raw"; report and return false if bad. */
bool cli_parse_profile(const char *verb, const char *text, kvs_profile *out);
bool cli_parse_framing(const char *verb, const char *text, kvs_framing *out);
/* Joins a directory and a file name into a new string; NULL if no memory. */
char *cli_path_join(const char *dir, const char *name);
/*
 * Refuses (EXIT_USAGE, with a message) to write OUT when it is the same
 * file as one that the verb reads: an input ins[0 .. n), or its standard
 * input when read_stdin. Writing would replace the input before, or
 * while, it is read: `kvseg merge old.seg new.seg` once replaced old.seg
 * with the merge of new.seg alone. EXIT_OK when OUT does not exist yet.
 */
int cli_refuse_input_as_output(const char *verb, const char *out,
                               const char *const *ins, size_t n,
                               bool read_stdin);

/* Refuses (EXIT_USAGE) an OUT that names a directory: a usage error,
 * where a FIFO, socket or device there is refused by libkvseg (4). */
int cli_refuse_directory_output(const char *verb, const char *out);
/*
 * Refuses (EXIT_USAGE) to print when the standard output is a regular file
 * that the verb reads: one of ins[0 .. n) (a segment; `kvseg dump a.seg
 * >> a.seg` would append to the segment it reads, and '>' empties it
 * before kvseg starts), or, for cli_refuse_stdout_in_dir, any file of the
 * segment directory dir (a catalog reads its CATALOG, its segments and,
 * when it makes itself anew, every file there).
 */
int cli_refuse_stdout_input(const char *verb, const char *const *ins, size_t n);
int cli_refuse_stdout_in_dir(const char *verb, const char *dir);

/* ---- growable byte buffer ---------------------------------------------- */

struct strbuf {
	uint8_t *data;
	size_t len;
	size_t cap;
};

/* Makes room for n more bytes; false when memory runs out. */
bool sb_reserve(struct strbuf *sb, size_t n);
bool sb_append(struct strbuf *sb, const void *data, size_t n);
bool sb_putc(struct strbuf *sb, uint8_t c);
void sb_free(struct strbuf *sb);

/* ---- keys and values as text (kvseg_text.c) ---------------------------- */

/* Where a text field appears, for the rules that differ between them. */
enum field_kind {
	FIELD_KEY,   /* \b bit keys allowed */
	FIELD_VALUE, /* bytes only */
};

/*
 * Decodes the escaped text [in, in + len) into out, which may be in itself
 * (decoding never lengthens). Keys may be "\b" followed by 0/1 digits. On
 * success returns true with the length in bits in *bits (8 * bytes for
 * byte strings); on failure false with a reason in why.
 */
bool text_decode(const uint8_t *in, size_t len, enum field_kind kind,
                 uint8_t *out, uint64_t *bits, char why[96]);
/* Decodes a string of 0/1 digits into a bit string (may be in place). */
bool text_decode_bits(const uint8_t *in, size_t len, uint8_t *out,
                      uint64_t *bits, char why[96]);
/* Decodes hex digits (either case, even count) into bytes, in place or not. */
bool text_decode_hex(const uint8_t *in, size_t len, uint8_t *out,
                     size_t *out_len, char why[96]);
/* Appends the canonical escaped form of a key or value of bits bits. */
bool text_encode(struct strbuf *sb, const uint8_t *data, uint64_t bits);

/* Decodes a command-line key into a new buffer (freed by the caller). */
bool text_decode_arg(const char *arg, uint8_t **key, uint64_t *bits,
                     char why[96]);

/* True if [data, data + len) is well-formed UTF-8 (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF). */
bool utf8_valid(const uint8_t *data, size_t len);
/* Length of the well-formed UTF-8 sequence starting at p (at most n bytes
 * available), or 0 if it is not one. */
size_t utf8_sequence_len(const uint8_t *p, size_t n);

/* Key helpers over MSB-first bit strings. */
bool key_has_prefix(const uint8_t *key, uint64_t key_bits,
                    const uint8_t *prefix, uint64_t prefix_bits);

/* ---- JSON output (kvseg_json.c) ---------------------------------------- */

/*
 * Writes JSON text into a strbuf, commas placed by the writer: open and
 * close objects and arrays, name members, add values. Values of jansson
 * type are taken over (and freed); NULL (jansson out of memory) fails the
 * writer. ok turns false once memory ran out, and stays false.
 */
struct json_writer {
	struct strbuf *sb;
	bool comma; /* a value came last: the next needs a ',' */
	bool ok;
};

void json_writer_init(struct json_writer *w, struct strbuf *sb);
void json_open(struct json_writer *w, char bracket);  /* '{' or '[' */
void json_close(struct json_writer *w, char bracket); /* '}' or ']' */
void json_name(struct json_writer *w, const char *name);
void json_value(struct json_writer *w, json_t *v);
void json_u64(struct json_writer *w, uint64_t v);
void json_member(struct json_writer *w, const char *name, json_t *v);
void json_member_u64(struct json_writer *w, const char *name, uint64_t v);
/* A real written with at most digits significant digits (1..31). */
void json_member_real(struct json_writer *w, const char *name, double v,
                      int digits);
/* A key, value or name as USAGE.md's "scan" says: "NAME" when it is whole
 * bytes of valid UTF-8, "NAME_bits" when its length is not a multiple of
 * 8, "NAME_hex" (lowercase) otherwise. */
void json_member_bytes(struct json_writer *w, const char *name,
                       const uint8_t *data, uint64_t bits);

/* ---- build's input (kvseg_input.c) ------------------------------------- */

enum input_format {
	INPUT_TSV,
	INPUT_NUL,
	INPUT_JSONL,
};

/* One record of the input; key and value point into the input buffer. */
struct record {
	const uint8_t *key;
	const uint8_t *value;
	uint64_t value_len;
	uint64_t number; /* input line (tsv, jsonl) or record (nul), from 1 */
	uint32_t key_bits;
	uint32_t kind; /* kvs_kind */
};

struct record_list {
	struct record *items;
	size_t count;
	size_t cap;
};

/*
 * Parses [buf, buf + len), which holds whole records (or the end of the
 * input), decoding fields in place, and appends them to list. *number is
 * the number of the records before buf and is advanced past them. Returns
 * 0, or an exit code after reporting "kvseg build: stdin: line N: ...".
 */
int input_parse(enum input_format format, uint8_t *buf, size_t len,
                uint64_t *number, struct record_list *list);
/*
 * build's input read in chunks (kvseg_input.c): each input_read() reads
 * once into the newest chunk and appends the records it completes to a
 * list; the records point into the chunks, which stay until
 * input_release() frees all but the unparsed rest of the input.
 */
struct input_chunk;

struct input_reader {
	int fd;
	enum input_format format;
	size_t chunk_size;         /* bytes of a new chunk, at least */
	struct input_chunk *chunk; /* the newest; it links to the older */
	size_t len;                /* bytes in the newest chunk */
	size_t parsed;             /* of which parsed into records */
	size_t boundary;           /* the end of its last whole record */
	bool nul_odd;              /* nul: inside a record's value */
	uint64_t number;           /* records (lines) read so far */
	uint64_t held;             /* bytes of all chunks */
	bool eof;
};

void input_reader_init(struct input_reader *rd, int fd,
                       enum input_format format, size_t chunk_size);
/* Returns 0 or an exit code after reporting; rd->eof is set once the
 * input's end was read (and its last records parsed). */
int input_read(struct input_reader *rd, struct record_list *list);
/* True when the next input_read() starts a new chunk. */
bool input_needs_chunk(const struct input_reader *rd);
/* Frees the chunks; the records read so far must no longer be used. */
int input_release(struct input_reader *rd);
void input_reader_free(struct input_reader *rd);

/* "line" or "record": how the format numbers its records. */
const char *input_unit(enum input_format format);

/* ---- verbs ------------------------------------------------------------- */

int cmd_build(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_scan(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_catalog(int argc, char **argv);

/* Opens path for reading, reporting failures; returns 0 or an exit code. */
int open_segment(const char *verb, const char *path, kvs_segment **out);
/* Opens live segment i of catalog c (path: its path, for messages) by the
 * catalog's rules (kvs_catalog_open_segment): no symbolic link, a regular
 * file, what the catalog records. */
int open_catalog_segment(const char *verb, const kvs_catalog *c, size_t i,
                         const char *path, kvs_segment **out);
/* Reports a cursor failure on path; returns its exit code. */
int cursor_failure(const char *verb, const char *path, kvs_status st);

/* ---- reading records through a view (kvseg_read.c) --------------------- */

/* A key given as an argument, decoded. */
struct key_arg {
	uint8_t *key;
	uint64_t bits;
	bool given;
};

/* Decodes text (what: "KEY", "--prefix", ...) into k, reporting a usage
 * error and returning false when it is not a key. */
bool decode_key_arg(const char *verb, const char *what, const char *text,
                    struct key_arg *k);

enum output_format {
	OUTPUT_TSV,
	OUTPUT_JSONL,
};

/* What scan prints: the keys with the prefix, from .. to, at most limit. */
struct scan_filter {
	struct key_arg prefix, from, to;
	uint64_t limit;
	enum output_format format;
};

/*
 * get's lookups: keys[i] (texts[i] as given) in the view v of where (a
 * segment or a catalog's directory), opened with KVS_VIEW_TOMBSTONES so
 * that a deleted key is told from an absent one. One key: its value
 * exactly as stored; several: a TSV line per key found, in the order
 * given. Absent and deleted keys are noted on stderr unless quiet, and
 * make the exit code 1.
 */
int get_keys(const char *verb, const char *where, kvs_view *v,
             const struct key_arg *keys, const char *const *texts, size_t n,
             bool quiet);
/*
 * Prints the bindings of v (a segment's or a catalog's view, of where)
 * that f selects. byte_keys: every segment of v has the byte profile, so
 * a start key that is not whole bytes is sought as the whole bytes that
 * hold it.
 */
int print_records(const char *verb, const char *where, kvs_view *v,
                  bool byte_keys, const struct scan_filter *f);

/* ---- merging (kvseg_merge.c) ------------------------------------------ */

/* The options merge and catalog merge share (ids above any verb's own). */
enum {
	MERGE_OPT_PROFILE = 100,
	MERGE_OPT_FRAMING,
	MERGE_OPT_RESTART,
	MERGE_OPT_SEQUENCE,
	MERGE_OPT_CODES,
	MERGE_OPT_DROP_TOMBSTONES,
	MERGE_OPT_QUIET,
};

/* The entries of an option table for them. */
/* clang-format off */
#define MERGE_CLI_OPTIONS                                                      \
	{"profile", true, MERGE_OPT_PROFILE},                                  \
	{"framing", true, MERGE_OPT_FRAMING},                                  \
	{"restart", true, MERGE_OPT_RESTART},                                  \
	{"sequence", true, MERGE_OPT_SEQUENCE},                                \
	{"codes", true, MERGE_OPT_CODES},                                      \
	{"drop-tombstones", false, MERGE_OPT_DROP_TOMBSTONES},                 \
	{"quiet", false, MERGE_OPT_QUIET},                                     \
	{"-q", false, MERGE_OPT_QUIET}
/* clang-format on */

/* What the command line said about a merge; unset fields take defaults
 * from the inputs (merge_prepare). */
struct merge_config {
	kvs_writer_options output;
	bool profile_set, framing_set, restart_set, sequence_set, codes_set;
	bool drop_tombstones;
	bool includes_oldest;
	bool quiet;
};

/* Applies option id (a MERGE_OPT_*) with its value; returns 0 or 2. */
int merge_option(const char *verb, struct merge_config *cfg, int id,
                 const char *value);
/*
 * kvseg merge: fills in the output mode the options left open from the
 * inputs (oldest first) by the planner's rule (kvs_merge_plan_mode), and
 * the highest input sequence + 1. Checks the combination; returns 0 or an
 * exit code after reporting.
 */
int merge_prepare(const char *verb, kvs_segment *const *inputs,
                  const char *const *names, size_t n, struct merge_config *cfg);
/* The planner's request for what cfg says (names and output name left
 * unset). */
void merge_request_of(const struct merge_config *cfg, kvs_merge_request *req);
/* Reports that path holds count tombstones a raw output cannot hold;
 * returns the exit code. */
int merge_raw_tombstones(const char *verb, const char *path, uint64_t count);
/* Runs kvs_merge into out with a progress bar on a terminal (unless
 * quiet); its status, with err set on failure. */
kvs_status merge_exec(kvs_segment *const *inputs, size_t n, const char *out,
                      const struct merge_config *cfg, kvs_merge_stats *stats,
                      kvs_error *err);
/* merge_exec, reporting a failure; names[i] is input i's path, for
 * messages. Returns 0 or an exit code after reporting. */
int merge_run(const char *verb, kvs_segment *const *inputs,
              const char *const *names, size_t n, const char *out,
              const struct merge_config *cfg, kvs_merge_stats *stats);
/* Reports a kvs_merge failure, naming the input or output concerned. */
int merge_failure(const char *verb, const char *const *names, size_t n,
                  const char *out, kvs_status st, const kvs_error *err);
/* The one-line summary on stdout. */
void merge_print_summary(size_t inputs, const char *out,
                         const kvs_merge_stats *stats);

#endif
