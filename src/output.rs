//! What goes where: data to stdout, everything human to stderr.
//!
//! One process-wide [`Printer`] set up from the global flags. Progress bars
//! are drawn only on a terminal; elsewhere, long work prints plain lines.
//! Under a Jupyter kernel (`!imgctl …` in a notebook cell, [`in_notebook`])
//! stderr is a pty, but what reads it is a notebook's output area: plain
//! lines there too, and tables at their natural width.
//! `NO_COLOR` and `--color never` turn colour off. Tables fit the width of
//! the terminal they go to (or `COLUMNS`): [`table_fit`] says how, and
//! [`fit_table`] / [`drop_columns`] / [`shorten_paths`] do it. Text that came
//! from outside imgctl (a registry, a container, a peer) goes through
//! [`outside`] before it meets a table or a line of a report.
// The one place that prints (lib.rs denies printing everywhere else).
#![allow(clippy::print_stdout, clippy::print_stderr)]
use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Output settings shared by every command.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    /// 0 normal, 1+ more detail (`-v`).
    pub verbose: u8,
    /// Suppress informational lines (`-q`).
    pub quiet: bool,
    /// Whether stderr is a terminal (progress bars, spinners).
    pub interactive: bool,
    /// Whether colour may be used.
    pub color: bool,
}

static PRINTER: OnceLock<Printer> = OnceLock::new();

/// The first failed write to stdout (`/dev/full`, a closed pipe): data that
/// did not arrive. The command's end turns it into exit 1 with one line.
static STDOUT_FAILED: OnceLock<String> = OnceLock::new();

/// Why writing to stdout failed, if it ever did in this process.
pub fn stdout_failure() -> Option<&'static str> {
    STDOUT_FAILED.get().map(String::as_str)
}

/// Writes `bytes` to stdout and flushes; a failure is kept for
/// [`stdout_failure`] (the first one wins).
fn write_stdout(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        let _ = STDOUT_FAILED.set(e.to_string());
    }
}

/// When to colour output (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set.
    #[default]
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Sets up the process-wide printer (first call wins): `verbose` (`-v`
/// count), `quiet` (`-q`) and the colour choice.
pub fn init(verbose: u8, quiet: bool, color: ColorChoice) {
    let terminal = std::io::stderr().is_terminal();
    // A notebook shows colours, but its output area erases no line: no bars.
    let interactive = terminal && !in_notebook();
    let color = match color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => terminal && std::env::var_os(crate::env_vars::NO_COLOR).is_none(),
    };
    let _ = PRINTER.set(Printer {
        verbose,
        quiet,
        interactive,
        color,
    });
}

/// The characters a notebook's output area shows on a line before it wraps
/// the line itself: JupyterLab 4.4 in a 1280-pixel browser window with its
/// file browser open wraps after about 108 (the browser test's screenshot).
/// A table at its natural width (verify's is over 200) wrapped there lost
/// its borders' alignment; fitted to this width, each cell wraps inside its
/// own column instead.
pub const NOTEBOOK_COLUMNS: u16 = 100;

/// Whether imgctl runs under a Jupyter kernel (`JPY_PARENT_PID` set, as
/// jupyter_client sets it for kernels and their children): a notebook cell's
/// `!imgctl …`.
pub fn in_notebook() -> bool {
    std::env::var_os(crate::env_vars::JPY_PARENT_PID).is_some_and(|v| !v.is_empty())
}

/// How the command layer reads an error: its lines (`error: …`, `hint: …`)
/// and its exit status, from its advice tables.
pub type ErrorRenderer = fn(&anyhow::Error) -> (String, crate::error::ExitStatus);

static ERROR_RENDERER: OnceLock<ErrorRenderer> = OnceLock::new();

/// Registers the command layer's [`ErrorRenderer`] (first call wins), before
/// any path that cannot return an error to a command starts: a signal
/// handler, the collective watchdog's thread. Those paths hand [`exit_with`]
/// and [`warn_error`] a typed core error; the words stay the command layer's.
pub fn set_error_renderer(render: ErrorRenderer) {
    let _ = ERROR_RENDERER.set(render);
}

