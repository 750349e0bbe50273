// SPDX-License-Identifier: GPL-2.0

//! Verbs objects: protection domain, completion queue, memory region. Each
//! owns its C object and releases it when dropped. (The QP is made on a CM
//! id and owned by [`super::conn::Connection`].)
//!
//! Over 500 lines because most of it is the `riser_rdma` KUnit suite,
//! which drives these objects, the ib_client and the CM on a real device.

use super::{
    device::DeviceRef,
    Device, //
};
use crate::bindings;
use core::ptr::NonNull;
use kernel::{
    error::from_err_ptr,
    prelude::*,
    sync::Arc, //
};

/// What `ib_post_send` or `ib_post_recv` returned, as a `Result`: inline,
/// unlike `to_result`, on the path of every I/O; the error is made out of
/// line, where it is rare.
#[inline(always)]
pub(crate) fn post_result(r: c_int) -> Result {
    if r >= 0 {
        Ok(())
    } else {
        Err(post_error(r))
    }
}

/// `ib_post_send` of ib_verbs.h, a static inline, written out here so that
/// it is inlined on every kernel (a C forward would be a call of its own
/// wherever the kernel does not link helpers as bitcode): the provider's
/// `post_send`, as ib_verbs.h calls it.
///
/// # Safety
///
/// `qp` is a valid QP; `wr` a chain of valid send work requests whose
/// buffers, SGE lists and MRs outlive the call; `bad` is writable.
#[inline(always)]
pub(crate) unsafe fn ib_post_send(
    qp: *mut bindings::ib_qp,
    wr: *const bindings::ib_send_wr,
    bad: *mut *const bindings::ib_send_wr,
) -> c_int {
    // SAFETY: `qp` is valid (function contract), and so is its device
    // while the QP is; a device's ops are set before it registers and not
    // changed after, and ib_core registers none without `post_send` (one
    // of ib_device_check_mandatory's functions).
    // The provider's post_send is then called as ib_post_send calls it
    // (`bad` is never null here: no dummy needed), with what the function
    // contract makes valid.
    unsafe { (*(*qp).device).ops.post_send.unwrap_unchecked()(qp, wr, bad) }
}

/// `ib_post_recv` of ib_verbs.h, written out as [`ib_post_send`] is.
///
/// # Safety
///
/// `qp` is a valid QP; `wr` a chain of valid receive work requests whose
/// buffers and SGE lists outlive the call; `bad` is writable.
#[inline(always)]
pub(crate) unsafe fn ib_post_recv(
    qp: *mut bindings::ib_qp,
    wr: *const bindings::ib_recv_wr,
    bad: *mut *const bindings::ib_recv_wr,
) -> c_int {
    // SAFETY: As in `ib_post_send`: `post_recv` is one of
    // ib_device_check_mandatory's functions too, and `bad` is never null.
    unsafe { (*(*qp).device).ops.post_recv.unwrap_unchecked()(qp, wr, bad) }
}

/// The error of a post the provider refused (`r`, a negative errno).
#[cold]
#[inline(never)]
fn post_error(r: c_int) -> Error {
    Error::from_errno(r)
}

/// A protection domain (`struct ib_pd`).
///
/// # Invariants
///
/// `ptr` points to a PD allocated by `ib_alloc_pd` and not yet deallocated.
/// Objects made in this PD hold it ([`Mr`] an `Arc`, a connection's QP its
/// `Arc`), so they are gone before it is dropped. `dev` keeps the device
/// registered until then.
pub(crate) struct Pd {
    ptr: NonNull<bindings::ib_pd>,
    dev: DeviceRef,
}

