#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Many sessions at once, as an administrator with many targets runs them:
# LIO with SCALE_N targets (one 8 MiB ramdisk LUN each) on one iSER portal
# over soft-RoCE, discovery, every login at once (iscsiadm -m node -L all),
# one fio job per disk, all at once, with crc32c verification, logout of
# all at once, unload, kmemleak. make check runs it on one vCPU beside the
# other guests (a busy host), with riser.
#
# RISER_SCALE_INITIATORS (make scale: "riser ib_iser riser") runs the same
# rounds with each initiator in turn in one guest and prints, for each, the
# time of the login of all, of the logout of all, and the kernel memory each
# session holds (figures: one "# scale:" line each in checks.tap and in
# $RISER_OUT/scale.txt), so that the two are compared on the same target,
# link and load. The first round also fills the RDMA device's CQ pool
# (ib_cq_pool_get keeps its CQs until the device goes, and the later
# rounds' connections take room in them): compare the rounds after it.
#
# The memory a session holds is what login of all took from the kernel
# (MemTotal - MemFree - Buffers - Cached, before the login and after every
# disk is there, over the sessions): riser's or ib_iser's own, libiscsi's,
# the SCSI disks', rxe's queues, and the target's (LIO's, isert's) alike.

set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
KO=$RISER_TOP/riser.ko

IP=192.168.77.1
N=16
# open-iscsi's own defaults, as an administrator's iscsid has them (the
# harness's are 1 and 30 s, to fail fast): a login that times out on the
# starved vCPU is tried again (counted: LOGIN_RETRIES), and a session in
# recovery waits 120 s before it fails its I/O.
ISCSI_LOGIN_RETRIES=8
ISCSI_REPLACEMENT_TIMEOUT=120
# fio's depth and size per disk: make check runs QD 4 and 2 MiB (64
# commands in flight on a vCPU that has about half a core beside the other
# guests, where a command already waits seconds); make scale the issue's
# QD 8 and 4 MiB (RISER_SCALE_FIO="8 4M").
read -r FIO_QD FIO_SIZE <<<"${RISER_SCALE_FIO:-4 2M}"
INITIATORS=${RISER_SCALE_INITIATORS:-riser}
FIGURES=$RISER_OUT/scale.txt
: >"$FIGURES"

iqn_of() { echo "iqn.2026-11.org.riser:scale-$1"; }

# targets: SCALE_N LIO targets on one portal.
targets() {
	local i
	for ((i = 1; i <= N; i++)); do
		lio_rd_target "$(iqn_of "$i")" "$IP" 8 || return 1
	done
}

# discover_all: SendTargets lists every target.
discover_all() {
	local out i
	out=$(iscsi_discover "$IP") || return 1
	for ((i = 1; i <= N; i++)); do
		grep -q " $(iqn_of "$i")\$" <<<"$out" || { echo "$(iqn_of "$i") not listed" >&2; return 1; }
	done
	echo "$N targets listed"
}

# mem_kib: kernel memory in use, in KiB: what is neither free nor page
# cache (MemTotal - MemFree - Buffers - Cached), so that page allocations
# (kmalloc beyond 8 KiB, DMA buffers) count as well as slab and vmalloc.
# Nothing is cached by the block devices between the two readings (no I/O).
mem_kib() {
	local k v total= free= buf= cached=
	while read -r k v _; do
		case $k in
		MemTotal:) total=$v ;;
		MemFree:) free=$v ;;
		Buffers:) buf=$v ;;
		Cached:) cached=$v ;;
		esac
	done </proc/meminfo
	echo $((total - free - buf - cached))
}

# snapshot NAME: meminfo, slabinfo and vmallocinfo into the output, to
# tell where a session's memory goes (not a check).
snapshot() {
	cat /proc/meminfo >"$RISER_OUT/meminfo-$1.txt" 2>/dev/null
	cat /proc/slabinfo >"$RISER_OUT/slabinfo-$1.txt" 2>/dev/null
	cat /proc/vmallocinfo >"$RISER_OUT/vmallocinfo-$1.txt" 2>/dev/null
}

# settle: let deferred frees (RCU, the kernel's work queues) run before a
# memory reading.
settle() {
	echo 3 >/proc/sys/vm/drop_caches
	nap 2
	echo 3 >/proc/sys/vm/drop_caches
}

# _login_tries: the logins iscsid has tried again by itself so far (its
# log at debug level 2: "re-opening session", or a first login given up).
_login_tries() {
	local n
	n=$(grep -cE "re-opening session|Giving up on initial login" "$ISCSID_LOG" 2>/dev/null)
	echo "${n:-0}"
}

