#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# riser against a hostile target: tests/target/iser-evil (userspace verbs
# over soft-RoCE) logs in, serves a memory disk, and misbehaves once per run
# in the way its mode names: malformed PDUs, unknown and stale ITTs, foreign
# remote invalidation, over-long sends, bad iSER headers, floods, a target
# that stops answering, RDMA accesses with a command's STag after the
# command ended, a Logout Response to a ping, bad login responses, an early
# status while unsolicited Data-Outs are on their way; a Logout Response
# nobody asked for, Async Messages 1 to 4, NOP-Ins with data, an 8 KiB
# response, remote invalidation by a NOP-In or by a command without memory,
# a response held back until its task slot is in use again after a
# reconnect, a second Login Response in full-feature phase; an ABORT TASK
# answered with a held ping's ITT, or twice, a response whose ITT has junk
# in the bits libiscsi ignores.
#
# One session lives through the full-feature modes of its part (HOSTILE_PART
# below: those that race on two vCPUs here, the others in
# tests/guest/hostile-session.sh) in turn, with fio
# writing and verifying (crc32c) in rounds until the last mode is done:
# each mode is triggered by a READ of block 32768 (a WRITE of 256 KiB there
# for the modes a WRITE fires) after a READ of block 32760, with a READ and
# a 256 KiB write beside it; then the checks: no trigger command hung or
# failed, what the READs returned is what the disk holds, riser logged the
# connection failure (for the modes that are one), the session came back
# through iscsid, the write reads back equal, the disk works. A second
# target spoils three login attempts in three ways; a third negotiates
# unsolicited data in 1 KiB Data-Outs and answers a WRITE as soon as its
# command arrives. At the end fio must have seen no error and no corrupt
# block. Then phases of their own: a target that spoils the iSER CM header
# of its accept (cm-garbage); one that takes 512-byte PDUs with bursts at
# the extremes RFC 7143 allows (small-pdu, riser reloaded with larger
# commands); one that answers a READ by invalidating the PD's global rkey
# (always_register=0, riser reloaded with it); one that answers commands
# before they come, while the test build holds them before their slot word
# or their post (early-rsp, riser reloaded from the test build). Logout, a
# kmemleak scan, rmmod.

set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
# RISER_KO: another riser.ko (a before/after comparison), by hand only.
KO=${RISER_KO:-$RISER_TOP/riser.ko}
# The test build (make inject) for the release-hold phase; RISER_INJECT_KO:
# another one, by hand (one whose stop does not wait for the release).
FAULT_KO=${RISER_INJECT_KO:-$RISER_TOP/out/fault-build/riser.ko}
P=/sys/module/riser/parameters
EVIL=${RISER_EVIL:-$RISER_TOP/out/iser-evil}
IP=192.168.77.1
# Block 32768 (16 MiB): away from fio (32..36 MiB) and the patterns (2..3 MiB).
TRIGGER_LBA=32768
EVIL_PID=
# The CPUs the target and the early answers' trigger dd run on (taskset),
# when set: the early answers' phase sets them.
EVIL_ON=
EARLY_ON=()

dmesg_live

# evil_start LOG MODES [OPTION...]: the target, misbehaving in each of MODES
# in turn.
evil_start() {
	local log=$RISER_OUT/$1.log modes=$2 on=()
	shift 2
	[ -z "$EVIL_ON" ] || on=(taskset -c "$EVIL_ON")
	"${on[@]}" "$EVIL" -a "$IP" -m "$modes" -l "$TRIGGER_LBA" "$@" >"$log" 2>&1 &
	EVIL_PID=$!
	_wait_for 60 grep -q "^evil: listening" "$log"
}

evil_stop() {
	[ -n "$EVIL_PID" ] || return 0
	kill "$EVIL_PID" 2>/dev/null
	wait "$EVIL_PID" 2>/dev/null
	EVIL_PID=
}

# evil_fired LOG MODE [SECONDS]: the target says MODE fired (within 30 s).
evil_fired() { _wait_for "${3:-30}" evil_logged "$1" "^evil: fired $2\$"; }
# evil_mark LOG: what the target said from now on is what evil_since shows.
# _lines FILE: FILE's line count in $LINES_N, by mapfile (no fork, no exec).
_lines() {
	local l
	mapfile -t l <"$1"
	LINES_N=${#l[@]}
}
evil_mark() { _lines "$RISER_OUT/$1.log" && EVIL_MARK=$LINES_N; }
# The target's logs are read and matched in the shell (mapfile, [[ =~ ]]):
# they are polled every half second while a mode plays out, and a tail and
# a grep cost an exec each, about 0.25 s of a vCPU (the work waited for).
# _said FILE SKIP: FILE's lines after the first SKIP, in SAID (status 2
# when FILE cannot be read).
_said() { mapfile -t -s "$2" SAID <"$1" 2>/dev/null; }
# _said_match ERE: the lines of SAID matching ERE (an extended regex, one
# line at a time, as grep -E), printed; status 1 when none.
_said_match() {
	local l rc=1
	for l in "${SAID[@]}"; do
		[[ $l =~ $1 ]] || continue
		printf '%s\n' "$l"
		rc=0
	done
	return $rc
}
evil_since() { _said "$RISER_OUT/$1.log" "$EVIL_MARK" || return 2; _said_match '' || :; }
# evil_says LOG ERE: the target said a line matching ERE since evil_mark.
evil_says() {
	_said "$RISER_OUT/$1.log" "$EVIL_MARK" || return 2
	_said_match "$2" >/dev/null
}
# evil_logged LOG ERE: a line of the target's whole log matches ERE.
evil_logged() {
	_said "$RISER_OUT/$1.log" 0 || return 2
	_said_match "$2" >/dev/null
}
evil_tmf() { evil_says "$1" "^evil: TMF function $2"; }

# iscsid_mark, iscsid_says PATTERN: what iscsid logged (iscsid.log) since
# the mark.
iscsid_mark() { _lines "$RISER_OUT/iscsid.log" && ISCSID_MARK=$LINES_N; }
iscsid_says() {
	_said "$RISER_OUT/iscsid.log" "$ISCSID_MARK" || return 2
	_said_match "$1" >/dev/null
}
# reconnect_after SECONDS: the target's first new connection came at least
# SECONDS after it hung up as announced.
reconnect_after() {
	local down up
	down=$(evil_since ffp | sed -n 's/^evil: disconnecting as announced at //p' | head -n 1)
	up=$(evil_since ffp | sed -n 's/^evil: connection accepted at //p' | head -n 1)
	echo "hung up at ${down:-?}, next connection accepted at ${up:-?}"
	[ -n "$down" ] && [ -n "$up" ] && awk -v a="$down" -v b="$up" -v t="$1" 'BEGIN { exit !(b - a >= t) }'
}

# evil_late LOG write|read: the target's late access with an old STag was
# made, and refused at the initiator (any failed completion but a flush,
# which would mean it was never tried). Prints the target's lines.
evil_late() {
	_wait_for 30 evil_says "$1" "^evil: late $2 (completed|refused|not)"
	_said_match "^evil: late"
	evil_says "$1" "^evil: late $2 refused \(status"
}

# logout_failed_within S: riser's failure line for logout-ping came at most
# S seconds after the target sent its Logout Response (both times from the
# kernel log: the target writes a line there when it sends).
logout_failed_within() {
	local log sent failed
	log=$(dmesg_since_mark) || return 1
	sent=$(sed -n 's/^\[ *\([0-9.]*\)\] evil: logout-ping: Logout Response sent.*/\1/p' \
		<<<"$log" | tail -n 1)
	failed=$(sed -n 's/^\[ *\([0-9.]*\)\] riser: connection to .* failed: Logout Response without a logout.*/\1/p' \
		<<<"$log" | head -n 1)
	echo "Logout Response sent at ${sent:-?} s, riser's failure at ${failed:-?} s"
	[ -n "$sent" ] && [ -n "$failed" ] &&
		awk -v a="$sent" -v b="$failed" -v s="$1" 'BEGIN { exit !(b - a <= s && b >= a) }'
}

# evil_late_denied LOG KIND: as evil_late, or the late KIND was not tried
# (the target saw the connection close first, or its QP was in error
# already), or was never acknowledged (riser's QP, in error, dropped it):
# riser failed the connection at the bad PDU, and with the connection's
# one QP in error no key of its PD reaches memory. A late KIND that
# completed fails.
evil_late_denied() {
	_wait_for 30 evil_says "$1" "^evil: late $2 (completed|refused|not)"
	_said_match "^evil: late"
	evil_says "$1" "^evil: late $2 (refused \(status|not tried: |not acknowledged in 2 s)"
}

# node_setup IQN: a node record with short task-management timeouts, so a
# silent target escalates quickly, a replacement timeout long enough to
# ride out each failure, login retries for the login modes, and the
# initiator's pings (NOP-Out) after 5 s idle, given 5 s to be answered.
# One iscsiadm for all seven (it takes several -n/-v pairs in one update;
# an exec costs about 0.7 s under TCG), and the record read back.
node_setup() {
	local rec
	_iscsi_node "$1" "$IP" iser &&
		iscsiadm -m node -T "$1" -p "$IP:$LIO_PORT" -I iser -o update \
			-n node.session.timeo.replacement_timeout -v 60 \
			-n node.session.err_timeo.abort_timeout -v 5 \
			-n node.session.err_timeo.lu_reset_timeout -v 5 \
			-n node.session.err_timeo.tgt_reset_timeout -v 5 \
			-n node.session.initial_login_retry_max -v 8 \
			-n 'node.conn[0].timeo.noop_out_interval' -v 5 \
			-n 'node.conn[0].timeo.noop_out_timeout' -v 5 &&
		rec=$(iscsiadm -m node -T "$1" -p "$IP:$LIO_PORT" -I iser -o show) || return 1
	grep -cxE "node\.session\.timeo\.replacement_timeout = 60|node\.session\.err_timeo\.(abort|lu_reset|tgt_reset)_timeout = 5|node\.session\.initial_login_retry_max = 8|node\.conn\[0\]\.timeo\.noop_out_(interval|timeout) = 5" <<<"$rec" |
		grep -qx 7 || { echo "the node record does not hold the seven values"; return 1; }
}

# session_up IQN: the session's connection is logged in (again).
session_up() { iscsi_logged_in "$1"; }

# The random data the trigger's write and pattern_roundtrip write: 256 KiB
# slices of a 1 MiB pool made once (a dd from /dev/urandom for each would
# cost an exec), each slice 64 KiB on from the last (13 in turn), so that
# two writes in a row to the same place never carry the same data.
# next_pattern: the next slice's offset in the pool, in 64 KiB blocks, in
# PAT. pattern_is OFF: standard input holds the slice at OFF.
RAND=/tmp/rand
PAT_N=0
next_pattern() {
	PAT=$((PAT_N % 13))
	PAT_N=$((PAT_N + 1))
}
pattern_is() { cmp -n 262144 -i "0:$(($1 * 65536))" - "$RAND"; }
# pattern_roundtrip N: 256 KiB of random data written at MiB N and read
# back equal, both with O_DIRECT.
pattern_roundtrip() {
	next_pattern
	dd if="$RAND" of="$DEV" bs=64k skip="$PAT" count=4 seek=$((16 * $1)) oflag=direct \
		status=none &&
		dd if="$DEV" bs=64k skip=$((16 * $1)) count=4 iflag=direct status=none |
		pattern_is "$PAT"
}

# The modes a WRITE at the trigger block fires (the rest: a READ there).
write_mode() { case $1 in late-read | early-status) return 0 ;; esac; return 1; }

