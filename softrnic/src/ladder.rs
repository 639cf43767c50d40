//! Ladder diagrams: a conversation over time, one row per packet, an arrow from sender to
//! receiver with its opcode, PSN and acknowledgement, and what the analysis says of it beside
//! it. As text for a terminal, and as one self-contained HTML page (an SVG per conversation;
//! a packet opens its field-by-field dissection).

use crate::conversation::{Analysis, Conversation, End, Mark, Packet};
use softrnic_wire::{Syndrome, dissect};
use std::fmt::Write;

/// Width of the arrow column in the text ladder.
const ARROW: usize = 50;

/// What an arrow says: opcode (without `RC_`), PSN in hex, AckReq, and the AETH.
pub fn label(p: &Packet) -> String {
    let Some(f) = p.parsed() else {
        return "malformed".into();
    };
    let r = &f.repr;
    let name = r.bth.opcode.name();
    let mut s = format!(
        "{} {:06x}",
        name.strip_prefix("RC_").unwrap_or(name),
        r.bth.psn
    );
    if r.bth.ack_req {
        s.push_str(" A");
    }
    if let Some(a) = r.ext.aeth {
        match a.syndrome {
            Syndrome::Ack(_) => {
                let _ = write!(s, " ACK msn={}", a.msn);
            }
            Syndrome::Nak(c) => {
                let _ = write!(s, " NAK{}", c.code());
            }
            Syndrome::RnrNak(_) => s.push_str(" RNR"),
            Syndrome::Reserved(b) => {
                let _ = write!(s, " syn={b:#x}");
            }
        }
    }
    s
}

/// How an end is named: its address and QP.
fn end(e: &End) -> String {
    match e.qp {
        Some(qp) => format!("{} QP {qp:#x}", e.ip),
        None => e.ip.clone(),
    }
}

fn title(c: &Conversation) -> String {
    format!("{} ⇄ {}", end(&c.ends[0]), end(&c.ends[1]))
}

