// SPDX-License-Identifier: GPL-2.0

//! Safe abstractions over scsi_transport_iscsi and libiscsi: the iSCSI
//! transport registration and its callback table.

use crate::bindings;
use kernel::prelude::*;

/// Transport capability flags (`CAP_*` of scsi_transport_iscsi.h).
pub(crate) mod caps {
    use crate::bindings;

    /// Error recovery level 0: session recovery.
    pub(crate) const RECOVERY_L0: u32 = bindings::CAP_RECOVERY_L0;
    /// More than one outstanding R2T per task.
    pub(crate) const MULTI_R2T: u32 = bindings::CAP_MULTI_R2T;
    /// Text negotiation (SendTargets discovery) in the kernel.
    pub(crate) const TEXT_NEGO: u32 = bindings::CAP_TEXT_NEGO;
}

/// An attribute scsi_transport_iscsi may show in sysfs, by kind and number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attr {
    /// A host attribute (`ISCSI_HOST_PARAM_*`).
    Host(u32),
    /// A session or connection attribute (`ISCSI_PARAM_*`).
    Param(u32),
    /// Anything else (iface, flashnode, ...).
    Other,
}

/// Host attribute numbers.
pub(crate) mod host_param {
    use crate::bindings;

    /// The network device the host's connections go through.
    pub(crate) const NETDEV_NAME: u32 = bindings::iscsi_host_param_ISCSI_HOST_PARAM_NETDEV_NAME;
    /// The hardware address of that device.
    pub(crate) const HWADDRESS: u32 = bindings::iscsi_host_param_ISCSI_HOST_PARAM_HWADDRESS;
    /// The initiator's iSCSI name.
    pub(crate) const INITIATOR_NAME: u32 =
        bindings::iscsi_host_param_ISCSI_HOST_PARAM_INITIATOR_NAME;
}

/// Session and connection attribute numbers (`ISCSI_PARAM_*`).
pub(crate) mod param {
    use crate::bindings;

    macro_rules! params {
        ($($name:ident = $c:ident),* $(,)?) => {
            $(
                #[doc = concat!("`", stringify!($c), "`.")]
                pub(crate) const $name: u32 = bindings::$c;
            )*
        };
    }

    params! {
        MAX_RECV_DLENGTH = iscsi_param_ISCSI_PARAM_MAX_RECV_DLENGTH,
        MAX_XMIT_DLENGTH = iscsi_param_ISCSI_PARAM_MAX_XMIT_DLENGTH,
        HDRDGST_EN = iscsi_param_ISCSI_PARAM_HDRDGST_EN,
        DATADGST_EN = iscsi_param_ISCSI_PARAM_DATADGST_EN,
        CONN_ADDRESS = iscsi_param_ISCSI_PARAM_CONN_ADDRESS,
        CONN_PORT = iscsi_param_ISCSI_PARAM_CONN_PORT,
        EXP_STATSN = iscsi_param_ISCSI_PARAM_EXP_STATSN,
        PERSISTENT_ADDRESS = iscsi_param_ISCSI_PARAM_PERSISTENT_ADDRESS,
        PERSISTENT_PORT = iscsi_param_ISCSI_PARAM_PERSISTENT_PORT,
        PING_TMO = iscsi_param_ISCSI_PARAM_PING_TMO,
        RECV_TMO = iscsi_param_ISCSI_PARAM_RECV_TMO,
        INITIAL_R2T_EN = iscsi_param_ISCSI_PARAM_INITIAL_R2T_EN,
        MAX_R2T = iscsi_param_ISCSI_PARAM_MAX_R2T,
        IMM_DATA_EN = iscsi_param_ISCSI_PARAM_IMM_DATA_EN,
        FIRST_BURST = iscsi_param_ISCSI_PARAM_FIRST_BURST,
        MAX_BURST = iscsi_param_ISCSI_PARAM_MAX_BURST,
        PDU_INORDER_EN = iscsi_param_ISCSI_PARAM_PDU_INORDER_EN,
        DATASEQ_INORDER_EN = iscsi_param_ISCSI_PARAM_DATASEQ_INORDER_EN,
        TARGET_NAME = iscsi_param_ISCSI_PARAM_TARGET_NAME,
        TPGT = iscsi_param_ISCSI_PARAM_TPGT,
        USERNAME = iscsi_param_ISCSI_PARAM_USERNAME,
        PASSWORD = iscsi_param_ISCSI_PARAM_PASSWORD,
        USERNAME_IN = iscsi_param_ISCSI_PARAM_USERNAME_IN,
        PASSWORD_IN = iscsi_param_ISCSI_PARAM_PASSWORD_IN,
        FAST_ABORT = iscsi_param_ISCSI_PARAM_FAST_ABORT,
        ABORT_TMO = iscsi_param_ISCSI_PARAM_ABORT_TMO,
        LU_RESET_TMO = iscsi_param_ISCSI_PARAM_LU_RESET_TMO,
        TGT_RESET_TMO = iscsi_param_ISCSI_PARAM_TGT_RESET_TMO,
        IFACE_NAME = iscsi_param_ISCSI_PARAM_IFACE_NAME,
        INITIATOR_NAME = iscsi_param_ISCSI_PARAM_INITIATOR_NAME,
        DISCOVERY_SESS = iscsi_param_ISCSI_PARAM_DISCOVERY_SESS,
    }
}