# The 256 KiB written by a WRITE trigger: iser-evil's stamp, each 512-byte
# block naming its own LBA, so that the target can tell the command's own
# bytes from any other memory in its Data-Outs.
STAMP=/tmp/stamp
STAMP_SEEK=$((TRIGGER_LBA * 512 / 262144))

# dd_rc NAME CMD...: CMD's status in $RC_NAME (124: stopped by timeout).
dd_rc() {
	local name=$1
	shift
	"$@"
	printf -v "RC_$name" %s $?
}

# trigger MODE: the READ that primes the target (block 32760), the command
# that makes it misbehave (a READ of block 32768, or for a WRITE mode the
# stamp written there), a second READ (inv-other answers the first when the
# second arrives) and a 256 KiB write beside them, each in 150 s at most.
# Their statuses go to RC_PRIME, RC_FIRE, RC_SIDE, RC_WRITE; the READ data
# to /tmp/got, in 4 KiB blocks: the priming READ's, the second READ's, the
# trigger READ's (compared with /tmp/exp at once: one cmp, not three). The
# write beside writes the pool's slice WPAT.
trigger() {
	local t
	rm -f /tmp/got
	dd_rc PRIME timeout 150 dd if="$DEV" of=/tmp/got bs=4k \
		skip=$((TRIGGER_LBA / 8 - 1)) count=1 iflag=direct conv=notrunc status=none
	if write_mode "$1"; then
		timeout 150 dd if="$STAMP" of="$DEV" bs=256k seek="$STAMP_SEEK" count=1 \
			oflag=direct status=none &
	else
		timeout 150 dd if="$DEV" of=/tmp/got bs=4k skip=$((TRIGGER_LBA / 8)) \
			count=1 seek=2 iflag=direct conv=notrunc status=none &
	fi
	t=$!
	sleep 1
	# inv-nomr answers a command without data (and without a
	# registration) when it comes, with the READ's rkey.
	RC_TUR=0
	if [ "$1" = inv-nomr ]; then
		timeout 150 sg_turs "$DEV"
		RC_TUR=$?
		echo "trigger $1: TEST UNIT READY status $RC_TUR"
	fi
	dd_rc SIDE timeout 150 dd if="$DEV" of=/tmp/got bs=4k skip=64 count=1 seek=1 \
		iflag=direct conv=notrunc status=none
	dd_rc WRITE timeout 150 dd if="$RAND" of="$DEV" bs=64k skip="$WPAT" count=4 seek=32 \
		oflag=direct status=none
	wait "$t"
	RC_FIRE=$?
	uptime_now
	echo "trigger $1: prime $RC_PRIME, fire $RC_FIRE, side $RC_SIDE, write $RC_WRITE; done at $UPTIME"
}

# no_hang: no trigger command was stopped by its 150 s timeout.
no_hang() {
	echo "statuses: prime $RC_PRIME fire $RC_FIRE side $RC_SIDE write $RC_WRITE"
	[ "$RC_PRIME" != 124 ] && [ "$RC_FIRE" != 124 ] && [ "$RC_SIDE" != 124 ] &&
		[ "$RC_WRITE" != 124 ]
}

# The disk's content where the trigger READs look: random blocks written
# before the first mode, kept in /tmp/exp in trigger's order (prime, side,
# trigger block; the trigger block changes when a WRITE mode writes the
# stamp there).
trigger_data_setup() {
	dd if=/dev/urandom of=/tmp/exp bs=4k count=3 status=none &&
		dd if=/tmp/exp of="$DEV" bs=4k count=1 seek=$((TRIGGER_LBA / 8 - 1)) oflag=direct \
			status=none &&
		dd if=/tmp/exp of="$DEV" bs=4k count=1 skip=1 seek=64 oflag=direct status=none &&
		dd if=/tmp/exp of="$DEV" bs=4k count=1 skip=2 seek=$((TRIGGER_LBA / 8)) oflag=direct \
			status=none
}

# reads_ok MODE: every trigger command succeeded (riser retries what a
# failed connection held: none may end in an error), and each READ returned
# what the disk holds.
reads_ok() {
	local rc=0
	[ "$RC_PRIME" = 0 ] && [ "$RC_FIRE" = 0 ] && [ "$RC_SIDE" = 0 ] &&
		[ "${RC_TUR:-0}" = 0 ] && [ "${RC_STALE:-0}" = 0 ] || {
		echo "a trigger command failed: prime $RC_PRIME fire $RC_FIRE side $RC_SIDE" \
			"TEST UNIT READY ${RC_TUR:-0} stale-held's READs ${RC_STALE:-0}"
		return 1
	}
	if write_mode "$1"; then
		# The priming and second READs' data (the trigger was a write).
		cmp -n 8192 /tmp/got /tmp/exp || rc=1
		# The trigger write, reported done, reads back equal.
		dd if="$DEV" bs=256k skip="$STAMP_SEEK" count=1 iflag=direct status=none |
			cmp - "$STAMP" || rc=1
		dd if="$STAMP" of=/tmp/exp bs=4k count=1 seek=2 conv=notrunc status=none
	else
		cmp -n 12288 /tmp/got /tmp/exp || rc=1
	fi
	return $rc
}

FAILED="riser: connection to $IP:3260 failed"
# riser's line when a connection is torn down (failed or not).
ENDED="riser: connection to $IP:3260: [0-9]+ registrations invalidated"
no_conn_error() { dmesg_lacks "riser: connection to|detected conn error"; }
# The write beside the trigger was reported done and reads back equal.
written_reads_back() {
	[ "$RC_WRITE" = 0 ] || { echo "the write beside the trigger failed: $RC_WRITE"; return 1; }
	dd if="$DEV" bs=64k skip=32 count=4 iflag=direct status=none | pattern_is "$WPAT"
}

# fio in rounds of 2 MiB (crc32c verified) until /tmp/fio.stop exists, so
# that it runs under every mode; a round that fails ends the loop. The
# modes fail the connection on purpose: only fio's own verdict counts
# (CONN_FAILURES_EXPECTED, lib.sh's conn_clean). Its writes are paced at
# 25 a second: enough to have writes in flight whenever a mode fires (and
# queued up to the depth of 4 while the connection is down), where at full
# speed under KASAN in TCG fio took most of a vCPU from the modes and made
# the guest the longest of make check. A round takes about 25 s (512
# writes, then their verification), which is also the most ffp_down waits
# for the last one to end.
fio_rounds() {
	local n=0
	while [ ! -e /tmp/fio.stop ]; do
		CONN_FAILURES_EXPECTED=1 fio_verify "$DEV" randwrite 4k 4 2M --offset=32M \
			--rate_iops=25 || {
			echo "fio round $((n + 1)) failed"
			return 1
		}
		n=$((n + 1))
		echo "fio round $n verified"
	done
	echo "fio rounds: $n"
	[ "$n" -gt 0 ]
}
fio_running() { kill -0 "$FIO" 2>/dev/null; }
# _tree PID...: PID and every process under it.
_tree() {
	local p
	for p in "$@"; do
		echo "$p"
		# shellcheck disable=SC2046
		_tree $(pgrep -P "$p")
	done
}
# fio_signal STOP|CONT: pause or resume the fio rounds (the loop and its
# fio processes), so that the connection goes idle and the initiator pings.
fio_signal() { kill -"$1" $(_tree "$FIO") 2>/dev/null; }

