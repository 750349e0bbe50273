// SPDX-License-Identifier: GPL-2.0

//! A connection's binding to its endpoint, and the callbacks that bind,
//! stop and destroy connections or reach them from netlink.

use super::{
    super::{
        task::{
            release_keeps,
            BHS_LEN, //
        },
        Conn,
        ConnSlot,
        CustomStats,
        TransportOps, //
    },
    *, //
};
use crate::bindings;
use core::{
    ptr::{
        null_mut,
        NonNull, //
    },
    sync::atomic::{
        AtomicPtr,
        Ordering, //
    },
};
use kernel::num::casts::FromSafeCast;
use kernel::{
    error::from_result,
    prelude::*,
    sync::{
        rcu,
        Arc,
        ArcBorrow, //
    },
    types::ForeignOwnable, //
};

/// What a connection's `dd_data` holds: the endpoint bound to it, and the
/// slot through which the endpoint reaches it.
///
/// # Invariants
///
/// `ep` is null or came from `Arc::<T::Ep>::into_foreign` at bind, and is
/// taken back once at unbind; `slot` is null or the [`ConnSlot`] that bind
/// set to this connection, which the endpoint in `ep` keeps alive.
/// Written at bind and unbind only; a reader that libiscsi does not order
/// before unbind (a netlink request may race with the connection's
/// cleanup work) clones the endpoint inside an RCU read section, and
/// unbind waits for a grace period before it drops the endpoint.
pub(super) struct Binding {
    ep: AtomicPtr<c_void>,
    slot: AtomicPtr<ConnSlot>,
}

impl Binding {
    /// No endpoint bound.
    pub(super) const fn new() -> Self {
        Self {
            ep: AtomicPtr::new(null_mut()),
            slot: AtomicPtr::new(null_mut()),
        }
    }
}

/// The binding in `conn`'s `dd_data`.
///
/// # Safety
///
/// `conn` must be a live connection made by `create_conn_callback`.
pub(super) unsafe fn binding<'a>(conn: *mut bindings::iscsi_conn) -> &'a Binding {
    // SAFETY: `create_conn_callback` made `dd_data` a `Binding`, alive with
    // the connection.
    unsafe { &*(*conn).dd_data.cast::<Binding>() }
}

/// The endpoint bound to `conn`, if any, borrowed.
///
/// # Safety
///
/// `conn` must be a live connection of a session of transport `T`, and the
/// caller a libiscsi callback that libiscsi runs before the connection is
/// stopped or destroyed (init and xmit of its tasks).
pub(super) unsafe fn bound_ep<'a, T: TransportOps>(
    conn: *mut bindings::iscsi_conn,
) -> Option<ArcBorrow<'a, T::Ep>> {
    // SAFETY: The connection is live (function contract).
    let p = unsafe { binding(conn) }.ep.load(Ordering::Acquire);
    // A non-null pointer came from `Arc::into_foreign` at bind; it is released
    // at stop/destroy, which libiscsi orders after the caller.
    // SAFETY: So it is a live foreign `Arc<T::Ep>` for the borrow.
    (!p.is_null()).then(|| unsafe { Arc::<T::Ep>::borrow(p) })
}

/// The endpoint bound to `conn`, if any, cloned: for callers that may race
/// with the connection's stop (netlink requests).
///
/// # Safety
///
/// `conn` must be a live connection of a session of transport `T`.
pub(super) unsafe fn bound_ep_arc<T: TransportOps>(
    conn: *mut bindings::iscsi_conn,
) -> Option<Arc<T::Ep>> {
    let _rcu = rcu::read_lock();
    // SAFETY: The connection is live (function contract).
    let p = unsafe { binding(conn) }.ep.load(Ordering::Acquire);
    // A non-null pointer loaded in the read section stays a live foreign
    // `Arc` until the section ends: unbind waits for a grace period before
    // dropping it (invariant of `Binding`).
    // SAFETY: Hence the borrow, cloned before the section ends.
    (!p.is_null()).then(|| Arc::from(unsafe { Arc::<T::Ep>::borrow(p) }))
}

/// Clears the slot bind set to `conn`, if any: the endpoint no longer
/// reaches the connection once this returns.
///
/// # Safety
///
/// `conn` must be a live connection made by `create_conn_callback`.
pub(super) unsafe fn clear_slot(conn: *mut bindings::iscsi_conn) {
    // SAFETY: The connection is live (function contract).
    let b = unsafe { binding(conn) };
    let slot = b.slot.swap(null_mut(), Ordering::AcqRel);
    if !slot.is_null() {
        // SAFETY: A non-null slot is the one bind set, kept alive by the
        // endpoint still bound (invariant of `Binding`).
        unsafe { &*slot }.clear(conn);
    }
}