# login_all: every node at once; each session logged in, each LUN's disk
# there. Prints the time the login of all took (LOGIN_S).
login_all() {
	local t0 t1 rc i s missing=0
	uptime_now
	t0=${UPTIME/./}
	local before
	before=$(_login_tries)
	perf_cmd login
	bounded 900 "${PERF[@]}" iscsiadm -m node -L all
	rc=$?
	uptime_now
	t1=${UPTIME/./}
	LOGIN_CS=$((10#$t1 - 10#$t0))
	LOGIN_RETRIES=$(($(_login_tries) - before))
	echo "login of all: $((LOGIN_CS / 100)).$((LOGIN_CS % 100 / 10)) s (status $rc), logins tried again by iscsid: $LOGIN_RETRIES"
	for ((i = 1; i <= N; i++)); do
		iscsi_logged_in "$(iqn_of "$i")" || { echo "not logged in: $(iqn_of "$i")" >&2; missing=1; }
	done
	[ "$rc" = 0 ] && [ "$missing" = 0 ]
}

# disks: every session's LUN 0 disk, in DEVS.
disks() {
	local i d
	DEVS=()
	for ((i = 1; i <= N; i++)); do
		d=$(iscsi_dev "$(iqn_of "$i")" 0 120) || return 1
		DEVS+=("$d")
	done
	echo "${DEVS[*]}"
}

# fio_all: one verified random-write job per disk, all at once; each job's
# terse line must be there and report error 0, and the kernel log of the
# run must show no I/O error. A connection may fail meanwhile: on one
# starved vCPU a ping can go unanswered for libiscsi's 5 s (seen with
# ib_iser as with riser), and iscsid then logs in again behind the I/O,
# which must get through: each such failure is counted (RECOVERED) and
# shown with the figures.
fio_all() {
	local rc mark lines
	kmsg_mark
	mark=$MARK
	_fio_all
	rc=$?
	lines=$(kernel_after_mark "$mark") || { echo "marker $mark not found in the kernel log"; return 1; }
	RECOVERED=$(grep -cE "$CONN_TROUBLE" <<<"$lines")
	echo "connection failures while it ran (recovered behind the I/O): $RECOVERED"
	grep -E "$CONN_TROUBLE" <<<"$lines" | head -n 5
	if grep -E "I/O error|rejecting I/O" <<<"$lines"; then
		return 1
	fi
	return $rc
}
_fio_all() {
	local args=() d out
	for d in "${DEVS[@]}"; do
		args+=(--name="${d#/dev/}" --filename="$d")
	done
	out=$(fio --direct=1 --ioengine=libaio --rw=randwrite --bs=8k --iodepth="$FIO_QD" --size="$FIO_SIZE" \
		--verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 \
		--verify_state_save=0 --output-format=terse "${args[@]}") || { echo "$out"; return 1; }
	echo "$out" | cut -c1-120
	awk -F';' -v n="${#DEVS[@]}" '$1 == 3 { jobs++; if ($5 != 0) bad = 1 }
		END { exit !(jobs == n && !bad) }' <<<"$out"
}

# perf_cmd WHAT: in PERF, with RISER_SCALE_PROFILE=1 (not a check), the
# perf command that samples every CPU, call graphs included, through the
# command it is put in front of (the login or the logout of all), into
# the guest's own file system (perf cannot finish its file on the shared
# one); profile_save reads it into $RISER_OUT/perf-WHAT-N-NAME.txt (round
# N) while the modules are loaded. Empty otherwise.
perf_cmd() {
	PERF=()
	if [ "${RISER_SCALE_PROFILE:-0}" = 1 ] && command -v perf >/dev/null; then
		PERF=(perf record -q -a -g -e cpu-clock -F 499 -o "/tmp/perf-$1.data" --)
	fi
}

# logout_all: every session at once (LOGOUT_CS: the time it took); none is
# left. With RISER_SCALE_PROFILE=1 (not a check) it is profiled
# (perf_cmd), and scsi_transport_iscsi logs each step of each connection
# and session; RISER_SCALE_PROFILE=log, the log only.
logout_all() {
	local t0 t1 rc p log=0
	case ${RISER_SCALE_PROFILE:-0} in
	1 | log) log=1 ;;
	esac
	perf_cmd logout
	if [ $log = 1 ]; then
		for p in debug_conn debug_session; do
			echo 1 >/sys/module/scsi_transport_iscsi/parameters/$p
		done
		echo "riser-harness: logout of all begins" >/dev/kmsg
	fi
	uptime_now
	t0=${UPTIME/./}
	bounded 600 "${PERF[@]}" iscsiadm -m node --logoutall=all
	rc=$?
	uptime_now
	t1=${UPTIME/./}
	if [ $log = 1 ]; then
		echo "riser-harness: logout of all ends" >/dev/kmsg
		for p in debug_conn debug_session; do
			echo 0 >/sys/module/scsi_transport_iscsi/parameters/$p
		done
	fi
	LOGOUT_CS=$((10#$t1 - 10#$t0))
	echo "logout of all: $((LOGOUT_CS / 100)).$((LOGOUT_CS % 100 / 10)) s (status $rc)"
	[ "$rc" = 0 ] || return 1
	[ -z "$(ls /sys/class/iscsi_session 2>/dev/null)" ] || { iscsi_state; return 1; }
}

# load_initiator NAME: riser from the tree, ib_iser from the kernel.
load_initiator() {
	case $1 in
	riser) insmod "$KO" ;;
	*) modprobe "$1" ;;
	esac
}
unload_initiator() {
	case $1 in
	riser) unload_riser ;;
	*) bounded 120 rmmod "$1" ;;
	esac
}

