// SPDX-License-Identifier: GPL-2.0

//! The completion word of a task slot: what one command still owes before
//! it may complete, in one `u64` that the fast path will keep in an atomic
//! per slot (`driver/memory.rs`).
//!
//! A command may complete (libiscsi may free its task, unmap its data and
//! hand it back to the midlayer) only when the target can no longer reach
//! its memory and the device no longer reads it: its response came, every
//! SEND reading its memory completed, and the key it gave the target is
//! invalid (invalidated by the target's SEND_WITH_INV of exactly that key,
//! or by a signaled LOCAL_INV that completed). nvme-rdma keeps the same
//! rule with a reference count of two per request (send and receive
//! completions); a response without remote invalidation posts the LOCAL_INV
//! and hands its share to the LOCAL_INV's completion, and a failed
//! completion never ends a request (error recovery stops the queue, drains
//! it, then cancels the requests). The word keeps riser's stricter form of
//! it: which event is pending, not how many, so that a second response, a
//! completion nobody awaits or an invalidation of a key never given is seen
//! and refused rather than counted.
//!
//! # The word
//!
//! | bits | name | meaning |
//! |---|---|---|
//! | 0-31 | `ITT` | the ITT of the slot's last command, as sent (read from its BHS: big-endian) |
//! | 32-47 | `DATA_OUTS` | Data-Out SENDs of the command reserved or posted and not completed |
//! | 48-55 | | zero |
//! | 56 | `POSTING` | the sender has not yet said the command's post returned (or failed) |
//! | 57 | `REF` | riser holds one libiscsi task reference on the command |
//! | 58 | `LKEY` | the command's SENDs read its data through the MR whose key the target holds: its LOCAL_INV waits for them |
//! | 59 | `INV` | the slot's signaled LOCAL_INV of that key is posted, its completion awaited |
//! | 60 | `KEY` | an rkey the command registered and gave the target is valid |
//! | 61 | `SEND` | the command SEND is signaled and its completion awaited |
//! | 62 | `RSP` | the command's SCSI Response is awaited |
//! | 63 | `POSTED` | a command was posted on the slot (the `ITT` field is its) |
//!
//! The pending bits are `POSTING`, `RSP`, `SEND`, `KEY`, `INV` and
//! `DATA_OUTS`; a word with none is quiet: no command holds the slot, and
//! one may be posted.
//!
//! `POSTING` covers the window between the word's publication and the
//! return of the post that puts the command's registration and SEND on the
//! send queue: a response may arrive in it (from a target that guessed the
//! ITT, or one fast enough to answer before the poster's call returns),
//! and it waits in the word as any other. While the post is not known to
//! have happened, no LOCAL_INV is posted (it would go ahead of the REG_MR
//! and be undone by it) and the command does not complete (the poster
//! still uses its task). An invalidation carried by a response in the
//! window is accepted (it names the command's own key) but does not end
//! the key: it may have come before the registration it claims to end was
//! posted, which would make the key valid again; the slot's own LOCAL_INV
//! ends it once the post is known. The PD's global rkey (`always_register=0`) is not a `KEY`: it
//! cannot be invalidated, and is outside this model.
//!
//! Data-Out SENDs are in the word, beside the command SEND: they read the
//! command's pages (through the MR's lkey, or the local DMA lkey), so a
//! command completing before them would hand back pages the device may
//! still read (a target may answer a WRITE before its unsolicited data is
//! sent), and a LOCAL_INV posted ahead of those going through the MR would
//! fail them. They are a count, as a command has several; reserved at the
//! post, because the sender posts them after the command SEND, and the
//! response may come in between.
//!
//! # Transitions
//!
//! Each event is a pure function of the word that returns the next word
//! and what the caller must do ([`Step`]), or the [`Violation`] that fails
//! the connection (or, for riser's own, refuses the call). The caller
//! publishes the next word with a compare-and-exchange and, if it lost the
//! race, computes the step again from the word it found.
//!
//! | event | requires | clears | then |
//! |---|---|---|---|
//! | [`post`] (before the post) | a quiet word | everything | sets `POSTING`, `RSP`, and as the command needs `SEND`, `DATA_OUTS`, `KEY`, `LKEY`, `REF` (`hold`: the reference is taken before the word is published) |
//! | [`posted`] (after the post returned) | `POSTING` | `POSTING` | settle |
//! | [`send_done`] | `SEND` | `SEND` | settle |
//! | [`data_out_done`] | `DATA_OUTS` > 0 | one Data-Out | settle |
//! | [`data_outs_unsent`] | `DATA_OUTS` >= n | n Data-Outs | settle (n > 0) |
//! | [`response`] | `RSP`, its own ITT; an invalidation only of the key given | `RSP`; with the invalidation and without `POSTING`, `KEY`, `LKEY` | settle; `REF` taken if it is not complete |
//! | [`inv_done`] | `INV` | `INV`, `KEY`, `LKEY` | settle |
//! | [`abort`] (a TMF ended it) | (`RSP`, else nothing) | `RSP` | settle |
//! | [`not_posted`] | `POSTING` | `POSTING`, `SEND`, `DATA_OUTS`, and unless the registration went, `KEY`, `LKEY`, `RSP` | settle |
//! | [`teardown`] (after the drain) | (a live word, else nothing) | every pending bit | complete |
//!
//! To settle a word: if the command ended (`RSP` clear), its post is known
//! (`POSTING` clear), its key is valid (`KEY`) and not being invalidated
//! (`INV` clear), and no SEND reads
//! through the MR (`LKEY` clear, or no SEND pending), set `INV`: the
//! caller posts the LOCAL_INV ([`Action::Invalidate`]). Else, if no pending
//! bit is left, the command completes ([`Action::Complete`]) and the
//! reference, if `REF` says riser holds one, is dropped. Else wait.
//!
//! # Invariants
//!
//! - **No completion while the memory is reachable.** [`Action::Complete`]
//!   comes only from the event that clears the last pending bit: with
//!   `KEY` set no event but the key's end (the response's invalidation of
//!   exactly that key, the LOCAL_INV's completion) clears it, and with
//!   `SEND` or `DATA_OUTS` none but their completions (or the roll-back of
//!   a post that never reached the device). [`teardown`] is the exception
//!   and holds by the drain: it is called only after the QP is
//!   disconnected and drained, when no work request is outstanding and no
//!   peer can use a key (the PD is the connection's own, its one QP gone).
//! - **Exactly one completion per posted command.** [`post`] needs a quiet
//!   word and sets `RSP`; every other event clears a pending bit it checks
//!   is set, or changes nothing; settling completes only when the last one
//!   goes. So one event, and one only, takes the word from live to quiet.
//! - **The target's violations fail the connection.** A response when
//!   `RSP` is clear for its own ITT (a second response, or one for a
//!   command a TMF ended), an invalidation of a key other than the one
//!   given, by another command's response, or without Send with Invalidate
//!   agreed, an invalidation by a command that gave no key, an ITT with
//!   bits libiscsi ignores set, an ITT that is not the slot's command's.
//! - **One LOCAL_INV per key**, posted as soon as it is due: `INV` is set
//!   once, when the command ended with its key valid, its post known and
//!   no SEND reads through the MR; a key the target invalidated after the
//!   post was known gets none.
//! - **Nothing ends before the post is known.** While `POSTING` is set the
//!   command neither completes nor has its LOCAL_INV posted, and a
//!   response's invalidation leaves `KEY`: the registration may still be
//!   ahead of the send queue.
//! - **One reference at most per command, and only when completion must
//!   wait.** [`response`] hands the response to libiscsi, which completes
//!   the task when its last reference goes: it takes one ([`RefOp::Take`],
//!   before the word is published, so that the event that completes the
//!   command finds it) only if the command does not complete now (a SEND
//!   still to complete, a LOCAL_INV to post or complete), and only if none
//!   is held. Before the response libiscsi's own reference holds the task;
//!   an aborted command is handed back by libiscsi when it sees the TMF
//!   Response, held until the slot is out of reach; a torn-down one after
//!   the drain. The variant "one per command" is `hold` at the post. The
//!   completion drops it ([`RefOp::Drop`]), once.
//! - **The TMF hold** is a query of words: once a TMF Response says
//!   "function complete", each command it ends is [`abort`]ed, and the
//!   response is held while [`Word::keeps_tmf_response`] holds for any of
//!   them.
//!
//! A failed completion (a flushed or failed SEND or LOCAL_INV) is no event
//! here: it changes nothing, the connection fails, and [`teardown`] ends
//! the word after the drain, as nvme-rdma does. A stale response for a
//! reused slot carries the same ITT as the slot's new command when
//! libiscsi reuses the task (its ITTs are the slot's index and the session
//! age); the word tells one apart only while the slot is not reused, or
//! if riser stamps a per-slot generation into the ITT bits libiscsi
//! ignores (13-27): [`response`] already refuses an ITT that differs
//! there ([`Violation::CorruptItt`]).

use super::response::{
    match_itt,
    IttMatch, //
};