# ffp MODE [PATTERN]: trigger the next mode in the full-feature phase.
# PATTERN (an extended regex) must appear in dmesg after the trigger; with no
# PATTERN the connection must survive.
ffp() {
	local mode=$1 pattern=${2:-} t0 said
	dmesg_mark
	evil_mark ffp
	iscsid_mark
	next_pattern
	WPAT=$PAT
	# A silent target is found by the SCSI command timer, set short for
	# those modes only. Elsewhere the default 30 s: under KASAN in TCG the
	# 3000 NOP-Ins of flood-nop once held the triggering READ past 8 s,
	# the SCSI layer aborted it, and its response, legal but late, then
	# named a freed task (the connection failed as it must).
	case $mode in
	silent* | late-abort | tmf-spoof | tmf-dup | reject)
		echo 8 >"/sys/block/${DEV#/dev/}/device/timeout"
		;;
	*) echo 30 >"/sys/block/${DEV#/dev/}/device/timeout" ;;
	esac
	# logout-ping needs an idle connection: the initiator pings only after
	# 5 s without a PDU from the target.
	[ "$mode" != logout-ping ] || fio_signal STOP
	trigger "$mode" >>"$RISER_OUT/guest.log" 2>&1
	# stale-held fires when a command takes the held READ's task slot
	# on a later connection: up to 400 READs (4 KiB at 8 MiB, away from
	# the rest) go through all of libiscsi's slots (cmds_max 128 plus 15)
	# even if fio has stopped, 20 at a time until the target says it
	# answered one with the held READ's ITT (each READ costs about a
	# quarter of a second here, and the slot comes round within the
	# first 150 or so: the 400 in one go took 125 s).
	RC_STALE=0
	if [ "$mode" = stale-held ]; then
		local reads=0
		while [ "$reads" -lt 400 ]; do
			timeout 300 dd if="$DEV" of=/dev/null bs=4k skip=$((2048 + reads)) count=20 \
				iflag=direct status=none
			RC_STALE=$?
			reads=$((reads + 20))
			[ "$RC_STALE" = 0 ] || break
			! evil_says ffp "^evil: stale-held: response for held itt" || break
		done
		echo "stale-held: $reads READs to reuse the slot: status $RC_STALE"
	fi >>"$RISER_OUT/guest.log" 2>&1
	# (logout-ping fires on the first ping: 5 s after the trigger went
	# idle and up to 5 s more, seen 15 s; under TCG more.)
	check "$mode: the target misbehaved" evil_fired ffp "$mode" 60
	t0=$SECONDS
	check "$mode: no trigger command hung" no_hang
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
			_wait_for 90 evil_logged ffp "^evil: pings answered 600\$"
		;;
	silent | reject)
		check "$mode: the timed-out READ was aborted (ABORT TASK answered)" evil_tmf ffp "1$"
		;;
	silent-all)
		check "$mode: abort (ABORT TASK) was tried and refused" evil_tmf ffp "1 rejected"
		check "$mode: then an LU reset (LOGICAL UNIT RESET), never answered" evil_tmf ffp "5 ignored"
		;;
	silent-redo)
		check "$mode: abort (ABORT TASK) was tried and refused" evil_tmf ffp "1 rejected"
		check "$mode: the READ, sent again after the session reset, was held and then served" \
			_wait_for 60 evil_says ffp "^evil: silent-redo: retried READ itt 0x[0-9a-f]+ served after"
		;;
	late-write)
		# The response came by plain SEND (no remote invalidation):
		# the READ's rkey must be invalid once the READ completed.
		check "$mode: the READ's rkey, 500 ms after its response, is refused" evil_late ffp write
		;;
	late-read)
		check "$mode: the WRITE's STag, 500 ms after its response, is refused" evil_late ffp read
		;;
	late-abort)
		check "$mode: the timed-out READ was aborted (ABORT TASK answered)" evil_tmf ffp "1$"
		check "$mode: its rkey, 500 ms after the abort's answer, is refused" evil_late ffp write
		;;
	tmf-spoof)
		# The READ's ABORT TASK answered with the ITT of the initiator's
		# ping (sent at the READ's second timeout, held unanswered):
		# libiscsi would take it for the TMF's answer.
		check "$mode: the timed-out READ was aborted (ABORT TASK answered with the ping's ITT)" \
			evil_says ffp "^evil: tmf-spoof: ABORT TASK itt 0x[0-9a-f]+ answered with the ping's itt"
		check "$mode: its rkey, 500 ms after the spoofed answer, is refused" \
			evil_late_denied ffp write
		;;
	tmf-dup)
		check "$mode: the timed-out READ was aborted (ABORT TASK answered twice)" \
			evil_says ffp "^evil: tmf-dup: ABORT TASK itt 0x[0-9a-f]+ answered twice"
		check "$mode: its rkey, 500 ms after the answers, is refused" \
			evil_late_denied ffp write
		;;
	itt-junk)
		# The READ's data, then its response by plain SEND with junk in
		# ITT bits 13-23: libiscsi would complete the READ on it.
		check "$mode: the READ's rkey, 500 ms after the junk-ITT response, is refused" \
			evil_late_denied ffp write
		;;
	logout-ping)
		# A Logout Response that answers a ping is no logout: riser
		# fails the connection on it (the reason is EXPECT's), at once,
		# not after the next ping times out (5 s idle + 5 s). Timed
		# from the target's send to riser's line, both in the kernel
		# log.
		check "$mode: riser failed the connection within 2 s of the Logout Response" \
			logout_failed_within 2
		;;
	async-*)
		# iscsid acts on the event (libiscsi passes Async Messages up):
		# 1, logout within Parameter3 s: it logs out (the target
		# answers) and logs in again; 2 and 3, the target drops the
		# connection (or all) and iscsid waits Time2Wait (Parameter2:
		# 2 s, or 20 s for all, which a reconnect under TCG, 5 to 13 s,
		# does not take by itself) before it reconnects; 4,
		# renegotiation: iscsid drops the connection, logs in again.
		case $mode in
		async-logout) said="Target requests logout within 2 seconds" ;;
		async-dropconn) said="Target dropping 0, reconnect min 2 max 30" ;;
		async-dropall) said="Target dropping all connections, reconnect min 20 max 30" ;;
		*) said="Received async event param negotiation" ;;
		esac
		check "$mode: iscsid logged: $said" _wait_for 30 iscsid_says "$said"
		[ "$mode" != async-logout ] ||
			check "$mode: the initiator sent a Logout Request, answered" \
				_wait_for 30 evil_says ffp "^evil: Logout Request itt"
		check "$mode: the session logged in on a new connection" \
			_wait_for 60 evil_says ffp "^evil: connection accepted"
		case $mode in
		async-dropconn) ;;
		async-dropall)
			check "$mode: iscsid reconnected no sooner than Time2Wait (20 s) after the hang-up" \
				reconnect_after 20
			;;
		*)
			check "$mode: no connection failure logged (iscsid ended it)" \
				dmesg_lacks "$FAILED|detected conn error"
			;;
		esac
		;;
	big-sense | big-rsp)
		# UNIT ATTENTION (power on or reset): the SCSI layer retries.
		check "$mode: the READ answered with 252 bytes of sense came again" \
			_wait_for 30 evil_says ffp "^evil: retried READ of block $TRIGGER_LBA"
		;;
	stale-held)
		check "$mode: riser refused the response of the old session age, naming its ITT" \
			stale_refused
		;;
	esac
	{ _said "$RISER_OUT/ffp.log" "$EVIL_MARK" &&
		_said_match "^evil: (nop-data|stale-held|inv-nomr|tmf-spoof|tmf-dup|itt-junk|Logout Request|disconnecting)"; } \
		>>"$RISER_OUT/guest.log"
	check "$mode: session logged in (again)" _wait_for 120 session_up "$IQN"
	echo "$mode: logged in $((SECONDS - t0)) s after the target fired" >>"$RISER_OUT/guest.log"
	[ "$mode" != logout-ping ] || fio_signal CONT
	check "$mode: every trigger command succeeded, each READ returned the disk's data" \
		reads_ok "$mode"
	check "$mode: the write beside it was reported done and reads back equal" written_reads_back
	check "$mode: the disk reads and writes" pattern_roundtrip 2
	check "$mode: fio still verifying underneath" fio_running
}

# stale_refused: riser's line for stale-held's response, which names the
# held READ's ITT (the old session age): riser refuses it before libiscsi
# would look at it.
stale_refused() {
	local itt
	itt=$(evil_since ffp | sed -n 's/^evil: stale-held: response for held itt \(0x[0-9a-f]*\) .*/\1/p' |
		tail -n 1)
	[ -n "$itt" ] || { echo "the target sent no stale response"; return 1; }
	printf -v itt '%#x' "$itt"
	echo "the target answered ITT $itt of the old session age"
	dmesg_has "riser: target sent a SCSI Response for ITT $itt, which no command posted on this connection carries"
}

# The number of checks ffp MODE runs.
ffp_checks() {
	case $1 in
	async-logout) echo 12 ;;
	async-dropall | async-negotiate) echo 11 ;;
	silent-all | silent-redo | late-abort | tmf-spoof | tmf-dup | async-dropconn) echo 10 ;;
	ping | silent | reject | late-write | late-read | logout-ping | itt-junk) echo 9 ;;
	big-sense | big-rsp | stale-held) echo 9 ;;
	*) echo 8 ;;
	esac
}

