// SPDX-License-Identifier: GPL-2.0

//! The driver: module state, the `iser` transport's behaviour, the
//! per-device context and the iSER connection (the datamover). It uses only
//! the safe layers; no `unsafe` here.

#![forbid(unsafe_code)]

use crate::{
    iscsi::{
        self, caps, host_param, param, Attr, Conn, ConnSlot, Direction, PduRewrite, Registry,
        SessionLimits, Task, TaskRef, Transport, TransportOps,
    },
    proto::{
        iser::{CmHeader, IserHeader, StagVa, ISER_CM_HDR_LEN, ISER_HDR_LEN},
        login,
        pdu::{RxPdu, TargetOpcode, HEADERS_LEN},
        sizing::{self, ConnSizing, Params, DATAOUT_SLOTS_PER_CMD},
    },
    rdma::{
        cm::{CmEvent, CmHandler, CmId, CmIdRef, CmIdState},
        conn::{
            ConnCaps, Connection, DeviceRef, DmaBuf, DmaDir, QpHandler, Registration, SendOp, Sge,
            Wc, UNSIGNALED_TAG,
        },
        Client, ClientDriver, Cq, Device, DeviceCaps, Pd, PollContext,
    },
    scsi::{HostLimits, HostTemplate},
};
use core::{
    net::SocketAddrV4,
    sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering},
};
use kernel::{
    alloc::{KBox, KVec},
    new_condvar, new_mutex, new_spinlock_irq,
    prelude::*,
    revocable::Revocable,
    str::BStr,
    sync::{Arc, CondVar, Mutex, SetOnce, SpinLockIrq},
    time::{msecs_to_jiffies, Instant, Monotonic},
};

/// The module: the registered transport, the RDMA client and the SCSI host
/// template, torn down in that order.
#[pin_data]
pub(crate) struct Riser {
    // Fields drop in declaration order: the transport (with its host
    // template) goes first, so no session can be made once the RDMA client
    // is being released.
    #[pin]
    transport: Transport<Iser>,
    #[pin]
    client: Client<Iser>,
    params: Params,
}

/// The `iser` transport.
pub(crate) struct Iser;

static REGISTRY: Registry = Registry::new();

/// Time allowed for address and route resolution, as ib_iser.
const RESOLVE_TIMEOUT_MS: u32 = 1000;
/// The login buffers' data size (libiscsi's login data limit).
const LOGIN_DATA: usize = 8192;
/// What the initiator receives per PDU when its login declares nothing.
const DEFAULT_RECV_DSL: u32 = 8192;
/// Largest full-feature receive of a normal session: the declared
/// InitiatorRecvDataSegmentLength up to this (ib_iser: 128 bytes, bug 11).
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
/// ITT bits that hold the task index (libiscsi's ISCSI_ITT_MASK).
const ITT_INDEX_MASK: u32 = 0x1fff;
/// Async messages a target may send in one second. libiscsi passes each to
/// iscsid over netlink; a flood fills iscsid's socket, and the event that
/// reports the connection's failure is then lost, so the session never
/// recovers. A target that sends more is failed while that event still
/// gets through.
const ASYNC_PER_SEC: u32 = 16;

/// An IPv4 address and port, printable in log lines.
struct Addr(SocketAddrV4);

impl kernel::fmt::Display for Addr {
    fn fmt(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        let [a, b, c, d] = self.0.ip().octets();
        write!(f, "{}.{}.{}.{}:{}", a, b, c, d, self.0.port())
    }
}

impl TransportOps for Iser {
    const NAME: &'static CStr = c"iser";
    const CAPS: u32 = caps::RECOVERY_L0 | caps::MULTI_R2T | caps::TEXT_NEGO;
    type Ep = IserConn;
    type TaskData = ();

