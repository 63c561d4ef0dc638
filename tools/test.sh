#!/usr/bin/env bash
# test.sh — the README's test command and what CI runs (.ci/run): install
# what is missing, build with warnings as errors and run every test, then
# build again with AddressSanitizer and UndefinedBehaviorSanitizer and run
# every test again.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh

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

echo "== all tests passed (release and sanitizer builds)"
