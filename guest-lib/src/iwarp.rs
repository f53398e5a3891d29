//! iWARP: RDMA over TCP (QPs of [`crate::Framing::Iwarp`]). What a connection is set up
//! with ([`Mpa`]) and what it agreed ([`ConnInfo`]), where RDMA Writes and Reads go in the
//! peer's memory ([`RemoteAddr`]), and the rights a region grants peers ([`Access`]).
//!
//! An iWARP QP talks to any iWARP peer: another qpip device, Linux's soft-iWARP (`siw`),
//! an iWARP NIC. Sends complete a receive the peer posted, in order; RDMA Writes and Reads
//! move bytes straight between registered regions, the peer naming ours by its rkey.

use qpip_abi::admin;

/// What this end brings to the connection's setup (MPA): private data for the peer's
/// application, how many RDMA Reads it serves at once (IRD) and keeps outstanding (ORD),
/// whether FPDUs carry a CRC, and peer-to-peer mode (the responder may send first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mpa {
    /// At most [`Mpa::MAX_PRIVATE_DATA`] bytes.
    pub private_data: Vec<u8>,
    pub ird: u8,
    pub ord: u8,
    pub crc: bool,
    pub peer_to_peer: bool,
    /// Offer RFC 7306 Immediate Data to a qpip peer (see [`Mpa::immediate`]).
    pub immediate: bool,
}

impl Mpa {
    /// Most private data an application sends (the peer may send up to 512 bytes).
    pub const MAX_PRIVATE_DATA: usize = admin::IWARP_MAX_PRIVATE_DATA as usize;
    /// Largest IRD and ORD.
    pub const MAX_IRD_ORD: u8 = admin::IWARP_MAX_IRD_ORD;

    /// IRD and ORD of 8, no private data, no CRC, no peer-to-peer mode.
    pub fn new() -> Mpa {
        Mpa {
            private_data: Vec::new(),
            ird: 8,
            ord: 8,
            crc: false,
            peer_to_peer: false,
            immediate: false,
        }
    }

    pub fn private_data(mut self, data: &[u8]) -> Mpa {
        self.private_data = data.to_vec();
        self
    }

    pub fn ird_ord(mut self, ird: u8, ord: u8) -> Mpa {
        (self.ird, self.ord) = (ird, ord);
        self
    }

    pub fn crc(mut self, on: bool) -> Mpa {
        self.crc = on;
        self
    }

    pub fn peer_to_peer(mut self, on: bool) -> Mpa {
        self.peer_to_peer = on;
        self
    }

    /// Offers RFC 7306 Immediate Data (RDMA Writes with [`crate::SendWr::imm`]): the
    /// device sets a reserved bit of the MPA header, which a qpip peer's device answers
    /// when its end offers too ([`ConnInfo::immediate`] says whether both did). A peer
    /// that is not qpip ignores it: the offer costs nothing, and the private data is the
    /// application's either way.
    pub fn immediate(mut self, on: bool) -> Mpa {
        self.immediate = on;
        self
    }

    pub(crate) fn flags(&self) -> u32 {
        let mut f = 0;
        if self.crc {
            f |= admin::IWARP_CONN_CRC;
        }
        if self.peer_to_peer {
            f |= admin::IWARP_CONN_PEER_TO_PEER;
        }
        if self.immediate {
            f |= admin::IWARP_CONN_IMMEDIATE;
        }
        f
    }
}

impl Default for Mpa {
    fn default() -> Mpa {
        Mpa::new()
    }
}

/// A Terminate that ended a connection: the layer, error type and code of RFC 5040 §7,
/// and whether the peer sent it (else this end did, about the peer's error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terminate {
    pub layer: u8,
    pub etype: u8,
    pub code: u8,
    pub received: bool,
}

/// What an iWARP connection's setup agreed ([`crate::Qp::conn_info`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    pub crc: bool,
    pub peer_to_peer: bool,
    /// Both ends agreed to RFC 7306 Immediate Data.
    pub immediate: bool,
    /// The peer rejected the connection (its private data may say why).
    pub rejected: bool,
    /// Read Requests this end serves at once.
    pub ird: u16,
    /// RDMA Reads this end keeps outstanding.
    pub ord: u16,
    /// MPA revision (1 or 2).
    pub revision: u8,
    /// The peer's private data.
    pub private_data: Vec<u8>,
    /// Why the connection ended, if a Terminate ended it.
    pub terminate: Option<Terminate>,
}

/// Where an RDMA Write or Read goes in the peer's memory: an address inside one of its
/// regions and that region's rkey ([`crate::MemoryRegion::remote`] on the peer's side).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    pub addr: u64,
    pub rkey: u32,
}

/// What peers may do to a region besides this process's own use
/// ([`crate::Context::register_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Access {
    pub remote_read: bool,
    pub remote_write: bool,
}

impl Access {
    pub const READ: Access = Access {
        remote_read: true,
        remote_write: false,
    };
    pub const WRITE: Access = Access {
        remote_read: false,
        remote_write: true,
    };
    pub const READ_WRITE: Access = Access {
        remote_read: true,
        remote_write: true,
    };

    pub(crate) fn bits(self) -> u32 {
        let mut a = admin::MR_ACCESS_LOCAL_WRITE;
        if self.remote_read {
            a |= admin::MR_ACCESS_REMOTE_READ;
        }
        if self.remote_write {
            a |= admin::MR_ACCESS_REMOTE_WRITE;
        }
        a
    }
}
