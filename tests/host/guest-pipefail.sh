#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The guest scripts' log helpers under pipefail, on the host: no guest, no
# kernel. tests/common/lib.sh sets pipefail for every guest script, and then
# a pipeline whose reader stops early (grep -q, grep -m1, head, awk's exit)
# fails when its producer, still writing, dies of SIGPIPE. Here dmesg is a
# stub printing a log of PIPEFAIL_LINES lines (default 150000, far more
# than a pipe holds), so a helper that pipes it into such a reader fails
# for real; each helper must pass when its line is there, fail when it is
# not, and fail when the log cannot be read. Controls show the log is large
# enough: the old pipelines of the boot check, dmesg_has and secs_after_mark
# get status 141 on it under pipefail.
#
# make host-test runs it, and make check counts its cases (run-guest's
# RISER_PIPEFAIL_LOG); by hand: tests/host/guest-pipefail.sh (a few seconds; prints one line
# a case and "N passed, N failed"; exits 1 on a failure). It sources lib.sh
# without its last block (the guest's housekeeping: kmemleak, udevd), with
# mount, udevadm and dmesg stubbed, and target.sh; mpath.sh's and
# hostile.sh's helpers are taken out of those files with sed (the scripts
# themselves cannot be sourced: they run their checks).
# shellcheck disable=SC2034 # MARK, PATH2_SESSION, ...: read by eval'd helpers
# shellcheck disable=SC2016 # single-quoted $: regexes and bash -c scripts

set -uo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
LINES_N=${PIPEFAIL_LINES:-150000}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/bin" "$W/out"
export RISER_TOP=$TOP RISER_OUT=$W/out FAKE_DMESG=$W/dmesg.txt

# Stubs, as commands (a real process, which SIGPIPE kills) and, for the two
# that must never reach the host, as functions too.
cat >"$W/bin/dmesg" <<'EOF'
#!/bin/sh
[ -z "${DMESG_FAIL:-}" ] || { echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1; }
exec cat "$FAKE_DMESG"
EOF
printf '#!/bin/sh\nexit 1\n' >"$W/bin/mount"
printf '#!/bin/sh\nexit 0\n' >"$W/bin/udevadm"
chmod +x "$W/bin/"*
export PATH=$W/bin:$PATH
mount() { return 1; }
udevadm() { return 0; }

pass=0 fail=0
# case DESCRIPTION WANT CMD...: CMD's status must be WANT ("0", or "!0" for
# any failure).
case_() {
	local what=$1 want=$2 rc
	shift 2
	"$@" >"$W/case.out" 2>&1
	rc=$?
	if { [ "$want" = 0 ] && [ $rc = 0 ]; } || { [ "$want" = '!0' ] && [ $rc != 0 ]; }; then
		pass=$((pass + 1))
		echo "ok - $what (status $rc)"
	else
		fail=$((fail + 1))
		echo "not ok - $what (status $rc, wanted $want)"
		sed 's/^/#   /' "$W/case.out" | tail -n 5
	fi
}

# fake_log LINE...: the fake kernel log: 100 lines of boot, each LINE (a
# LINE "MARK" is the marker kmsg_mark writes for $MARK), then LINES_N more.
filler() { awk -v n="$1" -v t="$2" 'BEGIN { for (i = 0; i < n; i++) printf "[%12.6f] rxe0: filler line %d of the kernel log\n", t + i / 1e6, i }'; }
fake_log() {
	{
		filler 100 1
		local l
		for l in "$@"; do
			if [ "$l" = MARK ]; then
				echo "[  100.000000] riser-harness: mark $MARK"
			else
				echo "$l"
			fi
		done
		filler "$LINES_N" 200
	} >"$FAKE_DMESG"
}

# --- lib.sh ----------------------------------------------------------------
grep -q "^# The guest's own housekeeping" "$TOP/tests/common/lib.sh" ||
	{ echo "lib.sh's housekeeping block moved: update this script"; exit 1; }
# lib_sh: lib.sh, without that block.
lib_sh() { sed "/^# The guest.s own housekeeping/,\$d" "$TOP/tests/common/lib.sh"; }
# The boot check at the top of lib.sh: a report early in a large log stops
# the script with 75 (tests/run-guest then boots again).
boot_status() {
	rm -f "$RISER_OUT/.boot-report"
	bash -c '. "$1"; exit 0' boot <(lib_sh) >/dev/null 2>&1
	echo $?
}
fake_log "[    2.000000] WARNING: CPU: 0 PID: 1 at somewhere"
# Control: lib.sh's old boot check misses that report under pipefail: its
# dmesg dies of SIGPIPE (141) once grep -m1 has found the report.
old_boot_status() {
	local r
	r=$(dmesg | grep -m1 -E 'BUG:|WARNING:|Oops|general protection|Kernel panic')
	echo $?
}
case_ "control: the old boot check, under pipefail, gets 141 (SIGPIPE) for a report found" 0 \
	test "$(old_boot_status)" = 141
