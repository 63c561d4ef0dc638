/*
 * kvseg/frames.h — the frames scan: a pass over a segment's record stream
 * that parses every record's framing (FORMAT.md §6) and skips keys and
 * values without rebuilding the keys.
 *
 * It is not part of the public API: it answers no question a user asks
 * (kvs_segment_verify checks a segment, cursors read it). The benchmarks
 * time it as the floor of a scan (seed 001's "frames" rows) and the tests
 * and fuzzers run it as one more reader of untrusted bytes.
 */
#ifndef KVSEG_FRAMES_H
#define KVSEG_FRAMES_H

#include <stdint.h>

#include "kvseg/segment.h"

/* Counts the records of s in *records; KVS_E_CORRUPT on bad framing. */
kvs_status kvsi_segment_scan_frames(kvs_segment *s, uint64_t *records);

#endif
