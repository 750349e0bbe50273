#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# riser against a hostile target: tests/target/iser-evil (userspace verbs
# over soft-RoCE) logs in, serves a memory disk, and misbehaves once per run
# in the way its mode names: malformed PDUs, unknown and stale ITTs, foreign
# remote invalidation, over-long sends, bad iSER headers, floods, a target
# that stops answering, bad login responses.
#
# One session lives through every full-feature mode in turn, with fio
# writing and verifying (crc32c) all along: each mode is triggered by a READ
# of block 32768 with a 256 KiB write beside it, then the checks: riser logged
# the connection failure (for the modes that are one), the session came back
# through iscsid, the write (if reported done) reads back equal, the disk
# works. A second target spoils three login attempts in three ways. At the
# end fio must have seen no error and no corrupt block; logout, rmmod and a
# kmemleak scan.

set -u
. "$RISER_TOP/tests/guest/lib.sh"
. "$RISER_TOP/tests/guest/target.sh"
KO=$RISER_TOP/riser.ko
EVIL=${RISER_EVIL:-$RISER_TOP/out/iser-evil}
IP=192.168.77.1
# Block 32768 (16 MiB): away from fio (32..40 MiB) and the patterns (2..3 MiB).
TRIGGER_LBA=32768
EVIL_PID=

(while sleep 15; do dmesg >"$RISER_OUT/dmesg.live"; done) &

# evil_start LOG MODES: the target, misbehaving in each of MODES in turn.
evil_start() {
	local log=$RISER_OUT/$1.log
	"$EVIL" -a "$IP" -m "$2" -l "$TRIGGER_LBA" >"$log" 2>&1 &
	EVIL_PID=$!
	_wait_for 60 grep -q "^evil: listening" "$log"
}

evil_stop() {
	[ -n "$EVIL_PID" ] || return 0
	kill "$EVIL_PID" 2>/dev/null
	wait "$EVIL_PID" 2>/dev/null
	EVIL_PID=
}

evil_fired() { _wait_for 30 grep -q "^evil: fired $2\$" "$RISER_OUT/$1.log"; }
evil_tmf() { grep -q "^evil: TMF function $2" "$RISER_OUT/$1.log"; }

# node_setup IQN: a node record with short task-management timeouts, so a
# silent target escalates quickly, a replacement timeout long enough to
# ride out each failure, and login retries for the login modes.
node_setup() {
	local n=(iscsiadm -m node -T "$1" -p "$IP:$LIO_PORT" -I iser -o update)
	_iscsi_node "$1" "$IP" iser &&
		"${n[@]}" -n node.session.timeo.replacement_timeout -v 60 &&
		"${n[@]}" -n node.session.err_timeo.abort_timeout -v 5 &&
		"${n[@]}" -n node.session.err_timeo.lu_reset_timeout -v 5 &&
		"${n[@]}" -n node.session.err_timeo.tgt_reset_timeout -v 5 &&
		"${n[@]}" -n node.session.initial_login_retry_max -v 8
}

# session_up IQN: the session's connection is logged in (again).
session_up() { iscsi_logged_in "$1"; }

# pattern_roundtrip N: 256 KiB of random data written at MiB N and read
# back equal, both with O_DIRECT.
pattern_roundtrip() {
	dd if=/dev/urandom of=/tmp/pattern bs=64k count=4 status=none &&
		dd if=/tmp/pattern of="$DEV" bs=64k seek=$((16 * $1)) oflag=direct status=none &&
		dd if="$DEV" bs=64k skip=$((16 * $1)) count=4 iflag=direct status=none |
		cmp - /tmp/pattern
}