# Each full-feature mode and what dmesg must show after it ("" for a
# connection that must survive).
declare -A EXPECT=(
	[short]="$FAILED: malformed PDU"
	[dsl-long]="$FAILED: malformed PDU"
	[overrun]="$FAILED: receive error"
	# A response no command of the connection carries: riser refuses it
	# (libiscsi would take one for a task allocated and not yet sent).
	[unknown-itt]="$FAILED: SCSI Response for no command posted"
	# A second response for a command: riser refuses it (libiscsi, which
	# frees the task only when riser lets it go, would take it as a first).
	[stale-itt]="$FAILED: second response to a command"
	[inv-other]="$FAILED: foreign remote invalidation"
	[inv-bad]="$FAILED: (receive error|send error|foreign remote invalidation)"
	[bad-version]="$FAILED: malformed PDU"
	[bad-flags]="$FAILED: malformed PDU"
	[ahs]="$FAILED: malformed PDU"
	[bad-opcode]="$FAILED: malformed PDU"
	[data-in]="$FAILED: Data-In or R2T over iSER"
	[r2t]="$FAILED: Data-In or R2T over iSER"
	# A Reject of the READ's command: libiscsi logs it, and the READ,
	# never answered, times out and is aborted and retried.
	[reject]="pdu \\(op 0x1 itt 0x[0-9a-f]+\\) rejected. Reason code 0x4"
	[drop]="$FAILED: disconnected by the target"
	[flood-nop]=""
	[ping]=""
	[flood-async]="$FAILED: async message flood"
	[silent]=""
	[silent-all]="detected conn error"
	[silent-redo]="detected conn error"
	# A refused RDMA access puts both QPs in error: riser's connection
	# fails (how it names it depends on which completion it sees first).
	[late-write]="$FAILED"
	[late-read]="$FAILED"
	[late-abort]="$FAILED"
	[logout-ping]="$FAILED: Logout Response without a logout"
	[logout-unprompted]="$FAILED: Logout Response without a logout"
	# Async Messages go up to iscsid (see ffp): after 1 and 4 iscsid
	# ends the connection (riser's teardown line, no failure: checked in
	# ffp), after 2 and 3 the target hangs up.
	[async-logout]="$ENDED"
	[async-dropconn]="$FAILED: disconnected by the target"
	[async-dropall]="$FAILED: disconnected by the target"
	[async-negotiate]="$ENDED"
	# libiscsi takes no data on a NOP-In with the reserved ITT (a ping,
	# or not): ISCSI_ERR_PROTO, whatever its size. riser received both.
	[nop-data]="$FAILED: libiscsi rejected a PDU"
	[big-nop]="$FAILED: libiscsi rejected a PDU"
	# A SCSI Response of 254 and 8192 bytes (the declared limit):
	# CHECK CONDITION with 252 bytes of sense, taken.
	[big-sense]=""
	[big-rsp]=""
	[inv-nonresp]="$FAILED: foreign remote invalidation"
	[inv-nomr]="$FAILED: foreign remote invalidation"
	[stale-held]="$FAILED: SCSI Response for no command posted"
	[ff-login]="$FAILED: second full-feature Login Response"
	# libiscsi takes a TMF Response for any live management task (a
	# ping's too) and once more after the first: riser passes on only
	# the one answer to the TMF it sent, and fails the connection.
	[tmf-spoof]="$FAILED: TMF Response without a TMF"
	[tmf-dup]="$FAILED: TMF Response without a TMF"
	# libiscsi reads only ITT bits 0-12 and 28-31: riser compares all 32.
	[itt-junk]="$FAILED: SCSI Response with a corrupt ITT"
	# A broken target, by hand only (RISER_EVIL_MODES): the trigger READ
	# gets the next block's data, or the write beside is answered good
	# and never read. The checks of the READ data and of the write must
	# fail (shown 2026-11-24). bad-status: the trigger READ answered
	# CHECK CONDITION, MEDIUM ERROR; the check of the trigger commands'
	# statuses must fail.
	[wrong-data]=""
	[lost-write]=""
	[bad-status]=""
)
ALL_FFP="short dsl-long overrun unknown-itt stale-itt inv-other inv-bad bad-version bad-flags ahs bad-opcode data-in r2t reject drop flood-nop ping flood-async silent silent-all late-write late-read late-abort tmf-spoof tmf-dup itt-junk logout-ping logout-unprompted async-logout async-dropconn async-dropall async-negotiate nop-data big-nop big-sense big-rsp inv-nonresp inv-nomr stale-held ff-login"
ALL_LOGIN="login-long login-dsl login-bad"
ALL_UNSOL="early-status"
ALL_CM="cm-rsvd cm-short cm-long cm-noinv"
ALL_SMALL="burst-max burst-edge burst-min"
ALL_REG0="inv-global"
ALL_HOLD="silent-redo"
ALL_EARLY="early-rsp-reconnect early-rsp stale-key posting-rsp"
# RISER_EVIL_MODES picks some modes of any phase, for debugging by hand; a
# phase with none of them is left out.
FFP_MODES=$ALL_FFP LOGIN_MODES=$ALL_LOGIN UNSOL_MODES=$ALL_UNSOL
# burst-edge (the target's burst-max, offered bursts of 1 MiB + 1 KiB) takes
# the Data-Out pool's edge without burst-max's fio runs. burst-max is left
# out unless picked (RISER_EVIL_MODES=burst-max or
# small-pdu): in two guest runs on 2 vCPUs its fio runs stalled, no PDU from
# the target for 10 s, until libiscsi's ping timed out and failed the
# connection (whose fault is not known yet: the target's state dump, SIGUSR1,
# is in small.log).
SMALL_DEFAULT="burst-edge burst-min"
CM_MODES=$ALL_CM SMALL_MODES=$SMALL_DEFAULT REG0_MODES=$ALL_REG0 HOLD_MODES=$ALL_HOLD
EARLY_MODES=$ALL_EARLY
UNKNOWN_MODES=
# The full-feature modes in which riser handles a command's end on one CPU
# while the other may still be sending for it or reusing its task slot:
# the task-management ones (the SCSI timer's ABORT TASK and LU reset, the
# TMF Response held until the READ's key is gone, spoofed and doubled
# answers), the late and junk-ITT responses with the late RDMA access
# after them, a second response, a response held until its slot is in use
# again.
RACE_FFP="stale-itt reject silent silent-all late-write late-read late-abort tmf-spoof tmf-dup itt-junk stale-held"
RACE_MODES= SOLO_MODES=
for m in $ALL_FFP; do
	case " $RACE_FFP " in
	*" $m "*) RACE_MODES+="$m " ;;
	*) SOLO_MODES+="$m " ;;
	esac
done
# make check runs the hostile target in two guests: this script on two
# vCPUs, alone, with those modes, early status and the held release
# (silent-redo, with the test build), where a response handled on one CPU
# races the other's sends; tests/guest/hostile-session.sh
# (HOSTILE_PART=session) on one vCPU beside the other guests, with the
# other full-feature modes (bad PDUs, floods, pings, Async Messages, bad
# invalidations: each fails or keeps the connection on one PDU) and the
# phases that spoil a login, the CM exchange or the sizes a session
# negotiates. HOSTILE_PART=all runs both.
case ${HOSTILE_PART:-ffp} in
ffp) FFP_MODES=$RACE_MODES LOGIN_MODES= CM_MODES= SMALL_MODES= REG0_MODES= ;;
session) FFP_MODES=$SOLO_MODES UNSOL_MODES= HOLD_MODES= EARLY_MODES= ;;
all) ;;
*) UNKNOWN_MODES="HOSTILE_PART=$HOSTILE_PART " ;;
esac
if [ -n "${RISER_EVIL_MODES:-}" ]; then
	FFP_MODES= LOGIN_MODES= UNSOL_MODES= CM_MODES= SMALL_MODES= REG0_MODES= HOLD_MODES=
	EARLY_MODES=
	for m in $RISER_EVIL_MODES; do
		# A phase of its own by its name (every mode of it), or a mode of it.
		case $m in
		cm-garbage) CM_MODES+="$ALL_CM " && continue ;;
		small-pdu) SMALL_MODES+="$ALL_SMALL " && continue ;;
		always_register=0) REG0_MODES+="$ALL_REG0 " && continue ;;
		release-hold) HOLD_MODES+="$ALL_HOLD " && continue ;;
		early-rsp-all) EARLY_MODES+="$ALL_EARLY " && continue ;;
		esac
		case " $ALL_CM " in *" $m "*) CM_MODES+="$m " && continue ;; esac
		case " $ALL_SMALL " in *" $m "*) SMALL_MODES+="$m " && continue ;; esac
		case " $ALL_REG0 " in *" $m "*) REG0_MODES+="$m " && continue ;; esac
		case " $ALL_HOLD " in *" $m "*) HOLD_MODES+="$m " && continue ;; esac
		case " $ALL_EARLY " in *" $m "*) EARLY_MODES+="$m " && continue ;; esac
		case " $ALL_FFP wrong-data lost-write bad-status " in *" $m "*) FFP_MODES+="$m " && continue ;; esac
		case " $ALL_LOGIN " in *" $m "*) LOGIN_MODES+="$m " && continue ;; esac
		case " $ALL_UNSOL " in *" $m "*) UNSOL_MODES+="$m " && continue ;; esac
		UNKNOWN_MODES+="$m "
	done
fi

# The plan: every check below, counted from the modes chosen.
N=10
if [ -n "$FFP_MODES" ]; then
	N=$((N + 7))
	for m in $FFP_MODES; do N=$((N + $(ffp_checks "$m"))); done
fi
[ -z "$LOGIN_MODES" ] || N=$((N + 5 + 4 * $(wc -w <<<"$LOGIN_MODES")))
[ -z "$UNSOL_MODES" ] || N=$((N + 15))
[ -z "$CM_MODES" ] || N=$((N + 2 + 6 * $(wc -w <<<"$CM_MODES")))
case " $CM_MODES " in *" cm-noinv "*) N=$((N + 2)) ;; esac
if [ -n "$SMALL_MODES" ]; then
	N=$((N + 6))
	case " $SMALL_MODES " in *" burst-max "*) N=$((N + 15)) ;; esac
	case " $SMALL_MODES " in *" burst-min "*) N=$((N + 10)) ;; esac
	case " $SMALL_MODES " in *" burst-edge "*) N=$((N + 11)) ;; esac
fi
[ -z "$REG0_MODES" ] || N=$((N + 22))
[ -z "$HOLD_MODES" ] || N=$((N + 15 + $(ffp_checks silent-redo)))
[ -z "$EARLY_MODES" ] || N=$((N + 11 + 6 * $(wc -w <<<"$EARLY_MODES")))
if declare -F plan >/dev/null; then
	plan "$N"
fi

check "no unknown mode in RISER_EVIL_MODES" test -z "$UNKNOWN_MODES"
check "hostile target binary built" test -x "$EVIL"
check "RDMA device (rxe) created" setup_rdma rxe "$IP"
check "riser's dependencies and user verbs load" modprobe -a ib_core rdma_cm ib_uverbs rdma_ucm \
	scsi_transport_iscsi libiscsi
check "insmod riser.ko" insmod "$KO"
check "kmemleak cleared" kmemleak_clear
check "iscsid started" iscsi_start
"$EVIL" -P "$TRIGGER_LBA:512" >"$STAMP"
dd if=/dev/urandom of="$RAND" bs=64k count=16 status=none
STAMP_EARLY=/tmp/stamp-early
"$EVIL" -P "$TRIGGER_LBA:1024" >"$STAMP_EARLY"

# ffp_up LABEL NODE_FN LOG: the session to the full-feature target (IQN),
# its node record made by NODE_FN, the trigger blocks' data written, and
# fio's rounds started underneath (FIO, output in LOG). 4 checks.
ffp_up() {
	check "node record$1" "$2" "$IQN"
	check "login" iscsi_login "$IQN" "$IP"
	DEV=$(iscsi_dev "$IQN" 0 60) || DEV=/dev/null
	check "disk $DEV appears" test -b "$DEV"
	check "known data where the trigger READs look" trigger_data_setup
	rm -f /tmp/fio.stop
	fio_rounds >"$3" 2>&1 &
	FIO=$!
}
# ffp_down LOG WHAT: fio's rounds stopped and checked (their output from
# LOG into guest.log), then the logout. 2 checks.
ffp_down() {
	touch /tmp/fio.stop
	wait "$FIO"
	FIO_RC=$?
	cat "$1" >>"$RISER_OUT/guest.log"
	check "fio wrote and verified 2 MiB rounds through $2" test "$FIO_RC" = 0
	check "logout" iscsi_logout "$IQN" "$IP"
}

