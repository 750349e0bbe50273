// SPDX-License-Identifier: GPL-2.0

//! What the target can reach of each command, and when that ends: the
//! registration a command gives the target, its invalidation (by the
//! target with its response, or by riser), and the task reference that
//! holds the command until then (iser_memory.c's concern).
//!
//! Each task slot has a completion word (`proto::slot`): what the slot's
//! command still owes before it may complete (its response, its SEND's
//! completion, its Data-Outs' completions, the end of the key it gave the
//! target). The sender publishes it before the post; the response, the
//! send completions and the LOCAL_INV completion each clear their bit with
//! a compare-and-exchange, and whichever clears the last completes the
//! command: no lock on the command path. The rare PDUs (login, text,
//! NOP-Out, TMF, logout) keep their bookkeeping in [`Track`], under a lock.

use super::{
    failure::{
        self,
        FailResult,
        Failure, //
    },
    stats::Counters,
    tags::{
        SendTag,
        TagMap, //
    },
    Iser, //
};
use crate::{
    iscsi::{
        Task,
        TaskHold,
        TaskRef, //
        ITT_INDEX_MASK,
    },
    proto::{
        pdu::{
            Bhs,
            TargetOpcode, //
        },
        slot::{
            self,
            Action,
            RefOp,
            Step,
            Violation,
            Word, //
        },
        tmf::{
            self,
            Scope,
            TmfRequest, //
        },
    },
    rdma::{
        cm::CmHandler,
        conn::{
            CmdClaim,
            Connection,
            QpHandler,
            SendOp, //
        },
    },
};
use kernel::num::casts::FromSafeCast;
use kernel::sync::atomic::{
    Acquire,
    Atomic,
    Full,
    Relaxed,
    Release, //
};
use kernel::{
    alloc::{
        KBox,
        KVec, //
    },
    new_spinlock_irq,
    prelude::*,
    sync::{
        Arc,
        SpinLockIrq, //
    },
};

/// One task slot's command as the connection tracks it.
///
/// A post publishes the quiet word with a release store (after the LUN and
/// key it orders: see [`Quiet::publish`]); every other event moves it
/// with a fully ordered compare-and-exchange (a full barrier before and
/// after, as the kernel's value-returning atomics are), and the TMF path
/// sets its flag with a fully ordered exchange before it reads the words: a completion that clears a command's last pending bit,
/// then looks whether a TMF Response is held, and the TMF path, which holds
/// one, then looks at the words, cannot both miss the other (see
/// [`Cmds::events_done`]).
pub(crate) struct Slot {
    /// The completion word ([`Word`]).
    word: Atomic<u64>,
    /// The LUN of the slot's last command, as in its BHS (a TMF's scope
    /// names it): written by the sender before it publishes the word.
    lun: Atomic<u64>,
    /// The rkey the slot's last command gives the target, when its word
    /// says `KEY`: written by the sender before it publishes the word, so
    /// that a response's invalidation and riser's LOCAL_INV name that key
    /// and never the one the slot's MR held for the command before.
    rkey: Atomic<u32>,
    /// The command's one task reference while its word says `REF`.
    hold: TaskHold,
}

impl Slot {
    /// The command SEND of this slot completed (successfully) while its
    /// response is still to come, the common case: one
    /// compare-and-exchange clears `SEND` ([`slot::send_done_waits`]).
    /// Whether it did; if not, nothing changed, and
    /// [`Cmds::send_completed`] decides.
    #[inline(always)]
    pub(super) fn send_completed_untouched(&self) -> bool {
        let cur = self.word();
        cur.send_due()
            && slot::send_done_waits(cur)
                .is_some_and(|next| self.word.cmpxchg(cur.raw(), next.raw(), Full).is_ok())
    }

    pub(super) fn new() -> Self {
        Self {
            word: Atomic::new(Word::default().raw()),
            lun: Atomic::new(0),
            rkey: Atomic::new(0),
            hold: TaskHold::new(),
        }
    }

    /// The slot's word as it is now.
    pub(super) fn word(&self) -> Word {
        Word::from_raw(self.word.load(Acquire))
    }

