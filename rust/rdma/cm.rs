// SPDX-License-Identifier: GPL-2.0

//! The RDMA connection manager: an `rdma_cm_id` and its events.

use super::Device;
use crate::bindings;
use core::{
    net::SocketAddrV4,
    ptr::NonNull,
    sync::atomic::{AtomicU8, Ordering},
};
use kernel::{
    error::to_result,
    prelude::*,
    sync::Arc,
    types::{ForeignOwnable, Opaque},
};

/// An RDMA CM event, as riser sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmEvent {
    /// The destination address resolved to a local RDMA device.
    AddrResolved,
    /// Address resolution failed (with the status the CM gave).
    AddrError(i32),
    /// A route to the destination resolved.
    RouteResolved,
    /// Route resolution failed.
    RouteError(i32),
    /// The connection is established; the peer's CM private data (its
    /// first four bytes, the iSER CM header), if it sent any.
    Established(Option<[u8; 4]>),
    /// The peer rejected the connection.
    Rejected(i32),
    /// Connecting failed.
    ConnectError(i32),
    /// The peer is unreachable.
    Unreachable(i32),
    /// The connection was disconnected.
    Disconnected,
    /// The RDMA device is being removed.
    DeviceRemoval,
    /// The address the id was bound to changed.
    AddrChange,
    /// The QP left TIMEWAIT.
    TimewaitExit,
    /// Any other event, by number.
    Other(u32),
}

impl CmEvent {
    fn from_raw(ev: &bindings::rdma_cm_event) -> Self {
        let st = ev.status;
        match ev.event {
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED => Self::AddrResolved,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_ERROR => Self::AddrError(st),
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED => Self::RouteResolved,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_ERROR => Self::RouteError(st),
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED => {
                // SAFETY: For ESTABLISHED the `conn` member of the union is
                // the one the CM filled.
                let conn = unsafe { ev.param.conn.as_ref() };
                let private =
                    (!conn.private_data.is_null() && conn.private_data_len >= 4).then(|| {
                        // SAFETY: The CM's private data holds at least
                        // `private_data_len` readable bytes.
                        unsafe { core::ptr::read_unaligned(conn.private_data.cast::<[u8; 4]>()) }
                    });
                Self::Established(private)
            }
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED => Self::Rejected(st),
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR => Self::ConnectError(st),
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_UNREACHABLE => Self::Unreachable(st),
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_DISCONNECTED => Self::Disconnected,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL => Self::DeviceRemoval,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_CHANGE => Self::AddrChange,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_TIMEWAIT_EXIT => Self::TimewaitExit,
            other => Self::Other(other),
        }
    }
}

/// Receives the events of a [`CmId`].
pub(crate) trait CmHandler: Send + Sync + 'static {
    /// Called by the CM, serialised per id, in process context. It must not
    /// drop the [`CmId`] it is called for, except for
    /// [`CmEvent::DeviceRemoval`]: a handler that drops its id then (with
    /// everything made on it, such as the QP) gives the id to the CM, which
    /// destroys it when the handler returns. That is how a connection lets
    /// an RDMA device go without waiting for anyone else (iscsid) to act.
    fn event(&self, id: &CmIdRef, event: CmEvent);

    /// The handler's [`CmIdState`]: one per handler, as a handler serves
    /// one id.
    fn id_state(&self) -> &CmIdState;
}

/// Who destroys a [`CmId`]: `drop`, or the CM after a device-removal event
/// whose handler dropped the id. Kept in the handler, where both the CM's
/// callback and `drop` find it.
pub(crate) struct CmIdState(AtomicU8);

/// No device removal under way, nobody destroying the id.
const ID_NORMAL: u8 = 0;
/// The device-removal handler runs; a `drop` now leaves the id to the CM.
const ID_IN_REMOVAL: u8 = 1;
/// `drop` ran during the device-removal handler: the CM destroys the id.
const ID_GIVEN_TO_CM: u8 = 2;
/// `drop` is destroying the id (or has).
const ID_DESTROYING: u8 = 3;

impl CmIdState {
    /// A state for a handler whose id is not made yet.
    pub(crate) const fn new() -> Self {
        Self(AtomicU8::new(ID_NORMAL))
    }
}

impl Default for CmIdState {
    fn default() -> Self {
        Self::new()
    }
}

/// The id an event is delivered for, borrowed for the duration of the event.
///
/// # Invariants
///
/// Wraps a live `rdma_cm_id`, which the CM may change behind it.
#[repr(transparent)]
pub(crate) struct CmIdRef(Opaque<bindings::rdma_cm_id>);

