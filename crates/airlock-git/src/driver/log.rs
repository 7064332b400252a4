//! `git_log`: commits reachable from HEAD, newest commit time first.

use crate::answer::{Commit, LogAnswer, Signature};
use crate::error::GitError;
use crate::query::DEFAULT_LOG_COUNT;

fn signature(s: gix::actor::SignatureRef<'_>) -> Result<Signature, GitError> {
    let time = s.time().map_err(GitError::git("a commit's time does not parse"))?;
    Ok(Signature { name: s.name.to_string(), email: s.email.to_string(), time: time.seconds, offset: time.offset })
}

/// The log answer.
pub(crate) fn log(repo: &gix::Repository, max_count: Option<u32>) -> Result<LogAnswer, GitError> {
    let head = super::status::head(repo)?;
    let max = max_count.unwrap_or(DEFAULT_LOG_COUNT) as usize;
    let mut commits = Vec::new();
    let mut truncated = false;
    if let Some(tip) = &head.commit {
        let tip = gix::ObjectId::from_hex(tip.as_bytes()).map_err(GitError::git("HEAD"))?;
        let walk = repo
            .rev_walk([tip])
            .sorting(gix::revision::walk::Sorting::ByCommitTime(
                gix::traverse::commit::simple::CommitTimeOrder::NewestFirst,
            ))
            .all()
            .map_err(GitError::git("walking the history"))?;
        for info in walk {
            let info = info.map_err(GitError::git("walking the history"))?;
            if commits.len() == max {
                truncated = true;
                break;
            }
            let commit = info.object().map_err(GitError::git("reading a commit"))?;
            let message = commit.message().map_err(GitError::git("reading a commit message"))?;
            commits.push(Commit {
                id: info.id.to_string(),
                parents: commit.parent_ids().map(|p| p.to_string()).collect(),
                author: signature(commit.author().map_err(GitError::git("reading an author"))?)?,
                committer: signature(commit.committer().map_err(GitError::git("reading a committer"))?)?,
                summary: message.summary().to_string(),
            });
        }
    }
    Ok(LogAnswer { head, commits, truncated })
}
