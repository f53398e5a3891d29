//! Linux's userspace block devices (`ublk_drv`, `include/uapi/linux/ublk_cmd.h`): a block
//! device `/dev/ublkbN` whose requests a process serves. The kernel's interface is
//! io_uring commands: control commands on `/dev/ublk-control` (add a device, set its
//! parameters, start, stop, delete it) and, per queue, commands on `/dev/ublkcN` that
//! fetch a request and commit its result. Each request's data is copied by the kernel
//! between the block layer's pages and a buffer this process gives per tag (what `addr`
//! of a fetch names): a WRITE's data is there when the request is fetched, a READ's must
//! be there when it is committed.
//!
//! Only what the NBD client needs: one queue, ioctl-encoded commands.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

// ---- the kernel's interface ----------------------------------------------------------------

const fn ioc(dir: u32, nr: u32, size: u32) -> u32 {
    dir << 30 | size << 16 | (b'u' as u32) << 8 | nr
}
const READ_WRITE: u32 = 3;
const CTRL_CMD_SIZE: u32 = 32;
const IO_CMD_SIZE: u32 = 16;
const CMD_ADD_DEV: u32 = ioc(READ_WRITE, 0x04, CTRL_CMD_SIZE);
const CMD_DEL_DEV: u32 = ioc(READ_WRITE, 0x05, CTRL_CMD_SIZE);
const CMD_START_DEV: u32 = ioc(READ_WRITE, 0x06, CTRL_CMD_SIZE);
const CMD_STOP_DEV: u32 = ioc(READ_WRITE, 0x07, CTRL_CMD_SIZE);
const CMD_SET_PARAMS: u32 = ioc(READ_WRITE, 0x08, CTRL_CMD_SIZE);
const IO_FETCH_REQ: u32 = ioc(READ_WRITE, 0x20, IO_CMD_SIZE);
const IO_COMMIT_AND_FETCH_REQ: u32 = ioc(READ_WRITE, 0x21, IO_CMD_SIZE);

/// The commands' numbers are ioctl-encoded (the only form newer kernels take).
const F_CMD_IOCTL_ENCODE: u64 = 1 << 6;

/// A fetch's result: a request is there; or the device is going away.
const IO_RES_OK: i32 = 0;

/// Request operations (`op_flags & 0xff`) and flags (`op_flags >> 8`).
pub mod op {
    pub const READ: u8 = 0;
    pub const WRITE: u8 = 1;
    pub const FLUSH: u8 = 2;
    pub const DISCARD: u8 = 3;
    pub const WRITE_ZEROES: u8 = 5;
    /// Flags, as in `op_flags >> 8`.
    pub const F_FUA: u32 = 1 << 13 >> 8;
    pub const F_NOUNMAP: u32 = 1 << 15 >> 8;
}

const ATTR_READ_ONLY: u32 = 1 << 0;
const ATTR_VOLATILE_CACHE: u32 = 1 << 2;
const ATTR_FUA: u32 = 1 << 3;
const PARAM_TYPE_BASIC: u32 = 1 << 0;
const PARAM_TYPE_DISCARD: u32 = 1 << 1;

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CtrlCmd {
    dev_id: u32,
    queue_id: u16,
    len: u16,
    addr: u64,
    data: u64,
    dev_path_len: u16,
    pad: u16,
    reserved: u32,
}

