// SPDX-License-Identifier: GPL-2.0

//! The iSER connection and its RDMA CM state machine: connect, poll,
//! teardown, and the CM events (iser_verbs.c's connection half); and a
//! connected connection's resources ([`Res`]: the QP, its buffers and the
//! command bookkeeping), made when the route resolves and dropped at
//! teardown.

use super::{
    device::DevUse,
    failure::Failure,
    memory::Cmds,
    stats::Counters,
    tags::{
        SendTag,
        TagMap, //
    },
    tx::Tx,
    Addr,
    Iser,
    ASYNC_PER_SEC,
    DEF_XMIT_CMDS_MAX,
    DISCOVERY_RECVS,
    LOGIN_DATA,
    LOGOUT_GRACE_MS,
    RELEASES,
    RESOLVE_TIMEOUT_MS, //
};
use crate::{
    fault,
    iscsi::ConnSlot,
    kernel_ext::rcu::{
        RcuBox,
        RcuRead,
        RcuRef, //
    },
    params::riser_dbg,
    proto::{
        iser::{
            CmHeader,
            ISER_CM_HDR_LEN, //
        },
        pdu::{
            Bhs,
            HEADERS_LEN, //
        },
        ratelimit,
        sizing::{
            self,
            ConnSizing,
            Params,
            DATAOUT_SLOTS_PER_CMD, //
        },
    },
    rdma::{
        cm::{
            CmEvent,
            CmHandler,
            CmId,
            CmIdRef, //
        },
        conn::{
            ConnCaps,
            Connection,
            RecvBuf,
            SendOp, //
        },
        AsyncEvent,
        Client,
        Cq,
        Device,
        DeviceRef,
        Pd,
        PollContext, //
    },
    trace, //
};
use core::net::SocketAddr;
use kernel::sync::atomic::{
    Acquire,
    Atomic,
    Full,
    Relaxed,
    Release, //
};
use kernel::{
    alloc::KBox,
    impl_has_work, new_condvar, new_mutex, new_work,
    prelude::*,
    sync::{
        rcu,
        Arc,
        ArcBorrow,
        Completion,
        CondVar,
        CondVarTimeoutResult,
        Mutex,
        SetOnce, //
    },
    time::{
        delay::fsleep,
        msecs_to_jiffies,
        Delta,
        Instant,
        Monotonic, //
    },
    workqueue::{
        Work,
        WorkItem, //
    },
};

/// The state of an iSER connection, with what each state holds.
pub(crate) enum Phase {
    /// Resolving the address, then the route, with the CM id: when the
    /// route resolves, the resources (the QP among them) are made on it and
    /// it moves into them.
    Resolving(CmId<IserConn>),
    /// The QP is made (its CM id is in the resources) and connecting.
    Connecting,
    /// Connected.
    Up,
    /// Connecting failed, or never started.
    Failed,
    /// Being torn down (or lost).
    Terminating,
}

impl Phase {
    /// The state's number in the `riser_conn_state` tracepoint.
    fn code(&self) -> u8 {
        match self {
            Self::Resolving(_) => 0,
            Self::Connecting => 1,
            Self::Up => 2,
            Self::Failed => 3,
            Self::Terminating => 4,
        }
    }

    /// Whether the connection is still being made.
    fn connecting(&self) -> bool {
        matches!(self, Self::Resolving(_) | Self::Connecting)
    }
}

/// An iSER connection's state, under its mutex.
pub(super) struct State {
    phase: Phase,
    /// The RDMA resources (and the CM id) are gone: set by whichever of
    /// `ep_disconnect` and the device-removal handler freed them.
    pub(super) released: bool,
    /// The target closed the connection (the CM said disconnected).
    peer_closed: bool,
    /// The connection was up when it was torn down after a Logout
    /// Response: the release first lets the target close (bounded).
    logout_grace: bool,
}

