//! A backend with a capture and/or a bad link around it.
//!
//! Where the capture sits: it records each frame as its sender put it on the link — our
//! frames before the impairment touches them, the peer's as they arrive from the backend,
//! before the impairment touches them. So the capture shows what each end really sent
//! (a checksum error in it is a real bug, never an injected fault), and a frame lost,
//! duplicated, corrupted or delayed by `--impair` appears once, intact, at the time it was
//! sent.

use std::io;
use std::os::fd::RawFd;
use std::path::Path;
use std::time::Instant;

use super::impair::{ImpairSpec, ImpairStats, Impairment};
use super::pcap::PcapSink;
use super::{Backend, MAX_FRAME};

pub struct Link<B> {
    inner: B,
    pcap: Option<PcapSink>,
    /// (outgoing, incoming)
    impair: Option<(Impairment, Impairment)>,
    buf: Vec<u8>,
}

impl<B: Backend> Link<B> {
    pub fn new(inner: B, pcap: Option<&Path>, impair: Option<&ImpairSpec>) -> io::Result<Link<B>> {
        let pcap = pcap.map(PcapSink::create).transpose()?;
        Self::with_capture(inner, pcap, impair)
    }

    /// As [`Link::new`], its capture given (e.g. one that goes on with an earlier file:
    /// [`PcapSink::append`]).
    pub fn with_capture(
        inner: B,
        pcap: Option<PcapSink>,
        impair: Option<&ImpairSpec>,
    ) -> io::Result<Link<B>> {
        let impair = impair.map(|spec| {
            let seed = spec.seed.unwrap_or_else(|| {
                let s = fastrand::u64(..);
                log::info!("impairment {spec} on {}: seed={s}", inner.describe());
                s
            });
            (
                Impairment::new(*spec, seed, 1),
                Impairment::new(*spec, seed, 2),
            )
        });
        Ok(Link {
            inner,
            pcap,
            impair,
            buf: vec![0; MAX_FRAME],
        })
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// What the impairment did: (outgoing, incoming).
    pub fn impair_stats(&self) -> Option<(ImpairStats, ImpairStats)> {
        self.impair.as_ref().map(|(o, i)| (o.stats, i.stats))
    }

    fn release_outgoing(&mut self, now: Instant) -> io::Result<()> {
        if let Some((out, _)) = self.impair.as_mut() {
            while let Some(f) = out.due(now) {
                match self.inner.send(&f) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

impl<B: Backend> Backend for Link<B> {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if let Some(p) = self.pcap.as_mut() {
            p.record(frame);
        }
        match self.impair.as_mut() {
            None => self.inner.send(frame),
            Some((out, _)) => {
                let now = Instant::now();
                out.push(frame, now);
                self.release_outgoing(now)
            }
        }
    }

    /// Super-frames go whole to a link that takes them, unless the impairment is on (it
    /// works on the frames of the wire).
    fn gso(&self) -> bool {
        self.impair.is_none() && self.inner.gso()
    }

    /// The capture records the segments the super-frame stands for, as they will be on
    /// the wire (or would be, had the kernel behind a TAP not kept them whole).
    fn send_gso(&mut self, frame: &[u8], mss: u16) -> io::Result<()> {
        if !self.gso() {
            return super::send_segments(self, frame, mss);
        }
        if let Some(p) = self.pcap.as_mut() {
            let _ = crate::net::gso::split_frame(frame, mss as usize, |f| p.record(&f));
        }
        self.inner.send_gso(frame, mss)
    }

    fn send_owned(&mut self, frame: Vec<u8>, gso: u16) -> io::Result<()> {
        if self.impair.is_some() || (gso != 0 && !self.inner.gso()) {
            // Frame by frame: the impairment and the capture see the wire's frames.
            return if gso == 0 {
                self.send(&frame)
            } else {
                self.send_gso(&frame, gso)
            };
        }
        if let Some(p) = self.pcap.as_mut() {
            if gso == 0 {
                p.record(&frame);
            } else {
                let _ = crate::net::gso::split_frame(&frame, gso as usize, |f| p.record(&f));
            }
        }
        self.inner.send_owned(frame, gso)
    }

    fn recv_owned(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<usize>> {
        if self.impair.is_some() || self.pcap.is_some() {
            if buf.len() < MAX_FRAME {
                buf.resize(MAX_FRAME, 0);
            }
            return self.recv(buf);
        }
        self.inner.recv_owned(buf)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let now = Instant::now();
        self.release_outgoing(now)?;
        loop {
            if let Some((_, inc)) = self.impair.as_mut() {
                if let Some(f) = inc.due(now) {
                    let n = f.len().min(buf.len());
                    buf[..n].copy_from_slice(&f[..n]);
                    return Ok(Some(n));
                }
            }
            let Some(n) = self.inner.recv(&mut self.buf)? else {
                return Ok(None);
            };
            let frame = &self.buf[..n];
            if let Some(p) = self.pcap.as_mut() {
                p.record(frame);
            }
            match self.impair.as_mut() {
                None => {
                    let n = n.min(buf.len());
                    buf[..n].copy_from_slice(&frame[..n]);
                    return Ok(Some(n));
                }
                Some((_, inc)) => inc.push(frame, now),
            }
        }
    }

    fn rx_dropped(&self) -> u64 {
        self.inner.rx_dropped()
    }

    fn fd(&self) -> RawFd {
        self.inner.fd()
    }

    fn poll(&mut self, now: Instant) -> io::Result<()> {
        self.release_outgoing(now)?;
        self.inner.poll(now)
    }

    fn next_deadline(&self) -> Option<Instant> {
        let own =
            self.impair
                .as_ref()
                .and_then(|(o, i)| match (o.next_deadline(), i.next_deadline()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                });
        match (own, self.inner.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn link_up(&mut self) -> bool {
        self.inner.link_up()
    }

    fn link_watched(&self) -> bool {
        self.inner.link_watched()
    }

    fn claim_identity(
        &mut self,
        mac: [u8; 6],
        addrs: &[std::net::Ipv6Addr],
    ) -> Result<(), super::IdentityTaken> {
        self.inner.claim_identity(mac, addrs)
    }
}
