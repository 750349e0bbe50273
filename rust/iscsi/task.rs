// SPDX-License-Identifier: GPL-2.0

//! libiscsi's tasks and connections as the transport sees them.

use super::{
    context::{
        self,
        BhOff, //
    },
    TransportOps, //
};
use crate::{
    bindings,
    kernel_ext::rcu::RcuRead,
    kernel_ext::sg::SgMapping,
    kernel_ext::slot::{
        SlotDomain,
        SlotToken, //
    },
    kernel_ext::softirq::InSoftirq, //
};
use core::{
    cell::{
        Cell,
        UnsafeCell, //
    },
    marker::PhantomData,
    ptr::{
        null_mut,
        NonNull, //
    },
    sync::atomic::{
        AtomicPtr,
        AtomicU32,
        Ordering, //
    },
};
use kernel::num::casts::FromSafeCast;
use kernel::{
    dma::DataDirection,
    prelude::*,
    sync::rcu,
    types::Opaque, //
};

/// The ITT of PDUs that expect no response (libiscsi's RESERVED_ITT).
const RESERVED_ITT: u32 = 0xffff_ffff;

/// The BHS length: libiscsi's `struct iscsi_hdr`.
pub(crate) const BHS_LEN: usize = core::mem::size_of::<bindings::iscsi_hdr>();

/// The bits of an ITT that hold the task's index in the session's pool
/// (libiscsi's `ISCSI_ITT_MASK`; the rest is the session age).
pub(crate) const ITT_INDEX_MASK: u32 = bindings::ISCSI_ITT_MASK;

/// Room in every task slot just before the BHS, where a transport writes
/// its own header so that it and the BHS go out as one contiguous header
/// ([`XmitTask::prefixed_bhs`]).
pub(crate) const HDR_ROOM: usize = 32;

/// What the layer keeps in each libiscsi task's `dd_data`: the header
/// libiscsi builds PDUs in, the data mapping (of the transport's type
/// [`TransportOps::DataMap`], made and dropped by the layer, so it is
/// always undone in cleanup), what the mappings of the slot keep from one
/// to the next (its [`SgMapping::Keep`]) and what the task's [`TaskRef`]s
/// reach.
///
/// # Invariants
///
/// Initialised in place once per task slot when the session is made
/// ([`TaskSlot::init`]), and not moved; its contents are taken (the
/// mapping undone) when the session is destroyed, leaving a valid empty
/// slot. `hdr` is where the task's `hdr` points: libiscsi writes it, so
/// Rust reads it through raw pointers, or borrows it while the task is
/// transmitted, when libiscsi does not write it ([`XmitTask`]). `room`,
/// right before `hdr`, is written only by [`XmitTask::prefixed_bhs`],
/// once per transmission. `sg` is accessed only through
/// a [`Task`] of the slot, by `&mut` to change it (`map_data`,
/// `unmap_data`), and libiscsi never runs two callbacks of one task at
/// once that reach it (see [`Task`]), and by [`release_keeps`], which
/// reads it with the session's `frwd_lock` and `back_lock` held (so while
/// no `map_data`, which runs under the first, nor `unmap_data`, which runs
/// under the second, can). `keep` and `drop_keep` are accessed by those
/// same three (`map_data` reaches `keep` only), the same way; `keep` is
/// given to [`SgMapping::map`] only with `sg` empty, and dropped or
/// replaced only while `sg` is empty.
#[repr(C)]
pub(super) struct TaskSlot<T: TransportOps> {
    pub(super) head: SlotHead,
    sg: UnsafeCell<Option<T::DataMap>>,
    keep: UnsafeCell<<T::DataMap as SgMapping>::Keep>,
    /// [`release_keeps`] found the slot mapped: its `unmap_data` drops
    /// `keep` too.
    drop_keep: UnsafeCell<bool>,
}

/// The start of every [`TaskSlot`], laid out the same whatever the
/// transport: the task's [`SlotRefs`] are found from its `dd_data` without
/// knowing the transport's mapping type ([`Conn::task_ref`]).
#[repr(C)]
pub(super) struct SlotHead {
    room: Opaque<[u8; HDR_ROOM]>,
    pub(super) hdr: Opaque<bindings::iscsi_hdr>,
    pub(super) refs: SlotRefs,
}

// `room` ends where the BHS starts, and the BHS is all of `iscsi_hdr`.
const _: () = assert!(core::mem::offset_of!(SlotHead, hdr) == HDR_ROOM);

/// The part of a [`TaskSlot`] that the task's [`TaskRef`]s reach: how many
/// are alive, and the work that puts the last one when it was dropped
/// where libiscsi's `back_lock` cannot be taken.
///
/// # Invariants
///
/// `task` is the task whose `dd_data` holds the slot; `put_work` is
/// initialised with [`SlotRefs::put_work_fn`] when the slot is. `count`
/// counts the live [`TaskRef`]s of the task, and a reference handed to
/// `put_work` until the work has put it; the layer tears a connection or
/// session down only once every slot's count is zero (it waits for that,
/// and leaks them if it does not come, see `transport/session.rs`), so a
/// `TaskRef` never outlives its task. `put_work` is queued only by the drop
/// of a `TaskRef` that holds the task's last reference, which hands that
/// reference to the work: while it is queued the task has no other, so no
/// second drop queues it again before it ran.
#[repr(C)]
pub(super) struct SlotRefs {
    pub(super) count: AtomicU32,
    task: *mut bindings::iscsi_task,
    put_work: Opaque<bindings::work_struct>,
}

impl<T: TransportOps> TaskSlot<T> {
    /// Initialises the slot of `task` in place.
    ///
    /// # Safety
    ///
    /// `slot` must be `task`'s `dd_data`, valid for writes, unused, and not
    /// moved until the session is destroyed.
    pub(super) unsafe fn init(slot: *mut Self, task: *mut bindings::iscsi_task) {
        // SAFETY: `slot` is valid for writes (function contract).
        unsafe {
            slot.write(Self {
                head: SlotHead {
                    room: Opaque::zeroed(),
                    hdr: Opaque::zeroed(),
                    refs: SlotRefs {
                        count: AtomicU32::new(0),
                        task,
                        put_work: Opaque::uninit(),
                    },
                },
                sg: UnsafeCell::new(None),
                keep: UnsafeCell::new(Default::default()),
                drop_keep: UnsafeCell::new(false),
            })
        };
        // SAFETY: The work item is in the slot, which stays in place (function
        // contract); a work item is initialised once, before any use.
        unsafe {
            bindings::init_work_with_key(
                (*slot).head.refs.put_work.get(),
                Some(SlotRefs::put_work_fn),
                false,
                c"riser task put".as_char_ptr(),
                kernel::static_lock_class!().as_ptr(),
            )
        };
    }

