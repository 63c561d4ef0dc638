/*
 * kvseg.c — the kvseg command: verb dispatch, help, and what every verb
 * shares (the option scanner, error reporting, exit codes, buffers).
 *
 * Every argument is untrusted, so options are scanned by hand rather than
 * with getopt: each problem gets one message in the tool's own form
 * ("kvseg VERB: reason") and exit status 2, and nothing is printed twice.
 * docs/USAGE.md is the user's manual; the help texts here summarise it.
 */
#include "kvseg_cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef KVSEG_VERSION
#define KVSEG_VERSION "unknown"
#endif

struct verb {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *help;
	const char *summary;
};

static const char build_help[] =
    "Usage: kvseg build [OPTIONS] OUT\n"
    "\n"
    "Reads records from stdin, sorts them by key if needed and writes\n"
    "the segment OUT (published atomically: nothing is created on\n"
    "error).\n"
    "\n"
    "  --profile byte|bit     key profile (default byte)\n"
    "  --framing typed|raw    typed allows tombstones (default typed)\n"
    "  --restart K            restart interval, 1..65536 (default 15)\n"
    "  --input tsv|nul|jsonl  input format (default tsv)\n"
    "  --last-wins            a repeated key keeps its last record\n"
    "                         (default: a repeated key is an error)\n"
    "  --sequence N           the segment's sequence number (default 0)\n"
    "  --codes LCP,KEYLEN,VALLEN\n"
    "                         bit-profile count codes, e.g. eg3,deg0,g7\n"
    "  --memory BYTES         memory for records before sorting in runs\n"
    "                         (suffix K, M or G; default 256M)\n"
    "\n"
    "tsv:   KEY<TAB>VALUE per line; a line without a TAB is a tombstone.\n"
    "       Escapes: \\\\ \\t \\n \\r \\0 \\xHH; a key \\b0101... is a\n"
    "       bit string.\n"
    "nul:   KEY<NUL>VALUE<NUL> repeated, no escapes, no tombstones.\n"
    "jsonl: {\"key\": \"..\", \"value\": \"..\"} per line; also key_hex,\n"
    "       key_bits, value_hex and \"tombstone\": true.\n";

static const char get_help[] =
    "Usage: kvseg get [--quiet] SEG KEY\n"
    "\n"
    "Writes KEY's value bytes to stdout, unchanged. KEY is written as in\n"
    "TSV (escapes, \\b bit keys); put -- before a KEY that starts with\n"
    "a dash.\n"
    "Exit status 1 (and a note on stderr unless --quiet) when the key is\n"
    "absent or deleted by a tombstone.\n"
    "\n"
    "  -q, --quiet   no note on stderr for absent or deleted keys\n";

static const char scan_help[] =
    "Usage: kvseg scan SEG [OPTIONS]\n"
    "\n"
    "Prints records in key order, in build's input syntax.\n"
    "\n"
    "  --prefix P           only keys that start with P\n"
    "  --from A             keys >= A\n"
    "  --to B               keys < B\n"
    "  --limit N            at most N records\n"
    "  --format tsv|jsonl   output format (default tsv)\n";

static const char dump_help[] =
    "Usage: kvseg dump SEG\n"
    "\n"
    "Prints every record, one per line, in the canonical TSV form: two\n"
    "segments holding the same records dump identically, whatever their\n"
    "modes.\n";

static const char verify_help[] =
    "Usage: kvseg verify SEG...\n"
    "\n"
    "Opens each segment and checks every byte of it (checksums, every\n"
    "record, the index). Prints \"SEG: ok\" on stdout, or the first\n"
    "problem on stderr, and goes on to the next file. Exit status 3 if\n"
    "any segment is damaged, 4 if one could not be read.\n";

static const char stat_help[] =
    "Usage: kvseg stat [--json] SEG\n"
    "\n"
    "Prints the segment's mode, parameters, record counts and how its\n"
    "bytes are spent.\n"
    "\n"
    "  --json   one JSON object instead of text\n";

