/*
 * merge_bits_gen.c — a build-time program that writes merge_bits_tables.h:
 * the bit engine's tables of short default codes (FORMAT.md §3.1, §6.2),
 * which merge_bits_in.h decodes with and merge_bits_out.h encodes with.
 *
 * The tables used to be spelled as nested macros, which expanded to about
 * 10 MB of preprocessed C in each file of the bit engine: half the
 * compile time of merge_bits_two.c and merge_bits_tree.c. The constants
 * the tables depend on are defined here and written into the header, so
 * the engine and its tables cannot disagree.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#define BIT_SHORT   6   /* a short value's bytes at most */
#define VALLEN_BIAS 128 /* added to a VALLEN difference in vallen_codes */
#define VS_TOMB_BIT 12  /* vallen_short's tombstone bit */
#define LE_BIAS     32  /* lcp_codes holds LCP differences in ±LE_BIAS */

/* The zigzagged value z as a signed difference (FORMAT.md §3.1). */
static int unzigzag(int z)
{
	return z & 1 ? -((z + 1) / 2) : z / 2;
}

static int zigzag(int d)
{
	return d >= 0 ? 2 * d : -2 * d - 1;
}

/* A delta-EG0 VALLEN code of up to 8 bits at the top of byte b: its
 * length (0 for a longer code) and the difference it encodes. */
static int vc_len(int b)
{
	return b >= 128 ? 1 : b >= 64 ? 3 : b >= 32 ? 5 : b >= 16 ? 7 : 0;
}

static int vc_diff(int b)
{
	return unzigzag((b >> (8 - vc_len(b))) - 1);
}

/* The bits of the EG code of z + 1 >= 1 with k = 0: 2 * floor(log2) + 1. */
static int eg0_len(int z)
{
	return z + 1 >= 8 ? 7 : z + 1 >= 4 ? 5 : z + 1 >= 2 ? 3 : 1;
}

/* The bits of the delta-EG2 code of zigzagged x: EG2 of x + 4. */
static int eg2_len(int x)
{
	return x >= 64 ? 11 : x >= 32 ? 9 : x >= 16 ? 7 : x >= 8 ? 5 : 3;
}

