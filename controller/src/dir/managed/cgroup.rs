//! A managed sandbox's limits (memory, CPU, process count) through cgroups, v1 or v2,
//! in a group of its own under the controller's, and the size of its private `/tmp`.
//! Every quantity is checked before anything is made (a CPU count that overflows is a
//! spec error, not a panic), and a limit that cannot be enforced keeps the sandbox from
//! starting: the groups made for it are removed, and the reason is said.
//!
//! Joining the group happens in the launcher before it execs bubblewrap
//! (`agentplane sandbox-exec`), so nothing of the sandbox ever runs outside it.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentplane_crds::SandboxLimits;

/// A limit the spec asks for that is not a valid one: a spec error, said in the
/// Sandbox's `Ready` condition as it is written here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("pids 0: at least 1 (the node agent is one)")]
    ZeroPids,
    #[error("{what} {text:?}: write a size such as 512Mi or 2Gi")]
    NotASize { what: &'static str, text: String },
    #[error("memory {0:?}: at least 16Mi, the node agent alone needs about 10")]
    MemoryTooSmall(String),
    #[error("tmp {0:?}: at least 1Mi")]
    TmpTooSmall(String),
    #[error("cpu {0:?}: write CPUs such as 1, 0.5 or 500m")]
    NotCpus(String),
    #[error("cpu {0:?}: at least 10m")]
    TooFewCpus(String),
    #[error("cpu {0:?}: at most {max} CPUs", max = MAX_CPU_MILLIS / 1000)]
    TooManyCpus(String),
    #[error("cpu {0}m overflows a CFS quota")]
    QuotaOverflow(u64),
}

/// Why one limit could not be enforced on this machine. Cloned: one group that
/// cannot be made fails each limit written into it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EnforceError {
    #[error(transparent)]
    Limit(#[from] LimitError),
    #[error("no cgroup {0} hierarchy on this machine")]
    NoHierarchy(String),
    #[error("the {0} hierarchy is not mounted")]
    NotMounted(String),
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
}

/// The limits that could not be enforced, each as `status.appliedLimits` says it: the
/// groups made for them are removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct NotEnforced(pub Vec<String>);

/// The most CPUs a sandbox may ask for: more than any machine has, few enough that
/// every product below stays far from overflowing.
const MAX_CPU_MILLIS: u64 = 4096 * 1000;
/// The CFS period the CPU quota is written against, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;
/// The private `/tmp` when the spec names no size: its pages are memory (the host's,
/// or the sandbox's own limit's), so it is small by default.
pub const DEFAULT_TMP_BYTES: u64 = 256 << 20;
/// The smallest `/tmp` worth having.
const MIN_TMP_BYTES: u64 = 1 << 20;

/// Limits as numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wanted {
    pub memory_bytes: Option<u64>,
    /// CPU in thousandths of a CPU.
    pub cpu_millis: Option<u64>,
    pub pids: Option<u32>,
}

impl Wanted {
    pub fn from_spec(limits: Option<&SandboxLimits>) -> Result<Wanted, LimitError> {
        let Some(limits) = limits else { return Ok(Wanted::default()) };
        if limits.pids == Some(0) {
            return Err(LimitError::ZeroPids);
        }
        Ok(Wanted {
            memory_bytes: limits.memory.as_deref().map(parse_bytes).transpose()?,
            cpu_millis: limits.cpu.as_deref().map(parse_cpu).transpose()?,
            pids: limits.pids,
        })
    }

    pub fn is_empty(&self) -> bool {
        *self == Wanted::default()
    }
}

/// The size of the private `/tmp`: the spec's `tmp`, else the default or a quarter of
/// the memory limit, whichever is less (a full `/tmp` must not be what OOM-kills the
/// node agent).
pub fn tmp_bytes(limits: Option<&SandboxLimits>) -> Result<u64, LimitError> {
    let memory = limits.and_then(|l| l.memory.as_deref()).map(parse_bytes).transpose()?;
    match limits.and_then(|l| l.tmp.as_deref()) {
        Some(text) => {
            let bytes = parse_quantity(text, "tmp")?;
            if bytes < MIN_TMP_BYTES {
                return Err(LimitError::TmpTooSmall(text.to_string()));
            }
            Ok(bytes)
        }
        None => Ok(memory.map_or(DEFAULT_TMP_BYTES, |m| (m / 4).clamp(MIN_TMP_BYTES, DEFAULT_TMP_BYTES))),
    }
}

