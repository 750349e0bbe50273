#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench` in the guest: riser, riser_b, ib_iser and iscsi_tcp in turn
# against the same LIO target, and nvme-rdma against nvmet-rdma serving the
# LIO target's null_blk disk, over one RDMA device (RISER_BENCH_DEVICES;
# make bench runs one guest per device, side by side), interleaved (the
# order rotates every round), RISER_BENCH_ROUNDS rounds (default 3). Each
# initiator logs in to the targets of RISER_BENCH_BACKENDS (default a
# null_blk disk served through iblock; rd_mcp adds a ramdisk) at once.
# Then the link's ceiling (perftest ib_write_bw and ib_read_bw).
# iscsi_tcp does not use the RDMA device: it runs over rxe only.
#
# riser_b is a second build of riser.ko (RISER_BENCH_B_KO, built for the
# same kernel), measured in the same rounds and the same rotation: make
# bench makes it a copy of riser.ko unless told otherwise, so that every
# run carries its own A/A comparison, the finest difference it resolves;
# naming the code before a change makes it an A/B comparison.
#
# The guest only measures: for every disk an initiator logs in to, one fio
# process runs the workloads one after the other (stonewall), and
# tools/bench/guest/bench-mark, run by fio around each of them, takes
# the counters (the guest's /proc/stat, the disk's, the host's) into
# $RISER_OUT/raw/DEV.BACKEND.INITIATOR.WORKLOAD.ROUND.stat0 and .stat1,
# and, with RISER_BENCH_MARK set (make bench does), executes the mark of
# QEMU's instruction-counting plugin (tools/bench/insns) with a line of
# its own in $RAW/DEV.insns.labels. Where each module's code was during each
# round goes to DEV.INITIATOR.ROUND.modules (and riser's and ib_iser's
# symbols to .kallsyms), so that tools/bench/bench-report counts each
# initiator's own instructions per I/O.
# fio's JSON output of the workloads goes to DEV.BACKEND.INITIATOR.ROUND.runs.json.
# tools/bench/bench-report turns them into the tables. Progress lines go
# to $RISER_OUT/progress, which make bench shows while the guest runs.
#
# RISER_BENCH_PROFILE=1 adds, in the last round, a perf profile of the
# whole guest during 4k random reads for each iSER initiator.

set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
# tools/bench/run names the build (riser.ko, or out/distro-build's).
KO=${RISER_BENCH_KO:-$RISER_TOP/riser.ko}
RAW=$RISER_OUT/raw
PROGRESS=$RISER_OUT/progress
ROUNDS=${RISER_BENCH_ROUNDS:-3}
RUNTIME=${RISER_BENCH_RUNTIME:-1}
RAMP=${RISER_BENCH_RAMP:-250ms}
DEVICES=${RISER_BENCH_DEVICES:-rxe siw}
BACKENDS=${RISER_BENCH_BACKENDS:-null_blk}
# rxe on dummy0's default MTU (1500: rxe's active MTU 1024), the MTU
# performance.md's tables were measured at (make check's guests run 9000).
RXE_MTU=1500
# tools/bench/run has checked that it names a file.
KO_B=${RISER_BENCH_B_KO:-}
# Which build of riser is loaded: a ($KO) or b ($KO_B).
RISER_LOADED=
MARK=$RISER_TOP/tools/bench/guest/bench-mark
# A run's counters are written once (bench-mark): none may be left over
# from an earlier make bench into the same directory.
rm -rf "$RAW"
mkdir -p "$RAW"
: >"$PROGRESS"
# bench-mark's progress lines count from the same start.
export RISER_BENCH_T0 RISER_BENCH_ROUNDS=$ROUNDS
RISER_BENCH_T0=$(date +%s)

progress() { printf '[%4ds] %s\n' $(($(date +%s) - RISER_BENCH_T0)) "$*" | tee -a "$PROGRESS" >>"$RISER_OUT/guest.log"; }

