#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench` in the guest: riser, ib_iser and iscsi_tcp in turn against the
# same LIO target over the same RDMA device, interleaved (the order rotates
# every round), RISER_BENCH_ROUNDS rounds (default 3). Each initiator logs in
# to two targets at once: an rd_mcp ramdisk and a null_blk disk served
# through iblock. In the last round each iSER initiator is also profiled
# (perf) during 4k random reads. Then the link's ceiling (perftest
# ib_write_bw and ib_read_bw), and the same over soft-iWARP (riser and
# ib_iser; iscsi_tcp does not use the RDMA device).
#
# RISER_BENCH_B_KO names a second build of riser.ko (built for the same
# kernel): it is measured as a fourth initiator, riser_b, in the same rounds
# and the same rotation, so that a change to riser is judged against the
# code before it in one run (the report adds riser_b/riser).
#
# The guest only measures: every fio run leaves its JSON output and the
# /proc/stat lines before and after it in $RISER_OUT/raw/, named
# DEV.BACKEND.INITIATOR.WORKLOAD.ROUND; scripts/bench-report turns them into
# the tables. Progress lines go to $RISER_OUT/progress, which make bench
# shows while the guest runs.

set -u
. "$RISER_TOP/tests/guest/lib.sh"
. "$RISER_TOP/tests/guest/target.sh"
KO=$RISER_TOP/riser.ko
RAW=$RISER_OUT/raw
PROGRESS=$RISER_OUT/progress
ROUNDS=${RISER_BENCH_ROUNDS:-3}
RUNTIME=${RISER_BENCH_RUNTIME:-3}
RAMP=${RISER_BENCH_RAMP:-1}
DEVICES=${RISER_BENCH_DEVICES:-rxe siw}
# scripts/bench has checked that it names a file.
KO_B=${RISER_BENCH_B_KO:-}
# Which build of riser is loaded: a ($KO) or b ($KO_B).
RISER_LOADED=
mkdir -p "$RAW"
: >"$PROGRESS"
T0=$SECONDS

progress() { echo "[$(printf '%4d' $((SECONDS - T0)))s] $*" | tee -a "$PROGRESS" >>"$RISER_OUT/guest.log"; }

# The workloads of the issue: NAME FIO-ARGUMENTS.
WORKLOADS=(
	"randread-4k-qd32x2 --rw=randread --bs=4k --iodepth=32 --numjobs=2"
	"randwrite-4k-qd32x2 --rw=randwrite --bs=4k --iodepth=32 --numjobs=2"
	"read-512k-qd8 --rw=read --bs=512k --iodepth=8 --numjobs=1"
	"write-512k-qd8 --rw=write --bs=512k --iodepth=8 --numjobs=1"
	"randread-4k-qd1 --rw=randread --bs=4k --iodepth=1 --numjobs=1 --lat_percentiles=1"
)

# counters BLOCKSTAT: the guest's CPU counters, the disk's, and the host's
# (scripts/bench refreshes $RISER_OUT/host.stat; 9p does not cache it).
counters() {
	grep '^cpu ' /proc/stat
	echo "disk $(cat "$1")"
	if [ -r "$RISER_OUT/host.stat" ]; then sed 's/^cpu /host /' "$RISER_OUT/host.stat"; fi
}

# fio_run DEV NAME WORKLOAD-ARGS...: one timed fio run, with the CPU
# counters of the whole guest (and of the host) around it.
fio_run() {
	local dev=$1 name=$2 blk
	shift 2
	blk=/sys/block/${dev#/dev/}/stat
	counters "$blk" >"$RAW/$name.stat0"
	fio --name=b --filename="$dev" --direct=1 --ioengine=libaio --group_reporting \
		--time_based --runtime="$RUNTIME" --ramp_time="$RAMP" --norandommap \
		--randrepeat=0 --size=48M --output-format=json "$@" >"$RAW/$name.json" 2>"$RAW/$name.err"
	local rc=$?
	counters "$blk" >"$RAW/$name.stat1"
	return $rc
}

# The initiators. Each use_* makes its transport the one iscsiadm gets.
# _load_riser a|b: that build of riser, and no other iSER initiator.
_load_riser() {
	if [ -d /sys/module/ib_iser ]; then rmmod ib_iser || return 1; fi
	if [ -d /sys/module/riser ] && [ "$RISER_LOADED" != "$1" ]; then
		rmmod riser || return 1
	fi
	if [ ! -d /sys/module/riser ]; then
		case $1 in a) insmod "$KO" ;; b) insmod "$KO_B" ;; esac || return 1
	fi
	RISER_LOADED=$1
}
use_riser() { _load_riser a; }
use_riser_b() { _load_riser b; }
use_ib_iser() {
	if [ -d /sys/module/riser ]; then rmmod riser || return 1; fi
	[ -d /sys/module/ib_iser ] || modprobe ib_iser
}
use_iscsi_tcp() { modprobe iscsi_tcp; }
iface_of() { case $1 in iscsi_tcp) echo default ;; *) echo iser ;; esac; }

