#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# riser installed the way out-of-tree modules are: `make install` (riser.ko
# into the kernel's updates/ directory with depmod, the modprobe.d rule and
# the initramfs-tools hook), an initramfs built that carries riser.ko and
# the rule, then open-iscsi used with no insmod: iscsid loads the module
# "ib_iser" for transport iser, and the rule makes that riser, with the
# options an `options ib_iser` line gives. Discovery, login, fio verify,
# logout, `modprobe -r ib_iser` unloading riser; then `make uninstall`,
# after which the same request loads the C ib_iser again. Then the same through DKMS: make check has DKMS build
# riser on the host (scripts/dkms-riser sandbox, into out/dkms); here DKMS
# installs that build into this kernel's modules, open-iscsi's request loads
# it, and `dkms remove` takes it away. The guest's /lib/modules and /etc are overlays, so
# nothing reaches the host. KDIR is what a user gives for the running
# kernel: /lib/modules/$(uname -r)/build.

set -u
. "$RISER_TOP/tests/common/lib.sh"
. "$RISER_TOP/tests/common/target.sh"
IP=192.168.77.1
IQN=iqn.2026-11.org.riser:install
KV=$(uname -r)
KDIR=/lib/modules/$KV/build
MAKE_IN=(make -C "$RISER_TOP" --no-print-directory KDIR="$KDIR")

