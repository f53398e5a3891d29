//! Where a connection's bytes live. The connection never owns the application's data: on
//! the send side it asks a [`SendSource`] for the bytes at a stream offset when it builds
//! a segment (in the device they are read from guest memory by the send WRs that own
//! them); on the receive side it hands in-order bytes to a [`RecvSink`] (the device
//! places them into posted receive buffers), keeping only a small staging allowance and a
//! bounded out-of-order buffer of its own.

/// The bytes queued for sending, by stream offset (0 is the first byte after the SYN).
pub trait SendSource {
    /// Fills `buf` with the bytes at `offset..offset + buf.len()`. The connection asks only
    /// for bytes it was given with `queue_send` and that are not yet acknowledged.
    fn read(&mut self, offset: u64, buf: &mut [u8]);

    /// Where a new segment starting at stream `offset` should end, given that at most
    /// `len` bytes may go and that a segment longer than `mss` (a super-segment) is cut
    /// every `mss` bytes on the way. A source whose bytes are records that should each
    /// start a segment (iWARP's FPDUs, RFC 5044 §8) answers the end of the last whole
    /// record that fits, so that every piece starts a record; a record longer than `len`
    /// (a small window, a path MTU that fell) is cut where `len` ends. The default: no
    /// records, `offset + len`.
    fn segment_end(&self, offset: u64, len: u64, mss: u64) -> u64 {
        let _ = mss;
        offset + len
    }
}

/// [`SendSource::segment_end`] for a source of records, given the stream offsets where its
/// records end from the one holding `offset` on, ascending: whole records while they fit
/// in `len`, a short one (under `mss`) being the last, since a super-segment is cut every
/// `mss` bytes and the record after a short one would start inside a piece; where not even
/// one fits (or there are none), `offset + len`. The one statement of the rule, for every
/// source that keeps records (the iWARP transmit stream; the tests' stand-ins for it).
pub fn record_segment_end(
    record_ends: impl IntoIterator<Item = u64>,
    offset: u64,
    len: u64,
    mss: u64,
) -> u64 {
    let mut end = offset;
    for e in record_ends {
        if e - offset > len {
            break;
        }
        let short = e - end < mss;
        end = e;
        if short {
            break;
        }
    }
    if end == offset {
        offset + len
    } else {
        end
    }
}

/// The application's side of the receive stream.
pub trait RecvSink {
    /// Bytes the sink can take in order now: the posted receive space beyond what it
    /// holds. The advertised window is this plus the staging allowance. It may shrink by
    /// more than the bytes delivered (a stream receive completed early gives up the rest
    /// of its buffer); the connection must then be told at once
    /// ([`super::Connection::recv_space_changed`]), and staging takes what the window
    /// offered.
    fn space(&self) -> usize;

    /// The next in-order bytes, at stream `offset` (always where the previous delivery
    /// ended). Never more than [`RecvSink::space`].
    fn deliver(&mut self, offset: u64, data: &[u8]);

    /// Out-of-order bytes at stream `offset`, ahead of the in-order point. A sink that
    /// knows where they go (posted buffers cover them) may place them and return true; the
    /// connection then keeps only their range, and they count as delivered when the
    /// in-order point passes them. The connection only offers bytes inside the space the
    /// sink reported. The default refuses (the connection buffers them itself).
    fn place_at(&mut self, offset: u64, data: &[u8]) -> bool {
        let _ = (offset, data);
        false
    }

    /// The in-order point passed bytes placed earlier: the sink now holds everything below
    /// `upto` in order (the next [`RecvSink::deliver`] is at `upto`).
    fn placed_in_order(&mut self, upto: u64) {
        let _ = upto;
    }

    /// The peer acknowledged this end's sent bytes below stream offset `upto`: told
    /// after a segment's ACK is taken and before its data is delivered, so a protocol on
    /// top may free what the ACK covers before it reads what the peer sent after seeing
    /// it (an iWARP responder's Read slots). The default ignores it.
    fn acked(&mut self, upto: u64) {
        let _ = upto;
    }
}

/// A send source over a byte slice (tests, and data already in device memory).
impl SendSource for &[u8] {
    fn read(&mut self, offset: u64, buf: &mut [u8]) {
        let o = offset as usize;
        buf.copy_from_slice(&self[o..o + buf.len()]);
    }
}

impl SendSource for Vec<u8> {
    fn read(&mut self, offset: u64, buf: &mut [u8]) {
        let o = offset as usize;
        buf.copy_from_slice(&self[o..o + buf.len()]);
    }
}

/// A sink that takes everything into a vector (tests and tools).
#[derive(Debug, Default, Clone)]
pub struct VecSink {
    pub data: Vec<u8>,
    /// Room it reports.
    pub room: usize,
}

impl VecSink {
    pub fn new(room: usize) -> VecSink {
        VecSink {
            data: Vec::new(),
            room,
        }
    }
}

impl RecvSink for VecSink {
    fn space(&self) -> usize {
        self.room
    }
    fn deliver(&mut self, offset: u64, data: &[u8]) {
        assert_eq!(offset as usize, self.data.len(), "in-order delivery");
        assert!(data.len() <= self.room, "delivery within the space offered");
        self.data.extend_from_slice(data);
        self.room -= data.len();
    }
}

/// A sink with no space (a connection no QP owns yet, e.g. half-open from a listener):
/// data that arrives waits in the staging allowance until a real sink is attached and
/// [`super::Connection::recv_space_changed`] is called with it.
pub struct NoSpace;

impl RecvSink for NoSpace {
    fn space(&self) -> usize {
        0
    }
    fn deliver(&mut self, _offset: u64, data: &[u8]) {
        assert!(data.is_empty(), "nothing is delivered into no space");
    }
}

/// A source with nothing in it (for connections that only receive).
pub struct NoData;

impl SendSource for NoData {
    fn read(&mut self, _offset: u64, _buf: &mut [u8]) {
        panic!("no data was queued");
    }
}
