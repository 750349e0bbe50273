// SPDX-License-Identifier: GPL-2.0

//! Asynchronous events of devices, ports and QPs (`struct ib_event`), as
//! the verbs report them: a port went down or came up, a device failed, a
//! GID table changed, a QP hit a fatal error.

use crate::bindings;

/// An asynchronous event, by what it is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AsyncEvent {
    /// The port lost its link (`IB_EVENT_PORT_ERR`).
    PortError(u32),
    /// The port is up again (`IB_EVENT_PORT_ACTIVE`).
    PortActive(u32),
    /// The port's GID table changed (`IB_EVENT_GID_CHANGE`): an address
    /// of the port went or moved.
    GidChange(u32),
    /// The device failed and must be reset (`IB_EVENT_DEVICE_FATAL`).
    DeviceFatal,
    /// A QP entered the error state on its own (`IB_EVENT_QP_FATAL`,
    /// `IB_EVENT_QP_REQ_ERR`, `IB_EVENT_QP_ACCESS_ERR`).
    QpError(u32),
    /// Anything else, by its `IB_EVENT_*` number.
    Other(u32),
}

impl AsyncEvent {
    /// The event `ev` describes.
    ///
    /// # Safety
    ///
    /// `ev` must point to a valid `ib_event` for the call.
    pub(super) unsafe fn from_raw(ev: *const bindings::ib_event) -> Self {
        // SAFETY: `ev` is valid (function contract).
        let kind = unsafe { (*ev).event };
        // SAFETY: As above; port events carry the port's number in the
        // union (and it is read for those only).
        let port = || unsafe { *(*ev).element.port_num.as_ref() };
        match kind {
            bindings::ib_event_type_IB_EVENT_PORT_ERR => Self::PortError(port()),
            bindings::ib_event_type_IB_EVENT_PORT_ACTIVE => Self::PortActive(port()),
            bindings::ib_event_type_IB_EVENT_GID_CHANGE => Self::GidChange(port()),
            bindings::ib_event_type_IB_EVENT_DEVICE_FATAL => Self::DeviceFatal,
            bindings::ib_event_type_IB_EVENT_QP_FATAL
            | bindings::ib_event_type_IB_EVENT_QP_REQ_ERR
            | bindings::ib_event_type_IB_EVENT_QP_ACCESS_ERR => Self::QpError(kind),
            other => Self::Other(other),
        }
    }

    /// Whether connections through `port` can no longer carry traffic,
    /// whatever their addresses: the port lost its link, or the device
    /// failed. A GID change is not such an event: ib_core reports every
    /// address added to or removed from the port's netdevs (an unrelated
    /// IPv6 address, a VLAN coming up), so a connection is broken by one
    /// only when its own source GID left the table
    /// ([`super::Device::port_has_gid`]).
    pub(crate) fn breaks_port(&self, port: u32) -> bool {
        match *self {
            Self::PortError(p) => p == port,
            Self::DeviceFatal => true,
            _ => false,
        }
    }
}

#[kernel::prelude::kunit_tests(riser_rdma_event)]
mod tests {
    use super::AsyncEvent;

    #[test]
    fn only_a_lost_link_or_a_dead_device_breaks_a_port() {
        assert!(AsyncEvent::PortError(1).breaks_port(1));
        // Another port's trouble, a GID change (any address that came or
        // went: the connection's own is checked against the table), an
        // event riser does not know, a port coming up: none breaks it.
        assert!(!AsyncEvent::PortError(2).breaks_port(1));
        assert!(!AsyncEvent::GidChange(1).breaks_port(1));
        assert!(!AsyncEvent::Other(99).breaks_port(1));
        assert!(!AsyncEvent::PortActive(1).breaks_port(1));
        assert!(!AsyncEvent::QpError(1).breaks_port(1));
        assert!(AsyncEvent::DeviceFatal.breaks_port(1));
    }
}
