// SPDX-License-Identifier: GPL-2.0

//! What the target can reach of each command, and when that ends: the
//! registration a command gives the target, its invalidation (by the
//! target with its response, or by riser), and the task references that
//! hold the command until then (iser_memory.c's concern).

use super::{
    conn::{Failure, IserConn},
    res::Res,
    Iser,
};
use crate::{
    iscsi::{Task, TaskRef},
    proto::{
        pdu::{Bhs, RxPdu},
        response::{self, IttMatch, SlotKey},
        tmf::{self, Scope, TmfRequest},
    },
    rdma::conn::SendOp,
};
use core::sync::atomic::Ordering;
use kernel::{alloc::KVec, prelude::*};

/// Where a command's memory registration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MrState {
    /// The target was given the rkey and may use it.
    Registered,
    /// The command ended without the target invalidating the rkey, while
    /// sends naming its data through the MR's lkey were still to go or to
    /// complete: the LOCAL_INV waits for the last of them, which would
    /// otherwise fail on the invalid key (and fail the connection).
    Ending,
    /// A LOCAL_INV of it is posted; its completion ends the target's access.
    Invalidating,
}

/// What one task slot's command still owes before it may complete: libiscsi
/// frees a task, and the midlayer gets its command back, only when every
/// reference on it is dropped, and riser holds one for each event that may
/// still touch the command's memory.
pub(super) struct Inflight {
    /// The command's ITT as sent (meaningful while it holds references).
    pub(super) itt: u32,
    /// Its LUN, as in the BHS.
    pub(super) lun: [u8; 8],
    /// The registration the target was given, and the reference that holds
    /// the command until it is invalidated.
    pub(super) mr: Option<(MrState, TaskRef)>,
    /// Signaled SENDs naming the command's data (immediate data,
    /// Data-Outs) not completed yet; each holds a reference in `puts`.
    pub(super) sends: u32,
    /// Unsolicited Data-Outs set aside for the command and not posted yet.
    pub(super) unsent: u32,
    /// Whether its SCSI Response came. Kept until the slot's next command:
    /// libiscsi frees the task only when riser's references go, and until
    /// then would take a second response for it as a first one (iSCSI has
    /// one response per command).
    pub(super) responded: bool,
}

impl Inflight {
    /// Whether a send naming the command's data is still to go or to
    /// complete.
    pub(super) fn sending(&self) -> bool {
        self.sends > 0 || self.unsent > 0
    }
}

/// The reference a signaled SEND holds on its task until it completes.
pub(super) struct SendRef {
    pub(super) task: TaskRef,
    /// Whether it counts in the task's `sends` (a SEND naming its data).
    pub(super) counted: bool,
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

/// A connection's command bookkeeping, under one lock (taken in the send
/// path and the completion handlers). Task references are never dropped
/// under it: dropping one may free the task, which takes libiscsi's locks.
pub(super) struct Track {
    /// By task slot.
    pub(super) inflight: KVec<Inflight>,
    /// By send tag: the reference a signaled SEND holds on its task until it
    /// completes.
    pub(super) puts: KVec<Option<SendRef>>,
    /// The TMF request sent last, until its response arrives.
    pub(super) tmf: Option<TmfRequest>,
    pub(super) held: Option<HeldRsp>,
    /// The ITT of the Logout Request sent, if any: only its response ends
    /// the session.
    pub(super) logout_itt: Option<u32>,
}

impl Track {
    pub(super) fn new(cmds: u32, send_tags: u32) -> Result<Self> {
        let mut inflight = KVec::with_capacity(cmds as usize, GFP_KERNEL)?;
        for _ in 0..cmds {
            inflight.push(
                Inflight {
                    itt: 0,
                    lun: [0; 8],
                    mr: None,
                    sends: 0,
                    unsent: 0,
                    responded: false,
                },
                GFP_KERNEL,
            )?;
        }
        let mut puts = KVec::with_capacity(send_tags as usize, GFP_KERNEL)?;
        for _ in 0..send_tags {
            puts.push(None, GFP_KERNEL)?;
        }
        Ok(Self {
            inflight,
            puts,
            tmf: None,
            held: None,
            logout_itt: None,
        })
    }

    /// Whether a command in `scope` is still reachable by the target through
    /// an invalidation or a send that has not completed.
    pub(super) fn busy(&self, scope: Scope) -> bool {
        self.inflight.iter().any(|f| {
            let pending =
                f.sending() || matches!(f.mr, Some((MrState::Ending | MrState::Invalidating, _)));
            pending && scope.covers(f.itt, &f.lun)
        })
    }