/// The per-command private data libiscsi needs the SCSI midlayer to allocate
/// with each command (`sizeof(struct iscsi_cmd)`).
pub(crate) const fn cmd_size() -> u32 {
    let size = size_of::<bindings::iscsi_cmd>();
    // CAST: u32 to usize, lossless (const context: no From).
    if size > u32::MAX as usize {
        kernel::build_error!("struct iscsi_cmd does not fit a u32");
    }
    // CAST: checked above to fit.
    size as u32
}

mod context;
pub(crate) mod stats;
mod task;
mod transport;

pub(crate) use stats::CustomStats;
pub(crate) use task::{
    Conn,
    ConnSlot,
    Direction,
    Task,
    TaskHold,
    TaskRef,
    XmitTask,
    BHS_LEN,
    ITT_INDEX_MASK, //
};
pub(crate) use transport::{
    Registry,
    Transport, //
};

use crate::kernel_ext::{
    rcu::RcuRead,
    slot::SlotToken, //
};
use core::net::SocketAddr;
use kernel::sync::aref::ARef;
use kernel::sync::{Arc, ArcBorrow};

/// A PDU to send in place of the one iscsid built.
pub(crate) struct PduRewrite {
    /// The BHS.
    pub(crate) hdr: [u8; BHS_LEN],
    /// The data segment.
    pub(crate) data: kernel::alloc::KVec<u8>,
}

/// Limits of a new session's SCSI host, chosen by the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionLimits {
    /// Commands the host queues at once (`can_queue`, the session's pool).
    pub(crate) can_queue: u16,
    /// Scatter/gather entries per command.
    pub(crate) sg_tablesize: u16,
    /// Largest command, in 512-byte sectors.
    pub(crate) max_sectors: u32,
    /// Highest LUN scanned.
    pub(crate) max_lun: u32,
    /// Whether SG elements must not have gaps inside a 4 KiB page
    /// (devices that cannot register gapped lists).
    pub(crate) virt_boundary_4k: bool,
}