static const char merge_help[] =
    "Usage: kvseg merge -o OUT [OPTIONS] IN...\n"
    "\n"
    "Merges the segments IN (oldest first) into the new segment OUT: for\n"
    "a key in several inputs the newest input's record wins. Prints a\n"
    "summary line; a progress bar on stderr when it is a terminal.\n"
    "OUT must not be an input, nor exist unless --force is given.\n"
    "\n"
    "  -o, --output OUT       the segment to write\n"
    "  --force                replace OUT if it exists\n"
    "  --profile byte|bit     output key profile (default: byte if\n"
    "                         every input is byte, else bit)\n"
    "  --framing typed|raw    output framing (default: raw if every\n"
    "                         input is raw, else typed)\n"
    "  --restart K            restart interval (default: the newest's)\n"
    "  --sequence N           sequence (default: highest input's + 1)\n"
    "  --codes LCP,KEYLEN,VALLEN\n"
    "                         bit-profile count codes (default: the\n"
    "                         newest bit-profile input's)\n"
    "  --drop-tombstones      drop tombstones and the records they hide\n"
    "                         (needs --includes-oldest)\n"
    "  --includes-oldest      the inputs include the oldest segment:\n"
    "                         nothing older can hold deleted keys\n"
    "  -q, --quiet            no summary, no progress bar\n";

static const char catalog_help[] =
    "Usage: kvseg catalog DIR init\n"
    "       kvseg catalog DIR list [--json]\n"
    "       kvseg catalog DIR add SEG...\n"
    "       kvseg catalog DIR merge [NAME...|all] [MERGE OPTIONS]\n"
    "       kvseg catalog DIR get [--quiet] KEY...\n"
    "       kvseg catalog DIR scan [--prefix P] [--tombstones]\n"
    "\n"
    "Manages the catalog of the segment directory DIR: its live\n"
    "segments, oldest first, under a generation number; get and scan\n"
    "read them as one: each key's binding in the newest segment that\n"
    "has it, a key deleted there absent.\n"
    "\n"
    "  init    create the catalog if there is none; print the generation\n"
    "  list    the generation, then NAME SEQUENCE RECORDS SIZE per live\n"
    "          segment, oldest first (--json: one JSON object)\n"
    "  add     append segment files of DIR as the newest\n"
    "  merge   merge the named live segments (consecutive in age; all by\n"
    "          default) into DIR/seg-SEQUENCE.kvs and publish it in their\n"
    "          place; merge options as for kvseg merge, without\n"
    "          --includes-oldest (known from the catalog); the sequence\n"
    "          is by default the newest input's\n"
    "  get     KEY's value as kvseg get writes it; with several KEYs,\n"
    "          KEY<TAB>VALUE lines in TSV syntax; exit 1 if one is absent\n"
    "          or deleted\n"
    "  scan    every key in order, in TSV syntax as kvseg scan prints;\n"
    "          --prefix P: only keys that start with P; --tombstones:\n"
    "          deleted keys too, as their key alone\n"
    "\n"
    "  -q, --quiet   no output from init, add and merge; no note on\n"
    "                stderr for get's absent or deleted keys\n";

static const struct verb verbs[] = {
    {"build", cmd_build, build_help, "write a segment from records on stdin"},
    {"get", cmd_get, get_help, "print the value of one key"},
    {"scan", cmd_scan, scan_help, "print records in key order"},
    {"dump", cmd_dump, dump_help, "print every record in the canonical format"},
    {"verify", cmd_verify, verify_help, "check segments completely"},
    {"stat", cmd_stat, stat_help, "describe a segment"},
    {"merge", cmd_merge, merge_help, "merge segments into one"},
    {"catalog", cmd_catalog, catalog_help, "manage a directory's catalog"},
};

#define VERB_COUNT (sizeof verbs / sizeof verbs[0])

static const struct verb *find_verb(const char *name)
{
	for (size_t i = 0; i < VERB_COUNT; i++) {
		if (strcmp(verbs[i].name, name) == 0)
			return &verbs[i];
	}
	return NULL;
}

int exit_for_status(kvs_status st)
{
	if (st == KVS_E_IO || st == KVS_E_NOMEM)
		return EXIT_SYSTEM;
	return EXIT_DATA;
}

