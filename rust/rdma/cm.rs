// SPDX-License-Identifier: GPL-2.0

//! The RDMA connection manager: an `rdma_cm_id` and its events.

use super::Device;
use crate::bindings;
use core::{
    net::SocketAddr,
    ptr::NonNull,
    sync::atomic::{
        AtomicPtr,
        AtomicU8,
        Ordering, //
    },
};
use kernel::{
    alloc::KBox,
    error::to_result,
    prelude::*,
    sync::{
        Arc,
        ArcBorrow, //
    },
    types::{
        ForeignOwnable,
        Opaque, //
    },
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
    /// Called by the CM, serialised per id, in process context.
    ///
    /// The handler may drop the [`CmId`] the event is for (with everything
    /// made on it, such as a QP): the id then goes to the CM, which
    /// destroys it when the handler returns, as `rdma_destroy_id` may not
    /// be called from the id's own handler. That is how a connection lets
    /// an RDMA device go (on [`CmEvent::DeviceRemoval`]) without waiting
    /// for anyone else, and how a failed connection attempt frees its id
    /// at once.
    fn event(&self, id: &CmIdRef, event: CmEvent);
}

/// Nobody is running the id's handler or destroying the id.
const ID_IDLE: u8 = 0;
/// The id's handler runs, on the task recorded in [`IdCtx::runner`].
const ID_IN_HANDLER: u8 = 1;
/// The id was dropped by its own handler: the CM destroys it when the
/// handler returns.
const ID_GIVEN_TO_CM: u8 = 2;
/// [`CmId`]'s `drop` is destroying the id (or has): no handler runs again.
const ID_DESTROYING: u8 = 3;

/// What an id's CM `context` points to: one per id, so the state below
/// belongs to the id whatever the handler does.
///
/// # Invariants
///
/// `handler` came from `Arc::<H>::into_foreign` and is released when this
/// value is dropped (once the id is destroyed). `runner` is the task
/// running the id's handler while `state` is [`ID_IN_HANDLER`], else null.
struct IdCtx<H: CmHandler> {
    handler: *mut c_void,
    state: AtomicU8,
    runner: AtomicPtr<bindings::task_struct>,
    _h: core::marker::PhantomData<Arc<H>>,
}

impl<H: CmHandler> IdCtx<H> {
    fn handler(&self) -> ArcBorrow<'_, H> {
        // SAFETY: `handler` came from `into_foreign` and is released only
        // when `self` is dropped (type invariant).
        unsafe { Arc::<H>::borrow(self.handler) }
    }
}

impl<H: CmHandler> Drop for IdCtx<H> {
    fn drop(&mut self) {
        // SAFETY: `handler` came from `into_foreign` (type invariant) and is
        // released once, here.
        drop(unsafe { Arc::<H>::from_foreign(self.handler) });
    }
}