/// The ITT of the slot's command (bits 0-31).
const ITT: u64 = 0xffff_ffff;
/// Where the Data-Out count starts.
const DATA_OUT_SHIFT: u32 = 32;
/// One Data-Out in the count.
const DATA_OUT_ONE: u64 = 1 << DATA_OUT_SHIFT;
/// The Data-Out count (bits 32-47).
const DATA_OUTS: u64 = 0xffff << DATA_OUT_SHIFT;
/// The most Data-Outs the count holds.
pub(crate) const MAX_DATA_OUTS: u32 = 0xffff;
/// The command's post has not returned yet.
const POSTING: u64 = 1 << 56;
/// riser holds one libiscsi task reference on the command.
const REF: u64 = 1 << 57;
/// The command's SENDs read its data through the MR whose key it gave.
const LKEY: u64 = 1 << 58;
/// The slot's signaled LOCAL_INV is posted.
const INV: u64 = 1 << 59;
/// An rkey the command gave the target is valid.
const KEY: u64 = 1 << 60;
/// The command SEND's completion is awaited.
const SEND: u64 = 1 << 61;
/// The command's SCSI Response is awaited.
const RSP: u64 = 1 << 62;
/// A command was posted on the slot.
const POSTED: u64 = 1 << 63;
/// What a command still owes before it may complete.
const PENDING: u64 = POSTING | RSP | SEND | KEY | INV | DATA_OUTS;
/// The SENDs of the command.
const SENDS: u64 = SEND | DATA_OUTS;
/// The bits a word never sets (48-55).
const RESERVED: u64 = !(ITT | DATA_OUTS | POSTING | REF | LKEY | INV | KEY | SEND | RSP | POSTED);

/// A task slot's completion word.
///
/// # Invariants
///
/// A word made by [`Word::default`] and the transitions of this module is
/// consistent ([`Word::is_consistent`]); the transitions never panic on
/// any value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct Word(u64);

impl Word {
    /// The word of a value [`Word::raw`] returned (stored in an atomic).
    pub(crate) const fn from_raw(raw: u64) -> Self {
        Self(raw)
    }

    /// The value to store.
    pub(crate) const fn raw(self) -> u64 {
        self.0
    }

    const fn has(self, bits: u64) -> bool {
        self.0 & bits != 0
    }

    /// The ITT of the slot's last command, if one was posted.
    pub(crate) fn itt(self) -> Option<u32> {
        // CAST: the ITT is the low 32 bits.
        self.has(POSTED).then_some((self.0 & ITT) as u32)
    }

    /// The command's Data-Out SENDs reserved or posted and not completed.
    pub(crate) fn data_outs(self) -> u32 {
        // CAST: the field is 16 bits wide.
        ((self.0 & DATA_OUTS) >> DATA_OUT_SHIFT) as u32
    }

    /// Whether no command holds the slot: a command may be posted on it.
    pub(crate) const fn quiet(self) -> bool {
        !self.has(PENDING)
    }

    /// Whether the command's SCSI Response is still awaited (it has not
    /// come, and no TMF ended the command).
    pub(crate) const fn response_due(self) -> bool {
        self.has(RSP)
    }

    /// Whether the command SEND's completion is awaited.
    pub(crate) const fn send_due(self) -> bool {
        self.has(SEND)
    }

    /// Whether the sender has not yet said the command's post returned.
    pub(crate) const fn posting(self) -> bool {
        self.has(POSTING)
    }

    /// Whether the command's key is valid (given, and not ended yet).
    pub(crate) const fn key_valid(self) -> bool {
        self.has(KEY)
    }

    /// Whether riser holds a libiscsi task reference on the command.
    pub(crate) const fn holds_ref(self) -> bool {
        self.has(REF)
    }

    /// Whether the target may still reach the command's memory (a key it
    /// was given is valid) or the device may still read it (a SEND of the
    /// command has not completed, or its post has not returned).
    pub(crate) const fn reachable(self) -> bool {
        self.has(KEY | SENDS | POSTING)
    }

    /// Whether a SCSI Response with ITT `itt` (invalidating the command's
    /// key with it, or not) is the awaited response of the slot's command
    /// and leaves it waiting for something with no reference held: what
    /// [`response`] answers with [`RefOp::Take`] when it accepts one. A
    /// response of any other ITT, or one not awaited, says no. A cheap
    /// reading of the word for the receive path, which takes the reference
    /// (looking the command up by that ITT) before it publishes the
    /// response.
    pub(crate) fn response_takes_ref(self, itt: u32, invalidated: bool) -> bool {
        if self.itt() != Some(itt) || !self.has(RSP) {
            return false;
        }
        let mut n = self.0 & !RSP;
        if invalidated && !self.has(POSTING) {
            n &= !(KEY | LKEY);
        }
        n & REF == 0 && n & PENDING != 0
    }

    /// Whether this slot's command keeps back a TMF Response that ended
    /// it, or is to end it: its post has not returned, a SEND of it has
    /// not completed, or it ended (answered, or [`abort`]ed) and its key is
    /// not invalid yet. A live command's key, while its response is
    /// awaited, does not: a TMF that did not end the command leaves it to
    /// its response.
    pub(crate) const fn keeps_tmf_response(self) -> bool {
        self.has(SENDS | POSTING) || (self.has(KEY) && !self.has(RSP))
    }

    /// Whether the word keeps this module's invariants: no reserved bit;
    /// nothing but a fresh word before the first post; `INV` and `LKEY`
    /// only with `KEY`; `REF` only while something is pending; a LOCAL_INV
    /// only after the command ended, its post returned, and after the
    /// SENDs through its MR; and an ended command's valid key always being
    /// invalidated, or waiting for its post or those SENDs.
    pub(crate) const fn is_consistent(self) -> bool {
        let w = self.0;
        let sends = w & SENDS != 0;
        let waits_for_sends = w & LKEY != 0 && sends;
        w & RESERVED == 0
            && (w & POSTED != 0 || w == 0)
            && (w & (INV | LKEY) == 0 || w & KEY != 0)
            && (w & REF == 0 || w & PENDING != 0)
            && (w & INV == 0 || (w & (RSP | POSTING) == 0 && !waits_for_sends))
            && (w & (KEY | RSP | INV | POSTING) != KEY || waits_for_sends)
    }
}

/// The key a command gives the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    /// None: no data, the local DMA lkey, an MR registered for local
    /// access only, or the PD's global rkey (which nothing invalidates).
    None,
    /// An MR's rkey; no SEND of the command reads through that MR.
    Given,
    /// An MR's rkey, and SENDs of the command (immediate data, Data-Outs)
    /// read its data through the same MR: the LOCAL_INV waits for them.
    GivenSendsUseMr,
}

/// A command about to be posted on a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Post {
    /// Its ITT, as in its BHS (read big-endian).
    pub(crate) itt: u32,
    /// Its SEND is signaled, and its completion awaited: it reads memory
    /// after the post (the slot's header buffer, immediate data). An
    /// inline SEND, copied while posting, need not be.
    pub(crate) send: bool,
    /// The unsolicited Data-Outs reserved for it.
    pub(crate) data_outs: u32,
    /// The key it gives the target.
    pub(crate) key: Key,
    /// The caller takes one task reference for the whole command (the
    /// variant "one per command"), instead of one at the response when
    /// completion must wait.
    pub(crate) hold: bool,
}

/// A SCSI Response for the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Response {
    /// Its ITT, as read from its BHS (big-endian).
    pub(crate) itt: u32,
    /// The rkey the target invalidated with it (SEND_WITH_INV), if any.
    pub(crate) invalidated: Option<u32>,
    /// The rkey the slot's command gave the target (read only when the
    /// word says one is valid).
    pub(crate) rkey: u32,
    /// Send with Invalidate was agreed at connection setup.
    pub(crate) remote_inv: bool,
}

/// What the caller does once the word is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing: the command waits for other events.
    Wait,
    /// Post the slot's signaled LOCAL_INV of the command's key.
    Invalidate,
    /// The command's last pending event: nothing of riser's holds it any
    /// longer. It completes when the response is handed on (the response
    /// event without a reference), when the reference is dropped
    /// ([`RefOp::Drop`]), or, for a command libiscsi ends itself (aborted,
    /// torn down, not posted), when libiscsi does.
    Complete,
}

/// What the caller does with the command's libiscsi task reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefOp {
    /// Nothing.
    Keep,
    /// Take one before publishing the word (so that the event that
    /// completes the command finds it), then hand the response on.
    Take,
    /// Drop the one held, after handing on what the event carries.
    Drop,
}

/// One transition: the next word and what the caller must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    /// The word to publish.
    pub(crate) word: Word,
    /// What to do once it is published.
    pub(crate) action: Action,
    /// What to do with the task reference.
    pub(crate) task_ref: RefOp,
}

/// Why a transition is refused. The target's fail the connection, each
/// with the driver's `Failure` named; riser's own are bugs of the caller
/// (a warning, and the connection fails or the command is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Violation {
    /// The target answered its command's ITT when no response is awaited:
    /// a second response, or one for a command a TMF ended
    /// (`Failure::SecondResponse`).
    SecondResponse,
    /// The target invalidated a key that is not the one the command gave
    /// it, or with another command's response, or without Send with
    /// Invalidate agreed (`Failure::ForeignInvalidation`).
    ForeignInvalidation,
    /// The target invalidated with its command's response, though the
    /// command gave it no key (`Failure::ForeignInvalidation`).
    KeyNotGiven,
    /// The response carries its command's ITT with bits set that libiscsi
    /// ignores: libiscsi would complete the command on it
    /// (`Failure::CorruptItt`).
    CorruptItt,
    /// The response's ITT names no command of the slot: none was posted,
    /// or the slot's has another (another session age). Never handed to
    /// libiscsi, which would complete a command it allocated and riser has
    /// not posted yet on it (`Failure::UnknownItt`).
    UnknownItt,
    /// riser's own: a command posted on a slot that is not quiet.
    Busy,
    /// riser's own: more Data-Outs than the word counts
    /// ([`MAX_DATA_OUTS`]).
    TooManyDataOuts,
    /// riser's own: a completion the word does not await (a SEND, a
    /// Data-Out, a LOCAL_INV), or the roll-back of a command that is not
    /// waiting for its response.
    Unexpected,
}

