#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# riser installed the way out-of-tree modules are: `make install` (riser.ko
# into the kernel's updates/ directory with depmod, and the modprobe.d rule),
# then open-iscsi used with no insmod: iscsid loads the module "ib_iser" for
# transport iser, and the rule makes that riser. Discovery, login, fio
# verify, logout; then `make uninstall`, after which the same request loads
# the C ib_iser again. The guest's /lib/modules and /etc are overlays, so
# nothing reaches the host. KDIR is what a user gives for the running
# kernel: /lib/modules/$(uname -r)/build.

set -u
. "$RISER_TOP/tests/guest/lib.sh"
. "$RISER_TOP/tests/guest/target.sh"
IP=192.168.77.1
IQN=iqn.2026-11.org.riser:install
KV=$(uname -r)
KDIR=/lib/modules/$KV/build
MAKE_IN=(make -C "$RISER_TOP" --no-print-directory KDIR="$KDIR")

installed() {
	test -f "/lib/modules/$KV/updates/riser.ko" && test -f /etc/modprobe.d/riser.conf
}
nothing_installed() {
	test ! -e "/lib/modules/$KV/updates/riser.ko" && test ! -e /etc/modprobe.d/riser.conf
}
# modprobe_would PATTERN: what `modprobe ib_iser` would do (printed) names
# PATTERN.
modprobe_would() {
	local out
	out=$(modprobe -n -v ib_iser 2>&1)
	echo "$out"
	grep -Eq "$1" <<<"$out"
}
# loaded_only MODULE OTHER: MODULE is loaded and OTHER is not.
loaded_only() {
	test -d "/sys/module/$1" && test ! -d "/sys/module/$2"
}
none_loaded() {
	test ! -d /sys/module/riser && test ! -d /sys/module/ib_iser
}
discovery_loads_ib_iser() {
	iscsi_discover_lists "$IP" "$IQN" >/dev/null && loaded_only ib_iser riser
}

dmesg_live

plan 24

check "soft-RoCE device rxe0 created" setup_rxe "$IP"
check "make install (KDIR=$KDIR)" "${MAKE_IN[@]}" install
check "installed: updates/riser.ko and /etc/modprobe.d/riser.conf" installed
check "modinfo finds riser in updates/" bash -c "modinfo -n riser | grep -q '/updates/riser.ko$'"
check "modprobe ib_iser would load riser" modprobe_would "modprobe --ignore-install riser"
check "LIO rd_mcp target with an iSER portal" lio_rd_target "$IQN" "$IP" 16 rxe
check "iscsid started" iscsi_start
check "neither riser nor ib_iser is loaded" none_loaded
check "discovery with -I iser, no insmod: finds $IQN" iscsi_discover_lists "$IP" "$IQN"
check "open-iscsi's module request loaded riser, not ib_iser" loaded_only riser ib_iser
check "login" iscsi_login "$IQN" "$IP" iser
DEV=$(iscsi_dev "$IQN" 0 60 2>>"$RISER_OUT/guest.log") || DEV=
check "block device of LUN 0 appears ($DEV)" test -b "$DEV"
check "the SCSI host is iscsi_iser" iscsi_host_is_iscsi_iser "$IQN"
check "fio randwrite 4k QD8 verify crc32c" fio_verify "$DEV" randwrite 4k 8 1M
check "logout" iscsi_logout "$IQN" "$IP"
check "rmmod riser" unload_riser
check "make uninstall" "${MAKE_IN[@]}" uninstall
check "nothing of riser left in updates/ or modprobe.d" nothing_installed
check "modprobe ib_iser would load ib_iser itself" modprobe_would "insmod .*/ib_iser\.ko"
check "discovery with -I iser: open-iscsi's module request now loads ib_iser" \
	discovery_loads_ib_iser
check "iscsid stopped" iscsi_stop
check "rmmod ib_iser" rmmod ib_iser
check "LIO torn down" lio_teardown
check "rxe0 removed" rdma link delete rxe0
save_dmesg
