# SPDX-License-Identifier: GPL-2.0
# Helpers for scripts that run inside the test guest (sourced).
#
# RISER_TOP is the repository (read-only in the guest), RISER_OUT the shared
# output directory. Results go to $RISER_OUT/checks.tap in KTAP (the
# kernel's TAP: Documentation/dev-tools/ktap.rst), one numbered "ok N - ..."
# or "not ok N - ..." line a check, written by result() alone.

# Every guest script sources this file before its first pipeline: from here
# on a pipeline fails when any of its commands fails, not only the last
# (a `dmesg | grep` must not pass on a dmesg that failed). The price: a
# reader that stops early (grep -q, grep -m1, head, awk's exit) kills a
# producer still writing with SIGPIPE, which then fails the pipeline. So a
# pipeline whose status decides a check ends in a command that reads all
# its input, or the producer's output is taken into a variable first and
# the reader reads that (`out=$(dmesg) || ...; grep -q ... <<<"$out"`).
set -o pipefail

: "${RISER_TOP:?}" "${RISER_OUT:?}"
TAP=$RISER_OUT/checks.tap
echo "KTAP version 1" >"$TAP"
# Results written so far: the number of the next is one more.
TAP_N=0

# result ok|fail DESCRIPTION: one KTAP result line. Every check's result
# goes through here (in the script's own shell, never a subshell, so that
# the numbers run on).
result() {
	TAP_N=$((TAP_N + 1))
	case $1 in
	ok) echo "ok $TAP_N - $2" >>"$TAP" ;;
	*) echo "not ok $TAP_N - $2" >>"$TAP" ;;
	esac
}

# A kernel report in the log before the script has done anything (no riser,
# no test module loaded yet) belongs to the boot, not to the test. Under
# KASAN in TCG about one boot in eight showed a wild-memory-access in
# handle_edge_irq during identify_cpu at 0.1 s, until tests/run-guest booted
# with no5lvl (see there). Should a boot still report something, the script
# stops at once and tests/run-guest boots the guest again (it says so;
# twice at most).
# (The log is read whole first: under pipefail, a dmesg killed by SIGPIPE
# once grep stopped at the first report would fail the pipeline and so
# hide the report.)
if _boot_log=$(dmesg) &&
	_boot_report=$(grep -m1 -E 'BUG:|WARNING:|Oops|general protection|Kernel panic' <<<"$_boot_log"); then
	echo "$_boot_report" >"$RISER_OUT/.boot-report"
	dmesg >"$RISER_OUT/dmesg.txt"
	exit 75
fi
unset _boot_log

# Loadable builtins (Debian's bash-builtins, which scripts/setup installs):
# mkdir, rmdir, ln and rm run in the shell instead of a fork and an exec
# each (about 0.2 s of the guest's CPU under KASAN in TCG). Making and
# removing LIO targets in configfs is mostly these. Without the package
# the scripts run the same commands from coreutils.
for _b in mkdir rmdir ln rm mktemp basename seq sleep; do
	[ ! -f "/usr/lib/bash/$_b" ] || enable -f "/usr/lib/bash/$_b" "$_b" 2>/dev/null || :
done

# nap SECONDS: sleep without a fork. Under KASAN in TCG a fork and exec
# costs the guest's one vCPU about 0.3 s (50 runs of cat took 14.5 s, 50
# builtin reads 0.8 s), so a polling loop built on sleep(1) spends its time
# forking instead of leaving the CPU to the work it waits for. read's
# timeout on a FIFO that nobody writes does the waiting in the shell.
# Should the FIFO not open, nap falls back to sleep(1).
_NAP_FIFO=/tmp/.riser-nap.$$
rm -f "$_NAP_FIFO"
if mkfifo "$_NAP_FIFO" && exec {_NAP_FD}<>"$_NAP_FIFO"; then
	nap() { read -rt "$1" -u "$_NAP_FD" _ 2>/dev/null || :; }
else
	nap() { sleep "$1"; }
fi
rm -f "$_NAP_FIFO"

# uptime_now: the kernel's uptime in seconds (to the hundredth), in $UPTIME;
# a builtin read, no fork.
uptime_now() { read -r UPTIME _ </proc/uptime; }