impl State {
    /// Moves to `to`, and returns the phase left (with what it held: a CM
    /// id dropped inside its own handler goes to the CM; elsewhere, drop it
    /// without the state lock, as destroying an id waits for its handler).
    /// The only writer of `up`, the lock-free view of [`Phase::Up`]; each
    /// change is a `riser_conn_state` event.
    fn set(&mut self, conn: &IserConn, to: Phase) -> Phase {
        conn.up.store(matches!(to, Phase::Up), Release);
        let from = self.phase.code();
        let code = to.code();
        let left = core::mem::replace(&mut self.phase, to);
        trace::conn_state(trace::id(conn), from, code);
        left
    }
}

/// An iSER connection: what an iSCSI endpoint stands for.
#[pin_data]
pub(crate) struct IserConn {
    #[pin]
    pub(super) state: Mutex<State>,
    #[pin]
    pub(super) cv: CondVar,
    #[pin]
    pub(super) bound: ConnSlot,
    pub(super) res: RcuBox<Res>,
    pub(super) dst: SocketAddr,
    pub(super) params: Params,
    /// Established and not torn down (the phase is [`Phase::Up`]): the
    /// lock-free view atomic paths check, as they cannot take the state's
    /// mutex. Written only by `State::set`, under that mutex, with the
    /// phase; read anywhere.
    pub(super) up: Atomic<bool>,
    /// A discovery session's connection. Set by the login hook (process
    /// context, iscsid's send_pdu).
    pub(super) discovery: Atomic<bool>,
    /// Data bytes each full-feature receive holds: what the login declared
    /// (as far as riser allows), fixed at the last login request. Written
    /// by the login hook only.
    pub(super) recv_size: Atomic<u32>,
    /// A Logout Response arrived: the target will close the connection.
    /// Set by the receive path (softirq).
    pub(super) logged_out: Atomic<bool>,
    /// The failure was logged (once), by whichever path failed first.
    pub(super) failed: Atomic<bool>,
    /// The marker posted after the target hung up has completed: what it
    /// sent before is with libiscsi ([`IserConn::flush_received`]). Set by
    /// the send completion (softirq).
    pub(super) flushed: Atomic<bool>,
    /// The release of the resources was handed to the release queue (once).
    release_queued: Atomic<bool>,
    /// Completed once the resources' QP is drained and destroyed and the
    /// task references are dropped (`Res`'s drop, before its slow frees):
    /// `shut` waits for it.
    pub(super) quiesced: Arc<Completion>,
    /// The clock of the async-message limit.
    pub(super) born: Instant<Monotonic>,
    /// Start (milliseconds after `born`) of the current one-second window
    /// of the async-message limit, and the async messages seen in it.
    /// Only the receive path (one CQ, serialised) writes them; a race
    /// would only miscount.
    pub(super) async_window: Atomic<i64>,
    pub(super) async_count: Atomic<u32>,
    /// What the connection counts (its resources count into it too).
    pub(super) counters: Arc<Counters>,
    /// Hands a held TMF Response to libiscsi from a workqueue, for a path
    /// that released it where libiscsi cannot take one (`xmit_task`).
    #[pin]
    held_work: Work<IserConn>,
}

impl_has_work! {
    impl HasWork<IserConn> for IserConn { self.held_work }
}

impl WorkItem for IserConn {
    type Pointer = Arc<IserConn>;

    fn run(this: Arc<IserConn>) {
        // Gone with the resources: the teardown answers libiscsi's TMF.
        let held = this.res().and_then(|r| r.cmds.events_done(&r.conn));
        if let Some(bhs) = held {
            this.deliver_held(bhs);
        }
    }
}