impl Violation {
    /// Whether the target caused it (and the connection fails), rather
    /// than riser.
    pub(crate) const fn by_target(self) -> bool {
        matches!(
            self,
            Self::SecondResponse
                | Self::ForeignInvalidation
                | Self::KeyNotGiven
                | Self::CorruptItt
                | Self::UnknownItt
        )
    }
}

/// Settles a word an event changed: the LOCAL_INV that is due, or the
/// completion, or nothing yet.
const fn settle(w: u64) -> Step {
    let waits_for_sends = w & LKEY != 0 && w & SENDS != 0;
    if w & (KEY | RSP | INV | POSTING) == KEY && !waits_for_sends {
        return Step {
            word: Word(w | INV),
            action: Action::Invalidate,
            task_ref: RefOp::Keep,
        };
    }
    if w & PENDING == 0 {
        return Step {
            word: Word(w & !(REF | LKEY)),
            action: Action::Complete,
            task_ref: if w & REF != 0 {
                RefOp::Drop
            } else {
                RefOp::Keep
            },
        };
    }
    Step {
        word: Word(w),
        action: Action::Wait,
        task_ref: RefOp::Keep,
    }
}

/// A step that changes nothing.
const fn unchanged(w: Word) -> Step {
    Step {
        word: w,
        action: Action::Wait,
        task_ref: RefOp::Keep,
    }
}

/// A command is about to be posted on the slot: the word to publish
/// before the post (a response may race the post on another CPU). With
/// `hold`, the caller takes the command's one reference first. The sender
/// says when the post returned: [`posted`], or [`not_posted`].
pub(crate) fn post(w: Word, p: &Post) -> Result<Step, Violation> {
    if !w.quiet() || w.holds_ref() {
        return Err(Violation::Busy);
    }
    if p.data_outs > MAX_DATA_OUTS {
        return Err(Violation::TooManyDataOuts);
    }
    let mut n =
        POSTED | POSTING | RSP | u64::from(p.itt) | (u64::from(p.data_outs) << DATA_OUT_SHIFT);
    if p.send {
        n |= SEND;
    }
    n |= match p.key {
        Key::None => 0,
        Key::Given => KEY,
        Key::GivenSendsUseMr => KEY | LKEY,
    };
    if p.hold {
        n |= REF;
    }
    Ok(Step {
        word: Word(n),
        action: Action::Wait,
        task_ref: if p.hold { RefOp::Take } else { RefOp::Keep },
    })
}

/// The post of the command (its registration and SEND) returned: they
/// are on the send queue. What waited for it (a response that came in the
/// window: its LOCAL_INV, or its completion) may go now.
pub(crate) fn posted(w: Word) -> Result<Step, Violation> {
    if !w.has(POSTING) {
        return Err(Violation::Unexpected);
    }
    Ok(settle(w.0 & !POSTING))
}

/// The word [`posted`] makes of `published`, a word [`post`] made, when
/// no other event changed it since: `POSTING` cleared, and nothing to do
/// (its `RSP` is still set, so it settles to waiting with no reference
/// operation). A sender that publishes this with a compare-and-exchange
/// from `published` has made the [`posted`] transition; if the exchange
/// fails (a response or completion came in the window), it applies
/// [`posted`] to the word it finds.
pub(crate) const fn posted_untouched(published: Word) -> Word {
    Word(published.0 & !POSTING)
}

/// The command SEND completed (successfully).
pub(crate) fn send_done(w: Word) -> Result<Step, Violation> {
    if !w.has(SEND) {
        return Err(Violation::Unexpected);
    }
    Ok(settle(w.0 & !SEND))
}

/// The word [`send_done`] makes of `w` when it has nothing else to do:
/// `Some` if `w` awaits its SEND's completion and its response (then
/// clearing `SEND` settles to waiting, with no reference operation), for
/// a completion handler's compare-and-exchange from `w`; `None` when
/// [`send_done`] must decide.
pub(crate) const fn send_done_waits(w: Word) -> Option<Word> {
    if w.has(SEND) && w.has(RSP) {
        Some(Word(w.0 & !SEND))
    } else {
        None
    }
}

/// One of the command's Data-Out SENDs completed (successfully).
pub(crate) fn data_out_done(w: Word) -> Result<Step, Violation> {
    if w.data_outs() == 0 {
        return Err(Violation::Unexpected);
    }
    Ok(settle(w.0 - DATA_OUT_ONE))
}

/// The sender gives up `n` of the command's reserved Data-Outs: they will
/// not be posted (the connection fails).
pub(crate) fn data_outs_unsent(w: Word, n: u32) -> Result<Step, Violation> {
    let left = w.data_outs().checked_sub(n).ok_or(Violation::Unexpected)?;
    if n == 0 {
        return Ok(unchanged(w));
    }
    Ok(settle(
        (w.0 & !DATA_OUTS) | (u64::from(left) << DATA_OUT_SHIFT),
    ))
}

/// A SCSI Response arrived for the slot. Accepted, it is handed to
/// libiscsi whatever the step says; [`RefOp::Take`] comes first.
pub(crate) fn response(w: Word, r: &Response) -> Result<Step, Violation> {
    let Some(sent) = w.itt() else {
        return Err(match r.invalidated {
            Some(_) => Violation::ForeignInvalidation,
            None => Violation::UnknownItt,
        });
    };
    let matched = match_itt(sent, r.itt);
    if matched == IttMatch::Same && !w.has(RSP) {
        return Err(Violation::SecondResponse);
    }
    if let Some(rkey) = r.invalidated {
        if matched != IttMatch::Same {
            return Err(Violation::ForeignInvalidation);
        }
        if !w.has(KEY) {
            return Err(Violation::KeyNotGiven);
        }
        if !r.remote_inv || rkey != r.rkey {
            return Err(Violation::ForeignInvalidation);
        }
    }
    match matched {
        IttMatch::Same => {}
        IttMatch::Junk => return Err(Violation::CorruptItt),
        IttMatch::Other => return Err(Violation::UnknownItt),
    }
    let mut n = w.0 & !RSP;
    // Before the post is known the registration may still be ahead: the
    // key stays, for the slot's own LOCAL_INV.
    if r.invalidated.is_some() && !w.has(POSTING) {
        n &= !(KEY | LKEY);
    }
    let mut s = settle(n);
    if s.action != Action::Complete && !s.word.holds_ref() {
        s.word = Word(s.word.0 | REF);
        s.task_ref = RefOp::Take;
    }
    Ok(s)
}

/// The word [`response`] makes of `w` when `r` ends the command at once,
/// with nothing to do and no reference held or taken: `Some` if `r` is
/// the awaited response of `w`'s command (its ITT, every bit), the post
/// is known, no SEND, Data-Out or LOCAL_INV is pending, no reference is
/// held, and the command gave no key, or `r` invalidated exactly the one
/// it gave with Send with Invalidate agreed. `None` when [`response`]
/// must decide (and refuse, if it does).
pub(crate) const fn response_completes(w: Word, r: &Response) -> Option<Word> {
    let rest = w.0 & (PENDING | REF);
    // CAST: the ITT is the low 32 bits.
    let own = w.0 & POSTED != 0 && (w.0 & ITT) as u32 == r.itt;
    let ends = match r.invalidated {
        Some(rkey) => rest == RSP | KEY && r.remote_inv && rkey == r.rkey,
        None => rest == RSP,
    };
    if own && ends {
        Some(Word(w.0 & !(RSP | KEY | LKEY)))
    } else {
        None
    }
}

/// The slot's signaled LOCAL_INV completed (successfully): the key is
/// invalid.
pub(crate) fn inv_done(w: Word) -> Result<Step, Violation> {
    if !w.has(INV) {
        return Err(Violation::Unexpected);
    }
    Ok(settle(w.0 & !(INV | KEY | LKEY)))
}

/// A TMF Response said "function complete" for a TMF that ends the slot's
/// command: no response will come for it, and its key is to be
/// invalidated. A command that is not waiting for its response is left
/// as it is.
pub(crate) fn abort(w: Word) -> Step {
    if !w.has(RSP) {
        return unchanged(w);
    }
    settle(w.0 & !RSP)
}

/// The post of the command failed: nothing of it reached the target. If
/// its registration went out (`registered`: a chain posted in part), its
/// key stays valid though the target never got it (keys are guessable):
/// the command stays, the connection fails, and an abort or the teardown
/// ends it. Otherwise the slot is quiet again. A response that came
/// before (`RSP` clear: a target that answered a command it never got)
/// leaves the command to complete with it.
pub(crate) fn not_posted(w: Word, registered: bool) -> Result<Step, Violation> {
    if !w.has(POSTING) {
        return Err(Violation::Unexpected);
    }
    let mut n = w.0 & !(SENDS | POSTING);
    if !registered {
        n &= !(KEY | LKEY | RSP);
    }
    Ok(settle(n))
}