if [ -n "$FFP_MODES" ]; then
	IQN=iqn.2026-11.org.riser:evil
	FFP_MODES=$(echo $FFP_MODES)
	check "hostile target up (full-feature modes)" evil_start ffp "${FFP_MODES// /,}"
	ffp_up "" node_setup "$RISER_OUT/fio-hostile.log"

	for m in $FFP_MODES; do
		ffp "$m" "${EXPECT[$m]}"
	done

	ffp_down "$RISER_OUT/fio-hostile.log" "all of it (no error, no corrupt block)"
	evil_stop
fi

# The login modes: each spoils one login, which must fail cleanly (riser's
# log line, no session left behind); then a clean login works. Each is its
# own iscsiadm login with no retry: after a connection failure in the middle
# of a login, the kernel's iSCSI class refuses iscsid's retries on the same
# connection (ENOTCONN: the connection is marked for cleanup), with the C
# ib_iser exactly as with riser (tried against this target).
declare -A LOGIN_EXPECT=(
	[login-long]="riser: receive failed"
	[login-dsl]="riser: bad PDU from the target .*DataLength"
	# A SCSI Response (opcode 0x21) for ITT 0 answering a Login Request: no
	# command was posted on the connection, so riser refuses it before
	# libiscsi sees it.
	[login-bad]="$FAILED: SCSI Response for no command posted"
)
if [ -n "$LOGIN_MODES" ]; then
	LOGIN_MODES=$(echo $LOGIN_MODES)
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
fi

# early-status: a target that declares MaxRecvDataSegmentLength=1024 and
# takes InitialR2T=No, ImmediateData=Yes, FirstBurstLength=256 KiB, so a
# 512 KiB WRITE comes as 1 KiB of immediate data and 255 Data-Outs of
# 1 KiB, all unasked, and an rkey for the RDMA READ of the rest. It answers
# the stamp's WRITE with CHECK CONDITION as soon as the command arrives,
# without invalidating the rkey; every Data-Out that still comes for it
# must carry the stamp (the command's own bytes), never other memory, and
# the Data-Outs still to go must not fail on riser's own invalidation of
# the registration they are read through (on two vCPUs the response is
# handled while the other CPU is still posting them).
negotiated() {
	local out
	out=$(iscsiadm -m session -P 3) || return 1
	grep -E "InitialR2T|ImmediateData|FirstBurstLength|MaxXmitDataSegmentLength" <<<"$out"
	grep -q "InitialR2T: No" <<<"$out" && grep -q "ImmediateData: Yes" <<<"$out" &&
		grep -q "FirstBurstLength: 262144" <<<"$out" &&
		grep -q "MaxXmitDataSegmentLength: 1024" <<<"$out"
}
# early_write: the stamp's WRITE, answered with CHECK CONDITION (ILLEGAL
# REQUEST): it must fail, and not by hanging.
early_write() {
	local rc
	timeout 150 dd if="$DEV" of=/dev/null bs=4k skip=$((TRIGGER_LBA / 8 - 1)) count=1 \
		iflag=direct status=none || return 1
	timeout 150 dd if="$STAMP_EARLY" of="$DEV" bs=512k seek=$((TRIGGER_LBA * 512 / 524288)) \
		count=1 oflag=direct status=none
	rc=$?
	echo "the WRITE answered early ended with status $rc"
	[ "$rc" != 0 ] && [ "$rc" != 124 ]
}
no_foreign_data() {
	local log=$RISER_OUT/unsol.log
	# The Data-Outs come after the status, and after dd saw it: wait for
	# the last one (or 30 s, should the initiator stop sending).
	local n rc=0
	_wait_for 30 evil_logged unsol "^evil: Data-Out after status .* final\$" ||
		{ echo "no final Data-Out within 30 s"; rc=1; }
	nap 2
	n=$(grep -c "^evil: Data-Out after status" "$log")
	echo "Data-Outs after the status: $n"
	# Passing on none would show nothing: the Data-Outs must have come.
	[ "$n" -gt 0 ] || rc=1
	! grep "^evil: foreign data" "$log" || rc=1
	return $rc
}
if [ -n "$UNSOL_MODES" ]; then
	UNSOL_MODES=$(echo $UNSOL_MODES)
	IQN=iqn.2026-11.org.riser:evil-unsol
	check "hostile target up (unsolicited data, 1 KiB PDUs)" \
		evil_start unsol "${UNSOL_MODES// /,}" -u 1024
	check "node record" node_setup "$IQN"
	check "login" iscsi_login "$IQN" "$IP"
	DEV=$(iscsi_dev "$IQN" 0 60) || DEV=/dev/null
	check "disk $DEV appears" test -b "$DEV"
	check "negotiated: InitialR2T No, ImmediateData Yes, first burst 256 KiB, 1 KiB PDUs" \
		negotiated
	check "fio verifies through 1 KiB Data-Outs (4k blocks)" \
		fio_verify "$DEV" randrw 4k 4 1M
	check "fio verifies through 1 KiB Data-Outs and RDMA READs past the first burst" \
		fio_verify "$DEV" write 1m 2 4M
	dmesg_mark
	check "early-status: the WRITE answered with CHECK CONDITION failed (no hang)" early_write
	check "early-status: the target misbehaved" evil_fired unsol early-status
	check "early-status: every Data-Out it still got carried the command's own bytes" \
		no_foreign_data
	check "early-status: the connection survived" no_conn_error
	check "early-status: session logged in" session_up "$IQN"
	check "early-status: the disk reads and writes" pattern_roundtrip 2
	check "logout" iscsi_logout "$IQN" "$IP"
	check "early-status: no Data-Out for an ITT the target never had" \
		eval '! grep "^evil: Data-Out for an unknown" "$RISER_OUT/unsol.log"'
	evil_stop
fi

# no_session_of IQN: no session to IQN is left.
no_session_of() { ! iscsi_session "$1" >/dev/null; }

# cm-garbage: a target whose CM accept (REP) carries a spoilt iSER CM header
# (RFC 7145): cm-rsvd sets every reserved bit and byte (with Z, without I),
# cm-short sends two bytes of the four (the CM pads private data with zeros
# to its fixed 196 bytes, so riser sees 80 5a 00 00), cm-long the most a
# REP carries (196 bytes: a header and garbage; more is refused by the CM
# on the target's side and never reaches an initiator). riser reads the
# target's header only for a debug line (it never uses ZBVA, and whether
# it takes Send with Invalidate is its own choice), so each login must
# succeed and the disk work; a login that failed would have to fail with
# riser's reason and leave no session (initial_login_retry_max 0: a retry
# would get a clean accept and hide it).
# cm-noinv: the target's CM accept says it will not send with invalidate
# (the I bit); it answers READs by plain SEND as it said (riser
# invalidates every key itself), but the trigger READ (block TRIGGER_LBA)
# by SEND_WITH_INV of its STag. As ib_iser does, riser holds the target to
# its word: that invalidation fails the connection, the READ is retried on
# the next connection (whose accept is plain) and returns. 2 checks here.
cm_noinv_read() {
	local rc
	timeout 150 dd if="$DEV" of=/dev/null bs=4k skip=$((TRIGGER_LBA / 8)) count=1 \
		iflag=direct status=none
	rc=$?
	check "cm-noinv: riser refused the invalidation the target's accept ruled out, and failed the connection" \
		_wait_for 30 dmesg_has "riser: target invalidated rkey 0x[0-9a-f]+ with a SCSI Response for ITT 0x[0-9a-f]+, though Send with Invalidate was not agreed"
	check "cm-noinv: ... the READ returned once the session was back (status $rc)" \
		eval '[ "$rc" = 0 ] && dmesg_has "$FAILED: foreign remote invalidation"'
}
if [ -n "$CM_MODES" ]; then
	CM_MODES=$(echo $CM_MODES)
	IQN=iqn.2026-11.org.riser:evil-cm
	check "hostile target up (CM private data)" evil_start cm "${CM_MODES// /,}"
	check "node record" node_setup "$IQN"
	iscsiadm -m node -T "$IQN" -p "$IP:$LIO_PORT" -I iser -o update \
		-n node.session.initial_login_retry_max -v 0 >>"$RISER_OUT/guest.log" 2>&1
	for m in $CM_MODES; do
		dmesg_mark
		check "$m: login through the spoilt CM header" iscsi_login "$IQN" "$IP"
		check "$m: the target misbehaved" evil_fired cm "$m"
		DEV=$(iscsi_dev "$IQN" 0 60) || DEV=/dev/null
		if [ "$m" = cm-noinv ]; then
			cm_noinv_read
			check "$m: session logged in again" _wait_for 120 session_up "$IQN"
			DEV=$(iscsi_dev "$IQN" 0 60) || DEV=/dev/null
			check "$m: fio verifies after the reconnect (4k, reads and writes)" \
				fio_verify "$DEV" randrw 4k 4 1M
			check "$m: logout" iscsi_logout "$IQN" "$IP"
			check "$m: no session left behind" _wait_for 30 no_session_of "$IQN"
			continue
		fi
		check "$m: fio verifies (4k, reads and writes)" fio_verify "$DEV" randrw 4k 4 1M
		check "$m: the connection survived" no_conn_error
		check "$m: logout" iscsi_logout "$IQN" "$IP"
		check "$m: no session left behind" _wait_for 30 no_session_of "$IQN"
	done
	evil_stop
fi

