// SPDX-License-Identifier: GPL-2.0

//! The task callbacks: the BHS slot, init, transmit and cleanup.

use super::{
    super::{
        task::{TaskSlot, BHS_LEN},
        Task, TransportOps,
    },
    *,
};
use crate::bindings;
use kernel::{prelude::*, sync::rcu};

/// # Safety
///
/// Called by libiscsi only, with a live task of a session of `T`.
pub(super) unsafe extern "C" fn alloc_pdu_callback<T: TransportOps>(
    task: *mut bindings::iscsi_task,
    _opcode: u8,
) -> c_int {
    // SAFETY: The task's dd_data holds its slot (made at session creation);
    // the header lives there for the session's life.
    unsafe {
        let slot = (*task).dd_data.cast::<TaskSlot<T>>();
        (*task).hdr = (*slot).hdr.get();
        // CAST: a BHS is 48 bytes.
        (*task).hdr_max = BHS_LEN as u16;
    }
    0
}

/// # Safety
///
/// Called by libiscsi only, with a live task of a session of `T`.
pub(super) unsafe extern "C" fn init_task_callback<T: TransportOps>(
    task: *mut bindings::iscsi_task,
) -> c_int {
    // SAFETY: The task is live; its connection is set.
    let Some(ep) = (unsafe { bound_ep::<T>((*task).conn) }) else {
        // No endpoint: the connection is going away. libiscsi fails a
        // command whose init_task fails (DID_ABORT, an I/O error), and
        // requeues one whose xmit_task fails: that one refuses it.
        return 0;
    };
    // SAFETY: The task satisfies `Task`'s invariant during the callback.
    let Some(t) = (unsafe { Task::<T>::from_raw(task) }) else {
        return EINVAL.to_errno();
    };
    match T::init_task(&ep, &t) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by libiscsi only, with a live task of a session of `T`.
pub(super) unsafe extern "C" fn xmit_task_callback<T: TransportOps>(
    task: *mut bindings::iscsi_task,
) -> c_int {
    // SAFETY: As in `init_task_callback`.
    let Some(ep) = (unsafe { bound_ep::<T>((*task).conn) }) else {
        return ENODEV.to_errno();
    };
    // The task is live on entry, held by libiscsi's reference; with no
    // transmit workqueue that is the command's own, which a response on
    // another CPU may drop as soon as the PDU is posted. `guard` below takes
    // the layer's reference before the driver posts anything, and that one
    // keeps `Task`'s invariant for the rest of the call.
    // SAFETY: The task is live here, as said above.
    let Some(t) = (unsafe { Task::<T>::from_raw(task) }) else {
        return EINVAL.to_errno();
    };
    // A response on another CPU may complete the task as soon as its PDU
    // is posted: this reference keeps it (and its SCSI command) until the
    // driver is done with it.
    let Some(guard) = t.get_ref() else {
        return EINVAL.to_errno();
    };
    let mut t = t;
    let r = T::xmit_task(&ep, &mut t);
    if r.is_ok() && t.reserved_itt() {
        // libiscsi leaves the release of a PDU that expects no response to
        // the transport; a driver that still needs the task took its own
        // reference.
        // SAFETY: This drops libiscsi's reference, once: no response will.
        unsafe { bindings::iscsi_put_task(task) };
    }
    drop(guard);
    match r {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by libiscsi only, with a live task of a session of `T`.
pub(super) unsafe extern "C" fn cleanup_task_callback<T: TransportOps>(
    task: *mut bindings::iscsi_task,
) {
    // Not only libiscsi's teardown frees a task: a reference the transport
    // dropped after the connection stopped does, so the binding may be
    // going (or be a later endpoint's): borrowed inside a read section.
    // libiscsi frees tasks under its back_lock, so nothing here sleeps.
    let rcu = rcu::read_lock();
    // SAFETY: As in `init_task_callback`.
    let ep = unsafe { bound_ep_in::<T>((*task).conn, &rcu) };
    // SAFETY: As in `init_task_callback`.
    if let Some(mut t) = unsafe { Task::<T>::from_raw(task) } {
        T::cleanup_task(ep.as_deref(), &t);
        // Whatever the driver did, the data is unmapped now, before
        // libiscsi hands the command back to the midlayer.
        t.unmap_data();
    }
}