    fn registry() -> &'static Registry {
        &REGISTRY
    }

    fn new_task_data(_index: u32) {}

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
        // The parameter is writable at run time: read it now (bug noted
        // when the foundation landed).
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
        Ok(SessionLimits {
            can_queue: cmds_max.min(u16::try_from(s.max_cmds).unwrap_or(u16::MAX)),
            sg_tablesize: u16::try_from(s.sg_tablesize).unwrap_or(u16::MAX),
            max_sectors: params.max_sectors.min(s.max_sectors),
            max_lun: params.max_lun,
            virt_boundary_4k: true,
        })
    }

    fn ep_connect(dst: SocketAddrV4) -> Result<Arc<IserConn>> {
        IserConn::connect(dst)
    }

    fn ep_poll(ep: &Arc<IserConn>, timeout_ms: u32) -> Result<bool> {
        ep.poll(timeout_ms)
    }

    fn ep_disconnect(ep: Arc<IserConn>) {
        ep.terminate();
    }

    fn ep_dst(ep: &IserConn) -> Option<SocketAddrV4> {
        Some(ep.dst)
    }

    fn ep_device(ep: &IserConn) -> Option<DeviceRef> {
        ep.res().map(|r| r.dev.dev.clone())
    }

    fn conn_slot(ep: &IserConn) -> &ConnSlot {
        &ep.bound
    }

    fn bind(ep: &Arc<IserConn>, conn: &Conn) -> Result {
        if !ep.is_up() {
            pr_err!("bind: the connection is being torn down\n");
            return Err(EINVAL);
        }
        let room = ep.res().ok_or(ENOTCONN)?.tx_hdrs.len();
        if conn.cmds_max() as usize > room {
            pr_err!(
                "bind: session has {} tasks, the connection {}\n",
                conn.cmds_max(),
                room
            );
            return Err(EINVAL);
        }
        Ok(())
    }

    fn stop(ep: &Arc<IserConn>) {
        ep.terminate();
    }

    fn send_pdu_hook(
        ep: &Arc<IserConn>,
        hdr: &[u8; 48],
        data: &[u8],
    ) -> Result<Option<PduRewrite>> {
        if login::opcode(hdr) != login::OP_LOGIN_REQ {
            return Ok(None);
        }
        // The initiator declares what it receives per PDU in the full
        // feature phase; riser declares no more than its receives hold, so
        // every legal PDU fits (bug 11: ib_iser holds 128 bytes whatever
        // iscsid declares).
        let discovery = ep.discovery.load(Ordering::Relaxed) || login::is_discovery(data);
        if discovery {
            ep.discovery.store(true, Ordering::Relaxed);
        }
        let cap = if discovery {
            DISCOVERY_RECV_CAP
        } else {
            FF_RECV_CAP
        };
        let mut rewrite = None;
        let mut text = data;
        let mut out = KVec::from_elem(0u8, data.len(), GFP_KERNEL)?;
        let mut key = "InitiatorRecvDataSegmentLength";
        let mut n = login::clamp_key(data, key, cap, &mut out);
        if n.is_none() {
            key = "MaxRecvDataSegmentLength";
            n = login::clamp_key(data, key, cap, &mut out);
        }
        if let Some(n) = n {
            out.truncate(n);
            pr_info!(
                "declaring {}={} to the target (riser's receive size)\n",
                key,
                cap
            );
            let mut h = *hdr;
            // iscsid may hand over padding beyond DataSegmentLength: the
            // length shrinks by what the rewrite removed, no more.
            let old = u32::from_be_bytes([0, h[5], h[6], h[7]]);
            let removed = u32::try_from(data.len() - n)?;
            let dsl = old.checked_sub(removed).ok_or(EINVAL)?.to_be_bytes();
            h[5..8].copy_from_slice(&dsl[1..]);
            rewrite = Some(PduRewrite { hdr: h, data: out });
        }
        if let Some(r) = &rewrite {
            text = &r.data;
        }
        // Declared in this request or an earlier one of the login; RFC 7143
        // and RFC 7145 default to 8 KiB.
        if let Some(v) = login::declared_recv_dsl(text) {
            ep.recv_size.store(v.min(cap), Ordering::Relaxed);
        }
        if !login::enters_full_feature(hdr) {
            return Ok(rewrite);
        }
        // The last login request: make the full-feature receives now, in
        // process context, as large as declared.
        let size = match ep.recv_size.load(Ordering::Relaxed) {
            0 => DEFAULT_RECV_DSL,
            v => v,
        };
        ep.recv_size.store(size, Ordering::Relaxed);
        let (dev, count) = {
            let res = ep.res().ok_or(ENOTCONN)?;
            if res.ff_rx.as_ref().is_some() {
                return Ok(rewrite);
            }
            let count = if discovery {
                DISCOVERY_RECVS
            } else {
                // One receive per command; the last slot is the drain's.
                res.sizing.max_recv_wr.saturating_sub(1).max(1)
            };
            (res.dev.dev.clone(), count)
        };
        let mut bufs = KVec::with_capacity(count as usize, GFP_KERNEL)?;
        for _ in 0..count {
            bufs.push(
                DmaBuf::new(&dev, HEADERS_LEN + size as usize, DmaDir::FromDevice)?,
                GFP_KERNEL,
            )?;
        }
        // A target may answer the transit without taking it; the next
        // request's buffers are then the ones already made.
        let _ = ep.res().ok_or(ENOTCONN)?.ff_rx.populate(bufs);
        Ok(rewrite)
    }

    fn max_recv_dlength(ep: &IserConn) -> Option<u32> {
        let n = ep.recv_size.load(Ordering::Relaxed);
        (n != 0).then_some(n)
    }

    fn init_task(ep: &IserConn, _task: &Task<'_, Self>) -> Result {
        if !ep.is_up() {
            return Err(ENODEV);
        }
        Ok(())
    }

    fn xmit_task(ep: &IserConn, task: &Task<'_, Self>) -> Result {
        let res = ep.res().ok_or(ENODEV)?;
        if !task.is_scsi() {
            return res.send_control(task);
        }
        // Read before sending: once posted, the task may complete (and be
        // cleaned up) on another CPU.
        let n = u64::from(task.data_len());
        let dir = task.direction();
        let (unregistered, broken) = res.send_command(task)?;
        if unregistered {
            ep.unreg_cmds.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(why) = broken {
            // The command is on the wire: libiscsi must not requeue it, so
            // report it sent and let recovery fail it.
            drop(res);
            ep.fail(why);
        }
        match dir {
            Direction::Write => ep.tx_octets.fetch_add(n, Ordering::Relaxed),
            Direction::Read => ep.rx_octets.fetch_add(n, Ordering::Relaxed),
            _ => 0,
        };
        Ok(())
    }

    fn data_octets(ep: &IserConn) -> (u64, u64) {
        (
            ep.tx_octets.load(Ordering::Relaxed),
            ep.rx_octets.load(Ordering::Relaxed),
        )
    }

    fn cleanup_task(_ep: Option<&IserConn>, _task: &Task<'_, Self>) {
        // The MR keeps its registration state (bug 4) and the layer unmaps
        // the data (bug 6): nothing else is held per task.
    }
}

/// What riser keeps for an RDMA device while connections use it: its PD,
/// shared by those connections, and its limits.
pub(crate) struct DevCtx {
    dev: DeviceRef,
    pd: Arc<Pd>,
    caps: DeviceCaps,
}

/// riser's per-device slot (the `ib_client` context): the device context,
/// made by the first connection on the device and freed with the last.
#[pin_data]
pub(crate) struct DevSlot {
    dev: DeviceRef,
    #[pin]
    ctx: Mutex<DevUsers>,
}

struct DevUsers {
    ctx: Option<Arc<DevCtx>>,
    users: usize,
}

/// A connection's use of a device context; dropping it (in process context)
/// frees the context with the last user.
pub(crate) struct DevUse {
    ctx: Arc<DevCtx>,
    slot: Arc<DevSlot>,
}

impl DevUse {
    fn new(slot: Arc<DevSlot>) -> Result<Self> {
        let mut g = slot.ctx.lock();
        let ctx = match &g.ctx {
            Some(c) => c.clone(),
            None => {
                let dev = slot.dev.device();
                let pd = if crate::params::current()?.always_register {
                    Pd::new(dev)?
                } else {
                    Pd::new_with_global_rkey(dev)?
                };
                let c = Arc::new(
                    DevCtx {
                        dev: slot.dev.clone(),
                        pd: Arc::new(pd, GFP_KERNEL)?,
                        caps: dev.caps(),
                    },
                    GFP_KERNEL,
                )?;
                g.ctx = Some(c.clone());
                c
            }
        };
        g.users += 1;
        drop(g);
        Ok(Self { ctx, slot })
    }
}

