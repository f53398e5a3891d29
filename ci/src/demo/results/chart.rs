//! The comparison as a picture (`docs/bench.svg`): the QP gain of every line as a bar from
//! parity (1x) on a log scale, with a whisker over the min–max of the rounds' own gains,
//! the gain written at its end, coloured by kind of figure. It is QPs against sockets over
//! virtio-net only: the qpip netdev's column and QPs over IPv4 are in the tables.
//!
//! The SVG holds nothing but what the results hold (no time of drawing), and plotters'
//! built-in font estimate lays out the text (no system fonts), so the same results draw
//! the same bytes anywhere.

use super::format::fmt_gain;
use super::lines::{rounds_of, Line};
use super::run_info::RunInfo;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const WIDTH: u32 = 1060;
/// The title's two lines.
const TOP: u32 = 58;
const ROW: u32 = 20;
/// The x axis with its ticks and description.
const AXIS: u32 = 48;
const LEGEND: u32 = 34;
/// The row labels, right-aligned against the plot.
const LABELS: u32 = 480;
/// Room right of the plot for the last gain's text.
const RIGHT: u32 = 34;
/// Font sizes as plotters takes them (it writes `font-size` as size / 1.24).
const TEXT: f64 = 15.0;
const SMALL: f64 = 13.5;

/// What a line measures, which sets its bar's colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    RoundTrip,
    Bandwidth,
    Loss,
    Cpu,
    Overhead,
}

impl Kind {
    pub fn of(what: &str) -> Kind {
        if what.contains("overhead") {
            Kind::Overhead
        } else if what.contains("CPU") {
            Kind::Cpu
        } else if what.contains("loss") {
            Kind::Loss
        } else if what.contains("bandwidth") || what.starts_with("bulk") {
            Kind::Bandwidth
        } else {
            Kind::RoundTrip
        }
    }

    const ALL: [Kind; 5] = [
        Kind::RoundTrip,
        Kind::Bandwidth,
        Kind::Loss,
        Kind::Cpu,
        Kind::Overhead,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::RoundTrip => "round trip",
            Kind::Bandwidth => "bandwidth",
            Kind::Loss => "UDP loss",
            Kind::Cpu => "CPU per message",
            Kind::Overhead => "time in the calls per message (Table 1)",
        }
    }

    /// The hex colour of its bars (`#rrggbb` as the SVG has it).
    pub fn colour(self) -> RGBColor {
        match self {
            Kind::RoundTrip => RGBColor(0x1f, 0x77, 0xb4),
            Kind::Bandwidth => RGBColor(0x2c, 0xa0, 0x2c),
            Kind::Loss => RGBColor(0x94, 0x67, 0xbd),
            Kind::Cpu => RGBColor(0xff, 0x7f, 0x0e),
            Kind::Overhead => RGBColor(0xd6, 0x27, 0x28),
        }
    }
}

/// A tick of the log axis: `0.5x`, `1x`, `20x`.
fn tick(x: f64) -> String {
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}x")
}

/// The x range: every gain and round gain, and parity, with room on both sides (a factor
/// of 1.6 on the log scale) and more on the right for the text at the bars' ends.
fn x_range(lines: &[Line]) -> (f64, f64) {
    let mut lo: f64 = 1.0;
    let mut hi: f64 = 1.0;
    for l in lines {
        for g in l.gain().into_iter().chain(
            l.gain_spread()
                .map(|s| [s.min, s.max])
                .into_iter()
                .flatten(),
        ) {
            lo = lo.min(g);
            hi = hi.max(g);
        }
    }
    (lo / 1.6, hi * 3.0)
}

fn err<E: std::fmt::Display>(e: E) -> String {
    format!("cannot draw the chart: {e}")
}

