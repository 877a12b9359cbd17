//! The seccomp filter every isolated sandbox runs under, in the spirit of Docker's
//! default profile: a deny list of what no agent needs and what turns a bug in the
//! kernel into a way out (mounting, loading modules or BPF, keyrings, userfaultfd,
//! new user namespaces, handles to host files, the new mount API), and of the calls
//! that would give a file a set-user-ID or set-group-ID bit (`chmod 4755`,
//! `open(O_CREAT, 04755)`), which a host user could run with the sandbox's uid.
//!
//! Two programs, each compiled to BPF by seccompiler and handed to bubblewrap
//! (`--add-seccomp-fd`), which installs them just before it runs the node agent:
//! - `EPERM` for the deny list and the set-id modes;
//! - `ENOSYS` for calls whose arguments a filter cannot see into (`clone3`,
//!   `openat2`, io_uring, which runs file operations no filter looks at): "not
//!   there" makes libc and libuv fall back to the calls above, which are checked.
//!   It also refuses every x32 call on x86_64 (numbers with bit 30 set), which a
//!   deny list by number would otherwise let through under other numbers.
//!
//! A program of another architecture than the filter's (32-bit x86 on x86_64) is
//! killed, as seccompiler's architecture check does.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

/// Said in the Sandbox's status (`status.seccomp`) and by `describe sandbox`.
pub const DESCRIPTION: &str = "agentplane-default: refuses mount and the new mount API, pivot_root, chroot, \
     kexec, modules, bpf, perf_event_open, keyrings, userfaultfd, new user namespaces, setns, \
     open_by_handle_at, clock and swap changes, and set-user-ID/set-group-ID modes; \
     clone3, openat2 and io_uring answer ENOSYS; x32 and 32-bit calls are refused";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("this architecture ({0}) has no seccomp filter here")]
    Architecture(String),
    #[error("compiling the seccomp filter: {0}")]
    Compile(String),
}

/// The two programs as bubblewrap reads them: raw `struct sock_filter` arrays, in the
/// order they are installed.
pub fn programs() -> Result<Vec<Vec<u8>>, Error> {
    let arch: TargetArch =
        std::env::consts::ARCH.try_into().map_err(|_| Error::Architecture(std::env::consts::ARCH.into()))?;
    let denied = compile(deny_rules(), libc::EPERM, arch)?;
    let mut absent = x32_guard();
    absent.extend(compile(absent_rules(), libc::ENOSYS, arch)?);
    Ok(vec![bytes(&denied), bytes(&absent)])
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32, arch: TargetArch) -> Result<BpfProgram, Error> {
    let errno = u32::try_from(errno).map_err(|e| Error::Compile(e.to_string()))?;
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno), arch)
        .map_err(|e| Error::Compile(e.to_string()))?;
    BpfProgram::try_from(filter).map_err(|e| Error::Compile(e.to_string()))
}

/// `struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }`, native endian.
fn bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for instruction in program {
        out.extend_from_slice(&instruction.code.to_ne_bytes());
        out.push(instruction.jt);
        out.push(instruction.jf);
        out.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    out
}

/// On x86_64, an x32 call is the x86_64 number with bit 30 set, under the same
/// architecture value: `ENOSYS` for all of them, before any number is compared.
fn x32_guard() -> BpfProgram {
    if std::env::consts::ARCH != "x86_64" {
        return Vec::new();
    }
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    // BPF_LD | BPF_W | BPF_ABS, BPF_JMP | BPF_JGE | BPF_K, BPF_RET | BPF_K.
    const LD_W_ABS: u16 = 0x20;
    const JMP_JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    vec![
        // The syscall number is the first word of `struct seccomp_data`.
        seccompiler::sock_filter { code: LD_W_ABS, jt: 0, jf: 0, k: 0 },
        seccompiler::sock_filter { code: JMP_JGE_K, jt: 0, jf: 1, k: X32_SYSCALL_BIT },
        seccompiler::sock_filter { code: RET_K, jt: 0, jf: 0, k: libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32 },
    ]
}

/// A condition on argument `index` (the low 32 bits, where modes and flags live).
fn masked(index: u8, mask: u64) -> SeccompCondition {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(mask), mask)
        .expect("argument indexes below 6 are valid")
}

/// Rules matching a mode argument at `index` with a set-id bit.
fn setid_mode(index: u8) -> Vec<SeccompRule> {
    [libc::S_ISUID, libc::S_ISGID]
        .into_iter()
        .map(|bit| SeccompRule::new(vec![masked(index, u64::from(bit))]).expect("one condition"))
        .collect()
}