    fn lun(&self) -> [u8; 8] {
        self.lun.load(Acquire).to_ne_bytes()
    }

    /// Applies the transition `f` to the word and publishes the result;
    /// recomputed from the word found if another CPU changed it meanwhile.
    fn apply(
        &self,
        f: impl Fn(Word) -> core::result::Result<Step, Violation>,
    ) -> core::result::Result<Step, Violation> {
        let mut cur = self.word.load(Acquire);
        loop {
            let s = f(Word::from_raw(cur))?;
            if s.word.raw() == cur {
                return Ok(s);
            }
            match self.word.cmpxchg(cur, s.word.raw(), Full) {
                Ok(_) => return Ok(s),
                // Read again with acquire: a failed compare-and-exchange
                // orders nothing, and a transition may read what was stored
                // before the word it sees (the command's key).
                Err(_) => cur = self.word.load(Acquire),
            }
        }
    }

    /// The connection is drained: the command, if any, is released, and
    /// its reference is returned to be dropped.
    pub(super) fn teardown(&self) -> Option<TaskRef> {
        let _ = self.apply(|w| Ok(slot::teardown(w)));
        // Whatever the word said: nothing of the command is reachable now.
        self.hold.take()
    }
}

/// The task slot an ITT names: libiscsi builds ITTs in host byte order
/// (get_itt()).
pub(super) fn slot_of(itt: u32) -> u32 {
    u32::from_ne_bytes(itt.to_be_bytes()) & ITT_INDEX_MASK
}

/// Whether a command in `scope` keeps a TMF Response back, of the slots'
/// `(word, LUN)`s: a SEND of it has not completed, or it ended and its key
/// is still valid.
pub(super) fn keeps_tmf(scope: Scope, mut slots: impl Iterator<Item = (Word, [u8; 8])>) -> bool {
    slots.any(|(w, lun)| {
        w.keeps_tmf_response() && w.itt().is_some_and(|itt| scope.covers(itt, &lun))
    })
}

/// The reference a signaled SEND of a control PDU holds on its task until
/// it completes.
pub(super) struct SendRef {
    pub(super) task: TaskRef,
    /// The number its post has on the tag
    /// ([`crate::rdma::conn::Connection::send_tag_posts`]): the completion
    /// that takes it must be that post's.
    pub(super) post: u32,
}

/// A TMF Response held back until the commands its TMF ended can no longer
/// be reached by the target: libiscsi hands them back to the midlayer as
/// soon as it sees the response.
pub(super) struct HeldRsp {
    pub(super) bhs: Bhs,
    pub(super) scope: Scope,
}

/// A connection's bookkeeping of the rare PDUs, under one lock (taken in
/// the control send path and the completion handlers). Task references
/// are never dropped under it: dropping one may free the task, which takes
/// libiscsi's locks.
pub(super) struct Track {
    /// By send tag: the reference a control PDU's signaled SEND holds on
    /// its task until it completes.
    pub(super) puts: KVec<Option<SendRef>>,
    /// The TMF request sent last, until its response arrives.
    pub(super) tmf: Option<TmfRequest>,
    pub(super) held: Option<HeldRsp>,
    /// The ITT of the Logout Request sent, if any: only its response ends
    /// the session.
    pub(super) logout_itt: Option<u32>,
}

impl Track {
    pub(super) fn new(send_tags: u32) -> Result<Self> {
        let mut puts = KVec::with_capacity(usize::from_safe_cast(send_tags), GFP_KERNEL)?;
        for _ in 0..send_tags {
            puts.push(None, GFP_KERNEL)?;
        }
        Ok(Self {
            puts,
            tmf: None,
            held: None,
            logout_itt: None,
        })
    }

    /// Whether it holds no task reference and no TMF Response.
    fn owes_nothing(&self) -> bool {
        self.held.is_none() && self.puts.iter().all(Option::is_none)
    }

