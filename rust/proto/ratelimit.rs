// SPDX-License-Identifier: GPL-2.0

//! A limit on events per one-second window, for what a target may send
//! unasked: libiscsi passes each async message to iscsid over netlink, and
//! a flood would fill iscsid's socket until the event that reports the
//! connection's failure is lost.

#![forbid(unsafe_code)]

/// The state of a limit: where the current window started and how many
/// events it has seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Window {
    /// Start of the current window, in milliseconds on the caller's clock.
    pub(crate) start_ms: i64,
    /// Events counted in it.
    pub(crate) count: u32,
}

/// Counts one event at `now_ms` against `per_sec` events a second: the new
/// state, and whether the event is within the limit. A window lasts 1000 ms
/// from its first event; a clock that goes back starts a new one.
pub(crate) fn allow(w: Window, now_ms: i64, per_sec: u32) -> (Window, bool) {
    let elapsed = now_ms.saturating_sub(w.start_ms);
    let w = if !(0..1000).contains(&elapsed) {
        Window {
            start_ms: now_ms,
            count: 0,
        }
    } else {
        w
    };
    let ok = w.count < per_sec;
    (
        Window {
            start_ms: w.start_ms,
            count: w.count.saturating_add(1),
        },
        ok,
    )
}

#[cfg(MODULE)]
use kernel::prelude::kunit_tests;

#[cfg_attr(MODULE, kunit_tests(riser_proto_ratelimit))]
#[cfg_attr(not(MODULE), cfg(test))]
mod tests {
    use super::*;

    #[test]
    fn a_window_takes_the_limit_and_no_more() {
        let mut w = Window::default();
        let mut ok = 0;
        for t in 0..40 {
            let (n, a) = allow(w, 100 + t, 16);
            w = n;
            ok += u32::from(a);
        }
        assert_eq!(ok, 16);
        // A second later the count starts again.
        let (w, a) = allow(w, 1100, 16);
        assert!(a);
        assert_eq!(
            w,
            Window {
                start_ms: 1100,
                count: 1
            }
        );
    }

    #[test]
    fn a_clock_going_back_starts_a_window() {
        let w = Window {
            start_ms: 5000,
            count: 16,
        };
        let (w, a) = allow(w, 10, 16);
        assert!(a);
        assert_eq!(w.start_ms, 10);
    }

    #[test]
    fn a_full_window_saturates() {
        let w = Window {
            start_ms: 0,
            count: u32::MAX,
        };
        assert_eq!(allow(w, 1, 16), (w, false));
    }
}
