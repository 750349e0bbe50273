// SPDX-License-Identifier: GPL-2.0

//! A connected RDMA queue pair and the memory its work requests point to:
//! device references, DMA-mapped buffers and scatterlists, fast-registration
//! memory regions, work request posting and completion dispatch.
//!
//! Lifetimes are structural: a [`Connection`] owns its CM id, QP, CQ, MRs
//! and completion tags, and destroys the QP before anything a work request
//! may name; a buffer given to a posted work request is kept alive by the
//! work request's tag until its completion (or the QP's destruction).

use super::{
    cm::{CmHandler, CmId, CmIdRef},
    Cq, Device, Pd,
};
use crate::{
    bindings,
    fault::{self, Site},
};
use core::{
    marker::PhantomData,
    ptr::{null_mut, NonNull},
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering},
};
use kernel::{alloc::KVec, error::to_result, prelude::*, sync::Arc, types::ForeignOwnable};

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

    fn raw(&self) -> *mut bindings::ib_device {
        self.ptr.as_ptr()
    }
}

impl Clone for DeviceRef {
    fn clone(&self) -> Self {
        // Taking another reference while holding one cannot fail.
        // SAFETY: The device is valid and referenced (type invariant).
        let ok = unsafe { bindings::riser_ib_device_try_get(self.raw()) };
        debug_assert!(ok);
        Self { ptr: self.ptr }
    }
}

impl Drop for DeviceRef {
    fn drop(&mut self) {
        // SAFETY: This value holds one reference (type invariant).
        unsafe { bindings::ib_device_put(self.raw()) };
    }
}

/// The direction of a DMA mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DmaDir {
    /// The device reads the memory (sends, RDMA READ sources).
    ToDevice,
    /// The device writes the memory (receives, RDMA WRITE targets).
    FromDevice,
}

impl DmaDir {
    fn raw(self) -> c_int {
        match self {
            Self::ToDevice => bindings::dma_data_direction::DMA_TO_DEVICE.0,
            Self::FromDevice => bindings::dma_data_direction::DMA_FROM_DEVICE.0,
        }
    }
}

/// A kernel buffer mapped for DMA by one RDMA device.
///
/// The CPU reaches the buffer's memory only through [`DmaBuf::write`] and
/// [`DmaBuf::read`], which copy into and out of it with volatile accesses,
/// and no reference into that memory is ever handed out. Any use from
/// safe code is therefore sound: two CPUs writing one buffer, or one
/// writing while another reads (or while the device does), race only on
/// marked accesses, which the kernel memory model defines (as
/// `WRITE_ONCE`/`READ_ONCE`): the bytes seen may be a mix, nothing worse.
/// Whether the bytes make sense (one writer at a time, no write while a
/// posted work request still reads the buffer) is the driver's concern,
/// which it meets by giving each buffer to one work request or task at a
/// time.
///
/// # Invariants
///
/// `ptr` points to `len` bytes allocated with `KVec` (capacity `len`), mapped
/// at `addr` on `dev` in direction `dir` until `drop`.
pub(crate) struct DmaBuf {
    dev: DeviceRef,
    ptr: NonNull<u8>,
    len: usize,
    addr: u64,
    dir: DmaDir,
}

// SAFETY: The buffer is plain memory owned by the value.
unsafe impl Send for DmaBuf {}
// SAFETY: Shared references reach the buffer's memory only with volatile
// copies (`write`, `read`), never through a Rust reference, so concurrent
// use from several CPUs has no data race (see the type's documentation);
// the other fields are not written after construction.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocates `len` zeroed bytes and maps them on `dev`.
    pub(crate) fn new(dev: &DeviceRef, len: usize, dir: DmaDir) -> Result<Arc<Self>> {
        let mut v = KVec::<u8>::with_capacity(len, GFP_KERNEL)?;
        v.resize(len, 0, GFP_KERNEL)?;
        let (ptr, vlen, cap) = v.into_raw_parts();
        if vlen != len || cap != len {
            // SAFETY: The parts came from `into_raw_parts` just above.
            drop(unsafe { KVec::from_raw_parts(ptr, vlen, cap) });
            return Err(ENOMEM);
        }
        // SAFETY: `ptr` points to `len` bytes owned by this function.
        let addr =
            unsafe { bindings::riser_ib_dma_map_single(dev.raw(), ptr.cast(), len, dir.raw()) };
        // SAFETY: `addr` was returned by the mapping just above.
        if unsafe { bindings::riser_ib_dma_mapping_error(dev.raw(), addr) } != 0 {
            // SAFETY: The parts came from `into_raw_parts` above.
            drop(unsafe { KVec::from_raw_parts(ptr, len, len) });
            return Err(ENOMEM);
        }
        // INVARIANT: allocated with capacity `len` and mapped at `addr`.
        Ok(Arc::new(
            Self {
                dev: dev.clone(),
                ptr: NonNull::new(ptr).ok_or(ENOMEM)?,
                len,
                addr,
                dir,
            },
            GFP_KERNEL,
        )?)
    }

    /// The buffer's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// A scatter/gather entry for `len` bytes at `off`, with the PD's local
    /// DMA lkey; `EINVAL` if the range is not inside the buffer.
    /// The entry borrows the buffer; a SEND naming it must keep it (see
    /// [`SendOp::Send`]).
    pub(crate) fn sge(&self, off: usize, len: usize, pd: &Pd) -> Result<Sge<'_>> {
        let end = off.checked_add(len).ok_or(EINVAL)?;
        if end > self.len {
            return Err(EINVAL);
        }
        Ok(Sge {
            addr: self.addr + off as u64,
            length: u32::try_from(len)?,
            lkey: pd.local_dma_lkey(),
            buf: Some(self),
            _mem: PhantomData,
        })
    }

    /// Copies `src` into the buffer at `off` and makes it visible to the
    /// device.
    pub(crate) fn write(&self, off: usize, src: &[u8]) -> Result {
        let end = off.checked_add(src.len()).ok_or(EINVAL)?;
        if end > self.len {
            return Err(EINVAL);
        }
        // SAFETY: `off..end` is inside the allocation (checked), which is
        // only ever accessed with volatile copies; `src` is a distinct
        // borrow, so the ranges do not overlap. The range is mapped at
        // `addr + off`.
        unsafe {
            copy_to_volatile(self.ptr.as_ptr().add(off), src.as_ptr(), src.len());
            bindings::riser_ib_dma_sync_for_device(
                self.dev.raw(),
                self.addr + off as u64,
                src.len(),
                self.dir.raw(),
            );
        }
        Ok(())
    }

    /// Hands the whole buffer (back) to the device, before a receive.
    fn give_to_device(&self) {
        // SAFETY: The buffer is mapped at `addr` for `len` bytes (type
        // invariant).
        unsafe {
            bindings::riser_ib_dma_sync_for_device(
                self.dev.raw(),
                self.addr,
                self.len,
                self.dir.raw(),
            )
        };
    }

    /// Makes `dst.len()` bytes at `off`, as the device wrote them, visible
    /// to the CPU and copies them into `dst`. Only those bytes are synced
    /// and copied.
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) -> Result {
        let end = off.checked_add(dst.len()).ok_or(EINVAL)?;
        if end > self.len {
            return Err(EINVAL);
        }
        // SAFETY: `off..end` is inside the allocation (checked) and mapped
        // at `addr + off`; the allocation is only ever accessed with
        // volatile copies, and `dst` is a distinct, exclusive borrow.
        unsafe {
            bindings::riser_ib_dma_sync_for_cpu(
                self.dev.raw(),
                self.addr + off as u64,
                dst.len(),
                self.dir.raw(),
            );
            copy_from_volatile(dst.as_mut_ptr(), self.ptr.as_ptr().add(off), dst.len());
        }
        Ok(())
    }
}