static void vreport(const char *verb, const char *file, const char *fmt,
                    va_list ap)
{
	fflush(stdout);
	fputs("kvseg", stderr);
	if (verb)
		fprintf(stderr, " %s", verb);
	fputs(": ", stderr);
	if (file)
		fprintf(stderr, "%s: ", file);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void cli_error(const char *verb, const char *file, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(verb, file, fmt, ap);
	va_end(ap);
}

int cli_error_kvs(const char *verb, const char *file, kvs_status st,
                  const kvs_error *err, const char *suffix)
{
	const char *msg = err->message;
	size_t n = strlen(file);

	if (msg[0] == '\0')
		msg = kvs_strerror(st);
	else if (strncmp(msg, file, n) == 0 && msg[n] == ':' &&
	         msg[n + 1] == ' ')
		msg += n + 2;
	cli_error(verb, file, "%s%s", msg, suffix);
	return exit_for_status(st);
}

int cli_refuse_input_as_output(const char *verb, const char *out,
                               const char *const *ins, size_t n,
                               bool read_stdin)
{
	struct stat o, i;

	if (stat(out, &o) != 0)
		return EXIT_OK; /* nothing to replace (or OUT's open says why) */
	if (read_stdin && fstat(STDIN_FILENO, &i) == 0 &&
	    i.st_dev == o.st_dev && i.st_ino == o.st_ino)
		return cli_usage(verb,
		                 "%s is also the standard input, which would "
		                 "be replaced while it is read: write to "
		                 "another file",
		                 out);
	for (size_t k = 0; k < n; k++)
		if (stat(ins[k], &i) == 0 && i.st_dev == o.st_dev &&
		    i.st_ino == o.st_ino)
			return cli_usage(verb,
			                 "the output %s is also the input %s, "
			                 "which it would replace",
			                 out, ins[k]);
	return EXIT_OK;
}

int cli_refuse_directory_output(const char *verb, const char *out)
{
	struct stat o;

	if (lstat(out, &o) == 0 && S_ISDIR(o.st_mode))
		return cli_usage(verb,
		                 "%s is a directory: OUT names the segment "
		                 "file to write (as in %s/NAME.kvs)",
		                 out, out);
	return EXIT_OK;
}

/* The standard output if it is a regular file: appending to a file kvseg
 * reads changes it under kvseg, and '>' has emptied it already. */
static bool stdout_file(struct stat *o)
{
	return fstat(STDOUT_FILENO, o) == 0 && S_ISREG(o->st_mode);
}

int cli_refuse_stdout_input(const char *verb, const char *const *ins, size_t n)
{
	struct stat o, i;

	if (!stdout_file(&o))
		return EXIT_OK;
	for (size_t k = 0; k < n; k++)
		if (stat(ins[k], &i) == 0 && i.st_dev == o.st_dev &&
		    i.st_ino == o.st_ino)
			return cli_usage(verb,
			                 "the standard output is the input %s "
			                 "itself: send the output elsewhere "
			                 "(kvseg never writes into a file it "
			                 "reads)",
			                 ins[k]);
	return EXIT_OK;
}

int cli_refuse_stdout_in_dir(const char *verb, const char *dir)
{
	struct stat o, d;
	DIR *list;
	struct dirent *e;
	int rc = EXIT_OK;

	if (!stdout_file(&o) || stat(dir, &d) != 0 || d.st_dev != o.st_dev)
		return EXIT_OK;
	list = opendir(dir);
	if (!list)
		return EXIT_OK; /* opening the catalog will say why */
	while (rc == EXIT_OK && (e = readdir(list)) != NULL) {
		struct stat i;

		if (e->d_ino == o.st_ino &&
		    fstatat(dirfd(list), e->d_name, &i, AT_SYMLINK_NOFOLLOW) ==
		        0 &&
		    i.st_dev == o.st_dev && i.st_ino == o.st_ino)
			rc = cli_usage(
			    verb,
			    "the standard output is %s/%s, a file of "
			    "the segment directory, which the catalog "
			    "reads: send the output elsewhere (kvseg "
			    "never writes into a file it reads)",
			    dir, e->d_name);
	}
	closedir(list);
	return rc;
}

int cli_usage(const char *verb, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(verb, NULL, fmt, ap);
	va_end(ap);
	if (verb)
		fprintf(stderr, "Try 'kvseg %s --help'.\n", verb);
	else
		fputs("Try 'kvseg --help'.\n", stderr);
	return EXIT_USAGE;
}

int cli_flush_stdout(const char *verb)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		cli_error(verb, "stdout", "write error: %s", strerror(errno));
		return EXIT_SYSTEM;
	}
	return EXIT_OK;
}

int cli_help(const char *name)
{
	const struct verb *v = find_verb(name);

	if (v)
		fputs(v->help, stdout);
	return cli_flush_stdout(name);
}

/* ---- option scanner ---------------------------------------------------- */

void cli_args_init(struct cli_args *a, const char *verb, int argc, char **argv)
{
	a->verb = verb;
	a->argc = argc;
	a->argv = argv;
	a->next = 1; /* argv[0] is the verb */
	a->operands_only = false;
}