/// Prints `err` as the command layer renders it and ends the process at once
/// with its status ([`crate::sys::process::exit_now`]: no exit handlers).
/// Without a registered renderer: `error: ` and the error's chain, status 1.
pub fn exit_with(err: anyhow::Error) -> ! {
    let (text, status) = match ERROR_RENDERER.get() {
        Some(render) => render(&err),
        None => (
            format!("error: {err:#}\n"),
            crate::error::ExitStatus::Failure,
        ),
    };
    // Written and flushed before the exit.
    printer().stderr_text(text);
    crate::sys::process::exit_now(status)
}

/// Prints `err` as a warning line (`warning: ` and its chain, exactly as
/// given, not wrapped); the run goes on.
pub fn warn_error(err: &anyhow::Error) {
    printer().stderr_text(format!("warning: {err:#}\n"));
}

/// How tables meet stderr: [`table_fit`] with `-v` showing them whole.
pub fn stderr_fit() -> Fit {
    table_fit(Stream::Stderr, printer().verbose > 0)
}

/// The process-wide printer (plain, non-interactive defaults before [`init`]).
pub fn printer() -> Printer {
    *PRINTER.get_or_init(|| Printer {
        verbose: 0,
        quiet: false,
        interactive: false,
        color: false,
    })
}

impl Printer {
    /// An informational line on stderr (hidden by `-q`), wrapped to the
    /// terminal ([`Printer::fit_text`]).
    pub fn info(&self, msg: impl AsRef<str>) {
        if !self.quiet {
            self.stderr_text(format!("{}\n", self.fit_text(msg.as_ref())));
        }
    }
    /// A warning on stderr (always shown), wrapped to the terminal.
    pub fn warn(&self, msg: impl AsRef<str>) {
        let text = self.fit_text(&format!("warning: {}", msg.as_ref()));
        if self.color {
            // Bold yellow, as cargo's.
            let rest = text.strip_prefix("warning").unwrap_or(&text);
            eprintln!("\x1b[1;33mwarning\x1b[0m{rest}");
        } else {
            eprintln!("{text}");
        }
    }
    /// A detail line on stderr, shown with `-v`, wrapped to the terminal.
    pub fn verbose(&self, msg: impl AsRef<str>) {
        if self.verbose > 0 {
            eprintln!("{}", self.fit_text(msg.as_ref()));
        }
    }
    /// `text` as it should meet stderr: on a terminal of known width (its
    /// own, or `COLUMNS`), each line broken between words to fit ([`wrap`]);
    /// unchanged when stderr is not a terminal, so logs and pipes keep one
    /// line per message.
    pub fn fit_text(&self, text: &str) -> String {
        wrap_text(
            text,
            table_width(Stream::Stderr).filter(|_| self.interactive),
        )
    }
    /// `text` on stderr exactly as given (no newline added, not hidden by
    /// `-q`): errors, and blocks that are already laid out.
    pub fn stderr_text(&self, text: impl AsRef<str>) {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text.as_ref().as_bytes());
        let _ = err.flush();
    }
    /// Machine-readable data on stdout, alone, with a newline. A failed
    /// write is not lost: [`stdout_failure`] reports it.
    pub fn data(&self, text: impl AsRef<str>) {
        let mut line = String::with_capacity(text.as_ref().len() + 1);
        line.push_str(text.as_ref());
        line.push('\n');
        write_stdout(line.as_bytes());
    }
    /// `bytes` on stdout exactly as given (no newline added), like [`Printer::data`].
    pub fn data_bytes(&self, bytes: &[u8]) {
        write_stdout(bytes);
    }
    /// Serializes `value` as pretty JSON on stdout.
    pub fn json<T: serde::Serialize>(&self, value: &T) -> anyhow::Result<()> {
        self.data(serde_json::to_string_pretty(value)?);
        Ok(())
    }
    /// A progress bar of `len` steps on a terminal; hidden otherwise (callers
    /// print plain lines through [`Printer::info`] when `!interactive`).
    pub fn progress(&self, len: u64, template: &str) -> ProgressBar {
        if !self.interactive || self.quiet {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar
    }
    /// A spinner with a message on a terminal; hidden otherwise.
    pub fn spinner(&self, msg: impl Into<String>) -> ProgressBar {
        if !self.interactive || self.quiet {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(msg.into());
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    }
}

/// `text` with each of its lines broken between words to fit `width`
/// columns: a continuation line is indented two spaces past its line's own
/// indent, and a word wider than the width (a long path) stands whole on a
/// line of its own, never cut.
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let body = line.trim_start_matches(' ');
        let indent = &line[..line.len() - body.len()];
        let hang = indent.len() + 2;
        out.push_str(indent);
        let mut column = indent.len();
        for (n, word) in body.split(' ').enumerate() {
            let w = word.chars().count();
            if n > 0 && column + 1 + w > width && column > hang {
                out.push('\n');
                out.push_str(&" ".repeat(hang));
                column = hang;
            } else if n > 0 {
                out.push(' ');
                column += 1;
            }
            out.push_str(word);
            column += w;
        }
    }
    out
}

