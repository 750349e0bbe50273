// SPDX-License-Identifier: GPL-2.0

//! RDMA devices and the `ib_client` registration that hands them to riser.

use super::AsyncEvent;
use crate::bindings;
use core::{
    marker::PhantomData,
    net::{
        Ipv4Addr,
        Ipv6Addr, //
    },
    ptr::{
        null_mut,
        NonNull, //
    },
    sync::atomic::{
        AtomicBool,
        AtomicPtr,
        Ordering, //
    },
};
use kernel::{
    alloc::{
        KBox,
        KVec, //
    },
    error::{
        from_result,
        to_result, //
    },
    prelude::*,
    str::CStrExt,
    sync::aref::ARef,
    types::{
        ForeignOwnable,
        Opaque, //
    },
};

/// An RDMA device (`struct ib_device`), borrowed from ib_core.
///
/// # Invariants
///
/// A `&Device` always points to a registered `ib_device` that stays valid for
/// the reference's lifetime: ib_core hands devices to clients between their
/// `add` and `remove` callbacks only.
#[repr(transparent)]
pub(crate) struct Device(Opaque<bindings::ib_device>);

// SAFETY: An `ib_device` may be used from any thread; ib_core serialises what
// needs it.
unsafe impl Send for Device {}
// SAFETY: Shared references only read immutable attributes or call verbs that
// take their own locks.
unsafe impl Sync for Device {}

/// A device's name as it was when read.
pub(crate) struct DeviceName(
    [c_char; kernel::num::casts::u32_as_usize(bindings::IB_DEVICE_NAME_MAX)],
);

impl DeviceName {
    /// The name's bytes, up to the first NUL.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        let len = self.0.iter().position(|&c| c == 0).unwrap_or(self.0.len());
        &self.0[..len]
    }
}

/// The capabilities of a device riser sizes its queues and registrations by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceCaps {
    /// Most work requests a QP's queue may hold.
    pub(crate) max_qp_wr: u32,
    /// Most scatter/gather entries of a send work request.
    pub(crate) max_send_sge: u32,
    /// Most scatter/gather entries of a receive work request.
    pub(crate) max_recv_sge: u32,
    /// Most entries of a CQ.
    pub(crate) max_cqe: u32,
    /// Most outstanding RDMA READs a QP may be the target of.
    pub(crate) max_qp_rd_atom: u32,
    /// Most pages one fast-registration work request may map.
    pub(crate) max_fast_reg_page_list_len: u32,
    /// `IB_DEVICE_*` capability flags.
    pub(crate) device_cap_flags: u64,
    /// Number of completion vectors.
    pub(crate) num_comp_vectors: u32,
}

