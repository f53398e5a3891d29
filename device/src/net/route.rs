//! The function's routing table: prefixes off the link and the gateway on the link that
//! reaches each (`qpipd --route`, `ADMIN_OP_ADD_ROUTE`).
//!
//! The table only chooses among its routes: longest prefix first, the lowest metric among
//! equally long ones. Whether a destination is on-link (and so needs no route), and
//! whether a gateway is, is the stack's to say ([`crate::net::stack::Stack::route`]): the
//! lookup is given that test and passes over routes whose gateway fails it, so a route may
//! be added before the address that puts its gateway on the link.
//!
//! Addresses are 16 bytes as everywhere in the stack: an IPv4 route has an IPv4-mapped
//! destination with a prefix length of 96..=128 (the IPv4 default route is
//! `::ffff:0.0.0.0/96`) and an IPv4 gateway; an IPv6 route (the default is `::/0`) never
//! covers an IPv4-mapped destination.

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

use super::wire;

/// Most routes a function holds.
pub const MAX_ROUTES: usize = qpip_abi::admin::MAX_ROUTES as usize;

/// One route: `dest/prefix_len` through `gateway`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub dest: Ipv6Addr,
    pub prefix_len: u8,
    pub gateway: Ipv6Addr,
    pub metric: u32,
}

/// Why the table refused a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    /// A route with the same destination, prefix length and metric exists.
    Exists,
    /// The table holds [`MAX_ROUTES`] already.
    Full,
    /// No route has that destination, prefix length and metric.
    NotFound,
}

impl Route {
    /// A route, checked: the prefix length at most 128, no destination bits beyond it, a
    /// unicast gateway of the route's family. Err says what is wrong.
    pub fn new(
        dest: Ipv6Addr,
        prefix_len: u8,
        gateway: Ipv6Addr,
        metric: u32,
    ) -> Result<Route, &'static str> {
        if prefix_len > 128 {
            return Err("the prefix length is beyond 128");
        }
        let host = u128::MAX.checked_shr(prefix_len as u32).unwrap_or(0);
        if u128::from(dest) & host != 0 {
            return Err("the destination has bits set beyond its prefix length");
        }
        let r = Route {
            dest,
            prefix_len,
            gateway,
            metric,
        };
        let gw_bad = match gateway.to_ipv4_mapped() {
            Some(v4) => {
                v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() || v4.is_loopback()
            }
            None => gateway.is_unspecified() || gateway.is_multicast() || gateway.is_loopback(),
        };
        if gw_bad {
            return Err("the gateway is not a unicast address");
        }
        if wire::is_ipv4(&gateway) != r.is_ipv4() {
            return Err("the gateway is not of the destination's family");
        }
        Ok(r)
    }

    /// Whether it is an IPv4 route (a mapped destination, 96 bits of prefix or more).
    pub fn is_ipv4(&self) -> bool {
        self.prefix_len >= 96 && wire::is_ipv4(&self.dest)
    }

    /// Whether `dst` lies in its prefix, of its family.
    pub fn covers(&self, dst: &Ipv6Addr) -> bool {
        wire::is_ipv4(dst) == self.is_ipv4() && wire::in_prefix(dst, &self.dest, self.prefix_len)
    }

    fn same_key(&self, dest: &Ipv6Addr, prefix_len: u8, metric: u32) -> bool {
        self.dest == *dest && self.prefix_len == prefix_len && self.metric == metric
    }
}

/// `--route PREFIX via GATEWAY`: `default`, `default4`/`default6` or `ADDR/PLEN` (IPv4
/// lengths 0..=32, IPv6 0..=128), then `via` and the gateway. `default` takes the
/// gateway's family. Metric 0.
impl FromStr for Route {
    type Err = String;
    fn from_str(s: &str) -> Result<Route, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let [prefix, "via", gw] = words[..] else {
            return Err(format!(
                "route '{s}' is not PREFIX via GATEWAY (like 'default via fd51:5050::1' or \
                 '198.18.1.0/24 via 198.18.0.254')"
            ));
        };
        let gateway = super::config::parse_ip(gw, &format!("route '{s}': gateway "))?;
        let v4_gw = wire::is_ipv4(&gateway);
        let (dest, prefix_len) = match prefix {
            "default" if v4_gw => (Ipv6Addr::from(0xffff_0000_0000u128), 96),
            "default" => (Ipv6Addr::UNSPECIFIED, 0),
            _ => {
                let (a, p) = prefix.split_once('/').ok_or_else(|| {
                    format!("route '{s}': '{prefix}' is not 'default' or ADDR/PLEN")
                })?;
                let dest = super::config::parse_ip(a, &format!("route '{s}': "))?;
                let (max, base) = if wire::is_ipv4(&dest) {
                    (32, 96)
                } else {
                    (128, 0)
                };
                let plen: u8 =
                    p.parse().ok().filter(|n| *n <= max).ok_or_else(|| {
                        format!("route '{s}': prefix length '{p}' is not 0..{max}")
                    })?;
                (dest, plen + base)
            }
        };
        Route::new(dest, prefix_len, gateway, 0).map_err(|e| format!("route '{s}': {e}"))
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match (self.dest.to_ipv4_mapped(), self.gateway.to_ipv4_mapped()) {
            (Some(d), Some(g)) if self.is_ipv4() => {
                write!(f, "{d}/{} via {g}", self.prefix_len - 96)?
            }
            _ => write!(f, "{}/{} via {}", self.dest, self.prefix_len, self.gateway)?,
        }
        if self.metric != 0 {
            write!(f, " metric {}", self.metric)?;
        }
        Ok(())
    }
}