# trigger: the READ that arms the target, the READ that makes it misbehave, a second READ
# (inv-other answers the first when the second arrives) and a 256 KiB write
# beside them. Each may fail with EIO if recovery took too long; none may
# hang. What the write reported done must read back equal.
trigger() {
	# Arm (a READ just before the trigger block), then fire.
	timeout 150 dd if="$DEV" of=/dev/null bs=4k skip=$((TRIGGER_LBA / 8 - 1)) count=1 \
		iflag=direct status=none
	timeout 150 dd if="$DEV" of=/dev/null bs=4k skip=$((TRIGGER_LBA / 8)) count=1 \
		iflag=direct status=none &
	local t=$!
	sleep 1
	timeout 150 dd if="$DEV" of=/dev/null bs=4k skip=64 count=1 iflag=direct status=none
	timeout 150 dd if=/tmp/pattern of="$DEV" bs=64k seek=32 oflag=direct status=none &&
		echo "trigger: the write beside it was reported done" && WROTE=1
	wait "$t"
}

FAILED="riser: connection to $IP:3260 failed"
no_conn_error() { ! dmesg_has "riser: connection to|detected conn error"; }
written_reads_back() {
	[ "$WROTE" = 1 ] || return 0
	dd if="$DEV" bs=64k skip=32 count=4 iflag=direct status=none | cmp - /tmp/pattern
}

# ffp MODE [PATTERN]: trigger the next mode in the full-feature phase.
# PATTERN (an extended regex) must appear in dmesg after the trigger; with no
# PATTERN the connection must survive.
ffp() {
	local mode=$1 pattern=${2:-}
	dmesg_mark
	dd if=/dev/urandom of=/tmp/pattern bs=64k count=4 status=none
	WROTE=0
	# A silent target is found by the SCSI command timer, set short for
	# those modes only. Elsewhere the default 30 s: under KASAN in TCG the
	# 3000 NOP-Ins of flood-nop once held the triggering READ past 8 s,
	# the SCSI layer aborted it, and its response, legal but late, then
	# named a freed task (the connection failed as it must).
	case $mode in
	silent*) echo 8 >"/sys/block/${DEV#/dev/}/device/timeout" ;;
	*) echo 30 >"/sys/block/${DEV#/dev/}/device/timeout" ;;
	esac
	trigger >>"$RISER_OUT/guest.log" 2>&1
	check "$mode: the target misbehaved" evil_fired ffp "$mode"
	if [ -n "$pattern" ]; then
		check "$mode: dmesg has: $pattern" _wait_for 60 dmesg_has "$pattern"
	else
		check "$mode: the connection survived" no_conn_error
	fi
	case $mode in
	ping)
		# Each ping goes when the last was answered. libiscsi leaves the
		# release of such a NOP-Out's task to the driver (riser: when its
		# SEND completes); a task left unreleased stays out of the
		# session's task pool (cmds_max plus 15: 143 with open-iscsi's
		# default), which 600 pings would drain (checked: with the
		# release removed, the answers stop).
		check "$mode: the initiator answered all 600 pings, each echoing its TTT" \
			_wait_for 90 grep -q "^evil: pings answered 600\$" "$RISER_OUT/ffp.log"
		;;
	silent) check "$mode: the timed-out READ was aborted (ABORT TASK answered)" evil_tmf ffp "1$" ;;
	silent-all)
		check "$mode: abort (ABORT TASK) was tried and refused" evil_tmf ffp "1 rejected"
		check "$mode: then an LU reset (LOGICAL UNIT RESET), never answered" evil_tmf ffp "5 ignored"
		;;
	esac
	check "$mode: session logged in (again)" _wait_for 120 session_up "$IQN"
	check "$mode: a write reported done reads back equal" written_reads_back
	check "$mode: the disk reads and writes" pattern_roundtrip 2
}

check "hostile target binary built" test -x "$EVIL"
check "RDMA device (rxe) created" setup_rdma rxe "$IP"
check "riser's dependencies and user verbs load" modprobe -a ib_core rdma_cm ib_uverbs rdma_ucm \
	scsi_transport_iscsi libiscsi
