//! The device-wide admin commands: QUERY_DEVICE, QUERY_STATS, LIST_ADDRS and the
//! address commands, and how a query's answer reaches the driver's buffer.

use std::net::Ipv6Addr;

use qpip_abi::admin::*;
use qpip_abi::{doorbell, pci, wqe};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use zerocopy::FromZeros;

use super::Results;
use crate::engine::{memory, Engine};

impl Engine {
    /// Writes a query's answer into the driver's buffer: 8-byte aligned, within one page
    /// of guest RAM, at least as long as the answer.
    pub(in crate::engine) fn write_query(
        &self,
        mem: &GuestMemoryMmap,
        buf: u64,
        len: u32,
        data: &[u8],
    ) -> Result<Results, u16> {
        if (len as usize) < data.len() {
            return Err(ADMIN_STATUS_BAD_PARAM);
        }
        // A buffer at the very top of the address space must not wrap the arithmetic.
        let Some(last) = buf.checked_add(data.len() as u64 - 1) else {
            return Err(ADMIN_STATUS_BAD_ADDRESS);
        };
        let crosses_page = buf / memory::PAGE_SIZE != last / memory::PAGE_SIZE;
        if !buf.is_multiple_of(8) || crosses_page || !memory::in_ram(mem, buf, data.len() as u64) {
            return Err(ADMIN_STATUS_BAD_ADDRESS);
        }
        mem.write_slice(data, GuestAddress(buf))
            .map_err(|_| ADMIN_STATUS_BAD_ADDRESS)?;
        Ok((0, 0, 0))
    }

    /// The device counters, with the network's (if there is a link) and TCP's in their
    /// places.
    pub(super) fn counters(&self) -> [u64; STATS_COUNT as usize] {
        let mut c = self.shared.stats.snapshot();
        let (t, n) = (self.tcp.stats(), self.net.stack.stats());
        for (i, v) in [
            (STAT_TCP_ACTIVE_OPENS, t.active_opens),
            (STAT_TCP_PASSIVE_OPENS, t.passive_opens),
            (STAT_TCP_ATTEMPT_FAILS, t.attempt_fails),
            (STAT_TCP_ESTAB_RESETS, t.estab_resets),
            (STAT_TCP_SEGS_IN, t.segs_in),
            (STAT_TCP_SEGS_OUT, t.segs_out),
            (STAT_TCP_RETRANS_SEGS, t.retrans_segs),
            (STAT_TCP_RSTS_OUT, t.rsts_out),
            (STAT_TCP_FAST_RETRANSMITS, t.fast_retransmits),
            (STAT_TCP_RTO_TIMEOUTS, t.rto_timeouts),
            (STAT_TCP_OOO_SEGS, t.ooo_segs),
            (STAT_TCP_DUP_SEGS, t.dup_segs),
            (STAT_TCP_CHALLENGE_ACKS, t.challenge_acks),
            (STAT_TCP_SYN_COOKIES, t.syn_cookies),
            (STAT_TCP_LISTEN_DROPS, t.listen_drops),
            (STAT_TCP_TIMEOUTS, t.timeouts),
            (STAT_TCP_ORPHANS, t.orphans),
            (STAT_TCP_ORPHAN_ABORTS, t.orphan_aborts),
            (STAT_NET_RX_FRAMES, n.rx_frames),
            (STAT_NET_TX_FRAMES, n.tx_frames),
            (STAT_NET_RX_DROPPED, n.total_dropped()),
            (STAT_NET_ECHO_REQUESTS, n.echo_requests),
            (STAT_NET_ICMP_ERRORS_TX, n.icmp_errors_tx),
            (STAT_NET_NO_ROUTE, n.no_route),
            (STAT_NET_FRAGMENTS_RX, n.fragments_rx),
            (STAT_NET_REASSEMBLED, n.reassembled),
            (STAT_NET_RESOLUTION_FAILED, n.resolution_failed),
        ] {
            c[i as usize] = v;
        }
        for (k, why) in crate::net::stats::DropReason::ALL.iter().enumerate() {
            c[STAT_NET_DROP_BASE as usize + k] = n.dropped(*why);
        }
        c
    }

    pub(super) fn device_info(&self) -> DeviceInfo {
        let mut d = DeviceInfo::new_zeroed();
        d.version = (qpip_abi::ABI_VERSION_MAJOR as u32) << qpip_abi::regs::VERSION_MAJOR_SHIFT
            | qpip_abi::ABI_VERSION_MINOR as u32;
        d.max_contexts = pci::DOORBELL_PAGES;
        d.max_qps_per_context = doorbell::DB_QP_SLOTS;
        d.max_cqs_per_context = doorbell::DB_CQ_SLOTS;
        d.max_mrs = MAX_MRS;
        d.max_mr_pages = MAX_MR_PAGES;
        d.max_queue_depth = MAX_QUEUE_DEPTH;
        d.max_sge = wqe::MAX_SGE;
        d.max_inline = wqe::MAX_INLINE;
        d.max_udp_payload = crate::engine::udp::MAX_UDP_PAYLOAD as u32;
        d.max_listeners = MAX_LISTENERS;
        d.mtu = self.net.stack.mtu() as u32;
        d.mac = self.net.stack.mac();
        d
    }

    /// The device's addresses as LIST_ADDRS reports them: the link-local one first.
    pub(super) fn addr_list(&self) -> AddrList {
        let mut l = AddrList::new_zeroed();
        let stack = &self.net.stack;
        let ll = (stack.link_local(), 64u8, ADDR_FLAG_LINK_LOCAL);
        let configured = stack.addresses().iter().map(|&(a, p)| (a, p, 0));
        for (e, (addr, prefix_len, flags)) in l
            .entries
            .iter_mut()
            .zip(std::iter::once(ll).chain(configured))
        {
            e.addr = addr.octets();
            e.prefix_len = prefix_len;
            e.flags = flags;
            l.count += 1;
        }
        l
    }

    pub(super) fn add_addr(&mut self, addr: Ipv6Addr, prefix_len: u8) -> Result<Results, u16> {
        let net = &mut self.net;
        if net.stack.is_local(&addr) {
            return Err(ADMIN_STATUS_ADDR_IN_USE);
        }
        if net.stack.addresses().len() >= MAX_ADDRS as usize {
            return Err(ADMIN_STATUS_NO_RESOURCES);
        }
        // Another function's address on the same adapter: ADDR_IN_USE.
        self.claim_identity(None, Some(addr))?;
        let net = &mut self.net;
        net.stack.add_address(addr, prefix_len);
        net.flush(); // its duplicate address detection probe
        Ok((0, 0, 0))
    }

    pub(super) fn del_addr(&mut self, addr: Ipv6Addr) -> Result<Results, u16> {
        let stack = &mut self.net.stack;
        if stack.addresses().iter().any(|(a, _)| *a == addr) {
            stack.remove_address(&addr);
            // Fewer addresses: never refused.
            let _ = self.claim_identity(None, None);
            Ok((0, 0, 0))
        } else {
            Err(ADMIN_STATUS_BAD_HANDLE)
        }
    }
}