    /// Takes back the reference of send tag `tag`, once its SEND completed
    /// (`post`: the completed post's number on the tag) or was not posted
    /// (`None`).
    pub(super) fn send_completed(&mut self, tag: u32, post: Option<u32>) -> Option<TaskRef> {
        let SendRef { task, post: want } = self
            .puts
            .get_mut(usize::from_safe_cast(tag))
            .and_then(Option::take)?;
        // A completion taking another post's reference would let that
        // task be freed while the device may still read its SEND.
        if let Some(p) = post {
            if p != want {
                Self::other_post(tag, p, want);
            }
        }
        Some(task)
    }

    #[cold]
    fn other_post(tag: u32, got: u32, want: u32) {
        pr_err!(
            "send tag {}: completion of post {} took the reference of post {}\n",
            tag,
            got,
            want
        );
        kernel::warn_on!(true);
    }

    /// Takes the next task reference held, from position `*at` on, and
    /// moves `*at` past it; `None` when none is left.
    pub(super) fn take_ref(&mut self, at: &mut usize) -> Option<TaskRef> {
        while let Some(p) = self.puts.get_mut(*at) {
            *at += 1;
            if let Some(p) = p.take() {
                return Some(p.task);
            }
        }
        None
    }
}

/// What one event of a command leaves to do once its word is published.
#[must_use]
pub(super) struct Done {
    /// The command's reference, when the event ended it: dropped after
    /// whatever the event hands on (the last one frees the task).
    pub(super) task: Option<TaskRef>,
    /// Why the connection fails, if it does.
    pub(super) failure: Option<Failure>,
}

/// A slot's word found quiet by the holder of the slot's claim
/// ([`Cmds::quiet`]), which it borrows: the word stays as found until that
/// claim posts on the slot, as no event but a post changes a quiet word
/// (`proto::slot`'s model checks it) and only the claim's holder posts.
pub(super) struct Quiet<'a> {
    slot: &'a Slot,
    idx: u32,
    word: Word,
}

impl<'a> Quiet<'a> {
    /// Publishes a command about to be posted on the slot (`p`, its LUN
    /// `lun`), which gives the target `rkey` if `p.key` says it gives one.
    /// With `p.hold` (the conservative variant of `proto::slot`, which the
    /// send path does not use: the response takes a reference when one is
    /// needed), the command's one reference is taken first.
    /// The command is `task`'s, whose slot token the claim holds. Returns the
    /// slot and the word published, for [`Cmds::posted`].
    #[inline(always)]
    pub(super) fn publish(
        self,
        task: &Task<'_, Iser>,
        lun: [u8; 8],
        p: &slot::Post,
        rkey: u32,
    ) -> Result<Published<'a>> {
        // The slot is the task's: the claim's token, which `self`
        // borrows, was made for the task being sent.
        let Self { slot: s, idx, word } = self;
        if p.hold {
            let r = task.get_ref().ok_or(EINVAL)?;
            if let Err(r) = s.hold.put(r) {
                // Outside every lock: libiscsi's own reference is held.
                drop(r);
                return Err(Cmds::slot_reused(idx));
            }
        }
        s.lun.store(u64::from_ne_bytes(lun), Release);
        // Before the word: a response that reads the word published (with
        // acquire) reads this key.
        s.rkey.store(rkey, Release);
        // Published with a plain store: the word is still the quiet one
        // found (type invariant). The release orders the LUN and key
        // before it; the provider's post, which makes the command visible
        // to the device, comes after it in program order and orders it
        // before the doorbell, as it does the work request's own stores.
        let step = slot::post(word, p);
        if let Ok(step) = &step {
            s.word.store(step.word.raw(), Release);
        }
        match step {
            Ok(step) => Ok(Published {
                slot: s,
                idx,
                word: step.word,
            }),
            Err(_) => {
                drop(s.hold.take());
                Err(Cmds::slot_reused(idx))
            }
        }
    }
}

/// A command's word as [`Quiet::publish`] published it, on its slot.
pub(super) struct Published<'a> {
    slot: &'a Slot,
    idx: u32,
    word: Word,
}

