//! Copies of guest memory the device writes, for the tests that check it writes there no
//! more (after a reset, after its context is destroyed).

use crate::{Cq, FakeGuest, PAGE};

impl FakeGuest {
    /// The bytes of `cq`'s ring as they are now, its pages in ring order.
    pub fn cq_ring_bytes(&self, cq: &Cq) -> Vec<u8> {
        cq.pages
            .iter()
            .flat_map(|&p| self.mem_read(p, PAGE as usize))
            .collect()
    }
}
