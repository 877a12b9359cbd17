//! Scenarios of the Session reconcile against a fake node agent (see
//! `node_agent::fake`): messages and replies delivered exactly once, also across a
//! controller restart (a new reconciler that knows only the written status), and a
//! reply never given to a request it was not written for.

use std::sync::Arc;

use agentplane_crds::{Session, SessionPhase};

use super::{SessionInput, SessionReconciler, node_session_id};
use crate::node_agent::NodeAgent;
use crate::node_agent::fake::FakeNodeAgent;
use crate::sandboxes::Sandboxes;

const UID: &str = "7f1e2d3c-aaaa-4bbb-8ccc-ddddeeeeffff";

struct Scene {
    fake: Arc<FakeNodeAgent>,
    sandboxes: Arc<Sandboxes>,
    reconciler: SessionReconciler,
    session: Session,
}

impl Scene {
    fn new(spec: &str) -> Scene {
        let fake = FakeNodeAgent::new();
        let sandboxes = Arc::new(Sandboxes::new());
        sandboxes.insert_node("local", Arc::clone(&fake) as Arc<dyn NodeAgent>, None);
        let yaml = format!(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Session\nmetadata: {{name: chat, namespace: default, uid: {UID}, generation: 1}}\nspec: {spec}\n"
        );
        let reconciler = SessionReconciler::new(Arc::clone(&sandboxes));
        Scene { fake, sandboxes, reconciler, session: serde_yaml_ng::from_str(&yaml).unwrap() }
    }

    async fn pass(&mut self) {
        self.pass_with_env(&[]).await;
    }

    /// One reconcile, the store having resolved the env to `env`.
    async fn pass_with_env(&mut self, env: &[(&str, &str)]) {
        let input = SessionInput {
            session: &self.session,
            env: Ok(env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            spec_problem: None,
            git_credentials: Ok(None),
            mcp_servers: Ok(Vec::new()),
        };
        let reconciled = self.reconciler.reconcile(input).await;
        self.session.status = Some(reconciled.status);
    }

    /// A scene whose reconciler keeps conversations in `dir` (as the directory store's).
    fn keeping(spec: &str, dir: &std::path::Path) -> Scene {
        let mut scene = Scene::new(spec);
        let conversations = Arc::new(crate::conversations::Conversations::new(dir.to_path_buf()));
        scene.reconciler = SessionReconciler::keeping(Arc::clone(&scene.sandboxes), conversations);
        scene
    }

    fn durable(&self) -> Option<(String, String)> {
        let status = self.session.status.as_ref()?;
        crate::conditions::get(&status.conditions, super::DURABLE).map(|c| (c.reason.clone(), c.message.clone()))
    }

    /// The controller restarts: a new reconciler, knowing only the written status.
    fn restart_controller(&mut self) {
        self.reconciler = SessionReconciler::new(Arc::clone(&self.sandboxes));
    }

    fn id(&self) -> String {
        node_session_id(UID)
    }

    fn declare(&mut self, yaml: &str) {
        self.session.spec = serde_yaml_ng::from_str(yaml).unwrap();
        self.session.metadata.generation = self.session.metadata.generation.map(|g| g + 1);
    }
}

#[tokio::test]
async fn each_message_is_delivered_once_in_order_also_across_a_controller_restart() {
    let mut scene = Scene::new("{agent: mock, messages: [one, two]}");
    scene.pass().await;
    assert_eq!(scene.fake.count("create_session"), 1);
    assert_eq!(scene.fake.messages(&scene.id()), ["one", "two"]);
    scene.fake.finish_turn(&scene.id());
    scene.pass().await;
    assert_eq!(scene.session.status.as_ref().unwrap().delivered_messages, 2);

    scene.restart_controller();
    scene.fake.take_calls();
    scene.pass().await;
    scene.pass().await;
    assert_eq!(scene.fake.count("send_message"), 0, "nothing sent again: {:?}", scene.fake.take_calls());
    assert_eq!(scene.fake.count("create_session"), 0, "the session found, not made again");

    scene.declare("{agent: mock, messages: [one, two, three]}");
    scene.pass().await;
    scene.restart_controller();
    scene.pass().await;
    assert_eq!(scene.fake.messages(&scene.id()), ["one", "two", "three"]);
}

#[tokio::test]
async fn a_reply_is_given_once_to_the_request_it_names_also_across_a_controller_restart() {
    let mut scene = Scene::new("{agent: mock, messages: [go]}");
    scene.pass().await;
    scene.fake.ask_permission(&scene.id(), "perm-1");
    scene.pass().await;
    let status = scene.session.status.clone().unwrap();
    assert_eq!(status.phase, Some(SessionPhase::AwaitingInput));
    assert_eq!(status.pending_permissions.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), ["perm-1"]);