/// The commands of a connection as the target can reach them: each task
/// slot's completion word, the rare PDUs' bookkeeping, and the flag of a
/// TMF Response held back.
///
/// Each task slot's word is kept in the connection's command slot of the
/// same index ([`Slot`], the connection's `CmdData`): what its command
/// still owes before it may complete, and the reference that holds it
/// until then.
pub(super) struct Cmds {
    /// The rare PDUs' bookkeeping: control SENDs, the TMF and logout
    /// outstanding, a TMF Response held.
    track: Pin<KBox<SpinLockIrq<Track>>>,
    /// A TMF Response is held in `track` (read by every completion
    /// without the lock: see [`Cmds::events_done`]).
    tmf_held: Atomic<bool>,
    /// The target may invalidate the commands' keys (SEND_WITH_INV): riser
    /// asked for it (always_register), and the target's CM accept did not
    /// refuse it ([`Cmds::refuse_remote_inv`], before the connection is up).
    remote_inv: Atomic<bool>,
    /// The connection's send tags (a LOCAL_INV's is its MR's).
    tags: TagMap,
    counters: Arc<Counters>,
}

impl Cmds {
    /// The bookkeeping of the commands of a connection whose send tags
    /// `tags` numbers. With `remote_inv`, the target may invalidate the
    /// commands' keys with SEND_WITH_INV.
    pub(super) fn new(tags: TagMap, remote_inv: bool, counters: Arc<Counters>) -> Result<Self> {
        let track = Track::new(tags.tag(SendTag::DataOut(tags.dataouts)))?;
        Ok(Self {
            track: KBox::pin_init(new_spinlock_irq!(track, "riser_track"), GFP_KERNEL)?,
            tmf_held: Atomic::new(false),
            remote_inv: Atomic::new(remote_inv),
            tags,
            counters,
        })
    }

    /// The target's CM accept said it does not send with invalidate: a
    /// SEND_WITH_INV from it fails the connection, as ib_iser has it. Set
    /// when the connection is established, before the login: every
    /// receive completes after (its PDU answers one riser sent later).
    pub(super) fn refuse_remote_inv(&self) {
        self.remote_inv.store(false, Relaxed);
    }

    /// The rare PDUs' bookkeeping. No task reference may be dropped under
    /// its lock.
    pub(super) fn track(&self) -> &SpinLockIrq<Track> {
        &self.track
    }

    /// The command SEND of slot `idx` completed (successfully), if the
    /// slot's command waits for it (`None` if not: the slot's tag carried
    /// another PDU), where [`Slot::send_completed_untouched`] did not end
    /// it: [`slot::send_done`] decides (it agrees with that shortcut where
    /// the shortcut applies, as proto's tests check).
    pub(super) fn send_completed<H: CmHandler + QpHandler<CmdData = Slot>>(
        &self,
        conn: &Connection<H>,
        idx: u32,
    ) -> Option<Done> {
        if !conn.cmd_ref(idx)?.data().word().send_due() {
            return None;
        }
        Some(self.slot_event(conn, idx, slot::send_done))
    }

    /// Releases every command and drops every task reference held, once
    /// the connection's QP is destroyed (drained): no work request is
    /// outstanding and no completion is to come, so nothing of any command
    /// is reachable. Before that, a command released here could complete
    /// while the target can still reach its memory.
    pub(super) fn teardown<H: CmHandler + QpHandler<CmdData = Slot>>(&self, conn: &Connection<H>) {
        // Outside the lock (the last reference frees its task, which takes
        // libiscsi's locks), before the slow frees.
        for s in conn.cmd_data() {
            drop(s.teardown());
        }
        let mut at = 0;
        loop {
            let r = self.track.lock().take_ref(&mut at);
            match r {
                Some(r) => drop(r),
                None => break,
            }
        }
    }

    /// Whether no command is live on any slot (every word quiet) and riser
    /// holds no task reference (none in a slot, none for a control PDU's
    /// SEND, no TMF Response held).
    pub(super) fn owes_nothing<H: CmHandler + QpHandler<CmdData = Slot>>(
        &self,
        conn: &Connection<H>,
    ) -> bool {
        conn.cmd_data()
            .all(|s| s.word().quiet() && !s.word().holds_ref() && s.hold.is_empty())
            && self.track.lock().owes_nothing()
    }