# riser_reload PARAM...: riser unloaded and loaded again with PARAM;
# kmemleak cleared after, as after the first insmod. iscsid is restarted
# around it, so that it finds the new transport. 4 checks. No kmemleak scan
# before the unload: an object riser leaked before it stays unreferenced
# after it, and the end-of-guest scan (save_dmesg) fails the guest on any
# object it finds (the clear paints only objects a scan already reported,
# and none has been), where the scan here would have named riser's frames
# only, in 15 to 20 s of a vCPU each time.
_rmmod_riser() {
	_wait_for 60 eval '[ "$(cat /sys/module/riser/refcnt)" = 0 ]' && bounded 120 rmmod riser
}
_insmod_riser() { insmod "$KO" "$@" && kmemleak_clear; }
riser_reload() {
	check "iscsid stopped (to reload riser)" iscsi_stop
	check "rmmod riser (to load it with: $*)" _rmmod_riser
	check "insmod riser.ko $*, kmemleak cleared" _insmod_riser "$@"
	check "iscsid started" iscsi_start
}

# small-pdu: a target that declares MaxRecvDataSegmentLength=512 (the least
# RFC 7143 allows) with InitialR2T=No, ImmediateData=Yes; burst-max answers
# FirstBurstLength and MaxBurstLength with the initiator's offer up to
# 2^24 - 1 (the node record offers that; iscsid sends it rounded down to a
# multiple of 4, 2^24 - 4), burst-min with 512 (the least).
# riser is loaded with max_sectors=4096 so that one command can need more
# unsolicited Data-Outs than its connection's pool (three per task of the
# session, made at bind: 384 for open-iscsi's cmds_max of 128): a WRITE of
# 192 KiB + 512 bytes is 512 bytes of immediate data and 384 Data-Outs,
# one block more needs 385. riser refuses such a
# command in init_task (libiscsi completes it with DID_ABORT, which the
# SCSI layer does not retry) and logs it; the connection lives on.
DO_POOL=384
BIG_OK=$(((DO_POOL + 1) * 512))
BIG_NO=$((BIG_OK + 512))
small_node() {
	local n=(iscsiadm -m node -T "$1" -p "$IP:$LIO_PORT" -I iser -o update)
	node_setup "$1" &&
		"${n[@]}" -n node.session.iscsi.InitialR2T -v No &&
		"${n[@]}" -n node.session.iscsi.ImmediateData -v Yes &&
		"${n[@]}" -n node.session.iscsi.FirstBurstLength -v 16777215 &&
		"${n[@]}" -n node.session.iscsi.MaxBurstLength -v 16777215 &&
		"${n[@]}" -n node.session.initial_login_retry_max -v 0
}
# small_negotiated FIRST MAX: the session runs with 512-byte PDUs to the
# target, unsolicited data, and those bursts.
small_negotiated() {
	local out
	out=$(iscsiadm -m session -P 3) || return 1
	grep -E "InitialR2T|ImmediateData|BurstLength|MaxXmitDataSegmentLength" <<<"$out"
	grep -q "InitialR2T: No" <<<"$out" && grep -q "ImmediateData: Yes" <<<"$out" &&
		grep -q "FirstBurstLength: $1\$" <<<"$out" &&
		grep -q "MaxBurstLength: $2\$" <<<"$out" &&
		grep -q "MaxXmitDataSegmentLength: 512\$" <<<"$out"
}
# evil_answered KEY: the value the small-pdu target last answered for KEY.
evil_answered() {
	grep "^evil: login: $1 offered" "$RISER_OUT/small.log" | tail -1 | awk '{ print $NF }'
}
# bytes_roundtrip BYTES MIB: BYTES of random data written in one O_DIRECT
# write at MiB MIB and read back equal in one read.
bytes_roundtrip() {
	head -c "$1" /dev/urandom >/tmp/big &&
		timeout 150 dd if=/tmp/big of="$DEV" bs="$1" count=1 seek=$(($2 << 20)) \
			oflag=direct,seek_bytes status=none &&
		timeout 150 dd if="$DEV" bs="$1" count=1 skip=$(($2 << 20)) \
			iflag=direct,skip_bytes status=none | cmp - /tmp/big
}
# write_refused BYTES: one O_DIRECT write of BYTES fails, and not by hanging.
write_refused() {
	local rc
	head -c "$1" /dev/urandom >/tmp/big
	timeout 150 dd if=/tmp/big of="$DEV" bs="$1" count=1 seek=$((12 << 20)) \
		oflag=direct,seek_bytes status=none
	rc=$?
	echo "the $1-byte write ended with status $rc"
	[ "$rc" != 0 ] && [ "$rc" != 124 ]
}
# refused_once BYTES NEED: riser logged the refusal of the BYTES write once
# (no retry, no requeue loop).
refused_once() {
	local log n
	log=$(dmesg_since_mark) || return 1
	n=$(grep -cE "riser: a $1-byte write needs $2 unsolicited Data-Outs, more than the connection's $DO_POOL" \
		<<<"$log")
	echo "riser's refusal logged $n times"
	[ "$n" = 1 ]
}
# read_2m: 2 MiB written as two 1 MiB writes, read back in one 2 MiB READ
# (the block layer cuts it at max_sectors_kb) equal.
read_2m() {
	head -c 2M /dev/urandom >/tmp/big &&
		dd if=/tmp/big of="$DEV" bs=1M count=2 seek=16 oflag=direct status=none &&
		timeout 150 dd if="$DEV" bs=2M count=1 skip=8 iflag=direct status=none |
		cmp - /tmp/big
}
small_max() {
	local fb
	dmesg_mark
	check "burst-max: login" iscsi_login "$IQN" "$IP"
	check "burst-max: the target misbehaved" evil_fired small burst-max
	DEV=$(iscsi_dev "$IQN" 0 60) || DEV=/dev/null
	check "burst-max: disk $DEV appears" test -b "$DEV"
	fb=$(evil_answered FirstBurstLength)
	echo "burst-max: FirstBurstLength answered $fb, MaxBurstLength $(evil_answered MaxBurstLength)" \
		>>"$RISER_OUT/guest.log"
	# iscsid offers the node record's 2^24 - 1 rounded down to a multiple
	# of 4: 2^24 - 4 is the most an open-iscsi initiator negotiates.
	check "burst-max: negotiated 512-byte PDUs, bursts of 2^24 - 4 (iscsid's most; answered $fb)" \
		small_negotiated 16777212 16777212
	check "burst-max: fio verifies (4k: 512 immediate, 7 Data-Outs)" \
		fio_verify "$DEV" randrw 4k 4 2M
	check "burst-max: fio verifies (128k writes: 512 immediate, 255 Data-Outs)" \
		fio_verify "$DEV" write 128k 2 4M
	check "burst-max: a $BIG_OK-byte write ($DO_POOL Data-Outs: the pool) reads back" \
		bytes_roundtrip "$BIG_OK" 8
	dmesg_mark
	check "burst-max: a $BIG_NO-byte write ($((DO_POOL + 1)) Data-Outs) fails, no hang" \
		write_refused "$BIG_NO"
	check "burst-max: riser logged the refusal once (no requeue, no retry)" \
		_wait_for 10 refused_once "$BIG_NO" $((DO_POOL + 1))
	check "burst-max: the connection survived" no_conn_error
	check "burst-max: a 2 MiB READ returns what was written" read_2m
	# (Once seen stalled here until a ping timeout failed the connection:
	# the target prints what it waits for 40 s in, SIGUSR1.)
	(sleep 40 && kill -USR1 "$EVIL_PID") 2>/dev/null &
	DUMP=$!
	check "burst-max: fio still verifies after" fio_verify "$DEV" randrw 4k 4 1M
	kill "$DUMP" 2>/dev/null
	wait "$DUMP" 2>/dev/null
	check "burst-max: the disk reads and writes" pattern_roundtrip 2
	check "burst-max: logout" iscsi_logout "$IQN" "$IP"
	check "burst-max: no session left behind" _wait_for 30 no_session_of "$IQN"
}
# burst-edge: the session negotiates bursts of 1 MiB + 1 KiB (offered by the
# node record, answered by the target's burst-max), so that both writes of
# the pool's edge go whole as immediate data and unsolicited Data-Outs: 512
# bytes and 384 Data-Outs (the pool) work, 512 and 385 are refused by
# riser's init_task at once, logged once, and the connection lives on.
EDGE_BURST=$((BIG_NO))
small_edge() {
	local n=(iscsiadm -m node -T "$IQN" -p "$IP:$LIO_PORT" -I iser -o update)
	dmesg_mark
	"${n[@]}" -n node.session.iscsi.FirstBurstLength -v "$EDGE_BURST" &&
		"${n[@]}" -n node.session.iscsi.MaxBurstLength -v "$EDGE_BURST"
	check "burst-edge: login (bursts of $EDGE_BURST offered)" iscsi_login "$IQN" "$IP"
	check "burst-edge: the target misbehaved (its burst-max)" evil_fired small burst-max
	DEV=$(iscsi_dev "$IQN" 0 60) || DEV=/dev/null
	check "burst-edge: disk $DEV appears" test -b "$DEV"
	check "burst-edge: negotiated 512-byte PDUs, bursts of $EDGE_BURST" \
		small_negotiated "$EDGE_BURST" "$EDGE_BURST"
	check "burst-edge: a $BIG_OK-byte write ($DO_POOL Data-Outs: the pool) reads back" \
		bytes_roundtrip "$BIG_OK" 8
	dmesg_mark
	check "burst-edge: a $BIG_NO-byte write ($((DO_POOL + 1)) Data-Outs) fails, no hang" \
		write_refused "$BIG_NO"
	check "burst-edge: riser logged the refusal once (no requeue, no retry)" \
		_wait_for 10 refused_once "$BIG_NO" $((DO_POOL + 1))
	check "burst-edge: the connection survived" no_conn_error
	check "burst-edge: the disk reads and writes" pattern_roundtrip 2
	check "burst-edge: logout" iscsi_logout "$IQN" "$IP"
	check "burst-edge: no session left behind" _wait_for 30 no_session_of "$IQN"
	"${n[@]}" -n node.session.iscsi.FirstBurstLength -v 16777215 &&
		"${n[@]}" -n node.session.iscsi.MaxBurstLength -v 16777215
}
# small_evil_modes: the target's modes for SMALL_MODES (burst-edge is its
# burst-max), comma-separated.
small_evil_modes() {
	local m out=
	for m in $SMALL_MODES; do
		[ "$m" != burst-edge ] || m=burst-max
		out+=${out:+,}$m
	done
	echo "$out"
}
small_min() {
	dmesg_mark
	check "burst-min: login" iscsi_login "$IQN" "$IP"
	check "burst-min: the target misbehaved" evil_fired small burst-min
	DEV=$(iscsi_dev "$IQN" 0 60) || DEV=/dev/null
	check "burst-min: disk $DEV appears" test -b "$DEV"
	check "burst-min: negotiated 512-byte PDUs, bursts of 512" small_negotiated 512 512
	check "burst-min: fio verifies (4k: 512 immediate, the rest by RDMA READ)" \
		fio_verify "$DEV" randrw 4k 4 2M
	check "burst-min: fio verifies (1 MiB writes)" fio_verify "$DEV" write 1m 2 4M
	check "burst-min: a 2 MiB write (no Data-Out at all) reads back" \
		bytes_roundtrip $((2 << 20)) 8
	check "burst-min: the connection survived" no_conn_error
	check "burst-min: logout" iscsi_logout "$IQN" "$IP"
	check "burst-min: no session left behind" _wait_for 30 no_session_of "$IQN"
}
if [ -n "$SMALL_MODES" ]; then
	SMALL_MODES=$(echo $SMALL_MODES)
	IQN=iqn.2026-11.org.riser:evil-small
	riser_reload max_sectors=4096
	check "hostile target up (512-byte PDUs, bursts at the extremes)" \
		evil_start small "$(small_evil_modes)" -u 512 -r 2048
	check "node record offering bursts of 2^24 - 1" small_node "$IQN"
	for m in $SMALL_MODES; do
		case $m in
		burst-max) small_max ;;
		burst-min) small_min ;;
		burst-edge) small_edge ;;
		esac
	done
	evil_stop