    /// Takes back the reference of send tag `tag`, once its SEND completed
    /// (`post`: the completed post's number on the tag) or was not posted
    /// (`None`), with the slot whose LOCAL_INV may go now.
    pub(super) fn send_completed(
        &mut self,
        tag: u32,
        post: Option<u32>,
    ) -> (Option<TaskRef>, Option<u32>) {
        let Some(SendRef {
            task: r,
            counted,
            post: want,
        }) = self.puts.get_mut(tag as usize).and_then(Option::take)
        else {
            return (None, None);
        };
        // A completion taking another post's reference would let that
        // command complete while the device may still read its SEND.
        if let Some(p) = post {
            if p != want {
                Self::other_post(tag, p, want);
            }
        }
        let idx = r.index();
        if counted {
            if let Some(f) = self.inflight.get_mut(idx as usize) {
                f.sends = f.sends.saturating_sub(1);
            }
        }
        (Some(r), self.end_sending(idx))
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

    /// Slot `idx` if its command ended (`Ending`) and has no send left:
    /// its registration is then marked `Invalidating`, for the caller to
    /// post the LOCAL_INV.
    pub(super) fn end_sending(&mut self, idx: u32) -> Option<u32> {
        let f = self.inflight.get_mut(idx as usize)?;
        let sending = f.sending();
        match f.mr.as_mut() {
            Some(m) if m.0 == MrState::Ending && !sending => {
                m.0 = MrState::Invalidating;
                Some(idx)
            }
            _ => None,
        }
    }

    /// Takes the next task reference held, from position `*at` on (the
    /// slots' registrations, then the send tags), and moves `*at` past it;
    /// `None` when none is left.
    pub(super) fn take_ref(&mut self, at: &mut usize) -> Option<TaskRef> {
        let slots = self.inflight.len();
        while let Some(f) = self.inflight.get_mut(*at) {
            *at += 1;
            if let Some((_, r)) = f.mr.take() {
                return Some(r);
            }
        }
        while let Some(p) = self.puts.get_mut(*at - slots) {
            *at += 1;
            if let Some(p) = p.take() {
                return Some(p.task);
            }
        }
        None
    }

    /// The held TMF Response, if the commands it waits for are done.
    pub(super) fn release_held(&mut self) -> Option<Bhs> {
        let scope = self.held.as_ref()?.scope;
        if self.busy(scope) {
            return None;
        }
        self.held.take().map(|h| h.bhs)
    }
}

impl Res {
    /// Records a command about to be posted on its slot, with a reference
    /// for the rkey the target gets (`remote_key`), one for a command SEND
    /// that names its data (`with_imm`), and the `dataouts` unsolicited
    /// Data-Outs that will follow it.
    pub(super) fn hold_command(
        &self,
        task: &Task<'_, Iser>,
        remote_key: bool,
        with_imm: bool,
        dataouts: u32,
    ) -> Result {
        let idx = task.index();
        let bhs = Bhs(task.bhs());
        let mr_ref = if remote_key {
            Some(task.get_ref().ok_or(EINVAL)?)
        } else {
            None
        };
        let send_ref = if with_imm {
            Some(task.get_ref().ok_or(EINVAL)?)
        } else {
            None
        };
        let tag = Self::task_tag(idx);
        let mut t = self.track.lock();
        let busy = t
            .inflight
            .get(idx as usize)
            .is_none_or(|f| f.mr.is_some() || f.sending())
            || (with_imm && t.puts.get(tag as usize).is_none_or(Option::is_some));
        if busy {
            // A slot's references are all gone before libiscsi reuses it.
            drop(t);
            drop((mr_ref, send_ref));
            return Err(Self::slot_reused(idx));
        }
        let counted = send_ref.is_some();
        // The command's SEND is the tag's next post: nothing else posts on
        // a task slot's tag while its task holds the slot.
        let post = self.conn.next_send_post(tag);
        if let (Some(r), Some(p)) = (send_ref, t.puts.get_mut(tag as usize)) {
            *p = Some(SendRef {
                task: r,
                counted: true,
                post,
            });
        }
        if let Some(f) = t.inflight.get_mut(idx as usize) {
            f.itt = bhs.itt();
            f.lun = bhs.lun();
            f.mr = mr_ref.map(|r| (MrState::Registered, r));
            f.sends = u32::from(counted);
            f.unsent = dataouts;
            f.responded = false;
        }
        Ok(())
    }

    #[cold]
    fn slot_reused(idx: u32) -> Error {
        pr_err!(
            "task slot {} reused while the target may reach its last command\n",
            idx
        );
        EINVAL
    }

    /// Undoes [`Res::hold_command`] for a command that was not posted.
    pub(super) fn unhold_command(&self, idx: u32, remote_key: bool, with_imm: bool) {
        let (mr, send) = {
            let mut t = self.track.lock();
            let send = if with_imm {
                t.puts
                    .get_mut(Self::task_tag(idx) as usize)
                    .and_then(Option::take)
            } else {
                None
            };
            let mr = t.inflight.get_mut(idx as usize).and_then(|f| {
                f.sends = 0;
                f.unsent = 0;
                if remote_key {
                    f.mr.take()
                } else {
                    None
                }
            });
            (mr, send)
        };
        // Outside the lock: libiscsi's own reference is still held, so these
        // do not free the task.
        drop((mr, send));
    }

