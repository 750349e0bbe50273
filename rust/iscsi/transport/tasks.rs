// SPDX-License-Identifier: GPL-2.0

//! The task callbacks: the BHS slot, init, transmit and cleanup.

use super::{
    super::{
        context::LockedCallback,
        task::{
            TaskSlot,
            BHS_LEN, //
        },
        Task,
        TransportOps,
        XmitTask, //
    },
    *, //
};
use crate::bindings;
use kernel::{
    error::from_result,
    prelude::*, //
};

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
        (*task).hdr = (*slot).head.hdr.get();
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
    from_result(|| {
        if T::INIT_UNSOL_ONLY {
            // SAFETY: The task is live (function contract); libiscsi set
            // its SCSI command and unsolicited data before this call.
            let (sc, unsol) = unsafe { ((*task).sc, (*task).unsol_r2t.data_length) };
            if !sc.is_null() && unsol == 0 {
                return Ok(0);
            }
        }
        // SAFETY: The task is live; its connection is set.
        let Some(ep) = (unsafe { bound_ep::<T>((*task).conn) }) else {
            // No endpoint: the connection is going away. libiscsi fails a
            // command whose init_task fails (DID_ABORT, an I/O error), and
            // requeues one whose xmit_task fails: that one refuses it.
            return Ok(0);
        };
        // SAFETY: The task satisfies `Task`'s invariant during the callback.
        let t = unsafe { Task::<T>::from_raw(task) }.ok_or(EINVAL)?;
        // libiscsi holds the session's frwd_lock: what would take it again
        // is refused or deferred while this lives.
        // SAFETY: Bottom halves are off until `locked` is dropped, before
        // this returns: libiscsi calls `init_task` under `frwd_lock`, which
        // it takes with `spin_lock_bh` or in a softirq handler (a timer's,
        // the receive path's), the layer's hosts having no transmit
        // workqueue (`iscsi_host_alloc(.., false)`); the transport's
        // `init_task` is given its endpoint and task only.
        let locked = unsafe { LockedCallback::enter() };
        let r = T::init_task(&ep, &t);
        drop(locked);
        r.map(|()| 0)
    })
}

/// # Safety
///
/// Called by libiscsi only, with a live task of a session of `T`.
pub(super) unsafe extern "C" fn xmit_task_callback<T: TransportOps>(
    task: *mut bindings::iscsi_task,
) -> c_int {
    from_result(|| {
        // SAFETY: As in `init_task_callback`.
        let ep = unsafe { bound_ep::<T>((*task).conn) }.ok_or(ENODEV)?;
        // The task is live on entry, held by libiscsi's reference; with no
        // transmit workqueue that is the command's own, which a response on
        // another CPU may drop as soon as the PDU is posted. `guard` below takes
        // the layer's reference before the driver posts anything, and that one
        // keeps `Task`'s invariant for the rest of the call. libiscsi sends it
        // under the session's frwd_lock, so its data buffer and unsolicited
        // R2T are this call's.
        // SAFETY: The task is live here, as said above, and being sent.
        let mut t = unsafe { XmitTask::<T>::from_raw(task) }.ok_or(EINVAL)?;
        // A response on another CPU may complete the task as soon as its PDU
        // is posted: this reference keeps it (and its SCSI command) until the
        // driver is done with it.
        let guard = t.call_ref().ok_or(EINVAL)?;
        // As in `init_task_callback`: libiscsi holds the frwd_lock.
        // SAFETY: As in `init_task_callback`: bottom halves are off until
        // `locked` is dropped (`xmit_task` runs under `frwd_lock`, and
        // `iscsi_xmit_task`, which drops it around the call, only from a
        // transmit workqueue these hosts do not have); the transport's
        // `xmit_task` is given its endpoint, task and slot only.
        let locked = unsafe { LockedCallback::enter() };
        // SAFETY: Once for this `XmitTask`, here.
        let slot = unsafe { t.slot_token() };
        let r = T::xmit_task(ep, &mut t, slot, locked.rcu());
        drop(locked);
        if r.is_ok() && t.reserved_itt() {
            // libiscsi leaves the release of a PDU that expects no response to
            // the transport; a driver that still needs the task took its own
            // reference.
            // SAFETY: This drops libiscsi's reference, once: no response will.
            unsafe { bindings::iscsi_put_task(task) };
        }
        drop(guard);
        r.map(|()| 0)
    })
}

/// # Safety
///
/// Called by libiscsi only, with a live task of a session of `T`.
pub(super) unsafe extern "C" fn cleanup_task_callback<T: TransportOps>(
    task: *mut bindings::iscsi_task,
) {
    // libiscsi frees tasks under the session's back_lock, which the
    // transport's code must never run under (the last put of a `TaskRef`
    // takes it): nothing of the transport's is called here. The data is
    // unmapped now, before libiscsi hands the command back to the midlayer.
    // SAFETY: As in `init_task_callback`.
    if let Some(mut t) = unsafe { Task::<T>::from_raw(task) } {
        t.unmap_data();
    }
}