/// The word the volatile copies move at a time.
const WORD: usize = core::mem::size_of::<usize>();

/// Copies `len` bytes from `src` to `dst`, storing into `dst` only with
/// volatile writes (bytes up to `dst`'s first word boundary, then aligned
/// words, then bytes), so that a racing access to `dst` from another CPU,
/// itself volatile, is no data race.
///
/// # Safety
///
/// `src` must be valid for reads and `dst` for writes of `len` bytes; the
/// ranges must not overlap; `dst`'s memory must not be accessed other than
/// with volatile accesses (or by a device) during the call.
unsafe fn copy_to_volatile(dst: *mut u8, src: *const u8, len: usize) {
    let head = ((WORD - dst.addr() % WORD) % WORD).min(len);
    let words = (len - head) / WORD;
    // SAFETY: Every offset is below `len`: `head + words * WORD <= len`.
    // Word stores are at `dst`'s word-aligned addresses; the word loads
    // from `src` may be unaligned and are done as such.
    unsafe {
        for i in 0..head {
            dst.add(i).write_volatile(src.add(i).read());
        }
        for w in 0..words {
            let i = head + w * WORD;
            let v = src.add(i).cast::<usize>().read_unaligned();
            dst.add(i).cast::<usize>().write_volatile(v);
        }
        for i in head + words * WORD..len {
            dst.add(i).write_volatile(src.add(i).read());
        }
    }
}

/// Copies `len` bytes from `src` to `dst`, loading from `src` only with
/// volatile reads (as [`copy_to_volatile`] stores), so that a racing
/// access to `src` from another CPU, itself volatile, is no data race.
///
/// # Safety
///
/// `src` must be valid for reads and `dst` for writes of `len` bytes; the
/// ranges must not overlap; `src`'s memory must not be accessed other than
/// with volatile accesses (or by a device) during the call.
unsafe fn copy_from_volatile(dst: *mut u8, src: *const u8, len: usize) {
    let head = ((WORD - src.addr() % WORD) % WORD).min(len);
    let words = (len - head) / WORD;
    // SAFETY: As in `copy_to_volatile`, with the aligned, volatile side
    // being `src` and the unaligned stores going to `dst`.
    unsafe {
        for i in 0..head {
            dst.add(i).write(src.add(i).read_volatile());
        }
        for w in 0..words {
            let i = head + w * WORD;
            let v = src.add(i).cast::<usize>().read_volatile();
            dst.add(i).cast::<usize>().write_unaligned(v);
        }
        for i in head + words * WORD..len {
            dst.add(i).write(src.add(i).read_volatile());
        }
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: The buffer is mapped at `addr` and was allocated as a
        // `KVec` of capacity `len` (type invariant); nothing refers to it.
        unsafe {
            bindings::riser_ib_dma_unmap_single(
                self.dev.raw(),
                self.addr,
                self.len,
                self.dir.raw(),
            );
            drop(KVec::from_raw_parts(self.ptr.as_ptr(), self.len, self.len));
        }
    }
}

/// A scatterlist mapped for DMA (a SCSI command's data).
///
/// # Invariants
///
/// `sgl` has `nents` entries mapped on `dev` into `count` DMA segments, and
/// stays valid until this value is dropped, which unmaps it.
pub(crate) struct DmaSg {
    dev: DeviceRef,
    sgl: NonNull<bindings::scatterlist>,
    nents: c_int,
    count: c_int,
    dir: DmaDir,
}

// SAFETY: The mapping may be released from any thread.
unsafe impl Send for DmaSg {}
// SAFETY: Shared references only read the mapping.
unsafe impl Sync for DmaSg {}

impl DmaSg {
    /// Maps `nents` entries of `sgl` on `dev`.
    ///
    /// # Safety
    ///
    /// `sgl` must be a valid scatterlist of `nents` entries that stays valid
    /// and unchanged until the returned value is dropped.
    pub(crate) unsafe fn map(
        dev: &DeviceRef,
        sgl: *mut bindings::scatterlist,
        nents: u32,
        dir: DmaDir,
    ) -> Result<Self> {
        let sgl = NonNull::new(sgl).ok_or(EINVAL)?;
        let nents = c_int::try_from(nents)?;
        if fault::hit(Site::DmaMap) {
            return Err(ENOMEM);
        }
        // SAFETY: `sgl` is valid for `nents` entries (function contract).
        let count =
            unsafe { bindings::riser_ib_dma_map_sg(dev.raw(), sgl.as_ptr(), nents, dir.raw()) };
        if count <= 0 {
            return Err(ENOMEM);
        }
        // INVARIANT: mapped just above into `count` segments.
        Ok(Self {
            dev: dev.clone(),
            sgl,
            nents,
            count,
            dir,
        })
    }

    /// The number of DMA segments the mapping produced. This, not the
    /// scatterlist's entry count, is what a registration maps: mapping may
    /// merge entries (an IOMMU joins contiguous ones), and only the first
    /// `count` entries carry DMA addresses.
    pub(crate) fn count(&self) -> u32 {
        self.count.unsigned_abs()
    }