    scene.declare("{agent: mock, messages: [go], replies: [{id: perm-1, decision: once}]}");
    scene.pass().await;
    assert_eq!(scene.fake.replies(&scene.id()), [("perm-1".to_string(), "Once".to_string())]);
    assert_eq!(scene.session.status.as_ref().unwrap().answered_replies, ["perm-1"]);

    scene.restart_controller();
    scene.pass().await;
    scene.pass().await;
    assert_eq!(scene.fake.count("reply_permission"), 1, "answered once: {:?}", scene.fake.take_calls());
}

#[tokio::test]
async fn a_reply_for_a_request_never_asked_is_refused_for_good_and_never_answers_a_later_one() {
    let mut scene = Scene::new("{agent: mock, messages: [go], replies: [{id: q-9, answers: [[a]]}]}");
    scene.pass().await;
    assert_eq!(scene.session.status.as_ref().unwrap().refused_replies, ["q-9"]);
    // A question that arrives later under that id is not answered by it.
    scene.fake.ask_question(&scene.id(), "q-9");
    scene.pass().await;
    scene.restart_controller();
    scene.pass().await;
    assert!(scene.fake.replies(&scene.id()).is_empty(), "{:?}", scene.fake.replies(&scene.id()));
    let status = scene.session.status.clone().unwrap();
    assert_eq!(status.phase, Some(SessionPhase::AwaitingInput));
    assert_eq!(status.pending_questions.len(), 1);
}

#[tokio::test]
async fn an_ended_session_is_ended_on_its_node_agent_once_and_cleanup_tolerates_it_gone() {
    let mut scene = Scene::new("{agent: mock, messages: [go]}");
    scene.pass().await;
    scene.declare("{agent: mock, messages: [go], ended: true}");
    scene.pass().await;
    scene.pass().await;
    assert_eq!(scene.session.status.as_ref().unwrap().phase, Some(SessionPhase::Ended));
    assert_eq!(scene.fake.count("end_session"), 1);
    scene.reconciler.cleanup(&scene.session).await.unwrap();
    // Unreachable: not done, so the store keeps trying.
    scene.fake.set_unreachable(true);
    assert!(scene.reconciler.cleanup(&scene.session).await.is_err());
}

/// Typed into the inspector, then `agentplane send`: the declared message is still
/// delivered, by its index, and the inspector's is shown as given through the API.
#[tokio::test]
async fn a_message_given_through_the_api_never_makes_a_declared_one_count_as_sent() {
    let mut scene = Scene::new("{agent: mock, messages: [one]}");
    scene.pass().await;
    scene.fake.finish_turn(&scene.id());
    scene.fake.api_message(&scene.id(), "typed in the browser");
    scene.fake.finish_turn(&scene.id());
    scene.pass().await;
    scene.declare("{agent: mock, messages: [one, two]}");
    scene.pass().await;
    scene.restart_controller();
    scene.pass().await;
    assert_eq!(scene.fake.messages(&scene.id()), ["one", "typed in the browser", "two"]);
    let status = scene.session.status.clone().unwrap();
    assert_eq!((status.delivered_messages, status.api_messages), (2, 1));
}

/// "Allow once" clicked in the inspector: a declared reply for that request is not
/// taken as given (it is shown as answered through the API), and a declared reply for
/// a later request is given to it.
#[tokio::test]
async fn a_reply_given_through_the_api_is_told_apart_and_a_later_declared_reply_is_given() {
    use agentplane_node_agent::universal::PermissionReply;
    let mut scene = Scene::new("{agent: mock, messages: [go]}");
    scene.pass().await;
    scene.fake.ask_permission(&scene.id(), "perm-1");
    scene.fake.api_reply_permission(&scene.id(), "perm-1", PermissionReply::Once);
    scene.fake.ask_permission(&scene.id(), "perm-2");
    scene.declare(
        "{agent: mock, messages: [go], replies: [{id: perm-1, decision: reject}, {id: perm-2, decision: once}]}",
    );
    scene.pass().await;
    scene.pass().await;
    let status = scene.session.status.clone().unwrap();
    assert_eq!(status.answered_replies, ["perm-2"]);
    assert_eq!(status.answered_through_api, ["perm-1"]);
    assert_eq!(
        scene.fake.replies(&scene.id()),
        [("perm-1".to_string(), "Once".to_string()), ("perm-2".to_string(), "Once".to_string())]
    );
}

