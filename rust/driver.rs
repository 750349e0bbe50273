// SPDX-License-Identifier: GPL-2.0

//! The driver: module state and the `iser` transport's behaviour (what
//! ib_iser's iscsi_iser.c does), over the files of its parts, split the way
//! ib_iser splits its C:
//!
//! - `device`: the per-device context and the `ib_client` (iser_verbs.c);
//! - `conn`: the iSER connection and its RDMA CM state machine
//!   (iser_verbs.c);
//! - `res`: a connected connection's QP, buffers and bookkeeping;
//! - `send` and `recv`: the send path, and the receive path with the
//!   completions (iser_initiator.c);
//! - `memory`: what the target can reach of each command and when that
//!   ends: registration, invalidation, the references that hold a command
//!   (iser_memory.c).
//!
//! It uses only the safe layers; no `unsafe` here or below.

#![forbid(unsafe_code)]

mod conn;
mod device;
mod failure;
mod memory;
mod recv;
mod send;
mod stats;
mod tags;
mod tx;

use crate::{
    iscsi::{
        self,
        caps,
        host_param,
        param,
        Attr,
        Conn,
        ConnSlot,
        CustomStats,
        Direction,
        PduRewrite,
        Registry,
        SessionLimits,
        Task,
        Transport,
        TransportOps,
        XmitTask, //
    },
    kernel_ext::rcu::RcuRead,
    kernel_ext::registry::registry,
    kernel_ext::scsi::{
        HostLimits,
        HostTemplate, //
    },
    kernel_ext::slot::{
        SlotDomain,
        SlotToken, //
    },
    kernel_ext::wq::{
        ModQueue,
        QueueReg, //
    },
    proto::{
        login,
        pdu::{
            Bhs,
            BHS_LEN,
            HEADERS_LEN, //
        },
        plan,
        sizing::{
            self,
            Params, //
        },
    },
    rdma::{
        conn::{
            CmdSlotsMade,
            DmaSg,
            RecvBuf, //
        },
        Client, //
    },
};
use conn::IserConn;
use core::net::SocketAddr;
use kernel::num::casts::FromSafeCast;
use kernel::sync::atomic::Relaxed;
use kernel::{
    alloc::KVec,
    prelude::*,
    sync::{
        Arc,
        ArcBorrow, //
    },
};
use tx::TaskBufs;

/// The module: the registered transport, the queue that frees torn-down
/// connections, the RDMA client and the SCSI host template, torn down in
/// that order.
#[pin_data]
pub(crate) struct Riser {
    // Fields drop in declaration order: the transport (with its host
    // template) goes first, so no session can be made once the RDMA client
    // is being released; then the release queue, whose drop runs every
    // release still queued while the client (and so each device's context)
    // is still there.
    #[pin]
    transport: Transport<Iser>,
    releases: QueueReg,
    #[pin]
    client: Client<Iser>,
    params: Params,
}

/// The `iser` transport.
pub(crate) struct Iser;

/// Where torn-down connections free their resources (see
/// `IserConn::shut`): made at module load, drained at unload.
static RELEASES: ModQueue = ModQueue::new();

/// Time allowed for address and route resolution, as ib_iser.
const RESOLVE_TIMEOUT_MS: u32 = 1000;
/// The login buffers' data size (libiscsi's login data limit).
const LOGIN_DATA: usize = 8192;
/// What the initiator receives per PDU when its login declares nothing.
const DEFAULT_RECV_DSL: u32 = 8192;
/// Largest full-feature receive of a normal session: the declared
/// InitiatorRecvDataSegmentLength up to this (ib_iser's hold 128 bytes,
/// whatever iscsid declares, and a longer PDU drops its connection).
const FF_RECV_CAP: u32 = 8192;
/// Largest receive of a discovery session (SendTargets responses).
const DISCOVERY_RECV_CAP: u32 = 262144;
/// Receives posted by a discovery session.
const DISCOVERY_RECVS: u32 = 8;
/// Commands a connection is sized for (ib_iser's ISER_DEF_XMIT_CMDS_MAX);
/// a session asks for at most this many.
const DEF_XMIT_CMDS_MAX: u32 = 512;
/// How long teardown after a logout waits for the target to close.
const LOGOUT_GRACE_MS: u32 = 1000;
// The wire's BHS (proto) is the one libiscsi builds (iscsi) and the
// tracepoints copy: checked here, where the layers meet. (trace's length
// is checked by the types of the calls that pass proto's headers.)
const _: () = assert!(BHS_LEN == crate::iscsi::BHS_LEN);
/// Async messages a target may send in one second. libiscsi passes each to
/// iscsid over netlink; a flood fills iscsid's socket, and the event that
/// reports the connection's failure is then lost, so the session never
/// recovers. A target that sends more is failed while that event still
/// gets through.
const ASYNC_PER_SEC: u32 = 16;

