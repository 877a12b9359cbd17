//! `get` and `describe` as a person reads them: a status that is only as old as the
//! last `agentplane up` says so, the REASON a resource is not running is in the table,
//! and `get -w` prints a row only when it changed, in columns that stay aligned.

use crate::common;
use crate::view_common;

use std::process::{Command, Stdio};
use std::sync::mpsc;

use view_common::{Dir, PATIENCE, cells, columns, process};

/// The time a line names after `label` (`... not running since 2026-11-25 01:02:03 UTC`).
fn time_after(line: &str, label: &str) -> time::OffsetDateTime {
    let at = line.find(label).unwrap_or_else(|| panic!("no {label:?} in {line}")) + label.len();
    let text = line[at..].get(..23).unwrap_or_else(|| panic!("no time after {label:?} in {line}"));
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    time::PrimitiveDateTime::parse(text, &format).unwrap_or_else(|e| panic!("{text:?}: {e}")).assume_utc()
}

fn now() -> time::OffsetDateTime {
    // Printed to the second: compare to the second.
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(0).unwrap()
}

#[test]
fn without_up_the_status_is_shown_as_of_when_up_last_ran() {
    let mut d = Dir::new();
    d.write("sleeper.yaml", &process("sleeper", "sleep", &["1000"]));
    d.write(
        "chat.yaml",
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: chat}\nspec: {agent: mock, messages: [hi]}\n",
    );
    d.write(
        "waiting.yaml",
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: waiting}\nspec: {agent: mock, envFrom: [{file: none.env}]}\n",
    );
    d.start();
    d.wait_phase("sleeper", "Running");
    d.wait_record("sessions", "chat", "idle", |r| r["status"]["phase"] == "Idle");

    // While `up` runs: the present tense.
    let (table, stderr) = d.ok(&["get", "proc"]);
    assert_eq!(cells(&table, "sleeper")["PHASE"], "Running", "{table}");
    assert!(!stderr.contains("status as of"), "{stderr}");

    let before_stop = now();
    d.stop();
    let after_stop = now();
    let (table, stderr) = d.ok(&["get", "proc"]);
    // A clean stop of `up` stopped its processes: the table says so, not the record's
    // Running (and the sleep is really gone).
    // (`UpStopped`, unless `up` recorded the exit itself on its way out: the two race.)
    let row = cells(&table, "sleeper");
    assert!(!row["PHASE"].starts_with("Running"), "{table}");
    assert!(row["PHASE"] != "Stopped" || ["UpStopped", ""].contains(&row["REASON"].as_str()), "{table}");
    let pid = d.record("processes", "sleeper").unwrap()["status"]["pid"].as_i64().unwrap() as i32;
    assert!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err(), "the sleep {pid} still runs");
    assert!(stderr.starts_with("status as of "), "{stderr}");
    assert!(stderr.contains(", when agentplane up last ran (not running since "), "{stderr}");
    let since = time_after(&stderr, "not running since ");
    assert!(before_stop <= since && since <= after_stop, "{since} not in {before_stop}..{after_stop}: {stderr}");
    // A clean stop stopped everything: what is shown is as of the stop, not the start.
    assert_eq!(time_after(&stderr, "status as of "), since, "{stderr}");
    assert!(stderr.contains(&format!("run `agentplane up --dir {}` to refresh it", d.quoted())), "{stderr}");
    // A session's agent stopped with it too: not `Idle?`.
    let (sessions, _) = d.ok(&["get", "sessions"]);
    let chat = cells(&sessions, "chat");
    assert_eq!((chat["PHASE"].as_str(), chat["REASON"].as_str()), ("Stopped", "UpStopped"), "{sessions}");
    // One that never started still says what it waits for.
    let waiting = cells(&sessions, "waiting");
    assert_eq!(waiting["REASON"], "EnvNotResolved", "{sessions}");
    // A program reading JSON still gets JSON alone on stdout.
    let (json, _) = d.ok(&["get", "proc", "-o", "json"]);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&json).unwrap()["items"][0]["status"]["phase"], "Running");

    let (described, _) = d.ok(&["describe", "process", "sleeper"]);
    assert!(described.starts_with("Note: status as of "), "{described}");
    let phase = described.lines().find(|l| l.trim_start().starts_with("Phase:")).expect(&described);
    assert!(!phase.contains("Running"), "{described}");

    // `up` again: the present tense again, the moment it holds the folder.
    d.start();
    let (table, stderr) = d.ok(&["get", "proc"]);
    assert!(!stderr.contains("status as of"), "{stderr}");
    assert!(!cells(&table, "sleeper")["PHASE"].ends_with('?'), "{table}");
    let (described, _) = d.ok(&["describe", "process", "sleeper"]);
    assert!(!described.contains("as of"), "{described}");
}

