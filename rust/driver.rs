// SPDX-License-Identifier: GPL-2.0

//! The driver: module state, the `iser` transport's behaviour, the
//! per-device context and the iSER connection (the datamover). It uses only
//! the safe layers; no `unsafe` here.

#![forbid(unsafe_code)]

use crate::{
    fault::{self, Site},
    iscsi::{
        self, caps, host_param, param, Attr, Conn, ConnSlot, Direction, PduRewrite, Registry,
        SessionLimits, Task, TaskRef, Transport, TransportOps,
    },
    proto::{
        iser::{CmHeader, IserHeader, StagVa, ISER_CM_HDR_LEN, ISER_HDR_LEN},
        login,
        pdu::{RxPdu, TargetOpcode, HEADERS_LEN},
        ratelimit,
        sizing::{self, ConnSizing, Params, DATAOUT_SLOTS_PER_CMD},
        tmf::{self, Scope, TmfRequest},
    },
    rdma::{
        cm::{CmEvent, CmHandler, CmId, CmIdRef},
        conn::{
            Access, ConnCaps, Connection, DeviceRef, DmaBuf, DmaDir, QpHandler, Registration,
            SendOp, Sge, Wc, UNSIGNALED_TAG,
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
    alloc::{KBox, KVVec, KVec},
    new_condvar, new_mutex, new_spinlock, new_spinlock_irq,
    prelude::*,
    revocable::Revocable,
    str::BStr,
    sync::{Arc, CondVar, Mutex, SetOnce, SpinLock, SpinLockIrq},
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

static REGISTRY: Registry<Iser> = Registry::new();

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

    fn registry() -> &'static Registry<Self> {
        &REGISTRY
    }

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
        if !ep.params.always_register {
            pr_warn!(
                "session to {} runs with always_register=0: the target is given the PD's \
                 global rkey, which reaches all of memory until the connection ends\n",
                Addr(ep.dst)
            );
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
        // every legal PDU fits (ib_iser's receives hold 128 bytes whatever
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
                    hdr: r.bhs,
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
        let len = HEADERS_LEN + size as usize;
        let mut bufs = KVec::with_capacity(count as usize, GFP_KERNEL)?;
        for _ in 0..count {
            bufs.push(DmaBuf::new(&dev, len, DmaDir::FromDevice)?, GFP_KERNEL)?;
        }
        let bufs = RxBufs {
            bufs,
            copy: RxCopy::new(len)?,
        };
        // A target may answer the transit without taking it; the next
        // request's buffers are then the ones already made.
        let _ = ep.res().ok_or(ENOTCONN)?.ff_rx.populate(bufs);
        Ok(rewrite)
    }

    fn max_recv_dlength(ep: &IserConn) -> Option<u32> {
        let n = ep.recv_size.load(Ordering::Relaxed);
        (n != 0).then_some(n)
    }

    fn init_task(ep: &IserConn, task: &Task<'_, Self>) -> Result {
        // libiscsi turns any error of init_task into EIO, and fails the
        // command with DID_ABORT, which the midlayer does not retry: an I/O
        // error. A connection going down (the target hung up, the device
        // went, the failure not yet reported) must not refuse the command
        // here: `xmit_task` does, and libiscsi requeues a command it could
        // not send. (Refusing here lost two writes of faults.sh's rxe
        // removal to I/O errors, 2026-11-25.)
        if task.is_scsi() && task.direction() == Direction::Write {
            let Some(res) = ep.res() else {
                return Ok(());
            };
            let need = Res::dataouts_needed(task)?;
            // CAST: the vector was sized from a u32 count.
            let pool = res.dataout.len() as u32;
            if need > pool {
                // Waiting cannot help: requeued, it would never go.
                // libiscsi fails the command (DID_ABORT) instead.
                pr_err!(
                    "a {}-byte write needs {} unsolicited Data-Outs, more than the \
                     connection's {}: failing it (the target's \
                     MaxRecvDataSegmentLength is {})\n",
                    task.data_len(),
                    need,
                    pool,
                    task.max_xmit_dlength()
                );
                return Err(EINVAL);
            }
        }
        Ok(())
    }

    fn xmit_task(ep: &IserConn, task: &mut Task<'_, Self>) -> Result {
        let res = ep.res().ok_or(ENODEV)?;
        if !task.is_scsi() {
            return res.send_control(task);
        }
        // Going down: libiscsi requeues the command (see `init_task`).
        if !ep.is_up() {
            return Err(ENOTCONN);
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
            // report it sent and let recovery fail it. libiscsi holds the
            // session's frwd_lock here, which failing the connection takes:
            // that is done from a workqueue.
            drop(res);
            ep.fail_later(why);
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
        // Nothing is left to do: a command's task is freed only once the
        // target can no longer reach its memory (its rkey invalidated, its
        // sends completed: see `Track`), and the layer unmaps the data.
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
    #[pin]
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
    /// Where a login or text response is parsed from.
    login_copy: RxCopy,
    /// One header buffer per task slot: command and control PDUs.
    tx_hdrs: KVec<Arc<DmaBuf>>,
    /// Header buffers of unsolicited Data-Out PDUs, and the free ones.
    dataout: KVec<Arc<DmaBuf>>,
    #[pin]
    dataout_free: SpinLockIrq<KVec<u32>>,
    /// Free Data-Out headers not reserved by a command being sent: a WRITE
    /// reserves all it needs before anything of it is posted.
    dataout_avail: AtomicU32,
    /// What the target can still reach of each command, and the references
    /// that hold the commands until it cannot.
    #[pin]
    track: SpinLockIrq<Track>,
    ff_rx: SetOnce<RxBufs>,
    /// The full-feature receives were posted (once: a second full-feature
    /// Login Response is refused).
    ff_posted: AtomicBool,
    /// The target may invalidate our rkeys with SEND_WITH_INV.
    remote_inv: bool,
    /// Command SENDs whose PDU went inline: one in `signal_interval` is
    /// signaled (`proto::sizing::signal_interval`).
    inline_sends: AtomicU32,
    /// Registrations the target invalidated with its response, and those
    /// riser invalidated itself (LOCAL_INV) before completing the command.
    remote_invs: AtomicU64,
    local_invs: AtomicU64,
    signal_interval: u32,
}

/// A copy of a completed receive, for the CPU to parse the PDU from: a
/// receive buffer is DMA memory, which is only ever copied out of (see
/// [`DmaBuf`]). One per set of receive buffers, as large as one of them;
/// its lock, taken for the parse and the hand-off to libiscsi, makes it the
/// receive path's alone whatever the CQ's polling does. Only the
/// completion handler takes it, so it is never contended.
struct RxCopy(Pin<KBox<SpinLock<KVVec<u8>>>>);

impl RxCopy {
    /// A copy for receive buffers of `len` bytes.
    fn new(len: usize) -> Result<Self> {
        let v = KVVec::from_elem(0u8, len, GFP_KERNEL)?;
        Ok(Self(KBox::pin_init(new_spinlock!(v), GFP_KERNEL)?))
    }

    /// Copies the `byte_len` bytes a receive completion reports from `buf`
    /// and hands them to `f`. The device's count is not trusted: no more
    /// than the buffer holds is copied (a longer count is then seen by the
    /// parser as the overrun it is).
    fn with<R>(&self, buf: &DmaBuf, byte_len: u32, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        // CAST: a u32 fits a usize.
        let n = (byte_len as usize).min(buf.len());
        let mut copy = self.0.lock();
        let dst = copy.get_mut(..n).ok_or(EINVAL)?;
        buf.read(0, dst)?;
        Ok(f(dst))
    }
}

/// The full-feature receive buffers and their copy.
struct RxBufs {
    bufs: KVec<Arc<DmaBuf>>,
    copy: RxCopy,
}

/// Where a command's memory registration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MrState {
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
struct Inflight {
    /// The command's ITT as sent (meaningful while it holds references).
    itt: u32,
    /// Its LUN, as in the BHS.
    lun: [u8; 8],
    /// The registration the target was given, and the reference that holds
    /// the command until it is invalidated.
    mr: Option<(MrState, TaskRef)>,
    /// Signaled SENDs naming the command's data (immediate data,
    /// Data-Outs) not completed yet; each holds a reference in `puts`.
    sends: u32,
    /// Unsolicited Data-Outs set aside for the command and not posted yet.
    unsent: u32,
    /// Whether its SCSI Response came. Kept until the slot's next command:
    /// libiscsi frees the task only when riser's references go, and until
    /// then would take a second response for it as a first one (iSCSI has
    /// one response per command).
    responded: bool,
}

impl Inflight {
    /// Whether a send naming the command's data is still to go or to
    /// complete.
    fn sending(&self) -> bool {
        self.sends > 0 || self.unsent > 0
    }
}

/// A TMF Response held back until the commands its TMF ended can no longer
/// be reached by the target: libiscsi hands them back to the midlayer as
/// soon as it sees the response.
struct HeldRsp {
    bhs: [u8; 48],
    scope: Scope,
}

/// A connection's command bookkeeping, under one lock (taken in the send
/// path and the completion handlers). Task references are never dropped
/// under it: dropping one may free the task, which takes libiscsi's locks.
struct Track {
    /// By task slot.
    inflight: KVec<Inflight>,
    /// By send tag: the reference a signaled SEND holds on its task until it
    /// completes, and whether it counts in the task's `sends`.
    puts: KVec<Option<(TaskRef, bool)>>,
    /// The TMF request sent last, until its response arrives.
    tmf: Option<TmfRequest>,
    held: Option<HeldRsp>,
    /// The ITT of the Logout Request sent, if any: only its response ends
    /// the session.
    logout_itt: Option<u32>,
}

impl Track {
    fn new(cmds: u32, send_tags: u32) -> Result<Self> {
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
    fn busy(&self, scope: Scope) -> bool {
        self.inflight.iter().any(|f| {
            let pending =
                f.sending() || matches!(f.mr, Some((MrState::Ending | MrState::Invalidating, _)));
            pending && scope.covers(f.itt, &f.lun)
        })
    }

    /// Takes back the reference of send tag `tag`, once its SEND completed
    /// (or was not posted), with the slot whose LOCAL_INV may go now.
    fn send_completed(&mut self, tag: u32) -> (Option<TaskRef>, Option<u32>) {
        let Some((r, counted)) = self.puts.get_mut(tag as usize).and_then(Option::take) else {
            return (None, None);
        };
        let idx = r.index();
        if counted {
            if let Some(f) = self.inflight.get_mut(idx as usize) {
                f.sends = f.sends.saturating_sub(1);
            }
        }
        (Some(r), self.end_sending(idx))
    }

    /// Slot `idx` if its command ended (`Ending`) and has no send left:
    /// its registration is then marked `Invalidating`, for the caller to
    /// post the LOCAL_INV.
    fn end_sending(&mut self, idx: u32) -> Option<u32> {
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

    /// The held TMF Response, if the commands it waits for are done.
    fn release_held(&mut self) -> Option<[u8; 48]> {
        let scope = self.held.as_ref()?.scope;
        if self.busy(scope) {
            return None;
        }
        self.held.take().map(|h| h.bhs)
    }
}

/// The buffers of a connection, made before its QP.
struct Bufs {
    ctrl_tx: KVec<Arc<DmaBuf>>,
    login_rx: Arc<DmaBuf>,
    login_copy: RxCopy,
    tx_hdrs: KVec<Arc<DmaBuf>>,
    dataout: KVec<Arc<DmaBuf>>,
    dataout_free: KVec<u32>,
    track: Track,
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
        let track = Track::new(cmds, CTRL_TX + cmds + n_dataout)?;
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
            login_copy: RxCopy::new(HEADERS_LEN + LOGIN_DATA)?,
            tx_hdrs: headers(cmds)?,
            dataout: headers(n_dataout)?,
            dataout_free,
            track,
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
            login_copy: b.login_copy,
            tx_hdrs: b.tx_hdrs,
            dataout_avail: AtomicU32::new(u32::try_from(b.dataout.len()).unwrap_or(0)),
            dataout: b.dataout,
            dataout_free <- new_spinlock_irq!(b.dataout_free),
            track <- new_spinlock_irq!(b.track),
            ff_rx: SetOnce::default(),
            ff_posted: AtomicBool::new(false),
            remote_inv,
            inline_sends: AtomicU32::new(0),
            remote_invs: AtomicU64::new(0),
            local_invs: AtomicU64::new(0),
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

    /// Commands (task slots) of the connection.
    fn cmds(&self) -> u32 {
        // CAST: the vectors were sized from u32 counts.
        self.tx_hdrs.len() as u32
    }

    fn dataout_tag(&self, i: u32) -> u32 {
        CTRL_TX + self.cmds() + i
    }

    /// The tag of MR `idx`'s signaled LOCAL_INV.
    fn inv_tag(&self, idx: u32) -> u32 {
        // CAST: as in `cmds`.
        CTRL_TX + self.cmds() + self.dataout.len() as u32 + idx
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
    fn control_buffer(&self, t: &Track, idx: u32, data_len: usize) -> Result<(u32, &Arc<DmaBuf>)> {
        if data_len > LOGIN_DATA {
            return Err(EINVAL);
        }
        let free = |tag: u32| {
            self.conn.send_tag_idle(tag) && t.puts.get(tag as usize).is_some_and(Option::is_none)
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
        let mut t = self.track.lock();
        let (tag, buf) = self.control_buffer(&t, task.index(), data.len())?;
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
        if let Some(r) = keep {
            let slot = t.puts.get_mut(tag as usize).ok_or(EINVAL)?;
            *slot = Some((r, false));
        }
        // What the responses to these end is decided when they arrive.
        if let Some(req) = tmf::tmf_request(bhs) {
            t.tmf = Some(req);
        } else if tmf::is_logout_request(bhs) {
            t.logout_itt = Some(tmf::itt(bhs));
        }
        Ok(())
    }

    /// Sends a SCSI command: registration, command PDU (with immediate
    /// data), unsolicited Data-Outs. Says whether the data went
    /// unregistered, and why the connection must fail if a Data-Out could
    /// not follow its posted command.
    ///
    /// Before anything is posted, the command gets a reference for the
    /// registration the target is given (dropped once it is invalidated)
    /// and one for each SEND naming its data (dropped at its completion),
    /// so libiscsi completes it only when the target can no longer reach
    /// its memory.
    fn send_command(&self, task: &mut Task<'_, Iser>) -> Result<(bool, Option<&'static str>)> {
        let idx = task.index();
        let hdr_buf = self.tx_hdrs.get(idx as usize).ok_or(EINVAL)?;
        let dir = task.direction();
        let len = task.data_len();
        let mut iser = IserHeader::default();
        let mut reg = None;
        // The task slot's MR (MR index == slot index), held while the chain
        // that maps and registers it is built and posted.
        let mut claim = None;
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
                if task.mapping().is_none() {
                    task.map_data(&self.dev.dev)?;
                }
                let sg = task.mapping().ok_or(EINVAL)?;
                // A write whose data all goes as immediate data is sent by
                // this side alone: the target gets no STag, so one segment
                // needs no registration, only the local DMA lkey (as
                // ib_iser does).
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
                    // A registration the target was given is invalidated
                    // before its task is freed; one for local sends only
                    // (no remote access) is invalidated here, chained
                    // before the next registration.
                    let mr = claim.insert(self.conn.claim_mr(idx)?);
                    inv = self.conn.mr_valid(idx);
                    uses_mr = true;
                    mr.map(sg)?
                };
                if r.len() < len {
                    return Err(EINVAL);
                }
                if dir == Direction::Read {
                    iser.read = Some(StagVa {
                        stag: r.rkey(),
                        va: r.iova(),
                    });
                } else {
                    // Immediate data plus unsolicited Data-Outs: the target
                    // RDMA-READs only what follows them.
                    let unsol = task.imm_count().saturating_add(task.unsol_len()).min(len);
                    if unsol < len {
                        iser.write = Some(StagVa {
                            stag: r.rkey(),
                            va: r.iova() + u64::from(unsol),
                        });
                    }
                }
                reg = Some(r);
            }
        }
        // What the registration lets the target do: a write whose data all
        // goes by SEND (immediate data, Data-Outs) gives it no STag, and its
        // MR no remote access. Otherwise the target holds an rkey it can use
        // until it is invalidated.
        let access = if iser.read.is_some() {
            Access::RemoteWrite
        } else if iser.write.is_some() {
            Access::RemoteRead
        } else {
            Access::Local
        };
        let remote_key = uses_mr && access != Access::Local;
        let hdrs = Self::headers(iser, &task.bhs())?;
        let imm = task.imm_count();
        // A PDU without immediate data goes inline when the QP takes it: the
        // provider copies it while posting, so the SEND needs no completion
        // to protect a buffer (bug 10 is about buffers the device still
        // reads), and only one in `signal_interval` is signaled, for the
        // send queue's sake. Immediate data is sent from the SCSI buffer.
        let with_imm = dir == Direction::Write && imm > 0;
        let inline = !with_imm && self.conn.max_inline() as usize >= HEADERS_LEN;
        let tag = Self::task_tag(idx);
        if !inline && !self.conn.send_tag_idle(tag) {
            // The slot's last SEND is still being read by the device: its
            // header buffer cannot be written yet (libiscsi requeues).
            return Err(EAGAIN);
        }
        let one;
        let two;
        let sges: &[Sge<'_>] = if inline {
            &[]
        } else {
            hdr_buf.write(0, &hdrs)?;
            let head = hdr_buf.sge(0, HEADERS_LEN, self.conn.pd())?;
            match reg {
                Some(r) if with_imm => {
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
        // The references, before anything is posted: once it is, a response
        // on another CPU may complete the command.
        let refs = self.hold_command(task, remote_key, with_imm, dataouts);
        if let Err(e) = refs {
            self.dataout_avail.fetch_add(dataouts, Ordering::AcqRel);
            return Err(e);
        }
        let send = if inline {
            let n = self.inline_sends.fetch_add(1, Ordering::Relaxed);
            SendOp::InlineSend {
                tag: (n % self.signal_interval == 0).then_some(tag),
                bytes: &hdrs,
            }
        } else {
            SendOp::Send {
                tag,
                sges,
                keep: Some(hdr_buf),
            }
        };
        let reg_op = reg
            .filter(|_| uses_mr)
            .map(|reg| SendOp::Reg { reg, access });
        // The chain, and where the registration is in it.
        let (posted, reg_at) = match (inv, reg_op) {
            (true, Some(reg_op)) => (
                self.conn
                    .post_chain(&[SendOp::LocalInv { mr: idx, tag: None }, reg_op, send]),
                Some(1),
            ),
            (false, Some(reg_op)) => (self.conn.post_chain(&[reg_op, send]), Some(0)),
            _ => (self.conn.post_chain(&[send]), None),
        };
        if let Err((e, n)) = posted {
            self.dataout_avail.fetch_add(dataouts, Ordering::AcqRel);
            if remote_key && reg_at.is_some_and(|r| n > r) {
                // The registration went out and the command did not: the
                // target never got the key, but keys are guessable, and it
                // stays valid until invalidated. The command keeps the
                // reference for it, and is reported sent: the connection
                // fails (the caller says why), recovery gives the command
                // back, and the reference goes with the MRs at teardown.
                self.unhold_command(idx, false, with_imm);
                return Ok((unregistered, Some("cannot post a command")));
            }
            self.unhold_command(idx, remote_key, with_imm);
            return Err(e);
        }
        let broken = match (reg, dataouts > 0) {
            (Some(r), true) => self.send_dataouts(task, &r, dataouts),
            _ => None,
        };
        Ok((unregistered, broken))
    }

    /// Records a command about to be posted on its slot, with a reference
    /// for the rkey the target gets (`remote_key`), one for a command SEND
    /// that names its data (`with_imm`), and the `dataouts` unsolicited
    /// Data-Outs that will follow it.
    fn hold_command(
        &self,
        task: &Task<'_, Iser>,
        remote_key: bool,
        with_imm: bool,
        dataouts: u32,
    ) -> Result {
        let idx = task.index();
        let bhs = task.bhs();
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
            pr_err!(
                "task slot {} reused while the target may reach its last command\n",
                idx
            );
            return Err(EINVAL);
        }
        let counted = send_ref.is_some();
        if let (Some(r), Some(p)) = (send_ref, t.puts.get_mut(tag as usize)) {
            *p = Some((r, true));
        }
        if let Some(f) = t.inflight.get_mut(idx as usize) {
            f.itt = tmf::itt(&bhs);
            f.lun = tmf::lun(&bhs);
            f.mr = mr_ref.map(|r| (MrState::Registered, r));
            f.sends = u32::from(counted);
            f.unsent = dataouts;
            f.responded = false;
        }
        Ok(())
    }

    /// Undoes [`Res::hold_command`] for a command that was not posted.
    fn unhold_command(&self, idx: u32, remote_key: bool, with_imm: bool) {
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
    /// Each Data-Out holds a reference on the task until its SEND completed,
    /// so the data stays mapped while the device reads it.
    fn send_dataouts(
        &self,
        task: &Task<'_, Iser>,
        r: &Registration<'_>,
        reserved: u32,
    ) -> Option<&'static str> {
        let idx = task.index() as usize;
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
            let Some(tref) = task.get_ref() else {
                let _ = self.dataout_free.lock().push(slot, GFP_ATOMIC);
                task.data_out_failed();
                break Some("task gone while sending its Data-Outs");
            };
            left -= 1;
            let tag = self.dataout_tag(slot);
            {
                let mut t = self.track.lock();
                if let Some(p) = t.puts.get_mut(tag as usize) {
                    *p = Some((tref, true));
                }
                if let Some(f) = t.inflight.get_mut(idx) {
                    f.sends += 1;
                    f.unsent = f.unsent.saturating_sub(1);
                }
            }
            let buf = &self.dataout[slot as usize];
            let sent = Self::headers(IserHeader::default(), &d.bhs)
                .and_then(|hdrs| buf.write(0, &hdrs))
                .and_then(|()| {
                    if fault::hit(Site::PostDataOut) {
                        return Err(EIO);
                    }
                    let sges = [
                        buf.sge(0, HEADERS_LEN, self.conn.pd())?,
                        r.sge(d.offset, d.len)?,
                    ];
                    self.conn.post_send(&[SendOp::Send {
                        tag,
                        sges: &sges,
                        keep: Some(buf),
                    }])
                });
            if sent.is_err() {
                let back = {
                    let mut t = self.track.lock();
                    // Not sent after all: should the command have ended,
                    // its LOCAL_INV goes below, once `unsent` is settled.
                    if let Some(f) = t.inflight.get_mut(idx) {
                        f.unsent += 1;
                    }
                    t.send_completed(tag).0
                };
                drop(back);
                let _ = self.dataout_free.lock().push(slot, GFP_ATOMIC);
                left += 1;
                task.data_out_failed();
                break Some("cannot post a Data-Out");
            }
            task.data_out_sent(&d);
        };
        // Give back what was reserved and not used.
        self.dataout_avail.fetch_add(left, Ordering::AcqRel);
        let ended = {
            let mut t = self.track.lock();
            if let Some(f) = t.inflight.get_mut(idx) {
                f.unsent = 0;
            }
            // CAST: slot indexes fit a u32.
            t.end_sending(idx as u32)
        };
        match ended.map(|i| self.invalidate(i)) {
            Some(Err(why)) => failed.or(Some(why)),
            _ => failed,
        }
    }

    /// A SCSI Response for the command on slot `idx` with wire ITT `itt`
    /// arrived; `invalidated` is whether the target invalidated its rkey
    /// with it (already checked to be that command's). Ends the target's
    /// access to the command's memory: at once if the target invalidated
    /// it, else by a LOCAL_INV whose completion drops the reference.
    /// Returns the reference to drop once the response is handed on; fails
    /// on a second response for the same command.
    fn response_arrived(
        &self,
        idx: u32,
        itt: u32,
        invalidated: bool,
    ) -> core::result::Result<Option<TaskRef>, &'static str> {
        let mut t = self.track.lock();
        let Some(f) = t.inflight.get_mut(idx as usize) else {
            return Ok(None);
        };
        if f.itt != itt {
            // A stale ITT, or one never sent: libiscsi refuses it.
            return Ok(None);
        }
        if core::mem::replace(&mut f.responded, true) {
            drop(t);
            pr_err!("target sent a second SCSI Response for ITT {:#x}\n", itt);
            return Err("second response to a command");
        }
        if !matches!(f.mr, Some((MrState::Registered, _))) {
            // Nothing to invalidate.
            return Ok(None);
        }
        if invalidated {
            self.remote_invs.fetch_add(1, Ordering::Relaxed);
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
    fn invalidate(&self, idx: u32) -> core::result::Result<(), &'static str> {
        self.local_invs.fetch_add(1, Ordering::Relaxed);
        self.conn
            .post_send(&[SendOp::LocalInv {
                mr: idx,
                tag: Some(self.inv_tag(idx)),
            }])
            .map_err(|e| {
                pr_err!("cannot invalidate MR {}: {:?}\n", idx, e);
                // The reference stays until the QP and MRs are gone.
                "cannot post a LOCAL_INV"
            })
    }

    /// A TMF Response for the request `req` arrived: if the target ended
    /// commands, their registrations are invalidated, and the response is
    /// held until none of them is reachable. Returns whether it is held.
    fn tmf_response(
        &self,
        req: TmfRequest,
        bhs: &[u8; 48],
    ) -> core::result::Result<bool, &'static str> {
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
                                .map_err(|_| "no memory for a TMF's invalidations")?;
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
                bound <- ConnSlot::new(),
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
            // never waits on the network here.
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
        if let Some(res) = self.res() {
            let (remote, local) = (
                res.remote_invs.load(Ordering::Relaxed),
                res.local_invs.load(Ordering::Relaxed),
            );
            if remote + local > 0 {
                pr_info!(
                    "connection to {}: {} registrations invalidated by the target, {} by riser\n",
                    Addr(self.dst),
                    remote,
                    local
                );
            }
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

    /// Makes the connection's resources and connects. On any failure the
    /// id is dropped here, inside its own handler, which hands it to the CM
    /// to destroy (see `CmHandler`).
    fn route_resolved(&self, ev: &CmIdRef, st: &mut State) -> Result {
        let id = st.pending.take().ok_or(EINVAL)?;
        let ctx = ev
            .device()
            .and_then(Client::<Iser>::context_of)
            .ok_or(ENODEV)
            .and_then(DevUse::new)?;
        let caps = ctx.caps;
        let Some(sizing) = sizing::conn_sizing(
            &self.params,
            DEF_XMIT_CMDS_MAX,
            caps.max_qp_wr,
            caps.max_fast_reg_page_list_len,
            false,
        ) else {
            pr_err!("the RDMA device's limits are too small for iSER\n");
            return Err(EINVAL);
        };
        let cq = Cq::from_pool(
            ctx.dev.device(),
            sizing.cq_entries,
            -1,
            PollContext::SoftIrq,
        )?;
        let n_dataout = sizing.max_cmds * DATAOUT_SLOTS_PER_CMD;
        let made = Bufs::new(&ctx.dev, sizing.max_cmds, n_dataout)
            .and_then(|b| Ok((b, KBox::<Revocable<Res>>::new_uninit(GFP_KERNEL)?)));
        let (bufs, slot) = match made {
            Ok(m) => m,
            Err(e) => {
                pr_err!("cannot allocate the connection's buffers: {:?}\n", e);
                return Err(e);
            }
        };
        let conn_caps = ConnCaps {
            max_send_wr: sizing.max_send_wr,
            max_recv_wr: sizing.max_recv_wr,
            recv_tags: sizing.max_recv_wr,
            // Control buffers, task slots, Data-Out headers, and one
            // signaled LOCAL_INV per MR.
            send_tags: CTRL_TX + sizing.max_cmds + n_dataout + sizing.max_cmds,
            mrs: sizing.max_cmds,
            pages_per_mr: sizing.pages_per_mr,
            // CAST: a small constant.
            max_inline: HEADERS_LEN as u32,
        };
        let conn = match Connection::new(id, ctx.pd.clone(), cq, conn_caps) {
            Ok(c) => c,
            Err((_id, e)) => {
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
        let w = ratelimit::Window {
            start_ms: self.async_window.load(Ordering::Relaxed),
            count: self.async_count.load(Ordering::Relaxed),
        };
        let (w, ok) = ratelimit::allow(w, self.born.elapsed().as_millis(), ASYNC_PER_SEC);
        self.async_window.store(w.start_ms, Ordering::Relaxed);
        self.async_count.store(w.count, Ordering::Relaxed);
        ok
    }

    /// Handles one receive (softirq): validate, hand to libiscsi, repost.
    fn received(&self, res: &Res, tag: u32, wc: Wc) {
        let (buf, copy, ff) = if tag == 0 {
            (&res.login_rx, &res.login_copy, false)
        } else {
            let ring = res.ff_rx.as_ref();
            let Some((b, c)) = ring.and_then(|r| Some((r.bufs.get(tag as usize - 1)?, &r.copy)))
            else {
                self.fail("receive completion for an unknown buffer");
                return;
            };
            (b, c, true)
        };
        match copy.with(buf, wc.byte_len, |bytes| self.deliver(res, bytes, wc)) {
            Ok(Ok(())) => {}
            Ok(Err(why)) => self.fail(why),
            Err(_) => self.fail("receive buffer unreadable"),
        }
        if ff {
            // One repost per completion (bug 1).
            if let Err(e) = res.conn.post_recv(tag, buf) {
                if self.is_up() {
                    // One receive fewer than the target may send: its next
                    // PDUs would stall the connection (RNR). Fail it now.
                    pr_err!("cannot repost a receive: {:?}\n", e);
                    self.fail("cannot repost a receive");
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
        // libiscsi builds ITTs in host byte order (get_itt()).
        let idx = u32::from_ne_bytes(pdu.itt.to_be_bytes()) & ITT_INDEX_MASK;
        let foreign = |rkey: u32| {
            pr_err!(
                "target invalidated rkey {:#x} with a {:?} for ITT {:#x}, not that task's key\n",
                rkey,
                pdu.opcode,
                pdu.itt
            );
            "foreign remote invalidation"
        };
        if let Some(rkey) = wc.invalidated {
            // Only the rkey of the task this response answers (bug 3).
            let ok = pdu.opcode == TargetOpcode::ScsiResponse
                && res.remote_inv
                && res.conn.mr_valid(idx)
                && res.conn.mr_rkey(idx) == Some(rkey);
            if !ok {
                return Err(foreign(rkey));
            }
        }
        // The reference that held the command while the target could reach
        // its memory: dropped once libiscsi has the response.
        let mut done_ref = None;
        if pdu.opcode == TargetOpcode::ScsiResponse {
            // Fails only when riser's own LOCAL_INV cannot be posted (the
            // target invalidated nothing).
            done_ref = res.response_arrived(idx, pdu.itt, wc.invalidated.is_some())?;
        }
        if wc.invalidated.is_some() {
            res.conn.mr_invalidated(idx);
        }
        if pdu.opcode == TargetOpcode::AsyncMessage && !self.async_allowed() {
            pr_err!(
                "target sent more than {} async messages in a second\n",
                ASYNC_PER_SEC
            );
            return Err("async message flood");
        }
        let mut bhs = [0u8; 48];
        bhs.copy_from_slice(&bytes[pdu.bhs.clone()]);
        let data = &bytes[pdu.data.clone()];
        match pdu.opcode {
            TargetOpcode::TextResponse => {
                self.text_rsps.fetch_add(1, Ordering::Relaxed);
            }
            TargetOpcode::LogoutResponse => {
                // libiscsi takes a Logout Response for any management ITT:
                // only the answer to riser's own Logout Request ends the
                // session (then the target's disconnect is no failure).
                let ours = res
                    .track
                    .lock()
                    .logout_itt
                    .take_if(|i| *i == pdu.itt)
                    .is_some();
                if !ours {
                    pr_err!(
                        "target sent a Logout Response for ITT {:#x}, which answers no Logout Request\n",
                        pdu.itt
                    );
                    return Err("Logout Response without a logout");
                }
                self.logged_out.store(true, Ordering::Release);
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
                    return Err("TMF Response with data");
                }
                let req = res.track.lock().tmf.take_if(|r| r.itt == pdu.itt);
                // Held back until the commands it ended are out of the
                // target's reach; the last invalidation hands it on.
                if let Some(req) = req {
                    if res.tmf_response(req, &bhs)? {
                        return Ok(());
                    }
                }
            }
            _ => {}
        }
        if pdu.opcode == TargetOpcode::LoginResponse
            && login::login_ok(&bhs)
            && login::enters_full_feature(&bhs)
        {
            if res.ff_posted.swap(true, Ordering::AcqRel) {
                pr_err!("target sent a second full-feature Login Response\n");
                return Err("second full-feature Login Response");
            }
            // Post the full-feature receives before libiscsi sees the last
            // login response, so the target's first PDU finds one.
            let Some(bufs) = res.ff_rx.as_ref() else {
                return Err("full feature phase without receive buffers");
            };
            for (i, b) in bufs.bufs.iter().enumerate() {
                // CAST: the count came from a u32.
                if res.conn.post_recv(1 + i as u32, b).is_err() {
                    return Err("cannot post the full-feature receives");
                }
            }
        }
        let r = match self.bound.with(|c| c.complete_pdu(&bhs, data)) {
            Some(Err(_)) => Err("libiscsi rejected a PDU"),
            _ => Ok(()),
        };
        // libiscsi has completed the command (or refused the response): the
        // task is freed once this last reference goes.
        drop(done_ref);
        r
    }

    /// Hands a held TMF Response to libiscsi (completion context).
    fn deliver_held(&self, bhs: [u8; 48]) {
        if let Some(Err(_)) = self.bound.with(|c| c.complete_pdu(&bhs, &[])) {
            self.fail("libiscsi rejected a PDU");
        }
    }

    /// The connection failed, seen from a path that may hold libiscsi's
    /// session locks: logged now, reported from a workqueue.
    fn fail_later(&self, why: &str) {
        if !self.failed.swap(true, Ordering::AcqRel) {
            pr_err!("connection to {} failed: {}\n", Addr(self.dst), why);
        }
        self.bound.fail_later();
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
            // Being torn down: what the tags held goes with the resources,
            // after the QP and MRs are destroyed.
            return;
        };
        let cmds = res.cmds();
        let inv_base = res.inv_tag(0);
        let (done, ended, held) = {
            let mut t = res.track.lock();
            let (done, ended) = if tag >= inv_base {
                let idx = (tag - inv_base) as usize;
                match t.inflight.get_mut(idx) {
                    // A flushed or failed LOCAL_INV leaves the rkey valid:
                    // the reference stays until the MR is destroyed.
                    Some(f) if wc.ok() => (f.mr.take().map(|(_, r)| r), None),
                    _ => (None, None),
                }
            } else {
                t.send_completed(tag)
            };
            (done, ended, t.release_held())
        };
        // The last send of a command that ended: its LOCAL_INV may go.
        if let Some(Err(why)) = ended.filter(|_| wc.ok()).map(|i| res.invalidate(i)) {
            self.fail(why);
        }
        if (CTRL_TX + cmds..inv_base).contains(&tag) {
            // The list has room for every slot: it was made with all of them.
            let _ = res
                .dataout_free
                .lock()
                .push(tag - CTRL_TX - cmds, GFP_ATOMIC);
            res.dataout_avail.fetch_add(1, Ordering::AcqRel);
        }
        // Outside the lock: the last reference frees the task.
        drop(done);
        if let Some(bhs) = held {
            self.deliver_held(bhs);
        }
    }
}

impl kernel::InPlaceModule for Riser {
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        if let Ok(p) = crate::params::current() {
            if !p.always_register {
                pr_warn!(
                    "always_register=0: targets are given the global rkey, which reaches all \
                     of memory (as ib_iser does); riser cannot take it back from a target\n"
                );
            }
        }
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
    fn a_held_tmf_response_waits_for_the_sends_of_the_commands_it_ended() -> Result {
        let mut t = Track::new(4, 8)?;
        let lun = [0, 1, 0, 0, 0, 0, 0, 0];
        t.inflight[2].itt = 0x22;
        t.inflight[2].lun = lun;
        t.inflight[2].sends = 2;
        t.inflight[3].itt = 0x33;
        t.inflight[3].lun = [0, 2, 0, 0, 0, 0, 0, 0];
        t.inflight[3].sends = 1;
        t.held = Some(HeldRsp {
            bhs: [7; 48],
            scope: Scope::Lun(lun),
        });
        assert!(t.busy(Scope::Task(0x22)));
        assert!(!t.busy(Scope::Task(0x44)));
        assert!(t.release_held().is_none());
        t.inflight[2].sends = 1;
        assert!(t.release_held().is_none());
        // The command of another LUN does not hold the response back.
        t.inflight[2].sends = 0;
        assert_eq!(t.release_held(), Some([7; 48]));
        assert!(t.held.is_none());
        assert!(t.busy(Scope::All));
        Ok(())
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