    /// Undoes the slot's mapping, if any, when the session goes, and waits
    /// for a deferred put that is still returning. Process context.
    ///
    /// # Safety
    ///
    /// `slot` must be an initialised slot of a task libiscsi no longer
    /// uses, with no [`Task`] or [`TaskRef`] alive on it (its count zero).
    pub(super) unsafe fn take_contents(slot: *mut Self) {
        // SAFETY: No `Task` reaches `sg` or `keep` (function contract), and
        // the session is going, so no `release_keeps` either; the mapping
        // goes before what it kept.
        unsafe {
            drop((*(*slot).sg.get()).take());
            drop(core::mem::take(&mut *(*slot).keep.get()));
        }
        // With the count at zero the work is not queued (a queued put is
        // counted); this waits for one whose last step, the count, is done.
        // SAFETY: The work item was initialised with the slot.
        unsafe { bindings::cancel_work_sync((*slot).head.refs.put_work.get()) };
    }
}

impl<T: TransportOps> TaskSlot<T> {
    /// Drops the slot's keep if it has no mapping, or has its
    /// `unmap_data` drop it.
    ///
    /// # Safety
    ///
    /// `slot` is an initialised slot of a live session, whose `frwd_lock`
    /// and `back_lock` the caller holds.
    unsafe fn release_keep(slot: *mut Self) {
        // SAFETY: With both locks held no `map_data` or `unmap_data` runs
        // on the slot, and nothing else reaches these fields (type
        // invariant).
        unsafe {
            if (*(*slot).sg.get()).is_none() {
                // No mapping made with it is alive.
                drop(core::mem::take(&mut *(*slot).keep.get()));
            } else {
                *(*slot).drop_keep.get() = true;
            }
        }
    }
}

/// Has every task slot of `session` give up what its mappings keep (its
/// [`SgMapping::Keep`]: a reference on a device): at once where the slot
/// has no mapping, at its unmapping otherwise. So that a device can go
/// while a session that used it lives on: a connection that fails while
/// bound is stopped by scsi_transport_iscsi's cleanup work, iscsid or not.
///
/// # Safety
///
/// `session` must be a live session made by `create_session::<T>` (its
/// task slots initialised), and its `frwd_lock` and `back_lock` free for this
/// thread to take with bottom halves off: not held by it, as they are
/// around `init_task`, `xmit_task` and `cleanup_task`, and not in a hard
/// interrupt (`stop_conn_callback`, in process context, is the caller).
pub(super) unsafe fn release_keeps<T: TransportOps>(session: *mut bindings::iscsi_session) {
    // SAFETY: The session is live (function contract).
    unsafe { bindings::riser_iscsi_session_lock(session) };
    // SAFETY: As above: its `cmds` holds `cmds_max` tasks, each with an
    // initialised `TaskSlot<T>` in its `dd_data`; both locks are held.
    unsafe {
        for i in 0..(*session).cmds_max.unsigned_abs() {
            let task = *(*session).cmds.add(usize::from_safe_cast(i));
            TaskSlot::<T>::release_keep((*task).dd_data.cast::<TaskSlot<T>>());
        }
    }
    // SAFETY: Taken just above.
    unsafe { bindings::riser_iscsi_session_unlock(session) };
}

impl SlotRefs {
    /// Puts the reference a [`TaskRef`] handed over (process context, from
    /// the system workqueue).
    ///
    /// # Safety
    ///
    /// Called by the workqueue with the `put_work` of a [`SlotRefs`].
    unsafe extern "C" fn put_work_fn(w: *mut bindings::work_struct) {
        // SAFETY: `w` is the `put_work` field of a slot (`Opaque` is
        // transparent), which stays until its count is zero.
        let refs = unsafe {
            &*kernel::container_of!(w.cast::<Opaque<bindings::work_struct>>(), Self, put_work)
        };
        // SAFETY: The work owns one reference of the task, still counted
        // (type invariant), so its connection and session are alive; in
        // process context `iscsi_put_task` may take the back_lock.
        unsafe { bindings::iscsi_put_task(refs.task) };
        // The last access to the slot: the teardown may go on from here.
        refs.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The direction of a SCSI command's data. Numbered as the DMA API's
/// `enum dma_data_direction` numbers the command's `sc_data_direction`,
/// so that reading it costs a bound and no table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Both ways: not supported by iSER initiators.
    // CAST: small C enum values.
    Bidi = bindings::dma_data_direction::DMA_BIDIRECTIONAL.0 as isize,
    /// The initiator sends data (WRITE).
    // CAST: as above.
    Write = bindings::dma_data_direction::DMA_TO_DEVICE.0 as isize,
    /// The target sends data (READ).
    // CAST: as above.
    Read = bindings::dma_data_direction::DMA_FROM_DEVICE.0 as isize,
    /// No data.
    // CAST: as above.
    None = bindings::dma_data_direction::DMA_NONE.0 as isize,
}

/// A libiscsi task, borrowed during a transport callback: what any of them
/// may read. The one `xmit_task` gets is an [`XmitTask`], which adds what
/// only a task being sent may do.
///
/// Neither `Send` nor `Sync` (it holds a raw pointer): it stays on the
/// callback's thread.
///
/// # Invariants
///
/// `ptr` is a task of a session of transport `T`, whose `dd_data` holds an
/// initialised [`TaskSlot`], and it holds a reference (`refcount`) for
/// `'a`: libiscsi's own during `init_task`, the layer's during `xmit_task`
/// (taken in `xmit_task_callback`, because a response on another CPU may
/// complete the task while it is being sent), none needed during the
/// layer's `cleanup_task`, which libiscsi calls once the last reference is
/// gone and before the task goes back to the pool. So the task, its `sc`
/// and `sc`'s scatterlist are valid for `'a`. One `Task` is usable per
/// callback (a second, [`XmitTask::detached`]'s, only while the first is
/// mutably borrowed), and libiscsi runs the callbacks of one task one at a time
/// (`init_task` and `xmit_task` under the session's `frwd_lock`;
/// `cleanup_task`, from `iscsi_free_task`, under its `back_lock`, only once
/// no reference, so no `xmit_task`, is left): the slot's `sg` and `keep`
/// are reached by no one else while a `Task` borrows them (but
/// [`release_keeps`], which takes both locks). The
/// task's fields are read through the raw pointer, never through a
/// reference to the whole `iscsi_task`, which libiscsi changes under us.
pub(crate) struct Task<'a, T: TransportOps> {
    ptr: NonNull<bindings::iscsi_task>,
    _p: PhantomData<(&'a (), T)>,
}

/// The task `xmit_task` sends: a [`Task`] (which it dereferences to) that
/// may also map the command's data, read a management PDU's data segment
/// and step through the unsolicited Data-Out sequence. `init_task` gets a
/// plain `&Task`, and no other callback of the transport gets a task, so
/// none of that is reachable where libiscsi's data buffer and
/// `unsol_r2t` are not the sender's.
///
/// # Invariants
///
/// `task` satisfies [`Task`]'s invariant, and libiscsi is transmitting
/// the task for `'a`, under the session's `frwd_lock` (the layer's hosts
/// have no transmit workqueue, `iscsi_host_alloc(.., false)` in
/// `kernel_ext/scsi.rs`, so libiscsi calls `xmit_task` from
/// `iscsi_queuecommand` and `iscsi_send_mgmt_task` with the lock held;
/// `iscsi_xmit_task`, which drops it around the call, runs only from that
/// workqueue): its `data` (the
/// connection's data buffer for a login or text PDU) holds `data_count`
/// bytes that nothing rewrites meanwhile, its `unsol_r2t` is changed
/// by no one else (libiscsi prepares unsolicited Data-Outs only in the
/// transmit path, which that lock serialises), and its header (`hdr`,
/// which libiscsi's prep wrote before it transmits) is not written.
pub(crate) struct XmitTask<'a, T: TransportOps> {
    task: Task<'a, T>,
    /// [`XmitTask::prefixed_bhs`] wrote the slot's room (once per
    /// `XmitTask`: a slice it returned may still be borrowed).
    prefixed: Cell<bool>,
}