/// The connection's QP is disconnected and drained: no work request is
/// outstanding, no completion will come, and no peer can use a key. A live
/// command is released (and its reference dropped); libiscsi fails it.
pub(crate) fn teardown(w: Word) -> Step {
    if w.quiet() {
        return unchanged(w);
    }
    settle(w.0 & !(PENDING | LKEY))
}

/// One event of a slot, for the model, the tests and the fuzz target.
#[cfg(any(MODULE, test, fuzzing))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// [`post`].
    Post(Post),
    /// [`posted`].
    Posted,
    /// [`send_done`].
    SendDone,
    /// [`data_out_done`].
    DataOutDone,
    /// [`data_outs_unsent`].
    DataOutsUnsent(u32),
    /// [`response`].
    Response(Response),
    /// [`inv_done`].
    InvDone,
    /// [`abort`].
    Abort,
    /// [`not_posted`].
    NotPosted(bool),
    /// [`teardown`].
    Teardown,
}

#[cfg(any(MODULE, test, fuzzing))]
impl Event {
    /// The event's transition of `w`.
    pub(crate) fn apply(&self, w: Word) -> Result<Step, Violation> {
        match *self {
            Self::Post(p) => post(w, &p),
            Self::Posted => posted(w),
            Self::SendDone => send_done(w),
            Self::DataOutDone => data_out_done(w),
            Self::DataOutsUnsent(n) => data_outs_unsent(w, n),
            Self::Response(r) => response(w, &r),
            Self::InvDone => inv_done(w),
            Self::Abort => Ok(abort(w)),
            Self::NotPosted(registered) => not_posted(w, registered),
            Self::Teardown => Ok(teardown(w)),
        }
    }
}

/// A shadow of one slot in plain fields, which checks every transition of
/// the word against the module's documentation (for the tests and the
/// `slot` fuzz target).
#[cfg(any(MODULE, test, fuzzing))]
pub(crate) mod model {
    use super::{
        match_itt,
        Action,
        Event,
        IttMatch,
        Key,
        RefOp,
        Step,
        Violation,
        Word,
        INV,
        MAX_DATA_OUTS, //
    };