#[test]
fn after_kill_9_the_status_says_up_did_not_stop_cleanly() {
    let mut d = Dir::new();
    d.write("sleeper.yaml", &process("sleeper", "sleep", &["1000"]));
    d.start();
    let record = d.wait_phase("sleeper", "Running");
    let pid = record["status"]["pid"].as_i64().unwrap() as i32;
    d.kill9();
    // What `up` ran is an orphan now: not this test's to leave behind.
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);

    let (table, stderr) = d.ok(&["get", "proc"]);
    assert_eq!(cells(&table, "sleeper")["PHASE"], "Running?", "{table}");
    assert!(stderr.starts_with("status as of "), "{stderr}");
    assert!(stderr.contains("not running since an unknown time: it did not stop cleanly"), "{stderr}");
    assert!(stderr.contains(&format!("agentplane up --dir {}", d.quoted())), "{stderr}");
}

#[test]
fn the_reason_a_resource_is_not_running_is_a_column_of_get() {
    let mut d = Dir::new();
    d.write("sleeper.yaml", &process("sleeper", "sleep", &["1000"]));
    d.write(
        "needs-env.yaml",
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: needs-env}\n\
         spec: {command: sleep, args: ['1000'], envFrom: [{file: missing.env}]}\n",
    );
    d.write(
        "fed.yaml",
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: fed}\n\
         spec: {command: cat, sessionRef: nobody}\n",
    );
    d.write(
        "crasher.yaml",
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: crasher}\n\
         spec: {command: sh, args: ['-c', 'exit 3'], restartPolicy: Always}\n",
    );
    d.start();
    d.wait_phase("sleeper", "Running");
    let reason_is = |name: &str, reason: &str| {
        d.wait_record("processes", name, reason, |r| {
            r["status"]["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["reason"] == reason))
        })
    };
    reason_is("needs-env", "EnvNotResolved");
    reason_is("fed", "SessionNotFound");

    let (table, _) = d.ok(&["get", "proc"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "PHASE", "REASON", "COMMAND", "RESTARTS", "EXIT", "AGE"]);
    assert_eq!(cells(&table, "sleeper")["REASON"], "", "{table}");
    assert_eq!(cells(&table, "sleeper")["COMMAND"], "sleep 1000", "{table}");
    assert_eq!(cells(&table, "needs-env")["REASON"], "EnvNotResolved", "{table}");
    assert_eq!(cells(&table, "fed")["REASON"], "SessionNotFound", "{table}");
    // The crasher is between a start and a back-off: a row seen in BackOff says why.
    common::wait_until(PATIENCE, "crasher in BackOff in get", || {
        let (table, _) = d.ok(&["get", "proc"]);
        let row = cells(&table, "crasher");
        if row["PHASE"] != "BackOff" {
            return false;
        }
        assert_eq!(row["REASON"], "BackOff", "{table}");
        true
    });
}

#[test]
fn get_watch_prints_a_row_only_when_it_changed_in_columns_that_stay_aligned() {
    let mut d = Dir::new();
    d.write("a.yaml", &process("a", "sleep", &["1000"]));
    d.start();
    d.wait_phase("a", "Running");

    let mut watch = Command::new(common::bin())
        .args(["get", "proc", "-w", "--dir"])
        .arg(&d.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines_tx, lines_rx) = mpsc::channel();
    let stdout = std::io::BufReader::new(watch.stdout.take().unwrap());
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in stdout.lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let next_line = || lines_rx.recv_timeout(PATIENCE).expect("a line from get -w");
    let header = next_line();
    assert!(header.starts_with("NAME"), "{header}");
    let mut printed = vec![next_line()];

    // A change no column shows (a label): the record changes, the row does not.
    d.write("a.yaml", &process("a", "sleep", &["1000"]).replace("{name: a}", "{name: a, labels: {team: x}}"));
    d.wait_record("processes", "a", "the label", |r| r["metadata"]["labels"]["team"] == "x");
    // A longer name than any at the start, then a change a column shows.
    d.write("b.yaml", &process("bbbbbbbbbbbbbb", "sleep", &["1000"]));
    d.wait_phase("bbbbbbbbbbbbbb", "Running");
    d.write("a.yaml", &process("a", "sleep", &["1000"]).replace("spec: {", "spec: {desiredState: Stopped, "));
    // Both rows, in whichever order: a watch that sees the new name and the stop in one
    // pass prints them sorted, `a` first.
    let stopped = |l: &String| l.starts_with("a ") && l.contains("Stopped");
    let longer = |l: &String| l.starts_with("bbbbbbbbbbbbbb");
    while !(printed.iter().any(stopped) && printed.iter().any(longer)) {
        printed.push(next_line());
    }
    let _ = watch.kill();
    let _ = watch.wait();

    let mut last_of: std::collections::BTreeMap<String, String> = Default::default();
    for line in &printed {
        let row = columns(&header, line);
        let name = line.split_whitespace().next().unwrap().to_string();
        // Aligned: each cell is where its header is.
        assert_eq!(row["NAME"], name, "misaligned:\n{header}\n{}", printed.join("\n"));
        assert!(
            ["Pending", "Running", "Stopped", "BackOff"].contains(&row["PHASE"].as_str()),
            "misaligned:\n{header}\n{}",
            printed.join("\n")
        );
        assert!(row["COMMAND"].starts_with("sleep"), "misaligned:\n{header}\n{}", printed.join("\n"));
        // Never the same row twice in a row.
        let without_age = |l: &str| {
            let mut r = columns(&header, l);
            r.remove("AGE");
            r
        };
        if let Some(previous) = last_of.get(&name) {
            assert_ne!(without_age(previous), without_age(line), "printed again unchanged:\n{}", printed.join("\n"));
        }
        last_of.insert(name, line.clone());
    }
}

