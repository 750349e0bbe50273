#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Failure paths, by fault injection: the test build of riser.ko
# (make RISER_FAULT_INJECTION=1, out/fault-build/riser.ko) against LIO over
# soft-RoCE. Writing N to /sys/module/riser/parameters/fault_SITE makes the
# Nth call of that operation from then on fail. Each case arms one site under
# fio writing and verifying, and checks that the fault fired, that riser took
# the path the failure calls for, and that the data verified:
#  - post_send of a Data-Out after its command was posted (InitialR2T=No, so
#    128 KiB writes go as immediate data and unsolicited Data-Outs): libiscsi
#    holds its frwd_lock there, so riser must report the connection's failure
#    from a workqueue (under lockdep; it deadlocked before);
#  - post_recv of a full-feature receive: the connection fails at once, with
#    a log line, instead of running one receive short;
#  - post_send of a command's chain, of which the provider takes the REG_MR
#    and refuses the SEND (the knob refuses a chain's last request): the
#    registration is valid though the target never got its key, so the
#    command keeps its reference on it and the connection fails; recovery
#    must still end (the reference goes with the MRs at teardown);
#  - the MR mapping and the DMA mapping of a command: libiscsi requeues the
#    command (nothing was posted), the data is unmapped, no connection fails;
# then logout, a kmemleak scan while riser is loaded, rmmod.

set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
# Not out/inject: that is this script's own output directory, which
# tests/run-guest empties before the guest boots.
KO=${RISER_INJECT_KO:-$RISER_TOP/out/fault-build/riser.ko}
IP=192.168.77.1
IQN=iqn.2026-11.org.riser:inject
P=/sys/module/riser/parameters

dmesg_live

plan 33

session_up() { iscsi_logged_in "$IQN"; }
sess() { echo "/sys/class/iscsi_session/$(iscsi_session "$IQN")"; }

# injected SITE N RW BS SIZE [failure]: arm fault SITE at N, run fio verify
# with RW/BS over SIZE; the fault must have fired, and with "failure" the
# connection must have failed with riser's log line (else no connection may
# fail: fio_verify checks its window), and the session must be logged in
# afterwards. N is small (the fault fires within fio's first commands), so
# SIZE need only leave I/O to run and verify after it: 2 MiB (512 4 KiB or
# 32 64 KiB commands, and their verification).
injected() {
	local site=$1 n=$2 rw=$3 bs=$4 size=$5 want=${6:-} rc=0
	dmesg_mark
	echo "$n" >"$P/fault_$site" || return 1
	if [ "$want" = failure ]; then
		CONN_FAILURES_EXPECTED=1 fio_verify "$DEV" "$rw" "$bs" 8 "$size" || rc=1
	else
		fio_verify "$DEV" "$rw" "$bs" 8 "$size" || rc=1
	fi
	# Disarm, whatever happened.
	echo 0 >"$P/fault_$site"
	dmesg_has "riser: fault injected: $site fails" || { echo "the fault did not fire"; rc=1; }
	if [ "$want" = failure ]; then
		dmesg_has "riser: connection to $IP:3260 failed" ||
			{ echo "riser did not report the connection's failure"; rc=1; }
	fi
	return $rc
}

check "RDMA device (rxe) created" setup_rdma rxe "$IP"
check "riser's dependencies load" load_deps
check "insmod the fault-injection build of riser.ko ($KO)" insmod "$KO"
check "  it has the fault knobs, all off" \
	bash -c "[ \"\$(cat $P/fault_post_send $P/fault_post_recv $P/fault_map_mr $P/fault_dma_map $P/fault_post_dataout)\" = \"\$(printf '0\n0\n0\n0\n0')\" ]"