    /// A SCSI Response `pdu` for the command on slot `idx` arrived;
    /// `invalidated` is the rkey the target invalidated with it, if any.
    /// Ends the target's access to the command's memory: at once if the
    /// target invalidated it, else by a LOCAL_INV whose completion drops
    /// the reference. Returns the reference to drop once the response is
    /// handed on. Fails the connection on a second response for the same
    /// command, on an invalidation of any key but the one the command gave
    /// the target, and on the command's ITT with bits libiscsi ignores set
    /// (libiscsi would complete the command on it).
    pub(super) fn response_arrived(
        &self,
        idx: u32,
        pdu: &RxPdu,
        invalidated: Option<u32>,
    ) -> core::result::Result<Option<TaskRef>, Failure> {
        let itt = pdu.itt;
        let mut t = self.track.lock();
        let Some(f) = t.inflight.get_mut(idx as usize) else {
            drop(t);
            return match invalidated {
                Some(rkey) => Err(IserConn::foreign(rkey, pdu)),
                // Beyond the slots: libiscsi refuses it.
                None => Ok(None),
            };
        };
        let sent = f.itt;
        let matched = response::match_itt(sent, itt);
        let same = matched == IttMatch::Same;
        if same && f.responded {
            drop(t);
            pr_err!("target sent a second SCSI Response for ITT {:#x}\n", itt);
            return Err(Failure::SecondResponse);
        }
        let given = matches!(f.mr, Some((MrState::Registered, _)));
        if let Some(rkey) = invalidated {
            let slot = SlotKey {
                same_itt: same,
                given,
                mr_rkey: self.conn.mr_rkey(idx).filter(|_| self.conn.mr_valid(idx)),
            };
            if !response::may_invalidate(self.remote_inv, slot, rkey) {
                drop(t);
                return Err(IserConn::foreign(rkey, pdu));
            }
        }
        match matched {
            IttMatch::Same => {}
            IttMatch::Junk => {
                drop(t);
                pr_err!(
                    "target answered ITT {:#x} with a SCSI Response for ITT {:#x}\n",
                    sent,
                    itt
                );
                return Err(Failure::CorruptItt);
            }
            // A stale ITT, or one never sent: libiscsi refuses it.
            IttMatch::Other => return Ok(None),
        }
        f.responded = true;
        if !given {
            // Nothing to invalidate.
            return Ok(None);
        }
        if invalidated.is_some() {
            self.remote_invs.fetch_add(1, Ordering::Relaxed);
            self.conn.mr_invalidated(idx);
            return Ok(f.mr.take().map(|(_, r)| r));
        }
        let sending = f.sending();
        if let Some(m) = f.mr.as_mut() {
            m.0 = if sending {
                MrState::Ending
            } else {
                MrState::Invalidating
            };
        }
        drop(t);
        if !sending {
            self.invalidate(idx)?;
        }
        Ok(None)
    }

    /// Posts the signaled LOCAL_INV of MR `idx`, already marked
    /// `Invalidating`.
    pub(super) fn invalidate(&self, idx: u32) -> core::result::Result<(), Failure> {
        self.local_invs.fetch_add(1, Ordering::Relaxed);
        self.conn
            .post_send(&[SendOp::LocalInv {
                mr: idx,
                tag: Some(self.inv_tag(idx)),
            }])
            .map_err(|e| {
                pr_err!("cannot invalidate MR {}: {:?}\n", idx, e);
                // The reference stays until the QP and MRs are gone.
                Failure::InvalidatePost
            })
    }

    /// A TMF Response for the request `req` arrived: if the target ended
    /// commands, their registrations are invalidated, and the response is
    /// held until none of them is reachable. Returns whether it is held.
    pub(super) fn tmf_response(
        &self,
        req: TmfRequest,
        bhs: &Bhs,
    ) -> core::result::Result<bool, Failure> {
        let mut todo = KVec::<u32>::new();
        let held = {
            let mut t = self.track.lock();
            if tmf::tmf_response(bhs) == tmf::FUNCTION_COMPLETE {
                for (i, f) in t.inflight.iter_mut().enumerate() {
                    if !req.scope.covers(f.itt, &f.lun) {
                        continue;
                    }
                    let sending = f.sending();
                    if let Some(m) = f.mr.as_mut() {
                        if m.0 == MrState::Registered && sending {
                            // Invalidated once its last send completed.
                            m.0 = MrState::Ending;
                        } else if m.0 == MrState::Registered {
                            m.0 = MrState::Invalidating;
                            // CAST: slot indexes fit a u32.
                            todo.push(i as u32, GFP_ATOMIC)
                                .map_err(|_| Failure::TmfNoMemory)?;
                        }
                    }
                }
            }
            // Whatever the response says, a command the target can still
            // reach through a pending invalidation or send keeps it back.
            let busy = t.busy(req.scope);
            if busy {
                t.held = Some(HeldRsp {
                    bhs: *bhs,
                    scope: req.scope,
                });
            }
            busy
        };
        for i in todo {
            self.invalidate(i)?;
        }
        Ok(held)
    }
}
