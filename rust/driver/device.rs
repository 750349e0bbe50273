// SPDX-License-Identifier: GPL-2.0

//! The per-device context: what connections on a device share (its
//! limits), made by the first and freed with the last, and the `ib_client`
//! that tracks devices (as ib_iser's iser_verbs.c does for its device
//! list). The PD is not shared: each connection has its own (see
//! `IserConn::route_resolved`).

use super::Iser;
use crate::{
    iscsi::TransportOps,
    kernel_ext::registry::registry,
    params::riser_dbg, //
    rdma::{
        AsyncEvent,
        ClientDriver,
        ClientRegistry,
        Device,
        DeviceCaps,
        DeviceRef,
        MapDevice, //
    },
};
use kernel::{
    alloc::KBox,
    new_mutex,
    prelude::*,
    str::BStr,
    sync::{
        Arc,
        Mutex, //
    },
};

/// What riser keeps for an RDMA device while connections use it: the
/// device and its limits.
pub(crate) struct DevCtx {
    pub(super) dev: DeviceRef,
    pub(super) caps: DeviceCaps,
    /// The device's references for the commands' data mappings.
    pub(super) map: MapDevice,
}

/// riser's per-device slot (the `ib_client` context): the device context,
/// made by the first connection on the device and freed with the last.
#[pin_data]
pub(crate) struct DevSlot {
    pub(super) dev: DeviceRef,
    #[pin]
    pub(super) ctx: Mutex<DevUsers>,
}

pub(super) struct DevUsers {
    pub(super) ctx: Option<Arc<DevCtx>>,
    pub(super) users: usize,
}

/// A connection's use of a device context; dropping it (in process context)
/// frees the context with the last user.
pub(crate) struct DevUse {
    pub(super) ctx: Arc<DevCtx>,
    pub(super) slot: Arc<DevSlot>,
}

impl DevUse {
    pub(super) fn new(slot: Arc<DevSlot>) -> Result<Self> {
        let mut g = slot.ctx.lock();
        let ctx = match &g.ctx {
            Some(c) => c.clone(),
            None => {
                let c = Arc::new(
                    DevCtx {
                        dev: slot.dev.clone(),
                        caps: slot.dev.device().caps(),
                        map: MapDevice::new(&slot.dev)?,
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
            riser_dbg!("last connection on the device gone: its context is freed\n");
        }
    }
}

impl ClientDriver for Iser {
    type Context = Arc<DevSlot>;
    const NAME: &'static CStr = c"riser";
    registry!(ClientRegistry<Iser>);

    fn add(dev: &Device) -> Result<KBox<Arc<DevSlot>>> {
        let dev = DeviceRef::new(dev)?;
        let slot = Arc::pin_init(
            pin_init!(DevSlot {
                dev,
                ctx <- new_mutex!(DevUsers { ctx: None, users: 0 }, "riser_dev_users"),
            }),
            GFP_KERNEL,
        )?;
        KBox::new(slot, GFP_KERNEL).map_err(Into::into)
    }

    /// ib_iser only prints these. riser fails at once the connections an
    /// event leaves without a path (their port lost its link, the device
    /// failed, or their own source address left the port's GID table), so
    /// iscsid starts recovery (and dm-multipath fails the path) without
    /// waiting for NOP timeouts or RC retries. A GID change that leaves a
    /// connection's address in place (another address came or went) leaves
    /// the connection alone.
    ///
    /// A GID change arrives with ib_core's GID table mutex held (and
    /// sometimes the RTNL): the walk below allocates nothing, and failing a
    /// connection only queues iscsid's work.
    fn event(dev: &Device, _slot: &Arc<DevSlot>, ev: AsyncEvent) {
        let name = dev.name();
        let name = BStr::from_bytes(name.as_bytes());
        match ev {
            AsyncEvent::PortError(_) | AsyncEvent::GidChange(_) | AsyncEvent::DeviceFatal => {}
            AsyncEvent::PortActive(p) => {
                pr_info!("device {} port {}: active\n", name, p);
                return;
            }
            // QP events go to the QP's connection; others need nothing.
            AsyncEvent::QpError(_) | AsyncEvent::Other(_) => {
                pr_info!("device {}: async event {:?}, nothing to do\n", name, ev);
                return;
            }
        }
        let mut failed = 0u32;
        <Iser as TransportOps>::registry().for_each_endpoint(|ep| {
            if let Some(why) = ep.broken_by(dev, ev) {
                ep.fail(why);
                failed += 1;
            }
        });
        pr_info!(
            "device {}: {:?}: {} connection(s) failed\n",
            name,
            ev,
            failed
        );
    }

    fn remove(dev: &Device, slot: &Arc<DevSlot>) {
        riser_dbg!(
            "device {} going away ({} connections on it)\n",
            BStr::from_bytes(dev.name().as_bytes()),
            slot.ctx.lock().users
        );
    }
}