# The workloads of the issue: NAME FIO-ARGUMENTS.
WORKLOADS=(
	"randread-4k-qd32x2 --rw=randread --bs=4k --iodepth=32 --numjobs=2"
	"randwrite-4k-qd32x2 --rw=randwrite --bs=4k --iodepth=32 --numjobs=2"
	"read-512k-qd8 --rw=read --bs=512k --iodepth=8 --numjobs=1"
	"write-512k-qd8 --rw=write --bs=512k --iodepth=8 --numjobs=1"
	"randread-4k-qd1 --rw=randread --bs=4k --iodepth=1 --numjobs=1 --lat_percentiles=1"
	"randwrite-4k-qd1 --rw=randwrite --bs=4k --iodepth=1 --numjobs=1 --lat_percentiles=1"
)

# fio_disk DEV NAME: the workloads on DEV in one fio process, one
# after the other, each with its counters taken by bench-mark (NAME is
# DEV.BACKEND.INITIATOR.ROUND; a workload's files are named with the
# workload before the round). fio runs in a scratch directory: it leaves
# the hooks' output there. O_DIRECT leaves no page cache to drop, so fio
# does not flush the disk's buffers before every job (--invalidate=0).
fio_disk() {
	local dev=$1 name=$2 blk w wl jobs=() run
	blk=/sys/block/${dev#/dev/}/stat
	for w in "${WORKLOADS[@]}"; do
		wl=${w%% *}
		run=$RAW/${name%.*}.$wl.${name##*.}
		# shellcheck disable=SC2206 # the workload's arguments are words on purpose
		jobs+=(--name="$wl" --stonewall ${w#* }
			--exec_prerun="$MARK start $run $blk" --exec_postrun="$MARK end $run $blk")
	done
	mkdir -p /tmp/bench-fio
	(cd /tmp/bench-fio && fio --filename="$dev" --direct=1 --invalidate=0 --ioengine=libaio --group_reporting \
		--time_based --runtime="$RUNTIME" --ramp_time="$RAMP" --norandommap \
		--randrepeat=0 --size=48M --output-format=json "${jobs[@]}" \
		>"$RAW/$name.runs.json" 2>"$RAW/$name.err")
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
use_nvme_rdma() { modprobe nvme-rdma; }
# unload_iser_initiators: rmmod riser and ib_iser, waiting up to 30 s for
# each (a module is busy until its last connection is torn down).
_rmmod_if_loaded() { [ ! -d "/sys/module/$1" ] || rmmod "$1" 2>/dev/null; }
unload_iser_initiators() {
	_wait_for 30 _rmmod_if_loaded riser && _wait_for 30 _rmmod_if_loaded ib_iser || return 1
	RISER_LOADED=
}
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
	local rdma=$1 ip=$2 init=$3 round=$4 t iqn backend dev name rc=0
	shift 4
	if [ "$init" = nvme_rdma ]; then
		measure_nvme "$rdma" "$ip" "$round"
		return
	fi
	check "$rdma round $round: $init is the initiator" "use_$init"
	# Every target at once: a login's SCSI scan takes seconds under TCG.
	check "$rdma round $round: $init logs in to the targets" \
		iscsi_login_portal "$ip" "$(iface_of "$init")" "${@%@*}"
	check "$rdma round $round: where the modules' code is, for counting" \
		module_map "$RAW/$rdma.$init.$round" "$init"
	check "$rdma round $round: the counting plugin told $init's stack and what it stops at" \
		plugin_config "$RAW/$rdma.$init.$round" "$init"
	for t in "$@"; do
		iqn=${t%@*} backend=${t##*@}
		dev=$(iscsi_dev "$iqn" 0 60 2>>"$RISER_OUT/guest.log") || dev=
		check "$rdma round $round: $init drives the session to $iqn" \
			test "$(session_driver "$iqn")" = "${init%_b}"
		name=$rdma.$backend.$init.$round
		fio_disk "$dev" "$name" || { rc=1; progress "  fio failed on $name: $(head -c 300 "$RAW/$name.err")"; }
		# The iSER initiators' profiles, once, on the first target.
		if [ "${RISER_BENCH_PROFILE:-0}" = 1 ] && [ "$round" = "$ROUNDS" ] && [ "$t" = "$1" ] &&
			[ "$init" != iscsi_tcp ]; then
			profile_run "$rdma" "$init" "$dev"
		fi
	done
	check "$rdma round $round: $init logs out of the targets" iscsi_logout_portal "$ip"
	check "$rdma round $round: every fio run of $init succeeded" test $rc = 0
}

# NVMe over Fabrics over RDMA: nvmet-rdma serves the null_blk disk of the
# LIO target (NVME_DISK, opened by LIO's iblock too: one initiator at a
# time does I/O) as namespace 1 of NVME_NQN, on port 4420 of the RDMA
# device's address; nvme-rdma connects through /dev/nvme-fabrics (no
# nvme-cli: the kernel's own interface), with its defaults (one I/O queue
# per CPU, 128 entries, the kernel's default host NQN).
NVMET=/sys/kernel/config/nvmet
NVME_PORT=4420
nvmet_target() {
	local nqn=${1:?NQN} ip=${2:?IP} disk=${3:?DISK} s p
	modprobe nvmet && modprobe nvmet-rdma || return 1
	s=$NVMET/subsystems/$nqn p=$NVMET/ports/1
	mkdir "$s" && echo 1 >"$s/attr_allow_any_host" &&
		mkdir "$s/namespaces/1" && echo -n "$disk" >"$s/namespaces/1/device_path" &&
		echo 1 >"$s/namespaces/1/enable" || return 1
	mkdir "$p" && echo rdma >"$p/addr_trtype" && echo ipv4 >"$p/addr_adrfam" &&
		echo "$ip" >"$p/addr_traddr" && echo "$NVME_PORT" >"$p/addr_trsvcid" &&
		ln -s "$s" "$p/subsystems/$nqn"
}
nvmet_teardown() {
	local s p=$NVMET/ports/1 rc=0
	[ -d "$NVMET" ] || return 0
	for s in "$p"/subsystems/*; do [ -L "$s" ] && { rm -f "$s" || rc=1; }; done
	[ ! -d "$p" ] || rmdir "$p" || rc=1
	for s in "$NVMET"/subsystems/*/; do
		[ -d "$s" ] || continue
		if [ -d "$s/namespaces/1" ]; then
			echo 0 >"$s/namespaces/1/enable"
			rmdir "$s/namespaces/1" || rc=1
		fi
		rmdir "$s" || rc=1
	done
	modprobe -r nvmet-rdma nvmet || rc=1
	return $rc
}
# nvme_ctrl NQN: the nvme-rdma controller connected to NQN (nvme0, ...).
nvme_ctrl() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ -r "$c/subsysnqn" ] && [ "$(<"$c/subsysnqn")" = "$1" ] &&
			[ "$(<"$c/transport")" = rdma ] && { echo "${c##*/}"; return 0; }
	done
	return 1
}
nvme_connect() {
	echo "transport=rdma,traddr=${2:?IP},trsvcid=$NVME_PORT,nqn=${1:?NQN}" >/dev/nvme-fabrics
}
nvme_disconnect() {
	local c
	c=$(nvme_ctrl "${1:?NQN}") || return 0
	echo 1 >"/sys/class/nvme/$c/delete_controller"
}
# nvme_dev NQN: the namespace's block device, once it is there.
nvme_dev() {
	local c n
	c=$(nvme_ctrl "$1") || return 1
	for n in /sys/class/nvme/"$c"/"$c"n1 /sys/class/nvme/"$c"/nvme*n1; do
		[ -d "$n" ] && [ -b "/dev/${n##*/}" ] && { echo "/dev/${n##*/}"; return 0; }
	done
	return 1
}
# measure_nvme RDMA IP ROUND: nvme-rdma connects to NVME_NQN, runs the
# workloads on its namespace, disconnects.
measure_nvme() {
	local rdma=$1 ip=$2 round=$3 dev name rc=0
	check "$rdma round $round: nvme_rdma is the initiator" use_nvme_rdma
	check "$rdma round $round: nvme_rdma connects to $NVME_NQN" nvme_connect "$NVME_NQN" "$ip"
	check "$rdma round $round: where the modules' code is, for counting" \
		module_map "$RAW/$rdma.nvme_rdma.$round" nvme_rdma
	check "$rdma round $round: the counting plugin told nvme_rdma's stack and what it stops at" \
		plugin_config "$RAW/$rdma.nvme_rdma.$round" nvme_rdma
	_wait_for 60 nvme_dev "$NVME_NQN" >/dev/null 2>&1
	dev=$(nvme_dev "$NVME_NQN") || dev=
	check "$rdma round $round: nvme_rdma drives $NVME_NQN's namespace ($dev)" test -n "$dev"
	name=$rdma.null_blk.nvme_rdma.$round
	fio_disk "$dev" "$name" || { rc=1; progress "  fio failed on $name: $(head -c 300 "$RAW/$name.err")"; }
	check "$rdma round $round: nvme_rdma disconnects" nvme_disconnect "$NVME_NQN"
	check "$rdma round $round: every fio run of nvme_rdma succeeded" test $rc = 0
}

# What the counting plugin needs for the run that follows
# (tools/bench/insns/insns.c): the initiator's stack, the roots of its
# inclusive count (its own modules and those it is entered through:
# libiscsi and scsi_transport_iscsi, the SCSI midlayer's scsi_queue_rq,
# or nvme_core and nvme_fabrics), what that count stops at (the RDMA
# device, the targets, the target's disk, the softirq loop, whose work
# counts only where it enters a root), the device's post entries and the
# context switch. vmlinux's functions come from the host's System.map
# (tools/bench/run: the file RISER_BENCH_KSYMS, "NAME LO HI" lines; the
# guest's kernel is that tree's, without KASLR), the device's from
# /proc/kallsyms, read once per device.
declare -A KSYM_RANGE
ksym_ranges() {
	local n lo hi
	if [ -r "${RISER_BENCH_KSYMS:-}" ]; then
		while read -r n lo hi; do KSYM_RANGE[$n]="$lo $hi"; done <"$RISER_BENCH_KSYMS"
	else
		# Without the host's System.map (tools/bench/run --distro): from
		# /proc/kallsyms (scsi_queue_rq may be in the module scsi_mod
		# there), with the kernel's Rust code (the longest run of its
		# symbols), which the plugin is told to count and the report
		# reads in raw/rust-range.
		while read -r n lo hi; do KSYM_RANGE[$n]="$lo $hi"; done < <(sort /proc/kallsyms | awk '$2 ~ /^[tTwW]$/ {
			if (prev != "") { print prev, $1; prev = "" }
			if ($3 == "scsi_queue_rq" || $3 == "handle_softirqs" || $3 == "__switch_to_asm") prev = $3 " " $1
			# (__pfx_ symbols: the padding before each function, with call padding)
			name = $3; sub(/^__pfx_/, "", name)
			rust = NF == 3 && (name ~ /^_R/ || name ~ /^rust_helper_/)
			if (rust && !inrun) { inrun = 1; start = $1; c = 0 }
			if (rust) c++
			if (!rust && inrun) { inrun = 0; if (c > best) { best = c; lo = start; hi = $1 } }
		} END { if (best) print "rust", lo, hi }')
		# The range, and its functions by name for the report's table by
		# function (the helpers a gcc-built kernel calls out of line
		# among them).
		if [ -n "${KSYM_RANGE[rust]:-}" ]; then
			echo "${KSYM_RANGE[rust]/ /:}" >"$RAW/rust-range"
			read -r lo hi <<<"${KSYM_RANGE[rust]}"
			awk -v lo="$lo" -v hi="$hi" '$2 ~ /^[tTwW]$/ && $1 >= lo && $1 < hi' /proc/kallsyms >"$RAW/rust-syms"
		fi
	fi
	[ -n "${KSYM_RANGE[__switch_to_asm]:-}" ] && [ -n "${KSYM_RANGE[handle_softirqs]:-}" ] &&
		[ -n "${KSYM_RANGE[scsi_queue_rq]:-}" ]
}
POSTS=
# shellcheck disable=SC2034 # read through ${!roots} in plugin_config
ROOTS_riser="riser libiscsi scsi_transport_iscsi"
# shellcheck disable=SC2034
ROOTS_riser_b=$ROOTS_riser
# shellcheck disable=SC2034
ROOTS_ib_iser="ib_iser libiscsi scsi_transport_iscsi"
# shellcheck disable=SC2034
ROOTS_iscsi_tcp="iscsi_tcp libiscsi_tcp libiscsi scsi_transport_iscsi"
# shellcheck disable=SC2034
ROOTS_nvme_rdma="nvme_rdma nvme_fabrics nvme_core"
STOPS="rdma_rxe siw ib_isert iscsi_target_mod target_core_mod target_core_iblock target_core_file nvmet nvmet_rdma null_blk"
plugin_config() {
	local base=$1 init=$2 roots m a size
	[ -n "${RISER_BENCH_MARK:-}" ] || return 0
	[ -n "${KSYM_RANGE[__switch_to_asm]:-}" ] || ksym_ranges || return 1
	roots=ROOTS_$init
	{
		while read -r m a size; do
			case " ${!roots} " in *" $m "*) printf 'root %x %x\n' "$a" "$((a + size))" ;; esac
			case " $STOPS " in *" $m "*) printf 'stop %x %x\n' "$a" "$((a + size))" ;; esac
		done <"$base.modules"
		case $init in nvme_rdma) ;; *) echo "root ${KSYM_RANGE[scsi_queue_rq]}" ;; esac
		echo "stop ${KSYM_RANGE[handle_softirqs]}"
		echo "switch ${KSYM_RANGE[__switch_to_asm]%% *}"
		[ -z "${KSYM_RANGE[rust]:-}" ] || echo "count ${KSYM_RANGE[rust]}"
		if [ -z "$POSTS" ]; then
			POSTS=$(grep -E ' (rxe_post_send|siw_post_send|rxe_post_recv|siw_post_receive)\b' /proc/kallsyms |
				awk '$3 ~ /_send$/ { print "post_send", $1 } $3 ~ /_rec(v|eive)$/ { print "post_recv", $1 }')
		fi
		echo "$POSTS"
	} >"$base.plugin"
	grep -q '^root ' "$base.plugin" && grep -q '^post_send ' "$base.plugin" &&
		"$RISER_BENCH_MARK" "$base.plugin"
}

