//! `logs` as kubectl users expect it, against real processes: both streams by default
//! interleaved in the order they print, `--stream`, `--tail`, `--since`, `--timestamps`
//! (when the node agent received each line), `-f`; and a session's events one a line,
//! laid out alike in `logs session/X` and `session events`.

use crate::common;
use crate::view_common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use view_common::{Dir, PATIENCE};

fn process(name: &str, args: &[&str]) -> String {
    format!(
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {{name: {name}}}\n\
         spec: {{command: sh, args: {}, restartPolicy: Never}}\n",
        serde_json::to_string(args).unwrap()
    )
}

fn stamped(line: &str) -> (time::OffsetDateTime, &str) {
    let (stamp, text) = line.split_once(' ').unwrap_or_else(|| panic!("no timestamp in {line:?}"));
    let at = time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{line}: {e}"));
    (at, text)
}

#[test]
fn logs_interleaves_both_streams_in_the_order_printed_with_tail_since_and_timestamps() {
    let mut d = Dir::new();
    let before = time::OffsetDateTime::now_utc();
    d.write("both.yaml", &process("both", &["-c", "echo o1; echo e1 >&2; sleep 0.2; echo o2; echo e2 >&2"]));
    // The same with a pause long enough to cut between its halves by `--since` from here.
    d.write("halves.yaml", &process("halves", &["-c", "echo o1; echo e1 >&2; sleep 3; echo o2; echo e2 >&2"]));
    d.start();
    d.wait_phase("both", "Succeeded");
    let after = time::OffsetDateTime::now_utc();

    assert_eq!(d.ok(&["logs", "process/both"]).0, "o1\ne1\no2\ne2\n");
    assert_eq!(d.ok(&["logs", "process/both", "--stream", "stderr"]).0, "e1\ne2\n");
    assert_eq!(d.ok(&["logs", "process/both", "--stream", "stdout"]).0, "o1\no2\n");
    // The last lines of both streams together.
    assert_eq!(d.ok(&["logs", "process/both", "--tail", "2"]).0, "o2\ne2\n");
    assert_eq!(d.ok(&["logs", "process/both", "--tail", "1", "--stream", "stdout"]).0, "o2\n");

    // Each line with when the node agent got it: in order, and the pause between the halves.
    let (stamps, _) = d.ok(&["logs", "process/both", "--timestamps"]);
    let lines: Vec<_> = stamps.lines().map(stamped).collect();
    assert_eq!(lines.iter().map(|(_, t)| *t).collect::<Vec<_>>(), ["o1", "e1", "o2", "e2"], "{stamps}");
    for pair in lines.windows(2) {
        assert!(pair[0].0 <= pair[1].0, "{stamps}");
    }
    assert!(before <= lines[0].0 && lines[3].0 <= after, "{stamps} not in {before}..{after}");
    assert!(lines[2].0 - lines[1].0 >= time::Duration::milliseconds(150), "{stamps}");
    assert_eq!(d.ok(&["logs", "process/both", "--since", "1h"]).0, "o1\ne1\no2\ne2\n");
    assert_eq!(d.ok(&["logs", "process/both", "--since", "0s"]).0, "");

    // A window that starts just after the first half was printed leaves it out.
    d.wait_phase("halves", "Succeeded");
    let (stamps, _) = d.ok(&["logs", "process/halves", "--timestamps"]);
    let first_half_end = stamped(stamps.lines().nth(1).unwrap()).0;
    let window = time::OffsetDateTime::now_utc() - first_half_end - time::Duration::milliseconds(500);
    let window = format!("{}ms", window.whole_milliseconds());
    assert_eq!(d.ok(&["logs", "process/halves", "--since", &window]).0, "o2\ne2\n", "--since {window}: {stamps}");
}