impl Device {
    /// Creates a reference from a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a registered `ib_device` that stays valid for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: `Device` is transparent over `Opaque<ib_device>`; validity
        // for `'a` is the caller's promise.
        unsafe { &*ptr.cast::<Self>() }
    }

    /// The raw `ib_device` pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_device {
        self.0.get()
    }

    /// The device's name, such as `rxe0`, copied out (a rename may change
    /// it later).
    pub(crate) fn name(&self) -> DeviceName {
        // SAFETY: By the type invariant the device is valid; `name` is a
        // byte array inside it, read without making a reference.
        DeviceName(unsafe { core::ptr::read(&raw const (*self.as_raw()).name) })
    }

    /// The device's capabilities.
    pub(crate) fn caps(&self) -> DeviceCaps {
        // SAFETY: By the type invariant the device is valid; `attrs` is filled
        // by the driver before registration and not changed afterwards.
        let (a, vectors) = unsafe { (&(*self.as_raw()).attrs, (*self.as_raw()).num_comp_vectors) };
        DeviceCaps {
            max_qp_wr: a.max_qp_wr,
            max_send_sge: a.max_send_sge,
            max_recv_sge: a.max_recv_sge,
            max_cqe: a.max_cqe,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_fast_reg_page_list_len: a.max_fast_reg_page_list_len,
            device_cap_flags: a.device_cap_flags,
            num_comp_vectors: u32::try_from(vectors).unwrap_or(0),
        }
    }

    /// Calls `f` with each valid GID of `port`, in table order, while it
    /// returns `true`. Copies each GID under the table's read lock and
    /// takes no reference on an entry, so it may run from a GID-change
    /// event handler (which ib_core calls with the table's mutex held).
    fn for_each_gid(&self, port: u32, mut f: impl FnMut([u8; 16]) -> bool) {
        // Past the table's end `rdma_query_gid` fails with EINVAL; the cap
        // only bounds a device that reported a huge table.
        for index in 0..4096 {
            let mut gid = bindings::ib_gid::default();
            // SAFETY: The device is valid (type invariant); `gid` is
            // writable; an invalid port or index is refused with an error.
            let ret = unsafe { bindings::rdma_query_gid(self.as_raw(), port, index, &mut gid) };
            if ret == ENOENT.to_errno() {
                // An empty entry (the table may have holes).
                continue;
            }
            if ret != 0 {
                break;
            }
            // SAFETY: Every bit pattern of the GID union is a valid byte
            // array.
            if !f(unsafe { *gid.raw.as_ref() }) {
                break;
            }
        }
    }

    /// Whether the GID table of `port` holds `gid`.
    pub(crate) fn port_has_gid(&self, port: u32, gid: &[u8; 16]) -> bool {
        let mut found = false;
        self.for_each_gid(port, |g| {
            found = g == *gid;
            !found
        });
        found
    }

    /// The IPv4 addresses in the GID table of `port` (RoCE v2 GIDs are
    /// IPv4-mapped IPv6 addresses), at most `max` of them.
    pub(crate) fn ipv4_gids(&self, port: u32, max: usize) -> Result<KVec<Ipv4Addr>> {
        let mut out = KVec::new();
        let mut res = Ok(());
        self.for_each_gid(port, |raw| {
            if let Some(v4) = Ipv6Addr::from(raw).to_ipv4_mapped() {
                res = out.push(v4, GFP_KERNEL).map_err(Error::from);
            }
            res.is_ok() && out.len() < max
        });
        res.map(|()| out)
    }
}

/// A counted reference on an RDMA device: the device stays registered (its
/// unregistration waits) until every reference is dropped.
///
/// # Invariants
///
/// `ptr` points to an `ib_device` on which this value holds one reference
/// taken with `ib_device_try_get`.
pub(crate) struct DeviceRef {
    ptr: NonNull<bindings::ib_device>,
}

// SAFETY: A device reference may be used and released from any thread.
unsafe impl Send for DeviceRef {}
// SAFETY: Shared references only read the device.
unsafe impl Sync for DeviceRef {}

impl DeviceRef {
    /// Takes a reference on `dev`; fails with `ENODEV` once the device is
    /// being unregistered.
    pub(crate) fn new(dev: &Device) -> Result<Self> {
        // SAFETY: `dev` is a registered device (type invariant of `Device`).
        if !unsafe { bindings::riser_ib_device_try_get(dev.as_raw()) } {
            return Err(ENODEV);
        }
        // INVARIANT: the reference was taken just above.
        Ok(Self {
            ptr: NonNull::new(dev.as_raw()).ok_or(ENODEV)?,
        })
    }

    /// The device.
    pub(crate) fn device(&self) -> &Device {
        // SAFETY: The reference keeps the device valid (type invariant).
        unsafe { Device::from_raw(self.ptr.as_ptr()) }
    }

    /// The device the RDMA device sits on (the parent of its `struct
    /// device`: a PCI function, or the network device's parent for soft
    /// RDMA), counted: the SCSI hosts of riser's sessions go under it.
    pub(crate) fn parent(&self) -> Option<ARef<kernel::device::Device>> {
        // SAFETY: The device is valid (type invariant); the embedded
        // `struct device`'s parent is set at registration and not changed.
        let p = unsafe { (*self.raw()).__bindgen_anon_1.dev.as_ref().parent };
        // SAFETY: A registered device holds a reference on its parent, so
        // the parent is live with a non-zero count; a device's release may
        // run on any thread.
        (!p.is_null()).then(|| unsafe { kernel::device::Device::get_device(p) })
    }

    pub(super) fn raw(&self) -> *mut bindings::ib_device {
        self.ptr.as_ptr()
    }
}

impl Clone for DeviceRef {
    fn clone(&self) -> Self {
        // Another reference while this one is held: the count is not zero,
        // so a plain increment does what `ib_device_try_get` would (and is
        // inlined, where that is a call: one per data mapping).
        // SAFETY: The device is valid and referenced (type invariant), so
        // its `refcount` is live and above zero.
        unsafe { bindings::refcount_inc(&raw mut (*self.raw()).refcount) };
        // INVARIANT: the reference was taken just above.
        Self { ptr: self.ptr }
    }
}