/// What a transport does; the callbacks scsi_transport_iscsi and libiscsi
/// make. A `#[vtable]` trait: the callback table offers only what the
/// implementation defines (`HAS_*`), and every optional method has a
/// conservative default for the layer's own use.
#[vtable]
pub(crate) trait TransportOps: 'static + Sized {
    /// The transport's name, as in `/sys/class/iscsi_transport/NAME`.
    const NAME: &'static CStr;
    /// The `CAP_*` flags iscsid reads from `caps`.
    const CAPS: u32;

    /// The driver's connection (what an iSCSI endpoint stands for).
    type Ep: Send + Sync + 'static;

    /// How a command's data is mapped for the endpoint's device. The layer
    /// makes the mapping ([`Task::map_data`]) and drops it in cleanup,
    /// before the command's scatterlist goes back to the midlayer; the
    /// transport only borrows it ([`Task::mapping`]).
    type DataMap: crate::kernel_ext::sg::SgMapping;

    /// Where the registration keeps its C objects for the callbacks:
    /// written by [`crate::kernel_ext::registry::registry!`].
    fn registry() -> &'static Registry<Self>;

    /// Whether sysfs shows `attr` (read-only).
    fn attr_visible(attr: Attr) -> bool;

    /// Limits for a session over `ep` asking for `cmds_max` commands.
    fn session_limits(_ep: Option<&Arc<Self::Ep>>, _cmds_max: u16) -> Result<SessionLimits> {
        Err(EOPNOTSUPP)
    }

    /// Starts connecting to `dst`.
    fn ep_connect(_dst: SocketAddr) -> Result<Arc<Self::Ep>> {
        Err(EOPNOTSUPP)
    }

    /// Waits up to `timeout_ms` for the connection: `Ok(true)` connected,
    /// `Ok(false)` not yet, an error if it failed.
    fn ep_poll(_ep: &Arc<Self::Ep>, _timeout_ms: u32) -> Result<bool> {
        Err(EOPNOTSUPP)
    }

    /// iscsid drops the endpoint: tear the connection down without waiting
    /// on the network. The driver may free its resources after returning
    /// (see [`TransportOps::stop`] for the references it holds).
    fn ep_disconnect(_ep: Arc<Self::Ep>) {}

    /// The peer address of the endpoint.
    fn ep_dst(_ep: &Self::Ep) -> Option<SocketAddr> {
        None
    }

    /// The device the endpoint's connection goes through, which the
    /// session's SCSI host is made a child of (and does DMA for).
    fn ep_device(_ep: &Self::Ep) -> Option<ARef<kernel::device::Device>> {
        None
    }

    /// The slot through which the endpoint reaches its bound iSCSI
    /// connection. The layer sets the slot returned at bind and clears that
    /// same slot before the connection stops, whatever this returns later.
    fn conn_slot(ep: &Self::Ep) -> &ConnSlot;

    /// The iSCSI connection `conn` binds to `ep` (before the slot is set).
    fn bind(_ep: &Arc<Self::Ep>, _conn: &Conn) -> Result {
        Err(EOPNOTSUPP)
    }

    /// The connection stops: called before libiscsi fails its tasks; after
    /// it returns no completion may reach libiscsi. [`TaskRef`]s the driver
    /// still holds keep their commands from completing until it drops them
    /// (when the target can no longer reach their memory); the layer waits
    /// for them before it frees the connection or its session, for up to
    /// 30 s, and leaks the connection or session after that rather than
    /// free it under them.
    fn stop(_ep: &Arc<Self::Ep>) {}

    /// iscsid sends a PDU it built (login, text, logout, NOP): `hdr` is its
    /// BHS and `data` its data segment, seen before libiscsi queues it. The
    /// transport may send a rewritten PDU instead.
    fn send_pdu_hook(
        _ep: &Arc<Self::Ep>,
        _hdr: &[u8; BHS_LEN],
        _data: &[u8],
    ) -> Result<Option<PduRewrite>> {
        Ok(None)
    }

    /// The most data the endpoint's connection receives per PDU, which
    /// `max_recv_dlength` (sysfs, iscsiadm) reports, if the transport knows.
    fn max_recv_dlength(_ep: &Self::Ep) -> Option<u32> {
        None
    }

    /// SCSI data octets moved (written, read) on the endpoint's connection:
    /// libiscsi counts them only for iscsi_tcp.
    fn data_octets(_ep: &Self::Ep) -> (u64, u64) {
        (0, 0)
    }

    /// The transport's own counters for the endpoint's connection, which
    /// `iscsiadm -m session -s` shows after libiscsi's (netlink, process
    /// context).
    fn custom_stats(_ep: &Self::Ep, _out: &mut CustomStats<'_>) {}

    /// Whether [`TransportOps::init_task`] is called, of the SCSI
    /// commands, only for those with unsolicited Data-Out data (every
    /// other task is prepared as before): for a transport that has nothing
    /// to prepare for the rest, which then cost no call.
    const INIT_UNSOL_ONLY: bool = false;

    /// libiscsi prepares `task` (atomic context, under the session's
    /// `frwd_lock`). A SCSI command refused here is failed (libiscsi turns
    /// any error into `EIO`, then `DID_ABORT`, which the midlayer does not
    /// retry): refuse only a command that can never be sent; one that
    /// cannot go now is refused by `xmit_task`, which libiscsi requeues.
    /// Under that lock [`Conn::complete_pdu`] is refused and
    /// [`ConnSlot::fail`] defers to a workqueue.
    ///
    /// Not called for a SCSI command without unsolicited Data-Out data
    /// (none after its immediate data) if [`TransportOps::INIT_UNSOL_ONLY`]
    /// says so.
    fn init_task(_ep: &Self::Ep, _task: &Task<'_, Self>) -> Result {
        Err(EOPNOTSUPP)
    }

    /// libiscsi sends `task` (atomic context, under the session's
    /// `frwd_lock`, as `init_task`). Only here is a task an [`XmitTask`],
    /// whose data buffer and unsolicited Data-Out sequence are the
    /// sender's. The endpoint comes borrowed from its `Arc`, which the
    /// driver may clone (to hand work to a queue). `slot` is the sole use
    /// of the task's slot (its index in its session, of the session's
    /// [`Conn::slot_domain`]) for the call. `rcu` is the RCU read-side
    /// section the call is (bottom halves are off under that lock).
    fn xmit_task<'a>(
        _ep: ArcBorrow<'_, Self::Ep>,
        _task: &mut XmitTask<'a, Self>,
        _slot: SlotToken<'a>,
        _rcu: &RcuRead,
    ) -> Result {
        Err(EOPNOTSUPP)
    }
}