check "kmemleak cleared" kmemleak_clear
check "LIO rd_mcp target with an iSER portal" lio_rd_target "$IQN" "$IP" 64
# Writes with unsolicited Data-Outs.
unsolicited() {
	lio_set_param "$IQN" InitialR2T No && lio_set_param "$IQN" ImmediateData Yes
}
check "LIO: InitialR2T=No, ImmediateData=Yes" unsolicited
# LIO's Data-Out timer (3 s) runs from a WRITE's unsolicited data until its
# RDMA READ of the rest completes; a KASAN guest under TCG moves about 1 MB/s
# and needed longer (see matrix.sh).
check "LIO: the target waits 30 s for write data" lio_acl_attrib "$IQN" dataout_timeout 30
check "iscsid started" iscsi_start
# No NOP-Out pings: the Nth post_send from now must be the I/O's own. 16
# commands per session: a task slot freed is taken again at once (libiscsi
# hands out the free slot it got back first), which the send-tag case
# below needs.
quiet_node() {
	local n=(iscsiadm -m node -T "$IQN" -p "$IP:$LIO_PORT" -I iser -o update)
	_iscsi_node "$IQN" "$IP" iser &&
		"${n[@]}" -n 'node.conn[0].timeo.noop_out_interval' -v 0 &&
		"${n[@]}" -n node.session.cmds_max -v 16 &&
		"${n[@]}" -n node.session.queue_depth -v 16
}
check "node record without NOP-Out pings, 16 commands a session" quiet_node
check "login" iscsi_login "$IQN" "$IP"
DEV=$(iscsi_dev "$IQN") || DEV=/dev/null
check "disk $DEV appears" test -b "$DEV"
echo 60 >"$(sess)/recovery_tmo"
# A 128 KiB write then sends MaxXmitDataSegmentLength (8 KiB, LIO's
# TargetRecvDataSegmentLength) as immediate data and the rest of its first
# burst (FirstBurstLength: 64 KiB, LIO's) as Data-Outs: seven.
unsol_writes() {
	local c
	c=$(ls -d /sys/class/iscsi_connection/connection*/ | head -1)
	echo "initial_r2t $(cat "$(sess)/initial_r2t") first_burst $(cat "$(sess)/first_burst_len")" \
		"max_xmit_dlength $(cat "$c/max_xmit_dlength")"
	[ "$(cat "$(sess)/initial_r2t")" = 0 ] &&
		[ "$(cat "$(sess)/first_burst_len")" -gt "$(cat "$c/max_xmit_dlength")" ]
}
check "  128 KiB writes go with unsolicited Data-Outs (InitialR2T=No)" unsol_writes

# knob_fired KNOB: the fault armed on KNOB has fired (it reads 0 again).
knob_fired() {
	local v
	read -r v <"$P/fault_$1" && [ "$v" = 0 ]
}

# post_fails KNOB WHY N RW BS SIZE [FIO_ARG...]: under a stream of fio
# (verified) I/O of SIZE, make one post fail at a time (the Nth from then
# on, counted by fault_KNOB) until riser says the connection failed because
# WHY; a failed post of another kind is requeued or retried by libiscsi (a
# control PDU: LIO pings idle initiators). 20 tries at most. Each try after
# the first is a retry: inject-other-post when the fault fired and hit
# another post, inject-not-fired when it did not fire within 20 s (which
# tests/manifest does not allow: fio's stream should have fired it).
post_fails() {
	local knob=$1 why=$2 n=$3 rw=$4 bs=$5 size=$6 pid rc=0 try=0 hit='' fired=''
	shift 6
	dmesg_mark
	CONN_FAILURES_EXPECTED=1 fio_verify "$DEV" "$rw" "$bs" 8 "$size" "$@" >"$RISER_OUT/fio-post.log" 2>&1 &
	pid=$!
	while [ $try -lt 20 ] && kill -0 "$pid" 2>/dev/null; do
		if [ "$try" -gt 0 ]; then
			if [ -n "$fired" ]; then
				retried inject-other-post "fault_$knob, try $try: the failed post was not one that fails the connection with '$why'; armed again"
			else
				retried inject-not-fired "fault_$knob, try $try: the fault did not fire within 20 s; armed again"
			fi
		fi
		try=$((try + 1))
		nap 1
		echo "$n" >"$P/fault_$knob" || break
		fired=
		_wait_for 20 knob_fired "$knob" && fired=1
		if dmesg_has "riser: connection to $IP:3260 failed: $why"; then
			hit=1
			break
		fi
	done
	echo 0 >"$P/fault_$knob"
	wait "$pid" || rc=1
	cat "$RISER_OUT/fio-post.log"
	echo "tries: $try"
	[ -n "$hit" ] || { echo "no post failed with '$why' in $try tries"; rc=1; }
	return $rc
}
# fault_post_dataout counts Data-Out posts only, so the first try hits. (The
# second post_send from then on, a Data-Out most of the time with 128 KiB
# writes, was a NOP-Out twice and then a command's chain 15 tries in a row
# on 2026-11-25; the connection failures that followed ended the writes
# still queued in I/O errors.) 8 MiB of writes (64 commands, 448
# Data-Outs) is plenty for one try.
dataout_post_fails() { post_fails post_dataout "cannot post a Data-Out" 1 write 128k 8M; }
# A 256 KiB READ is one chain, [REG_MR, SEND] (the knob refuses its SEND),
# and nine I/Os in ten are READs.
chain_post_fails() { post_fails post_send "cannot post a command" 1 randrw 256k 48M --rwmixread=90; }