/// Rules matching an `open`-style call creating a file (`O_CREAT`, or `O_TMPFILE`,
/// whose file can be linked in later) with a set-id bit in its mode.
fn creating_setid(flags: u8, mode: u8) -> Vec<SeccompRule> {
    const O_TMPFILE_BIT: u64 = 0o20000000;
    let mut rules = Vec::new();
    for create in [libc::O_CREAT as u64, O_TMPFILE_BIT] {
        for bit in [libc::S_ISUID, libc::S_ISGID] {
            rules.push(
                SeccompRule::new(vec![masked(flags, create), masked(mode, u64::from(bit))]).expect("two conditions"),
            );
        }
    }
    rules
}

// Numbers that are the same on every architecture since Linux 5.1 (the unified table),
// named here because not every libc has them all.
const SYS_OPEN_TREE: i64 = 428;
const SYS_MOVE_MOUNT: i64 = 429;
const SYS_FSOPEN: i64 = 430;
const SYS_FSCONFIG: i64 = 431;
const SYS_FSMOUNT: i64 = 432;
const SYS_FSPICK: i64 = 433;
const SYS_CLONE3: i64 = 435;
const SYS_OPENAT2: i64 = 437;
const SYS_MOUNT_SETATTR: i64 = 442;
const SYS_FCHMODAT2: i64 = 452;
const SYS_IO_URING_SETUP: i64 = 425;
const SYS_IO_URING_ENTER: i64 = 426;
const SYS_IO_URING_REGISTER: i64 = 427;

fn deny_rules() -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // Refused whatever the arguments.
    let always: &[i64] = &[
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_userfaultfd,
        libc::SYS_setns,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_acct,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_syslog,
        libc::SYS_quotactl,
        libc::SYS_vhangup,
        SYS_OPEN_TREE,
        SYS_MOVE_MOUNT,
        SYS_FSOPEN,
        SYS_FSCONFIG,
        SYS_FSMOUNT,
        SYS_FSPICK,
        SYS_MOUNT_SETATTR,
    ];
    for number in always {
        rules.insert(*number, Vec::new());
    }
    #[cfg(target_arch = "x86_64")]
    for number in [libc::SYS_iopl, libc::SYS_ioperm, libc::SYS_uselib, libc::SYS_lookup_dcookie] {
        rules.insert(number, Vec::new());
    }
    // A new user namespace would give back every capability inside it.
    let new_user = u64::try_from(libc::CLONE_NEWUSER).expect("a positive flag");
    rules.insert(libc::SYS_unshare, vec![SeccompRule::new(vec![masked(0, new_user)]).expect("one condition")]);
    rules.insert(libc::SYS_clone, vec![SeccompRule::new(vec![masked(0, new_user)]).expect("one condition")]);
    // Set-id modes, on every call that sets or creates a mode.
    rules.insert(libc::SYS_fchmod, setid_mode(1));
    rules.insert(libc::SYS_fchmodat, setid_mode(2));
    rules.insert(SYS_FCHMODAT2, setid_mode(2));
    rules.insert(libc::SYS_openat, creating_setid(2, 3));
    rules.insert(libc::SYS_mknodat, setid_mode(2));
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(libc::SYS_chmod, setid_mode(1));
        rules.insert(libc::SYS_open, creating_setid(1, 2));
        rules.insert(libc::SYS_creat, setid_mode(1));
        rules.insert(libc::SYS_mknod, setid_mode(1));
    }
    rules
}

fn absent_rules() -> BTreeMap<i64, Vec<SeccompRule>> {
    [SYS_CLONE3, SYS_OPENAT2, SYS_IO_URING_SETUP, SYS_IO_URING_ENTER, SYS_IO_URING_REGISTER]
        .into_iter()
        .map(|number| (number, Vec::new()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_programs_compile_for_this_machine_into_whole_instructions() {
        let programs = programs().unwrap();
        assert_eq!(programs.len(), 2);
        for program in &programs {
            assert!(!program.is_empty() && program.len() % 8 == 0, "{}", program.len());
            // Within the kernel's limit of 4096 instructions.
            assert!(program.len() / 8 < 4096);
        }
    }

    #[test]
    fn the_deny_list_names_what_the_description_says() {
        let rules = deny_rules();
        for number in [libc::SYS_mount, libc::SYS_bpf, libc::SYS_keyctl, libc::SYS_userfaultfd, libc::SYS_setns] {
            assert!(rules.get(&number).is_some_and(Vec::is_empty), "{number} is refused outright");
        }
        // Conditional: only with the set-id bits, or a new user namespace.
        assert_eq!(rules[&libc::SYS_fchmodat].len(), 2);
        assert_eq!(rules[&libc::SYS_openat].len(), 4);
        assert_eq!(rules[&libc::SYS_unshare].len(), 1);
        assert!(absent_rules().contains_key(&SYS_CLONE3));
        #[cfg(target_arch = "x86_64")]
        assert_eq!(x32_guard().len(), 3);
    }
}