#[kunit_tests(riser_iscsi)]
mod tests {
    use super::*;
    use crate::kernel_ext::registry::registry;
    use kernel::alloc::{
        KBox,
        KVec, //
    };

    /// The test transports move no data.
    struct NoMapping;

    impl crate::kernel_ext::sg::SgMapping for NoMapping {
        type Device = ();
        type Keep = ();

        unsafe fn map(
            _dev: &(),
            _keep: &mut (),
            _sgl: *mut bindings::scatterlist,
            _nents: u32,
            _dir: kernel::dma::DataDirection,
        ) -> Result<Self> {
            Err(EOPNOTSUPP)
        }
    }

    /// A test transport `$t` named `$name`, whose
    /// endpoints are bare slots that connect at once to the peer `$dst`,
    /// and which shows the sysfs attributes `$visible` accepts.
    macro_rules! connecting_transport {
        ($t:ident, $name:literal, |$attr:ident| $visible:expr, $dst:expr) => {
            struct $t;

            #[vtable]
            impl TransportOps for $t {
                const NAME: &'static CStr = $name;
                const CAPS: u32 = caps::TEXT_NEGO;
                type Ep = Pin<KBox<ConnSlot>>;
                type DataMap = NoMapping;

                registry!(Registry<$t>);

                fn attr_visible($attr: Attr) -> bool {
                    $visible
                }

                fn ep_connect(_dst: SocketAddr) -> Result<Arc<Self::Ep>> {
                    Ok(Arc::new(
                        KBox::pin_init(ConnSlot::new(), GFP_KERNEL)?,
                        GFP_KERNEL,
                    )?)
                }

                // Answers for any endpoint it is given, so a test sees
                // whether one got through.
                fn ep_poll(_ep: &Arc<Self::Ep>, _timeout_ms: u32) -> Result<bool> {
                    Ok(true)
                }

                fn ep_dst(_ep: &Self::Ep) -> Option<SocketAddr> {
                    Some($dst)
                }

                fn conn_slot(ep: &Pin<KBox<ConnSlot>>) -> &ConnSlot {
                    ep
                }
            }
        };
    }