# The modules whose instructions the report counts: the initiators' own,
# the RDMA drivers, and the layers around them.
MAP_MODULES="riser ib_iser iscsi_tcp libiscsi_tcp libiscsi scsi_transport_iscsi nvme_rdma nvme_fabrics nvme_core rdma_rxe siw ib_core rdma_cm iw_cm ib_cm ib_isert iscsi_target_mod target_core_mod target_core_iblock target_core_file nvmet nvmet_rdma null_blk"
declare -A TEXT_SIZE
# text_size MODULE: TEXT_SIZE[MODULE's .ko], the size of its .text in hex
# (the .ko is riser's own build for riser, the kernel's module otherwise),
# read once per .ko (readelf costs the guest a fork and an exec).
text_size() {
	local ko
	case $1 in
	riser) if [ "$RISER_LOADED" = b ]; then ko=$KO_B; else ko=$KO; fi ;;
	*) ko=$(modinfo -n "$1") || return 1 ;;
	esac
	KO_OF=$ko
	# A distribution's modules are compressed (.ko.xz, .ko.zst).
	local elf=$ko
	case $ko in
	*.xz) elf=/tmp/bench-ko.elf; xz -dc "$ko" >"$elf" || return 1 ;;
	*.zst) elf=/tmp/bench-ko.elf; zstd -qdc "$ko" >"$elf" || return 1 ;;
	esac
	[ -n "${TEXT_SIZE[$ko]:-}" ] ||
		TEXT_SIZE[$ko]=$(readelf -SW "$elf" | awk '$0 ~ / \.text / { for (i = 1; i <= NF; i++) if ($i == "PROGBITS") print "0x" $(i + 3) }')
	[ -n "${TEXT_SIZE[$ko]}" ]
}
# module_map BASE INIT: BASE.modules, a line "MODULE TEXT-ADDRESS
# TEXT-SIZE" for every module of MAP_MODULES loaded now (module addresses
# change with every load), and for the iSER initiators BASE.kallsyms,
# their symbols, which name their functions in the report.
module_map() {
	local base=$1 init=$2 m a
	for m in $MAP_MODULES; do
		[ -r "/sys/module/$m/sections/.text" ] || continue
		# Not in a subshell: TEXT_SIZE keeps what it read.
		read -r a <"/sys/module/$m/sections/.text" && text_size "$m" || return 1
		echo "$m $a ${TEXT_SIZE[$KO_OF]}"
	done >"$base.modules"
	case $init in
	riser | riser_b | ib_iser | nvme_rdma)
		grep "\[${init%_b}\]\$" /proc/kallsyms >"$base.kallsyms" && test -s "$base.kallsyms" ;;
	esac
}