/// A Kubernetes memory quantity: `512Mi`, `1Gi`, `500M`, `1000000`.
pub fn parse_bytes(text: &str) -> Result<u64, LimitError> {
    let bytes = parse_quantity(text, "memory")?;
    // Below this nothing starts, not even the node agent.
    if bytes < 16 << 20 {
        return Err(LimitError::MemoryTooSmall(text.to_string()));
    }
    Ok(bytes)
}

/// A Kubernetes byte quantity, for the field named `what`.
fn parse_quantity(text: &str, what: &'static str) -> Result<u64, LimitError> {
    let bad = || LimitError::NotASize { what, text: text.to_string() };
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let factor: u64 = match suffix {
        "" => 1,
        "k" => 1000,
        "M" => 1000u64.pow(2),
        "G" => 1000u64.pow(3),
        "T" => 1000u64.pow(4),
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return Err(bad()),
    };
    n.checked_mul(factor).ok_or_else(bad)
}

/// A Kubernetes CPU quantity: `1`, `0.5`, `500m`.
pub fn parse_cpu(text: &str) -> Result<u64, LimitError> {
    let bad = || LimitError::NotCpus(text.to_string());
    let t = text.trim();
    let millis = if let Some(m) = t.strip_suffix('m') {
        m.parse::<u64>().map_err(|_| bad())?
    } else {
        let value: f64 = t.parse().map_err(|_| bad())?;
        if !value.is_finite() || value <= 0.0 || value > (MAX_CPU_MILLIS / 1000) as f64 {
            return Err(LimitError::TooManyCpus(text.to_string()));
        }
        (value * 1000.0).round() as u64
    };
    if millis < 10 {
        return Err(LimitError::TooFewCpus(text.to_string()));
    }
    if millis > MAX_CPU_MILLIS {
        return Err(LimitError::TooManyCpus(text.to_string()));
    }
    Ok(millis)
}

/// The CFS quota for `millis` thousandths of a CPU, per `CPU_PERIOD_US`.
fn cpu_quota_us(millis: u64) -> Result<u64, LimitError> {
    millis.checked_mul(CPU_PERIOD_US / 1000).ok_or(LimitError::QuotaOverflow(millis))
}

/// The groups made for one sandbox, one per hierarchy (v1) or one (v2).
#[derive(Debug, Clone, Default)]
pub struct Groups {
    pub dirs: Vec<PathBuf>,
    /// Each limit, as enforced or why not (for `status.appliedLimits`).
    pub applied: Vec<String>,
}

/// Makes the groups named `name` under this process's own and writes the limits;
/// returns no group at all when nothing is asked. When any limit cannot be enforced,
/// the groups made are removed and the answer says, for each limit, how it went.
pub fn create(name: &str, wanted: &Wanted, spec: Option<&SandboxLimits>) -> Result<Groups, NotEnforced> {
    let groups = create_groups(name, wanted, spec);
    let failed: Vec<String> = groups.applied.iter().filter(|a| a.contains(NOT_APPLIED)).cloned().collect();
    if failed.is_empty() {
        return Ok(groups);
    }
    remove(&groups);
    Err(NotEnforced(failed))
}

/// How a limit that could not be enforced is said.
const NOT_APPLIED: &str = " not applied: ";