/// The stream a table is printed to: its terminal gives the width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output (data: `imgctl specs`).
    Stdout,
    /// Standard error (human reports: `imgctl verify`, benchmarks).
    Stderr,
}

/// How a table meets the width of the screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// No width known (piped, `COLUMNS` unset): every column, full text, no
    /// wrapping. What scripts and logs get.
    Natural,
    /// Every column and the full text, wrapped to this width (`-v`).
    Wrap(u16),
    /// At most this wide, one line per row: long paths shortened, the least
    /// useful columns dropped, cells cut with `…` (`--json` and `-v` keep
    /// the full text).
    Cut(u16),
}

/// Narrower than this, `COLUMNS` is taken as a mistake and ignored.
const MIN_COLUMNS: u16 = 20;

/// The width a table printed to `stream` must fit: `COLUMNS` when set to a
/// number, else the width of the terminal `stream` is attached to, else
/// `None` (piped: no limit).
pub fn table_width(stream: Stream) -> Option<u16> {
    let columns = std::env::var(crate::env_vars::COLUMNS)
        .ok()
        .and_then(|v| v.trim().parse::<u16>().ok())
        .filter(|n| *n >= MIN_COLUMNS);
    if columns.is_some() {
        return columns;
    }
    // The pty of a notebook cell says 80 columns; the notebook is wider and
    // wraps long lines itself.
    if in_notebook() {
        return None;
    }
    // comfy-table asks the terminal (TIOCGWINSZ through crossterm) when the
    // stream is one.
    let mut probe = comfy_table::Table::new();
    if stream == Stream::Stderr {
        probe.use_stderr();
    }
    probe.width().filter(|w| *w >= MIN_COLUMNS)
}

/// How a table for `stream` fits: [`Fit::Natural`] without a known width,
/// [`Fit::Wrap`] with `full` (the `-v` view), [`Fit::Cut`] otherwise; in a
/// notebook cell (no `COLUMNS`), every cell whole, wrapped inside its column
/// to [`NOTEBOOK_COLUMNS`].
pub fn table_fit(stream: Stream, full: bool) -> Fit {
    if in_notebook() && std::env::var_os(crate::env_vars::COLUMNS).is_none() {
        return Fit::Wrap(NOTEBOOK_COLUMNS);
    }
    match table_width(stream) {
        None => Fit::Natural,
        Some(w) if full => Fit::Wrap(w),
        Some(w) => Fit::Cut(w),
    }
}

/// The width `table` takes unwrapped: its visible columns' widest cells plus
/// padding and one border line per column and one more.
pub fn natural_width(table: &comfy_table::Table) -> usize {
    let widths = table.column_max_content_widths();
    let mut total = 1;
    for column in table.column_iter() {
        if column.is_hidden() {
            continue;
        }
        let content = widths.get(column.index).copied().unwrap_or(0) as usize;
        total += content + column.padding_width() as usize + 1;
    }
    total
}

/// Hides columns of `table`, in the order of `drop_order` (column indices,
/// least useful first), until its natural width fits `width`. Returns the
/// hidden ones.
pub fn drop_columns(
    table: &mut comfy_table::Table,
    width: u16,
    drop_order: &[usize],
) -> Vec<usize> {
    let mut hidden = Vec::new();
    for &i in drop_order {
        if natural_width(table) <= width as usize {
            break;
        }
        if let Some(c) = table.column_mut(i) {
            c.set_constraint(comfy_table::ColumnConstraint::Hidden);
            hidden.push(i);
        }
    }
    hidden
}