    /// A single-segment mapping described without registration: the PD's
    /// local DMA lkey and its global rkey, at the segment's DMA address
    /// (ib_iser's `always_register=0`). `None` for several segments or a PD
    /// without a global rkey.
    pub(crate) fn unregistered(&self, pd: &Pd) -> Option<Registration<'_>> {
        let (addr, len) = self.single()?;
        Some(Registration {
            rkey: pd.global_rkey()?,
            iova: addr,
            len,
            lkey: pd.local_dma_lkey(),
            mr: None,
            _sg: PhantomData,
        })
    }

    /// A single-segment mapping described for local work requests only:
    /// the PD's local DMA lkey at the segment's DMA address, and rkey 0, so
    /// that nothing is offered to the peer. For data the local side sends
    /// itself (a write's immediate data), which needs no registration.
    /// `None` for several segments.
    pub(crate) fn local_only(&self, pd: &Pd) -> Option<Registration<'_>> {
        let (addr, len) = self.single()?;
        Some(Registration {
            rkey: 0,
            iova: addr,
            len,
            lkey: pd.local_dma_lkey(),
            mr: None,
            _sg: PhantomData,
        })
    }

    /// The DMA address and length of a single-segment mapping.
    fn single(&self) -> Option<(u64, u32)> {
        if self.count != 1 {
            return None;
        }
        // SAFETY: The mapping is valid (type invariant); the first entry's
        // DMA fields were set by the mapping.
        Some(unsafe {
            let sg = &*self.sgl.as_ptr();
            (sg.dma_address, sg.dma_length)
        })
    }
}

impl Drop for DmaSg {
    fn drop(&mut self) {
        // SAFETY: Mapped with these arguments (type invariant); unmapping
        // takes the original entry count.
        unsafe {
            bindings::riser_ib_dma_unmap_sg(
                self.dev.raw(),
                self.sgl.as_ptr(),
                self.nents,
                self.dir.raw(),
            )
        };
    }
}

/// One scatter/gather entry of a work request, made only from memory riser
/// mapped or registered, and borrowing what it was made from: an `Sge<'a>`
/// cannot outlive the [`DmaBuf`] or the [`Registration`] (and through it
/// the [`DmaSg`]) that it names, so no work request is posted naming memory
/// already freed or unmapped. Its fields are private: an entry cannot be
/// made up or changed to name other memory.
#[derive(Clone, Copy)]
pub(crate) struct Sge<'a> {
    addr: u64,
    length: u32,
    lkey: u32,
    /// The buffer the entry is in, for an entry of a [`DmaBuf`]: a SEND
    /// naming it must hold it until its completion.
    buf: Option<&'a DmaBuf>,
    _mem: PhantomData<&'a ()>,
}

impl Sge<'_> {
    fn raw(self) -> bindings::ib_sge {
        bindings::ib_sge {
            addr: self.addr,
            length: self.length,
            lkey: self.lkey,
        }
    }
}

/// A mapping of a [`DmaSg`] as a work request or the peer names it: what
/// a registration advertises to the peer, and the local key for local work
/// requests. It borrows the mapping it describes, so neither it nor the
/// entries made from it ([`Registration::sge`]) outlive the unmapping; one
/// made by [`MrClaim::map`] also borrows the claim, so the MR is neither
/// mapped anew nor given back while it lives, and it is what
/// [`SendOp::Reg`] posts. Its fields are private: a registration cannot be
/// made up, or changed to name other memory.
#[derive(Clone, Copy)]
pub(crate) struct Registration<'a> {
    rkey: u32,
    iova: u64,
    len: u32,
    lkey: u32,
    /// The claimed MR the mapping is in, if it is in one.
    mr: Option<&'a MrSlot>,
    _sg: PhantomData<&'a DmaSg>,
}

impl<'a> Registration<'a> {
    /// The remote key (STag) the peer is given.
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The virtual address the peer uses.
    pub(crate) fn iova(&self) -> u64 {
        self.iova
    }

    /// The registered length.
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// `len` bytes at `off` of the registered region as a local entry,
    /// borrowing what the registration borrows.
    pub(crate) fn sge(&self, off: u32, len: u32) -> Result<Sge<'a>> {
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(EINVAL);
        }
        Ok(Sge {
            addr: self.iova + u64::from(off),
            length: len,
            lkey: self.lkey,
            buf: None,
            _mem: PhantomData,
        })
    }
}

/// A work completion, as riser's handlers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wc {
    /// `IB_WC_SUCCESS` or the error status.
    pub(crate) status: u32,
    /// Bytes received (receives only).
    pub(crate) byte_len: u32,
    /// The rkey the peer invalidated with SEND_WITH_INV, if any.
    pub(crate) invalidated: Option<u32>,
}

impl Wc {
    /// Whether the work request succeeded.
    pub(crate) fn ok(&self) -> bool {
        self.status == bindings::ib_wc_status_IB_WC_SUCCESS
    }

    /// Whether the QP was flushed (torn down), as opposed to a real error.
    pub(crate) fn flushed(&self) -> bool {
        self.status == bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR
    }
}

/// Receives the completions of a [`Connection`]'s work requests, in softirq
/// context, by the tag the work request was posted with.
pub(crate) trait QpHandler: Send + Sync + 'static {
    /// A receive completed.
    fn recv_done(&self, tag: u32, wc: Wc);
    /// A signaled send completed, or any send failed. Unsignaled work
    /// requests (registration, invalidation) report with tag
    /// [`UNSIGNALED_TAG`], on error only.
    fn send_done(&self, tag: u32, wc: Wc);
}

/// The tag of unsignaled work requests.
pub(crate) const UNSIGNALED_TAG: u32 = u32::MAX;

/// The completion entry of one work request slot.
///
/// # Invariants
///
/// `keep` is null or came from `Arc::<DmaBuf>::into_raw` and is owned by the
/// tag until taken back.
#[repr(C)]
struct Tag {
    cqe: bindings::ib_cqe,
    id: u32,
    keep: AtomicPtr<DmaBuf>,
}

impl Tag {
    fn new(
        id: u32,
        done: unsafe extern "C" fn(*mut bindings::ib_cq, *mut bindings::ib_wc),
    ) -> Self {
        Self {
            cqe: bindings::ib_cqe { done: Some(done) },
            id,
            keep: AtomicPtr::new(null_mut()),
        }
    }

    /// Whether the tag's last work request has completed (or none was
    /// posted).
    fn idle(&self) -> bool {
        self.keep.load(Ordering::Acquire).is_null()
    }

    /// Records `buf` as used by the work request of this tag; `EBUSY` if the
    /// tag's previous work request has not completed.
    fn hold(&self, buf: Option<&Arc<DmaBuf>>) -> Result {
        let p = match buf {
            Some(b) => Arc::into_raw(b.clone()).cast_mut(),
            None => NonNull::<DmaBuf>::dangling().as_ptr(),
        };
        if self
            .keep
            .compare_exchange(null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            if buf.is_some() {
                // SAFETY: `p` came from `into_raw` just above and was not
                // stored.
                drop(unsafe { Arc::from_raw(p) });
            }
            return Err(EBUSY);
        }
        Ok(())
    }

