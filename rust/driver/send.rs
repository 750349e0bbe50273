// SPDX-License-Identifier: GPL-2.0

//! The send path: control PDUs, SCSI commands with their registration and
//! immediate data, unsolicited Data-Outs (iser_initiator.c's send half).
//! Their completions are `recv.rs`'s.

use super::{
    conn::{
        IserConn,
        Res, //
    },
    failure::Failure,
    memory::{
        SendRef,
        Track, //
    },
    tags::{
        Reserved,
        SendTag,
        CTRL_TX, //
    },
    Iser,
    LOGIN_DATA, //
};
use crate::{
    fault::{
        self,
        Site, //
    },
    iscsi::{
        Direction,
        XmitTask, //
    },
    kernel_ext::slot::SlotToken,
    proto::{
        iser::{
            IserHeader,
            StagVa,
            ISER_HDR_LEN, //
        },
        login,
        pdu::{
            Bhs,
            HEADERS_LEN, //
        },
        plan::{
            self,
            Advert,
            Command,
            DataDir,
            Exposure,
            Key,
            Plan,
            PlanError,
            Shape, //
        },
        slot,
        tmf, //
    },
    rdma::conn::{
        Access,
        BufRef,
        CmdClaim,
        CmdPost,
        CmdSend,
        Registration,
        SendOp,
        Sge, //
    },
    trace, //
};
use core::cell::Cell;
use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;
use kernel::sync::atomic::Relaxed;

/// Sends a login, text, NOP-Out, TMF or logout PDU. Out of line: it
/// shares `xmit_task` with the SCSI commands, which it would otherwise
/// weigh down.
#[inline(never)]
pub(super) fn control<'a>(res: &Res, task: &XmitTask<'a, Iser>, slot: SlotToken<'a>) -> Result {
    let bhs = Bhs(task.bhs());
    let r = control_pdu(res, task, slot, &bhs);
    if let Err(e) = r {
        // iscsid reports only that the PDU could not be sent.
        pr_warn!(
            "cannot send control PDU (opcode {:#04x}): {:?}\n",
            login::opcode(&bhs),
            e
        );
    }
    r
}

/// Where a control PDU is sent from.
enum CtrlBuf<'a> {
    /// The task slot's own header buffer, on the slot's tag (`u32`):
    /// written and sent through a claim of the slot, as a command is.
    Slot(u32),
    /// Control buffer and tag `u32`.
    Ctrl(u32, BufRef<'a>),
}

/// Picks the send tag and buffer of a control PDU: the task slot's own
/// header buffer when the PDU has no data and the slot's tag is free,
/// else a free control buffer. A tag is free when its last SEND has
/// completed and no task waits on it (`puts`), so nothing is written
/// into a buffer the device may still read.
fn control_buffer<'a>(res: &'a Res, t: &Track, idx: u32, data_len: usize) -> Result<CtrlBuf<'a>> {
    if data_len > LOGIN_DATA {
        return Err(EINVAL);
    }
    let free = |tag: u32| {
        res.conn.send_tag_idle(tag)
            && t.puts
                .get(usize::from_safe_cast(tag))
                .is_some_and(Option::is_none)
    };
    let own = res.tx.tags().tag(SendTag::Slot(idx));
    if data_len == 0 && free(own) {
        return Ok(CtrlBuf::Slot(own));
    }
    let tag = (0..CTRL_TX).find(|tag| free(*tag)).ok_or(EBUSY)?;
    Ok(CtrlBuf::Ctrl(tag, res.tx.ctrl_buf(tag).ok_or(EINVAL)?))
}

