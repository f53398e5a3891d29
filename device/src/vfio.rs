//! vfio-user glue: presents a function's core ([`crate::function`]) as a PCI function to one QEMU (or any vfio-user
//! client). Routes region accesses to config space or the core, DMA maps to guest memory,
//! and interrupt setup to the MSI-X eventfd table. Nothing here knows what a register means.
//!
//! The `vfio_user` crate's server is single-threaded and blocking (one client; `run` returns
//! when the client disconnects), so this is the control thread. Engine threads, when they
//! exist, must never wait on it.

use std::fs::File;
use std::io;
use std::mem::size_of;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use log::{debug, info, warn};
use qpip_abi::pci as abi;
use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_NORESIZE, VFIO_IRQ_SET_ACTION_TRIGGER,
    VFIO_IRQ_SET_ACTION_TYPE_MASK, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_IRQ_SET_DATA_TYPE_MASK, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, Server, ServerBackend, ServerRegion};

use crate::backend::Backend;
use crate::engine::thread::EngineThread;
use crate::function::{FunctionConfig, FunctionCore};
use crate::pci::config::{ConfigSpace, WriteEffect, CONFIG_SPACE_SIZE};

/// One qpip PCI function as a vfio-user server backend.
pub struct Function {
    config: ConfigSpace,
    pub core: FunctionCore,
}

impl Function {
    /// A function with an engine thread of its own.
    pub fn new(core_config: FunctionConfig) -> io::Result<Self> {
        Ok(Function {
            config: ConfigSpace::new(),
            core: FunctionCore::new(core_config)?,
        })
    }

    /// A function whose engine runs on `thread`, on `link` if given (see
    /// [`FunctionCore::on_thread`]).
    pub fn on_thread(
        thread: &Arc<EngineThread>,
        core_config: FunctionConfig,
        link: Option<Box<dyn Backend>>,
    ) -> io::Result<Self> {
        Ok(Function {
            config: ConfigSpace::new(),
            core: FunctionCore::on_thread(thread, core_config, link)?,
        })
    }

    /// The regions (BARs, config space) as the client will see them.
    pub fn regions(&self) -> Vec<ServerRegion> {
        (0..VFIO_PCI_NUM_REGIONS)
            .map(|index| {
                let mut info = vfio_region_info {
                    argsz: size_of::<vfio_region_info>() as u32,
                    index,
                    ..Default::default()
                };
                let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
                if index == VFIO_PCI_CONFIG_REGION_INDEX {
                    info.size = CONFIG_SPACE_SIZE as u64;
                    info.flags = rw;
                } else if index == abi::CTRL_BAR {
                    // Trapped: never mmappable, so every access reaches the core, and QEMU can
                    // overlay its own MSI-X table emulation on this BAR.
                    info.size = abi::CTRL_BAR_SIZE as u64;
                    info.flags = rw;
                }
                // No region is mmappable, on purpose: QEMU's client posts BAR writes (the
                // vCPU does not wait for a reply) only for a device with no mmappable region,
                // and the kick register must be a posted write. The doorbells that need no
                // trap live in guest RAM instead (qpip_abi::doorbell).
                ServerRegion {
                    region_info: info,
                    sparse_areas: Vec::new(),
                    mmap_fd: None,
                }
            })
            .collect()
    }

    /// Interrupt types: MSI-X only (no INTx pin, no MSI).
    pub fn irqs(&self) -> Vec<IrqInfo> {
        (0..VFIO_PCI_NUM_IRQS)
            .map(|index| {
                if index == VFIO_PCI_MSIX_IRQ_INDEX {
                    IrqInfo {
                        index,
                        count: abi::MSIX_VECTORS as u32,
                        flags: VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
                    }
                } else {
                    IrqInfo {
                        index,
                        count: 0,
                        flags: 0,
                    }
                }
            })
            .collect()
    }

    fn function_reset(&mut self) {
        self.config.reset();
        self.core.reset();
    }
}