# ceiling KIND DEV IP: perftest's RDMA WRITE and READ bandwidth over DEV,
# client and server in this guest, through rdma_cm (-R, which iWARP needs),
# 512 KiB messages as the sequential workloads use. perftest now and then
# fails to exchange its results over siw ("Bad wc status 5"), and its
# server then waits for nothing: each tool gets a 30 s limit and a second
# try.
#
# Under -icount a run bounded by time (-D) did not end (2026-11-26: the
# client waited on after its window), one bounded by iterations does:
# 200 messages of 512 KiB, and perftest's clock, which is the guest's
# instruction count there, gives the bandwidth.
ceiling() {
	local kind=$1 dev=$2 ip=$3 t srv try out len=(-D "$RUNTIME")
	case ${RISER_BENCH_QEMU:-} in *icount*) len=(-n 200) ;; esac
	for t in write read; do
		out=$RAW/$kind.ceiling.ib_${t}_bw.txt
		for try in 1 2; do
			progress "$kind ceiling: ib_${t}_bw (try $try)"
			timeout 30 ib_"${t}"_bw -R -d "$dev" -s 524288 "${len[@]}" -F >/dev/null 2>&1 &
			srv=$!
			sleep 1
			timeout 30 ib_"${t}"_bw -R -d "$dev" -s 524288 "${len[@]}" -F "$ip" >"$out" 2>&1
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
# clock under TCG; no call graphs, which cost the guest time) of the whole
# guest while INIT, logged in, runs 4k random reads at QD 32 on DEV; with
# fio's own result (it must have done I/O, or the profile is of an idle
# guest) and the guest's /proc/stat around the recording, to set the
# samples against the guest's busy time. Runs in the last round, after the
# measured workloads of the first target, so it costs no login of its own.
#
# Now and then a recording puts nearly every sample in the idle loop while
# /proc/stat counts the guest half busy (93-99.6 % of the samples in halt
# against 43-58 % idle; sound ones sit 15-20 points above /proc/stat's
# idle share): with RISER_BENCH_PROFILE_TRIES=2 (default 1) such a
# recording is made once more; the report says whether the one kept agrees
# with /proc/stat (PROFILE.halt). A second try over rxe disagreed as often
# as the first (2026-11-23: all three rxe profiles, both tries), and costs
# the bench about 20 s a profile.
profile_run() {
	local kind=$1 init=$2 dev=$3 p=$RAW/$1.$2.profile fpid try ko
	for ((try = 1; try <= ${RISER_BENCH_PROFILE_TRIES:-1}; try++)); do
		progress "$kind $init profile: perf record during randread-4k-qd32x2 (try $try)"
		fio --name=p --filename="$dev" --direct=1 --ioengine=libaio --rw=randread --bs=4k \
			--iodepth=32 --numjobs=2 --group_reporting --time_based --runtime=$((RUNTIME + 2)) \
			--norandommap --randrepeat=0 --size=48M --output-format=json \
			>"$p.fio.json" 2>"$p.fio.err" &
		fpid=$!
		sleep 1
		grep '^cpu ' /proc/stat >"$p.stat0"
		perf record -e cpu-clock -F 999 -a -o /tmp/perf.data \
			-- sleep "$RUNTIME" >/dev/null 2>"$p.record.err"
		grep '^cpu ' /proc/stat >"$p.stat1"
		wait "$fpid"
		# Every (module, symbol) pair: the report adds up the modules'
		# shares. Made now, while the initiator's module is loaded to
		# resolve it.
		perf report -i /tmp/perf.data --sort dso,sym --stdio >"$p.txt" 2>/dev/null
		# PROFILE.halt: both shares, and "agrees" when they do (the report
		# reads it).
		if halt_plausible "$p" >"$p.halt"; then
			echo agrees >>"$p.halt"
			break
		fi
		progress "  $(cat "$p.halt")"
	done
	check "$kind profile: fio ran I/O on $init while perf recorded" \
		grep -Eq '"total_ios" : [1-9]' "$p.fio.json"
	check "$kind profile: perf recorded samples of $init" grep -q '%' "$p.txt"
	if [ "${init%_b}" = riser ]; then
		# perf finds a module's symbols under /lib/modules, and riser.ko is
		# loaded from the source tree: its samples' addresses and riser's
		# symbols from /proc/kallsyms go to the report, which names them.
		perf script -i /tmp/perf.data -F ip,dso 2>/dev/null |
			awk '$2 == "([riser])" { print $1 }' >"$p.riser-ips"
		grep '\[riser\]$' /proc/kallsyms >"$p.kallsyms"
		check "$kind profile: riser's symbols kept from /proc/kallsyms" test -s "$p.kallsyms"
	fi
	# Where the initiator's code is: perf gives a module the address range
	# of /proc/modules, its text address and its whole size, and since the
	# kernel allocates a module's text, data and rodata apart, that range
	# also covers text allocated after the module's (modules loaded later),
	# and another module's range may cover this one's text. The report
	# counts as the initiator's the samples inside its .text, from every
	# sample's address and the section's address and size.
	case $init in
	riser) ko=$KO ;;
	riser_b) ko=$KO_B ;;
	*) ko=$(modinfo -n "$init") ;;
	esac
	perf script -i /tmp/perf.data -F ip 2>/dev/null >"$p.ips"
	{
		cat "/sys/module/${init%_b}/sections/.text"
		readelf -SW "$ko" | awk '$0 ~ / \.text / { for (i = 1; i <= NF; i++) if ($i == "PROGBITS") print "0x" $(i + 3) }'
	} >"$p.text"
	check "$kind profile: $init's .text located (address and size)" \
		test "$(wc -l <"$p.text")" = 2
}

