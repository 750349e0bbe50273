#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# dm-multipath over two iSER paths, and how long I/O stops when one dies.
#
# One LIO target with one rd_mcp LUN behind two portal groups: tpgt_1 on
# 192.168.77.1 (rxe0 on dummy0) and tpgt_2 on 192.168.79.1 (rxe1 on
# dummy2). The initiator discovers both portals and logs in to each; the two
# SCSI disks carry the same WWID and multipath-tools (multipathd, with
# multipath.conf below) makes one round-robin map of them. Then, while fio
# writes and verifies (crc32c) through the map and a 4k QD1 read probe
# records every completion:
#  - path 2 dies: its portal group is disabled, so LIO drops the connection
#    and refuses logins on it;
#  - I/O goes on through path 1 (the probe's longest stall must be shorter
#    than the outage): new I/O goes there at once, and the commands caught
#    on path 2 fail over once open-iscsi's replacement_timeout (5 s here)
#    fails them and dm-multipath fails the path. Both times are printed:
#    the probe's longest stall (long only when its read was on path 2),
#    and the time from the path's death to dm-multipath's "Failing path";
#  - the path comes back: the portal group is enabled, iscsid logs in
#    again, and multipathd's path checker reinstates the path;
#  - fio verifies every block, with no error.
#
# Run by make check for riser (one round). With RISER_MPATH_COMPARE=1
# (make failover) it runs RISER_MPATH_ROUNDS rounds (default 3) for riser
# and for ib_iser, alternating, with the same settings, and prints a table
# of the stalls (Documentation/testing.md keeps the one that was measured).
#
# Why a portal group, and not a link: on one guest every rxe packet goes
# through rxe's loopback (the destination MAC is its own), which neither
# `ip link set ... carrier off` nor a filter stops, and `ip link set ...
# down` removes the netdev's routes, after which rxe fails the CM's MADs and
# moves its QP1 to the error state for good (faults.sh says more). A
# disabled portal group is a path death both initiators see the same way.

set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
KO=$RISER_TOP/riser.ko
IQN=iqn.2026-11.org.riser:mpath
IP1=192.168.77.1
IP2=192.168.79.1
NDEV2=dummy2
OUTAGE=15
# The LUN's unit serial: LIO derives the WWID (VPD page 0x83) from it.
UNIT_SERIAL=5a3f1c2e-7b64-4d21-9e8a-0c6b1d2e3f40
ISCSI_REPLACEMENT_TIMEOUT=5
if [ "${RISER_MPATH_COMPARE:-0}" = 1 ]; then
	ROUNDS=${RISER_MPATH_ROUNDS:-3}
	INITS=(riser ib_iser)
else
	ROUNDS=1
	INITS=(riser)
fi

dmesg_live

# --- the second path's RDMA device and portal group ----------------------

TPG2=$LIO/iscsi/$IQN/tpgt_2
# tpgt_2: the same backstore as LUN 0, its own portal with iSER on.
second_tpg() {
	local bs np
	bs=$LIO/core/rd_mcp_0/$(_lio_bs_name "$IQN")
	np=$TPG2/np/$(_lio_np_name "$IP2")
	mkdir -p "$TPG2/lun/lun_0" && ln -s "$bs" "$TPG2/lun/lun_0/${bs##*/}" || return 1
	echo 0 >"$TPG2/attrib/authentication" &&
		echo 1 >"$TPG2/attrib/generate_node_acls" &&
		echo 0 >"$TPG2/attrib/demo_mode_write_protect" &&
		echo 1 >"$TPG2/attrib/cache_dynamic_acls" || return 1
	mkdir "$np" || return 1
	_wait_for 30 _rdma_dev_for "$IP2" || return 1
	echo 1 >"$np/iser" && echo 1 >"$TPG2/enable"
}
tpg2_off() { echo 0 >"$TPG2/enable"; }
tpg2_on() { echo 1 >"$TPG2/enable"; }

# --- sessions and disks per portal ----------------------------------------