impl core::ops::Deref for DevUse {
    type Target = DevCtx;

    fn deref(&self) -> &DevCtx {
        &self.ctx
    }
}

impl Drop for DevUse {
    fn drop(&mut self) {
        let last = {
            let mut g = self.slot.ctx.lock();
            g.users -= 1;
            if g.users == 0 {
                g.ctx.take()
            } else {
                None
            }
        };
        if last.is_some() {
            pr_debug!("last connection on the device gone: its PD is freed\n");
        }
    }
}

impl ClientDriver for Iser {
    type Context = Arc<DevSlot>;
    const NAME: &'static CStr = c"riser";

    fn add(dev: &Device) -> Result<KBox<Arc<DevSlot>>> {
        let dev = DeviceRef::new(dev)?;
        let slot = Arc::pin_init(
            pin_init!(DevSlot {
                dev,
                ctx <- new_mutex!(DevUsers { ctx: None, users: 0 }),
            }),
            GFP_KERNEL,
        )?;
        KBox::new(slot, GFP_KERNEL).map_err(Into::into)
    }

    fn remove(dev: &Device, slot: &Arc<DevSlot>) {
        pr_debug!(
            "device {} going away ({} connections on it)\n",
            BStr::from_bytes(dev.name().as_bytes()),
            slot.ctx.lock().users
        );
    }
}

/// The state of an iSER connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Resolving and connecting.
    Connecting,
    /// Connected.
    Up,
    /// Connecting failed.
    Failed,
    /// Being torn down (or lost).
    Terminating,
}

struct State {
    phase: Phase,
    /// The CM id until the QP is made on it.
    pending: Option<CmId<IserConn>>,
    /// The RDMA resources (and the CM id) are gone: set by whichever of
    /// `ep_disconnect` and the device-removal handler freed them.
    released: bool,
}

/// An iSER connection: what an iSCSI endpoint stands for.
#[pin_data]
pub(crate) struct IserConn {
    #[pin]
    state: Mutex<State>,
    #[pin]
    cv: CondVar,
    bound: ConnSlot,
    res: SetOnce<Pin<KBox<Revocable<Res>>>>,
    dst: SocketAddrV4,
    params: Params,
    /// Established and not torn down: what atomic paths check.
    up: AtomicBool,
    /// A discovery session's connection.
    discovery: AtomicBool,
    /// Data bytes each full-feature receive holds: what the login declared
    /// (as far as riser allows), fixed at the last login request.
    recv_size: AtomicU32,
    /// A Logout Response arrived: the target will close the connection.
    logged_out: AtomicBool,
    /// Text responses received (discovery).
    text_rsps: AtomicU32,
    /// Commands sent with an unregistered buffer (always_register=0).
    unreg_cmds: AtomicU64,
    /// SCSI data octets written and read through this connection.
    tx_octets: AtomicU64,
    rx_octets: AtomicU64,
    failed: AtomicBool,
    /// Who destroys the CM id (see [`CmIdState`]).
    id_state: CmIdState,
    /// The clock of the async-message limit.
    born: Instant<Monotonic>,
    /// Start (milliseconds after `born`) of the current one-second window
    /// of the async-message limit, and the async messages seen in it. Only
    /// the receive path (one CQ, serialised) uses them.
    async_window: AtomicI64,
    async_count: AtomicU32,
}

/// The resources of a connected iSER connection. Dropping it (after the
/// revocation that stops every fast-path user) disconnects, drains and
/// destroys the QP (`conn` is the first field), then frees the buffers.
#[pin_data]
struct Res {
    conn: Connection<IserConn>,
    dev: DevUse,
    sizing: ConnSizing,
    /// Buffers of control PDUs that carry data (login, text, NOP-Out with
    /// ping data), sent on tags `0..CTRL_TX`.
    ctrl_tx: KVec<Arc<DmaBuf>>,
    login_rx: Arc<DmaBuf>,
    /// One header buffer per task slot: command and control PDUs.
    tx_hdrs: KVec<Arc<DmaBuf>>,
    /// Header buffers of unsolicited Data-Out PDUs, and the free ones.
    dataout: KVec<Arc<DmaBuf>>,
    #[pin]
    dataout_free: SpinLockIrq<KVec<u32>>,
    /// Free Data-Out headers not reserved by a command being sent: a WRITE
    /// reserves all it needs before anything of it is posted.
    dataout_avail: AtomicU32,
    /// Tasks whose PDU expects no response, by the send tag their PDU went
    /// on; released when that SEND completes.
    #[pin]
    puts: SpinLockIrq<KVec<Option<TaskRef>>>,
    ff_rx: SetOnce<KVec<Arc<DmaBuf>>>,
    /// The target may invalidate our rkeys with SEND_WITH_INV.
    remote_inv: bool,
    /// Command SENDs whose PDU went inline: one in `signal_interval` is
    /// signaled (`proto::sizing::signal_interval`).
    inline_sends: AtomicU32,
    signal_interval: u32,
}

/// The buffers of a connection, made before its QP.
struct Bufs {
    ctrl_tx: KVec<Arc<DmaBuf>>,
    login_rx: Arc<DmaBuf>,
    tx_hdrs: KVec<Arc<DmaBuf>>,
    dataout: KVec<Arc<DmaBuf>>,
    dataout_free: KVec<u32>,
    puts: KVec<Option<TaskRef>>,
}