# halt_plausible PROFILE: the share of PROFILE's samples in the idle loop's
# halt is at most 25 points above the share of idle time in /proc/stat
# over the same seconds (PROFILE.stat0, .stat1); prints both. The idle
# loop's symbols are bench-report's IDLE_SYMS.
halt_plausible() {
	local halt idle
	local syms='pv_native_safe_halt|native_safe_halt|default_idle|default_idle_call|cpu_idle_poll|acpi_safe_halt'
	halt=$(awk -v re="^($syms)\$" '$1 ~ /%$/ && $NF ~ re { s += $1 + 0 } END { printf "%.1f", s }' "$1.txt")
	# idle and iowait over all the jiffies of the cpu line.
	idle=$(cat "$1.stat0" "$1.stat1" | awk '
		{ t = 0; for (i = 2; i <= NF; i++) t += $i; it = $5 + $6 }
		NR == 1 { t0 = t; i0 = it }
		NR == 2 { printf "%.1f", (t > t0 ? 100 * (it - i0) / (t - t0) : 0) }')
	echo "$halt % of the samples in halt, $idle % idle in /proc/stat"
	awk -v h="$halt" -v i="$idle" 'BEGIN { exit !(h <= i + 25) }'
}

# One RDMA device: targets, rounds, ceiling, profile, teardown.
bench_device() {
	local kind=$1 ip iqn_rd iqn_nb inits dev r i order targets
	if [ "$kind" = siw ]; then
		ip=192.168.78.1 dev=siw0
		# iscsi_tcp does not use the RDMA device: measured over rxe only.
		inits=(riser ${KO_B:+riser_b} ib_iser nvme_rdma)
	else
		ip=192.168.77.1 dev=rxe0
		inits=(riser ${KO_B:+riser_b} ib_iser nvme_rdma iscsi_tcp)
	fi
	# RISER_BENCH_INITIATORS: only those (a change measured A/B needs
	# riser and riser_b alone).
	if [ -n "${RISER_BENCH_INITIATORS:-}" ]; then
		for i in "${!inits[@]}"; do
			case " $RISER_BENCH_INITIATORS " in *" ${inits[$i]} "*) ;; *) unset "inits[$i]" ;; esac
		done
		inits=("${inits[@]}")
	fi
	# nvme-rdma is served the null_blk disk: without it, no nvme-rdma.
	case " $BACKENDS " in *" null_blk "*) ;; *)
		for i in "${!inits[@]}"; do [ "${inits[$i]}" != nvme_rdma ] || unset "inits[$i]"; done
		inits=("${inits[@]}") ;;
	esac
	# The device's post entries, for the counting plugin: found once per device.
	POSTS=
	# bench-mark reads the device's counters.
	export RISER_BENCH_RDMA=$dev
	iqn_rd=iqn.2026-11.org.riser:bench-$kind-rd
	iqn_nb=iqn.2026-11.org.riser:bench-$kind-nullb
	progress "$kind: device, targets"
	check "$kind: RDMA device created" setup_rdma "$kind" "$ip"
	targets=()
	case " $BACKENDS " in *" rd_mcp "*)
		check "$kind: LIO rd_mcp target" lio_rd_target "$iqn_rd" "$ip" 64 "$kind"
		targets+=("$iqn_rd@rd_mcp") ;;
	esac
	case " $BACKENDS " in *" null_blk "*)
		check "$kind: LIO null_blk (iblock) target" lio_nullblk_target "$iqn_nb" "$ip" 64 "$kind"
		targets+=("$iqn_nb@null_blk") ;;
	esac
	NVME_NQN=nqn.2026-11.org.riser:bench-$kind-nullb
	case " ${inits[*]} " in *" nvme_rdma "*)
		check "$kind: nvmet-rdma target on the null_blk disk" \
			nvmet_target "$NVME_NQN" "$ip" "/dev/$(_lio_bs_name "$iqn_nb")" ;;
	esac
	# riser and ib_iser share the iface "iser": one discovery per iface.
	for i in $(for i in "${inits[@]}"; do iface_of "$i"; done | sort -u); do
		check "$kind: discovery through iface $i" iscsi_discover "$ip" "$i"
	done
	for ((r = 1; r <= ROUNDS; r++)); do
		# Rotate the order every round so none always runs first.
		order=("${inits[@]:$(((r - 1) % ${#inits[@]}))}" "${inits[@]:0:$(((r - 1) % ${#inits[@]}))}")
		for i in "${order[@]}"; do
			measure "$kind" "$ip" "$i" "$r" "${targets[@]}"
		done
	done
	# No iSER connection may outlive its logout into the ceiling's runs:
	# the C ib_iser ends its QPs after iscsiadm's logout has returned, and
	# on 2026-11-24 one still there over siw took a fatal error while
	# ib_read_bw ran (ib_iser: "detected conn error (1011)" on a connection
	# iscsid had shut down; isert: "QP fatal error"), after which LIO's
	# session close spun in iscsit_close_session and the teardown hung.
	# Unloading the initiators waits until their connections are gone.
	check "$kind: the iSER initiators unloaded before the ceiling" unload_iser_initiators
	ceiling "$kind" "$dev" "$ip"
	progress "$kind: teardown"
	check "$kind: nvmet torn down" nvmet_teardown
	check "$kind: LIO torn down" lio_teardown
	check "$kind: RDMA device removed" rdma_delete "$kind"
}

