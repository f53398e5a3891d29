//! Stdout and the receive buffers: posting them, and writing what they received in order.

use std::io;
use std::os::fd::RawFd;

use qpip::MemoryRegion;

use super::Cat;
use crate::args::Fail;

/// Most buffers one `writev` takes (IOV_MAX on Linux).
const MAX_IOV: usize = 1024;

impl Cat<'_> {
    pub(crate) fn post_receives(&mut self) -> Result<(), Fail> {
        for slot in 0..self.first_recvs {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    /// The rest of the receive buffers, once data arrives.
    pub(super) fn more_receives(&mut self) -> Result<(), Fail> {
        let more = self.slots - self.first_recvs;
        let mr = self
            .ctx
            .alloc(self.rlen * more)
            .map_err(|e| ("register memory", e))?;
        self.recv.push(mr);
        for slot in self.first_recvs..self.slots {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    /// Receive buffer `slot`: its region and offset.
    fn recv_buf(&self, slot: usize) -> (&MemoryRegion, usize) {
        match slot.checked_sub(self.first_recvs) {
            None => (&self.recv[0], slot * self.rlen),
            Some(i) => (&self.recv[1], i * self.rlen),
        }
    }

    fn post_recv(&self, slot: usize) -> Result<(), Fail> {
        let (mr, off) = self.recv_buf(slot);
        let sge = [mr.sge(off, self.rlen)];
        self.qp
            .post_recv(slot as u64, &sge)
            .map_err(|e| ("post receive", e))?;
        Ok(())
    }

    /// Writes the received data in order with as few `writev` calls as it takes, then
    /// posts its buffers again.
    pub(super) fn write_out(&mut self) -> Result<(), Fail> {
        if self.ready.is_empty() {
            return Ok(());
        }
        let mut iov: Vec<libc::iovec> = self
            .ready
            .iter()
            .map(|&(slot, len)| {
                let (mr, off) = self.recv_buf(slot);
                libc::iovec {
                    iov_base: mr[off..off + len].as_ptr() as *mut libc::c_void,
                    iov_len: len,
                }
            })
            .collect();
        let mut first = 0;
        while first < iov.len() {
            let cnt = (iov.len() - first).min(MAX_IOV);
            // SAFETY: the entries name initialised bytes of the receive region, which the
            // device does not write while their receives are not posted again.
            let r = unsafe { libc::writev(1, iov[first..].as_ptr(), cnt as libc::c_int) };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => {
                        wait_writable(1).map_err(|e| ("write to stdout", e))?;
                        continue;
                    }
                    _ => return Err(("write to stdout", e).into()),
                }
            }
            let mut done = r as usize;
            while done > 0 {
                let v = &mut iov[first];
                if done >= v.iov_len {
                    done -= v.iov_len;
                    first += 1;
                } else {
                    // SAFETY: done < iov_len keeps the pointer inside the buffer.
                    v.iov_base = unsafe { v.iov_base.cast::<u8>().add(done) }.cast();
                    v.iov_len -= done;
                    done = 0;
                }
            }
            while first < iov.len() && iov[first].iov_len == 0 {
                first += 1;
            }
        }
        let ready = std::mem::take(&mut self.ready);
        for &(slot, _) in &ready {
            self.repost(slot)?;
        }
        self.ready = ready;
        self.ready.clear();
        Ok(())
    }

    pub(super) fn repost(&mut self, slot: usize) -> Result<(), Fail> {
        if self.peer_done {
            return Ok(());
        }
        self.post_recv(slot)
    }
}

/// Waits until `fd` takes more output (a non-blocking stdout that was full).
fn wait_writable(fd: RawFd) -> io::Result<()> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd that outlives the call.
    if unsafe { libc::poll(&mut p, 1, -1) } < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}