/// The id an event is delivered for, borrowed for the duration of the event.
///
/// # Invariants
///
/// Wraps a live `rdma_cm_id`, which the CM may change behind it. Outside
/// this file a `&CmIdRef` is had only inside the id's event handler, as
/// the CM hands it over (`CmId::as_ref` is private): the handler runs in
/// process context, and the CM serialises the id's events.
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

    /// Disconnects: the id's QP, if any, goes to the error state (its
    /// work requests flush) and the peer is told. Process context (it may
    /// sleep); from the id's own handler too. `EINVAL` when the id was not
    /// connected.
    pub(crate) fn disconnect(&self) -> Result {
        // SAFETY: The id is live (type invariant); the CM serialises the
        // disconnect against the id's other state changes.
        to_result(unsafe { bindings::rdma_disconnect(self.as_raw()) })
    }

    /// The RDMA device the id is bound to, once its address resolved.
    pub(crate) fn device(&self) -> Option<&Device> {
        // Only inside the id's event handler (type invariant): events for
        // an id are serialised, and `device` is only set by the address
        // resolution whose event this is or an earlier one.
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
/// `id` was created by `rdma_create_id` with `ctx` (from
/// `KBox::<IdCtx<H>>::into_raw`) as its context. Dropping the value
/// destroys the id and frees `ctx`, or, when the id's own handler drops
/// it, leaves both to the CM callback, which returns non-zero so that the
/// CM destroys the id.
pub(crate) struct CmId<H: CmHandler> {
    id: NonNull<bindings::rdma_cm_id>,
    ctx: NonNull<IdCtx<H>>,
}

// SAFETY: The CM id may be used from any thread; the CM serialises its
// state; the context is shared through atomics.
unsafe impl<H: CmHandler> Send for CmId<H> {}
// SAFETY: Methods taking `&self` call CM functions that lock internally.
unsafe impl<H: CmHandler> Sync for CmId<H> {}

impl<H: CmHandler> CmId<H> {
    /// Creates an id in the initial network namespace whose events go to
    /// `handler`.
    pub(crate) fn new(handler: Arc<H>) -> Result<Self> {
        let ctx = KBox::new(
            IdCtx::<H> {
                handler: handler.into_foreign(),
                state: AtomicU8::new(ID_IDLE),
                runner: AtomicPtr::new(core::ptr::null_mut()),
                _h: core::marker::PhantomData,
            },
            GFP_KERNEL,
        )?;
        let ctx = KBox::into_raw(ctx);
        // SAFETY: `event_callback` matches `rdma_cm_event_handler`; `ctx`
        // stays valid until the id is destroyed (see `drop` and
        // `event_callback`).
        let id = unsafe {
            bindings::riser_rdma_create_id(
                Some(Self::event_callback),
                ctx.cast(),
                // CAST: small enum values, as the C helper takes them.
                bindings::rdma_ucm_port_space_RDMA_PS_TCP as c_int,
                bindings::ib_qp_type_IB_QPT_RC as c_int,
            )
        };
        match kernel::error::from_err_ptr(id).and_then(|p| NonNull::new(p).ok_or(ENOMEM)) {
            // INVARIANT: the id was created with `ctx` as its context.
            Ok(id) => Ok(Self {
                id,
                // SAFETY: `into_raw` never returns null.
                ctx: unsafe { NonNull::new_unchecked(ctx) },
            }),
            Err(e) => {
                // SAFETY: `ctx` came from `into_raw` above and the CM did
                // not keep it.
                drop(unsafe { KBox::from_raw(ctx) });
                Err(e)
            }
        }
    }

    /// Starts resolving `dst` to a local RDMA device; the outcome arrives as
    /// [`CmEvent::AddrResolved`] or [`CmEvent::AddrError`].
    pub(crate) fn resolve_addr(&self, dst: SocketAddr, timeout_ms: u32) -> Result {
        let mut ss = crate::kernel_ext::sockaddr::storage(dst);
        // Lossless: `c_ulong` is 64 bits wide on every architecture riser builds for.
        let timeout = c_ulong::try_from(timeout_ms).unwrap_or(c_ulong::MAX);
        // SAFETY: The id is valid (type invariant); `ss` holds a valid IPv4
        // or IPv6 address, which the CM copies (by its family's size)
        // before returning.
        to_result(unsafe {
            bindings::rdma_resolve_addr(
                self.id.as_ptr(),
                core::ptr::null_mut(),
                (&raw mut ss).cast(),
                timeout,
            )
        })
    }

    /// Starts resolving the route; the outcome arrives as
    /// [`CmEvent::RouteResolved`] or [`CmEvent::RouteError`].
    pub(crate) fn resolve_route(&self, timeout_ms: u32) -> Result {
        self.as_ref().resolve_route(timeout_ms)
    }

    /// The id, as event handlers see it. Private: outside this file a
    /// `&CmIdRef` exists only as the CM hands it to the id's event handler,
    /// for the duration of one event, where [`CmIdRef::device`]'s and
    /// [`CmIdRef::disconnect`]'s obligations (events serialised, process
    /// context) hold.
    fn as_ref(&self) -> &CmIdRef {
        // SAFETY: The id is valid for as long as `self` (type invariant);
        // `CmIdRef` is transparent over the C struct.
        unsafe { &*self.id.as_ptr().cast::<CmIdRef>() }
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::rdma_cm_id {
        self.id.as_ptr()
    }

    /// Whether the caller is this id's event handler, running: only
    /// there does the CM hold the id's handler mutex, which
    /// `rdma_connect_locked` needs.
    pub(crate) fn in_own_handler(&self) -> bool {
        // SAFETY: `ctx` is valid while `self` is (type invariant).
        let ctx = unsafe { self.ctx.as_ref() };
        ctx.state.load(Ordering::Acquire) == ID_IN_HANDLER
            && ctx.runner.load(Ordering::Relaxed) == kernel::task::Task::current_raw()
    }

    /// The handler, as `Arc::<H>::into_foreign` made it: the context of
    /// QPs made on the id. Valid until the id is destroyed.
    pub(crate) fn context(&self) -> *mut c_void {
        // SAFETY: `ctx` is valid while `self` is (type invariant).
        unsafe { self.ctx.as_ref() }.handler
    }

    /// The CM's event handler for ids made by [`CmId::new`].
    ///
    /// # Safety
    ///
    /// Called by the CM only, with a live `id` whose context came from
    /// [`CmId::new`] and a live `event`, serialised with the id's other
    /// events and with `rdma_destroy_id`.
    unsafe extern "C" fn event_callback(
        id: *mut bindings::rdma_cm_id,
        event: *mut bindings::rdma_cm_event,
    ) -> c_int {
        // The context stays valid until the id is destroyed: by `drop`,
        // whose `rdma_destroy_id` waits for this callback, or by the CM
        // after this callback returns non-zero.
        // SAFETY: The CM passes a live id and event (function contract).
        let (ctx, id, ev) = unsafe {
            (
                &*(*id).context.cast::<IdCtx<H>>(),
                &*id.cast::<CmIdRef>(),
                CmEvent::from_raw(&*event),
            )
        };
        if ctx
            .state
            .compare_exchange(ID_IDLE, ID_IN_HANDLER, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // `drop` is destroying the id and waits for this callback: the
            // handler is not called again.
            return 0;
        }
        ctx.runner
            .store(kernel::task::Task::current_raw(), Ordering::Relaxed);
        ctx.handler().event(id, ev);
        ctx.runner.store(core::ptr::null_mut(), Ordering::Relaxed);
        match ctx.state.compare_exchange(
            ID_IN_HANDLER,
            ID_IDLE,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // The id lives on; `drop` destroys it. Or `drop` runs on another
            // task and waits for this callback to return (`ID_DESTROYING`).
            Ok(_) | Err(ID_DESTROYING) => 0,
            // The handler dropped its `CmId`, which left the id to the CM:
            // no callback runs for it after this one.
            Err(_) => {
                // SAFETY: `ctx` came from `into_raw` in `new`; `drop` left
                // it (`ID_GIVEN_TO_CM`), and nothing uses it after this.
                drop(unsafe { KBox::from_raw(core::ptr::from_ref(ctx).cast_mut()) });
                // Non-zero: the CM destroys the id.
                1
            }
        }
    }
}

impl<H: CmHandler> Drop for CmId<H> {
    fn drop(&mut self) {
        {
            // SAFETY: `ctx` is valid until this drop frees it, or the
            // callback does after this drop returned (type invariant).
            let ctx = unsafe { self.ctx.as_ref() };
            let me = kernel::task::Task::current_raw();
            loop {
                let cur = ctx.state.load(Ordering::Acquire);
                // Dropped by the id's own handler, on the task running it:
                // `rdma_destroy_id` would wait for this very handler.
                let own = cur == ID_IN_HANDLER && ctx.runner.load(Ordering::Relaxed) == me;
                let to = if own { ID_GIVEN_TO_CM } else { ID_DESTROYING };
                if ctx
                    .state
                    .compare_exchange(cur, to, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    // A handler started or ended meanwhile.
                    continue;
                }
                if own {
                    // The callback frees the context and has the CM destroy
                    // the id when the handler returns. Nothing here touches
                    // either again.
                    return;
                }
                break;
            }
        }
        // SAFETY: The id is valid (type invariant); `rdma_destroy_id` waits
        // for a running event callback, and none calls the handler after
        // `ID_DESTROYING`.
        unsafe { bindings::rdma_destroy_id(self.id.as_ptr()) };
        // SAFETY: `ctx` came from `into_raw` in `new`; the id that used it
        // is gone.
        drop(unsafe { KBox::from_raw(self.ctx.as_ptr()) });
    }
}