    /// Where the key of the slot's command stands.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    enum KeyState {
        /// No valid key: none given, or it ended.
        None,
        /// Given and valid; `sends_use_mr` if the command's SENDs read
        /// through its MR.
        Valid { sends_use_mr: bool },
        /// A LOCAL_INV of it is posted.
        Invalidating,
    }

    /// The shadow of one slot, with the word under test.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub(crate) struct Shadow {
        word: Word,
        /// The ITT of the last command posted.
        itt: Option<u32>,
        /// A command holds the slot.
        live: bool,
        /// Its post has not returned.
        posting: bool,
        rsp_due: bool,
        send_due: bool,
        data_outs: u32,
        key: KeyState,
        /// The caller holds the command's one task reference.
        held: bool,
        /// Completions of the last command posted.
        completions: u32,
        /// LOCAL_INVs asked for the last command posted.
        invalidations: u32,
    }

    impl Default for Shadow {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Shadow {
        /// A slot no command was posted on.
        pub(crate) const fn new() -> Self {
            Self {
                word: Word(0),
                itt: None,
                live: false,
                posting: false,
                rsp_due: false,
                send_due: false,
                data_outs: 0,
                key: KeyState::None,
                held: false,
                completions: 0,
                invalidations: 0,
            }
        }

        /// The word under test.
        pub(crate) const fn word(&self) -> Word {
            self.word
        }

        /// Whether a command holds the slot.
        pub(crate) const fn live(&self) -> bool {
            self.live
        }

        /// Whether the command's key is valid and not being invalidated.
        pub(crate) const fn key_valid(&self) -> bool {
            matches!(self.key, KeyState::Valid { .. })
        }

        /// Whether a LOCAL_INV of the command's key is posted.
        pub(crate) const fn invalidating(&self) -> bool {
            matches!(self.key, KeyState::Invalidating)
        }

        const fn sends(&self) -> bool {
            self.send_due || self.data_outs > 0
        }

        /// What a changed slot does next, as the module's documentation
        /// says: the LOCAL_INV that is due, the completion, or nothing.
        fn settle(&mut self) -> (Action, RefOp) {
            if let KeyState::Valid { sends_use_mr } = self.key {
                if !(self.rsp_due || self.posting || (sends_use_mr && self.sends())) {
                    self.key = KeyState::Invalidating;
                    self.invalidations += 1;
                    return (Action::Invalidate, RefOp::Keep);
                }
            }
            if self.posting || self.rsp_due || self.sends() || self.key != KeyState::None {
                return (Action::Wait, RefOp::Keep);
            }
            self.live = false;
            self.completions += 1;
            let r = if self.held { RefOp::Drop } else { RefOp::Keep };
            self.held = false;
            (Action::Complete, r)
        }

        /// The outcome the documentation gives for `ev`, applied to the
        /// shadow.
        fn documented(&mut self, ev: &Event) -> Result<(Action, RefOp), Violation> {
            let waiting = (Action::Wait, RefOp::Keep);
            match *ev {
                Event::Post(p) => {
                    if self.live {
                        return Err(Violation::Busy);
                    }
                    if p.data_outs > MAX_DATA_OUTS {
                        return Err(Violation::TooManyDataOuts);
                    }
                    *self = Self {
                        word: self.word,
                        itt: Some(p.itt),
                        live: true,
                        posting: true,
                        rsp_due: true,
                        send_due: p.send,
                        data_outs: p.data_outs,
                        key: match p.key {
                            Key::None => KeyState::None,
                            Key::Given => KeyState::Valid {
                                sends_use_mr: false,
                            },
                            Key::GivenSendsUseMr => KeyState::Valid { sends_use_mr: true },
                        },
                        held: p.hold,
                        completions: 0,
                        invalidations: 0,
                    };
                    Ok((Action::Wait, if p.hold { RefOp::Take } else { RefOp::Keep }))
                }
                Event::Posted => {
                    if !self.posting {
                        return Err(Violation::Unexpected);
                    }
                    self.posting = false;
                    Ok(self.settle())
                }
                Event::SendDone => {
                    if !self.send_due {
                        return Err(Violation::Unexpected);
                    }
                    self.send_due = false;
                    Ok(self.settle())
                }
                Event::DataOutDone => {
                    if self.data_outs == 0 {
                        return Err(Violation::Unexpected);
                    }
                    self.data_outs -= 1;
                    Ok(self.settle())
                }
                Event::DataOutsUnsent(n) => {
                    if n > self.data_outs {
                        return Err(Violation::Unexpected);
                    }
                    if n == 0 {
                        return Ok(waiting);
                    }
                    self.data_outs -= n;
                    Ok(self.settle())
                }
                Event::Response(r) => {
                    let Some(itt) = self.itt else {
                        return Err(match r.invalidated {
                            Some(_) => Violation::ForeignInvalidation,
                            None => Violation::UnknownItt,
                        });
                    };
                    let m = match_itt(itt, r.itt);
                    if m == IttMatch::Same && !self.rsp_due {
                        return Err(Violation::SecondResponse);
                    }
                    if let Some(k) = r.invalidated {
                        if m != IttMatch::Same {
                            return Err(Violation::ForeignInvalidation);
                        }
                        if !self.key_valid() {
                            return Err(Violation::KeyNotGiven);
                        }
                        if !r.remote_inv || k != r.rkey {
                            return Err(Violation::ForeignInvalidation);
                        }
                    }
                    match m {
                        IttMatch::Same => {}
                        IttMatch::Junk => return Err(Violation::CorruptItt),
                        IttMatch::Other => return Err(Violation::UnknownItt),
                    }
                    self.rsp_due = false;
                    // Before the post returned, the registration may be
                    // ahead: the slot's LOCAL_INV ends the key.
                    if r.invalidated.is_some() && !self.posting {
                        self.key = KeyState::None;
                    }
                    let (a, mut t) = self.settle();
                    if a != Action::Complete && !self.held {
                        self.held = true;
                        t = RefOp::Take;
                    }
                    Ok((a, t))
                }
                Event::InvDone => {
                    if self.key != KeyState::Invalidating {
                        return Err(Violation::Unexpected);
                    }
                    self.key = KeyState::None;
                    Ok(self.settle())
                }
                Event::Abort => {
                    if !self.rsp_due {
                        return Ok(waiting);
                    }
                    self.rsp_due = false;
                    Ok(self.settle())
                }
                Event::NotPosted(registered) => {
                    if !self.posting {
                        return Err(Violation::Unexpected);
                    }
                    self.posting = false;
                    self.send_due = false;
                    self.data_outs = 0;
                    if !registered {
                        self.key = KeyState::None;
                        self.rsp_due = false;
                    }
                    Ok(self.settle())
                }
                Event::Teardown => {
                    if !self.live {
                        return Ok(waiting);
                    }
                    self.posting = false;
                    self.rsp_due = false;
                    self.send_due = false;
                    self.data_outs = 0;
                    self.key = KeyState::None;
                    Ok(self.settle())
                }
            }
        }

        /// Applies `ev` to the word, checks the outcome against the
        /// shadow's and the invariants, and moves both on (a refused event
        /// changes nothing). Returns the word's outcome, or what broke.
        pub(crate) fn step(&mut self, ev: &Event) -> Result<Result<Step, Violation>, &'static str> {
            let got = ev.apply(self.word);
            let mut next = *self;
            let want = next.documented(ev);
            let s = match (got, want) {
                (Err(g), Err(w)) if g == w => {
                    if g.by_target() != matches!(ev, Event::Response(_)) {
                        return Err("a violation blamed on the wrong side");
                    }
                    // A response that is not the command's awaited one
                    // takes no reference: the receive path looks up no task
                    // for it.
                    if let Event::Response(r) = ev {
                        let not_its = matches!(
                            g,
                            Violation::UnknownItt
                                | Violation::SecondResponse
                                | Violation::CorruptItt
                        );
                        if not_its && self.word.response_takes_ref(r.itt, r.invalidated.is_some()) {
                            return Err("response_takes_ref says yes to a response not awaited");
                        }
                    }
                    return Ok(Err(g));
                }
                (Err(_), Err(_)) => return Err("another violation than the documented one"),
                (Err(_), Ok(_)) => return Err("an event refused that the documentation accepts"),
                (Ok(_), Err(_)) => return Err("an event accepted that the documentation refuses"),
                (Ok(s), Ok((action, task_ref))) => {
                    if s.action != action {
                        return Err("another action than the documented one");
                    }
                    if let Event::Response(r) = ev {
                        let take = self.word.response_takes_ref(r.itt, r.invalidated.is_some());
                        if take != (s.task_ref == RefOp::Take) {
                            return Err("response_takes_ref disagrees with response");
                        }
                    }
                    if s.task_ref != task_ref {
                        return Err("another reference operation than the documented one");
                    }
                    s
                }
            };
            self.invariants(ev, &next, &s)?;
            next.word = s.word;
            next.agrees()?;
            *self = next;
            Ok(Ok(s))
        }

        /// The invariants of one accepted event, from the shadow before
        /// (`self`) and after it (`next`).
        fn invariants(&self, ev: &Event, next: &Self, s: &Step) -> Result<(), &'static str> {
            let teardown = matches!(ev, Event::Teardown);
            let not_posted = matches!(ev, Event::NotPosted(_));
            if s.action == Action::Complete {
                if !self.live || self.completions != 0 || next.completions != 1 {
                    return Err("a command completed twice, or one that was not posted");
                }
                if self.posting && !matches!(ev, Event::Posted | Event::NotPosted(_)) && !teardown {
                    return Err("a command completed before its post returned");
                }
                let key_ended = match (self.key, ev) {
                    (KeyState::None, _) | (KeyState::Invalidating, Event::InvDone) => true,
                    (KeyState::Valid { .. }, Event::Response(r)) => {
                        r.invalidated.is_some() && !self.posting
                    }
                    (KeyState::Valid { .. }, Event::NotPosted(registered)) => !registered,
                    _ => teardown,
                };
                if !key_ended {
                    return Err("a command completed while the target may use its key");
                }
                let send_ended = !self.send_due || matches!(ev, Event::SendDone);
                let data_outs_ended = match *ev {
                    Event::DataOutDone => self.data_outs <= 1,
                    Event::DataOutsUnsent(n) => self.data_outs <= n,
                    _ => self.data_outs == 0,
                };
                if !(teardown || not_posted || (send_ended && data_outs_ended)) {
                    return Err("a command completed while the device may read its memory");
                }
                if (s.task_ref == RefOp::Drop) != self.held {
                    return Err("a completion that does not drop the reference held, once");
                }
                if !s.word.quiet() || s.word.reachable() || s.word.holds_ref() {
                    return Err("a completed word that is not quiet");
                }
            } else if next.live
                && !next.posting
                && !next.rsp_due
                && !next.sends()
                && next.key == KeyState::None
            {
                return Err("a command with nothing pending that did not complete");
            }
            if s.action == Action::Invalidate
                && (!matches!(self.key, KeyState::Valid { .. })
                    || next.rsp_due
                    || next.posting
                    || next.invalidations != 1)
            {
                return Err(
                    "a LOCAL_INV of no valid key, before the command ended or its post returned, or twice",
                );
            }
            if let KeyState::Valid { sends_use_mr } = next.key {
                if !(next.rsp_due || next.posting || (sends_use_mr && next.sends())) {
                    return Err("a LOCAL_INV due and not posted");
                }
            }
            match s.task_ref {
                RefOp::Take => {
                    let response = matches!(ev, Event::Response(_));
                    let post = matches!(ev, Event::Post(p) if p.hold);
                    if self.held || !(response || post) || s.action == Action::Complete {
                        return Err("a reference taken twice, or where completion need not wait");
                    }
                }
                RefOp::Drop if s.action != Action::Complete => {
                    return Err("a reference dropped before the completion");
                }
                _ => {}
            }
            Ok(())
        }

        /// Whether the word's queries say what the shadow says.
        fn agrees(&self) -> Result<(), &'static str> {
            let w = self.word;
            let key = self.key != KeyState::None;
            if !w.is_consistent() {
                return Err("an inconsistent word");
            }
            if w.quiet() == self.live
                || w.posting() != self.posting
                || w.response_due() != self.rsp_due
                || w.holds_ref() != self.held
                || w.data_outs() != self.data_outs
                || w.itt() != self.itt
            {
                return Err("a word that disagrees with the shadow");
            }
            if w.reachable() != (self.sends() || self.posting || key) {
                return Err("a word that says another reach than the shadow's");
            }
            if w.keeps_tmf_response() != (self.sends() || self.posting || (key && !self.rsp_due)) {
                return Err("a word that keeps a TMF Response the shadow would not");
            }
            Ok(())
        }
    }

    /// Applies `ev` to any `raw` value: it must not panic, and a
    /// consistent word must step to a consistent one, completing only
    /// into a quiet word, with the reference taken or dropped as the word
    /// says.
    pub(crate) fn any_word(raw: u64, ev: &Event) -> Result<(), &'static str> {
        let w = Word::from_raw(raw);
        let r = ev.apply(w);
        if !w.is_consistent() {
            return Ok(());
        }
        // The shortcuts the driver takes for the common events agree with
        // the general transitions.
        let shortcut = match ev {
            Event::SendDone => super::send_done_waits(w).map(|n| (n, Action::Wait)),
            Event::Response(resp) => {
                super::response_completes(w, resp).map(|n| (n, Action::Complete))
            }
            _ => None,
        };
        if let Some((word, action)) = shortcut {
            if r != Ok(Step {
                word,
                action,
                task_ref: RefOp::Keep,
            }) {
                return Err("a shortcut disagrees with its transition");
            }
        }
        let Ok(s) = r else {
            return Ok(());
        };
        if !s.word.is_consistent() {
            return Err("a consistent word stepped to an inconsistent one");
        }
        // The sender publishes a post with a plain store (the word is
        // quiet, and only the slot's sender posts on it): no other event
        // may change a quiet word.
        if w.quiet()
            && !matches!(ev, Event::Post(_))
            && (s.word != w || s.action != Action::Wait || s.task_ref != RefOp::Keep)
        {
            return Err("an event other than a post changed a quiet word");
        }
        if s.action == Action::Complete
            && (w.quiet() || !s.word.quiet() || s.word.reachable() || s.word.holds_ref())
        {
            return Err("a completion of a quiet word, or into one that is not quiet");
        }
        if s.action == Action::Invalidate && (w.has(INV) || !s.word.has(INV)) {
            return Err("a LOCAL_INV the word does not show as posted");
        }
        if let Event::Response(r) = ev {
            if w.response_takes_ref(r.itt, r.invalidated.is_some()) != (s.task_ref == RefOp::Take) {
                return Err("response_takes_ref disagrees with response");
            }
        }
        let refs = match s.task_ref {
            RefOp::Keep => w.holds_ref() == s.word.holds_ref(),
            RefOp::Take => !w.holds_ref() && s.word.holds_ref(),
            RefOp::Drop => w.holds_ref() && !s.word.holds_ref(),
        };
        if !refs {
            return Err("a reference taken or dropped that the word does not show");
        }
        Ok(())
    }
}

#[cfg(MODULE)]
use kernel::prelude::kunit_tests;

// In the kernel the tests are a KUnit suite; built as a host crate
// (tests/host) they run under `cargo test`.
#[cfg_attr(MODULE, kunit_tests(riser_proto_slot))]
#[cfg_attr(not(MODULE), cfg(test))]
mod tests {
    use super::model::{
        any_word,
        Shadow, //
    };
    use super::*;

    /// The wire form of an ITT libiscsi built as `host` (host order).
    fn wire(host: u32) -> u32 {
        u32::from_be_bytes(host.to_ne_bytes())
    }

    const ITT: u32 = 0x3000_0005;
    const RKEY: u32 = 0x1234_5678;

    fn cmd(send: bool, data_outs: u32, key: Key) -> Event {
        Event::Post(Post {
            itt: wire(ITT),
            send,
            data_outs,
            key,
            hold: false,
        })
    }

    fn rsp(invalidated: Option<u32>) -> Event {
        Event::Response(Response {
            itt: wire(ITT),
            invalidated,
            rkey: RKEY,
            remote_inv: true,
        })
    }

    /// Runs `events` on a fresh slot, each checked against the model, and
    /// fills `out` with the actions and reference operations of the
    /// accepted ones and the violations of the refused ones. Returns the
    /// slot's shadow, and what the model found broken, if anything (a
    /// helper does not assert: KUnit's assertions exist in the tests).
    /// Each accepted post is followed at once by its return ([`posted`]),
    /// which must wait: the sequences here are of posted commands.
    fn run(
        events: &[Event],
        out: &mut [Result<(Action, RefOp), Violation>],
    ) -> (Shadow, Option<&'static str>) {
        run_with(events, out, true)
    }

