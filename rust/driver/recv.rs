// SPDX-License-Identifier: GPL-2.0

//! The completions: a PDU from the target is validated, handed to
//! libiscsi and its buffer reposted (iser_initiator.c's receive half), and
//! a SEND's or LOCAL_INV's completion is its command's event and gives
//! back what its tag held. The QP's completion handler is here.

use super::{
    conn::{
        IserConn,
        Res, //
    },
    failure::{
        foreign,
        FailResult,
        Failure, //
    },
    memory::{
        slot_of,
        Done,
        Slot, //
    },
    tags::SendTag,
    ASYNC_PER_SEC, //
};
use crate::{
    fault,
    kernel_ext::rcu::RcuRead,
    kernel_ext::softirq::InSoftirq,
    proto::{
        login,
        pdu::{
            Bhs,
            RxPdu,
            RxView,
            TargetOpcode, //
            BHS_LEN,
        },
        response,
        slot,
        ProtoError, //
    },
    rdma::{
        conn::{
            QpHandler,
            Received,
            SendDone,
            Wc,
            UNSIGNALED_TAG, //
        },
        AsyncEvent, //
    },
    trace, //
};
use kernel::num::casts::FromSafeCast;
use kernel::sync::atomic::{
    Full,
    Relaxed,
    Release, //
};
use kernel::{
    prelude::*, //
};

/// Handles one receive (softirq): validate, hand to libiscsi, repost.
/// The PDU is read in place, in the receive buffer, which is not
/// posted again (so not written) until the repost ends the read.
#[inline(always)]
pub(super) fn received(ep: &IserConn, rcu: &RcuRead, res: &Res, rx: Received<'_, IserConn>) {
    if let Err(why) = deliver(ep, rcu, rx.softirq(), res, rx.bytes(), rx.wc()) {
        ep.fail(why);
    }
    // The login receive (tag 0) is posted anew for each login request.
    let tag = rx.tag();
    if tag != 0 {
        // One repost per completion: a receive fewer, and the target's
        // next PDU meets an RNR.
        if let Err(e) = rx.repost() {
            ep.repost_failed(tag, e);
        }
    }
}

#[inline(always)]
fn deliver(
    ep: &IserConn,
    rcu: &RcuRead,
    softirq: Option<&InSoftirq>,
    res: &Res,
    bytes: &[u8],
    wc: &Wc,
) -> FailResult {
    let RxView { pdu, bhs, data } = match RxPdu::view(bytes, usize::from_safe_cast(wc.byte_len)) {
        Ok(v) => v,
        Err(e) => return Err(malformed(wc.byte_len, e)),
    };
    // The BHS where it is, in the receive buffer (which is not posted
    // again until this ends): read, traced and handed to libiscsi in place.
    trace::pdu_received(trace::id(ep), bhs, wc.invalidated.unwrap_or(0));
    if pdu.opcode != TargetOpcode::ScsiResponse {
        return deliver_other(ep, rcu, res, bytes, wc.byte_len, wc.invalidated);
    }
    // A SCSI Response: one per command, the receive path's common case.
    // Whether it may invalidate what it names, and whether it is the
    // command's own, are decided by the slot's completion word. A
    // reference taken for a command that still owes something is
    // dropped only once libiscsi has the response.
    let done_ref =
        res.cmds
            .response_arrived(&res.conn, slot_of(pdu.itt), pdu.itt, wc.invalidated, || {
                // libiscsi's ITTs are the BHS's bytes as they are in memory.
                let raw_itt = u32::from_ne_bytes(pdu.itt.to_be_bytes());
                ep.bound.with_in(rcu, |c| c.task_ref(raw_itt)).flatten()
            });
    let r = done_ref.and_then(|done_ref| {
        let r = hand_on(ep, rcu, softirq, bhs, data);
        // libiscsi has completed the command (or refused the response):
        // the task is freed once this last reference goes.
        drop(done_ref);
        r
    });
    // Test build: a command held before its slot word goes on (before the
    // connection's failure, which waits for the lock its sender holds).
    fault::response_handled(pdu.itt);
    r
}