case_ "lib.sh: a boot report early in a large log stops the script with 75" 0 test "$(boot_status)" = 75
case_ "  and is saved" 0 grep -q "WARNING: CPU: 0" "$RISER_OUT/.boot-report"
fake_log
case_ "lib.sh: a log without a report: sourced" 0 test "$(boot_status)" = 0
DMESG_FAIL=1 case_ "lib.sh: dmesg fails: sourced (no report to name)" 0 test "$(boot_status)" = 0

case_ "lib.sh sets pipefail" 0 bash -c 'set +o pipefail; . "$1"; test -o pipefail' lib <(lib_sh)

# shellcheck disable=SC1090
. <(lib_sh)
# shellcheck disable=SC1091
. "$TOP/tests/common/target.sh"

MARK=12345.1
# The mark after the boot's 100 lines, then the line and much more log.
filler 100 1 >"$FAKE_DMESG"
dmesg_mark
fake_log "[  100.000000] riser: connection to 192.168.77.1:3260 failed: hit"
# Control: the pipeline dmesg_has was (dmesg | tail | grep -q) gets 141
# (SIGPIPE) under pipefail on this log although its line is there.
old_dmesg_has_status() {
	local from mark
	read -r from mark <"$RISER_OUT/.dmesg_mark"
	dmesg | tail -n +"$((mark + 1))" | grep -Eq "$1"
	echo $?
}
case_ "control: the old dmesg_has, under pipefail, gets 141 (SIGPIPE) for its own line" 0 \
	test "$(old_dmesg_has_status "riser: connection to .* failed")" = 141

case_ "dmesg_has: the line, early in a large window" 0 dmesg_has "riser: connection to .* failed"
case_ "dmesg_has: no such line" '!0' dmesg_has "riser: connection to .* refused"
case_ "dmesg_lacks: no such line" 0 dmesg_lacks "riser: connection to .* refused"
case_ "dmesg_lacks: the line is there" '!0' dmesg_lacks "riser: connection to .* failed"
# The line, then the mark, then more log.
dmesg_mark
filler 1000 300 >>"$FAKE_DMESG"
case_ "dmesg_has: a line before the mark does not count" '!0' dmesg_has "riser: connection to"
case_ "dmesg_lacks: a line before the mark does not count" 0 dmesg_lacks "riser: connection to"
DMESG_FAIL=1 case_ "dmesg_has: dmesg fails" '!0' dmesg_has "filler"
DMESG_FAIL=1 case_ "dmesg_lacks: dmesg fails" '!0' dmesg_lacks "riser: connection to .* refused"
DMESG_FAIL=1 case_ "dmesg_mark: dmesg fails: no mark" '!0' dmesg_mark
case_ "dmesg_has: no mark" '!0' dmesg_has "filler"
case_ "dmesg_lacks: no mark" '!0' dmesg_lacks "riser: connection to .* refused"
case_ "dmesg_since_mark: no mark" '!0' dmesg_since_mark
filler 100 1 >"$FAKE_DMESG"
dmesg_mark
fake_log "[  100.000000] riser: one line"
case_ "dmesg_since_mark: prints every line after the mark" 0 \
	test "$(dmesg_since_mark | wc -l)" = $((LINES_N + 1))
case_ "  from the first one on" 0 test "$(dmesg_since_mark | sed -n 1p)" = "[  100.000000] riser: one line"

# secs_after_mark: its awk stopped at the first match.
fake_log MARK "[  102.500000] connection1:0: detected conn error (1020)"
old_secs_after_mark() {
	dmesg | awk -v m="riser-harness: mark $1" -v re="$2" '
		function t(line) { sub(/^\[ */, "", line); sub(/\].*/, "", line); return line + 0 }
		!start && index($0, m) && substr($0, index($0, m) + length(m)) == "" { start = t($0); next }
		start && $0 ~ re { printf "%.3f\n", t($0) - start; found = 1; exit }
		END { exit !found }'
}
old_secs_status() {
	old_secs_after_mark "$@" >/dev/null
	echo $?
}
case_ "control: the old secs_after_mark, under pipefail, gets 141 (SIGPIPE) for its own line" 0 \
	test "$(old_secs_status "$MARK" "detected conn error")" = 141
