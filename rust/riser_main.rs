// SPDX-License-Identifier: GPL-2.0

//! riser: an iSER (iSCSI Extensions for RDMA) initiator.
//!
//! riser is the datamover under libiscsi (RFC 5047's Datamover Architecture):
//! libiscsi and scsi_transport_iscsi run the iSCSI layer (login through
//! iscsid, sequencing, task management, recovery), and riser moves PDUs and
//! data over RDMA. It registers the iSCSI transport `iser`, with SCSI hosts
//! named `iscsi_iser`, so the stock open-iscsi tools drive it as they drive
//! the C ib_iser, which it replaces.
//!
//! Layers: [`proto`] is the pure protocol code (no `unsafe`); [`rdma`] and
//! [`iscsi`] are the safe abstractions, and [`kernel_ext`] the smaller ones
//! the `kernel` crate lacks (the SCSI host, `sg` where `iscsi` and `rdma`
//! meet, the module's own workqueue, socket addresses, KUnit skips, and
//! the `registry!` of statics, which has no `unsafe`); [`params`],
//! [`trace`] and [`fault`] are the driver's parameters, tracepoints and
//! test-build fault injection. Those modules hold all `unsafe`; [`driver`]
//! (no `unsafe`) uses them.
//! `Documentation/design.md` has the layer diagram.

// Some items exist for the KUnit suites alone (test helpers, accessors the
// tests check): a kernel without CONFIG_KUNIT (a distribution's) compiles
// the suites out and would call them dead. The test kernels have KUnit, and
// their lint (`make lint`, W=1 -Werror) still finds any other dead code.
#![cfg_attr(not(CONFIG_KUNIT), allow(dead_code))]

mod bindings;
mod driver;
mod fault;
mod iscsi;
mod kernel_ext;
mod params;
mod proto;
mod rdma;
mod trace;

use kernel::prelude::*;

module! {
    type: driver::Riser,
    name: "riser",
    authors: ["The riser developers"],
    description: "iSER initiator (iSCSI Extensions for RDMA) in Rust",
    license: "GPL",
}
