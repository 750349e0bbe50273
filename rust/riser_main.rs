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
//! Layers: [`proto`] is the pure protocol code (no `unsafe`); [`rdma`],
//! [`scsi`] and [`iscsi`] are the safe abstractions that hold all `unsafe`;
//! [`driver`] uses only those.

mod bindings;
mod driver;
mod iscsi;
mod kunit;
mod proto;
mod rdma;
mod scsi;

use kernel::prelude::*;

module! {
    type: driver::Riser,
    name: "riser",
    authors: ["The riser developers"],
    description: "iSER initiator (iSCSI Extensions for RDMA) in Rust",
    license: "GPL",
    params: {
        max_sectors: u32 {
            default: 1024,
            description: "Max number of sectors in a single scsi command, 8..32768 (default:1024)",
        },
        max_lun: u32 {
            default: 512,
            description: "Max LUNs to allow per session, 1..65536 (default:512)",
        },
        debug_level: i32 {
            default: 0,
            description: "Enable debug tracing if > 0, 0..4 (default:disabled)",
        },
        always_register: bool {
            default: true,
            description: "Always register memory, even for continuous memory regions (default:true)",
        },
        pi_enable: bool {
            default: false,
            description: "Enable T10-PI offload support (default:disabled)",
        },
    },
}