impl Bufs {
    fn new(dev: &DeviceRef, cmds: u32, n_dataout: u32) -> Result<Self> {
        let headers = |n: u32| -> Result<KVec<Arc<DmaBuf>>> {
            let mut v = KVec::with_capacity(n as usize, GFP_KERNEL)?;
            for _ in 0..n {
                v.push(DmaBuf::new(dev, HEADERS_LEN, DmaDir::ToDevice)?, GFP_KERNEL)?;
            }
            Ok(v)
        };
        let mut dataout_free = KVec::with_capacity(n_dataout as usize, GFP_KERNEL)?;
        for i in (0..n_dataout).rev() {
            dataout_free.push(i, GFP_KERNEL)?;
        }
        // One per send tag of a control PDU (control buffers, task slots).
        let mut puts = KVec::with_capacity((CTRL_TX + cmds) as usize, GFP_KERNEL)?;
        for _ in 0..CTRL_TX + cmds {
            puts.push(None, GFP_KERNEL)?;
        }
        let mut ctrl_tx = KVec::with_capacity(CTRL_TX as usize, GFP_KERNEL)?;
        for _ in 0..CTRL_TX {
            ctrl_tx.push(
                DmaBuf::new(dev, HEADERS_LEN + LOGIN_DATA, DmaDir::ToDevice)?,
                GFP_KERNEL,
            )?;
        }
        Ok(Self {
            ctrl_tx,
            login_rx: DmaBuf::new(dev, HEADERS_LEN + LOGIN_DATA, DmaDir::FromDevice)?,
            tx_hdrs: headers(cmds)?,
            dataout: headers(n_dataout)?,
            dataout_free,
            puts,
        })
    }
}

impl Res {
    fn new(
        conn: Connection<IserConn>,
        dev: DevUse,
        sizing: ConnSizing,
        b: Bufs,
        remote_inv: bool,
    ) -> impl PinInit<Self> {
        pin_init!(Res {
            conn,
            dev,
            sizing,
            ctrl_tx: b.ctrl_tx,
            login_rx: b.login_rx,
            tx_hdrs: b.tx_hdrs,
            dataout_avail: AtomicU32::new(u32::try_from(b.dataout.len()).unwrap_or(0)),
            dataout: b.dataout,
            dataout_free <- new_spinlock_irq!(b.dataout_free),
            puts <- new_spinlock_irq!(b.puts),
            ff_rx: SetOnce::default(),
            remote_inv,
            inline_sends: AtomicU32::new(0),
            signal_interval: sizing::signal_interval(sizing.max_cmds),
        })
    }
}

/// Send tags `0..CTRL_TX` are the control buffers, then one per task slot,
/// then the Data-Out headers. Two control buffers: iscsid sends the next
/// login or text request as soon as the answer to the previous one
/// arrives, which can be before the completion of that request's SEND has
/// been reaped (the receive and the send complete on the same CQ, in
/// either order).
const CTRL_TX: u32 = 2;

impl Res {
    fn task_tag(idx: u32) -> u32 {
        CTRL_TX + idx
    }

    fn dataout_tag(&self, i: u32) -> u32 {
        // CAST: the vectors were sized from u32 counts.
        CTRL_TX + self.tx_hdrs.len() as u32 + i
    }

    fn headers(iser: IserHeader, bhs: &[u8; 48]) -> Result<[u8; HEADERS_LEN]> {
        let mut h = [0u8; HEADERS_LEN];
        iser.encode(&mut h[..ISER_HDR_LEN]).map_err(|_| EINVAL)?;
        h[ISER_HDR_LEN..].copy_from_slice(bhs);
        Ok(h)
    }