/// An unsolicited Data-Out PDU to send: its BHS and the part of the data it
/// carries.
pub(crate) struct DataOut {
    /// The BHS libiscsi built.
    pub(crate) bhs: [u8; BHS_LEN],
    /// Offset of the data in the command's buffer.
    pub(crate) offset: u32,
    /// Length of the data.
    pub(crate) len: u32,
}

impl<'a, T: TransportOps> Task<'a, T> {
    /// # Safety
    ///
    /// `ptr` must satisfy the type invariant for `'a`.
    pub(super) unsafe fn from_raw(ptr: *mut bindings::iscsi_task) -> Option<Self> {
        Some(Self {
            ptr: NonNull::new(ptr)?,
            _p: PhantomData,
        })
    }

    fn raw(&self) -> *mut bindings::iscsi_task {
        self.ptr.as_ptr()
    }

    fn slot(&self) -> *mut TaskSlot<T> {
        // SAFETY: The task is live (type invariant).
        unsafe { (*self.raw()).dd_data.cast::<TaskSlot<T>>() }
    }

    fn sc(&self) -> *mut bindings::scsi_cmnd {
        // SAFETY: The task is live (type invariant).
        unsafe { (*self.raw()).sc }
    }

    /// The task's slot index in the session's pool (the ITT's low bits).
    pub(crate) fn index(&self) -> u32 {
        // SAFETY: The task is live (type invariant).
        let itt = unsafe { (*self.raw()).itt };
        // CAST: libiscsi's index in the pool, never negative (one would
        // be far beyond any slot, refused where slots are looked up).
        itt as u32
    }

    /// The header libiscsi built, as sent on the wire.
    pub(crate) fn bhs(&self) -> [u8; BHS_LEN] {
        // SAFETY: `hdr` points to the slot's `iscsi_hdr` (48 bytes), which
        // libiscsi filled before calling the transport.
        unsafe { core::ptr::read((*self.raw()).hdr.cast::<[u8; BHS_LEN]>()) }
    }

    /// The ITT of the header libiscsi built, as sent (index and session
    /// age).
    pub(crate) fn hdr_itt(&self) -> u32 {
        // SAFETY: `hdr` is valid (above); `itt` is big-endian on the wire.
        u32::from_be(unsafe { (*(*self.raw()).hdr).itt })
    }

    /// The LUN field of the header libiscsi built, as sent.
    pub(crate) fn hdr_lun(&self) -> [u8; 8] {
        // SAFETY: `hdr` is valid (above).
        unsafe { (*(*self.raw()).hdr).lun.scsi_lun }
    }

    /// Whether the PDU expects no response (ITT reserved): the transport
    /// releases such a task once its send completed.
    pub(crate) fn reserved_itt(&self) -> bool {
        // SAFETY: `hdr` is valid (above).
        unsafe { (*(*self.raw()).hdr).itt == RESERVED_ITT }
    }

    /// A SCSI command's data direction and length (one look at the
    /// command); `None` for a management PDU.
    #[inline(always)]
    pub(crate) fn scsi_command(&self) -> Option<(Direction, u32)> {
        let sc = self.sc();
        if sc.is_null() {
            return None;
        }
        // SAFETY: A SCSI task's `sc` is live while the task is. (The
        // length is `scsi_bufflen`, a static inline of scsi_cmnd.h, read
        // in place.)
        let (dir, len) = unsafe { (direction_of(sc), (*sc).sdb.length) };
        Some((dir, len))
    }

    /// The SCSI data direction.
    fn direction(&self) -> Direction {
        let sc = self.sc();
        if sc.is_null() {
            return Direction::None;
        }
        // SAFETY: A SCSI task's `sc` is live while the task is.
        unsafe { direction_of(sc) }
    }

    /// Bytes of immediate data libiscsi put in the command PDU.
    pub(crate) fn imm_count(&self) -> u32 {
        // SAFETY: The task is live (type invariant).
        unsafe { (*self.raw()).imm_count }
    }

    /// Length of the unsolicited Data-Out data (after the immediate data).
    pub(crate) fn unsol_len(&self) -> u32 {
        // SAFETY: The task is live (type invariant).
        unsafe { (*self.raw()).unsol_r2t.data_length }
    }

    /// The most data one PDU to the target carries (MaxXmitDataSegmentLength).
    pub(crate) fn max_xmit_dlength(&self) -> u32 {
        // SAFETY: A task being sent has a live connection.
        unsafe { (*(*self.raw()).conn).max_xmit_dlength }
    }

    /// The slot's mapping cell and keep, as unique references.
    fn sg_keep_mut(
        &mut self,
    ) -> (
        &mut Option<T::DataMap>,
        &mut <T::DataMap as SgMapping>::Keep,
    ) {
        let slot = self.slot();
        // SAFETY: `dd_data` holds this task's initialised slot; nothing but
        // this `Task` reaches its `sg` and `keep` now (type invariant, and
        // `TaskSlot`'s: `release_keeps` waits for the lock libiscsi holds
        // around this callback), and `&mut self` excludes every other
        // borrow made through it. Two fields: the borrows are disjoint.
        unsafe { (&mut *(*slot).sg.get(), &mut *(*slot).keep.get()) }
    }

