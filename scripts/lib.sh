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