    /// [`run`], each post's return left to `events` (the window between
    /// the word and the post's return).
    fn run_raw(
        events: &[Event],
        out: &mut [Result<(Action, RefOp), Violation>],
    ) -> (Shadow, Option<&'static str>) {
        run_with(events, out, false)
    }

    fn run_with(
        events: &[Event],
        out: &mut [Result<(Action, RefOp), Violation>],
        auto_posted: bool,
    ) -> (Shadow, Option<&'static str>) {
        let mut s = Shadow::new();
        for (ev, o) in events.iter().zip(out.iter_mut()) {
            match s.step(ev) {
                Ok(r) => *o = r.map(|st| (st.action, st.task_ref)),
                Err(broke) => return (s, Some(broke)),
            }
            if auto_posted && matches!((ev, *o), (Event::Post(_), Ok(_))) {
                match s.step(&Event::Posted) {
                    Ok(Ok(st)) if st.action == Action::Wait && st.task_ref == RefOp::Keep => {}
                    Ok(_) => return (s, Some("a post's return that did not wait")),
                    Err(broke) => return (s, Some(broke)),
                }
            }
        }
        (s, None)
    }

    /// One event on `s`, checked by the model: `None` if the model found
    /// the word wrong.
    fn go(s: &mut Shadow, ev: Event) -> Option<Result<(Word, Action, RefOp), Violation>> {
        s.step(&ev)
            .ok()
            .map(|r| r.map(|st| (st.word, st.action, st.task_ref)))
    }

    const WAIT: Result<(Action, RefOp), Violation> = Ok((Action::Wait, RefOp::Keep));
    const DONE: Result<(Action, RefOp), Violation> = Ok((Action::Complete, RefOp::Keep));
    const DONE_DROP: Result<(Action, RefOp), Violation> = Ok((Action::Complete, RefOp::Drop));
    /// An event that changes nothing on a quiet slot, to pad a sequence.
    const NOTHING: Event = Event::Abort;

