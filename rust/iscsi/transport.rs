// SPDX-License-Identifier: GPL-2.0

//! The `iscsi_transport` registration and its C callbacks.

use super::{
    task::{TaskSlot, BHS_LEN},
    Attr, Conn, ConnSlot, Task, TransportOps,
};
use crate::{bindings, scsi::HostTemplate};
use core::{
    marker::PhantomData,
    ptr::{null_mut, NonNull},
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{
    alloc::KVec,
    error::to_result,
    new_mutex,
    prelude::*,
    sync::{rcu, Arc, ArcBorrow, Mutex},
    types::{ForeignOwnable, Opaque},
    ThisModule,
};

/// The C objects a transport's callbacks need, which the callbacks (plain
/// functions) cannot otherwise reach.
///
/// # Invariants
///
/// Non-null pointers are set by [`Transport::new`] and point to the
/// registered transport, its SCSI transport template, its host template and
/// its table of endpoints, valid until the [`Transport`] is dropped, which
/// clears them after unregistering.
pub(crate) struct Registry<T: TransportOps> {
    tt: AtomicPtr<bindings::iscsi_transport>,
    scsi: AtomicPtr<bindings::scsi_transport_template>,
    sht: AtomicPtr<bindings::scsi_host_template>,
    eps: AtomicPtr<Endpoints<T>>,
}

impl<T: TransportOps> Registry<T> {
    /// An empty registry.
    pub(crate) const fn new() -> Self {
        Self {
            tt: AtomicPtr::new(null_mut()),
            scsi: AtomicPtr::new(null_mut()),
            sht: AtomicPtr::new(null_mut()),
            eps: AtomicPtr::new(null_mut()),
        }
    }
}

/// The endpoints the transport made and iscsid has not dropped: the C
/// endpoint (by address) and the driver's object it stands for.
///
/// scsi_transport_iscsi looks endpoints up by the handle iscsid sends, in
/// one table for all transports, and hands the result to the transport the
/// message names: an endpoint found here is the transport's own, and one
/// that is not (another transport's, or a stale handle) is refused.
type Endpoints<T> = Mutex<KVec<(usize, Arc<<T as TransportOps>::Ep>)>>;

/// The transport's endpoint table.
///
/// # Safety
///
/// Called from a callback of the registered transport `T` (it stays
/// registered, and the table alive, until the callback returns).
unsafe fn endpoints<'a, T: TransportOps>() -> Option<&'a Endpoints<T>> {
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
unsafe fn ep_lookup<T: TransportOps>(ep: *mut bindings::iscsi_endpoint) -> Option<Arc<T::Ep>> {
    // SAFETY: Called from a callback of `T` (function contract).
    let eps = unsafe { endpoints::<T>() }?.lock();
    let found = eps.iter().find(|(p, _)| *p == ep as usize);
    if found.is_none() {
        pr_err!("endpoint {:p} is not one of this transport's\n", ep);
    }
    found.map(|(_, e)| e.clone())
}

/// A registered iSCSI transport.
///
/// # Invariants
///
/// `tt` is registered with scsi_transport_iscsi from `new` until `drop`;
/// `sht`, the template of the sessions' hosts, and `eps`, the endpoint
/// table, are initialised before and dropped after the registration.
#[pin_data(PinnedDrop)]
pub(crate) struct Transport<T: TransportOps> {
    #[pin]
    tt: Opaque<bindings::iscsi_transport>,
    // After `tt`: the template and the table outlive the registration.
    #[pin]
    sht: HostTemplate,
    #[pin]
    eps: Endpoints<T>,
    _p: PhantomData<T>,
}

// SAFETY: The registration is only handed to scsi_transport_iscsi, which
// synchronises its use; the table is behind a mutex.
unsafe impl<T: TransportOps> Send for Transport<T> {}
// SAFETY: Shared references only read it, or lock the table.
unsafe impl<T: TransportOps> Sync for Transport<T> {}

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
struct Binding {
    ep: AtomicPtr<c_void>,
    slot: AtomicPtr<ConnSlot>,
}

/// The binding in `conn`'s `dd_data`.
///
/// # Safety
///
/// `conn` must be a live connection made by `create_conn_callback`.
unsafe fn binding<'a>(conn: *mut bindings::iscsi_conn) -> &'a Binding {
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
/// stopped or destroyed (init, xmit and cleanup of its tasks).
unsafe fn bound_ep<'a, T: TransportOps>(
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
unsafe fn bound_ep_arc<T: TransportOps>(conn: *mut bindings::iscsi_conn) -> Option<Arc<T::Ep>> {
    let _rcu = rcu::read_lock();
    // SAFETY: The connection is live (function contract).
    let p = unsafe { binding(conn) }.ep.load(Ordering::Acquire);
    // A non-null pointer loaded in the read section stays a live foreign
    // `Arc` until the section ends: unbind waits for a grace period before
    // dropping it (invariant of `Binding`).
    // SAFETY: Hence the borrow, cloned before the section ends.
    (!p.is_null()).then(|| Arc::from(unsafe { Arc::<T::Ep>::borrow(p) }))
}

impl<T: TransportOps> Transport<T> {
    /// Registers the transport, whose sessions' hosts are made from `sht`.
    /// Fails with `EEXIST` when another transport (such as ib_iser's)
    /// already holds the name.
    pub(crate) fn new(
        module: &'static ThisModule,
        sht: impl PinInit<HostTemplate>,
    ) -> impl PinInit<Self, Error> {
        try_pin_init!(&this in Self {
            _p: PhantomData,
            sht <- sht,
            eps <- new_mutex!(KVec::new()),
            tt <- Opaque::try_ffi_init(move |slot: *mut bindings::iscsi_transport| {
                // SAFETY: `sht` and `eps` were initialised above (fields
                // initialise in the order written) and are pinned in `this`.
                let (sht, eps) = unsafe {
                    (
                        (*this.as_ptr()).sht.as_raw(),
                        (&raw const (*this.as_ptr()).eps).cast_mut(),
                    )
                };
                // SAFETY: `slot` is valid for writes; an all-zero transport
                // is a valid value (no callbacks) that the lines below fill.
                unsafe { core::ptr::write_bytes(slot, 0, 1) };
                // SAFETY: `slot` is valid and initialised just above.
                let t = unsafe { &mut *slot };
                t.owner = module.as_ptr();
                // The C field is not const, but scsi_transport_iscsi only
                // reads the name.
                t.name = T::NAME.as_char_ptr().cast_mut();
                t.caps = T::CAPS;
                t.attr_is_visible = Some(attr_is_visible_callback::<T>);
                t.create_session = Some(create_session_callback::<T>);
                t.destroy_session = Some(destroy_session_callback::<T>);
                t.create_conn = Some(create_conn_callback::<T>);
                t.bind_conn = Some(bind_conn_callback::<T>);
                t.unbind_conn = Some(bindings::iscsi_conn_unbind);
                t.start_conn = Some(bindings::iscsi_conn_start);
                t.stop_conn = Some(stop_conn_callback::<T>);
                t.destroy_conn = Some(destroy_conn_callback::<T>);
                t.set_param = Some(set_param_callback::<T>);
                t.get_ep_param = Some(get_ep_param_callback::<T>);
                t.get_conn_param = Some(bindings::iscsi_conn_get_param);
                t.get_session_param = Some(bindings::iscsi_session_get_param);
                t.get_host_param = Some(bindings::iscsi_host_get_param);
                t.set_host_param = Some(bindings::iscsi_host_set_param);
                t.send_pdu = Some(send_pdu_callback::<T>);
                t.get_stats = Some(get_stats_callback::<T>);
                t.init_task = Some(init_task_callback::<T>);
                t.xmit_task = Some(xmit_task_callback::<T>);
                t.cleanup_task = Some(cleanup_task_callback::<T>);
                t.alloc_pdu = Some(alloc_pdu_callback::<T>);
                t.session_recovery_timedout = Some(bindings::iscsi_session_recovery_timedout);
                t.ep_connect = Some(ep_connect_callback::<T>);
                t.ep_poll = Some(ep_poll_callback::<T>);
                t.ep_disconnect = Some(ep_disconnect_callback::<T>);
                let reg = T::registry();
                // One registration per transport type at a time: the
                // registry is claimed first, so a second `Transport::<T>`
                // fails without touching the first one's pointers.
                if reg
                    .tt
                    .compare_exchange(null_mut(), slot, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    pr_err!(
                        "iSCSI transport \"{}\" is already registered\n",
                        T::NAME.to_str().unwrap_or("?")
                    );
                    return Err(EEXIST);
                }
                reg.sht.store(sht, Ordering::Release);
                reg.eps.store(eps, Ordering::Release);
                // SAFETY: `slot` is pinned inside `Self` and unregistered in
                // `PinnedDrop::drop` before it goes away.
                let scsi = unsafe { bindings::iscsi_register_transport(slot) };
                if scsi.is_null() {
                    reg.tt.store(null_mut(), Ordering::Release);
                    reg.eps.store(null_mut(), Ordering::Release);
                    reg.sht.store(null_mut(), Ordering::Release);
                    // scsi_transport_iscsi refuses a taken name silently.
                    pr_err!(
                        "cannot register iSCSI transport \"{}\": the name is taken, most \
                         likely by ib_iser (rmmod ib_iser, then load riser again)\n",
                        T::NAME.to_str().unwrap_or("?")
                    );
                    return Err(EEXIST);
                }
                reg.scsi.store(scsi, Ordering::Release);
                Ok(())
            }),
        })
    }
}

impl<T: TransportOps> Transport<T> {
    /// The host template of the sessions' hosts.
    pub(crate) fn host_template(&self) -> &HostTemplate {
        &self.sht
    }
}

#[pinned_drop]
impl<T: TransportOps> PinnedDrop for Transport<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant the transport is registered.
        unsafe { bindings::iscsi_unregister_transport(self.tt.get()) };
        let reg = T::registry();
        reg.scsi.store(null_mut(), Ordering::Release);
        reg.tt.store(null_mut(), Ordering::Release);
        reg.eps.store(null_mut(), Ordering::Release);
        reg.sht.store(null_mut(), Ordering::Release);
    }
}

/// scsi_transport_iscsi's `attr_is_visible`.
///
/// # Safety
///
/// Called by scsi_transport_iscsi only; it takes no pointers.
pub(super) unsafe extern "C" fn attr_is_visible_callback<T: TransportOps>(
    param_type: c_int,
    param: c_int,
) -> bindings::umode_t {
    let Ok(param) = u32::try_from(param) else {
        return 0;
    };
    let attr = match u32::try_from(param_type) {
        Ok(bindings::iscsi_param_type_ISCSI_HOST_PARAM) => Attr::Host(param),
        Ok(bindings::iscsi_param_type_ISCSI_PARAM) => Attr::Param(param),
        _ => Attr::Other,
    };
    if T::attr_visible(attr) {
        // S_IRUGO: read-only for everyone.
        0o444
    } else {
        0
    }
}

/// The `iscsi_session` of a class session.
///
/// # Safety
///
/// `cls` must be a live session made by libiscsi.
unsafe fn session_of(cls: *mut bindings::iscsi_cls_session) -> *mut bindings::iscsi_session {
    // SAFETY: libiscsi's class sessions carry the `iscsi_session` as dd_data.
    unsafe { (*cls).dd_data.cast() }
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with `ep` null or a live endpoint.
unsafe extern "C" fn create_session_callback<T: TransportOps>(
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

fn create_session<T: TransportOps>(
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
    // SAFETY: `sht` is the registered transport's live host template
    // (invariant of `Registry`); no transmit workqueue (atomic xmit).
    let shost = unsafe { bindings::iscsi_host_alloc(sht, 0, false) };
    let shost = NonNull::new(shost).ok_or(ENOMEM)?;
    let sh = shost.as_ptr();
    // SAFETY: `sh` is a new host, not yet added, owned here.
    unsafe {
        (*sh).transportt = scsi;
        (*sh).cmd_per_lun = i16::try_from(qdepth).unwrap_or(i16::MAX);
        (*sh).max_lun = u64::from(lim.max_lun);
        (*sh).max_id = 0;
        (*sh).max_channel = 0;
        (*sh).max_cmd_len = 16;
        (*sh).can_queue = c_int::from(lim.can_queue);
        (*sh).sg_tablesize = lim.sg_tablesize;
        (*sh).max_sectors = lim.max_sectors;
        if lim.virt_boundary_4k {
            (*sh).virt_boundary_mask = 4096 - 1;
        }
    }
    let parent = match &dev {
        // SAFETY: The device is referenced by `dev`; its embedded `struct
        // device`'s parent is set at registration.
        Some(d) => unsafe { (*d.device().as_raw()).__bindgen_anon_1.dev.as_ref().parent },
        None => null_mut(),
    };
    // SAFETY: `sh` is a valid new host; `parent` is null or a live device.
    if let Err(e) = to_result(unsafe { bindings::iscsi_host_add(sh, parent) }) {
        // SAFETY: The host was allocated above and not added.
        unsafe { bindings::iscsi_host_free(sh) };
        return Err(e);
    }
    let slot_size = c_int::try_from(size_of::<TaskSlot>())?;
    // SAFETY: `tt` is the registered transport; `sh` an added host.
    let cls = unsafe {
        bindings::iscsi_session_setup(tt, sh, lim.can_queue, 0, slot_size, initial_cmdsn, 0)
    };
    let Some(cls) = NonNull::new(cls) else {
        // SAFETY: The host was added above and has no session.
        unsafe {
            bindings::iscsi_host_remove(sh, false);
            bindings::iscsi_host_free(sh);
        }
        return Err(ENOMEM);
    };
    // SAFETY: The session was just set up: `cmds` holds `cmds_max` tasks
    // whose `dd_data` areas are `slot_size` bytes, not yet used.
    unsafe {
        let s = session_of(cls.as_ptr());
        for i in 0..(*s).cmds_max.unsigned_abs() {
            let task = *(*s).cmds.add(i as usize);
            let slot = (*task).dd_data.cast::<TaskSlot>();
            slot.write(TaskSlot::new());
        }
    }
    Ok(cls)
}

/// How many [`super::TaskRef`]s are alive on the tasks of `s`.
///
/// # Safety
///
/// `s` must be a live session made by `create_session::<T>`.
unsafe fn task_refs<T: TransportOps>(s: *mut bindings::iscsi_session) -> u32 {
    let mut n = 0u32;
    // SAFETY: The session is live; `create_session` initialised a slot in
    // every task's dd_data.
    unsafe {
        for i in 0..(*s).cmds_max.unsigned_abs() {
            let task = *(*s).cmds.add(i as usize);
            let slot = (*task).dd_data.cast::<TaskSlot>();
            n = n.saturating_add((*slot).refs.load(Ordering::Acquire));
        }
    }
    n
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a session made by
/// `create_session_callback::<T>`.
unsafe extern "C" fn destroy_session_callback<T: TransportOps>(
    cls: *mut bindings::iscsi_cls_session,
) {
    // SAFETY: The session is live and made by `create_session`.
    let refs = unsafe { task_refs::<T>(session_of(cls)) };
    if refs > 0 {
        // A driver bug: freeing the tasks would leave those references
        // dangling. Leaking the session is the safe way out.
        pr_err!(
            "session destroyed with {} task references held by the transport: leaking it\n",
            refs
        );
        return;
    }
    // SAFETY: The session is live and was made by `create_session`, which
    // initialised every task slot; libiscsi uses no task any more.
    unsafe {
        let sh = bindings::riser_iscsi_session_to_shost(cls);
        let s = session_of(cls);
        for i in 0..(*s).cmds_max.unsigned_abs() {
            let task = *(*s).cmds.add(i as usize);
            // Emptied, not dropped in place: a slot stays valid for
            // anything that still looks at it before the pool is freed.
            TaskSlot::take_contents((*task).dd_data.cast::<TaskSlot>());
        }
        bindings::iscsi_session_teardown(cls);
        bindings::iscsi_host_remove(sh, false);
        bindings::iscsi_host_free(sh);
    }
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live session.
unsafe extern "C" fn create_conn_callback<T: TransportOps>(
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
                .write(Binding {
                    ep: AtomicPtr::new(null_mut()),
                    slot: AtomicPtr::new(null_mut()),
                })
        };
    }
    cls_conn
}

/// The `iscsi_conn` of a class connection.
///
/// # Safety
///
/// `cls` must be a live connection made by libiscsi.
unsafe fn conn_of(cls: *mut bindings::iscsi_cls_conn) -> *mut bindings::iscsi_conn {
    // SAFETY: libiscsi's class connections carry the `iscsi_conn` as dd_data.
    unsafe { (*cls).dd_data.cast() }
}

/// Clears the slot bind set to `conn`, if any: the endpoint no longer
/// reaches the connection once this returns.
///
/// # Safety
///
/// `conn` must be a live connection made by `create_conn_callback`.
unsafe fn clear_slot(conn: *mut bindings::iscsi_conn) {
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
unsafe fn unbind_ep<T: TransportOps>(conn: *mut bindings::iscsi_conn) {
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

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live session and connection.
unsafe extern "C" fn bind_conn_callback<T: TransportOps>(
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
unsafe extern "C" fn stop_conn_callback<T: TransportOps>(
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
    // SAFETY: The connection is live; libiscsi fails its tasks, calling
    // `cleanup_task` with the endpoint still bound.
    unsafe { bindings::iscsi_conn_stop(cls_conn, flag) };
    // SAFETY: Nothing reads the binding any more.
    unsafe { unbind_ep::<T>(conn) };
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live, stopped connection.
unsafe extern "C" fn destroy_conn_callback<T: TransportOps>(
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
    let refs = unsafe { task_refs::<T>((*conn).session) };
    if refs > 0 {
        // Dropping those references reaches the connection: leak it rather
        // than free it under them (a driver bug; said loudly).
        pr_err!(
            "connection destroyed with {} task references held by the transport: leaking it\n",
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
unsafe extern "C" fn set_param_callback<T: TransportOps>(
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
fn fmt_u32(v: u32, out: &mut [u8; 12]) -> usize {
    let mut digits = [0u8; 10];
    let d = crate::proto::login::decimal(v, &mut digits);
    out[..d.len()].copy_from_slice(d);
    out[d.len()] = 0;
    d.len()
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live endpoint and a page
/// `buf`.
pub(super) unsafe extern "C" fn get_ep_param_callback<T: TransportOps>(
    ep: *mut bindings::iscsi_endpoint,
    param: bindings::iscsi_param,
    buf: *mut c_char,
) -> c_int {
    if param != bindings::iscsi_param_ISCSI_PARAM_CONN_ADDRESS
        && param != bindings::iscsi_param_ISCSI_PARAM_CONN_PORT
    {
        return ENOSYS.to_errno();
    }
    // SAFETY: A callback of `T`.
    let Some(dst) = (unsafe { ep_lookup::<T>(ep) }).and_then(|e| T::ep_dst(&e)) else {
        return ENOTCONN.to_errno();
    };
    let mut ss = crate::sockaddr::storage(dst);
    // SAFETY: `ss` is a valid IPv4 address; `buf` a page (contract).
    unsafe { bindings::iscsi_conn_get_addr_param(&mut ss, param, buf) }
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live connection, a BHS and
/// `data_size` bytes at `data`.
unsafe extern "C" fn send_pdu_callback<T: TransportOps>(
    cls_conn: *mut bindings::iscsi_cls_conn,
    hdr: *mut bindings::iscsi_hdr,
    data: *mut c_char,
    data_size: u32,
) -> c_int {
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
                    core::slice::from_raw_parts(data.cast::<u8>(), data_size as usize)
                },
            )
        };
        match T::send_pdu_hook(&ep, &h, d) {
            Ok(r) => rewrite = r,
            Err(e) => return e.to_errno(),
        }
    }
    match rewrite {
        Some(mut r) => {
            let mut h = bindings::iscsi_hdr::default();
            // SAFETY: `iscsi_hdr` is 48 bytes of plain data.
            unsafe {
                core::ptr::copy_nonoverlapping(r.hdr.as_ptr(), (&raw mut h).cast::<u8>(), BHS_LEN)
            };
            let Ok(len) = u32::try_from(r.data.len()) else {
                return EINVAL.to_errno();
            };
            // SAFETY: The connection is live; libiscsi copies the header and
            // `len` bytes of data before returning.
            unsafe {
                bindings::iscsi_conn_send_pdu(cls_conn, &mut h, r.data.as_mut_ptr().cast(), len)
            }
        }
        // SAFETY: Forwarded unchanged (contract).
        None => unsafe { bindings::iscsi_conn_send_pdu(cls_conn, hdr, data, data_size) },
    }
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live connection.
unsafe extern "C" fn get_stats_callback<T: TransportOps>(
    cls_conn: *mut bindings::iscsi_cls_conn,
    stats: *mut bindings::iscsi_stats,
) {
    // SAFETY: The connection is live (contract).
    let conn = unsafe { conn_of(cls_conn) };
    // SAFETY: As above.
    let octets = unsafe { bound_ep_arc::<T>(conn) }.map(|ep| T::data_octets(&ep));
    // SAFETY: Both are live (contract); the counters are plain reads.
    unsafe {
        let c = &*conn;
        let s = &mut *stats;
        (s.txdata_octets, s.rxdata_octets) = octets.unwrap_or((c.txdata_octets, c.rxdata_octets));
        s.scsicmd_pdus = c.scsicmd_pdus_cnt;
        s.dataout_pdus = c.dataout_pdus_cnt;
        s.scsirsp_pdus = c.scsirsp_pdus_cnt;
        s.datain_pdus = c.datain_pdus_cnt;
        s.r2t_pdus = c.r2t_pdus_cnt;
        s.tmfcmd_pdus = c.tmfcmd_pdus_cnt;
        s.tmfrsp_pdus = c.tmfrsp_pdus_cnt.unsigned_abs();
        s.custom_length = 0;
    }
}

/// # Safety
///
/// Called by libiscsi only, with a live task of a session of `T`.
unsafe extern "C" fn alloc_pdu_callback<T: TransportOps>(
    task: *mut bindings::iscsi_task,
    _opcode: u8,
) -> c_int {
    // SAFETY: The task's dd_data holds its slot (made at session creation);
    // the header lives there for the session's life.
    unsafe {
        let slot = (*task).dd_data.cast::<TaskSlot>();
        (*task).hdr = (*slot).hdr.get();
        // CAST: a BHS is 48 bytes.
        (*task).hdr_max = BHS_LEN as u16;
    }
    0
}

/// # Safety
///
/// Called by libiscsi only, with a live task of a session of `T`.
unsafe extern "C" fn init_task_callback<T: TransportOps>(task: *mut bindings::iscsi_task) -> c_int {
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
unsafe extern "C" fn xmit_task_callback<T: TransportOps>(task: *mut bindings::iscsi_task) -> c_int {
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
unsafe extern "C" fn cleanup_task_callback<T: TransportOps>(task: *mut bindings::iscsi_task) {
    // SAFETY: As in `init_task_callback`; the binding may be gone.
    let ep = unsafe { bound_ep::<T>((*task).conn) };
    // SAFETY: As in `init_task_callback`.
    if let Some(mut t) = unsafe { Task::<T>::from_raw(task) } {
        T::cleanup_task(ep.as_deref(), &t);
        // Whatever the driver did, the data is unmapped now, before
        // libiscsi hands the command back to the midlayer.
        t.unmap_data();
    }
}

/// # Safety
///
/// Called by scsi_transport_iscsi only; `dst` points to at least a `struct
/// sockaddr` (which the transport class checks the netlink request holds).
pub(super) unsafe extern "C" fn ep_connect_callback<T: TransportOps>(
    _shost: *mut bindings::Scsi_Host,
    dst: *mut bindings::sockaddr,
    _non_blocking: c_int,
) -> *mut bindings::iscsi_endpoint {
    // SAFETY: `dst` holds a `struct sockaddr` (function contract).
    let Some(addr) = (unsafe { crate::sockaddr::from_raw(dst) }) else {
        pr_err!("ep_connect: only IPv4 portals are supported\n");
        return ERR_PTR(EAFNOSUPPORT);
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
        match t.push((ep as usize, e.clone()), GFP_KERNEL) {
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
fn ERR_PTR<T>(e: Error) -> *mut T {
    // CAST: error pointers encode the negative errno in the address.
    e.to_errno() as isize as *mut T
}

/// # Safety
///
/// Called by scsi_transport_iscsi only, with a live endpoint.
pub(super) unsafe extern "C" fn ep_poll_callback<T: TransportOps>(
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
pub(super) unsafe extern "C" fn ep_disconnect_callback<T: TransportOps>(
    ep: *mut bindings::iscsi_endpoint,
) {
    // SAFETY: A callback of `T`.
    let Some(eps) = (unsafe { endpoints::<T>() }) else {
        return;
    };
    let mine = {
        let mut t = eps.lock();
        match t.iter().position(|(p, _)| *p == ep as usize) {
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