// SAFETY: A PD may be used and freed from any thread.
unsafe impl Send for Pd {}
// SAFETY: Shared references only read the PD's immutable fields or pass it to
// verbs that take their own locks.
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a protection domain on `dev`.
    pub(crate) fn new(dev: &Device) -> Result<Self> {
        Self::with_flags(dev, 0)
    }

    /// Allocates a protection domain on `dev` with a remote key that covers
    /// all of memory ([`Pd::global_rkey`]), for ib_iser's
    /// `always_register=0` mode: the peer may then reach any memory, which
    /// is why registering is the default.
    pub(crate) fn new_with_global_rkey(dev: &Device) -> Result<Self> {
        Self::with_flags(dev, bindings::ib_pd_flags_IB_PD_UNSAFE_GLOBAL_RKEY)
    }

    fn with_flags(dev: &Device, flags: u32) -> Result<Self> {
        // Taken first: a device being unregistered gets no new PD.
        let dev_ref = DeviceRef::new(dev)?;
        // SAFETY: `dev` is a registered device (type invariant of `Device`).
        let p = from_err_ptr(unsafe { bindings::riser_ib_alloc_pd(dev.as_raw(), flags) })?;
        // INVARIANT: `ib_alloc_pd` returned a valid PD; the device stays
        // registered while `dev_ref` lives.
        Ok(Self {
            ptr: NonNull::new(p).ok_or(ENOMEM)?,
            dev: dev_ref,
        })
    }

    /// The device the PD is on, for comparing with the device memory was
    /// mapped on.
    pub(super) fn device_ptr(&self) -> *mut bindings::ib_device {
        self.dev.raw()
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_pd {
        self.ptr.as_ptr()
    }

    /// The rkey that covers all of memory, if the PD was made with one.
    pub(crate) fn global_rkey(&self) -> Option<u32> {
        // SAFETY: The PD is valid (type invariant); the field is set at
        // allocation and never changed.
        let k = unsafe { (*self.as_raw()).unsafe_global_rkey };
        (k != 0).then_some(k)
    }

    /// The lkey that covers all of local memory without registration.
    pub(crate) fn local_dma_lkey(&self) -> u32 {
        // SAFETY: The PD is valid (type invariant); the field is set at
        // allocation and never changed.
        unsafe { (*self.as_raw()).local_dma_lkey }
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: The PD is valid (type invariant) and nothing made in it is
        // left: those objects borrow the PD.
        unsafe { bindings::riser_ib_dealloc_pd(self.as_raw()) };
    }
}

/// How a CQ's completions are processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PollContext {
    /// In softirq context (irq_poll).
    SoftIrq,
}

impl PollContext {
    fn raw(self) -> bindings::ib_poll_context {
        match self {
            Self::SoftIrq => bindings::ib_poll_context_IB_POLL_SOFTIRQ,
        }
    }
}

/// A completion queue taken from the device's shared CQ pool.
///
/// # Invariants
///
/// `ptr` was returned by `ib_cq_pool_get` for `nr_cqe` entries and is put
/// back with the same count in `drop`, while `_dev` keeps the device
/// registered.
pub(crate) struct Cq {
    ptr: NonNull<bindings::ib_cq>,
    nr_cqe: u32,
    _dev: DeviceRef,
}

// SAFETY: A pool CQ may be used and released from any thread.
unsafe impl Send for Cq {}
// SAFETY: Shared references only pass the CQ to verbs that synchronise.
unsafe impl Sync for Cq {}