    #[test]
    fn a_send_completion_before_the_response_waits_as_send_done_says() {
        // Every consistent word, from a pseudo-random walk over the bits:
        // where `send_done_waits` answers, it is `send_done`'s word, with
        // nothing to do.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut seen = 0;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let w = Word::from_raw(x & !(0xff << 48));
            if !w.is_consistent() {
                continue;
            }
            if let Some(next) = send_done_waits(w) {
                seen += 1;
                assert_eq!(
                    send_done(w),
                    Ok(Step {
                        word: next,
                        action: Action::Wait,
                        task_ref: RefOp::Keep,
                    })
                );
            } else {
                assert!(!(w.send_due() && w.response_due()));
            }
        }
        assert!(seen > 0);
    }

    #[test]
    fn a_response_that_ends_its_command_completes_as_response_says() {
        // Pseudo-random consistent words and responses for them (their own
        // ITT or another, invalidating the given key, another or none,
        // Send with Invalidate agreed or not): where `response_completes`
        // answers, it is `response`'s word, completing, no reference.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut seen_inv, mut seen_none) = (0, 0);
        for _ in 0..400_000 {
            let raw = next();
            // Half the words are of the common shapes: a posted command
            // waiting only for its response, with or without a key.
            let raw = match raw % 4 {
                0 => POSTED | RSP | KEY | (raw >> 32),
                1 => POSTED | RSP | (raw >> 32),
                _ => raw & !(0xff << 48),
            };
            let w = Word::from_raw(raw);
            if !w.is_consistent() {
                continue;
            }
            let pick = next();
            // CAST: the low 32 bits.
            let itt = if pick & 1 == 0 {
                raw as u32
            } else {
                pick as u32 >> 1
            };
            let invalidated = match pick >> 40 & 3 {
                0 => None,
                1 => Some(RKEY + 1),
                _ => Some(RKEY),
            };
            let r = Response {
                itt,
                invalidated,
                rkey: RKEY,
                remote_inv: pick >> 44 & 3 != 0,
            };
            if let Some(n) = response_completes(w, &r) {
                if invalidated.is_some() {
                    seen_inv += 1;
                } else {
                    seen_none += 1;
                }
                assert_eq!(
                    response(w, &r),
                    Ok(Step {
                        word: n,
                        action: Action::Complete,
                        task_ref: RefOp::Keep,
                    })
                );
            }
        }
        assert!(seen_inv > 0 && seen_none > 0);
    }

    #[test]
    fn no_event_but_a_post_changes_a_quiet_word() {
        // The sender publishes a post with a plain store, which is the
        // compare-and-exchange only if nothing else changes a quiet word.
        let quiet = [
            Word::default(),
            Word::from_raw(0x8000_0000_0000_0007),
            Word::from_raw(0x8000_0000_0000_0000 | u64::from(wire(ITT))),
        ];
        let mut events = [NOTHING; 10];
        events[0] = Event::Posted;
        events[1] = Event::SendDone;
        events[2] = Event::DataOutDone;
        events[3] = Event::DataOutsUnsent(1);
        events[4] = Event::DataOutsUnsent(0);
        events[5] = Event::InvDone;
        events[6] = Event::Abort;
        events[7] = Event::NotPosted(true);
        events[8] = Event::Teardown;
        for w in quiet {
            assert!(w.quiet() && w.is_consistent());
            let responses = [rsp(None), rsp(Some(RKEY))];
            for ev in events.iter().chain(responses.iter()) {
                match ev.apply(w) {
                    Err(_) => {}
                    Ok(step) => assert_eq!(step, unchanged(w)),
                }
                assert_eq!(model::any_word(w.raw(), ev), Ok(()));
            }
        }
    }

    #[test]
    fn an_untouched_post_returns_as_posted_says() {
        // Every post from a quiet word: `posted_untouched` is `posted`'s
        // word, with nothing to do (the sender's shortcut).
        let quiet = [Word::default(), Word::from_raw(0x8000_0000_0000_0007)];
        let keys = [Key::None, Key::Given, Key::GivenSendsUseMr];
        for w in quiet {
            for send in [false, true] {
                for data_outs in [0, 1, 3, MAX_DATA_OUTS] {
                    for key in keys {
                        let p = Post {
                            itt: wire(ITT),
                            send,
                            data_outs,
                            key,
                            hold: false,
                        };
                        let published = post(w, &p).expect("a quiet word takes a post").word;
                        assert_eq!(
                            posted(published),
                            Ok(Step {
                                word: posted_untouched(published),
                                action: Action::Wait,
                                task_ref: RefOp::Keep,
                            })
                        );
                        assert!(posted_untouched(published).is_consistent());
                    }
                }
            }
        }
    }

    #[test]
    fn a_read_ends_with_the_target_s_invalidation_without_a_reference() {
        let mut out = [WAIT; 3];
        let (s, broke) = run(
            &[cmd(true, 0, Key::Given), Event::SendDone, rsp(Some(RKEY))],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(out, [WAIT, WAIT, DONE]);
        assert!(!s.live() && s.word().quiet() && !s.word().reachable());
        assert_eq!(s.word().itt(), Some(wire(ITT)));
        // The word round-trips through the value an atomic stores.
        assert_eq!(Word::from_raw(s.word().raw()), s.word());
    }

    #[test]
    fn a_key_the_target_kept_is_invalidated_and_one_reference_waits_for_it() {
        let mut out = [WAIT; 4];
        let (s, broke) = run(
            &[
                cmd(true, 0, Key::Given),
                rsp(None),
                Event::SendDone,
                Event::InvDone,
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        // The response comes before the send completion: the LOCAL_INV
        // goes at once (no SEND reads through the MR), with one reference.
        assert_eq!(
            out,
            [WAIT, Ok((Action::Invalidate, RefOp::Take)), WAIT, DONE_DROP]
        );
        assert!(!s.word().holds_ref() && !s.invalidating());
    }

    #[test]
    fn a_response_before_its_send_completion_takes_one_reference() {
        let mut out = [WAIT; 3];
        let (_, broke) = run(
            &[cmd(true, 0, Key::None), rsp(None), Event::SendDone],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(out, [WAIT, Ok((Action::Wait, RefOp::Take)), DONE_DROP]);
        // Response last: handing it on completes the command, no reference.
        let (_, broke) = run(
            &[cmd(true, 0, Key::None), Event::SendDone, rsp(None)],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(out, [WAIT, WAIT, DONE]);
    }

    #[test]
    fn the_local_inv_waits_for_the_sends_through_the_mr() {
        let mut out = [WAIT; 6];
        let (s, broke) = run(
            &[
                cmd(true, 2, Key::GivenSendsUseMr),
                rsp(None),
                Event::DataOutDone,
                Event::SendDone,
                Event::DataOutDone,
                Event::InvDone,
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(
            out,
            [
                WAIT,
                Ok((Action::Wait, RefOp::Take)),
                WAIT,
                WAIT,
                Ok((Action::Invalidate, RefOp::Keep)),
                DONE_DROP,
            ]
        );
        assert!(s.word().quiet());
        // Data-Outs the sender gives up count as done.
        let mut out = [WAIT; 4];
        let (s, broke) = run(
            &[
                cmd(false, 3, Key::GivenSendsUseMr),
                rsp(None),
                Event::DataOutsUnsent(3),
                Event::DataOutsUnsent(0),
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(out[2], Ok((Action::Invalidate, RefOp::Keep)));
        assert_eq!(out[3], WAIT);
        assert!(s.invalidating() && s.word().keeps_tmf_response());
    }

    #[test]
    fn the_target_s_violations_are_refused() {
        let mut out = [WAIT; 3];
        // A second response, with or without an invalidation.
        let (_, broke) = run(&[cmd(false, 0, Key::None), rsp(None), rsp(None)], &mut out);
        assert_eq!(broke, None);
        assert_eq!(out[2], Err(Violation::SecondResponse));
        let (_, broke) = run(
            &[cmd(false, 0, Key::Given), rsp(Some(RKEY)), rsp(Some(RKEY))],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(out[2], Err(Violation::SecondResponse));
        // Each refused after a READ's post, leaving its key valid.
        let mut r = Response {
            itt: wire(ITT),
            invalidated: Some(RKEY ^ 1),
            rkey: RKEY,
            remote_inv: true,
        };
        let mut refused = [Event::SendDone; 5];
        // Another key.
        refused[0] = Event::Response(r);
        // Send with Invalidate not agreed.
        r.invalidated = Some(RKEY);
        refused[1] = Event::Response(Response {
            remote_inv: false,
            ..r
        });
        // Another command's response invalidating this key.
        r.itt = wire(ITT + 1);
        refused[2] = Event::Response(r);
        // Junk in the bits libiscsi ignores; another session age.
        r.invalidated = None;
        r.itt = wire(ITT | (1 << 13));
        refused[3] = Event::Response(r);
        r.itt = wire(0x4000_0005);
        refused[4] = Event::Response(r);
        let want = [
            Violation::ForeignInvalidation,
            Violation::ForeignInvalidation,
            Violation::ForeignInvalidation,
            Violation::CorruptItt,
            Violation::UnknownItt,
        ];
        for (ev, v) in refused.iter().zip(want) {
            let mut out = [WAIT; 2];
            let (s, broke) = run(&[cmd(false, 0, Key::Given), *ev], &mut out);
            assert_eq!(broke, None);
            assert_eq!(out[1], Err(v));
            assert!(s.key_valid() && s.word().response_due());
        }
        // An invalidation by a command that gave no key.
        let (_, broke) = run(&[cmd(true, 0, Key::None), rsp(Some(RKEY))], &mut out);
        assert_eq!(broke, None);
        assert_eq!(out[1], Err(Violation::KeyNotGiven));
        // A response for a slot no command was posted on.
        r.itt = wire(ITT);
        assert_eq!(response(Word::default(), &r), Err(Violation::UnknownItt));
        r.invalidated = Some(RKEY);
        assert_eq!(
            response(Word::default(), &r),
            Err(Violation::ForeignInvalidation)
        );
        assert!(Violation::UnknownItt.by_target() && !Violation::Busy.by_target());
    }

    #[test]
    fn riser_s_own_misuse_is_refused() {
        let mut out = [WAIT; 5];
        let (_, broke) = run(
            &[
                cmd(false, 0, Key::None),
                cmd(false, 0, Key::None),
                Event::SendDone,
                Event::DataOutDone,
                Event::InvDone,
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(
            out,
            [
                WAIT,
                Err(Violation::Busy),
                Err(Violation::Unexpected),
                Err(Violation::Unexpected),
                Err(Violation::Unexpected),
            ]
        );
        let mut out = [WAIT; 3];
        let (_, broke) = run(
            &[
                cmd(false, MAX_DATA_OUTS + 1, Key::None),
                cmd(false, MAX_DATA_OUTS, Key::None),
                Event::DataOutsUnsent(MAX_DATA_OUTS + 1),
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(
            out,
            [
                Err(Violation::TooManyDataOuts),
                WAIT,
                Err(Violation::Unexpected)
            ]
        );
    }

    #[test]
    fn an_aborted_command_keeps_the_tmf_response_until_its_key_is_gone() {
        // A live command's key alone, while its response is awaited, keeps
        // no TMF Response back: a TMF that did not end the command leaves
        // it to its response.
        // Its post's window does, until the post returned.
        let mut s = Shadow::new();
        let r = go(&mut s, cmd(false, 0, Key::Given));
        assert!(matches!(r, Some(Ok((w, Action::Wait, RefOp::Keep)))
            if w.reachable() && w.keeps_tmf_response() && w.posting()));
        let r = go(&mut s, Event::Posted);
        assert!(matches!(r, Some(Ok((w, Action::Wait, RefOp::Keep)))
            if w.reachable() && !w.keeps_tmf_response() && !w.posting()));
        // Its SENDs do, ended or not.
        let mut s = Shadow::new();
        let r = go(&mut s, cmd(true, 1, Key::GivenSendsUseMr));
        assert!(matches!(r, Some(Ok((w, ..))) if w.keeps_tmf_response()));
        let r = go(&mut s, Event::Posted);
        assert!(matches!(r, Some(Ok((w, ..))) if w.keeps_tmf_response()));
        // "Function complete": no response will come, the LOCAL_INV waits
        // for the SENDs through the MR, and libiscsi ends the command once
        // it sees the TMF Response: no reference.
        let r = go(&mut s, Event::Abort);
        assert!(matches!(r, Some(Ok((w, Action::Wait, RefOp::Keep)))
            if w.keeps_tmf_response() && !w.response_due()));
        assert_eq!(
            go(&mut s, Event::SendDone).map(|r| r.map(|(_, a, _)| a)),
            Some(Ok(Action::Wait))
        );
        let r = go(&mut s, Event::DataOutDone);
        assert!(matches!(r, Some(Ok((w, Action::Invalidate, RefOp::Keep)))
            if w.keeps_tmf_response()));
        let r = go(&mut s, Event::InvDone);
        assert!(matches!(r, Some(Ok((w, Action::Complete, RefOp::Keep)))
            if !w.keeps_tmf_response() && !w.reachable()));
        // A second abort changes nothing; a late response fails.
        let r = go(&mut s, Event::Abort);
        assert!(matches!(r, Some(Ok((_, Action::Wait, RefOp::Keep)))));
        assert_eq!(go(&mut s, rsp(None)), Some(Err(Violation::SecondResponse)));
    }

    #[test]
    fn teardown_and_failed_posts_release_the_slot_once() {
        let mut out = [WAIT; 4];
        // A response waiting for its LOCAL_INV: teardown (after the
        // drain) drops the reference; a second teardown does nothing.
        let (_, broke) = run(
            &[
                cmd(true, 0, Key::Given),
                rsp(None),
                Event::Teardown,
                Event::Teardown,
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(out[2..], [DONE_DROP, WAIT]);
        // Without a response: libiscsi fails it, no reference.
        let (_, broke) = run(
            &[
                cmd(true, 2, Key::Given),
                Event::Teardown,
                Event::InvDone,
                NOTHING,
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(out[1..3], [DONE, Err(Violation::Unexpected)]);
        // A post refused whole: quiet again, and posted anew.
        let (_, broke) = run_raw(
            &[
                cmd(true, 1, Key::Given),
                Event::NotPosted(false),
                cmd(true, 0, Key::None),
                Event::NotPosted(false),
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(out, [WAIT, DONE, WAIT, DONE]);
        // A post's return said twice, or after its failure: riser's bug.
        let (_, broke) = run_raw(
            &[
                cmd(true, 1, Key::Given),
                Event::Posted,
                Event::Posted,
                Event::NotPosted(false),
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(
            out[1..],
            [WAIT, Err(Violation::Unexpected), Err(Violation::Unexpected)]
        );
        // Its registration went: the key stays valid until an abort (or
        // the teardown) ends it.
        let (s, broke) = run_raw(
            &[
                cmd(true, 1, Key::Given),
                Event::NotPosted(true),
                Event::Abort,
                Event::InvDone,
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(
            out,
            [WAIT, WAIT, Ok((Action::Invalidate, RefOp::Keep)), DONE]
        );
        assert!(!s.live());
    }

    #[test]
    fn a_response_before_the_post_returned_waits_for_it() {
        let mut out = [WAIT; 4];
        // A plain response in the window: no LOCAL_INV before the REG_MR
        // is on the send queue; at the post's return it goes.
        let (s, broke) = run_raw(
            &[
                cmd(false, 0, Key::Given),
                rsp(None),
                Event::Posted,
                Event::InvDone,
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(
            out,
            [
                WAIT,
                Ok((Action::Wait, RefOp::Take)),
                Ok((Action::Invalidate, RefOp::Keep)),
                DONE_DROP
            ]
        );
        assert!(s.word().quiet() && !s.word().reachable());
        // An invalidation in the window does not end the key (it may have
        // come before the registration it names was posted): the slot's
        // own LOCAL_INV does.
        let (s, broke) = run_raw(
            &[
                cmd(false, 0, Key::Given),
                rsp(Some(RKEY)),
                Event::Posted,
                Event::InvDone,
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(
            out,
            [
                WAIT,
                Ok((Action::Wait, RefOp::Take)),
                Ok((Action::Invalidate, RefOp::Keep)),
                DONE_DROP
            ]
        );
        assert!(s.word().quiet());
        // Without a key, the post's return completes it; a failed post
        // after the response also ends it (the connection fails).
        let (_, broke) = run_raw(
            &[cmd(false, 0, Key::None), rsp(None), Event::Posted],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(out[1..3], [Ok((Action::Wait, RefOp::Take)), DONE_DROP]);
        let (_, broke) = run_raw(
            &[
                cmd(false, 0, Key::Given),
                rsp(None),
                Event::NotPosted(false),
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(out[1..3], [Ok((Action::Wait, RefOp::Take)), DONE_DROP]);
        // A signaled SEND completing in the window waits for the return.
        let (_, broke) = run_raw(
            &[
                cmd(true, 0, Key::None),
                Event::SendDone,
                rsp(None),
                Event::Posted,
            ],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(
            out,
            [WAIT, WAIT, Ok((Action::Wait, RefOp::Take)), DONE_DROP]
        );
    }

    #[test]
    fn one_reference_held_from_the_post_goes_with_the_completion() {
        let held = Event::Post(Post {
            itt: wire(ITT),
            send: true,
            data_outs: 0,
            key: Key::Given,
            hold: true,
        });
        let mut out = [WAIT; 4];
        let (_, broke) = run(&[held, Event::SendDone, rsp(Some(RKEY)), NOTHING], &mut out);
        assert_eq!(broke, None);
        assert_eq!(
            out,
            [Ok((Action::Wait, RefOp::Take)), WAIT, DONE_DROP, WAIT]
        );
        let (_, broke) = run(
            &[held, rsp(None), Event::SendDone, Event::InvDone],
            &mut out,
        );
        assert_eq!(broke, None);
        assert_eq!(
            out,
            [
                Ok((Action::Wait, RefOp::Take)),
                Ok((Action::Invalidate, RefOp::Keep)),
                WAIT,
                DONE_DROP
            ]
        );
    }

    /// A pseudo-random event for the slot of `s`, mostly ones that apply.
    fn random_event(rng: &mut super::super::TestRng, s: &Shadow, rkey: u32) -> Event {
        let itt = s.word().itt().unwrap_or(wire(ITT));
        let host = u32::from_ne_bytes(itt.to_be_bytes());
        match rng.below(12) {
            0 | 1 => Event::Post(Post {
                itt: wire((host & 0x1fff) | [0x1000_0000, 0x2000_0000][rng.below(2)]),
                send: rng.below(4) != 0,
                data_outs: [0, 0, 1, 2, 3][rng.below(5)],
                key: [Key::None, Key::Given, Key::GivenSendsUseMr][rng.below(3)],
                hold: rng.below(4) == 0,
            }),
            2 => match rng.below(2) {
                0 => Event::Posted,
                _ => Event::SendDone,
            },
            3 | 4 => Event::DataOutDone,
            5 => Event::DataOutsUnsent([0, 1, 2][rng.below(3)]),
            6 | 7 => Event::Response(Response {
                itt: match rng.below(8) {
                    0 => wire(host ^ (1 << (13 + rng.below(15)))),
                    1 => wire(host ^ 0x1000_0000),
                    _ => itt,
                },
                invalidated: [None, None, Some(rkey), Some(rkey ^ 4)][rng.below(4)],
                rkey,
                remote_inv: rng.below(8) != 0,
            }),
            8 | 9 => Event::InvDone,
            10 => Event::Abort,
            _ => match rng.below(4) {
                0 => Event::Teardown,
                n => Event::NotPosted(n == 1),
            },
        }
    }

    #[test]
    fn random_events_on_four_slots_keep_the_invariants() {
        let mut rng = super::super::TestRng(0x51a7_c0de_0bad_f00d);
        let mut slots = [Shadow::new(); 4];
        let mut completions = 0u32;
        for _ in 0..8192 {
            let i = rng.below(slots.len());
            let Some(s) = slots.get_mut(i) else {
                continue;
            };
            // CAST: four slots.
            let ev = random_event(&mut rng, s, 0x100 + i as u32);
            let r = s.step(&ev);
            assert_eq!(r.err(), None);
            if let Ok(Ok(st)) = r {
                completions += u32::from(st.action == Action::Complete);
            }
        }
        assert!(completions > 100);
    }

    #[test]
    fn every_consistent_word_steps_to_a_consistent_one() {
        let r = Response {
            itt: wire(ITT),
            invalidated: Some(RKEY),
            rkey: RKEY,
            remote_inv: true,
        };
        let events = [
            cmd(true, 1, Key::GivenSendsUseMr),
            Event::Posted,
            Event::SendDone,
            Event::DataOutDone,
            Event::DataOutsUnsent(1),
            Event::DataOutsUnsent(2),
            Event::Response(r),
            Event::Response(Response {
                invalidated: None,
                ..r
            }),
            Event::InvDone,
            Event::Abort,
            Event::NotPosted(false),
            Event::NotPosted(true),
            Event::Teardown,
        ];
        let mut consistent = 0;
        for flags in 0u64..256 {
            for outs in 0u64..3 {
                let raw = (flags << 56) | (outs << DATA_OUT_SHIFT) | u64::from(wire(ITT));
                consistent += u32::from(Word::from_raw(raw).is_consistent());
                for ev in &events {
                    assert_eq!(any_word(raw, ev), Ok(()));
                }
            }
        }
        // Words enough to mean something (and the fresh one).
        assert!(consistent > 40);
        assert!(Word::default().is_consistent());
        assert!(!Word::from_raw(1 << 50).is_consistent());
        assert!(!Word::from_raw(1 << 55).is_consistent());
    }
}

// Host only (it needs `std`'s collections): every state one slot can reach
// from a fresh word with a small alphabet of events, each event checked by
// the model, and from each state the command completes, once, when what it
// awaits happens.
#[cfg(all(test, not(MODULE)))]
mod exhaustive {
    use super::model::Shadow;
    use super::*;
    use std::collections::{
        HashSet,
        VecDeque, //
    };

    const ITT: u32 = 0x0500_0030;
    const RKEY: u32 = 0xabcd;

    fn alphabet() -> Vec<Event> {
        let mut v = Vec::new();
        for itt in [ITT, ITT ^ 0x0000_0010] {
            for send in [false, true] {
                for data_outs in 0..3 {
                    for key in [Key::None, Key::Given, Key::GivenSendsUseMr] {
                        for hold in [false, true] {
                            v.push(Event::Post(Post {
                                itt,
                                send,
                                data_outs,
                                key,
                                hold,
                            }));
                        }
                    }
                }
            }
        }
        // ITT in wire order: 0x10 on the wire is host bit 28 (age) on a
        // little-endian host, 0x0100 is bit 16 (ignored by libiscsi).
        for itt in [ITT, ITT ^ 0x0000_0010, ITT ^ 0x0000_0100] {
            for invalidated in [None, Some(RKEY), Some(RKEY ^ 1)] {
                for remote_inv in [false, true] {
                    v.push(Event::Response(Response {
                        itt,
                        invalidated,
                        rkey: RKEY,
                        remote_inv,
                    }));
                }
            }
        }
        v.extend([
            Event::Posted,
            Event::SendDone,
            Event::DataOutDone,
            Event::DataOutsUnsent(0),
            Event::DataOutsUnsent(1),
            Event::DataOutsUnsent(2),
            Event::DataOutsUnsent(3),
            Event::InvDone,
            Event::Abort,
            Event::NotPosted(false),
            Event::NotPosted(true),
            Event::Teardown,
        ]);
        v
    }

    /// Delivers what the slot awaits, one event at a time, and says
    /// whether its command completed exactly once.
    fn completes(mut s: Shadow) -> bool {
        let mut done = 0;
        for _ in 0..16 {
            let w = s.word();
            let ev = if w.posting() {
                Event::Posted
            } else if w.response_due() {
                Event::Response(Response {
                    itt: w.itt().unwrap_or(0),
                    invalidated: None,
                    rkey: RKEY,
                    remote_inv: true,
                })
            } else if send_done(w).is_ok() {
                Event::SendDone
            } else if w.data_outs() > 0 {
                Event::DataOutDone
            } else if s.invalidating() {
                Event::InvDone
            } else {
                break;
            };
            match s.step(&ev) {
                Ok(Ok(st)) => done += u32::from(st.action == Action::Complete),
                _ => return false,
            }
        }
        done == 1 && s.word().quiet()
    }

    #[test]
    fn every_reachable_state_of_a_slot_keeps_the_invariants_and_completes() {
        let events = alphabet();
        let mut seen = HashSet::new();
        let mut todo = VecDeque::from([Shadow::new()]);
        seen.insert(Shadow::new());
        let mut steps = 0u64;
        while let Some(s) = todo.pop_front() {
            assert!(!s.live() || completes(s), "stuck: {s:?}");
            for ev in &events {
                let mut n = s;
                let r = n.step(ev);
                steps += 1;
                assert!(r.is_ok(), "{s:?} --{ev:?}--> {r:?}");
                if seen.insert(n) {
                    todo.push_back(n);
                }
            }
        }
        println!("{} states, {} transitions checked", seen.len(), steps);
        assert!(seen.len() > 100);
    }

    #[test]
    fn a_million_random_events_keep_the_invariants() {
        let events = alphabet();
        let mut rng = super::super::TestRng(0x0dd_ba11_cafe_f00d);
        let mut slots = [Shadow::new(); 3];
        let mut completions = 0u64;
        for _ in 0..1_000_000 {
            let s = &mut slots[rng.below(3)];
            let ev = &events[rng.below(events.len())];
            match s.step(ev) {
                Ok(Ok(st)) => completions += u64::from(st.action == Action::Complete),
                Ok(Err(_)) => {}
                Err(e) => panic!("{e}: {ev:?} on {s:?}"),
            }
        }
        assert!(completions > 10_000);
    }
}