fn control_pdu<'a>(res: &Res, task: &XmitTask<'a, Iser>, slot: SlotToken<'a>, bhs: &Bhs) -> Result {
    let data = task.mgmt_data();
    let hdrs = headers(IserHeader::default(), bhs)?;
    // A PDU that expects no response is released by the layer once
    // sent; this reference keeps its slot (and header buffer) until the
    // device has read it.
    let keep = if task.reserved_itt() {
        Some(task.get_ref().ok_or(EINVAL)?)
    } else {
        None
    };
    // Held until posted: a send completion releases a tag's task
    // under this lock.
    let mut t = res.cmds.track().lock();
    let from = control_buffer(res, &t, task.index(), data.len())?;
    if let CtrlBuf::Ctrl(_, buf) = &from {
        buf.write(0, &hdrs)?;
        buf.write(HEADERS_LEN, data)?;
    }
    if login::opcode(bhs) == login::OP_LOGIN_REQ {
        // The large login receive is posted for every login round (a
        // CHAP login takes several); it is still posted if the previous
        // round had no answer.
        match res.conn.post_recv(0) {
            Ok(()) | Err(EBUSY) => {}
            Err(e) => return Err(e),
        }
    }
    let tag = match from {
        CtrlBuf::Slot(tag) => {
            let claim = res.conn.claim_cmd(slot)?;
            claim
                .post(&CmdPost {
                    reg: None,
                    send: CmdSend::Buffered {
                        hdr: &hdrs,
                        data: None,
                    },
                })
                .map_err(|r| r.err)?;
            claim.release();
            tag
        }
        CtrlBuf::Ctrl(tag, buf) => {
            let sge = buf.sge(0, HEADERS_LEN + data.len(), res.conn.pd())?;
            res.conn.post_send(SendOp::Send {
                tag,
                sges: &[sge],
                keep: Some(buf),
            })?;
            tag
        }
    };
    trace::pdu_sent(res.trace_id, bhs.bytes(), 0);
    if let Some(r) = keep {
        // The post just made: the completion cannot take the tag's
        // bookkeeping before this lock is dropped.
        let post = res.conn.send_tag_posts(tag).unwrap_or(0);
        let slot = t.puts.get_mut(usize::from_safe_cast(tag)).ok_or(EINVAL)?;
        *slot = Some(SendRef { task: r, post });
    }
    // What the responses to these end is decided when they arrive.
    if let Some(req) = tmf::tmf_request(bhs) {
        t.tmf = Some(req);
    } else if tmf::is_logout_request(bhs) {
        t.logout_itt = Some(bhs.itt());
    }
    Ok(())
}

/// Sends a SCSI command on `ep`: registration, command PDU (with
/// immediate data), unsolicited Data-Outs.
///
/// Before anything is posted, the slot's completion word says what the
/// command will owe (its response, its SEND's and Data-Outs'
/// completions, the key it gives the target), so that libiscsi
/// completes it only when the target can no longer reach its memory.
/// A command that is on the wire but whose connection must fail (a
/// Data-Out that could not follow it, a response before its post) is
/// reported sent: libiscsi must not requeue it, and recovery fails it.
///
/// `dir` and `len` are the task's direction and data length, which the
/// caller read.
#[inline(always)]
pub(super) fn command<'a>(
    ep: &IserConn,
    res: &Res,
    task: &mut XmitTask<'a, Iser>,
    slot: SlotToken<'a>,
    dir: Direction,
    len: u32,
) -> Result {
    // The common shapes each get a copy of the rest with their plan known
    // where it is read, so that its branches fold: a READ through an MR
    // with an inline SEND, a WRITE whose data all goes as immediate data
    // from one segment, and a WRITE with immediate data whose rest the
    // target reads through an MR. The same code, the same checks. Each
    // copy fails the connection and counts where it knows to, so that
    // only an error code comes out of the match (a value of several
    // parts would be packed at each copy's end and unpacked after).
    let shape = plan_command(res, task, dir, len).map_err(|e| not_sent(ep, e))?;
    let sent = match shape {
        Shape::MrReadInline => command_planned(ep, res, task, slot, Plan::MR_READ_INLINE, len),
        Shape::ImmediateWrite => command_planned(ep, res, task, slot, Plan::IMMEDIATE_WRITE, len),
        Shape::MrWrite { offset } => {
            command_planned(ep, res, task, slot, Plan::mr_write(offset), len)
        }
        Shape::Other(plan) => task.detached(|t| command_general(ep, res, t, slot, plan, len)),
    };
    sent.map_err(|e| not_sent(ep, e))
}

