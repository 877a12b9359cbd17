//! Scenarios of the Process reconcile against a fake node agent (see
//! `node_agent::fake`): each plays what a store and a node agent do, pass by pass, and
//! checks the calls made and the status written. No binary, no apiserver, no network:
//! the whole file runs in milliseconds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agentplane_crds::{DesiredState, Process, ProcessPhase, RestartPolicy};

use super::{Backoff, NODE_AGENT_LOST, ProcessInput, ProcessReconciler, node_process_id};
use crate::conditions::{self, READY};
use crate::node_agent::NodeAgent;
use crate::node_agent::fake::FakeNodeAgent;
use crate::sandboxes::Sandboxes;

const UID: &str = "0b5d7c3e-1111-4222-8333-944455556666";

/// A reconciler on one sandbox, `local`, whose node agent is a fake; and the Process.
struct Scene {
    fake: Arc<FakeNodeAgent>,
    reconciler: ProcessReconciler,
    process: Process,
}

impl Scene {
    fn new(spec: &str) -> Scene {
        let fake = FakeNodeAgent::new();
        let sandboxes = Arc::new(Sandboxes::new());
        sandboxes.insert_node("local", Arc::clone(&fake) as Arc<dyn NodeAgent>, None);
        let mut reconciler = ProcessReconciler::new(sandboxes);
        // Short enough to see in a test, long enough to tell apart.
        reconciler.backoff = Backoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(40),
            reset_after: Duration::from_secs(600),
        };
        let yaml = format!(
            "apiVersion: agentplane.dev/v1alpha1\nkind: Process\nmetadata: {{name: web, namespace: default, uid: {UID}, generation: 1}}\nspec: {spec}\n"
        );
        Scene { fake, reconciler, process: serde_yaml_ng::from_str(&yaml).unwrap() }
    }

    /// One pass, as a store makes it; the status is written back as a store writes it.
    /// Answers when the store is asked to look again.
    async fn pass(&mut self) -> Option<Duration> {
        let input = ProcessInput {
            process: &self.process,
            env: Ok(BTreeMap::new()),
            spec_problem: None,
            session: Ok(None),
            own_node_agent_since: None,
        };
        let reconciled = self.reconciler.reconcile(input).await;
        self.process.status = Some(reconciled.status);
        reconciled.requeue_after
    }

    fn phase(&self) -> Option<ProcessPhase> {
        self.process.status.as_ref()?.phase
    }

    fn ready(&self) -> (String, String) {
        let status = self.process.status.as_ref().unwrap();
        let c = conditions::get(&status.conditions, READY).unwrap();
        (c.status.clone(), c.reason.clone())
    }

    fn restarts(&self) -> u32 {
        self.process.status.as_ref().map_or(0, |s| s.restarts)
    }

    fn id(&self) -> String {
        node_process_id(UID)
    }

    /// The process exited this long ago (the back-off counts from its exit).
    fn exited_ago(&mut self, ago: Duration) {
        self.fake.exited_at(&self.id(), time::OffsetDateTime::now_utc() - ago);
    }
}

#[tokio::test]
async fn a_new_process_is_created_once_with_its_identity_and_then_only_looked_at() {
    let mut scene = Scene::new("{command: sleep, args: ['100']}");
    assert_eq!(scene.pass().await, None);
    assert_eq!(scene.fake.take_calls(), [format!("create_process {}", scene.id())]);
    let created = scene.fake.process(&scene.id()).unwrap();
    assert_eq!(created.annotations.get("agentplane.dev/resource").map(String::as_str), Some("Process/default/web"));
    assert_eq!(created.annotations.get("agentplane.dev/uid").map(String::as_str), Some(UID));
    assert_eq!(scene.phase(), Some(ProcessPhase::Running));
    assert_eq!(scene.ready(), ("True".into(), "Running".into()));
    let status = scene.process.status.clone();
    // Idempotent: the next pass finds it, creates nothing, writes the same status.
    scene.pass().await;
    assert_eq!(scene.fake.take_calls(), [format!("get_process {}", scene.id())]);
    assert_eq!(scene.process.status, status);
}

#[tokio::test]
async fn a_changed_spec_replaces_the_run_and_resets_its_restarts() {
    let mut scene = Scene::new("{command: sleep, args: ['100'], restartPolicy: Always}");
    scene.pass().await;
    scene.fake.exit(&scene.id(), 1);
    scene.pass().await;
    assert_eq!(scene.restarts(), 1);
    scene.fake.take_calls();
    scene.process.spec.args = vec!["200".into()];
    scene.process.metadata.generation = Some(2);
    scene.pass().await;
    let id = scene.id();
    assert_eq!(
        scene.fake.take_calls(),
        [format!("get_process {id}"), format!("delete_process {id}"), format!("create_process {id}")]
    );
    assert_eq!(scene.fake.process(&id).unwrap().args, ["200"]);
    assert_eq!((scene.phase(), scene.restarts()), (Some(ProcessPhase::Running), 0));
}

