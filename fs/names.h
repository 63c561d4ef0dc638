/*
 * names.h — the name mapping of segfs: key (component) bytes to file names
 * and back (docs/USAGE.md, "Names").
 *
 * The mapping is injective and canonical: every key component has exactly
 * one name, and a name that the encoder would not produce for the key it
 * decodes to (lowercase hex, a needless escape) names nothing. Decoding is
 * lenient and canonicality is checked by encoding the decoded key again
 * and comparing (segfs_name_matches).
 *
 *   empty component            %_
 *   "." and ".."               %2E and %2E%2E
 *   safe bytes                 themselves: printable ASCII (space to ~)
 *                              except % and /, and well-formed UTF-8 of
 *                              U+00A0 and above (no surrogates)
 *   any other byte             %XX, uppercase hex
 *   a final 1..7 bits          %: and the bits as 0 and 1 characters
 *   over 255 bytes             the longest whole-token prefix of at most
 *                              221 bytes, then %# and 32 lowercase hex
 *                              digits: the first 128 bits of the SHA-256
 *                              of the component (its bytes, then its
 *                              length in bits as 8 little-endian bytes)
 *
 * "%_", "%:" and "%#" never appear otherwise: the encoder writes "%" only
 * before two uppercase hex digits.
 */
#ifndef SEGFS_NAMES_H
#define SEGFS_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SEGFS_NAME_MAX 255
/* Hashed names keep at most this many bytes of the encoded component. */
#define SEGFS_NAME_HASH_PREFIX (SEGFS_NAME_MAX - 2 - 32)

/* Writes the name of the component of bits bits at comp (a final partial
 * byte holds its bits most significant first) to out, NUL-terminated;
 * returns its length (1..255). */
size_t segfs_name_encode(const uint8_t *comp, uint64_t bits,
                         char out[SEGFS_NAME_MAX + 1]);

typedef enum segfs_name_kind {
	SEGFS_NAME_INVALID = 0, /* no key has this name */
	SEGFS_NAME_EXACT = 1,   /* the component itself */
	SEGFS_NAME_HASHED = 2,  /* a prefix of the component (whole bytes) */
} segfs_name_kind;

/*
 * Decodes name (len bytes, 1..255) into key (room for len bytes) and
 * *bits. EXACT: the component, if the name is canonical. HASHED: the
 * bytes every component with this name starts with; the name then
 * matches at most one of them (segfs_name_matches tells which).
 */
segfs_name_kind segfs_name_decode(const char *name, size_t len, uint8_t *key,
                                  uint64_t *bits);

/* True when name (len bytes) is the name of the component. */
bool segfs_name_matches(const uint8_t *comp, uint64_t bits, const char *name,
                        size_t len);

#endif