impl Drop for DeviceRef {
    fn drop(&mut self) {
        // SAFETY: This value holds one reference (type invariant).
        unsafe { bindings::ib_device_put(self.raw()) };
    }
}

/// A device's references for DMA mappings, counted per CPU: taking one
/// ([`MapDevice::get`]) and dropping it is a per-CPU add, with no locked
/// instruction, where a [`DeviceRef`]'s clone is an atomic one. The device
/// stays registered (one `DeviceRef` held) until this value and every
/// [`MapRef`] taken from it are gone; dropping this value waits for none
/// of them.
///
/// # Invariants
///
/// `inner` points to a [`MapInner`] that `MapDevice::new` allocated, whose
/// `count` is initialised and holds one reference for this value and one
/// for each live [`MapRef`]; once the count reaches zero (after this
/// value's drop kills it), its release callback ([`map_released`]) frees
/// it, and nothing else does.
pub(crate) struct MapDevice {
    inner: NonNull<MapInner>,
}

/// What a [`MapDevice`] and its [`MapRef`]s share: the count (first, so
/// that the release callback finds the whole from it) and the device.
#[repr(C)]
struct MapInner {
    count: Opaque<bindings::percpu_ref>,
    dev: DeviceRef,
}

/// One reference on a [`MapDevice`]'s device, for a mapping.
///
/// # Invariants
///
/// `inner` is a live [`MapInner`] whose count holds one reference for
/// this value.
pub(crate) struct MapRef {
    inner: NonNull<MapInner>,
}

// SAFETY: The count may be taken and dropped from any thread; the device
// reference is `Send` and `Sync`.
unsafe impl Send for MapDevice {}
// SAFETY: As above: shared references only take references (per-CPU
// adds, safe from any CPU) or read the device.
unsafe impl Sync for MapDevice {}
// SAFETY: As for `MapDevice`.
unsafe impl Send for MapRef {}
// SAFETY: As for `MapDevice`.
unsafe impl Sync for MapRef {}

impl MapDevice {
    /// Mapping references on `dev`'s device (process context: it
    /// allocates).
    pub(crate) fn new(dev: &DeviceRef) -> Result<Self> {
        let inner = KBox::new(
            MapInner {
                count: Opaque::uninit(),
                dev: dev.clone(),
            },
            GFP_KERNEL,
        )?;
        let p = KBox::into_raw(inner);
        // SAFETY: `count` is storage of a live allocation, not yet
        // initialised; the callback frees that allocation, which
        // `KBox::into_raw` just gave up, once the count reaches zero.
        let r = unsafe {
            bindings::riser_percpu_ref_init(
                Opaque::cast_into(&raw const (*p).count),
                Some(map_released),
            )
        };
        if r != 0 {
            // SAFETY: `p` came from `KBox::into_raw` just above; the count
            // was not initialised, so no callback will free it.
            drop(unsafe { KBox::from_raw(p) });
            return Err(Error::from_errno(r));
        }
        // INVARIANT: initialised just above, holding the initial reference,
        // which is this value's.
        Ok(Self {
            // SAFETY: `KBox::into_raw` gives a non-null pointer.
            inner: unsafe { NonNull::new_unchecked(p) },
        })
    }

    /// A reference on the device for a mapping.
    #[inline(always)]
    pub(crate) fn get(&self) -> MapRef {
        // SAFETY: The count is initialised and, holding this value's
        // reference, above zero (type invariant).
        unsafe {
            bindings::riser_percpu_ref_get(Opaque::cast_into(
                &raw const (*self.inner.as_ptr()).count,
            ))
        };
        // INVARIANT: taken just above.
        MapRef { inner: self.inner }
    }
}

impl Drop for MapDevice {
    fn drop(&mut self) {
        // SAFETY: The count is initialised and this value's reference is
        // still held (type invariant): killing it drops that reference,
        // once; the callback frees `inner` when the last `MapRef` goes.
        unsafe {
            bindings::riser_percpu_ref_kill(Opaque::cast_into(
                &raw const (*self.inner.as_ptr()).count,
            ))
        };
    }
}

impl MapRef {
    /// Whether this reference was taken from `dev` ([`MapDevice::get`]).
    #[inline(always)]
    pub(crate) fn is_of(&self, dev: &MapDevice) -> bool {
        self.inner == dev.inner
    }