/// The routes of one function.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Route>,
}

impl RouteTable {
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Adds a route. A route is named by its destination, prefix length and metric: one
    /// with the same three exists → [`RouteError::Exists`] (its gateway is changed by
    /// deleting it first).
    pub fn add(&mut self, r: Route) -> Result<(), RouteError> {
        if self
            .routes
            .iter()
            .any(|x| x.same_key(&r.dest, r.prefix_len, r.metric))
        {
            return Err(RouteError::Exists);
        }
        if self.routes.len() >= MAX_ROUTES {
            return Err(RouteError::Full);
        }
        self.routes.push(r);
        Ok(())
    }

    /// Removes the route with this destination, prefix length and metric.
    pub fn remove(
        &mut self,
        dest: &Ipv6Addr,
        prefix_len: u8,
        metric: u32,
    ) -> Result<Route, RouteError> {
        let i = self
            .routes
            .iter()
            .position(|x| x.same_key(dest, prefix_len, metric))
            .ok_or(RouteError::NotFound)?;
        Ok(self.routes.remove(i))
    }

    /// Makes the table exactly `routes` (after a reset: the configured ones).
    pub fn set(&mut self, routes: &[Route]) {
        self.routes.clear();
        for r in routes {
            let _ = self.add(*r);
        }
    }

    /// The gateway toward `dst`: that of the route with the longest prefix holding it, the
    /// lowest metric among equally long ones, among the routes whose gateway `usable`
    /// accepts (is on-link now).
    pub fn lookup(&self, dst: &Ipv6Addr, usable: impl Fn(&Ipv6Addr) -> bool) -> Option<Ipv6Addr> {
        self.routes
            .iter()
            .filter(|r| r.covers(dst) && usable(&r.gateway))
            .min_by_key(|r| (std::cmp::Reverse(r.prefix_len), r.metric))
            .map(|r| r.gateway)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        super::super::config::parse_ip(s, "").unwrap()
    }

    fn route(dest: &str, plen: u8, gw: &str, metric: u32) -> Route {
        Route::new(a(dest), plen, a(gw), metric).unwrap()
    }

    #[test]
    fn longest_prefix_then_lowest_metric() {
        let mut t = RouteTable::default();
        t.add(route("::", 0, "fd51:5050::1", 0)).unwrap();
        t.add(route("fd51:5050:0:0:1::", 80, "fd51:5050::2", 10))
            .unwrap();
        t.add(route("fd51:5050:0:0:1::", 80, "fd51:5050::3", 5))
            .unwrap();
        t.add(route("fd51:5050:0:0:1::7", 128, "fd51:5050::4", 100))
            .unwrap();
        let all = |_: &Ipv6Addr| true;
        assert_eq!(t.lookup(&a("2001:db8::1"), all), Some(a("fd51:5050::1")));
        assert_eq!(
            t.lookup(&a("fd51:5050:0:0:1::8"), all),
            Some(a("fd51:5050::3"))
        );
        assert_eq!(
            t.lookup(&a("fd51:5050:0:0:1::7"), all),
            Some(a("fd51:5050::4"))
        );
        // A gateway that is not on-link is passed over.
        let not_3 = |g: &Ipv6Addr| *g != a("fd51:5050::3");
        assert_eq!(
            t.lookup(&a("fd51:5050:0:0:1::8"), not_3),
            Some(a("fd51:5050::2"))
        );
        assert_eq!(t.lookup(&a("fd51:5050:0:0:1::8"), |_| false), None);
        // The IPv6 default route does not cover IPv4.
        assert_eq!(t.lookup(&a("198.18.1.1"), all), None);
    }