impl Cq {
    /// Takes room for `nr_cqe` completions from a pool CQ of `dev`, near
    /// completion vector `comp_vector_hint`.
    pub(crate) fn from_pool(
        dev: &Device,
        nr_cqe: u32,
        comp_vector_hint: i32,
        poll: PollContext,
    ) -> Result<Self> {
        let dev_ref = DeviceRef::new(dev)?;
        // SAFETY: `dev` is a registered device (type invariant of `Device`).
        let p = from_err_ptr(unsafe {
            bindings::ib_cq_pool_get(dev.as_raw(), nr_cqe, comp_vector_hint, poll.raw())
        })?;
        // INVARIANT: the pool returned a CQ with room for `nr_cqe` entries;
        // the device stays registered while `dev_ref` lives.
        Ok(Self {
            ptr: NonNull::new(p).ok_or(ENOMEM)?,
            nr_cqe,
            _dev: dev_ref,
        })
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_cq {
        self.ptr.as_ptr()
    }

    /// The number of entries this CQ holds in all (it is shared).
    pub(crate) fn cqe(&self) -> u32 {
        // SAFETY: The CQ is valid (type invariant); `cqe` is set at creation.
        u32::try_from(unsafe { (*self.as_raw()).cqe }).unwrap_or(0)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: The CQ came from the pool for `nr_cqe` entries (type
        // invariant); every QP using it is gone, as they borrow it.
        unsafe { bindings::ib_cq_pool_put(self.as_raw(), self.nr_cqe) };
    }
}

/// A fast-registration memory region (`IB_MR_TYPE_MEM_REG`).
///
/// # Invariants
///
/// `ptr` points to an MR allocated by `ib_alloc_mr` in the PD `pd` holds,
/// and not yet deregistered.
pub(crate) struct Mr {
    ptr: NonNull<bindings::ib_mr>,
    max_num_sg: u32,
    pd: Arc<Pd>,
}

// SAFETY: An MR may be used and freed from any thread.
unsafe impl Send for Mr {}
// SAFETY: Shared references only read its keys, or hand the pointer out.
unsafe impl Sync for Mr {}

impl Mr {
    /// Allocates an MR in `pd` able to map `max_num_sg` pages with one
    /// REG_MR. The MR holds the PD.
    pub(crate) fn new_fast_reg(pd: &Arc<Pd>, max_num_sg: u32) -> Result<Self> {
        // SAFETY: `pd` is valid (type invariant of `Pd`).
        let p = from_err_ptr(unsafe {
            bindings::ib_alloc_mr(
                pd.as_raw(),
                bindings::ib_mr_type_IB_MR_TYPE_MEM_REG,
                max_num_sg,
            )
        })?;
        // INVARIANT: `ib_alloc_mr` returned a valid MR in `pd`, held here.
        Ok(Self {
            ptr: NonNull::new(p).ok_or(ENOMEM)?,
            max_num_sg,
            pd: pd.clone(),
        })
    }

    /// The C MR. Its keys and page list change only by a mapping and a
    /// registration, which the claim of its command slot
    /// ([`super::conn::CmdClaim`]) serialises.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_mr {
        self.ptr.as_ptr()
    }

    /// The PD the MR is in.
    pub(crate) fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// The local key. Takes `&mut self`: the holder of the claim of an
    /// MR's command slot rewrites its keys through a shared reference
    /// ([`super::conn::CmdClaim`]), so only exclusive access reads them
    /// without racing such a write.
    pub(crate) fn lkey(&mut self) -> u32 {
        // SAFETY: The MR is valid (type invariant); nobody else holds a
        // reference to `self`, so no claim holder writes the key now.
        unsafe { (*self.ptr.as_ptr()).lkey }
    }

    /// The remote key (the STag advertised to the target); `&mut self` as
    /// for [`Self::lkey`].
    pub(crate) fn rkey(&mut self) -> u32 {
        // SAFETY: As in `lkey`.
        unsafe { (*self.ptr.as_ptr()).rkey }
    }

    /// The most pages one registration may map.
    pub(crate) fn max_num_sg(&self) -> u32 {
        self.max_num_sg
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: The MR is valid (type invariant) and owned by `self`.
        let ret = unsafe { bindings::riser_ib_dereg_mr(self.ptr.as_ptr()) };
        if ret != 0 {
            pr_warn!("ib_dereg_mr failed: {}\n", ret);
        }
    }
}

#[kunit_tests(riser_rdma)]
mod tests {
    use super::super::{
        cm::{
            CmEvent,
            CmHandler,
            CmId,
            CmIdRef, //
        },
        conn::DmaSg,
        device::MapRef,
        Client,
        ClientDriver,
        ClientRegistry,
        Device,
        MapDevice, //
    };
    use super::*;
    use crate::kernel_ext::registry::registry;
    use crate::kernel_ext::sg::SgMapping;
    use core::{
        net::{
            Ipv4Addr,
            SocketAddrV4, //
        },
        sync::atomic::{
            AtomicI32,
            AtomicU32,
            Ordering, //
        },
    };
    use kernel::{
        alloc::KBox,
        new_mutex,
        sync::{
            Arc,
            Completion,
            Mutex, //
        },
    };
    use kernel::{
        dma::DataDirection,
        types::Opaque, //
    };

