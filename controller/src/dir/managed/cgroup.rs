//! A managed sandbox's limits (memory, CPU, process count) through cgroups, v1 or v2,
//! in a group of its own under the controller's. What could not be applied is said,
//! never silently dropped: each limit comes back as enforced or as why not.
//!
//! Joining the group happens in the child before it execs bubblewrap
//! (`agentplane sandbox-exec`), so nothing of the sandbox ever runs outside it.

use std::fs;
use std::path::{Path, PathBuf};

use agentplane_crds::SandboxLimits;

/// Limits as numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wanted {
    pub memory_bytes: Option<u64>,
    /// CPU in thousandths of a CPU.
    pub cpu_millis: Option<u64>,
    pub pids: Option<u32>,
}

impl Wanted {
    pub fn from_spec(limits: Option<&SandboxLimits>) -> Result<Wanted, String> {
        let Some(limits) = limits else { return Ok(Wanted::default()) };
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

/// A Kubernetes memory quantity: `512Mi`, `1Gi`, `500M`, `1000000`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let bad = || format!("memory {text:?}: write a size such as 512Mi or 2Gi");
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
    let bytes = n.checked_mul(factor).ok_or_else(bad)?;
    // Below this nothing starts, not even the node agent.
    if bytes < 16 << 20 {
        return Err(format!("memory {text:?}: at least 16Mi, the node agent alone needs about 10"));
    }
    Ok(bytes)
}

/// A Kubernetes CPU quantity: `1`, `0.5`, `500m`.
pub fn parse_cpu(text: &str) -> Result<u64, String> {
    let bad = || format!("cpu {text:?}: write CPUs such as 1, 0.5 or 500m");
    let t = text.trim();
    let millis = if let Some(m) = t.strip_suffix('m') {
        m.parse::<u64>().map_err(|_| bad())?
    } else {
        let value: f64 = t.parse().map_err(|_| bad())?;
        if !value.is_finite() || value <= 0.0 || value > 4096.0 {
            return Err(bad());
        }
        (value * 1000.0).round() as u64
    };
    if millis < 10 {
        return Err(format!("cpu {text:?}: at least 10m"));
    }
    Ok(millis)
}

/// The groups made for one sandbox, one per hierarchy (v1) or one (v2).
#[derive(Debug, Clone, Default)]
pub struct Groups {
    pub dirs: Vec<PathBuf>,
    /// Each limit, as enforced or why not (for `status.appliedLimits`).
    pub applied: Vec<String>,
}

/// Makes the groups named `name` under this process's own and writes the limits.
/// Returns no group at all when nothing is asked.
pub fn create(name: &str, wanted: &Wanted, spec: Option<&SandboxLimits>) -> Groups {
    let mut groups = Groups::default();
    if wanted.is_empty() {
        return groups;
    }
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let unified = own.lines().find_map(|l| l.strip_prefix("0::")).filter(|_| is_v2_only(&own));
    let spec = spec.cloned().unwrap_or_default();
    let mut limit = |what: &str, shown: String, result: Result<String, String>| {
        groups.applied.push(match result {
            Ok(how) => format!("{what}: {shown} ({how})"),
            Err(why) => format!("{what}: {shown} not applied: {why}"),
        })
    };
    if let Some(path) = unified {
        let dir = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')).join(name);
        let made = make(&dir);
        let write = |file: &str, value: String| -> Result<String, String> {
            made.clone()?;
            write_file(&dir.join(file), &value).map(|()| format!("cgroup v2 {file}"))
        };
        if let Some(bytes) = wanted.memory_bytes {
            limit("memory", spec.memory.clone().unwrap_or_default(), write("memory.max", bytes.to_string()));
        }
        if let Some(millis) = wanted.cpu_millis {
            limit("cpu", spec.cpu.clone().unwrap_or_default(), write("cpu.max", format!("{} 100000", millis * 100)));
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
    let group_of = |controller: &str| -> Result<PathBuf, String> {
        let own_path =
            own_path_of(&own, controller).ok_or_else(|| format!("no cgroup {controller} hierarchy on this machine"))?;
        let mount = mount_of(controller).ok_or_else(|| format!("the {controller} hierarchy is not mounted"))?;
        let dir = mount.join(own_path.trim_start_matches('/')).join(name);
        make(&dir)?;
        Ok(dir)
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut v1 = |controller: &str, files: &[(&str, String)]| -> Result<String, String> {
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
        let r = v1("cpu", &[("cpu.cfs_period_us", "100000".into()), ("cpu.cfs_quota_us", (millis * 100).to_string())]);
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

fn make(dir: &Path) -> Result<(), String> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("cannot create {}: {e}", dir.display())),
    }
}

fn write_file(path: &Path, value: &str) -> Result<(), String> {
    fs::write(path, value).map_err(|e| format!("cannot write {}: {e}", path.display()))
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
        assert!(parse_bytes("1Mi").unwrap_err().contains("at least 16Mi"));
        assert!(parse_bytes("lots").unwrap_err().contains("512Mi"));
        assert!(parse_bytes("99999999999999Ti").is_err());
        assert_eq!(parse_cpu("500m"), Ok(500));
        assert_eq!(parse_cpu("1.5"), Ok(1500));
        assert_eq!(parse_cpu("2"), Ok(2000));
        assert!(parse_cpu("-1").is_err());
        assert!(parse_cpu("1m").is_err());
        assert!(parse_cpu("NaN").is_err());
    }
}