/// An IPv4 or IPv6 address and port, printable in log lines
/// (`192.0.2.1:3260`, `[fd00::1]:3260`).
struct Addr(SocketAddr);

impl kernel::fmt::Display for Addr {
    fn fmt(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        core::fmt::Display::fmt(&self.0, f)
    }
}

#[vtable]
impl TransportOps for Iser {
    const NAME: &'static CStr = c"iser";
    const CAPS: u32 = caps::RECOVERY_L0 | caps::MULTI_R2T | caps::TEXT_NEGO;
    type Ep = IserConn;
    type DataMap = DmaSg;

    registry!(Registry<Iser>);

    fn attr_visible(attr: Attr) -> bool {
        match attr {
            Attr::Host(p) => matches!(
                p,
                host_param::NETDEV_NAME | host_param::HWADDRESS | host_param::INITIATOR_NAME
            ),
            Attr::Param(p) => matches!(
                p,
                param::MAX_RECV_DLENGTH
                    | param::MAX_XMIT_DLENGTH
                    | param::HDRDGST_EN
                    | param::DATADGST_EN
                    | param::CONN_ADDRESS
                    | param::CONN_PORT
                    | param::EXP_STATSN
                    | param::PERSISTENT_ADDRESS
                    | param::PERSISTENT_PORT
                    | param::PING_TMO
                    | param::RECV_TMO
                    | param::INITIAL_R2T_EN
                    | param::MAX_R2T
                    | param::IMM_DATA_EN
                    | param::FIRST_BURST
                    | param::MAX_BURST
                    | param::PDU_INORDER_EN
                    | param::DATASEQ_INORDER_EN
                    | param::TARGET_NAME
                    | param::TPGT
                    | param::USERNAME
                    | param::PASSWORD
                    | param::USERNAME_IN
                    | param::PASSWORD_IN
                    | param::FAST_ABORT
                    | param::ABORT_TMO
                    | param::LU_RESET_TMO
                    | param::TGT_RESET_TMO
                    | param::IFACE_NAME
                    | param::INITIATOR_NAME
                    | param::DISCOVERY_SESS
            ),
            Attr::Other => false,
        }
    }

    fn session_limits(ep: Option<&Arc<IserConn>>, cmds_max: u16) -> Result<SessionLimits> {
        // The parameter is writable at run time: read it now, not at load.
        let params = crate::params::current()?;
        let Some(ep) = ep else {
            // iscsid older than 2.0-870 passes no endpoint.
            return Ok(SessionLimits {
                can_queue: cmds_max.min(512),
                sg_tablesize: params.sg_tablesize(),
                max_sectors: params.max_sectors,
                max_lun: params.max_lun,
                virt_boundary_4k: true,
            });
        };
        if !ep.is_up() {
            pr_err!("session on a connection that is not up\n");
            return Err(ENOTCONN);
        }
        let s = ep.res().ok_or(ENOTCONN)?.sizing;
        let max_sectors = params.max_sectors.min(s.max_sectors);
        if max_sectors < params.max_sectors_given {
            // As ib_iser says it: the device's registrations map fewer
            // pages than a command of max_sectors needs, or riser's own
            // limit does.
            pr_warn!(
                "max_sectors was reduced from {} to {} (the device's fast-registration page list, or riser's {})\n",
                params.max_sectors_given,
                max_sectors,
                sizing::MAX_MAX_SECTORS
            );
        }
        if params.pi_enable {
            pr_warn!(
                "pi_enable=Y: the session to {} runs without T10-PI (riser does not offload it)\n",
                Addr(ep.dst)
            );
        }
        Ok(SessionLimits {
            can_queue: cmds_max.min(u16::try_from(s.max_cmds).unwrap_or(u16::MAX)),
            sg_tablesize: u16::try_from(s.sg_tablesize).unwrap_or(u16::MAX),
            max_sectors,
            max_lun: params.max_lun,
            virt_boundary_4k: true,
        })
    }

