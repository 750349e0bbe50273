// SPDX-License-Identifier: GPL-2.0

//! What riser's KUnit tests need beyond the `kernel` crate's KUnit support.

use crate::bindings;
use kernel::prelude::*;

/// Marks the running KUnit test as skipped, with `reason` in its result line.
///
/// The test should return right after. Outside a KUnit test this does
/// nothing. riser's guest runner counts skips apart from passes and fails
/// `make check` on any skip, so a skip is never taken for a pass.
pub(crate) fn skip(reason: &CStr) {
    // SAFETY: `reason` is a valid NUL-terminated string; the helper only
    // formats it into the current test's status.
    unsafe { bindings::riser_kunit_skip(reason.as_char_ptr()) };
}