    /// The device.
    #[inline(always)]
    pub(super) fn raw(&self) -> *mut bindings::ib_device {
        // SAFETY: `inner` is live while this reference is held (type
        // invariant).
        unsafe { (*self.inner.as_ptr()).dev.raw() }
    }
}

impl Drop for MapRef {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: This value holds one reference (type invariant), dropped
        // once; the last one frees `inner` (through `map_released`), which
        // is not touched after.
        unsafe {
            bindings::riser_percpu_ref_put(Opaque::cast_into(
                &raw const (*self.inner.as_ptr()).count,
            ))
        };
    }
}

/// The release callback of a [`MapInner`]'s count: the last reference
/// went (after the owner killed the count). Any context, as `percpu_ref`
/// calls it where the last reference goes.
///
/// # Safety
///
/// Called by `percpu_ref` only, once, with the count of a `MapInner` that
/// [`MapDevice::new`] allocated.
unsafe extern "C" fn map_released(count: *mut bindings::percpu_ref) {
    // SAFETY: `count` is the first field of a `MapInner` (`repr(C)`) that
    // came from `KBox::into_raw` (function contract); no reference is left,
    // so nothing else reaches it. `percpu_ref_exit` frees the per-CPU
    // counters (allowed in atomic context) and nothing after it touches
    // the count; then the device reference goes with the allocation.
    unsafe {
        bindings::riser_percpu_ref_exit(count);
        drop(KBox::from_raw(count.cast::<MapInner>()));
    }
}

/// What an `ib_client` does when devices come and go.
pub(crate) trait ClientDriver: 'static + Sized {
    /// The per-device context made in [`ClientDriver::add`] and dropped after
    /// [`ClientDriver::remove`].
    type Context: Send + Sync;

    /// The client's name, as ib_core shows it.
    const NAME: &'static CStr;

    /// Where the registration keeps its `ib_client` for the callbacks:
    /// written by [`crate::kernel_ext::registry::registry!`].
    fn registry() -> &'static ClientRegistry<Self>;

    /// A device appeared (or was present when the client registered). An
    /// error means the client does not use this device.
    fn add(dev: &Device) -> Result<KBox<Self::Context>>;

    /// An asynchronous event of a device `add` accepted (a port down or
    /// up, a GID change, a fatal error). Not called after `remove` begins.
    ///
    /// It may block, but it must not allocate memory that reclaim could
    /// wait for, nor take a lock held around device or address changes:
    /// most events come from ib_core's workqueue, but a GID change comes
    /// straight from the code that changed the table, with the table's
    /// mutex, ib_core's device and event-handler semaphores and sometimes
    /// the RTNL held.
    fn event(_dev: &Device, _ctx: &Self::Context, _ev: AsyncEvent) {}

    /// The device is being unregistered: called once for each device `add`
    /// accepted, with the context it made, which is dropped right after.
    ///
    /// Nothing needs to be freed here for soundness: every object that
    /// uses the device (a [`super::conn::DeviceRef`], and the PDs, CQs,
    /// buffers and connections holding one) keeps it registered, and ib_core
    /// waits for the last of them before the device goes. So a client must
    /// drop them when the device goes away, here or on the RDMA CM's
    /// device-removal event (the CM's own client is removed after riser's,
    /// as clients go in the reverse order of registration), or the
    /// unregistration waits.
    fn remove(dev: &Device, ctx: &Self::Context);
}

/// Where a registered [`Client`] of `T` records its `ib_client`: ib_core's
/// `add` callback receives only the device, yet storing the per-device
/// context (`ib_set_client_data`) needs the client.
///
/// # Invariants
///
/// `client` is null or the `ib_client` of the live [`Client<T>`] that
/// claimed the registry (by storing it there), from its `new` until its
/// drop has unregistered it: one [`Client`] at a time. `registered` is set
/// only while that client is registered with ib_core (so its `client_id`
/// is its own): set after `ib_register_client` returns, cleared and a
/// grace period waited before `ib_unregister_client`.
pub(crate) struct ClientRegistry<T: ClientDriver> {
    client: AtomicPtr<bindings::ib_client>,
    registered: AtomicBool,
    _p: PhantomData<T>,
}

impl<T: ClientDriver> ClientRegistry<T> {
    /// An unclaimed registry.
    pub(crate) const fn new() -> Self {
        Self {
            client: AtomicPtr::new(null_mut()),
            registered: AtomicBool::new(false),
            _p: PhantomData,
        }
    }