/// [`command_planned`] for any other plan: out of line, so that the
/// common shapes' copies are what the transmit callback holds.
#[inline(never)]
fn command_general<'a>(
    ep: &IserConn,
    res: &Res,
    task: &mut XmitTask<'a, Iser>,
    slot: SlotToken<'a>,
    plan: Plan,
    len: u32,
) -> Result {
    command_planned(ep, res, task, slot, plan, len)
}

/// Counts on `ep` a command that went out, `unregistered` if its data
/// did.
#[inline(always)]
fn counted(ep: &IserConn, unregistered: bool) {
    if unregistered {
        ep.counters.unreg_cmds.add(1, Relaxed);
    }
}

/// A command went out but its connection must fail (`why`): from a
/// workqueue, as libiscsi holds the session's frwd_lock here, which
/// failing the connection takes. The command is reported sent (libiscsi
/// must not requeue it), and recovery fails it.
#[cold]
#[inline(never)]
fn failed(ep: &IserConn, why: Failure) {
    ep.fail_later(why);
}

/// A command not sent (`e`): a send queue found full is counted.
#[cold]
fn not_sent(ep: &IserConn, e: Error) -> Error {
    if e == EAGAIN || e == ENOMEM {
        ep.counters.sq_full.add(1, Relaxed);
    }
    e
}

/// [`command`] once planned (`plan`).
#[inline(always)]
fn command_planned<'a>(
    ep: &IserConn,
    res: &Res,
    task: &mut XmitTask<'a, Iser>,
    slot: SlotToken<'a>,
    plan: Plan,
    len: u32,
) -> Result {
    // The task slot's MR, header buffer and send tag, for this command
    // alone. Busy while the slot's last SEND from its header buffer is
    // being read by the device (the map, or a buffered post, says so):
    // libiscsi requeues.
    let claim = res.conn.claim_cmd(slot)?;
    let r = command_claimed(ep, res, task, &claim, plan, len);
    // What the claim holds goes back here, on every path, in line (a drop
    // of the claim out of line would take its address, and keep it in
    // memory on the common path).
    claim.release();
    r
}