#[tokio::test]
async fn a_process_that_exits_is_judged_by_its_restart_policy() {
    for (policy, code, phase, runs_again) in [
        ("Never", 0, ProcessPhase::Succeeded, false),
        ("Never", 3, ProcessPhase::Failed, false),
        ("OnFailure", 0, ProcessPhase::Succeeded, false),
        ("OnFailure", 3, ProcessPhase::Running, true),
        ("Always", 0, ProcessPhase::Running, true),
        ("Always", 3, ProcessPhase::Running, true),
    ] {
        let mut scene = Scene::new(&format!("{{command: sh, restartPolicy: {policy}}}"));
        scene.pass().await;
        scene.fake.exit(&scene.id(), code);
        scene.fake.take_calls();
        scene.pass().await;
        let created = scene.fake.count("create_process");
        assert_eq!((scene.phase(), created == 1), (Some(phase), runs_again), "{policy} exiting with {code}");
        assert_eq!(scene.restarts(), u32::from(runs_again), "{policy} exiting with {code}");
        if !runs_again {
            let status = scene.process.status.as_ref().unwrap();
            assert_eq!(status.exit_code, Some(code), "{policy} exiting with {code}");
        }
    }
}

#[tokio::test]
async fn restarts_back_off_from_the_exit_and_run_when_due() {
    let mut scene = Scene::new("{command: sh, restartPolicy: Always}");
    scene.pass().await;
    // The first restart is at once.
    scene.fake.exit(&scene.id(), 1);
    scene.pass().await;
    assert_eq!((scene.phase(), scene.restarts()), (Some(ProcessPhase::Running), 1));
    // The second waits the initial back-off, counted from the exit, not from the pass.
    scene.fake.exit(&scene.id(), 1);
    scene.fake.take_calls();
    let wait = scene.pass().await.expect("looked at again when due");
    assert_eq!(scene.phase(), Some(ProcessPhase::BackOff));
    assert!(wait > Duration::from_secs(8) && wait <= Duration::from_secs(10), "{wait:?}");
    assert_eq!(scene.fake.count("create_process"), 0);
    scene.exited_ago(Duration::from_secs(4));
    let wait = scene.pass().await.expect("still backing off");
    assert!(wait > Duration::from_secs(4) && wait <= Duration::from_secs(6), "{wait:?}");
    scene.exited_ago(Duration::from_secs(11));
    scene.pass().await;
    assert_eq!((scene.phase(), scene.restarts()), (Some(ProcessPhase::Running), 2));
    assert_eq!(scene.fake.count("create_process"), 1);
}

#[tokio::test]
async fn a_node_agent_that_restarted_lost_the_run_and_only_a_restart_policy_runs_it_again() {
    for (policy, runs_again) in [("Never", false), ("OnFailure", true), ("Always", true)] {
        let mut scene = Scene::new(&format!("{{command: sleep, args: ['100'], restartPolicy: {policy}}}"));
        scene.pass().await;
        scene.fake.restart();
        scene.fake.take_calls();
        scene.pass().await;
        assert_eq!(scene.fake.count("create_process"), usize::from(runs_again), "{policy}");
        if runs_again {
            assert_eq!((scene.phase(), scene.restarts()), (Some(ProcessPhase::Running), 1), "{policy}");
        } else {
            assert_eq!(scene.phase(), Some(ProcessPhase::Failed));
            assert_eq!(scene.ready(), ("False".into(), NODE_AGENT_LOST.into()));
            // And stays so: later passes never run it.
            scene.pass().await;
            scene.pass().await;
            assert_eq!(scene.fake.count("create_process"), 0);
        }
    }
}

#[tokio::test]
async fn an_unreachable_node_agent_is_said_and_looked_at_again_without_losing_the_status() {
    let mut scene = Scene::new("{command: sleep, args: ['100']}");
    scene.pass().await;
    let pid = scene.process.status.as_ref().unwrap().pid;
    scene.fake.set_unreachable(true);
    let again = scene.pass().await;
    assert!(again.is_some());
    // Unknown: whether it still runs cannot be told.
    assert_eq!(scene.ready(), ("Unknown".into(), "NodeAgentUnreachable".into()));
    assert_eq!(scene.process.status.as_ref().unwrap().pid, pid, "what is known is kept");
    scene.fake.set_unreachable(false);
    scene.pass().await;
    assert_eq!(scene.ready(), ("True".into(), "Running".into()));
    assert_eq!(scene.fake.count("create_process"), 1, "never a second run");
}