/// The chart of `lines` as an SVG document.
pub fn gain_chart(info: &RunInfo, lines: &[Line]) -> Result<String, String> {
    let n = lines.len();
    let plot_h = ROW * n as u32 + AXIS;
    let height = TOP + plot_h + LEGEND;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let font = |size: f64| ("sans-serif", size).into_font().color(&BLACK);
        let rounds = rounds_of(lines);
        let over = if rounds > 1 {
            format!(
                "the median of {rounds} rounds (bar) and min–max of the rounds' own gains (whisker)"
            )
        } else {
            "one round".to_string()
        };
        root.draw(&Text::new(
            format!("QP gain over kernel sockets, guest a ⇄ guest b: {over}"),
            (12, 20),
            ("sans-serif", TEXT + 1.5, FontStyle::Bold)
                .into_font()
                .color(&BLACK),
        ))
        .map_err(err)?;
        root.draw(&Text::new(
            format!(
                "{}, ./qpip {}, guests under {}. Bandwidth: QPs ÷ sockets; times, CPU and loss: \
                 sockets ÷ QPs. > 1 favours QPs.",
                info.date,
                info.what,
                info.accel.to_uppercase()
            ),
            (12, 42),
            font(SMALL),
        ))
        .map_err(err)?;
        let (_, rest) = root.split_vertically(TOP);
        let (plot, legend) = rest.split_vertically(plot_h);
        let (lo, hi) = x_range(lines);
        let mut chart = ChartBuilder::on(&plot)
            .margin_right(RIGHT)
            .set_label_area_size(LabelAreaPosition::Left, LABELS)
            .set_label_area_size(LabelAreaPosition::Bottom, AXIS)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..n as f64)
            .map_err(err)?;
        let axis_format = |x: &f64| tick(*x);
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_labels(12)
            .x_label_formatter(&axis_format)
            .x_desc("QP gain (log scale): how many times better QPs do than kernel sockets")
            .label_style(font(SMALL))
            .axis_desc_style(font(SMALL))
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .bold_line_style(RGBColor(0xd0, 0xd0, 0xd0))
            .draw()
            .map_err(err)?;
        // Parity: left of it sockets do better.
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(1.0, 0.0), (1.0, n as f64)],
                BLACK.stroke_width(2),
            )))
            .map_err(err)?;
        let label_font = font(TEXT).pos(Pos::new(HPos::Right, VPos::Center));
        let value_font = font(SMALL).pos(Pos::new(HPos::Left, VPos::Center));
        for (i, l) in lines.iter().enumerate() {
            // The first line on top.
            let y = (n - i) as f64 - 0.5;
            let (lx, ly) = chart.backend_coord(&(lo, y));
            root.draw(&Text::new(l.what.clone(), (lx - 8, ly), label_font.clone()))
                .map_err(err)?;
            let Some(gain) = l.gain() else {
                let (x, y) = chart.backend_coord(&(1.0, y));
                root.draw(&Text::new(
                    "no ratio (a median is 0)",
                    (x + 6, y),
                    value_font.clone(),
                ))
                .map_err(err)?;
                continue;
            };
            let colour = Kind::of(&l.what).colour();
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(1.0, y - 0.35), (gain, y + 0.35)],
                    colour.filled(),
                )))
                .map_err(err)?;
            let mut end = gain;
            if let Some(s) = l.gain_spread().filter(|_| rounds > 1) {
                let c = 0.22;
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![
                            (s.min, y - c),
                            (s.min, y + c),
                            (s.min, y),
                            (s.max, y),
                            (s.max, y - c),
                            (s.max, y + c),
                        ],
                        BLACK.stroke_width(1),
                    )))
                    .map_err(err)?;
                end = end.max(s.max);
            }
            let (x, y) = chart.backend_coord(&(end, y));
            root.draw(&Text::new(
                fmt_gain(Some(gain)),
                (x + 5, y),
                value_font.clone(),
            ))
            .map_err(err)?;
        }
        // The legend: a swatch and a name per kind the chart has.
        let mut x = 12;
        for k in Kind::ALL {
            if !lines.iter().any(|l| Kind::of(&l.what) == k) {
                continue;
            }
            legend
                .draw(&Rectangle::new(
                    [(x, 12), (x + 14, 26)],
                    k.colour().filled(),
                ))
                .map_err(err)?;
            legend
                .draw(&Text::new(
                    k.name(),
                    (x + 20, 19),
                    font(SMALL).pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(err)?;
            x += 40 + (k.name().chars().count() as i32) * 7;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{same_as_saved, saved_results};
    use super::super::saved::SavedRun;
    use super::*;
    use std::collections::BTreeMap;

    /// One element of an SVG: its name, attributes and text.
    #[derive(Debug)]
    struct Element {
        name: String,
        attrs: BTreeMap<String, String>,
        text: String,
    }

    fn unescape(s: &str) -> String {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&apos;", "'")
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
    }

    /// The elements of `svg` in order, checking that every tag is closed where it should
    /// be and that one `svg` element holds them all.
    fn parse(svg: &str) -> Vec<Element> {
        let mut out: Vec<Element> = Vec::new();
        let mut open: Vec<(String, usize)> = Vec::new();
        let mut rest = svg.trim();
        assert!(
            rest.starts_with("<svg ") && rest.ends_with("</svg>"),
            "not one svg"
        );
        while let Some(lt) = rest.find('<') {
            let text = &rest[..lt];
            if let Some((_, i)) = open.last() {
                out[*i].text += text.trim();
            } else {
                assert!(text.trim().is_empty(), "text outside the svg: {text:?}");
            }
            let gt = rest[lt..].find('>').expect("an unclosed tag") + lt;
            let tag = &rest[lt + 1..gt];
            rest = &rest[gt + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let (o, _) = open.pop().expect("a close without an open");
                assert_eq!(o, name, "tags cross");
                continue;
            }
            let closed = tag.ends_with('/');
            let tag = tag.trim_end_matches('/');
            let (name, mut a) = tag.split_once(' ').unwrap_or((tag, ""));
            let mut attrs = BTreeMap::new();
            while let Some((k, v)) = a.split_once("=\"") {
                let (value, after) = v.split_once('"').expect("an unclosed attribute");
                attrs.insert(k.trim().to_string(), unescape(value));
                a = after;
            }
            assert!(a.trim().is_empty(), "a stray attribute in <{tag}>");
            assert!(
                open.len() == 1 || (open.is_empty() && out.is_empty()),
                "nested <{name}>"
            );
            out.push(Element {
                name: name.to_string(),
                attrs,
                text: String::new(),
            });
            if !closed {
                open.push((name.to_string(), out.len() - 1));
            }
        }
        assert!(
            open.is_empty() && rest.trim().is_empty(),
            "unclosed elements"
        );
        for e in &mut out {
            e.text = unescape(&e.text);
        }
        out
    }

    fn num(e: &Element, k: &str) -> f64 {
        e.attrs[k].parse().unwrap()
    }

    fn hex(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    #[test]
    fn every_line_has_its_label_and_one_bar_at_its_height() {
        let run = SavedRun::from_json(&saved_results()).unwrap();
        let svg = gain_chart(&run.info, &run.lines).unwrap();
        // The same results draw the same bytes (nothing of the moment goes in).
        assert_eq!(gain_chart(&run.info, &run.lines).unwrap(), svg);
        same_as_saved("bench-report.svg", &svg);
        let elements = parse(&svg);
        let texts: Vec<&Element> = elements.iter().filter(|e| e.name == "text").collect();
        let bars: Vec<&Element> = elements
            .iter()
            .filter(|e| e.name == "rect" && num(e, "height") < ROW as f64)
            .collect();
        let mut with_gain = 0;
        for l in &run.lines {
            let labels: Vec<&&Element> = texts.iter().filter(|t| t.text == l.what).collect();
            assert_eq!(labels.len(), 1, "{}", l.what);
            let y = num(labels[0], "y");
            let here: Vec<&&Element> = bars
                .iter()
                .filter(|b| (num(b, "y") + num(b, "height") / 2.0 - y).abs() <= 1.0)
                .collect();
            let value = texts
                .iter()
                .find(|t| num(t, "y") == y && t.attrs["text-anchor"] == "start")
                .unwrap_or_else(|| panic!("no value beside {}", l.what));
            match l.gain() {
                Some(g) => {
                    with_gain += 1;
                    assert_eq!(here.len(), 1, "{}", l.what);
                    assert_eq!(here[0].attrs["fill"], hex(Kind::of(&l.what).colour()));
                    assert_eq!(value.text, fmt_gain(Some(g)));
                }
                None => {
                    assert!(here.is_empty(), "{}", l.what);
                    assert!(value.text.starts_with("no ratio"), "{}", l.what);
                }
            }
        }
        // One bar per line with a gain, and a swatch per kind in the legend.
        let kinds = Kind::ALL
            .iter()
            .filter(|k| run.lines.iter().any(|l| Kind::of(&l.what) == **k))
            .count();
        assert_eq!(bars.len(), with_gain + kinds);
        assert!(with_gain > 20);
        // A whisker per line whose rounds have gains.
        let whiskers = elements
            .iter()
            .filter(|e| e.name == "polyline" && e.attrs["points"].split_whitespace().count() == 6)
            .count();
        let spread = run
            .lines
            .iter()
            .filter(|l| l.gain().is_some() && l.gain_spread().is_some())
            .count();
        assert_eq!(whiskers, spread);
        assert!(texts
            .iter()
            .any(|t| t.text.starts_with("2026-11-20 14:05, ./qpip bench")));
    }

    #[test]
    fn kinds_follow_the_lines_names() {
        for (what, kind) in [
            ("UDP ping-pong, round trip p50", Kind::RoundTrip),
            (
                "RDMA Read latency, round trip p50 (qpip vs siw)",
                Kind::RoundTrip,
            ),
            ("TCP bandwidth, 8 KiB messages", Kind::Bandwidth),
            ("bulk a→b, 32 MiB, SHA-256 checked", Kind::Bandwidth),
            ("UDP loss at that rate, 1 KiB datagrams", Kind::Loss),
            ("guest CPU per UDP round trip (a+b)", Kind::Cpu),
            ("guest-wide CPU per TCP 1 KiB message", Kind::Cpu),
            ("UDP overhead, QP: device woken (kick)", Kind::Overhead),
            ("host overhead per TCP message (Table 1)", Kind::Overhead),
        ] {
            assert_eq!(Kind::of(what), kind, "{what}");
        }
        assert_eq!(tick(0.5), "0.5x");
        assert_eq!(tick(100.0), "100x");
    }
}