    /// The data mapping made by [`XmitTask::map_data`], if any. The borrow
    /// of the task keeps it: `map_data` (by `&mut`) cannot replace it
    /// meanwhile.
    pub(crate) fn mapping(&self) -> Option<&T::DataMap> {
        // SAFETY: As in `sg_mut`; shared with other `&self` borrows only,
        // as changes go through `&mut self`.
        unsafe { (*(*self.slot()).sg.get()).as_ref() }
    }

    pub(super) fn unmap_data(&mut self) {
        let slot = self.slot();
        let (sg, keep) = self.sg_keep_mut();
        // Dropped where it is (no move of the mapping out first).
        *sg = None;
        // SAFETY: As in `sg_keep_mut`: `drop_keep` is reached by no one else
        // during the callback.
        let drop_keep = unsafe { &mut *(*slot).drop_keep.get() };
        if *drop_keep {
            // A connection stopped while the slot was mapped: what the
            // mapping kept goes with it.
            *drop_keep = false;
            drop(core::mem::take(keep));
        }
    }

    /// Takes a reference on the task: libiscsi frees it (`cleanup_task`,
    /// then the SCSI command goes back to the midlayer) only once every
    /// reference is dropped. `None` if the task is already being freed.
    pub(crate) fn get_ref(&self) -> Option<TaskRef> {
        // SAFETY: The slot is initialised (type invariant); its count is
        // atomic.
        let refs = unsafe { &(*self.slot()).head.refs };
        // Counted first: the layer's teardown looks at the count.
        refs.count.fetch_add(1, Ordering::AcqRel);
        // SAFETY: The task is live (type invariant).
        if !unsafe { bindings::iscsi_get_task(self.ptr.as_ptr()) } {
            refs.count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        // INVARIANT: one reference taken and counted just above.
        Some(TaskRef {
            task: self.ptr,
            slot: NonNull::from(refs),
        })
    }
}

/// The data direction of SCSI command `sc`.
///
/// # Safety
///
/// `sc` is a live SCSI command.
#[inline(always)]
unsafe fn direction_of(sc: *mut bindings::scsi_cmnd) -> Direction {
    // SAFETY: `sc` is live (function contract).
    let d = unsafe { (*sc).sc_data_direction };
    if d == bindings::dma_data_direction::DMA_FROM_DEVICE {
        Direction::Read
    } else if d == bindings::dma_data_direction::DMA_TO_DEVICE {
        Direction::Write
    } else if d == bindings::dma_data_direction::DMA_BIDIRECTIONAL {
        Direction::Bidi
    } else {
        Direction::None
    }
}

impl<'a, T: TransportOps> XmitTask<'a, T> {
    /// A reference on the task for the rest of the layer's `xmit_task`
    /// callback, which `'a` spans (see [`CallRef`]). `None` if the task is
    /// already being freed.
    pub(super) fn call_ref(&self) -> Option<CallRef<'a>> {
        // SAFETY: The task is live (type invariant).
        if !unsafe { bindings::iscsi_get_task(self.raw()) } {
            return None;
        }
        // SAFETY: The slot is initialised (type invariant).
        let refs = unsafe { &(*self.slot()).head.refs };
        // INVARIANT: one reference taken just above; `'a` is the
        // callback's.
        Some(CallRef {
            task: self.task.ptr,
            slot: NonNull::from(refs),
            _call: PhantomData,
        })
    }

    /// # Safety
    ///
    /// `ptr` must satisfy the type invariant for `'a`: called from
    /// `xmit_task_callback` only, once the layer's reference is taken.
    pub(super) unsafe fn from_raw(ptr: *mut bindings::iscsi_task) -> Option<Self> {
        // SAFETY: `Task`'s invariant is part of this type's (function
        // contract).
        let task = unsafe { Task::from_raw(ptr) }?;
        Some(Self {
            task,
            prefixed: Cell::new(false),
        })
    }

    /// Runs `f` with a second `XmitTask` of the task, for a caller that
    /// hands the task to a function it does not inline: a reference to
    /// this value given out of line would keep it in memory on every path
    /// of the caller, the common ones too. The copy is reachable only
    /// inside `f`, while this value is mutably borrowed (so no slice
    /// [`XmitTask::prefixed_bhs`] returned from it is alive): one of the
    /// two is usable at a time, and what the copy did to the slot's room
    /// is carried back.
    #[inline(always)]
    pub(crate) fn detached<R>(&mut self, f: impl FnOnce(&mut XmitTask<'a, T>) -> R) -> R {
        let mut copy = XmitTask {
            // INVARIANT: the same task, for the same `'a`.
            task: Task {
                ptr: self.task.ptr,
                _p: PhantomData,
            },
            prefixed: Cell::new(self.prefixed.get()),
        };
        let r = f(&mut copy);
        self.prefixed.set(copy.prefixed.get());
        r
    }

    /// The sole use of the task's slot (its index in its session, the
    /// session its domain: [`Conn::slot_domain`]) for the transmission.
    ///
    /// # Safety
    ///
    /// Called once per `XmitTask`, by the layer's `xmit_task` callback.
    #[inline(always)]
    pub(super) unsafe fn slot_token(&self) -> SlotToken<'a> {
        // SAFETY: The task is live, on a bound connection of a live
        // session (type invariant).
        let session = unsafe { (*(*self.task.raw()).conn).session };
        // SAFETY: Tokens of a task's slot are made only here, once per
        // `XmitTask` (function contract). libiscsi transmits a task on one
        // CPU at a time, under the session's `frwd_lock` (type invariant),
        // and an `XmitTask` lives only for its transmission (`'a`): two of
        // one task never overlap, and the lock, held across each, orders
        // the end of one (and of its token) before the start of the next.
        unsafe { SlotToken::new(SlotDomain::of(session), self.task.index()) }
    }

    /// A management PDU's data segment.
    pub(crate) fn mgmt_data(&self) -> &[u8] {
        let p = self.task.raw();
        // SAFETY: The task is live (type invariant).
        let (data, count) = unsafe { ((*p).data, (*p).data_count) };
        if data.is_null() || count == 0 {
            return &[];
        }
        // SAFETY: libiscsi's `data` holds `data_count` bytes that nothing
        // rewrites while the task is being sent (type invariant), which
        // outlasts the borrow of `self`.
        unsafe { core::slice::from_raw_parts(data.cast::<u8>(), usize::from_safe_cast(count)) }
    }