#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
struct DevInfo {
    nr_hw_queues: u16,
    queue_depth: u16,
    state: u16,
    pad0: u16,
    max_io_buf_bytes: u32,
    dev_id: u32,
    ublksrv_pid: i32,
    pad1: u32,
    flags: u64,
    ublksrv_flags: u64,
    owner_uid: u32,
    owner_gid: u32,
    reserved1: u64,
    reserved2: u64,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct ParamBasic {
    attrs: u32,
    logical_bs_shift: u8,
    physical_bs_shift: u8,
    io_opt_shift: u8,
    io_min_shift: u8,
    max_sectors: u32,
    chunk_sectors: u32,
    dev_sectors: u64,
    virt_boundary_mask: u64,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct ParamDiscard {
    discard_alignment: u32,
    discard_granularity: u32,
    max_discard_sectors: u32,
    max_write_zeroes_sectors: u32,
    max_discard_segments: u16,
    reserved0: u16,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Params {
    len: u32,
    types: u32,
    basic: ParamBasic,
    discard: ParamDiscard,
    devt: [u32; 4],
    zoned: [u32; 8],
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct IoCmd {
    q_id: u16,
    tag: u16,
    result: i32,
    addr: u64,
}

/// A request the kernel asks this process to serve (`struct ublksrv_io_desc`).
#[repr(C)]
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoDesc {
    pub op_flags: u32,
    pub nr_sectors: u32,
    pub start_sector: u64,
    pub addr: u64,
}

impl IoDesc {
    pub fn op(&self) -> u8 {
        self.op_flags as u8
    }
    pub fn flags(&self) -> u32 {
        self.op_flags >> 8
    }
}

fn as_bytes<T: Copy, const N: usize>(v: &T) -> [u8; N] {
    assert!(std::mem::size_of::<T>() <= N);
    let mut b = [0u8; N];
    // SAFETY: T is a plain repr(C) struct of integers, at most N bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (v as *const T).cast::<u8>(),
            b.as_mut_ptr(),
            std::mem::size_of::<T>(),
        )
    };
    b
}

// ---- the device -----------------------------------------------------------------------------

/// What the block device looks like.
#[derive(Debug, Clone, Copy)]
pub struct DeviceConfig {
    pub size: u64,
    pub read_only: bool,
    /// Requests in flight at once (the queue's depth).
    pub depth: u16,
    /// The largest request, in bytes (a multiple of 4 KiB).
    pub max_io: u32,
    /// Whether the device takes discards and write-zeroes.
    pub discard: bool,
}

/// A ublk device, from ADD_DEV to DEL_DEV: its control ring. Dropping it deletes the
/// device.
pub struct Device {
    ctrl: File,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    info: Box<DevInfo>,
    started: bool,
    deleted: bool,
}

impl Device {
    /// Adds a device with one queue and sets its parameters; it appears as a block
    /// device once [`Device::start`] returns.
    pub fn add(config: &DeviceConfig) -> io::Result<Device> {
        let ctrl = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/ublk-control")
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("/dev/ublk-control: {e} (is ublk_drv loaded?)"),
                )
            })?;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(4)?;
        let info = Box::new(DevInfo {
            nr_hw_queues: 1,
            queue_depth: config.depth,
            max_io_buf_bytes: config.max_io,
            dev_id: u32::MAX,
            ublksrv_pid: std::process::id() as i32,
            flags: F_CMD_IOCTL_ENCODE,
            ..Default::default()
        });
        let mut d = Device {
            ctrl,
            ring,
            info,
            started: false,
            deleted: false,
        };
        let addr = &mut *d.info as *mut DevInfo as u64;
        d.command(
            CMD_ADD_DEV,
            u32::MAX,
            addr,
            std::mem::size_of::<DevInfo>() as u16,
            0,
        )
        .map_err(|e| io::Error::new(e.kind(), format!("ublk ADD_DEV: {e}")))?;
        let sectors = config.size >> 9;
        let max_sectors = config.max_io >> 9;
        let mut params = Params {
            len: std::mem::size_of::<Params>() as u32,
            types: PARAM_TYPE_BASIC,
            basic: ParamBasic {
                // A write-back cache the device flushes on request (FLUSH), and FUA.
                attrs: ATTR_VOLATILE_CACHE
                    | ATTR_FUA
                    | if config.read_only { ATTR_READ_ONLY } else { 0 },
                logical_bs_shift: 9,
                physical_bs_shift: 12,
                // The optimal size is the largest request: the block layer reads ahead
                // twice that, so a sequential reader asks for whole requests, each a
                // round trip to the server.
                io_opt_shift: config.max_io.ilog2() as u8,
                io_min_shift: 9,
                max_sectors,
                dev_sectors: sectors,
                ..Default::default()
            },
            ..Default::default()
        };
        if config.discard {
            params.types |= PARAM_TYPE_DISCARD;
            params.discard = ParamDiscard {
                discard_granularity: 4096,
                max_discard_sectors: u32::MAX >> 9,
                max_write_zeroes_sectors: u32::MAX >> 9,
                max_discard_segments: 1,
                ..Default::default()
            };
        }
        let addr = &mut params as *mut Params as u64;
        let id = d.id();
        d.command(
            CMD_SET_PARAMS,
            id,
            addr,
            std::mem::size_of::<Params>() as u16,
            0,
        )
        .map_err(|e| io::Error::new(e.kind(), format!("ublk SET_PARAMS: {e}")))?;
        Ok(d)
    }

    /// The device's number: it is `/dev/ublkbN`, served through `/dev/ublkcN`.
    pub fn id(&self) -> u32 {
        self.info.dev_id
    }

    pub fn block_path(&self) -> String {
        format!("/dev/ublkb{}", self.id())
    }

    /// One control command, waited for.
    fn command(&mut self, op: u32, dev_id: u32, addr: u64, len: u16, data: u64) -> io::Result<i32> {
        let cmd = CtrlCmd {
            dev_id,
            queue_id: u16::MAX,
            len,
            addr,
            data,
            ..Default::default()
        };
        let sqe = opcode::UringCmd80::new(types::Fd(self.ctrl.as_raw_fd()), op)
            .cmd(as_bytes(&cmd))
            .build();
        // SAFETY: `addr` points at a structure that lives until the command completes,
        // which this function waits for.
        unsafe { self.ring.submission().push(&sqe) }.map_err(io::Error::other)?;
        self.ring.submit_and_wait(1)?;
        let c = self
            .ring
            .completion()
            .next()
            .ok_or_else(|| io::Error::other("no completion"))?;
        if c.result() < 0 {
            return Err(io::Error::from_raw_os_error(-c.result()));
        }
        Ok(c.result())
    }

    /// Starts the device: the block device appears. The queue must have fetched every
    /// tag (see [`Queue::new`]) and be served by another thread meanwhile: the kernel
    /// reads the partition table before this returns.
    pub fn start(&mut self) -> io::Result<()> {
        let id = self.id();
        self.command(CMD_START_DEV, id, 0, 0, u64::from(std::process::id()))
            .map_err(|e| io::Error::new(e.kind(), format!("ublk START_DEV: {e}")))?;
        self.started = true;
        Ok(())
    }

    /// Stops the device: requests end, the queue's fetches complete with an abort.
    pub fn stop(&mut self) -> io::Result<()> {
        let id = self.id();
        self.command(CMD_STOP_DEV, id, 0, 0, 0).map(|_| ())
    }

    /// Deletes the device (after [`Device::stop`] and the queue's end).
    pub fn delete(&mut self) -> io::Result<()> {
        if self.deleted {
            return Ok(());
        }
        let id = self.id();
        self.deleted = true;
        self.command(CMD_DEL_DEV, id, 0, 0, 0).map(|_| ())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if self.started {
            let _ = self.stop();
        }
        let _ = self.delete();
    }
}