fi

# release-hold: the test build of riser, whose release can be held
# (fault_release_hold), against silent-redo: a target silent on the
# trigger READ and on every TMF, so that the SCSI layer's error handler
# ends in a session reset and sends the READ again once the session is
# back; the target holds that retry 5 s. The release is held from before
# the trigger until the retry comes (or 30 s). riser's stop waits for the
# release (nvme-rdma's order), so no retry can come while it is held: the
# hold runs out, the session comes back, the READ returns the disk's data.
# A stop that did not wait would let the session back in first, and the
# held release's drop of the old task would complete the retried READ
# before its data came (shown by hand with such a build: the READ's data
# check fails).
hold_node() {
	local n=(iscsiadm -m node -T "$1" -p "$IP:$LIO_PORT" -I iser -o update)
	node_setup "$1" &&
		"${n[@]}" -n node.session.timeo.replacement_timeout -v 120 &&
		"${n[@]}" -n node.session.cmds_max -v 16
}
# hold_tag_window: on the same session (two vCPUs, the test build, 4 KiB
# writes as immediate data, 16 commands), each of the next 1000 send
# completions waits 1 ms in riser's handler with its tag still held,
# before it takes what the tag kept (inject.sh does the same against LIO
# on one vCPU). Nothing may be lost or stall; a completion that took
# another post's reference would warn.
hold_tag_window() {
	local rc=0 left
	echo 1000 >"$P/fault_send_done_delay" || return 1
	fio_verify "$DEV" randrw 4k 16 8M --offset=48M || rc=1
	left=$(cat "$P/fault_send_done_delay")
	echo 0 >"$P/fault_send_done_delay"
	echo "delays left unused: $left"
	[ "$left" = 0 ] || { echo "fewer than 1000 send completions were delayed"; rc=1; }
	return $rc
}
# hold_opener: once the release is held (the session reset, 30 to 60 s
# after the trigger), ends the hold when the READ comes again, or 30 s on.
# (The kernel log is polled every 2 s: each look is a dmesg and a grep,
# about half a second of a vCPU, for the 30 to 60 s the hold takes to come.)
hold_opener() {
	local end=$((SECONDS + 240))
	until dmesg_has "riser: fault injected: release held" || ((SECONDS >= end)); do
		nap 2
	done
	_wait_for 30 evil_logged ffp "^evil: silent-redo: retried READ itt 0x[0-9a-f]+ held"
	echo 0 >"$P/fault_release_hold"
}
if [ -n "$HOLD_MODES" ]; then
	IQN=iqn.2026-11.org.riser:evil
	KO_USER=$KO
	KO=$FAULT_KO
	riser_reload
	KO=$KO_USER
	check "the test build's release hold is there, and off" \
		eval '[ "$(cat "$P/fault_release_hold")" = 0 ]'
	check "hostile target up (silent-redo, immediate data, 8 KiB PDUs)" \
		evil_start ffp silent-redo -u 8192
	ffp_up " (replacement timeout 120 s, 16 commands)" hold_node "$RISER_OUT/fio-hold.log"
	echo 1 >"$P/fault_release_hold"
	hold_opener &
	OPENER=$!
	ffp silent-redo "${EXPECT[silent-redo]}"
	wait "$OPENER"
	echo 0 >"$P/fault_release_hold"
	check "silent-redo: riser's release was held (test build)" \
		dmesg_has "riser: fault injected: release held"
	check "send completions delayed 1 ms before the handler, 4 KiB random I/O (immediate data), 16 commands: data verified" \
		hold_tag_window
	check "  the delays ran" dmesg_has "riser: fault injected: the last delayed send completion"
	ffp_down "$RISER_OUT/fio-hold.log" it
	evil_stop
fi