    #[test]
    fn ipv4_routes() {
        let mut t = RouteTable::default();
        t.add(route("::ffff:0.0.0.0", 96, "198.18.0.1", 0)).unwrap();
        t.add(route("198.18.1.0", 120, "198.18.0.254", 0)).unwrap();
        let all = |_: &Ipv6Addr| true;
        assert_eq!(t.lookup(&a("198.18.1.9"), all), Some(a("198.18.0.254")));
        assert_eq!(t.lookup(&a("198.19.0.1"), all), Some(a("198.18.0.1")));
        // The IPv4 default route does not cover IPv6.
        assert_eq!(t.lookup(&a("fd51:5050::9"), all), None);
        assert!(t.routes()[0].is_ipv4());
    }

    #[test]
    fn checks() {
        assert!(Route::new(a("fd51:5050::"), 129, a("fd51:5050::1"), 0).is_err());
        // Bits beyond the prefix.
        assert!(Route::new(a("fd51:5050::1"), 64, a("fd51:5050::1"), 0).is_err());
        assert!(Route::new(a("198.18.1.1"), 120, a("198.18.0.1"), 0).is_err());
        // Families must agree.
        assert!(Route::new(a("198.18.1.0"), 120, a("fd51:5050::1"), 0).is_err());
        assert!(Route::new(a("::"), 0, a("198.18.0.1"), 0).is_err());
        // Gateways are unicast.
        for gw in ["::", "ff02::1", "::1"] {
            assert!(Route::new(a("::"), 0, a(gw), 0).is_err(), "{gw}");
        }
        for gw in ["0.0.0.0", "255.255.255.255", "224.0.0.1", "127.0.0.1"] {
            assert!(Route::new(a("198.18.1.0"), 120, a(gw), 0).is_err(), "{gw}");
        }
        // A link-local IPv6 gateway is what router advertisements give.
        assert!(Route::new(a("::"), 0, a("fe80::1"), 0).is_ok());
        // A host route.
        assert!(Route::new(a("198.18.1.7"), 128, a("198.18.0.1"), 0).is_ok());
    }

    #[test]
    fn duplicates_limits_and_removal() {
        let mut t = RouteTable::default();
        let r = route("fd51:5050:0:0:1::", 80, "fd51:5050::2", 0);
        t.add(r).unwrap();
        assert_eq!(t.add(r), Err(RouteError::Exists));
        // The same prefix with another gateway is the same route; with another metric,
        // another one.
        let mut other = r;
        other.gateway = a("fd51:5050::3");
        assert_eq!(t.add(other), Err(RouteError::Exists));
        other.metric = 1;
        t.add(other).unwrap();
        assert_eq!(t.remove(&r.dest, 80, 0), Ok(r));
        assert_eq!(t.remove(&r.dest, 80, 0), Err(RouteError::NotFound));
        assert_eq!(t.remove(&r.dest, 79, 1), Err(RouteError::NotFound));
        for i in 1..MAX_ROUTES as u32 {
            t.add(route("::", 0, "fd51:5050::1", i)).unwrap();
        }
        assert_eq!(t.routes().len(), MAX_ROUTES);
        assert_eq!(
            t.add(route("::", 0, "fd51:5050::1", 9999)),
            Err(RouteError::Full)
        );
        t.set(&[r]);
        assert_eq!(t.routes(), &[r]);
    }

    #[test]
    fn command_line() {
        let p = |s: &str| s.parse::<Route>();
        assert_eq!(
            p("default via fd51:5050::1"),
            Ok(route("::", 0, "fd51:5050::1", 0))
        );
        assert_eq!(
            p("default via 198.18.0.254"),
            Ok(route("::ffff:0.0.0.0", 96, "198.18.0.254", 0))
        );
        assert_eq!(
            p("198.18.1.0/24 via 198.18.0.254"),
            Ok(route("198.18.1.0", 120, "198.18.0.254", 0))
        );
        assert_eq!(
            p("fd51:5050:0:0:1::/80 via fe80::1"),
            Ok(route("fd51:5050:0:0:1::", 80, "fe80::1", 0))
        );
        assert_eq!(
            p("198.18.1.0/24 via 198.18.0.254").unwrap().to_string(),
            "198.18.1.0/24 via 198.18.0.254"
        );
        assert_eq!(
            p("default via fd51:5050::1").unwrap().to_string(),
            "::/0 via fd51:5050::1"
        );
        assert!(p("198.18.1.0/24")
            .unwrap_err()
            .contains("is not PREFIX via GATEWAY"));
        assert!(p("198.18.1.0/33 via 198.18.0.1")
            .unwrap_err()
            .contains("not 0..32"));
        assert!(p("198.18.1.0 via 198.18.0.1")
            .unwrap_err()
            .contains("ADDR/PLEN"));
        assert!(p("198.18.1.1/24 via 198.18.0.1")
            .unwrap_err()
            .contains("bits set"));
        assert!(p("198.18.1.0/24 via fd51::1")
            .unwrap_err()
            .contains("family"));
        assert!(p("198.18.1.0/24 via nope")
            .unwrap_err()
            .contains("gateway 'nope'"));
    }
}