    fn ep_connect(dst: SocketAddr) -> Result<Arc<IserConn>> {
        IserConn::connect(dst)
    }

    fn ep_poll(ep: &Arc<IserConn>, timeout_ms: u32) -> Result<bool> {
        ep.poll(timeout_ms)
    }

    fn ep_disconnect(ep: Arc<IserConn>) {
        ep.shut();
    }

    fn ep_dst(ep: &IserConn) -> Option<SocketAddr> {
        Some(ep.dst)
    }

    fn ep_device(ep: &IserConn) -> Option<kernel::sync::aref::ARef<kernel::device::Device>> {
        ep.res().and_then(|r| r.dev.dev.parent())
    }

    fn conn_slot(ep: &IserConn) -> &ConnSlot {
        &ep.bound
    }

    fn bind(ep: &Arc<IserConn>, conn: &Conn) -> Result {
        if !ep.is_up() {
            pr_err!("bind: the connection is being torn down\n");
            return Err(EINVAL);
        }
        if !ep.params.always_register {
            pr_warn!(
                "session to {} runs with always_register=0: the target is given the PD's \
                 global rkey, which reaches all of memory until the connection ends\n",
                Addr(ep.dst)
            );
        }
        let room = ep.res().ok_or(ENOTCONN)?.tx.tags().cmds;
        if conn.cmds_max() > room {
            pr_err!(
                "bind: session has {} tasks, the connection {}\n",
                conn.cmds_max(),
                room
            );
            return Err(EINVAL);
        }
        // What each task of the session needs (a command slot with its
        // MR and header buffer, a receive for its response, and one per
        // unsolicited PDU), made here in process context, before the
        // login and as many as the session has tasks (as ib_iser does at
        // bind), not for the largest session and not on the login's path.
        make_task_slots(ep, conn.slot_domain(), conn.cmds_max())
            .and_then(|()| make_ff_recvs(ep, conn.cmds_max()))
            .inspect_err(|e| {
                pr_err!(
                    "bind: cannot make the task resources of the connection to {} \
                     ({} tasks): {:?}\n",
                    Addr(ep.dst),
                    conn.cmds_max(),
                    e
                )
            })
    }

    fn stop(ep: &Arc<IserConn>) {
        ep.shut();
    }