    /// What the test client found on the devices it was given.
    static DEVICES: AtomicU32 = AtomicU32::new(0);
    static VERBS_OK: AtomicU32 = AtomicU32::new(0);
    static VERBS_ERR: AtomicI32 = AtomicI32::new(0);
    static REMOVED: AtomicU32 = AtomicU32::new(0);

    /// Per-device context of the test client: a PD that lives from `add`
    /// until after `remove`, and the name of the device it was made for.
    struct Ctx {
        _pd: Arc<Pd>,
        name: super::super::device::DeviceName,
    }

    struct TestClient;

    /// Makes every verbs object riser needs on `dev` and checks what the
    /// provider granted. Runs inside `add`, so it reports through statics
    /// rather than asserting.
    fn exercise(dev: &Device, pd: &Arc<Pd>) -> Result {
        let caps = dev.caps();
        if caps.max_qp_wr == 0 || caps.max_send_sge == 0 {
            return Err(EINVAL);
        }
        let cq = Cq::from_pool(dev, 64, 0, PollContext::SoftIrq)?;
        if cq.cqe() < 64 {
            return Err(ERANGE);
        }
        let mut mr = Mr::new_fast_reg(pd, 32)?;
        let mut mr2 = Mr::new_fast_reg(pd, 32)?;
        if mr.max_num_sg() != 32 || mr.rkey() == mr2.rkey() || mr.lkey() == mr2.lkey() {
            return Err(EINVAL);
        }
        // Each MR holds the PD it was made in.
        if !Arc::ptr_eq(mr.pd(), pd) || !Arc::ptr_eq(mr2.pd(), pd) {
            return Err(EINVAL);
        }
        // Drop order: the MRs before the CQ goes back to the pool.
        drop((mr, mr2));
        drop(cq);
        map_refs(dev)
    }

    /// A `MapDevice`'s references name its device, outlive it, and the
    /// last one gives the device's reference back.
    fn map_refs(dev: &Device) -> Result {
        // SAFETY: The device is registered (type invariant of `Device`):
        // its count is live; read as a plain value.
        let count = || unsafe { (*dev.as_raw()).refcount.refs.counter };
        let d = DeviceRef::new(dev)?;
        let before = count();
        let m = MapDevice::new(&d)?;
        let (r1, r2) = (m.get(), m.get());
        if r1.raw() != dev.as_raw() || count() != before + 1 {
            return Err(EINVAL);
        }
        drop(m);
        drop(r1);
        if r2.raw() != dev.as_raw() {
            return Err(EINVAL);
        }
        drop(r2);
        // The count's switch to atomic ends in an RCU callback, which
        // releases the last reference.
        // SAFETY: No arguments; process context (the client's `add`).
        unsafe { bindings::rcu_barrier() };
        if count() != before {
            return Err(EBADE);
        }
        map_keeps(dev, &d)
    }