impl IserConn {
    pub(super) fn connect(dst: SocketAddr) -> Result<Arc<Self>> {
        let params = crate::params::current()?;
        let quiesced = Arc::pin_init(Completion::new(), GFP_KERNEL)?;
        let counters = Arc::new(Counters::new(), GFP_KERNEL)?;
        let c = Arc::pin_init(
            pin_init!(IserConn {
                state <- new_mutex!(State {
                    // Until the CM id below exists.
                    phase: Phase::Failed,
                    released: false,
                    peer_closed: false,
                    logout_grace: false,
                }, "riser_conn_state"),
                cv <- new_condvar!("riser_conn_cv"),
                bound <- ConnSlot::new(),
                res: RcuBox::new(),
                dst,
                params,
                up: Atomic::new(false),
                discovery: Atomic::new(false),
                recv_size: Atomic::new(0),
                logged_out: Atomic::new(false),
                failed: Atomic::new(false),
                flushed: Atomic::new(false),
                release_queued: Atomic::new(false),
                quiesced,
                born: Instant::now(),
                async_window: Atomic::new(0),
                async_count: Atomic::new(0),
                counters,
                held_work <- new_work!("riser_held_tmf"),
            }),
            GFP_KERNEL,
        )?;
        let id = CmId::new(c.clone())?;
        let mut st = c.state.lock();
        // Resolve under the lock so the handler finds the id in place.
        st.set(&c, Phase::Resolving(id));
        let r = match &st.phase {
            Phase::Resolving(id) => id.resolve_addr(dst, RESOLVE_TIMEOUT_MS),
            _ => Err(EINVAL),
        };
        if let Err(e) = r {
            let id = st.set(&c, Phase::Failed);
            drop(st);
            drop(id);
            pr_err!("cannot resolve {}: {:?}\n", Addr(dst), e);
            return Err(e);
        }
        drop(st);
        Ok(c)
    }

    pub(super) fn is_up(&self) -> bool {
        self.up.load(Acquire)
    }