#[tokio::test]
async fn stopped_as_desired_is_stopped_and_recorded_then_started_again_fresh() {
    let mut scene = Scene::new("{command: sleep, args: ['100']}");
    scene.pass().await;
    scene.process.spec.desired_state = DesiredState::Stopped;
    scene.pass().await;
    assert_eq!(scene.phase(), Some(ProcessPhase::Stopped));
    assert_eq!(scene.ready(), ("True".into(), "Stopped".into()));
    assert!(scene.process.status.as_ref().unwrap().signal.is_some(), "the stop is recorded");
    scene.process.spec.desired_state = DesiredState::Running;
    scene.fake.take_calls();
    scene.pass().await;
    assert_eq!(scene.phase(), Some(ProcessPhase::Running));
    assert_eq!(scene.fake.count("create_process"), 1);
}

#[tokio::test]
async fn deletion_stops_what_runs_and_is_done_when_nothing_is_left_or_nothing_was_known() {
    let mut scene = Scene::new("{command: sleep, args: ['100']}");
    scene.pass().await;
    scene.fake.set_unreachable(true);
    assert!(scene.reconciler.cleanup(&scene.process).await.is_err(), "not done while its node agent cannot be told");
    scene.fake.set_unreachable(false);
    scene.reconciler.cleanup(&scene.process).await.unwrap();
    assert!(scene.fake.process(&scene.id()).is_none(), "stopped and forgotten");
    // Again, when already gone: done.
    scene.reconciler.cleanup(&scene.process).await.unwrap();
    // On a sandbox never known: nothing can run there.
    scene.process.spec.sandbox = "elsewhere".into();
    scene.reconciler.cleanup(&scene.process).await.unwrap();
}

#[tokio::test]
async fn a_sweep_stops_only_the_runs_this_store_started_for_processes_it_no_longer_has() {
    let mut scene = Scene::new("{command: sleep, args: ['100']}");
    scene.pass().await;
    // Runs it must leave alone, beside the Process's own.
    let run = |id: &str, resource: Option<&str>, uid: &str| {
        let mut annotations = BTreeMap::new();
        if let Some(resource) = resource {
            annotations.insert(crate::annotations::RESOURCE.to_string(), resource.to_string());
            annotations.insert(crate::annotations::UID.to_string(), uid.to_string());
        }
        let request = agentplane_node_agent::model::CreateProcessRequest {
            id: Some(id.into()),
            command: "sleep".into(),
            annotations,
            ..Default::default()
        };
        let fake = Arc::clone(&scene.fake);
        async move { fake.create_process(&request).await.unwrap() }
    };
    run("by-hand", None, "").await;
    run("proc-u2", Some("Process/elsewhere/x"), "u2").await;
    run("named-otherwise", Some("Process/default/y"), "u3").await;
    run("proc-u4", Some("Session/default/s"), "u4").await;
    run("proc-u5", Some("not a key"), "u5").await;
    let all = ["by-hand", "proc-u2", "named-otherwise", "proc-u4", "proc-u5"];
    let watched = |namespace: &str| namespace == "default";
    let node = Arc::clone(&scene.fake) as Arc<dyn NodeAgent>;
    let sweep = |live: &[&str]| {
        let live: std::collections::HashSet<String> = live.iter().map(|s| s.to_string()).collect();
        let (reconciler, node) = (&scene.reconciler, Arc::clone(&node));
        async move { reconciler.sweep(node.as_ref(), || live, watched).await.unwrap() }
    };

    // Its Process is there: nothing stopped.
    assert_eq!(sweep(&[UID]).await, 0);
    assert!(scene.fake.process(&scene.id()).is_some());
    // Its Process is gone: its run is stopped and forgotten, and only it.
    scene.fake.take_calls();
    assert_eq!(sweep(&[]).await, 1);
    assert!(scene.fake.process(&scene.id()).is_none(), "the gone Process's run outlived it");
    for id in all {
        assert!(scene.fake.process(id).is_some(), "{id} was not this store's to stop");
    }
    assert_eq!(scene.fake.take_calls(), ["list_processes ".to_string(), format!("delete_process {}", scene.id())]);
    // Its node agent unreachable: said, and nothing assumed.
    scene.fake.set_unreachable(true);
    assert!(scene.reconciler.sweep(node.as_ref(), Default::default, watched).await.is_err());
}

#[test]
fn the_policy_names_are_those_of_the_crd() {
    // The scenarios above write policies as YAML: they must parse as the CRD's.
    let policy: RestartPolicy = serde_yaml_ng::from_str("OnFailure").unwrap();
    assert_eq!(policy, RestartPolicy::OnFailure);
}