check "post_send of a Data-Out fails: connection failed and recovered, data verified" \
	dataout_post_fails
check "  riser said why" dmesg_has "riser: connection to $IP:3260 failed: cannot post a Data-Out"
check "  the session is logged in again" _wait_for 120 session_up

check "post_recv of a receive fails: connection failed and recovered, data verified" \
	injected post_recv 5 randrw 4k 2M failure
check "  riser said why" dmesg_has "riser: cannot repost a receive"
check "  the session is logged in again" _wait_for 120 session_up

check "post_send of a command's chain goes out in part: connection failed and recovered, data verified" \
	chain_post_fails
check "  riser said why" dmesg_has "riser: connection to $IP:3260 failed: cannot post a command"
check "  the session is logged in again" _wait_for 120 session_up

check "MR mapping fails: the command is requeued, no connection failure, data verified" \
	injected map_mr 3 randwrite 64k 2M
check "DMA mapping fails: the command is requeued, no connection failure, data verified" \
	injected dma_map 3 randrw 64k 2M

# Send completions held up: the knob makes each of the next 500 send
# completions wait 1 ms in riser's handler, with the send's tag still
# held, before it takes what the tag kept, under 4 KiB
# random reads and writes (the writes' data goes as immediate data, their
# SENDs signaled on the slot's tag; the reads' SENDs are inline and take
# no tag, so 8 MiB: about 1,000 writes, twice the delays) at 16 commands a
# session.
# Nothing may be lost or stall:
# a tag the handler did not free again would stop its task slot's
# commands. (A completion that takes another post's reference warns,
# which fails any guest; this delay cannot provoke that on rxe, see
# Documentation/design.md.)
cmds_max_16() {
	local h
	h=$(basename "$(dirname "$(readlink -f "$(sess)/device")")")
	echo "$h: can_queue $(cat "/sys/class/scsi_host/$h/can_queue")"
	[ "$(cat "/sys/class/scsi_host/$h/can_queue")" -le 16 ]
}
tag_window() {
	local rc=0 left
	echo 500 >"$P/fault_send_done_delay" || return 1
	fio_verify "$DEV" randrw 4k 16 8M || rc=1
	left=$(cat "$P/fault_send_done_delay")
	echo 0 >"$P/fault_send_done_delay"
	echo "delays left unused: $left"
	[ "$left" = 0 ] || { echo "fewer than 500 send completions were delayed"; rc=1; }
	return $rc
}
check "send completions delayed 1 ms before the handler, 4 KiB random I/O: data verified" \
	tag_window
check "  the delays ran" dmesg_has "riser: fault injected: the last delayed send completion"
check "  a session of 16 commands" cmds_max_16

# A fatal device error (IB_EVENT_DEVICE_FATAL, which rxe never sends: the
# test build's knob has ib_core deliver it) under fio: riser fails the
# connections on the device at once ("the RDMA device failed"), rather than
# wait for NOP or RC timeouts; the device being alive, iscsid's reconnect
# works and fio verifies.
device_fatal() {
	local nd pid rc=0
	nd=$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0) || return 1
	dmesg_mark
	CONN_FAILURES_EXPECTED=1 fio_verify "$DEV" randrw 4k 8 4M >"$RISER_OUT/fio-fatal.log" 2>&1 &
	pid=$!
	nap 2
	kill -0 "$pid" 2>/dev/null || { echo "fio ended before the event"; rc=1; }
	echo "$nd" >"$P/fault_device_fatal" || { echo "the knob refused $nd"; rc=1; }
	wait "$pid" || { echo "fio failed"; rc=1; }
	cat "$RISER_OUT/fio-fatal.log"
	dmesg_has "riser: fault injected: device fatal event on rxe0" || { echo "no event"; rc=1; }
	dmesg_has "riser: connection to $IP:3260 failed: the RDMA device failed" ||
		{ echo "riser did not fail the connection on the event"; rc=1; }
	return $rc
}
check "a DEVICE_FATAL event under fio: the connection fails at once, recovers, data verified" \
	device_fatal

check "logout" iscsi_logout "$IQN" "$IP"
check "iscsid stopped" iscsi_stop
# Before rmmod: kmemleak names riser's frames only while riser is loaded.
check "kmemleak: nothing from riser" no_leak_from_riser "$RISER_OUT/kmemleak.txt"
check "rmmod riser" unload_riser
# After riser: see faults.sh.
check "LIO torn down" lio_teardown
save_dmesg