    // A transport under a name nothing else uses, so the test can register
    // it beside riser's own `iser`.
    connecting_transport!(
        TestTransport,
        c"riser_kunit",
        |attr| attr == Attr::Host(host_param::INITIATOR_NAME),
        SocketAddr::new(
            core::net::IpAddr::V6(core::net::Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 1)),
            3260
        )
    );

    // A second transport, whose endpoints the first must refuse.
    connecting_transport!(
        OtherTransport,
        c"riser_kunit_other",
        |_attr| false,
        SocketAddr::new(
            core::net::IpAddr::V4(core::net::Ipv4Addr::new(192, 0, 2, 9)),
            3260
        )
    );

    /// An ep_connect request as scsi_transport_iscsi hands it on: the
    /// netlink header, the uevent, then the address, of which the header
    /// counts `len` bytes.
    #[repr(C)]
    struct Request {
        nlh: bindings::nlmsghdr,
        ev: bindings::iscsi_uevent,
        addr: bindings::__kernel_sockaddr_storage,
    }

    // The layout `iscsi_if_ep_connect` makes: `nlmsg_data()` 16 bytes in,
    // the address right behind the uevent.
    const _: () = assert!(
        core::mem::offset_of!(Request, ev) == 16
            && core::mem::offset_of!(Request, addr) == 16 + size_of::<bindings::iscsi_uevent>()
    );

    impl Request {
        fn new(a: SocketAddr, len: usize) -> Result<KBox<Self>> {
            let mut r = KBox::new(
                Self {
                    nlh: Default::default(),
                    ev: Default::default(),
                    addr: crate::kernel_ext::sockaddr::storage(a),
                },
                GFP_KERNEL,
            )?;
            r.nlh.nlmsg_len = u32::try_from(core::mem::offset_of!(Request, addr) + len)?;
            Ok(r)
        }

        /// A request for 192.0.2.9:3260 (TEST-NET-1), as iscsid sends an
        /// IPv4 portal (a whole `sockaddr_in`).
        fn ipv4() -> Result<KBox<Self>> {
            let ip = core::net::Ipv4Addr::new(192, 0, 2, 9);
            Self::new(SocketAddr::new(core::net::IpAddr::V4(ip), 3260), SIN_LEN)
        }

        /// `T`'s ep_connect for this request, as scsi_transport_iscsi
        /// calls it (with no host): the new endpoint, or the error.
        fn connect<T: TransportOps>(&mut self) -> Result<*mut bindings::iscsi_endpoint> {
            // SAFETY: `self` is laid out as an ep_connect request whose
            // netlink header counts the address (`new`); an unregistered
            // `T` refuses it.
            let ep = unsafe {
                transport::endpoint::ep_connect_callback::<T>(
                    core::ptr::null_mut(),
                    (&raw mut self.addr).cast(),
                    0,
                )
            };
            kernel::error::from_err_ptr(ep)
        }
    }

    /// A whole `sockaddr_in`'s length, as iscsid sends it for IPv4.
    const SIN_LEN: usize = size_of::<bindings::sockaddr_in>();

    /// Registers test transport `T`.
    fn register<T: TransportOps>() -> Result<Pin<KBox<Transport<T>>>> {
        KBox::pin_init(Transport::<T>::new(test_template()), GFP_KERNEL)
    }

    /// `T`'s `get_ep_param` of the connection address of `ep`, as sysfs
    /// asks it: its return value and the page it wrote.
    ///
    /// # Safety
    ///
    /// `ep` must be a live endpoint; `T` registered.
    unsafe fn conn_address<T: TransportOps>(
        ep: *mut bindings::iscsi_endpoint,
    ) -> Result<(c_int, KVec<u8>)> {
        // A 4096-byte kmalloc is page-aligned, as sysfs_emit requires.
        let mut page = KVec::from_elem(0u8, 4096, GFP_KERNEL)?;
        // SAFETY: `ep` is live and `T` registered (function contract);
        // `page` is a page.
        let n = unsafe {
            transport::endpoint::get_ep_param_callback::<T>(
                ep,
                bindings::iscsi_param_ISCSI_PARAM_CONN_ADDRESS,
                page.as_mut_ptr().cast(),
            )
        };
        Ok((n, page))
    }

    /// A transport that takes the name of the first.
    struct SameName;

    #[vtable]
    impl TransportOps for SameName {
        const NAME: &'static CStr = c"riser_kunit";
        const CAPS: u32 = caps::TEXT_NEGO;
        type Ep = Pin<KBox<ConnSlot>>;
        type DataMap = NoMapping;

        registry!(Registry<SameName>);

        fn attr_visible(_: Attr) -> bool {
            false
        }

        fn conn_slot(ep: &Pin<KBox<ConnSlot>>) -> &ConnSlot {
            ep
        }
    }

    fn module() -> &'static kernel::ThisModule {
        kernel::module::this_module::<crate::LocalModule>()
    }

    fn test_template() -> impl PinInit<crate::kernel_ext::scsi::HostTemplate> {
        crate::kernel_ext::scsi::HostTemplate::new_iscsi(
            module(),
            c"riser kunit",
            c"riser_kunit",
            crate::kernel_ext::scsi::HostLimits {
                max_sectors: 1024,
                sg_tablesize: 128,
                cmd_per_lun: 32,
                cmd_size: cmd_size(),
            },
        )
    }

    #[test]
    fn a_transport_name_registers_once() -> Result {
        let first = register::<TestTransport>()?;
        assert_eq!(first.host_template().proc_name(), c"riser_kunit");
        // A second registration of the same transport is refused, and
        // leaves the first one working.
        assert_eq!(register::<TestTransport>().err(), Some(EEXIST));
        let mut req = Request::ipv4()?;
        let ep = req.connect::<TestTransport>()?;
        // SAFETY: `ep` is a live endpoint of `TestTransport`, dropped by it
        // and not used after.
        unsafe { transport::endpoint::ep_disconnect_callback::<TestTransport>(ep) };
        // Another transport of the same name: scsi_transport_iscsi refuses
        // it.
        assert_eq!(register::<SameName>().err(), Some(EEXIST));
        // Unregistering frees the name.
        drop(first);
        let again = register::<TestTransport>()?;
        drop(again);
        Ok(())
    }

    #[test]
    fn an_endpoint_of_another_transport_is_refused() -> Result {
        let mine = register::<TestTransport>()?;
        let other = register::<OtherTransport>()?;
        let mut req = Request::ipv4()?;
        let (my_ep, ep) = (
            req.connect::<TestTransport>()?,
            req.connect::<OtherTransport>()?,
        );
        // scsi_transport_iscsi hands any transport any endpoint handle
        // iscsid sends: the wrong transport finds no object of its own.
        // SAFETY: `ep` is a live endpoint; both transports are registered.
        let (poll_mine, poll_other) = unsafe {
            (
                transport::endpoint::ep_poll_callback::<TestTransport>(ep, 0),
                transport::endpoint::ep_poll_callback::<OtherTransport>(ep, 0),
            )
        };
        assert_eq!((poll_mine, poll_other), (-1, 1));
        // SAFETY: As above.
        let (addr, _) = unsafe { conn_address::<TestTransport>(ep) }?;
        assert_eq!(addr, ENOTCONN.to_errno());
        // The wrong transport leaves the endpoint alone; its own frees it.
        // SAFETY: As above; `ep` is not used after the second call.
        unsafe {
            transport::endpoint::ep_disconnect_callback::<TestTransport>(ep);
            assert_eq!(
                transport::endpoint::ep_poll_callback::<OtherTransport>(ep, 0),
                1
            );
            transport::endpoint::ep_disconnect_callback::<OtherTransport>(ep);
            assert_eq!(
                transport::endpoint::ep_poll_callback::<TestTransport>(my_ep, 0),
                1
            );
            transport::endpoint::ep_disconnect_callback::<TestTransport>(my_ep);
        }
        drop(other);
        drop(mine);
        Ok(())
    }

    #[test]
    fn an_ipv6_portal_is_read_whole_and_shown() -> Result {
        let mine = register::<TestTransport>()?;
        let v6 = SocketAddr::new(
            core::net::IpAddr::V6(core::net::Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 1)),
            3260,
        );
        // A request that carries only a `struct sockaddr` (all that
        // scsi_transport_iscsi checks for) of an IPv6 address is refused,
        // not read past its end; an unknown family likewise.
        let mut short = Request::new(v6, SIN_LEN)?;
        let mut unix = Request::new(v6, size_of::<bindings::sockaddr_in6>())?;
        // CAST: AF_UNIX (1) fits the family type.
        unix.addr.__bindgen_anon_1.__bindgen_anon_1.ss_family =
            bindings::AF_UNIX as bindings::__kernel_sa_family_t;
        let mut whole = Request::new(v6, size_of::<bindings::sockaddr_in6>())?;
        assert_eq!(short.connect::<TestTransport>().err(), Some(EINVAL));
        assert_eq!(unix.connect::<TestTransport>().err(), Some(EAFNOSUPPORT));
        let ep = whole.connect::<TestTransport>()?;
        // The portal, as `iscsiadm -m session -P 3` reads it.
        // SAFETY: `ep` is live and `TestTransport`'s, which is registered.
        let (n, page) = unsafe { conn_address::<TestTransport>(ep) }?;
        let shown = b"fd00:0077:0000:0000:0000:0000:0000:0001\n";
        assert_eq!(usize::try_from(n).ok(), Some(shown.len()));
        assert_eq!(&page[..shown.len()], &shown[..]);
        // SAFETY: As above; `ep` is not used after.
        unsafe { transport::endpoint::ep_disconnect_callback::<TestTransport>(ep) };
        drop(mine);
        Ok(())
    }

    #[test]
    fn the_callback_table_offers_what_the_transport_implements() {
        let t = Transport::<TestTransport>::TABLE;
        assert!(t.ep_connect.is_some() && t.ep_poll.is_some() && t.ep_disconnect.is_some());
        assert!(t.get_ep_param.is_some());
        assert!(t.init_task.is_none());
        assert_eq!(t.owner, module().as_ptr());
        assert_eq!(t.caps, caps::TEXT_NEGO);
        let s = Transport::<SameName>::TABLE;
        assert!(s.ep_connect.is_none() && s.ep_poll.is_none() && s.ep_disconnect.is_none());
        assert!(s.get_ep_param.is_none());
        // What libiscsi calls unconditionally is always there.
        assert!(s.xmit_task.is_some() && s.cleanup_task.is_some() && s.alloc_pdu.is_some());
    }

    #[test]
    fn attr_is_visible_maps_kinds_and_modes() {
        // CAST: the C enums' small values, as the callback takes them.
        let host = bindings::iscsi_param_type_ISCSI_HOST_PARAM as c_int;
        let param = bindings::iscsi_param_type_ISCSI_PARAM as c_int;
        let name = host_param::INITIATOR_NAME as c_int;
        let cb = transport::attr_is_visible_callback::<TestTransport>;
        // SAFETY: The callback takes no pointers; any integers are valid.
        let (shown, other_kind, negative) =
            unsafe { (cb(host, name), cb(param, name), cb(host, -1)) };
        assert_eq!(shown, 0o444);
        assert_eq!(other_kind, 0);
        assert_eq!(negative, 0);
    }

    #[test]
    fn clamped_value_is_decimal_and_terminated() {
        for (v, want) in [
            (0, &b"0"[..]),
            (7, b"7"),
            (65536, b"65536"),
            (u32::MAX, b"4294967295"),
        ] {
            let mut out = [0xffu8; 12];
            let n = transport::conn::fmt_u32(v, &mut out);
            assert_eq!(&out[..n], want);
            assert_eq!(out[n], 0);
        }
    }
}