dmesg_live

{
	echo "kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) CPU(s), clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource), QEMU ${RISER_BENCH_QEMU:-none}, rounds $ROUNDS, runtime ${RUNTIME}s + ramp $RAMP (each workload), backends $BACKENDS"
	grep -m1 'model name' /proc/cpuinfo
	fio --version
	ib_write_bw --version 2>&1 | head -1
	[ -z "$KO_B" ] || echo "riser_b: $KO_B (md5 $(md5sum <"$KO_B" | cut -c1-12); riser's $(md5sum <"$KO" | cut -c1-12))"
} >"$RAW/meta.txt" 2>&1
check "riser's dependencies load" load_deps
# A distribution's kernel has the SCSI disk driver as a module.
[ -d /sys/module/sd_mod ] || modprobe -q sd_mod 2>/dev/null
# perf: kernel symbols, and sampling of the whole guest.
echo 0 >/proc/sys/kernel/kptr_restrict
echo -1 >/proc/sys/kernel/perf_event_paranoid
check "iscsid started" iscsi_start
for kind in $DEVICES; do
	bench_device "$kind"
done
if [ -d /sys/module/riser ]; then check "rmmod riser" rmmod riser; fi
if [ -d /sys/module/ib_iser ]; then check "rmmod ib_iser" rmmod ib_iser; fi
if [ -d /sys/module/nvme_rdma ]; then check "rmmod nvme_rdma" modprobe -r nvme-rdma; fi
check "iscsid stopped" iscsi_stop
progress "done"
save_dmesg