    pub(super) fn res(&self) -> Option<RcuRef<'_, Res>> {
        self.res.access()
    }

    /// The resources, inside the caller's RCU read section.
    #[inline(always)]
    pub(super) fn res_in<'a>(&'a self, rcu: &'a RcuRead) -> Option<&'a Res> {
        self.res.get(rcu)
    }

    pub(super) fn poll(&self, timeout_ms: u32) -> Result<bool> {
        let mut st = self.state.lock();
        if st.phase.connecting() {
            let _ = self
                .cv
                .wait_interruptible_timeout(&mut st, msecs_to_jiffies(timeout_ms));
        }
        match st.phase {
            Phase::Up => Ok(true),
            Phase::Resolving(_) | Phase::Connecting => Ok(false),
            Phase::Failed | Phase::Terminating => Err(ENOTCONN),
        }
    }

    /// Tears the connection down and has its resources freed, waiting only
    /// until the target can reach nothing and riser holds no task: the
    /// frees themselves go on behind. Idempotent; every call waits. The
    /// caller is iscsid (stop, disconnect) or the iSCSI class's cleanup
    /// work, which has libiscsi fail the connection's commands only after
    /// this returns, and blocks the session and starts its replacement
    /// timer only after the disconnect.
    ///
    /// When the connection owes nothing ([`IserConn::owes_nothing`]: no
    /// command live on a slot, no task reference held, once no post can
    /// still be under way), there is nothing of libiscsi's for the target
    /// or the device to reach, and nothing to wait for: the release goes
    /// on behind, and after a logout it first lets the target close (LIO
    /// mishandles a disconnect that flushes its Logout Response's send: it
    /// warns, and has crashed on teardown, with ib_iser too), at most
    /// `LOGOUT_GRACE_MS`, on the release queue rather than in iscsid's
    /// call (iscsid logs sessions out one at a time).
    ///
    /// The release runs on riser's release queue, in `Res`'s order: the QP
    /// disconnected, drained and destroyed, and only then the task
    /// references dropped, so no command completes while the target can
    /// still reach its memory (the PD is the connection's own). That much
    /// is awaited here (nvme-rdma's order: no reference of riser's outlives
    /// the stop, so none can complete a command the midlayer has since
    /// sent again); the MRs, the PD, the CQ, the CM id and the buffers (a
    /// second or two on a debug kernel for hundreds of commands, three
    /// quarters of it DMA buffers) are freed after, unawaited. Without the
    /// queue (module unload) everything runs here.
    pub(super) fn shut(self: &Arc<Self>) {
        self.terminate();
        if !self.release_queued.xchg(true, Full) {
            self.log_totals();
            let c = self.clone();
            if let Err(release) = RELEASES.spawn(move || {
                c.await_peer_close();
                fault::delay_release();
                c.release(true)
            }) {
                release();
            }
        }
        // Resources made are dropped by the release queued above (or the
        // device-removal handler), which completes this after the QP and
        // before the slow frees. None made: nothing to wait for.
        if self.res.was_populated() && !self.owes_nothing() {
            self.quiesced.wait_for_completion();
        }
    }

    /// Whether the connection holds nothing of libiscsi's that the target
    /// or the device may still reach: every slot's word quiet (no command
    /// live, no key of one valid, no SEND of one outstanding) and no task
    /// reference held. Asked after [`IserConn::terminate`] refused the
    /// fast paths, past a grace period: a command post that saw the
    /// connection up did so inside its RCU read section (`xmit_task`), so
    /// once the grace period ends every such post has published its word,
    /// and no later one will. A control PDU sent after this (which
    /// libiscsi's unbind has stopped already) may still take a reference:
    /// the release drops it after the drain, and the layer waits for task
    /// references before libiscsi frees the connection. Not sure (the
    /// resources already being released): false.
    /// With `always_register=0` the target holds the PD's global rkey,
    /// which only the QP's end takes back: false.
    fn owes_nothing(&self) -> bool {
        if !self.params.always_register {
            return false;
        }
        rcu::synchronize_rcu();
        self.res().is_some_and(|r| r.cmds.owes_nothing(&r.conn))
    }

    /// After a logout, lets the target close first, at most
    /// `LOGOUT_GRACE_MS`: disconnecting at once can flush the target's
    /// Logout Response send, which LIO mishandles. Only after a logout,
    /// so failover never waits on the network. Called by the release
    /// before it disconnects.
    fn await_peer_close(&self) {
        let mut st = self.state.lock();
        if !st.logout_grace {
            return;
        }
        let mut left = msecs_to_jiffies(LOGOUT_GRACE_MS);
        while !st.peer_closed {
            match self.cv.wait_interruptible_timeout(&mut st, left) {
                CondVarTimeoutResult::Woken { jiffies } => left = jiffies,
                CondVarTimeoutResult::Timeout | CondVarTimeoutResult::Signal { .. } => break,
            }
        }
    }

    /// Stops the connection: the fast paths refuse new work from here. No
    /// waiting on the network, and nothing freed; idempotent.
    fn terminate(&self) {
        // From here the fast paths refuse new work.
        let left = {
            let mut st = self.state.lock();
            if self.logged_out.load(Acquire) && matches!(st.phase, Phase::Up) {
                st.logout_grace = true;
            }
            if st.phase.connecting() {
                // iscsid gave up waiting (its ep_poll timed out) or was
                // stopped: say so, as iscsid's own line does not say why.
                pr_warn!(
                    "connection to {} abandoned before it was established ({} ms after it began)\n",
                    Addr(self.dst),
                    self.born.elapsed().as_millis()
                );
            }
            let to = match st.phase {
                Phase::Failed => Phase::Failed,
                _ => Phase::Terminating,
            };
            let left = st.set(self, to);
            self.cv.notify_all();
            left
        };
        // A CM id still resolving is destroyed here, outside the lock.
        drop(left);
    }

    /// Logs what the connection counted that a user may want at its end
    /// (once: `shut` calls it when it queues the release).
    fn log_totals(&self) {
        let c = &self.counters;
        let texts = c.text_rsps.load(Relaxed);
        if texts > 0 && self.discovery.load(Relaxed) {
            pr_info!(
                "discovery of {}: {} text responses\n",
                Addr(self.dst),
                texts
            );
        }
        let (remote, local) = (c.remote_invs.load(Relaxed), c.local_invs.load(Relaxed));
        if remote + local > 0 {
            pr_info!(
                "connection to {}: {} registrations invalidated by the target, {} by riser\n",
                Addr(self.dst),
                remote,
                local
            );
        }
        let n = c.unreg_cmds.load(Relaxed);
        if n > 0 {
            pr_info!(
                "connection to {}: {} commands sent with unregistered buffers\n",
                Addr(self.dst),
                n
            );
        }
    }

    /// Frees the RDMA resources: the QP (drained first), CQ, MRs, buffers,
    /// the device context and the CM id. The release queued by `shut` and
    /// the CM's device-removal handler may both get here. Returns when they are
    /// gone, also when the other one freed them, unless `wait` is false:
    /// the device-removal handler must not wait for a thread whose drop of
    /// the CM id waits (in `rdma_destroy_id`) for that very handler. The
    /// CM itself waits for the id to be destroyed before the device goes.
    pub(super) fn release(&self, wait: bool) {
        // Destroying the id waits for its handler, which takes the state
        // lock: done outside it. (In the id's own handler, dropping it gives
        // it to the CM instead.)
        let resolving = {
            let mut st = self.state.lock();
            match st.phase {
                Phase::Resolving(_) => Some(st.set(self, Phase::Failed)),
                _ => None,
            }
        };
        drop(resolving);
        // Waits for fast-path users, then drops the resources, which
        // drains the QP and drops the id last (none made: nothing to do).
        let mine = self.res.revoke().unwrap_or(true);
        let mut st = self.state.lock();
        if mine {
            st.released = true;
            self.cv.notify_all();
        } else if wait {
            // The other one is dropping them: wait until it is done.
            while !st.released {
                self.cv.wait(&mut st);
            }
        }
    }

    /// Why the RDMA async event `ev` of `dev` leaves this connection
    /// without a path, if it does: its port went down, its device failed,
    /// or (a GID change) its own source GID left the port's table. `None`
    /// for a connection not through `dev`, not up yet, or logged out (its
    /// end is under way, and failing it would only hide why).
    pub(super) fn broken_by(&self, dev: &Device, ev: AsyncEvent) -> Option<Failure> {
        if !self.is_up() || self.logged_out.load(Acquire) {
            return None;
        }
        let res = self.res()?;
        let port = res.conn.port_on(dev)?;
        match ev {
            AsyncEvent::PortError(_) if ev.breaks_port(port) => Some(Failure::PortDown),
            AsyncEvent::DeviceFatal => Some(Failure::DeviceFatal),
            AsyncEvent::GidChange(p) if p == port => {
                let sgid = res.conn.source_gid();
                (!dev.port_has_gid(port, &sgid)).then_some(Failure::GidChanged)
            }
            _ => None,
        }
    }

    /// Hands a held TMF Response to libiscsi (completion context).
    pub(super) fn deliver_held(&self, bhs: Bhs) {
        if let Some(Err(_)) = self.bound.with(|c| c.complete_pdu(bhs.bytes(), &[])) {
            self.fail(Failure::LibiscsiRejected);
        }
    }

    /// The connection failed under libiscsi: hand recovery to iscsid (at
    /// once, or from a workqueue where libiscsi's locks may be held: the
    /// layer decides).
    pub(super) fn fail(&self, why: Failure) {
        if !self.failed.xchg(true, Full) {
            pr_err!("connection to {} failed: {}\n", Addr(self.dst), why);
        }
        self.bound.fail();
    }

    /// Makes the connection's resources and connects. On any failure the
    /// id is dropped here, inside its own handler, which hands it to the CM
    /// to destroy (see `CmHandler`).
    pub(super) fn route_resolved(&self, id: CmId<IserConn>, ev: &CmIdRef) -> Result {
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
        // A PD of the connection's own, not one per device as ib_iser has:
        // the rkeys riser hands a target are then usable only through this
        // connection's QP. Another target (another connection on the
        // device) cannot reach them, whatever key it guesses, and once the
        // QP is destroyed no peer can, so teardown completes the commands
        // before it deregisters their MRs (see `Res`).
        let pd = if self.params.always_register {
            Pd::new(ctx.dev.device())
        } else {
            Pd::new_with_global_rkey(ctx.dev.device())
        }
        .and_then(|pd| Ok(Arc::new(pd, GFP_KERNEL)?))?;
        let cq = Cq::from_pool(
            ctx.dev.device(),
            sizing.cq_entries,
            -1,
            PollContext::SoftIrq,
        )?;
        let n_dataout = sizing.max_cmds * DATAOUT_SLOTS_PER_CMD;
        let tag_map = TagMap {
            cmds: sizing.max_cmds,
            dataouts: n_dataout,
        };
        let made = Bufs::new(self, &ctx.dev, tag_map, sizing.signal_interval)
            .and_then(|b| Ok((b, KBox::<Res>::new_uninit(GFP_KERNEL)?)));
        let (mut bufs, slot) = match made {
            Ok(m) => m,
            Err(e) => {
                pr_err!("cannot allocate the connection's buffers: {:?}\n", e);
                return Err(e);
            }
        };
        let conn_caps = ConnCaps {
            max_send_wr: sizing.max_send_wr,
            max_recv_wr: sizing.max_recv_wr,
            // The login's, a normal session's full-feature receives,
            // and apart from them a discovery session's.
            recv_tags: super::discovery_tags(&sizing)
                .checked_add(DISCOVERY_RECVS)
                .ok_or(EINVAL)?,
            // Control buffers, task slots, Data-Out headers, one
            // signaled LOCAL_INV per MR, and the marker.
            send_tags: tag_map.count().ok_or(EINVAL)?,
            mrs: sizing.max_cmds,
            pages_per_mr: sizing.pages_per_mr,
            // CAST: a small constant.
            max_inline: HEADERS_LEN as u32,
            cmd_slots: sizing.max_cmds,
            cmd_tag_base: tag_map.tag(SendTag::Slot(0)),
        };
        let conn = match Connection::new(id, pd, cq, conn_caps) {
            Ok(c) => c,
            Err((_id, e)) => {
                pr_err!("cannot make the QP: {:?}\n", e);
                return Err(e);
            }
        };
        // Should it fail (it cannot: tag 0 is new and the buffer is on the
        // QP's device), the login requests fail to post their receive.
        if let Some(Err(e)) = bufs.login_rx.take().map(|b| conn.give_recv_buf(0, b)) {
            pr_err!("cannot give the login receive its buffer: {:?}\n", e);
        }
        let mut private = [0u8; ISER_CM_HDR_LEN];
        // Encoding four bytes into four bytes cannot fail.
        let _ = CmHeader {
            zbva_not_supported: true,
            send_w_inv_not_supported: !self.params.always_register,
        }
        .encode(&mut private);
        let rd_atom = u8::try_from(caps.max_qp_rd_atom.min(255)).unwrap_or(u8::MAX);
        let connected = conn.connect_in_handler(ev, &private, rd_atom, 1);
        let res = Res::new(self, conn, ctx, sizing, bufs);
        // Populated once: this handler runs once per id for ROUTE_RESOLVED.
        let _ = self.res.populate(slot.write(res));
        connected
    }

    /// Before a connection the target hung up is failed: hands libiscsi
    /// what the target sent before it did (a Login Reject, then the
    /// disconnect: the login must fail on the reject, not on a lost
    /// connection). The QP goes to the error state and a marker is posted
    /// behind everything; the receives completed before it are handled
    /// before its completion (one CQ, polled in order), which is waited
    /// for, at most a second (as ib_iser drains its QP before it fails the
    /// connection). From the CM handler (process context).
    fn flush_received(&self, id: &CmIdRef) {
        if id.disconnect().is_err() {
            return;
        }
        let posted = self.res().is_some_and(|res| {
            let tag = res.tx.tags().tag(SendTag::Marker);
            res.conn.post_send(SendOp::Marker { tag }).is_ok()
        });
        if !posted {
            return;
        }
        for _ in 0..100 {
            if self.flushed.load(Acquire) {
                return;
            }
            fsleep(Delta::from_millis(10));
        }
        pr_warn!(
            "connection to {}: the flush after the target's disconnect did not complete in 1 s\n",
            Addr(self.dst)
        );
    }

    /// Counts an async message against [`ASYNC_PER_SEC`]; false past it.
    pub(super) fn async_allowed(&self) -> bool {
        let w = ratelimit::Window {
            start_ms: self.async_window.load(Relaxed),
            count: self.async_count.load(Relaxed),
        };
        let (w, ok) = ratelimit::allow(w, self.born.elapsed().as_millis(), ASYNC_PER_SEC);
        self.async_window.store(w.start_ms, Relaxed);
        self.async_count.store(w.count, Relaxed);
        ok
    }

    /// Delivers a held TMF Response the caller's events may have released,
    /// from riser's release queue: for paths under libiscsi's session
    /// locks, where it cannot be handed over. Queued once at a time; a
    /// response still held when the work runs goes with the event that
    /// releases it.
    pub(super) fn deliver_held_later(ep: ArcBorrow<'_, Self>) {
        let _ = super::RELEASES.enqueue(ep.into());
    }

    /// The connection failed, seen from a path that may hold libiscsi's
    /// session locks: logged now, reported from a workqueue.
    pub(super) fn fail_later(&self, why: Failure) {
        if !self.failed.xchg(true, Full) {
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
                if !matches!(st.phase, Phase::Resolving(_)) {
                    return;
                }
                if let Err(e) = id.resolve_route(RESOLVE_TIMEOUT_MS) {
                    pr_err!("cannot resolve the route to {}: {:?}\n", Addr(self.dst), e);
                    // The id goes to the CM (dropped in its own handler).
                    drop(st.set(self, Phase::Failed));
                    self.cv.notify_all();
                }
            }
            CmEvent::RouteResolved => {
                if !matches!(st.phase, Phase::Resolving(_)) {
                    return;
                }
                let Phase::Resolving(cm) = st.set(self, Phase::Connecting) else {
                    return;
                };
                if let Err(e) = self.route_resolved(cm, id) {
                    pr_err!("cannot connect to {}: {:?}\n", Addr(self.dst), e);
                    st.set(self, Phase::Failed);
                    self.cv.notify_all();
                }
            }
            CmEvent::Established(private) => {
                if !matches!(st.phase, Phase::Connecting) {
                    return;
                }
                if let Some(p) = private {
                    if let Ok(h) = CmHeader::decode(&p) {
                        riser_dbg!("target CM header: {:?}\n", h);
                    }
                    // The target says it does not send with invalidate:
                    // riser invalidates every key itself, and a
                    // SEND_WITH_INV from it fails the connection.
                    if CmHeader::refuses_send_w_inv(&p) == Some(true) {
                        riser_dbg!(
                            "connection to {}: the target does not send with invalidate\n",
                            Addr(self.dst)
                        );
                        if let Some(r) = self.res() {
                            r.cmds.refuse_remote_inv();
                        }
                    }
                }
                st.set(self, Phase::Up);
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
                if st.phase.connecting() {
                    // A resolving id goes to the CM.
                    drop(st.set(self, Phase::Failed));
                }
                self.cv.notify_all();
                drop(st);
                self.fail(Failure::ConnectError);
            }
            CmEvent::DeviceRemoval => {
                // The device goes once every connection on it is gone, and
                // iscsid may not be there to end this one: fail it (iscsid,
                // if alive, recovers the session through another
                // connection) and free its RDMA resources now, CM id
                // included. Later calls from libiscsi find nothing.
                let was_up = matches!(st.phase, Phase::Up);
                // Nobody is left to close: a release waiting for the
                // target after a logout goes on.
                st.peer_closed = true;
                let to = if st.phase.connecting() || matches!(st.phase, Phase::Failed) {
                    Phase::Failed
                } else {
                    Phase::Terminating
                };
                // A resolving id goes to the CM.
                drop(st.set(self, to));
                self.cv.notify_all();
                drop(st);
                pr_warn!(
                    "RDMA device of the connection to {} removed: freeing its resources\n",
                    Addr(self.dst)
                );
                if was_up && !self.logged_out.load(Acquire) {
                    self.fail(Failure::DeviceRemoved);
                }
                // If `ep_disconnect` is freeing them already, its drop of
                // the CM id waits for this handler: return, and the CM
                // waits for that drop instead.
                self.release(false);
            }
            CmEvent::Disconnected | CmEvent::AddrChange | CmEvent::TimewaitExit => {
                let was_up = matches!(st.phase, Phase::Up);
                if !matches!(event, CmEvent::AddrChange) {
                    st.peer_closed = true;
                }
                if st.phase.connecting() {
                    drop(st.set(self, Phase::Failed));
                } else if was_up {
                    st.set(self, Phase::Terminating);
                }
                self.cv.notify_all();
                drop(st);
                // After a logout the target closing is the expected end.
                if was_up && !self.logged_out.load(Acquire) {
                    self.flush_received(id);
                    self.fail(match event {
                        CmEvent::AddrChange => Failure::AddrChanged,
                        _ => Failure::Disconnected,
                    });
                }
            }
            CmEvent::Other(n) => riser_dbg!("CM event {} ignored\n", n),
        }
    }
}