# plan N: the script runs N checks (TAP's plan, "1..N" in checks.tap).
# tests/run-guest fails a guest whose count of "ok"/"not ok" lines differs
# (a check skipped by a branch, a loop that ran short, a script that died
# half way: the checks it did not run count as failed), and, under make
# check, a guest that declared no plan or another N than tests/manifest
# says. Call it before the first check; N counts check and expect_fail
# calls as they run.
plan() {
	case ${1:-} in '' | *[!0-9]*) echo "plan: not a number: '${1:-}'" >&2; return 1 ;; esac
	echo "1..$1" >>"$TAP"
}

# retried REASON DETAILS...: the one way to try something again (a login,
# a discovery, a logout that failed) instead of failing its check: call it
# before each new try. REASON is one word (lower case, digits and '-')
# naming the symptom that made the try fail; DETAILS say which try and show
# the evidence (the kernel's or iscsid's line). It writes "# retry: REASON:
# DETAILS" into checks.tap; tests/run-guest prints it, counts it in the
# closing line ("N passed, N failed, N retried"), and under make check
# counts it as a failure too unless tests/manifest allows REASON
# ("retry-allowed": a named, documented symptom of the target or of
# open-iscsi, never riser's). A wait for a condition (_wait_for) is no retry.
retried() {
	local why=${1:-}
	shift
	[[ $why =~ ^[a-z0-9][a-z0-9-]*$ ]] || why=unnamed
	echo "# retry: $why: $*" >>"$TAP"
}

# kernel_since UPTIME: the kernel log lines stamped at or after UPTIME.
kernel_since() {
	dmesg | awk -v t="$1" '{ s = $0; sub(/^\[ */, "", s); if (s + 0 >= t) print }'
}