    /// Whether a [`Client`] of `T` is registered with ib_core.
    pub(crate) fn is_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }
}

/// A registered `ib_client`.
///
/// # Invariants
///
/// `client` is registered with ib_core, has claimed `T::registry()` and is
/// recorded there, from `new` until `drop`.
#[pin_data(PinnedDrop)]
pub(crate) struct Client<T: ClientDriver> {
    #[pin]
    client: Opaque<bindings::ib_client>,
    _p: PhantomData<T>,
}

// SAFETY: The registration only hands out the `ib_client` to ib_core, which
// synchronises its use.
unsafe impl<T: ClientDriver> Send for Client<T> {}
// SAFETY: No method of `Client` mutates it through a shared reference.
unsafe impl<T: ClientDriver> Sync for Client<T> {}

impl<T: ClientDriver> Client<T> {
    /// Registers the client; `add` runs for every device already present
    /// before this returns.
    ///
    /// Fails with `EEXIST` when a client of `T` is registered already.
    pub(crate) fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            client <- Opaque::try_ffi_init(|c: *mut bindings::ib_client| {
                let reg = T::registry();
                // Claimed before registering: `add` runs for the devices
                // present during `ib_register_client`, and looks it up.
                if reg
                    .client
                    .compare_exchange(null_mut(), c, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    return Err(EEXIST);
                }
                // SAFETY: `c` is valid for writes; an all-zero `ib_client` is
                // a valid value (no callbacks, no name).
                unsafe { core::ptr::write_bytes(c, 0, 1) };
                // SAFETY: `c` is valid and initialised just above.
                let client = unsafe { &mut *c };
                client.name = T::NAME.as_char_ptr();
                client.add = Some(Self::add_callback);
                client.remove = Some(Self::remove_callback);
                // SAFETY: `c` is pinned inside `Self` and stays registered
                // until `PinnedDrop::drop` unregisters it.
                let ret = to_result(unsafe { bindings::ib_register_client(c) });
                match ret {
                    Ok(()) => reg.registered.store(true, Ordering::Release),
                    Err(_) => reg.client.store(null_mut(), Ordering::Release),
                }
                ret
            }),
            _p: PhantomData,
        })
    }

    /// The context `add` made for `dev`, cloned.
    pub(crate) fn context_of(dev: &Device) -> Option<T::Context>
    where
        T::Context: Clone,
    {
        // `remove_callback` clears the data and waits for a grace period
        // before freeing it: under the RCU read lock the box stays valid.
        // The client's drop clears `registered` and waits for a grace
        // period before unregistering: under the lock it stays registered.
        let _rcu = kernel::sync::rcu::read_lock();
        let reg = T::registry();
        if !reg.registered.load(Ordering::Acquire) {
            return None;
        }
        let client = Self::find()?;
        // The data is null or the `KBox<T::Context>` stored by `add_callback`.
        // SAFETY: `dev` is registered, and `client` too (above).
        let p = unsafe { bindings::riser_ib_get_client_data(dev.as_raw(), client) };
        if p.is_null() {
            return None;
        }
        // SAFETY: As above; only borrowed for the clone, under `_rcu`.
        let data = unsafe { <Pin<KBox<DevData<T>>> as ForeignOwnable>::borrow(p) };
        Some((*data.ctx).clone())
    }

    fn raw(&self) -> *mut bindings::ib_client {
        self.client.get()
    }

    /// The registered `ib_client` of `T`.
    fn find() -> Option<*mut bindings::ib_client> {
        Some(T::registry().client.load(Ordering::Acquire)).filter(|c| !c.is_null())
    }

    /// ib_core's `add`.
    ///
    /// # Safety
    ///
    /// Called by ib_core only, with a registered `dev`.
    unsafe extern "C" fn add_callback(dev: *mut bindings::ib_device) -> c_int {
        from_result(|| {
            // SAFETY: ib_core calls `add` with a registered device that stays
            // valid until `remove` returns.
            let device = unsafe { Device::from_raw(dev) };
            // Our own client is registered while its `add` runs, so its
            // registry holds it.
            let client = Self::find().ok_or(EINVAL)?;
            let ctx = T::add(device)?;
            let data = KBox::pin_init(
                pin_init!(DevData::<T> {
                    handler <- Opaque::ffi_init(|h: *mut bindings::ib_event_handler| {
                        // SAFETY: `h` is valid for writes; an all-zero
                        // handler is valid, completed here.
                        unsafe {
                            core::ptr::write_bytes(h, 0, 1);
                            (*h).device = dev;
                            (*h).handler = Some(Self::event_callback);
                        }
                    }),
                    ctx,
                }),
                GFP_KERNEL,
            )?;
            // SAFETY: The handler is pinned in `data`, which lives until
            // `remove_callback` unregisters it.
            unsafe { bindings::ib_register_event_handler(data.handler.get()) };
            // SAFETY: `dev` is valid (above), `client` is this registered
            // client, and the pointer is reclaimed in `remove_callback`.
            unsafe { bindings::ib_set_client_data(dev, client, data.into_foreign()) };
            Ok(0)
        })
    }

    /// ib_core's `remove`.
    ///
    /// # Safety
    ///
    /// Called by ib_core only, once per successful `add`, with the device and
    /// the client data `add` stored (or null).
    unsafe extern "C" fn remove_callback(dev: *mut bindings::ib_device, data: *mut c_void) {
        if data.is_null() {
            return;
        }
        // SAFETY: ib_core calls `remove` with a device that is valid until
        // the callback returns.
        let device = unsafe { Device::from_raw(dev) };
        if let Some(client) = Self::find() {
            // Lookups (`context_of`) stop finding the context, and those
            // under way end, before it is freed.
            // SAFETY: `dev` and `client` are registered; storing null is
            // allowed at any time.
            unsafe {
                bindings::ib_set_client_data(dev, client, null_mut());
                bindings::synchronize_rcu();
            }
        }
        // SAFETY: A non-null `data` was made by `into_foreign` in
        // `add_callback`, and ib_core hands it back exactly once, here.
        let data = unsafe { Pin::<KBox<DevData<T>>>::from_foreign(data) };
        // Waits for a running event handler; none runs after.
        // SAFETY: The handler was registered in `add_callback`.
        unsafe { bindings::ib_unregister_event_handler(data.handler.get()) };
        T::remove(device, &data.ctx);
        drop(data);
    }

    /// ib_core's asynchronous event handler of a device `add` accepted.
    ///
    /// # Safety
    ///
    /// Called by ib_core only (from its workqueue, or for a GID change from
    /// the code that changed the table), with the handler registered in
    /// `add_callback` and a valid event of its device.
    unsafe extern "C" fn event_callback(
        h: *mut bindings::ib_event_handler,
        ev: *mut bindings::ib_event,
    ) {
        // SAFETY: `h` is the `handler` field of a live `DevData<T>`:
        // `remove_callback` unregisters it (waiting for this callback)
        // before freeing it. The event and its device are valid for the
        // call.
        let (data, device, ev) = unsafe {
            let data = &*kernel::container_of!(
                h.cast::<Opaque<bindings::ib_event_handler>>(),
                DevData<T>,
                handler
            );
            (
                data,
                Device::from_raw((*ev).device),
                AsyncEvent::from_raw(ev),
            )
        };
        T::event(device, &data.ctx, ev);
    }
}

