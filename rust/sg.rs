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
use kernel::prelude::*;

/// The direction of a DMA mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DmaDir {
    /// The device reads the memory (sends, RDMA READ sources).
    ToDevice,
    /// The device writes the memory (receives, RDMA WRITE targets).
    FromDevice,
}

impl DmaDir {
    /// The C `enum dma_data_direction` value.
    pub(crate) fn raw(self) -> c_int {
        match self {
            Self::ToDevice => bindings::dma_data_direction::DMA_TO_DEVICE.0,
            Self::FromDevice => bindings::dma_data_direction::DMA_FROM_DEVICE.0,
        }
    }
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
        dir: DmaDir,
    ) -> Result<Self>;
}