/// Hands the PDU to libiscsi (in the receive's softirq, `softirq`, as
/// ib_core reports receives).
#[inline(always)]
fn hand_on(
    ep: &IserConn,
    rcu: &RcuRead,
    softirq: Option<&InSoftirq>,
    bhs: &[u8; BHS_LEN],
    data: &[u8],
) -> FailResult {
    match ep.bound.with_in(rcu, |c| match softirq {
        Some(s) => c.complete_pdu_in(s, bhs, data),
        None => c.complete_pdu(bhs, data),
    }) {
        Some(Err(_)) => Err(Failure::LibiscsiRejected),
        _ => Ok(()),
    }
}

#[cold]
fn malformed(byte_len: u32, e: ProtoError) -> Failure {
    pr_err!("bad PDU from the target ({} bytes): {:?}\n", byte_len, e);
    Failure::MalformedPdu
}

/// Every PDU but a SCSI Response: NOP-In, and the rare ones (login,
/// text, logout, TMF, asynchronous messages), kept out of the common
/// path. `bytes` were parsed already, by [`deliver`]: parsed again here,
/// so that the common path hands over nothing it had to build.
/// `byte_len` and `invalidated` are the completion's: its fields by value,
/// as a reference to it (a field of the `Received`) would keep the whole
/// `Received` in memory on the common path too.
#[inline(never)]
fn deliver_other(
    ep: &IserConn,
    rcu: &RcuRead,
    res: &Res,
    bytes: &[u8],
    byte_len: u32,
    invalidated: Option<u32>,
) -> FailResult {
    let (pdu, bhs, data) = match RxPdu::view(bytes, usize::from_safe_cast(byte_len)) {
        Ok(v) => (v.pdu, &Bhs(*v.bhs), v.data),
        Err(e) => return Err(malformed(byte_len, e)),
    };
    if matches!(pdu.opcode, TargetOpcode::DataIn | TargetOpcode::R2t) {
        pr_err!("target sent {:?}, which iSER forbids\n", pdu.opcode);
        return Err(Failure::DataInOrR2t);
    }
    // Only a SCSI Response may invalidate (its own task's rkey).
    if let Some(rkey) = invalidated {
        return Err(foreign(rkey, pdu.opcode, pdu.itt));
    }
    if pdu.opcode == TargetOpcode::AsyncMessage && !ep.async_allowed() {
        ep.counters.async_refused.add(1, Relaxed);
        pr_err!(
            "target sent more than {} async messages in a second\n",
            ASYNC_PER_SEC
        );
        return Err(Failure::AsyncFlood);
    }
    match pdu.opcode {
        TargetOpcode::TextResponse => {
            ep.counters.text_rsps.add(1, Relaxed);
        }
        TargetOpcode::LogoutResponse => {
            // libiscsi takes a Logout Response for any management ITT:
            // only the answer to riser's own Logout Request ends the
            // session (then the target's disconnect is no failure).
            let ours = res
                .cmds
                .track()
                .lock()
                .logout_itt
                .take_if(|i| *i == pdu.itt)
                .is_some();
            if !ours {
                pr_err!(
                    "target sent a Logout Response for ITT {:#x}, which answers no Logout Request\n",
                    pdu.itt
                );
                return Err(Failure::LogoutWithoutLogout);
            }
            ep.logged_out.store(true, Release);
        }
        TargetOpcode::TmfResponse => {
            // It carries no data (RFC 7143 11.6); libiscsi refuses one
            // that does, which a held one (handed on without its data)
            // would get past.
            if !data.is_empty() {
                pr_err!(
                    "target sent a TMF Response with {} bytes of data\n",
                    data.len()
                );
                return Err(Failure::TmfWithData);
            }
            // Only the answer to the one TMF outstanding, once:
            // libiscsi would take any other (a ping's ITT, or the
            // TMF's a second time) as that TMF's, and hand back the
            // commands it ended while the target can still reach them.
            let req = {
                let mut t = res.cmds.track().lock();
                if response::answers_tmf(t.tmf.as_ref(), pdu.itt) {
                    t.tmf.take()
                } else {
                    None
                }
            };
            let Some(req) = req else {
                pr_err!(
                    "target sent a TMF Response for ITT {:#x}, which answers no outstanding TMF\n",
                    pdu.itt
                );
                return Err(Failure::TmfWithoutTmf);
            };
            // Held back until the commands it ended are out of the
            // target's reach; the last invalidation hands it on.
            if res.cmds.tmf_response(&res.conn, req, bhs)? {
                return Ok(());
            }
        }
        _ => {}
    }
    if pdu.opcode == TargetOpcode::LoginResponse
        && login::login_ok(bhs)
        && login::enters_full_feature(bhs)
    {
        if res.ff_posted.xchg(true, Full) {
            pr_err!("target sent a second full-feature Login Response\n");
            return Err(Failure::SecondFullFeature);
        }
        // Post the full-feature receives before libiscsi sees the last
        // login response, so the target's first PDU finds one.
        let tags = if ep.discovery.load(Relaxed) {
            res.disc_recvs
                .as_ref()
                .map(|&first| first..first.saturating_add(super::DISCOVERY_RECVS))
        } else {
            res.ff_recvs.as_ref().map(|&n| 1..n.saturating_add(1))
        };
        let Some(tags) = tags else {
            return Err(Failure::NoFullFeatureBuffers);
        };
        for tag in tags {
            if res.conn.post_recv(tag).is_err() {
                return Err(Failure::FullFeaturePost);
            }
        }
    }
    hand_on(ep, rcu, None, bhs.bytes(), data)
}