static void emit(FILE *f, const char *decl, const int64_t *v, int rows,
                 int cols)
{
	fprintf(f, "static const %s = {\n", decl);
	for (int r = 0; r < rows; r++) {
		fprintf(f, rows > 1 ? "\t{" : "");
		for (int c = 0; c < cols; c++)
			fprintf(f, "%s%" PRId64 ",", c % 8 ? " " : "\n\t\t",
			        v[r * cols + c]);
		fprintf(f, rows > 1 ? "\n\t},\n" : "\n");
	}
	fprintf(f, "};\n\n");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s OUTPUT\n", argv[0]);
		return 2;
	}
	FILE *f = fopen(argv[1], "w");
	if (!f) {
		perror(argv[1]);
		return 1;
	}
	static int64_t vallen_codes[256], vallen_short[BIT_SHORT + 1][512],
	    lcp_short[1024], tail_short[BIT_SHORT + 1][8],
	    lcp_codes[2 * LE_BIAS];

	/*
	 * vallen_codes: the delta-EG0 VALLEN codes of up to 8 bits, by the
	 * 8 bits that begin with one: its length in the low byte (0 for a
	 * longer code), the difference it encodes plus VALLEN_BIAS above it.
	 */
	for (int b = 0; b < 256; b++)
		vallen_codes[b] =
		    vc_len(b) ? (vc_diff(b) + VALLEN_BIAS) << 8 | vc_len(b) : 0;

	/*
	 * vallen_short (typed framing): the kind bit and such a code after a
	 * value of r <= BIT_SHORT bytes, by r and the 9 bits from the kind
	 * bit: the bits from the kind bit to the value's end (the kind bit,
	 * the code, the value) in the low byte, VALLEN above it, bit
	 * VS_TOMB_BIT for a tombstone (kind bit 0, 1 bit in all); 0 for a
	 * longer code or a length below 0.
	 */
	for (int r = 0; r <= BIT_SHORT; r++)
		for (int i = 0; i < 512; i++) {
			int b = i - 256, v = b < 0 ? 0 : r + vc_diff(b);
			if (b < 0)
				vallen_short[r][i] = 1 << VS_TOMB_BIT | 1;
			else if (vc_len(b) && v >= 0)
				vallen_short[r][i] =
				    v << 8 | (1 + vc_len(b) + 8 * v);
			else
				vallen_short[r][i] = 0;
		}

	/*
	 * lcp_short: the delta-EG2 LCP code of up to 9 bits and a KEYLEN
	 * code 1 after it (the length unchanged), by the 10 bits that begin
	 * with the LCP code: the two codes' length in the low byte, the LCP
	 * difference they encode above it (an arithmetic shift by 8 gives
	 * it); 0 for a longer LCP code or another KEYLEN code.
	 */
	for (int i = 0; i < 1024; i++) {
		int z = i >= 512 ? 0 : i >= 256 ? 1 : i >= 128 ? 2 : 3;
		int n = 2 * z + 3;
		int d = unzigzag((i >> (10 - n)) - 4);
		lcp_short[i] =
		    i >= 64 && (i >> (9 - n)) & 1 ? d * 256 + n + 1 : 0;
	}

	/*
	 * tail_short (typed framing): the kind bit and the VALLEN code of a
	 * value of v <= BIT_SHORT bytes after one of r <= BIT_SHORT bytes, by
	 * r and v (7 for a tombstone: the kind bit 0): the code in bits 8 to
	 * 15, its length in the low byte, VALLEN's state after it (v, or r
	 * after a tombstone) above.
	 */
	for (int r = 0; r <= BIT_SHORT; r++)
		for (int v = 0; v < 8; v++) {
			int z = zigzag(v - r), n = eg0_len(z);
			tail_short[r][v] =
			    v == 7 ? (int64_t)r << 16 | 1
			           : (int64_t)v << 16 |
			                 (int64_t)(1 << n | (z + 1)) << 8 |
			                 (n + 1);
		}

	/*
	 * lcp_codes: the delta-EG2 code of an LCP difference d in
	 * [-LE_BIAS, LE_BIAS) and the KEYLEN code 1 after it (the length
	 * unchanged), by d + LE_BIAS: the two codes above the low byte,
	 * their length in it.
	 */
	for (int i = 0; i < 2 * LE_BIAS; i++) {
		int x = zigzag(i - LE_BIAS) + 4;
		lcp_codes[i] = (int64_t)(x << 1 | 1) << 8 | (eg2_len(x) + 1);
	}

	fprintf(f, "/* Generated by merge_bits_gen.c; do not edit. */\n\n");
	fprintf(f, "#define BIT_SHORT %d\n", BIT_SHORT);
	fprintf(f, "#define VALLEN_BIAS %d\n", VALLEN_BIAS);
	fprintf(f, "#define VS_TOMB_BIT %d\n", VS_TOMB_BIT);
	fprintf(f, "#define LE_BIAS %d\n\n", LE_BIAS);
	emit(f, "uint32_t vallen_codes[256]", vallen_codes, 1, 256);
	emit(f, "uint16_t vallen_short[BIT_SHORT + 1][512]", &vallen_short[0][0],
	     BIT_SHORT + 1, 512);
	emit(f, "int32_t lcp_short[1024]", lcp_short, 1, 1024);
	emit(f, "uint32_t tail_short[BIT_SHORT + 1][8]", &tail_short[0][0],
	     BIT_SHORT + 1, 8);
	emit(f, "uint32_t lcp_codes[2 * LE_BIAS]", lcp_codes, 1, 2 * LE_BIAS);
	if (fclose(f) != 0) {
		perror(argv[1]);
		return 1;
	}
	return 0;
}
