// SPDX-License-Identifier: GPL-2.0

//! libiscsi's tasks and connections as the transport sees them.

use super::TransportOps;
use crate::{
    bindings,
    rdma::conn::{DeviceRef, DmaDir, DmaSg},
};
use core::{
    marker::PhantomData,
    ptr::{null_mut, NonNull},
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::prelude::*;

/// The ITT of PDUs that expect no response (libiscsi's RESERVED_ITT).
const RESERVED_ITT: u32 = 0xffff_ffff;

/// The BHS length.
pub(crate) const BHS_LEN: usize = 48;

/// What riser keeps in each libiscsi task's `dd_data`: the header libiscsi
/// builds PDUs in, the data mapping (owned by the layer, so it is always
/// undone in cleanup) and the driver's data.
///
/// # Invariants
///
/// Written once per task slot when the session is made and dropped in place
/// when it is destroyed; `hdr` is where the task's `hdr` points.
#[repr(C)]
pub(super) struct TaskSlot<T: TransportOps> {
    pub(super) hdr: bindings::iscsi_hdr,
    pub(super) sg: Option<DmaSg>,
    pub(super) data: T::TaskData,
}

/// The direction of a SCSI command's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// No data.
    None,
    /// The target sends data (READ).
    Read,
    /// The initiator sends data (WRITE).
    Write,
    /// Both ways: not supported by iSER initiators.
    Bidi,
}

/// A libiscsi task, borrowed during a transport callback.
///
/// # Invariants
///
/// `ptr` is a live task of a session of transport `T`, whose `dd_data` holds
/// an initialised `TaskSlot<T>`; libiscsi serialises the callbacks of one
/// task (init, xmit under `frwd_lock`, cleanup under `back_lock`).
pub(crate) struct Task<'a, T: TransportOps> {
    ptr: NonNull<bindings::iscsi_task>,
    _p: PhantomData<(&'a (), T)>,
}

/// An unsolicited Data-Out PDU to send: its BHS and the part of the data it
/// carries.
pub(crate) struct DataOut {
    /// The BHS libiscsi built.
    pub(crate) bhs: [u8; BHS_LEN],
    /// Offset of the data in the command's buffer.
    pub(crate) offset: u32,
    /// Length of the data.
    pub(crate) len: u32,
}

impl<'a, T: TransportOps> Task<'a, T> {
    /// # Safety
    ///
    /// `ptr` must satisfy the type invariant for `'a`.
    pub(super) unsafe fn from_raw(ptr: *mut bindings::iscsi_task) -> Option<Self> {
        Some(Self {
            ptr: NonNull::new(ptr)?,
            _p: PhantomData,
        })
    }

    fn raw(&self) -> &bindings::iscsi_task {
        // SAFETY: The task is live (type invariant).
        unsafe { &*self.ptr.as_ptr() }
    }

    fn slot(&self) -> &TaskSlot<T> {
        // SAFETY: `dd_data` holds an initialised slot (type invariant).
        unsafe { &*self.raw().dd_data.cast::<TaskSlot<T>>() }
    }

    /// The task's slot index in the session's pool (the ITT's low bits).
    pub(crate) fn index(&self) -> u32 {
        self.raw().itt.unsigned_abs()
    }

    /// Whether this is a SCSI command (else a management PDU).
    pub(crate) fn is_scsi(&self) -> bool {
        !self.raw().sc.is_null()
    }

    /// The header libiscsi built, as sent on the wire.
    pub(crate) fn bhs(&self) -> [u8; BHS_LEN] {
        // SAFETY: `hdr` points to the slot's `iscsi_hdr` (48 bytes), which
        // libiscsi filled before calling the transport.
        unsafe { core::ptr::read(self.raw().hdr.cast::<[u8; BHS_LEN]>()) }
    }

    /// Whether the PDU expects no response (ITT reserved): the transport
    /// releases such a task once its send completed.
    pub(crate) fn reserved_itt(&self) -> bool {
        // SAFETY: `hdr` is valid (above).
        unsafe { (*self.raw().hdr).itt == RESERVED_ITT }
    }

    /// A management PDU's data segment.
    pub(crate) fn mgmt_data(&self) -> &[u8] {
        let t = self.raw();
        if t.data.is_null() || t.data_count == 0 {
            return &[];
        }
        // SAFETY: libiscsi's `data` holds `data_count` bytes (the connection's
        // data buffer) for as long as the task is being sent.
        unsafe { core::slice::from_raw_parts(t.data.cast::<u8>(), t.data_count as usize) }
    }

