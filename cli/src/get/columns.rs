//! The table columns of each kind, as the CRDs' printer columns name them (kubectl's),
//! and the cells they are made of.

use agentplane_controller::conditions::{self, READY, VALID};
use agentplane_crds::{Kind, Object};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};

use super::liveness::FINAL_PHASES;
use crate::printing::age_of;

/// The table of one kind.
pub(super) struct Columns {
    pub(super) kind: Kind,
    pub(super) wide: bool,
    pub(super) namespaces: bool,
    /// No `up` keeps the records current: phases that claim life are marked.
    pub(super) stale: std::cell::Cell<bool>,
    /// The last `up` stopped cleanly, and stopped every process as it went: a Process
    /// it left Running is Stopped, whatever its record says.
    pub(super) stopped_cleanly: std::cell::Cell<bool>,
}

impl Columns {
    pub(super) fn headers(&self) -> Vec<&'static str> {
        let mut headers = if self.namespaces { vec!["NAMESPACE"] } else { vec![] };
        headers.extend(match self.kind {
            Kind::Process => vec!["NAME", "PHASE", "REASON", "COMMAND", "RESTARTS", "EXIT", "AGE"],
            Kind::Session => vec!["NAME", "PHASE", "REASON", "AGENT", "MODEL", "DELIVERED", "AGE"],
            Kind::Sandbox => {
                vec!["NAME", "PHASE", "READY", "REASON", "ISOLATION", "NETWORK", "CLAIMED BY", "ENDPOINT", "AGE"]
            }
            Kind::SandboxTemplate => vec!["NAME", "ISOLATION", "NETWORK", "TTL", "AGE"],
            Kind::SandboxWarmPool => vec!["NAME", "TEMPLATE", "REPLICAS", "READY", "AGE"],
        });
        if self.wide {
            headers.extend(match self.kind {
                Kind::Process => vec!["SANDBOX", "PID", "SOURCE", "READY"],
                Kind::Session => vec!["SANDBOX", "AGENT SESSION", "SOURCE"],
                Kind::Sandbox => vec!["VERSION", "RESTARTS", "DENIED", "SOURCE"],
                Kind::SandboxTemplate => vec!["SOURCE"],
                Kind::SandboxWarmPool => vec!["SANDBOXES", "SOURCE"],
            });
        }
        headers
    }

    pub(super) fn row(&self, object: &Object) -> Vec<String> {
        let meta = object.meta();
        let mut row = if self.namespaces { vec![meta.namespace.clone().unwrap_or_default()] } else { vec![] };
        row.push(meta.name.clone().unwrap_or_default());
        let age = meta.creation_timestamp.as_ref().map(age_of).unwrap_or_default();
        let source = source(meta).unwrap_or_default();
        match object {
            Object::Process(p) => {
                let status = p.status.clone().unwrap_or_default();
                let (phase, reason, pid_is_real) = process_phase(
                    status.phase.map(|p| format!("{p:?}")),
                    &status.conditions,
                    self.stopped_cleanly.get(),
                );
                let exit = match (status.exit_code, &status.signal) {
                    (Some(code), _) => code.to_string(),
                    (None, Some(signal)) => signal.clone(),
                    (None, None) => String::new(),
                };
                row.extend([
                    self.phase_cell(meta, phase, &status.conditions),
                    reason,
                    command_line(&p.spec.command, &p.spec.args),
                    status.restarts.to_string(),
                    exit,
                    age,
                ]);
                if self.wide {
                    let ready =
                        conditions::get(&status.conditions, READY).map(|c| c.message.clone()).unwrap_or_default();
                    row.extend([
                        p.placed_sandbox().to_string(),
                        status.pid.filter(|_| pid_is_real).map(|p| p.to_string()).unwrap_or_default(),
                        source,
                        ready,
                    ]);
                }
            }
            Object::Session(s) => {
                let status = s.status.clone().unwrap_or_default();
                let recorded = status.phase.map(|p| format!("{p:?}"));
                // After a clean stop of `up` its agent was stopped with it (the
                // conversation resumes when `up` runs again), as a Process's run was.
                let (phase, reason) = match recorded {
                    Some(p) if self.stopped_cleanly.get() && !FINAL_PHASES.contains(&p.as_str()) && p != "Pending" => {
                        (Some("Stopped".to_string()), "UpStopped".to_string())
                    }
                    recorded => {
                        let reason = reason(recorded.as_deref(), &status.conditions);
                        (recorded, reason)
                    }
                };
                row.extend([
                    self.phase_cell(meta, phase.clone(), &status.conditions),
                    reason,
                    enum_word(&s.spec.agent),
                    s.spec.model.clone().unwrap_or_default(),
                    format!("{}/{}", status.delivered_messages, s.spec.messages.len()),
                    age,
                ]);
                if self.wide {
                    row.extend([
                        s.placed_sandbox().to_string(),
                        status.agent_session_id.clone().unwrap_or_default(),
                        source,
                    ]);
                }
            }
            Object::SandboxTemplate(t) => {
                let sandbox = &t.spec.sandbox;
                row.extend([
                    sandbox.isolation.map_or_else(|| "bubblewrap".to_string(), |i| enum_word(&i)),
                    enum_word(&sandbox.network),
                    format!("{}s", t.spec.ttl_seconds_after_finished),
                    age,
                ]);
                if self.wide {
                    row.push(source);
                }
            }
            Object::SandboxWarmPool(p) => {
                let status = p.status.clone().unwrap_or_default();
                row.extend([
                    p.spec.template.clone(),
                    format!("{}/{}", status.replicas, p.spec.replicas),
                    status.ready_replicas.to_string(),
                    age,
                ]);
                if self.wide {
                    row.extend([status.sandboxes.join(","), source]);
                }
            }
            Object::Sandbox(s) => {
                let status = s.status.clone().unwrap_or_default();
                let ready = conditions::get(&status.conditions, READY).map(|c| c.status.clone());
                let local = meta.name.as_deref() == Some(agentplane_crds::LOCAL_SANDBOX);
                let (phase, isolation, network) = match (&s.spec.endpoint, status.phase) {
                    (Some(_), _) if local => ("Embedded".to_string(), "none".to_string(), "host".to_string()),
                    (Some(_), _) => ("External".to_string(), "external".to_string(), String::new()),
                    // How long it has slept, beside the word.
                    (None, Some(agentplane_crds::SandboxPhase::Suspended)) => (
                        match &status.suspended_at {
                            Some(at) => format!("Suspended ({})", crate::printing::age_of(at)),
                            None => "Suspended".to_string(),
                        },
                        status.isolation.clone().unwrap_or_default(),
                        enum_word(&s.spec.network),
                    ),
                    (None, phase) => (
                        phase.map(|p| enum_word(&p)).unwrap_or_else(|| "Pending".into()),
                        status.isolation.clone().unwrap_or_default(),
                        enum_word(&s.spec.network),
                    ),
                };
                // A managed sandbox stops with the `up` that ran it: after a clean stop it
                // is not ready and serves nothing, whatever its last status said.
                let stopped = self.stopped_cleanly.get() && s.spec.endpoint.is_none();
                let (phase, ready, reason, endpoint) = if stopped {
                    ("Stopped".to_string(), "False".to_string(), "UpStopped".to_string(), String::new())
                } else {
                    (
                        phase,
                        self.phase_cell(meta, ready, &status.conditions),
                        reason(None, &status.conditions),
                        s.endpoint().unwrap_or_default().to_string(),
                    )
                };
                row.extend([
                    phase,
                    ready,
                    reason,
                    isolation,
                    network,
                    status.claimed_by.clone().unwrap_or_default(),
                    endpoint,
                    age,
                ]);
                if self.wide {
                    row.extend([
                        status.node_agent_version.clone().unwrap_or_default(),
                        status.restarts.to_string(),
                        status.denied_connections.to_string(),
                        source,
                    ]);
                }
            }
        }
        row
    }

    /// The phase, or `Terminating` while being cleaned up; a spec that was not taken
    /// says so. Without a running `up`, a phase that claims something is alive or on its
    /// way is only what was true then: `Running?`.
    fn phase_cell(&self, meta: &ObjectMeta, phase: Option<String>, conditions: &[Condition]) -> String {
        let mut cell = if meta.deletion_timestamp.is_some() {
            "Terminating".to_string()
        } else {
            phase.unwrap_or_else(|| "Pending".into())
        };
        if self.stale.get() && !FINAL_PHASES.contains(&cell.as_str()) {
            cell.push('?');
        }
        if conditions::get(conditions, VALID).is_some_and(|c| c.status == "False") {
            cell.push_str(" (invalid spec)");
        }
        cell
    }
}

