//! ADD_ROUTE and DEL_ROUTE: the function's routes to destinations off the link, held by
//! its stack ([`crate::net::route`]).

use std::net::Ipv6Addr;

use qpip_abi::admin::*;

use super::Results;
use crate::engine::Engine;
use crate::net::route::{Route, RouteError};

impl Engine {
    pub(super) fn add_route(&mut self, r: Route) -> Result<Results, u16> {
        self.net.stack.add_route(r).map_err(status)?;
        Ok((0, 0, 0))
    }

    pub(super) fn del_route(
        &mut self,
        dest: Ipv6Addr,
        prefix_len: u8,
        metric: u32,
    ) -> Result<Results, u16> {
        self.net
            .stack
            .remove_route(&dest, prefix_len, metric)
            .map_err(status)?;
        Ok((0, 0, 0))
    }
}

fn status(e: RouteError) -> u16 {
    match e {
        RouteError::Exists => ADMIN_STATUS_ADDR_IN_USE,
        RouteError::Full => ADMIN_STATUS_NO_RESOURCES,
        RouteError::NotFound => ADMIN_STATUS_BAD_HANDLE,
    }
}