/// Releases the endpoint bound to `conn`, if any, clearing the slot first.
///
/// # Safety
///
/// `conn` must be a live connection of transport `T` whose libiscsi task
/// callbacks have stopped (they borrow the binding without a grace period).
pub(super) unsafe fn unbind_ep<T: TransportOps>(conn: *mut bindings::iscsi_conn) {
    // SAFETY: The connection is live (function contract).
    unsafe { clear_slot(conn) };
    // SAFETY: As above.
    let p = unsafe { binding(conn) }
        .ep
        .swap(null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        // Readers that clone the endpoint in a read section are done.
        rcu::synchronize_rcu();
        // SAFETY: `p` came from `into_foreign` at bind and is released once.
        drop(unsafe { Arc::<T::Ep>::from_foreign(p) });
    }
}

/// The iSCSI class's number of `conn`'s session (0 if it has no class
/// session).
///
/// # Safety
///
/// `conn` must be a live connection.
unsafe fn session_sid(conn: *const bindings::iscsi_conn) -> c_int {
    // SAFETY: The connection is live (contract), and so is its session,
    // whose `cls_session` is null or valid.
    unsafe { (*(*conn).session).cls_session.as_ref() }.map_or(0, |s| s.sid)
}

/// Puts a session back as it was before its first login when a stop with
/// `STOP_CONN_TERM` left it ended and iscsid binds it again.
///
/// iscsid tries a session's first login again on a new connection when a
/// try timed out (a target slow to answer: LIO's login thread waits up to
/// 15 s on a connection that never sends its Login Request, and the logins
/// behind it wait too), and since open-iscsi 2.1.3 it stops the
/// connection with `STOP_CONN_TERM` before the new try. libiscsi takes
/// that stop for the session's end: `ISCSI_STATE_TERMINATE`, and the
/// connection's `stop_stage` kept at `STOP_CONN_TERM`, after which it
/// refuses every Login PDU (EPERM) and ignores every later stop, so each
/// try fails with "Login I/O error, failed to send a PDU" until iscsid
/// gives up, with ib_iser as with riser. A bind after that stop is such a
/// retry (iscsid stops with `STOP_CONN_TERM` otherwise only to destroy the
/// connection and the session: logout, discovery's end, a login given
/// up): the session is made loggable again, its connection as one not
/// yet stopped.
///
/// # Safety
///
/// `conn` must be live, and the caller scsi_transport_iscsi's bind, which
/// holds the connection's `ep_mutex` (no netlink stop or cleanup of it
/// runs meanwhile) and none of the session's locks.
unsafe fn reopen_first_login(conn: *mut bindings::iscsi_conn) {
    // SAFETY: `conn` is live (contract), and so is its session.
    let session = unsafe { (*conn).session };
    // SAFETY: The session is live; this thread holds none of its locks
    // (contract), which libiscsi writes `state` and `stop_stage` under.
    unsafe { bindings::riser_iscsi_session_lock(session) };
    // SAFETY: Both are live, and the session's locks are held: nothing of
    // libiscsi's writes the two fields meanwhile.
    let reset = unsafe {
        let ended = (*session).state == bindings::ISCSI_STATE_TERMINATE as c_int
            && (*conn).stop_stage == bindings::STOP_CONN_TERM as c_int;
        if ended {
            (*session).state = bindings::ISCSI_STATE_FREE as c_int;
            (*conn).stop_stage = 0;
        }
        ended
    };
    // SAFETY: Taken above, on this thread.
    unsafe { bindings::riser_iscsi_session_unlock(session) };
    if reset {
        // SAFETY: The connection is live (contract).
        let sid = unsafe { session_sid(conn) };
        pr_info!(
            "session {}: iscsid tries its first login again after ending it (STOP_CONN_TERM): \
             libiscsi's session made loggable again\n",
            sid
        );
    }
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live session and connection.
pub(super) unsafe extern "C" fn bind_conn_callback<T: TransportOps>(
    cls_session: *mut bindings::iscsi_cls_session,
    cls_conn: *mut bindings::iscsi_cls_conn,
    handle: u64,
    is_leading: c_int,
) -> c_int {
    // SAFETY: Both are live (function contract).
    let r = unsafe { bindings::iscsi_conn_bind(cls_session, cls_conn, is_leading) };
    if r != 0 {
        return r;
    }
    // SAFETY: The connection is live and now bound to the session;
    // scsi_transport_iscsi's bind holds its `ep_mutex` and none of the
    // session's locks.
    unsafe { reopen_first_login(conn_of(cls_conn)) };
    // SAFETY: The handle comes from userspace; the lookup checks it and
    // takes a reference on the endpoint.
    let ep = unsafe { bindings::iscsi_lookup_endpoint(handle) };
    if ep.is_null() {
        pr_err!("bind: no endpoint with handle {:#x}\n", handle);
        return EINVAL.to_errno();
    }
    // SAFETY: A callback of `T`; the lookup's reference keeps `ep` alive.
    let r = match unsafe { ep_lookup::<T>(ep) } {
        Some(e) => {
            // SAFETY: `cls_conn` is live and now bound to the session.
            let conn = unsafe { conn_of(cls_conn) };
            // SAFETY: As above.
            let Some(c) = (unsafe { Conn::from_raw(conn) }) else {
                // SAFETY: Releases the lookup's reference.
                unsafe { bindings::iscsi_put_endpoint(ep) };
                return EINVAL.to_errno();
            };
            match T::bind(&e, &c) {
                Ok(()) => {
                    // SAFETY: The connection is live; replace any earlier
                    // binding (a rebind without stop) cleanly.
                    unsafe { unbind_ep::<T>(conn) };
                    let slot = T::conn_slot(&e);
                    slot.set(conn);
                    // SAFETY: The connection is live.
                    let b = unsafe { binding(conn) };
                    // INVARIANT: the slot lives as long as the endpoint,
                    // held below until unbind.
                    b.slot
                        .store(core::ptr::from_ref(slot).cast_mut(), Ordering::Release);
                    b.ep.store(e.into_foreign(), Ordering::Release);
                    0
                }
                Err(err) => err.to_errno(),
            }
        }
        None => EINVAL.to_errno(),
    };
    // SAFETY: Releases the lookup's reference.
    unsafe { bindings::iscsi_put_endpoint(ep) };
    r
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live connection.
pub(super) unsafe extern "C" fn stop_conn_callback<T: TransportOps>(
    cls_conn: *mut bindings::iscsi_cls_conn,
    flag: c_int,
) {
    // SAFETY: The connection is live.
    let conn = unsafe { conn_of(cls_conn) };
    // SAFETY: As above.
    if let Some(ep) = unsafe { bound_ep_arc::<T>(conn) } {
        // The driver stops its completions and CM paths first.
        T::stop(&ep);
    }
    // The endpoint no longer reaches a connection being stopped.
    // SAFETY: As above.
    unsafe { clear_slot(conn) };
    // SAFETY: The connection is live; libiscsi fails its tasks (the layer's
    // `cleanup_task` calls nothing of the transport's).
    unsafe { bindings::iscsi_conn_stop(cls_conn, flag) };
    // What the session's mappings keep (the device of this connection's
    // transport) goes: the session may come back on another device, or
    // never, and this one may be going. Process context, outside every
    // session lock (scsi_transport_iscsi's netlink path).
    // SAFETY: A live connection of this transport has a live session, made
    // by `create_session::<T>`; this thread holds none of its locks.
    unsafe { release_keeps::<T>((*conn).session) };
    // SAFETY: Nothing reads the binding any more.
    unsafe { unbind_ep::<T>(conn) };
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live, stopped connection.
pub(super) unsafe extern "C" fn destroy_conn_callback<T: TransportOps>(
    cls_conn: *mut bindings::iscsi_cls_conn,
) {
    // SAFETY: The connection is live.
    let conn = unsafe { conn_of(cls_conn) };
    // iscsid may destroy a bound connection it never stopped: stop riser's
    // paths that reach it first.
    // SAFETY: As above.
    if let Some(ep) = unsafe { bound_ep_arc::<T>(conn) } {
        T::stop(&ep);
    }
    // SAFETY: The connection is live; nothing of riser reads the binding
    // any more.
    unsafe { unbind_ep::<T>(conn) };
    // SAFETY: A live connection has a live session, made by `create_session`.
    let refs = unsafe { wait_task_refs::<T>((*conn).session) };
    if refs > 0 {
        // Dropping those references reaches the connection: leak it rather
        // than free it under them (a driver bug; said loudly).
        pr_err!(
            "connection destroyed with {} task references still held by the transport \
             after 30 s: leaking it\n",
            refs
        );
        return;
    }
    // SAFETY: The connection is live and nothing of riser uses it any more.
    unsafe { bindings::iscsi_conn_teardown(cls_conn) };
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live connection and a
/// NUL-terminated `buf` of `buflen` bytes.
pub(super) unsafe extern "C" fn set_param_callback<T: TransportOps>(
    cls_conn: *mut bindings::iscsi_cls_conn,
    param: bindings::iscsi_param,
    buf: *mut c_char,
    buflen: c_int,
) -> c_int {
    let must_be_off = matches!(
        param,
        bindings::iscsi_param_ISCSI_PARAM_HDRDGST_EN
            | bindings::iscsi_param_ISCSI_PARAM_DATADGST_EN
            | bindings::iscsi_param_ISCSI_PARAM_IFMARKER_EN
            | bindings::iscsi_param_ISCSI_PARAM_OFMARKER_EN
    );
    if must_be_off {
        // SAFETY: `buf` is a NUL-terminated string (function contract).
        let v = unsafe { CStr::from_char_ptr(buf) };
        let on = v.to_bytes().first().is_some_and(|&c| c != b'0');
        if on {
            pr_err!(
                "iSER forbids digests and markers, but parameter {} was negotiated on ({})\n",
                param,
                v.to_str().unwrap_or("?")
            );
            return EPROTO.to_errno();
        }
        return 0;
    }
    if param == bindings::iscsi_param_ISCSI_PARAM_MAX_RECV_DLENGTH {
        // What the connection receives is the transport's to say.
        // SAFETY: The connection is live (contract).
        let ep = unsafe { bound_ep_arc::<T>(conn_of(cls_conn)) };
        // SAFETY: `buf` is a NUL-terminated string (contract).
        let asked = unsafe { CStr::from_char_ptr(buf) }
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok());
        if let (Some(have), Some(asked)) = (ep.and_then(|e| T::max_recv_dlength(&e)), asked) {
            if asked > have {
                let mut s = [0u8; 12];
                let n = fmt_u32(have, &mut s);
                // CAST: `n` is at most 11 (a u32's digits and the NUL).
                // SAFETY: `s` is a NUL-terminated decimal number.
                return unsafe {
                    bindings::iscsi_set_param(cls_conn, param, s.as_mut_ptr().cast(), n as c_int)
                };
            }
        }
    }
    // SAFETY: Forwarded unchanged (function contract).
    unsafe { bindings::iscsi_set_param(cls_conn, param, buf, buflen) }
}

/// Writes `v` in decimal and a NUL into `out`; the length without the NUL.
pub(in crate::iscsi) fn fmt_u32(v: u32, out: &mut [u8; 12]) -> usize {
    let mut f = kernel::str::Formatter::new(&mut out[..11]);
    // Ten digits at most: it fits the eleven bytes.
    let _ = core::fmt::Write::write_fmt(&mut f, format_args!("{v}"));
    let n = f.bytes_written().min(11);
    out[n] = 0;
    n
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live connection, a BHS and
/// `data_size` bytes at `data`.
pub(super) unsafe extern "C" fn send_pdu_callback<T: TransportOps>(
    cls_conn: *mut bindings::iscsi_cls_conn,
    hdr: *mut bindings::iscsi_hdr,
    data: *mut c_char,
    data_size: u32,
) -> c_int {
    from_result(|| {
        // SAFETY: The connection is live (contract).
        let conn = unsafe { conn_of(cls_conn) };
        let mut rewrite = None;
        // SAFETY: As above.
        if let Some(ep) = unsafe { bound_ep_arc::<T>(conn) } {
            // SAFETY: `hdr` is a 48-byte BHS, `data` holds `data_size` bytes.
            let (h, d) = unsafe {
                (
                    core::ptr::read(hdr.cast::<[u8; BHS_LEN]>()),
                    if data.is_null() || data_size == 0 {
                        &[][..]
                    } else {
                        core::slice::from_raw_parts(
                            data.cast::<u8>(),
                            usize::from_safe_cast(data_size),
                        )
                    },
                )
            };
            rewrite = T::send_pdu_hook(&ep, &h, d)?;
        }
        let rc = match rewrite {
            Some(mut r) => {
                let mut h = bindings::iscsi_hdr::default();
                // SAFETY: `iscsi_hdr` is 48 bytes of plain data.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        r.hdr.as_ptr(),
                        (&raw mut h).cast::<u8>(),
                        BHS_LEN,
                    )
                };
                let len = u32::try_from(r.data.len())?;
                // SAFETY: The connection is live; libiscsi copies the header and
                // `len` bytes of data before returning.
                Ok(unsafe {
                    bindings::iscsi_conn_send_pdu(cls_conn, &mut h, r.data.as_mut_ptr().cast(), len)
                })
            }
            // SAFETY: Forwarded unchanged (contract).
            None => Ok(unsafe { bindings::iscsi_conn_send_pdu(cls_conn, hdr, data, data_size) }),
        };
        if let Ok(e @ (..=-1 | 1..)) = rc {
            // iscsid logs only that the PDU could not be sent: say which,
            // what libiscsi answered (EPERM: it had no task for it, the
            // connection being unbound or the session ending, or the
            // transport refused it) and what the transport had.
            // SAFETY: `hdr` is a BHS (contract), which libiscsi only copied.
            let opcode = u32::from(unsafe { (*hdr).opcode }) & bindings::ISCSI_OPCODE_MASK;
            // SAFETY: The connection is live (contract).
            let ep = unsafe { bound_ep_arc::<T>(conn) };
            // SAFETY: The connection is live (contract).
            let sid = unsafe { session_sid(conn) };
            pr_warn!(
                "iscsid's PDU (opcode {:#04x}) for session {} was refused: error {} \
                 (endpoint bound: {}, with a device: {})\n",
                opcode,
                sid,
                e,
                ep.is_some(),
                ep.as_ref().is_some_and(|ep| T::ep_device(ep).is_some())
            );
        }
        rc
    })
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live connection.
pub(super) unsafe extern "C" fn get_stats_callback<T: TransportOps>(
    cls_conn: *mut bindings::iscsi_cls_conn,
    stats: *mut bindings::iscsi_stats,
) {
    // SAFETY: The connection is live (contract).
    let conn = unsafe { conn_of(cls_conn) };
    // SAFETY: As above.
    let ep = unsafe { bound_ep_arc::<T>(conn) };
    let octets = ep.as_ref().map(|ep| T::data_octets(ep));
    // libiscsi counts under its session locks while this runs, so its
    // counters are read one by one through raw pointers (marked reads, as
    // `READ_ONCE`), never through a reference to the `iscsi_conn`.
    macro_rules! counter {
        ($f:ident) => {
            // SAFETY: The connection is live (contract) and the field
            // aligned; a racing write leaves one value or the other.
            unsafe { (&raw const (*conn).$f).read_volatile() }
        };
    }
    let (tx, rx) = octets.unwrap_or_else(|| (counter!(txdata_octets), counter!(rxdata_octets)));
    let (cmd, dataout, rsp) = (
        counter!(scsicmd_pdus_cnt),
        counter!(dataout_pdus_cnt),
        counter!(scsirsp_pdus_cnt),
    );
    let (datain, r2t) = (counter!(datain_pdus_cnt), counter!(r2t_pdus_cnt));
    let (tmfcmd, tmfrsp) = (counter!(tmfcmd_pdus_cnt), counter!(tmfrsp_pdus_cnt));
    // SAFETY: `stats` is the reply scsi_transport_iscsi allocated, ours
    // during the callback (contract); written field by field.
    unsafe {
        (*stats).txdata_octets = tx;
        (*stats).rxdata_octets = rx;
        (*stats).scsicmd_pdus = cmd;
        (*stats).dataout_pdus = dataout;
        (*stats).scsirsp_pdus = rsp;
        (*stats).datain_pdus = datain;
        (*stats).r2t_pdus = r2t;
        (*stats).tmfcmd_pdus = tmfcmd;
        (*stats).tmfrsp_pdus = tmfrsp.unsigned_abs();
        (*stats).custom_length = 0;
    }
    if let (Some(ep), Some(stats)) = (ep, NonNull::new(stats)) {
        // SAFETY: scsi_transport_iscsi's reply has room for
        // `ISCSI_STATS_CUSTOM_MAX` custom entries after the stats, ours
        // during the callback; none is written yet.
        let mut out = unsafe { CustomStats::from_raw(stats) };
        T::custom_stats(&ep, &mut out);
    }
}