// ---- the queue ------------------------------------------------------------------------------

/// A device's queue: its character device, the request descriptors the kernel writes
/// (mapped), and the ring of fetch and commit commands. Served by one thread, the one
/// that made it.
pub struct Queue {
    cdev: File,
    ring: IoUring,
    descs: *const IoDesc,
    descs_len: usize,
    depth: u16,
    /// Per tag: the buffer the kernel copies the request's data to or from.
    bufs: Vec<u64>,
    efd: std::os::fd::OwnedFd,
}

// SAFETY: the mapping is read-only and owned by the queue; one thread uses it at a time.
unsafe impl Send for Queue {}

impl Queue {
    /// Opens queue 0 of device `id` and fetches every tag, tag `t`'s data going through
    /// `bufs[t]` (each at least the device's `max_io` bytes, alive as long as the queue).
    /// The char device may take a moment to appear after ADD_DEV.
    pub fn new(id: u32, depth: u16, bufs: Vec<u64>) -> io::Result<Queue> {
        assert_eq!(bufs.len(), depth as usize);
        let path = format!("/dev/ublkc{id}");
        let until = Instant::now() + Duration::from_secs(5);
        let cdev = loop {
            match OpenOptions::new().read(true).write(true).open(&path) {
                Ok(f) => break f,
                Err(e) if e.kind() == io::ErrorKind::NotFound && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => return Err(io::Error::new(e.kind(), format!("{path}: {e}"))),
            }
        };
        let page = 4096;
        let descs_len = (depth as usize * std::mem::size_of::<IoDesc>()).div_ceil(page) * page;
        // SAFETY: a new shared read-only mapping of the queue's descriptors (queue 0 is
        // at offset 0); checked for failure below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                descs_len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                cdev.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ring = IoUring::new(u32::from(depth).next_power_of_two().max(4) * 2)?;
        // SAFETY: eventfd returns a new descriptor or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just created, owned by nothing else.
        let efd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        ring.submitter().register_eventfd(raw)?;
        let mut q = Queue {
            cdev,
            ring,
            descs: p.cast(),
            descs_len,
            depth,
            bufs,
            efd,
        };
        for tag in 0..depth {
            q.push(IO_FETCH_REQ, tag, -1);
        }
        q.ring.submit()?;
        Ok(q)
    }