int cli_args_next(struct cli_args *a, const struct cli_option *opts,
                  const char **value)
{
	const char *arg, *name, *eq;
	size_t name_len;

	if (a->next >= a->argc)
		return ARG_END;
	arg = a->argv[a->next++];
	*value = arg;
	if (a->operands_only || arg[0] != '-' || arg[1] == '\0')
		return ARG_OPERAND;
	if (strcmp(arg, "--") == 0) {
		a->operands_only = true;
		return cli_args_next(a, opts, value);
	}
	if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)
		return ARG_HELP;
	if (arg[1] != '-') {
		/* Short options: those a table spells "-x"; one with a value
		 * takes the next argument. */
		for (const struct cli_option *o = opts; o && o->name; o++) {
			if (o->name[0] != '-' || strcmp(o->name, arg) != 0)
				continue;
			*value = NULL;
			if (!o->has_value)
				return o->id;
			if (a->next >= a->argc) {
				cli_usage(a->verb, "option '%s' needs a value",
				          arg);
				return ARG_ERROR;
			}
			*value = a->argv[a->next++];
			return o->id;
		}
		cli_usage(a->verb,
		          "unknown option '%s' (put -- before an "
		          "operand that starts with -)",
		          arg);
		return ARG_ERROR;
	}
	name = arg + 2;
	eq = strchr(name, '=');
	name_len = eq ? (size_t)(eq - name) : strlen(name);
	for (const struct cli_option *o = opts; o && o->name; o++) {
		if (o->name[0] == '-' || strlen(o->name) != name_len ||
		    memcmp(o->name, name, name_len) != 0)
			continue;
		if (!o->has_value) {
			if (eq) {
				cli_usage(a->verb,
				          "option '--%s' takes no value",
				          o->name);
				return ARG_ERROR;
			}
			*value = NULL;
			return o->id;
		}
		if (eq) {
			*value = eq + 1;
		} else if (a->next < a->argc) {
			*value = a->argv[a->next++];
		} else {
			cli_usage(a->verb, "option '--%s' needs a value",
			          o->name);
			return ARG_ERROR;
		}
		return o->id;
	}
	cli_usage(a->verb, "unknown option '--%.*s'", (int)name_len, name);
	return ARG_ERROR;
}

bool cli_parse_u64(const char *verb, const char *what, const char *text,
                   uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = text;

	if (*p == '\0')
		goto bad;
	for (; *p; p++) {
		unsigned d;

		if (*p < '0' || *p > '9')
			goto bad;
		d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			goto range;
		v = v * 10 + d;
	}
	if (v < min || v > max)
		goto range;
	*out = v;
	return true;
bad:
	cli_usage(verb, "%s: '%s' is not a decimal number", what, text);
	return false;
range:
	cli_usage(verb, "%s: '%s' is out of range (%llu..%llu)", what, text,
	          (unsigned long long)min, (unsigned long long)max);
	return false;
}

bool cli_parse_codes(const char *verb, const char *text,
                     kvs_code_spec codes[KVS_FIELD_COUNT])
{
	static const char *const field_names[3] = {"LCP", "KEYLEN", "VALLEN"};
	const char *p = text;

	for (int i = 0; i < 3; i++) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		char part[32];

		if ((i < 2) != (comma != NULL)) {
			cli_usage(verb,
			          "--codes: '%s' is not three codes "
			          "LCP,KEYLEN,VALLEN",
			          text);
			return false;
		}
		if (n >= sizeof part || n == 0) {
			cli_usage(verb, "--codes: %s code is %s",
			          field_names[i], n ? "too long" : "empty");
			return false;
		}
		memcpy(part, p, n);
		part[n] = '\0';
		if (kvs_code_spec_parse(part, &codes[i]) != KVS_OK ||
		    kvs_code_spec_check(&codes[i]) != KVS_OK) {
			cli_usage(
			    verb,
			    "--codes: %s code '%s' is not a code (egN for "
			    "N in 0..63, gM for M in 1..255, fixedW for W in "
			    "1..64; a 'd' in front for delta)",
			    field_names[i], part);
			return false;
		}
		p = comma ? comma + 1 : p + n;
	}
	return true;
}

bool cli_parse_profile(const char *verb, const char *text, kvs_profile *out)
{
	if (strcmp(text, "byte") == 0)
		*out = KVS_PROFILE_BYTE;
	else if (strcmp(text, "bit") == 0)
		*out = KVS_PROFILE_BIT;
	else
		return cli_usage(verb, "--profile: '%s' is not byte or bit",
		                 text) == EXIT_OK;
	return true;
}

