// SPDX-License-Identifier: GPL-2.0

//! The `iscsi_transport` registration and its C callbacks, by what they
//! act on: endpoints, sessions, connections, tasks.

pub(super) mod conn;
pub(super) mod endpoint;
mod session;
mod tasks;

use conn::*;
use endpoint::*;
use session::*;
use tasks::*;

use super::{
    Attr,
    TransportOps, //
};
use crate::{
    bindings,
    kernel_ext::scsi::HostTemplate, //
};
use core::{
    marker::PhantomData,
    ptr::null_mut,
    sync::atomic::{
        AtomicPtr,
        AtomicUsize,
        Ordering, //
    },
};
use kernel::{
    alloc::KVec,
    new_mutex,
    prelude::*,
    types::Opaque, //
};

/// The C objects a transport's callbacks need, which the callbacks (plain
/// functions) cannot otherwise reach.
///
/// # Invariants
///
/// Non-null pointers are set by [`Transport::new`] and point to the
/// registered transport, its SCSI transport template, its host template and
/// its table of endpoints, valid until the [`Transport`] is dropped (which
/// clears them after unregistering) or its registration fails (which clears
/// them before the table goes). `readers` counts the
/// [`Registry::for_each_endpoint`] calls under way; both clear `eps`, then
/// wait until none is left before the table goes.
pub(crate) struct Registry<T: TransportOps> {
    tt: AtomicPtr<bindings::iscsi_transport>,
    scsi: AtomicPtr<bindings::scsi_transport_template>,
    sht: AtomicPtr<bindings::scsi_host_template>,
    eps: AtomicPtr<Endpoints<T>>,
    readers: AtomicUsize,
}

impl<T: TransportOps> Registry<T> {
    /// An empty registry.
    pub(crate) const fn new() -> Self {
        Self {
            tt: AtomicPtr::new(null_mut()),
            scsi: AtomicPtr::new(null_mut()),
            sht: AtomicPtr::new(null_mut()),
            eps: AtomicPtr::new(null_mut()),
            readers: AtomicUsize::new(0),
        }
    }

    /// Calls `f` with each endpoint of the registered transport (none if
    /// it is not registered), for a driver that must act on every
    /// connection (an RDMA port went down). `f` runs under the table's
    /// mutex: it must not make, look up or drop endpoints. Allocates
    /// nothing, so it may run where reclaim must not be waited for.
    pub(crate) fn for_each_endpoint(&self, mut f: impl FnMut(&T::Ep)) {
        // Counted before the pointer is read: the drop clears the pointer,
        // then waits for the count (both sequentially consistent).
        self.readers.fetch_add(1, Ordering::SeqCst);
        let p = self.eps.load(Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: A non-null pointer read while counted is the
            // registered transport's table, which is freed only after the
            // pointer was cleared and the count fell to zero (type
            // invariant; `unpublish`).
            let eps = unsafe { &*p }.lock();
            for (_, e) in eps.iter() {
                f(e);
            }
        }
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Clears what a registration published, then waits until no
    /// [`Self::for_each_endpoint`] that saw the table still uses it.
    fn unpublish(&self) {
        self.scsi.store(null_mut(), Ordering::Release);
        self.tt.store(null_mut(), Ordering::Release);
        self.eps.store(null_mut(), Ordering::SeqCst);
        self.sht.store(null_mut(), Ordering::Release);
        while self.readers.load(Ordering::SeqCst) != 0 {
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(1));
        }
    }
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

impl<T: TransportOps> Transport<T> {
    /// The transport's callback table, built at compile time from what `T`
    /// implements (its `HAS_*` flags): a callback `T` leaves out is not
    /// offered to scsi_transport_iscsi and libiscsi, which then do without
    /// (or refuse the request). The layer's own callbacks (sessions,
    /// connections, PDUs, task transmission and cleanup) are always there:
    /// libiscsi calls `xmit_task` and `cleanup_task` unconditionally.
    pub(crate) const TABLE: bindings::iscsi_transport = {
        // SAFETY: All-zero is a valid `iscsi_transport`: no name, no owner,
        // no callbacks; the lines below fill it.
        let mut t: bindings::iscsi_transport = unsafe { core::mem::zeroed() };
        t.owner = <T::OwnerModule as kernel::ModuleMetadata>::THIS_MODULE.as_ptr();
        // The C field is not const, but scsi_transport_iscsi only reads the
        // name.
        t.name = kernel::str::as_char_ptr_in_const_context(T::NAME).cast_mut();
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
        t.get_conn_param = Some(bindings::iscsi_conn_get_param);
        t.get_session_param = Some(bindings::iscsi_session_get_param);
        t.get_host_param = Some(bindings::iscsi_host_get_param);
        t.set_host_param = Some(bindings::iscsi_host_set_param);
        t.send_pdu = Some(send_pdu_callback::<T>);
        t.get_stats = Some(get_stats_callback::<T>);
        t.xmit_task = Some(xmit_task_callback::<T>);
        t.cleanup_task = Some(cleanup_task_callback::<T>);
        t.alloc_pdu = Some(alloc_pdu_callback::<T>);
        t.session_recovery_timedout = Some(bindings::iscsi_session_recovery_timedout);
        if T::HAS_INIT_TASK {
            t.init_task = Some(init_task_callback::<T>);
        }
        if T::HAS_EP_CONNECT {
            t.ep_connect = Some(ep_connect_callback::<T>);
            t.ep_poll = Some(ep_poll_callback::<T>);
            t.ep_disconnect = Some(ep_disconnect_callback::<T>);
        }
        if T::HAS_EP_DST {
            t.get_ep_param = Some(get_ep_param_callback::<T>);
        }
        t
    };

    /// Registers the transport, whose sessions' hosts are made from `sht`.
    /// Fails with `EEXIST` when another transport (such as ib_iser's)
    /// already holds the name, or `T` is registered already.
    pub(crate) fn new(sht: impl PinInit<HostTemplate>) -> impl PinInit<Self, Error> {
        try_pin_init!(&this in Self {
            _p: PhantomData,
            sht <- sht,
            eps <- new_mutex!(KVec::new(), "riser_iscsi_eps"),
            tt <- Opaque::try_ffi_init(move |slot: *mut bindings::iscsi_transport| {
                // SAFETY: `sht` and `eps` were initialised above (fields
                // initialise in the order written) and are pinned in `this`.
                let (sht, eps) = unsafe {
                    (
                        (*this.as_ptr()).sht.as_raw(),
                        (&raw const (*this.as_ptr()).eps).cast_mut(),
                    )
                };
                // SAFETY: `slot` is valid for writes.
                unsafe { slot.write(Self::TABLE) };
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
                    // The table is freed with this failed initialisation:
                    // no reader may still hold it.
                    reg.unpublish();
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
        // `for_each_endpoint` calls that saw the table end before it goes.
        T::registry().unpublish();
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