    /// A slot's keep (`DmaSg`'s `SgMapping::Keep`): taken at the first
    /// mapping, kept for the next one on the same device, replaced (the
    /// old reference given back) for another, and no reference left once
    /// the keep and the `MapDevice`s are gone.
    fn map_keeps(dev: &Device, d: &DeviceRef) -> Result {
        // SAFETY: As in `map_refs`.
        let count = || unsafe { (*dev.as_raw()).refcount.refs.counter };
        let before = count();
        let (m1, m2) = (MapDevice::new(d)?, MapDevice::new(d)?);
        let buf = KVec::<u8>::from_elem(0, 512, GFP_KERNEL)?;
        let sg = KBox::new(Opaque::<bindings::scatterlist>::zeroed(), GFP_KERNEL)?;
        // SAFETY: `sg` is one zeroed entry, `buf` 512 bytes of kernel memory,
        // both live until the end of this function.
        unsafe { bindings::riser_sg_init_one(sg.get(), buf.as_ptr().cast(), 512) };
        let mut keep = None;
        let map = |m: &MapDevice, keep: &mut Option<MapRef>| {
            // SAFETY: `sg` is valid for one entry until the end of the
            // function; each mapping is dropped before the next `map` and
            // before `keep` changes.
            unsafe { DmaSg::map(m, keep, sg.get(), 1, DataDirection::FromDevice) }
        };
        let a = map(&m1, &mut keep)?;
        let first = keep.as_ref().is_some_and(|r| r.is_of(&m1)) && a.count() == 1;
        drop(a);
        let b = map(&m1, &mut keep)?;
        let kept = keep.as_ref().is_some_and(|r| r.is_of(&m1)) && b.count() == 1;
        drop(b);
        let c = map(&m2, &mut keep)?;
        let replaced = keep.as_ref().is_some_and(|r| r.is_of(&m2) && !r.is_of(&m1));
        drop(c);
        // `m1` killed: its last reference (the keep's) went with the
        // replacement, so only `m2`'s hold the device.
        drop(m1);
        // SAFETY: As in `map_refs`.
        unsafe { bindings::rcu_barrier() };
        let one_left = count() == before + 1;
        drop(keep);
        drop(m2);
        // SAFETY: As above.
        unsafe { bindings::rcu_barrier() };
        if !(first && kept && replaced && one_left) || count() != before {
            return Err(EBADE);
        }
        Ok(())
    }

    impl ClientDriver for TestClient {
        type Context = Ctx;
        const NAME: &'static CStr = c"riser-kunit";
        registry!(ClientRegistry<TestClient>);