case_ "secs_after_mark: the line, early in a large log" 0 secs_after_mark "$MARK" "detected conn error"
case_ "  and says 2.500 s" 0 test "$(secs_after_mark "$MARK" "detected conn error")" = 2.500
case_ "secs_after_mark: no such line" '!0' secs_after_mark "$MARK" "Failing path"
case_ "secs_after_mark: no marker" '!0' secs_after_mark 999.9 "detected conn error"
DMESG_FAIL=1 case_ "secs_after_mark: dmesg fails" '!0' secs_after_mark "$MARK" "detected conn error"

# target.sh's _lio_login_stalled: grep -m1 on kernel_after_mark's pipe.
STALL="[  101.000000] isert: isert_get_login_rx: isert_conn 00000000deadbeef interrupted before got login req"
fake_log MARK "$STALL"
case_ "_lio_login_stalled: the stall line, early in a large window" 0 _lio_login_stalled "$MARK"
case_ "  and prints it" 0 test "$(_lio_login_stalled "$MARK")" = "$STALL"
fake_log MARK
case_ "_lio_login_stalled: no stall" '!0' _lio_login_stalled "$MARK"
fake_log "$STALL"
case_ "_lio_login_stalled: no marker" '!0' _lio_login_stalled "$MARK"

# --- the live copy of the kernel log (lib.sh's dmesg_live) -----------------
# With a follower running, the dmesg helpers read its copy in the shell
# after a sync line shows in it. Here the follower is a sleep and the sync
# lines go straight into the copy (KMSG), as the follower would copy them.
LIVE=$RISER_OUT/dmesg.live
sleep 600 &
DMESG_LIVE_PID=$! KLOG_SEEN=0
KMSG=$LIVE
filler 100 1 >"$LIVE"
dmesg_mark
case_ "live: dmesg_mark takes the copy's length, past its sync line" 0 \
	test "$(<"$RISER_OUT/.dmesg_mark")" = "live 101"
echo "[  100.000000] riser: connection to 192.168.77.1:3260 failed: hit" >>"$LIVE"
filler 1000 200 >>"$LIVE"
DMESG_FAIL=1 case_ "live: dmesg_has: the line (no dmesg run: it fails here)" 0 \
	dmesg_has "riser: connection to .* failed"
case_ "live: dmesg_has: no such line" '!0' dmesg_has "riser: connection to .* refused"
case_ "live: dmesg_lacks: no such line" 0 dmesg_lacks "riser: connection to .* refused"
case_ "live: dmesg_lacks: the line is there" '!0' dmesg_lacks "riser: connection to .* failed"
case_ "live: dmesg_since_mark: the 1001 lines after the mark, no sync line among them" 0 \
	test "$(dmesg_since_mark | wc -l)" = 1001
case_ "  from the first one on" 0 test "$(dmesg_since_mark | sed -n 1p)" = \
	"[  100.000000] riser: connection to 192.168.77.1:3260 failed: hit"
dmesg_mark
case_ "live: dmesg_has: a line before the mark does not count" '!0' dmesg_has "riser: connection to"
case_ "live: dmesg_lacks: a line before the mark does not count" 0 dmesg_lacks "riser: connection to"
case_ "live: dmesg_lacks: an empty window" 0 dmesg_lacks "riser"
kmsg_mark
echo "[  300.000000] isert: a line after the marker" >>"$LIVE"
case_ "live: kernel_after_mark: the line after the marker" 0 \
	test "$(kernel_after_mark "$MARK")" = "[  300.000000] isert: a line after the marker"
case_ "live: kernel_after_mark: no marker" '!0' kernel_after_mark 999.9
KMSG=/dev/null KLOG_WAIT=1 case_ "live: the follower does not copy the sync line: dmesg_has fails" \
	'!0' dmesg_has "isert"
KMSG=/dev/null KLOG_WAIT=1 case_ "live: the follower does not copy the sync line: dmesg_lacks fails" \
	'!0' dmesg_lacks "nothing"
kill "$DMESG_LIVE_PID"
wait "$DMESG_LIVE_PID" 2>/dev/null
case_ "live: the follower gone: dmesg_has fails (the mark was taken from its copy)" '!0' \
	dmesg_has "isert"
case_ "live: the follower gone: dmesg_mark reads dmesg" 0 dmesg_mark
case_ "  and says so" 0 grep -q "^dmesg " "$RISER_OUT/.dmesg_mark"
KMSG=/dev/kmsg DMESG_LIVE_PID=

