//! The terminal's view of a call's long phases: an `indicatif` bar on
//! stderr, only when stderr is a terminal. The runtime decides which phases
//! are long and how often they are reported (`airlock_runtime::progress`);
//! this module only draws what it is told, and clears the bar when the
//! phase ends, so stdout (the answer) and a piped stderr never see it.

use airlock_runtime::progress::{Progress, ProgressHook, Report, Step};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

/// Bars of known total: label, bar, bytes done of total, rate, time left.
const BAR: &str = "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} {eta}";
/// Phases of unknown total (a Git snapshot): label, spinner, bytes done.
const SPINNER: &str = "{msg} {spinner} {bytes} {binary_bytes_per_sec}";

/// Draws the phase in progress on stderr.
#[derive(Debug, Default)]
struct TerminalBar(Mutex<Option<ProgressBar>>);

impl Progress for TerminalBar {
    fn report(&self, report: &Report) {
        // A panic while drawing leaves at worst a stale bar: keep going.
        let mut bar = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match report.step {
            Step::Start => {
                let (new, template) = match report.total {
                    Some(total) => (ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr()), BAR),
                    None => (ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()), SPINNER),
                };
                if let Ok(style) = ProgressStyle::with_template(template) {
                    new.set_style(style.progress_chars("=> "));
                }
                new.set_message(report.phase.label());
                new.set_position(report.done);
                *bar = Some(new);
            }
            Step::Advance => {
                if let Some(bar) = bar.as_ref() {
                    bar.set_position(report.done);
                }
            }
            Step::End => {
                if let Some(bar) = bar.take() {
                    bar.finish_and_clear();
                }
            }
        }
    }
}

/// A progress hook for this process's calls: a bar when stderr is a
/// terminal, else none (nothing is drawn into a pipe or a file).
pub fn terminal_hook() -> Option<ProgressHook> {
    std::io::stderr().is_terminal().then(|| Arc::new(TerminalBar::default()) as ProgressHook)
}
