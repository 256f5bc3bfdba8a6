//! The terminal screen of `efmesh watch`: one screen redrawn in place (crossterm's alternate
//! screen, raw mode for the keys), restored on exit (and on a panic).
//!
//! [`render`] turns a [`Report`] into the screen's lines and knows nothing of terminals, so it
//! is tested as text. Colours follow the plan's categories and errors; with `NO_COLOR` set
//! (non-empty) no colour or style escape is written at all.

use super::report::{Applied, Problem, Report, test_counts};
use super::{Msg, Output};
use crate::plan::Change;
use crate::preview::Preview;
use anyhow::Result;
use crossterm::style::Stylize;
use crossterm::{cursor, event, execute, queue, terminal};
use std::io::Write;
use std::sync::mpsc::Sender;
use std::time::Instant;

/// At most this many backfill ranges are listed per model.
const MAX_RANGES: usize = 3;
/// At most this many changed models are named on the "changed since the last save" line.
const MAX_CHANGED: usize = 12;

/// How a piece of a line is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    Dim,
    Bold,
    Red,
    Green,
    Yellow,
    Cyan,
    Magenta,
    Status,
}

/// A line of the screen: styled pieces.
#[derive(Debug, Default, Clone)]
struct Line(Vec<(String, Style)>);

impl Line {
    fn plain(s: impl Into<String>) -> Line {
        Line(vec![(s.into(), Style::Plain)])
    }

    fn push(mut self, s: impl Into<String>, style: Style) -> Line {
        self.0.push((s.into(), style));
        self
    }

    /// The line cut to `width` characters, with escapes when `color`.
    fn paint(&self, width: usize, color: bool) -> String {
        let mut left = width;
        let mut out = String::new();
        for (text, style) in &self.0 {
            if left == 0 {
                break;
            }
            let piece: String = text.chars().take(left).collect();
            left -= piece.chars().count();
            out.push_str(&if color { styled(piece, *style) } else { piece });
        }
        out
    }
}

fn styled(s: String, style: Style) -> String {
    match style {
        Style::Plain => s,
        Style::Dim => s.dim().to_string(),
        Style::Bold => s.bold().to_string(),
        Style::Red => s.red().to_string(),
        Style::Green => s.green().to_string(),
        Style::Yellow => s.yellow().to_string(),
        Style::Cyan => s.cyan().to_string(),
        Style::Magenta => s.magenta().to_string(),
        Style::Status => s.reverse().to_string(),
    }
}

fn change_style(c: Change) -> Style {
    match c {
        Change::Added => Style::Green,
        Change::Breaking | Change::Removed => Style::Red,
        Change::NonBreaking | Change::ForwardOnly => Style::Yellow,
        Change::Indirect => Style::Cyan,
        Change::Metadata => Style::Magenta,
        Change::Unchanged => Style::Dim,
    }
}

/// The screen for `report` (re-planned in `replan_ms`), `height` lines of at most `width`
/// characters: the body, cut when too long, and the status line last.
pub fn render(report: &Report, replan_ms: f64, width: usize, height: usize, color: bool) -> Vec<String> {
    let body = body(report);
    let room = height.saturating_sub(1);
    let mut lines: Vec<String> = Vec::with_capacity(height);
    if body.len() > room {
        let keep = room.saturating_sub(1);
        lines.extend(body[..keep].iter().map(|l| l.paint(width, color)));
        lines.push(Line::plain(format!("… {} more lines (a larger terminal shows them)", body.len() - keep)).paint(width, color));
    } else {
        lines.extend(body.iter().map(|l| l.paint(width, color)));
        lines.resize(room, String::new());
    }
    let models = report.models.map_or_else(|| "project not loaded".to_string(), |n| format!("{n} model{}", if n == 1 { "" } else { "s" }));
    let status = format!(" efmesh watch · {} · {models} · re-planned in {replan_ms:.1} ms · {} · q quit · r reload all", report.env, report.at);
    let padded = format!("{status:<width$}");
    lines.push(Line(vec![(padded, Style::Status)]).paint(width, color));
    lines
}