fn refused(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl ServerBackend for Function {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()> {
        let result = match region {
            VFIO_PCI_CONFIG_REGION_INDEX => self
                .config
                .read(offset, data)
                .map_err(|e| refused(e.to_string())),
            r if r == abi::CTRL_BAR => self.core.ctrl_read(offset, data),
            _ => Err(refused(format!(
                "read from region {region}, which this function does not have"
            ))),
        };
        if let Err(e) = &result {
            warn!("refused region read: {e}");
        }
        result
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        let result = match region {
            VFIO_PCI_CONFIG_REGION_INDEX => match self.config.write(offset, data) {
                Ok(WriteEffect::None) => Ok(()),
                Ok(WriteEffect::FunctionReset) => {
                    // Done before the write completes: the guest's PCI core waits 100 ms
                    // after it anyway, then restores config space.
                    info!("function-level reset initiated by the guest (AF FLR)");
                    self.function_reset();
                    Ok(())
                }
                Err(e) => Err(refused(e.to_string())),
            },
            r if r == abi::CTRL_BAR => self.core.ctrl_write(offset, data),
            _ => Err(refused(format!(
                "write to region {region}, which this function does not have"
            ))),
        };
        if let Err(e) = &result {
            warn!("refused region write: {e}");
        }
        result
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> io::Result<()> {
        debug!(
            "DMA_MAP flags={flags:?} address={address:#x} size={size:#x} offset={offset:#x} fd={}",
            fd.is_some()
        );
        self.core
            .ram
            .map(address, size, offset, fd)
            .inspect_err(|e| warn!("{e}"))
    }

    fn dma_unmap(&mut self, _flags: DmaUnmapFlags, address: u64, size: u64) -> io::Result<()> {
        self.core.ram.unmap(address, size)
    }

    fn reset(&mut self) -> io::Result<()> {
        info!("function reset requested by the client");
        self.function_reset();
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()> {
        if index != VFIO_PCI_MSIX_IRQ_INDEX {
            return Err(refused(format!(
                "interrupt index {index} is not supported (MSI-X only)"
            )));
        }
        if flags & VFIO_IRQ_SET_ACTION_TYPE_MASK != VFIO_IRQ_SET_ACTION_TRIGGER {
            // Mask/unmask actions are for INTx; MSI-X masking is done in the table by QEMU.
            debug!("SET_IRQS action {flags:#x} ignored");
            return Ok(());
        }
        match flags & VFIO_IRQ_SET_DATA_TYPE_MASK {
            VFIO_IRQ_SET_DATA_EVENTFD if !fds.is_empty() => {
                if fds.len() != count as usize {
                    warn!(
                        "SET_IRQS: {} eventfds for {count} vectors; installing those given",
                        fds.len()
                    );
                }
                self.core.irqs.set(start, fds)?;
            }
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_DATA_NONE => {
                self.core.irqs.clear(start, count)
            }
            other => {
                return Err(refused(format!(
                    "SET_IRQS data type {other:#x} is not supported"
                )))
            }
        }
        Ok(())
    }
}

/// Options for [`serve`].
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    pub core: FunctionConfig,
}

/// Listens on `socket`, serves one client until it disconnects, then returns. The socket
/// file is removed on return.
pub fn serve(socket: &Path, options: ServeOptions) -> Result<(), String> {
    let mut function =
        Function::new(options.core).map_err(|e| format!("cannot create the device: {e}"))?;
    serve_client(socket, &mut function)
}

/// Serves one client of `function` on `socket` until it disconnects.
fn serve_client(socket: &Path, function: &mut Function) -> Result<(), String> {
    // The control threads' policy while serving (`qpipd --control-sched`, crate::sched).
    let _sched = crate::sched::ControlThread::enter();
    let server = {
        let Some(_permit) = listen_permit() else {
            // qpipd is on its way out (its sockets are gone already); a new socket file
            // now would outlive the process. Wait for the exit.
            loop {
                std::thread::park();
            }
        };
        remove_stale_socket(socket)?;
        Server::new(socket, true, function.irqs(), function.regions())
            .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?
    };
    info!("listening on {} (vfio-user)", socket.display());
    server
        .run(function)
        .map_err(|e| format!("vfio-user session failed: {e}"))?;
    info!(
        "client disconnected; {} interrupts raised, {} dropped, {} bad register accesses",
        function.core.irqs.raised(),
        function.core.irqs.dropped(),
        function.core.counters.bad_register_accesses
    );
    Ok(())
}

/// Held while a control thread creates a function's socket, and true once qpipd stops:
/// a function whose client went just as qpipd was told to stop (the lab stops qpipd right
/// after its guests' QEMU) must not listen again after the sockets were removed.
static STOPPING: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// The right to create a function's socket, held while creating it; None once qpipd
/// stops ([`stop_listening`]).
fn listen_permit() -> Option<std::sync::MutexGuard<'static, bool>> {
    let stopping = STOPPING.lock().unwrap_or_else(|e| e.into_inner());
    (!*stopping).then_some(stopping)
}

/// Removes `sockets` for good: no function of this process listens again afterwards, so
/// no socket file of it outlives the process. For the handler of a stop signal.
pub fn stop_listening(sockets: &[PathBuf]) {
    let mut stopping = STOPPING.lock().unwrap_or_else(|e| e.into_inner());
    *stopping = true;
    for socket in sockets {
        let _ = std::fs::remove_file(socket);
    }
}

/// One function of a multi-function qpipd: its name (for logs), its vfio-user socket and
/// its configuration.
#[derive(Clone, Debug)]
pub struct FunctionSpec {
    pub name: String,
    pub socket: PathBuf,
    pub core: FunctionConfig,
}

/// Gives function `i` its link each time it starts (a port of the embedded switch), or
/// None for the link its configuration names.
pub type LinkFactory = dyn Fn(usize) -> Option<Box<dyn Backend>> + Send + Sync;

/// Serves `functions`, each on its own socket and control thread; their engines share
/// `threads` (function i on thread i mod their number). A function serves one client at a
/// time. When its client goes (the VM shut down, rebooted or was killed), the function is
/// dropped — its engine stops, and with it its objects, connections (a peer's next
/// segment is answered with a reset), memory maps and link port — and a fresh function
/// waits on the same socket for the next client, while the others keep serving. Returns
/// when a function cannot be served (an error naming it); otherwise it serves until the
/// process is stopped.
pub fn serve_functions(
    functions: Vec<FunctionSpec>,
    threads: Vec<Arc<EngineThread>>,
    link: Arc<LinkFactory>,
) -> Result<(), String> {
    if threads.is_empty() {
        return Err("no engine thread to run the functions on".into());
    }
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for (i, f) in functions.into_iter().enumerate() {
        let thread = threads[i % threads.len()].clone();
        let (link, done) = (link.clone(), done_tx.clone());
        std::thread::Builder::new()
            .name(format!("qpip-ctl-{}", f.name))
            .spawn(move || {
                let r = serve_again(i, &f, &thread, &*link);
                let _ = done.send(r.map_err(|e| format!("function {}: {e}", f.name)));
            })
            .map_err(|e| format!("cannot start a control thread: {e}"))?;
    }
    drop(done_tx);
    // Each control thread serves until it fails; the first failure ends qpipd.
    done_rx
        .recv()
        .unwrap_or_else(|_| Err("every control thread is gone".into()))
}

/// A function's control thread: a fresh function for every client, for ever.
fn serve_again(
    i: usize,
    f: &FunctionSpec,
    thread: &Arc<EngineThread>,
    link: &LinkFactory,
) -> Result<(), String> {
    // Its engine's logs (a failure above all) name the function.
    let mut core = f.core.clone();
    core.engine.name = format!("{} (#{i})", f.name);
    for client in 1u64.. {
        let mut function = Function::on_thread(thread, core.clone(), link(i))
            .map_err(|e| format!("cannot create the device: {e}"))?;
        info!("function {}: waiting for client {client}", f.name);
        serve_client(&f.socket, &mut function)?;
        info!(
            "function {}: client {client} gone; the function starts afresh",
            f.name
        );
    }
    Ok(())
}

/// A socket file left by a qpipd that was killed would make bind fail. Remove it only if
/// nobody is listening on it; refuse to touch anything that is not a socket.
fn remove_stale_socket(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(format!(
            "{} exists and is not a socket; refusing to replace it",
            path.display()
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(format!(
            "{} is in use by another process (another qpipd?)",
            path.display()
        )),
        Err(_) => {
            info!("removing stale socket {}", path.display());
            std::fs::remove_file(path)
                .map_err(|e| format!("cannot remove stale socket {}: {e}", path.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Once stopped, the sockets are gone and no function may create one again (a
    /// control thread then waits for the exit instead of listening).
    #[test]
    fn after_a_stop_no_function_listens_again() {
        let dir = std::env::temp_dir().join(format!("qpip-stop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("f0.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert!(
            listen_permit().is_some(),
            "listening is allowed before a stop"
        );
        stop_listening(std::slice::from_ref(&sock));
        assert!(!sock.exists(), "the socket file is removed");
        assert!(
            listen_permit().is_none(),
            "no function listens after a stop"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
