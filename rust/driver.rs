// SPDX-License-Identifier: GPL-2.0

//! The driver: module state, the `iser` transport's behaviour and the
//! per-device context. It uses only the safe layers; no `unsafe` here.

#![forbid(unsafe_code)]

use crate::{
    iscsi::{self, caps, host_param, param, Attr, Session, Transport, TransportOps},
    proto::sizing::{self, Params},
    rdma::{Client, ClientDriver, Device, Pd},
    scsi::{HostLimits, HostTemplate},
};
use kernel::{alloc::KBox, prelude::*, str::BStr};

/// The module: the SCSI host template, the RDMA client and the registered
/// transport, torn down in reverse order.
#[pin_data]
pub(crate) struct Riser {
    // Fields drop in declaration order: the transport goes first, so no
    // session can be made once the template and devices are being released.
    #[pin]
    transport: Transport<Iser>,
    #[pin]
    client: Client<Iser>,
    #[pin]
    sht: HostTemplate,
    params: Params,
}

/// The `iser` transport.
pub(crate) struct Iser;

impl TransportOps for Iser {
    const NAME: &'static CStr = c"iser";
    const CAPS: u32 = caps::RECOVERY_L0 | caps::MULTI_R2T | caps::TEXT_NEGO;

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

    fn create_session(_cmds_max: u16, _qdepth: u16, _initial_cmdsn: u32) -> Result<Session> {
        // Sessions need an RDMA endpoint (ep_connect), which the datapath
        // brings; until then iscsid's requests are refused cleanly.
        pr_err!("sessions are not supported yet: riser has no RDMA datapath in this build\n");
        Err(EOPNOTSUPP)
    }
}

/// What riser keeps for each RDMA device: its protection domain, shared by
/// every connection on the device.
pub(crate) struct DeviceContext {
    pd: Pd,
}

impl ClientDriver for Iser {
    type Context = DeviceContext;
    const NAME: &'static CStr = c"riser";

    fn add(dev: &Device) -> Result<KBox<DeviceContext>> {
        let pd = Pd::new(dev)?;
        KBox::new(DeviceContext { pd }, GFP_KERNEL).map_err(Into::into)
    }

    fn remove(dev: &Device, ctx: &DeviceContext) {
        pr_debug!(
            "device {} going away (local_dma_lkey {:#x})\n",
            BStr::from_bytes(dev.name().as_bytes()),
            ctx.pd.local_dma_lkey()
        );
    }
}

impl kernel::InPlaceModule for Riser {
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            params: crate::params::current()?,
            sht <- HostTemplate::new_iscsi(
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
            client <- Client::new(),
            transport <- Transport::new(module),
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