/// [`command_planned`] once the slot is claimed (`claim`).
#[inline(always)]
fn command_claimed(
    ep: &IserConn,
    res: &Res,
    task: &mut XmitTask<'_, Iser>,
    claim: &CmdClaim<'_, IserConn>,
    plan: Plan,
    len: u32,
) -> Result {
    let idx = claim.index();
    let unregistered = plan.key == Key::GlobalRkey;
    // Check, then map: the slot's last command owes nothing (the layer's
    // `map` checks that the MR's last registration the target was given
    // is invalid) before anything is mapped into its MR.
    let quiet = res.cmds.quiet(claim)?;
    let sg = task.mapping();
    let reg = match (plan.key, sg) {
        (Key::None, _) => None,
        (Key::LocalDma, Some(sg)) => {
            Some(Registration::local_only(sg, res.conn.pd()).ok_or(EINVAL)?)
        }
        // always_register=0 and one segment: no MR at all.
        (Key::GlobalRkey, Some(sg)) => {
            Some(Registration::unregistered(sg, res.conn.pd()).ok_or(EINVAL)?)
        }
        (Key::Mr, Some(sg)) => Some(claim.map(sg).map_err(busy_again)?),
        _ => return Err(EINVAL),
    };
    if reg.as_ref().is_some_and(|r| r.len() < len) {
        return Err(EINVAL);
    }
    let iser = advertise(plan.advert, reg.as_ref());
    let mut iser_hdr = [0u8; ISER_HDR_LEN];
    iser.encode(&mut iser_hdr).map_err(|_| EINVAL)?;
    // The iSER header goes in front of the BHS in the task slot, and
    // the two are sent from there (inline) or copied once into the
    // slot's header buffer. Before the slot's word is published: from
    // there on, nothing may fail without `not_posted`.
    let hdrs = task.prefixed_bhs(&iser_hdr)?;
    let data = match &reg {
        Some(r) if plan.with_imm => Some(r.sge(0, task.imm_count())?),
        _ => None,
    };
    let send = how_sent(res, &plan, hdrs, data.as_ref());
    // Reserve the Data-Out headers first: once the command is posted,
    // its Data-Outs must go out. Given back when `reserved` goes, as
    // far as they were not taken.
    let reserved = res.tx.dataouts().reserve(plan.dataouts).ok_or(EAGAIN)?;
    // The slot's word, before anything is posted: once it is, a response
    // on another CPU may complete the command. The last step that may
    // fail before the post.
    let post = slot_post(&plan, task.hdr_itt());
    // Test build: the window between libiscsi's allocation of the task
    // and the word, held open.
    fault::hold_command(post.itt);
    // The key the command gives the target, recorded before the word.
    let rkey = reg
        .as_ref()
        .filter(|_| plan.remote_mr())
        .map_or(0, |r| r.rkey());
    let published = quiet.publish(task, task.hdr_lun(), &post, rkey)?;
    // Test build: the window between the word and the post, held open.
    fault::hold_posting(post.itt);
    let cmd = CmdPost {
        reg: reg
            .as_ref()
            .filter(|_| plan.key == Key::Mr)
            .map(|r| (r, access(plan.exposure))),
        send,
    };
    if let Err(r) = claim.post(&cmd) {
        return not_posted(res, idx, r.err, plan.remote_mr() && r.reg_posted).map(|broken| {
            if let Some(why) = broken {
                failed(ep, why);
            }
            counted(ep, unregistered);
        });
    }
    // The registration and SEND are on the send queue: what a response
    // in the window left waiting (its LOCAL_INV, or its completion) goes
    // now.
    if let Err(idx) = res.cmds.posted(published) {
        posted_late(ep, res, idx);
    }
    let stag = iser.read.or(iser.write).map_or(0, |s| s.stag);
    if let Some(bhs) = hdrs.last_chunk() {
        trace::pdu_sent(res.trace_id, bhs, stag);
    }
    if plan.dataouts > 0 {
        if let Some(why) = send_dataouts(res, task, reg.as_ref(), reserved) {
            failed(ep, why);
        }
    }
    counted(ep, unregistered);
    Ok(())
}

/// Maps the command's data (how many segments it takes decides whether
/// it needs a registration), and plans how it is sent, its shape named
/// if it is a common one.
#[inline]
fn plan_command(
    res: &Res,
    task: &mut XmitTask<'_, Iser>,
    dir: Direction,
    len: u32,
) -> Result<plan::Shape> {
    let dir = match dir {
        Direction::None => DataDir::None,
        Direction::Read => DataDir::Read,
        Direction::Write => DataDir::Write,
        Direction::Bidi => DataDir::Bidi,
    };
    if matches!(dir, DataDir::Read | DataDir::Write) && len > 0 && task.mapping().is_none() {
        task.map_data(&res.dev.map)?;
    }
    plan::shape(&Command {
        dir,
        len,
        imm: task.imm_count(),
        unsol: task.unsol_len(),
        max_xmit: task.max_xmit_dlength(),
        segments: task.mapping().map_or(0, |sg| sg.count()),
        global_rkey: res.conn.pd().global_rkey().is_some(),
        max_inline: res.conn.max_inline(),
        // CAST: the headers are 76 bytes.
        headers: HEADERS_LEN as u32,
    })
    .map_err(unplanned)
}