/// What a Process's row shows of its phase and reason, and whether its pid is real:
/// after a clean stop of `up`, one it left alive was stopped with it.
pub(super) fn process_phase(
    recorded: Option<String>,
    conditions: &[Condition],
    stopped_cleanly: bool,
) -> (Option<String>, String, bool) {
    // Pending never started: what it waits for is still what it waits for.
    let alive = recorded.as_deref().is_some_and(|p| !FINAL_PHASES.contains(&p) && p != "Pending");
    if stopped_cleanly && alive {
        return (Some("Stopped".into()), "UpStopped".into(), false);
    }
    let reason = reason(recorded.as_deref(), conditions);
    (recorded, reason, true)
}

/// Why a resource is not ready or not running, in one word, as `describe` shows it in
/// its conditions (see `conditions::explaining`, which the inspector shares); empty
/// when all is well.
pub(super) fn reason(phase: Option<&str>, conditions: &[Condition]) -> String {
    conditions::explaining(phase, conditions).map(|c| c.reason.clone()).unwrap_or_default()
}

pub(super) fn command_line(command: &str, args: &[String]) -> String {
    const MAX: usize = 40;
    let words: Vec<String> = std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .map(|w| if w.is_empty() || w.contains(char::is_whitespace) { format!("{w:?}") } else { w.to_string() })
        .collect();
    let line = words.join(" ");
    if line.chars().count() > MAX { format!("{}...", line.chars().take(MAX - 3).collect::<String>()) } else { line }
}