impl CmIdRef {
    pub(crate) fn as_raw(&self) -> *mut bindings::rdma_cm_id {
        self.0.get()
    }

    /// Starts resolving the route; the outcome arrives as
    /// [`CmEvent::RouteResolved`] or [`CmEvent::RouteError`].
    pub(crate) fn resolve_route(&self, timeout_ms: u32) -> Result {
        let timeout = c_ulong::try_from(timeout_ms).unwrap_or(c_ulong::MAX);
        // SAFETY: The id is live (type invariant).
        to_result(unsafe { bindings::rdma_resolve_route(self.as_raw(), timeout) })
    }

    /// The RDMA device the id is bound to, once its address resolved.
    pub(crate) fn device(&self) -> Option<&Device> {
        // Events for an id are serialised, and `device` is only set by the
        // address resolution whose event this is or an earlier one.
        // SAFETY: The id is live (type invariant).
        let dev = unsafe { (*self.0.get()).device };
        // SAFETY: A bound id holds a reference on its device for as long as
        // it is bound, which outlives this borrow.
        (!dev.is_null()).then(|| unsafe { Device::from_raw(dev) })
    }
}

/// An RDMA CM id for a reliable-connected, TCP port space connection.
///
/// # Invariants
///
/// `id` was created by `rdma_create_id` with `context` from
/// `Arc::<H>::into_foreign`, and is destroyed in `drop`, after which the
/// `Arc` is released.
pub(crate) struct CmId<H: CmHandler> {
    id: NonNull<bindings::rdma_cm_id>,
    _h: core::marker::PhantomData<Arc<H>>,
}

// SAFETY: The CM id may be used from any thread; the CM serialises its state.
unsafe impl<H: CmHandler> Send for CmId<H> {}
// SAFETY: Methods taking `&self` call CM functions that lock internally.
unsafe impl<H: CmHandler> Sync for CmId<H> {}

impl<H: CmHandler> CmId<H> {
    /// Creates an id in the initial network namespace whose events go to
    /// `handler`.
    pub(crate) fn new(handler: Arc<H>) -> Result<Self> {
        let ctx = handler.into_foreign();
        // SAFETY: `event_callback` matches `rdma_cm_event_handler`; `ctx`
        // stays valid until `drop` reclaims it after destroying the id.
        let id = unsafe {
            bindings::riser_rdma_create_id(
                Some(Self::event_callback),
                ctx,
                bindings::rdma_ucm_port_space_RDMA_PS_TCP as c_int,
                bindings::ib_qp_type_IB_QPT_RC as c_int,
            )
        };
        match kernel::error::from_err_ptr(id).and_then(|p| NonNull::new(p).ok_or(ENOMEM)) {
            // INVARIANT: the id was created with `ctx` as its context.
            Ok(id) => Ok(Self {
                id,
                _h: core::marker::PhantomData,
            }),
            Err(e) => {
                // SAFETY: `ctx` came from `into_foreign` above and the CM did
                // not keep it.
                drop(unsafe { Arc::<H>::from_foreign(ctx) });
                Err(e)
            }
        }
    }

    /// Starts resolving `dst` to a local RDMA device; the outcome arrives as
    /// [`CmEvent::AddrResolved`] or [`CmEvent::AddrError`].
    pub(crate) fn resolve_addr(&self, dst: SocketAddrV4, timeout_ms: u32) -> Result {
        let mut sin = bindings::sockaddr_in {
            sin_family: bindings::AF_INET as bindings::__kernel_sa_family_t,
            sin_port: dst.port().to_be(),
            sin_addr: bindings::in_addr {
                s_addr: u32::from_ne_bytes(dst.ip().octets()),
            },
            ..Default::default()
        };
        // Lossless: `c_ulong` is 64 bits wide on every architecture riser builds for.
        let timeout = c_ulong::try_from(timeout_ms).unwrap_or(c_ulong::MAX);
        // SAFETY: The id is valid (type invariant); `sin` is a valid IPv4
        // address the CM copies before returning.
        to_result(unsafe {
            bindings::rdma_resolve_addr(
                self.id.as_ptr(),
                core::ptr::null_mut(),
                (&raw mut sin).cast(),
                timeout,
            )
        })
    }