        fn add(dev: &Device) -> Result<KBox<Ctx>> {
            DEVICES.fetch_add(1, Ordering::Relaxed);
            let pd = Arc::new(Pd::new(dev)?, GFP_KERNEL)?;
            match exercise(dev, &pd) {
                Ok(()) => {
                    VERBS_OK.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => VERBS_ERR.store(e.to_errno(), Ordering::Relaxed),
            }
            let name = dev.name();
            KBox::new(Ctx { _pd: pd, name }, GFP_KERNEL).map_err(Into::into)
        }

        fn remove(dev: &Device, ctx: &Ctx) {
            // `remove` must get the context `add` made for this device.
            if ctx.name.as_bytes() == dev.name().as_bytes() {
                REMOVED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    #[test]
    fn client_gets_devices_and_verbs_objects_work() -> Result {
        DEVICES.store(0, Ordering::Relaxed);
        VERBS_OK.store(0, Ordering::Relaxed);
        VERBS_ERR.store(0, Ordering::Relaxed);
        REMOVED.store(0, Ordering::Relaxed);
        let client = KBox::pin_init(Client::<TestClient>::new(), GFP_KERNEL)?;
        let seen = DEVICES.load(Ordering::Relaxed);
        if seen == 0 {
            drop(client);
            crate::kernel_ext::kunit::skip(
                c"no RDMA device: create one (rdma link add) before loading riser",
            );
            return Ok(());
        }
        assert_eq!(VERBS_ERR.load(Ordering::Relaxed), 0);
        assert_eq!(VERBS_OK.load(Ordering::Relaxed), seen);

        // A second client of the same driver is refused.
        assert!(KBox::pin_init(Client::<TestClient>::new(), GFP_KERNEL).is_err());

        // Unregistering calls `remove` once per device that was added.
        drop(client);
        assert_eq!(REMOVED.load(Ordering::Relaxed), seen);
        Ok(())
    }

    /// Records the CM events of one id: a bit per event kind seen, the last
    /// error status, whether the id had a device; completes `addr` and
    /// `route` when address and route resolution end.
    #[pin_data]
    struct Waiter {
        #[pin]
        addr: Completion,
        #[pin]
        route: Completion,
        seen: AtomicU32,
        status: AtomicI32,
        bound: AtomicU32,
    }

    impl Waiter {
        fn new() -> Result<Arc<Self>> {
            Arc::pin_init(
                pin_init!(Waiter {
                    addr <- Completion::new(),
                    route <- Completion::new(),
                    seen: AtomicU32::new(0),
                    status: AtomicI32::new(0),
                    bound: AtomicU32::new(0),
                }),
                GFP_KERNEL,
            )
        }
    }

    const ADDR_OK: u32 = 1;
    const ADDR_ERR: u32 = 2;
    const ROUTE_OK: u32 = 4;
    const ROUTE_ERR: u32 = 8;
    const OTHER: u32 = 16;

    impl CmHandler for Waiter {
        fn event(&self, id: &CmIdRef, event: CmEvent) {
            if id.device().is_some() {
                self.bound.store(1, Ordering::Relaxed);
            }
            let (bit, status) = match event {
                CmEvent::AddrResolved => (ADDR_OK, 0),
                CmEvent::AddrError(s) => (ADDR_ERR, s),
                CmEvent::RouteResolved => (ROUTE_OK, 0),
                CmEvent::RouteError(s) => (ROUTE_ERR, s),
                _ => (OTHER, 0),
            };
            if status != 0 {
                self.status.store(status, Ordering::Relaxed);
            }
            self.seen.fetch_or(bit, Ordering::Relaxed);
            match bit {
                ADDR_OK | ADDR_ERR => self.addr.complete_all(),
                ROUTE_OK | ROUTE_ERR => self.route.complete_all(),
                _ => {}
            }
        }
    }

    #[test]
    fn a_client_registers_once() -> Result {
        // A client that takes no device: only its registration counts.
        struct Once;
        impl ClientDriver for Once {
            type Context = ();
            const NAME: &'static CStr = c"riser-kunit-once";
            registry!(ClientRegistry<Once>);
            fn add(_dev: &Device) -> Result<KBox<()>> {
                Err(EOPNOTSUPP)
            }
            fn remove(_dev: &Device, _ctx: &()) {}
        }
        let first = KBox::pin_init(Client::<Once>::new(), GFP_KERNEL)?;
        // A second registration of the same client is refused, and leaves
        // the first registered.
        assert_eq!(
            KBox::pin_init(Client::<Once>::new(), GFP_KERNEL).err(),
            Some(EEXIST)
        );
        assert!(Once::registry().is_registered());
        drop(first);
        assert!(!Once::registry().is_registered());
        // Dropping the first frees the registry for a new one.
        drop(KBox::pin_init(Client::<Once>::new(), GFP_KERNEL)?);
        Ok(())
    }

    /// An IPv4 address of an RDMA device, from the GID tables of the devices
    /// the test client sees.
    fn local_rdma_ipv4() -> Result<Option<Ipv4Addr>> {
        struct Finder;
        static FOUND: AtomicU32 = AtomicU32::new(0);
        impl ClientDriver for Finder {
            type Context = ();
            const NAME: &'static CStr = c"riser-kunit-gid";
            registry!(ClientRegistry<Finder>);
            fn add(dev: &Device) -> Result<KBox<()>> {
                if let Some(a) = dev.ipv4_gids(1, 1)?.first() {
                    FOUND.store(u32::from(*a), Ordering::Relaxed);
                }
                KBox::new((), GFP_KERNEL).map_err(Into::into)
            }
            fn remove(_dev: &Device, _ctx: &()) {}
        }
        FOUND.store(0, Ordering::Relaxed);
        drop(KBox::pin_init(Client::<Finder>::new(), GFP_KERNEL)?);
        let a = FOUND.load(Ordering::Relaxed);
        Ok((a != 0).then(|| Ipv4Addr::from(a)))
    }

    #[test]
    fn cm_id_resolves_address_and_route_to_a_device() -> Result {
        let Some(ip) = local_rdma_ipv4()? else {
            crate::kernel_ext::kunit::skip(
                c"no RDMA device with an IPv4 GID: create one (rdma link add)",
            );
            return Ok(());
        };
        let waiter = Waiter::new()?;
        let id = CmId::new(waiter.clone())?;
        id.resolve_addr(SocketAddrV4::new(ip, 3260).into(), 2000)?;
        waiter.addr.wait_for_completion();
        assert_eq!(waiter.status.load(Ordering::Relaxed), 0);
        assert_eq!(waiter.seen.load(Ordering::Relaxed), ADDR_OK);
        assert_eq!(waiter.bound.load(Ordering::Relaxed), 1);

        id.resolve_route(2000)?;
        waiter.route.wait_for_completion();
        assert_eq!(waiter.status.load(Ordering::Relaxed), 0);
        assert_eq!(waiter.seen.load(Ordering::Relaxed), ADDR_OK | ROUTE_OK);
        drop(id);
        Ok(())
    }

    /// Counts the [`SelfDropper`]s freed.
    static SELF_DROPPERS_FREED: AtomicU32 = AtomicU32::new(0);

    struct FreedFlag;

    impl Drop for FreedFlag {
        fn drop(&mut self) {
            SELF_DROPPERS_FREED.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A handler that drops its own id inside the id's first event.
    #[pin_data]
    struct SelfDropper {
        #[pin]
        id: Mutex<Option<CmId<SelfDropper>>>,
        #[pin]
        done: Completion,
        _freed: FreedFlag,
    }

    impl CmHandler for SelfDropper {
        fn event(&self, _id: &CmIdRef, _event: CmEvent) {
            let id = self.id.lock().take();
            // Inside the id's own handler: the id goes to the CM.
            drop(id);
            self.done.complete_all();
        }
    }

    #[test]
    fn a_handler_may_drop_its_own_id() -> Result {
        SELF_DROPPERS_FREED.store(0, Ordering::Relaxed);
        let h = Arc::pin_init(
            pin_init!(SelfDropper {
                id <- new_mutex!(None, "riser_test_self_dropper"),
                done <- Completion::new(),
                _freed: FreedFlag,
            }),
            GFP_KERNEL,
        )?;
        // A device's address resolves; TEST-NET-1 (RFC 5737) fails: either
        // way one event comes.
        let dst = match local_rdma_ipv4()? {
            Some(ip) => SocketAddrV4::new(ip, 3260),
            None => SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 3260),
        };
        let started = {
            let mut g = h.id.lock();
            let id = g.insert(CmId::new(h.clone())?);
            // The handler waits for this lock: it finds the id in place.
            id.resolve_addr(dst.into(), 500)
        };
        if started.is_err() {
            drop(h.id.lock().take());
            drop(h);
            assert_eq!(SELF_DROPPERS_FREED.load(Ordering::Relaxed), 1);
            return Ok(());
        }
        h.done.wait_for_completion();
        drop(h);
        // The CM destroys the id once the handler has returned; then the
        // id's reference on the handler goes, the last one.
        for _ in 0..500 {
            if SELF_DROPPERS_FREED.load(Ordering::Relaxed) == 1 {
                break;
            }
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(10));
        }
        assert_eq!(SELF_DROPPERS_FREED.load(Ordering::Relaxed), 1);
        Ok(())
    }

    #[test]
    fn cm_id_reports_an_unresolvable_address() -> Result {
        let waiter = Waiter::new()?;
        let id = CmId::new(waiter.clone())?;
        // TEST-NET-1 (RFC 5737): no route and no RDMA device reach it, so
        // the CM refuses at once or reports ADDR_ERROR.
        let dst = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 3260);
        if id.resolve_addr(dst.into(), 500).is_ok() {
            waiter.addr.wait_for_completion();
            assert_eq!(waiter.seen.load(Ordering::Relaxed), ADDR_ERR);
            assert!(waiter.status.load(Ordering::Relaxed) < 0);
        }
        drop(id);
        Ok(())
    }
}