    fn send_pdu_hook(
        ep: &Arc<IserConn>,
        hdr: &[u8; BHS_LEN],
        data: &[u8],
    ) -> Result<Option<PduRewrite>> {
        let hdr = &Bhs(*hdr);
        if login::opcode(hdr) != login::OP_LOGIN_REQ {
            return Ok(None);
        }
        ep.counters.login_rounds.add(1, Relaxed);
        // The initiator declares what it receives per PDU in the full
        // feature phase; riser declares no more than its receives hold, so
        // every legal PDU fits (ib_iser's receives hold 128 bytes whatever
        // iscsid declares).
        let discovery = ep.discovery.load(Relaxed) || login::is_discovery(data);
        if discovery {
            ep.discovery.store(true, Relaxed);
        }
        let cap = if discovery {
            DISCOVERY_RECV_CAP
        } else {
            FF_RECV_CAP
        };
        let mut out = KVec::from_elem(0u8, data.len(), GFP_KERNEL)?;
        let rewrite = match login::declare_recv_limit(hdr, data, cap, &mut out) {
            Ok(Some(r)) => {
                out.truncate(r.len);
                pr_info!(
                    "declaring {}={} to the target (riser's receive size)\n",
                    r.key,
                    cap
                );
                Some(PduRewrite {
                    hdr: r.bhs.0,
                    data: out,
                })
            }
            Ok(None) => None,
            Err(e) => {
                pr_err!("cannot rewrite a Login Request from iscsid: {:?}\n", e);
                return Err(EINVAL);
            }
        };
        let text = rewrite.as_ref().map_or(data, |r| &r.data[..]);
        // Declared in this request or an earlier one of the login; RFC 7143
        // and RFC 7145 default to 8 KiB.
        if let Some(v) = login::declared_recv_dsl(text) {
            ep.recv_size.store(v.min(cap), Relaxed);
        }
        if !login::enters_full_feature(hdr) {
            return Ok(rewrite);
        }
        if ep.recv_size.load(Relaxed) == 0 {
            ep.recv_size.store(DEFAULT_RECV_DSL, Relaxed);
        }
        // The last login request: a discovery session's receives, as
        // large as SendTargets answers may be, are made now (a normal
        // session's were made at bind, `FF_RECV_CAP` each, which holds
        // whatever it declared).
        if discovery {
            make_discovery_recvs(ep).inspect_err(|e| {
                pr_err!(
                    "cannot make the discovery receives of the connection to {}: {:?}\n",
                    Addr(ep.dst),
                    e
                )
            })?;
        }
        Ok(rewrite)
    }

    fn max_recv_dlength(ep: &IserConn) -> Option<u32> {
        let n = ep.recv_size.load(Relaxed);
        (n != 0).then_some(n)
    }

    // Only a write with unsolicited Data-Outs has anything to check.
    const INIT_UNSOL_ONLY: bool = true;

