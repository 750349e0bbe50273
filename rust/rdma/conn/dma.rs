// SPDX-License-Identifier: GPL-2.0

//! Memory the device reads or writes: kernel buffers mapped for DMA
//! ([`DmaBuf`], written by the CPU only through volatile copies, several
//! carved from one allocation; a [`RecvBuf`] owns one the device writes)
//! and SCSI scatterlists mapped for a command ([`DmaSg`]).

use crate::{
    bindings,
    fault::{
        self,
        Site, //
    },
    kernel_ext::sg::{
        self,
        SgMapping, //
    },
    rdma::{
        device::{
            DeviceRef,
            MapDevice,
            MapRef, //
        },
        Pd, //
    },
};
use core::{
    marker::PhantomData,
    ptr::NonNull, //
};
use kernel::num::casts::FromSafeCast;
use kernel::{
    alloc::KVec,
    dma::DataDirection,
    prelude::*,
    sync::Arc, //
};

/// A kernel buffer mapped for DMA by one RDMA device.
///
/// The CPU reaches the buffer's memory only through [`DmaBuf::write`],
/// which copies into it with volatile stores, and no reference into that
/// memory is ever handed out; the exception is the [`RecvBuf`] that owns
/// one, unshared and never written by the CPU, whose bytes are read in
/// place between a receive's completion and its repost (see `rx`), and
/// the unsafe [`DmaBuf::write_exclusive`], a plain copy whose caller
/// proves that nothing else touches the buffer meanwhile (a command
/// slot's header buffer, written by the holder of the slot's tag). Any use
/// from safe code is therefore sound: two CPUs writing one buffer (or one
/// while the device reads it) race only on marked accesses, which the
/// kernel memory model defines (as `WRITE_ONCE`): the bytes the device
/// sees may be a mix, nothing worse.
/// Whether the bytes make sense (one writer at a time, no write while a
/// posted work request still reads the buffer) is the driver's concern,
/// which it meets by giving each buffer to one work request or task at a
/// time.
///
/// # Invariants
///
/// `ptr..ptr + len` lies inside `chunk`'s memory, at `addr` in its
/// mapping (on `dev`, in direction `dir`), which stays until the last
/// buffer of the chunk drops. Buffers carved from one chunk do not
/// overlap.
pub(crate) struct DmaBuf {
    pub(super) dev: DeviceRef,
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
    pub(super) addr: u64,
    pub(super) dir: DataDirection,
    /// `dir` as the DMA API takes it.
    raw_dir: c_int,
    /// The allocation and mapping the buffer is part of.
    _chunk: Arc<DmaChunk>,
}

/// One allocation mapped for DMA, which one or more [`DmaBuf`]s are carved
/// from: unmapped and freed when the last of them drops.
///
/// # Invariants
///
/// `ptr` points to `len` bytes allocated with `KVec` (capacity `len`), mapped
/// at `addr` on `dev` in direction `raw_dir` until `drop`.
struct DmaChunk {
    dev: DeviceRef,
    ptr: NonNull<u8>,
    len: usize,
    addr: u64,
    raw_dir: c_int,
}

// SAFETY: The chunk is plain memory owned by the value, reached only
// through the `DmaBuf`s carved from it (see there).
unsafe impl Send for DmaChunk {}
// SAFETY: As above; its fields are not written after construction.
unsafe impl Sync for DmaChunk {}

impl DmaChunk {
    /// Allocates `len` zeroed bytes and maps them on `dev`.
    fn new(dev: &DeviceRef, len: usize, raw_dir: c_int) -> Result<Arc<Self>> {
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
            unsafe { bindings::riser_ib_dma_map_single(dev.raw(), ptr.cast(), len, raw_dir) };
        // SAFETY: `addr` was returned by the mapping just above.
        if unsafe { bindings::riser_ib_dma_mapping_error(dev.raw(), addr) } != 0 {
            // SAFETY: The parts came from `into_raw_parts` above.
            drop(unsafe { KVec::from_raw_parts(ptr, len, len) });
            return Err(ENOMEM);
        }
        let Some(ptr) = NonNull::new(ptr) else {
            // `into_raw_parts` of a vector gives a non-null pointer; were
            // it null, nothing was allocated to free (nor mapped usefully).
            return Err(ENOMEM);
        };
        // INVARIANT: allocated with capacity `len` and mapped at `addr`.
        Ok(Arc::new(
            Self {
                dev: dev.clone(),
                ptr,
                len,
                addr,
                raw_dir,
            },
            GFP_KERNEL,
        )?)
    }
}