    /// The SCSI data direction.
    pub(crate) fn direction(&self) -> Direction {
        let sc = self.raw().sc;
        if sc.is_null() {
            return Direction::None;
        }
        // SAFETY: A SCSI task's `sc` is live while the task is.
        let d = unsafe { (*sc).sc_data_direction };
        if d == bindings::dma_data_direction::DMA_FROM_DEVICE {
            Direction::Read
        } else if d == bindings::dma_data_direction::DMA_TO_DEVICE {
            Direction::Write
        } else if d == bindings::dma_data_direction::DMA_BIDIRECTIONAL {
            Direction::Bidi
        } else {
            Direction::None
        }
    }

    /// The SCSI command's data length.
    pub(crate) fn data_len(&self) -> u32 {
        let sc = self.raw().sc;
        if sc.is_null() {
            return 0;
        }
        // SAFETY: `sc` is live (above).
        unsafe { bindings::riser_scsi_bufflen(sc) }
    }

    /// Bytes of immediate data libiscsi put in the command PDU.
    pub(crate) fn imm_count(&self) -> u32 {
        self.raw().imm_count
    }

    /// Length of the unsolicited Data-Out data (after the immediate data).
    pub(crate) fn unsol_len(&self) -> u32 {
        self.raw().unsol_r2t.data_length
    }

    /// The most data one PDU to the target carries (MaxXmitDataSegmentLength).
    pub(crate) fn max_xmit_dlength(&self) -> u32 {
        // SAFETY: A task being sent has a live connection.
        unsafe { (*self.raw().conn).max_xmit_dlength }
    }

    /// Maps the command's data on `dev`; the mapping lasts until cleanup.
    pub(crate) fn map_data(&self, dev: &DeviceRef) -> Result<&DmaSg> {
        let dir = match self.direction() {
            Direction::Read => DmaDir::FromDevice,
            Direction::Write => DmaDir::ToDevice,
            _ => return Err(EINVAL),
        };
        let sc = self.raw().sc;
        // Only this task's serialised callbacks touch the slot (type
        // invariant), so no other reference to `sg` exists now.
        // SAFETY: `dd_data` holds this task's initialised slot.
        let slot = unsafe { &mut *self.raw().dd_data.cast::<TaskSlot<T>>() };
        drop(slot.sg.take());
        // SAFETY: The command's scatterlist stays valid until the task is
        // cleaned up, which drops the mapping first (`unmap_data`).
        let sg = unsafe {
            DmaSg::map(
                dev,
                bindings::riser_scsi_sglist(sc),
                bindings::riser_scsi_sg_count(sc),
                dir,
            )?
        };
        Ok(slot.sg.insert(sg))
    }

    /// The data mapping made by [`Task::map_data`], if any.
    pub(crate) fn mapping(&self) -> Option<&DmaSg> {
        self.slot().sg.as_ref()
    }

    pub(super) fn unmap_data(&self) {
        // SAFETY: As in `map_data`.
        let slot = unsafe { &mut *self.raw().dd_data.cast::<TaskSlot<T>>() };
        drop(slot.sg.take());
    }

    /// The next unsolicited Data-Out PDU, if unsolicited data is left.
    pub(crate) fn next_data_out(&self) -> Option<DataOut> {
        let p = self.ptr.as_ptr();
        // SAFETY: The task is live and being sent (xmit holds its
        // serialisation), as `iscsi_prep_data_out_pdu` needs.
        unsafe {
            if !bindings::riser_iscsi_task_has_unsol_data(p) {
                return None;
            }
            let mut hdr = bindings::iscsi_data::default();
            let r2t = &raw mut (*p).unsol_r2t;
            bindings::iscsi_prep_data_out_pdu(p, r2t, &mut hdr);
            Some(DataOut {
                bhs: core::ptr::read((&raw const hdr).cast::<[u8; BHS_LEN]>()),
                offset: (*r2t).data_offset + (*r2t).sent.unsigned_abs(),
                len: (*r2t).data_count.unsigned_abs(),
            })
        }
    }

    /// The Data-Out from [`Task::next_data_out`] was posted.
    pub(crate) fn data_out_sent(&self, d: &DataOut) {
        // SAFETY: As in `next_data_out`.
        unsafe { (*self.ptr.as_ptr()).unsol_r2t.sent += c_int::try_from(d.len).unwrap_or(0) };
    }