/// What a registered client keeps for each device `add` accepted: the
/// device's asynchronous event handler and the driver's context.
///
/// # Invariants
///
/// `handler` is registered with ib_core from `add_callback` until
/// `remove_callback` unregisters it, before this value is dropped.
#[pin_data]
struct DevData<T: ClientDriver> {
    #[pin]
    handler: Opaque<bindings::ib_event_handler>,
    ctx: KBox<T::Context>,
}

#[pinned_drop]
impl<T: ClientDriver> PinnedDrop for Client<T> {
    fn drop(self: Pin<&mut Self>) {
        // No new `context_of` sees the client, and those under way end
        // before its `client_id` is given back.
        T::registry().registered.store(false, Ordering::Release);
        // SAFETY: By the type invariant the client is registered; this calls
        // `remove` for every device whose `add` succeeded.
        unsafe {
            bindings::synchronize_rcu();
            bindings::ib_unregister_client(self.raw());
        }
        T::registry().client.store(null_mut(), Ordering::Release);
        // A `MapDevice` killed last may still have its count's switch to
        // atomic pending in an RCU callback, which calls `map_released`:
        // done before the module (this code) can go.
        // SAFETY: No arguments; process context (the client's drop).
        unsafe { bindings::rcu_barrier() };
    }
}
