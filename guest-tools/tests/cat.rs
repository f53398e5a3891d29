//! `qpip-cat` on the host with the software provider: qpip-cat ⇄ qpip-cat and qpip-cat ⇄
//! plain kernel sockets, TCP (stream and message framing) and UDP, both directions, every
//! byte compared; exit statuses and error lines; a regular file on stdin (sent from its
//! mapped pages) against the same bytes through a pipe.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use qpip_abi::pattern::Pattern;

const T: Duration = Duration::from_secs(30);

/// A TCP port on `::1` that nothing listens on (as of now).
fn free_tcp_port() -> u16 {
    TcpListener::bind("[::1]:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running qpip-cat: its stdin, its whole stdout (collected by a thread) and the stderr
/// lines as they come.
struct Cat {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

fn cat(args: &[&str]) -> Cat {
    cat_in(args, Stdio::piped())
}

/// A qpip-cat whose stdin is `stdin` (a pipe the test feeds, or a file).
fn cat_in(args: &[&str], stdin: Stdio) -> Cat {
    let mut child = Command::new(env!("CARGO_BIN_EXE_qpip-cat"))
        .args(["--provider", "soft", "-v"])
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start qpip-cat");
    let mut out = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut v = Vec::new();
        out.read_to_end(&mut v).unwrap();
        v
    });
    let (tx, stderr) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    Cat {
        stdin: child.stdin.take(),
        child,
        stdout: Some(stdout),
        stderr,
        seen: Vec::new(),
    }
}

impl Cat {
    /// Waits for a stderr line containing `what` (qpip-cat -v says when it listens).
    fn wait_for(&mut self, what: &str) {
        loop {
            match self.stderr.recv_timeout(T) {
                Ok(l) if l.contains(what) => return self.seen.push(l),
                Ok(l) => self.seen.push(l),
                Err(_) => panic!("qpip-cat never said {what:?}; stderr: {:?}", self.seen),
            }
        }
    }

    /// Writes `data` to its stdin from a thread; `close` ends stdin afterwards.
    fn feed(&mut self, data: Vec<u8>, close: bool) -> JoinHandle<()> {
        let mut stdin = if close {
            self.stdin.take().unwrap()
        } else {
            self.stdin.as_ref().unwrap().try_clone_fd()
        };
        std::thread::spawn(move || {
            // A peer that ended early closes the pipe; the exit status tells.
            let _ = stdin.write_all(&data);
        })
    }

    /// Waits for the exit (at most `T`): status code, stdout, stderr.
    fn finish(mut self) -> (i32, Vec<u8>, String) {
        let deadline = std::time::Instant::now() + T;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "qpip-cat did not exit within {T:?}; stderr: {:?}",
                    self.seen
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        drop(self.stdin.take());
        let out = self.stdout.take().unwrap().join().unwrap();
        // All it wrote: the reader thread may still be behind the exit, and ends (dropping
        // the channel) at the pipe's end of file.
        while let Ok(l) = self.stderr.recv_timeout(T) {
            self.seen.push(l);
        }
        (status.code().unwrap_or(-1), out, self.seen.join("\n"))
    }
}

impl Drop for Cat {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Duplicates a pipe end so a writer thread can use it while the test keeps the original
/// (keeping the peer's stdin open until the test lets go).
trait TryCloneFd {
    fn try_clone_fd(&self) -> ChildStdin;
}

impl TryCloneFd for ChildStdin {
    fn try_clone_fd(&self) -> ChildStdin {
        use std::os::fd::{AsFd, OwnedFd};
        let fd: OwnedFd = self.as_fd().try_clone_to_owned().unwrap();
        ChildStdin::from(fd)
    }
}

/// `len` bytes of the test pattern from `seed`.
fn data(len: usize, seed: u64) -> Vec<u8> {
    Pattern::new(seed).take(len).collect()
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("[::1]:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn same(got: &[u8], want: &[u8], what: &str) {
    assert!(
        got == want,
        "{what}: {} bytes arrived, {} sent, first difference at {:?}",
        got.len(),
        want.len(),
        got.iter().zip(want).position(|(a, b)| a != b)
    );
}

/// The listener's stdin is empty (it closes its direction at once, like `qpip-cat -l P
/// > file &` in a script); the connector sends `input` and closes; both exit 0 and the
/// listener printed `input`.
fn tcp_connector_to_listener(framing: &str, input: &[u8]) {
    let port = free_tcp_port().to_string();
    let mut server = cat(&[framing, "-l", &port]);
    server.wait_for("listening on");
    server.feed(Vec::new(), true);
    let mut client = cat(&[framing, "::1", &port]);
    client.feed(input.to_vec(), true);
    let (c_rc, c_out, c_err) = client.finish();
    let (s_rc, s_out, s_err) = server.finish();
    assert_eq!((c_rc, s_rc), (0, 0), "client: {c_err}\nserver: {s_err}");
    assert!(c_out.is_empty());
    same(&s_out, input, "connector → listener");
}

/// The other way: the listener sends `input` and closes; the connector prints it.
fn tcp_listener_to_connector(framing: &str, input: &[u8]) {
    let port = free_tcp_port().to_string();
    let mut server = cat(&[framing, "-l", &port]);
    server.wait_for("listening on");
    server.feed(input.to_vec(), true);
    let mut client = cat(&[framing, "::1", &port]);
    client.feed(Vec::new(), true);
    let (c_rc, c_out, c_err) = client.finish();
    let (s_rc, _, s_err) = server.finish();
    assert_eq!((c_rc, s_rc), (0, 0), "client: {c_err}\nserver: {s_err}");
    same(&c_out, input, "listener → connector");
}

#[test]
fn tcp_stream_cat_to_cat_both_directions() {
    tcp_connector_to_listener("--stream", &data(3 << 20, 1));
    tcp_listener_to_connector("--stream", &data(1 << 20, 2));
}

#[test]
fn tcp_message_cat_to_cat_both_directions() {
    tcp_connector_to_listener("--message", &data(2 << 20, 3));
    tcp_listener_to_connector("--message", &data(300_000, 4));
}

#[test]
fn tcp_stream_with_plain_sockets_both_directions() {
    // qpip-cat connects to a kernel listener: sends, then receives.
    let l = TcpListener::bind("[::1]:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let up = data(1 << 20, 5);
    let mut client = cat(&["::1", &port]);
    client.feed(up.clone(), true);
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    same(&got, &up, "qpip-cat → kernel socket");
    let (rc, _, err) = {
        drop(s); // our close ends qpip-cat's stream, and so the program
        client.finish()
    };
    assert_eq!(rc, 0, "{err}");

    // A kernel socket connects to qpip-cat -l: qpip-cat prints what the socket sends.
    let port = free_tcp_port();
    let mut server = cat(&["-l", &port.to_string()]);
    server.wait_for("listening on");
    server.feed(Vec::new(), true);
    let down = data(1 << 20, 6);
    let mut s = TcpStream::connect(("::1", port)).unwrap();
    s.write_all(&down).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    assert!(
        back.is_empty(),
        "qpip-cat sent {} bytes without stdin",
        back.len()
    );
    let (rc, out, err) = server.finish();
    assert_eq!(rc, 0, "{err}");
    same(&out, &down, "kernel socket → qpip-cat -l");

    // And qpip-cat -l sending to the kernel socket.
    let mut server = cat(&["-l", &port.to_string()]);
    server.wait_for("listening on");
    let s = TcpStream::connect(("::1", port)).unwrap();
    server.feed(down.clone(), true);
    let mut s = s;
    s.set_read_timeout(Some(T)).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    same(&got, &down, "qpip-cat -l → kernel socket");
    drop(s);
    let (rc, _, err) = server.finish();
    assert_eq!(rc, 0, "{err}");
}

#[test]
fn udp_cat_to_cat_and_plain_sockets() {
    // UDP has no flow control: stay within the receiver's 16 posted buffers (each read
    // of stdin is one datagram of at most 8192 bytes).
    let input = data(60_000, 7);
    let port = free_udp_port().to_string();
    let mut server = cat(&["-u", "-w", "2", "-l", &port]);
    server.wait_for("UDP bound");
    let mut client = cat(&["-u", "::1", &port]);
    client.feed(input.clone(), true);
    let (c_rc, _, c_err) = client.finish();
    let (s_rc, s_out, s_err) = server.finish();
    assert_eq!((c_rc, s_rc), (0, 0), "client: {c_err}\nserver: {s_err}");
    same(&s_out, &input, "UDP qpip-cat → qpip-cat");

    // A kernel socket sends to qpip-cat -u -l, which answers to the first sender.
    let port = free_udp_port();
    let mut server = cat(&["-u", "-w", "2", "-l", &port.to_string()]);
    server.wait_for("UDP bound");
    let sock = UdpSocket::bind("[::1]:0").unwrap();
    sock.set_read_timeout(Some(T)).unwrap();
    sock.send_to(b"hello from a socket\n", ("::1", port))
        .unwrap();
    server.wait_for("datagram from");
    server.feed(b"hello back".to_vec(), false);
    let mut buf = [0u8; 100];
    let (n, _) = sock.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello back");
    let (rc, out, err) = server.finish();
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out, b"hello from a socket\n");

    // qpip-cat -u sends to a kernel socket and prints its answer.
    let sock = UdpSocket::bind("[::1]:0").unwrap();
    sock.set_read_timeout(Some(T)).unwrap();
    let port = sock.local_addr().unwrap().port().to_string();
    let mut client = cat(&["-u", "-w", "2", "::1", &port]);
    client.feed(b"datagram to a socket".to_vec(), true);
    let (n, from) = sock.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"datagram to a socket");
    sock.send_to(b"answer", from).unwrap();
    let (rc, out, err) = client.finish();
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out, b"answer");
}

#[test]
fn errors_are_one_line_with_exit_codes() {
    let port = free_tcp_port().to_string();
    let (rc, _, err) = cat(&["::1", &port]).finish();
    assert_eq!(rc, 1, "{err}");
    assert!(
        err.contains("connect to [::1]:") && err.contains("refused"),
        "{err}"
    );
    for (args, what) in [
        (&["-x"][..], "unknown option -x"),
        (&["::1", "0"][..], "not a port number"),
        (&["::1"][..], "expected ADDR PORT"),
        (
            &["--provider", "bogus", "::1", "5"][..],
            "expected soft or device",
        ),
    ] {
        let (rc, _, err) = cat(args).finish();
        assert_eq!(rc, 2, "{args:?}: {err}");
        assert!(err.contains(what), "{args:?}: {err}");
    }
    let (rc, _, err) = cat(&["no-such-host.invalid", "5"]).finish();
    assert_eq!(rc, 1, "{err}");
}

/// A file of `input` in the temporary folder, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(tag: &str, input: &[u8]) -> TempFile {
        let path = std::env::temp_dir().join(format!(
            "qpip-cat-test-{}-{tag}-{}",
            std::process::id(),
            free_tcp_port()
        ));
        std::fs::write(&path, input).unwrap();
        TempFile(path)
    }

    /// Opened for reading, its offset at `at`.
    fn open_at(&self, at: u64) -> std::fs::File {
        let mut f = std::fs::File::open(&self.0).unwrap();
        f.seek(SeekFrom::Start(at)).unwrap();
        f
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `qpip-cat FRAMING ::1 PORT < file` (the file's offset at `at`) to `qpip-cat -l`: what
/// the listener printed, and what the sender said on stderr. Afterwards the file's offset is
/// at its end, as reading it would have left it.
fn send_file(framing: &str, file: &TempFile, at: u64) -> (Vec<u8>, String) {
    let port = free_tcp_port().to_string();
    let mut server = cat(&[framing, "-l", &port]);
    server.wait_for("listening on");
    server.feed(Vec::new(), true);
    let f = file.open_at(at);
    let mut shared = f.try_clone().unwrap();
    let client = cat_in(&[framing, "::1", &port], Stdio::from(f));
    let (c_rc, c_out, c_err) = client.finish();
    let (s_rc, s_out, s_err) = server.finish();
    assert_eq!((c_rc, s_rc), (0, 0), "client: {c_err}\nserver: {s_err}");
    assert!(c_out.is_empty());
    let len = std::fs::metadata(&file.0).unwrap().len();
    assert_eq!(
        shared.stream_position().unwrap(),
        len,
        "stdin's offset afterwards"
    );
    (s_out, c_err)
}

#[test]
fn regular_file_stdin_sent_from_its_pages_gives_the_bytes_of_a_pipe() {
    // Larger than one 16 MiB mapped window, not a whole number of pages.
    let input = data((20 << 20) + 12_345, 8);
    let file = TempFile::new("big", &input);
    for framing in ["--message", "--stream"] {
        let (out, err) = send_file(framing, &file, 0);
        assert!(err.contains("zero-copy"), "{framing}: {err}");
        same(&out, &input, &format!("{framing}: file stdin"));
        // The same bytes through a pipe (read into buffers).
        tcp_connector_to_listener(framing, &input);
        // A file whose offset is not at its start (nor at a page boundary): the rest.
        let (out, _) = send_file(framing, &file, 70_001);
        same(
            &out,
            &input[70_001..],
            &format!("{framing}: file stdin from 70001"),
        );
    }
    // The other direction: qpip-cat -l with a file on stdin sends it to the connector.
    let port = free_tcp_port().to_string();
    let mut server = cat_in(&["--message", "-l", &port], Stdio::from(file.open_at(0)));
    server.wait_for("listening on");
    let mut client = cat(&["--message", "::1", &port]);
    client.feed(Vec::new(), true);
    let (c_rc, c_out, c_err) = client.finish();
    let (s_rc, _, s_err) = server.finish();
    assert_eq!((c_rc, s_rc), (0, 0), "client: {c_err}\nserver: {s_err}");
    assert!(s_err.contains("zero-copy"), "{s_err}");
    same(&c_out, &input, "file stdin of qpip-cat -l → connector");
}

#[test]
fn small_empty_and_finished_file_stdins() {
    let small = data(1000, 9);
    let file = TempFile::new("small", &small);
    let (out, _) = send_file("--message", &file, 0);
    same(&out, &small, "1000-byte file");
    // At its end already, or empty: nothing is sent, both ends exit 0.
    let (out, _) = send_file("--message", &file, 1000);
    assert!(out.is_empty(), "{} bytes from a file at its end", out.len());
    let empty = TempFile::new("empty", &[]);
    let (out, _) = send_file("--stream", &empty, 0);
    assert!(out.is_empty(), "{} bytes from an empty file", out.len());
    // UDP reads a file like a pipe: one datagram per read (at most 8192 bytes).
    let input = data(60_000, 10);
    let file = TempFile::new("udp", &input);
    let port = free_udp_port().to_string();
    let mut server = cat(&["-u", "-w", "2", "-l", &port]);
    server.wait_for("UDP bound");
    let client = cat_in(&["-u", "::1", &port], Stdio::from(file.open_at(0)));
    let (c_rc, _, c_err) = client.finish();
    let (s_rc, s_out, s_err) = server.finish();
    assert_eq!((c_rc, s_rc), (0, 0), "client: {c_err}\nserver: {s_err}");
    same(&s_out, &input, "UDP file stdin");
}
