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
///
/// What keeps the device usable for a mapping (a reference on it) is not
/// the mapping's own but its task slot's: a [`SgMapping::Keep`], which
/// the slot keeps from one mapping to the next, so that the commands of a
/// session do not each take and drop one. The layer that owns the slots
/// drops a slot's `Keep` (or puts a fresh `Default` in its place) when the
/// device may have to go: with no mapping made with it alive, when a
/// connection of the session stops.
pub(crate) trait SgMapping: Sized + Send + Sync + 'static {
    /// What the mapping is made for.
    type Device: Send + Sync;

    /// What a task slot keeps between its mappings (`Default`: nothing).
    type Keep: Default + Send + Sync + 'static;

    /// Maps the `nents` entries of `sgl` on `dev` for `dir`, with `keep`
    /// (the slot's), which it may replace (when it was for another device
    /// or held nothing).
    ///
    /// # Safety
    ///
    /// `sgl` must be a valid scatterlist of `nents` entries that stays
    /// valid and unchanged until the returned value is dropped. No mapping
    /// made with `keep` before may be alive, and until the returned value
    /// is dropped `keep` may be neither dropped, replaced nor given to
    /// another call of `map`.
    unsafe fn map(
        dev: &Self::Device,
        keep: &mut Self::Keep,
        sgl: *mut bindings::scatterlist,
        nents: u32,
        dir: DataDirection,
    ) -> Result<Self>;
}