    /// Maps the command's data on `dev`, in place of any earlier mapping;
    /// the mapping lasts until cleanup. [`Task::mapping`] then names it.
    pub(crate) fn map_data(&mut self, dev: &<T::DataMap as SgMapping>::Device) -> Result {
        let dir = match self.direction() {
            Direction::Read => DataDirection::FromDevice,
            Direction::Write => DataDirection::ToDevice,
            _ => return Err(EINVAL),
        };
        let sc = self.task.sc();
        let (sg, keep) = self.task.sg_keep_mut();
        drop(sg.take());
        // The command's scatterlist stays valid until the task is freed,
        // whose `cleanup_task` drops the mapping first (`unmap_data`); no
        // completion can come before that, as a reference is held.
        // SAFETY: So `sgl` is valid and unchanged while the mapping lives;
        // `sc` is live, as a task with a data direction has one
        // (`direction`). (`scsi_sglist` and `scsi_sg_count`, static
        // inlines of scsi_cmnd.h, read in place: a helper would be a call
        // of its own on a gcc-built kernel.)
        // `keep` is the slot's, no mapping made with it is alive (`sg`
        // empty just above), and it is neither dropped nor replaced while
        // `sg` holds the new one (type invariant of `TaskSlot`).
        let m =
            unsafe { T::DataMap::map(dev, keep, (*sc).sdb.table.sgl, (*sc).sdb.table.nents, dir)? };
        // SAFETY: `sg` is a valid, unique reference, emptied above: the
        // write drops nothing (an assignment would test the old value
        // again, which the call made the compiler forget).
        unsafe { core::ptr::write(sg, Some(m)) };
        Ok(())
    }

    /// The BHS libiscsi built, with `prefix` (a transport's own header, at
    /// most [`HDR_ROOM`] bytes) written just before it in the task slot:
    /// the two as one header, where they stay, for a SEND whose provider
    /// copies it while posting. Once per transmission (`EBUSY` after);
    /// `EINVAL` if `prefix` is too long or the task's header is not its
    /// slot's.
    pub(crate) fn prefixed_bhs(&self, prefix: &[u8]) -> Result<&[u8]> {
        let n = prefix.len();
        if n > HDR_ROOM {
            return Err(EINVAL);
        }
        if self.prefixed.replace(true) {
            return Err(EBUSY);
        }
        // The slot's head as bytes, straight from the task's `dd_data` (no
        // reference to a field: the slice below spans `room` and `hdr`, so
        // its pointer must carry the whole head's provenance).
        let head = self.task.slot().cast::<u8>();
        // SAFETY: `hdr` is inside the slot's head (`SlotHead` is at the
        // slot's start, `repr(C)`).
        let hdr = unsafe { head.add(core::mem::offset_of!(SlotHead, hdr)) };
        // SAFETY: The task is live (type invariant).
        if unsafe { (*self.task.raw()).hdr }.cast::<u8>() != hdr {
            return Err(EINVAL);
        }
        // SAFETY: `room` is `HDR_ROOM` bytes right before `hdr` (checked at
        // compile time above), so `at` and the `n + BHS_LEN` bytes from it
        // are inside the slot's head.
        let at = unsafe { hdr.sub(n) };
        // SAFETY: `room` is written only here, once per `XmitTask` (just
        // checked; `XmitTask` is not `Sync`, and libiscsi transmits a task
        // on one CPU at a time, so no other `XmitTask` of the task is
        // usable: [`XmitTask::detached`]'s copy only while this one is
        // mutably borrowed): no slice of it is borrowed. `prefix` is other memory.
        unsafe { core::ptr::copy_nonoverlapping(prefix.as_ptr(), at, n) };
        // SAFETY: The bytes are initialised (`room` and `hdr` are zeroed
        // at init) and, for the borrow of `self`, written by no one: the
        // room only by this call, the BHS by libiscsi only before it
        // transmits the task (type invariant).
        Ok(unsafe { core::slice::from_raw_parts(at, n + BHS_LEN) })
    }

    /// The next unsolicited Data-Out PDU, if unsolicited data is left.
    pub(crate) fn next_data_out(&self) -> Option<DataOut> {
        let p = self.task.raw();
        // SAFETY: The task is live and being sent, and no one else changes
        // its `unsol_r2t` meanwhile (type invariant), as
        // `iscsi_prep_data_out_pdu` needs. `XmitTask` is not `Sync`: this
        // thread alone steps the sequence.
        unsafe {
            if !bindings::riser_iscsi_task_has_unsol_data(p) {
                return None;
            }
            let mut hdr = bindings::iscsi_data::default();
            let r2t = &raw mut (*p).unsol_r2t;
            bindings::iscsi_prep_data_out_pdu(p, r2t, &mut hdr);
            Some(DataOut {
                bhs: core::ptr::read((&raw const hdr).cast::<[u8; BHS_LEN]>()),
                offset: (*r2t).data_offset + (*r2t).sent.unsigned_abs(),
                len: (*r2t).data_count.unsigned_abs(),
            })
        }
    }

    /// The Data-Out from [`XmitTask::next_data_out`] was posted.
    pub(crate) fn data_out_sent(&self, d: &DataOut) {
        // SAFETY: As in `next_data_out`.
        unsafe { (*self.task.raw()).unsol_r2t.sent += c_int::try_from(d.len).unwrap_or(0) };
    }

    /// The Data-Out from [`XmitTask::next_data_out`] could not be posted;
    /// it will be prepared again.
    pub(crate) fn data_out_failed(&self) {
        // SAFETY: As in `next_data_out`.
        unsafe { (*self.task.raw()).unsol_r2t.datasn -= 1 };
    }
}

impl<'a, T: TransportOps> core::ops::Deref for XmitTask<'a, T> {
    type Target = Task<'a, T>;

    fn deref(&self) -> &Task<'a, T> {
        &self.task
    }
}

/// One reference on a libiscsi task, released when dropped, which may free
/// the task and complete its SCSI command.
///
/// The last put takes the session's `back_lock` (with bottom halves off).
/// The transport's code never runs under that lock: libiscsi holds it only
/// around its own work and the layer's `cleanup_task`, which calls no
/// transport code. `init_task` and `xmit_task` run under `frwd_lock`, which
/// libiscsi itself takes before `back_lock`, so a drop there is in
/// libiscsi's own lock order. A reference that is not the last is put
/// without a lock; where bottom halves cannot be turned on again (a hard
/// interrupt, interrupts off) the last is handed to a workqueue.
///
/// # Invariants
///
/// Owns one reference of the task's refcount, counted in `slot`, the
/// [`SlotRefs`] of the task's [`TaskSlot`]; the layer keeps the task's
/// connection and session (and so the slot) alive while the count is not
/// zero.
pub(crate) struct TaskRef {
    task: NonNull<bindings::iscsi_task>,
    slot: NonNull<SlotRefs>,
}

// SAFETY: The reference may be dropped on any thread and in any context:
// the count is atomic, and the drop takes the session's `back_lock` only
// where that is allowed (see the type's documentation), deferring the last
// put elsewhere.
unsafe impl Send for TaskRef {}

