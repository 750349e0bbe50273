// SPDX-License-Identifier: GPL-2.0

//! Safe abstractions over scsi_transport_iscsi and libiscsi: the iSCSI
//! transport registration and its callback table.

use crate::bindings;
use core::{
    marker::PhantomData,
    ptr::{null_mut, NonNull},
};
use kernel::{prelude::*, types::Opaque, ThisModule};

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
    if size > u32::MAX as usize {
        kernel::build_error!("struct iscsi_cmd does not fit a u32");
    }
    // CAST: checked above to fit.
    size as u32
}

/// An iSCSI session made by libiscsi for a transport.
///
/// # Invariants
///
/// Points to a live `iscsi_cls_session` whose ownership passes to
/// scsi_transport_iscsi when returned from [`TransportOps::create_session`].
pub(crate) struct Session(NonNull<bindings::iscsi_cls_session>);

/// What a transport does; the callbacks scsi_transport_iscsi makes.
pub(crate) trait TransportOps: 'static {
    /// The transport's name, as in `/sys/class/iscsi_transport/NAME`.
    const NAME: &'static CStr;
    /// The `CAP_*` flags iscsid reads from `caps`.
    const CAPS: u32;

    /// Whether sysfs shows `attr` (read-only) for this transport's hosts,
    /// sessions and connections.
    fn attr_visible(attr: Attr) -> bool;

    /// iscsid asks for a session with `cmds_max` commands, `qdepth` per LUN,
    /// starting at CmdSN `initial_cmdsn`.
    fn create_session(cmds_max: u16, qdepth: u16, initial_cmdsn: u32) -> Result<Session>;
}

/// A registered iSCSI transport.
///
/// # Invariants
///
/// `tt` is registered with scsi_transport_iscsi from `new` until `drop`.
#[pin_data(PinnedDrop)]
pub(crate) struct Transport<T: TransportOps> {
    #[pin]
    tt: Opaque<bindings::iscsi_transport>,
    _p: PhantomData<T>,
}

// SAFETY: The registration is only handed to scsi_transport_iscsi, which
// synchronises its use.
unsafe impl<T: TransportOps> Send for Transport<T> {}
// SAFETY: Shared references only read it.
unsafe impl<T: TransportOps> Sync for Transport<T> {}

impl<T: TransportOps> Transport<T> {
    /// Registers the transport. Fails with `EEXIST` when another transport
    /// (such as ib_iser's) already holds the name.
    pub(crate) fn new(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            _p: PhantomData,
            tt <- Opaque::try_ffi_init(move |slot: *mut bindings::iscsi_transport| {
                // SAFETY: `slot` is valid for writes; an all-zero transport
                // is a valid value (no callbacks) that the lines below fill.
                unsafe { core::ptr::write_bytes(slot, 0, 1) };
                // SAFETY: `slot` is valid and initialised just above.
                let t = unsafe { &mut *slot };
                t.owner = module.as_ptr();
                // The C field is not const, but scsi_transport_iscsi only
                // reads the name.
                t.name = T::NAME.as_char_ptr().cast_mut();
                t.caps = T::CAPS;
                t.attr_is_visible = Some(Self::attr_is_visible_callback);
                t.create_session = Some(Self::create_session_callback);
                // SAFETY: `slot` is pinned inside `Self` and unregistered in
                // `PinnedDrop::drop` before it goes away.
                let scsi = unsafe { bindings::iscsi_register_transport(slot) };
                if scsi.is_null() {
                    // scsi_transport_iscsi refuses a taken name silently.
                    pr_err!(
                        "cannot register iSCSI transport \"{}\": the name is taken, most \
                         likely by ib_iser (rmmod ib_iser, then load riser again)\n",
                        T::NAME.to_str().unwrap_or("?")
                    );
                    return Err(EEXIST);
                }
                Ok(())
            }),
        })
    }

    /// scsi_transport_iscsi's `attr_is_visible`.
    ///
    /// # Safety
    ///
    /// Called by scsi_transport_iscsi only; it takes no pointers.
    unsafe extern "C" fn attr_is_visible_callback(
        param_type: c_int,
        param: c_int,
    ) -> bindings::umode_t {
        let Ok(param) = u32::try_from(param) else {
            return 0;
        };
        let attr = match u32::try_from(param_type) {
            Ok(bindings::iscsi_param_type_ISCSI_HOST_PARAM) => Attr::Host(param),
            Ok(bindings::iscsi_param_type_ISCSI_PARAM) => Attr::Param(param),
            _ => Attr::Other,
        };
        if T::attr_visible(attr) {
            // S_IRUGO: read-only for everyone.
            0o444
        } else {
            0
        }
    }

    /// scsi_transport_iscsi's `create_session`.
    ///
    /// # Safety
    ///
    /// Called by scsi_transport_iscsi only, with `ep` null or a live endpoint.
    unsafe extern "C" fn create_session_callback(
        _ep: *mut bindings::iscsi_endpoint,
        cmds_max: u16,
        qdepth: u16,
        initial_cmdsn: u32,
    ) -> *mut bindings::iscsi_cls_session {
        match T::create_session(cmds_max, qdepth, initial_cmdsn) {
            Ok(s) => s.0.as_ptr(),
            Err(e) => {
                pr_err!("create_session failed: {:?}\n", e);
                null_mut()
            }
        }
    }
}

#[pinned_drop]
impl<T: TransportOps> PinnedDrop for Transport<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant the transport is registered.
        unsafe { bindings::iscsi_unregister_transport(self.tt.get()) };
    }
}

#[kunit_tests(riser_iscsi)]
mod tests {
    use super::*;
    use kernel::alloc::KBox;

    /// A transport under a name nothing else uses, so the test can register
    /// it beside riser's own `iser`.
    struct TestTransport;

    impl TransportOps for TestTransport {
        const NAME: &'static CStr = c"riser_kunit";
        const CAPS: u32 = caps::TEXT_NEGO;

        fn attr_visible(attr: Attr) -> bool {
            attr == Attr::Host(host_param::INITIATOR_NAME)
        }

        fn create_session(_: u16, _: u16, _: u32) -> Result<Session> {
            Err(EOPNOTSUPP)
        }
    }

    fn module() -> &'static ThisModule {
        kernel::module::this_module::<crate::driver::Riser>()
    }

    #[test]
    fn a_transport_name_registers_once() -> Result {
        let first = KBox::pin_init(Transport::<TestTransport>::new(module()), GFP_KERNEL)?;
        // scsi_transport_iscsi refuses a second transport of the same name.
        assert_eq!(
            KBox::pin_init(Transport::<TestTransport>::new(module()), GFP_KERNEL).err(),
            Some(EEXIST)
        );
        // Unregistering frees the name.
        drop(first);
        let again = KBox::pin_init(Transport::<TestTransport>::new(module()), GFP_KERNEL)?;
        drop(again);
        Ok(())
    }

    #[test]
    fn attr_is_visible_maps_kinds_and_modes() {
        let host = bindings::iscsi_param_type_ISCSI_HOST_PARAM as c_int;
        let param = bindings::iscsi_param_type_ISCSI_PARAM as c_int;
        let name = host_param::INITIATOR_NAME as c_int;
        let cb = Transport::<TestTransport>::attr_is_visible_callback;
        // SAFETY: The callback takes no pointers; any integers are valid.
        let (shown, other_kind, negative) =
            unsafe { (cb(host, name), cb(param, name), cb(host, -1)) };
        assert_eq!(shown, 0o444);
        assert_eq!(other_kind, 0);
        assert_eq!(negative, 0);
    }
}