    /// The completion words and LUNs of the slots.
    fn words<H: CmHandler + QpHandler<CmdData = Slot>>(
        conn: &Connection<H>,
    ) -> impl Iterator<Item = (Word, [u8; 8])> + '_ {
        conn.cmd_data().map(|s| (s.word(), s.lun()))
    }

    /// The word of the slot `claim` holds, if it may take a new command:
    /// quiet (its last command owes nothing). Asked before anything is
    /// mapped into the slot's MR: a remap while the last command's key is
    /// valid would hand that key the new command's pages.
    #[inline(always)]
    pub(super) fn quiet<'a, H: CmHandler + QpHandler<CmdData = Slot>>(
        &'a self,
        claim: &'a CmdClaim<'_, H>,
    ) -> Result<Quiet<'a>> {
        let idx = claim.index();
        let slot = claim.data();
        let word = slot.word();
        if !word.quiet() {
            return Err(Self::slot_reused(idx));
        }
        Ok(Quiet { slot, idx, word })
    }

    /// The post of the command published as `p` returned: `POSTING`
    /// clears. Most often nothing happened to the word meanwhile, and one
    /// compare-and-exchange from the published word makes the transition
    /// ([`slot::posted_untouched`]); else [`slot::posted`] is applied to
    /// the word found, and what waited for the post (a response that came
    /// in the window: its LOCAL_INV, or its completion) goes now.
    ///
    /// The untouched word's exchange is all the common path does: `Err`
    /// gives back the slot's index for [`Cmds::posted_late`], which the
    /// caller calls out of line (so that no [`Done`] is built on that path).
    #[inline(always)]
    pub(super) fn posted(&self, p: Published<'_>) -> core::result::Result<(), u32> {
        let next = slot::posted_untouched(p.word);
        if p.slot.word.cmpxchg(p.word.raw(), next.raw(), Full).is_ok() {
            return Ok(());
        }
        Err(p.idx)
    }

    /// [`Cmds::posted`] for a word an event touched in the window: the
    /// post's transition applied to the word found (slot `idx`'s).
    pub(super) fn posted_late<H: CmHandler + QpHandler<CmdData = Slot>>(
        &self,
        conn: &Connection<H>,
        idx: u32,
    ) -> Done {
        self.slot_event(conn, idx, slot::posted)
    }

    #[cold]
    fn slot_reused(idx: u32) -> Error {
        pr_err!(
            "task slot {} reused while the target may reach its last command\n",
            idx
        );
        EINVAL
    }

    /// Applies event `f` to slot `idx`'s word and does what the step says:
    /// the LOCAL_INV that is due is posted, and the reference of a command
    /// that ended is returned. A transition refused is riser's own bug (the
    /// target's are refused in [`Cmds::response_arrived`]): a warning, and
    /// the connection fails.
    #[inline]
    pub(super) fn slot_event<H: CmHandler + QpHandler<CmdData = Slot>>(
        &self,
        conn: &Connection<H>,
        idx: u32,
        f: impl Fn(Word) -> core::result::Result<Step, Violation>,
    ) -> Done {
        let Some(s) = conn.cmd_ref(idx).map(|c| c.data()) else {
            return Done {
                task: None,
                failure: Some(Self::own_violation(idx, Violation::Unexpected)),
            };
        };
        match s.apply(f) {
            Ok(step) => self.finish(conn, idx, s, step),
            Err(v) => Done {
                task: None,
                failure: Some(Self::own_violation(idx, v)),
            },
        }
    }

    /// Does what a published step says. Inlined: called by every
    /// completion, with a step that is mostly known at the call.
    #[inline]
    fn finish<H: CmHandler + QpHandler<CmdData = Slot>>(
        &self,
        conn: &Connection<H>,
        idx: u32,
        s: &Slot,
        step: Step,
    ) -> Done {
        let failure = match step.action {
            Action::Invalidate => self.invalidate(conn, idx).err(),
            Action::Wait | Action::Complete => None,
        };
        let task = match step.task_ref {
            RefOp::Keep => None,
            RefOp::Drop => s.hold.take(),
            // Every command that may wait beyond its response holds its
            // reference from the post (`Post::hold`).
            RefOp::Take => {
                return Done {
                    task: None,
                    failure: Some(Self::own_violation(idx, Violation::Unexpected)),
                }
            }
        };
        Done { task, failure }
    }

    #[cold]
    fn own_violation(idx: u32, v: Violation) -> Failure {
        pr_err!(
            "task slot {}: completion word refused an event: {:?}\n",
            idx,
            v
        );
        kernel::warn_on!(true);
        Failure::SlotBroken
    }

    /// A SCSI Response with ITT `itt` for the command on slot `idx` arrived;
    /// `invalidated` is the rkey the target invalidated with it, if any.
    /// Ends the target's access to the command's memory: at once if the
    /// target invalidated it, else by a LOCAL_INV (posted here, or by the
    /// completion of the last SEND reading through the key's MR). Returns
    /// the command's reference, to drop once the response is handed on.
    /// Fails the connection on a second response for the same command, on
    /// an invalidation of any key but the one the command gave the target,
    /// and on the command's ITT with bits libiscsi ignores set (libiscsi
    /// would complete the command on it).
    pub(super) fn response_arrived<H: CmHandler + QpHandler<CmdData = Slot>>(
        &self,
        conn: &Connection<H>,
        idx: u32,
        itt: u32,
        invalidated: Option<u32>,
        task_ref: impl FnOnce() -> Option<TaskRef>,
    ) -> FailResult<Option<TaskRef>> {
        let Some(c) = conn.cmd_ref(idx) else {
            return Err(match invalidated {
                Some(rkey) => failure::foreign(rkey, TargetOpcode::ScsiResponse, itt),
                // Beyond the slots: no command of this connection's.
                None => Self::not_posted(itt),
            });
        };
        let s = c.data();
        let r = slot::Response {
            itt,
            invalidated,
            rkey: 0,
            remote_inv: self.remote_inv.load(Relaxed),
        };
        // The common response ends its command at once (a read whose key
        // the target invalidated with it, a write whose SEND completed):
        // one compare-and-exchange from the word read, the key read after
        // it (as in the general path below); anything else, or a lost
        // race, goes the general way.
        let cur = s.word();
        let rkey = s.rkey.load(Acquire);
        if let Some(next) = slot::response_completes(cur, &slot::Response { rkey, ..r }) {
            if s.word.cmpxchg(cur.raw(), next.raw(), Full).is_ok() {
                if invalidated.is_some() {
                    Counters::bump(&self.counters.remote_invs, 1);
                    c.mr_invalidated();
                }
                return Ok(None);
            }
        }
        // A command that still waits for something past its response (its
        // SEND's or a Data-Out's completion, or a LOCAL_INV) needs a
        // reference to hold it once libiscsi has the response. It is taken
        // before the response is published: after, a completion on another
        // CPU may end the command and drop it. Whether one is needed is
        // read from the word as it is: until the response is published,
        // events only clear the word's pending bits, so a command that
        // needs none now needs none then; one taken for nothing is dropped
        // once the response is handed on.
        let pre = Self::take_ref_ahead(s, idx, itt, invalidated.is_some(), task_ref)?;
        // The key the slot's command gives the target, recorded before its
        // word was published: read after the word (in the transition), so
        // that a word seen published comes with its command's key, never
        // the slot's previous command's (the word's release store comes
        // after the key's store; the word is read here with acquire).
        let step = match s.apply(|w| {
            let rkey = s.rkey.load(Acquire);
            slot::response(w, &slot::Response { rkey, ..r })
        }) {
            Ok(step) => step,
            Err(v) => {
                if pre {
                    // As above: not the last.
                    drop(s.hold.take());
                }
                return Self::refused(v, s.word(), itt, invalidated, r.remote_inv);
            }
        };
        // An invalidation ends the key unless it came before the post
        // returned (the registration may still be ahead of it): the slot's
        // LOCAL_INV ends it then.
        if invalidated.is_some() && !step.word.key_valid() {
            Counters::bump(&self.counters.remote_invs, 1);
            c.mr_invalidated();
        }
        let (step, spare) = match step.task_ref {
            // The reference is in the slot already.
            RefOp::Take if pre => (
                Step {
                    task_ref: RefOp::Keep,
                    ..step
                },
                None,
            ),
            RefOp::Take => return Err(Self::no_task(idx, itt)),
            // Completed: the reference taken for nothing goes back.
            _ if pre => (step, s.hold.take()),
            _ => (step, None),
        };
        let done = self.finish(conn, idx, s, step);
        let task = done.task.or(spare);
        match done.failure {
            Some(f) => {
                // The connection fails; the reference goes outside.
                drop(task);
                Err(f)
            }
            None => Ok(task),
        }
    }

    /// Puts the command's task reference (`task_ref`, looked up by ITT)
    /// into slot `s` (`idx`) if the response with `itt` (that invalidated,
    /// or not) will leave the command waiting; says whether it did.
    #[inline]
    fn take_ref_ahead(
        s: &Slot,
        idx: u32,
        itt: u32,
        invalidated: bool,
        task_ref: impl FnOnce() -> Option<TaskRef>,
    ) -> FailResult<bool> {
        if !s.word().response_takes_ref(itt, invalidated) {
            return Ok(false);
        }
        // None if libiscsi has no such command: the transition then
        // refuses the response, or finds the reference missing.
        let Some(t) = task_ref() else {
            return Ok(false);
        };
        if let Err(t) = s.hold.put(t) {
            // libiscsi's own reference is held: not the last.
            drop(t);
            return Err(Self::own_violation(idx, Violation::Unexpected));
        }
        Ok(true)
    }

    #[cold]
    fn no_task(idx: u32, itt: u32) -> Failure {
        pr_err!(
            "task slot {}: libiscsi has no command for ITT {:#x}, which riser must hold past its response\n",
            idx,
            itt
        );
        Failure::SlotBroken
    }

    /// Why a response the slot's word refused fails the connection: every
    /// refusal does. A response whose ITT no command posted on this
    /// connection carries (none posted on its slot yet, as after every
    /// reconnect, or one of another session age) is not handed to
    /// libiscsi: libiscsi takes a response for any task it has allocated
    /// with a command and the session's age, and allocates it before
    /// riser publishes the slot's word, so a target that predicts the
    /// next ITT would end that command before it is sent.
    #[cold]
    fn refused(
        v: Violation,
        w: Word,
        itt: u32,
        invalidated: Option<u32>,
        remote_inv: bool,
    ) -> FailResult<Option<TaskRef>> {
        match v {
            Violation::ForeignInvalidation if !remote_inv => {
                pr_err!(
                    "target invalidated rkey {:#x} with a SCSI Response for ITT {:#x}, though Send with Invalidate was not agreed (its CM accept refused it, or always_register=0)\n",
                    invalidated.unwrap_or(0),
                    itt
                );
                Err(Failure::ForeignInvalidation)
            }
            Violation::SecondResponse => {
                pr_err!("target sent a second SCSI Response for ITT {:#x}\n", itt);
                Err(Failure::SecondResponse)
            }
            Violation::ForeignInvalidation | Violation::KeyNotGiven => Err(failure::foreign(
                invalidated.unwrap_or(0),
                TargetOpcode::ScsiResponse,
                itt,
            )),
            Violation::CorruptItt => {
                pr_err!(
                    "target answered ITT {:#x} with a SCSI Response for ITT {:#x}\n",
                    w.itt().unwrap_or(0),
                    itt
                );
                Err(Failure::CorruptItt)
            }
            Violation::UnknownItt => Err(Self::not_posted(itt)),
            Violation::Busy | Violation::TooManyDataOuts | Violation::Unexpected => {
                Err(Self::own_violation(slot_of(itt), Violation::Unexpected))
            }
        }
    }

    /// The failure of a SCSI Response whose ITT no command posted on this
    /// connection carries.
    #[cold]
    fn not_posted(itt: u32) -> Failure {
        pr_err!(
            "target sent a SCSI Response for ITT {:#x}, which no command posted on this connection carries\n",
            itt
        );
        Failure::UnknownItt
    }

    /// Posts the signaled LOCAL_INV of the key the command on slot `idx`
    /// gave the target (through MR `idx`), whose word says it is due. The
    /// layer refuses it if that key is not the MR's registered one (the
    /// command's registration not posted yet). Out of line, as the events
    /// that may call it are the common path when the target invalidates.
    #[inline(never)]
    pub(super) fn invalidate<H: CmHandler + QpHandler<CmdData = Slot>>(
        &self,
        conn: &Connection<H>,
        idx: u32,
    ) -> FailResult {
        self.counters.local_invs.add(1, Relaxed);
        let rkey = conn.cmd_ref(idx).map_or(0, |c| c.data().rkey.load(Acquire));
        conn.post_send(SendOp::LocalInv {
            mr: idx,
            rkey,
            tag: Some(self.tags.tag(SendTag::Inv(idx))),
        })
        .map_err(|e| {
            pr_err!("cannot invalidate MR {}: {:?}\n", idx, e);
            // The reference stays until the QP and MRs are gone.
            Failure::InvalidatePost
        })
    }

    /// The held TMF Response, if the commands it waits for are done.
    pub(super) fn release_held<H: CmHandler + QpHandler<CmdData = Slot>>(
        &self,
        conn: &Connection<H>,
    ) -> Option<Bhs> {
        let mut t = self.track.lock();
        let scope = t.held.as_ref()?.scope;
        if keeps_tmf(scope, Self::words(conn)) {
            return None;
        }
        self.tmf_held.store(false, Relaxed);
        t.held.take().map(|h| h.bhs)
    }

    /// After events that may have ended commands a held TMF Response
    /// waits for: the response, if it may go now. The flag is read after
    /// the events' fully ordered exchanges, and set by
    /// [`Cmds::tmf_response`] with one before it reads the words: one of the
    /// two sees the other.
    pub(super) fn events_done<H: CmHandler + QpHandler<CmdData = Slot>>(
        &self,
        conn: &Connection<H>,
    ) -> Option<Bhs> {
        if self.tmf_held.load(Relaxed) {
            self.release_held(conn)
        } else {
            None
        }
    }

    /// Whether a TMF Response is held (a hint, read like
    /// [`Cmds::events_done`] reads it: after the caller's events).
    #[inline]
    pub(super) fn tmf_waits(&self) -> bool {
        self.tmf_held.load(Relaxed)
    }

    /// A TMF Response for the request `req` arrived: if the target ended
    /// commands, their registrations are invalidated, and the response is
    /// held until none of them is reachable. Returns whether it is held.
    pub(super) fn tmf_response<H: CmHandler + QpHandler<CmdData = Slot>>(
        &self,
        conn: &Connection<H>,
        req: TmfRequest,
        bhs: &Bhs,
    ) -> FailResult<bool> {
        let mut failure = None;
        if tmf::tmf_response(bhs) == tmf::FUNCTION_COMPLETE {
            for (i, s) in conn.cmd_data().enumerate() {
                let w = s.word();
                if !w.itt().is_some_and(|itt| req.scope.covers(itt, &s.lun())) {
                    continue;
                }
                // CAST: slot indexes fit a u32.
                let done = self.slot_event(conn, i as u32, |w| Ok(slot::abort(w)));
                // libiscsi's own reference holds the task until it has
                // seen the TMF Response: this is not the last.
                drop(done.task);
                failure = failure.or(done.failure);
            }
        }
        if let Some(f) = failure {
            return Err(f);
        }
        // Whatever the response says, a command the target can still reach
        // through a pending invalidation or send keeps it back. Held first,
        // then the words read: a completion that ends the last of them
        // after this sees the flag (`events_done`).
        {
            let mut t = self.track.lock();
            t.held = Some(HeldRsp {
                bhs: *bhs,
                scope: req.scope,
            });
            // Fully ordered: the words are read after it.
            self.tmf_held.xchg(true, Full);
        }
        Ok(self.release_held(conn).is_none())
    }
}
