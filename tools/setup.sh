#!/usr/bin/env bash
# setup.sh — installs the Debian packages segfs needs, but only those that
# are missing, so running it twice is safe. Needs root (or sudo) only when
# something is missing.
#
#   tools/setup.sh          what building, installing and running need
#                           (tools/demo.sh)
#   tools/setup.sh --test   also what the tests, the fuzz targets and the
#                           benchmarks' peers need (tools/test.sh)
set -euo pipefail

packages=(
	gcc meson ninja-build pkg-config python3      # build, scripts
	libfuse3-dev fuse3 libzstd-dev                # daemon, compression
	nettle-dev                                    # SHA-256 of long names
	libjansson-dev                                # JSON in kvseg and segfs
	libisal-dev                                   # CRC32C (optional, faster)
	libcmocka-dev                                 # unit tests (meson setup
	                                              # configures them)
	scdoc bash-completion                         # man pages, completions
)

test_packages=(
	g++                                           # C++ benchmark peers
	clang libclang-rt-dev                         # libFuzzer targets
	man-db                                        # the install test renders
	                                              # the man pages (man -l)
	libsdsl-dev                                   # benchmark peers
	librocksdb-dev liblmdb-dev libleveldb-dev     # segment and merge peers
)

case ${1:-} in
--test) packages+=("${test_packages[@]}") ;;
'') ;;
*)
	echo "usage: tools/setup.sh [--test]" >&2
	exit 2
	;;
esac

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "setup: every package is installed"
	exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null; then
		sudo=(sudo)
	else
		echo "setup: missing packages (${missing[*]}); run as root" >&2
		exit 1
	fi
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
