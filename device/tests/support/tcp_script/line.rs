//! Script lines parsed: a segment to inject or to expect (flags, sequence numbers,
//! window, options), with `*` and `$` where the script leaves a value open.

/// A number in a script, or `*` (any), or `$` (the device's last TSval).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Num {
    Any,
    Last,
    N(u64),
}

pub(super) fn num(s: &str) -> Num {
    match s {
        "*" => Num::Any,
        "$" => Num::Last,
        _ => Num::N(s.parse().unwrap_or_else(|_| panic!("not a number: {s}"))),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum OptSpec {
    Mss(Num),
    Wscale(Num),
    SackOk,
    Ts(Num, Num),
    Sack(Vec<(u32, u32)>),
    Nop,
    Eol,
    Raw(Vec<u8>),
}

#[derive(Debug, Clone)]
pub(super) struct Line {
    pub(super) flags: String,
    pub(super) seq: Num,
    pub(super) len: usize,
    pub(super) ack: Option<Num>,
    pub(super) win: Option<Num>,
    pub(super) opts: Option<Vec<OptSpec>>,
}

fn parse_opts_spec(s: &str) -> Vec<OptSpec> {
    let mut v = Vec::new();
    for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let w: Vec<&str> = item.split_whitespace().collect();
        v.push(match w[0] {
            "mss" => OptSpec::Mss(num(w[1])),
            "wscale" => OptSpec::Wscale(num(w[1])),
            "sackOK" => OptSpec::SackOk,
            "TS" => {
                assert!(w.len() == 5 && w[1] == "val" && w[3] == "ecr", "TS: {item}");
                OptSpec::Ts(num(w[2]), num(w[4]))
            }
            "sack" => OptSpec::Sack(
                w[1..]
                    .iter()
                    .map(|r| {
                        let (a, b) = r.split_once(':').expect("sack A:B");
                        (a.parse().expect("A"), b.parse().expect("B"))
                    })
                    .collect(),
            ),
            "nop" => OptSpec::Nop,
            "eol" => OptSpec::Eol,
            "raw" => OptSpec::Raw(
                (0..w[1].len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&w[1][i..i + 2], 16).expect("hex"))
                    .collect(),
            ),
            o => panic!("unknown option {o}"),
        });
    }
    v
}

pub(super) fn parse_line(s: &str) -> Line {
    let (head, opts) = match s.find('<') {
        Some(i) => {
            let j = s.rfind('>').expect("options end with >");
            (&s[..i], Some(parse_opts_spec(&s[i + 1..j])))
        }
        None => (s, None),
    };
    let w: Vec<&str> = head.split_whitespace().collect();
    let flags = w[0].to_string();
    assert!(flags.chars().all(|c| "SFRP.".contains(c)), "flags: {flags}");
    let (seq, len) = match w[1].split_once(':') {
        None => (num(w[1]), 0),
        Some((a, rest)) => {
            let (b, l) = rest
                .trim_end_matches(')')
                .split_once('(')
                .expect("START:END(LEN)");
            let (a, b, l): (u64, u64, usize) = (
                a.parse().expect("start"),
                b.parse().expect("end"),
                l.parse().expect("len"),
            );
            assert_eq!(b - a, l as u64, "{s}: END - START is LEN");
            (Num::N(a), l)
        }
    };
    let mut line = Line {
        flags,
        seq,
        len,
        ack: None,
        win: None,
        opts,
    };
    let mut i = 2;
    while i < w.len() {
        match w[i] {
            "ack" => line.ack = Some(num(w[i + 1])),
            "win" => line.win = Some(num(w[i + 1])),
            x => panic!("{s}: unexpected {x}"),
        }
        i += 2;
    }
    line
}