    /// The Data-Out from [`Task::next_data_out`] could not be posted; it
    /// will be prepared again.
    pub(crate) fn data_out_failed(&self) {
        // SAFETY: As in `next_data_out`.
        unsafe { (*self.ptr.as_ptr()).unsol_r2t.datasn -= 1 };
    }

    /// Takes over the task's reference for a PDU that expects no response;
    /// dropping the returned value releases the task.
    pub(crate) fn take_ref(&self) -> TaskRef {
        TaskRef(self.ptr)
    }
}

/// One reference on a libiscsi task, released when dropped.
///
/// # Invariants
///
/// Owns one reference of the task's refcount.
pub(crate) struct TaskRef(NonNull<bindings::iscsi_task>);

// SAFETY: `iscsi_put_task` may be called from any context.
unsafe impl Send for TaskRef {}

impl Drop for TaskRef {
    fn drop(&mut self) {
        // SAFETY: This value owns one reference (type invariant).
        unsafe { bindings::iscsi_put_task(self.0.as_ptr()) };
    }
}

/// A libiscsi connection, borrowed while bound to an endpoint.
///
/// # Invariants
///
/// `ptr` is a live, bound `iscsi_conn`.
pub(crate) struct Conn {
    ptr: NonNull<bindings::iscsi_conn>,
}

impl Conn {
    /// # Safety
    ///
    /// `ptr` must be a live, bound connection for the borrow's duration.
    pub(super) unsafe fn from_raw(ptr: *mut bindings::iscsi_conn) -> Option<Self> {
        Some(Self {
            ptr: NonNull::new(ptr)?,
        })
    }

    /// The session's task pool size (task indexes are below it).
    pub(crate) fn cmds_max(&self) -> u32 {
        // SAFETY: A bound connection has a live session.
        unsafe { (*(*self.ptr.as_ptr()).session).cmds_max.unsigned_abs() }
    }

    /// Hands a received PDU to libiscsi. `hdr` is its BHS, `data` its data
    /// segment (already bounded by the receive).
    pub(crate) fn complete_pdu(&self, hdr: &[u8; BHS_LEN], data: &[u8]) -> Result {
        let mut h = bindings::iscsi_hdr::default();
        // SAFETY: `iscsi_hdr` is 48 bytes of plain data.
        unsafe { core::ptr::copy_nonoverlapping(hdr.as_ptr(), (&raw mut h).cast::<u8>(), BHS_LEN) };
        let len = c_int::try_from(data.len())?;
        // SAFETY: The connection is live (type invariant); libiscsi copies
        // what it keeps of `data`, which it only reads.
        let rc = unsafe {
            bindings::iscsi_complete_pdu(
                self.ptr.as_ptr(),
                &mut h,
                data.as_ptr().cast_mut().cast(),
                len,
            )
        };
        // CAST: the error codes are small positive numbers.
        if rc != 0 && rc != bindings::iscsi_err_ISCSI_ERR_NO_SCSI_CMD as c_int {
            return Err(EPROTO);
        }
        Ok(())
    }

    /// Fails the connection: libiscsi starts recovery through iscsid.
    pub(crate) fn failure(&self) {
        // SAFETY: The connection is live (type invariant).
        unsafe {
            bindings::iscsi_conn_failure(
                self.ptr.as_ptr(),
                bindings::iscsi_err_ISCSI_ERR_CONN_FAILED,
            )
        };
    }
}

/// Where an endpoint finds the iSCSI connection bound to it: set by the
/// layer at bind, cleared at stop after the driver's `stop` returned (so no
/// completion reads it afterwards).
pub(crate) struct ConnSlot(AtomicPtr<bindings::iscsi_conn>);

impl ConnSlot {
    /// An empty slot.
    pub(crate) const fn new() -> Self {
        Self(AtomicPtr::new(null_mut()))
    }

    pub(super) fn set(&self, c: *mut bindings::iscsi_conn) {
        self.0.store(c, Ordering::Release);
    }

    /// Runs `f` with the bound connection, if any.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Conn) -> R) -> Option<R> {
        let p = self.0.load(Ordering::Acquire);
        // The layer clears the slot in stop_conn after the driver stopped
        // every path that reads it, before libiscsi tears the connection down.
        // SAFETY: So a non-null pointer is a live, bound connection.
        let c = unsafe { Conn::from_raw(p) }?;
        Some(f(&c))
    }
}