#[test]
fn logs_follow_interleaves_the_streams_as_they_print_with_timestamps() {
    let mut d = Dir::new();
    let fifo = d.dir.parent().unwrap().join("lines");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // Each line read says which stream to print the rest on.
    let script = format!(
        "exec < '{}'; while read s l; do if [ \"$s\" = e ]; then echo \"$l\" >&2; else echo \"$l\"; fi; done",
        fifo.display()
    );
    d.write("relay.yaml", &process("relay", &["-c", &script]));
    d.start();
    d.wait_phase("relay", "Running");
    // Opens once the process has opened its end.
    let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();

    let before = time::OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    let mut follow = Command::new(common::bin())
        .args(["logs", "-f", "--timestamps", "process/relay", "--dir"])
        .arg(&d.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = BufReader::new(follow.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The first line may come from what was printed before `logs -f` asked; once it is
    // seen, `logs -f` follows, and the rest comes as printed.
    let mut said = Vec::new();
    for (stream, text) in [("o", "one"), ("e", "two"), ("o", "three"), ("e", "four")] {
        writeln!(writer, "{stream} {text}").unwrap();
        writer.flush().unwrap();
        // The next line comes before the next is written: the order is the printing order.
        let line = rx.recv_timeout(PATIENCE).unwrap_or_else(|_| panic!("{text} from logs -f, after {said:?}"));
        said.push(line);
    }
    drop(writer);
    // The process ends at the end of its input, and `logs -f` with it.
    common::wait_until(PATIENCE, "logs -f to end with the process", || follow.try_wait().unwrap().is_some());
    let after = time::OffsetDateTime::now_utc();
    let texts: Vec<&str> = said.iter().map(|l| l.split_once(' ').map_or(l.as_str(), |(_, t)| t)).collect();
    assert_eq!(texts, ["one", "two", "three", "four"], "{said:?}");
    // Each with when the node agent got it, never going back.
    let mut last = before;
    for line in &said {
        let (at, _) = stamped(line);
        assert!(last <= at && at <= after, "{line} not in {last}..{after}");
        last = at;
    }
}

#[test]
fn a_session_reads_the_same_in_logs_and_session_events_a_tool_call_after_its_permission() {
    let mut d = Dir::new();
    d.write(
        "chat.yaml",
        "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {name: chat}\n\
         spec: {agent: mock, messages: ['please ask permission to run touch x']}\n",
    );
    d.start();
    let record = d.wait_record("sessions", "chat", "a permission request", |r| {
        r["status"]["pendingPermissions"][0]["id"].is_string()
    });
    let id = record["status"]["pendingPermissions"][0]["id"].as_str().unwrap().to_string();
    d.ok(&["reply", "session/chat", &id, "--decision", "once"]);
    d.wait_record("sessions", "chat", "idle after the reply", |r| r["status"]["phase"] == "Idle");

    let (logs, _) = d.ok(&["logs", "session/chat"]);
    let up = d.state().read_up().unwrap();
    let uid = record["metadata"]["uid"].as_str().unwrap();
    let events = Command::new(common::bin())
        .args(["session", "events", &format!("sess-{uid}"), "--url", &up.url])
        .args(up.token.as_deref().map(|t| vec!["--token", t]).unwrap_or_default())
        .output()
        .unwrap();
    assert!(events.status.success(), "{}", String::from_utf8_lossy(&events.stderr));
    let events = String::from_utf8(events.stdout).unwrap();
    // Alike but for the command that answers a request, which is the verb's own.
    let without_answer = |text: &str| -> Vec<String> {
        text.lines().map(|l| l.split(" (answer: ").next().unwrap().to_string()).collect()
    };
    assert_eq!(without_answer(&logs), without_answer(&events), "logs:\n{logs}\nsession events:\n{events}");

    let lines: Vec<&str> = logs.lines().collect();
    let at =
        |what: &str| lines.iter().position(|l| l.contains(what)).unwrap_or_else(|| panic!("no {what:?} in\n{logs}"));
    // Each event's first line: the sequence, the time, the type.
    let first = lines[0].split_whitespace().collect::<Vec<_>>();
    assert!(first[0].parse::<u64>().is_ok() && first[1].len() == 8 && first[1].as_bytes()[2] == b':', "{logs}");
    // In the order it happened: the call announced, asked for, allowed, then run.
    assert!(at("item.started tool_call bash") < at("permission.requested"), "{logs}");
    assert!(at("permission.requested") < at("permission.resolved"), "{logs}");
    assert!(at("permission.resolved") < at("item.completed tool_call bash"), "{logs}");
    // A tool's output on a continuation line, indented under the type.
    let output = at("ran: touch x");
    assert!(lines[output].starts_with("               ran: touch x"), "{logs}");
    assert!(lines[output - 1].contains("item.completed tool_result"), "{logs}");

    // `--tail`, `--since` and `--timestamps` as for a process, counting events.
    let (tail, _) = d.ok(&["logs", "session/chat", "--tail", "2"]);
    // An event's first line starts with its sequence, right-aligned in five columns.
    let first_line = |l: &&str| l.get(..5).is_some_and(|n| n.trim().parse::<u64>().is_ok());
    let events: Vec<&str> = logs.lines().filter(first_line).collect();
    let last_two: Vec<&str> = tail.lines().filter(first_line).collect();
    assert_eq!(last_two, events[events.len() - 2..], "the last two events:\n{tail}\nof\n{logs}");
    let (none, _) = d.ok(&["logs", "session/chat", "--since", "0s"]);
    assert_eq!(none, "", "nothing happened in the last 0 seconds");
    let (all, _) = d.ok(&["logs", "session/chat", "--since", "1h"]);
    assert_eq!(all, logs);
    let (stamped_logs, _) = d.ok(&["logs", "session/chat", "--timestamps", "--tail", "1"]);
    let (at, rest) = stamped(stamped_logs.lines().next().unwrap());
    assert!(rest.ends_with(events[events.len() - 1].trim_start()), "{stamped_logs}");
    assert!(time::OffsetDateTime::now_utc() - at < time::Duration::minutes(5), "{stamped_logs}");
}

#[test]
fn attach_names_the_process_by_namespace_and_name() {
    let mut d = Dir::new();
    d.write(
        "asker.yaml",
        "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {name: asker}\n\
         spec: {command: sh, args: ['-c', 'read x; echo got $x; exit 3'], stdin: true, restartPolicy: Never}\n",
    );
    d.start();
    let record = d.wait_phase("asker", "Running");
    let uid = record["metadata"]["uid"].as_str().unwrap().to_string();
    let mut attach = Command::new(common::bin())
        .args(["attach", "process/asker", "--dir"])
        .arg(&d.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    attach.stdin.take().unwrap().write_all(b"hi\n").unwrap();
    let out = attach.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("got hi"), "{stdout}");
    assert!(stderr.contains("process default/asker exited with code 3"), "{stderr}");
    assert!(!stderr.contains(&uid), "{stderr}");
}