    /// Sends a login, text, NOP-Out, TMF or logout PDU.
    fn send_control(&self, task: &Task<'_, Iser>) -> Result {
        let bhs = task.bhs();
        let r = self.send_control_pdu(task, &bhs);
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

    /// Picks the send tag and buffer of a control PDU: the task slot's own
    /// header buffer when the PDU has no data and the slot's tag is free,
    /// else a free control buffer. A tag is free when its last SEND has
    /// completed and no task waits on it (`puts`), so nothing is written
    /// into a buffer the device may still read.
    fn control_buffer(
        &self,
        puts: &[Option<TaskRef>],
        idx: u32,
        data_len: usize,
    ) -> Result<(u32, &Arc<DmaBuf>)> {
        if data_len > LOGIN_DATA {
            return Err(EINVAL);
        }
        let free = |tag: u32| {
            self.conn.send_tag_idle(tag) && puts.get(tag as usize).is_some_and(Option::is_none)
        };
        let own = Self::task_tag(idx);
        if data_len == 0 && free(own) {
            return Ok((own, self.tx_hdrs.get(idx as usize).ok_or(EINVAL)?));
        }
        (0..CTRL_TX)
            .zip(self.ctrl_tx.iter())
            .find(|(tag, _)| free(*tag))
            .ok_or(EBUSY)
    }

    fn send_control_pdu(&self, task: &Task<'_, Iser>, bhs: &[u8; 48]) -> Result {
        let data = task.mgmt_data();
        let hdrs = Self::headers(IserHeader::default(), bhs)?;
        // Held until posted: a send completion releases a tag's task
        // under this lock.
        let mut puts = self.puts.lock();
        let (tag, buf) = self.control_buffer(&puts, task.index(), data.len())?;
        buf.write(0, &hdrs)?;
        buf.write(HEADERS_LEN, data)?;
        if login::opcode(bhs) == login::OP_LOGIN_REQ {
            // The large login receive is posted for every login round (bug
            // 2); it is still posted if the previous round had no answer.
            match self.conn.post_recv(0, &self.login_rx) {
                Ok(()) | Err(EBUSY) => {}
                Err(e) => return Err(e),
            }
        }
        let sge = buf.sge(0, HEADERS_LEN + data.len(), self.conn.pd())?;
        self.conn.post_send(&[SendOp::Send {
            tag,
            sges: &[sge],
            keep: Some(buf),
        }])?;
        if task.reserved_itt() {
            // No response will release this task: the completion of the
            // SEND on this tag will.
            let slot = puts.get_mut(tag as usize).ok_or(EINVAL)?;
            *slot = Some(task.take_ref());
        }
        Ok(())
    }

    /// Sends a SCSI command: registration, command PDU (with immediate
    /// data), unsolicited Data-Outs. Says whether the data went
    /// unregistered, and why the connection must fail if a Data-Out could
    /// not follow its posted command.
    fn send_command(&self, task: &Task<'_, Iser>) -> Result<(bool, Option<&'static str>)> {
        let idx = task.index();
        let hdr_buf = self.tx_hdrs.get(idx as usize).ok_or(EINVAL)?;
        let dir = task.direction();
        let len = task.data_len();
        let mut iser = IserHeader::default();
        let mut reg = None;
        let mut inv = false;
        let mut unregistered = false;
        // The command's MR is registered by this chain.
        let mut uses_mr = false;
        match dir {
            Direction::None => {}
            Direction::Bidi => {
                pr_err!("bidirectional commands are not supported over iSER\n");
                return Err(EINVAL);
            }
            Direction::Read | Direction::Write => {
                if len == 0 {
                    return Err(EINVAL);
                }
                let sg = match task.mapping() {
                    Some(sg) => sg,
                    None => task.map_data(&self.dev.dev)?,
                };
                // A write whose data all goes as immediate data is sent by
                // this side alone: the target gets no STag, so one segment
                // needs no registration, only the local DMA lkey (as
                // ib_iser does). That saves the REG_MR, and the LOCAL_INV the
                // MR would need next time, as no target invalidates an rkey
                // it was never given.
                let all_imm = dir == Direction::Write && task.imm_count() >= len;
                let local = all_imm.then(|| sg.local_only(&self.dev.pd)).flatten();
                // The global rkey is looked at only when the target must
                // reach the buffer.
                let r = if let Some(r) = local {
                    r
                } else if let Some(r) = sg.unregistered(&self.dev.pd) {
                    // always_register=0 and one segment: no MR at all.
                    unregistered = true;
                    r
                } else {
                    // Chain the invalidation of the MR's previous
                    // registration when the target did not invalidate it
                    // (bug 4: the state is the MR's, not the task's).
                    inv = self.conn.mr_valid(idx);
                    uses_mr = true;
                    self.conn.map_mr(idx, sg)?
                };
                if r.len < len {
                    return Err(EINVAL);
                }
                if dir == Direction::Read {
                    iser.read = Some(StagVa {
                        stag: r.rkey,
                        va: r.iova,
                    });
                } else {
                    // Immediate data plus unsolicited Data-Outs: the target
                    // RDMA-READs only what follows them.
                    let unsol = task.imm_count().saturating_add(task.unsol_len()).min(len);
                    if unsol < len {
                        iser.write = Some(StagVa {
                            stag: r.rkey,
                            va: r.iova + u64::from(unsol),
                        });
                    }
                }
                reg = Some(r);
            }
        }
        let hdrs = Self::headers(iser, &task.bhs())?;
        let imm = task.imm_count();
        // A PDU without immediate data goes inline when the QP takes it: the
        // provider copies it while posting, so the SEND needs no completion
        // to protect a buffer (bug 10 is about buffers the device still
        // reads), and only one in `signal_interval` is signaled, for the
        // send queue's sake. Immediate data is sent from the SCSI buffer.
        let inline =
            !(dir == Direction::Write && imm > 0) && self.conn.max_inline() as usize >= HEADERS_LEN;
        let one;
        let two;
        let sges: &[Sge] = if inline {
            &[]
        } else {
            hdr_buf.write(0, &hdrs)?;
            let head = hdr_buf.sge(0, HEADERS_LEN, self.conn.pd())?;
            match reg {
                Some(r) if dir == Direction::Write && imm > 0 => {
                    two = [head, r.sge(0, imm)?];
                    &two
                }
                _ => {
                    one = [head];
                    &one
                }
            }
        };
        // Reserve the Data-Out headers first: once the command is posted,
        // its Data-Outs must go out.
        let dataouts = if dir == Direction::Write {
            Self::dataouts_needed(task)?
        } else {
            0
        };
        if dataouts > 0
            && self
                .dataout_avail
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| {
                    a.checked_sub(dataouts)
                })
                .is_err()
        {
            return Err(EAGAIN);
        }
        let send = if inline {
            let n = self.inline_sends.fetch_add(1, Ordering::Relaxed);
            SendOp::InlineSend {
                tag: (n % self.signal_interval == 0).then_some(Self::task_tag(idx)),
                bytes: &hdrs,
            }
        } else {
            SendOp::Send {
                tag: Self::task_tag(idx),
                sges,
                keep: Some(hdr_buf),
            }
        };
        let reg_op = |remote_write| SendOp::Reg {
            mr: idx,
            remote_write,
        };
        let remote_write = dir == Direction::Read;
        let posted = match (inv, uses_mr) {
            (true, true) => {
                self.conn
                    .post_send(&[SendOp::LocalInv { mr: idx }, reg_op(remote_write), send])
            }
            (false, true) => self.conn.post_send(&[reg_op(remote_write), send]),
            _ => self.conn.post_send(&[send]),
        };
        if let Err(e) = posted {
            self.dataout_avail.fetch_add(dataouts, Ordering::AcqRel);
            return Err(e);
        }
        let broken = match (reg, dataouts > 0) {
            (Some(r), true) => self.send_dataouts(task, &r, dataouts),
            _ => None,
        };
        Ok((unregistered, broken))
    }

    /// How many unsolicited Data-Out PDUs a WRITE needs.
    fn dataouts_needed(task: &Task<'_, Iser>) -> Result<u32> {
        let unsol = task.unsol_len();
        if unsol == 0 {
            return Ok(0);
        }
        let mxdl = task.max_xmit_dlength();
        if mxdl == 0 {
            return Err(EINVAL);
        }
        Ok(unsol.div_ceil(mxdl))
    }