#[test]
fn errors_name_the_folder_and_hints_carry_the_flags_to_paste() {
    let mut d = Dir::new();
    d.write(
        "chat.yaml",
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: chat}\n\
         spec: {agent: mock, messages: ['please ask permission to run touch x']}\n",
    );
    d.start();
    // `up`'s banner, pasted, finds this folder.
    let banner = format!("agentplane get processes --dir {}", d.quoted());
    common::wait_until(PATIENCE, "the banner", || d.up_log().contains(&banner));

    let missing = format!("process \"x\" not found in namespace \"default\", in the folder {}", d.dir.display());
    for verb in [&["get", "process", "x"][..], &["describe", "process", "x"], &["logs", "process/x"]] {
        let stderr = d.fails(verb);
        assert!(stderr.contains(&missing), "{verb:?}: {stderr}");
    }
    // The verbs that edit files say where they looked too.
    let nope = format!("session \"nope\" not found in namespace \"default\", in the folder {}", d.dir.display());
    for verb in [
        &["send", "session/nope", "hi"][..],
        &["reply", "session/nope", "perm-1", "--decision", "once"],
        &["delete", "session/nope"],
        &["restart", "session/nope"],
    ] {
        let stderr = d.fails(verb);
        assert!(stderr.contains(&nope), "{verb:?}: {stderr}");
    }
    let stderr = d.fails(&["describe", "session", "nope"]);
    assert!(
        stderr.contains(&format!(
            "session \"nope\" not found in namespace \"default\", in the folder {}",
            d.dir.display()
        )),
        "{stderr}"
    );

    // The reply `describe` suggests works when pasted: it names the folder.
    d.wait_record("sessions", "chat", "a permission request", |r| {
        r["status"]["pendingPermissions"][0]["id"].is_string()
    });
    let (described, _) = d.ok(&["describe", "session", "chat"]);
    let line = described.lines().find(|l| l.trim_start().starts_with("Permission:")).expect(&described);
    assert!(line.ends_with(&format!("--decision once --dir {})", d.quoted())), "{line}");
    let (events, _) = d.ok(&["logs", "session/chat"]);
    assert!(events.contains(&format!("--dir {}", d.quoted())), "{events}");
}

#[test]
fn get_watch_says_when_up_stops_and_starts_again() {
    let mut d = Dir::new();
    d.write("a.yaml", &process("a", "sleep", &["1000"]));
    d.start();
    d.wait_phase("a", "Running");
    let mut watch = Command::new(common::bin())
        .args(["get", "proc", "-w", "--dir"])
        .arg(&d.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both streams, in one channel, in the order they are read.
    let (tx, rx) = mpsc::channel();
    for (reader, name) in [
        (Box::new(watch.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>, "out"),
        (Box::new(watch.stderr.take().unwrap()), "err"),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(reader).lines().map_while(Result::ok) {
                if tx.send((name, line)).is_err() {
                    break;
                }
            }
        });
    }
    let mut seen = Vec::new();
    let mut wait_for = |what: &str, check: &dyn Fn(&str, &str) -> bool| loop {
        let (stream, line) = rx.recv_timeout(PATIENCE).unwrap_or_else(|_| panic!("{what} from get -w; saw {seen:#?}"));
        seen.push(format!("{stream}: {line}"));
        if check(stream, &line) {
            break;
        }
    };
    wait_for("the row", &|s, l| s == "out" && l.starts_with("a ") && l.contains(" Running "));
    d.stop();
    // The as-of line (stderr) and the row (stdout) come through two pipes: in either
    // order. The row no longer says Running: `UpStopped`, or what `up` itself recorded
    // as the process ended on its way out (the two race).
    let (as_of, stopped) = (std::cell::Cell::new(false), std::cell::Cell::new(false));
    wait_for("the as-of line, and the row no longer running", &|s, l| {
        as_of.set(as_of.get() || (s == "err" && l.starts_with("status as of ")));
        stopped.set(stopped.get() || (s == "out" && l.starts_with("a ") && !l.contains(" Running")));
        as_of.get() && stopped.get()
    });
    d.start();
    // The line on stderr and the row on stdout come through two pipes: in either order.
    let (live, unmarked) = (std::cell::Cell::new(false), std::cell::Cell::new(false));
    wait_for("live again, and the row unmarked", &|s, l| {
        live.set(live.get() || (s == "err" && l.contains("the status is live again")));
        unmarked.set(unmarked.get() || (s == "out" && l.starts_with("a ") && l.contains(" Running ")));
        live.get() && unmarked.get()
    });
    let _ = watch.kill();
    let _ = watch.wait();
}