    fn init_task(ep: &IserConn, task: &Task<'_, Self>) -> Result {
        // libiscsi turns any error of init_task into EIO, and fails the
        // command with DID_ABORT, which the midlayer does not retry: an I/O
        // error. A connection going down (the target hung up, the device
        // went, the failure not yet reported) must not refuse the command
        // here: `xmit_task` does, and libiscsi requeues a command it could
        // not send. (Refusing here lost two writes of faults.sh's rxe
        // removal to I/O errors, 2026-11-25.)
        if let Some((Direction::Write, len)) = task.scsi_command() {
            let Some(res) = ep.res() else {
                return Ok(());
            };
            let need =
                plan::dataouts(task.unsol_len(), task.max_xmit_dlength()).map_err(|_| EINVAL)?;
            let pool = res.tx.dataout_count();
            if need > pool {
                // Waiting cannot help: requeued, it would never go.
                // libiscsi fails the command (DID_ABORT) instead.
                pr_err!(
                    "a {}-byte write needs {} unsolicited Data-Outs, more than the \
                     connection's {}: failing it (the target's \
                     MaxRecvDataSegmentLength is {})\n",
                    len,
                    need,
                    pool,
                    task.max_xmit_dlength()
                );
                return Err(EINVAL);
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn xmit_task<'a>(
        ep: ArcBorrow<'_, IserConn>,
        task: &mut XmitTask<'a, Self>,
        slot: SlotToken<'a>,
        rcu: &RcuRead,
    ) -> Result {
        let res = ep.res_in(rcu).ok_or(ENODEV)?;
        // Read first: the task's fields after it, so that the mapping's
        // look at the command reuses this one's.
        let up = ep.is_up();
        // Read before sending: once posted, the task may complete (and be
        // cleaned up) on another CPU.
        let Some((dir, len)) = task.scsi_command() else {
            return task.detached(|t| send::control(res, t, slot));
        };
        // Going down: libiscsi requeues the command (see `init_task`).
        if !up {
            return Err(ENOTCONN);
        }
        let sent = send::command(&ep, res, task, slot, dir, len);
        // A TMF Response held while this command's word was being posted
        // may be free to go now that the post has returned (`posted` or
        // `not_posted` may have ended the word): libiscsi's session locks
        // are held here, so it goes from a workqueue. Read after those
        // events' fully ordered exchanges (see `Cmds::events_done`).
        if res.cmds.tmf_waits() {
            IserConn::deliver_held_later(ep);
        }
        sent?;
        stats::Counters::bump(ep.counters.octets(dir), u64::from(len));
        Ok(())
    }

    fn data_octets(ep: &IserConn) -> (u64, u64) {
        (
            ep.counters.octets(Direction::Write).load(Relaxed),
            ep.counters.octets(Direction::Read).load(Relaxed),
        )
    }

    fn custom_stats(ep: &IserConn, out: &mut CustomStats<'_>) {
        ep.counters.fill(out);
    }
}

/// Makes `ep`'s command slots `0..tasks` with their MRs and header
/// buffers, claimed by the task slot tokens of `domain` (the session's),
/// and the tasks' Data-Out buffers; once (a second bind of the endpoint
/// finds them made, and is refused if it is to another session, whose
/// tasks' tokens could not claim them). Everything is allocated outside
/// the resources' read-side section (allocating may sleep), then
/// installed.
fn make_task_slots(ep: &IserConn, domain: SlotDomain, tasks: u32) -> Result {
    let (pd, pages, dev) = {
        let res = ep.res().ok_or(ENOTCONN)?;
        if res.tx.has_task_bufs() {
            return match res.conn.cmd_slots_domain() {
                Some(d) if d != domain => {
                    pr_err!("bind: the connection's task slots are another session's\n");
                    Err(EINVAL)
                }
                _ => Ok(()),
            };
        }
        let (most, pages) = res.conn.cmd_slot_caps();
        if tasks > most {
            return Err(EINVAL);
        }
        (res.conn.pd().clone(), pages, res.dev.dev.clone())
    };
    let made = CmdSlotsMade::new(
        &pd,
        &dev,
        tasks,
        pages,
        crate::proto::pdu::HEADERS_LEN,
        tx::HEADER_ALIGN,
        memory::Slot::new,
    )?;
    let bufs = TaskBufs::new(&dev, tasks)?;
    let res = ep.res().ok_or(ENOTCONN)?;
    match res.tx.give_task_bufs(bufs) {
        Ok(()) => {}
        Err(EBUSY) => return Ok(()),
        Err(e) => return Err(e),
    }
    res.conn.install_cmd_slots(made, domain)
}

/// Gives `ep`'s full-feature receives (tags `1..=n`) their buffers, once:
/// one for each of the session's `tasks` (a response each) and each
/// unsolicited PDU the target may send, `FF_RECV_CAP` data bytes each,
/// carved from a few chunks. A connection that turns out to be a
/// discovery session posts its own instead (`make_discovery_recvs`).
fn make_ff_recvs(ep: &IserConn, tasks: u32) -> Result {
    let (dev, count) = {
        let res = ep.res().ok_or(ENOTCONN)?;
        if res.ff_recvs.as_ref().is_some() {
            return Ok(());
        }
        (
            res.dev.dev.clone(),
            sizing::ff_recvs(tasks, res.sizing.max_recv_wr),
        )
    };
    let len = HEADERS_LEN + usize::from_safe_cast(FF_RECV_CAP);
    let bufs = RecvBuf::carve(&dev, len, usize::from_safe_cast(count))?;
    let res = ep.res().ok_or(ENOTCONN)?;
    for (tag, b) in (1..=count).zip(bufs) {
        // A tag given its buffer by an earlier attempt that failed part
        // way keeps it (they are all alike).
        match res.conn.give_recv_buf(tag, b) {
            Ok(()) | Err(EBUSY) => {}
            Err(e) => return Err(e),
        }
    }
    let _ = res.ff_recvs.populate(count);
    Ok(())
}

/// Gives a discovery session's receives (`DISCOVERY_RECVS` tags from
/// `discovery_tags`) their buffers of `DISCOVERY_RECV_CAP` data bytes,
/// once, in process context.
fn make_discovery_recvs(ep: &IserConn) -> Result {
    let (dev, first) = {
        let res = ep.res().ok_or(ENOTCONN)?;
        if res.disc_recvs.as_ref().is_some() {
            return Ok(());
        }
        (res.dev.dev.clone(), discovery_tags(&res.sizing))
    };
    let len = HEADERS_LEN + usize::from_safe_cast(DISCOVERY_RECV_CAP);
    let bufs = RecvBuf::carve(&dev, len, usize::from_safe_cast(DISCOVERY_RECVS))?;
    let res = ep.res().ok_or(ENOTCONN)?;
    for (tag, b) in (first..).zip(bufs) {
        match res.conn.give_recv_buf(tag, b) {
            Ok(()) | Err(EBUSY) => {}
            Err(e) => return Err(e),
        }
    }
    let _ = res.disc_recvs.populate(first);
    Ok(())
}

/// The first of a discovery session's receive tags: past the receive
/// queue's depth, so that they are apart from a normal session's.
pub(crate) fn discovery_tags(s: &sizing::ConnSizing) -> u32 {
    s.max_recv_wr
}

impl kernel::InPlaceModule for Riser {
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        crate::fault::announce();
        if let Ok(p) = crate::params::current() {
            if p.max_sectors_adjusted() {
                pr_warn!(
                    "max_sectors={} is outside the {}..={} sectors riser sizes a session for: sessions use {}\n",
                    p.max_sectors_given,
                    sizing::MIN_MAX_SECTORS,
                    sizing::MAX_MAX_SECTORS,
                    p.max_sectors
                );
            }
            if p.pi_enable {
                pr_warn!(
                    "pi_enable=Y: riser does not offload T10-PI: sessions run without protection information\n"
                );
            }
            if !p.always_register {
                pr_warn!(
                    "always_register=0: targets are given the global rkey, which reaches all \
                     of memory (as ib_iser does); riser cannot take it back from a target\n"
                );
            }
        }
        try_pin_init!(Self {
            params: crate::params::current()?,
            releases: RELEASES.register(c"riser_release")?,
            client <- Client::new(),
            transport <- Transport::new(
                                HostTemplate::new_iscsi(
                    module,
                    c"iSCSI Initiator over iSER",
                    c"iscsi_iser",
                    HostLimits {
                        max_sectors: params.max_sectors,
                        sg_tablesize: params.sg_tablesize(),
                        cmd_per_lun: sizing::DEF_CMD_PER_LUN,
                        cmd_size: iscsi::cmd_size(),
                    },
                ),
            ),
        })
    }
}

#[kunit_tests(riser_driver)]
mod tests {
    use super::*;
    use crate::proto::{
        slot::{
            self,
            Key,
            Post,
            Word, //
        },
        tmf::Scope,
    };