impl Drop for DmaChunk {
    fn drop(&mut self) {
        // SAFETY: The memory is mapped at `addr` and was allocated as a
        // `KVec` of capacity `len` (type invariant); its last buffer is
        // gone, so nothing refers to it.
        unsafe {
            bindings::riser_ib_dma_unmap_single(self.dev.raw(), self.addr, self.len, self.raw_dir);
            drop(KVec::from_raw_parts(self.ptr.as_ptr(), self.len, self.len));
        }
    }
}

// SAFETY: The buffer is plain memory owned (with the other buffers of its
// chunk) by the value.
unsafe impl Send for DmaBuf {}
// SAFETY: Shared references reach the buffer's memory only with volatile
// copies (`write`), never through a Rust reference, so concurrent
// use from several CPUs has no data race (see the type's documentation);
// the other fields are not written after construction.
unsafe impl Sync for DmaBuf {}

/// Buffers carved together ([`DmaBuf::carve`]) and shared as one set: a
/// [`BufRef`] borrows one of them, a work request's tag keeps one by
/// keeping the set. The set never changes once made.
pub(crate) struct DmaBufs(KVec<DmaBuf>);

impl DmaBufs {
    /// Buffer `i` of the set, if it has one.
    #[inline]
    pub(crate) fn get(self: &Arc<Self>, i: usize) -> Option<BufRef<'_>> {
        // INVARIANT: the buffer is the set's own.
        Some(BufRef {
            set: self,
            buf: self.0.get(i)?,
        })
    }

    /// How many buffers the set has.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// One buffer of a shared set, borrowed with the set, so that a work
/// request naming it can keep the set (see [`super::SendOp::Send`]).
///
/// # Invariants
///
/// `buf` is one of `set`'s buffers (made only by [`DmaBufs::get`]).
#[derive(Clone, Copy)]
pub(crate) struct BufRef<'a> {
    set: &'a Arc<DmaBufs>,
    buf: &'a DmaBuf,
}

impl<'a> BufRef<'a> {
    /// The set the buffer is part of: what keeps it.
    pub(super) fn set(self) -> &'a Arc<DmaBufs> {
        self.set
    }

    /// The buffer, for the lifetime of the borrow.
    pub(super) fn buf(self) -> &'a DmaBuf {
        self.buf
    }
}

impl core::ops::Deref for BufRef<'_> {
    type Target = DmaBuf;

    #[inline]
    fn deref(&self) -> &DmaBuf {
        self.buf
    }
}

/// Largest chunk [`DmaBuf::carve`] allocates (an order-4 allocation); a
/// buffer longer than that has one of its own.
const CARVE_CHUNK: usize = 64 * 1024;

/// How buffers of `len` bytes are carved from chunks of at most `chunk`
/// bytes, each starting on an `align` boundary (a power of two) of its
/// chunk: the distance between two buffers' starts, and how many a chunk
/// holds (at least one: a buffer longer than `chunk` has a chunk of its
/// own). `None` for an empty buffer, an alignment that is no power of
/// two, or a stride beyond `usize`.
fn carve_layout(len: usize, align: usize, chunk: usize) -> Option<(usize, usize)> {
    if len == 0 || !align.is_power_of_two() {
        return None;
    }
    let stride = len.checked_next_multiple_of(align)?;
    Some((stride, (chunk / stride).max(1)))
}