    /// Starts resolving the route; the outcome arrives as
    /// [`CmEvent::RouteResolved`] or [`CmEvent::RouteError`].
    pub(crate) fn resolve_route(&self, timeout_ms: u32) -> Result {
        self.as_ref().resolve_route(timeout_ms)
    }

    /// The id, as event handlers see it.
    pub(crate) fn as_ref(&self) -> &CmIdRef {
        // SAFETY: The id is valid for as long as `self` (type invariant);
        // `CmIdRef` is transparent over the C struct.
        unsafe { &*self.id.as_ptr().cast::<CmIdRef>() }
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::rdma_cm_id {
        self.id.as_ptr()
    }

    /// The id's context pointer (the handler `Arc` the id owns).
    pub(crate) fn context(&self) -> *mut c_void {
        // SAFETY: The id is valid (type invariant); its context was set at
        // creation and never changed.
        unsafe { (*self.id.as_ptr()).context }
    }

    /// The CM's event handler for ids made by [`CmId::new`].
    ///
    /// # Safety
    ///
    /// Called by the CM only, with a live `id` whose context came from
    /// [`CmId::new`] and a live `event`.
    unsafe extern "C" fn event_callback(
        id: *mut bindings::rdma_cm_id,
        event: *mut bindings::rdma_cm_event,
    ) -> c_int {
        // The id's context was set by `new` and stays valid until the id is
        // destroyed: by `drop`, which waits for running callbacks to finish,
        // or by the CM after this callback returns non-zero.
        // SAFETY: The CM passes a live id and event (function contract).
        let (ctx, id, ev) = unsafe {
            (
                (*id).context,
                &*id.cast::<CmIdRef>(),
                CmEvent::from_raw(&*event),
            )
        };
        let given_to_cm = {
            // SAFETY: `ctx` came from `into_foreign` in `new` and is
            // released only below or by `drop`, neither of which has run.
            let handler = unsafe { Arc::<H>::borrow(ctx) };
            let state = &handler.id_state().0;
            if ev == CmEvent::DeviceRemoval {
                if state
                    .compare_exchange(
                        ID_NORMAL,
                        ID_IN_REMOVAL,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_err()
                {
                    // `drop` is destroying the id and waits for this callback:
                    // the handler must not be asked to drop it again.
                    return 0;
                }
                handler.event(id, ev);
                state
                    .compare_exchange(
                        ID_IN_REMOVAL,
                        ID_NORMAL,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_err()
            } else {
                if state.load(Ordering::Acquire) == ID_DESTROYING {
                    return 0;
                }
                handler.event(id, ev);
                false
            }
        };
        if !given_to_cm {
            // Zero: the id stays alive; `drop` destroys it.
            return 0;
        }
        // The handler dropped its `CmId`, which left the id to the CM: no
        // callback runs for it after this one.
        // SAFETY: `ctx` came from `into_foreign` in `new`; `drop` did not
        // reclaim it (it saw `ID_IN_REMOVAL`).
        drop(unsafe { Arc::<H>::from_foreign(ctx) });
        // Non-zero: the CM destroys the id.
        1
    }
}

impl<H: CmHandler> Drop for CmId<H> {
    fn drop(&mut self) {
        // SAFETY: The id is valid (type invariant).
        let ctx = unsafe { (*self.id.as_ptr()).context };
        {
            // SAFETY: `ctx` came from `into_foreign` in `new`; it is only
            // reclaimed below or by the callback after this drop.
            let handler = unsafe { Arc::<H>::borrow(ctx) };
            let state = &handler.id_state().0;
            loop {
                let (from, to) = match state.load(Ordering::Acquire) {
                    ID_IN_REMOVAL => (ID_IN_REMOVAL, ID_GIVEN_TO_CM),
                    cur => (cur, ID_DESTROYING),
                };
                if state
                    .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    // The device-removal callback started or ended meanwhile.
                    continue;
                }
                if to == ID_GIVEN_TO_CM {
                    // Dropped by (or during) the device-removal handler: the
                    // CM destroys the id and the callback releases the
                    // context when the handler returns. Nothing here touches
                    // the id again.
                    return;
                }
                break;
            }
        }
        // SAFETY: The id is valid (type invariant); `rdma_destroy_id` waits
        // for a running event callback, so none runs after it returns.
        unsafe { bindings::rdma_destroy_id(self.id.as_ptr()) };
        // SAFETY: `ctx` came from `into_foreign` in `new`; the id that used
        // it is gone.
        drop(unsafe { Arc::<H>::from_foreign(ctx) });
    }
}