# early-rsp: the test build of riser, which holds the Nth SCSI command
# from now between libiscsi's allocation of its task and the publication
# of its slot word until a response with its ITT was handled, or 5 s
# (fault_hold_command), against a target that answers the command it
# predicts the initiator sends next before that command comes (libiscsi
# hands its task slots out in FIFO order, and the session age grows by one
# per reconnect): once after a reconnect (early-rsp-reconnect: the trigger
# READ is left unanswered and the target hangs up; 1 s after the next
# login it answers the READ's retry) and once mid-session (early-rsp: 1 s
# after it answered the trigger READ it answers the READ that follows).
# The hold is armed for the second command from the trigger READ on: the
# READ's retry, or the READ after it. libiscsi would complete the held
# command on that answer (it takes any task whose command is set and whose
# age matches): the READ reported done without its data, which the target
# then writes into memory the command no longer owns. riser hands libiscsi
# no SCSI Response its slot's word did not accept: it fails the
# connection, naming the ITT; the READ is retried and returns the disk's
# data. One command at a time (no fio, no pings), so that the target's
# guess holds.
# stale-key: as early-rsp, on a slot used on the connection before, and
# the answer invalidates the key the slot's last command gave
# (SEND_WITH_INV, which rxe takes for an MR whose registration is already
# invalid), while the command is held after its slot word, before its post
# (fault_hold_posting): riser compares the invalidation with the key the
# command will give, recorded in its slot before the word, never with what
# the MR held before, and fails the connection.
# posting-rsp: as early-rsp, the command held after its slot word, before
# its post (fault_hold_posting), and the answer plain: it arrives while the
# command's registration is not on the send queue yet (a LOCAL_INV posted
# then would go ahead of the REG_MR and be undone by it). riser keeps the
# answer waiting in the slot's word, as any response before its command's
# completions: no failure on it; once the post returned, the LOCAL_INV goes,
# and the READ completes with the target's status when the key is invalid.
# The target does not serve the READ when it comes: it writes to the READ's
# STag 500 ms later, which riser's device must refuse (the target hangs
# up then, and the session logs in again). The READ's block holds what the
# target never sent: only the trigger READ's data is compared.
EARLY_FAILED="$FAILED: SCSI Response for no command posted"
early_node() {
	local n=(iscsiadm -m node -T "$1" -p "$IP:$LIO_PORT" -I iser -o update)
	node_setup "$1" &&
		"${n[@]}" -n 'node.conn[0].timeo.noop_out_interval' -v 0 &&
		"${n[@]}" -n node.session.cmds_max -v 16
}
# early_data_setup: random data in the two 4 KiB blocks the trigger dd
# reads (the trigger READ and the one after it), kept in /tmp/early-exp.
early_data_setup() {
	dd if=/dev/urandom of=/tmp/early-exp bs=4k count=2 status=none &&
		dd if=/tmp/early-exp of="$DEV" bs=4k seek=$((TRIGGER_LBA / 8)) oflag=direct \
			status=none
}
# early_refused MODE: riser's failure line for the early response, naming
# the ITT the target answered (EARLY_ANSWERED, as early_met's check found
# it): for stale-key, the invalidation of a key that is not the one the
# command gives (its slot's MR held it before).
early_refused() {
	local itt
	[ -n "$EARLY_ANSWERED" ] || { echo "the target sent no early answer"; return 1; }
	printf -v itt '%#x' "$EARLY_ANSWERED"
	echo "the target answered ITT $itt early"
	if [ "$1" = posting-rsp ]; then
		early_waited "$itt"
	elif [ "$1" = stale-key ]; then
		_wait_for 30 dmesg_has "riser: target invalidated rkey 0x[0-9a-f]+ with a ScsiResponse for ITT $itt, not that task's key" &&
			dmesg_has "$FAILED: foreign remote invalidation"
	else
		_wait_for 30 dmesg_has "riser: target sent a SCSI Response for ITT $itt, which no command posted on this connection carries" &&
			dmesg_has "$EARLY_FAILED"
	fi
}
# early_waited ITT: riser failed nothing on the early answer for ITT (no
# LOCAL_INV refused, no word refusing it, no response refused), and the
# target's write to the READ's STag after the READ ended was refused.
early_waited() {
	_wait_for 30 evil_says early "^evil: late write (refused|completed)" || {
		echo "the target tried no late write"
		return 1
	}
	evil_says early "^evil: late write refused" || {
		echo "the late write to the READ's STag was not refused"
		return 1
	}
	dmesg_lacks "riser: (cannot invalidate MR|task slot [0-9]+: completion word refused|target sent a SCSI Response for ITT $1)|$FAILED: (cannot post a LOCAL_INV|command bookkeeping broken|SCSI Response)"
}
# early_try MODE KNOB WARM: one play of MODE: WARM READs one at a time
# (300 for early-rsp-reconnect and the modes after a reconnect, so that the
# target learns the slots' order; one for early-rsp, which comes a few
# commands after a reconnect, while the slot of the READ it answers has had
# no command on the connection: one that had would still hold that
# command's ITT, the same, and riser takes the early answer for a second
# response to it); the hold (KNOB) armed for the second command from now;
# the trigger READ and the one after it in one dd (its status in EARLY_RC).
early_try() {
	local m=$1 knob=$2 warm=$3
	dmesg_mark
	evil_mark early
	timeout 150 dd if="$DEV" of=/dev/null bs=4k skip=$((TRIGGER_LBA / 8 - warm)) count=$warm \
		iflag=direct status=none
	echo 2 >"$P/$knob"
	rm -f /tmp/early-got
	"${EARLY_ON[@]}" timeout 150 dd if="$DEV" of=/tmp/early-got bs=4k skip=$((TRIGGER_LBA / 8)) count=2 \
		iflag=direct status=none
	EARLY_RC=$?
	echo "$m: the trigger dd's status $EARLY_RC" >>"$RISER_OUT/guest.log"
	echo 0 >"$P/$knob"
}
# early_seen: since the marks, the target's early answer and the end of
# riser's hold are logged: the ITT answered in EARLY_ANSWERED, the one
# held in EARLY_HELD, EARLY_BY_RSP set when a response for it ended the
# hold (not its 5 s).
early_seen() {
	local l re_a='^evil: early-rsp: GOOD status sent for itt (0x[0-9a-f]+) '
	local re_h='riser: fault injected: command itt (0x[0-9a-f]+) held [0-9]+ ms, (until a SCSI Response|and no response)'
	EARLY_ANSWERED= EARLY_HELD= EARLY_BY_RSP=
	_said "$RISER_OUT/early.log" "$EVIL_MARK" || return 2
	for l in "${SAID[@]}"; do
		[[ $l =~ $re_a ]] && EARLY_ANSWERED=$((BASH_REMATCH[1]))
	done
	_dmesg_since_mark || return 2
	while IFS= read -r l; do
		[[ $l =~ $re_h ]] || continue
		EARLY_HELD=$((BASH_REMATCH[1]))
		[ "${BASH_REMATCH[2]}" = "until a SCSI Response" ] && EARLY_BY_RSP=1
	done <<<"$DMESG_SINCE"
	[ -n "$EARLY_ANSWERED" ] && [ -n "$EARLY_HELD" ]
}
# early_met: the target's early answer named the command riser held (its
# guess of the next ITT was right), and it came while the command was held.
early_met() {
	early_seen || {
		echo "the target's early answer or the end of riser's hold is not logged"
		return 1
	}
	if [ "$EARLY_ANSWERED" != "$EARLY_HELD" ]; then
		printf 'the target answered ITT %#x, riser held ITT %#x\n' "$EARLY_ANSWERED" "$EARLY_HELD"
		return 1
	fi
	[ -n "$EARLY_BY_RSP" ] && return 0
	printf 'the answer to ITT %#x came after the hold (5 s) let the command go\n' "$EARLY_HELD"
	return 1
}
# early_fire MODE: MODE played (early_try), again when the target's guess
# missed (its answer named another command than the one riser held, or came
# after the hold let the command go: the case under test did not happen;
# the target and the guest's scheduling decide, not riser), at most three
# times, each new play a retry (early-rsp-missed) of the re-armed target;
# then the checks (6) on the last play.
early_fire() {
	local m=$1 warm=1 knob=fault_hold_command try=1 why
	[ "$m" = early-rsp ] || warm=300
	case $m in stale-key | posting-rsp) knob=fault_hold_posting ;; esac
	while :; do
		early_try "$m" "$knob" "$warm"
		_wait_for 60 early_seen
		why=$(early_met) && break
		evil_says early "^evil: fired $m\$" && [ $try -lt 3 ] || break
		retried early-rsp-missed "$m, play $try: $why"
		try=$((try + 1))
		_wait_for 120 session_up "$IQN" || break
		evil_mark early
		kill -USR2 "$EVIL_PID" && _wait_for 30 evil_says early "^evil: re-armed $m\$" || break
	done
	evil_since early >>"$RISER_OUT/guest.log"
	check "$m: the target misbehaved" evil_fired early "$m" 60
	check "$m: the target's early answer named the command riser held (its ITT guessed)" \
		early_met
	check "$m: riser held the command ($knob) until the answer was handled (test build)" \
		dmesg_has "riser: fault injected: command itt 0x[0-9a-f]+ held [0-9]+ ms, until a SCSI Response for it was handled"
	if [ "$m" = posting-rsp ]; then
		check "$m: riser kept the early answer in the slot's word until the post returned, then ended the key" \
			early_refused "$m"
		check "$m: session logged in again" _wait_for 120 session_up "$IQN"
		check "$m: both READs succeeded, the first with the disk's data" \
			eval '[ "$EARLY_RC" = 0 ] && cmp -n 4096 /tmp/early-got /tmp/early-exp'
		return
	fi
	check "$m: riser refused the early answer, naming its ITT, and failed the connection" \
		early_refused "$m" "$m"
	check "$m: session logged in again" _wait_for 120 session_up "$IQN"
	check "$m: both READs succeeded and returned the disk's data" \
		eval '[ "$EARLY_RC" = 0 ] && cmp /tmp/early-got /tmp/early-exp'
}
if [ -n "$EARLY_MODES" ]; then
	IQN=iqn.2026-11.org.riser:evil
	KO_USER=$KO
	KO=$FAULT_KO
	riser_reload
	KO=$KO_USER
	check "the test build's command hold is there, and off" \
		eval '[ "$(cat "$P/fault_hold_command")" = 0 ]'
	EARLY_MODES=$(echo $EARLY_MODES)
	# With two CPUs or more, the trigger dd on CPU 0 and the target on the
	# others: the held command (on the CPU that sends it, preemption off)
	# cannot starve the target, whose answer would then come after the
	# hold let the command go.
	EARLY_ON=() EVIL_ON=
	if [ "$(nproc)" -ge 2 ]; then
		EARLY_ON=(taskset -c 0)
		EVIL_ON=1-$(($(nproc) - 1))
		echo "early answers: the trigger dd on CPU 0, the target on CPUs $EVIL_ON" >>"$RISER_OUT/guest.log"
	fi
	check "hostile target up (early answers)" evil_start early "${EARLY_MODES// /,}"
	EVIL_ON=
	check "node record (no pings, 16 commands)" early_node "$IQN"
	check "login" iscsi_login "$IQN" "$IP"
	DEV=$(iscsi_dev "$IQN" 0 60) || DEV=/dev/null
	check "disk $DEV appears" test -b "$DEV"
	check "known data where the trigger READs look" early_data_setup
	for m in $EARLY_MODES; do
		early_fire "$m"
	done
	check "logout" iscsi_logout "$IQN" "$IP"
	evil_stop
fi

# always_register=0: riser reloaded with it (its warnings: at load, and per
# session), then a target that answers the trigger READ (4 KiB: one
# segment, so riser gives the PD's global rkey, unregistered) by
# SEND_WITH_INV of that key, though riser's CM header refused Send with
# Invalidate. The target says whether the key is the priming READ's (the
# global rkey is the same for every such READ). riser must not take it for
# its task's invalidation: the connection fails ("foreign remote
# invalidation"; on rxe the device refuses the invalidation of the global
# rkey's DMA MR first, which riser sees as a receive error), the session
# comes back, every trigger command is retried and returns the disk's data.
# Last, so that riser keeps the option to the end checks.
REG0_EXPECT="$FAILED: (receive error|foreign remote invalidation)"
if [ -n "$REG0_MODES" ]; then
	IQN=iqn.2026-11.org.riser:evil-reg0
	dmesg_mark
	riser_reload always_register=0
	check "riser warned at load: always_register=0 gives targets the global rkey" \
		dmesg_has "riser: always_register=0: targets are given the global rkey"
	check "hostile target up (always_register=0)" evil_start reg0 inv-global
	check "node record" node_setup "$IQN"
	dmesg_mark
	check "login" iscsi_login "$IQN" "$IP"
	check "riser warned for the session" \
		_wait_for 10 dmesg_has "riser: session to $IP:3260 runs with always_register=0"
	DEV=$(iscsi_dev "$IQN" 0 60) || DEV=/dev/null
	check "disk $DEV appears" test -b "$DEV"
	check "known data where the trigger READs look" trigger_data_setup
	dmesg_mark
	evil_mark reg0
	next_pattern
	WPAT=$PAT
	trigger inv-global >>"$RISER_OUT/guest.log" 2>&1
	check "inv-global: the target misbehaved" evil_fired reg0 inv-global 60
	check "inv-global: the READ's STag was the priming READ's (the global rkey), and riser's CM header refused Send with Invalidate" \
		evil_says reg0 "^evil: inv-global: .*: same key; initiator's CM header refuses"
	check "inv-global: no trigger command hung" no_hang
	check "inv-global: dmesg has: $REG0_EXPECT" _wait_for 60 dmesg_has "$REG0_EXPECT"
	check "inv-global: session logged in again" _wait_for 120 session_up "$IQN"
	check "inv-global: every trigger command succeeded, each READ returned the disk's data" \
		reads_ok inv-global
	check "inv-global: the write beside it was reported done and reads back equal" \
		written_reads_back
	check "inv-global: the disk reads and writes" pattern_roundtrip 2
	check "inv-global: fio verifies after (4k: unregistered reads)" \
		fio_verify "$DEV" randrw 4k 4 1M
	dmesg_mark
	check "logout" iscsi_logout "$IQN" "$IP"
	check "riser counted commands sent with unregistered buffers" \
		_wait_for 10 dmesg_has "riser: connection to $IP:3260: [1-9][0-9]* commands sent with unregistered buffers"
	evil_stop
fi

check "iscsid stopped" iscsi_stop
# Before rmmod: kmemleak names riser's frames only while riser is loaded.
check "kmemleak: nothing from riser" no_leak_from_riser "$RISER_OUT/kmemleak.txt"
check "rmmod riser" unload_riser
save_dmesg