    /// Ends the tag's work request, releasing what it held.
    fn release(&self) {
        let p = self.keep.swap(null_mut(), Ordering::AcqRel);
        if !p.is_null() && p != NonNull::<DmaBuf>::dangling().as_ptr() {
            // SAFETY: A non-null, non-dangling `keep` came from `into_raw`
            // (type invariant) and was swapped out once.
            drop(unsafe { Arc::from_raw(p) });
        }
    }
}

/// The queue sizes and resources of a [`Connection`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnCaps {
    /// Send queue depth, including the slot `ib_drain_qp` needs.
    pub(crate) max_send_wr: u32,
    /// Receive queue depth, including the slot `ib_drain_qp` needs.
    pub(crate) max_recv_wr: u32,
    /// Receive tags (`0..recv_tags`).
    pub(crate) recv_tags: u32,
    /// Signaled send tags (`0..send_tags`).
    pub(crate) send_tags: u32,
    /// Fast-registration MRs (`0..mrs`).
    pub(crate) mrs: u32,
    /// Pages each MR maps.
    pub(crate) pages_per_mr: u32,
    /// Bytes of inline data wanted per send (0: none). A provider that
    /// refuses them gets a QP without.
    pub(crate) max_inline: u32,
}

/// A fast-registration MR owned by a connection.
///
/// # Invariants
///
/// `ptr` is a valid MR in the connection's PD until the connection drops it,
/// after its QP is destroyed. The MR's fields are written (by a mapping) and
/// read (to register it) only by the holder of `claimed` (an [`MrClaim`]).
struct MrSlot {
    ptr: NonNull<bindings::ib_mr>,
    /// Held by the [`MrClaim`] that alone may map and register the MR.
    claimed: AtomicBool,
    /// Registered and not yet invalidated. The state is the MR's, not that
    /// of the task that registered it: a registration stays valid after
    /// its task until it is invalidated, so the MR's next user must see it
    /// (and invalidate it before registering again).
    valid: AtomicBool,
    /// The key of the last posted registration: what the peer was given
    /// and what an invalidation names (the MR's own key may already be the
    /// next one, set by [`MrClaim::map`]).
    reg_rkey: AtomicU32,
}

impl MrSlot {
    fn new(pd: &Pd, pages: u32) -> Result<Self> {
        // SAFETY: The PD is valid (type invariant of `Pd`).
        let p = kernel::error::from_err_ptr(unsafe {
            bindings::ib_alloc_mr(pd.as_raw(), bindings::ib_mr_type_IB_MR_TYPE_MEM_REG, pages)
        })?;
        // INVARIANT: a valid MR in `pd`, deregistered in `drop`.
        Ok(Self {
            ptr: NonNull::new(p).ok_or(ENOMEM)?,
            claimed: AtomicBool::new(false),
            valid: AtomicBool::new(false),
            reg_rkey: AtomicU32::new(0),
        })
    }
}

impl Drop for MrSlot {
    fn drop(&mut self) {
        // SAFETY: The MR is valid and, the QP being destroyed first (type
        // invariant of `Connection`), no work request names it.
        unsafe { bindings::riser_ib_dereg_mr(self.ptr.as_ptr()) };
    }
}

/// Exclusive use of one of a [`Connection`]'s MRs, taken with
/// [`Connection::claim_mr`] and given back when dropped: only its holder
/// maps the MR ([`MrClaim::map`], which rewrites the MR's keys and page
/// list) and registers it ([`SendOp::Reg`], with the registration the
/// mapping returned), so no two CPUs ever do either to one MR at once.
/// Invalidation ([`SendOp::LocalInv`]) needs no claim: it uses only the
/// MR's atomic state.
///
/// # Invariants
///
/// This value holds `slot.claimed`, taken in [`Connection::claim_mr`].
pub(crate) struct MrClaim<'a> {
    slot: &'a MrSlot,
}

impl MrClaim<'_> {
    /// Maps `sg` into the MR with a fresh key: what the peer is told, and
    /// what [`SendOp::Reg`] registers. The registration borrows the claim
    /// and `sg`: while it lives the MR is not mapped again and `sg` stays
    /// mapped.
    pub(crate) fn map<'s>(&'s mut self, sg: &'s DmaSg) -> Result<Registration<'s>> {
        if fault::hit(Site::MapMr) {
            return Err(EINVAL);
        }
        let p = self.slot.ptr.as_ptr();
        // The keys' low byte is the consumer's to rotate; the registration in
        // the hardware keeps its key (`reg_rkey`) until invalidated.
        // SAFETY: The MR is valid (type invariant of `MrSlot`), and only the
        // holder of its claim (this value, borrowed mutably) reads or writes
        // its fields.
        unsafe {
            let key = ((*p).rkey & 0xff).wrapping_add(1) & 0xff;
            (*p).lkey = ((*p).lkey & 0xffff_ff00) | key;
            (*p).rkey = ((*p).rkey & 0xffff_ff00) | key;
        }
        let count = c_int::try_from(sg.count())?;
        // SAFETY: `sg` is a mapped scatterlist of `count` segments; the MR
        // is valid and claimed, as above.
        let n =
            unsafe { bindings::ib_map_mr_sg(p, sg.sgl.as_ptr(), count, null_mut(), MR_PAGE_SIZE) };
        if n != count {
            return Err(EINVAL);
        }
        // SAFETY: As above; `ib_map_mr_sg` set the MR's iova and length.
        let r = unsafe {
            Registration {
                rkey: (*p).rkey,
                lkey: (*p).lkey,
                iova: (*p).iova,
                len: u32::try_from((*p).length)?,
                mr: Some(self.slot),
                _sg: PhantomData,
            }
        };
        Ok(r)
    }
}

impl Drop for MrClaim<'_> {
    fn drop(&mut self) {
        // INVARIANT: the claim taken in `claim_mr` is given back once.
        self.slot.claimed.store(false, Ordering::Release);
    }
}

