//! The `agentplane` binary's tests, one binary: the resource verbs, `up` on real
//! folders, the cluster store on a real kube-apiserver (one, shared by every test that
//! needs it, each in namespaces of its own), the CLI against real node agents.
//!
//! One binary links the crate's dependencies once; its tests run in parallel
//! threads (see docs/testing.md for the groups that must not).

mod common;
mod dir_up;
mod view_common;

mod acp;
mod agent_cli;
mod cli;
mod convert_cli;
mod cp;
mod credentials;
mod dir_hostile;
mod docs;
mod durable;
mod edit_concurrency;
mod edit_verbs;
mod inspector;
mod kube;
mod kube_cli;
mod kube_egress;
mod kube_sandboxes;
mod manifests;
mod metrics_cli;
mod register;
mod resources;
mod restart_session;
mod sandboxes;
mod session_cli;
mod suspend;
mod up;
mod up_log_names;
mod view_get;
mod view_logs;
mod workspace_git;