/// The text ladder of every conversation.
pub fn text(a: &Analysis) -> String {
    let mut out = String::new();
    for c in &a.conversations {
        let _ = writeln!(out, "{}", title(c));
        let hosts = format!("{:<25}{:>25}", end(&c.ends[0]), end(&c.ends[1]));
        let _ = writeln!(
            out,
            "{:>9}  {:>10}  {}",
            "frame",
            "time ms",
            hosts.trim_end()
        );
        for &(i, rightward) in &c.packets {
            let p = &a.packets[i];
            let l = label(p);
            let body = ARROW - 2;
            // A lost packet's arrow ends in X halfway, one the capture did not see arrive in ?.
            let stop = match (p.lost, p.unseen) {
                (true, _) => Some('X'),
                (_, true) => Some('?'),
                _ => None,
            };
            let arrow = if let Some(stop) = stop {
                if rightward {
                    format!("|{:<w$}|", format!("--- {l} ---{stop}"), w = body + 1)
                } else {
                    format!("|{:>w$}|", format!("{stop}--- {l} ---"), w = body + 1)
                }
            } else if rightward {
                let dashes = body.saturating_sub(l.len() + 6);
                format!("|--- {l} {}>|", "-".repeat(dashes + 1))
            } else {
                let dashes = body.saturating_sub(l.len() + 6);
                format!("|<{} {l} ---|", "-".repeat(dashes + 1))
            };
            let number = match p.arrival {
                Some(n) => format!("{}/{n}", p.number),
                None => p.number.to_string(),
            };
            let notes: Vec<&str> = p.notes.iter().map(|n| n.text.as_str()).collect();
            let line = format!(
                "{number:>9}  {:>10.3}  {arrow}  {}",
                p.at * 1000.0,
                notes.join("; ")
            );
            let _ = writeln!(out, "{}", line.trim_end());
        }
        out.push('\n');
    }
    if a.skipped > 0 {
        let _ = writeln!(out, "({} frames that are not RoCEv2 left out)", a.skipped);
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Colours of the marks, by CSS class.
const STYLE: &str = "
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 2em; }
svg text { font-family: monospace; font-size: 12px; }
.lifeline { stroke: #888; stroke-width: 2; }
.host { font-weight: bold; font-size: 13px; }
.packet line { stroke: #1f5fbf; stroke-width: 1.5; }
.packet polygon { fill: #1f5fbf; }
.packet { cursor: pointer; }
.packet:hover text.label { font-weight: bold; }
.packet.response line { stroke: #2a8a3a; } .packet.response polygon { fill: #2a8a3a; }
.packet.covers line { stroke: #2a8a3a; } .packet.covers polygon { fill: #2a8a3a; }
.packet.lost line { stroke: #c62828; stroke-dasharray: 5 3; }
.packet.unseen line { stroke: #888; stroke-dasharray: 2 3; } text.unseen { fill: #888; font-weight: bold; }
.packet.nak line, .packet.rnr-nak line, .packet.implied-nak line { stroke: #e65100; }
.packet.nak polygon, .packet.rnr-nak polygon, .packet.implied-nak polygon { fill: #e65100; }
.packet.retransmission line, .packet.duplicate line { stroke: #8e24aa; }
.packet.retransmission polygon, .packet.duplicate polygon { fill: #8e24aa; }
.cross { stroke: #c62828; stroke-width: 3; }
text.notes { fill: #444; } text.time { fill: #777; }
.mark-badge { font-weight: bold; }
#fields pre { background: #f6f6f6; border: 1px solid #ddd; padding: 0.8em; font-size: 12px; overflow-x: auto; }
.legend span { display: inline-block; margin-right: 1.2em; }
";

const SCRIPT: &str = "
function show(n) {
  for (const p of document.querySelectorAll('#fields pre')) p.hidden = p.id !== 'frame-' + n;
  const p = document.getElementById('frame-' + n);
  if (p) p.scrollIntoView({block: 'nearest'});
}
";

/// The HTML page: a title, a legend, an SVG per conversation, and each packet's dissection
/// (hidden until its arrow is clicked).
pub fn html(a: &Analysis, name: &str) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>RoCEv2 ladder: {}</title><style>{STYLE}</style></head><body>\n<h1>RoCEv2 ladder: {}</h1>\n",
        escape(name),
        escape(name)
    );
    let _ = writeln!(
        out,
        "<p class=\"legend\">{} packets in {} conversation(s). Click a packet for its fields. \
         <span style=\"color:#1f5fbf\">■ request</span><span style=\"color:#2a8a3a\">■ response, ACK</span>\
         <span style=\"color:#e65100\">■ NAK</span><span style=\"color:#8e24aa\">■ retransmission, duplicate</span>\
         <span style=\"color:#c62828\">✗ lost</span><span style=\"color:#888\">? not seen (capture ends)</span></p>",
        a.packets.len(),
        a.conversations.len()
    );
    for c in &a.conversations {
        conversation_svg(&mut out, a, c);
    }
    out.push_str("<div id=\"fields\">\n");
    for p in &a.packets {
        let mut text = String::new();
        let _ = dissect::dissect_captured(&p.bytes, p.original_len, &mut text);
        let _ = writeln!(
            out,
            "<pre id=\"frame-{}\" hidden>Frame {}\n{}</pre>",
            p.number,
            p.number,
            escape(&text)
        );
    }
    let _ = write!(out, "</div>\n<script>{SCRIPT}</script>\n</body></html>\n");
    out
}

fn conversation_svg(out: &mut String, a: &Analysis, c: &Conversation) {
    const ROW: usize = 30;
    const NOTE_LINE: usize = 15;
    const TOP: usize = 50;
    let (x1, x2, notes_x) = (170usize, 620usize, 640usize);
    // A row is as tall as its notes, one a line.
    let rows: Vec<usize> = c
        .packets
        .iter()
        .map(|&(i, _)| ROW.max(a.packets[i].notes.len() * NOTE_LINE + 8))
        .collect();
    let height = TOP + rows.iter().sum::<usize>() + 20;
    let _ = writeln!(out, "<h2>{}</h2>", escape(&title(c)));
    let _ = writeln!(
        out,
        "<svg class=\"ladder\" xmlns=\"http://www.w3.org/2000/svg\" width=\"1500\" height=\"{height}\" viewBox=\"0 0 1500 {height}\">"
    );
    let _ = writeln!(
        out,
        "<text class=\"host\" x=\"{x1}\" y=\"20\" text-anchor=\"middle\">{}</text><text class=\"host\" x=\"{x2}\" y=\"20\" text-anchor=\"middle\">{}</text>",
        escape(&end(&c.ends[0])),
        escape(&end(&c.ends[1]))
    );
    let _ = writeln!(
        out,
        "<text class=\"time\" x=\"10\" y=\"20\">frame, time ms</text><line class=\"lifeline\" x1=\"{x1}\" y1=\"30\" x2=\"{x1}\" y2=\"{height}\"/><line class=\"lifeline\" x1=\"{x2}\" y1=\"30\" x2=\"{x2}\" y2=\"{height}\"/>"
    );
    let mut y = TOP;
    for (row, &(i, rightward)) in c.packets.iter().enumerate() {
        let p = &a.packets[i];
        if row > 0 {
            y += rows[row - 1];
        }
        let (from, to) = if rightward { (x1, x2) } else { (x2, x1) };
        let mut marks: Vec<Mark> = p.notes.iter().map(|n| n.mark).collect();
        marks.sort();
        marks.dedup();
        let classes: Vec<&str> = marks.iter().map(|m| m.name()).collect();
        let _ = write!(
            out,
            "<g class=\"packet {}\" data-frame=\"{}\" data-marks=\"{}\" onclick=\"show({})\"><title>frame {}</title>",
            classes.join(" "),
            p.number,
            classes.join(" "),
            p.number,
            p.number
        );
        let _ = write!(
            out,
            "<text class=\"time\" x=\"10\" y=\"{}\">{} {:.3}</text>",
            y + 9,
            p.number,
            p.at * 1000.0
        );
        // A slanted arrow: it arrives a little later than it leaves.
        let (end, dy) = if p.lost || p.unseen {
            ((from + to) / 2, 6)
        } else {
            (to, 12)
        };
        let _ = write!(
            out,
            "<line x1=\"{from}\" y1=\"{y}\" x2=\"{end}\" y2=\"{}\"/>",
            y + dy
        );
        if p.lost {
            let (cx, cy) = (end, y + dy);
            let _ = write!(
                out,
                "<line class=\"cross\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/><line class=\"cross\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>",
                cx - 6,
                cy - 6,
                cx + 6,
                cy + 6,
                cx - 6,
                cy + 6,
                cx + 6,
                cy - 6
            );
        } else if p.unseen {
            let _ = write!(
                out,
                "<text class=\"unseen\" x=\"{end}\" y=\"{}\" text-anchor=\"middle\">?</text>",
                y + dy + 4
            );
        } else {
            let (tip, back) = (to as i64, if to > from { -9i64 } else { 9 });
            let ty = (y + dy) as i64;
            let _ = write!(
                out,
                "<polygon points=\"{tip},{ty} {},{} {},{}\"/>",
                tip + back,
                ty - 5,
                tip + back,
                ty + 3
            );
        }
        let _ = write!(
            out,
            "<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            (from + to) / 2,
            y - 3,
            escape(&label(p))
        );
        let _ = write!(
            out,
            "<text class=\"notes\" x=\"{notes_x}\" y=\"{}\">",
            y + 9
        );
        for (k, n) in p.notes.iter().enumerate() {
            let dy = if k == 0 { 0 } else { NOTE_LINE };
            let _ = write!(
                out,
                "<tspan class=\"note {}\" x=\"{notes_x}\" dy=\"{dy}\">{}</tspan>",
                n.mark.name(),
                escape(&n.text)
            );
        }
        let _ = writeln!(out, "</text></g>");
    }
    out.push_str("</svg>\n");
}