# session_driver IQN: the module behind the session to IQN (riser, ib_iser
# or iscsi_tcp), from its SCSI host.
session_driver() {
	local h
	h=$(iscsi_host_of "$1") || return 1
	case $(cat "$h/proc_name") in
	iscsi_tcp) echo iscsi_tcp ;;
	iscsi_iser) if [ -d /sys/module/riser ]; then echo riser; else echo ib_iser; fi ;;
	*) cat "$h/proc_name" ;;
	esac
}

# measure RDMA IP INIT ROUND TARGETS...: log INIT in to every target
# (IQN@BACKEND), run the workloads on each disk, log out.
measure() {
	local rdma=$1 ip=$2 init=$3 round=$4 t iqn backend dev w name args rc=0
	shift 4
	check "$rdma round $round: $init is the initiator" "use_$init"
	for t in "$@"; do
		iqn=${t%@*}
		check "$rdma round $round: $init logs in to $iqn" iscsi_login "$iqn" "$ip" "$(iface_of "$init")"
	done
	for t in "$@"; do
		iqn=${t%@*} backend=${t##*@}
		dev=$(iscsi_dev "$iqn" 0 60 2>>"$RISER_OUT/guest.log") || dev=
		check "$rdma round $round: $init drives the session to $iqn" \
			test "$(session_driver "$iqn")" = "${init%_b}"
		for w in "${WORKLOADS[@]}"; do
			name=$rdma.$backend.$init.${w%% *}.$round
			args=${w#* }
			progress "$rdma $backend $init ${w%% *} (round $round of $ROUNDS)"
			# shellcheck disable=SC2086 # args are words on purpose
			fio_run "$dev" "$name" $args || { rc=1; progress "  fio failed: $(head -c 300 "$RAW/$name.err")"; }
		done
		# The iSER initiators' profiles, once, on the first target.
		if [ "$round" = "$ROUNDS" ] && [ "$t" = "$1" ] && [ "$init" != iscsi_tcp ]; then
			profile_run "$rdma" "$init" "$dev"
		fi
	done
	for t in "$@"; do
		check "$rdma round $round: $init logs out of ${t%@*}" iscsi_logout "${t%@*}" "$ip"
	done
	check "$rdma round $round: every fio run of $init succeeded" test $rc = 0
}

# ceiling KIND DEV IP: perftest's RDMA WRITE and READ bandwidth over DEV,
# client and server in this guest, through rdma_cm (-R, which iWARP needs),
# 512 KiB messages as the sequential workloads use. perftest now and then
# fails to exchange its results over siw ("Bad wc status 5"), and its
# server then waits for nothing: each tool gets a 20 s limit and a second
# try.
ceiling() {
	local kind=$1 dev=$2 ip=$3 t srv try out
	for t in write read; do
		out=$RAW/$kind.ceiling.ib_${t}_bw.txt
		for try in 1 2; do
			progress "$kind ceiling: ib_${t}_bw (try $try)"
			timeout 20 ib_"${t}"_bw -R -d "$dev" -s 524288 -D "$RUNTIME" -F >/dev/null 2>&1 &
			srv=$!
			sleep 1
			timeout 20 ib_"${t}"_bw -R -d "$dev" -s 524288 -D "$RUNTIME" -F "$ip" >"$out" 2>&1
			if grep -q '^ *524288 ' "$out"; then
				wait "$srv"
				break
			fi
			kill "$srv" 2>/dev/null
			wait "$srv"
			cp "$out" "$out.try$try"
		done
		check "$kind: ib_${t}_bw ran" grep -q '^ *524288 ' "$out"
	done
}

# profile_run KIND INIT DEV: a perf profile (cpu-clock sampling, the only
# clock under TCG; no call graphs, which cost the guest time) of the whole guest while INIT, logged in, runs 4k random
# reads at QD 32 on DEV; with fio's own result (it must have done I/O, or the
# profile is of an idle guest) and the guest's /proc/stat around the
# recording, to set the samples against the guest's busy time. Runs in the
# last round, after the measured workloads of the first target, so it costs
# no login of its own.
profile_run() {
	local kind=$1 init=$2 dev=$3 p=$RAW/$1.$2.profile fpid
	progress "$kind $init profile: perf record during randread-4k-qd32x2"
	fio --name=p --filename="$dev" --direct=1 --ioengine=libaio --rw=randread --bs=4k \
		--iodepth=32 --numjobs=2 --group_reporting --time_based --runtime=$((RUNTIME + 2)) \
		--norandommap --randrepeat=0 --size=48M --output-format=json \
		>"$p.fio.json" 2>"$p.fio.err" &
	fpid=$!
	sleep 1
	grep '^cpu ' /proc/stat >"$p.stat0"
	perf record -e cpu-clock -F 999 -a -o /tmp/perf.data -- sleep "$RUNTIME" \
		>/dev/null 2>"$p.record.err"
	grep '^cpu ' /proc/stat >"$p.stat1"
	wait "$fpid"
	check "$kind profile: fio ran I/O on $init while perf recorded" \
		grep -Eq '"total_ios" : [1-9]' "$p.fio.json"
	# Every (module, symbol) pair: the report adds up the modules' shares.
	# Made now, while the initiator's module is loaded to resolve it.
	perf report -i /tmp/perf.data --sort dso,sym --stdio >"$p.txt" 2>/dev/null
	check "$kind profile: perf recorded samples of $init" grep -q '%' "$p.txt"
}

# One RDMA device: targets, rounds, ceiling, profile, teardown.
bench_device() {
	local kind=$1 ip iqn_rd iqn_nb inits dev r i order
	if [ "$kind" = siw ]; then
		ip=192.168.78.1 dev=siw0
		# iscsi_tcp does not use the RDMA device: measured over rxe only.
		inits=(riser ${KO_B:+riser_b} ib_iser)
	else
		ip=192.168.77.1 dev=rxe0
		inits=(riser ${KO_B:+riser_b} ib_iser iscsi_tcp)
	fi
	iqn_rd=iqn.2026-11.org.riser:bench-$kind-rd
	iqn_nb=iqn.2026-11.org.riser:bench-$kind-nullb
	progress "$kind: device, targets"
	check "$kind: RDMA device created" setup_rdma "$kind" "$ip"
	check "$kind: LIO rd_mcp target" lio_rd_target "$iqn_rd" "$ip" 64 "$kind"
	check "$kind: LIO null_blk (iblock) target" lio_nullblk_target "$iqn_nb" "$ip" 64 "$kind"
	# riser and ib_iser share the iface "iser": one discovery per iface.
	for i in $(for i in "${inits[@]}"; do iface_of "$i"; done | sort -u); do
		check "$kind: discovery through iface $i" iscsi_discover "$ip" "$i"
	done
	for ((r = 1; r <= ROUNDS; r++)); do
		# Rotate the order every round so none always runs first.
		order=("${inits[@]:$(((r - 1) % ${#inits[@]}))}" "${inits[@]:0:$(((r - 1) % ${#inits[@]}))}")
		for i in "${order[@]}"; do
			measure "$kind" "$ip" "$i" "$r" "$iqn_rd@rd_mcp" "$iqn_nb@null_blk"
		done
	done
	ceiling "$kind" "$dev" "$ip"
	progress "$kind: teardown"
	check "$kind: LIO torn down" lio_teardown
	check "$kind: RDMA device removed" rdma_delete "$kind"
}

(while sleep 15; do dmesg >"$RISER_OUT/dmesg.live"; done) &

{
	echo "kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) CPU(s), clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource), rounds $ROUNDS, runtime ${RUNTIME}s + ramp ${RAMP}s"
	grep -m1 'model name' /proc/cpuinfo
	fio --version
	ib_write_bw --version 2>&1 | head -1
	[ -z "$KO_B" ] || echo "riser_b: $KO_B (md5 $(md5sum <"$KO_B" | cut -c1-12); riser's $(md5sum <"$KO" | cut -c1-12))"
} >"$RAW/meta.txt" 2>&1
check "riser's dependencies load" load_deps
# perf: kernel symbols, and sampling of the whole guest.
echo 0 >/proc/sys/kernel/kptr_restrict
echo -1 >/proc/sys/kernel/perf_event_paranoid
check "iscsid started" iscsi_start
for kind in $DEVICES; do
	bench_device "$kind"
done
if [ -d /sys/module/riser ]; then check "rmmod riser" rmmod riser; fi
if [ -d /sys/module/ib_iser ]; then check "rmmod ib_iser" rmmod ib_iser; fi
check "iscsid stopped" iscsi_stop
progress "done"
save_dmesg