# disk_of IP: /dev/sdX of LUN 0 through IP.
disk_of() {
	local s b
	s=$(iscsi_session "$IQN" "$1") || return 1
	for b in /sys/class/iscsi_session/"$s"/device/target*/*:*:*:0/block/*; do
		[ -b "/dev/${b##*/}" ] && { echo "/dev/${b##*/}"; return 0; }
	done
	return 1
}
# Discovery through portal 1 lists both portal groups; the records it makes
# carry each portal's group tag.
discover_both() {
	local out
	out=$(iscsi_discover "$IP1") || return 1
	echo "$out"
	grep -q "^$IP1:$LIO_PORT,1 $IQN\$" <<<"$out" && grep -q "^$IP2:$LIO_PORT,2 $IQN\$" <<<"$out"
}
login_both() {
	iscsi_login "$IQN" "$IP1" && iscsi_login "$IQN" "$IP2" &&
		_wait_for 60 disk_of "$IP1" && _wait_for 60 disk_of "$IP2"
}
logout_both() { iscsi_logout "$IQN" "$IP1"; iscsi_logout "$IQN" "$IP2"; }

# --- multipath-tools -------------------------------------------------------

# udev: multipath-tools finds its paths through libudev and takes only the
# disks udev has initialised, and tests/run-guest keeps udevd out of the
# guests (lib.sh says why). This guest starts one (udevadm is udevd when
# called systemd-udevd), before the logins, so that it handles the disks as
# they come, and stops it at the end.
udev_start() {
	[ -S /run/udev/control ] || (exec -a systemd-udevd udevadm --daemon) || return 1
	_wait_for 10 test -S /run/udev/control
}
udev_stop() { udevadm control --exit; }

MPATHD_PID=
# What a storage admin writes for LIO: both paths in one group, round
# robin, a TUR checker every second, no hardware handler (LIO's ALUA group
# is active/optimized on both ports), and failing I/O when no path is left
# rather than queueing it forever. find_multipaths off: the guest keeps no
# list of WWIDs from an earlier boot.
multipath_conf() {
	cat >/etc/multipath.conf <<-EOF
		defaults {
			user_friendly_names no
			find_multipaths off
			polling_interval 1
		}
		blacklist {
			devnode "^(ram|loop|vd|nullb|sr|zram)"
		}
		devices {
			device {
				vendor "LIO-ORG"
				product ".*"
				path_grouping_policy multibus
				path_selector "round-robin 0"
				hardware_handler "0"
				prio const
				path_checker tur
				failback immediate
				no_path_retry fail
			}
		}
	EOF
}
# The map's name (its WWID).
MAP=
# (awk reads to the end: an exit at the first map could kill dmsetup with
# SIGPIPE and, with pipefail, fail the lookup.)
map_name() { dmsetup ls --target multipath 2>/dev/null | awk '$2 ~ /^\(/ && !n++ { print $1 }'; }
# paths_active N: the map has N paths, all active ("A" in dmsetup status).
paths_active() {
	local st
	st=$(dmsetup status "$MAP") || return 1
	echo "$st"
	[ "$(grep -oE ' [0-9]+:[0-9]+ A ' <<<"$st" | wc -l)" = "$1" ] &&
		[ "$(grep -oE ' [0-9]+:[0-9]+ [AF] ' <<<"$st" | wc -l)" = "$1" ]
}
# multipathd, started once both disks exist: at start it finds the two
# paths, makes the map and checks the paths from then on.
multipathd_start() {
	local d1 d2
	d1=$(disk_of "$IP1") && d2=$(disk_of "$IP2") || return 1
	modprobe -a dm_multipath dm_round_robin 2>/dev/null || modprobe dm_multipath || return 1
	multipath_conf || return 1
	udevadm settle --timeout=60 || return 1
	setsid multipathd -d -s -v3 >>"$RISER_OUT/multipathd.log" 2>&1 </dev/null &
	MPATHD_PID=$!
	_wait_for 30 eval 'MAP=$(map_name) && [ -n "$MAP" ]' || return 1
	echo "map $MAP over $d1 and $d2"
	# udev makes /dev/mapper/NAME (dmsetup's rules), after the map.
	_wait_for 30 paths_active 2 && _wait_for 30 test -b "/dev/mapper/$MAP" &&
		multipathd show topology
}
# multipathd stopped (it leaves the map), then the map flushed.
multipathd_stop() {
	local rc=0
	if [ -n "$MPATHD_PID" ]; then
		kill "$MPATHD_PID" && _wait_for 30 bash -c "! kill -0 $MPATHD_PID 2>/dev/null" || rc=1
		MPATHD_PID=
	fi
	if [ -n "$MAP" ]; then
		# A writer closing the map makes udev probe it (its inotify watch
		# on block devices): that open, not the initiator, can meet the
		# flush. Settled first; a map still open is then someone's.
		udevadm settle --timeout=30
		if multipath -f "$MAP"; then
			MAP=
		else
			echo "map $MAP still open: $(dmsetup info -c --noheadings -o open "$MAP" 2>&1) opener(s)"
			rc=1
		fi
	fi
	return $rc
}