    /// Sends the unsolicited Data-Out PDUs of a WRITE whose command is
    /// posted, with the `reserved` headers its sender set aside. Nothing can
    /// be taken back now: a failure fails the connection (libiscsi recovers
    /// the command) instead of returning an error that would requeue it.
    fn send_dataouts(
        &self,
        task: &Task<'_, Iser>,
        r: &Registration,
        reserved: u32,
    ) -> Option<&'static str> {
        let mut left = reserved;
        let failed = loop {
            let Some(d) = task.next_data_out() else {
                break None;
            };
            if left == 0 {
                task.data_out_failed();
                break Some("more Data-Outs than reserved");
            }
            let Some(slot) = self.dataout_free.lock().pop() else {
                task.data_out_failed();
                break Some("no Data-Out header free");
            };
            left -= 1;
            let buf = &self.dataout[slot as usize];
            let sent = Self::headers(IserHeader::default(), &d.bhs)
                .and_then(|hdrs| buf.write(0, &hdrs))
                .and_then(|()| {
                    let sges = [
                        buf.sge(0, HEADERS_LEN, self.conn.pd())?,
                        r.sge(d.offset, d.len)?,
                    ];
                    self.conn.post_send(&[SendOp::Send {
                        tag: self.dataout_tag(slot),
                        sges: &sges,
                        keep: Some(buf),
                    }])
                });
            if sent.is_err() {
                let _ = self.dataout_free.lock().push(slot, GFP_ATOMIC);
                left += 1;
                task.data_out_failed();
                break Some("cannot post a Data-Out");
            }
            task.data_out_sent(&d);
        };
        // Give back what was reserved and not used.
        self.dataout_avail.fetch_add(left, Ordering::AcqRel);
        failed
    }
}

impl IserConn {
    fn connect(dst: SocketAddrV4) -> Result<Arc<Self>> {
        let params = crate::params::current()?;
        let c = Arc::pin_init(
            pin_init!(IserConn {
                state <- new_mutex!(State {
                    phase: Phase::Connecting,
                    pending: None,
                    released: false,
                }),
                cv <- new_condvar!(),
                bound: ConnSlot::new(),
                res: SetOnce::default(),
                dst,
                params,
                up: AtomicBool::new(false),
                discovery: AtomicBool::new(false),
                recv_size: AtomicU32::new(0),
                logged_out: AtomicBool::new(false),
                text_rsps: AtomicU32::new(0),
                unreg_cmds: AtomicU64::new(0),
                tx_octets: AtomicU64::new(0),
                rx_octets: AtomicU64::new(0),
                failed: AtomicBool::new(false),
                id_state: CmIdState::new(),
                born: Instant::now(),
                async_window: AtomicI64::new(0),
                async_count: AtomicU32::new(0),
            }),
            GFP_KERNEL,
        )?;
        let id = CmId::new(c.clone())?;
        let mut st = c.state.lock();
        // Resolve under the lock so the handler finds the id in place.
        let id = st.pending.insert(id);
        if let Err(e) = id.resolve_addr(dst, RESOLVE_TIMEOUT_MS) {
            let id = st.pending.take();
            drop(st);
            drop(id);
            pr_err!("cannot resolve {}: {:?}\n", Addr(dst), e);
            return Err(e);
        }
        drop(st);
        Ok(c)
    }

    fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    fn res(&self) -> Option<kernel::revocable::RevocableGuard<'_, Res>> {
        self.res.as_ref()?.try_access()
    }

    fn poll(&self, timeout_ms: u32) -> Result<bool> {
        let mut st = self.state.lock();
        if st.phase == Phase::Connecting {
            let _ = self
                .cv
                .wait_interruptible_timeout(&mut st, msecs_to_jiffies(timeout_ms));
        }
        match st.phase {
            Phase::Up => Ok(true),
            Phase::Connecting => Ok(false),
            Phase::Failed | Phase::Terminating => Err(ENOTCONN),
        }
    }

    /// Tears the connection down: no waiting on the network, idempotent.
    fn terminate(&self) {
        {
            // After a logout, let the target close first: disconnecting at
            // once can flush the target's Logout Response send, which LIO
            // mishandles (it warns, and has crashed on teardown, with
            // ib_iser too). Bounded, and only after a logout, so failover
            // never waits on it (bug 8).
            let mut st = self.state.lock();
            if self.logged_out.load(Ordering::Acquire) && st.phase == Phase::Up {
                let _ = self
                    .cv
                    .wait_interruptible_timeout(&mut st, msecs_to_jiffies(LOGOUT_GRACE_MS));
            }
        }
        self.up.store(false, Ordering::Release);
        let texts = self.text_rsps.swap(0, Ordering::Relaxed);
        if texts > 0 && self.discovery.load(Ordering::Relaxed) {
            pr_info!(
                "discovery of {}: {} text responses\n",
                Addr(self.dst),
                texts
            );
        }
        let n = self.unreg_cmds.swap(0, Ordering::Relaxed);
        if n > 0 {
            pr_info!(
                "connection to {}: {} commands sent with unregistered buffers\n",
                Addr(self.dst),
                n
            );
        }
        {
            let mut st = self.state.lock();
            if st.phase != Phase::Failed {
                st.phase = Phase::Terminating;
            }
            self.cv.notify_all();
        }
        self.release();
    }

    /// Frees the RDMA resources: the QP (drained first), CQ, MRs, buffers,
    /// the device context and the CM id. Returns when they are gone, also
    /// when another thread freed them: `ep_disconnect` and the CM's
    /// device-removal handler may both get here.
    fn release(&self) {
        // Destroying the id waits for its handler, which takes the state
        // lock: done outside it. (In the device-removal handler, dropping
        // the id gives it to the CM instead.)
        let pending = self.state.lock().pending.take();
        drop(pending);
        let mine = match self.res.as_ref() {
            // Waits for fast-path users, then drops the resources, which
            // drains the QP and drops the id last.
            Some(r) => r.revoke(),
            None => true,
        };
        let mut st = self.state.lock();
        if mine {
            st.released = true;
            self.cv.notify_all();
        } else {
            // The other one is dropping them: wait until it is done.
            while !st.released {
                self.cv.wait(&mut st);
            }
        }
    }

    /// The connection failed under libiscsi: hand recovery to iscsid.
    fn fail(&self, why: &str) {
        if !self.failed.swap(true, Ordering::AcqRel) {
            pr_err!("connection to {} failed: {}\n", Addr(self.dst), why);
        }
        self.bound.with(|c| c.failure());
    }

    fn route_resolved(&self, ev: &CmIdRef, st: &mut State) -> Result {
        let id = st.pending.take().ok_or(EINVAL)?;
        let ctx = ev
            .device()
            .and_then(Client::<Iser>::context_of)
            .ok_or(ENODEV)
            .and_then(DevUse::new);
        let ctx = match ctx {
            Ok(c) => c,
            Err(e) => {
                st.pending = Some(id);
                return Err(e);
            }
        };
        let caps = ctx.caps;
        let Some(sizing) = sizing::conn_sizing(
            &self.params,
            DEF_XMIT_CMDS_MAX,
            caps.max_qp_wr,
            caps.max_fast_reg_page_list_len,
            false,
        ) else {
            st.pending = Some(id);
            pr_err!("the RDMA device's limits are too small for iSER\n");
            return Err(EINVAL);
        };
        let cq = match Cq::from_pool(
            ctx.dev.device(),
            sizing.cq_entries,
            -1,
            PollContext::SoftIrq,
        ) {
            Ok(cq) => cq,
            Err(e) => {
                st.pending = Some(id);
                return Err(e);
            }
        };
        let n_dataout = sizing.max_cmds * DATAOUT_SLOTS_PER_CMD;
        // Everything that can fail is made before the QP: once the QP is on
        // the id, a failure would drop (destroy) the id inside its own
        // handler.
        let made = Bufs::new(&ctx.dev, sizing.max_cmds, n_dataout)
            .and_then(|b| Ok((b, KBox::<Revocable<Res>>::new_uninit(GFP_KERNEL)?)));
        let (bufs, slot) = match made {
            Ok(m) => m,
            Err(e) => {
                st.pending = Some(id);
                pr_err!("cannot allocate the connection's buffers: {:?}\n", e);
                return Err(e);
            }
        };
        let conn_caps = ConnCaps {
            max_send_wr: sizing.max_send_wr,
            max_recv_wr: sizing.max_recv_wr,
            recv_tags: sizing.max_recv_wr,
            send_tags: CTRL_TX + sizing.max_cmds + n_dataout,
            mrs: sizing.max_cmds,
            pages_per_mr: sizing.pages_per_mr,
            // CAST: a small constant.
            max_inline: HEADERS_LEN as u32,
        };
        let conn = match Connection::new(id, ctx.pd.clone(), cq, conn_caps) {
            Ok(c) => c,
            Err((id, e)) => {
                st.pending = Some(id);
                pr_err!("cannot make the QP: {:?}\n", e);
                return Err(e);
            }
        };
        let mut private = [0u8; ISER_CM_HDR_LEN];
        // Encoding four bytes into four bytes cannot fail.
        let _ = CmHeader {
            zbva_not_supported: true,
            send_w_inv_not_supported: !self.params.always_register,
        }
        .encode(&mut private);
        let rd_atom = u8::try_from(caps.max_qp_rd_atom.min(255)).unwrap_or(u8::MAX);
        let connected = conn.connect_in_handler(ev, &private, rd_atom, 1);
        let res = Res::new(conn, ctx, sizing, bufs, self.params.always_register);
        let Ok(res) = slot.write_pin_init(Revocable::new(res));
        // Populated once: this handler runs once per id for ROUTE_RESOLVED.
        let _ = self.res.populate(res);
        connected
    }

    /// Counts an async message against [`ASYNC_PER_SEC`]; false past it.
    fn async_allowed(&self) -> bool {
        let now = self.born.elapsed().as_millis();
        if now - self.async_window.load(Ordering::Relaxed) >= 1000 {
            self.async_window.store(now, Ordering::Relaxed);
            self.async_count.store(0, Ordering::Relaxed);
        }
        self.async_count.fetch_add(1, Ordering::Relaxed) < ASYNC_PER_SEC
    }

    /// Handles one receive (softirq): validate, hand to libiscsi, repost.
    fn received(&self, res: &Res, tag: u32, wc: Wc) {
        let (buf, ff) = if tag == 0 {
            (&res.login_rx, false)
        } else {
            let Some(b) = res.ff_rx.as_ref().and_then(|v| v.get(tag as usize - 1)) else {
                self.fail("receive completion for an unknown buffer");
                return;
            };
            (b, true)
        };
        match buf.read(buf.len(), |bytes| self.deliver(res, bytes, wc)) {
            Ok(Ok(())) => {}
            Ok(Err(why)) => self.fail(why),
            Err(_) => self.fail("receive buffer unreadable"),
        }
        if ff {
            // One repost per completion (bug 1).
            if let Err(e) = res.conn.post_recv(tag, buf) {
                if self.is_up() {
                    pr_err!("cannot repost a receive: {:?}\n", e);
                }
            }
        }
    }

    fn deliver(&self, res: &Res, bytes: &[u8], wc: Wc) -> core::result::Result<(), &'static str> {
        let pdu = match RxPdu::parse(bytes, wc.byte_len as usize) {
            Ok(p) => p,
            Err(e) => {
                pr_err!("bad PDU from the target ({} bytes): {:?}\n", wc.byte_len, e);
                return Err("malformed PDU");
            }
        };
        if matches!(pdu.opcode, TargetOpcode::DataIn | TargetOpcode::R2t) {
            pr_err!("target sent {:?}, which iSER forbids\n", pdu.opcode);
            return Err("Data-In or R2T over iSER");
        }
        if let Some(rkey) = wc.invalidated {
            // Only the rkey of the task this response answers (bug 3).
            // libiscsi builds ITTs in host byte order (get_itt()).
            let idx = u32::from_ne_bytes(pdu.itt.to_be_bytes()) & ITT_INDEX_MASK;
            let ok = pdu.opcode == TargetOpcode::ScsiResponse
                && res.remote_inv
                && res.conn.mr_valid(idx)
                && res.conn.mr_rkey(idx) == Some(rkey);
            if !ok {
                pr_err!(
                    "target invalidated rkey {:#x} with a {:?} for ITT {:#x}, not that task's key\n",
                    rkey,
                    pdu.opcode,
                    pdu.itt
                );
                return Err("foreign remote invalidation");
            }
            res.conn.mr_invalidated(idx);
        }
        if pdu.opcode == TargetOpcode::AsyncMessage && !self.async_allowed() {
            pr_err!(
                "target sent more than {} async messages in a second\n",
                ASYNC_PER_SEC
            );
            return Err("async message flood");
        }
        match pdu.opcode {
            TargetOpcode::TextResponse => {
                self.text_rsps.fetch_add(1, Ordering::Relaxed);
            }
            TargetOpcode::LogoutResponse => self.logged_out.store(true, Ordering::Release),
            _ => {}
        }
        let mut bhs = [0u8; 48];
        bhs.copy_from_slice(&bytes[pdu.bhs.clone()]);
        let data = &bytes[pdu.data.clone()];
        if pdu.opcode == TargetOpcode::LoginResponse
            && login::login_ok(&bhs)
            && login::enters_full_feature(&bhs)
        {
            // Post the full-feature receives before libiscsi sees the last
            // login response, so the target's first PDU finds one.
            let Some(bufs) = res.ff_rx.as_ref() else {
                return Err("full feature phase without receive buffers");
            };
            for (i, b) in bufs.iter().enumerate() {
                // CAST: the count came from a u32.
                if res.conn.post_recv(1 + i as u32, b).is_err() {
                    return Err("cannot post the full-feature receives");
                }
            }
        }
        match self.bound.with(|c| c.complete_pdu(&bhs, data)) {
            Some(Err(_)) => Err("libiscsi rejected a PDU"),
            _ => Ok(()),
        }
    }
}