/// A failed turn sets `TurnSucceeded` False with the agent's words (`get`'s REASON),
/// counted apart from delivery, until a turn succeeds.
#[tokio::test]
async fn a_failed_turn_is_a_reason_until_the_next_turn_succeeds() {
    use crate::conditions;
    let mut scene = Scene::new("{agent: mock, messages: [fix the failing test]}");
    scene.pass().await;
    scene.fake.fail_turn(&scene.id(), "getaddrinfo ENOTFOUND api.anthropic.com");
    scene.pass().await;
    let status = scene.session.status.clone().unwrap();
    assert_eq!((status.delivered_messages, status.failed_turns), (1, 1));
    let explaining = conditions::explaining(Some("Idle"), &status.conditions).expect("a reason");
    assert_eq!(explaining.reason, "TurnFailed");
    assert!(explaining.message.contains("ENOTFOUND"), "{}", explaining.message);

    scene.declare("{agent: mock, messages: [fix the failing test, try again]}");
    scene.pass().await;
    scene.fake.finish_turn(&scene.id());
    scene.pass().await;
    let status = scene.session.status.clone().unwrap();
    assert_eq!(status.failed_turns, 1);
    assert!(conditions::explaining(Some("Idle"), &status.conditions).is_none(), "{:?}", status.conditions);
}

/// An env file filled in after the session started: the agent is restarted once with
/// the new environment (the node agent resumes its conversation between turns), and
/// never again while it stays the same, across a controller restart too. The status
/// keeps a digest, never a value.
#[tokio::test]
async fn a_changed_env_restarts_the_agent_with_it_once() {
    let mut scene = Scene::new("{agent: mock, messages: [hello]}");
    scene.pass_with_env(&[("ANTHROPIC_API_KEY", "sk-placeholder")]).await;
    let created = scene.session.status.clone().unwrap();
    let digest = created.env_digest.clone().expect("a digest of the env it was created with");
    assert!(!digest.contains("sk-placeholder"));
    scene.pass_with_env(&[("ANTHROPIC_API_KEY", "sk-placeholder")]).await;
    assert!(scene.fake.restarts(&scene.id()).is_empty(), "the same env restarts nothing");

    scene.pass_with_env(&[("ANTHROPIC_API_KEY", "sk-real")]).await;
    let restarts = scene.fake.restarts(&scene.id());
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    assert_eq!(restarts[0].as_ref().unwrap()["ANTHROPIC_API_KEY"], "sk-real");
    let status = scene.session.status.clone().unwrap();
    assert_ne!(status.env_digest.as_ref(), Some(&digest));
    assert!(status.env_changed_at.is_some());
    scene.restart_controller();
    scene.pass_with_env(&[("ANTHROPIC_API_KEY", "sk-real")]).await;
    assert_eq!(scene.fake.restarts(&scene.id()).len(), 1, "restarted once");
}

/// `agentplane restart` of a session that has not failed restarts its agent (with the
/// env as it is now), once per request; an ended one is left alone.
#[tokio::test]
async fn restart_of_a_live_session_restarts_its_agent_once_per_request() {
    let mut scene = Scene::new("{agent: mock, messages: [hello]}");
    scene.pass_with_env(&[("K", "v")]).await;
    scene.fake.finish_turn(&scene.id());
    let annotations = &mut scene.session.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(crate::restart::RESTARTED_AT.to_string(), "2026-11-28T20:00:00Z".to_string());
    scene.pass_with_env(&[("K", "v")]).await;
    scene.pass_with_env(&[("K", "v")]).await;
    assert_eq!(scene.fake.restarts(&scene.id()).len(), 1);
    assert_eq!(scene.session.status.as_ref().unwrap().restarted_at.as_deref(), Some("2026-11-28T20:00:00Z"));

    scene.declare("{agent: mock, messages: [hello], ended: true}");
    scene.pass_with_env(&[("K", "v")]).await;
    let annotations = &mut scene.session.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(crate::restart::RESTARTED_AT.to_string(), "2026-11-28T21:00:00Z".to_string());
    scene.pass_with_env(&[("K", "v")]).await;
    assert_eq!(scene.fake.restarts(&scene.id()).len(), 1, "an ended session is not restarted");
}

