//! The command line.

use std::time::Duration;

use qpip::Framing;

const USAGE: &str = "usage: qpip-cat [-u] [--stream|--message] [--provider soft|device] [-w SECS] [-v] (-l [ADDR] PORT | ADDR PORT)";

pub(crate) struct Args {
    pub(crate) udp: bool,
    pub(crate) framing: Framing,
    pub(crate) provider: Option<String>,
    pub(crate) listen: bool,
    pub(crate) addr: Option<String>,
    pub(crate) port: u16,
    pub(crate) wait: Option<Duration>,
    pub(crate) verbose: bool,
}

/// What ends the program: a message and its exit status.
pub(crate) struct Fail(pub(crate) u8, pub(crate) String);

impl<E: std::fmt::Display> From<(&str, E)> for Fail {
    fn from((what, e): (&str, E)) -> Fail {
        Fail(1, format!("{what}: {e}"))
    }
}

fn usage(msg: impl std::fmt::Display) -> Fail {
    Fail(2, format!("{msg}\n{USAGE}"))
}

pub(crate) fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, Fail> {
    let mut a = Args {
        udp: false,
        framing: Framing::Stream,
        provider: None,
        listen: false,
        addr: None,
        port: 0,
        wait: None,
        verbose: false,
    };
    let mut pos = Vec::new();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-u" | "--udp" => a.udp = true,
            "-l" | "--listen" => a.listen = true,
            "-v" | "--verbose" => a.verbose = true,
            "--stream" => a.framing = Framing::Stream,
            "--message" => a.framing = Framing::Message,
            "--provider" => {
                let p = it
                    .next()
                    .ok_or_else(|| usage("--provider needs soft or device"))?;
                if p != "soft" && p != "device" {
                    return Err(usage(format!("--provider {p}: expected soft or device")));
                }
                a.provider = Some(p);
            }
            "-w" | "--wait" => {
                let s = it
                    .next()
                    .ok_or_else(|| usage("-w needs a number of seconds"))?;
                let secs: f64 = s
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| usage(format!("-w {s}: not a positive number of seconds")))?;
                a.wait = Some(Duration::from_secs_f64(secs));
            }
            "-h" | "--help" => return Err(Fail(0, USAGE.to_string())),
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(usage(format!("unknown option {s}")))
            }
            _ => pos.push(arg),
        }
    }
    let port_of = |s: &str| {
        s.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| usage(format!("{s}: not a port number (1-65535)")))
    };
    match (a.listen, pos.as_slice()) {
        (true, [port]) => a.port = port_of(port)?,
        (_, [addr, port]) => {
            a.addr = Some(addr.clone());
            a.port = port_of(port)?;
        }
        (true, _) => return Err(usage("-l takes [ADDR] PORT")),
        (false, _) => return Err(usage("expected ADDR PORT (or -l PORT)")),
    }
    Ok(a)
}