/// The header names of the columns [`drop_columns`] left out of `table`
/// (`hidden`, its indices), in the table's order: the command layer says
/// them, so a narrow terminal never loses a column silently (#53 F17).
pub fn dropped_columns(table: &comfy_table::Table, hidden: &[usize]) -> Vec<String> {
    let header: Vec<String> = table
        .header()
        .map(|row| row.cell_iter().map(|c| c.content()).collect())
        .unwrap_or_default();
    let mut shown: Vec<usize> = hidden.to_vec();
    shown.sort_unstable();
    shown
        .into_iter()
        .filter_map(|i| header.get(i).cloned())
        .collect()
}

/// Applies `fit` to `table`: nothing for [`Fit::Natural`], wrapping to the
/// width for [`Fit::Wrap`], and for [`Fit::Cut`] wrapping then cutting every
/// row to one line with `…`. Returns whether text was cut.
pub fn fit_table(table: &mut comfy_table::Table, fit: Fit) -> bool {
    let width = match fit {
        Fit::Natural => return false,
        Fit::Wrap(w) | Fit::Cut(w) => w,
    };
    table
        .set_width(width)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    if !matches!(fit, Fit::Cut(_)) {
        return false;
    }
    let wrapped = table.lines().count();
    table.set_truncation_indicator("…");
    for row in table.row_iter_mut() {
        row.max_height(1);
    }
    table.lines().count() < wrapped
}

/// Word-wraps `text` to `width` columns ([`wrap`]); no change without a
/// width.
pub fn wrap_text(text: &str, width: Option<u16>) -> String {
    match width {
        Some(w) => wrap(text, usize::from(w)),
        None => text.to_string(),
    }
}