/// Bytes of a chunk holding `k` (at least one) buffers `stride` bytes
/// apart, the last of them `len` bytes long.
fn carve_chunk_len(stride: usize, len: usize, k: usize) -> Option<usize> {
    stride.checked_mul(k.checked_sub(1)?)?.checked_add(len)
}

impl DmaBuf {
    /// Allocates `len` zeroed bytes and maps them on `dev`, unshared.
    pub(super) fn alloc(dev: &DeviceRef, len: usize, dir: DataDirection) -> Result<Self> {
        let mut v = Self::carve_into(dev, len, 1, 1, dir)?;
        v.pop().ok_or(ENOMEM)
    }

    /// `n` buffers of `len` zeroed bytes each, mapped on `dev`, carved
    /// from chunks of up to `CARVE_CHUNK` bytes, each buffer starting
    /// `align` bytes (a power of two) after a chunk's start or more: a few
    /// allocations and mappings instead of one a buffer, and no buffer
    /// rounded up to a power of two. Should a chunk not be had (memory
    /// fragmented), the rest get one each. The buffers are shared as one
    /// set ([`DmaBufs`]): what keeps one alive keeps the set, so that a
    /// connection's hundreds of buffers are a few allocations to make and
    /// to free, not one each.
    pub(crate) fn carve(
        dev: &DeviceRef,
        len: usize,
        n: usize,
        align: usize,
        dir: DataDirection,
    ) -> Result<Arc<DmaBufs>> {
        Ok(Arc::new(
            DmaBufs(Self::carve_into(dev, len, n, align, dir)?),
            GFP_KERNEL,
        )?)
    }