    /// LUN 1, as the TMF cases address it.
    const LUN: [u8; 8] = [0, 1, 0, 0, 0, 0, 0, 0];

    #[test]
    fn transport_identity_matches_ib_iser() {
        assert_eq!(Iser::CAPS, 0x89);
        assert_eq!(<Iser as TransportOps>::NAME, c"iser");
        // ib_iser's callbacks, all offered.
        let t = Transport::<Iser>::TABLE;
        assert!(t.init_task.is_some() && t.ep_connect.is_some() && t.get_ep_param.is_some());
    }

    #[test]
    fn a_held_tmf_response_waits_for_the_sends_of_the_commands_it_ended() -> Result {
        let lun = LUN;
        let other = [0, 2, 0, 0, 0, 0, 0, 0];
        let write = |itt, data_outs| Post {
            itt,
            send: true,
            data_outs,
            key: Key::None,
            hold: true,
        };
        // Published, and the post returned.
        let posted = |p: &Post| {
            slot::post(Word::default(), p)
                .and_then(|s| slot::posted(s.word))
                .map(|s| s.word)
        };
        // Slot 2: a WRITE to the LUN with two Data-Outs; slot 3: one to
        // another LUN with one. The TMF ended both (aborted); their SENDs
        // went, their Data-Outs not yet.
        let mut w2 = slot::abort(
            slot::send_done(posted(&write(0x22, 2)).map_err(|_| EINVAL)?)
                .map_err(|_| EINVAL)?
                .word,
        )
        .word;
        let w3 = slot::abort(posted(&write(0x33, 1)).map_err(|_| EINVAL)?).word;
        let words = |w2| [(Word::default(), lun), (w2, lun), (w3, other)].into_iter();
        assert!(memory::keeps_tmf(Scope::Task(0x22), words(w2)));
        assert!(!memory::keeps_tmf(Scope::Task(0x44), words(w2)));
        assert!(memory::keeps_tmf(Scope::Lun(lun), words(w2)));
        w2 = slot::data_out_done(w2).map_err(|_| EINVAL)?.word;
        assert!(memory::keeps_tmf(Scope::Lun(lun), words(w2)));
        // The command of another LUN does not hold the response back.
        w2 = slot::data_out_done(w2).map_err(|_| EINVAL)?.word;
        assert!(!memory::keeps_tmf(Scope::Lun(lun), words(w2)));
        assert!(memory::keeps_tmf(Scope::All, words(w2)));
        Ok(())
    }