# --- the failover round ----------------------------------------------------

# failover WHO N: fio verify and the read probe through the map; path 2's
# portal group disabled for OUTAGE seconds. Prints the stall line.
failover() {
	local who=$1 n=$2 dev=/dev/mapper/$MAP vpid ppid rc=0 lat stall failed
	lat=$RISER_OUT/probe-$who-$n
	rm -f "$lat"_clat.*.log
	# Writes for as long as the probe reads, each batch of 64 read back
	# and checked as it goes (verify_backlog), the rest at the end.
	CONN_FAILURES_EXPECTED=1 fio_verify "$dev" randwrite 16k 8 16M \
		--time_based --runtime=$((OUTAGE + 16)) --verify_backlog=64 \
		>"$RISER_OUT/fio-$who-$n.log" 2>&1 &
	vpid=$!
	fio --name=probe --filename="$dev" --direct=1 --ioengine=psync --rw=randread \
		--bs=4k --size=16M --time_based --runtime=$((OUTAGE + 20)) \
		--write_lat_log="$lat" --log_avg_msec=0 >"$RISER_OUT/probe-$who-$n.txt" 2>&1 &
	ppid=$!
	sleep 4
	# Path 2's session (sessionN): libiscsi names its connection
	# (connectionN:0) when that fails.
	PATH2_SESSION=$(iscsi_session "$IQN" "$IP2") || PATH2_SESSION=
	echo "path 2 is $PATH2_SESSION"
	kmsg_mark
	echo "path 2 disabled at $EPOCHREALTIME"
	tpg2_off || rc=1
	sleep "$OUTAGE"
	tpg2_on || rc=1
	echo "path 2 enabled at $EPOCHREALTIME"
	wait "$ppid" || { echo "the read probe failed"; rc=1; }
	wait "$vpid" || { echo "fio verify failed:"; cat "$RISER_OUT/fio-$who-$n.log"; rc=1; }
	# The longest gap between two completions of the QD1 probe: the read
	# that was on the dead path, from its death until it completed on the
	# other (time column in ms since the probe's start).
	stall=$(awk -F', *' 'NR > 1 && $1 - p > m { m = $1 - p } { p = $1 } END { printf "%.2f", m / 1000 }' \
		"$lat"_clat.*.log 2>/dev/null)
	# From the death to dm-multipath failing the path: the commands caught
	# on it fail over then (kernel log timestamps; printed, not asserted).
	failed=$(secs_after_mark "$MARK" "multipath: .*: Failing path")
	# From the death to libiscsi's "detected conn error": how soon the
	# initiator noticed.
	noticed=$(secs_after_mark "$MARK" "detected conn error")
	echo "mpath $who $n ${stall:-none} ${failed:-none} ${noticed:-none}" | tee -a "$RISER_OUT/mpath.txt"
	[ -n "$stall" ] || rc=1
	# Failover, not waiting for the path: I/O resumed while path 2 was dead.
	awk -v s="$stall" -v o="$OUTAGE" 'BEGIN { exit !(s > 0 && s < o) }' ||
		{ echo "I/O stopped for ${stall} s: no failover within the ${OUTAGE} s outage"; rc=1; }
	return $rc
}
# The connection on path 2 was dropped: since path 2 died (failover's
# kmsg_mark), the kernel log has libiscsi's line for path 2's connection or
# riser's for its portal; a path 1 failure does not count. Fails when the
# marker is not in the log, or path 2's session was not known. (The window
# is read whole, then grep decides: no pipe for head or grep to close.)
path2_dropped() {
	local window lines
	[ -n "${PATH2_SESSION:-}" ] || { echo "path 2's session was not known when it died"; return 1; }
	window=$(kernel_after_mark "$MARK") ||
		{ echo "the marker of path 2's death is not in the kernel log"; return 1; }
	lines=$(grep -E " connection${PATH2_SESSION#session}:0: detected conn error|riser: connection to $IP2:3260 failed" \
		<<<"$window") ||
		{ echo "no kernel line says that $PATH2_SESSION's connection (path 2) was dropped"; return 1; }
	head -n 3 <<<"$lines"
}

