//! Orphans reaped when the node agent is PID 1 of its namespace.
//!
//! A process whose parent exits (`sh -c 'sleep 9 &'`) is handed to PID 1, and when it
//! ends it stays a zombie until PID 1 waits for it. The node agent is PID 1 in a
//! cluster's Pod (its image's entrypoint) and in a managed sandbox (bubblewrap's
//! `--as-pid-1`, which saves bubblewrap's own reaper process: 1.8 MiB a sandbox).
//!
//! Its own children are waited for by whoever spawned them (`process`, the agents'
//! drivers) and must not be taken from them: a stolen exit status is an error there.
//! So on each SIGCHLD it looks through `/proc` for zombies whose parent it is and
//! reaps one only when both hold: no spawner said it is theirs ([`ours`]), and it has
//! been a zombie for a second already (a spawner that did not say so waits at once).

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

/// How long a zombie nobody claimed is left to its parent before it is reaped.
pub const GRACE: Duration = Duration::from_secs(1);

/// Children the node agent spawned and waits for itself.
static OURS: LazyLock<Mutex<HashSet<u32>>> = LazyLock::new(Default::default);

/// Says that `pid`, a child just spawned, is waited for by its spawner.
pub fn ours(pid: Option<u32>) {
    if let Some(pid) = pid {
        OURS.lock().unwrap_or_else(|e| e.into_inner()).insert(pid);
    }
}

/// Starts reaping when this process is PID 1; does nothing otherwise.
pub fn start() {
    if std::process::id() != 1 {
        return;
    }
    let mut child = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
        Ok(signal) => signal,
        Err(error) => {
            tracing::warn!(%error, "cannot watch SIGCHLD: orphans will stay zombies");
            return;
        }
    };
    tokio::spawn(async move {
        let mut first_seen = HashMap::new();
        loop {
            // Waiting zombies are looked at again once their grace is over.
            match first_seen.is_empty() {
                true => {
                    if child.recv().await.is_none() {
                        return;
                    }
                }
                false => {
                    let _ = tokio::time::timeout(GRACE, child.recv()).await;
                }
            }
            let scan = tokio::task::spawn_blocking(move || {
                let claimed = OURS.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let (alive, zombies) = processes(&claimed);
                let reap = {
                    let mut ours = OURS.lock().unwrap_or_else(|e| e.into_inner());
                    // Forgotten once gone: its spawner waited for it.
                    ours.retain(|pid| alive.contains(pid));
                    to_reap(&zombies, &ours, &mut first_seen, Instant::now())
                };
                for pid in reap {
                    let _ = waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG));
                }
                first_seen
            });
            match scan.await {
                Ok(seen) => first_seen = seen,
                Err(_) => first_seen = HashMap::new(),
            }
        }
    });
}

/// The zombies among `zombies` to reap now: those nobody claimed that have been
/// zombies for [`GRACE`]. `first_seen` keeps when each was first seen, and forgets
/// those that are gone.
pub fn to_reap(zombies: &[u32], ours: &HashSet<u32>, first_seen: &mut HashMap<u32, Instant>, now: Instant) -> Vec<u32> {
    first_seen.retain(|pid, _| zombies.contains(pid));
    let mut reap = Vec::new();
    for pid in zombies.iter().filter(|pid| !ours.contains(pid)) {
        let since = *first_seen.entry(*pid).or_insert(now);
        if now.duration_since(since) >= GRACE {
            reap.push(*pid);
        }
    }
    first_seen.retain(|pid, _| !reap.contains(pid));
    reap
}

/// Every pid in `/proc`, and those of this process's children that are zombies
/// (`/proc/PID/stat`: state `Z`, this process its parent). A pid in `claimed` is never
/// reaped here, so its `stat` is not read: with 1,000 processes running, each one's
/// exit (a `SIGCHLD`) read all 1,000.
fn processes(claimed: &HashSet<u32>) -> (HashSet<u32>, Vec<u32>) {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Default::default() };
    let alive: HashSet<u32> = entries.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    let zombies = alive
        .iter()
        .copied()
        .filter(|pid| !claimed.contains(pid))
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
            let mut fields = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default().split_whitespace();
            fields.next() == Some("Z") && fields.next() == Some(me.as_str())
        })
        .collect();
    (alive, zombies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_zombie_nobody_claimed_is_reaped_and_only_after_its_grace() {
        let start = Instant::now();
        let ours = HashSet::from([10]);
        let mut seen = HashMap::new();
        // 10 is a spawner's, 11 an orphan: neither is reaped at first sight.
        assert!(to_reap(&[10, 11], &ours, &mut seen, start).is_empty());
        assert!(to_reap(&[10, 11], &ours, &mut seen, start + GRACE / 2).is_empty());
        // Its grace over, the orphan is reaped; the spawner's never is.
        assert_eq!(to_reap(&[10, 11], &ours, &mut seen, start + GRACE), vec![11]);
        assert!(to_reap(&[10], &ours, &mut seen, start + GRACE * 5).is_empty());
        // One that was waited for meanwhile is forgotten: its pid, used again by a new
        // zombie, gets a grace of its own.
        assert!(to_reap(&[], &ours, &mut seen, start + GRACE * 6).is_empty());
        assert!(to_reap(&[11], &ours, &mut seen, start + GRACE * 7).is_empty());
        assert_eq!(to_reap(&[11], &ours, &mut seen, start + GRACE * 8), vec![11]);
    }

    /// A zombie child is found in /proc, unless a spawner claimed it; either way its pid
    /// is among the living (it still has an entry).
    #[test]
    fn a_zombie_child_is_found_unless_it_is_claimed() {
        use nix::sys::wait::{Id, waitid};
        let mut child = std::process::Command::new("true").spawn().expect("true");
        let pid = child.id();
        // Waits for its exit without reaping it: a zombie from here on.
        waitid(Id::Pid(Pid::from_raw(pid as i32)), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT).expect("waitid");

        let (alive, zombies) = processes(&HashSet::new());
        assert!(alive.contains(&pid));
        assert!(zombies.contains(&pid), "{pid} is a zombie child: {zombies:?}");
        let (alive, zombies) = processes(&HashSet::from([pid]));
        assert!(alive.contains(&pid));
        assert!(!zombies.contains(&pid), "{pid} was claimed");

        child.wait().expect("reaped");
        let (alive, zombies) = processes(&HashSet::new());
        assert!(!alive.contains(&pid) && !zombies.contains(&pid));
    }
}
