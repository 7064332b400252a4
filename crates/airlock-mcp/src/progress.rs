//! MCP progress notifications: a `tools/call` whose `_meta` carries a
//! `progressToken` gets `notifications/progress` for the call's long
//! phases (large snapshots, Git snapshots, a session's wait for its
//! prompt), as the runtime's
//! [`Progress`] hook reports them — at the start and the end of a long
//! phase and at most every 200 ms in between (the runtime's `Meter` bounds
//! the rate, the same as for the terminal bar). Reports are made on the
//! call's thread and sent, in order, by one task on the session's peer;
//! the call's answer waits until they are sent.

use airlock_runtime::progress::{Phase, Progress, ProgressHook, Report, Step};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::task::JoinHandle;

/// How long the answer waits for the last notifications to be sent.
const FLUSH: Duration = Duration::from_secs(5);

/// Hands each report of one call to the sending task.
#[derive(Debug)]
struct Notifier {
    token: ProgressToken,
    send: UnboundedSender<ProgressNotificationParam>,
}

impl Progress for Notifier {
    fn report(&self, report: &Report) {
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        let label = report.phase.label();
        let message = match (report.step, report.total) {
            // A session's wait counts its program's output, not file bytes.
            (Step::End, _) if report.phase == Phase::SessionPrompt => format!("{label}: done"),
            (_, _) if report.phase == Phase::SessionPrompt => format!("{label}: {} bytes of output", report.done),
            (Step::End, _) if report.phase == Phase::UpstreamAnswer => format!("{label}: done"),
            (_, _) if report.phase == Phase::UpstreamAnswer => format!("{label}: still waiting"),
            (Step::Start, _) => format!("{label}: started"),
            (Step::End, _) => format!("{label}: done, {:.1} MiB", mib(report.done)),
            (Step::Advance, Some(total)) => format!("{label}: {:.1} of {:.1} MiB", mib(report.done), mib(total)),
            (Step::Advance, None) => format!("{label}: {:.1} MiB", mib(report.done)),
        };
        let mut param = ProgressNotificationParam::new(self.token.clone(), report.done as f64).with_message(message);
        if let Some(total) = report.total {
            param = param.with_total(total as f64);
        }
        // The session may be gone; the call goes on regardless.
        let _ = self.send.send(param);
    }
}

/// For a request that asked for progress (`_meta.progressToken`): the
/// hook for its call, and the task sending its notifications (see
/// [`flushed`]).
pub(crate) fn for_request(context: &RequestContext<RoleServer>) -> Option<(ProgressHook, JoinHandle<()>)> {
    let token = context.meta.get_progress_token()?;
    let (send, mut reports) = unbounded_channel::<ProgressNotificationParam>();
    let peer = context.peer.clone();
    let sender = tokio::spawn(async move {
        while let Some(param) = reports.recv().await {
            if peer.notify_progress(param).await.is_err() {
                break;
            }
        }
    });
    Some((Arc::new(Notifier { token, send }), sender))
}

/// Waits (at most 5 s) until every report of a call is sent, so they
/// precede its answer; the call's hook must be gone (dropped with its
/// request) for the task to end.
pub(crate) async fn flushed(sender: JoinHandle<()>) {
    let _ = tokio::time::timeout(FLUSH, sender).await;
}