    /// As [`DmaBuf::carve`], unshared.
    pub(super) fn carve_into(
        dev: &DeviceRef,
        len: usize,
        n: usize,
        align: usize,
        dir: DataDirection,
    ) -> Result<KVec<Self>> {
        let raw_dir = sg::map_dir(dir).ok_or(EINVAL)?;
        let (stride, mut per) = carve_layout(len, align, CARVE_CHUNK).ok_or(EINVAL)?;
        let mut out = KVec::with_capacity(n, GFP_KERNEL)?;
        while out.len() < n {
            let k = per.min(n - out.len());
            let bytes = carve_chunk_len(stride, len, k).ok_or(EINVAL)?;
            let chunk = match DmaChunk::new(dev, bytes, raw_dir) {
                Ok(c) => c,
                Err(e) if e == ENOMEM && k > 1 => {
                    per = 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            for i in 0..k {
                let off = i * stride;
                // SAFETY: `off + len` <= the chunk's length (`bytes`:
                // `carve_chunk_len`), so
                // the pointer stays inside its allocation.
                let ptr = unsafe { chunk.ptr.add(off) };
                // INVARIANT: `off..off + len` is inside the chunk, at
                // `addr + off` in its mapping; the buffers start `stride`
                // (>= `len`) bytes apart, so none overlaps another.
                out.push(
                    Self {
                        dev: dev.clone(),
                        ptr,
                        len,
                        addr: chunk.addr + u64::from_safe_cast(off),
                        dir,
                        raw_dir,
                        _chunk: chunk.clone(),
                    },
                    GFP_KERNEL,
                )?;
            }
        }
        Ok(out)
    }

    /// A scatter/gather entry for `len` bytes at `off`, with the PD's local
    /// DMA lkey; `EINVAL` if the range is not inside the buffer.
    /// The entry borrows the buffer; a SEND naming it must keep it (see
    /// [`SendOp::Send`]).
    pub(crate) fn sge(&self, off: usize, len: usize, pd: &Pd) -> Result<Sge<'_>> {
        let end = off.checked_add(len).ok_or(EINVAL)?;
        // The lkey is `pd`'s, the address this device's: one device.
        if end > self.len || pd.device_ptr() != self.dev.raw() {
            return Err(EINVAL);
        }
        Ok(Sge {
            addr: self.addr + u64::from_safe_cast(off),
            length: u32::try_from(len)?,
            lkey: pd.local_dma_lkey(),
            buf: Some(self),
            dev: self.dev.raw(),
            to_device: sg::device_reads(self.dir),
            _mem: PhantomData,
        })
    }

    /// Copies `src` into the buffer at `off` and makes it visible to the
    /// device.
    #[inline(always)]
    pub(crate) fn write(&self, off: usize, src: &[u8]) -> Result {
        // SAFETY: A volatile copy (`plain` false) races with nothing that is
        // not itself volatile, which every other access is.
        unsafe { self.write_at(off, src, false) }
    }

    /// As [`DmaBuf::write`], with a plain copy (a few wide moves where the
    /// volatile copy moves word by word).
    ///
    /// # Safety
    ///
    /// Nothing else accesses the buffer during the call: no other CPU
    /// (through this or any other method) and no device (no work request
    /// that reads or writes it is outstanding).
    #[inline(always)]
    pub(super) unsafe fn write_exclusive(&self, off: usize, src: &[u8]) -> Result {
        // SAFETY: Nothing else accesses the buffer during the call
        // (function contract), so a plain copy races with nothing.
        unsafe { self.write_at(off, src, true) }
    }

    /// Checks that `off..off + src.len()` is inside the buffer (`EINVAL`
    /// if not), copies `src` there (with plain stores if `plain`, volatile
    /// ones if not) and syncs the range for the device.
    ///
    /// # Safety
    ///
    /// If `plain`, nothing else accesses the buffer during the call (as
    /// for [`DmaBuf::write_exclusive`]).
    #[inline(always)]
    unsafe fn write_at(&self, off: usize, src: &[u8], plain: bool) -> Result {
        let end = off.checked_add(src.len()).ok_or(EINVAL)?;
        if end > self.len {
            return Err(EINVAL);
        }
        let dst = self.ptr.as_ptr();
        // SAFETY: `off..end` is inside the allocation (checked); `src` is a
        // distinct borrow, so the ranges do not overlap. Every other access
        // to the allocation is a volatile copy, so the volatile copy races
        // with none, and a plain one is made only while nothing else
        // accesses it (function contract). The range is mapped at
        // `addr + off`.
        unsafe {
            if plain {
                core::ptr::copy_nonoverlapping(src.as_ptr(), dst.add(off), src.len());
            } else {
                copy_to_volatile(dst.add(off), src.as_ptr(), src.len());
            }
            sync_for_device(
                self.dev.raw(),
                self.addr + u64::from_safe_cast(off),
                src.len(),
                self.raw_dir,
            );
        }
        Ok(())
    }

    /// Hands the whole buffer (back) to the device, before a receive.
    pub(super) fn give_to_device(&self) {
        // SAFETY: The buffer is mapped at `addr` for `len` bytes (type
        // invariant).
        unsafe { sync_for_device(self.dev.raw(), self.addr, self.len, self.raw_dir) };
    }

    /// Makes the first `n` bytes (at most the buffer's), as the device wrote
    /// them, visible to the CPU.
    pub(super) fn take_from_device(&self, n: usize) {
        // SAFETY: The buffer is mapped at `addr` for `len` bytes (type
        // invariant), of which at most `len` are synced.
        unsafe { sync_for_cpu(self.dev.raw(), self.addr, n.min(self.len), self.raw_dir) };
    }
}

/// Whether `dev` takes kernel virtual addresses for DMA addresses
/// (`ib_uses_virt_dma`: a software device, rxe or siw), whose DMA syncs
/// are nothing: they are skipped here, without a call of the helper.
///
/// # Safety
///
/// `dev` is a valid device.
#[inline(always)]
unsafe fn uses_virt_dma(dev: *mut bindings::ib_device) -> bool {
    // SAFETY: `dev` is valid (function contract); `dma_device` is set
    // when the device registers and not changed after.
    cfg!(CONFIG_INFINIBAND_VIRT_DMA) && unsafe { (*dev).dma_device.is_null() }
}

/// `ib_dma_sync_single_for_device`, its test of a software device inline.
///
/// # Safety
///
/// `dev` is a valid device on which `addr..addr + len` is mapped in
/// direction `dir`.
#[inline(always)]
unsafe fn sync_for_device(dev: *mut bindings::ib_device, addr: u64, len: usize, dir: c_int) {
    // SAFETY: As this function's contract.
    if !unsafe { uses_virt_dma(dev) } {
        // SAFETY: As this function's contract.
        unsafe { bindings::riser_ib_dma_sync_for_device(dev, addr, len, dir) };
    }
}

/// `ib_dma_sync_single_for_cpu`, as [`sync_for_device`].
///
/// # Safety
///
/// As for [`sync_for_device`].
#[inline(always)]
unsafe fn sync_for_cpu(dev: *mut bindings::ib_device, addr: u64, len: usize, dir: c_int) {
    // SAFETY: As this function's contract.
    if !unsafe { uses_virt_dma(dev) } {
        // SAFETY: As this function's contract.
        unsafe { bindings::riser_ib_dma_sync_for_cpu(dev, addr, len, dir) };
    }
}

/// The word the volatile copies move at a time.
pub(super) const WORD: usize = core::mem::size_of::<usize>();

/// Copies `len` bytes from `src` to `dst`, storing into `dst` only with
/// volatile writes (bytes up to `dst`'s first word boundary, then aligned
/// words, four at a time while four are left, then the rest in aligned
/// pieces of 4, 2 and 1 bytes), so that a racing access to `dst` from
/// another CPU, itself volatile, is no data race. (A PDU's 76 headers
/// bytes to a cache-aligned buffer: two rounds of four words, one word,
/// and four bytes.)
///
/// # Safety
///
/// `src` must be valid for reads and `dst` for writes of `len` bytes; the
/// ranges must not overlap; `dst`'s memory must not be accessed other than
/// with volatile accesses (or by a device) during the call.
pub(super) unsafe fn copy_to_volatile(dst: *mut u8, src: *const u8, len: usize) {
    let head = ((WORD - dst.addr() % WORD) % WORD).min(len);
    let mut rem = len - head;
    // SAFETY: Every access is inside the `len` bytes: `d` and `s` move on
    // by what was copied, and each step checks that `rem`, what is left,
    // holds what it moves. Past `head`, `d` is word-aligned, and stays
    // aligned for each smaller piece, taken in decreasing size; the loads
    // from `src` may be unaligned and are done as such.
    unsafe {
        for i in 0..head {
            dst.add(i).write_volatile(src.add(i).read());
        }
        let (mut d, mut s) = (dst.add(head), src.add(head));
        let word = |d: *mut u8, s: *const u8, i: usize| {
            let v = s.add(i).cast::<usize>().read_unaligned();
            d.add(i).cast::<usize>().write_volatile(v);
        };
        while rem >= 4 * WORD {
            word(d, s, 0);
            word(d, s, WORD);
            word(d, s, 2 * WORD);
            word(d, s, 3 * WORD);
            (d, s, rem) = (d.add(4 * WORD), s.add(4 * WORD), rem - 4 * WORD);
        }
        while rem >= WORD {
            word(d, s, 0);
            (d, s, rem) = (d.add(WORD), s.add(WORD), rem - WORD);
        }
        if rem >= 4 {
            let v = s.cast::<u32>().read_unaligned();
            d.cast::<u32>().write_volatile(v);
            (d, s, rem) = (d.add(4), s.add(4), rem - 4);
        }
        if rem >= 2 {
            let v = s.cast::<u16>().read_unaligned();
            d.cast::<u16>().write_volatile(v);
            (d, s, rem) = (d.add(2), s.add(2), rem - 2);
        }
        if rem > 0 {
            d.write_volatile(s.read());
        }
    }
}

/// A scatterlist mapped for DMA (a SCSI command's data).
///
/// # Invariants
///
/// `sgl` has `nents` entries mapped on `dev` into `count` DMA segments
/// (at least one), and stays valid until this value is dropped, which unmaps it. `dev` is
/// the device of the [`MapRef`] in the task slot's keep the mapping was
/// made with, which (contract of [`SgMapping::map`]) is neither dropped
/// nor replaced before this value is: the device stays registered until
/// then.
pub(crate) struct DmaSg {
    pub(super) dev: NonNull<bindings::ib_device>,
    pub(super) sgl: NonNull<bindings::scatterlist>,
    pub(super) nents: c_int,
    pub(super) count: c_int,
    pub(super) dir: DataDirection,
    /// `dir` as the DMA API takes it.
    raw_dir: c_int,
}

// SAFETY: The mapping may be released from any thread.
unsafe impl Send for DmaSg {}
// SAFETY: Shared references only read the mapping.
unsafe impl Sync for DmaSg {}

impl SgMapping for DmaSg {
    type Device = MapDevice;
    /// The reference on the device of the slot's last mapping.
    type Keep = Option<MapRef>;