impl Drop for TaskRef {
    fn drop(&mut self) {
        let task = self.task.as_ptr();
        // SAFETY: The slot outlives every counted reference (type
        // invariant).
        let slot = unsafe { self.slot.as_ref() };
        // SAFETY: This value owns one reference (type invariant): a put
        // that is not the last takes no lock.
        let put = unsafe { bindings::riser_iscsi_put_task_not_last(task) };
        if !put {
            // The task's last reference, as far as this value knows (a
            // `get_ref` may still race it): its put may free the task, which
            // libiscsi does under the back_lock.
            if context::bh_lock_allowed() {
                // SAFETY: This value owns the reference (type invariant);
                // the task's connection and session are alive while it is
                // counted, and here the back_lock may be taken.
                unsafe { bindings::iscsi_put_task(task) };
            } else {
                // SAFETY: The work item is initialised (invariant of
                // `SlotRefs`) and not queued: a queued work holds a
                // reference, and this one was the task's only one. Queuing
                // is allowed in any context. The work puts the reference
                // and uncounts it after; the slot stays while it is
                // counted.
                unsafe {
                    bindings::queue_work_on(
                        // CAST: WORK_CPU_UNBOUND is a small enum value.
                        bindings::wq_misc_consts_WORK_CPU_UNBOUND as c_int,
                        bindings::system_wq,
                        slot.put_work.get(),
                    )
                };
                return;
            }
        }
        // The count is dropped last, after the put.
        slot.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One reference on a libiscsi task held by the layer for the length of
/// one of its callbacks (`'a`), as [`TaskRef`] but not counted in the
/// slot: the count is what the layer's teardown waits for, and a callback
/// runs on a live connection of a live session, which libiscsi keeps for
/// it. Its drop is usually not the task's last reference; when it is,
/// it becomes a counted [`TaskRef`] and goes as one does.
///
/// # Invariants
///
/// Owns one reference of the task's refcount; `slot` is the [`SlotRefs`]
/// of the task's [`TaskSlot`]; the connection and session of the task live
/// for `'a`.
pub(super) struct CallRef<'a> {
    task: NonNull<bindings::iscsi_task>,
    slot: NonNull<SlotRefs>,
    _call: PhantomData<&'a ()>,
}

impl Drop for CallRef<'_> {
    fn drop(&mut self) {
        // SAFETY: This value owns one reference (type invariant): a put
        // that is not the last takes no lock.
        if unsafe { bindings::riser_iscsi_put_task_not_last(self.task.as_ptr()) } {
            return;
        }
        // SAFETY: The slot lives as long as the session, which lives for
        // `'a` (type invariant).
        let refs = unsafe { self.slot.as_ref() };
        // Counted before the `TaskRef` owns it, as `get_ref` counts.
        refs.count.fetch_add(1, Ordering::AcqRel);
        // INVARIANT: the reference this value owned, counted just above.
        drop(TaskRef {
            task: self.task,
            slot: self.slot,
        });
    }
}

/// A place for at most one [`TaskRef`], which any CPU may fill or empty
/// without a lock: the reference a command holds while something of it
/// (a SEND, a key given to the target) is still pending, put in by the
/// sender and taken out by whichever completion ends the command. It
/// behaves as a `SpinLock<Option<TaskRef>>` taken only to swap.
///
/// # Invariants
///
/// `slot` is null, or the [`SlotRefs`] of a task whose one counted
/// reference this value owns (a [`TaskRef`] given to [`TaskHold::put`] and
/// not taken out since): the slot and the task stay alive meanwhile.
pub(crate) struct TaskHold {
    slot: AtomicPtr<SlotRefs>,
}

// `Send` and `Sync` as its atomic pointer: right, as the value owns at
// most one `TaskRef`, which is `Send`, and hands it out only by value,
// through an atomic swap (a lock around an `Option<TaskRef>` would be
// both as well).

impl TaskHold {
    /// An empty place.
    pub(crate) const fn new() -> Self {
        Self {
            slot: AtomicPtr::new(null_mut()),
        }
    }

    /// Keeps `r`; if a reference is kept already, gives `r` back.
    pub(crate) fn put(&self, r: TaskRef) -> core::result::Result<(), TaskRef> {
        let p = r.slot.as_ptr();
        match self
            .slot
            .compare_exchange(null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                // INVARIANT: the reference `r` owned is owned here now;
                // its drop must not run.
                core::mem::forget(r);
                Ok(())
            }
            Err(_) => Err(r),
        }
    }

    /// Whether no reference is kept (as the call saw it: another CPU may
    /// put or take one at any time).
    pub(crate) fn is_empty(&self) -> bool {
        self.slot.load(Ordering::Acquire).is_null()
    }

    /// The reference kept, if any, taken out.
    pub(crate) fn take(&self) -> Option<TaskRef> {
        let slot = NonNull::new(self.slot.swap(null_mut(), Ordering::AcqRel))?;
        // SAFETY: A non-null `slot` is that of a task whose counted
        // reference this value owned (type invariant), so the slot is
        // alive; the swap gave that reference to this call alone.
        let task = unsafe { slot.as_ref().task };
        // INVARIANT: the reference owned above, now owned by the result.
        Some(TaskRef {
            task: NonNull::new(task)?,
            slot,
        })
    }
}

impl Default for TaskHold {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TaskHold {
    fn drop(&mut self) {
        drop(self.take());
    }
}

/// A libiscsi connection, borrowed while bound to an endpoint.
///
/// # Invariants
///
/// `ptr` is a live, bound `iscsi_conn`.
pub(crate) struct Conn {
    ptr: NonNull<bindings::iscsi_conn>,
}

impl Conn {
    /// # Safety
    ///
    /// `ptr` must be a live, bound connection for the borrow's duration.
    pub(super) unsafe fn from_raw(ptr: *mut bindings::iscsi_conn) -> Option<Self> {
        Some(Self {
            ptr: NonNull::new(ptr)?,
        })
    }

    /// The domain of the session's task slots, which
    /// [`XmitTask::slot_token`]s name.
    pub(crate) fn slot_domain(&self) -> SlotDomain {
        // SAFETY: A bound connection has a live session.
        SlotDomain::of(unsafe { (*self.ptr.as_ptr()).session })
    }

    /// The session's task pool size (task indexes are below it).
    pub(crate) fn cmds_max(&self) -> u32 {
        // SAFETY: A bound connection has a live session.
        unsafe { (*(*self.ptr.as_ptr()).session).cmds_max.unsigned_abs() }
    }

