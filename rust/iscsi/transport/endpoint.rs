// SPDX-License-Identifier: GPL-2.0

//! Endpoints: the table of those a transport made, and the callbacks that
//! make, poll, describe and drop them.

use super::super::TransportOps;
use crate::bindings;
use core::sync::atomic::Ordering;
use kernel::{
    alloc::KVec,
    error::from_result,
    prelude::*,
    sync::{
        Arc,
        Mutex, //
    },
};

/// The endpoints the transport made and iscsid has not dropped: the C
/// endpoint (by address) and the driver's object it stands for.
///
/// scsi_transport_iscsi looks endpoints up by the handle iscsid sends, in
/// one table for all transports, and hands the result to the transport the
/// message names: an endpoint found here is the transport's own, and one
/// that is not (another transport's, or a stale handle) is refused.
pub(super) type Endpoints<T> = Mutex<KVec<(usize, Arc<<T as TransportOps>::Ep>)>>;

/// The transport's endpoint table.
///
/// # Safety
///
/// Called from a callback of the registered transport `T` (it stays
/// registered, and the table alive, until the callback returns).
pub(super) unsafe fn endpoints<'a, T: TransportOps>() -> Option<&'a Endpoints<T>> {
    let p = T::registry().eps.load(Ordering::Acquire);
    // SAFETY: A non-null pointer is the registered transport's table
    // (invariant of `Registry`), alive while its callbacks run.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// The driver's object for endpoint `ep`, if `ep` is one of `T`'s.
///
/// # Safety
///
/// As for [`endpoints`].
pub(super) unsafe fn ep_lookup<T: TransportOps>(
    ep: *mut bindings::iscsi_endpoint,
) -> Option<Arc<T::Ep>> {
    // SAFETY: Called from a callback of `T` (function contract).
    let eps = unsafe { endpoints::<T>() }?.lock();
    let found = eps.iter().find(|(p, _)| *p == ep.addr());
    if found.is_none() {
        pr_err!("endpoint {:p} is not one of this transport's\n", ep);
    }
    found.map(|(_, e)| e.clone())
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live endpoint and a page
/// `buf`.
pub(in crate::iscsi) unsafe extern "C" fn get_ep_param_callback<T: TransportOps>(
    ep: *mut bindings::iscsi_endpoint,
    param: bindings::iscsi_param,
    buf: *mut c_char,
) -> c_int {
    from_result(|| {
        if param != bindings::iscsi_param_ISCSI_PARAM_CONN_ADDRESS
            && param != bindings::iscsi_param_ISCSI_PARAM_CONN_PORT
        {
            return Err(ENOSYS);
        }
        // SAFETY: A callback of `T`.
        let dst = unsafe { ep_lookup::<T>(ep) }
            .and_then(|e| T::ep_dst(&e))
            .ok_or(ENOTCONN)?;
        let mut ss = crate::kernel_ext::sockaddr::storage(dst);
        // SAFETY: `ss` holds a valid IPv4 or IPv6 address, which
        // `iscsi_conn_get_addr_param` prints by family; `buf` is a page
        // (contract).
        Ok(unsafe { bindings::iscsi_conn_get_addr_param(&mut ss, param, buf) })
    })
}

/// How many bytes of the netlink request follow `dst`, the address in an
/// `ISCSI_UEVENT_TRANSPORT_EP_CONNECT(_THROUGH_HOST)` request.
///
/// scsi_transport_iscsi checks only that a `struct sockaddr` (16 bytes)
/// follows the request's `iscsi_uevent`, and a `sockaddr_in6` is 28: the
/// length the netlink header gives is what says whether the rest is there.
///
/// # Safety
///
/// `dst` must be what `iscsi_if_ep_connect` passes: the bytes right behind
/// the `iscsi_uevent` at `nlmsg_data(nlh)` of a netlink request whose
/// `nlh->nlmsg_len` the netlink core checked against the buffer.
unsafe fn request_bytes_after(dst: *const u8) -> usize {
    const HDRLEN: usize = {
        let align = kernel::num::casts::u32_as_usize(bindings::NLMSG_ALIGNTO);
        (size_of::<bindings::nlmsghdr>() + align - 1) & !(align - 1)
    };
    let before = HDRLEN + size_of::<bindings::iscsi_uevent>();
    // SAFETY: `dst` is `size_of::<iscsi_uevent>()` bytes behind
    // `nlmsg_data(nlh)`, itself `HDRLEN` bytes behind `nlh` (function
    // contract), so the header is in the same buffer, `before` bytes back.
    let nlh = unsafe { dst.sub(before) }.cast::<bindings::nlmsghdr>();
    // SAFETY: `nlh` is the request's live netlink header (function
    // contract); read unaligned, whatever the buffer's alignment.
    let total = unsafe { core::ptr::read_unaligned(core::ptr::addr_of!((*nlh).nlmsg_len)) };
    usize::try_from(total).unwrap_or(0).saturating_sub(before)
}

/// # Safety
///
/// Called by scsi_transport_iscsi only (from `iscsi_if_ep_connect`): `dst`
/// as [`request_bytes_after`] requires.
pub(in crate::iscsi) unsafe extern "C" fn ep_connect_callback<T: TransportOps>(
    _shost: *mut bindings::Scsi_Host,
    dst: *mut bindings::sockaddr,
    _non_blocking: c_int,
) -> *mut bindings::iscsi_endpoint {
    let dst = dst.cast::<u8>().cast_const();
    // SAFETY: `dst` is the address of an ep_connect request (function
    // contract).
    let len = unsafe { request_bytes_after(dst) };
    // SAFETY: The request holds `len` bytes at `dst` (its netlink length).
    let addr = match unsafe { crate::kernel_ext::sockaddr::from_raw(dst, len) } {
        Ok(a) => a,
        Err(e) => {
            pr_err!("ep_connect: {}\n", e);
            return ERR_PTR(match e {
                crate::kernel_ext::sockaddr::AddrError::Family(_) => EAFNOSUPPORT,
                crate::kernel_ext::sockaddr::AddrError::Short { .. } => EINVAL,
            });
        }
    };
    // SAFETY: A callback of `T`.
    let Some(eps) = (unsafe { endpoints::<T>() }) else {
        return ERR_PTR(ENODEV);
    };
    // The driver's object is in the table, not in the endpoint.
    // SAFETY: Allocates an endpoint with no private data.
    let ep = unsafe { bindings::iscsi_create_endpoint(0) };
    if ep.is_null() {
        return ERR_PTR(ENOMEM);
    }
    // An endpoint holds a reference on the module, as a session does, so
    // riser cannot be unloaded under a connection iscsid has not dropped.
    let tt = T::registry().tt.load(Ordering::Acquire);
    // SAFETY: A non-null `tt` is the registered transport (invariant of
    // `Registry`); its owner is this module, alive while we run.
    if tt.is_null() || !unsafe { bindings::riser_try_module_get((*tt).owner) } {
        // SAFETY: The endpoint is new and unused.
        unsafe { bindings::iscsi_destroy_endpoint(ep) };
        return ERR_PTR(ENODEV);
    }
    let made = T::ep_connect(addr).and_then(|e| {
        let mut t = eps.lock();
        match t.push((ep.addr(), e.clone()), GFP_KERNEL) {
            Ok(()) => Ok(()),
            Err(_) => {
                drop(t);
                T::ep_disconnect(e);
                Err(ENOMEM)
            }
        }
    });
    match made {
        Ok(()) => ep,
        Err(err) => {
            // scsi_transport_iscsi holds its own module reference during the call.
            // SAFETY: The endpoint is new and unused; our reference is dropped.
            unsafe {
                bindings::iscsi_destroy_endpoint(ep);
                bindings::module_put((*tt).owner);
            }
            ERR_PTR(err)
        }
    }
}

#[allow(non_snake_case)]
pub(super) fn ERR_PTR<T>(e: Error) -> *mut T {
    // CAST: error pointers encode the negative errno in the address.
    e.to_errno() as isize as *mut T
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live endpoint.
pub(in crate::iscsi) unsafe extern "C" fn ep_poll_callback<T: TransportOps>(
    ep: *mut bindings::iscsi_endpoint,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: A callback of `T`.
    let Some(e) = (unsafe { ep_lookup::<T>(ep) }) else {
        return -1;
    };
    match T::ep_poll(&e, timeout_ms.unsigned_abs()) {
        Ok(true) => 1,
        Ok(false) => 0,
        Err(_) => -1,
    }
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live endpoint.
pub(in crate::iscsi) unsafe extern "C" fn ep_disconnect_callback<T: TransportOps>(
    ep: *mut bindings::iscsi_endpoint,
) {
    // SAFETY: A callback of `T`.
    let Some(eps) = (unsafe { endpoints::<T>() }) else {
        return;
    };
    let mine = {
        let mut t = eps.lock();
        match t.iter().position(|(p, _)| *p == ep.addr()) {
            Some(i) => t.remove(i).ok(),
            None => None,
        }
    };
    let Some((_, e)) = mine else {
        // Not made here (another transport's, or dropped already): not
        // ours to destroy.
        pr_err!(
            "ep_disconnect: endpoint {:p} is not one of this transport's\n",
            ep
        );
        return;
    };
    T::ep_disconnect(e);
    // SAFETY: The endpoint is ours (it was in the table, taken out once)
    // and not used after this.
    unsafe { bindings::iscsi_destroy_endpoint(ep) };
    let tt = T::registry().tt.load(Ordering::Acquire);
    if !tt.is_null() {
        // SAFETY: Drops the reference `ep_connect_callback` took for this
        // endpoint; scsi_transport_iscsi holds another during the call.
        unsafe { bindings::module_put((*tt).owner) };
    }
}