    unsafe fn map(
        dev: &MapDevice,
        keep: &mut Option<MapRef>,
        sgl: *mut bindings::scatterlist,
        nents: u32,
        dir: DataDirection,
    ) -> Result<Self> {
        let raw_dir = sg::map_dir(dir).ok_or(EINVAL)?;
        let sgl = NonNull::new(sgl).ok_or(EINVAL)?;
        let nents = c_int::try_from(nents)?;
        if fault::hit(Site::DmaMap) {
            return Err(ENOMEM);
        }
        // The slot's reference keeps the device registered while mapped:
        // taken at its first mapping on the device (a per-CPU count),
        // then kept. Replacing one for another device drops it, which no
        // live mapping needs (function contract).
        let held = match keep {
            Some(r) if r.is_of(dev) => &*r,
            // SAFETY: No mapping made with `keep` is alive (function
            // contract).
            _ => unsafe { first_on(dev, keep) },
        };
        let raw = held.raw();
        // SAFETY: `sgl` is valid for `nents` entries (function contract);
        // the device is registered while `held` is.
        let count = unsafe { map_sg(raw, sgl.as_ptr(), nents, raw_dir) };
        if count <= 0 {
            return Err(ENOMEM);
        }
        // INVARIANT: mapped just above into `count` segments, on the device
        // of the keep's reference, which stays until this value is dropped
        // (function contract).
        Ok(Self {
            // SAFETY: A registered device's pointer is not null.
            dev: unsafe { NonNull::new_unchecked(raw) },
            sgl,
            nents,
            count,
            dir,
            raw_dir,
        })
    }
}

/// A slot's first mapping on `dev`: a reference taken there, in place of
/// the one `keep` held for another device (out of line: once per slot and
/// device).
///
/// # Safety
///
/// No mapping made with `keep` may be alive: the reference it holds is
/// dropped.
#[cold]
#[inline(never)]
unsafe fn first_on<'k>(dev: &MapDevice, keep: &'k mut Option<MapRef>) -> &'k MapRef {
    keep.insert(dev.get())
}

