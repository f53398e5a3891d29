//! ADD_NEIGH and DEL_NEIGH: the function's static neighbours, held by its stack's
//! neighbour cache ([`crate::net::neighbor`]) beside the entries ARP and NDP learn.

use std::net::Ipv6Addr;
use std::time::Instant;

use qpip_abi::admin::*;

use super::Results;
use crate::engine::Engine;
use crate::net::config::StaticNeighbor;
use crate::net::neighbor::StaticError;

impl Engine {
    pub(super) fn add_neighbor(&mut self, n: StaticNeighbor) -> Result<Results, u16> {
        let r = self.net.stack.add_static_neighbor(n, Instant::now());
        // Packets that were waiting for the address's resolution go now.
        self.net.flush();
        r.map_err(status)?;
        Ok((0, 0, 0))
    }

    pub(super) fn del_neighbor(&mut self, addr: Ipv6Addr) -> Result<Results, u16> {
        self.net
            .stack
            .remove_static_neighbor(&addr)
            .map_err(status)?;
        Ok((0, 0, 0))
    }
}

fn status(e: StaticError) -> u16 {
    match e {
        StaticError::Full => ADMIN_STATUS_NO_RESOURCES,
        StaticError::NotFound => ADMIN_STATUS_BAD_HANDLE,
    }
}