/// A receive (`recv`) or a send completed in error: flushed at
/// teardown, or failed, which fails the connection. What a send's tag
/// held is released by the caller all the same.
#[cold]
pub(super) fn wc_failed(ep: &IserConn, recv: bool, tag: u32, wc: Wc) {
    ep.counters.completion_failed(&wc);
    trace::wc_error(trace::id(ep), recv, tag, wc.status);
    if wc.flushed() {
        return;
    }
    if recv {
        pr_err!("receive failed with status {}\n", wc.status);
        ep.fail(Failure::RecvError);
    } else {
        pr_err!("send (tag {}) failed with status {}\n", tag, wc.status);
        ep.fail(Failure::SendError);
    }
}

/// A SEND (or a LOCAL_INV) completed, with `done` holding its tag:
/// the event of the command it belongs to, the Data-Out header or
/// control buffer it held given back. Called from the QP's completion
/// handler (softirq).
///
/// The common one, a command's SEND completed before its response came,
/// goes in line with nothing but the slot word's exchange; everything
/// else goes out of line, so that this path spills nothing.
#[inline(always)]
pub(super) fn completed(ep: &IserConn, done: SendDone<'_, Slot>, wc: Wc, rcu: &RcuRead) {
    let mut delayed = false;
    if let Some(cmd) = done.cmd().filter(|_| wc.ok()) {
        if let Some(res) = ep.res_in(rcu) {
            fault::delay_send_done();
            delayed = true;
            if cmd.data().send_completed_untouched() {
                // As below: the tag is free before the command may
                // complete.
                done.release();
                if res.cmds.tmf_waits() {
                    completed_held(ep, res);
                }
                return;
            }
        }
    }
    completed_other(ep, done, wc.status, wc.byte_len, delayed);
}

/// A held TMF Response that a send completion may have freed.
#[inline(never)]
fn completed_held(ep: &IserConn, res: &Res) {
    after_events(ep, res, None);
}