impl DmaSg {
    /// The number of DMA segments the mapping produced. This, not the
    /// scatterlist's entry count, is what a registration maps: mapping may
    /// merge entries (an IOMMU joins contiguous ones), and only the first
    /// `count` entries carry DMA addresses.
    pub(crate) fn count(&self) -> u32 {
        // CAST: positive (type invariant).
        self.count as u32
    }

    /// As [`DmaSg::single`], for a `pd` on the device of the mapping (its
    /// keys name this device's addresses only).
    pub(super) fn single_on(&self, pd: &Pd) -> Option<(u64, u32)> {
        (pd.device_ptr() == self.dev.as_ptr())
            .then(|| self.single())
            .flatten()
    }

    /// The DMA address and length of a single-segment mapping.
    pub(super) fn single(&self) -> Option<(u64, u32)> {
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
        // SAFETY: Mapped with these arguments, on a device still registered
        // (type invariant); unmapping takes the original entry count.
        unsafe {
            unmap_sg(
                self.dev.as_ptr(),
                self.sgl.as_ptr(),
                self.nents,
                self.raw_dir,
            )
        };
    }
}

/// `ib_dma_map_sg`, its software-device case (`ib_dma_virt_map_sg`, which
/// ib_core exports) called without the helper.
///
/// # Safety
///
/// `dev` is a valid device; `sgl` a valid list of `nents` entries, not
/// mapped.
#[inline(always)]
unsafe fn map_sg(
    dev: *mut bindings::ib_device,
    sgl: *mut bindings::scatterlist,
    nents: c_int,
    dir: c_int,
) -> c_int {
    #[cfg(CONFIG_INFINIBAND_VIRT_DMA)]
    {
        // SAFETY: As this function's contract.
        if unsafe { uses_virt_dma(dev) } {
            // SAFETY: As this function's contract; the device takes
            // virtual addresses, which is what ib_dma_virt_map_sg maps for.
            return unsafe { bindings::ib_dma_virt_map_sg(dev, sgl, nents) };
        }
    }
    // SAFETY: As this function's contract.
    unsafe { bindings::riser_ib_dma_map_sg(dev, sgl, nents, dir) }
}