/// An enum as the YAML spells it (`claude`, `Always`).
pub(super) fn enum_word<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

pub(super) fn source(meta: &ObjectMeta) -> Option<String> {
    meta.annotations.as_ref()?.get(agentplane_controller::annotations::SOURCE).cloned()
}

#[cfg(test)]
mod tests {
    use agentplane_controller::conditions::{self, READY, VALID};

    use super::reason;

    #[test]
    fn the_reason_is_what_is_wrong_and_nothing_when_all_is_well() {
        let mut c = Vec::new();
        conditions::set(&mut c, READY, true, "Running", "running as pid 1", None);
        conditions::set(&mut c, VALID, true, "Valid", "the spec is in force", None);
        assert_eq!(reason(Some("Running"), &c), "");
        conditions::set(&mut c, READY, false, "BackOff", "restarting in 2s", None);
        assert_eq!(reason(Some("BackOff"), &c), "BackOff", "a phase that is a problem is its own reason");
        conditions::set(&mut c, READY, false, "Succeeded", "exited with code 0", None);
        assert_eq!(reason(Some("Succeeded"), &c), "", "nothing is wrong");
        conditions::set(&mut c, READY, false, "EnvNotResolved", "no claude.env", None);
        assert_eq!(reason(Some("Pending"), &c), "EnvNotResolved");
        conditions::set(&mut c, "RepliesAccepted", false, "ReplyNotPending", "no such request", None);
        assert_eq!(reason(Some("Pending"), &c), "ReplyNotPending", "another condition that is false comes first");
        conditions::set_valid(&mut c, Some("bad field"), None);
        assert_eq!(reason(Some("Pending"), &c), "InvalidSpec", "a spec not taken comes before all");
    }
}