# no_leak NAME: kmemleak finds nothing of riser (while it is loaded), or
# nothing at all for another initiator.
no_leak() {
	if [ "$1" = riser ]; then
		no_leak_from_riser "$RISER_OUT/kmemleak-scale.txt"
	else
		[ "$(kmemleak_report "$RISER_OUT/kmemleak-scale-$1.txt")" = 0 ]
	fi
}

# figures NAME: the round's figures, in the log and checks.tap.
figures() {
	local line
	ROUND=$((ROUND + 1))
	line="scale: round $ROUND, $1: $N sessions, login of all $((LOGIN_CS / 100)).$((LOGIN_CS % 100 / 10)) s,"
	line+=" logout of all $((LOGOUT_CS / 100)).$((LOGOUT_CS % 100 / 10)) s,"
	line+=" kernel memory per session $(((MEM_AFTER - MEM_BEFORE) / N)) KiB,"
	line+=" logins tried again by iscsid $LOGIN_RETRIES,"
	line+=" connections failed and recovered under fio $RECOVERED"
	echo "$line" >>"$FIGURES"
	echo "# $line" >>"$TAP"
}

# trace_on / trace_save NAME: riser's connection phases and the Login
# Requests it sends (trace system "riser"), and the RDMA CM's events, with
# their times, into the output (not a check): where a slow login spends
# its time.
TR=/sys/kernel/tracing
trace_on() {
	[ -d $TR/events ] || mount -t tracefs nodev $TR 2>/dev/null || return 0
	echo >$TR/trace
	echo 4096 >$TR/buffer_size_kb 2>/dev/null
	[ ! -d $TR/events/riser ] || {
		echo 1 >$TR/events/riser/riser_conn_state/enable
		echo 'opcode == 0x03' >$TR/events/riser/riser_pdu_send/filter &&
			echo 1 >$TR/events/riser/riser_pdu_send/enable
	}
	[ ! -d $TR/events/rdma_cma ] || echo 1 >$TR/events/rdma_cma/enable
	return 0
}
trace_save() {
	[ -f $TR/trace ] || return 0
	cat $TR/trace >"$RISER_OUT/trace-$1.txt" 2>/dev/null
	echo 0 >$TR/events/enable 2>/dev/null
	return 0
}

# profile_save NAME: the login's and the logout's profiles
# (RISER_SCALE_PROFILE=1) as text, by symbol, self and with callees, and
# by command, while the initiator is loaded.
profile_save() {
	local what data
	for what in login logout; do
		data=/tmp/perf-$what.data
		[ -f "$data" ] || continue
		perf report -i "$data" --stdio --no-children --sort sym --percent-limit 0.3 -g none \
			>"$RISER_OUT/perf-$what-$1.txt" 2>&1
		perf report -i "$data" --stdio --children --sort sym --percent-limit 1 -g none \
			>"$RISER_OUT/perf-$what-$1-children.txt" 2>&1
		perf report -i "$data" --stdio --no-children --sort comm --percent-limit 0.5 -g none \
			>"$RISER_OUT/perf-$what-$1-comm.txt" 2>&1
		rm -f "$data"
	done
	return 0
}

round() {
	local who=$1
	WHO=$((ROUND + 1))-$who
	LOGIN_CS=0 LOGOUT_CS=0 MEM_BEFORE=0 MEM_AFTER=0 RECOVERED=0 LOGIN_RETRIES=0
	check "$who loads" load_initiator "$who"
	trace_on
	check "kmemleak cleared ($who)" kmemleak_clear
	check "discovery over iser lists the $N targets ($who)" discover_all
	settle
	MEM_BEFORE=$(mem_kib)
	snapshot "$who-before"
	check "all $N sessions log in at once ($who)" login_all
	check "every session's disk appears ($who)" disks
	settle
	MEM_AFTER=$(mem_kib)
	snapshot "$who-after"
	check "fio randwrite bs=8k QD$FIO_QD verify crc32c on all $N disks at once, no I/O error ($who)" fio_all
	check "logout of all $N sessions at once ($who)" logout_all
	# Before the unload: unloading a module whose events are in the trace
	# buffer empties the buffer.
	trace_save "$who"
	profile_save "$WHO"
	check "kmemleak: nothing left by the sessions ($who)" no_leak "$who"
	check "$who unloads" unload_initiator "$who"
	# The node records go with the round: the next discovery makes them.
	rm -rf /var/lib/iscsi/nodes /var/lib/iscsi/send_targets
	figures "$who"
}

dmesg_live
ROUND=0
_inits=($INITIATORS)
plan $((5 + 9 * ${#_inits[@]}))

check "RDMA device (rxe) created" setup_rdma rxe "$IP"
check "riser's dependencies load" load_deps
check "$N LIO targets with an iSER portal" targets
check "iscsid started" iscsi_start
for who in "${_inits[@]}"; do
	round "$who"
done
check "iscsid stopped" iscsi_stop
cat "$FIGURES"
save_dmesg
