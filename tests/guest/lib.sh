# SPDX-License-Identifier: GPL-2.0
# Helpers for scripts that run inside the test guest (sourced).
#
# RISER_TOP is the repository (read-only in the guest), RISER_OUT the shared
# output directory. Results go to $RISER_OUT/checks.tap, one line a check.

: "${RISER_TOP:?}" "${RISER_OUT:?}"
TAP=$RISER_OUT/checks.tap
: >"$TAP"

# A kernel report in the log before the script has done anything (no riser,
# no test module loaded yet) belongs to the boot, not to the test. Under
# KASAN in TCG about one boot in eight showed a wild-memory-access in
# handle_edge_irq during identify_cpu at 0.1 s, until tests/run-guest booted
# with no5lvl (see there). Should a boot still report something, the script
# stops at once and tests/run-guest boots the guest again (it says so;
# twice at most).
if _boot_report=$(dmesg | grep -m1 -E 'BUG:|WARNING:|Oops|general protection|Kernel panic'); then
	echo "$_boot_report" >"$RISER_OUT/.boot-report"
	dmesg >"$RISER_OUT/dmesg.txt"
	exit 75
fi

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
		echo "ok - $what" >>"$TAP"
	else
		echo "not ok - $what" >>"$TAP"
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
# returns) shows where it waits.
bounded() {
	local secs=$1 pid wd rc fired
	shift
	fired=$(mktemp)
	"$@" &
	pid=$!
	# The watchdog writes to stderr only: a $(bounded ...) must not wait
	# for its sleep to close stdout.
	{
		sleep "$secs"
		kill -0 "$pid" 2>/dev/null || exit 0
		echo fired >"$fired"
		echo "still running after ${secs}s: $*"
		local p
		for p in $pid $(pgrep -P "$pid"); do
			echo "kernel stack of $p ($(cat "/proc/$p/comm" 2>/dev/null)):"
			cat "/proc/$p/stack" 2>/dev/null
		done
		kill "$pid"
	} >&2 &
	wd=$!
	wait "$pid"
	rc=$?
	# SIGPIPE: bash says "Terminated" when a SIGTERM ends its sleep.
	pkill -PIPE -P "$wd" 2>/dev/null
	kill "$wd" 2>/dev/null
	wait "$wd" 2>/dev/null
	[ -s "$fired" ] && rc=124
	rm -f "$fired"
	return $rc
}

# expect_fail DESCRIPTION CMD...: CMD must fail.
expect_fail() {
	local what=$1
	shift
	if "$@" >>"$RISER_OUT/guest.log" 2>&1; then
		echo "not ok - $what" >>"$TAP"
	else
		echo "ok - $what" >>"$TAP"
	fi
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

# unload_riser [SECONDS]: rmmod riser once nothing holds it, waiting up to
# SECONDS (default 60) for the holders that go on their own after a logout
# (a udev probe that opened the disk before it went); when it has to wait,
# says what held riser (iscsi_state) and how long it took. When riser is
# still held at the end, says what holds it then.
unload_riser() {
	local i n=$((${1:-60} * 5))
	[ -d /sys/module/riser ] || { echo "riser is not loaded"; return 1; }
	if [ "$(cat /sys/module/riser/refcnt)" != 0 ]; then
		echo "riser is held; waiting up to ${1:-60} s. Holders now:"
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
	rmmod riser && return 0
	iscsi_state
	return 1
}

# dmesg_mark / dmesg_has PATTERN: the kernel log since the last mark contains PATTERN.
dmesg_mark() { dmesg | wc -l >"$RISER_OUT/.dmesg_mark"; }
dmesg_has() { dmesg | tail -n +"$(($(cat "$RISER_OUT/.dmesg_mark") + 1))" | grep -Eq "$1"; }

save_dmesg() { dmesg >"$RISER_OUT/dmesg.txt"; }

# The modules riser links against; insmod does not load dependencies.
load_deps() {
	modprobe -a ib_core rdma_cm ib_uverbs scsi_transport_iscsi libiscsi
}

# A soft-RoCE device on dummy0 (CONFIG_DUMMY=y makes dummy0 at boot).
setup_rxe() {
	local ip=${1:-192.168.77.1}
	ip link add dummy0 type dummy 2>/dev/null || true
	ip addr add "$ip/24" dev dummy0 2>/dev/null || true
	ip link set dummy0 up
	modprobe rdma_rxe
	rdma link add rxe0 type rxe netdev dummy0
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

# kmemleak: forget what was allocated before (boot, module loading), so only
# what the test allocates can be reported.
kmemleak_clear() {
	[ -d /sys/kernel/debug/kmemleak ] || [ -e /sys/kernel/debug/kmemleak ] ||
		mount -t debugfs none /sys/kernel/debug 2>/dev/null
	echo clear >/sys/kernel/debug/kmemleak
}

# kmemleak_report FILE: scan (twice, as kmemleak wants objects seen
# unreferenced by two scans) and save the suspected leaks to FILE; prints
# their number.
kmemleak_report() {
	echo scan >/sys/kernel/debug/kmemleak && sleep 6 &&
		echo scan >/sys/kernel/debug/kmemleak || return 1
	cat /sys/kernel/debug/kmemleak >"$1"
	grep -c "^unreferenced object" "$1"
}

# no_leak_from_riser FILE: kmemleak_report found nothing allocated by riser
# (or by libiscsi, the SCSI midlayer or the RDMA core on riser's behalf,
# which show riser in the backtrace).
no_leak_from_riser() {
	kmemleak_report "$1" >/dev/null
	! grep -q '\[riser\]' "$1"
}

# fio_verify DEV RW BS QD SIZE [FIO_OPTION...]: write SIZE with fio and read
# it back verified with crc32c. fio's exit status alone is not trusted (it
# exits 0 when it refuses to start, on a mounted device for one): its terse
# line must be there and report error 0.
fio_verify() {
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
