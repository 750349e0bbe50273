// SPDX-License-Identifier: GPL-2.0

//! Fuzzes the command plan (`plan::plan` and `plan::dataouts`) with
//! arbitrary commands: directions, lengths, immediate and unsolicited
//! data beyond the command's length, any Data-Out size, segment count,
//! inline size and header length.
//!
//! Nothing may panic or overflow (the target is built with overflow
//! checks). A plan must satisfy `plan::check`: a STag only where the target
//! must reach the memory, and inside the buffer; an exposure that matches
//! it; no local-only or global key where the command does not allow one;
//! inline only without immediate data; exactly enough Data-Outs for the
//! unsolicited data. A refusal must be one of the three reasons, each
//! where it applies. `plan::shape`, which names the common plans ahead of
//! the general rules, must give the same plan (or refusal), and never
//! leave a named plan unnamed.

#![no_main]

mod common;
#[path = "../../../rust/proto.rs"]
mod proto;

use common::Input;
use libfuzzer_sys::fuzz_target;
use proto::plan::{check, check_shape, dataouts, plan, Command, DataDir, PlanError};

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let dir = [DataDir::None, DataDir::Read, DataDir::Write, DataDir::Bidi]
        [usize::from(input.u8() % 4)];
    let c = Command {
        dir,
        len: input.u32(),
        imm: input.u32(),
        unsol: input.u32(),
        max_xmit: input.u32(),
        segments: input.u32(),
        global_rkey: input.bool(),
        max_inline: input.u32(),
        headers: u32::from(input.u16()),
    };
    match plan(&c) {
        Ok(p) => check(&c, &p),
        Err(PlanError::Bidi) => assert_eq!(c.dir, DataDir::Bidi),
        Err(PlanError::NoData) => {
            assert!(matches!(c.dir, DataDir::Read | DataDir::Write) && c.len == 0)
        }
        Err(PlanError::NoMaxXmit) => {
            assert!(c.dir == DataDir::Write && c.len > 0 && c.unsol > 0 && c.max_xmit == 0)
        }
    }
    // The common shapes, told ahead of the general rules, are its plan.
    check_shape(&c);
    // `dataouts` on its own agrees with the plan's count.
    if let Ok(n) = dataouts(c.unsol, c.max_xmit) {
        assert!(u64::from(n) * u64::from(c.max_xmit) >= u64::from(c.unsol));
    }
});