/// The resources of a connected iSER connection. Dropping it (after the
/// revocation that stops every fast-path user) disconnects, drains and
/// destroys the QP first, then drops the task references (so the commands
/// complete as soon as the target can reach none of their memory: the PD
/// is the connection's own, so with its one QP gone no peer can use an
/// rkey of it) and completes `quiesced`, for which `IserConn::shut`
/// waits; then the fields drop: the MRs, the PD, the CQ and the CM id
/// (`conn`), then the buffers (`tx`).
pub(super) struct Res {
    /// The commands as the target can reach them (`memory.rs`).
    pub(super) cmds: Cmds,
    pub(super) conn: Connection<IserConn>,
    /// Completed by the drop once the QP is gone and the task references
    /// are dropped.
    quiesced: Arc<Completion>,
    /// The owning connection's address, which its tracepoint events carry.
    pub(super) trace_id: usize,
    pub(super) dev: DevUse,
    pub(super) sizing: ConnSizing,
    /// The send buffers (`tx.rs`).
    pub(super) tx: Tx,
    /// How many full-feature receives (tags `1..=n`) were given their
    /// buffers; set once, at bind.
    pub(super) ff_recvs: SetOnce<u32>,
    /// The first tag of a discovery session's receives
    /// (`DISCOVERY_RECVS` of them), once they were given their buffers:
    /// set before the last login request of a discovery session is sent.
    pub(super) disc_recvs: SetOnce<u32>,
    /// The full-feature receives were posted (once: a second full-feature
    /// Login Response is refused). Set by the receive path.
    pub(super) ff_posted: Atomic<bool>,
}

