//! `agentplane describe`: one resource, its spec and status in `Label: value` lines
//! as kubectl's, its conditions, and what others report of it.

use agentplane_crds::{Key, Object, ResourceRef};

use super::DescribeArgs;
use super::columns::{command_line, enum_word, process_phase, source};
use super::layout::{Describe, one_line, print_indented_table};
use super::liveness::{FINAL_PHASES, staleness, stopped_cleanly};
use super::place::{namespace_flag, require, store_flags};
use super::reported::{print_events, print_output_tail};
use crate::printing::{age_of, shell_quote};
use crate::store::Store;
use crate::workspace::{parse_kind, parse_one};

pub async fn describe(args: DescribeArgs) -> anyhow::Result<i32> {
    let store = Store::open(&args.store).await?;
    let words = &args.resource;
    let (kind, name) = match words.as_slice() {
        [one] => {
            let ResourceRef { kind, name } =
                one.parse().map_err(|_| anyhow::anyhow!("{one:?}: expected KIND NAME or KIND/NAME"))?;
            (kind, name)
        }
        _ => {
            let kind = parse_kind(&words[0])?;
            (kind, parse_one(&words[1..], kind)?)
        }
    };
    let key = Key { kind, namespace: store.namespace(args.namespace.as_deref()), name };
    let object = require(&store, &args.store, &key).await?;
    let stale = staleness(&store, &args.store);
    // Hints are meant to be pasted: they carry the flags this was run with.
    let hint_flags = format!("{}{}", namespace_flag(&store, &key.namespace), store_flags(&args.store));
    let phase_word = |phase: String| match &stale {
        Some(_) if !FINAL_PHASES.contains(&phase.as_str()) => format!("{phase}? (as of when agentplane up last ran)"),
        _ => phase,
    };
    let mut out = Describe::default();
    if let Some(line) = &stale {
        out.text.push_str(&format!("Note: {line}\n"));
    }
    let meta = object.meta();
    out.field(0, "Name", meta.name.clone().unwrap_or_default());
    out.field(0, "Namespace", key.namespace.clone());
    out.field(0, "Kind", object.kind().to_string());
    out.field(0, "UID", meta.uid.clone().unwrap_or_default());
    out.field(0, "Generation", meta.generation.map(|g| g.to_string()).unwrap_or_default());
    if let Some(created) = &meta.creation_timestamp {
        out.field(0, "Created", format!("{} ({} ago)", created.0, age_of(created)));
    }
    if let Some(deleting) = &meta.deletion_timestamp {
        out.field(0, "Deleting", format!("since {} (the cleanup is not done yet)", deleting.0));
    }
    match source(meta).as_deref().and_then(|s| s.rsplit_once('#')) {
        Some((file, document)) => out.field(0, "Source", format!("{file} (document {document})")),
        None => out.field(0, "Source", "<none>".into()),
    }
    out.map(0, "Labels", meta.labels.as_ref());
    let annotations = meta.annotations.clone().map(|mut a| {
        a.remove(agentplane_controller::annotations::SOURCE);
        a
    });
    out.map(0, "Annotations", annotations.as_ref());
    let mut conditions = Vec::new();
    match &object {
        Object::SandboxTemplate(t) => {
            out.section("Spec");
            out.field(1, "TTL after finished", format!("{}s", t.spec.ttl_seconds_after_finished));
            out.field(1, "Sandbox", serde_json::to_string(&t.spec.sandbox).unwrap_or_default());
        }
        Object::SandboxWarmPool(p) => {
            out.section("Spec");
            out.field(1, "Template", p.spec.template.clone());
            out.field(1, "Replicas", p.spec.replicas.to_string());
            if let Some(status) = &p.status {
                out.section("Status");
                out.field(1, "Unclaimed", status.replicas.to_string());
                out.field(1, "Ready", status.ready_replicas.to_string());
                for name in &status.sandboxes {
                    out.field(2, "Sandbox", name.clone());
                }
                conditions = status.conditions.clone();
            }
        }
        Object::Process(p) => {
            let spec = &p.spec;
            out.section("Spec");
            out.field(1, "Command", command_line(&spec.command, &spec.args));
            out.field(
                1,
                "Sandbox",
                spec.sandbox_template.as_ref().map_or_else(|| spec.sandbox.clone(), |t| format!("from template {t}")),
            );
            out.optional(1, "Working dir", spec.cwd.clone());
            out.field(
                1,
                "Terminal",
                spec.tty.map(|t| format!("{}x{}", t.cols, t.rows)).unwrap_or_else(|| "no (pipes)".into()),
            );
            out.field(1, "Stdin", if spec.stdin || spec.tty.is_some() { "open".into() } else { "closed".into() });
            let env: Vec<&str> = spec.env.iter().map(|e| e.name.as_str()).collect();
            if !env.is_empty() {
                out.field(1, "Env", env.join(", "));
            }
            if !spec.env_from.is_empty() {
                let from: Vec<String> = spec
                    .env_from
                    .iter()
                    .filter_map(|e| {
                        e.file.clone().or_else(|| e.secret_ref.as_ref().map(|s| format!("secret {}", s.name)))
                    })
                    .collect();
                out.field(1, "Env from", from.join(", "));
            }
            out.optional(1, "Tag", spec.tag.clone());
            out.optional(1, "Session", spec.session_ref.clone());
            out.field(1, "Desired state", enum_word(&spec.desired_state));
            out.field(1, "Restart policy", enum_word(&spec.restart_policy));
            out.optional(1, "Stop signal", spec.stop_signal.clone());
            out.optional(1, "Stop timeout", spec.stop_timeout_seconds.map(|s| format!("{s}s")));
            if let Some(status) = &p.status {
                out.section("Status");
                let clean = stopped_cleanly(&store);
                let (phase, _, pid_is_real) =
                    process_phase(status.phase.map(|p| format!("{p:?}")), &status.conditions, clean);
                let phase = match phase {
                    Some(p) if !pid_is_real => Some(format!("{p} (agentplane up stopped it when it stopped)")),
                    other => other.map(phase_word),
                };
                out.optional(1, "Phase", phase);
                out.optional(1, "Observed generation", status.observed_generation.map(|g| g.to_string()));
                out.optional(1, "PID", status.pid.filter(|_| pid_is_real).map(|p| p.to_string()));
                out.optional(1, "Exit code", status.exit_code.map(|c| c.to_string()));
                out.optional(1, "Signal", status.signal.clone());
                out.optional(1, "Started", status.started_at.as_ref().map(|t| format!("{} ({} ago)", t.0, age_of(t))));
                out.optional(1, "Exited", status.exited_at.as_ref().map(|t| format!("{} ({} ago)", t.0, age_of(t))));
                out.field(1, "Restarts", status.restarts.to_string());
                out.optional(1, "Connect URL", status.connect_url.clone());
                conditions = status.conditions.clone();
            }
        }
        Object::Session(s) => {
            let spec = &s.spec;
            out.section("Spec");
            out.field(1, "Agent", enum_word(&spec.agent));
            out.optional(1, "Agent version", spec.agent_version.clone());
            out.optional(1, "Agent mode", spec.agent_mode.clone());
            out.field(1, "Permission mode", enum_word(&spec.permission_mode));
            out.optional(1, "Model", spec.model.clone());
            out.optional(1, "Variant", spec.variant.clone());
            out.field(
                1,
                "Sandbox",
                spec.sandbox_template.as_ref().map_or_else(|| spec.sandbox.clone(), |t| format!("from template {t}")),
            );
            out.optional(1, "Working dir", spec.working_dir.clone());
            if let Some(git) = spec.workspace.as_ref().and_then(|w| w.git.as_ref()) {
                let at = git.git_ref.as_deref().map(|r| format!(" at {r}")).unwrap_or_default();
                out.field(1, "Workspace", format!("{}{at}", git.url));
            }
            let env: Vec<&str> = spec.env.iter().map(|e| e.name.as_str()).collect();
            if !env.is_empty() {
                out.field(1, "Env", env.join(", "));
            }
            out.field(1, "Messages", spec.messages.len().to_string());
            for (i, message) in spec.messages.iter().enumerate() {
                out.field(2, &format!("{}", i + 1), one_line(message, 70));
            }
            out.field(1, "Replies", spec.replies.len().to_string());
            if spec.ended {
                out.field(1, "Ended", "yes".into());
            }
            if let Some(status) = &s.status {
                out.section("Status");
                out.optional(1, "Phase", status.phase.map(|p| phase_word(format!("{p:?}"))));
                out.optional(1, "Observed generation", status.observed_generation.map(|g| g.to_string()));
                out.optional(1, "Agent session", status.agent_session_id.clone());
                out.field(1, "Delivered", format!("{} of {}", status.delivered_messages, spec.messages.len()));
                if status.api_messages > 0 {
                    out.field(
                        1,
                        "Through the API",
                        format!(
                            "{} message{} (from the inspector or a program, not in spec.messages)",
                            status.api_messages,
                            if status.api_messages == 1 { "" } else { "s" }
                        ),
                    );
                }
                if status.failed_turns > 0 {
                    out.field(1, "Failed turns", status.failed_turns.to_string());
                }
                if !status.answered_through_api.is_empty() {
                    out.field(
                        1,
                        "Answered elsewhere",
                        format!(
                            "{} (answered through the API first: those replies were not given)",
                            status.answered_through_api.join(", ")
                        ),
                    );
                }
                out.optional(
                    1,
                    "Env changed",
                    status.env_changed_at.as_ref().map(|at| {
                        format!(
                            "{} ago: the agent was restarted with the new environment, resuming its conversation",
                            crate::printing::age_of(at)
                        )
                    }),
                );
                out.optional(1, "Tokens", status.usage.map(|u| tokens_line(&u)));
                if let Some(workspace) = &status.workspace {
                    out.optional(1, "Workspace", workspace.path.clone());
                    out.optional(2, "Commit", workspace.commit.clone());
                    for file in &workspace.changed_files {
                        let from = file.from.as_deref().map(|f| format!(" (from {f})")).unwrap_or_default();
                        out.field(2, "Changed", format!("{} {}{from}", enum_word(&file.status), file.path));
                    }
                    if workspace.changed_files_truncated {
                        out.field(2, "Changed", "... more (agentplane diff shows them all)".into());
                    }
                }
                for question in &status.pending_questions {
                    let texts: Vec<&str> = question.questions.iter().map(|q| q.question.as_str()).collect();
                    out.field(
                        1,
                        "Question",
                        format!(
                            "{}: {} (agentplane reply session/{} {} --answer ...{hint_flags})",
                            question.id,
                            texts.join(" / "),
                            shell_quote(&key.name),
                            shell_quote(&question.id)
                        ),
                    );
                }
                for permission in &status.pending_permissions {
                    let summary = permission.summary.clone().unwrap_or_default();
                    out.field(
                        1,
                        "Permission",
                        format!(
                            "{}: {} {summary} (agentplane reply session/{} {} --decision once{hint_flags})",
                            permission.id,
                            permission.tool,
                            shell_quote(&key.name),
                            shell_quote(&permission.id)
                        ),
                    );
                }
                out.optional(1, "Events URL", status.events_url.clone());
                conditions = status.conditions.clone();
            }
        }
        Object::Sandbox(s) => {
            out.section("Spec");
            out.field(
                1,
                "Endpoint",
                s.spec.endpoint.clone().unwrap_or_else(|| "(none: managed by the controller)".into()),
            );
            out.optional(1, "Token secret", s.spec.token_secret_ref.as_ref().map(|r| format!("{}/{}", r.name, r.key)));
            for agent in &s.spec.agents {
                out.field(
                    1,
                    "Agent",
                    format!("{} {}", enum_word(&agent.agent), agent.version.clone().unwrap_or_default()),
                );
            }
            if s.spec.is_managed() {
                out.field(1, "Isolation", s.spec.isolation.map_or("bubblewrap (default)".into(), |i| enum_word(&i)));
                out.field(1, "Network", enum_word(&s.spec.network));
                for allowed in &s.spec.allow {
                    out.field(1, "Allow", allowed.clone());
                }
                for credential in &s.spec.credentials {
                    out.field(1, "Credential", format!("{} -> {}", credential.name, credential.hosts.join(", ")));
                }
                out.optional(1, "Workspace", s.spec.workspace.clone());
                if s.spec.suspend {
                    out.field(1, "Suspend", "true (held suspended until it is false)".to_string());
                }
                out.optional(1, "Idle timeout", s.spec.idle_timeout_seconds.map(|t| format!("{t}s (then suspended)")));
                for bind in &s.spec.binds {
                    let inside = bind.path.clone().unwrap_or_else(|| bind.host_path.clone());
                    let how = if bind.writable { "writable" } else { "read-only" };
                    out.field(1, "Bind", format!("{} -> {inside} ({how})", bind.host_path));
                }
            }
            if let Some(status) = &s.status {
                out.section("Status");
                out.optional(1, "Phase", status.phase.map(|p| enum_word(&p)));
                out.optional(1, "Runs on", status.runs_on.clone());
                if s.spec.is_managed() {
                    out.optional(1, "Endpoint", status.endpoint.clone());
                }
                out.optional(1, "Started", status.started_at.as_ref().map(|t| format!("{} ({} ago)", t.0, age_of(t))));
                out.optional(
                    1,
                    "Suspended",
                    status.suspended_at.as_ref().map(|t| format!("{} ({} ago)", t.0, age_of(t))),
                );
                if status.restarts > 0 {
                    out.field(1, "Restarts", status.restarts.to_string());
                }
                if let Some(uid) = status.host_uid {
                    out.field(1, "User", format!("uid 1000 in a user namespace of its own; host uid {uid}"));
                }
                out.optional(1, "Seccomp", status.seccomp.clone());
                for limit in &status.applied_limits {
                    out.field(1, "Limit", limit.clone());
                }
                if status.isolation.as_deref() == Some("bubblewrap")
                    && let Ok(bytes) = agentplane_controller::dir::managed::cgroup::tmp_bytes(s.spec.limits.as_ref())
                {
                    out.field(1, "Tmp", format!("{} MiB (a tmpfs of that size)", bytes >> 20));
                }
                if s.spec.network == agentplane_crds::NetworkMode::Allowlist {
                    out.field(1, "Denied connections", status.denied_connections.to_string());
                    for denied in &status.last_denied {
                        out.field(2, "Denied", denied.clone());
                    }
                }
                for credential in &status.credentials {
                    out.field(
                        1,
                        "Credential",
                        format!(
                            "{}: {} sent to {}, {} blocked elsewhere",
                            credential.name,
                            credential.sent,
                            credential.hosts.join(", "),
                            credential.blocked
                        ),
                    );
                }
                out.optional(1, "Claimed by", status.claimed_by.clone());
                out.optional(1, "Node agent version", status.node_agent_version.clone());
                out.optional(
                    1,
                    "Last heartbeat",
                    status.last_heartbeat.as_ref().map(|t| format!("{} ({} ago)", t.0, age_of(t))),
                );
                for (agent, version) in &status.installed_agents {
                    out.field(1, "Installed", format!("{} {version}", enum_word(agent)));
                }
                conditions = status.conditions.clone();
            }
        }
    }
    print!("{}", out.text);
    println!("Conditions:");
    let rows: Vec<Vec<String>> = conditions
        .iter()
        .map(|c| {
            vec![
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
                age_of(&c.last_transition_time),
            ]
        })
        .collect();
    print_indented_table(&["TYPE", "STATUS", "REASON", "MESSAGE", "AGE"], &rows);
    if let Object::Process(p) = &object {
        print_output_tail(store.output_source(&object).await, p, args.tail).await;
    }
    print_events(store.events(&object).await);
    Ok(0)
}

/// A Session's usage in one line: `1200 in, 340 out, 5000 cache read, 0 cache write, $0.0123`.
fn tokens_line(usage: &agentplane_crds::SessionUsage) -> String {
    let mut line = format!(
        "{} in, {} out, {} cache read, {} cache write",
        usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens
    );
    if let Some(cost) = usage.cost_usd {
        line.push_str(&format!(", ${cost:.4}"));
    }
    line
}