# check DESCRIPTION CMD...: run CMD; record ok or not ok.
# A failed check also leaves the last lines of its output, and the last
# kernel lines logged while it ran, in the TAP file as "#" lines that
# tests/run-guest prints, so that a CI log says why. Nothing here forks
# unless the check failed (see nap).
check() {
	local what=$1 one=$RISER_OUT/.check.out t0=$SECONDS k0 lines
	shift
	uptime_now
	k0=$UPTIME
	if "$@" >"$one" 2>&1; then
		result ok "$what"
	else
		result fail "$what"
		{
			tail -n 25 "$one" | sed 's/^/#   /'
			kernel_since "$k0" | tail -n 15 | sed 's/^/#   kernel: /'
		} >>"$TAP"
	fi
	mapfile -t lines <"$one"
	{
		[ ${#lines[@]} -eq 0 ] || printf '%s\n' "${lines[@]}"
		echo "[check took $((SECONDS - t0))s: $what]"
	} >>"$RISER_OUT/guest.log"
}

# bounded SECS CMD...: CMD, stopped after SECS seconds with status 124 like
# timeout(1); before stopping it, the kernel stacks of CMD and its children
# go to stderr, so that a hang in the kernel (a transport call that never
# returns) shows where it waits. A CMD that cannot be stopped (asleep in
# the kernel, uninterruptibly: an rmmod whose module exit never returns)
# is left behind: the watchdog wakes this shell's wait with SIGUSR1, so
# the script still goes on to its verdict and saves the kernel log (with
# the hung-task report that names the wait). (In a $(bounded ...), the
# substitution still waits for such a CMD's output to close.)
bounded() {
	local secs=$1 pid wd rc t0=$SECONDS me=$BASHPID
	shift
	"$@" &
	pid=$!
	# The watchdog writes to stderr only: a $(bounded ...) must not wait
	# for it to close stdout. It waits with nap (no child process to
	# stop): each fork and exec here (a mktemp, a sleep, a pkill, an rm)
	# cost about 0.2 s, and the pkill alone 7 % of check.sh's CPU (perf in
	# the guest, 2026-11-25).
	{
		nap "$secs"
		kill -0 "$pid" 2>/dev/null || exit 0
		echo "still running after ${secs}s: $*"
		local p
		for p in $pid $(pgrep -P "$pid"); do
			echo "kernel stack of $p ($(cat "/proc/$p/comm" 2>/dev/null)):"
			cat "/proc/$p/stack" 2>/dev/null
		done
		kill "$pid"
		# Killed, it is gone at once; if not within 5 s, it is asleep in
		# the kernel: wake the wait below, every second (bash's wait
		# misses a signal now and then) until this watchdog is stopped.
		nap 5
		kill -0 "$pid" 2>/dev/null || exit 0
		echo "still running 5 s after SIGTERM (asleep in the kernel): left behind"
		while kill -USR1 "$me" 2>/dev/null; do nap 1; done
	} >&2 &
	wd=$!
	trap : USR1
	wait "$pid"
	rc=$?
	# The watchdog is stopped before the trap goes: a SIGUSR1 without it
	# would end this shell.
	kill "$wd" 2>/dev/null
	wait "$wd" 2>/dev/null
	trap - USR1
	# Stopped (or left behind) by the watchdog: as timeout(1) says.
	if [ "$rc" -gt 128 ] && [ $((SECONDS - t0)) -ge "$secs" ]; then
		rc=124
	fi
	return $rc
}

# expect_fail DESCRIPTION CMD...: CMD must fail, by returning a status from
# 1 to 123, within EXPECT_FAIL_TIMEOUT seconds (default 200: longer than
# target.sh's own bound on an iscsiadm call, ISCSI_TIMEOUT). A hang
# (stopped by bounded: 124), a command that could not run (126, 127) or one
# killed by a signal (128 and above) is not the refusal that was expected.
# Where the reason matters (a refused login), expect_refused names it.
expect_fail() {
	local what=$1 rc
	shift
	bounded "${EXPECT_FAIL_TIMEOUT:-200}" "$@" >>"$RISER_OUT/guest.log" 2>&1
	rc=$?
	if [ $rc -ge 1 ] && [ $rc -le 123 ]; then
		result ok "$what"
	else
		result fail "$what"
		echo "#   expected a refusal (status 1..123), got status $rc" >>"$TAP"
	fi
}

# expect_refused DESCRIPTION STATUS PATTERN SECONDS CMD...: CMD must fail
# for the reason named: exit with STATUS within SECONDS, and the kernel log
# of its window must have a line matching PATTERN (an extended regex), e.g.
# a refused login: iscsiadm's ISCSI_ERR_LOGIN_AUTH_FAILED (24) and LIO's
# line saying why. Any other status, a hang, or the line missing: not ok.
expect_refused() {
	local what=$1 want=$2 pattern=$3 secs=$4
	shift 4
	_refused "$want" "$pattern" "$secs" "$@"
	_refused_tap "$what"
}
# _refused STATUS PATTERN SECONDS CMD...: one try; leaves in REFUSED_WHY why
# it was not the refusal named (empty when it was), and in REFUSED_RC and
# REFUSED_MARK the status and the window's marker.
_refused() {
	local want=$1 pattern=$2 secs=$3 lines
	shift 3
	kmsg_mark
	REFUSED_MARK=$MARK REFUSED_WHY=
	bounded "$secs" "$@" >>"$RISER_OUT/guest.log" 2>&1
	REFUSED_RC=$?
	if [ "$REFUSED_RC" != "$want" ]; then
		REFUSED_WHY="exit status $REFUSED_RC, not $want"
	elif ! lines=$(kernel_after_mark "$REFUSED_MARK"); then
		REFUSED_WHY="the window's marker is not in the kernel log"
	elif ! grep -Eq "$pattern" <<<"$lines"; then
		REFUSED_WHY="no kernel line matches '$pattern'"
	fi
}
_refused_tap() {
	if [ -z "$REFUSED_WHY" ]; then
		result ok "$1"
	else
		result fail "$1"
		echo "#   $REFUSED_WHY" >>"$TAP"
	fi
}

# Where kmsg_mark and _klog write their lines, and how long _klog waits for
# the follower's copy (the host test changes both).
KMSG=${KMSG:-/dev/kmsg}
KLOG_WAIT=${KLOG_WAIT:-10}

# kmsg_mark: writes a numbered marker line into the kernel log (a builtin
# echo to /dev/kmsg, no fork; each open has its own rate limit) and leaves
# its number in $MARK. kernel_after_mark N prints the kernel lines logged
# after marker N, or fails (status 2) when the marker is not in the log
# (lost, or the log wrapped): a window that cannot be read is not clean.
# (The marker names the shell's pid and the time: unique in background
# subshells too.)
kmsg_mark() {
	MARK="$BASHPID.$EPOCHREALTIME"
	echo "riser-harness: mark $MARK" >>"$KMSG"
}
kernel_after_mark() {
	# (The log is searched in the shell, from its end, where the marker
	# usually is: an awk would cost an exec, about 0.25 s of a vCPU.)
	local i m="riser-harness: mark $1"
	_klog || return 2
	for ((i = KLOG_N - 1; i >= 0; i--)); do
		[[ ${KLOG[i]} != *"$m" ]] || break
	done
	((i >= 0)) || return 2
	_klog_lines $((i + 1))
	[ -z "$KLOG_LINES" ] || printf '%s\n' "$KLOG_LINES"
}

# secs_after_mark MARK ERE: the seconds, by the kernel log's timestamps,
# from the kmsg_mark MARK to the first later kernel line matching ERE
# (printed to the millisecond); fails when no such line came, or when
# dmesg failed. (awk reads the log to its end: an exit at the first match
# would kill dmesg with SIGPIPE and fail the pipeline.)
secs_after_mark() {
	dmesg | awk -v m="riser-harness: mark $1" -v re="$2" '
		function t(line) { sub(/^\[ */, "", line); sub(/\].*/, "", line); return line + 0 }
		!start && index($0, m) && substr($0, index($0, m) + length(m)) == "" { start = t($0); next }
		start && !found && $0 ~ re { printf "%.3f\n", t($0) - start; found = 1 }
		END { exit !found }'
}

# What a connection failure leaves in the kernel log: riser's own line
# ("riser: connection to A.B.C.D:P failed: why"), libiscsi's ("detected
# conn error"), and a control PDU riser refused to send.
CONN_TROUBLE='riser: connection to [^ ]+ failed|detected conn error|riser: cannot send control PDU'

# conn_clean CMD...: CMD succeeds, and the kernel log of its window has no
# connection failure (CONN_TROUBLE): libiscsi reconnects behind a data test
# and fio still verifies, so a failure is seen only there. With
# CONN_FAILURES_EXPECTED set (a test that provokes failures on purpose:
# `CONN_FAILURES_EXPECTED=1 fio_verify ...`), only CMD's status counts.
conn_clean() {
	local rc mark lines
	kmsg_mark
	mark=$MARK
	"$@"
	rc=$?
	[ -z "${CONN_FAILURES_EXPECTED:-}" ] || return $rc
	if ! lines=$(kernel_after_mark "$mark"); then
		echo "conn_clean: marker $mark not found in the kernel log: the window cannot be checked"
		return 1
	fi
	lines=$(grep -E "$CONN_TROUBLE" <<<"$lines")
	if [ -n "$lines" ]; then
		echo "connection failure(s) in the kernel log while it ran:"
		head -n 10 <<<"$lines"
		rdma_counters
		return 1
	fi
	return $rc
}

# rdma_counters: the RDMA devices' non-zero hardware counters (rxe counts
# retransmissions, RNR NAKs, sequence errors and drops), since boot. Printed
# with a connection failure, to tell a lost packet from a PDU never posted.
rdma_counters() {
	local f v
	for f in /sys/class/infiniband/*/ports/*/hw_counters/*; do
		[ -r "$f" ] || continue
		v=$(cat "$f" 2>/dev/null) || continue
		[ "$v" = 0 ] || echo "rdma counter ${f#/sys/class/infiniband/}: $v"
	done
}

# iscsi_state: what holds an iSCSI transport module, for a log: the
# module's reference count, every iSCSI session (with its target, state and
# the pid that made it: iscsid's, or a discovery's iscsiadm), endpoint and
# connection, the SCSI hosts, the processes that hold a SCSI disk open, and
# the RDMA CM ids and QPs (with the process or kernel module that owns them).
iscsi_state() {
	local m s p f
	for m in riser ib_iser; do
		[ -d "/sys/module/$m" ] && echo "module $m: refcnt $(cat "/sys/module/$m/refcnt")"
	done
	for s in /sys/class/iscsi_session/session*; do
		[ -d "$s" ] || continue
		echo "$(basename "$s"): target '$(cat "$s/targetname" 2>/dev/null)' state $(cat "$s/state" 2>/dev/null) creator $(cat "$s/creator" 2>/dev/null)"
	done
	echo "endpoints: $(ls /sys/class/iscsi_endpoint 2>/dev/null | tr '\n' ' ')"
	echo "connections: $(ls /sys/class/iscsi_connection 2>/dev/null | tr '\n' ' ')"
	for s in /sys/class/scsi_host/host*; do
		[ -d "$s" ] && echo "$(basename "$s"): $(cat "$s/proc_name" 2>/dev/null)"
	done
	for p in /proc/[0-9]*; do
		for f in "$p"/fd/*; do
			case $(readlink "$f" 2>/dev/null) in
			/dev/sd*) echo "pid ${p#/proc/} ($(cat "$p/comm" 2>/dev/null)) holds $(readlink "$f")" ;;
			esac
		done
	done
	rdma resource show cm_id 2>&1
	rdma resource show qp 2>&1
}

# unload_riser [SECONDS [COMMAND...]]: rmmod riser (or COMMAND, which must
# unload it) once nothing holds it, waiting up to SECONDS (default 60) for the holders that go on their own after a logout
# (a udev probe that opened the disk before it went); when it has to wait,
# says what held riser (iscsi_state) and how long it took. When riser is
# still held at the end, says what holds it then.
unload_riser() {
	local i n=$((${1:-60} * 5)) t=${1:-60} cmd
	[ $# = 0 ] || shift
	cmd=("$@")
	[ ${#cmd[@]} -gt 0 ] || cmd=(rmmod riser)
	[ -d /sys/module/riser ] || { echo "riser is not loaded"; return 1; }
	if [ "$(cat /sys/module/riser/refcnt)" != 0 ]; then
		echo "riser is held; waiting up to $t s. Holders now:"
		iscsi_state
	fi
	local ref
	for ((i = 0; i < n; i++)); do
		{ read -r ref </sys/module/riser/refcnt; } 2>/dev/null && [ "$ref" = 0 ] && break
		nap 0.2
	done
	if [ "$i" -gt 0 ] && [ "$i" -lt "$n" ]; then
		echo "riser's reference count fell to 0 after $((i / 5)).$((i % 5 * 2)) s"
	fi
	if bounded 120 "${cmd[@]}" && [ ! -d /sys/module/riser ]; then
		# tests/run-guest: a known LIO report after this line found riser
		# gone, so the lock debugging it turned off watched nothing of riser.
		echo "riser-harness: riser unloaded" >/dev/kmsg
		return 0
	fi
	iscsi_state
	return 1
}

# dmesg_live: the kernel log, written to $RISER_OUT/dmesg.live as it grows,
# for when the guest hangs, and read by _klog in place of a dmesg. One
# process for the whole guest (a dmesg every 15 s cost a sleep, a dmesg and
# a copy of the whole log each time); its pid in DMESG_LIVE_PID.
dmesg_live() {
	dmesg --follow >"$RISER_OUT/dmesg.live" 2>&1 &
	DMESG_LIVE_PID=$! KLOG_SEEN=0
}

# _klog [live|dmesg]: the kernel log as far as it is logged now, its lines
# in KLOG[0 .. KLOG_N - 1], where they were read in KLOG_FROM. "live" (the
# default when dmesg_live's follower runs): its copy, read in the shell
# after a sync line ("riser-harness: sync ...", written to /dev/kmsg by a
# builtin echo) shows in it, so that every line the kernel logged before
# the call is in; KLOG_N is the sync line's index. No fork: a dmesg cost a
# fork and an exec (about 0.3 s of a vCPU under KASAN in TCG) and the copy
# of the whole log through a here-string, 1.3 s a call in all, 4 to 8 s
# beside two other guests (hostile-session.sh's dmesg checks). "dmesg"
# (the default without a follower): a dmesg, whole. Status 2, and a line on
# stderr, when the log cannot be read: dmesg failed, or the follower is
# gone or did not copy the sync line within KLOG_WAIT (10) s.
_klog() {
	local from=${1:-} m i end
	if [ -z "$from" ]; then
		from=dmesg
		[ -z "${DMESG_LIVE_PID:-}" ] || ! kill -0 "$DMESG_LIVE_PID" 2>/dev/null || from=live
	fi
	KLOG_FROM=$from
	if [ "$from" = dmesg ]; then
		local log
		log=$(dmesg) || { echo "dmesg failed" >&2; return 2; }
		mapfile -t KLOG <<<"$log"
		KLOG_N=${#KLOG[@]}
		return 0
	fi
	[ -n "${DMESG_LIVE_PID:-}" ] && kill -0 "$DMESG_LIVE_PID" 2>/dev/null ||
		{ echo "the kernel log's follower (dmesg_live) is gone" >&2; return 2; }
	m="riser-harness: sync $BASHPID.$EPOCHREALTIME"
	echo "$m" >>"$KMSG" || { echo "cannot write to $KMSG" >&2; return 2; }
	end=$((SECONDS + KLOG_WAIT))
	# (The sync line comes after every line this shell saw in the copy
	# before: the search stops there.)
	while :; do
		mapfile -t KLOG <"$RISER_OUT/dmesg.live"
		for ((i = ${#KLOG[@]} - 1; i >= ${KLOG_SEEN:-0}; i--)); do
			if [[ ${KLOG[i]} == *"$m" ]]; then
				KLOG_N=$i KLOG_SEEN=$i
				return 0
			fi
		done
		KLOG_SEEN=${#KLOG[@]}
		((SECONDS < end)) || break
		nap 0.05
	done
	echo "the kernel log's follower (dmesg_live) did not copy a line in $KLOG_WAIT s" >&2
	return 2
}
# _klog_lines FIRST: KLOG[FIRST .. KLOG_N - 1] joined by newlines, in
# KLOG_LINES; from the live copy without _klog's sync lines (line by line:
# a window there is short, the log since a mark), from a dmesg whole (no
# follower wrote sync lines).
_klog_lines() {
	local i
	KLOG_LINES=
	if [ "$KLOG_FROM" = live ]; then
		for ((i = $1; i < KLOG_N; i++)); do
			[[ ${KLOG[i]} == *"riser-harness: sync "* ]] || KLOG_LINES+=${KLOG[i]}$'\n'
		done
	elif (($1 < KLOG_N)); then
		printf -v KLOG_LINES '%s\n' "${KLOG[@]:$1:KLOG_N-$1}"
	fi
	KLOG_LINES=${KLOG_LINES%$'\n'}
}

# dmesg_mark: the kernel log's length now (and where _klog read it), the
# start of the window that dmesg_since_mark, dmesg_has and dmesg_lacks
# read. When the log cannot be read there is no mark (those then fail,
# rather than read the whole log).
dmesg_mark() {
	if _klog; then
		# (Past the sync line: a "live" window starts after it.)
		[ "$KLOG_FROM" = dmesg ] || KLOG_N=$((KLOG_N + 1))
		echo "$KLOG_FROM $KLOG_N" >"$RISER_OUT/.dmesg_mark"
	else
		rm -f "$RISER_OUT/.dmesg_mark"
		echo "dmesg_mark: the kernel log cannot be read: no mark" >&2
		return 1
	fi
}
# _dmesg_since_mark: the kernel log since the last dmesg_mark, in
# DMESG_SINCE (read the way the mark was); status 2, and a line on stderr,
# when there is no mark or the log cannot be read.
_dmesg_since_mark() {
	local from mark
	DMESG_SINCE=
	if ! { read -r from mark <"$RISER_OUT/.dmesg_mark"; } 2>/dev/null ||
		[[ ! $from =~ ^(live|dmesg)$ || ! $mark =~ ^[0-9]+$ ]]; then
		echo "no dmesg_mark to read the kernel log from" >&2
		return 2
	fi
	_klog "$from" || return 2
	_klog_lines "$mark"
	DMESG_SINCE=$KLOG_LINES
}
# dmesg_since_mark: prints the kernel log since the last dmesg_mark; status
# 2 when it cannot be read.
dmesg_since_mark() {
	_dmesg_since_mark || return 2
	[ -z "$DMESG_SINCE" ] || printf '%s\n' "$DMESG_SINCE"
}
# dmesg_has PATTERN: the kernel log since the last mark was read and has a
# line matching PATTERN (an extended regex). Status 1 when it has none, 2
# when the log could not be read (or the pattern is bad, when there is a
# line to match). grep reads a variable, not a pipe from dmesg, so its
# early exit (-q) kills no writer; an empty window costs no grep (a
# _wait_for polls it every half second).
dmesg_has() {
	_dmesg_since_mark || return 2
	[ -n "$DMESG_SINCE" ] || return 1
	grep -Eq "$1" <<<"$DMESG_SINCE"
}
# dmesg_lacks PATTERN: the kernel log since the last mark was read and has
# no line matching PATTERN; the lines that match are printed. Not
# `! dmesg_has`, which also passes when the log could not be read.
dmesg_lacks() {
	_dmesg_since_mark || return 2
	[ -n "$DMESG_SINCE" ] || return 0
	grep -E "$1" <<<"$DMESG_SINCE"
	[ $? = 1 ]
}

# save_dmesg: the end of every guest script. Records what tests/run-guest
# judges after the guest (end-state.txt): whether lock debugging is still on
# (debug_locks in /proc/lockdep_stats; KASAN, a BUG or any taint that makes
# lockdep unreliable turns it off for the rest of the boot, so the checks
# after it ran unwatched), and a last kmemleak scan (refused when kmemleak
# has turned itself off) with the number of objects it suspects. Then the
# kernel log, after the scan (a scan that finds leaks says so there).
save_dmesg() {
	local st=$RISER_OUT/end-state.txt v n
	: >"$st"
	if [ -r /proc/lockdep_stats ]; then
		v=$(awk '$1 == "debug_locks:" { print $2 }' /proc/lockdep_stats)
		echo "debug_locks ${v:-unknown}" >>"$st"
	fi
	if _kmemleak_file >/dev/null 2>&1; then
		v=$SECONDS
		# Two scans, as kmemleak_report: kmemleak reports an object only
		# when a scan finds it unreferenced and unchanged since the scan
		# before (a first scan only checksums it), and with the automatic
		# scan off (see the end of this file) nothing may have scanned
		# since the last check.
		if kmemleak_report "$RISER_OUT/kmemleak-end.txt" >/dev/null 2>>"$RISER_OUT/guest.log"; then
			n=$(grep -c "^unreferenced object" "$RISER_OUT/kmemleak-end.txt")
			echo "kmemleak scanned $n" >>"$st"
			echo "[end-of-guest kmemleak scan took $((SECONDS - v))s: $n suspected]" >>"$RISER_OUT/guest.log"
		else
			echo "kmemleak refused" >>"$st"
		fi
	fi
	# Where the guest's CPU went (make check's time is the guests' CPU
	# under TCG): the kernel's split of it (/proc/stat, in clock ticks:
	# user, nice, system, idle, iowait, irq, softirq) and the processes
	# that used the most, kernel threads among them.
	{
		head -n 1 /proc/stat
		ps -eo time,comm --sort=-time | head -n 25
	} >"$RISER_OUT/cpu.txt" 2>&1
	dmesg >"$RISER_OUT/dmesg.txt"
}

# The modules riser links against; insmod does not load dependencies.
load_deps() {
	modprobe -a ib_core rdma_cm ib_uverbs scsi_transport_iscsi libiscsi
}

# setup_rxe [IP] [NETDEV] [DEV]: a soft-RoCE device DEV (rxe0) on the dummy
# netdev NETDEV (dummy0; CONFIG_DUMMY=y makes dummy0 at boot), on jumbo
# frames: the netdev's MTU RXE_MTU (default 9000), so rxe's active MTU is
# 4096, as RoCE networks are run, and a 4 KiB command's data moves in one
# packet instead of four (rxe's packet work is the largest share of a
# guest's CPU under TCG). The bench sets RXE_MTU=1500, the MTU its tables
# were measured at.
setup_rxe() {
	local ip=${1:-192.168.77.1} ndev=${2:-dummy0} dev=${3:-rxe0}
	ip link add "$ndev" type dummy 2>/dev/null || true
	ip addr add "$ip/24" dev "$ndev" 2>/dev/null || true
	ip link set "$ndev" mtu "${RXE_MTU:-9000}" || return 1
	ip link set "$ndev" up
	modprobe rdma_rxe
	rdma link add "$dev" type rxe netdev "$ndev"
}

# Copy the KUnit results of riser's suites out of debugfs (they are removed
# with the module).
collect_kunit() {
	mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
	local d
	for d in /sys/kernel/debug/kunit/riser_*; do
		[ -d "$d" ] && cp "$d/results" "$RISER_OUT/kunit/$(basename "$d")"
	done
}

# _kmemleak_file: prints kmemleak's debugfs file (mounting debugfs if need
# be); fails on a kernel without kmemleak.
_kmemleak_file() {
	[ -e /sys/kernel/debug/kmemleak ] ||
		mount -t debugfs none /sys/kernel/debug 2>/dev/null
	[ -e /sys/kernel/debug/kmemleak ] || { echo "no /sys/kernel/debug/kmemleak" >&2; return 1; }
	echo /sys/kernel/debug/kmemleak
}

# kmemleak: forget what was allocated before (boot, module loading), so only
# what the test allocates can be reported.
kmemleak_clear() {
	local f
	f=$(_kmemleak_file) && echo clear >"$f"
}

# kmemleak_scan: one scan; fails when kmemleak refuses it (it answers EPERM
# once it has turned itself off, after an error of its own), so that a leak
# check never passes on a scan that did not happen.
kmemleak_scan() {
	local f
	f=$(_kmemleak_file) || return 1
	echo scan >"$f" || { echo "kmemleak refused the scan (turned off?)" >&2; return 1; }
}

# kmemleak_report FILE: scan (twice, as kmemleak wants objects seen
# unreferenced by two scans) and save the suspected leaks to FILE; prints
# their number. Fails when a scan is refused or the report cannot be read.
# The second scan reports an object only when it was allocated at least 5 s
# (kmemleak's minimum age) before that scan started: a scan under KASAN in
# TCG takes about 7 s, so the wait between the two only makes up what the
# first scan took less than 5.5 s.
kmemleak_report() {
	local t0 w
	uptime_now
	t0=${UPTIME/./}
	kmemleak_scan || return 1
	uptime_now
	w=$((550 - (10#${UPTIME/./} - 10#$t0)))
	[ "$w" -le 0 ] || nap "$((w / 100)).$((w % 100 / 10))$((w % 10))"
	kmemleak_scan || return 1
	cat /sys/kernel/debug/kmemleak >"$1" || return 1
	grep -c "^unreferenced object" "$1" || true
}

# no_leak_from_riser FILE: kmemleak_report found nothing allocated by riser
# (or by libiscsi, the SCSI midlayer or the RDMA core on riser's behalf,
# which show riser in the backtrace). Run it while riser is loaded: after
# rmmod, kmemleak can no longer name riser's frames (they print as bare
# addresses), so then any suspected leak at all fails it.
no_leak_from_riser() {
	kmemleak_report "$1" >/dev/null || return 1
	if [ -d /sys/module/riser ]; then
		! grep -q '\[riser\]' "$1"
	else
		echo "riser is not loaded: its frames cannot be named, so any suspected leak counts"
		! grep -q "^unreferenced object" "$1"
	fi
}

# fio_verify DEV RW BS QD SIZE [FIO_OPTION...]: write SIZE with fio and read
# it back verified with crc32c. fio's exit status alone is not trusted (it
# exits 0 when it refuses to start, on a mounted device for one): its terse
# line must be there and report error 0. The kernel log of the run must show
# no connection failure (conn_clean; CONN_FAILURES_EXPECTED=1 exempts a run
# that provokes them).
fio_verify() {
	conn_clean _fio_verify "$@"
}
_fio_verify() {
	local dev=$1 rw=$2 bs=$3 qd=$4 size=$5 out
	shift 5
	out=$(fio --name=v --filename="$dev" --direct=1 --ioengine=libaio --rw="$rw" \
		--bs="$bs" --iodepth="$qd" --size="$size" --verify=crc32c --do_verify=1 \
		--verify_fatal=1 --randrepeat=0 --verify_state_save=0 --output-format=terse \
		"$@") || return 1
	echo "$out" | cut -c1-160
	awk -F';' '$1 == 3 && $3 == "v" { found = 1; if ($5 != 0) bad = 1 }
		END { exit !(found && !bad) }' <<<"$out"
}

# The guest's own housekeeping, off for the tests' sake (perf in a check.sh
# guest, 2026-11-25: 19 % of its CPU went to kmemleak's automatic scans, a
# scan of 4 GiB taking about 23 s, and 8 % to udev):
# - kmemleak scans when a check asks (kmemleak_report) and twice at the end
#   of every guest (save_dmesg): a leaked object stays unreferenced, so
#   those scans find whatever an automatic one would have found.
# - udev: the tests need only the device nodes devtmpfs makes. Run as
#   root, tests/run-guest hides systemd-udevd from the guest's init, which
#   would start it and wait for its coldplug; where it could not (not
#   root), udevd is stopped here, before it probes every disk a login adds.
if _kmemleak=$(_kmemleak_file 2>/dev/null); then
	echo scan=off >"$_kmemleak" || echo "kmemleak refused scan=off" >&2
fi
if [ -S /run/udev/control ]; then
	udevadm control --exit 2>/dev/null || :
fi