/// `ib_dma_unmap_sg`, as [`map_sg`]: nothing on a software device.
///
/// # Safety
///
/// `sgl` (`nents` entries) was mapped on `dev` in direction `dir` by
/// [`map_sg`], and is unmapped once.
#[inline(always)]
unsafe fn unmap_sg(
    dev: *mut bindings::ib_device,
    sgl: *mut bindings::scatterlist,
    nents: c_int,
    dir: c_int,
) {
    // SAFETY: As this function's contract.
    if !unsafe { uses_virt_dma(dev) } {
        // SAFETY: As this function's contract.
        unsafe { bindings::riser_ib_dma_unmap_sg(dev, sgl, nents, dir) };
    }
}

/// One scatter/gather entry of a work request, made only from memory riser
/// mapped or registered, and borrowing what it was made from: an `Sge<'a>`
/// cannot outlive the [`DmaBuf`] or the [`Registration`](super::Registration) (and through it
/// the [`DmaSg`]) that it names, so no work request is posted naming memory
/// already freed or unmapped. Its fields are private: an entry cannot be
/// made up or changed to name other memory.
#[derive(Clone, Copy)]
pub(crate) struct Sge<'a> {
    pub(super) addr: u64,
    pub(super) length: u32,
    pub(super) lkey: u32,
    /// The buffer the entry is in, for an entry of a [`DmaBuf`]: a SEND
    /// naming it must hold it until its completion.
    pub(super) buf: Option<&'a DmaBuf>,
    /// The device the memory is mapped on: work requests go only to a QP
    /// of that device.
    pub(super) dev: *mut bindings::ib_device,
    /// Whether the memory is mapped for the device to read (what a SEND
    /// may name).
    pub(super) to_device: bool,
    pub(super) _mem: PhantomData<&'a ()>,
}

impl Sge<'_> {
    pub(super) fn raw(self) -> bindings::ib_sge {
        bindings::ib_sge {
            addr: self.addr,
            length: self.length,
            lkey: self.lkey,
        }
    }
}

#[kunit_tests(riser_rdma_conn)]
mod tests {
    use super::*;