impl Drop for Res {
    fn drop(&mut self) {
        // Before any field: the task references the commands hold may go
        // only once the QP, the one way to the connection's PD, is gone
        // (drained: no work request outstanding, no completion to come).
        self.conn.destroy_qp();
        self.cmds.teardown(&self.conn);
        self.quiesced.complete_all();
    }
}

/// What a connection needs before its QP: the send buffers, the command
/// bookkeeping and the login receive's buffer.
pub(super) struct Bufs {
    pub(super) cmds: Cmds,
    pub(super) tx: Tx,
    /// Receive tag 0's buffer, for login responses: given to the
    /// connection once it is made.
    pub(super) login_rx: Option<RecvBuf>,
}

impl Bufs {
    /// The buffers of `ep`'s connection on `dev`, whose send tags `tags`
    /// numbers. The target may invalidate riser's keys (SEND_WITH_INV)
    /// when every command registers its memory (always_register).
    pub(super) fn new(
        ep: &IserConn,
        dev: &DeviceRef,
        tags: TagMap,
        signal_interval: u32,
    ) -> Result<Self> {
        Ok(Self {
            cmds: Cmds::new(tags, ep.params.always_register, ep.counters.clone())?,
            tx: Tx::new(dev, tags, signal_interval)?,
            login_rx: Some(RecvBuf::new(dev, HEADERS_LEN + LOGIN_DATA)?),
        })
    }
}

impl Res {
    /// The resources of `ep`'s connection `conn`, with the buffers `b`
    /// made for it.
    pub(super) fn new(
        ep: &IserConn,
        conn: Connection<IserConn>,
        dev: DevUse,
        sizing: ConnSizing,
        b: Bufs,
    ) -> Self {
        Res {
            cmds: b.cmds,
            conn,
            quiesced: ep.quiesced.clone(),
            trace_id: crate::trace::id(ep),
            dev,
            sizing,
            tx: b.tx,
            ff_recvs: SetOnce::default(),
            disc_recvs: SetOnce::default(),
            ff_posted: Atomic::new(false),
        }
    }
}