HOOK=/etc/initramfs-tools/hooks/riser
installed() {
	test -f "/lib/modules/$KV/updates/riser.ko" && test -f /etc/modprobe.d/riser.conf &&
		test -x "$HOOK"
}
nothing_installed() {
	test ! -e "/lib/modules/$KV/updates/riser.ko" && test ! -e /etc/modprobe.d/riser.conf &&
		test ! -e "$HOOK"
}
# initramfs_riser: an initramfs built now for this kernel (as
# update-initramfs would, with this machine's initramfs-tools setup, but
# MODULES=list, BUSYBOX=n and COMPRESSLEVEL=1, to keep it short under TCG:
# about 160 s alone, where busybox's applet links alone took 21 s) carries
# riser.ko, the modprobe rule and iscsistart. open-iscsi's hook adds
# ib_iser's modules and iscsistart; riser's hook adds riser.ko, and
# mkinitramfs copies every modprobe.d file. What the guest lacks of a
# booted system is lent for the build: mkinitramfs reads the kernel's
# config from /boot/config-RELEASE (the host's /boot has none for this
# kernel: a tmpfs gets it from the build tree), and the udev hook (which
# open-iscsi's needs) copies /lib/systemd/systemd-udevd, which the
# guest's /lib/systemd does not show (a bind mount gives it, as Debian
# has it, a link to udevadm).
initramfs_riser() {
	local conf=/tmp/irfs-conf img=/tmp/initrd-riser.img d=/tmp/irfs-systemd list n
	if [ ! -e "/boot/config-$KV" ]; then
		mount -t tmpfs riser-boot /boot && cp "$KDIR/.config" "/boot/config-$KV" || return 1
	fi
	if [ ! -e /lib/systemd/systemd-udevd ]; then
		mkdir -p "$d/network" && ln -sf /bin/udevadm "$d/systemd-udevd" &&
			mount --bind "$d" /lib/systemd || return 1
	fi
	rm -rf "$conf" "$img" && cp -a /etc/initramfs-tools "$conf" || return 1
	sed -i -e 's/^MODULES=.*/MODULES=list/' -e 's/^BUSYBOX=.*/BUSYBOX=n/' "$conf/initramfs.conf"
	# The machine's compressor at its fastest level: what is in the image
	# is the same (one guest on a busy host: 268 s for the build at zstd
	# -1, 307 s at its default -9).
	echo "COMPRESSLEVEL=1" >>"$conf/initramfs.conf"
	bounded 400 mkinitramfs -d "$conf" -o "$img" "$KV" >>"$RISER_OUT/guest.log" 2>&1 || {
		echo "mkinitramfs failed (guest.log)"
		return 1
	}
	list=$(lsinitramfs "$img") || return 1
	n=$(grep -cE "(lib/modules/$KV/updates/riser\.ko|etc/modprobe\.d/riser\.conf)$" <<<"$list")
	grep -E "(iscsistart|/ib_iser\.ko|riser)" <<<"$list"
	[ "$n" = 2 ] && grep -q "sbin/iscsistart$" <<<"$list"
}
# options_reached: the `options ib_iser` line written before the load is
# what riser's parameters say.
options_reached() {
	local P=/sys/module/riser/parameters
	echo "max_sectors $(cat $P/max_sectors), debug_level $(cat $P/debug_level)"
	[ "$(cat $P/max_sectors)" = 2048 ] && [ "$(cat $P/debug_level)" = 3 ]
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
discovery_loads_riser() {
	iscsi_discover_lists "$IP" "$IQN" >/dev/null && loaded_only riser ib_iser
}
DKMS_OUT=$RISER_TOP/out/dkms
DKMS_V=$(cat "$DKMS_OUT/version" 2>/dev/null) || DKMS_V=
# DKMS's tree as the host's build left it, in this guest's /var/lib/dkms
# (an overlay); then dkms install (no build: it was built for this kernel).
dkms_install() {
	[ -n "$DKMS_V" ] || { echo "no DKMS build in $DKMS_OUT (scripts/dkms-riser sandbox)"; return 1; }
	mkdir -p /var/lib/dkms && cp -a "$DKMS_OUT/tree/riser" /var/lib/dkms/ &&
		dkms install -m riser -v "$DKMS_V" -k "$KV" &&
		install -D -m 0644 "$RISER_TOP/scripts/modprobe-riser.conf" /etc/modprobe.d/riser.conf
}
dkms_installed() {
	local st
	st=$(dkms status -m riser -v "$DKMS_V" -k "$KV")
	echo "$st"
	grep -q ": installed" <<<"$st" && modinfo_path "/updates/dkms/riser\.ko"
}
# modinfo_path ERE: modinfo finds riser, at a path matching ERE (printed).
modinfo_path() {
	local path
	path=$(modinfo -n riser) || return 1
	echo "$path"
	grep -Eq "$1" <<<"$path"
}
dkms_removed() {
	dkms remove -m riser -v "$DKMS_V" --all && rm -f /etc/modprobe.d/riser.conf &&
		test ! -e "/lib/modules/$KV/updates/dkms/riser.ko" && ! modinfo riser >/dev/null 2>&1
}

dmesg_live

plan 36

check "soft-RoCE device rxe0 created" setup_rxe "$IP"
check "make install (KDIR=$KDIR)" "${MAKE_IN[@]}" install
check "installed: updates/riser.ko and /etc/modprobe.d/riser.conf" installed
check "modinfo finds riser in updates/" modinfo_path "/updates/riser\.ko$"
check "modprobe ib_iser would load riser" modprobe_would "modprobe --ignore-install riser"
check "an initramfs built now carries riser.ko, the rule and iscsistart" initramfs_riser
echo "options ib_iser max_sectors=2048 debug_level=3" >/etc/modprobe.d/ib_iser-options.conf
dmesg_mark
check "LIO rd_mcp target with an iSER portal" lio_rd_target "$IQN" "$IP" 16 rxe
check "iscsid started" iscsi_start
check "neither riser nor ib_iser is loaded" none_loaded
check "discovery with -I iser, no insmod: finds $IQN" iscsi_discover_lists "$IP" "$IQN"
check "open-iscsi's module request loaded riser, not ib_iser" loaded_only riser ib_iser
check "an 'options ib_iser' line reached riser (max_sectors=2048 debug_level=3)" options_reached
rm -f /etc/modprobe.d/ib_iser-options.conf
check "login" iscsi_login "$IQN" "$IP" iser
check "debug_level=3 prints riser's debug messages (the target's CM header at connect)" \
	dmesg_has "riser: target CM header: "

DEV=$(iscsi_dev "$IQN" 0 60 2>>"$RISER_OUT/guest.log") || DEV=
check "block device of LUN 0 appears ($DEV)" test -b "$DEV"
check "the SCSI host is iscsi_iser" iscsi_host_is_iscsi_iser "$IQN"
check "fio randwrite 4k QD8 verify crc32c" fio_verify "$DEV" randwrite 4k 8 1M
check "logout" iscsi_logout "$IQN" "$IP"
check "modprobe -r ib_iser unloads riser (the rule's remove line)" unload_riser 60 modprobe -r ib_iser
check "make uninstall" "${MAKE_IN[@]}" uninstall
check "nothing of riser left in updates/, modprobe.d or initramfs-tools' hooks" nothing_installed
check "modprobe ib_iser would load ib_iser itself" modprobe_would "insmod .*/ib_iser\.ko"
check "discovery with -I iser: open-iscsi's module request now loads ib_iser" \
	discovery_loads_ib_iser
check "rmmod ib_iser" bounded 120 rmmod ib_iser
check "DKMS: installs the riser it built on the host into $KV's modules" dkms_install
check "DKMS: dkms status says installed; modinfo finds updates/dkms/riser.ko" dkms_installed
check "DKMS: discovery with -I iser, no insmod: open-iscsi's request loads riser" discovery_loads_riser
dmesg_mark
check "DKMS: login" iscsi_login "$IQN" "$IP" iser
check "DKMS: debug_level=0 (riser loaded with no options) prints none" \
	dmesg_lacks "riser: target CM header: "
DEV=$(iscsi_dev "$IQN" 0 60 2>>"$RISER_OUT/guest.log") || DEV=
check "DKMS: fio randwrite 4k QD8 verify crc32c ($DEV)" fio_verify "$DEV" randwrite 4k 8 1M
check "DKMS: logout" iscsi_logout "$IQN" "$IP"
check "DKMS: rmmod riser" unload_riser
check "DKMS: dkms remove leaves no riser module" dkms_removed
check "iscsid stopped" iscsi_stop
check "LIO torn down" lio_teardown
check "rxe0 removed" bounded 60 rdma link delete rxe0
save_dmesg