    fn push(&mut self, op: u32, tag: u16, result: i32) {
        let cmd = IoCmd {
            q_id: 0,
            tag,
            result,
            addr: self.bufs[tag as usize],
        };
        let sqe = opcode::UringCmd16::new(types::Fd(self.cdev.as_raw_fd()), op)
            .cmd(as_bytes(&cmd))
            .build()
            .user_data(u64::from(tag));
        loop {
            // SAFETY: the command carries only numbers and the tag's buffer, alive as long
            // as the queue.
            if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                return;
            }
            let _ = self.ring.submit();
        }
    }

    /// The descriptor that becomes readable when a request arrives.
    pub fn event_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.efd.as_fd()
    }

    /// The requests that arrived: (tag, descriptor). `aborted` is set when the device is
    /// stopping (a fetch completed without a request).
    pub fn take_requests(&mut self, out: &mut Vec<(u16, IoDesc)>, aborted: &mut bool) {
        let mut b = [0u8; 8];
        // SAFETY: reads 8 bytes into a buffer of 8 (clears the eventfd).
        unsafe { libc::read(self.efd.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
        let done: Vec<(u16, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data() as u16, c.result()))
            .collect();
        for (tag, res) in done {
            if res != IO_RES_OK || tag >= self.depth {
                *aborted = true;
                continue;
            }
            // SAFETY: within the mapping (tag < depth); the kernel wrote it before
            // completing the fetch, and does not change it until the commit.
            let d = unsafe { std::ptr::read_volatile(self.descs.add(tag as usize)) };
            out.push((tag, d));
        }
    }

    /// Completes tag `tag`'s request with `result` (bytes, or -errno) and fetches the
    /// next one for the tag. A READ's data must be in the tag's buffer.
    pub fn commit(&mut self, tag: u16, result: i32) {
        self.push(IO_COMMIT_AND_FETCH_REQ, tag, result);
    }

    /// Hands the commits to the kernel.
    pub fn submit(&mut self) -> io::Result<()> {
        self.ring.submit().map(|_| ())
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, not used after this.
        unsafe { libc::munmap(self.descs.cast_mut().cast(), self.descs_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_structures_have_the_kernels_sizes() {
        assert_eq!(std::mem::size_of::<CtrlCmd>(), 32);
        assert_eq!(std::mem::size_of::<DevInfo>(), 64);
        assert_eq!(std::mem::size_of::<IoCmd>(), 16);
        assert_eq!(std::mem::size_of::<IoDesc>(), 24);
        assert_eq!(std::mem::size_of::<ParamBasic>(), 32);
        assert_eq!(std::mem::size_of::<ParamDiscard>(), 20);
        assert_eq!(std::mem::size_of::<Params>(), 112);
        // UBLK_U_CMD_ADD_DEV and UBLK_U_IO_FETCH_REQ as the kernel's macros give them.
        assert_eq!(CMD_ADD_DEV, 0xc020_7504);
        assert_eq!(IO_FETCH_REQ, 0xc010_7520);
    }
}