/// Whether `c` must not reach a terminal as it is: a control character (C0,
/// DEL, C1: escape sequences, `\r`, `\n`, the bell) or a bidirectional
/// override or isolate (text that shows in another order than it reads).
fn hostile_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Text that came from outside imgctl (a registry's descriptors and
/// annotations, the results read back from a container, a peer's report) as
/// a table cell or a report line may show it: each control character and
/// bidirectional override written as its escape (`\u{1b}`, `\r`, `\n`,
/// `\u{202e}`), everything else as it is. It can then neither set the
/// terminal's title, clear or colour the screen, nor start a row of its own.
/// Every table fed such text uses this one function.
pub fn outside(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(hostile_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else if hostile_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The start of `text`, at most `max` bytes long and cut at a character's
/// boundary: a short form of an id or digest that came from outside (a
/// referrer's `keyid`, a registry's digest), which may hold multi-byte
/// characters where a byte slice `&text[..max]` would panic (#50 M1).
pub fn head(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Longer than this, a word with a `/` in it is shown as `…/` and its last
/// component.
const LONG_PATH: usize = 20;

/// Shortens each long path in `text` to `…/` and its last component
/// (`from /root/.cache/…/lib/libcudnn.so.9` → `from …/libcudnn.so.9`),
/// keeping brackets and punctuation around it. Words without a `/`, and
/// short ones, stay as they are.
pub fn shorten_paths(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let core = word.trim_start_matches(['(', '[', '\'', '"', '`']);
        let core = core.trim_end_matches([')', ']', ',', ';', ':', '\'', '"', '`']);
        let last = core.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        if core.contains('/') && core.chars().count() > LONG_PATH && !last.is_empty() {
            let start = word.len() - word.trim_start_matches(['(', '[', '\'', '"', '`']).len();
            let end = start + core.len();
            out.push_str(&word[..start]);
            out.push_str("…/");
            out.push_str(last);
            out.push_str(&word[end..]);
        } else {
            out.push_str(word);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn head_cuts_at_a_character_never_inside_one() {
        // #50 M1: a referrer's multi-byte keyid panicked `&id[..16]`.
        let id = "ééééééééééééééééé"; // 2 bytes each
        assert_eq!(head(id, 16), "éééééééé");
        assert_eq!(head(id, 15), "ééééééé");
        assert_eq!(head("abc", 16), "abc");
        assert_eq!(head("", 3), "");
        assert_eq!(head("a€", 2), "a");
    }

    use super::*;

    #[test]
    fn wrapped_lines_break_between_words_and_keep_long_words_whole() {
        let note = "note: cu124: there is no cu124 build of torch 2.7.0 (it was published for cu118, cu126, cu128 only)";
        let got = wrap(note, 40);
        assert_eq!(
            got,
            "note: cu124: there is no cu124 build of\n  torch 2.7.0 (it was published for\n  cu118, cu126, cu128 only)"
        );
        assert!(got.lines().all(|l| l.chars().count() <= 40), "{got}");
        // Words survive whole and in order.
        assert_eq!(
            got.split_whitespace().collect::<Vec<_>>(),
            note.split_whitespace().collect::<Vec<_>>()
        );
        // A path wider than the line is never cut; an indented line hangs
        // under its own indent; blank lines and short lines stay as they are.
        let path = "/tmp/a-very-long-folder-name-that-does-not-fit/model.safetensors";
        assert_eq!(
            wrap(&format!("saved {path} ok"), 30),
            format!("saved\n  {path}\n  ok")
        );
        assert_eq!(
            wrap("error: short\n\n    caused by: one two three four", 20),
            "error: short\n\n    caused by: one\n      two three four"
        );
        assert_eq!(wrap("fits", 80), "fits");
    }

    #[test]
    fn long_paths_keep_their_last_component() {
        assert_eq!(
            shorten_paths("9.5.1 (wheel 9.5.1.17) from /root/.cache/imgctl/venv/lib/nvidia/cudnn/lib/libcudnn.so.9"),
            "9.5.1 (wheel 9.5.1.17) from …/libcudnn.so.9"
        );
        assert_eq!(
            shorten_paths("= 9.5.1.17 (torch-2.7.0.dist-info/METADATA)"),
            "= 9.5.1.17 (…/METADATA)"
        );
        // Short ones and units stay.
        assert_eq!(
            shorten_paths("812.4 TFLOP/s from /usr/lib"),
            "812.4 TFLOP/s from /usr/lib"
        );
    }

    #[test]
    fn outside_text_cannot_drive_the_terminal() {
        assert_eq!(outside("plain € text"), "plain € text");
        assert!(matches!(outside("ok"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(
            outside("\x1b]0;pwned\x07\x1b[2J\x1b[31mred\r\n| forged |\u{9b}\u{202e}"),
            "\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{1b}[31mred\\r\\n| forged |\\u{9b}\\u{202e}"
        );
        for c in (0..0x20).chain(0x7f..0xa0).filter_map(char::from_u32) {
            let shown = outside(&c.to_string()).into_owned();
            assert!(!shown.chars().any(|c| c.is_control()), "{c:?} → {shown:?}");
        }
    }

    #[test]
    fn text_wraps_at_words_with_an_indent() {
        let w = wrap_text("note: one two three four five six", Some(14));
        assert_eq!(w, "note: one two\n  three four\n  five six");
        assert!(w.lines().all(|l| l.chars().count() <= 14));
        assert_eq!(wrap_text("a b c", None), "a b c");
    }

    #[test]
    fn columns_drop_in_order_until_the_table_fits() {
        let mut t = comfy_table::Table::new();
        t.set_header(vec!["aaaa", "bbbbbbbbbb", "cc", "dddddddddd"]);
        // 1 + (4+3) + (10+3) + (2+3) + (10+3) = 39.
        assert_eq!(natural_width(&t), 39);
        assert_eq!(drop_columns(&mut t, 30, &[3, 1]), vec![3]);
        assert_eq!(natural_width(&t), 26);
        assert!(drop_columns(&mut t, 40, &[1]).is_empty());
        // In the header's order, whatever the order they were dropped in.
        let mut t = comfy_table::Table::new();
        t.set_header(vec!["aaaa", "bbbbbbbbbb", "cc", "dddddddddd"]);
        let hidden = drop_columns(&mut t, 14, &[3, 1]);
        assert_eq!(
            dropped_columns(&t, &hidden),
            vec!["bbbbbbbbbb", "dddddddddd"]
        );
        assert!(dropped_columns(&t, &[]).is_empty());
    }

    #[test]
    fn cut_rows_take_one_line() {
        let mut t = comfy_table::Table::new();
        t.set_header(vec!["id", "details"]);
        t.add_row(vec![
            "x",
            "a long message that cannot fit in a narrow table at all",
        ]);
        assert!(fit_table(&mut t, Fit::Cut(30)));
        let text = t.to_string();
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.contains('…'), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 30), "{text}");
        let mut n = comfy_table::Table::new();
        n.add_row(vec!["short"]);
        assert!(!fit_table(&mut n, Fit::Natural));
    }
}