/// The iSER header that gives the target the STag and address of the
/// registration `reg` the plan advertises.
#[inline(always)]
fn advertise(advert: Advert, reg: Option<&Registration<'_>>) -> IserHeader {
    let mut iser = IserHeader::default();
    if let Some(r) = reg {
        let at = |offset: u32| StagVa {
            stag: r.rkey(),
            va: r.iova() + u64::from(offset),
        };
        match advert {
            Advert::None => {}
            Advert::Read => iser.read = Some(at(0)),
            Advert::Write { offset } => iser.write = Some(at(offset)),
        }
    }
    iser
}

/// How the command PDU `hdrs` goes. A PDU without immediate data goes
/// inline when the QP takes it: the provider copies it while posting,
/// so the SEND needs no completion to protect a buffer (only a buffer
/// the device still reads must wait for one), and only one in
/// `signal_interval` is signaled, for the send queue's sake. Immediate
/// data (`data`) is sent from the SCSI buffer.
#[inline(always)]
fn how_sent<'a>(
    res: &Res,
    plan: &plan::Plan,
    hdrs: &'a [u8],
    data: Option<&'a Sge<'a>>,
) -> CmdSend<'a> {
    if plan.inline {
        CmdSend::Inline {
            bytes: hdrs,
            signaled: res.tx.inline_signaled(),
        }
    } else {
        CmdSend::Buffered { hdr: hdrs, data }
    }
}

/// What the command with ITT `itt` will owe, for its slot's word: its
/// SEND's completion unless inline, its Data-Outs' completions, and the
/// key it gives the target, if any (one its SENDs read through too
/// when its immediate data or Data-Outs go through its MR). No task
/// reference: until its response reaches libiscsi, libiscsi's own
/// holds the command, and the response takes one if anything is still
/// pending then.
#[inline(always)]
fn slot_post(plan: &plan::Plan, itt: u32) -> slot::Post {
    let sends_use_mr = plan.key == Key::Mr && (plan.with_imm || plan.dataouts > 0);
    let key = match (plan.remote_mr(), sends_use_mr) {
        (false, _) => slot::Key::None,
        (true, false) => slot::Key::Given,
        (true, true) => slot::Key::GivenSendsUseMr,
    };
    slot::Post {
        itt,
        send: !plan.inline,
        data_outs: plan.dataouts,
        key,
        hold: false,
    }
}

/// What a registration lets the target do: a write whose data all goes
/// by SEND (immediate data, Data-Outs) gives it no STag, and its MR no
/// remote access. Otherwise the target holds an rkey it can use until
/// it is invalidated.
#[inline]
fn access(e: Exposure) -> Access {
    match e {
        Exposure::Local => Access::Local,
        Exposure::RemoteRead => Access::RemoteRead,
        Exposure::RemoteWrite => Access::RemoteWrite,
    }
}

#[cold]
fn unplanned(e: PlanError) -> Error {
    if e == PlanError::Bidi {
        pr_err!("bidirectional commands are not supported over iSER\n");
    }
    EINVAL
}

/// A command posted whose slot word an event touched in the window (a
/// response that came before the post returned): what waited for the
/// post goes now (`Cmds::posted_late`).
#[cold]
#[inline(never)]
fn posted_late(ep: &IserConn, res: &Res, idx: u32) {
    let done = res.cmds.posted_late(&res.conn, idx);
    // The reference a response took is not the last: the layer's guard
    // holds the task for this call.
    drop(done.task);
    if let Some(why) = done.failure {
        failed(ep, why);
    }
}