    /// Hands a received PDU to libiscsi. `hdr` is its BHS, `data` its data
    /// segment (already bounded by the receive).
    ///
    /// libiscsi takes the session's `back_lock` here without turning bottom
    /// halves off (its receive path runs in softirq context), and for some
    /// PDUs (a NOP-In that asks for a NOP-Out, a rejected NOP-Out) its
    /// `frwd_lock` and the transport's `xmit_task`: the call turns bottom
    /// halves off around it, and `EDEADLK` refuses it where those locks
    /// cannot be taken (inside `init_task` or `xmit_task`, which run under
    /// `frwd_lock`, in a hard interrupt or with interrupts off).
    #[inline(never)]
    pub(crate) fn complete_pdu(&self, hdr: &[u8; BHS_LEN], data: &[u8]) -> Result {
        let bh = BhOff::if_may_lock().ok_or(EDEADLK)?;
        // SAFETY: Bottom halves are off, and this CPU is not inside a
        // callback that libiscsi runs under a session lock, in a hard
        // interrupt or with interrupts off (`bh`).
        let r = unsafe { self.complete_pdu_unchecked(hdr, data) };
        drop(bh);
        r
    }

    /// As [`Conn::complete_pdu`], in a softirq handler (`_softirq`), with
    /// nothing checked: bottom halves are off and interrupts on by the
    /// handler's nature, and no callback that libiscsi runs under a
    /// session lock is under way on this CPU (see the SAFETY comment).
    #[inline(always)]
    pub(crate) fn complete_pdu_in(
        &self,
        _softirq: &InSoftirq,
        hdr: &[u8; BHS_LEN],
        data: &[u8],
    ) -> Result {
        // SAFETY: Bottom halves are off, interrupts on, not in a hard
        // interrupt or NMI (`_softirq`). No `LockedCallback` is live on
        // this CPU: one made before this handler kept bottom halves off
        // for its life (`enter`'s contract), so no softirq starts inside
        // it; one made within this handler's call chain (a NOP-Out sent
        // from the receive path) runs code given no `&InSoftirq` (same
        // contract), and this borrowed, non-`'static` token cannot reach it.
        unsafe { self.complete_pdu_unchecked(hdr, data) }
    }

    /// Hands a received PDU to libiscsi, the header in place if aligned.
    ///
    /// # Safety
    ///
    /// Bottom halves are off and interrupts on, outside a hard interrupt
    /// or NMI, and not inside a callback libiscsi runs under a session
    /// lock.
    #[inline(always)]
    unsafe fn complete_pdu_unchecked(&self, hdr: &[u8; BHS_LEN], data: &[u8]) -> Result {
        let mut copy = core::mem::MaybeUninit::<bindings::iscsi_hdr>::uninit();
        let h = if hdr.as_ptr().cast::<bindings::iscsi_hdr>().is_aligned() {
            hdr.as_ptr().cast::<bindings::iscsi_hdr>().cast_mut()
        } else {
            aligned_copy(hdr, &mut copy)
        };
        let len = c_int::try_from(data.len())?;
        // SAFETY: The connection is live (type invariant); `h` points to
        // an `iscsi_hdr` (`BHS_LEN` is its size), the caller's header,
        // aligned, or its copy, which libiscsi only reads
        // (`__iscsi_complete_pdu` and what it calls read the header and
        // keep none of it); libiscsi copies what it keeps of `data`,
        // which it only reads. The context is one where libiscsi's session
        // locks may be taken (function contract).
        let rc = unsafe {
            bindings::iscsi_complete_pdu(self.ptr.as_ptr(), h, data.as_ptr().cast_mut().cast(), len)
        };
        // CAST: the error codes are small positive numbers.
        if rc != 0 && rc != bindings::iscsi_err_ISCSI_ERR_NO_SCSI_CMD as c_int {
            return Err(EPROTO);
        }
        Ok(())
    }

    /// A reference on the SCSI command libiscsi has outstanding under ITT
    /// `itt` (the BHS's four bytes, as they are in memory), looked up under
    /// the session's `back_lock`; `None` if libiscsi has no such command,
    /// or where that lock cannot be taken (as [`Conn::complete_pdu`]).
    pub(crate) fn task_ref(&self, itt: u32) -> Option<TaskRef> {
        let bh = BhOff::if_may_lock()?;
        let conn = self.ptr.as_ptr();
        // SAFETY: The connection is live (type invariant); bottom halves
        // are off and this CPU holds no session lock (`bh`), so the
        // back_lock may be taken, as libiscsi's receive path does, and
        // `iscsi_itt_to_ctask` runs under it, as it must.
        let task = unsafe {
            bindings::riser_iscsi_back_lock(conn);
            let t = bindings::iscsi_itt_to_ctask(conn, itt);
            let t = if !t.is_null() && bindings::iscsi_get_task(t) {
                t
            } else {
                core::ptr::null_mut()
            };
            bindings::riser_iscsi_back_unlock(conn);
            t
        };
        drop(bh);
        let task = NonNull::new(task)?;
        // SAFETY: The tasks of a session this layer made hold a `TaskSlot`
        // in their `dd_data`, initialised with the session, whose
        // `SlotHead` is at its start (`repr(C)`); the reference just taken
        // keeps the task, and so the slot, alive.
        let refs = unsafe { &(*(*task.as_ptr()).dd_data.cast::<SlotHead>()).refs };
        // Counted inside the caller's borrow of the bound connection: the
        // layer's teardown unbinds it and waits for an RCU grace period
        // before it looks at the counts.
        refs.count.fetch_add(1, Ordering::AcqRel);
        // INVARIANT: one reference taken and counted just above.
        Some(TaskRef {
            task,
            slot: NonNull::from(refs),
        })
    }