fn create_groups(name: &str, wanted: &Wanted, spec: Option<&SandboxLimits>) -> Groups {
    let mut groups = Groups::default();
    if wanted.is_empty() {
        return groups;
    }
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let unified = own.lines().find_map(|l| l.strip_prefix("0::")).filter(|_| is_v2_only(&own));
    let spec = spec.cloned().unwrap_or_default();
    let mut limit = |what: &str, shown: String, result: Result<String, EnforceError>| {
        groups.applied.push(match result {
            Ok(how) => format!("{what}: {shown} ({how})"),
            Err(why) => format!("{what}: {shown}{NOT_APPLIED}{why}"),
        })
    };
    if let Some(path) = unified {
        let dir = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')).join(name);
        let made = make(&dir);
        let write = |file: &str, value: String| -> Result<String, EnforceError> {
            made.clone()?;
            write_file(&dir.join(file), &value).map(|()| format!("cgroup v2 {file}"))
        };
        if let Some(bytes) = wanted.memory_bytes {
            limit("memory", spec.memory.clone().unwrap_or_default(), write("memory.max", bytes.to_string()));
        }
        if let Some(millis) = wanted.cpu_millis {
            let written = cpu_quota_us(millis)
                .map_err(EnforceError::from)
                .and_then(|q| write("cpu.max", format!("{q} {CPU_PERIOD_US}")));
            limit("cpu", spec.cpu.clone().unwrap_or_default(), written);
        }
        if let Some(pids) = wanted.pids {
            limit("pids", pids.to_string(), write("pids.max", pids.to_string()));
        }
        if made.is_ok() {
            groups.dirs.push(dir);
        }
        return groups;
    }
    // v1: one group per hierarchy, made when a limit needs it.
    let group_of = |controller: &str| -> Result<PathBuf, EnforceError> {
        let own_path =
            own_path_of(&own, controller).ok_or_else(|| EnforceError::NoHierarchy(controller.to_string()))?;
        let mount = mount_of(controller).ok_or_else(|| EnforceError::NotMounted(controller.to_string()))?;
        let dir = mount.join(own_path.trim_start_matches('/')).join(name);
        make(&dir)?;
        Ok(dir)
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut v1 = |controller: &str, files: &[(&str, String)]| -> Result<String, EnforceError> {
        let dir = group_of(controller)?;
        if !dirs.contains(&dir) {
            dirs.push(dir.clone());
        }
        for (file, value) in files {
            write_file(&dir.join(file), value)?;
        }
        Ok(format!("cgroup v1 {controller}/{}", files.last().map_or("", |(f, _)| f)))
    };
    if let Some(bytes) = wanted.memory_bytes {
        let r = v1("memory", &[("memory.limit_in_bytes", bytes.to_string())]);
        limit("memory", spec.memory.clone().unwrap_or_default(), r);
    }
    if let Some(millis) = wanted.cpu_millis {
        let r = cpu_quota_us(millis).map_err(EnforceError::from).and_then(|quota| {
            v1("cpu", &[("cpu.cfs_period_us", CPU_PERIOD_US.to_string()), ("cpu.cfs_quota_us", quota.to_string())])
        });
        limit("cpu", spec.cpu.clone().unwrap_or_default(), r);
    }
    if let Some(pids) = wanted.pids {
        let r = v1("pids", &[("pids.max", pids.to_string())]);
        limit("pids", pids.to_string(), r);
    }
    groups.dirs = dirs;
    groups
}

fn own_path_of(own: &str, controller: &str) -> Option<String> {
    own.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _ = parts.next()?;
            Some((parts.next()?, parts.next()?))
        })
        .find(|(controllers, _)| controllers.split(',').any(|c| c == controller))
        .map(|(_, path)| path.to_string())
}

/// Only the unified hierarchy is in use (every line of /proc/self/cgroup is `0::`).
fn is_v2_only(own: &str) -> bool {
    own.lines().all(|l| l.starts_with("0::"))
}

/// Where a v1 controller's hierarchy is mounted.
fn mount_of(controller: &str) -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(2) == Some(&"cgroup") && fields.get(3)?.split(',').any(|o| o == controller))
            .then(|| PathBuf::from(fields[1]))
    })
}

fn make(dir: &Path) -> Result<(), EnforceError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(EnforceError::Create { path: dir.to_path_buf(), source: Arc::new(e) }),
    }
}