/// A work request riser posts on the send queue.
///
/// What memory a request names is borrowed for `'a`: the [`Sge`]s and
/// [`Registration`]s it carries cannot outlive the [`DmaBuf`], the
/// [`DmaSg`] mapping (or the MR mapping) they were made from, so nothing
/// freed, unmapped or mapped anew is ever posted. The borrow ends when
/// [`Connection::post_send`] returns, while the device uses the memory
/// until the request completes (or the QP is destroyed). What keeps it
/// alive that long:
///
/// - A [`DmaBuf`]: the request's tag. A SEND naming a buffer must carry it
///   as `keep` (posting fails with `EINVAL` otherwise), and the tag holds a
///   reference on it until the completion.
/// - SCSI data (a [`DmaSg`], entries of a [`Registration`]): nothing here.
///   The driver must keep the mapping (its task) until every SEND naming
///   it has completed and every registration of it given to the peer is
///   invalidated; it does so with the task references it holds per
///   registration and per such SEND. This is the driver's discipline, not
///   enforced by these types.
/// - An MR registration: the device reads the MR's page list when it
///   executes the REG_MR, after posting; the claim may be dropped once
///   posted, and mapping the MR anew under a later claim before then is
///   the driver's to avoid (it maps a slot's MR again only for the slot's
///   next command, once the last one has completed).
pub(crate) enum SendOp<'a> {
    /// Invalidate MR `mr`'s current registration: signaled on tag `tag`
    /// when there is one, so that its completion tells when the peer can no
    /// longer reach the memory; otherwise unsignaled.
    LocalInv {
        /// The connection's MR index.
        mr: u32,
        /// The signaled send tag, if any.
        tag: Option<u32>,
    },
    /// Register the MR of `reg`, a mapping made by [`MrClaim::map`] on
    /// this connection (unsignaled), for local use and what `access` grants
    /// the peer. Only the claim's holder has such a registration.
    Reg {
        /// The MR mapping to register.
        reg: Registration<'a>,
        /// What the peer may do with the region.
        access: Access,
    },
    /// A signaled SEND of `sges`, completing on tag `tag`, holding `keep`
    /// until then.
    Send {
        /// The signaled send tag.
        tag: u32,
        /// One or two entries; an entry of a [`DmaBuf`] must be in `keep`.
        sges: &'a [Sge<'a>],
        /// The buffer kept alive until the completion.
        keep: Option<&'a Arc<DmaBuf>>,
    },
    /// A SEND of `bytes` as inline data: the provider copies them while
    /// posting, so nothing stays in use afterwards. Signaled on tag `tag`
    /// when there is one; otherwise no completion reports it unless it
    /// fails. At most [`Connection::max_inline`] bytes.
    InlineSend {
        /// The signaled send tag, if any.
        tag: Option<u32>,
        /// The PDU.
        bytes: &'a [u8],
    },
}

/// What a registration lets the peer do with the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Nothing: the region serves local work requests only.
    Local,
    /// RDMA READ (the peer pulls a write's data).
    RemoteRead,
    /// RDMA WRITE (the peer pushes a read's data).
    RemoteWrite,
}

/// The page size of fast registrations: 4 KiB, as the SCSI hosts' virtual
/// boundary and sizing assume, whatever the CPU's page size.
const MR_PAGE_SIZE: u32 = 4096;

/// The most work requests one [`Connection::post_send`] takes.
pub(crate) const MAX_CHAIN: usize = 4;

/// A connected (or connecting) RC queue pair with its CM id.
///
/// # Invariants
///
/// `qp` was created with `rdma_create_qp` on `id`, with `qp_context` equal to
/// `id`'s context (an `Arc<H>` owned by `id`); it is destroyed in `drop`
/// before the MRs, the CQ and the id. Every tag is at a stable address
/// (`KVec` never grown) until the QP is destroyed.
pub(crate) struct Connection<H: CmHandler + QpHandler> {
    qp: NonNull<bindings::ib_qp>,
    recv_tags: KVec<Tag>,
    send_tags: KVec<Tag>,
    unsignaled: KBox<Tag>,
    mrs: KVec<MrSlot>,
    /// Inline bytes per send the QP takes.
    max_inline: u32,
    pd: Arc<Pd>,
    _cq: Cq,
    id: CmId<H>,
}

// SAFETY: Posting is serialised by the provider; the tags and the MR states
// (`claimed`, `valid`, `reg_rkey`) are atomics; an MR's own fields are
// written and read only by the holder of its claim (`MrClaim`), so by one
// CPU at a time; everything may be released from any thread.
unsafe impl<H: CmHandler + QpHandler> Send for Connection<H> {}
// SAFETY: As above.
unsafe impl<H: CmHandler + QpHandler> Sync for Connection<H> {}