    /// Fails the connection: libiscsi starts recovery through iscsid.
    /// Only where [`context::may_lock`] holds (`iscsi_conn_failure` takes
    /// the session's `frwd_lock`): private to [`ConnSlot::fail`], which
    /// checks, and to its work.
    ///
    /// A session that was logged in is also blocked here, as the offload
    /// transports do when they lose a connection (qla4xxx, be2iscsi): its
    /// SCSI devices stop taking commands and the replacement timer starts
    /// now. Left to libiscsi, the block comes only once scsi_transport_iscsi's
    /// cleanup has run the transport's `ep_disconnect`, so the time a
    /// transport takes to tear the connection down would add to every
    /// failover. Blocking twice is harmless: a queued block or a pending
    /// recovery timer is not queued again.
    fn failure(&self) {
        let conn = self.ptr.as_ptr();
        // SAFETY: The connection is live (type invariant), and so is its
        // session. `state` is written under the session's `frwd_lock`,
        // which is not held here: a volatile read of an aligned `int` sees
        // one value or the other, and either is handled below.
        let logged_in = unsafe { (&raw const (*(*conn).session).state).read_volatile() }
            // CAST: a small enum value, as the C int field holds it.
            == bindings::ISCSI_STATE_LOGGED_IN as c_int;
        // SAFETY: The connection is live (type invariant); the callers take
        // no session lock and run where one may be taken.
        unsafe { bindings::iscsi_conn_failure(conn, bindings::iscsi_err_ISCSI_ERR_CONN_FAILED) };
        if logged_in {
            // SAFETY: The connection is live and bound (type invariant), so
            // its session and that session's class session are too: a
            // session is destroyed only after its connections are unbound.
            // `iscsi_block_session` only queues the session's block work,
            // which is allowed from any context.
            unsafe { bindings::iscsi_block_session((*(*conn).session).cls_session) };
        }
    }
}

/// `hdr` copied into `copy`, aligned for an `iscsi_hdr` (a header
/// received at an address that is not: out of the common path).
#[cold]
fn aligned_copy(
    hdr: &[u8; BHS_LEN],
    copy: &mut core::mem::MaybeUninit<bindings::iscsi_hdr>,
) -> *mut bindings::iscsi_hdr {
    // SAFETY: `iscsi_hdr` is `BHS_LEN` bytes of plain data, any bit
    // pattern of which is valid; `copy` is writable for all of it.
    unsafe {
        core::ptr::copy_nonoverlapping(hdr.as_ptr(), copy.as_mut_ptr().cast::<u8>(), BHS_LEN)
    };
    copy.as_mut_ptr()
}

/// Where an endpoint finds the iSCSI connection bound to it, from any
/// context, at any time: set by the layer at bind, cleared before the
/// connection is stopped.
///
/// # Invariants
///
/// `conn` is null or a live, bound `iscsi_conn` that is not stopped: only
/// the layer sets it (at bind, to the connection it binds, recording which
/// slot it set), and before that connection is stopped or torn down it
/// clears the slot it recorded, then waits for an RCU grace period and
/// cancels `work` (in [`ConnSlot::clear`]); readers load it inside an RCU
/// read section. `work` is initialised in [`ConnSlot::new`] and queued only
/// inside such a section while `conn` is set, so it is not pending or
/// running after `clear` returned. The layer holds the endpoint, and so the
/// slot, from bind until after that `clear`.
#[pin_data]
pub(crate) struct ConnSlot {
    conn: AtomicPtr<bindings::iscsi_conn>,
    #[pin]
    work: Opaque<bindings::work_struct>,
}

// SAFETY: The pointer is atomic; the work item is only handed to the
// workqueue API, which synchronises it.
unsafe impl Send for ConnSlot {}
// SAFETY: As above.
unsafe impl Sync for ConnSlot {}

impl ConnSlot {
    /// An empty slot.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            conn: AtomicPtr::new(null_mut()),
            // SAFETY: `w` is valid for writes and pinned; a work item is
            // initialised in place once.
            work <- Opaque::ffi_init(|w: *mut bindings::work_struct| unsafe {
                bindings::init_work_with_key(
                    w,
                    Some(Self::fail_work),
                    false,
                    c"riser connection failure".as_char_ptr(),
                    kernel::static_lock_class!().as_ptr(),
                )
            }),
        })
    }

    pub(super) fn set(&self, c: *mut bindings::iscsi_conn) {
        self.conn.store(c, Ordering::Release);
    }

    /// Clears the slot if it holds `c` (a later bind through the same slot
    /// may have replaced it), and returns once no reader can see `c` and
    /// the failure work is neither queued nor running. Process context.
    pub(super) fn clear(&self, c: *mut bindings::iscsi_conn) {
        let _ = self
            .conn
            .compare_exchange(c, null_mut(), Ordering::AcqRel, Ordering::Acquire);
        rcu::synchronize_rcu();
        // SAFETY: `work` was initialised in `new` (type invariant); after
        // the grace period nothing queues it again.
        unsafe { bindings::cancel_work_sync(self.work.get()) };
    }

    /// Runs `f` with the bound connection, if any. `f` runs in an RCU read
    /// section and must not sleep.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Conn) -> R) -> Option<R> {
        let rcu = rcu::read_lock();
        self.with_in(RcuRead::of_guard(&rcu), f)
    }

    /// As [`ConnSlot::with`], inside the caller's RCU read section (`rcu`
    /// proves one is held for as long as the borrow), which saves a second,
    /// nested one.
    #[inline(always)]
    pub(crate) fn with_in<R>(&self, _rcu: &RcuRead, f: impl FnOnce(&Conn) -> R) -> Option<R> {
        let p = self.conn.load(Ordering::Acquire);
        // SAFETY: A non-null pointer loaded inside the read section (held
        // by the caller while `_rcu` is borrowed, so for all of `f`) is a
        // live, bound connection until the section ends (type invariant).
        let c = unsafe { Conn::from_raw(p) }?;
        Some(f(&c))
    }

    /// Fails the bound connection, if any: libiscsi starts recovery
    /// through iscsid, and a logged-in session is blocked (see
    /// `Conn::failure`). At once where libiscsi's session locks may be
    /// taken; otherwise from a workqueue, as [`ConnSlot::fail_later`]:
    /// inside `init_task` or `xmit_task`, which libiscsi calls with the
    /// session's `frwd_lock` held (that `iscsi_conn_failure` takes), in a
    /// hard interrupt or with interrupts off.
    pub(crate) fn fail(&self) {
        if context::may_lock() {
            self.with(|c| c.failure());
        } else {
            self.fail_later();
        }
    }

    /// Fails the bound connection, if any, from a workqueue, whatever the
    /// context.
    pub(crate) fn fail_later(&self) {
        let _rcu = rcu::read_lock();
        if self.conn.load(Ordering::Acquire).is_null() {
            return;
        }
        // `work` is initialised (type invariant) and the slot is set inside
        // this read section, so `clear` cancels the work before the slot can
        // go away. Queuing an already queued work item does nothing.
        // SAFETY: Hence `work` is valid until the queued work has run.
        unsafe {
            bindings::queue_work_on(
                bindings::wq_misc_consts_WORK_CPU_UNBOUND as c_int,
                bindings::system_wq,
                self.work.get(),
            )
        };
    }

    /// # Safety
    ///
    /// Called by the workqueue with the `work` of a [`ConnSlot`].
    unsafe extern "C" fn fail_work(w: *mut bindings::work_struct) {
        // SAFETY: `w` is the `work` field of a slot, which is alive while
        // its work runs (type invariant); `Opaque` is transparent.
        let slot = unsafe {
            &*kernel::container_of!(w.cast::<Opaque<bindings::work_struct>>(), Self, work)
        };
        slot.with(|c| c.failure());
    }
}