/// The lines above the status line.
fn body(r: &Report) -> Vec<Line> {
    let mut out = Vec::new();
    if !r.changed_files.is_empty() {
        let files: Vec<String> = r.changed_files.iter().map(|f| f.display().to_string()).collect();
        let mut l = Line::plain("saved: ").push(files.join(", "), Style::Bold);
        if r.config_changed {
            l = l.push("  (configuration re-read)", Style::Dim);
        }
        if !r.evaluated.is_empty() {
            l = l.push(format!("  · {} file{} evaluated", r.evaluated.len(), if r.evaluated.len() == 1 { "" } else { "s" }), Style::Dim);
        }
        out.push(l);
        // Unknown while the project does not load.
        if r.models.is_some() && r.changed_models.is_empty() {
            out.push(Line(vec![("no model changed since the last save".into(), Style::Dim)]));
        } else if r.models.is_some() {
            let mut l = Line::plain("changed since the last save: ");
            for (i, name) in r.changed_models.iter().take(MAX_CHANGED).enumerate() {
                if i > 0 {
                    l = l.push(", ", Style::Plain);
                }
                l = l.push(name.to_string(), Style::Bold);
                if let Some(c) = r.plan.as_ref().and_then(|p| p.action(name)).map(|a| a.change) {
                    l = l.push(format!(" ({})", c.as_str()), change_style(c));
                }
            }
            if r.changed_models.len() > MAX_CHANGED {
                l = l.push(format!(" and {} more", r.changed_models.len() - MAX_CHANGED), Style::Plain);
            }
            out.push(l);
        }
        out.push(Line::default());
    }
    for p in &r.errors {
        problem_lines(r, p, &mut out);
    }
    if !r.errors.is_empty() {
        out.push(Line::default());
    }
    if let Some(plan) = &r.plan {
        let counts = plan.counts().iter().map(|(k, v)| format!("{v} {k}")).collect::<Vec<_>>().join(", ");
        out.push(Line::plain("plan for ").push(format!("`{}`", plan.env), Style::Bold).push(format!(" ({counts})"), Style::Plain));
        let work: Vec<_> = plan.actions.iter().filter(|a| a.has_work()).collect();
        let width = work.iter().map(|a| a.name.to_string().chars().count()).max().unwrap_or(0);
        let kwidth = work.iter().map(|a| a.kind.len()).max().unwrap_or(0);
        for a in &work {
            let mut notes = vec![a.change.as_str().to_string()];
            if a.build {
                notes.push("build".into());
            }
            if a.reused_from.is_some() {
                notes.push("physical table reused".into());
            }
            if a.repair.is_some() {
                notes.push("repair".into());
            }
            if a.intervals > 0 {
                notes.push(format!("backfill {} interval{}", a.intervals, if a.intervals == 1 { "" } else { "s" }));
            }
            out.push(
                Line::plain("  ")
                    .push(format!("{} {:width$}", a.change.mark(), a.name.to_string()), change_style(a.change))
                    .push(format!("  {:kwidth$}  ", a.kind), Style::Dim)
                    .push(notes.join(", "), Style::Plain),
            );
            for i in a.backfill.iter().take(MAX_RANGES) {
                out.push(Line(vec![(format!("      [{}, {})", crate::core::interval::to_iso(i.start), crate::core::interval::to_iso(i.end)), Style::Dim)]));
            }
            if a.backfill.len() > MAX_RANGES {
                out.push(Line(vec![(format!("      … {} more ranges", a.backfill.len() - MAX_RANGES), Style::Dim)]));
            }
        }
        if !plan.has_changes {
            out.push(Line(vec![("  no changes: the environment serves the project as it is".into(), Style::Dim)]));
        }
    }
    for p in &r.previews {
        out.push(Line::default());
        preview_lines(&r.env, p, &mut out);
    }
    if r.previews_omitted > 0 {
        out.push(Line(vec![(format!("({} more changed models not previewed)", r.previews_omitted), Style::Dim)]));
    }
    if let Some(p) = &r.pending {
        out.push(Line::default());
        out.push(Line(vec![(format!("{p} …"), Style::Dim)]));
    }
    match &r.applied {
        Some(Applied::Done(a)) => {
            out.push(Line::default());
            let built = if a.built.is_empty() {
                "nothing built (view swap)".to_string()
            } else {
                format!("built {}", a.built.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
            };
            let audits = if a.audits.0.is_empty() { String::new() } else { format!(", {} audits run", a.audits.0.len()) };
            out.push(Line::plain("applied to ").push(format!("`{}`", r.env), Style::Bold).push(format!(": {built}{audits}; promoted"), Style::Green));
        }
        Some(Applied::Failed(_)) => {
            out.push(Line::default());
            out.push(Line(vec![(format!("not applied to `{}` (see the error above)", r.env), Style::Red)]));
        }
        None => {}
    }
    if let Some(tests) = r.tests.as_ref().filter(|t| !t.is_empty()) {
        let (passed, failed, errors) = test_counts(tests);
        out.push(Line::default());
        let style = if failed + errors == 0 { Style::Green } else { Style::Red };
        out.push(Line(vec![(format!("tests: {passed} passed, {failed} failed, {errors} errors"), style)]));
        for t in tests.iter().filter(|t| t.status != crate::unittest::Status::Passed) {
            out.push(Line::plain("  ✗ ").push(format!("{} ({})", t.name, t.model), Style::Bold).push(format!("  {}", t.location), Style::Dim));
            for p in &t.problems {
                out.push(Line(vec![(format!("      {p}"), Style::Red)]));
            }
            if !t.diff.is_empty() {
                out.push(Line::plain(format!("      {} missing, {} unexpected rows", t.diff.missing.len(), t.diff.unexpected.len())));
            }
        }
    }
    out
}

/// An error, then its source: the line with one line of context on each side.
fn problem_lines(r: &Report, p: &Problem, out: &mut Vec<Line>) {
    let text = p.text();
    let mut first = true;
    for line in text.lines() {
        if first {
            out.push(Line::plain("").push(format!("{} error: ", p.kind), Style::Red).push(line.to_string(), Style::Bold));
            first = false;
        } else {
            out.push(Line::plain(format!("  {line}")));
        }
    }
    let (Some(file), Some(line)) = (&p.file, p.line) else { return };
    let path = if file.is_absolute() { file.clone() } else { r.root.join(file) };
    let Ok(source) = fs_err::read_to_string(&path) else { return };
    let lines: Vec<&str> = source.lines().collect();
    let at = line as usize;
    let from = at.saturating_sub(1).max(1);
    let to = (at + 1).min(lines.len());
    let nwidth = to.to_string().len();
    for n in from..=to {
        let Some(src) = lines.get(n - 1) else { continue };
        let marker = if n == at { "> " } else { "  " };
        let style = if n == at { Style::Plain } else { Style::Dim };
        out.push(Line::plain("   ").push(format!("{marker}{n:>nwidth$} │ "), Style::Dim).push(src.replace('\t', "    "), style));
    }
}

/// A preview: the comparison with what the environment serves, then the first rows as a table
/// (both as `efmesh preview` prints them).
fn preview_lines(env: &str, p: &Preview, out: &mut Vec<Line>) {
    let mut head = Line::plain("preview ").push(p.model.to_string(), Style::Bold);
    if let Some((start, end)) = &p.window {
        head = head.push(format!("  [{start}, {end})"), Style::Dim);
    }
    out.push(head);
    if let Some(e) = &p.error {
        for (i, line) in e.lines().enumerate() {
            out.push(Line(vec![(format!("  {}{line}", if i == 0 { "preview error: " } else { "" }), Style::Red)]));
        }
        return;
    }
    out.push(Line(vec![(format!("  {}", super::super::preview::comparison_text(env, p.comparison.as_ref())), Style::Yellow)]));
    for (i, line) in super::super::preview::table(p).lines().enumerate() {
        out.push(Line(vec![(line.to_string(), if i == 0 { Style::Bold } else { Style::Plain })]));
    }
}

/// True when colours are wanted: `NO_COLOR` unset or empty (<https://no-color.org>).
pub fn color_wanted() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The terminal in watch mode: alternate screen, raw mode, hidden cursor; restored when dropped.
pub struct Screen {
    last: Option<(Report, f64)>,
    color: bool,
}

fn restore() {
    let _ = execute!(std::io::stdout(), cursor::Show, terminal::LeaveAlternateScreen);
    let _ = terminal::disable_raw_mode();
}

impl Screen {
    /// Takes over the terminal and starts the thread that turns keys into messages on `tx`:
    /// `q` and Ctrl+C quit, `r` reloads every input, a resize redraws.
    ///
    /// # Errors
    /// The terminal cannot be put in raw mode or switched to the alternate screen.
    pub fn start(tx: Sender<Msg>) -> Result<Screen> {
        terminal::enable_raw_mode()?;
        if let Err(e) = execute!(std::io::stdout(), terminal::EnterAlternateScreen, cursor::Hide) {
            restore();
            return Err(e.into());
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        std::thread::spawn(move || {
            use event::{Event, KeyCode, KeyEventKind, KeyModifiers};
            while let Ok(e) = event::read() {
                let msg = match e {
                    Event::Key(k) if k.kind == KeyEventKind::Press => match k.code {
                        KeyCode::Char('q') | KeyCode::Esc => Msg::Quit,
                        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Msg::Quit,
                        KeyCode::Char('r') => Msg::ReloadAll(Instant::now()),
                        _ => continue,
                    },
                    Event::Resize(..) => Msg::Redraw,
                    _ => continue,
                };
                if tx.send(msg).is_err() {
                    break;
                }
            }
        });
        Ok(Screen { last: None, color: color_wanted() })
    }

    fn draw(&self) -> Result<()> {
        let Some((report, ms)) = &self.last else { return Ok(()) };
        self.draw_report(report, *ms)
    }

    fn draw_report(&self, report: &Report, ms: f64) -> Result<()> {
        // A pseudo-terminal nobody sized reports 0×0.
        let (w, h) = terminal::size().ok().filter(|(w, h)| *w > 0 && *h > 0).unwrap_or((80, 24));
        let lines = render(report, ms, usize::from(w), usize::from(h), self.color);
        let mut out = std::io::stdout().lock();
        queue!(out, terminal::BeginSynchronizedUpdate, cursor::MoveTo(0, 0), terminal::Clear(terminal::ClearType::All))?;
        for (i, l) in lines.iter().enumerate() {
            queue!(out, cursor::MoveTo(0, u16::try_from(i).unwrap_or(u16::MAX)), crossterm::style::Print(l))?;
        }
        queue!(out, terminal::EndSynchronizedUpdate)?;
        out.flush()?;
        Ok(())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

impl Output for Screen {
    fn show(&mut self, report: Report, since: Instant) -> Result<bool> {
        let ms = since.elapsed().as_secs_f64() * 1000.0;
        self.last = Some((report, ms));
        self.draw()?;
        Ok(true)
    }

    fn redraw(&mut self) -> Result<()> {
        self.draw()
    }

    fn show_early(&mut self, report: &Report, since: Instant) -> Result<()> {
        self.draw_report(report, since.elapsed().as_secs_f64() * 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::report::Event;
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn an_error_shows_its_source_line_with_context_and_no_escapes_without_colour() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs_err::create_dir_all(dir.path().join("models")).expect("mkdir");
        fs_err::write(dir.path().join("models/a.lua"), "line one\nline two\nline three\nline four\n").expect("write");
        let mut r = Report::new(Event::Replan, "dev", dir.path());
        r.changed_files = vec![PathBuf::from("models/a.lua")];
        r.errors.push(Problem {
            kind: "load",
            file: Some(PathBuf::from("models/a.lua")),
            line: Some(3),
            model: None,
            message: "unknown model `raw.ordrs`".into(),
            hint: Some("did you mean `raw.orders`?".into()),
        });
        let lines = render(&r, 4.2, 100, 30, false);
        assert_eq!(lines.len(), 30);
        let text = lines.join("\n");
        assert!(text.contains("models/a.lua:3: unknown model `raw.ordrs`"), "{text}");
        assert!(text.contains("hint: did you mean `raw.orders`?"), "{text}");
        for (n, src) in [(2, "line two"), (3, "line three"), (4, "line four")] {
            assert!(lines.iter().any(|l| l.contains(&format!("{n} │ {src}"))), "line {n} missing:\n{text}");
        }
        assert!(!text.contains("line one"), "{text}");
        assert!(lines.iter().any(|l| l.contains("> 3 │ line three")), "{text}");
        assert!(!text.contains('\u{1b}'), "escape codes without colour:\n{text}");
        assert!(lines[29].contains("dev") && lines[29].contains("4.2 ms"), "{}", lines[29]);
        let colored = render(&r, 4.2, 100, 30, true).join("\n");
        assert!(colored.contains('\u{1b}'), "no escapes with colour");
    }

    #[test]
    fn a_long_body_is_cut_to_the_terminal_keeping_the_status_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = Report::new(Event::Start, "dev", dir.path());
        for i in 0..50 {
            r.errors.push(Problem { kind: "check", file: None, line: None, model: None, message: format!("problem {i}"), hint: None });
        }
        let lines = render(&r, 1.0, 40, 10, false);
        assert_eq!(lines.len(), 10);
        assert!(lines[8].starts_with("… "), "{lines:?}");
        assert!(lines[9].contains("efmesh watch"), "{lines:?}");
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{lines:?}");
    }

    #[test]
    fn a_preview_shows_the_comparison_then_the_rows_and_an_error_in_place_of_them() {
        use crate::core::ModelName;
        use crate::preview::Comparison;
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = Report::new(Event::Replan, "dev", dir.path());
        let comparison = Comparison { added: vec!["cents".into()], rows_now: 3, rows_new: 3, scope: "all", ..Comparison::default() };
        r.previews.push(Preview {
            model: ModelName::parse("raw.orders").expect("name"),
            columns: vec![("id".into(), "INTEGER".into()), ("cents".into(), "INTEGER".into())],
            rows: vec![vec![Some("1".into()), Some("500".into())], vec![Some("2".into()), None]],
            window: None,
            comparison: Some(comparison),
            error: None,
        });
        r.previews.push(Preview {
            model: ModelName::parse("mart.bad").expect("name"),
            columns: Vec::new(),
            rows: Vec::new(),
            window: None,
            comparison: None,
            error: Some("models/bad.lua:3: model `mart.bad`: Binder Error: column `nope` not found".into()),
        });
        let lines = render(&r, 1.0, 100, 30, false);
        let at = |needle: &str| lines.iter().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle:?} missing:\n{}", lines.join("\n")));
        assert!(at("preview raw.orders") < at("added cents"));
        assert!(at("added cents") < at("id │ cents"));
        assert!(at("id │ cents") < at("2  │ NULL"));
        assert!(at("preview mart.bad") < at("preview error: models/bad.lua:3"));
    }
}