impl<H: CmHandler + QpHandler> Connection<H> {
    /// Makes the QP on `id` (whose route is resolved), completing on `cq`,
    /// with the MRs and tags of `caps`. On failure the id is handed back, so
    /// a CM handler never drops (destroys) its own id.
    pub(crate) fn new(
        id: CmId<H>,
        pd: Arc<Pd>,
        cq: Cq,
        caps: ConnCaps,
    ) -> core::result::Result<Self, (CmId<H>, Error)> {
        let parts = match Self::parts(&pd, caps) {
            Ok(p) => p,
            Err(e) => return Err((id, e)),
        };
        let (recv_tags, send_tags, unsignaled, mrs) = parts;
        let attr_for = |max_inline_data: u32| bindings::ib_qp_init_attr {
            qp_context: id.context(),
            send_cq: cq.as_raw(),
            recv_cq: cq.as_raw(),
            cap: bindings::ib_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data,
                ..Default::default()
            },
            sq_sig_type: bindings::ib_sig_type_IB_SIGNAL_REQ_WR,
            qp_type: bindings::ib_qp_type_IB_QPT_RC,
            ..Default::default()
        };
        let mut attr = attr_for(caps.max_inline);
        // SAFETY: The id is valid and route-resolved; `pd` and `cq` are
        // valid; `attr` outlives the call.
        let mut created = unsafe { bindings::rdma_create_qp(id.as_raw(), pd.as_raw(), &mut attr) };
        if created != 0 && caps.max_inline > 0 {
            // A provider with less (or no) inline room refuses the QP: one
            // without inline data is what every provider makes.
            attr = attr_for(0);
            // SAFETY: As above; the failed call left no QP on the id.
            created = unsafe { bindings::rdma_create_qp(id.as_raw(), pd.as_raw(), &mut attr) };
        }
        if let Err(e) = to_result(created) {
            return Err((id, e));
        }
        // Providers report what they made in `cap`; a smaller request than
        // asked is never assumed larger.
        let max_inline = attr.cap.max_inline_data.min(caps.max_inline);
        // SAFETY: `rdma_create_qp` succeeded, so the id holds the new QP.
        let qp = unsafe { (*id.as_raw()).qp };
        let Some(qp) = NonNull::new(qp) else {
            return Err((id, ENOMEM));
        };
        // INVARIANT: created on `id` with `qp_context` = the id's context;
        // the field order drops the MRs, the PD, the CQ and the id after the
        // QP is destroyed in `drop`.
        Ok(Self {
            qp,
            recv_tags,
            send_tags,
            unsignaled,
            mrs,
            max_inline,
            pd,
            _cq: cq,
            id,
        })
    }

    #[allow(clippy::type_complexity)]
    fn parts(pd: &Pd, caps: ConnCaps) -> Result<(KVec<Tag>, KVec<Tag>, KBox<Tag>, KVec<MrSlot>)> {
        let mut recv = KVec::with_capacity(caps.recv_tags as usize, GFP_KERNEL)?;
        for i in 0..caps.recv_tags {
            recv.push(Tag::new(i, Self::recv_done_cb), GFP_KERNEL)?;
        }
        let mut send = KVec::with_capacity(caps.send_tags as usize, GFP_KERNEL)?;
        for i in 0..caps.send_tags {
            send.push(Tag::new(i, Self::send_done_cb), GFP_KERNEL)?;
        }
        let unsignaled = KBox::new(Tag::new(UNSIGNALED_TAG, Self::send_done_cb), GFP_KERNEL)?;
        let mut mrs = KVec::with_capacity(caps.mrs as usize, GFP_KERNEL)?;
        for _ in 0..caps.mrs {
            mrs.push(MrSlot::new(pd, caps.pages_per_mr)?, GFP_KERNEL)?;
        }
        Ok((recv, send, unsignaled, mrs))
    }

    /// The CM id.
    pub(crate) fn cm(&self) -> &CmId<H> {
        &self.id
    }

    /// Bytes of inline data a send may carry ([`SendOp::InlineSend`]); 0
    /// when the provider took none.
    pub(crate) fn max_inline(&self) -> u32 {
        self.max_inline
    }

    /// The PD the QP and MRs are in.
    pub(crate) fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// Connects from inside the CM handler of this connection's id, with
    /// `private` as the CM private data.
    pub(crate) fn connect_in_handler(
        &self,
        ev: &CmIdRef,
        private: &[u8],
        responder_resources: u8,
        initiator_depth: u8,
    ) -> Result {
        if !core::ptr::eq(ev.as_raw(), self.cm().as_raw()) {
            return Err(EINVAL);
        }
        let mut param = bindings::rdma_conn_param {
            private_data: private.as_ptr().cast(),
            private_data_len: u8::try_from(private.len())?,
            responder_resources,
            initiator_depth,
            retry_count: 7,
            rnr_retry_count: 6,
            ..Default::default()
        };
        // The event's id is this id: its handler runs, holding the handler
        // mutex `rdma_connect_locked` needs.
        // SAFETY: The id is valid; `param` and `private` outlive the call.
        to_result(unsafe { bindings::rdma_connect_locked(self.cm().as_raw(), &mut param) })
    }

    /// Starts a disconnect; the QP moves to the error state and outstanding
    /// work requests flush.
    pub(crate) fn disconnect(&self) {
        // SAFETY: The id is valid (type invariant); a failure means it was
        // not connected, which is fine to ignore.
        let _ = unsafe { bindings::rdma_disconnect(self.cm().as_raw()) };
    }

    /// Waits until every posted work request has completed (flushed). Must
    /// run in process context, after [`Connection::disconnect`].
    pub(crate) fn drain(&self) {
        // SAFETY: The QP is valid (type invariant); its CQ is not polled
        // directly, as `ib_drain_qp` requires.
        unsafe { bindings::ib_drain_qp(self.qp.as_ptr()) };
    }

    /// Whether send tag `tag` is free for a new work request: its last one
    /// has completed, or none was posted. A stale answer is harmless: a
    /// tag taken meanwhile makes [`Connection::post_send`] fail with
    /// `EBUSY` before anything is posted.
    pub(crate) fn send_tag_idle(&self, tag: u32) -> bool {
        self.send_tags.get(tag as usize).is_some_and(Tag::idle)
    }

    /// Posts a receive of `buf` (all of it) completing on tag `tag`.
    pub(crate) fn post_recv(&self, tag: u32, buf: &Arc<DmaBuf>) -> Result {
        let t = self.recv_tags.get(tag as usize).ok_or(EINVAL)?;
        if fault::hit(Site::PostRecv) {
            return Err(EIO);
        }
        let mut sge = buf.sge(0, buf.len(), &self.pd)?.raw();
        // The tag first: a buffer still posted (or being read after its
        // completion, before its repost) is not handed to the device again.
        t.hold(Some(buf))?;
        buf.give_to_device();
        let mut wr = bindings::ib_recv_wr {
            sg_list: &mut sge,
            num_sge: 1,
            ..Default::default()
        };
        // SAFETY: Writing the `wr_cqe` member of the union.
        unsafe { *wr.__bindgen_anon_1.wr_cqe.as_mut() = (&raw const t.cqe).cast_mut() };
        let mut bad = core::ptr::null();
        // SAFETY: The QP is valid; `wr` and `sge` outlive the call; the tag
        // and the buffer stay valid until the completion (held above).
        let r = to_result(unsafe { bindings::riser_ib_post_recv(self.qp.as_ptr(), &wr, &mut bad) });
        if r.is_err() {
            t.release();
        }
        r
    }

    /// Takes MR `mr` for exclusive use until the returned claim is
    /// dropped; `EBUSY` while another claim holds it.
    pub(crate) fn claim_mr(&self, mr: u32) -> Result<MrClaim<'_>> {
        let slot = self.mrs.get(mr as usize).ok_or(EINVAL)?;
        slot.claimed
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .map_err(|_| EBUSY)?;
        // INVARIANT: the flag was taken just above.
        Ok(MrClaim { slot })
    }

    /// Whether MR `mr` is registered and not yet invalidated.
    pub(crate) fn mr_valid(&self, mr: u32) -> bool {
        self.mrs
            .get(mr as usize)
            .is_some_and(|s| s.valid.load(Ordering::Acquire))
    }

    /// The rkey of MR `mr`'s last posted registration.
    pub(crate) fn mr_rkey(&self, mr: u32) -> Option<u32> {
        self.mrs
            .get(mr as usize)
            .map(|s| s.reg_rkey.load(Ordering::Acquire))
    }

    /// Records that the peer invalidated MR `mr` (SEND_WITH_INV naming its
    /// rkey).
    pub(crate) fn mr_invalidated(&self, mr: u32) {
        if let Some(s) = self.mrs.get(mr as usize) {
            s.valid.store(false, Ordering::Release);
        }
    }

    /// Posts `ops` as one chain. MR states are published before posting,
    /// so a completion racing the post sees them, and rolled back for the
    /// requests the provider did not take.
    ///
    /// The memory the requests name is borrowed only for the call; what
    /// keeps it alive until their completions is said at [`SendOp`].
    pub(crate) fn post_send(&self, ops: &[SendOp<'_>]) -> Result {
        self.post_chain(ops).map_err(|(e, _)| e)
    }

    /// As [`Connection::post_send`], saying on failure how many requests
    /// of the chain the provider took before it refused one: those were
    /// posted and keep their effects (a registration that went out is
    /// valid, with the access it gave, until it is invalidated).
    pub(crate) fn post_chain(
        &self,
        ops: &[SendOp<'_>],
    ) -> core::result::Result<(), (Error, usize)> {
        let mut posted = 0;
        self.post_ops(ops, &mut posted).map_err(|e| (e, posted))
    }

    /// Posts `ops`, counting in `posted` the requests the provider took.
    fn post_ops(&self, ops: &[SendOp<'_>], posted: &mut usize) -> Result {
        if ops.is_empty() || ops.len() > MAX_CHAIN {
            return Err(EINVAL);
        }
        // Validate every request before holding any tag.
        for op in ops {
            match op {
                SendOp::LocalInv { mr, tag } => {
                    self.mrs.get(*mr as usize).ok_or(EINVAL)?;
                    if let Some(t) = tag {
                        self.send_tags.get(*t as usize).ok_or(EINVAL)?;
                    }
                }
                SendOp::Reg { reg, .. } => {
                    // An MR mapping, of one of this connection's MRs.
                    let s = reg.mr.ok_or(EINVAL)?;
                    if !self.mrs.as_ptr_range().contains(&core::ptr::from_ref(s)) {
                        return Err(EINVAL);
                    }
                }
                SendOp::Send { tag, sges, keep } => {
                    self.send_tags.get(*tag as usize).ok_or(EINVAL)?;
                    if sges.is_empty() || sges.len() > 2 {
                        return Err(EINVAL);
                    }
                    // The tag keeps only `keep` alive until the completion.
                    let kept = |b: &DmaBuf| keep.is_some_and(|k| core::ptr::eq(&**k, b));
                    if !sges.iter().all(|s| s.buf.is_none_or(kept)) {
                        return Err(EINVAL);
                    }
                }
                SendOp::InlineSend { tag, bytes } => {
                    if let Some(t) = tag {
                        self.send_tags.get(*t as usize).ok_or(EINVAL)?;
                    }
                    if bytes.is_empty() || bytes.len() > self.max_inline as usize {
                        return Err(EINVAL);
                    }
                }
            }
        }
        // Fault injection: the provider refuses the chain's last request,
        // so that a chain of several goes out in part.
        let refuse_last = fault::hit(Site::PostSend);
        if refuse_last && ops.len() == 1 {
            return Err(EIO);
        }
        let n = if refuse_last {
            ops.len() - 1
        } else {
            ops.len()
        };
        let mut regs: [bindings::ib_reg_wr; MAX_CHAIN] = Default::default();
        let mut sges: [[bindings::ib_sge; 2]; MAX_CHAIN] = Default::default();
        let mut held: [Option<&Tag>; MAX_CHAIN] = [None; MAX_CHAIN];
        // The MR states before this chain: (valid, reg_rkey) per request.
        let mut before: [Option<(&MrSlot, bool, u32)>; MAX_CHAIN] = [None; MAX_CHAIN];
        let unsig = (&raw const self.unsignaled.cqe).cast_mut();
        for (i, op) in ops.iter().enumerate() {
            let w = &mut regs[i];
            match op {
                SendOp::LocalInv { mr, tag } => {
                    let cqe = match tag {
                        Some(tag) => {
                            // CAST: the flag fits an int.
                            w.wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED as c_int;
                            self.hold_tag(*tag, None, i, &before, &mut held)?
                        }
                        None => unsig,
                    };
                    let s = &self.mrs[*mr as usize];
                    let rkey = s.reg_rkey.load(Ordering::Acquire);
                    before[i] = Some((s, s.valid.load(Ordering::Acquire), rkey));
                    s.valid.store(false, Ordering::Release);
                    w.wr.opcode = bindings::ib_wr_opcode_IB_WR_LOCAL_INV;
                    // SAFETY: Writing union members.
                    unsafe {
                        *w.wr.__bindgen_anon_1.wr_cqe.as_mut() = cqe;
                        *w.wr.ex.invalidate_rkey.as_mut() = rkey;
                    }
                }
                SendOp::Reg { reg, access } => {
                    // Validated above: a mapping of one of this connection's
                    // MRs, whose claim `reg` borrows, so its key is still
                    // the MR's.
                    let Some(s) = reg.mr else {
                        Self::unwind(&before, &held, 0);
                        return Err(EINVAL);
                    };
                    let key = reg.rkey;
                    before[i] = Some((
                        s,
                        s.valid.load(Ordering::Acquire),
                        s.reg_rkey.load(Ordering::Acquire),
                    ));
                    s.reg_rkey.store(key, Ordering::Release);
                    s.valid.store(true, Ordering::Release);
                    w.wr.opcode = bindings::ib_wr_opcode_IB_WR_REG_MR;
                    // SAFETY: Writing the `wr_cqe` member of the union.
                    unsafe { *w.wr.__bindgen_anon_1.wr_cqe.as_mut() = unsig };
                    w.mr = s.ptr.as_ptr();
                    w.key = key;
                    let remote = match access {
                        Access::Local => 0,
                        Access::RemoteRead => bindings::ib_access_flags_IB_ACCESS_REMOTE_READ,
                        Access::RemoteWrite => bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE,
                    };
                    // CAST: the access flags fit an int.
                    w.access = (bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE | remote) as c_int;
                }
                SendOp::Send {
                    tag,
                    sges: list,
                    keep,
                } => {
                    for (j, s) in list.iter().enumerate() {
                        sges[i][j] = s.raw();
                    }
                    let cqe = self.hold_tag(*tag, *keep, i, &before, &mut held)?;
                    w.wr.opcode = bindings::ib_wr_opcode_IB_WR_SEND;
                    // SAFETY: Writing the `wr_cqe` member of the union.
                    unsafe { *w.wr.__bindgen_anon_1.wr_cqe.as_mut() = cqe };
                    w.wr.sg_list = sges[i].as_mut_ptr();
                    // CAST: one or two entries.
                    w.wr.num_sge = list.len() as c_int;
                    // CAST: the flag fits an int.
                    w.wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED as c_int;
                }
                SendOp::InlineSend { tag, bytes } => {
                    sges[i][0] = bindings::ib_sge {
                        // Inline data is named by its kernel virtual
                        // address, which the provider copies from while
                        // posting.
                        addr: bytes.as_ptr() as u64,
                        // CAST: at most `max_inline` bytes, a u32.
                        length: bytes.len() as u32,
                        lkey: self.pd.local_dma_lkey(),
                    };
                    w.wr.opcode = bindings::ib_wr_opcode_IB_WR_SEND;
                    w.wr.sg_list = sges[i].as_mut_ptr();
                    w.wr.num_sge = 1;
                    let mut flags = bindings::ib_send_flags_IB_SEND_INLINE;
                    let cqe = match tag {
                        Some(tag) => {
                            flags |= bindings::ib_send_flags_IB_SEND_SIGNALED;
                            self.hold_tag(*tag, None, i, &before, &mut held)?
                        }
                        None => unsig,
                    };
                    // SAFETY: Writing the `wr_cqe` member of the union.
                    unsafe { *w.wr.__bindgen_anon_1.wr_cqe.as_mut() = cqe };
                    // CAST: the flags fit an int.
                    w.wr.send_flags = flags as c_int;
                }
            }
        }
        // Chain the requests: each `ib_reg_wr` starts with its `ib_send_wr`.
        let base = regs.as_mut_ptr();
        for i in 0..n - 1 {
            // SAFETY: `i` and `i + 1` are inside `regs`.
            unsafe { (*base.add(i)).wr.next = &raw mut (*base.add(i + 1)).wr };
        }
        let mut bad = core::ptr::null();
        // Providers copy work requests, and inline data, when posting;
        // buffers are held by their tags until completion.
        // SAFETY: The QP is valid; the chain, the inline bytes and the MRs
        // it names outlive the call.
        let r = to_result(unsafe {
            bindings::riser_ib_post_send(self.qp.as_ptr(), &(*base).wr, &mut bad)
        });
        if r.is_err() {
            // Requests before `bad` were posted and keep their effects.
            let first_bad = (0..ops.len())
                // SAFETY: `i` is inside `regs`; only addresses are compared.
                .position(|i| core::ptr::eq(unsafe { &raw const (*base.add(i)).wr }, bad))
                .unwrap_or(0);
            Self::unwind(&before, &held, first_bad);
            *posted = first_bad;
            return r;
        }
        *posted = n;
        if n < ops.len() {
            Self::unwind(&before, &held, n);
            return Err(EIO);
        }
        Ok(())
    }

    /// Holds send tag `tag` (validated) for request `i` of a chain being
    /// built, keeping `keep` with it: the completion the request names. If
    /// the tag is busy, everything the chain held so far is released.
    fn hold_tag<'a>(
        &'a self,
        tag: u32,
        keep: Option<&Arc<DmaBuf>>,
        i: usize,
        before: &[Option<(&MrSlot, bool, u32)>],
        held: &mut [Option<&'a Tag>],
    ) -> Result<*mut bindings::ib_cqe> {
        let t = &self.send_tags[tag as usize];
        if let Err(e) = t.hold(keep) {
            Self::unwind(before, held, 0);
            return Err(e);
        }
        held[i] = Some(t);
        Ok((&raw const t.cqe).cast_mut())
    }

    /// Undoes the MR states and tag holds of requests `from..` of a chain
    /// that were not posted.
    fn unwind(before: &[Option<(&MrSlot, bool, u32)>], held: &[Option<&Tag>], from: usize) {
        for (s, valid, rkey) in before.iter().skip(from).flatten().rev() {
            s.reg_rkey.store(*rkey, Ordering::Release);
            s.valid.store(*valid, Ordering::Release);
        }
        held.iter().skip(from).flatten().for_each(|h| h.release());
    }

    fn wc(wc: &bindings::ib_wc) -> Wc {
        // CAST: the flag fits an int.
        let inv = wc.wc_flags & (bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE as c_int) != 0;
        Wc {
            status: wc.status,
            byte_len: wc.byte_len,
            // SAFETY: `invalidate_rkey` is the union's member when the flag
            // is set.
            invalidated: inv.then(|| unsafe { *wc.ex.invalidate_rkey.as_ref() }),
        }
    }

    /// # Safety
    ///
    /// Called by ib_core's CQ polling with a completion of a receive posted
    /// by [`Connection::post_recv`].
    unsafe extern "C" fn recv_done_cb(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
        // `wr_cqe` is the first field of one of this connection's `Tag`s; the
        // QP's context is the `Arc<H>` the id owns, alive until the QP is gone.
        // SAFETY: ib_core passes a valid completion of this connection's QP.
        let (tag, h, w) = unsafe {
            let wc = &*wc;
            let tag = &*(*wc.__bindgen_anon_1.wr_cqe.as_ref()).cast::<Tag>();
            (tag, Arc::<H>::borrow((*wc.qp).qp_context), Self::wc(wc))
        };
        let id = tag.id;
        // The buffer stays alive for the handler through the driver's own
        // reference; the tag's hold ends here.
        tag.release();
        h.recv_done(id, w);
    }

    /// # Safety
    ///
    /// Called by ib_core's CQ polling with a completion of a send posted by
    /// [`Connection::post_send`].
    unsafe extern "C" fn send_done_cb(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
        // SAFETY: As in `recv_done_cb`.
        let (tag, h, w) = unsafe {
            let wc = &*wc;
            let tag = &*(*wc.__bindgen_anon_1.wr_cqe.as_ref()).cast::<Tag>();
            (tag, Arc::<H>::borrow((*wc.qp).qp_context), Self::wc(wc))
        };
        let id = tag.id;
        if id != UNSIGNALED_TAG {
            tag.release();
        }
        h.send_done(id, w);
    }
}

impl<H: CmHandler + QpHandler> Drop for Connection<H> {
    fn drop(&mut self) {
        // Flush and wait for every outstanding work request, so no
        // completion names a tag, buffer or MR freed below.
        self.disconnect();
        self.drain();
        // SAFETY: The QP was created on this id (type invariant) and is
        // destroyed once; the fields (MRs, PD, CQ, id) drop after this.
        unsafe { bindings::rdma_destroy_qp(self.id.as_raw()) };
        for t in Iterator::chain(self.recv_tags.iter(), self.send_tags.iter()) {
            t.release();
        }
    }
}
#[kunit_tests(riser_rdma_conn)]
mod tests {
    use super::*;

    /// Both volatile copies move exactly the `len` bytes asked for, and
    /// nothing around them, at every alignment of either side and every
    /// length up to a few words.
    #[test]
    fn volatile_copies_move_exactly_the_bytes_asked_for() {
        const N: usize = 4 * WORD + 8;
        // CAST: indexes below 256.
        let src: [u8; N] = core::array::from_fn(|i| i as u8 + 1);
        for so in 0..WORD {
            for d in 0..WORD {
                for len in 0..=3 * WORD {
                    for to in [true, false] {
                        let mut dst = [0u8; N];
                        // SAFETY: `so + len` and `d + len` are at most
                        // `4 * WORD - 2`, inside both arrays, which are
                        // distinct locals accessed by nothing else.
                        unsafe {
                            let (dp, sp) = (dst.as_mut_ptr().add(d), src.as_ptr().add(so));
                            if to {
                                copy_to_volatile(dp, sp, len);
                            } else {
                                copy_from_volatile(dp, sp, len);
                            }
                        }
                        assert!(dst[..d].iter().all(|b| *b == 0));
                        assert_eq!(dst[d..d + len], src[so..so + len]);
                        assert!(dst[d + len..].iter().all(|b| *b == 0));
                    }
                }
            }
        }
    }
}
