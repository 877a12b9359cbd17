//! `agentplane proc attach`: this terminal, in raw mode, wired to a process's
//! terminal WebSocket. Keystrokes and window-size changes go out, bytes come in;
//! the terminal is restored however it ends.

use std::io::{IsTerminal, Read, Write};

use agentplane_node_agent::client::Client;
use agentplane_node_agent::model::{ConnectQuery, ControlMessage};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// Ctrl-] detaches, as in telnet: the process keeps running.
const DETACH_KEY: u8 = 0x1d;

struct RawMode;

impl RawMode {
    fn enable() -> anyhow::Result<Self> {
        crossterm::terminal::enable_raw_mode()?;
        Ok(RawMode)
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// Returns the exit code to leave with: the process's own, 128+signal, or 0 on detach.
pub async fn attach(client: &Client, id: &str, offset: Option<u64>) -> anyhow::Result<i32> {
    attach_as(client, id, offset, None).await
}

/// [`attach`], naming the process as people know it (`process default/web`) in what
/// it says, rather than by its node-agent id.
pub async fn attach_as(client: &Client, id: &str, offset: Option<u64>, name: Option<&str>) -> anyhow::Result<i32> {
    let info = client.get_process(id).await?;
    let shown = name.map_or_else(|| info.id.clone(), str::to_string);
    let socket = client.connect(&info.id, &ConnectQuery { offset, ..Default::default() }).await?;
    let (mut sink, mut source) = socket.split();
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("agentplane: attached to {shown} (Ctrl-] detaches; it keeps running)");
    }
    let raw = if interactive { Some(RawMode::enable()?) } else { None };

    if info.pty
        && interactive
        && let Ok((cols, rows)) = crossterm::terminal::size()
    {
        sink.send(control(&ControlMessage::Resize { rows, cols })).await?;
    }

    // stdin is read on a thread of its own: a blocking read has no place on the runtime.
    // A few chunks in flight are plenty for typing and pasting.
    let (keys_tx, mut keys_rx) = mpsc::channel::<Vec<u8>>(8);
    std::thread::Builder::new().name("attach-stdin".into()).spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if keys_tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    })?;
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())?;
    let mut stdout = std::io::stdout();
    let mut stdin_open = true;
    let mut code = 0;

    loop {
        tokio::select! {
            keys = keys_rx.recv(), if stdin_open => match keys {
                Some(keys) => {
                    if interactive && let Some(at) = keys.iter().position(|&b| b == DETACH_KEY) {
                        if at > 0 {
                            sink.send(Message::Binary(keys[..at].to_vec().into())).await?;
                        }
                        drop(raw);
                        eprintln!("\r\nagentplane: detached from {shown} (it keeps running)");
                        return Ok(0);
                    }
                    sink.send(Message::Binary(keys.into())).await?;
                }
                None => stdin_open = false,
            },
            _ = winch.recv() => {
                if info.pty && let Ok((cols, rows)) = crossterm::terminal::size() {
                    sink.send(control(&ControlMessage::Resize { rows, cols })).await?;
                }
            }
            message = source.next() => match message {
                Some(Ok(Message::Binary(bytes))) => {
                    stdout.write_all(&bytes)?;
                    stdout.flush()?;
                }
                Some(Ok(Message::Text(text))) => match serde_json::from_str::<ControlMessage>(text.as_str()) {
                    Ok(ControlMessage::Exit { exit_code, signal }) => {
                        code = match (exit_code, &signal) {
                            (Some(c), _) => c,
                            (None, Some(name)) => 128 + agentplane_node_agent::signals::parse_signal(name).map(|s| s as i32).unwrap_or(0),
                            (None, None) => 1,
                        };
                        match (exit_code, signal) {
                            (Some(c), _) => eprint!("\r\nagentplane: {shown} exited with code {c}\r\n"),
                            (None, Some(name)) => eprint!("\r\nagentplane: {shown} was killed by {name}\r\n"),
                            (None, None) => eprint!("\r\nagentplane: {shown} ended\r\n"),
                        }
                    }
                    Ok(ControlMessage::Gap { from, to }) => {
                        eprint!("\r\nagentplane: {} bytes of the output of {shown} were lost\r\n", to.saturating_sub(from));
                    }
                    Ok(ControlMessage::Error { message }) => eprint!("\r\nagentplane: {shown}: {message}\r\n"),
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    drop(raw);
                    anyhow::bail!("the connection to {shown} was lost: {e}");
                }
            },
        }
    }
    drop(raw);
    Ok(code)
}

fn control(message: &ControlMessage) -> Message {
    Message::Text(serde_json::to_string(message).expect("control messages serialize").into())
}