load() {
	if [ "$1" = riser ]; then insmod "$KO"; else modprobe ib_iser; fi
}
unload() {
	if [ "$1" = riser ]; then unload_riser; else rmmod ib_iser; fi
}

: >"$RISER_OUT/mpath.txt"
plan $((9 + 12 * ROUNDS * ${#INITS[@]}))
check "soft-RoCE devices rxe0 and rxe1 (two netdevs)" eval 'setup_rxe "$IP1" && setup_rxe "$IP2" "$NDEV2" rxe1'
check "riser's dependencies load" load_deps
check "LIO target, one LUN behind two portal groups" \
	eval 'LIO_UNIT_SERIAL=$UNIT_SERIAL lio_rd_target "$IQN" "$IP1" 64 && second_tpg'
check "iscsid started (replacement_timeout ${ISCSI_REPLACEMENT_TIMEOUT} s)" iscsi_start
check "udevd started (multipath-tools needs it)" udev_start
for ((r = 1; r <= ROUNDS; r++)); do
	for who in "${INITS[@]}"; do
		check "$who: loaded" load "$who"
		check "$who: discovery lists both portals" discover_both
		check "$who: login through both portals" login_both
		check "$who: multipathd makes one map of the two disks, both paths active" multipathd_start
		check "$who round $r: path 2 dies for ${OUTAGE} s under fio: I/O goes on, data verified" \
			failover "$who" "$r"
		check "  path 2's connection was dropped" path2_dropped
		check "  path 2's session is logged in again" _wait_for 120 iscsi_logged_in "$IQN" "$IP2"
		check "  multipathd reinstated path 2" _wait_for 60 paths_active 2
		check "  I/O through both paths again, data verified" \
			fio_verify "/dev/mapper/$MAP" randrw 4k 8 4M
		check "$who: multipathd stopped, map flushed" multipathd_stop
		check "$who: logout" logout_both
		check "$who: unloaded" unload "$who"
	done
done
check "udevd stopped" udev_stop
check "iscsid stopped" iscsi_stop
check "LIO torn down" lio_teardown
check "rxe0 and rxe1 removed" eval 'bounded 60 rdma link delete rxe0 && bounded 60 rdma link delete rxe1'
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "none" }'; }
{
	echo "| initiator | probe's longest stall, median of $ROUNDS (s) | rounds (s) | path death to \`Failing path\`, median (s) | rounds (s) | path death to \`detected conn error\`, median (s) | rounds (s) |"
	echo "|---|---|---|---|---|---|---|"
	col() { awk -v w="$who" -v c="$1" '$2 == w { print $c }' "$RISER_OUT/mpath.txt"; }
	for who in "${INITS[@]}"; do
		printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$who" \
			"$(col 4 | median)" "$(col 4 | tr '\n' ' ')" \
			"$(col 5 | median)" "$(col 5 | tr '\n' ' ')" \
			"$(col 6 | median)" "$(col 6 | tr '\n' ' ')"
	done
} | tee "$RISER_OUT/mpath-table.md"
save_dmesg