/// A session whose sandbox sleeps for being idle wakes it when it has something for
/// it (a message, a reply, an end), and only then; one suspended by its spec is never
/// woken from here.
#[tokio::test]
async fn only_work_for_it_wakes_a_suspended_sandbox() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut scene = Scene::new("{agent: mock, messages: [one]}");
    scene.pass().await;
    scene.fake.finish_turn(&scene.id());
    scene.pass().await;
    assert_eq!(scene.session.status.as_ref().unwrap().delivered_messages, 1);

    let woken = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&woken);
    let waker: crate::sandboxes::Waker = Arc::new(move || {
        count.fetch_add(1, Ordering::SeqCst);
    });
    scene.sandboxes.set_suspended("local", "idle", Some(waker));
    scene.pass().await;
    assert_eq!(woken.load(Ordering::SeqCst), 0, "nothing to deliver: it sleeps on");
    let status = scene.session.status.clone().unwrap();
    assert_eq!(status.phase, Some(SessionPhase::Idle), "its last known phase stays");
    assert!(status.conditions.iter().any(|c| c.reason == "SandboxSuspended"), "{:?}", status.conditions);

    scene.declare("{agent: mock, messages: [one, two]}");
    scene.pass().await;
    assert_eq!(woken.load(Ordering::SeqCst), 1, "a new message wakes it");

    scene.declare("{agent: mock, messages: [one], ended: true}");
    scene.pass().await;
    assert_eq!(woken.load(Ordering::SeqCst), 2, "so does an end to record");

    // A turn it was stopped in the middle of (a message that arrived as it was being
    // suspended) wakes it too, to finish.
    scene.declare("{agent: mock, messages: [one]}");
    scene.session.status.as_mut().unwrap().phase = Some(SessionPhase::Running);
    scene.pass().await;
    assert_eq!(woken.load(Ordering::SeqCst), 3, "a turn cut short wakes it");

    scene.sandboxes.set_suspended("local", "spec.suspend", None);
    scene.declare("{agent: mock, messages: [one, two, three]}");
    scene.pass().await;
    assert_eq!(woken.load(Ordering::SeqCst), 3, "held by its spec: never woken from here");
    assert_eq!(scene.fake.messages(&scene.id()), ["one"], "nothing reached the sleeping node agent");
}

#[tokio::test]
async fn a_conversation_kept_after_each_turn_continues_in_a_sandbox_that_replaced_its_own() {
    let kept = tempfile::tempdir().unwrap();
    let mut scene = Scene::keeping("{agent: mock, messages: [one]}", kept.path());
    scene.pass().await;
    assert_eq!(scene.fake.count("conversation"), 0, "not kept in the middle of a turn");
    scene.fake.finish_turn(&scene.id());
    scene.pass().await;
    assert_eq!(scene.fake.count("conversation"), 1, "kept once the turn ended");
    let (reason, message) = scene.durable().expect("a Durable condition");
    assert_eq!(reason, "Kept", "{message}");
    assert!(message.contains("through event 2"), "{message}");
    scene.pass().await;
    assert_eq!(scene.fake.count("conversation"), 1, "nothing new: not packed again");

    // A new sandbox, whose node agent knows nothing of the session: what was kept is
    // staged before the session is made, and the message already taken is not sent again.
    scene.fake.replace();
    scene.fake.take_calls();
    scene.pass().await;
    let calls = scene.fake.take_calls();
    let id = scene.id();
    let at = |call: &str| calls.iter().position(|c| *c == format!("{call} {id}"));
    assert!(at("stage_conversation").unwrap() < at("create_session").unwrap(), "{calls:?}");
    assert_eq!(scene.fake.messages(&id), ["one"], "delivered once across both sandboxes");
    assert_eq!(scene.session.status.as_ref().unwrap().delivered_messages, 1);
    assert_eq!(scene.durable().unwrap().0, "Continued");
    assert_eq!(scene.fake.session(&id).unwrap().last_sequence, 2, "its events go on");
    scene.declare("{agent: mock, messages: [one, two]}");
    scene.pass().await;
    assert_eq!(scene.fake.messages(&id), ["one", "two"]);

    // The Session deleted: what was kept goes with it.
    scene.reconciler.cleanup(&scene.session).await.unwrap();
    assert_eq!(std::fs::read_dir(kept.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_store_that_keeps_nothing_starts_a_replaced_sandboxs_session_anew() {
    let mut scene = Scene::new("{agent: mock, messages: [one]}");
    scene.pass().await;
    scene.fake.finish_turn(&scene.id());
    scene.pass().await;
    assert_eq!((scene.fake.count("conversation"), scene.durable()), (0, None));
    scene.fake.replace();
    scene.pass().await;
    assert_eq!(scene.fake.count("stage_conversation"), 0);
    assert_eq!(scene.fake.messages(&scene.id()), ["one", "one"], "a new conversation is sent its messages again");
}
