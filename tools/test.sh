#!/usr/bin/env bash
# test.sh — the README's test command and what CI runs (.ci/run): install
# what is missing, build with warnings as errors and run every test, then
# build again with AddressSanitizer and UndefinedBehaviorSanitizer and run
# every test again, then run segfs's tests under ThreadSanitizer, then fuzz
# the parsers of untrusted bytes with libFuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh --test

configure() { # DIR OPTIONS...
	local dir=$1
	shift
	if [ -d "$dir/meson-private" ]; then
		meson setup --reconfigure "$dir" "$@"
	else
		meson setup "$dir" "$@"
	fi
}

echo "== release build (-Werror)"
configure build --werror
ninja -C build
meson test -C build --print-errorlogs

echo "== sanitizer build (address, undefined)"
configure build-san --werror -Dbuildtype=debugoptimized \
	-Db_sanitize=address,undefined -Dc_args=-fno-sanitize-recover=all \
	-Dbench=disabled
ninja -C build-san
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	meson test -C build-san --print-errorlogs --no-suite large

echo "== ThreadSanitizer: segfs (the multi-threaded part) and its tests"
configure build-tsan --werror -Dbuildtype=debugoptimized \
	-Db_sanitize=thread -Dbench=disabled
ninja -C build-tsan fs/segfs tools/kvseg
TSAN_OPTIONS=halt_on_error=1 \
	meson test -C build-tsan --no-rebuild --print-errorlogs --suite fs

echo "== fuzz (50 s)"
# clang for libFuzzer; -Dfuzz=true also puts the sanitizers everywhere.
CC=clang configure build-fuzz --werror -Dfuzz=true -Dbench=disabled
ninja -C build-fuzz tests/fuzz/fuzz_segment tests/fuzz/fuzz_segment_seeds \
	tests/fuzz/fuzz_merge tests/fuzz/fuzz_view tests/fuzz/fuzz_catalog \
	tests/fuzz/fuzz_names tests/fuzz/fuzz_codes tests/fuzz/fuzz_control
mkdir -p build-fuzz/fuzz-artifacts
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT

# fuzz TARGET SECONDS [CORPUS]: libFuzzer's progress lines go to
# build-fuzz/TARGET.log; its final statistics are shown, and a crash shows
# the log's end and stops the run.
fuzz() {
	local target=$1 seconds=$2 log=build-fuzz/$1.log
	shift 2
	if ! "build-fuzz/tests/fuzz/$target" -max_total_time="$seconds" \
		-timeout=10 -artifact_prefix=build-fuzz/fuzz-artifacts/ \
		-print_final_stats=1 "$@" >"$log" 2>&1; then
		tail -n 60 "$log" >&2
		echo "$target failed; the input is in build-fuzz/fuzz-artifacts/" >&2
		exit 1
	fi
	grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' \
		"$log" || true
}

mkdir -p "$corpus/segment" "$corpus/merge" "$corpus/view" "$corpus/catalog"
build-fuzz/tests/fuzz/fuzz_segment_seeds "$corpus/segment"
cp "$corpus/segment"/* "$corpus/merge"
cp "$corpus/segment"/* "$corpus/view"
fuzz fuzz_segment 50 "$corpus/segment"

echo "== fuzz the merge's decoders with segment files (20 s)"
fuzz fuzz_merge 20 "$corpus/merge"

echo "== fuzz the merged view with segment files (15 s)"
fuzz fuzz_view 15 "$corpus/view"

echo "== fuzz the catalog parser (20 s)"
fuzz fuzz_catalog 20 "$corpus/catalog"

echo "== fuzz segfs's name mapping (10 s)"
fuzz fuzz_names 10

echo "== fuzz control/merge's requests and the merge planner (10 s)"
# seeds: 4 live segments (a.kvs b restart name=x; mixed modes), then a
# request (fuzz_control.c says how the bytes are read)
mkdir -p "$corpus/control"
for req in 'merge all' 'merge b restart tombstones=drop' \
	'merge name=x restart framing=raw name=seg-3.kvs' 'cancel 12'; do
	printf '\004\000\001\006\044\053%s' "$req" \
		>"$corpus/control/$(printf %s "$req" | tr ' =' '_-')"
done
fuzz fuzz_control 10 "$corpus/control"

echo "== fuzz the count decoders, both EG decoders in step (15 s)"
fuzz fuzz_codes 15

echo "== all tests passed (release, ASan+UBSan and TSan builds, 140 s of fuzzing)"