/// [`completed`] for every completion but the common one (`delayed`: the
/// test build's delay was taken already). The completion's fields by
/// value, as in [`deliver_other`]: a send's completion invalidates
/// nothing.
#[inline(never)]
fn completed_other(
    ep: &IserConn,
    done: SendDone<'_, Slot>,
    status: u32,
    byte_len: u32,
    delayed: bool,
) {
    let wc = Wc {
        status,
        byte_len,
        invalidated: None,
    };
    let tag = done.tag();
    if !wc.ok() {
        wc_failed(ep, false, tag, wc);
    }
    if tag == UNSIGNALED_TAG {
        return;
    }
    let Some(res) = ep.res() else {
        // Being torn down: what the tags held goes with the resources,
        // after the QP and MRs are destroyed.
        return;
    };
    if !delayed {
        fault::delay_send_done();
    }
    // A failed completion is no event of the command: the connection
    // fails, and the teardown ends the command after the drain.
    let ev = match res.tx.tags().kind(tag) {
        Some(SendTag::Inv(idx)) => wc
            .ok()
            .then(|| res.cmds.slot_event(&res.conn, idx, slot::inv_done)),
        Some(SendTag::DataOut(i)) => {
            // The header is free once the tag is: the device read it.
            done.release();
            let owner = res.tx.dataouts().done(i);
            let ev = owner
                .filter(|_| wc.ok())
                .map(|idx| res.cmds.slot_event(&res.conn, idx, slot::data_out_done));
            return after_events(ep, &res, ev);
        }
        // A command SEND: nothing else is posted on a slot's tag while
        // its command waits for that (a command's buffered SEND needs
        // an idle tag, and its task holds the slot). If the command does
        // not wait for it, the SEND was a control PDU's, whose reference
        // the tag holds (as a failed completion's, which is no event of a
        // command: a command SEND's tag holds none).
        Some(SendTag::Slot(idx)) if wc.ok() => match res.cmds.send_completed(&res.conn, idx) {
            Some(ev) => Some(ev),
            None => return control_done(ep, &res, done),
        },
        // The marker posted once the target hung up: every completion
        // before it, the receives of what the target sent last among them,
        // has been handled. The CM handler waits for this to fail the
        // connection.
        Some(SendTag::Marker) => {
            done.release();
            ep.flushed.store(true, Release);
            return after_events(ep, &res, None);
        }
        // A control PDU's SEND.
        _ => return control_done(ep, &res, done),
    };
    // The tag is free for the slot's next SEND before the command may
    // complete (and its slot be reused).
    done.release();
    after_events(ep, &res, ev);
}

/// A control PDU's SEND completed (`done`): the task reference its tag
/// held, if any, goes once the tag is free.
fn control_done(ep: &IserConn, res: &Res, done: SendDone<'_, Slot>) {
    let r = res
        .cmds
        .track()
        .lock()
        .send_completed(done.tag(), Some(done.post()));
    done.release();
    drop(r);
    after_events(ep, res, None);
}

/// What the events of a completion leave to do: the connection's
/// failure, the reference of a command they ended, a held TMF
/// Response they released.
#[inline(always)]
fn after_events(ep: &IserConn, res: &Res, ev: Option<Done>) {
    // (The send tag, if any, was released by the caller.)
    if let Some(d) = ev {
        if let Some(why) = d.failure {
            ep.fail(why);
        }
        // Outside every lock: the last reference frees the task.
        if let Some(t) = d.task {
            drop(t);
        }
    }
    if let Some(bhs) = res.cmds.events_done(&res.conn) {
        ep.deliver_held(bhs);
    }
}

impl QpHandler for IserConn {
    type CmdData = Slot;

    fn qp_event(&self, ev: AsyncEvent) {
        // The provider may report from atomic context, under locks
        // libiscsi's failure path could meet: reported from a workqueue.
        if let AsyncEvent::QpError(_) = ev {
            self.fail_later(Failure::QpError);
        }
    }

    #[inline(always)]
    fn recv_done(&self, rx: Received<'_, Self>) {
        // One read section for the whole receive (the callback's): the
        // resources and, once the PDU is checked, libiscsi's connection.
        let rcu = rx.rcu();
        let Some(res) = self.res_in(rcu) else {
            return;
        };
        let wc = rx.wc();
        if !wc.ok() {
            wc_failed(self, true, rx.tag(), *wc);
            return;
        }
        received(self, rcu, res, rx);
    }

    #[cold]
    fn repost_failed(&self, tag: u32, e: Error) {
        if self.is_up() {
            // One receive fewer than the target may send: its next PDUs
            // would stall the connection (RNR). Fail it now.
            pr_err!("cannot repost a receive (tag {}): {:?}\n", tag, e);
            self.fail(Failure::RepostFailed);
        }
    }

    #[inline]
    fn send_done(&self, done: SendDone<'_, Slot>, wc: Wc, rcu: &RcuRead) {
        completed(self, done, wc, rcu);
    }
}
