//! Admin commands that must succeed: the completion checked, its status named when it
//! is not OK.

use crate::{admin_status_name, AdminCqe, FakeGuest, ADMIN_STATUS_OK};

/// Asserts that the completion of `what` (a CONNECT, an ACCEPT, a CLOSE…) is OK, naming
/// its status otherwise.
#[track_caller]
pub fn assert_admin_ok(c: &AdminCqe, what: &str) {
    assert_eq!(
        c.status,
        ADMIN_STATUS_OK,
        "{what}: {}",
        admin_status_name(c.status)
    );
}

impl FakeGuest {
    /// Waits for asynchronous command `cmd_id` (`what`) and asserts that it succeeded.
    #[track_caller]
    pub fn admin_wait_ok(&mut self, cmd_id: u32, what: &str) -> AdminCqe {
        let c = self.admin_wait_done(cmd_id);
        assert_admin_ok(&c, what);
        c
    }
}