    #[test]
    fn a_tmf_response_held_by_a_post_in_flight_goes_when_the_post_returns() -> Result {
        let lun = LUN;
        // A READ with its data inline and an unsignaled SEND: once posted
        // and ended, nothing of it is left to wait for.
        let read = Post {
            itt: 0x22,
            send: false,
            data_outs: 0,
            key: Key::None,
            hold: true,
        };
        // The word is published; the target answers the TMF (aborting the
        // command) before the post has returned.
        let w = slot::post(Word::default(), &read).map_err(|_| EINVAL)?.word;
        let w = slot::abort(w).word;
        assert!(memory::keeps_tmf(Scope::Task(0x22), [(w, lun)].into_iter()));
        // The post returns: that event ends the command, and the response
        // must go now (xmit_task hands it to the held-response work), as no
        // completion will come for this word.
        let step = slot::posted(w).map_err(|_| EINVAL)?;
        assert!(!memory::keeps_tmf(
            Scope::Task(0x22),
            [(step.word, lun)].into_iter()
        ));
        assert!(!memory::keeps_tmf(
            Scope::Lun(lun),
            [(step.word, lun)].into_iter()
        ));
        Ok(())
    }

    #[test]
    fn each_send_tag_is_one_thing_and_back() {
        use tags::{
            SendTag,
            TagMap,
            CTRL_TX, //
        };
        let m = TagMap {
            cmds: 4,
            dataouts: 3,
        };
        assert_eq!(m.count(), Some(CTRL_TX + 4 + 3 + 4 + 1));
        let all = m.count().unwrap_or(0);
        for tag in 0..all {
            let k = m.kind(tag);
            assert!(k.is_some());
            assert_eq!(k.map(|k| m.tag(k)), Some(tag));
        }
        assert_eq!(m.kind(all), None);
        assert_eq!(m.kind(0), Some(SendTag::Ctrl(0)));
        assert_eq!(m.kind(CTRL_TX), Some(SendTag::Slot(0)));
        assert_eq!(m.kind(CTRL_TX + 4), Some(SendTag::DataOut(0)));
        assert_eq!(m.kind(CTRL_TX + 7), Some(SendTag::Inv(0)));
        assert_eq!(m.kind(CTRL_TX + 10), Some(SendTag::Inv(3)));
        assert_eq!(m.kind(CTRL_TX + 11), Some(SendTag::Marker));
        let huge = TagMap {
            cmds: u32::MAX / 2,
            dataouts: 2,
        };
        assert_eq!(huge.count(), None);
    }

    #[test]
    fn sysfs_shows_ib_isers_attributes_only() {
        assert!(Iser::attr_visible(Attr::Host(host_param::INITIATOR_NAME)));
        assert!(Iser::attr_visible(Attr::Param(param::MAX_RECV_DLENGTH)));
        assert!(Iser::attr_visible(Attr::Param(param::DISCOVERY_SESS)));
        // Host IP address, and anything not of the two kinds, are hidden.
        assert!(!Iser::attr_visible(Attr::Host(
            host_param::INITIATOR_NAME + 100
        )));
        assert!(!Iser::attr_visible(Attr::Param(u32::MAX)));
        assert!(!Iser::attr_visible(Attr::Other));
    }
}
