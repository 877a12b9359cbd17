//! `agentplane-model-server` as a person runs it: it says where it listens and what
//! each agent needs, answers there, and stops cleanly on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_agentplane-model-server");

#[test]
fn the_binary_prints_its_address_answers_there_and_stops_on_sigterm() {
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    // Its first line says it listens, and where: whoever started it waits for that line.
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.contains("scripted model server"), "{first}");
    let url = first.trim().rsplit(' ').next().unwrap().to_string();
    let addr = url.strip_prefix("http://").unwrap_or_else(|| panic!("no URL in {first:?}"));
    let mut rest = String::new();
    for _ in 0..4 {
        stdout.read_line(&mut rest).unwrap();
    }
    assert!(rest.contains(&format!("ANTHROPIC_BASE_URL={url} ")), "{rest}");
    assert!(rest.contains(&format!("OPENAI_BASE_URL={url}/v1 ")), "{rest}");

    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = r#"{"model": "m", "messages": [{"role": "user", "content": "hello"}]}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert!(answer.contains("scripted reply: 1 messages in context"), "{answer}");

    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    // Bounded, so a server that ignores SIGTERM fails the test instead of hanging it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let exited = loop {
        if let Some(exited) = child.try_wait().unwrap() {
            break exited;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running 10 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exited.success(), "{exited:?}");
}
