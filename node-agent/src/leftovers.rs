//! Children that outlived a node agent which had no chance to stop them (`kill -9`,
//! the OOM killer, a crash).
//!
//! Programs on pipes keep running when their node agent dies, and nothing could reach
//! them again: a new node agent knows nothing of them, and a controller that starts
//! them anew would run them twice. So every child is noted in the data directory
//! while it runs (its pid and start time, which tell it apart from a later process
//! that reuses the pid), and a node agent starting on that data directory kills
//! whatever is still there from the one before.

use std::fs;
use std::path::PathBuf;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::process::{Scope, groups_of, live_members, signal_groups};

#[derive(Debug, Clone)]
pub struct ChildRegistry {
    dir: PathBuf,
}

/// The start time of a process (in clock ticks since boot), from /proc.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    // Field 22 of stat; the 20th after the command name.
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl ChildRegistry {
    pub fn open(dir: PathBuf) -> std::io::Result<Self> {
        fs::create_dir_all(&dir)?;
        Ok(ChildRegistry { dir })
    }

    /// Notes a running child: the leader of its own group (`session` for a terminal).
    pub fn record(&self, pid: u32, session: bool) {
        let Some(started) = start_time(pid) else { return };
        let scope = if session { "session" } else { "group" };
        if let Err(e) = fs::write(self.dir.join(pid.to_string()), format!("{started} {scope}\n")) {
            tracing::warn!(pid, error = %e, "cannot note the child; it would outlive a crash of the node agent");
        }
    }

    pub fn forget(&self, pid: u32) {
        let _ = fs::remove_file(self.dir.join(pid.to_string()));
    }

    /// Kills what a previous node agent on this data directory left running; returns
    /// how many of its children were still there. Blocking: reads /proc.
    pub fn kill_leftovers(&self) -> usize {
        let Ok(entries) = fs::read_dir(&self.dir) else { return 0 };
        let mut killed = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            let note = fs::read_to_string(&path).unwrap_or_default();
            let _ = fs::remove_file(&path);
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let mut fields = note.split_whitespace();
            let (Some(started), Some(scope)) = (fields.next().and_then(|s| s.parse::<u64>().ok()), fields.next()) else {
                continue;
            };
            // Gone, or the pid now belongs to someone else.
            if start_time(pid) != Some(started) {
                continue;
            }
            let leader = pid as i32;
            let scope = if scope == "session" { Scope::Session(leader) } else { Scope::Group(leader) };
            let mut groups = groups_of(&live_members(scope));
            if !groups.contains(&leader) {
                groups.push(leader);
            }
            signal_groups(&groups, Signal::SIGKILL);
            let _ = kill(Pid::from_raw(leader), Signal::SIGKILL);
            tracing::warn!(pid, "killed a process left running by a previous node agent on this data directory");
            killed += 1;
        }
        killed
    }
}
