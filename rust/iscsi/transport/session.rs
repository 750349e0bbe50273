// SPDX-License-Identifier: GPL-2.0

//! Sessions (each with its SCSI host and its task slots) and connections
//! as libiscsi makes and frees them.

use super::{
    super::{
        task::TaskSlot,
        TransportOps, //
    },
    *, //
};
use crate::{
    bindings,
    kernel_ext::scsi::{
        Host,
        HostConfig, //
    },
};
use core::{
    ptr::{
        null_mut,
        NonNull, //
    },
    sync::atomic::Ordering, //
};
use kernel::num::casts::FromSafeCast;
use kernel::{
    prelude::*,
    sync::Arc,
    time::{
        delay::fsleep,
        Delta,
        Instant,
        Monotonic, //
    },
};

/// The `iscsi_session` of a class session.
///
/// # Safety
///
/// `cls` must be a live session made by libiscsi.
pub(super) unsafe fn session_of(
    cls: *mut bindings::iscsi_cls_session,
) -> *mut bindings::iscsi_session {
    // SAFETY: libiscsi's class sessions carry the `iscsi_session` as dd_data.
    unsafe { (*cls).dd_data.cast() }
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with `ep` null or a live endpoint.
pub(super) unsafe extern "C" fn create_session_callback<T: TransportOps>(
    ep: *mut bindings::iscsi_endpoint,
    cmds_max: u16,
    qdepth: u16,
    initial_cmdsn: u32,
) -> *mut bindings::iscsi_cls_session {
    let ep = if ep.is_null() {
        None
    } else {
        // SAFETY: A callback of `T`.
        match unsafe { ep_lookup::<T>(ep) } {
            Some(e) => Some(e),
            None => return null_mut(),
        }
    };
    match create_session::<T>(ep.as_ref(), cmds_max, qdepth, initial_cmdsn) {
        Ok(s) => s.as_ptr(),
        Err(e) => {
            pr_err!("cannot create a session: {:?}\n", e);
            null_mut()
        }
    }
}

pub(super) fn create_session<T: TransportOps>(
    ep: Option<&Arc<T::Ep>>,
    cmds_max: u16,
    qdepth: u16,
    initial_cmdsn: u32,
) -> Result<NonNull<bindings::iscsi_cls_session>> {
    let reg = T::registry();
    let (sht, tt, scsi) = (
        reg.sht.load(Ordering::Acquire),
        reg.tt.load(Ordering::Acquire),
        reg.scsi.load(Ordering::Acquire),
    );
    if sht.is_null() || tt.is_null() || scsi.is_null() {
        return Err(ENODEV);
    }
    let lim = T::session_limits(ep, cmds_max)?;
    let dev = ep.and_then(|e| T::ep_device(e));
    let cfg = HostConfig {
        can_queue: lim.can_queue,
        cmd_per_lun: i16::try_from(qdepth).unwrap_or(i16::MAX),
        sg_tablesize: lim.sg_tablesize,
        max_sectors: lim.max_sectors,
        max_lun: u64::from(lim.max_lun),
        virt_boundary_4k: lim.virt_boundary_4k,
    };
    // SAFETY: `sht` and `scsi` are the registered transport's, live until
    // it unregisters, which waits for its sessions (invariant of
    // `Registry`).
    let mut host = unsafe { Host::new_iscsi(sht, scsi, &cfg)? };
    host.add(dev.as_deref())?;
    let slot_size = c_int::try_from(size_of::<TaskSlot<T>>())?;
    // SAFETY: `tt` is the registered transport; the host is added.
    let cls = unsafe {
        bindings::iscsi_session_setup(
            tt,
            host.as_raw(),
            lim.can_queue,
            0,
            slot_size,
            initial_cmdsn,
            0,
        )
    };
    // On failure the host is dropped: removed and freed.
    let cls = NonNull::new(cls).ok_or(ENOMEM)?;
    // The session owns the host from now on; `destroy_session_callback`
    // takes it back.
    let _ = host.into_raw();
    // SAFETY: The session was just set up: `cmds` holds `cmds_max` tasks
    // whose `dd_data` areas are `slot_size` bytes, not yet used, and stay
    // in place until the session is torn down.
    unsafe {
        let s = session_of(cls.as_ptr());
        for i in 0..(*s).cmds_max.unsigned_abs() {
            let task = *(*s).cmds.add(usize::from_safe_cast(i));
            TaskSlot::<T>::init((*task).dd_data.cast::<TaskSlot<T>>(), task);
        }
    }
    Ok(cls)
}

/// How many [`super::TaskRef`]s are alive on the tasks of `s`.
///
/// # Safety
///
/// `s` must be a live session made by `create_session::<T>`.
pub(super) unsafe fn task_refs<T: TransportOps>(s: *mut bindings::iscsi_session) -> u32 {
    let mut n = 0u32;
    // SAFETY: The session is live; `create_session` initialised a slot in
    // every task's dd_data.
    unsafe {
        for i in 0..(*s).cmds_max.unsigned_abs() {
            let task = *(*s).cmds.add(usize::from_safe_cast(i));
            let slot = (*task).dd_data.cast::<TaskSlot<T>>();
            n = n.saturating_add((*slot).head.refs.count.load(Ordering::Acquire));
        }
    }
    n
}

/// How long the teardown of a connection or session waits for the
/// transport's [`super::TaskRef`]s to go: a transport may drop them after
/// the connection stopped, once its resources are freed.
const TASK_REFS_WAIT_MS: i64 = 30_000;

/// Waits until no [`super::TaskRef`] is alive on the tasks of `s`, or
/// [`TASK_REFS_WAIT_MS`] passed; returns how many are left. Sleeps.
///
/// # Safety
///
/// `s` must be a live session made by `create_session::<T>`.
pub(super) unsafe fn wait_task_refs<T: TransportOps>(s: *mut bindings::iscsi_session) -> u32 {
    let start = Instant::<Monotonic>::now();
    loop {
        // SAFETY: The session is live (function contract).
        let n = unsafe { task_refs::<T>(s) };
        if n == 0 || start.elapsed().as_millis() >= TASK_REFS_WAIT_MS {
            return n;
        }
        fsleep(Delta::from_millis(10));
    }
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a session made by
/// `create_session_callback::<T>`.
pub(super) unsafe extern "C" fn destroy_session_callback<T: TransportOps>(
    cls: *mut bindings::iscsi_cls_session,
) {
    // SAFETY: The session is live and made by `create_session`.
    let refs = unsafe { wait_task_refs::<T>(session_of(cls)) };
    if refs > 0 {
        // A driver bug: freeing the tasks would leave those references
        // dangling. Leaking the session is the safe way out.
        pr_err!(
            "session destroyed with {} task references still held by the transport \
             after 30 s: leaking it\n",
            refs
        );
        return;
    }
    // SAFETY: The session is live and was made by `create_session`, which
    // initialised every task slot; libiscsi uses no task any more, and no
    // `TaskRef` is left (counted above).
    unsafe {
        let sh = NonNull::new(bindings::riser_iscsi_session_to_shost(cls));
        let s = session_of(cls);
        for i in 0..(*s).cmds_max.unsigned_abs() {
            let task = *(*s).cmds.add(usize::from_safe_cast(i));
            // Emptied, not dropped in place: a slot stays valid for
            // anything that still looks at it before the pool is freed.
            TaskSlot::<T>::take_contents((*task).dd_data.cast::<TaskSlot<T>>());
        }
        bindings::iscsi_session_teardown(cls);
        // The host `create_session` gave the session: removed and freed.
        drop(sh.map(|sh| Host::from_raw_added(sh)));
    }
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live session.
pub(super) unsafe extern "C" fn create_conn_callback<T: TransportOps>(
    cls: *mut bindings::iscsi_cls_session,
    cid: u32,
) -> *mut bindings::iscsi_cls_conn {
    // CAST: a few pointers.
    let size = size_of::<Binding>() as c_int;
    // SAFETY: The session is live; the connection's dd_data is `size` bytes.
    let cls_conn = unsafe { bindings::iscsi_conn_setup(cls, size, cid) };
    if !cls_conn.is_null() {
        // SAFETY: The connection is new; its dd_data is ours, `size` bytes.
        unsafe {
            (*conn_of(cls_conn))
                .dd_data
                .cast::<Binding>()
                .write(Binding::new())
        };
    }
    cls_conn
}

/// The `iscsi_conn` of a class connection.
///
/// # Safety
///
/// `cls` must be a live connection made by libiscsi.
pub(super) unsafe fn conn_of(cls: *mut bindings::iscsi_cls_conn) -> *mut bindings::iscsi_conn {
    // SAFETY: libiscsi's class connections carry the `iscsi_conn` as dd_data.
    unsafe { (*cls).dd_data.cast() }
}