# --- mpath.sh: path 2's connection was dropped ------------------------------
eval "$(sed -n '/^path2_dropped() {/,/^}/p' "$TOP/tests/guest/mpath.sh")"
declare -F path2_dropped >/dev/null || { echo "no path2_dropped in mpath.sh"; exit 1; }
IP2=192.168.79.1
PATH2_SESSION=session2
fake_log MARK "[  101.000000]  connection2:0: detected conn error (1020)"
case_ "path2_dropped: libiscsi's line for path 2, early in a large window" 0 path2_dropped
fake_log MARK "[  101.000000] riser: connection to $IP2:3260 failed: disconnected by the target"
case_ "path2_dropped: riser's line for path 2's portal" 0 path2_dropped
fake_log MARK
case_ "path2_dropped: no line (the check can fail)" '!0' path2_dropped
fake_log MARK "[  101.000000]  connection1:0: detected conn error (1020)" \
	"[  101.100000] riser: connection to 192.168.77.1:3260 failed: disconnected by the target"
case_ "path2_dropped: only path 1's connection failed" '!0' path2_dropped
fake_log MARK "[  101.000000]  connection12:0: detected conn error (1020)"
case_ "path2_dropped: another session's connection (connection12:0)" '!0' path2_dropped
fake_log "[  101.000000]  connection2:0: detected conn error (1020)"
case_ "path2_dropped: the line, but no marker" '!0' path2_dropped
fake_log MARK "[  101.000000]  connection2:0: detected conn error (1020)"
DMESG_FAIL=1 case_ "path2_dropped: dmesg fails" '!0' path2_dropped
PATH2_SESSION='' case_ "path2_dropped: path 2's session unknown" '!0' path2_dropped

# --- hostile.sh: evil_says, iscsid_says --------------------------------------
eval "$(sed -n '/^_said() {/p; /^_said_match() {/,/^}/p; /^evil_since() {/p; /^evil_says() {/,/^}/p; /^iscsid_says() {/,/^}/p' "$TOP/tests/guest/hostile.sh")"
{
	filler 10 1
	echo "evil: fired silent"
	filler "$LINES_N" 2
} >"$RISER_OUT/ffp.log"
cp "$RISER_OUT/ffp.log" "$RISER_OUT/iscsid.log"
EVIL_MARK=5 ISCSID_MARK=5
case_ "evil_says: the line, early in a large log" 0 evil_says ffp "^evil: fired silent$"
case_ "evil_says: no such line" '!0' evil_says ffp "^evil: fired reject$"
case_ "evil_says: no log" '!0' evil_says nolog "^evil"
EVIL_MARK=20
case_ "evil_says: the line is before the mark" '!0' evil_says ffp "^evil: fired silent$"
case_ "iscsid_says: the line, early in a large log" 0 iscsid_says "fired silent"
case_ "iscsid_says: no such line" '!0' iscsid_says "reconnect min 20"

# --- every guest script of make check: lib.sh before any pipeline ---------
# sources_lib_first SCRIPT: SCRIPT has no pipeline (a '|' that is not '||'
# on a line that is not a comment) before the first guest script it
# sources, and that is lib.sh or a script for which the same holds.
sources_lib_first() {
	local f=$1 n src
	n=$(grep -nE '^\. "\$RISER_TOP/tests/(guest|common)/[a-z-]+\.sh"$' "$f" | cut -d: -f1 | sed -n 1p)
	[ -n "$n" ] || { echo "$f sources no guest script"; return 1; }
	if sed -n "1,$((n - 1))p" "$f" | grep -vE '^\s*#' | grep -E '(^|[^|])\|($|[^|])'; then
		echo "$f: a pipeline before line $n"
		return 1
	fi
	src=$(sed -n "${n}p" "$f" | grep -oE 'tests/(guest|common)/[a-z-]+\.sh')
	[ "$src" = tests/common/lib.sh ] || sources_lib_first "$TOP/$src"
}
GUEST_TESTS=$(sed -n '/^GUEST_TESTS =/,/[^\\]$/p' "$TOP/Makefile" | grep -oE 'tests/guest/[a-z-]+\.sh' | sort -u)
case_ "Makefile: GUEST_TESTS found" 0 test -n "$GUEST_TESTS"
for t in $GUEST_TESTS; do
	case_ "$t: sources lib.sh before any pipeline" 0 sources_lib_first "$TOP/$t"
done

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