fn write_file(path: &Path, value: &str) -> Result<(), EnforceError> {
    fs::write(path, value).map_err(|e| EnforceError::Write { path: path.to_path_buf(), source: Arc::new(e) })
}

/// Removes the groups once empty. A group still holding a process (it is being
/// killed) is tried a few times.
pub fn remove(groups: &Groups) {
    for dir in &groups.dirs {
        for _ in 0..50 {
            match fs::remove_dir(dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
    }
}

/// Removes every group named `name` this process could have made, whatever got
/// made: after a setup that did not finish (a panic), where `Groups` was never
/// returned.
pub fn remove_named(name: &str) {
    if name.is_empty() || name.contains('/') {
        return;
    }
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut dirs = Vec::new();
    if let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) {
        dirs.push(Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')).join(name));
    }
    for controller in ["memory", "cpu", "pids"] {
        if let (Some(own_path), Some(mount)) = (own_path_of(&own, controller), mount_of(controller)) {
            dirs.push(mount.join(own_path.trim_start_matches('/')).join(name));
        }
    }
    dirs.sort();
    dirs.dedup();
    remove(&Groups { dirs, applied: Vec::new() });
}

/// Moves the calling process into each group (`cgroup.procs` takes 0 as "me").
pub fn join(dirs: &[PathBuf]) -> std::io::Result<()> {
    for dir in dirs {
        fs::write(dir.join("cgroup.procs"), "0")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        assert_eq!(parse_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("2Gi"), Ok(2 << 30));
        assert!(parse_bytes("1Mi").unwrap_err().to_string().contains("at least 16Mi"));
        assert!(parse_bytes("lots").unwrap_err().to_string().contains("512Mi"));
        assert!(parse_bytes("99999999999999Ti").is_err());
        assert_eq!(parse_cpu("500m"), Ok(500));
        assert_eq!(parse_cpu("1.5"), Ok(1500));
        assert_eq!(parse_cpu("2"), Ok(2000));
        assert!(parse_cpu("-1").is_err());
        assert!(parse_cpu("1m").is_err());
        assert!(parse_cpu("NaN").is_err());
    }

    #[test]
    fn a_cpu_count_that_would_overflow_is_a_spec_error() {
        // The quantity a hostile review used: it made `millis * 100` overflow.
        assert!(parse_cpu("184467440737095517m").unwrap_err().to_string().contains("at most 4096 CPUs"));
        assert!(parse_cpu("4096001m").is_err());
        assert_eq!(parse_cpu("4096000m"), Ok(4_096_000));
        assert!(parse_cpu("4097").unwrap_err().to_string().contains("at most 4096"));
        assert_eq!(cpu_quota_us(MAX_CPU_MILLIS), Ok(409_600_000));
        assert!(cpu_quota_us(u64::MAX).is_err());
        let limits = SandboxLimits { cpu: Some("184467440737095517m".into()), ..Default::default() };
        assert!(Wanted::from_spec(Some(&limits)).is_err());
        assert!(Wanted::from_spec(Some(&SandboxLimits { pids: Some(0), ..Default::default() })).is_err());
    }

    #[test]
    fn tmp_is_small_by_default_and_never_more_than_a_quarter_of_memory() {
        assert_eq!(tmp_bytes(None), Ok(DEFAULT_TMP_BYTES));
        let memory = |m: &str| SandboxLimits { memory: Some(m.into()), ..Default::default() };
        assert_eq!(tmp_bytes(Some(&memory("512Mi"))), Ok(128 << 20));
        assert_eq!(tmp_bytes(Some(&memory("8Gi"))), Ok(DEFAULT_TMP_BYTES));
        let tmp = SandboxLimits { tmp: Some("2Gi".into()), memory: Some("512Mi".into()), ..Default::default() };
        assert_eq!(tmp_bytes(Some(&tmp)), Ok(2 << 30));
        assert!(tmp_bytes(Some(&SandboxLimits { tmp: Some("10k".into()), ..Default::default() })).is_err());
        assert!(tmp_bytes(Some(&SandboxLimits { tmp: Some("lots".into()), ..Default::default() })).is_err());
    }
}