impl CmHandler for IserConn {
    fn event(&self, id: &CmIdRef, event: CmEvent) {
        let mut st = self.state.lock();
        match event {
            CmEvent::AddrResolved => {
                if st.phase != Phase::Connecting {
                    return;
                }
                if let Err(e) = id.resolve_route(RESOLVE_TIMEOUT_MS) {
                    pr_err!("cannot resolve the route to {}: {:?}\n", Addr(self.dst), e);
                    st.phase = Phase::Failed;
                    self.cv.notify_all();
                }
            }
            CmEvent::RouteResolved => {
                if st.phase != Phase::Connecting {
                    return;
                }
                if let Err(e) = self.route_resolved(id, &mut st) {
                    pr_err!("cannot connect to {}: {:?}\n", Addr(self.dst), e);
                    st.phase = Phase::Failed;
                    self.cv.notify_all();
                }
            }
            CmEvent::Established(private) => {
                if st.phase != Phase::Connecting {
                    return;
                }
                if let Some(p) = private {
                    if let Ok(h) = CmHeader::decode(&p) {
                        pr_debug!("target CM header: {:?}\n", h);
                    }
                }
                st.phase = Phase::Up;
                self.up.store(true, Ordering::Release);
                self.cv.notify_all();
            }
            CmEvent::AddrError(s)
            | CmEvent::RouteError(s)
            | CmEvent::Rejected(s)
            | CmEvent::ConnectError(s)
            | CmEvent::Unreachable(s) => {
                pr_err!(
                    "connecting to {} failed: {:?} (status {})\n",
                    Addr(self.dst),
                    event,
                    s
                );
                if st.phase == Phase::Connecting {
                    st.phase = Phase::Failed;
                }
                self.cv.notify_all();
                drop(st);
                self.fail("connection error");
            }
            CmEvent::DeviceRemoval => {
                // The device goes once every connection on it is gone, and
                // iscsid may not be there to end this one: fail it (iscsid,
                // if alive, recovers the session through another
                // connection) and free its RDMA resources now, CM id
                // included. Later calls from libiscsi find nothing.
                let was_up = st.phase == Phase::Up;
                self.up.store(false, Ordering::Release);
                st.phase = match st.phase {
                    Phase::Connecting | Phase::Failed => Phase::Failed,
                    _ => Phase::Terminating,
                };
                self.cv.notify_all();
                drop(st);
                pr_warn!(
                    "RDMA device of the connection to {} removed: freeing its resources\n",
                    Addr(self.dst)
                );
                if was_up && !self.logged_out.load(Ordering::Acquire) {
                    self.fail("RDMA device removed");
                }
                self.release();
            }
            CmEvent::Disconnected | CmEvent::AddrChange | CmEvent::TimewaitExit => {
                let was_up = st.phase == Phase::Up;
                self.up.store(false, Ordering::Release);
                match st.phase {
                    Phase::Connecting => st.phase = Phase::Failed,
                    Phase::Up => st.phase = Phase::Terminating,
                    _ => {}
                }
                self.cv.notify_all();
                drop(st);
                // After a logout the target closing is the expected end.
                if was_up && !self.logged_out.load(Ordering::Acquire) {
                    self.fail(match event {
                        CmEvent::AddrChange => "address changed",
                        _ => "disconnected by the target",
                    });
                }
            }
            CmEvent::Other(n) => pr_debug!("CM event {} ignored\n", n),
        }
    }

    fn id_state(&self) -> &CmIdState {
        &self.id_state
    }
}

impl QpHandler for IserConn {
    fn recv_done(&self, tag: u32, wc: Wc) {
        let Some(res) = self.res() else {
            return;
        };
        if !wc.ok() {
            if !wc.flushed() {
                pr_err!("receive failed with status {}\n", wc.status);
                self.fail("receive error");
            }
            return;
        }
        self.received(&res, tag, wc);
    }

    fn send_done(&self, tag: u32, wc: Wc) {
        if !wc.ok() && !wc.flushed() {
            pr_err!("send (tag {}) failed with status {}\n", tag, wc.status);
            self.fail("send error");
        }
        if tag == UNSIGNALED_TAG {
            return;
        }
        let Some(res) = self.res() else {
            return;
        };
        // CAST: the vector was sized from a u32 count.
        let cmds = res.tx_hdrs.len() as u32;
        if tag >= CTRL_TX + cmds {
            // The list has room for every slot: it was made with all of them.
            let _ = res
                .dataout_free
                .lock()
                .push(tag - CTRL_TX - cmds, GFP_ATOMIC);
            res.dataout_avail.fetch_add(1, Ordering::AcqRel);
        } else {
            let put = res.puts.lock().get_mut(tag as usize).and_then(Option::take);
            drop(put);
        }
    }
}

impl kernel::InPlaceModule for Riser {
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            params: crate::params::current()?,
            client <- Client::new(),
            transport <- Transport::new(
                module,
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

    #[test]
    fn transport_identity_matches_ib_iser() {
        assert_eq!(Iser::CAPS, 0x89);
        assert_eq!(<Iser as TransportOps>::NAME, c"iser");
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
