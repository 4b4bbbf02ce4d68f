//! A one-line progress bar on stderr for long CLI commands (export, import). Drawn only when
//! stderr is a terminal and the user did not ask for quiet, so logs and scripts that capture
//! stderr get one final line instead of carriage-return noise.

use std::cell::Cell;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Redraw at most this often.
const REDRAW: Duration = Duration::from_millis(100);
const WIDTH: usize = 30;

pub struct Bar {
    visible: bool,
    started: Instant,
    last: Cell<Option<Instant>>,
    /// Whether the bar is on screen (so other output must clear it first).
    drawn: Cell<bool>,
}

impl Bar {
    /// A bar shown on a terminal unless `quiet`.
    pub(crate) fn new(quiet: bool) -> Bar {
        Bar {
            visible: !quiet && std::io::stderr().is_terminal(),
            started: Instant::now(),
            last: Cell::new(None),
            drawn: Cell::new(false),
        }
    }

    /// Seconds since the bar was created.
    pub(crate) fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Draw `done` of `total` (a spinner-less count when the total is unknown) and a detail.
    pub(crate) fn draw(&self, done: u64, total: Option<u64>, detail: &str) {
        if !self.visible {
            return;
        }
        if self.last.get().is_some_and(|t| t.elapsed() < REDRAW) {
            return;
        }
        self.last.set(Some(Instant::now()));
        let rate = done as f64 / self.elapsed().max(1e-3);
        let line = match total {
            Some(total) => {
                let frac = (done as f64 / total.max(1) as f64).min(1.0);
                let filled = ((frac * WIDTH as f64) as usize).min(WIDTH);
                format!(
                    "[{}{}] {:5.1}%  {done}/{total}  {detail}  {rate:.0}/s",
                    "#".repeat(filled),
                    "-".repeat(WIDTH - filled),
                    frac * 100.0
                )
            }
            None => format!("{done}  {detail}  {rate:.0}/s"),
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{line}");
        let _ = err.flush();
        self.drawn.set(true);
    }

    /// Print a line on stderr above the bar (the bar is redrawn on the next update).
    pub(crate) fn println(&self, line: &str) {
        self.clear();
        eprintln!("{line}");
    }

    /// Remove the bar and print the final line on stderr (always, even when hidden).
    pub(crate) fn finish(&self, line: &str) {
        self.println(line);
    }

    /// Remove the bar from the screen.
    pub(crate) fn clear(&self) {
        if self.drawn.replace(false) {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.last.set(None);
        }
    }
}
