/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C headers riser's bindings are generated from (scripts/bindgen-module,
 * run by Kbuild at build time). Only the items that kernel::bindings does not
 * already define are generated; the rest are reused from there.
 */
#include <rdma/ib_verbs.h>
#include <rdma/ib_cache.h>
#include <rdma/rdma_cm.h>
#include <scsi/scsi_host.h>
#include <scsi/scsi_cmnd.h>
#include <scsi/scsi_device.h>
#include <scsi/libiscsi.h>
#include <scsi/scsi_transport_iscsi.h>
#include <scsi/iser.h>
#include <net/net_namespace.h>
#include <linux/in6.h>
#include <linux/netlink.h>
#include <linux/percpu-refcount.h>

#include "riser_helpers.h"