bool cli_parse_framing(const char *verb, const char *text, kvs_framing *out)
{
	if (strcmp(text, "typed") == 0)
		*out = KVS_FRAMING_TYPED;
	else if (strcmp(text, "raw") == 0)
		*out = KVS_FRAMING_RAW;
	else
		return cli_usage(verb, "--framing: '%s' is not typed or raw",
		                 text) == EXIT_OK;
	return true;
}

char *cli_path_join(const char *dir, const char *name)
{
	size_t d = strlen(dir), n = strlen(name);
	char *p = malloc(d + n + 2);

	if (!p)
		return NULL;
	memcpy(p, dir, d);
	if (d && dir[d - 1] != '/')
		p[d++] = '/';
	memcpy(p + d, name, n + 1);
	return p;
}

/* ---- growable byte buffer ---------------------------------------------- */

bool sb_reserve(struct strbuf *sb, size_t n)
{
	size_t cap;
	uint8_t *p;

	if (sb->cap - sb->len >= n)
		return true;
	if (n > SIZE_MAX / 2 - sb->len)
		return false;
	cap = sb->cap ? sb->cap : 256;
	while (cap - sb->len < n)
		cap *= 2;
	p = realloc(sb->data, cap);
	if (!p)
		return false;
	sb->data = p;
	sb->cap = cap;
	return true;
}

bool sb_append(struct strbuf *sb, const void *data, size_t n)
{
	if (!sb_reserve(sb, n))
		return false;
	if (n)
		memcpy(sb->data + sb->len, data, n);
	sb->len += n;
	return true;
}

bool sb_putc(struct strbuf *sb, uint8_t c)
{
	if (sb->len == sb->cap && !sb_reserve(sb, 1))
		return false;
	sb->data[sb->len++] = c;
	return true;
}

void sb_free(struct strbuf *sb)
{
	free(sb->data);
	sb->data = NULL;
	sb->len = sb->cap = 0;
}

/* ---- main -------------------------------------------------------------- */

static int main_help(void)
{
	fputs("Usage: kvseg VERB [OPTIONS] ARGS...\n"
	      "\n"
	      "Builds, reads, checks and merges segments: immutable files of\n"
	      "records sorted by key (libkvseg); manages segment catalogs.\n"
	      "\n"
	      "Verbs:\n",
	      stdout);
	for (size_t i = 0; i < VERB_COUNT; i++)
		printf("  %-8s %s\n", verbs[i].name, verbs[i].summary);
	fputs("\n"
	      "  kvseg help VERB, kvseg VERB --help   help on one verb\n"
	      "  kvseg -V, kvseg --version            the version\n"
	      "\n"
	      "Exit status: 0 ok, 1 key not found (get), 2 usage error,\n"
	      "3 bad data (input records, damaged segment), 4 I/O or system\n"
	      "error. docs/USAGE.md is the manual.\n",
	      stdout);
	return cli_flush_stdout(NULL);
}

/* The buffer of stdout: records go out in large writes. */
static char stdout_buffer[1 << 16];

bool cli_stdin_closed;

/*
 * Started with fd 0, 1 or 2 closed, the next file kvseg opened would take
 * its number: build's temporary segment would be read as stdin, messages
 * written into it. Such fds get /dev/null, and build refuses a closed
 * stdin rather than reading nothing.
 */
static void fill_standard_fds(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		if (fd == 0)
			cli_stdin_closed = true;
		if (open("/dev/null", fd ? O_WRONLY : O_RDONLY) != fd)
			_exit(EXIT_SYSTEM);
	}
}

int main(int argc, char **argv)
{
	const struct verb *v;

	fill_standard_fds();
	setvbuf(stdout, stdout_buffer, _IOFBF, sizeof stdout_buffer);
	if (argc < 2)
		return cli_usage(NULL, "no verb given");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
		return main_help();
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		printf("kvseg %s (segment format %d)\n", KVSEG_VERSION,
		       KVS_SEGMENT_VERSION);
		return cli_flush_stdout(NULL);
	}
	if (strcmp(argv[1], "help") == 0) {
		if (argc == 2)
			return main_help();
		if (argc > 3)
			return cli_usage("help", "one verb at a time");
		if (!find_verb(argv[2]))
			return cli_usage(NULL, "unknown verb '%s'", argv[2]);
		return cli_help(argv[2]);
	}
	v = find_verb(argv[1]);
	if (!v)
		return cli_usage(NULL, "unknown verb '%s'", argv[1]);
	if (cli_fault_install(v->name) != 0) {
		cli_error(v->name, NULL, "sigaction: %s", strerror(errno));
		return EXIT_SYSTEM;
	}
	return v->run(argc - 1, argv + 1);
}
