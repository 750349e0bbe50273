// SPDX-License-Identifier: GPL-2.0

//! The seam between the layer that owns a SCSI command's data and the one
//! that maps it for a device.
//!
//! The iSCSI layer knows how long a command's scatterlist lives (until the
//! task's `cleanup_task`); the RDMA layer knows how to map one for a
//! device. Neither names the other: the transport picks the mapping type
//! ([`crate::iscsi::TransportOps::DataMap`]), the iSCSI layer makes it
//! through [`SgMapping::map`] and drops it at cleanup, and the driver only
//! ever borrows it from the task.

use crate::bindings;
use kernel::{
    dma::DataDirection,
    prelude::*, //
};

/// The C `enum dma_data_direction` value of `dir`, for a mapping: `None`
/// for [`DataDirection::None`], which the DMA API refuses (a `BUG` in
/// `dma_map_*`), so that a mapping is never asked for it.
pub(crate) fn map_dir(dir: DataDirection) -> Option<c_int> {
    let d = match dir {
        DataDirection::Bidirectional => bindings::dma_data_direction::DMA_BIDIRECTIONAL,
        DataDirection::ToDevice => bindings::dma_data_direction::DMA_TO_DEVICE,
        DataDirection::FromDevice => bindings::dma_data_direction::DMA_FROM_DEVICE,
        DataDirection::None => return None,
    };
    Some(d.0)
}

/// Whether the device reads memory mapped for `dir`.
pub(crate) fn device_reads(dir: DataDirection) -> bool {
    matches!(dir, DataDirection::ToDevice | DataDirection::Bidirectional)
}

/// A scatterlist mapped for a device's DMA, unmapped when dropped.
pub(crate) trait SgMapping: Sized + Send + Sync + 'static {
    /// What the mapping is made for.
    type Device: Send + Sync;

    /// Maps the `nents` entries of `sgl` on `dev` for `dir`.
    ///
    /// # Safety
    ///
    /// `sgl` must be a valid scatterlist of `nents` entries that stays
    /// valid and unchanged until the returned value is dropped.
    unsafe fn map(
        dev: &Self::Device,
        sgl: *mut bindings::scatterlist,
        nents: u32,
        dir: DataDirection,
    ) -> Result<Self>;
}