    /// `post_send` refuses exactly the command slots' send tags, which
    /// only a claim of the slot takes (`Tag::hold_claimed`'s contract):
    /// not the tags right before or after them.
    #[test]
    fn only_command_slot_tags_are_refused_to_post_send() {
        let caps = super::super::ConnCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            recv_tags: 8,
            send_tags: 40,
            mrs: 32,
            pages_per_mr: 1,
            max_inline: 0,
            cmd_slots: 32,
            cmd_tag_base: 5,
        };
        assert!(!caps.is_cmd_tag(0));
        assert!(!caps.is_cmd_tag(4));
        assert!(caps.is_cmd_tag(5));
        assert!(caps.is_cmd_tag(36));
        assert!(!caps.is_cmd_tag(37));
        assert!(!caps.is_cmd_tag(u32::MAX));
    }

    /// A mapping is never asked for `DataDirection::None` (the DMA API
    /// BUGs on it): `DmaBuf::alloc` and `DmaSg::map` refuse it through
    /// `map_dir`; the others map to the C values, and the device reads
    /// exactly the memory mapped for it to read.
    #[test]
    fn no_mapping_without_a_direction() {
        use bindings::dma_data_direction as C;
        assert_eq!(sg::map_dir(DataDirection::None), None);
        assert_eq!(
            sg::map_dir(DataDirection::ToDevice),
            Some(C::DMA_TO_DEVICE.0)
        );
        assert_eq!(
            sg::map_dir(DataDirection::FromDevice),
            Some(C::DMA_FROM_DEVICE.0)
        );
        assert_eq!(
            sg::map_dir(DataDirection::Bidirectional),
            Some(C::DMA_BIDIRECTIONAL.0)
        );
        assert!(sg::device_reads(DataDirection::ToDevice));
        assert!(sg::device_reads(DataDirection::Bidirectional));
        assert!(!sg::device_reads(DataDirection::FromDevice));
        assert!(!sg::device_reads(DataDirection::None));
    }

    /// Carved buffers start on their alignment, do not overlap, and fit
    /// their chunk, which stays within the limit unless one buffer alone
    /// exceeds it.
    #[test]
    fn carved_buffers_are_aligned_apart_and_inside_their_chunk() {
        // A receive of 8 KiB data: seven in 64 KiB, 8448 bytes apart.
        assert_eq!(carve_layout(76 + 8192, 256, 65536), Some((8448, 7)));
        // A header: 128 bytes apart, 512 in 64 KiB.
        assert_eq!(carve_layout(76, 64, 65536), Some((128, 512)));
        // A 256 KiB discovery receive: a chunk of its own.
        assert_eq!(carve_layout(76 + 262144, 256, 65536), Some((262400, 1)));
        assert_eq!(carve_layout(0, 64, 65536), None);
        assert_eq!(carve_layout(76, 48, 65536), None);
        assert_eq!(carve_layout(usize::MAX, 64, 65536), None);
        assert_eq!(carve_chunk_len(8448, 8268, 7), Some(8448 * 6 + 8268));
        assert_eq!(carve_chunk_len(8448, 8268, 0), None);
        for len in (1..70_000).step_by(97) {
            for shift in 0..13 {
                let align = 1usize << shift;
                let layout = carve_layout(len, align, CARVE_CHUNK);
                assert!(layout.is_some());
                let Some((stride, per)) = layout else {
                    continue;
                };
                assert!(stride >= len && stride % align == 0 && stride - len < align);
                assert!(per >= 1);
                // The last buffer ends at the chunk's end, the others
                // before the next one starts; only a lone buffer may make
                // the chunk exceed the limit.
                let c = carve_chunk_len(stride, len, per);
                assert_eq!(c, Some((per - 1) * stride + len));
                assert!(c.is_some_and(|c| c <= CARVE_CHUNK) || per == 1);
            }
        }
    }

    /// The volatile copy moves exactly the `len` bytes asked for, and
    /// nothing around them, at every alignment of either side and every
    /// length up to ten words (two rounds of four, then the rest).
    #[test]
    fn volatile_copy_moves_exactly_the_bytes_asked_for() {
        const N: usize = 11 * WORD + 8;
        // CAST: indexes below 256.
        let src: [u8; N] = core::array::from_fn(|i| i as u8 + 1);
        for so in 0..WORD {
            for d in 0..WORD {
                for len in 0..=10 * WORD {
                    let mut dst = [0u8; N];
                    // SAFETY: `so + len` and `d + len` are at most
                    // `11 * WORD - 2`, inside both arrays, which are
                    // distinct locals accessed by nothing else.
                    unsafe {
                        copy_to_volatile(dst.as_mut_ptr().add(d), src.as_ptr().add(so), len);
                    }
                    assert!(dst[..d].iter().all(|b| *b == 0));
                    assert_eq!(dst[d..d + len], src[so..so + len]);
                    assert!(dst[d + len..].iter().all(|b| *b == 0));
                }
            }
        }
    }
}