check "insmod riser.ko" insmod "$KO"
check "kmemleak cleared" kmemleak_clear
check "iscsid started" iscsi_start
IQN=iqn.2026-11.org.riser:evil
# Each full-feature mode and what dmesg must show after it ("" for a
# connection that must survive). RISER_EVIL_MODES picks some, for debugging.
declare -A EXPECT=(
	[short]="$FAILED: malformed PDU"
	[dsl-long]="$FAILED: malformed PDU"
	[overrun]="$FAILED: receive error"
	[unknown-itt]="$FAILED: libiscsi rejected a PDU"
	[stale-itt]="$FAILED: libiscsi rejected a PDU"
	[inv-other]="$FAILED: foreign remote invalidation"
	[inv-bad]="$FAILED: (receive error|send error|foreign remote invalidation)"
	[bad-version]="$FAILED: malformed PDU"
	[bad-flags]="$FAILED: malformed PDU"
	[ahs]="$FAILED: malformed PDU"
	[bad-opcode]="$FAILED: malformed PDU"
	[drop]="$FAILED: disconnected by the target"
	[flood-nop]=""
	[ping]=""
	[flood-async]="$FAILED: async message flood"
	[silent]=""
	[silent-all]="detected conn error"
)
FFP_MODES=${RISER_EVIL_MODES:-short dsl-long overrun unknown-itt stale-itt inv-other inv-bad bad-version bad-flags ahs bad-opcode drop flood-nop ping flood-async silent silent-all}
check "hostile target up (full-feature modes)" evil_start ffp "${FFP_MODES// /,}"
check "node record" node_setup "$IQN"
check "login" iscsi_login "$IQN" "$IP"
DEV=$(iscsi_dev "$IQN" 0 60) || DEV=/dev/null
check "disk $DEV appears" test -b "$DEV"
fio_verify "$DEV" randwrite 4k 4 4M --offset=32M >"$RISER_OUT/fio-hostile.log" 2>&1 &
FIO=$!

for m in $FFP_MODES; do
	ffp "$m" "${EXPECT[$m]}"
done

wait "$FIO"
FIO_RC=$?
cat "$RISER_OUT/fio-hostile.log" >>"$RISER_OUT/guest.log"
check "fio wrote and verified 4 MiB through all of it (no error, no corrupt block)" test "$FIO_RC" = 0
check "logout" iscsi_logout "$IQN" "$IP"
evil_stop

# The login modes: each spoils one login, which must fail cleanly (riser's
# log line, no session left behind); then a clean login works. Each is its
# own iscsiadm login with no retry: after a connection failure in the middle
# of a login, the kernel's iSCSI class refuses iscsid's retries on the same
# connection (ENOTCONN: the connection is marked for cleanup), with the C
# ib_iser exactly as with riser (tried against this target).
declare -A LOGIN_EXPECT=(
	[login-long]="riser: receive failed"
	[login-dsl]="riser: bad PDU from the target .*DataLength"
	[login-bad]="$FAILED: libiscsi rejected a PDU"
)
LOGIN_MODES="login-long login-dsl login-bad"
IQN=iqn.2026-11.org.riser:evil-login
no_session() { ! iscsi_session "$IQN" >/dev/null; }
check "hostile target up (login modes)" evil_start login "${LOGIN_MODES// /,}"
check "node record" node_setup "$IQN"
iscsiadm -m node -T "$IQN" -p "$IP:$LIO_PORT" -I iser -o update \
	-n node.session.initial_login_retry_max -v 0 >>"$RISER_OUT/guest.log" 2>&1
for m in $LOGIN_MODES; do
	dmesg_mark
	expect_fail "$m: the spoilt login fails" iscsi_login "$IQN" "$IP"
	check "$m: the target misbehaved" evil_fired login "$m"
	check "$m: dmesg has: ${LOGIN_EXPECT[$m]}" dmesg_has "${LOGIN_EXPECT[$m]}"
	check "$m: no session left behind" _wait_for 30 no_session
done
check "then a clean login succeeds" iscsi_login "$IQN" "$IP"
DEV=$(iscsi_dev "$IQN" 0 60) || DEV=/dev/null
check "the disk works after" fio_verify "$DEV" randrw 4k 4 1M
check "logout" iscsi_logout "$IQN" "$IP"
evil_stop

check "iscsid stopped" iscsi_stop
check "rmmod riser" unload_riser
check "kmemleak: nothing from riser" no_leak_from_riser "$RISER_OUT/kmemleak.txt"
save_dmesg
