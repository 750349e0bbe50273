# SPDX-License-Identifier: GPL-2.0
# Shared helpers for riser's scripts: one progress line per step, failures that
# say which step, which command and what to do next.

_step=""
_t0=0

step() {
	_step=$1
	_t0=$(date +%s)
	printf '==> %s ... ' "$_step" >&2
}

ok() {
	printf 'ok%s (%ss)\n' "${1:+, $1}" "$(($(date +%s) - _t0))" >&2
}

die() {
	printf '\nFAILED: %s\n  step: %s\n  what to do: %s\n' "$1" "${_step:-none}" "${2:-see above}" >&2
	exit 1
}

# run DESCRIPTION CMD...: run CMD with output to a temporary log; on failure show
# the log's tail and stop with the failing command named.
run() {
	local what=$1
	shift
	local out
	out=$(mktemp)
	if ! "$@" >"$out" 2>&1; then
		tail -n 25 "$out" >&2
		rm -f "$out"
		die "$what failed: $*" "fix the cause shown above and rerun the command"
	fi
	rm -f "$out"
}

# missing_pkgs PKG...: print the Debian packages of PKG... that are not installed.
missing_pkgs() {
	local p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || printf '%s ' "$p"
	done
}

# fetch_linux_source CACHE SERIES: Debian's linux-source-SERIES tarball into
# CACHE/src (with its version in CACHE/src/version), unless it is there.
fetch_linux_source() {
	local cache=$1 series=$2 deb
	[ ! -f "$cache/src/linux-source-$series.tar.xz" ] || return 0
	rm -rf "$cache/src.tmp"
	mkdir -p "$cache/src.tmp"
	(cd "$cache/src.tmp" && run "apt-get download linux-source-$series" \
		apt-get download -q "linux-source-$series")
	deb=$(ls "$cache"/src.tmp/linux-source-"$series"_*.deb)
	run "dpkg -x $deb" dpkg -x "$deb" "$cache/src.tmp/x"
	# Debian's version (7.3.4-1~bpo13+1) names the tree.
	basename "$deb" | sed -E 's/^linux-source-[^_]+_([^-_]+).*/\1/' >"$cache/src.tmp/version"
	mv "$cache/src.tmp/x/usr/src/linux-source-$series.tar.xz" "$cache/src.tmp/"
	rm -rf "$cache/src.tmp/x" "$deb"
	rm -rf "$cache/src"
	mv "$cache/src.tmp" "$cache/src"
}

# gcc_skip_globs RUST_MAKEFILE: the C flags of a GCC-built kernel that libclang
# does not take, as the kernel's rust/Makefile lists them for its own bindgen
# run (`bindgen_skip_c_flags := ...` and its continuation lines), in the array
# GCC_SKIP_GLOBS, make's `%` patterns as shell globs. gcc_skipped FLAG: FLAG
# is one of them. scripts/bindgen-module and scripts/clang-gcc-flags use both.
gcc_skip_globs() {
	local skip
	skip=$(sed -n '/^bindgen_skip_c_flags[[:space:]]*:=/,/[^\\]$/p' "$1" |
		sed 's/^bindgen_skip_c_flags[[:space:]]*:=//; s/\\$//')
	[ -n "$skip" ] || { echo "${0##*/}: no bindgen_skip_c_flags in $1" >&2; return 1; }
	read -r -a GCC_SKIP_GLOBS <<<"$(tr '\n' ' ' <<<"${skip//%/*}")"
}
gcc_skipped() {
	local g
	for g in "${GCC_SKIP_GLOBS[@]}"; do
		# shellcheck disable=SC2254
		case $1 in $g) return 0 ;; esac
	done
	return 1
}