/// Undoes what `send_command` set up for a command the provider
/// refused (`e`): the slot's word (the Data-Out headers reserved go
/// back with the reservation).
///
/// Says why the connection must fail when the registration of a key
/// for the target (`key_posted`) went out without its command.
#[cold]
fn not_posted(res: &Res, idx: u32, e: Error, key_posted: bool) -> Result<Option<Failure>> {
    // The target never got the key, but keys are guessable, and it
    // stays valid until invalidated: the command keeps its word (and
    // reference), and is reported sent: the connection fails (the
    // caller says why), recovery gives the command back, and the
    // teardown ends the word after the drain. A response that came
    // before (a target that answered a command it never got) was handed
    // to libiscsi: the command is reported sent too, and ends with it.
    let answered = Cell::new(false);
    let done = res.cmds.slot_event(&res.conn, idx, |w| {
        answered.set(!w.response_due());
        slot::not_posted(w, key_posted)
    });
    // The layer's guard holds the task for this call: not the last.
    drop(done.task);
    if let Some(f) = done.failure {
        return Ok(Some(f));
    }
    if answered.get() {
        return Ok(Some(Failure::AnsweredUnsent));
    }
    if key_posted {
        return Ok(Some(Failure::CommandPost));
    }
    Err(busy_again(e))
}

/// A slot busy for now (its last SEND from a buffer not completed) is a
/// command to send again: libiscsi requeues it.
fn busy_again(e: Error) -> Error {
    if e == EBUSY {
        EAGAIN
    } else {
        e
    }
}

/// Sends the unsolicited Data-Out PDUs of a WRITE whose command is
/// posted, with the headers `reserved` for it (which its slot's word
/// counts) through its registration `r`. Nothing can be taken back now:
/// a failure fails the connection (libiscsi recovers the command)
/// instead of returning an error that would requeue it. The command's
/// reference holds its data mapped until the last Data-Out's SEND
/// completed.
fn send_dataouts(
    res: &Res,
    task: &XmitTask<'_, Iser>,
    r: Option<&Registration<'_>>,
    mut reserved: Reserved<'_>,
) -> Option<Failure> {
    let idx = task.index();
    let failed = loop {
        let Some(d) = task.next_data_out() else {
            break None;
        };
        if reserved.left() == 0 {
            task.data_out_failed();
            break Some(Failure::DataOutExcess);
        }
        let (Some(r), Some(h)) = (r, reserved.take(idx)) else {
            task.data_out_failed();
            break Some(Failure::NoDataOutHeader);
        };
        let send_one = || -> Result {
            let buf = res.tx.dataout(h).ok_or(EINVAL)?;
            buf.write(0, &headers(IserHeader::default(), &Bhs(d.bhs))?)?;
            if fault::hit(Site::PostDataOut) {
                return Err(EIO);
            }
            let sges = [
                buf.sge(0, HEADERS_LEN, res.conn.pd())?,
                r.sge(d.offset, d.len)?,
            ];
            res.conn.post_send(SendOp::Send {
                tag: res.tx.tags().tag(SendTag::DataOut(h)),
                sges: &sges,
                keep: Some(buf),
            })
        };
        let sent = send_one();
        if sent.is_err() {
            reserved.untake(h);
            task.data_out_failed();
            break Some(Failure::DataOutPost);
        }
        trace::pdu_sent(res.trace_id, &d.bhs, 0);
        task.data_out_sent(&d);
    };
    let left = reserved.left();
    if left == 0 {
        return failed;
    }
    // What was reserved and not used: the word's count first (the
    // command's LOCAL_INV may be due now), then the headers, with the
    // reservation.
    let done = res
        .cmds
        .slot_event(&res.conn, idx, |w| slot::data_outs_unsent(w, left));
    drop(reserved);
    // libiscsi's own reference is held while the task is sent.
    drop(done.task);
    failed.or(done.failure)
}

/// The iSER header `iser` and the BHS `bhs`, as one PDU's headers.
fn headers(iser: IserHeader, bhs: &Bhs) -> Result<[u8; HEADERS_LEN]> {
    let mut h = [0u8; HEADERS_LEN];
    iser.encode(&mut h[..ISER_HDR_LEN]).map_err(|_| EINVAL)?;
    h[ISER_HDR_LEN..].copy_from_slice(bhs.bytes());
    Ok(h)
}
